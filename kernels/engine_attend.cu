// engine_attend.cu: the decode step's latent attention on the GPU (architecture.md 2.5): MLA
// over the selected latent rows in absorbed form (the absorbed query, the attention, the value
// expansion): scalar kernels, and the attention's MQA kernel on the tensor cores (a token's heads
// at once); the prefill's tensor-core kernels are in engine_attend_prefill.cu.
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

// ---- the decode step's latent attention, a token's heads at once (the MQA kernel) ----
// A token's H heads share its selected latent rows, so a block takes 16 heads (the M of every
// product) and one slice of the selection (at most kMqKeys rows) and reads each row once for all
// 16:
//   S = Q K^T on the tensor cores (bf16 mma m16n8k16, f32 sums), Q = hi + mid + lo bf16 parts of
//     qt kept in registers, K the rows as loaded (e4m3 widened exactly into bf16, its power-of-two
//     row scale applied to the score); warp w takes latent columns 64w .. 64w + 63 of every row,
//     and the eight warps' partial scores are added in warp order;
//   the slice's softmax numerators (its own maximum), their sum;
//   O = P V with P = hi + mid + lo bf16 parts of the weights times the row scales, warp w again
//     its 64 columns: the rows come from device memory (L1 the second time) straight into the
//     fragments' registers, with no copy in shared memory.
// Within a warp's 64 columns the products' k order is a permutation that lets each thread load 16
// contiguous bytes of a row (scores: thread (g, c) feeds k 2c, 2c + 1 | 2c + 8, 2c + 9 of k-step
// j from columns 16c + 4j + 0, 1 | 2, 3; weighted sum: n-tile j's column g is latent column
// 8g + j); q's fragments follow the same permutation. attend_mqa_combine_kernel then rescales
// the slices' sums to the largest maximum and adds them in slice order. The slices depend on the
// width (their number) and the token's count alone (ceil(count / slices) rounded up to 16 rows),
// so a row's bits do not depend on T.
constexpr int kMqR = 512;                    // the latent width the kernel takes
constexpr int kMqHeads = 16;                 // heads a block
constexpr int kMqThreads = 256;              // eight warps
constexpr int kMqCols = kMqR / 8;            // latent columns a warp
constexpr int kMqParts = 3;                  // bf16 parts of q and of the weights
constexpr int kMqKeys = ENG_ATTEND_MQA_KEYS; // selected rows a slice, at most

// The MQA kernel's shared memory for slices of kMqKeys rows: byte offsets and the total.
struct mq_layout {
    static constexpr int stride = kMqKeys + 8;                        // a score / weight row
    static constexpr int spart = 0;                                   // [8][16][stride] f32
    static constexpr int p = spart + 8 * kMqHeads * stride * 4;       // [3][16][stride] bf16
    static constexpr int rows = p + kMqParts * kMqHeads * stride * 2; // [kMqKeys] int: cache rows
    static constexpr int ks = rows + kMqKeys * 4;                     // [kMqKeys] f32: row scales
    static constexpr int bytes = ks + kMqKeys * 4;
};

__device__ __forceinline__ void split3_bits(float v, uint16_t &h, uint16_t &m, uint16_t &l)
{
    h = bf16_rn(v);
    float rest = v - bf16_bits_to_f32(h);
    m = bf16_rn(rest);
    l = bf16_rn(rest - bf16_bits_to_f32(m));
}

// The A fragments of q for a warp's four k-steps: qa[j][pt] = rows g, g + 8 at the permuted
// columns of k-step j (q[r][4j .. 4j + 3] of the thread's 16 columns, r = row g or g + 8).
__device__ __forceinline__ void q_fragments(const float4 (&q)[2][4], uint32_t (&qa)[4][kMqParts][4])
{
#pragma unroll
    for (int j = 0; j < 4; j++) {
        uint16_t p[2][4][kMqParts]; // [row][column of the four][bf16 part]
#pragma unroll
        for (int r = 0; r < 2; r++) {
            const float e[4] = {q[r][j].x, q[r][j].y, q[r][j].z, q[r][j].w};
#pragma unroll
            for (int k = 0; k < 4; k++)
                split3_bits(e[k], p[r][k][0], p[r][k][1], p[r][k][2]);
        }
#pragma unroll
        for (int pt = 0; pt < kMqParts; pt++) {
            qa[j][pt][0] = pack_pair(p[0][0][pt], p[0][1][pt]);
            qa[j][pt][1] = pack_pair(p[1][0][pt], p[1][1][pt]);
            qa[j][pt][2] = pack_pair(p[0][2][pt], p[0][3][pt]);
            qa[j][pt][3] = pack_pair(p[1][2][pt], p[1][3][pt]);
        }
    }
}

