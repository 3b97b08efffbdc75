// engine_ops.cu: the CUDA backend's row norms, activations and hyper-connection steps
// (architecture.md 2.3): the Sinkhorn mix per token, the stream collapse and update.
#include "engine_common.cuh"
#include "engine_rows.cuh"

#include <cuda_pipeline.h>

namespace {

constexpr int kHcMaxS = 16;

__global__ void rmsnorm_kernel(float *out, const float *x, const float *w, int n, float eps)
{
    pdl_prologue();
    __shared__ float red[33];
    rmsnorm_row(out + (size_t)blockIdx.x * n, x + (size_t)blockIdx.x * n, w, n, eps, red, nullptr,
                blockDim.x);
}

__global__ void layernorm_kernel(float *out, const float *x, const float *w, const float *b, int n,
                                 float eps)
{
    pdl_prologue();
    __shared__ float red[33];
    layernorm_row(out + (size_t)blockIdx.x * n, x + (size_t)blockIdx.x * n, w, b, n, eps, red,
                  nullptr, blockDim.x);
}

__global__ void swiglu_kernel(float *g, const float *u, size_t n, float lim)
{
    pdl_prologue();
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float gi = fminf(g[i], lim);
        float ui = fminf(fmaxf(u[i], -lim), lim);
        g[i] = gi / (1.0f + expf(-gi)) * ui;
    }
}

__global__ void add_kernel(float *y, const float *x, size_t n)
{
    pdl_prologue();
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        y[i] += x[i];
}

// The register form's RMSNorm of a row of D floats held kD a thread: c[j] = value(j) at column
// d = threadIdx.x + j * blockDim.x, its square added as soon as it is made, with its weight w[j]:
// out[d] = w[j] * (c[j] / rms(c)) for d < D.
template <int kD, typename Value>
static __device__ __forceinline__ void rmsnorm_regs(Value value, const float (&w)[kD], int D,
                                                    float eps, float *red, float *out)
{
    float c[kD], ss = 0.0f;
#pragma unroll
    for (int j = 0; j < kD; j++) {
        int d = threadIdx.x + j * blockDim.x;
        c[j] = value(j);
        if (d < D)
            ss += c[j] * c[j];
    }
    ss = block_sum(ss, red);
    float inv = 1.0f / sqrtf(ss / (float)D + eps);
#pragma unroll
    for (int j = 0; j < kD; j++) {
        int d = threadIdx.x + j * blockDim.x;
        if (d < D)
            out[d] = w[j] * (c[j] * inv);
    }
}

// The loop form's RMSNorm of a row of D floats, the block's threads over d: c[d] = value(d) staged
// in row (shared, [D]), its square added as it is made; out[d] = weight(d) * (c[d] / rms(c)).
template <typename Value, typename Weight>
static __device__ __forceinline__ void rmsnorm_staged(Value value, Weight weight, int D, float eps,
                                                      float *row, float *red, float *out)
{
    float ss = 0.0f;
    for (int d = threadIdx.x; d < D; d += blockDim.x) {
        float acc = value(d);
        row[d] = acc;
        ss += acc * acc;
    }
    ss = block_sum(ss, red);
    float inv = 1.0f / sqrtf(ss / (float)D + eps);
    for (int d = threadIdx.x; d < D; d += blockDim.x)
        out[d] = weight(d) * (row[d] * inv);
}

// One block per token (kMeanThreads threads): with S <= kMeanRegS and D <= 4 * kMeanThreads each
// thread loads its 4 positions of every stream and of w before it waits on any (one round trip
// instead of one per position and stream); else the loop form, the mean staged in shared memory.
constexpr int kMeanThreads = 1024, kMeanRegS = 4, kMeanRegD = 4;

__global__ void __launch_bounds__(kMeanThreads) mean_norm_kernel(float *h, const float *X,
                                                                 const float *w, int S, int D,
                                                                 float eps)
{
    pdl_prologue();
    __shared__ float red[33];
    extern __shared__ float row[];
    const float *x = X + (size_t)blockIdx.x * S * D;
    if (S <= kMeanRegS && D <= kMeanRegD * (int)blockDim.x) {
        float xv[kMeanRegD][kMeanRegS], wv[kMeanRegD];
#pragma unroll
        for (int j = 0; j < kMeanRegD; j++) {
            int d = threadIdx.x + j * blockDim.x;
#pragma unroll
            for (int k = 0; k < kMeanRegS; k++)
                xv[j][k] = d < D && k < S ? x[(size_t)k * D + d] : 0.0f;
            wv[j] = d < D ? w[d] : 0.0f;
        }
        auto mean = [&](int j) { // the streams' mean at the thread's j-th column
            float acc = 0.0f;
#pragma unroll
            for (int k = 0; k < kMeanRegS; k++)
                if (k < S)
                    acc += xv[j][k];
            return acc / (float)S;
        };
        rmsnorm_regs<kMeanRegD>(mean, wv, D, eps, red, h + (size_t)blockIdx.x * D);
        return;
    }
    auto mean = [&](int d) { // the streams' mean at column d
        float acc = 0.0f;
        for (int k = 0; k < S; k++)
            acc += x[(size_t)k * D + d];
        return acc / (float)S;
    };
    rmsnorm_staged(mean, [&](int d) { return w[d]; }, D, eps, row, red,
                   h + (size_t)blockIdx.x * D);
}

// rs[k] = the sum of the S x S matrix C's row k (rows) or column k, in index order, for k < S;
// then a barrier. Every thread of the block calls.
__device__ __forceinline__ void hc_line_sums(const float *C, int S, int k, bool rows, float *rs)
{
    if (k < S) {
        float sum = 0.0f;
        for (int c = 0; c < S; c++)
            sum += C[rows ? k * S + c : c * S + k];
        rs[k] = sum;
    }
    __syncthreads();
}

