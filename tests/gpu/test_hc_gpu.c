/* test_hc_gpu.c: the prefill path's fused hyper-connection kernels at GLM-5.3-Flash's shape
 * (S 4 streams of D 4096, 24 mixing rows): eng_hc_norm_mix (input norm + mixing product, fn in f32
 * and in bf16 as the checkpoint stores it) and eng_hc_collapse_rmsnorm (collapse + the
 * sublayer's norm) against double-precision host sums at T = 17, 300 and 4096; each row's bits
 * the same at every chunk size and wherever the chunk starts (prompt reuse relies on it);
 * eng_hc_post's prefill form (float4s) bit for bit against a host copy of its operations; then,
 * at 4096 rows, their times against the two-launch sequences they replace and against the
 * device's copy bandwidth measured in the same run, and eng_hc_norm_mix's against its floor at
 * 17, 300 and 4096 rows.
 * Usage: test_hc_gpu [--no-time]; exit 1 on any failure. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/engine.h"
#include "kernels/kernels.h"
#include "model/numfmt.h"

#define GPU_TEST_NAME "test_hc_gpu"
#include "tests/gpu/gpu_test.h"
#include "tests/common/rng.h"

enum { S = 4, D = 4096, N = S * D, R = (2 + S) * S, TMAX = 4096, SHIFT = 5, REPS = 20 };
enum { SHIFTED_ROWS = 300 }; /* the chunk launched from row SHIFT */
static const float kEps = 1e-6f;
/* f32 sums of 16384 terms: the error against the double sum, relative to the sum of the terms'
 * magnitudes (the bound the summation order may change), stays well under this */
static const double kTol = 1e-5;
static const int kChunks[] = {17, 300, TMAX};

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static int failures;

static void report(int ok, const char *what)
{
    printf("%s %s\n", ok ? "ok  " : "FAIL", what);
    if (!ok)
        failures++;
}

/* Rows of different magnitudes (the norm must not assume one). */
static float *random_streams(void)
{
    float *x = xmalloc((size_t)TMAX * N * sizeof *x);
    for (int t = 0; t < TMAX; t++) {
        float amp = 0.05f + 4.0f * (float)(t % 11) / 11.0f;
        for (int c = 0; c < N; c++)
            x[(size_t)t * N + c] = amp * test_rng_uniform(&rng_state);
    }
    return x;
}

/* ref[t][r] = the normed row's product with fn row r, in double; mag[t][r] the same sum of
 * |terms|, the scale of the error a float sum may make. */
static void norm_mix_ref(const float *x, const float *w, double *ref, double *mag)
{
    for (int t = 0; t < TMAX; t++) {
        const float *xt = x + (size_t)t * N;
        double ss = 0.0;
        for (int c = 0; c < N; c++)
            ss += (double)xt[c] * xt[c];
        double inv = 1.0 / sqrt(ss / N + kEps);
        for (int r = 0; r < R; r++) {
            double a = 0.0, m = 0.0;
            for (int c = 0; c < N; c++) {
                double p = (double)xt[c] * w[(size_t)r * N + c];
                a += p;
                m += fabs(p);
            }
            ref[t * R + r] = a * inv;
            mag[t * R + r] = m * inv;
        }
    }
}

/* u[t][d] = norm[d] * c[d] / rms(c), c[d] = sum_s pre[t][s] x[t][s][d], in double. */
static void collapse_norm_ref(const float *x, const float *pre, const float *norm, double *ref,
                              double *mag)
{
    double *c = xmalloc(D * sizeof *c), *cm = xmalloc(D * sizeof *cm);
    for (int t = 0; t < TMAX; t++) {
        double ss = 0.0;
        for (int d = 0; d < D; d++) {
            double a = 0.0, m = 0.0;
            for (int s = 0; s < S; s++) {
                double p = (double)pre[t * S + s] * x[((size_t)t * S + s) * D + d];
                a += p;
                m += fabs(p);
            }
            c[d] = a;
            cm[d] = m;
            ss += a * a;
        }
        double inv = 1.0 / sqrt(ss / D + kEps);
        for (int d = 0; d < D; d++) {
            ref[(size_t)t * D + d] = norm[d] * c[d] * inv;
            mag[(size_t)t * D + d] = fabs(norm[d]) * cm[d] * inv;
        }
    }
    free(c);
    free(cm);
}

