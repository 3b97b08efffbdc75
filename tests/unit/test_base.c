/* test_base.c: the base layer: the UTF-8 repair policy on valid, invalid, overlong, surrogate and
 * truncated input, FNV-1a vectors, little-endian round trips, setting values and their errors,
 * error buffers, array growth and SHA-256 (FIPS 180 vectors). */
#include <check.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/errbuf.h"
#include "base/grow.h"
#include "base/hash.h"
#include "base/le.h"
#include "base/setting.h"
#include "base/sha256.h"
#include "base/suggest.h"
#include "base/utf8.h"
#include "tests/common/check_main.h"

#define FFFD UTF8_REPLACEMENT

/* ---- UTF-8 ---- */

/* s repaired as a whole (final), NUL-terminated into out. */
static const char *repaired(const char *s, size_t n, char *out)
{
    out[utf8_repair(s, n, 1, out, NULL)] = '\0';
    return out;
}

START_TEST(utf8_valid_input_is_kept_and_decoded)
{
    static const struct {
        const char *s;
        uint32_t cp;
    } cases[] = {
        {"A", 'A'},         {"\x7f", 0x7F},           {"\xc2\x80", 0x80},
        {"\xc3\xa9", 0xE9}, {"\xdf\xbf", 0x7FF},      {"\xe0\xa0\x80", 0x800},
        {"\xe4\xb8\xad", 0x4E2D}, {"\xed\x9f\xbf", 0xD7FF}, {"\xee\x80\x80", 0xE000},
        {"\xef\xbf\xbd", 0xFFFD}, {"\xef\xbf\xbf", 0xFFFF}, {"\xf0\x90\x80\x80", 0x10000},
        {"\xf0\x9f\x98\x80", 0x1F600}, {"\xf4\x8f\xbf\xbf", 0x10FFFF},
    };
    char out[32];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t n = strlen(cases[i].s);
        uint32_t cp;
        ck_assert_uint_eq(utf8_next(cases[i].s, n, &cp), n);
        ck_assert_uint_eq(cp, cases[i].cp);
        ck_assert(utf8_valid(cases[i].s, n));
        ck_assert_str_eq(repaired(cases[i].s, n, out), cases[i].s);
        char enc[4];
        ck_assert_int_eq(utf8_encode(cases[i].cp, enc), (int)n);
        ck_assert_int_eq(memcmp(enc, cases[i].s, n), 0);
    }
    /* NUL is a character like any other here (storage refuses it on its own account) */
    ck_assert(utf8_valid("a\0b", 3));
}
END_TEST

/* The policy: one U+FFFD per maximal invalid subpart. Each expected string is what Python's
 * bytes.decode("utf-8", "replace") gives (checked when this table was written). */
START_TEST(utf8_invalid_input_gets_one_replacement_per_maximal_subpart)
{
    static const struct {
        const char *in, *out;
        size_t first; /* bytes utf8_next takes at the start */
    } cases[] = {
        {"\x80", FFFD, 1},                            /* a lone continuation byte */
        {"\x80\xbf", FFFD FFFD, 1},                   /* two of them: two subparts */
        {"\xc0\x80", FFFD FFFD, 1},                   /* overlong NUL: C0 starts nothing */
        {"\xc1\xbf", FFFD FFFD, 1},
        {"\xe0\x80\xaf", FFFD FFFD FFFD, 1},          /* overlong 3-byte: refused at byte 2 */
        {"\xf0\x80\x80\x80", FFFD FFFD FFFD FFFD, 1}, /* overlong 4-byte */
        {"\xed\xa0\x80", FFFD FFFD FFFD, 1},          /* a surrogate, U+D800 */
        {"\xed\xbf\xbf", FFFD FFFD FFFD, 1},          /* U+DFFF */
        {"\xf4\x90\x80\x80", FFFD FFFD FFFD FFFD, 1}, /* above U+10FFFF */
        {"\xf5\x80", FFFD FFFD, 1},                   /* F5..FF start nothing */
        {"\xff", FFFD, 1},
        {"\xe2\x82x", FFFD "x", 2},                   /* cut short by the next byte: one subpart */
        {"\xe2\x82\xe2\x82\xac", FFFD "\xe2\x82\xac", 2},
        {"\xf1\x80\x80" "A", FFFD "A", 3},
        {"\xc3" "A", FFFD "A", 1},
        {"\xf0\x9f\x98", FFFD, 3},                    /* cut short by the end: one subpart */
        {"\xe4\xb8", FFFD, 2},
        {"a\xe4\xb8\xad\xffz", "a\xe4\xb8\xad" FFFD "z", 1},
    };
    char out[64];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t n = strlen(cases[i].in);
        ck_assert_msg(strcmp(repaired(cases[i].in, n, out), cases[i].out) == 0, "case %zu", i);
        ck_assert_msg(!utf8_valid(cases[i].in, n), "case %zu", i);
        ck_assert(utf8_valid(out, strlen(out)));
        uint32_t cp;
        ck_assert_uint_eq(utf8_next(cases[i].in, n, &cp), cases[i].first);
        if (cases[i].in[0] != 'a')
            ck_assert_uint_eq(cp, 0xFFFD);
    }
}
END_TEST

