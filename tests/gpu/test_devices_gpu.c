/* test_devices_gpu.c: the launches that depend on the device (raised shared-memory limits, SM counts,
 * resident blocks) from two threads a device on every device at once: none refused, the same bits. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "engine/model/exl3.h"
#include "kernels/engine.h"
#include "kernels/kernels.h"

#define GPU_TEST_NAME "test_devices_gpu"
#include "tests/common/rng.h"
#include "tests/gpu/gpu_test.h"

long eng_dsa_stream_launches(void); /* engine_index.cu: the stream score kernel's launches so far */

#define MAX_DEVICES 8
#define THREADS_A_DEVICE 2

static uint64_t rng_state = 0x5DEECE66Dull;

/* ---- the inputs, made once on the host; every thread uploads them to its own device ---- */

/* An EXL3 matrix stack: n matrices of in x out at `bits` (random trellis words, as the EXL3
 * test's). */
typedef struct host_stack {
    int n, in, out, bits;
    size_t words; /* a matrix's */
    uint16_t *trellis, *suh, *svh;
} host_stack;

static uint16_t random_half(double scale)
{
    double v = scale * (0.5 + 0.5 * fabs(test_rng_uniform(&rng_state)));
    return exl3_f16_from_f64(test_rng_u32(&rng_state) & 1 ? -v : v);
}

static void stack_init(host_stack *s, int n, int in, int out, int bits)
{
    s->n = n;
    s->in = in;
    s->out = out;
    s->bits = bits;
    s->words = (size_t)in / 16 * (out / 16) * 16 * bits;
    s->trellis = xmalloc(s->words * n * 2);
    s->suh = xmalloc((size_t)n * in * 2);
    s->svh = xmalloc((size_t)n * out * 2);
    for (size_t i = 0; i < s->words * n; i++)
        s->trellis[i] = (uint16_t)test_rng_u32(&rng_state);
    for (size_t i = 0; i < (size_t)n * in; i++)
        s->suh[i] = random_half(1.0 / sqrt((double)in));
    for (size_t i = 0; i < (size_t)n * out; i++)
        s->svh[i] = random_half(1.0);
}

static float *random_floats(size_t n, float amp)
{
    float *h = xmalloc(n * sizeof *h);
    for (size_t i = 0; i < n; i++)
        h[i] = amp * test_rng_uniform(&rng_state);
    return h;
}

/* The calls, at shapes where each takes the device-dependent path:
 * - kern_exl3_matmul at 1 row (the GEMV's split from the SM count) and 33 (the prefill's);
 * - kern_exl3_grouped_product, pipe 128 at 8 bits: 57,344 bytes a block, past the default 48 KiB;
 * - kern_exl3_moe at 1 and 16 rows: a persistent grid of the resident blocks at two sizes, the
 *   second past the default 48 KiB (the hidden size's gate/up inputs);
 * - eng_mla_attend_prefill's flash kernel (64 heads: the opt-in form the device allows);
 * - eng_dsa_scores' stream kernel (fp8, 32 heads, 8 queries): its grid from the resident blocks. */
#define LIN_IN 1024
#define LIN_OUT 512
#define LIN_ROWS 33
#define GRP_E 4
#define GRP_IN 512
#define GRP_OUT 256
#define GRP_BITS 8
#define MOE_E 8
#define MOE_HIDDEN 4096 /* the model's: 16 rows ask 66,560 bytes a block, 1 row 8,320 */
#define MOE_INTER 256
#define MOE_SLOTS 8
#define MOE_ROWS 16
#define FL_ROWS 2048
#define FL_R 512
#define FL_H 64
#define FL_T 16
#define FL_WIDTH 256
#define IX_IH 32
#define IX_ID 128
#define IX_T 8
#define IX_KP 4
#define IX_FIRST 12000
#define IX_BUDGET 64
#define IX_POOLS ((IX_FIRST + IX_T) / IX_KP + 1)

static const int grp_offsets[GRP_E + 1] = {0, 130, 130, 194, 394}; /* an expert of none */
#define GRP_PAIRS 394

