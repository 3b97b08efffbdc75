// engine_ops.cu: the CUDA backend's row norms, activations and hyper-connection steps
// (architecture.md 2.3): the Sinkhorn mix per token, the stream collapse and update.
#include "engine_common.cuh"

namespace {

constexpr int kHcMaxS = 16;

__global__ void rmsnorm_kernel(float *out, const float *x, const float *w, int n, float eps)
{
    __shared__ float red[33];
    const float *xr = x + (size_t)blockIdx.x * n;
    float *o = out + (size_t)blockIdx.x * n;
    float ss = 0.0f;
    if (n % 4 == 0 && (uintptr_t)xr % 16 == 0) { // 16 bytes a load
        const float4 *x4 = reinterpret_cast<const float4 *>(xr);
        for (int i = threadIdx.x; i < n / 4; i += blockDim.x) {
            float4 a = x4[i];
            ss += a.x * a.x + a.y * a.y + a.z * a.z + a.w * a.w;
        }
    } else {
        for (int i = threadIdx.x; i < n; i += blockDim.x)
            ss += xr[i] * xr[i];
    }
    ss = block_sum(ss, red);
    float inv = 1.0f / sqrtf(ss / (float)n + eps);
    for (int i = threadIdx.x; i < n; i += blockDim.x)
        o[i] = (w ? w[i] : 1.0f) * (xr[i] * inv);
}

__global__ void layernorm_kernel(float *out, const float *x, const float *w, const float *b, int n,
                                 float eps)
{
    __shared__ float red[33];
    const float *xr = x + (size_t)blockIdx.x * n;
    float *o = out + (size_t)blockIdx.x * n;
    float s = 0.0f;
    for (int i = threadIdx.x; i < n; i += blockDim.x)
        s += xr[i];
    float mean = block_sum(s, red) / (float)n;
    float v = 0.0f;
    for (int i = threadIdx.x; i < n; i += blockDim.x)
        v += (xr[i] - mean) * (xr[i] - mean);
    float var = block_sum(v, red) / (float)n;
    float inv = 1.0f / sqrtf(var + eps);
    for (int i = threadIdx.x; i < n; i += blockDim.x)
        o[i] = (xr[i] - mean) * inv * w[i] + b[i];
}

__global__ void swiglu_kernel(float *g, const float *u, size_t n, float lim)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float gi = fminf(g[i], lim);
        float ui = fminf(fmaxf(u[i], -lim), lim);
        g[i] = gi / (1.0f + expf(-gi)) * ui;
    }
}

__global__ void add_kernel(float *y, const float *x, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        y[i] += x[i];
}

__global__ void mean_norm_kernel(float *h, const float *X, const float *w, int S, int D, float eps)
{
    __shared__ float red[33];
    extern __shared__ float row[];
    const float *x = X + (size_t)blockIdx.x * S * D;
    float ss = 0.0f;
    for (int d = threadIdx.x; d < D; d += blockDim.x) {
        float acc = 0.0f;
        for (int k = 0; k < S; k++)
            acc += x[(size_t)k * D + d];
        acc /= (float)S;
        row[d] = acc;
        ss += acc * acc;
    }
    ss = block_sum(ss, red);
    float inv = 1.0f / sqrtf(ss / (float)D + eps);
    for (int d = threadIdx.x; d < D; d += blockDim.x)
        h[(size_t)blockIdx.x * D + d] = w[d] * (row[d] * inv);
}

