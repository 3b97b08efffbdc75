/* forward.c: the CUDA backend's forward over one chunk of tokens (architecture.md 2): embedding
 * into the streams, per layer HC collapse, norm, KDA or DSA, HC update, the same around the FFN
 * (dense or routed experts plus the shared one), stream mean, final norm, LM head; on one
 * stream (in decode the HC Sinkhorn mix and the shared expert forked onto a side stream and
 * joined before their results are read), positions from the device so a step can be a graph.
 * Each sublayer has a decode form (few rows, dense products: fused launches) and a general one
 * (prefill chunks, EXL3 products); choose_form picks them once per layer. Several ranks run a
 * long chunk as two interleaved halves, one half's exchange under the other's work. */
#ifdef HAVE_CUDA
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "glm_tokens.h"
#include "cuda/cuda_internal.h"
#include "model/numfmt.h"

glm_status cuda_fail(glm_error *err, const char *what, int code)
{
    return glm_error_set(err, GLM_ERR_BACKEND, "the GPU failed in %s: %s (code %d)", what,
                         code > 0 ? kern_error_string(code) : "arguments out of range", code);
}

static void prof_mark_on(cuda_backend *be, const char *what, int side)
{
    cu_prof *p = &be->prof;
    if (!p->on || p->n >= CUDA_PROF_MAX)
        return;
    if (!p->ev[p->n] && eng_event_new(&p->ev[p->n]))
        return;
    void *stream = side ? be->side : be->stream;
    int rc = p->in_graph ? eng_event_record_node(p->ev[p->n], stream)
                         : eng_event_record(p->ev[p->n], stream);
    if (rc)
        return;
    p->what[p->n] = what;
    p->side[p->n++] = (unsigned char)side;
}

void cuda_prof_mark(cuda_backend *be, const char *what)
{
    prof_mark_on(be, what, 0);
}

void cuda_prof_mark_side(cuda_backend *be, const char *what)
{
    prof_mark_on(be, what, 1);
}

/* Runs one op; on failure sets err and returns -1 from the caller, else runs `then` (the op
 * profile's mark, or nothing). `be` must be in scope for the marks. */
#define CK_THEN(expr, what, then)                                                                  \
    do {                                                                                           \
        int rc_ = (expr);                                                                          \
        if (rc_) {                                                                                 \
            cuda_fail(err, what, rc_);                                                             \
            return -1;                                                                             \
        }                                                                                          \
        then;                                                                                      \
    } while (0)

/* An op on the main stream, marked there for the op profile. */
#define CK(expr, what) CK_THEN(expr, what, cuda_prof_mark(be, what))

/* CK for an op queued on the side stream: its mark goes there too, so that it ends the op's own
 * time on that stream rather than a slice of the main stream's. */
#define CK_SIDE(expr, what) CK_THEN(expr, what, cuda_prof_mark_side(be, what))

/* CK without the profile's mark: for ordering between streams, which takes no time of its own. */
#define CK_QUIET(expr, what) CK_THEN(expr, what, (void)0)

static int lin(cuda_backend *be, const cu_lin *l, const float *x, int T, float *y)
{
    if (l->exl3)
        return kern_exl3_matmul(&l->x, x, y, T, be->w.exl3_work, be->stream);
    if (be->rowwise) /* a verification window: each row as a one-token step computes it */
        return eng_matmul_rowwise(&l->m, x, T, y, be->stream);
    return eng_matmul(&l->m, x, T, y, be->stream);
}

/* 1 when the decode path may put these products in one launch: few rows, all dense. */
static int small_dense(int T, const cu_lin *const *l, int n)
{
    if (T > CUDA_DECODE_T)
        return 0;
    for (int i = 0; i < n; i++)
        if (l[i]->exl3)
            return 0;
    return 1;
}

static eng_gemv_job job(const cu_lin *l, const float *x, float *y)
{
    eng_gemv_job j = {&l->m, NULL, x, y, 0.0f, 0};
    return j;
}

/* 1 when the decode path's HC step takes fn (eng_hc_fn_partial, eng_hc_collapse_norm,
 * eng_hc_sinkhorn). */
static int hc_fast(const cuda_backend *be, int T, const cu_lin *fn)
{
    const glm_config *c = &be->m->cfg;
    int S = c->hc_mult, D = c->hidden_size;
    return T <= CUDA_DECODE_T && !fn->exl3 && fn->m.rows == (2 + S) * S && fn->m.cols == S * D &&
           eng_hc_splits(S, D) > 0 && D <= CUDA_HC_MAX_HIDDEN;
}

/* 1 when the prefill path's HC input norm and mixing product run as one pass over the streams
 * (eng_hc_norm_mix); else eng_rmsnorm then the product. A verification window (rowwise) keeps
 * the two launches, whose product gives each row the bits of a one-row product. */
static int hc_fused(const cuda_backend *be, const cu_lin *fn)
{
    const glm_config *c = &be->m->cfg;
    return !be->rowwise && !fn->exl3 && eng_hc_norm_mix_takes(&fn->m, c->hc_mult, c->hidden_size);
}

/* Work after this point of the main stream may go on the side stream (until side_join). */
static int side_fork(cuda_backend *be)
{
    int rc = eng_event_record(be->fork, be->stream);
    if (!rc)
        rc = eng_stream_wait(be->side, be->fork);
    if (!rc) /* (a failed fork leaves a join owed from before still owed) */
        be->side_pending = 1;
    if (!rc) /* where the side stream's ops may start: their own times count from here */
        cuda_prof_mark_side(be, NULL);
    return rc;
}

/* Waits on the main stream for the side stream's work since the last fork (none owed: nothing). */
static int side_join(cuda_backend *be)
{
    if (!be->side_pending)
        return 0;
    be->side_pending = 0;
    return eng_stream_wait(be->stream, be->join);
}

/* One HC site: the mixing product fn, its base and scale, and the norm of the sublayer it feeds. */
typedef struct hc_site {
    const cu_lin *fn;
    const float *base, *scale, *norm;
} hc_site;

static hc_site attn_site(const cu_layer *L)
{
    hc_site h = {&L->hc_attn_lin, L->hc_attn_base, L->hc_attn_scale, L->input_norm};
    return h;
}

static hc_site ffn_site(const cu_layer *L)
{
    hc_site h = {&L->hc_ffn_lin, L->hc_ffn_base, L->hc_ffn_scale, L->post_norm};
    return h;
}

/* Decode: site h's HC step: with update, first the previous sublayer's update of the streams
 * (y, plus y2 where not NULL, post, comb), with the fn product's parts; then the collapse and
 * norm into pre and u on the main stream, and the Sinkhorn mix forked on the side stream beside
 * it (only the HC update after the sublayer reads post and comb, and it joins the side stream
 * first). Keep this order:
 * with the fork after the collapse, or the mix launched before it, the side stream's work lands
 * in front of the sublayer's first product and delays it (measured: bench/BENCHMARKS.md's
 * history). One launch whose last block collapses gives the same bits but serialises the
 * update and the collapse, which cost more than the two launches. */
static int hc_step(cuda_backend *be, int T, const hc_site *h, int update, const float *y2,
                   const char *what, glm_error *err)
{
    const glm_config *c = &be->m->cfg;
    cu_scratch *b = &be->s;
    int S = c->hc_mult, D = c->hidden_size;
    CK(eng_hc_fn_partial(&h->fn->m, b->X, T, S, D, update ? b->y : NULL, update ? y2 : NULL,
                         b->post, b->comb, b->part, be->stream), what);
    CK_QUIET(side_join(be), "joining the side stream");
    CK_QUIET(side_fork(be), "forking the side stream");
    CK(eng_hc_collapse_norm(b->part, h->fn->m.rows, b->X, h->base, h->scale, h->norm, T, S, D,
                            c->hc_eps, c->rms_norm_eps, b->pre, b->u, be->stream),
       "the HC collapse and norm");
    CK_SIDE(eng_hc_sinkhorn(b->part, h->fn->m.rows, h->base, h->scale, T, S, D,
                            c->hc_sinkhorn_iters, c->hc_eps, c->rms_norm_eps, b->post, b->comb,
                            be->side),
            "the HC Sinkhorn mix (on the side stream)");
    CK_QUIET(eng_event_record(be->join, be->side), "joining the side stream");
    return 0;
}

/* HC collapse of the streams into s.c, then RMSNorm with the site's norm into s.u. Decode: the
 * HC step (hc_step), unless the previous HC update already ran it (step_ready). */
static int hc_pre(cuda_backend *be, int T, const hc_site *h, int step_ready, glm_error *err)
{
    const glm_config *c = &be->m->cfg;
    cu_scratch *b = &be->s;
    int S = c->hc_mult, D = c->hidden_size;
    void *st = be->stream;
    if (hc_fast(be, T, h->fn))
        return step_ready ? 0 : hc_step(be, T, h, 0, NULL, "the HC mixing product (split)", err);
    if (hc_fused(be, h->fn)) {
        /* its column parts' sums go in flat (T * S * D floats; they need at most 200 a row,
         * never more than S * D since each part spans 256 columns or more) */
        CK(eng_hc_norm_mix(&h->fn->m, b->X, T, S, D, c->rms_norm_eps, b->flat, b->mu, st),
           "the HC input norm and mixing product");
    } else {
        CK(eng_rmsnorm(b->flat, b->X, NULL, T, S * D, c->rms_norm_eps, st), "the HC input norm");
        CK(lin(be, h->fn, b->flat, T, b->mu), "the HC mixing product");
    }
    CK(eng_hc_mix(b->mu, h->base, h->scale, T, S, c->hc_sinkhorn_iters, c->hc_eps, b->pre,
                  b->post, b->comb, st), "the HC Sinkhorn mix");
    if (!be->rowwise && eng_hc_collapse_rmsnorm_takes(D)) {
        CK(eng_hc_collapse_rmsnorm(b->X, b->pre, h->norm, T, S, D, c->rms_norm_eps, b->u, st),
           "the HC collapse and layer norm");
        return 0;
    }
    CK(eng_hc_collapse(b->X, b->pre, T, S, D, b->c, st), "the HC collapse");
    CK(eng_rmsnorm(b->u, b->c, h->norm, T, D, c->rms_norm_eps, st), "a layer norm");
    return 0;
}