// One block per token, one thread per element of the S x S mixing matrix (S <= 16): the same
// operations as cpu_hc_pre's Sinkhorn, row and column sums read from shared memory in order.
__global__ void hc_mix_kernel(const float *mu, const float *base, const float *scale, int S,
                              int iters, float eps, float *pre, float *post, float *comb)
{
    pdl_prologue();
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
    hc_line_sums(C, S, k, true, rs);
    if (on)
        C[k] = C[k] / rs[i] + eps;
    __syncthreads();
    for (int it = 0; it < iters; it++) {
        if (it > 0) { // rows
            hc_line_sums(C, S, k, true, rs);
            if (on)
                C[k] /= rs[i] + eps;
            __syncthreads();
        }
        hc_line_sums(C, S, k, false, rs); // columns
        if (on)
            C[k] /= rs[j] + eps;
        __syncthreads();
    }
    if (on)
        comb[(size_t)t * S * S + k] = C[k];
}

__global__ void hc_collapse_kernel(const float *X, const float *pre, int S, int D, float *out)
{
    pdl_prologue();
    int t = blockIdx.y;
    for (int d = blockIdx.x * blockDim.x + threadIdx.x; d < D; d += gridDim.x * blockDim.x) {
        float acc = 0.0f;
        for (int s = 0; s < S; s++)
            acc += pre[t * S + s] * X[((size_t)t * S + s) * D + d];
        out[(size_t)t * D + d] = acc;
    }
}

__global__ void hc_post_kernel(float *X, const float *y, const float *y2, const float *post,
                               const float *comb, int S, int D)
{
    pdl_prologue();
    int t = blockIdx.y;
    for (int d = blockIdx.x * blockDim.x + threadIdx.x; d < D; d += gridDim.x * blockDim.x) {
        float old[kHcMaxS];
        for (int i = 0; i < S; i++)
            old[i] = X[((size_t)t * S + i) * D + d];
        float yt = y2 ? y[(size_t)t * D + d] + y2[(size_t)t * D + d] : y[(size_t)t * D + d];
        const float *C = comb + (size_t)t * S * S;
        for (int j = 0; j < S; j++) {
            float acc = post[t * S + j] * yt;
            for (int i = 0; i < S; i++)
                acc += C[i * S + j] * old[i];
            X[((size_t)t * S + j) * D + d] = acc;
        }
    }
}

// The prefill path's HC update (S 4, D a multiple of 4, rows 16-byte aligned): hc_post_kernel's
// arithmetic with its order pinned (y + y2 first; post * y, then a fused multiply-add a stream in
// stream order, as the compiler contracts hc_post_kernel's sums), four positions a thread in
// float4s, the token's comb and post in registers instead of a load an element.
constexpr int kPost4Threads = 256;

__global__ void __launch_bounds__(kPost4Threads) hc_post4_kernel(float *X, const float *y,
                                                                 const float *y2, const float *post,
                                                                 const float *comb, int D)
{
    pdl_prologue();
    constexpr int S = 4;
    int t = blockIdx.y, q = blockIdx.x * blockDim.x + threadIdx.x, D4 = D / 4;
    if (q >= D4)
        return;
    float4 *xt = reinterpret_cast<float4 *>(X + (size_t)t * S * D) + q;
    float4 old[S];
#pragma unroll
    for (int i = 0; i < S; i++)
        old[i] = xt[(size_t)i * D4];
    float4 yt = reinterpret_cast<const float4 *>(y + (size_t)t * D)[q];
    if (y2) {
        float4 b = reinterpret_cast<const float4 *>(y2 + (size_t)t * D)[q];
        yt = make_float4(__fadd_rn(yt.x, b.x), __fadd_rn(yt.y, b.y), __fadd_rn(yt.z, b.z),
                         __fadd_rn(yt.w, b.w));
    }
    float C[S * S], P[S];
#pragma unroll
    for (int k = 0; k < S * S; k++)
        C[k] = comb[(size_t)t * S * S + k];
#pragma unroll
    for (int j = 0; j < S; j++)
        P[j] = post[t * S + j];
#pragma unroll
    for (int j = 0; j < S; j++) {
        float4 a = make_float4(__fmul_rn(P[j], yt.x), __fmul_rn(P[j], yt.y), __fmul_rn(P[j], yt.z),
                               __fmul_rn(P[j], yt.w));
#pragma unroll
        for (int i = 0; i < S; i++) {
            float c = C[i * S + j];
            a.x = __fmaf_rn(c, old[i].x, a.x);
            a.y = __fmaf_rn(c, old[i].y, a.y);
            a.z = __fmaf_rn(c, old[i].z, a.z);
            a.w = __fmaf_rn(c, old[i].w, a.w);
        }
        xt[(size_t)j * D4] = a;
    }
}

// The decode path's HC step (T <= 8). The hidden positions split in ranges of dc = kHcCols / S
// over blocks, so a block stages kHcCols columns of the flat streams (k = s * dc + j: stream s at
// position d0 + j). Thread (t, j) applies the previous sublayer's HC update to token t at one
// position when y is given (hc_post_kernel's arithmetic; that position is read and written by
// this thread alone, so no barrier guards it) and sums its squares; then each warp takes fn rows
// (lanes over the staged columns, one warp sum a row and token). Every sum has a fixed order that
// does not depend on T, so a token's bits are the same in a launch of 1 row or of 8.
constexpr int kHcCols = 128, kHcThreads = 256, kHcWarps = kHcThreads / 32, kHcMaxT = 8;
constexpr int kHcMaxSplits = ENG_HC_MAX_SPLITS;
constexpr int kHcPer = kHcCols / 32, kHcRows = 3; // staged columns a lane; rows a warp loads at once

__host__ __device__ __forceinline__ int hc_range(int S)
{
    return kHcCols / S;
}

