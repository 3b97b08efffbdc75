/* utf8.h: UTF-8 validation and repair for glmchat's text layer.
 * Invalid input is repaired the way Python's errors="replace" and Rust's from_utf8_lossy do it:
 * each maximal invalid subpart (Unicode's recommended practice) becomes one U+FFFD. */
#ifndef GLMCHAT_TEXT_UTF8_H
#define GLMCHAT_TEXT_UTF8_H

#include <stddef.h>
#include <stdint.h>

#include "engine/text/tbuf.h"

/* Length of the valid sequence at s[0..n) (1-4), or 0 when s starts a maximal invalid subpart of
 * *bad bytes (bad >= 1), or -1 when s[0..n) is a valid but incomplete prefix of a sequence. */
int utf8_seq(const unsigned char *s, size_t n, size_t *bad);

/* Decodes the valid sequence of length len at s. */
uint32_t utf8_decode(const unsigned char *s, int len);

/* Appends the UTF-8 form of code point cp (< 0x110000, not a surrogate) to out; returns bytes. */
int utf8_encode(uint32_t cp, char out[4]);

/* 1 when s[0..n) is entirely valid UTF-8. */
int utf8_valid(const char *s, size_t n);

/* Appends s[0..n) to out with every maximal invalid subpart replaced by U+FFFD. When final is 0, a
 * trailing incomplete-but-valid prefix is not appended: *held says how many bytes were kept back. */
glm_status utf8_repair(const char *s, size_t n, int final, tbuf *out, size_t *held);

#endif
