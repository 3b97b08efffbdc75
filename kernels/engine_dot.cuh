// engine_dot.cuh: the dense GEMVs' innermost step (8 bf16/f16 weights against 8 inputs of each
// token), shared by the GEMV kernels and the kernels that fold a small product in (their sums
// then match the GEMV's bit for bit).
#pragma once

#include "engine_common.cuh"

// 8 bf16/f16 weights (16 bytes) against 8 consecutive inputs of each token.
template <int T>
static __device__ __forceinline__ void dot8(uint4 q, int is_bf16, const float *x, int cols, int i,
                                            int tg, float *acc)
{
    float wf[8];
    const uint32_t u[4] = {q.x, q.y, q.z, q.w};
    if (is_bf16) {
#pragma unroll
        for (int j = 0; j < 4; j++) {
            wf[2 * j] = __uint_as_float(u[j] << 16);
            wf[2 * j + 1] = __uint_as_float(u[j] & 0xffff0000u);
        }
    } else {
#pragma unroll
        for (int j = 0; j < 4; j++) {
            float2 f = __half22float2(*reinterpret_cast<const __half2 *>(&u[j]));
            wf[2 * j] = f.x;
            wf[2 * j + 1] = f.y;
        }
    }
#pragma unroll
    for (int t = 0; t < T; t++) {
        const float4 *xr = reinterpret_cast<const float4 *>(x + (size_t)(t < tg ? t : 0) * cols) + 2 * i;
        float4 a = __ldg(xr), b = __ldg(xr + 1);
        acc[t] += wf[0] * a.x + wf[1] * a.y + wf[2] * a.z + wf[3] * a.w + wf[4] * b.x + wf[5] * b.y +
                  wf[6] * b.z + wf[7] * b.w;
    }
}