// Where column col of a latent cache row starts (e4m3: a byte a value, bf16: two).
template <bool FP8>
__device__ __forceinline__ const unsigned char *row_at(const eng_cache &lat, int row, int col)
{
    return static_cast<const unsigned char *>(lat.rows) +
           ((size_t)(uint32_t)row * kMqR + col) * (FP8 ? 1 : 2);
}

// Bytes of a cache row from column col: 16 (e4m3) or 32 (bf16) for the scores' loads.
template <bool FP8>
struct mq_row16 {
    uint4 w[FP8 ? 1 : 2];
};

template <bool FP8>
__device__ __forceinline__ mq_row16<FP8> load_row16(const eng_cache &lat, int row, int col)
{
    mq_row16<FP8> r;
    const unsigned char *p = row_at<FP8>(lat, row, col);
    r.w[0] = __ldg(reinterpret_cast<const uint4 *>(p));
    if constexpr (!FP8)
        r.w[1] = __ldg(reinterpret_cast<const uint4 *>(p) + 1);
    return r;
}

template <bool FP8>
__device__ __forceinline__ void zero_row16(mq_row16<FP8> &r)
{
#pragma unroll
    for (int i = 0; i < (FP8 ? 1 : 2); i++)
        r.w[i] = make_uint4(0u, 0u, 0u, 0u);
}

// The B fragment of k-step j (0-3) from a thread's 16 columns of a row.
template <bool FP8>
__device__ __forceinline__ void score_b(const mq_row16<FP8> &r, int j, uint32_t (&b)[2])
{
    if constexpr (FP8) {
        uint32_t w = j == 0 ? r.w[0].x : j == 1 ? r.w[0].y : j == 2 ? r.w[0].z : r.w[0].w;
        b[0] = e4m3x2_to_bf16x2(w);
        b[1] = e4m3x2_to_bf16x2(w >> 16);
    } else {
        const uint4 &u = r.w[j >> 1];
        b[0] = (j & 1) ? u.z : u.x;
        b[1] = (j & 1) ? u.w : u.y;
    }
}

// Eight columns of a row (8 bytes e4m3, 16 bf16) for the weighted sum's loads.
template <bool FP8>
struct mq_row8 {
    uint32_t w[FP8 ? 2 : 4];
};

template <bool FP8>
__device__ __forceinline__ mq_row8<FP8> load_row8(const eng_cache &lat, int row, int col)
{
    mq_row8<FP8> r;
    const unsigned char *p = row_at<FP8>(lat, row, col);
    if constexpr (FP8) {
        uint2 v = __ldg(reinterpret_cast<const uint2 *>(p));
        r.w[0] = v.x, r.w[1] = v.y;
    } else {
        uint4 v = __ldg(reinterpret_cast<const uint4 *>(p));
        r.w[0] = v.x, r.w[1] = v.y, r.w[2] = v.z, r.w[3] = v.w;
    }
    return r;
}

template <bool FP8>
__device__ __forceinline__ void zero_row8(mq_row8<FP8> &r)
{
#pragma unroll
    for (int i = 0; i < (FP8 ? 2 : 4); i++)
        r.w[i] = 0u;
}

// Column j (0-7) of rows a and b as one bf16 pair, a's in the low half.
template <bool FP8>
__device__ __forceinline__ uint32_t column_pair(const mq_row8<FP8> &a, const mq_row8<FP8> &b, int j)
{
    if constexpr (FP8) {
        uint32_t two = __byte_perm(a.w[j >> 2], b.w[j >> 2], (j & 2) ? 0x7362 : 0x5140);
        return e4m3x2_to_bf16x2((j & 1) ? two >> 16 : two);
    }
    return __byte_perm(a.w[j >> 1], b.w[j >> 1], (j & 1) ? 0x7632 : 0x5410);
}

