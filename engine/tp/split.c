/* split.c: slicing the model's matrices among N ranks: row parts are views into the mapping,
 * column parts are converted copies (the matrices are row-major without a stride); EXL3 parts
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

tp_part tp_part_of(int64_t n, int rank, int world)
{
    tp_part p = {0, 0};
    if (world < 1 || rank < 0 || rank >= world || n < 0)
        return p;
    int64_t base = n / world, extra = n % world;
    p.count = base + (rank < extra ? 1 : 0);
    p.start = rank * base + (rank < extra ? rank : extra);
    return p;
}

/* Rank r's rows (or columns) of a dimension of `total` made of `units` equal groups; refuses a
 * dimension that is not whole groups and a rank left without any. */
static glm_status part_of_dim(const glm_weight *w, const char *dim, int64_t total, int64_t units, int rank,
                              int world, tp_part *p, glm_error *err)
{
    const char *name = w->name ? w->name : "?";
    if (world < 1 || world > TP_SPLIT_MAX_RANKS || rank < 0 || rank >= world)
        return glm_error_set(err, GLM_ERR_ARG, "rank %d of %d: ranks are numbered 0 to %d, at most %d",
                             rank, world, world - 1, TP_SPLIT_MAX_RANKS);
    if (units < 1 || total % units != 0)
        return glm_error_set(err, GLM_ERR_ARG, "tensor %s has %lld %s, not a whole number of its %lld "
                             "groups (heads or features)", name, (long long)total, dim, (long long)units);
    if (units < world) /* refused on every rank alike, not only on those left without any */
        return glm_error_set(err, GLM_ERR_ARG, "tensor %s has %lld %s in %lld groups: it cannot be "
                             "shared among %d ranks (each needs at least one); use at most %lld ranks",
                             name, (long long)total, dim, (long long)units, world, (long long)units);
    tp_part u = tp_part_of(units, rank, world);
    int64_t per = total / units;
    p->start = u.start * per;
    p->count = u.count * per;
    return GLM_OK;
}

glm_status tp_split_rows(const glm_weight *w, int64_t units, int rank, int world, glm_weight *part,
                         glm_error *err)
{
    size_t eb = elem_bytes(w);
    if (w->kind == GLM_W_EXL3 || eb == 0)
        return glm_error_set(err, GLM_ERR_UNSUPPORTED, "tensor %s: this storage type is not split here "
                             "(EXL3 parts come from tp_split_exl3)", w->name ? w->name : "?");
    tp_part p;
    glm_status st = part_of_dim(w, "rows", w->rows, units, rank, world, &p, err);
    if (st != GLM_OK)
        return st;
    *part = *w;
    part->rows = p.count;
    part->data = (const uint8_t *)w->data + (size_t)p.start * (size_t)w->cols * eb;
    if (w->kind == GLM_W_FP8_BLOCK) {
        if (p.start % w->block_rows != 0)
            return glm_error_set(err, GLM_ERR_UNSUPPORTED, "tensor %s: the rank boundary at row %lld cuts "
                                 "an FP8 scale block of %d rows", w->name, (long long)p.start, w->block_rows);
        part->scale = w->scale + (size_t)(p.start / w->block_rows) * (size_t)w->scale_cols;
    }
    return GLM_OK;
}

glm_status tp_split_cols(const glm_weight *w, int64_t units, int rank, int world, glm_weight *part,
                         float **owned, glm_error *err)
{
    *owned = NULL;
    if (w->kind == GLM_W_EXL3 || elem_bytes(w) == 0)
        return glm_error_set(err, GLM_ERR_UNSUPPORTED, "tensor %s: this storage type is not split here "
                             "(EXL3 parts come from tp_split_exl3)", w->name ? w->name : "?");
    tp_part p;
    glm_status st = part_of_dim(w, "columns", w->cols, units, rank, world, &p, err);
    if (st != GLM_OK)
        return st;
    float *out = malloc((size_t)w->rows * (size_t)p.count * sizeof *out);
    float *row = malloc((size_t)w->cols * sizeof *row);
    if (!out || !row) {
        free(out);
        free(row);
        return glm_error_set(err, GLM_ERR_NOMEM, "out of memory splitting tensor %s", w->name ? w->name : "?");
    }
    for (int64_t r = 0; r < w->rows; r++) {
        const float *src = glm_weight_row(w, r, row);
        memcpy(out + (size_t)r * (size_t)p.count, src + p.start, (size_t)p.count * sizeof *out);
    }
    free(row);
    *part = *w;
    part->kind = GLM_W_PLAIN;
    part->dtype = ST_F32;
    part->cols = p.count;
    part->data = out;
    part->scale = NULL;
    *owned = out;
    return GLM_OK;
}