START_TEST(utf8_streaming_holds_back_an_incomplete_tail)
{
    char out[32];
    size_t held = 99;
    size_t n = utf8_repair("ab\xf0\x9f\x98", 5, 0, out, &held);
    ck_assert_uint_eq(n, 2);
    ck_assert_uint_eq(held, 3);
    ck_assert_int_eq(memcmp(out, "ab", 2), 0);
    /* the held bytes and what follows make the character */
    n = utf8_repair("\xf0\x9f\x98\x80!", 5, 0, out, &held);
    ck_assert_uint_eq(n, 5);
    ck_assert_uint_eq(held, 0);
    /* an invalid tail is not held: it can never become valid */
    n = utf8_repair("ab\xe0\x80", 4, 0, out, &held);
    ck_assert_uint_eq(held, 0);
    out[n] = '\0';
    ck_assert_str_eq(out, "ab" FFFD FFFD);
    /* the worst case fills UTF8_REPAIR_MAX exactly */
    ck_assert_uint_eq(utf8_repair("\xff\xff\xff", 3, 1, out, NULL), UTF8_REPAIR_MAX(3));
}
END_TEST

START_TEST(utf8_encode_refuses_what_is_not_a_character)
{
    char enc[4];
    ck_assert_int_eq(utf8_encode(0xD800, enc), 3);
    ck_assert_int_eq(memcmp(enc, FFFD, 3), 0);
    ck_assert_int_eq(utf8_encode(0x110000, enc), 3);
    ck_assert_int_eq(memcmp(enc, FFFD, 3), 0);
    /* every scalar value makes the round trip */
    for (uint32_t cp = 0; cp <= 0x10FFFF; cp++) {
        if (cp >= 0xD800 && cp <= 0xDFFF)
            continue;
        uint32_t back;
        int k = utf8_encode(cp, enc);
        ck_assert_uint_eq(utf8_next(enc, (size_t)k, &back), (size_t)k);
        ck_assert_uint_eq(back, cp);
    }
}
END_TEST

START_TEST(utf8_prefix_never_splits_a_unit)
{
    const char *s = "a\xe4\xb8\xad" "b";
    ck_assert_uint_eq(utf8_prefix(s, 5, 0), 0);
    ck_assert_uint_eq(utf8_prefix(s, 5, 1), 1);
    ck_assert_uint_eq(utf8_prefix(s, 5, 2), 1);
    ck_assert_uint_eq(utf8_prefix(s, 5, 3), 1);
    ck_assert_uint_eq(utf8_prefix(s, 5, 4), 4);
    ck_assert_uint_eq(utf8_prefix(s, 5, 99), 5);
    /* a maximal invalid subpart is one unit, as it becomes one U+FFFD */
    ck_assert_uint_eq(utf8_prefix("\xe2\x82x", 3, 1), 0);
    ck_assert_uint_eq(utf8_prefix("\xe2\x82x", 3, 2), 2);
    ck_assert_uint_eq(utf8_prefix("\xff\xff", 2, 1), 1);
}
END_TEST

