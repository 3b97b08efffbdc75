/* test_exl3_gpu.c: glmchat's EXL3 CUDA kernels against the CPU reference (engine/model/exl3.h)
 * on fresh random trellises and inputs, outputs poisoned with NaN, every element checked; and
 * their determinism: a row's output bits alone, among other rows, in another place, run twice. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/model/exl3.h"
#include "kernels/kernels.h"

#define GPU_TEST_NAME "test_exl3_gpu"
#include "tests/gpu/gpu_test.h"
#include "tests/common/rng.h"

/* The grouped prefill kernels kern_exl3_set_grouped chooses from, each checked and its name. */
static const int grouped_kernels[] = {KERN_EXL3_GROUPED_PIPE_64,
                                      KERN_EXL3_GROUPED_PIPE_128_ONCE, KERN_EXL3_GROUPED_AUTO};
static const char *const grouped_names[] = {"pipe 64", "pipe 128 once", "auto"};
enum { N_GROUPED = sizeof grouped_kernels / sizeof grouped_kernels[0] };
/* a kernel added to one list and not the other is a build error, not a name read out of bounds */
_Static_assert(sizeof grouped_names / sizeof grouped_names[0] == N_GROUPED,
               "every grouped kernel checked has its name");

static uint64_t rng_state;

static int failures;

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
        h->trellis[i] = (uint16_t)test_rng_u32(&rng_state);
    double s = 1.0 / sqrt((double)in);
    for (int i = 0; i < in; i++)
        h->suh[i] = exl3_f16_from_f64(s * (0.5 + 0.5 * fabs(test_rng_uniform(&rng_state))) * (test_rng_u32(&rng_state) & 1 ? -1 : 1));
    for (int i = 0; i < out; i++)
        h->svh[i] = exl3_f16_from_f64((0.5 + 0.5 * fabs(test_rng_uniform(&rng_state))) * (test_rng_u32(&rng_state) & 1 ? -1 : 1));
    if (h->bias)
        for (int i = 0; i < out; i++)
            h->bias[i] = exl3_f16_from_f64(test_rng_uniform(&rng_state));
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
        x[i] = test_rng_uniform(&rng_state);
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
                e = (int)(test_rng_u32(&rng_state) % (uint32_t)E);
                dup = 0;
                for (int q = 0; q < s; q++)
                    dup |= ids[r * slots + q] == e;
            } while (dup);
            ids[r * slots + s] = e;
            w[r * slots + s] = 0.1f + 0.4f * fabsf(test_rng_uniform(&rng_state));
        }
    size_t nx = (size_t)rows * hidden;
    float *x = xmalloc(nx * 4), *ref = calloc(nx, 4), *got = xmalloc(nx * 4);
    if (!ref)
        exit(1);
    for (size_t i = 0; i < nx; i++)
        x[i] = test_rng_uniform(&rng_state);
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
/* dst: the experts' member[e].field (count 16-bit words each) stacked [E][count] on the device */
#define STACK(dst, field, member, count)                                                        \
    do {                                                                                        \
        for (int e = 0; e < E; e++)                                                             \
            memcpy(stack + (size_t)e * (count), member[e].field, (size_t)(count) * 2);          \
        (dst) = dev_copy(stack, (size_t)E * (count) * 2);                                       \
    } while (0)
    STACK(ex.gate_trellis, trellis, gate, gw);
    STACK(ex.up_trellis, trellis, up, gw);
    STACK(ex.down_trellis, trellis, down, dw);
    STACK(ex.gate_suh, suh, gate, hidden);
    STACK(ex.gate_svh, svh, gate, inter);
    STACK(ex.up_suh, suh, up, hidden);
    STACK(ex.up_svh, svh, up, inter);
    STACK(ex.down_suh, suh, down, inter);
    STACK(ex.down_svh, svh, down, hidden);
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
     * for bit; each grouped kernel (64 and 128 rows a pass, the automatic choice) against
     * the CPU and in the first one's bits */
    size_t pbytes = kern_exl3_moe_prefill_workspace(&ex, rows, slots);
    void *pwork = NULL;
    float *again = xmalloc(nx * 4), *first = xmalloc(nx * 4);
    CUDA_OK(kern_malloc(&pwork, pbytes));
    CUDA_OK(kern_memset(pwork, 0xA5, pbytes));
    for (int v = 0; v < N_GROUPED; v++) {
        CUDA_OK(kern_exl3_set_grouped(grouped_kernels[v]));
        for (int call = 0; call < 2; call++) {
            CUDA_OK(kern_memset(dy, 0xFF, nx * 4));
            CUDA_OK(kern_exl3_moe_prefill(&ex, dx, dids, dw_, dy, rows, slots, pwork, NULL));
            CUDA_OK(kern_sync());
            CUDA_OK(kern_to_host(call ? again : got, dy, nx * 4));
        }
        char pwhat[160];
        snprintf(pwhat, sizeof pwhat, "moe prefill (%s) E%d %dx%d K%d %s rows %3d x %d", grouped_names[v],
                 E, hidden, inter, bits, cb == 0 ? "3inst" : cb == 1 ? "mcg" : "mul1", rows, slots);
        compare(pwhat, got, ref, nx, 4e-3);
        if (memcmp(got, again, nx * 4) != 0) {
            printf("FAIL: %s: two calls differ\n", pwhat);
            failures++;
        }
        if (v == 0) {
            memcpy(first, got, nx * 4);
        } else if (memcmp(got, first, nx * 4) != 0) {
            printf("FAIL: %s: its bits differ from the pipe-64 kernel's\n", pwhat);
            failures++;
        }
    }
    CUDA_OK(kern_exl3_set_grouped(KERN_EXL3_GROUPED_AUTO));
    free(first);
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