// One block per token, one thread per element of the S x S mixing matrix (S <= 16): the same
// operations as cpu_hc_pre's Sinkhorn, row and column sums read from shared memory in order.
__global__ void hc_mix_kernel(const float *mu, const float *base, const float *scale, int S,
                              int iters, float eps, float *pre, float *post, float *comb)
{
    __shared__ float C[kHcMaxS * kHcMaxS], rs[kHcMaxS];
    int t = blockIdx.x, k = threadIdx.x, i = k / S, j = k % S;
    int mix = (2 + S) * S;
    const float *m = mu + (size_t)t * mix;
    bool on = k < S * S;
    if (k < S) {
        pre[t * S + k] = sigmoidf_(m[k] * scale[0] + base[k]) + eps;
        post[t * S + k] = 2.0f * sigmoidf_(m[S + k] * scale[1] + base[S + k]);
    }
    if (on)
        C[k] = m[2 * S + k] * scale[2] + base[2 * S + k];
    __syncthreads();
    if (k < S) { // softmax along each row, plus eps: the row maxima first
        float mx = C[k * S];
        for (int c = 1; c < S; c++)
            mx = fmaxf(mx, C[k * S + c]);
        rs[k] = mx;
    }
    __syncthreads();
    float v = on ? expf(C[k] - rs[i]) : 0.0f;
    __syncthreads();
    if (on)
        C[k] = v;
    __syncthreads();
    if (k < S) {
        float sum = 0.0f;
        for (int c = 0; c < S; c++)
            sum += C[k * S + c];
        rs[k] = sum;
    }
    __syncthreads();
    if (on)
        C[k] = C[k] / rs[i] + eps;
    __syncthreads();
    for (int it = 0; it < iters; it++) {
        if (it > 0) {
            if (k < S) {
                float sum = 0.0f;
                for (int c = 0; c < S; c++)
                    sum += C[k * S + c];
                rs[k] = sum;
            }
            __syncthreads();
            if (on)
                C[k] /= rs[i] + eps;
            __syncthreads();
        }
        if (k < S) {
            float sum = 0.0f;
            for (int r = 0; r < S; r++)
                sum += C[r * S + k];
            rs[k] = sum;
        }
        __syncthreads();
        if (on)
            C[k] /= rs[j] + eps;
        __syncthreads();
    }
    if (on)
        comb[(size_t)t * S * S + k] = C[k];
}

__global__ void hc_collapse_kernel(const float *X, const float *pre, int S, int D, float *out)
{
    int t = blockIdx.y;
    for (int d = blockIdx.x * blockDim.x + threadIdx.x; d < D; d += gridDim.x * blockDim.x) {
        float acc = 0.0f;
        for (int s = 0; s < S; s++)
            acc += pre[t * S + s] * X[((size_t)t * S + s) * D + d];
        out[(size_t)t * D + d] = acc;
    }
}

__global__ void hc_post_kernel(float *X, const float *y, const float *post, const float *comb, int S,
                               int D)
{
    int t = blockIdx.y;
    for (int d = blockIdx.x * blockDim.x + threadIdx.x; d < D; d += gridDim.x * blockDim.x) {
        float old[kHcMaxS];
        for (int i = 0; i < S; i++)
            old[i] = X[((size_t)t * S + i) * D + d];
        float yt = y[(size_t)t * D + d];
        const float *C = comb + (size_t)t * S * S;
        for (int j = 0; j < S; j++) {
            float acc = post[t * S + j] * yt;
            for (int i = 0; i < S; i++)
                acc += C[i * S + j] * old[i];
            X[((size_t)t * S + j) * D + d] = acc;
        }
    }
}

// The decode path's HC step (T <= 8). The hidden positions split in ranges of kHcChunk / S over
// blocks; each block stages its range of every stream and token (first applying the previous
// sublayer's HC update there when y is given: hc_post_kernel's arithmetic, each position read and
// written by this block alone), then each warp takes fn rows (lanes over the staged columns, one
// warp sum) and the block sums the squares; the parts are summed in block order later.
constexpr int kHcChunk = 256, kHcMaxSplits = 64, kHcMaxT = 8;

__device__ __forceinline__ int hc_range(int S)
{
    return kHcChunk / S;
}

