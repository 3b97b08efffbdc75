/* backend.c: picks and opens the backend a session runs on (cpu or cuda) from the engine's
 * parameters; --backend auto takes the CUDA backend where a GPU is present (it matches the CPU
 * backend: tests/gpu/engine.sh), else the CPU one. Resolves the context and cache settings. */
#include "backend.h"

#include <stdlib.h>

#include "setting.h"
#include "spec.h"

/* The variable `name`, else `old` (may be NULL); NULL when neither is set and non-empty. */
static const char *env_or_old(const char *name, const char *old, const char **which)
{
    const char *v = getenv(name);
    *which = name;
    if ((!v || !*v) && old) {
        v = getenv(old);
        *which = old;
    }
    return v && *v ? v : NULL;
}

glm_status backend_resolve_settings(const glm_model *m, const glm_engine_params *p,
                                    glm_backend which, backend_settings *out, glm_error *err)
{
    char msg[512];
    const char *var;
    const glm_config *c = &m->cfg;
    out->context = c->max_position_embeddings > 0 ? c->max_position_embeddings : 4096;
    if (p && p->context > 0) {
        out->context = p->context;
    } else {
        const char *v = env_or_old("GLMCHAT_CONTEXT", "GLMCHAT_CUDA_CONTEXT", &var);
        long long x;
        if (v && setting_int(var, v, 1, GLM_MAX_CONTEXT, &x, msg, sizeof msg))
            return glm_error_set(err, GLM_ERR_ARG, "%s", msg);
        if (v)
            out->context = (int)x;
    }
    out->kv_cache = which == GLM_BACKEND_CUDA ? GLM_KV_CACHE_FP8 : GLM_KV_CACHE_F32;
    if (p && p->kv_cache != GLM_KV_CACHE_DEFAULT) {
        if (p->kv_cache < GLM_KV_CACHE_FP8 || p->kv_cache > GLM_KV_CACHE_F32)
            return glm_error_set(err, GLM_ERR_ARG, "kv_cache %d is not a cache format",
                                 (int)p->kv_cache);
        out->kv_cache = p->kv_cache;
    } else {
        const char *v = env_or_old("GLMCHAT_KV_CACHE", "GLMCHAT_CUDA_KV", &var);
        int i;
        if (v && setting_choice(var, v, GLM_KV_CACHE_CHOICES, &i, msg, sizeof msg))
            return glm_error_set(err, GLM_ERR_ARG, "%s", msg);
        if (v)
            out->kv_cache = (glm_kv_cache)(GLM_KV_CACHE_FP8 + i);
    }
    out->dense = p && p->dense != GLM_DENSE_DEFAULT ? p->dense : GLM_DENSE_BF16;
    if (out->dense != GLM_DENSE_BF16 && out->dense != GLM_DENSE_Q4)
        return glm_error_set(err, GLM_ERR_ARG, "dense %d is not a dense weight format",
                             (int)out->dense);
    out->fp8_rule = out->q4_group = out->q4_f32_scale = 0;
    /* drafting (one rank only) verifies the chosen token and up to SPEC_MAX_DRAFT drafts */
    spec_mode draft = SPEC_OFF;
    glm_status st = spec_mode_resolve(p ? p->draft : 0, &draft, err);
    if (st)
        return st;
    out->draft_rows = draft != SPEC_OFF && !(p && p->peer) ? SPEC_MAX_DRAFT + 1 : 0;
    return GLM_OK;
}

glm_status backend_open(const glm_model *m, const glm_engine_params *p, engine_backend *out,
                        glm_error *err)
{
    out->ops = NULL;
    out->impl = NULL;
    int cuda = p->backend == GLM_BACKEND_CUDA ||
               (p->backend == GLM_BACKEND_AUTO && glm_cuda_available());
    backend_settings s;
    glm_status st = backend_resolve_settings(m, p, cuda ? GLM_BACKEND_CUDA : GLM_BACKEND_CPU, &s, err);
    if (st)
        return st;
    if (cuda)
        return backend_open_cuda_with(m, &s, out, err);
    return backend_open_cpu_with(m, p->n_threads, &s, out, err);
}

void backend_close(engine_backend *b)
{
    if (b->ops && b->ops->close)
        b->ops->close(b->impl);
    b->ops = NULL;
    b->impl = NULL;
}

glm_status backend_check_tokens(const glm_config *c, const int32_t *tokens, int n, glm_error *err)
{
    if (n <= 0)
        return glm_error_set(err, GLM_ERR_ARG, "no tokens to run");
    for (int t = 0; t < n; t++)
        if (tokens[t] < 0 || tokens[t] >= c->vocab_size)
            return glm_error_set(err, GLM_ERR_ARG, "token id %d at position %d is outside the "
                                 "vocabulary (0..%d)", tokens[t], t, c->vocab_size - 1);
    return GLM_OK;
}
