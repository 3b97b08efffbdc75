/* hc.c: manifold-constrained hyper-connections (architecture.md 2.3): the collapse of the
 * residual streams with Sinkhorn-normalised mixing, and the stream update after a sub-block. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/blocks.h"

static void sinkhorn(float *C, int S, int iters, float eps)
{
    for (int i = 0; i < S; i++) { /* softmax along each row, plus eps */
        float mx = C[i * S];
        for (int j = 1; j < S; j++)
            mx = fmaxf(mx, C[i * S + j]);
        float sum = 0;
        for (int j = 0; j < S; j++) {
            C[i * S + j] = expf(C[i * S + j] - mx);
            sum += C[i * S + j];
        }
        for (int j = 0; j < S; j++)
            C[i * S + j] = C[i * S + j] / sum + eps;
    }
    for (int it = 0; it < iters; it++) {
        if (it > 0) {
            for (int i = 0; i < S; i++) { /* rows */
                float sum = 0;
                for (int j = 0; j < S; j++)
                    sum += C[i * S + j];
                for (int j = 0; j < S; j++)
                    C[i * S + j] /= sum + eps;
            }
        }
        for (int j = 0; j < S; j++) { /* columns */
            float sum = 0;
            for (int i = 0; i < S; i++)
                sum += C[i * S + j];
            for (int i = 0; i < S; i++)
                C[i * S + j] /= sum + eps;
        }
    }
}

int cpu_hc_pre(cpu_pool *pool, const glm_config *c, const glm_weight *fn, const float *base,
               const float *scale, const float *X, int T, float *post, float *comb, float *out,
               const cpu_inputs *in)
{
    int S = c->hc_mult, D = c->hidden_size, mix = (2 + S) * S;
    size_t SD = (size_t)S * D;
    float *flat = calloc((size_t)T * SD, sizeof *flat);
    float *mu = malloc((size_t)T * mix * sizeof *mu);
    if (!flat || !mu) {
        free(flat);
        free(mu);
        return -1;
    }
    for (int t = 0; t < T; t++)
        cpu_rmsnorm(flat + t * SD, X + t * SD, NULL, (int)SD, c->rms_norm_eps);
    /* the CUDA backend's prefill runs the norm and this product in one f32 kernel where the
     * mixing rows are 24 (4 streams) and the width a multiple of 256 (eng_hc_norm_mix_takes):
     * no one-part product there */
    int fused = fn->rows == 24 && mix == 24 && SD % 256 == 0;
    int rc = cpu_matmul_in(pool, fn, flat, T, mu, fused ? NULL : in);
    for (int t = 0; rc == 0 && t < T; t++) {
        const float *m = mu + (size_t)t * mix;
        float pre[64];
        for (int s = 0; s < S; s++) {
            pre[s] = cpu_sigmoid(m[s] * scale[0] + base[s]) + c->hc_eps;
            post[t * S + s] = 2.0f * cpu_sigmoid(m[S + s] * scale[1] + base[S + s]);
        }
        float *C = comb + (size_t)t * S * S;
        for (int k = 0; k < S * S; k++)
            C[k] = m[2 * S + k] * scale[2] + base[2 * S + k];
        sinkhorn(C, S, c->hc_sinkhorn_iters, c->hc_eps);
        float *o = out + (size_t)t * D;
        const float *x = X + t * SD;
        for (int d = 0; d < D; d++) {
            float acc = 0;
            for (int s = 0; s < S; s++)
                acc += pre[s] * x[(size_t)s * D + d];
            o[d] = acc;
        }
    }
    free(flat);
    free(mu);
    return rc;
}

int cpu_hc_post(const glm_config *c, float *X, const float *y, const float *post,
                const float *comb, int T)
{
    int S = c->hc_mult, D = c->hidden_size;
    size_t SD = (size_t)S * D;
    float *old = malloc(SD * sizeof *old);
    if (!old)
        return -1;
    for (int t = 0; t < T; t++) {
        float *x = X + t * SD;
        const float *C = comb + (size_t)t * S * S;
        const float *yt = y + (size_t)t * D;
        memcpy(old, x, SD * sizeof *old);
        for (int j = 0; j < S; j++) {
            float pj = post[t * S + j];
            float *xj = x + (size_t)j * D;
            for (int d = 0; d < D; d++) {
                float acc = pj * yt[d];
                for (int i = 0; i < S; i++)
                    acc += C[i * S + j] * old[(size_t)i * D + d];
                xj[d] = acc;
            }
        }
    }
    free(old);
    return 0;
}
