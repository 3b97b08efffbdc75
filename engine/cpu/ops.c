/* ops.c: float32 products, norms and activations for the CPU backend. Weight rows are
 * dequantized once per row and applied to every token of the batch; EXL3 weights are applied
 * through their Hadamard scheme one decoded tile at a time, never materialised. */
#include "cpu/ops.h"

#include "model/hadamard.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct matmul_job {
    const glm_weight *w;
    const float *x;
    float *y;
    int T;
    int failed;
} matmul_job;

/* Eight partial sums in a fixed order (so results do not depend on the thread count), laid
 * out so the compiler can keep them in one vector register. */
float cpu_dot(const float *a, const float *b, int n)
{
    float acc[8] = {0};
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++)
            acc[j] += a[i + j] * b[i + j];
    for (; i < n; i++)
        acc[0] += a[i] * b[i];
    return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

/* The same sum with BF16 weights widened in place (a BF16 value is the top half of a float). */
static float dot_bf16(const uint16_t *w, const float *x, int n)
{
    float acc[8] = {0};
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++) {
            uint32_t u = (uint32_t)w[i + j] << 16;
            float f;
            memcpy(&f, &u, sizeof f);
            acc[j] += f * x[i + j];
        }
    for (; i < n; i++) {
        uint32_t u = (uint32_t)w[i] << 16;
        float f;
        memcpy(&f, &u, sizeof f);
        acc[0] += f * x[i];
    }
    return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

static void matmul_rows(void *ctx, size_t begin, size_t end, int worker)
{
    matmul_job *j = ctx;
    (void)worker;
    int cols = (int)j->w->cols;
    size_t rows = (size_t)j->w->rows;
    float *buf = NULL;
    if (j->w->kind == GLM_W_PLAIN && j->w->dtype == ST_BF16 && j->T <= 16) {
        /* decode and verification windows: read each weight once, widening on the fly (the
         * bytes are what costs); the same products and sums as widening the row first */
        const uint16_t *w = j->w->data;
        for (size_t r = begin; r < end; r++)
            for (int t = 0; t < j->T; t++)
                j->y[(size_t)t * rows + r] = dot_bf16(w + r * (size_t)cols, j->x + (size_t)t * cols,
                                                      cols);
        return;
    }
    if (!(j->w->kind == GLM_W_PLAIN && j->w->dtype == ST_F32)) {
        buf = malloc((size_t)cols * sizeof *buf);
        if (!buf) {
            j->failed = 1;
            return;
        }
    }
    for (size_t r = begin; r < end; r++) {
        const float *row = glm_weight_row(j->w, (int64_t)r, buf);
        for (int t = 0; t < j->T; t++)
            j->y[(size_t)t * rows + r] = cpu_dot(row, j->x + (size_t)t * cols, cols);
    }
    free(buf);
}

/* y = ((((x . suh) Hk) W^) Hn) . svh + bias (research/exl3.md), threaded over blocks of 128
 * outputs: each block's Hn needs only its own 8 tile columns. Sums run in double in the order
 * exl3_matmul uses, so the result is the library's bit for bit. */
typedef struct exl3_job {
    const exl3_tensor *t;
    const double *xh; /* [T][in]: x . suh, rotated by Hk */
    const float *sv;  /* [out] */
    const float *values; /* the codebook's value of each 16-bit state */
    int where[EXL3_TILE_VALUES]; /* stream position -> row-major place in the tile */
    float *y;
    int T;
    int failed;
} exl3_job;