typedef struct inputs {
    host_stack lin, grp, gate, up, down;
    float *lin_x;
    uint16_t *grp_xh;
    float *moe_x, *moe_w;
    int32_t *moe_ids;
    float *fl_lat, *fl_qt;
    int32_t *fl_idx;
    int fl_count[FL_T];
    float *ix_keys, *ix_iq, *ix_hw;
} inputs;

static void inputs_init(inputs *in)
{
    stack_init(&in->lin, 1, LIN_IN, LIN_OUT, 4);
    in->lin_x = random_floats((size_t)LIN_ROWS * LIN_IN, 1.0f);
    stack_init(&in->grp, GRP_E, GRP_IN, GRP_OUT, GRP_BITS);
    in->grp_xh = xmalloc((size_t)GRP_PAIRS * GRP_IN * 2);
    for (size_t i = 0; i < (size_t)GRP_PAIRS * GRP_IN; i++)
        in->grp_xh[i] = random_half(1.0);
    stack_init(&in->gate, MOE_E, MOE_HIDDEN, MOE_INTER, 4);
    stack_init(&in->up, MOE_E, MOE_HIDDEN, MOE_INTER, 4);
    stack_init(&in->down, MOE_E, MOE_INTER, MOE_HIDDEN, 4);
    in->moe_x = random_floats((size_t)MOE_ROWS * MOE_HIDDEN, 1.0f);
    in->moe_ids = xmalloc((size_t)MOE_ROWS * MOE_SLOTS * sizeof(int32_t));
    in->moe_w = xmalloc((size_t)MOE_ROWS * MOE_SLOTS * sizeof(float));
    for (int r = 0; r < MOE_ROWS; r++) /* a row's experts distinct, as top-k's are */
        for (int s = 0; s < MOE_SLOTS; s++) {
            in->moe_ids[r * MOE_SLOTS + s] = (r + 3 * s) % MOE_E;
            in->moe_w[r * MOE_SLOTS + s] = 0.1f + 0.4f * fabsf(test_rng_uniform(&rng_state));
        }
    in->fl_lat = random_floats((size_t)FL_ROWS * FL_R, 2.0f);
    in->fl_qt = random_floats((size_t)FL_T * FL_H * FL_R, 0.05f);
    in->fl_idx = xmalloc((size_t)FL_T * FL_WIDTH * sizeof(int32_t));
    for (size_t i = 0; i < (size_t)FL_T * FL_WIDTH; i++)
        in->fl_idx[i] = (int32_t)(test_rng_u32(&rng_state) % FL_ROWS);
    for (int t = 0; t < FL_T; t++)
        in->fl_count[t] = FL_WIDTH - 7 * t;
    in->ix_keys = random_floats((size_t)IX_POOLS * IX_ID, 2.0f);
    in->ix_iq = random_floats((size_t)IX_T * IX_IH * IX_ID, 1.5f);
    in->ix_hw = random_floats((size_t)IX_T * IX_IH, 1.0f);
}

/* ---- one thread: a rank on its device ---- */

enum {
    OUT_MATMUL_1,
    OUT_MATMUL_33,
    OUT_GROUPED,
    OUT_MOE_1,
    OUT_MOE_16,
    OUT_FLASH,
    OUT_SCORES,
    N_OUT
};

static const char *const out_names[N_OUT] = {
    "kern_exl3_matmul 1 row",   "kern_exl3_matmul 33 rows", "kern_exl3_grouped_product p128",
    "kern_exl3_moe 1 row",      "kern_exl3_moe 16 rows",    "eng_mla_attend_prefill flash",
    "eng_dsa_scores stream",
};

static const size_t out_bytes[N_OUT] = {
    (size_t)1 * LIN_OUT * 4,
    (size_t)LIN_ROWS * LIN_OUT * 4,
    (size_t)GRP_PAIRS * GRP_OUT * 4,
    (size_t)1 * MOE_HIDDEN * 4,
    (size_t)MOE_ROWS * MOE_HIDDEN * 4,
    (size_t)FL_T * FL_H * FL_R * 4,
    (size_t)IX_T * IX_POOLS * 4,
};