__global__ void __launch_bounds__(256) hc_fn_partial_kernel(eng_mat fn, float *X, int T, int S,
                                                            int D, float *part, int splits,
                                                            const float *y, const float *post,
                                                            const float *comb)
{
    __shared__ float xs[kHcMaxT][kHcChunk];
    __shared__ float red[33];
    int dc = hc_range(S), d0 = blockIdx.x * dc, w = fn.rows + 1;
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int ks = S * dc; // staged columns: k = s * dc + j is column s * D + d0 + j
    int k = threadIdx.x, s = k / dc, d = d0 + k % dc;
    bool mine = k < ks && d < D;
    for (int t = 0; t < T; t++) {
        float v = 0.0f;
        if (y) { // X[t][s][d] <- post[s] y[d] + sum_i comb[i][s] X[t][i][d]
            float acc = 0.0f;
            if (mine) { // (the old values read straight into the sum: no array in local memory)
                const float *C = comb + (size_t)t * S * S;
                acc = post[t * S + s] * y[(size_t)t * D + d];
                for (int i = 0; i < S; i++)
                    acc += C[i * S + s] * X[((size_t)t * S + i) * D + d];
            }
            __syncthreads(); // every old value read before any is replaced
            if (mine)
                X[((size_t)t * S + s) * D + d] = acc;
            v = acc;
        } else if (mine) {
            v = X[((size_t)t * S + s) * D + d];
        }
        xs[t][k] = mine ? v : 0.0f;
        float ss = block_sum(v * v, red); // its barriers also publish xs
        if (threadIdx.x == 0)
            part[((size_t)t * splits + blockIdx.x) * w + fn.rows] = ss;
    }
    constexpr int kPer = kHcChunk / 32, kRows = 4; // columns a lane; rows whose loads overlap
    int col[kPer];
#pragma unroll
    for (int q = 0; q < kPer; q++) { // this lane's staged columns (-1: none)
        int kk = lane + 32 * q, dd = d0 + kk % dc;
        col[q] = kk < ks && dd < D ? (kk / dc) * D + dd : -1;
    }
    const uint16_t *wb = fn.dtype == ENG_BF16 ? static_cast<const uint16_t *>(fn.data) : nullptr;
    for (int r0 = warp; r0 < fn.rows; r0 += 8 * kRows) {
        float wv[kRows][kPer]; // every weight of kRows rows loaded before any is used
        if (wb) {
#pragma unroll
            for (int i = 0; i < kRows; i++)
#pragma unroll
                for (int q = 0; q < kPer; q++) {
                    int r = r0 + 8 * i;
                    wv[i][q] = r < fn.rows && col[q] >= 0
                                   ? bf16_bits_to_f32(__ldg(wb + (size_t)r * fn.cols + col[q]))
                                   : 0.0f;
                }
        } else {
#pragma unroll
            for (int i = 0; i < kRows; i++)
#pragma unroll
                for (int q = 0; q < kPer; q++) {
                    int r = r0 + 8 * i;
                    wv[i][q] = r < fn.rows && col[q] >= 0 ? mat_at(fn, r, col[q]) : 0.0f;
                }
        }
#pragma unroll
        for (int i = 0; i < kRows; i++) {
            int r = r0 + 8 * i;
            float acc[kHcMaxT];
#pragma unroll
            for (int t = 0; t < kHcMaxT; t++)
                acc[t] = 0.0f;
#pragma unroll
            for (int q = 0; q < kPer; q++)
                if (col[q] >= 0)
#pragma unroll
                    for (int t = 0; t < kHcMaxT; t++)
                        if (t < T)
                            acc[t] += wv[i][q] * xs[t][lane + 32 * q];
#pragma unroll
            for (int t = 0; t < kHcMaxT; t++) {
                float a = warp_sum(acc[t]);
                if (lane == 0 && t < T && r < fn.rows)
                    part[((size_t)t * splits + blockIdx.x) * w + r] = a;
            }
        }
    }
}

