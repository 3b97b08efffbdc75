// exl3_moe_warps.cu: a candidate for exl3_moe.cu's routed-expert decode kernel (the same API,
// kern_exl3_moe), in which every warp works on its own; built into its own GPU test and bench
// (test_exl3_gpu_warps, bench_exl3_warps), not into glmchat, until it has run on a GPU.
//
// Why: on the H200 (2026-12-04) the block-wide kernel spends 55% of its warp samples outside
// its decode loops, a quarter of them waiting at the barriers that join a block's 8 warps for
// every item (the staging, the k-half sums, the quarter counter, the epilogue).
//
// Every warp of a persistent grid works on its own: it takes work items by ticket and never
// waits for the other warps of its block, so while one warp is between items the others keep
// the decode pipes busy. Items, in ticket order:
//   1. zero the rows of y that have no valid expert;
//   2. rotations (group, matrix, k chunk of 512): each member's inputs x suh of gate or up,
//      Hadamard-rotated, as fp16 in the layout the strips read (xg);
//   3. gate/up strips (group, 128-column block, k chunk, matrix, 64-column half): 32 k-steps of
//      one warp; the partial sums go to zg. The last of a column block's strips to finish adds
//      the k chunks in order and runs the epilogue (output rotation x svh, SwiGLU, x down's suh,
//      input rotation): the down projection's fp16 input (xd);
//   4. down strips (group, 128-column block, k chunk, half): wait until the gate/up column
//      blocks of their k chunk are done; partial sums to zd. The last of a column block adds
//      the k chunks in order, rotates, x svh x routing weight, stores per pair (yd); the last
//      pair of a row to finish a column block sums the row's slots in slot order into y.
// A strip streams its trellis through a register ring and its inputs through two cp.async
// stages of one block of k-steps (6, 96 inputs) in the warp's own shared memory.
// A group is up to 16 (row, slot) pairs routed to one expert (at most the call's row count):
// its weights are read once.
// Deterministic and batch-invariant: no float atomics; every sum has a fixed order, and a row's
// operations are the same whatever the row count, its place in the call, or the other rows in
// its group (the mma computes each output element from its own input column only). Counters
// (integers) only say who finishes or what is ready; they reset themselves, so the workspace
// stays ready. A warp only waits for items of lower tickets, all taken by running warps, so the
// waits end.
//
// Build variants (tests/gpu/variants.sh): direct trellis loads, unguarded k-step blocks, inputs
// as duplicated halves are on for this file (exl3_gemm.cu keeps the header's defaults).
#ifndef EXL3_DIRECT_LOAD
#define EXL3_DIRECT_LOAD 1
#endif
#if !EXL3_DIRECT_LOAD
#error "exl3_moe_warps.cu: the strips have no shared slice for EXL3_DIRECT_LOAD=0's regroup"
#endif
#ifndef EXL3_UNGUARDED
#define EXL3_UNGUARDED 1
#endif
#ifndef EXL3_DUP_INPUT
#define EXL3_DUP_INPUT 1
#endif
// The state extraction's shifts on the ALU pipe (0) rather than as multiplies on the FMA pipe (1,
// the header's default): the same integers. H200, 2026-12-04 18:20 UTC, both passes: one row
// 77.6-77.9 against 77.4-77.9 us, 4 rows 228 against 236-238, 16 rows 743 against 776-778.
#ifndef EXL3_FMA_SHIFTS
#define EXL3_FMA_SHIFTS 0
#endif
// A weight's two fp16 halves chain into one accumulator (the header's default keeps two chains):
// with the warps' own input stages the two chains' 16 more registers spill in the hot loop
// (276 bytes), one chain spills 12 bytes outside it.
#ifndef EXL3_SPLIT_CHAINS
#define EXL3_SPLIT_CHAINS 1
#endif
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
constexpr int kWarps = kThreads / 32;
constexpr int kMaxPairs = KERN_EXL3_MOE_MAX_PAIRS;
constexpr int kGroupRows = 16;
constexpr int kChunkK = 512; // k range of one strip item (32 k-steps)
#ifndef EXL3_PREFETCH
#define EXL3_PREFETCH 6
#endif
#ifndef EXL3_MOE_MIN_BLOCKS
#define EXL3_MOE_MIN_BLOCKS 2 // blocks per SM the register budget is cut for (tuning knob)
#endif
constexpr int kPrefetch = EXL3_PREFETCH; // k-steps of 512 bytes in flight per warp
constexpr int kStageK = 16 * kPrefetch;  // inputs a warp stages at a time (a block of k-steps)

// Workspace: counters at fixed places (they outlive a call), then this call's data by its pairs.
struct moe_ws {
    int ticket;
    int exited;
    int pad[2];
};