/* ---- the grouped products alone ------------------------------------------------------------ */

/* tests/gpu/exl3_grouped_ref.cu: the definition of the grouped products' bits (a warp an n-tile,
 * each k-tile decoded and multiplied in order, no staging); kern_exl3_grouped_product's
 * arguments, synchronized. */
int test_grouped_reference(const void *trellis, int bits, int codebook, int in, int out,
                           int n_experts, const int *offsets, const void *xh, float *z);

/* Experts of 1, 15, 16, 17, 0, 63, 64, 65, 127, 128, 129, 300 and 0 rows: every grouped kernel
 * (kern_exl3_set_grouped) bit for bit against the GPU reference, with NaN-poisoned outputs, and
 * against the CPU's decoded tiles in double (with_cpu; the reference too). */
static void test_grouped_products(int in, int out, int bits, int cb, int with_cpu)
{
    static const int counts[] = {1, 15, 16, 17, 0, 63, 64, 65, 127, 128, 129, 300, 0};
    enum { E = sizeof counts / sizeof counts[0] };
    int offsets[E + 1] = {0};
    for (int e = 0; e < E; e++)
        offsets[e + 1] = offsets[e] + counts[e];
    int P = offsets[E], ktiles = in / 16, ntiles = out / 16;
    size_t mat_words = (size_t)ktiles * ntiles * 16 * bits; /* uint16 words an expert */
    uint16_t *tr = xmalloc((size_t)E * mat_words * 2), *xh = xmalloc((size_t)P * in * 2);
    for (size_t i = 0; i < (size_t)E * mat_words; i++)
        tr[i] = (uint16_t)test_rng_u32(&rng_state);
    for (size_t i = 0; i < (size_t)P * in; i++)
        xh[i] = exl3_f16_from_f64(test_rng_uniform(&rng_state));
    size_t nz = (size_t)P * out;
    float *ref = xmalloc(nz * 4), *got = xmalloc(nz * 4);
    void *dtr = dev_copy(tr, (size_t)E * mat_words * 2), *dxh = dev_copy(xh, (size_t)P * in * 2);
    void *doff = dev_copy(offsets, sizeof offsets), *dz = dev_alloc(nz * 4);
    const char *cbn = cb == 0 ? "3inst" : cb == 1 ? "mcg" : "mul1";
    char what[160];
    CUDA_OK(kern_memset(dz, 0xFF, nz * 4)); /* NaN poison */
    CUDA_OK(test_grouped_reference(dtr, bits, cb, in, out, E, doff, dxh, dz));
    CUDA_OK(kern_to_host(ref, dz, nz * 4));
    if (with_cpu) {
        /* z[pos][n] = sum_k x[pos][k] W_e[k][n] in double, W_e from the CPU's tile decode */
        float *w = xmalloc((size_t)in * out * 4), *xf = xmalloc((size_t)in * 4);
        float *cpu = xmalloc(nz * 4);
        double *row = xmalloc((size_t)out * sizeof *row);
        uint16_t tile[EXL3_TILE_VALUES];
        for (int e = 0; e < E; e++) {
            if (!counts[e])
                continue;
            for (int kt = 0; kt < ktiles; kt++)
                for (int nt = 0; nt < ntiles; nt++) {
                    exl3_decode_tile(tr + e * mat_words + ((size_t)kt * ntiles + nt) * 16 * bits,
                                     bits, (exl3_codebook)cb, tile);
                    for (int r = 0; r < 16; r++)
                        for (int c = 0; c < 16; c++)
                            w[(size_t)(kt * 16 + r) * out + nt * 16 + c] =
                                exl3_f16_to_f32(tile[r * 16 + c]);
                }
            for (int pos = offsets[e]; pos < offsets[e + 1]; pos++) {
                for (int k = 0; k < in; k++)
                    xf[k] = exl3_f16_to_f32(xh[(size_t)pos * in + k]);
                for (int n = 0; n < out; n++)
                    row[n] = 0;
                for (int k = 0; k < in; k++)
                    for (int n = 0; n < out; n++)
                        row[n] += (double)xf[k] * w[(size_t)k * out + n];
                for (int n = 0; n < out; n++)
                    cpu[(size_t)pos * out + n] = (float)row[n];
            }
        }
        snprintf(what, sizeof what, "grouped reference %dx%d K%d %s, CPU", in, out, bits, cbn);
        compare(what, ref, cpu, nz, 1e-3);
        free(w);
        free(xf);
        free(row);
        free(cpu);
    }
    for (int v = 0; v < N_GROUPED; v++) {
        CUDA_OK(kern_exl3_set_grouped(grouped_kernels[v]));
        CUDA_OK(kern_memset(dz, 0xFF, nz * 4));
        CUDA_OK(kern_exl3_grouped_product(dtr, bits, cb, in, out, E, doff, P, dxh, dz, NULL));
        CUDA_OK(kern_sync());
        CUDA_OK(kern_to_host(got, dz, nz * 4));
        size_t differ = 0, first = 0;
        for (size_t i = 0; i < nz; i++)
            if (memcmp(&got[i], &ref[i], 4) != 0 && !differ++)
                first = i;
        printf("grouped %-15s %4dx%-4d K%d %-5s rows 1..300 %8zu values  %s\n", grouped_names[v], in, out,
               bits, cbn, nz, differ ? "FAIL: bits differ from the reference" : "same bits ok");
        if (differ) {
            printf("    %zu differ, first at row %zu col %zu: got %.9g want %.9g\n", differ,
                   first / out, first % out, got[first], ref[first]);
            failures++;
        }
    }
    CUDA_OK(kern_exl3_set_grouped(KERN_EXL3_GROUPED_AUTO));
    kern_free(dtr);
    kern_free(dxh);
    kern_free(doff);
    kern_free(dz);
    free(tr);
    free(xh);
    free(ref);
    free(got);
}