/* Worst |got - ref| / mag over rows [0, T) of width n; FAIL past kTol. */
static void against_ref(const char *what, const float *got, const double *ref, const double *mag,
                        int T, int n)
{
    double worst = 0.0;
    int bad_t = -1;
    for (size_t i = 0; i < (size_t)T * n; i++) {
        double e = fabs(got[i] - ref[i]) / (mag[i] + 1e-30);
        if (!(e <= worst)) { /* (a NaN is the worst) */
            worst = isnan(e) ? INFINITY : e;
            bad_t = (int)(i / n);
        }
    }
    char line[256];
    snprintf(line, sizeof line, "%s, %d rows: against double sums, worst error %.3g of the terms' "
             "magnitude (row %d; limit %.0e)", what, T, worst, bad_t, kTol);
    report(worst <= kTol, line);
}

static void same_bits(const char *what, const float *a, const float *b, size_t n)
{
    report(memcmp(a, b, n * sizeof *a) == 0, what);
}

/* Microseconds a launch sequence takes, the mean of REPS after one warm-up. */
typedef void (*seq_fn)(void *ctx);
static double time_us(seq_fn f, void *ctx, void *ev0, void *ev1)
{
    f(ctx);
    CUDA_OK(kern_sync());
    float ms = 0.0f;
    CUDA_OK(eng_event_record(ev0, NULL));
    for (int i = 0; i < REPS; i++)
        f(ctx);
    CUDA_OK(eng_event_record(ev1, NULL));
    CUDA_OK(eng_event_ms(ev0, ev1, &ms));
    return 1000.0 * ms / REPS;
}

typedef struct bufs {
    eng_mat fn;
    float *X, *flat, *mu, *pre, *norm, *c, *u, *copy;
    float *y, *y2, *post, *comb; /* the HC update's inputs */
    int T;                       /* the rows the norm + mixing sequences time */
} bufs;

static void seq_norm_mix(void *p)
{
    bufs *b = p;
    CUDA_OK(eng_hc_norm_mix(&b->fn, b->X, b->T, S, D, kEps, b->flat, b->mu, NULL));
}

static void seq_norm_then_product(void *p)
{
    bufs *b = p;
    CUDA_OK(eng_rmsnorm(b->flat, b->X, NULL, b->T, N, kEps, NULL));
    CUDA_OK(eng_matmul(&b->fn, b->flat, b->T, b->mu, NULL));
}

static void seq_collapse_rmsnorm(void *p)
{
    bufs *b = p;
    CUDA_OK(eng_hc_collapse_rmsnorm(b->X, b->pre, b->norm, TMAX, S, D, kEps, b->u, NULL));
}

static void seq_collapse_then_norm(void *p)
{
    bufs *b = p;
    CUDA_OK(eng_hc_collapse(b->X, b->pre, TMAX, S, D, b->c, NULL));
    CUDA_OK(eng_rmsnorm(b->u, b->c, b->norm, TMAX, D, kEps, NULL));
}

static void seq_post(void *p)
{
    bufs *b = p;
    CUDA_OK(eng_hc_post(b->copy, b->y, b->y2, b->post, b->comb, TMAX, S, D, NULL));
}

static void seq_copy(void *p)
{
    bufs *b = p;
    CUDA_OK(eng_copy_async(b->copy, b->X, (size_t)TMAX * N * sizeof(float), NULL));
}

/* A row's bits whatever the chunk: got[k] (kChunks[k] rows of width floats from row 0) against
 * the TMAX-row launch's got[2], and shifted (SHIFTED_ROWS rows launched from row SHIFT, so that
 * its rows sit elsewhere in the blocks and warps) against those rows of got[2]. */
