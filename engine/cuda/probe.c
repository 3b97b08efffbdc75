/* probe.c: tells whether the CUDA backend is usable here (built in, and a GPU present).
 * --backend auto picks cuda only when this says yes. */
#include "glm.h"
#include "cuda/plan.h"

#ifdef HAVE_CUDA
#include "kernels/engine.h"
#include "kernels/kernels.h"
#endif

int glm_cuda_available(void)
{
#ifdef HAVE_CUDA
    return kern_device_count() > 0;
#else
    return 0;
#endif
}

int glm_cuda_memory(size_t *free_bytes, size_t *total_bytes, int *integrated)
{
#ifdef HAVE_CUDA
    if (kern_device_count() <= 0 || eng_mem_info(free_bytes, total_bytes) != 0)
        return -1;
    *integrated = eng_device_integrated();
    return 0;
#else
    (void)free_bytes;
    (void)total_bytes;
    (void)integrated;
    return -1;
#endif
}
