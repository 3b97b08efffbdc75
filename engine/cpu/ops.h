/* ops.h: the CPU backend's float32 building blocks: products with (possibly BF16/FP8) weight
 * matrices threaded over rows, RMSNorm, LayerNorm, activations. */
#ifndef GLMCHAT_ENGINE_CPU_OPS_H
#define GLMCHAT_ENGINE_CPU_OPS_H

#include "cpu/threads.h"
#include "model/weights.h"

/* y[t][r] = sum_c x[t][c] * W[r][c] for t < T (x: T x cols, y: T x rows). Returns -1 when a
 * scratch row cannot be allocated. */
int cpu_matmul(cpu_pool *pool, const glm_weight *w, const float *x, int T, float *y);

/* out = w * x / sqrt(mean(x^2) + eps); w may be NULL (no weight). out may be x. */
void cpu_rmsnorm(float *out, const float *x, const float *w, int n, float eps);
/* out = (x - mean) / sqrt(var + eps) * w + b. */
void cpu_layernorm(float *out, const float *x, const float *w, const float *b, int n, float eps);

float cpu_sigmoid(float x);
float cpu_silu(float x);
float cpu_softplus(float x); /* log(1 + e^x), x itself above 20 as the reference does */
float cpu_dot(const float *a, const float *b, int n);

#endif
