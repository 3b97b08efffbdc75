/* fuzz_setting.c: libFuzzer target for the one parser of setting values (base/setting.c): any
 * text and range either parses to a number in range that the text spells exactly, or fails with
 * a bounded message naming the setting; choices match only a whole listed word.
 * Run: tests/fuzz/fuzz_setting.sh [SECONDS] (clang -fsanitize=fuzzer,address,undefined). */
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/setting.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static long long take_ll(const uint8_t **p, size_t *n)
{
    uint64_t v = 0;
    size_t k = *n < 8 ? *n : 8;
    memcpy(&v, *p, k);
    *p += k;
    *n -= k;
    return (long long)v;
}

/* Whether s is an optional sign and then one or more digits, nothing else. */
static int well_formed(const char *s, int sign_ok)
{
    if (sign_ok && (*s == '-' || *s == '+'))
        s++;
    if (!*s)
        return 0;
    for (; *s; s++)
        if (*s < '0' || *s > '9')
            return 0;
    return 1;
}

static void check_message(const char *err, size_t cap, const char *name)
{
    size_t len = strnlen(err, cap);
    if (len == cap || (len == 0 && cap > 1)) /* always terminated, never empty */
        abort();
    char want[64];
    snprintf(want, sizeof want, "'%s' takes ", name);
    size_t wl = strlen(want);
    if (strncmp(err, want, len < wl ? len : wl) != 0) /* a small buffer cuts it, still its start */
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    int mode = data[0] % 3;
    size_t cap = 1 + data[1] % 300; /* also tiny message buffers */
    data += 2;
    size -= 2;
    long long lo = take_ll(&data, &size), hi = take_ll(&data, &size);
    if (size == 0 || data[0] & 1) { /* ranges people use, most of the time */
        lo = lo % 1000;
        hi = lo + (long long)((uint64_t)hi % 100000);
    }
    /* the text, up to a NUL; after it, choices for mode 2 */
    const char *raw = (const char *)data;
    size_t tlen = strnlen(raw, size);
    char *text = malloc(tlen + 1), *choices = NULL;
    memcpy(text, raw, tlen);
    text[tlen] = '\0';
    if (tlen < size) {
        size_t clen = size - tlen - 1;
        choices = malloc(clen + 1);
        memcpy(choices, raw + tlen + 1, clen);
        choices[clen] = '\0';
    }
    char *err = malloc(cap);
    memset(err, 'x', cap);
    if (mode == 0) {
        long long v = 12345;
        if (setting_int("--n", text, lo, hi, &v, err, cap) == 0) {
            char *end;
            if (!well_formed(text, 1) || v < lo || v > hi || strtoll(text, &end, 10) != v || *end)
                abort();
            char again[32];
            long long w;
            snprintf(again, sizeof again, "%lld", v);
            if (setting_int("--n", again, lo, hi, &w, NULL, 0) != 0 || w != v)
                abort();
        } else {
            if (v != 12345)
                abort(); /* unchanged on an error */
            check_message(err, cap, "--n");
        }
    } else if (mode == 1) {
        uint64_t u = 7;
        if (setting_u64("--seed", text, &u, err, cap) == 0) {
            if (!well_formed(text, 0) || strtoull(text, NULL, 10) != u)
                abort();
        } else {
            if (u != 7)
                abort();
            check_message(err, cap, "--seed");
        }
    } else if (choices && *choices) {
        int i = -1;
        if (setting_choice("--c", text, choices, &i, err, cap) == 0) {
            /* the i-th word of the list is the text */
            const char *s = choices;
            for (int k = 0; k < i; k++) {
                s = strchr(s, '|');
                if (!s)
                    abort();
                s++;
            }
            size_t wl = strcspn(s, "|");
            if (wl != tlen || memcmp(s, text, wl) != 0)
                abort();
        } else {
            if (i != -1)
                abort();
            check_message(err, cap, "--c");
        }
        char small[17];
        setting_describe_choices(choices, small, 1 + cap % sizeof small);
        if (!memchr(small, '\0', 1 + cap % sizeof small))
            abort();
    }
    free(err);
    free(text);
    free(choices);
    return 0;
}
