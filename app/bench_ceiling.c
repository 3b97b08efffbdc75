/* bench_ceiling.c: measures memory read bandwidth (threads summing disjoint slices of one large
 * buffer) and the float FMA rate (threads running independent accumulator chains). */
#include "app/bench_ceiling.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_THREADS 256

double bench_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

typedef struct slice {
    const float *p;
    size_t n;
    float sum;
} slice;

static void *sum_slice(void *arg)
{
    slice *s = arg;
    /* eight chains so the adds overlap and the loop is bound by the loads */
    float a[8] = {0};
    size_t i = 0;
    for (; i + 8 <= s->n; i += 8)
        for (int k = 0; k < 8; k++)
            a[k] += s->p[i + k];
    for (; i < s->n; i++)
        a[0] += s->p[i];
    s->sum = a[0] + a[1] + a[2] + a[3] + a[4] + a[5] + a[6] + a[7];
    return NULL;
}

/* Runs fn over n_threads slices; returns 0 or -1 when a thread cannot start. */
static int run_threads(void *(*fn)(void *), void *args, size_t arg_size, int n_threads)
{
    pthread_t th[MAX_THREADS];
    int started = 0, rc = 0;
    for (; started < n_threads; started++)
        if (pthread_create(&th[started], NULL, fn, (char *)args + (size_t)started * arg_size)) {
            rc = -1;
            break;
        }
    for (int i = 0; i < started; i++)
        pthread_join(th[i], NULL);
    return rc;
}

static int clamp_threads(int n)
{
    return n < 1 ? 1 : n > MAX_THREADS ? MAX_THREADS : n;
}

double bench_read_bandwidth(size_t bytes, int n_threads, int reps)
{
    n_threads = clamp_threads(n_threads);
    size_t n = bytes / sizeof(float);
    float *buf = malloc(n * sizeof *buf);
    slice *sl = calloc((size_t)n_threads, sizeof *sl);
    double best = -1;
    if (buf && sl) {
        for (size_t i = 0; i < n; i++)
            buf[i] = (float)(i & 1023);
        size_t per = n / (size_t)n_threads;
        for (int r = 0; r < reps; r++) {
            for (int t = 0; t < n_threads; t++) {
                sl[t].p = buf + (size_t)t * per;
                sl[t].n = t == n_threads - 1 ? n - (size_t)t * per : per;
            }
            double t0 = bench_now();
            if (run_threads(sum_slice, sl, sizeof *sl, n_threads)) {
                best = -1;
                break;
            }
            double dt = bench_now() - t0;
            float check = 0;
            for (int t = 0; t < n_threads; t++)
                check += sl[t].sum;
            /* the sum is used so the loads cannot be dropped */
            if (check >= 0 && dt > 0 && (double)n * sizeof(float) / dt > best)
                best = (double)n * sizeof(float) / dt;
        }
    }
    free(buf);
    free(sl);
    return best;
}

typedef struct fma_job {
    long iters;
    float out;
} fma_job;

/* Twelve independent 4-float chains held in registers: the rate the engine's baseline x86-64
 * (SSE) build can reach when its products never wait on memory. */
typedef float fma_vec __attribute__((vector_size(16)));
#define FMA_CHAINS 12

static void *fma_chains(void *arg)
{
    fma_job *j = arg;
    fma_vec acc[FMA_CHAINS], x = {0.999999f, 0.999998f, 0.999997f, 0.999996f}, c = {1e-7f, 1e-7f, 1e-7f, 1e-7f};
    for (int k = 0; k < FMA_CHAINS; k++)
        acc[k] = (fma_vec){(float)k, 1, 2, 3};
    for (long i = 0; i < j->iters; i++) {
        acc[0] = acc[0] * x + c; acc[1] = acc[1] * x + c; acc[2] = acc[2] * x + c;
        acc[3] = acc[3] * x + c; acc[4] = acc[4] * x + c; acc[5] = acc[5] * x + c;
        acc[6] = acc[6] * x + c; acc[7] = acc[7] * x + c; acc[8] = acc[8] * x + c;
        acc[9] = acc[9] * x + c; acc[10] = acc[10] * x + c; acc[11] = acc[11] * x + c;
    }
    float s = 0;
    for (int k = 0; k < FMA_CHAINS; k++)
        s += acc[k][0] + acc[k][1] + acc[k][2] + acc[k][3];
    j->out = s;
    return NULL;
}

double bench_fma_rate(int n_threads, int reps)
{
    n_threads = clamp_threads(n_threads);
    fma_job *jobs = calloc((size_t)n_threads, sizeof *jobs);
    if (!jobs)
        return -1;
    const long iters = 4L << 20;
    double best = -1;
    for (int r = 0; r < reps; r++) {
        for (int t = 0; t < n_threads; t++)
            jobs[t].iters = iters;
        double t0 = bench_now();
        if (run_threads(fma_chains, jobs, sizeof *jobs, n_threads)) {
            best = -1;
            break;
        }
        double dt = bench_now() - t0;
        double flops = 2.0 * 4 * FMA_CHAINS * (double)iters * n_threads;
        if (jobs[0].out == jobs[0].out && dt > 0 && flops / dt > best)
            best = flops / dt;
    }
    free(jobs);
    return best;
}
