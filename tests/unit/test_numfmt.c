/* test_numfmt.c: Check suite for the lossy number formats (engine/model/numfmt.c) against values
 * worked out by hand: bf16 and e4m3 at zero, subnormals, the largest value, ties, saturation,
 * negative zero and NaN; the fp8 row scale; q4's groups. */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "model/numfmt.h"

static float from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

START_TEST(bf16_rounds_to_nearest_even)
{
    ck_assert_uint_eq(numfmt_bf16_bits(0.0f), 0x0000);
    ck_assert_uint_eq(numfmt_bf16_bits(-0.0f), 0x8000);
    ck_assert_uint_eq(numfmt_bf16_bits(1.0f), 0x3F80);
    /* 1 + 2^-8 is halfway between 0x3F80 and 0x3F81: the even one */
    ck_assert_uint_eq(numfmt_bf16_bits(from_bits(0x3F808000)), 0x3F80);
    ck_assert_uint_eq(numfmt_bf16_bits(from_bits(0x3F818000)), 0x3F82);
    ck_assert_uint_eq(numfmt_bf16_bits(from_bits(0x3F808001)), 0x3F81);
    ck_assert_uint_eq(numfmt_bf16_bits(from_bits(0x3F807FFF)), 0x3F80);
    /* subnormals round the same way */
    ck_assert_uint_eq(numfmt_bf16_bits(from_bits(0x00008000)), 0x0000);
    ck_assert_uint_eq(numfmt_bf16_bits(from_bits(0x00018000)), 0x0002);
    ck_assert_uint_eq(numfmt_bf16_bits(from_bits(0x00010001)), 0x0001);
    /* past the largest bf16 (0x7F7F) is infinity; infinity stays */
    ck_assert_uint_eq(numfmt_bf16_bits(from_bits(0x7F7F7FFF)), 0x7F7F);
    ck_assert_uint_eq(numfmt_bf16_bits(from_bits(0x7F7FFFFF)), 0x7F80);
    ck_assert_uint_eq(numfmt_bf16_bits(INFINITY), 0x7F80);
    ck_assert_uint_eq(numfmt_bf16_bits(-INFINITY), 0xFF80);
    /* any NaN, a payload that would round to infinity included, is the NaN code */
    ck_assert_uint_eq(numfmt_bf16_bits(NAN), 0x7FFF);
    ck_assert_uint_eq(numfmt_bf16_bits(from_bits(0x7F800001)), 0x7FFF);
    ck_assert_uint_eq(numfmt_bf16_bits(from_bits(0xFFFFFFFF)), 0x7FFF);
    ck_assert(isnan(numfmt_bf16_value(0x7FFF)));
    ck_assert(signbit(numfmt_bf16_value(0x8000)) && numfmt_bf16_value(0x8000) == 0.0f);
    ck_assert(numfmt_bf16_value(0x3F82) == 1.015625f);
}
END_TEST

