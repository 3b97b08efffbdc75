/* cuda_env.h: how the GPU test programs open the CUDA backend with the settings glmchat would
 * take from the environment: the engine's own (backend_resolve_settings) plus the dense format,
 * which only the application reads (app/config.c: GLMCHAT_DENSE, else GLMCHAT_CUDA_DENSE). */
#ifndef GLMCHAT_TESTS_GPU_CUDA_ENV_H
#define GLMCHAT_TESTS_GPU_CUDA_ENV_H

#include <stdlib.h>
#include <string.h>

#include "backend.h"

/* GLMCHAT_DENSE, else GLMCHAT_CUDA_DENSE (bf16 or q4) into s->dense; a bad value is an error
 * naming the variable. */
static inline glm_status gpu_dense_from_env(backend_settings *s, glm_error *err)
{
    const char *name = "GLMCHAT_DENSE", *v = getenv(name);
    if (!v || !*v) {
        name = "GLMCHAT_CUDA_DENSE";
        v = getenv(name);
    }
    if (!v || !*v)
        return GLM_OK;
    if (strcmp(v, "q4") == 0)
        s->dense = GLM_DENSE_Q4;
    else if (strcmp(v, "bf16") == 0)
        s->dense = GLM_DENSE_BF16;
    else
        return glm_error_set(err, GLM_ERR_ARG, "%s is '%s'; use bf16 or q4", name, v);
    return GLM_OK;
}

/* backend_open_cuda with the dense format of the environment too. */
static inline glm_status gpu_open_cuda(const glm_model *m, engine_backend *out, glm_error *err)
{
    backend_settings s;
    glm_status st = backend_resolve_settings(m, NULL, GLM_BACKEND_CUDA, &s, err);
    if (!st)
        st = gpu_dense_from_env(&s, err);
    return st ? st : backend_open_cuda_with(m, &s, out, err);
}

#endif
