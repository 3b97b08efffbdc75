/* threads.h: a small persistent pthread pool that splits a range of rows across the cores;
 * the CPU backend's only source of parallelism. */
#ifndef GLMCHAT_ENGINE_CPU_THREADS_H
#define GLMCHAT_ENGINE_CPU_THREADS_H

#include <stddef.h>

typedef struct cpu_pool cpu_pool;

/* fn(ctx, begin, end, worker) handles rows [begin, end); worker is 0..n_threads-1. */
typedef void (*cpu_range_fn)(void *ctx, size_t begin, size_t end, int worker);

/* n_threads 0: one per online core. Returns NULL when no thread could start (then callers run
 * serially with a NULL pool). */
cpu_pool *cpu_pool_new(int n_threads);
int cpu_pool_size(const cpu_pool *p); /* 1 for NULL */
/* Runs fn over [0, n) split in contiguous slices, one per thread; returns when all are done.
 * A NULL pool, or little work, runs on the caller's thread. */
void cpu_pool_run(cpu_pool *p, size_t n, cpu_range_fn fn, void *ctx);
void cpu_pool_free(cpu_pool *p);

#endif
