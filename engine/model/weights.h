/* weights.h: the model's tensors bound by name to the roles the forward pass uses, each checked
 * against the shape config.json implies; views into the mmap (dequantized row by row on use). */
#ifndef GLMCHAT_ENGINE_MODEL_WEIGHTS_H
#define GLMCHAT_ENGINE_MODEL_WEIGHTS_H

#include <stdint.h>

#include "model/config.h"
#include "model/exl3.h"
#include "model/safetensors.h"

typedef enum glm_weight_kind {
    GLM_W_PLAIN = 0, /* F32, BF16 or F16 values */
    GLM_W_FP8_BLOCK, /* F8_E4M3 values times a float32 scale per block (weight_scale_inv) */
    GLM_W_EXL3,      /* EXL3 trellis tensors (exl3): products through the Hadamard scheme */
} glm_weight_kind;

/* A matrix [rows, cols] in Hugging Face orientation (out, in). */
typedef struct glm_weight {
    const char *name; /* the checkpoint's tensor name (owned by the st_model) */
    const char *file;
    glm_weight_kind kind;
    st_dtype dtype;
    int64_t rows, cols;
    const void *data;
    const float *scale; /* FP8: [scale_rows, scale_cols] */
    int64_t scale_cols;
    int block_rows, block_cols;
    const exl3_tensor *exl3; /* EXL3: the module's tensors in the map (owned by glm_weights) */
} glm_weight;

typedef struct glm_kda_weights {
    glm_weight q_proj, k_proj, v_proj, f_a, f_b, b_proj, g_a, g_b, o_proj;
    const float *q_conv, *k_conv, *v_conv; /* [C * K] each, tap-major per channel */
    const float *A_log, *dt_bias, *o_norm;
} glm_kda_weights;

typedef struct glm_dsa_weights {
    glm_weight q_a, q_b, kv_a, kv_b, o_proj;
    const float *q_a_norm, *kv_a_norm;
    int has_indexer;
    glm_weight idx_wq_b, idx_wk, idx_weights, idx_gate;
    const float *idx_k_norm_w, *idx_k_norm_b, *idx_ape; /* ape: [kpool, index_head_dim] */
} glm_dsa_weights;

typedef struct glm_mlp_weights {
    glm_weight gate, up, down;
} glm_mlp_weights;

typedef struct glm_layer_weights {
    glm_weight hc_attn_fn, hc_ffn_fn;
    const float *hc_attn_base, *hc_attn_scale, *hc_ffn_base, *hc_ffn_scale;
    const float *input_norm, *post_norm;
    glm_kda_weights kda;
    glm_dsa_weights dsa;
    glm_mlp_weights mlp;    /* dense MLP, or the shared expert of a MoE layer */
    int has_shared;
    glm_weight router;
    const float *router_bias;
    glm_mlp_weights *experts; /* n_routed_experts, MoE layers only */
} glm_layer_weights;

/* The MTP layer (architecture.md 2.8, layers.N after the N main layers): no hyper-connections;
 * layer.input_norm, post_norm, dsa (with its indexer) and the FFN are bound as for a DSA layer. */
typedef struct glm_mtp_weights {
    glm_weight eh_proj; /* [D, 2D]: [enorm(embed) | hnorm(h)] */
    const float *enorm, *hnorm, *head_norm;
    glm_layer_weights layer;
} glm_mtp_weights;

typedef struct glm_weights {
    glm_weight embed, lm_head;
    const float *final_norm;
    glm_layer_weights *layers;
    int n_layers;
    int has_mtp; /* num_nextn_predict_layers >= 1 and the checkpoint has layers.N */
    glm_mtp_weights mtp;
    void **owned; /* float copies of small non-F32 vectors */
    int n_owned, cap_owned;
} glm_weights;

/* What a role takes: a weight matrix (F32, BF16, F16, F8_E4M3 with its block scales, or EXL3) or
 * a vector or small tensor (F32, BF16, F16). */
typedef enum glm_tensor_role { GLM_TENSOR_MATRIX = 0, GLM_TENSOR_VECTOR = 1 } glm_tensor_role;

/* One tensor a config needs: its checkpoint name, layer (-1: embedding, head, final norm; the
 * MTP layer is num_layers), role, the dtypes it may have, and its shape (HF orientation). */
typedef struct glm_required_tensor {
    char name[192];
    int layer;
    glm_tensor_role role;
    const char *dtypes; /* static text, e.g. "F32|BF16|F16" */
    int ndim;
    int64_t shape[3];
} glm_required_tensor;

typedef struct glm_required_list {
    glm_required_tensor *t; /* malloc'ed; free(t) */
    size_t n, cap;
} glm_required_list;

const char *glm_tensor_role_dtypes(glm_tensor_role role);
/* "model.language_model." unless the checkpoint names its text model "model." */
const char *glm_weights_prefix(const st_model *m);
/* The tensors glm_weights_bind would bind for c, in binding order, without a checkpoint: the
 * same code walks the config, so the list cannot drift from what the binder reads. */
glm_status glm_weights_list(const glm_config *c, const char *prefix, int with_mtp,
                            glm_required_list *out, glm_error *err);

/* Binds every tensor the config needs. where is what messages name when a tensor is missing
 * (the index or model.safetensors path). */
glm_status glm_weights_bind(glm_weights *w, const glm_config *c, const st_model *m,
                            const char *where, glm_error *err);
void glm_weights_free(glm_weights *w);

/* Row r of w as float32: a pointer into the map for F32, else converted into buf (cols).
 * Not for EXL3 weights (the binder gives row-read roles a dequantized copy instead). */
const float *glm_weight_row(const glm_weight *w, int64_t r, float *buf);

/* Looks a tensor up by name for dump-tensor: F32/BF16/F16/FP8 (with its block scales, when
 * NAME_scale_inv exists) to float32, HF orientation. An EXL3 module, named as its HF weight
 * (<module>.weight) or as the module, comes out dequantized [out, in]. */
glm_status glm_tensor_to_f32(const st_model *m, const char *name, float **out, int64_t *numel,
                             int *ndim, int64_t *shape, glm_error *err);
/* The same, where an EXL3 module without a codebook marker decodes with config_codebook
 * (glm_config.exl3_codebook; -1: refused, as glm_tensor_to_f32 does). */
glm_status glm_tensor_to_f32_codebook(const st_model *m, const char *name, int config_codebook,
                                      float **out, int64_t *numel, int *ndim, int64_t *shape,
                                      glm_error *err);

#endif
