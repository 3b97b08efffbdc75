/* mkmodel.c: random-weight models in the real checkpoint layout (tensor names, shapes, F32/BF16
 * like the BF16 release), from presets; weights come from a per-tensor seeded generator. */
#include "model/mkmodel.h"

#include <errno.h>
#include <stdarg.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cjson/cJSON.h>

#include "base/grow.h"
#include "base/hash.h"
#include "model/config.h"

typedef enum init_kind {
    INIT_FANIN,  /* normal / sqrt(last dim) */
    INIT_NORM,   /* 1 + 0.2 normal */
    INIT_HALF,   /* 0.5 normal */
    INIT_SMALL,  /* 0.2 normal */
    INIT_BIAS,   /* 0.05 normal */
    INIT_APE,    /* 0.25 normal */
    INIT_ALOG,   /* uniform in [0.2, 1.4] */
    INIT_TRELLIS,   /* EXL3 trellis: uniform 16-bit words (every word stream decodes) */
    INIT_SIGN,      /* EXL3 suh: +-1 in F16 */
    INIT_SIGN_FAN,  /* EXL3 svh: +-1/sqrt(fan_in) in F16, so W has the fan-in scale */
    INIT_MCG,       /* the mcg codebook marker */
    INIT_FP8,       /* F8_E4M3 weight: fan-in normal over its block scale */
    INIT_FP8_SCALE, /* its F32 block scales (weight_scale_inv) */
} init_kind;

typedef enum mk_like { MK_LIKE_NONE = 0, MK_LIKE_EXL3, MK_LIKE_FP8 } mk_like;

typedef struct mk_tensor {
    char name[160];
    int ndim;
    int64_t shape[5];
    init_kind init;
    st_dtype dtype;
    size_t nbytes;
    int shard;
    int64_t fan_in; /* EXL3 svh, FP8 weights and scales: the weight's input width */
} mk_tensor;

typedef struct mk_list {
    mk_tensor *t;
    size_t n, cap;
    st_dtype wdtype; /* matrices and norm weights */
} mk_list;

const char *glm_mkmodel_presets(void)
{
    return "tiny (hidden 32, 8 layers, real vocabulary; F32)\n"
           "tiny-mtp (tiny plus the MTP layer, layers.8 with num_nextn_predict_layers 1; F32)\n"
           "tiny-tp4 (tiny with 4 attention and 4 KDA heads: a split among up to 4 ranks; F32)\n"
           "small (hidden 256, 8 layers, 16 experts; BF16)\n"
           "small-mtp (small plus the MTP layer, layers.8; BF16)\n"
           "tiny-exl3 (hidden 128, 2 layers, 2 experts 128 wide so `quantize` can EXL3 them; F32)\n"
           "tiny-exl3-tp (tiny-exl3 with experts 256 wide: EXL3 halves for two ranks)\n"
           "small-exl3 (hidden 512, 4 layers, 8 experts 128 wide: once quantized, the smallest model\n"
           "  the CUDA backend's fused EXL3 expert kernels take; F32)\n"
           "real-N (GLM-5.3-Flash shapes with N layers, 3 KDA : 1 DSA; BF16)\n";
}

const char *glm_mkmodel_likes(void)
{
    return "exl3-published (the published EXL3 4-bit checkpoint: routed experts of every MoE\n"
           "  layer and of the MTP layer as EXL3 (mcg, [1] markers), the rest BF16, head_bits 16,\n"
           "  sharded with an index, model.visual.* tensors; hidden and expert widths raised to\n"
           "  multiples of 128 where the preset's are smaller, as EXL3 needs)\n"
           "fp8-official (the official release: F8_E4M3 weights with F32 128x128 block scales\n"
           "  on the dense MLPs, experts, shared experts and DSA q_a/q_b/kv_a/o projections, the\n"
           "  rest BF16, the MTP layer, sharded with an index, model.visual.* tensors)\n";
}

static void base_config(glm_config *c)
{
    memset(c, 0, sizeof *c);
    c->vocab_size = 154880;
    c->rms_norm_eps = 1e-5f;
    c->swiglu_limit = 10.0f;
    c->hc_mult = 4;
    c->hc_sinkhorn_iters = 20;
    c->hc_eps = 1e-6f;
    c->kda_conv_kernel = 4;
    c->kda_has_lower_bound = 1;
    c->kda_lower_bound = -5.0f;
    c->n_shared_experts = 1;
    c->n_group = c->topk_group = 1;
    c->norm_topk_prob = 1;
    c->routed_scaling_factor = 2.5f;
    c->pad_token_id = 154820;
    c->n_eos = 3;
    c->eos[0] = 154820;
    c->eos[1] = 154827;
    c->eos[2] = 154829;
}

static void layer_pattern(glm_config *c, int dense)
{
    for (int i = 0; i < c->num_layers; i++) {
        c->attn[i] = i % 4 == 3 ? GLM_ATTN_DSA : GLM_ATTN_KDA;
        c->moe[i] = i >= dense;
        c->indexer_shared[i] = 0;
    }
}