START_TEST(e4m3_rounds_saturates_and_refuses_nan)
{
    ck_assert_uint_eq(numfmt_e4m3_bits(0.0f), 0x00);
    ck_assert_uint_eq(numfmt_e4m3_bits(-0.0f), 0x80);
    ck_assert_uint_eq(numfmt_e4m3_bits(1.0f), 0x38);
    ck_assert_uint_eq(numfmt_e4m3_bits(-2.0f), 0xC0);
    ck_assert_uint_eq(numfmt_e4m3_bits(240.0f), 0x77);
    /* ties to the even mantissa: 1.0625 between 1 and 1.125, 1.1875 between 1.125 and 1.25 */
    ck_assert_uint_eq(numfmt_e4m3_bits(1.0625f), 0x38);
    ck_assert_uint_eq(numfmt_e4m3_bits(1.1875f), 0x3A);
    ck_assert_uint_eq(numfmt_e4m3_bits(1.0626f), 0x39);
    /* a mantissa rounding up carries into the exponent: 1.96875 is 2 */
    ck_assert_uint_eq(numfmt_e4m3_bits(1.96875f), 0x40);
    /* subnormals: units of 2^-9, ties to even; 7.5 units is the smallest normal */
    ck_assert_uint_eq(numfmt_e4m3_bits(0x1p-9f), 0x01);
    ck_assert_uint_eq(numfmt_e4m3_bits(0x1p-10f), 0x00);
    ck_assert_uint_eq(numfmt_e4m3_bits(3 * 0x1p-10f), 0x02);
    ck_assert_uint_eq(numfmt_e4m3_bits(15 * 0x1p-10f), 0x08);
    ck_assert_uint_eq(numfmt_e4m3_bits(0x1p-6f), 0x08);
    ck_assert_uint_eq(numfmt_e4m3_bits(-0x1p-12f), 0x80);
    /* the largest, and saturation past it (the 464 tie, 480 that would be NaN, infinity) */
    ck_assert_uint_eq(numfmt_e4m3_bits(448.0f), 0x7E);
    ck_assert_uint_eq(numfmt_e4m3_bits(464.0f), 0x7E);
    ck_assert_uint_eq(numfmt_e4m3_bits(480.0f), 0x7E);
    ck_assert_uint_eq(numfmt_e4m3_bits(1e30f), 0x7E);
    ck_assert_uint_eq(numfmt_e4m3_bits(INFINITY), 0x7E);
    ck_assert_uint_eq(numfmt_e4m3_bits(-INFINITY), 0xFE);
    /* NaN is never made a number */
    ck_assert_uint_eq(numfmt_e4m3_bits(NAN), 0x7F);
    ck_assert_uint_eq(numfmt_e4m3_bits(-NAN), 0x7F);
    ck_assert(isnan(numfmt_e4m3_value(0x7F)) && isnan(numfmt_e4m3_value(0xFF)));
    ck_assert(numfmt_e4m3_value(0x7E) == 448.0f);
    ck_assert(numfmt_e4m3_value(0x01) == 0x1p-9f);
    ck_assert(numfmt_e4m3_value(0x08) == 0x1p-6f);
    ck_assert(numfmt_e4m3_value(0x77) == 240.0f);
    ck_assert(signbit(numfmt_e4m3_value(0x80)) && numfmt_e4m3_value(0x80) == 0.0f);
    /* every number code comes back to itself */
    for (int c = 0; c < 256; c++) {
        if ((c & 0x7F) == 0x7F)
            continue;
        ck_assert_msg(numfmt_e4m3_bits(numfmt_e4m3_value((uint8_t)c)) == c, "code %#x", c);
    }
}
END_TEST

START_TEST(fp8_scale_is_the_smallest_power_of_two)
{
    ck_assert(numfmt_fp8_scale(0.0f, NUMFMT_FP8_POW2) == 1.0f);
    ck_assert(numfmt_fp8_scale(448.0f, NUMFMT_FP8_POW2) == 1.0f);
    ck_assert(numfmt_fp8_scale(448.00003f, NUMFMT_FP8_POW2) == 2.0f);
    ck_assert(numfmt_fp8_scale(449.0f, NUMFMT_FP8_POW2) == 2.0f);
    ck_assert(numfmt_fp8_scale(896.0f, NUMFMT_FP8_POW2) == 2.0f);
    ck_assert(numfmt_fp8_scale(897.0f, NUMFMT_FP8_POW2) == 4.0f);
    ck_assert(numfmt_fp8_scale(224.0f, NUMFMT_FP8_POW2) == 0.5f);
    ck_assert(numfmt_fp8_scale(1.0f, NUMFMT_FP8_POW2) == 0x1p-8f);
    ck_assert(numfmt_fp8_scale(1e-30f, NUMFMT_FP8_POW2) == 0x1p-108f);
    ck_assert(numfmt_fp8_scale(896.0f, NUMFMT_FP8_EXACT) == 2.0f);
    ck_assert(numfmt_fp8_scale(100.0f, NUMFMT_FP8_EXACT) == 100.0f / 448.0f);
    /* over every float exponent and a few mantissas: amax / s in (224, 448] */
    for (int e = -120; e < 120; e++)
        for (int k = 0; k < 8; k++) {
            float amax = ldexpf(1.0f + k / 8.0f + (k == 7 ? 0.1249f : 0.0f), e);
            float s = numfmt_fp8_scale(amax, NUMFMT_FP8_POW2);
            int ex;
            ck_assert_msg(frexpf(s, &ex) == 0.5f, "scale %g of %g", s, amax);
            ck_assert_msg(amax / s <= 448.0f && amax / s > 224.0f, "scale %g of %g", s, amax);
        }
}
END_TEST

