// engine_kda.cu: Kimi delta attention on the GPU (architecture.md 2.4): the causal conv with its
// rolling window, per-head L2 norms, the forget gate, the delta-rule scan with each head's state
// held in registers, and the gated output norm.
#include "engine_common.cuh"
#include "engine_dot.cuh"

namespace {

constexpr int kConvMaxK = 16;
constexpr int kScanSlices = 8;    // row slices of a head's dk rows
constexpr int kScanMaxRows = 16;  // dk <= kScanSlices * kScanMaxRows = 128

// The conv's output for one channel: SiLU of the taps' fused multiply-adds from 0, in tap order.
__device__ __forceinline__ float silu_of_sum(float acc)
{
    return acc / (1.0f + expf(-acc));
}

constexpr int kConvRun = 16;  // tokens a warp of conv_norm_kernel
constexpr int kConvSlots = 4; // channels a lane: lane + 32 m of a head (dk <= 128)
constexpr int kConvWarps = 4; // warps a block (small blocks: more of them interleave on an SM,
                              // one loading while another computes)

// The causal conv with SiLU, then for q and k the per-head L2 norm (q scaled by qscale): a warp
// takes one plane (q, k or v) of one head over kConvRun tokens, lane the head's channels
// lane + 32 m with their KT taps and the run's window rows in registers (all loads out before
// the first use), so that each input row is read once (plus the KT - 1 rows before the run) and
// the norm needs no second pass. Each output is the taps' fused multiply-adds from 0 in tap
// order, then SiLU; the norm sums the squares over m, then across the warp, as the decode path's
// prep_plane does.
template <int KT>
__global__ void __launch_bounds__(32 * kConvWarps)
    conv_norm_kernel(const float *q, const float *k, const float *v, const float *state,
                     const float *qw, const float *kw, const float *vw, int T, int H, int dk,
                     float qscale, float *qo, float *ko, float *vo)
{
    pdl_trigger();
    const int lane = threadIdx.x & 31, wi = blockIdx.x * (blockDim.x / 32) + (threadIdx.x >> 5);
    const bool live = wi < 3 * H; // (the same for the whole warp)
    const int plane = wi / H, h = wi % H, C = H * dk;
    const float *wt = plane == 0 ? qw : plane == 1 ? kw : vw;
    float wr[kConvSlots][KT]; // the taps (weights: no kernel writes them, so read before the wait)
#pragma unroll
    for (int m = 0; m < kConvSlots; m++)
#pragma unroll
        for (int j = 0; j < KT; j++) {
            int ci = lane + 32 * m;
            wr[m][j] = live && ci < dk ? __ldg(wt + (size_t)(h * dk + ci) * KT + j) : 0.0f;
        }
    pdl_wait();
    if (!live)
        return;
    const float *in = plane == 0 ? q : plane == 1 ? k : v;
    float *out = plane == 0 ? qo : plane == 1 ? ko : vo;
    const int t0 = blockIdx.y * kConvRun;
    // window rows t0 .. t0 + kConvRun + KT - 2 ([state rows | new rows]); rows past the window's
    // last, T + KT - 2, read that one again and are not kept
    float x[kConvRun + KT - 1][kConvSlots];
#pragma unroll
    for (int r = 0; r < kConvRun + KT - 1; r++) {
        int row = min(t0 + r, T + KT - 2);
#pragma unroll
        for (int m = 0; m < kConvSlots; m++) {
            int c = h * dk + lane + 32 * m;
            x[r][m] = lane + 32 * m >= dk ? 0.0f
                      : row < KT - 1      ? state[(size_t)row * 3 * C + (size_t)plane * C + c]
                                          : in[(size_t)(row - (KT - 1)) * C + c];
        }
    }
#pragma unroll
    for (int s = 0; s < kConvRun; s++) {
        const int t = t0 + s;
        float y[kConvSlots], ss = 0.0f;
#pragma unroll
        for (int m = 0; m < kConvSlots; m++) {
            float acc = 0.0f;
#pragma unroll
            for (int j = 0; j < KT; j++)
                acc = __fmaf_rn(wr[m][j], x[s + j][m], acc);
            y[m] = silu_of_sum(acc);
            if (lane + 32 * m < dk)
                ss = __fmaf_rn(y[m], y[m], ss);
        }
        if (plane < 2) {
            ss = warp_sum(ss);
            float inv = (plane == 0 ? qscale : 1.0f) / sqrtf(ss + 1e-6f);
#pragma unroll
            for (int m = 0; m < kConvSlots; m++)
                y[m] = __fmul_rn(y[m], inv);
        }
        if (t < T)
#pragma unroll
            for (int m = 0; m < kConvSlots; m++)
                if (lane + 32 * m < dk)
                    out[(size_t)t * C + h * dk + lane + 32 * m] = y[m];
    }
}

__global__ void conv_state_kernel(const float *q, const float *k, const float *v, float *state,
                                  int T, int C, int K)
{
    pdl_prologue();
    int ch = blockIdx.x * blockDim.x + threadIdx.x;
    if (ch >= 3 * C)
        return;
    int plane = ch / C, c = ch % C;
    const float *in = plane == 0 ? q : plane == 1 ? k : v;
    float keep[kConvMaxK];
    for (int r = 0; r < K - 1; r++) {
        int row = T + r;
        keep[r] = row < K - 1 ? state[(size_t)row * 3 * C + ch] : in[(size_t)(row - (K - 1)) * C + c];
    }
    for (int r = 0; r < K - 1; r++)
        state[(size_t)r * 3 * C + ch] = keep[r];
}

// trail rows [K-1+T][3C]: the window before the chunk, then the chunk's q k v rows.
__global__ void conv_trail_kernel(const float *q, const float *k, const float *v,
                                  const float *state, int T, int C, int K, float *trail)
{
    pdl_prologue();
    size_t n = (size_t)(K - 1 + T) * 3 * C;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        int row = (int)(i / (3 * C)), ch = (int)(i % (3 * C));
        int plane = ch / C, c = ch % C;
        const float *in = plane == 0 ? q : plane == 1 ? k : v;
        trail[i] = row < K - 1 ? state[i] : in[(size_t)(row - (K - 1)) * C + c];
    }
}

constexpr int kGateRun = 8; // tokens a thread of gate_rows_kernel

