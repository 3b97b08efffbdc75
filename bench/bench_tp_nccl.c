/* bench_tp_nccl.c: one rank of an N-rank nccl transport (one process per GPU): checks that every
 * all-gather lands in rank order, then times the host-staged and the device all-gather of a row. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kernels/engine.h"
#include "kernels/kernels.h"
#include "tp/nccl.h"

#include "bench/bench_clock.h"

#define WARMUP 200

static void report(const char *what, double *v, int n, int floats, int world)
{
    qsort(v, (size_t)n, sizeof *v, bench_cmp_double);
    printf("nccl %-12s all-gather of %d floats among %d ranks: median %.1f us, p99 %.1f us (%d runs)\n",
           what, floats, world, v[n / 2], v[(int)(n * 0.99)], n);
}

/* Rank 0 writes the id (hex) to path through a rename; the others wait for it (at most 60 s). */
static int share_id(int rank, const char *path, uint8_t id[TP_NCCL_ID_BYTES])
{
    if (rank == 0) {
        char tmp[4096];
        snprintf(tmp, sizeof tmp, "%s.tmp", path);
        FILE *f = fopen(tmp, "w");
        if (!f)
            return -1;
        for (unsigned i = 0; i < TP_NCCL_ID_BYTES; i++)
            fprintf(f, "%02x", id[i]);
        return fclose(f) == 0 && rename(tmp, path) == 0 ? 0 : -1;
    }
    for (int tries = 0; tries < 6000; tries++, usleep(10000)) {
        FILE *f = fopen(path, "r");
        if (!f)
            continue;
        unsigned i = 0, b;
        while (i < TP_NCCL_ID_BYTES && fscanf(f, "%2x", &b) == 1)
            id[i++] = (uint8_t)b;
        fclose(f);
        return i == TP_NCCL_ID_BYTES ? 0 : -1;
    }
    return -1;
}

/* Every rank's n floats are rank * 1e6 + i: the gathered block r must hold rank r's. */
static int check_order(const float *all, int n, int world)
{
    for (int r = 0; r < world; r++)
        for (int i = 0; i < n; i++)
            if (all[(size_t)r * n + i] != (float)r * 1e6f + (float)i)
                return r;
    return -1;
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: bench_tp_nccl RANK WORLD ID_FILE [FLOATS [RUNS]]\n");
        return 2;
    }
    int rank = atoi(argv[1]), world = atoi(argv[2]);
    int floats = argc > 4 ? atoi(argv[4]) : 4096, runs = argc > 5 ? atoi(argv[5]) : 2000;
    if (world < 2 || rank < 0 || rank >= world || floats < 1 || runs < 10) {
        fprintf(stderr, "bench_tp_nccl: rank %d of %d, %d floats, %d runs: out of range\n", rank, world,
                floats, runs);
        return 2;
    }
    glm_error err = {0};
    uint8_t id[TP_NCCL_ID_BYTES];
    if (rank == 0 && tp_nccl_unique_id(id, &err) != GLM_OK) {
        fprintf(stderr, "bench_tp_nccl: %s\n", err.message);
        return 1;
    }
    if (share_id(rank, argv[3], id)) {
        fprintf(stderr, "bench_tp_nccl: rank %d: no id through %s\n", rank, argv[3]);
        return 1;
    }
    tp_transport *t = tp_nccl_transport_new(id, rank, world, TP_NCCL_INIT_MS, &err);
    if (!t) {
        fprintf(stderr, "bench_tp_nccl: rank %d: %s\n", rank, err.message);
        return 1;
    }
    size_t n = (size_t)floats;
    float *mine = malloc(n * sizeof *mine), *all = malloc((size_t)world * n * sizeof *all);
    double *us = malloc((size_t)runs * sizeof *us);
    void *d_mine = NULL, *d_all = NULL, *stream = NULL;
    int rc = !mine || !all || !us || kern_malloc(&d_mine, n * 4) ||
             kern_malloc(&d_all, (size_t)world * n * 4) || eng_stream_new(&stream);
    for (size_t i = 0; !rc && i < n; i++)
        mine[i] = (float)rank * 1e6f + (float)i;
    for (int k = 0; !rc && k < WARMUP + runs; k++) {
        double t0 = bench_now_us();
        if (tp_all_gather(t, mine, all, n, (uint64_t)k + 1, 10000, &err) != GLM_OK) {
            fprintf(stderr, "bench_tp_nccl: rank %d: %s\n", rank, err.message);
            rc = 1;
        } else if (k >= WARMUP) {
            us[k - WARMUP] = bench_now_us() - t0;
        }
        int bad = rc ? -1 : check_order(all, floats, world);
        if (bad >= 0) {
            fprintf(stderr, "bench_tp_nccl: rank %d: gather %d put the wrong floats at rank %d's "
                    "place\n", rank, k, bad);
            rc = 1;
        }
    }
    if (!rc && rank == 0)
        report("host-staged", us, runs, floats, world);
    rc = rc || kern_to_device(d_mine, mine, n * 4);
    for (int k = 0; !rc && k < WARMUP + runs; k++) {
        double t0 = bench_now_us();
        if (tp_nccl_all_gather_device(t, d_mine, d_all, n, stream, 10000, &err) != GLM_OK) {
            fprintf(stderr, "bench_tp_nccl: rank %d: %s\n", rank, err.message);
            rc = 1;
        } else if (eng_stream_sync(stream)) {
            fprintf(stderr, "bench_tp_nccl: rank %d: the device gather's stream failed\n", rank);
            rc = 1;
        } else if (k >= WARMUP) {
            us[k - WARMUP] = bench_now_us() - t0;
        }
    }
    if (!rc && !kern_to_host(all, d_all, (size_t)world * n * 4) && check_order(all, floats, world) >= 0) {
        fprintf(stderr, "bench_tp_nccl: rank %d: the device gather is out of rank order\n", rank);
        rc = 1;
    }
    if (!rc && rank == 0)
        report("device", us, runs, floats, world);
    if (stream)
        eng_stream_free(stream);
    kern_free(d_mine);
    kern_free(d_all);
    tp_transport_free(t);
    free(mine);
    free(all);
    free(us);
    return rc;
}
