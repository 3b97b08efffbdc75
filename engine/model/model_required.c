/* model_required.c: the tensors a config needs, listed from the config alone, with the shapes
 * weights.c checks when it binds them; for checking a checkpoint before loading it. */
#include "model/model_required.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

typedef struct walk {
    const glm_config *c;
    const char *prefix;
    glm_required_fn fn;
    void *user;
    int layer;
    int stop; /* the callback's nonzero answer */
} walk;

static void emit(walk *w, glm_required_kind kind, int64_t rows, int64_t cols, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static void emit(walk *w, glm_required_kind kind, int64_t rows, int64_t cols, const char *fmt, ...)
{
    if (w->stop)
        return;
    glm_required_tensor t = {.layer = w->layer, .kind = kind};
    size_t n = (size_t)snprintf(t.name, sizeof t.name, "%s", w->prefix);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t.name + n, sizeof t.name - n, fmt, ap);
    va_end(ap);
    t.ndim = cols > 0 ? 2 : 1;
    t.shape[0] = rows;
    t.shape[1] = cols > 0 ? cols : 0;
    w->stop = w->fn(&t, w->user);
}

#define MAT(r, c, ...) emit(w, GLM_REQ_MATRIX, (r), (c), __VA_ARGS__)
#define VEC(n, ...) emit(w, GLM_REQ_VECTOR, (n), 0, __VA_ARGS__)

static void hyper_connections(walk *w, int li)
{
    const glm_config *c = w->c;
    int64_t S = c->hc_mult, mix = (2 + S) * S;
    static const char *const site[2] = {"attn", "ffn"};
    for (int k = 0; k < 2; k++) {
        MAT(mix, S * c->hidden_size, "layers.%d.hc_%s_fn", li, site[k]);
        VEC(mix, "layers.%d.hc_%s_base", li, site[k]);
        VEC(3, "layers.%d.hc_%s_scale", li, site[k]);
    }
}

/* A short convolution's taps, [C, 1, K]: read as a float table, like a vector. */
static void conv(walk *w, int li, const char *name)
{
    if (w->stop)
        return;
    glm_required_tensor t = {.layer = li, .kind = GLM_REQ_VECTOR, .ndim = 3};
    snprintf(t.name, sizeof t.name, "%slayers.%d.self_attn.%s.weight", w->prefix, li, name);
    t.shape[0] = (int64_t)w->c->kda_heads * w->c->kda_head_dim;
    t.shape[1] = 1;
    t.shape[2] = w->c->kda_conv_kernel;
    w->stop = w->fn(&t, w->user);
}

static void kda(walk *w, int li)
{
    const glm_config *c = w->c;
    int64_t D = c->hidden_size, C = (int64_t)c->kda_heads * c->kda_head_dim, hd = c->kda_head_dim;
    MAT(C, D, "layers.%d.self_attn.q_proj.weight", li);
    MAT(C, D, "layers.%d.self_attn.k_proj.weight", li);
    MAT(C, D, "layers.%d.self_attn.v_proj.weight", li);
    conv(w, li, "q_conv1d");
    conv(w, li, "k_conv1d");
    conv(w, li, "v_conv1d");
    MAT(hd, D, "layers.%d.self_attn.f_a_proj.weight", li);
    MAT(C, hd, "layers.%d.self_attn.f_b_proj.weight", li);
    VEC(c->kda_heads, "layers.%d.self_attn.A_log", li);
    VEC(C, "layers.%d.self_attn.dt_bias", li);
    MAT(c->kda_heads, D, "layers.%d.self_attn.b_proj.weight", li);
    MAT(hd, D, "layers.%d.self_attn.g_a_proj.weight", li);
    MAT(C, hd, "layers.%d.self_attn.g_b_proj.weight", li);
    VEC(hd, "layers.%d.self_attn.o_norm.weight", li);
    MAT(D, C, "layers.%d.self_attn.o_proj.weight", li);
}