// kHcRows rows of fn (r0, r0 + kHcWarps, ...) at this lane's staged columns (-1: none, weight 0),
// every load issued before any is used.
__device__ __forceinline__ void hc_fn_load(const eng_mat &fn, const uint16_t *wb, int r0,
                                           const int *col, float (*wv)[kHcPer])
{
#pragma unroll
    for (int i = 0; i < kHcRows; i++)
#pragma unroll
        for (int q = 0; q < kHcPer; q++) {
            int r = r0 + kHcWarps * i;
            bool on = r < fn.rows && col[q] >= 0;
            wv[i][q] = !on ? 0.0f
                       : wb ? bf16_bits_to_f32(__ldg(wb + (size_t)r * fn.cols + col[q]))
                            : mat_at(fn, r, col[q]);
        }
}

// kS > 0: S is kS, known when compiling (its loops unrolled, the old values in registers);
// kS == 0: S comes at run time (the old values staged in shared memory).
template <int kS>
__global__ void __launch_bounds__(kHcThreads) hc_fn_partial_kernel(eng_mat fn, float *X, int T,
                                                                   int S_, int D, float *part,
                                                                   int splits, const float *y,
                                                                   const float *y2,
                                                                   const float *post,
                                                                   const float *comb)
{
    pdl_trigger();
    __shared__ float xs[kHcMaxT][kHcCols], sq[kHcMaxT][kHcCols];
    __shared__ float xo[kS ? 1 : kHcMaxT][kS ? 1 : kHcCols];
    const int S = kS ? kS : S_;
    int dc = kHcCols / S, d0 = blockIdx.x * dc, rows = fn.rows, w = rows + 1;
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int col[kHcPer];
#pragma unroll
    for (int q = 0; q < kHcPer; q++) { // this lane's staged columns as columns of fn
        int kk = lane + 32 * q, s = kk / dc, dd = d0 + kk - s * dc;
        col[q] = s < S && dd < D ? s * D + dd : -1;
    }
    const uint16_t *wb = fn.dtype == ENG_BF16 ? static_cast<const uint16_t *>(fn.data) : nullptr;
    float wv[kHcRows][kHcPer]; // the first rows' weights: they do not wait on X
    hc_fn_load(fn, wb, warp, col, wv);
    pdl_wait(); // (the weights are no kernel's output: their loads go out before the wait)
    for (int idx = threadIdx.x; idx < T * dc; idx += kHcThreads) {
        int t = idx / dc, j = idx - t * dc, d = d0 + j;
        float ss = 0.0f;
        if (d >= D) {
            for (int s = 0; s < S; s++)
                xs[t][s * dc + j] = 0.0f;
        } else if (y) { // X[t][s][d] <- post[s] y[d] + sum_i comb[i][s] X[t][i][d]
            float *xt = X + (size_t)t * S * D + d;
            const float *C = comb + (size_t)t * S * S, *pt = post + t * S;
            // y2: a second part of the sublayer's output, summed here as eng_add would first
            float yt = y2 ? y[(size_t)t * D + d] + y2[(size_t)t * D + d] : y[(size_t)t * D + d];
            float ov[kS ? kS : 1];
            if constexpr (kS > 0) {
#pragma unroll
                for (int i = 0; i < kS; i++)
                    ov[i] = xt[(size_t)i * D];
            } else {
                for (int i = 0; i < S; i++)
                    xo[t][i * dc + j] = xt[(size_t)i * D];
            }
#pragma unroll
            for (int s = 0; s < S; s++) {
                float acc = pt[s] * yt;
#pragma unroll
                for (int i = 0; i < S; i++)
                    acc += C[i * S + s] * (kS ? ov[kS ? i : 0] : xo[t][i * dc + j]); // ov[i] when kS
                xt[(size_t)s * D] = acc;
                xs[t][s * dc + j] = acc;
                ss += acc * acc;
            }
        } else {
            const float *xt = X + (size_t)t * S * D + d;
#pragma unroll
            for (int s = 0; s < S; s++) {
                float v = xt[(size_t)s * D];
                xs[t][s * dc + j] = v;
                ss += v * v;
            }
        }
        sq[t][j] = ss;
    }
    __syncthreads();
    if (warp < T) { // warp t: token t's sum of squares over the block's positions
        float a = 0.0f;
        for (int j = lane; j < dc; j += 32)
            a += sq[warp][j];
        a = warp_sum(a);
        if (lane == 0)
            part[((size_t)warp * splits + blockIdx.x) * w + rows] = a;
    }
    float xv[kHcMaxT][kHcPer];
#pragma unroll
    for (int t = 0; t < kHcMaxT; t++)
#pragma unroll
        for (int q = 0; q < kHcPer; q++)
            xv[t][q] = t < T && col[q] >= 0 ? xs[t][lane + 32 * q] : 0.0f;
    for (int r0 = warp; r0 < rows; r0 += kHcWarps * kHcRows) {
        if (r0 != warp)
            hc_fn_load(fn, wb, r0, col, wv);
#pragma unroll
        for (int i = 0; i < kHcRows; i++) {
            int r = r0 + kHcWarps * i;
#pragma unroll
            for (int t = 0; t < kHcMaxT; t++) {
                if (t >= T)
                    break;
                float a = 0.0f;
#pragma unroll
                for (int q = 0; q < kHcPer; q++)
                    a += wv[i][q] * xv[t][q];
                a = warp_sum(a);
                if (lane == 0 && r < rows)
                    part[((size_t)t * splits + blockIdx.x) * w + r] = a;
            }
        }
    }
}

// Part row k of token t summed in block order (lanes over the blocks, then a warp sum): the
// same order wherever it is summed, so both kernels below see the same sum of squares.
__device__ __forceinline__ float hc_part_sum(const float *part, int splits, int w, int t, int k)
{
    const float *pt = part + (size_t)t * splits * w + k;
    float a = 0.0f;
    for (int b = threadIdx.x & 31; b < splits; b += 32)
        a += pt[(size_t)b * w];
    return warp_sum(a);
}

