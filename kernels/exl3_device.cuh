// exl3_device.cuh: device building blocks of glmchat's EXL3 kernels: codebook decode of trellis
// states into mma.m16n8k16 fragments (B for the linears, A for the MoE strips), the tensor-core
// step, and the warp-wide 128-point Hadamard.
#ifndef GLMCHAT_EXL3_DEVICE_CUH
#define GLMCHAT_EXL3_DEVICE_CUH

#include <cstdint>
#include <cuda_fp16.h>

namespace exl3 {

constexpr uint32_t kMcgMult = 0xCBAC1FEDu;
constexpr uint32_t kMul1Mult = 0x83DCD12Du;
constexpr float kInvSqrt128 = 0.088388347648318440f;

__device__ __forceinline__ uint32_t h2_bits(__half2 h)
{
    return *reinterpret_cast<uint32_t *>(&h);
}

__device__ __forceinline__ __half2 bits_h2(uint32_t u)
{
    return *reinterpret_cast<__half2 *>(&u);
}

// Two 16-bit states -> one half2 (sa in the low half), exactly as the format defines:
// 3INST/MCG: x = s*M (+a); (x & 0x8FFF8FFF) ^ 0x3B603B60; low half + high half in fp16.
// MUL1: h = 0x6400 + bytesum(s*M) as fp16; fma(h, 0x1EEE, 0xC931) in fp16.
template <int CB>
__device__ __forceinline__ uint32_t decode_pair(uint32_t sa, uint32_t sb)
{
    if (CB == 2) {
        uint32_t xa = sa * kMul1Mult, xb = sb * kMul1Mult;
        uint32_t ha = __dp4a(xa, 0x01010101u, 0x6400u);
        uint32_t hb = __dp4a(xb, 0x01010101u, 0x6400u);
        __half2 h = bits_h2(__byte_perm(ha, hb, 0x5410));
        __half2 r = __hfma2(h, bits_h2(0x1EEE1EEEu), bits_h2(0xC931C931u));
        return h2_bits(r);
    }
    uint32_t xa, xb;
    if (CB == 1) {
        xa = sa * kMcgMult;
        xb = sb * kMcgMult;
    } else {
        xa = sa * 89226354u + 64248484u;
        xb = sb * 89226354u + 64248484u;
    }
    uint32_t lo = (__byte_perm(xa, xb, 0x5410) & 0x8FFF8FFFu) ^ 0x3B603B60u;
    uint32_t hi = (__byte_perm(xa, xb, 0x7632) & 0x8FFF8FFFu) ^ 0x3B603B60u;
    return h2_bits(__hadd2(bits_h2(lo), bits_h2(hi)));
}

// The eight states of lane l (stream positions 8l..8l+7) as four B-fragment registers:
// b[0], b[1] for the tile's columns 0-7, b[2], b[3] for columns 8-15.
template <int CB>
__device__ __forceinline__ void decode_states(const uint32_t s[8], uint32_t b[4])
{
    b[0] = decode_pair<CB>(s[0], s[1]);
    b[1] = decode_pair<CB>(s[2], s[3]);
    b[2] = decode_pair<CB>(s[4], s[5]);
    b[3] = decode_pair<CB>(s[6], s[7]);
}

// Any K (1..8): the lane reads the (at most three) 32-bit words its windows touch.
// word(i): the tile's word i of 8K (as little-endian int16 pairs, i.e. plain uint32 loads), from
// wherever the tile is (decode_any: global memory; decode_any_shared: shared memory).
template <int K, int CB, typename Word>
__device__ __forceinline__ void decode_any_words(Word word, int lane, uint32_t b[4])
{
    constexpr int kWords = 8 * K;
    int first = (8 * lane + 1) * K - 16 + 256 * K; // window start of the lane's first value
    int w0 = (first >> 5) % kWords;
    int base = first & 31;
    uint32_t a0 = word(w0);
    uint32_t a1 = word((w0 + 1) % kWords);
    uint32_t a2 = word((w0 + 2) % kWords);
    uint32_t a3 = word((w0 + 3) % kWords);
    uint32_t st[8];
#pragma unroll
    for (int j = 0; j < 8; j++) {
        int pos = base + j * K; // window start relative to word w0
        int q = pos >> 5, o = pos & 31;
        uint32_t hi = q == 0 ? a0 : q == 1 ? a1 : a2;
        uint32_t lo = q == 0 ? a1 : q == 1 ? a2 : a3;
        uint64_t v = ((uint64_t)hi << 32) | lo;
        st[j] = (uint32_t)(v >> (48 - o)) & 0xFFFFu;
    }
    decode_states<CB>(st, b);
}

template <int K, int CB>
__device__ __forceinline__ void decode_any(const uint32_t *words, int lane, uint32_t b[4])
{
    decode_any_words<K, CB>([words](int i) { return __ldg(words + i); }, lane, b);
}

template <int K, int CB>
__device__ __forceinline__ void decode_any_shared(const uint32_t *words, int lane, uint32_t b[4])
{
    decode_any_words<K, CB>([words](int i) { return words[i]; }, lane, b);
}

// 3INST/MCG, one state -> the two fp16 halves whose sum is its value (no pairing, no add):
// fed to the mma as two k positions that share one input, the tensor core does the add in fp32.
template <int CB>
__device__ __forceinline__ uint32_t decode_halves(uint32_t s)
{
    uint32_t x = CB == 1 ? s * kMcgMult : s * 89226354u + 64248484u;
    return (x & 0x8FFF8FFFu) ^ 0x3B603B60u;
}

// The A fragment with every input doubled for decode_halves B registers: a k-tile's fragment
// a[4] becomes two, lo (its inputs 2t, 2t+1 -> k' pairs) and hi (inputs 2t+8, 2t+9).
__device__ __forceinline__ void split_a(const uint32_t a[4], uint32_t lo[4], uint32_t hi[4])
{
    lo[0] = __byte_perm(a[0], 0, 0x1010);
    lo[2] = __byte_perm(a[0], 0, 0x3232);
    lo[1] = __byte_perm(a[1], 0, 0x1010);
    lo[3] = __byte_perm(a[1], 0, 0x3232);
    hi[0] = __byte_perm(a[2], 0, 0x1010);
    hi[2] = __byte_perm(a[2], 0, 0x3232);
    hi[1] = __byte_perm(a[3], 0, 0x1010);
    hi[3] = __byte_perm(a[3], 0, 0x3232);
}

// The eight raw 16-bit states of lane l of a 4-bit tile (w: its word l, prev: word l - 1).
__device__ __forceinline__ void states_k4(uint32_t w, uint32_t prev, uint32_t st[8])
{
    uint32_t s = __funnelshift_l(w, prev, 12); // (prev << 12) | (w >> 20)
    uint32_t s4 = s >> 4, w4 = w >> 4;
    st[0] = __byte_perm(s, 0, 0x4421);
    st[1] = __byte_perm(s4, 0, 0x4410);
    st[2] = __byte_perm(s, 0, 0x4410);
    st[3] = w >> 16;
    st[4] = __byte_perm(w4, 0, 0x4421);
    st[5] = __byte_perm(w, 0, 0x4421);
    st[6] = __byte_perm(w4, 0, 0x4410);
    st[7] = __byte_perm(w, 0, 0x4410);
}

// 4-bit tiles: lane l holds 32-bit word l of the tile; prev is word l-1 (mod 32).
template <int CB>
__device__ __forceinline__ void decode_k4(uint32_t w, uint32_t prev, uint32_t b[4])
{
    uint32_t st[8];
    states_k4(w, prev, st);
    decode_states<CB>(st, b);
}

// acc += A (16x16 fp16, row-major fragments) * B (16x8, col-major fragment), fp32 accumulate.
__device__ __forceinline__ void mma16816(float acc[4], const uint32_t a[4], uint32_t b0,
                                         uint32_t b1)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// v holds elements 4*lane + i (i = 0..3) of a 128-vector: in place v <- v H / sqrt(128).
__device__ __forceinline__ void fwht128_warp(float v[4])
{
    float a = v[0] + v[1], b = v[0] - v[1], c = v[2] + v[3], d = v[2] - v[3];
    v[0] = a + c;
    v[1] = b + d;
    v[2] = a - c;
    v[3] = b - d;
    int lane = threadIdx.x & 31;
#pragma unroll
    for (int m = 1; m < 32; m <<= 1) {
        bool upper = lane & m;
#pragma unroll
        for (int i = 0; i < 4; i++) {
            float o = __shfl_xor_sync(0xFFFFFFFFu, v[i], m);
            v[i] = upper ? o - v[i] : v[i] + o;
        }
    }
#pragma unroll
    for (int i = 0; i < 4; i++)
        v[i] *= kInvSqrt128;
}

__device__ __forceinline__ uint32_t ld_stream(const uint32_t *p)
{
    uint32_t v;
    asm volatile("ld.global.nc.L1::no_allocate.u32 %0, [%1];\n" : "=r"(v) : "l"(p));
    return v;
}

__device__ __forceinline__ uint4 ld_stream4(const uint32_t *p)
{
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
    return v;
}

// 3INST/MCG 4-bit strips skip the fp16 pairing and add of each weight's halves (2 of the 3.5
// integer-pipe operations a weight cost), at twice the mma count: the split form. MUL1's value is
// not a sum of two halves, so it keeps the pair form.
template <int CB>
__host__ __device__ constexpr bool split_form()
{
    return CB != 2;
}

// One warp's strip: 4 consecutive n-tiles (64 columns) over `ksteps` k-tiles, accumulated into
// acc[tile][mma half][4]. tile0: the first tile's words; stride: words between k-tiles.
// K = 4: the 4 tiles of a k-step are 512 contiguous bytes; lane l loads bytes 16l.. with one
// 16-byte load, PF steps ahead (strip4_prime issues the first PF before the inputs are ready),
// and a 512-byte warp-private shared slice regroups them so that lane l reads word l (and
// l - 1) of each tile. load_a(kt, a): the A fragment of k-tile kt.
template <int K, int PF>
__device__ __forceinline__ void strip4_prime(const uint32_t *__restrict__ tile0, size_t stride,
                                             int ksteps, uint4 ring[PF])
{
    int lane = threadIdx.x & 31;
    if (K == 4) {
#pragma unroll
        for (int i = 0; i < PF; i++)
#ifdef EXL3_BENCH_COMPUTE_ONLY
            ring[i] = make_uint4(lane, i, 0, 0);
#else
            ring[i] = i < ksteps ? ld_stream4(tile0 + i * stride + lane * 4) : make_uint4(0, 0, 0, 0);
#endif
    }
}

template <int K, int CB, int PF, typename ALoad>
__device__ __forceinline__ void strip4_run(const uint32_t *__restrict__ tile0, size_t stride,
                                           int ksteps, uint4 ring[PF], uint32_t *slice,
                                           ALoad load_a, float acc[4][2][4])
{
    int lane = threadIdx.x & 31;
    if (K == 4) {
        for (int kt = 0; kt < ksteps; kt += PF) {
#pragma unroll
            for (int i = 0; i < PF; i++) {
                if (kt + i < ksteps) {
                    uint4 v = ring[i];
                    if (kt + i + PF < ksteps)
                        ring[i] = ld_stream4(tile0 + (size_t)(kt + i + PF) * stride + lane * 4);
                    __syncwarp();
                    *reinterpret_cast<uint4 *>(slice + lane * 4) = v;
                    __syncwarp();
                    uint32_t a[4];
                    load_a(kt + i, a);
                    uint32_t alo[4], ahi[4];
                    if (split_form<CB>())
                        split_a(a, alo, ahi);
#pragma unroll
                    for (int t = 0; t < 4; t++) {
                        uint32_t w = slice[t * 32 + lane];
                        uint32_t prev = slice[t * 32 + ((lane + 31) & 31)];
#ifdef EXL3_BENCH_LOAD_ONLY
                        // benchmark variant: the same bytes moved, no decode and no mma (the
                        // results are meaningless); separates memory time from compute time
                        acc[t][0][0] += (float)((w ^ prev ^ a[0]) & 1u);
#else
                        if (split_form<CB>()) {
                            uint32_t st[8];
                            states_k4(w, prev, st);
                            mma16816(acc[t][0], alo, decode_halves<CB>(st[0]), decode_halves<CB>(st[1]));
                            mma16816(acc[t][0], ahi, decode_halves<CB>(st[2]), decode_halves<CB>(st[3]));
                            mma16816(acc[t][1], alo, decode_halves<CB>(st[4]), decode_halves<CB>(st[5]));
                            mma16816(acc[t][1], ahi, decode_halves<CB>(st[6]), decode_halves<CB>(st[7]));
                        } else {
                            uint32_t b[4];
                            decode_k4<CB>(w, prev, b);
                            mma16816(acc[t][0], a, b[0], b[1]);
                            mma16816(acc[t][1], a, b[2], b[3]);
                        }
#endif
                    }
                }
            }
        }
    } else {
        constexpr int kWords = 8 * K;
        for (int kt = 0; kt < ksteps; kt++) {
            uint32_t a[4];
            load_a(kt, a);
#pragma unroll
            for (int t = 0; t < 4; t++) {
                uint32_t b[4];
                decode_any<K, CB>(tile0 + (size_t)kt * stride + t * kWords, lane, b);
                mma16816(acc[t][0], a, b[0], b[1]);
                mma16816(acc[t][1], a, b[2], b[3]);
            }
        }
    }
}

template <int K, int CB, int PF, typename ALoad>
__device__ __forceinline__ void strip4(const uint32_t *__restrict__ tile0, size_t stride,
                                       int ksteps, uint32_t *slice, ALoad load_a,
                                       float acc[4][2][4])
{
    uint4 ring[PF];
    strip4_prime<K, PF>(tile0, stride, ksteps, ring);
    strip4_run<K, CB, PF>(tile0, stride, ksteps, ring, slice, load_a, acc);
}

// ---- the MoE kernel's strips, weights as the A operand ----
// A = one 16x16 trellis tile read transposed (16 output columns x 16 k), B = the inputs (16 k x 8
// rows). Lane (g, t)'s A fragment covers columns g, g+8 at k 2t, 2t+1, 2t+8, 2t+9: exactly the
// eight states its trellis word gives, so one tile is 2 mma for up to 8 rows (split halves: each
// weight's two fp16 halves sit at two k positions that share one input) or 1 mma (pair form),
// half of the weights-as-B count, and the 4-bit decode needs no reordering. Rows 8-15 of a group
// (R16) take a second B fragment. D: lane (g, t) holds columns g (d0, d1), g+8 (d2, d3) of input
// rows 2t (d0, d2), 2t+1 (d1, d3).
__device__ __forceinline__ void mma16816_w(float acc[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                           uint32_t a3, uint32_t b0, uint32_t b1)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// The input fragment of one k-tile: x[0] = rows g, k 2t..2t+1; x[1] = rows g, k 2t+8..2t+9;
// x[2], x[3] the same for rows g+8 (R16 only). Split form (3INST/MCG at K = 4): each input
// duplicated into both halves, s[0..3] rows g (k 2t, 2t+8, 2t+1, 2t+9), s[4..7] rows g+8.
template <bool R16, bool kSplit>
struct xfrag {
    static constexpr bool kSplitForm = kSplit;
    static constexpr bool kRows16 = R16;
    uint32_t x[4];
    uint32_t s[8];
    __device__ __forceinline__ void split()
    {
#pragma unroll
        for (int h = 0; h < (!kSplit ? 0 : R16 ? 2 : 1); h++) {
            s[4 * h + 0] = __byte_perm(x[2 * h], 0, 0x1010);
            s[4 * h + 1] = __byte_perm(x[2 * h + 1], 0, 0x1010);
            s[4 * h + 2] = __byte_perm(x[2 * h], 0, 0x3232);
            s[4 * h + 3] = __byte_perm(x[2 * h + 1], 0, 0x3232);
        }
    }
};

// Constants of the weights-as-A decode, read from constant memory by the caller: the compiler
// then keeps the mask and the flip of the 3INST/MCG step in registers and makes it one LOP3
// (with both as immediates it takes two, LOP3 having one immediate operand), and neg16 stays
// a multiplier (as an immediate, the multiply by -65536 becomes a shift and a subtraction).
struct decode_consts {
    uint32_t mask, flip, neg16;
};

// a * b + c as one multiply-add on the FMA pipe (the compiler would make b = -65536 a shift and
// a subtraction on the ALU pipe).
__host__ __device__ __forceinline__ uint32_t mad_lo(uint32_t a, uint32_t b, uint32_t c)
{
#ifdef __CUDA_ARCH__
    uint32_t r;
    asm("mad.lo.u32 %0, %1, %2, %3;\n" : "=r"(r) : "r"(a), "r"(b), "r"(c));
    return r;
#else
    return a * b + c;
#endif
}

// The low 32 bits of (hi:lo) >> n, as one funnel shift the compiler cannot merge with a later
// shift (merged, a window's high state took a 64-bit shift and a mask: 2 ALU operations, not 1).
__host__ __device__ __forceinline__ uint32_t funnel_r(uint32_t lo, uint32_t hi, uint32_t n)
{
#ifdef __CUDA_ARCH__
    uint32_t r;
    asm("shf.r.wrap.b32 %0, %1, %2, %3;\n" : "=r"(r) : "r"(lo), "r"(hi), "r"(n));
    return r;
#else
    return (uint32_t)((((uint64_t)hi << 32) | lo) >> n);
#endif
}

// The split form's eight products x = s*M (+a) of a 4-bit tile's lane come in four pairs of
// windows 16 bits apart, with no mask or byte moves. u, the 32 stream bits from window p (one
// funnel shift; w itself for p = 0), holds state p low and state p + 16 high, so with x_hi the
// high state's product (its state: u >> 16),
//   u*M + a*65537 - (x_hi << 16) = (s_lo + 2^16 s_hi)*M + a + 2^16 a - 2^16 (s_hi*M + a) = x_lo.
// A tile costs 3 funnel shifts + 4 shifts on the integer ALU pipe and 12 multiply-adds on the
// FMA pipe, against 4 shifts + 7 byte moves and 8 multiply-adds for extracting the eight states
// first (states_k4): the ALU pipe, the kernel's busiest, does 4 fewer of its 19 operations a tile.
// x[i] is the product of states_k4's state i (window 28 - 4i of prev:w); neg16: 0xFFFF0000,
// passed in a register.
template <int CB>
__host__ __device__ __forceinline__ void products_k4_pairs(uint32_t w, uint32_t prev,
                                                           uint32_t neg16, uint32_t x[8])
{
    const uint32_t m = CB == 1 ? kMcgMult : 89226354u;
    const uint32_t a = CB == 1 ? 0u : 64248484u;
    // windows 12, 8, 4, 0 low; 28, 24, 20, 16 high
    const uint32_t u[4] = {funnel_r(w, prev, 12), funnel_r(w, prev, 8), funnel_r(w, prev, 4), w};
    for (int i = 0; i < 4; i++) {
        uint32_t hi = mad_lo(u[i] >> 16, m, a);
        x[i] = hi;
        x[i + 4] = mad_lo(hi, neg16, mad_lo(u[i], m, a * 65537u));
    }
}

// decode_k4's B registers (the pair form), for fewer integer-ALU operations: 3INST/MCG take the
// eight products from products_k4_pairs (the products of states_k4's states: 7 ALU operations
// and 12 multiply-adds on the FMA pipe, not 10 and 8) and mask and flip each half pair with one
// LOP3 (sm in registers; decode_pair's immediates take two), then decode_pair's fp16 add. The
// same values as decode_k4 bit for bit; MUL1 is decode_k4 itself.
template <int CB>
__device__ __forceinline__ void decode_k4_fast(uint32_t w, uint32_t prev, const decode_consts &sm,
                                               uint32_t b[4])
{
    if (CB == 2) {
        decode_k4<CB>(w, prev, b);
        return;
    }
    uint32_t x[8];
    products_k4_pairs<CB>(w, prev, sm.neg16, x);
#pragma unroll
    for (int q = 0; q < 4; q++) {
        uint32_t lo, hi; // (x & mask) ^ flip of the two low halves, then of the two high halves
        asm("lop3.b32 %0, %1, %2, %3, 0x6A;\n"
            : "=r"(lo)
            : "r"(__byte_perm(x[2 * q], x[2 * q + 1], 0x5410)), "r"(sm.mask), "r"(sm.flip));
        asm("lop3.b32 %0, %1, %2, %3, 0x6A;\n"
            : "=r"(hi)
            : "r"(__byte_perm(x[2 * q], x[2 * q + 1], 0x7632)), "r"(sm.mask), "r"(sm.flip));
        b[q] = h2_bits(__hadd2(bits_h2(lo), bits_h2(hi)));
    }
}

// One 4-bit tile: lane word w, its predecessor prev, into acc[q], q = 2 * row half + k half.
// Split form: the two k halves of a weight (k 2t / 2t+8 and k 2t+1 / 2t+9) go to two chains,
// acc[2h] and acc[2h + 1], summed once at the end (strip_w_finish); rows 8-15 (R16) take chains
// 2 and 3 with the same operations, so a row's sums are the same operations in the same order
// whether its group has 1 row or 16 (the mma computes each output element from its own input
// column only); one chain for both halves measured within noise of two. The split form's states
// are decoded as paired products (products_k4_pairs), the mask and flip as one LOP3. Pair form:
// one chain per row half, acc[0] and acc[2].
template <int CB, bool R16, bool S>
__device__ __forceinline__ void tile_k4_w(uint32_t w, uint32_t prev, const xfrag<R16, S> &xf,
                                          const decode_consts &sm, float acc[4][4])
{
    if (S) {
        uint32_t x[8], h[8];
        products_k4_pairs<CB>(w, prev, sm.neg16, x);
#pragma unroll
        for (int i = 0; i < 8; i++) // (x & mask) ^ flip
            asm("lop3.b32 %0, %1, %2, %3, 0x6A;\n" : "=r"(h[i]) : "r"(x[i]), "r"(sm.mask), "r"(sm.flip));
        // k 2t (states 0, 4) and 2t+8 (2, 6); k 2t+1 (1, 5) and 2t+9 (3, 7)
        mma16816_w(acc[0], h[0], h[4], h[2], h[6], xf.s[0], xf.s[1]);
        mma16816_w(acc[1], h[1], h[5], h[3], h[7], xf.s[2], xf.s[3]);
        if (R16) {
            mma16816_w(acc[2], h[0], h[4], h[2], h[6], xf.s[4], xf.s[5]);
            mma16816_w(acc[3], h[1], h[5], h[3], h[7], xf.s[6], xf.s[7]);
        }
    } else {
        uint32_t b[4];
        decode_k4<CB>(w, prev, b);
        mma16816_w(acc[0], b[0], b[2], b[1], b[3], xf.x[0], xf.x[1]);
        if (R16)
            mma16816_w(acc[2], b[0], b[2], b[1], b[3], xf.x[2], xf.x[3]);
    }
}

// Any K, pair form (one mma per tile and row half: chains 0 and 2).
template <int K, int CB, bool R16, bool S>
__device__ __forceinline__ void tile_any_w(const uint32_t *words, int lane, const xfrag<R16, S> &xf,
                                           float acc[4][4])
{
    uint32_t b[4];
    decode_any<K, CB>(words, lane, b);
    mma16816_w(acc[0], b[0], b[2], b[1], b[3], xf.x[0], xf.x[1]);
    if (R16)
        mma16816_w(acc[2], b[0], b[2], b[1], b[3], xf.x[2], xf.x[3]);
}

// The strip's result per tile and row half: chain 2h (+ chain 2h + 1 in the split form, always
// in that order); row half 1 is 0 without R16.
template <bool R16, bool kSplit>
__device__ __forceinline__ void strip_w_finish(const float ch[4][4][4], float acc[4][2][4])
{
#pragma unroll
    for (int t = 0; t < 4; t++)
#pragma unroll
        for (int h = 0; h < 2; h++)
#pragma unroll
            for (int i = 0; i < 4; i++)
                acc[t][h][i] = h && !R16 ? 0.0f
                               : kSplit  ? ch[t][2 * h][i] + ch[t][2 * h + 1][i]
                                         : ch[t][2 * h][i];
}

// One k-step's trellis words for the weights-as-A strips, in the layout the ring holds: four
// 4-byte loads a lane, each a warp-wide 128-byte row (lane l gets word l of each of the 4 tiles,
// the word its decode needs; one address, the tiles at immediate offsets). The strip takes the
// previous word by one shuffle a tile, so no shared-memory round trip sits on the decode's
// critical path (a 16-byte load a lane regrouped through shared memory costs 1 STS, 2 WARPSYNC
// and 8 LDS a k-step instead of 4 SHFL).
__device__ __forceinline__ uint4 kstep_load(const uint32_t *__restrict__ p, int lane)
{
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.u32 %0, [%4];\n"
                 "ld.global.nc.L1::no_allocate.u32 %1, [%4+128];\n"
                 "ld.global.nc.L1::no_allocate.u32 %2, [%4+256];\n"
                 "ld.global.nc.L1::no_allocate.u32 %3, [%4+384];\n"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p + lane));
    return v;
}

