/* utf8.c: the one UTF-8 decoder (repair policy in utf8.h: one U+FFFD per maximal invalid subpart).
 * The second-byte ranges follow Unicode table 3-7, which is what makes the subparts maximal. */
#include "base/utf8.h"

#include <string.h>

int utf8_seq(const unsigned char *s, size_t n, size_t *bad)
{
    unsigned c = s[0];
    if (c < 0x80)
        return 1;
    int need;
    unsigned lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) {
        need = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
        need = 3;
        if (c == 0xE0)
            lo = 0xA0; /* below: overlong */
        else if (c == 0xED)
            hi = 0x9F; /* above: a surrogate */
    } else if (c >= 0xF0 && c <= 0xF4) {
        need = 4;
        if (c == 0xF0)
            lo = 0x90; /* below: overlong */
        else if (c == 0xF4)
            hi = 0x8F; /* above: past U+10FFFF */
    } else {
        *bad = 1;
        return 0;
    }
    for (int i = 1; i < need; i++) {
        if ((size_t)i >= n)
            return -1;
        unsigned d = s[i];
        unsigned l = i == 1 ? lo : 0x80, h = i == 1 ? hi : 0xBF;
        if (d < l || d > h) {
            *bad = (size_t)i;
            return 0;
        }
    }
    return need;
}

uint32_t utf8_decode(const unsigned char *s, int len)
{
    switch (len) {
    case 1:
        return s[0];
    case 2:
        return ((uint32_t)(s[0] & 0x1F) << 6) | (s[1] & 0x3F);
    case 3:
        return ((uint32_t)(s[0] & 0x0F) << 12) | ((uint32_t)(s[1] & 0x3F) << 6) | (s[2] & 0x3F);
    default:
        return ((uint32_t)(s[0] & 0x07) << 18) | ((uint32_t)(s[1] & 0x3F) << 12) |
               ((uint32_t)(s[2] & 0x3F) << 6) | (s[3] & 0x3F);
    }
}

size_t utf8_next(const char *s, size_t n, uint32_t *cp)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t bad = 0;
    int k = utf8_seq(u, n, &bad);
    if (k > 0) {
        *cp = utf8_decode(u, k);
        return (size_t)k;
    }
    *cp = 0xFFFD;
    return k < 0 ? n : bad;
}

int utf8_encode(uint32_t cp, char out[4])
{
    if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
        cp = 0xFFFD;
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

int utf8_valid(const char *s, size_t n)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        if (u[i] < 0x80) {
            i++;
            continue;
        }
        size_t bad;
        int k = utf8_seq(u + i, n - i, &bad);
        if (k <= 0)
            return 0;
        i += (size_t)k;
    }
    return 1;
}

size_t utf8_repair(const char *s, size_t n, int final, char *out, size_t *held)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0, o = 0, run = 0; /* run: start of the pending stretch of valid bytes */
    if (held)
        *held = 0;
    while (i < n) {
        if (u[i] < 0x80) {
            i++;
            continue;
        }
        size_t bad = 0;
        int k = utf8_seq(u + i, n - i, &bad);
        if (k > 0) {
            i += (size_t)k;
            continue;
        }
        memcpy(out + o, s + run, i - run);
        o += i - run;
        if (k < 0 && !final) { /* incomplete at the end: the caller passes it again */
            if (held)
                *held = n - i;
            return o;
        }
        if (k < 0)
            bad = n - i;
        memcpy(out + o, UTF8_REPLACEMENT, 3);
        o += 3;
        i += bad;
        run = i;
    }
    memcpy(out + o, s + run, n - run);
    return o + (n - run);
}

size_t utf8_prefix(const char *s, size_t n, size_t max)
{
    size_t i = 0;
    while (i < n) {
        uint32_t cp;
        size_t k = utf8_next(s + i, n - i, &cp);
        if (i + k > max)
            break;
        i += k;
    }
    return i;
}
