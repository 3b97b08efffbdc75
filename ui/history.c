/* history.c: the input history file (history.h): escaped entries, one a line.
 * Appends are one write(2) with O_APPEND, so two glmchat processes never interleave lines. */
#include "ui/history.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

char *hist_escape(const char *entry)
{
    size_t n = 0;
    for (const char *p = entry; *p; p++)
        n += (*p == '\n' || *p == '\\' || *p == '\r') ? 2 : 1;
    char *out = malloc(n + 1), *o = out;
    if (!out)
        return NULL;
    for (const char *p = entry; *p; p++) {
        if (*p == '\n') {
            *o++ = '\\', *o++ = 'n';
        } else if (*p == '\r') {
            *o++ = '\\', *o++ = 'r';
        } else if (*p == '\\') {
            *o++ = '\\', *o++ = '\\';
        } else {
            *o++ = *p;
        }
    }
    *o = '\0';
    return out;
}

char *hist_unescape(const char *line)
{
    char *out = malloc(strlen(line) + 1), *o = out;
    if (!out)
        return NULL;
    for (const char *p = line; *p; p++) {
        if (*p == '\\' && p[1]) {
            p++;
            *o++ = *p == 'n' ? '\n' : *p == 'r' ? '\r' : *p;
        } else {
            *o++ = *p;
        }
    }
    *o = '\0';
    return out;
}

typedef struct hist_lines {
    char **v;
    size_t n, start, max; /* a ring of the newest max lines */
} hist_lines;

/* Reads every line of path into a ring of the newest max. 1 when the file is missing. */
static int read_ring(const char *path, hist_lines *r, char *err, size_t errlen)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        if (errno == ENOENT)
            return 1;
        snprintf(err, errlen, "cannot read the history file %s: %s", path, strerror(errno));
        return -1;
    }
    r->v = calloc(r->max ? r->max : 1, sizeof *r->v);
    if (!r->v) {
        fclose(f);
        snprintf(err, errlen, "out of memory reading the history file %s", path);
        return -1;
    }
    char *line = NULL;
    size_t cap = 0;
    ssize_t got;
    while ((got = getline(&line, &cap, f)) >= 0) {
        if (got > 0 && line[got - 1] == '\n')
            line[--got] = '\0';
        if (got == 0 || r->max == 0)
            continue;
        char *e = strdup(line);
        if (!e)
            break;
        size_t slot = (r->start + r->n) % r->max;
        if (r->n == r->max) {
            free(r->v[r->start]);
            r->start = (r->start + 1) % r->max;
            slot = (r->start + r->n - 1) % r->max;
        } else {
            r->n++;
        }
        r->v[slot] = e;
    }
    free(line);
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        snprintf(err, errlen, "error reading the history file %s", path);
        return -1;
    }
    return 0;
}

static void free_ring(hist_lines *r)
{
    for (size_t i = 0; i < r->max && r->v; i++)
        free(r->v[i]);
    free(r->v);
}

int hist_load(const char *path, size_t max, hist_entry_fn fn, void *user, char *err,
              size_t errlen)
{
    hist_lines r = {NULL, 0, 0, max};
    int rc = read_ring(path, &r, err, errlen);
    if (rc != 0) {
        free_ring(&r);
        return rc < 0 ? -1 : 0;
    }
    for (size_t i = 0; i < r.n; i++) {
        char *e = hist_unescape(r.v[(r.start + i) % r.max]);
        if (!e)
            break;
        fn(e, user);
        free(e);
    }
    free_ring(&r);
    return 0;
}

int hist_append(const char *path, const char *entry, char *err, size_t errlen)
{
    char *esc = hist_escape(entry);
    if (!esc) {
        snprintf(err, errlen, "out of memory saving history");
        return -1;
    }
    size_t n = strlen(esc);
    esc[n] = '\n'; /* replaces the NUL: written with its length */
    int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
    int rc = -1;
    if (fd < 0) {
        snprintf(err, errlen, "cannot open the history file %s: %s", path, strerror(errno));
    } else if (write(fd, esc, n + 1) != (ssize_t)(n + 1)) {
        snprintf(err, errlen, "cannot write the history file %s: %s", path, strerror(errno));
    } else {
        rc = 0;
    }
    if (fd >= 0 && close(fd) < 0 && rc == 0) {
        snprintf(err, errlen, "cannot write the history file %s: %s", path, strerror(errno));
        rc = -1;
    }
    free(esc);
    return rc;
}

int hist_trim(const char *path, size_t max, char *err, size_t errlen)
{
    hist_lines r = {NULL, 0, 0, max};
    int rc = read_ring(path, &r, err, errlen);
    if (rc != 0) {
        free_ring(&r);
        return rc < 0 ? -1 : 0;
    }
    char tmp[4200];
    if (snprintf(tmp, sizeof tmp, "%s.tmp", path) >= (int)sizeof tmp) {
        snprintf(err, errlen, "history path too long: %s", path);
        free_ring(&r);
        return -1;
    }
    FILE *f = fopen(tmp, "w");
    if (!f) {
        snprintf(err, errlen, "cannot write %s: %s", tmp, strerror(errno));
        free_ring(&r);
        return -1;
    }
    for (size_t i = 0; i < r.n; i++)
        fprintf(f, "%s\n", r.v[(r.start + i) % r.max]);
    rc = 0;
    if (fclose(f) != 0 || rename(tmp, path) != 0) {
        snprintf(err, errlen, "cannot replace the history file %s: %s", path, strerror(errno));
        unlink(tmp);
        rc = -1;
    }
    free_ring(&r);
    return rc;
}
