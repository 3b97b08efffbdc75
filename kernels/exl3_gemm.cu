// exl3_gemm.cu: one EXL3 linear layer on the GPU straight from its trellis: input rotation,
// batch-1 GEMV / few-row GEMM (rows <= 16), the prefill GEMM above that, output rotation.
#include <cstdint>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "exl3_device.cuh"
#include "kernels.h"

namespace {

using namespace exl3;

constexpr int kThreads = 256; // 8 warps

// xh[r][:] = fp16(Hk (x[r] . suh)); one warp per 128-block. Also zeroes z[rows][out].
__global__ void rotate_in_kernel(const float *__restrict__ x, const __half *__restrict__ suh,
                                 __half *__restrict__ xh, float *__restrict__ z, int rows, int in,
                                 int out)
{
    int lane = threadIdx.x & 31;
    int block = blockIdx.x * (blockDim.x / 32) + (threadIdx.x >> 5);
    int r = blockIdx.y;
    if (block * 128 < in) {
        int col = block * 128 + 4 * lane;
        float4 xv = *reinterpret_cast<const float4 *>(x + (size_t)r * in + col);
        float v[4] = {xv.x, xv.y, xv.z, xv.w};
#pragma unroll
        for (int i = 0; i < 4; i++)
            v[i] *= __half2float(suh[col + i]);
        fwht128_warp(v);
        __half2 lo = __floats2half2_rn(v[0], v[1]), hi = __floats2half2_rn(v[2], v[3]);
        uint2 packed = {h2_bits(lo), h2_bits(hi)};
        *reinterpret_cast<uint2 *>(xh + (size_t)r * in + col) = packed;
    }
    int per_row = gridDim.x * blockDim.x;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < out; i += per_row)
        z[(size_t)r * out + i] = 0.0f;
}

// y[r][:] = (Hn z[r]) . svh + bias; one warp per 128-block.
__global__ void rotate_out_kernel(const float *__restrict__ z, const __half *__restrict__ svh,
                                  const __half *__restrict__ bias, float *__restrict__ y, int out)
{
    int lane = threadIdx.x & 31;
    int block = blockIdx.x * (blockDim.x / 32) + (threadIdx.x >> 5);
    int r = blockIdx.y;
    if (block * 128 >= out)
        return;
    int col = block * 128 + 4 * lane;
    float4 zv = __ldcg(reinterpret_cast<const float4 *>(z + (size_t)r * out + col));
    float v[4] = {zv.x, zv.y, zv.z, zv.w};
    fwht128_warp(v);
#pragma unroll
    for (int i = 0; i < 4; i++) {
        v[i] *= __half2float(svh[col + i]);
        if (bias)
            v[i] += __half2float(bias[col + i]);
    }
    *reinterpret_cast<float4 *>(y + (size_t)r * out + col) = make_float4(v[0], v[1], v[2], v[3]);
}

// A fragment of rows r0.. of xh (row-major [rows][in]) at k-tile kt; rows past `rows` are 0.
__device__ __forceinline__ void load_a(const __half *__restrict__ xh, int in, int r0, int rows,
                                       int kt, int lane, uint32_t a[4])
{
    int g = lane >> 2, t = lane & 3;
    const __half *p0 = xh + (size_t)(r0 + g) * in + kt * 16 + 2 * t;
    const __half *p1 = p0 + (size_t)8 * in;
    bool v0 = r0 + g < rows, v1 = r0 + g + 8 < rows;
    a[0] = v0 ? __ldg(reinterpret_cast<const unsigned int *>(p0)) : 0u;
    a[2] = v0 ? __ldg(reinterpret_cast<const unsigned int *>(p0 + 8)) : 0u;
    a[1] = v1 ? __ldg(reinterpret_cast<const unsigned int *>(p1)) : 0u;
    a[3] = v1 ? __ldg(reinterpret_cast<const unsigned int *>(p1 + 8)) : 0u;
}

