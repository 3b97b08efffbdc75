/* backend.c: picks and opens the backend a session runs on (cpu or cuda) from the engine's
 * parameters; --backend auto takes the CUDA backend where a GPU is present (it matches the CPU
 * backend: tests/gpu/engine.sh), else the CPU one. */
#include "backend.h"

glm_status backend_open(const glm_model *m, const glm_engine_params *p, engine_backend *out,
                        glm_error *err)
{
    out->ops = NULL;
    out->impl = NULL;
    if (p->backend == GLM_BACKEND_CUDA || (p->backend == GLM_BACKEND_AUTO && glm_cuda_available()))
        return backend_open_cuda(m, out, err);
    return backend_open_cpu(m, p->n_threads, out, err);
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
