/* test_decode_gpu.c: the decode step's kernels (T <= 8; the routing to 16) at GLM-5.3-Flash's
 * shapes: each against a reference (a double-precision CPU sum, or the GPU's unfused or scalar
 * kernels), each row of a many-row launch bit-equal to that row alone (the invariant verification
 * windows rely on), then their one-row times against the bytes they read; each launch that fuses
 * a sequence (router + routing, the shared expert's sum in the HC update, the DSA's row steps,
 * the KDA gates' second products in the step) bit for bit against that sequence, both timed in
 * CUDA graphs at one row; the latent attention (its MQA kernel) against a double sum and
 * eng_mla_attend, timed in graphs at 1, 4 and 8 rows. Usage: test_decode_gpu [--no-time]
 * [--attend] (--attend: the latent attention's checks alone); exit 1 on any failure. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/engine.h"
#include "kernels/kernels.h"
#include "model/numfmt.h"

#define GPU_TEST_NAME "test_decode_gpu"
#include "tests/gpu/gpu_test.h"
#include "tests/common/rng.h"

#define MAXT 8

static uint64_t rng_state = 0x2545f4914f6cdd1dull;
static int failures;

static float frand(void) /* [-1, 1) */
{
    return (float)((test_rng_next(&rng_state) >> 40) & 0xFFFFFF) / (float)0x800000 - 1.0f;
}

static float *host_random(size_t n, float amp)
{
    float *h = xmalloc(n * sizeof *h);
    for (size_t i = 0; i < n; i++)
        h[i] = amp * frand();
    return h;
}

/* A random matrix on the device (bf16 or f32) and its values on the host as float. */
typedef struct {
    eng_mat m;
    float *h;
} tmat;

static tmat make_mat(int dtype, int rows, int cols, float amp)
{
    tmat t;
    size_t n = (size_t)rows * cols;
    t.h = xmalloc(n * sizeof(float));
    memset(&t.m, 0, sizeof t.m);
    t.m.dtype = dtype, t.m.rows = rows, t.m.cols = cols;
    if (dtype == ENG_BF16) {
        uint16_t *b = xmalloc(n * sizeof *b);
        for (size_t i = 0; i < n; i++) {
            b[i] = numfmt_bf16_bits(amp * frand());
            t.h[i] = numfmt_bf16_value(b[i]);
        }
        t.m.data = dev_copy(b, n * sizeof *b);
        free(b);
    } else {
        for (size_t i = 0; i < n; i++)
            t.h[i] = amp * frand();
        t.m.data = dev_copy(t.h, n * sizeof(float));
    }
    return t;
}

/* A random f16 matrix on the device: normal values of magnitude 2^-9 to 2^-4 with random 10-bit
 * mantissas (each exact as a float on the host). */
static tmat make_mat_f16(int rows, int cols)
{
    tmat t;
    size_t n = (size_t)rows * cols;
    t.h = xmalloc(n * sizeof(float));
    memset(&t.m, 0, sizeof t.m);
    t.m.dtype = ENG_F16, t.m.rows = rows, t.m.cols = cols;
    uint16_t *b = xmalloc(n * sizeof *b);
    for (size_t i = 0; i < n; i++) {
        uint64_t r = test_rng_next(&rng_state);
        unsigned sign = (unsigned)(r >> 63), mant = (unsigned)(r >> 20) & 0x3ffu;
        unsigned ex = 6 + (unsigned)((r >> 40) % 6); /* biased exponent 6..11: 2^-9 .. 2^-4 */
        b[i] = (uint16_t)(sign << 15 | ex << 10 | mant);
        t.h[i] = (sign ? -1.0f : 1.0f) * ldexpf(1.0f + (float)mant / 1024.0f, (int)ex - 15);
    }
    t.m.data = dev_copy(b, n * sizeof *b);
    free(b);
    return t;
}

static void free_mat(tmat *t)
{
    kern_free((void *)t->m.data);
    free(t->h);
}

/* got against ref: finite, max |diff| <= tol * max |ref|. */
static void compare(const char *what, const float *got, const double *ref, size_t n, double tol)
{
    double m = 0, d = 0;
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        m = fmax(m, fabs(ref[i]));
        if (!isfinite(got[i]))
            bad++;
        else
            d = fmax(d, fabs(got[i] - ref[i]));
    }
    int ok = bad == 0 && d <= tol * (m > 0 ? m : 1);
    printf("%s %-58s max|diff| %.3g of max|ref| %.3g%s\n", ok ? "ok  " : "FAIL", what, d, m,
           bad ? " (non-finite values)" : "");
    failures += !ok;
}

static void compare_f(const char *what, const float *got, const float *ref, size_t n, double tol)
{
    double *r = xmalloc(n * sizeof *r);
    for (size_t i = 0; i < n; i++)
        r[i] = ref[i];
    compare(what, got, r, n, tol);
    free(r);
}

static void same_bits(const char *what, const void *a, const void *b, size_t bytes)
{
    int ok = memcmp(a, b, bytes) == 0;
    printf("%s %s\n", ok ? "ok  " : "FAIL", what);
    failures += !ok;
}

/* The device buffers bufs[0 .. k) of len[i] floats one after another in a new host buffer, once
 * every launch queued before is done. */
static float *host_concat(int k, float *const *bufs, const size_t *len)
{
    size_t total = 0;
    for (int i = 0; i < k; i++)
        total += len[i];
    float *o = xmalloc(total * sizeof *o), *p = o;
    CUDA_OK(kern_sync());
    for (int i = 0; i < k; i++) {
        CUDA_OK(kern_to_host(p, bufs[i], len[i] * sizeof *o));
        p += len[i];
    }
    return o;
}

/* ---- one matrix's product at a few rows (eng_matmul: the LM head and the output projections
 * of a verification window, whose rows compute as one-token steps do) -------------------- */

/* The window sizes timed (a verification window of k drafts has k + 1 rows). */
static const int timed_rows[] = {1, 2, 3, 4, MAXT};
#define N_TIMED ((int)(sizeof timed_rows / sizeof timed_rows[0]))

/* "R rows: US us (X the row)" for each timed size after the first, on one line. */
static void print_row_times(const double *us)
{
    for (int k = 1; k < N_TIMED; k++)
        printf("; %d rows: %7.1f us (%.2fx)", timed_rows[k], us[k], us[k] / us[0]);
    printf("\n");
}

/* The GEMV product to time: one matrix (eng_matmul) or a job (eng_matmul_jobs), of T rows. */
typedef struct {
    const eng_mat *w;
    const eng_gemv_job *job; /* NULL: eng_matmul of w */
    const float *x;
    float *y;
} gemv_call;

static void gemv_run(const gemv_call *c, int T)
{
    if (c->job)
        CUDA_OK(eng_matmul_jobs(c->job, 1, T, NULL));
    else
        CUDA_OK(eng_matmul(c->w, c->x, T, c->y, NULL));
}

/* us[k]: c's product at timed_rows[k] rows, us a launch (mean of 20 after one warm-up). */
static void time_gemv_rows(const gemv_call *c, void *ev0, void *ev1, double *us)
{
    int reps = 20;
    for (int k = 0; k < N_TIMED; k++) {
        float ms = 0;
        gemv_run(c, timed_rows[k]);
        CUDA_OK(eng_event_record(ev0, NULL));
        for (int i = 0; i < reps; i++)
            gemv_run(c, timed_rows[k]);
        CUDA_OK(eng_event_record(ev1, NULL));
        CUDA_OK(eng_event_ms(ev0, ev1, &ms));
        us[k] = ms * 1000.0 / reps;
    }
}

/* T = 2..8 rows of one launch bit-equal to one-row launches; timed at timed_rows. */
static void check_matmul_rows(const char *name, int rows, int cols, int timed, void *ev0, void *ev1)
{
    tmat w = make_mat(ENG_BF16, rows, cols, 0.05f);
    float *hx = host_random((size_t)MAXT * cols, 1.0f);
    float *x = dev_copy(hx, (size_t)MAXT * cols * sizeof(float));
    size_t yn = (size_t)MAXT * rows;
    float *yt = dev_alloc(yn * sizeof(float)), *y1 = dev_alloc(yn * sizeof(float));
    for (int t = 0; t < MAXT; t++)
        CUDA_OK(eng_matmul(&w.m, x + (size_t)t * cols, 1, y1 + (size_t)t * rows, NULL));
    float *g1 = to_host(y1, yn * sizeof(float));
    for (int T = 2; T <= MAXT; T++) {
        CUDA_OK(eng_matmul(&w.m, x, T, yt, NULL));
        float *gt = to_host(yt, (size_t)T * rows * sizeof(float));
        char what[160];
        snprintf(what, sizeof what, "matmul %s: a launch of %d rows equals one-row launches", name, T);
        same_bits(what, gt, g1, (size_t)T * rows * sizeof(float));
        free(gt);
    }
    if (timed) {
        double us[N_TIMED];
        gemv_call c = {&w.m, NULL, x, yt};
        time_gemv_rows(&c, ev0, ev1, us);
        double bytes = (double)rows * cols * 2;
        printf("time matmul %-32s 1 row: %8.1f us, %6.0f GB/s", name, us[0], bytes / (us[0] * 1e3));
        print_row_times(us);
    }
    free(hx);
    free(g1);
    kern_free(x);
    kern_free(yt);
    kern_free(y1);
    free_mat(&w);
}

/* ---- the GEMVs of several tokens at their edges: f16 weights, accumulation into y, several
 * plain jobs in one launch (each job's blocks), rows not a multiple of a warp's four with
 * several warps a row, and eng_matmul_rowwise past a launch's eight rows (its last group of
 * five) ------------------------------------------------------------------------------------- */

static void check_gemv_edges(void)
{
    enum { NJ = 3, TR = 13 };
    tmat w[NJ] = {make_mat_f16(1031, 1024), make_mat(ENG_BF16, 4096, 2048, 0.05f),
                  make_mat(ENG_BF16, 37, 200, 0.05f)};
    float *x[NJ], *y0[NJ];
    for (int k = 0; k < NJ; k++) {
        float *hx = host_random((size_t)TR * w[k].m.cols, 1.0f);
        x[k] = dev_copy(hx, (size_t)TR * w[k].m.cols * sizeof(float));
        free(hx);
        y0[k] = host_random((size_t)MAXT * w[k].m.rows, 1.0f);
    }
    for (int T = 1; T <= MAXT; T++)
        for (int acc = 0; acc <= 1; acc++) {
            float *ya[NJ], *yb[NJ];
            eng_gemv_job js[NJ];
            for (int k = 0; k < NJ; k++) {
                size_t bytes = (size_t)MAXT * w[k].m.rows * sizeof(float);
                ya[k] = dev_copy(y0[k], bytes);
                yb[k] = dev_copy(y0[k], bytes);
                js[k] = (eng_gemv_job){&w[k].m, NULL, x[k], ya[k], 0.0f, acc};
            }
            CUDA_OK(eng_matmul_jobs(js, NJ, T, NULL));
            for (int k = 0; k < NJ; k++)
                for (int t = 0; t < T; t++) {
                    eng_gemv_job j1 = {&w[k].m, NULL, x[k] + (size_t)t * w[k].m.cols,
                                       yb[k] + (size_t)t * w[k].m.rows, 0.0f, acc};
                    CUDA_OK(eng_matmul_jobs(&j1, 1, 1, NULL));
                }
            int ok = 1;
            for (int k = 0; k < NJ; k++) {
                size_t bytes = (size_t)MAXT * w[k].m.rows * sizeof(float);
                float *ga = to_host(ya[k], bytes), *gb = to_host(yb[k], bytes);
                ok &= memcmp(ga, gb, bytes) == 0; /* rows past T: y0 untouched in both */
                free(ga);
                free(gb);
                kern_free(ya[k]);
                kern_free(yb[k]);
            }
            printf("%s jobs f16 1031 x 1024 + bf16 4096 x 2048 + bf16 37 x 200 in one launch, %d "
                   "row(s)%s: equal one-row launches\n", ok ? "ok  " : "FAIL", T,
                   acc ? ", accumulating" : "");
            failures += !ok;
        }
    /* eng_matmul_rowwise of 13 rows (8 + 5) and eng_matmul of 3-8 rows, f16, against one row */
    size_t yn = (size_t)TR * w[0].m.rows;
    float *yr = dev_alloc(yn * sizeof(float)), *y1 = dev_alloc(yn * sizeof(float));
    for (int t = 0; t < TR; t++)
        CUDA_OK(eng_matmul(&w[0].m, x[0] + (size_t)t * w[0].m.cols, 1, y1 + (size_t)t * w[0].m.rows,
                           NULL));
    float *g1 = to_host(y1, yn * sizeof(float));
    static const int rowwise_T[] = {3, 4, 5, 6, 7, MAXT, TR};
    for (size_t i = 0; i < sizeof rowwise_T / sizeof *rowwise_T; i++) {
        int T = rowwise_T[i];
        CUDA_OK(eng_matmul_rowwise(&w[0].m, x[0], T, yr, NULL));
        float *gr = to_host(yr, (size_t)T * w[0].m.rows * sizeof(float));
        char what[160];
        snprintf(what, sizeof what, "matmul_rowwise f16 1031 x 1024, %d rows: equal one-row launches",
                 T);
        same_bits(what, gr, g1, (size_t)T * w[0].m.rows * sizeof(float));
        free(gr);
    }
    /* against a double sum (the f16 values exact on the host) */
    double *ref = xmalloc(yn * sizeof *ref);
    float *hx0 = to_host(x[0], (size_t)TR * w[0].m.cols * sizeof(float));
    for (int t = 0; t < TR; t++)
        for (int r = 0; r < w[0].m.rows; r++) {
            double a = 0;
            for (int c = 0; c < w[0].m.cols; c++)
                a += (double)w[0].h[(size_t)r * w[0].m.cols + c] * hx0[(size_t)t * w[0].m.cols + c];
            ref[(size_t)t * w[0].m.rows + r] = a;
        }
    compare("matmul f16 1031 x 1024 against a double sum", g1, ref, yn, 1e-5);
    free(ref);
    free(hx0);
    free(g1);
    kern_free(yr);
    kern_free(y1);
    for (int k = 0; k < NJ; k++) {
        kern_free(x[k]);
        free(y0[k]);
        free_mat(&w[k]);
    }
}