// The forget gates' and beta's activations: a thread takes W consecutive gates of one head over
// kGateRun tokens (all loads out before the first use), each by the formula prep_gates uses;
// the thread with a head's first gate also takes that head's beta.
template <int W> // 1 or 4 (dk % 4 == 0)
__global__ void __launch_bounds__(256)
    gate_rows_kernel(float *g, float *beta, const float *A_log, const float *dt_bias, int T, int H,
                     int dk, int has_lb, float lb)
{
    pdl_trigger();
    const int hd = (blockIdx.x * blockDim.x + threadIdx.x) * W, h = hd / dk;
    const bool live = hd < H * dk;
    float rate = 0.0f, bias[W]; // (weights: no kernel writes them, so read before the wait)
    if (live) {
        rate = expf(A_log[h]);
#pragma unroll
        for (int u = 0; u < W; u++)
            bias[u] = dt_bias[hd + u];
    }
    pdl_wait();
    if (!live)
        return;
    const int t0 = blockIdx.y * kGateRun;
    float x[kGateRun][W];
#pragma unroll
    for (int s = 0; s < kGateRun; s++) {
        const float *p = g + (size_t)min(t0 + s, T - 1) * H * dk + hd;
        if constexpr (W == 4) {
            float4 f = *reinterpret_cast<const float4 *>(p);
            x[s][0] = f.x, x[s][1] = f.y, x[s][2] = f.z, x[s][3] = f.w;
        } else {
            x[s][0] = p[0];
        }
    }
#pragma unroll
    for (int s = 0; s < kGateRun; s++) {
        const int t = t0 + s;
        if (t >= T)
            break;
        float y[W];
#pragma unroll
        for (int u = 0; u < W; u++) {
            float xu = x[s][u] + bias[u];
            if (has_lb) {
                y[u] = lb * sigmoidf_(rate * xu);
            } else {
                float sp = xu > 20.0f ? xu : logf(1.0f + expf(xu));
                y[u] = -rate * sp;
            }
        }
        float *p = g + (size_t)t * H * dk + hd;
        if constexpr (W == 4)
            *reinterpret_cast<float4 *>(p) = make_float4(y[0], y[1], y[2], y[3]);
        else
            p[0] = y[0];
        if (hd % dk == 0) {
            size_t bi = (size_t)t * H + h;
            beta[bi] = sigmoidf_(beta[bi]);
        }
    }
}

// The decode path's steps between the products and the scan (T <= kPrepMaxT, K <= kPrepMaxK),
// one launch: warps 0 .. 3H-1 take a (plane, head) of q, k or v: each of the head's channels
// (lane + 32 j) with its conv taps in registers, the T outputs with SiLU and the L2 norm of q
// and k rows (conv_norm_kernel's order), then the window's last rows kept in the state; warps
// 3H .. 4H-1 take a head's forget gates and beta (gate_rows_kernel's formulas).
constexpr int kPrepMaxT = 8, kPrepMaxK = 8, kPrepSlots = 4; // dk <= 32 * kPrepSlots

// What the prep reads (the products' outputs, the conv state and the layer's weights).
struct prep_args {
    const float *q, *k, *v;
    float *state;
    const float *qw, *kw, *vw;
    int T, H, dk, K;
    float qscale;
    const float *g, *beta; // the forget gates' and beta's products (before their activations)
    const float *A_log, *dt_bias;
    int has_lb;
    float lb;
};

// One warp: plane 0, 1 or 2 (q, k or v) of head h: each of the head's channels (lane + 32 j)
// with its conv taps in registers, the T outputs with SiLU and the L2 norm of q and k rows
// (conv_norm_kernel's order), into out[t * ostride + channel]; then the window's last rows kept
// in the state.
__device__ __forceinline__ void prep_plane(const prep_args &a, int plane, int h, float *out,
                                           int ostride)
{
    const int lane = threadIdx.x & 31, dk = a.dk, K = a.K, C = a.H * dk;
    const float *in = plane == 0 ? a.q : plane == 1 ? a.k : a.v;
    const float *wt = plane == 0 ? a.qw : plane == 1 ? a.kw : a.vw;
    float *state = a.state;
    // row `row` of the window [state rows | new rows] of channel c (ch = plane * C + c)
    auto window = [&](int ch, int c, int row) {
        return row < K - 1 ? state[(size_t)row * 3 * C + ch] : in[(size_t)(row - (K - 1)) * C + c];
    };
    float wc[kPrepSlots][kPrepMaxK]; // no arrays indexed by t: local memory
#pragma unroll
    for (int j = 0; j < kPrepSlots; j++)
#pragma unroll
        for (int i = 0; i < kPrepMaxK; i++) {
            int ci = lane + 32 * j;
            wc[j][i] = ci < dk && i < K ? wt[(size_t)(h * dk + ci) * K + i] : 0.0f;
        }
    // slot j's channel at token t: its conv over the window, then SiLU (conv_norm_kernel's order)
    auto conv_silu = [&](int j, int t) {
        int ci = lane + 32 * j, c = h * dk + ci;
        float acc = 0.0f;
        if (ci < dk)
#pragma unroll
            for (int i = 0; i < kPrepMaxK; i++)
                if (i < K)
                    acc += wc[j][i] * window(plane * C + c, c, t + i);
        return acc / (1.0f + expf(-acc));
    };
    for (int t = 0; t < a.T; t++) {
        float y[kPrepSlots], ss = 0.0f;
#pragma unroll
        for (int j = 0; j < kPrepSlots; j++) {
            y[j] = conv_silu(j, t);
            if (lane + 32 * j < dk)
                ss += y[j] * y[j];
        }
        float inv = 1.0f;
        if (plane < 2) {
            ss = warp_sum(ss);
            inv = (plane == 0 ? a.qscale : 1.0f) / sqrtf(ss + 1e-6f);
        }
#pragma unroll
        for (int j = 0; j < kPrepSlots; j++)
            if (lane + 32 * j < dk)
                out[(size_t)t * ostride + lane + 32 * j] = plane < 2 ? y[j] * inv : y[j];
    }
    // the window's last K-1 rows become the state; ascending, so that row T + r is read before
    // it is overwritten
#pragma unroll
    for (int j = 0; j < kPrepSlots; j++) {
        int ci = lane + 32 * j, c = h * dk + ci;
        if (ci < dk)
            for (int r = 0; r < K - 1; r++)
                state[(size_t)r * 3 * C + plane * C + c] = window(plane * C + c, c, a.T + r);
    }
}

// A forget gate from its product x (dt_bias added), rate = exp(A_log[h]): the lower-bounded
// sigmoid, or -rate * softplus(x) (gate_rows_kernel's formulas).
__device__ __forceinline__ float gate_value(const prep_args &a, float rate, float x)
{
    if (a.has_lb)
        return a.lb * sigmoidf_(rate * x);
    float sp = x > 20.0f ? x : logf(1.0f + expf(x));
    return -rate * sp;
}

// One warp: head h's forget gates (gate_rows_kernel's formulas) from their products gin[t * instride
// + i] into g_out[t * gstride + i] and its beta into beta_out[t * bstride].
__device__ __forceinline__ void prep_gates(const prep_args &a, int h, const float *gin,
                                           size_t instride, float *g_out, int gstride,
                                           float *beta_out, int bstride)
{
    const int lane = threadIdx.x & 31, dk = a.dk;
    float rate = expf(a.A_log[h]);
    for (int t = 0; t < a.T; t++) {
#pragma unroll 4
        for (int i = lane; i < dk; i += 32) { // (unrolled: the loads of a head go out at once)
            float x = gin[(size_t)t * instride + i] + a.dt_bias[h * dk + i];
            g_out[(size_t)t * gstride + i] = gate_value(a, rate, x);
        }
        if (lane == 0)
            beta_out[(size_t)t * bstride] = sigmoidf_(a.beta[(size_t)t * a.H + h]);
    }
}

