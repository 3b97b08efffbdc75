/* ops.c: float32 products, norms and activations for the CPU backend. Weight rows are
 * dequantized once per row and applied to every token of the batch. */
#include "cpu/ops.h"

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
    if (j->w->kind == GLM_W_PLAIN && j->w->dtype == ST_BF16 && j->T <= 2) {
        /* decode: read each weight once, widening on the fly (the bytes are what costs) */
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

int cpu_matmul(cpu_pool *pool, const glm_weight *w, const float *x, int T, float *y)
{
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
