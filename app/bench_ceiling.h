/* bench_ceiling.h: the machine's own ceilings, measured in the same run as a benchmark: memory
 * read bandwidth over a buffer far larger than the caches, and the float multiply-add rate. */
#ifndef GLMCHAT_APP_BENCH_CEILING_H
#define GLMCHAT_APP_BENCH_CEILING_H

#include <stddef.h>

/* Best of `reps` passes of n_threads threads summing `bytes` of memory: bytes per second, or a
 * negative value when the buffer or a thread cannot be had. */
double bench_read_bandwidth(size_t bytes, int n_threads, int reps);
/* Best of `reps` runs of n_threads threads doing independent float multiply-adds on data in
 * registers and L1, compiled like the engine: FLOP per second (2 per multiply-add), or < 0. */
double bench_fma_rate(int n_threads, int reps);
/* Seconds on a monotonic clock. */
double bench_now(void);

#endif
