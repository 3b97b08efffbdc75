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
