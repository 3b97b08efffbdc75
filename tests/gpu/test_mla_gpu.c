/* test_mla_gpu.c: the prefill (tensor-core) forms of the DSA latent attention, the absorbed query
 * and the value expansion against the scalar kernels, their bit-equality across chunks, and their
 * time at the real shapes. Usage: test_mla_gpu [--no-time]; exit status 1 on any failure. */
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

static float *dev_random(size_t n, float amp)
{
    float *h = xmalloc(n * sizeof *h);
    for (size_t i = 0; i < n; i++)
        h[i] = amp * test_rng_uniform(&rng_state);
    float *d = dev_copy(h, n * sizeof *h);
    free(h);
    return d;
}

static float *to_host(const float *d, size_t n)
{
    float *h = xmalloc(n * sizeof *h);
    CUDA_OK(kern_sync());
    CUDA_OK(kern_to_host(h, d, n * sizeof *h));
    return h;
}

/* got against ref: every element finite, max |diff| <= tol * max |ref|; one line. */
static void compare(const char *what, const float *d_got, const float *d_ref, size_t n, double tol)
{
    float *got = to_host(d_got, n), *ref = to_host(d_ref, n);
    double md = 0, mr = 0;
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(got[i]))
            bad++;
        double d = fabs((double)got[i] - ref[i]);
        md = d > md ? d : md;
        mr = fabs(ref[i]) > mr ? fabs(ref[i]) : mr;
    }
    int ok = bad == 0 && md <= tol * mr;
    printf("%-58s max|diff| %.3e of max|ref| %.3e (rel %.2e, tol %.0e) %s\n", what, md, mr,
           mr > 0 ? md / mr : 0.0, tol, ok ? "ok" : "FAIL");
    failures += !ok;
    free(got);
    free(ref);
}