// The decode path's prep (T <= kPrepMaxT, K <= kPrepMaxK) in a launch of its own: warps 0 .. 3H-1
// take a (plane, head), warps 3H .. 4H-1 a head's gates (in place: g and beta are the outputs).
__global__ void __launch_bounds__(256) kda_prep_kernel(prep_args a, float *qo, float *ko,
                                                       float *vo, float *g, float *beta)
{
    pdl_prologue();
    int gw = blockIdx.x * (blockDim.x / 32) + (threadIdx.x >> 5);
    if (gw >= 4 * a.H)
        return;
    if (gw >= 3 * a.H) {
        int h = gw - 3 * a.H;
        prep_gates(a, h, a.g + (size_t)h * a.dk, (size_t)a.H * a.dk, g + (size_t)h * a.dk,
                   a.H * a.dk, beta + h, a.H);
        return;
    }
    int plane = gw / a.H, h = gw % a.H;
    float *out = plane == 0 ? qo : plane == 1 ? ko : vo;
    prep_plane(a, plane, h, out + (size_t)h * a.dk, a.H * a.dk);
}

// The forget and output gates' second products folded into the decode step
// (eng_kda_lowrank): f and g [H * dk][cols] (bf16, cols <= 256 and a multiple of 8), their
// inputs xf and xg [T][cols]; on 0: the step reads the products from memory. Each row is summed
// as eng_matmul_jobs sums a row of at most 256 columns (one 16-byte unit a lane from lane 0,
// dot8, warp_sum), so the step's g and gate carry that product's bits; a token's sum does not
// depend on the tokens beside it.
struct lowrank_dev {
    const uint16_t *f, *g;
    const float *xf, *xg;
    int cols, bf, on;
};

// The prefill path's delta rule (prefill_scan_kernel): a block a (head, group of 64 columns), 4
// warps of 16 columns; lane (half, c) keeps slices 4 half .. 4 half + 3 (rows 8 r + 4 half + i) of
// its column, so the 8 slices' partials meet in two lanes of one warp: no barrier a token. q, k,
// exp(g), v and beta come in through shared memory a group of tokens at a time (cp.async, three
// buffers, one barrier a group). The arithmetic is step_cluster_kernel's, operation for operation.
constexpr int kPrefillCols = 64;    // columns of a block
constexpr int kPrefillTokens = 8;   // tokens of a staged group
constexpr int kPrefillBufs = 3;     // groups in flight: filling, ready, being read
constexpr int kPrefillMaxDk = 128;  // rows staged a token (zero past dk)
constexpr int kPrefillThreads = 32 * kPrefillCols / 16;

struct __align__(16) prefill_group {
    float k[kPrefillTokens][kPrefillMaxDk], q[kPrefillTokens][kPrefillMaxDk];
    float a[kPrefillTokens][kPrefillMaxDk]; // g, then exp(g) in place
    float v[kPrefillTokens][kPrefillCols], beta[kPrefillTokens];
};

__device__ __forceinline__ void cp_async_16(void *smem, const void *gmem, int src_bytes)
{
    unsigned dst = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(gmem),
                 "r"(src_bytes)
                 : "memory");
}

__device__ __forceinline__ void cp_async_4(void *smem, const void *gmem, int src_bytes)
{
    unsigned dst = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(gmem),
                 "r"(src_bytes)
                 : "memory");
}

__device__ __forceinline__ void cp_async_commit()
{
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}

// Every group but the newest one committed is in shared memory (for this thread's copies).
__device__ __forceinline__ void cp_async_wait_older()
{
    asm volatile("cp.async.wait_group 1;\n" ::: "memory");
}

// What a block stages: the head's q, k, g rows, its columns' v and the head's beta.
struct prefill_src {
    const float *q, *k, *g, *v, *beta;
    int T, H, dk, h, c0;
};

// Element e of the head's q, k and g rows of group [t0, t0 + kPrefillTokens), W floats a copy:
// its token and row, and whether it is real (else zero-filled).
template <int W>
__device__ __forceinline__ bool prefill_row_elem(const prefill_src &s, int t0, int e, int *tl,
                                                 int *i, size_t *at)
{
    *tl = e / (kPrefillMaxDk / W);
    *i = e % (kPrefillMaxDk / W) * W;
    int t = t0 + *tl;
    bool in = t < s.T && *i < s.dk;
    *at = in ? (size_t)t * s.H * s.dk + (size_t)s.h * s.dk + *i : 0;
    return in;
}

// Group [t0, t0 + kPrefillTokens) into b by cp.async (this thread's share; committed by the
// caller), 16-byte copies when kVec (dk % 4 == 0, the arrays 16-byte aligned), else words. Rows
// past dk and tokens past T are zero-filled.
template <bool kVec>
__device__ void prefill_stage(prefill_group &b, const prefill_src &s, int t0)
{
    constexpr int W = kVec ? 4 : 1, bytes = 4 * W;
    const int tid = threadIdx.x, nt = blockDim.x, C = s.H * s.dk;
    for (int e = tid; e < kPrefillTokens * kPrefillMaxDk / W; e += nt) {
        int tl, i;
        size_t at;
        int n = prefill_row_elem<W>(s, t0, e, &tl, &i, &at) ? bytes : 0;
        if (kVec) {
            cp_async_16(&b.k[tl][i], s.k + at, n);
            cp_async_16(&b.q[tl][i], s.q + at, n);
            cp_async_16(&b.a[tl][i], s.g + at, n);
        } else {
            cp_async_4(&b.k[tl][i], s.k + at, n);
            cp_async_4(&b.q[tl][i], s.q + at, n);
            cp_async_4(&b.a[tl][i], s.g + at, n);
        }
    }
    for (int e = tid; e < kPrefillTokens * kPrefillCols / W; e += nt) {
        int tl = e / (kPrefillCols / W), c = e % (kPrefillCols / W) * W, t = t0 + tl;
        bool in = t < s.T && s.c0 + c < s.dk;
        const float *src = s.v + (in ? (size_t)t * C + (size_t)s.h * s.dk + s.c0 + c : 0);
        if (kVec)
            cp_async_16(&b.v[tl][c], src, in ? bytes : 0);
        else
            cp_async_4(&b.v[tl][c], src, in ? bytes : 0);
    }
    if (tid < kPrefillTokens) {
        int t = t0 + tid;
        cp_async_4(&b.beta[tid], s.beta + (t < s.T ? (size_t)t * s.H + s.h : 0), t < s.T ? 4 : 0);
    }
}

// The gates this thread copied into b (prefill_stage<kVec>'s share, complete): g <- exp(g), as
// step_cluster_kernel computes it.
template <bool kVec>
__device__ void prefill_exp_gates(prefill_group &b)
{
    constexpr int W = kVec ? 4 : 1;
    for (int e = threadIdx.x; e < kPrefillTokens * kPrefillMaxDk / W; e += blockDim.x) {
        int tl = e / (kPrefillMaxDk / W), i = e % (kPrefillMaxDk / W) * W;
#pragma unroll
        for (int u = 0; u < W; u++)
            b.a[tl][i + u] = expf(b.a[tl][i + u]);
    }
}

