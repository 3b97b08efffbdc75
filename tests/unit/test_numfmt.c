/* test_numfmt.c: Check suite for the lossy number formats (engine/model/numfmt.c) against values
 * worked out by hand: bf16 and e4m3 at zero, subnormals, the largest value, ties, saturation,
 * negative zero and NaN; the fp8 row scale; q4's groups and its variants (the MSE scale search,
 * the asymmetric grid, 8-bit scales under a super-scale, GPTQ against a known Hessian). */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "model/numfmt.h"
#include "tests/common/check_main.h"

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

/* An input row's one part, worked out apart from numfmt's code: the row's scale from frexp of its
 * largest magnitude (the power of two putting it in [2^14, 2^15)), the scaled value rounded to
 * 11 significant bits in double (subnormal fp16 below 2^-14: multiples of 2^-24), scaled back. */
static float one_part_ref(double v, double amax)
{
    int e;
    frexp(amax, &e); /* amax in [2^(e-1), 2^e) */
    int a = 14 - (e - 1);
    double x = ldexp(v, a), ax = fabs(x), q;
    if (ax < 0x1p-14) {
        q = nearbyint(ax * 0x1p24) * 0x1p-24;
    } else {
        int ex;
        frexp(ax, &ex);
        q = ldexp(nearbyint(ldexp(ax, 11 - ex)), ex - 11);
    }
    return (float)ldexp(x < 0 ? -q : q, -a);
}

