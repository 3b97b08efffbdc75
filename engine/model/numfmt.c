/* numfmt.c: host versions of the lossy formats the CUDA backend stores (numfmt.h), so that the
 * CPU backend reproduces its fp8 and bf16 caches and q4 dense weights value for value. */
#include "model/numfmt.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/exl3.h"
#include "kernels/gemm_fp16x2.h"

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

/* The distance of a >= 0 to the nearest rounding midpoint of a grid of spacing `step`. */
static double midpoint_distance(double a, double step)
{
    double f = a / step - floor(a / step); /* where a sits between two grid values, in [0, 1) */
    return fabs(f - 0.5) * step;
}

/* The spacing of e4m3 values around magnitude a (<= 448): 2^-9 below 2^-6, else 2^(e - 3) for a
 * in [2^e, 2^(e+1)). */
static double e4m3_step(double a)
{
    if (a < 0x1p-6)
        return 0x1p-9;
    int e;
    (void)frexp(a, &e); /* a = m 2^e, m in [0.5, 1): a in [2^(e-1), 2^e) */
    return ldexp(1.0, e - 1 - 3);
}

double numfmt_cache_row_margin(numfmt_cache fmt, numfmt_fp8_rule rule, const float *row, size_t n)
{
    double amax = 0, least = INFINITY;
    for (size_t i = 0; i < n; i++)
        amax = fmax(amax, fabs((double)row[i]));
    if (fmt == NUMFMT_CACHE_F32 || !(amax > 0))
        return INFINITY;
    double scale = fmt == NUMFMT_CACHE_FP8 ? numfmt_fp8_scale((float)amax, rule) : 1.0;
    for (size_t i = 0; i < n; i++) {
        double a = fabs((double)row[i]) / scale, step;
        if (fmt == NUMFMT_CACHE_FP8) {
            step = e4m3_step(a);
        } else { /* bf16: 8 significant bits */
            if (!(a > 0))
                continue;
            int e;
            (void)frexp(a, &e);
            step = ldexp(1.0, e - 8);
        }
        least = fmin(least, midpoint_distance(a, step) * scale / amax);
    }
    if (fmt == NUMFMT_CACHE_FP8 && rule == NUMFMT_FP8_POW2) {
        double m = amax / NUMFMT_E4M3_MAX, p = exp2(round(log2(m)));
        least = fmin(least, fabs(m / p - 1.0));
    }
    return least;
}

/* A group's grid: its values are off + c * s for whole c in [cmin, cmax]. */
typedef struct q4_grid {
    float s, off;
    float cmin, cmax;
} q4_grid;

static float f16_round(float x)
{
    return exl3_f16_to_f32(exl3_f16_from_f64((double)x)); /* exact in double: one rounding */
}

/* s as stored: fp16 or float, or an 8-bit code (1..255, so a group that is not all zeros keeps
 * a scale) times the block's super-scale. */
static float stored_scale(const numfmt_q4 *q, float s, float super)
{
    if (q->scales == NUMFMT_Q4_SCALES_FLAT)
        return q->f16_scale ? f16_round(s) : s;
    if (!(s > 0.0f) || !(super > 0.0f))
        return 0.0f;
    return fminf(fmaxf(rintf(s / super), 1.0f), 255.0f) * super;
}

static float grid_value(const q4_grid *g, float x)
{
    float c = g->s > 0.0f ? rintf((x - g->off) / g->s) : 0.0f;
    return g->off + fminf(fmaxf(c, g->cmin), g->cmax) * g->s;
}

static double grid_error(const q4_grid *g, const float *v, size_t n)
{
    double e = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)v[i] - grid_value(g, v[i]);
        e += d * d;
    }
    return e;
}

/* The grid of [lo, hi] (asymmetric) or of amax hi (symmetric). */
static q4_grid make_grid(const numfmt_q4 *q, float lo, float hi, float super)
{
    if (!q->asym)
        return (q4_grid){stored_scale(q, hi / 7.0f, super), 0.0f, -7.0f, 7.0f};
    float off = q->f16_scale ? f16_round(lo) : lo;
    return (q4_grid){stored_scale(q, (hi - off) / 15.0f, super), off, 0.0f, 15.0f};
}

#define Q4_MSE_SYM_STEPS 17 /* amax times 1, 0.975, ..., 0.6 */
#define Q4_MSE_ASYM_STEPS 5 /* each end trimmed by 0, 1/32, ..., 4/32 of the range */

