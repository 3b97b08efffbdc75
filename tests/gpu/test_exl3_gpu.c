/* test_exl3_gpu.c: glmchat's EXL3 CUDA kernels against the CPU reference (engine/model/exl3.h)
 * on fresh random trellises and inputs, outputs poisoned with NaN, every element checked. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/model/exl3.h"
#include "kernels/kernels.h"

static uint64_t rng_state;

static uint32_t rng_u32(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 16);
}

static float rng_uniform(void) /* [-1, 1) */
{
    return (float)(rng_u32() & 0xFFFFFF) / (float)0x800000 - 1.0f;
}

static int failures;

#define CUDA_OK(call)                                                                          \
    do {                                                                                       \
        int rc_ = (call);                                                                      \
        if (rc_ != 0) {                                                                        \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call,                      \
                    kern_error_string(rc_));                                                   \
            exit(1);                                                                           \
        }                                                                                      \
    } while (0)

static void *dev_copy(const void *src, size_t bytes)
{
    void *d = NULL;
    CUDA_OK(kern_malloc(&d, bytes));
    CUDA_OK(kern_to_device(d, src, bytes));
    return d;
}

static void *xmalloc(size_t bytes)
{
    void *p = malloc(bytes);
    if (!p) {
        fprintf(stderr, "test_exl3_gpu: out of memory (%zu bytes)\n", bytes);
        exit(1);
    }
    return p;
}

/* Every element finite and within tol * rms(ref); prints one line; returns the worst ratio. */
static double compare(const char *what, const float *got, const float *ref, size_t n, double tol)
{
    double sq = 0;
    for (size_t i = 0; i < n; i++)
        sq += (double)ref[i] * ref[i];
    double rms = sqrt(sq / (double)n);
    double worst = 0;
    size_t bad = 0, first_bad = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - ref[i]) / (rms > 0 ? rms : 1);
        if (!isfinite(got[i]) || !(d <= tol)) {
            if (!bad)
                first_bad = i;
            bad++;
            d = isfinite(d) ? d : INFINITY;
        }
        if (d > worst)
            worst = d;
    }
    printf("%-52s %8zu values  max|err|/rms %.2e  %s\n", what, n, worst, bad ? "FAIL" : "ok");
    if (bad) {
        printf("    %zu bad, first at %zu: got %g want %g\n", bad, first_bad, got[first_bad],
               ref[first_bad]);
        failures++;
    }
    return worst;
}

/* ---- one linear ------------------------------------------------------------------------------ */

typedef struct host_linear {
    exl3_tensor t;
    uint16_t *trellis, *suh, *svh, *bias;
    size_t words;
} host_linear;

static void host_linear_init(host_linear *h, int in, int out, int bits, int cb, int with_bias)
{
    h->words = (size_t)in / 16 * (out / 16) * 16 * bits;
    h->trellis = xmalloc(h->words * 2);
    h->suh = xmalloc((size_t)in * 2);
    h->svh = xmalloc((size_t)out * 2);
    h->bias = with_bias ? xmalloc((size_t)out * 2) : NULL;
    for (size_t i = 0; i < h->words; i++)
        h->trellis[i] = (uint16_t)rng_u32();
    double s = 1.0 / sqrt((double)in);
    for (int i = 0; i < in; i++)
        h->suh[i] = exl3_f16_from_f64(s * (0.5 + 0.5 * fabs(rng_uniform())) * (rng_u32() & 1 ? -1 : 1));
    for (int i = 0; i < out; i++)
        h->svh[i] = exl3_f16_from_f64((0.5 + 0.5 * fabs(rng_uniform())) * (rng_u32() & 1 ? -1 : 1));
    if (h->bias)
        for (int i = 0; i < out; i++)
            h->bias[i] = exl3_f16_from_f64(rng_uniform());
    h->t = (exl3_tensor){.in = in, .out = out, .bits = bits, .codebook = (exl3_codebook)cb,
                         .trellis = h->trellis, .suh = h->suh, .svh = h->svh, .bias = h->bias};
}

static void host_linear_free(host_linear *h)
{
    free(h->trellis);
    free(h->suh);
    free(h->svh);
    free(h->bias);
}

