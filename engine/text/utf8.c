/* utf8.c: UTF-8 validation and lossy repair (one U+FFFD per maximal invalid subpart).
 * The second-byte ranges follow Unicode table 3-7, which is what makes subparts maximal. */
#include "engine/text/utf8.h"

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
            lo = 0xA0;
        else if (c == 0xED)
            hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        need = 4;
        if (c == 0xF0)
            lo = 0x90;
        else if (c == 0xF4)
            hi = 0x8F;
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

int utf8_encode(uint32_t cp, char out[4])
{
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

glm_status utf8_repair(const char *s, size_t n, int final, tbuf *out, size_t *held)
{
    static const char fffd[3] = {(char)0xEF, (char)0xBF, (char)0xBD};
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0, run = 0; /* run: start of the pending stretch of valid bytes */
    if (held)
        *held = 0;
    if (tbuf_reserve(out, n) != GLM_OK)
        return GLM_ERR_NOMEM;
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
        if (tbuf_append(out, s + run, i - run) != GLM_OK)
            return GLM_ERR_NOMEM;
        if (k < 0) { /* incomplete at the end */
            if (!final) {
                if (held)
                    *held = n - i;
                return GLM_OK;
            }
            bad = n - i;
        }
        if (tbuf_append(out, fffd, 3) != GLM_OK)
            return GLM_ERR_NOMEM;
        i += bad;
        run = i;
    }
    return tbuf_append(out, s + run, n - run);
}
