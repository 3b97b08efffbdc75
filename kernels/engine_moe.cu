// engine_moe.cu: GLM's router on the GPU (sigmoid scores, correction bias, expert groups, ties to
// the lower index) and the routed experts of dense dtypes, one warp per output row, with the
// weighted combine; EXL3 experts go through kern_exl3_moe instead.
#include "engine_common.cuh"
#include "engine_route.cuh"

namespace {

// (value, index) of the better candidate: the larger value, on ties the lower index; index < 0
// is no candidate.
__device__ __forceinline__ void better(float &v, int &e, float v2, int e2)
{
    if (e2 >= 0 && (e < 0 || v2 > v || (v2 == v && e2 < e))) {
        v = v2;
        e = e2;
    }
}

// The best untaken expert by choice (ties: lower index), over the block: each thread its
// stride, then the warps by shuffles, then the warps' winners.
__device__ int block_best(const float *choice, const unsigned char *taken, int E, float *rv, int *re)
{
    float v = -INFINITY;
    int e = -1;
    for (int i = threadIdx.x; i < E; i += blockDim.x)
        if (!taken[i])
            better(v, e, choice[i], i);
    for (int o = 16; o > 0; o >>= 1) {
        float v2 = __shfl_xor_sync(0xffffffffu, v, o);
        int e2 = __shfl_xor_sync(0xffffffffu, e, o);
        better(v, e, v2, e2);
    }
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) {
        rv[warp] = v;
        re[warp] = e;
    }
    __syncthreads();
    float bv = rv[0];
    int be = re[0];
    for (int w = 1; w < (int)(blockDim.x >> 5); w++)
        better(bv, be, rv[w], re[w]);
    __syncthreads();
    return be;
}

constexpr int kRouteThreads = 256;

// One block a token: the same choices as cpu_route, the scans split over the block.
__global__ void __launch_bounds__(kRouteThreads) route_kernel(const float *logits, const float *bias,
                                                              int E, int G, int topk_group, int K,
                                                              int norm_topk, float scaling,
                                                              float *scratch, int32_t *ids,
                                                              float *weights)
{
    pdl_prologue();
    __shared__ float rv[kRouteThreads];
    __shared__ int re[kRouteThreads];
    __shared__ float s_sum;
    int t = blockIdx.x, per = E / G;
    float *prob = scratch + (size_t)t * (3 * E + G), *choice = prob + E, *gscore = choice + E;
    unsigned char *taken = reinterpret_cast<unsigned char *>(gscore + G); // E bytes of 4E
    const float *lg = logits + (size_t)t * E;
    for (int e = threadIdx.x; e < E; e += blockDim.x) {
        prob[e] = sigmoidf_(lg[e]);
        choice[e] = prob[e] + bias[e];
        taken[e] = 0;
    }
    __syncthreads();
    for (int g = threadIdx.x; g < G; g += blockDim.x) { // the sum of the group's two best
        const float *sc = choice + g * per;
        int a = 0;
        for (int i = 1; i < per; i++)
            if (sc[i] > sc[a])
                a = i;
        int b = a == 0 ? 1 : 0;
        for (int i = 0; i < per; i++)
            if (i != a && sc[i] > sc[b])
                b = i;
        gscore[g] = per > 1 ? sc[a] + sc[b] : sc[a];
    }
    __syncthreads();
    if (G > 1) {
        for (int k = 0; k < topk_group; k++) { // the kept groups, marked in taken[0..G)
            int g = block_best(gscore, taken, G, rv, re);
            if (threadIdx.x == 0)
                taken[g] = 1;
            __syncthreads();
        }
        for (int e = threadIdx.x; e < E; e += blockDim.x)
            if (!taken[e / per])
                choice[e] = -INFINITY;
        __syncthreads();
        for (int e = threadIdx.x; e < E; e += blockDim.x)
            taken[e] = 0;
        __syncthreads();
    }
    int32_t *id = ids + (size_t)t * K;
    float *w = weights + (size_t)t * K;
    if (threadIdx.x == 0)
        s_sum = 0.0f;
    for (int k = 0; k < K; k++) {
        int e = block_best(choice, taken, E, rv, re);
        if (threadIdx.x == 0) {
            taken[e] = 1;
            id[k] = e;
            w[k] = prob[e];
            s_sum += prob[e];
        }
        __syncthreads();
    }
    if (threadIdx.x == 0)
        for (int k = 0; k < K; k++) {
            if (norm_topk)
                w[k] /= s_sum + 1e-20f;
            w[k] *= scaling;
        }
}

