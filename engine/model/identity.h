/* identity.h: what identifies a model's files: config.json's bytes, the weight index (or the
 * one safetensors file's header) and model_type; the two ranks compare it, the prompt cache keys
 * its files by it. */
#ifndef GLMCHAT_MODEL_IDENTITY_H
#define GLMCHAT_MODEL_IDENTITY_H

#include <stddef.h>
#include <stdint.h>

#include "glm.h"

/* The longest model_type kept; a longer one (or one with control bytes) reads as "unknown". */
#define MODEL_TYPE_MAX 127

typedef struct model_identity {
    char model_type[MODEL_TYPE_MAX + 1]; /* config.json's model_type */
    uint64_t config_hash;                /* of config.json's bytes (base/hash.h's fnv1a64) */
    uint64_t weights_hash;               /* of the weight index (or the weight files' header) */
} model_identity;

/* Reads the identity of the model in dir (config.json, model.safetensors.index.json or
 * model.safetensors); an error names the file that is missing or unreadable. */
glm_status model_identity_read(const char *dir, model_identity *id, glm_error *err);

/* The prompt cache's key of a model: kept-state files written for another model are refused. */
uint64_t model_identity_key(const model_identity *id);

#endif
