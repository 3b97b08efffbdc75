// engine_matmul.cu: products with the backend's dense matrices (f32, bf16, f16, fp8 blocks):
// a warp-per-row GEMV for up to 8 tokens (the weights read once, 16 bytes a lane) and a tiled
// GEMM for more; the embedding gather.
#include "engine_common.cuh"

namespace {

constexpr int kGemvWarps = 8;
constexpr int kMaxGemvT = 8;

template <int T>
__global__ void gemv_kernel(eng_mat w, const float *__restrict__ x, float *__restrict__ y)
{
    int lane = threadIdx.x & 31;
    int r = blockIdx.x * kGemvWarps + (threadIdx.x >> 5);
    if (r >= w.rows)
        return;
    const int cols = w.cols;
    float acc[T];
#pragma unroll
    for (int t = 0; t < T; t++)
        acc[t] = 0.0f;
    bool vec8 = (cols % 8) == 0 && (w.dtype == ENG_BF16 || w.dtype == ENG_F16) &&
                ((uintptr_t)w.data % 16) == 0;
    if (vec8) {
        const uint4 *row = reinterpret_cast<const uint4 *>(static_cast<const uint16_t *>(w.data) +
                                                           (size_t)r * cols);
        int n8 = cols / 8;
        for (int i = lane; i < n8; i += 32) {
            uint4 q = __ldg(row + i);
            float wf[8];
            const uint32_t u[4] = {q.x, q.y, q.z, q.w};
            if (w.dtype == ENG_BF16) {
#pragma unroll
                for (int j = 0; j < 4; j++) {
                    wf[2 * j] = __uint_as_float(u[j] << 16);
                    wf[2 * j + 1] = __uint_as_float(u[j] & 0xffff0000u);
                }
            } else {
#pragma unroll
                for (int j = 0; j < 4; j++) {
                    __half2 h = *reinterpret_cast<const __half2 *>(&u[j]);
                    float2 f = __half22float2(h);
                    wf[2 * j] = f.x;
                    wf[2 * j + 1] = f.y;
                }
            }
#pragma unroll
            for (int t = 0; t < T; t++) {
                const float4 *xr = reinterpret_cast<const float4 *>(x + (size_t)t * cols) + 2 * i;
                float4 a = __ldg(xr), b = __ldg(xr + 1);
                acc[t] += wf[0] * a.x + wf[1] * a.y + wf[2] * a.z + wf[3] * a.w + wf[4] * b.x +
                          wf[5] * b.y + wf[6] * b.z + wf[7] * b.w;
            }
        }
    } else if (w.dtype == ENG_F32 && (cols % 4) == 0 && ((uintptr_t)w.data % 16) == 0) {
        const float4 *row = reinterpret_cast<const float4 *>(static_cast<const float *>(w.data) +
                                                             (size_t)r * cols);
        for (int i = lane; i < cols / 4; i += 32) {
            float4 q = __ldg(row + i);
#pragma unroll
            for (int t = 0; t < T; t++) {
                float4 a = __ldg(reinterpret_cast<const float4 *>(x + (size_t)t * cols) + i);
                acc[t] += q.x * a.x + q.y * a.y + q.z * a.z + q.w * a.w;
            }
        }
    } else {
        for (int c = lane; c < cols; c += 32) {
            float v = mat_at(w, r, c);
#pragma unroll
            for (int t = 0; t < T; t++)
                acc[t] += v * x[(size_t)t * cols + c];
        }
    }
#pragma unroll
    for (int t = 0; t < T; t++) {
        float s = warp_sum(acc[t]);
        if (lane == 0)
            y[(size_t)t * w.rows + r] = s;
    }
}

// y [T][rows] = x [T][cols] W^T: 64 tokens x 64 rows a block, 16 columns a step, 4 x 4 a thread.
constexpr int BM = 64, BN = 64, BK = 16;

__global__ void __launch_bounds__(256) gemm_kernel(eng_mat w, const float *__restrict__ x, int T,
                                                   float *__restrict__ y)
{
    __shared__ float xs[BK][BM + 4];
    __shared__ float ws[BK][BN + 4];
    int t0 = blockIdx.y * BM, r0 = blockIdx.x * BN;
    int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
    float acc[4][4] = {};
    for (int k0 = 0; k0 < w.cols; k0 += BK) {
        for (int i = threadIdx.x; i < BM * BK; i += 256) {
            int m = i / BK, kk = i % BK;
            int t = t0 + m, c = k0 + kk;
            xs[kk][m] = t < T && c < w.cols ? x[(size_t)t * w.cols + c] : 0.0f;
            int r = r0 + m;
            ws[kk][m] = r < w.rows && c < w.cols ? mat_at(w, r, c) : 0.0f;
        }
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < BK; kk++) {
            float a[4], b[4];
#pragma unroll
            for (int i = 0; i < 4; i++) {
                a[i] = xs[kk][ty * 4 + i];
                b[i] = ws[kk][tx * 4 + i];
            }
#pragma unroll
            for (int i = 0; i < 4; i++)
#pragma unroll
                for (int j = 0; j < 4; j++)
                    acc[i][j] += a[i] * b[j];
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < 4; i++) {
        int t = t0 + ty * 4 + i;
        if (t >= T)
            continue;
#pragma unroll
        for (int j = 0; j < 4; j++) {
            int r = r0 + tx * 4 + j;
            if (r < w.rows)
                y[(size_t)t * w.rows + r] = acc[i][j];
        }
    }
}

__global__ void embed_kernel(eng_mat w, const int32_t *__restrict__ tokens, int T, int copies,
                             float *__restrict__ out)
{
    int t = blockIdx.y;
    int tok = tokens[t];
    for (int c = blockIdx.x * blockDim.x + threadIdx.x; c < w.cols; c += gridDim.x * blockDim.x) {
        float v = tok >= 0 && tok < w.rows ? mat_at(w, tok, c) : 0.0f;
        for (int k = 0; k < copies; k++)
            out[((size_t)t * copies + k) * w.cols + c] = v;
    }
}

__global__ void element_kernel(eng_mat w, int r, int c, float *out)
{
    *out = mat_at(w, r, c);
}

template <int T>
cudaError_t gemv_launch(const eng_mat *w, const float *x, float *y, cudaStream_t st)
{
    gemv_kernel<T><<<blocks_for((size_t)w->rows, kGemvWarps), 32 * kGemvWarps, 0, st>>>(*w, x, y);
    return cudaGetLastError();
}

} // namespace

