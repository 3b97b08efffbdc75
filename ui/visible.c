/* visible.c: escapes control characters for a terminal (visible.h): caret notation for C0 and
 * DEL, \u00XX for C1, everything else byte for byte. */
#include "ui/visible.h"

size_t visible_escape(uint32_t cp, char out[8])
{
    if (cp == '\n' || cp == '\t')
        return 0;
    if (cp < 0x20 || cp == 0x7F) {
        out[0] = '^';
        out[1] = cp == 0x7F ? '?' : (char)(cp + 0x40);
        out[2] = 0;
        return 2;
    }
    if (cp >= 0x80 && cp <= 0x9F)
        return (size_t)snprintf(out, 8, "\\u%04x", (unsigned)cp);
    return 0;
}

static int put(FILE *f, const char *s, size_t n)
{
    return n == 0 || fwrite(s, 1, n, f) == n ? 0 : -1;
}

int visible_write_stream(FILE *f, visible_stream *vs, const char *s, size_t n)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t run = 0; /* bytes of s[i - run, i) still to write as they are */
    int rc = 0;
    char esc[8];
    for (size_t i = 0; i < n; i++) {
        if (vs->held) {
            vs->held = 0;
            if (u[i] >= 0x80 && u[i] <= 0x9F) {
                rc |= put(f, esc, visible_escape(u[i], esc));
                continue;
            }
            rc |= put(f, "\xc2", 1);
        }
        size_t e = 0;
        if (u[i] == 0xC2)
            vs->held = 1;
        else
            e = visible_escape(u[i] < 0x80 ? u[i] : 0x100, esc);
        if (!vs->held && e == 0) {
            run++;
            continue;
        }
        rc |= put(f, s + i - run, run);
        run = 0;
        rc |= put(f, esc, e);
    }
    rc |= put(f, s + n - run, run);
    return rc;
}

int visible_flush(FILE *f, visible_stream *vs)
{
    if (!vs->held)
        return 0;
    vs->held = 0;
    return put(f, "\xc2", 1);
}

int visible_write(FILE *f, const char *s, size_t n)
{
    visible_stream vs = {0};
    int rc = visible_write_stream(f, &vs, s, n);
    return rc | visible_flush(f, &vs);
}
