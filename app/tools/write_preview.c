/* write_preview.c: what write_file will do, for its approval question: a unified diff of the
 * new content against the file on disk, or the first lines of a new file. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "app/tools/builtin.h"

#define PREVIEW_CONTEXT 3     /* unchanged lines shown around the change */
#define PREVIEW_LINES 40      /* removed or added lines shown, each side */
#define PREVIEW_NEW_LINES 20  /* first lines of a new file */

typedef struct lines {
    const char **at; /* where each line starts */
    size_t *len;     /* its length without the newline */
    size_t n;
} lines;

static int split_lines(const char *s, size_t n, lines *out)
{
    size_t count = 0;
    for (size_t i = 0; i < n; i++)
        count += s[i] == '\n';
    count += n > 0 && s[n - 1] != '\n';
    out->at = malloc((count ? count : 1) * sizeof *out->at);
    out->len = malloc((count ? count : 1) * sizeof *out->len);
    out->n = 0;
    if (!out->at || !out->len)
        return -1;
    for (size_t i = 0; i < n;) {
        const char *nl = memchr(s + i, '\n', n - i);
        size_t len = nl ? (size_t)(nl - (s + i)) : n - i;
        out->at[out->n] = s + i;
        out->len[out->n++] = len;
        i += len + 1;
    }
    return 0;
}

static void lines_free(lines *l)
{
    free(l->at);
    free(l->len);
}

static int same_line(const lines *a, size_t i, const lines *b, size_t j)
{
    return a->len[i] == b->len[j] && memcmp(a->at[i], b->at[j], a->len[i]) == 0;
}

typedef struct out_buf {
    char *s;
    size_t len;
    int failed;
} out_buf;

static void add(out_buf *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void add(out_buf *o, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *piece = NULL;
    int n = vasprintf(&piece, fmt, ap);
    va_end(ap);
    char *grown = n < 0 ? NULL : realloc(o->s, o->len + (size_t)n + 1);
    if (!grown) {
        o->failed = 1;
        free(n < 0 ? NULL : piece);
        return;
    }
    memcpy(grown + o->len, piece, (size_t)n + 1);
    o->s = grown;
    o->len += (size_t)n;
    free(piece);
}

/* Lines [from, to) of l, each after mark; at most max of them, then a count of the rest. */
static void add_lines(out_buf *o, const lines *l, size_t from, size_t to, char mark, size_t max, const char *what)
{
    for (size_t i = from; i < to && i - from < max; i++)
        add(o, "%c%.*s\n", mark, (int)l->len[i], l->at[i]);
    if (to - from > max)
        add(o, "%c... (%zu more lines %s)\n", mark, to - from - max, what);
}

/* One hunk around the changed middle: the lines both texts share at the start and the end are
 * context, the rest removed and added. Correct, though not always the shortest diff. */
static void unified_diff(out_buf *o, const char *path, const lines *a, const lines *b)
{
    size_t pre = 0, post = 0;
    while (pre < a->n && pre < b->n && same_line(a, pre, b, pre))
        pre++;
    while (post < a->n - pre && post < b->n - pre && same_line(a, a->n - 1 - post, b, b->n - 1 - post))
        post++;
    if (pre == a->n && pre == b->n) {
        add(o, "%s: no change (the same content)\n", path);
        return;
    }
    size_t before = pre < PREVIEW_CONTEXT ? pre : PREVIEW_CONTEXT;
    size_t after = post < PREVIEW_CONTEXT ? post : PREVIEW_CONTEXT;
    size_t a_len = before + (a->n - pre - post) + after, b_len = before + (b->n - pre - post) + after;
    size_t a_start = pre - before + (a_len ? 1 : 0), b_start = pre - before + (b_len ? 1 : 0);
    add(o, "--- a/%s\n+++ b/%s\n@@ -%zu,%zu +%zu,%zu @@\n", path, path, a_start, a_len, b_start, b_len);
    add_lines(o, a, pre - before, pre, ' ', PREVIEW_CONTEXT, "");
    add_lines(o, a, pre, a->n - post, '-', PREVIEW_LINES, "removed");
    add_lines(o, b, pre, b->n - post, '+', PREVIEW_LINES, "added");
    add_lines(o, a, a->n - post, a->n - post + after, ' ', PREVIEW_CONTEXT, "");
}

/* The file's content, or NULL with *missing set when it does not exist. */
static char *read_old(const char *full, size_t *len, int *missing, char *why, size_t whylen)
{
    *missing = 0;
    FILE *f = fopen(full, "rb");
    if (!f) {
        *missing = errno == ENOENT;
        snprintf(why, whylen, "%s", strerror(errno));
        return NULL;
    }
    struct stat st;
    if (fstat(fileno(f), &st) != 0) {
        snprintf(why, whylen, "%s", strerror(errno));
        fclose(f);
        return NULL;
    }
    if (st.st_size > BUILTIN_WRITE_MAX) {
        snprintf(why, whylen, "it replaces a file of %lld bytes", (long long)st.st_size);
        fclose(f);
        return NULL;
    }
    char *s = malloc((size_t)st.st_size + 1);
    *len = s ? fread(s, 1, (size_t)st.st_size, f) : 0;
    if (!s || ferror(f)) {
        snprintf(why, whylen, "cannot read it");
        free(s);
        s = NULL;
    }
    fclose(f);
    return s;
}

static void new_file(out_buf *o, const char *path, const char *content, size_t n)
{
    lines l = {0};
    if (split_lines(content, n, &l)) {
        o->failed = 1;
    } else {
        add(o, "new file %s (%zu lines, %zu bytes):\n", path, l.n, n);
        add_lines(o, &l, 0, l.n, '+', PREVIEW_NEW_LINES, "");
    }
    lines_free(&l);
}

char *builtin_write_preview(void *vctx, const cJSON *args)
{
    builtin_ctx *ctx = vctx;
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(args, "path");
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(args, "content");
    if (!cJSON_IsString(p) || !cJSON_IsString(c) || !p->valuestring || !c->valuestring)
        return NULL;
    const char *path = p->valuestring, *content = c->valuestring;
    size_t n = strlen(content);
    out_buf o = {0};
    char full[PATH_MAX], err[PATH_MAX + 200];
    if (workspace_resolve_new(&ctx->ws, path, full, sizeof full, err, sizeof err)) {
        add(&o, "write %zu bytes to %s (it will fail: %s)\n", n, path, err);
        return o.failed ? (free(o.s), NULL) : o.s;
    }
    size_t old_len = 0;
    int missing;
    char why[160];
    char *old = read_old(full, &old_len, &missing, why, sizeof why);
    if (!old && missing) {
        new_file(&o, path, content, n);
    } else if (!old || memchr(old, 0, old_len) || memchr(content, 0, n)) {
        add(&o, "replace %s with %zu bytes (%s)\n", path, n, old ? "a binary file" : why);
    } else {
        lines a = {0}, b = {0};
        if (split_lines(old, old_len, &a) || split_lines(content, n, &b))
            o.failed = 1;
        else
            unified_diff(&o, path, &a, &b);
        lines_free(&a);
        lines_free(&b);
    }
    free(old);
    if (o.failed) {
        free(o.s);
        return NULL;
    }
    return o.s;
}
