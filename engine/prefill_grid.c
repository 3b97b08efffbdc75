/* prefill_grid.c: the CUDA backend's prefill chunks and the rows its one-part products round
 * (prefill_grid.h); the CPU backend's emulation computes the same. */
#include "prefill_grid.h"

int prefill_chunk_len(int pos, int left, int chunk)
{
    int end = pos + left, cut = (pos / chunk + 1) * chunk;
    int tail = end / PREFILL_KEEP_ALIGN * PREFILL_KEEP_ALIGN;
    if (cut > end)
        cut = end;
    if (cut == end && tail > pos && tail < end)
        cut = tail;
    return cut - pos;
}

int prefill_half_takes(int64_t rows, int64_t cols)
{
    size_t rc = (size_t)rows * (size_t)cols;
    int narrow = cols <= PREFILL_CONCAT_COLS && 6 * rc <= PREFILL_CONCAT_BYTES;
    return (narrow ? 4 : 2) * rc <= PREFILL_HALF_BYTES;
}

/* The largest chunk a backend may be given: with it an aligned call's rows are those of every
 * other chunk (a multiple of PREFILL_KEEP_ALIGN), so it stands for an unknown one there. */
enum { ANY_CHUNK = 1 << 14 };

int prefill_gemm_rows(int pos0, int n, int chunk, int mtp, int *r0, int *r1)
{
    *r0 = *r1 = 0;
    if (n <= PREFILL_GEMV_ROWS) /* every chunk of it a GEMV (a decode step among them) */
        return 0;
    if (chunk <= 0) {
        if (pos0 % PREFILL_KEEP_ALIGN)
            return -1;
        chunk = ANY_CHUNK;
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
