/* codeblock.c: finds a reply's fenced code blocks where the renderer draws them and cuts out a
 * block's text for the clipboard (codeblock.h). */
#include <stdlib.h>
#include <string.h>

#include "ui/codeblock.h"
#include "ui/render.h"

/* The end of the line starting at i (its '\n' or len), without a trailing '\r'. */
static size_t content_end(const char *s, size_t len, size_t i, size_t *next)
{
    const char *nl = memchr(s + i, '\n', len - i);
    size_t e = nl ? (size_t)(nl - s) : len;
    *next = nl ? e + 1 : len;
    if (e > i && s[e - 1] == '\r')
        e--;
    return e;
}

static void set_lang(cb_block *b, const char *info, size_t n)
{
    size_t w = 0;
    while (w < n && info[w] != ' ' && info[w] != '\t' && info[w] != '{' && w + 1 < sizeof b->lang)
        w++;
    memcpy(b->lang, info, w);
    b->lang[w] = '\0';
}

static int push(cb_block **v, size_t *n, size_t *cap, const cb_block *b)
{
    if (*n == *cap) {
        size_t nc = *cap ? *cap * 2 : 4;
        cb_block *g = realloc(*v, nc * sizeof *g);
        if (!g)
            return -1;
        *v = g;
        *cap = nc;
    }
    (*v)[(*n)++] = *b;
    return 0;
}

int cb_find(const char *s, size_t len, cb_block **out, size_t *n)
{
    *out = NULL;
    *n = 0;
    size_t cap = 0;
    rd_md_state st = {0};
    cb_block cur = {0};
    int open = 0;
    for (size_t i = 0; i < len;) {
        size_t next;
        size_t e = content_end(s, len, i, &next);
        rd_line_class c = rd_md_classify(s + i, e - i, &st);
        if (c.kind == RD_L_FENCE_OPEN) {
            memset(&cur, 0, sizeof cur);
            cur.first = next;
            cur.indent = c.indent;
            set_lang(&cur, s + i + c.body, e - i - c.body);
            open = 1;
        } else if (c.kind == RD_L_FENCE_CLOSE && open) {
            cur.end = i;
            open = 0;
            if (push(out, n, &cap, &cur) < 0)
                goto oom;
        } else if (c.kind == RD_L_CODE && open) {
            cur.lines++;
        }
        i = next;
    }
    if (open) {
        cur.end = len;
        if (push(out, n, &cap, &cur) < 0)
            goto oom;
    }
    return 0;
oom:
    free(*out);
    *out = NULL;
    *n = 0;
    return -1;
}

char *cb_text(const char *s, const cb_block *b, size_t *len)
{
    char *o = malloc(b->end - b->first + 1);
    if (!o)
        return NULL;
    size_t k = 0;
    for (size_t i = b->first; i < b->end;) {
        size_t next;
        size_t e = content_end(s, b->end, i, &next);
        size_t skip = 0;
        while (skip < b->indent && i + skip < e && s[i + skip] == ' ')
            skip++;
        if (k > 0 || i > b->first)
            o[k++] = '\n';
        memcpy(o + k, s + i + skip, e - i - skip);
        k += e - i - skip;
        i = next;
    }
    o[k] = '\0';
    *len = k;
    return o;
}