/* ---- the products of the decode step (eng_matmul_jobs) ----------------------------------- */

typedef struct {
    const char *name;
    int dtype, rows, cols, pair; /* pair: SwiGLU of two matrices */
} jshape;

static void check_job(const jshape *s, int timed, void *ev0, void *ev1)
{
    tmat w = make_mat(s->dtype, s->rows, s->cols, 0.05f), w2 = {0};
    if (s->pair)
        w2 = make_mat(s->dtype, s->rows, s->cols, 0.05f);
    float *hx = host_random((size_t)MAXT * s->cols, 1.0f);
    float *x = dev_copy(hx, (size_t)MAXT * s->cols * sizeof(float));
    size_t yn = (size_t)MAXT * s->rows;
    float *y8 = dev_alloc(yn * sizeof(float)), *y1 = dev_alloc(yn * sizeof(float));
    float limit = 10.0f;
    eng_gemv_job j = {&w.m, s->pair ? &w2.m : NULL, x, y8, limit, 0};
    CUDA_OK(eng_matmul_jobs(&j, 1, MAXT, NULL));
    for (int t = 0; t < MAXT; t++) { /* each row alone, and rows 0..2 as a launch of three */
        eng_gemv_job j1 = {
            &w.m, s->pair ? &w2.m : NULL, x + (size_t)t * s->cols, y1 + (size_t)t * s->rows, limit,
            0};
        CUDA_OK(eng_matmul_jobs(&j1, 1, 1, NULL));
    }
    float *g8 = to_host(y8, yn * sizeof(float)), *g1 = to_host(y1, yn * sizeof(float));
    char what[160];
    snprintf(what, sizeof what, "jobs %s: the 8 rows of one launch equal 8 one-row launches",
             s->name);
    same_bits(what, g8, g1, yn * sizeof(float));
    eng_gemv_job j3 = {&w.m, s->pair ? &w2.m : NULL, x, y1, limit, 0};
    CUDA_OK(eng_matmul_jobs(&j3, 1, 3, NULL));
    float *g3 = to_host(y1, (size_t)3 * s->rows * sizeof(float));
    snprintf(what, sizeof what, "jobs %s: a launch of 3 rows equals them in one of 8", s->name);
    same_bits(what, g3, g8, (size_t)3 * s->rows * sizeof(float));
    /* the double reference on every 5th row (the CPU's share of the time stays small) */
    size_t nref = 0;
    double *ref = xmalloc(yn * sizeof *ref);
    float *got = xmalloc(yn * sizeof *got);
    for (int t = 0; t < MAXT; t++)
        for (int r = t % 5; r < s->rows; r += 5) {
            const float *xr = hx + (size_t)t * s->cols;
            double a = 0, b = 0;
            for (int c = 0; c < s->cols; c++) {
                a += (double)w.h[(size_t)r * s->cols + c] * xr[c];
                if (s->pair)
                    b += (double)w2.h[(size_t)r * s->cols + c] * xr[c];
            }
            if (s->pair) {
                double g = fmin(a, limit), u = fmin(fmax(b, -limit), limit);
                a = g / (1.0 + exp(-g)) * u;
            }
            ref[nref] = a;
            got[nref++] = g8[(size_t)t * s->rows + r];
        }
    snprintf(what, sizeof what, "jobs %s: against a double sum", s->name);
    compare(what, got, ref, nref, 1e-5);
    if (timed) { /* a verification window's rows: the weights read once for all of them */
        double us[N_TIMED];
        eng_gemv_job jt = {&w.m, s->pair ? &w2.m : NULL, x, y8, limit, 0};
        gemv_call c = {&w.m, &jt, x, y8};
        time_gemv_rows(&c, ev0, ev1, us);
        double bytes =
            (double)s->rows * s->cols * (s->dtype == ENG_BF16 ? 2 : 4) * (s->pair ? 2 : 1);
        printf("time jobs %-34s 1 row: %8.1f us, %6.2f MB, %6.0f GB/s", s->name, us[0],
               bytes / 1e6, bytes / (us[0] * 1e3));
        print_row_times(us);
    }
    free(ref);
    free(got);
    free(g8);
    free(g1);
    free(g3);
    free(hx);
    kern_free(x);
    kern_free(y8);
    kern_free(y1);
    free_mat(&w);
    if (s->pair)
        free_mat(&w2);
}

/* ---- the absorbed query and the value expansion (eng_mla_absorb, eng_mla_expand) --------- */

/* kv_b bf16 (the vector kernels) or f32 (the scalar ones: absorb_kernel in column blocks within
 * the default 48 KiB of shared memory, as on an sm_121 Spark, kernels/LIMITS.md), at H heads of
 * R latent columns (GLM: 64, 512; R 576 leaves absorb_kernel a last block of 64 columns). */
static void check_mla(int dtype, int H, int R, int timed, void *ev0, void *ev1)
{
    int dn = 256, dv = 256;
    tmat kv = make_mat(dtype, H * (dn + dv), R, 0.05f);
    for (int k = 0; k < 2; k++) {
        int in = k ? R : dn, out = k ? dv : R;
        char name[64];
        snprintf(name, sizeof name, "%s%s", k ? "the value expansion" : "the absorbed query",
                 dtype == ENG_BF16 ? "" : R == 512 ? ", f32" : ", f32 R 576");
        size_t xn = (size_t)MAXT * H * in, yn = (size_t)MAXT * H * out;
        float *hx = host_random(xn, 1.0f);
        float *x = dev_copy(hx, xn * sizeof(float));
        float *y8 = dev_alloc(yn * sizeof(float)), *y1 = dev_alloc(yn * sizeof(float));
        if (k)
            CUDA_OK(eng_mla_expand(&kv.m, x, MAXT, H, dn, dv, R, y8, NULL));
        else
            CUDA_OK(eng_mla_absorb(&kv.m, x, MAXT, H, dn, dv, R, y8, NULL));
        for (int t = 0; t < MAXT; t++) {
            const float *xt = x + (size_t)t * H * in;
            float *yt = y1 + (size_t)t * H * out;
            if (k)
                CUDA_OK(eng_mla_expand(&kv.m, xt, 1, H, dn, dv, R, yt, NULL));
            else
                CUDA_OK(eng_mla_absorb(&kv.m, xt, 1, H, dn, dv, R, yt, NULL));
        }
        float *g8 = to_host(y8, yn * sizeof(float)), *g1 = to_host(y1, yn * sizeof(float));
        char what[160];
        snprintf(what, sizeof what, "%s: 8 rows in one launch equal 8 one-row launches", name);
        same_bits(what, g8, g1, yn * sizeof(float));
        double *ref = xmalloc(yn * sizeof *ref);
        for (int t = 0; t < MAXT; t++)
            for (int h = 0; h < H; h++)
                for (int o = 0; o < out; o++) {
                    double a = 0;
                    const float *xr = hx + ((size_t)t * H + h) * in;
                    for (int i = 0; i < in; i++) {
                        /* absorb: kv_b[h (dn+dv) + i][o]; expand: kv_b[h (dn+dv) + dn + o][i] */
                        size_t wi = k ? ((size_t)h * (dn + dv) + dn + o) * R + i
                                      : ((size_t)h * (dn + dv) + i) * R + o;
                        a += (double)kv.h[wi] * xr[i];
                    }
                    ref[((size_t)t * H + h) * out + o] = a;
                }
        snprintf(what, sizeof what, "%s: against a double sum", name);
        compare(what, g8, ref, yn, 1e-5);
        if (timed) {
            float ms = 0;
            int reps = 20;
            CUDA_OK(eng_event_record(ev0, NULL));
            for (int i = 0; i < reps; i++) {
                if (k)
                    CUDA_OK(eng_mla_expand(&kv.m, x, 1, H, dn, dv, R, y8, NULL));
                else
                    CUDA_OK(eng_mla_absorb(&kv.m, x, 1, H, dn, dv, R, y8, NULL));
            }
            CUDA_OK(eng_event_record(ev1, NULL));
            CUDA_OK(eng_event_ms(ev0, ev1, &ms));
            double us = ms * 1000.0 / reps,
                   bytes = (double)H * (k ? dv : dn) * R * (dtype == ENG_BF16 ? 2 : 4);
            printf("time %-39s 1 row: %8.1f us, %6.2f MB, %6.0f GB/s\n", name, us, bytes / 1e6,
                   bytes / (us * 1e3));
        }
        free(ref);
        free(g8);
        free(g1);
        free(hx);
        kern_free(x);
        kern_free(y8);
        kern_free(y1);
    }
    free_mat(&kv);
}

/* ---- the latent attention (eng_mla_attend_decode, its MQA kernel) ----------------------- */

static double graph_us_per(void (*body)(void *ctx, void *st), void *ctx, int reps, void *ev0,
                           void *ev1);

static double e4m3_value(uint8_t b)
{
    int e = (b >> 3) & 15, m = b & 7;
    double v = e == 0 ? m * ldexp(1.0, -9) : (1.0 + m / 8.0) * ldexp(1.0, e - 7);
    return b & 0x80 ? -v : v;
}

/* One case's inputs: a cache of `rows` rows (its values also on the host, in double), MAXT rows
 * of selections and queries. */
typedef struct {
    eng_cache c;
    double *vals; /* [rows][R]: the cache's values as the kernels read them */
    int rows, width, H, R;
    int32_t *hidx, *idx;
    int hcount[MAXT], *count;
    float *hq, *qt, scale;
} attend_case;

/* Selections of `rows` rows down by 37 a row (or, at H 64 and 1,091 rows, the last two 5 and
 * 40 rows), each in order with gaps; e4m3 bytes without the NaN codes and power-of-two row
 * scales, or bf16 values. */
static attend_case attend_case_new(int dtype, int H, int rows)
{
    attend_case a = {.rows = rows, .width = 2051, .H = H, .R = 512, .scale = 1.0f / 16.0f};
    int R = a.R, width = a.width;
    a.c = (eng_cache){dtype, R, NULL, NULL};
    size_t vals = (size_t)rows * R;
    a.vals = xmalloc(vals * sizeof *a.vals);
    if (dtype == ENG_CACHE_FP8) {
        uint8_t *b = xmalloc(vals);
        float *sc = xmalloc(rows * sizeof(float));
        for (int r = 0; r < rows; r++)
            sc[r] = ldexpf(1.0f, -6 - (r % 3));
        for (size_t i = 0; i < vals; i++) {
            b[i] = (uint8_t)((uint32_t)((frand() + 1.0f) * 8388608.0f) & 0xffu);
            if ((b[i] & 0x7fu) == 0x7fu) /* e4m3's NaNs: every other code, odd exponents too */
                b[i]--;
            a.vals[i] = e4m3_value(b[i]) * sc[i / R];
        }
        a.c.rows = dev_copy(b, vals);
        a.c.scale = dev_copy(sc, rows * sizeof(float));
        free(b);
        free(sc);
    } else {
        uint16_t *b = xmalloc(vals * sizeof *b);
        for (size_t i = 0; i < vals; i++) {
            b[i] = numfmt_bf16_bits(frand());
            a.vals[i] = numfmt_bf16_value(b[i]);
        }
        a.c.rows = dev_copy(b, vals * sizeof *b);
        free(b);
    }
    a.hidx = xmalloc((size_t)MAXT * width * sizeof *a.hidx);
    for (int t = 0; t < MAXT; t++) {
        a.hcount[t] = rows - 37 * t < width ? rows - 37 * t : width;
        if (H == 64 && rows < 2048 && t >= MAXT - 2)
            a.hcount[t] = t == MAXT - 1 ? 1 : 40; /* a short selection, and a single row */
        if (rows >= 2048 && t == 1) /* the whole width: the last slice holds its last rows */
            a.hcount[t] = width;
        for (int s = 0; s < a.hcount[t]; s++)
            a.hidx[(size_t)t * width + s] = (int32_t)((s * 7 + t) % rows);
    }
    a.idx = dev_copy(a.hidx, (size_t)MAXT * width * sizeof *a.hidx);
    a.count = dev_copy(a.hcount, sizeof a.hcount);
    size_t qn = (size_t)MAXT * H * R;
    a.hq = host_random(qn, 1.0f);
    a.qt = dev_copy(a.hq, qn * sizeof(float));
    return a;
}

