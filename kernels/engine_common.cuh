// engine_common.cuh: device helpers shared by the CUDA backend's kernels: reading one element of
// a dense matrix of any dtype, cache rows, warp and block reductions.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include "engine.h"
#include "launch.cuh"

static __device__ __forceinline__ float bf16_bits_to_f32(uint16_t b)
{
    return __uint_as_float((uint32_t)b << 16);
}

static __device__ __forceinline__ float fp8_to_f32(uint8_t b)
{
    __nv_fp8_e4m3 v;
    v.__x = b;
    return (float)v;
}

// Bytes of a row of m's data for prefetching (0: no plain rows, as Q4's).
static __device__ __forceinline__ size_t mat_row_bytes(const eng_mat &m)
{
    switch (m.dtype) {
    case ENG_F32: return (size_t)m.cols * 4;
    case ENG_BF16:
    case ENG_F16: return (size_t)m.cols * 2;
    case ENG_FP8: return (size_t)m.cols;
    default: return 0;
    }
}

// Part `part` of `parts` of a row of rb bytes into L2 (its first 32 lines of 128 bytes, a line a
// lane): the GEMVs' weights, read between pdl_trigger and pdl_wait while the kernel before
// finishes.
static __device__ __forceinline__ void prefetch_row_bytes(const char *row, size_t rb, int part,
                                                          int parts)
{
    size_t lines = (rb + 127) / 128, per = (lines + parts - 1) / parts, first = part * per;
    size_t end = first + per < lines ? first + per : lines;
    if (first + (threadIdx.x & 31) < end)
        prefetch_l2_lines(row, rb, (int)first);
}

// The same for row r of m.
static __device__ __forceinline__ void prefetch_row_part(const eng_mat &m, int r, int part,
                                                         int parts)
{
    size_t rb = mat_row_bytes(m);
    if (!rb || r < 0 || r >= m.rows)
        return;
    prefetch_row_bytes(static_cast<const char *>(m.data) + (size_t)r * rb, rb, part, parts);
}

static __device__ __forceinline__ float mat_at(const eng_mat &m, int r, int c)
{
    size_t i = (size_t)r * m.cols + c;
    switch (m.dtype) {
    case ENG_F32: return static_cast<const float *>(m.data)[i];
    case ENG_BF16: return bf16_bits_to_f32(static_cast<const uint16_t *>(m.data)[i]);
    case ENG_F16: return __half2float(static_cast<const __half *>(m.data)[i]);
    case ENG_Q4: {
        size_t byte, si;
        eng_q4_offsets(m.cols, c, &byte, &si);
        uint8_t b = static_cast<const uint8_t *>(m.data)[(size_t)r * (m.cols / 2) + byte];
        int n = (c % 2) ? b >> 4 : b & 15;
        return (float)(n - 8) *
               __half2float(reinterpret_cast<const __half *>(m.gscale)[(size_t)r * (m.cols / 32) + si]);
    }
    default:
        return fp8_to_f32(static_cast<const uint8_t *>(m.data)[i]) *
               m.scale[(size_t)(r / m.block_rows) * m.scale_cols + c / m.block_cols];
    }
}

static __device__ __forceinline__ float cache_at(const eng_cache &c, size_t row, int d)
{
    size_t i = row * c.width + d;
    switch (c.dtype) {
    case ENG_CACHE_F32: return static_cast<const float *>(c.rows)[i];
    case ENG_CACHE_BF16: return bf16_bits_to_f32(static_cast<const uint16_t *>(c.rows)[i]);
    default: return fp8_to_f32(static_cast<const uint8_t *>(c.rows)[i]) * c.scale[row];
    }
}

static __device__ __forceinline__ float warp_sum(float v)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

static __device__ __forceinline__ float warp_max(float v)
{
    for (int o = 16; o > 0; o >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// Sum over the block (blockDim.x a multiple of 32, <= 1024); every thread gets the total.
static __device__ __forceinline__ float block_sum(float v, float *red /* [33] shared */)
{
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_sum(v);
    __syncthreads();
    if (lane == 0)
        red[warp] = v;
    __syncthreads();
    if (warp == 0) {
        float t = lane < nw ? red[lane] : 0.0f;
        t = warp_sum(t);
        if (lane == 0)
            red[32] = t;
    }
    __syncthreads();
    return red[32];
}

static __device__ __forceinline__ float block_max(float v, float *red /* [33] shared */)
{
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_max(v);
    __syncthreads();
    if (lane == 0)
        red[warp] = v;
    __syncthreads();
    if (warp == 0) {
        float t = lane < nw ? red[lane] : -INFINITY;
        t = warp_max(t);
        if (lane == 0)
            red[32] = t;
    }
    __syncthreads();
    return red[32];
}

static __device__ __forceinline__ float sigmoidf_(float x)
{
    return 1.0f / (1.0f + expf(-x));
}

// bf16 mma.sync m16n8k16 with f32 accumulation (A row-major 16 x 16, B column-major 16 x 8):
// d += a b. The fragments' layouts are PTX's: a thread (g = lane / 4, c = lane % 4) holds A
// rows g, g + 8 at columns 2c, 2c + 1, 2c + 8, 2c + 9; B column g at rows 2c, 2c + 1, 2c + 8,
// 2c + 9; C rows g, g + 8 at columns 2c, 2c + 1.
static __device__ __forceinline__ void mma_bf16(float d[4], const uint32_t a[4], const uint32_t b[2])
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// The same with fp16 A and B (the layouts are the same).
static __device__ __forceinline__ void mma_f16(float d[4], const uint32_t a[4], const uint32_t b[2])
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

static __device__ __forceinline__ uint16_t bf16_rn(float x)
{
    return __bfloat16_as_ushort(__float2bfloat16_rn(x));
}

static __device__ __forceinline__ uint32_t ld_pair(const uint16_t *p) // two bf16, p 4-byte aligned
{
    return *reinterpret_cast<const uint32_t *>(p);
}

static __device__ __forceinline__ uint32_t pack_pair(uint16_t lo, uint16_t hi)
{
    return (uint32_t)lo | ((uint32_t)hi << 16);
}

// ---- shared-memory matrix loads and e4m3 rows for the tensor-core kernels ----

static __device__ __forceinline__ uint32_t smem_addr(const void *p)
{
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

static __device__ __forceinline__ void ldsm_x4(uint32_t r[4], const void *p)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(p)));
}

static __device__ __forceinline__ void ldsm_x4_trans(uint32_t r[4], const void *p)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(p)));
}

// Two e4m3 bytes (the low one first) -> two bf16 (the low half first), exactly: e4m3 -> f16 is
// exact, f16 -> f32 too, and three mantissa bits fit bf16's seven.
static __device__ __forceinline__ uint32_t e4m3x2_to_bf16x2(uint32_t two)
{
    __half2_raw hr = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(two & 0xffffu),
                                                __NV_E4M3);
    __half2 h(hr);
    float2 f = __half22float2(h);
    __nv_bfloat162 b = __float22bfloat162_rn(f);
    return *reinterpret_cast<uint32_t *>(&b);
}

static inline unsigned blocks_for(size_t n, unsigned per)
{
    return (unsigned)((n + per - 1) / per);
}