/* ---- determinism and batch invariance ----------------------------------------------------- */

/* Random stacked experts on the device (no host reference needed: the checks compare GPU
 * results with each other). Scales as host_linear_init draws them, gate/up outputs x4. */
static void dev_experts_init(kern_exl3_experts *ex, int E, int hidden, int inter, int bits, int cb)
{
    *ex = (kern_exl3_experts){.n_experts = E, .hidden = hidden, .inter = inter, .bits = bits,
                              .codebook = cb, .swiglu_limit = 10.0f};
    size_t words = (size_t)E * hidden / 16 * (inter / 16) * 16 * bits;
    uint16_t *buf = xmalloc(words * 2);
    const void **tr[3] = {&ex->gate_trellis, &ex->up_trellis, &ex->down_trellis};
    for (int m = 0; m < 3; m++) {
        for (size_t i = 0; i < words; i++)
            buf[i] = (uint16_t)test_rng_u32(&rng_state);
        *tr[m] = dev_copy(buf, words * 2);
    }
    /* gate_suh, up_suh [E][hidden]; gate_svh, up_svh, down_suh [E][inter]; down_svh [E][hidden] */
    const void **sc[6] = {&ex->gate_suh, &ex->up_suh, &ex->gate_svh, &ex->up_svh, &ex->down_suh,
                          &ex->down_svh};
    int len[6] = {hidden, hidden, inter, inter, inter, hidden};
    double mag[6] = {1.0 / sqrt((double)hidden), 1.0 / sqrt((double)hidden), 4.0, 4.0,
                     1.0 / sqrt((double)inter), 1.0};
    for (int m = 0; m < 6; m++) {
        size_t n = (size_t)E * len[m];
        for (size_t i = 0; i < n; i++)
            buf[i] = exl3_f16_from_f64(mag[m] * (0.5 + 0.5 * fabs(test_rng_uniform(&rng_state))) *
                                       (test_rng_u32(&rng_state) & 1 ? -1 : 1));
        *sc[m] = dev_copy(buf, n * 2);
    }
    free(buf);
}

