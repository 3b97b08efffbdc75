/* test_gemm_fp16x2.c: Check suite for the scaling arithmetic of eng_gemm's two fp16 parts
 * (kernels/gemm_fp16x2.h, which the kernels compile too), against frexp and ldexp in double. */
#include <check.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kernels/gemm_fp16x2.h"
#include "tests/common/check_main.h"
#include "tests/common/rng.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static uint32_t bits_of(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float float_of(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* Any finite float, its exponent spread over the whole range (subnormals included). */
static float any_finite(void)
{
    uint32_t u;
    do
        u = test_rng_u32(&rng);
    while (((u >> 23) & 0xffu) == 0xffu);
    return float_of(u);
}

/* v rounded to fp16 (to nearest, ties to even; subnormals on the 2^-24 grid), for |v| < 65520,
 * as __float2half_rn does: the value in double (exact). */
static double fp16_rn(double v)
{
    double a = fabs(v);
    if (a == 0)
        return v;
    int e;
    frexp(a, &e); /* a in [2^(e-1), 2^e) */
    int q = e - 1 - 10; /* the ulp's exponent at 11 significant bits */
    if (q < -24)
        q = -24;
    return ldexp(nearbyint(ldexp(v, -q)), q);
}

START_TEST(floor_log2_is_frexps_exponent_less_one)
{
    for (int i = 0; i < 200000; i++) {
        float v = any_finite();
        if (v == 0)
            continue;
        int e;
        frexpf(fabsf(v), &e);
        ck_assert_int_eq(gemm_fp16x2_floor_log2(bits_of(fabsf(v))), e - 1);
    }
    ck_assert_int_eq(gemm_fp16x2_floor_log2(1u), -149); /* the smallest subnormal */
    ck_assert_int_eq(gemm_fp16x2_floor_log2(0x007fffffu), -127);
    ck_assert_int_eq(gemm_fp16x2_floor_log2(0x00800000u), -126);
    ck_assert_int_eq(gemm_fp16x2_floor_log2(bits_of(FLT_MAX)), 127);
    ck_assert_int_eq(gemm_fp16x2_floor_log2(bits_of(INFINITY)), 128);
    ck_assert_int_eq(gemm_fp16x2_floor_log2(bits_of(NAN) & 0x7fffffffu), 128);
}
END_TEST

/* The shift puts any finite largest magnitude into [2^14, 2^15); zero keeps 0. */
START_TEST(shift_puts_the_largest_magnitude_under_two_to_the_fifteen)
{
    ck_assert_int_eq(gemm_fp16x2_shift(0), 0);
    for (int i = 0; i < 200000; i++) {
        float v = fabsf(any_finite());
        if (v == 0)
            continue;
        double scaled = ldexp((double)v, gemm_fp16x2_shift(bits_of(v)));
        ck_assert_msg(scaled >= 16384.0 && scaled < 32768.0, "%a scaled to %a", (double)v, scaled);
    }
    /* and the row's every element stays there or below: its hi part rounds to at most 2^15 */
    ck_assert(fp16_rn(ldexp(0x1.fffffep-1, 15)) <= 32768.0);
}
END_TEST

/* gemm_fp16x2_scale is ldexp rounded once wherever the result is a normal float or overflows,
 * within one subnormal step where it is subnormal, and 0 or Inf past the clamp. */