static q4_grid fit_group(const numfmt_q4 *q, const float *v, size_t n, float super)
{
    float lo = INFINITY, hi = -INFINITY, amax = 0.0f;
    for (size_t i = 0; i < n; i++) {
        lo = fminf(lo, v[i]);
        hi = fmaxf(hi, v[i]);
        amax = fmaxf(amax, fabsf(v[i]));
    }
    q4_grid best = q->asym ? make_grid(q, lo, hi, super) : make_grid(q, 0.0f, amax, super);
    if (!q->mse)
        return best;
    double best_e = grid_error(&best, v, n);
    if (!q->asym) {
        for (int k = 1; k < Q4_MSE_SYM_STEPS; k++) {
            q4_grid g = make_grid(q, 0.0f, amax * (1.0f - 0.025f * (float)k), super);
            double e = grid_error(&g, v, n);
            if (e < best_e)
                best = g, best_e = e;
        }
        return best;
    }
    float range = hi - lo;
    for (int a = 0; a < Q4_MSE_ASYM_STEPS; a++)
        for (int b = 0; b < Q4_MSE_ASYM_STEPS; b++) {
            if (!a && !b)
                continue;
            q4_grid g = make_grid(q, lo + range * (float)a / 32.0f, hi - range * (float)b / 32.0f,
                                  super);
            double e = grid_error(&g, v, n);
            if (e < best_e)
                best = g, best_e = e;
        }
    return best;
}

/* The values a super-scale covers in a row of cols: 256 or the row. */
static size_t super_block(const numfmt_q4 *q, size_t cols)
{
    return q->scales == NUMFMT_Q4_SCALES_U8_256 && cols > 256 ? 256 : cols;
}

/* The super-scale of block v (n values): its largest group scale over 255, fp16 for blocks of 256,
 * float for rows; 0 for flat scales. */
static float super_scale(const numfmt_q4 *q, const float *v, size_t n)
{
    if (q->scales == NUMFMT_Q4_SCALES_FLAT)
        return 0.0f;
    float amax = 0.0f;
    for (size_t i = 0; i < n; i++)
        amax = fmaxf(amax, fabsf(v[i]));
    float super = amax / 7.0f / 255.0f;
    return q->scales == NUMFMT_Q4_SCALES_U8_256 ? f16_round(super) : super;
}

int numfmt_q4_check(const numfmt_q4 *q, long long cols, char *why, size_t why_len)
{
    const char *bad = NULL;
    if (q->group < 1 || cols % q->group)
        bad = "the group size must divide the row length";
    else if (q->scales < NUMFMT_Q4_SCALES_FLAT || q->scales > NUMFMT_Q4_SCALES_U8_ROW)
        bad = "scales must be one of numfmt_q4_scales";
    else if (q->asym && q->scales != NUMFMT_Q4_SCALES_FLAT)
        bad = "an asymmetric group takes flat (fp16 or float) scales";
    else if (q->scales == NUMFMT_Q4_SCALES_U8_256 && cols > 256 && (cols % 256 || 256 % q->group))
        bad = "8-bit scales under a super-scale a 256 values need rows of whole 256s";
    if (!bad)
        return 0;
    snprintf(why, why_len, "q4 variant (group %d, scales %d, asym %d) on rows of %lld: %s",
             q->group, q->scales, q->asym, cols, bad);
    return -1;
}

double numfmt_q4_bits(const numfmt_q4 *q, long long cols)
{
    double flat = q->f16_scale ? 16.0 : 32.0;
    if (q->scales == NUMFMT_Q4_SCALES_FLAT)
        return 4.0 + flat * (q->asym ? 2 : 1) / q->group;
    double super = q->scales == NUMFMT_Q4_SCALES_U8_256 ? 16.0 / (double)(cols > 256 ? 256 : cols)
                                                        : 32.0 / (double)cols;
    return 4.0 + 8.0 / q->group + super;
}

void numfmt_q4_round_rows(const numfmt_q4 *q, float *w, size_t rows, size_t cols)
{
    size_t g = (size_t)q->group, sb = super_block(q, cols);
    for (size_t r = 0; r < rows; r++)
        for (size_t b = 0; b + sb <= cols; b += sb) {
            float *v = w + r * cols + b;
            float super = super_scale(q, v, sb);
            for (size_t at = 0; at + g <= sb; at += g) {
                q4_grid grid = fit_group(q, v + at, g, super);
                for (size_t i = 0; i < g; i++)
                    v[at + i] = grid_value(&grid, v[at + i]);
            }
        }
}

