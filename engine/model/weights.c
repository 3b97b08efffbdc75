/* weights.c: binds checkpoint tensors (model.language_model.layers.N...) to glm_weights with
 * shape checks; FP8 block scales found beside their weights; EXL3 modules by their trellis. */
#include "model/weights.h"

#include "model/exl3_load.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct bctx {
    glm_weights *w;
    const glm_config *c;
    const st_model *m;
    const char *where;
    const char *prefix; /* "model.language_model." or "model." */
    glm_error *err;
    glm_required_list *list; /* listing mode: record what would be bound, read nothing */
} bctx;

/* Listing mode: appends one required tensor; the layer is read from its name. */
static glm_status note(bctx *b, const char *name, glm_tensor_role role, int ndim,
                       const int64_t *shape)
{
    glm_required_list *l = b->list;
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 256;
        glm_required_tensor *n = realloc(l->t, cap * sizeof *n);
        if (!n)
            return glm_error_set(b->err, GLM_ERR_NOMEM, "out of memory listing tensors");
        l->t = n;
        l->cap = cap;
    }
    glm_required_tensor *t = &l->t[l->n++];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    const char *at = strstr(name, "layers.");
    t->layer = at ? atoi(at + 7) : -1;
    t->role = role;
    t->dtypes = glm_tensor_role_dtypes(role);
    t->ndim = ndim;
    for (int i = 0; i < ndim && i < 3; i++)
        t->shape[i] = shape[i];
    return GLM_OK;
}

const char *glm_tensor_role_dtypes(glm_tensor_role role)
{
    return role == GLM_TENSOR_MATRIX ? "F32|BF16|F16|F8_E4M3 with <name>_scale_inv|EXL3 "
                                       "(<module>.trellis, .suh, .svh, codebook marker)"
                                     : "F32|BF16|F16";
}

static void shape_str(char *buf, size_t n, int ndim, const int64_t *shape)
{
    size_t o = 0;
    o += (size_t)snprintf(buf + o, n - o, "[");
    for (int i = 0; i < ndim && o < n; i++)
        o += (size_t)snprintf(buf + o, n - o, "%s%" PRId64, i ? ", " : "", shape[i]);
    if (o < n)
        snprintf(buf + o, n - o, "]");
}

static glm_status missing(bctx *b, const char *name)
{
    if (exl3_is_stored(b->m, name))
        return glm_error_set(b->err, GLM_ERR_UNSUPPORTED, "%s: tensor %s is stored as EXL3, which "
                             "glmchat reads only for weight matrices", b->where, name);
    return glm_error_set(b->err, GLM_ERR_FORMAT, "%s: tensor %s is missing (config.json needs it); "
                         "the checkpoint is incomplete or does not match its config", b->where, name);
}

static glm_status check_shape(bctx *b, const st_tensor *t, int ndim, const int64_t *shape)
{
    int ok = t->ndim == ndim;
    for (int i = 0; ok && i < ndim; i++)
        ok = t->shape[i] == shape[i];
    if (ok)
        return GLM_OK;
    char got[128], want[128];
    shape_str(got, sizeof got, t->ndim, t->shape);
    shape_str(want, sizeof want, ndim, shape);
    return glm_error_set(b->err, GLM_ERR_FORMAT, "%s: tensor %s has shape %s, but config.json "
                         "implies %s (the config contradicts the weights)", t->file, t->name, got,
                         want);
}

static glm_status own(bctx *b, void *p)
{
    glm_weights *w = b->w;
    if (w->n_owned == w->cap_owned) {
        int cap = w->cap_owned ? w->cap_owned * 2 : 64;
        void **n = realloc(w->owned, (size_t)cap * sizeof *n);
        if (!n) {
            free(p);
            return glm_error_set(b->err, GLM_ERR_NOMEM, "out of memory binding weights");
        }
        w->owned = n;
        w->cap_owned = cap;
    }
    w->owned[w->n_owned++] = p;
    return GLM_OK;
}

