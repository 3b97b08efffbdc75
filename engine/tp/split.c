/* split.c: slicing the model's matrices between two ranks: row halves are views into the mapping,
 * column halves are converted copies (the matrices are row-major without a stride); EXL3 halves
 * are whole 128-wide Hadamard blocks of the trellis. */
#include <stdlib.h>
#include <string.h>

#include "tp/split.h"

#include "model/hadamard.h"

static size_t elem_bytes(const glm_weight *w)
{
    switch (w->dtype) {
    case ST_F32: return 4;
    case ST_BF16:
    case ST_F16: return 2;
    case ST_F8_E4M3: return 1;
    default: return 0;
    }
}

glm_status tp_split_rows(const glm_weight *w, int rank, glm_weight *half, glm_error *err)
{
    size_t eb = elem_bytes(w);
    if (w->kind == GLM_W_EXL3 || eb == 0)
        return glm_error_set(err, GLM_ERR_UNSUPPORTED, "tensor %s: this storage type is not split here "
                             "(EXL3 halves come from tp_split_exl3)", w->name ? w->name : "?");
    if (rank < 0 || rank > 1 || w->rows % 2 != 0)
        return glm_error_set(err, GLM_ERR_ARG, "tensor %s has %lld rows: it cannot be halved between two ranks",
                             w->name ? w->name : "?", (long long)w->rows);
    int64_t r0 = rank * (w->rows / 2);
    *half = *w;
    half->rows = w->rows / 2;
    half->data = (const uint8_t *)w->data + (size_t)r0 * (size_t)w->cols * eb;
    if (w->kind == GLM_W_FP8_BLOCK) {
        if (r0 % w->block_rows != 0)
            return glm_error_set(err, GLM_ERR_UNSUPPORTED, "tensor %s: the rank boundary at row %lld cuts "
                                 "an FP8 scale block of %d rows", w->name, (long long)r0, w->block_rows);
        half->scale = w->scale + (size_t)(r0 / w->block_rows) * (size_t)w->scale_cols;
    }
    return GLM_OK;
}

glm_status tp_split_cols(const glm_weight *w, int rank, glm_weight *half, float **owned, glm_error *err)
{
    *owned = NULL;
    if (w->kind == GLM_W_EXL3 || elem_bytes(w) == 0)
        return glm_error_set(err, GLM_ERR_UNSUPPORTED, "tensor %s: this storage type is not split here "
                             "(EXL3 halves come from tp_split_exl3)", w->name ? w->name : "?");
    if (rank < 0 || rank > 1 || w->cols % 2 != 0)
        return glm_error_set(err, GLM_ERR_ARG, "tensor %s has %lld columns: it cannot be halved between two ranks",
                             w->name ? w->name : "?", (long long)w->cols);
    int64_t hc = w->cols / 2, c0 = rank * hc;
    float *out = malloc((size_t)w->rows * (size_t)hc * sizeof *out);
    float *row = malloc((size_t)w->cols * sizeof *row);
    if (!out || !row) {
        free(out);
        free(row);
        return glm_error_set(err, GLM_ERR_NOMEM, "out of memory splitting tensor %s", w->name ? w->name : "?");
    }
    for (int64_t r = 0; r < w->rows; r++) {
        const float *src = glm_weight_row(w, r, row);
        memcpy(out + (size_t)r * (size_t)hc, src + c0, (size_t)hc * sizeof *out);
    }
    free(row);
    *half = *w;
    half->kind = GLM_W_PLAIN;
    half->dtype = ST_F32;
    half->cols = hc;
    half->data = out;
    half->scale = NULL;
    *owned = out;
    return GLM_OK;
}

/* ---- EXL3 ---------------------------------------------------------------------------------- */

/* An EXL3 half owns one block: its exl3_tensor followed, for an output half, by the trellis copy. */
typedef struct exl3_half {
    exl3_tensor t;
    uint16_t trellis[];
} exl3_half;

static glm_status exl3_refuse_cut(const glm_weight *w, int by_inputs, glm_error *err)
{
    const exl3_tensor *t = w->exl3;
    int n = by_inputs ? t->in : t->out;
    return glm_error_set(err, GLM_ERR_UNSUPPORTED, "tensor %s: EXL3 weights [%d out, %d in] cannot be "
                         "split between two ranks by %s: each rank's %d is not a multiple of %d, the "
                         "EXL3 Hadamard block (the model needs that dimension a multiple of %d to run "
                         "on two ranks)", w->name ? w->name : "?", t->out, t->in,
                         by_inputs ? "inputs" : "outputs", n / 2, HADAMARD_BLOCK, 2 * HADAMARD_BLOCK);
}