/* Verification windows: the KDA conv's window rows after each position (cuda/spec.c), and where
 * the layer's state after each position goes (NULL when not verifying). */
static int kda_trail(cuda_state *s, int rank, int T, float **trail, glm_error *err)
{
    cuda_backend *be = s->be;
    const glm_config *c = &be->m->cfg;
    cu_scratch *b = &be->s;
    int H = c->kda_heads, dk = c->kda_head_dim, C = H * dk;
    void *st = be->stream;
    if (s->verifying) /* the windows a verification may go back to (cuda/spec.c) */
        CK(eng_kda_conv_trail(b->q, b->k, b->v, s->kda_conv[rank], T, C, c->kda_conv_kernel,
                              s->trail_conv[rank] + (size_t)s->trail_at * 3 * C, st),
           "the KDA conv trail");
    *trail = s->verifying ? s->trail_S[rank] + (size_t)s->trail_at * H * dk * dk : NULL;
    return 0;
}

/* The KDA conv over q, k, v into qc, kc, vc with the q/k norms, one pass. */
static int kda_conv_norm(cuda_state *s, const cu_layer *L, int rank, int T, glm_error *err)
{
    cuda_backend *be = s->be;
    const glm_config *c = &be->m->cfg;
    cu_scratch *b = &be->s;
    int H = c->kda_heads, dk = c->kda_head_dim;
    void *st = be->stream;
    CK(eng_kda_conv_norm(b->q, b->k, b->v, s->kda_conv[rank], L->q_conv, L->k_conv, L->v_conv,
                         T, H, dk, c->kda_conv_kernel, 1.0f / sqrtf((float)dk), b->qc, b->kc,
                         b->vc, st), "the KDA conv and q/k norms");
    return 0;
}

/* KDA, the decode form (few rows, every product dense): the products of u in one launch, then
 * the low-rank second halves, the conv, norms, gates, delta rule and gated norm in one launch
 * (the second halves in a launch of their own where the step cannot fold them: eng_kda_lowrank;
 * past the step's bounds, the gated norm joined to the delta rule). */
static int kda_decode(cuda_state *s, const cu_layer *L, int rank, int T, glm_error *err)
{
    cuda_backend *be = s->be;
    const glm_config *c = &be->m->cfg;
    cu_scratch *b = &be->s;
    int H = c->kda_heads, dk = c->kda_head_dim;
    void *st = be->stream;
    float *lo2 = b->lo + (size_t)T * dk; /* the output gate's low-rank half */
    eng_gemv_job in[6] = {job(&L->q_proj, b->u, b->q),  job(&L->k_proj, b->u, b->k),
                          job(&L->v_proj, b->u, b->v),  job(&L->f_a, b->u, b->lo),
                          job(&L->g_a, b->u, lo2),      job(&L->b_proj, b->u, b->beta)};
    CK(eng_matmul_jobs(in, 6, T, st), "the KDA products of the input");
    int step = c->kda_conv_kernel <= 8 && dk <= 128;
    eng_kda_lowrank low = {&L->f_b.m, &L->g_b.m, b->lo, lo2};
    int fold = step && eng_kda_lowrank_takes(&low, T, H, dk);
    if (!fold) {
        eng_gemv_job lr[2] = {job(&L->f_b, b->lo, b->g), job(&L->g_b, lo2, b->gate)};
        CK(eng_matmul_jobs(lr, 2, T, st), "the KDA gates' second products");
    }
    float *trail;
    if (kda_trail(s, rank, T, &trail, err))
        return -1;
    if (step) {
        CK(eng_kda_step_decode(b->q, b->k, b->v, s->kda_conv[rank], L->q_conv, L->k_conv,
                               L->v_conv, T, H, dk, c->kda_conv_kernel, 1.0f / sqrtf((float)dk),
                               b->g, b->beta, L->A_log, L->dt_bias, c->kda_has_lower_bound,
                               c->kda_lower_bound, s->kda_S[rank], b->o, trail, b->gate,
                               L->o_norm, c->rms_norm_eps, fold ? &low : NULL, st),
           fold ? "the KDA gates' second products, conv, norms, gates, delta rule and gated norm"
                : "the KDA conv, norms, gates, delta rule and gated norm");
    } else {
        if (kda_conv_norm(s, L, rank, T, err))
            return -1;
        CK(eng_kda_gate(b->g, b->beta, L->A_log, L->dt_bias, T, H, dk, c->kda_has_lower_bound,
                        c->kda_lower_bound, st), "the KDA gates");
        /* the output gate is ready, so the gated norm joins the delta rule */
        CK(eng_kda_scan_norm(s->kda_S[rank], b->qc, b->kc, b->vc, b->g, b->beta, T, H, dk,
                             b->o, trail, b->gate, L->o_norm, c->rms_norm_eps, st),
           "the KDA delta rule and gated norm");
    }
    CK(lin(be, &L->kda_o, b->o, T, b->y), "the KDA output projection");
    return 0;
}

/* KDA, the general form (prefill chunks, EXL3 products): each product on its own, the delta
 * rule, then the output gate and the gated norm. */
static int kda_general(cuda_state *s, const cu_layer *L, int rank, int T, glm_error *err)
{
    cuda_backend *be = s->be;
    const glm_config *c = &be->m->cfg;
    cu_scratch *b = &be->s;
    int H = c->kda_heads, dk = c->kda_head_dim;
    void *st = be->stream;
    CK(lin(be, &L->q_proj, b->u, T, b->q), "the KDA q projection");
    CK(lin(be, &L->k_proj, b->u, T, b->k), "the KDA k projection");
    CK(lin(be, &L->v_proj, b->u, T, b->v), "the KDA v projection");
    float *trail;
    if (kda_trail(s, rank, T, &trail, err) || kda_conv_norm(s, L, rank, T, err))
        return -1;
    CK(lin(be, &L->f_a, b->u, T, b->lo), "the KDA forget gate (a)");
    CK(lin(be, &L->f_b, b->lo, T, b->g), "the KDA forget gate (b)");
    CK(lin(be, &L->b_proj, b->u, T, b->beta), "the KDA beta projection");
    CK(eng_kda_gate(b->g, b->beta, L->A_log, L->dt_bias, T, H, dk, c->kda_has_lower_bound,
                    c->kda_lower_bound, st), "the KDA gates");
    CK(eng_kda_scan_trail(s->kda_S[rank], b->qc, b->kc, b->vc, b->g, b->beta, T, H, dk, b->o,
                          trail, st), "the KDA delta rule");
    CK(lin(be, &L->g_a, b->u, T, b->lo), "the KDA output gate (a)");
    CK(lin(be, &L->g_b, b->lo, T, b->gate), "the KDA output gate (b)");
    CK(eng_kda_out_norm(b->o, b->gate, L->o_norm, T, H, dk, c->rms_norm_eps, st),
       "the KDA gated norm");
    CK(lin(be, &L->kda_o, b->o, T, b->y), "the KDA output projection");
    return 0;
}

/* DSA: the kv_a norm and the latent cache's rows (one launch where the cache's rows are the
 * normed rows' width, as they are). */
static int dsa_latent(cuda_state *s, const cu_layer *L, int rank, int T, glm_error *err)
{
    cuda_backend *be = s->be;
    const glm_config *c = &be->m->cfg;
    cu_scratch *b = &be->s;
    cu_dsa_cache *dc = &s->dsa[rank];
    int R = c->kv_lora_rank;
    void *st = be->stream;
    if (dc->latent.width == R) {
        CK(eng_rmsnorm_cache_write(b->kvl, L->kv_a_norm, T, c->rms_norm_eps, &dc->latent,
                                   s->d_pos, st), "the kv_a norm and the latent cache write");
        return 0;
    }
    CK(eng_rmsnorm(b->kvl, b->kvl, L->kv_a_norm, T, R, c->rms_norm_eps, st), "the kv_a norm");
    CK(eng_cache_write(&dc->latent, s->d_pos, b->kvl, T, st), "the latent cache write");
    return 0;
}

/* The pool keys that rows [s->n, s->n + T) complete, from the key and gate caches. */
static int dsa_pool_keys(cuda_state *s, const cu_layer *L, int rank, int T, glm_error *err)
{
    cuda_backend *be = s->be;
    cu_dsa_cache *dc = &s->dsa[rank];
    CK(eng_pool_keys(&dc->idx_key, &dc->idx_gate, &dc->pool_key, L->idx_ape, s->d_pos, T,
                     be->m->cfg.index_kpool, be->stream), "the pool keys");
    return 0;
}

/* The indexer's keys: their norm, the key and gate cache rows (one launch where the caches' rows
 * are the keys' width), the pool keys they complete. */
static int dsa_index_keys(cuda_state *s, const cu_layer *L, int rank, int T, glm_error *err)
{
    cuda_backend *be = s->be;
    const glm_config *c = &be->m->cfg;
    cu_scratch *b = &be->s;
    cu_dsa_cache *dc = &s->dsa[rank];
    int ID = c->index_head_dim;
    void *st = be->stream;
    if (dc->idx_key.width == ID && dc->idx_gate.width == ID) {
        CK(eng_index_keys_write(b->wk, L->idx_k_norm_w, L->idx_k_norm_b, 1e-6f, &dc->idx_key,
                                b->ig, &dc->idx_gate, s->d_pos, T, st),
           "the indexer key norm and the key and gate caches");
    } else {
        CK(eng_layernorm(b->wk, b->wk, L->idx_k_norm_w, L->idx_k_norm_b, T, ID, 1e-6f, st),
           "the indexer key norm");
        CK(eng_cache_write(&dc->idx_key, s->d_pos, b->wk, T, st), "the indexer key cache");
        CK(eng_cache_write(&dc->idx_gate, s->d_pos, b->ig, T, st), "the indexer gate cache");
    }
    return dsa_pool_keys(s, L, rank, T, err);
}