// Rows r0..r0+15 of one 128-column block over the block's k range: warp w takes 64 columns
// (w & 1) and a quarter of the range (w >> 1); z += partial sums.
constexpr int kPrefetch = 6; // k-steps of 512 bytes in flight per warp

template <int K, int CB>
__global__ void __launch_bounds__(kThreads) gemv_kernel(const uint32_t *__restrict__ trellis,
                                                        const __half *__restrict__ xh,
                                                        float *__restrict__ z, int rows, int in,
                                                        int out, int ksteps)
{
    __shared__ uint32_t slices[kThreads / 32][128];
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int tn = blockIdx.x * 8 + (warp & 1) * 4;
    int ntiles = out / 16;
    int kb0 = blockIdx.y * ksteps;
    int kb1 = min(kb0 + ksteps, in / 16);
    int per = (kb1 - kb0 + 3) / 4;
    int kt0 = kb0 + (warp >> 1) * per;
    int n = min(kt0 + per, kb1) - kt0;
    if (n <= 0)
        return;
    int r0 = blockIdx.z * 16;
    constexpr int kWords = 8 * K;
    const size_t stride = (size_t)ntiles * kWords; // words between k-tiles
    const uint32_t *tile0 = trellis + ((size_t)kt0 * ntiles + tn) * kWords;
    float acc[4][2][4] = {};
    auto a_of = [&](int kt, uint32_t a[4]) { load_a(xh, in, r0, rows, kt0 + kt, lane, a); };
    strip4<K, CB, kPrefetch>(tile0, stride, n, slices[warp], a_of, acc);
    int g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int j = 0; j < 4; j++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            int col = (tn + j) * 16 + h * 8 + 2 * t;
            if (r0 + g < rows) {
                atomicAdd(z + (size_t)(r0 + g) * out + col, acc[j][h][0]);
                atomicAdd(z + (size_t)(r0 + g) * out + col + 1, acc[j][h][1]);
            }
            if (r0 + g + 8 < rows) {
                atomicAdd(z + (size_t)(r0 + g + 8) * out + col, acc[j][h][2]);
                atomicAdd(z + (size_t)(r0 + g + 8) * out + col + 1, acc[j][h][3]);
            }
        }
}

// Prefill: a block owns 128 columns and 64 rows. Per k-tile the 8 warps decode the strip's
// 8 tiles into shared memory as B fragments (once for all 64 rows), then each warp multiplies
// its 16 rows x 64 columns on tensor cores, A fragments from shared memory.
constexpr int kPrefillRows = 64;
constexpr int kStage = 4; // k-tiles decoded per shared-memory stage