static glm_status preset_config(const char *name, glm_config *c, st_dtype *dtype, int *max_new,
                                glm_error *err)
{
    base_config(c);
    int mtp = strcmp(name, "tiny-mtp") == 0, tp4 = strcmp(name, "tiny-tp4") == 0;
    if (strcmp(name, "tiny") == 0 || mtp || tp4) {
        *c = (glm_config){0};
        base_config(c);
        c->hidden_size = 32, c->num_layers = 8, c->intermediate_size = 64;
        c->moe_intermediate_size = 16, c->num_heads = 2, c->q_lora_rank = 24, c->kv_lora_rank = 16;
        c->qk_nope_head_dim = 8, c->v_head_dim = 8, c->index_n_heads = 8, c->index_head_dim = 8;
        c->index_topk = 16, c->index_kpool = 4, c->kda_heads = 2, c->kda_head_dim = 8;
        c->n_routed_experts = 8, c->num_experts_per_tok = 2;
        c->num_nextn_predict_layers = mtp;
        if (tp4) /* one head of each kind for each of up to four ranks */
            c->num_heads = 4, c->kda_heads = 4;
        layer_pattern(c, 1);
        *dtype = ST_F32;
        *max_new = 256;
        return GLM_OK;
    }
    if (strncmp(name, "tiny-exl3", 9) == 0 && (!name[9] || !strcmp(name + 9, "-tp"))) {
        /* experts' both dimensions multiples of 128 (-tp: their halves too) */
        c->hidden_size = 128, c->num_layers = 2, c->intermediate_size = 128;
        c->moe_intermediate_size = name[9] ? 256 : 128, c->num_heads = 2, c->q_lora_rank = 32, c->kv_lora_rank = 16;
        c->qk_nope_head_dim = 8, c->v_head_dim = 8, c->index_n_heads = 4, c->index_head_dim = 8;
        c->index_topk = 16, c->index_kpool = 4, c->kda_heads = 2, c->kda_head_dim = 16;
        c->n_routed_experts = 2, c->num_experts_per_tok = 2;
        layer_pattern(c, 1);
        *dtype = ST_F32;
        *max_new = 256;
        return GLM_OK;
    }
    if (strcmp(name, "small-exl3") == 0) {
        /* the fused EXL3 expert kernels need hidden % 512 == 0 and expert width % 128 == 0 */
        c->hidden_size = 512, c->num_layers = 4, c->intermediate_size = 1024;
        c->moe_intermediate_size = 128, c->num_heads = 4, c->q_lora_rank = 128, c->kv_lora_rank = 64;
        c->qk_nope_head_dim = 64, c->v_head_dim = 64, c->index_n_heads = 8, c->index_head_dim = 32;
        c->index_topk = 64, c->index_kpool = 4, c->kda_heads = 4, c->kda_head_dim = 64;
        c->n_routed_experts = 8, c->num_experts_per_tok = 4;
        layer_pattern(c, 1);
        *dtype = ST_F32;
        *max_new = 1024;
        return GLM_OK;
    }
    if (strcmp(name, "small") == 0 || strcmp(name, "small-mtp") == 0) {
        c->hidden_size = 256, c->num_layers = 8, c->intermediate_size = 512;
        c->moe_intermediate_size = 64, c->num_heads = 4, c->q_lora_rank = 128, c->kv_lora_rank = 64;
        c->qk_nope_head_dim = 64, c->v_head_dim = 64, c->index_n_heads = 8, c->index_head_dim = 32;
        c->index_topk = 64, c->index_kpool = 4, c->kda_heads = 4, c->kda_head_dim = 64;
        c->n_routed_experts = 16, c->num_experts_per_tok = 4;
        c->num_nextn_predict_layers = name[5] != '\0';
        layer_pattern(c, 1);
        *dtype = ST_BF16;
        *max_new = 1024;
        return GLM_OK;
    }
    char *end;
    long n = strncmp(name, "real-", 5) == 0 ? strtol(name + 5, &end, 10) : 0;
    if (n < 1 || n > 45 || *end)
        return glm_error_set(err, GLM_ERR_ARG, "unknown preset '%s'; presets are:\n%s", name,
                             glm_mkmodel_presets());
    c->hidden_size = 4096, c->num_layers = (int)n, c->intermediate_size = 12288;
    c->moe_intermediate_size = 2048, c->num_heads = 64, c->q_lora_rank = 1536;
    c->kv_lora_rank = 512, c->qk_nope_head_dim = 256, c->v_head_dim = 256;
    c->index_n_heads = 32, c->index_head_dim = 128, c->index_topk = 2048, c->index_kpool = 4;
    c->kda_heads = 64, c->kda_head_dim = 128, c->n_routed_experts = 288;
    c->num_experts_per_tok = 8;
    layer_pattern(c, 3);
    *dtype = ST_BF16;
    *max_new = 32768;
    return GLM_OK;
}

static glm_status add(mk_list *l, glm_error *err, init_kind init, int f32, int ndim, int64_t d0,
                      int64_t d1, int64_t d2, const char *fmt, ...) __attribute__((format(printf, 9, 10)));

static glm_status push(mk_list *l, const mk_tensor *t, glm_error *err)
{
    if (grow_array((void **)&l->t, &l->cap, l->n + 1, sizeof *l->t, 512) != 0)
        return glm_error_set(err, GLM_ERR_NOMEM, "out of memory listing tensors");
    l->t[l->n++] = *t;
    return GLM_OK;
}

static glm_status add(mk_list *l, glm_error *err, init_kind init, int f32, int ndim, int64_t d0,
                      int64_t d1, int64_t d2, const char *fmt, ...)
{
    mk_tensor tensor, *t = &tensor;
    memset(t, 0, sizeof *t);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t->name, sizeof t->name, fmt, ap);
    va_end(ap);
    t->ndim = ndim;
    t->shape[0] = d0;
    t->shape[1] = d1;
    t->shape[2] = d2;
    t->fan_in = ndim >= 1 ? t->shape[ndim - 1] : 1;
    t->init = init;
    t->dtype = f32 ? ST_F32 : l->wdtype;
    size_t n = 1;
    for (int i = 0; i < ndim; i++)
        n *= (size_t)t->shape[i];
    t->nbytes = n * st_dtype_size(t->dtype);
    return push(l, t, err);
}

#define P "model.language_model."
#define ADD(...) \
    if ((st = add(l, err, __VA_ARGS__))) \
    return st

static glm_status list_mlp(mk_list *l, const char *base, int li, int64_t D, int64_t I, glm_error *err)
{
    glm_status st;
    ADD(INIT_FANIN, 0, 2, I, D, 0, P "layers.%d.%s.gate_proj.weight", li, base);
    ADD(INIT_FANIN, 0, 2, I, D, 0, P "layers.%d.%s.up_proj.weight", li, base);
    ADD(INIT_FANIN, 0, 2, D, I, 0, P "layers.%d.%s.down_proj.weight", li, base);
    return GLM_OK;
}

