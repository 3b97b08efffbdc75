// engine_index.cu: the DSA indexer on the GPU (architecture.md 2.5): cache rows in f32, bf16 or
// e4m3 with a power-of-two row scale, the pooled index keys, their scores (tensor cores) and the
// top-k (a radix select split over blocks, ties to the lower pool).
#include <atomic>

#include <cub/block/block_scan.cuh>

#include "engine_common.cuh"
#include "engine_rows.cuh"
#include "gemm_fp16x2.h"

namespace {

__global__ void cache_write_kernel(eng_cache c, const int *pos0, const float *src)
{
    pdl_prologue();
    __shared__ float red[33];
    extern __shared__ float vals[];
    int t = blockIdx.x;
    for (int d = threadIdx.x; d < c.width; d += blockDim.x)
        vals[d] = src[(size_t)t * c.width + d];
    __syncthreads();
    cache_store_row(c, (size_t)(*pos0 + t), vals, red);
}

// eng_rmsnorm of row t of x in place, then that row into the cache (eng_cache_write's store):
// one launch, at eng_rmsnorm's block size (its sum's order), the same bits as the two.
__global__ void rmsnorm_cache_kernel(float *x, const float *w, int n, float eps, eng_cache c,
                                     const int *pos0)
{
    pdl_prologue();
    __shared__ float red[33];
    extern __shared__ float vals[];
    int t = blockIdx.x;
    float *xr = x + (size_t)t * n;
    rmsnorm_row(xr, xr, w, n, eps, red, vals, blockDim.x);
    __syncthreads();
    cache_store_row(c, (size_t)(*pos0 + t), vals, red);
}

// The indexer's new cache rows: blockIdx.y 0: eng_layernorm of key row t in place, then the row
// into the key cache; 1: gate row t into the gate cache. One launch at eng_layernorm's block
// size, the same bits as the norm and the two writes.
__global__ void index_keys_kernel(float *key, const float *w, const float *b, float eps,
                                  eng_cache keys, const float *gate, eng_cache gates,
                                  const int *pos0)
{
    pdl_prologue();
    __shared__ float red[33];
    extern __shared__ float vals[];
    int t = blockIdx.x;
    if (blockIdx.y == 0) {
        float *kr = key + (size_t)t * keys.width;
        layernorm_row(kr, kr, w, b, keys.width, eps, red, vals, blockDim.x);
        __syncthreads();
        cache_store_row(keys, (size_t)(*pos0 + t), vals, red);
        return;
    }
    for (int d = threadIdx.x; d < gates.width; d += blockDim.x)
        vals[d] = gate[(size_t)t * gates.width + d];
    __syncthreads();
    cache_store_row(gates, (size_t)(*pos0 + t), vals, red);
}

// eng_dsa_rows_write: blockIdx.y picks the step of row t (0 q_a's norm, 1 the kv_a norm and the
// latent row, 2 the key norm and the key row, 3 the gate row), each norm at its own kernel's
// block size (rmsnorm_row's nthr) in a block of the largest.
__global__ void __launch_bounds__(1024) dsa_rows_kernel(eng_dsa_rows r, const int *pos0)
{
    pdl_prologue();
    __shared__ float red[33];
    extern __shared__ float vals[];
    int t = blockIdx.x;
    size_t row = (size_t)(*pos0 + t);
    if (blockIdx.y == 0) {
        float *x = r.qa + (size_t)t * r.qa_width;
        rmsnorm_row(x, x, r.qa_norm, r.qa_width, r.eps, red, nullptr, rmsnorm_threads(r.qa_width));
    } else if (blockIdx.y == 1) {
        float *x = r.kv + (size_t)t * r.latent.width;
        rmsnorm_row(x, x, r.kv_norm, r.latent.width, r.eps, red, vals,
                    rmsnorm_threads(r.latent.width));
        __syncthreads();
        cache_store_row(r.latent, row, vals, red);
    } else if (blockIdx.y == 2) {
        float *k = r.key + (size_t)t * r.keys.width;
        layernorm_row(k, k, r.key_w, r.key_b, r.keys.width, r.key_eps, red, vals,
                      kLayernormThreads);
        __syncthreads();
        cache_store_row(r.keys, row, vals, red);
    } else {
        for (int d = threadIdx.x; d < r.gates.width; d += blockDim.x)
            vals[d] = r.gate[(size_t)t * r.gates.width + d];
        __syncthreads();
        cache_store_row(r.gates, row, vals, red);
    }
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
    cache_store_row(pool, (size_t)p, vals, red);
}

// eng_one_part_rows: row r of x (width floats) rounded in place as numfmt_one_part_row rounds it
// (scaled by the power of two that puts its largest magnitude in [2^14, 2^15), to fp16 nearest
// even, scaled back), the power of two to shift[r]; a warp a row. The same bits but for NaN's
// (the CPU's is 0x7fc00000 whatever its sign; the selection is the same). A head whose largest
// magnitude is below about 2^-111 comes back partly as float subnormals, which f16x2_scaled then
// rounds once more: the ONE kernels still agree with each other, not exactly with the CPU's
// products of such a head (whose scores are nearly 0 either way).
__global__ void one_part_rows_kernel(float *x, int rows, int width, int *shift)
{
    pdl_prologue();
    int row = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (row >= rows)
        return;
    float *r = x + (size_t)row * width;
    unsigned most = 0;
    for (int d = lane; d < width; d += 32)
        most = max(most, __float_as_uint(r[d]) & 0x7fffffffu); // NaN and Inf above the rest
#pragma unroll
    for (int o = 16; o; o >>= 1)
        most = max(most, __shfl_xor_sync(0xffffffffu, most, o));
    int a = gemm_fp16x2_shift(most);
    for (int d = lane; d < width; d += 32)
        r[d] = gemm_fp16x2_scale(__half2float(__float2half_rn(gemm_fp16x2_scale(r[d], a))), -a);
    if (lane == 0)
        shift[row] = a;
}

// The selection's constants (see "the selection, split over blocks" below).
constexpr int kHistBins = 2048, kSegMin = 1024, kMaxSplits = 64, kCandCap = 4096;
constexpr int kFinishThreads = 1024, kSegThreads = 256;
constexpr int kRowInts = kHistBins + 4 + 2 * kMaxSplits; // hist, thr, rem, before[2][S], ticket
constexpr int kTicket = kHistBins + 2 + 2 * kMaxSplits;  // the first-digit blocks arrived
// The pools of a first-digit histogram block: two row passes of its 1024 threads (few blocks a
// query, an SM holding one; queries of up to 16384 pools, 64k positions at kpool 4, need no sum
// over blocks).
constexpr int kHistSeg = 16384;
static_assert(kTicket < kRowInts, "the ticket lies in the work area");
static_assert(kRowInts == ENG_DSA_WORK_INTS, "engine.h's ENG_DSA_WORK_INTS");
static_assert(kMaxSplits == ENG_DSA_MAX_SPLITS, "engine.h's ENG_DSA_MAX_SPLITS");

// Zeroes the first-digit histograms (the work area) of the call's rows [t_begin, t_end) that
// select_hist_finish_kernel may add to (P > budget >= 1; the call's first query at `first`):
// the score kernels do it for eng_dsa_select, sparing a launch; eng_dsa_topk alone launches
// clear_work_kernel.
__device__ void clear_rows(int *work, int first, int t_begin, int t_end, int kp, int budget)
{
    for (int t = t_begin; t < t_end; t++) {
        int P = (first + t + 1) / kp;
        if (P <= budget || budget < 1)
            continue;
        for (int i = threadIdx.x; i < kHistBins; i += blockDim.x)
            work[(size_t)t * kRowInts + i] = 0;
        if (threadIdx.x == 0)
            work[(size_t)t * kRowInts + kTicket] = 0;
    }
}

// The scores in f32, a warp a (query, pool): the f32 cache's (the debugging mode) and shapes off
// score_mma_kernel's tiles. work: the histograms to clear (the first block of each row), or null.
__global__ void score_kernel(eng_cache pool, const float *iq, const float *hw, const int *pos0,
                             int t_off, int IH, int ID, int kp, int budget, int max_pools,
                             float *scores, int *work)
{
    pdl_prologue();
    int t = blockIdx.y, lane = threadIdx.x & 31;
    int p = blockIdx.x * (blockDim.x / 32) + (threadIdx.x >> 5);
    if (work && blockIdx.x == 0)
        clear_rows(work, *pos0 + t_off, t, t + 1, kp, budget);
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

// ---- the scores on the tensor cores ----
// score[t][p] = sum_h hw[t][h] hscale relu(dscale q_th . k_p). The keys of the bf16 and e4m3
// caches are exact in bf16 (e4m3 without its power-of-two row scale, which multiplies the dot
// afterwards, exactly); q is split into three bf16 parts (hi + mid + lo carry its f32 value), so
// every product is exact in the f32 sums and only their order differs from a scalar loop. The
// one-part form (ONE: e4m3 keys, q rounded by eng_one_part_rows, its shifts given): e4m3 is exact
// in fp16 too, and each head's q times 2^shift is an fp16, so one fp16 mma a tile carries every
// product exactly; the accumulators are scaled back by 2^-shift (exact) before the epilogue. A block
// takes 64 pools (their keys in shared memory as bf16) and some of the call's queries
// (blockIdx.y: a group of 4 with NTW 8, one with NTW 2) with 4 warps; a warp's rows are the IH
// heads of one query (MT tiles of 16, heads past IH zero), its columns NTW tiles of 8 pools: with
// NTW 8 (4 queries or more) each warp takes one query of the group over all 64 pools, with NTW 2
// (decode) the 4 warps split the pools of the block's query. Queries are split over blocks, not
// looped in a block: a call's 16 queries in one block's warps made a block's latency the kernel's
// time while few pools left most SMs idle. The sum over heads: each thread its rows, then shuffles
// in a fixed order, so a score does not depend on the launch (nor on which block takes a query).
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

// Two e4m3 bytes (the low one to the low half) as two fp16, exactly (every e4m3 is an fp16 normal).
__device__ __forceinline__ uint32_t fp8x2_f16x2(uint32_t two)
{
    uint32_t h2;
    asm("cvt.rn.f16x2.e4m3x2 %0, %1;\n" : "=r"(h2) : "h"((unsigned short)(two & 0xffffu)));
    return h2;
}

// Two floats (x0 to the low half) times 2^shift as packed fp16 (nearest even): for q rounded by
// eng_one_part_rows with that shift, exact.
__device__ __forceinline__ uint32_t f16x2_scaled(float x0, float x1, int shift)
{
    __half2 h = __floats2half2_rn(gemm_fp16x2_scale(x0, shift), gemm_fp16x2_scale(x1, shift));
    return *reinterpret_cast<uint32_t *>(&h);
}

// The block's 64 key rows (pools n0 ..) as bf16 in ks [64][KS] (fp16 with half: e4m3 keys only),
// zeros past p_end and ID; their scales in ksc.
__device__ void load_key_tile(const eng_cache &pool, int n0, int p_end, int ID, int K16, int KS,
                              uint16_t *ks, float *ksc, bool half)
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
                    w[j] = half ? fp8x2_f16x2(two)
                                : fp8_bf16(two & 0xffu) | (fp8_bf16((two >> 8) & 0xffu) << 16);
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
            if (p < p_end && d < ID && fp8) {
                uint32_t byte = static_cast<const uint8_t *>(pool.rows)[(size_t)p * ID + d];
                b = half ? fp8x2_f16x2(byte) & 0xffffu : fp8_bf16(byte);
            } else if (p < p_end && d < ID) {
                b = static_cast<const uint16_t *>(pool.rows)[(size_t)p * ID + d];
            }
            ks[r * KS + d] = (uint16_t)b;
        }
    }
    for (int r = threadIdx.x; r < kScorePools; r += blockDim.x) {
        int p = n0 + r;
        ksc[r] = p < p_end ? (fp8 ? pool.scale[p] : 1.0f) : 0.0f;
    }
}