template <int CACHE>
__global__ void __launch_bounds__(kMqThreads, 1)
    attend_mqa_kernel(eng_cache lat, const float *qt, const int32_t *idx, const int *count,
                      int width, int H, float scale, float *part)
{
    pdl_prologue();
    constexpr bool kFp8 = CACHE == ENG_CACHE_FP8;
    using L = mq_layout;
    // n-tiles, k-steps, keys a thread
    constexpr int NT = kMqKeys / 8, KS = kMqKeys / 16, KPT = kMqKeys / 16;
    constexpr int NB = kFp8 ? NT : (NT < 8 ? NT : 8);             // n-tiles loaded at once
    constexpr int KB = kFp8 ? KS : (KS < 4 ? KS : 4);             // k-steps loaded at once
    extern __shared__ __align__(16) unsigned char smem[];
    float *spart = reinterpret_cast<float *>(smem + L::spart);
    uint16_t *p_s = reinterpret_cast<uint16_t *>(smem + L::p);
    int *rows_s = reinterpret_cast<int *>(smem + L::rows);
    float *ks_s = reinterpret_cast<float *>(smem + L::ks);

    const int S = (int)gridDim.x, sp = (int)blockIdx.x, h0 = (int)blockIdx.y * kMqHeads;
    const int t = (int)blockIdx.z;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, c = lane & 3;
    const int col0 = warp * kMqCols;
    const size_t th = (size_t)t * H + h0; // the block's first (token, head)
    float *o_part = part, *ml_part = part + (size_t)ENG_ATTEND_MAX_T * H * S * kMqR;

    // q's rows g, g + 8 at the thread's 16 columns: loaded first, they wait on nothing
    float4 qv[2][4];
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const float *row = qt + (th + g + 8 * r) * kMqR + col0 + 16 * c;
        const float4 *q = reinterpret_cast<const float4 *>(row);
#pragma unroll
        for (int u = 0; u < 4; u++)
            qv[r][u] = __ldg(q + u);
    }
    int n = count[t];
    n = n < width ? n : width;
    int per = (n + S - 1) / S, chunk = (per + 15) & ~15, s0 = sp * chunk;
    int kn = n - s0 < chunk ? n - s0 : chunk; // the slice's rows
    if (kn <= 0) { // an empty slice: no weight in the sum, its sums never read
        if (tid < kMqHeads)
            *reinterpret_cast<float2 *>(ml_part + ((th + tid) * S + sp) * 2) =
                make_float2(-INFINITY, 0.0f);
        return;
    }
    int my_row = 0;
    if (tid < kn && tid < kMqKeys)
        my_row = idx[(size_t)t * width + s0 + tid];
    uint32_t qa[4][kMqParts][4];
    q_fragments(qv, qa);
    if (tid < kMqKeys)
        rows_s[tid] = my_row;
    float my_ks = 0.0f; // its row's scale, stored once the scores are done
    if (tid < kn && tid < kMqKeys)
        my_ks = kFp8 ? lat.scale[(uint32_t)my_row] : 1.0f;
    __syncthreads();

    // S: 16 heads x the slice's rows over this warp's 64 columns
    const int ntiles = (kn + 7) / 8;
    float sacc[NT][4];
#pragma unroll
    for (int nt = 0; nt < NT; nt++)
        sacc[nt][0] = sacc[nt][1] = sacc[nt][2] = sacc[nt][3] = 0.0f;