/* The tap's pool scores (backend.h) of rows [t0, t0 + nt) of a main layer's forward, from
 * eng_dsa_select's scores (rows of max_pools); NaN where a row scores no pool. */
static int tap_scores(cuda_state *s, const cu_layer *L, int t0, int nt, int max_pools,
                      glm_error *err)
{
    cuda_backend *be = s->be;
    const glm_config *c = &be->m->cfg;
    long li = L - be->w.layers;
    if (!be->tap.fn || s->coll.all_reduce || li < 0 || li >= c->num_layers)
        return 0; /* no tap, two ranks, or the MTP layer */
    int kp = c->index_kpool, budget = c->index_topk / kp;
    size_t n = (size_t)nt * (size_t)max_pools;
    float *h = malloc(n * sizeof *h);
    if (!h) {
        glm_error_set(err, GLM_ERR_NOMEM, "out of memory copying the indexer's scores");
        return -1;
    }
    int rc = eng_copy_async(h, s->scores, n * sizeof *h, be->stream);
    if (!rc)
        rc = eng_stream_sync(be->stream);
    if (rc) {
        free(h);
        return cuda_fail(err, "copying the indexer's scores", rc), -1;
    }
    for (int t = 0; t < nt; t++) {
        int P = (s->n + t0 + t + 1) / kp;
        for (int p = 0; p < max_pools; p++)
            if (P <= budget || p >= P)
                h[(size_t)t * max_pools + p] = NAN;
    }
    be->tap.fn(be->tap.user, (int)li, BACKEND_TAP_SCORES, s->n + t0, nt, h, max_pools);
    free(h);
    return 0;
}

/* Whether the indexer's query takes one fp16 part a head: under the one-part products, where
 * its own product's input does (a BF16 weight the fp16 forms take, in a chunk of more than
 * ENG_GEMM_MIN_ROWS rows, not a verification window), as the CPU backend's emulation asks
 * (cpu/inputs.c). Its e4m3 keys' scores then take one fp16 product a tile where the exact form
 * takes three bf16 ones; an F32 model stays exact. */
static int index_one_part(const cuda_backend *be, const cu_lin *wq, int T)
{
    return be->one_part && T > ENG_GEMM_MIN_ROWS && !be->rowwise && !wq->exl3 &&
           wq->m.dtype == ENG_BF16 && eng_gemm_half_takes(wq->m.rows, wq->m.cols);
}

/* The indexer's top-k of each row (in launches of CUDA_SCORE_ROWS rows), each launch's scores
 * to the tap; the query first in one part where index_one_part says. */
static int dsa_select(cuda_state *s, const cu_layer *L, int rank, int T, glm_error *err)
{
    cuda_backend *be = s->be;
    const glm_config *c = &be->m->cfg;
    cu_scratch *b = &be->s;
    cu_dsa_cache *dc = &s->dsa[rank];
    int IH = c->index_n_heads, ID = c->index_head_dim, kp = c->index_kpool;
    int width = c->index_topk + kp - 1;
    void *st = be->stream;
    int max_pools = s->cap / kp + 1;
    int one = index_one_part(be, &L->idx_wq_b, T);
    if (one)
        CK(eng_one_part_rows(b->iq, T * IH, ID, b->iq_shift, st),
           "the indexer query's one fp16 part");
    for (int t0 = 0; t0 < T; t0 += CUDA_SCORE_ROWS) {
        int nt = T - t0 < CUDA_SCORE_ROWS ? T - t0 : CUDA_SCORE_ROWS;
        CK(eng_dsa_select(&dc->pool_key, b->iq + (size_t)t0 * IH * ID,
                          one ? b->iq_shift + (size_t)t0 * IH : NULL, b->hw + (size_t)t0 * IH,
                          s->d_pos, t0, nt, IH, ID, kp, c->index_topk / kp, max_pools,
                          s->scores, width, b->sel_idx + (size_t)t0 * width, b->sel_count + t0,
                          st), "the indexer's top-k");
        if (tap_scores(s, L, t0, nt, max_pools, err))
            return -1;
    }
    return 0;
}

/* The latent attention over the selection and the MLA output projection: the decode forms up to
 * CUDA_DECODE_T rows (the selection split over blocks when there are few heads), else the
 * tensor-core prefill forms (row results independent of the chunk). */
static int dsa_attend(cuda_state *s, const cu_layer *L, int rank, int T, glm_error *err)
{
    cuda_backend *be = s->be;
    const glm_config *c = &be->m->cfg;
    cu_scratch *b = &be->s;
    cu_dsa_cache *dc = &s->dsa[rank];
    int NH = c->num_heads, dn = c->qk_nope_head_dim, dv = c->v_head_dim, R = c->kv_lora_rank;
    int width = c->index_topk + c->index_kpool - 1;
    void *st = be->stream;
    if (T <= CUDA_DECODE_T) { /* the selection split over blocks when there are few heads */
        CK(eng_mla_absorb(&L->kv_b, b->qd, T, NH, dn, dv, R, b->qt, st), "the absorbed query");
        CK(eng_mla_attend_decode(&dc->latent, b->qt, b->sel_idx, b->sel_count, width, T, NH, R,
                                 1.0f / sqrtf((float)dn), b->ot, b->apart, st),
           "the latent attention");
        CK(eng_mla_expand(&L->kv_b, b->ot, T, NH, dn, dv, R, b->od, st), "the value expansion");
    } else { /* prefill: the tensor-core forms (row results independent of the chunk) */
        CK(eng_mla_absorb_prefill(&L->kv_b, b->qd, T, NH, dn, dv, R, b->qt, st),
           "the absorbed query");
        CK(eng_mla_attend_prefill(&dc->latent, b->qt, b->sel_idx, b->sel_count, width, T, NH, R,
                                  1.0f / sqrtf((float)dn), b->ot, st), "the latent attention");
        CK(eng_mla_expand_prefill(&L->kv_b, b->ot, T, NH, dn, dv, R, b->od, st),
           "the value expansion");
    }
    CK(lin(be, &L->dsa_o, b->od, T, b->y), "the MLA output projection");
    return 0;
}

/* The DSA decode's row steps in one launch (eng_dsa_rows_write) where the caches' rows are the
 * normed rows' widths (as they are): the q_a norm, the kv_a norm and the latent rows, the
 * indexer's key norm and its key and gate rows. Returns 1 when done, 0 when the caches do not
 * take it (the caller runs the steps one by one), -1 on failure. */
static int dsa_rows(cuda_state *s, const cu_layer *L, int rank, int T, glm_error *err)
{
    cuda_backend *be = s->be;
    const glm_config *c = &be->m->cfg;
    cu_scratch *b = &be->s;
    cu_dsa_cache *dc = &s->dsa[rank];
    int ID = c->index_head_dim;
    if (dc->latent.width != c->kv_lora_rank ||
        (L->has_indexer && (dc->idx_key.width != ID || dc->idx_gate.width != ID)))
        return 0;
    eng_dsa_rows r = {b->qa, L->q_a_norm, c->q_lora_rank, b->kvl, L->kv_a_norm, dc->latent,
                      L->has_indexer ? b->wk : NULL, L->idx_k_norm_w, L->idx_k_norm_b,
                      dc->idx_key, b->ig, dc->idx_gate, c->rms_norm_eps, 1e-6f};
    CK(eng_dsa_rows_write(&r, s->d_pos, T, be->stream),
       "the q_a and kv_a norms and the new cache rows");
    return 1;
}

/* DSA, the decode form (few rows, every product dense): the products of u in one launch, the
 * row steps (dsa_rows), those of the normed q_a in one; then the indexer's pool keys and
 * selection and the attention. */
static int dsa_decode(cuda_state *s, const cu_layer *L, int rank, int T, glm_error *err)
{
    cuda_backend *be = s->be;
    const glm_config *c = &be->m->cfg;
    cu_scratch *b = &be->s;
    int qr = c->q_lora_rank;
    void *st = be->stream;
    eng_gemv_job in[5] = {job(&L->q_a, b->u, b->qa), job(&L->kv_a, b->u, b->kvl)};
    if (L->has_indexer) {
        in[2] = job(&L->idx_wk, b->u, b->wk);
        in[3] = job(&L->idx_gate, b->u, b->ig);
        in[4] = job(&L->idx_weights, b->u, b->hw);
    }
    CK(eng_matmul_jobs(in, L->has_indexer ? 5 : 2, T, st), "the MLA products of the input");
    int rows = dsa_rows(s, L, rank, T, err);
    if (rows < 0)
        return -1;
    if (!rows)
        CK(eng_rmsnorm(b->qa, b->qa, L->q_a_norm, T, qr, c->rms_norm_eps, st), "the q_a norm");
    eng_gemv_job qb[2] = {job(&L->q_b, b->qa, b->qd)};
    if (L->has_indexer)
        qb[1] = job(&L->idx_wq_b, b->qa, b->iq);
    CK(eng_matmul_jobs(qb, L->has_indexer ? 2 : 1, T, st), "the MLA products of q_a");
    if (!rows && dsa_latent(s, L, rank, T, err))
        return -1;
    if (L->has_indexer &&
        ((rows ? dsa_pool_keys(s, L, rank, T, err) : dsa_index_keys(s, L, rank, T, err)) ||
         dsa_select(s, L, rank, T, err)))
        return -1;
    return dsa_attend(s, L, rank, T, err);
}

