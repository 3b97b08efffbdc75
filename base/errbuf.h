/* errbuf.h: the caller's error buffer (char *err, size_t errlen), the way most of glmchat reports
 * what went wrong: one formatter that writes the message when a buffer was given. */
#ifndef GLMCHAT_BASE_ERRBUF_H
#define GLMCHAT_BASE_ERRBUF_H

#include <stdarg.h>
#include <stddef.h>

/* Formats the message into err[0..errlen) (always terminated, cut to fit); nothing when err is
 * NULL or errlen is 0, for callers that only want the verdict. */
void errbuf_set(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void errbuf_vset(char *err, size_t errlen, const char *fmt, va_list ap)
    __attribute__((format(printf, 3, 0)));

/* errbuf_set, then -1: `return errbuf_fail(err, errlen, "...", ...);` in functions that return 0
 * or -1. */
int errbuf_fail(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#endif
