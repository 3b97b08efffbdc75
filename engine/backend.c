/* backend.c: picks and opens the backend a session runs on (cpu or cuda) from the engine's
 * parameters; --backend auto stays on the CPU until the CUDA backend is the default. */
#include "backend.h"

glm_status backend_open(const glm_model *m, const glm_engine_params *p, engine_backend *out,
                        glm_error *err)
{
    out->ops = NULL;
    out->impl = NULL;
    if (p->backend == GLM_BACKEND_CUDA)
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
