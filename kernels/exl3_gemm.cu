// exl3_gemm.cu: one EXL3 linear layer on the GPU straight from its trellis: input rotation,
// batch-1 GEMV / few-row GEMM (rows <= 16), the prefill GEMM above that, output rotation.
//
// Deterministic and batch-invariant: the k range is split into parts by the layer's shape and
// the device only (never by the row count); each part's sums are stored, not added by atomics,
// and the output rotation adds the parts in index order. A row's bits therefore do not depend
// on the row count, its position or the other rows, within a path (rows <= 16: the GEMV path;
// more: the prefill path). The two paths differ in bits (their own k splits, and the GEMV feeds
// a weight's two fp16 halves to the mma where the prefill GEMM adds them in fp16 first).
#include <cstdint>
#include <type_traits>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "exl3_device.cuh"
#include "kernels.h"
#include "launch.cuh"

namespace {

using namespace exl3;

constexpr int kThreads = 256; // 8 warps

// xh[r][:] = fp16(Hk (x[r] . suh)); one warp per 128-block.
__global__ void rotate_in_kernel(const float *__restrict__ x, const __half *__restrict__ suh,
                                 __half *__restrict__ xh, int in)
{
    pdl_prologue();
    int lane = threadIdx.x & 31;
    int block = blockIdx.x * (blockDim.x / 32) + (threadIdx.x >> 5);
    int r = blockIdx.y;
    if (block * 128 < in) {
        int col = block * 128 + 4 * lane;
        float4 xv = *reinterpret_cast<const float4 *>(x + (size_t)r * in + col);
        float v[4] = {xv.x, xv.y, xv.z, xv.w};
#pragma unroll
        for (int i = 0; i < 4; i++)
            v[i] *= __half2float(suh[col + i]);
        fwht128_warp(v);
        __half2 lo = __floats2half2_rn(v[0], v[1]), hi = __floats2half2_rn(v[2], v[3]);
        uint2 packed = {h2_bits(lo), h2_bits(hi)};
        *reinterpret_cast<uint2 *>(xh + (size_t)r * in + col) = packed;
    }
}

// y[r][:] = (Hn sum_p z[p][r]) . svh + bias, the parts added in index order; one warp per
// 128-block.
__global__ void rotate_out_kernel(const float *__restrict__ z, int parts, int rows,
                                  const __half *__restrict__ svh, const __half *__restrict__ bias,
                                  float *__restrict__ y, int out)
{
    pdl_prologue();
    int lane = threadIdx.x & 31;
    int block = blockIdx.x * (blockDim.x / 32) + (threadIdx.x >> 5);
    int r = blockIdx.y;
    if (block * 128 >= out)
        return;
    int col = block * 128 + 4 * lane;
    float v[4] = {0.f, 0.f, 0.f, 0.f};
    for (int p = 0; p < parts; p++) {
        float4 zv = __ldcg(reinterpret_cast<const float4 *>(z + ((size_t)p * rows + r) * out + col));
        v[0] += zv.x, v[1] += zv.y, v[2] += zv.z, v[3] += zv.w;
    }
    fwht128_warp(v);
#pragma unroll
    for (int i = 0; i < 4; i++) {
        v[i] *= __half2float(svh[col + i]);
        if (bias)
            v[i] += __half2float(bias[col + i]);
    }
    *reinterpret_cast<float4 *>(y + (size_t)r * out + col) = make_float4(v[0], v[1], v[2], v[3]);
}

// A fragment of rows r0.. of xh (row-major [rows][in]) at k-tile kt; rows past `rows` are 0.
__device__ __forceinline__ void load_a(const __half *__restrict__ xh, int in, int r0, int rows,
                                       int kt, int lane, uint32_t a[4])
{
    int g = lane >> 2, t = lane & 3;
    const __half *p0 = xh + (size_t)(r0 + g) * in + kt * 16 + 2 * t;
    const __half *p1 = p0 + (size_t)8 * in;
    bool v0 = r0 + g < rows, v1 = r0 + g + 8 < rows;
    a[0] = v0 ? __ldg(reinterpret_cast<const unsigned int *>(p0)) : 0u;
    a[2] = v0 ? __ldg(reinterpret_cast<const unsigned int *>(p0 + 8)) : 0u;
    a[1] = v1 ? __ldg(reinterpret_cast<const unsigned int *>(p1)) : 0u;
    a[3] = v1 ? __ldg(reinterpret_cast<const unsigned int *>(p1 + 8)) : 0u;
}

// Rows r0..r0+15 of one 128-column block over the block's k range: warp w takes 64 columns
// (w & 1) and a quarter of the range (w >> 1) and stores its sums as part 4 * blockIdx.y +
// (w >> 1) of z ([parts][rows][out]; a warp with an empty range stores zeros).
constexpr int kPrefetch = 6; // k-steps of 512 bytes in flight per warp

template <int K, int CB>
__global__ void __launch_bounds__(kThreads) gemv_kernel(const uint32_t *__restrict__ trellis,
                                                        const __half *__restrict__ xh,
                                                        float *__restrict__ z, int rows, int in,
                                                        int out, int ksteps)
{
    pdl_prologue();
    __shared__ uint32_t slices[kThreads / 32][128];
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int tn = blockIdx.x * 8 + (warp & 1) * 4;
    int ntiles = out / 16;
    int kb0 = blockIdx.y * ksteps;
    int kb1 = min(kb0 + ksteps, in / 16);
    int per = (kb1 - kb0 + 3) / 4;
    int kt0 = kb0 + (warp >> 1) * per;
    int n = max(min(kt0 + per, kb1) - kt0, 0);
    int r0 = blockIdx.z * 16;
    z += (size_t)(blockIdx.y * 4 + (warp >> 1)) * rows * out;
    constexpr int kWords = 8 * K;
    const size_t stride = (size_t)ntiles * kWords; // words between k-tiles
    const uint32_t *tile0 = trellis + ((size_t)kt0 * ntiles + tn) * kWords;
    float acc[4][2][4] = {};
    auto a_of = [&](int kt, uint32_t a[4]) { load_a(xh, in, r0, rows, kt0 + kt, lane, a); };
    strip4<K, CB, kPrefetch>(tile0, stride, n, slices[warp], a_of, acc);
    int g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int j = 0; j < 4; j++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            int col = (tn + j) * 16 + h * 8 + 2 * t;
            if (r0 + g < rows)
                *reinterpret_cast<float2 *>(z + (size_t)(r0 + g) * out + col) =
                    make_float2(acc[j][h][0], acc[j][h][1]);
            if (r0 + g + 8 < rows)
                *reinterpret_cast<float2 *>(z + (size_t)(r0 + g + 8) * out + col) =
                    make_float2(acc[j][h][2], acc[j][h][3]);
        }
}