template <int K, int CB>
__global__ void __launch_bounds__(kThreads) prefill_kernel(const uint32_t *__restrict__ trellis,
                                                           const __half *__restrict__ xh,
                                                           float *__restrict__ z, int rows,
                                                           int in, int out, int ksteps)
{
    // B fragments: [stage k-tile][n-tile 8][lane 32] x uint4 (the lane's four registers)
    __shared__ uint4 frag[kStage][8][32];
    // A: [64 rows][kStage*16 + 8 pad] halves
    __shared__ __align__(16) __half a_tile[kPrefillRows][kStage * 16 + 8];
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int ntiles = out / 16;
    int kt0 = blockIdx.y * ksteps;
    int kt1 = min(kt0 + ksteps, in / 16);
    int r0 = blockIdx.z * kPrefillRows;
    constexpr int kWords = 8 * K;
    int m = warp & 3;        // this warp's 16-row slice
    int nhalf = warp >> 2;   // columns 0-63 or 64-127 of the block
    float acc[4][2][4] = {}; // 4 n-tiles x 2 mma halves
    for (int ks = kt0; ks < kt1; ks += kStage) {
        __syncthreads();
        // decode: warp w decodes n-tile w of each stage k-tile
        for (int s = 0; s < kStage; s++) {
            int kt = ks + s;
            uint32_t b[4] = {0u, 0u, 0u, 0u};
            if (kt < kt1) {
                const uint32_t *tile = trellis + ((size_t)kt * ntiles + blockIdx.x * 8 + warp) * kWords;
                if (K == 4) {
                    uint32_t w = ld_stream(tile + lane);
                    uint32_t prev = __shfl_sync(0xFFFFFFFFu, w, (lane + 31) & 31);
                    decode_k4<CB>(w, prev, b);
                } else {
                    decode_any<K, CB>(tile, lane, b);
                }
            }
            frag[s][warp][lane] = make_uint4(b[0], b[1], b[2], b[3]);
        }
        // A: 64 rows x kStage*16 halves, 8 halves (16 bytes) per thread per pass
        for (int i = threadIdx.x; i < kPrefillRows * kStage * 2; i += kThreads) {
            int row = i / (kStage * 2), part = i % (kStage * 2);
            int kcol = ks * 16 + part * 8;
            uint4 v = make_uint4(0u, 0u, 0u, 0u);
            if (r0 + row < rows && kcol < kt1 * 16)
                v = __ldg(reinterpret_cast<const uint4 *>(xh + (size_t)(r0 + row) * in + kcol));
            *reinterpret_cast<uint4 *>(&a_tile[row][part * 8]) = v;
        }
        __syncthreads();
        int g = lane >> 2, t = lane & 3;
        for (int s = 0; s < kStage && ks + s < kt1; s++) {
            uint32_t a[4];
            const __half *p0 = &a_tile[m * 16 + g][s * 16 + 2 * t];
            const __half *p1 = &a_tile[m * 16 + g + 8][s * 16 + 2 * t];
            a[0] = *reinterpret_cast<const uint32_t *>(p0);
            a[2] = *reinterpret_cast<const uint32_t *>(p0 + 8);
            a[1] = *reinterpret_cast<const uint32_t *>(p1);
            a[3] = *reinterpret_cast<const uint32_t *>(p1 + 8);
#pragma unroll
            for (int j = 0; j < 4; j++) {
                uint4 b = frag[s][nhalf * 4 + j][lane];
                mma16816(acc[j][0], a, b.x, b.y);
                mma16816(acc[j][1], a, b.z, b.w);
            }
        }
    }
    int g = lane >> 2, t = lane & 3;
    int row0 = r0 + m * 16 + g;
#pragma unroll
    for (int j = 0; j < 4; j++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            int col = (blockIdx.x * 8 + nhalf * 4 + j) * 16 + h * 8 + 2 * t;
            if (row0 < rows) {
                atomicAdd(z + (size_t)row0 * out + col, acc[j][h][0]);
                atomicAdd(z + (size_t)row0 * out + col + 1, acc[j][h][1]);
            }
            if (row0 + 8 < rows) {
                atomicAdd(z + (size_t)(row0 + 8) * out + col, acc[j][h][2]);
                atomicAdd(z + (size_t)(row0 + 8) * out + col + 1, acc[j][h][3]);
            }
        }
}

template <int K, int CB>
cudaError_t launch_main(const kern_exl3_linear *l, const __half *xh, float *z, int rows,
                        cudaStream_t st, int sms)
{
    const uint32_t *tr = static_cast<const uint32_t *>(l->trellis);
    int col_blocks = l->out / 128, ktiles = l->in / 16;
    if (rows <= 16) {
        // enough blocks for about four per SM
        // about two blocks per SM, at least 8 k-tiles a warp
        int split = (2 * sms + col_blocks - 1) / col_blocks;
        split = split < 1 ? 1 : split > ktiles / 32 ? (ktiles / 32 > 0 ? ktiles / 32 : 1) : split;
        int ksteps = (ktiles + split - 1) / split;
        split = (ktiles + ksteps - 1) / ksteps;
        dim3 grid(col_blocks, split, 1);
        gemv_kernel<K, CB><<<grid, kThreads, 0, st>>>(tr, xh, z, rows, l->in, l->out, ksteps);
    } else {
        int row_blocks = (rows + kPrefillRows - 1) / kPrefillRows;
        int split = (2 * sms + col_blocks * row_blocks - 1) / (col_blocks * row_blocks);
        split = split < 1 ? 1 : split > ktiles / 16 ? (ktiles / 16 > 0 ? ktiles / 16 : 1) : split;
        int ksteps = (ktiles + split - 1) / split;
        ksteps = (ksteps + kStage - 1) / kStage * kStage;
        split = (ktiles + ksteps - 1) / ksteps;
        dim3 grid(col_blocks, split, row_blocks);
        prefill_kernel<K, CB><<<grid, kThreads, 0, st>>>(tr, xh, z, rows, l->in, l->out, ksteps);
    }
    return cudaGetLastError();
}