static void dev_experts_free(kern_exl3_experts *ex)
{
    const void *p[9] = {ex->gate_trellis, ex->up_trellis, ex->down_trellis, ex->gate_suh,
                        ex->gate_svh, ex->up_suh, ex->up_svh, ex->down_suh, ex->down_svh};
    for (int i = 0; i < 9; i++)
        kern_free((void *)p[i]);
}

/* One routed-expert call on host arrays: decode = kern_exl3_moe (work: its zeroed workspace),
 * else kern_exl3_moe_prefill (a fresh workspace of garbage). y: rows * hidden floats. */
static void moe_call(const kern_exl3_experts *ex, int decode, const float *x, const int32_t *ids,
                     const float *w, int rows, int slots, void *work, float *y)
{
    size_t nx = (size_t)rows * ex->hidden, np = (size_t)rows * slots;
    void *dx = dev_copy(x, nx * 4), *dids = dev_copy(ids, np * 4), *dw = dev_copy(w, np * 4);
    void *dy = NULL, *pwork = NULL;
    CUDA_OK(kern_malloc(&dy, nx * 4));
    CUDA_OK(kern_memset(dy, 0xFF, nx * 4));
    if (decode) {
        CUDA_OK(kern_exl3_moe(ex, dx, dids, dw, dy, rows, slots, work, NULL));
    } else {
        size_t pb = kern_exl3_moe_prefill_workspace(ex, rows, slots);
        CUDA_OK(kern_malloc(&pwork, pb));
        CUDA_OK(kern_memset(pwork, 0xA5, pb));
        CUDA_OK(kern_exl3_moe_prefill(ex, dx, dids, dw, dy, rows, slots, pwork, NULL));
    }
    CUDA_OK(kern_sync());
    CUDA_OK(kern_to_host(y, dy, nx * 4));
    kern_free(dx);
    kern_free(dids);
    kern_free(dw);
    kern_free(dy);
    kern_free(pwork);
}

/* `slots` distinct experts of E, or -1 where invalid (the kernels skip such slots). */
static void draw_ids(int32_t *ids, int slots, int E)
{
    for (int s = 0; s < slots; s++) {
        int e, dup;
        do {
            e = (int)(test_rng_u32(&rng_state) % (uint32_t)E);
            dup = 0;
            for (int q = 0; q < s; q++)
                dup |= ids[q] == e;
        } while (dup);
        ids[s] = e;
    }
}