struct moe_args {
    kern_exl3_experts ex;
    const float *x;
    const int32_t *ids;
    const float *weights;
    float *y;
    int rows, slots, group_rows;
    int nkh, nki;       // k chunks of gate/up (hidden) and of down (inter)
    int stage_bytes;    // one input stage of a warp
    moe_ws *ws;
    int *rot_done;      // [kMaxPairs][2][nkh]: rotations done (0/1)
    int *gu_count;      // [kMaxPairs][inter / 128]: gate/up strips done
    int *gu_ready;      // [kMaxPairs][nki]: gate/up column blocks done per down k chunk
    int *down_count;    // [kMaxPairs][hidden / 128]: down strips done
    int *rows_done;     // [kMaxPairs][hidden / 128]: pairs of a row done
    int *grp_done;      // [kMaxPairs]: down column blocks done
    uint32_t *xg;       // [pairs][2][hidden] words: rotated gate/up inputs (dup words or halves)
    float *zg;          // [nkh][pairs][2][inter]: gate/up partial sums
    uint32_t *xd;       // [pairs][inter] words: the down inputs (dup words or halves)
    float *zd;          // [nki][pairs][hidden]: down partial sums
    float *yd;          // [pairs][hidden]: weighted down outputs
};

__device__ __forceinline__ int ld_acquire(const int *p)
{
    int v;
    asm volatile("ld.acquire.gpu.global.s32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
    return v;
}

// Lane 0 waits until *flag >= target; then the whole warp may read what was published before it.
__device__ __forceinline__ void warp_wait(const int *flag, int target)
{
    if ((threadIdx.x & 31) == 0)
        while (ld_acquire(flag) < target)
            __nanosleep(64);
    __syncwarp();
    __threadfence();
}

// Every lane's stores so far are made visible, then lane 0 adds 1 to *counter (release: the
// warp barrier orders the lanes' fenced stores before lane 0's fence and atomic; acquire: lane
// 0's fence after it, and the barrier again before any lane reads what others published);
// returns the old value to the whole warp.
__device__ __forceinline__ int warp_publish(int *counter)
{
    __threadfence();
    __syncwarp();
    int old = 0;
    if ((threadIdx.x & 31) == 0) {
        __threadfence();
        old = atomicAdd(counter, 1);
        __threadfence();
    }
    __syncwarp();
    return __shfl_sync(0xFFFFFFFFu, old, 0);
}

// Groups of pairs by expert, the same in every block: pairs in order, an expert's pairs in
// chunks of gr (group_rows). Fills g_expert, g_count, g_start (the group's first slot: groups
// laid end to end) and g_member (pair ids), returns the group count.
__device__ int build_groups(const moe_args &a, int *s_ids, int *s_aux, int *g_expert,
                            int *g_count, int *g_start, uint16_t *g_member)
{
    const int gr = a.group_rows;
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
            leader_chunks = (count + gr - 1) / gr;
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
        int grp = base + rank / gr;
        g_member[grp * kGroupRows + rank % gr] = (uint16_t)p;
        if (rank % gr == 0) {
            g_expert[grp] = e;
            int left = count - rank;
            g_count[grp] = left < gr ? left : gr;
        }
    }
    __syncthreads();
    for (int g = threadIdx.x; g < total; g += blockDim.x) {
        int s = 0;
        for (int q = 0; q < g; q++)
            s += g_count[q];
        g_start[g] = s;
    }
    __syncthreads();
    return total;
}