// Prefill: a block owns 128 columns and 64 rows of k part blockIdx.y. Per k-tile the 8 warps
// decode the strip's 8 tiles into shared memory as B fragments (once for all 64 rows), then each
// warp multiplies its 16 rows x 64 columns on tensor cores, A fragments from shared memory; the
// sums are stored as part blockIdx.y of z ([parts][rows][out]).
constexpr int kPrefillRows = 64;
constexpr int kStage = 4; // k-tiles decoded per shared-memory stage

template <int K, int CB>
__global__ void __launch_bounds__(kThreads) prefill_kernel(const uint32_t *__restrict__ trellis,
                                                           const __half *__restrict__ xh,
                                                           float *__restrict__ z, int rows,
                                                           int in, int out, int ksteps)
{
    pdl_prologue();
    // B fragments: [stage k-tile][n-tile 8][lane 32] x uint4 (the lane's four registers)
    __shared__ uint4 frag[kStage][8][32];
    // A: [64 rows][kStage*16 + 8 pad] halves
    __shared__ __align__(16) __half a_tile[kPrefillRows][kStage * 16 + 8];
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int ntiles = out / 16;
    int kt0 = blockIdx.y * ksteps;
    int kt1 = min(kt0 + ksteps, in / 16);
    int r0 = blockIdx.z * kPrefillRows;
    constexpr int kWords = 8 * K;
    int m = warp & 3;        // this warp's 16-row slice
    int nhalf = warp >> 2;   // columns 0-63 or 64-127 of the block
    float acc[4][2][4] = {}; // 4 n-tiles x 2 mma halves
    for (int ks = kt0; ks < kt1; ks += kStage) {
        __syncthreads();
        // decode: warp w decodes n-tile w of each stage k-tile
        for (int s = 0; s < kStage; s++) {
            int kt = ks + s;
            uint32_t b[4] = {0u, 0u, 0u, 0u};
            if (kt < kt1) {
                const uint32_t *tile = trellis + ((size_t)kt * ntiles + blockIdx.x * 8 + warp) * kWords;
                if (K == 4) {
                    uint32_t w = ld_stream(tile + lane);
                    uint32_t prev = __shfl_sync(0xFFFFFFFFu, w, (lane + 31) & 31);
                    decode_k4<CB>(w, prev, b);
                } else {
                    decode_any<K, CB>(tile, lane, b);
                }
            }
            frag[s][warp][lane] = make_uint4(b[0], b[1], b[2], b[3]);
        }
        // A: 64 rows x kStage*16 halves, 8 halves (16 bytes) per thread per pass
        for (int i = threadIdx.x; i < kPrefillRows * kStage * 2; i += kThreads) {
            int row = i / (kStage * 2), part = i % (kStage * 2);
            int kcol = ks * 16 + part * 8;
            uint4 v = make_uint4(0u, 0u, 0u, 0u);
            if (r0 + row < rows && kcol < kt1 * 16)
                v = __ldg(reinterpret_cast<const uint4 *>(xh + (size_t)(r0 + row) * in + kcol));
            *reinterpret_cast<uint4 *>(&a_tile[row][part * 8]) = v;
        }
        __syncthreads();
        int g = lane >> 2, t = lane & 3;
        for (int s = 0; s < kStage && ks + s < kt1; s++) {
            uint32_t a[4];
            const __half *p0 = &a_tile[m * 16 + g][s * 16 + 2 * t];
            const __half *p1 = &a_tile[m * 16 + g + 8][s * 16 + 2 * t];
            a[0] = *reinterpret_cast<const uint32_t *>(p0);
            a[2] = *reinterpret_cast<const uint32_t *>(p0 + 8);
            a[1] = *reinterpret_cast<const uint32_t *>(p1);
            a[3] = *reinterpret_cast<const uint32_t *>(p1 + 8);
#pragma unroll
            for (int j = 0; j < 4; j++) {
                uint4 b = frag[s][nhalf * 4 + j][lane];
                mma16816(acc[j][0], a, b.x, b.y);
                mma16816(acc[j][1], a, b.z, b.w);
            }
        }
    }
    int g = lane >> 2, t = lane & 3;
    int row0 = r0 + m * 16 + g;
    z += (size_t)blockIdx.y * rows * out;
#pragma unroll
    for (int j = 0; j < 4; j++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            int col = (blockIdx.x * 8 + nhalf * 4 + j) * 16 + h * 8 + 2 * t;
            if (row0 < rows)
                *reinterpret_cast<float2 *>(z + (size_t)row0 * out + col) =
                    make_float2(acc[j][h][0], acc[j][h][1]);
            if (row0 + 8 < rows)
                *reinterpret_cast<float2 *>(z + (size_t)(row0 + 8) * out + col) =
                    make_float2(acc[j][h][2], acc[j][h][3]);
        }
}

// ---- routed experts of a prefill chunk, grouped by expert -----------------------------------
// The chunk's (row, slot) pairs are sorted by expert (stable counting sort, one block), so each
// expert's rows lie together; every selected expert's gate/up and down run as one GEMM of its
// rows (each weight tile decoded once a pass of 64 or 128 rows), then each row sums its slots in
// slot order.