/* ---- FNV-1a ---- */

START_TEST(fnv1a64_vectors)
{
    /* the published FNV-1a 64 test vectors */
    ck_assert_uint_eq(fnv1a64(FNV1A64_SEED, "", 0), 0xcbf29ce484222325ull);
    ck_assert_uint_eq(fnv1a64(FNV1A64_SEED, "a", 1), 0xaf63dc4c8601ec8cull);
    ck_assert_uint_eq(fnv1a64(FNV1A64_SEED, "foobar", 6), 0x85944171f73967e8ull);
    /* continuing from a hash is hashing the concatenation */
    ck_assert_uint_eq(fnv1a64(fnv1a64(FNV1A64_SEED, "foo", 3), "bar", 3), 0x85944171f73967e8ull);
}
END_TEST

/* ---- little-endian ---- */

START_TEST(le_round_trips_and_byte_order)
{
    uint8_t b[8];
    le_put_u16(b, 0x0102);
    ck_assert(b[0] == 0x02 && b[1] == 0x01);
    ck_assert_uint_eq(le_get_u16(b), 0x0102);
    le_put_u32(b, 0x01020304u);
    ck_assert(b[0] == 0x04 && b[3] == 0x01);
    ck_assert_uint_eq(le_get_u32(b), 0x01020304u);
    le_put_u64(b, 0x0102030405060708ull);
    ck_assert(b[0] == 0x08 && b[7] == 0x01);
    ck_assert_uint_eq(le_get_u64(b), 0x0102030405060708ull);
    static const uint64_t edge[] = {0, 1, 0x80, 0xFF, 0x8000, 0xFFFFFFFFull, 0x8000000000000000ull,
                                    UINT64_MAX};
    for (size_t i = 0; i < sizeof edge / sizeof edge[0]; i++) {
        le_put_u64(b, edge[i]);
        ck_assert_uint_eq(le_get_u64(b), edge[i]);
        le_put_u32(b, (uint32_t)edge[i]);
        ck_assert_uint_eq(le_get_u32(b), (uint32_t)edge[i]);
        le_put_u16(b, (uint16_t)edge[i]);
        ck_assert_uint_eq(le_get_u16(b), (uint16_t)edge[i]);
    }
}
END_TEST

START_TEST(le_reader_latches_a_short_read)
{
    uint8_t msg[7];
    msg[0] = 9;
    le_put_u16(msg + 1, 0xBEEF);
    le_put_u32(msg + 3, 0xCAFEF00Du);
    le_reader r = {msg, sizeof msg, 0, 1};
    ck_assert_uint_eq(le_read_u8(&r), 9);
    ck_assert_uint_eq(le_read_u16(&r), 0xBEEF);
    ck_assert_uint_eq(le_read_u32(&r), 0xCAFEF00Du);
    ck_assert(r.ok);
    ck_assert_uint_eq(le_read_u64(&r), 0); /* past the end: 0, and the failure stays */
    ck_assert(!r.ok);
    r.pos = 0;
    ck_assert_uint_eq(le_read_u8(&r), 0);
    ck_assert_ptr_null(le_take(&r, 0));
}
END_TEST

/* ---- setting values: the one parser of numbers and choices (base/setting.c) ---- */

