/* config.c: config.json (glm5_next, nested text_config or flat) to glm_config, using the
 * defaults of the reference implementation; every refusal names the field and its value. */
#include "model/config.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

typedef struct cfg_ctx {
    const cJSON *text; /* the object holding the text fields */
    const char *path;
    glm_error *err;
    glm_status st;
} cfg_ctx;

static const cJSON *field(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return v;
}

static int fail(cfg_ctx *x, glm_status st, const char *fmt, const char *key, const char *detail)
{
    if (!x->st)
        x->st = glm_error_set(x->err, st, fmt, x->path, key, detail);
    return -1;
}

/* The range every integer field may take: wide enough for every published GLM-5.3-Flash shape
 * (research/architecture.md) and every fixture, narrow enough that no value can make a load or a
 * token take unbounded time or memory (hc_sinkhorn_iters 10^9 once spent an hour a token). A key
 * not listed here is bounded only by int. Keys are matched wherever they appear (text fields,
 * linear_attn_config, generation_config.json). */
typedef struct int_bound {
    const char *key;
    int min, max;
} int_bound;

static const int_bound int_bounds[] = {
    {"vocab_size", 1, 1 << 21},
    {"hidden_size", 1, 1 << 16},
    {"num_hidden_layers", 1, GLM_MAX_LAYERS},
    {"intermediate_size", 1, 1 << 18},
    {"hc_mult", 1, 16},
    {"hc_sinkhorn_iters", 1, 100},
    {"num_nextn_predict_layers", 0, 16},
    {"first_k_dense_replace", 0, GLM_MAX_LAYERS},
    {"index_topk_freq", 1, GLM_MAX_LAYERS},
    {"index_skip_topk_offset", 0, GLM_MAX_LAYERS},
    {"max_position_embeddings", 1, 1 << 24},
    {"linear_num_heads", 1, 1024},
    {"linear_head_dim", 1, 1024},
    {"linear_conv_kernel_dim", 1, 64},
    {"num_heads", 1, 1024},              /* linear_attn_config */
    {"head_dim", 1, 1024},               /* linear_attn_config */
    {"short_conv_kernel_size", 1, 64},   /* linear_attn_config */
    {"n_routed_experts", 1, 4096},
    {"num_experts_per_tok", 1, 256},
    {"n_shared_experts", 0, 64},
    {"n_group", 1, 4096},
    {"topk_group", 1, 4096},
    {"moe_intermediate_size", 1, 1 << 18},
    {"num_attention_heads", 1, 1024},
    {"num_key_value_heads", 1, 1024},
    {"q_lora_rank", 1, 1 << 16},
    {"kv_lora_rank", 1, 1 << 16},
    {"qk_nope_head_dim", 1, 4096},
    {"qk_rope_head_dim", 0, 4096},
    {"v_head_dim", 1, 4096},
    {"index_n_heads", 1, 1024},
    {"index_head_dim", 1, 4096},
    {"index_topk", 1, 1 << 24},
    {"index_kpool", 1, 64},
    {"eos_token_id", 0, (1 << 21) - 1},  /* each id, in config and generation_config */
    {"quantization_config.weight_block_size", 1, 4096},
    {"max_new_tokens", 0, 1 << 24},      /* generation_config.json */
    {"top_k", 0, 1 << 21},               /* generation_config.json */
};

static const int_bound *bound_of(const char *key)
{
    for (size_t i = 0; i < sizeof int_bounds / sizeof *int_bounds; i++)
        if (strcmp(int_bounds[i].key, key) == 0)
            return &int_bounds[i];
    return NULL;
}

/* Refuses v outside key's bound, naming the bound; values already checked to be integers. */
static int check_bound(cfg_ctx *x, const char *key, double v)
{
    const int_bound *b = bound_of(key);
    double lo = b ? b->min : INT_MIN, hi = b ? b->max : INT_MAX;
    if (v >= lo && v <= hi)
        return 0;
    char detail[96];
    snprintf(detail, sizeof detail, "%.0f is out of range (min %.0f, max %.0f)", v, lo, hi);
    return fail(x, GLM_ERR_FORMAT, "%s: field %s: %s", key, detail);
}

/* Integer field with a default, checked against its bound in int_bounds. */
static int get_int(cfg_ctx *x, const cJSON *o, const char *key, int def, int *out)
{
    const cJSON *v = field(o, key);
    if (!v) {
        *out = def;
        return 0;
    }
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || v->valuedouble != floor(v->valuedouble))
        return fail(x, GLM_ERR_FORMAT, "%s: field %s must be an integer%s", key, "");
    if (check_bound(x, key, v->valuedouble))
        return -1;
    *out = (int)v->valuedouble;
    return 0;
}

static int get_float(cfg_ctx *x, const cJSON *o, const char *key, float def, float *out)
{
    const cJSON *v = field(o, key);
    if (!v) {
        *out = def;
        return 0;
    }
    if (!cJSON_IsNumber(v))
        return fail(x, GLM_ERR_FORMAT, "%s: field %s must be a number%s", key, "");
    *out = (float)v->valuedouble;
    return 0;
}