// One block per token: the parts summed in block order and scaled by the RMS of X (the normed
// flat streams' product), the Sinkhorn mix in warp 0 (hc_mix_kernel's operations, in its
// order), then the collapse of the streams and its RMSNorm with norm.
__global__ void __launch_bounds__(1024) hc_pre_fused_kernel(const float *part, int splits, int mix,
                                                            const float *X, const float *base,
                                                            const float *scale, const float *norm,
                                                            int S, int D, int iters, float hc_eps,
                                                            float rms_eps, float *pre, float *post,
                                                            float *comb, float *u)
{
    __shared__ float mus[(2 + kHcMaxS) * kHcMaxS + 1];
    __shared__ float C[kHcMaxS * kHcMaxS], pr[kHcMaxS], red[33];
    extern __shared__ float row[]; // [D]
    int t = blockIdx.x, w = mix + 1, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const float *pt = part + (size_t)t * splits * w;
    for (int k = warp; k < w; k += blockDim.x >> 5) { // a warp a sum: its loads in parallel
        float a = 0.0f;
        for (int b = lane; b < splits; b += 32)
            a += pt[(size_t)b * w + k];
        a = warp_sum(a);
        if (lane == 0)
            mus[k] = a;
    }
    __syncthreads();
    if (threadIdx.x < 32) {
        int SS = S * S;
        float inv = 1.0f / sqrtf(mus[mix] / (float)(S * D) + rms_eps);
        for (int k = lane; k < S; k += 32) {
            pr[k] = 1.0f / (1.0f + expf(-(mus[k] * inv * scale[0] + base[k]))) + hc_eps;
            pre[t * S + k] = pr[k];
            post[t * S + k] = 2.0f / (1.0f + expf(-(mus[S + k] * inv * scale[1] + base[S + k])));
        }
        for (int k = lane; k < SS; k += 32)
            C[k] = mus[2 * S + k] * inv * scale[2] + base[2 * S + k];
        __syncwarp();
        if (SS <= 32) { // one element a lane, row and column sums by shuffles, in the same order
            int i = lane / S, j = lane % S;
            float v = lane < SS ? C[lane] : 0.0f;
            float mx = __shfl_sync(0xffffffffu, v, (i * S) & 31);
            for (int c = 1; c < S; c++)
                mx = fmaxf(mx, __shfl_sync(0xffffffffu, v, (i * S + c) & 31));
            float e = lane < SS ? expf(v - mx) : 0.0f, sum = 0.0f;
            for (int c = 0; c < S; c++)
                sum += __shfl_sync(0xffffffffu, e, (i * S + c) & 31);
            v = lane < SS ? e / sum + hc_eps : 0.0f;
            for (int it = 0; it < iters; it++) {
                if (it > 0) {
                    float rsum = 0.0f;
                    for (int c = 0; c < S; c++)
                        rsum += __shfl_sync(0xffffffffu, v, (i * S + c) & 31);
                    if (lane < SS)
                        v /= rsum + hc_eps;
                }
                float csum = 0.0f;
                for (int r = 0; r < S; r++)
                    csum += __shfl_sync(0xffffffffu, v, (r * S + j) & 31);
                if (lane < SS)
                    v /= csum + hc_eps;
            }
            if (lane < SS)
                C[lane] = v;
            __syncwarp();
        } else {
            for (int i = lane; i < S; i += 32) { // softmax along each row, plus eps
                float mx = C[i * S];
                for (int c = 1; c < S; c++)
                    mx = fmaxf(mx, C[i * S + c]);
                float sum = 0.0f;
                for (int c = 0; c < S; c++) {
                    C[i * S + c] = expf(C[i * S + c] - mx);
                    sum += C[i * S + c];
                }
                for (int c = 0; c < S; c++)
                    C[i * S + c] = C[i * S + c] / sum + hc_eps;
            }
            __syncwarp();
            for (int it = 0; it < iters; it++) {
                if (it > 0) {
                    for (int i = lane; i < S; i += 32) { // rows: each lane owns whole rows
                        float sum = 0.0f;
                        for (int c = 0; c < S; c++)
                            sum += C[i * S + c];
                        for (int c = 0; c < S; c++)
                            C[i * S + c] /= sum + hc_eps;
                    }
                    __syncwarp();
                }
                for (int j = lane; j < S; j += 32) { // columns
                    float sum = 0.0f;
                    for (int r = 0; r < S; r++)
                        sum += C[r * S + j];
                    for (int r = 0; r < S; r++)
                        C[r * S + j] /= sum + hc_eps;
                }
                __syncwarp();
            }
        }
        for (int k = lane; k < SS; k += 32)
            comb[(size_t)t * SS + k] = C[k];
    }
    __syncthreads();
    const float *x = X + (size_t)t * S * D;
    float ss = 0.0f;
    for (int d = threadIdx.x; d < D; d += blockDim.x) {
        float acc = 0.0f;
        for (int s = 0; s < S; s++)
            acc += pr[s] * x[(size_t)s * D + d];
        row[d] = acc;
        ss += acc * acc;
    }
    ss = block_sum(ss, red);
    float inv = 1.0f / sqrtf(ss / (float)D + rms_eps);
    for (int d = threadIdx.x; d < D; d += blockDim.x)
        u[(size_t)t * D + d] = (norm ? norm[d] : 1.0f) * (row[d] * inv);
}

unsigned grid_for(size_t n)
{
    unsigned b = blocks_for(n, 256);
    return b < 4096 ? (b ? b : 1) : 4096;
}

} // namespace

extern "C" int eng_rmsnorm(float *out, const float *x, const float *w, int rows, int n, float eps,
                           void *stream)
{
    if (rows < 1 || n < 1)
        return -1;
    rmsnorm_kernel<<<rows, n >= 1024 ? 1024 : 256, 0, static_cast<cudaStream_t>(stream)>>>(out, x, w, n, eps);
    return (int)cudaGetLastError();
}

