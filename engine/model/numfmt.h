/* numfmt.h: the lossy number formats the CUDA backend stores, as host functions: bf16 and e4m3
 * values, the fp8 cache's power-of-two row scale, the q4 requantization of dense weights, and
 * the one fp16 part its one-part products take of an input row. */
#ifndef GLMCHAT_ENGINE_MODEL_NUMFMT_H
#define GLMCHAT_ENGINE_MODEL_NUMFMT_H

#include <stddef.h>
#include <stdint.h>

/* A cache row's format, numbered as backend.h's BACKEND_KV_* (and the kernels' ENG_CACHE_*). */
typedef enum numfmt_cache { NUMFMT_CACHE_F32 = 0, NUMFMT_CACHE_BF16 = 1, NUMFMT_CACHE_FP8 = 2 } numfmt_cache;

/* How an fp8 row's scale comes from its largest magnitude amax. POW2 is the kernels' rule
 * (engine_index.cu store_row): the smallest power of two s with amax / s <= 448, by way of
 * exp2(ceil(log2(amax / 448))) and one doubling; 1 for a row of zeros. EXACT (s = amax / 448
 * in float) is no backend's: the accuracy tool measures it, and the tests use it as the mutated
 * rule that must change the logits. */
typedef enum numfmt_fp8_rule { NUMFMT_FP8_POW2 = 0, NUMFMT_FP8_EXACT = 1 } numfmt_fp8_rule;

/* The largest finite e4m3 value. */
#define NUMFMT_E4M3_MAX 448.0f

/* x to bfloat16 bits, rounded to nearest, ties to even (as __float2bfloat16_rn): infinities
 * stay, finite values past the largest bf16 round to infinity, any NaN becomes 0x7FFF. */
uint16_t numfmt_bf16_bits(float x);
float numfmt_bf16_value(uint16_t bits);

/* x to e4m3 (1 sign, 4 exponent bits of bias 7, 3 mantissa bits; no infinities) rounded to
 * nearest, ties to even, saturating (as __nv_fp8_e4m3's constructor, __NV_SATFINITE): a
 * magnitude past 448, infinity included, gives +-448 (0x7E / 0xFE); any NaN gives 0x7F, never a
 * number. */
uint8_t numfmt_e4m3_bits(float x);
/* 0x7F and 0xFF are NaN; the rest are exact in float. */
float numfmt_e4m3_value(uint8_t bits);

/* The fp8 scale of a row whose largest magnitude is amax (>= 0), by rule. */
float numfmt_fp8_scale(float amax, numfmt_fp8_rule rule);

/* Rounds row (n values) in place to what a cache of format fmt gives back when the row is read:
 * bf16 values, or e4m3 codes of row / scale times the row's scale (exact in float). F32 leaves
 * the row. The largest magnitude ignores NaNs (fmaxf), as the kernel's reduction does. */
void numfmt_cache_row(numfmt_cache fmt, numfmt_fp8_rule rule, float *row, size_t n);

/* How far row (n values, unrounded) lies from rounding otherwise in format fmt: the least, over
 * its values, of the distance to a rounding midpoint of the format (at the row's fp8 scale), and
 * for fp8 (POW2) of its largest magnitude's distance to a scale boundary (amax / 448 a power of
 * two), each against the row's largest magnitude. A row whose margin is below the f32 noise of two
 * implementations may round differently on each: a near tie of the format. INFINITY for f32, an
 * empty row or a row of zeros. */
double numfmt_cache_row_margin(numfmt_cache fmt, numfmt_fp8_rule rule, const float *row, size_t n);

/* Dense weights requantized to 4-bit codes. CUDA's --dense q4 is the symmetric form with flat
 * scales: per `group` consecutive values of a row s = amax / 7, stored as fp16 (f16_scale,
 * eng_quantize_q4's rule) or float; each value becomes clamp(rint(w / s), -7, 7) * s (0 where s is
 * 0). The other fields pick the variants the accuracy tool measures (all 0 is CUDA's form):
 * how the group scales are stored, a zero point, and how the scale is chosen. */
typedef enum numfmt_q4_scales {
    NUMFMT_Q4_SCALES_FLAT = 0,   /* one scale a group, fp16 or float by f16_scale */
    NUMFMT_Q4_SCALES_U8_256 = 1, /* an 8-bit code a group times an fp16 super-scale a 256 values */
    NUMFMT_Q4_SCALES_U8_ROW = 2, /* an 8-bit code a group times one float super-scale a row */
} numfmt_q4_scales;

typedef struct numfmt_q4 {
    int group;     /* 32 on the GPU; any divisor of the row length */
    int f16_scale; /* 1 on the GPU; with flat scales, also the zero point's format */
    int scales;    /* numfmt_q4_scales: 0 on the GPU */
    int asym;      /* 1: codes 0..15 over the group's [min, max]: min + c * s, s = (max - min) / 15,
                    * min stored as the scale is (flat scales only) */
    int mse;       /* 1: the group's range is the candidate (amax shrunk by up to 40%, or for asym
                    * each end trimmed by up to 1/8 of the range) of least squared error; the
                    * untrimmed one is a candidate, so never worse than nearest */
} numfmt_q4;

/* The GPU's: 32 values a group, fp16 scales. */
#define NUMFMT_Q4_GPU ((numfmt_q4){.group = 32, .f16_scale = 1})

/* 0 when q can round rows of `cols` values; else -1 with why (a sentence naming the field). */
int numfmt_q4_check(const numfmt_q4 *q, long long cols, char *why, size_t why_len);

/* Storage bits per weight of q on rows of `cols` values: 4, the group's scale (and zero point),
 * and the super-scales' share. */
double numfmt_q4_bits(const numfmt_q4 *q, long long cols);

/* v (n values, n a multiple of q->group) in place as its q4 values, as one row. */
void numfmt_q4_round(const numfmt_q4 *q, float *v, size_t n);
/* w (rows x cols, row-major) in place by rows: super-scales are per row or per 256 of a row. */
void numfmt_q4_round_rows(const numfmt_q4 *q, float *w, size_t rows, size_t cols);

/* w (rows x cols, row-major; y = w x) in place as q4 values chosen by error feedback (GPTQ):
 * column by column each rounding error is spread over the columns not yet rounded through the
 * inverse of H (cols x cols, sum over calibration inputs of x x^T) plus damp times its mean
 * diagonal, so that the output error over those inputs, not the weight error, is least. Groups
 * take their scales from the values as they stand when the group's first column comes up.
 * Returns -1 when memory runs out or H (damped) is not positive definite. */
int numfmt_q4_gptq(const numfmt_q4 *q, float *w, size_t rows, size_t cols, const double *H,
                   double damp);

/* An input row as the one-part products (cuda_gemm = onepart, kernels/engine_gemm.cu
 * split_half_kernel's hi part) take it: scaled by the power of two a_t that puts its largest
 * magnitude in [2^14, 2^15) (kernels/gemm_fp16x2.h; Inf and NaN count above every finite value),
 * each element rounded to fp16 (nearest, ties to even, subnormals kept), scaled back by 2^-a_t
 * (exact where the result is a normal float). out may be x. */
void numfmt_one_part_row(const float *x, float *out, size_t n);

#endif
