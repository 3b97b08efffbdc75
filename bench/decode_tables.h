/* decode_tables.h: the arithmetic behind bench_cuda_engine's decode tables (ratios to a base,
 * op shares, the public engine's window costs, expert unions), pure C so a CPU test checks it. */
#ifndef GLMCHAT_BENCH_DECODE_TABLES_H
#define GLMCHAT_BENCH_DECODE_TABLES_H

#include <stdint.h>

/* The public engine's published decode costs of a verification window of 1..8 rows (ms). */
#define DT_PUBLIC_ROWS 8
extern const double dt_public_window_ms[DT_PUBLIC_ROWS];

/* value / base; 0 when base is not positive (no base measured). */
double dt_ratio(double value, double base);
/* part as a percentage of total; 0 when total is not positive. */
double dt_share(double part, double total);
/* The public engine's window of `rows` rows over its one-row step; 0 outside 1..DT_PUBLIC_ROWS. */
double dt_public_ratio(int rows);
/* 1 when value is at most (1 + tol) x base (a positive base), else 0. */
int dt_within(double value, double base, double tol);
/* How many distinct values ids[0..n) holds. */
int dt_distinct(const int32_t *ids, int n);
/* The distinct experts `rows` rows would route to if each drew its k of e uniformly at random:
 * e (1 - (1 - k/e)^rows). */
double dt_random_union(int e, int k, int rows);
/* Orders idx[0..n) (indices into us) by us descending, ties by index; the order of a table. */
void dt_order_desc(const double *us, int n, int *idx);

#endif
