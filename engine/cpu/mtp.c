/* mtp.c: the MTP layer on the CPU (architecture.md 2.8): [enorm(embed(t+1)) | hnorm(h_t)] through
 * eh_proj, a DSA + MoE block without hyper-connections over its own cache, shared_head.norm and
 * the main LM head; kept in step with the main model and chained for drafts. */
#include <stdlib.h>
#include <string.h>

#include "cpu/blocks.h"
#include "prefill_grid.h"
#include "cpu/forward.h"
#include "sampler.h"

int cpu_mtp_on(const cpu_state *s)
{
    return s->m->w.has_mtp && !s->coll.all_reduce;
}

void cpu_mtp_free(cpu_state *s)
{
    free(s->mtp.latent);
    free(s->mtp.idx_key);
    free(s->mtp.idx_gate);
    free(s->mtp.pool_key);
    free(s->h);
    free(s->mark_h);
}

void cpu_mtp_cut(cpu_state *s, int n)
{
    int want = n > 0 ? n - 1 : 0;
    if (s->mtp_n < 0 && n > 0)
        return; /* lost: stays lost until a reset */
    if (s->mtp_n > want)
        s->mtp_n = want;
    if (s->mtp.n_pools > s->mtp_n / s->m->cfg.index_kpool)
        s->mtp.n_pools = s->mtp_n / s->m->cfg.index_kpool;
}

/* m rows at MTP positions mtp_n..: h (m x D) and the tokens that follow them. Appends to the
 * cache; g (m x D) receives the shared_head.norm rows. */
static int mtp_block(cpu_state *s, cpu_pool *pool, const float *h, const int32_t *tok, int m,
                     float *g, const cpu_inputs *in)
{
    const glm_config *c = &s->m->cfg;
    const glm_mtp_weights *w = &s->m->w.mtp;
    int D = c->hidden_size;
    size_t MD = (size_t)m * D;
    float *cat = calloc(2 * MD, sizeof *cat), *x = malloc(MD * sizeof *x);
    float *u = malloc(MD * sizeof *u), *y = malloc(MD * sizeof *y), *row = malloc((size_t)D * 4);
    dsa_selection sel = {.width = c->index_topk + c->index_kpool - 1};
    sel.count = malloc((size_t)m * sizeof *sel.count);
    sel.idx = malloc((size_t)m * sel.width * sizeof *sel.idx);
    int rc = -1;
    if (!cat || !x || !u || !y || !row || !sel.count || !sel.idx)
        goto out;
    for (int t = 0; t < m; t++) {
        float *e = cat + (size_t)t * 2 * D, *hh = e + D;
        if (s->mtp_n + t == 0) {
            memset(e, 0, (size_t)D * sizeof *e); /* the embedding is zeroed at position 0 */
        } else {
            const float *emb = glm_weight_row(&s->m->w.embed, tok[t], row);
            cpu_rmsnorm(e, emb, w->enorm, D, c->rms_norm_eps);
        }
        cpu_rmsnorm(hh, h + (size_t)t * D, w->hnorm, D, c->rms_norm_eps);
    }
    if (cpu_matmul_in(pool, &w->eh_proj, cat, m, x, in))
        goto out;
    for (int t = 0; t < m; t++)
        cpu_rmsnorm(u + (size_t)t * D, x + (size_t)t * D, w->layer.input_norm, D, c->rms_norm_eps);
    if (cpu_dsa(pool, c, &w->layer.dsa, &s->mtp, &s->num, s->mtp_n, u, m, &sel, &sel, y, in))
        goto out;
    for (size_t i = 0; i < MD; i++)
        x[i] += y[i];
    for (int t = 0; t < m; t++)
        cpu_rmsnorm(u + (size_t)t * D, x + (size_t)t * D, w->layer.post_norm, D, c->rms_norm_eps);
    rc = c->n_routed_experts > 0
             ? cpu_moe(pool, c, &w->layer, u, m, y, in)
             : cpu_mlp(pool, c, &w->layer.mlp, c->intermediate_size, u, m, y, in);
    if (rc)
        goto out;
    for (size_t i = 0; i < MD; i++)
        x[i] += y[i];
    for (int t = 0; g && t < m; t++)
        cpu_rmsnorm(g + (size_t)t * D, x + (size_t)t * D, w->head_norm, D, c->rms_norm_eps);
    s->mtp_n += m;
out:
    free(cat);
    free(x);
    free(u);
    free(y);
    free(row);
    free(sel.count);
    free(sel.idx);
    return rc;
}