static void check_chunk_bits(const char *name, float *const got[3], const float *shifted,
                             int width)
{
    char what[256];
    for (int k = 0; k < 2; k++) {
        snprintf(what, sizeof what, "%s: the %d rows of a %d-row launch equal those rows of a "
                 "%d-row launch bit for bit", name, kChunks[k], kChunks[k], TMAX);
        same_bits(what, got[k], got[2], (size_t)kChunks[k] * width);
    }
    snprintf(what, sizeof what, "%s: a %d-row chunk from row %d equals rows %d.. of the %d-row "
             "launch bit for bit", name, SHIFTED_ROWS, SHIFT, SHIFT, TMAX);
    same_bits(what, shifted, got[2] + (size_t)SHIFT * width, (size_t)SHIFTED_ROWS * width);
}

static void free_chunks(float *got[3], float *shifted)
{
    free(shifted);
    for (int k = 0; k < 3; k++)
        free(got[k]);
}

/* eng_hc_norm_mix (fn as stored: what it reads, its values as floats in hw) against the double
 * sums at each chunk size, and each row's bits the same at every chunk size and start (the chunk
 * from row SHIFT); then the sequence it replaces against the same sums, for comparison. */
static void check_norm_mix(bufs *b, const float *hx, const float *hw)
{
    const char *fmt = b->fn.dtype == ENG_BF16 ? "bf16" : "f32";
    double *ref = xmalloc((size_t)TMAX * R * sizeof *ref);
    double *mag = xmalloc((size_t)TMAX * R * sizeof *mag);
    norm_mix_ref(hx, hw, ref, mag);
    float *got[3], *shifted;
    char what[256];
    snprintf(what, sizeof what, "eng_hc_norm_mix, %s fn", fmt);
    for (int k = 0; k < 3; k++) {
        CUDA_OK(kern_memset(b->mu, 0xff, (size_t)TMAX * R * sizeof(float)));
        CUDA_OK(eng_hc_norm_mix(&b->fn, b->X, kChunks[k], S, D, kEps, b->flat, b->mu, NULL));
        got[k] = to_host(b->mu, (size_t)kChunks[k] * R * sizeof(float));
        against_ref(what, got[k], ref, mag, kChunks[k], R);
    }
    CUDA_OK(kern_memset(b->mu, 0xff, (size_t)TMAX * R * sizeof(float)));
    CUDA_OK(eng_hc_norm_mix(&b->fn, b->X + (size_t)SHIFT * N, SHIFTED_ROWS, S, D, kEps, b->flat,
                            b->mu, NULL));
    shifted = to_host(b->mu, (size_t)SHIFTED_ROWS * R * sizeof(float));
    check_chunk_bits(what, got, shifted, R);
    free_chunks(got, shifted);
    /* the sequence it replaces, against the same sums (its own error, for comparison) */
    CUDA_OK(eng_rmsnorm(b->flat, b->X, NULL, TMAX, N, kEps, NULL));
    CUDA_OK(eng_matmul(&b->fn, b->flat, TMAX, b->mu, NULL));
    float *old = to_host(b->mu, (size_t)TMAX * R * sizeof(float));
    snprintf(what, sizeof what, "eng_rmsnorm then eng_matmul (the unfused sequence), %s fn", fmt);
    against_ref(what, old, ref, mag, TMAX, R);
    free(old);
    free(ref);
    free(mag);
}

