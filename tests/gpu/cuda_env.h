/* cuda_env.h: how the GPU test programs open the CUDA backend with the settings glmchat would
 * take from the environment: app/config.c maps the GLMCHAT_* variables into glm_engine_params
 * (the engine reads none), and backend_resolve_settings turns those into the backend's. */
#ifndef GLMCHAT_TESTS_GPU_CUDA_ENV_H
#define GLMCHAT_TESTS_GPU_CUDA_ENV_H

#include <stdio.h>

#include "app/config.h"
#include "backend.h"

/* glm_engine_params from the engine's GLMCHAT_* variables, as the commands without a config
 * file read them (config_command_params). The caller keeps *cfg until the engine closes (p
 * points into it) and config_frees it; a bad variable is an error naming it. */
static inline glm_status gpu_params_from_env(app_config *cfg, glm_engine_params *p, glm_error *err)
{
    char msg[1024];
    if (config_command_params(cfg, NULL, p, msg, sizeof msg))
        return glm_error_set(err, GLM_ERR_ARG, "%s", msg);
    return GLM_OK;
}

/* The environment's params (gpu_params_from_env), read once a program: the strings they point
 * to live until it exits. For the programs that open the whole engine (glm_engine_open). */
static inline glm_status gpu_env_params(glm_engine_params *p, glm_error *err)
{
    static app_config cfg;
    static glm_engine_params params;
    static int loaded;
    if (!loaded) {
        glm_status st = gpu_params_from_env(&cfg, &params, err);
        if (st)
            return st;
        loaded = 1;
    }
    *p = params;
    return GLM_OK;
}

/* The backend settings of p on CUDA over m. */
static inline glm_status gpu_settings(const glm_model *m, const glm_engine_params *p,
                                      backend_settings *s, glm_error *err)
{
    return backend_resolve_settings(m, p, GLM_BACKEND_CUDA, s, err);
}

/* The CUDA backend with the environment's settings (gpu_params_from_env) changed by `edit`
 * (may be NULL), which sets fields of the params as a test needs them. */
static inline glm_status gpu_open_cuda_edit(const glm_model *m, void (*edit)(glm_engine_params *, void *),
                                            void *user, engine_backend *out, glm_error *err)
{
    app_config cfg;
    glm_engine_params p;
    backend_settings s;
    glm_status st = gpu_params_from_env(&cfg, &p, err);
    if (!st && edit)
        edit(&p, user);
    if (!st)
        st = gpu_settings(m, &p, &s, err);
    config_free(&cfg); /* the backend keeps no string of the params */
    return st ? st : backend_open_cuda_with(m, &s, out, err);
}

/* The CUDA backend with the environment's settings. */
static inline glm_status gpu_open_cuda(const glm_model *m, engine_backend *out, glm_error *err)
{
    return gpu_open_cuda_edit(m, NULL, NULL, out, err);
}

#endif