// EXL3_DUP_INPUT=1: groups of up to 8 rows in the split form (3INST/MCG, 4 bits) keep their
// inputs in shared memory as duplicated halves (each fp16 input x stored as the word x:x), so
// that the strip loads its split fragment with one 16-byte load instead of two 4-byte loads and
// four PRMT a k-step (the layout: dup_pos, dup_ld); twice the inputs' shared memory.
#ifndef EXL3_DUP_INPUT
#define EXL3_DUP_INPUT 0
#endif
template <int K, int CB>
__host__ __device__ constexpr bool dup_inputs()
{
    return EXL3_DUP_INPUT && K == 4 && CB != 2 && kSplitHalves;
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
// in registers: the FMA-pipe shift multipliers, the 3INST/MCG mask and flip, the paired
// products' -65536.
__constant__ uint32_t c_decode_consts[5] = {1u << 28, 1u << 16, 0x8FFF8FFFu, 0x3B603B60u,
                                            0xFFFF0000u};

__device__ __forceinline__ float half_at(const void *base, size_t i)
{
    return __half2float(static_cast<const __half *>(base)[i]);
}


// Bytes of one input stage (kStageK inputs of gr rows) and the row strides within it: the
// duplicated form (groups up to 8 rows at 4 bits) takes 4 bytes an input, dup_ld words a row;
// the plain form 2 bytes, kStageK + 8 halves a row (both keep a quarter-warp's loads of rows
// g and g + 1 in different banks).
__host__ __device__ constexpr int stage_ld_bytes(bool dup)
{
    return dup ? dup_ld(kStageK) * 4 : (kStageK + 8) * 2;
}

__host__ __device__ constexpr int stage_bytes_for(int gr, bool dup_ok)
{
    int dup_rows = gr < 8 ? gr : 8;
    int plain = gr * stage_ld_bytes(false);
    int dup = dup_ok ? dup_rows * stage_ld_bytes(true) : 0;
    return plain > dup ? plain : dup;
}

// One warp's strip of 4 n-tiles (64 columns) over ksteps k-tiles, weights as the A operand, its
// inputs streamed from global rows (src: the first row's first input of the strip; src_stride:
// bytes between rows; nm rows) through the warp's two stages (buf, stage_bytes each): at the
// start of each block of kPrefetch k-steps the strip's hook issues the next block's inputs by
// cp.async and waits for its own, so that within a block the input loads have fixed offsets.
// R16: the group has rows 8-15. acc[tile][row half][4] (row half 1 is 0 without R16).
template <int K, int CB, bool R16>
__device__ __forceinline__ void strip_staged(const uint32_t *__restrict__ tile0, size_t stride,
                                             int ksteps, uint4 ring[kPrefetch],
                                             const unsigned char *src, size_t src_stride, int nm,
                                             unsigned char *buf, int stage_bytes,
                                             float acc[4][2][4])
{
    constexpr bool kDup = dup_inputs<K, CB>() && !R16;
    constexpr int kEsize = kDup ? 4 : 2;      // bytes an input
    constexpr int kStepPieces = kEsize;       // 16-byte pieces of a row a k-step (16 inputs)
    constexpr int kLd = stage_ld_bytes(kDup);
    static_assert(32 / kStepPieces >= (kDup ? 8 : 16), "a k-step of a group's rows is one pass");
    const int lane = threadIdx.x & 31;
    // lane's piece of a k-step: row lane / kStepPieces, bytes 16 (lane % kStepPieces) ..
    const int prow = lane / kStepPieces;
    const bool active = prow < nm;
    const unsigned char *lsrc = src + prow * src_stride + (lane % kStepPieces) * 16;
    const uint32_t ldst = (uint32_t)__cvta_generic_to_shared(buf) + prow * kLd + (lane % kStepPieces) * 16;
    // the inputs of the block from k-step kt0 into stage par
    auto issue = [&](int kt0, int par) {
        if (active) {
            int left = ksteps - kt0;
            const unsigned char *sp = lsrc + (size_t)kt0 * 16 * kEsize;
            uint32_t d = ldst + par * stage_bytes;
#pragma unroll
            for (int j = 0; j < kPrefetch; j++)
                if (j < left)
                    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(d + j * 16 * kEsize),
                                 "l"(sp + j * 16 * kEsize)
                                 : "memory");
        }
        cp_async_commit();
    };
    int blk = 0, base = 0; // the current block's number and first k-step
    const unsigned char *cur = buf;
    auto hook = [&](int kt) {
        __syncwarp(); // every lane is done with the block before (its stage is refilled now)
        issue(kt + kPrefetch, (blk + 1) & 1);
        cp_async_wait<1>(); // this lane's part of this block's stage has landed ...
        __syncwarp();       // ... and every lane's
        cur = buf + (blk & 1) * stage_bytes;
        base = kt;
        blk++;
    };
    issue(0, 0);
    decode_consts sm = {c_decode_consts[0], c_decode_consts[1], c_decode_consts[2],
                        c_decode_consts[3], c_decode_consts[4]};
    auto x_of = [&](int kt, auto &xf) {
        using xf_t = typename std::remove_reference<decltype(xf)>::type;
        int i = kt - base; // the k-step within the block: a constant in the unrolled blocks
        if (kDup && xf_t::kSplitForm) {
            smem_x_dup(reinterpret_cast<const uint32_t *>(cur), kLd / 4, nm, i, xf.s);
        } else {
            smem_x<R16>(reinterpret_cast<const __half *>(cur), kLd / 2, nm, i, xf.x);
            xf.split();
        }
    };
    strip_w_run<K, CB, kPrefetch, R16>(tile0, stride, ksteps, ring, nullptr, x_of, sm, acc, hook);
    cp_async_wait<0>();
    __syncwarp();
}

// Stores 4 fp16 inputs (packed: two half pairs) at input k of a row of n inputs (row: its first
// word) in the duplicated or the plain form.
__device__ __forceinline__ void store_inputs(uint32_t *row, int k, uint2 packed, bool dup)
{
    if (dup)
        store_dup(row, k, {packed.x, packed.y});
    else
        *reinterpret_cast<uint2 *>(reinterpret_cast<__half *>(row) + k) = packed;
}

// The strip's sums, row r < nm and column col (0..63) of the strip, for each held element.
template <typename F>
__device__ __forceinline__ void for_acc(const float acc[4][2][4], int nm, F f)
{
    int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int j = 0; j < 4; j++)
#pragma unroll
        for (int h = 0; h < 2; h++)
#pragma unroll
            for (int i = 0; i < 4; i++) {
                int row = h * 8 + 2 * t + (i & 1);
                if (row < nm)
                    f(row, j * 16 + g + 8 * (i >> 1), acc[j][h][i]);
            }
}

// The group table in shared memory (build_groups) and one group of it.
struct group_tables {
    const int *expert, *count, *start, *ids;
    const uint16_t *member;
};