/* DSA, the general form (prefill chunks, EXL3 products): each product on its own, the indexer's
 * next to the steps that read them. */
static int dsa_general(cuda_state *s, const cu_layer *L, int rank, int T, glm_error *err)
{
    cuda_backend *be = s->be;
    const glm_config *c = &be->m->cfg;
    cu_scratch *b = &be->s;
    int qr = c->q_lora_rank;
    void *st = be->stream;
    CK(lin(be, &L->q_a, b->u, T, b->qa), "the MLA q_a projection");
    CK(eng_rmsnorm(b->qa, b->qa, L->q_a_norm, T, qr, c->rms_norm_eps, st), "the q_a norm");
    CK(lin(be, &L->q_b, b->qa, T, b->qd), "the MLA q_b projection");
    CK(lin(be, &L->kv_a, b->u, T, b->kvl), "the MLA kv_a projection");
    if (dsa_latent(s, L, rank, T, err))
        return -1;
    if (L->has_indexer) {
        CK(lin(be, &L->idx_wk, b->u, T, b->wk), "the indexer key projection");
        CK(lin(be, &L->idx_gate, b->u, T, b->ig), "the indexer gate projection");
        if (dsa_index_keys(s, L, rank, T, err))
            return -1;
        CK(lin(be, &L->idx_wq_b, b->qa, T, b->iq), "the indexer query projection");
        CK(lin(be, &L->idx_weights, b->u, T, b->hw), "the indexer head weights");
        if (dsa_select(s, L, rank, T, err))
            return -1;
    }
    return dsa_attend(s, L, rank, T, err);
}

/* A dense MLP (or the shared expert), the decode form: gate and up with SwiGLU in one launch,
 * then down. */
static int mlp_decode(cuda_backend *be, const cu_mlp *w, int inter, const float *x, int T,
                      float *out, glm_error *err)
{
    cu_scratch *b = &be->s;
    (void)inter;
    eng_gemv_job gu = {&w->gate.m, &w->up.m, x, b->fg, be->m->cfg.swiglu_limit, 0};
    CK(eng_matmul_jobs(&gu, 1, T, be->stream), "an MLP gate/up product with SwiGLU");
    eng_gemv_job dn = job(&w->down, b->fg, out);
    CK(eng_matmul_jobs(&dn, 1, T, be->stream), "an MLP down projection");
    return 0;
}

/* A dense MLP (or the shared expert), the general form. */
static int mlp_general(cuda_backend *be, const cu_mlp *w, int inter, const float *x, int T,
                       float *out, glm_error *err)
{
    cu_scratch *b = &be->s;
    CK(lin(be, &w->gate, x, T, b->fg), "an MLP gate projection");
    CK(lin(be, &w->up, x, T, b->fu), "an MLP up projection");
    CK(eng_swiglu(b->fg, b->fu, (size_t)T * inter, be->m->cfg.swiglu_limit, be->stream), "SwiGLU");
    CK(lin(be, &w->down, b->fg, T, out), "an MLP down projection");
    return 0;
}

/* The routing of the router's logits (unless route is 0: the router already routed) and the
 * routed experts into y. */
static int routed(cuda_backend *be, const cu_layer *L, int T, int route, glm_error *err)
{
    const glm_config *c = &be->m->cfg;
    cu_scratch *b = &be->s;
    int E = c->n_routed_experts, K = c->num_experts_per_tok, D = c->hidden_size;
    int I = c->moe_intermediate_size;
    void *st = be->stream;
    if (route)
        CK(eng_route(b->rlog, L->router_bias, T, E, c->n_group, c->topk_group, K,
                     c->norm_topk_prob, c->routed_scaling_factor, b->rscratch, b->rids, b->rw, st),
           "the routing");
    const cu_experts *x = &L->experts;
    if (x->fused && T > CUDA_MOE_GROUPED_ROWS) {
        CK(kern_exl3_moe_prefill(&x->ex, b->u, b->rids, b->rw, b->y, T, K, x->prefill_work, st),
           "the EXL3 experts (grouped by expert)");
    } else if (x->fused) {
        int per = KERN_EXL3_MOE_MAX_PAIRS / K;
        for (int r0 = 0; r0 < T; r0 += per) {
            int nr = T - r0 < per ? T - r0 : per;
            CK(kern_exl3_moe(&x->ex, b->u + (size_t)r0 * D, b->rids + (size_t)r0 * K,
                             b->rw + (size_t)r0 * K, b->y + (size_t)r0 * D, nr, K, x->moe_work, st),
               "the EXL3 experts");
        }
    } else {
        if (!be->dense_experts) /* the scratch left out eng_moe_dense's buffers */
            return glm_error_set(err, GLM_ERR_BACKEND, "a MoE layer's experts run the dense path, "
                                 "which the plan said none would (cu_weights_dense_experts)"), -1;
        CK(eng_moe_dense(x->gate, x->up, x->down, E, b->u, T, K, D, I, b->rids, b->rw,
                         c->swiglu_limit, b->mh, b->mye, b->y, st), "the routed experts");
    }
    return 0;
}

/* The forms a layer's sublayers run in, chosen once per layer (choose_form): each sublayer's
 * decode form where the rows are few (CUDA_DECODE_T) and its products all dense, else its
 * general form. mlp: the dense MLP's, or the shared expert's in moe_general. */
typedef struct layer_form {
    int (*attn)(cuda_state *s, const cu_layer *L, int rank, int T, glm_error *err);
    int (*moe)(cuda_backend *be, const cu_layer *L, const struct layer_form *f, int T,
               const float **y2, glm_error *err);
    int (*mlp)(cuda_backend *be, const cu_mlp *w, int inter, const float *x, int T, float *out,
               glm_error *err);
} layer_form;

/* The decode router: with the routing in its launch (eng_router_route) where that takes the
 * shape, else the product and then the routing; returns 1 when the routing is done. */
static int router_decode(cuda_backend *be, const cu_layer *L, int T, glm_error *err)
{
    const glm_config *c = &be->m->cfg;
    cu_scratch *b = &be->s;
    int K = c->num_experts_per_tok;
    void *st = be->stream;
    if (c->topk_group == 1 && eng_router_route_takes(&L->router.m, b->u, T, c->n_group, K)) {
        CK(eng_router_route(&L->router.m, b->u, T, b->rlog, L->router_bias, K, c->norm_topk_prob,
                            c->routed_scaling_factor, b->rids, b->rw, be->route_done, st),
           "the router and the routing");
        return 1;
    }
    eng_gemv_job r = job(&L->router, b->u, b->rlog);
    CK(eng_matmul_jobs(&r, 1, T, st), "the router");
    return 0;
}

/* MoE, the decode form (few rows, router and shared expert dense): the shared expert (gate/up
 * with SwiGLU, down into ffn_y) on the side stream beside the router, the routing and the routed
 * experts, then y_routed + y_shared (the same sum the fused accumulate made); with y2 (else
 * NULL) that sum is left to the HC update after the sublayer: *y2 = ffn_y, on the side stream
 * until it is joined (NULL when nothing is left). */
static int moe_decode(cuda_backend *be, const cu_layer *L, const struct layer_form *f, int T,
                      const float **y2, glm_error *err)
{
    const glm_config *c = &be->m->cfg;
    cu_scratch *b = &be->s;
    void *st = be->stream;
    (void)f;
    if (y2)
        *y2 = NULL;
    if (L->has_shared) {
        CK_QUIET(side_fork(be), "forking the side stream");
        eng_gemv_job gu = {&L->mlp.gate.m, &L->mlp.up.m, b->u, b->fg, c->swiglu_limit, 0};
        eng_gemv_job dn = {&L->mlp.down.m, NULL, b->fg, b->ffn_y, 0.0f, 0};
        CK_SIDE(eng_matmul_jobs(&gu, 1, T, be->side), "the shared gate/up (on the side stream)");
        CK_SIDE(eng_matmul_jobs(&dn, 1, T, be->side),
                "the shared down product (on the side stream)");
        CK_QUIET(eng_event_record(be->join, be->side), "joining the side stream");
    }
    int rc = router_decode(be, L, T, err);
    if (rc < 0 || routed(be, L, T, !rc, err))
        return -1;
    if (L->has_shared && y2) {
        *y2 = b->ffn_y;
    } else if (L->has_shared) {
        CK_QUIET(side_join(be), "joining the side stream");
        CK(eng_add(b->y, b->ffn_y, (size_t)T * c->hidden_size, st), "the shared expert's sum");
    }
    return 0;
}

/* MoE, the general form: the router on its own, the routing and the routed experts, then the
 * shared expert in its form (f->mlp) on the main stream and its sum (y2: set to NULL). */
static int moe_general(cuda_backend *be, const cu_layer *L, const layer_form *f, int T,
                       const float **y2, glm_error *err)
{
    const glm_config *c = &be->m->cfg;
    cu_scratch *b = &be->s;
    int I = c->moe_intermediate_size;
    if (y2)
        *y2 = NULL;
    CK(lin(be, &L->router, b->u, T, b->rlog), "the router");
    if (routed(be, L, T, 1, err))
        return -1;
    if (L->has_shared) {
        if (f->mlp(be, &L->mlp, I * c->n_shared_experts, b->u, T, b->ffn_y, err))
            return -1;
        CK(eng_add(b->y, b->ffn_y, (size_t)T * c->hidden_size, be->stream),
           "the shared expert's sum");
    }
    return 0;
}

