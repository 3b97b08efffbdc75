// engine_route.cuh: the one-group router's warp routing of one row (top-K by sigmoid + bias,
// ties to the lower index), shared by the routing kernel and the router product that routes.
#pragma once

#include "engine_common.cuh"

constexpr int kRouteWarpSlots = 16; // experts a lane holds: the warp router takes E <= 512

// A choice's bits as an unsigned key in the same order (NaN excluded; -0 must be +0 first, as
// the float compare holds them equal); 0 is below every choice, -inf included.
static __device__ __forceinline__ unsigned route_order_key(float c)
{
    unsigned u = __float_as_uint(c);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// This lane's bias values (experts lane, lane + 32, ...): a weight, so callers may read it
// before waiting on the kernel before them.
static __device__ __forceinline__ void route_warp_bias(const float *bias, int E, int lane,
                                                       float (&b)[kRouteWarpSlots])
{
#pragma unroll
    for (int j = 0; j < kRouteWarpSlots; j++)
        b[j] = j * 32 + lane < E ? bias[j * 32 + lane] : 0.0f;
}

// One row's routing by a whole warp, no shared memory or barrier: lane l holds experts l,
// l + 32, ... in registers as order keys, and each of the K rounds takes the best untaken expert
// (choice descending, index ascending on ties, as cpu_route's loop picks): the warp's largest key
// by one warp reduction, then among the lanes that hold it the lowest index by another. The
// winner's lane drops it and finds its own next best. A NaN choice ranks as -inf. The weights'
// sum runs in pick order. lg: the row's E logits (read through L2: in the router product that
// routes, other blocks wrote them during this launch).
static __device__ __forceinline__ void route_warp_row(const float *lg,
                                                      const float (&b)[kRouteWarpSlots], int E,
                                                      int K, int norm_topk, float scaling,
                                                      int32_t *ids, float *weights)
{
    int lane = threadIdx.x & 31;
    float p[kRouteWarpSlots];
    unsigned key[kRouteWarpSlots]; // 0: no expert, or taken
#pragma unroll
    for (int j = 0; j < kRouteWarpSlots; j++) {
        p[j] = 0.0f;
        key[j] = 0;
        if (j * 32 + lane < E) {
            p[j] = sigmoidf_(__ldcg(lg + j * 32 + lane));
            float c = p[j] + b[j];
            c = c != c ? -INFINITY : c == 0.0f ? 0.0f : c;
            key[j] = route_order_key(c);
        }
    }
    float sum = 0.0f, my_p = 0.0f;
    int my_e = -1;
    for (int k = 0; k < K; k++) {
        unsigned top = 0; // the lane's best key, then its lowest slot holding it
#pragma unroll
        for (int j = 0; j < kRouteWarpSlots; j++)
            top = max(top, key[j]);
        unsigned at = 0;
#pragma unroll
        for (int j = 0; j < kRouteWarpSlots; j++)
            at |= (unsigned)(key[j] == top) << j;
        int j_best = __ffs(at) - 1;
        unsigned best = __reduce_max_sync(0xffffffffu, top);
        unsigned mine = top == best && best != 0 ? (unsigned)(j_best * 32 + lane) : 0xffffffffu;
        int e = (int)__reduce_min_sync(0xffffffffu, mine); // K <= E: a live expert is left
        float pe = 0.0f;
#pragma unroll
        for (int j = 0; j < kRouteWarpSlots; j++)
            if (j == j_best)
                pe = p[j];
        pe = __shfl_sync(0xffffffffu, pe, e & 31);
        if ((e & 31) == lane) {
#pragma unroll
            for (int j = 0; j < kRouteWarpSlots; j++)
                if (j == j_best)
                    key[j] = 0;
        }
        if (lane == k) {
            my_e = e;
            my_p = pe;
        }
        sum += pe;
    }
    if (lane < K) {
        float w = my_p;
        if (norm_topk)
            w /= sum + 1e-20f;
        ids[lane] = my_e;
        weights[lane] = w * scaling;
    }
}