extern "C" int eng_matmul(const eng_mat *w, const float *x, int T, float *y, void *stream)
{
    if (!w || T < 1 || w->rows < 1 || w->cols < 1)
        return -1;
    cudaStream_t st = static_cast<cudaStream_t>(stream);
    if (T > kMaxGemvT) {
        dim3 grid(blocks_for((size_t)w->rows, BN), blocks_for((size_t)T, BM));
        gemm_kernel<<<grid, 256, 0, st>>>(*w, x, T, y);
        return (int)cudaGetLastError();
    }
    switch (T) {
    case 1: return (int)gemv_launch<1>(w, x, y, st);
    case 2: return (int)gemv_launch<2>(w, x, y, st);
    case 3: return (int)gemv_launch<3>(w, x, y, st);
    case 4: return (int)gemv_launch<4>(w, x, y, st);
    case 5: return (int)gemv_launch<5>(w, x, y, st);
    case 6: return (int)gemv_launch<6>(w, x, y, st);
    case 7: return (int)gemv_launch<7>(w, x, y, st);
    default: return (int)gemv_launch<8>(w, x, y, st);
    }
}

extern "C" int eng_embed(const eng_mat *w, const int32_t *tokens, int T, int copies, float *out,
                         void *stream)
{
    if (!w || T < 1 || copies < 1)
        return -1;
    dim3 grid(blocks_for((size_t)w->cols, 256) < 64 ? blocks_for((size_t)w->cols, 256) : 64, T);
    embed_kernel<<<grid, 256, 0, static_cast<cudaStream_t>(stream)>>>(*w, tokens, T, copies, out);
    return (int)cudaGetLastError();
}

extern "C" int eng_mat_element(const eng_mat *w, int r, int c, float *out_dev, void *stream)
{
    element_kernel<<<1, 1, 0, static_cast<cudaStream_t>(stream)>>>(*w, r, c, out_dev);
    return (int)cudaGetLastError();
}