/* A float32 view of a small tensor: the map itself for F32, else an owned converted copy. */
static glm_status float_view(bctx *b, const st_tensor *t, const float **out)
{
    if (t->dtype == ST_F32) {
        *out = t->data;
        return GLM_OK;
    }
    if (t->dtype == ST_F8_E4M3)
        return glm_error_set(b->err, GLM_ERR_UNSUPPORTED, "%s: tensor %s is FP8, but glmchat reads "
                             "FP8 only for weight matrices with block scales", t->file, t->name);
    size_t n = (size_t)st_numel(t);
    float *f = malloc((n ? n : 1) * sizeof *f);
    if (!f)
        return glm_error_set(b->err, GLM_ERR_NOMEM, "out of memory binding %s", t->name);
    if (st_to_f32(t->dtype, t->data, 0, n, f) != 0) {
        free(f);
        return glm_error_set(b->err, GLM_ERR_UNSUPPORTED, "%s: tensor %s has dtype %s, which is "
                             "not a float type", t->file, t->name, st_dtype_name(t->dtype));
    }
    *out = f;
    return own(b, f);
}

static glm_status bind_vec(bctx *b, const float **out, const char *name, int ndim,
                           const int64_t *shape)
{
    if (b->list)
        return note(b, name, GLM_TENSOR_VECTOR, ndim, shape);
    const st_tensor *t = st_find(b->m, name);
    if (!t)
        return missing(b, name);
    glm_status st = check_shape(b, t, ndim, shape);
    return st ? st : float_view(b, t, out);
}

static glm_status bind_fp8_scale(bctx *b, glm_weight *out, const st_tensor *t)
{
    char sname[512]; /* X.weight -> X.weight_scale_inv, as the FP8 release names them */
    snprintf(sname, sizeof sname, "%s_scale_inv", t->name);
    const st_tensor *s = st_find(b->m, sname);
    if (!s)
        return glm_error_set(b->err, GLM_ERR_FORMAT, "%s: FP8 tensor %s has no block scales: "
                             "%s is missing (an F8_E4M3 weight needs its F32 scale_inv)",
                             t->file, t->name, sname);
    int br = b->c->fp8_block_rows ? b->c->fp8_block_rows : 128;
    int bc = b->c->fp8_block_cols ? b->c->fp8_block_cols : 128;
    int64_t shape[2] = {(out->rows + br - 1) / br, (out->cols + bc - 1) / bc};
    glm_status st = check_shape(b, s, 2, shape);
    if (st)
        return st;
    /* e4m3fn has no infinities; S.1111.111 is its only NaN, which no weight may be */
    const uint8_t *v = t->data;
    for (int64_t i = 0; i < out->rows * out->cols; i++)
        if ((v[i] & 0x7f) == 0x7f)
            return glm_error_set(b->err, GLM_ERR_FORMAT, "%s: FP8 tensor %s holds NaN (byte 0x%02x) "
                                 "at [%" PRId64 ", %" PRId64 "]; the checkpoint is damaged",
                                 t->file, t->name, v[i], i / out->cols, i % out->cols);
    out->kind = GLM_W_FP8_BLOCK;
    out->block_rows = br;
    out->block_cols = bc;
    out->scale_cols = shape[1];
    if ((st = float_view(b, s, &out->scale)))
        return st;
    for (int64_t i = 0; i < shape[0] * shape[1]; i++)
        if (!isfinite(out->scale[i]))
            return glm_error_set(b->err, GLM_ERR_FORMAT, "%s: block scale %s holds %g at [%" PRId64
                                 ", %" PRId64 "]; the checkpoint is damaged", s->file, s->name,
                                 (double)out->scale[i], i / shape[1], i % shape[1]);
    return GLM_OK;
}

/* The file that holds an EXL3 module (its trellis), for messages. */
static const char *exl3_file(const st_model *m, const char *name, char *buf, size_t n)
{
    size_t len = strlen(name);
    if (len > 7 && strcmp(name + len - 7, ".weight") == 0)
        len -= 7;
    snprintf(buf, n, "%.*s.trellis", (int)len, name);
    const st_tensor *t = st_find(m, buf);
    return t ? t->file : "?";
}

