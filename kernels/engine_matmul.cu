// engine_matmul.cu: products with the backend's dense matrices (f32, bf16, f16, fp8 blocks):
// a warp-per-row GEMV for up to 8 tokens (the weights read once, 16 bytes a lane; several
// matrices in one launch, Q4 codes too) and a tiled GEMM for more; the embedding gather.
#include <mma.h>
#include <string.h>

#include "engine_common.cuh"
#include "engine_dot.cuh"
#include "engine_route.cuh"

namespace {

constexpr int kGemvWarps = 8;
constexpr int kMaxGemvT = 8;

// Rows a warp in the GEMVs of several tokens: from kRowsMinT tokens a row a warp is bound by its
// input loads from L1 (T of them for each 16-byte weight unit), which kRowsAWarp rows at the
// same columns share. Fewer tokens keep a row a warp: their loads are mostly the weights', and
// a quarter of the warps leaves too few of those in flight (two tokens were slower so).
constexpr int kRowsAWarp = 4;
constexpr int kRowsMinT = 3;

// Rows a warp of a plain job that is not skinny, at T tokens (gemv_plain_kernel's and its grid's).
__host__ __device__ constexpr int plain_rows(int T)
{
    return T >= kRowsMinT ? kRowsAWarp : 1;
}

// A matrix of whole 16-byte units of bf16/f16 (the GEMVs' vectorised rows).
__host__ __device__ __forceinline__ bool mat_units16(const eng_mat &w)
{
    return (w.cols % 8) == 0 && (w.dtype == ENG_BF16 || w.dtype == ENG_F16) &&
           ((uintptr_t)w.data % 16) == 0;
}

// The R rows from r0 of a matrix of rows x cols bf16/f16 as 16-byte units; rows past the matrix
// read its last (their sums are not written).
template <int R>
__device__ __forceinline__ void rows_from(const uint16_t *w, int r0, int rows, int cols,
                                          const uint4 *(&row)[R])
{
#pragma unroll
    for (int k = 0; k < R; k++)
        row[k] = reinterpret_cast<const uint4 *>(w + (size_t)(r0 + k < rows ? r0 + k : rows - 1) * cols);
}

// 16-byte loads in flight a lane before their products: more for one token (its registers
// are free), which a row of few warps needs to keep the memory busy.
template <int T> constexpr int kBatch16 = T == 1 ? 8 : 4;

// The bf16/f16 row's 16-byte units i, i + step, ... in batches of B loads, the last batch
// predicated on the units left (each batch issued before its products, which run in unit order:
// the sums do not depend on B, and no unit waits on another's load). Returns an index past the
// row's units (a caller's tail loop then finds nothing left).
template <int T, int B>
__device__ __forceinline__ int dot8_batches(const uint4 *row, int n8, int step, int i, int bf,
                                            const float *x, int cols, int tg, float *acc)
{
    for (; i + (B - 1) * step < n8; i += B * step) {
        uint4 q[B];
#pragma unroll
        for (int b = 0; b < B; b++)
            q[b] = __ldg(row + i + b * step);
#pragma unroll
        for (int b = 0; b < B; b++)
            dot8<T>(q[b], bf, x, cols, i + b * step, tg, acc);
    }
    if (i < n8) { // fewer than B units left: all of them at once
        uint4 q[B];
#pragma unroll
        for (int b = 0; b < B; b++)
            q[b] = i + b * step < n8 ? __ldg(row + i + b * step) : make_uint4(0, 0, 0, 0);
#pragma unroll
        for (int b = 0; b < B; b++)
            if (i + b * step < n8)
                dot8<T>(q[b], bf, x, cols, i + b * step, tg, acc);
        i += B * step;
    }
    return i;
}

// WPR warps share a row (WPR > 1 for matrices of few rows, so that enough loads are in flight);
// their partial sums meet in shared memory in warp order, so results do not depend on timing.
template <int T, int WPR>
__global__ void __launch_bounds__(256) gemv_kernel(eng_mat w, const float *__restrict__ x,
                                                   float *__restrict__ y, int tokens)
{
    pdl_trigger();
    if (blockIdx.y == 0) // this warp's part of its row towards L2 while the kernel before ends
        prefetch_row_part(w, blockIdx.x * (kGemvWarps / WPR) + (threadIdx.x >> 5) / WPR,
                          (threadIdx.x >> 5) % WPR, WPR);
    pdl_wait();
    // blockIdx.y: a group of T tokens (the last group may hold fewer; its missing rows read the
    // group's first token and are not written)
    int tg = tokens - (int)blockIdx.y * T;
    x += (size_t)blockIdx.y * T * w.cols;
    y += (size_t)blockIdx.y * T * w.rows;
    __shared__ float red[kGemvWarps][T];
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, sub = warp % WPR;
    int r = blockIdx.x * (kGemvWarps / WPR) + warp / WPR;
    bool valid = r < w.rows;
    const int cols = w.cols;
    float acc[T];
#pragma unroll
    for (int t = 0; t < T; t++)
        acc[t] = 0.0f;
    bool vec8 = mat_units16(w);
    if (valid && vec8) {
        const uint4 *row = reinterpret_cast<const uint4 *>(static_cast<const uint16_t *>(w.data) +
                                                           (size_t)r * cols);
        int n8 = cols / 8, step = 32 * WPR, i = sub * 32 + lane, bf = w.dtype == ENG_BF16;
        for (; i + 3 * step < n8; i += 4 * step) {
            uint4 q0 = __ldg(row + i), q1 = __ldg(row + i + step), q2 = __ldg(row + i + 2 * step),
                  q3 = __ldg(row + i + 3 * step);
            dot8<T>(q0, bf, x, cols, i, tg, acc);
            dot8<T>(q1, bf, x, cols, i + step, tg, acc);
            dot8<T>(q2, bf, x, cols, i + 2 * step, tg, acc);
            dot8<T>(q3, bf, x, cols, i + 3 * step, tg, acc);
        }
        for (; i < n8; i += step)
            dot8<T>(__ldg(row + i), bf, x, cols, i, tg, acc);
    } else if (valid && w.dtype == ENG_F32 && (cols % 4) == 0 && ((uintptr_t)w.data % 16) == 0) {
        const float4 *row = reinterpret_cast<const float4 *>(static_cast<const float *>(w.data) +
                                                             (size_t)r * cols);
        int n4 = cols / 4, step = 32 * WPR, i = sub * 32 + lane;
        for (; i + step < n4; i += 2 * step) {
            float4 q0 = __ldg(row + i), q1 = __ldg(row + i + step);
#pragma unroll
            for (int t = 0; t < T; t++) {
                const float4 *xr = reinterpret_cast<const float4 *>(x + (size_t)(t < tg ? t : 0) * cols);
                float4 a = __ldg(xr + i), b = __ldg(xr + i + step);
                acc[t] += q0.x * a.x + q0.y * a.y + q0.z * a.z + q0.w * a.w;
                acc[t] += q1.x * b.x + q1.y * b.y + q1.z * b.z + q1.w * b.w;
            }
        }
        for (; i < n4; i += step) {
            float4 q = __ldg(row + i);
#pragma unroll
            for (int t = 0; t < T; t++) {
                float4 a = __ldg(reinterpret_cast<const float4 *>(x + (size_t)(t < tg ? t : 0) * cols) + i);
                acc[t] += q.x * a.x + q.y * a.y + q.z * a.z + q.w * a.w;
            }
        }
    } else if (valid) {
        for (int c = sub * 32 + lane; c < cols; c += 32 * WPR) {
            float v = mat_at(w, r, c);
#pragma unroll
            for (int t = 0; t < T; t++)
                acc[t] += v * x[(size_t)(t < tg ? t : 0) * cols + c];
        }
    }
#pragma unroll
    for (int t = 0; t < T; t++)
        acc[t] = warp_sum(acc[t]);
    if (WPR == 1) {
        if (valid && lane == 0)
#pragma unroll
            for (int t = 0; t < T; t++)
                if (t < tg)
                    y[(size_t)t * w.rows + r] = acc[t];
        return;
    }
    if (lane == 0)
#pragma unroll
        for (int t = 0; t < T; t++)
            red[warp][t] = acc[t];
    __syncthreads();
    if (valid && sub == 0 && lane < T && lane < tg) {
        float s = 0.0f;
        for (int k = 0; k < WPR; k++)
            s += red[warp + k][lane];
        y[(size_t)lane * w.rows + r] = s;
    }
}

// One matrix of many bf16/f16 rows at T >= kRowsMinT tokens: kRowsAWarp rows a warp (gemv_kernel's
// units in its order for each row, so each row's bits are a one-token launch's).
template <int T>
__global__ void __launch_bounds__(256) gemv_rows_kernel(eng_mat w, const float *__restrict__ x,
                                                        float *__restrict__ y, int tokens)
{
    pdl_trigger();
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, rows = w.rows, cols = w.cols;
    const int r0 = ((int)blockIdx.x * kGemvWarps + warp) * kRowsAWarp;
    if (blockIdx.y == 0) // this warp's rows towards L2 while the kernel before ends
        for (int k = 0; k < kRowsAWarp; k++)
            if (r0 + k < rows)
                prefetch_row_part(w, r0 + k, 0, 1);
    pdl_wait();
    if (r0 >= rows)
        return;
    // blockIdx.y: a group of T tokens, as in gemv_kernel
    int tg = tokens - (int)blockIdx.y * T;
    x += (size_t)blockIdx.y * T * cols;
    y += (size_t)blockIdx.y * T * rows;
    const uint4 *row[kRowsAWarp];
    rows_from<kRowsAWarp>(static_cast<const uint16_t *>(w.data), r0, rows, cols, row);
    float acc[kRowsAWarp][T];
#pragma unroll
    for (int k = 0; k < kRowsAWarp; k++)
#pragma unroll
        for (int t = 0; t < T; t++)
            acc[k][t] = 0.0f;
    units_dot_rows<T, kRowsAWarp>(row, cols / 8, w.dtype == ENG_BF16, x, cols, 0, 1, lane, tg, acc);
#pragma unroll
    for (int k = 0; k < kRowsAWarp; k++)
#pragma unroll
        for (int t = 0; t < T; t++)
            acc[k][t] = warp_sum(acc[k][t]);
    if (lane == 0)
#pragma unroll
        for (int k = 0; k < kRowsAWarp; k++)
#pragma unroll
            for (int t = 0; t < T; t++)
                if (r0 + k < rows && t < tg)
                    y[(size_t)t * rows + r0 + k] = acc[k][t];
}

// y [T][rows] = x [T][cols] W^T: 64 tokens x 64 rows a block, 16 columns a step, 4 x 4 a thread.
constexpr int BM = 64, BN = 64, BK = 16;

__global__ void __launch_bounds__(256) gemm_kernel(eng_mat w, const float *__restrict__ x, int T,
                                                   float *__restrict__ y)
{
    pdl_prologue();
    __shared__ float xs[BK][BM + 4];
    __shared__ float ws[BK][BN + 4];
    int t0 = blockIdx.y * BM, r0 = blockIdx.x * BN;
    int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
    float acc[4][4] = {};
    for (int k0 = 0; k0 < w.cols; k0 += BK) {
        for (int i = threadIdx.x; i < BM * BK; i += 256) {
            int m = i / BK, kk = i % BK;
            int t = t0 + m, c = k0 + kk;
            xs[kk][m] = t < T && c < w.cols ? x[(size_t)t * w.cols + c] : 0.0f;
            int r = r0 + m;
            ws[kk][m] = r < w.rows && c < w.cols ? mat_at(w, r, c) : 0.0f;
        }
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < BK; kk++) {
            float a[4], b[4];
#pragma unroll
            for (int i = 0; i < 4; i++) {
                a[i] = xs[kk][ty * 4 + i];
                b[i] = ws[kk][tx * 4 + i];
            }
#pragma unroll
            for (int i = 0; i < 4; i++)
#pragma unroll
                for (int j = 0; j < 4; j++)
                    acc[i][j] += a[i] * b[j];
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < 4; i++) {
        int t = t0 + ty * 4 + i;
        if (t >= T)
            continue;
#pragma unroll
        for (int j = 0; j < 4; j++) {
            int r = r0 + tx * 4 + j;
            if (r < w.rows)
                y[(size_t)t * w.rows + r] = acc[i][j];
        }
    }
}

// BF16 weights on tensor cores: x is split into three bf16 parts (hi, mid = bf16(x - hi), lo =
// bf16(x - hi - mid)), so the product keeps about 24 significant bits of each input, as an f32
// product would, against the exact bf16 weights; f32 accumulation.
// 64 tokens x 128 rows a block, 8 warps of 32 x 32, k steps of 32 (K a multiple of 32).
constexpr int TM = 64, TN = 128, TK = 32, TLD = TK + 8;

__global__ void __launch_bounds__(256) gemm_bf16_kernel(const uint16_t *__restrict__ W, int rows,
                                                        int K, const float *__restrict__ x, int T,
                                                        float *__restrict__ y)
{
    pdl_prologue();
    using namespace nvcuda;
    __shared__ __align__(32) __nv_bfloat16 a_hi[TM * TLD], a_mid[TM * TLD], a_lo[TM * TLD], b_s[TN * TLD];
    __shared__ __align__(32) float stage[8][16 * 16];
    int t0 = blockIdx.y * TM, r0 = blockIdx.x * TN;
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int wm = warp / 4, wn = warp % 4; // warp tile: tokens wm*32.., rows wn*32..
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[2][2];
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
        for (int j = 0; j < 2; j++)
            wmma::fill_fragment(acc[i][j], 0.0f);
    for (int k0 = 0; k0 < K; k0 += TK) {
        for (int i = threadIdx.x; i < TM * TK; i += 256) {
            int m = i / TK, kk = i % TK, t = t0 + m;
            float v = t < T ? x[(size_t)t * K + k0 + kk] : 0.0f;
            __nv_bfloat16 hi = __float2bfloat16_rn(v);
            float rest = v - __bfloat162float(hi);
            __nv_bfloat16 mid = __float2bfloat16_rn(rest);
            a_hi[m * TLD + kk] = hi;
            a_mid[m * TLD + kk] = mid;
            a_lo[m * TLD + kk] = __float2bfloat16_rn(rest - __bfloat162float(mid));
        }
        for (int i = threadIdx.x; i < TN * TK / 8; i += 256) {
            int n = i / (TK / 8), c8 = i % (TK / 8), r = r0 + n;
            uint4 q = r < rows ? __ldg(reinterpret_cast<const uint4 *>(W + (size_t)r * K + k0) + c8)
                               : make_uint4(0, 0, 0, 0);
            *reinterpret_cast<uint4 *>(&b_s[n * TLD + c8 * 8]) = q;
        }
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < TK; kk += 16) {
            wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> ah[2], am[2], al[2];
            wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major> b[2];
#pragma unroll
            for (int i = 0; i < 2; i++) {
                wmma::load_matrix_sync(ah[i], a_hi + (wm * 32 + i * 16) * TLD + kk, TLD);
                wmma::load_matrix_sync(am[i], a_mid + (wm * 32 + i * 16) * TLD + kk, TLD);
                wmma::load_matrix_sync(al[i], a_lo + (wm * 32 + i * 16) * TLD + kk, TLD);
                wmma::load_matrix_sync(b[i], b_s + (wn * 32 + i * 16) * TLD + kk, TLD);
            }
#pragma unroll
            for (int i = 0; i < 2; i++)
#pragma unroll
                for (int j = 0; j < 2; j++) {
                    wmma::mma_sync(acc[i][j], al[i], b[j], acc[i][j]);
                    wmma::mma_sync(acc[i][j], am[i], b[j], acc[i][j]);
                    wmma::mma_sync(acc[i][j], ah[i], b[j], acc[i][j]);
                }
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
        for (int j = 0; j < 2; j++) {
            int t = t0 + wm * 32 + i * 16, r = r0 + wn * 32 + j * 16;
            if (t + 16 <= T && r + 16 <= rows && rows % 8 == 0 && (uintptr_t)y % 32 == 0) {
                wmma::store_matrix_sync(y + (size_t)t * rows + r, acc[i][j], rows, wmma::mem_row_major);
                continue;
            }
            wmma::store_matrix_sync(stage[warp], acc[i][j], 16, wmma::mem_row_major);
            __syncwarp();
            for (int e = lane; e < 256; e += 32) {
                int tt = t + e / 16, rr = r + e % 16;
                if (tt < T && rr < rows)
                    y[(size_t)tt * rows + rr] = stage[warp][e];
            }
            __syncwarp();
        }
}

__global__ void embed_kernel(eng_mat w, const int32_t *__restrict__ tokens, int T, int copies,
                             float *__restrict__ out)
{
    pdl_prologue();
    int t = blockIdx.y;
    int tok = tokens[t];
    for (int c = blockIdx.x * blockDim.x + threadIdx.x; c < w.cols; c += gridDim.x * blockDim.x) {
        float v = tok >= 0 && tok < w.rows ? mat_at(w, tok, c) : 0.0f;
        for (int k = 0; k < copies; k++)
            out[((size_t)t * copies + k) * w.cols + c] = v;
    }
}

__global__ void element_kernel(eng_mat w, int r, int c, float *out)
{
    pdl_prologue();
    *out = mat_at(w, r, c);
}

// tokens rows of x in groups of T (grid.y).
template <int T>
cudaError_t gemv_launch(const eng_mat *w, const float *x, float *y, int tokens, cudaStream_t st)
{
    unsigned groups = blocks_for((size_t)tokens, T);
    if constexpr (T >= kRowsMinT) {
        if (w->rows > 1024 && mat_units16(*w)) {
            launch(gemv_rows_kernel<T>,
                   dim3(blocks_for((size_t)w->rows, kGemvWarps * kRowsAWarp), groups),
                   32 * kGemvWarps, 0, st, *w, x, y, tokens);
            return cudaGetLastError();
        }
    }
    if (w->rows <= 1024) // few rows: eight warps a row
        launch(gemv_kernel<T, 8>, dim3(w->rows, groups), 32 * kGemvWarps, 0, st, *w, x, y, tokens);
    else
        launch(gemv_kernel<T, 1>, dim3(blocks_for((size_t)w->rows, kGemvWarps), groups),
               32 * kGemvWarps, 0, st, *w, x, y, tokens);
    return cudaGetLastError();
}

// ---- several products of T <= 8 rows in one launch (eng_matmul_jobs) ----------------------

struct gemv_job_dev {
    eng_mat w, w2;
    const float *x;
    float *y;
    float limit;
    int accumulate, pair, wpr, rpw, block0, skinny;
};

struct gemv_jobs_dev {
    gemv_job_dev j[ENG_MAX_JOBS];
    int n;
};

__device__ __forceinline__ float4 load_x4(const float *x, size_t i, bool aligned)
{
    if (aligned)
        return __ldg(reinterpret_cast<const float4 *>(x + i));
    return make_float4(x[i], x[i + 1], x[i + 2], x[i + 3]);
}

// NR rows of Q4 codes (of the same width) against T tokens of x, this warp's share of the runs:
// one x load serves every row (the loads from L1 would otherwise bound a 4-bit product).
template <int T, int NR>
__device__ __forceinline__ void q4_rows(const void *wa, const uint16_t *sa, int ra, const void *wb,
                                        const uint16_t *sb, int rb, int cols,
                                        const float *__restrict__ x, int sub, int wpr, int lane,
                                        float (*acc)[T])
{
    const bool xal = ((uintptr_t)x % 16) == 0;
    const uint8_t *row[NR];
    const __half *sc[NR];
#pragma unroll
    for (int q = 0; q < NR; q++) {
        row[q] = static_cast<const uint8_t *>(q ? wb : wa) + (size_t)(q ? rb : ra) * (cols / 2);
        sc[q] = reinterpret_cast<const __half *>(q ? sb : sa) + (size_t)(q ? rb : ra) * (cols / 32);
    }
    int tiles = cols / 128, runs = (tiles + 7) / 8;
    for (int run = sub; run < runs; run += wpr) { // a run of up to 8 tiles: 16 bytes a lane
        int n = tiles - 8 * run < 8 ? tiles - 8 * run : 8;
        uint32_t b[NR][8];
        float sj8[NR][8];
#pragma unroll
        for (int q = 0; q < NR; q++) {
            const __half *sp = sc[q] + 32 * run + n * (lane / 8);
            if (n == 8) { // two 8-byte scale loads (a row's scales start 8-byte aligned)
                const uint2 *s2 = reinterpret_cast<const uint2 *>(sp);
                uint2 lo = __ldg(s2), hi = __ldg(s2 + 1);
                const uint32_t u[4] = {lo.x, lo.y, hi.x, hi.y};
#pragma unroll
                for (int j = 0; j < 4; j++) {
                    float2 f = __half22float2(*reinterpret_cast<const __half2 *>(&u[j]));
                    sj8[q][2 * j] = f.x, sj8[q][2 * j + 1] = f.y;
                }
            } else {
#pragma unroll
                for (int j = 0; j < 8; j++)
                    sj8[q][j] = j < n ? __half2float(sp[j]) : 0.0f;
            }
            if (n == 8) {
                uint4 v = __ldg(reinterpret_cast<const uint4 *>(row[q] + (size_t)512 * run) + lane);
                b[q][0] = v.x & 0xffffu, b[q][1] = v.x >> 16, b[q][2] = v.y & 0xffffu;
                b[q][3] = v.y >> 16, b[q][4] = v.z & 0xffffu, b[q][5] = v.z >> 16;
                b[q][6] = v.w & 0xffffu, b[q][7] = v.w >> 16;
            } else {
                const uint16_t *p = reinterpret_cast<const uint16_t *>(row[q] + (size_t)512 * run +
                                                                       (size_t)2 * n * lane);
#pragma unroll
                for (int j = 0; j < 8; j++)
                    b[q][j] = j < n ? p[j] : 0u;
            }
        }
#pragma unroll
        for (int j = 0; j < 8; j++) {
            if (j >= n)
                break;
            // code - 8 as a float without the (quarter-rate) integer conversion: the code in the
            // mantissa of 2^23, then 2^23 + 8 taken away, both exact
            float sj[NR], w0[NR], w1[NR], w2[NR], w3[NR];
#pragma unroll
            for (int q = 0; q < NR; q++) {
                const float off = 8388616.0f; // 2^23 + 8
                uint32_t c = b[q][j];
                sj[q] = sj8[q][j];
                w0[q] = __uint_as_float(0x4b000000u | (c & 15u)) - off;
                w1[q] = __uint_as_float(0x4b000000u | ((c >> 4) & 15u)) - off;
                w2[q] = __uint_as_float(0x4b000000u | ((c >> 8) & 15u)) - off;
                w3[q] = __uint_as_float(0x4b000000u | ((c >> 12) & 15u)) - off;
            }
            size_t c = (size_t)(8 * run + j) * 128 + 4 * lane;
#pragma unroll
            for (int t = 0; t < T; t++) {
                float4 a = load_x4(x, (size_t)t * cols + c, xal);
#pragma unroll
                for (int q = 0; q < NR; q++)
                    acc[q][t] += sj[q] * (w0[q] * a.x + w1[q] * a.y + w2[q] * a.z + w3[q] * a.w);
            }
        }
    }
}

// A row rw of n8 16-byte units of bf16 (bf) or f16 against T tokens of x (cols each): this
// warp's share (sub of wpr warps), acc[t] += partial.
template <int T>
__device__ __forceinline__ void units_dot(const uint4 *rw, int n8, int bf, const float *x, int cols,
                                          int sub, int wpr, int lane, float *acc)
{
    int step = 32 * wpr, i = sub * 32 + lane;
    i = dot8_batches<T, kBatch16<T>>(rw, n8, step, i, bf, x, cols, T, acc);
    for (; i < n8; i += step)
        dot8<T>(__ldg(rw + i), bf, x, cols, i, T, acc);
}

// This warp's share (sub of wpr warps) of row r of w against T tokens of x: acc[t] += partial.
template <int T>
__device__ __forceinline__ void row_dot(const eng_mat &w, int r, const float *__restrict__ x,
                                        int sub, int wpr, int lane, float *acc)
{
    const int cols = w.cols;
    const bool xal = ((uintptr_t)x % 16) == 0 && cols % 4 == 0;
    if (w.dtype == ENG_Q4) {
        q4_rows<T, 1>(w.data, w.gscale, r, w.data, w.gscale, r, cols, x, sub, wpr, lane,
                      reinterpret_cast<float (*)[T]>(acc));
        return;
    }
    if (cols % 8 == 0 && xal && (w.dtype == ENG_BF16 || w.dtype == ENG_F16) &&
        ((uintptr_t)w.data % 16) == 0) {
        const uint4 *rw = reinterpret_cast<const uint4 *>(static_cast<const uint16_t *>(w.data) +
                                                          (size_t)r * cols);
        units_dot<T>(rw, cols / 8, w.dtype == ENG_BF16, x, cols, sub, wpr, lane, acc);
        return;
    }
    if (w.dtype == ENG_F32 && xal && ((uintptr_t)w.data % 16) == 0) {
        const float4 *rw = reinterpret_cast<const float4 *>(static_cast<const float *>(w.data) +
                                                            (size_t)r * cols);
        int n4 = cols / 4, step = 32 * wpr, i = sub * 32 + lane;
        for (; T <= 2 && i + 3 * step < n4; i += 4 * step) { // four loads in flight, in order
            float4 q[4];
#pragma unroll
            for (int b = 0; b < 4; b++)
                q[b] = __ldg(rw + i + b * step);
#pragma unroll
            for (int b = 0; b < 4; b++)
#pragma unroll
                for (int t = 0; t < T; t++) {
                    float4 a = __ldg(reinterpret_cast<const float4 *>(x + (size_t)t * cols) + i +
                                     b * step);
                    acc[t] += q[b].x * a.x + q[b].y * a.y + q[b].z * a.z + q[b].w * a.w;
                }
        }
        for (; i < n4; i += step) {
            float4 q = __ldg(rw + i);
#pragma unroll
            for (int t = 0; t < T; t++) {
                float4 a = __ldg(reinterpret_cast<const float4 *>(x + (size_t)t * cols) + i);
                acc[t] += q.x * a.x + q.y * a.y + q.z * a.z + q.w * a.w;
            }
        }
        return;
    }
    for (int c = sub * 32 + lane; c < cols; c += 32 * wpr) {
        float v = mat_at(w, r, c);
#pragma unroll
        for (int t = 0; t < T; t++)
            acc[t] += v * x[(size_t)t * cols + c];
    }
}

// A SwiGLU pair's two rows (same shape and dtype, bf16 or f16) with both matrices' loads in
// flight together; from kRowsMinT tokens each input load serves both rows (as the plain jobs'
// rows share theirs). Each accumulator takes its products in unit order, as row_dot would.
// Returns false (nothing done) when the rows are not of that form.
template <int T>
__device__ __forceinline__ bool row_dot_pair(const eng_mat &w, const eng_mat &w2, int r,
                                             const float *__restrict__ x, int sub, int wpr,
                                             int lane, float *acc, float *acc2)
{
    const int cols = w.cols;
    if (cols % 8 || (uintptr_t)x % 16 || w.dtype != w2.dtype ||
        (w.dtype != ENG_BF16 && w.dtype != ENG_F16) || (uintptr_t)w.data % 16 ||
        (uintptr_t)w2.data % 16)
        return false;
    const uint4 *ra = reinterpret_cast<const uint4 *>(static_cast<const uint16_t *>(w.data) +
                                                      (size_t)r * cols);
    const uint4 *rb = reinterpret_cast<const uint4 *>(static_cast<const uint16_t *>(w2.data) +
                                                      (size_t)r * cols);
    int n8 = cols / 8, step = 32 * wpr, i = sub * 32 + lane, bf = w.dtype == ENG_BF16;
    if constexpr (T >= kRowsMinT) { // both rows take each input load (units_dot_rows)
        const uint4 *row[2] = {ra, rb};
        float a2[2][T];
#pragma unroll
        for (int t = 0; t < T; t++)
            a2[0][t] = acc[t], a2[1][t] = acc2[t];
        units_dot_rows<T, 2>(row, n8, bf, x, cols, sub, wpr, lane, T, a2);
#pragma unroll
        for (int t = 0; t < T; t++)
            acc[t] = a2[0][t], acc2[t] = a2[1][t];
    } else { // T <= 2: four units of each row in flight
        for (; i + 3 * step < n8; i += 4 * step) {
            uint4 qa[4], qb[4];
#pragma unroll
            for (int b = 0; b < 4; b++) {
                qa[b] = __ldg(ra + i + b * step);
                qb[b] = __ldg(rb + i + b * step);
            }
#pragma unroll
            for (int b = 0; b < 4; b++)
                dot8<T>(qa[b], bf, x, cols, i + b * step, T, acc);
#pragma unroll
            for (int b = 0; b < 4; b++)
                dot8<T>(qb[b], bf, x, cols, i + b * step, T, acc2);
        }
        for (int k = i; k < n8; k += step)
            dot8<T>(__ldg(ra + k), bf, x, cols, k, T, acc);
        for (int k = i; k < n8; k += step)
            dot8<T>(__ldg(rb + k), bf, x, cols, k, T, acc2);
    }
    return true;
}

// Rows of at most 256 bf16/f16 columns (one 16-byte unit a lane, one warp a row) come
// kSkinnyRows to a warp: their loads go out together, where one row a warp would leave each
// lane a single load in flight and need many waves of blocks. Each row's sum is row_dot's.
constexpr int kSkinnyRows = 4;

template <int T>
__device__ __forceinline__ void skinny_units(const uint16_t *base, int rows, int cols, int bf,
                                             const float *x, float *yo, int accumulate, int r,
                                             int lane)
{
    const int n8 = cols / 8;
    uint4 q[kSkinnyRows];
#pragma unroll
    for (int k = 0; k < kSkinnyRows; k++)
        q[k] = r + k < rows && lane < n8
                   ? __ldg(reinterpret_cast<const uint4 *>(base + (size_t)(r + k) * cols) + lane)
                   : make_uint4(0, 0, 0, 0);
#pragma unroll
    for (int k = 0; k < kSkinnyRows; k++) {
        float acc[T];
#pragma unroll
        for (int t = 0; t < T; t++)
            acc[t] = 0.0f;
        if (lane < n8)
            dot8<T>(q[k], bf, x, cols, lane, T, acc);
#pragma unroll
        for (int t = 0; t < T; t++)
            acc[t] = warp_sum(acc[t]);
        if (lane == 0 && r + k < rows)
#pragma unroll
            for (int t = 0; t < T; t++) {
                float *y = yo + (size_t)t * rows + r + k;
                *y = accumulate ? *y + acc[t] : acc[t];
            }
    }
}

template <int T>
__device__ __forceinline__ void skinny_rows(const gemv_job_dev &jb, int r, int lane)
{
    skinny_units<T>(static_cast<const uint16_t *>(jb.w.data), jb.w.rows, jb.w.cols,
                    jb.w.dtype == ENG_BF16, jb.x, jb.y, jb.accumulate, r, lane);
}

// Blocks [block0, next block0) belong to a job; each holds 8 / wpr of its rows, wpr warps a row
// whose partial sums meet in shared memory in warp order.
template <int T>
__global__ void __launch_bounds__(256) gemv_jobs_kernel(gemv_jobs_dev js)
{
    pdl_trigger();
    gemv_job_dev jb = js.j[0];
#pragma unroll
    for (int i = 1; i < ENG_MAX_JOBS; i++)
        if (i < js.n && (int)blockIdx.x >= js.j[i].block0)
            jb = js.j[i];
    __shared__ float red[kGemvWarps][2][T];
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, wpr = jb.wpr, sub = warp % wpr;
    // rpw rows a warp group: a pair's two matrices share row r; a Q4 job's rows go two at a time
    int r = (((int)blockIdx.x - jb.block0) * (kGemvWarps / wpr) + warp / wpr) * jb.rpw;
    // this warp's part of its rows towards L2 while the kernel before ends (the job table and
    // the weights are no kernel's output)
    for (int k = 0; k < jb.rpw; k++)
        prefetch_row_part(jb.w, r + k, sub, wpr);
    if (jb.pair)
        prefetch_row_part(jb.w2, r, sub, wpr);
    pdl_wait();
    if (T <= 2 && jb.skinny) { // (set for T <= 2 only) wpr 1: no barrier below is skipped
        if (r < jb.w.rows)
            skinny_rows<T>(jb, r, lane);
        return;
    }
    bool valid = r < jb.w.rows, second = jb.pair || (jb.rpw == 2 && r + 1 < jb.w.rows);
    int rb = jb.pair ? r : r + 1;
    float acc[T], acc2[T];
#pragma unroll
    for (int t = 0; t < T; t++)
        acc[t] = acc2[t] = 0.0f;
    if (valid) {
        int bq4 = jb.pair ? jb.w2.dtype == ENG_Q4 : 1;
        if (second && jb.w.dtype == ENG_Q4 && bq4) {
            float a2[2][T];
#pragma unroll
            for (int t = 0; t < T; t++)
                a2[0][t] = a2[1][t] = 0.0f;
            q4_rows<T, 2>(jb.w.data, jb.w.gscale, r, jb.pair ? jb.w2.data : jb.w.data,
                          jb.pair ? jb.w2.gscale : jb.w.gscale, rb, jb.w.cols, jb.x, sub, wpr,
                          lane, a2);
#pragma unroll
            for (int t = 0; t < T; t++)
                acc[t] = a2[0][t], acc2[t] = a2[1][t];
        } else if (!(jb.pair &&
                     row_dot_pair<T>(jb.w, jb.w2, r, jb.x, sub, wpr, lane, acc, acc2))) {
            row_dot<T>(jb.w, r, jb.x, sub, wpr, lane, acc);
            if (second && jb.pair)
                row_dot<T>(jb.w2, rb, jb.x, sub, wpr, lane, acc2);
            else if (second)
                row_dot<T>(jb.w, rb, jb.x, sub, wpr, lane, acc2);
        }
    }
#pragma unroll
    for (int t = 0; t < T; t++) {
        acc[t] = warp_sum(acc[t]);
        acc2[t] = warp_sum(acc2[t]);
    }
    if (wpr > 1) {
        if (lane == 0)
#pragma unroll
            for (int t = 0; t < T; t++)
                red[warp][0][t] = acc[t], red[warp][1][t] = acc2[t];
        __syncthreads();
        if (sub == 0)
#pragma unroll
            for (int t = 0; t < T; t++) {
                float a = 0.0f, a2 = 0.0f;
                for (int k = 0; k < wpr; k++)
                    a += red[warp + k][0][t], a2 += red[warp + k][1][t];
                acc[t] = a, acc2[t] = a2;
            }
    }
    if (!valid || sub != 0 || lane != 0)
        return;
#pragma unroll
    for (int t = 0; t < T; t++) {
        float v = acc[t];
        if (jb.pair) { // SwiGLU, as eng_swiglu
            float g = fminf(acc[t], jb.limit), u = fminf(fmaxf(acc2[t], -jb.limit), jb.limit);
            v = g / (1.0f + expf(-g)) * u;
        }
        float *y = jb.y + (size_t)t * jb.w.rows + r;
        *y = jb.accumulate ? *y + v : v;
        if (!jb.pair && second) {
            y++;
            *y = jb.accumulate ? *y + acc2[t] : acc2[t];
        }
    }
}

// A plain job: a single bf16 (bf) or f16 matrix of 16-byte units, its fields only (the
// general table's copy of a job costs the general kernel its registers).
struct plain_job {
    const uint16_t *w;
    const float *x;
    float *y;
    int rows, cols, bf, accumulate, wpr, skinny, block0;
};

struct plain_jobs {
    plain_job j[ENG_MAX_JOBS];
    int n;
};

// A row's T sums from its wpr warps' lane partials: each warp's own sum (warp_sum), then, where a
// row takes several warps, the warps' sums added in warp order into the row's first warp (sub 0).
// Every thread of the block calls it (the barrier). gemv_plain_kernel and router_route_kernel
// share it so a row's sums are the same operations in both.
template <int T>
__device__ __forceinline__ void rows_sum(float (&acc)[T], float (*red)[T], int warp, int sub, int wpr,
                                         int lane)
{
#pragma unroll
    for (int t = 0; t < T; t++)
        acc[t] = warp_sum(acc[t]);
    if (wpr > 1) {
        if (lane == 0)
#pragma unroll
            for (int t = 0; t < T; t++)
                red[warp][t] = acc[t];
        __syncthreads();
        if (sub == 0)
#pragma unroll
            for (int t = 0; t < T; t++) {
                float a = 0.0f;
                for (int k = 0; k < wpr; k++)
                    a += red[warp + k][t];
                acc[t] = a;
            }
    }
}

// gemv_jobs_kernel for jobs that are all plain: row_dot's and the skinny rows' operations in
// the same order, so a row's bits are the general kernel's; from kRowsMinT tokens kRowsAWarp rows
// a warp group share its input loads (units_dot_rows). At one token 48 registers against
// its 108: 5 blocks an SM against 2. Six blocks need 40 registers and spill, and trimming the
// general kernel to 64 registers instead slows its many-token calls: five is the timed best.
constexpr int kGemvPlainMinBlocks = 5; // blocks an SM the one-token kernel's registers are cut for
template <int T>
__global__ void __launch_bounds__(256, T == 1 ? kGemvPlainMinBlocks : 1)
    gemv_plain_kernel(plain_jobs js)
{
    pdl_trigger();
    int ji = 0;
#pragma unroll
    for (int i = 1; i < ENG_MAX_JOBS; i++)
        if (i < js.n && (int)blockIdx.x >= js.j[i].block0)
            ji = i;
    const plain_job &jb = js.j[ji];
    constexpr int R = plain_rows(T);
    __shared__ float red[kGemvWarps][R * T];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, wpr = jb.wpr, sub = warp % wpr;
    const int rows = jb.rows, cols = jb.cols, rpw = jb.skinny ? kSkinnyRows : R;
    int r = (((int)blockIdx.x - jb.block0) * (kGemvWarps / wpr) + warp / wpr) * rpw;
    const size_t rb = (size_t)cols * 2;
    for (int k = 0; k < rpw; k++) // as prefetch_row_part: this warp's part of its rows
        if (r + k < rows)
            prefetch_row_bytes(reinterpret_cast<const char *>(jb.w) + (size_t)(r + k) * rb, rb, sub,
                               wpr);
    pdl_wait();
    if (T <= 2 && jb.skinny) {
        if (r < rows)
            skinny_units<T>(jb.w, rows, cols, jb.bf, jb.x, jb.y, jb.accumulate, r, lane);
        return;
    }
    bool valid = r < rows;
    float acc[R * T]; // [row][token]
#pragma unroll
    for (int k = 0; k < R * T; k++)
        acc[k] = 0.0f;
    if (valid && R == 1) {
        units_dot<T>(reinterpret_cast<const uint4 *>(jb.w + (size_t)r * cols), cols / 8, jb.bf,
                     jb.x, cols, sub, wpr, lane, acc);
    } else if (valid) {
        const uint4 *row[R];
        rows_from<R>(jb.w, r, rows, cols, row);
        units_dot_rows<T, R>(row, cols / 8, jb.bf, jb.x, cols, sub, wpr, lane, T,
                             reinterpret_cast<float (*)[T]>(acc));
    }
    rows_sum<R * T>(acc, red, warp, sub, wpr, lane);
    if (!valid || sub != 0 || lane != 0)
        return;
#pragma unroll
    for (int k = 0; k < R; k++)
#pragma unroll
        for (int t = 0; t < T; t++) {
            if (r + k >= rows)
                break;
            float *y = jb.y + (size_t)t * rows + r + k;
            *y = jb.accumulate ? *y + acc[k * T + t] : acc[k * T + t];
        }
}

template <int T>
cudaError_t plain_launch(const plain_jobs &js, unsigned blocks, cudaStream_t st)
{
    launch(gemv_plain_kernel<T>, blocks, 32 * kGemvWarps, 0, st, js);
    return cudaGetLastError();
}

// Warps a row: enough warps in all to keep loads in flight (about 8k), yet each with work.
int pick_wpr(const eng_mat *w)
{
    int wpr = 1;
    while (wpr < kGemvWarps && (size_t)w->rows * wpr < 8192)
        wpr *= 2;
    int units = w->dtype == ENG_Q4 ? (w->cols / 128 + 7) / 8 : (w->cols + 255) / 256;
    while (wpr > 1 && wpr > units)
        wpr /= 2;
    return wpr;
}

template <int T>
cudaError_t jobs_launch(const gemv_jobs_dev &js, const plain_jobs &pj, bool plain, unsigned blocks,
                        cudaStream_t st)
{
    if (plain)
        return plain_launch<T>(pj, blocks, st);
    launch(gemv_jobs_kernel<T>, blocks, 32 * kGemvWarps, 0, st, js);
    return cudaGetLastError();
}

// The decode router with its routing (eng_router_route): the rows as gemv_jobs_kernel computes a
// lone job of them (row_dot, wpr warps a row meeting in shared memory in warp order: the same
// bits), then the last block to finish (a count of finished blocks in done, which it sets back
// to zero) routes row t with its warp t, as route_warp_kernel does.
struct route_out {
    float *logits; // [T][E]
    const float *bias;
    int K, norm_topk;
    float scaling;
    int32_t *ids; // [T][K]
    float *weights;
    unsigned *done;
};

template <int T>
__global__ void __launch_bounds__(256) router_route_kernel(eng_mat w, const float *x, int wpr,
                                                          route_out o)
{
    pdl_trigger();
    __shared__ float red[kGemvWarps][T];
    __shared__ int last;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, sub = warp % wpr, E = w.rows;
    int r = (int)blockIdx.x * (kGemvWarps / wpr) + warp / wpr;
    prefetch_row_part(w, r, sub, wpr); // (a weight: before the wait)
    pdl_wait();
    bool valid = r < E;
    float acc[T];
#pragma unroll
    for (int t = 0; t < T; t++)
        acc[t] = 0.0f;
    if (valid)
        row_dot<T>(w, r, x, sub, wpr, lane, acc);
    rows_sum<T>(acc, red, warp, sub, wpr, lane);
    if (valid && sub == 0 && lane == 0) {
#pragma unroll
        for (int t = 0; t < T; t++)
            o.logits[(size_t)t * E + r] = acc[t];
        __threadfence();
    }
    __syncthreads();
    if (threadIdx.x == 0) { // the block's logits (seen through the barrier) before its count
        __threadfence();
        last = atomicAdd(o.done, 1u) == gridDim.x - 1;
    }
    __syncthreads();
    if (!last)
        return;
    __threadfence(); // every block's logits, read through L2 (route_warp_row)
    if (warp < T) {
        float b[kRouteWarpSlots];
        route_warp_bias(o.bias, E, lane, b);
        route_warp_row(o.logits + (size_t)warp * E, b, E, o.K, o.norm_topk, o.scaling,
                       o.ids + (size_t)warp * o.K, o.weights + (size_t)warp * o.K);
    }
    if (threadIdx.x == 0)
        *o.done = 0; // for the next launch (ordered after this one on the stream)
}

template <int T>
cudaError_t router_route_launch(const eng_mat &w, const float *x, int wpr, const route_out &o,
                                cudaStream_t st)
{
    unsigned blocks = blocks_for((size_t)w.rows, (unsigned)(kGemvWarps / wpr));
    launch(router_route_kernel<T>, blocks, 32 * kGemvWarps, 0, st, w, x, wpr, o);
    return cudaGetLastError();
}

} // namespace

extern "C" int eng_matmul_jobs(const eng_gemv_job *jobs, int n, int T, void *stream)
{
    if (!jobs || n < 1 || n > ENG_MAX_JOBS || T < 1 || T > kMaxGemvT)
        return -1;
    gemv_jobs_dev js;
    memset(&js, 0, sizeof js);
    js.n = n;
    long blocks = 0, pblocks = 0; // the general kernel's, the plain kernel's
    plain_jobs pj;
    memset(&pj, 0, sizeof pj);
    pj.n = n;
    bool plain = true; // every job a plain one (gemv_plain_kernel)
    for (int i = 0; i < n; i++) {
        const eng_gemv_job *j = &jobs[i];
        const eng_mat *w = j->w;
        if (!w || !j->x || !j->y || w->rows < 1 || w->cols < 1 ||
            (w->dtype == ENG_Q4 && (w->cols % 128 || !w->gscale)))
            return -1;
        if (j->w2 && (j->w2->rows != w->rows || j->w2->cols != w->cols ||
                      (j->w2->dtype == ENG_Q4 && (w->cols % 128 || !j->w2->gscale))))
            return -1;
        gemv_job_dev *d = &js.j[i];
        d->w = *w;
        if (j->w2)
            d->w2 = *j->w2;
        d->x = j->x;
        d->y = j->y;
        d->limit = j->limit;
        d->accumulate = j->accumulate;
        d->pair = j->w2 != NULL;
        d->wpr = pick_wpr(w);
        d->rpw = w->dtype == ENG_Q4 && !j->w2 ? 2 : 1;
        d->skinny = T <= 2 && !j->w2 && (w->dtype == ENG_BF16 || w->dtype == ENG_F16) &&
                    w->cols <= 256 && w->cols % 8 == 0 && (uintptr_t)w->data % 16 == 0 &&
                    (uintptr_t)j->x % 16 == 0;
        if (d->skinny) { // pick_wpr gives these one warp a row (a single unit of 256 columns)
            d->wpr = 1;
            d->rpw = kSkinnyRows;
        }
        plain = plain && !j->w2 && (w->dtype == ENG_BF16 || w->dtype == ENG_F16) &&
                w->cols % 8 == 0 && (uintptr_t)w->data % 16 == 0 && (uintptr_t)j->x % 16 == 0;
        d->block0 = (int)blocks;
        pj.j[i] = (plain_job){static_cast<const uint16_t *>(w->data), j->x, j->y, w->rows, w->cols,
                              w->dtype == ENG_BF16, j->accumulate, d->wpr, d->skinny, (int)pblocks};
        blocks += blocks_for((size_t)w->rows, (unsigned)(kGemvWarps / d->wpr * d->rpw));
        int prpw = d->skinny ? kSkinnyRows : plain_rows(T); // gemv_plain_kernel's
        pblocks += blocks_for((size_t)w->rows, (unsigned)(kGemvWarps / d->wpr * prpw));
        if (blocks > 0x7fffffffL || pblocks > 0x7fffffffL)
            return -1;
    }
    cudaStream_t st = static_cast<cudaStream_t>(stream);
    unsigned b = (unsigned)(plain ? pblocks : blocks);
    switch (T) {
    case 1: return (int)jobs_launch<1>(js, pj, plain, b, st);
    case 2: return (int)jobs_launch<2>(js, pj, plain, b, st);
    case 3: return (int)jobs_launch<3>(js, pj, plain, b, st);
    case 4: return (int)jobs_launch<4>(js, pj, plain, b, st);
    case 5: return (int)jobs_launch<5>(js, pj, plain, b, st);
    case 6: return (int)jobs_launch<6>(js, pj, plain, b, st);
    case 7: return (int)jobs_launch<7>(js, pj, plain, b, st);
    default: return (int)jobs_launch<8>(js, pj, plain, b, st);
    }
}

extern "C" int eng_router_route_takes(const eng_mat *w, const float *x, int T, int G, int K)
{
    if (!w || !x || T < 1 || T > kMaxGemvT || G != 1 || K < 1 || K > 32 || K > w->rows ||
        w->rows > 32 * kRouteWarpSlots || w->cols < 1 || w->dtype == ENG_Q4)
        return 0;
    // eng_matmul_jobs' skinny rows (one warp, several rows) sum another way: not this kernel's
    bool skinny = T <= 2 && (w->dtype == ENG_BF16 || w->dtype == ENG_F16) && w->cols <= 256 &&
                  w->cols % 8 == 0 && (uintptr_t)w->data % 16 == 0 && (uintptr_t)x % 16 == 0;
    return !skinny;
}

extern "C" int eng_router_route(const eng_mat *w, const float *x, int T, float *logits,
                                const float *bias, int K, int norm_topk, float scaling,
                                int32_t *ids, float *weights, unsigned *done, void *stream)
{
    if (!eng_router_route_takes(w, x, T, 1, K) || !logits || !bias || !ids || !weights || !done)
        return -1;
    int wpr = pick_wpr(w);
    route_out o = {logits, bias, K, norm_topk, scaling, ids, weights, done};
    cudaStream_t st = static_cast<cudaStream_t>(stream);
    switch (T) {
    case 1: return (int)router_route_launch<1>(*w, x, wpr, o, st);
    case 2: return (int)router_route_launch<2>(*w, x, wpr, o, st);
    case 3: return (int)router_route_launch<3>(*w, x, wpr, o, st);
    case 4: return (int)router_route_launch<4>(*w, x, wpr, o, st);
    case 5: return (int)router_route_launch<5>(*w, x, wpr, o, st);
    case 6: return (int)router_route_launch<6>(*w, x, wpr, o, st);
    case 7: return (int)router_route_launch<7>(*w, x, wpr, o, st);
    default: return (int)router_route_launch<8>(*w, x, wpr, o, st);
    }
}

extern "C" int eng_matmul(const eng_mat *w, const float *x, int T, float *y, void *stream)
{
    if (!w || T < 1 || w->rows < 1 || w->cols < 1)
        return -1;
    cudaStream_t st = static_cast<cudaStream_t>(stream);
    if (eng_gemm_takes(w, T))
        return eng_gemm(w, x, T, y, stream);
    if (T > kMaxGemvT && w->dtype == ENG_BF16 && w->cols % TK == 0 && (uintptr_t)w->data % 16 == 0 &&
        (uintptr_t)x % 16 == 0) {
        dim3 grid(blocks_for((size_t)w->rows, TN), blocks_for((size_t)T, TM));
        launch(gemm_bf16_kernel, grid, 256, 0, st, static_cast<const uint16_t *>(w->data), w->rows,
               w->cols, x, T, y);
        return (int)cudaGetLastError();
    }
    if (T > kMaxGemvT && w->rows <= 256) // few outputs (the HC mix, the indexer's heads): GEMV tiles
        return (int)gemv_launch<kMaxGemvT>(w, x, y, T, st);
    if (T > kMaxGemvT) {
        dim3 grid(blocks_for((size_t)w->rows, BN), blocks_for((size_t)T, BM));
        launch(gemm_kernel, grid, 256, 0, st, *w, x, T, y);
        return (int)cudaGetLastError();
    }
    if (w->dtype == ENG_Q4) {
        eng_gemv_job job = {w, NULL, x, y, 0.0f, 0};
        return eng_matmul_jobs(&job, 1, T, stream);
    }
    switch (T) { // one matrix: the per-row GEMV (the LM head reads at 0.96 of copy bandwidth)
    case 1: return (int)gemv_launch<1>(w, x, y, T, st);
    case 2: return (int)gemv_launch<2>(w, x, y, T, st);
    case 3: return (int)gemv_launch<3>(w, x, y, T, st);
    case 4: return (int)gemv_launch<4>(w, x, y, T, st);
    case 5: return (int)gemv_launch<5>(w, x, y, T, st);
    case 6: return (int)gemv_launch<6>(w, x, y, T, st);
    case 7: return (int)gemv_launch<7>(w, x, y, T, st);
    default: return (int)gemv_launch<8>(w, x, y, T, st);
    }
}

extern "C" int eng_matmul_rowwise(const eng_mat *w, const float *x, int T, float *y, void *stream)
{
    if (!w || T < 1 || w->rows < 1 || w->cols < 1)
        return -1;
    if (T <= kMaxGemvT)
        return eng_matmul(w, x, T, y, stream); // the GEMV of T rows
    if (w->dtype == ENG_Q4) { // as eng_matmul takes Q4 rows: the job kernel, 8 rows a launch
        for (int t0 = 0; t0 < T; t0 += kMaxGemvT) {
            int n = T - t0 < kMaxGemvT ? T - t0 : kMaxGemvT;
            eng_gemv_job job = {w, NULL, x + (size_t)t0 * w->cols, y + (size_t)t0 * w->rows, 0.0f, 0};
            int rc = eng_matmul_jobs(&job, 1, n, stream);
            if (rc)
                return rc;
        }
        return 0;
    }
    return (int)gemv_launch<kMaxGemvT>(w, x, y, T, static_cast<cudaStream_t>(stream));
}

extern "C" int eng_embed(const eng_mat *w, const int32_t *tokens, int T, int copies, float *out,
                         void *stream)
{
    if (!w || T < 1 || copies < 1)
        return -1;
    dim3 grid(blocks_for((size_t)w->cols, 256) < 64 ? blocks_for((size_t)w->cols, 256) : 64, T);
    launch(embed_kernel, grid, 256, 0, static_cast<cudaStream_t>(stream), *w, tokens, T, copies,
           out);
    return (int)cudaGetLastError();
}

extern "C" int eng_mat_element(const eng_mat *w, int r, int c, float *out_dev, void *stream)
{
    launch(element_kernel, 1, 1, 0, static_cast<cudaStream_t>(stream), *w, r, c, out_dev);
    return (int)cudaGetLastError();
}