// The head weights of the rows a lane holds in the mma accumulators (rows g and g + 8 of each head
// tile mt): hw[t][h] / sqrt(IH), zero for heads past IH or where the warp has no query (on false).
template <int MT>
__device__ __forceinline__ void head_weights(const float *hw, int t, int IH, int g, float hscale,
                                             bool on, float (&wv)[MT][2])
{
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int half = 0; half < 2; half++) {
            int h = mt * 16 + g + 8 * half;
            wv[mt][half] = on && h < IH ? hw[(size_t)t * IH + h] * hscale : 0.0f;
        }
}

// The one-part shifts of the same rows (0 past IH, where the warp has no query, or without shift).
template <int MT>
__device__ __forceinline__ void head_shifts(const int *shift, int t, int IH, int g, bool on,
                                            int (&sh)[MT][2])
{
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int half = 0; half < 2; half++) {
            int h = mt * 16 + g + 8 * half;
            sh[mt][half] = on && shift && h < IH ? shift[(size_t)t * IH + h] : 0;
        }
}

// A column pair's scores (pools p, p + 1, summed over the lanes of the column) into the query's
// row by the lanes of g 0, only for pools the query has (below P).
__device__ __forceinline__ void store_column_pair(float *out, int p, int P, int g,
                                                  const float (&sc)[2])
{
    if (g == 0 && p < P)
        out[p] = sc[0];
    if (g == 0 && p + 1 < P)
        out[p + 1] = sc[1];
}

