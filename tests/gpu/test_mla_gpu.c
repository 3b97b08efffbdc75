/* test_mla_gpu.c: the prefill (tensor-core) forms of the DSA latent attention, the absorbed query
 * and the value expansion against the scalar kernels (and the attention against a double host
 * reference), their bit-equality across chunks, and their time at the real shapes (the attention's
 * flash kernel against the scalar one and a cuBLAS GEMM's rate). The attention runs twice: in the
 * form the device's dispatch picks, then in the small form (one key tile, 16 heads a block: the
 * GB10's 99 KiB a block) forced, which must also give the bits of the big form with 16 heads a
 * block. Usage: test_mla_gpu [--no-time]; exit status 1 on any failure. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/engine.h"
#include "kernels/kernels.h"

#define GPU_TEST_NAME "test_mla_gpu"
#include "tests/gpu/gpu_test.h"
#include "tests/common/rng.h"

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static int failures;
/* sm_90, where the flash kernel must take the real shapes (elsewhere, sm_121's 99 KiB of shared
 * memory a block among them, the scalar kernel runs them) */
static int device_sm90;
/* The shared memory a block the attention's prefill form is chosen within: -1 the device's opt-in
 * limit (the engine's dispatch); SMALL_SMEM the GB10's 99 KiB, where only the small form fits;
 * ONE_GROUP_SMEM 124 KiB, the big form with 16 heads a block (its head sums the small form's). */
enum { DEVICE_SMEM = -1, SMALL_SMEM = 99 * 1024, ONE_GROUP_SMEM = 124 * 1024 };
static int smem_budget = DEVICE_SMEM;

/* n random floats (amplitude amp) on the device, from this file's generator. */
static float *dev_random(size_t n, float amp)
{
    return dev_uniform(&rng_state, n, amp);
}

/* got against ref: every element finite, max |diff| <= tol * max |ref|; one line. */
static void compare(const char *what, const float *d_got, const float *d_ref, size_t n, double tol)
{
    float *got = to_host(d_got, n * sizeof(float)), *ref = to_host(d_ref, n * sizeof(float));
    double md = 0, mr = 0;
    size_t bad = 0, first_bad = 0, worst = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(got[i]) && bad++ == 0)
            first_bad = i;
        double d = fabs((double)got[i] - ref[i]);
        if (d > md)
            md = d, worst = i;
        mr = fabs(ref[i]) > mr ? fabs(ref[i]) : mr;
    }
    int ok = bad == 0 && md <= tol * mr;
    printf("%-58s max|diff| %.3e of max|ref| %.3e (rel %.2e, tol %.0e) %s\n", what, md, mr,
           mr > 0 ? md / mr : 0.0, tol, ok ? "ok" : "FAIL");
    if (!ok) /* where, for the one who debugs it: element i of the [T][H][R] output */
        printf("    %zu not finite (the first at element %zu); the largest diff at element %zu: "
               "got %.6e, ref %.6e\n", bad, first_bad, worst, got[worst], ref[worst]);
    failures += !ok;
    free(got);
    free(ref);
}

/* rows of a (a chunk's launch) equal to the same rows of b (another launch) bit for bit */
static void same_bits(const char *what, const float *d_a, const float *d_b, size_t n)
{
    float *a = to_host(d_a, n * sizeof(float)), *b = to_host(d_b, n * sizeof(float));
    size_t first = 0, differ = 0;
    for (size_t i = 0; i < n; i++)
        if (memcmp(a + i, b + i, sizeof *a) != 0 && differ++ == 0)
            first = i;
    int ok = differ == 0;
    printf("%-58s %s\n", what, ok ? "bit-equal" : "FAIL: the bits differ");
    if (!ok)
        printf("    %zu elements differ, the first at element %zu: %.9e against %.9e\n", differ,
               first, a[first], b[first]);
    failures += !ok;
    free(a);
    free(b);
}

static float time_ms(void *a, void *b)
{
    float ms = 0;
    CUDA_OK(eng_event_ms(a, b, &ms));
    return ms;
}

typedef struct shape {
    const char *name;
    int H, dn, dv, R, width, T, cache_rows;
} shape;

/* the kernel the prefill form runs for this cache and shape within `budget` on this device */
static const char *kernel_within(int budget, const eng_cache *c, int H, int R, const float *qt,
                                 const float *ot)
{
    eng_mla_prefill_form f = eng_mla_attend_prefill_form(c, H, R, qt, ot, budget);
    return f.heads == 0 ? "scalar" : f.stages == 1 ? "flash-small" : "flash";
}

/* ... within smem_budget */
static const char *prefill_kernel(const eng_cache *c, int H, int R, const float *qt, const float *ot)
{
    return kernel_within(smem_budget, c, H, R, qt, ot);
}

