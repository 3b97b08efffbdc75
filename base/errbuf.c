/* errbuf.c: formats messages into callers' error buffers (errbuf.h).
 * A NULL or empty buffer is allowed: the caller asked for the verdict only. */
#include "base/errbuf.h"

#include <stdio.h>

void errbuf_vset(char *err, size_t errlen, const char *fmt, va_list ap)
{
    if (err && errlen)
        vsnprintf(err, errlen, fmt, ap);
}

void errbuf_set(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    errbuf_vset(err, errlen, fmt, ap);
    va_end(ap);
}

int errbuf_fail(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    errbuf_vset(err, errlen, fmt, ap);
    va_end(ap);
    return -1;
}