/* An EXL3 module bound in place: its tensors stay in the map, products go through exl3_matmul. */
static glm_status bind_exl3(bctx *b, glm_weight *out, const char *name, int64_t rows, int64_t cols)
{
    char tname[512];
    const char *file = exl3_file(b->m, name, tname, sizeof tname);
    exl3_tensor *x = malloc(sizeof *x);
    if (!x)
        return glm_error_set(b->err, GLM_ERR_NOMEM, "out of memory binding %s", name);
    glm_error e = {0};
    glm_status st = exl3_load_codebook(b->m, name, b->c->exl3_codebook, x, &e);
    if (st) {
        free(x);
        return glm_error_set(b->err, st, "%s: %s", file, e.message);
    }
    if (x->out != rows || x->in != cols) {
        glm_error_set(b->err, GLM_ERR_FORMAT, "%s: EXL3 tensor %s holds [%d, %d] (out, in) weights, "
                      "but config.json implies [%" PRId64 ", %" PRId64 "] (the config contradicts "
                      "the weights)", file, tname, x->out, x->in, rows, cols);
        free(x);
        return GLM_ERR_FORMAT;
    }
    if ((st = own(b, x)))
        return st;
    memset(out, 0, sizeof *out);
    out->name = st_find(b->m, tname)->name;
    out->file = file;
    out->kind = GLM_W_EXL3;
    out->dtype = ST_I16;
    out->rows = rows;
    out->cols = cols;
    out->data = x->trellis;
    out->exl3 = x;
    return GLM_OK;
}

static glm_status bind_mat(bctx *b, glm_weight *out, const char *name, int64_t rows, int64_t cols)
{
    if (b->list) {
        int64_t shape[2] = {rows, cols};
        memset(out, 0, sizeof *out);
        return note(b, name, GLM_TENSOR_MATRIX, 2, shape);
    }
    const st_tensor *t = st_find(b->m, name);
    if (!t && exl3_is_stored(b->m, name))
        return bind_exl3(b, out, name, rows, cols);
    if (!t)
        return missing(b, name);
    int64_t shape[2] = {rows, cols};
    glm_status st = check_shape(b, t, 2, shape);
    if (st)
        return st;
    memset(out, 0, sizeof *out);
    out->name = t->name;
    out->file = t->file;
    out->dtype = t->dtype;
    out->rows = rows;
    out->cols = cols;
    out->data = t->data;
    out->kind = GLM_W_PLAIN;
    if (t->dtype == ST_F8_E4M3)
        return bind_fp8_scale(b, out, t);
    if (t->dtype != ST_F32 && t->dtype != ST_BF16 && t->dtype != ST_F16)
        return glm_error_set(b->err, GLM_ERR_UNSUPPORTED, "%s: tensor %s has dtype %s; weights "
                             "must be F32, BF16, F16, F8_E4M3 or EXL3", t->file, t->name,
                             st_dtype_name(t->dtype));
    return GLM_OK;
}

/* Roles read row by row (the embedding, kv_b) get an EXL3 weight dequantized once into an owned
 * float32 copy: a row of an EXL3 matrix cannot be decoded on its own cheaply. */
static glm_status bind_rows(bctx *b, glm_weight *out, const char *name, int64_t rows, int64_t cols)
{
    glm_status st = bind_mat(b, out, name, rows, cols);
    if (st || out->kind != GLM_W_EXL3)
        return st;
    float *f = malloc((size_t)rows * (size_t)cols * sizeof *f);
    if (!f)
        return glm_error_set(b->err, GLM_ERR_NOMEM, "out of memory dequantizing %s", name);
    glm_error e = {0};
    if ((st = exl3_dequantize_f32(out->exl3, f, &e))) {
        free(f);
        return glm_error_set(b->err, st, "%s: %s", out->file, e.message);
    }
    if ((st = own(b, f)))
        return st;
    out->kind = GLM_W_PLAIN;
    out->dtype = ST_F32;
    out->data = f;
    out->exl3 = NULL;
    return GLM_OK;
}

#define NAME(buf, ...) snprintf(buf, sizeof buf, __VA_ARGS__)

static glm_status bind_hc(bctx *b, glm_layer_weights *L, int li, const char *site, glm_weight *fn,
                          const float **base, const float **scale)
{
    char n[512];
    int S = b->c->hc_mult, mix = (2 + S) * S;
    int64_t sb[1] = {mix}, ss[1] = {3};
    (void)L;
    glm_status st;
    NAME(n, "%slayers.%d.hc_%s_fn", b->prefix, li, site);
    if ((st = bind_mat(b, fn, n, mix, (int64_t)S * b->c->hidden_size)))
        return st;
    NAME(n, "%slayers.%d.hc_%s_base", b->prefix, li, site);
    if ((st = bind_vec(b, base, n, 1, sb)))
        return st;
    NAME(n, "%slayers.%d.hc_%s_scale", b->prefix, li, site);
    return bind_vec(b, scale, n, 1, ss);
}