/* the prefill form within smem_budget (eng_mla_attend_prefill itself where that is the device's) */
static int attend_prefill(const eng_cache *c, const float *qt, const int32_t *idx, const int *count,
                          int width, int T, int H, int R, float scale, float *ot)
{
    if (smem_budget == DEVICE_SMEM)
        return eng_mla_attend_prefill(c, qt, idx, count, width, T, H, R, scale, ot, NULL);
    return eng_mla_attend_prefill_budget(c, qt, idx, count, width, T, H, R, scale, ot, smem_budget,
                                         NULL);
}

/* A cache of `rows` random rows of width R in format dt, written by eng_cache_write (quantised as
 * the engine does); free with free_cache. */
static eng_cache new_cache(int dt, int R, int rows)
{
    float *src = dev_random((size_t)rows * R, 1.0f);
    eng_cache c = {dt, R, NULL, NULL};
    size_t esz = dt == ENG_CACHE_FP8 ? 1 : dt == ENG_CACHE_BF16 ? 2 : 4;
    c.rows = dev_alloc((size_t)rows * R * esz);
    c.scale = dev_alloc((size_t)rows * sizeof(float));
    int zero = 0, *d_pos = dev_copy(&zero, sizeof zero);
    CUDA_OK(eng_cache_write(&c, d_pos, src, rows, NULL));
    CUDA_OK(kern_sync());
    kern_free(d_pos);
    kern_free(src);
    return c;
}

static void free_cache(eng_cache *c)
{
    kern_free(c->rows);
    kern_free(c->scale);
}

/* The latent attention: random cache rows, random selections of 1 .. width rows; the prefill
 * form against eng_mla_attend; rows split off from the launch (the chunk starting at T/3, T/2
 * rows) bit-equal. */
static void check_attend(const shape *s, int dt)
{
    int H = s->H, R = s->R, T = s->T, W = s->width;
    eng_cache c = new_cache(dt, R, s->cache_rows);
    int32_t *idx = xmalloc((size_t)T * W * sizeof *idx);
    int *count = xmalloc((size_t)T * sizeof *count);
    for (int t = 0; t < T; t++) {
        /* mostly full selections (the real case past 2051 tokens), some short ones */
        count[t] = t % 5 == 0 ? 1 + (int)(test_rng_u32(&rng_state) % (uint32_t)W) : W - (int)(test_rng_u32(&rng_state) % 4);
        for (int j = 0; j < count[t]; j++)
            idx[(size_t)t * W + j] = (int32_t)(test_rng_u32(&rng_state) % (uint32_t)s->cache_rows);
    }
    int32_t *d_idx = dev_copy(idx, (size_t)T * W * sizeof *idx);
    int *d_count = dev_copy(count, (size_t)T * sizeof *count);
    float *qt = dev_random((size_t)T * H * R, 3.0f);
    size_t on = (size_t)T * H * R;
    float *ref = dev_alloc(on * sizeof(float)), *got = dev_alloc(on * sizeof(float));
    float *part = dev_alloc(on * sizeof(float));
    float scale = 1.0f / sqrtf((float)s->dn);
    CUDA_OK(eng_mla_attend(&c, qt, d_idx, d_count, W, T, H, R, scale, ref, NULL));
    CUDA_OK(kern_memset(got, 0xff, on * sizeof(float)));
    CUDA_OK(attend_prefill(&c, qt, d_idx, d_count, W, T, H, R, scale, got));
    char what[160];
    /* the flash kernel takes R 512 only: other widths run the scalar one */
    const char *kn = prefill_kernel(&c, H, R, qt, got);
    snprintf(what, sizeof what, "attend %s %s %s H%d R%d T%d width %d", kn, s->name,
             cache_name(dt), H, R, T, W);
    compare(what, got, ref, on, 1e-4);
    int t0 = T / 3, n2 = T / 2;
    CUDA_OK(kern_memset(part, 0xff, on * sizeof(float)));
    CUDA_OK(attend_prefill(&c, qt + (size_t)t0 * H * R, d_idx + (size_t)t0 * W,
                                   d_count + t0, W, n2, H, R, scale, part));
    snprintf(what, sizeof what, "attend %s %s %s rows %d..%d as a chunk of %d", kn, s->name,
             cache_name(dt), t0, t0 + n2 - 1, n2);
    same_bits(what, part, got + (size_t)t0 * H * R, (size_t)n2 * H * R);
    free_cache(&c);
    kern_free(d_idx);
    kern_free(d_count);
    kern_free(qt);
    kern_free(ref);
    kern_free(got);
    kern_free(part);
    free(idx);
    free(count);
}

/* The indexer's selections for rows at positions pos0 .. pos0+T-1 (the layout eng_dsa_select
 * writes): with P = (pos + 1) / kpool pools, every token 0 .. pos while P <= budget; else
 * `budget` distinct pools (drawn at random here, as the indexer's scores would pick them) as their
 * tokens in order, then the open tail 4P .. pos. */