template <int K, int PF>
__device__ __forceinline__ void strip_w_prime(const uint32_t *__restrict__ tile0, size_t stride,
                                              int ksteps, uint4 ring[PF])
{
    int lane = threadIdx.x & 31;
    if (K == 4) {
#pragma unroll
        for (int i = 0; i < PF; i++)
#ifdef EXL3_BENCH_COMPUTE_ONLY
            ring[i] = make_uint4(lane, i, 0, 0);
#else
            ring[i] = i < ksteps ? kstep_load(tile0 + i * stride, lane) : make_uint4(0, 0, 0, 0);
#endif
    }
}

__device__ __forceinline__ uint32_t uint4_at(const uint4 &v, int t)
{
    return t == 0 ? v.x : t == 1 ? v.y : t == 2 ? v.z : v.w;
}

// PF k-steps of a 4-bit weights-as-A strip from k-step kt, the words straight from the register
// ring (kstep_load's layout); kGuard: check each step and prefetch against ksteps.
// EXL3_BENCH_COMPUTE_ONLY: no trellis is read; each lane's words are made from kt, t and lane in
// registers and decoded and multiplied as usual (the decode-compute ceiling; results meaningless).
// load_x(kt, xf): the input fragment of k-tile kt into xf (xf.x, then xf.split(); or, where the
// inputs are stored duplicated, xf.s straight from shared memory).
template <int CB, int PF, bool R16, bool kS, bool kGuard, typename XLoad>
__device__ __forceinline__ void strip_w_block(const uint32_t *__restrict__ tile0, size_t stride,
                                              int ksteps, int kt, uint4 ring[PF], XLoad &load_x,
                                              const decode_consts &sm, float ch[4][4][4])
{
    int lane = threadIdx.x & 31;
#pragma unroll
    for (int i = 0; i < PF; i++) {
        if (!kGuard || kt + i < ksteps) {
#ifndef EXL3_BENCH_COMPUTE_ONLY
            // decode from ring[i] itself and refill it after the tiles (no copy of the four
            // words held across the decode: the register budget is full)
            uint4 v = ring[i];
#endif
            xfrag<R16, kS> xf;
            load_x(kt + i, xf);
#pragma unroll
            for (int t = 0; t < 4; t++) {
#ifdef EXL3_BENCH_COMPUTE_ONLY
                // no trellis read: words made in registers, decoded and multiplied as usual
                uint32_t w = (lane * 0x9E3779B9u) ^ ((kt + i) * 0x7F4A7C15u) ^ (t * 0x632BE5ABu);
                uint32_t prev = __funnelshift_l(w, w, 13);
#else
                uint32_t w = uint4_at(v, t);
                uint32_t prev = __shfl_sync(0xFFFFFFFFu, w, (lane + 31) & 31);
#endif
#ifdef EXL3_BENCH_LOAD_ONLY
                ch[t][0][0] += (float)((w ^ prev ^ xf.x[0]) & 1u);
#else
                tile_k4_w<CB, R16>(w, prev, xf, sm, ch[t]);
#endif
            }
#ifndef EXL3_BENCH_COMPUTE_ONLY
            if (!kGuard || kt + i + PF < ksteps)
                ring[i] = kstep_load(tile0 + (size_t)(kt + i + PF) * stride, lane);
#endif
        }
    }
}