/* with_hc 0: the MTP layer, which has no hyper-connections. */
static glm_status list_layer(mk_list *l, const glm_config *c, int li, int with_hc, glm_error *err)
{
    int64_t D = c->hidden_size, S = c->hc_mult, mix = (2 + S) * S;
    glm_status st;
    const char *site[2] = {"attn", "ffn"};
    for (int k = 0; with_hc && k < 2; k++) {
        ADD(INIT_FANIN, 0, 2, mix, S * D, 0, P "layers.%d.hc_%s_fn", li, site[k]);
        ADD(INIT_HALF, 1, 1, mix, 0, 0, P "layers.%d.hc_%s_base", li, site[k]);
        ADD(INIT_NORM, 1, 1, 3, 0, 0, P "layers.%d.hc_%s_scale", li, site[k]);
    }
    ADD(INIT_NORM, 0, 1, D, 0, 0, P "layers.%d.input_layernorm.weight", li);
    ADD(INIT_NORM, 0, 1, D, 0, 0, P "layers.%d.post_attention_layernorm.weight", li);
    if (c->attn[li] == GLM_ATTN_KDA) {
        int64_t C = (int64_t)c->kda_heads * c->kda_head_dim, hd = c->kda_head_dim;
        const char *qkv[3] = {"q", "k", "v"};
        for (int k = 0; k < 3; k++)
            ADD(INIT_FANIN, 0, 2, C, D, 0, P "layers.%d.self_attn.%s_proj.weight", li, qkv[k]);
        for (int k = 0; k < 3; k++)
            ADD(INIT_HALF, 0, 3, C, 1, c->kda_conv_kernel, P "layers.%d.self_attn.%s_conv1d.weight",
                li, qkv[k]);
        ADD(INIT_FANIN, 0, 2, hd, D, 0, P "layers.%d.self_attn.f_a_proj.weight", li);
        ADD(INIT_FANIN, 0, 2, C, hd, 0, P "layers.%d.self_attn.f_b_proj.weight", li);
        ADD(INIT_ALOG, 1, 1, c->kda_heads, 0, 0, P "layers.%d.self_attn.A_log", li);
        ADD(INIT_HALF, 1, 1, C, 0, 0, P "layers.%d.self_attn.dt_bias", li);
        ADD(INIT_FANIN, 0, 2, c->kda_heads, D, 0, P "layers.%d.self_attn.b_proj.weight", li);
        ADD(INIT_FANIN, 0, 2, hd, D, 0, P "layers.%d.self_attn.g_a_proj.weight", li);
        ADD(INIT_FANIN, 0, 2, C, hd, 0, P "layers.%d.self_attn.g_b_proj.weight", li);
        ADD(INIT_NORM, 0, 1, hd, 0, 0, P "layers.%d.self_attn.o_norm.weight", li);
        ADD(INIT_FANIN, 0, 2, D, C, 0, P "layers.%d.self_attn.o_proj.weight", li);
    } else {
        int64_t H = c->num_heads, qr = c->q_lora_rank, R = c->kv_lora_rank;
        int64_t dn = c->qk_nope_head_dim, dv = c->v_head_dim, IH = c->index_n_heads,
                ID = c->index_head_dim;
        ADD(INIT_FANIN, 0, 2, qr, D, 0, P "layers.%d.self_attn.q_a_proj.weight", li);
        ADD(INIT_NORM, 0, 1, qr, 0, 0, P "layers.%d.self_attn.q_a_layernorm.weight", li);
        ADD(INIT_FANIN, 0, 2, H * dn, qr, 0, P "layers.%d.self_attn.q_b_proj.weight", li);
        ADD(INIT_FANIN, 0, 2, R, D, 0, P "layers.%d.self_attn.kv_a_proj_with_mqa.weight", li);
        ADD(INIT_NORM, 0, 1, R, 0, 0, P "layers.%d.self_attn.kv_a_layernorm.weight", li);
        ADD(INIT_FANIN, 0, 2, H * (dn + dv), R, 0, P "layers.%d.self_attn.kv_b_proj.weight", li);
        ADD(INIT_FANIN, 0, 2, D, H * dv, 0, P "layers.%d.self_attn.o_proj.weight", li);
        if (!c->indexer_shared[li]) {
            ADD(INIT_FANIN, 0, 2, IH * ID, qr, 0, P "layers.%d.self_attn.indexer.wq_b.weight", li);
            ADD(INIT_FANIN, 0, 2, ID, D, 0, P "layers.%d.self_attn.indexer.wk.weight", li);
            ADD(INIT_NORM, 0, 1, ID, 0, 0, P "layers.%d.self_attn.indexer.k_norm.weight", li);
            ADD(INIT_SMALL, 0, 1, ID, 0, 0, P "layers.%d.self_attn.indexer.k_norm.bias", li);
            ADD(INIT_FANIN, 0, 2, IH, D, 0, P "layers.%d.self_attn.indexer.weights_proj.weight", li);
            ADD(INIT_FANIN, 0, 2, ID, D, 0,
                P "layers.%d.self_attn.indexer.index_kpool_compress_gate", li);
            ADD(INIT_APE, 0, 2, c->index_kpool, ID, 0,
                P "layers.%d.self_attn.indexer.index_kpool_compress_ape", li);
        }
    }
    if (!c->moe[li])
        return list_mlp(l, "mlp", li, D, c->intermediate_size, err);
    ADD(INIT_FANIN, 0, 2, c->n_routed_experts, D, 0, P "layers.%d.mlp.gate.weight", li);
    ADD(INIT_BIAS, 1, 1, c->n_routed_experts, 0, 0, P "layers.%d.mlp.gate.e_score_correction_bias",
        li);
    if (c->n_shared_experts &&
        (st = list_mlp(l, "mlp.shared_experts", li, D,
                       (int64_t)c->moe_intermediate_size * c->n_shared_experts, err)))
        return st;
    for (int e = 0; e < c->n_routed_experts; e++) {
        char base[64];
        snprintf(base, sizeof base, "mlp.experts.%d", e);
        if ((st = list_mlp(l, base, li, D, c->moe_intermediate_size, err)))
            return st;
    }
    return GLM_OK;
}

static glm_status list_tensors(mk_list *l, const glm_config *c, glm_error *err)
{
    glm_status st;
    ADD(INIT_FANIN, 0, 2, c->vocab_size, c->hidden_size, 0, P "embed_tokens.weight");
    for (int i = 0; i < c->num_layers; i++)
        if ((st = list_layer(l, c, i, 1, err)))
            return st;
    if (c->num_nextn_predict_layers > 0) { /* architecture.md 2.8: a DSA + MoE block, no HC */
        int li = c->num_layers;
        int64_t D = c->hidden_size;
        glm_config mc = *c;
        mc.attn[li] = GLM_ATTN_DSA;
        mc.moe[li] = c->n_routed_experts > 0;
        mc.indexer_shared[li] = 0;
        ADD(INIT_FANIN, 0, 2, D, 2 * D, 0, P "layers.%d.eh_proj.weight", li);
        ADD(INIT_NORM, 0, 1, D, 0, 0, P "layers.%d.enorm.weight", li);
        ADD(INIT_NORM, 0, 1, D, 0, 0, P "layers.%d.hnorm.weight", li);
        ADD(INIT_NORM, 0, 1, D, 0, 0, P "layers.%d.shared_head.norm.weight", li);
        if ((st = list_layer(l, &mc, li, 0, err)))
            return st;
    }
    ADD(INIT_NORM, 0, 1, c->hidden_size, 0, 0, P "norm.weight");
    ADD(INIT_FANIN, 0, 2, c->vocab_size, c->hidden_size, 0, "lm_head.weight");
    return GLM_OK;
}
#undef ADD