static int get_bool(cfg_ctx *x, const cJSON *o, const char *key, int def, int *out)
{
    const cJSON *v = field(o, key);
    if (!v) {
        *out = def;
        return 0;
    }
    if (!cJSON_IsBool(v))
        return fail(x, GLM_ERR_FORMAT, "%s: field %s must be true or false%s", key, "");
    *out = cJSON_IsTrue(v);
    return 0;
}

/* The JSON text of v, shortened for messages. */
static void value_text(const cJSON *v, char *buf, size_t n)
{
    char *t = v ? cJSON_PrintUnformatted(v) : NULL;
    snprintf(buf, n, "%.60s%s", t ? t : "missing", t && strlen(t) > 60 ? "..." : "");
    free(t);
}

/* "PATH: field KEY is VALUE; WHY" */
static int fail_value(cfg_ctx *x, glm_status st, const char *key, const cJSON *v, const char *why)
{
    char val[80], detail[400];
    value_text(v, val, sizeof val);
    snprintf(detail, sizeof detail, "%s; %s", val, why);
    return fail(x, st, "%s: field %s is %s", key, detail);
}

static int positive(cfg_ctx *x, const char *key, int v)
{
    if (v > 0)
        return 0;
    char buf[32];
    snprintf(buf, sizeof buf, "%d", v);
    return fail(x, GLM_ERR_FORMAT, "%s: field %s must be positive, not %s", key, buf);
}

static int string_is(const cJSON *v, const char *s)
{
    return cJSON_IsString(v) && strcmp(v->valuestring, s) == 0;
}

static int check_string(cfg_ctx *x, const cJSON *o, const char *key, const char *only)
{
    const cJSON *v = field(o, key);
    if (!v || cJSON_IsNull(v) || string_is(v, only))
        return 0;
    char detail[160];
    snprintf(detail, sizeof detail, "%.80s (only %s is supported)",
             cJSON_IsString(v) ? v->valuestring : "a non-string", only);
    return fail(x, GLM_ERR_UNSUPPORTED, "%s: field %s is %s", key, detail);
}

static int parse_layer_types(cfg_ctx *x, glm_config *c)
{
    const cJSON *lt = field(x->text, "layer_types");
    int n = c->num_layers;
    if (!lt || cJSON_IsNull(lt)) {
        for (int i = 0; i < n; i++)
            c->attn[i] = i % 4 == 3 ? GLM_ATTN_DSA : GLM_ATTN_KDA;
        return 0;
    }
    if (!cJSON_IsArray(lt) || cJSON_GetArraySize(lt) != n)
        return fail(x, GLM_ERR_FORMAT, "%s: field %s must list one type per layer "
                    "(num_hidden_layers)%s", "layer_types", "");
    for (int i = 0; i < n; i++) {
        const cJSON *v = cJSON_GetArrayItem(lt, i);
        if (string_is(v, "linear_attention"))
            c->attn[i] = GLM_ATTN_KDA;
        else if (string_is(v, "deepseek_sparse_attention") || string_is(v, "full_attention"))
            c->attn[i] = GLM_ATTN_DSA;
        else
            return fail(x, GLM_ERR_UNSUPPORTED, "%s: field %s has an unknown layer type %s",
                        "layer_types", cJSON_IsString(v) ? v->valuestring : "(not a string)");
    }
    return 0;
}

static int parse_mlp_types(cfg_ctx *x, glm_config *c)
{
    const cJSON *mt = field(x->text, "mlp_layer_types");
    int n = c->num_layers, dense = n < 3 ? n : 3;
    if (!mt || cJSON_IsNull(mt)) {
        int fk;
        if (get_int(x, x->text, "first_k_dense_replace", dense, &fk))
            return -1;
        if (fk != dense)
            return fail(x, GLM_ERR_UNSUPPORTED, "%s: field %s disagrees with the reference "
                        "default of 3 dense layers; give mlp_layer_types explicitly%s",
                        "first_k_dense_replace", "");
        for (int i = 0; i < n; i++)
            c->moe[i] = i >= dense;
        return 0;
    }
    if (!cJSON_IsArray(mt) || cJSON_GetArraySize(mt) != n)
        return fail(x, GLM_ERR_FORMAT, "%s: field %s must list one type per layer%s",
                    "mlp_layer_types", "");
    for (int i = 0; i < n; i++) {
        const cJSON *v = cJSON_GetArrayItem(mt, i);
        if (string_is(v, "dense"))
            c->moe[i] = 0;
        else if (string_is(v, "sparse"))
            c->moe[i] = 1;
        else
            return fail(x, GLM_ERR_UNSUPPORTED, "%s: field %s has an unknown type %s",
                        "mlp_layer_types", cJSON_IsString(v) ? v->valuestring : "(not a string)");
    }
    const cJSON *fk = field(x->text, "first_k_dense_replace");
    if (!fk || cJSON_IsNull(fk))
        return 0;
    int k;
    if (get_int(x, x->text, "first_k_dense_replace", 0, &k))
        return -1;
    int leading = 0; /* the dense layers mlp_layer_types puts first */
    while (leading < n && !c->moe[leading])
        leading++;
    for (int i = leading; i < n; i++)
        if (!c->moe[i])
            return 0; /* dense layers past the first run: first_k_dense_replace cannot say so */
    if (k != leading) {
        char detail[160];
        snprintf(detail, sizeof detail, "%d, but mlp_layer_types makes the first %d layers dense",
                 k, leading);
        return fail(x, GLM_ERR_FORMAT, "%s: field %s is %s; the two must agree",
                    "first_k_dense_replace", detail);
    }
    return 0;
}