void numfmt_q4_round(const numfmt_q4 *q, float *v, size_t n)
{
    numfmt_q4_round_rows(q, v, 1, n);
}

/* In place: the lower Cholesky factor of a (n x n, symmetric positive definite); -1 if not. */
static int cholesky(double *a, size_t n)
{
    for (size_t j = 0; j < n; j++) {
        double d = a[j * n + j];
        for (size_t k = 0; k < j; k++)
            d -= a[j * n + k] * a[j * n + k];
        if (!(d > 0.0))
            return -1;
        d = sqrt(d);
        a[j * n + j] = d;
        for (size_t i = j + 1; i < n; i++) {
            double x = a[i * n + j];
            for (size_t k = 0; k < j; k++)
                x -= a[i * n + k] * a[j * n + k];
            a[i * n + j] = x / d;
        }
        for (size_t i = 0; i < j; i++)
            a[i * n + j] = 0.0;
    }
    return 0;
}

/* u (n x n) = the upper Cholesky factor of H^-1 for damped H in h (destroyed): H^-1 = u^T u. */
static int inverse_upper_factor(double *h, double *u, size_t n)
{
    if (cholesky(h, n)) /* H = L L^T */
        return -1;
    /* H^-1 = L^-T L^-1: columns of L^-1 by forward substitution, into u as M = L^-1 */
    for (size_t c = 0; c < n; c++)
        for (size_t i = 0; i < n; i++) {
            double x = i == c ? 1.0 : 0.0;
            for (size_t k = c; k < i; k++)
                x -= h[i * n + k] * u[k * n + c];
            u[i * n + c] = i < c ? 0.0 : x / h[i * n + i];
        }
    /* h = M^T M = H^-1, then its lower factor, transposed into u */
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j <= i; j++) {
            double x = 0;
            for (size_t k = i; k < n; k++)
                x += u[k * n + i] * u[k * n + j];
            h[i * n + j] = h[j * n + i] = x;
        }
    if (cholesky(h, n))
        return -1;
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < n; j++)
            u[i * n + j] = h[j * n + i];
    return 0;
}

int numfmt_q4_gptq(const numfmt_q4 *q, float *w, size_t rows, size_t cols, const double *H,
                   double damp)
{
    size_t g = (size_t)q->group, sb = super_block(q, cols), nb = cols / sb;
    double *h = malloc(cols * cols * sizeof *h), *u = malloc(cols * cols * sizeof *u);
    float *super = malloc(nb * sizeof *super);
    int rc = -1;
    if (!h || !u || !super)
        goto out;
    memcpy(h, H, cols * cols * sizeof *h);
    double mean = 0;
    for (size_t i = 0; i < cols; i++)
        mean += h[i * cols + i];
    mean = mean > 0 ? mean / (double)cols : 1.0;
    for (size_t i = 0; i < cols; i++) /* an input never seen: any weight does, keep it */
        h[i * cols + i] += (h[i * cols + i] > 0 ? 0.0 : mean) + damp * mean;
    if (inverse_upper_factor(h, u, cols))
        goto out;
    /* rows are independent: each one's error moves only its own later columns */
    for (size_t r = 0; r < rows; r++) {
        float *wr = w + r * cols;
        /* the super-scales come from the row as it is, before error feedback moves it */
        for (size_t b = 0; b < nb; b++)
            super[b] = super_scale(q, wr + b * sb, sb);
        q4_grid grid = {0};
        for (size_t i = 0; i < cols; i++) {
            const double *ui = u + i * cols;
            if (i % g == 0)
                grid = fit_group(q, wr + i, g, super[i / sb]);
            float x = wr[i], qx = grid_value(&grid, x);
            wr[i] = qx;
            double e = ((double)x - qx) / ui[i];
            for (size_t j = i + 1; j < cols; j++)
                wr[j] -= (float)(e * ui[j]);
        }
    }
    rc = 0;
out:
    free(h);
    free(u);
    free(super);
    return rc;
}

void numfmt_one_part_row(const float *x, float *out, size_t n)
{
    uint32_t most = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t u = gemm_fp16x2_float_bits(x[i]) & 0x7fffffffu; /* NaN and Inf above the rest */
        most = u > most ? u : most;
    }
    int a = gemm_fp16x2_shift(most);
    for (size_t i = 0; i < n; i++)
        out[i] = gemm_fp16x2_scale(f16_round(gemm_fp16x2_scale(x[i], a)), -a);
}