/* Layer L's forms for T rows (attn: its attention's kind). */
static layer_form choose_form(const cu_layer *L, glm_attn_kind attn, int T)
{
    const cu_lin *kda_lins[] = {&L->q_proj, &L->k_proj, &L->v_proj, &L->f_a, &L->f_b,
                                &L->b_proj, &L->g_a, &L->g_b};
    const cu_lin *dsa_lins[] = {&L->q_a,    &L->q_b,      &L->kv_a,       &L->idx_wk,
                                &L->idx_gate, &L->idx_wq_b, &L->idx_weights};
    const cu_lin *moe_lins[] = {&L->router, &L->mlp.gate, &L->mlp.up, &L->mlp.down};
    const cu_lin *mlp_lins[] = {&L->mlp.gate, &L->mlp.up, &L->mlp.down};
    layer_form f;
    if (attn == GLM_ATTN_KDA)
        f.attn = small_dense(T, kda_lins, 8) ? kda_decode : kda_general;
    else
        f.attn = small_dense(T, dsa_lins, L->has_indexer ? 7 : 3) ? dsa_decode : dsa_general;
    f.moe = small_dense(T, moe_lins, L->has_shared ? 4 : 1) ? moe_decode : moe_general;
    f.mlp = small_dense(T, mlp_lins, 3) ? mlp_decode : mlp_general;
    return f;
}

int cuda_coll_on_device(const cuda_state *s, int rows)
{
    return s->coll.all_gather_device && s->d_coll && rows <= CUDA_COLL_DEVICE_ROWS;
}

/* Device collectives: every rank's partials gathered into d_coll, then summed in rank order
 * ((p0 + p1) + p2) + ... by eng_add (y += x, one rounding a sum as the host's loop), so the bits
 * are those of the host path's sum and the same on every rank; nothing waits on the host. */
static int reduce_on_device(cuda_state *s, size_t n, glm_error *err)
{
    cuda_backend *be = s->be;
    int world = s->coll.world;
    float *all = s->d_coll;
    if (s->coll.all_gather_device(s->coll.user, be->s.y, all, n, be->stream, err) != GLM_OK)
        return -2;
    CK(eng_copy_async(be->s.y, all, n * sizeof(float), be->stream), "the partials' sum");
    for (int r = 1; r < world; r++)
        CK(eng_add(be->s.y, all + (size_t)r * n, n, be->stream), "the partials' sum");
    return 0;
}

/* Several ranks, through the host, in two parts so that other work can reach the GPU between
 * them: reduce_start copies this rank's partial of T rows (y) to its place in host (world x
 * T x hidden pinned floats: rank-major) and records fence after it; reduce_finish waits on the
 * fence, gathers every rank's partial into host and sums them on the device in rank order,
 * eng_add reading the host floats in place: ((p0 + p1) + p2) + ..., each sum one rounding as the
 * host's loop makes it, so every rank holds the same bits, without a pass of the host's over all
 * the partials. With two ranks y += the peer's partial alone: p0 + p1 and p1 + p0 are the same
 * float. The next copy into host comes after the sum on the same stream, so it waits for it. */
static int reduce_start(cuda_state *s, int T, float *host, void *fence, glm_error *err)
{
    cuda_backend *be = s->be;
    size_t n = (size_t)T * be->m->cfg.hidden_size;
    CK(eng_copy_async(host + (size_t)s->coll.rank * n, be->s.y, n * sizeof(float), be->stream),
       "a partial's copy");
    CK_QUIET(eng_event_record(fence, be->stream), "a partial's copy");
    return 0;
}

static int reduce_finish(cuda_state *s, int T, float *host, void *fence, glm_error *err)
{
    cuda_backend *be = s->be;
    size_t n = (size_t)T * be->m->cfg.hidden_size;
    int world = s->coll.world ? s->coll.world : 2, me = s->coll.rank;
    CK_QUIET(eng_event_sync(fence), "a partial's copy");
    if (s->coll.all_gather(s->coll.user, host + (size_t)me * n, host, n, err) != GLM_OK)
        return -2;
    if (world == 2) {
        CK(eng_add(be->s.y, host + (size_t)(1 - me) * n, n, be->stream), "the partials' sum");
        return 0;
    }
    CK(eng_copy_async(be->s.y, host, n * sizeof(float), be->stream), "the partials' sum");
    for (int r = 1; r < world; r++)
        CK(eng_add(be->s.y, host + (size_t)r * n, n, be->stream), "the partials' sum");
    return 0;
}

/* Several ranks: y is this rank's partial; the sum goes through the exchange: on the device when
 * the collectives can (reduce_on_device), else through the host (h_logits) at once. */
static int reduce(cuda_state *s, int T, glm_error *err)
{
    if (!s->coll.all_reduce)
        return 0;
    if (cuda_coll_on_device(s, T))
        return reduce_on_device(s, (size_t)T * s->be->m->cfg.hidden_size, err);
    int rc = reduce_start(s, T, s->h_logits, s->copied[0], err);
    return rc ? rc : reduce_finish(s, T, s->h_logits, s->copied[0], err);
}

/* Decode: 1 when layer li's last HC update also runs layer li + 1's first HC step. */
static int post_feeds_next(const cuda_backend *be, int li, int T)
{
    const cu_layer *L = be->w.layers;
    return li + 1 < be->m->cfg.num_layers && hc_fast(be, T, &L[li].hc_ffn_lin) &&
           hc_fast(be, T, &L[li + 1].hc_attn_lin);
}

/* The HC update after a sublayer; with next (the decode path) fused with next's HC step. y2 (else
 * NULL): a second part of the sublayer's output, on the side stream (the decode MoE's shared
 * expert), added to y in the update (eng_hc_post's y2). */
static int hc_update(cuda_backend *be, int T, const hc_site *next, const float *y2,
                     glm_error *err)
{
    const glm_config *c = &be->m->cfg;
    cu_scratch *b = &be->s;
    CK_QUIET(side_join(be), "joining the side stream");
    if (next)
        return hc_step(be, T, next, 1, y2, "the HC update with the next mixing product", err);
    CK(eng_hc_post(b->X, b->y, y2, b->post, b->comb, T, c->hc_mult, c->hidden_size, be->stream),
       "the HC update");
    return 0;
}

/* The tap (backend.h): T rows of per_row values of `size` bytes at dev, copied to the host after
 * the main stream's work so far; SELECT rows padded with -1 past each row's count (counts: T
 * ints on the device), EXPERTS rows sorted. */
static int tap(cuda_state *s, int li, backend_tap_what what, int T, const void *dev,
               const int *counts, int per_row, size_t size, glm_error *err)
{
    cuda_backend *be = s->be;
    if (!be->tap.fn || s->coll.all_reduce)
        return 0;
    size_t n = (size_t)T * (size_t)per_row;
    void *h = malloc(n * size);
    int *hc = counts ? malloc((size_t)T * sizeof *hc) : NULL;
    if (!h || (counts && !hc)) {
        free(h);
        free(hc);
        glm_error_set(err, GLM_ERR_NOMEM, "out of memory copying a tap's values");
        return -1;
    }
    int rc = eng_copy_async(h, dev, n * size, be->stream);
    if (!rc && counts)
        rc = eng_copy_async(hc, counts, (size_t)T * sizeof *hc, be->stream);
    if (!rc)
        rc = eng_stream_sync(be->stream);
    if (rc) {
        free(h);
        free(hc);
        return cuda_fail(err, "copying a tap's values", rc), -1;
    }
    int32_t *v = h;
    for (int t = 0; counts && t < T; t++)
        for (int i = hc[t] > 0 ? hc[t] : 0; i < per_row; i++)
            v[(size_t)t * per_row + i] = -1;
    for (int t = 0; what == BACKEND_TAP_EXPERTS && t < T; t++) /* insertion sort: K is small */
        for (int i = 1; i < per_row; i++)
            for (int j = i; j > 0 && v[(size_t)t * per_row + j - 1] > v[(size_t)t * per_row + j]; j--) {
                int32_t x = v[(size_t)t * per_row + j];
                v[(size_t)t * per_row + j] = v[(size_t)t * per_row + j - 1];
                v[(size_t)t * per_row + j - 1] = x;
            }
    be->tap.fn(be->tap.user, li, what, s->n, T, h, per_row);
    free(h);
    free(hc);
    return 0;
}

/* Rows [first, first + T) of cache c as stored, read back in f32 (numfmt.h's values), into dst
 * at `stride` floats a row. */
static int cache_rows_at(cuda_state *s, const eng_cache *c, int first, int T, float *dst,
                         int stride, glm_error *err)
{
    cuda_backend *be = s->be;
    size_t w = (size_t)c->width, n = (size_t)T * w;
    size_t size = c->dtype == ENG_CACHE_F32 ? 4 : c->dtype == ENG_CACHE_BF16 ? 2 : 1;
    unsigned char *raw = malloc(n * size);
    float *sc = malloc((size_t)T * sizeof *sc);
    int rc = raw && sc ? 0 : -1;
    if (rc) {
        free(raw), free(sc);
        glm_error_set(err, GLM_ERR_NOMEM, "out of memory copying cache rows for the tap");
        return -1;
    }
    rc = eng_copy_async(raw, (const unsigned char *)c->rows + (size_t)first * w * size, n * size,
                        be->stream);
    if (!rc && c->dtype == ENG_CACHE_FP8)
        rc = eng_copy_async(sc, c->scale + first, (size_t)T * sizeof *sc, be->stream);
    if (!rc)
        rc = eng_stream_sync(be->stream);
    if (rc) {
        free(raw), free(sc);
        return cuda_fail(err, "copying cache rows for the tap", rc), -1;
    }
    for (size_t i = 0; i < n; i++) {
        float *v = dst + (i / w) * (size_t)stride + i % w;
        if (c->dtype == ENG_CACHE_F32)
            memcpy(v, raw + 4 * i, 4);
        else if (c->dtype == ENG_CACHE_BF16)
            *v = numfmt_bf16_value((uint16_t)(raw[2 * i] | raw[2 * i + 1] << 8));
        else
            *v = numfmt_e4m3_value(raw[i]) * sc[i / w];
    }
    free(raw), free(sc);
    return 0;
}