/* indexer_types, else index_topk_pattern ("FS..."), else the freq/offset schedule. */
static int parse_indexer_types(cfg_ctx *x, glm_config *c)
{
    const cJSON *it = field(x->text, "indexer_types");
    const cJSON *pat = field(x->text, "index_topk_pattern");
    int n = c->num_layers;
    if (it && !cJSON_IsNull(it)) {
        if (!cJSON_IsArray(it) || cJSON_GetArraySize(it) != n)
            return fail(x, GLM_ERR_FORMAT, "%s: field %s must list one type per layer%s",
                        "indexer_types", "");
        for (int i = 0; i < n; i++) {
            const cJSON *v = cJSON_GetArrayItem(it, i);
            if (string_is(v, "full"))
                c->indexer_shared[i] = 0;
            else if (string_is(v, "shared"))
                c->indexer_shared[i] = 1;
            else
                return fail(x, GLM_ERR_UNSUPPORTED, "%s: field %s has an unknown type %s",
                            "indexer_types", cJSON_IsString(v) ? v->valuestring : "(not a string)");
        }
    } else if (cJSON_IsString(pat)) {
        if ((int)strlen(pat->valuestring) != n)
            return fail(x, GLM_ERR_FORMAT, "%s: field %s must have one letter per layer%s",
                        "index_topk_pattern", "");
        for (int i = 0; i < n; i++) {
            char ch = pat->valuestring[i];
            if (ch != 'F' && ch != 'S')
                return fail(x, GLM_ERR_FORMAT, "%s: field %s may hold only F and S, not %s",
                            "index_topk_pattern", pat->valuestring);
            c->indexer_shared[i] = ch == 'S';
        }
    } else {
        int freq, offset;
        if (get_int(x, x->text, "index_topk_freq", 1, &freq) ||
            get_int(x, x->text, "index_skip_topk_offset", 2, &offset))
            return -1;
        if (freq < 1)
            freq = 1;
        for (int i = 0; i < n; i++) {
            int d = i - offset + 1;
            c->indexer_shared[i] = ((d > 0 ? d : 0) % freq) != 0;
        }
    }
    for (int i = 0; i < n; i++) {
        if (c->attn[i] != GLM_ATTN_DSA) {
            c->indexer_shared[i] = 0; /* KDA layers have no indexer */
            continue;
        }
        if (c->indexer_shared[i] &&
            (i == 0 || c->attn[i - 1] != GLM_ATTN_DSA || c->indexer_shared[i - 1])) {
            char buf[96];
            snprintf(buf, sizeof buf, "%d is shared but layer %d is not a full DSA layer", i, i - 1);
            return fail(x, GLM_ERR_UNSUPPORTED, "%s: field %s: layer %s (a shared layer reuses the "
                        "selection of the DSA layer just before it)", "indexer_types", buf);
        }
    }
    return 0;
}

/* linear_attn_config.kda_layers / full_attn_layers: layer numbers (1-based as the release
 * writes them, or 0-based) that must split the layers as layer_types does; without layer_types
 * they give the layer kinds. */
static int layer_list(cfg_ctx *x, const cJSON *la, const char *key, int n, unsigned char *mark,
                      int *lo, int *hi)
{
    const cJSON *v = field(la, key);
    if (!v || cJSON_IsNull(v))
        return 0;
    if (!cJSON_IsArray(v))
        return fail_value(x, GLM_ERR_FORMAT, key, v, "it must list layer numbers");
    for (const cJSON *e = v->child; e; e = e->next) {
        if (!cJSON_IsNumber(e) || e->valuedouble != (double)e->valueint || e->valueint < 0 ||
            e->valueint > n)
            return fail_value(x, GLM_ERR_FORMAT, key, v, "it must list layer numbers of this model");
        if (mark[e->valueint]++)
            return fail_value(x, GLM_ERR_FORMAT, key, v, "a layer is listed twice");
        *lo = e->valueint < *lo ? e->valueint : *lo;
        *hi = e->valueint > *hi ? e->valueint : *hi;
    }
    return 0;
}

