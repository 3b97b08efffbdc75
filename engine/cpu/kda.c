/* kda.c: Kimi delta attention (architecture.md 2.4): projections, causal depthwise conv,
 * forget gate, then the delta rule per head, recurrent for one token, chunked for more. Chunks lie
 * on a grid of absolute positions (multiples of KDA_CHUNK) and a chunk of one token is the
 * recurrent step, so a prompt run in pieces split on the grid gives the bits of one pass. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/blocks.h"

#define KDA_CHUNK 16 /* = GLM_KEEP_ALIGN (session.h): where prompt states are kept */

typedef struct kda_job {
    const glm_config *c;
    kda_state *st;
    const float *q, *k, *v, *g, *beta; /* T x C (beta: T x H) */
    float *o;                          /* T x C */
    int pos0;                          /* the first token's position (the chunk grid) */
    kda_trail *trail;                  /* NULL, or token by token, keeping each state */
    int T, failed;
} kda_job;

/* One token of one head: decay, correct towards v, read with q. */
static void kda_step(float *S, const float *q, const float *k, const float *v, const float *g,
                     float beta, int dk, int dv, float *o)
{
    for (int d = 0; d < dk; d++) {
        float a = expf(g[d]);
        for (int j = 0; j < dv; j++)
            S[d * dv + j] *= a;
    }
    for (int j = 0; j < dv; j++) {
        float mem = 0;
        for (int d = 0; d < dk; d++)
            mem += S[d * dv + j] * k[d];
        float delta = (v[j] - mem) * beta;
        for (int d = 0; d < dk; d++)
            S[d * dv + j] += k[d] * delta;
    }
    for (int j = 0; j < dv; j++) {
        float acc = 0;
        for (int d = 0; d < dk; d++)
            acc += S[d * dv + j] * q[d];
        o[j] = acc;
    }
}

typedef struct chunk_buf {
    float *G, *A, *U, *W, *Aqk, *vnew, *row;
} chunk_buf;

static int chunk_buf_new(chunk_buf *b, int dk, int dv)
{
    int L = KDA_CHUNK;
    b->G = malloc((size_t)L * dk * sizeof(float));
    b->A = malloc((size_t)L * L * sizeof(float));
    b->U = malloc((size_t)L * dv * sizeof(float));
    b->W = malloc((size_t)L * dk * sizeof(float));
    b->Aqk = malloc((size_t)L * L * sizeof(float));
    b->vnew = malloc((size_t)L * dv * sizeof(float));
    b->row = malloc((size_t)L * sizeof(float));
    return b->G && b->A && b->U && b->W && b->Aqk && b->vnew && b->row ? 0 : -1;
}

static void chunk_buf_free(chunk_buf *b)
{
    free(b->G);
    free(b->A);
    free(b->U);
    free(b->W);
    free(b->Aqk);
    free(b->vnew);
    free(b->row);
}