// The slices' sum in step_cluster_kernel's order, ((0 + p0) + p1) + ... + p7, where half 0's lane
// holds p0 .. p3 and half 1's lane (16 lanes on) p4 .. p7: every lane of the column gets it.
__device__ __forceinline__ float prefill_slice_sum(const float p[4], int lane)
{
    float lo = __fadd_rn(__fadd_rn(__fadd_rn(__fadd_rn(0.0f, p[0]), p[1]), p[2]), p[3]);
    float from = __shfl_sync(0xffffffffu, lo, lane & 15); // half 0's prefix, to both
    float all = __fadd_rn(__fadd_rn(__fadd_rn(__fadd_rn(from, p[0]), p[1]), p[2]), p[3]);
    return __shfl_sync(0xffffffffu, all, lane | 16); // half 1's total
}

// The same sum, complete in half 1's lane only (the output, which that lane stores).
__device__ __forceinline__ float prefill_slice_sum_half1(const float p[4], int lane)
{
    float lo = __fadd_rn(__fadd_rn(__fadd_rn(__fadd_rn(0.0f, p[0]), p[1]), p[2]), p[3]);
    float from = __shfl_sync(0xffffffffu, lo, lane & 15);
    return __fadd_rn(__fadd_rn(__fadd_rn(__fadd_rn(from, p[0]), p[1]), p[2]), p[3]);
}

