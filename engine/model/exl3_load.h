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

/* 1 when the module (or HF weight name) is stored as EXL3 in m. */
int exl3_is_stored(const st_model *m, const char *prefix);

/* The HF-orientation [out][in] float32 weight of an EXL3 module, malloc'ed (caller frees). */
glm_status exl3_load_dequantized(const st_model *m, const char *prefix, float **w, int *out,
                                 int *in, glm_error *err);

#endif