/* ---- published layouts ---------------------------------------------------------------------- */

static mk_tensor derived(const mk_tensor *w, const char *suffix, init_kind init, st_dtype dtype,
                         int ndim, int64_t d0, int64_t d1, int64_t d2)
{
    mk_tensor t = {0};
    snprintf(t.name, sizeof t.name, "%.*s%s", (int)(strlen(w->name) - strlen(".weight")), w->name,
             suffix);
    t.ndim = ndim;
    t.shape[0] = d0;
    t.shape[1] = d1;
    t.shape[2] = d2;
    t.init = init;
    t.dtype = dtype;
    t.fan_in = w->shape[1];
    size_t n = 1;
    for (int i = 0; i < ndim; i++)
        n *= (size_t)t.shape[i];
    t.nbytes = n * st_dtype_size(dtype);
    return t;
}

static int ends_with(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

/* The layer a tensor name belongs to, or -1. */
static int layer_of(const char *name)
{
    const char *at = strstr(name, "layers.");
    return at ? atoi(at + 7) : -1;
}

/* Which weights the official FP8 release stores as F8_E4M3: every MLP projection (dense,
 * routed, shared) and the DSA layers' q_a, q_b, kv_a and o projections. */
static int fp8_official(const mk_tensor *t, const glm_config *c)
{
    if (t->ndim != 2 || (!ends_with(t->name, "_proj.weight") && !ends_with(t->name, "_mqa.weight")))
        return 0;
    if (strstr(t->name, ".mlp."))
        return 1;
    int li = layer_of(t->name);
    int dsa = li >= c->num_layers || (li >= 0 && c->attn[li] == GLM_ATTN_DSA);
    return dsa && (strstr(t->name, ".self_attn.q_a_proj.") || strstr(t->name, ".self_attn.q_b_proj.") ||
                   strstr(t->name, ".self_attn.kv_a_proj_with_mqa.") ||
                   strstr(t->name, ".self_attn.o_proj."));
}

/* Rewrites the plain list into the published layout's tensors. */
static glm_status apply_like(mk_list *l, const glm_config *c, mk_like like, glm_error *err)
{
    mk_list out = {.wdtype = l->wdtype};
    glm_status st = GLM_OK;
    for (size_t i = 0; i < l->n && !st; i++) {
        mk_tensor *t = &l->t[i];
        int64_t o = t->shape[0], in = t->shape[1];
        if (like == MK_LIKE_EXL3 && t->ndim == 2 && strstr(t->name, ".mlp.experts.")) {
            mk_tensor parts[4] = {
                derived(t, ".trellis", INIT_TRELLIS, ST_I16, 3, in / 16, o / 16, 16 * 4),
                derived(t, ".suh", INIT_SIGN, ST_F16, 1, in, 0, 0),
                derived(t, ".svh", INIT_SIGN_FAN, ST_F16, 1, o, 0, 0),
                derived(t, ".mcg", INIT_MCG, ST_I32, 1, 1, 0, 0),
            };
            for (int k = 0; k < 4 && !st; k++)
                st = push(&out, &parts[k], err);
            continue;
        }
        if (like == MK_LIKE_FP8 && fp8_official(t, c)) {
            mk_tensor w = *t, sc;
            w.init = INIT_FP8;
            w.dtype = ST_F8_E4M3;
            w.nbytes = (size_t)(o * in);
            sc = derived(t, ".weight_scale_inv", INIT_FP8_SCALE, ST_F32, 2, (o + 127) / 128,
                         (in + 127) / 128, 0);
            if (!(st = push(&out, &w, err)))
                st = push(&out, &sc, err);
            continue;
        }
        st = push(&out, t, err);
    }
    free(l->t);
    *l = out;
    return st;
}

/* model.visual.*: a vision tower the text engine skips (BF16; the patch embedding is 5-D). */
static glm_status list_vision(mk_list *l, const glm_config *c, int vh, int depth, glm_error *err)
{
    glm_status st;
    st_dtype keep = l->wdtype;
    l->wdtype = ST_BF16;
#define VADD(...)                                                                               \
    if ((st = add(l, err, __VA_ARGS__)))                                                        \
        goto out
    VADD(INIT_SMALL, 0, 2, vh, 3, 0, "model.visual.patch_embed.proj.weight");
    mk_tensor *pe = &l->t[l->n - 1];
    pe->ndim = 5; /* [vh, channels 3, temporal patch 2, 14, 14] */
    pe->shape[2] = 2, pe->shape[3] = 14, pe->shape[4] = 14;
    pe->fan_in = 14;
    pe->nbytes = (size_t)vh * 3 * 2 * 14 * 14 * 2;
    VADD(INIT_BIAS, 0, 1, vh, 0, 0, "model.visual.patch_embed.proj.bias");
    for (int b = 0; b < depth; b++) {
        VADD(INIT_NORM, 0, 1, vh, 0, 0, "model.visual.blocks.%d.norm1.weight", b);
        VADD(INIT_NORM, 0, 1, vh, 0, 0, "model.visual.blocks.%d.norm2.weight", b);
        VADD(INIT_FANIN, 0, 2, 3 * vh, vh, 0, "model.visual.blocks.%d.attn.qkv.weight", b);
        VADD(INIT_BIAS, 0, 1, 3 * vh, 0, 0, "model.visual.blocks.%d.attn.qkv.bias", b);
        VADD(INIT_FANIN, 0, 2, vh, vh, 0, "model.visual.blocks.%d.attn.proj.weight", b);
        VADD(INIT_FANIN, 0, 2, 2 * vh, vh, 0, "model.visual.blocks.%d.mlp.gate_proj.weight", b);
        VADD(INIT_FANIN, 0, 2, 2 * vh, vh, 0, "model.visual.blocks.%d.mlp.up_proj.weight", b);
        VADD(INIT_FANIN, 0, 2, vh, 2 * vh, 0, "model.visual.blocks.%d.mlp.down_proj.weight", b);
    }
    VADD(INIT_NORM, 0, 1, vh, 0, 0, "model.visual.post_layernorm.weight");
    VADD(INIT_FANIN, 0, 2, c->hidden_size, 4 * vh, 0, "model.visual.merger.proj.weight");
    VADD(INIT_FANIN, 0, 2, 2 * c->hidden_size, c->hidden_size, 0,
         "model.visual.merger.gate_proj.weight");
#undef VADD
out:
    l->wdtype = keep;
    return st;
}

/* ---- random values ------------------------------------------------------------------------ */

static uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static double uniform01(uint64_t *s)
{
    *s += 0x9e3779b97f4a7c15ull;
    return (double)(mix64(*s) >> 11) * (1.0 / 9007199254740992.0);
}

static uint64_t name_seed(uint64_t seed, const char *name)
{
    /* the start is not FNV's basis (a digit short of it); kept, so every made model stays the same */
    return mix64(fnv1a64(1469598103934665603ull ^ mix64(seed + 1), name, strlen(name)));
}

typedef struct mk_rng {
    uint64_t s;
    int has_spare;
    float spare;
} mk_rng;

/* Box-Muller, both outputs used. */
static float normal(mk_rng *r)
{
    if (r->has_spare) {
        r->has_spare = 0;
        return r->spare;
    }
    double u1 = uniform01(&r->s), u2 = uniform01(&r->s);
    double rad = sqrt(-2.0 * log(1.0 - u1)), ang = 6.283185307179586 * u2;
    r->spare = (float)(rad * sin(ang));
    r->has_spare = 1;
    return (float)(rad * cos(ang));
}

static float draw(init_kind k, float fan_scale, mk_rng *r)
{
    if (k == INIT_ALOG)
        return (float)(0.2 + 1.2 * uniform01(&r->s));
    float n = normal(r);
    switch (k) {
    case INIT_FANIN: return n * fan_scale;
    case INIT_NORM: return 1.0f + 0.2f * n;
    case INIT_HALF: return 0.5f * n;
    case INIT_SMALL: return 0.2f * n;
    case INIT_BIAS: return 0.05f * n;
    case INIT_APE: return 0.25f * n;
    default: return n;
    }
}

/* The scale of block (bi, bj) of an FP8 weight: around fan/112 (so a 4-sigma value reaches
 * 448), varied per block so that block indexing matters. */
static float fp8_block_scale(uint64_t seed, const char *weight, int64_t bi, int64_t bj, float fan)
{
    uint64_t h = mix64(name_seed(seed, weight) ^ mix64((uint64_t)bi * 0x10001ull + (uint64_t)bj));
    double u = (double)(h >> 11) * (1.0 / 9007199254740992.0);
    return (float)(fan * 4.0 / 448.0 * (0.5 + u));
}

/* The weight's name for its _scale_inv tensor. */
static void fp8_weight_name(const mk_tensor *t, char *buf, size_t n)
{
    snprintf(buf, n, "%.*s", (int)(strlen(t->name) - strlen("_scale_inv")), t->name);
}

static glm_status write_special(st_writer *w, const mk_tensor *t, uint64_t seed, glm_error *err)
{
    enum { CHUNK = 1 << 16 };
    static uint8_t bytes[CHUNK * 4];
    size_t n = t->nbytes / st_dtype_size(t->dtype);
    float fan = 1.0f / sqrtf((float)t->fan_in);
    mk_rng r = {.s = name_seed(seed, t->name)};
    char wname[160];
    if (t->init == INIT_FP8_SCALE)
        fp8_weight_name(t, wname, sizeof wname);
    for (size_t done = 0; done < n;) {
        size_t m = n - done < CHUNK ? n - done : CHUNK;
        for (size_t i = 0; i < m; i++) {
            size_t k = done + i;
            if (t->init == INIT_TRELLIS) {
                r.s += 0x9e3779b97f4a7c15ull;
                uint16_t v = (uint16_t)(mix64(r.s) >> 48);
                memcpy(bytes + 2 * i, &v, 2);
            } else if (t->init == INIT_SIGN || t->init == INIT_SIGN_FAN) {
                float mag = t->init == INIT_SIGN ? 1.0f : fan;
                uint16_t v = st_f32_to_f16(uniform01(&r.s) < 0.5 ? -mag : mag);
                memcpy(bytes + 2 * i, &v, 2);
            } else if (t->init == INIT_MCG) {
                uint32_t v = EXL3_MCG_MARKER;
                memcpy(bytes + 4 * i, &v, 4);
            } else if (t->init == INIT_FP8) {
                int64_t cols = t->shape[1], row = (int64_t)k / cols, col = (int64_t)k % cols;
                float sc = fp8_block_scale(seed, t->name, row / 128, col / 128, fan);
                bytes[i] = st_f32_to_e4m3(normal(&r) * fan / sc);
            } else { /* INIT_FP8_SCALE */
                int64_t cols = t->shape[1];
                float v = fp8_block_scale(seed, wname, (int64_t)k / cols, (int64_t)k % cols, fan);
                memcpy(bytes + 4 * i, &v, 4);
            }
        }
        glm_status st = st_writer_write(w, bytes, m * st_dtype_size(t->dtype), err);
        if (st)
            return st;
        done += m;
    }
    return GLM_OK;
}

static glm_status write_values(st_writer *w, const mk_tensor *t, uint64_t seed, glm_error *err)
{
    if (t->init >= INIT_TRELLIS)
        return write_special(w, t, seed, err);
    enum { CHUNK = 1 << 16 };
    float vals[CHUNK];
    uint16_t half[CHUNK];
    size_t n = t->nbytes / st_dtype_size(t->dtype);
    float fan = 1.0f / sqrtf((float)t->fan_in);
    mk_rng s = {.s = name_seed(seed, t->name)};
    for (size_t done = 0; done < n;) {
        size_t m = n - done < CHUNK ? n - done : CHUNK;
        for (size_t i = 0; i < m; i++)
            vals[i] = draw(t->init, fan, &s);
        glm_status st;
        if (t->dtype == ST_F32)
            st = st_writer_write(w, vals, m * sizeof *vals, err);
        else {
            for (size_t i = 0; i < m; i++)
                half[i] = st_f32_to_bf16(vals[i]);
            st = st_writer_write(w, half, m * sizeof *half, err);
        }
        if (st)
            return st;
        done += m;
    }
    return GLM_OK;
}

/* ---- files -------------------------------------------------------------------------------- */

/* Config fields that transformers types as float: its strict config classes refuse an int there
 * ("swiglu_limit": 10), and cJSON prints a whole double without a decimal point. */
static const char *const float_fields[] = {
    "swiglu_limit", "rms_norm_eps", "hc_eps", "routed_scaling_factor", "linear_lower_bound",
    "gate_lower_bound", "rope_theta", "attention_dropout", "initializer_range",
    "partial_rotary_factor", "layer_norm_eps", "norm_eps", "factor", "beta_fast", "beta_slow",
    "mscale", "mscale_all_dim", "attention_factor", "hidden_dropout", "dropout", "router_aux_loss_coef"};

static int is_float_field(const char *key)
{
    for (size_t i = 0; key && i < sizeof float_fields / sizeof *float_fields; i++)
        if (strcmp(key, float_fields[i]) == 0)
            return 1;
    return 0;
}

int glm_config_json_floats(cJSON *node)
{
    for (cJSON *it = node ? node->child : NULL; it; it = it->next) {
        if (cJSON_IsObject(it) || cJSON_IsArray(it)) {
            if (glm_config_json_floats(it))
                return -1;
            continue;
        }
        double v = it->valuedouble;
        if (!cJSON_IsNumber(it) || !is_float_field(it->string) || v != floor(v) || fabs(v) > 1e15)
            continue;
        char text[32];
        snprintf(text, sizeof text, "%.1f", v);
        cJSON *raw = cJSON_CreateRaw(text);
        if (!raw || !cJSON_ReplaceItemInObjectCaseSensitive(node, it->string, raw)) {
            cJSON_Delete(raw);
            return -1;
        }
        it = raw;
    }
    return 0;
}

static glm_status write_json(const char *dir, const char *file, cJSON *root, glm_error *err)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    char *text = root && !glm_config_json_floats(root) ? cJSON_Print(root) : NULL;
    cJSON_Delete(root);
    if (!text)
        return glm_error_set(err, GLM_ERR_NOMEM, "out of memory writing %s", path);
    FILE *f = fopen(path, "wb");
    glm_status st = GLM_OK;
    if (!f)
        st = glm_error_set(err, GLM_ERR_IO, "cannot create %s: %s", path, strerror(errno));
    else {
        int bad = fputs(text, f) == EOF || fputc('\n', f) == EOF;
        bad |= fclose(f) != 0;
        if (bad)
            st = glm_error_set(err, GLM_ERR_IO, "cannot write %s: %s", path, strerror(errno));
    }
    free(text);
    return st;
}

