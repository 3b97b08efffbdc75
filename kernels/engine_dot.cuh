// engine_dot.cuh: the dense GEMVs' innermost step (8 bf16/f16 weights against 8 inputs of each
// token), shared by the GEMV kernels and the kernels that fold a small product in (their sums
// then match the GEMV's bit for bit).
#pragma once

#include "engine_common.cuh"

// A 16-byte unit's 8 bf16/f16 weights as floats.
static __device__ __forceinline__ void unpack8(uint4 q, int is_bf16, float *wf)
{
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
}

// 8 weights against 8 inputs (a, b), in the one order every GEMV path takes.
static __device__ __forceinline__ float sum8(const float *wf, float4 a, float4 b)
{
    return wf[0] * a.x + wf[1] * a.y + wf[2] * a.z + wf[3] * a.w + wf[4] * b.x + wf[5] * b.y +
           wf[6] * b.z + wf[7] * b.w;
}

// 8 bf16/f16 weights (16 bytes) against 8 consecutive inputs of each token.
template <int T>
static __device__ __forceinline__ void dot8(uint4 q, int is_bf16, const float *x, int cols, int i,
                                            int tg, float *acc)
{
    float wf[8];
    unpack8(q, is_bf16, wf);
#pragma unroll
    for (int t = 0; t < T; t++) {
        const float4 *xr = reinterpret_cast<const float4 *>(x + (size_t)(t < tg ? t : 0) * cols) + 2 * i;
        float4 a = __ldg(xr), b = __ldg(xr + 1);
        acc[t] += sum8(wf, a, b);
    }
}

// dot8 for R rows' units at the same columns: each input load serves the R rows (at several
// tokens the loads from L1, not the weights, bound a row a warp), each row's sum dot8's.
template <int T, int R>
static __device__ __forceinline__ void dot8_rows(const uint4 (&q)[R], int is_bf16, const float *x,
                                                 int cols, int i, int tg, float (*acc)[T])
{
    float wf[R][8];
#pragma unroll
    for (int r = 0; r < R; r++)
        unpack8(q[r], is_bf16, wf[r]);
#pragma unroll
    for (int t = 0; t < T; t++) {
        const float4 *xr = reinterpret_cast<const float4 *>(x + (size_t)(t < tg ? t : 0) * cols) + 2 * i;
        float4 a = __ldg(xr), b = __ldg(xr + 1);
#pragma unroll
        for (int r = 0; r < R; r++)
            acc[r][t] += sum8(wf[r], a, b);
    }
}

// R rows (row[r], n8 16-byte units each) against T tokens of x, this warp's share (sub of wpr
// warps): units in the same order as a row alone takes them, two units a row in flight.
template <int T, int R>
static __device__ __forceinline__ void units_dot_rows(const uint4 *const (&row)[R], int n8, int bf,
                                                      const float *x, int cols, int sub, int wpr,
                                                      int lane, int tg, float (*acc)[T])
{
    int step = 32 * wpr, i = sub * 32 + lane;
    for (; i + step < n8; i += 2 * step) {
        uint4 q0[R], q1[R];
#pragma unroll
        for (int r = 0; r < R; r++) {
            q0[r] = __ldg(row[r] + i);
            q1[r] = __ldg(row[r] + i + step);
        }
        dot8_rows<T, R>(q0, bf, x, cols, i, tg, acc);
        dot8_rows<T, R>(q1, bf, x, cols, i + step, tg, acc);
    }
    if (i < n8) {
        uint4 q[R];
#pragma unroll
        for (int r = 0; r < R; r++)
            q[r] = __ldg(row[r] + i);
        dot8_rows<T, R>(q, bf, x, cols, i, tg, acc);
    }
}