// offsets [E+1]; pos_of_pair [P] (-1: id out of range); pair_of_pos, expert_of_pos [P];
// by_rows [E]: the experts by their row count, most first (ties in index order; E <= 1024, else
// in index order), the order in which the grouped kernel's blocks take them, so that
// the largest experts do not start last and leave the SMs idle behind them.
__global__ void __launch_bounds__(1024) sort_pairs_kernel(const int32_t *__restrict__ ids, int P, int E,
                                                          int *offsets, int *pos_of_pair,
                                                          int *pair_of_pos, int *expert_of_pos,
                                                          int *by_rows)
{
    pdl_prologue();
    extern __shared__ int sort_s[]; // count[E], cursor[E]
    int *count = sort_s, *cursor = sort_s + E;
    int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, nwarps = blockDim.x >> 5;
    for (int i = tid; i < E; i += blockDim.x)
        count[i] = 0;
    __syncthreads();
    for (int p = tid; p < P; p += blockDim.x) {
        int e = ids[p];
        if (e >= 0 && e < E)
            atomicAdd(&count[e], 1);
    }
    __syncthreads();
    if (tid == 0) {
        int sum = 0;
        for (int e = 0; e < E; e++) {
            offsets[e] = sum;
            cursor[e] = sum;
            sum += count[e];
        }
        offsets[E] = sum;
    }
    for (int i = tid; i < E; i += blockDim.x) {
        int rank = i;
        if (E <= 1024) {
            rank = 0;
            for (int j = 0; j < E; j++)
                rank += count[j] > count[i] || (count[j] == count[i] && j < i);
        }
        by_rows[rank] = i;
    }
    __syncthreads();
    // placement in pair order: tiles of blockDim pairs, warps one after another within a tile
    unsigned lt = (1u << lane) - 1u;
    for (int base = 0; base < P; base += blockDim.x) {
        int p = base + tid;
        int e = p < P ? ids[p] : -1;
        bool valid = p < P && e >= 0 && e < E;
        for (int w = 0; w < nwarps; w++) {
            if (warp == w) {
                unsigned peers = __match_any_sync(0xFFFFFFFFu, valid ? e : -1);
                int leader = __ffs(peers) - 1;
                int start = 0;
                if (valid && lane == leader) {
                    start = cursor[e];
                    cursor[e] = start + __popc(peers);
                }
                start = __shfl_sync(0xFFFFFFFFu, start, leader);
                if (valid) {
                    int pos = start + __popc(peers & lt);
                    pos_of_pair[p] = pos;
                    pair_of_pos[pos] = p;
                    expert_of_pos[pos] = e;
                } else if (p < P) {
                    pos_of_pair[p] = -1;
                }
            }
            __syncthreads();
        }
    }
}

// xg[pos] = fp16(H128(x[row] . gate_suh[e])), xu likewise with up's suh; one warp per 128-block.
__global__ void moe_rotate_in_kernel(const float *__restrict__ x, const int *__restrict__ offsets,
                                     const int *__restrict__ pair_of_pos,
                                     const int *__restrict__ expert_of_pos, int E, int slots,
                                     const __half *__restrict__ gate_suh,
                                     const __half *__restrict__ up_suh, __half *__restrict__ xg,
                                     __half *__restrict__ xu, int H)
{
    pdl_prologue();
    int pos = blockIdx.x; // pairs along x: a chunk's pairs may pass grid y's 65535
    if (pos >= offsets[E])
        return;
    int lane = threadIdx.x & 31;
    int block = blockIdx.y * (blockDim.x / 32) + (threadIdx.x >> 5);
    if (block * 128 >= H)
        return;
    int row = pair_of_pos[pos] / slots, e = expert_of_pos[pos];
    int col = block * 128 + 4 * lane;
    float4 xv = *reinterpret_cast<const float4 *>(x + (size_t)row * H + col);
    float g[4] = {xv.x, xv.y, xv.z, xv.w}, u[4] = {xv.x, xv.y, xv.z, xv.w};
#pragma unroll
    for (int i = 0; i < 4; i++) {
        g[i] *= __half2float(gate_suh[(size_t)e * H + col + i]);
        u[i] *= __half2float(up_suh[(size_t)e * H + col + i]);
    }
    fwht128_warp(g);
    fwht128_warp(u);
    uint2 pg = {h2_bits(__floats2half2_rn(g[0], g[1])), h2_bits(__floats2half2_rn(g[2], g[3]))};
    uint2 pu = {h2_bits(__floats2half2_rn(u[0], u[1])), h2_bits(__floats2half2_rn(u[2], u[3]))};
    *reinterpret_cast<uint2 *>(xg + (size_t)pos * H + col) = pg;
    *reinterpret_cast<uint2 *>(xu + (size_t)pos * H + col) = pu;
}

// Between the projections: g = H(zg) . gate_svh, u = H(zu) . up_svh, h = min(g, L) silu-gated
// * clamp(u, -L, L), then xd = fp16(H(h . down_suh)).
__global__ void moe_mid_kernel(const float *__restrict__ zg, const float *__restrict__ zu,
                               const int *__restrict__ offsets, const int *__restrict__ expert_of_pos,
                               int E, const __half *__restrict__ gate_svh,
                               const __half *__restrict__ up_svh, const __half *__restrict__ down_suh,
                               float limit, __half *__restrict__ xd, int I)
{
    pdl_prologue();
    int pos = blockIdx.x; // pairs along x, as in moe_rotate_in_kernel
    if (pos >= offsets[E])
        return;
    int lane = threadIdx.x & 31;
    int block = blockIdx.y * (blockDim.x / 32) + (threadIdx.x >> 5);
    if (block * 128 >= I)
        return;
    int e = expert_of_pos[pos];
    int col = block * 128 + 4 * lane;
    float4 g4 = *reinterpret_cast<const float4 *>(zg + (size_t)pos * I + col);
    float4 u4 = *reinterpret_cast<const float4 *>(zu + (size_t)pos * I + col);
    float g[4] = {g4.x, g4.y, g4.z, g4.w}, u[4] = {u4.x, u4.y, u4.z, u4.w}, h[4];
    fwht128_warp(g);
    fwht128_warp(u);
#pragma unroll
    for (int i = 0; i < 4; i++) {
        float gg = fminf(g[i] * __half2float(gate_svh[(size_t)e * I + col + i]), limit);
        float uu = u[i] * __half2float(up_svh[(size_t)e * I + col + i]);
        uu = fminf(fmaxf(uu, -limit), limit);
        h[i] = gg / (1.0f + expf(-gg)) * uu * __half2float(down_suh[(size_t)e * I + col + i]);
    }
    fwht128_warp(h);
    uint2 ph = {h2_bits(__floats2half2_rn(h[0], h[1])), h2_bits(__floats2half2_rn(h[2], h[3]))};
    *reinterpret_cast<uint2 *>(xd + (size_t)pos * I + col) = ph;
}