static void exl3_blocks(void *ctx, size_t begin, size_t end, int worker)
{
    exl3_job *j = ctx;
    (void)worker;
    const exl3_tensor *t = j->t;
    size_t k = (size_t)t->in, n = (size_t)t->out, T = (size_t)j->T;
    size_t tiles_n = n / EXL3_TILE, per_tile = (size_t)EXL3_TILE * (size_t)t->bits;
    const size_t tiles_per_block = HADAMARD_BLOCK / EXL3_TILE;
    double *z = malloc(T * HADAMARD_BLOCK * sizeof *z);
    if (!z) {
        j->failed = 1;
        return;
    }
    uint16_t states[EXL3_TILE_VALUES];
    double tiled[EXL3_TILE_VALUES];
    for (size_t blk = begin; blk < end; blk++) {
        memset(z, 0, T * HADAMARD_BLOCK * sizeof *z);
        for (size_t tk = 0; tk < k / EXL3_TILE; tk++)
            for (size_t c = 0; c < tiles_per_block; c++) {
                size_t tn = blk * tiles_per_block + c;
                /* exl3_decode_tile, with the codebook's float table in place of fp16 bits */
                exl3_tile_states(t->trellis + (tk * tiles_n + tn) * per_tile, t->bits, states);
                for (int p = 0; p < EXL3_TILE_VALUES; p++)
                    tiled[j->where[p]] = (double)j->values[states[p]];
                for (size_t i = 0; i < T; i++) {
                    const double *xr = j->xh + i * k + tk * EXL3_TILE;
                    double *zr = z + i * HADAMARD_BLOCK + c * EXL3_TILE;
                    for (int a = 0; a < EXL3_TILE; a++)
                        for (int b = 0; b < EXL3_TILE; b++)
                            zr[b] += xr[a] * tiled[a * EXL3_TILE + b];
                }
            }
        for (size_t i = 0; i < T; i++) {
            double *zr = z + i * HADAMARD_BLOCK;
            hadamard128_f64(zr);
            for (size_t b = 0; b < HADAMARD_BLOCK; b++) {
                size_t o = blk * HADAMARD_BLOCK + b;
                double v = zr[b] * (double)j->sv[o];
                if (t->bias)
                    v += (double)exl3_f16_to_f32(t->bias[o]);
                j->y[i * n + o] = (float)v;
            }
        }
    }
    free(z);
}

static int matmul_exl3(cpu_pool *pool, const exl3_tensor *t, const float *x, int T, float *y)
{
    size_t k = (size_t)t->in, n = (size_t)t->out;
    double *xh = malloc((size_t)T * k * sizeof *xh);
    float *su = malloc(k * sizeof *su), *sv = malloc(n * sizeof *sv);
    int rc = -1;
    if (!xh || !su || !sv)
        goto out;
    exl3_input_scales(t, su);
    exl3_output_scales(t, sv);
    for (size_t i = 0; i < (size_t)T; i++) {
        for (size_t c = 0; c < k; c++)
            xh[i * k + c] = (double)x[i * k + c] * (double)su[c];
        for (size_t b = 0; b < k; b += HADAMARD_BLOCK)
            hadamard128_f64(xh + i * k + b);
    }
    exl3_job j = {.t = t, .xh = xh, .sv = sv, .values = exl3_codebook_table(t->codebook),
                  .y = y, .T = T};
    for (int p = 0; p < EXL3_TILE_VALUES; p++) {
        int row, col;
        exl3_tile_position(p, &row, &col);
        j.where[p] = row * EXL3_TILE + col;
    }
    double work = (double)k * (double)n * T;
    cpu_pool_run(work < 65536 ? NULL : pool, n / HADAMARD_BLOCK, exl3_blocks, &j);
    rc = j.failed ? -1 : 0;
out:
    free(xh);
    free(su);
    free(sv);
    return rc;
}

int cpu_matmul(cpu_pool *pool, const glm_weight *w, const float *x, int T, float *y)
{
    if (w->kind == GLM_W_EXL3)
        return matmul_exl3(pool, w->exl3, x, T, y);
    matmul_job j = {.w = w, .x = x, .y = y, .T = T};
    double work = (double)w->rows * (double)w->cols * T;
    cpu_pool_run(work < 65536 ? NULL : pool, (size_t)w->rows, matmul_rows, &j);
    return j.failed ? -1 : 0;
}

void cpu_rmsnorm(float *out, const float *x, const float *w, int n, float eps)
{
    double ss = 0;
    for (int i = 0; i < n; i++)
        ss += (double)x[i] * x[i];
    float inv = 1.0f / sqrtf((float)(ss / n) + eps);
    for (int i = 0; i < n; i++)
        out[i] = (w ? w[i] : 1.0f) * (x[i] * inv);
}

void cpu_layernorm(float *out, const float *x, const float *w, const float *b, int n, float eps)
{
    double mean = 0, var = 0;
    for (int i = 0; i < n; i++)
        mean += x[i];
    mean /= n;
    for (int i = 0; i < n; i++)
        var += (x[i] - mean) * (x[i] - mean);
    var /= n;
    float inv = 1.0f / sqrtf((float)var + eps);
    for (int i = 0; i < n; i++)
        out[i] = (float)(x[i] - mean) * inv * w[i] + b[i];
}

float cpu_sigmoid(float x)
{
    return 1.0f / (1.0f + expf(-x));
}

float cpu_silu(float x)
{
    return x / (1.0f + expf(-x));
}

float cpu_softplus(float x)
{
    return x > 20.0f ? x : logf(1.0f + expf(x));
}