static glm_status bind_kda(bctx *b, glm_kda_weights *k, int li)
{
    const glm_config *c = b->c;
    char n[512];
    int64_t D = c->hidden_size, C = (int64_t)c->kda_heads * c->kda_head_dim, hd = c->kda_head_dim;
    int64_t conv[3] = {C, 1, c->kda_conv_kernel}, heads[1] = {c->kda_heads}, ch[1] = {C},
            hdim[1] = {hd};
    glm_status st = GLM_OK;
#define KM(field, nm, r, cc)                                                          \
    if (!st) {                                                                        \
        NAME(n, "%slayers.%d.self_attn.%s.weight", b->prefix, li, nm);               \
        st = bind_mat(b, &k->field, n, r, cc);                                        \
    }
#define KV(field, nm, nd, shp)                                                        \
    if (!st) {                                                                        \
        NAME(n, "%slayers.%d.self_attn.%s", b->prefix, li, nm);                      \
        st = bind_vec(b, &k->field, n, nd, shp);                                      \
    }
    KM(q_proj, "q_proj", C, D);
    KM(k_proj, "k_proj", C, D);
    KM(v_proj, "v_proj", C, D);
    KV(q_conv, "q_conv1d.weight", 3, conv);
    KV(k_conv, "k_conv1d.weight", 3, conv);
    KV(v_conv, "v_conv1d.weight", 3, conv);
    KM(f_a, "f_a_proj", hd, D);
    KM(f_b, "f_b_proj", C, hd);
    KV(A_log, "A_log", 1, heads);
    KV(dt_bias, "dt_bias", 1, ch);
    KM(b_proj, "b_proj", c->kda_heads, D);
    KM(g_a, "g_a_proj", hd, D);
    KM(g_b, "g_b_proj", C, hd);
    KV(o_norm, "o_norm.weight", 1, hdim);
    KM(o_proj, "o_proj", D, C);
#undef KM
#undef KV
    return st;
}

static glm_status bind_dsa(bctx *b, glm_dsa_weights *a, int li)
{
    const glm_config *c = b->c;
    char n[512];
    int64_t D = c->hidden_size, H = c->num_heads, qr = c->q_lora_rank, R = c->kv_lora_rank;
    int64_t dn = c->qk_nope_head_dim, dv = c->v_head_dim, IH = c->index_n_heads,
            ID = c->index_head_dim;
    int64_t sq[1] = {qr}, sr[1] = {R}, sid[1] = {ID}, ape[2] = {c->index_kpool, ID};
    glm_status st = GLM_OK;
#define AM(field, nm, r, cc)                                                          \
    if (!st) {                                                                        \
        NAME(n, "%slayers.%d.self_attn.%s.weight", b->prefix, li, nm);               \
        st = bind_mat(b, &a->field, n, r, cc);                                        \
    }
#define AV(field, nm, nd, shp)                                                        \
    if (!st) {                                                                        \
        NAME(n, "%slayers.%d.self_attn.%s", b->prefix, li, nm);                      \
        st = bind_vec(b, &a->field, n, nd, shp);                                      \
    }
    AM(q_a, "q_a_proj", qr, D);
    AV(q_a_norm, "q_a_layernorm.weight", 1, sq);
    AM(q_b, "q_b_proj", H * dn, qr);
    AM(kv_a, "kv_a_proj_with_mqa", R, D);
    AV(kv_a_norm, "kv_a_layernorm.weight", 1, sr);
    if (!st) { /* read row by row (dsa.c) */
        NAME(n, "%slayers.%d.self_attn.kv_b_proj.weight", b->prefix, li);
        st = bind_rows(b, &a->kv_b, n, H * (dn + dv), R);
    }
    AM(o_proj, "o_proj", D, H * dv);
    a->has_indexer = !c->indexer_shared[li];
    if (a->has_indexer) {
        AM(idx_wq_b, "indexer.wq_b", IH * ID, qr);
        AM(idx_wk, "indexer.wk", ID, D);
        AV(idx_k_norm_w, "indexer.k_norm.weight", 1, sid);
        AV(idx_k_norm_b, "indexer.k_norm.bias", 1, sid);
        AM(idx_weights, "indexer.weights_proj", IH, D);
        if (!st) {
            NAME(n, "%slayers.%d.self_attn.indexer.index_kpool_compress_gate", b->prefix, li);
            st = bind_mat(b, &a->idx_gate, n, ID, D);
        }
        AV(idx_ape, "indexer.index_kpool_compress_ape", 2, ape);
    }
#undef AM
#undef AV
    return st;
}