static void check_collapse_rmsnorm(bufs *b, const float *hx, const float *hpre, const float *hnorm)
{
    size_t n = (size_t)TMAX * D;
    double *ref = xmalloc(n * sizeof *ref), *mag = xmalloc(n * sizeof *mag);
    collapse_norm_ref(hx, hpre, hnorm, ref, mag);
    float *got[3];
    for (int k = 0; k < 3; k++) {
        CUDA_OK(kern_memset(b->u, 0xff, n * sizeof(float)));
        CUDA_OK(eng_hc_collapse_rmsnorm(b->X, b->pre, b->norm, kChunks[k], S, D, kEps, b->u, NULL));
        got[k] = to_host(b->u, (size_t)kChunks[k] * D * sizeof(float));
        against_ref("eng_hc_collapse_rmsnorm", got[k], ref, mag, kChunks[k], D);
    }
    CUDA_OK(eng_hc_collapse_rmsnorm(b->X + (size_t)SHIFT * N, b->pre + SHIFT * S, b->norm,
                                    SHIFTED_ROWS, S, D, kEps, b->u, NULL));
    float *shifted = to_host(b->u, (size_t)SHIFTED_ROWS * D * sizeof(float));
    check_chunk_bits("eng_hc_collapse_rmsnorm", got, shifted, D);
    free_chunks(got, shifted);
    CUDA_OK(eng_hc_collapse(b->X, b->pre, TMAX, S, D, b->c, NULL));
    CUDA_OK(eng_rmsnorm(b->u, b->c, b->norm, TMAX, D, kEps, NULL));
    float *old = to_host(b->u, n * sizeof(float));
    against_ref("eng_hc_collapse then eng_rmsnorm (the unfused sequence)", old, ref, mag, TMAX, D);
    free(old);
    free(ref);
    free(mag);
}

/* The HC update's operations as eng_hc_post performs them (y + y2; post * y; then one fused
 * multiply-add a stream, in stream order), into out (rows [0, T)). */
static void post_ref(const float *x, const float *y, const float *y2, const float *post,
                     const float *comb, int T, float *out)
{
    for (int t = 0; t < T; t++)
        for (int d = 0; d < D; d++) {
            float yt = y2 ? y[(size_t)t * D + d] + y2[(size_t)t * D + d] : y[(size_t)t * D + d];
            for (int j = 0; j < S; j++) {
                float acc = post[t * S + j] * yt;
                for (int i = 0; i < S; i++)
                    acc = fmaf(comb[t * S * S + i * S + j], x[((size_t)t * S + i) * D + d], acc);
                out[((size_t)t * S + j) * D + d] = acc;
            }
        }
}

/* eng_hc_post past the decode path's rows, with and without y2, bit for bit against post_ref;
 * it updates b->copy (a copy of X) in place. */
static void check_post(bufs *b, const float *hx, const float *hy, const float *hy2,
                       const float *hpost, const float *hcomb)
{
    size_t n = (size_t)TMAX * N;
    float *want = xmalloc(n * sizeof *want);
    char what[256];
    for (int k = 0; k < 3; k++)
        for (int with2 = 0; with2 < 2; with2++) {
            int T = kChunks[k];
            CUDA_OK(kern_to_device(b->copy, hx, (size_t)T * N * sizeof(float)));
            CUDA_OK(eng_hc_post(b->copy, b->y, with2 ? b->y2 : NULL, b->post, b->comb, T, S, D,
                                NULL));
            float *got = to_host(b->copy, (size_t)T * N * sizeof(float));
            post_ref(hx, hy, with2 ? hy2 : NULL, hpost, hcomb, T, want);
            size_t bad = 0, first = 0;
            for (size_t i = 0; i < (size_t)T * N; i++)
                if (memcmp(&got[i], &want[i], sizeof got[i]) != 0 && bad++ == 0)
                    first = i;
            snprintf(what, sizeof what, "eng_hc_post%s, %d rows: bit for bit as its operations on "
                     "the host (%zu of %zu differ; first at %zu)", with2 ? " with y2" : "", T,
                     bad, (size_t)T * N, first);
            report(bad == 0, what);
            free(got);
        }
    free(want);
}

/* A fused kernel at b->T rows against the sequence it replaces and against the floor of the bytes
 * it must move (bytes) at the copy bandwidth bw (bytes a second); 1 if the fused one is faster. */
static int time_fused(bufs *b, void *ev0, void *ev1, const char *what, seq_fn fused,
                      seq_fn unfused, double bytes, double bw)
{
    double f = time_us(fused, b, ev0, ev1), u = time_us(unfused, b, ev0, ev1);
    double bound = 1e6 * bytes / bw;
    printf("time %s, %d rows: fused %8.1f us, unfused %8.1f us (%.2fx), floor %6.1f us (fused at "
           "%.0f%% of copy bandwidth)\n", what, b->T, f, u, u / f, bound, 100.0 * bound / f);
    return f < u;
}

