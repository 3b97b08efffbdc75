// engine_index.cu: the DSA indexer on the GPU (architecture.md 2.5): cache rows in f32, bf16 or
// e4m3 with a power-of-two row scale, the pooled index keys, their scores and the top-k (radix
// select, ties to the lower pool).
#include <cub/block/block_scan.cuh>

#include "engine_common.cuh"

namespace {

constexpr int kSelectThreads = 1024;

// Writes vals (shared, width floats) as row `row` of c; every thread of the block calls it.
__device__ void store_row(const eng_cache &c, size_t row, const float *vals, float *red)
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

__global__ void cache_write_kernel(eng_cache c, const int *pos0, const float *src)
{
    pdl_prologue();
    __shared__ float red[33];
    extern __shared__ float vals[];
    int t = blockIdx.x;
    for (int d = threadIdx.x; d < c.width; d += blockDim.x)
        vals[d] = src[(size_t)t * c.width + d];
    __syncthreads();
    store_row(c, (size_t)(*pos0 + t), vals, red);
}

__global__ void pool_key_kernel(eng_cache keys, eng_cache gates, eng_cache pool, const float *ape,
                                const int *pos0, int T, int kp)
{
    pdl_prologue();
    __shared__ float red[33];
    extern __shared__ float vals[];
    int first = *pos0 / kp, p = first + blockIdx.x;
    if ((p + 1) * kp > *pos0 + T)
        return;
    int ID = keys.width;
    for (int d = threadIdx.x; d < ID; d += blockDim.x) {
        float mx = -INFINITY;
        for (int j = 0; j < kp; j++)
            mx = fmaxf(mx, cache_at(gates, (size_t)p * kp + j, d) + ape[j * ID + d]);
        float sum = 0.0f, acc = 0.0f;
        for (int j = 0; j < kp; j++) {
            float e = expf(cache_at(gates, (size_t)p * kp + j, d) + ape[j * ID + d] - mx);
            sum += e;
            acc += e * cache_at(keys, (size_t)p * kp + j, d);
        }
        vals[d] = acc / sum;
    }
    __syncthreads();
    store_row(pool, (size_t)p, vals, red);
}

__global__ void score_kernel(eng_cache pool, const float *iq, const float *hw, const int *pos0,
                             int t_off, int IH, int ID, int kp, int budget, int max_pools, float *scores)
{
    pdl_prologue();
    int t = blockIdx.y, lane = threadIdx.x & 31;
    int p = blockIdx.x * (blockDim.x / 32) + (threadIdx.x >> 5);
    int P = (*pos0 + t_off + t + 1) / kp;
    if (P <= budget || p >= P)
        return;
    const float *q = iq + (size_t)t * IH * ID;
    float hscale = rsqrtf((float)IH), dscale = rsqrtf((float)ID), score = 0.0f;
    for (int h = 0; h < IH; h++) {
        float dot = 0.0f;
        for (int d = lane; d < ID; d += 32)
            dot += q[h * ID + d] * cache_at(pool, (size_t)p, d);
        dot = warp_sum(dot) * dscale;
        score += hw[(size_t)t * IH + h] * hscale * (dot > 0.0f ? dot : 0.0f);
    }
    if (lane == 0)
        scores[(size_t)t * max_pools + p] = score;
}

// Larger float, larger key; both zeros are one key (they compare equal on the CPU).
__device__ __forceinline__ uint32_t order_key(float f)
{
    if (f == 0.0f)
        f = 0.0f;
    uint32_t u = __float_as_uint(f);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

__global__ void __launch_bounds__(kSelectThreads) select_kernel(const float *scores,
                                                                const int *pos0, int t_off, int kp,
                                                                int budget,
                                                                int max_pools, int width,
                                                                int32_t *idx, int *count)
{
    pdl_prologue();
    typedef cub::BlockScan<int, kSelectThreads> scan_t;
    __shared__ typename scan_t::TempStorage scan_tmp;
    __shared__ int hist[256];
    __shared__ uint32_t s_prefix;
    __shared__ int s_remaining;
    int t = blockIdx.x, pos = *pos0 + t_off + t, P = (pos + 1) / kp;
    int32_t *out = idx + (size_t)t * width;
    const float *sc = scores + (size_t)t * max_pools;
    int n = 0;
    if (P <= budget) {
        for (int s = threadIdx.x; s < P * kp; s += blockDim.x)
            out[s] = s;
        n = P * kp;
    } else {
        uint32_t prefix = 0, mask = 0;
        int remaining = budget;
        for (int shift = 24; shift >= 0; shift -= 8) {
            for (int i = threadIdx.x; i < 256; i += blockDim.x)
                hist[i] = 0;
            __syncthreads();
            for (int p = threadIdx.x; p < P; p += blockDim.x) {
                uint32_t key = order_key(sc[p]);
                if ((key & mask) == prefix)
                    atomicAdd(&hist[(key >> shift) & 255u], 1);
            }
            __syncthreads();
            if (threadIdx.x == 0) {
                int cum = 0;
                for (int b = 255; b >= 0; b--) {
                    if (cum + hist[b] >= remaining) {
                        s_prefix = prefix | ((uint32_t)b << shift);
                        s_remaining = remaining - cum;
                        break;
                    }
                    cum += hist[b];
                }
            }
            __syncthreads();
            prefix = s_prefix;
            remaining = s_remaining;
            mask |= 255u << shift;
            __syncthreads();
        }
        // prefix: the budget-th largest key; `remaining` pools equal to it are taken, lowest first
        int eq_before = 0, sel_before = 0;
        for (int base = 0; base < P; base += blockDim.x) {
            int p = base + threadIdx.x;
            uint32_t key = p < P ? order_key(sc[p]) : 0u;
            int eq = p < P && key == prefix, eq_rank, eq_total;
            scan_t(scan_tmp).ExclusiveSum(eq, eq_rank, eq_total);
            __syncthreads();
            int sel = p < P && (key > prefix || (eq && eq_before + eq_rank < remaining));
            int at, sel_total;
            scan_t(scan_tmp).ExclusiveSum(sel, at, sel_total);
            __syncthreads();
            if (sel)
                for (int j = 0; j < kp; j++)
                    out[(size_t)(sel_before + at) * kp + j] = p * kp + j;
            eq_before += eq_total;
            sel_before += sel_total;
        }
        n = budget * kp;
    }
    for (int s = P * kp + threadIdx.x; s <= pos; s += blockDim.x) // the open tail
        out[n + (s - P * kp)] = s;
    if (threadIdx.x == 0)
        count[t] = n + (pos + 1 - P * kp);
}

} // namespace

extern "C" int eng_cache_write(const eng_cache *c, const int *pos0, const float *src, int T,
                               void *stream)
{
    if (!c || T < 1 || c->width < 1)
        return -1;
    launch(cache_write_kernel, T, 128, (size_t)c->width * sizeof(float),
           static_cast<cudaStream_t>(stream), *c, pos0, src);
    return (int)cudaGetLastError();
}

extern "C" int eng_pool_keys(const eng_cache *keys, const eng_cache *gates, const eng_cache *pool,
                             const float *ape, const int *pos0, int T, int kpool, void *stream)
{
    if (kpool < 1 || T < 1)
        return -1;
    launch(pool_key_kernel, T / kpool + 1, 128, (size_t)keys->width * sizeof(float),
           static_cast<cudaStream_t>(stream), *keys, *gates, *pool, ape, pos0, T, kpool);
    return (int)cudaGetLastError();
}

extern "C" int eng_dsa_select(const eng_cache *pool, const float *iq, const float *hw,
                              const int *pos0, int t_off, int T, int IH, int ID, int kpool,
                              int budget,
                              int max_pools, float *scores, int width, int32_t *idx, int *count,
                              void *stream)
{
    if (T < 1 || kpool < 1 || budget < 0 || max_pools < 1)
        return -1;
    cudaStream_t st = static_cast<cudaStream_t>(stream);
    if (max_pools > budget) {
        dim3 grid(blocks_for((size_t)max_pools, 8), T);
        launch(score_kernel, grid, 256, 0, st, *pool, iq, hw, pos0, t_off, IH, ID, kpool, budget,
               max_pools, scores);
    }
    launch(select_kernel, T, kSelectThreads, 0, st, scores, pos0, t_off, kpool, budget, max_pools,
           width, idx, count);
    return (int)cudaGetLastError();
}
