// exl3_moe.cu: the routed-expert MLP of GLM-5.3-Flash decode steps in one launch: every
// selected expert's gate/up, clamped SwiGLU, down and routing weights, straight from EXL3 trellises.
//
// A persistent grid takes work items by ticket, in this order:
//   1. zero the rows of y that have no valid expert;
//   2. gate/up items (group, 128-column block, k quarter): the two warps of a column strip add
//      their k halves in shared memory and store the quarter's partial sums; the last quarter of
//      a column block to finish sums the four in quarter order and runs the epilogue (output
//      rotation x svh, SwiGLU, x down's suh, input rotation): the down projection's fp16 input;
//   3. down items (group, 128-column block): wait until the group's gate/up column blocks are
//      done; the four k-quarter warps' sums are added in quarter order, rotated, x svh x routing
//      weight, and stored per pair; the last pair of a row to finish a column block sums the
//      row's slots in slot order into y.
// A group is up to 16 (row, slot) pairs routed to one expert: its weights are read once.
// Deterministic and batch-invariant: no float atomics; every sum has a fixed order, and a row's
// operations are the same whatever the row count, its place in the call, or the other rows in
// its group (the mma computes each output element from its own input column only). Counters
// (integers) only say who finishes; they reset themselves, so the workspace stays ready.
// The strips' trellis decode, on the integer ALU pipe, is the kernel's busiest work, so they
// spend as few operations a tile as they can: paired products, the trellis words straight from
// registers, the inputs stored as duplicated halves.
#include <cstdint>
#include <type_traits>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "exl3_device.cuh"
#include "kernels.h"
#include "launch.cuh"