constexpr int kRouteRankMax = 512; // experts of the one-group router: a thread each

// The router with one group (GLM-5.3-Flash: n_group 1), a block per token and a thread per
// expert: each expert's rank is the count of experts before it in the order (choice descending,
// index ascending on ties), so the experts ranked below K are exactly the K picks that the
// pick-the-best-K-times loop of cpu_route makes, in its order, with no chain of K maxima. A NaN
// choice ranks last (cpu_route's loop never prefers one). Warp 0 then sums the picks' scores in
// pick order and writes ids and weights.
__global__ void __launch_bounds__(kRouteRankMax) route_rank_kernel(const float *logits,
                                                                  const float *bias, int E, int K,
                                                                  int norm_topk, float scaling,
                                                                  int32_t *ids, float *weights)
{
    pdl_prologue();
    __shared__ __align__(16) float key[kRouteRankMax];
    __shared__ float pick_p[kRouteRankMax];
    __shared__ int pick_e[kRouteRankMax];
    int t = blockIdx.x, e = threadIdx.x, n4 = (E + 3) / 4;
    float p = 0.0f, c = -INFINITY;
    if (e < E) {
        p = sigmoidf_(logits[(size_t)t * E + e]);
        c = p + bias[e];
        if (c != c)
            c = -INFINITY;
    }
    if (e < 4 * n4)
        key[e] = c; // padding past E: -inf at indices above every expert, never ahead
    __syncthreads();
    if (e < E) {
        int rank = 0;
        const float4 *k4 = reinterpret_cast<const float4 *>(key);
        for (int i = 0; i < n4; i++) {
            float4 o = k4[i];
            int b = 4 * i;
            rank += (o.x > c) | ((o.x == c) & (b < e));
            rank += (o.y > c) | ((o.y == c) & (b + 1 < e));
            rank += (o.z > c) | ((o.z == c) & (b + 2 < e));
            rank += (o.w > c) | ((o.w == c) & (b + 3 < e));
        }
        if (rank < K) {
            pick_e[rank] = e;
            pick_p[rank] = p;
        }
    }
    __syncthreads();
    if (e >= 32)
        return;
    float sum = 0.0f;
    for (int k = 0; k < K; k++) // every lane, in pick order
        sum += pick_p[k];
    for (int k = e; k < K; k += 32) {
        float w = pick_p[k];
        if (norm_topk)
            w /= sum + 1e-20f;
        ids[(size_t)t * K + k] = pick_e[k];
        weights[(size_t)t * K + k] = w * scaling;
    }
}

// The one-group router for few rows, a warp a row (engine_route.cuh's route_warp_row): ids and
// weights equal route_rank_kernel's bit for bit.
__global__ void __launch_bounds__(32) route_warp_kernel(const float *logits, const float *bias,
                                                        int E, int K, int norm_topk,
                                                        float scaling, int32_t *ids,
                                                        float *weights)
{
    int t = blockIdx.x;
    float b[kRouteWarpSlots];
    route_warp_bias(bias, E, threadIdx.x & 31, b); // a weight: read before waiting on the logits
    pdl_prologue();
    route_warp_row(logits + (size_t)t * E, b, E, K, norm_topk, scaling, ids + (size_t)t * K,
                   weights + (size_t)t * K);
}

__device__ float row_dot(const eng_mat &m, int r, const float *x, int lane)
{
    float acc = 0.0f;
    for (int c = lane; c < m.cols; c += 32)
        acc += mat_at(m, r, c) * x[c];
    return warp_sum(acc);
}

__global__ void moe_gate_up_kernel(const eng_mat *gate, const eng_mat *up, int E, const float *x,
                                   int K, int D, int I, const int32_t *ids, float limit, int pairs,
                                   float *h)
{
    pdl_prologue();
    size_t wi = blockIdx.x * (size_t)(blockDim.x / 32) + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31;
    if (wi >= (size_t)pairs * I)
        return;
    int pair = (int)(wi / I), i = (int)(wi % I);
    int e = ids[pair];
    float out = 0.0f;
    if (e >= 0 && e < E) {
        const float *xr = x + (size_t)(pair / K) * D;
        float g = row_dot(gate[e], i, xr, lane), u = row_dot(up[e], i, xr, lane);
        g = fminf(g, limit);
        u = fminf(fmaxf(u, -limit), limit);
        out = g / (1.0f + expf(-g)) * u;
    }
    if (lane == 0)
        h[wi] = out;
}