START_TEST(setting_int_takes_whole_numbers_in_range)
{
    long long v = 42;
    char err[256];
    ck_assert_int_eq(setting_int("--n", "17", 1, 20, &v, err, sizeof err), 0);
    ck_assert_int_eq(v, 17);
    ck_assert_int_eq(setting_int("--n", "-3", -5, 5, &v, err, sizeof err), 0);
    ck_assert_int_eq(v, -3);
    ck_assert_int_eq(setting_int("--n", "+4", 0, 5, &v, err, sizeof err), 0);
    ck_assert_int_eq(v, 4);
    ck_assert_int_eq(setting_int("--n", "9223372036854775807", 0, LLONG_MAX, &v, err, sizeof err), 0);
    ck_assert(v == LLONG_MAX);
    ck_assert_int_eq(setting_int("--n", "-9223372036854775808", LLONG_MIN, 0, &v, err, sizeof err), 0);
    ck_assert(v == LLONG_MIN);
    v = 42;
    const char *bad[] = {"", "-", "+", " 5", "5 ", "5x", "0x10", "1e3", "3.0", "21", "0", "--5",
                         "9223372036854775808", "\t1", "1\n"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = 0;
        ck_assert_msg(setting_int("--n", bad[i], 1, 20, &v, err, sizeof err) == -1, "'%s'", bad[i]);
        ck_assert_int_eq(v, 42); /* unchanged on an error */
        char want[128];
        snprintf(want, sizeof want, "'--n' takes a whole number from 1 to 20, not '%s'", bad[i]);
        ck_assert_str_eq(err, want);
    }
    ck_assert_int_eq(setting_int("--n", NULL, 1, 20, &v, err, sizeof err), -1);
    ck_assert_str_eq(err, "'--n' takes a whole number from 1 to 20, not ''");
    ck_assert_int_eq(setting_int("ID", "0", 1, LLONG_MAX, &v, err, sizeof err), -1);
    ck_assert_str_eq(err, "'ID' takes a whole number of at least 1, not '0'");
    ck_assert_int_eq(setting_int("--n", "x", 1, 2, &v, NULL, 0), -1); /* no message wanted */
    /* a long bad value is quoted in part, the message stays bounded */
    char longv[1000];
    memset(longv, '7', sizeof longv - 1);
    longv[sizeof longv - 1] = 0;
    ck_assert_int_eq(setting_int("--n", longv, 1, 20, &v, err, sizeof err), -1);
    ck_assert_uint_lt(strlen(err), 255);
}
END_TEST

START_TEST(setting_u64_and_choice)
{
    uint64_t u = 9;
    char err[256];
    ck_assert_int_eq(setting_u64("--seed", "18446744073709551615", &u, err, sizeof err), 0);
    ck_assert(u == UINT64_MAX);
    ck_assert_int_eq(setting_u64("--seed", "0", &u, err, sizeof err), 0);
    ck_assert(u == 0);
    const char *bad[] = {"18446744073709551616", "-1", "+1", "", "1 ", "x"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ck_assert_msg(setting_u64("--seed", bad[i], &u, err, sizeof err) == -1, "'%s'", bad[i]);
        ck_assert(strstr(err, "'--seed' takes a whole number from 0 to 18446744073709551615"));
    }
    int i = -1;
    ck_assert_int_eq(setting_choice("--kv-cache", "bf16", "fp8|bf16|f32", &i, err, sizeof err), 0);
    ck_assert_int_eq(i, 1);
    ck_assert_int_eq(setting_choice("--kv-cache", "f32", "fp8|bf16|f32", &i, err, sizeof err), 0);
    ck_assert_int_eq(i, 2);
    const char *nope[] = {"", "fp", "fp88", "bf16|f32", "F32", "fp8|"};
    for (size_t k = 0; k < sizeof nope / sizeof nope[0]; k++) {
        ck_assert_msg(setting_choice("--kv-cache", nope[k], "fp8|bf16|f32", &i, err, sizeof err) == -1,
                      "'%s'", nope[k]);
        char want[128];
        snprintf(want, sizeof want, "'--kv-cache' takes fp8, bf16 or f32, not '%s'", nope[k]);
        ck_assert_str_eq(err, want);
    }
    ck_assert_int_eq(setting_choice("--x", "b", "a|b", &i, err, sizeof err), 0);
    ck_assert_int_eq(setting_choice("--x", "c", "a|b", &i, err, sizeof err), -1);
    ck_assert_str_eq(err, "'--x' takes a or b, not 'c'");
    ck_assert_int_eq(setting_choice("--x", "c", "only", &i, err, sizeof err), -1);
    ck_assert_str_eq(err, "'--x' takes only, not 'c'");
}
END_TEST

