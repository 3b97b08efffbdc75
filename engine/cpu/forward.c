/* forward.c: the CPU forward over a conversation state: embedding, the layer loop (HC collapse,
 * norm, KDA or DSA, HC update; the same for the FFN), stream mean, final norm, LM head. */
#include "cpu/forward.h"

#include <stdlib.h>
#include <string.h>

#include "cpu/blocks.h"
#include "prefill_grid.h"

static size_t conv_floats(const glm_config *c)
{
    return (size_t)(c->kda_conv_kernel - 1) * 3 * c->kda_heads * c->kda_head_dim;
}

static size_t rec_floats(const glm_config *c)
{
    return (size_t)c->kda_heads * c->kda_head_dim * c->kda_head_dim;
}

static void free_kda(kda_state *k, int n)
{
    for (int i = 0; k && i < n; i++) {
        free(k[i].conv);
        free(k[i].S);
    }
    free(k);
}

static kda_state *new_kda(const glm_config *c, int n)
{
    kda_state *k = calloc((size_t)(n ? n : 1), sizeof *k);
    if (!k)
        return NULL;
    for (int i = 0; i < n; i++) {
        k[i].conv = calloc(conv_floats(c) ? conv_floats(c) : 1, sizeof(float));
        k[i].S = calloc(rec_floats(c), sizeof(float));
        if (!k[i].conv || !k[i].S) {
            free_kda(k, n);
            return NULL;
        }
    }
    return k;
}

cpu_state *cpu_state_new(const glm_model *m, glm_error *err)
{
    const glm_config *c = &m->cfg;
    cpu_state *s = calloc(1, sizeof *s);
    int nk = glm_config_count(c, GLM_ATTN_KDA), nd = glm_config_count(c, GLM_ATTN_DSA);
    if (s) {
        s->m = m;
        s->mark_n = -1;
        s->num = (cpu_numerics){NUMFMT_CACHE_F32, NUMFMT_FP8_POW2,
                                BACKEND_KV(BACKEND_KV_F32, BACKEND_KV_F32), 0, 0};
        s->kda = new_kda(c, nk);
        s->dsa = calloc((size_t)(nd ? nd : 1), sizeof *s->dsa);
    }
    if (!s || !s->kda || !s->dsa) {
        cpu_state_free(s);
        glm_error_set(err, GLM_ERR_NOMEM, "out of memory creating a session state");
        return NULL;
    }
    return s;
}

void cpu_state_set_numerics(cpu_state *s, const cpu_numerics *nf)
{
    s->num = *nf;
}

void cpu_state_set_tap(cpu_state *s, const backend_tap *tap)
{
    if (tap)
        s->tap = *tap;
    else
        memset(&s->tap, 0, sizeof s->tap);
}

void cpu_state_set_collective(cpu_state *s, const cpu_collective *coll)
{
    if (coll)
        s->coll = *coll;
    else
        memset(&s->coll, 0, sizeof s->coll);
}

void cpu_state_free(cpu_state *s)
{
    if (!s)
        return;
    const glm_config *c = &s->m->cfg;
    int nk = glm_config_count(c, GLM_ATTN_KDA), nd = glm_config_count(c, GLM_ATTN_DSA);
    free_kda(s->kda, nk);
    free_kda(s->mark, nk);
    for (int i = 0; s->trail && i < nk; i++) {
        free(s->trail[i].conv);
        free(s->trail[i].S);
    }
    free(s->trail);
    cpu_mtp_free(s);
    for (int i = 0; s->dsa && i < nd; i++) {
        free(s->dsa[i].latent);
        free(s->dsa[i].idx_key);
        free(s->dsa[i].idx_gate);
        free(s->dsa[i].pool_key);
    }
    free(s->dsa);
    free(s);
}