/* ---- EXL3 ---------------------------------------------------------------------------------- */

/* An EXL3 part owns one block: its exl3_tensor followed, for an output part, by the trellis copy. */
typedef struct exl3_part {
    exl3_tensor t;
    uint16_t trellis[];
} exl3_part;

static glm_status exl3_refuse_cut(const glm_weight *w, int by_inputs, int rank, int world, tp_part p,
                                  glm_error *err)
{
    const exl3_tensor *t = w->exl3;
    return glm_error_set(err, GLM_ERR_UNSUPPORTED, "tensor %s: EXL3 weights [%d out, %d in] cannot be "
                         "split among %d ranks by %s: rank %d's %lld from %lld are not whole blocks of "
                         "%d, the EXL3 Hadamard block (choose a number of ranks that gives each whole "
                         "blocks)", w->name ? w->name : "?", t->out, t->in, world,
                         by_inputs ? "inputs" : "outputs", rank, (long long)p.count, (long long)p.start,
                         HADAMARD_BLOCK);
}

glm_status tp_split_exl3(const glm_weight *w, int64_t units, int rank, int world, int by_inputs,
                         glm_weight *part, void **owned, glm_error *err)
{
    *owned = NULL;
    const exl3_tensor *t = w->exl3;
    if (w->kind != GLM_W_EXL3 || !t)
        return glm_error_set(err, GLM_ERR_ARG, "tensor %s is not stored as EXL3", w->name ? w->name : "?");
    tp_part p;
    glm_status st = part_of_dim(w, by_inputs ? "inputs" : "outputs", by_inputs ? t->in : t->out, units,
                                rank, world, &p, err);
    if (st != GLM_OK)
        return st;
    for (int r = 0; r < world; r++) { /* every rank's cut, so all ranks refuse alike */
        tp_part q;
        st = part_of_dim(w, by_inputs ? "inputs" : "outputs", by_inputs ? t->in : t->out, units, r, world,
                         &q, err);
        if (st != GLM_OK)
            return st;
        if (q.start % HADAMARD_BLOCK != 0 || q.count % HADAMARD_BLOCK != 0)
            return exl3_refuse_cut(w, by_inputs, r, world, q, err);
    }
    size_t per_tile = (size_t)EXL3_TILE * (size_t)t->bits, tiles_k = (size_t)t->in / EXL3_TILE;
    size_t tiles_n = (size_t)t->out / EXL3_TILE;
    size_t t0 = (size_t)p.start / EXL3_TILE, tn = (size_t)p.count / EXL3_TILE;
    size_t copied = by_inputs ? 0 : tiles_k * tn * per_tile;
    exl3_part *h = malloc(sizeof *h + copied * sizeof *h->trellis);
    if (!h)
        return glm_error_set(err, GLM_ERR_NOMEM, "out of memory splitting tensor %s", w->name ? w->name : "?");
    h->t = *t;
    if (by_inputs) {
        /* rows tk of the trellis are the inputs: rank r's part is a contiguous view */
        h->t.in = (int)p.count;
        h->t.trellis = t->trellis + t0 * tiles_n * per_tile;
        h->t.suh = t->suh ? t->suh + (size_t)p.start : NULL;
        h->t.su = t->su ? t->su + (size_t)p.start / 16 : NULL;
        h->t.bias = rank == 0 ? t->bias : NULL; /* the partials are summed: one rank adds the bias */
    } else {
        /* each trellis row holds every output tile column: copy rank r's columns of each row */
        h->t.out = (int)p.count;
        for (size_t tk = 0; tk < tiles_k; tk++)
            memcpy(h->trellis + tk * tn * per_tile, t->trellis + (tk * tiles_n + t0) * per_tile,
                   tn * per_tile * sizeof *h->trellis);
        h->t.trellis = h->trellis;
        h->t.svh = t->svh ? t->svh + (size_t)p.start : NULL;
        h->t.sv = t->sv ? t->sv + (size_t)p.start / 16 : NULL;
        h->t.bias = t->bias ? t->bias + (size_t)p.start : NULL;
    }
    *part = *w;
    part->rows = h->t.out;
    part->cols = h->t.in;
    part->data = h->t.trellis;
    part->exl3 = &h->t;
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

static glm_status exl3_in_place(glm_weight *w, int64_t units, int rank, int world, int by_inputs,
                                tp_split_owned *o, glm_error *err)
{
    glm_weight part;
    void *buf;
    glm_status st = tp_split_exl3(w, units, rank, world, by_inputs, &part, &buf, err);
    if (st == GLM_OK && (st = keep(o, buf, err)) == GLM_OK)
        *w = part;
    return st;
}

static glm_status rows_in_place(glm_weight *w, int64_t units, int rank, int world, tp_split_owned *o,
                                glm_error *err)
{
    if (w->kind == GLM_W_EXL3)
        return exl3_in_place(w, units, rank, world, 0, o, err);
    glm_weight part;
    glm_status st = tp_split_rows(w, units, rank, world, &part, err);
    if (st == GLM_OK)
        *w = part;
    return st;
}

static glm_status cols_in_place(glm_weight *w, int64_t units, int rank, int world, tp_split_owned *o,
                                glm_error *err)
{
    if (w->kind == GLM_W_EXL3)
        return exl3_in_place(w, units, rank, world, 1, o, err);
    glm_weight part;
    float *buf;
    glm_status st = tp_split_cols(w, units, rank, world, &part, &buf, err);
    if (st == GLM_OK && (st = keep(o, buf, err)) == GLM_OK)
        *w = part;
    return st;
}

glm_status tp_split_mlp(glm_mlp_weights *w, int64_t units, int rank, int world, tp_split_owned *o,
                        glm_error *err)
{
    glm_status st = rows_in_place(&w->gate, units, rank, world, o, err);
    if (st == GLM_OK)
        st = rows_in_place(&w->up, units, rank, world, o, err);
    if (st == GLM_OK)
        st = cols_in_place(&w->down, units, rank, world, o, err);
    return st;
}

/* KDA: channel c = head * dk + d; rank r keeps its part of the heads (tp_part_of). */
static glm_status split_kda(glm_kda_weights *w, const glm_config *c, int rank, int world, tp_split_owned *o,
                            glm_error *err)
{
    int64_t H = c->kda_heads;
    tp_part heads = tp_part_of(H, rank, world);
    size_t h0 = (size_t)heads.start, c0 = h0 * (size_t)c->kda_head_dim;
    glm_weight *rows[] = {&w->q_proj, &w->k_proj, &w->v_proj, &w->f_b, &w->b_proj, &w->g_b};
    glm_status st = GLM_OK;
    for (size_t i = 0; st == GLM_OK && i < sizeof rows / sizeof *rows; i++)
        st = rows_in_place(rows[i], H, rank, world, o, err);
    if (st == GLM_OK)
        st = cols_in_place(&w->o_proj, H, rank, world, o, err);
    size_t K = (size_t)c->kda_conv_kernel;
    w->q_conv += c0 * K;
    w->k_conv += c0 * K;
    w->v_conv += c0 * K;
    w->A_log += h0;
    w->dt_bias += c0;
    return st;
}

/* MLA: q_b rows are head-major (H x dn), kv_b rows head-major (H x (dn + dv)), o_proj columns
 * head-major (H x dv); every part is whole heads. */
static glm_status split_dsa(glm_dsa_weights *w, const glm_config *c, int rank, int world, tp_split_owned *o,
                            glm_error *err)
{
    int64_t H = c->num_heads;
    glm_status st = rows_in_place(&w->q_b, H, rank, world, o, err);
    if (st == GLM_OK)
        st = rows_in_place(&w->kv_b, H, rank, world, o, err);
    if (st == GLM_OK)
        st = cols_in_place(&w->o_proj, H, rank, world, o, err);
    return st;
}

static glm_status split_layer(glm_model *m, int li, int rank, int world, tp_split_owned *o, glm_error *err)
{
    const glm_config *c = &m->cfg;
    glm_layer_weights *L = &m->w.layers[li];
    glm_status st = c->attn[li] == GLM_ATTN_KDA ? split_kda(&L->kda, c, rank, world, o, err)
                                                 : split_dsa(&L->dsa, c, rank, world, o, err);
    /* a shared expert is n_shared experts' features side by side: its units are the routed
     * expert's features, so each rank's width is n_shared times its routed part */
    if (st == GLM_OK && !c->moe[li])
        st = tp_split_mlp(&L->mlp, c->intermediate_size, rank, world, o, err);
    else if (st == GLM_OK && L->has_shared)
        st = tp_split_mlp(&L->mlp, c->moe_intermediate_size, rank, world, o, err);
    for (int e = 0; st == GLM_OK && c->moe[li] && e < c->n_routed_experts; e++)
        st = tp_split_mlp(&L->experts[e], c->moe_intermediate_size, rank, world, o, err);
    return st;
}

/* Every dimension the split shares must give each rank at least one unit. */
static glm_status check_shareable(const glm_model *m, int world, glm_error *err)
{
    const glm_config *c = &m->cfg;
    struct { const char *field; int64_t n; } dims[] = {
        {"linear_num_heads (KDA heads)", glm_config_count(c, GLM_ATTN_KDA) ? c->kda_heads : world},
        {"num_attention_heads", glm_config_count(c, GLM_ATTN_DSA) ? c->num_heads : world},
        {"intermediate_size", c->intermediate_size},
        {"moe_intermediate_size", c->n_routed_experts > 0 ? c->moe_intermediate_size : world},
        {"vocab_size", c->vocab_size},
    };
    for (size_t i = 0; i < sizeof dims / sizeof *dims; i++)
        if (dims[i].n < world)
            return glm_error_set(err, GLM_ERR_UNSUPPORTED, "%s/config.json: %s is %lld, fewer than the %d "
                                 "ranks sharing it (each rank needs at least one); use at most %lld ranks",
                                 m->dir, dims[i].field, (long long)dims[i].n, world, (long long)dims[i].n);
    return GLM_OK;
}

glm_status tp_split_model_ranks(glm_model *m, int rank, int world, tp_split_owned *owned, glm_error *err)
{
    glm_config *c = &m->cfg;
    memset(owned, 0, sizeof *owned);
    if (world < 2 || world > TP_SPLIT_MAX_RANKS || rank < 0 || rank >= world)
        return glm_error_set(err, GLM_ERR_ARG, "rank %d of %d: a split has 2 to %d ranks, numbered from 0",
                             rank, world, TP_SPLIT_MAX_RANKS);
    glm_status st = check_shareable(m, world, err);
    for (int li = 0; st == GLM_OK && li < c->num_layers; li++)
        st = split_layer(m, li, rank, world, owned, err);
    if (st == GLM_OK)
        st = rows_in_place(&m->w.lm_head, c->vocab_size, rank, world, owned, err);
    if (st != GLM_OK) {
        tp_split_owned_free(owned);
        return st;
    }
    c->kda_heads = (int)tp_part_of(c->kda_heads, rank, world).count;
    c->num_heads = (int)tp_part_of(c->num_heads, rank, world).count;
    c->intermediate_size = (int)tp_part_of(c->intermediate_size, rank, world).count;
    c->moe_intermediate_size = (int)tp_part_of(c->moe_intermediate_size, rank, world).count;
    return GLM_OK;
}

glm_status tp_split_model(glm_model *m, int rank, tp_split_owned *owned, glm_error *err)
{
    return tp_split_model_ranks(m, rank, 2, owned, err);
}