namespace {

using namespace exl3;

constexpr int kThreads = 256;
constexpr int kMaxPairs = KERN_EXL3_MOE_MAX_PAIRS;
constexpr int kGroupRows = 16;
// The gate/up k splits and the blocks an SM the register budget is cut for (128 registers at 2).
// Fixed, not build switches: 3 blocks an SM and a 2-way split ran slower (H200, 2026-12-03,
// tests/gpu/variants.sh), and a prefetch of 8 k-steps (below) spills 296 bytes at 128 registers;
// another value is timed as a candidate on a branch.
constexpr int kQuarters = 4;
constexpr int kMinBlocksSM = 2;

struct moe_ws {
    int ticket;
    int exited;
    int pad[2];
    int done_gu[kMaxPairs];   // column blocks of gate/up finished, per group
    int done_down[kMaxPairs]; // column blocks of down finished, per group
    // followed by: int parts[kMaxPairs][inter/128] (quarters done); int rows_done[kMaxPairs]
    // [hidden/128] (pairs of a row done); float z[quarter][pairs][2][inter] (gate/up partials);
    // half xd[pairs][inter]; float yd[pairs][hidden] (weighted down outputs)
};

struct moe_args {
    kern_exl3_experts ex;
    const float *x;
    const int32_t *ids;
    const float *weights;
    float *y;
    int rows, slots;
    moe_ws *ws;
    int *parts;
    int *rows_done;
    float *z;
    __half *xd;
    float *yd;
};

__device__ __forceinline__ int ld_acquire(const int *p)
{
    int v;
    asm volatile("ld.acquire.gpu.global.s32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
    return v;
}

// Groups of pairs by expert, the same in every block: pairs in order, an expert's pairs in
// chunks of 16. Fills g_expert, g_count and g_member (pair ids), returns the group count.
__device__ int build_groups(const moe_args &a, int *s_ids, int *s_aux, int *g_expert,
                            int *g_count, uint16_t *g_member)
{
    int pairs = a.rows * a.slots;
    int p = threadIdx.x;
    for (int i = threadIdx.x; i < pairs; i += blockDim.x) {
        int e = a.ids[i];
        s_ids[i] = e >= 0 && e < a.ex.n_experts ? e : -1;
    }
    __syncthreads();
    int rank = 0, count = 0, leader_chunks = 0;
    int e = p < pairs ? s_ids[p] : -1;
    if (e >= 0) {
        for (int q = 0; q < pairs; q++) {
            int same = s_ids[q] == e;
            count += same;
            rank += same && q < p;
        }
        if (rank == 0)
            leader_chunks = (count + kGroupRows - 1) / kGroupRows;
    }
    s_aux[p] = leader_chunks;
    __syncthreads();
    // a leader's first group = chunks of leaders before it; members find their leader
    int base = 0;
    if (e >= 0) {
        int leader = -1;
        for (int q = 0; q < pairs && leader < 0; q++)
            if (s_ids[q] == e)
                leader = q;
        for (int q = 0; q < leader; q++)
            base += s_aux[q];
    }
    int total = 0;
    for (int q = 0; q < pairs; q++)
        total += s_aux[q];
    if (e >= 0) {
        int grp = base + rank / kGroupRows;
        g_member[grp * kGroupRows + rank % kGroupRows] = (uint16_t)p;
        if (rank % kGroupRows == 0) {
            g_expert[grp] = e;
            int left = count - rank;
            g_count[grp] = left < kGroupRows ? left : kGroupRows;
        }
    }
    __syncthreads();
    return total;
}

constexpr int kPrefetch = 6; // k-steps of 512 bytes in flight per warp

// Groups of up to 8 rows in the split form (3INST/MCG, 4 bits) keep their inputs in shared
// memory as duplicated halves (each fp16 input x stored as the word x:x), so that the strip loads
// its split fragment with one 16-byte load instead of two 4-byte loads and four PRMT a k-step
// (the layout: dup_pos, dup_ld); twice the inputs' shared memory.
template <int K, int CB>
__host__ __device__ constexpr bool dup_inputs()
{
    return K == 4 && split_form<CB>();
}

__device__ __forceinline__ uint32_t dup_half(uint32_t h2, int hi)
{
    return __byte_perm(h2, 0, hi ? 0x3232 : 0x1010);
}

// The split fragment of k-tile kt from duplicated rows (words [nrows][ldw], each 16-k group
// stored in fragment order, dup_pos): one 16-byte load gives s[0..3] = the words of k 2t, 2t+8,
// 2t+1, 2t+9 of row g, already the two register pairs the mma takes (no moves). Lanes of rows
// past nrows read the last row: the mma's output column of a row depends on its own input column
// only, and those columns are never stored (no zeroing, no predicate).
__device__ __forceinline__ void smem_x_dup(const uint32_t *a_w, int ldw, int nrows, int kt,
                                           uint32_t s[8])
{
    int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    int r = g < nrows ? g : nrows - 1;
    uint4 v = *reinterpret_cast<const uint4 *>(a_w + r * ldw + kt * 16 + 4 * t);
    s[0] = v.x;
    s[1] = v.y;
    s[2] = v.z;
    s[3] = v.w;
}

// Where input k of a row goes in the duplicated layout: within its group of 16, k 2t, 2t+8,
// 2t+1, 2t+9 at words 4t .. 4t+3 (the order smem_x_dup loads).
__device__ __forceinline__ int dup_pos(int k)
{
    return (k & ~15) + 2 * (k & 7) + ((k >> 3) & 1);
}

// Row stride (words) of the duplicated layout for rows of n inputs: n + 16, so that the two rows
// of a quarter-warp's 16-byte loads fall in different banks (n is a multiple of 32).
__host__ __device__ constexpr int dup_ld(int n)
{
    return n + 16;
}

// Stores the 2n fp16 inputs k .. k + 2n - 1 of a row (n words of half pairs, h2) into that row
// of the duplicated layout (row: its first word).
template <int N>
__device__ __forceinline__ void store_dup(uint32_t *row, int k, const uint32_t (&h2)[N])
{
#pragma unroll
    for (int j = 0; j < 2 * N; j++)
        row[dup_pos(k + j)] = dup_half(h2[j >> 1], j & 1);
}

// The input (B) fragment of k-tile kt from rows [nrows][lda] of shared memory: x[0], x[1] rows g
// (k 2t.., 2t+8..), x[2], x[3] rows g + 8 (R16 only); rows past nrows are 0.
template <bool R16>
__device__ __forceinline__ void smem_x(const __half *a_s, int lda, int nrows, int kt, uint32_t x[4])
{
    int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const __half *p0 = a_s + g * lda + kt * 16 + 2 * t;
    bool v0 = g < nrows;
    x[0] = v0 ? *reinterpret_cast<const uint32_t *>(p0) : 0u;
    x[1] = v0 ? *reinterpret_cast<const uint32_t *>(p0 + 8) : 0u;
    if (R16) {
        const __half *p1 = p0 + 8 * lda;
        bool v1 = g + 8 < nrows;
        x[2] = v1 ? *reinterpret_cast<const uint32_t *>(p1) : 0u;
        x[3] = v1 ? *reinterpret_cast<const uint32_t *>(p1 + 8) : 0u;
    } else {
        x[2] = x[3] = 0u;
    }
}

// The decode's constants (decode_consts), from constant memory so that the compiler keeps them
// in registers: the 3INST/MCG mask and flip, the paired products' -65536.
__constant__ uint32_t c_decode_consts[3] = {0x8FFF8FFFu, 0x3B603B60u, 0xFFFF0000u};

// One warp's strip of 4 n-tiles over ksteps k-tiles, weights as the A operand; R16: the group
// has rows 8-15 too. acc[tile][row half][4] (row half 1 is 0 without R16).
// am: the strip's first input element (fp16 [nm][lda], or with dup_inputs and !R16 the words
// [nm][lda] of duplicated halves).
template <int K, int CB, bool R16>
__device__ __forceinline__ void run_strip(const uint32_t *__restrict__ tile0, size_t stride,
                                          int ksteps, uint4 *ring, const void *am, int lda, int nm,
                                          float acc[4][2][4])
{
    decode_consts sm = {c_decode_consts[0], c_decode_consts[1], c_decode_consts[2]};
    auto x_of = [&](int kt, auto &xf) {
        using xf_t = typename std::remove_reference<decltype(xf)>::type;
        if (dup_inputs<K, CB>() && !R16 && xf_t::kSplitForm) {
            smem_x_dup(static_cast<const uint32_t *>(am), lda, nm, kt, xf.s);
        } else {
            smem_x<R16>(static_cast<const __half *>(am), lda, nm, kt, xf.x);
            xf.split();
        }
    };
    strip_w_run<K, CB, kPrefetch, R16>(tile0, stride, ksteps, ring, x_of, sm, acc);
}

__device__ __forceinline__ float half_at(const void *base, size_t i)
{
    return __half2float(static_cast<const __half *>(base)[i]);
}

template <int K, int CB>
__global__ void __launch_bounds__(kThreads, kMinBlocksSM) moe_kernel(moe_args a)
{
    pdl_prologue();
    extern __shared__ __align__(16) unsigned char smem[];
    __shared__ int s_ids[kMaxPairs], s_aux[kMaxPairs];
    __shared__ int g_expert[kMaxPairs], g_count[kMaxPairs];
    __shared__ uint16_t g_member[kMaxPairs * kGroupRows];
    __shared__ int s_ticket, s_flag;

    const int H = a.ex.hidden, I = a.ex.inter;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int cb_gu = I / 128, cb_down = H / 128;
    const int kq = H / kQuarters; // k range of a gate/up item
    constexpr int kWords = 8 * K;
    moe_ws *ws = a.ws;

    if (threadIdx.x == 0)
        s_ticket = atomicAdd(&ws->ticket, 1);
    int ngroups = build_groups(a, s_ids, s_aux, g_expert, g_count, g_member);
    const int n_gu = ngroups * cb_gu * kQuarters;
    const int total = 1 + n_gu + ngroups * cb_down;
    int item = s_ticket;
    __syncthreads();

    while (item < total) {
        // the next ticket travels while this item runs: thread 0 holds it in a register and
        // publishes it to the block (s_ticket) only where it is needed, so that its warp does
        // not wait for the atomic at the item's start
        int next = 0;
        if (threadIdx.x == 0)
            next = atomicAdd(&ws->ticket, 1);
        auto publish_next = [&] {
            if (threadIdx.x == 0)
                s_ticket = next;
        };
        if (item == 0) {
            // rows with no valid expert: nobody else writes them
            for (int r = warp; r < a.rows; r += kThreads / 32) {
                bool any = false;
                for (int s = 0; s < a.slots; s++)
                    any |= s_ids[r * a.slots + s] >= 0;
                if (!any)
                    for (int i = lane; i < H; i += 32)
                        a.y[(size_t)r * H + i] = 0.0f;
            }
            publish_next();
        } else if (item <= n_gu) {
            int idx = item - 1;
            int grp = idx / (cb_gu * kQuarters);
            int c = (idx / kQuarters) % cb_gu;
            int q = idx % kQuarters;
            int e = g_expert[grp], nm = g_count[grp];
            const uint16_t *mem = g_member + grp * kGroupRows;
            int k0 = q * kq;
            __half *a_s = reinterpret_cast<__half *>(smem); // [2][nm][ld]
            const bool dup = dup_inputs<K, CB>() && nm <= 8;
            const int ld = dup ? dup_ld(kq) : kq + 8; // the inputs' row stride (dup: words)
            // the first k-steps' trellis words travel while the inputs are rotated
            int mat = warp >> 2;
            int tn = c * 8 + ((warp >> 1) & 1) * 4;
            int ksteps = kq / 32;
            int ks0 = (warp & 1) * ksteps;
            const uint32_t *tr = static_cast<const uint32_t *>(mat ? a.ex.up_trellis : a.ex.gate_trellis);
            size_t stride = (size_t)(I / 16) * kWords;
            const uint32_t *tile0 =
                tr + (((size_t)e * (H / 16) + k0 / 16 + ks0) * (I / 16) + tn) * kWords;
            uint4 ring[kPrefetch];
            strip_w_prime<K, kPrefetch>(tile0, stride, ksteps, ring);
            // 1. this quarter of each member's input, scaled by gate's / up's suh and rotated
            for (int job = warp; job < 2 * nm * (kq / 128); job += kThreads / 32) {
                int which = job / (nm * (kq / 128));
                int rest = job % (nm * (kq / 128));
                int m = rest / (kq / 128), blk = rest % (kq / 128);
                int row = mem[m] / a.slots;
                int col = k0 + blk * 128 + 4 * lane;
                float4 xv = *reinterpret_cast<const float4 *>(a.x + (size_t)row * H + col);
                const void *suh = which ? a.ex.up_suh : a.ex.gate_suh;
                float v[4] = {xv.x, xv.y, xv.z, xv.w};
#pragma unroll
                for (int i = 0; i < 4; i++)
                    v[i] *= half_at(suh, (size_t)e * H + col + i);
                fwht128_warp(v);
                uint2 packed = {h2_bits(__floats2half2_rn(v[0], v[1])),
                                h2_bits(__floats2half2_rn(v[2], v[3]))};
                size_t at = ((size_t)which * nm + m) * ld;
                if (dup)
                    store_dup(reinterpret_cast<uint32_t *>(smem) + at, blk * 128 + 4 * lane,
                              {packed.x, packed.y});
                else
                    *reinterpret_cast<uint2 *>(a_s + at + blk * 128 + 4 * lane) = packed;
            }
            __syncthreads();
            // 2. warps 0-3 gate, 4-7 up; each 64 columns (w >> 1 & 1) and half the range (w & 1)
            float acc[4][2][4] = {};
            size_t am_at = (size_t)mat * nm * ld + ks0 * 16;
            const void *am = dup ? static_cast<const void *>(reinterpret_cast<uint32_t *>(smem) + am_at)
                                 : static_cast<const void *>(a_s + am_at);
            if (nm > 8)
                run_strip<K, CB, true>(tile0, stride, ksteps, ring, am, ld, nm, acc);
            else
                run_strip<K, CB, false>(tile0, stride, ksteps, ring, am, ld, nm, acc);
            // the k-high warp (w & 1) leaves its sums in shared memory (the inputs are no longer
            // read), the k-low one adds them to its own and stores the quarter's partial sums
            int g = lane >> 2, t = lane & 3;
            float *red = reinterpret_cast<float *>(smem); // [2 mats][nm][128]
            publish_next();
            __syncthreads();
            if (warp & 1) {
#pragma unroll
                for (int j = 0; j < 4; j++)
#pragma unroll
                    for (int h = 0; h < 2; h++)
#pragma unroll
                        for (int i = 0; i < 4; i++) {
                            int row = h * 8 + 2 * t + (i & 1);
                            int col = (tn - c * 8 + j) * 16 + g + 8 * (i >> 1);
                            if (row < nm)
                                red[(mat * nm + row) * 128 + col] = acc[j][h][i];
                        }
            }
            __syncthreads();
            if (!(warp & 1)) {
                float *zq = a.z + (size_t)q * a.rows * a.slots * 2 * I;
#pragma unroll
                for (int j = 0; j < 4; j++)
#pragma unroll
                    for (int h = 0; h < 2; h++)
#pragma unroll
                        for (int i = 0; i < 4; i++) {
                            int row = h * 8 + 2 * t + (i & 1);
                            int col = (tn - c * 8 + j) * 16 + g + 8 * (i >> 1);
                            if (row < nm)
                                zq[((size_t)mem[row] * 2 + mat) * I + c * 128 + col] =
                                    acc[j][h][i] + red[(mat * nm + row) * 128 + col];
                        }
            }
            __syncthreads();
            if (threadIdx.x == 0) {
                __threadfence();
                int *part = a.parts + grp * cb_gu + c;
                int old = atomicAdd(part, 1);
                s_flag = old == kQuarters - 1;
                if (s_flag)
                    *part = 0;
            }
            __syncthreads();
            if (s_flag) {
                // 3. epilogue of column block c: the down projection's rotated fp16 input
                __threadfence();
                for (int m = warp; m < nm; m += kThreads / 32) {
                    int pair = mem[m];
                    int col = c * 128 + 4 * lane;
                    // the quarters' partial sums, added in quarter order
                    float gv[4] = {0.f, 0.f, 0.f, 0.f}, uv[4] = {0.f, 0.f, 0.f, 0.f};
                    for (int qq = 0; qq < kQuarters; qq++) {
                        const float *zg = a.z + (((size_t)qq * a.rows * a.slots + pair) * 2) * I + col;
                        float4 g4 = __ldcg(reinterpret_cast<const float4 *>(zg));
                        float4 u4 = __ldcg(reinterpret_cast<const float4 *>(zg + I));
                        gv[0] += g4.x, gv[1] += g4.y, gv[2] += g4.z, gv[3] += g4.w;
                        uv[0] += u4.x, uv[1] += u4.y, uv[2] += u4.z, uv[3] += u4.w;
                    }
                    fwht128_warp(gv);
                    fwht128_warp(uv);
                    float hv[4];
                    float lim = a.ex.swiglu_limit;
#pragma unroll
                    for (int i = 0; i < 4; i++) {
                        float gg = gv[i] * half_at(a.ex.gate_svh, (size_t)e * I + col + i);
                        float uu = uv[i] * half_at(a.ex.up_svh, (size_t)e * I + col + i);
                        gg = fminf(gg, lim);
                        uu = fminf(fmaxf(uu, -lim), lim);
                        float act = gg / (1.0f + expf(-gg)) * uu;
                        hv[i] = act * half_at(a.ex.down_suh, (size_t)e * I + col + i);
                    }
                    fwht128_warp(hv);
                    uint2 packed = {h2_bits(__floats2half2_rn(hv[0], hv[1])),
                                    h2_bits(__floats2half2_rn(hv[2], hv[3]))};
                    *reinterpret_cast<uint2 *>(a.xd + (size_t)pair * I + col) = packed;
                }
                __syncthreads();
                if (threadIdx.x == 0) {
                    __threadfence();
                    atomicAdd(&ws->done_gu[grp], 1);
                }
            }
        } else {
            int idx = item - 1 - n_gu;
            int grp = idx / cb_down, c = idx % cb_down;
            int e = g_expert[grp], nm = g_count[grp];
            const uint16_t *mem = g_member + grp * kGroupRows;
            // each warp: 64 columns (w & 1) and a quarter of the k range (w >> 1); its first
            // k-steps' trellis words travel while the gate/up results are awaited
            int tn = c * 8 + (warp & 1) * 4;
            int ksteps = I / 64;
            int ks0 = (warp >> 1) * ksteps;
            const uint32_t *tr = static_cast<const uint32_t *>(a.ex.down_trellis);
            size_t stride = (size_t)(H / 16) * kWords;
            const uint32_t *tile0 = tr + (((size_t)e * (I / 16) + ks0) * (H / 16) + tn) * kWords;
            uint4 ring[kPrefetch];
            strip_w_prime<K, kPrefetch>(tile0, stride, ksteps, ring);
            if (threadIdx.x == 0) {
                while (ld_acquire(&ws->done_gu[grp]) < cb_gu)
                    __nanosleep(100);
                __threadfence();
            }
            __syncthreads();
            const bool dup = dup_inputs<K, CB>() && nm <= 8;
            const int ld = dup ? dup_ld(I) : I + 8; // the inputs' row stride (dup: words)
            __half *a_s = reinterpret_cast<__half *>(smem); // [nm][ld]
            uint32_t *a_w = reinterpret_cast<uint32_t *>(smem);
            for (int i = threadIdx.x; i < nm * (I / 8); i += kThreads) {
                int m = i / (I / 8), part = i % (I / 8);
                uint4 v = __ldcg(reinterpret_cast<const uint4 *>(a.xd + (size_t)mem[m] * I) + part);
                size_t row = (size_t)m * ld;
                if (dup)
                    store_dup(a_w + row, part * 8, {v.x, v.y, v.z, v.w});
                else
                    *reinterpret_cast<uint4 *>(a_s + row + part * 8) = v;
            }
            __syncthreads();
            float acc[4][2][4] = {};
            const void *am = dup ? static_cast<const void *>(a_w + ks0 * 16)
                                 : static_cast<const void *>(a_s + ks0 * 16);
            if (nm > 8)
                run_strip<K, CB, true>(tile0, stride, ksteps, ring, am, ld, nm, acc);
            else
                run_strip<K, CB, false>(tile0, stride, ksteps, ring, am, ld, nm, acc);
            // each warp's sums to shared memory (over the inputs, no longer read), [quarter][nm][128]
            int g = lane >> 2, t = lane & 3;
            float *zs = reinterpret_cast<float *>(smem);
            publish_next();
            __syncthreads();
#pragma unroll
            for (int j = 0; j < 4; j++)
#pragma unroll
                for (int h = 0; h < 2; h++)
#pragma unroll
                    for (int i = 0; i < 4; i++) {
                        int row = h * 8 + 2 * t + (i & 1);
                        int col = (tn - c * 8 + j) * 16 + g + 8 * (i >> 1);
                        if (row < nm)
                            zs[((warp >> 1) * nm + row) * 128 + col] = acc[j][h][i];
                    }
            __syncthreads();
            // per pair: the quarters in order, rotated, x svh x routing weight, stored
            for (int m = warp; m < nm; m += kThreads / 32) {
                int pair = mem[m];
                float wt = a.weights[pair];
                float v[4];
#pragma unroll
                for (int i = 0; i < 4; i++)
                    v[i] = ((zs[(0 * nm + m) * 128 + 4 * lane + i] + zs[(1 * nm + m) * 128 + 4 * lane + i]) +
                            zs[(2 * nm + m) * 128 + 4 * lane + i]) +
                           zs[(3 * nm + m) * 128 + 4 * lane + i];
                fwht128_warp(v);
                int col = c * 128 + 4 * lane;
                float o[4];
#pragma unroll
                for (int i = 0; i < 4; i++)
                    o[i] = v[i] * half_at(a.ex.down_svh, (size_t)e * H + col + i) * wt;
                *reinterpret_cast<float4 *>(a.yd + (size_t)pair * H + col) =
                    make_float4(o[0], o[1], o[2], o[3]);
            }
            __syncthreads();
            // the last of a row's pairs to finish this column block sums the row's slots
            if (threadIdx.x < nm) {
                int row = mem[threadIdx.x] / a.slots;
                int valid = 0;
                for (int s = 0; s < a.slots; s++)
                    valid += s_ids[row * a.slots + s] >= 0;
                int *done = a.rows_done + (size_t)row * cb_down + c;
                __threadfence();
                int last = atomicAdd(done, 1) == valid - 1;
                if (last)
                    *done = 0;
                s_aux[threadIdx.x] = last; // the group table is built; s_aux is free now
            }
            __syncthreads();
            for (int m = warp; m < nm; m += kThreads / 32) {
                if (!s_aux[m])
                    continue;
                __threadfence();
                int row = mem[m] / a.slots;
                int col = c * 128 + 4 * lane;
                float4 sum = make_float4(0.f, 0.f, 0.f, 0.f);
                for (int s = 0; s < a.slots; s++) {
                    if (s_ids[row * a.slots + s] < 0)
                        continue;
                    float4 d = __ldcg(reinterpret_cast<const float4 *>(
                        a.yd + (size_t)(row * a.slots + s) * H + col));
                    sum.x += d.x, sum.y += d.y, sum.z += d.z, sum.w += d.w;
                }
                *reinterpret_cast<float4 *>(a.y + (size_t)row * H + col) = sum;
            }
            __syncthreads();
            if (threadIdx.x == 0) {
                int old = atomicAdd(&ws->done_down[grp], 1);
                if (old == cb_down - 1) { // the group is finished: ready for the next call
                    ws->done_down[grp] = 0;
                    ws->done_gu[grp] = 0;
                }
            }
        }
        __syncthreads();
        item = s_ticket;
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        if (atomicAdd(&ws->exited, 1) == (int)gridDim.x - 1) { // the last block out resets
            ws->ticket = 0;
            __threadfence();
            ws->exited = 0;
        }
    }
}

size_t align256(size_t n)
{
    return (n + 255) & ~(size_t)255;
}

size_t parts_offset()
{
    return align256(sizeof(moe_ws));
}

// The counters first (fixed places: they outlive a call), then this call's data by its pairs.
size_t rows_done_offset(int inter)
{
    return parts_offset() + align256((size_t)kMaxPairs * (inter / 128) * sizeof(int));
}

size_t z_offset(int inter, int hidden)
{
    return rows_done_offset(inter) + align256((size_t)kMaxPairs * (hidden / 128) * sizeof(int));
}

size_t xd_offset(int inter, int hidden, int pairs)
{
    return z_offset(inter, hidden) + align256((size_t)kQuarters * pairs * 2 * inter * sizeof(float));
}

size_t yd_offset(int inter, int hidden, int pairs)
{
    return xd_offset(inter, hidden, pairs) + align256((size_t)pairs * inter * sizeof(__half));
}

// The items' shared memory: the inputs (gate/up: [2][nm][hidden / quarters + 8] fp16; down:
// [nm][inter + 8]), reused after the strips for the sums (gate/up: [2][nm][128] f32, down:
// [4][nm][128]).
// Duplicated (dup_inputs), the inputs of groups up to 8 rows take 4 bytes an element.
size_t smem_bytes(const kern_exl3_experts *ex, int rows)
{
    size_t nm = rows < kGroupRows ? rows : kGroupRows;
    size_t nd = nm < 8 ? nm : 8;
    size_t gu = 2 * nm * (ex->hidden / kQuarters + 8) * sizeof(__half);
    size_t down = nm * (ex->inter + 8) * sizeof(__half);
    size_t gu_dup = 2 * nd * (size_t)dup_ld(ex->hidden / kQuarters) * 4;
    size_t down_dup = nd * (size_t)dup_ld(ex->inter) * 4;
    size_t sums = 4 * nm * 128 * sizeof(float);
    size_t m = gu > down ? gu : down;
    m = m > gu_dup ? m : gu_dup;
    m = m > down_dup ? m : down_dup;
    return m > sums ? m : sums;
}

// A persistent grid: as many blocks as the device's SMs hold at this call's shared memory.
template <int K, int CB>
cudaError_t launch_moe(const moe_args &a, const kern_exl3_experts *ex, int rows, cudaStream_t st)
{
    size_t smem = smem_bytes(ex, rows);
    int grid = 0;
    cudaError_t rc = resident_blocks<moe_kernel<K, CB>>(kThreads, smem, "the EXL3 MoE decode kernel",
                                                         &grid);
    if (rc != cudaSuccess)
        return rc;
    launch(moe_kernel<K, CB>, grid, kThreads, smem, st, a);
    return cudaGetLastError();
}

template <int K>
cudaError_t launch_cb(const moe_args &a, const kern_exl3_experts *ex, int rows, cudaStream_t st)
{
    switch (a.ex.codebook) {
    case 0:
        return launch_moe<K, 0>(a, ex, rows, st);
    case 1:
        return launch_moe<K, 1>(a, ex, rows, st);
    default:
        return launch_moe<K, 2>(a, ex, rows, st);
    }
}

} // namespace

extern "C" size_t kern_exl3_moe_workspace(const kern_exl3_experts *ex, int rows, int slots)
{
    int pairs = rows * slots;
    if (pairs < 1 || pairs > kMaxPairs)
        return 0;
    return yd_offset(ex->inter, ex->hidden, pairs) + align256((size_t)pairs * ex->hidden * sizeof(float));
}

extern "C" int kern_exl3_moe(const kern_exl3_experts *ex, const float *x, const int32_t *ids,
                             const float *weights, float *y, int rows, int slots, void *work,
                             void *stream)
{
    if (!ex || !x || !ids || !weights || !y || !work || rows < 1 || slots < 1 ||
        rows * slots > kMaxPairs || ex->hidden <= 0 || ex->inter <= 0 ||
        ex->hidden % (128 * kQuarters) || ex->inter % 128 || ex->n_experts < 1 || ex->bits < 1 ||
        ex->bits > 8 || ex->codebook < 0 || ex->codebook > 2)
        return -1;
    moe_args a;
    a.ex = *ex;
    a.x = x;
    a.ids = ids;
    a.weights = weights;
    a.y = y;
    a.rows = rows;
    a.slots = slots;
    a.ws = static_cast<moe_ws *>(work);
    char *base = static_cast<char *>(work);
    a.parts = reinterpret_cast<int *>(base + parts_offset());
    a.rows_done = reinterpret_cast<int *>(base + rows_done_offset(ex->inter));
    a.z = reinterpret_cast<float *>(base + z_offset(ex->inter, ex->hidden));
    a.xd = reinterpret_cast<__half *>(base + xd_offset(ex->inter, ex->hidden, rows * slots));
    a.yd = reinterpret_cast<float *>(base + yd_offset(ex->inter, ex->hidden, rows * slots));
    cudaStream_t st = static_cast<cudaStream_t>(stream);
    cudaError_t rc;
    switch (ex->bits) {
    case 1: rc = launch_cb<1>(a, ex, rows, st); break;
    case 2: rc = launch_cb<2>(a, ex, rows, st); break;
    case 3: rc = launch_cb<3>(a, ex, rows, st); break;
    case 4: rc = launch_cb<4>(a, ex, rows, st); break;
    case 5: rc = launch_cb<5>(a, ex, rows, st); break;
    case 6: rc = launch_cb<6>(a, ex, rows, st); break;
    case 7: rc = launch_cb<7>(a, ex, rows, st); break;
    default: rc = launch_cb<8>(a, ex, rows, st); break;
    }
    return (int)rc;
}