static void attend_case_free(attend_case *a)
{
    free(a->vals), free(a->hidx), free(a->hq);
    kern_free(a->idx), kern_free(a->count), kern_free(a->qt), kern_free(a->c.rows);
    if (a->c.scale)
        kern_free(a->c.scale);
}

/* The attention of every row and head in double: [MAXT][H][R]. */
static double *attend_reference(const attend_case *a)
{
    int H = a->H, R = a->R;
    double *ref = xmalloc((size_t)MAXT * H * R * sizeof *ref), *sc = xmalloc(a->width * sizeof *sc);
    for (int t = 0; t < MAXT; t++)
        for (int h = 0; h < H; h++) {
            const float *q = a->hq + ((size_t)t * H + h) * R;
            const int32_t *sel = a->hidx + (size_t)t * a->width;
            int n = a->hcount[t];
            double mx = -INFINITY, l = 0;
            for (int s = 0; s < n; s++) {
                const double *v = a->vals + (size_t)sel[s] * R;
                double d = 0;
                for (int r = 0; r < R; r++)
                    d += q[r] * v[r];
                sc[s] = d * a->scale;
                mx = sc[s] > mx ? sc[s] : mx;
            }
            double *o = ref + ((size_t)t * H + h) * R;
            for (int r = 0; r < R; r++)
                o[r] = 0;
            for (int s = 0; s < n; s++) {
                const double *v = a->vals + (size_t)sel[s] * R;
                double p = exp(sc[s] - mx);
                l += p;
                for (int r = 0; r < R; r++)
                    o[r] += p * v[r];
            }
            for (int r = 0; r < R; r++)
                o[r] /= l;
        }
    free(sc);
    return ref;
}

typedef struct {
    const attend_case *a;
    int T;
    float *ot, *part;
} attend_args;

static void attend_launch(void *ctx, void *st)
{
    attend_args *x = ctx;
    const attend_case *a = x->a;
    CUDA_OK(eng_mla_attend_decode(&a->c, a->qt, a->idx, a->count, a->width, x->T, a->H, a->R,
                                  a->scale, x->ot, x->part, st));
}

/* The MQA kernel on one case: every output against the double reference and eng_mla_attend
 * (f32, scalar), rows of an 8-row launch and of a 4-row launch (rows 2-5) bit-equal to the rows
 * alone; then (timed) its us a call at 1, 4 and 8 rows in a CUDA graph. */
static void attend_mqa_case(const attend_case *a, const double *ref, const float *sref, int timed,
                            void *ev0, void *ev1)
{
    int H = a->H, R = a->R;
    const char *cname = a->c.dtype == ENG_CACHE_FP8 ? "fp8" : "bf16";
    size_t qn = (size_t)MAXT * H * R, row = (size_t)H * R;
    size_t pn = ENG_ATTEND_PART_FLOATS(H, R, a->width);
    float *o8 = dev_alloc(qn * sizeof(float)), *o1 = dev_alloc(qn * sizeof(float));
    float *o4 = dev_alloc(4 * row * sizeof(float)), *part = dev_alloc(pn * sizeof(float));
    char what[200];
    int takes = eng_mla_attend_decode_takes(&a->c, a->qt, o8, part, a->width, H, R);
    snprintf(what, sizeof what, "the latent attention (%s cache, H %d, %d rows): the MQA kernel "
             "runs (not eng_mla_attend)", cname, H, a->rows);
    printf("%s %s%s\n", takes ? "ok  " : "FAIL", what,
           takes ? "" : ": the launch would run eng_mla_attend");
    failures += !takes;
    CUDA_OK(kern_memset(o8, 0xff, qn * sizeof(float)));
    CUDA_OK(kern_memset(o1, 0xff, qn * sizeof(float)));
    CUDA_OK(kern_memset(o4, 0xff, 4 * row * sizeof(float)));
    CUDA_OK(kern_memset(part, 0xff, pn * sizeof(float)));
    CUDA_OK(eng_mla_attend_decode(&a->c, a->qt, a->idx, a->count, a->width, MAXT, H, R, a->scale,
                                  o8, part, NULL));
    for (int t = 0; t < MAXT; t++)
        CUDA_OK(eng_mla_attend_decode(&a->c, a->qt + t * row, a->idx + (size_t)t * a->width,
                                      a->count + t, a->width, 1, H, R, a->scale, o1 + t * row,
                                      part, NULL));
    CUDA_OK(eng_mla_attend_decode(&a->c, a->qt + 2 * row, a->idx + (size_t)2 * a->width,
                                  a->count + 2, a->width, 4, H, R, a->scale, o4, part, NULL));
    float *g8 = to_host(o8, qn * sizeof(float)), *g1 = to_host(o1, qn * sizeof(float));
    float *g4 = to_host(o4, 4 * row * sizeof(float));
    snprintf(what, sizeof what, "latent attention MQA (%s, H %d, %d rows): against a double sum",
             cname, H, a->rows);
    compare(what, g8, ref, qn, 1e-5);
    snprintf(what, sizeof what, "latent attention MQA (%s, H %d, %d rows): against eng_mla_attend",
             cname, H, a->rows);
    compare_f(what, g8, sref, qn, 1e-5);
    snprintf(what, sizeof what, "latent attention MQA (%s, H %d, %d rows): 8 rows in one launch "
             "equal 8 one-row launches", cname, H, a->rows);
    same_bits(what, g8, g1, qn * sizeof(float));
    snprintf(what, sizeof what, "latent attention MQA (%s, H %d, %d rows): rows 2-5 in one launch "
             "equal them alone", cname, H, a->rows);
    same_bits(what, g4, g1 + 2 * row, 4 * row * sizeof(float));
    if (timed) {
        static const int Ts[3] = {1, 4, MAXT};
        double us[3];
        for (int i = 0; i < 3; i++) {
            attend_args x = {a, Ts[i], o8, part};
            us[i] = graph_us_per(attend_launch, &x, 200, ev0, ev1);
        }
        double bytes = (double)a->hcount[0] * R * (a->c.dtype == ENG_CACHE_FP8 ? 1 : 2);
        printf("time the latent attention MQA (%s, H %d, %4d rows) 1 / 4 / 8 rows: %7.1f / %7.1f / "
               "%7.1f us (graph), %.2f MB of cache a row\n", cname, H, a->hcount[0], us[0],
               us[1], us[2], bytes / 1e6);
    }
    free(g8), free(g1), free(g4);
    kern_free(o8), kern_free(o1), kern_free(o4), kern_free(part);
}

/* One case: eng_mla_attend against the double sum, then the MQA kernel against both. */
static void check_attend(int dtype, int H, int rows, int timed, void *ev0, void *ev1)
{
    attend_case a = attend_case_new(dtype, H, rows);
    size_t qn = (size_t)MAXT * H * a.R;
    double *ref = attend_reference(&a);
    float *sref = dev_alloc(qn * sizeof(float));
    CUDA_OK(eng_mla_attend(&a.c, a.qt, a.idx, a.count, a.width, MAXT, H, a.R, a.scale, sref, NULL));
    float *hs = to_host(sref, qn * sizeof(float));
    char what[200];
    snprintf(what, sizeof what, "latent attention eng_mla_attend (%s, H %d, %d rows): against a "
             "double sum", dtype == ENG_CACHE_FP8 ? "fp8" : "bf16", H, rows);
    compare(what, hs, ref, qn, 1e-5);
    attend_mqa_case(&a, ref, hs, timed, ev0, ev1);
    free(ref), free(hs);
    kern_free(sref);
    attend_case_free(&a);
}

/* The real shapes: fp8 and bf16 caches, 1,091 and 2,048 rows, one rank's 64 heads and (fp8,
 * 1,091 rows) each of two ranks' 32. */
static void check_attends(int timed, void *ev0, void *ev1)
{
    check_attend(ENG_CACHE_FP8, 64, 1091, timed, ev0, ev1);
    check_attend(ENG_CACHE_BF16, 64, 1091, timed, ev0, ev1);
    check_attend(ENG_CACHE_FP8, 64, 2048, timed, ev0, ev1);
    check_attend(ENG_CACHE_BF16, 64, 2048, timed, ev0, ev1);
    check_attend(ENG_CACHE_FP8, 32, 1091, timed, ev0, ev1);
}

/* ---- the HC step (eng_hc_fn_partial, eng_hc_collapse_norm, eng_hc_sinkhorn) against the unfused ops */

