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

#endif