template <int MT, int NTW, bool ONE>
__global__ void __launch_bounds__(128) score_mma_kernel(eng_cache pool, const float *iq,
                                                        const int *shift, const float *hw,
                                                        const int *pos0, int t_off, int T, int IH,
                                                        int ID, int kp, int budget, int max_pools,
                                                        float *scores, int *work)
{
    pdl_prologue();
    extern __shared__ __align__(16) uint16_t ks[]; // [kScorePools][KS] bf16, then ksc
    int K16 = (ID + 15) & ~15, KS = K16 + 8;
    float *ksc = reinterpret_cast<float *>(ks + kScorePools * KS);
    int first = *pos0 + t_off, n0 = blockIdx.x * kScorePools;
    int group = NTW == 8 ? 4 : 1, tg0 = blockIdx.y * group; // the block's queries tg0 ..
    int t_end = tg0 + group < T ? tg0 + group : T;
    if (work && blockIdx.x == 0)
        clear_rows(work, first, tg0, t_end, kp, budget);
    int t_last = t_end - 1;
    int p_end = (first + t_last + 1) / kp; // the pools of the block's last query, the most of any
    if (p_end <= budget || n0 >= p_end)
        return;
    load_key_tile(pool, n0, p_end, ID, K16, KS, ks, ksc, ONE);
    __syncthreads();
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, c = lane & 3;
    float hscale = rsqrtf((float)IH), dscale = rsqrtf((float)ID);
    int nt0 = NTW == 8 ? 0 : warp * NTW;
    int t = NTW == 8 ? tg0 + warp : tg0;
    if (t < T) { // a whole warp's query
        int P = (first + t + 1) / kp;
        if (P <= budget || n0 >= P)
            return;
        const float *q = iq + (size_t)t * IH * ID;
        bool even = ID % 2 == 0 && (uintptr_t)q % 8 == 0; // float2 loads
        int sh[MT][2];
        head_shifts<MT>(ONE ? shift : nullptr, t, IH, g, true, sh);
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
                    if (ONE) {
                        a[0][mt][r] = f16x2_scaled(x.x, x.y, sh[mt][r & 1]);
                        continue;
                    }
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
                    if (ONE) {
                        mma_f16(acc[mt][nt], a[0][mt], b);
                        continue;
                    }
                    mma_bf16(acc[mt][nt], a[2][mt], b);
                    mma_bf16(acc[mt][nt], a[1][mt], b);
                    mma_bf16(acc[mt][nt], a[0][mt], b);
                }
            }
        }
        if (ONE) // rows g (r 0, 1) and g + 8 (r 2, 3) back by their heads' shifts
#pragma unroll
            for (int mt = 0; mt < MT; mt++)
#pragma unroll
                for (int nt = 0; nt < NTW; nt++)
#pragma unroll
                    for (int r = 0; r < 4; r++)
                        acc[mt][nt][r] = gemm_fp16x2_scale(acc[mt][nt][r], -sh[mt][r >> 1]);
        float wv[MT][2];
        head_weights<MT>(hw, t, IH, g, hscale, true, wv);
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
            store_column_pair(out, n0 + col, P, g, sc);
        }
    }
}

// ---- the scores, many pools a block ----
// score_stream_kernel: score_mma_kernel's scores, the same bits, for the real shape (ID 128, up to
// 32 heads, fp8 or bf16 keys, 4 queries or more a call) at long positions. Each score's
// arithmetic is that kernel's: the same mma (m16n8k16, A the heads, B the keys) on the same
// fragments, k ascending and q's lo, mid, hi parts in that order into one accumulator, and
// score_column's epilogue, which spells out with explicit roundings the operations that kernel
// compiles to. What changes is the work a block does around it: score_mma_kernel splits q into its
// parts again for every 64 pools and reads it from L2 each time; here a block splits its two
// queries once into shared memory (in fragment order, a 16-byte load a lane) and then walks tiles
// of 128 pools (tile blockIdx.x, then every gridDim.x-th, up to its last query's pools), the next
// tile's fp8 rows in registers while the tensor cores take the current one. Warp w takes query
// w / 2 of the block and pools 64 (w % 2) .. of each tile (8 tiles of 8), so a k step of 16 is 48
// mma on 6 A loads and 4 ldmatrix. ONE: the one-part form (e4m3 keys): q's one fp16 part and the
// keys as fp16, 16 mma on 2 A loads a k step, the accumulators scaled back before the epilogue.
constexpr int kStreamPools = 128, kStreamID = 128, kStreamKS = kStreamID + 8;
constexpr int kStreamSteps = kStreamID / 16, kStreamQueries = 2, kStreamThreads = 128;
constexpr int kStreamRaw = kStreamPools * kStreamID / 16 / kStreamThreads; // fp8 uint4 a thread

template <bool ONE> __host__ __device__ constexpr int stream_parts() // q's parts
{
    return ONE ? 1 : 3;
}

template <int MT, bool ONE> __host__ __device__ constexpr size_t stream_q_units() // uint4 fragments of the block's queries
{
    return (size_t)kStreamQueries * kStreamSteps * MT * stream_parts<ONE>() * 32;
}

