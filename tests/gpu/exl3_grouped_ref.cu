// exl3_grouped_ref.cu: test_exl3_gpu's definition of the grouped EXL3 products' bits: one warp an
// n-tile of one expert, 16 rows at a time, every k-tile in order decoded and multiplied straight away.
#include <cstdint>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "kernels/exl3_device.cuh"

namespace {

// xh[row][k .. k+1] as one fp16 pair, zeros past the expert's rows.
__device__ uint32_t pair_at(const __half *xh, int in, int row, int re, int k)
{
    return row < re ? *reinterpret_cast<const uint32_t *>(xh + (size_t)row * in + k) : 0u;
}

// Grid (out / 16, experts), 32 threads. Each output element: one fp32 sum from zero, mma16816
// over the k-tiles in ascending order, A the fp16 activations, B the pair-form decode.
template <int K, int CB>
__global__ void grouped_reference_kernel(const uint32_t *trellis, const __half *xh, float *z,
                                         const int *offsets, int in, int out)
{
    using namespace exl3;
    constexpr int kWords = 8 * K;
    int nt = blockIdx.x, e = blockIdx.y, lane = threadIdx.x, g = lane >> 2, t = lane & 3;
    int rb = offsets[e], re = offsets[e + 1], ntiles = out / 16, ktiles = in / 16;
    const uint32_t *mine = trellis + ((size_t)e * ktiles * ntiles + nt) * kWords;
    for (int r0 = rb; r0 < re; r0 += 16) {
        float acc[2][4] = {};
        for (int kt = 0; kt < ktiles; kt++) {
            const uint32_t *tile = mine + (size_t)kt * ntiles * kWords;
            uint32_t b[4];
            if (K == 4)
                decode_k4<CB>(tile[lane], tile[(lane + 31) & 31], b);
            else
                decode_any<K, CB>(tile, lane, b);
            // rows g, g + 8 at k 2t, 2t + 1 (a[0], a[1]) and 2t + 8, 2t + 9 (a[2], a[3])
            int k = kt * 16 + 2 * t;
            uint32_t a[4] = {pair_at(xh, in, r0 + g, re, k), pair_at(xh, in, r0 + g + 8, re, k),
                             pair_at(xh, in, r0 + g, re, k + 8),
                             pair_at(xh, in, r0 + g + 8, re, k + 8)};
            mma16816(acc[0], a, b[0], b[1]);
            mma16816(acc[1], a, b[2], b[3]);
        }
        for (int h = 0; h < 2; h++) {
            int col = nt * 16 + h * 8 + 2 * t;
            if (r0 + g < re) {
                z[(size_t)(r0 + g) * out + col] = acc[h][0];
                z[(size_t)(r0 + g) * out + col + 1] = acc[h][1];
            }
            if (r0 + g + 8 < re) {
                z[(size_t)(r0 + g + 8) * out + col] = acc[h][2];
                z[(size_t)(r0 + g + 8) * out + col + 1] = acc[h][3];
            }
        }
    }
}

template <int K>
void launch_cb(int cb, dim3 grid, const uint32_t *tr, const __half *xh, float *z,
               const int *offsets, int in, int out)
{
    if (cb == 0)
        grouped_reference_kernel<K, 0><<<grid, 32>>>(tr, xh, z, offsets, in, out);
    else if (cb == 1)
        grouped_reference_kernel<K, 1><<<grid, 32>>>(tr, xh, z, offsets, in, out);
    else
        grouped_reference_kernel<K, 2><<<grid, 32>>>(tr, xh, z, offsets, in, out);
}

} // namespace

// kern_exl3_grouped_product's arguments (on the default stream, synchronized); 0, -1 for bad
// arguments, or the CUDA error.
extern "C" int test_grouped_reference(const void *trellis, int bits, int codebook, int in, int out,
                                      int n_experts, const int *offsets, const void *xh, float *z)
{
    if (!trellis || !offsets || !xh || !z || bits < 1 || bits > 8 || codebook < 0 ||
        codebook > 2 || in % 16 || out % 16 || in <= 0 || out <= 0 || n_experts < 1)
        return -1;
    dim3 grid(out / 16, n_experts);
    const uint32_t *tr = static_cast<const uint32_t *>(trellis);
    const __half *x = static_cast<const __half *>(xh);
    switch (bits) {
    case 1: launch_cb<1>(codebook, grid, tr, x, z, offsets, in, out); break;
    case 2: launch_cb<2>(codebook, grid, tr, x, z, offsets, in, out); break;
    case 3: launch_cb<3>(codebook, grid, tr, x, z, offsets, in, out); break;
    case 4: launch_cb<4>(codebook, grid, tr, x, z, offsets, in, out); break;
    case 5: launch_cb<5>(codebook, grid, tr, x, z, offsets, in, out); break;
    case 6: launch_cb<6>(codebook, grid, tr, x, z, offsets, in, out); break;
    case 7: launch_cb<7>(codebook, grid, tr, x, z, offsets, in, out); break;
    default: launch_cb<8>(codebook, grid, tr, x, z, offsets, in, out); break;
    }
    cudaError_t rc = cudaGetLastError();
    if (rc == cudaSuccess)
        rc = cudaDeviceSynchronize();
    return (int)rc;
}