/* One chunk of L rows of one head (WY form): rows are strided by C in q, k, v, g, o. */
static void kda_chunk(float *S, const float *q, const float *k, const float *v, const float *g,
                      const float *beta, int bstride, int L, int C, int dk, int dv, float *o,
                      chunk_buf *b)
{
    for (int i = 0; i < L; i++)
        for (int d = 0; d < dk; d++)
            b->G[i * dk + d] = g[(size_t)i * C + d] + (i ? b->G[(i - 1) * dk + d] : 0.0f);
    /* A[i][j] = -beta_i sum_d k_i k_j exp(G_i - G_j), j < i; then (I + N)^-1 by substitution */
    for (int i = 0; i < L; i++) {
        const float *ki = k + (size_t)i * C;
        for (int j = 0; j < L; j++) {
            float acc = 0;
            if (j < i) {
                const float *kj = k + (size_t)j * C;
                for (int d = 0; d < dk; d++)
                    acc += ki[d] * kj[d] * expf(b->G[i * dk + d] - b->G[j * dk + d]);
                acc *= -beta[(size_t)i * bstride];
            }
            b->A[i * L + j] = acc;
        }
    }
    for (int i = 1; i < L; i++) {
        for (int j = 0; j < i; j++)
            b->row[j] = b->A[i * L + j];
        for (int j = 0; j < i; j++) {
            float acc = b->row[j];
            for (int m = j + 1; m < i; m++)
                acc += b->row[m] * b->A[m * L + j];
            b->A[i * L + j] = acc;
        }
    }
    for (int i = 0; i < L; i++)
        b->A[i * L + i] = 1.0f;
    /* U = Tm (beta v), W = Tm (beta k exp(G)) */
    for (int i = 0; i < L; i++) {
        for (int j = 0; j < dv; j++)
            b->U[i * dv + j] = 0;
        for (int d = 0; d < dk; d++)
            b->W[i * dk + d] = 0;
        for (int m = 0; m <= i; m++) {
            float t = b->A[i * L + m] * beta[(size_t)m * bstride];
            const float *vm = v + (size_t)m * C, *km = k + (size_t)m * C;
            for (int j = 0; j < dv; j++)
                b->U[i * dv + j] += t * vm[j];
            for (int d = 0; d < dk; d++)
                b->W[i * dk + d] += t * km[d] * expf(b->G[m * dk + d]);
        }
    }
    /* intra-chunk scores, diagonal included */
    for (int i = 0; i < L; i++) {
        const float *qi = q + (size_t)i * C;
        for (int j = 0; j <= i; j++) {
            const float *kj = k + (size_t)j * C;
            float acc = 0;
            for (int d = 0; d < dk; d++)
                acc += qi[d] * kj[d] * expf(b->G[i * dk + d] - b->G[j * dk + d]);
            b->Aqk[i * L + j] = acc;
        }
    }
    /* v' = U - W S; o = (q exp(G)) S + Aqk v' */
    for (int i = 0; i < L; i++) {
        for (int j = 0; j < dv; j++) {
            float acc = b->U[i * dv + j];
            for (int d = 0; d < dk; d++)
                acc -= b->W[i * dk + d] * S[d * dv + j];
            b->vnew[i * dv + j] = acc;
        }
    }
    for (int i = 0; i < L; i++) {
        const float *qi = q + (size_t)i * C;
        float *oi = o + (size_t)i * C;
        for (int j = 0; j < dv; j++) {
            float acc = 0;
            for (int d = 0; d < dk; d++)
                acc += qi[d] * expf(b->G[i * dk + d]) * S[d * dv + j];
            for (int m = 0; m <= i; m++)
                acc += b->Aqk[i * L + m] * b->vnew[m * dv + j];
            oi[j] = acc;
        }
    }
    /* S <- diag(exp(G_last)) S + sum_j (k_j exp(G_last - G_j)) v'_j^T */
    const float *Gl = b->G + (L - 1) * dk;
    for (int d = 0; d < dk; d++) {
        float decay = expf(Gl[d]);
        for (int j = 0; j < dv; j++) {
            float acc = S[d * dv + j] * decay;
            for (int m = 0; m < L; m++)
                acc += k[(size_t)m * C + d] * expf(Gl[d] - b->G[m * dk + d]) * b->vnew[m * dv + j];
            S[d * dv + j] = acc;
        }
    }
}

