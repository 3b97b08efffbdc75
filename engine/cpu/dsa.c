/* dsa.c: DeepSeek sparse attention (architecture.md 2.5): MLA over the kv latent in absorbed
 * form, and the indexer that scores pooled keys and selects pools plus the open tail.
 * Ties in the indexer's top-k go to the lower pool index (the earlier pool wins). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/blocks.h"

/* Descending score; equal scores: lower pool index first. */
static int cmp_pool_score(const void *a, const void *b)
{
    const pool_score *x = a, *y = b;
    if (x->score > y->score)
        return -1;
    if (x->score < y->score)
        return 1;
    return (x->pool > y->pool) - (x->pool < y->pool);
}

static int cmp_i32(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

int dsa_select_rule(const float *scores, int pos, int kp, int budget, pool_score *work,
                    int32_t *out)
{
    int P = (pos + 1) / kp, n = 0;
    if (P <= budget) {
        for (int s = 0; s < P * kp; s++)
            out[n++] = s;
    } else {
        for (int p = 0; p < P; p++)
            work[p].score = scores[p], work[p].pool = p;
        qsort(work, (size_t)P, sizeof *work, cmp_pool_score);
        for (int i = 0; i < budget; i++)
            for (int j = 0; j < kp; j++)
                out[n++] = work[i].pool * kp + j;
    }
    for (int s = P * kp; s <= pos; s++) /* the open tail, which holds the query itself */
        out[n++] = s;
    qsort(out, (size_t)n, sizeof *out, cmp_i32);
    return n;
}

/* Pool key p: per channel a softmax over the pool's tokens of (gate + ape), weighting keys. */
static void make_pool_key(const glm_config *c, const glm_dsa_weights *w, const dsa_cache *dc, int p,
                          float *key)
{
    int kp = c->index_kpool, ID = c->index_head_dim;
    for (int d = 0; d < ID; d++) {
        float mx = -INFINITY, lg[64];
        for (int j = 0; j < kp; j++) {
            lg[j] = dc->idx_gate[(size_t)(p * kp + j) * ID + d] + w->idx_ape[j * ID + d];
            mx = fmaxf(mx, lg[j]);
        }
        float sum = 0;
        for (int j = 0; j < kp; j++) {
            lg[j] = expf(lg[j] - mx);
            sum += lg[j];
        }
        float acc = 0;
        for (int j = 0; j < kp; j++)
            acc += lg[j] / sum * dc->idx_key[(size_t)(p * kp + j) * ID + d];
        key[d] = acc;
    }
}

/* Rows [first, first + n) of a cache of width `width`, rounded to nf's format. */
static void round_rows(const cpu_numerics *nf, float *rows, int first, int n, int width)
{
    for (int r = first; r < first + n; r++)
        numfmt_cache_row(nf->cache, nf->rule, rows + (size_t)r * width, (size_t)width);
}

/* The indexer for T new tokens: caches keys/gates/pool keys (each row in nf's format, pool keys
 * made from the rounded keys and gates, as on the GPU), fills the selection. */
static int indexer(cpu_pool *pool, const glm_config *c, const glm_dsa_weights *w, dsa_cache *dc,
                   const cpu_numerics *nf, int pos0, const float *u, const float *qr, int T,
                   dsa_selection *sel, const cpu_inputs *in)
{
    int ID = c->index_head_dim, IH = c->index_n_heads, kp = c->index_kpool;
    int budget = c->index_topk / kp;
    float *wk = malloc((size_t)T * ID * sizeof *wk);
    float *iq = malloc((size_t)T * IH * ID * sizeof *iq);
    float *hw = malloc((size_t)T * IH * sizeof *hw);
    int n_pools_max = (pos0 + T) / kp;
    pool_score *ps = malloc((size_t)(n_pools_max + 1) * sizeof *ps);
    float *row = malloc((size_t)(n_pools_max + 1) * sizeof *row);
    int rc = -1;
    if (!wk || !iq || !hw || !ps || !row)
        goto out;
    if (cpu_matmul_in(pool, &w->idx_wk, u, T, wk, in) ||
        cpu_matmul_in(pool, &w->idx_gate, u, T, dc->idx_gate + (size_t)pos0 * ID, in))
        goto out;
    for (int t = 0; t < T; t++)
        cpu_layernorm(dc->idx_key + (size_t)(pos0 + t) * ID, wk + (size_t)t * ID, w->idx_k_norm_w,
                      w->idx_k_norm_b, ID, 1e-6f);
    for (int t = 0; sel->cache_in && t < T; t++) {
        float *in = sel->cache_in + (size_t)t * (c->kv_lora_rank + 2 * ID) + c->kv_lora_rank;
        memcpy(in, dc->idx_key + (size_t)(pos0 + t) * ID, (size_t)ID * sizeof *in);
        memcpy(in + ID, dc->idx_gate + (size_t)(pos0 + t) * ID, (size_t)ID * sizeof *in);
    }
    round_rows(nf, dc->idx_key, pos0, T, ID);
    round_rows(nf, dc->idx_gate, pos0, T, ID);
    for (; dc->n_pools < n_pools_max; dc->n_pools++) {
        make_pool_key(c, w, dc, dc->n_pools, dc->pool_key + (size_t)dc->n_pools * ID);
        round_rows(nf, dc->pool_key, dc->n_pools, 1, ID);
    }
    int need_scores = 0;
    for (int t = 0; t < T; t++)
        need_scores |= (pos0 + t + 1) / kp > budget;
    if (need_scores && (cpu_matmul_in(pool, &w->idx_wq_b, qr, T, iq, in) ||
                        cpu_matmul_in(pool, &w->idx_weights, u, T, hw, in)))
        goto out;
    if (need_scores) /* the one-part form's query, where CUDA's chunk takes it (forward.c dsa_select) */
        cpu_inputs_round_heads(in, &w->idx_wq_b, iq, T, IH, ID);
    float hscale = 1.0f / sqrtf((float)IH), dscale = 1.0f / sqrtf((float)ID);
    for (int t = 0; t < T; t++) {
        int pos = pos0 + t, P = (pos + 1) / kp;
        int32_t *out = sel->idx + (size_t)t * sel->width;
        float *scores = sel->scores ? sel->scores + (size_t)t * sel->score_width : NULL;
        for (int p = 0; scores && p < sel->score_width; p++)
            scores[p] = NAN;
        if (P > budget)
            for (int p = 0; p < P; p++) {
                const float *K = dc->pool_key + (size_t)p * ID;
                float score = 0;
                for (int h = 0; h < IH; h++) {
                    float dot = cpu_dot(iq + ((size_t)t * IH + h) * ID, K, ID) * dscale;
                    score += hw[(size_t)t * IH + h] * hscale * (dot > 0 ? dot : 0);
                }
                row[p] = score;
                if (scores && p < sel->score_width)
                    scores[p] = score;
            }
        sel->count[t] = dsa_select_rule(row, pos, kp, budget, ps, out);
    }
    rc = 0;
out:
    free(wk);
    free(iq);
    free(hw);
    free(ps);
    free(row);
    return rc;
}

typedef struct mla_job {
    const glm_config *c;
    const glm_dsa_weights *w;
    const dsa_cache *dc;
    const float *q;  /* T x H x dn */
    const dsa_selection *sel;
    float *o;        /* T x H x dv */
    int T, failed;
} mla_job;

/* Heads [begin, end): absorb W_k into the query, attend over latent rows, expand with W_v. */
static void mla_heads(void *ctx, size_t begin, size_t end, int worker)
{
    mla_job *j = ctx;
    (void)worker;
    const glm_config *c = j->c;
    int H = c->num_heads, dn = c->qk_nope_head_dim, dv = c->v_head_dim, R = c->kv_lora_rank;
    float *qt = malloc((size_t)j->T * R * sizeof *qt), *ot = malloc((size_t)j->T * R * sizeof *ot);
    float *rowbuf = malloc((size_t)R * sizeof *rowbuf);
    float *p = malloc((size_t)j->sel->width * sizeof *p);
    if (!qt || !ot || !rowbuf || !p) {
        j->failed = 1;
        goto out;
    }
    float scale = 1.0f / sqrtf((float)dn);
    for (size_t h = begin; h < end; h++) {
        memset(qt, 0, (size_t)j->T * R * sizeof *qt);
        for (int i = 0; i < dn; i++) {
            const float *row = glm_weight_row(&j->w->kv_b, (int64_t)h * (dn + dv) + i, rowbuf);
            for (int t = 0; t < j->T; t++) {
                float qi = j->q[((size_t)t * H + h) * dn + i];
                float *dst = qt + (size_t)t * R;
                for (int r = 0; r < R; r++)
                    dst[r] += qi * row[r];
            }
        }
        for (int t = 0; t < j->T; t++) {
            const int32_t *idx = j->sel->idx + (size_t)t * j->sel->width;
            int n = j->sel->count[t];
            float mx = -INFINITY, sum = 0;
            for (int s = 0; s < n; s++) {
                p[s] = cpu_dot(qt + (size_t)t * R, j->dc->latent + (size_t)idx[s] * R, R) * scale;
                mx = fmaxf(mx, p[s]);
            }
            for (int s = 0; s < n; s++) {
                p[s] = expf(p[s] - mx);
                sum += p[s];
            }
            float *dst = ot + (size_t)t * R;
            memset(dst, 0, (size_t)R * sizeof *dst);
            for (int s = 0; s < n; s++) {
                const float *lat = j->dc->latent + (size_t)idx[s] * R;
                float ps = p[s] / sum;
                for (int r = 0; r < R; r++)
                    dst[r] += ps * lat[r];
            }
        }
        for (int i = 0; i < dv; i++) {
            const float *row = glm_weight_row(&j->w->kv_b, (int64_t)h * (dn + dv) + dn + i, rowbuf);
            for (int t = 0; t < j->T; t++)
                j->o[((size_t)t * H + h) * dv + i] = cpu_dot(row, ot + (size_t)t * R, R);
        }
    }
out:
    free(qt);
    free(ot);
    free(rowbuf);
    free(p);
}

int cpu_dsa(cpu_pool *pool, const glm_config *c, const glm_dsa_weights *w, dsa_cache *dc,
            const cpu_numerics *nf, int pos0, const float *u, int T, const dsa_selection *sel_in,
            dsa_selection *sel_out, float *out, const cpu_inputs *in)
{
    int H = c->num_heads, dn = c->qk_nope_head_dim, dv = c->v_head_dim, R = c->kv_lora_rank;
    int qr_n = c->q_lora_rank;
    float *qa = malloc((size_t)T * qr_n * sizeof *qa), *q = malloc((size_t)T * H * dn * sizeof *q);
    float *o = malloc((size_t)T * H * dv * sizeof *o);
    float *lat = dc->latent + (size_t)pos0 * R;
    int rc = -1;
    if (!qa || !q || !o)
        goto out;
    if (cpu_matmul_in(pool, &w->q_a, u, T, qa, in))
        goto out;
    for (int t = 0; t < T; t++)
        cpu_rmsnorm(qa + (size_t)t * qr_n, qa + (size_t)t * qr_n, w->q_a_norm, qr_n, c->rms_norm_eps);
    if (cpu_matmul_in(pool, &w->q_b, qa, T, q, in) ||
        cpu_matmul_in(pool, &w->kv_a, u, T, lat, in))
        goto out;
    for (int t = 0; t < T; t++)
        cpu_rmsnorm(lat + (size_t)t * R, lat + (size_t)t * R, w->kv_a_norm, R, c->rms_norm_eps);
    int in_width = R + (w->has_indexer ? 2 * c->index_head_dim : 0);
    for (int t = 0; sel_out->cache_in && t < T; t++)
        memcpy(sel_out->cache_in + (size_t)t * in_width, lat + (size_t)t * R, (size_t)R * sizeof *lat);
    round_rows(nf, lat, 0, T, R);
    const dsa_selection *sel = sel_in;
    if (w->has_indexer) {
        if (indexer(pool, c, w, dc, nf, pos0, u, qa, T, sel_out, in))
            goto out;
        sel = sel_out;
    } else if (sel_out != sel_in) {
        memcpy(sel_out->count, sel_in->count, (size_t)T * sizeof *sel_out->count);
        memcpy(sel_out->idx, sel_in->idx, (size_t)T * sel_in->width * sizeof *sel_out->idx);
    }
    mla_job job = {.c = c, .w = w, .dc = dc, .q = q, .sel = sel, .o = o, .T = T};
    cpu_pool_run(pool, (size_t)H, mla_heads, &job);
    if (job.failed)
        goto out;
    rc = cpu_matmul_in(pool, &w->o_proj, o, T, out, in);
out:
    free(qa);
    free(q);
    free(o);
    return rc;
}