// y[row] = sum over slots in slot order of weight * (H(zd[pos]) . down_svh[e]).
__global__ void moe_combine_kernel(const float *__restrict__ zd, const int *__restrict__ pos_of_pair,
                                   const int *__restrict__ expert_of_pos,
                                   const float *__restrict__ weights, int slots,
                                   const __half *__restrict__ down_svh, float *__restrict__ y, int H)
{
    pdl_prologue();
    int row = blockIdx.y, lane = threadIdx.x & 31;
    int block = blockIdx.x * (blockDim.x / 32) + (threadIdx.x >> 5);
    if (block * 128 >= H)
        return;
    int col = block * 128 + 4 * lane;
    float acc[4] = {0.f, 0.f, 0.f, 0.f};
    for (int s = 0; s < slots; s++) {
        int pos = pos_of_pair[row * slots + s];
        if (pos < 0)
            continue;
        int e = expert_of_pos[pos];
        float wt = weights[row * slots + s];
        float4 z4 = *reinterpret_cast<const float4 *>(zd + (size_t)pos * H + col);
        float v[4] = {z4.x, z4.y, z4.z, z4.w};
        fwht128_warp(v);
#pragma unroll
        for (int i = 0; i < 4; i++)
            acc[i] += v[i] * __half2float(down_svh[(size_t)e * H + col + i]) * wt;
    }
    *reinterpret_cast<float4 *>(y + (size_t)row * H + col) = make_float4(acc[0], acc[1], acc[2], acc[3]);
}

// The grouped products' arguments: up to two matrices of the same shape in one launch
// (blockIdx.y), every expert (blockIdx.z), z[pos][out] for the expert's rows offsets[e] ..
// offsets[e+1]-1.
struct grouped_args {
    const uint32_t *trellis[2];
    const __half *xh[2];
    float *z[2];
    const int *offsets;
    const int *order; // the experts in the order blocks take them (null: index order)
    int in, out;
};

// The grouped products, the whole k range in one block (no split, so plain stores: the result does
// not depend on timing). A block of 4 warps owns 128 columns (8 n-tiles) of one expert and takes
// up to 16 MTW of its rows a pass (MTW 4: 64 rows, MTW 8: 128). Each warp takes kWarpNT (2)
// n-tiles and every m-tile of the pass: it decodes each of its B fragments once, straight into
// registers (no shared fragments, no barrier between the decode and the mma), and feeds them to
// the MTW m-tiles, each A fragment from shared memory by ldmatrix once for both n-tiles (8 warps
// of one n-tile each read every A fragment 8 times a block, which bounded them more than the
// decode did). The activations and the trellis words come
// through a ring of kPipeStages shared-memory stages of kPipeSK k-tiles, filled by cp.async
// kPipeStages - 1 stages ahead, one barrier a stage. Each output element is one fp32 accumulator
// fed by mma16816 over the k-tiles in ascending order with the same A and pair-form (decode_k4 /
// decode_any) B fragments at either MTW: the same bits.
constexpr int kPipeSK = 2;     // k-tiles a stage (divides in / 16, a multiple of 8)
constexpr int kPipeStages = 4; // stages in the ring
constexpr int kPipeNT = 8;     // n-tiles a block (128 columns)

constexpr int kWarpNT = 2;     // n-tiles a warp: each A fragment serves both

template <int K, int MTW>
struct pipe_shape {
    static constexpr int kThreadsB = kPipeNT / kWarpNT * 32;      // threads a block
    static constexpr int kRows = 16 * MTW;                        // rows a pass
    static constexpr int kPitch = kPipeSK * 16 + 8;               // halves a row: 80 bytes
    static constexpr int kABytes = kRows * kPitch * 2;            // a stage's activations
    static constexpr int kWBytes = kPipeSK * kPipeNT * 8 * K * 4; // a stage's trellis words
    static constexpr int kStageBytes = kABytes + kWBytes;         // multiple of 16
    static constexpr int kSmem = kPipeStages * kStageBytes;
};

// The blocks an SM the registers are cut for: 4 where a thread's accumulators are 64 registers
// (MTW 4); at 128 (MTW 8) 3 for the 4-bit mcg and mul1 decodes (the checkpoint's experts: 168
// registers, no spills on sm_90 or sm_121; 12 warps an SM hide the mma and decode latencies that
// 8 left bare when an expert's pass is part-full), else 2 (the other widths spill at 168).
template <int K, int CB, int MTW>
constexpr int pipe_min_blocks()
{
    return MTW <= 4 ? 4 : K == 4 && CB != 0 ? 3 : 2;
}

// cp.async of 16 bytes to a shared-memory address; src_bytes 0 writes zeros.
__device__ __forceinline__ void cp_async16_s(uint32_t dst, const void *gmem, int src_bytes)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(gmem),
                 "r"(src_bytes));
}

__device__ __forceinline__ void cp_async_commit()
{
    asm volatile("cp.async.commit_group;\n" ::);
}

// decode_k4_fast's constants, from constant memory so that the compiler keeps them in registers.
__constant__ uint32_t c_grouped_consts[3] = {0x8FFF8FFFu, 0x3B603B60u, 0xFFFF0000u};

template <int N>
__device__ __forceinline__ void cp_async_wait()
{
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// The A fragment of one 16 x 16 tile from shared memory (rows of `pitch` halves): lane l gives
// the address of row l & 15, column 8 (l >> 4), as mma16816 wants a[0..3].
__device__ __forceinline__ void ldmatrix_a(uint32_t a[4], const __half *tile, int pitch, int lane)
{
    uint32_t addr = static_cast<uint32_t>(
        __cvta_generic_to_shared(tile + (lane & 15) * pitch + (lane >> 4) * 8));
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(a[0]), "=r"(a[1]), "=r"(a[2]), "=r"(a[3])
                 : "r"(addr)
                 : "memory");
}

// One stage of a warp: kPipeSK k-tiles in order, each of the warp's kWarpNT n-tiles (nt0 ..) decoded
// and multiplied into the warp's m-tiles; a_s: the stage's first activation row, w_s: the stage's
// trellis words. kFull: all MTW m-tiles (mact) hold rows.
template <int K, int CB, int MTW, bool kFull>
__device__ __forceinline__ void pipe_stage(const __half *a_s, const uint32_t *w_s, int nt0, int mact,
                                           int lane, const decode_consts &dc,
                                           float acc[MTW][2 * kWarpNT][4])
{
    constexpr int kPitch = pipe_shape<K, MTW>::kPitch, kWords = 8 * K;
#pragma unroll
    for (int s = 0; s < kPipeSK; s++) {
        uint32_t b[kWarpNT][4];
#pragma unroll
        for (int j = 0; j < kWarpNT; j++) {
            const uint32_t *tw = w_s + (s * kPipeNT + nt0 + j) * kWords;
            if (K == 4)
                decode_k4_fast<CB>(tw[lane], tw[(lane + 31) & 31], dc, b[j]);
            else
                decode_any_shared<K, CB>(tw, lane, b[j]);
        }
#pragma unroll
        for (int i = 0; i < MTW; i++)
            if (kFull || i < mact) {
                uint32_t a[4];
                ldmatrix_a(a, a_s + i * 16 * kPitch + s * 16, kPitch, lane);
#pragma unroll
                for (int j = 0; j < kWarpNT; j++) {
                    mma16816(acc[i][2 * j], a, b[j][0], b[j][1]);
                    mma16816(acc[i][2 * j + 1], a, b[j][2], b[j][3]);
                }
            }
    }
}

