/* traffic.c: walks one decode step op by op and counts, per rank, the bytes each op moves and the
 * FLOPs of its matrix products, from a config and a weight format or from a model's bound weights.
 *
 * What is counted (per rank; ranks 2 halves what tp_split_model halves, the rest is whole on both):
 *   weights   each matrix an op reads, once a step: dense linears in the dense format (q4: 4-bit
 *             codes + an fp16 scale per group, widths not a multiple of 128 left BF16), the HC fn
 *             matrices, kv_b, the router and the embedding row BF16 (as the published EXL3
 *             checkpoint ships them: the loader never requantizes them), each of the top-k routed experts as EXL3 (bits/8 a value + its fp16
 *             input and output scale vectors). Split: KDA q/k/v/f_b/g_b/beta by heads (rows), its
 *             o by columns; MLA q_b and kv_b by heads (rows), o by columns; every MLP's and
 *             expert's gate/up by rows and down by columns; the LM head by vocabulary rows.
 *   caches    the latent rows the attention reads, min(context, index_topk + index_kpool - 1)
 *             rows of kv_lora_rank values (whole on both ranks: the latent is replicated), and the
 *             pooled indexer keys it scores, floor(context / index_kpool) rows of index_head_dim.
 *   states    the KDA recurrent state (heads x dk x dk f32) and conv window ((K-1) x 3C f32), each
 *             read and written; the conv weights (3C x K f32) read.
 *   streams   the residual streams (hc_mult x hidden f32) for the HC ops and the final norm, which
 *             read nothing else: read by the mix and the collapse, read and written by the update.
 * Activation vectors of a matrix product (a few hidden-widths of floats) are left out: they stay
 * in cache and are 3-4 orders below the weights. */
#include "model/traffic.h"

#include <math.h>
#include <string.h>

/* ---- bytes of one thing ------------------------------------------------------------------- */

double glm_weight_bytes(const glm_weight *w)
{
    double values = (double)w->rows * (double)w->cols;
    if (values <= 0)
        return 0;
    switch (w->kind) {
    case GLM_W_PLAIN:
        return values * (double)st_dtype_size(w->dtype);
    case GLM_W_FP8_BLOCK: {
        double blocks = w->block_rows > 0 && w->block_cols > 0
                            ? (double)((w->rows + w->block_rows - 1) / w->block_rows) *
                                  (double)((w->cols + w->block_cols - 1) / w->block_cols)
                            : 0;
        return values + 4 * blocks;
    }
    case GLM_W_EXL3: {
        const exl3_tensor *t = w->exl3;
        if (!t)
            return 0;
        /* trellis: bits per value; fp16 scale vectors (or sign bits) and the optional bias */
        double b = values * t->bits / 8.0;
        b += t->suh ? 2.0 * t->in : t->in / 8.0;
        b += t->svh ? 2.0 * t->out : t->out / 8.0;
        return b + (t->bias ? 2.0 * t->out : 0);
    }
    }
    return 0;
}

double glm_dense_bytes(double rows, double cols, glm_traffic_dense f)
{
    double n = rows * cols;
    if (f == GLM_TRAFFIC_BF16 || fmod(cols, 128) != 0)
        return 2 * n;
    double group = f == GLM_TRAFFIC_Q4_G32 ? 32 : 64;
    return n / 2 + 2 * n / group;
}

size_t glm_cache_row_bytes(size_t width, glm_cache_format f)
{
    return f == GLM_CACHE_F32 ? width * 4 : f == GLM_CACHE_BF16 ? width * 2 : width + 4;
}

/* An EXL3 matrix of in inputs and out outputs: the trellis and the two fp16 scale vectors. */
static double exl3_bytes(double in, double out, int bits)
{
    return in * out * bits / 8.0 + 2 * in + 2 * out;
}

/* ---- names -------------------------------------------------------------------------------- */