START_TEST(setting_bool_and_double)
{
    int b = 7;
    char err[256];
    static const char *on[] = {"on", "yes", "true", "1"}, *off[] = {"off", "no", "false", "0"};
    for (size_t i = 0; i < 4; i++) {
        ck_assert_int_eq(setting_bool("think", on[i], &b, err, sizeof err), 0);
        ck_assert_int_eq(b, 1);
        ck_assert_int_eq(setting_bool("think", off[i], &b, err, sizeof err), 0);
        ck_assert_int_eq(b, 0);
    }
    b = 7;
    static const char *bad[] = {"", "On", "yes ", "2", "enabled"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ck_assert_int_eq(setting_bool("think", bad[i], &b, err, sizeof err), -1);
        ck_assert_int_eq(b, 7);
        char want[128];
        snprintf(want, sizeof want, "'think' takes on or off, not '%s'", bad[i]);
        ck_assert_str_eq(err, want);
    }
    double x = 9;
    ck_assert_int_eq(setting_double("temperature", "0.3", 0, 2, &x, err, sizeof err), 0);
    ck_assert(x == 0.3);
    ck_assert_int_eq(setting_double("temperature", "2", 0, 2, &x, err, sizeof err), 0);
    ck_assert(x == 2.0);
    x = 9;
    static const char *nope[] = {"", "2.01", "-0.1", "nan", "inf", "0.3x", "1 ", "1e999"};
    for (size_t i = 0; i < sizeof nope / sizeof nope[0]; i++) {
        ck_assert_msg(setting_double("temperature", nope[i], 0, 2, &x, err, sizeof err) == -1, "'%s'",
                      nope[i]);
        ck_assert(x == 9);
        char want[128];
        snprintf(want, sizeof want, "'temperature' takes a number from 0 to 2, not '%s'", nope[i]);
        ck_assert_str_eq(err, want);
    }
}
END_TEST

/* ---- error buffers ---- */

START_TEST(errbuf_formats_cuts_and_allows_no_buffer)
{
    char err[8];
    ck_assert_int_eq(errbuf_fail(err, sizeof err, "bad %s %d", "value", 42), -1);
    ck_assert_str_eq(err, "bad val"); /* cut to fit, terminated */
    ck_assert_int_eq(errbuf_fail(NULL, 0, "no buffer: %d", 1), -1);
    memset(err, 'x', sizeof err);
    errbuf_set(err, 0, "untouched");
    ck_assert_int_eq(err[0], 'x');
}
END_TEST

/* ---- array growth ---- */

START_TEST(grow_array_doubles_from_first_and_refuses_overflow)
{
    int *v = NULL;
    size_t cap = 0;
    ck_assert_int_eq(grow_array((void **)&v, &cap, 1, sizeof *v, 4), 0);
    ck_assert_uint_eq(cap, 4);
    for (int i = 0; i < 4; i++)
        v[i] = i;
    ck_assert_int_eq(grow_array((void **)&v, &cap, 4, sizeof *v, 4), 0); /* fits: unchanged */
    ck_assert_uint_eq(cap, 4);
    ck_assert_int_eq(grow_array((void **)&v, &cap, 5, sizeof *v, 4), 0);
    ck_assert_uint_eq(cap, 8);
    ck_assert_int_eq(grow_array((void **)&v, &cap, 33, sizeof *v, 4), 0);
    ck_assert_uint_eq(cap, 64);
    ck_assert_int_eq(v[3], 3); /* kept across the moves */
    int *before = v;
    ck_assert_int_eq(grow_array((void **)&v, &cap, SIZE_MAX / 2, sizeof *v, 4), -1);
    ck_assert_ptr_eq(v, before); /* refused: the array and its capacity are as they were */
    ck_assert_uint_eq(cap, 64);
    free(v);
}
END_TEST

/* ---- SHA-256 ---- */

static void hex_of(const unsigned char d[32], char out[65])
{
    for (int i = 0; i < 32; i++)
        snprintf(out + 2 * i, 3, "%02x", d[i]);
}

/* data's digest, both in one streaming pass and through sha256_hex, is want. */
static void check_sha256(const char *data, size_t len, const char *want)
{
    sha256_ctx c;
    unsigned char d[32];
    char hex[65];
    sha256_init(&c);
    sha256_update(&c, data, len);
    sha256_final(&c, d);
    hex_of(d, hex);
    ck_assert_str_eq(hex, want);
    sha256_hex(data, len, hex);
    ck_assert_str_eq(hex, want);
}