static void indexer_selection(int pos0, int T, int kpool, int budget, int width, int32_t *idx,
                              int *count)
{
    char *taken = NULL;
    int cap = 0;
    for (int t = 0; t < T; t++) {
        int pos = pos0 + t, P = (pos + 1) / kpool, n = 0;
        int32_t *row = idx + (size_t)t * width;
        if (P <= budget) {
            for (int j = 0; j <= pos; j++)
                row[n++] = j;
            count[t] = n;
            continue;
        }
        if (P > cap) {
            free(taken);
            cap = P;
            taken = xmalloc((size_t)cap);
        }
        memset(taken, 0, (size_t)P);
        for (int k = 0; k < budget;) {
            int p = (int)(test_rng_u32(&rng_state) % (uint32_t)P);
            if (!taken[p])
                taken[p] = 1, k++;
        }
        for (int p = 0; p < P; p++)
            if (taken[p])
                for (int j = 0; j < kpool; j++)
                    row[n++] = p * kpool + j;
        for (int j = P * kpool; j <= pos; j++)
            row[n++] = j;
        count[t] = n;
    }
    free(taken);
}

static double e4m3_value(uint8_t b)
{
    int e = (b >> 3) & 15, m = b & 7;
    double v = e == 0 ? m * ldexp(1.0, -9) : (1.0 + m / 8.0) * ldexp(1.0, e - 7);
    return b & 0x80 ? -v : v;
}

/* Row `row` of the cache as the kernels read it, in double. */
static void cache_row_host(const eng_cache *c, const void *rows, const float *scales, int row,
                           double *out)
{
    int R = c->width;
    for (int d = 0; d < R; d++) {
        size_t i = (size_t)row * R + d;
        if (c->dtype == ENG_CACHE_FP8) {
            out[d] = e4m3_value(((const uint8_t *)rows)[i]) * scales[row];
        } else if (c->dtype == ENG_CACHE_BF16) {
            uint32_t u = (uint32_t)((const uint16_t *)rows)[i] << 16;
            float f;
            memcpy(&f, &u, sizeof f);
            out[d] = f;
        } else {
            out[d] = ((const float *)rows)[i];
        }
    }
}

/* The latent attention of rows `rows_at` in double on the host against the kernel's output there:
 * max |diff| over max |ref| of those rows, printed; fails over tol. */
static void check_host(const char *what, const eng_cache *c, int cache_rows, const float *d_qt,
                       const float *d_got, const int32_t *idx, const int *count, int width, int T,
                       int H, float scale, const int *rows_at, int nrows, double tol)
{
    int R = c->width;
    size_t esz = c->dtype == ENG_CACHE_FP8 ? 1 : c->dtype == ENG_CACHE_BF16 ? 2 : 4;
    void *rows = xmalloc((size_t)cache_rows * R * esz);
    float *scales = xmalloc((size_t)cache_rows * sizeof *scales);
    CUDA_OK(kern_sync());
    CUDA_OK(kern_to_host(rows, c->rows, (size_t)cache_rows * R * esz));
    if (c->dtype == ENG_CACHE_FP8)
        CUDA_OK(kern_to_host(scales, c->scale, (size_t)cache_rows * sizeof *scales));
    float *q = xmalloc((size_t)H * R * sizeof *q), *o = xmalloc((size_t)H * R * sizeof *o);
    double *keys = xmalloc((size_t)width * R * sizeof *keys), *sc = xmalloc((size_t)width * sizeof *sc);
    double *acc = xmalloc((size_t)R * sizeof *acc);
    double md = 0, mr = 0;
    size_t bad = 0;
    for (int k = 0; k < nrows; k++) {
        int t = rows_at[k], n = count[t];
        if (t < 0 || t >= T)
            continue;
        CUDA_OK(kern_to_host(q, d_qt + (size_t)t * H * R, (size_t)H * R * sizeof *q));
        CUDA_OK(kern_to_host(o, d_got + (size_t)t * H * R, (size_t)H * R * sizeof *o));
        for (int j = 0; j < n; j++)
            cache_row_host(c, rows, scales, idx[(size_t)t * width + j], keys + (size_t)j * R);
        for (int h = 0; h < H; h++) {
            const float *qh = q + (size_t)h * R;
            double mx = -INFINITY, l = 0;
            for (int j = 0; j < n; j++) {
                double a = 0;
                for (int d = 0; d < R; d++)
                    a += (double)qh[d] * keys[(size_t)j * R + d];
                sc[j] = a * scale;
                mx = sc[j] > mx ? sc[j] : mx;
            }
            memset(acc, 0, (size_t)R * sizeof *acc);
            for (int j = 0; j < n; j++) {
                double p = exp(sc[j] - mx);
                l += p;
                for (int d = 0; d < R; d++)
                    acc[d] += p * keys[(size_t)j * R + d];
            }
            for (int d = 0; d < R; d++) {
                double r = acc[d] / l, g = o[(size_t)h * R + d];
                if (!isfinite(g))
                    bad++;
                md = fabs(g - r) > md ? fabs(g - r) : md;
                mr = fabs(r) > mr ? fabs(r) : mr;
            }
        }
    }
    int ok = bad == 0 && md <= tol * mr;
    printf("%-58s max|diff| %.3e of max|ref| %.3e (rel %.2e, tol %.0e) %s\n", what, md, mr,
           mr > 0 ? md / mr : 0.0, tol, ok ? "ok" : "FAIL");
    failures += !ok;
    free(rows);
    free(scales);
    free(q);
    free(o);
    free(keys);
    free(sc);
    free(acc);
}

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