__global__ void moe_down_kernel(const eng_mat *down, int E, const float *h, int D, int I,
                                const int32_t *ids, int pairs, float *ye)
{
    pdl_prologue();
    size_t wi = blockIdx.x * (size_t)(blockDim.x / 32) + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31;
    if (wi >= (size_t)pairs * D)
        return;
    int pair = (int)(wi / D), d = (int)(wi % D);
    int e = ids[pair];
    float out = e >= 0 && e < E ? row_dot(down[e], d, h + (size_t)pair * I, lane) : 0.0f;
    if (lane == 0)
        ye[wi] = out;
}

__global__ void combine_kernel(const float *ye, const float *w, int T, int K, int D, int accumulate,
                               float *out)
{
    pdl_prologue();
    size_t n = (size_t)T * D;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        size_t t = i / D, d = i % D;
        float acc = accumulate ? out[i] : 0.0f;
        for (int k = 0; k < K; k++)
            acc += w[t * K + k] * ye[(t * K + k) * D + d];
        out[i] = acc;
    }
}

unsigned grid_for(size_t n)
{
    unsigned b = blocks_for(n, 256);
    return b < 4096 ? (b ? b : 1) : 4096;
}

} // namespace

extern "C" int eng_route_with(int kernel, const float *logits, const float *bias, int T, int E,
                              int G, int topk_group, int K, int norm_topk, float scaling,
                              float *scratch, int32_t *ids, float *weights, void *stream)
{
    if (T < 1 || E < 1 || G < 1 || E % G || K < 1 || K > E || topk_group < 1 || topk_group > G)
        return -1;
    cudaStream_t st = static_cast<cudaStream_t>(stream);
    switch (kernel) {
    case ENG_ROUTE_WARP:
        if (G != 1 || E > 32 * kRouteWarpSlots || K > 32)
            return -1;
        launch(route_warp_kernel, T, 32, 0, st, logits, bias, E, K, norm_topk, scaling, ids,
               weights);
        return (int)cudaGetLastError();
    case ENG_ROUTE_RANK:
        if (G != 1 || E > kRouteRankMax)
            return -1;
        // 32-thread multiples also cover the key padding to 4
        launch(route_rank_kernel, T, 32 * (unsigned)((E + 31) / 32), 0, st, logits, bias, E, K,
               norm_topk, scaling, ids, weights);
        return (int)cudaGetLastError();
    case ENG_ROUTE_GROUPS:
        launch(route_kernel, T, kRouteThreads, 0, st, logits, bias, E, G, topk_group, K, norm_topk,
               scaling, scratch, ids, weights);
        return (int)cudaGetLastError();
    default:
        return -1;
    }
}

extern "C" int eng_route(const float *logits, const float *bias, int T, int E, int G, int topk_group,
                         int K, int norm_topk, float scaling, float *scratch, int32_t *ids,
                         float *weights, void *stream)
{
    int kernel = ENG_ROUTE_GROUPS;
    if (G == 1 && E <= kRouteRankMax)
        kernel = ENG_ROUTE_RANK;
    if (G == 1 && E <= 32 * kRouteWarpSlots && K <= 32 && T <= ENG_ROUTE_WARP_ROWS)
        kernel = ENG_ROUTE_WARP;
    return eng_route_with(kernel, logits, bias, T, E, G, topk_group, K, norm_topk, scaling,
                          scratch, ids, weights, stream);
}

extern "C" int eng_moe_dense(const eng_mat *gate, const eng_mat *up, const eng_mat *down, int E,
                             const float *x, int T, int K, int D, int I, const int32_t *ids,
                             const float *w, float limit, float *h, float *ye, float *out,
                             void *stream)
{
    if (T < 1 || K < 1 || D < 1 || I < 1)
        return -1;
    cudaStream_t st = static_cast<cudaStream_t>(stream);
    int pairs = T * K;
    launch(moe_gate_up_kernel, blocks_for((size_t)pairs * I, 8), 256, 0, st, gate, up, E, x, K, D,
           I, ids, limit, pairs, h);
    launch(moe_down_kernel, blocks_for((size_t)pairs * D, 8), 256, 0, st, down, E, h, D, I, ids,
           pairs, ye);
    launch(combine_kernel, grid_for((size_t)T * D), 256, 0, st, ye, w, T, K, D, 0, out);
    return (int)cudaGetLastError();
}

extern "C" int eng_moe_combine(const float *ye, const float *w, int T, int K, int D, int accumulate,
                               float *out, void *stream)
{
    launch(combine_kernel, grid_for((size_t)T * D), 256, 0, static_cast<cudaStream_t>(stream), ye,
           w, T, K, D, accumulate, out);
    return (int)cudaGetLastError();
}