static void test_linear(int in, int out, int bits, int cb, int rows, int with_bias)
{
    host_linear h;
    host_linear_init(&h, in, out, bits, cb, with_bias);
    size_t nx = (size_t)rows * in, ny = (size_t)rows * out;
    float *x = xmalloc(nx * 4), *ref = xmalloc(ny * 4), *got = xmalloc(ny * 4);
    for (size_t i = 0; i < nx; i++)
        x[i] = rng_uniform();
    glm_error err;
    if (exl3_matmul(&h.t, x, ref, rows, &err) != GLM_OK) {
        fprintf(stderr, "reference: %s\n", err.message);
        exit(1);
    }
    kern_exl3_linear l = {.in = in, .out = out, .bits = bits, .codebook = cb};
    l.trellis = dev_copy(h.trellis, h.words * 2);
    l.suh = dev_copy(h.suh, (size_t)in * 2);
    l.svh = dev_copy(h.svh, (size_t)out * 2);
    l.bias = h.bias ? dev_copy(h.bias, (size_t)out * 2) : NULL;
    void *dx = dev_copy(x, nx * 4), *dy = NULL, *work = NULL;
    CUDA_OK(kern_malloc(&dy, ny * 4));
    CUDA_OK(kern_malloc(&work, kern_exl3_matmul_workspace(&l, rows)));
    CUDA_OK(kern_memset(dy, 0xFF, ny * 4)); /* NaN poison */
    CUDA_OK(kern_memset(work, 0xFF, kern_exl3_matmul_workspace(&l, rows)));
    CUDA_OK(kern_exl3_matmul(&l, dx, dy, rows, work, NULL));
    CUDA_OK(kern_sync());
    CUDA_OK(kern_to_host(got, dy, ny * 4));
    char what[128];
    snprintf(what, sizeof what, "linear %4dx%-4d K%d %s rows %3d%s", in, out, bits,
             cb == 0 ? "3inst" : cb == 1 ? "mcg  " : "mul1 ", rows, with_bias ? " +bias" : "");
    compare(what, got, ref, ny, 4e-3);
    kern_free((void *)l.trellis);
    kern_free((void *)l.suh);
    kern_free((void *)l.svh);
    kern_free((void *)l.bias);
    kern_free(dx);
    kern_free(dy);
    kern_free(work);
    free(x);
    free(ref);
    free(got);
    host_linear_free(&h);
}

/* ---- routed experts -------------------------------------------------------------------------- */

static float silu_limited(float g, float u, float limit)
{
    g = g < limit ? g : limit;
    u = u < -limit ? -limit : u > limit ? limit : u;
    return g / (1.0f + expf(-g)) * u;
}

