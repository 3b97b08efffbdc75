/* bytes.c: byte helpers for storage: strict UTF-8 validation (what JSON may carry as a string),
 * cutting text at a character boundary, and base64 for bytes that are not UTF-8. */
#include <stdlib.h>
#include <string.h>

#include "storage/db_internal.h"

/* Length of the valid UTF-8 sequence at s (1-4), or 0 when invalid, NUL, or cut short. */
static size_t utf8_seq(const unsigned char *s, size_t left)
{
    unsigned c = s[0];
    if (c == 0)
        return 0;
    if (c < 0x80)
        return 1;
    size_t n;
    unsigned min, cp;
    if (c >= 0xc2 && c <= 0xdf) {
        n = 2, min = 0x80, cp = c & 0x1f;
    } else if (c >= 0xe0 && c <= 0xef) {
        n = 3, min = 0x800, cp = c & 0x0f;
    } else if (c >= 0xf0 && c <= 0xf4) {
        n = 4, min = 0x10000, cp = c & 0x07;
    } else {
        return 0;
    }
    if (left < n)
        return 0;
    for (size_t i = 1; i < n; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return 0;
        cp = cp << 6 | (s[i] & 0x3f);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
        return 0;
    return n;
}

int bytes_valid_utf8(const char *s, size_t len)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;
    while (i < len) {
        if (p[i] && p[i] < 0x80) {
            i++;
            continue;
        }
        size_t n = utf8_seq(p + i, len - i);
        if (n == 0)
            return 0;
        i += n;
    }
    return 1;
}

size_t bytes_utf8_prefix(const char *s, size_t len, size_t max)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;
    while (i < len) {
        size_t n = utf8_seq(p + i, len - i);
        if (n == 0)
            n = 1; /* an invalid byte counts as one character */
        if (i + n > max)
            break;
        i += n;
    }
    return i;
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
    const unsigned char *p = (const unsigned char *)s;
    char *out = malloc(len * 3 + 1); /* each bad byte may become 3 */
    if (!out)
        return NULL;
    size_t o = 0, i = 0;
    while (i < len) {
        size_t n = p[i] == 0 ? 0 : utf8_seq(p + i, len - i);
        if (n == 0) {
            memcpy(out + o, "\xef\xbf\xbd", 3);
            o += 3;
            i++;
            continue;
        }
        memcpy(out + o, s + i, n);
        o += n;
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