#pragma unroll
    for (int b0 = 0; b0 < NT; b0 += NB) {
        if (b0 >= ntiles)
            break;
        mq_row16<kFp8> kr[NB];
#pragma unroll
        for (int u = 0; u < NB; u++) {
            int key = (b0 + u) * 8 + g;
            if (key < kn)
                kr[u] = load_row16<kFp8>(lat, rows_s[key], col0 + 16 * c);
            else
                zero_row16<kFp8>(kr[u]);
        }
#pragma unroll
        for (int j = 0; j < 4; j++)
#pragma unroll
            for (int u = 0; u < NB; u++) {
                if (b0 + u >= ntiles)
                    continue;
                uint32_t b[2];
                score_b<kFp8>(kr[u], j, b);
#pragma unroll
                for (int pt = kMqParts - 1; pt >= 0; pt--) // lo, mid, hi: the smallest first
                    mma_bf16(sacc[b0 + u], qa[j][pt], b);
            }
    }
    {
        float *ra = spart + (warp * kMqHeads + g) * L::stride, *rb = ra + 8 * L::stride;
#pragma unroll
        for (int nt = 0; nt < NT; nt++)
            if (nt < ntiles) {
                int key = nt * 8 + 2 * c;
                *reinterpret_cast<float2 *>(ra + key) = make_float2(sacc[nt][0], sacc[nt][1]);
                *reinterpret_cast<float2 *>(rb + key) = make_float2(sacc[nt][2], sacc[nt][3]);
            }
    }
    if (tid < kMqKeys)
        ks_s[tid] = my_ks;
    __syncthreads();

    { // the softmax: sixteen threads a head, KPT rows each; the warps' sums in warp order
        const int hr = tid >> 4, k0 = (tid & 15) * KPT;
        float v[KPT];
#pragma unroll
        for (int w = 0; w < 8; w++) {
            const float *src = spart + (w * kMqHeads + hr) * L::stride + k0;
#pragma unroll
            for (int k = 0; k < KPT; k += 4) {
                float4 a = *reinterpret_cast<const float4 *>(src + k);
                if (w == 0)
                    v[k] = a.x, v[k + 1] = a.y, v[k + 2] = a.z, v[k + 3] = a.w;
                else
                    v[k] += a.x, v[k + 1] += a.y, v[k + 2] += a.z, v[k + 3] += a.w;
            }
        }
        float ks[KPT], mx = -INFINITY;
#pragma unroll
        for (int k = 0; k < KPT; k++) {
            ks[k] = ks_s[k0 + k];
            v[k] = k0 + k < kn ? v[k] * ks[k] * scale : -INFINITY;
            mx = fmaxf(mx, v[k]);
        }
#pragma unroll
        for (int o = 1; o < 16; o <<= 1)
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
        float psum = 0.0f;
        uint16_t pw[kMqParts][KPT];
#pragma unroll
        for (int k = 0; k < KPT; k++) {
            float p = k0 + k < kn ? expf(v[k] - mx) : 0.0f;
            psum += p;
            split3_bits(p * ks[k], pw[0][k], pw[1][k], pw[2][k]);
        }
#pragma unroll
        for (int pt = 0; pt < kMqParts; pt++) {
            uint16_t *dst = p_s + (pt * kMqHeads + hr) * L::stride + k0;
#pragma unroll
            for (int k = 0; k < KPT; k += 4)
                *reinterpret_cast<uint2 *>(dst + k) = make_uint2(
                    pack_pair(pw[pt][k], pw[pt][k + 1]), pack_pair(pw[pt][k + 2], pw[pt][k + 3]));
        }
#pragma unroll
        for (int o = 1; o < 16; o <<= 1)
            psum += __shfl_xor_sync(0xffffffffu, psum, o);
        if ((tid & 15) == 0)
            *reinterpret_cast<float2 *>(ml_part + ((th + hr) * S + sp) * 2) = make_float2(mx, psum);
    }
    __syncthreads();

    // O = P V: 16 heads x this warp's 64 columns (n-tile j, column g: latent column 8g + j)
    const int ksteps = (kn + 15) / 16;
    float oacc[8][4];
#pragma unroll
    for (int j = 0; j < 8; j++)
        oacc[j][0] = oacc[j][1] = oacc[j][2] = oacc[j][3] = 0.0f;