static void shuffle(int *v, int n)
{
    for (int i = n - 1; i > 0; i--) {
        int j = (int)(test_rng_u32(&rng_state) % (uint32_t)(i + 1)), t = v[i];
        v[i] = v[j];
        v[j] = t;
    }
}

/* Prints one determinism check; counts a failure when bad rows were found. */
static void report_bits(const char *what, int rows_checked, int rows_bad)
{
    printf("%-64s %4d rows  %s\n", what, rows_checked, rows_bad ? "FAIL" : "bit-equal ok");
    if (rows_bad) {
        printf("    %d row(s) differ in some bit\n", rows_bad);
        failures++;
    }
}

/* kern_exl3_moe: 16 tokens (one with an invalid slot, one with none valid) over E experts; each
 * row's output alone must equal, bit for bit, its output in batches of 2, 4 and 16 rows in
 * shuffled order, and a second run of the same batch must equal the first. E small: experts
 * shared by many rows (groups of 9-16 pairs); E large: mostly groups of one. */
static void test_moe_bits(int E, int hidden, int inter, int bits, int cb, int slots)
{
    enum { N = 16 };
    kern_exl3_experts ex;
    dev_experts_init(&ex, E, hidden, inter, bits, cb);
    size_t wb = kern_exl3_moe_workspace(&ex, N, slots);
    void *work = NULL;
    CUDA_OK(kern_malloc(&work, wb));
    CUDA_OK(kern_memset(work, 0, wb));
    size_t H = (size_t)hidden;
    float *x = xmalloc(N * H * 4), *w = xmalloc((size_t)N * slots * 4);
    int32_t *ids = xmalloc((size_t)N * slots * 4);
    for (size_t i = 0; i < N * H; i++)
        x[i] = test_rng_uniform(&rng_state);
    for (int r = 0; r < N; r++) {
        draw_ids(ids + (size_t)r * slots, slots, E);
        for (int s = 0; s < slots; s++)
            w[r * slots + s] = 0.1f + 0.4f * fabsf(test_rng_uniform(&rng_state));
    }
    ids[3 * slots + (slots > 1 ? 1 : 0)] = -1;
    for (int s = 0; s < slots; s++)
        ids[5 * slots + s] = E + s; /* out of range: contributes nothing */
    float *alone = xmalloc(N * H * 4), *got = xmalloc(N * H * 4), *again = xmalloc(N * H * 4);
    for (int r = 0; r < N; r++)
        moe_call(&ex, 1, x + r * H, ids + (size_t)r * slots, w + (size_t)r * slots, 1, slots,
                 work, alone + r * H);
    int zero_bad = 0;
    for (size_t i = 0; i < H; i++)
        zero_bad |= alone[5 * H + i] != 0.0f;
    if (zero_bad) {
        printf("FAIL: moe: a row with no valid expert is not all zeros\n");
        failures++;
    }
    const char *cbn = cb == 0 ? "3inst" : cb == 1 ? "mcg" : "mul1";
    int counts[] = {2, 4, 16};
    float *bx = xmalloc(N * H * 4), *bw = xmalloc((size_t)N * slots * 4);
    int32_t *bids = xmalloc((size_t)N * slots * 4);
    for (int c = 0; c < 3; c++) {
        int n = counts[c], checked = 0, bad = 0;
        for (int trial = 0; trial < (n == N ? 2 : 4); trial++) {
            int order[N];
            for (int i = 0; i < N; i++)
                order[i] = i;
            shuffle(order, N);
            for (int i = 0; i < n; i++) {
                memcpy(bx + i * H, x + order[i] * H, H * 4);
                memcpy(bids + (size_t)i * slots, ids + (size_t)order[i] * slots, (size_t)slots * 4);
                memcpy(bw + (size_t)i * slots, w + (size_t)order[i] * slots, (size_t)slots * 4);
            }
            moe_call(&ex, 1, bx, bids, bw, n, slots, work, got);
            for (int i = 0; i < n; i++, checked++)
                bad += memcmp(got + i * H, alone + order[i] * H, H * 4) != 0;
            if (n == N && trial == 0) { /* (b) the same batch again */
                moe_call(&ex, 1, bx, bids, bw, n, slots, work, again);
                char what[128];
                snprintf(what, sizeof what, "moe bits E%d %dx%d K%d %s: 16 rows, run twice", E,
                         hidden, inter, bits, cbn);
                int rb = 0;
                for (int i = 0; i < n; i++)
                    rb += memcmp(got + i * H, again + i * H, H * 4) != 0;
                report_bits(what, n, rb);
            }
        }
        char what[128];
        snprintf(what, sizeof what, "moe bits E%d %dx%d K%d %s: alone vs %2d rows shuffled", E,
                 hidden, inter, bits, cbn, n);
        report_bits(what, checked, bad);
    }
    kern_free(work);
    dev_experts_free(&ex);
    free(x);
    free(w);
    free(ids);
    free(alone);
    free(got);
    free(again);
    free(bx);
    free(bw);
    free(bids);
}