static void check_hc(int timed, void *ev0, void *ev1)
{
    int S = 4, D = 4096, mix = (2 + S) * S, iters = 20, splits = eng_hc_splits(S, D);
    float hc_eps = 1e-6f, rms_eps = 1e-5f;
    tmat fn = make_mat(ENG_BF16, mix, S * D, 0.05f);
    size_t xn = (size_t)MAXT * S * D;
    float *hX = host_random(xn, 1.0f), *hy = host_random((size_t)MAXT * D, 1.0f);
    float *hbase = host_random((size_t)mix, 0.5f), *hnorm = host_random((size_t)D, 1.0f);
    float hscale[3] = {0.7f, 0.9f, 1.1f};
    float *hpost = host_random((size_t)MAXT * S, 1.0f),
          *hcomb = host_random((size_t)MAXT * S * S, 0.5f);
    float *base = dev_copy(hbase, mix * sizeof(float)), *scale = dev_copy(hscale, sizeof hscale);
    float *norm = dev_copy(hnorm, D * sizeof(float)),
          *y = dev_copy(hy, (size_t)MAXT * D * sizeof(float));
    float *post_in = dev_copy(hpost, (size_t)MAXT * S * sizeof(float));
    float *comb_in = dev_copy(hcomb, (size_t)MAXT * S * S * sizeof(float));
    size_t pn = (size_t)MAXT * splits * (mix + 1);
    float *part = dev_alloc(pn * sizeof(float));
    float *pre = dev_alloc((size_t)MAXT * S * sizeof(float)),
          *post = dev_alloc((size_t)MAXT * S * sizeof(float));
    float *comb = dev_alloc((size_t)MAXT * S * S * sizeof(float)),
          *u = dev_alloc((size_t)MAXT * D * sizeof(float));
    float *X = dev_alloc(xn * sizeof(float));
    /* outputs per form: X after the update, pre, post, comb, u */
    size_t on = xn + (size_t)MAXT * (2 * S + S * S + D);
    float *outs[5] = {X, pre, post, comb, u};
    size_t len[5] = {xn, (size_t)MAXT * S, (size_t)MAXT * S, (size_t)MAXT * S * S,
                     (size_t)MAXT * D};
    float *out[3];
    for (int form = 0; form < 3; form++) { /* 0: 8 rows at once, 1: one row a launch, 2: unfused */
        CUDA_OK(kern_to_device(X, hX, xn * sizeof(float)));
        if (form == 0) {
            CUDA_OK(eng_hc_fn_partial(&fn.m, X, MAXT, S, D, y, NULL, post_in, comb_in, part, NULL));
            CUDA_OK(eng_hc_collapse_norm(part, mix, X, base, scale, norm, MAXT, S, D, hc_eps,
                                         rms_eps, pre, u, NULL));
            CUDA_OK(eng_hc_sinkhorn(part, mix, base, scale, MAXT, S, D, iters, hc_eps, rms_eps,
                                    post, comb, NULL));
        } else if (form == 1) {
            for (int t = 0; t < MAXT; t++) {
                float *Xt = X + (size_t)t * S * D;
                CUDA_OK(eng_hc_fn_partial(&fn.m, Xt, 1, S, D, y + (size_t)t * D, NULL,
                                          post_in + t * S, comb_in + (size_t)t * S * S, part,
                                          NULL));
                CUDA_OK(eng_hc_collapse_norm(part, mix, Xt, base, scale, norm, 1, S, D, hc_eps,
                                             rms_eps, pre + t * S, u + (size_t)t * D, NULL));
                CUDA_OK(eng_hc_sinkhorn(part, mix, base, scale, 1, S, D, iters, hc_eps, rms_eps,
                                        post + t * S, comb + (size_t)t * S * S, NULL));
            }
        } else { /* the prefill path's ops: update, norm, product, mix, collapse, norm */
            float *flat = dev_alloc(xn * sizeof(float)),
                  *mu = dev_alloc((size_t)MAXT * mix * sizeof(float));
            float *c = dev_alloc((size_t)MAXT * D * sizeof(float));
            CUDA_OK(eng_hc_post(X, y, NULL, post_in, comb_in, MAXT, S, D, NULL));
            CUDA_OK(eng_rmsnorm(flat, X, NULL, MAXT, S * D, rms_eps, NULL));
            CUDA_OK(eng_matmul(&fn.m, flat, MAXT, mu, NULL));
            CUDA_OK(eng_hc_mix(mu, base, scale, MAXT, S, iters, hc_eps, pre, post, comb, NULL));
            CUDA_OK(eng_hc_collapse(X, pre, MAXT, S, D, c, NULL));
            CUDA_OK(eng_rmsnorm(u, c, norm, MAXT, D, rms_eps, NULL));
            CUDA_OK(kern_sync());
            kern_free(flat);
            kern_free(mu);
            kern_free(c);
        }
        out[form] = host_concat(5, outs, len);
    }
    same_bits("the HC step: 8 rows in one launch equal 8 one-row launches (X, pre, post, comb, u)",
              out[0], out[1], on * sizeof(float));
    const char *part_name[5] = {"the updated streams", "pre", "post", "comb",
                                "u (collapsed, normed)"};
    size_t off = 0;
    for (int k = 0; k < 5; k++) {
        char what[160];
        snprintf(what, sizeof what, "the HC step's %s against the unfused ops", part_name[k]);
        compare_f(what, out[0] + off, out[2] + off, len[k], 1e-4);
        off += len[k];
    }
    if (timed) {
        float ms[2] = {0, 0};
        int reps = 20;
        for (int k = 0; k < 2; k++) {
            CUDA_OK(eng_event_record(ev0, NULL));
            for (int i = 0; i < reps; i++) {
                if (k == 0)
                    CUDA_OK(eng_hc_fn_partial(&fn.m, X, 1, S, D, y, NULL, post_in, comb_in, part,
                                              NULL));
                else
                    CUDA_OK(eng_hc_collapse_norm(part, mix, X, base, scale, norm, 1, S, D, hc_eps,
                                                 rms_eps, pre, u, NULL));
            }
            CUDA_OK(eng_event_record(ev1, NULL));
            CUDA_OK(eng_event_ms(ev0, ev1, &ms[k]));
        }
        printf("time the HC update with the next mixing product 1 row: %8.1f us (%.2f MB)\n",
               ms[0] * 1000.0 / reps, ((double)mix * S * D * 2 + 2.0 * S * D * 4) / 1e6);
        printf("time the HC collapse and norm               1 row: %8.1f us\n",
               ms[1] * 1000.0 / reps);
    }
    for (int form = 0; form < 3; form++)
        free(out[form]);
    free(hX), free(hy), free(hbase), free(hnorm), free(hpost), free(hcomb);
    kern_free(base), kern_free(scale), kern_free(norm), kern_free(y), kern_free(post_in);
    kern_free(comb_in), kern_free(part), kern_free(pre), kern_free(post), kern_free(comb);
    kern_free(u), kern_free(X);
    free_mat(&fn);
}

/* ---- the decode MoE's shared-expert sum in the HC update (eng_hc_fn_partial's and
 * eng_hc_post's y2) against eng_add and then the update --------------------------------------- */

/* us a repetition of body(ctx, stream): reps of it captured in one graph, replayed twice (the
 * first warms up), the second timed. */
static double graph_us_per(void (*body)(void *ctx, void *st), void *ctx, int reps, void *ev0,
                           void *ev1)
{
    void *st, *graph;
    CUDA_OK(eng_stream_new(&st));
    CUDA_OK(eng_capture_begin(st));
    for (int i = 0; i < reps; i++)
        body(ctx, st);
    CUDA_OK(eng_capture_end(st, &graph));
    float ms = 0;
    for (int pass = 0; pass < 2; pass++) {
        CUDA_OK(eng_event_record(ev0, st));
        CUDA_OK(eng_graph_launch(graph, st));
        CUDA_OK(eng_event_record(ev1, st));
        CUDA_OK(eng_event_ms(ev0, ev1, &ms));
    }
    eng_graph_free(graph);
    CUDA_OK(eng_stream_sync(st));
    eng_stream_free(st);
    return ms * 1000.0 / reps;
}

typedef struct {
    const eng_mat *fn;
    float *X, *y, *y2, *post, *comb, *part;
    int T, S, D;
} hc_y2_args;

static void hc_sum_then_update(void *ctx, void *st) /* the former sequence: two launches */
{
    hc_y2_args *a = ctx;
    CUDA_OK(eng_add(a->y, a->y2, (size_t)a->T * a->D, st));
    CUDA_OK(eng_hc_fn_partial(a->fn, a->X, a->T, a->S, a->D, a->y, NULL, a->post, a->comb,
                              a->part, st));
}

static void hc_update_with_sum(void *ctx, void *st) /* the fused launch */
{
    hc_y2_args *a = ctx;
    CUDA_OK(eng_hc_fn_partial(a->fn, a->X, a->T, a->S, a->D, a->y, a->y2, a->post, a->comb,
                              a->part, st));
}

/* T rows: X, the parts, and the collapse's and mix's outputs after eng_add + the update against
 * the update with y2, bit for bit; then eng_hc_post the same way. */
static void check_hc_y2_rows(int T, int timed, void *ev0, void *ev1)
{
    int S = 4, D = 4096, mix = (2 + S) * S, iters = 20, splits = eng_hc_splits(S, D);
    float hc_eps = 1e-6f, rms_eps = 1e-5f;
    tmat fn = make_mat(ENG_BF16, mix, S * D, 0.05f);
    size_t xn = (size_t)T * S * D, yn = (size_t)T * D, pn = (size_t)T * splits * (mix + 1);
    float *hX = host_random(xn, 1.0f), *hy = host_random(yn, 1.0f), *hy2 = host_random(yn, 1.0f);
    float *hbase = host_random((size_t)mix, 0.5f), *hnorm = host_random((size_t)D, 1.0f);
    float hscale[3] = {0.7f, 0.9f, 1.1f};
    float *hpost = host_random((size_t)T * S, 1.0f), *hcomb = host_random((size_t)T * S * S, 0.5f);
    float *base = dev_copy(hbase, mix * sizeof(float)), *scale = dev_copy(hscale, sizeof hscale);
    float *norm = dev_copy(hnorm, D * sizeof(float)), *y2 = dev_copy(hy2, yn * sizeof(float));
    float *post_in = dev_copy(hpost, (size_t)T * S * sizeof(float));
    float *comb_in = dev_copy(hcomb, (size_t)T * S * S * sizeof(float));
    float *y = dev_alloc(yn * sizeof(float)), *X = dev_alloc(xn * sizeof(float));
    float *part = dev_alloc(pn * sizeof(float)), *u = dev_alloc(yn * sizeof(float));
    float *pre = dev_alloc((size_t)T * S * sizeof(float));
    float *post = dev_alloc((size_t)T * S * sizeof(float));
    float *comb = dev_alloc((size_t)T * S * S * sizeof(float));
    size_t on = xn + pn + yn + (size_t)T * (2 * S + S * S);
    float *outs[6] = {X, part, u, pre, post, comb};
    size_t len[6] = {xn, pn, yn, (size_t)T * S, (size_t)T * S, (size_t)T * S * S};
    float *out[4];
    for (int form = 0; form < 4; form++) { /* 0: add, update; 1: with y2; 2, 3: eng_hc_post */
        CUDA_OK(kern_to_device(X, hX, xn * sizeof(float)));
        CUDA_OK(kern_to_device(y, hy, yn * sizeof(float)));
        CUDA_OK(kern_memset(part, 0, pn * sizeof(float)));
        if (form == 0 || form == 2)
            CUDA_OK(eng_add(y, y2, yn, NULL));
        if (form < 2) {
            CUDA_OK(eng_hc_fn_partial(&fn.m, X, T, S, D, y, form ? y2 : NULL, post_in, comb_in,
                                      part, NULL));
            CUDA_OK(eng_hc_collapse_norm(part, mix, X, base, scale, norm, T, S, D, hc_eps, rms_eps,
                                         pre, u, NULL));
            CUDA_OK(eng_hc_sinkhorn(part, mix, base, scale, T, S, D, iters, hc_eps, rms_eps, post,
                                    comb, NULL));
        } else {
            CUDA_OK(eng_hc_post(X, y, form == 3 ? y2 : NULL, post_in, comb_in, T, S, D, NULL));
        }
        out[form] = host_concat(6, outs, len);
    }
    char what[200];
    snprintf(what, sizeof what, "the HC update with the shared expert's part (y2), %d rows: X, "
             "parts, u, pre, post, comb equal eng_add then the update", T);
    same_bits(what, out[0], out[1], on * sizeof(float));
    snprintf(what, sizeof what, "eng_hc_post with y2, %d rows: X equals eng_add then eng_hc_post",
             T);
    same_bits(what, out[2], out[3], xn * sizeof(float));
    if (timed) {
        hc_y2_args a = {&fn.m, X, y, y2, post_in, comb_in, part, T, S, D};
        enum { REPS = 100 };
        double two = graph_us_per(hc_sum_then_update, &a, REPS, ev0, ev1);
        double one = graph_us_per(hc_update_with_sum, &a, REPS, ev0, ev1);
        printf("time the shared expert's sum + HC update, %d row(s), in a graph: eng_add then the "
               "update %.2f us, the update with y2 %.2f us (%.2f us saved)\n", T, two, one,
               two - one);
    }
    for (int form = 0; form < 4; form++)
        free(out[form]);
    free(hX), free(hy), free(hy2), free(hbase), free(hnorm), free(hpost), free(hcomb);
    kern_free(base), kern_free(scale), kern_free(norm), kern_free(y2), kern_free(post_in);
    kern_free(comb_in), kern_free(y), kern_free(X), kern_free(part), kern_free(u);
    kern_free(pre), kern_free(post), kern_free(comb);
    free_mat(&fn);
}

static void check_hc_y2(int timed, void *ev0, void *ev1)
{
    check_hc_y2_rows(1, timed, ev0, ev1);
    check_hc_y2_rows(MAXT, 0, ev0, ev1);
    check_hc_y2_rows(3, 0, ev0, ev1);
}

/* ---- the DSA's new cache rows: a norm and its cache writes in one launch
 * (eng_rmsnorm_cache_write, eng_index_keys_write) against the norm and eng_cache_write --------- */

enum { CACHE_ROWS = 16, CACHE_POS = 5 }; /* rows of a test cache; where the written rows start */

static size_t cache_elem(int dtype)
{
    return dtype == ENG_CACHE_F32 ? 4 : dtype == ENG_CACHE_BF16 ? 2 : 1;
}

static eng_cache make_cache(int dtype, int width) /* zeroed, its scales too */
{
    eng_cache c = {dtype, width, NULL, NULL};
    size_t bytes = (size_t)CACHE_ROWS * width * cache_elem(dtype);
    c.rows = dev_alloc(bytes);
    CUDA_OK(kern_memset(c.rows, 0, bytes));
    if (dtype == ENG_CACHE_FP8) {
        c.scale = dev_alloc(CACHE_ROWS * sizeof(float));
        CUDA_OK(kern_memset(c.scale, 0, CACHE_ROWS * sizeof(float)));
    }
    return c;
}

static void free_cache(eng_cache *c)
{
    kern_free(c->rows);
    kern_free(c->scale);
}

/* a and b (rows and scales) hold the same bytes */
static int same_cache(const eng_cache *a, const eng_cache *b)
{
    size_t bytes = (size_t)CACHE_ROWS * a->width * cache_elem(a->dtype);
    unsigned char *ha = to_host(a->rows, bytes), *hb = to_host(b->rows, bytes);
    int same = memcmp(ha, hb, bytes) == 0;
    free(ha), free(hb);
    if (same && a->dtype == ENG_CACHE_FP8) {
        float *sa = to_host(a->scale, CACHE_ROWS * sizeof(float));
        float *sb = to_host(b->scale, CACHE_ROWS * sizeof(float));
        same = memcmp(sa, sb, CACHE_ROWS * sizeof(float)) == 0;
        free(sa), free(sb);
    }
    return same;
}

