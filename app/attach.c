/* attach.c: builds a prompt with documents after it (attach.h): stdin and files read whole,
 * checked for size and for NUL bytes, and fenced so their text cannot end the fence early. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "app/attach.h"

static int grow(attach_buf *b, size_t more, char *err, size_t errlen)
{
    if (b->len + more + 1 <= b->cap)
        return 0;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + more + 1)
        cap *= 2;
    char *t = realloc(b->text, cap);
    if (!t) {
        snprintf(err, errlen, "out of memory building the prompt");
        return -1;
    }
    b->text = t;
    b->cap = cap;
    return 0;
}

static int append(attach_buf *b, const char *s, size_t n, char *err, size_t errlen)
{
    if (grow(b, n, err, errlen))
        return -1;
    memcpy(b->text + b->len, s, n);
    b->len += n;
    b->text[b->len] = 0;
    return 0;
}

int attach_add_text(attach_buf *b, const char *text, char *err, size_t errlen)
{
    return append(b, text, strlen(text), err, errlen);
}

char *attach_read_stream(FILE *f, const char *label, size_t *len_out, char *err, size_t errlen)
{
    attach_buf b = {0};
    char chunk[65536];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0) {
        if (b.len + n > ATTACH_MAX_BYTES) {
            snprintf(err, errlen, "%s holds more than %d bytes, the most a document may be; cut it down first",
                     label, ATTACH_MAX_BYTES);
            attach_buf_free(&b);
            return NULL;
        }
        if (memchr(chunk, 0, n)) {
            snprintf(err, errlen, "%s holds a NUL byte: only text can be attached", label);
            attach_buf_free(&b);
            return NULL;
        }
        if (append(&b, chunk, n, err, errlen)) {
            attach_buf_free(&b);
            return NULL;
        }
    }
    if (ferror(f)) {
        snprintf(err, errlen, "cannot read %s: %s", label, strerror(errno));
        attach_buf_free(&b);
        return NULL;
    }
    if (!b.text && append(&b, "", 0, err, errlen))
        return NULL;
    *len_out = b.len;
    return b.text;
}

/* The longest run of backticks in s[0..len). */
static size_t longest_backticks(const char *s, size_t len)
{
    size_t best = 0, run = 0;
    for (size_t i = 0; i < len; i++) {
        run = s[i] == '`' ? run + 1 : 0;
        if (run > best)
            best = run;
    }
    return best;
}

int attach_add_document(attach_buf *b, const char *label, const char *body, size_t len, char *err,
                        size_t errlen)
{
    size_t ticks = longest_backticks(body, len) + 1;
    if (ticks < 3)
        ticks = 3;
    char fence[64];
    if (ticks >= sizeof fence) {
        snprintf(err, errlen, "%s has a run of %zu backticks; glmchat cannot fence it", label, ticks - 1);
        return -1;
    }
    memset(fence, '`', ticks);
    fence[ticks] = 0;
    int ends_nl = len > 0 && body[len - 1] == '\n';
    if ((b->len && append(b, "\n\n", 2, err, errlen)) || attach_add_text(b, label, err, errlen) ||
        append(b, ":\n", 2, err, errlen) || attach_add_text(b, fence, err, errlen) ||
        append(b, "\n", 1, err, errlen) || append(b, body, len, err, errlen) ||
        (!ends_nl && append(b, "\n", 1, err, errlen)) || attach_add_text(b, fence, err, errlen))
        return -1;
    return 0;
}

int attach_add_file(attach_buf *b, const workspace *ws, const char *path, char *err, size_t errlen)
{
    char full[PATH_MAX], why[PATH_MAX + 256];
    int where = workspace_resolve(ws, path, full, sizeof full, why, sizeof why);
    if (where == WORKSPACE_OUTSIDE) {
        snprintf(err, errlen, "cannot attach %s: it is outside the workspace %s, where attachments "
                 "and tools stay; start glmchat in a folder that holds it, or set `workspace = DIR` "
                 "in the config file", path, ws->root);
        return -1;
    }
    if (where) {
        snprintf(err, errlen, "cannot attach %s: %s", path, why);
        return -1;
    }
    FILE *f = fopen(full, "rb");
    if (!f) {
        snprintf(err, errlen, "cannot attach %s: %s", path, strerror(errno));
        return -1;
    }
    char label[PATH_MAX + 16];
    snprintf(label, sizeof label, "file %s", workspace_relative(ws, full));
    size_t len;
    char *body = attach_read_stream(f, label, &len, err, errlen);
    fclose(f);
    if (!body)
        return -1;
    int rc = attach_add_document(b, label, body, len, err, errlen);
    free(body);
    return rc;
}

void attach_buf_free(attach_buf *b)
{
    free(b->text);
    b->text = NULL;
    b->len = b->cap = 0;
}