START_TEST(cache_rows_read_back_as_stored)
{
    /* amax 100: scale 2^ceil(log2(100/448)) = 1/4; 1.2 -> 1.25, -6.8 -> -7, 400 -> 384 */
    float row[3] = {0.3f, -1.7f, 100.0f};
    numfmt_cache_row(NUMFMT_CACHE_FP8, NUMFMT_FP8_POW2, row, 3);
    ck_assert(row[0] == 0.3125f && row[1] == -1.75f && row[2] == 96.0f);
    /* the exact rule: scale 100/448, so 100 comes back nearly as it was */
    float ex[3] = {0.3f, -1.7f, 100.0f};
    numfmt_cache_row(NUMFMT_CACHE_FP8, NUMFMT_FP8_EXACT, ex, 3);
    ck_assert(fabsf(ex[2] - 100.0f) < 1e-4f && ex[2] != row[2]);
    float z[2] = {0.0f, -0.0f};
    numfmt_cache_row(NUMFMT_CACHE_FP8, NUMFMT_FP8_POW2, z, 2);
    ck_assert(z[0] == 0.0f && !signbit(z[0]) && signbit(z[1]));
    float b[2] = {from_bits(0x3F808000), 3.14159265f};
    numfmt_cache_row(NUMFMT_CACHE_BF16, NUMFMT_FP8_POW2, b, 2);
    ck_assert(b[0] == 1.0f && b[1] == 3.140625f);
    float f[1] = {3.14159265f};
    numfmt_cache_row(NUMFMT_CACHE_F32, NUMFMT_FP8_POW2, f, 1);
    ck_assert(f[0] == 3.14159265f);
    /* a NaN is left out of the row's scale and stays NaN */
    float n[2] = {NAN, 2.0f};
    numfmt_cache_row(NUMFMT_CACHE_FP8, NUMFMT_FP8_POW2, n, 2);
    ck_assert(isnan(n[0]) && n[1] == 2.0f);
}
END_TEST

START_TEST(q4_groups_and_scales)
{
    float v[64];
    for (int i = 0; i < 32; i++)
        v[i] = (float)(i % 15) - 7.0f; /* amax 7: s = 1, the values are codes */
    v[3] = 2.5f;                       /* ties to even */
    v[4] = -3.5f;
    for (int i = 32; i < 64; i++)
        v[i] = i == 40 ? 1.0f : 0.01f; /* amax 1: s = fp16(1/7) = 1170 / 8192 */
    numfmt_q4 q = NUMFMT_Q4_GPU;
    numfmt_q4_round(&q, v, 64);
    ck_assert(v[0] == -7.0f && v[14] == 7.0f && v[3] == 2.0f && v[4] == -4.0f);
    ck_assert(v[40] == 7 * (1170.0f / 8192.0f)); /* rint(1 / 0.142822265625) = 7 */
    ck_assert(v[33] == 0.0f);                    /* 0.01 / s rounds to 0 */
    float w[64];
    for (int i = 0; i < 64; i++)
        w[i] = i == 40 ? 1.0f : i == 0 ? 7.0f : 0.6f;
    numfmt_q4 q64 = {.group = 64, .f16_scale = 1};
    numfmt_q4_round(&q64, w, 64); /* one group: s = 1, so 0.6 -> 1 and 1 stays */
    ck_assert(w[0] == 7.0f && w[40] == 1.0f && w[63] == 1.0f);
    float x[32] = {1.0f};
    numfmt_q4 f32s = {.group = 32, .f16_scale = 0};
    numfmt_q4_round(&f32s, x, 32);
    ck_assert(x[0] == 7 * (1.0f / 7.0f) && x[1] == 0.0f);
    float zero[32] = {0};
    numfmt_q4_round(&q, zero, 32);
    ck_assert(zero[0] == 0.0f && zero[31] == 0.0f);
}
END_TEST

static Suite *numfmt_suite(void)
{
    Suite *s = suite_create("numfmt");
    TCase *tc = tcase_create("formats");
    tcase_add_test(tc, bf16_rounds_to_nearest_even);
    tcase_add_test(tc, e4m3_rounds_saturates_and_refuses_nan);
    tcase_add_test(tc, fp8_scale_is_the_smallest_power_of_two);
    tcase_add_test(tc, cache_rows_read_back_as_stored);
    tcase_add_test(tc, q4_groups_and_scales);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(numfmt_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
