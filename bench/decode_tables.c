/* decode_tables.c: the pure arithmetic of bench_cuda_engine's decode tables (decode_tables.h),
 * kept apart from the CUDA bench so tests/unit/test_decode_tables checks it by hand. */
#include "decode_tables.h"

#include <math.h>
#include <stdlib.h>

/* 1 to 8 rows, as published: 1.33x at 2 rows, 1.89x at 4, 2.37x at 8. */
const double dt_public_window_ms[DT_PUBLIC_ROWS] = {29.2, 38.9, 45.2, 55.2, 59.5, 63.2, 65.6, 69.2};

double dt_ratio(double value, double base)
{
    return base > 0 ? value / base : 0;
}

double dt_share(double part, double total)
{
    return total > 0 ? 100.0 * part / total : 0;
}

double dt_public_ratio(int rows)
{
    if (rows < 1 || rows > DT_PUBLIC_ROWS)
        return 0;
    return dt_public_window_ms[rows - 1] / dt_public_window_ms[0];
}

int dt_within(double value, double base, double tol)
{
    return base > 0 && value <= (1.0 + tol) * base;
}

static int cmp_i32(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

int dt_distinct(const int32_t *ids, int n)
{
    if (n <= 0)
        return 0;
    int32_t *v = malloc((size_t)n * sizeof *v);
    if (!v)
        return -1;
    for (int i = 0; i < n; i++)
        v[i] = ids[i];
    qsort(v, (size_t)n, sizeof *v, cmp_i32);
    int d = 1;
    for (int i = 1; i < n; i++)
        d += v[i] != v[i - 1];
    free(v);
    return d;
}

double dt_random_union(int e, int k, int rows)
{
    if (e <= 0 || k <= 0 || rows <= 0)
        return 0;
    return e * (1.0 - pow(1.0 - (double)k / e, rows));
}

void dt_order_desc(const double *us, int n, int *idx)
{
    for (int i = 0; i < n; i++)
        idx[i] = i;
    for (int i = 1; i < n; i++) { /* insertion sort: stable, so ties keep index order */
        int v = idx[i], j = i - 1;
        while (j >= 0 && us[idx[j]] < us[v]) {
            idx[j + 1] = idx[j];
            j--;
        }
        idx[j + 1] = v;
    }
}