#pragma unroll
    for (int kb0 = 0; kb0 < KS; kb0 += KB) {
        if (kb0 >= ksteps)
            break;
        mq_row8<kFp8> vr[KB][4]; // rows 2c, 2c + 1, 2c + 8, 2c + 9 of each k-step
#pragma unroll
        for (int u = 0; u < KB; u++)
#pragma unroll
            for (int r = 0; r < 4; r++) {
                int key = (kb0 + u) * 16 + 2 * c + (r & 1) + (r >> 1) * 8;
                if (key < kn)
                    vr[u][r] = load_row8<kFp8>(lat, rows_s[key], col0 + 8 * g);
                else
                    zero_row8<kFp8>(vr[u][r]);
            }
#pragma unroll
        for (int u = 0; u < KB; u++) {
            if (kb0 + u >= ksteps)
                continue;
            uint32_t pa[kMqParts][4];
#pragma unroll
            for (int pt = 0; pt < kMqParts; pt++)
                ldsm_x4(pa[pt], p_s + (pt * kMqHeads + (lane & 15)) * L::stride +
                                      (kb0 + u) * 16 + (lane >> 4) * 8);
#pragma unroll
            for (int j = 0; j < 8; j++) {
                uint32_t b[2] = {column_pair<kFp8>(vr[u][0], vr[u][1], j),
                                 column_pair<kFp8>(vr[u][2], vr[u][3], j)};
#pragma unroll
                for (int pt = kMqParts - 1; pt >= 0; pt--) // lo, mid, hi: the smallest first
                    mma_bf16(oacc[j], pa[pt], b);
            }
        }
    }
    // thread (g, c) holds rows g, g + 8 at columns 16c + (0 .. 15) of the warp's 64
#pragma unroll
    for (int r = 0; r < 2; r++) {
        float *row = o_part + ((th + g + 8 * r) * S + sp) * kMqR + col0 + 16 * c;
        float4 *o = reinterpret_cast<float4 *>(row);
#pragma unroll
        for (int h = 0; h < 2; h++) { // C columns 2c (latent 16c + j) and 2c + 1 (16c + 8 + j)
            int e = 2 * r + h;
            o[2 * h] = make_float4(oacc[0][e], oacc[1][e], oacc[2][e], oacc[3][e]);
            o[2 * h + 1] = make_float4(oacc[4][e], oacc[5][e], oacc[6][e], oacc[7][e]);
        }
    }
}

// The slices' sums of one (token, head) (blockIdx.x), each rescaled to the largest maximum and
// added in slice order, over their weights' sum (the same tree of shuffles in every warp): a
// thread four latent columns. S <= 64: lane s of each warp reads slices s and s + 32's maximum
// and sum, so that all of them are loaded at once.
// slices whose sums are loaded together: GLM's 2,051-row selection has 33 slices of 64 rows (two
// batches)
constexpr int kMqCombineBatch = 17;

__global__ void __launch_bounds__(kMqR / 4) attend_mqa_combine_kernel(const float *part, int S,
                                                                      int H, float *ot)
{
    pdl_prologue();
    const size_t th = blockIdx.x;
    const int lane = threadIdx.x & 31;
    const float4 *o = reinterpret_cast<const float4 *>(part + th * S * kMqR) + threadIdx.x;
    const float2 *ml = reinterpret_cast<const float2 *>(part + (size_t)ENG_ATTEND_MAX_T * H * S * kMqR) + th * S;
    const float2 none = make_float2(-INFINITY, 0.0f);
    float2 m0 = lane < S ? ml[lane] : none, m1 = lane + 32 < S ? ml[lane + 32] : none;
    float M = warp_max(fmaxf(m0.x, m1.x));
    float w0 = m0.x > -INFINITY ? expf(m0.x - M) : 0.0f;
    float w1 = m1.x > -INFINITY ? expf(m1.x - M) : 0.0f;
    float L = warp_sum(w0 * m0.y + w1 * m1.y);
    float4 a = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    for (int s0 = 0; s0 < S; s0 += kMqCombineBatch) {
        float4 v[kMqCombineBatch];
        float w[kMqCombineBatch];
#pragma unroll
        for (int u = 0; u < kMqCombineBatch; u++) {
            int s = s0 + u;
            w[u] = __shfl_sync(0xffffffffu, s < 32 ? w0 : w1, s & 31);
            if (s < S && w[u] != 0.0f) // (an empty slice, weight 0, wrote no sums)
                v[u] = o[(size_t)s * (kMqR / 4)];
        }
#pragma unroll
        for (int u = 0; u < kMqCombineBatch; u++)
            if (s0 + u < S && w[u] != 0.0f)
                a.x += w[u] * v[u].x, a.y += w[u] * v[u].y, a.z += w[u] * v[u].z, a.w += w[u] * v[u].w;
    }
    float4 r = L > 0.0f ? make_float4(a.x / L, a.y / L, a.z / L, a.w / L)
                        : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    reinterpret_cast<float4 *>(ot + th * kMqR)[threadIdx.x] = r;
}