static cJSON *string_list(int n, const char *(*pick)(const glm_config *, int), const glm_config *c)
{
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; a && i < n; i++)
        cJSON_AddItemToArray(a, cJSON_CreateString(pick(c, i)));
    return a;
}

static const char *attn_name(const glm_config *c, int i)
{
    return c->attn[i] == GLM_ATTN_DSA ? "deepseek_sparse_attention" : "linear_attention";
}

static const char *mlp_name(const glm_config *c, int i)
{
    return c->moe[i] ? "sparse" : "dense";
}

static const char *indexer_name(const glm_config *c, int i)
{
    return c->indexer_shared[i] ? "shared" : "full";
}

static cJSON *eos_list(const glm_config *c)
{
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; a && i < c->n_eos; i++)
        cJSON_AddItemToArray(a, cJSON_CreateNumber(c->eos[i]));
    return a;
}

static cJSON *layer_numbers(const glm_config *c, glm_attn_kind kind)
{
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; a && i < c->num_layers; i++)
        if (c->attn[i] == kind) /* numbered from 1, as the release writes them */
            cJSON_AddItemToArray(a, cJSON_CreateNumber(i + 1));
    return a;
}

/* The keys the published configs add: linear_attn_config in place of the flat linear_* keys,
 * first_k_dense_replace, mhc, moe_router_dtype, index_kpool_compress; and the
 * quantization_config and vision_config of the release. */
