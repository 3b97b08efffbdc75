// engine_rt.cu: streams, pinned host memory, CUDA graphs and events for the CUDA backend, behind
// kernels/engine.h so that the engine's C code needs no CUDA headers.
#include <cuda_runtime.h>

#include "engine.h"

extern "C" int eng_stream_new(void **stream)
{
    cudaStream_t s;
    cudaError_t rc = cudaStreamCreate(&s); // blocking: ordered with the default stream's copies
    *stream = rc == cudaSuccess ? s : nullptr;
    return (int)rc;
}

extern "C" void eng_stream_free(void *stream)
{
    eng_gemm_forget_stream(stream);
    if (stream)
        cudaStreamDestroy(static_cast<cudaStream_t>(stream));
}

extern "C" int eng_stream_sync(void *stream)
{
    return (int)cudaStreamSynchronize(static_cast<cudaStream_t>(stream));
}

extern "C" int eng_copy_async(void *dst, const void *src, size_t bytes, void *stream)
{
    return (int)cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, static_cast<cudaStream_t>(stream));
}

extern "C" int eng_copy_2d(void *dst, size_t dst_pitch, const void *src, size_t src_pitch,
                           size_t width, size_t rows, void *stream)
{
    return (int)cudaMemcpy2DAsync(dst, dst_pitch, src, src_pitch, width, rows, cudaMemcpyDefault,
                                  static_cast<cudaStream_t>(stream));
}

extern "C" int eng_host_alloc(void **ptr, size_t bytes)
{
    return (int)cudaMallocHost(ptr, bytes ? bytes : 1);
}

extern "C" void eng_host_free(void *ptr)
{
    if (ptr)
        cudaFreeHost(ptr);
}

extern "C" int eng_capture_begin(void *stream)
{
    return (int)cudaStreamBeginCapture(static_cast<cudaStream_t>(stream),
                                       cudaStreamCaptureModeThreadLocal);
}

extern "C" int eng_capture_end_keep(void *stream, void **graph, void **graph_exec)
{
    cudaGraph_t g = nullptr;
    *graph = nullptr;
    *graph_exec = nullptr;
    cudaError_t rc = cudaStreamEndCapture(static_cast<cudaStream_t>(stream), &g);
    if (rc != cudaSuccess)
        return (int)rc;
    cudaGraphExec_t ex;
    rc = cudaGraphInstantiate(&ex, g, 0);
    if (rc != cudaSuccess) {
        cudaGraphDestroy(g);
        return (int)rc;
    }
    *graph = g;
    *graph_exec = ex;
    return 0;
}

extern "C" int eng_capture_end(void *stream, void **graph_exec)
{
    void *g = nullptr;
    int rc = eng_capture_end_keep(stream, &g, graph_exec);
    eng_graph_destroy(g);
    return rc;
}

extern "C" void eng_graph_destroy(void *graph)
{
    if (graph)
        cudaGraphDestroy(static_cast<cudaGraph_t>(graph));
}

extern "C" int eng_graph_launch(void *graph_exec, void *stream)
{
    return (int)cudaGraphLaunch(static_cast<cudaGraphExec_t>(graph_exec),
                                static_cast<cudaStream_t>(stream));
}

extern "C" void eng_graph_free(void *graph_exec)
{
    if (graph_exec)
        cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(graph_exec));
}

extern "C" int eng_mem_info(size_t *free_bytes, size_t *total_bytes)
{
    return (int)cudaMemGetInfo(free_bytes, total_bytes);
}

extern "C" int eng_last_error(void)
{
    return (int)cudaGetLastError();
}

extern "C" int eng_event_new(void **ev)
{
    cudaEvent_t e;
    cudaError_t rc = cudaEventCreate(&e);
    *ev = rc == cudaSuccess ? e : nullptr;
    return (int)rc;
}

extern "C" int eng_fence_new(void **ev)
{
    cudaEvent_t e;
    cudaError_t rc = cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
    *ev = rc == cudaSuccess ? e : nullptr;
    return (int)rc;
}

extern "C" int eng_stream_wait(void *stream, void *ev)
{
    return (int)cudaStreamWaitEvent(static_cast<cudaStream_t>(stream), static_cast<cudaEvent_t>(ev),
                                    0);
}

extern "C" void eng_event_free(void *ev)
{
    if (ev)
        cudaEventDestroy(static_cast<cudaEvent_t>(ev));
}

extern "C" int eng_event_sync(void *ev)
{
    return (int)cudaEventSynchronize(static_cast<cudaEvent_t>(ev));
}

extern "C" int eng_event_record(void *ev, void *stream)
{
    return (int)cudaEventRecord(static_cast<cudaEvent_t>(ev), static_cast<cudaStream_t>(stream));
}

extern "C" int eng_event_record_node(void *ev, void *stream)
{
    cudaStream_t st = static_cast<cudaStream_t>(stream);
    return (int)cudaEventRecordWithFlags(static_cast<cudaEvent_t>(ev), st, cudaEventRecordExternal);
}

extern "C" int eng_event_ms(void *start, void *end, float *ms)
{
    cudaError_t rc = cudaEventSynchronize(static_cast<cudaEvent_t>(end));
    if (rc == cudaSuccess)
        rc = cudaEventElapsedTime(ms, static_cast<cudaEvent_t>(start), static_cast<cudaEvent_t>(end));
    return (int)rc;
}

extern "C" int eng_device_integrated(void)
{
    int dev = 0, v = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&v, cudaDevAttrIntegrated, dev) != cudaSuccess)
        return 0;
    return v;
}
