/* mkmodel.h: writes a random-weight GLM-5.3-Flash model directory in the real checkpoint layout
 * (config.json, generation_config.json, tokenizer.json, safetensors, sharded when large). */
#ifndef GLMCHAT_ENGINE_MODEL_MKMODEL_H
#define GLMCHAT_ENGINE_MODEL_MKMODEL_H

#include <cjson/cJSON.h>
#include <stdint.h>

#include "glm.h"
#include "model/safetensors.h"

typedef struct glm_mkmodel_params {
    const char *out_dir;
    const char *preset; /* "tiny", "small", "real-N" (N layers of the real shapes) */
    uint64_t seed;
    int dtype_set;      /* 0: the preset's (F32 for tiny, BF16 otherwise) */
    st_dtype dtype;     /* ST_F32 or ST_BF16 */
    int64_t shard_bytes; /* 0: one file up to 4 GiB, else shards of 4 GiB */
    const char *like;    /* NULL, or a published layout: "exl3-published", "fp8-official" */
} glm_mkmodel_params;

/* Lists the --like layouts, for usage messages. */
const char *glm_mkmodel_likes(void);

/* Lists the preset names, one per line, for usage messages. */
const char *glm_mkmodel_presets(void);

glm_status glm_mkmodel(const glm_mkmodel_params *p, glm_error *err);

/* Writes DIR/tokenizer.json: byte-level BPE (256 byte tokens, a small fixed merge list), GLM's
 * pre-tokenizer, and GLM's 36 added tokens at ids 154820-154855 with their special flags. */
/* Rewrites every whole-valued number under a float-typed config key (swiglu_limit, rms_norm_eps,
 * rope_theta, ...) anywhere in node as a raw "10.0", so that the printed config.json keeps the
 * float type transformers requires. 0, or -1 out of memory. */
int glm_config_json_floats(cJSON *node);

glm_status glm_write_tokenizer(const char *dir, glm_error *err);

#endif