// The sum of line `line` of an S x S matrix held one element a lane (v; S * S <= 32): its row
// (rows) or its column, in index order.
__device__ __forceinline__ float shfl_line_sum(float v, int S, int line, bool rows)
{
    float sum = 0.0f;
#pragma unroll
    for (int c = 0; c < S; c++)
        sum += __shfl_sync(0xffffffffu, v, (rows ? line * S + c : c * S + line) & 31);
    return sum;
}

// Each row (rows) or column of the S x S matrix C (shared) divided by its sum plus eps, the sum
// in index order, a lane a whole line; then __syncwarp.
__device__ __forceinline__ void hc_normalise_lines(float *C, int S, int lane, bool rows, float eps)
{
    for (int i = lane; i < S; i += 32) {
        float sum = 0.0f;
        for (int c = 0; c < S; c++)
            sum += C[rows ? i * S + c : c * S + i];
        for (int c = 0; c < S; c++)
            C[rows ? i * S + c : c * S + i] /= sum + eps;
    }
    __syncwarp();
}

// Warp 0: post [S] and the Sinkhorn-normalised comb [S][S] of token t from the summed parts
// (cpu_hc_pre's operations in its order; row and column sums by shuffles when S * S <= 32).
// kS as in hc_fn_partial_kernel.
template <int kS>
__device__ void hc_sinkhorn_warp(const float *mus, int mix, const float *base, const float *scale,
                                 int S_, int D, int iters, float hc_eps, float rms_eps, int t,
                                 float *post, float *comb, float *C /* shared [S * S] */)
{
    const int S = kS ? kS : S_;
    int lane = threadIdx.x & 31, SS = S * S;
    float inv = 1.0f / sqrtf(mus[mix] / (float)(S * D) + rms_eps);
    for (int k = lane; k < S; k += 32)
        post[t * S + k] = 2.0f / (1.0f + expf(-(mus[S + k] * inv * scale[1] + base[S + k])));
    for (int k = lane; k < SS; k += 32)
        C[k] = mus[2 * S + k] * inv * scale[2] + base[2 * S + k];
    __syncwarp();
    if (SS <= 32) { // one element a lane, row and column sums by shuffles, in the same order
        int i = lane / S, j = lane % S;
        float v = lane < SS ? C[lane] : 0.0f;
        float mx = __shfl_sync(0xffffffffu, v, (i * S) & 31);
#pragma unroll
        for (int c = 1; c < S; c++)
            mx = fmaxf(mx, __shfl_sync(0xffffffffu, v, (i * S + c) & 31));
        float e = lane < SS ? expf(v - mx) : 0.0f, sum = shfl_line_sum(e, S, i, true);
        v = lane < SS ? e / sum + hc_eps : 0.0f;
        for (int it = 0; it < iters; it++) {
            if (it > 0) {
                float rsum = shfl_line_sum(v, S, i, true);
                if (lane < SS)
                    v /= rsum + hc_eps;
            }
            float csum = shfl_line_sum(v, S, j, false);
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
            if (it > 0)
                hc_normalise_lines(C, S, lane, true, hc_eps);
            hc_normalise_lines(C, S, lane, false, hc_eps);
        }
    }
    for (int k = lane; k < SS; k += 32)
        comb[(size_t)t * SS + k] = C[k];
}

// One block of kHcMixThreads a token: its warps sum the parts of post, comb and the squares,
// then warp 0 runs the Sinkhorn. Only the HC update after the sublayer reads post and comb.
constexpr int kHcMixThreads = 256;

template <int kS>
__global__ void __launch_bounds__(kHcMixThreads) hc_sinkhorn_kernel(
    const float *part, int splits, int mix, const float *base, const float *scale, int S, int D,
    int iters, float hc_eps, float rms_eps, float *post, float *comb)
{
    pdl_prologue();
    __shared__ float mus[(2 + kHcMaxS) * kHcMaxS + 1], C[kHcMaxS * kHcMaxS];
    int t = blockIdx.x, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (int k = S + warp; k <= mix; k += kHcMixThreads / 32) {
        float a = hc_part_sum(part, splits, mix + 1, t, k);
        if (lane == 0)
            mus[k] = a;
    }
    __syncthreads();
    if (warp == 0)
        hc_sinkhorn_warp<kS>(mus, mix, base, scale, S, D, iters, hc_eps, rms_eps, t, post, comb, C);
}

// A token's collapse and RMSNorm, the block's threads over d: ut[d] = norm[d] * c[d] / rms(c) with
// c[d] = sum_s pr[s] x[s][d] (eng_hc_collapse's sum, in its order), c staged in row (shared, [D]).
// Both the fused pre kernel's loop form and hc_collapse_rmsnorm_kernel run it, so their bits agree.
static __device__ __forceinline__ void hc_collapse_rmsnorm_row(const float *x, const float *pr,
                                                               const float *norm, int S, int D,
                                                               float eps, float *row, float *red,
                                                               float *ut)
{
    auto collapse = [&](int d) {
        float acc = 0.0f;
        for (int s = 0; s < S; s++)
            acc += pr[s] * x[(size_t)s * D + d];
        return acc;
    };
    rmsnorm_staged(collapse, [&](int d) { return norm ? norm[d] : 1.0f; }, D, eps, row, red, ut);
}

// One block of kHcPreThreads a token: pre, the collapse of the streams and its RMSNorm with norm
// into u. Warps 0..S-1 sum pre's parts and warp S the squares. With S <= kHcRegS and
// D <= kHcRegD * kHcPreThreads each thread loads its share of X and norm into registers before
// waiting on anything, else it reads them in the loops (a row of D floats in shared memory).
constexpr int kHcPreThreads = 1024, kHcRegS = 4, kHcRegD = 4;

