// device.cu: device discovery for the CUDA backend: how many GPUs, which ones.
// Built for sm_90 (H200) and sm_121 (GB10); the host side calls it through kernels.h.
#include <cstdio>
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
