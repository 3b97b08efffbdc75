/* bench_tp.c: latency of one 16 KiB two-rank all-gather through glmchat's tcp transport (two
 * processes on loopback), against a bare TCP exchange of the same bytes, and its share of a step. */
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tp/rank.h"
#include "tp/transport.h"

#include "bench/bench_clock.h"

#define FLOATS 4096 /* one row of hidden 4096 in fp32: 16 KiB */
#define WARMUP 1000
#define EXCHANGES_PER_TOKEN 90
#define RECIPE_TOK_S 60.4

typedef struct stats {
    double median, p99, mean;
} stats;

static stats summarize(double *v, int n)
{
    stats s = {0};
    double sum = 0;
    for (int i = 0; i < n; i++)
        sum += v[i];
    qsort(v, (size_t)n, sizeof *v, bench_cmp_double);
    s.median = v[n / 2];
    s.p99 = v[(int)(n * 0.99)];
    s.mean = sum / n;
    return s;
}

/* WARMUP untimed then iters timed calls of exchange(ctx) (0 on success), their microseconds
 * summarised into *out; -1 when a call fails or there is no memory. */
static int time_exchanges(int (*exchange)(void *ctx), void *ctx, int iters, stats *out)
{
    double *lat = malloc(sizeof(double) * (size_t)iters);
    if (!lat)
        return -1;
    for (int i = 0; i < WARMUP + iters; i++) {
        double t0 = bench_now_us();
        if (exchange(ctx) != 0) {
            free(lat);
            return -1;
        }
        if (i >= WARMUP)
            lat[i - WARMUP] = bench_now_us() - t0;
    }
    *out = summarize(lat, iters);
    free(lat);
    return 0;
}

typedef struct gather_ctx {
    tp_rank *r;
    float *mine, *both;
    glm_error err;
} gather_ctx;

static int gather_once(void *ctx)
{
    gather_ctx *g = ctx;
    if (tp_rank_all_gather(g->r, g->mine, g->both, FLOATS, &g->err) == GLM_OK)
        return 0;
    fprintf(stderr, "bench_tp: %s\n", g->err.message);
    return -1;
}

/* glmchat's path: tp_head_connect / tp_worker_accept, tp_rank_all_gather. */
static int bench_glmchat(int iters, stats *out)
{
    glm_error err;
    tp_listener *l = tp_listener_open("127.0.0.1:0", NULL, &err);
    if (!l) {
        fprintf(stderr, "bench_tp: %s\n", err.message);
        return -1;
    }
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", tp_listener_port(l));
    tp_identity id = {.model_name = "bench", .config_hash = 1, .weights_hash = 1};
    tp_rank_options o = {.transport = "tcp", .timeout_ms = 10000, .heartbeat_ms = 1000};
    static float mine[FLOATS], both[2 * FLOATS];
    pid_t child = fork();
    if (child == 0) {
        tp_rank *r = tp_worker_accept(l, &id, &o, tp_now_ms() + 10000, &err);
        if (!r)
            _exit(1);
        for (int i = 0; i < WARMUP + iters; i++)
            if (tp_rank_all_gather(r, mine, both, FLOATS, &err) != GLM_OK)
                _exit(2);
        tp_step step;
        int bye = 0;
        (void)tp_worker_next_step(r, -1, &step, &bye, &err); /* wait for the head's BYE */
        tp_rank_close(r);
        _exit(0);
    }
    tp_listener_close(l);
    tp_rank *r = tp_head_connect(addr, &id, &o, &err);
    if (!r) {
        fprintf(stderr, "bench_tp: %s\n", err.message);
        return -1;
    }
    for (int i = 0; i < FLOATS; i++)
        mine[i] = (float)i;
    gather_ctx g = {r, mine, both, {0}};
    int rc = time_exchanges(gather_once, &g, iters, out);
    tp_rank_close(r);
    int status;
    waitpid(child, &status, 0);
    return rc;
}

/* The ceiling: the same 16 KiB each way over a bare connected TCP pair, blocking send then recv,
 * no framing, no checks, no poll. */
static int bare_exchange(int fd, char *out, char *in, size_t n)
{
    glm_error err;
    if (tp_io_write(fd, out, n, tp_now_ms() + 10000, "bench", &err) != GLM_OK)
        return -1;
    return tp_io_read(fd, in, n, tp_now_ms() + 10000, "bench", &err) == GLM_OK ? 0 : -1;
}

typedef struct bare_ctx {
    int fd;
    char *out, *in;
    size_t n;
} bare_ctx;

static int bare_once(void *ctx)
{
    bare_ctx *b = ctx;
    return bare_exchange(b->fd, b->out, b->in, b->n);
}

static int bench_bare(int iters, stats *out)
{
    glm_error err;
    int lfd = tp_tcp_listen("127.0.0.1:0", &err);
    if (lfd < 0)
        return -1;
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", tp_tcp_local_port(lfd));
    static char a[FLOATS * 4], b[FLOATS * 4];
    pid_t child = fork();
    if (child == 0) {
        int fd = tp_tcp_accept(lfd, tp_now_ms() + 10000, NULL, 0, &err);
        for (int i = 0; fd >= 0 && i < WARMUP + iters; i++)
            if (bare_exchange(fd, a, b, sizeof a) != 0)
                _exit(2);
        _exit(0);
    }
    close(lfd);
    int fd = tp_tcp_connect(addr, tp_now_ms() + 10000, &err);
    if (fd < 0)
        return -1;
    bare_ctx bc = {fd, a, b, sizeof a};
    int rc = time_exchanges(bare_once, &bc, iters, out);
    close(fd);
    int status;
    waitpid(child, &status, 0);
    return rc;
}

int main(int argc, char **argv)
{
    int iters = argc > 1 ? atoi(argv[1]) : 10000;
    if (iters < 100)
        iters = 100;
    signal(SIGPIPE, SIG_IGN);
    stats ours, bare;
    if (bench_bare(iters, &bare) != 0 || bench_glmchat(iters, &ours) != 0) {
        fprintf(stderr, "bench_tp: a run failed\n");
        return 1;
    }
    double step_us = 1e6 / RECIPE_TOK_S;
    printf("bench_tp: 16 KiB two-rank all-gather over TCP loopback, %d exchanges after %d warm-up\n",
           iters, WARMUP);
    printf("%-28s %10s %10s %10s\n", "path", "median us", "p99 us", "mean us");
    printf("%-28s %10.1f %10.1f %10.1f\n", "bare TCP send+recv (ceiling)", bare.median, bare.p99, bare.mean);
    printf("%-28s %10.1f %10.1f %10.1f\n", "glmchat tcp all-gather", ours.median, ours.p99, ours.mean);
    printf("ratio glmchat / bare (median): %.2f\n", ours.median / bare.median);
    printf("per token: %d exchanges x %.1f us = %.2f ms, %.1f%% of the recipe's %.2f ms step (%.1f tok/s)\n",
           EXCHANGES_PER_TOKEN, ours.median, EXCHANGES_PER_TOKEN * ours.median / 1000,
           100.0 * EXCHANGES_PER_TOKEN * ours.median / step_us, step_us / 1000, RECIPE_TOK_S);
    return 0;
}