/* eng_hc_norm_mix (bf16 fn) at each chunk size against the floor of the bytes a call must move
 * (X's rows, fn, mu) at the copy bandwidth bw. */
static void time_norm_mix(bufs *b, void *ev0, void *ev1, double bw)
{
    for (int k = 0; k < 3; k++) {
        b->T = kChunks[k];
        double bytes = (double)kChunks[k] * N * 4 + (double)R * N * 2 + (double)kChunks[k] * R * 4;
        double floor_us = 1e6 * bytes / bw, us = time_us(seq_norm_mix, b, ev0, ev1);
        printf("time eng_hc_norm_mix (bf16 fn), %4d rows: %8.1f us, floor %6.1f us (at %.0f%% of "
               "copy bandwidth)\n", kChunks[k], us, floor_us, 100.0 * floor_us / us);
    }
    b->T = TMAX;
}

/* Times at 4096 rows: each fused kernel against the sequence it replaces and against the floor of
 * its bytes at the copy bandwidth of this run (a device-to-device copy of X: read + write); then
 * eng_hc_norm_mix at each chunk size against its floor. */
static void time_all(bufs *b, void *ev0, void *ev1)
{
    double xbytes = (double)TMAX * N * sizeof(float);
    double copy = time_us(seq_copy, b, ev0, ev1);
    double bw = 2.0 * xbytes / (copy * 1e-6); /* bytes a second, read + write */
    printf("time copy of X (%.0f MB)                         %8.1f us, %6.0f GB/s read + write\n",
           xbytes / 1e6, copy, bw / 1e9);
    for (int k = 0; k < 2; k++) { /* a short prompt's chunks: fused against unfused */
        b->T = kChunks[k];
        double f = time_us(seq_norm_mix, b, ev0, ev1);
        double u = time_us(seq_norm_then_product, b, ev0, ev1);
        printf("time HC input norm + mixing product (bf16 fn), %d rows: fused %8.1f us, unfused "
               "%8.1f us\n", kChunks[k], f, u);
    }
    b->T = TMAX;
    int nm_faster = time_fused(b, ev0, ev1, "HC input norm + mixing product (bf16 fn)", seq_norm_mix,
                               seq_norm_then_product, xbytes + (double)TMAX * R * 4, bw);
    int cn_faster = time_fused(b, ev0, ev1, "HC collapse + layer norm", seq_collapse_rmsnorm,
                               seq_collapse_then_norm, xbytes + (double)TMAX * D * 4, bw);
    double po = time_us(seq_post, b, ev0, ev1);
    double po_floor = 1e6 * (2.0 * xbytes + 2.0 * (double)TMAX * D * 4) / bw;
    printf("time HC update (eng_hc_post with y2), %d rows:  %8.1f us, floor %6.1f us (at %.0f%% "
           "of copy bandwidth)\n", TMAX, po, po_floor, 100.0 * po_floor / po);
    report(nm_faster, "time: eng_hc_norm_mix is faster than eng_rmsnorm then eng_matmul");
    report(cn_faster, "time: eng_hc_collapse_rmsnorm is faster than eng_hc_collapse then "
                      "eng_rmsnorm");
    time_norm_mix(b, ev0, ev1, bw);
}

