// engine_rows.cuh: one row's RMSNorm and LayerNorm by a whole block, and one cache row's store,
// shared by the norm kernels, the cache writes and the launches that fuse a norm with its write.
#pragma once

#include "engine_common.cuh"

// The block sizes of a row's norms: their sums' order depends on them, so a launch that fuses a
// norm with more work runs it at the norm kernel's size.
static __host__ __device__ inline int rmsnorm_threads(int n)
{
    return n >= 1024 ? 1024 : 256;
}
constexpr int kLayernormThreads = 128;

// o = w * (x / rms(x)) over n floats (w NULL: 1), every thread of the block calling, as a block
// of nthr threads (a multiple of 32, at most blockDim.x) computes it: threads from nthr on add
// nothing, and block_sum's sum is then the nthr-thread block's bit for bit (the warps past nthr
// give +0, as the lanes past its warps do). The sum of squares in 16-byte loads where x allows.
// With vals (shared, n floats) the outputs are also left there.
static __device__ __forceinline__ void rmsnorm_row(float *o, const float *xr, const float *w, int n,
                                                   float eps, float *red /* [33] shared */,
                                                   float *vals, int nthr)
{
    const int first = (int)threadIdx.x < nthr ? (int)threadIdx.x : n; // past nthr: no element
    float ss = 0.0f;
    if (n % 4 == 0 && (uintptr_t)xr % 16 == 0) { // 16 bytes a load
        const float4 *x4 = reinterpret_cast<const float4 *>(xr);
        for (int i = first; i < n / 4; i += nthr) {
            float4 a = x4[i];
            ss += a.x * a.x + a.y * a.y + a.z * a.z + a.w * a.w;
        }
    } else {
        for (int i = first; i < n; i += nthr)
            ss += xr[i] * xr[i];
    }
    ss = block_sum(ss, red);
    float inv = 1.0f / sqrtf(ss / (float)n + eps);
    for (int i = first; i < n; i += nthr) {
        float v = (w ? w[i] : 1.0f) * (xr[i] * inv);
        o[i] = v;
        if (vals)
            vals[i] = v;
    }
}

// o = (x - mean) / sqrt(var + eps) * w + b over n floats, every thread of the block calling, as
// a block of nthr threads computes it (rmsnorm_row's rule); with vals (shared, n floats) the
// outputs also there.
static __device__ __forceinline__ void layernorm_row(float *o, const float *xr, const float *w,
                                                     const float *b, int n, float eps,
                                                     float *red /* [33] shared */, float *vals,
                                                     int nthr)
{
    const int first = (int)threadIdx.x < nthr ? (int)threadIdx.x : n;
    float s = 0.0f;
    for (int i = first; i < n; i += nthr)
        s += xr[i];
    float mean = block_sum(s, red) / (float)n;
    float v = 0.0f;
    for (int i = first; i < n; i += nthr)
        v += (xr[i] - mean) * (xr[i] - mean);
    float var = block_sum(v, red) / (float)n;
    float inv = 1.0f / sqrtf(var + eps);
    for (int i = first; i < n; i += nthr) {
        float r = (xr[i] - mean) * inv * w[i] + b[i];
        o[i] = r;
        if (vals)
            vals[i] = r;
    }
}

// Writes vals (shared, width floats) as row `row` of c; every thread of the block calls it. The
// e4m3 row scale comes from the row's largest magnitude (a maximum: the same whatever the block's
// size), a power of two.
static __device__ __forceinline__ void cache_store_row(const eng_cache &c, size_t row,
                                                       const float *vals, float *red)
{
    int w = c.width;
    if (c.dtype == ENG_CACHE_F32) {
        for (int d = threadIdx.x; d < w; d += blockDim.x)
            static_cast<float *>(c.rows)[row * w + d] = vals[d];
        return;
    }
    if (c.dtype == ENG_CACHE_BF16) {
        for (int d = threadIdx.x; d < w; d += blockDim.x) {
            __nv_bfloat16 b = __float2bfloat16_rn(vals[d]);
            static_cast<__nv_bfloat16 *>(c.rows)[row * w + d] = b;
        }
        return;
    }
    float amax = 0.0f;
    for (int d = threadIdx.x; d < w; d += blockDim.x)
        amax = fmaxf(amax, fabsf(vals[d]));
    amax = block_max(amax, red);
    float scale = amax > 0.0f ? exp2f(ceilf(log2f(amax / 448.0f))) : 1.0f;
    if (amax / scale > 448.0f)
        scale *= 2.0f;
    for (int d = threadIdx.x; d < w; d += blockDim.x) {
        __nv_fp8_e4m3 q(vals[d] / scale);
        static_cast<uint8_t *>(c.rows)[row * w + d] = q.__x;
    }
    if (threadIdx.x == 0)
        c.scale[row] = scale;
}