template <int K, int CB, int MTW>
__global__ void __launch_bounds__(pipe_shape<K, MTW>::kThreadsB, pipe_min_blocks<K, CB, MTW>())
    grouped_pipe_kernel(grouped_args g)
{
    pdl_prologue();
    using S = pipe_shape<K, MTW>;
    constexpr int kWords = 8 * K, kT = S::kThreadsB;
    extern __shared__ __align__(16) unsigned char pipe_smem[];
    int e = g.order ? g.order[blockIdx.z] : blockIdx.z, which = blockIdx.y;
    int rb = g.offsets[e], re = g.offsets[e + 1];
    if (rb >= re)
        return;
    int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, nt0 = warp * kWarpNT;
    int in = g.in, out = g.out, ntiles = out / 16, ktiles = in / 16;
    const size_t kstride = (size_t)ntiles * kWords; // words between k-tiles
    // the block's kPipeNT n-tiles at k-tile 0
    const uint32_t *trellis = (which ? g.trellis[1] : g.trellis[0]) +
                              (size_t)e * ktiles * kstride + (size_t)blockIdx.x * kPipeNT * kWords;
    const __half *xh = which ? g.xh[1] : g.xh[0];
    float *z = which ? g.z[1] : g.z[0];
    int gq = lane >> 2, t = lane & 3;
    int nstages = ktiles / kPipeSK;
    const decode_consts dc = {c_grouped_consts[0], c_grouped_consts[1], c_grouped_consts[2]};
    for (int r0 = rb; r0 < re; r0 += S::kRows) {
        int nrows = min(S::kRows, re - r0), loaded = (nrows + 15) & ~15;
        int mact = loaded / 16; // the pass's m-tiles holding rows of the expert (1 .. MTW)
        __syncthreads(); // the previous pass is done with the ring
        // this thread's copies, each a 16-byte chunk, at stage 0 and slot 0: activation rows
        // a_row + c * kRowStep, c < kAChunks, part a_part of 2 kPipeSK (zeros past the expert, none
        // past its last m-tile); trellis chunks tid + c * kT (k-tile of the stage i / (2K kPipeNT),
        // chunk i % (2K kPipeNT) of the block's tiles: 32K kPipeNT bytes a k-tile)
        constexpr int kRowStep = kT / (kPipeSK * 2);
        constexpr int kAChunks = (S::kRows + kRowStep - 1) / kRowStep;
        int a_row = tid / (kPipeSK * 2), a_part = tid % (kPipeSK * 2);
        const __half *a_src = xh + (size_t)(r0 + min(a_row, nrows - 1)) * in + a_part * 8;
        uint32_t base = static_cast<uint32_t>(__cvta_generic_to_shared(pipe_smem));
        uint32_t a_dst = base + (a_row * S::kPitch + a_part * 8) * 2;
        constexpr int kWChunks = kPipeSK * kPipeNT * 2 * K;
        constexpr int kWPer = (kWChunks + kT - 1) / kT; // trellis chunks a thread
        // stage st into its slot (an empty group past the last stage, so the counts hold)
        auto issue = [&](int st) {
            if (st < nstages) {
                uint32_t slot = (st % kPipeStages) * S::kStageBytes;
                int k0 = st * kPipeSK * 16;
#pragma unroll
                for (int c = 0; c < kAChunks; c++) {
                    int row = a_row + c * kRowStep;
                    bool ok = row < nrows;
                    if (row < loaded)
                        cp_async16_s(a_dst + slot + c * kRowStep * S::kPitch * 2,
                                     (ok ? a_src + (size_t)c * kRowStep * in : a_src) + k0,
                                     ok ? 16 : 0);
                }
#pragma unroll
                for (int c = 0; c < kWPer; c++) {
                    int wi = tid + c * kT;
                    if (kWChunks % kT == 0 || wi < kWChunks)
                        cp_async16_s(base + S::kABytes + wi * 16 + slot,
                                     trellis + (size_t)(wi / (2 * K * kPipeNT)) * kstride +
                                         (wi % (2 * K * kPipeNT)) * 4 +
                                         (size_t)st * kPipeSK * kstride,
                                     16);
                }
            }
            cp_async_commit();
        };
        float acc[MTW][2 * kWarpNT][4] = {};
#pragma unroll
        for (int st = 0; st < kPipeStages - 1; st++)
            issue(st);
        for (int st = 0; st < nstages; st++) {
            cp_async_wait<kPipeStages - 2>(); // this thread's copies of stage st are done
            __syncthreads(); // everyone's; and stage st - 1's slot is read by every warp
            issue(st + kPipeStages - 1);
            const unsigned char *slot = pipe_smem + (st % kPipeStages) * S::kStageBytes;
            const __half *a_s = reinterpret_cast<const __half *>(slot);
            const uint32_t *w_s = reinterpret_cast<const uint32_t *>(slot + S::kABytes);
            if (mact == MTW) // every m-tile: no branches between the decode and the mma
                pipe_stage<K, CB, MTW, true>(a_s, w_s, nt0, MTW, lane, dc, acc);
            else
                pipe_stage<K, CB, MTW, false>(a_s, w_s, nt0, mact, lane, dc, acc);
        }
#pragma unroll
        for (int i = 0; i < MTW; i++) {
            if (i >= mact)
                continue;
            int row0 = r0 + i * 16 + gq;
#pragma unroll
            for (int h = 0; h < 2 * kWarpNT; h++) {
                int col = (blockIdx.x * kPipeNT + nt0 + h / 2) * 16 + (h % 2) * 8 + 2 * t;
                if (row0 < re)
                    *reinterpret_cast<float2 *>(z + (size_t)row0 * out + col) =
                        make_float2(acc[i][h][0], acc[i][h][1]);
                if (row0 + 8 < re)
                    *reinterpret_cast<float2 *>(z + (size_t)(row0 + 8) * out + col) =
                        make_float2(acc[i][h][2], acc[i][h][3]);
            }
        }
    }
}