struct group_ref {
    int e, nm, start;
    const uint16_t *mem;
};

__device__ __forceinline__ group_ref group_of(const group_tables &t, int grp)
{
    return group_ref{t.expert[grp], t.count[grp], t.start[grp], t.member + grp * kGroupRows};
}

// Where gate/up strip idx lies: group, column block c, k chunk j, matrix, 64-column half.
struct gu_coords {
    int grp, c, j, mat, half;
};

__device__ __forceinline__ gu_coords gu_at(const moe_args &a, int idx)
{
    int per = 4 * a.nkh, cb = a.ex.inter / 128;
    int rest = idx % (cb * per), sub = rest % per;
    return gu_coords{idx / (cb * per), rest / per, sub / 4, sub / 2 % 2, sub % 2};
}

// Where down strip idx lies: group, column block c, k chunk j, 64-column half.
struct down_coords {
    int grp, c, j, half;
};

__device__ __forceinline__ down_coords down_at(const moe_args &a, int idx)
{
    int per = 2 * a.nki, cb = a.ex.hidden / 128;
    int rest = idx % (cb * per), sub = rest % per;
    return down_coords{idx / (cb * per), rest / per, sub / 2, sub % 2};
}

// After a strip an item works out its coordinates again from its index rather than holding
// them in registers across the strip (the strip needs every register): this hides the index
// from the compiler so that it cannot reuse the values from before.
__device__ __forceinline__ int opaque(int v)
{
    asm volatile("" : "+r"(v));
    return v;
}

// Item 2: group members' inputs x gate's or up's suh over k chunk j, rotated, into xg.
template <int K, int CB>
__device__ __forceinline__ void rotation_item(const moe_args &a, const group_ref &gp, int mat, int j, int *done)
{
    const int H = a.ex.hidden, lane = threadIdx.x & 31;
    const bool dup = dup_inputs<K, CB>() && gp.nm <= 8;
    const void *suh = mat ? a.ex.up_suh : a.ex.gate_suh;
    int k0 = j * kChunkK, k1 = k0 + kChunkK < H ? k0 + kChunkK : H;
    for (int m = 0; m < gp.nm; m++) {
        int row = gp.mem[m] / a.slots;
        uint32_t *dst = a.xg + ((size_t)(gp.start + m) * 2 + mat) * H;
        for (int blk = k0; blk < k1; blk += 128) {
            int col = blk + 4 * lane;
            float4 xv = *reinterpret_cast<const float4 *>(a.x + (size_t)row * H + col);
            float v[4] = {xv.x, xv.y, xv.z, xv.w};
#pragma unroll
            for (int i = 0; i < 4; i++)
                v[i] *= half_at(suh, (size_t)gp.e * H + col + i);
            fwht128_warp(v);
            store_inputs(dst, col,
                         {h2_bits(__floats2half2_rn(v[0], v[1])), h2_bits(__floats2half2_rn(v[2], v[3]))},
                         dup);
        }
    }
    warp_publish(done);
}

// Where a strip's trellis lies: its first tile, the words between k-tiles, its k-steps.
struct strip_src {
    const uint32_t *tile0;
    size_t stride;
    int ksteps;
};

template <int K>
__device__ __forceinline__ strip_src gate_up_src(const moe_args &a, const group_ref &gp,
                                                 const gu_coords &p)
{
    constexpr int kWords = 8 * K;
    const int H = a.ex.hidden, I = a.ex.inter;
    int k0 = p.j * kChunkK, klen = H - k0 < kChunkK ? H - k0 : kChunkK;
    const uint32_t *tr = static_cast<const uint32_t *>(p.mat ? a.ex.up_trellis : a.ex.gate_trellis);
    return strip_src{tr + (((size_t)gp.e * (H / 16) + k0 / 16) * (I / 16) + p.c * 8 + p.half * 4) * kWords,
                     (size_t)(I / 16) * kWords, klen / 16};
}

template <int K>
__device__ __forceinline__ strip_src down_src(const moe_args &a, const group_ref &gp,
                                              const down_coords &p)
{
    constexpr int kWords = 8 * K;
    const int H = a.ex.hidden, I = a.ex.inter;
    int k0 = p.j * kChunkK, klen = I - k0 < kChunkK ? I - k0 : kChunkK;
    const uint32_t *tr = static_cast<const uint32_t *>(a.ex.down_trellis);
    return strip_src{tr + (((size_t)gp.e * (I / 16) + k0 / 16) * (H / 16) + p.c * 8 + p.half * 4) * kWords,
                     (size_t)(H / 16) * kWords, klen / 16};
}

// EXL3_PRIME_NEXT=1: as soon as a strip's loop ends, the warp's trellis ring is primed with the
// next item's first k-steps (when that is a strip too), so that they travel during this item's
// stores, counters and epilogue rather than at the next item's start. Off: a build variant to
// time.
#ifndef EXL3_PRIME_NEXT
#define EXL3_PRIME_NEXT 0
#endif

