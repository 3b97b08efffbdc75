/* bytes.c: byte helpers for storage: strict UTF-8 validation (what JSON may carry as a string),
 * cutting text at a character boundary, and base64 for bytes that are not UTF-8. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/utf8.h"
#include "storage/db_internal.h"

/* UTF-8 follows base/utf8.h's one repair policy; storage adds one rule of its own: NUL is refused
 * (and shown as U+FFFD), because a stored string travels as a C string and through cJSON. */
int bytes_valid_utf8(const char *s, size_t len)
{
    return !memchr(s, '\0', len) && utf8_valid(s, len);
}

char *bytes_dup(const char *s, size_t len)
{
    char *out = malloc(len + 1);
    if (!out)
        return NULL;
    if (len)
        memcpy(out, s, len);
    out[len] = '\0';
    return out;
}

static const char base64_alphabet[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

char *bytes_base64_encode(const char *s, size_t len, size_t *outlen)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t n = (len + 2) / 3 * 4;
    char *out = malloc(n + 1);
    if (!out)
        return NULL;
    size_t o = 0;
    for (size_t i = 0; i < len; i += 3) {
        unsigned v = (unsigned)p[i] << 16;
        if (i + 1 < len)
            v |= (unsigned)p[i + 1] << 8;
        if (i + 2 < len)
            v |= p[i + 2];
        out[o++] = base64_alphabet[v >> 18 & 63];
        out[o++] = base64_alphabet[v >> 12 & 63];
        out[o++] = i + 1 < len ? base64_alphabet[v >> 6 & 63] : '=';
        out[o++] = i + 2 < len ? base64_alphabet[v & 63] : '=';
    }
    out[o] = '\0';
    *outlen = o;
    return out;
}

static int base64_value(unsigned char c)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    if (c == '+')
        return 62;
    if (c == '/')
        return 63;
    return -1;
}

/* Strict: length a multiple of 4, padding only at the end, no other characters. */
char *bytes_base64_decode(const char *s, size_t len, size_t *outlen, int *bad)
{
    *bad = 1;
    if (len % 4 != 0)
        return NULL;
    size_t pad = 0;
    if (len >= 1 && s[len - 1] == '=')
        pad++;
    if (len >= 2 && s[len - 2] == '=')
        pad++;
    size_t n = len / 4 * 3 - pad;
    char *out = malloc(n + 1);
    if (!out) {
        *bad = 0;
        return NULL;
    }
    size_t o = 0;
    for (size_t i = 0; i < len; i += 4) {
        int v[4];
        int last = i + 4 == len;
        for (int k = 0; k < 4; k++) {
            unsigned char c = (unsigned char)s[i + k];
            if (c == '=' && last && k >= 2 && (k == 3 || s[i + 3] == '=')) {
                v[k] = 0;
                continue;
            }
            v[k] = base64_value(c);
            if (v[k] < 0) {
                free(out);
                return NULL;
            }
        }
        unsigned bits = (unsigned)v[0] << 18 | (unsigned)v[1] << 12 | (unsigned)v[2] << 6 | (unsigned)v[3];
        unsigned char b[3] = {(unsigned char)(bits >> 16), (unsigned char)(bits >> 8), (unsigned char)bits};
        for (int k = 0; k < 3 && o < n; k++)
            out[o++] = (char)b[k];
    }
    out[n] = '\0';
    *outlen = n;
    *bad = 0;
    return out;
}

char *bytes_utf8_lossy(const char *s, size_t len)
{
    if (len > (SIZE_MAX - 1) / 3)
        return NULL;
    char *out = malloc(UTF8_REPAIR_MAX(len) + 1);
    if (!out)
        return NULL;
    size_t o = 0, i = 0;
    while (i < len) {
        uint32_t cp;
        size_t n = utf8_next(s + i, len - i, &cp);
        if (cp == 0 || cp == 0xFFFD) { /* an invalid subpart, a NUL, or U+FFFD itself */
            memcpy(out + o, UTF8_REPLACEMENT, 3);
            o += 3;
        } else {
            memcpy(out + o, s + i, n);
            o += n;
        }
        i += n;
    }
    out[o] = '\0';
    return out;
}

int bytes_make_display(char **s, size_t len)
{
    if (!*s || bytes_valid_utf8(*s, len))
        return 0;
    char *clean = bytes_utf8_lossy(*s, len);
    if (!clean)
        return -1;
    free(*s);
    *s = clean;
    return 0;
}
