// engine_gemm.cu: dense products of many rows (prefill) through cuBLAS: BF16 weights against a
// hi + lo bf16 split of the f32 inputs (two tensor-core GEMMs, f32 accumulation), F32 in f32.
#include <cstdio>
#include <cublas_v2.h>
#include <mutex>

#include "engine_common.cuh"

namespace {

// One cuBLAS handle, workspace and input-split buffer per stream (two ranks of one process run
// on two streams at once, so the buffers cannot be shared).
constexpr int kMaxStreams = 8;
constexpr size_t kWorkspace = ENG_GEMM_WORKSPACE;

struct per_stream {
    cudaStream_t stream;
    cublasHandle_t handle;
    void *workspace;
    __nv_bfloat16 *split; // [2][rows][cols]: hi, then lo
    size_t split_bytes;
    bool used;
};

per_stream g_streams[kMaxStreams];
std::mutex g_lock;

int cublas_code(cublasStatus_t s, const char *what)
{
    if (s == CUBLAS_STATUS_SUCCESS)
        return 0;
    fprintf(stderr, "glmchat: cuBLAS failed in %s: %s\n", what, cublasGetStatusString(s));
    return s == CUBLAS_STATUS_ALLOC_FAILED ? (int)cudaErrorMemoryAllocation : (int)cudaErrorUnknown;
}

// The entry of `st`, created on first use; its split buffer grown to `split_bytes`.
int entry_for(cudaStream_t st, size_t split_bytes, per_stream **out)
{
    std::lock_guard<std::mutex> guard(g_lock);
    per_stream *e = nullptr;
    for (int i = 0; i < kMaxStreams && !e; i++)
        if (g_streams[i].used && g_streams[i].stream == st)
            e = &g_streams[i];
    for (int i = 0; i < kMaxStreams && !e; i++)
        if (!g_streams[i].used) {
            per_stream n = {};
            cudaError_t rc = cudaMalloc(&n.workspace, kWorkspace);
            if (rc != cudaSuccess)
                return (int)rc;
            int brc = cublas_code(cublasCreate(&n.handle), "creating a handle");
            if (!brc)
                brc = cublas_code(cublasSetWorkspace(n.handle, n.workspace, kWorkspace), "setting the workspace");
            if (!brc)
                brc = cublas_code(cublasSetStream(n.handle, st), "setting the stream");
            if (brc) {
                if (n.handle)
                    cublasDestroy(n.handle);
                cudaFree(n.workspace);
                return brc;
            }
            n.stream = st;
            n.used = true;
            g_streams[i] = n;
            e = &g_streams[i];
        }
    if (!e) {
        fprintf(stderr, "glmchat: more than %d CUDA streams ran dense prefill products\n", kMaxStreams);
        return -1;
    }
    if (split_bytes > e->split_bytes) {
        // the old buffer may still be read by this stream's queued GEMMs
        cudaError_t rc = cudaStreamSynchronize(st);
        if (rc == cudaSuccess && e->split)
            rc = cudaFree(e->split);
        e->split = nullptr;
        e->split_bytes = 0;
        if (rc == cudaSuccess)
            rc = cudaMalloc(reinterpret_cast<void **>(&e->split), split_bytes);
        if (rc != cudaSuccess)
            return (int)rc;
        e->split_bytes = split_bytes;
    }
    *out = e;
    return 0;
}

// hi[i] = bf16(x[i]), lo[i] = bf16(x[i] - hi[i]): hi + lo carries about 16 bits of x.
__global__ void split_kernel(const float *__restrict__ x, size_t n, __nv_bfloat16 *__restrict__ hi,
                             __nv_bfloat16 *__restrict__ lo)
{
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        float v = x[i];
        __nv_bfloat16 h = __float2bfloat16_rn(v);
        hi[i] = h;
        lo[i] = __float2bfloat16_rn(v - __bfloat162float(h));
    }
}

} // namespace

extern "C" int eng_gemm_takes(const eng_mat *w, int T)
{
    return w && T > ENG_GEMM_MIN_ROWS && (w->dtype == ENG_BF16 || w->dtype == ENG_F32) &&
           w->rows >= 1 && w->cols >= 1;
}

extern "C" int eng_gemm(const eng_mat *w, const float *x, int T, float *y, void *stream)
{
    if (!eng_gemm_takes(w, T) || !x || !y)
        return -1;
    cudaStream_t st = static_cast<cudaStream_t>(stream);
    size_t n = (size_t)T * w->cols;
    per_stream *e = nullptr;
    int rc = entry_for(st, w->dtype == ENG_BF16 ? 2 * n * sizeof(__nv_bfloat16) : 0, &e);
    if (rc)
        return rc;
    const float one = 1.0f, zero = 0.0f;
    // column-major view: y^T [rows x T] = W^T' (W stored [rows][cols] is cols x rows) * x^T
    if (w->dtype == ENG_F32)
        return cublas_code(cublasGemmEx(e->handle, CUBLAS_OP_T, CUBLAS_OP_N, w->rows, T, w->cols, &one,
                                        w->data, CUDA_R_32F, w->cols, x, CUDA_R_32F, w->cols, &zero, y,
                                        CUDA_R_32F, w->rows, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                           "an f32 product");
    unsigned blocks = (unsigned)((n + 255) / 256 < 4096 ? (n + 255) / 256 : 4096);
    __nv_bfloat16 *hi = e->split, *lo = e->split + n;
    split_kernel<<<blocks, 256, 0, st>>>(x, n, hi, lo);
    cudaError_t crc = cudaGetLastError();
    if (crc != cudaSuccess)
        return (int)crc;
    rc = cublas_code(cublasGemmEx(e->handle, CUBLAS_OP_T, CUBLAS_OP_N, w->rows, T, w->cols, &one, w->data,
                                  CUDA_R_16BF, w->cols, hi, CUDA_R_16BF, w->cols, &zero, y, CUDA_R_32F,
                                  w->rows, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                     "a bf16 product (hi)");
    if (rc)
        return rc;
    return cublas_code(cublasGemmEx(e->handle, CUBLAS_OP_T, CUBLAS_OP_N, w->rows, T, w->cols, &one, w->data,
                                    CUDA_R_16BF, w->cols, lo, CUDA_R_16BF, w->cols, &one, y, CUDA_R_32F,
                                    w->rows, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                       "a bf16 product (lo)");
}

extern "C" void eng_gemm_forget_stream(void *stream)
{
    std::lock_guard<std::mutex> guard(g_lock);
    for (int i = 0; i < kMaxStreams; i++) {
        per_stream *e = &g_streams[i];
        if (!e->used || e->stream != static_cast<cudaStream_t>(stream))
            continue;
        cudaStreamSynchronize(e->stream);
        cublasDestroy(e->handle);
        cudaFree(e->workspace);
        cudaFree(e->split);
        *e = per_stream{};
    }
}