typedef struct job {
    const inputs *in;
    pthread_barrier_t *start;
    int dev, slot;
    int failures;
    char first[256];  /* the first failure */
    int flash_taken;  /* eng_mla_attend_prefill_takes on this device */
    void *out[N_OUT]; /* host copies of the results */
} job;

static void fail(job *j, const char *what, int rc)
{
    if (j->failures++ == 0)
        snprintf(j->first, sizeof j->first, "%s: %s", what,
                 rc > 0 ? kern_error_string(rc) : "refused its arguments");
}

/* A device copy of bytes of src, or NULL (a failure of j). */
static void *upload(job *j, const void *src, size_t bytes)
{
    void *d = NULL;
    int rc = kern_malloc(&d, bytes);
    if (!rc && src)
        rc = kern_to_device(d, src, bytes);
    if (rc) {
        fail(j, "device memory", rc);
        kern_free(d);
        return NULL;
    }
    return d;
}

typedef struct dev_stack {
    void *trellis, *suh, *svh;
} dev_stack;

static int stack_upload(job *j, const host_stack *h, dev_stack *d)
{
    d->trellis = upload(j, h->trellis, h->words * h->n * 2);
    d->suh = upload(j, h->suh, (size_t)h->n * h->in * 2);
    d->svh = upload(j, h->svh, (size_t)h->n * h->out * 2);
    return d->trellis && d->suh && d->svh ? 0 : -1;
}

static void stack_free(dev_stack *d)
{
    kern_free(d->trellis);
    kern_free(d->suh);
    kern_free(d->svh);
}

/* The result in d (bytes of out k) to the host once the stream is done. */
static void keep(job *j, int k, const void *d, void *st)
{
    int rc = eng_stream_sync(st);
    if (!rc) {
        j->out[k] = xmalloc(out_bytes[k]);
        rc = kern_to_host(j->out[k], d, out_bytes[k]);
    }
    if (rc)
        fail(j, out_names[k], rc);
}

static void run_matmul(job *j, void *st)
{
    const inputs *in = j->in;
    dev_stack w;
    kern_exl3_linear l = {.in = LIN_IN, .out = LIN_OUT, .bits = 4, .codebook = 1};
    size_t work_bytes = kern_exl3_matmul_workspace(&l, LIN_ROWS);
    float *x = upload(j, in->lin_x, (size_t)LIN_ROWS * LIN_IN * 4);
    float *y = upload(j, NULL, out_bytes[OUT_MATMUL_33]);
    void *work = upload(j, NULL, work_bytes);
    if (!stack_upload(j, &in->lin, &w) && x && y && work) {
        l.trellis = w.trellis;
        l.suh = w.suh;
        l.svh = w.svh;
        static const int rows[2] = {1, LIN_ROWS}, outs[2] = {OUT_MATMUL_1, OUT_MATMUL_33};
        for (int i = 0; i < 2; i++) {
            int rc = kern_exl3_matmul(&l, x, y, rows[i], work, st);
            if (rc)
                fail(j, out_names[outs[i]], rc);
            else
                keep(j, outs[i], y, st);
        }
    }
    stack_free(&w);
    kern_free(x);
    kern_free(y);
    kern_free(work);
}

static void run_grouped(job *j, void *st)
{
    const inputs *in = j->in;
    dev_stack w;
    void *xh = upload(j, in->grp_xh, (size_t)GRP_PAIRS * GRP_IN * 2);
    int *offsets = upload(j, grp_offsets, sizeof grp_offsets);
    float *z = upload(j, NULL, out_bytes[OUT_GROUPED]);
    if (!stack_upload(j, &in->grp, &w) && xh && offsets && z) {
        int rc = kern_exl3_grouped_product(w.trellis, GRP_BITS, 0, GRP_IN, GRP_OUT, GRP_E, offsets,
                                           GRP_PAIRS, xh, z, st);
        if (rc)
            fail(j, out_names[OUT_GROUPED], rc);
        else
            keep(j, OUT_GROUPED, z, st);
    }
    stack_free(&w);
    kern_free(xh);
    kern_free(offsets);
    kern_free(z);
}