// The MQA kernel's slices for this shape, 0 where it does not take it: it takes R 512 (a cache
// row as wide), a bf16 or e4m3 cache, H a multiple of 16, a selection of at most
// ENG_ATTEND_MQA_MAX_SLICES slices and 16-byte aligned rows, qt, ot and part (GLM's shapes: one
// rank's 64 heads or each of two ranks' 32, width 2,051).
int attend_mqa_slices(const eng_cache *lat, const float *qt, const float *ot, const float *part,
                      int width, int H, int R)
{
    if (R != kMqR || lat->width != R || H < kMqHeads || H % kMqHeads || H / kMqHeads > 65535 ||
        width < 1 || (lat->dtype != ENG_CACHE_FP8 && lat->dtype != ENG_CACHE_BF16) || !part ||
        (uintptr_t)lat->rows % 16 || (uintptr_t)qt % 16 || (uintptr_t)ot % 16 || (uintptr_t)part % 16)
        return 0;
    size_t slices = ENG_ATTEND_MQA_SLICES(width);
    return slices <= ENG_ATTEND_MQA_MAX_SLICES ? (int)slices : 0;
}

template <int CACHE>
int launch_attend_mqa(const eng_cache *lat, const float *qt, const int32_t *idx, const int *count,
                      int width, int T, int H, float scale, int S, float *ot, float *part,
                      cudaStream_t st)
{
    int rc = (int)raise_smem_once<attend_mqa_kernel<CACHE>>(
        (size_t)mq_layout::bytes, "the decode latent attention's MQA kernel");
    if (rc)
        return rc;
    launch(attend_mqa_kernel<CACHE>, dim3(S, H / kMqHeads, T), kMqThreads,
           (size_t)mq_layout::bytes, st, *lat, qt, idx, count, width, H, scale, part);
    launch(attend_mqa_combine_kernel, T * H, kMqR / 4, 0, st, part, S, H, ot);
    return (int)cudaGetLastError();
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

extern "C" int eng_mla_attend_decode_takes(const eng_cache *lat, const float *qt, const float *ot,
                                           const float *part, int width, int H, int R)
{
    return attend_mqa_slices(lat, qt, ot, part, width, H, R) > 0;
}

extern "C" int eng_mla_attend_decode(const eng_cache *lat, const float *qt, const int32_t *idx,
                                     const int *count, int width, int T, int H, int R, float scale,
                                     float *ot, float *part, void *stream)
{
    if (T < 1 || T > ENG_ATTEND_MAX_T || H < 1)
        return -1;
    cudaStream_t st = static_cast<cudaStream_t>(stream);
    // the MQA kernel where it takes the shape (attend_mqa_slices: GLM's); any other shape (R not
    // 512, H not a multiple of 16, another cache dtype, a wider selection, unaligned buffers) runs
    // eng_mla_attend, one block a (token, head): the same attention in another sum order (within
    // rounding of the MQA kernel's), a row's bits independent of T in both
    int slices = attend_mqa_slices(lat, qt, ot, part, width, H, R);
    if (!slices)
        return eng_mla_attend(lat, qt, idx, count, width, T, H, R, scale, ot, stream);
    if (lat->dtype == ENG_CACHE_FP8)
        return launch_attend_mqa<ENG_CACHE_FP8>(lat, qt, idx, count, width, T, H, scale, slices,
                                                ot, part, st);
    return launch_attend_mqa<ENG_CACHE_BF16>(lat, qt, idx, count, width, T, H, scale, slices, ot,
                                             part, st);
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
