// launch.cuh: how every glmchat kernel starts. launch() puts a kernel on a stream with
// programmatic dependent launch (sm_90 and later; kern_pdl() says whether it is on), so that the
// kernel's blocks are placed while the one before it on the stream finishes; pdl_prologue(), the
// first statement of every kernel, then lets the next kernel be placed and waits until the
// previous one has finished and its writes are visible. Before that wait a kernel reads only
// weights (a few start loading them early), so the order of effects stays the stream's order.
#pragma once

#include <utility>

#include <cuda_runtime.h>

#include "kernels.h"

// The next kernel on the stream may be placed once every block of this one has said so.
static __device__ __forceinline__ void pdl_trigger()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

// Waits until the kernels this one depends on have finished and their writes are visible
// (at once when it was not launched as a dependent launch).
static __device__ __forceinline__ void pdl_wait()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

static __device__ __forceinline__ void pdl_prologue()
{
    pdl_trigger();
    pdl_wait();
}

// Between pdl_trigger and pdl_wait a kernel may only read what no kernel writes (weights):
// this puts bytes [first * 128, n) of p, a 128-byte line a lane, into L2 meanwhile.
static __device__ __forceinline__ void prefetch_l2_lines(const void *p, size_t n, int first)
{
    size_t off = ((size_t)first + (threadIdx.x & 31)) * 128;
    if (off < n)
        asm volatile("prefetch.global.L2 [%0];\n" ::"l"(static_cast<const char *>(p) + off));
}

// kernel<<<grid, block, smem, stream>>>(args...), as a programmatic dependent launch when
// kern_pdl() is on; a failure is also left for cudaGetLastError, as <<<>>> leaves it.
template <typename... Params, typename... Args>
static cudaError_t launch(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem,
                          cudaStream_t stream, Args &&...args)
{
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = stream;
    cfg.attrs = attr;
    cfg.numAttrs = kern_pdl() ? 1 : 0;
    return cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...);
}

// Raises kernel's dynamic shared memory limit to `bytes` (past the default 48 KiB). Where the
// device allows less (a DGX Spark's 99 KiB blocks against an H100's 227), says so by name before
// returning the error: the kernel, what it needs and the device's opt-in limit.
template <typename Kernel>
static inline cudaError_t raise_smem(Kernel kernel, size_t bytes, const char *name)
{
    cudaError_t rc = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
    if (rc == cudaSuccess)
        return rc;
    int dev = 0, optin = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
    kern_log(0, "%s needs %zu bytes of shared memory a block; this GPU allows %d (%s)", name, bytes,
             optin, cudaGetErrorString(rc));
    return rc;
}