template <int MT, bool ONE> __host__ __device__ constexpr size_t stream_smem()
{
    return stream_q_units<MT, ONE>() * 16 + (size_t)kStreamPools * kStreamKS * 2 +
           kStreamPools * sizeof(float);
}
static_assert(stream_smem<2, false>() <= 99 * 1024, "sm_121 gives a block at most 99 KiB");

// The score of one column from a warp's accumulators (rows g, g + 8 of each head tile in acc[mt][j]
// and acc[mt][2 + j]), before the sum over the lanes of the column: score_mma_kernel's epilogue,
// v = 0; v += wv0 relu(d0) + wv1 relu(d1) per head tile, as it compiles (the second product
// rounded, the first fused onto it, then the add), written so that nothing is contracted otherwise.
template <int MT>
__device__ __forceinline__ float score_column(const float (&acc)[MT][4], int j, float kscale,
                                              float dscale, const float (&wv)[MT][2])
{
    float v = 0.0f;
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
        float d0 = __fmul_rn(__fmul_rn(acc[mt][j], kscale), dscale);
        float d1 = __fmul_rn(__fmul_rn(acc[mt][2 + j], kscale), dscale);
        float r0 = d0 > 0.0f ? d0 : 0.0f, r1 = d1 > 0.0f ? d1 : 0.0f;
        v = __fadd_rn(v, __fmaf_rn(wv[mt][0], r0, __fmul_rn(wv[mt][1], r1)));
    }
    return v;
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t r[4], const uint16_t *p)
{
    uint32_t a = static_cast<uint32_t>(__cvta_generic_to_shared(p));
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
}

// The block's queries tg0 .. t_end - 1 as score_mma_kernel's A fragments (split3_pair of the same
// values; ONE: f16x2_scaled by the heads' shifts), qf[((q * steps + s) * MT + mt) * parts +
// part][lane]; heads past IH and queries past t_end zero.
template <int MT, bool ONE>
__device__ void stream_split_queries(const float *iq, const int *shift, int tg0, int t_end, int IH,
                                     uint4 *qf)
{
    constexpr int per_query = kStreamSteps * MT * 32, parts = stream_parts<ONE>();
    for (int u = threadIdx.x; u < kStreamQueries * per_query; u += blockDim.x) {
        int qi = u / per_query, rest = u % per_query, s = rest / (MT * 32);
        int mt = rest / 32 % MT, lane = rest % 32, g = lane >> 2, c = lane & 3, t = tg0 + qi;
        const float *q = iq + (size_t)t * IH * kStreamID;
        uint32_t p[4][3];
#pragma unroll
        for (int r = 0; r < 4; r++) {
            int h = mt * 16 + g + (r & 1) * 8, d = s * 16 + 2 * c + (r >> 1) * 8;
            float x0 = 0.0f, x1 = 0.0f;
            int sh = 0;
            if (t < t_end && h < IH) {
                x0 = q[h * kStreamID + d], x1 = q[h * kStreamID + d + 1];
                if (ONE)
                    sh = shift[(size_t)t * IH + h];
            }
            if (ONE)
                p[r][0] = f16x2_scaled(x0, x1, sh);
            else
                split3_pair(x0, x1, p[r]);
        }
        uint4 *dst = qf + ((size_t)(qi * kStreamSteps + s) * MT + mt) * parts * 32 + lane;
#pragma unroll
        for (int k = 0; k < parts; k++)
            dst[k * 32] = make_uint4(p[0][k], p[1][k], p[2][k], p[3][k]);
    }
}

// A tile's fp8 rows (pools n0 ..; zero past p_end) and scales into registers.
__device__ __forceinline__ void stream_fetch_fp8(const eng_cache &pool, int n0, int p_end,
                                                 uint4 (&raw)[kStreamRaw], float &scale)
{
#pragma unroll
    for (int i = 0; i < kStreamRaw; i++) {
        int u = threadIdx.x + i * kStreamThreads, r = u / (kStreamID / 16);
        int d = u % (kStreamID / 16) * 16, p = n0 + r;
        const uint8_t *row = static_cast<const uint8_t *>(pool.rows) + (size_t)p * kStreamID;
        raw[i] = p < p_end ? __ldg(reinterpret_cast<const uint4 *>(row + d)) : make_uint4(0, 0, 0, 0);
    }
    int p = n0 + (int)threadIdx.x;
    scale = p < p_end ? __ldg(pool.scale + p) : 0.0f;
}

// Two e4m3 bytes (the low one to the low half) as two bf16, fp8_bf16's bits: the same
// conversions (e4m3 to f16 to f32, the f32's upper half), the two bytes in one cvt.
__device__ __forceinline__ uint32_t fp8x2_bf16x2(uint32_t two)
{
    uint32_t h2;
    asm("cvt.rn.f16x2.e4m3x2 %0, %1;\n" : "=r"(h2) : "h"((unsigned short)(two & 0xffffu)));
    float lo = __half2float(__ushort_as_half((unsigned short)(h2 & 0xffffu)));
    float hi = __half2float(__ushort_as_half((unsigned short)(h2 >> 16)));
    return __byte_perm(__float_as_uint(lo), __float_as_uint(hi), 0x7632);
}

// Those registers widened to bf16 (ONE: fp16; exactly either way) into ks, the scales into ksc.
template <bool ONE>
__device__ __forceinline__ void stream_store_fp8(const uint4 (&raw)[kStreamRaw], float scale,
                                                 uint16_t *ks, float *ksc)
{
#pragma unroll
    for (int i = 0; i < kStreamRaw; i++) {
        int u = threadIdx.x + i * kStreamThreads, r = u / (kStreamID / 16);
        int d = u % (kStreamID / 16) * 16;
        const uint32_t v[4] = {raw[i].x, raw[i].y, raw[i].z, raw[i].w};
        uint32_t w[8];
#pragma unroll
        for (int j = 0; j < 8; j++)
            w[j] = ONE ? fp8x2_f16x2(v[j / 2] >> (16 * (j % 2)))
                       : fp8x2_bf16x2(v[j / 2] >> (16 * (j % 2)));
        uint4 *dst = reinterpret_cast<uint4 *>(ks + r * kStreamKS + d);
        dst[0] = make_uint4(w[0], w[1], w[2], w[3]);
        dst[1] = make_uint4(w[4], w[5], w[6], w[7]);
    }
    ksc[threadIdx.x] = scale;
}