typedef struct {
    float *x, *w, *b, *g;
    eng_cache *c, *g_cache;
    const int *pos;
    int T, width;
} norm_cache_args;

static void latent_two_launches(void *ctx, void *st)
{
    norm_cache_args *a = ctx;
    CUDA_OK(eng_rmsnorm(a->x, a->x, a->w, a->T, a->width, 1e-5f, st));
    CUDA_OK(eng_cache_write(a->c, a->pos, a->x, a->T, st));
}

static void latent_one_launch(void *ctx, void *st)
{
    norm_cache_args *a = ctx;
    CUDA_OK(eng_rmsnorm_cache_write(a->x, a->w, a->T, 1e-5f, a->c, a->pos, st));
}

static void keys_three_launches(void *ctx, void *st)
{
    norm_cache_args *a = ctx;
    CUDA_OK(eng_layernorm(a->x, a->x, a->w, a->b, a->T, a->width, 1e-6f, st));
    CUDA_OK(eng_cache_write(a->c, a->pos, a->x, a->T, st));
    CUDA_OK(eng_cache_write(a->g_cache, a->pos, a->g, a->T, st));
}

static void keys_one_launch(void *ctx, void *st)
{
    norm_cache_args *a = ctx;
    CUDA_OK(eng_index_keys_write(a->x, a->w, a->b, 1e-6f, a->c, a->g, a->g_cache, a->pos, a->T,
                                 st));
}

/* One cache dtype, row width and row count: the latent's norm and write (keys 0) or the
 * indexer's key norm and key and gate writes (keys 1), fused against separate, bit for bit: the
 * normed rows left in x and every cache byte. */
static void norm_cache_case(int keys, int dtype, int width, int T, int timed, void *ev0, void *ev1)
{
    size_t xn = (size_t)T * width;
    float *hx = host_random(xn, 3.0f), *hg = host_random(xn, 2.0f);
    float *hw = host_random((size_t)width, 1.0f), *hb = host_random((size_t)width, 0.5f);
    int hpos = CACHE_POS;
    int *pos = dev_copy(&hpos, sizeof hpos);
    float *w = dev_copy(hw, width * sizeof(float)), *b = dev_copy(hb, width * sizeof(float));
    float *g = dev_copy(hg, xn * sizeof(float));
    eng_cache c[2] = {make_cache(dtype, width), make_cache(dtype, width)};
    eng_cache gc[2] = {make_cache(dtype, width), make_cache(dtype, width)};
    float *x[2] = {dev_copy(hx, xn * sizeof(float)), dev_copy(hx, xn * sizeof(float))};
    norm_cache_args a[2];
    for (int k = 0; k < 2; k++) {
        a[k] = (norm_cache_args){x[k], w, b, g, &c[k], &gc[k], pos, T, width};
        if (keys)
            (k ? keys_one_launch : keys_three_launches)(&a[k], NULL);
        else
            (k ? latent_one_launch : latent_two_launches)(&a[k], NULL);
    }
    float *hx0 = to_host(x[0], xn * sizeof(float)), *hx1 = to_host(x[1], xn * sizeof(float));
    int same = memcmp(hx0, hx1, xn * sizeof(float)) == 0 && same_cache(&c[0], &c[1]) &&
               (!keys || same_cache(&gc[0], &gc[1]));
    printf("%s %s, %s cache, width %d, %d row(s): one launch equals the %s bit for bit "
           "(normed rows, cache rows%s)\n", same ? "ok  " : "FAIL",
           keys ? "the indexer's key norm and key/gate writes" : "the kv_a norm and latent write",
           cache_name(dtype), width, T, keys ? "norm and two writes" : "norm and the write",
           dtype == ENG_CACHE_FP8 ? " and scales" : "");
    failures += !same;
    if (timed) {
        enum { REPS = 200 };
        double sep = graph_us_per(keys ? keys_three_launches : latent_two_launches, &a[0], REPS,
                                  ev0, ev1);
        double one = graph_us_per(keys ? keys_one_launch : latent_one_launch, &a[1], REPS, ev0,
                                  ev1);
        printf("time %s, %s cache, %d row(s), in a graph: separate %.2f us, one launch %.2f us "
               "(%.2f us saved)\n", keys ? "the indexer's new rows" : "the latent's new row",
               cache_name(dtype), T, sep, one, sep - one);
    }
    free(hx), free(hg), free(hw), free(hb), free(hx0), free(hx1);
    kern_free(pos), kern_free(w), kern_free(b), kern_free(g), kern_free(x[0]), kern_free(x[1]);
    for (int k = 0; k < 2; k++)
        free_cache(&c[k]), free_cache(&gc[k]);
}

static void check_norm_cache(int timed, void *ev0, void *ev1)
{
    static const int dtypes[] = {ENG_CACHE_FP8, ENG_CACHE_BF16, ENG_CACHE_F32};
    static const int rows[] = {1, 3, MAXT};
    for (int d = 0; d < 3; d++)
        for (int r = 0; r < 3; r++) {
            int t1 = timed && d == 0 && r == 0;
            norm_cache_case(0, dtypes[d], 512, rows[r], t1, ev0, ev1); /* the latent: R 512 */
            norm_cache_case(0, dtypes[d], 1024, rows[r], 0, ev0, ev1); /* 1024 threads a row */
            norm_cache_case(0, dtypes[d], 37, rows[r], 0, ev0, ev1);   /* no 16-byte loads */
            norm_cache_case(1, dtypes[d], 128, rows[r], t1, ev0, ev1); /* the indexer: 128 */
            norm_cache_case(1, dtypes[d], 200, rows[r], 0, ev0, ev1);
        }
}

/* The DSA decode's row steps (eng_dsa_rows_write) against their launches one by one: q_a's norm,
 * the kv_a norm and latent write, the key norm and the key and gate writes. */
typedef struct {
    eng_dsa_rows r;
    const int *pos;
    int T;
} dsa_rows_args;

static void dsa_rows_separate(void *ctx, void *st)
{
    dsa_rows_args *a = ctx;
    const eng_dsa_rows *r = &a->r;
    CUDA_OK(eng_rmsnorm(r->qa, r->qa, r->qa_norm, a->T, r->qa_width, r->eps, st));
    CUDA_OK(eng_rmsnorm(r->kv, r->kv, r->kv_norm, a->T, r->latent.width, r->eps, st));
    CUDA_OK(eng_cache_write(&r->latent, a->pos, r->kv, a->T, st));
    if (!r->key)
        return;
    CUDA_OK(eng_layernorm(r->key, r->key, r->key_w, r->key_b, a->T, r->keys.width, r->key_eps,
                          st));
    CUDA_OK(eng_cache_write(&r->keys, a->pos, r->key, a->T, st));
    CUDA_OK(eng_cache_write(&r->gates, a->pos, r->gate, a->T, st));
}

static void dsa_rows_one(void *ctx, void *st)
{
    dsa_rows_args *a = ctx;
    CUDA_OK(eng_dsa_rows_write(&a->r, a->pos, a->T, st));
}

static void dsa_rows_case(int dtype, int qr, int R, int ID, int T, int timed, void *ev0,
                          void *ev1)
{
    int hpos = CACHE_POS;
    int *pos = dev_copy(&hpos, sizeof hpos);
    float *hqa = host_random((size_t)T * qr, 2.0f), *hkv = host_random((size_t)T * R, 2.0f);
    float *hk = ID ? host_random((size_t)T * ID, 2.0f) : NULL;
    float *hg = ID ? host_random((size_t)T * ID, 2.0f) : NULL;
    float *hn[4] = {host_random((size_t)qr, 1.0f), host_random((size_t)R, 1.0f),
                    ID ? host_random((size_t)ID, 1.0f) : NULL,
                    ID ? host_random((size_t)ID, 0.5f) : NULL};
    float *qn = dev_copy(hn[0], qr * sizeof(float)), *kvn = dev_copy(hn[1], R * sizeof(float));
    float *kw = ID ? dev_copy(hn[2], ID * sizeof(float)) : NULL;
    float *kb = ID ? dev_copy(hn[3], ID * sizeof(float)) : NULL;
    float *gate = ID ? dev_copy(hg, (size_t)T * ID * sizeof(float)) : NULL;
    dsa_rows_args a[2];
    for (int k = 0; k < 2; k++) {
        eng_dsa_rows r = {dev_copy(hqa, (size_t)T * qr * sizeof(float)), qn, qr,
                          dev_copy(hkv, (size_t)T * R * sizeof(float)), kvn,
                          make_cache(dtype, R),
                          ID ? dev_copy(hk, (size_t)T * ID * sizeof(float)) : NULL, kw, kb,
                          {0, 0, NULL, NULL}, gate, {0, 0, NULL, NULL}, 1e-5f, 1e-6f};
        if (ID) {
            r.keys = make_cache(dtype, ID);
            r.gates = make_cache(dtype, ID);
        }
        a[k] = (dsa_rows_args){r, pos, T};
        (k ? dsa_rows_one : dsa_rows_separate)(&a[k], NULL);
    }
    float *q0 = to_host(a[0].r.qa, (size_t)T * qr * 4);
    float *q1 = to_host(a[1].r.qa, (size_t)T * qr * 4);
    float *v0 = to_host(a[0].r.kv, (size_t)T * R * 4), *v1 = to_host(a[1].r.kv, (size_t)T * R * 4);
    int same = memcmp(q0, q1, (size_t)T * qr * 4) == 0 && memcmp(v0, v1, (size_t)T * R * 4) == 0 &&
               same_cache(&a[0].r.latent, &a[1].r.latent);
    if (ID) {
        float *k0 = to_host(a[0].r.key, (size_t)T * ID * 4);
        float *k1 = to_host(a[1].r.key, (size_t)T * ID * 4);
        same = same && memcmp(k0, k1, (size_t)T * ID * 4) == 0 &&
               same_cache(&a[0].r.keys, &a[1].r.keys) && same_cache(&a[0].r.gates, &a[1].r.gates);
        free(k0), free(k1);
    }
    printf("%s the DSA row steps in one launch, %s caches, q_a %d, latent %d, %s, %d row(s): "
           "equal the %d launches bit for bit\n", same ? "ok  " : "FAIL", cache_name(dtype), qr, R,
           ID ? "indexer keys" : "no indexer", T, ID ? 6 : 3);
    failures += !same;
    if (timed) {
        enum { REPS = 200 };
        double sep = graph_us_per(dsa_rows_separate, &a[0], REPS, ev0, ev1);
        double one = graph_us_per(dsa_rows_one, &a[1], REPS, ev0, ev1);
        printf("time the DSA row steps, %s caches, %d row(s), in a graph: %d launches %.2f us, "
               "one launch %.2f us (%.2f us saved)\n", cache_name(dtype), T, ID ? 6 : 3, sep, one,
               sep - one);
    }
    for (int k = 0; k < 2; k++) {
        kern_free(a[k].r.qa), kern_free(a[k].r.kv), kern_free(a[k].r.key);
        free_cache(&a[k].r.latent);
        if (ID)
            free_cache(&a[k].r.keys), free_cache(&a[k].r.gates);
    }
    free(q0), free(q1), free(v0), free(v1), free(hqa), free(hkv), free(hk), free(hg);
    for (int i = 0; i < 4; i++)
        free(hn[i]);
    kern_free(pos), kern_free(qn), kern_free(kvn), kern_free(kw), kern_free(kb), kern_free(gate);
}

static void check_dsa_rows(int timed, void *ev0, void *ev1)
{
    static const int dtypes[] = {ENG_CACHE_FP8, ENG_CACHE_BF16, ENG_CACHE_F32};
    static const int rows[] = {1, 3, MAXT};
    for (int d = 0; d < 3; d++)
        for (int r = 0; r < 3; r++) {
            int t1 = timed && d == 0 && r == 0;
            dsa_rows_case(dtypes[d], 1536, 512, 128, rows[r], t1, ev0, ev1); /* the model's */
            dsa_rows_case(dtypes[d], 1536, 512, 0, rows[r], 0, ev0, ev1);    /* no indexer */
            dsa_rows_case(dtypes[d], 37, 100, 200, rows[r], 0, ev0, ev1);    /* odd, 256 threads */
            dsa_rows_case(dtypes[d], 2048, 1024, 64, rows[r], 0, ev0, ev1);  /* 1024 a row */
        }
}