int main(int argc, char **argv)
{
    char name[256];
    int timed = gpu_test_begin(argc, argv, name, sizeof name);
    float *hx = random_streams();
    float *hw = xmalloc((size_t)R * N * sizeof *hw);
    float *hpre = xmalloc((size_t)TMAX * S * sizeof *hpre);
    float *hnorm = xmalloc(D * sizeof *hnorm);
    for (size_t i = 0; i < (size_t)R * N; i++)
        hw[i] = 0.02f * test_rng_uniform(&rng_state);
    for (int i = 0; i < TMAX * S; i++) /* as eng_hc_mix gives: sigmoid + eps, in (0, 1) */
        hpre[i] = 0.5f + 0.49f * test_rng_uniform(&rng_state);
    for (int d = 0; d < D; d++)
        hnorm[d] = 1.0f + 0.25f * test_rng_uniform(&rng_state);
    float *hy = xmalloc((size_t)TMAX * D * sizeof *hy);
    float *hy2 = xmalloc((size_t)TMAX * D * sizeof *hy2);
    float *hpost = xmalloc((size_t)TMAX * S * sizeof *hpost);
    float *hcomb = xmalloc((size_t)TMAX * S * S * sizeof *hcomb);
    for (size_t i = 0; i < (size_t)TMAX * D; i++) {
        hy[i] = test_rng_uniform(&rng_state);
        hy2[i] = 0.5f * test_rng_uniform(&rng_state);
    }
    for (int i = 0; i < TMAX * S; i++) /* 2 sigmoid: (0, 2) */
        hpost[i] = 1.0f + 0.9f * test_rng_uniform(&rng_state);
    for (int i = 0; i < TMAX * S * S; i++) /* near doubly stochastic: about 1 / S */
        hcomb[i] = 0.25f + 0.2f * test_rng_uniform(&rng_state);
    bufs b = {0};
    b.T = TMAX;
    b.fn.dtype = ENG_F32;
    b.fn.rows = R;
    b.fn.cols = N;
    b.fn.data = dev_copy(hw, (size_t)R * N * sizeof *hw);
    if (!eng_hc_norm_mix_takes(&b.fn, S, D) || !eng_hc_collapse_rmsnorm_takes(D)) {
        fprintf(stderr, "test_hc_gpu: the fused kernels refuse the real shape\n");
        return 1;
    }
    b.X = dev_copy(hx, (size_t)TMAX * N * sizeof *hx);
    b.flat = dev_alloc((size_t)TMAX * N * sizeof(float));
    b.copy = dev_alloc((size_t)TMAX * N * sizeof(float));
    b.mu = dev_alloc((size_t)TMAX * R * sizeof(float));
    b.pre = dev_copy(hpre, (size_t)TMAX * S * sizeof *hpre);
    b.norm = dev_copy(hnorm, D * sizeof *hnorm);
    b.c = dev_alloc((size_t)TMAX * D * sizeof(float));
    b.u = dev_alloc((size_t)TMAX * D * sizeof(float));
    b.y = dev_copy(hy, (size_t)TMAX * D * sizeof *hy);
    b.y2 = dev_copy(hy2, (size_t)TMAX * D * sizeof *hy2);
    b.post = dev_copy(hpost, (size_t)TMAX * S * sizeof *hpost);
    b.comb = dev_copy(hcomb, (size_t)TMAX * S * S * sizeof *hcomb);
    check_norm_mix(&b, hx, hw);
    /* bf16, as the checkpoint stores fn: the model's case, and the one timed below */
    uint16_t *hwb = xmalloc((size_t)R * N * sizeof *hwb);
    for (size_t i = 0; i < (size_t)R * N; i++) {
        hwb[i] = numfmt_bf16_bits(hw[i]);
        hw[i] = numfmt_bf16_value(hwb[i]);
    }
    b.fn.dtype = ENG_BF16;
    b.fn.data = dev_copy(hwb, (size_t)R * N * sizeof *hwb);
    if (!eng_hc_norm_mix_takes(&b.fn, S, D)) {
        fprintf(stderr, "test_hc_gpu: eng_hc_norm_mix refuses a bf16 fn at the real shape\n");
        return 1;
    }
    check_norm_mix(&b, hx, hw);
    free(hwb);
    check_collapse_rmsnorm(&b, hx, hpre, hnorm);
    check_post(&b, hx, hy, hy2, hpost, hcomb);
    if (timed) {
        void *ev0, *ev1;
        gpu_test_events(&ev0, &ev1);
        time_all(&b, ev0, ev1);
    }
    printf("%s: %d failure(s)\n", failures ? "FAIL" : "PASS", failures);
    free(hx);
    free(hw);
    free(hpre);
    free(hnorm);
    free(hy);
    free(hy2);
    free(hpost);
    free(hcomb);
    return failures ? 1 : 0;
}
