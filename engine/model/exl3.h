/* exl3.h: EXL3 trellis-coded weights (research/exl3.md): bit-exact decode to fp16, y = W x
 * through the Hadamard scheme without materialising W, and the quantizer that writes them. */
#ifndef GLMCHAT_EXL3_H
#define GLMCHAT_EXL3_H

#include <stddef.h>
#include <stdint.h>

#include "glm.h"

/* The three codebooks; the tensor's marker names it (no marker: 3INST). */
typedef enum exl3_codebook {
    EXL3_CB_3INST = 0,
    EXL3_CB_MCG = 1,
    EXL3_CB_MUL1 = 2
} exl3_codebook;

#define EXL3_MCG_MARKER 0xCBAC1FEDu  /* value of the 0-dim int32 `mcg` tensor */
#define EXL3_MUL1_MARKER 0x83DCD12Du /* value of the 0-dim int32 `mul1` tensor */
#define EXL3_TILE 16                 /* tiles are 16 x 16 weights */
#define EXL3_TILE_VALUES 256
#define EXL3_MAX_BITS 8

/* One quantized linear with `in` inputs (k) and `out` outputs (n), over caller-owned buffers in
 * the on-disk layout. Either suh (fp16 signed scales) or the legacy su sign bits, likewise svh/sv. */
typedef struct exl3_tensor {
    int in, out;             /* multiples of 128 */
    int bits;                /* K = trellis.shape[-1] / 16, 1..8 */
    exl3_codebook codebook;
    const uint16_t *trellis; /* [in/16][out/16][16*bits] int16 words as stored */
    const uint16_t *suh;     /* [in] fp16 bits, or NULL and su */
    const uint16_t *svh;     /* [out] fp16 bits, or NULL and sv */
    const uint16_t *su;      /* legacy [in/16]: bit b of word w set => element 16w+b is -1 */
    const uint16_t *sv;      /* legacy [out/16] */
    const uint16_t *bias;    /* [out] fp16 bits, or NULL */
} exl3_tensor;

/* ---- fp16 ------------------------------------------------------------------------------------ */

float exl3_f16_to_f32(uint16_t h);
/* Rounds to nearest even, once, from the exact double (overflow gives infinity). */
uint16_t exl3_f16_from_f64(double v);

/* ---- one tile -------------------------------------------------------------------------------- */

/* The fp16 bit pattern the codebook gives a 16-bit trellis state. */
uint16_t exl3_codebook_value(exl3_codebook cb, uint32_t state);

/* The 256 16-bit states of one tile (stream order) from its 16*bits stored words. */
void exl3_tile_states(const uint16_t *words, int bits, uint16_t states[EXL3_TILE_VALUES]);

/* The inverse: packs the low `bits` bits of each state into 16*bits stored words. Consecutive
 * states of a tail-biting chain overlap, so unpacking returns them exactly. */
void exl3_tile_pack(const uint16_t states[EXL3_TILE_VALUES], int bits, uint16_t *words);

/* Where stream position p (0..255) sits in its tile: row (the k index) and col (the n index). */
void exl3_tile_position(int p, int *row, int *col);

/* One tile's weights, row-major [16 k][16 n], as fp16 bit patterns. */
void exl3_decode_tile(const uint16_t *words, int bits, exl3_codebook cb,
                      uint16_t tile[EXL3_TILE_VALUES]);

/* ---- whole tensors --------------------------------------------------------------------------- */

/* Names the codebook from which marker tensors are present; both is an error. */
glm_status exl3_codebook_from_markers(int has_mcg, int has_mul1, exl3_codebook *cb,
                                      glm_error *err);

/* Checks shapes, bit width, codebook and that the needed buffers are there. */
glm_status exl3_check(const exl3_tensor *t, glm_error *err);

/* The input and output scales as floats (suh, or su's signs; svh, or sv's). */
void exl3_input_scales(const exl3_tensor *t, float *scales /* [in] */);
void exl3_output_scales(const exl3_tensor *t, float *scales /* [out] */);

/* The decoded tiles W^ before rotation, [in][out] fp16 bits: bit-exact. */
glm_status exl3_decode_raw(const exl3_tensor *t, uint16_t *w_hat, glm_error *err);

/* The layer's weight in the Hugging Face orientation [out][in]:
 * W = diag(suh) Hk W^ Hn diag(svh), transposed. Rotations in double, one rounding at the end. */
glm_status exl3_dequantize_f32(const exl3_tensor *t, float *w, glm_error *err);
glm_status exl3_dequantize_f16(const exl3_tensor *t, uint16_t *w, glm_error *err);

/* y[r] = W x[r] (+ bias) for `rows` rows, x [rows][in], y [rows][out], through the Hadamard
 * scheme: decodes one tile at a time and never holds W. Accumulates in double. */
glm_status exl3_matmul(const exl3_tensor *t, const float *x, float *y, int rows, glm_error *err);
glm_status exl3_matvec(const exl3_tensor *t, const float *x, float *y, glm_error *err);

/* ---- quantizer (exl3_quantize.c) ------------------------------------------------------------- */

typedef struct exl3_quant_params {
    int bits;                /* 1..8 */
    exl3_codebook codebook;
    uint64_t seed;           /* input and output sign draws */
    int out_scales;          /* 1: fold per-output RMS scales into svh */
    int scale_search;        /* 1: search the global scale on a sample of tiles */
    int threads;             /* worker threads for the tile search (<= 1: the caller's) */
} exl3_quant_params;

/* Buffers the quantizer fills (caller-allocated, sizes as in exl3_tensor). */
typedef struct exl3_quant_out {
    uint16_t *trellis; /* [in/16][out/16][16*bits] */
    uint16_t *suh;     /* [in] */
    uint16_t *svh;     /* [out] */
} exl3_quant_out;

/* Quantizes w [out][in] (Hugging Face orientation, f32). hessian is NULL (no calibration) or
 * [in][in]: the mean of x^T x over calibration rows; it turns on LDLQ error feedback. */
glm_status exl3_quantize(const float *w, int out, int in, const float *hessian,
                         const exl3_quant_params *p, exl3_quant_out *q, glm_error *err);

/* Tail-biting Viterbi over one tile: target values in stream order -> the 256 states whose
 * codebook values minimise the squared error, chained so that exl3_tile_pack stores them.
 * Returns the squared error. */
double exl3_encode_tile(const float target[EXL3_TILE_VALUES], int bits, exl3_codebook cb,
                        uint16_t states[EXL3_TILE_VALUES]);

/* Codebook table: all 65536 values as floats; built once, thread-safe, never freed. */
const float *exl3_codebook_table(exl3_codebook cb);

#endif