static glm_status bind_mlp(bctx *b, glm_mlp_weights *m, const char *base, int64_t inter)
{
    char n[512];
    int64_t D = b->c->hidden_size;
    glm_status st;
    NAME(n, "%s.gate_proj.weight", base);
    if ((st = bind_mat(b, &m->gate, n, inter, D)))
        return st;
    NAME(n, "%s.up_proj.weight", base);
    if ((st = bind_mat(b, &m->up, n, inter, D)))
        return st;
    NAME(n, "%s.down_proj.weight", base);
    return bind_mat(b, &m->down, n, D, inter);
}

static glm_status bind_ffn(bctx *b, glm_layer_weights *L, int li)
{
    const glm_config *c = b->c;
    char base[512], n[512];
    glm_status st;
    if (!c->moe[li]) {
        NAME(base, "%slayers.%d.mlp", b->prefix, li);
        return bind_mlp(b, &L->mlp, base, c->intermediate_size);
    }
    NAME(n, "%slayers.%d.mlp.gate.weight", b->prefix, li);
    if ((st = bind_mat(b, &L->router, n, c->n_routed_experts, c->hidden_size)))
        return st;
    int64_t eb[1] = {c->n_routed_experts};
    NAME(n, "%slayers.%d.mlp.gate.e_score_correction_bias", b->prefix, li);
    if ((st = bind_vec(b, &L->router_bias, n, 1, eb)))
        return st;
    L->has_shared = c->n_shared_experts > 0;
    if (L->has_shared) {
        NAME(base, "%slayers.%d.mlp.shared_experts", b->prefix, li);
        if ((st = bind_mlp(b, &L->mlp, base,
                           (int64_t)c->moe_intermediate_size * c->n_shared_experts)))
            return st;
    }
    L->experts = calloc((size_t)c->n_routed_experts, sizeof *L->experts);
    if (!L->experts)
        return glm_error_set(b->err, GLM_ERR_NOMEM, "out of memory binding experts");
    for (int e = 0; e < c->n_routed_experts; e++) {
        NAME(base, "%slayers.%d.mlp.experts.%d", b->prefix, li, e);
        if ((st = bind_mlp(b, &L->experts[e], base, c->moe_intermediate_size)))
            return st;
    }
    return GLM_OK;
}

static glm_status bind_layer(bctx *b, glm_layer_weights *L, int li)
{
    char n[512];
    int64_t sd[1] = {b->c->hidden_size};
    glm_status st;
    if ((st = bind_hc(b, L, li, "attn", &L->hc_attn_fn, &L->hc_attn_base, &L->hc_attn_scale)) ||
        (st = bind_hc(b, L, li, "ffn", &L->hc_ffn_fn, &L->hc_ffn_base, &L->hc_ffn_scale)))
        return st;
    NAME(n, "%slayers.%d.input_layernorm.weight", b->prefix, li);
    if ((st = bind_vec(b, &L->input_norm, n, 1, sd)))
        return st;
    NAME(n, "%slayers.%d.post_attention_layernorm.weight", b->prefix, li);
    if ((st = bind_vec(b, &L->post_norm, n, 1, sd)))
        return st;
    st = b->c->attn[li] == GLM_ATTN_KDA ? bind_kda(b, &L->kda, li) : bind_dsa(b, &L->dsa, li);
    return st ? st : bind_ffn(b, L, li);
}

/* The MTP layer when the config declares one and the checkpoint holds it (converted checkpoints
 * often drop it: then the engine drafts without it). */