/* rows of a (a chunk's launch) equal to the same rows of b (another launch) bit for bit */
static void same_bits(const char *what, const float *d_a, const float *d_b, size_t n)
{
    float *a = to_host(d_a, n), *b = to_host(d_b, n);
    int ok = memcmp(a, b, n * sizeof *a) == 0;
    printf("%-58s %s\n", what, ok ? "bit-equal" : "FAIL: the bits differ");
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

static const char *cache_name(int dt)
{
    return dt == ENG_CACHE_FP8 ? "fp8" : dt == ENG_CACHE_BF16 ? "bf16" : "f32";
}

/* The latent attention: random cache rows (written by eng_cache_write, so quantised as the
 * engine does), random selections of 1 .. width rows; the prefill form against eng_mla_attend;
 * rows split off from the launch (the chunk starting at T/3, T/2 rows) bit-equal. */
static void check_attend(const shape *s, int dt, int timed, void *ev0, void *ev1)
{
    int H = s->H, R = s->R, T = s->T, W = s->width;
    float *src = dev_random((size_t)s->cache_rows * R, 1.0f);
    eng_cache c = {dt, R, NULL, NULL};
    size_t esz = dt == ENG_CACHE_FP8 ? 1 : dt == ENG_CACHE_BF16 ? 2 : 4;
    c.rows = dev_alloc((size_t)s->cache_rows * R * esz);
    c.scale = dev_alloc((size_t)s->cache_rows * sizeof(float));
    int zero = 0, *d_pos = dev_copy(&zero, sizeof zero);
    CUDA_OK(eng_cache_write(&c, d_pos, src, s->cache_rows, NULL));
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
    CUDA_OK(kern_memset(got, 0xff, on * sizeof(float)));
    CUDA_OK(eng_mla_attend(&c, qt, d_idx, d_count, W, T, H, R, scale, ref, NULL));
    CUDA_OK(eng_mla_attend_prefill(&c, qt, d_idx, d_count, W, T, H, R, scale, got, NULL));
    char what[160];
    snprintf(what, sizeof what, "attend %s %s H%d R%d T%d width %d", s->name, cache_name(dt), H,
             R, T, W);
    compare(what, got, ref, on, 1e-4);
    int t0 = T / 3, n2 = T / 2;
    CUDA_OK(kern_memset(part, 0xff, on * sizeof(float)));
    CUDA_OK(eng_mla_attend_prefill(&c, qt + (size_t)t0 * H * R, d_idx + (size_t)t0 * W,
                                   d_count + t0, W, n2, H, R, scale, part, NULL));
    snprintf(what, sizeof what, "attend %s %s rows %d..%d as a chunk of %d", s->name,
             cache_name(dt), t0, t0 + n2 - 1, n2);
    same_bits(what, part, got + (size_t)t0 * H * R, (size_t)n2 * H * R);
    if (timed) {
        double sel = 0;
        for (int t = 0; t < T; t++)
            sel += count[t];
        double flop = 4.0 * sel * H * R; /* two products of 2 R flop a (head, row) */
        float ms[2];
        for (int k = 0; k < 2; k++) {
            CUDA_OK(eng_event_record(ev0, NULL));
            if (k == 0)
                CUDA_OK(eng_mla_attend(&c, qt, d_idx, d_count, W, T, H, R, scale, ref, NULL));
            else
                CUDA_OK(eng_mla_attend_prefill(&c, qt, d_idx, d_count, W, T, H, R, scale, got, NULL));
            CUDA_OK(eng_event_record(ev1, NULL));
            ms[k] = time_ms(ev0, ev1);
        }
        printf("time attend %s %s T%d: scalar %.3f ms (%.1f TFLOP/s), tensor cores %.3f ms "
               "(%.1f TFLOP/s): %.1fx\n", s->name, cache_name(dt), T, ms[0], flop / ms[0] / 1e9,
               ms[1], flop / ms[1] / 1e9, ms[0] / ms[1]);
    }
    kern_free(src);
    kern_free(c.rows);
    kern_free(c.scale);
    kern_free(d_pos);
    kern_free(d_idx);
    kern_free(d_count);
    kern_free(qt);
    kern_free(ref);
    kern_free(got);
    kern_free(part);
    free(idx);
    free(count);
}

/* The absorbed query and the value expansion with random bf16 kv_b. */
static void check_products(const shape *s, int timed, void *ev0, void *ev1)
{
    int H = s->H, dn = s->dn, dv = s->dv, R = s->R, T = s->T;
    size_t wn = (size_t)H * (dn + dv) * R;
    uint16_t *w = xmalloc(wn * sizeof *w);
    for (size_t i = 0; i < wn; i++) {
        float f = 0.05f * test_rng_uniform(&rng_state);
        uint32_t u;
        memcpy(&u, &f, sizeof u);
        w[i] = (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
    }
    eng_mat kv_b = {ENG_BF16, H * (dn + dv), R, dev_copy(w, wn * sizeof *w), NULL, 0, 0, 0, NULL};
    free(w);
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
    int timed = !(argc > 1 && strcmp(argv[1], "--no-time") == 0);
    if (kern_device_count() < 1) {
        fprintf(stderr, "test_mla_gpu: no CUDA device\n");
        return 1;
    }
    char name[256];
    kern_device_describe(0, name, sizeof name);
    printf("device %s\n", name);
    void *ev0, *ev1;
    CUDA_OK(eng_event_new(&ev0));
    CUDA_OK(eng_event_new(&ev1));
    const shape shapes[] = {
        {"real", 64, 256, 256, 512, 2051, 1024, 8192}, /* one rank, a chunk past the dense limit */
        {"tp2", 32, 256, 256, 512, 2051, 96, 4096},    /* a rank of two */
        {"odd", 20, 64, 64, 128, 67, 45, 500},         /* heads off the 16-row groups */
        {"small", 4, 64, 64, 64, 67, 37, 300},         /* mkmodel small */
    };
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) {
        int t = timed && i == 0;
        check_attend(&shapes[i], ENG_CACHE_FP8, t, ev0, ev1);
        check_attend(&shapes[i], ENG_CACHE_BF16, t, ev0, ev1);
        check_products(&shapes[i], t, ev0, ev1);
    }
    eng_event_free(ev0);
    eng_event_free(ev1);
    printf("%s: %d failure(s)\n", failures ? "FAIL" : "PASS", failures);
    return failures ? 1 : 0;
}
