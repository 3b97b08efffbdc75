// engine_dsa.cu: DeepSeek sparse attention on the GPU (architecture.md 2.5): cache rows in f32,
// bf16 or e4m3 with a power-of-two row scale, the indexer's pool keys, scores and top-k (radix
// select, ties to the lower pool), and MLA over the latent in absorbed form.
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

constexpr int kAbsorbT = 8;
constexpr int kAbsorbSplit = 8; // dn slices, each a warp-group of the block (decode: few tokens)

// Block per (head, 8 tokens); the block's 8 warps take interleaved slices of the dn rows, each
// lane two latent columns a pass, and meet in shared memory in slice order.
__global__ void __launch_bounds__(256) absorb_kernel(eng_mat kv_b, const float *q, int T, int H,
                                                     int dn, int dv, int R, float *qt)
{
    pdl_prologue();
    extern __shared__ float sm[]; // qs [kAbsorbT][dn], part [kAbsorbSplit][kAbsorbT][R]
    float *qs = sm, *part = sm + kAbsorbT * dn;
    int h = blockIdx.x, t0 = blockIdx.y * kAbsorbT;
    int nt = T - t0 < kAbsorbT ? T - t0 : kAbsorbT;
    int lane = threadIdx.x & 31, slice = threadIdx.x >> 5;
    for (int i = threadIdx.x; i < kAbsorbT * dn; i += blockDim.x)
        qs[i] = i / dn < nt ? q[((size_t)(t0 + i / dn) * H + h) * dn + i % dn] : 0.0f;
    __syncthreads();
    bool vec = kv_b.dtype == ENG_BF16 && R % 8 == 0 && (uintptr_t)kv_b.data % 16 == 0;
    for (int r0 = 0; vec && r0 < R; r0 += 256) { // BF16: 8 columns a lane, one 16-byte load
        int c = r0 + lane * 8;
        if (c >= R)
            continue;
        float acc[8][kAbsorbT] = {};
#pragma unroll 4
        for (int i = slice; i < dn; i += kAbsorbSplit) {
            const uint16_t *wr = static_cast<const uint16_t *>(kv_b.data) + (size_t)(h * (dn + dv) + i) * R + c;
            uint4 q = __ldg(reinterpret_cast<const uint4 *>(wr));
            const uint32_t u[4] = {q.x, q.y, q.z, q.w};
            float wv[8];
#pragma unroll
            for (int j = 0; j < 4; j++) {
                wv[2 * j] = __uint_as_float(u[j] << 16);
                wv[2 * j + 1] = __uint_as_float(u[j] & 0xffff0000u);
            }
#pragma unroll
            for (int k = 0; k < kAbsorbT; k++) {
                float qk = qs[k * dn + i];
#pragma unroll
                for (int j = 0; j < 8; j++)
                    acc[j][k] += qk * wv[j];
            }
        }
#pragma unroll
        for (int k = 0; k < kAbsorbT; k++)
#pragma unroll
            for (int j = 0; j < 8; j++)
                part[(slice * kAbsorbT + k) * R + c + j] = acc[j][k];
    }
    for (int r0 = 0; !vec && r0 < R; r0 += 64) {
        int ra = r0 + lane, rb = r0 + 32 + lane;
        float acc[2][kAbsorbT] = {};
        for (int i = slice; i < dn; i += kAbsorbSplit) {
            int row = h * (dn + dv) + i;
            float wa = ra < R ? mat_at(kv_b, row, ra) : 0.0f;
            float wb = rb < R ? mat_at(kv_b, row, rb) : 0.0f;
#pragma unroll
            for (int k = 0; k < kAbsorbT; k++) {
                acc[0][k] += qs[k * dn + i] * wa;
                acc[1][k] += qs[k * dn + i] * wb;
            }
        }
#pragma unroll
        for (int k = 0; k < kAbsorbT; k++) {
            if (ra < R)
                part[(slice * kAbsorbT + k) * R + ra] = acc[0][k];
            if (rb < R)
                part[(slice * kAbsorbT + k) * R + rb] = acc[1][k];
        }
    }
    __syncthreads();
    for (int i = threadIdx.x; i < nt * R; i += blockDim.x) {
        int k = i / R, r = i % R;
        float a = 0.0f;
        for (int sl = 0; sl < kAbsorbSplit; sl++)
            a += part[(sl * kAbsorbT + k) * R + r];
        qt[((size_t)(t0 + k) * H + h) * R + r] = a;
    }
}

// The decode step's absorbed query for bf16 kv_b: grid (head, 64-column group, 8 tokens), so
// that 64 heads make H * R / 64 blocks (512 for GLM) and each thread has all of its weight loads
// in flight at once; absorb_kernel's 64 blocks left half the SMs idle with one load a lane in
// flight. Lane l of warp w takes columns c0 + 8 (l % 8) .. + 7 and the rows i = 4 w + l / 8 + 32 p;
// its sums meet the other row slots by shuffles (xor 8, 16), then the warps in warp order. Each
// row's sums are the same whatever the token count (tokens of a group are summed independently).
constexpr int kAbsorbCols = 64, kAbsorbBatch = 8;

__global__ void __launch_bounds__(256) absorb_cols_kernel(eng_mat kv_b, const float *q, int T, int H,
                                                          int dn, int dv, int R, float *qt)
{
    pdl_prologue();
    extern __shared__ float sm[]; // qs [kAbsorbT][dn], part [8 warps][kAbsorbT][kAbsorbCols]
    float *qs = sm, *part = sm + kAbsorbT * dn;
    int h = blockIdx.x, c0 = blockIdx.y * kAbsorbCols, t0 = blockIdx.z * kAbsorbT;
    int nt = T - t0 < kAbsorbT ? T - t0 : kAbsorbT;
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, slot = warp * 4 + lane / 8;
    int c = c0 + 8 * (lane % 8);
    bool mine = c < R;
    const uint16_t *wbase = static_cast<const uint16_t *>(kv_b.data) + (size_t)h * (dn + dv) * R + c;
    float acc[8][kAbsorbT];
#pragma unroll
    for (int j = 0; j < 8; j++)
#pragma unroll
        for (int k = 0; k < kAbsorbT; k++)
            acc[j][k] = 0.0f;
    uint4 wq[kAbsorbBatch];
    for (int i0 = slot;; ) {
#pragma unroll
        for (int p = 0; p < kAbsorbBatch; p++) { // the weights first: they wait on nothing
            int i = i0 + 32 * p;
            wq[p] = mine && i < dn ? __ldg(reinterpret_cast<const uint4 *>(wbase + (size_t)i * R))
                                   : make_uint4(0, 0, 0, 0);
        }
        if (i0 == slot) { // the queries of the block's tokens, once (every thread passes here)
            for (int e = threadIdx.x; e < kAbsorbT * dn; e += blockDim.x)
                qs[e] = e / dn < nt ? q[((size_t)(t0 + e / dn) * H + h) * dn + e % dn] : 0.0f;
            __syncthreads();
        }
#pragma unroll
        for (int p = 0; p < kAbsorbBatch; p++) {
            int i = i0 + 32 * p;
            if (i >= dn)
                break;
            const uint32_t u[4] = {wq[p].x, wq[p].y, wq[p].z, wq[p].w};
            float wv[8];
#pragma unroll
            for (int j = 0; j < 4; j++) {
                wv[2 * j] = __uint_as_float(u[j] << 16);
                wv[2 * j + 1] = __uint_as_float(u[j] & 0xffff0000u);
            }
#pragma unroll
            for (int k = 0; k < kAbsorbT; k++) {
                float qk = qs[k * dn + i];
#pragma unroll
                for (int j = 0; j < 8; j++)
                    acc[j][k] += qk * wv[j];
            }
        }
        i0 += 32 * kAbsorbBatch;
        if (i0 >= dn)
            break;
    }
#pragma unroll
    for (int j = 0; j < 8; j++)
#pragma unroll
        for (int k = 0; k < kAbsorbT; k++) {
            float a = acc[j][k];
            a += __shfl_xor_sync(0xffffffffu, a, 8);
            a += __shfl_xor_sync(0xffffffffu, a, 16);
            acc[j][k] = a;
        }
    if (lane < 8)
#pragma unroll
        for (int k = 0; k < kAbsorbT; k++)
#pragma unroll
            for (int j = 0; j < 8; j++)
                part[(warp * kAbsorbT + k) * kAbsorbCols + 8 * lane + j] = acc[j][k];
    __syncthreads();
    for (int e = threadIdx.x; e < nt * kAbsorbCols; e += blockDim.x) {
        int k = e / kAbsorbCols, cc = e % kAbsorbCols;
        if (c0 + cc >= R)
            continue;
        float a = 0.0f;
        for (int w = 0; w < 8; w++)
            a += part[(w * kAbsorbT + k) * kAbsorbCols + cc];
        qt[((size_t)(t0 + k) * H + h) * R + c0 + cc] = a;
    }
}