/* kern_exl3_moe_prefill: one token's row alone, among 8 fillers, and among 299 others of which
 * many share its experts (experts of 1, a few, and over 64 rows), placed at another position. */
static void test_moe_prefill_bits(int E, int hidden, int inter, int bits, int cb, int slots)
{
    kern_exl3_experts ex;
    dev_experts_init(&ex, E, hidden, inter, bits, cb);
    enum { BIG = 300 };
    size_t H = (size_t)hidden;
    float *x = xmalloc(BIG * H * 4), *w = xmalloc((size_t)BIG * slots * 4);
    int32_t *ids = xmalloc((size_t)BIG * slots * 4);
    float *y = xmalloc(BIG * H * 4), *alone = xmalloc(H * 4);
    float *x0 = xmalloc(H * 4), w0[64];
    int32_t ids0[64];
    for (size_t i = 0; i < H; i++)
        x0[i] = test_rng_uniform(&rng_state);
    draw_ids(ids0, slots, E);
    for (int s = 0; s < slots; s++)
        w0[s] = 0.1f + 0.4f * fabsf(test_rng_uniform(&rng_state));
    moe_call(&ex, 0, x0, ids0, w0, 1, slots, NULL, alone);
    const char *cbn = cb == 0 ? "3inst" : cb == 1 ? "mcg" : "mul1";
    int sizes[] = {9, BIG}, places[] = {4, 217};
    for (int c = 0; c < 2; c++) {
        int rows = sizes[c], at = places[c];
        for (size_t i = 0; i < (size_t)rows * H; i++)
            x[i] = test_rng_uniform(&rng_state);
        for (int r = 0; r < rows; r++) {
            int32_t *ri = ids + (size_t)r * slots;
            draw_ids(ri, slots, E);
            if (r % 3 != 2) /* most fillers take one of the token's experts too */
                ri[r % slots] = ids0[(r / 3) % slots];
            for (int q = 0; q < slots; q++) /* keep them distinct */
                if (q != r % slots && ri[q] == ri[r % slots])
                    ri[q] = -1;
            for (int s = 0; s < slots; s++)
                w[r * slots + s] = 0.1f + 0.4f * fabsf(test_rng_uniform(&rng_state));
        }
        memcpy(x + (size_t)at * H, x0, H * 4);
        memcpy(ids + (size_t)at * slots, ids0, (size_t)slots * 4);
        memcpy(w + (size_t)at * slots, w0, (size_t)slots * 4);
        moe_call(&ex, 0, x, ids, w, rows, slots, NULL, y);
        char what[128];
        snprintf(what, sizeof what, "moe prefill bits E%d %dx%d K%d %s: alone vs row %d of %d", E,
                 hidden, inter, bits, cbn, at, rows);
        report_bits(what, 1, memcmp(y + (size_t)at * H, alone, H * 4) != 0);
    }
    dev_experts_free(&ex);
    free(x);
    free(w);
    free(ids);
    free(y);
    free(alone);
    free(x0);
}