// kFull: dk = kPrefillMaxDk (no row out of range: no per-row tests); kVec: prefill_stage's.
template <bool kFull, bool kVec>
__global__ void __launch_bounds__(kPrefillThreads, 1)
    prefill_scan_kernel(float *S, const float *q, const float *k, const float *v, const float *g,
                        const float *beta, int T, int H, int dk, float *o, float *trail)
{
    pdl_prologue();
    __shared__ prefill_group grp[kPrefillBufs];
    const int h = blockIdx.x, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int half = lane >> 4, c0 = blockIdx.y * kPrefillCols;
    const int jc = warp * 16 + (lane & 15), j = c0 + jc, C = H * dk;
    const bool ok = j < dk;
    float *Sh = S + (size_t)h * dk * dk;
    auto row_ok = [&](int r, int i) { return kFull || 8 * r + 4 * half + i < dk; };
    float Sr[kScanMaxRows][4]; // Sr[r][i]: row 8 r + 4 half + i (slice 4 half + i)
#pragma unroll
    for (int r = 0; r < kScanMaxRows; r++)
#pragma unroll
        for (int i = 0; i < 4; i++) {
            int d = 8 * r + 4 * half + i;
            Sr[r][i] = ok && row_ok(r, i) ? Sh[(size_t)d * dk + j] : 0.0f;
        }
    const prefill_src src = {q, k, g, v, beta, T, H, dk, h, c0};
    const int ngroups = (T + kPrefillTokens - 1) / kPrefillTokens;
    prefill_stage<kVec>(grp[0], src, 0);
    cp_async_commit();
    if (ngroups > 1)
        prefill_stage<kVec>(grp[1], src, kPrefillTokens);
    cp_async_commit();
    float po[4] = {0.0f, 0.0f, 0.0f, 0.0f}; // the previous token's output partials
    int prev = -1;                          // that token (-1: none yet)
    for (int gi = 0; gi < ngroups; gi++) {
        prefill_group &b = grp[gi % kPrefillBufs];
        cp_async_wait_older();
        prefill_exp_gates<kVec>(b);
        __syncthreads(); // group gi is in; every warp is done with group gi - 1
        if (gi + 2 < ngroups)
            prefill_stage<kVec>(grp[(gi + 2) % kPrefillBufs], src, (gi + 2) * kPrefillTokens);
        cp_async_commit();
        int nt = min(kPrefillTokens, T - gi * kPrefillTokens);
        for (int tl = 0; tl < nt; tl++) {
            int t = gi * kPrefillTokens + tl;
            const float *ka = &b.k[tl][4 * half], *aa = &b.a[tl][4 * half];
            const float *qa = &b.q[tl][4 * half];
            const float vj = b.v[tl][jc], bt = b.beta[tl]; // (v: 0 past dk; read early)
            float kr[kScanMaxRows][4], pm[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
            for (int r = 0; r < kScanMaxRows; r++) {
                float4 a4 = *reinterpret_cast<const float4 *>(aa + 8 * r);
                float4 k4 = *reinterpret_cast<const float4 *>(ka + 8 * r);
                float av[4] = {a4.x, a4.y, a4.z, a4.w};
                kr[r][0] = k4.x, kr[r][1] = k4.y, kr[r][2] = k4.z, kr[r][3] = k4.w;
#pragma unroll
                for (int i = 0; i < 4; i++)
                    if (row_ok(r, i)) {
                        Sr[r][i] = __fmul_rn(Sr[r][i], av[i]);
                        pm[i] = __fmaf_rn(Sr[r][i], kr[r][i], pm[i]);
                    }
            }
            float mem = prefill_slice_sum(pm, lane);
            // the previous token's output, summed here to fill the sum's round trips (stored
            // after the update, off the path to the next token)
            float out = prefill_slice_sum_half1(po, lane);
            float delta = ok ? __fmul_rn(__fsub_rn(vj, mem), bt) : 0.0f;
#pragma unroll
            for (int i = 0; i < 4; i++)
                po[i] = 0.0f;
#pragma unroll
            for (int r = 0; r < kScanMaxRows; r++) {
                float4 q4 = *reinterpret_cast<const float4 *>(qa + 8 * r);
                float qv[4] = {q4.x, q4.y, q4.z, q4.w};
#pragma unroll
                for (int i = 0; i < 4; i++)
                    if (row_ok(r, i)) {
                        Sr[r][i] = __fmaf_rn(kr[r][i], delta, Sr[r][i]);
                        po[i] = __fmaf_rn(Sr[r][i], qv[i], po[i]);
                    }
            }
            if (half && ok && prev >= 0)
                o[(size_t)prev * C + (size_t)h * dk + j] = out;
            prev = t;
            if (trail) { // the state after token t, for going back inside a verification window
                float *Th = trail + (size_t)t * H * dk * dk + (size_t)h * dk * dk;
#pragma unroll
                for (int r = 0; r < kScanMaxRows; r++)
#pragma unroll
                    for (int i = 0; i < 4; i++)
                        if (ok && row_ok(r, i))
                            Th[(size_t)(8 * r + 4 * half + i) * dk + j] = Sr[r][i];
            }
        }
    }
    float out = prefill_slice_sum_half1(po, lane);
    if (half && ok)
        o[(size_t)prev * C + (size_t)h * dk + j] = out;
#pragma unroll
    for (int r = 0; r < kScanMaxRows; r++)
#pragma unroll
        for (int i = 0; i < 4; i++)
            if (ok && row_ok(r, i))
                Sh[(size_t)(8 * r + 4 * half + i) * dk + j] = Sr[r][i];
}

__global__ void out_norm_kernel(float *__restrict__ o, const float *__restrict__ gate,
                                const float *__restrict__ w, int rows, int dk, float eps)
{
    pdl_prologue();
    int wi = blockIdx.x * (blockDim.x / 32) + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (wi >= rows)
        return;
    float *x = o + (size_t)wi * dk;
    const float *gt = gate + (size_t)wi * dk;
    float ss = 0.0f;
#pragma unroll 4
    for (int i = lane; i < dk; i += 32) // (unrolled: a head's loads go out together)
        ss += x[i] * x[i];
    ss = warp_sum(ss);
    float inv = 1.0f / sqrtf(ss / (float)dk + eps);
#pragma unroll 4
    for (int i = lane; i < dk; i += 32)
        x[i] = w[i] * (x[i] * inv) * sigmoidf_(gt[i]);
}

// conv_norm_kernel for taps K (1 .. KT).
template <int KT>
void launch_conv_norm(int K, dim3 grid, cudaStream_t st, const float *q, const float *k,
                      const float *v, const float *state, const float *qw, const float *kw,
                      const float *vw, int T, int H, int dk, float qscale, float *qo, float *ko,
                      float *vo)
{
    if constexpr (KT > 1) {
        if (K < KT) {
            launch_conv_norm<KT - 1>(K, grid, st, q, k, v, state, qw, kw, vw, T, H, dk, qscale,
                                     qo, ko, vo);
            return;
        }
    }
    launch(conv_norm_kernel<KT>, grid, 32 * kConvWarps, 0, st, q, k, v, state, qw, kw, vw, T, H,
           dk, qscale, qo, ko, vo);
}

unsigned grid_for(size_t n)
{
    unsigned b = blocks_for(n, 256);
    return b < 4096 ? (b ? b : 1) : 4096;
}

// ---- the decode step over a cluster of blocks a head -------------------------------------------
// step_cluster_kernel: eng_kda_step_decode's work (kda_prep_kernel's prep, then the delta rule and
// the gated norm, with the bits of eng_kda_prep_decode then eng_kda_scan_norm) spread over a
// cluster of ncl = ceil(dk / 32) blocks a head, block r of the cluster owning the head's columns
// (and conv channels, and gate rows) 32 r .. 32 r + 31: a warp a slice of 8, a lane a column. Each
// block computes its 32 channels of the conv (q, k, v), its 32 rows of each of the gates' second
// products and its 32 gates; the blocks then read each other's unnormalized q and k and gates
// through distributed shared memory, each computes the head's q/k norms itself (in prep_plane's
// order), runs the delta rule on its columns, and after a second exchange of the token's outputs
// the gated norm's sum of squares (out_norm_kernel's order). A block a head would leave 100 of an
// H100's 132 SMs idle at the decode shape (32 heads); a cluster of 4 puts the state's loads and the
// products' rows on 128. Without the prep (kPrep false) it is eng_kda_scan_norm
// (prefill_scan_kernel's delta rule, then out_norm_kernel's norm, in their bits): each block reads
// the head's q, k and g rows.
constexpr int kStepCols = 32;                    // columns of a block: a lane each
constexpr int kStepThreads = 32 * kScanSlices;   // a warp a slice
constexpr int kStepMaxCluster = 4;               // dk <= 128
constexpr int kStepWin = kPrepMaxK - 1 + kPrepMaxT; // conv window rows a channel
constexpr int kStepLowRows = 8;                  // product rows a warp (its loads out at once)
// Blocks an SM must hold: a Spark's 48 SMs take the decode shape's 128 blocks (32 heads) at once
// only 3 an SM (80 registers); an H100's 132 take them one an SM, with the registers to hold
// the state's loads from the start.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 1200 // (the Spark's GB10, sm_121)
constexpr int kStepMinBlocks = 3;
#else
constexpr int kStepMinBlocks = 1;
#endif

// What a block shares with its cluster, and what it keeps of its own columns ([t][column]).
struct step_shared {
    float qy[kPrepMaxT][kStepCols], ky[kPrepMaxT][kStepCols]; // the conv's q, k before the norms
    float ea[kPrepMaxT][kStepCols];                           // exp of the forget gates
    float os[kPrepMaxT][kStepCols];                           // the delta rule's outputs
    float vy[kPrepMaxT][kStepCols], gt[kPrepMaxT][kStepCols]; // v; the output gate's product
    float gfr[kPrepMaxT][kStepCols];                          // the forget gates' product
    float qn[kPrepMaxT][128], kn[kPrepMaxT][128], a[kPrepMaxT][128]; // the head's rows
    float red[2][kScanSlices][32], bt[kPrepMaxT], s_inv[kPrepMaxT];
    float taps[3][kPrepMaxK][kStepCols], win[3][kStepWin][kStepCols]; // the conv's, by cp.async
};

// p (a shared address of this block) in block `rank` of the cluster.
template <typename T>
__device__ __forceinline__ const T *cluster_peer(const T *p, int rank)
{
    return static_cast<const T *>(__cluster_map_shared_rank(p, (unsigned)rank));
}

// x, as a value the compiler cannot see through: the state's row offsets are recomputed where
// they are used instead of being held in registers over the whole kernel.
__device__ __forceinline__ int opaque(int x)
{
    asm volatile("" : "+r"(x));
    return x;
}

__device__ __forceinline__ uint4 opaque(uint4 x)
{
    asm volatile("" : "+r"(x.x), "+r"(x.y), "+r"(x.z), "+r"(x.w));
    return x;
}

// A thread's part of a head's state column (rows slice + kScanSlices r, from col = the head's
// state + slice dk + j) into Sr, zero past dk or off the head (!ok); store_column writes it back.
__device__ __forceinline__ void load_column(const float *col, int slice, int dk, bool ok,
                                            float (&Sr)[kScanMaxRows])
{
    const int rs = opaque(kScanSlices * dk); // (the offsets' stride)
#pragma unroll
    for (int r = 0; r < kScanMaxRows; r++)
        Sr[r] = ok && slice + kScanSlices * r < dk ? col[r * rs] : 0.0f;
}

__device__ __forceinline__ void store_column(float *col, int slice, int dk, bool ok,
                                             const float (&Sr)[kScanMaxRows])
{
    const int rs = opaque(kScanSlices * dk);
#pragma unroll
    for (int r = 0; r < kScanMaxRows; r++)
        if (ok && slice + kScanSlices * r < dk)
            col[r * rs] = Sr[r];
}

// A forget gate from its product x (before dt_bias): prep_gates' formula, then its exp as the
// scan takes it.
__device__ __forceinline__ float gate_exp(const prep_args &a, float rate, float x_in, float bias)
{
    return expf(gate_value(a, rate, x_in + bias));
}

// kPrep: eng_kda_step_decode's, the prep's inputs in pa and lr; else eng_kda_scan_norm's, q, k,
// v, g and beta given (q and k normed, g and beta activated). T <= kPrepMaxT.
template <bool kPrep>
__global__ void __launch_bounds__(kStepThreads, kStepMinBlocks)
    step_cluster_kernel(float *S, const float *q, const float *k, const float *v, const float *g,
                        const float *beta, int T, int H, int dk, float *o, float *trail,
                        const float *gate, const float *nw, float eps, prep_args pa,
                        lowrank_dev lr)
{
    pdl_trigger();
    __shared__ step_shared sh;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, slice = warp, h = blockIdx.x;
    const int c0 = blockIdx.y * kStepCols, j = c0 + lane, C = H * dk, K = pa.K;
    const bool ok = j < dk;
    float *Sh = S + (size_t)h * dk * dk;
    float Sr[kScanMaxRows];
    if constexpr (!kPrep) { // the rows of q, k, exp(g), column j's v, beta as given
        pdl_wait();
        load_column(Sh + slice * dk + j, slice, dk, ok, Sr);
        for (int e = threadIdx.x; e < T * dk; e += kStepThreads) {
            int t = e / dk, i = e % dk;
            size_t at = (size_t)t * C + (size_t)h * dk + i;
            sh.qn[t][i] = q[at];
            sh.kn[t][i] = k[at];
            sh.a[t][i] = expf(g[at]);
        }
        for (int t = warp; t < T && ok; t += kScanSlices)
            sh.vy[t][lane] = v[(size_t)t * C + (size_t)h * dk + j];
        if (warp == 0 && lane < T)
            sh.bt[lane] = beta[(size_t)lane * H + h];
        __syncthreads();
    } else {
        // Weights first (no kernel writes them), while the kernel before ends: warps 0-2 their
        // plane's taps of channel j into shared memory, warp 3 its gate's rate and bias, and with
        // lr every warp its 8 rows of one of the products (warps 0-3 the forget gates', 4-7 the
        // output gate's) into registers.
        const int plane = warp; // (warps 0-2)
        if (warp < 3) {
            const float *wt = plane == 0 ? pa.qw : plane == 1 ? pa.kw : pa.vw;
#pragma unroll
            for (int i = 0; i < kPrepMaxK; i++) {
                bool in = ok && i < K;
                cp_async_4(&sh.taps[plane][i][lane], in ? wt + (size_t)(h * dk + j) * K + i : wt,
                           in ? 4 : 0);
            }
        }
        float rate = 0.0f, bias = 0.0f;
        if (warp == 3) {
            rate = expf(pa.A_log[h]);
            bias = ok ? pa.dt_bias[h * dk + j] : 0.0f;
        }
        const int lw = warp & 3, n8 = lr.cols / 8;
        const uint16_t *lm = warp < 4 ? lr.f : lr.g;
        uint4 u[kStepLowRows];
#pragma unroll
        for (int r = 0; r < kStepLowRows; r++) {
            int i = c0 + lw * kStepLowRows + r;
            const uint16_t *row = lm + (size_t)(h * dk + i) * lr.cols;
            u[r] = lr.on && i < dk && lane < n8 ? __ldg(reinterpret_cast<const uint4 *>(row) + lane)
                                                : make_uint4(0, 0, 0, 0);
        }
        pdl_wait();
        // warps 0-2: channel j's conv window [state rows | new rows] into shared memory
        const float *in = plane == 0 ? pa.q : plane == 1 ? pa.k : pa.v;
        float *cst = pa.state + (size_t)plane * C + h * dk + j; // (warps 0-2) row r at r * 3 C
        if (warp < 3) {
#pragma unroll
            for (int s = 0; s < kStepWin; s++) {
                bool st = ok && s < K - 1, row = ok && s >= K - 1 && s < K - 1 + T;
                const float *src = st    ? cst + (size_t)s * 3 * C
                                   : row ? in + (size_t)(s - (K - 1)) * C + h * dk + j
                                         : in;
                cp_async_4(&sh.win[plane][s][lane], src, st || row ? 4 : 0);
            }
            cp_async_commit();
        }
        load_column(Sh + slice * dk + j, slice, dk, ok, Sr);
        if (warp == 4 && lane < T)
            sh.bt[lane] = sigmoidf_(pa.beta[(size_t)lane * H + h]);
        if (lr.on) { // rows c0 + 8 lw + r of the forget (warps 0-3) or output (4-7) gate's product
            const float *x = warp < 4 ? lr.xf : lr.xg;
            float(*dst)[kStepCols] = warp < 4 ? sh.gfr : sh.gt;
            const int col0 = lw * kStepLowRows;
            for (int t = 0; t < T; t++) { // the 8 rows' sums together (eng_matmul_jobs' bits)
                float acc[kStepLowRows][1];
#pragma unroll
                for (int r = 0; r < kStepLowRows; r++) {
                    uint4 w = opaque(u[r]); // (converted here, not held converted over the tokens)
                    acc[r][0] = 0.0f;
                    if (c0 + col0 + r < dk && lane < n8)
                        dot8<1>(w, lr.bf, x + (size_t)t * lr.cols, lr.cols, lane, 1, acc[r]);
                }
#pragma unroll
                for (int r = 0; r < kStepLowRows; r++)
                    acc[r][0] = warp_sum(acc[r][0]);
#pragma unroll
                for (int r = 0; r < kStepLowRows; r++)
                    if (lane == 0 && c0 + col0 + r < dk)
                        dst[t][col0 + r] = acc[r][0];
            }
        }
        if (warp < 3) { // the conv with SiLU (prep_plane's arithmetic); then the window moves on
            asm volatile("cp.async.wait_all;\n" ::: "memory"); // (a lane reads its own copies)
            for (int t = 0; t < T; t++) {
                float acc = 0.0f;
                if (ok)
#pragma unroll
                    for (int i = 0; i < kPrepMaxK; i++)
                        if (i < K)
                            acc += sh.taps[plane][i][lane] * sh.win[plane][t + i][lane];
                float y = acc / (1.0f + expf(-acc));
                (plane == 0 ? sh.qy : plane == 1 ? sh.ky : sh.vy)[t][lane] = y;
            }
            for (int r = 0; ok && r < K - 1; r++) // row T + r of the window becomes row r
                cst[(size_t)r * 3 * C] = sh.win[plane][T + r][lane];
        }
        if (lr.on)
            __syncthreads(); // the forget gates' products in
        if (warp == 3)
            for (int t = 0; t < T; t++)
                if (ok)
                    sh.ea[t][lane] = gate_exp(pa, rate, lr.on ? sh.gfr[t][lane]
                                                              : pa.g[(size_t)t * C + h * dk + j],
                                              bias);
        // the cluster's shares out; each block then takes the head's q, k (normed) and gates
        __cluster_barrier_arrive();
        __cluster_barrier_wait();
        for (int task = warp; task < 2 * T; task += kScanSlices) {
            int p = task / T, t = task % T; // p 0: q, 1: k
            float y[kStepMaxCluster], ss = 0.0f;
#pragma unroll
            for (int m = 0; m < kStepMaxCluster; m++) {
                int ci = lane + 32 * m;
                y[m] = 0.0f;
                if (ci < dk) {
                    const float *src = p == 0 ? &sh.qy[t][lane] : &sh.ky[t][lane];
                    y[m] = *cluster_peer(src, m);
                    ss += y[m] * y[m];
                }
            }
            ss = warp_sum(ss);
            float inv = (p == 0 ? pa.qscale : 1.0f) / sqrtf(ss + 1e-6f);
#pragma unroll
            for (int m = 0; m < kStepMaxCluster; m++)
                if (lane + 32 * m < dk)
                    (p == 0 ? sh.qn : sh.kn)[t][lane + 32 * m] = y[m] * inv;
        }
        for (int e = threadIdx.x; e < T * dk; e += kStepThreads) {
            int t = e / dk, i = e % dk;
            sh.a[t][i] = *cluster_peer(&sh.ea[t][i % kStepCols], i / kStepCols);
        }
        __syncthreads();
    }
    // the delta rule on column j: slice s's partial sums run over its rows s + 8 r in ascending
    // order, and the 8 slices' partials are summed in order s = 0 .. 7 from 0 (the arithmetic
    // prefill_scan_kernel repeats); each token's work is the same whatever T, so T rows in one
    // launch give the bits of T launches of one
    for (int t = 0; t < T; t++) {
        float pm = 0.0f;
#pragma unroll
        for (int r = 0; r < kScanMaxRows; r++) {
            int d = slice + kScanSlices * r;
            if (d < dk) {
                Sr[r] *= sh.a[t][d];
                pm += Sr[r] * sh.kn[t][d];
            }
        }
        sh.red[0][slice][lane] = pm;
        __syncthreads();
        float mem = 0.0f;
#pragma unroll
        for (int s = 0; s < kScanSlices; s++)
            mem += sh.red[0][s][lane];
        float vj = !ok ? 0.0f : sh.vy[t][lane];
        float bt = sh.bt[t];
        float delta = ok ? (vj - mem) * bt : 0.0f;
        float po = 0.0f;
#pragma unroll
        for (int r = 0; r < kScanMaxRows; r++) {
            int d = slice + kScanSlices * r;
            if (d < dk) {
                Sr[r] += sh.kn[t][d] * delta;
                po += Sr[r] * sh.qn[t][d];
            }
        }
        sh.red[1][slice][lane] = po; // (red[1] of the token before: read before this token's
        __syncthreads();            //  first barrier)
        if (slice == 0 && ok) {
            float acc = 0.0f;
#pragma unroll
            for (int s = 0; s < kScanSlices; s++)
                acc += sh.red[1][s][lane];
            sh.os[t][lane] = acc;
        }
        if (trail) { // the state after token t, for going back inside a verification window
            float *col = trail + ((size_t)t * H + h) * dk * dk + slice * dk + j;
            store_column(col, slice, dk, ok, Sr);
        }
    }
    store_column(Sh + slice * dk + j, slice, dk, ok, Sr);
    // the outputs' gated norm: each token's sum of squares over the head's dk outputs, warp t's
    // lanes in out_norm_kernel's order
    __cluster_barrier_arrive();
    __cluster_barrier_wait();
    for (int t = warp; t < T; t += kScanSlices) {
        float ss = 0.0f;
#pragma unroll 4
        for (int i = lane; i < dk; i += 32) {
            float x = *cluster_peer(&sh.os[t][lane], i / kStepCols);
            ss += x * x;
        }
        ss = warp_sum(ss);
        if (lane == 0)
            sh.s_inv[t] = 1.0f / sqrtf(ss / (float)dk + eps);
    }
    __cluster_barrier_arrive(); // (the peers' outputs read: this block may end once all have)
    __syncthreads();
    for (int t = warp; t < T && ok; t += kScanSlices) {
        size_t base = (size_t)t * C + (size_t)h * dk;
        float gt = kPrep && lr.on ? sh.gt[t][lane] : gate[base + j];
        o[base + j] = nw[j] * (sh.os[t][lane] * sh.s_inv[t]) * sigmoidf_(gt);
    }
    __cluster_barrier_wait();
}

} // namespace