__global__ void __launch_bounds__(kHcPreThreads) hc_collapse_norm_kernel(
    const float *part, int splits, int mix, const float *X, const float *base, const float *scale,
    const float *norm, int S, int D, float hc_eps, float rms_eps, float *pre, float *u)
{
    pdl_prologue();
    __shared__ float mus[kHcMaxS + 1], pr[kHcMaxS], red[33];
    extern __shared__ float row[]; // [D] (the loop form)
    int t = blockIdx.x, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const float *x = X + (size_t)t * S * D;
    const bool regs = S <= kHcRegS && D <= kHcRegD * (int)blockDim.x;
    float xv[kHcRegD][kHcRegS], nv[kHcRegD];
    if (regs) { // every load of this thread issued before the first wait
#pragma unroll
        for (int j = 0; j < kHcRegD; j++) {
            int d = threadIdx.x + j * blockDim.x;
#pragma unroll
            for (int s = 0; s < kHcRegS; s++)
                xv[j][s] = d < D && s < S ? x[(size_t)s * D + d] : 0.0f;
            nv[j] = d < D && norm ? norm[d] : 1.0f;
        }
    }
    if (warp <= S) {
        float a = hc_part_sum(part, splits, mix + 1, t, warp < S ? warp : mix);
        if (lane == 0)
            mus[warp] = a;
    }
    __syncthreads();
    if (threadIdx.x < S) {
        int k = threadIdx.x;
        float inv = 1.0f / sqrtf(mus[S] / (float)(S * D) + rms_eps);
        pr[k] = 1.0f / (1.0f + expf(-(mus[k] * inv * scale[0] + base[k]))) + hc_eps;
        pre[t * S + k] = pr[k];
    }
    __syncthreads();
    if (regs) {
        auto collapse = [&](int j) { // sum_s pre[s] X[s] at the thread's j-th column
            float a = 0.0f;
#pragma unroll
            for (int s = 0; s < kHcRegS; s++)
                if (s < S)
                    a += pr[s] * xv[j][s];
            return a;
        };
        rmsnorm_regs<kHcRegD>(collapse, nv, D, rms_eps, red, u + (size_t)t * D);
        return;
    }
    hc_collapse_rmsnorm_row(x, pr, norm, S, D, rms_eps, row, red, u + (size_t)t * D);
}

// The prefill path's HC input norm and mixing product in one pass over X (fn of kNmOut rows in
// f32, or bf16 as the checkpoint stores it, S * D a multiple of kNmTile). A block of kNmWarps
// warps takes kNmRowsBlock rows and one of P column parts of the flat streams (P =
// hc_nm_parts(N): fixed by the shape, never by T, so a row's bits do not depend on T); a warp
// takes kNmRowsWarp rows; each lane owns 4 consecutive columns of every 128 and keeps, for each
// of its rows, the sum of squares and the kNmOut products of its columns in registers, so X is
// read once, in float4s. fn goes through shared memory in tiles of kNmTile columns (cp.async,
// two buffers), shared by the block's rows. After the part's last tile the lanes' sums are
// summed by warp_sum into part[t][p][0..kNmOut] (the sum of squares last); hc_nm_combine_kernel
// sums the parts in part order and scales by the row's 1 / rms (the same value as RMS-norming
// the row first: the norm has no weight). Every row runs the same operations in the same order
// wherever it lands, so a row's bits depend on that row alone. The parts keep few rows (a short
// prompt's chunk) spread over SMs: one part would leave a block walking all of fn's columns
// alone.
//
// What bounds it: X read once at copy bandwidth (4 bytes an element) against the issue an
// element costs: 25 FMAs (24 products and the square), 1.68 G at 4,096 rows, about 50 us on 132
// SMs at 1.98 GHz, plus a shared load and 4 widenings of a bf16 fn for each 4 columns of each fn
// row, shared by the warp's rows: with 2 rows about 1.6 times the FMAs (80 us), under X's floor
// at copy bandwidth. So the kernel spends that margin on loads in flight: 2 rows a warp (48
// accumulators) and X prefetched kNmDepth - 1 tiles ahead in a register ring (unrolled, so no
// copy between slots forces an early wait) fit 128 registers, 16 warps an SM: with a bf16 fn
// kNmDepth 3, 64 KB of X in flight an SM steadily, each tile's loads given two tiles of compute
// to land. Blocks of 8 warps make that two blocks an SM, so one block's start (its first tile's
// whole latency) and end (its warp sums) overlap the other's tiles. (A form of one block an SM,
// 4 rows a warp and X 1 tile ahead in 254 registers gave the same bits, slower on a long chunk
// and no faster on short ones: one tile of X in flight an SM, the SM idle at a block's start and
// end.) A bf16 fn stays bf16 in shared memory: 24 x 2 B / 2 rows = 24 B an X element, where
// widened to f32 there 48 B an element at X's floor would pass shared memory's 128 B a clock an
// SM. One barrier a tile: the wait for tile t's fn and the barrier come first, then tile t + 1's
// fn is staged into the other buffer, which every warp finished with before that barrier.
constexpr int kNmOut = 24, kNmThreads = 256, kNmWarps = kNmThreads / 32, kNmRowsWarp = 2;
constexpr int kNmRowsBlock = kNmWarps * kNmRowsWarp, kNmTile = 256, kNmSteps = kNmTile / 128;
constexpr int kNmMaxParts = 8, kNmPart = kNmOut + 1; // a part's products, then its sum of squares

// The slots of a warp's X ring (tile t in slot t % kNmDepth, kNmDepth - 1 tiles loading ahead of
// the one in use): 3 for a bf16 fn; 2 for an f32 fn (not the checkpoint's), where 3 spills.
template <typename Tw> constexpr int kNmDepth = sizeof(Tw) == 2 ? 3 : 2;

// The column parts of a row of N: the most of 8, 4, 2 that divide N into whole tiles.
__host__ __device__ __forceinline__ int hc_nm_parts(int N)
{
    int p = kNmMaxParts;
    while (p > 1 && N % (kNmTile * p) != 0)
        p /= 2;
    return p;
}