// The k-steps run in blocks of PF without the per-step bounds checks (and their branches) while
// a whole block and its prefetches lie inside the strip; the rest takes the checked blocks.
template <int K, int CB, int PF, bool R16, typename XLoad>
__device__ __forceinline__ void strip_w_run(const uint32_t *__restrict__ tile0, size_t stride,
                                            int ksteps, uint4 ring[PF], XLoad load_x,
                                            const decode_consts &sm, float acc[4][2][4])
{
    constexpr bool kS = split_form<CB>();
    int lane = threadIdx.x & 31;
    float ch[4][4][4] = {};
    if (K == 4) {
        int kt = 0;
        for (; kt + 2 * PF <= ksteps; kt += PF)
            strip_w_block<CB, PF, R16, kS, false>(tile0, stride, ksteps, kt, ring, load_x, sm, ch);
        for (; kt < ksteps; kt += PF)
            strip_w_block<CB, PF, R16, kS, true>(tile0, stride, ksteps, kt, ring, load_x, sm, ch);
    } else {
        constexpr int kWords = 8 * K;
        for (int kt = 0; kt < ksteps; kt++) {
            xfrag<R16, false> xf;
            load_x(kt, xf);
#pragma unroll
            for (int t = 0; t < 4; t++)
                tile_any_w<K, CB, R16, false>(tile0 + (size_t)kt * stride + t * kWords, lane, xf,
                                              ch[t]);
        }
    }
    strip_w_finish<R16, kS && K == 4>(ch, acc);
}

} // namespace exl3

#endif