/* E experts of (hidden, inter); rows tokens with `slots` distinct experts each. */
static void test_moe(int E, int hidden, int inter, int bits, int cb, int rows, int slots)
{
    host_linear *gate = xmalloc((size_t)E * sizeof *gate), *up = xmalloc((size_t)E * sizeof *up);
    host_linear *down = xmalloc((size_t)E * sizeof *down);
    for (int e = 0; e < E; e++) {
        host_linear_init(&gate[e], hidden, inter, bits, cb, 0);
        host_linear_init(&up[e], hidden, inter, bits, cb, 0);
        host_linear_init(&down[e], inter, hidden, bits, cb, 0);
        /* gate/up outputs of a few units, some past the clamp */
        for (int i = 0; i < inter; i++) {
            gate[e].svh[i] = exl3_f16_from_f64(4.0 * exl3_f16_to_f32(gate[e].svh[i]));
            up[e].svh[i] = exl3_f16_from_f64(4.0 * exl3_f16_to_f32(up[e].svh[i]));
        }
    }
    int pairs = rows * slots;
    int32_t *ids = xmalloc((size_t)pairs * 4);
    float *w = xmalloc((size_t)pairs * 4);
    for (int r = 0; r < rows; r++)
        for (int s = 0; s < slots; s++) {
            int e, dup;
            do { /* distinct within a row, as top-k is */
                e = (int)(rng_u32() % (uint32_t)E);
                dup = 0;
                for (int q = 0; q < s; q++)
                    dup |= ids[r * slots + q] == e;
            } while (dup);
            ids[r * slots + s] = e;
            w[r * slots + s] = 0.1f + 0.4f * fabsf(rng_uniform());
        }
    size_t nx = (size_t)rows * hidden;
    float *x = xmalloc(nx * 4), *ref = calloc(nx, 4), *got = xmalloc(nx * 4);
    if (!ref)
        exit(1);
    for (size_t i = 0; i < nx; i++)
        x[i] = rng_uniform();
    /* reference, expert by expert (one decode per matrix) */
    float *xs = xmalloc(nx * 4), *g = xmalloc((size_t)pairs * inter * 4);
    float *u = xmalloc((size_t)pairs * inter * 4), *d = xmalloc((size_t)pairs * hidden * 4);
    int *who = xmalloc((size_t)pairs * sizeof *who);
    glm_error err;
    const float limit = 10.0f;
    for (int e = 0; e < E; e++) {
        int n = 0;
        for (int p = 0; p < pairs; p++)
            if (ids[p] == e) {
                memcpy(xs + (size_t)n * hidden, x + (size_t)(p / slots) * hidden, (size_t)hidden * 4);
                who[n++] = p;
            }
        if (!n)
            continue;
        if (exl3_matmul(&gate[e].t, xs, g, n, &err) || exl3_matmul(&up[e].t, xs, u, n, &err)) {
            fprintf(stderr, "reference: %s\n", err.message);
            exit(1);
        }
        for (size_t i = 0; i < (size_t)n * inter; i++)
            g[i] = silu_limited(g[i], u[i], limit);
        if (exl3_matmul(&down[e].t, g, d, n, &err)) {
            fprintf(stderr, "reference: %s\n", err.message);
            exit(1);
        }
        for (int m = 0; m < n; m++) {
            int p = who[m];
            for (int j = 0; j < hidden; j++)
                ref[(size_t)(p / slots) * hidden + j] += w[p] * d[(size_t)m * hidden + j];
        }
    }
    /* device copies, stacked [E][...] */
    size_t gw = gate[0].words, dw = down[0].words;
    uint16_t *stack = xmalloc((size_t)E * (gw > dw ? gw : dw) * 2);
    kern_exl3_experts ex = {.n_experts = E, .hidden = hidden, .inter = inter, .bits = bits,
                            .codebook = cb, .swiglu_limit = limit};
#define STACK(field, member, count)                                                             \
    do {                                                                                        \
        for (int e = 0; e < E; e++)                                                             \
            memcpy(stack + (size_t)e * (count), member[e].field, (size_t)(count) * 2);          \
    } while (0)
    STACK(trellis, gate, gw);
    ex.gate_trellis = dev_copy(stack, (size_t)E * gw * 2);
    STACK(trellis, up, gw);
    ex.up_trellis = dev_copy(stack, (size_t)E * gw * 2);
    STACK(trellis, down, dw);
    ex.down_trellis = dev_copy(stack, (size_t)E * dw * 2);
    STACK(suh, gate, hidden);
    ex.gate_suh = dev_copy(stack, (size_t)E * hidden * 2);
    STACK(svh, gate, inter);
    ex.gate_svh = dev_copy(stack, (size_t)E * inter * 2);
    STACK(suh, up, hidden);
    ex.up_suh = dev_copy(stack, (size_t)E * hidden * 2);
    STACK(svh, up, inter);
    ex.up_svh = dev_copy(stack, (size_t)E * inter * 2);
    STACK(suh, down, inter);
    ex.down_suh = dev_copy(stack, (size_t)E * inter * 2);
    STACK(svh, down, hidden);
    ex.down_svh = dev_copy(stack, (size_t)E * hidden * 2);
#undef STACK
    void *dx = dev_copy(x, nx * 4), *dids = dev_copy(ids, (size_t)pairs * 4);
    void *dw_ = dev_copy(w, (size_t)pairs * 4), *dy = NULL, *work = NULL;
    size_t wbytes = kern_exl3_moe_workspace(&ex, rows, slots);
    if (!wbytes) /* past the decode kernel's pair limit: only the prefill path runs */
        wbytes = 256;
    CUDA_OK(kern_malloc(&dy, nx * 4));
    CUDA_OK(kern_malloc(&work, wbytes));
    CUDA_OK(kern_memset(work, 0, wbytes));
    for (int call = 0; call < (pairs <= KERN_EXL3_MOE_MAX_PAIRS ? 3 : 0); call++) { /* the workspace must come back ready */
        CUDA_OK(kern_memset(dy, 0xFF, nx * 4));
        CUDA_OK(kern_exl3_moe(&ex, dx, dids, dw_, dy, rows, slots, work, NULL));
        CUDA_OK(kern_sync());
        CUDA_OK(kern_to_host(got, dy, nx * 4));
        char what[128];
        snprintf(what, sizeof what, "moe E%d %dx%d K%d %s rows %2d x %d call %d", E, hidden,
                 inter, bits, cb == 0 ? "3inst" : cb == 1 ? "mcg" : "mul1", rows, slots, call + 1);
        compare(what, got, ref, nx, 4e-3);
    }
    /* the prefill path, grouped by expert: a workspace of garbage, the same result twice, bit
     * for bit */
    size_t pbytes = kern_exl3_moe_prefill_workspace(&ex, rows, slots);
    void *pwork = NULL;
    float *again = xmalloc(nx * 4);
    CUDA_OK(kern_malloc(&pwork, pbytes));
    CUDA_OK(kern_memset(pwork, 0xA5, pbytes));
    for (int call = 0; call < 2; call++) {
        CUDA_OK(kern_memset(dy, 0xFF, nx * 4));
        CUDA_OK(kern_exl3_moe_prefill(&ex, dx, dids, dw_, dy, rows, slots, pwork, NULL));
        CUDA_OK(kern_sync());
        CUDA_OK(kern_to_host(call ? again : got, dy, nx * 4));
    }
    char pwhat[128];
    snprintf(pwhat, sizeof pwhat, "moe prefill E%d %dx%d K%d %s rows %3d x %d", E, hidden, inter,
             bits, cb == 0 ? "3inst" : cb == 1 ? "mcg" : "mul1", rows, slots);
    compare(pwhat, got, ref, nx, 4e-3);
    if (memcmp(got, again, nx * 4) != 0) {
        printf("FAIL: %s: two calls differ\n", pwhat);
        failures++;
    }
    kern_free(pwork);
    free(again);
    kern_free((void *)ex.gate_trellis);
    kern_free((void *)ex.up_trellis);
    kern_free((void *)ex.down_trellis);
    kern_free((void *)ex.gate_suh);
    kern_free((void *)ex.gate_svh);
    kern_free((void *)ex.up_suh);
    kern_free((void *)ex.up_svh);
    kern_free((void *)ex.down_suh);
    kern_free((void *)ex.down_svh);
    kern_free(dx);
    kern_free(dids);
    kern_free(dw_);
    kern_free(dy);
    kern_free(work);
    for (int e = 0; e < E; e++) {
        host_linear_free(&gate[e]);
        host_linear_free(&up[e]);
        host_linear_free(&down[e]);
    }
    free(gate);
    free(up);
    free(down);
    free(ids);
    free(w);
    free(x);
    free(ref);
    free(got);
    free(xs);
    free(g);
    free(u);
    free(d);
    free(who);
    free(stack);
}

