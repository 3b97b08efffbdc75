/* probe.c: tells whether the CUDA backend is usable here (built in, and a GPU present).
 * --backend auto picks cuda only when this says yes. */
#include "glm.h"

#ifdef HAVE_CUDA
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