extern "C" int eng_layernorm(float *out, const float *x, const float *w, const float *b, int rows,
                             int n, float eps, void *stream)
{
    if (rows < 1 || n < 1)
        return -1;
    layernorm_kernel<<<rows, 128, 0, static_cast<cudaStream_t>(stream)>>>(out, x, w, b, n, eps);
    return (int)cudaGetLastError();
}

extern "C" int eng_swiglu(float *g, const float *u, size_t n, float limit, void *stream)
{
    swiglu_kernel<<<grid_for(n), 256, 0, static_cast<cudaStream_t>(stream)>>>(g, u, n, limit);
    return (int)cudaGetLastError();
}

extern "C" int eng_add(float *y, const float *x, size_t n, void *stream)
{
    add_kernel<<<grid_for(n), 256, 0, static_cast<cudaStream_t>(stream)>>>(y, x, n);
    return (int)cudaGetLastError();
}

extern "C" int eng_stream_mean_norm(float *h, const float *X, const float *w, int T, int S, int D,
                                    float eps, void *stream)
{
    if (T < 1 || D < 1)
        return -1;
    mean_norm_kernel<<<T, 256, (size_t)D * sizeof(float), static_cast<cudaStream_t>(stream)>>>(
        h, X, w, S, D, eps);
    return (int)cudaGetLastError();
}

extern "C" int eng_hc_mix(const float *mu, const float *base, const float *scale, int T, int S,
                          int iters, float eps, float *pre, float *post, float *comb, void *stream)
{
    if (S < 1 || S > kHcMaxS || T < 1)
        return -1;
    hc_mix_kernel<<<T, S * S < 32 ? 32 : S * S, 0, static_cast<cudaStream_t>(stream)>>>(
        mu, base, scale, S, iters, eps, pre, post, comb);
    return (int)cudaGetLastError();
}

extern "C" int eng_hc_collapse(const float *X, const float *pre, int T, int S, int D, float *out,
                               void *stream)
{
    dim3 grid(blocks_for((size_t)D, 256) < 32 ? blocks_for((size_t)D, 256) : 32, T);
    hc_collapse_kernel<<<grid, 256, 0, static_cast<cudaStream_t>(stream)>>>(X, pre, S, D, out);
    return (int)cudaGetLastError();
}

extern "C" int eng_hc_post(float *X, const float *y, const float *post, const float *comb, int T,
                           int S, int D, void *stream)
{
    if (S > kHcMaxS)
        return -1;
    dim3 grid(blocks_for((size_t)D, 256) < 32 ? blocks_for((size_t)D, 256) : 32, T);
    hc_post_kernel<<<grid, 256, 0, static_cast<cudaStream_t>(stream)>>>(X, y, post, comb, S, D);
    return (int)cudaGetLastError();
}

extern "C" int eng_hc_splits(int S, int D)
{
    if (S < 1 || S > kHcMaxS || D < 1)
        return -1;
    int b = (int)blocks_for((size_t)D, (unsigned)(kHcChunk / S));
    return b <= kHcMaxSplits ? b : -1;
}

extern "C" int eng_hc_fn_partial(const eng_mat *fn, float *X, int T, int S, int D, const float *y,
                                 const float *post, const float *comb, float *part, void *stream)
{
    int splits = eng_hc_splits(S, D);
    if (!fn || T < 1 || T > kHcMaxT || splits < 1 || fn->cols != S * D)
        return -1;
    hc_fn_partial_kernel<<<splits, 256, 0, static_cast<cudaStream_t>(stream)>>>(
        *fn, X, T, S, D, part, splits, y, post, comb);
    return (int)cudaGetLastError();
}

extern "C" int eng_hc_pre_fused(const float *part, int mix_rows, const float *X, const float *base,
                                const float *scale, const float *norm, int T, int S, int D,
                                int iters, float hc_eps, float rms_eps, float *pre, float *post,
                                float *comb, float *u, void *stream)
{
    if (S < 1 || S > kHcMaxS || T < 1 || T > kHcMaxT || mix_rows != (2 + S) * S ||
        eng_hc_splits(S, D) < 1 ||
        (size_t)D * sizeof(float) > 40 * 1024)
        return -1;
    hc_pre_fused_kernel<<<T, 1024, (size_t)D * sizeof(float), static_cast<cudaStream_t>(stream)>>>(
        part, eng_hc_splits(S, D), mix_rows, X, base, scale, norm, S, D, iters, hc_eps, rms_eps,
        pre, post, comb, u);
    return (int)cudaGetLastError();
}
