/* ops.c: float32 products, norms and activations for the CPU backend. Weight rows are
 * dequantized once per row and applied to every token of the batch. */
#include "cpu/ops.h"

#include <math.h>
#include <stdlib.h>

typedef struct matmul_job {
    const glm_weight *w;
    const float *x;
    float *y;
    int T;
    int failed;
} matmul_job;

float cpu_dot(const float *a, const float *b, int n)
{
    /* four partial sums: a fixed order, so results do not depend on the thread count */
    float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    int i = 0;
    for (; i + 4 <= n; i += 4) {
        s0 += a[i] * b[i];
        s1 += a[i + 1] * b[i + 1];
        s2 += a[i + 2] * b[i + 2];
        s3 += a[i + 3] * b[i + 3];
    }
    for (; i < n; i++)
        s0 += a[i] * b[i];
    return (s0 + s1) + (s2 + s3);
}

static void matmul_rows(void *ctx, size_t begin, size_t end, int worker)
{
    matmul_job *j = ctx;
    (void)worker;
    int cols = (int)j->w->cols;
    size_t rows = (size_t)j->w->rows;
    float *buf = NULL;
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
