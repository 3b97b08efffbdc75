/* prefill_grid.h: how the CUDA backend cuts a prefill call into chunks, and which rows of the call
 * its one-part products (cuda_gemm = onepart) round: shared so that the CPU backend emulates it. */
#ifndef GLMCHAT_ENGINE_PREFILL_GRID_H
#define GLMCHAT_ENGINE_PREFILL_GRID_H

#include "glm_tokens.h"
#include "kernels/engine.h"

/* A chunk of at most this many rows runs every product as a GEMV (exact f32 sums); a larger one
 * runs the BF16 products through cuBLASLt (kernels/engine.h; the BF16 weights that take the fp16
 * forms: eng_gemm_half_takes). */
#define PREFILL_GEMV_ROWS ENG_GEMM_MIN_ROWS

/* Tokens of the next chunk at position pos with left tokens to go (end = pos + left): chunks end
 * on the grid of multiples of chunk, and the prompt's tail past the last multiple of
 * GLM_KEEP_ALIGN runs as a chunk of its own (so a prefill resumed from a kept state, which lies on
 * that grid, runs every row through the same kernels as a full prefill). */
int prefill_chunk_len(int pos, int left, int chunk);

/* The rows of a prefill call of n tokens from pos0 whose chunk has more than PREFILL_GEMV_ROWS
 * rows, as [*r0, *r1) of the call (empty: *r0 == *r1). mtp: the rows of the MTP layer's catch-up
 * instead (its call after a chunk [p, p + T) runs T rows, T - 1 from position 0, the MTP rows
 * p - 1 .. p + T - 2; the call's rows here from max(pos0 - 1, 0)). chunk 0: unknown, which only a
 * call of at most PREFILL_GEMV_ROWS tokens or one starting on the GLM_KEEP_ALIGN grid may have
 * (the rows then do not depend on it).
 * Returns 0, or -1 where chunk is needed and 0, or where the rows are not one range. */
int prefill_gemm_rows(int pos0, int n, int chunk, int mtp, int *r0, int *r1);

#endif