/* kern_exl3_matmul: one row x0 at T = 1, 5, 17, 64, 300 rows (at a different place each time):
 * equal bits within a path (T <= 16: the GEMV; above: the prefill GEMM); across the two paths
 * the bits are expected to differ (printed, not a failure). */
static void test_linear_bits(int in, int out, int bits, int cb)
{
    host_linear h;
    host_linear_init(&h, in, out, bits, cb, cb == 2);
    kern_exl3_linear l = {.in = in, .out = out, .bits = bits, .codebook = cb};
    l.trellis = dev_copy(h.trellis, h.words * 2);
    l.suh = dev_copy(h.suh, (size_t)in * 2);
    l.svh = dev_copy(h.svh, (size_t)out * 2);
    l.bias = h.bias ? dev_copy(h.bias, (size_t)out * 2) : NULL;
    enum { NT = 5 };
    int Ts[NT] = {1, 5, 17, 64, 300}, at[NT] = {0, 3, 16, 29, 211};
    float *x = xmalloc((size_t)300 * in * 4), *y = xmalloc((size_t)300 * out * 4);
    float *x0 = xmalloc((size_t)in * 4), *row[NT];
    for (int i = 0; i < in; i++)
        x0[i] = test_rng_uniform(&rng_state);
    void *work = NULL;
    size_t wb = kern_exl3_matmul_workspace(&l, 300);
    CUDA_OK(kern_malloc(&work, wb));
    for (int k = 0; k < NT; k++) {
        int T = Ts[k];
        for (size_t i = 0; i < (size_t)T * in; i++)
            x[i] = test_rng_uniform(&rng_state);
        memcpy(x + (size_t)at[k] * in, x0, (size_t)in * 4);
        void *dx = dev_copy(x, (size_t)T * in * 4), *dy = NULL;
        CUDA_OK(kern_malloc(&dy, (size_t)T * out * 4));
        CUDA_OK(kern_memset(work, 0xFF, wb));
        CUDA_OK(kern_exl3_matmul(&l, dx, dy, T, work, NULL));
        CUDA_OK(kern_sync());
        CUDA_OK(kern_to_host(y, dy, (size_t)T * out * 4));
        row[k] = xmalloc((size_t)out * 4);
        memcpy(row[k], y + (size_t)at[k] * out, (size_t)out * 4);
        kern_free(dx);
        kern_free(dy);
    }
    const char *cbn = cb == 0 ? "3inst" : cb == 1 ? "mcg" : "mul1";
    char what[128];
    snprintf(what, sizeof what, "linear bits %dx%d K%d %s: GEMV path, T = 1 vs 5", in, out, bits, cbn);
    report_bits(what, 1, memcmp(row[0], row[1], (size_t)out * 4) != 0);
    snprintf(what, sizeof what, "linear bits %dx%d K%d %s: prefill path, T = 17 vs 64, 300", in, out,
             bits, cbn);
    report_bits(what, 2, (memcmp(row[2], row[3], (size_t)out * 4) != 0) +
                             (memcmp(row[2], row[4], (size_t)out * 4) != 0));
    printf("    (GEMV vs prefill path: %s; expected to differ)\n",
           memcmp(row[0], row[2], (size_t)out * 4) ? "bits differ" : "bits equal");
    for (int k = 0; k < NT; k++)
        free(row[k]);
    kern_free(work);
    kern_free((void *)l.trellis);
    kern_free((void *)l.suh);
    kern_free((void *)l.svh);
    kern_free((void *)l.bias);
    free(x);
    free(y);
    free(x0);
    host_linear_free(&h);
}

/* kern_exl3_set_grouped takes the two kernels and AUTO, and refuses any other value without
 * changing the kernel in use. */