/* Rows [s->n, s->n + T) of cache c (cache_rows_at). */
static int cache_rows(cuda_state *s, const eng_cache *c, int T, float *dst, int stride,
                      glm_error *err)
{
    return cache_rows_at(s, c, s->n, T, dst, stride, err);
}

/* Rows [0, T) of the device buffer src (width floats a row) into dst at `stride` floats a row. */
static int scratch_rows(cuda_state *s, const float *src, int T, int width, float *dst, int stride,
                        glm_error *err)
{
    for (int t = 0; t < T; t++) {
        int rc = eng_copy_async(dst + (size_t)t * stride, src + (size_t)t * width,
                                (size_t)width * sizeof *dst, s->be->stream);
        if (rc)
            return cuda_fail(err, "copying rows for the tap", rc), -1;
    }
    int rc = eng_stream_sync(s->be->stream);
    return rc ? (cuda_fail(err, "copying rows for the tap", rc), -1) : 0;
}

/* The tap's cache rows of DSA layer li: before rounding (the forward's scratch rows: the normed
 * latent, the indexer's normed key and its gate) and as stored. */
static int tap_caches(cuda_state *s, int li, int T, glm_error *err)
{
    cuda_backend *be = s->be;
    const glm_config *c = &be->m->cfg;
    const cu_layer *L = &be->w.layers[li];
    const cu_dsa_cache *dc = &s->dsa[glm_config_rank_of(c, li)];
    cu_scratch *b = &be->s;
    int R = c->kv_lora_rank, ID = c->index_head_dim, width = R + (L->has_indexer ? 2 * ID : 0);
    float *in = malloc((size_t)T * width * sizeof *in), *st = malloc((size_t)T * width * sizeof *st);
    if (!in || !st) {
        free(in), free(st);
        glm_error_set(err, GLM_ERR_NOMEM, "out of memory copying cache rows for the tap");
        return -1;
    }
    int rc = scratch_rows(s, b->kvl, T, R, in, width, err) ||
             cache_rows(s, &dc->latent, T, st, width, err);
    if (!rc && L->has_indexer)
        rc = scratch_rows(s, b->wk, T, ID, in + R, width, err) ||
             scratch_rows(s, b->ig, T, ID, in + R + ID, width, err) ||
             cache_rows(s, &dc->idx_key, T, st + R, width, err) ||
             cache_rows(s, &dc->idx_gate, T, st + R + ID, width, err);
    if (!rc) {
        be->tap.fn(be->tap.user, li, BACKEND_TAP_CACHE_IN, s->n, T, in, width);
        be->tap.fn(be->tap.user, li, BACKEND_TAP_CACHE, s->n, T, st, width);
    }
    free(in), free(st);
    /* the pools this forward completed (eng_pool_keys' rule) */
    int kp = c->index_kpool, p0 = s->n / kp, np = (s->n + T) / kp - p0;
    if (rc || !L->has_indexer || np < 1)
        return rc ? -1 : 0;
    float *pk = malloc((size_t)np * ID * sizeof *pk);
    if (!pk) {
        glm_error_set(err, GLM_ERR_NOMEM, "out of memory copying pool keys for the tap");
        return -1;
    }
    rc = cache_rows_at(s, &dc->pool_key, p0, np, pk, ID, err);
    if (!rc)
        be->tap.fn(be->tap.user, li, BACKEND_TAP_POOL_KEY, p0, np, pk, ID);
    free(pk);
    return rc ? -1 : 0;
}

/* One layer's taps after its attention (input, the DSA selection and cache rows, output). */
static int tap_attention(cuda_state *s, int li, int T, glm_error *err)
{
    cuda_backend *be = s->be;
    const glm_config *c = &be->m->cfg;
    const cu_layer *L = &be->w.layers[li];
    cu_scratch *b = &be->s;
    int D = c->hidden_size, width = c->index_topk + c->index_kpool - 1;
    if (c->attn[li] == GLM_ATTN_DSA && L->has_indexer &&
        tap(s, li, BACKEND_TAP_SELECT, T, b->sel_idx, b->sel_count, width, sizeof(int32_t), err))
        return -1;
    if (be->tap.fn && !s->coll.all_reduce && c->attn[li] == GLM_ATTN_DSA &&
        tap_caches(s, li, T, err))
        return -1;
    return tap(s, li, BACKEND_TAP_ATTN, T, b->y, NULL, D, sizeof(float), err);
}

/* One layer's taps after its FFN (the router's logits and choice where it routes, the output). */
static int tap_ffn(cuda_state *s, int li, int T, glm_error *err)
{
    cuda_backend *be = s->be;
    const glm_config *c = &be->m->cfg;
    cu_scratch *b = &be->s;
    int E = c->n_routed_experts, K = c->num_experts_per_tok;
    if (c->moe[li] &&
        (tap(s, li, BACKEND_TAP_ROUTER, T, b->rlog, NULL, E, sizeof(float), err) ||
         tap(s, li, BACKEND_TAP_EXPERTS, T, b->rids, NULL, K, sizeof(int32_t), err)))
        return -1;
    return tap(s, li, BACKEND_TAP_FFN, T, b->y, NULL, c->hidden_size, sizeof(float), err);
}

/* A layer in three phases, split where its rows' partial sums are exchanged between ranks:
 * the attention (its HC step and the sublayer, into y), the FFN (the attention's taps and HC
 * update, the FFN's HC step and the sublayer, into y; *y2: the shared expert's part where it is
 * summed later), the end (the FFN's taps and HC update, with the next layer's first HC step where
 * that fuses). */
static int phase_attention(cuda_state *s, int li, int T, glm_error *err)
{
    cuda_backend *be = s->be;
    const glm_config *c = &be->m->cfg;
    const cu_layer *L = &be->w.layers[li];
    int ready = li > 0 && post_feeds_next(be, li - 1, T);
    hc_site attn = attn_site(L);
    if (hc_pre(be, T, &attn, ready, err) ||
        tap(s, li, BACKEND_TAP_ATTN_IN, T, be->s.u, NULL, c->hidden_size, sizeof(float), err))
        return -1;
    return choose_form(L, c->attn[li], T).attn(s, L, glm_config_rank_of(c, li), T, err);
}

static int phase_ffn(cuda_state *s, int li, int T, const float **y2, glm_error *err)
{
    cuda_backend *be = s->be;
    const glm_config *c = &be->m->cfg;
    const cu_layer *L = &be->w.layers[li];
    cu_scratch *b = &be->s;
    int mid = hc_fast(be, T, &L->hc_attn_lin) && hc_fast(be, T, &L->hc_ffn_lin);
    hc_site ffn = ffn_site(L);
    layer_form f = choose_form(L, c->attn[li], T);
    *y2 = NULL;
    if (tap_attention(s, li, T, err) || hc_update(be, T, mid ? &ffn : NULL, NULL, err))
        return -1;
    if (hc_pre(be, T, &ffn, mid, err) ||
        tap(s, li, BACKEND_TAP_FFN_IN, T, b->u, NULL, c->hidden_size, sizeof(float), err))
        return -1;
    /* the shared expert's sum may wait for the HC update unless y is read before it (the tap,
     * the two ranks' exchange) */
    int sum_later = !s->coll.all_reduce && !be->tap.fn;
    return c->moe[li] ? f.moe(be, L, &f, T, sum_later ? y2 : NULL, err)
                      : f.mlp(be, &L->mlp, c->intermediate_size, b->u, T, b->y, err);
}

static int phase_end(cuda_state *s, int li, int T, const float *y2, glm_error *err)
{
    cuda_backend *be = s->be;
    if (tap_ffn(s, li, T, err))
        return -1;
    hc_site next;
    int feeds = post_feeds_next(be, li, T);
    if (feeds)
        next = attn_site(&be->w.layers[li + 1]);
    return hc_update(be, T, feeds ? &next : NULL, y2, err);
}

static int layer_ops(cuda_state *s, int li, int T, glm_error *err)
{
    const float *y2 = NULL;
    int rc = phase_attention(s, li, T, err);
    if (rc || (rc = reduce(s, T, err)) || (rc = phase_ffn(s, li, T, &y2, err)) ||
        (rc = reduce(s, T, err)))
        return rc;
    return phase_end(s, li, T, y2, err);
}

/* One layer; the side stream joined on every exit (a failed op leaves no fork open). */
static int layer(cuda_state *s, int li, int T, glm_error *err)
{
    int rc = layer_ops(s, li, T, err);
    int jrc = side_join(s->be);
    if (!rc && jrc)
        return cuda_fail(err, "joining the side stream", jrc), -1;
    return rc;
}

int cuda_forward_layer(cuda_state *s, int li, int T, glm_error *err)
{
    return layer(s, li, T, err);
}

/* Device collectives: this rank's logits part padded to the widest into d_coll (the padding is
 * gathered, never read), gathered, and every rank's part copied to its columns of be->s.logits. */
static int head_on_device(cuda_state *s, int rows, cuda_plan_part part, size_t widest, glm_error *err)
{
    cuda_backend *be = s->be;
    int world = s->coll.world;
    size_t V = (size_t)be->m->cfg.vocab_size, row = sizeof(float);
    float *all = s->d_coll, *mine = all + (size_t)world * rows * widest;
    CK(eng_copy_2d(mine, widest * row, be->s.logits, (size_t)part.count * row, (size_t)part.count * row,
                   (size_t)rows, be->stream), "the logits' part");
    if (s->coll.all_gather_device(s->coll.user, mine, all, (size_t)rows * widest, be->stream, err) != GLM_OK)
        return -2;
    for (int r = 0; r < world; r++) {
        cuda_plan_part p = cuda_plan_part_of((int64_t)V, r, world);
        CK(eng_copy_2d(be->s.logits + p.start, V * row, all + (size_t)r * rows * widest, widest * row,
                       (size_t)p.count * row, (size_t)rows, be->stream), "the gathered logits");
    }
    return 0;
}