// Item 3: a gate/up strip: 64 columns (half) of column block c of matrix mat over k chunk j; the
// last strip of the column block to finish runs its epilogue.
template <int K, int CB, typename Next>
__device__ __forceinline__ void gate_up_item(const moe_args &a, const group_tables &t, int idx,
                                             unsigned char *buf, uint4 (&ring)[kPrefetch],
                                             bool primed, Next prime_next)
{
    gu_coords p = gu_at(a, idx);
    group_ref gp = group_of(t, p.grp);
    int grp = p.grp, c = p.c, j = p.j, mat = p.mat, half = p.half;
    const int H = a.ex.hidden, I = a.ex.inter, lane = threadIdx.x & 31;
    const int pairs = a.rows * a.slots;
    int k0 = j * kChunkK;
    strip_src sr = gate_up_src<K>(a, gp, p);
    const uint32_t *tile0 = sr.tile0;
    size_t stride = sr.stride;
    int klen = sr.ksteps * 16;
    // the first k-steps' trellis words travel while the rotation is awaited
    if (!primed)
        strip_w_prime<K, kPrefetch>(tile0, stride, klen / 16, ring);
    warp_wait(a.rot_done + ((size_t)grp * 2 + mat) * a.nkh + j, 1);
    const bool dup = dup_inputs<K, CB>() && gp.nm <= 8;
    const unsigned char *src = reinterpret_cast<const unsigned char *>(
                                   a.xg + ((size_t)gp.start * 2 + mat) * H) +
                               (size_t)k0 * (dup ? 4 : 2);
    float acc[4][2][4];
    if (gp.nm > 8)
        strip_staged<K, CB, true>(tile0, stride, klen / 16, ring, src, (size_t)2 * H * 4, gp.nm,
                                  buf, a.stage_bytes, acc);
    else
        strip_staged<K, CB, false>(tile0, stride, klen / 16, ring, src, (size_t)2 * H * 4, gp.nm,
                                   buf, a.stage_bytes, acc);
    prime_next();
    idx = opaque(idx);
    p = gu_at(a, idx);
    gp = group_of(t, p.grp);
    grp = p.grp, c = p.c, j = p.j, mat = p.mat, half = p.half;
    float *zq = a.zg + (((size_t)j * pairs + gp.start) * 2 + mat) * I + c * 128 + half * 64;
    for_acc(acc, gp.nm, [&](int row, int col, float v) { zq[(size_t)row * 2 * I + col] = v; });
    int *count = a.gu_count + (size_t)grp * (I / 128) + c;
    if (warp_publish(count) != 4 * a.nkh - 1)
        return;
    // the epilogue of column block c: the down projection's rotated fp16 input
    if (lane == 0)
        *count = 0;
    __threadfence();
    const bool dup_out = dup_inputs<K, CB>() && gp.nm <= 8;
    for (int m = 0; m < gp.nm; m++) {
        int slot = gp.start + m;
        int col = c * 128 + 4 * lane;
        // the k chunks' partial sums, added in chunk order
        float gv[4] = {0.f, 0.f, 0.f, 0.f}, uv[4] = {0.f, 0.f, 0.f, 0.f};
        for (int jj = 0; jj < a.nkh; jj++) {
            const float *zg = a.zg + ((size_t)jj * pairs + slot) * 2 * I + col;
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
            float gg = gv[i] * half_at(a.ex.gate_svh, (size_t)gp.e * I + col + i);
            float uu = uv[i] * half_at(a.ex.up_svh, (size_t)gp.e * I + col + i);
            gg = fminf(gg, lim);
            uu = fminf(fmaxf(uu, -lim), lim);
            float act = gg / (1.0f + expf(-gg)) * uu;
            hv[i] = act * half_at(a.ex.down_suh, (size_t)gp.e * I + col + i);
        }
        fwht128_warp(hv);
        store_inputs(a.xd + (size_t)slot * I, col,
                     {h2_bits(__floats2half2_rn(hv[0], hv[1])), h2_bits(__floats2half2_rn(hv[2], hv[3]))},
                     dup_out);
    }
    warp_publish(a.gu_ready + (size_t)grp * a.nki + c * 128 / kChunkK);
}

