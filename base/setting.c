/* setting.c: parses setting values (whole and decimal numbers in a range, switches, one of a list
 * of words) for the command line, the config file and the environment, with errors naming the value. */
#include "base/setting.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int is_digit(char c)
{
    return c >= '0' && c <= '9';
}

/* Quotes at most 200 bytes of a bad value, so a pasted file cannot flood a message. */
#define QUOTED_MAX 200

int setting_int(const char *name, const char *text, long long lo, long long hi, long long *out,
                char *err, size_t errlen)
{
    const char *s = text ? text : "";
    const char *digits = (*s == '-' || *s == '+') ? s + 1 : s;
    long long v = 0;
    int ok = is_digit(*digits);
    if (ok) {
        char *end;
        errno = 0;
        v = strtoll(s, &end, 10);
        ok = errno == 0 && *end == '\0' && v >= lo && v <= hi;
    }
    if (ok) {
        *out = v;
        return 0;
    }
    if (err && errlen) {
        if (hi == LLONG_MAX)
            snprintf(err, errlen, "'%s' takes a whole number of at least %lld, not '%.*s'", name, lo,
                     QUOTED_MAX, s);
        else
            snprintf(err, errlen, "'%s' takes a whole number from %lld to %lld, not '%.*s'", name,
                     lo, hi, QUOTED_MAX, s);
    }
    return -1;
}

int setting_u64(const char *name, const char *text, uint64_t *out, char *err, size_t errlen)
{
    const char *s = text ? text : "";
    int ok = is_digit(*s);
    unsigned long long v = 0;
    if (ok) {
        char *end;
        errno = 0;
        v = strtoull(s, &end, 10);
        ok = errno == 0 && *end == '\0';
    }
    if (ok) {
        *out = (uint64_t)v;
        return 0;
    }
    if (err && errlen)
        snprintf(err, errlen, "'%s' takes a whole number from 0 to %llu, not '%.*s'", name,
                 (unsigned long long)UINT64_MAX, QUOTED_MAX, s);
    return -1;
}

void setting_describe_choices(const char *choices, char *buf, size_t n)
{
    size_t off = 0, count = 0;
    for (const char *c = choices; *c; c++)
        count += *c == '|';
    if (!n)
        return;
    buf[0] = '\0';
    size_t seen = 0;
    for (const char *s = choices; *s;) {
        const char *bar = strchr(s, '|');
        int len = (int)(bar ? (size_t)(bar - s) : strlen(s));
        const char *sep = seen == 0 ? "" : seen == count ? " or " : ", ";
        int w = snprintf(buf + off, n - off, "%s%.*s", sep, len, s);
        if (w < 0 || (size_t)w >= n - off)
            return;
        off += (size_t)w;
        seen++;
        if (!bar)
            break;
        s = bar + 1;
    }
}

int setting_choice(const char *name, const char *text, const char *choices, int *out, char *err,
                   size_t errlen)
{
    const char *v = text ? text : "";
    size_t vl = strlen(v);
    int i = 0;
    for (const char *s = choices; *s; i++) {
        const char *bar = strchr(s, '|');
        size_t len = bar ? (size_t)(bar - s) : strlen(s);
        if (len == vl && strncmp(s, v, len) == 0) {
            *out = i;
            return 0;
        }
        if (!bar)
            break;
        s = bar + 1;
    }
    if (err && errlen) {
        char want[256];
        setting_describe_choices(choices, want, sizeof want);
        snprintf(err, errlen, "'%s' takes %s, not '%.*s'", name, want, QUOTED_MAX, v);
    }
    return -1;
}

int setting_bool(const char *name, const char *text, int *out, char *err, size_t errlen)
{
    static const char *yes[] = {"on", "yes", "true", "1"};
    static const char *no[] = {"off", "no", "false", "0"};
    const char *v = text ? text : "";
    for (size_t i = 0; i < sizeof yes / sizeof yes[0]; i++) {
        if (strcmp(v, yes[i]) == 0 || strcmp(v, no[i]) == 0) {
            *out = strcmp(v, yes[i]) == 0;
            return 0;
        }
    }
    if (err && errlen)
        snprintf(err, errlen, "'%s' takes on or off, not '%.*s'", name, QUOTED_MAX, v);
    return -1;
}

int setting_double(const char *name, const char *text, double lo, double hi, double *out, char *err,
                   size_t errlen)
{
    const char *s = text ? text : "";
    int ok = *s != '\0';
    double x = 0;
    if (ok) {
        char *end;
        errno = 0;
        x = strtod(s, &end);
        ok = errno == 0 && *end == '\0' && isfinite(x) && x >= lo && x <= hi;
    }
    if (ok) {
        *out = x;
        return 0;
    }
    if (err && errlen)
        snprintf(err, errlen, "'%s' takes a number from %g to %g, not '%.*s'", name, lo, hi,
                 QUOTED_MAX, s);
    return -1;
}
