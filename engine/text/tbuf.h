/* tbuf.h: a growable byte buffer shared by glmchat's text layer (tokenizer, template, parser).
 * Appends return GLM_OK or GLM_ERR_NOMEM; the buffer stays NUL-terminated after any append. */
#ifndef GLMCHAT_TEXT_TBUF_H
#define GLMCHAT_TEXT_TBUF_H

#include <stddef.h>

#include "glm.h"

typedef struct tbuf {
    char *p;
    size_t len, cap;
} tbuf;

glm_status tbuf_reserve(tbuf *b, size_t extra);
glm_status tbuf_append(tbuf *b, const void *data, size_t len);
glm_status tbuf_puts(tbuf *b, const char *s);
glm_status tbuf_putc(tbuf *b, char c);
/* Appends s[0..n) with every invalid stretch repaired by base/utf8.h's one policy (one U+FFFD per
 * maximal invalid subpart). When final is 0, a trailing incomplete-but-valid prefix is not
 * appended: *held says how many bytes were kept back (see utf8_repair). */
glm_status tbuf_append_utf8(tbuf *b, const char *s, size_t n, int final, size_t *held);
void tbuf_clear(tbuf *b);
void tbuf_free(tbuf *b);

#endif