/* 1 row then 16 on a device's first thread, 16 then 1 on its second: the limit is raised from
 * either side while the other thread launches. */
static void run_moe(job *j, void *st)
{
    const inputs *in = j->in;
    dev_stack g, u, d;
    kern_exl3_experts ex = {.n_experts = MOE_E, .hidden = MOE_HIDDEN, .inter = MOE_INTER,
                            .bits = 4, .codebook = 2, .swiglu_limit = 10.0f};
    size_t work_bytes = kern_exl3_moe_workspace(&ex, MOE_ROWS, MOE_SLOTS);
    float *x = upload(j, in->moe_x, (size_t)MOE_ROWS * MOE_HIDDEN * 4);
    int32_t *ids = upload(j, in->moe_ids, (size_t)MOE_ROWS * MOE_SLOTS * 4);
    float *wts = upload(j, in->moe_w, (size_t)MOE_ROWS * MOE_SLOTS * 4);
    float *y = upload(j, NULL, out_bytes[OUT_MOE_16]);
    void *work = upload(j, NULL, work_bytes);
    int up_ok = !stack_upload(j, &in->gate, &g) & !stack_upload(j, &in->up, &u) &
                !stack_upload(j, &in->down, &d);
    int zeroed = work ? kern_memset(work, 0, work_bytes) : -1;
    if (work && zeroed)
        fail(j, "the MoE workspace's zeroing", zeroed);
    if (up_ok && x && ids && wts && y && !zeroed) {
        ex.gate_trellis = g.trellis;
        ex.gate_suh = g.suh;
        ex.gate_svh = g.svh;
        ex.up_trellis = u.trellis;
        ex.up_suh = u.suh;
        ex.up_svh = u.svh;
        ex.down_trellis = d.trellis;
        ex.down_suh = d.suh;
        ex.down_svh = d.svh;
        for (int i = 0; i < 2; i++) {
            int big = (i == 0) == (j->slot == 1);
            int rows = big ? MOE_ROWS : 1, k = big ? OUT_MOE_16 : OUT_MOE_1;
            int rc = kern_exl3_moe(&ex, x, ids, wts, y, rows, MOE_SLOTS, work, st);
            if (rc)
                fail(j, out_names[k], rc);
            else
                keep(j, k, y, st);
        }
    }
    stack_free(&g);
    stack_free(&u);
    stack_free(&d);
    kern_free(x);
    kern_free(ids);
    kern_free(wts);
    kern_free(y);
    kern_free(work);
}

static void run_flash(job *j, void *st)
{
    const inputs *in = j->in;
    eng_cache lat = {ENG_CACHE_BF16, FL_R, NULL, NULL};
    lat.rows = upload(j, NULL, (size_t)FL_ROWS * FL_R * 2 + 16);
    lat.scale = upload(j, NULL, (size_t)FL_ROWS * sizeof(float));
    float *src = upload(j, in->fl_lat, (size_t)FL_ROWS * FL_R * 4);
    float *qt = upload(j, in->fl_qt, (size_t)FL_T * FL_H * FL_R * 4);
    int32_t *idx = upload(j, in->fl_idx, (size_t)FL_T * FL_WIDTH * 4);
    int *count = upload(j, in->fl_count, sizeof in->fl_count);
    float *ot = upload(j, NULL, out_bytes[OUT_FLASH]);
    int zero = 0, *d_zero = upload(j, &zero, sizeof zero);
    if (lat.rows && lat.scale && src && qt && idx && count && ot && d_zero) {
        int rc = eng_cache_write(&lat, d_zero, src, FL_ROWS, st);
        j->flash_taken = eng_mla_attend_prefill_takes(&lat, FL_H, FL_R, qt, ot);
        if (!rc)
            rc = eng_mla_attend_prefill(&lat, qt, idx, count, FL_WIDTH, FL_T, FL_H, FL_R, 0.0625f,
                                        ot, st);
        if (rc)
            fail(j, out_names[OUT_FLASH], rc);
        else
            keep(j, OUT_FLASH, ot, st);
    }
    kern_free(lat.rows);
    kern_free(lat.scale);
    kern_free(src);
    kern_free(qt);
    kern_free(idx);
    kern_free(count);
    kern_free(ot);
    kern_free(d_zero);
}