// A tile's bf16 rows straight into ks (zero past p_end), scale 1.
__device__ __forceinline__ void stream_copy_bf16(const eng_cache &pool, int n0, int p_end,
                                                 uint16_t *ks, float *ksc)
{
    constexpr int per = kStreamID / 8; // uint4 a row
    for (int u = threadIdx.x; u < kStreamPools * per; u += kStreamThreads) {
        int r = u / per, d = u % per * 8, p = n0 + r;
        const uint16_t *row = static_cast<const uint16_t *>(pool.rows) + (size_t)p * kStreamID;
        uint4 x = p < p_end ? __ldg(reinterpret_cast<const uint4 *>(row + d)) : make_uint4(0, 0, 0, 0);
        *reinterpret_cast<uint4 *>(ks + r * kStreamKS + d) = x;
    }
    ksc[threadIdx.x] = n0 + (int)threadIdx.x < p_end ? 1.0f : 0.0f;
}

// One warp's 64 pools (col0 .. of the tile at ks) against its query's fragments qf: acc.
template <int MT, bool ONE>
__device__ __forceinline__ void stream_tile_mma(const uint4 *qf, const uint16_t *ks, int col0,
                                                float (&acc)[MT][8][4])
{
    constexpr int parts = stream_parts<ONE>();
    int lane = threadIdx.x & 31;
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int nt = 0; nt < 8; nt++)
#pragma unroll
            for (int r = 0; r < 4; r++)
                acc[mt][nt][r] = 0.0f;
    // ldmatrix: lane l gives row l % 8 of matrix l / 8 (matrices: tile nt, k 0..7; nt, k 8..15;
    // nt + 1, k 0..7; nt + 1, k 8..15), so its registers are B's b[0], b[1] of nt and nt + 1
    int brow_pool = col0 + (lane >> 4) * 8 + (lane & 7), brow_k = (lane >> 3 & 1) * 8;
    const uint16_t *brow = ks + brow_pool * kStreamKS + brow_k;
#pragma unroll
    for (int s = 0; s < kStreamSteps; s++) {
        uint32_t a[parts][MT][4];
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
#pragma unroll
            for (int k = 0; k < parts; k++) {
                uint4 f = qf[((size_t)s * MT + mt) * parts * 32 + k * 32 + lane];
                a[k][mt][0] = f.x, a[k][mt][1] = f.y, a[k][mt][2] = f.z, a[k][mt][3] = f.w;
            }
        uint32_t b[4][4];
#pragma unroll
        for (int np = 0; np < 4; np++)
            ldmatrix_x4(b[np], brow + np * 16 * kStreamKS + s * 16);
        // each accumulator takes lo, mid, hi in turn; between two of its mma the others' run
#pragma unroll
        for (int k = parts - 1; k >= 0; k--)
#pragma unroll
            for (int nt = 0; nt < 8; nt++) {
                const uint32_t bb[2] = {b[nt / 2][2 * (nt % 2)], b[nt / 2][2 * (nt % 2) + 1]};
#pragma unroll
                for (int mt = 0; mt < MT; mt++) {
                    if (ONE)
                        mma_f16(acc[mt][nt], a[k][mt], bb);
                    else
                        mma_bf16(acc[mt][nt], a[k][mt], bb);
                }
            }
    }
}

template <int MT, bool ONE>
__global__ void __launch_bounds__(kStreamThreads) score_stream_kernel(
    eng_cache pool, const float *iq, const int *shift, const float *hw, const int *pos0, int t_off,
    int T, int IH, int ID, int kp, int budget, int max_pools, float *scores, int *work)
{
    pdl_prologue();
    extern __shared__ __align__(16) uint4 stream_smem_base[];
    uint4 *qf = stream_smem_base;
    uint16_t *ks = reinterpret_cast<uint16_t *>(qf + stream_q_units<MT, ONE>());
    float *ksc = reinterpret_cast<float *>(ks + kStreamPools * kStreamKS);
    int first = *pos0 + t_off, tg0 = blockIdx.y * kStreamQueries;
    int t_end = tg0 + kStreamQueries < T ? tg0 + kStreamQueries : T;
    if (work && blockIdx.x == 0)
        clear_rows(work, first, tg0, t_end, kp, budget);
    int p_end = (first + t_end) / kp; // the pools of the block's last query, the most of any
    int tiles = (p_end + kStreamPools - 1) / kStreamPools;
    if (p_end <= budget || (int)blockIdx.x >= tiles)
        return;
    bool fp8 = pool.dtype == ENG_CACHE_FP8;
    uint4 raw[kStreamRaw];
    float raw_scale = 0.0f;
    if (fp8)
        stream_fetch_fp8(pool, blockIdx.x * kStreamPools, p_end, raw, raw_scale);
    stream_split_queries<MT, ONE>(iq, shift, tg0, t_end, IH, qf);
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, c = lane & 3;
    int t = tg0 + warp / 2, col0 = (warp & 1) * 64;
    int P = (first + t + 1) / kp;
    bool active = t < T && P > budget; // a whole warp's query
    // ID (kStreamID) from the launch, as score_mma_kernel has it: its rsqrt on the device, never
    // a constant folded at compile time, which need not round the same
    float hscale = rsqrtf((float)IH), dscale = rsqrtf((float)ID);
    float wv[MT][2];
    head_weights<MT>(hw, t, IH, g, hscale, active, wv);
    int sh[MT][2];
    head_shifts<MT>(ONE ? shift : nullptr, t, IH, g, active, sh);
    const uint4 *my_q = qf + (size_t)(warp / 2) * kStreamSteps * MT * stream_parts<ONE>() * 32;
    float *out = scores + (size_t)t * max_pools;
    for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
        int n0 = tile * kStreamPools;
        __syncthreads(); // the last tile's keys read (and, the first time, q's fragments written)
        if (fp8)
            stream_store_fp8<ONE>(raw, raw_scale, ks, ksc);
        else
            stream_copy_bf16(pool, n0, p_end, ks, ksc);
        __syncthreads();
        if (fp8 && tile + (int)gridDim.x < tiles)
            stream_fetch_fp8(pool, (tile + gridDim.x) * kStreamPools, p_end, raw, raw_scale);
        if (!active || n0 + col0 >= P)
            continue;
        float acc[MT][8][4];
        stream_tile_mma<MT, ONE>(my_q, ks, col0, acc);
#pragma unroll
        for (int nt = 0; nt < 8; nt++) {
            int col = col0 + nt * 8 + 2 * c;
            float sc[2];
#pragma unroll
            for (int j = 0; j < 2; j++) {
                float col_acc[MT][4];
#pragma unroll
                for (int mt = 0; mt < MT; mt++)
#pragma unroll
                    for (int r = 0; r < 4; r++) // ONE: back by the row's head's shift
                        col_acc[mt][r] = ONE ? gemm_fp16x2_scale(acc[mt][nt][r], -sh[mt][r >> 1])
                                             : acc[mt][nt][r];
                float v = score_column<MT>(col_acc, j, ksc[col + j], dscale, wv);
                v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, 4));
                v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, 8));
                v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, 16));
                sc[j] = v;
            }
            store_column_pair(out, n0 + col, P, g, sc);
        }
    }
}