static void test_grouped_choice(void)
{
    static const int known[] = {KERN_EXL3_GROUPED_PIPE_64, KERN_EXL3_GROUPED_PIPE_128_ONCE,
                                KERN_EXL3_GROUPED_AUTO};
    for (int i = 0; i < 3; i++)
        if (kern_exl3_set_grouped(known[i]) != 0 || kern_exl3_grouped() != known[i]) {
            printf("FAIL: kern_exl3_set_grouped(%d) not taken\n", known[i]);
            failures++;
        }
    static const int unknown[] = {-1, KERN_EXL3_GROUPED_PIPE_128_ONCE + 1, 7, 1000};
    CUDA_OK(kern_exl3_set_grouped(KERN_EXL3_GROUPED_PIPE_64));
    for (int i = 0; i < 4; i++)
        if (kern_exl3_set_grouped(unknown[i]) != -1 ||
            kern_exl3_grouped() != KERN_EXL3_GROUPED_PIPE_64) {
            printf("FAIL: kern_exl3_set_grouped(%d) not refused\n", unknown[i]);
            failures++;
        }
    CUDA_OK(kern_exl3_set_grouped(KERN_EXL3_GROUPED_AUTO));
    printf("grouped kernel choice: two kernels and auto taken, other values refused\n");
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
    test_grouped_choice();
    /* the grouped products at every row count that crosses a tile or pass edge */
    test_grouped_products(1024, 512, 4, 1, 1);
    test_grouped_products(512, 256, 4, 0, 1);
    test_grouped_products(512, 384, 4, 2, 1);
    test_grouped_products(512, 256, 3, 2, 1);
    test_grouped_products(256, 512, 8, 0, 1);
    if (!small) {
        test_grouped_products(4096, 2048, 4, 1, 0); /* gate/up */
        test_grouped_products(2048, 4096, 4, 1, 0); /* down */
    }
    test_moe(8, 512, 256, 3, 0, 32, 8); /* 256 pairs: groups of 16 */
    test_moe(8, 512, 256, 2, 2, 5, 3);
    test_moe(6, 512, 384, 5, 1, 3, 2);
    test_moe(4, 512, 256, 4, 0, 4, 2); /* 4-bit 3inst and mul1 paths, k-steps below the ring */
    test_moe(5, 512, 384, 4, 2, 2, 3);
    test_moe(3, 512, 256, 4, 1, 150, 2); /* prefill only: 300 pairs, experts of 64+ rows */
    test_moe(8, 512, 384, 3, 2, 40, 4);
    test_moe(2, 512, 384, 3, 2, 203, 2); /* prefill only: experts of 203 rows (128 + 75), any-K */
    test_moe(2, 1024, 256, 4, 1, 300, 2); /* 300 rows an expert: 128 + 128 + 44 */
    int moe_rows[] = {1, 4, 16};
    for (int i = 0; i < (small ? 0 : 3); i++)
        test_moe(16, 4096, 2048, 4, 1, moe_rows[i], 8);
    test_moe(12, 1024, 512, 4, 1, 64, 8); /* a prefill chunk: 512 pairs over 12 experts */
    if (small)
        test_moe(4, 512, 256, 4, 1, 4, 2);
    /* determinism and batch invariance (bits, not tolerances) */
    test_moe_bits(6, 512, 256, 4, 1, 4);   /* shared experts: groups of 9-16 pairs */
    test_moe_bits(40, 512, 384, 4, 0, 8);  /* 3inst, mostly groups of one */
    test_moe_bits(8, 512, 256, 4, 2, 3);   /* mul1 (pair form) */
    test_moe_bits(8, 512, 256, 3, 1, 2);   /* any-K decode */
    if (!small)
        test_moe_bits(24, 4096, 2048, 4, 1, 8); /* the real shapes */
    test_moe_prefill_bits(10, 512, 256, 4, 1, 8);
    test_moe_prefill_bits(10, 512, 384, 3, 2, 4);
    if (!small)
        test_moe_prefill_bits(16, 4096, 2048, 4, 1, 8);
    test_linear_bits(256, 384, 4, 1);
    test_linear_bits(384, 256, 3, 0);
    test_linear_bits(512, 256, 4, 2);
    if (!small)
        test_linear_bits(4096, 2048, 4, 1);
    printf("%s: %d failure(s)\n", failures ? "FAIL" : "PASS", failures);
    return failures ? 1 : 0;
}
