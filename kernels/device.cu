// device.cu: the CUDA backend's device discovery (how many GPUs, which), device memory, whether
// kernels go out as programmatic dependent launches, the kernels' log hook (kernels.h), SM counts.
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <cuda_runtime.h>

#include "kernels.h"
#include "launch.cuh"

extern "C" int kern_device_count(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return n;
}

// The SM count of each device asked so far (launch.cuh's device_sm_count).
static kern_device_ints g_sm_counts;

cudaError_t device_sm_count(int *sms)
{
    int dev = 0, n = 0;
    cudaError_t rc = current_device(&dev);
    if (rc != cudaSuccess)
        return rc;
    n = kern_device_int_get(&g_sm_counts, dev);
    if (n > 0) {
        *sms = n;
        return cudaSuccess;
    }
    rc = cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev);
    if (rc != cudaSuccess)
        return rc;
    if (n < 1) {
        kern_log(0, "device %d reports %d SMs", dev, n);
        return cudaErrorInvalidDevice;
    }
    kern_device_int_put(&g_sm_counts, dev, n);
    *sms = n;
    return cudaSuccess;
}

static int g_pdl = 1;

extern "C" int kern_pdl(void)
{
    return g_pdl;
}

extern "C" void kern_set_pdl(int on)
{
    g_pdl = on ? 1 : 0;
}

// The hook and its pointer change only while no kernel runs (an engine opening or closing);
// the mutex keeps a line from meeting a half-changed pair all the same.
static std::mutex g_log_lock;
static kern_log_fn g_log_fn;
static void *g_log_user;

extern "C" void kern_set_log(kern_log_fn fn, void *user)
{
    std::lock_guard<std::mutex> guard(g_log_lock);
    g_log_fn = fn;
    g_log_user = user;
}

extern "C" void *kern_log_user(void)
{
    std::lock_guard<std::mutex> guard(g_log_lock);
    return g_log_user;
}

extern "C" void kern_log(int level, const char *fmt, ...)
{
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    std::lock_guard<std::mutex> guard(g_log_lock);
    if (g_log_fn)
        g_log_fn(g_log_user, level, line);
}

extern "C" int kern_device_describe(int dev, char *name, int n)
{
    cudaDeviceProp p;
    cudaError_t rc = cudaGetDeviceProperties(&p, dev);
    if (rc != cudaSuccess)
        return (int)rc;
    snprintf(name, (size_t)n, "%s sm_%d%d", p.name, p.major, p.minor);
    return 0;
}

extern "C" int kern_device_capability(int dev, int *cc)
{
    int major = 0, minor = 0;
    cudaError_t rc = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
    if (rc == cudaSuccess)
        rc = cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
    *cc = rc == cudaSuccess ? 10 * major + minor : 0;
    return (int)rc;
}

static_assert(KERN_ERR_NO_KERNEL_IMAGE == (int)cudaErrorNoKernelImageForDevice &&
                  KERN_ERR_INVALID_DEVICE_FUNCTION == (int)cudaErrorInvalidDeviceFunction,
              "kernels.h's codes are the runtime's");

// A kernel that does nothing, for asking whether this build carries code for the device.
__global__ void arch_probe_kernel() {}

extern "C" int kern_device_runs_build(void)
{
    cudaFuncAttributes a;
    cudaError_t rc = cudaFuncGetAttributes(&a, arch_probe_kernel);
    if (rc != cudaSuccess)
        cudaGetLastError();
    return (int)rc;
}

extern "C" int kern_malloc(void **ptr, size_t bytes)
{
    return (int)cudaMalloc(ptr, bytes);
}

extern "C" void kern_free(void *ptr)
{
    cudaFree(ptr);
}

extern "C" int kern_to_device(void *dst, const void *src, size_t bytes)
{
    return (int)cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice);
}

extern "C" int kern_to_host(void *dst, const void *src, size_t bytes)
{
    return (int)cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost);
}

extern "C" int kern_memset(void *dst, int byte, size_t bytes)
{
    return (int)cudaMemset(dst, byte, bytes);
}

extern "C" int kern_sync(void)
{
    return (int)cudaDeviceSynchronize();
}

extern "C" const char *kern_error_string(int code)
{
    if (code == -1)
        return "argument out of range";
    return cudaGetErrorString((cudaError_t)code);
}