glm_status tp_split_exl3(const glm_weight *w, int rank, int by_inputs, glm_weight *half, void **owned,
                         glm_error *err)
{
    *owned = NULL;
    const exl3_tensor *t = w->exl3;
    if (w->kind != GLM_W_EXL3 || !t)
        return glm_error_set(err, GLM_ERR_ARG, "tensor %s is not stored as EXL3", w->name ? w->name : "?");
    if (rank < 0 || rank > 1)
        return glm_error_set(err, GLM_ERR_ARG, "rank %d: two ranks are numbered 0 and 1", rank);
    int n = by_inputs ? t->in : t->out;
    if (n % (2 * HADAMARD_BLOCK) != 0)
        return exl3_refuse_cut(w, by_inputs, err);
    size_t per_tile = (size_t)EXL3_TILE * (size_t)t->bits, tiles_k = (size_t)t->in / EXL3_TILE;
    size_t tiles_n = (size_t)t->out / EXL3_TILE, hk = tiles_k / 2, hn = tiles_n / 2;
    size_t copied = by_inputs ? 0 : tiles_k * hn * per_tile;
    exl3_half *h = malloc(sizeof *h + copied * sizeof *h->trellis);
    if (!h)
        return glm_error_set(err, GLM_ERR_NOMEM, "out of memory splitting tensor %s", w->name ? w->name : "?");
    h->t = *t;
    if (by_inputs) {
        /* rows tk of the trellis are the inputs: rank r's half is a contiguous view */
        h->t.in = t->in / 2;
        h->t.trellis = t->trellis + (size_t)rank * hk * tiles_n * per_tile;
        h->t.suh = t->suh ? t->suh + (size_t)rank * (size_t)h->t.in : NULL;
        h->t.su = t->su ? t->su + (size_t)rank * (size_t)h->t.in / 16 : NULL;
        h->t.bias = rank == 0 ? t->bias : NULL; /* the partials are summed: one rank adds the bias */
    } else {
        /* each trellis row holds every output tile column: copy rank r's half of each row */
        h->t.out = t->out / 2;
        for (size_t tk = 0; tk < tiles_k; tk++)
            memcpy(h->trellis + tk * hn * per_tile, t->trellis + (tk * tiles_n + (size_t)rank * hn) * per_tile,
                   hn * per_tile * sizeof *h->trellis);
        h->t.trellis = h->trellis;
        h->t.svh = t->svh ? t->svh + (size_t)rank * (size_t)h->t.out : NULL;
        h->t.sv = t->sv ? t->sv + (size_t)rank * (size_t)h->t.out / 16 : NULL;
        h->t.bias = t->bias ? t->bias + (size_t)rank * (size_t)h->t.out : NULL;
    }
    *half = *w;
    half->rows = h->t.out;
    half->cols = h->t.in;
    half->data = h->t.trellis;
    half->exl3 = &h->t;
    *owned = h;
    return GLM_OK;
}

/* ---- what a split model owns ------------------------------------------------------------------ */

void tp_split_owned_free(tp_split_owned *o)
{
    for (int i = 0; o && i < o->n; i++)
        free(o->bufs[i]);
    if (o) {
        free(o->bufs);
        memset(o, 0, sizeof *o);
    }
}

static glm_status keep(tp_split_owned *o, void *buf, glm_error *err)
{
    if (o->n == o->cap) {
        int cap = o->cap ? 2 * o->cap : 64;
        void **b = realloc(o->bufs, (size_t)cap * sizeof *b);
        if (!b) {
            free(buf);
            return glm_error_set(err, GLM_ERR_NOMEM, "out of memory splitting the model");
        }
        o->bufs = b;
        o->cap = cap;
    }
    o->bufs[o->n++] = buf;
    return GLM_OK;
}

static glm_status exl3_in_place(glm_weight *w, int rank, int by_inputs, tp_split_owned *o, glm_error *err)
{
    glm_weight half;
    void *buf;
    glm_status st = tp_split_exl3(w, rank, by_inputs, &half, &buf, err);
    if (st == GLM_OK && (st = keep(o, buf, err)) == GLM_OK)
        *w = half;
    return st;
}

static glm_status rows_in_place(glm_weight *w, int rank, tp_split_owned *o, glm_error *err)
{
    if (w->kind == GLM_W_EXL3)
        return exl3_in_place(w, rank, 0, o, err);
    glm_weight half;
    glm_status st = tp_split_rows(w, rank, &half, err);
    if (st == GLM_OK)
        *w = half;
    return st;
}

