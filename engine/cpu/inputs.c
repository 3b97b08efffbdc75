/* inputs.c: the CUDA backend's one-part products (cuda_gemm = onepart) as the CPU backend
 * emulates them: cpu_matmul over inputs rounded where CUDA rounds them (ops.h cpu_matmul_in). */
#include <stdlib.h>
#include <string.h>

#include "cpu/ops.h"
#include "model/numfmt.h"
#include "prefill_grid.h"

/* (in a file of its own: its products go through cpu_matmul as an outside call, which the
 * accuracy tool's link-time wrap of cpu_matmul sees, as it sees every other product) */
/* Whether CUDA's one-part form rounds w's inputs (rows of in): a BF16 weight the fp16 forms take. */
static int rounds_inputs(const cpu_inputs *in, const glm_weight *w)
{
    return in && in->r1 > in->r0 && w->kind == GLM_W_PLAIN && w->dtype == ST_BF16 &&
           eng_gemm_half_takes(w->rows, w->cols);
}

int cpu_matmul_in(cpu_pool *pool, const glm_weight *w, const float *x, int T, float *y,
                  const cpu_inputs *in)
{
    if (!rounds_inputs(in, w))
        return cpu_matmul(pool, w, x, T, y);
    size_t cols = (size_t)w->cols;
    float *xr = malloc((size_t)T * cols * sizeof *xr);
    if (!xr)
        return -1;
    memcpy(xr, x, (size_t)T * cols * sizeof *xr);
    for (int t = in->r0; t < in->r1 && t < T; t++)
        numfmt_one_part_row(xr + (size_t)t * cols, xr + (size_t)t * cols, cols);
    int rc = cpu_matmul(pool, w, xr, T, y);
    free(xr);
    return rc;
}

void cpu_inputs_round_heads(const cpu_inputs *in, const glm_weight *w, float *x, int T, int heads,
                            int width)
{
    if (!rounds_inputs(in, w))
        return;
    for (int t = in->r0; t < in->r1 && t < T; t++)
        for (int h = 0; h < heads; h++) {
            float *row = x + ((size_t)t * heads + h) * width;
            numfmt_one_part_row(row, row, (size_t)width);
        }
}
