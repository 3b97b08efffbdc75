// device.cu: the CUDA backend's device discovery (how many GPUs, which), device memory, and
// whether kernels go out as programmatic dependent launches; the host calls it via kernels.h.
#include <cstdio>
#include <cstdlib>
#include <cstring>
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

static int g_pdl = -1; // -1: not read yet

extern "C" int kern_pdl(void)
{
    if (g_pdl < 0) {
        const char *v = getenv("GLMCHAT_CUDA_PDL");
        g_pdl = !(v && strcmp(v, "0") == 0);
    }
    return g_pdl;
}

extern "C" void kern_set_pdl(int on)
{
    g_pdl = on ? 1 : 0;
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