// Item 4: a down strip: 64 columns (half) of column block cd over k chunk j; the last strip of
// the column block to finish weights and stores its pairs' outputs, and the last pair of a row
// sums the row.
template <int K, int CB, typename Next>
__device__ __forceinline__ void down_item(const moe_args &a, const group_tables &t, int idx,
                                          unsigned char *buf, uint4 (&ring)[kPrefetch], bool primed,
                                          Next prime_next)
{
    down_coords p = down_at(a, idx);
    group_ref gp = group_of(t, p.grp);
    int grp = p.grp, cd = p.c, j = p.j, half = p.half;
    const int H = a.ex.hidden, I = a.ex.inter, lane = threadIdx.x & 31;
    const int pairs = a.rows * a.slots;
    int k0 = j * kChunkK;
    strip_src sr = down_src<K>(a, gp, p);
    const uint32_t *tile0 = sr.tile0;
    size_t stride = sr.stride;
    int klen = sr.ksteps * 16;
    if (!primed)
        strip_w_prime<K, kPrefetch>(tile0, stride, klen / 16, ring);
    warp_wait(a.gu_ready + (size_t)grp * a.nki + j, klen / 128);
    const bool dup = dup_inputs<K, CB>() && gp.nm <= 8;
    const unsigned char *src =
        reinterpret_cast<const unsigned char *>(a.xd + (size_t)gp.start * I) + (size_t)k0 * (dup ? 4 : 2);
    float acc[4][2][4];
    if (gp.nm > 8)
        strip_staged<K, CB, true>(tile0, stride, klen / 16, ring, src, (size_t)I * 4, gp.nm, buf,
                                  a.stage_bytes, acc);
    else
        strip_staged<K, CB, false>(tile0, stride, klen / 16, ring, src, (size_t)I * 4, gp.nm, buf,
                                   a.stage_bytes, acc);
    prime_next();
    idx = opaque(idx);
    p = down_at(a, idx);
    gp = group_of(t, p.grp);
    grp = p.grp, cd = p.c, j = p.j, half = p.half;
    const int *s_ids = t.ids;
    float *zq = a.zd + ((size_t)j * pairs + gp.start) * H + cd * 128 + half * 64;
    for_acc(acc, gp.nm, [&](int row, int col, float v) { zq[(size_t)row * H + col] = v; });
    int *count = a.down_count + (size_t)grp * (H / 128) + cd;
    if (warp_publish(count) != 2 * a.nki - 1)
        return;
    if (lane == 0)
        *count = 0;
    __threadfence();
    const int col = cd * 128 + 4 * lane;
    // per pair: the k chunks in order, rotated, x svh x routing weight, stored
    for (int m = 0; m < gp.nm; m++) {
        int pair = gp.mem[m], slot = gp.start + m;
        float v[4] = {0.f, 0.f, 0.f, 0.f};
        for (int jj = 0; jj < a.nki; jj++) {
            float4 d = __ldcg(reinterpret_cast<const float4 *>(a.zd + ((size_t)jj * pairs + slot) * H + col));
            v[0] += d.x, v[1] += d.y, v[2] += d.z, v[3] += d.w;
        }
        fwht128_warp(v);
        float wt = a.weights[pair], o[4];
#pragma unroll
        for (int i = 0; i < 4; i++)
            o[i] = v[i] * half_at(a.ex.down_svh, (size_t)gp.e * H + col + i) * wt;
        *reinterpret_cast<float4 *>(a.yd + (size_t)pair * H + col) = make_float4(o[0], o[1], o[2], o[3]);
    }
    // the last of a row's pairs to finish this column block sums the row's slots in slot order:
    // lane m counts member m's pair (the members' atomics go out together; a release and an
    // acquire as in warp_publish), then the warp sums each row whose last pair it holds
    __threadfence();
    __syncwarp();
    int last = 0;
    if (lane < gp.nm) {
        int row = gp.mem[lane] / a.slots;
        int valid = 0;
        for (int s = 0; s < a.slots; s++)
            valid += s_ids[row * a.slots + s] >= 0;
        int *done = a.rows_done + (size_t)row * (H / 128) + cd;
        __threadfence();
        last = atomicAdd(done, 1) == valid - 1;
        if (last)
            *done = 0;
        __threadfence();
    }
    __syncwarp();
    for (unsigned ends = __ballot_sync(0xFFFFFFFFu, last); ends; ends &= ends - 1) {
        int row = gp.mem[__ffs(ends) - 1] / a.slots;
        float4 sum = make_float4(0.f, 0.f, 0.f, 0.f);
        for (int s = 0; s < a.slots; s++) {
            if (s_ids[row * a.slots + s] < 0)
                continue;
            float4 d = __ldcg(reinterpret_cast<const float4 *>(a.yd + (size_t)(row * a.slots + s) * H + col));
            sum.x += d.x, sum.y += d.y, sum.z += d.z, sum.w += d.w;
        }
        *reinterpret_cast<float4 *>(a.y + (size_t)row * H + col) = sum;
    }
    // the group's last column block: its flags are cleared for the next call (every strip of
    // the group has passed its waits by now)
    if (warp_publish(a.grp_done + grp) == H / 128 - 1) {
        for (int i = lane; i < 2 * a.nkh; i += 32)
            a.rot_done[(size_t)grp * 2 * a.nkh + i] = 0;
        for (int i = lane; i < a.nki; i += 32)
            a.gu_ready[(size_t)grp * a.nki + i] = 0;
        if (lane == 0)
            a.grp_done[grp] = 0;
    }
}