START_TEST(one_part_row_is_the_scaled_fp16_value)
{
    /* hand cases: the largest goes to 2^14 exactly (1.0 at a = 14), a value whose 2^14 multiple
     * lies halfway between fp16 neighbours rounds to the even one */
    float row[7] = {1.0f, 1.0f + 0x1p-11f, 1.0f + 0x1p-10f + 0x1p-11f, -0.5f, 0x1p-40f, 0.0f, 0x1p-30f};
    float out[7];
    numfmt_one_part_row(row, out, 7);
    ck_assert(out[0] == 1.0f);
    ck_assert(out[1] == 1.0f);                     /* tie: down to the even 1.0 */
    ck_assert(out[2] == 1.0f + 0x1p-9f);           /* tie: up to the even neighbour */
    ck_assert(out[3] == -0.5f);
    ck_assert(out[4] == 0.0f); /* 2^-26 at the row's scale: under half fp16's least subnormal */
    ck_assert(out[5] == 0.0f);
    ck_assert(out[6] == 0x1p-30f); /* 2^-16 there: an fp16 subnormal, kept */
    /* random rows of many magnitudes against the reference, in place */
    uint64_t x = 12345;
    for (int r = 0; r < 200; r++) {
        enum { N = 257 };
        float v[N], got[N];
        double amax = 0;
        for (int i = 0; i < N; i++) {
            x = x * 6364136223846793005ULL + 1442695040888963407ULL;
            double u = (double)(x >> 11) / 9007199254740992.0;
            int spread = (int)(x >> 3 & 31) - 12;
            v[i] = (float)((u - 0.5) * ldexp(1.0, spread - (r % 40)));
            amax = fmax(amax, fabs((double)v[i]));
        }
        memcpy(got, v, sizeof v);
        numfmt_one_part_row(got, got, N);
        for (int i = 0; i < N; i++)
            ck_assert_msg(got[i] == one_part_ref(v[i], amax), "row %d element %d: %a -> %a, want %a",
                          r, i, (double)v[i], (double)got[i], (double)one_part_ref(v[i], amax));
    }
    /* an Inf in the row sets the largest magnitude above every finite one: the finite values go
     * to 0 as in the kernel (its shift is -114), the Inf stays */
    float inf_row[3] = {INFINITY, 3.0f, -2.0f};
    numfmt_one_part_row(inf_row, inf_row, 3);
    ck_assert(isinf(inf_row[0]) && inf_row[1] == 0.0f && inf_row[2] == 0.0f);
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

/* The margin of a row is its nearest value's distance to a rounding midpoint (or its largest
 * magnitude's to an fp8 scale boundary), against the largest magnitude. */
START_TEST(cache_row_margins_find_near_ties)
{
    /* fp8: amax 448 (scale 1, itself a boundary, so the scale margin is 0) */
    const float at_scale[2] = {448.0f, 1.0f};
    ck_assert(numfmt_cache_row_margin(NUMFMT_CACHE_FP8, NUMFMT_FP8_POW2, at_scale, 2) == 0.0);
    /* amax 300 (scale 1; 300 / 448 is 0.67 of a power of two, far); 1.0625 lies midway between
     * e4m3's 1 and 1.125, 1.07 is 0.0075 past the midpoint: margins 0 and 0.0075 / 300 */
    const float mid[2] = {300.0f, 1.0625f}, off[2] = {300.0f, 1.07f};
    ck_assert(numfmt_cache_row_margin(NUMFMT_CACHE_FP8, NUMFMT_FP8_POW2, mid, 2) == 0.0);
    double m = numfmt_cache_row_margin(NUMFMT_CACHE_FP8, NUMFMT_FP8_POW2, off, 2);
    ck_assert_msg(fabs(m - (1.07 - 1.0625) / 300.0) < 1e-9, "margin %g", m);
    /* 300 itself: e4m3 spacing 32 between 288 and 320, midpoint 304: 4 away */
    const float alone[1] = {300.0f};
    m = numfmt_cache_row_margin(NUMFMT_CACHE_FP8, NUMFMT_FP8_POW2, alone, 1);
    ck_assert_msg(fabs(m - 4.0 / 300.0) < 1e-9, "margin %g", m);
    /* the margin is in the row's scale: the same row times 2^-10 has the same margin */
    const float small[2] = {300.0f / 1024, 1.07f / 1024};
    ck_assert(fabs(numfmt_cache_row_margin(NUMFMT_CACHE_FP8, NUMFMT_FP8_POW2, small, 2) -
                   (1.07 - 1.0625) / 300.0) < 1e-9);
    /* bf16: 1 + 2^-8 is a midpoint of 1 and 1 + 2^-7 */
    const float b[2] = {2.0f, 1.0f + 0x1p-8f};
    ck_assert(numfmt_cache_row_margin(NUMFMT_CACHE_BF16, NUMFMT_FP8_POW2, b, 2) == 0.0);
    const float zeros[2] = {0, 0};
    ck_assert(isinf(numfmt_cache_row_margin(NUMFMT_CACHE_FP8, NUMFMT_FP8_POW2, zeros, 2)));
    ck_assert(isinf(numfmt_cache_row_margin(NUMFMT_CACHE_F32, NUMFMT_FP8_POW2, off, 2)));
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

static double sq_error(const float *a, const float *b, size_t n)
{
    double e = 0;
    for (size_t i = 0; i < n; i++)
        e += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
    return e;
}

/* A fixed pseudo-random value in [-1, 1). */
static float lcg(uint32_t *state)
{
    *state = *state * 1664525u + 1013904223u;
    return (float)(*state >> 8) / 8388608.0f - 1.0f;
}

START_TEST(q4_mse_search_never_loses_to_nearest)
{
    /* one 7 and 31 values of 3.4: nearest has s = 1, every 3.4 -> 3 (31 x 0.16 = 4.96); the
     * candidate 0.875 takes 3.4 to 4 s = 3.5 and clips the 7 to 6.125 (31 x 0.01 + 0.765625), less
     * than 0.85's (3.4 exactly, 7 to 5.95: 1.1025) or 0.9's (3.6: 1.24 + 0.49) */
    float v[32], nearest[32], mse[32];
    for (int i = 0; i < 32; i++)
        v[i] = i == 0 ? 7.0f : 3.4f;
    memcpy(nearest, v, sizeof v);
    memcpy(mse, v, sizeof v);
    numfmt_q4 qn = {.group = 32, .f16_scale = 0}, qm = {.group = 32, .f16_scale = 0, .mse = 1};
    numfmt_q4_round(&qn, nearest, 32);
    numfmt_q4_round(&qm, mse, 32);
    ck_assert(fabs(sq_error(v, nearest, 32) - 4.96) < 1e-4);
    ck_assert_msg(fabs(sq_error(v, mse, 32) - 1.075625) < 1e-5, "mse %g", sq_error(v, mse, 32));
    ck_assert(mse[1] == 3.5f && mse[0] == 6.125f);
    /* on every variant and many pseudo-random groups (some with an outlier): never worse */
    numfmt_q4 kinds[] = {{.group = 32, .f16_scale = 1},
                         {.group = 64, .f16_scale = 0},
                         {.group = 32, .f16_scale = 1, .asym = 1},
                         {.group = 64, .f16_scale = 1, .scales = NUMFMT_Q4_SCALES_U8_256},
                         {.group = 32, .f16_scale = 1, .scales = NUMFMT_Q4_SCALES_U8_ROW}};
    uint32_t seed = 7;
    int better = 0;
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++)
        for (int trial = 0; trial < 20; trial++) {
            float w[256], a[256], b[256];
            for (int i = 0; i < 256; i++)
                w[i] = 0.02f * lcg(&seed) + (i % 97 == trial ? 0.2f : 0.0f);
            memcpy(a, w, sizeof w);
            memcpy(b, w, sizeof w);
            numfmt_q4 near = kinds[k], search = kinds[k];
            search.mse = 1;
            numfmt_q4_round(&near, a, 256);
            numfmt_q4_round(&search, b, 256);
            for (int g = 0; g < 256; g += near.group) /* group by group, as it searches */
                ck_assert(sq_error(w + g, b + g, (size_t)near.group) <=
                          sq_error(w + g, a + g, (size_t)near.group));
            better += sq_error(w, b, 256) < sq_error(w, a, 256);
        }
    ck_assert_int_gt(better, 90); /* and usually better */
}
END_TEST

START_TEST(q4_asymmetric_keeps_a_positive_groups_ends)
{
    /* 0.5 .. 8 (fp16-exact): s = 7.5 / 15 = 0.5, so multiples of 0.5 come back exactly and 3.3
     * goes to 0.5 + rint(5.6) * 0.5 = 3.5 */
    float v[32], sym[32];
    for (int i = 0; i < 32; i++)
        v[i] = 0.5f + 0.5f * (float)(i % 16);
    v[5] = 3.3f;
    memcpy(sym, v, sizeof v);
    numfmt_q4 qa = {.group = 32, .f16_scale = 1, .asym = 1}, qs = NUMFMT_Q4_GPU;
    numfmt_q4_round(&qa, v, 32);
    ck_assert(v[0] == 0.5f && v[15] == 8.0f && v[31] == 8.0f && v[16] == 0.5f);
    ck_assert(v[7] == 4.0f && v[5] == 3.5f);
    /* the symmetric grid spends half its codes on negatives: s = fp16(8 / 7) = 1170 / 1024, so
     * 0.5 -> 0 and 8 -> 7 s */
    numfmt_q4_round(&qs, sym, 32);
    ck_assert(sym[0] == 0.0f && sym[15] == 7.0f * 1170.0f / 1024.0f);
    /* a constant group: scale 0, every value its offset */
    float c[32];
    for (int i = 0; i < 32; i++)
        c[i] = 0.75f;
    numfmt_q4_round(&qa, c, 32);
    ck_assert(c[0] == 0.75f && c[31] == 0.75f);
}
END_TEST

START_TEST(q4_u8_scales_under_a_super_scale)
{
    /* groups of 32 whose amax is 7 k (k = 1..8): super = fp16(8 / 255) and group k's scale is
     * rint(k / super) super; a value of 7 k comes back as 7 times that */
    float v[256];
    for (int i = 0; i < 256; i++)
        v[i] = i % 32 == 0 ? 7.0f * (float)(i / 32 + 1) : 0.0f;
    numfmt_q4 q = {.group = 32, .f16_scale = 1, .scales = NUMFMT_Q4_SCALES_U8_256};
    numfmt_q4_round(&q, v, 256);
    float super = 0.031372070312f; /* fp16(8 / 255) = 0x2804 */
    for (int k = 1; k <= 8; k++)
        ck_assert_msg(v[(k - 1) * 32] == 7.0f * (rintf((float)k / super) * super), "group %d: %g",
                      k, (double)v[(k - 1) * 32]);
    ck_assert(v[1] == 0.0f);
    /* bits a weight: 4 + scale (and zero point) a group + super-scales */
    numfmt_q4 f16 = NUMFMT_Q4_GPU, f32 = {.group = 64, .f16_scale = 0},
              asym = {.group = 32, .f16_scale = 1, .asym = 1},
              row = {.group = 32, .f16_scale = 1, .scales = NUMFMT_Q4_SCALES_U8_ROW};
    ck_assert(numfmt_q4_bits(&f16, 256) == 4.5 && numfmt_q4_bits(&f32, 256) == 4.5);
    ck_assert(numfmt_q4_bits(&asym, 256) == 5.0 && numfmt_q4_bits(&q, 512) == 4.3125);
    ck_assert(numfmt_q4_bits(&row, 512) == 4.3125);
    char why[256];
    numfmt_q4 bad = {.group = 32, .f16_scale = 1, .asym = 1, .scales = NUMFMT_Q4_SCALES_U8_256};
    ck_assert_int_eq(numfmt_q4_check(&bad, 256, why, sizeof why), -1);
    ck_assert_msg(strstr(why, "asymmetric group takes flat"), "%s", why);
    ck_assert_int_eq(numfmt_q4_check(&q, 384, why, sizeof why), -1);
    ck_assert_msg(strstr(why, "rows of 384") && strstr(why, "whole 256s"), "%s", why);
    ck_assert_int_eq(numfmt_q4_check(&q, 512, why, sizeof why), 0);
}
END_TEST

/* tr((W - Q) H (W - Q)^T): the summed squared output error over inputs whose x x^T sums to H. */
static double output_error(const float *w, const float *q, const double *H, int rows, int cols)
{
    double e = 0;
    for (int r = 0; r < rows; r++)
        for (int i = 0; i < cols; i++)
            for (int j = 0; j < cols; j++)
                e += ((double)w[r * cols + i] - q[r * cols + i]) * H[i * cols + j] *
                     ((double)w[r * cols + j] - q[r * cols + j]);
    return e;
}

START_TEST(q4_gptq_beats_nearest_on_a_known_hessian)
{
    enum { ROWS = 8, COLS = 64 };
    static double H[COLS * COLS], I[COLS * COLS];
    static float w[ROWS * COLS], near[ROWS * COLS], g[ROWS * COLS], gi[ROWS * COLS];
    /* strongly correlated inputs: H_ij = 0.95^|i - j| */
    for (int i = 0; i < COLS; i++)
        for (int j = 0; j < COLS; j++) {
            H[i * COLS + j] = pow(0.95, abs(i - j));
            I[i * COLS + j] = i == j;
        }
    uint32_t seed = 3;
    for (int i = 0; i < ROWS * COLS; i++)
        w[i] = 0.05f * lcg(&seed);
    memcpy(near, w, sizeof w);
    memcpy(g, w, sizeof w);
    memcpy(gi, w, sizeof w);
    numfmt_q4 q = NUMFMT_Q4_GPU;
    numfmt_q4_round_rows(&q, near, ROWS, COLS);
    ck_assert_int_eq(numfmt_q4_gptq(&q, g, ROWS, COLS, H, 0.01), 0);
    double en = output_error(w, near, H, ROWS, COLS), eg = output_error(w, g, H, ROWS, COLS);
    ck_assert_msg(eg < 0.6 * en, "gptq %g, nearest %g", eg, en);
    /* yet more weight error: it trades weight error for output error */
    ck_assert(sq_error(w, g, ROWS * COLS) > sq_error(w, near, ROWS * COLS));
    /* uncorrelated inputs leave nothing to feed back: exactly nearest */
    ck_assert_int_eq(numfmt_q4_gptq(&q, gi, ROWS, COLS, I, 0.01), 0);
    ck_assert_int_eq(memcmp(gi, near, sizeof near), 0);
    /* every value is still on its group's q4 grid: rounding again changes nothing */
    memcpy(gi, g, sizeof g);
    numfmt_q4_round_rows(&q, gi, ROWS, COLS);
    ck_assert_int_eq(memcmp(gi, g, sizeof g), 0);
    /* an indefinite H is refused */
    double bad[4] = {1.0, 3.0, 3.0, 1.0};
    float two[2 * 32] = {0.1f};
    numfmt_q4 q2 = {.group = 2, .f16_scale = 1};
    ck_assert_int_eq(numfmt_q4_gptq(&q2, two, 32, 2, bad, 0.01), -1);
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
    tcase_add_test(tc, cache_row_margins_find_near_ties);
    tcase_add_test(tc, one_part_row_is_the_scaled_fp16_value);
    tcase_add_test(tc, q4_groups_and_scales);
    tcase_add_test(tc, q4_mse_search_never_loses_to_nearest);
    tcase_add_test(tc, q4_asymmetric_keeps_a_positive_groups_ends);
    tcase_add_test(tc, q4_u8_scales_under_a_super_scale);
    tcase_add_test(tc, q4_gptq_beats_nearest_on_a_known_hessian);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return test_run_suite(numfmt_suite());
}