static void dsa(walk *w, int li, int has_indexer)
{
    const glm_config *c = w->c;
    int64_t D = c->hidden_size, H = c->num_heads, qr = c->q_lora_rank, R = c->kv_lora_rank;
    int64_t dn = c->qk_nope_head_dim, dv = c->v_head_dim, IH = c->index_n_heads, ID = c->index_head_dim;
    MAT(qr, D, "layers.%d.self_attn.q_a_proj.weight", li);
    VEC(qr, "layers.%d.self_attn.q_a_layernorm.weight", li);
    MAT(H * dn, qr, "layers.%d.self_attn.q_b_proj.weight", li);
    MAT(R, D, "layers.%d.self_attn.kv_a_proj_with_mqa.weight", li);
    VEC(R, "layers.%d.self_attn.kv_a_layernorm.weight", li);
    MAT(H * (dn + dv), R, "layers.%d.self_attn.kv_b_proj.weight", li);
    MAT(D, H * dv, "layers.%d.self_attn.o_proj.weight", li);
    if (!has_indexer)
        return;
    MAT(IH * ID, qr, "layers.%d.self_attn.indexer.wq_b.weight", li);
    MAT(ID, D, "layers.%d.self_attn.indexer.wk.weight", li);
    VEC(ID, "layers.%d.self_attn.indexer.k_norm.weight", li);
    VEC(ID, "layers.%d.self_attn.indexer.k_norm.bias", li);
    MAT(IH, D, "layers.%d.self_attn.indexer.weights_proj.weight", li);
    MAT(ID, D, "layers.%d.self_attn.indexer.index_kpool_compress_gate", li);
    /* the pooling table [kpool, index_head_dim]: a small float table, not a product's matrix */
    emit(w, GLM_REQ_VECTOR, c->index_kpool, ID, "layers.%d.self_attn.indexer.index_kpool_compress_ape", li);
}

static void mlp(walk *w, const char *base, int li, int e, int64_t inter)
{
    int64_t D = w->c->hidden_size;
    char b[96];
    if (e >= 0)
        snprintf(b, sizeof b, "layers.%d.mlp.experts.%d", li, e);
    else
        snprintf(b, sizeof b, "layers.%d.mlp%s", li, base);
    MAT(inter, D, "%s.gate_proj.weight", b);
    MAT(inter, D, "%s.up_proj.weight", b);
    MAT(D, inter, "%s.down_proj.weight", b);
}

static void ffn(walk *w, int li, int moe)
{
    const glm_config *c = w->c;
    if (!moe) {
        mlp(w, "", li, -1, c->intermediate_size);
        return;
    }
    MAT(c->n_routed_experts, c->hidden_size, "layers.%d.mlp.gate.weight", li);
    VEC(c->n_routed_experts, "layers.%d.mlp.gate.e_score_correction_bias", li);
    if (c->n_shared_experts > 0)
        mlp(w, ".shared_experts", li, -1, (int64_t)c->moe_intermediate_size * c->n_shared_experts);
    for (int e = 0; e < c->n_routed_experts && !w->stop; e++)
        mlp(w, "", li, e, c->moe_intermediate_size);
}

static void layer(walk *w, int li)
{
    w->layer = li;
    hyper_connections(w, li);
    VEC(w->c->hidden_size, "layers.%d.input_layernorm.weight", li);
    VEC(w->c->hidden_size, "layers.%d.post_attention_layernorm.weight", li);
    if (w->c->attn[li] == GLM_ATTN_KDA)
        kda(w, li);
    else
        dsa(w, li, !w->c->indexer_shared[li]);
    ffn(w, li, w->c->moe[li]);
}

/* layers.N: no hyper-connections; a DSA layer with its own indexer, MoE when the model has experts. */
static void mtp(walk *w)
{
    const glm_config *c = w->c;
    int li = c->num_layers;
    int64_t D = c->hidden_size;
    w->layer = li;
    MAT(D, 2 * D, "layers.%d.eh_proj.weight", li);
    VEC(D, "layers.%d.enorm.weight", li);
    VEC(D, "layers.%d.hnorm.weight", li);
    VEC(D, "layers.%d.shared_head.norm.weight", li);
    VEC(D, "layers.%d.input_layernorm.weight", li);
    VEC(D, "layers.%d.post_attention_layernorm.weight", li);
    dsa(w, li, 1);
    ffn(w, li, c->n_routed_experts > 0);
}

const char *glm_required_prefix(const st_model *m)
{
    if (st_find(m, "model.language_model.embed_tokens.weight"))
        return "model.language_model.";
    return st_find(m, "model.embed_tokens.weight") ? "model." : "model.language_model.";
}

int glm_required_tensors(const glm_config *c, const char *prefix, int with_mtp, glm_required_fn fn,
                         void *user)
{
    walk wk = {.c = c, .prefix = prefix, .fn = fn, .user = user, .layer = -1}, *w = &wk;
    MAT(c->vocab_size, c->hidden_size, "embed_tokens.weight");
    if (!c->tie_word_embeddings && !w->stop) {
        glm_required_tensor t = {.name = "lm_head.weight", .layer = -1, .kind = GLM_REQ_MATRIX,
                                 .ndim = 2, .shape = {c->vocab_size, c->hidden_size}};
        w->stop = fn(&t, user);
    }
    VEC(c->hidden_size, "norm.weight");
    for (int i = 0; i < c->num_layers && !w->stop; i++)
        layer(w, i);
    if (with_mtp && c->num_nextn_predict_layers >= 1 && c->num_layers < GLM_MAX_LAYERS && !w->stop)
        mtp(w);
    return w->stop;
}