template <int K, int CB>
__global__ void __launch_bounds__(kThreads, EXL3_MOE_MIN_BLOCKS) moe_kernel(moe_args a)
{
    pdl_prologue();
    extern __shared__ __align__(16) unsigned char smem[];
    __shared__ int s_ids[kMaxPairs], s_aux[kMaxPairs];
    __shared__ int g_expert[kMaxPairs], g_count[kMaxPairs], g_start[kMaxPairs];
    __shared__ uint16_t g_member[kMaxPairs * kGroupRows];

    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int H = a.ex.hidden, I = a.ex.inter;
    moe_ws *ws = a.ws;
    int item = 0;
    if (lane == 0)
        item = atomicAdd(&ws->ticket, 1); // travels while the group table is built
    int ngroups = build_groups(a, s_ids, s_aux, g_expert, g_count, g_start, g_member);
    item = __shfl_sync(0xFFFFFFFFu, item, 0);
    const int cb_gu = I / 128, cb_down = H / 128;
    const int per_gu = 4 * a.nkh, per_down = 2 * a.nki; // strips of a column block
    const int n_rot = ngroups * 2 * a.nkh;
    const int n_gu = ngroups * cb_gu * per_gu;
    const int n_down = ngroups * cb_down * per_down;
    const int total = 1 + n_rot + n_gu + n_down;
    unsigned char *buf = smem + (size_t)warp * 2 * a.stage_bytes;
    const group_tables tables = {g_expert, g_count, g_start, s_ids, g_member};

    uint4 ring[kPrefetch]; // a strip's trellis ring (EXL3_PRIME_NEXT: primed by the item before)
    bool primed = false;
    while (item < total) {
        // the next ticket travels while this item runs
        int next = 0;
        if (lane == 0)
            next = atomicAdd(&ws->ticket, 1);
        const bool was_primed = primed;
        primed = false;
        // the next item's first trellis k-steps into the ring, where it is a strip
        auto prime_next = [&] {
            if (!EXL3_PRIME_NEXT)
                return;
            int nx = __shfl_sync(0xFFFFFFFFu, next, 0) - 1 - n_rot;
            if (nx >= 0 && nx < n_gu) {
                gu_coords q = gu_at(a, nx);
                strip_src sr = gate_up_src<K>(a, group_of(tables, q.grp), q);
                strip_w_prime<K, kPrefetch>(sr.tile0, sr.stride, sr.ksteps, ring);
                primed = true;
            } else if (nx >= n_gu && nx - n_gu < n_down) {
                down_coords q = down_at(a, nx - n_gu);
                strip_src sr = down_src<K>(a, group_of(tables, q.grp), q);
                strip_w_prime<K, kPrefetch>(sr.tile0, sr.stride, sr.ksteps, ring);
                primed = true;
            }
        };
        int idx = item - 1;
        if (item == 0) {
            // rows with no valid expert: nobody else writes them
            for (int r = 0; r < a.rows; r++) {
                bool any = false;
                for (int s = 0; s < a.slots; s++)
                    any |= s_ids[r * a.slots + s] >= 0;
                if (!any)
                    for (int i = lane; i < H; i += 32)
                        a.y[(size_t)r * H + i] = 0.0f;
            }
        } else if (idx < n_rot) {
            int grp = idx / (2 * a.nkh), mat = idx / a.nkh % 2, j = idx % a.nkh;
            rotation_item<K, CB>(a, group_of(tables, grp), mat, j,
                                 a.rot_done + ((size_t)grp * 2 + mat) * a.nkh + j);
        } else if ((idx -= n_rot) < n_gu) {
            gate_up_item<K, CB>(a, tables, idx, buf, ring, was_primed, prime_next);
        } else {
            down_item<K, CB>(a, tables, idx - n_gu, buf, ring, was_primed, prime_next);
        }
        item = __shfl_sync(0xFFFFFFFFu, next, 0);
    }
    if (lane == 0 && atomicAdd(&ws->exited, 1) == (int)gridDim.x * kWarps - 1) {
        ws->ticket = 0; // the last warp out resets: every other warp took its last ticket
        __threadfence();
        ws->exited = 0;
    }
}

size_t align256(size_t n)
{
    return (n + 255) & ~(size_t)255;
}

int chunks(int n)
{
    return (n + kChunkK - 1) / kChunkK;
}

// The workspace's parts in order: the counters at fixed places for a layer shape (they outlive
// a call), then this call's data by its pairs. part: 0 rot_done .. 5 grp_done, 6 xg, 7 zg, 8 xd,
// 9 zd, 10 yd, 11 the end.
size_t ws_offset(int hidden, int inter, int pairs, int part)
{
    size_t nkh = chunks(hidden), nki = chunks(inter), P = pairs;
    size_t sizes[11] = {
        (size_t)kMaxPairs * 2 * nkh * 4,        // rot_done
        (size_t)kMaxPairs * (inter / 128) * 4,  // gu_count
        (size_t)kMaxPairs * nki * 4,            // gu_ready
        (size_t)kMaxPairs * (hidden / 128) * 4, // down_count
        (size_t)kMaxPairs * (hidden / 128) * 4, // rows_done
        (size_t)kMaxPairs * 4,                  // grp_done
        P * 2 * hidden * 4,                     // xg
        nkh * P * 2 * inter * 4,                // zg
        P * inter * 4,                          // xd
        nki * P * hidden * 4,                   // zd
        P * hidden * 4,                         // yd
    };
    size_t off = align256(sizeof(moe_ws));
    for (int i = 0; i < part; i++)
        off += align256(sizes[i]);
    return off;
}