static const char *const op_names[GLM_OP_COUNT] = {
    [GLM_OP_EMBED] = "embedding row",
    [GLM_OP_HC_MIX] = "HC mixing product",
    [GLM_OP_HC_COLLAPSE] = "HC collapse + norm",
    [GLM_OP_HC_UPDATE] = "HC update",
    [GLM_OP_KDA_PROJ] = "KDA q/k/v/f_a/g_a/beta",
    [GLM_OP_KDA_GATES_B] = "KDA f_b/g_b",
    [GLM_OP_KDA_CONV] = "KDA conv (weights, window)",
    [GLM_OP_KDA_STATE] = "KDA state (read+write)",
    [GLM_OP_KDA_O] = "KDA o_proj",
    [GLM_OP_DSA_Q_A] = "DSA q_a",
    [GLM_OP_DSA_Q_B] = "DSA q_b",
    [GLM_OP_DSA_KV_A] = "DSA kv_a",
    [GLM_OP_DSA_KV_B_K] = "DSA kv_b key half",
    [GLM_OP_DSA_KV_B_V] = "DSA kv_b value half",
    [GLM_OP_DSA_O] = "DSA o_proj",
    [GLM_OP_INDEXER_IN] = "indexer wk/gate/weights",
    [GLM_OP_INDEXER_Q] = "indexer wq_b",
    [GLM_OP_INDEXER_SCORE] = "indexer pooled keys",
    [GLM_OP_LATENT] = "latent cache reads",
    [GLM_OP_ROUTER] = "router",
    [GLM_OP_SHARED] = "shared expert",
    [GLM_OP_ROUTED] = "routed experts (top-k)",
    [GLM_OP_DENSE_MLP] = "dense MLP",
    [GLM_OP_FINAL_NORM] = "final norm",
    [GLM_OP_LM_HEAD] = "LM head",
};

const char *glm_traffic_op_name(glm_traffic_op op)
{
    return op >= 0 && op < GLM_OP_COUNT ? op_names[op] : "?";
}

const char *glm_traffic_dense_name(glm_traffic_dense f)
{
    return f == GLM_TRAFFIC_BF16 ? "bf16" : f == GLM_TRAFFIC_Q4_G32 ? "q4/32" : f == GLM_TRAFFIC_Q4_G64 ? "q4/64" : "?";
}

const char *glm_cache_format_name(glm_cache_format f)
{
    return f == GLM_CACHE_F32 ? "f32" : f == GLM_CACHE_BF16 ? "bf16" : f == GLM_CACHE_FP8 ? "fp8" : "?";
}

/* ---- the walk ----------------------------------------------------------------------------- */

/* How a matrix is stored when counted from a format: dense (the dense format applies), kept
 * BF16, or an EXL3 routed expert. */
typedef enum wclass { W_DENSE, W_BF16, W_EXPERT } wclass;
/* How two ranks share it. */
typedef enum wsplit { WHOLE, BY_ROWS, BY_COLS } wsplit;

typedef struct walk {
    const glm_config *c;
    const glm_traffic_params *p;
    int bound;              /* 1: bytes from the bound weights (glm_model_traffic) */
    glm_traffic_table *t;
} walk;

/* Rows a step forwards: 1, or a window's (glm_traffic_params.rows). */
static double nrows(const walk *k)
{
    return k->p->rows > 1 && !k->p->resident ? (double)k->p->rows : 1.0;
}

/* Adds one matrix of rows x cols (the full model's shape) to op, times share (the expected
 * fraction of a step that reads it); w: the bound weight when counting a model. Its bytes once
 * a step, its flops once a row. */
