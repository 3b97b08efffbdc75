// engine_q4.cu: the dense weights requantized at load (GLMCHAT_CUDA_DENSE=q4): BF16 (or F32) to signed
// 4-bit codes with an fp16 scale per 32 columns, on the GPU, in the interleaved layout of
// eng_q4_offsets that the decode GEMV (engine_matmul.cu) reads 16 bytes a lane.
#include "engine_common.cuh"

namespace {

// One thread per group of 32 columns: s = fp16(amax / 7), codes 8 + round(w / s) in [1, 15].
// src: BF16 or F32 values.
__global__ void quantize_q4_kernel(const void *__restrict__ src, int f32, int rows, int cols,
                                   uint8_t *__restrict__ codes, __half *__restrict__ scales)
{
    pdl_prologue();
    size_t groups = (size_t)rows * (cols / 32);
    for (size_t gi = blockIdx.x * (size_t)blockDim.x + threadIdx.x; gi < groups;
         gi += (size_t)gridDim.x * blockDim.x) {
        int r = (int)(gi / (cols / 32)), c0 = (int)(gi % (cols / 32)) * 32;
        size_t at = (size_t)r * cols + c0;
        float v[32], amax = 0.0f;
#pragma unroll
        for (int i = 0; i < 32; i++) {
            v[i] = f32 ? static_cast<const float *>(src)[at + i]
                       : bf16_bits_to_f32(static_cast<const uint16_t *>(src)[at + i]);
            amax = fmaxf(amax, fabsf(v[i]));
        }
        __half sh = __float2half_rn(amax / 7.0f);
        float s = __half2float(sh);
        size_t byte, si;
        eng_q4_offsets(cols, c0, &byte, &si);
        uint8_t *row = codes + (size_t)r * (cols / 2);
        scales[(size_t)r * (cols / 32) + si] = sh;
#pragma unroll
        for (int l = 0; l < 8; l++) { // the group's 8 lanes of 4 columns: 2 bytes each
            unsigned n[4];
#pragma unroll
            for (int i = 0; i < 4; i++) {
                float q = s > 0.0f ? rintf(v[4 * l + i] / s) : 0.0f;
                q = fminf(fmaxf(q, -7.0f), 7.0f);
                n[i] = (unsigned)(int)q + 8u;
            }
            eng_q4_offsets(cols, c0 + 4 * l, &byte, &si);
            row[byte] = (uint8_t)(n[0] | (n[1] << 4));
            row[byte + 1] = (uint8_t)(n[2] | (n[3] << 4));
        }
    }
}

} // namespace

extern "C" int eng_quantize_q4(const eng_mat *src, void *codes, uint16_t *scales, eng_mat *dst,
                               void *stream)
{
    if (!src || !dst || (src->dtype != ENG_BF16 && src->dtype != ENG_F32) || src->cols % 128 ||
        src->rows < 1 || !codes || !scales)
        return -1;
    size_t groups = (size_t)src->rows * (src->cols / 32);
    unsigned blocks = blocks_for(groups, 256);
    launch(quantize_q4_kernel, blocks < 65535 ? blocks : 65535, 256, 0,
           static_cast<cudaStream_t>(stream), src->data, src->dtype == ENG_F32, src->rows,
           src->cols, static_cast<uint8_t *>(codes), reinterpret_cast<__half *>(scales));
    eng_mat q = *src;
    q.dtype = ENG_Q4;
    q.data = codes;
    q.gscale = scales;
    q.scale = NULL;
    *dst = q;
    return (int)cudaGetLastError();
}
