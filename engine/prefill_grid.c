/* prefill_grid.c: the CUDA backend's prefill chunks and the rows its one-part products round
 * (prefill_grid.h); the CPU backend's emulation computes the same. */
#include "prefill_grid.h"

int prefill_chunk_len(int pos, int left, int chunk)
{
    int end = pos + left, cut = (pos / chunk + 1) * chunk;
    int tail = end / GLM_KEEP_ALIGN * GLM_KEEP_ALIGN;
    if (cut > end)
        cut = end;
    if (cut == end && tail > pos && tail < end)
        cut = tail;
    return cut - pos;
}

int prefill_gemm_rows(int pos0, int n, int chunk, int mtp, int *r0, int *r1)
{
    *r0 = *r1 = 0;
    if (n <= PREFILL_GEMV_ROWS) /* every chunk of it a GEMV (a decode step among them) */
        return 0;
    if (chunk <= 0) {
        if (pos0 % GLM_KEEP_ALIGN)
            return -1;
        /* an aligned call's rows are the same at every chunk (each a multiple of
         * GLM_KEEP_ALIGN): the largest a backend may be given stands for an unknown one */
        chunk = GLM_CUDA_CHUNK_LIMIT;
    }
    int first = -1, last = -1, gap = 0;
    for (int done = 0; done < n;) {
        int p = pos0 + done, T = prefill_chunk_len(p, n - done, chunk);
        /* this chunk's rows of the call: its own, or its MTP rows p - 1 .. p + T - 2 */
        int rows = mtp ? T - (p == 0) : T;
        int a = mtp ? (p == 0 ? 0 : p - 1) - (pos0 == 0 ? 0 : pos0 - 1) : done;
        if (rows > PREFILL_GEMV_ROWS) {
            if (first < 0)
                first = a;
            else if (gap)
                return -1; /* a GEMV chunk between two larger ones */
            last = a + rows;
        } else if (first >= 0 && rows > 0) {
            gap = 1;
        }
        done += T;
    }
    if (first >= 0)
        *r0 = first, *r1 = last;
    return 0;
}
