/* utf8.h: glmchat's one UTF-8 decoder, validator and repair, shared by the engine's text layer,
 * storage, the views and the app's jsonl writer, so that every layer shows a bad byte the same way.
 *
 * REPAIR POLICY: each maximal invalid subpart becomes one U+FFFD (Unicode chapter 3, "U+FFFD
 * substitution of maximal subparts"; what Python's errors="replace", Rust's from_utf8_lossy and
 * the WHATWG decoder do, and so what the model's reference tokenizer produces). A maximal subpart
 * is the longest prefix of a sequence that could still have become valid, or else one byte:
 *   - a byte that starts no sequence (80..BF alone, C0, C1, F5..FF) is one subpart;
 *   - an overlong form (E0 80.., F0 80..), a surrogate (ED A0..) or a value above U+10FFFF
 *     (F4 90..) is refused at its second byte: the lead byte alone is one subpart, and each of
 *     the bytes after it is then judged on its own (usually one U+FFFD each);
 *   - a sequence cut short by another byte ("E2 82 x") is one subpart: one U+FFFD, then the byte;
 *   - a sequence cut short by the end of the input is one subpart, except where a caller streams
 *     and holds the tail back for the next piece (utf8_repair with final 0).
 * NUL is valid UTF-8 here; storage refuses it on its own account (it cannot sit in a C string). */
#ifndef GLMCHAT_BASE_UTF8_H
#define GLMCHAT_BASE_UTF8_H

#include <stddef.h>
#include <stdint.h>

/* The encoding of U+FFFD, the replacement character. */
#define UTF8_REPLACEMENT "\xef\xbf\xbd"

/* Length of the valid sequence at s[0..n) (1-4), or 0 when s starts a maximal invalid subpart of
 * *bad bytes (bad >= 1), or -1 when s[0..n) is a valid but incomplete prefix of a sequence.
 * n must be at least 1. */
int utf8_seq(const unsigned char *s, size_t n, size_t *bad);

/* The code point of the valid sequence of length len (from utf8_seq) at s. */
uint32_t utf8_decode(const unsigned char *s, int len);

/* One step of the repair policy over s[0..n) (n >= 1): the code point at s in *cp (U+FFFD for an
 * invalid subpart, or for an incomplete sequence at the end), and how many bytes it took (>= 1). */
size_t utf8_next(const char *s, size_t n, uint32_t *cp);

/* Writes the UTF-8 form of cp to out and returns its length (1-4); a surrogate or a value above
 * U+10FFFF is written as U+FFFD. */
int utf8_encode(uint32_t cp, char out[4]);

/* 1 when s[0..n) is entirely valid UTF-8. */
int utf8_valid(const char *s, size_t n);

/* The most bytes utf8_repair writes for n bytes of input (one byte may become U+FFFD's three). */
#define UTF8_REPAIR_MAX(n) (3 * (n))

/* Writes s[0..n) to out (room for UTF8_REPAIR_MAX(n) bytes) with every maximal invalid subpart
 * replaced by U+FFFD; returns the bytes written (no NUL is added). When final is 0, a trailing
 * incomplete-but-valid prefix is not written: *held (when not NULL) says how many bytes were kept
 * back for the caller to pass again with what follows. */
size_t utf8_repair(const char *s, size_t n, int final, char *out, size_t *held);

/* The longest prefix of s[0..n) of at most max bytes that ends between two units of the repair
 * policy (a valid character or a maximal invalid subpart), so a cut never splits a character. */
size_t utf8_prefix(const char *s, size_t n, size_t max);

#endif
