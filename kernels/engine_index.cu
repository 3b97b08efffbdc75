// engine_index.cu: the DSA indexer on the GPU (architecture.md 2.5): cache rows in f32, bf16 or
// e4m3 with a power-of-two row scale, the pooled index keys, their scores (tensor cores) and the
// top-k (a radix select split over blocks, ties to the lower pool).
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

// The scores in f32, a warp a (query, pool): the f32 cache's (the debugging mode) and shapes off
// score_mma_kernel's tiles, and the baseline's.
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

// The baseline selection (eng_dsa_select_baseline): a block a query, four radix passes of 8 bits
// over all its pools, then a gather in pool order.
__global__ void __launch_bounds__(kSelectThreads) select_1block_kernel(const float *scores,
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

// ---- the scores on the tensor cores ----
// score[t][p] = sum_h hw[t][h] hscale relu(dscale q_th . k_p). The keys of the bf16 and e4m3
// caches are exact in bf16 (e4m3 without its power-of-two row scale, which multiplies the dot
// afterwards, exactly); q is split into three bf16 parts (hi + mid + lo carry its f32 value), so
// every product is exact in the f32 sums and only their order differs from a scalar loop. A block
// takes 64 pools (their keys in shared memory as bf16) with 4 warps; a warp's rows are the IH
// heads of one query (MT tiles of 16, heads past IH zero), its columns NTW tiles of 8 pools: with
// NTW 8 (4 queries or more) a warp takes every 4th query over all 64 pools, with NTW 2 (decode)
// the 4 warps split the pools. The sum over heads: each thread its rows, then shuffles in a fixed
// order, so a score does not depend on the launch.
constexpr int kScorePools = 64, kScoreMaxIH = 32, kScoreMaxID = 256;

__device__ __forceinline__ uint32_t bf16x2_rn(float lo, float hi) // lo in the low half
{
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t *>(&v);
}

// x0, x1 as three packed bf16 pairs (hi + mid + lo carry each f32 value): p[0] hi, p[1] mid, p[2] lo
__device__ __forceinline__ void split3_pair(float x0, float x1, uint32_t p[3])
{
#pragma unroll
    for (int k = 0; k < 3; k++) {
        p[k] = bf16x2_rn(x0, x1);
        x0 -= __uint_as_float(p[k] << 16);
        x1 -= __uint_as_float(p[k] & 0xffff0000u);
    }
}

// e4m3 byte to bf16 bits, exactly (3 mantissa bits)
__device__ __forceinline__ uint32_t fp8_bf16(uint32_t byte)
{
    return __float_as_uint(fp8_to_f32((uint8_t)byte)) >> 16;
}

// The block's 64 key rows (pools n0 ..) as bf16 in ks [64][KS], zeros past p_end and ID; their
// scales in ksc.
__device__ void load_key_tile(const eng_cache &pool, int n0, int p_end, int ID, int K16, int KS,
                              uint16_t *ks, float *ksc)
{
    int fp8 = pool.dtype == ENG_CACHE_FP8;
    if (ID % 16 == 0 && (uintptr_t)pool.rows % 16 == 0) { // 16 values a thread, 16-byte loads
        int per = ID / 16;
        for (int u = threadIdx.x; u < kScorePools * per; u += blockDim.x) {
            int r = u / per, d = (u % per) * 16, p = n0 + r;
            uint4 lo = make_uint4(0, 0, 0, 0), hi = lo;
            if (p < p_end && fp8) {
                uint4 q = __ldg(reinterpret_cast<const uint4 *>(
                    static_cast<const uint8_t *>(pool.rows) + (size_t)p * ID + d));
                const uint32_t v[4] = {q.x, q.y, q.z, q.w};
                uint32_t w[8];
#pragma unroll
                for (int j = 0; j < 8; j++) {
                    uint32_t two = v[j / 2] >> (16 * (j % 2));
                    w[j] = fp8_bf16(two & 0xffu) | (fp8_bf16((two >> 8) & 0xffu) << 16);
                }
                lo = make_uint4(w[0], w[1], w[2], w[3]);
                hi = make_uint4(w[4], w[5], w[6], w[7]);
            } else if (p < p_end) {
                const uint4 *src = reinterpret_cast<const uint4 *>(
                    static_cast<const uint16_t *>(pool.rows) + (size_t)p * ID + d);
                lo = __ldg(src);
                hi = __ldg(src + 1);
            }
            uint4 *dst = reinterpret_cast<uint4 *>(ks + r * KS + d);
            dst[0] = lo;
            dst[1] = hi;
        }
    } else {
        for (int e = threadIdx.x; e < kScorePools * K16; e += blockDim.x) {
            int r = e / K16, d = e % K16, p = n0 + r;
            uint32_t b = 0;
            if (p < p_end && d < ID)
                b = fp8 ? fp8_bf16(static_cast<const uint8_t *>(pool.rows)[(size_t)p * ID + d])
                        : static_cast<const uint16_t *>(pool.rows)[(size_t)p * ID + d];
            ks[r * KS + d] = (uint16_t)b;
        }
    }
    for (int r = threadIdx.x; r < kScorePools; r += blockDim.x) {
        int p = n0 + r;
        ksc[r] = p < p_end ? (fp8 ? pool.scale[p] : 1.0f) : 0.0f;
    }
}

template <int MT, int NTW>
__global__ void __launch_bounds__(128) score_mma_kernel(eng_cache pool, const float *iq,
                                                        const float *hw, const int *pos0, int t_off,
                                                        int T, int IH, int ID, int kp, int budget,
                                                        int max_pools, float *scores)
{
    pdl_prologue();
    extern __shared__ __align__(16) uint16_t ks[]; // [kScorePools][KS] bf16, then ksc
    int K16 = (ID + 15) & ~15, KS = K16 + 8;
    float *ksc = reinterpret_cast<float *>(ks + kScorePools * KS);
    int first = *pos0 + t_off, n0 = blockIdx.x * kScorePools;
    int p_end = (first + T) / kp; // the pools of the call's last query, the most of any
    if (p_end <= budget || n0 >= p_end)
        return;
    load_key_tile(pool, n0, p_end, ID, K16, KS, ks, ksc);
    __syncthreads();
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, c = lane & 3;
    float hscale = rsqrtf((float)IH), dscale = rsqrtf((float)ID);
    int t0 = NTW == 8 ? warp : 0, tstep = NTW == 8 ? 4 : 1, nt0 = NTW == 8 ? 0 : warp * NTW;
    for (int t = t0; t < T; t += tstep) {
        int P = (first + t + 1) / kp;
        if (P <= budget || n0 >= P)
            continue;
        const float *q = iq + (size_t)t * IH * ID;
        bool even = ID % 2 == 0 && (uintptr_t)q % 8 == 0; // float2 loads
        float acc[MT][NTW][4];
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
#pragma unroll
            for (int nt = 0; nt < NTW; nt++)
#pragma unroll
                for (int r = 0; r < 4; r++)
                    acc[mt][nt][r] = 0.0f;
        for (int k0 = 0; k0 < K16; k0 += 16) {
            uint32_t a[3][MT][4]; // hi, mid, lo
#pragma unroll
            for (int mt = 0; mt < MT; mt++)
#pragma unroll
                for (int r = 0; r < 4; r++) { // rows g (+ 8 for odd r), columns 2c, 2c+1 (+ 8 for r >= 2)
                    int h = mt * 16 + g + (r & 1) * 8, d = k0 + 2 * c + (r >> 1) * 8;
                    float2 x = make_float2(0.0f, 0.0f);
                    if (h < IH && d < ID && even)
                        x = *reinterpret_cast<const float2 *>(q + h * ID + d);
                    else if (h < IH && d < ID)
                        x = make_float2(q[h * ID + d], d + 1 < ID ? q[h * ID + d + 1] : 0.0f);
                    uint32_t p[3];
                    split3_pair(x.x, x.y, p);
                    a[0][mt][r] = p[0];
                    a[1][mt][r] = p[1];
                    a[2][mt][r] = p[2];
                }
#pragma unroll
            for (int nt = 0; nt < NTW; nt++) {
                const uint16_t *kr = ks + ((nt0 + nt) * 8 + g) * KS + k0 + 2 * c;
                uint32_t b[2] = {ld_pair(kr), ld_pair(kr + 8)};
#pragma unroll
                for (int mt = 0; mt < MT; mt++) {
                    mma_bf16(acc[mt][nt], a[2][mt], b);
                    mma_bf16(acc[mt][nt], a[1][mt], b);
                    mma_bf16(acc[mt][nt], a[0][mt], b);
                }
            }
        }
        float wv[MT][2];
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
#pragma unroll
            for (int half = 0; half < 2; half++) {
                int h = mt * 16 + g + 8 * half;
                wv[mt][half] = h < IH ? hw[(size_t)t * IH + h] * hscale : 0.0f;
            }
        float *out = scores + (size_t)t * max_pools;
#pragma unroll
        for (int nt = 0; nt < NTW; nt++) {
            int col = (nt0 + nt) * 8 + 2 * c;
            float sc[2];
#pragma unroll
            for (int j = 0; j < 2; j++) {
                float kscale = ksc[col + j], v = 0.0f;
#pragma unroll
                for (int mt = 0; mt < MT; mt++) {
                    float d0 = acc[mt][nt][j] * kscale * dscale;
                    float d1 = acc[mt][nt][2 + j] * kscale * dscale;
                    v += wv[mt][0] * (d0 > 0.0f ? d0 : 0.0f) + wv[mt][1] * (d1 > 0.0f ? d1 : 0.0f);
                }
                v += __shfl_xor_sync(0xffffffffu, v, 4);
                v += __shfl_xor_sync(0xffffffffu, v, 8);
                v += __shfl_xor_sync(0xffffffffu, v, 16);
                sc[j] = v;
            }
            int p = n0 + col;
            if (g == 0 && p < P)
                out[p] = sc[0];
            if (g == 0 && p + 1 < P)
                out[p + 1] = sc[1];
        }
    }
}

// ---- the selection, split over blocks ----
// The budget-th largest key thr (order_key) is found digit by digit: 11 bits (2048 bins) by
// select_hist_kernel over segments of a query's pools (up to kMaxSplits blocks a query, counts
// added into the query's histogram in the work area), then select_finish_kernel (a block a query)
// takes the bin, reads the query's scores once more for the next 11 bits, keeping the pools of
// that bin in shared memory when they fit (kCandCap), then the last 10 bits over those; it leaves
// thr, rem (how many pools equal to thr are taken: the lowest first) and each segment's count of
// taken pools and of pools equal to thr before it. select_gather_kernel writes each segment's
// taken pools' tokens in pool order at its offset (ballots within warps, a prefix over the
// block's warps). Integer counts only: the result is the same bits in any run.
constexpr int kHistBins = 2048, kSegMin = 1024, kMaxSplits = 64, kCandCap = 4096;
constexpr int kFinishThreads = 1024, kSegThreads = 256;
constexpr int kRowInts = kHistBins + 4 + 2 * kMaxSplits; // hist, thr, rem, before[2][splits], pad
static_assert(kRowInts == ENG_DSA_WORK_INTS, "engine.h's ENG_DSA_WORK_INTS");
static_assert(kMaxSplits == ENG_DSA_MAX_SPLITS, "engine.h's ENG_DSA_MAX_SPLITS");

// A query of P pools: S segments of L pools (L a multiple of 32: a warp's 32 pools lie in one).
__device__ __forceinline__ void segments(int P, int *S, int *L)
{
    int s = (P + kSegMin - 1) / kSegMin;
    s = s < kMaxSplits ? s : kMaxSplits;
    int l = (P + s - 1) / s;
    *S = s;
    *L = (l + 31) & ~31;
}

__device__ __forceinline__ unsigned lanes_below()
{
    return (1u << (threadIdx.x & 31)) - 1u;
}

// Calls f(key, i) for the pools i in [b0, b1) of a row of scores, every thread of the block with
// kBatch loads in flight before the first call (a pass is bound by the latency of its loads, not
// by bandwidth, with one load a thread); whole warps call f together, on 32 consecutive pools
// (i >= b1: key 0, the caller tests i). b0 a multiple of 32.
constexpr int kBatch = 8;

template <typename F>
__device__ __forceinline__ void row_pass(const float *sc, int b0, int b1, F f)
{
    int step = kBatch * blockDim.x;
    for (int base = b0; base < b1; base += step) {
        uint32_t key[kBatch];
#pragma unroll
        for (int u = 0; u < kBatch; u++) {
            int i = base + u * blockDim.x + threadIdx.x;
            key[u] = i < b1 ? order_key(sc[i]) : 0u;
        }
#pragma unroll
        for (int u = 0; u < kBatch; u++)
            f(key[u], base + u * (int)blockDim.x + (int)threadIdx.x);
    }
}

// Adds 1 to h[bin] for each lane with bin != ~0u, one shared atomic per distinct bin of the warp
// (keys of similar magnitude share their top bits; same-address atomics serialise).
__device__ __forceinline__ void warp_count(int *h, uint32_t bin)
{
    if (!__any_sync(0xffffffffu, bin != ~0u)) // most warps of a finishing pass: none
        return;
    unsigned peers = __match_any_sync(0xffffffffu, bin);
    if (bin != ~0u && (threadIdx.x & 31) == (unsigned)(__ffs(peers) - 1))
        atomicAdd(&h[bin], __popc(peers));
}

// The queries' histograms to zero before select_hist_kernel adds to them (a kernel, not a memset:
// the step's graph keeps programmatic launches from kernel to kernel).
__global__ void clear_work_kernel(int *work)
{
    pdl_prologue();
    for (int i = threadIdx.x; i < kHistBins; i += blockDim.x)
        work[(size_t)blockIdx.x * kRowInts + i] = 0;
}

__global__ void __launch_bounds__(kSegThreads) select_hist_kernel(const float *scores, int *work,
                                                                  const int *pos0, int t_off,
                                                                  int kp, int budget, int max_pools)
{
    pdl_prologue();
    __shared__ int h[kHistBins];
    int t = blockIdx.y, s = blockIdx.x, P = (*pos0 + t_off + t + 1) / kp, S, L;
    if (P <= budget || budget < 1)
        return;
    segments(P, &S, &L);
    int b0 = s * L, b1 = b0 + L < P ? b0 + L : P;
    if (s >= S || b0 >= P)
        return;
    for (int i = threadIdx.x; i < kHistBins; i += blockDim.x)
        h[i] = 0;
    __syncthreads();
    row_pass(scores + (size_t)t * max_pools, b0, b1,
             [&](uint32_t key, int i) { warp_count(h, i < b1 ? key >> 21 : ~0u); });
    __syncthreads();
    int *gh = work + (size_t)t * kRowInts;
    for (int i = threadIdx.x; i < kHistBins; i += blockDim.x)
        if (h[i])
            atomicAdd(&gh[i], h[i]);
}

typedef cub::BlockScan<int, kFinishThreads> finish_scan_t;

// The bin of h (nb bins, nb <= 2048) that holds the need-th largest key (need >= 1, at most the
// total): bins from the top, each thread two; *bin and *above (the count in higher bins) in shared.
__device__ void digit_select(const int *h, int nb, int need, finish_scan_t::TempStorage &tmp,
                             int *bin, int *above)
{
    int v[2], inc[2];
#pragma unroll
    for (int j = 0; j < 2; j++) {
        int b = nb - 1 - (2 * (int)threadIdx.x + j);
        v[j] = b >= 0 ? h[b] : 0;
    }
    finish_scan_t(tmp).InclusiveSum(v, inc);
#pragma unroll
    for (int j = 0; j < 2; j++) {
        int b = nb - 1 - (2 * (int)threadIdx.x + j);
        if (b >= 0 && inc[j] >= need && inc[j] - v[j] < need) {
            *bin = b;
            *above = inc[j] - v[j];
        }
    }
    __syncthreads();
}

__global__ void __launch_bounds__(kFinishThreads) select_finish_kernel(const float *scores,
                                                                       int *work, const int *pos0,
                                                                       int t_off, int kp,
                                                                       int budget, int max_pools)
{
    pdl_prologue();
    __shared__ finish_scan_t::TempStorage scan_tmp;
    __shared__ int h[kHistBins];
    __shared__ uint32_t ckey[kCandCap];
    __shared__ int cidx[kCandCap];
    __shared__ int seg_gt[kMaxSplits], seg_eq[kMaxSplits];
    __shared__ int s_n, s_bin, s_above;
    int t = blockIdx.x, P = (*pos0 + t_off + t + 1) / kp, S, L;
    if (P <= budget)
        return;
    segments(P, &S, &L);
    int *gh = work + (size_t)t * kRowInts, *state = gh + kHistBins;
    int *sel_before = state + 2, *eq_before = sel_before + kMaxSplits;
    if (budget < 1) { // only the open tail
        if (threadIdx.x == 0)
            state[0] = (int)~0u, state[1] = 0;
        if (threadIdx.x < kMaxSplits)
            sel_before[threadIdx.x] = eq_before[threadIdx.x] = 0;
        return;
    }
    const float *sc = scores + (size_t)t * max_pools;
    int lane = threadIdx.x & 31;
    for (int i = threadIdx.x; i < kHistBins; i += blockDim.x)
        h[i] = gh[i];
    if (threadIdx.x < kMaxSplits)
        seg_gt[threadIdx.x] = seg_eq[threadIdx.x] = 0;
    if (threadIdx.x == 0)
        s_n = 0;
    __syncthreads();
    digit_select(h, kHistBins, budget, scan_tmp, &s_bin, &s_above);
    uint32_t bin1 = (uint32_t)s_bin;
    int need = budget - s_above, compact = h[bin1] <= kCandCap;
    __syncthreads();
    for (int i = threadIdx.x; i < kHistBins; i += blockDim.x)
        h[i] = 0;
    __syncthreads();
    // the next 11 bits of the keys in bin1; the keys above bin1 counted by segment
    row_pass(sc, 0, P, [&](uint32_t key, int i) {
        uint32_t top = key >> 21;
        if (!__any_sync(0xffffffffu, i < P && top >= bin1)) // most warps: below bin1
            return;
        bool in = i < P && top == bin1;
        unsigned above = __ballot_sync(0xffffffffu, i < P && top > bin1);
        if (lane == 0 && above)
            atomicAdd(&seg_gt[(i - lane) / L], __popc(above));
        warp_count(h, in ? (key >> 10) & 2047u : ~0u);
        unsigned m = compact ? __ballot_sync(0xffffffffu, in) : 0u;
        if (m) {
            int at = 0;
            if (lane == 0)
                at = atomicAdd(&s_n, __popc(m));
            at = __shfl_sync(0xffffffffu, at, 0);
            if (in) {
                int k = at + __popc(m & lanes_below());
                ckey[k] = key;
                cidx[k] = i;
            }
        }
    });
    __syncthreads();
    digit_select(h, kHistBins, need, scan_tmp, &s_bin, &s_above);
    uint32_t pre = (bin1 << 11) | (uint32_t)s_bin; // the top 22 bits of thr
    need -= s_above;
    __syncthreads();
    for (int i = threadIdx.x; i < kHistBins; i += blockDim.x)
        h[i] = 0;
    __syncthreads();
    // the last 10 bits of the keys with those 22: over the candidates, or the whole row
    auto low_digit = [&](uint32_t key, bool valid) {
        warp_count(h, valid && key >> 10 == pre ? key & 1023u : ~0u);
    };
    int n = s_n;
    if (compact)
        for (int base = 0; base < n; base += blockDim.x) {
            int k = base + threadIdx.x;
            low_digit(k < n ? ckey[k] : 0u, k < n);
        }
    else
        row_pass(sc, 0, P, [&](uint32_t key, int i) { low_digit(key, i < P); });
    __syncthreads();
    digit_select(h, 1024, need, scan_tmp, &s_bin, &s_above);
    uint32_t thr = (pre << 10) | (uint32_t)s_bin;
    int rem = need - s_above;
    // the keys of bin1 above thr and equal to it, by segment
    auto count_bin1 = [&](uint32_t key, int p, bool valid) {
        bool in = valid && key >> 21 == bin1;
        uint32_t slot = in && key >= thr ? (uint32_t)(p / L) * 2u + (key == thr) : ~0u;
        if (!__any_sync(0xffffffffu, slot != ~0u))
            return;
        unsigned peers = __match_any_sync(0xffffffffu, slot);
        if (slot != ~0u && lane == __ffs(peers) - 1)
            atomicAdd(slot & 1u ? &seg_eq[slot >> 1] : &seg_gt[slot >> 1], __popc(peers));
    };
    if (compact)
        for (int base = 0; base < n; base += blockDim.x) {
            int k = base + threadIdx.x;
            count_bin1(k < n ? ckey[k] : 0u, k < n ? cidx[k] : 0, k < n);
        }
    else
        row_pass(sc, 0, P, [&](uint32_t key, int i) { count_bin1(key, i, i < P); });
    __syncthreads();
    if (threadIdx.x == 0) {
        state[0] = (int)thr;
        state[1] = rem;
        int sel = 0, eq = 0;
        for (int s = 0; s < kMaxSplits; s++) {
            sel_before[s] = sel, eq_before[s] = eq;
            if (s >= S)
                continue;
            int take = rem - eq < 0 ? 0 : rem - eq;
            sel += seg_gt[s] + (take < seg_eq[s] ? take : seg_eq[s]);
            eq += seg_eq[s];
        }
    }
}

__global__ void __launch_bounds__(kSegThreads) select_gather_kernel(const float *scores,
                                                                    const int *work, const int *pos0,
                                                                    int t_off, int kp, int budget,
                                                                    int max_pools, int width,
                                                                    int32_t *idx, int *count)
{
    pdl_prologue();
    __shared__ int w_eq[kSegThreads / 32], w_sel[kSegThreads / 32];
    int t = blockIdx.y, s = blockIdx.x, pos = *pos0 + t_off + t, P = (pos + 1) / kp;
    int32_t *out = idx + (size_t)t * width;
    int n = P <= budget ? P * kp : budget * kp;
    if (s == 0) { // the open tail and the count
        for (int k = P * kp + threadIdx.x; k <= pos; k += blockDim.x)
            out[n + (k - P * kp)] = k;
        if (threadIdx.x == 0)
            count[t] = n + (pos + 1 - P * kp);
    }
    if (P <= budget) {
        for (int k = s * blockDim.x + threadIdx.x; k < P * kp; k += gridDim.x * blockDim.x)
            out[k] = k;
        return;
    }
    int S, L;
    segments(P, &S, &L);
    int b0 = s * L, b1 = b0 + L < P ? b0 + L : P;
    if (s >= S || b0 >= P)
        return;
    const int *state = work + (size_t)t * kRowInts + kHistBins;
    uint32_t thr = (uint32_t)state[0];
    int rem = state[1], sel_base = state[2 + s], eq_base = state[2 + kMaxSplits + s];
    const float *sc = scores + (size_t)t * max_pools;
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = blockDim.x >> 5;
    for (int base = b0; base < b1; base += blockDim.x) {
        int i = base + threadIdx.x;
        uint32_t key = i < b1 ? order_key(sc[i]) : 0u;
        bool gt = i < b1 && key > thr, eq = i < b1 && key == thr;
        unsigned me = __ballot_sync(0xffffffffu, eq);
        if (lane == 0)
            w_eq[warp] = __popc(me);
        __syncthreads();
        int eq_w = 0, eq_all = 0;
        for (int w = 0; w < nw; w++)
            eq_w += w < warp ? w_eq[w] : 0, eq_all += w_eq[w];
        bool sel = gt || (eq && eq_base + eq_w + __popc(me & lanes_below()) < rem);
        unsigned ms = __ballot_sync(0xffffffffu, sel);
        if (lane == 0)
            w_sel[warp] = __popc(ms);
        __syncthreads();
        int sel_w = 0, sel_all = 0;
        for (int w = 0; w < nw; w++)
            sel_w += w < warp ? w_sel[w] : 0, sel_all += w_sel[w];
        if (sel) {
            size_t at = (size_t)(sel_base + sel_w + __popc(ms & lanes_below())) * kp;
            for (int j = 0; j < kp; j++)
                out[at + j] = i * kp + j;
        }
        sel_base += sel_all;
        eq_base += eq_all;
        __syncthreads();
    }
}

template <int MT, int NTW>
void launch_score_mma(const eng_cache *pool, const float *iq, const float *hw, const int *pos0,
                      int t_off, int T, int IH, int ID, int kp, int budget, int max_pools,
                      float *scores, cudaStream_t st)
{
    size_t smem = (size_t)kScorePools * (((ID + 15) & ~15) + 8) * 2 + kScorePools * sizeof(float);
    launch(score_mma_kernel<MT, NTW>, blocks_for((size_t)max_pools, kScorePools), 128, smem, st,
           *pool, iq, hw, pos0, t_off, T, IH, ID, kp, budget, max_pools, scores);
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

extern "C" int eng_dsa_scores(const eng_cache *pool, const float *iq, const float *hw,
                              const int *pos0, int t_off, int T, int IH, int ID, int kpool,
                              int budget, int max_pools, float *scores, void *stream)
{
    if (T < 1 || kpool < 1 || budget < 0 || max_pools < 1 || IH < 1 || ID < 1)
        return -1;
    if (max_pools <= budget) // no query of this cache has more pools than the budget
        return 0;
    cudaStream_t st = static_cast<cudaStream_t>(stream);
    if (pool->dtype != ENG_CACHE_F32 && IH <= kScoreMaxIH && ID <= kScoreMaxID) {
        int mt2 = IH > 16, wide = T >= 4;
        if (mt2 && wide)
            launch_score_mma<2, 8>(pool, iq, hw, pos0, t_off, T, IH, ID, kpool, budget, max_pools, scores, st);
        else if (mt2)
            launch_score_mma<2, 2>(pool, iq, hw, pos0, t_off, T, IH, ID, kpool, budget, max_pools, scores, st);
        else if (wide)
            launch_score_mma<1, 8>(pool, iq, hw, pos0, t_off, T, IH, ID, kpool, budget, max_pools, scores, st);
        else
            launch_score_mma<1, 2>(pool, iq, hw, pos0, t_off, T, IH, ID, kpool, budget, max_pools, scores, st);
        return (int)cudaGetLastError();
    }
    dim3 grid(blocks_for((size_t)max_pools, 8), T);
    launch(score_kernel, grid, 256, 0, st, *pool, iq, hw, pos0, t_off, IH, ID, kpool, budget,
           max_pools, scores);
    return (int)cudaGetLastError();
}

extern "C" int eng_dsa_topk(float *scores, const int *pos0, int t_off, int T, int kpool, int budget,
                            int max_pools, int width, int32_t *idx, int *count, void *stream)
{
    if (T < 1 || T > 65535 || kpool < 1 || budget < 0 || max_pools < 1)
        return -1;
    cudaStream_t st = static_cast<cudaStream_t>(stream);
    int *work = reinterpret_cast<int *>(scores + (size_t)T * max_pools);
    unsigned splits = blocks_for((size_t)max_pools, kSegMin);
    splits = splits < kMaxSplits ? splits : kMaxSplits;
    if (max_pools > budget) {
        launch(clear_work_kernel, T, kSegThreads, 0, st, work);
        launch(select_hist_kernel, dim3(splits, T), kSegThreads, 0, st, scores, work, pos0, t_off,
               kpool, budget, max_pools);
        launch(select_finish_kernel, T, kFinishThreads, 0, st, scores, work, pos0, t_off, kpool,
               budget, max_pools);
    }
    launch(select_gather_kernel, dim3(splits, T), kSegThreads, 0, st, scores, work, pos0, t_off,
           kpool, budget, max_pools, width, idx, count);
    return (int)cudaGetLastError();
}

extern "C" int eng_dsa_select(const eng_cache *pool, const float *iq, const float *hw,
                              const int *pos0, int t_off, int T, int IH, int ID, int kpool,
                              int budget, int max_pools, float *scores, int width, int32_t *idx,
                              int *count, void *stream)
{
    int rc = eng_dsa_scores(pool, iq, hw, pos0, t_off, T, IH, ID, kpool, budget, max_pools,
                            scores, stream);
    return rc ? rc : eng_dsa_topk(scores, pos0, t_off, T, kpool, budget, max_pools, width, idx,
                                  count, stream);
}

extern "C" int eng_dsa_select_baseline(const eng_cache *pool, const float *iq, const float *hw,
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
    launch(select_1block_kernel, T, kSelectThreads, 0, st, scores, pos0, t_off, kpool, budget, max_pools,
           width, idx, count);
    return (int)cudaGetLastError();
}