static void kda_heads(void *ctx, size_t begin, size_t end, int worker)
{
    kda_job *j = ctx;
    (void)worker;
    const glm_config *c = j->c;
    int H = c->kda_heads, dk = c->kda_head_dim, dv = dk, C = H * dk;
    chunk_buf b = {0};
    if (j->trail) {
        size_t rec = (size_t)H * dk * dv;
        for (size_t h = begin; h < end; h++) {
            float *S = j->st->S + h * (size_t)dk * dv;
            for (int t = 0; t < j->T; t++) {
                size_t off = (size_t)t * C + h * (size_t)dk;
                kda_step(S, j->q + off, j->k + off, j->v + off, j->g + off,
                         j->beta[(size_t)t * H + h], dk, dv, j->o + off);
                memcpy(j->trail->S + t * rec + h * (size_t)dk * dv, S,
                       (size_t)dk * dv * sizeof *S);
            }
        }
        return;
    }
    if (j->T > 1 && chunk_buf_new(&b, dk, dv) != 0) {
        chunk_buf_free(&b);
        j->failed = 1;
        return;
    }
    for (size_t h = begin; h < end; h++) {
        float *S = j->st->S + h * (size_t)dk * dv;
        size_t off = h * (size_t)dk;
        for (int t0 = 0, L; t0 < j->T; t0 += L) {
            int to_grid = KDA_CHUNK - (j->pos0 + t0) % KDA_CHUNK;
            L = j->T - t0 < to_grid ? j->T - t0 : to_grid;
            size_t r = (size_t)t0 * C + off;
            if (L == 1)
                kda_step(S, j->q + r, j->k + r, j->v + r, j->g + r, j->beta[(size_t)t0 * H + h], dk,
                         dv, j->o + r);
            else
                kda_chunk(S, j->q + r, j->k + r, j->v + r, j->g + r, j->beta + (size_t)t0 * H + h,
                          H, L, C, dk, dv, j->o + r, &b);
        }
    }
    chunk_buf_free(&b);
}

/* Causal depthwise conv over [state rows | new rows], SiLU; the state keeps the last K-1 rows. */
static int kda_conv(const glm_config *c, const glm_kda_weights *w, kda_state *st, float *z, int T,
                    kda_trail *trail)
{
    int C3 = 3 * c->kda_heads * c->kda_head_dim, K = c->kda_conv_kernel, C = C3 / 3;
    size_t rows = (size_t)(K - 1) + T;
    float *zz = malloc(rows * C3 * sizeof *zz);
    if (!zz)
        return -1;
    memcpy(zz, st->conv, (size_t)(K - 1) * C3 * sizeof *zz);
    memcpy(zz + (size_t)(K - 1) * C3, z, (size_t)T * C3 * sizeof *zz);
    for (int t = 0; t < T; t++) {
        for (int ch = 0; ch < C3; ch++) {
            const float *wt = ch < C ? w->q_conv + (size_t)ch * K
                              : ch < 2 * C ? w->k_conv + (size_t)(ch - C) * K
                                           : w->v_conv + (size_t)(ch - 2 * C) * K;
            float acc = 0;
            for (int j = 0; j < K; j++)
                acc += wt[j] * zz[(size_t)(t + j) * C3 + ch];
            z[(size_t)t * C3 + ch] = cpu_silu(acc);
        }
    }
    memcpy(st->conv, zz + (size_t)T * C3, (size_t)(K - 1) * C3 * sizeof *zz);
    for (int t = 0; trail && t < T; t++) /* the window after token t */
        memcpy(trail->conv + (size_t)t * (K - 1) * C3, zz + (size_t)(t + 1) * C3,
               (size_t)(K - 1) * C3 * sizeof *zz);
    free(zz);
    return 0;
}

static void l2norm_scale(float *x, int n, float scale)
{
    float ss = 0;
    for (int i = 0; i < n; i++)
        ss += x[i] * x[i];
    float inv = scale / sqrtf(ss + 1e-6f);
    for (int i = 0; i < n; i++)
        x[i] *= inv;
}