static glm_status bind_mtp(bctx *b, glm_weights *w)
{
    const glm_config *c = b->c;
    int li = c->num_layers;
    char n[512];
    NAME(n, "%slayers.%d.eh_proj.weight", b->prefix, li);
    if (c->num_nextn_predict_layers < 1 || li >= GLM_MAX_LAYERS ||
        (!b->list && !st_find(b->m, n) && !exl3_is_stored(b->m, n)))
        return GLM_OK;
    glm_config mc = *c; /* the MTP layer is a DSA layer with its own indexer, MoE when others are */
    mc.attn[li] = GLM_ATTN_DSA;
    mc.moe[li] = c->n_routed_experts > 0;
    mc.indexer_shared[li] = 0;
    bctx mb = *b;
    mb.c = &mc;
    glm_mtp_weights *t = &w->mtp;
    int64_t D = c->hidden_size, sd[1] = {D};
    glm_status st = bind_mat(&mb, &t->eh_proj, n, D, 2 * D);
    const char *vec[3] = {"enorm", "hnorm", "shared_head.norm"};
    const float **dst[3] = {&t->enorm, &t->hnorm, &t->head_norm};
    for (int k = 0; k < 3 && !st; k++) {
        NAME(n, "%slayers.%d.%s.weight", b->prefix, li, vec[k]);
        st = bind_vec(&mb, dst[k], n, 1, sd);
    }
    if (!st) {
        NAME(n, "%slayers.%d.input_layernorm.weight", b->prefix, li);
        st = bind_vec(&mb, &t->layer.input_norm, n, 1, sd);
    }
    if (!st) {
        NAME(n, "%slayers.%d.post_attention_layernorm.weight", b->prefix, li);
        st = bind_vec(&mb, &t->layer.post_norm, n, 1, sd);
    }
    if (!st)
        st = bind_dsa(&mb, &t->layer.dsa, li);
    if (!st)
        st = bind_ffn(&mb, &t->layer, li);
    w->has_mtp = st == GLM_OK;
    return st;
}

const char *glm_weights_prefix(const st_model *m)
{
    if (m && !st_find(m, "model.language_model.embed_tokens.weight") &&
        st_find(m, "model.embed_tokens.weight"))
        return "model.";
    return "model.language_model.";
}

static glm_status bind_all(glm_weights *w, const glm_config *c, const st_model *m,
                           const char *where, glm_required_list *list, const char *prefix,
                           glm_error *err)
{
    memset(w, 0, sizeof *w);
    bctx b = {.w = w, .c = c, .m = m, .where = where, .err = err, .list = list};
    b.prefix = prefix ? prefix : glm_weights_prefix(m);
    char n[512];
    int64_t sd[1] = {c->hidden_size};
    glm_status st;
    NAME(n, "%sembed_tokens.weight", b.prefix);
    if ((st = bind_rows(&b, &w->embed, n, c->vocab_size, c->hidden_size)))
        goto fail;
    if (c->tie_word_embeddings)
        w->lm_head = w->embed;
    else if ((st = bind_mat(&b, &w->lm_head, "lm_head.weight", c->vocab_size, c->hidden_size)))
        goto fail;
    NAME(n, "%snorm.weight", b.prefix);
    if ((st = bind_vec(&b, &w->final_norm, n, 1, sd)))
        goto fail;
    w->layers = calloc((size_t)c->num_layers, sizeof *w->layers);
    if (!w->layers) {
        st = glm_error_set(err, GLM_ERR_NOMEM, "out of memory binding weights");
        goto fail;
    }
    w->n_layers = c->num_layers;
    for (int i = 0; i < c->num_layers; i++)
        if ((st = bind_layer(&b, &w->layers[i], i)))
            goto fail;
    if ((st = bind_mtp(&b, w)))
        goto fail;
    return GLM_OK;
fail:
    glm_weights_free(w);
    return st;
}

glm_status glm_weights_bind(glm_weights *w, const glm_config *c, const st_model *m,
                            const char *where, glm_error *err)
{
    return bind_all(w, c, m, where, NULL, NULL, err);
}

glm_status glm_weights_list(const glm_config *c, const char *prefix, int with_mtp,
                            glm_required_list *out, glm_error *err)
{
    memset(out, 0, sizeof *out);
    glm_config lc = *c;
    if (!with_mtp)
        lc.num_nextn_predict_layers = 0;
    else if (lc.num_nextn_predict_layers < 1)
        lc.num_nextn_predict_layers = 1;
    glm_weights w;
    glm_status st = bind_all(&w, &lc, NULL, "config.json", out, prefix, err);
    if (!st)
        glm_weights_free(&w);
    if (st) {
        free(out->t);
        memset(out, 0, sizeof *out);
    }
    return st;
}