static void published_keys(cJSON *root, cJSON *t, const glm_config *c, mk_like like, int vh,
                           int depth)
{
    cJSON *la = cJSON_CreateObject();
    if (la) {
        cJSON_AddNumberToObject(la, "num_heads", c->kda_heads);
        cJSON_AddNumberToObject(la, "head_dim", c->kda_head_dim);
        cJSON_AddNumberToObject(la, "short_conv_kernel_size", c->kda_conv_kernel);
        cJSON_AddNumberToObject(la, "gate_lower_bound", c->kda_lower_bound);
        cJSON_AddItemToObject(la, "kda_layers", layer_numbers(c, GLM_ATTN_KDA));
        cJSON_AddItemToObject(la, "full_attn_layers", layer_numbers(c, GLM_ATTN_DSA));
        cJSON_AddItemToObject(t, "linear_attn_config", la);
    }
    static const char *flat[] = {"linear_num_heads", "linear_head_dim", "linear_conv_kernel_dim",
                                 "linear_lower_bound"};
    for (size_t i = 0; i < sizeof flat / sizeof *flat; i++)
        cJSON_DeleteItemFromObject(t, flat[i]);
    int dense = 0;
    while (dense < c->num_layers && !c->moe[dense])
        dense++;
    cJSON_AddNumberToObject(t, "first_k_dense_replace", dense);
    cJSON_AddBoolToObject(t, "mhc", 1);
    cJSON_AddStringToObject(t, "moe_router_dtype", "float32");
    cJSON_AddBoolToObject(t, "index_kpool_compress", 1);
    cJSON *q = cJSON_CreateObject();
    if (q && like == MK_LIKE_EXL3) {
        cJSON_AddStringToObject(q, "quant_method", "exl3");
        cJSON_AddNumberToObject(q, "bits", 4);
        cJSON_AddStringToObject(q, "codebook", "mcg");
        cJSON_AddNumberToObject(q, "head_bits", 16);
        cJSON_AddStringToObject(q, "scope", "glm53_routed_experts_only");
    } else if (q) {
        cJSON *bs = cJSON_CreateArray();
        cJSON_AddStringToObject(q, "quant_method", "fp8");
        cJSON_AddStringToObject(q, "activation_scheme", "dynamic");
        cJSON_AddItemToArray(bs, cJSON_CreateNumber(128));
        cJSON_AddItemToArray(bs, cJSON_CreateNumber(128));
        cJSON_AddItemToObject(q, "weight_block_size", bs);
    }
    cJSON_AddItemToObject(root, "quantization_config", q);
    cJSON *v = cJSON_CreateObject();
    if (v) {
        cJSON_AddStringToObject(v, "model_type", "glm5_next_vision");
        cJSON_AddNumberToObject(v, "depth", depth);
        cJSON_AddNumberToObject(v, "hidden_size", vh);
        cJSON_AddNumberToObject(v, "intermediate_size", 2 * vh);
        cJSON_AddNumberToObject(v, "out_hidden_size", c->hidden_size);
        cJSON_AddNumberToObject(v, "patch_size", 14);
        cJSON_AddNumberToObject(v, "temporal_patch_size", 2);
        cJSON_AddNumberToObject(v, "spatial_merge_size", 2);
        cJSON_AddNumberToObject(v, "in_channels", 3);
        cJSON_AddItemToObject(root, "vision_config", v);
    }
}