int cpu_kda(cpu_pool *pool, const glm_config *c, const glm_kda_weights *w, kda_state *st,
            int pos0, const float *u, int T, float *out, kda_trail *trail, const cpu_inputs *in)
{
    int H = c->kda_heads, dk = c->kda_head_dim, C = H * dk, C3 = 3 * C;
    size_t TC = (size_t)T * C;
    float *z = malloc((size_t)T * C3 * sizeof *z);
    float *q = malloc(TC * sizeof *q), *k = malloc(TC * sizeof *k), *v = malloc(TC * sizeof *v);
    float *g = malloc(TC * sizeof *g), *o = malloc(TC * sizeof *o), *gate = malloc(TC * sizeof *gate);
    float *lo = malloc((size_t)T * dk * sizeof *lo), *beta = malloc((size_t)T * H * sizeof *beta);
    int rc = -1;
    if (!z || !q || !k || !v || !g || !o || !gate || !lo || !beta)
        goto out;
    /* z = [q | k | v] rows */
    if (cpu_matmul_in(pool, &w->q_proj, u, T, q, in) || cpu_matmul_in(pool, &w->k_proj, u, T, k, in) ||
        cpu_matmul_in(pool, &w->v_proj, u, T, v, in))
        goto out;
    for (int t = 0; t < T; t++) {
        memcpy(z + (size_t)t * C3, q + (size_t)t * C, C * sizeof *z);
        memcpy(z + (size_t)t * C3 + C, k + (size_t)t * C, C * sizeof *z);
        memcpy(z + (size_t)t * C3 + 2 * C, v + (size_t)t * C, C * sizeof *z);
    }
    if (kda_conv(c, w, st, z, T, trail))
        goto out;
    float qscale = 1.0f / sqrtf((float)dk);
    for (int t = 0; t < T; t++) {
        memcpy(q + (size_t)t * C, z + (size_t)t * C3, C * sizeof *z);
        memcpy(k + (size_t)t * C, z + (size_t)t * C3 + C, C * sizeof *z);
        memcpy(v + (size_t)t * C, z + (size_t)t * C3 + 2 * C, C * sizeof *z);
        for (int h = 0; h < H; h++) {
            l2norm_scale(q + (size_t)t * C + h * dk, dk, qscale);
            l2norm_scale(k + (size_t)t * C + h * dk, dk, 1.0f);
        }
    }
    /* forget gate G (log decay per head and key channel) and beta */
    if (cpu_matmul_in(pool, &w->f_a, u, T, lo, in) || cpu_matmul_in(pool, &w->f_b, lo, T, g, in) ||
        cpu_matmul_in(pool, &w->b_proj, u, T, beta, in))
        goto out;
    for (int t = 0; t < T; t++) {
        for (int h = 0; h < H; h++) {
            float rate = expf(w->A_log[h]);
            for (int d = 0; d < dk; d++) {
                size_t i = (size_t)t * C + h * dk + d;
                float x = g[i] + w->dt_bias[h * dk + d];
                g[i] = c->kda_has_lower_bound ? c->kda_lower_bound * cpu_sigmoid(rate * x)
                                              : -rate * cpu_softplus(x);
            }
            beta[t * H + h] = cpu_sigmoid(beta[t * H + h]);
        }
    }
    kda_job job = {.c = c, .st = st, .q = q, .k = k, .v = v, .g = g, .beta = beta, .o = o,
                   .pos0 = pos0, .trail = trail, .T = T};
    cpu_pool_run((double)T * C * dk < 65536 ? NULL : pool, (size_t)H, kda_heads, &job);
    if (job.failed)
        goto out;
    /* gated RMSNorm per head, then the output projection */
    if (cpu_matmul_in(pool, &w->g_a, u, T, lo, in) ||
        cpu_matmul_in(pool, &w->g_b, lo, T, gate, in))
        goto out;
    for (int t = 0; t < T; t++) {
        for (int h = 0; h < H; h++) {
            float *oh = o + (size_t)t * C + h * dk;
            const float *gh = gate + (size_t)t * C + h * dk;
            cpu_rmsnorm(oh, oh, w->o_norm, dk, c->rms_norm_eps);
            for (int d = 0; d < dk; d++)
                oh[d] *= cpu_sigmoid(gh[d]);
        }
    }
    rc = cpu_matmul_in(pool, &w->o_proj, o, T, out, in);
out:
    free(z);
    free(q);
    free(k);
    free(v);
    free(g);
    free(o);
    free(gate);
    free(lo);
    free(beta);
    return rc;
}