static void mat(walk *k, glm_traffic_op op, const glm_weight *w, double rows, double cols,
                wsplit split, wclass cls, double share)
{
    glm_traffic_row *r = &k->t->op[op];
    if (k->bound) {
        if (!w)
            return;
        r->bytes += share * glm_weight_bytes(w);
        r->flops += share * 2.0 * (double)w->rows * (double)w->cols * nrows(k);
        return;
    }
    if (split == BY_ROWS)
        rows /= k->p->ranks;
    else if (split == BY_COLS)
        cols /= k->p->ranks;
    double b = cls == W_DENSE  ? glm_dense_bytes(rows, cols, k->p->dense)
               : cls == W_BF16 ? 2 * rows * cols
                               : exl3_bytes(cols, rows, k->p->expert_bits);
    r->bytes += share * b;
    r->flops += share * 2.0 * rows * cols * nrows(k);
}

/* A weight vector (norm weights, conv weights, a bias): read by a step and resident. */
static void vec(walk *k, glm_traffic_op op, double bytes)
{
    k->t->op[op].bytes += bytes;
}

/* Bytes that are not weights (caches, states, streams): none when counting what is resident. */
static void mem(walk *k, glm_traffic_op op, double bytes)
{
    if (!k->p->resident)
        k->t->op[op].bytes += bytes;
}

/* Bytes each row of a window moves again (its streams, its states). */
static void mem_rows(walk *k, glm_traffic_op op, double bytes)
{
    mem(k, op, bytes * nrows(k));
}

static void call(walk *k, glm_traffic_op op)
{
    k->t->op[op].calls++;
}

/* The streams a step keeps: hc_mult rows of hidden f32. */
static double streams(const glm_config *c)
{
    return (double)c->hc_mult * c->hidden_size * 4;
}

/* One HC site (before attention or before the FFN): its mix, collapse and norm, and the update
 * after the sublayer. */
static void hc_site(walk *k, const glm_weight *fn)
{
    const glm_config *c = k->c;
    double S = c->hc_mult, D = c->hidden_size, mix = (2 + S) * S;
    call(k, GLM_OP_HC_MIX);
    mat(k, GLM_OP_HC_MIX, fn, mix, S * D, WHOLE, W_BF16, 1);
    mem_rows(k, GLM_OP_HC_MIX, streams(c));
    call(k, GLM_OP_HC_COLLAPSE);
    vec(k, GLM_OP_HC_COLLAPSE, D * 4); /* the site's norm weight */
    mem_rows(k, GLM_OP_HC_COLLAPSE, streams(c));
    call(k, GLM_OP_HC_UPDATE);
    mem_rows(k, GLM_OP_HC_UPDATE, 2 * streams(c) + D * 4);
}

static void kda(walk *k, const glm_kda_weights *w)
{
    const glm_config *c = k->c;
    double D = c->hidden_size, H = c->kda_heads, dk = c->kda_head_dim, C = H * dk;
    double K = c->kda_conv_kernel, Hr = H / k->p->ranks, Cr = Hr * dk;
    if (k->bound) /* a bound model's config is its own rank's */
        Hr = H, Cr = C;
    for (glm_traffic_op op = GLM_OP_KDA_PROJ; op <= GLM_OP_KDA_O; op++)
        call(k, op);
    mat(k, GLM_OP_KDA_PROJ, w ? &w->q_proj : NULL, C, D, BY_ROWS, W_DENSE, 1);
    mat(k, GLM_OP_KDA_PROJ, w ? &w->k_proj : NULL, C, D, BY_ROWS, W_DENSE, 1);
    mat(k, GLM_OP_KDA_PROJ, w ? &w->v_proj : NULL, C, D, BY_ROWS, W_DENSE, 1);
    mat(k, GLM_OP_KDA_PROJ, w ? &w->f_a : NULL, dk, D, WHOLE, W_DENSE, 1);
    mat(k, GLM_OP_KDA_PROJ, w ? &w->g_a : NULL, dk, D, WHOLE, W_DENSE, 1);
    mat(k, GLM_OP_KDA_PROJ, w ? &w->b_proj : NULL, H, D, BY_ROWS, W_DENSE, 1);
    mat(k, GLM_OP_KDA_GATES_B, w ? &w->f_b : NULL, C, dk, BY_ROWS, W_DENSE, 1);
    mat(k, GLM_OP_KDA_GATES_B, w ? &w->g_b : NULL, C, dk, BY_ROWS, W_DENSE, 1);
    mat(k, GLM_OP_KDA_O, w ? &w->o_proj : NULL, D, C, BY_COLS, W_DENSE, 1);
    vec(k, GLM_OP_KDA_CONV, 3 * Cr * K * 4);
    /* the conv window and the recurrent state read once, written after each row */
    double n = nrows(k);
    mem(k, GLM_OP_KDA_CONV, (1 + n) * (K > 0 ? K - 1 : 0) * 3 * Cr * 4);
    mem(k, GLM_OP_KDA_STATE, (1 + n) * Hr * dk * dk * 4);
}