void cpu_state_reset(cpu_state *s)
{
    const glm_config *c = &s->m->cfg;
    int nk = glm_config_count(c, GLM_ATTN_KDA), nd = glm_config_count(c, GLM_ATTN_DSA);
    for (int i = 0; i < nk; i++) {
        memset(s->kda[i].conv, 0, conv_floats(c) * sizeof(float));
        memset(s->kda[i].S, 0, rec_floats(c) * sizeof(float));
    }
    for (int i = 0; i < nd; i++)
        s->dsa[i].n_pools = 0;
    s->n = 0;
    s->trail_n = 0;
    s->mtp_n = 0;
    s->mtp.n_pools = 0;
    s->h_n = 0;
    s->mark_n = -1; /* a mark of the tokens before belongs to none of the next ones */
    s->mark_mtp_n = -1;
}

int cpu_state_length(const cpu_state *s)
{
    return s->n;
}

glm_status cpu_state_mark(cpu_state *s, glm_error *err)
{
    const glm_config *c = &s->m->cfg;
    int nk = glm_config_count(c, GLM_ATTN_KDA);
    if (!s->mark && !(s->mark = new_kda(c, nk)))
        return glm_error_set(err, GLM_ERR_NOMEM, "out of memory saving a session state");
    for (int i = 0; i < nk; i++) {
        memcpy(s->mark[i].conv, s->kda[i].conv, conv_floats(c) * sizeof(float));
        memcpy(s->mark[i].S, s->kda[i].S, rec_floats(c) * sizeof(float));
    }
    s->mark_n = s->n;
    s->mark_mtp_n = -1;
    const float *last = s->n > 0 && s->n - 1 >= s->h_base && s->n - 1 < s->h_base + s->h_n
                            ? s->h + (size_t)(s->n - 1 - s->h_base) * c->hidden_size
                            : NULL;
    if (cpu_mtp_on(s) && last && s->mtp_n == s->n - 1) {
        if (!s->mark_h && !(s->mark_h = malloc((size_t)c->hidden_size * sizeof *s->mark_h)))
            return glm_error_set(err, GLM_ERR_NOMEM, "out of memory saving a session state");
        memcpy(s->mark_h, last, (size_t)c->hidden_size * sizeof *s->mark_h);
        s->mark_mtp_n = s->mtp_n;
    }
    return GLM_OK;
}

int cpu_state_mark_length(const cpu_state *s)
{
    return s->mark_n;
}

/* The linear-attention states back to the mark and the pooled keys cut to n tokens (the rows
 * past n are rewritten by the next forward); the mark's own length is n. */
static void back_to_mark(cpu_state *s, int n)
{
    const glm_config *c = &s->m->cfg;
    int nk = glm_config_count(c, GLM_ATTN_KDA), nd = glm_config_count(c, GLM_ATTN_DSA);
    for (int i = 0; i < nk; i++) {
        memcpy(s->kda[i].conv, s->mark[i].conv, conv_floats(c) * sizeof(float));
        memcpy(s->kda[i].S, s->mark[i].S, rec_floats(c) * sizeof(float));
    }
    for (int i = 0; i < nd; i++)
        if (s->dsa[i].n_pools > n / c->index_kpool)
            s->dsa[i].n_pools = n / c->index_kpool;
    s->trail_n = 0;
}

glm_status cpu_state_truncate(cpu_state *s, int n, glm_error *err)
{
    const glm_config *c = &s->m->cfg;
    if (n == s->n)
        return GLM_OK;
    if (n == 0) {
        cpu_state_reset(s);
        return GLM_OK;
    }
    if (n != s->mark_n || n > s->n)
        return glm_error_set(err, GLM_ERR_ARG, "cannot go back to %d tokens: the session holds %d "
                             "and kept the linear-attention state only at %d; run the prompt again",
                             n, s->n, s->mark_n);
    back_to_mark(s, n);
    s->n = n;
    if (s->mark_mtp_n == n - 1 && s->mtp_n >= n - 1 && s->h_cap >= 1) {
        cpu_mtp_cut(s, n); /* the MTP rows before the mark are still its own */
        memcpy(s->h, s->mark_h, (size_t)c->hidden_size * sizeof *s->h);
        s->h_base = n - 1;
        s->h_n = 1;
    } else {
        s->mtp_n = -1;
    }
    return GLM_OK;
}