// A tile of fn into shared memory as stored (16 bytes a copy: 4 f32 or 8 bf16 values).
template <typename Tw>
__device__ __forceinline__ void hc_nm_stage(Tw (*ws)[kNmTile], const Tw *W, int N, int tile)
{
    constexpr int kPer = 16 / (int)sizeof(Tw);
    for (int k = threadIdx.x; k < kNmOut * (kNmTile / kPer); k += kNmThreads) {
        int r = k / (kNmTile / kPer), c = (k - r * (kNmTile / kPer)) * kPer;
        __pipeline_memcpy_async(&ws[r][c], W + (size_t)r * N + (size_t)tile * kNmTile + c, 16);
    }
    __pipeline_commit();
}

// Four consecutive fn values from shared memory as floats (a bf16 widens exactly).
__device__ __forceinline__ float4 hc_nm_w4(const float *w)
{
    return *reinterpret_cast<const float4 *>(w);
}

__device__ __forceinline__ float4 hc_nm_w4(const __nv_bfloat16 *w)
{
    uint2 b = *reinterpret_cast<const uint2 *>(w);
    return make_float4(__uint_as_float(b.x << 16), __uint_as_float(b.x & 0xffff0000u),
                       __uint_as_float(b.y << 16), __uint_as_float(b.y & 0xffff0000u));
}

// A tile of the warp's rows (x: its first row at the lane's first column; a row after the
// last reads as zeros).
__device__ __forceinline__ void hc_nm_load(float4 (*xv)[kNmRowsWarp], const float *x, int N,
                                           const bool *on, int tile)
{
#pragma unroll
    for (int s = 0; s < kNmSteps; s++)
#pragma unroll
        for (int i = 0; i < kNmRowsWarp; i++)
            xv[s][i] = on[i] ? __ldg(reinterpret_cast<const float4 *>(
                                   x + i * N + tile * kNmTile + s * 128))
                             : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
}

// One tile of the part: the sums of squares, then each fn row's products.
template <typename Tw>
__device__ __forceinline__ void hc_nm_tile(const Tw (*ws)[kNmTile],
                                           const float4 (*xv)[kNmRowsWarp], int lane,
                                           float (*acc)[kNmOut], float *ss)
{
#pragma unroll
    for (int s = 0; s < kNmSteps; s++) {
#pragma unroll
        for (int i = 0; i < kNmRowsWarp; i++) {
            float4 x = xv[s][i];
            ss[i] = fmaf(x.x, x.x, ss[i]);
            ss[i] = fmaf(x.y, x.y, ss[i]);
            ss[i] = fmaf(x.z, x.z, ss[i]);
            ss[i] = fmaf(x.w, x.w, ss[i]);
        }
#pragma unroll
        for (int o = 0; o < kNmOut; o++) {
            float4 w = hc_nm_w4(&ws[o][s * 128 + 4 * lane]);
#pragma unroll
            for (int i = 0; i < kNmRowsWarp; i++) {
                float4 x = xv[s][i];
                float a = acc[i][o];
                a = fmaf(w.x, x.x, a);
                a = fmaf(w.y, x.y, a);
                a = fmaf(w.z, x.z, a);
                a = fmaf(w.w, x.w, a);
                acc[i][o] = a;
            }
        }
    }
}

template <typename Tw>
__global__ void __launch_bounds__(kNmThreads, 2) hc_norm_mix_kernel(
    const float *__restrict__ X, const Tw *__restrict__ W, int T, int N, float *__restrict__ part)
{
    constexpr int Depth = kNmDepth<Tw>;
    pdl_trigger();
    __shared__ __align__(16) Tw ws[2][kNmOut][kNmTile];
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, parts = gridDim.y;
    int r0 = (blockIdx.x * kNmWarps + warp) * kNmRowsWarp, tiles = N / kNmTile / parts;
    int first = blockIdx.y * tiles; // this part's first tile
    bool on[kNmRowsWarp];
#pragma unroll
    for (int i = 0; i < kNmRowsWarp; i++)
        on[i] = r0 + i < T;
    const float *x = X + (size_t)(on[0] ? r0 : 0) * N + 4 * lane; // a row after T: not read
    hc_nm_stage(ws[0], W, N, first); // fn is no kernel's output: it loads before the wait
    pdl_wait();
    float acc[kNmRowsWarp][kNmOut], ss[kNmRowsWarp];
#pragma unroll
    for (int i = 0; i < kNmRowsWarp; i++) {
        ss[i] = 0.0f;
#pragma unroll
        for (int o = 0; o < kNmOut; o++)
            acc[i][o] = 0.0f;
    }
    float4 xq[Depth][kNmSteps][kNmRowsWarp]; // tile t's X in slot t % Depth
#pragma unroll
    for (int d = 0; d < Depth - 1; d++)
        if (d < tiles)
            hc_nm_load(xq[d], x, N, on, first + d);
    for (int base = 0; base < tiles; base += Depth) {
#pragma unroll
        for (int j = 0; j < Depth; j++) { // unrolled so that the slots are registers
            int tile = base + j;
            if (tile >= tiles)
                break;
            __pipeline_wait_prior(0); // this tile's fn
            __syncthreads();          // ... seen by all; every warp is done with the other buffer
            if (tile + 1 < tiles)
                hc_nm_stage(ws[(tile & 1) ^ 1], W, N, first + tile + 1);
            if (tile + Depth - 1 < tiles)
                hc_nm_load(xq[(j + Depth - 1) % Depth], x, N, on, first + tile + Depth - 1);
            hc_nm_tile<Tw>(ws[tile & 1], xq[j], lane, acc, ss);
        }
    }
#pragma unroll
    for (int i = 0; i < kNmRowsWarp; i++) {
        float *pt = part + ((size_t)(on[i] ? r0 + i : 0) * parts + blockIdx.y) * kNmPart;
        float q = warp_sum(ss[i]);
        if (lane == kNmOut && on[i])
            pt[kNmOut] = q;
#pragma unroll
        for (int o = 0; o < kNmOut; o++) {
            float a = warp_sum(acc[i][o]);
            if (lane == o && on[i])
                pt[o] = a;
        }
    }
}

