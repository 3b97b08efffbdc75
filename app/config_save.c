/* config_save.c: rewrites one top-level key of the config file (config_save.h), keeping every
 * other line as the user wrote it, through a synced temporary file and a rename. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "app/config_save.h"
#include "app/paths.h"

typedef struct text_buf {
    char *s;
    size_t len, cap;
} text_buf;

static int buf_add(text_buf *b, const char *s, size_t n)
{
    if (b->len + n + 1 > b->cap) {
        size_t cap = (b->len + n + 1) * 2;
        char *grown = realloc(b->s, cap);
        if (!grown)
            return -1;
        b->s = grown;
        b->cap = cap;
    }
    memcpy(b->s + b->len, s, n);
    b->len += n;
    b->s[b->len] = 0;
    return 0;
}

/* The whole file (an empty text when it does not exist). 0, or -1 with err. */
static int read_all(const char *path, text_buf *out, mode_t *mode, char *err, size_t errlen)
{
    *mode = 0600;
    FILE *f = fopen(path, "rb");
    if (!f) {
        if (errno == ENOENT)
            return buf_add(out, "", 0);
        snprintf(err, errlen, "cannot read %s: %s", path, strerror(errno));
        return -1;
    }
    struct stat st;
    if (fstat(fileno(f), &st) == 0)
        *mode = st.st_mode & 07777;
    char chunk[8192];
    size_t n;
    int bad = buf_add(out, "", 0);
    while (!bad && (n = fread(chunk, 1, sizeof chunk, f)) > 0)
        bad = buf_add(out, chunk, n);
    if (ferror(f) || bad) {
        snprintf(err, errlen, "cannot read %s: %s", path, bad ? "out of memory" : strerror(errno));
        fclose(f);
        return -1;
    }
    fclose(f);
    return 0;
}

/* Whether the line (len bytes, no newline) sets key: `key` then blanks then '='. */
static int line_sets(const char *line, size_t len, const char *key)
{
    size_t i = 0, k = strlen(key);
    while (i < len && (line[i] == ' ' || line[i] == '\t'))
        i++;
    if (len - i < k || memcmp(line + i, key, k) != 0)
        return 0;
    i += k;
    while (i < len && (line[i] == ' ' || line[i] == '\t'))
        i++;
    return i < len && line[i] == '=';
}

static int starts_section(const char *line, size_t len)
{
    size_t i = 0;
    while (i < len && (line[i] == ' ' || line[i] == '\t'))
        i++;
    return i < len && line[i] == '[';
}

/* The new text: old with key's top-level lines replaced by `setting`. */
static int rewrite(const text_buf *old, const char *key, const char *setting, text_buf *out)
{
    int placed = 0, in_section = 0;
    const char *p = old->s, *end = old->s + old->len;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t len = nl ? (size_t)(nl - p) : (size_t)(end - p);
        if (!in_section && starts_section(p, len)) {
            in_section = 1;
            if (!placed && buf_add(out, setting, strlen(setting)))
                return -1;
            placed = 1;
        }
        int mine = !in_section && line_sets(p, len, key);
        if (mine && !placed && buf_add(out, setting, strlen(setting)))
            return -1;
        placed |= mine;
        if (!mine && (buf_add(out, p, len) || buf_add(out, "\n", 1)))
            return -1;
        p += len + (nl ? 1 : 0);
    }
    if (!placed && buf_add(out, setting, strlen(setting)))
        return -1;
    return 0;
}

static int write_replacing(const char *path, const text_buf *text, mode_t mode, char *err, size_t errlen)
{
    char tmp[PATH_MAX];
    int w = snprintf(tmp, sizeof tmp, "%s.tmp-%ld", path, (long)getpid());
    if (w < 0 || (size_t)w >= sizeof tmp) {
        snprintf(err, errlen, "the config file path %s is too long", path);
        return -1;
    }
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
    if (fd < 0) {
        snprintf(err, errlen, "cannot write %s: %s", tmp, strerror(errno));
        return -1;
    }
    size_t done = 0;
    while (done < text->len) {
        ssize_t n = write(fd, text->s + done, text->len - done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        done += (size_t)n;
    }
    int failed = done < text->len || fsync(fd) != 0;
    int saved_errno = errno;
    if (close(fd) != 0 && !failed) {
        failed = 1;
        saved_errno = errno;
    }
    if (failed || rename(tmp, path) != 0) {
        snprintf(err, errlen, "cannot write %s: %s", path, strerror(failed ? saved_errno : errno));
        unlink(tmp);
        return -1;
    }
    return 0;
}

static int make_parent(const char *path, char *err, size_t errlen)
{
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (!slash || slash == dir)
        return 0;
    *slash = 0;
    if (paths_mkdirs(dir) != 0) {
        snprintf(err, errlen, "cannot create %s: %s", dir, strerror(errno));
        return -1;
    }
    return 0;
}

int config_save_top_key(const char *path, const char *key, const char *value, char *err, size_t errlen)
{
    if (strchr(value, '\n') || strlen(path) >= PATH_MAX) {
        snprintf(err, errlen, "cannot save %s in %s: the value or the path is malformed", key, path);
        return -1;
    }
    text_buf old = {0}, out = {0};
    mode_t mode;
    char *setting = NULL;
    int rc = -1;
    if (make_parent(path, err, errlen) || read_all(path, &old, &mode, err, errlen))
        goto done;
    if (asprintf(&setting, "%s = %s\n", key, value) < 0) {
        setting = NULL;
        snprintf(err, errlen, "out of memory");
        goto done;
    }
    if (rewrite(&old, key, setting, &out) || buf_add(&out, "", 0)) {
        snprintf(err, errlen, "out of memory");
        goto done;
    }
    rc = write_replacing(path, &out, mode, err, errlen);
done:
    free(setting);
    free(old.s);
    free(out.s);
    return rc;
}