static int grow(float **p, size_t n)
{
    float *q = realloc(*p, (n ? n : 1) * sizeof *q);
    if (!q)
        return -1;
    *p = q;
    return 0;
}

glm_status cpu_state_reserve(cpu_state *s, int need, glm_error *err)
{
    const glm_config *c = &s->m->cfg;
    if (need <= s->cap)
        return GLM_OK;
    int cap = s->cap ? s->cap : 256;
    while (cap < need)
        cap *= 2;
    int nd = glm_config_count(c, GLM_ATTN_DSA);
    size_t ID = (size_t)c->index_head_dim;
    for (int i = 0; i < nd; i++) {
        dsa_cache *d = &s->dsa[i];
        if (grow(&d->latent, (size_t)cap * c->kv_lora_rank) || grow(&d->idx_key, (size_t)cap * ID) ||
            grow(&d->idx_gate, (size_t)cap * ID) ||
            grow(&d->pool_key, (size_t)(cap / c->index_kpool + 1) * ID))
            return glm_error_set(err, GLM_ERR_NOMEM, "out of memory growing the attention cache "
                                 "to %d tokens", cap);
    }
    if (s->m->w.has_mtp) {
        dsa_cache *d = &s->mtp;
        if (grow(&d->latent, (size_t)cap * c->kv_lora_rank) || grow(&d->idx_key, (size_t)cap * ID) ||
            grow(&d->idx_gate, (size_t)cap * ID) ||
            grow(&d->pool_key, (size_t)(cap / c->index_kpool + 1) * ID))
            return glm_error_set(err, GLM_ERR_NOMEM, "out of memory growing the MTP cache to %d "
                                 "tokens", cap);
    }
    s->cap = cap;
    return GLM_OK;
}

typedef struct fwd_buf {
    float *X, *c, *u, *y, *post, *comb;
    dsa_selection sel[2];
} fwd_buf;

static void fwd_buf_free(fwd_buf *b)
{
    free(b->X);
    free(b->c);
    free(b->u);
    free(b->y);
    free(b->post);
    free(b->comb);
    for (int i = 0; i < 2; i++) {
        free(b->sel[i].count);
        free(b->sel[i].idx);
        free(b->sel[i].scores);
        free(b->sel[i].cache_in);
    }
}

static int fwd_buf_new(fwd_buf *b, const glm_config *c, int T, int score_width)
{
    size_t D = (size_t)c->hidden_size, S = (size_t)c->hc_mult;
    memset(b, 0, sizeof *b);
    b->X = malloc((size_t)T * S * D * sizeof(float));
    b->c = malloc((size_t)T * D * sizeof(float));
    b->u = malloc((size_t)T * D * sizeof(float));
    b->y = malloc((size_t)T * D * sizeof(float));
    b->post = malloc((size_t)T * S * sizeof(float));
    b->comb = malloc((size_t)T * S * S * sizeof(float));
    int ok = b->X && b->c && b->u && b->y && b->post && b->comb;
    for (int i = 0; i < 2 && ok; i++) {
        b->sel[i].width = c->index_topk + c->index_kpool - 1;
        b->sel[i].count = malloc((size_t)T * sizeof(int));
        b->sel[i].idx = malloc((size_t)T * b->sel[i].width * sizeof(int32_t));
        ok = b->sel[i].count && b->sel[i].idx;
        if (ok && score_width > 0) {
            b->sel[i].score_width = score_width;
            b->sel[i].scores = malloc((size_t)T * score_width * sizeof(float));
            b->sel[i].cache_in = malloc((size_t)T * (c->kv_lora_rank + 2 * c->index_head_dim) *
                                        sizeof(float));
            ok = b->sel[i].scores && b->sel[i].cache_in;
        }
    }
    return ok ? 0 : -1;
}