static int parse_layer_lists(cfg_ctx *x, const cJSON *la, glm_config *c)
{
    int n = c->num_layers, lo = n + 1, hi = -1;
    unsigned char kda[GLM_MAX_LAYERS + 1] = {0}, full[GLM_MAX_LAYERS + 1] = {0},
                  both[GLM_MAX_LAYERS + 1] = {0};
    const cJSON *kl = field(la, "kda_layers"), *fl = field(la, "full_attn_layers");
    if ((!kl || cJSON_IsNull(kl)) && (!fl || cJSON_IsNull(fl)))
        return 0;
    if (layer_list(x, la, "kda_layers", n, kda, &lo, &hi) ||
        layer_list(x, la, "full_attn_layers", n, full, &lo, &hi))
        return -1;
    for (int i = 0; i <= n; i++)
        both[i] = (unsigned char)(kda[i] + full[i]);
    int base = lo == 0 ? 0 : 1; /* 0-based lists hold layer 0, 1-based ones layer n */
    for (int i = 0; i < n; i++)
        if (both[i + base] != 1 || (base == 0 && both[n]) || (base == 1 && both[0]))
            return fail(x, GLM_ERR_FORMAT, "%s: field %s and full_attn_layers must together "
                        "name every layer once%s", "linear_attn_config.kda_layers", "");
    const cJSON *lt = field(x->text, "layer_types");
    for (int i = 0; i < n; i++) {
        glm_attn_kind k = kda[i + base] ? GLM_ATTN_KDA : GLM_ATTN_DSA;
        if (!lt || cJSON_IsNull(lt)) {
            c->attn[i] = k;
            continue;
        }
        if (c->attn[i] != k) {
            char detail[200];
            snprintf(detail, sizeof detail, "layer %d (numbered %d there) %s, but layer_types "
                     "says %s", i, i + base, k == GLM_ATTN_KDA ? "a KDA layer" : "a full "
                     "attention layer", c->attn[i] == GLM_ATTN_KDA ? "linear_attention" :
                     "deepseek_sparse_attention");
            return fail(x, GLM_ERR_FORMAT, "%s: field %s makes %s", "linear_attn_config.kda_layers",
                        detail);
        }
    }
    (void)hi;
    return 0;
}

static int parse_linear_attn(cfg_ctx *x, glm_config *c)
{
    const cJSON *t = x->text;
    const cJSON *lb = field(t, "linear_lower_bound");
    if (get_int(x, t, "max_position_embeddings", 1048576, &c->max_position_embeddings) ||
        get_int(x, t, "linear_num_heads", 64, &c->kda_heads) ||
        get_int(x, t, "linear_head_dim", 128, &c->kda_head_dim) ||
        get_int(x, t, "linear_conv_kernel_dim", 4, &c->kda_conv_kernel))
        return -1;
    c->kda_has_lower_bound = 1;
    c->kda_lower_bound = -5.0f;
    if (lb && cJSON_IsNull(lb))
        c->kda_has_lower_bound = 0;
    else if (get_float(x, t, "linear_lower_bound", -5.0f, &c->kda_lower_bound))
        return -1;
    const cJSON *la = field(t, "linear_attn_config");
    if (!la || cJSON_IsNull(la))
        return 0;
    if (!cJSON_IsObject(la))
        return fail(x, GLM_ERR_FORMAT, "%s: field %s must be an object%s", "linear_attn_config", "");
    if (get_int(x, la, "num_heads", c->kda_heads, &c->kda_heads) ||
        get_int(x, la, "head_dim", c->kda_head_dim, &c->kda_head_dim) ||
        get_int(x, la, "short_conv_kernel_size", c->kda_conv_kernel, &c->kda_conv_kernel))
        return -1;
    const cJSON *glb = field(la, "gate_lower_bound");
    if (glb && cJSON_IsNull(glb))
        c->kda_has_lower_bound = 0;
    else if (glb) {
        if (get_float(x, la, "gate_lower_bound", -5.0f, &c->kda_lower_bound))
            return -1;
        c->kda_has_lower_bound = 1;
    }
    if (parse_layer_lists(x, la, c))
        return -1;
    int safe;
    if (get_bool(x, la, "safe_gate", 1, &safe))
        return -1;
    if (safe && !c->kda_has_lower_bound) {
        c->kda_has_lower_bound = 1;
        c->kda_lower_bound = -5.0f;
    }
    return 0;
}

static int parse_moe(cfg_ctx *x, glm_config *c)
{
    const cJSON *t = x->text;
    c->n_routed_experts_given = field(t, "n_routed_experts") != NULL;
    const cJSON *rd = field(t, "moe_router_dtype");
    if (rd && !cJSON_IsNull(rd) && !string_is(rd, "float32") && !string_is(rd, "fp32"))
        return fail_value(x, GLM_ERR_UNSUPPORTED, "moe_router_dtype", rd,
                          "glmchat computes the router in float32 only");
    if (get_int(x, t, "n_routed_experts", 288, &c->n_routed_experts) ||
        get_int(x, t, "num_experts_per_tok", 8, &c->num_experts_per_tok) ||
        get_int(x, t, "n_shared_experts", 1, &c->n_shared_experts) ||
        get_int(x, t, "n_group", 1, &c->n_group) || get_int(x, t, "topk_group", 1, &c->topk_group) ||
        get_bool(x, t, "norm_topk_prob", 1, &c->norm_topk_prob) ||
        get_float(x, t, "routed_scaling_factor", 2.5f, &c->routed_scaling_factor) ||
        get_int(x, t, "moe_intermediate_size", 2048, &c->moe_intermediate_size) ||
        check_string(x, t, "scoring_func", "sigmoid") || check_string(x, t, "topk_method", "noaux_tc"))
        return -1;
    if (positive(x, "n_routed_experts", c->n_routed_experts) ||
        positive(x, "num_experts_per_tok", c->num_experts_per_tok) ||
        positive(x, "n_group", c->n_group) || positive(x, "topk_group", c->topk_group) ||
        positive(x, "moe_intermediate_size", c->moe_intermediate_size))
        return -1;
    if (c->n_shared_experts < 0)
        return fail(x, GLM_ERR_FORMAT, "%s: field %s must not be negative%s", "n_shared_experts", "");
    if (c->n_routed_experts % c->n_group || c->n_routed_experts / c->n_group < 2)
        return fail(x, GLM_ERR_FORMAT, "%s: field %s must split n_routed_experts into groups of at "
                    "least 2 experts%s", "n_group", "");
    if (c->topk_group > c->n_group)
        return fail(x, GLM_ERR_FORMAT, "%s: field %s exceeds n_group%s", "topk_group", "");
    if (c->num_experts_per_tok > c->topk_group * (c->n_routed_experts / c->n_group))
        return fail(x, GLM_ERR_FORMAT, "%s: field %s exceeds the experts the chosen groups hold%s",
                    "num_experts_per_tok", "");
    return 0;
}

