/* tbuf.c: the growable byte buffer of glmchat's text layer.
 * Doubling growth; an empty buffer owns no memory until the first append. */
#include "engine/text/tbuf.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/utf8.h"

glm_status tbuf_reserve(tbuf *b, size_t extra)
{
    if (b->len + extra + 1 <= b->cap)
        return GLM_OK;
    size_t cap = b->cap ? b->cap : 64;
    while (cap < b->len + extra + 1)
        cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p)
        return GLM_ERR_NOMEM;
    b->p = p;
    b->cap = cap;
    return GLM_OK;
}

glm_status tbuf_append(tbuf *b, const void *data, size_t len)
{
    if (tbuf_reserve(b, len) != GLM_OK)
        return GLM_ERR_NOMEM;
    if (len)
        memcpy(b->p + b->len, data, len);
    b->len += len;
    b->p[b->len] = '\0';
    return GLM_OK;
}

glm_status tbuf_append_utf8(tbuf *b, const char *s, size_t n, int final, size_t *held)
{
    if (n > (SIZE_MAX - 1 - b->len) / 3 || tbuf_reserve(b, UTF8_REPAIR_MAX(n)) != GLM_OK)
        return GLM_ERR_NOMEM;
    b->len += utf8_repair(s, n, final, b->p + b->len, held);
    b->p[b->len] = '\0';
    return GLM_OK;
}

glm_status tbuf_puts(tbuf *b, const char *s)
{
    return tbuf_append(b, s, strlen(s));
}

glm_status tbuf_putc(tbuf *b, char c)
{
    return tbuf_append(b, &c, 1);
}

void tbuf_clear(tbuf *b)
{
    b->len = 0;
    if (b->p)
        b->p[0] = '\0';
}

void tbuf_free(tbuf *b)
{
    free(b->p);
    b->p = NULL;
    b->len = b->cap = 0;
}