/* ---- the KDA step (eng_kda_step_decode) against its two launches ------------------------- */

static void check_kda_shape(int H, int dk, int K, int timed, void *ev0, void *ev1)
{
    int C = H * dk;
    float eps = 1e-5f, qscale = 1.0f / sqrtf((float)dk), lb = -5.0f;
    size_t in_n = (size_t)MAXT * C, st_n = (size_t)(K - 1) * 3 * C, S_n = (size_t)H * dk * dk;
    float *hq = host_random(in_n, 1.0f), *hk = host_random(in_n, 1.0f), *hv = host_random(in_n, 1.0f);
    float *hg = host_random(in_n, 1.0f), *hb = host_random((size_t)MAXT * H, 1.0f);
    float *hgate = host_random(in_n, 1.0f), *hw = host_random((size_t)dk, 1.0f);
    float *hst = host_random(st_n, 1.0f), *hS = host_random(S_n, 0.1f);
    float *hqw = host_random((size_t)C * K, 0.5f), *hkw = host_random((size_t)C * K, 0.5f);
    float *hvw = host_random((size_t)C * K, 0.5f), *hA = host_random((size_t)H, 0.5f);
    float *hdt = host_random((size_t)C, 0.5f);
    float *q = dev_copy(hq, in_n * 4), *k = dev_copy(hk, in_n * 4), *v = dev_copy(hv, in_n * 4);
    float *gate = dev_copy(hgate, in_n * 4), *w = dev_copy(hw, (size_t)dk * 4);
    float *qw = dev_copy(hqw, (size_t)C * K * 4), *kw = dev_copy(hkw, (size_t)C * K * 4);
    float *vw = dev_copy(hvw, (size_t)C * K * 4), *A = dev_copy(hA, (size_t)H * 4);
    float *dt = dev_copy(hdt, (size_t)C * 4);
    float *g = dev_alloc(in_n * 4), *beta = dev_alloc((size_t)MAXT * H * 4);
    float *st = dev_alloc(st_n * 4), *S = dev_alloc(S_n * 4), *o = dev_alloc(in_n * 4);
    float *qc = dev_alloc(in_n * 4), *kc = dev_alloc(in_n * 4), *vc = dev_alloc(in_n * 4);
    float *trail = dev_alloc((size_t)MAXT * S_n * 4);
    /* outputs per form: o, the state, the conv state, the trail */
    size_t on = in_n + S_n + st_n + (size_t)MAXT * S_n;
    float *out[3];
    for (int lbf = 0; lbf < 2; lbf++) { /* without and with the gates' lower bound */
        for (int form = 0; form < 3; form++) { /* 0: two launches, 1: one, 2: one a row */
            CUDA_OK(kern_to_device(g, hg, in_n * 4));
            CUDA_OK(kern_to_device(beta, hb, (size_t)MAXT * H * 4));
            CUDA_OK(kern_to_device(st, hst, st_n * 4));
            CUDA_OK(kern_to_device(S, hS, S_n * 4));
            CUDA_OK(kern_memset(o, 0xff, in_n * 4)); /* poisoned: NaN */
            CUDA_OK(kern_memset(trail, 0xff, (size_t)MAXT * S_n * 4));
            if (form == 0) {
                CUDA_OK(eng_kda_prep_decode(q, k, v, st, qw, kw, vw, MAXT, H, dk, K, qscale, qc,
                                            kc, vc, g, beta, A, dt, lbf, lb, NULL));
                CUDA_OK(eng_kda_scan_norm(S, qc, kc, vc, g, beta, MAXT, H, dk, o, trail, gate, w,
                                          eps, NULL));
            } else if (form == 1) {
                CUDA_OK(eng_kda_step_decode(q, k, v, st, qw, kw, vw, MAXT, H, dk, K, qscale, g,
                                            beta, A, dt, lbf, lb, S, o, trail, gate, w, eps, NULL,
                                            NULL));
            } else {
                for (int t = 0; t < MAXT; t++) {
                    size_t r = (size_t)t * C;
                    CUDA_OK(eng_kda_step_decode(q + r, k + r, v + r, st, qw, kw, vw, 1, H, dk, K,
                                                qscale, g + r, beta + (size_t)t * H, A, dt, lbf,
                                                lb, S, o + r, trail + (size_t)t * S_n, gate + r, w,
                                                eps, NULL, NULL));
                }
            }
            float *h = xmalloc(on * 4), *p = h;
            CUDA_OK(kern_sync());
            CUDA_OK(kern_to_host(p, o, in_n * 4));
            CUDA_OK(kern_to_host(p += in_n, S, S_n * 4));
            CUDA_OK(kern_to_host(p += S_n, st, st_n * 4));
            CUDA_OK(kern_to_host(p += st_n, trail, (size_t)MAXT * S_n * 4));
            out[form] = h;
        }
        size_t nonfinite = 0;
        for (size_t i = 0; i < on; i++)
            nonfinite += !isfinite(out[1][i]);
        printf("%s the KDA step (%d heads of %d, %d taps, lower bound %s): every output written "
               "and finite (%zu not)\n", nonfinite ? "FAIL" : "ok  ", H, dk, K, lbf ? "on" : "off",
               nonfinite);
        failures += nonfinite != 0;
        char what[160];
        snprintf(what, sizeof what, "the one-launch KDA step (%d heads of %d, %d taps) equals the "
                 "two launches, 8 rows (lower bound %s; o, state, conv state, trail)", H, dk, K,
                 lbf ? "on" : "off");
        same_bits(what, out[1], out[0], on * 4);
        snprintf(what, sizeof what, "the one-launch KDA step (%d heads of %d, %d taps): 8 rows equal "
                 "8 one-row calls (lower bound %s)", H, dk, K, lbf ? "on" : "off");
        same_bits(what, out[2], out[1], on * 4);
        for (int form = 0; form < 3; form++)
            free(out[form]);
    }
    if (timed) {
        float ms[2] = {0, 0};
        int reps = 20;
        for (int f = 0; f < 2; f++) {
            CUDA_OK(eng_event_record(ev0, NULL));
            for (int i = 0; i < reps; i++) {
                if (f == 0) {
                    CUDA_OK(eng_kda_prep_decode(q, k, v, st, qw, kw, vw, 1, H, dk, K, qscale, qc,
                                                kc, vc, g, beta, A, dt, 0, lb, NULL));
                    CUDA_OK(eng_kda_scan_norm(S, qc, kc, vc, g, beta, 1, H, dk, o, NULL, gate, w,
                                              eps, NULL));
                } else {
                    CUDA_OK(eng_kda_step_decode(q, k, v, st, qw, kw, vw, 1, H, dk, K, qscale, g,
                                                beta, A, dt, 0, lb, S, o, NULL, gate, w, eps, NULL,
                                                NULL));
                }
            }
            CUDA_OK(eng_event_record(ev1, NULL));
            CUDA_OK(eng_event_ms(ev0, ev1, &ms[f]));
        }
        printf("time the KDA prep + delta rule, 2 launches  1 row: %8.1f us\n", ms[0] * 1000.0 / reps);
        printf("time the KDA step, one launch               1 row: %8.1f us\n", ms[1] * 1000.0 / reps);
    }
    free(hq), free(hk), free(hv), free(hg), free(hb), free(hgate), free(hw), free(hst), free(hS);
    free(hqw), free(hkw), free(hvw), free(hA), free(hdt);
    kern_free(q), kern_free(k), kern_free(v), kern_free(gate), kern_free(w), kern_free(qw);
    kern_free(kw), kern_free(vw), kern_free(A), kern_free(dt), kern_free(g), kern_free(beta);
    kern_free(st), kern_free(S), kern_free(o), kern_free(qc), kern_free(kc), kern_free(vc);
    kern_free(trail);
}

/* The KDA step with the gates' second products folded in (eng_kda_lowrank) against
 * eng_matmul_jobs' two products and then the step, T rows: o, the state, the conv state and the
 * trail bit for bit; timed at one row in graphs. R: the low rank (the products' columns). */
typedef struct {
    eng_kda_lowrank lr;
    const float *q, *k, *v, *qw, *kw, *vw, *A, *dt, *beta, *w;
    float *st, *S, *o, *g, *gate;
    int T, H, dk, K, fold;
} kda_fold_args;

static void kda_fold_run(void *ctx, void *stream)
{
    kda_fold_args *a = ctx;
    float qscale = 1.0f / sqrtf((float)a->dk);
    if (!a->fold) {
        eng_gemv_job j[2] = {{a->lr.f_b, NULL, a->lr.lo_f, a->g, 0.0f, 0},
                             {a->lr.g_b, NULL, a->lr.lo_g, a->gate, 0.0f, 0}};
        CUDA_OK(eng_matmul_jobs(j, 2, a->T, stream));
    }
    CUDA_OK(eng_kda_step_decode(a->q, a->k, a->v, a->st, a->qw, a->kw, a->vw, a->T, a->H, a->dk,
                                a->K, qscale, a->fold ? NULL : a->g, a->beta, a->A, a->dt, 0, 0.0f,
                                a->S, a->o, NULL, a->fold ? NULL : a->gate, a->w, 1e-5f,
                                a->fold ? &a->lr : NULL, stream));
}

static void check_kda_fold_rows(int H, int dk, int K, int R, int T, int timed, void *ev0,
                                void *ev1)
{
    int C = H * dk;
    size_t in_n = (size_t)T * C, st_n = (size_t)(K - 1) * 3 * C, S_n = (size_t)H * dk * dk;
    tmat fb = make_mat(ENG_BF16, C, R, 0.1f), gb = make_mat(ENG_BF16, C, R, 0.1f);
    float *hlo = host_random((size_t)2 * T * R, 1.0f), *hin = host_random(3 * in_n, 1.0f);
    float *hst = host_random(st_n, 1.0f), *hS = host_random(S_n, 0.1f);
    float *htaps = host_random((size_t)3 * C * K, 0.5f), *hb = host_random((size_t)T * H, 1.0f);
    float *hA = host_random((size_t)H, 0.5f), *hdt = host_random((size_t)C, 0.5f);
    float *hw = host_random((size_t)dk, 1.0f);
    float *lo = dev_copy(hlo, (size_t)2 * T * R * 4), *in = dev_copy(hin, 3 * in_n * 4);
    float *taps = dev_copy(htaps, (size_t)3 * C * K * 4), *beta = dev_copy(hb, (size_t)T * H * 4);
    float *A = dev_copy(hA, (size_t)H * 4), *dt = dev_copy(hdt, (size_t)C * 4);
    float *w = dev_copy(hw, (size_t)dk * 4);
    kda_fold_args a[2];
    float *out[2];
    size_t on = in_n + S_n + st_n;
    for (int f = 0; f < 2; f++) {
        a[f] = (kda_fold_args){{&fb.m, &gb.m, lo, lo + (size_t)T * R}, in, in + in_n,
                               in + 2 * in_n, taps, taps + (size_t)C * K, taps + (size_t)2 * C * K,
                               A, dt, beta, w, dev_copy(hst, st_n * 4), dev_copy(hS, S_n * 4),
                               dev_alloc(in_n * 4), dev_alloc(in_n * 4), dev_alloc(in_n * 4), T, H,
                               dk, K, f};
        if (f && !eng_kda_lowrank_takes(&a[f].lr, T, H, dk)) {
            printf("FAIL the KDA step with f_b/g_b folded in (%d heads of %d, rank %d): refused\n",
                   H, dk, R);
            failures++;
            return;
        }
        kda_fold_run(&a[f], NULL);
        float *h = xmalloc(on * 4);
        CUDA_OK(kern_sync());
        CUDA_OK(kern_to_host(h, a[f].o, in_n * 4));
        CUDA_OK(kern_to_host(h + in_n, a[f].S, S_n * 4));
        CUDA_OK(kern_to_host(h + in_n + S_n, a[f].st, st_n * 4));
        out[f] = h;
    }
    char what[200];
    snprintf(what, sizeof what, "the KDA step with f_b/g_b folded in (%d heads of %d, %d taps, "
             "rank %d), %d row(s): equals the products then the step (o, state, conv state)", H, dk,
             K, R, T);
    same_bits(what, out[1], out[0], on * 4);
    if (timed) {
        enum { REPS = 100 };
        double two = graph_us_per(kda_fold_run, &a[0], REPS, ev0, ev1);
        double one = graph_us_per(kda_fold_run, &a[1], REPS, ev0, ev1);
        printf("time the KDA gates' second products + step, %d row(s), in a graph: 2 launches "
               "%.2f us, folded %.2f us (%.2f us saved)\n", T, two, one, two - one);
    }
    for (int f = 0; f < 2; f++) {
        free(out[f]);
        kern_free(a[f].st), kern_free(a[f].S), kern_free(a[f].o), kern_free(a[f].g);
        kern_free(a[f].gate);
    }
    free(hlo), free(hin), free(hst), free(hS), free(htaps), free(hb), free(hA), free(hdt), free(hw);
    kern_free(lo), kern_free(in), kern_free(taps), kern_free(beta), kern_free(A), kern_free(dt);
    kern_free(w);
    free_mat(&fb), free_mat(&gb);
}