static int parse_dsa(cfg_ctx *x, glm_config *c)
{
    const cJSON *t = x->text;
    c->index_kpool_given = field(t, "index_kpool") != NULL;
    int kv_heads, rope, attn_bias, tail, compress;
    const cJSON *qr = field(t, "q_lora_rank");
    if (qr && cJSON_IsNull(qr))
        return fail(x, GLM_ERR_UNSUPPORTED, "%s: field %s is null; DSA layers need a q LoRA%s",
                    "q_lora_rank", "");
    if (get_int(x, t, "num_attention_heads", 64, &c->num_heads) ||
        get_int(x, t, "num_key_value_heads", c->num_heads, &kv_heads) ||
        get_int(x, t, "q_lora_rank", 1536, &c->q_lora_rank) ||
        get_int(x, t, "kv_lora_rank", 512, &c->kv_lora_rank) ||
        get_int(x, t, "qk_nope_head_dim", 256, &c->qk_nope_head_dim) ||
        get_int(x, t, "qk_rope_head_dim", 0, &rope) || get_int(x, t, "v_head_dim", 256, &c->v_head_dim) ||
        get_int(x, t, "index_n_heads", 32, &c->index_n_heads) ||
        get_int(x, t, "index_head_dim", 128, &c->index_head_dim) ||
        get_int(x, t, "index_topk", 2048, &c->index_topk) ||
        get_int(x, t, "index_kpool", 16, &c->index_kpool) ||
        get_bool(x, t, "attention_bias", 0, &attn_bias) ||
        get_bool(x, t, "index_kpool_always_select_tail", 1, &tail) ||
        get_bool(x, t, "index_kpool_compress", 1, &compress))
        return -1;
    if (positive(x, "num_attention_heads", c->num_heads) || positive(x, "q_lora_rank", c->q_lora_rank) ||
        positive(x, "kv_lora_rank", c->kv_lora_rank) ||
        positive(x, "qk_nope_head_dim", c->qk_nope_head_dim) || positive(x, "v_head_dim", c->v_head_dim) ||
        positive(x, "index_n_heads", c->index_n_heads) ||
        positive(x, "index_head_dim", c->index_head_dim) || positive(x, "index_topk", c->index_topk) ||
        positive(x, "index_kpool", c->index_kpool))
        return -1;
    if (kv_heads != c->num_heads)
        return fail(x, GLM_ERR_FORMAT, "%s: field %s must equal num_attention_heads%s",
                    "num_key_value_heads", "");
    if (rope != 0)
        return fail(x, GLM_ERR_UNSUPPORTED, "%s: field %s must be 0 (the DSA layers use no RoPE)%s",
                    "qk_rope_head_dim", "");
    if (attn_bias)
        return fail(x, GLM_ERR_UNSUPPORTED, "%s: field %s is true; glmchat supports only "
                    "bias-free attention projections%s", "attention_bias", "");
    if (!tail)
        return fail(x, GLM_ERR_UNSUPPORTED, "%s: field %s is false; glmchat supports only true "
                    "(the reference leaves early tokens without keys otherwise)%s",
                    "index_kpool_always_select_tail", "");
    if (!compress)
        return fail(x, GLM_ERR_UNSUPPORTED, "%s: field %s is false; glmchat supports only gated "
                    "pool keys (true)%s", "index_kpool_compress", "");
    if (!c->index_kpool_given)
        return 0; /* the indexer's tensors give it at open (glm_config_from_tensors) */
    if (c->index_kpool > 64)
        return fail(x, GLM_ERR_UNSUPPORTED, "%s: field %s is above glmchat's limit of 64%s",
                    "index_kpool", "");
    if (c->index_topk % c->index_kpool)
        return fail(x, GLM_ERR_FORMAT, "%s: field %s must be a multiple of index_kpool%s",
                    "index_topk", "");
    return 0;
}