/* Several ranks: each computes its vocabulary part (cuda_plan_part_of), padded to the widest
 * part so every rank sends as many floats; the parts meet through the host. With two ranks and an
 * even vocabulary the parts are halves, nothing is padded, and the copies are those of the
 * halves' gather before: the logits' bits are the LM head's, moved only. */
static int split_head(cuda_state *s, const float *x, int rows, float *host, glm_error *err)
{
    cuda_backend *be = s->be;
    int world = s->coll.world ? s->coll.world : 2;
    size_t V = (size_t)be->m->cfg.vocab_size, Vr = (size_t)be->w.lm_head.m.rows;
    cuda_plan_part part = cuda_plan_part_of((int64_t)V, s->coll.rank, world);
    size_t widest = (size_t)cuda_plan_part_of((int64_t)V, 0, world).count;
    if ((size_t)part.count != Vr) {
        glm_error_set(err, GLM_ERR_ARG, "this rank's LM head has %zu rows, not its %lld of the "
                      "vocabulary's %zu among %d ranks", Vr, (long long)part.count, V, world);
        return -2;
    }
    CK(lin(be, &be->w.lm_head, x, rows, be->s.logits), "the LM head");
    if (cuda_coll_on_device(s, rows))
        return head_on_device(s, rows, part, widest, err);
    /* staging (cuda_state_staging): all = world x rows x widest, then mine = rows x widest, from
     * host, which has that room after it (a piece's rows: the later pieces' rows and the room
     * after the whole call's) */
    float *all = host, *mine = all + (size_t)world * rows * widest;
    if (Vr == widest) {
        CK(eng_copy_async(mine, be->s.logits, (size_t)rows * Vr * sizeof(float), be->stream),
           "the logits' copy");
    } else {
        /* the padding is written by the host: first the GPU's queued work must be done with this
         * memory (the layers' last sums read the ranks' partials in place in the same staging,
         * which mine overlaps when few rows of logits follow a long chunk) */
        CK(eng_stream_sync(be->stream), "the layers before the logits' staging");
        memset(mine, 0, (size_t)rows * widest * sizeof(float));
        CK(eng_copy_2d(mine, widest * sizeof(float), be->s.logits, Vr * sizeof(float),
                       Vr * sizeof(float), rows, be->stream), "the logits' copy");
    }
    CK(eng_stream_sync(be->stream), "the logits' copy");
    if (s->coll.all_gather(s->coll.user, mine, all, (size_t)rows * widest, err) != GLM_OK)
        return -2;
    /* the gathered parts (rank-major) become full rows in place, through the space after them */
    float *parts = all + (size_t)rows * V;
    memmove(parts, all, (size_t)world * rows * widest * sizeof(float));
    for (int r = 0; r < world; r++) {
        cuda_plan_part p = cuda_plan_part_of((int64_t)V, r, world);
        for (int t = 0; t < rows; t++)
            memcpy(all + (size_t)t * V + (size_t)p.start,
                   parts + ((size_t)r * rows + (size_t)t) * widest, (size_t)p.count * sizeof(float));
    }
    return 0;
}

/* Whether a forward of T rows reads the session's cancel between layers: a prefill chunk past
 * the decode forms' rows (shorter ones end soon anyway), not a verification window; on one rank
 * when the session gave a flag, on several always (they must make the same exchanges). */
static int polls_cancel(const cuda_state *s, int T)
{
    return T > CUDA_DECODE_T && !s->verifying && (s->cancel || s->coll.all_reduce);
}

/* After layer li was queued: whether the session asked to stop. Several ranks agree on it
 * (backend_cancel_agreed: their host threads already wait on every exchange); -2 when that
 * exchange failed. One rank reads it once layer li - 1 has run, so the
 * GPU always has layer li to run while the host waits (the check costs it nothing, and a cancel
 * waits two layers at most, not a whole chunk). */
static int cancel_seen(cuda_state *s, int li, glm_error *err)
{
    if (s->coll.all_reduce)
        return backend_cancel_agreed(&s->coll, s->cancel, err);
    CK_QUIET(eng_event_record(s->layer_done[li & 1], s->be->stream), "a layer's fence");
    if (li == 0)
        return 0;
    CK_QUIET(eng_event_sync(s->layer_done[(li - 1) & 1]), "waiting on a layer's fence");
    return atomic_load(s->cancel) != 0;
}

/* Several ranks exchanging through the host, a prefill chunk of at least 2 x CUDA_HALF_ROWS
 * rows runs as two halves of rows whose layers interleave: each half's phases are queued in turn
 * (the attention of half 0, of half 1, the FFN of half 0, ...), and the host gathers one half's
 * partial sums while the GPU runs the other half's phase, queued before the gather. A half is
 * computed as a chunk of its rows would be (its rows of X, y, post and comb, its position; the
 * other buffers hold only what one phase makes and reads), so a row's bits are those of the
 * unsplit chunk's: the products and kernels take rows at 16-token boundaries as they take chunks
 * (prefill_grid.h), and the second half's rows read the KDA states and the caches the first half
 * left, as a second chunk would. */
typedef struct cu_half {
    int r0, T;    /* rows [r0, r0 + T) of the chunk */
    float *host;  /* its partials' staging in h_logits: world x T x hidden floats */
} cu_half;

static int halves_overlap(const cuda_state *s, int T)
{
    return s->coll.all_reduce && !cuda_coll_on_device(s, T) && !s->verifying &&
           T >= 2 * CUDA_HALF_ROWS; /* (no rank taps: tap() is off with several ranks) */
}

/* The scratch's row buffers that live across an exchange, the session length and the position
 * the ops read, set to half h's (full: the chunk's scratch; n0: the chunk's first position; pos:
 * the chunk's d_pos, whose [1] holds the second half's). */
static void use_half(cuda_state *s, const cu_scratch *full, int n0, int *pos, const cu_half *h,
                     int which)
{
    cuda_backend *be = s->be;
    size_t S = (size_t)be->m->cfg.hc_mult, D = (size_t)be->m->cfg.hidden_size, r = (size_t)h->r0;
    be->s.X = full->X + r * S * D;
    be->s.y = full->y + r * D;
    be->s.post = full->post + r * S;
    be->s.comb = full->comb + r * S * S;
    s->n = n0 + h->r0;
    s->d_pos = pos + which;
}

/* A half's phase ends with the side stream joined, as a layer does. */
static int joined(cuda_backend *be, int rc, glm_error *err)
{
    int jrc = side_join(be);
    if (!rc && jrc)
        return cuda_fail(err, "joining the side stream", jrc), -1;
    return rc;
}

static int layers_in_halves(cuda_state *s, int T, glm_error *err)
{
    cuda_backend *be = s->be;
    const glm_config *c = &be->m->cfg;
    int world = s->coll.world ? s->coll.world : 2;
    int T0 = T / 2 / GLM_KEEP_ALIGN * GLM_KEEP_ALIGN;
    cu_half h[2] = {{0, T0, s->h_logits},
                    {T0, T - T0, s->h_logits + (size_t)world * T0 * c->hidden_size}};
    cu_scratch full = be->s;
    int n0 = s->n, *pos = s->d_pos, rc = 0;
    s->h_pos[1] = n0 + T0;
    if ((rc = eng_copy_async(pos + 1, s->h_pos + 1, sizeof(int), be->stream)) != 0) {
        cuda_fail(err, "copying the second half's position in", rc);
        return -1;
    }
    const float *y2[2] = {NULL, NULL};
    for (int li = 0; li <= c->num_layers && !rc; li++) {
        for (int k = 0; k < 2 && !rc; k++) { /* the end of layer li - 1, the attention of li */
            use_half(s, &full, n0, pos, &h[k], k);
            if (li > 0 && ((rc = reduce_finish(s, h[k].T, h[k].host, s->copied[k], err)) ||
                           (rc = phase_end(s, li - 1, h[k].T, y2[k], err))))
                break;
            if (li == c->num_layers)
                continue;
            if ((rc = joined(be, phase_attention(s, li, h[k].T, err), err)) ||
                (rc = reduce_start(s, h[k].T, h[k].host, s->copied[k], err)))
                break;
        }
        for (int k = 0; k < 2 && !rc && li < c->num_layers; k++) { /* the FFN of li */
            use_half(s, &full, n0, pos, &h[k], k);
            if ((rc = reduce_finish(s, h[k].T, h[k].host, s->copied[k], err)) ||
                (rc = joined(be, phase_ffn(s, li, h[k].T, &y2[k], err), err)) ||
                (rc = reduce_start(s, h[k].T, h[k].host, s->copied[k], err)))
                break;
        }
        if (!rc && li < c->num_layers && (rc = cancel_seen(s, li, err)) > 0) {
            s->stopped_at_layer = 1;
            glm_error_set(err, GLM_ERR_CANCELED, "the prompt was canceled at layer %d of %d",
                          li + 1, c->num_layers);
            rc = -1;
        }
    }
    be->s = full;
    s->n = n0;
    s->d_pos = pos;
    return joined(be, rc, err);
}

