/* config.h: a GLM-5.3-Flash (glm5_next) config.json parsed into plain numbers, with the
 * reference implementation's defaults, and refused when it asks for what the engine cannot do. */
#ifndef GLMCHAT_ENGINE_MODEL_CONFIG_H
#define GLMCHAT_ENGINE_MODEL_CONFIG_H

#include "glm.h"
#include "model/exl3.h"

#define GLM_MAX_LAYERS 256
#define GLM_MAX_EOS 16

typedef enum glm_attn_kind { GLM_ATTN_KDA = 0, GLM_ATTN_DSA = 1 } glm_attn_kind;

typedef struct glm_config {
    /* sizes */
    int vocab_size, hidden_size, num_layers;
    int max_position_embeddings; /* the context window */
    int intermediate_size;     /* dense MLP */
    int moe_intermediate_size; /* routed expert (shared: times n_shared_experts) */
    float rms_norm_eps, swiglu_limit;
    int tie_word_embeddings;
    /* hyper-connections */
    int hc_mult, hc_sinkhorn_iters;
    float hc_eps;
    /* KDA (linear_attention) */
    int kda_heads, kda_head_dim, kda_conv_kernel;
    int kda_has_lower_bound; /* 1: G = lb * sigmoid(.), 0: G = -exp(A_log) * softplus(.) */
    float kda_lower_bound;
    /* DSA (MLA + indexer) */
    int num_heads, q_lora_rank, kv_lora_rank, qk_nope_head_dim, v_head_dim;
    int index_n_heads, index_head_dim, index_topk, index_kpool;
    /* MoE */
    int n_routed_experts, num_experts_per_tok, n_shared_experts, n_group, topk_group;
    int norm_topk_prob;
    float routed_scaling_factor;
    /* per layer */
    glm_attn_kind attn[GLM_MAX_LAYERS];
    int moe[GLM_MAX_LAYERS];            /* 1: sparse (MoE), 0: dense MLP */
    int indexer_shared[GLM_MAX_LAYERS]; /* DSA layers: 1 reuses layer i-1's selection */
    /* tokens */
    int pad_token_id;
    int n_eos;
    int eos[GLM_MAX_EOS];
    /* FP8 block quantization (quantization_config), 0 when absent */
    int fp8_block_rows, fp8_block_cols;
    /* quant_method exl3: 1, and the declared average bits (0: not given); each tensor's bit
     * width comes from its trellis shape */
    int exl3;
    double exl3_bits;
    int exl3_head_bits;    /* 0: not given; 16: the head is left unquantized */
    int exl3_codebook;     /* quantization_config.codebook as an exl3_codebook, -1: not given;
                            * a trellis without a marker tensor decodes with it */
    int num_nextn_predict_layers;
    /* 1 where config.json gave the key; absent ones are taken from the tensors at open */
    int index_kpool_given, n_routed_experts_given, nextn_given;
} glm_config;

/* Parses config.json text; path is only used in messages. */
glm_status glm_config_parse(glm_config *c, const char *json, const char *path, glm_error *err);
/* Reads DIR/config.json. */
glm_status glm_config_load(glm_config *c, const char *dir, glm_error *err);

/* Adds the ids of more that eos lacks (eos holds up to GLM_MAX_EOS); -1 when they do not fit. */
int glm_eos_merge(int *eos, int *n, const int *more, int n_more);

/* Number of DSA layers, and the index of layer i among them (-1 for KDA); same for KDA. */
int glm_config_count(const glm_config *c, glm_attn_kind kind);
int glm_config_rank_of(const glm_config *c, int layer);

/* generation_config.json: eos ids and max_new_tokens; absent file leaves the defaults. */
typedef struct glm_generation_config {
    int n_eos;
    int eos[GLM_MAX_EOS];
    int max_new_tokens; /* 0: not given */
    float temperature, top_p;
    int top_k;
} glm_generation_config;

glm_status glm_generation_config_load(glm_generation_config *g, const char *dir, glm_error *err);

#endif
