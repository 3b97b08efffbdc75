/* threads.c: the CPU backend's thread pool: workers wait on a condition variable for a job
 * (a range function), take their slice, and the caller waits until every slice is done. */
#include "cpu/threads.h"

#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

struct cpu_pool {
    int n;
    pthread_t *threads;
    pthread_mutex_t mu;
    pthread_cond_t go, done;
    unsigned long generation;
    int pending, quit;
    cpu_range_fn fn;
    void *ctx;
    size_t total;
};

typedef struct worker_arg {
    cpu_pool *p;
    int id;
} worker_arg;

static void slice(size_t total, int n, int id, size_t *b, size_t *e)
{
    size_t per = total / (size_t)n, extra = total % (size_t)n;
    *b = (size_t)id * per + ((size_t)id < extra ? (size_t)id : extra);
    *e = *b + per + ((size_t)id < extra ? 1 : 0);
}

static void *worker_main(void *arg)
{
    worker_arg a = *(worker_arg *)arg;
    free(arg);
    cpu_pool *p = a.p;
    unsigned long seen = 0;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->quit && p->generation == seen)
            pthread_cond_wait(&p->go, &p->mu);
        if (p->quit)
            break;
        seen = p->generation;
        cpu_range_fn fn = p->fn;
        void *ctx = p->ctx;
        size_t b, e;
        slice(p->total, p->n, a.id, &b, &e);
        pthread_mutex_unlock(&p->mu);
        if (b < e)
            fn(ctx, b, e, a.id);
        pthread_mutex_lock(&p->mu);
        if (--p->pending == 0)
            pthread_cond_signal(&p->done);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

cpu_pool *cpu_pool_new(int n_threads)
{
    if (n_threads <= 0) {
        long c = sysconf(_SC_NPROCESSORS_ONLN);
        n_threads = c > 0 ? (int)c : 1;
    }
    if (n_threads > 256)
        n_threads = 256;
    cpu_pool *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    p->n = n_threads;
    if (n_threads == 1)
        return p;
    p->threads = calloc((size_t)n_threads, sizeof *p->threads);
    if (!p->threads) {
        free(p);
        return NULL;
    }
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->go, NULL);
    pthread_cond_init(&p->done, NULL);
    /* worker 0 is the calling thread; 1..n-1 are ours */
    for (int i = 1; i < n_threads; i++) {
        worker_arg *a = malloc(sizeof *a);
        if (a) {
            a->p = p;
            a->id = i;
        }
        if (!a || pthread_create(&p->threads[i], NULL, worker_main, a) != 0) {
            free(a);
            p->n = i;
            break;
        }
    }
    return p;
}

int cpu_pool_size(const cpu_pool *p)
{
    return p ? p->n : 1;
}

void cpu_pool_run(cpu_pool *p, size_t n, cpu_range_fn fn, void *ctx)
{
    if (!p || p->n == 1 || n < 2) {
        if (n)
            fn(ctx, 0, n, 0);
        return;
    }
    pthread_mutex_lock(&p->mu);
    p->fn = fn;
    p->ctx = ctx;
    p->total = n;
    p->pending = p->n - 1;
    p->generation++;
    pthread_cond_broadcast(&p->go);
    pthread_mutex_unlock(&p->mu);
    size_t b, e;
    slice(n, p->n, 0, &b, &e);
    if (b < e)
        fn(ctx, b, e, 0);
    pthread_mutex_lock(&p->mu);
    while (p->pending > 0)
        pthread_cond_wait(&p->done, &p->mu);
    pthread_mutex_unlock(&p->mu);
}

void cpu_pool_free(cpu_pool *p)
{
    if (!p)
        return;
    if (p->threads) {
        pthread_mutex_lock(&p->mu);
        p->quit = 1;
        pthread_cond_broadcast(&p->go);
        pthread_mutex_unlock(&p->mu);
        for (int i = 1; i < p->n; i++)
            pthread_join(p->threads[i], NULL);
        pthread_mutex_destroy(&p->mu);
        pthread_cond_destroy(&p->go);
        pthread_cond_destroy(&p->done);
        free(p->threads);
    }
    free(p);
}