static glm_status write_config(const char *dir, const glm_config *c, st_dtype dtype, mk_like like,
                               int vh, int depth, glm_error *err)
{
    cJSON *root = cJSON_CreateObject(), *t = cJSON_CreateObject(), *arch = cJSON_CreateArray();
    if (!root || !t || !arch) {
        cJSON_Delete(root);
        cJSON_Delete(t);
        cJSON_Delete(arch);
        return glm_error_set(err, GLM_ERR_NOMEM, "out of memory writing config.json");
    }
    cJSON_AddItemToArray(arch, cJSON_CreateString("Glm5NextForConditionalGeneration"));
    cJSON_AddItemToObject(root, "architectures", arch);
    cJSON_AddStringToObject(root, "dtype", dtype == ST_F32 ? "float32" : "bfloat16");
    cJSON_AddStringToObject(root, "model_type", "glm5_next");
    cJSON_AddBoolToObject(root, "tie_word_embeddings", 0);
    cJSON_AddNumberToObject(root, "image_token_id", 154854);
    cJSON_AddNumberToObject(root, "video_token_id", 154855);
    cJSON_AddNumberToObject(root, "image_start_token_id", 154830);
    cJSON_AddNumberToObject(root, "image_end_token_id", 154831);
    cJSON_AddNumberToObject(root, "video_start_token_id", 154832);
    cJSON_AddNumberToObject(root, "video_end_token_id", 154833);
    cJSON_AddStringToObject(t, "model_type", "glm5_next_text");
    cJSON_AddNumberToObject(t, "vocab_size", c->vocab_size);
    cJSON_AddNumberToObject(t, "hidden_size", c->hidden_size);
    cJSON_AddNumberToObject(t, "num_hidden_layers", c->num_layers);
    cJSON_AddNumberToObject(t, "num_nextn_predict_layers", c->num_nextn_predict_layers);
    cJSON_AddNumberToObject(t, "intermediate_size", c->intermediate_size);
    cJSON_AddNumberToObject(t, "moe_intermediate_size", c->moe_intermediate_size);
    cJSON_AddNumberToObject(t, "max_position_embeddings", 1048576);
    cJSON_AddNumberToObject(t, "rms_norm_eps", c->rms_norm_eps);
    cJSON_AddStringToObject(t, "hidden_act", "silu");
    cJSON_AddNumberToObject(t, "swiglu_limit", c->swiglu_limit);
    cJSON_AddBoolToObject(t, "tie_word_embeddings", 0);
    cJSON_AddBoolToObject(t, "attention_bias", 0);
    cJSON_AddNumberToObject(t, "hc_mult", c->hc_mult);
    cJSON_AddNumberToObject(t, "hc_sinkhorn_iters", c->hc_sinkhorn_iters);
    cJSON_AddNumberToObject(t, "hc_eps", c->hc_eps);
    cJSON_AddNumberToObject(t, "linear_num_heads", c->kda_heads);
    cJSON_AddNumberToObject(t, "linear_head_dim", c->kda_head_dim);
    cJSON_AddNumberToObject(t, "linear_conv_kernel_dim", c->kda_conv_kernel);
    cJSON_AddNumberToObject(t, "linear_lower_bound", c->kda_lower_bound);
    cJSON_AddNumberToObject(t, "num_attention_heads", c->num_heads);
    cJSON_AddNumberToObject(t, "num_key_value_heads", c->num_heads);
    cJSON_AddNumberToObject(t, "q_lora_rank", c->q_lora_rank);
    cJSON_AddNumberToObject(t, "kv_lora_rank", c->kv_lora_rank);
    cJSON_AddNumberToObject(t, "qk_nope_head_dim", c->qk_nope_head_dim);
    cJSON_AddNumberToObject(t, "qk_rope_head_dim", 0);
    cJSON_AddNumberToObject(t, "v_head_dim", c->v_head_dim);
    cJSON_AddNumberToObject(t, "head_dim", 0);
    cJSON_AddNumberToObject(t, "index_n_heads", c->index_n_heads);
    cJSON_AddNumberToObject(t, "index_head_dim", c->index_head_dim);
    cJSON_AddNumberToObject(t, "index_topk", c->index_topk);
    cJSON_AddNumberToObject(t, "index_kpool", c->index_kpool);
    cJSON_AddBoolToObject(t, "index_kpool_always_select_tail", 1);
    cJSON_AddNumberToObject(t, "n_routed_experts", c->n_routed_experts);
    cJSON_AddNumberToObject(t, "num_experts_per_tok", c->num_experts_per_tok);
    cJSON_AddNumberToObject(t, "n_shared_experts", c->n_shared_experts);
    cJSON_AddNumberToObject(t, "n_group", c->n_group);
    cJSON_AddNumberToObject(t, "topk_group", c->topk_group);
    cJSON_AddBoolToObject(t, "norm_topk_prob", c->norm_topk_prob);
    cJSON_AddNumberToObject(t, "routed_scaling_factor", c->routed_scaling_factor);
    cJSON_AddStringToObject(t, "scoring_func", "sigmoid");
    cJSON_AddStringToObject(t, "topk_method", "noaux_tc");
    cJSON_AddItemToObject(t, "layer_types", string_list(c->num_layers, attn_name, c));
    cJSON_AddItemToObject(t, "mlp_layer_types", string_list(c->num_layers, mlp_name, c));
    cJSON_AddItemToObject(t, "indexer_types", string_list(c->num_layers, indexer_name, c));
    cJSON_AddNumberToObject(t, "pad_token_id", c->pad_token_id);
    cJSON_AddItemToObject(t, "eos_token_id", eos_list(c));
    if (like != MK_LIKE_NONE)
        published_keys(root, t, c, like, vh, depth);
    cJSON_AddItemToObject(root, "text_config", t);
    return write_json(dir, "config.json", root, err);
}

static glm_status write_generation_config(const char *dir, const glm_config *c, int max_new,
                                          glm_error *err)
{
    cJSON *root = cJSON_CreateObject();
    if (root) {
        cJSON_AddBoolToObject(root, "do_sample", 1);
        cJSON_AddItemToObject(root, "eos_token_id", eos_list(c));
        cJSON_AddNumberToObject(root, "pad_token_id", c->pad_token_id);
        cJSON_AddNumberToObject(root, "max_new_tokens", max_new);
        cJSON_AddNumberToObject(root, "temperature", 1.0);
        cJSON_AddNumberToObject(root, "top_p", 0.95);
    }
    return write_json(dir, "generation_config.json", root, err);
}