template <int K>
cudaError_t launch_cb(const kern_exl3_linear *l, const __half *xh, float *z, int rows,
                      cudaStream_t st, int sms)
{
    switch (l->codebook) {
    case 0:
        return launch_main<K, 0>(l, xh, z, rows, st, sms);
    case 1:
        return launch_main<K, 1>(l, xh, z, rows, st, sms);
    default:
        return launch_main<K, 2>(l, xh, z, rows, st, sms);
    }
}

int device_sms()
{
    static int sms = 0;
    if (!sms) {
        int dev = 0;
        cudaGetDevice(&dev);
        if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || sms < 1)
            sms = 1;
    }
    return sms;
}

size_t align256(size_t n)
{
    return (n + 255) & ~(size_t)255;
}

} // namespace

extern "C" size_t kern_exl3_matmul_workspace(const kern_exl3_linear *l, int rows)
{
    if (rows < 1)
        return 0;
    return align256((size_t)rows * l->in * sizeof(__half)) + align256((size_t)rows * l->out * sizeof(float));
}

extern "C" int kern_exl3_matmul(const kern_exl3_linear *l, const float *x, float *y, int rows,
                                void *work, void *stream)
{
    if (!l || !x || !y || !work || rows < 1 || l->in <= 0 || l->out <= 0 || l->in % 128 ||
        l->out % 128 || l->bits < 1 || l->bits > 8 || l->codebook < 0 || l->codebook > 2 ||
        !l->trellis || !l->suh || !l->svh || rows > 65535)
        return -1;
    cudaStream_t st = static_cast<cudaStream_t>(stream);
    __half *xh = static_cast<__half *>(work);
    float *z = reinterpret_cast<float *>(static_cast<char *>(work) +
                                         align256((size_t)rows * l->in * sizeof(__half)));
    int warps = kThreads / 32;
    dim3 gin((l->in / 128 + warps - 1) / warps, rows);
    rotate_in_kernel<<<gin, kThreads, 0, st>>>(x, static_cast<const __half *>(l->suh), xh, z,
                                               rows, l->in, l->out);
    cudaError_t rc = cudaGetLastError();
    if (rc != cudaSuccess)
        return (int)rc;
    int sms = device_sms();
    switch (l->bits) {
    case 1: rc = launch_cb<1>(l, xh, z, rows, st, sms); break;
    case 2: rc = launch_cb<2>(l, xh, z, rows, st, sms); break;
    case 3: rc = launch_cb<3>(l, xh, z, rows, st, sms); break;
    case 4: rc = launch_cb<4>(l, xh, z, rows, st, sms); break;
    case 5: rc = launch_cb<5>(l, xh, z, rows, st, sms); break;
    case 6: rc = launch_cb<6>(l, xh, z, rows, st, sms); break;
    case 7: rc = launch_cb<7>(l, xh, z, rows, st, sms); break;
    default: rc = launch_cb<8>(l, xh, z, rows, st, sms); break;
    }
    if (rc != cudaSuccess)
        return (int)rc;
    dim3 gout((l->out / 128 + warps - 1) / warps, rows);
    rotate_out_kernel<<<gout, kThreads, 0, st>>>(z, static_cast<const __half *>(l->svh),
                                                 static_cast<const __half *>(l->bias), y, l->out);
    return (int)cudaGetLastError();
}