extern "C" int eng_kda_conv_norm(const float *q, const float *k, const float *v, float *state,
                                 const float *qw, const float *kw, const float *vw, int T, int H,
                                 int dk, int K, float qscale, float *qo, float *ko, float *vo,
                                 void *stream)
{
    if (K < 1 || K > kConvMaxK + 1 || T < 1 || H < 1 || dk < 1 || dk > 32 * kConvSlots)
        return -1;
    cudaStream_t st = static_cast<cudaStream_t>(stream);
    int C = H * dk;
    dim3 grid(blocks_for((size_t)3 * H, kConvWarps), blocks_for((size_t)T, kConvRun));
    launch_conv_norm<kConvMaxK + 1>(K, grid, st, q, k, v, state, qw, kw, vw, T, H, dk, qscale, qo,
                                    ko, vo);
    if (K > 1)
        launch(conv_state_kernel, blocks_for((size_t)3 * C, 256), 256, 0, st, q, k, v, state, T, C,
               K);
    return (int)cudaGetLastError();
}

extern "C" int eng_kda_gate(float *g, float *beta, const float *A_log, const float *dt_bias, int T,
                            int H, int dk, int has_lb, float lb, void *stream)
{
    if (T < 1 || H < 1 || dk < 1)
        return -1;
    cudaStream_t st = static_cast<cudaStream_t>(stream);
    bool vec = dk % 4 == 0 && (uintptr_t)g % 16 == 0;
    int W = vec ? 4 : 1;
    dim3 grid(blocks_for((size_t)H * dk / W, 256), blocks_for((size_t)T, kGateRun));
    if (vec)
        launch(gate_rows_kernel<4>, grid, 256, 0, st, g, beta, A_log, dt_bias, T, H, dk, has_lb,
               lb);
    else
        launch(gate_rows_kernel<1>, grid, 256, 0, st, g, beta, A_log, dt_bias, T, H, dk, has_lb,
               lb);
    return (int)cudaGetLastError();
}

