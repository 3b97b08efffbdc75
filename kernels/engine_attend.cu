// engine_attend.cu: the decode step's latent attention on the GPU (architecture.md 2.5): MLA
// over the selected latent rows in absorbed form (the absorbed query, the attention, the value
// expansion) with scalar kernels; the prefill's tensor-core kernels are in engine_attend_prefill.cu.
#include "engine_common.cuh"
#include "kernel_limits.h"

namespace {

constexpr int kAbsorbT = KERN_ABSORB_TOKENS;
constexpr int kAbsorbSplit = KERN_ABSORB_SLICES; // dn slices, each a warp of the block

// The 8 bf16 values of a 16-byte load as floats (a bf16's bits are a float's upper half).
__device__ __forceinline__ void bf16x8(uint4 q, float *v)
{
    const uint32_t u[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
    for (int j = 0; j < 4; j++) {
        v[2 * j] = __uint_as_float(u[j] << 16);
        v[2 * j + 1] = __uint_as_float(u[j] & 0xffff0000u);
    }
}

// The absorbed query's step for one kv_b row i of 8 bf16 columns (w): acc[j][k] += q_k[i] * w[j]
// for the block's kAbsorbT tokens (qs: their q rows of dn, in shared memory).
__device__ __forceinline__ void absorb_step8(uint4 w, const float *qs, int dn, int i,
                                             float (&acc)[8][kAbsorbT])
{
    float wv[8];
    bf16x8(w, wv);
#pragma unroll
    for (int k = 0; k < kAbsorbT; k++) {
        float qk = qs[k * dn + i];
#pragma unroll
        for (int j = 0; j < 8; j++)
            acc[j][k] += qk * wv[j];
    }
}

// Block per (head, 8 tokens, cols latent columns from blockIdx.z * cols); the block's 8 warps
// take interleaved slices of the dn rows, each lane two latent columns a pass (eight for bf16),
// and meet in shared memory in slice order. A column's sums do not depend on cols, so the
// launch picks cols for its shared memory (kern_absorb_cols) without changing a bit.
__global__ void __launch_bounds__(256) absorb_kernel(eng_mat kv_b, const float *q, int T, int H,
                                                     int dn, int dv, int R, int cols, float *qt)
{
    pdl_prologue();
    extern __shared__ float sm[]; // qs [kAbsorbT][dn], part [kAbsorbSplit][kAbsorbT][cols]
    float *qs = sm, *part = sm + kAbsorbT * dn;
    int h = blockIdx.x, t0 = blockIdx.y * kAbsorbT;
    int c0 = blockIdx.z * cols, cend = c0 + cols < R ? c0 + cols : R;
    int nt = T - t0 < kAbsorbT ? T - t0 : kAbsorbT;
    int lane = threadIdx.x & 31, slice = threadIdx.x >> 5;
    for (int i = threadIdx.x; i < kAbsorbT * dn; i += blockDim.x)
        qs[i] = i / dn < nt ? q[((size_t)(t0 + i / dn) * H + h) * dn + i % dn] : 0.0f;
    __syncthreads();
    bool vec = kv_b.dtype == ENG_BF16 && R % 8 == 0 && (uintptr_t)kv_b.data % 16 == 0;
    for (int r0 = c0; vec && r0 < cend; r0 += 256) { // BF16: 8 columns a lane, one 16-byte load
        int c = r0 + lane * 8;
        if (c >= cend)
            continue;
        float acc[8][kAbsorbT] = {};
#pragma unroll 4
        for (int i = slice; i < dn; i += kAbsorbSplit) {
            const uint16_t *wr = static_cast<const uint16_t *>(kv_b.data) + (size_t)(h * (dn + dv) + i) * R + c;
            absorb_step8(__ldg(reinterpret_cast<const uint4 *>(wr)), qs, dn, i, acc);
        }
#pragma unroll
        for (int k = 0; k < kAbsorbT; k++)
#pragma unroll
            for (int j = 0; j < 8; j++)
                part[(slice * kAbsorbT + k) * cols + c - c0 + j] = acc[j][k];
    }
    for (int r0 = c0; !vec && r0 < cend; r0 += 64) {
        int ra = r0 + lane, rb = r0 + 32 + lane;
        float acc[2][kAbsorbT] = {};
        for (int i = slice; i < dn; i += kAbsorbSplit) {
            int row = h * (dn + dv) + i;
            float wa = ra < cend ? mat_at(kv_b, row, ra) : 0.0f;
            float wb = rb < cend ? mat_at(kv_b, row, rb) : 0.0f;
#pragma unroll
            for (int k = 0; k < kAbsorbT; k++) {
                acc[0][k] += qs[k * dn + i] * wa;
                acc[1][k] += qs[k * dn + i] * wb;
            }
        }
#pragma unroll
        for (int k = 0; k < kAbsorbT; k++) {
            if (ra < cend)
                part[(slice * kAbsorbT + k) * cols + ra - c0] = acc[0][k];
            if (rb < cend)
                part[(slice * kAbsorbT + k) * cols + rb - c0] = acc[1][k];
        }
    }
    __syncthreads();
    int w = cend - c0;
    for (int i = threadIdx.x; i < nt * w; i += blockDim.x) {
        int k = i / w, r = i % w;
        float a = 0.0f;
        for (int sl = 0; sl < kAbsorbSplit; sl++)
            a += part[(sl * kAbsorbT + k) * cols + r];
        qt[((size_t)(t0 + k) * H + h) * R + c0 + r] = a;
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
            absorb_step8(wq[p], qs, dn, i, acc);
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
        for (int h = 0; h < 2; h++)
            bf16x8(__ldg(p + h), v + h * 8);
    } else {
        const float4 *p = reinterpret_cast<const float4 *>(static_cast<const float *>(c.rows) + i);
#pragma unroll
        for (int h = 0; h < 4; h++) {
            float4 q = __ldg(p + h);
            v[4 * h] = q.x, v[4 * h + 1] = q.y, v[4 * h + 2] = q.z, v[4 * h + 3] = q.w;
        }
    }
}

// The softmax's numerators in place: p[0 .. n) (shared, written before a barrier) becomes
// exp(p - max), every thread of the block calling; returns their sum, *mx the maximum. The sum's
// barriers also publish p.
__device__ __forceinline__ float softmax_numerators(float *p, int n, float *red, float *mx)
{
    float m = -INFINITY;
    for (int i = threadIdx.x; i < n; i += blockDim.x)
        m = fmaxf(m, p[i]);
    m = block_max(m, red);
    float sum = 0.0f;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        p[i] = expf(p[i] - m);
        sum += p[i];
    }
    *mx = m;
    return block_sum(sum, red);
}

// The warps' partial sums part[warp][R] (shared, written before this call's barrier) added in
// warp order: store(r, sum) for each r, every thread of the block calling.
template <typename Store>
__device__ __forceinline__ void sum_warps(const float *part, int R, int nw, Store store)
{
    __syncthreads();
    for (int r = threadIdx.x; r < R; r += blockDim.x) {
        float a = 0.0f;
        for (int k = 0; k < nw; k++)
            a += part[k * R + r];
        store(r, a);
    }
}

// The (token, head) pair's query row (R floats) into shared memory, every thread calling, then a
// barrier.
__device__ __forceinline__ void stage_row(const float *row, int R, float *dst)
{
    for (int r = threadIdx.x; r < R; r += blockDim.x)
        dst[r] = row[r];
    __syncthreads();
}

// A lane's 16 columns c0 .. c0 + 15 of q (zero past R: mine false).
__device__ __forceinline__ void load_q16(const float *q, int c0, bool mine, float (&qv)[16])
{
#pragma unroll
    for (int j = 0; j < 16; j++)
        qv[j] = mine ? q[c0 + j] : 0.0f;
}

// The scores of the selected rows first .. end - 1 (sel's), four rows a warp a pass so that
// their loads overlap: p[s - first] = scale * (q . row s), each lane 16 columns, the warp's sum.
__device__ __forceinline__ void scores_x4(const eng_cache &lat, const int32_t *sel,
                                          const float (&qv)[16], bool mine, int c0, int first,
                                          int end, float scale, float *p)
{
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    for (int b0 = first + warp * 4; b0 < end; b0 += nw * 4) {
        float dot[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
        for (int u = 0; u < 4; u++) {
            int s = b0 + u;
            if (mine && s < end) {
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
            if (lane == 0 && b0 + u < end)
                p[b0 + u - first] = d * scale;
        }
    }
}

// A lane's 16 column sums into the warp's row of part (part[warp][R], for sum_warps).
__device__ __forceinline__ void store_acc16(const float (&acc)[16], bool mine, int warp, int R,
                                            int c0, float *part)
{
    if (mine)
#pragma unroll
        for (int j = 0; j < 16; j++)
            part[warp * R + c0 + j] = acc[j];
}

// The warp's share of the weighted latent sum over the rows first .. end - 1 (scores_x4's rows,
// weights p[s - first]), a lane's 16 columns, written to part[warp][R] for sum_warps.
__device__ __forceinline__ void weighted_x4(const eng_cache &lat, const int32_t *sel,
                                            const float *p, bool mine, int c0, int first, int end,
                                            int R, float *part)
{
    int warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    float acc[16];
#pragma unroll
    for (int j = 0; j < 16; j++)
        acc[j] = 0.0f;
    if (mine)
        for (int b0 = first + warp * 4; b0 < end; b0 += nw * 4) {
#pragma unroll
            for (int u = 0; u < 4; u++) {
                int s = b0 + u;
                if (s < end) {
                    float v[16], ps = p[s - first];
                    load16(lat, (size_t)sel[s], c0, v);
#pragma unroll
                    for (int j = 0; j < 16; j++)
                        acc[j] += ps * v[j];
                }
            }
        }
    store_acc16(acc, mine, warp, R, c0, part);
}

// A split block's outputs: the warps' sums (sums[warp][R]) added in warp order into
// out[0 .. R), then the block's score maximum and sum of exponentials (out[R], out[R + 1]).
__device__ __forceinline__ void split_finish(const float *sums, int R, int nw, float mx, float sum,
                                             float *out)
{
    sum_warps(sums, R, nw, [&](int r, float a) { out[r] = a; });
    if (threadIdx.x == 0)
        out[R] = mx, out[R + 1] = sum;
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
    int lane = threadIdx.x & 31, nw = blockDim.x >> 5;
    stage_row(qt + ((size_t)t * H + h) * R, R, qs);
    int n = count[t], c0 = lane * 16;
    bool mine = c0 < R;
    const int32_t *sel = idx + (size_t)t * width;
    float qv[16];
    load_q16(qs, c0, mine, qv);
    scores_x4(lat, sel, qv, mine, c0, 0, n, scale, p);
    __syncthreads();
    float mx;
    float inv = 1.0f / softmax_numerators(p, n, red, &mx);
    weighted_x4(lat, sel, p, mine, c0, 0, n, R, part);
    sum_warps(part, R, nw, [&](int r, float a) { ot[((size_t)t * H + h) * R + r] = a * inv; });
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
    int lane = threadIdx.x & 31, nw = blockDim.x >> 5;
    int n = count[t], chunk = (n + splits - 1) / splits;
    int s0 = sp * chunk, s1 = s0 + chunk < n ? s0 + chunk : n;
    float *p = sm, *sums = sm + (width + splits - 1) / splits;
    const float *qrow = qt + (size_t)th * R;
    int c0 = lane * 16;
    bool mine = c0 < R;
    const int32_t *sel = idx + (size_t)t * width;
    float qv[16];
    load_q16(qrow, c0, mine, qv);
    scores_x4(lat, sel, qv, mine, c0, s0, s1, scale, p);
    __syncthreads();
    float mx, sum = softmax_numerators(p, s1 - s0, red, &mx);
    weighted_x4(lat, sel, p, mine, c0, s0, s1, R, sums);
    split_finish(sums, R, nw, mx, sum, part + ((size_t)th * splits + sp) * (R + 2));
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
        bf16x8(r.a, v);
        bf16x8(r.b, v + 8);
    }
}

// attend_split_kernel for bf16 and e4m3 caches: a warp takes 8 selected rows a pass (lanes 0-7
// load their indices, shuffled to all), all 8 rows' loads in flight before any product: two
// round trips to memory per 8 rows instead of per 4. Same outputs and layout as
// attend_split_kernel; each warp's rows are b0 .. b0 + 7 for b0 = s0 + 8 warp + 8 nw k.
constexpr int kSplitRows = 8;

// The loads of the selected rows b0 .. b0 + 7 (those below end) of a lane's 16 columns, all
// issued before any is used: lanes 0-7 read the rows' indices, shuffled to the warp.
__device__ __forceinline__ void fetch_rows8(const eng_cache &lat, const int32_t *sel, int b0,
                                            int end, bool mine, int c0, raw16 (&r)[kSplitRows])
{
    int lane = threadIdx.x & 31;
    int my = lane < kSplitRows && b0 + lane < end ? sel[b0 + lane] : 0;
#pragma unroll
    for (int u = 0; u < kSplitRows; u++) {
        int row = __shfl_sync(0xffffffffu, my, u);
        if (mine && b0 + u < end)
            r[u] = load_raw16(lat, (size_t)row, c0);
    }
}

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
    load_q16(qrow, c0, mine, qv);
    for (int b0 = s0 + warp * kSplitRows; b0 < s1; b0 += nw * kSplitRows) {
        raw16 r[kSplitRows];
        fetch_rows8(lat, sel, b0, s1, mine, c0, r);
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
    float mx, sum = softmax_numerators(p, s1 - s0, red, &mx);
    float acc[16];
#pragma unroll
    for (int j = 0; j < 16; j++)
        acc[j] = 0.0f;
    for (int b0 = s0 + warp * kSplitRows; b0 < s1; b0 += nw * kSplitRows) {
        raw16 r[kSplitRows];
        fetch_rows8(lat, sel, b0, s1, mine, c0, r);
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
    store_acc16(acc, mine, warp, R, c0, sums);
    split_finish(sums, R, nw, mx, sum, part + ((size_t)th * splits + sp) * (R + 2));
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
    stage_row(qt + ((size_t)t * H + h) * R, R, qs);
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
    float mx;
    float inv = 1.0f / softmax_numerators(p, n, red, &mx);
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
    float *out = ot + ((size_t)t * H + h) * R;
    sum_warps(part, R, nw, [&](int r, float a) { out[r] = a * inv; });
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
        for (int u = 0; u < 2; u++)
            bf16x8(wq[k][u], wv[u]);
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

} // namespace

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
    // Within the default 48 KiB, so no opt-in: the same blocks on every device (the whole of R
    // asked 136 KiB at GLM's shapes, past an sm_121 block's 99 KiB).
    int cols = kern_absorb_cols(dn, R, KERN_SMEM_DEFAULT);
    if (!cols) { // dn past 1,500 or so: no shape of GLM's
        kern_log(0, "absorb_kernel: %d query rows need %zu bytes of shared memory at 64 latent "
                    "columns, past the %zu a block has without an opt-in",
                 dn, kern_absorb_smem(dn, 64), KERN_SMEM_DEFAULT);
        return -1;
    }
    dim3 grid(H, blocks_for((size_t)T, kAbsorbT), blocks_for((size_t)R, cols));
    launch(absorb_kernel, grid, 32 * kAbsorbSplit, kern_absorb_smem(dn, cols),
           static_cast<cudaStream_t>(stream), *kv_b, q, T, H, dn, dv, R, cols, qt);
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
