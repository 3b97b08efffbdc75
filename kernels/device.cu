// device.cu: the CUDA backend's device discovery (how many GPUs, which), device memory, whether
// kernels go out as programmatic dependent launches, and the kernels' log hook (kernels.h).
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <cuda_runtime.h>

#include "kernels.h"

extern "C" int kern_device_count(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return n;
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