static glm_status write_shard(const char *path, const mk_list *l, int shard, uint64_t seed,
                              glm_error *err)
{
    st_writer *w = st_writer_new(path, err);
    if (!w)
        return err ? err->status : GLM_ERR_IO;
    glm_status st = st_writer_metadata(w, "format", "pt", err);
    for (size_t i = 0; !st && i < l->n; i++)
        if (l->t[i].shard == shard)
            st = st_writer_declare(w, l->t[i].name, l->t[i].dtype, l->t[i].ndim, l->t[i].shape, err);
    if (!st)
        st = st_writer_begin(w, err);
    for (size_t i = 0; !st && i < l->n; i++)
        if (l->t[i].shard == shard)
            st = write_values(w, &l->t[i], seed, err);
    if (st) {
        st_writer_abort(w);
        return st;
    }
    return st_writer_close(w, err);
}

static glm_status write_weights(const char *dir, mk_list *l, uint64_t seed, int64_t shard_bytes,
                                glm_error *err)
{
    size_t total = 0, cur = 0;
    int shards = 1;
    for (size_t i = 0; i < l->n; i++) {
        if (cur > 0 && cur + l->t[i].nbytes > (size_t)shard_bytes) {
            shards++;
            cur = 0;
        }
        l->t[i].shard = shards - 1;
        cur += l->t[i].nbytes;
        total += l->t[i].nbytes;
    }
    char path[PATH_MAX];
    if (shards == 1) {
        snprintf(path, sizeof path, "%s/model.safetensors", dir);
        return write_shard(path, l, 0, seed, err);
    }
    cJSON *root = cJSON_CreateObject(), *meta = cJSON_CreateObject(), *map = cJSON_CreateObject();
    if (!root || !meta || !map) {
        cJSON_Delete(root);
        cJSON_Delete(meta);
        cJSON_Delete(map);
        return glm_error_set(err, GLM_ERR_NOMEM, "out of memory writing the index");
    }
    cJSON_AddNumberToObject(meta, "total_size", (double)total);
    cJSON_AddItemToObject(root, "metadata", meta);
    for (size_t i = 0; i < l->n; i++) {
        char shard[64];
        snprintf(shard, sizeof shard, "model-%05d-of-%05d.safetensors", l->t[i].shard + 1, shards);
        cJSON_AddStringToObject(map, l->t[i].name, shard);
    }
    cJSON_AddItemToObject(root, "weight_map", map);
    glm_status st = write_json(dir, "model.safetensors.index.json", root, err);
    for (int s = 0; !st && s < shards; s++) {
        snprintf(path, sizeof path, "%s/model-%05d-of-%05d.safetensors", dir, s + 1, shards);
        st = write_shard(path, l, s, seed, err);
    }
    return st;
}

static int64_t round_up_128(int64_t v)
{
    return (v + 127) / 128 * 128;
}

static glm_status parse_like(const char *name, mk_like *like, glm_error *err)
{
    *like = MK_LIKE_NONE;
    if (!name)
        return GLM_OK;
    if (strcmp(name, "exl3-published") == 0)
        *like = MK_LIKE_EXL3;
    else if (strcmp(name, "fp8-official") == 0)
        *like = MK_LIKE_FP8;
    else
        return glm_error_set(err, GLM_ERR_ARG, "unknown layout '%s' for --like; layouts are:\n%s",
                             name, glm_mkmodel_likes());
    return GLM_OK;
}

/* The published layouts: the MTP layer always; EXL3 needs 128-multiple expert dimensions. */
static void like_shapes(glm_config *c, mk_like like)
{
    c->num_nextn_predict_layers = 1;
    if (like != MK_LIKE_EXL3)
        return;
    c->hidden_size = (int)round_up_128(c->hidden_size);
    c->moe_intermediate_size = (int)round_up_128(c->moe_intermediate_size);
}

static size_t total_bytes(const mk_list *l)
{
    size_t n = 0;
    for (size_t i = 0; i < l->n; i++)
        n += l->t[i].nbytes;
    return n;
}

glm_status glm_mkmodel(const glm_mkmodel_params *p, glm_error *err)
{
    glm_config c;
    st_dtype dtype = ST_F32;
    int max_new = 0;
    mk_like like;
    glm_status st = parse_like(p->like, &like, err);
    if (!st)
        st = preset_config(p->preset ? p->preset : "tiny", &c, &dtype, &max_new, err);
    if (st)
        return st;
    if (like != MK_LIKE_NONE) {
        like_shapes(&c, like);
        dtype = ST_BF16; /* the releases keep their unquantized weights in BF16 */
    }
    if (p->dtype_set)
        dtype = p->dtype == GLM_MKMODEL_BF16 ? ST_BF16 : ST_F32;
    if (dtype != ST_F32 && dtype != ST_BF16)
        return glm_error_set(err, GLM_ERR_ARG, "mkmodel writes F32 or BF16 weights");
    if (mkdir(p->out_dir, 0777) != 0 && errno != EEXIST)
        return glm_error_set(err, GLM_ERR_IO, "cannot create %s: %s", p->out_dir, strerror(errno));
    mk_list l = {.wdtype = dtype};
    int real = c.hidden_size >= 4096;
    int vh = real ? 1024 : 32, depth = real ? 24 : 2;
    st = list_tensors(&l, &c, err);
    if (!st && like != MK_LIKE_NONE && !(st = apply_like(&l, &c, like, err)))
        st = list_vision(&l, &c, vh, depth, err);
    int64_t shard = p->shard_bytes > 0 ? p->shard_bytes : (int64_t)4 << 30;
    if (like != MK_LIKE_NONE && p->shard_bytes <= 0 && (int64_t)(total_bytes(&l) / 4) < shard)
        shard = (int64_t)(total_bytes(&l) / 4) + 1; /* the releases are sharded: so is a tiny one */
    if (!st && !(st = write_config(p->out_dir, &c, dtype, like, vh, depth, err)) &&
        !(st = write_generation_config(p->out_dir, &c, max_new, err)) &&
        !(st = glm_write_tokenizer(p->out_dir, err)))
        st = write_weights(p->out_dir, &l, p->seed, shard, err);
    free(l.t);
    return st;
}