static glm_status cols_in_place(glm_weight *w, int rank, tp_split_owned *o, glm_error *err)
{
    if (w->kind == GLM_W_EXL3)
        return exl3_in_place(w, rank, 1, o, err);
    glm_weight half;
    float *buf;
    glm_status st = tp_split_cols(w, rank, &half, &buf, err);
    if (st == GLM_OK && (st = keep(o, buf, err)) == GLM_OK)
        *w = half;
    return st;
}

glm_status tp_split_mlp(glm_mlp_weights *w, int rank, tp_split_owned *o, glm_error *err)
{
    glm_status st = rows_in_place(&w->gate, rank, o, err);
    if (st == GLM_OK)
        st = rows_in_place(&w->up, rank, o, err);
    if (st == GLM_OK)
        st = cols_in_place(&w->down, rank, o, err);
    return st;
}

/* KDA: channel c = head * dk + d; rank r keeps heads [r H/2, (r+1) H/2). */
static glm_status split_kda(glm_kda_weights *w, const glm_config *c, int rank, tp_split_owned *o,
                            glm_error *err)
{
    size_t Hh = (size_t)c->kda_heads / 2, Ch = Hh * (size_t)c->kda_head_dim;
    glm_weight *rows[] = {&w->q_proj, &w->k_proj, &w->v_proj, &w->f_b, &w->b_proj, &w->g_b};
    glm_status st = GLM_OK;
    for (size_t i = 0; st == GLM_OK && i < sizeof rows / sizeof *rows; i++)
        st = rows_in_place(rows[i], rank, o, err);
    if (st == GLM_OK)
        st = cols_in_place(&w->o_proj, rank, o, err);
    size_t K = (size_t)c->kda_conv_kernel;
    w->q_conv += rank * Ch * K;
    w->k_conv += rank * Ch * K;
    w->v_conv += rank * Ch * K;
    w->A_log += rank * Hh;
    w->dt_bias += rank * Ch;
    return st;
}

/* MLA: q_b rows are head-major (H x dn), kv_b rows head-major (H x (dn + dv)), o_proj columns
 * head-major (H x dv); every half is whole heads. */
static glm_status split_dsa(glm_dsa_weights *w, int rank, tp_split_owned *o, glm_error *err)
{
    glm_status st = rows_in_place(&w->q_b, rank, o, err);
    if (st == GLM_OK)
        st = rows_in_place(&w->kv_b, rank, o, err);
    if (st == GLM_OK)
        st = cols_in_place(&w->o_proj, rank, o, err);
    return st;
}

static glm_status split_layer(glm_model *m, int li, int rank, tp_split_owned *o, glm_error *err)
{
    const glm_config *c = &m->cfg;
    glm_layer_weights *L = &m->w.layers[li];
    glm_status st = c->attn[li] == GLM_ATTN_KDA ? split_kda(&L->kda, c, rank, o, err)
                                                 : split_dsa(&L->dsa, rank, o, err);
    if (st == GLM_OK && (!c->moe[li] || L->has_shared))
        st = tp_split_mlp(&L->mlp, rank, o, err);
    for (int e = 0; st == GLM_OK && c->moe[li] && e < c->n_routed_experts; e++)
        st = tp_split_mlp(&L->experts[e], rank, o, err);
    return st;
}

glm_status tp_split_model(glm_model *m, int rank, tp_split_owned *owned, glm_error *err)
{
    glm_config *c = &m->cfg;
    memset(owned, 0, sizeof *owned);
    if (rank < 0 || rank > 1)
        return glm_error_set(err, GLM_ERR_ARG, "rank %d: two ranks are numbered 0 and 1", rank);
    if (c->kda_heads % 2 || c->num_heads % 2 || c->intermediate_size % 2 ||
        c->moe_intermediate_size % 2 || c->vocab_size % 2)
        return glm_error_set(err, GLM_ERR_UNSUPPORTED, "%s/config.json: kda heads %d, attention heads "
                             "%d, intermediate sizes %d and %d and vocab_size %d must all be even to "
                             "split the model between two ranks", m->dir, c->kda_heads, c->num_heads,
                             c->intermediate_size, c->moe_intermediate_size, c->vocab_size);
    glm_status st = GLM_OK;
    for (int li = 0; st == GLM_OK && li < c->num_layers; li++)
        st = split_layer(m, li, rank, owned, err);
    if (st == GLM_OK)
        st = rows_in_place(&m->w.lm_head, rank, owned, err);
    if (st != GLM_OK) {
        tp_split_owned_free(owned);
        return st;
    }
    c->kda_heads /= 2;
    c->num_heads /= 2;
    c->intermediate_size /= 2;
    c->moe_intermediate_size /= 2;
    return GLM_OK;
}
