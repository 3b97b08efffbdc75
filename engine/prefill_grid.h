/* prefill_grid.h: how the CUDA backend cuts a prefill call into chunks, and which rows of the call
 * its one-part products (cuda_gemm = onepart) round: shared so that the CPU backend emulates it. */
#ifndef GLMCHAT_ENGINE_PREFILL_GRID_H
#define GLMCHAT_ENGINE_PREFILL_GRID_H

#include <stddef.h>
#include <stdint.h>

/* A chunk of at most this many rows runs every product as a GEMV (exact f32 sums); a larger one
 * runs the BF16 products through cuBLASLt (kernels/engine.h ENG_GEMM_MIN_ROWS, CUDA_DECODE_T). */
#define PREFILL_GEMV_ROWS 8
/* The BF16 weights the fp16 forms take: those whose fp16 copy fits PREFILL_HALF_BYTES, a narrow
 * one (at most PREFILL_CONCAT_COLS columns, 6 x rows x cols within PREFILL_CONCAT_BYTES) counted
 * twice (kernels/engine.h ENG_GEMM_HALF_BYTES, ENG_GEMM_CONCAT_COLS, ENG_GEMM_CONCAT_BYTES). */
#define PREFILL_HALF_BYTES ((size_t)128 << 20)
#define PREFILL_CONCAT_COLS 512
#define PREFILL_CONCAT_BYTES ((size_t)16 << 20)
/* Prompts resume from kept states on this grid of positions (glm_tokens.h GLM_KEEP_ALIGN). */
#define PREFILL_KEEP_ALIGN 16

/* Tokens of the next chunk at position pos with left tokens to go (end = pos + left): chunks end
 * on the grid of multiples of chunk, and the prompt's tail past the last multiple of
 * PREFILL_KEEP_ALIGN runs as a chunk of its own (so a prefill resumed from a kept state runs every
 * row through the same kernels as a full prefill). */
int prefill_chunk_len(int pos, int left, int chunk);

/* Whether a BF16 weight of rows x cols takes the fp16 forms (the CUDA side's fp16x2_takes). */
int prefill_half_takes(int64_t rows, int64_t cols);

/* The rows of a prefill call of n tokens from pos0 whose chunk has more than PREFILL_GEMV_ROWS
 * rows, as [*r0, *r1) of the call (empty: *r0 == *r1). mtp: the rows of the MTP layer's catch-up
 * instead (its call after a chunk [p, p + T) runs T rows, T - 1 from position 0, the MTP rows
 * p - 1 .. p + T - 2; the call's rows here from max(pos0 - 1, 0)). chunk 0: unknown, which only a
 * call of at most PREFILL_GEMV_ROWS tokens or one starting on the PREFILL_KEEP_ALIGN grid may have
 * (the rows then do not depend on it).
 * Returns 0, or -1 where chunk is needed and 0, or where the rows are not one range. */
int prefill_gemm_rows(int pos0, int n, int chunk, int mtp, int *r0, int *r1);

#endif