// ---- the selection, split over blocks ----
// The budget-th largest key thr (order_key) is found digit by digit in select_hist_finish_kernel:
// 11 bits (2048 bins) over segments of kHistSeg pools of a query (a block each, their counts
// added into the query's histogram in the work area when there are several; the last block to
// arrive goes on), then that block takes the bin, reads the query's scores once more for the next
// 11 bits, keeping the pools of that bin in shared memory when they fit (kCandCap), then the last
// 10 bits over those; it leaves thr, rem (how many pools equal to thr are taken: the lowest
// first) and each of the gather's segments' (up to kMaxSplits a query) count of
// taken pools and of pools equal to thr before it. select_gather_kernel writes each segment's
// taken pools' tokens in pool order at its offset (ballots within warps, a prefix over the
// block's warps). Integer counts only: the result is the same bits in any run.

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

// The queries' histograms and tickets to zero before select_hist_finish_kernel adds to them (a
// kernel, not a memset: the step's graph keeps programmatic launches from kernel to kernel).
__global__ void clear_work_kernel(int *work)
{
    pdl_prologue();
    for (int i = threadIdx.x; i < kHistBins; i += blockDim.x)
        work[(size_t)blockIdx.x * kRowInts + i] = 0;
    if (threadIdx.x == 0)
        work[(size_t)blockIdx.x * kRowInts + kTicket] = 0;
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

// Block (s, t): the first-digit histogram of query t's pools [s kHistSeg, (s + 1) kHistSeg) in
// shared memory; with one such block a query (P <= kHistSeg) it is the whole histogram, else the
// blocks add theirs into the query's work area and the last to arrive (a ticket) reads the sum.
// That block then finishes the query: the threshold and the gather's per-segment counts.
__global__ void __launch_bounds__(kFinishThreads) select_hist_finish_kernel(const float *scores,
                                                                            int *work,
                                                                            const int *pos0,
                                                                            int t_off, int kp,
                                                                            int budget,
                                                                            int max_pools)
{
    pdl_prologue();
    __shared__ finish_scan_t::TempStorage scan_tmp;
    __shared__ int h[kHistBins];
    __shared__ uint32_t ckey[kCandCap];
    __shared__ int cidx[kCandCap];
    __shared__ int seg_gt[kMaxSplits], seg_eq[kMaxSplits];
    __shared__ int s_n, s_bin, s_above, s_last;
    int t = blockIdx.y, P = (*pos0 + t_off + t + 1) / kp, S, L;
    int hs = blockIdx.x, HS = (P + kHistSeg - 1) / kHistSeg; // this block's segment, their count
    if (P <= budget || hs >= HS)
        return;
    segments(P, &S, &L);
    int *gh = work + (size_t)t * kRowInts, *state = gh + kHistBins;
    int *sel_before = state + 2, *eq_before = sel_before + kMaxSplits;
    if (budget < 1) { // only the open tail
        if (hs == 0 && threadIdx.x == 0)
            state[0] = (int)~0u, state[1] = 0;
        if (hs == 0 && threadIdx.x < kMaxSplits)
            sel_before[threadIdx.x] = eq_before[threadIdx.x] = 0;
        return;
    }
    for (int i = threadIdx.x; i < kHistBins; i += blockDim.x)
        h[i] = 0;
    __syncthreads();
    int h0 = hs * kHistSeg, h1 = h0 + kHistSeg < P ? h0 + kHistSeg : P;
    row_pass(scores + (size_t)t * max_pools, h0, h1,
             [&](uint32_t key, int i) { warp_count(h, i < h1 ? key >> 21 : ~0u); });
    __syncthreads();
    if (HS > 1) {
        for (int i = threadIdx.x; i < kHistBins; i += blockDim.x)
            if (h[i])
                atomicAdd(&gh[i], h[i]);
        __threadfence(); // the block's additions seen before its ticket
        __syncthreads();
        if (threadIdx.x == 0) {
            __threadfence();
            s_last = atomicAdd(&gh[kTicket], 1) == HS - 1;
        }
        __syncthreads();
        if (!s_last)
            return;
        __threadfence(); // the other blocks' additions, seen through their tickets
        for (int i = threadIdx.x; i < kHistBins; i += blockDim.x)
            h[i] = __ldcg(&gh[i]);
    }
    const float *sc = scores + (size_t)t * max_pools;
    int lane = threadIdx.x & 31;
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

// A flag's count over the block from its warps' ballots: the flags set in the warps before this
// thread's (returned) and in the whole block (*all). cnt: shared, one int a warp; a barrier
// inside, so every thread calls.
__device__ __forceinline__ int warps_before(unsigned ballot, int *cnt, int *all)
{
    int warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    if ((threadIdx.x & 31) == 0)
        cnt[warp] = __popc(ballot);
    __syncthreads();
    int before = 0, total = 0;
    for (int w = 0; w < nw; w++)
        before += w < warp ? cnt[w] : 0, total += cnt[w];
    *all = total;
    return before;
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
    for (int base = b0; base < b1; base += blockDim.x) {
        int i = base + threadIdx.x;
        uint32_t key = i < b1 ? order_key(sc[i]) : 0u;
        bool gt = i < b1 && key > thr, eq = i < b1 && key == thr;
        unsigned me = __ballot_sync(0xffffffffu, eq);
        int eq_all, eq_w = warps_before(me, w_eq, &eq_all);
        bool sel = gt || (eq && eq_base + eq_w + __popc(me & lanes_below()) < rem);
        unsigned ms = __ballot_sync(0xffffffffu, sel);
        int sel_all, sel_w = warps_before(ms, w_sel, &sel_all);
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

template <int MT, int NTW, bool ONE>
void launch_score_mma(const eng_cache *pool, const float *iq, const int *shift, const float *hw,
                      const int *pos0, int t_off, int T, int IH, int ID, int kp, int budget,
                      int max_pools, float *scores, int *work, cudaStream_t st)
{
    size_t smem = (size_t)kScorePools * (((ID + 15) & ~15) + 8) * 2 + kScorePools * sizeof(float);
    dim3 grid(blocks_for((size_t)max_pools, kScorePools), blocks_for((size_t)T, NTW == 8 ? 4 : 1));
    launch(score_mma_kernel<MT, NTW, ONE>, grid, 128, smem, st, *pool, iq, shift, hw, pos0, t_off,
           T, IH, ID, kp, budget, max_pools, scores, work);
}

// Which score kernel takes the shapes both can: 1 score_stream_kernel, 0 score_mma_kernel (kept
// to time against and to check the new one's bits); and the stream kernel's blocks a row pair, as
// a fraction of what the device holds at once (waves). Set only by eng_dsa_score_kernel.
std::atomic<int> g_stream_on{1}, g_stream_waves{1};
std::atomic<long> g_stream_launches{0}; // so that the test sees the stream kernel was taken

// score_stream_kernel over the call's row pairs: gridDim.x blocks a pair, as many as `waves`
// times the blocks the device holds at once allows (the pools a block walks adapt to the
// position, which only the device knows). -1 when the device cannot run it.
template <int MT, bool ONE>
int launch_score_stream(const eng_cache *pool, const float *iq, const int *shift, const float *hw,
                        const int *pos0, int t_off, int T, int IH, int kp, int budget,
                        int max_pools, float *scores, int *work, cudaStream_t st)
{
    int resident = 0;
    if (resident_blocks<score_stream_kernel<MT, ONE>>(kStreamThreads, stream_smem<MT, ONE>(),
                                                      "the indexer's stream score kernel",
                                                      &resident))
        return -1;
    unsigned pairs = blocks_for((size_t)T, kStreamQueries);
    // rounded down: a partial last wave would double a call's time
    unsigned per_pair = (unsigned)((size_t)resident * g_stream_waves.load() / pairs);
    unsigned tiles = blocks_for((size_t)max_pools, kStreamPools);
    per_pair = per_pair < tiles ? per_pair : tiles;
    per_pair = per_pair > 0 ? per_pair : 1;
    launch(score_stream_kernel<MT, ONE>, dim3(per_pair, pairs), kStreamThreads,
           stream_smem<MT, ONE>(), st, *pool, iq, shift, hw, pos0, t_off, T, IH, kStreamID, kp,
           budget, max_pools, scores, work);
    g_stream_launches.fetch_add(1, std::memory_order_relaxed);
    return 0;
}

// The shapes score_stream_kernel takes: fp8 or bf16 rows of 128 at 16-byte alignment, up to 32
// heads, a call of 4 queries or more (decode stays on score_mma_kernel's split of one query).
bool stream_fits(const eng_cache *pool, int T, int IH, int ID)
{
    return g_stream_on.load() && (pool->dtype == ENG_CACHE_FP8 || pool->dtype == ENG_CACHE_BF16) &&
           ID == kStreamID && IH <= kScoreMaxIH && T >= 4 && (uintptr_t)pool->rows % 16 == 0;
}

// The scores of eng_dsa_scores; work: the selection's histograms to clear as well, or null.
// shift: q rounded by eng_one_part_rows (its shifts), or null; the e4m3 keys then take the
// one-part kernels, the others the exact ones on the rounded q (the same products).
int scores_and_clear(const eng_cache *pool, const float *iq, const int *shift, const float *hw,
                     const int *pos0, int t_off, int T, int IH, int ID, int kp, int budget,
                     int max_pools, float *scores, int *work, cudaStream_t st)
{
    if (T < 1 || T > 65535 || kp < 1 || budget < 0 || max_pools < 1 || IH < 1 || ID < 1)
        return -1;
    if (max_pools <= budget) // no query of this cache has more pools than the budget
        return 0;
    bool one = shift && pool->dtype == ENG_CACHE_FP8;
    if (stream_fits(pool, T, IH, ID)) {
        auto go = IH > 16 ? (one ? launch_score_stream<2, true> : launch_score_stream<2, false>)
                          : (one ? launch_score_stream<1, true> : launch_score_stream<1, false>);
        if (go(pool, iq, shift, hw, pos0, t_off, T, IH, kp, budget, max_pools, scores, work, st))
            return (int)cudaErrorInvalidConfiguration;
        return (int)cudaGetLastError();
    }
    if (pool->dtype != ENG_CACHE_F32 && IH <= kScoreMaxIH && ID <= kScoreMaxID) {
        int mt2 = IH > 16, wide = T >= 4;
        auto go = one ? (mt2 ? (wide ? launch_score_mma<2, 8, true> : launch_score_mma<2, 2, true>)
                             : (wide ? launch_score_mma<1, 8, true> : launch_score_mma<1, 2, true>))
                      : (mt2 ? (wide ? launch_score_mma<2, 8, false> : launch_score_mma<2, 2, false>)
                             : (wide ? launch_score_mma<1, 8, false> : launch_score_mma<1, 2, false>));
        go(pool, iq, shift, hw, pos0, t_off, T, IH, ID, kp, budget, max_pools, scores, work, st);
        return (int)cudaGetLastError();
    }
    dim3 grid(blocks_for((size_t)max_pools, 8), T);
    launch(score_kernel, grid, 256, 0, st, *pool, iq, hw, pos0, t_off, IH, ID, kp, budget,
           max_pools, scores, work);
    return (int)cudaGetLastError();
}

// The selection of eng_dsa_topk; cleared: the histograms were zeroed by the score kernel.
int topk_chain(float *scores, const int *pos0, int t_off, int T, int kp, int budget,
               int max_pools, int width, int32_t *idx, int *count, bool cleared, cudaStream_t st)
{
    if (T < 1 || T > 65535 || kp < 1 || budget < 0 || max_pools < 1)
        return -1;
    int *work = reinterpret_cast<int *>(scores + (size_t)T * max_pools);
    unsigned splits = blocks_for((size_t)max_pools, kSegMin);
    splits = splits < kMaxSplits ? splits : kMaxSplits;
    if (max_pools > budget) {
        if (!cleared)
            launch(clear_work_kernel, T, kSegThreads, 0, st, work);
        launch(select_hist_finish_kernel, dim3(blocks_for((size_t)max_pools, kHistSeg), T),
               kFinishThreads, 0, st, scores, work, pos0, t_off, kp, budget, max_pools);
    }
    launch(select_gather_kernel, dim3(splits, T), kSegThreads, 0, st, scores, work, pos0, t_off,
           kp, budget, max_pools, width, idx, count);
    return (int)cudaGetLastError();
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

extern "C" int eng_rmsnorm_cache_write(float *x, const float *w, int T, float eps,
                                       const eng_cache *c, const int *pos0, void *stream)
{
    if (!c || T < 1 || c->width < 1 || (size_t)c->width * sizeof(float) > 48 * 1024)
        return -1;
    launch(rmsnorm_cache_kernel, T, rmsnorm_threads(c->width), (size_t)c->width * sizeof(float),
           static_cast<cudaStream_t>(stream), x, w, c->width, eps, *c, pos0);
    return (int)cudaGetLastError();
}

extern "C" int eng_index_keys_write(float *key, const float *w, const float *b, float eps,
                                    const eng_cache *keys, const float *gate,
                                    const eng_cache *gates, const int *pos0, int T, void *stream)
{
    if (!keys || !gates || T < 1 || keys->width < 1 || gates->width < 1)
        return -1;
    int widest = keys->width > gates->width ? keys->width : gates->width;
    if ((size_t)widest * sizeof(float) > 48 * 1024)
        return -1;
    launch(index_keys_kernel, dim3(T, 2), kLayernormThreads, (size_t)widest * sizeof(float),
           static_cast<cudaStream_t>(stream), key, w, b, eps, *keys, gate, *gates, pos0);
    return (int)cudaGetLastError();
}

extern "C" int eng_dsa_rows_write(const eng_dsa_rows *r, const int *pos0, int T, void *stream)
{
    if (!r || T < 1 || r->qa_width < 1 || r->latent.width < 1 ||
        (r->key && (r->keys.width < 1 || r->gates.width < 1)))
        return -1;
    int threads = rmsnorm_threads(r->qa_width), widest = r->latent.width;
    if (rmsnorm_threads(r->latent.width) > threads)
        threads = rmsnorm_threads(r->latent.width);
    if (r->key) {
        threads = threads > kLayernormThreads ? threads : kLayernormThreads;
        widest = r->keys.width > widest ? r->keys.width : widest;
        widest = r->gates.width > widest ? r->gates.width : widest;
    }
    if ((size_t)widest * sizeof(float) > 48 * 1024)
        return -1;
    launch(dsa_rows_kernel, dim3(T, r->key ? 4 : 2), threads, (size_t)widest * sizeof(float),
           static_cast<cudaStream_t>(stream), *r, pos0);
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

extern "C" int eng_one_part_rows(float *x, int rows, int width, int *shift, void *stream)
{
    if (rows < 1 || width < 1 || !shift)
        return -1;
    launch(one_part_rows_kernel, blocks_for((size_t)rows, 8), 256, 0,
           static_cast<cudaStream_t>(stream), x, rows, width, shift);
    return (int)cudaGetLastError();
}

extern "C" int eng_dsa_scores(const eng_cache *pool, const float *iq, const int *q_shift,
                              const float *hw, const int *pos0, int t_off, int T, int IH, int ID,
                              int kpool, int budget, int max_pools, float *scores, void *stream)
{
    return scores_and_clear(pool, iq, q_shift, hw, pos0, t_off, T, IH, ID, kpool, budget, max_pools,
                            scores, nullptr, static_cast<cudaStream_t>(stream));
}

extern "C" int eng_dsa_topk(float *scores, const int *pos0, int t_off, int T, int kpool, int budget,
                            int max_pools, int width, int32_t *idx, int *count, void *stream)
{
    return topk_chain(scores, pos0, t_off, T, kpool, budget, max_pools, width, idx, count, false,
                      static_cast<cudaStream_t>(stream));
}

// Internal: which score kernel eng_dsa_scores and eng_dsa_select use where both fit (1 the
// stream kernel, 0 the tile kernel before it) and the stream kernel's grid in waves of resident
// blocks (waves < 1 leaves it); for test_index_gpu's bit comparison and timing, never the
// environment. Returns the kernel in use before.
extern "C" int eng_dsa_score_kernel(int stream, int waves)
{
    int before = g_stream_on.exchange(stream ? 1 : 0);
    if (waves >= 1)
        g_stream_waves.store(waves);
    return before;
}

// Internal: score_stream_kernel's launches so far (test_index_gpu checks its shapes took it).
extern "C" long eng_dsa_stream_launches(void)
{
    return g_stream_launches.load();
}

// The score kernel clears the histograms: three launches, not four.
extern "C" int eng_dsa_select(const eng_cache *pool, const float *iq, const int *q_shift,
                              const float *hw, const int *pos0, int t_off, int T, int IH, int ID,
                              int kpool, int budget, int max_pools, float *scores, int width,
                              int32_t *idx, int *count, void *stream)
{
    cudaStream_t st = static_cast<cudaStream_t>(stream);
    if (T < 1 || T > 65535 || max_pools < 1)
        return -1;
    int *work = reinterpret_cast<int *>(scores + (size_t)T * max_pools);
    int rc = scores_and_clear(pool, iq, q_shift, hw, pos0, t_off, T, IH, ID, kpool, budget,
                              max_pools, scores, work, st);
    return rc ? rc : topk_chain(scores, pos0, t_off, T, kpool, budget, max_pools, width, idx, count,
                                true, st);
}