START_TEST(sha256_matches_the_fips_vectors)
{
    check_sha256("", 0, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    check_sha256("abc", 3, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    const char *two_blocks = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    check_sha256(two_blocks, strlen(two_blocks), "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    /* a million 'a' in uneven pieces (1 to 1003 bytes), so partial blocks are joined */
    char chunk[1024];
    memset(chunk, 'a', sizeof chunk);
    sha256_ctx c;
    sha256_init(&c);
    for (size_t left = 1000000, n = 1; left > 0; n = n % 997 + 7) {
        size_t take = n < left ? n : left;
        sha256_update(&c, chunk, take);
        left -= take;
    }
    unsigned char d[32];
    char hex[65];
    sha256_final(&c, d);
    hex_of(d, hex);
    ck_assert_str_eq(hex, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}
END_TEST

/* "Did you mean": the closest known word within a third of its length, none when two tie. */
START_TEST(suggest_finds_the_meant_word)
{
    static const char *const keys[] = {"temperature", "top_p", "top_k", "seed", "model", "effort"};
    ck_assert_str_eq(suggest_closest("temprature", keys, 6), "temperature");  /* one dropped */
    ck_assert_str_eq(suggest_closest("tempreature", keys, 6), "temperature"); /* two swapped */
    ck_assert_str_eq(suggest_closest("Temperture", keys, 6), "temperature");  /* any case */
    ck_assert_str_eq(suggest_closest("modle", keys, 6), "model");
    ck_assert_str_eq(suggest_closest("efort", keys, 6), "effort");
    ck_assert_ptr_null(suggest_closest("top_q", keys, 6));      /* top_p and top_k tie */
    ck_assert_ptr_null(suggest_closest("temperature", keys, 6)); /* itself: nothing to suggest */
    ck_assert_ptr_null(suggest_closest("colour", keys, 6));      /* nothing close */
    ck_assert_ptr_null(suggest_closest("sd", keys, 6));          /* seed is 2 away, past 1 */
    ck_assert_ptr_null(suggest_closest("", keys, 6));
    ck_assert_ptr_null(suggest_closest(NULL, keys, 6));
    static const char *const cmds[] = {"new", "list", "open", "search", "export", "quit"};
    ck_assert_str_eq(suggest_closest("serach", cmds, 6), "search");
    ck_assert_str_eq(suggest_closest("exprot", cmds, 6), "export");
    ck_assert_str_eq(suggest_closest("lst", cmds, 6), "list");
    char longword[200];
    memset(longword, 'a', sizeof longword - 1);
    longword[sizeof longword - 1] = 0;
    ck_assert_ptr_null(suggest_closest(longword, cmds, 6)); /* past 64 bytes: not compared */
}
END_TEST

int main(void)
{
    Suite *s = suite_create("base");
    TCase *tc = tcase_create("base");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, utf8_valid_input_is_kept_and_decoded);
    tcase_add_test(tc, utf8_invalid_input_gets_one_replacement_per_maximal_subpart);
    tcase_add_test(tc, utf8_streaming_holds_back_an_incomplete_tail);
    tcase_add_test(tc, utf8_encode_refuses_what_is_not_a_character);
    tcase_add_test(tc, utf8_prefix_never_splits_a_unit);
    tcase_add_test(tc, fnv1a64_vectors);
    tcase_add_test(tc, le_round_trips_and_byte_order);
    tcase_add_test(tc, le_reader_latches_a_short_read);
    tcase_add_test(tc, setting_int_takes_whole_numbers_in_range);
    tcase_add_test(tc, setting_u64_and_choice);
    tcase_add_test(tc, setting_bool_and_double);
    tcase_add_test(tc, errbuf_formats_cuts_and_allows_no_buffer);
    tcase_add_test(tc, grow_array_doubles_from_first_and_refuses_overflow);
    tcase_add_test(tc, sha256_matches_the_fips_vectors);
    tcase_add_test(tc, suggest_finds_the_meant_word);
    suite_add_tcase(s, tc);
    return test_run_suite(s);
}