START_TEST(scale_is_exact_ldexp_in_the_normal_range)
{
    for (int i = 0; i < 400000; i++) {
        float v = any_finite();
        int k = (int)(test_rng_u32(&rng) % 801) - 400;
        float got = gemm_fp16x2_scale(v, k);
        double want = ldexp((double)v, k);
        if (fabs(want) >= FLT_MIN && fabs(want) < 0x1.ffffffp127) {
            ck_assert_msg(got == (float)want, "%a * 2^%d: %a, not %a", (double)v, k, (double)got, (double)(float)want);
        } else if (fabs(want) >= 0x1.ffffffp127) {
            ck_assert_msg(isinf(got) && signbit(got) == signbit(v), "%a * 2^%d: %a", (double)v, k, (double)got);
        } else {
            ck_assert_msg(fabs((double)got - want) <= 0x1p-149, "%a * 2^%d: %a, not %a", (double)v, k,
                          (double)got, want);
        }
    }
    ck_assert(gemm_fp16x2_scale(0x1p-149f, 300) == INFINITY);
    ck_assert(gemm_fp16x2_scale(0x1p-149f, 276) == 0x1p127f);
    ck_assert(gemm_fp16x2_scale(FLT_MAX, -300) == 0.0f);
    ck_assert(gemm_fp16x2_scale(-3.0f, 0) == -3.0f);
    ck_assert(isnan(gemm_fp16x2_scale(NAN, -20)));
}
END_TEST

/* The input split the kernel makes: v = x 2^a (exact), hi = fp16(v), lo = fp16(v - hi); hi + lo
 * is v within 2^-22 of it, or 2^-25 for the row's smallest elements, for rows of any magnitude. */
START_TEST(two_fp16_parts_keep_twenty_two_bits)
{
    double worst = 0;
    for (int row = 0; row < 2000; row++) {
        int scale = (int)(test_rng_u32(&rng) % 240) - 120; /* the row's magnitude */
        float x[64];
        uint32_t m = 0;
        for (int k = 0; k < 64; k++) {
            /* elements of 24 significant bits (f32's all), over 30 binades below the row's top */
            float u = (float)(2.0 * test_rng_unit(&rng) - 1.0);
            x[k] = ldexpf(u, scale - (int)(test_rng_u32(&rng) % 30));
            uint32_t b = bits_of(x[k]) & 0x7fffffffu;
            m = b > m ? b : m;
        }
        int a = gemm_fp16x2_shift(m);
        for (int k = 0; k < 64; k++) {
            float v = gemm_fp16x2_scale(x[k], a);
            ck_assert(v == (float)ldexp((double)x[k], a));
            ck_assert(fabsf(v) < 32768.0f);
            double hi = fp16_rn(v);
            double lo = fp16_rn((double)v - hi);
            double err = fabs((double)v - hi - lo);
            double bound = fmax(ldexp(fabs((double)v), -22), 0x1p-25);
            ck_assert_msg(err <= bound, "row scale %d, %a: hi %a lo %a, error %a", scale, (double)v, hi, lo, err);
            if (fabs((double)v) >= 1.0 && err / fabs((double)v) > worst)
                worst = err / fabs((double)v);
        }
    }
    ck_assert(worst > 0x1p-24); /* the bound is nearly reached: the check could fail */
}
END_TEST

/* Every finite bf16 whose scaled magnitude is at least 2^-14 (fp16's smallest normal) converts to
 * fp16 exactly; a smaller one (2^28 below the weight's largest) is off by at most 2^-25. */
START_TEST(bf16_weights_convert_to_fp16_exactly)
{
    const uint16_t tops[] = {0x3f80, 0x3c00, 0x4480, 0x0080, 0x0001, 0x7f7f, 0x3a12};
    for (size_t t = 0; t < sizeof tops / sizeof *tops; t++) {
        uint32_t top = gemm_fp16x2_bf16_abs_bits(tops[t]);
        int s = gemm_fp16x2_shift(top);
        for (uint32_t b = 0; b <= 0xffffu; b++) {
            uint32_t abs16 = b & 0x7fffu;
            if (gemm_fp16x2_bf16_abs_bits((uint16_t)abs16) > top)
                continue; /* above the weight's largest */
            float w = float_of(b << 16);
            double scaled = ldexp((double)w, s);
            ck_assert((double)gemm_fp16x2_scale(w, s) == scaled || fabs(scaled) < FLT_MIN);
            double h = fp16_rn(scaled);
            if (fabs(scaled) >= 0x1p-14)
                ck_assert_msg(h == scaled, "bf16 %04x under top %04x: %a to %a", b, tops[t], scaled, h);
            else
                ck_assert(fabs(h - scaled) <= 0x1p-25);
        }
    }
}
END_TEST