extern "C" int eng_kda_scan_trail(float *S, const float *q, const float *k, const float *v,
                                  const float *g, const float *beta, int T, int H, int dk, float *o,
                                  float *trail, void *stream)
{
    if (dk < 1 || dk > kScanSlices * kScanMaxRows || T < 1)
        return -1;
    dim3 grid(H, blocks_for((size_t)dk, kPrefillCols));
    cudaStream_t st = static_cast<cudaStream_t>(stream);
    uintptr_t align = (uintptr_t)q | (uintptr_t)k | (uintptr_t)g | (uintptr_t)v;
    bool full = dk == kPrefillMaxDk, vec = dk % 4 == 0 && align % 16 == 0;
    auto kernel = full ? vec ? prefill_scan_kernel<true, true> : prefill_scan_kernel<true, false>
                  : vec ? prefill_scan_kernel<false, true>
                        : prefill_scan_kernel<false, false>;
    launch(kernel, grid, kPrefillThreads, 0, st, S, q, k, v, g, beta, T, H, dk, o, trail);
    return (int)cudaGetLastError();
}

extern "C" int eng_kda_scan_norm(float *S, const float *q, const float *k, const float *v,
                                 const float *g, const float *beta, int T, int H, int dk, float *o,
                                 float *trail, const float *gate, const float *w, float eps,
                                 void *stream)
{
    if (dk < 1 || dk > kScanSlices * kScanMaxRows || T < 1 || !gate || !w)
        return -1;
    int ncb = (int)blocks_for((size_t)dk, 32);
    cudaStream_t st = static_cast<cudaStream_t>(stream);
    // a block of 32 columns each, a cluster a head; kPrepMaxT tokens a launch, each launch going
    // on from the state the one before left
    size_t C = (size_t)H * dk, hs = (size_t)H * dk * dk;
    for (int t0 = 0; t0 < T; t0 += kPrepMaxT) {
        size_t r = (size_t)t0 * C;
        launch_cluster(step_cluster_kernel<false>, dim3(H, ncb), kStepThreads, dim3(1, ncb, 1), 0,
                       st, S, q + r, k + r, v + r, g + r, beta + (size_t)t0 * H,
                       min(kPrepMaxT, T - t0), H, dk, o + r, trail ? trail + t0 * hs : nullptr,
                       gate + r, w, eps, prep_args{}, lowrank_dev{});
    }
    return (int)cudaGetLastError();
}