/* Several ranks: each block's output is this rank's partial sum; -2 when the exchange failed. */
static int reduce_partials(cpu_state *s, fwd_buf *b, int T, glm_error *err)
{
    if (!s->coll.all_reduce)
        return 0;
    size_t n = (size_t)T * s->m->cfg.hidden_size;
    return s->coll.all_reduce(s->coll.user, b->y, n, err) == GLM_OK ? 0 : -2;
}

static int cmp_int32(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

static void tap(const cpu_state *s, int li, backend_tap_what what, int T, const void *vals,
                int per_row)
{
    if (s->tap.fn && !s->coll.all_reduce)
        s->tap.fn(s->tap.user, li, what, s->n, T, vals, per_row);
}

/* The tap's selection rows: sel's rows, -1 past each row's count. */
static int tap_selection(const cpu_state *s, int li, const dsa_selection *sel, int T)
{
    if (!s->tap.fn || s->coll.all_reduce)
        return 0;
    int32_t *rows = malloc((size_t)T * sel->width * sizeof *rows);
    if (!rows)
        return -1;
    for (int t = 0; t < T; t++)
        for (int i = 0; i < sel->width; i++)
            rows[(size_t)t * sel->width + i] = i < sel->count[t] ? sel->idx[(size_t)t * sel->width + i] : -1;
    tap(s, li, BACKEND_TAP_SELECT, T, rows, sel->width);
    free(rows);
    if (sel->scores)
        tap(s, li, BACKEND_TAP_SCORES, T, sel->scores, sel->score_width);
    return 0;
}

/* The tap's cache rows of a DSA layer: before rounding (sel's copy) and as stored in dc. */
static int tap_cache(const cpu_state *s, int li, const dsa_cache *dc, int indexer,
                     const dsa_selection *sel, int T)
{
    const glm_config *c = &s->m->cfg;
    int R = c->kv_lora_rank, ID = c->index_head_dim, width = R + (indexer ? 2 * ID : 0);
    if (!s->tap.fn || s->coll.all_reduce)
        return 0;
    float *rows = malloc((size_t)T * width * sizeof *rows);
    if (!rows)
        return -1;
    for (int t = 0; t < T; t++) {
        float *r = rows + (size_t)t * width;
        size_t pos = (size_t)(s->n + t);
        memcpy(r, dc->latent + pos * R, (size_t)R * sizeof *r);
        if (indexer) {
            memcpy(r + R, dc->idx_key + pos * ID, (size_t)ID * sizeof *r);
            memcpy(r + R + ID, dc->idx_gate + pos * ID, (size_t)ID * sizeof *r);
        }
    }
    if (sel->cache_in)
        tap(s, li, BACKEND_TAP_CACHE_IN, T, sel->cache_in, width);
    tap(s, li, BACKEND_TAP_CACHE, T, rows, width);
    free(rows);
    return 0;
}

/* The tap's router rows: the router's logits and the experts cpu_moe routes to (computed again
 * here, by the same calls, so that cpu_moe stays as it is). */
static int tap_router(const cpu_state *s, cpu_pool *pool, int li, const float *u, int T,
                      const cpu_inputs *in)
{
    const glm_config *c = &s->m->cfg;
    const glm_layer_weights *L = &s->m->w.layers[li];
    int E = c->n_routed_experts, K = c->num_experts_per_tok, rc = -1;
    if (!s->tap.fn || s->coll.all_reduce || !c->moe[li])
        return 0;
    float *logits = malloc((size_t)T * E * sizeof *logits), *cw = malloc((size_t)K * sizeof *cw);
    float *scratch = malloc((size_t)(3 * E + c->n_group) * sizeof *scratch);
    int32_t *chosen = malloc((size_t)T * K * sizeof *chosen);
    int *one = malloc((size_t)K * sizeof *one);
    if (logits && cw && scratch && chosen && one &&
        !cpu_matmul_in(pool, &L->router, u, T, logits, in)) {
        for (int t = 0; t < T; t++) {
            cpu_route(c, logits + (size_t)t * E, L->router_bias, scratch, one, cw);
            for (int k = 0; k < K; k++)
                chosen[(size_t)t * K + k] = one[k];
            qsort(chosen + (size_t)t * K, (size_t)K, sizeof *chosen, cmp_int32);
        }
        tap(s, li, BACKEND_TAP_ROUTER, T, logits, E);
        tap(s, li, BACKEND_TAP_EXPERTS, T, chosen, K);
        rc = 0;
    }
    free(logits);
    free(cw);
    free(scratch);
    free(chosen);
    free(one);
    return rc;
}

static int run_layer(cpu_state *s, cpu_pool *pool, int li, fwd_buf *b, int T, int *sel_cur,
                     const cpu_inputs *in, glm_error *err)
{
    const glm_config *c = &s->m->cfg;
    const glm_layer_weights *L = &s->m->w.layers[li];
    int D = c->hidden_size;
    if (cpu_hc_pre(pool, c, &L->hc_attn_fn, L->hc_attn_base, L->hc_attn_scale, b->X, T, b->post,
                   b->comb, b->c, in))
        return -1;
    for (int t = 0; t < T; t++)
        cpu_rmsnorm(b->u + (size_t)t * D, b->c + (size_t)t * D, L->input_norm, D, c->rms_norm_eps);
    tap(s, li, BACKEND_TAP_ATTN_IN, T, b->u, D);
    int rank = glm_config_rank_of(c, li), rc;
    if (c->attn[li] == GLM_ATTN_KDA) {
        rc = cpu_kda(pool, c, &L->kda, &s->kda[rank], s->n, b->u, T, b->y,
                     s->verifying ? &s->trail[rank] : NULL, in);
    } else {
        /* the selection of layer li-1 is in sel[*sel_cur]; this layer writes the other one */
        int next = 1 - *sel_cur, pools0 = s->dsa[rank].n_pools;
        rc = cpu_dsa(pool, c, &L->dsa, &s->dsa[rank], &s->num, s->n, b->u, T, &b->sel[*sel_cur],
                     &b->sel[next], b->y, in);
        *sel_cur = next;
        if (!rc && L->dsa.has_indexer)
            rc = tap_selection(s, li, &b->sel[next], T);
        if (!rc)
            rc = tap_cache(s, li, &s->dsa[rank], L->dsa.has_indexer, &b->sel[*sel_cur], T);
        const dsa_cache *dc = &s->dsa[rank];
        if (!rc && L->dsa.has_indexer && s->tap.fn && !s->coll.all_reduce && dc->n_pools > pools0)
            s->tap.fn(s->tap.user, li, BACKEND_TAP_POOL_KEY, pools0, dc->n_pools - pools0,
                      dc->pool_key + (size_t)pools0 * c->index_head_dim, c->index_head_dim);
    }
    if (rc)
        return -1;
    tap(s, li, BACKEND_TAP_ATTN, T, b->y, D);
    if ((rc = reduce_partials(s, b, T, err)))
        return rc;
    if (cpu_hc_post(c, b->X, b->y, b->post, b->comb, T))
        return -1;
    if (cpu_hc_pre(pool, c, &L->hc_ffn_fn, L->hc_ffn_base, L->hc_ffn_scale, b->X, T, b->post,
                   b->comb, b->c, in))
        return -1;
    for (int t = 0; t < T; t++)
        cpu_rmsnorm(b->u + (size_t)t * D, b->c + (size_t)t * D, L->post_norm, D, c->rms_norm_eps);
    tap(s, li, BACKEND_TAP_FFN_IN, T, b->u, D);
    if (tap_router(s, pool, li, b->u, T, in))
        return -1;
    rc = c->moe[li] ? cpu_moe(pool, c, L, b->u, T, b->y, in)
                    : cpu_mlp(pool, c, &L->mlp, c->intermediate_size, b->u, T, b->y, in);
    if (rc)
        return -1;
    tap(s, li, BACKEND_TAP_FFN, T, b->y, D);
    if ((rc = reduce_partials(s, b, T, err)))
        return rc;
    if (cpu_hc_post(c, b->X, b->y, b->post, b->comb, T))
        return -1;
    return 0;
}

/* Rank r's share of n vocabulary entries among world ranks (tp_part_of's rule: the first
 * n % world ranks take one more). */
static void vocab_part(size_t n, int rank, int world, size_t *start, size_t *count)
{
    size_t base = n / (size_t)world, extra = n % (size_t)world, r = (size_t)rank;
    *count = base + (r < extra);
    *start = r * base + (r < extra ? r : extra);
}

/* Several ranks: each computes its vocabulary part of rows x[0..T), padded to the largest part so
 * every rank sends as many floats, then the parts are gathered into T full rows. */
static int split_head(cpu_state *s, cpu_pool *pool, const float *x, int T, float *logits,
                      glm_error *err)
{
    int world = s->coll.world ? s->coll.world : 2;
    size_t V = (size_t)s->m->cfg.vocab_size, start, mine_n, widest, ignored;
    vocab_part(V, s->coll.rank, world, &start, &mine_n);
    vocab_part(V, 0, world, &ignored, &widest);
    if ((size_t)s->m->w.lm_head.rows != mine_n) {
        glm_error_set(err, GLM_ERR_ARG, "this rank's LM head has %lld rows, not its %zu of the "
                      "vocabulary's %zu among %d ranks", (long long)s->m->w.lm_head.rows, mine_n, V, world);
        return -2;
    }
    float *part = malloc((size_t)T * mine_n * sizeof *part);
    float *mine = calloc((size_t)T * widest, sizeof *mine);
    float *all = malloc((size_t)world * T * widest * sizeof *all);
    int rc = part && mine && all ? cpu_matmul(pool, &s->m->w.lm_head, x, T, part) : -1;
    for (int t = 0; rc == 0 && t < T; t++)
        memcpy(mine + (size_t)t * widest, part + (size_t)t * mine_n, mine_n * sizeof *mine);
    if (rc == 0 && s->coll.all_gather(s->coll.user, mine, all, (size_t)T * widest, err) != GLM_OK)
        rc = -2;
    for (int r = 0; rc == 0 && r < world; r++) {
        size_t at, n;
        vocab_part(V, r, world, &at, &n);
        for (int t = 0; t < T; t++)
            memcpy(logits + (size_t)t * V + at, all + ((size_t)r * T + t) * widest, n * sizeof *all);
    }
    free(part);
    free(mine);
    free(all);
    return rc;
}

static int head(cpu_state *s, cpu_pool *pool, fwd_buf *b, int T, float *logits, int all_rows,
                const cpu_inputs *in, glm_error *err)
{
    const glm_config *c = &s->m->cfg;
    int D = c->hidden_size, S = c->hc_mult;
    for (int t = 0; t < T; t++) {
        float *h = b->c + (size_t)t * D;
        const float *x = b->X + (size_t)t * S * D;
        for (int d = 0; d < D; d++) {
            float acc = 0;
            for (int k = 0; k < S; k++)
                acc += x[(size_t)k * D + d];
            h[d] = acc / (float)S;
        }
        cpu_rmsnorm(h, h, s->m->w.final_norm, D, c->rms_norm_eps);
    }
    if (!logits)
        return 0;
    if (s->coll.all_gather)
        return all_rows ? split_head(s, pool, b->c, T, logits, err)
                        : split_head(s, pool, b->c + (size_t)(T - 1) * D, 1, logits, err);
    if (all_rows) /* (the one-row head is a GEMV on the CUDA backend too) */
        return cpu_matmul_in(pool, &s->m->w.lm_head, b->c, T, logits, in);
    return cpu_matmul(pool, &s->m->w.lm_head, b->c + (size_t)(T - 1) * D, 1, logits);
}

void cpu_state_set_cancel(cpu_state *s, const atomic_int *flag)
{
    s->cancel = flag;
}

/* Whether to stop before the next layer: a prefill (not a decode step or a verification
 * window, which end soon anyway) whose session was canceled, agreed among the ranks before every
 * layer of a prefill (backend_cancel_agreed); -2 when that exchange failed. */
static int stop_asked(const cpu_state *s, int n, glm_error *err)
{
    if (n <= 1 || s->verifying)
        return 0;
    return backend_cancel_agreed(&s->coll, s->cancel, err);
}

static glm_status forward(cpu_state *s, cpu_pool *pool, const int32_t *tokens, int n,
                          float *logits_out, int all_rows, glm_error *err)
{
    const glm_config *c = &s->m->cfg;
    glm_status st = backend_check_tokens(c, tokens, n, err);
    if (st)
        return st;
    cpu_inputs in = {0, 0};
    if (s->num.one_part && !s->verifying && (s->coll.all_reduce ||
        prefill_gemm_rows(s->n, n, s->num.chunk, 0, &in.r0, &in.r1)))
        return glm_error_set(err, GLM_ERR_ARG, s->coll.all_reduce
                             ? "the one-part products' emulation runs on one rank"
                             : "the one-part products' emulation needs the CUDA prefill chunk "
                               "(cuda_chunk) for a call from position %d, off the 16-token grid",
                             s->n);
    st = cpu_state_reserve(s, s->n + n, err);
    if (st)
        return st;
    fwd_buf b;
    int D = c->hidden_size, S = c->hc_mult, sel_cur = 0;
    /* with a tap, the indexer's scores too: a row for each pool the last token completes */
    int score_width = s->tap.fn && !s->coll.all_reduce ? (s->n + n) / c->index_kpool + 1 : 0;
    if (fwd_buf_new(&b, c, n, score_width)) {
        fwd_buf_free(&b);
        return glm_error_set(err, GLM_ERR_NOMEM, "out of memory running %d tokens", n);
    }
    float *row = malloc((size_t)D * sizeof *row);
    int rc = row ? 0 : -1;
    for (int t = 0; rc == 0 && t < n; t++) {
        const float *e = glm_weight_row(&s->m->w.embed, tokens[t], row);
        for (int k = 0; k < S; k++)
            memcpy(b.X + ((size_t)t * S + k) * D, e, (size_t)D * sizeof *e);
    }
    free(row);
    glm_error peer_err = {0};
    int li = 0;
    for (; rc == 0 && li < c->num_layers; li++) {
        int stop = stop_asked(s, n, &peer_err);
        if (stop) {
            rc = stop > 0 ? -3 : stop;
            break;
        }
        rc = run_layer(s, pool, li, &b, n, &sel_cur, &in, &peer_err);
    }
    if (rc == 0)
        rc = head(s, pool, &b, n, logits_out, all_rows, &in, &peer_err);
    if (rc == 0 && cpu_mtp_on(s))
        rc = cpu_mtp_catch_up(s, pool, tokens, s->n, n, b.c);
    fwd_buf_free(&b);
    if (rc == -2) { /* an exchange failed (or its wait was canceled) with layers half run: the
                     * state must be reset, so no mark describes it (state_mark_length) */
        s->mark_n = -1;
        if (err)
            *err = peer_err;
        return peer_err.status ? peer_err.status : GLM_ERR_PEER;
    }
    if (rc == -3) { /* the layers before li ran: their states go back to a mark made here */
        if (s->mark && s->mark_n == s->n)
            back_to_mark(s, s->n);
        return glm_error_set(err, GLM_ERR_CANCELED, "the prompt was canceled at layer %d of %d",
                             li, c->num_layers);
    }
    if (rc)
        return glm_error_set(err, GLM_ERR_NOMEM, "out of memory in the forward pass over %d tokens",
                             n);
    s->n += n;
    return GLM_OK;
}

glm_status cpu_prefill(cpu_state *s, cpu_pool *pool, const int32_t *tokens, int n, float *logits_out,
                       int all_rows, glm_error *err)
{
    s->trail_n = 0; /* a window kept by cpu_verify ends here */
    return forward(s, pool, tokens, n, logits_out, all_rows, err);
}

/* Room for n positions in every KDA layer's trail. */
static glm_status reserve_trail(cpu_state *s, int n, glm_error *err)
{
    const glm_config *c = &s->m->cfg;
    int nk = glm_config_count(c, GLM_ATTN_KDA);
    if (!s->trail && !(s->trail = calloc((size_t)(nk ? nk : 1), sizeof *s->trail)))
        return glm_error_set(err, GLM_ERR_NOMEM, "out of memory for a verification window");
    if (n <= s->trail_cap)
        return GLM_OK;
    for (int i = 0; i < nk; i++)
        if (grow(&s->trail[i].conv, (size_t)n * conv_floats(c)) ||
            grow(&s->trail[i].S, (size_t)n * rec_floats(c)))
            return glm_error_set(err, GLM_ERR_NOMEM, "out of memory for a verification window of "
                                 "%d tokens", n);
    s->trail_cap = n;
    return GLM_OK;
}

glm_status cpu_verify(cpu_state *s, cpu_pool *pool, const int32_t *tokens, int n, float *logits_all,
                      glm_error *err)
{
    s->trail_n = 0;
    glm_status st = n > 0 ? reserve_trail(s, n, err) : GLM_OK;
    if (st)
        return st;
    int base = s->n;
    s->verifying = 1;
    st = forward(s, pool, tokens, n, logits_all, 1, err);
    s->verifying = 0;
    if (st == GLM_OK) {
        s->trail_base = base;
        s->trail_n = n;
    }
    return st;
}

glm_status cpu_state_rewind(cpu_state *s, int n, glm_error *err)
{
    const glm_config *c = &s->m->cfg;
    if (n == s->n)
        return GLM_OK;
    if (n <= s->trail_base || n > s->trail_base + s->trail_n || n > s->n)
        return glm_error_set(err, GLM_ERR_ARG, "cannot go back to %d tokens: the last verification "
                             "window kept positions %d..%d", n, s->trail_base + 1,
                             s->trail_base + s->trail_n);
    int nk = glm_config_count(c, GLM_ATTN_KDA), nd = glm_config_count(c, GLM_ATTN_DSA);
    size_t at = (size_t)(n - s->trail_base - 1);
    for (int i = 0; i < nk; i++) {
        memcpy(s->kda[i].conv, s->trail[i].conv + at * conv_floats(c),
               conv_floats(c) * sizeof(float));
        memcpy(s->kda[i].S, s->trail[i].S + at * rec_floats(c), rec_floats(c) * sizeof(float));
    }
    for (int i = 0; i < nd; i++)
        if (s->dsa[i].n_pools > n / c->index_kpool)
            s->dsa[i].n_pools = n / c->index_kpool;
    s->n = n;
    cpu_mtp_cut(s, n); /* the window's final-normed rows are kept: h of n-1 is among them */
    return GLM_OK;
}

glm_status cpu_decode(cpu_state *s, cpu_pool *pool, int32_t token, float *logits_out, glm_error *err)
{
    return cpu_prefill(s, pool, &token, 1, logits_out, 0, err);
}