static void check_kda_fold(int timed, void *ev0, void *ev1)
{
    static const int rows[] = {1, 2, 3, MAXT}; /* 1-2: eng_matmul_jobs' skinny rows; 3-8: plain */
    for (int r = 0; r < 4; r++) {
        check_kda_fold_rows(64, 128, 4, 128, rows[r], timed && r == 0, ev0, ev1); /* the model's */
        check_kda_fold_rows(8, 96, 8, 64, rows[r], 0, ev0, ev1);
        check_kda_fold_rows(4, 40, 2, 200, rows[r], 0, ev0, ev1);
    }
}

/* GLM-5.3-Flash's shape (timed), then heads that fill a block's columns only in part, the most
 * taps, and the fewest with a conv state. */
static void check_kda(int timed, void *ev0, void *ev1)
{
    check_kda_shape(64, 128, 4, timed, ev0, ev1);
    check_kda_shape(8, 96, 8, 0, ev0, ev1);
    check_kda_shape(4, 40, 2, 0, ev0, ev1);
}

/* ---- the final norm (eng_stream_mean_norm): the streams' mean, RMS-normed ----------------- */

static void check_mean_norm(int timed, void *ev0, void *ev1)
{
    int S = 4, D = 4096;
    float eps = 1e-5f;
    size_t xn = (size_t)MAXT * S * D;
    float *hX = host_random(xn, 1.0f), *hw = host_random((size_t)D, 1.0f);
    float *X = dev_copy(hX, xn * sizeof(float)), *w = dev_copy(hw, D * sizeof(float));
    float *h8 = dev_alloc((size_t)MAXT * D * sizeof(float));
    float *h1 = dev_alloc((size_t)MAXT * D * sizeof(float));
    CUDA_OK(eng_stream_mean_norm(h8, X, w, MAXT, S, D, eps, NULL));
    for (int t = 0; t < MAXT; t++)
        CUDA_OK(
            eng_stream_mean_norm(h1 + (size_t)t * D, X + (size_t)t * S * D, w, 1, S, D, eps, NULL));
    float *g8 = to_host(h8, (size_t)MAXT * D * sizeof(float));
    float *g1 = to_host(h1, (size_t)MAXT * D * sizeof(float));
    same_bits("the final norm: 8 rows in one launch equal 8 one-row launches", g8, g1,
              (size_t)MAXT * D * sizeof(float));
    double *ref = xmalloc((size_t)MAXT * D * sizeof *ref);
    for (int t = 0; t < MAXT; t++) {
        double ss = 0;
        for (int d = 0; d < D; d++) {
            double m = 0;
            for (int k = 0; k < S; k++)
                m += hX[((size_t)t * S + k) * D + d];
            m /= S;
            ref[(size_t)t * D + d] = m;
            ss += m * m;
        }
        double inv = 1.0 / sqrt(ss / D + eps);
        for (int d = 0; d < D; d++)
            ref[(size_t)t * D + d] *= inv * hw[d];
    }
    compare("the final norm: against a double sum", g8, ref, (size_t)MAXT * D, 1e-5);
    if (timed) {
        float ms = 0;
        int reps = 20;
        CUDA_OK(eng_event_record(ev0, NULL));
        for (int i = 0; i < reps; i++)
            CUDA_OK(eng_stream_mean_norm(h8, X, w, 1, S, D, eps, NULL));
        CUDA_OK(eng_event_record(ev1, NULL));
        CUDA_OK(eng_event_ms(ev0, ev1, &ms));
        printf("time the final norm (4 streams x 4096)      1 row: %8.1f us\n", ms * 1000.0 / reps);
    }
    free(hX), free(hw), free(g8), free(g1), free(ref);
    kern_free(X), kern_free(w), kern_free(h8), kern_free(h1);
}

/* ---- the routing (eng_route): top-8 of 288, one group ------------------------------------ */

enum { ROUTE_E = 288, ROUTE_K = 8, ROUTE_MAXT = 16 }; /* the real shape; rows at most */

/* The CPU's picks (cpu_route with one group): sigmoid + bias, the best untaken K times, ties to
 * the lower index; weights normalised by their sum in pick order, times scaling. */
static void route_reference(const float *hl, const float *hb, int E, int K, int t, float scaling,
                            int *pick, double *pw)
{
    unsigned char taken[ROUTE_E] = {0}; /* E <= ROUTE_E */
    double sum = 0;
    for (int k = 0; k < K; k++) {
        int b = -1;
        double bv = 0;
        for (int e = 0; e < E; e++) {
            double p = 1.0 / (1.0 + exp(-(double)hl[(size_t)t * E + e]));
            double c = (float)p + hb[e];
            if (!taken[e] && (b < 0 || c > bv))
                b = e, bv = c;
        }
        taken[b] = 1;
        pick[k] = b;
        pw[k] = 1.0 / (1.0 + exp(-(double)hl[(size_t)t * E + b]));
        sum += pw[k];
    }
    for (int k = 0; k < K; k++)
        pw[k] = pw[k] / sum * scaling;
}

/* Logits and bias for a routing case: random, or drawn from four values each so that many
 * experts tie exactly on their choice (the lower index must win). */
static void route_inputs(int ties, int E, float *hl, float *hb)
{
    for (size_t i = 0; i < (size_t)ROUTE_MAXT * E; i++)
        hl[i] = ties ? 0.5f * (float)(test_rng_next(&rng_state) % 4) : 3.0f * frand();
    for (int e = 0; e < E; e++)
        hb[e] = ties ? 0.03125f * (float)(test_rng_next(&rng_state) % 4) : 0.1f * frand();
}

static const char *route_name(int kernel)
{
    if (kernel == ENG_ROUTE_WARP)
        return "warp a row";
    return kernel == ENG_ROUTE_RANK ? "rank" : "eng_route";
}

/* One kernel (or eng_route itself, kernel -1) on T rows: its picks against the CPU's, each row
 * equal to that row launched alone, ids and weights returned for the kernels' comparison. */
static void route_case(int kernel, int ties, int E, int K, int T, const float *hl,
                       const float *hb, const float *lg, const float *bias, float *scratch,
                       int32_t **gi_out, float **gw_out)
{
    float scaling = 2.5f;
    size_t n = (size_t)T * K;
    int32_t *ids = dev_alloc(n * sizeof(int32_t)), *ids1 = dev_alloc(n * sizeof(int32_t));
    float *w = dev_alloc(n * sizeof(float)), *w1 = dev_alloc(n * sizeof(float));
    if (kernel < 0)
        CUDA_OK(eng_route(lg, bias, T, E, 1, 1, K, 1, scaling, scratch, ids, w, NULL));
    else
        CUDA_OK(eng_route_with(kernel, lg, bias, T, E, 1, 1, K, 1, scaling, scratch,
                               ids, w, NULL));
    for (int t = 0; t < T; t++)
        if (kernel < 0)
            CUDA_OK(eng_route(lg + (size_t)t * E, bias, 1, E, 1, 1, K, 1,
                              scaling, scratch, ids1 + t * K, w1 + t * K, NULL));
        else
            CUDA_OK(eng_route_with(kernel, lg + (size_t)t * E, bias, 1, E, 1, 1,
                                   K, 1, scaling, scratch, ids1 + t * K,
                                   w1 + t * K, NULL));
    int32_t *gi = to_host(ids, n * sizeof(int32_t)), *gi1 = to_host(ids1, n * sizeof(int32_t));
    float *gw = to_host(w, n * sizeof(float)), *gw1 = to_host(w1, n * sizeof(float));
    int bad = 0;
    double wd = 0;
    for (int t = 0; t < T; t++) {
        int pick[32]; /* K <= 32 */
        double pw[32];
        route_reference(hl, hb, E, K, t, scaling, pick, pw);
        for (int k = 0; k < K; k++) {
            bad += gi[t * K + k] != pick[k];
            wd = fmax(wd, fabs(gw[t * K + k] - pw[k]));
        }
    }
    int ok = bad == 0 && wd < 1e-5;
    printf("%s the routing (%s, top-%d of %d, %s logits, %2d rows): picks as the CPU's (%d "
           "differ), weights max|diff| %.3g\n",
           ok ? "ok  " : "FAIL", route_name(kernel), K, E, ties ? "tied" : "random", T, bad, wd);
    failures += !ok;
    char what[160];
    snprintf(what, sizeof what, "the routing (%s, top-%d of %d, %s logits): %d rows in one "
             "launch equal %d one-row launches", route_name(kernel), K, E, ties ? "tied" : "random",
             T, T);
    int same = memcmp(gi, gi1, n * sizeof(int32_t)) == 0 && memcmp(gw, gw1, n * sizeof(float)) == 0;
    printf("%s %s\n", same ? "ok  " : "FAIL", what);
    failures += !same;
    *gi_out = gi, *gw_out = gw;
    free(gi1), free(gw1);
    kern_free(ids), kern_free(ids1), kern_free(w), kern_free(w1);
}

/* us a call of one routing kernel on T rows: reps launches one after another (eager), and the
 * same reps captured in a graph and replayed (the decode step's way). */
static void route_time(int kernel, int T, const float *lg, const float *bias, float *scratch,
                       void *ev0, void *ev1)
{
    enum { REPS = 200 };
    int32_t *ids = dev_alloc((size_t)T * ROUTE_K * sizeof(int32_t));
    float *w = dev_alloc((size_t)T * ROUTE_K * sizeof(float));
    void *st, *graph;
    CUDA_OK(eng_stream_new(&st));
    float eager = 0, graphed = 0;
    for (int pass = 0; pass < 2; pass++) { /* the first warms up */
        CUDA_OK(eng_event_record(ev0, st));
        for (int i = 0; i < REPS; i++)
            CUDA_OK(eng_route_with(kernel, lg, bias, T, ROUTE_E, 1, 1, ROUTE_K, 1, 2.5f, scratch,
                                   ids, w, st));
        CUDA_OK(eng_event_record(ev1, st));
        CUDA_OK(eng_event_ms(ev0, ev1, &eager));
    }
    CUDA_OK(eng_capture_begin(st));
    for (int i = 0; i < REPS; i++)
        CUDA_OK(eng_route_with(kernel, lg, bias, T, ROUTE_E, 1, 1, ROUTE_K, 1, 2.5f, scratch, ids,
                               w, st));
    CUDA_OK(eng_capture_end(st, &graph));
    for (int pass = 0; pass < 2; pass++) {
        CUDA_OK(eng_event_record(ev0, st));
        CUDA_OK(eng_graph_launch(graph, st));
        CUDA_OK(eng_event_record(ev1, st));
        CUDA_OK(eng_event_ms(ev0, ev1, &graphed));
    }
    printf("time the routing (top-8 of 288, %-10s) %2d rows: %6.2f us eager, %6.2f us in a graph\n",
           route_name(kernel), T, eager * 1000.0 / REPS, graphed * 1000.0 / REPS);
    eng_graph_free(graph);
    CUDA_OK(eng_stream_sync(st));
    eng_stream_free(st);
    kern_free(ids), kern_free(w);
}

/* The rank kernel, the warp kernel and eng_route on T rows: each against the CPU, and the warp
 * kernel's ids and weights bit-equal to the rank kernel's. */
static void route_compare(int ties, int E, int K, int T, const float *hl, const float *hb,
                          const float *lg, const float *bias, float *scratch)
{
    int32_t *gi[3];
    float *gw[3];
    route_case(ENG_ROUTE_RANK, ties, E, K, T, hl, hb, lg, bias, scratch, &gi[0], &gw[0]);
    route_case(ENG_ROUTE_WARP, ties, E, K, T, hl, hb, lg, bias, scratch, &gi[1], &gw[1]);
    route_case(-1, ties, E, K, T, hl, hb, lg, bias, scratch, &gi[2], &gw[2]);
    size_t n = (size_t)T * K;
    int same = memcmp(gi[0], gi[1], n * sizeof(int32_t)) == 0 &&
               memcmp(gw[0], gw[1], n * sizeof(float)) == 0;
    printf("%s the routing (top-%d of %d, %s logits, %2d rows): the warp kernel's ids and weights "
           "equal the rank kernel's bit for bit\n",
           same ? "ok  " : "FAIL", K, E, ties ? "tied" : "random", T);
    failures += !same;
    for (int i = 0; i < 3; i++)
        free(gi[i]), free(gw[i]);
}