int main(int argc, char **argv)
{
    /* --quick: real shapes for gate/up only; --small: no real shapes (for compute-sanitizer) */
    int quick = argc > 1 && strcmp(argv[1], "--quick") == 0;
    int small = argc > 1 && strcmp(argv[1], "--small") == 0;
    if (kern_device_count() < 1) {
        printf("test_exl3_gpu: no CUDA device; skipped\n");
        return 77;
    }
    char name[128];
    CUDA_OK(kern_device_describe(0, name, sizeof name));
    rng_state = (uint64_t)time(NULL) * 0x9E3779B97F4A7C15ull | 1; /* fresh inputs every run */
    printf("device %s, seed %llu\n", name, (unsigned long long)rng_state);
    for (int bits = 1; bits <= 8; bits++)
        for (int cb = 0; cb < 3; cb++)
            test_linear(256, 384, bits, cb, bits % 3 == 0 ? 5 : 1, cb == 2);
    for (int bits = 2; bits <= 5; bits++)
        test_linear(384, 256, bits, bits % 3, 70, bits == 3); /* prefill path */
    int row_counts[] = {1, 4, 16, 33, 130};
    for (int i = 0; i < (small ? 0 : 5); i++) {
        test_linear(4096, 2048, 4, 1, row_counts[i], 0);
        if (!quick)
            test_linear(2048, 4096, 4, 1, row_counts[i], 0);
    }
    test_moe(8, 512, 256, 3, 0, 32, 8); /* 256 pairs: groups of 16 */
    test_moe(8, 512, 256, 2, 2, 5, 3);
    test_moe(6, 512, 384, 5, 1, 3, 2);
    test_moe(4, 512, 256, 4, 0, 4, 2); /* 4-bit 3inst and mul1 paths, k-steps below the ring */
    test_moe(5, 512, 384, 4, 2, 2, 3);
    test_moe(3, 512, 256, 4, 1, 150, 2); /* prefill only: 300 pairs, experts of 64+ rows */
    test_moe(8, 512, 384, 3, 2, 40, 4);
    int moe_rows[] = {1, 4, 16};
    for (int i = 0; i < (small ? 0 : 3); i++)
        test_moe(16, 4096, 2048, 4, 1, moe_rows[i], 8);
    test_moe(12, 1024, 512, 4, 1, 64, 8); /* a prefill chunk: 512 pairs over 12 experts */
    if (small)
        test_moe(4, 512, 256, 4, 1, 4, 2);
    printf("%s: %d failure(s)\n", failures ? "FAIL" : "PASS", failures);
    return failures ? 1 : 0;
}
