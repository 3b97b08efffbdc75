/* exl3_load.h: binds one EXL3 linear of a safetensors checkpoint (<prefix>.trellis, .suh/.su,
 * .svh/.sv, .bias, the .mcg/.mul1 marker) to an exl3_tensor, validating dtypes and shapes. */
#ifndef GLMCHAT_EXL3_LOAD_H
#define GLMCHAT_EXL3_LOAD_H

#include "engine/model/exl3.h"
#include "engine/model/safetensors.h"

/* prefix: the module key, e.g. "model.language_model.layers.3.mlp.experts.7.up_proj" (a
 * trailing ".weight" is ignored, so an HF weight name works too). The tensor's buffers point
 * into m's mapping. GLM_ERR_ARG when the module has no .trellis (it is not EXL3);
 * GLM_ERR_FORMAT, naming the tensor, when one is malformed. */
glm_status exl3_load(const st_model *m, const char *prefix, exl3_tensor *t, glm_error *err);

/* The same, where config_codebook (an exl3_codebook, or -1 for none) is what a module without a
 * marker tensor decodes with (config.json's quantization_config.codebook); exl3_load passes -1,
 * so a module without a marker is refused rather than decoded with a guessed codebook. Markers
 * must be I32 of shape [] or [1] holding the multiplier glmchat decodes. */
glm_status exl3_load_codebook(const st_model *m, const char *prefix, int config_codebook,
                              exl3_tensor *t, glm_error *err);

/* 1 when the module (or HF weight name) is stored as EXL3 in m. */
int exl3_is_stored(const st_model *m, const char *prefix);

/* The HF-orientation [out][in] float32 weight of an EXL3 module, malloc'ed (caller frees). */
glm_status exl3_load_dequantized(const st_model *m, const char *prefix, float **w, int *out,
                                 int *in, glm_error *err);
glm_status exl3_load_dequantized_codebook(const st_model *m, const char *prefix,
                                          int config_codebook, float **w, int *out, int *in,
                                          glm_error *err);

#endif
