/* gpu_test.h: what the GPU test programs share: a call into kernels/ that must succeed, host
 * allocation that must succeed, device buffers allocated and filled from the host.
 * Define GPU_TEST_NAME (the program's name, for messages) before including it. */
#ifndef GLMCHAT_TESTS_GPU_TEST_H
#define GLMCHAT_TESTS_GPU_TEST_H

#include <stdio.h>
#include <stdlib.h>

#include "kernels/kernels.h"

/* A kernels/ or eng_ call that returns 0 on success, a CUDA error code (> 0), or -1 when it
 * refused its arguments (it said why on stderr): anything but 0 ends the test. */
#define CUDA_OK(call)                                                                              \
    do {                                                                                           \
        int rc_ = (call);                                                                          \
        if (rc_ != 0) {                                                                            \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call,                          \
                    rc_ > 0 ? kern_error_string(rc_) : "refused its arguments (see above)");      \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

static inline void *xmalloc(size_t bytes)
{
    void *p = malloc(bytes ? bytes : 1);
    if (!p) {
        fprintf(stderr, "%s: out of memory (%zu bytes)\n", GPU_TEST_NAME, bytes);
        exit(1);
    }
    return p;
}

static inline void *dev_alloc(size_t bytes)
{
    void *d = NULL;
    CUDA_OK(kern_malloc(&d, bytes));
    return d;
}

static inline void *dev_copy(const void *src, size_t bytes)
{
    void *d = dev_alloc(bytes);
    CUDA_OK(kern_to_device(d, src, bytes));
    return d;
}

#endif