/* The median of `reps` timed launches of the prefill form within `budget` (prefill 1) or the
 * scalar kernel (prefill 0), one untimed first. */
static float time_attend(int prefill, int budget, const eng_cache *c, const float *qt, const int32_t *d_idx,
                         const int *d_count, int width, int T, int H, int R, float scale, float *ot,
                         void *ev0, void *ev1)
{
    enum { reps = 5 };
    float ms[reps];
    for (int i = -1; i < reps; i++) {
        CUDA_OK(eng_event_record(ev0, NULL));
        if (prefill)
            CUDA_OK(eng_mla_attend_prefill_budget(c, qt, d_idx, d_count, width, T, H, R, scale, ot,
                                                  budget, NULL));
        else
            CUDA_OK(eng_mla_attend(c, qt, d_idx, d_count, width, T, H, R, scale, ot, NULL));
        CUDA_OK(eng_event_record(ev1, NULL));
        if (i >= 0)
            ms[i] = time_ms(ev0, ev1);
    }
    qsort(ms, reps, sizeof *ms, cmp_float);
    return ms[reps / 2];
}

/* n random bf16 values (amplitude 0.05, rounded to nearest even) on the device. */
static void *dev_random_bf16(size_t n)
{
    uint16_t *w = xmalloc(n * sizeof *w);
    for (size_t i = 0; i < n; i++) {
        float f = 0.05f * test_rng_uniform(&rng_state);
        uint32_t u;
        memcpy(&u, &f, sizeof u);
        w[i] = (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
    }
    void *d = dev_copy(w, n * sizeof *w);
    free(w);
    return d;
}

/* The rate of a cuBLAS bf16 GEMM on this device, in tensor-core TFLOP/s: eng_gemm's cublasGemmEx
 * path (cuBLAS's own algorithm) at 4096 x 4096 x 4096, which runs three bf16 products (the f32
 * input split in three parts) after a split kernel: 3 * 2 * 4096^3 flop over the median time. */
static double cublas_rate(void *ev0, void *ev1)
{
    enum { n = 4096, reps = 5 };
    size_t wn = (size_t)n * n;
    eng_mat m = {ENG_BF16, n, n, dev_random_bf16(wn), NULL, 0, 0, 0, NULL};
    float *x = dev_random(wn, 1.0f), *y = dev_alloc(wn * sizeof(float));
    double rate = 0;
    if (eng_gemm_set_mode(ENG_GEMM_CUBLAS) == 0 && eng_gemm(&m, x, n, y, NULL) == 0) {
        float ms[reps];
        for (int i = 0; i < reps; i++) {
            CUDA_OK(eng_event_record(ev0, NULL));
            CUDA_OK(eng_gemm(&m, x, n, y, NULL));
            CUDA_OK(eng_event_record(ev1, NULL));
            ms[i] = time_ms(ev0, ev1);
        }
        qsort(ms, reps, sizeof *ms, cmp_float);
        rate = 3.0 * 2.0 * n * (double)n * n / ms[reps / 2] / 1e9;
        printf("time cuBLAS bf16 GEMM 4096^3 (eng_gemm's cublasGemmEx path, three bf16 products and "
               "the split): %.3f ms, %.1f TFLOP/s on the tensor cores\n", ms[reps / 2], rate);
    } else {
        printf("time cuBLAS bf16 GEMM: cuBLAS did not run (see above); the H100 SXM's published "
               "dense bf16 rate is 989 TFLOP/s\n");
    }
    eng_gemm_set_mode(ENG_GEMM_FIXED);
    kern_free((void *)m.data);
    kern_free(x);
    kern_free(y);
    return rate;
}

/* A run's inputs at the indexer's selection layout: a cache of pos0 + T rows of dtype dt, each
 * row's selection (every earlier token below 2051, else 512 pools of 4 and the tail) on the host
 * and the device, and T rows of random queries for H heads of R. */
typedef struct sel_inputs {
    eng_cache c;
    int W, rows;
    int32_t *idx, *d_idx;
    int *count, *d_count;
    float *qt;
    size_t on; /* floats of an output: T x H x R */
} sel_inputs;

static sel_inputs sel_inputs_new(int H, int R, int pos0, int T, int dt)
{
    const int kpool = 4, budget = 512;
    sel_inputs in;
    in.W = budget * kpool + kpool - 1;
    in.rows = pos0 + T;
    in.c = new_cache(dt, R, in.rows);
    in.idx = xmalloc((size_t)T * in.W * sizeof *in.idx);
    in.count = xmalloc((size_t)T * sizeof *in.count);
    indexer_selection(pos0, T, kpool, budget, in.W, in.idx, in.count);
    in.d_idx = dev_copy(in.idx, (size_t)T * in.W * sizeof *in.idx);
    in.d_count = dev_copy(in.count, (size_t)T * sizeof *in.count);
    in.qt = dev_random((size_t)T * H * R, 3.0f);
    in.on = (size_t)T * H * R;
    return in;
}

static void sel_inputs_free(sel_inputs *in)
{
    free_cache(&in->c);
    kern_free(in->d_idx);
    kern_free(in->d_count);
    kern_free(in->qt);
    free(in->idx);
    free(in->count);
}

/* The latent attention at the real selection layout: rows at positions pos0 .. pos0+T-1 over a
 * cache of pos0 + T rows, the indexer's selections (every earlier token below 2051, else 512
 * pools of 4 and the tail); the flash kernel against eng_mla_attend on every row and against a
 * double-precision host reference on a few; the same rows in chunks of 1, 7, 64 and 1024 at
 * other offsets bit-equal to the whole chunk's; with `timed`, the flash and scalar kernels' times. */
static void check_indexed(const char *name, int H, int R, int pos0, int T, int dt, int timed,
                          double gemm_rate, void *ev0, void *ev1)
{
    sel_inputs in = sel_inputs_new(H, R, pos0, T, dt);
    eng_cache c = in.c;
    const int W = in.W, rows = in.rows, *count = in.count, *d_count = in.d_count;
    const int32_t *idx = in.idx, *d_idx = in.d_idx;
    float *qt = in.qt;
    size_t on = in.on;
    float *ref = dev_alloc(on * sizeof(float)), *got = dev_alloc(on * sizeof(float));
    float *part = dev_alloc(on * sizeof(float));
    float scale = 1.0f / sqrtf(256.0f);
    char what[160];
    const char *kn = prefill_kernel(&c, H, R, qt, got);
    { /* no silent fall-back: on sm_90 the bf16 and e4m3 caches are the big flash form's (the
       * small one's within 99 KiB), the f32 cache the scalar kernel's; elsewhere the line says
       * which runs */
        int takes = eng_mla_attend_prefill_takes(&c, H, R, qt, got);
        eng_mla_prefill_form f = eng_mla_attend_prefill_form(&c, H, R, qt, got, smem_budget);
        int f32 = dt == ENG_CACHE_F32, small = smem_budget == SMALL_SMEM;
        snprintf(what, sizeof what, "attend %s %s H%d R%d: the %s kernel runs it (%d B)", name,
                 cache_name(dt), H, R, kn, f.smem);
        int ok = f32 ? !takes && f.heads == 0
                     : small ? f.heads == 16 && f.stages == 1 && f.smem <= SMALL_SMEM
                             : (takes && f.stages == 2) || !device_sm90;
        printf("%-58s %s\n", what, ok ? "ok" : f32 ? "FAIL: the f32 cache has no flash kernel"
                                      : small ? "FAIL: the small form should run within 99 KiB"
                                              : "FAIL: sm_90 should run the big flash form");
        failures += !ok;
    }
    CUDA_OK(eng_mla_attend(&c, qt, d_idx, d_count, W, T, H, R, scale, ref, NULL));
    CUDA_OK(kern_memset(got, 0xff, on * sizeof(float)));
    CUDA_OK(attend_prefill(&c, qt, d_idx, d_count, W, T, H, R, scale, got));
    snprintf(what, sizeof what, "attend %s %s %s pos %d T%d: against scalar", kn, name,
             cache_name(dt), pos0, T);
    compare(what, got, ref, on, 1e-4);
    int at[4] = {0, T / 2, T - 1, (int)(test_rng_u32(&rng_state) % (uint32_t)T)};
    snprintf(what, sizeof what, "attend %s %s %s pos %d T%d: against f64 host", kn, name,
             cache_name(dt), pos0, T);
    check_host(what, &c, rows, qt, got, idx, count, W, T, H, scale, at, 4, 1e-4);
    const int chunks[] = {1, 7, 64, 1024};
    for (size_t k = 0; k < sizeof chunks / sizeof *chunks; k++) {
        int n2 = chunks[k] < T ? chunks[k] : T, t0 = (int)((T - n2) * (k + 1) / 5);
        CUDA_OK(kern_memset(part, 0xff, on * sizeof(float)));
        CUDA_OK(attend_prefill(&c, qt + (size_t)t0 * H * R, d_idx + (size_t)t0 * W,
                                       d_count + t0, W, n2, H, R, scale, part));
        snprintf(what, sizeof what, "attend %s %s %s pos %d rows %d..%d as a chunk of %d", kn,
                 name, cache_name(dt), pos0, t0, t0 + n2 - 1, n2);
        same_bits(what, part, got + (size_t)t0 * H * R, (size_t)n2 * H * R);
    }
    if (timed) {
        double sel = 0;
        for (int t = 0; t < T; t++)
            sel += count[t];
        double flop = 4.0 * sel * H * R; /* two products of 2 R flop a (row, key, head) */
        float ms[2]; /* the prefill form's kernel, the scalar one */
        for (int k = 0; k < 2; k++)
            ms[k] = time_attend(k == 0, smem_budget, &c, qt, d_idx, d_count, W, T, H, R, scale,
                                part, ev0, ev1);
        for (int k = 0; k < 2; k++) {
            double tf = flop / ms[k] / 1e9;
            printf("time attend %s %s pos %d T%d (%.0f keys a row): %s %.3f ms, %.1f TFLOP/s", name,
                   cache_name(dt), pos0, T, sel / T, k == 0 ? kn : "scalar", ms[k], tf);
            if (k == 0 && strncmp(kn, "flash", 5) == 0) {
                printf(" (%.1f on the tensor cores, q and p in two bf16 parts", 2 * tf);
                if (gemm_rate > 0)
                    printf(": %.0f%% of the cuBLAS GEMM's rate)", 100 * 2 * tf / gemm_rate);
                else
                    printf(": %.0f%% of 989 TFLOP/s, the H100 SXM's published dense bf16 rate)",
                           100 * 2 * tf / 989.0);
            }
            printf("\n");
        }
        printf("time attend %s %s pos %d T%d: %s is %.2fx the scalar kernel\n", name,
               cache_name(dt), pos0, T, kn, ms[1] / ms[0]);
        if (smem_budget != DEVICE_SMEM) { /* beside the form the device runs */
            const char *dk = kernel_within(DEVICE_SMEM, &c, H, R, qt, part);
            float dms = time_attend(1, DEVICE_SMEM, &c, qt, d_idx, d_count, W, T, H, R, scale,
                                    part, ev0, ev1);
            printf("time attend %s %s pos %d T%d: %s %.3f ms (%.1f TFLOP/s) beside the device's "
                   "%s %.3f ms (%.1f TFLOP/s): %.2fx its time\n", name, cache_name(dt), pos0, T,
                   kn, ms[0], flop / ms[0] / 1e9, dk, dms, flop / dms / 1e9, ms[0] / dms);
        }
    }
    sel_inputs_free(&in);
    kern_free(ref);
    kern_free(got);
    kern_free(part);
}

/* The small form (one key tile) against the big form with 16 heads a block, forced by the budget:
 * each head's sums run in the same order in both, so the whole output is the same bits; skipped
 * (said so) where the device cannot give a block the big form's 124 KiB. */
static void check_small_matches_big(const char *name, int H, int pos0, int T, int dt)
{
    const int R = 512;
    sel_inputs in = sel_inputs_new(H, R, pos0, T, dt);
    eng_cache c = in.c;
    const int W = in.W, *d_count = in.d_count;
    const int32_t *d_idx = in.d_idx;
    float *qt = in.qt;
    size_t on = in.on;
    float *big = dev_alloc(on * sizeof(float)), *small = dev_alloc(on * sizeof(float));
    float scale = 1.0f / sqrtf(256.0f);
    char what[160];
    eng_mla_prefill_form fb = eng_mla_attend_prefill_form(&c, H, R, qt, big, ONE_GROUP_SMEM);
    eng_mla_prefill_form fs = eng_mla_attend_prefill_form(&c, H, R, qt, small, SMALL_SMEM);
    snprintf(what, sizeof what, "attend small %s %s H%d pos %d T%d against big, 16 heads a block",
             name, cache_name(dt), H, pos0, T);
    if (fb.heads != 16 || fb.stages != 2) {
        printf("%-58s skipped: the device gives a block under %d B\n", what, ONE_GROUP_SMEM);
    } else if (fs.heads != 16 || fs.stages != 1) {
        printf("%-58s FAIL: the small form does not run within %d B\n", what, SMALL_SMEM);
        failures++;
    } else {
        /* different fillers: an element neither form wrote differs */
        CUDA_OK(kern_memset(big, 0xff, on * sizeof(float)));
        CUDA_OK(kern_memset(small, 0x7f, on * sizeof(float)));
        CUDA_OK(eng_mla_attend_prefill_budget(&c, qt, d_idx, d_count, W, T, H, R, scale, big,
                                              ONE_GROUP_SMEM, NULL));
        CUDA_OK(eng_mla_attend_prefill_budget(&c, qt, d_idx, d_count, W, T, H, R, scale, small,
                                              SMALL_SMEM, NULL));
        same_bits(what, small, big, on);
    }
    sel_inputs_free(&in);
    kern_free(big);
    kern_free(small);
}

/* The form chosen within each budget on sm_90 (227 KiB a block): the head groups H needs where
 * they fit, fewer where not, the small form within 99 KiB, the scalar kernel below its 88 KiB. */
static void check_form_choice(void)
{
    if (!device_sm90) {
        printf("%-58s skipped: not sm_90\n", "attend form choice by shared memory budget");
        return;
    }
    eng_cache c = new_cache(ENG_CACHE_FP8, 512, 64);
    float *qt = dev_alloc(64 * 512 * sizeof(float)), *ot = dev_alloc(64 * 512 * sizeof(float));
    const struct {
        int budget, H, heads, stages;
    } want[] = {
        {DEVICE_SMEM, 64, 64, 2}, {DEVICE_SMEM, 40, 64, 2}, {DEVICE_SMEM, 32, 32, 2},
        {DEVICE_SMEM, 16, 16, 2}, {163 * 1024, 64, 32, 2},  {ONE_GROUP_SMEM, 64, 16, 2},
        {SMALL_SMEM, 64, 16, 1},  {SMALL_SMEM, 4, 16, 1},   {80 * 1024, 64, 0, 0},
    };
    for (size_t i = 0; i < sizeof want / sizeof *want; i++) {
        eng_mla_prefill_form f = eng_mla_attend_prefill_form(&c, want[i].H, 512, qt, ot,
                                                             want[i].budget);
        char what[160];
        snprintf(what, sizeof what, "attend form H%d within %d B: %d heads a block, %d tile(s)",
                 want[i].H, want[i].budget, f.heads, f.stages);
        int ok = f.heads == want[i].heads && (f.heads == 0 || f.stages == want[i].stages) &&
                 (want[i].budget < 0 || f.smem <= want[i].budget);
        printf("%-58s %s\n", what, ok ? "ok" : "FAIL");
        if (!ok)
            printf("    expected %d heads a block, %d tile(s)\n", want[i].heads, want[i].stages);
        failures += !ok;
    }
    free_cache(&c);
    kern_free(qt);
    kern_free(ot);
}

/* The absorbed query and the value expansion with random bf16 kv_b. */
static void check_products(const shape *s, int timed, void *ev0, void *ev1)
{
    int H = s->H, dn = s->dn, dv = s->dv, R = s->R, T = s->T;
    size_t wn = (size_t)H * (dn + dv) * R;
    eng_mat kv_b = {ENG_BF16, H * (dn + dv), R, dev_random_bf16(wn), NULL, 0, 0, 0, NULL};
    struct {
        const char *name;
        int in, out; /* per (token, head) */
    } op[2] = {{"absorb", dn, R}, {"expand", R, dv}};
    for (int k = 0; k < 2; k++) {
        size_t xn = (size_t)T * H * op[k].in, yn = (size_t)T * H * op[k].out;
        float *x = dev_random(xn, 2.0f);
        float *ref = dev_alloc(yn * sizeof(float)), *got = dev_alloc(yn * sizeof(float));
        float *part = dev_alloc(yn * sizeof(float));
        CUDA_OK(kern_memset(got, 0xff, yn * sizeof(float)));
        if (k == 0) {
            CUDA_OK(eng_mla_absorb(&kv_b, x, T, H, dn, dv, R, ref, NULL));
            CUDA_OK(eng_mla_absorb_prefill(&kv_b, x, T, H, dn, dv, R, got, NULL));
        } else {
            CUDA_OK(eng_mla_expand(&kv_b, x, T, H, dn, dv, R, ref, NULL));
            CUDA_OK(eng_mla_expand_prefill(&kv_b, x, T, H, dn, dv, R, got, NULL));
        }
        char what[160];
        snprintf(what, sizeof what, "%s %s H%d dn%d dv%d R%d T%d", op[k].name, s->name, H, dn, dv, R, T);
        compare(what, got, ref, yn, 2e-5);
        int t0 = T / 3 + 1, n2 = T / 2 - 3;
        CUDA_OK(kern_memset(part, 0xff, yn * sizeof(float)));
        const float *xs = x + (size_t)t0 * H * op[k].in;
        if (k == 0)
            CUDA_OK(eng_mla_absorb_prefill(&kv_b, xs, n2, H, dn, dv, R, part, NULL));
        else
            CUDA_OK(eng_mla_expand_prefill(&kv_b, xs, n2, H, dn, dv, R, part, NULL));
        snprintf(what, sizeof what, "%s %s rows %d..%d as a chunk of %d", op[k].name, s->name, t0,
                 t0 + n2 - 1, n2);
        same_bits(what, part, got + (size_t)t0 * H * op[k].out, (size_t)n2 * H * op[k].out);
        if (timed) {
            double flop = 2.0 * T * H * op[k].in * op[k].out;
            float ms[2];
            for (int v = 0; v < 2; v++) {
                CUDA_OK(eng_event_record(ev0, NULL));
                if (k == 0)
                    CUDA_OK(v ? eng_mla_absorb_prefill(&kv_b, x, T, H, dn, dv, R, got, NULL)
                              : eng_mla_absorb(&kv_b, x, T, H, dn, dv, R, ref, NULL));
                else
                    CUDA_OK(v ? eng_mla_expand_prefill(&kv_b, x, T, H, dn, dv, R, got, NULL)
                              : eng_mla_expand(&kv_b, x, T, H, dn, dv, R, ref, NULL));
                CUDA_OK(eng_event_record(ev1, NULL));
                ms[v] = time_ms(ev0, ev1);
            }
            printf("time %s %s T%d: scalar %.3f ms (%.1f TFLOP/s), tensor cores %.3f ms (%.1f "
                   "TFLOP/s, 3 bf16 parts): %.1fx\n", op[k].name, s->name, T, ms[0],
                   flop / ms[0] / 1e9, ms[1], flop / ms[1] / 1e9, ms[0] / ms[1]);
        }
        kern_free(x);
        kern_free(ref);
        kern_free(got);
        kern_free(part);
    }
    kern_free((void *)kv_b.data);
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    char name[256];
    int timed = gpu_test_begin(argc, argv, name, sizeof name);
    device_sm90 = strstr(name, "sm_90") != NULL;
    void *ev0, *ev1;
    gpu_test_events(&ev0, &ev1);
    const shape shapes[] = {
        {"real", 64, 256, 256, 512, 2051, 1024, 8192}, /* one rank, a chunk past the dense limit */
        {"tp2", 32, 256, 256, 512, 2051, 96, 4096},    /* a rank of two */
        {"odd", 20, 64, 64, 128, 67, 45, 500},         /* heads off the 16-row groups */
        {"small", 4, 64, 64, 64, 67, 37, 300},         /* mkmodel small */
    };
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++)
        check_products(&shapes[i], timed && i == 0, ev0, ev1);
    double gemm_rate = timed ? cublas_rate(ev0, ev1) : 0;
    /* the attention in the device's form, then in the small form forced (99 KiB a block) */
    const int budgets[2] = {DEVICE_SMEM, SMALL_SMEM};
    for (int b = 0; b < 2; b++) {
        smem_budget = budgets[b];
        printf("-- the attention's prefill form within %s\n",
               b == 0 ? "the device's shared memory a block (the dispatch)"
                      : "99 KiB a block (the GB10's; the small form)");
        for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) {
            check_attend(&shapes[i], ENG_CACHE_FP8);
            check_attend(&shapes[i], ENG_CACHE_BF16);
        }
        /* the real shapes at the selection layout: position 0 (dense causal rows, then
         * selections) and past 8192 (every row a selection), each cache format; the f32 cache
         * runs the scalar kernels (the prefill form's dispatch checked) */
        const int dts[3] = {ENG_CACHE_FP8, ENG_CACHE_BF16, ENG_CACHE_F32};
        for (int k = 0; k < 3; k++) {
            check_indexed("real", 64, 512, 0, 4096, dts[k], timed && k < 2, gemm_rate, ev0, ev1);
            check_indexed("real", 64, 512, 65536, 4096, dts[k], timed && k < 2, gemm_rate, ev0, ev1);
        }
        check_indexed("tp2", 32, 512, 9000, 1024, ENG_CACHE_FP8, 0, gemm_rate, ev0, ev1);
        check_indexed("tp2", 32, 512, 0, 1024, ENG_CACHE_BF16, 0, gemm_rate, ev0, ev1);
        check_indexed("heads16", 16, 512, 9000, 64, ENG_CACHE_FP8, 0, gemm_rate, ev0, ev1);
        check_indexed("heads40", 40, 512, 3000, 64, ENG_CACHE_BF16, 0, gemm_rate, ev0, ev1);
    }
    smem_budget = DEVICE_SMEM;
    printf("-- the small form against the big form with 16 heads a block: the same bits\n");
    check_form_choice();
    check_small_matches_big("real", 64, 9000, 256, ENG_CACHE_FP8);
    check_small_matches_big("real", 64, 0, 256, ENG_CACHE_BF16);
    check_small_matches_big("heads40", 40, 3000, 128, ENG_CACHE_BF16);
    check_small_matches_big("heads16", 16, 9000, 64, ENG_CACHE_FP8);
    eng_event_free(ev0);
    eng_event_free(ev1);
    printf("%s: %d failure(s)\n", failures ? "FAIL" : "PASS", failures);
    return failures ? 1 : 0;
}