// The folded products' device form, or off where lr is NULL or not of that form.
static lowrank_dev lowrank_of(const eng_kda_lowrank *lr, int T, int H, int dk)
{
    lowrank_dev d = {};
    if (!eng_kda_lowrank_takes(lr, T, H, dk))
        return d;
    d.f = static_cast<const uint16_t *>(lr->f_b->data);
    d.g = static_cast<const uint16_t *>(lr->g_b->data);
    d.xf = lr->lo_f;
    d.xg = lr->lo_g;
    d.cols = lr->f_b->cols;
    d.bf = 1;
    d.on = 1;
    return d;
}

extern "C" int eng_kda_lowrank_takes(const eng_kda_lowrank *lr, int T, int H, int dk)
{
    if (!lr || !lr->f_b || !lr->g_b || !lr->lo_f || !lr->lo_g || T < 1 || T > kPrepMaxT ||
        dk < 1 || dk > 128)
        return 0;
    const eng_mat *f = lr->f_b, *g = lr->g_b;
    return f->dtype == ENG_BF16 && g->dtype == ENG_BF16 && f->rows == H * dk && g->rows == H * dk &&
           g->cols == f->cols && f->cols % 8 == 0 && f->cols <= 256 &&
           (uintptr_t)f->data % 16 == 0 && (uintptr_t)g->data % 16 == 0 &&
           (uintptr_t)lr->lo_f % 16 == 0 && (uintptr_t)lr->lo_g % 16 == 0;
}

extern "C" int eng_kda_step_decode(const float *q, const float *k, const float *v, float *state,
                                   const float *qw, const float *kw, const float *vw, int T, int H,
                                   int dk, int K, float qscale, const float *g, const float *beta,
                                   const float *A_log, const float *dt_bias, int has_lb, float lb,
                                   float *S, float *o, float *trail, const float *gate,
                                   const float *w, float eps, const eng_kda_lowrank *lr,
                                   void *stream)
{
    lowrank_dev low = lowrank_of(lr, T, H, dk);
    if (T < 1 || T > kPrepMaxT || K < 1 || K > kPrepMaxK || dk < 1 || dk > 32 * kPrepSlots ||
        dk > kScanSlices * kScanMaxRows || H < 1 || (lr && !low.on) ||
        (!low.on && (!g || !gate)) || !w)
        return -1;
    prep_args pa = {q, k, v, state, qw, kw, vw, T, H, dk, K, qscale, g, beta, A_log, dt_bias,
                    has_lb, lb};
    cudaStream_t st = static_cast<cudaStream_t>(stream);
    int ncb = (int)blocks_for((size_t)dk, 32);
    // a block of 32 columns each, a cluster a head
    launch_cluster(step_cluster_kernel<true>, dim3(H, ncb), kStepThreads, dim3(1, ncb, 1), 0, st, S,
                   nullptr, nullptr, nullptr, nullptr, nullptr, T, H, dk, o, trail, gate, w, eps,
                   pa, low);
    return (int)cudaGetLastError();
}

extern "C" int eng_kda_step_clusters(int H, int dk, int *clusters)
{
    *clusters = 0;
    if (H < 1 || dk < 1 || dk > 32 * kPrepSlots)
        return -1;
    int ncb = (int)blocks_for((size_t)dk, 32);
    cudaLaunchConfig_t cfg = {};
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = 1;
    attr[0].val.clusterDim.y = ncb;
    attr[0].val.clusterDim.z = 1;
    cfg.gridDim = dim3(H, ncb);
    cfg.blockDim = dim3(kStepThreads);
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    // the decode form (with its prep) is the one every decode step launches; both forms share
    // the block shape, so one answer holds for eng_kda_scan_norm too
    cudaError_t rc = cudaOccupancyMaxActiveClusters(clusters, step_cluster_kernel<true>, &cfg);
    if (rc != cudaSuccess)
        cudaGetLastError();
    return (int)rc;
}

extern "C" int eng_kda_scan(float *S, const float *q, const float *k, const float *v, const float *g,
                            const float *beta, int T, int H, int dk, float *o, void *stream)
{
    return eng_kda_scan_trail(S, q, k, v, g, beta, T, H, dk, o, NULL, stream);
}

extern "C" int eng_kda_conv_trail(const float *q, const float *k, const float *v,
                                  const float *state, int T, int C, int K, float *trail,
                                  void *stream)
{
    if (K < 1 || K > kConvMaxK + 1 || T < 1)
        return -1;
    launch(conv_trail_kernel, grid_for((size_t)(K - 1 + T) * 3 * C), 256, 0,
           static_cast<cudaStream_t>(stream), q, k, v, state, T, C, K, trail);
    return (int)cudaGetLastError();
}

extern "C" int eng_kda_out_norm(float *o, const float *gate, const float *w, int T, int H, int dk,
                                float eps, void *stream)
{
    int rows = T * H;
    // two warps a block: a decode step's 64 rows over 32 SMs instead of 8
    launch(out_norm_kernel, blocks_for((size_t)rows, 2), 64, 0, static_cast<cudaStream_t>(stream),
           o, gate, w, rows, dk, eps);
    return (int)cudaGetLastError();
}

extern "C" int eng_kda_prep_decode(const float *q, const float *k, const float *v, float *state,
                                   const float *qw, const float *kw, const float *vw, int T, int H,
                                   int dk, int K, float qscale, float *qo, float *ko, float *vo,
                                   float *g, float *beta, const float *A_log, const float *dt_bias,
                                   int has_lb, float lb, void *stream)
{
    if (T < 1 || T > kPrepMaxT || K < 1 || K > kPrepMaxK || dk < 1 || dk > 32 * kPrepSlots || H < 1)
        return -1;
    // two warps a block: the 4 H warps (256 for GLM) spread over 128 SMs instead of 32 (each
    // warp's work is latency-bound; more SMs give more load and store units to its round trips)
    prep_args pa = {q, k, v, state, qw, kw, vw, T, H, dk, K, qscale, g, beta, A_log, dt_bias,
                    has_lb, lb};
    launch(kda_prep_kernel, blocks_for((size_t)4 * H, 2), 64, 0, static_cast<cudaStream_t>(stream),
           pa, qo, ko, vo, g, beta);
    return (int)cudaGetLastError();
}