static void dsa(walk *k, const glm_dsa_weights *w, int has_indexer)
{
    const glm_config *c = k->c;
    double D = c->hidden_size, NH = c->num_heads, dn = c->qk_nope_head_dim, dv = c->v_head_dim;
    double R = c->kv_lora_rank, qr = c->q_lora_rank, IH = c->index_n_heads, ID = c->index_head_dim;
    double n = k->p->context, kp = c->index_kpool > 0 ? c->index_kpool : 1;
    for (glm_traffic_op op = GLM_OP_DSA_Q_A; op <= GLM_OP_DSA_O; op++)
        call(k, op);
    call(k, GLM_OP_LATENT);
    mat(k, GLM_OP_DSA_Q_A, w ? &w->q_a : NULL, qr, D, WHOLE, W_DENSE, 1);
    mat(k, GLM_OP_DSA_Q_B, w ? &w->q_b : NULL, NH * dn, qr, BY_ROWS, W_DENSE, 1);
    mat(k, GLM_OP_DSA_KV_A, w ? &w->kv_a : NULL, R, D, WHOLE, W_DENSE, 1);
    /* kv_b is one matrix, read as its key rows by the absorb and its value rows by the
     * expansion: a bound kv_b is shared out by the halves' rows */
    double key = dn / (dn + dv);
    mat(k, GLM_OP_DSA_KV_B_K, w ? &w->kv_b : NULL, NH * dn, R, BY_ROWS, W_BF16, k->bound ? key : 1);
    mat(k, GLM_OP_DSA_KV_B_V, w ? &w->kv_b : NULL, NH * dv, R, BY_ROWS, W_BF16, k->bound ? 1 - key : 1);
    mat(k, GLM_OP_DSA_O, w ? &w->o_proj : NULL, D, NH * dv, BY_COLS, W_DENSE, 1);
    /* a row's selection; a window's rows' selections together: each row's at most, within the
     * context and the window's own rows */
    double sel = fmin(n, (double)c->index_topk + kp - 1), rows = nrows(k);
    if (rows > 1)
        sel = fmin(rows * sel, fmax(sel, n + rows - 1));
    mem(k, GLM_OP_LATENT, sel * (double)glm_cache_row_bytes((size_t)R, k->p->latent_cache));
    if (!has_indexer)
        return;
    call(k, GLM_OP_INDEXER_IN);
    call(k, GLM_OP_INDEXER_Q);
    call(k, GLM_OP_INDEXER_SCORE);
    mat(k, GLM_OP_INDEXER_IN, w ? &w->idx_wk : NULL, ID, D, WHOLE, W_DENSE, 1);
    mat(k, GLM_OP_INDEXER_IN, w ? &w->idx_gate : NULL, ID, D, WHOLE, W_DENSE, 1);
    mat(k, GLM_OP_INDEXER_IN, w ? &w->idx_weights : NULL, IH, D, WHOLE, W_DENSE, 1);
    mat(k, GLM_OP_INDEXER_Q, w ? &w->idx_wq_b : NULL, IH * ID, qr, WHOLE, W_DENSE, 1);
    mem(k, GLM_OP_INDEXER_SCORE,
        floor(n / kp) * (double)glm_cache_row_bytes((size_t)ID, k->p->index_cache));
}

