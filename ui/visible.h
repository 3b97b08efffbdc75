/* visible.h: control characters made visible (ESC as ^[, CR as ^M, U+009B as \u009b) so that
 * text from the model or a tool cannot move the cursor, retitle or clear the terminal. */
#ifndef GLMCHAT_UI_VISIBLE_H
#define GLMCHAT_UI_VISIBLE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* The visible form of code point cp when it is a control character other than newline and
 * tab (C0, DEL, C1): written to out (at most 7 bytes, NUL-terminated), its length returned;
 * 0 when cp is shown as itself. */
size_t visible_escape(uint32_t cp, char out[8]);

/* A stream of chunks that may split a UTF-8 sequence: the lead byte of a C1 control is held
 * until the next chunk shows what follows it. */
typedef struct visible_stream {
    int held; /* 1: a 0xC2 byte waits */
} visible_stream;

/* Writes n bytes of s to f with control characters escaped. 0, or -1 when writing failed. */
int visible_write_stream(FILE *f, visible_stream *vs, const char *s, size_t n);
/* Writes what the stream still holds (at the end of a text). */
int visible_flush(FILE *f, visible_stream *vs);
/* One complete text. */
int visible_write(FILE *f, const char *s, size_t n);

#endif