static void run_scores(job *j, void *st)
{
    const inputs *in = j->in;
    eng_cache pool = {ENG_CACHE_FP8, IX_ID, NULL, NULL};
    pool.rows = upload(j, NULL, (size_t)IX_POOLS * IX_ID + 16);
    pool.scale = upload(j, NULL, (size_t)IX_POOLS * sizeof(float));
    float *src = upload(j, in->ix_keys, (size_t)IX_POOLS * IX_ID * 4);
    float *iq = upload(j, in->ix_iq, (size_t)IX_T * IX_IH * IX_ID * 4);
    float *hw = upload(j, in->ix_hw, (size_t)IX_T * IX_IH * 4);
    float *scores = upload(j, NULL, ENG_DSA_SCORE_FLOATS(IX_T, IX_POOLS) * sizeof(float));
    int zero = 0, *d_zero = upload(j, &zero, sizeof zero);
    if (pool.rows && pool.scale && src && iq && hw && scores && d_zero) {
        /* pools a row does not score keep these bits on every device */
        int rc = kern_memset(scores, 0x7f, out_bytes[OUT_SCORES]);
        if (!rc)
            rc = eng_cache_write(&pool, d_zero, src, IX_POOLS, st);
        if (!rc)
            rc = eng_dsa_scores(&pool, iq, NULL, hw, d_zero, IX_FIRST, IX_T, IX_IH, IX_ID, IX_KP,
                                IX_BUDGET, IX_POOLS, scores, st);
        if (rc)
            fail(j, out_names[OUT_SCORES], rc);
        else
            keep(j, OUT_SCORES, scores, st);
    }
    kern_free(pool.rows);
    kern_free(pool.scale);
    kern_free(src);
    kern_free(iq);
    kern_free(hw);
    kern_free(scores);
    kern_free(d_zero);
}

static void *job_main(void *arg)
{
    job *j = arg;
    cudaError_t set = cudaSetDevice(j->dev);
    void *st = NULL;
    int rc = set == cudaSuccess ? eng_stream_new(&st) : (int)set;
    pthread_barrier_wait(j->start); /* every thread's first launches at once */
    if (rc) {
        fail(j, "the device or its stream", rc);
        return NULL;
    }
    run_grouped(j, st);
    run_moe(j, st);
    run_flash(j, st);
    run_scores(j, st);
    run_matmul(j, st);
    eng_stream_free(st);
    return NULL;
}

/* The kernels' messages (a refused opt-in names the kernel and the device's limit). */
static void print_log(void *user, int level, const char *msg)
{
    (void)user;
    fprintf(stderr, "kernels (level %d): %s\n", level, msg);
}

/* ---- the comparison ---- */

/* Floats of out k that are not finite (a comparison of NaNs would say little). */
static size_t non_finite(const job *j, int k)
{
    const float *f = j->out[k];
    size_t n = 0;
    for (size_t i = 0; i < out_bytes[k] / 4; i++)
        n += !isfinite(f[i]);
    return n;
}

