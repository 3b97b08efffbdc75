/* gemm_fp16x2.h: the power-of-two scaling arithmetic of eng_gemm's two-part fp16 products
 * (the BF16 weights' default form), plain C shared by engine_gemm.cu's kernels and tests/unit/test_gemm_fp16x2.c. */
#ifndef GLMCHAT_KERNELS_GEMM_FP16X2_H
#define GLMCHAT_KERNELS_GEMM_FP16X2_H

#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define GEMM_FP16X2_FN static __host__ __device__ __forceinline__
#else
#define GEMM_FP16X2_FN static inline
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* A row's (or a weight's) largest magnitude times 2^shift lands in [2^GEMM_FP16X2_TOP, 2^(TOP+1)):
 * below fp16's largest finite value (65504) with room for the hi part's rounding up, and as high
 * as that allows so that the smallest elements stay out of fp16's subnormals as long as they can. */
#define GEMM_FP16X2_TOP 14
/* 2^k as a float for k in [-126, 127] (normal floats only). */
#define GEMM_FP16X2_POW2_LO (-126)
#define GEMM_FP16X2_POW2_HI 127
/* the largest |k| gemm_fp16x2_scale carries out (any larger is clamped to it) */
#define GEMM_FP16X2_SCALE_MAX 300

GEMM_FP16X2_FN float gemm_fp16x2_bits_float(uint32_t u)
{
#ifdef __CUDA_ARCH__
    return __uint_as_float(u);
#else
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
#endif
}

GEMM_FP16X2_FN uint32_t gemm_fp16x2_float_bits(float f)
{
#ifdef __CUDA_ARCH__
    return __float_as_uint(f);
#else
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
#endif
}

/* floor(log2 |v|) of a float by its bits with the sign cleared (abs_bits != 0): the biased
 * exponent less 127 for a normal, the top mantissa bit's place less 149 for a subnormal, and 128
 * for Inf and NaN (so that they compare above every finite value, as their bits do). */
GEMM_FP16X2_FN int gemm_fp16x2_floor_log2(uint32_t abs_bits)
{
    int biased = (int)(abs_bits >> 23);
    if (biased > 0)
        return biased - 127;
    uint32_t m = abs_bits & 0x7fffffu;
    int top = 0;
    while (m >> (top + 1))
        top++;
    return top - 149;
}

/* The shift that puts a largest magnitude (its float bits, sign cleared) into
 * [2^GEMM_FP16X2_TOP, 2^(TOP+1)); 0 for a zero maximum (an all-zero row or weight). */
GEMM_FP16X2_FN int gemm_fp16x2_shift(uint32_t max_abs_bits)
{
    return max_abs_bits ? GEMM_FP16X2_TOP - gemm_fp16x2_floor_log2(max_abs_bits) : 0;
}

/* 2^k for k in [GEMM_FP16X2_POW2_LO, GEMM_FP16X2_POW2_HI], built from its bits (exact). */
GEMM_FP16X2_FN float gemm_fp16x2_pow2(int k)
{
    return gemm_fp16x2_bits_float((uint32_t)(k + 127) << 23);
}

/* One factor of gemm_fp16x2_scale: the part of k that 2^k as a normal float can carry. */
GEMM_FP16X2_FN int gemm_fp16x2_step(int k)
{
    return k > GEMM_FP16X2_POW2_HI ? GEMM_FP16X2_POW2_HI : k < GEMM_FP16X2_POW2_LO ? GEMM_FP16X2_POW2_LO : k;
}

/* v * 2^k for any k: three exact power-of-two factors (each a normal float), so v is rounded
 * only where the result itself is not a normal float. The factors move v the same way, so each
 * value between them lies between v and the result and cannot overflow or underflow first. Past
 * 300 binades every finite nonzero float goes to Inf (2^-149 2^300 > 2^128) or to 0
 * (2^128 2^-300 < 2^-150), which three factors reach, so k is clamped there. */
GEMM_FP16X2_FN float gemm_fp16x2_scale(float v, int k)
{
    if (k > GEMM_FP16X2_SCALE_MAX)
        k = GEMM_FP16X2_SCALE_MAX;
    if (k < -GEMM_FP16X2_SCALE_MAX)
        k = -GEMM_FP16X2_SCALE_MAX;
    int k1 = gemm_fp16x2_step(k), k2 = gemm_fp16x2_step(k - k1), k3 = k - k1 - k2;
    return v * gemm_fp16x2_pow2(k1) * gemm_fp16x2_pow2(k2) * gemm_fp16x2_pow2(k3);
}

/* A bf16's bits (sign cleared) as the float bits of the same value. */
GEMM_FP16X2_FN uint32_t gemm_fp16x2_bf16_abs_bits(uint16_t bf16_bits)
{
    return (uint32_t)(bf16_bits & 0x7fffu) << 16;
}

/* What a bf16 (its bits) counts toward the weight's largest magnitude, the shift's maximum: its
 * bits with the sign cleared, as a 16-bit magnitude that orders as the values do; 0 for Inf and
 * NaN (all exponent bits set), which would set the shift to -114 and so turn every finite weight
 * into fp16 zero, every output 0 but the Inf's own. Left out of the maximum, they still convert
 * to fp16 Inf and NaN and reach the outputs they touch, as the three bf16 parts' products do. */
GEMM_FP16X2_FN uint32_t gemm_fp16x2_bf16_max_key(uint16_t bf16_bits)
{
    uint32_t abs16 = bf16_bits & 0x7fffu;
    return abs16 >= 0x7f80u ? 0 : abs16;
}

#ifdef __cplusplus
}
#endif

#endif
