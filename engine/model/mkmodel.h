/* mkmodel.h: writes a random-weight GLM-5.3-Flash model directory in the real checkpoint layout
 * (config.json, generation_config.json, tokenizer.json, safetensors, sharded when large). */
#ifndef GLMCHAT_ENGINE_MODEL_MKMODEL_H
#define GLMCHAT_ENGINE_MODEL_MKMODEL_H

#include <cjson/cJSON.h>
#include <stdint.h>

#include "glm.h"
#include "glm_tokens.h"
#include "model/safetensors.h"

/* glm_mkmodel and its params are public: glm_tokens.h. */
/* Writes DIR/tokenizer.json: byte-level BPE (256 byte tokens, a small fixed merge list), GLM's
 * pre-tokenizer, and GLM's 36 added tokens at ids 154820-154855 with their special flags. */
/* Rewrites every whole-valued number under a float-typed config key (swiglu_limit, rms_norm_eps,
 * rope_theta, ...) anywhere in node as a raw "10.0", so that the printed config.json keeps the
 * float type transformers requires. 0, or -1 out of memory. */
int glm_config_json_floats(cJSON *node);

glm_status glm_write_tokenizer(const char *dir, glm_error *err);

#endif