int main(void)
{
    int n = kern_device_count();
    if (n < 1) {
        fprintf(stderr, "%s: no CUDA device\n", GPU_TEST_NAME);
        return 1;
    }
    int devices = n < MAX_DEVICES ? n : MAX_DEVICES;
    char names[MAX_DEVICES][128];
    int sms[MAX_DEVICES];
    for (int d = 0; d < devices; d++) {
        CUDA_OK(kern_device_describe(d, names[d], sizeof names[d]));
        CUDA_OK((int)cudaDeviceGetAttribute(&sms[d], cudaDevAttrMultiProcessorCount, d));
        printf("device %d: %s, %d SMs\n", d, names[d], sms[d]);
    }
    if (n > devices)
        printf("devices past %d not run\n", MAX_DEVICES);
    kern_set_log(print_log, NULL);
    CUDA_OK(kern_exl3_set_grouped(KERN_EXL3_GROUPED_PIPE_128_ONCE));
    inputs in;
    inputs_init(&in);
    int jobs = devices * THREADS_A_DEVICE;
    job js[MAX_DEVICES * THREADS_A_DEVICE];
    pthread_t th[MAX_DEVICES * THREADS_A_DEVICE];
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, (unsigned)jobs);
    long launches = eng_dsa_stream_launches();
    memset(js, 0, sizeof js);
    for (int i = 0; i < jobs; i++) {
        js[i] = (job){.in = &in, .start = &start, .dev = i / THREADS_A_DEVICE,
                      .slot = i % THREADS_A_DEVICE};
        if (pthread_create(&th[i], NULL, job_main, &js[i])) {
            fprintf(stderr, "%s: no thread\n", GPU_TEST_NAME);
            return 1;
        }
    }
    for (int i = 0; i < jobs; i++)
        pthread_join(th[i], NULL);
    pthread_barrier_destroy(&start);
    int failures = 0;
    for (int i = 0; i < jobs; i++) {
        if (js[i].failures) {
            printf("FAIL: device %d thread %d: %d call(s) failed, first %s\n", js[i].dev,
                   js[i].slot, js[i].failures, js[i].first);
            failures++;
        }
        if (!js[i].flash_taken) {
            printf("FAIL: device %d thread %d: the flash kernel not taken (the launch this test "
                   "checks did not run)\n", js[i].dev, js[i].slot);
            failures++;
        }
    }
    long stream_runs = eng_dsa_stream_launches() - launches;
    if (stream_runs != jobs) {
        printf("FAIL: the stream score kernel ran %ld time(s) for %d calls\n", stream_runs, jobs);
        failures++;
    }
    /* each result against the first thread's on the first device of the same kind (same name
     * and SM count: grids from the SM count change a sum's order on another kind) */
    for (int k = 0; k < N_OUT; k++) {
        int compared = 0, differ = 0, kinds = 0;
        for (int i = 0; i < jobs; i++) {
            if (!js[i].out[k])
                continue;
            int ref = -1;
            for (int r = 0; r < i && ref < 0; r++)
                if (js[r].out[k] && !strcmp(names[js[r].dev], names[js[i].dev]) &&
                    sms[js[r].dev] == sms[js[i].dev])
                    ref = r;
            if (ref < 0) {
                kinds++;
                size_t bad = non_finite(&js[i], k);
                if (bad) {
                    printf("FAIL: %s on device %d: %zu values not finite\n", out_names[k],
                           js[i].dev, bad);
                    failures++;
                }
                continue;
            }
            compared++;
            if (memcmp(js[i].out[k], js[ref].out[k], out_bytes[k])) {
                printf("FAIL: %s: device %d thread %d differs from device %d thread %d\n",
                       out_names[k], js[i].dev, js[i].slot, js[ref].dev, js[ref].slot);
                differ++;
            }
        }
        failures += differ;
        printf("%-32s %d result(s) on %d device(s), %d compared: %s\n", out_names[k],
               compared + kinds, devices, compared,
               differ ? "DIFFER" : compared + kinds == jobs ? "same bits" : "some missing");
    }
    for (int i = 0; i < jobs; i++)
        for (int k = 0; k < N_OUT; k++)
            free(js[i].out[k]);
    if (devices < 2)
        printf("one device: its two threads checked; a second device's facts need a host with two\n");
    printf("%s: %d failure(s)\n", failures ? "FAIL" : "PASS", failures);
    return failures ? 1 : 0;
}
