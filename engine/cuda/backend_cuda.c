/* backend_cuda.c: the CUDA backend's entry (backend.h). The GPU forward is not written yet, so
 * --backend cuda is refused with a message saying what to use instead. */
#include "backend.h"

glm_status backend_open_cuda(const glm_model *m, engine_backend *out, glm_error *err)
{
    (void)m;
    (void)out;
    return glm_error_set(err, GLM_ERR_UNSUPPORTED, "the CUDA backend is not built yet; use --backend cpu");
}