// mu[t][o] = (the parts' products summed in part order) / sqrt(their sums of squares, summed in
// part order, / N + eps): a thread a (t, o).
__global__ void hc_nm_combine_kernel(const float *part, int T, int N, int parts, float eps,
                                     float *mu)
{
    pdl_prologue();
    int k = blockIdx.x * blockDim.x + threadIdx.x;
    if (k >= T * kNmOut)
        return;
    int t = k / kNmOut, o = k - t * kNmOut;
    const float *pt = part + (size_t)t * parts * kNmPart;
    float a = 0.0f, q = 0.0f;
    for (int p = 0; p < parts; p++) {
        a += pt[p * kNmPart + o];
        q += pt[p * kNmPart + kNmOut];
    }
    mu[k] = a * (1.0f / sqrtf(q / (float)N + eps));
}

// The prefill path's HC collapse and the sublayer's RMSNorm in one pass: one block a token,
// u[t] = norm * c / rms(c) with c[d] = sum_s pre[t][s] X[t][s][d] (eng_hc_collapse's sum, in its
// order), c staged in shared memory between the two. A token's bits depend on that token alone.
constexpr int kCnThreads = 1024;

__global__ void __launch_bounds__(kCnThreads) hc_collapse_rmsnorm_kernel(
    const float *X, const float *pre, const float *norm, int S, int D, float eps, float *u)
{
    pdl_prologue();
    __shared__ float red[33], pr[kHcMaxS];
    extern __shared__ float row[]; // [D]
    int t = blockIdx.x;
    const float *x = X + (size_t)t * S * D;
    if ((int)threadIdx.x < S)
        pr[threadIdx.x] = pre[t * S + threadIdx.x];
    __syncthreads();
    hc_collapse_rmsnorm_row(x, pr, norm, S, D, eps, row, red, u + (size_t)t * D);
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
    launch(rmsnorm_kernel, rows, rmsnorm_threads(n), 0, static_cast<cudaStream_t>(stream), out,
           x, w, n, eps);
    return (int)cudaGetLastError();
}

extern "C" int eng_layernorm(float *out, const float *x, const float *w, const float *b, int rows,
                             int n, float eps, void *stream)
{
    if (rows < 1 || n < 1)
        return -1;
    launch(layernorm_kernel, rows, kLayernormThreads, 0, static_cast<cudaStream_t>(stream), out, x,
           w, b, n, eps);
    return (int)cudaGetLastError();
}

extern "C" int eng_swiglu(float *g, const float *u, size_t n, float limit, void *stream)
{
    launch(swiglu_kernel, grid_for(n), 256, 0, static_cast<cudaStream_t>(stream), g, u, n, limit);
    return (int)cudaGetLastError();
}

extern "C" int eng_add(float *y, const float *x, size_t n, void *stream)
{
    launch(add_kernel, grid_for(n), 256, 0, static_cast<cudaStream_t>(stream), y, x, n);
    return (int)cudaGetLastError();
}

extern "C" int eng_stream_mean_norm(float *h, const float *X, const float *w, int T, int S, int D,
                                    float eps, void *stream)
{
    if (T < 1 || D < 1)
        return -1;
    bool regs = S <= kMeanRegS && D <= kMeanRegD * kMeanThreads; // no row in shared memory
    if (!regs && (size_t)D * sizeof(float) > 48 * 1024)
        return -1;
    launch(mean_norm_kernel, T, kMeanThreads, regs ? 0 : (size_t)D * sizeof(float),
           static_cast<cudaStream_t>(stream), h, X, w, S, D, eps);
    return (int)cudaGetLastError();
}

extern "C" int eng_hc_mix(const float *mu, const float *base, const float *scale, int T, int S,
                          int iters, float eps, float *pre, float *post, float *comb, void *stream)
{
    if (S < 1 || S > kHcMaxS || T < 1)
        return -1;
    launch(hc_mix_kernel, T, S * S < 32 ? 32 : S * S, 0, static_cast<cudaStream_t>(stream), mu,
           base, scale, S, iters, eps, pre, post, comb);
    return (int)cudaGetLastError();
}

extern "C" int eng_hc_collapse(const float *X, const float *pre, int T, int S, int D, float *out,
                               void *stream)
{
    dim3 grid(blocks_for((size_t)D, 256) < 32 ? blocks_for((size_t)D, 256) : 32, T);
    launch(hc_collapse_kernel, grid, 256, 0, static_cast<cudaStream_t>(stream), X, pre, S, D, out);
    return (int)cudaGetLastError();
}

extern "C" int eng_hc_post(float *X, const float *y, const float *y2, const float *post,
                           const float *comb, int T, int S, int D, void *stream)
{
    if (S > kHcMaxS)
        return -1;
    if (T > kHcMaxT && S == 4 && D % 4 == 0 && (uintptr_t)X % 16 == 0 && (uintptr_t)y % 16 == 0 &&
        (uintptr_t)y2 % 16 == 0) { // prefill: float4s (the decode path's rows: the kernel below)
        dim3 grid4(blocks_for((size_t)D / 4, kPost4Threads), T);
        launch(hc_post4_kernel, grid4, kPost4Threads, 0, static_cast<cudaStream_t>(stream), X, y,
               y2, post, comb, D);
        return (int)cudaGetLastError();
    }
    dim3 grid(blocks_for((size_t)D, 256) < 32 ? blocks_for((size_t)D, 256) : 32, T);
    launch(hc_post_kernel, grid, 256, 0, static_cast<cudaStream_t>(stream), X, y, y2, post, comb, S,
           D);
    return (int)cudaGetLastError();
}