// Which kernel a launch takes (kern_exl3_set_grouped). Auto: 128 rows a pass (PIPE_128_ONCE)
// where the chunk gives the experts kAuto128Rows rows each on average, else 64 (PIPE_64). 128
// rows a pass, each tile decoded once: the fastest from 128 rows an expert; 64 rows a pass
// fastest at 16-64 rows an expert when every expert has the same rows. Routed rows are uneven
// (many experts past 64 rows take the 64-row kernel two passes): random chunks of 2,048 / 2,560 /
// 2,816 / 3,072 rows (57 / 71 / 78 / 85 an expert on average) ran the 128-row kernel 1.18 / 0.92 /
// 0.88 / 0.86 times as long as the 64-row one (H100, bench_exl3), so the switch is where that
// crosses 1.
// 128 rows a pass decode each k-tile once for twice the rows but hold twice the accumulators
// a thread, so fewer warps fit an SM (12 or 8, not 16) and an expert with few rows leaves half of a
// pass's m-tiles empty (bench_exl3 times both at 16-512 rows an expert, bench_cuda_engine at
// each chunk).
int g_grouped = KERN_EXL3_GROUPED_AUTO;
constexpr int kAuto128Rows = 67;

// A launch: the ring in dynamic shared memory (the limit raised past 48 KB once a device, where
// a shape needs it); grid.x: out / 128 blocks of 128 columns.
template <int K, int CB, int MTW>
cudaError_t grouped_pipe_launch(const grouped_args &g, dim3 grid, cudaStream_t st)
{
    using S = pipe_shape<K, MTW>;
    if (S::kSmem > 48 * 1024) {
        cudaError_t raised = raise_smem_once<grouped_pipe_kernel<K, CB, MTW>>(
            S::kSmem, "the grouped EXL3 expert kernel");
        if (raised != cudaSuccess)
            return raised;
    }
    launch(grouped_pipe_kernel<K, CB, MTW>, grid, S::kThreadsB, S::kSmem, st, g);
    return cudaGetLastError();
}

// variant: PIPE_64 or PIPE_128_ONCE (grouped_launch resolves AUTO).
template <int K, int CB>
cudaError_t grouped_variant(int variant, const grouped_args &g, dim3 grid, cudaStream_t st)
{
    if (variant == KERN_EXL3_GROUPED_PIPE_64)
        return grouped_pipe_launch<K, CB, 4>(g, grid, st);
    return grouped_pipe_launch<K, CB, 8>(g, grid, st);
}

template <int K>
cudaError_t grouped_cb(int codebook, int variant, const grouped_args &g, int mats, int E,
                       cudaStream_t st)
{
    dim3 grid(g.out / (16 * kPipeNT), mats, E);
    switch (codebook) {
    case 0: return grouped_variant<K, 0>(variant, g, grid, st);
    case 1: return grouped_variant<K, 1>(variant, g, grid, st);
    default: return grouped_variant<K, 2>(variant, g, grid, st);
    }
}

// pairs / E: the rows an expert gets on average.
cudaError_t grouped_launch(int bits, int codebook, const grouped_args &g, int mats, int E, int pairs,
                           cudaStream_t st)
{
    int v = g_grouped;
    if (v == KERN_EXL3_GROUPED_AUTO)
        v = pairs >= kAuto128Rows * E ? KERN_EXL3_GROUPED_PIPE_128_ONCE : KERN_EXL3_GROUPED_PIPE_64;
    switch (bits) {
    case 1: return grouped_cb<1>(codebook, v, g, mats, E, st);
    case 2: return grouped_cb<2>(codebook, v, g, mats, E, st);
    case 3: return grouped_cb<3>(codebook, v, g, mats, E, st);
    case 4: return grouped_cb<4>(codebook, v, g, mats, E, st);
    case 5: return grouped_cb<5>(codebook, v, g, mats, E, st);
    case 6: return grouped_cb<6>(codebook, v, g, mats, E, st);
    case 7: return grouped_cb<7>(codebook, v, g, mats, E, st);
    default: return grouped_cb<8>(codebook, v, g, mats, E, st);
    }
}

// How a path splits the k range: by the layer's shape and the SM count only, never by the row
// count (so a row's sums are the same operations at any row count of the path).
struct k_plan {
    int split;  // blocks along k
    int ksteps; // k-tiles a block
    int parts;  // partial sums stored per output element
};

// GEMV (rows <= 16): about two blocks per SM, at least 8 k-tiles a warp; 4 parts a block.
k_plan gemv_plan(const kern_exl3_linear *l, int sms)
{
    int col_blocks = l->out / 128, ktiles = l->in / 16;
    int most = ktiles / 32 > 0 ? ktiles / 32 : 1;
    int split = (2 * sms + col_blocks - 1) / col_blocks;
    split = split < 1 ? 1 : split > most ? most : split;
    int ksteps = (ktiles + split - 1) / split;
    split = (ktiles + ksteps - 1) / ksteps;
    return {split, ksteps, 4 * split};
}

// Prefill GEMM: as many k parts as fill two blocks an SM with one 64-row block, at most
// kPrefillSplit (the parts' memory grows with the rows), whole kStage steps a part.
constexpr int kPrefillSplit = 4;

k_plan prefill_plan(const kern_exl3_linear *l, int sms)
{
    int col_blocks = l->out / 128, ktiles = l->in / 16;
    int most = ktiles / 16 > 0 ? ktiles / 16 : 1;
    most = most < kPrefillSplit ? most : kPrefillSplit;
    int split = (2 * sms + col_blocks - 1) / col_blocks;
    split = split < 1 ? 1 : split > most ? most : split;
    int ksteps = (ktiles + split - 1) / split;
    ksteps = (ksteps + kStage - 1) / kStage * kStage;
    split = (ktiles + ksteps - 1) / ksteps;
    return {split, ksteps, split};
}