static int keep_rows(cpu_state *s, const float *hrows, int pos0, int T)
{
    int D = s->m->cfg.hidden_size;
    if (T > s->h_cap) {
        float *p = realloc(s->h, (size_t)T * D * sizeof *p);
        if (!p)
            return -1;
        s->h = p;
        s->h_cap = T;
    }
    memcpy(s->h, hrows, (size_t)T * D * sizeof *s->h);
    s->h_base = pos0;
    s->h_n = T;
    return 0;
}

/* The kept row of position p, or NULL. */
static const float *kept_row(const cpu_state *s, int p)
{
    if (p < s->h_base || p >= s->h_base + s->h_n)
        return NULL;
    return s->h + (size_t)(p - s->h_base) * s->m->cfg.hidden_size;
}

int cpu_mtp_catch_up(cpu_state *s, cpu_pool *pool, const int32_t *tokens, int pos0, int T,
                     const float *hrows)
{
    int D = s->m->cfg.hidden_size;
    const float *prev = pos0 > 0 ? kept_row(s, pos0 - 1) : NULL;
    int ok = s->mtp_n == (pos0 > 0 ? pos0 - 1 : 0) && (pos0 == 0 || prev);
    int rc = 0;
    if (ok) {
        /* rows: h_{pos0-1} with tokens[0], then h_{pos0+t} with tokens[t+1] */
        int m = pos0 > 0 ? T : T - 1;
        float *h = m > 0 ? malloc((size_t)m * D * sizeof *h) : NULL;
        if (m > 0 && !h)
            return -1;
        if (pos0 > 0) {
            memcpy(h, prev, (size_t)D * sizeof *h);
            if (T > 1)
                memcpy(h + D, hrows, (size_t)(T - 1) * D * sizeof *h);
        } else if (m > 0) {
            memcpy(h, hrows, (size_t)m * D * sizeof *h);
        }
        /* the one-part rows: the CUDA backend's catch-up after each of its chunks (never after
         * a verification window, which runs row by row) */
        cpu_inputs in = {0, 0};
        if (m > 0 && s->num.one_part && !s->verifying &&
            prefill_gemm_rows(pos0, T, s->num.chunk, 1, &in.r0, &in.r1))
            rc = -1; /* (forward refused such a call before its layers) */
        if (m > 0 && !rc)
            rc = mtp_block(s, pool, h, pos0 > 0 ? tokens : tokens + 1, m, NULL, &in);
        free(h);
    } else {
        s->mtp_n = -1;
    }
    if (rc == 0)
        rc = keep_rows(s, hrows, pos0, T);
    return rc;
}

glm_status cpu_mtp_draft(cpu_state *s, cpu_pool *pool, int32_t next, int32_t *out, int max,
                         int *n_out, glm_error *err)
{
    const glm_config *c = &s->m->cfg;
    int D = c->hidden_size, V = c->vocab_size;
    *n_out = 0;
    const float *last = s->n > 0 ? kept_row(s, s->n - 1) : NULL;
    if (!cpu_mtp_on(s) || !last || s->mtp_n != s->n - 1 || max <= 0)
        return GLM_OK;
    glm_status st = cpu_state_reserve(s, s->n + max + 1, err);
    if (st)
        return st;
    float *h = malloc((size_t)D * sizeof *h), *g = malloc((size_t)D * sizeof *g);
    float *logits = malloc((size_t)V * sizeof *logits);
    int start = s->mtp_n, rc = h && g && logits ? 0 : -1;
    if (!rc)
        memcpy(h, last, (size_t)D * sizeof *h);
    int32_t tok = next;
    for (int k = 0; rc == 0 && k < max; k++) {
        rc = mtp_block(s, pool, h, &tok, 1, g, NULL);
        if (rc == 0)
            rc = cpu_matmul(pool, &s->m->w.lm_head, g, 1, logits);
        if (rc)
            break;
        tok = glm_argmax(logits, V);
        out[(*n_out)++] = tok;
        memcpy(h, g, (size_t)D * sizeof *h); /* chained: the head-normed row is the next h */
    }
    /* the drafted rows are guesses: the verifying forward recomputes them */
    s->mtp_n = start;
    if (s->mtp.n_pools > start / c->index_kpool)
        s->mtp.n_pools = start / c->index_kpool;
    free(h);
    free(g);
    free(logits);
    if (rc)
        return glm_error_set(err, GLM_ERR_NOMEM, "out of memory drafting with the MTP layer");
    return GLM_OK;
}