extern "C" int eng_hc_splits(int S, int D)
{
    if (S < 1 || S > kHcMaxS || D < 1)
        return -1;
    int b = (int)blocks_for((size_t)D, (unsigned)hc_range(S));
    return b <= kHcMaxSplits ? b : -1;
}

extern "C" int eng_hc_fn_partial(const eng_mat *fn, float *X, int T, int S, int D, const float *y,
                                 const float *y2, const float *post, const float *comb, float *part,
                                 void *stream)
{
    int splits = eng_hc_splits(S, D);
    if (!fn || T < 1 || T > kHcMaxT || splits < 1 || fn->cols != S * D)
        return -1;
    cudaStream_t st = static_cast<cudaStream_t>(stream);
    if (S == 4)
        launch(hc_fn_partial_kernel<4>, splits, kHcThreads, 0, st, *fn, X, T, S, D, part, splits, y,
               y2, post, comb);
    else
        launch(hc_fn_partial_kernel<0>, splits, kHcThreads, 0, st, *fn, X, T, S, D, part, splits, y,
               y2, post, comb);
    return (int)cudaGetLastError();
}

extern "C" int eng_hc_collapse_norm(const float *part, int mix_rows, const float *X,
                                    const float *base, const float *scale, const float *norm, int T,
                                    int S, int D, float hc_eps, float rms_eps, float *pre, float *u,
                                    void *stream)
{
    int splits = eng_hc_splits(S, D);
    if (S < 1 || S > kHcMaxS || T < 1 || T > kHcMaxT || mix_rows != (2 + S) * S || splits < 1 ||
        (size_t)D * sizeof(float) > 40 * 1024)
        return -1;
    cudaStream_t st = static_cast<cudaStream_t>(stream);
    bool regs = S <= kHcRegS && D <= kHcRegD * kHcPreThreads; // no row in shared memory
    launch(hc_collapse_norm_kernel, T, kHcPreThreads, regs ? 0 : (size_t)D * sizeof(float), st,
           part, splits, mix_rows, X, base, scale, norm, S, D, hc_eps, rms_eps, pre, u);
    return (int)cudaGetLastError();
}

extern "C" int eng_hc_sinkhorn(const float *part, int mix_rows, const float *base,
                               const float *scale, int T, int S, int D, int iters, float hc_eps,
                               float rms_eps, float *post, float *comb, void *stream)
{
    int splits = eng_hc_splits(S, D);
    if (S < 1 || S > kHcMaxS || T < 1 || T > kHcMaxT || mix_rows != (2 + S) * S || splits < 1)
        return -1;
    cudaStream_t ms = static_cast<cudaStream_t>(stream);
    if (S == 4)
        launch(hc_sinkhorn_kernel<4>, T, kHcMixThreads, 0, ms, part, splits, mix_rows, base, scale,
               S, D, iters, hc_eps, rms_eps, post, comb);
    else
        launch(hc_sinkhorn_kernel<0>, T, kHcMixThreads, 0, ms, part, splits, mix_rows, base, scale,
               S, D, iters, hc_eps, rms_eps, post, comb);
    return (int)cudaGetLastError();
}

extern "C" int eng_hc_norm_mix_takes(const eng_mat *fn, int S, int D)
{
    return fn && (fn->dtype == ENG_F32 || fn->dtype == ENG_BF16) && !fn->scale && S >= 1 && S <= kHcMaxS && D >= 1 &&
           fn->rows == (2 + S) * S && fn->rows == kNmOut && fn->cols == S * D &&
           (S * D) % kNmTile == 0 && (uintptr_t)fn->data % 16 == 0;
}

extern "C" size_t eng_hc_norm_mix_work(int S, int D)
{
    return (size_t)hc_nm_parts(S * D) * kNmPart;
}

extern "C" int eng_hc_norm_mix(const eng_mat *fn, const float *X, int T, int S, int D, float eps,
                               float *work, float *mu, void *stream)
{
    if (T < 1 || !eng_hc_norm_mix_takes(fn, S, D) || (uintptr_t)X % 16 != 0 || !work)
        return -1;
    int N = S * D, parts = hc_nm_parts(N);
    cudaStream_t st = static_cast<cudaStream_t>(stream);
    dim3 grid(blocks_for((size_t)T, kNmRowsBlock), parts);
    if (fn->dtype == ENG_BF16)
        launch(hc_norm_mix_kernel<__nv_bfloat16>, grid, kNmThreads, 0, st, X,
               static_cast<const __nv_bfloat16 *>(fn->data), T, N, work);
    else
        launch(hc_norm_mix_kernel<float>, grid, kNmThreads, 0, st, X,
               static_cast<const float *>(fn->data), T, N, work);
    int rc = (int)cudaGetLastError();
    if (rc)
        return rc;
    launch(hc_nm_combine_kernel, blocks_for((size_t)T * kNmOut, 256), 256, 0, st,
           static_cast<const float *>(work), T, N, parts, eps, mu);
    return (int)cudaGetLastError();
}

extern "C" int eng_hc_collapse_rmsnorm(const float *X, const float *pre, const float *norm, int T,
                                       int S, int D, float eps, float *u, void *stream)
{
    if (T < 1 || S < 1 || S > kHcMaxS || D < 1 || !eng_hc_collapse_rmsnorm_takes(D))
        return -1;
    launch(hc_collapse_rmsnorm_kernel, T, kCnThreads, (size_t)D * sizeof(float),
           static_cast<cudaStream_t>(stream), X, pre, norm, S, D, eps, u);
    return (int)cudaGetLastError();
}

extern "C" int eng_hc_collapse_rmsnorm_takes(int D)
{
    return D >= 1 && (size_t)D * sizeof(float) <= 40 * 1024;
}
