/* numfmt.c: host versions of the lossy formats the CUDA backend stores (numfmt.h), so that the
 * CPU backend reproduces its fp8 and bf16 caches and q4 dense weights value for value. */
#include "model/numfmt.h"

#include <math.h>
#include <string.h>

#include "model/exl3.h"

uint16_t numfmt_bf16_bits(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    if (isnan(x))
        return 0x7FFF;
    /* adding 0x7FFF plus the kept part's lowest bit carries exactly when the dropped half
     * is above the midpoint, or on it with an odd kept part */
    return (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

float numfmt_bf16_value(uint16_t bits)
{
    uint32_t u = (uint32_t)bits << 16;
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

uint8_t numfmt_e4m3_bits(float x)
{
    if (isnan(x))
        return 0x7F;
    uint8_t sign = signbit(x) ? 0x80 : 0;
    float a = fabsf(x);
    if (a >= NUMFMT_E4M3_MAX) /* saturation: everything at or past 448 is 448 */
        return sign | 0x7E;
    if (a < 0x1p-6f) /* subnormal: whole units of 2^-9; 8 units is code 8, the smallest normal */
        return sign | (uint8_t)rintf(a * 0x1p9f);
    int e;
    (void)frexpf(a, &e); /* a = m 2^e, m in [0.5, 1): a's exponent is e - 1 */
    /* the mantissa's 3 bits with rounding; 8 carries into the exponent, as the code's bits do */
    float q = rintf((ldexpf(a, 1 - e) - 1.0f) * 8.0f);
    return sign | (uint8_t)(((e - 1 + 7) << 3) + (int)q);
}

float numfmt_e4m3_value(uint8_t bits)
{
    int exp = (bits >> 3) & 15, man = bits & 7;
    float sign = bits & 0x80 ? -1.0f : 1.0f;
    if ((bits & 0x7F) == 0x7F)
        return NAN;
    if (exp == 0)
        return sign * ldexpf((float)man, -9);
    return sign * ldexpf((float)(8 + man), exp - 10);
}

float numfmt_fp8_scale(float amax, numfmt_fp8_rule rule)
{
    if (!(amax > 0.0f))
        return 1.0f;
    if (rule == NUMFMT_FP8_EXACT)
        return amax / NUMFMT_E4M3_MAX;
    /* the kernel's operations in its order: log2 can land on the integer below, which the
     * doubling corrects */
    float scale = exp2f(ceilf(log2f(amax / NUMFMT_E4M3_MAX)));
    if (amax / scale > NUMFMT_E4M3_MAX)
        scale *= 2.0f;
    return scale;
}

void numfmt_cache_row(numfmt_cache fmt, numfmt_fp8_rule rule, float *row, size_t n)
{
    if (fmt == NUMFMT_CACHE_BF16) {
        for (size_t i = 0; i < n; i++)
            row[i] = numfmt_bf16_value(numfmt_bf16_bits(row[i]));
        return;
    }
    if (fmt != NUMFMT_CACHE_FP8)
        return;
    float amax = 0.0f;
    for (size_t i = 0; i < n; i++)
        amax = fmaxf(amax, fabsf(row[i]));
    float scale = numfmt_fp8_scale(amax, rule);
    for (size_t i = 0; i < n; i++)
        row[i] = numfmt_e4m3_value(numfmt_e4m3_bits(row[i] / scale)) * scale;
}

void numfmt_q4_round(const numfmt_q4 *q, float *v, size_t n)
{
    size_t g = (size_t)q->group;
    for (size_t at = 0; at + g <= n; at += g) {
        float amax = 0.0f;
        for (size_t i = 0; i < g; i++)
            amax = fmaxf(amax, fabsf(v[at + i]));
        float s = amax / 7.0f;
        if (q->f16_scale) /* the float is exact in double, so this is one rounding to fp16 */
            s = exl3_f16_to_f32(exl3_f16_from_f64((double)s));
        for (size_t i = 0; i < g; i++) {
            float c = s > 0.0f ? rintf(v[at + i] / s) : 0.0f;
            v[at + i] = fminf(fmaxf(c, -7.0f), 7.0f) * s;
        }
    }
}
