// launch.cuh: how every glmchat kernel starts. launch() puts a kernel on a stream with
// programmatic dependent launch (sm_90 and later; kern_pdl() says whether it is on), so that the
// kernel's blocks are placed while the one before it on the stream finishes; pdl_prologue(), the
// first statement of every kernel, then lets the next kernel be placed and waits until the
// previous one has finished and its writes are visible. Before that wait a kernel reads only
// weights (a few start loading them early), so the order of effects stays the stream's order.
// raise_smem_once, device_sm_count and resident_blocks give what a launch needs of the calling
// thread's device, asked once a device.
#pragma once

#include <climits>
#include <utility>

#include <cuda_runtime.h>

#include "device_facts.h"
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

// kernel<<<grid, block, smem, stream>>>(args...) with the first n of attr; a failure is also
// left for cudaGetLastError, as <<<>>> leaves it.
template <typename... Params, typename... Args>
static cudaError_t launch_with(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem,
                               cudaStream_t stream, cudaLaunchAttribute *attr, unsigned n,
                               Args &&...args)
{
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = stream;
    cfg.attrs = attr;
    cfg.numAttrs = n;
    return cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...);
}

// The attribute that makes a launch a programmatic dependent one.
static inline cudaLaunchAttribute pdl_attribute()
{
    cudaLaunchAttribute a;
    a.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    a.val.programmaticStreamSerializationAllowed = 1;
    return a;
}

// kernel<<<grid, block, smem, stream>>>(args...), as a programmatic dependent launch when
// kern_pdl() is on.
template <typename... Params, typename... Args>
static cudaError_t launch(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem,
                          cudaStream_t stream, Args &&...args)
{
    cudaLaunchAttribute attr[1] = {pdl_attribute()};
    return launch_with(kernel, grid, block, smem, stream, attr, kern_pdl() ? 1 : 0,
                       std::forward<Args>(args)...);
}

// launch() for a grid in clusters of `cluster` blocks (sm_90 and later), whose blocks read each
// other's shared memory; a cluster's blocks are asked to go to different SMs where they can (the
// point of splitting work over a cluster is more SMs).
template <typename... Params, typename... Args>
static cudaError_t launch_cluster(void (*kernel)(Params...), dim3 grid, dim3 block, dim3 cluster,
                                  size_t smem, cudaStream_t stream, Args &&...args)
{
    cudaLaunchAttribute attr[3];
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = cluster.x;
    attr[0].val.clusterDim.y = cluster.y;
    attr[0].val.clusterDim.z = cluster.z;
    attr[1].id = cudaLaunchAttributeClusterSchedulingPolicyPreference;
    attr[1].val.clusterSchedulingPolicyPreference = cudaClusterSchedulingPolicySpread;
    attr[2] = pdl_attribute();
    return launch_with(kernel, grid, block, smem, stream, attr, kern_pdl() ? 3 : 2,
                       std::forward<Args>(args)...);
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

// ---- facts a device: a kernel's raised limit, the SM count, resident blocks -----------------
// Each kept a device (device_facts.h), so that ranks of one process on different devices each
// raise their own limits and size their own grids.

// The calling thread's current device, refused by name where it is past device_facts.h's tables
// (rather than given another device's facts).
static inline cudaError_t current_device(int *dev)
{
    cudaError_t rc = cudaGetDevice(dev);
    if (rc != cudaSuccess)
        return rc;
    if (kern_device_in_table(*dev))
        return cudaSuccess;
    kern_log(0, "device %d is past the kernels' tables of %d devices (KERN_MAX_DEVICES in "
                "kernels/device_facts.h): run on a lower device or raise it",
             *dev, KERN_MAX_DEVICES);
    return cudaErrorInvalidDevice;
}

// The current device's SM count, asked once a device (device.cu).
cudaError_t device_sm_count(int *sms);

// What is kept for one kernel instantiation.
template <auto Kernel>
struct kernel_facts {
    static inline kern_smem_raised raised;
    static inline kern_fit_cache fits;
};

// raise_smem_once on device dev, the current one (current_device's).
template <auto Kernel>
static cudaError_t raise_smem_on(int dev, size_t bytes, const char *name)
{
    if (bytes > (size_t)INT_MAX) {
        kern_log(0, "%s asks %zu bytes of shared memory a block", name, bytes);
        return cudaErrorInvalidValue;
    }
    kern_smem_set_fn set = [](void *what, int n) {
        return (int)raise_smem(Kernel, (size_t)n, static_cast<const char *>(what));
    };
    return (cudaError_t)kern_smem_raise_once(&kernel_facts<Kernel>::raised, dev, (int)bytes, set,
                                             const_cast<char *>(name));
}

// Raises Kernel's dynamic shared memory limit on the current device to at least `bytes`, once a
// device (raise_smem's message and error where the device refuses). A limit only grows, so a
// launch asking less than an earlier one finds it there; what a block of that launch takes, and so
// the blocks an SM holds, is its own size, not the limit (cuda_occupancy.h's reckoning).
template <auto Kernel>
static cudaError_t raise_smem_once(size_t bytes, const char *name)
{
    int dev = 0;
    cudaError_t rc = current_device(&dev);
    if (rc != cudaSuccess)
        return rc;
    return raise_smem_on<Kernel>(dev, bytes, name);
}

// Blocks of Kernel the current device holds at once with `threads` threads and `smem` bytes of
// dynamic shared memory a block: the SM count times an SM's blocks, asked once a device and size
// (the limit raised first, raise_smem_once). A kernel no SM can hold at that size is refused.
template <auto Kernel>
static cudaError_t resident_blocks(int threads, size_t smem, const char *name, int *blocks)
{
    int dev = 0, sms = 0, per_sm = 0;
    cudaError_t rc = current_device(&dev);
    if (rc == cudaSuccess)
        rc = raise_smem_on<Kernel>(dev, smem, name);
    if (rc != cudaSuccess)
        return rc;
    if (kern_fit_lookup(&kernel_facts<Kernel>::fits, dev, threads, smem, blocks))
        return cudaSuccess;
    rc = device_sm_count(&sms);
    if (rc == cudaSuccess)
        rc = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, Kernel, threads, smem);
    if (rc != cudaSuccess)
        return rc;
    if (per_sm < 1) {
        kern_log(0, "%s: no SM of device %d holds a block of %d threads and %zu bytes of shared "
                    "memory", name, dev, threads, smem);
        return cudaErrorInvalidConfiguration;
    }
    *blocks = sms * per_sm;
    kern_fit_store(&kernel_facts<Kernel>::fits, dev, threads, smem, *blocks);
    return cudaSuccess;
}
