// engine_kda.cu: Kimi delta attention on the GPU (architecture.md 2.4): the causal conv with its
// rolling window, per-head L2 norms, the forget gate, the delta-rule scan with each head's state
// held in registers, and the gated output norm.
#include "engine_common.cuh"
#include "engine_dot.cuh"

namespace {

constexpr int kConvMaxK = 16;
constexpr int kScanSlices = 8;    // row slices of a head's dk rows
constexpr int kScanMaxRows = 16;  // dk <= kScanSlices * kScanMaxRows = 128
constexpr int kScanMaxCb = 4;     // column groups of 32 a block: the whole head (dk <= 128)

__global__ void conv_kernel(const float *q, const float *k, const float *v, const float *state,
                            const float *qw, const float *kw, const float *vw, int T, int C, int K,
                            float *qo, float *ko, float *vo)
{
    pdl_prologue();
    size_t n = (size_t)T * 3 * C;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        int t = (int)(i / (3 * C)), ch = (int)(i % (3 * C));
        int plane = ch / C, c = ch % C;
        const float *in = plane == 0 ? q : plane == 1 ? k : v;
        const float *w = (plane == 0 ? qw : plane == 1 ? kw : vw) + (size_t)c * K;
        float acc = 0.0f;
        for (int j = 0; j < K; j++) {
            int row = t + j; // in [state rows | new rows]
            float x = row < K - 1 ? state[(size_t)row * 3 * C + ch]
                                  : in[(size_t)(row - (K - 1)) * C + c];
            acc += w[j] * x;
        }
        float *out = plane == 0 ? qo : plane == 1 ? ko : vo;
        out[(size_t)t * C + c] = acc / (1.0f + expf(-acc));
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

__global__ void l2norm_kernel(float *q, float *k, int rows, int dk, float qscale)
{
    pdl_prologue();
    int w = blockIdx.x * (blockDim.x / 32) + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (w >= 2 * rows)
        return;
    float *x = (w < rows ? q : k) + (size_t)(w % rows) * dk;
    float scale = w < rows ? qscale : 1.0f;
    float ss = 0.0f;
    for (int i = lane; i < dk; i += 32)
        ss += x[i] * x[i];
    ss = warp_sum(ss);
    float inv = scale / sqrtf(ss + 1e-6f);
    for (int i = lane; i < dk; i += 32)
        x[i] *= inv;
}

__global__ void gate_kernel(float *g, float *beta, const float *A_log, const float *dt_bias, int T,
                            int H, int dk, int has_lb, float lb)
{
    pdl_prologue();
    size_t n = (size_t)T * H * dk;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        int hd = (int)(i % ((size_t)H * dk));
        int h = hd / dk;
        float rate = expf(A_log[h]);
        float x = g[i] + dt_bias[hd];
        if (has_lb) {
            g[i] = lb * sigmoidf_(rate * x);
        } else {
            float sp = x > 20.0f ? x : logf(1.0f + expf(x));
            g[i] = -rate * sp;
        }
        if (hd % dk == 0 && i / ((size_t)H * dk) < (size_t)T) {
            size_t bi = (i / ((size_t)H * dk)) * H + h;
            beta[bi] = sigmoidf_(beta[bi]);
        }
    }
}

// The decode path's steps between the products and the scan (T <= kPrepMaxT, K <= kPrepMaxK),
// one launch: warps 0 .. 3H-1 take a (plane, head) of q, k or v: each of the head's channels
// (lane + 32 j) with its conv taps in registers, the T outputs with SiLU (conv_kernel's order),
// the L2 norm of q and k rows (l2norm_kernel's order), then the window's last rows kept in the
// state; warps 3H .. 4H-1 take a head's forget gates and beta (gate_kernel's formulas).
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
// with its conv taps in registers, the T outputs with SiLU (conv_kernel's order), the L2 norm of
// q and k rows (l2norm_kernel's order), into out[t * ostride + channel]; then the window's last
// rows kept in the state.
// kTapsInRegs 0 (a 1024-thread block's 64 registers): each tap is read where it is used.
template <bool kTapsInRegs = true>
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
    float wc[kTapsInRegs ? kPrepSlots : 1][kPrepMaxK]; // no arrays indexed by t: local memory
    if (kTapsInRegs)
#pragma unroll
        for (int j = 0; j < kPrepSlots; j++)
#pragma unroll
            for (int i = 0; i < kPrepMaxK; i++) {
                int ci = lane + 32 * j;
                wc[j][i] = ci < dk && i < K ? wt[(size_t)(h * dk + ci) * K + i] : 0.0f;
            }
    auto tap = [&](int j, int ci, int i) {
        return kTapsInRegs ? wc[kTapsInRegs ? j : 0][i] : __ldg(wt + (size_t)(h * dk + ci) * K + i);
    };
    // slot j's channel at token t: its conv over the window, then SiLU (conv_kernel's order)
    auto conv_silu = [&](int j, int t) {
        int ci = lane + 32 * j, c = h * dk + ci;
        float acc = 0.0f;
        if (ci < dk)
#pragma unroll
            for (int i = 0; i < kPrepMaxK; i++)
                if (i < K)
                    acc += tap(j, ci, i) * window(plane * C + c, c, t + i);
        return acc / (1.0f + expf(-acc));
    };
    for (int t = 0; t < a.T && !kTapsInRegs; t++) { // a slot at a time, scaled after the sum
        float ss = 0.0f;
#pragma unroll
        for (int j = 0; j < kPrepSlots; j++) {
            int ci = lane + 32 * j;
            float y = conv_silu(j, t);
            if (ci < dk) {
                ss += y * y;
                out[(size_t)t * ostride + ci] = y;
            }
        }
        if (plane < 2) {
            ss = warp_sum(ss);
            float inv = (plane == 0 ? a.qscale : 1.0f) / sqrtf(ss + 1e-6f);
            for (int ci = lane; ci < dk; ci += 32)
                out[(size_t)t * ostride + ci] = out[(size_t)t * ostride + ci] * inv;
        }
    }
    for (int t = 0; t < a.T && kTapsInRegs; t++) {
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

// One warp: head h's forget gates (gate_kernel's formulas) from their products gin[t * instride
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
            float gv;
            if (a.has_lb) {
                gv = a.lb * sigmoidf_(rate * x);
            } else {
                float sp = x > 20.0f ? x : logf(1.0f + expf(x));
                gv = -rate * sp;
            }
            g_out[(size_t)t * gstride + i] = gv;
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
// inputs xf and xg [T][cols]; on 0: the step reads the products from memory.
struct lowrank_dev {
    const uint16_t *f, *g;
    const float *xf, *xg;
    int cols, bf, on;
};

constexpr int kLowRows = 4; // rows a warp loads at once

// Rows h * dk + i (i < dk) of f and of g against T rows of their inputs, each summed as
// eng_matmul_jobs sums a row of at most 256 columns (one 16-byte unit a lane from lane 0, dot8,
// warp_sum: its skinny rows and its one-warp rows alike; dot8's sum for a token does not depend
// on the tokens beside it, so a token at a time gives the same bits) into gf[t][i] and gg[t][i].
// This is warp w of nw sharing the 2 dk rows, kLowRows at a time (their loads out together).
__device__ void lowrank_rows(const lowrank_dev &lr, int h, int dk, int T, int w, int nw,
                             float (*gf)[128], float (*gg)[128])
{
    const int lane = threadIdx.x & 31, n8 = lr.cols / 8;
    for (int q0 = w * kLowRows; q0 < 2 * dk; q0 += nw * kLowRows) {
        uint4 u[kLowRows];
#pragma unroll
        for (int k = 0; k < kLowRows; k++) {
            int q = q0 + k, i = q < dk ? q : q - dk;
            const uint16_t *m = q < dk ? lr.f : lr.g;
            u[k] = q < 2 * dk && lane < n8
                       ? __ldg(reinterpret_cast<const uint4 *>(m + (size_t)(h * dk + i) * lr.cols) +
                               lane)
                       : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
        for (int k = 0; k < kLowRows; k++) {
            int q = q0 + k, i = q < dk ? q : q - dk;
            const float *x = q < dk ? lr.xf : lr.xg;
            for (int t = 0; t < T; t++) {
                float acc[1] = {0.0f};
                if (q < 2 * dk && lane < n8)
                    dot8<1>(u[k], lr.bf, x + (size_t)t * lr.cols, lr.cols, lane, 1, acc);
                acc[0] = warp_sum(acc[0]);
                if (lane == 0 && q < 2 * dk)
                    (q < dk ? gf : gg)[t][i] = acc[0];
            }
        }
    }
}

// A block a (head, group of 32 * ncb columns): thread (cb, slice, lane) keeps rows slice + 8 r
// of column (blockIdx.y * ncb + cb) * 32 + lane of the head's state. kNorm (ncb covers the whole
// head): each token's output row then gets out_norm_kernel's gated RMSNorm, in its arithmetic,
// in the same launch. kPrep (with kNorm, the decode path): the block first runs its head's prep
// (warps 0-2 prep_plane with each tap read where it is used, warp 3 prep_gates: kda_prep_kernel's
// operations) into shared memory, and the scan reads q, k, v, the gates and beta from there: one
// launch instead of two, the same bits.
template <bool kNorm, bool kPrep = false>
__global__ void __launch_bounds__(kNorm ? 1024 : 256) scan_kernel(float *S, const float *q, const float *k,
                                                    const float *v, const float *g,
                                                    const float *beta, int T, int H, int dk,
                                                    float *o, float *trail, const float *gate,
                                                    const float *nw, float eps, prep_args pa,
                                                    lowrank_dev lr)
{
    pdl_trigger();
    if (kPrep) { // the prep's weights towards L2 while the kernel before ends (no kernel writes them)
        int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, h = blockIdx.x;
        const float *wt = warp == 0 ? pa.qw : warp == 1 ? pa.kw : warp == 2 ? pa.vw : pa.dt_bias;
        int n = warp < 3 ? pa.dk * pa.K : pa.dk; // floats of this head's taps or biases
        if (warp < 4 && lane * 32 < n)
            asm volatile("prefetch.global.L2 [%0];" ::"l"(wt + (size_t)h * n + lane * 32));
        if (lr.on) { // and this head's rows of the gates' second products
            size_t bytes = (size_t)pa.dk * lr.cols * 2, lines = (bytes + 127) / 128;
            for (size_t i = threadIdx.x; i < 2 * lines; i += blockDim.x) {
                const char *m = reinterpret_cast<const char *>(i < lines ? lr.f : lr.g);
                size_t off = (i < lines ? i : i - lines) * 128;
                asm volatile("prefetch.global.L2 [%0];" ::"l"(m + (size_t)h * bytes + off));
            }
        }
    }
    pdl_wait();
    __shared__ float ks[128], qs[128], as[128], os[kNorm ? 128 : 1], s_inv;
    __shared__ float red[kScanMaxCb][kScanSlices][32];
    constexpr int kPT = kPrep ? kPrepMaxT : 1, kPD = kPrep ? 128 : 1;
    __shared__ float pp[4][kPT][kPD], pb[kPT]; // the prep's q, k, v, gates [t][dk]; beta [t]
    __shared__ float gf[kPT][kPD], gg[kPT][kPD]; // the folded products (lr.on): g, gate [t][dk]
    int h = blockIdx.x, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int cb = warp / kScanSlices, slice = warp % kScanSlices, ncb = blockDim.x / (32 * kScanSlices);
    int j = (blockIdx.y * ncb + cb) * 32 + lane, C = H * dk;
    bool ok = j < dk;
    float *Sh = S + (size_t)h * dk * dk;
    if constexpr (kPrep) // warps 3 on: the folded products first, before their state is held
        if (lr.on && warp >= 3)
            lowrank_rows(lr, h, dk, T, warp - 3, (int)(blockDim.x >> 5) - 3, gf, gg);
    float Sr[kScanMaxRows];
#pragma unroll
    for (int r = 0; r < kScanMaxRows; r++) {
        int d = slice + kScanSlices * r;
        Sr[r] = ok && d < dk ? Sh[(size_t)d * dk + j] : 0.0f;
    }
    if constexpr (kPrep) { // (the state's loads already out; the taps read where used: no spills)
        if (warp < 3)
            prep_plane<false>(pa, warp, h, &pp[warp][0][0], kPD);
        else if (!lr.on && warp == 3)
            prep_gates(pa, h, pa.g + (size_t)h * dk, (size_t)C, &pp[3][0][0], kPD, pb, 1);
        if (lr.on) { // the gates once their products are in
            __syncthreads();
            if (warp == 3)
                prep_gates(pa, h, &gf[0][0], kPD, &pp[3][0][0], kPD, pb, 1);
        }
    }
    for (int t = 0; t < T; t++) {
        size_t base = (size_t)t * C + (size_t)h * dk;
        __syncthreads();
        for (int i = threadIdx.x; i < dk; i += blockDim.x) {
            if (kPrep) {
                ks[i] = pp[1][t][i];
                qs[i] = pp[0][t][i];
                as[i] = expf(pp[3][t][i]);
            } else {
                ks[i] = k[base + i];
                qs[i] = q[base + i];
                as[i] = expf(g[base + i]);
            }
        }
        __syncthreads();
        float pm = 0.0f;
#pragma unroll
        for (int r = 0; r < kScanMaxRows; r++) {
            int d = slice + kScanSlices * r;
            if (d < dk) {
                Sr[r] *= as[d];
                pm += Sr[r] * ks[d];
            }
        }
        red[cb][slice][lane] = pm;
        __syncthreads();
        float mem = 0.0f;
#pragma unroll
        for (int s = 0; s < kScanSlices; s++)
            mem += red[cb][s][lane];
        float vj = !ok ? 0.0f : kPrep ? pp[2][t][j] : v[base + j];
        float bt = kPrep ? pb[t] : beta[(size_t)t * H + h];
        float delta = ok ? (vj - mem) * bt : 0.0f;
        float po = 0.0f;
#pragma unroll
        for (int r = 0; r < kScanMaxRows; r++) {
            int d = slice + kScanSlices * r;
            if (d < dk) {
                Sr[r] += ks[d] * delta;
                po += Sr[r] * qs[d];
            }
        }
        __syncthreads();
        red[cb][slice][lane] = po;
        __syncthreads();
        if (slice == 0 && ok) {
            float acc = 0.0f;
#pragma unroll
            for (int s = 0; s < kScanSlices; s++)
                acc += red[cb][s][lane];
            if (kNorm)
                os[j] = acc;
            else
                o[base + j] = acc;
        }
        if (kNorm) { // warp 0: the row's sum of squares as out_norm_kernel sums it
            __syncthreads();
            if (warp == 0) {
                float ss = 0.0f;
#pragma unroll 4
                for (int i = lane; i < dk; i += 32)
                    ss += os[i] * os[i];
                ss = warp_sum(ss);
                if (lane == 0)
                    s_inv = 1.0f / sqrtf(ss / (float)dk + eps);
            }
            __syncthreads();
            if (slice == 0 && ok) {
                float gt;
                if constexpr (kPrep)
                    gt = lr.on ? gg[t][j] : gate[base + j];
                else
                    gt = gate[base + j];
                o[base + j] = nw[j] * (os[j] * s_inv) * sigmoidf_(gt);
            }
        }
        if (trail) { // the state after token t, for going back inside a verification window
            float *Th = trail + (size_t)t * H * dk * dk + (size_t)h * dk * dk;
#pragma unroll
            for (int r = 0; r < kScanMaxRows; r++) {
                int d = slice + kScanSlices * r;
                if (ok && d < dk)
                    Th[(size_t)d * dk + j] = Sr[r];
            }
        }
    }
#pragma unroll
    for (int r = 0; r < kScanMaxRows; r++) {
        int d = slice + kScanSlices * r;
        if (ok && d < dk)
            Sh[(size_t)d * dk + j] = Sr[r];
    }
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

unsigned grid_for(size_t n)
{
    unsigned b = blocks_for(n, 256);
    return b < 4096 ? (b ? b : 1) : 4096;
}

} // namespace

extern "C" int eng_kda_conv(const float *q, const float *k, const float *v, float *state,
                            const float *qw, const float *kw, const float *vw, int T, int C, int K,
                            float *qo, float *ko, float *vo, void *stream)
{
    if (K < 1 || K > kConvMaxK + 1 || T < 1)
        return -1;
    cudaStream_t st = static_cast<cudaStream_t>(stream);
    launch(conv_kernel, grid_for((size_t)T * 3 * C), 256, 0, st, q, k, v, state, qw, kw, vw, T, C,
           K, qo, ko, vo);
    if (K > 1)
        launch(conv_state_kernel, blocks_for((size_t)3 * C, 256), 256, 0, st, q, k, v, state, T, C,
               K);
    return (int)cudaGetLastError();
}

extern "C" int eng_kda_l2norm(float *q, float *k, int T, int H, int dk, float qscale, void *stream)
{
    int rows = T * H;
    launch(l2norm_kernel, blocks_for((size_t)2 * rows, 8), 256, 0,
           static_cast<cudaStream_t>(stream), q, k, rows, dk, qscale);
    return (int)cudaGetLastError();
}

extern "C" int eng_kda_gate(float *g, float *beta, const float *A_log, const float *dt_bias, int T,
                            int H, int dk, int has_lb, float lb, void *stream)
{
    launch(gate_kernel, grid_for((size_t)T * H * dk), 256, 0, static_cast<cudaStream_t>(stream), g,
           beta, A_log, dt_bias, T, H, dk, has_lb, lb);
    return (int)cudaGetLastError();
}

extern "C" int eng_kda_scan_trail(float *S, const float *q, const float *k, const float *v,
                                  const float *g, const float *beta, int T, int H, int dk, float *o,
                                  float *trail, void *stream)
{
    if (dk < 1 || dk > kScanSlices * kScanMaxRows || T < 1)
        return -1;
    dim3 grid(H, blocks_for((size_t)dk, 32));
    launch(scan_kernel<false>, grid, 32 * kScanSlices, 0, static_cast<cudaStream_t>(stream), S, q,
           k, v, g, beta, T, H, dk, o, trail, nullptr, nullptr, 0.0f, prep_args{}, lowrank_dev{});
    return (int)cudaGetLastError();
}

extern "C" int eng_kda_scan_norm(float *S, const float *q, const float *k, const float *v,
                                 const float *g, const float *beta, int T, int H, int dk, float *o,
                                 float *trail, const float *gate, const float *w, float eps,
                                 void *stream)
{
    if (dk < 1 || dk > kScanSlices * kScanMaxRows || T < 1 || !gate || !w)
        return -1;
    int ncb = (int)blocks_for((size_t)dk, 32); // the whole head in one block
    launch(scan_kernel<true>, dim3(H, 1), 32 * kScanSlices * ncb, 0,
           static_cast<cudaStream_t>(stream), S, q, k, v, g, beta, T, H, dk, o, trail, gate, w,
           eps, prep_args{}, lowrank_dev{});
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
    int ncb = (int)blocks_for((size_t)dk, 32); // the whole head in one block
    launch(scan_kernel<true, true>, dim3(H, 1), 32 * kScanSlices * ncb, 0,
           static_cast<cudaStream_t>(stream), S, nullptr, nullptr, nullptr, nullptr, nullptr, T, H,
           dk, o, trail, gate, w, eps, pa, low);
    return (int)cudaGetLastError();
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