static int parse_eos(cfg_ctx *x, const cJSON *v, int *n, int *ids)
{
    *n = 0;
    if (!v || cJSON_IsNull(v))
        return 0;
    if (cJSON_IsNumber(v)) {
        if (check_bound(x, "eos_token_id", v->valuedouble))
            return -1;
        ids[(*n)++] = v->valueint;
        return 0;
    }
    if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) > GLM_MAX_EOS)
        return fail(x, GLM_ERR_FORMAT, "%s: field %s must be an id or a short list of ids%s",
                    "eos_token_id", "");
    for (const cJSON *e = v->child; e; e = e->next) {
        if (!cJSON_IsNumber(e))
            return fail(x, GLM_ERR_FORMAT, "%s: field %s holds a non-number%s", "eos_token_id", "");
        if (check_bound(x, "eos_token_id", e->valuedouble))
            return -1;
        ids[(*n)++] = e->valueint;
    }
    return 0;
}

static int parse_fp8(cfg_ctx *x, const cJSON *q, glm_config *c)
{
    const cJSON *bs = field(q, "weight_block_size");
    c->fp8_block_rows = c->fp8_block_cols = 128;
    if (bs && (!cJSON_IsArray(bs) || cJSON_GetArraySize(bs) != 2 ||
               !cJSON_IsNumber(bs->child) || !cJSON_IsNumber(bs->child->next)))
        return fail(x, GLM_ERR_FORMAT, "%s: field %s must be [rows, cols]%s",
                    "quantization_config.weight_block_size", "");
    if (bs && (check_bound(x, "quantization_config.weight_block_size", bs->child->valuedouble) ||
               check_bound(x, "quantization_config.weight_block_size",
                           bs->child->next->valuedouble)))
        return -1;
    if (bs) {
        c->fp8_block_rows = bs->child->valueint;
        c->fp8_block_cols = bs->child->next->valueint;
    }
    if (c->fp8_block_rows <= 0 || c->fp8_block_cols <= 0)
        return fail(x, GLM_ERR_FORMAT, "%s: field %s must be positive%s",
                    "quantization_config.weight_block_size", "");
    return 0;
}

/* research/exl3.md 1.2. The tensors carry what decoding needs (K from the trellis shape, the
 * codebook from the marker), so the fields are checked for what glmchat can honour. */
static int parse_exl3(cfg_ctx *x, const cJSON *q, glm_config *c)
{
    c->exl3 = 1;
    c->exl3_bits = 0;
    const cJSON *bits = field(q, "bits");
    if (cJSON_IsNumber(bits)) {
        if (!(bits->valuedouble >= 1.0 && bits->valuedouble <= 8.0))
            return fail(x, GLM_ERR_UNSUPPORTED, "%s: field %s must be between 1 and 8 (EXL3 "
                        "stores 1 to 8 bits a weight)%s", "quantization_config.bits", "");
        c->exl3_bits = bits->valuedouble;
    } else if (bits && !cJSON_IsString(bits)) { /* a string marks mixed widths: read per tensor */
        return fail(x, GLM_ERR_FORMAT, "%s: field %s must be a number%s",
                    "quantization_config.bits", "");
    }
    /* head_bits: 1..8 for an EXL3 head, 16 for one left unquantized (the head tensor says
     * which it is; the value is checked only for what exllamav3 writes) */
    const cJSON *hb = field(q, "head_bits");
    c->exl3_head_bits = 0;
    if (hb && (!cJSON_IsNumber(hb) || hb->valuedouble != (double)hb->valueint ||
               ((hb->valueint < 1 || hb->valueint > 8) && hb->valueint != 16)))
        return fail_value(x, GLM_ERR_UNSUPPORTED, "quantization_config.head_bits", hb,
                          "it must be an integer from 1 to 8 (an EXL3 head) or 16 (an "
                          "unquantized head)");
    if (hb)
        c->exl3_head_bits = hb->valueint;
    const cJSON *scope = field(q, "scope");
    if (scope && !cJSON_IsNull(scope) && !cJSON_IsString(scope))
        return fail_value(x, GLM_ERR_FORMAT, "quantization_config.scope", scope,
                          "it must be a string (the tensors say which are quantized)");
    const cJSON *cb = field(q, "codebook");
    c->exl3_codebook = -1;
    if (cb && !string_is(cb, "mcg") && !string_is(cb, "mul1") && !string_is(cb, "3inst"))
        return fail(x, GLM_ERR_UNSUPPORTED, "%s: field %s is %s; glmchat decodes the mcg, mul1 "
                    "and 3inst codebooks", "quantization_config.codebook",
                    cJSON_IsString(cb) ? cb->valuestring : "not a string");
    if (cb)
        c->exl3_codebook = string_is(cb, "mcg")    ? EXL3_CB_MCG
                           : string_is(cb, "mul1") ? EXL3_CB_MUL1
                                                   : EXL3_CB_3INST;
    const cJSON *os = field(q, "out_scales");
    if (os && !cJSON_IsBool(os) && !string_is(os, "always") && !string_is(os, "never") &&
        !string_is(os, "auto"))
        return fail(x, GLM_ERR_FORMAT, "%s: field %s must be \"always\", \"never\" or "
                    "\"auto\"%s", "quantization_config.out_scales", "");
    const cJSON *orig = field(q, "original_quantization_config");
    if (!orig || cJSON_IsNull(orig))
        return 0;
    const cJSON *om = field(orig, "quant_method");
    if (string_is(om, "fp8"))
        return parse_fp8(x, orig, c);
    return fail(x, GLM_ERR_UNSUPPORTED, "%s: field %s is %s; beside EXL3 glmchat reads fp8 block "
                "scales only", "quantization_config.original_quantization_config.quant_method",
                cJSON_IsString(om) ? om->valuestring : "missing");
}