int cuda_forward_layers(cuda_state *s, int T, glm_error *err)
{
    cuda_backend *be = s->be;
    const glm_config *c = &be->m->cfg;
    int poll = polls_cancel(s, T);
    cuda_prof_mark(be, NULL); /* the op profile's start (no-op unless on): the embedding's time */
    CK(eng_embed(&be->w.embed, s->d_tokens, T, c->hc_mult, be->s.X, be->stream), "the embedding");
    if (halves_overlap(s, T))
        return layers_in_halves(s, T, err);
    for (int li = 0; li < c->num_layers; li++) {
        int rc = layer(s, li, T, err);
        if (rc)
            return rc;
        if (poll && (rc = cancel_seen(s, li, err)) != 0) {
            if (rc < 0)
                return rc;
            /* the layers up to li ran or will: their KDA states moved on (a mark made at this
             * length puts them back: cu_prefill) */
            s->stopped_at_layer = 1;
            glm_error_set(err, GLM_ERR_CANCELED, "the prompt was canceled at layer %d of %d",
                          li + 1, c->num_layers);
            return -1;
        }
    }
    return 0;
}

/* The LM head of `rows` normed rows x: one rank's logits into be->s.logits; several ranks' through
 * split_head (device collectives: into be->s.logits; through the host: full rows at host). */
static int head(cuda_state *s, const float *x, int rows, float *host, glm_error *err)
{
    cuda_backend *be = s->be;
    if (s->coll.all_gather)
        return split_head(s, x, rows, host, err);
    CK(lin(be, &be->w.lm_head, x, rows, be->s.logits), "the LM head");
    return 0;
}

/* The streams' mean and the final norm of T rows into be->s.hfin. */
static int final_norm(cuda_state *s, int T, glm_error *err)
{
    cuda_backend *be = s->be;
    const glm_config *c = &be->m->cfg;
    CK(eng_stream_mean_norm(be->s.hfin, be->s.X, be->w.final_norm, T, c->hc_mult, c->hidden_size,
                            c->rms_norm_eps, be->stream), "the final norm");
    return 0;
}

/* The final norm and the LM head; logits on the device (one rank) or already in h_logits. */
int cuda_forward_head(cuda_state *s, int T, int all_rows, glm_error *err)
{
    cuda_backend *be = s->be;
    int D = be->m->cfg.hidden_size, rows = all_rows ? T : 1;
    if (rows > CUDA_HEAD_ROWS)
        return glm_error_set(err, GLM_ERR_ARG, "the LM head takes at most %d rows a call (the "
                             "logits' scratch); this call asks %d", CUDA_HEAD_ROWS, rows), -1;
    int rc = final_norm(s, T, err);
    if (rc)
        return rc;
    const float *x = all_rows ? be->s.hfin : be->s.hfin + (size_t)(T - 1) * D;
    return head(s, x, rows, s->h_logits, err);
}

/* Every row's logits of a chunk larger than the logits' scratch (CUDA_HEAD_ROWS rows): the LM
 * head in pieces of nearly equal rows (cuda_plan_head_piece), each copied to its rows of h_logits
 * before the next one overwrites the scratch (the same stream orders them). Each piece keeps more than
 * ENG_GEMM_MIN_ROWS rows, so its products take the path the whole chunk's would, whose row bits
 * do not depend on the row count: the logits are those of one head over every row. */
_Static_assert(CUDA_DECODE_T <= CUDA_HEAD_ROWS, "a verification window's rows fit the logits' scratch");
_Static_assert(CUDA_HEAD_ROWS / 2 > ENG_GEMM_MIN_ROWS && CUDA_HEAD_ROWS / 2 > 16,
               "a piece (at least half the scratch's rows) stays past the GEMV paths of eng_gemm and "
               "of the EXL3 and q4 products");
static int head_in_pieces(cuda_state *s, int T, glm_error *err)
{
    cuda_backend *be = s->be;
    size_t D = (size_t)be->m->cfg.hidden_size, V = (size_t)be->m->cfg.vocab_size;
    int rc = final_norm(s, T, err);
    if (rc)
        return rc;
    for (int i = 0, pieces = cuda_plan_head_pieces(T); i < pieces; i++) {
        int r0, n;
        cuda_plan_head_piece(T, i, &r0, &n);
        float *host = s->h_logits + (size_t)r0 * V;
        rc = head(s, be->s.hfin + (size_t)r0 * D, n, host, err);
        if (rc)
            return rc;
        if (!s->coll.all_gather || cuda_coll_on_device(s, n))
            CK(eng_copy_async(host, be->s.logits, (size_t)n * V * sizeof(float), be->stream),
               "a piece of the logits' copy");
    }
    return 0;
}

int cuda_forward(cuda_state *s, int T, int all_rows, int want_logits, glm_error *err)
{
    cuda_backend *be = s->be;
    int rc = cuda_forward_layers(s, T, err);
    if (rc || !want_logits)
        return rc;
    if (all_rows && T > CUDA_HEAD_ROWS)
        return head_in_pieces(s, T, err);
    rc = cuda_forward_head(s, T, all_rows, err);
    if (rc || (s->coll.all_gather && !cuda_coll_on_device(s, all_rows ? T : 1)))
        return rc;
    size_t rows = all_rows ? (size_t)T : 1, V = (size_t)be->m->cfg.vocab_size;
    CK(eng_copy_async(s->h_logits, be->s.logits, rows * V * sizeof(float), be->stream),
       "the logits' copy");
    return 0;
}

int cuda_forward_mtp(cuda_state *s, const float *h, int T, int zero_first, int want_logits,
                     glm_error *err)
{
    cuda_backend *be = s->be;
    const glm_config *c = &be->m->cfg;
    const cu_weights *w = &be->w;
    cu_mtp_state *m = &s->mtp;
    cu_scratch *b = &be->s;
    int D = c->hidden_size;
    size_t row = (size_t)D * sizeof(float);
    float eps = c->rms_norm_eps;
    void *st = be->stream;
    CK(eng_embed(&w->embed, m->d_tok, T, 1, b->c, st), "the MTP embedding");
    CK(eng_rmsnorm(b->c, b->c, w->mtp_enorm, T, D, eps, st), "the MTP embedding norm");
    CK(eng_rmsnorm(b->u, h, w->mtp_hnorm, T, D, eps, st), "the MTP hidden norm");
    CK(eng_copy_2d(m->cat, 2 * row, b->c, row, row, T, st), "the MTP input rows");
    CK(eng_copy_2d((char *)m->cat + row, 2 * row, b->u, row, row, T, st), "the MTP input rows");
    if (zero_first) /* position 0 has no embedding (architecture.md 2.8) */
        CK(eng_copy_async(m->cat, m->zero, row, st), "the MTP input rows");
    CK(lin(be, &w->mtp_eh_proj, m->cat, T, m->x), "the MTP eh_proj");
    CK(eng_rmsnorm(b->u, m->x, w->mtp_layer.input_norm, T, D, eps, st), "the MTP input norm");
    /* the layer code reads the cache and the position from the state: point it at the block's */
    cu_dsa_cache *main_dsa = s->dsa;
    int *main_pos = s->d_pos;
    s->dsa = &m->cache;
    s->d_pos = m->d_pos;
    layer_form f = choose_form(&w->mtp_layer, GLM_ATTN_DSA, T);
    int rc = f.attn(s, &w->mtp_layer, 0, T, err);
    s->dsa = main_dsa;
    s->d_pos = main_pos;
    if (rc)
        return rc;
    CK(eng_add(m->x, b->y, (size_t)T * D, st), "the MTP attention's sum");
    CK(eng_rmsnorm(b->u, m->x, w->mtp_layer.post_norm, T, D, eps, st), "the MTP post norm");
    rc = c->n_routed_experts > 0
             ? f.moe(be, &w->mtp_layer, &f, T, NULL, err)
             : f.mlp(be, &w->mtp_layer.mlp, c->intermediate_size, b->u, T, b->y, err);
    if (rc)
        return rc;
    CK(eng_add(m->x, b->y, (size_t)T * D, st), "the MTP FFN's sum");
    CK(eng_rmsnorm(m->g, m->x, w->mtp_head_norm, T, D, eps, st), "the MTP head norm");
    if (want_logits)
        CK(lin(be, &w->lm_head, m->g + (size_t)(T - 1) * D, 1, b->logits), "the MTP's LM head");
    return 0;
}

glm_status cuda_time_layers(cuda_state *s, int32_t token, float *us, float *head_us, glm_error *err)
{
    cuda_backend *be = s->be;
    const glm_config *c = &be->m->cfg;
    glm_status st = cuda_state_reserve(s, s->n + 1, err);
    if (st)
        return st;
    void *ev[2] = {NULL, NULL};
    if (eng_event_new(&ev[0]) || eng_event_new(&ev[1])) {
        eng_event_free(ev[0]);
        eng_event_free(ev[1]);
        return cuda_fail(err, "creating events", 1);
    }
    s->h_tokens[0] = token;
    *s->h_pos = s->n;
    int rc = eng_copy_async(s->d_tokens, s->h_tokens, sizeof(int32_t), be->stream) ||
             eng_copy_async(s->d_pos, s->h_pos, sizeof(int), be->stream) ||
             eng_embed(&be->w.embed, s->d_tokens, 1, c->hc_mult, be->s.X, be->stream);
    cuda_prof_mark(be, NULL); /* the op profile's start (no-op unless on): layer 0's first op */
    float ms = 0;
    for (int li = 0; rc == 0 && li < c->num_layers; li++) {
        eng_event_record(ev[0], be->stream);
        rc = layer(s, li, 1, err);
        eng_event_record(ev[1], be->stream);
        if (rc == 0 && eng_event_ms(ev[0], ev[1], &ms) == 0)
            us[li] = ms * 1000.0f;
    }
    if (rc == 0) {
        eng_event_record(ev[0], be->stream);
        rc = cuda_forward_head(s, 1, 0, err);
        eng_event_record(ev[1], be->stream);
        if (rc == 0 && eng_event_ms(ev[0], ev[1], &ms) == 0)
            *head_us = ms * 1000.0f;
    }
    eng_event_free(ev[0]);
    eng_event_free(ev[1]);
    if (rc)
        return err && err->status ? err->status : GLM_ERR_BACKEND;
    s->n += 1;
    return GLM_OK;
}
#endif