static void check_route(int timed, void *ev0, void *ev1)
{
    static const int rows[] = {1, 4, 16};
    size_t ln = (size_t)ROUTE_MAXT * ROUTE_E;
    float *hl = xmalloc(ln * sizeof *hl), *hb = xmalloc(ROUTE_E * sizeof *hb);
    float *lg = dev_alloc(ln * sizeof(float)), *bias = dev_alloc(ROUTE_E * sizeof(float));
    float *scratch = dev_alloc((size_t)ROUTE_MAXT * (3 * ROUTE_E + 1) * sizeof(float));
    /* the real shape, then small ones as the test models have (E < 32: lanes without experts) */
    static const int shapes[][2] = {{ROUTE_E, ROUTE_K}, {16, 4}, {6, 3}, {40, 32}};
    for (size_t sh = 0; sh < sizeof shapes / sizeof *shapes; sh++)
        for (int ties = 0; ties < 2; ties++) {
            int E = shapes[sh][0], K = shapes[sh][1];
            route_inputs(ties, E, hl, hb);
            CUDA_OK(kern_to_device(lg, hl, (size_t)ROUTE_MAXT * E * sizeof(float)));
            CUDA_OK(kern_to_device(bias, hb, E * sizeof(float)));
            for (size_t r = 0; r < sizeof rows / sizeof *rows; r++)
                route_compare(ties, E, K, rows[r], hl, hb, lg, bias, scratch);
        }
    if (timed) {
        route_inputs(0, ROUTE_E, hl, hb);
        CUDA_OK(kern_to_device(lg, hl, ln * sizeof(float)));
        CUDA_OK(kern_to_device(bias, hb, ROUTE_E * sizeof(float)));
        for (size_t r = 0; r < sizeof rows / sizeof *rows; r++) {
            route_time(ENG_ROUTE_RANK, rows[r], lg, bias, scratch, ev0, ev1);
            route_time(ENG_ROUTE_WARP, rows[r], lg, bias, scratch, ev0, ev1);
        }
    }
    free(hl), free(hb);
    kern_free(lg), kern_free(bias), kern_free(scratch);
}

/* ---- the router with its routing in one launch (eng_router_route) against eng_matmul_jobs and
 * then eng_route ---------------------------------------------------------------------------- */

typedef struct {
    const char *name;
    int dtype, E, cols, K, norm_topk;
} rr_shape;

typedef struct {
    const eng_mat *w;
    const float *x, *bias;
    float *lg, *wts, *scratch;
    int32_t *ids;
    unsigned *done;
    int T, K, norm_topk;
} rr_args;

static void rr_two_launches(void *ctx, void *st)
{
    rr_args *a = ctx;
    eng_gemv_job j = {a->w, NULL, a->x, a->lg, 0.0f, 0};
    CUDA_OK(eng_matmul_jobs(&j, 1, a->T, st));
    CUDA_OK(eng_route(a->lg, a->bias, a->T, a->w->rows, 1, 1, a->K, a->norm_topk, 2.5f,
                      a->scratch, a->ids, a->wts, st));
}

static void rr_one_launch(void *ctx, void *st)
{
    rr_args *a = ctx;
    CUDA_OK(eng_router_route(a->w, a->x, a->T, a->lg, a->bias, a->K, a->norm_topk, 2.5f, a->ids,
                             a->wts, a->done, st));
}

/* logits, ids and weights of T rows back to the host, one buffer */
static unsigned char *rr_result(const rr_args *a)
{
    size_t ln = (size_t)a->T * a->w->rows * 4, kn = (size_t)a->T * a->K * 4;
    unsigned char *h = xmalloc(ln + 2 * kn);
    CUDA_OK(kern_sync());
    CUDA_OK(kern_to_host(h, a->lg, ln));
    CUDA_OK(kern_to_host(h + ln, a->ids, kn));
    CUDA_OK(kern_to_host(h + ln + kn, a->wts, kn));
    return h;
}

static void rr_clear(const rr_args *a) /* outputs to a pattern no kernel writes */
{
    CUDA_OK(kern_memset(a->lg, 0xff, (size_t)a->T * a->w->rows * 4));
    CUDA_OK(kern_memset(a->ids, 0xff, (size_t)a->T * a->K * 4));
    CUDA_OK(kern_memset(a->wts, 0xff, (size_t)a->T * a->K * 4));
}

/* One shape at T rows (tied: x zero, so every logit is 0 and the bias's four values tie many
 * choices): the fused launch's logits, ids and weights equal the two launches' bit for bit, in
 * a first and a second call (the block count back at zero), and in a graph's replays. */
static void rr_case(const rr_shape *sh, int T, int tied, int timed, void *ev0, void *ev1)
{
    tmat w = make_mat(sh->dtype, sh->E, sh->cols, 0.05f);
    float *hx = host_random((size_t)T * sh->cols, 1.0f), *hb = xmalloc(sh->E * sizeof *hb);
    if (tied)
        memset(hx, 0, (size_t)T * sh->cols * sizeof *hx);
    for (int e = 0; e < sh->E; e++)
        hb[e] = tied ? 0.03125f * (float)(test_rng_next(&rng_state) % 4) : 0.1f * frand();
    rr_args a = {&w.m, dev_copy(hx, (size_t)T * sh->cols * 4), dev_copy(hb, sh->E * 4),
                 dev_alloc((size_t)T * sh->E * 4), dev_alloc((size_t)T * sh->K * 4),
                 dev_alloc((size_t)T * (3 * sh->E + 1) * 4), dev_alloc((size_t)T * sh->K * 4),
                 dev_alloc(sizeof(unsigned)), T, sh->K, sh->norm_topk};
    CUDA_OK(kern_memset(a.done, 0, sizeof(unsigned)));
    char what[240];
    snprintf(what, sizeof what, "router + routing %s, %s, %d row(s)", sh->name,
             tied ? "tied" : "random", T);
    if (!eng_router_route_takes(a.w, a.x, T, 1, sh->K)) {
        /* only eng_matmul_jobs' skinny rows are refused among these shapes */
        int skinny = T <= 2 && sh->dtype == ENG_BF16 && sh->cols <= 256 && sh->cols % 8 == 0;
        printf("%s %s: refused (the engine runs the two launches)%s\n", skinny ? "ok  " : "FAIL",
               what, skinny ? "" : ", though no skinny rows");
        failures += !skinny;
    } else {
        rr_clear(&a);
        rr_two_launches(&a, NULL);
        unsigned char *ref = rr_result(&a);
        size_t n = (size_t)T * sh->E * 4 + (size_t)2 * T * sh->K * 4;
        unsigned char *got[3];
        for (int k = 0; k < 2; k++) { /* two calls: the second finds the count back at zero */
            rr_clear(&a);
            rr_one_launch(&a, NULL);
            got[k] = rr_result(&a);
        }
        void *st, *graph;
        CUDA_OK(eng_stream_new(&st));
        CUDA_OK(eng_capture_begin(st));
        rr_one_launch(&a, st);
        CUDA_OK(eng_capture_end(st, &graph));
        for (int k = 0; k < 2; k++) { /* replayed twice, the outputs cleared before the second */
            rr_clear(&a);
            CUDA_OK(eng_graph_launch(graph, st));
            CUDA_OK(eng_stream_sync(st));
        }
        got[2] = rr_result(&a);
        eng_graph_free(graph);
        eng_stream_free(st);
        unsigned done = 1;
        CUDA_OK(kern_to_host(&done, a.done, sizeof done));
        int same = memcmp(got[0], ref, n) == 0 && memcmp(got[1], ref, n) == 0 &&
                   memcmp(got[2], ref, n) == 0 && done == 0;
        printf("%s %s: logits, ids, weights equal eng_matmul_jobs + eng_route's (2 calls, 2 graph "
               "replays; count left %u)\n", same ? "ok  " : "FAIL", what, done);
        failures += !same;
        for (int k = 0; k < 3; k++)
            free(got[k]);
        free(ref);
        if (timed) {
            enum { REPS = 200 };
            double two = graph_us_per(rr_two_launches, &a, REPS, ev0, ev1);
            double one = graph_us_per(rr_one_launch, &a, REPS, ev0, ev1);
            printf("time router + routing %s, %d row(s), in a graph: eng_matmul_jobs then "
                   "eng_route %.2f us, eng_router_route %.2f us (%.2f us saved)\n", sh->name, T,
                   two, one, two - one);
        }
    }
    free(hx), free(hb);
    kern_free((void *)a.x), kern_free((void *)a.bias), kern_free(a.lg), kern_free(a.wts);
    kern_free(a.scratch), kern_free(a.ids), kern_free(a.done);
    free_mat(&w);
}

static void check_router_route(int timed, void *ev0, void *ev1)
{
    static const rr_shape shapes[] = {
        {"288 x 4096 f32 top-8 (the model's)", ENG_F32, 288, 4096, 8, 1},
        {"288 x 4096 bf16 top-8", ENG_BF16, 288, 4096, 8, 1},
        {"40 x 200 bf16 top-32 (skinny at 1-2 rows)", ENG_BF16, 40, 200, 32, 1},
        {"16 x 37 f32 top-4, weights not normalised", ENG_F32, 16, 37, 4, 0},
        {"512 x 1024 f32 top-8 (the most experts)", ENG_F32, 512, 1024, 8, 1},
    };
    static const int rows[] = {1, 2, 3, MAXT};
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++)
        for (size_t r = 0; r < sizeof rows / sizeof *rows; r++)
            for (int tied = 0; tied < 2; tied++)
                rr_case(&shapes[i], rows[r], tied, timed && i == 0 && tied == 0 && rows[r] <= 2,
                        ev0, ev1);
}

int main(int argc, char **argv)
{
    char name[256];
    int timed = gpu_test_begin(argc, argv, name, sizeof name);
    void *ev0, *ev1;
    gpu_test_events(&ev0, &ev1);
    int attend_only = 0;
    for (int i = 1; i < argc; i++)
        attend_only |= strcmp(argv[i], "--attend") == 0;
    if (attend_only) {
        check_attends(timed, ev0, ev1);
        eng_event_free(ev0);
        eng_event_free(ev1);
        printf("%s: %d failure(s)\n", failures ? "FAIL" : "PASS", failures);
        return failures ? 1 : 0;
    }
    const jshape jobs[] = {
        {"KDA f_b (8192 x 128, bf16)", ENG_BF16, 8192, 128, 0}, /* rows of few columns */
        {"KDA q_proj (8192 x 4096, bf16)", ENG_BF16, 8192, 4096, 0},
        {"shared gate/up SwiGLU (2 x 2048 x 4096)", ENG_BF16, 2048, 4096, 1},
        {"router (288 x 4096, f32)", ENG_F32, 288, 4096, 0},
        {"MLA q_b (16384 x 1536, bf16)", ENG_BF16, 16384, 1536, 0},
        {"shared down (4096 x 2048, bf16)", ENG_BF16, 4096, 2048, 0},
        {"KDA o_proj (4096 x 8192, bf16)", ENG_BF16, 4096, 8192, 0},
        {"odd (37 x 200, bf16)", ENG_BF16, 37, 200, 0}, /* a skinny job's last rows */
    };
    for (size_t i = 0; i < sizeof jobs / sizeof *jobs; i++)
        check_job(&jobs[i], timed, ev0, ev1);
    check_matmul_rows("KDA o_proj (4096 x 8192, bf16)", 4096, 8192, timed, ev0, ev1);
    check_matmul_rows("LM head part (16384 x 4096, bf16)", 16384, 4096, timed, ev0, ev1);
    check_matmul_rows("odd (1027 x 264, bf16)", 1027, 264, timed, ev0, ev1);
    check_gemv_edges();
    check_mla(ENG_BF16, 64, 512, timed, ev0, ev1);
    check_mla(ENG_F32, 64, 512, timed, ev0, ev1);
    check_mla(ENG_F32, 8, 576, 0, ev0, ev1);
    check_attends(timed, ev0, ev1);
    check_hc(timed, ev0, ev1);
    check_hc_y2(timed, ev0, ev1);
    check_norm_cache(timed, ev0, ev1);
    check_dsa_rows(timed, ev0, ev1);
    check_kda(timed, ev0, ev1);
    check_kda_fold(timed, ev0, ev1);
    check_route(timed, ev0, ev1);
    check_router_route(timed, ev0, ev1);
    check_mean_norm(timed, ev0, ev1);
    eng_event_free(ev0);
    eng_event_free(ev1);
    printf("%s: %d failure(s)\n", failures ? "FAIL" : "PASS", failures);
    return failures ? 1 : 0;
}