// Blocks of moe_kernel<K, CB> an SM holds with smem bytes of dynamic shared memory.
template <int K, int CB>
cudaError_t blocks_per_sm(size_t smem, int *per_sm)
{
    static size_t cached_smem = 0;
    static int cached = 0;
    if (cached_smem != smem) {
        cudaError_t rc = cudaFuncSetAttribute(moe_kernel<K, CB>,
                                              cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
        if (rc != cudaSuccess)
            return rc;
        rc = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&cached, moe_kernel<K, CB>, kThreads, smem);
        if (rc != cudaSuccess)
            return rc;
        cached_smem = smem;
    }
    *per_sm = cached;
    return cudaSuccess;
}

// A persistent grid: as many blocks as fit the GPU at once (the waits would end without that:
// a ticket is only taken by a running warp).
template <int K, int CB>
cudaError_t launch(moe_args a, cudaStream_t st)
{
    a.stage_bytes = stage_bytes_for(a.group_rows, dup_inputs<K, CB>());
    size_t smem = (size_t)kWarps * 2 * a.stage_bytes;
    int per_sm = 0, dev = 0, sms = 0;
    cudaError_t rc = blocks_per_sm<K, CB>(smem, &per_sm);
    if (rc != cudaSuccess)
        return rc;
    if (per_sm < 1)
        return cudaErrorInvalidConfiguration;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    launch(moe_kernel<K, CB>, per_sm * (sms > 0 ? sms : 1), kThreads, smem, st, a);
    return cudaGetLastError();
}

template <int K>
cudaError_t launch_cb(const moe_args &a, cudaStream_t st)
{
    switch (a.ex.codebook) {
    case 0:
        return launch<K, 0>(a, st);
    case 1:
        return launch<K, 1>(a, st);
    default:
        return launch<K, 2>(a, st);
    }
}

} // namespace

extern "C" size_t kern_exl3_moe_workspace(const kern_exl3_experts *ex, int rows, int slots)
{
    int pairs = rows * slots;
    if (!ex || pairs < 1 || pairs > kMaxPairs || ex->hidden <= 0 || ex->inter <= 0)
        return 0;
    return ws_offset(ex->hidden, ex->inter, pairs, 11);
}

extern "C" int kern_exl3_moe(const kern_exl3_experts *ex, const float *x, const int32_t *ids,
                             const float *weights, float *y, int rows, int slots, void *work,
                             void *stream)
{
    if (!ex || !x || !ids || !weights || !y || !work || rows < 1 || slots < 1 ||
        rows * slots > kMaxPairs || ex->hidden <= 0 || ex->inter <= 0 || ex->hidden % 128 ||
        ex->inter % 128 || ex->n_experts < 1 || ex->bits < 1 || ex->bits > 8 ||
        ex->codebook < 0 || ex->codebook > 2)
        return -1;
    moe_args a;
    a.ex = *ex;
    a.x = x;
    a.ids = ids;
    a.weights = weights;
    a.y = y;
    a.rows = rows;
    a.slots = slots;
    a.group_rows = rows < kGroupRows ? rows : kGroupRows;
    a.nkh = chunks(ex->hidden);
    a.nki = chunks(ex->inter);
    a.stage_bytes = 0;
    char *base = static_cast<char *>(work);
    int H = ex->hidden, I = ex->inter, P = rows * slots;
    auto at = [&](int part) { return base + ws_offset(H, I, P, part); };
    a.ws = static_cast<moe_ws *>(work);
    a.rot_done = reinterpret_cast<int *>(at(0));
    a.gu_count = reinterpret_cast<int *>(at(1));
    a.gu_ready = reinterpret_cast<int *>(at(2));
    a.down_count = reinterpret_cast<int *>(at(3));
    a.rows_done = reinterpret_cast<int *>(at(4));
    a.grp_done = reinterpret_cast<int *>(at(5));
    a.xg = reinterpret_cast<uint32_t *>(at(6));
    a.zg = reinterpret_cast<float *>(at(7));
    a.xd = reinterpret_cast<uint32_t *>(at(8));
    a.zd = reinterpret_cast<float *>(at(9));
    a.yd = reinterpret_cast<float *>(at(10));
    cudaStream_t st = static_cast<cudaStream_t>(stream);
    cudaError_t rc;
    switch (ex->bits) {
    case 1: rc = launch_cb<1>(a, st); break;
    case 2: rc = launch_cb<2>(a, st); break;
    case 3: rc = launch_cb<3>(a, st); break;
    case 4: rc = launch_cb<4>(a, st); break;
    case 5: rc = launch_cb<5>(a, st); break;
    case 6: rc = launch_cb<6>(a, st); break;
    case 7: rc = launch_cb<7>(a, st); break;
    default: rc = launch_cb<8>(a, st); break;
    }
    return (int)rc;
}