static void mlp(walk *k, glm_traffic_op op, const glm_mlp_weights *w, double inter, wclass cls,
                double share)
{
    double D = k->c->hidden_size;
    mat(k, op, w ? &w->gate : NULL, inter, D, BY_ROWS, cls, share);
    mat(k, op, w ? &w->up : NULL, inter, D, BY_ROWS, cls, share);
    mat(k, op, w ? &w->down : NULL, D, inter, BY_COLS, cls, share);
}

static void ffn(walk *k, int li, const glm_layer_weights *L)
{
    const glm_config *c = k->c;
    double I = c->moe_intermediate_size, E = c->n_routed_experts, K = c->num_experts_per_tok;
    if (!c->moe[li]) {
        call(k, GLM_OP_DENSE_MLP);
        mlp(k, GLM_OP_DENSE_MLP, L ? &L->mlp : NULL, c->intermediate_size, W_DENSE, 1);
        return;
    }
    call(k, GLM_OP_ROUTER);
    mat(k, GLM_OP_ROUTER, L ? &L->router : NULL, E, c->hidden_size, WHOLE, W_BF16, 1);
    vec(k, GLM_OP_ROUTER, E * 4); /* the correction bias */
    if (L ? L->has_shared : c->n_shared_experts > 0) {
        call(k, GLM_OP_SHARED);
        mlp(k, GLM_OP_SHARED, L ? &L->mlp : NULL, I * c->n_shared_experts, W_DENSE, 1);
    }
    call(k, GLM_OP_ROUTED);
    /* the experts the step reads: the top-k of its row, a window's union, or all when resident */
    double read = k->p->resident            ? E
                  : k->p->experts_read > 0 ? fmin(k->p->experts_read, E)
                                           : fmin(K * nrows(k), E);
    if (!L) {
        mlp(k, GLM_OP_ROUTED, NULL, I, W_EXPERT, read);
        return;
    }
    /* bound experts may differ in size: the expected share of each when routing spreads evenly */
    double share = E > 0 ? read / E : 0;
    for (int e = 0; L->experts && e < c->n_routed_experts; e++)
        mlp(k, GLM_OP_ROUTED, &L->experts[e], I, W_EXPERT, share);
}

static void layer(walk *k, int li, const glm_layer_weights *L)
{
    const glm_config *c = k->c;
    hc_site(k, L ? &L->hc_attn_fn : NULL);
    if (c->attn[li] == GLM_ATTN_KDA)
        kda(k, L ? &L->kda : NULL);
    else
        dsa(k, L ? &L->dsa : NULL, L ? L->dsa.has_indexer : !c->indexer_shared[li]);
    hc_site(k, L ? &L->hc_ffn_fn : NULL);
    ffn(k, li, L);
}

static void head(walk *k, const glm_weights *w)
{
    const glm_config *c = k->c;
    double D = c->hidden_size, V = c->vocab_size;
    call(k, GLM_OP_EMBED);
    if (k->bound)
        k->t->op[GLM_OP_EMBED].bytes += w->embed.rows > 0 && !k->p->resident
                                            ? nrows(k) * glm_weight_bytes(&w->embed) / (double)w->embed.rows
                                            : glm_weight_bytes(&w->embed);
    else
        k->t->op[GLM_OP_EMBED].bytes += (k->p->resident ? V : nrows(k)) * D * 2;
    call(k, GLM_OP_FINAL_NORM);
    vec(k, GLM_OP_FINAL_NORM, D * 4);
    mem_rows(k, GLM_OP_FINAL_NORM, streams(c));
    call(k, GLM_OP_LM_HEAD);
    mat(k, GLM_OP_LM_HEAD, w ? &w->lm_head : NULL, V, D, BY_ROWS, W_DENSE, 1);
}

/* ---- entry points ------------------------------------------------------------------------- */