template <int K, int CB>
cudaError_t launch_main(const kern_exl3_linear *l, const __half *xh, float *z, int rows,
                        cudaStream_t st, const k_plan &p)
{
    const uint32_t *tr = static_cast<const uint32_t *>(l->trellis);
    int col_blocks = l->out / 128;
    if (rows <= 16) {
        dim3 grid(col_blocks, p.split, 1);
        launch(gemv_kernel<K, CB>, grid, kThreads, 0, st, tr, xh, z, rows, l->in, l->out, p.ksteps);
    } else {
        int row_blocks = (rows + kPrefillRows - 1) / kPrefillRows;
        dim3 grid(col_blocks, p.split, row_blocks);
        launch(prefill_kernel<K, CB>, grid, kThreads, 0, st, tr, xh, z, rows, l->in, l->out,
               p.ksteps);
    }
    return cudaGetLastError();
}

template <int K>
cudaError_t launch_cb(const kern_exl3_linear *l, const __half *xh, float *z, int rows,
                      cudaStream_t st, const k_plan &p)
{
    switch (l->codebook) {
    case 0:
        return launch_main<K, 0>(l, xh, z, rows, st, p);
    case 1:
        return launch_main<K, 1>(l, xh, z, rows, st, p);
    default:
        return launch_main<K, 2>(l, xh, z, rows, st, p);
    }
}

size_t align256(size_t n)
{
    return (n + 255) & ~(size_t)255;
}

// The parts' f32 elements for up to `rows` rows: the largest split either path may take on any
// device (the SM count only lowers it), so the size needs no device and grows with rows.
size_t parts_elems(const kern_exl3_linear *l, int rows)
{
    int ktiles = l->in / 16;
    size_t gemv = (size_t)4 * (ktiles / 32 > 0 ? ktiles / 32 : 1) * (rows < 16 ? rows : 16);
    int pre = ktiles / 16 > 0 ? ktiles / 16 : 1;
    size_t prefill = rows > 16 ? (size_t)(pre < kPrefillSplit ? pre : kPrefillSplit) * rows : 0;
    return (gemv > prefill ? gemv : prefill) * l->out;
}

} // namespace

extern "C" size_t kern_exl3_matmul_workspace(const kern_exl3_linear *l, int rows)
{
    if (!l || rows < 1 || l->in < 128 || l->out < 128)
        return 0;
    return align256((size_t)rows * l->in * sizeof(__half)) + align256(parts_elems(l, rows) * sizeof(float));
}

extern "C" int kern_exl3_matmul(const kern_exl3_linear *l, const float *x, float *y, int rows,
                                void *work, void *stream)
{
    if (!l || !x || !y || !work || rows < 1 || l->in <= 0 || l->out <= 0 || l->in % 128 ||
        l->out % 128 || l->bits < 1 || l->bits > 8 || l->codebook < 0 || l->codebook > 2 ||
        !l->trellis || !l->suh || !l->svh || rows > 65535)
        return -1;
    int sms = 0;
    cudaError_t rc = device_sm_count(&sms);
    if (rc != cudaSuccess)
        return (int)rc;
    cudaStream_t st = static_cast<cudaStream_t>(stream);
    __half *xh = static_cast<__half *>(work);
    float *z = reinterpret_cast<float *>(static_cast<char *>(work) +
                                         align256((size_t)rows * l->in * sizeof(__half)));
    int warps = kThreads / 32;
    dim3 gin((l->in / 128 + warps - 1) / warps, rows);
    launch(rotate_in_kernel, gin, kThreads, 0, st, x, static_cast<const __half *>(l->suh), xh,
           l->in);
    rc = cudaGetLastError();
    if (rc != cudaSuccess)
        return (int)rc;
    k_plan p = rows <= 16 ? gemv_plan(l, sms) : prefill_plan(l, sms);
    switch (l->bits) {
    case 1: rc = launch_cb<1>(l, xh, z, rows, st, p); break;
    case 2: rc = launch_cb<2>(l, xh, z, rows, st, p); break;
    case 3: rc = launch_cb<3>(l, xh, z, rows, st, p); break;
    case 4: rc = launch_cb<4>(l, xh, z, rows, st, p); break;
    case 5: rc = launch_cb<5>(l, xh, z, rows, st, p); break;
    case 6: rc = launch_cb<6>(l, xh, z, rows, st, p); break;
    case 7: rc = launch_cb<7>(l, xh, z, rows, st, p); break;
    default: rc = launch_cb<8>(l, xh, z, rows, st, p); break;
    }
    if (rc != cudaSuccess)
        return (int)rc;
    dim3 gout((l->out / 128 + warps - 1) / warps, rows);
    launch(rotate_out_kernel, gout, kThreads, 0, st, z, p.parts, rows,
           static_cast<const __half *>(l->svh), static_cast<const __half *>(l->bias), y, l->out);
    return (int)cudaGetLastError();
}

namespace {

// The prefill workspace: sort tables, then the fp16 inputs and f32 products of every pair. The
// gate and up inputs (xg, xu) are read by their products alone, before the down product runs:
// its f32 results (zd, as many bytes as the two) take their room.
struct prefill_layout {
    int *offsets, *pos_of_pair, *pair_of_pos, *expert_of_pos, *by_rows;
    __half *xg, *xu, *xd;
    float *zg, *zu, *zd;
    size_t bytes;
};

prefill_layout prefill_carve(const kern_exl3_experts *ex, int rows, int slots, void *work)
{
    size_t P = (size_t)rows * slots, H = (size_t)ex->hidden, I = (size_t)ex->inter;
    char *base = static_cast<char *>(work);
    size_t off = 0;
    prefill_layout l;
    auto take = [&](size_t n) {
        char *p = base ? base + off : nullptr;
        off += align256(n);
        return p;
    };
    l.offsets = reinterpret_cast<int *>(take(((size_t)ex->n_experts + 1) * sizeof(int)));
    l.pos_of_pair = reinterpret_cast<int *>(take(P * sizeof(int)));
    l.pair_of_pos = reinterpret_cast<int *>(take(P * sizeof(int)));
    l.expert_of_pos = reinterpret_cast<int *>(take(P * sizeof(int)));
    l.by_rows = reinterpret_cast<int *>(take((size_t)ex->n_experts * sizeof(int)));
    l.xg = reinterpret_cast<__half *>(take(P * H * sizeof(__half)));
    l.xu = reinterpret_cast<__half *>(take(P * H * sizeof(__half)));
    l.xd = reinterpret_cast<__half *>(take(P * I * sizeof(__half)));
    l.zg = reinterpret_cast<float *>(take(P * I * sizeof(float)));
    l.zu = reinterpret_cast<float *>(take(P * I * sizeof(float)));
    l.zd = reinterpret_cast<float *>(l.xg); // P * H floats: xg's and xu's room, both dead by then
    static_assert(2 * sizeof(__half) == sizeof(float), "xg and xu hold zd's bytes");
    l.bytes = off;
    return l;
}

} // namespace