// Values c0 .. c0+15 of a cache row (width a multiple of 16): one 16-byte load for e4m3, two for
// bf16, four for f32.
__device__ __forceinline__ void load16(const eng_cache &c, size_t row, int c0, float *v)
{
    size_t i = row * c.width + c0;
    if (c.dtype == ENG_CACHE_FP8) {
        uint4 q = __ldg(reinterpret_cast<const uint4 *>(static_cast<const uint8_t *>(c.rows) + i));
        const uint32_t u[4] = {q.x, q.y, q.z, q.w};
        float sc = c.scale[row];
#pragma unroll
        for (int j = 0; j < 16; j++)
            v[j] = fp8_to_f32((uint8_t)(u[j / 4] >> (8 * (j % 4)))) * sc;
    } else if (c.dtype == ENG_CACHE_BF16) {
        const uint4 *p = reinterpret_cast<const uint4 *>(static_cast<const uint16_t *>(c.rows) + i);
#pragma unroll
        for (int h = 0; h < 2; h++) {
            uint4 q = __ldg(p + h);
            const uint32_t u[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
            for (int j = 0; j < 4; j++) {
                v[h * 8 + 2 * j] = __uint_as_float(u[j] << 16);
                v[h * 8 + 2 * j + 1] = __uint_as_float(u[j] & 0xffff0000u);
            }
        }
    } else {
        const float4 *p = reinterpret_cast<const float4 *>(static_cast<const float *>(c.rows) + i);
#pragma unroll
        for (int h = 0; h < 4; h++) {
            float4 q = __ldg(p + h);
            v[4 * h] = q.x, v[4 * h + 1] = q.y, v[4 * h + 2] = q.z, v[4 * h + 3] = q.w;
        }
    }
}

// attend_kernel for R a multiple of 16 up to 512: each lane owns 16 consecutive latent columns.
__global__ void attend16_kernel(eng_cache lat, const float *qt, const int32_t *idx, const int *count,
                                int width, int H, int R, float scale, float *ot)
{
    pdl_prologue();
    __shared__ float red[33];
    extern __shared__ float sm[]; // qs [R], p [width], part [warps][R]
    float *qs = sm, *p = sm + R, *part = p + width;
    int t = blockIdx.x / H, h = blockIdx.x % H;
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    const float *qrow = qt + ((size_t)t * H + h) * R;
    for (int r = threadIdx.x; r < R; r += blockDim.x)
        qs[r] = qrow[r];
    __syncthreads();
    int n = count[t], c0 = lane * 16;
    bool mine = c0 < R;
    const int32_t *sel = idx + (size_t)t * width;
    float qv[16];
#pragma unroll
    for (int j = 0; j < 16; j++)
        qv[j] = mine ? qs[c0 + j] : 0.0f;
    for (int s0 = warp * 4; s0 < n; s0 += nw * 4) { // four rows a pass: their loads overlap
        float dot[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
        for (int u = 0; u < 4; u++) {
            int s = s0 + u;
            if (mine && s < n) {
                float v[16];
                load16(lat, (size_t)sel[s], c0, v);
#pragma unroll
                for (int j = 0; j < 16; j++)
                    dot[u] += qv[j] * v[j];
            }
        }
#pragma unroll
        for (int u = 0; u < 4; u++) {
            float d = warp_sum(dot[u]);
            if (lane == 0 && s0 + u < n)
                p[s0 + u] = d * scale;
        }
    }
    __syncthreads();
    float mx = -INFINITY;
    for (int s = threadIdx.x; s < n; s += blockDim.x)
        mx = fmaxf(mx, p[s]);
    mx = block_max(mx, red);
    float sum = 0.0f;
    for (int s = threadIdx.x; s < n; s += blockDim.x) {
        p[s] = expf(p[s] - mx);
        sum += p[s];
    }
    sum = block_sum(sum, red);
    float inv = 1.0f / sum;
    float acc[16];
#pragma unroll
    for (int j = 0; j < 16; j++)
        acc[j] = 0.0f;
    if (mine)
        for (int s0 = warp * 4; s0 < n; s0 += nw * 4) {
#pragma unroll
            for (int u = 0; u < 4; u++) {
                int s = s0 + u;
                if (s < n) {
                    float v[16], ps = p[s];
                    load16(lat, (size_t)sel[s], c0, v);
#pragma unroll
                    for (int j = 0; j < 16; j++)
                        acc[j] += ps * v[j];
                }
            }
        }
    if (mine)
#pragma unroll
        for (int j = 0; j < 16; j++)
            part[warp * R + c0 + j] = acc[j];
    __syncthreads();
    for (int r = threadIdx.x; r < R; r += blockDim.x) {
        float a = 0.0f;
        for (int k = 0; k < nw; k++)
            a += part[k * R + r];
        ot[((size_t)t * H + h) * R + r] = a * inv;
    }
}

// The decode path's latent attention (few (token, head) pairs): each pair's selection split over
// `splits` blocks (grid.y), each writing its unnormalised weighted latent sum, its score maximum
// and its sum of exponentials; attend_combine_kernel rescales and adds them in block order.
__global__ void attend_split_kernel(eng_cache lat, const float *qt, const int32_t *idx,
                                    const int *count, int width, int H, int R, float scale,
                                    int splits, float *part)
{
    pdl_prologue();
    __shared__ float red[33];
    extern __shared__ float sm[]; // p [ceil(width / splits)], sums [warps][R]
    int th = blockIdx.x, sp = blockIdx.y, t = th / H;
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    int n = count[t], chunk = (n + splits - 1) / splits;
    int s0 = sp * chunk, s1 = s0 + chunk < n ? s0 + chunk : n;
    float *p = sm, *sums = sm + (width + splits - 1) / splits;
    const float *qrow = qt + (size_t)th * R;
    int c0 = lane * 16;
    bool mine = c0 < R;
    const int32_t *sel = idx + (size_t)t * width;
    float qv[16];
#pragma unroll
    for (int j = 0; j < 16; j++)
        qv[j] = mine ? qrow[c0 + j] : 0.0f;
    for (int b0 = s0 + warp * 4; b0 < s1; b0 += nw * 4) { // four rows a pass
        float dot[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
        for (int u = 0; u < 4; u++) {
            int s = b0 + u;
            if (mine && s < s1) {
                float v[16];
                load16(lat, (size_t)sel[s], c0, v);
#pragma unroll
                for (int j = 0; j < 16; j++)
                    dot[u] += qv[j] * v[j];
            }
        }
#pragma unroll
        for (int u = 0; u < 4; u++) {
            float d = warp_sum(dot[u]);
            if (lane == 0 && b0 + u < s1)
                p[b0 + u - s0] = d * scale;
        }
    }
    __syncthreads();
    float mx = -INFINITY;
    for (int i = threadIdx.x; i < s1 - s0; i += blockDim.x)
        mx = fmaxf(mx, p[i]);
    mx = block_max(mx, red);
    float sum = 0.0f;
    for (int i = threadIdx.x; i < s1 - s0; i += blockDim.x) {
        p[i] = expf(p[i] - mx);
        sum += p[i];
    }
    sum = block_sum(sum, red); // its barriers also publish p
    float acc[16];
#pragma unroll
    for (int j = 0; j < 16; j++)
        acc[j] = 0.0f;
    if (mine)
        for (int b0 = s0 + warp * 4; b0 < s1; b0 += nw * 4) {
#pragma unroll
            for (int u = 0; u < 4; u++) {
                int s = b0 + u;
                if (s < s1) {
                    float v[16], ps = p[s - s0];
                    load16(lat, (size_t)sel[s], c0, v);
#pragma unroll
                    for (int j = 0; j < 16; j++)
                        acc[j] += ps * v[j];
                }
            }
        }
    if (mine)
#pragma unroll
        for (int j = 0; j < 16; j++)
            sums[warp * R + c0 + j] = acc[j];
    __syncthreads();
    float *out = part + ((size_t)th * splits + sp) * (R + 2);
    for (int r = threadIdx.x; r < R; r += blockDim.x) {
        float a = 0.0f;
        for (int k = 0; k < nw; k++)
            a += sums[k * R + r];
        out[r] = a;
    }
    if (threadIdx.x == 0)
        out[R] = mx, out[R + 1] = sum;
}

// A cache row's 16 values c0 .. c0+15 as loaded (bf16 or e4m3, with the row's scale), so that
// several rows' loads can be in flight before any is converted; unpack16 converts them as load16.
struct raw16 {
    uint4 a, b;
    float sc;
};

__device__ __forceinline__ raw16 load_raw16(const eng_cache &c, size_t row, int c0)
{
    raw16 r;
    size_t i = row * c.width + c0;
    if (c.dtype == ENG_CACHE_FP8) {
        r.a = __ldg(reinterpret_cast<const uint4 *>(static_cast<const uint8_t *>(c.rows) + i));
        r.b = make_uint4(0, 0, 0, 0);
        r.sc = c.scale[row];
    } else {
        const uint4 *p = reinterpret_cast<const uint4 *>(static_cast<const uint16_t *>(c.rows) + i);
        r.a = __ldg(p);
        r.b = __ldg(p + 1);
        r.sc = 1.0f;
    }
    return r;
}

__device__ __forceinline__ void unpack16(int fp8, const raw16 &r, float *v)
{
    if (fp8) {
        const uint32_t u[4] = {r.a.x, r.a.y, r.a.z, r.a.w};
#pragma unroll
        for (int j = 0; j < 16; j++)
            v[j] = fp8_to_f32((uint8_t)(u[j / 4] >> (8 * (j % 4)))) * r.sc;
    } else {
        const uint32_t u[8] = {r.a.x, r.a.y, r.a.z, r.a.w, r.b.x, r.b.y, r.b.z, r.b.w};
#pragma unroll
        for (int j = 0; j < 8; j++) {
            v[2 * j] = __uint_as_float(u[j] << 16);
            v[2 * j + 1] = __uint_as_float(u[j] & 0xffff0000u);
        }
    }
}

// attend_split_kernel for bf16 and e4m3 caches: a warp takes 8 selected rows a pass (lanes 0-7
// load their indices, shuffled to all), all 8 rows' loads in flight before any product: two
// round trips to memory per 8 rows instead of per 4. Same outputs and layout as
// attend_split_kernel; each warp's rows are b0 .. b0 + 7 for b0 = s0 + 8 warp + 8 nw k.
constexpr int kSplitRows = 8;

__global__ void __launch_bounds__(256) attend_split8_kernel(eng_cache lat, const float *qt,
                                                            const int32_t *idx, const int *count,
                                                            int width, int H, int R, float scale,
                                                            int splits, float *part)
{
    pdl_prologue();
    __shared__ float red[33];
    extern __shared__ float sm[]; // p [ceil(width / splits)], sums [warps][R]
    int th = blockIdx.x, sp = blockIdx.y, t = th / H;
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    int n = count[t], chunk = (n + splits - 1) / splits;
    int s0 = sp * chunk, s1 = s0 + chunk < n ? s0 + chunk : n;
    float *p = sm, *sums = sm + (width + splits - 1) / splits;
    const float *qrow = qt + (size_t)th * R;
    int c0 = lane * 16, fp8 = lat.dtype == ENG_CACHE_FP8;
    bool mine = c0 < R;
    const int32_t *sel = idx + (size_t)t * width;
    float qv[16];
#pragma unroll
    for (int j = 0; j < 16; j++)
        qv[j] = mine ? qrow[c0 + j] : 0.0f;
    for (int b0 = s0 + warp * kSplitRows; b0 < s1; b0 += nw * kSplitRows) {
        int my = lane < kSplitRows && b0 + lane < s1 ? sel[b0 + lane] : 0;
        raw16 r[kSplitRows];
#pragma unroll
        for (int u = 0; u < kSplitRows; u++) {
            int row = __shfl_sync(0xffffffffu, my, u);
            if (mine && b0 + u < s1)
                r[u] = load_raw16(lat, (size_t)row, c0);
        }
        float dot[kSplitRows];
#pragma unroll
        for (int u = 0; u < kSplitRows; u++) {
            dot[u] = 0.0f;
            if (mine && b0 + u < s1) {
                float v[16];
                unpack16(fp8, r[u], v);
#pragma unroll
                for (int j = 0; j < 16; j++)
                    dot[u] += qv[j] * v[j];
            }
        }
#pragma unroll
        for (int u = 0; u < kSplitRows; u++) {
            float d = warp_sum(dot[u]);
            if (lane == 0 && b0 + u < s1)
                p[b0 + u - s0] = d * scale;
        }
    }
    __syncthreads();
    float mx = -INFINITY;
    for (int i = threadIdx.x; i < s1 - s0; i += blockDim.x)
        mx = fmaxf(mx, p[i]);
    mx = block_max(mx, red);
    float sum = 0.0f;
    for (int i = threadIdx.x; i < s1 - s0; i += blockDim.x) {
        p[i] = expf(p[i] - mx);
        sum += p[i];
    }
    sum = block_sum(sum, red); // its barriers also publish p
    float acc[16];
#pragma unroll
    for (int j = 0; j < 16; j++)
        acc[j] = 0.0f;
    for (int b0 = s0 + warp * kSplitRows; b0 < s1; b0 += nw * kSplitRows) {
        int my = lane < kSplitRows && b0 + lane < s1 ? sel[b0 + lane] : 0;
        raw16 r[kSplitRows];
#pragma unroll
        for (int u = 0; u < kSplitRows; u++) {
            int row = __shfl_sync(0xffffffffu, my, u);
            if (mine && b0 + u < s1)
                r[u] = load_raw16(lat, (size_t)row, c0);
        }
#pragma unroll
        for (int u = 0; u < kSplitRows; u++)
            if (mine && b0 + u < s1) {
                float v[16], ps = p[b0 + u - s0];
                unpack16(fp8, r[u], v);
#pragma unroll
                for (int j = 0; j < 16; j++)
                    acc[j] += ps * v[j];
            }
    }
    if (mine)
#pragma unroll
        for (int j = 0; j < 16; j++)
            sums[warp * R + c0 + j] = acc[j];
    __syncthreads();
    float *out = part + ((size_t)th * splits + sp) * (R + 2);
    for (int r = threadIdx.x; r < R; r += blockDim.x) {
        float a = 0.0f;
        for (int k = 0; k < nw; k++)
            a += sums[k * R + r];
        out[r] = a;
    }
    if (threadIdx.x == 0)
        out[R] = mx, out[R + 1] = sum;
}

__global__ void attend_combine_kernel(const float *part, int splits, int R, float *ot)
{
    pdl_prologue();
    const float *pp = part + (size_t)blockIdx.x * splits * (R + 2);
    float M = -INFINITY;
    for (int sp = 0; sp < splits; sp++)
        M = fmaxf(M, pp[(size_t)sp * (R + 2) + R]);
    float L = 0.0f;
    for (int sp = 0; sp < splits; sp++) {
        float m = pp[(size_t)sp * (R + 2) + R];
        if (m > -INFINITY)
            L += pp[(size_t)sp * (R + 2) + R + 1] * expf(m - M);
    }
    for (int r = threadIdx.x; r < R; r += blockDim.x) {
        float a = 0.0f;
        for (int sp = 0; sp < splits; sp++) {
            float m = pp[(size_t)sp * (R + 2) + R];
            if (m > -INFINITY)
                a += pp[(size_t)sp * (R + 2) + r] * expf(m - M);
        }
        ot[(size_t)blockIdx.x * R + r] = a / L;
    }
}

constexpr int kAttendMaxJ = 16; // R <= 32 * kAttendMaxJ for the warp-split weighted sum

// One block per (token, head): scores by warps over the selected rows, softmax, then the weighted
// latent sum split over warps (each warp its rows, lanes over R) and summed in warp order.
__global__ void attend_kernel(eng_cache lat, const float *qt, const int32_t *idx, const int *count,
                              int width, int H, int R, float scale, float *ot)
{
    pdl_prologue();
    __shared__ float red[33];
    extern __shared__ float sm[]; // qs [R], p [width], part [warps][R]
    float *qs = sm, *p = sm + R, *part = p + width;
    int t = blockIdx.x / H, h = blockIdx.x % H;
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    const float *qrow = qt + ((size_t)t * H + h) * R;
    for (int r = threadIdx.x; r < R; r += blockDim.x)
        qs[r] = qrow[r];
    __syncthreads();
    int n = count[t];
    const int32_t *sel = idx + (size_t)t * width;
    for (int s = warp; s < n; s += nw) {
        float dot = 0.0f;
        for (int r = lane; r < R; r += 32)
            dot += qs[r] * cache_at(lat, (size_t)sel[s], r);
        dot = warp_sum(dot);
        if (lane == 0)
            p[s] = dot * scale;
    }
    __syncthreads();
    float mx = -INFINITY;
    for (int s = threadIdx.x; s < n; s += blockDim.x)
        mx = fmaxf(mx, p[s]);
    mx = block_max(mx, red);
    float sum = 0.0f;
    for (int s = threadIdx.x; s < n; s += blockDim.x) {
        p[s] = expf(p[s] - mx);
        sum += p[s];
    }
    sum = block_sum(sum, red); // its barriers also publish p
    float inv = 1.0f / sum;
    float acc[kAttendMaxJ];
#pragma unroll
    for (int j = 0; j < kAttendMaxJ; j++)
        acc[j] = 0.0f;
    for (int s = warp; s < n; s += nw) {
        size_t row = (size_t)sel[s];
        float ps = p[s];
#pragma unroll
        for (int j = 0; j < kAttendMaxJ; j++) {
            int r = lane + 32 * j;
            if (r < R)
                acc[j] += ps * cache_at(lat, row, r);
        }
    }
#pragma unroll
    for (int j = 0; j < kAttendMaxJ; j++) {
        int r = lane + 32 * j;
        if (r < R)
            part[warp * R + r] = acc[j];
    }
    __syncthreads();
    for (int r = threadIdx.x; r < R; r += blockDim.x) {
        float a = 0.0f;
        for (int k = 0; k < nw; k++)
            a += part[k * R + r];
        ot[((size_t)t * H + h) * R + r] = a * inv;
    }
}

// The decode step's value expansion for bf16 kv_b (R a multiple of 8, at most 512): a warp takes
// kExpandRows consecutive value rows, each lane 16 bytes of each row and its next 256 columns' 16
// bytes, all loaded before any product (expand_kernel loaded two bytes a lane at a time). Lane l's
// columns are 8 l .. 8 l + 7 and 256 + 8 l ..; a row's sum is those products in that order, then
// the warp sum: the same for any token count.
constexpr int kExpandRows = 4;

__global__ void __launch_bounds__(256) expand_vec_kernel(eng_mat kv_b, const float *ot, int T, int H,
                                                         int dn, int dv, int R, float *o)
{
    pdl_prologue();
    int wi = (blockIdx.x * (blockDim.x / 32) + (threadIdx.x >> 5)) * kExpandRows;
    int lane = threadIdx.x & 31, n8 = R / 8;
    uint4 wq[kExpandRows][2];
#pragma unroll
    for (int k = 0; k < kExpandRows; k++) {
        int v = wi + k, h = v / dv, i = v % dv;
        const uint4 *row = reinterpret_cast<const uint4 *>(static_cast<const uint16_t *>(kv_b.data) +
                                                           (size_t)(h * (dn + dv) + dn + i) * R);
#pragma unroll
        for (int u = 0; u < 2; u++)
            wq[k][u] = v < H * dv && lane + 32 * u < n8 ? __ldg(row + lane + 32 * u)
                                                        : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int k = 0; k < kExpandRows; k++) {
        int v = wi + k, h = v / dv, i = v % dv;
        if (v >= H * dv)
            break;
        float wv[2][8];
#pragma unroll
        for (int u = 0; u < 2; u++) {
            const uint32_t w4[4] = {wq[k][u].x, wq[k][u].y, wq[k][u].z, wq[k][u].w};
#pragma unroll
            for (int j = 0; j < 4; j++) {
                wv[u][2 * j] = __uint_as_float(w4[j] << 16);
                wv[u][2 * j + 1] = __uint_as_float(w4[j] & 0xffff0000u);
            }
        }
        for (int t = 0; t < T; t++) {
            const float *x = ot + ((size_t)t * H + h) * R;
            float acc = 0.0f;
#pragma unroll
            for (int u = 0; u < 2; u++)
                if (lane + 32 * u < n8) {
                    const float4 *x4 = reinterpret_cast<const float4 *>(x + 8 * (lane + 32 * u));
                    float4 a = x4[0], b = x4[1];
                    acc += wv[u][0] * a.x + wv[u][1] * a.y + wv[u][2] * a.z + wv[u][3] * a.w +
                           wv[u][4] * b.x + wv[u][5] * b.y + wv[u][6] * b.z + wv[u][7] * b.w;
                }
            acc = warp_sum(acc);
            if (lane == 0)
                o[((size_t)t * H + h) * dv + i] = acc;
        }
    }
}

__global__ void expand_kernel(eng_mat kv_b, const float *ot, int T, int H, int dn, int dv, int R,
                              float *o)
{
    pdl_prologue();
    int wi = blockIdx.x * (blockDim.x / 32) + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (wi >= H * dv)
        return;
    int h = wi / dv, i = wi % dv, row = h * (dn + dv) + dn + i;
    if (R <= 32 * kAttendMaxJ) { // the row read once, kept in registers over the tokens
        float wr[kAttendMaxJ];
#pragma unroll
        for (int j = 0; j < kAttendMaxJ; j++)
            wr[j] = lane + 32 * j < R ? mat_at(kv_b, row, lane + 32 * j) : 0.0f;
        for (int t = 0; t < T; t++) {
            const float *x = ot + ((size_t)t * H + h) * R;
            float acc = 0.0f;
#pragma unroll
            for (int j = 0; j < kAttendMaxJ; j++)
                if (lane + 32 * j < R)
                    acc += wr[j] * x[lane + 32 * j];
            acc = warp_sum(acc);
            if (lane == 0)
                o[((size_t)t * H + h) * dv + i] = acc;
        }
        return;
    }
    for (int t = 0; t < T; t++) {
        const float *x = ot + ((size_t)t * H + h) * R;
        float acc = 0.0f;
        for (int r = lane; r < R; r += 32)
            acc += mat_at(kv_b, row, r) * x[r];
        acc = warp_sum(acc);
        if (lane == 0)
            o[((size_t)t * H + h) * dv + i] = acc;
    }
}


// ---- prefill (T > 8) on the tensor cores: bf16 mma.sync m16n8k16 with f32 accumulation ----
// Each row's result depends on that row's data alone (fixed tile and k orders, no split that
// depends on the launch), so it is the same bits in any chunk of any size.

__device__ __forceinline__ void mma_bf16(float d[4], const uint32_t a[4], const uint32_t b[2])
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

__device__ __forceinline__ uint16_t bf16_rn(float x)
{
    return __bfloat16_as_ushort(__float2bfloat16_rn(x));
}

__device__ __forceinline__ uint32_t ld_pair(const uint16_t *p) // two bf16, p 4-byte aligned
{
    return *reinterpret_cast<const uint32_t *>(p);
}

__device__ __forceinline__ uint32_t pack_pair(uint16_t lo, uint16_t hi)
{
    return (uint32_t)lo | ((uint32_t)hi << 16);
}

constexpr int kHgM = 64, kHgN = 64, kHgK = 32, kHgS = kHgK + 8; // block tile, k step, smem stride

// One head per blockIdx.z: C[t][h][n] = sum_k A[t][h][k] B_h(n, k), A f32 split into three bf16
// parts (hi + mid + lo carries the f32 value), so against bf16 weights the products keep f32
// precision. kn 1: B_h(n, k) = W[(h hs + off + k) ldw + n] (the absorbed query, W_k's rows);
// kn 0: B_h(n, k) = W[(h hs + off + n) ldw + k] (the value expansion, W_v's rows).
// Four warps, each 16 rows x 64 columns of the block's 64 x 64 tile.
__global__ void __launch_bounds__(128) head_gemm_kernel(const uint16_t *W, int ldw, int hs, int off,
                                                        int kn, const float *A, int T, int H, int K,
                                                        int N, float *C)
{
    pdl_prologue();
    __shared__ __align__(16) uint16_t as[3][kHgM][kHgS];
    __shared__ __align__(16) uint16_t bs[kHgN][kHgS];
    int h = blockIdx.z, t0 = blockIdx.x * kHgM, n0 = blockIdx.y * kHgN;
    int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, c = lane & 3;
    const uint16_t *Wh = W + (size_t)(h * hs + off) * ldw;
    float acc[8][4];
#pragma unroll
    for (int nt = 0; nt < 8; nt++)
        acc[nt][0] = acc[nt][1] = acc[nt][2] = acc[nt][3] = 0.0f;
    for (int k0 = 0; k0 < K; k0 += kHgK) {
        { // A: 64 rows x 32; a thread 16 values of one row, split
            int r = tid >> 1, kk = (tid & 1) * 16, t = t0 + r;
            float v[16];
            if (t < T) {
                const float4 *p = reinterpret_cast<const float4 *>(A + ((size_t)t * H + h) * K + k0 + kk);
#pragma unroll
                for (int j = 0; j < 4; j++) {
                    float4 q = __ldg(p + j);
                    v[4 * j] = q.x, v[4 * j + 1] = q.y, v[4 * j + 2] = q.z, v[4 * j + 3] = q.w;
                }
            } else {
#pragma unroll
                for (int j = 0; j < 16; j++)
                    v[j] = 0.0f;
            }
#pragma unroll
            for (int j = 0; j < 16; j++) {
                uint16_t hi = bf16_rn(v[j]);
                float rest = v[j] - bf16_bits_to_f32(hi);
                uint16_t mid = bf16_rn(rest);
                as[0][r][kk + j] = hi;
                as[1][r][kk + j] = mid;
                as[2][r][kk + j] = bf16_rn(rest - bf16_bits_to_f32(mid));
            }
        }
        if (kn) { // W's rows are k, contiguous in n: stored transposed
            int kk = tid >> 2, nn = (tid & 3) * 16;
            const uint4 *p = reinterpret_cast<const uint4 *>(Wh + (size_t)(k0 + kk) * ldw + n0 + nn);
            uint4 q[2] = {__ldg(p), __ldg(p + 1)};
            const uint16_t *e = reinterpret_cast<const uint16_t *>(q);
#pragma unroll
            for (int j = 0; j < 16; j++)
                bs[nn + j][kk] = e[j];
        } else { // W's rows are n, contiguous in k
            int nn = tid >> 1, kk = (tid & 1) * 16;
            const uint4 *p = reinterpret_cast<const uint4 *>(Wh + (size_t)(n0 + nn) * ldw + k0 + kk);
            *reinterpret_cast<uint4 *>(&bs[nn][kk]) = __ldg(p);
            *reinterpret_cast<uint4 *>(&bs[nn][kk + 8]) = __ldg(p + 1);
        }
        __syncthreads();
#pragma unroll
        for (int ks = 0; ks < kHgK; ks += 16) {
            uint32_t b[8][2];
#pragma unroll
            for (int nt = 0; nt < 8; nt++) {
                b[nt][0] = ld_pair(&bs[nt * 8 + g][ks + 2 * c]);
                b[nt][1] = ld_pair(&bs[nt * 8 + g][ks + 2 * c + 8]);
            }
            int row = warp * 16 + g;
#pragma unroll
            for (int part = 0; part < 3; part++) {
                uint32_t a[4] = {ld_pair(&as[part][row][ks + 2 * c]), ld_pair(&as[part][row + 8][ks + 2 * c]),
                                 ld_pair(&as[part][row][ks + 2 * c + 8]),
                                 ld_pair(&as[part][row + 8][ks + 2 * c + 8])};
#pragma unroll
                for (int nt = 0; nt < 8; nt++)
                    mma_bf16(acc[nt], a, b[nt]);
            }
        }
        __syncthreads();
    }
    int ta = t0 + warp * 16 + g, tb = ta + 8;
#pragma unroll
    for (int nt = 0; nt < 8; nt++) {
        int n = n0 + nt * 8 + 2 * c;
        if (ta < T)
            *reinterpret_cast<float2 *>(C + ((size_t)ta * H + h) * N + n) = make_float2(acc[nt][0], acc[nt][1]);
        if (tb < T)
            *reinterpret_cast<float2 *>(C + ((size_t)tb * H + h) * N + n) = make_float2(acc[nt][2], acc[nt][3]);
    }
}

// The latent attention of one token (blockIdx.x) for up to 64 of its heads (blockIdx.y): all of
// them share the token's selection, so the heads are the rows of the products. Per tile of 32
// selected cache rows (bf16 in shared memory; e4m3 rows times their power-of-two scale are exact
// in bf16): S = Q K^T with Q = hi + lo bf16 parts of qt, split over `wg` warps along the latent
// width and summed in warp order; an online softmax (running maximum and sum per head); then
// O += P V with P = hi + lo bf16 parts, each warp its QW columns of O. Warps: gp head groups of
// 16 rows x wg column slices of width QW = R / wg.
constexpr int kAtKeys = 32, kAtSS = kAtKeys + 4, kAtPS = kAtKeys + 8;

template <int QW, int CACHE>
__global__ void __launch_bounds__(512, 1) attend_mma_kernel(eng_cache lat, const float *qt,
                                                            const int32_t *idx, const int *count,
                                                            int width, int H, int R, int gp,
                                                            int wg, float scale, float *ot)
{
    pdl_prologue();
    constexpr int kBytes = CACHE == ENG_CACHE_FP8 ? 1 : 2;
    constexpr int kCPT = 2 * kBytes; // 16-byte pieces of a tile a thread loads, at most
    extern __shared__ __align__(16) unsigned char smem_raw[];
    int rows = 16 * gp, RS = R + 8;
    uint16_t *qhi = reinterpret_cast<uint16_t *>(smem_raw), *qlo = qhi + (size_t)rows * RS;
    uint16_t *ks = qlo + (size_t)rows * RS;                                // [kAtKeys][RS]
    float *spart = reinterpret_cast<float *>(ks + (size_t)kAtKeys * RS);  // [wg][rows][kAtSS]
    uint16_t *phi = reinterpret_cast<uint16_t *>(spart + (size_t)wg * rows * kAtSS); // [rows][kAtPS]
    uint16_t *plo = phi + (size_t)rows * kAtPS;
    float *alpha_s = reinterpret_cast<float *>(plo + (size_t)rows * kAtPS), *l_s = alpha_s + rows;

    int t = blockIdx.x, h0 = blockIdx.y * 64, nh = H - h0 < 64 ? H - h0 : 64;
    int tid = threadIdx.x, nthr = blockDim.x, lane = tid & 31, warp = tid >> 5;
    int g = lane >> 2, c = lane & 3, gi = warp / wg, wc = warp % wg, col0 = wc * QW;
    int n = count[t];
    const int32_t *sel = idx + (size_t)t * width;

    for (int i = tid; i < rows * R; i += nthr) { // Q, split
        int r = i / R, d = i % R;
        float v = r < nh ? qt[((size_t)t * H + h0 + r) * R + d] : 0.0f;
        uint16_t hi = bf16_rn(v);
        qhi[(size_t)r * RS + d] = hi;
        qlo[(size_t)r * RS + d] = bf16_rn(v - bf16_bits_to_f32(hi));
    }

    int pieces_row = R * kBytes / 16, pieces = kAtKeys * pieces_row;
    uint4 raw[kCPT];
    float rsc[kCPT];
    auto issue = [&](int s0) {
#pragma unroll
        for (int u = 0; u < kCPT; u++) {
            int i = tid + u * nthr;
            raw[u] = make_uint4(0u, 0u, 0u, 0u);
            rsc[u] = 0.0f;
            if (i < pieces) {
                int key = i / pieces_row, pc = i % pieces_row, s = s0 + key;
                if (s < n) {
                    size_t row = (size_t)sel[s];
                    raw[u] = __ldg(reinterpret_cast<const uint4 *>(
                                       static_cast<const uint8_t *>(lat.rows) + row * R * kBytes) + pc);
                    if (CACHE == ENG_CACHE_FP8)
                        rsc[u] = lat.scale[row];
                }
            }
        }
    };
    auto commit = [&]() {
#pragma unroll
        for (int u = 0; u < kCPT; u++) {
            int i = tid + u * nthr;
            if (i >= pieces)
                continue;
            int key = i / pieces_row, pc = i % pieces_row;
            uint16_t *dst = ks + (size_t)key * RS + pc * (16 / kBytes);
            if (CACHE == ENG_CACHE_FP8) {
                const uint32_t w[4] = {raw[u].x, raw[u].y, raw[u].z, raw[u].w};
                uint32_t o[8];
#pragma unroll
                for (int j = 0; j < 8; j++) {
                    float a = fp8_to_f32((uint8_t)(w[j / 2] >> (16 * (j % 2)))) * rsc[u];
                    float b = fp8_to_f32((uint8_t)(w[j / 2] >> (16 * (j % 2) + 8))) * rsc[u];
                    o[j] = pack_pair(bf16_rn(a), bf16_rn(b));
                }
                reinterpret_cast<uint4 *>(dst)[0] = make_uint4(o[0], o[1], o[2], o[3]);
                reinterpret_cast<uint4 *>(dst)[1] = make_uint4(o[4], o[5], o[6], o[7]);
            } else {
                *reinterpret_cast<uint4 *>(dst) = raw[u];
            }
        }
    };

    float oacc[QW / 8][4];
#pragma unroll
    for (int nt = 0; nt < QW / 8; nt++)
        oacc[nt][0] = oacc[nt][1] = oacc[nt][2] = oacc[nt][3] = 0.0f;
    float m_run = -INFINITY, l_run = 0.0f; // the softmax threads' head (tid / 8)
    int sm_row = tid >> 3, sm_k = (tid & 7) * 4;
    bool sm_on = sm_row < rows;
    int ra = gi * 16 + g, rb = ra + 8;

    issue(0);
    for (int s0 = 0; s0 < n; s0 += kAtKeys) {
        __syncthreads(); // the last tile's P V is done with ks, phi, plo (and Q is stored)
        commit();
        if (s0 + kAtKeys < n)
            issue(s0 + kAtKeys); // in flight during this tile's products
        __syncthreads();
        { // S partial over this warp's latent columns
            float sacc[4][4];
#pragma unroll
            for (int nt = 0; nt < 4; nt++)
                sacc[nt][0] = sacc[nt][1] = sacc[nt][2] = sacc[nt][3] = 0.0f;
#pragma unroll 1
            for (int k = 0; k < QW; k += 16) {
                int d = col0 + k + 2 * c;
                uint32_t ah[4] = {ld_pair(qhi + (size_t)ra * RS + d), ld_pair(qhi + (size_t)rb * RS + d),
                                  ld_pair(qhi + (size_t)ra * RS + d + 8), ld_pair(qhi + (size_t)rb * RS + d + 8)};
                uint32_t al[4] = {ld_pair(qlo + (size_t)ra * RS + d), ld_pair(qlo + (size_t)rb * RS + d),
                                  ld_pair(qlo + (size_t)ra * RS + d + 8), ld_pair(qlo + (size_t)rb * RS + d + 8)};
#pragma unroll
                for (int nt = 0; nt < 4; nt++) {
                    const uint16_t *kp = ks + (size_t)(nt * 8 + g) * RS + d;
                    uint32_t b[2] = {ld_pair(kp), ld_pair(kp + 8)};
                    mma_bf16(sacc[nt], ah, b);
                    mma_bf16(sacc[nt], al, b);
                }
            }
            float *sp = spart + (size_t)wc * rows * kAtSS;
#pragma unroll
            for (int nt = 0; nt < 4; nt++) {
                int key = nt * 8 + 2 * c;
                *reinterpret_cast<float2 *>(sp + (size_t)ra * kAtSS + key) = make_float2(sacc[nt][0], sacc[nt][1]);
                *reinterpret_cast<float2 *>(sp + (size_t)rb * kAtSS + key) = make_float2(sacc[nt][2], sacc[nt][3]);
            }
        }
        __syncthreads();
        if (sm_on) { // eight threads a head, four keys each
            float v[4], mx = -INFINITY;
#pragma unroll
            for (int j = 0; j < 4; j++) {
                int key = sm_k + j;
                float a = 0.0f;
                for (int w = 0; w < wg; w++)
                    a += spart[((size_t)w * rows + sm_row) * kAtSS + key];
                v[j] = s0 + key < n ? a * scale : -INFINITY;
                mx = fmaxf(mx, v[j]);
            }
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 4));
            float m_new = fmaxf(m_run, mx), alpha = expf(m_run - m_new), psum = 0.0f;
#pragma unroll
            for (int j = 0; j < 4; j++) {
                float p = s0 + sm_k + j < n ? expf(v[j] - m_new) : 0.0f;
                psum += p;
                uint16_t hi = bf16_rn(p);
                phi[(size_t)sm_row * kAtPS + sm_k + j] = hi;
                plo[(size_t)sm_row * kAtPS + sm_k + j] = bf16_rn(p - bf16_bits_to_f32(hi));
            }
            psum += __shfl_xor_sync(0xffffffffu, psum, 1);
            psum += __shfl_xor_sync(0xffffffffu, psum, 2);
            psum += __shfl_xor_sync(0xffffffffu, psum, 4);
            l_run = l_run * alpha + psum;
            m_run = m_new;
            if ((tid & 7) == 0) {
                alpha_s[sm_row] = alpha;
                l_s[sm_row] = l_run;
            }
        } // (rows * 8 threads take part: whole warps, as 128 divides rows * 8 and blockDim.x)
        __syncthreads();
        { // O = alpha O + P V over this warp's columns
            float aa = alpha_s[ra], ab = alpha_s[rb];
#pragma unroll
            for (int nt = 0; nt < QW / 8; nt++) {
                oacc[nt][0] *= aa, oacc[nt][1] *= aa;
                oacc[nt][2] *= ab, oacc[nt][3] *= ab;
            }
#pragma unroll 1
            for (int k = 0; k < kAtKeys; k += 16) {
                int kc = k + 2 * c;
                uint32_t ph[4] = {ld_pair(phi + (size_t)ra * kAtPS + kc), ld_pair(phi + (size_t)rb * kAtPS + kc),
                                  ld_pair(phi + (size_t)ra * kAtPS + kc + 8),
                                  ld_pair(phi + (size_t)rb * kAtPS + kc + 8)};
                uint32_t pl[4] = {ld_pair(plo + (size_t)ra * kAtPS + kc), ld_pair(plo + (size_t)rb * kAtPS + kc),
                                  ld_pair(plo + (size_t)ra * kAtPS + kc + 8),
                                  ld_pair(plo + (size_t)rb * kAtPS + kc + 8)};
                const uint16_t *v0 = ks + (size_t)kc * RS, *v1 = v0 + RS, *v8 = v0 + 8 * RS, *v9 = v8 + RS;
#pragma unroll
                for (int nt = 0; nt < QW / 8; nt++) {
                    int col = col0 + nt * 8 + g;
                    uint32_t b[2] = {pack_pair(v0[col], v1[col]), pack_pair(v8[col], v9[col])};
                    mma_bf16(oacc[nt], ph, b);
                    mma_bf16(oacc[nt], pl, b);
                }
            }
        }
    }
    __syncthreads();
    float ia = 1.0f / l_s[ra], ib = 1.0f / l_s[rb];
#pragma unroll
    for (int nt = 0; nt < QW / 8; nt++) {
        int col = col0 + nt * 8 + 2 * c;
        if (ra < nh)
            *reinterpret_cast<float2 *>(ot + ((size_t)t * H + h0 + ra) * R + col) =
                make_float2(oacc[nt][0] * ia, oacc[nt][1] * ia);
        if (rb < nh)
            *reinterpret_cast<float2 *>(ot + ((size_t)t * H + h0 + rb) * R + col) =
                make_float2(oacc[nt][2] * ib, oacc[nt][3] * ib);
    }
}

template <int QW, int CACHE>
int launch_attend_mma(const eng_cache *lat, const float *qt, const int32_t *idx, const int *count,
                      int width, int T, int H, int R, int gp, int wg, float scale, float *ot,
                      size_t smem, cudaStream_t st)
{
    static int smem_set; // the opt-in above 48 KiB, once an instantiation
    if (!smem_set) {
        int rc = (int)cudaFuncSetAttribute(attend_mma_kernel<QW, CACHE>,
                                           cudaFuncAttributeMaxDynamicSharedMemorySize, 227 * 1024);
        if (rc)
            return rc;
        smem_set = 1;
    }
    dim3 grid(T, (H + 63) / 64);
    launch(attend_mma_kernel<QW, CACHE>, grid, 32 * gp * wg, smem, st, *lat, qt, idx, count, width,
           H, R, gp, wg, scale, ot);
    return (int)cudaGetLastError();
}

// The tile shape of attend_mma_kernel for H heads of width R: its head groups gp, column slices
// wg and shared bytes; 0 where the kernel does not take the shape (then the scalar kernels do).
int attend_mma_shape(const eng_cache *lat, int H, int R, const float *ot, int *gp_out,
                     int *wg_out, int *qw_out, size_t *smem_out)
{
    int gp = ((H < 64 ? H : 64) + 15) / 16;
    gp = gp == 3 ? 4 : gp;
    int wg = 16 / gp;
    while (wg > 4 && R / wg < 16)
        wg /= 2;
    int qw = R / wg, rows = 16 * gp;
    size_t smem = (size_t)2 * rows * (R + 8) * 2 + (size_t)kAtKeys * (R + 8) * 2 +
                  (size_t)wg * rows * kAtSS * 4 + (size_t)2 * rows * kAtPS * 2 + (size_t)2 * rows * 4;
    *gp_out = gp, *wg_out = wg, *qw_out = qw, *smem_out = smem;
    return R % 64 == 0 && qw * wg == R && (qw == 16 || qw == 32 || qw == 64 || qw == 128) &&
           lat->width == R && smem <= 227 * 1024 && (uintptr_t)ot % 8 == 0 &&
           (lat->dtype == ENG_CACHE_FP8 || lat->dtype == ENG_CACHE_BF16);
}

int attend_mma_run(const eng_cache *lat, const float *qt, const int32_t *idx, const int *count,
                   int width, int T, int H, int R, int gp, int wg, int qw, float scale, float *ot,
                   size_t smem, cudaStream_t st)
{
    if (lat->dtype == ENG_CACHE_FP8) {
        switch (qw) {
        case 16: return launch_attend_mma<16, ENG_CACHE_FP8>(lat, qt, idx, count, width, T, H, R, gp, wg, scale, ot, smem, st);
        case 32: return launch_attend_mma<32, ENG_CACHE_FP8>(lat, qt, idx, count, width, T, H, R, gp, wg, scale, ot, smem, st);
        case 64: return launch_attend_mma<64, ENG_CACHE_FP8>(lat, qt, idx, count, width, T, H, R, gp, wg, scale, ot, smem, st);
        default: return launch_attend_mma<128, ENG_CACHE_FP8>(lat, qt, idx, count, width, T, H, R, gp, wg, scale, ot, smem, st);
        }
    }
    switch (qw) {
    case 16: return launch_attend_mma<16, ENG_CACHE_BF16>(lat, qt, idx, count, width, T, H, R, gp, wg, scale, ot, smem, st);
    case 32: return launch_attend_mma<32, ENG_CACHE_BF16>(lat, qt, idx, count, width, T, H, R, gp, wg, scale, ot, smem, st);
    case 64: return launch_attend_mma<64, ENG_CACHE_BF16>(lat, qt, idx, count, width, T, H, R, gp, wg, scale, ot, smem, st);
    default: return launch_attend_mma<128, ENG_CACHE_BF16>(lat, qt, idx, count, width, T, H, R, gp, wg, scale, ot, smem, st);
    }
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

extern "C" int eng_mla_absorb(const eng_mat *kv_b, const float *q, int T, int H, int dn, int dv,
                              int R, float *qt, void *stream)
{
    if (T < 1 || H < 1 || dn < 1 || R < 1)
        return -1;
    size_t csmem = ((size_t)kAbsorbT * dn + (size_t)8 * kAbsorbT * kAbsorbCols) * sizeof(float);
    if (kv_b->dtype == ENG_BF16 && R % 8 == 0 && (uintptr_t)kv_b->data % 16 == 0 &&
        csmem <= 48 * 1024) {
        dim3 cgrid(H, blocks_for((size_t)R, kAbsorbCols), blocks_for((size_t)T, kAbsorbT));
        launch(absorb_cols_kernel, cgrid, 256, csmem, static_cast<cudaStream_t>(stream), *kv_b, q,
               T, H, dn, dv, R, qt);
        return (int)cudaGetLastError();
    }
    dim3 grid(H, blocks_for((size_t)T, kAbsorbT));
    size_t smem = ((size_t)kAbsorbT * dn + (size_t)kAbsorbSplit * kAbsorbT * R) * sizeof(float);
    if (smem > 200 * 1024)
        return -1;
    cudaStream_t st = static_cast<cudaStream_t>(stream);
    static int smem_set; // the opt-in above 48 KiB, once
    if (!smem_set) {
        cudaFuncSetAttribute(absorb_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024);
        smem_set = 1;
    }
    launch(absorb_kernel, grid, 32 * kAbsorbSplit, smem, st, *kv_b, q, T, H, dn, dv, R, qt);
    return (int)cudaGetLastError();
}

extern "C" int eng_mla_attend(const eng_cache *lat, const float *qt, const int32_t *idx,
                              const int *count, int width, int T, int H, int R, float scale,
                              float *ot, void *stream)
{
    if (R > 32 * kAttendMaxJ)
        return -1;
    size_t smem = (size_t)(R + width + 8 * R) * sizeof(float);
    if (R % 16 == 0) {
        // 16 warps a (token, head) where their partial sums fit the default shared memory: the
        // decode step has only T * H blocks, and each warp walks its share of the selection
        unsigned threads = (size_t)(R + width + 16 * R) * sizeof(float) <= 48 * 1024 ? 512 : 256;
        smem = (size_t)(R + width + (threads / 32) * R) * sizeof(float);
        launch(attend16_kernel, T * H, threads, smem, static_cast<cudaStream_t>(stream), *lat, qt,
               idx, count, width, H, R, scale, ot);
        return (int)cudaGetLastError();
    }
    launch(attend_kernel, T * H, 256, smem, static_cast<cudaStream_t>(stream), *lat, qt, idx, count,
           width, H, R, scale, ot);
    return (int)cudaGetLastError();
}

extern "C" int eng_mla_attend_decode(const eng_cache *lat, const float *qt, const int32_t *idx,
                                     const int *count, int width, int T, int H, int R, float scale,
                                     float *ot, float *part, void *stream)
{
    if (T < 1 || T > ENG_ATTEND_MAX_T || H < 1)
        return -1;
    // the split by heads alone: a row's sums do not depend on how many rows share the launch
    int pairs = T * H, splits = ENG_ATTEND_PAIRS / H;
    splits = splits > 8 ? 8 : splits;
    if (splits < 2 || R % 16 || R > 512 || !part)
        return eng_mla_attend(lat, qt, idx, count, width, T, H, R, scale, ot, stream);
    size_t smem = (size_t)((width + splits - 1) / splits + 8 * R) * sizeof(float);
    if (smem > 48 * 1024)
        return eng_mla_attend(lat, qt, idx, count, width, T, H, R, scale, ot, stream);
    cudaStream_t st = static_cast<cudaStream_t>(stream);
    if (lat->dtype == ENG_CACHE_FP8 || lat->dtype == ENG_CACHE_BF16)
        launch(attend_split8_kernel, dim3(pairs, splits), 256, smem, st, *lat, qt, idx, count,
               width, H, R, scale, splits, part);
    else
        launch(attend_split_kernel, dim3(pairs, splits), 256, smem, st, *lat, qt, idx, count, width,
               H, R, scale, splits, part);
    launch(attend_combine_kernel, pairs, 128, 0, st, part, splits, R, ot);
    return (int)cudaGetLastError();
}

extern "C" int eng_mla_expand(const eng_mat *kv_b, const float *ot, int T, int H, int dn, int dv,
                              int R, float *o, void *stream)
{
    if (kv_b->dtype == ENG_BF16 && R % 8 == 0 && R <= 512 && (uintptr_t)kv_b->data % 16 == 0 &&
        (uintptr_t)ot % 16 == 0) {
        launch(expand_vec_kernel, blocks_for((size_t)H * dv, 8 * kExpandRows), 256, 0,
               static_cast<cudaStream_t>(stream), *kv_b, ot, T, H, dn, dv, R, o);
        return (int)cudaGetLastError();
    }
    launch(expand_kernel, blocks_for((size_t)H * dv, 8), 256, 0, static_cast<cudaStream_t>(stream),
           *kv_b, ot, T, H, dn, dv, R, o);
    return (int)cudaGetLastError();
}

extern "C" int eng_mla_absorb_prefill(const eng_mat *kv_b, const float *q, int T, int H, int dn,
                                      int dv, int R, float *qt, void *stream)
{
    if (T < 1 || H < 1)
        return -1;
    if (kv_b->dtype != ENG_BF16 || kv_b->cols != R || R % kHgN || dn % kHgK ||
        (uintptr_t)kv_b->data % 16 || (uintptr_t)q % 16 || (uintptr_t)qt % 8 || H > 65535)
        return eng_mla_absorb(kv_b, q, T, H, dn, dv, R, qt, stream); // the same sums, scalar
    dim3 grid(blocks_for((size_t)T, kHgM), R / kHgN, H);
    launch(head_gemm_kernel, grid, 128, 0, static_cast<cudaStream_t>(stream),
           static_cast<const uint16_t *>(kv_b->data), R, dn + dv, 0, 1, q, T, H, dn, R, qt);
    return (int)cudaGetLastError();
}

extern "C" int eng_mla_expand_prefill(const eng_mat *kv_b, const float *ot, int T, int H, int dn,
                                      int dv, int R, float *o, void *stream)
{
    if (T < 1 || H < 1)
        return -1;
    if (kv_b->dtype != ENG_BF16 || kv_b->cols != R || dv % kHgN || R % kHgK ||
        (uintptr_t)kv_b->data % 16 || (uintptr_t)ot % 16 || (uintptr_t)o % 8 || H > 65535)
        return eng_mla_expand(kv_b, ot, T, H, dn, dv, R, o, stream); // the same sums, scalar
    dim3 grid(blocks_for((size_t)T, kHgM), dv / kHgN, H);
    launch(head_gemm_kernel, grid, 128, 0, static_cast<cudaStream_t>(stream),
           static_cast<const uint16_t *>(kv_b->data), R, dn + dv, dn, 0, ot, T, H, R, dv, o);
    return (int)cudaGetLastError();
}

extern "C" int eng_mla_attend_prefill(const eng_cache *lat, const float *qt, const int32_t *idx,
                                      const int *count, int width, int T, int H, int R,
                                      float scale, float *ot, void *stream)
{
    if (T < 1 || H < 1)
        return -1;
    int gp, wg, qw;
    size_t smem;
    if (attend_mma_shape(lat, H, R, ot, &gp, &wg, &qw, &smem))
        return attend_mma_run(lat, qt, idx, count, width, T, H, R, gp, wg, qw, scale, ot, smem,
                              static_cast<cudaStream_t>(stream));
    // the f32 cache (the exact one) and shapes outside the tiles: the scalar kernels, same sums
    return eng_mla_attend(lat, qt, idx, count, width, T, H, R, scale, ot, stream);
}