static int parse_quant(cfg_ctx *x, const cJSON *root, glm_config *c)
{
    const cJSON *q = field(root, "quantization_config");
    if (!q)
        q = field(x->text, "quantization_config");
    c->fp8_block_rows = c->fp8_block_cols = 0;
    c->exl3 = 0;
    c->exl3_bits = 0;
    c->exl3_head_bits = 0;
    c->exl3_codebook = -1;
    if (!q || cJSON_IsNull(q))
        return 0;
    const cJSON *m = field(q, "quant_method");
    if (string_is(m, "fp8"))
        return parse_fp8(x, q, c);
    if (string_is(m, "exl3"))
        return parse_exl3(x, q, c);
    return fail(x, GLM_ERR_UNSUPPORTED, "%s: field %s is %s (glmchat reads fp8 block scales and "
                "exl3)", "quantization_config.quant_method",
                cJSON_IsString(m) ? m->valuestring : "missing");
}

static int parse_text(cfg_ctx *x, const cJSON *root, glm_config *c)
{
    const cJSON *t = x->text;
    if (get_int(x, t, "vocab_size", 154880, &c->vocab_size) ||
        get_int(x, t, "hidden_size", 4096, &c->hidden_size) ||
        get_int(x, t, "num_hidden_layers", 45, &c->num_layers) ||
        get_int(x, t, "intermediate_size", 12288, &c->intermediate_size) ||
        get_float(x, t, "rms_norm_eps", 1e-5f, &c->rms_norm_eps) ||
        get_float(x, t, "swiglu_limit", 10.0f, &c->swiglu_limit) ||
        get_int(x, t, "hc_mult", 4, &c->hc_mult) ||
        get_int(x, t, "hc_sinkhorn_iters", 20, &c->hc_sinkhorn_iters) ||
        get_float(x, t, "hc_eps", 1e-6f, &c->hc_eps) ||
        get_int(x, t, "num_nextn_predict_layers", 0, &c->num_nextn_predict_layers) ||
        check_string(x, t, "hidden_act", "silu"))
        return -1;
    c->nextn_given = field(t, "num_nextn_predict_layers") != NULL;
    if (c->num_nextn_predict_layers < 0)
        return positive(x, "num_nextn_predict_layers", c->num_nextn_predict_layers);
    const cJSON *mhc = field(t, "mhc");
    if (mhc && !cJSON_IsNull(mhc) && !cJSON_IsTrue(mhc))
        return fail_value(x, GLM_ERR_UNSUPPORTED, "mhc", mhc, "glmchat computes the "
                          "manifold-constrained hyper-connections (mhc true) only");
    int tie_text, tie_top;
    if (get_bool(x, root, "tie_word_embeddings", 0, &tie_top) ||
        get_bool(x, t, "tie_word_embeddings", tie_top, &tie_text))
        return -1;
    c->tie_word_embeddings = tie_text;
    if (positive(x, "vocab_size", c->vocab_size) || positive(x, "hidden_size", c->hidden_size) ||
        positive(x, "num_hidden_layers", c->num_layers) ||
        positive(x, "intermediate_size", c->intermediate_size) || positive(x, "hc_mult", c->hc_mult) ||
        positive(x, "hc_sinkhorn_iters", c->hc_sinkhorn_iters))
        return -1;
    if (c->hc_mult > 16)
        return fail(x, GLM_ERR_UNSUPPORTED, "%s: field %s is above glmchat's limit of 16%s",
                    "hc_mult", "");
    if (c->num_layers > GLM_MAX_LAYERS)
        return fail(x, GLM_ERR_UNSUPPORTED, "%s: field %s is above glmchat's limit of 256%s",
                    "num_hidden_layers", "");
    /* linear_attn_config's layer lists may set the layer kinds the indexer types depend on */
    if (parse_layer_types(x, c) || parse_mlp_types(x, c) || parse_linear_attn(x, c) ||
        parse_indexer_types(x, c) || parse_moe(x, c) || parse_dsa(x, c))
        return -1;
    if (positive(x, "linear_num_heads", c->kda_heads) ||
        positive(x, "linear_head_dim", c->kda_head_dim) ||
        positive(x, "linear_conv_kernel_dim", c->kda_conv_kernel))
        return -1;
    const cJSON *pad = field(t, "pad_token_id");
    c->pad_token_id = cJSON_IsNumber(pad) ? pad->valueint : -1;
    if (!pad)
        c->pad_token_id = 154820;
    int n_top = 0, top[GLM_MAX_EOS];
    if (parse_eos(x, field(t, "eos_token_id"), &c->n_eos, c->eos) ||
        (t != root && parse_eos(x, field(root, "eos_token_id"), &n_top, top)))
        return -1;
    if (glm_eos_merge(c->eos, &c->n_eos, top, n_top))
        return fail(x, GLM_ERR_FORMAT, "%s: field %s lists more than 16 distinct ids%s",
                    "eos_token_id", "");
    return parse_quant(x, root, c);
}

