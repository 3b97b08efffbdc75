/* ops.h: the CPU backend's float32 building blocks: products with (possibly BF16/FP8) weight
 * matrices threaded over rows, RMSNorm, LayerNorm, activations. */
#ifndef GLMCHAT_ENGINE_CPU_OPS_H
#define GLMCHAT_ENGINE_CPU_OPS_H

#include "cpu/threads.h"
#include "model/weights.h"

/* y[t][r] = sum_c x[t][c] * W[r][c] for t < T (x: T x cols, y: T x rows). Returns -1 when a
 * scratch row cannot be allocated. */
int cpu_matmul(cpu_pool *pool, const glm_weight *w, const float *x, int T, float *y);

/* The rows [r0, r1) of a product's T whose inputs the CUDA backend's one-part products round
 * (cuda_gemm = onepart; prefill_grid.h says which): r0 == r1, or no cpu_inputs, for none. */
typedef struct cpu_inputs {
    int r0, r1;
} cpu_inputs;
/* cpu_matmul, with the rows of in rounded as numfmt_one_part_row does where w is a BF16 weight
 * the fp16 forms take (eng_gemm_half_takes): the CUDA backend's one-part product, emulated. */
int cpu_matmul_in(cpu_pool *pool, const glm_weight *w, const float *x, int T, float *y,
                  const cpu_inputs *in);
/* The rows of in of x (T rows of heads x width), the output of a product with w, rounded head by
 * head as numfmt_one_part_row does where w's own inputs are (cpu_matmul_in): the indexer's query
 * under the CUDA backend's one-part form (kernels/engine.h eng_one_part_rows). */
void cpu_inputs_round_heads(const cpu_inputs *in, const glm_weight *w, float *x, int T, int heads,
                            int width);

/* out = w * x / sqrt(mean(x^2) + eps); w may be NULL (no weight). out may be x. */
void cpu_rmsnorm(float *out, const float *x, const float *w, int n, float eps);
/* out = (x - mean) / sqrt(var + eps) * w + b. */
void cpu_layernorm(float *out, const float *x, const float *w, const float *b, int n, float eps);

float cpu_sigmoid(float x);
float cpu_silu(float x);
float cpu_softplus(float x); /* log(1 + e^x), x itself above 20 as the reference does */
float cpu_dot(const float *a, const float *b, int n);

#endif
