/* model_required.h: every tensor a config needs, by name, with its kind and shape: the list
 * `glmchat check-model` checks a checkpoint against (the same names and shapes weights.c binds). */
#ifndef GLMCHAT_ENGINE_MODEL_REQUIRED_H
#define GLMCHAT_ENGINE_MODEL_REQUIRED_H

#include <stdint.h>

#include "model/config.h"
#include "model/safetensors.h"

typedef enum glm_required_kind {
    GLM_REQ_MATRIX, /* a weight matrix: F32, BF16, F16, F8_E4M3 with block scales, or EXL3 */
    GLM_REQ_VECTOR, /* a norm, bias or small table: F32, BF16 or F16 */
} glm_required_kind;

typedef struct glm_required_tensor {
    char name[200];
    int layer; /* -1: not a layer's (embedding, head, final norm); num_layers: the MTP layer */
    glm_required_kind kind;
    int ndim;
    int64_t shape[3];
} glm_required_tensor;

/* Called once per required tensor; nonzero stops the walk (and is returned). */
typedef int (*glm_required_fn)(const glm_required_tensor *t, void *user);

/* The tensor name prefix of a checkpoint: "model.language_model." (the published layout) or
 * "model." (a text-only one), as the loader picks it. */
const char *glm_required_prefix(const st_model *m);

/* Walks every tensor c needs under prefix: the embedding, the LM head unless tied, the final
 * norm, each layer's (hyper-connections, norms, KDA or DSA attention with its indexer unless
 * shared, dense MLP or router, shared and routed experts), then the MTP layer's when with_mtp
 * (the loader binds it when num_nextn_predict_layers >= 1 and the checkpoint holds it). */
int glm_required_tensors(const glm_config *c, const char *prefix, int with_mtp, glm_required_fn fn,
                         void *user);

#endif