glm_status glm_traffic_check(const glm_config *c, const glm_traffic_params *p, glm_error *err)
{
    if (p->ranks != 1 && p->ranks != 2)
        return glm_error_set(err, GLM_ERR_ARG, "traffic: ranks %d: give 1 or 2", p->ranks);
    if (p->context < 0)
        return glm_error_set(err, GLM_ERR_ARG, "traffic: context %d: give a token count >= 0",
                             p->context);
    if (p->dense < GLM_TRAFFIC_BF16 || p->dense > GLM_TRAFFIC_Q4_G64)
        return glm_error_set(err, GLM_ERR_ARG, "traffic: dense format %d: give bf16, q4/32 or "
                             "q4/64", (int)p->dense);
    if (p->expert_bits < 1 || p->expert_bits > 8)
        return glm_error_set(err, GLM_ERR_ARG, "traffic: expert bits %d: EXL3 takes 1 to 8",
                             p->expert_bits);
    if (p->rows < 0 || p->experts_read < 0 || p->experts_read > c->n_routed_experts)
        return glm_error_set(err, GLM_ERR_ARG, "traffic: a window of %d rows reading %g experts: "
                             "give rows >= 0 and 0 to %d experts", p->rows, p->experts_read,
                             c->n_routed_experts);
    if (p->latent_cache < GLM_CACHE_F32 || p->latent_cache > GLM_CACHE_FP8 ||
        p->index_cache < GLM_CACHE_F32 || p->index_cache > GLM_CACHE_FP8)
        return glm_error_set(err, GLM_ERR_ARG, "traffic: cache formats %d and %d: give f32, bf16 "
                             "or fp8", (int)p->latent_cache, (int)p->index_cache);
    if (p->ranks == 2 && (c->kda_heads % 2 || c->num_heads % 2 || c->intermediate_size % 2 ||
                          c->moe_intermediate_size % 2 || c->vocab_size % 2))
        return glm_error_set(err, GLM_ERR_ARG, "traffic: two ranks halve kda heads %d, attention "
                             "heads %d, intermediate sizes %d and %d and vocab_size %d: all must "
                             "be even", c->kda_heads, c->num_heads, c->intermediate_size,
                             c->moe_intermediate_size, c->vocab_size);
    return GLM_OK;
}

void glm_traffic_layer(const glm_config *c, const glm_traffic_params *p, int li, glm_traffic_table *t)
{
    memset(t, 0, sizeof *t);
    walk k = {.c = c, .p = p, .t = t};
    layer(&k, li, NULL);
}

glm_status glm_traffic_step(const glm_config *c, const glm_traffic_params *p, glm_traffic_table *t,
                            glm_error *err)
{
    memset(t, 0, sizeof *t);
    glm_status st = glm_traffic_check(c, p, err);
    if (st != GLM_OK)
        return st;
    walk k = {.c = c, .p = p, .t = t};
    head(&k, NULL);
    for (int li = 0; li < c->num_layers; li++)
        layer(&k, li, NULL);
    return GLM_OK;
}

void glm_model_traffic(const glm_model *m, int context, glm_cache_format cache, glm_traffic_table *t)
{
    memset(t, 0, sizeof *t);
    glm_traffic_params p = {.ranks = 1, .context = context, .dense = GLM_TRAFFIC_BF16,
                            .expert_bits = 4, .latent_cache = cache, .index_cache = cache};
    walk k = {.c = &m->cfg, .p = &p, .bound = 1, .t = t};
    head(&k, &m->w);
    for (int li = 0; li < m->w.n_layers; li++)
        layer(&k, li, &m->w.layers[li]);
}

double glm_traffic_bytes(const glm_traffic_table *t)
{
    double b = 0;
    for (int i = 0; i < GLM_OP_COUNT; i++)
        b += t->op[i].bytes;
    return b;
}

double glm_traffic_flops(const glm_traffic_table *t)
{
    double f = 0;
    for (int i = 0; i < GLM_OP_COUNT; i++)
        f += t->op[i].flops;
    return f;
}