START_TEST(bf16_bits_are_the_floats_bits)
{
    ck_assert_uint_eq(gemm_fp16x2_bf16_abs_bits(0xbf80), bits_of(1.0f));
    ck_assert_uint_eq(gemm_fp16x2_bf16_abs_bits(0x7fc0), 0x7fc00000u);
    ck_assert_uint_eq(gemm_fp16x2_bf16_abs_bits(0x8000), 0u);
}
END_TEST

/* The weight's largest magnitude as weight_max_kernel takes it: the largest max key, as a float's bits. */
static uint32_t weight_max_bits(const uint16_t *w, size_t n)
{
    uint32_t m = 0;
    for (size_t i = 0; i < n; i++)
        if (gemm_fp16x2_bf16_max_key(w[i]) > m)
            m = gemm_fp16x2_bf16_max_key(w[i]);
    return gemm_fp16x2_bf16_abs_bits((uint16_t)m);
}

/* One Inf and one NaN in a weight leave its shift to the finite values (set by the largest, 0.5
 * here), so they keep their exact fp16 copies, while the Inf and the NaN still convert to Inf and
 * NaN; the Inf and NaN keys are below every finite nonzero value's, the keys order as the values. */
START_TEST(inf_and_nan_weights_stay_out_of_the_maximum)
{
    const uint16_t w[] = {0x3f00 /* 0.5 */, 0x7f80 /* +Inf */, 0xbe80 /* -0.25 */, 0x7fc1 /* NaN */,
                          0xff80 /* -Inf */, 0x3a12, 0x8001, 0xffc0 /* -NaN */};
    const size_t n = sizeof w / sizeof *w;
    uint32_t top = weight_max_bits(w, n);
    ck_assert_uint_eq(top, bits_of(0.5f));
    int s = gemm_fp16x2_shift(top);
    ck_assert_int_eq(s, 15); /* 0.5 2^15 = 2^14 */
    for (size_t i = 0; i < n; i++) {
        float v = float_of((uint32_t)w[i] << 16), h = gemm_fp16x2_scale(v, s);
        if (isinf(v))
            ck_assert(isinf(h) && signbit(h) == signbit(v));
        else if (isnan(v))
            ck_assert(isnan(h));
        else
            ck_assert_msg(fp16_rn(ldexp((double)v, s)) == (double)h || fabs((double)h) < 0x1p-14,
                          "bf16 %04x scaled to %a", w[i], (double)h);
    }
    /* all non-finite: no finite maximum, the shift 0, the values themselves */
    const uint16_t bad[] = {0x7f80, 0xffc0};
    ck_assert_uint_eq(weight_max_bits(bad, 2), 0);
    ck_assert_int_eq(gemm_fp16x2_shift(weight_max_bits(bad, 2)), 0);
    for (uint32_t b = 0; b <= 0xffffu; b++) {
        uint32_t abs16 = b & 0x7fffu;
        if (abs16 >= 0x7f80u)
            ck_assert_uint_eq(gemm_fp16x2_bf16_max_key((uint16_t)b), 0);
        else
            ck_assert_uint_eq(gemm_fp16x2_bf16_max_key((uint16_t)b), abs16);
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("gemm_fp16x2");
    TCase *tc = tcase_create("scaling");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, floor_log2_is_frexps_exponent_less_one);
    tcase_add_test(tc, shift_puts_the_largest_magnitude_under_two_to_the_fifteen);
    tcase_add_test(tc, scale_is_exact_ldexp_in_the_normal_range);
    tcase_add_test(tc, two_fp16_parts_keep_twenty_two_bits);
    tcase_add_test(tc, bf16_weights_convert_to_fp16_exactly);
    tcase_add_test(tc, bf16_bits_are_the_floats_bits);
    tcase_add_test(tc, inf_and_nan_weights_stay_out_of_the_maximum);
    suite_add_tcase(s, tc);
    return test_run_suite(s);
}
