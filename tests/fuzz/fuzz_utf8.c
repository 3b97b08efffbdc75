/* fuzz_utf8.c: libFuzzer target for base/utf8.c, the one UTF-8 decoder: any bytes, repaired whole,
 * streamed in two pieces the input chooses, and stepped through one character at a time, must
 * agree, give valid UTF-8, keep valid input as it is, and stay within UTF8_REPAIR_MAX.
 * Build and run (bounded): make fuzz-base-run (BASE_FUZZ_SECONDS, default 60). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/utf8.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    size_t cut = data[0] % size; /* where the stream splits, 0..n, counted from byte 1 */
    const char *s = (const char *)data + 1;
    size_t n = size - 1;
    char *whole = malloc(UTF8_REPAIR_MAX(n) + 1), *streamed = malloc(UTF8_REPAIR_MAX(n) + 1);
    char *stepped = malloc(UTF8_REPAIR_MAX(n) + 1), *again = malloc(n + 1);
    if (!whole || !streamed || !stepped || !again)
        abort();
    /* whole, final */
    size_t w = utf8_repair(s, n, 1, whole, NULL);
    if (w > UTF8_REPAIR_MAX(n) || !utf8_valid(whole, w))
        abort();
    if (utf8_valid(s, n) && (w != n || memcmp(whole, s, n) != 0))
        abort(); /* valid input is kept byte for byte */
    /* streamed: the held tail is passed again in front of the rest */
    size_t held = 0;
    size_t o = utf8_repair(s, cut, 0, streamed, &held);
    if (held > 3 || held > cut)
        abort();
    memcpy(again, s + cut - held, held);
    memcpy(again + held, s + cut, n - cut);
    o += utf8_repair(again, held + n - cut, 1, streamed + o, NULL);
    if (o != w || memcmp(streamed, whole, w) != 0)
        abort();
    /* stepped: utf8_next's code points, encoded, are the repair */
    size_t p = 0, i = 0;
    while (i < n) {
        uint32_t cp;
        size_t k = utf8_next(s + i, n - i, &cp);
        if (k < 1 || k > n - i || k > 4 || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
            abort();
        if (utf8_prefix(s, n, i + k) != i + k) /* a unit's end is a place prefix may cut */
            abort();
        p += (size_t)utf8_encode(cp, stepped + p);
        i += k;
    }
    if (p != w || memcmp(stepped, whole, w) != 0)
        abort();
    free(whole);
    free(streamed);
    free(stepped);
    free(again);
    return 0;
}