void glm_weights_free(glm_weights *w)
{
    for (int i = 0; i < w->n_owned; i++)
        free(w->owned[i]);
    free(w->owned);
    for (int i = 0; i < w->n_layers; i++)
        free(w->layers[i].experts);
    free(w->layers);
    free(w->mtp.layer.experts);
    memset(w, 0, sizeof *w);
}

const float *glm_weight_row(const glm_weight *w, int64_t r, float *buf)
{
    size_t cols = (size_t)w->cols;
    if (w->kind == GLM_W_PLAIN) {
        if (w->dtype == ST_F32)
            return (const float *)w->data + (size_t)r * cols;
        st_to_f32(w->dtype, w->data, (size_t)r * cols, cols, buf);
        return buf;
    }
    /* FP8 block: value times the scale of its (row block, column block) */
    const uint8_t *p = (const uint8_t *)w->data + (size_t)r * cols;
    const float *srow = w->scale + (size_t)(r / w->block_rows) * (size_t)w->scale_cols;
    for (size_t j = 0; j < cols; j++)
        buf[j] = st_e4m3_to_f32(p[j]) * srow[j / (size_t)w->block_cols];
    return buf;
}

glm_status glm_tensor_to_f32(const st_model *m, const char *name, float **out, int64_t *numel,
                             int *ndim, int64_t *shape, glm_error *err)
{
    return glm_tensor_to_f32_codebook(m, name, -1, out, numel, ndim, shape, err);
}

glm_status glm_tensor_to_f32_codebook(const st_model *m, const char *name, int config_codebook,
                                      float **out, int64_t *numel, int *ndim, int64_t *shape,
                                      glm_error *err)
{
    const st_tensor *t = st_find(m, name);
    *out = NULL;
    if (!t && exl3_is_stored(m, name)) {
        char tname[512];
        const char *file = exl3_file(m, name, tname, sizeof tname);
        int rows, cols;
        glm_error e = {0};
        glm_status st = exl3_load_dequantized_codebook(m, name, config_codebook, out, &rows, &cols,
                                                       &e);
        if (st)
            return glm_error_set(err, st, "%s: %s", file, e.message);
        *ndim = 2;
        shape[0] = rows;
        shape[1] = cols;
        *numel = (int64_t)rows * cols;
        return GLM_OK;
    }
    if (!t)
        return glm_error_set(err, GLM_ERR_ARG, "the model has no tensor %s", name);
    size_t count = (size_t)st_numel(t);
    float *f = malloc((count ? count : 1) * sizeof *f);
    if (!f)
        return glm_error_set(err, GLM_ERR_NOMEM, "out of memory reading %s", name);
    *ndim = t->ndim;
    memcpy(shape, t->shape, sizeof t->shape);
    *numel = (int64_t)count;
    if (st_to_f32(t->dtype, t->data, 0, count, f) != 0) {
        free(f);
        return glm_error_set(err, GLM_ERR_UNSUPPORTED, "%s: tensor %s has dtype %s, not a float type",
                             t->file, name, st_dtype_name(t->dtype));
    }
    if (t->dtype == ST_F8_E4M3 && t->ndim == 2) {
        char sname[512];
        snprintf(sname, sizeof sname, "%s_scale_inv", name);
        const st_tensor *s = st_find(m, sname);
        if (s && s->ndim == 2 && s->dtype == ST_F32 && s->shape[0] > 0 && s->shape[1] > 0) {
            int64_t br = (t->shape[0] + s->shape[0] - 1) / s->shape[0];
            int64_t bc = (t->shape[1] + s->shape[1] - 1) / s->shape[1];
            /* block size: the smallest power of two >= rows/scale_rows, as checkpoints use 128 */
            int64_t p = 1;
            while (p < br)
                p *= 2;
            br = p;
            for (p = 1; p < bc;)
                p *= 2;
            bc = p;
            const float *sc = s->data;
            for (int64_t i = 0; i < t->shape[0]; i++)
                for (int64_t j = 0; j < t->shape[1]; j++) {
                    int64_t si = i / br, sj = j / bc;
                    if (si < s->shape[0] && sj < s->shape[1])
                        f[i * t->shape[1] + j] *= sc[si * s->shape[1] + sj];
                }
        }
    }
    *out = f;
    return GLM_OK;
}
