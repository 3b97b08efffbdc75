/* gpu_test.h: what the GPU test programs share: the device they run on, a call into kernels/ that
 * must succeed, host allocation that must succeed, device buffers allocated and filled from the
 * host and read back, random device arrays, a cache format's name.
 * Define GPU_TEST_NAME (the program's name, for messages) before including it. */
#ifndef GLMCHAT_TESTS_GPU_TEST_H
#define GLMCHAT_TESTS_GPU_TEST_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/engine.h"
#include "kernels/kernels.h"
#include "tests/common/rng.h"

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

/* The device the test runs on (device 0): its description into name (cap bytes) and printed as
 * the output's first line; without a CUDA device the test ends with status 1, saying so. */
static inline void gpu_test_device(char *name, size_t cap)
{
    if (kern_device_count() < 1) {
        fprintf(stderr, "%s: no CUDA device\n", GPU_TEST_NAME);
        exit(1);
    }
    kern_device_describe(0, name, cap);
    printf("device %s\n", name);
}

/* The start of a GPU test's main: the device line (gpu_test_device, its description into name)
 * and whether the run is timed: not when the first argument is --no-time. */
static inline int gpu_test_begin(int argc, char **argv, char *name, size_t cap)
{
    gpu_test_device(name, cap);
    return !(argc > 1 && strcmp(argv[1], "--no-time") == 0);
}

/* Two events for a test's timings. */
static inline void gpu_test_events(void **ev0, void **ev1)
{
    CUDA_OK(eng_event_new(ev0));
    CUDA_OK(eng_event_new(ev1));
}

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

/* n floats amp * test_rng_uniform(state) (in [-amp, amp)) on the device, drawn in order. */
static inline float *dev_uniform(uint64_t *state, size_t n, float amp)
{
    float *h = (float *)xmalloc(n * sizeof *h);
    for (size_t i = 0; i < n; i++)
        h[i] = amp * test_rng_uniform(state);
    float *d = (float *)dev_copy(h, n * sizeof *h);
    free(h);
    return d;
}

/* bytes of device memory, once every launch queued before is done, in a new host buffer. */
static inline void *to_host(const void *d, size_t bytes)
{
    void *h = xmalloc(bytes);
    CUDA_OK(kern_sync());
    CUDA_OK(kern_to_host(h, d, bytes));
    return h;
}

/* A cache format's name (eng_cache's dtype) for the tests' lines. */
static inline const char *cache_name(int dtype)
{
    return dtype == ENG_CACHE_FP8 ? "fp8" : dtype == ENG_CACHE_BF16 ? "bf16" : "f32";
}

#endif