glm_status glm_config_parse(glm_config *c, const char *json, const char *path, glm_error *err)
{
    memset(c, 0, sizeof *c);
    cJSON *root = cJSON_Parse(json);
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return glm_error_set(err, GLM_ERR_FORMAT, "%s is not a JSON object", path);
    }
    cfg_ctx x = {.path = path, .err = err};
    const cJSON *mt = field(root, "model_type");
    const cJSON *tc = field(root, "text_config");
    if (string_is(mt, "glm5_next") || string_is(mt, "glm5_next_text")) {
        x.text = cJSON_IsObject(tc) ? tc : root;
        const cJSON *tmt = field(x.text, "model_type");
        if (x.text != root && tmt && !string_is(tmt, "glm5_next_text"))
            fail(&x, GLM_ERR_UNSUPPORTED, "%s: field %s is %s; glmchat runs glm5_next_text",
                 "text_config.model_type", cJSON_IsString(tmt) ? tmt->valuestring : "not a string");
        else
            parse_text(&x, root, c);
    } else {
        fail(&x, GLM_ERR_UNSUPPORTED, "%s: field %s is %s; glmchat runs GLM-5.3-Flash (glm5_next)",
             "model_type", cJSON_IsString(mt) ? mt->valuestring : "missing");
    }
    cJSON_Delete(root);
    return x.st;
}

glm_status glm_config_load(glm_config *c, const char *dir, glm_error *err)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "rb");
    if (!f)
        return glm_error_set(err, GLM_ERR_IO, "cannot open %s: %s (is %s a model directory?)", path,
                             strerror(errno), dir);
    char *buf = NULL;
    size_t len = 0, cap = 0;
    glm_status st = GLM_OK;
    for (;;) {
        if (len + 4097 > cap) {
            cap = cap ? cap * 2 : 1 << 16;
            if (cap > (64u << 20)) {
                st = glm_error_set(err, GLM_ERR_FORMAT, "%s is larger than 64 MiB", path);
                break;
            }
            char *n = realloc(buf, cap);
            if (!n) {
                st = glm_error_set(err, GLM_ERR_NOMEM, "out of memory reading %s", path);
                break;
            }
            buf = n;
        }
        size_t got = fread(buf + len, 1, cap - len - 1, f);
        len += got;
        if (!got)
            break;
    }
    if (!st && ferror(f))
        st = glm_error_set(err, GLM_ERR_IO, "cannot read %s", path);
    fclose(f);
    if (!st) {
        buf[len] = 0;
        st = glm_config_parse(c, buf, path, err);
    }
    free(buf);
    return st;
}

int glm_eos_merge(int *eos, int *n, const int *more, int n_more)
{
    for (int i = 0; i < n_more; i++) {
        int seen = 0;
        for (int j = 0; j < *n && !seen; j++)
            seen = eos[j] == more[i];
        if (seen)
            continue;
        if (*n == GLM_MAX_EOS)
            return -1;
        eos[(*n)++] = more[i];
    }
    return 0;
}

int glm_config_count(const glm_config *c, glm_attn_kind kind)
{
    int n = 0;
    for (int i = 0; i < c->num_layers; i++)
        n += c->attn[i] == kind;
    return n;
}

int glm_config_rank_of(const glm_config *c, int layer)
{
    int n = 0;
    for (int i = 0; i < layer; i++)
        n += c->attn[i] == c->attn[layer];
    return n;
}

glm_status glm_generation_config_load(glm_generation_config *g, const char *dir, glm_error *err)
{
    char path[PATH_MAX];
    memset(g, 0, sizeof *g);
    g->temperature = 1.0f;
    g->top_p = 1.0f;
    snprintf(path, sizeof path, "%s/generation_config.json", dir);
    FILE *f = fopen(path, "rb");
    if (!f)
        return GLM_OK;
    char buf[1 << 16];
    size_t len = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[len] = 0;
    cJSON *root = cJSON_Parse(buf);
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return glm_error_set(err, GLM_ERR_FORMAT, "%s is not a JSON object", path);
    }
    cfg_ctx x = {.text = root, .path = path, .err = err};
    if (!parse_eos(&x, field(root, "eos_token_id"), &g->n_eos, g->eos) &&
        !get_int(&x, root, "max_new_tokens", 0, &g->max_new_tokens) &&
        !get_float(&x, root, "temperature", 1.0f, &g->temperature) &&
        !get_float(&x, root, "top_p", 1.0f, &g->top_p) &&
        !get_int(&x, root, "top_k", 0, &g->top_k)) {
        const cJSON *sample = field(root, "do_sample");
        if (sample && !cJSON_IsBool(sample))
            glm_error_set(err, x.st = GLM_ERR_FORMAT, "%s: do_sample must be true or false", path);
        else if (cJSON_IsFalse(sample))
            g->temperature = 0.0f; /* greedy, as HF generates with do_sample false */
    }
    cJSON_Delete(root);
    return x.st;
}
