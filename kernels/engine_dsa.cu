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

__global__ void attend_combine_kernel(const float *part, int splits, int R, float *ot)
{
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

__global__ void expand_kernel(eng_mat kv_b, const float *ot, int T, int H, int dn, int dv, int R,
                              float *o)
{
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

} // namespace

extern "C" int eng_cache_write(const eng_cache *c, const int *pos0, const float *src, int T,
                               void *stream)
{
    if (!c || T < 1 || c->width < 1)
        return -1;
    cache_write_kernel<<<T, 128, (size_t)c->width * sizeof(float), static_cast<cudaStream_t>(stream)>>>(
        *c, pos0, src);
    return (int)cudaGetLastError();
}

extern "C" int eng_pool_keys(const eng_cache *keys, const eng_cache *gates, const eng_cache *pool,
                             const float *ape, const int *pos0, int T, int kpool, void *stream)
{
    if (kpool < 1 || T < 1)
        return -1;
    pool_key_kernel<<<T / kpool + 1, 128, (size_t)keys->width * sizeof(float),
                      static_cast<cudaStream_t>(stream)>>>(*keys, *gates, *pool, ape, pos0, T, kpool);
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
        score_kernel<<<grid, 256, 0, st>>>(*pool, iq, hw, pos0, t_off, IH, ID, kpool, budget, max_pools, scores);
    }
    select_kernel<<<T, kSelectThreads, 0, st>>>(scores, pos0, t_off, kpool, budget, max_pools, width, idx,
                                                count);
    return (int)cudaGetLastError();
}

extern "C" int eng_mla_absorb(const eng_mat *kv_b, const float *q, int T, int H, int dn, int dv,
                              int R, float *qt, void *stream)
{
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
    absorb_kernel<<<grid, 32 * kAbsorbSplit, smem, st>>>(*kv_b, q, T, H, dn, dv, R, qt);
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
        attend16_kernel<<<T * H, threads, smem, static_cast<cudaStream_t>(stream)>>>(
            *lat, qt, idx, count, width, H, R, scale, ot);
        return (int)cudaGetLastError();
    }
    attend_kernel<<<T * H, 256, smem, static_cast<cudaStream_t>(stream)>>>(*lat, qt, idx, count, width,
                                                                          H, R, scale, ot);
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
    attend_split_kernel<<<dim3(pairs, splits), 256, smem, st>>>(*lat, qt, idx, count, width, H, R,
                                                                scale, splits, part);
    attend_combine_kernel<<<pairs, 128, 0, st>>>(part, splits, R, ot);
    return (int)cudaGetLastError();
}

extern "C" int eng_mla_expand(const eng_mat *kv_b, const float *ot, int T, int H, int dn, int dv,
                              int R, float *o, void *stream)
{
    expand_kernel<<<blocks_for((size_t)H * dv, 8), 256, 0, static_cast<cudaStream_t>(stream)>>>(
        *kv_b, ot, T, H, dn, dv, R, o);
    return (int)cudaGetLastError();
}
