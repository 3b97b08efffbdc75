/* model.h: a model directory opened for inference: its config, generation config, mapped
 * safetensors and bound weights. Read-only once open; sessions share it. */
#ifndef GLMCHAT_ENGINE_MODEL_MODEL_H
#define GLMCHAT_ENGINE_MODEL_MODEL_H

#include "model/config.h"
#include "model/safetensors.h"
#include "model/weights.h"

typedef struct glm_model {
    char *dir;
    glm_config cfg;
    glm_generation_config gen;
    st_model *st;
    glm_weights w;
} glm_model;

/* Opens DIR: config.json, generation_config.json (optional), the safetensors (single or
 * sharded), and binds every weight with shape checks. */
glm_model *glm_model_open(const char *dir, glm_error *err);
void glm_model_close(glm_model *m);

/* Where config.json leaves out index_kpool, n_routed_experts or num_nextn_predict_layers, takes
 * them from the tensors (the indexer's compress_ape, the first MoE layer's experts, layers.N);
 * where it gives one that the tensors contradict, refuses naming both values. */
glm_status glm_config_from_tensors(glm_config *c, const st_model *m, const char *cfg_path,
                                   glm_error *err);

/* The tensors (name, layer, role and dtypes, shape) a model of config c needs, in binding
 * order; prefix NULL means "model.language_model."; with_mtp adds the MTP layer (layers.N).
 * *out is malloc'ed (free it). For `glmchat check-model`: the same walk glm_weights_bind does. */
glm_status model_required_tensors(const glm_config *c, const char *prefix, int with_mtp,
                                  glm_required_tensor **out, size_t *n, glm_error *err);

#endif
