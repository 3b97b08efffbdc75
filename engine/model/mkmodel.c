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

#include "model/config.h"

typedef enum init_kind {
    INIT_FANIN,  /* normal / sqrt(last dim) */
    INIT_NORM,   /* 1 + 0.2 normal */
    INIT_HALF,   /* 0.5 normal */
    INIT_SMALL,  /* 0.2 normal */
    INIT_BIAS,   /* 0.05 normal */
    INIT_APE,    /* 0.25 normal */
    INIT_ALOG,   /* uniform in [0.2, 1.4] */
} init_kind;

typedef struct mk_tensor {
    char name[160];
    int ndim;
    int64_t shape[3];
    init_kind init;
    st_dtype dtype;
    size_t nbytes;
    int shard;
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
           "small (hidden 256, 8 layers, 16 experts; BF16)\n"
           "small-mtp (small plus the MTP layer, layers.8; BF16)\n"
           "tiny-exl3 (hidden 128, 2 layers, 2 experts 128 wide so `quantize` can EXL3 them; F32)\n"
           "tiny-exl3-tp (tiny-exl3 with experts 256 wide: EXL3 halves for two ranks)\n"
           "small-exl3 (hidden 512, 4 layers, 8 experts 128 wide: once quantized, the smallest model\n"
           "  the CUDA backend's fused EXL3 expert kernels take; F32)\n"
           "real-N (GLM-5.3-Flash shapes with N layers, 3 KDA : 1 DSA; BF16)\n";
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
    int mtp = strcmp(name, "tiny-mtp") == 0;
    if (strcmp(name, "tiny") == 0 || mtp) {
        *c = (glm_config){0};
        base_config(c);
        c->hidden_size = 32, c->num_layers = 8, c->intermediate_size = 64;
        c->moe_intermediate_size = 16, c->num_heads = 2, c->q_lora_rank = 24, c->kv_lora_rank = 16;
        c->qk_nope_head_dim = 8, c->v_head_dim = 8, c->index_n_heads = 8, c->index_head_dim = 8;
        c->index_topk = 16, c->index_kpool = 4, c->kda_heads = 2, c->kda_head_dim = 8;
        c->n_routed_experts = 8, c->num_experts_per_tok = 2;
        c->num_nextn_predict_layers = mtp;
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

static glm_status add(mk_list *l, glm_error *err, init_kind init, int f32, int ndim, int64_t d0,
                      int64_t d1, int64_t d2, const char *fmt, ...)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 512;
        mk_tensor *n = realloc(l->t, cap * sizeof *n);
        if (!n)
            return glm_error_set(err, GLM_ERR_NOMEM, "out of memory listing tensors");
        l->t = n;
        l->cap = cap;
    }
    mk_tensor *t = &l->t[l->n++];
    memset(t, 0, sizeof *t);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t->name, sizeof t->name, fmt, ap);
    va_end(ap);
    t->ndim = ndim;
    t->shape[0] = d0;
    t->shape[1] = d1;
    t->shape[2] = d2;
    t->init = init;
    t->dtype = f32 ? ST_F32 : l->wdtype;
    size_t n = 1;
    for (int i = 0; i < ndim; i++)
        n *= (size_t)t->shape[i];
    t->nbytes = n * st_dtype_size(t->dtype);
    return GLM_OK;
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
    uint64_t h = 1469598103934665603ull ^ mix64(seed + 1);
    for (const unsigned char *p = (const unsigned char *)name; *p; p++)
        h = (h ^ *p) * 1099511628211ull;
    return mix64(h);
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

static glm_status write_values(st_writer *w, const mk_tensor *t, uint64_t seed, glm_error *err)
{
    enum { CHUNK = 1 << 16 };
    float vals[CHUNK];
    uint16_t half[CHUNK];
    size_t n = t->nbytes / st_dtype_size(t->dtype);
    float fan = 1.0f / sqrtf((float)t->shape[t->ndim - 1]);
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

static glm_status write_json(const char *dir, const char *file, cJSON *root, glm_error *err)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    char *text = root ? cJSON_Print(root) : NULL;
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

static glm_status write_config(const char *dir, const glm_config *c, st_dtype dtype, glm_error *err)
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

glm_status glm_mkmodel(const glm_mkmodel_params *p, glm_error *err)
{
    glm_config c;
    st_dtype dtype = ST_F32;
    int max_new = 0;
    glm_status st = preset_config(p->preset ? p->preset : "tiny", &c, &dtype, &max_new, err);
    if (st)
        return st;
    if (p->dtype_set)
        dtype = p->dtype;
    if (dtype != ST_F32 && dtype != ST_BF16)
        return glm_error_set(err, GLM_ERR_ARG, "mkmodel writes F32 or BF16 weights");
    if (mkdir(p->out_dir, 0777) != 0 && errno != EEXIST)
        return glm_error_set(err, GLM_ERR_IO, "cannot create %s: %s", p->out_dir, strerror(errno));
    mk_list l = {.wdtype = dtype};
    int64_t shard = p->shard_bytes > 0 ? p->shard_bytes : (int64_t)4 << 30;
    if (!(st = list_tensors(&l, &c, err)) && !(st = write_config(p->out_dir, &c, dtype, err)) &&
        !(st = write_generation_config(p->out_dir, &c, max_new, err)) &&
        !(st = glm_write_tokenizer(p->out_dir, err)))
        st = write_weights(p->out_dir, &l, p->seed, shard, err);
    free(l.t);
    return st;
}