extern "C" int kern_exl3_set_grouped(int variant)
{
    if (variant != KERN_EXL3_GROUPED_AUTO && variant != KERN_EXL3_GROUPED_PIPE_64 &&
        variant != KERN_EXL3_GROUPED_PIPE_128_ONCE)
        return -1;
    g_grouped = variant;
    return 0;
}

extern "C" int kern_exl3_grouped(void)
{
    return g_grouped;
}

namespace {

// The grouped kernel copies trellis words and activations 16 bytes at a time.
bool grouped_aligned(const void *a, const void *b)
{
    return ((reinterpret_cast<uintptr_t>(a) | reinterpret_cast<uintptr_t>(b)) & 15) == 0;
}

} // namespace

extern "C" int kern_exl3_grouped_product(const void *trellis, int bits, int codebook, int in,
                                         int out, int n_experts, const int *offsets, int pairs,
                                         const void *xh, float *z, void *stream)
{
    if (!trellis || !offsets || !xh || !z || bits < 1 || bits > 8 || codebook < 0 ||
        codebook > 2 || in < 128 || out < 128 || in % 128 || out % 128 || n_experts < 1 ||
        n_experts > 65535 || pairs < 0 || !grouped_aligned(trellis, xh))
        return -1;
    grouped_args g = {};
    g.trellis[0] = g.trellis[1] = static_cast<const uint32_t *>(trellis);
    g.xh[0] = g.xh[1] = static_cast<const __half *>(xh);
    g.z[0] = g.z[1] = z;
    g.offsets = offsets;
    g.in = in;
    g.out = out;
    return (int)grouped_launch(bits, codebook, g, 1, n_experts, pairs,
                               static_cast<cudaStream_t>(stream));
}

extern "C" size_t kern_exl3_moe_prefill_workspace(const kern_exl3_experts *ex, int rows, int slots)
{
    if (!ex || rows < 1 || slots < 1)
        return 0;
    return prefill_carve(ex, rows, slots, nullptr).bytes;
}

extern "C" int kern_exl3_moe_prefill(const kern_exl3_experts *ex, const float *x, const int32_t *ids,
                                     const float *weights, float *y, int rows, int slots, void *work,
                                     void *stream)
{
    if (!ex || !x || !ids || !weights || !y || !work || rows < 1 || slots < 1 || rows > 65535 ||
        (size_t)rows * slots > (size_t)1 << 24 || ex->n_experts < 1 || ex->hidden <= 0 || ex->inter <= 0 ||
        ex->hidden % 128 || ex->inter % 128 || ex->bits < 1 || ex->bits > 8 || ex->codebook < 0 ||
        ex->codebook > 2 || !ex->gate_trellis || !ex->up_trellis || !ex->down_trellis ||
        !grouped_aligned(ex->gate_trellis, ex->up_trellis) || !grouped_aligned(ex->down_trellis, work))
        return -1;
    cudaStream_t st = static_cast<cudaStream_t>(stream);
    int E = ex->n_experts, H = ex->hidden, I = ex->inter, P = rows * slots;
    prefill_layout l = prefill_carve(ex, rows, slots, work);
    if (l.bytes != kern_exl3_moe_prefill_bytes(E, H, I, rows, slots)) // the plan's count
        return -1;
    size_t sort_shared = (size_t)2 * E * sizeof(int);
    if (sort_shared > 48 * 1024)
        return -1;
    launch(sort_pairs_kernel, 1, 1024, sort_shared, st, ids, P, E, l.offsets, l.pos_of_pair,
           l.pair_of_pos, l.expert_of_pos, l.by_rows);
    cudaError_t rc = cudaGetLastError();
    if (rc != cudaSuccess)
        return (int)rc;
    int warps = kThreads / 32;
    dim3 gin(P, (H / 128 + warps - 1) / warps);
    launch(moe_rotate_in_kernel, gin, kThreads, 0, st, x, l.offsets, l.pair_of_pos, l.expert_of_pos,
           E, slots, static_cast<const __half *>(ex->gate_suh),
           static_cast<const __half *>(ex->up_suh), l.xg, l.xu, H);
    if ((rc = cudaGetLastError()) != cudaSuccess)
        return (int)rc;
    grouped_args gu = {};
    gu.trellis[0] = static_cast<const uint32_t *>(ex->gate_trellis);
    gu.trellis[1] = static_cast<const uint32_t *>(ex->up_trellis);
    gu.xh[0] = l.xg;
    gu.xh[1] = l.xu;
    gu.z[0] = l.zg;
    gu.z[1] = l.zu;
    gu.offsets = l.offsets;
    gu.order = l.by_rows;
    gu.in = H;
    gu.out = I;
    if ((rc = grouped_launch(ex->bits, ex->codebook, gu, 2, E, P, st)) != cudaSuccess)
        return (int)rc;
    dim3 gmid(P, (I / 128 + warps - 1) / warps);
    launch(moe_mid_kernel, gmid, kThreads, 0, st, l.zg, l.zu, l.offsets, l.expert_of_pos, E,
           static_cast<const __half *>(ex->gate_svh), static_cast<const __half *>(ex->up_svh),
           static_cast<const __half *>(ex->down_suh), ex->swiglu_limit, l.xd, I);
    if ((rc = cudaGetLastError()) != cudaSuccess)
        return (int)rc;
    grouped_args dn = {};
    dn.trellis[0] = dn.trellis[1] = static_cast<const uint32_t *>(ex->down_trellis);
    dn.xh[0] = dn.xh[1] = l.xd;
    dn.z[0] = dn.z[1] = l.zd;
    dn.offsets = l.offsets;
    dn.order = l.by_rows;
    dn.in = I;
    dn.out = H;
    if ((rc = grouped_launch(ex->bits, ex->codebook, dn, 1, E, P, st)) != cudaSuccess)
        return (int)rc;
    dim3 gout((H / 128 + warps - 1) / warps, rows);
    launch(moe_combine_kernel, gout, kThreads, 0, st, l.zd, l.pos_of_pair, l.expert_of_pos, weights,
           slots, static_cast<const __half *>(ex->down_svh), y, H);
    return (int)cudaGetLastError();
}
