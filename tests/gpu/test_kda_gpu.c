/* test_kda_gpu.c: the KDA prefill kernels bit for bit: the delta rule (eng_kda_scan_trail)
 * against a C reference doing the same float operations in the same order, it and the conv with
 * the q/k norms (eng_kda_conv_norm) and the gates (eng_kda_gate) against the decode path's
 * kernels run a token at a time (the equality prompt reuse relies on: a resumed turn must equal a
 * full prefill), the decode step (eng_kda_step_decode) against the step in double and, bit for
 * bit, against itself a row a call and against the prefill path's kernels, eng_kda_scan_norm
 * against the prefill path's delta rule and gated norm; then their times at GLM-5.3-Flash's
 * prefill shape against their floors, and the step's at its decode shape.
 * Usage: test_kda_gpu [--no-time]; exit 1 on any failure. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "kernels/engine.h"
#include "kernels/kernels.h"
#include "model/numfmt.h"

#define GPU_TEST_NAME "test_kda_gpu"
#include "tests/gpu/gpu_test.h"
#include "tests/common/rng.h"

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static int failures;

static float frand(void) /* [-1, 1) */
{
    return test_rng_uniform(&rng_state);
}

static float urand(void) /* [0, 1) */
{
    return 0.5f * (frand() + 1.0f);
}

static uint32_t bits_of(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* got and want equal bit for bit (n floats); the first difference is shown. */
static void same_bits(const char *what, const float *got, const float *want, size_t n)
{
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < n; i++)
        if (bits_of(got[i]) != bits_of(want[i]) && !bad++)
            first = i;
    if (bad)
        printf("FAIL %s: %zu of %zu differ (first at %zu: %a against %a)\n", what, bad, n, first,
               (double)got[first], (double)want[first]);
    else
        printf("ok   %s (%zu values)\n", what, n);
    failures += bad != 0;
}

/* The device's expf of each x[i], through eng_kda_gate: with dt_bias 0 and the gate input 32
 * (past softplus's threshold of 20) it writes -expf(A_log) * 32, a scaling by a power of two
 * (exact), so A_log = x gives the kernels' own expf. Checked against libm within 2 ulp (CUDA's
 * bound for expf), so that it is the exponential at all. */
static float *device_exp(const float *x, size_t n)
{
    float *h32 = xmalloc(n * sizeof *h32);
    for (size_t i = 0; i < n; i++)
        h32[i] = 32.0f;
    float *g = dev_copy(h32, n * sizeof(float)), *A = dev_copy(x, n * sizeof(float));
    float *beta = dev_alloc(n * sizeof(float)), *bias = dev_alloc(n * sizeof(float));
    CUDA_OK(kern_memset(bias, 0, n * sizeof(float)));
    CUDA_OK(kern_memset(beta, 0, n * sizeof(float)));
    CUDA_OK(eng_kda_gate(g, beta, A, bias, 1, (int)n, 1, 0, 0.0f, NULL));
    float *e = to_host(g, n * sizeof(float));
    size_t far = 0;
    for (size_t i = 0; i < n; i++) {
        e[i] = e[i] / -32.0f;
        float want = expf(x[i]);
        int32_t d = (int32_t)bits_of(e[i]) - (int32_t)bits_of(want);
        far += d > 2 || d < -2;
    }
    if (far) {
        printf("FAIL the device exp oracle: %zu of %zu values more than 2 ulp from libm's expf\n",
               far, n);
        failures++;
    }
    free(h32);
    kern_free(g), kern_free(A), kern_free(beta), kern_free(bias);
    return e;
}

/* ---- the delta rule ------------------------------------------------------------------------ */

/* The delta rule as the kernels compute it, column j of head h: slice s (0 .. 7) keeps rows
 * s + 8 r; per token each row's state is scaled by exp(g) (a) and its products with k summed
 * over the slice's rows in ascending order by fused multiply-adds from 0; the slices' partials
 * summed in order from 0; delta = (v - that) * beta; each row then gains k * delta (fused) and
 * the products with q are summed the same way into the output. a[t][h][d] is the device's
 * exp(g). trail (or NULL) gets the state after each token, [t][h][d][j]. */
static void scan_reference(int H, int dk, int T, float *S, const float *q, const float *k,
                           const float *v, const float *a, const float *beta, float *o,
                           float *trail)
{
    size_t C = (size_t)H * dk, hs = (size_t)dk * dk;
    for (int t = 0; t < T; t++) {
        for (int h = 0; h < H; h++) {
            size_t base = (size_t)t * C + (size_t)h * dk;
            float *Sh = S + (size_t)h * hs;
            float bt = beta[(size_t)t * H + h];
            for (int j = 0; j < dk; j++) {
                float part[8], mem = 0.0f, out = 0.0f;
                for (int s = 0; s < 8; s++) {
                    float pm = 0.0f;
                    for (int d = s; d < dk; d += 8) {
                        float *x = &Sh[(size_t)d * dk + j];
                        *x = *x * a[base + d];
                        pm = fmaf(*x, k[base + d], pm);
                    }
                    part[s] = pm;
                }
                for (int s = 0; s < 8; s++)
                    mem = mem + part[s];
                float delta = (v[base + j] - mem) * bt;
                for (int s = 0; s < 8; s++) {
                    float po = 0.0f;
                    for (int d = s; d < dk; d += 8) {
                        float *x = &Sh[(size_t)d * dk + j];
                        *x = fmaf(k[base + d], delta, *x);
                        po = fmaf(*x, q[base + d], po);
                    }
                    part[s] = po;
                }
                for (int s = 0; s < 8; s++)
                    out = out + part[s];
                o[base + j] = out;
            }
            if (trail)
                memcpy(trail + (size_t)t * H * hs + (size_t)h * hs, Sh, hs * sizeof(float));
        }
    }
}

/* A case: H heads of dk at T tokens; zero_state: the state starts at 0 (a prompt's first chunk)
 * with some v of -0 and some k of 0 (signed zeros through the sums); cpu: checked against
 * scan_reference too; trail: the per-token states compared too; shift: q, k, v and g start a
 * float past a 16-byte boundary (the kernel's word copies). */
typedef struct {
    int H, dk, T, zero_state, cpu, trail, shift;
} scan_case;

/* n floats of h on the device, `shift` floats into an allocation (*base, to free). */
static float *dev_copy_at(const float *h, size_t n, int shift, float **base)
{
    *base = dev_alloc((n + (size_t)shift) * sizeof(float));
    CUDA_OK(kern_to_device(*base + shift, h, n * sizeof(float)));
    return *base + shift;
}

/* Unit rows of dk (times scale), per token and head, as the q/k norms leave them. */
static float *unit_rows(int T, int H, int dk, float scale)
{
    size_t n = (size_t)T * H * dk;
    float *x = xmalloc(n * sizeof *x);
    for (size_t r = 0; r < (size_t)T * H; r++) {
        double ss = 0;
        for (int i = 0; i < dk; i++) {
            float u = frand();
            x[r * dk + i] = u;
            ss += (double)u * u;
        }
        float inv = (float)(scale / sqrt(ss + 1e-6));
        for (int i = 0; i < dk; i++)
            x[r * dk + i] *= inv;
    }
    return x;
}

/* Forget gates in the model's range [-5, 0] (its lower bound -5), most near 0 as trained gates
 * are, with the ends themselves among them. */
static float *gates(size_t n)
{
    float *g = xmalloc(n * sizeof *g);
    for (size_t i = 0; i < n; i++) {
        float u = urand();
        g[i] = i % 97 == 0 ? 0.0f : i % 89 == 0 ? -5.0f : -5.0f * u * u * u;
    }
    return g;
}

static void check_scan(const scan_case *c)
{
    int H = c->H, dk = c->dk, T = c->T;
    size_t C = (size_t)H * dk, n = (size_t)T * C, sn = (size_t)H * dk * dk;
    size_t tn = c->trail ? (size_t)T * sn : 0;
    float eps = 1e-5f;
    float *hq = unit_rows(T, H, dk, 1.0f / sqrtf((float)dk)), *hk = unit_rows(T, H, dk, 1.0f);
    float *hv = xmalloc(n * sizeof *hv), *hgate = xmalloc(n * sizeof *hgate);
    float *hb = xmalloc((size_t)T * H * sizeof *hb), *hw = xmalloc((size_t)dk * sizeof *hw);
    float *hS = xmalloc(sn * sizeof *hS), *hg = gates(n);
    for (size_t i = 0; i < n; i++) {
        hv[i] = frand();
        hgate[i] = 2.0f * frand();
    }
    for (size_t i = 0; i < (size_t)T * H; i++)
        hb[i] = 1.0f / (1.0f + expf(-4.0f * frand()));
    for (int i = 0; i < dk; i++)
        hw[i] = 1.0f + 0.5f * frand();
    for (size_t i = 0; i < sn; i++)
        hS[i] = c->zero_state ? 0.0f : 0.5f * frand();
    if (c->zero_state)
        for (size_t i = 0; i < n; i += 13) {
            hv[i] = -0.0f;
            hk[(i * 7) % n] = 0.0f;
        }
    float *qb, *kb, *vb, *gb;
    float *q = dev_copy_at(hq, n, c->shift, &qb), *k = dev_copy_at(hk, n, c->shift, &kb);
    float *v = dev_copy_at(hv, n, c->shift, &vb), *g = dev_copy_at(hg, n, c->shift, &gb);
    float *gate = dev_copy(hgate, n * 4);
    float *beta = dev_copy(hb, (size_t)T * H * 4), *w = dev_copy(hw, (size_t)dk * 4);
    float *S = dev_copy(hS, sn * 4), *S2 = dev_copy(hS, sn * 4);
    float *o = dev_alloc(n * 4), *o2 = dev_alloc(n * 4);
    float *trail = tn ? dev_alloc(tn * 4) : NULL, *trail2 = tn ? dev_alloc(tn * 4) : NULL;
    CUDA_OK(kern_memset(o, 0xff, n * 4)); /* poisoned: NaN */
    CUDA_OK(kern_memset(o2, 0xff, n * 4));
    if (tn) {
        CUDA_OK(kern_memset(trail, 0xff, tn * 4));
        CUDA_OK(kern_memset(trail2, 0xff, tn * 4));
    }
    /* the prefill path: the whole chunk in one launch */
    CUDA_OK(eng_kda_scan_trail(S, q, k, v, g, beta, T, H, dk, o, trail, NULL));
    float *go = to_host(o, n * 4), *gS = to_host(S, sn * 4);
    float *gtrail = tn ? to_host(trail, tn * 4) : NULL;
    char what[200], start[64];
    snprintf(start, sizeof start, "%s%s", c->zero_state ? "zero state" : "random state",
             c->shift ? ", unaligned" : "");
    if (c->cpu) {
        float *a = device_exp(hg, n), *ro = xmalloc(n * 4), *rtrail = tn ? xmalloc(tn * 4) : NULL;
        memset(ro, 0xff, n * 4); /* poisoned as the device's: a row the reference skips shows */
        scan_reference(H, dk, T, hS, hq, hk, hv, a, hb, ro, rtrail);
        snprintf(what, sizeof what, "delta rule %d heads of %d, %d tokens, %s: outputs equal the "
                 "C reference", H, dk, T, start);
        same_bits(what, go, ro, n);
        snprintf(what, sizeof what, "delta rule %d heads of %d, %d tokens, %s: final state equals "
                 "the C reference", H, dk, T, start);
        same_bits(what, gS, hS, sn);
        if (tn) {
            snprintf(what, sizeof what, "delta rule %d heads of %d, %d tokens, %s: the state after "
                     "each token (trail) equals the C reference", H, dk, T, start);
            same_bits(what, gtrail, rtrail, tn);
        }
        free(a), free(ro), free(rtrail);
    }
    /* the decode path a token at a time, its output through the gated norm: the prefill's
     * output through eng_kda_out_norm must match it */
    for (int t = 0; t < T; t++) {
        size_t r = (size_t)t * C;
        CUDA_OK(eng_kda_scan_norm(S2, q + r, k + r, v + r, g + r, beta + (size_t)t * H, 1, H, dk,
                                  o2 + r, tn ? trail2 + (size_t)t * sn : NULL, gate + r, w, eps,
                                  NULL));
    }
    CUDA_OK(eng_kda_out_norm(o, gate, w, T, H, dk, eps, NULL));
    float *gon = to_host(o, n * 4), *do2 = to_host(o2, n * 4), *dS = to_host(S2, sn * 4);
    snprintf(what, sizeof what, "delta rule %d heads of %d, %d tokens, %s: gated-norm outputs "
             "equal the decode path's, a token a launch", H, dk, T, start);
    same_bits(what, gon, do2, n);
    snprintf(what, sizeof what, "delta rule %d heads of %d, %d tokens, %s: final state equals the "
             "decode path's", H, dk, T, start);
    same_bits(what, gS, dS, sn);
    if (tn) {
        float *dtrail = to_host(trail2, tn * 4);
        snprintf(what, sizeof what, "delta rule %d heads of %d, %d tokens, %s: trail equals the "
                 "decode path's", H, dk, T, start);
        same_bits(what, gtrail, dtrail, tn);
        free(dtrail);
    }
    free(hq), free(hk), free(hv), free(hgate), free(hb), free(hw), free(hS), free(hg);
    free(go), free(gS), free(gtrail), free(gon), free(do2), free(dS);
    kern_free(qb), kern_free(kb), kern_free(vb), kern_free(gb), kern_free(gate), kern_free(beta);
    kern_free(w), kern_free(S), kern_free(S2), kern_free(o), kern_free(o2);
    if (tn)
        kern_free(trail), kern_free(trail2);
}

/* ---- the conv, the q/k norms and the gates -------------------------------------------------- */

/* got within ulps of ref (relative to each |ref|, 1e-30 absolute); the first miss is shown. */
static void near(const char *what, const float *got, const double *ref, size_t n, double ulps)
{
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < n; i++) {
        double tol = ulps * 0x1p-23 * fabs(ref[i]) + 1e-30;
        if (!(fabs((double)got[i] - ref[i]) <= tol) && !bad++)
            first = i;
    }
    if (bad)
        printf("FAIL %s: %zu of %zu off (first at %zu: %.9g against %.9g)\n", what, bad, n, first,
               (double)got[first], ref[first]);
    else
        printf("ok   %s (%zu values)\n", what, n);
    failures += bad != 0;
}

/* A case of the steps before the delta rule: H heads of dk, K taps, T tokens; lb: the gates'
 * lower bound (-5) on; decode: also compared with the decode path's prep a token a launch (which
 * takes K <= 8). */
typedef struct {
    int H, dk, K, T, lb, decode;
} prep_case;

static void check_prep(const prep_case *c)
{
    int H = c->H, dk = c->dk, K = c->K, T = c->T, C = H * dk;
    size_t n = (size_t)T * C, sn = (size_t)(K - 1) * 3 * C, wn = (size_t)C * K;
    float qscale = 1.0f / sqrtf((float)dk), lb = -5.0f;
    float *h[9];
    size_t sizes[9] = {n, n, n, sn, wn, wn, wn, n, (size_t)T * H};
    for (int i = 0; i < 9; i++) { /* q, k, v, conv state: 1; taps: 0.5; gates, beta: 2 */
        size_t m = sizes[i] ? sizes[i] : 1; /* (one tap: no conv state) */
        float amp = i >= 4 && i <= 6 ? 0.5f : i >= 7 ? 2.0f : 1.0f;
        h[i] = xmalloc(m * 4);
        for (size_t j = 0; j < m; j++)
            h[i][j] = amp * frand();
    }
    float *hA = xmalloc((size_t)H * 4), *hdt = xmalloc((size_t)C * 4);
    for (int i = 0; i < H; i++)
        hA[i] = 0.5f * frand();
    for (int i = 0; i < C; i++)
        hdt[i] = 0.5f * frand();
    float *q = dev_copy(h[0], n * 4), *k = dev_copy(h[1], n * 4), *v = dev_copy(h[2], n * 4);
    float *qw = dev_copy(h[4], wn * 4), *kw = dev_copy(h[5], wn * 4), *vw = dev_copy(h[6], wn * 4);
    float *A = dev_copy(hA, (size_t)H * 4), *dt = dev_copy(hdt, (size_t)C * 4);
    /* [0]: the prefill path's launches over the chunk, [1]: the decode path's prep a token a
     * launch; each: conv state, q, k, v (normed as the scan takes them), gates, beta */
    float *st[2], *qc[2], *kc[2], *vc[2], *g[2], *beta[2], *out[2][6];
    int forms = c->decode ? 2 : 1;
    for (int f = 0; f < forms; f++) {
        st[f] = dev_copy(h[3], sn ? sn * 4 : 4);
        g[f] = dev_copy(h[7], n * 4), beta[f] = dev_copy(h[8], (size_t)T * H * 4);
        qc[f] = dev_alloc(n * 4), kc[f] = dev_alloc(n * 4), vc[f] = dev_alloc(n * 4);
        CUDA_OK(kern_memset(qc[f], 0xff, n * 4)); /* poisoned: NaN */
        CUDA_OK(kern_memset(kc[f], 0xff, n * 4));
        CUDA_OK(kern_memset(vc[f], 0xff, n * 4));
    }
    CUDA_OK(eng_kda_conv_norm(q, k, v, st[0], qw, kw, vw, T, H, dk, K, qscale, qc[0], kc[0],
                              vc[0], NULL));
    CUDA_OK(eng_kda_gate(g[0], beta[0], A, dt, T, H, dk, c->lb, lb, NULL));
    for (int t = 0; c->decode && t < T; t++) {
        size_t r = (size_t)t * C;
        CUDA_OK(eng_kda_prep_decode(q + r, k + r, v + r, st[1], qw, kw, vw, 1, H, dk, K, qscale,
                                    qc[1] + r, kc[1] + r, vc[1] + r, g[1] + r,
                                    beta[1] + (size_t)t * H, A, dt, c->lb, lb, NULL));
    }
    size_t on[6] = {sn, n, n, n, n, (size_t)T * H};
    const char *names[6] = {"conv state", "q", "k", "v", "gates", "beta"};
    for (int f = 0; f < forms; f++) {
        float *d[6] = {st[f], qc[f], kc[f], vc[f], g[f], beta[f]};
        for (int i = 0; i < 6; i++)
            out[f][i] = to_host(d[i], on[i] ? on[i] * 4 : 4);
    }
    char what[200];
    for (int i = 0; i < 6 && c->decode; i++) {
        snprintf(what, sizeof what, "conv/norms/gates %d heads of %d, %d taps, %d tokens, lower "
                 "bound %s: %s equal the decode path's, a token a launch", H, dk, K, T,
                 c->lb ? "on" : "off", names[i]);
        same_bits(what, out[0][i], out[1][i], on[i]);
    }
    /* the values themselves: the v plane (no norm) against the taps' fused sums (exact, the
     * kernels' order) through SiLU in double; the gates and beta by their formulas in double */
    double *rv = xmalloc(n * sizeof *rv), *rg = xmalloc(n * sizeof *rg);
    double *rb = xmalloc((size_t)T * H * sizeof *rb);
    for (int t = 0; t < T; t++)
        for (int ch = 0; ch < C; ch++) {
            float acc = 0.0f;
            for (int j = 0; j < K; j++) {
                int row = t + j;
                float x = row < K - 1 ? h[3][(size_t)row * 3 * C + 2 * C + ch]
                                      : h[2][(size_t)(row - (K - 1)) * C + ch];
                acc = fmaf(h[6][(size_t)ch * K + j], x, acc);
            }
            rv[(size_t)t * C + ch] = acc / (1.0 + exp(-(double)acc));
            double x = (double)(h[7][(size_t)t * C + ch] + hdt[ch]);
            double rate = exp((double)hA[ch / dk]);
            rg[(size_t)t * C + ch] = c->lb ? lb / (1.0 + exp(-rate * x))
                                           : -rate * (x > 20.0 ? x : log1p(exp(x)));
        }
    for (size_t i = 0; i < (size_t)T * H; i++)
        rb[i] = 1.0 / (1.0 + exp(-(double)h[8][i]));
    snprintf(what, sizeof what, "conv %d heads of %d, %d taps, %d tokens: v within 8 ulp of its "
             "taps' sums through SiLU in double", H, dk, K, T);
    near(what, out[0][3], rv, n, 8);
    snprintf(what, sizeof what, "gates %d heads of %d, %d tokens, lower bound %s: within 64 ulp "
             "of their formula in double", H, dk, T, c->lb ? "on" : "off");
    near(what, out[0][4], rg, n, 64);
    snprintf(what, sizeof what, "beta %d heads, %d tokens: within 8 ulp of the sigmoid in double",
             H, T);
    near(what, out[0][5], rb, (size_t)T * H, 8);
    free(rv), free(rg), free(rb);
    for (int f = 0; f < forms; f++) {
        for (int i = 0; i < 6; i++)
            free(out[f][i]);
        kern_free(st[f]), kern_free(g[f]), kern_free(beta[f]);
        kern_free(qc[f]), kern_free(kc[f]), kern_free(vc[f]);
    }
    for (int i = 0; i < 9; i++)
        free(h[i]);
    free(hA), free(hdt);
    kern_free(q), kern_free(k), kern_free(v), kern_free(qw), kern_free(kw), kern_free(vw);
    kern_free(A), kern_free(dt);
}

/* ---- times ----------------------------------------------------------------------------------- */

static int device_attr(enum cudaDeviceAttr attr)
{
    int v = 0;
    if (cudaDeviceGetAttribute(&v, attr, 0) != cudaSuccess || v <= 0) {
        printf("FAIL: device attribute %d could not be read\n", (int)attr);
        exit(1);
    }
    return v;
}

/* The median of n times (ms), sorted in place. */
static float median(float *x, int n)
{
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && x[j - 1] > x[j]; j--) {
            float t = x[j];
            x[j] = x[j - 1], x[j - 1] = t;
        }
    return x[n / 2];
}

/* The delta rule at the prefill chunk's shape (64 heads of 128, 4096 tokens): the median of 7
 * calls, against the FP32 floor: 4 operations a state element a token (the scaling, the product
 * with k, the update, the product with q), each a multiply or fused multiply-add, at 128 lanes a
 * multiprocessor and the peak clock. */
static void time_scan(void *ev0, void *ev1)
{
    int H = 64, dk = 128, T = 4096, reps = 7;
    size_t n = (size_t)T * H * dk, sn = (size_t)H * dk * dk;
    float *hq = unit_rows(T, H, dk, 1.0f / sqrtf((float)dk)), *hk = unit_rows(T, H, dk, 1.0f);
    float *hv = xmalloc(n * 4), *hg = gates(n), *hb = xmalloc((size_t)T * H * 4);
    for (size_t i = 0; i < n; i++)
        hv[i] = frand();
    for (size_t i = 0; i < (size_t)T * H; i++)
        hb[i] = urand();
    float *q = dev_copy(hq, n * 4), *k = dev_copy(hk, n * 4), *v = dev_copy(hv, n * 4);
    float *g = dev_copy(hg, n * 4), *beta = dev_copy(hb, (size_t)T * H * 4);
    float *S = dev_alloc(sn * 4), *o = dev_alloc(n * 4);
    CUDA_OK(kern_memset(S, 0, sn * 4));
    CUDA_OK(eng_kda_scan_trail(S, q, k, v, g, beta, T, H, dk, o, NULL, NULL)); /* warm-up */
    float ms[16];
    for (int i = 0; i < reps; i++) {
        CUDA_OK(eng_event_record(ev0, NULL));
        CUDA_OK(eng_kda_scan_trail(S, q, k, v, g, beta, T, H, dk, o, NULL, NULL));
        CUDA_OK(eng_event_record(ev1, NULL));
        CUDA_OK(eng_event_ms(ev0, ev1, &ms[i]));
    }
    double us = 1000.0 * median(ms, reps);
    double sms = device_attr(cudaDevAttrMultiProcessorCount);
    double hz = 1e3 * device_attr(cudaDevAttrClockRate);
    double floor_us = 4.0 * H * dk * dk * T / (sms * 128 * hz) * 1e6;
    printf("time the KDA delta rule (prefill)  %d heads of %d, %d tokens: %9.1f us; FP32 floor "
           "%.1f us (%.0f SMs, %.0f MHz); %.0f%% of the floor\n", H, dk, T, us, floor_us, sms,
           hz / 1e6, 100.0 * floor_us / us);
    free(hq), free(hk), free(hv), free(hg), free(hb);
    kern_free(q), kern_free(k), kern_free(v), kern_free(g), kern_free(beta), kern_free(S);
    kern_free(o);
}

/* Device memory's copy rate (GB/s, bytes read plus written) over a 1 GiB device-to-device copy:
 * the median of 5. */
static double copy_rate(void *ev0, void *ev1)
{
    size_t bytes = (size_t)1 << 30;
    void *a = dev_alloc(bytes), *b = dev_alloc(bytes);
    CUDA_OK(kern_memset(a, 1, bytes));
    CUDA_OK(eng_copy_async(b, a, bytes, NULL));
    float ms[5];
    for (int i = 0; i < 5; i++) {
        CUDA_OK(eng_event_record(ev0, NULL));
        CUDA_OK(eng_copy_async(b, a, bytes, NULL));
        CUDA_OK(eng_event_record(ev1, NULL));
        CUDA_OK(eng_event_ms(ev0, ev1, &ms[i]));
    }
    kern_free(a), kern_free(b);
    return 2.0 * bytes / (median(ms, 5) * 1e-3) / 1e9;
}

/* The conv with the q/k norms and the gates at the prefill chunk's shape (64 heads of 128, 4
 * taps, 4096 tokens):
 * the median of 7 calls each, against the time to move their bytes (each input read once, each
 * output written once) at the copy rate. */
static void time_prep(void *ev0, void *ev1)
{
    int H = 64, dk = 128, K = 4, T = 4096, C = H * dk, reps = 7;
    size_t n = (size_t)T * C, sn = (size_t)(K - 1) * 3 * C, wn = (size_t)C * K;
    float *hx = xmalloc(n * 4);
    for (size_t i = 0; i < n; i++)
        hx[i] = frand();
    float *q = dev_copy(hx, n * 4), *k = dev_copy(hx, n * 4), *v = dev_copy(hx, n * 4);
    float *g = dev_copy(hx, n * 4), *beta = dev_copy(hx, (size_t)T * H * 4);
    float *qc = dev_alloc(n * 4), *kc = dev_alloc(n * 4), *vc = dev_alloc(n * 4);
    float *st = dev_copy(hx, sn * 4), *w = dev_copy(hx, wn * 4), *A = dev_copy(hx, (size_t)H * 4);
    float *dt = dev_copy(hx, (size_t)C * 4);
    double gbs = copy_rate(ev0, ev1);
    float ms[2][16];
    for (int i = -1; i < reps; i++) { /* -1: warm-up */
        float m[2];
        CUDA_OK(eng_event_record(ev0, NULL));
        CUDA_OK(eng_kda_conv_norm(q, k, v, st, w, w, w, T, H, dk, K, 1.0f / sqrtf((float)dk), qc,
                                  kc, vc, NULL));
        CUDA_OK(eng_event_record(ev1, NULL));
        CUDA_OK(eng_event_ms(ev0, ev1, &m[0]));
        CUDA_OK(kern_to_device(g, hx, n * 4)); /* the gates are rewritten in place */
        CUDA_OK(eng_event_record(ev0, NULL));
        CUDA_OK(eng_kda_gate(g, beta, A, dt, T, H, dk, 1, -5.0f, NULL));
        CUDA_OK(eng_event_record(ev1, NULL));
        CUDA_OK(eng_event_ms(ev0, ev1, &m[1]));
        if (i >= 0)
            ms[0][i] = m[0], ms[1][i] = m[1];
    }
    double conv_bytes = 6.0 * n * 4, gate_bytes = 2.0 * n * 4 + 2.0 * T * H * 4;
    const char *what[2] = {"the KDA conv and q/k norms", "the KDA gates (prefill)"};
    double bytes[2] = {conv_bytes, gate_bytes};
    for (int f = 0; f < 2; f++) {
        double us = 1000.0 * median(ms[f], reps), floor_us = bytes[f] / (gbs * 1e9) * 1e6;
        printf("time %-28s %d heads of %d, %d tokens: %9.1f us; %.0f MB at the copy rate %.0f "
               "GB/s: %.1f us; %.0f%% of the floor\n", what[f], H, dk, T, us, bytes[f] / 1e6, gbs,
               floor_us, 100.0 * floor_us / us);
    }
    free(hx);
    kern_free(q), kern_free(k), kern_free(v), kern_free(g), kern_free(beta), kern_free(qc);
    kern_free(kc), kern_free(vc), kern_free(st), kern_free(w), kern_free(A), kern_free(dt);
}

/* ---- the decode step (eng_kda_step_decode) and eng_kda_scan_norm ---------------------------- */

/* n random bf16 values (amplitude amp) on the device. */
static void *dev_bf16(size_t n, float amp)
{
    uint16_t *b = xmalloc(n * sizeof *b);
    for (size_t i = 0; i < n; i++)
        b[i] = numfmt_bf16_bits(amp * frand());
    void *d = dev_copy(b, n * sizeof *b);
    free(b);
    return d;
}

/* n random floats (amplitude amp) on the device, from this file's generator. */
static float *dev_random(size_t n, float amp)
{
    return dev_uniform(&rng_state, n, amp);
}

/* A case of eng_kda_step_decode: H heads of dk, K taps, T rows; R: the gates' second products'
 * columns, folded into the step (0: the products come in g and gate); lb: the gates' lower
 * bound; trail: the state after each row written too. */
typedef struct {
    int H, dk, K, T, R, lb, trail;
} step_case;

/* One layer's inputs and state for the step (what a decode step hands eng_kda_step_decode). */
typedef struct {
    int H, dk, K, T, R, lb;
    float *q, *k, *v, *qw, *kw, *vw, *g, *beta, *A, *dt, *gate, *w, *lo, *st, *S, *o, *trail;
    eng_mat fb, gb;
    eng_kda_lowrank lr;
} step_layer;

static void step_layer_make(step_layer *L, const step_case *c)
{
    int H = c->H, dk = c->dk, K = c->K, T = c->T, R = c->R, C = H * dk;
    size_t in_n = (size_t)T * C, st_n = (size_t)(K - 1) * 3 * C, S_n = (size_t)H * dk * dk;
    memset(L, 0, sizeof *L);
    L->H = H, L->dk = dk, L->K = K, L->T = T, L->R = R, L->lb = c->lb;
    L->q = dev_random(in_n, 1.0f), L->k = dev_random(in_n, 1.0f), L->v = dev_random(in_n, 1.0f);
    L->qw = dev_random((size_t)C * K, 0.5f), L->kw = dev_random((size_t)C * K, 0.5f);
    L->vw = dev_random((size_t)C * K, 0.5f);
    L->g = dev_random(in_n, 2.0f), L->beta = dev_random((size_t)T * H, 2.0f);
    L->A = dev_random((size_t)H, 0.5f), L->dt = dev_random((size_t)C, 0.5f);
    L->gate = dev_random(in_n, 2.0f), L->w = dev_random((size_t)dk, 1.0f);
    L->st = dev_random(st_n ? st_n : 1, 1.0f), L->S = dev_random(S_n, 0.1f);
    L->o = dev_alloc(in_n * 4);
    L->trail = c->trail ? dev_alloc((size_t)T * S_n * 4) : NULL;
    if (R) {
        L->fb = (eng_mat){.dtype = ENG_BF16, .rows = C, .cols = R};
        L->gb = L->fb;
        L->fb.data = dev_bf16((size_t)C * R, 0.1f);
        L->gb.data = dev_bf16((size_t)C * R, 0.1f);
        L->lo = dev_random((size_t)2 * T * R, 1.0f);
        L->lr = (eng_kda_lowrank){&L->fb, &L->gb, L->lo, L->lo + (size_t)T * R};
    }
}

static void step_layer_free(step_layer *L)
{
    kern_free(L->q), kern_free(L->k), kern_free(L->v), kern_free(L->qw), kern_free(L->kw);
    kern_free(L->vw), kern_free(L->g), kern_free(L->beta), kern_free(L->A), kern_free(L->dt);
    kern_free(L->gate), kern_free(L->w), kern_free(L->st), kern_free(L->S), kern_free(L->o);
    if (L->trail)
        kern_free(L->trail);
    if (L->R) {
        kern_free((void *)L->fb.data), kern_free((void *)L->gb.data), kern_free(L->lo);
    }
}

/* The step on layer L, rows t0 .. t0 + n - 1 (of L->T): each array from row t0, the trail from
 * the state after row t0; with R the products are folded in and g and gate are not passed (NULL:
 * a read of them would fault). */
static void step_run_rows(const step_layer *L, int t0, int n, void *stream)
{
    float qscale = 1.0f / sqrtf((float)L->dk);
    size_t C = (size_t)L->H * L->dk, r = (size_t)t0 * C, S_n = C * L->dk, R = (size_t)L->R;
    eng_kda_lowrank lr = L->lr;
    if (R) {
        lr.lo_f = L->lo + (size_t)t0 * R;
        lr.lo_g = L->lo + (size_t)L->T * R + (size_t)t0 * R;
    }
    CUDA_OK(eng_kda_step_decode(L->q + r, L->k + r, L->v + r, L->st, L->qw, L->kw, L->vw, n, L->H,
                                L->dk, L->K, qscale, R ? NULL : L->g + r,
                                L->beta + (size_t)t0 * L->H, L->A, L->dt, L->lb, -5.0f, L->S,
                                L->o + r, L->trail ? L->trail + (size_t)t0 * S_n : NULL,
                                R ? NULL : L->gate + r, L->w, 1e-5f, R ? &lr : NULL, stream));
}

/* The step on layer L, all its rows in one call. */
static void step_run(const step_layer *L, void *stream)
{
    step_run_rows(L, 0, L->T, stream);
}

/* got within rel of each row's magnitude (the largest |ref| of its len values) of ref, rows rows;
 * the first miss and the largest error (as a fraction of its row's magnitude) are shown. */
static void near_rows(const char *what, const float *got, const double *ref, size_t rows,
                      size_t len, double rel)
{
    size_t bad = 0, first = 0;
    double worst = 0;
    for (size_t r = 0; r < rows; r++) {
        double mag = 0;
        for (size_t i = 0; i < len; i++)
            mag = fmax(mag, fabs(ref[r * len + i]));
        for (size_t i = r * len; i < (r + 1) * len; i++) {
            double err = fabs((double)got[i] - ref[i]);
            if (!(err <= rel * mag + 1e-30) && !bad++)
                first = i;
            if (mag > 0 && err / mag > worst)
                worst = err / mag;
        }
    }
    if (bad)
        printf("FAIL %s: %zu of %zu off (first at %zu: %.9g against %.9g; the largest error %.2g "
               "of its row's magnitude)\n", what, bad, rows * len, first, (double)got[first],
               ref[first], worst);
    else
        printf("ok   %s (%zu values; the largest error %.2g of its row's magnitude)\n", what,
               rows * len, worst);
    failures += bad != 0;
}

static double sigmoid_d(double x)
{
    return 1.0 / (1.0 + exp(-x));
}

/* Layer L's inputs and starting states on the host. */
typedef struct {
    float *q, *k, *v, *qw, *kw, *vw, *g, *beta, *A, *dt, *gate, *w, *lo, *st, *S;
    uint16_t *fb, *gb;
} step_host;

static void step_host_read(step_host *x, const step_layer *L)
{
    size_t C = (size_t)L->H * L->dk, in_n = (size_t)L->T * C, R = (size_t)L->R;
    size_t st_n = (size_t)(L->K - 1) * 3 * C;
    memset(x, 0, sizeof *x);
    x->q = to_host(L->q, in_n * 4), x->k = to_host(L->k, in_n * 4), x->v = to_host(L->v, in_n * 4);
    x->qw = to_host(L->qw, C * L->K * 4), x->kw = to_host(L->kw, C * L->K * 4);
    x->vw = to_host(L->vw, C * L->K * 4), x->g = to_host(L->g, in_n * 4);
    x->beta = to_host(L->beta, (size_t)L->T * L->H * 4), x->A = to_host(L->A, (size_t)L->H * 4);
    x->dt = to_host(L->dt, C * 4), x->gate = to_host(L->gate, in_n * 4);
    x->w = to_host(L->w, (size_t)L->dk * 4), x->st = to_host(L->st, (st_n ? st_n : 1) * 4);
    x->S = to_host(L->S, C * L->dk * 4);
    if (R) {
        x->lo = to_host(L->lo, 2 * L->T * R * 4);
        x->fb = to_host(L->fb.data, C * R * 2), x->gb = to_host(L->gb.data, C * R * 2);
    }
}

static void step_host_free(step_host *x)
{
    free(x->q), free(x->k), free(x->v), free(x->qw), free(x->kw), free(x->vw), free(x->g);
    free(x->beta), free(x->A), free(x->dt), free(x->gate), free(x->w), free(x->lo), free(x->st);
    free(x->S), free(x->fb), free(x->gb);
}

/* The conv with SiLU of plane p (0 q, 1 k, 2 v), channel c, row t, in double (x: the inputs). */
static double conv_silu_d(const step_layer *L, const step_host *x, int p, size_t c, int t)
{
    size_t C = (size_t)L->H * L->dk;
    const float *in = p == 0 ? x->q : p == 1 ? x->k : x->v;
    const float *wt = p == 0 ? x->qw : p == 1 ? x->kw : x->vw;
    double acc = 0;
    for (int i = 0; i < L->K; i++) {
        int row = t + i;
        float win = row < L->K - 1 ? x->st[(size_t)row * 3 * C + (size_t)p * C + c]
                                   : in[(size_t)(row - (L->K - 1)) * C + c];
        acc += (double)wt[c * L->K + i] * win;
    }
    return acc / (1.0 + exp(-acc));
}

/* Row t of the forget gates' (which 0) or the output gate's (1) product, channel c: given, or
 * lo's row against f_b's or g_b's row (R columns), in double. */
static double product_d(const step_layer *L, const step_host *x, int which, size_t c, int t)
{
    size_t C = (size_t)L->H * L->dk, R = (size_t)L->R;
    if (!R)
        return (which ? x->gate : x->g)[(size_t)t * C + c];
    const float *lo = x->lo + (size_t)which * L->T * R + (size_t)t * R;
    const uint16_t *m = (which ? x->gb : x->fb) + c * R;
    double acc = 0;
    for (size_t i = 0; i < R; i++)
        acc += (double)numfmt_bf16_value(m[i]) * lo[i];
    return acc;
}

/* The step in double from x: o [T][C], the state [H][dk][dk], the trail [T][H][dk][dk] (or
 * NULL) and the conv state (floats: its rows are copies of the window's, exact). */
static void step_reference(const step_layer *L, const step_host *x, double *o, double *S,
                           double *trail, float *st)
{
    int H = L->H, dk = L->dk, K = L->K, T = L->T;
    size_t C = (size_t)H * dk, hs = (size_t)dk * dk;
    double qscale = (double)(1.0f / sqrtf((float)dk)); /* the float the step is given */
    double *qk = xmalloc(2 * (size_t)dk * sizeof *qk), *a = xmalloc((size_t)dk * sizeof *a);
    double *vv = xmalloc((size_t)dk * sizeof *vv), *out = xmalloc((size_t)dk * sizeof *out);
    for (size_t i = 0; i < (size_t)H * hs; i++)
        S[i] = x->S[i];
    for (int t = 0; t < T; t++)
        for (int h = 0; h < H; h++) {
            size_t c0 = (size_t)h * dk;
            for (int p = 0; p < 2; p++) { /* q and k, normed */
                double ss = 0;
                for (int i = 0; i < dk; i++) {
                    double y = conv_silu_d(L, x, p, c0 + i, t);
                    qk[p * dk + i] = y;
                    ss += y * y;
                }
                double inv = (p == 0 ? qscale : 1.0) / sqrt(ss + 1e-6);
                for (int i = 0; i < dk; i++)
                    qk[p * dk + i] *= inv;
            }
            double rate = exp((double)x->A[h]);
            for (int i = 0; i < dk; i++) {
                vv[i] = conv_silu_d(L, x, 2, c0 + i, t);
                double gx = product_d(L, x, 0, c0 + i, t) + x->dt[c0 + i];
                double gv = L->lb ? -5.0 * sigmoid_d(rate * gx)
                                  : -rate * (gx > 20.0 ? gx : log1p(exp(gx)));
                a[i] = exp(gv);
            }
            double bt = sigmoid_d(x->beta[(size_t)t * H + h]), *Sh = S + (size_t)h * hs;
            for (int j = 0; j < dk; j++) {
                double mem = 0;
                for (int d = 0; d < dk; d++) {
                    Sh[(size_t)d * dk + j] *= a[d];
                    mem += Sh[(size_t)d * dk + j] * qk[dk + d];
                }
                double delta = (vv[j] - mem) * bt, po = 0;
                for (int d = 0; d < dk; d++) {
                    Sh[(size_t)d * dk + j] += qk[dk + d] * delta;
                    po += Sh[(size_t)d * dk + j] * qk[d];
                }
                out[j] = po;
            }
            double ss = 0;
            for (int j = 0; j < dk; j++)
                ss += out[j] * out[j];
            double inv = 1.0 / sqrt(ss / dk + (double)1e-5f);
            for (int j = 0; j < dk; j++)
                o[(size_t)t * C + c0 + j] = x->w[j] * (out[j] * inv) *
                                            sigmoid_d(product_d(L, x, 1, c0 + j, t));
            if (trail)
                memcpy(trail + ((size_t)t * H + h) * hs, Sh, hs * sizeof *Sh);
        }
    for (int p = 0; p < 3; p++) /* the window's last K - 1 rows */
        for (size_t c = 0; c < C; c++)
            for (int r = 0; r < K - 1; r++) {
                int row = T + r;
                const float *in = p == 0 ? x->q : p == 1 ? x->k : x->v;
                st[(size_t)r * 3 * C + (size_t)p * C + c] =
                    row < K - 1 ? x->st[(size_t)row * 3 * C + (size_t)p * C + c]
                                : in[(size_t)(row - (K - 1)) * C + c];
            }
    free(qk), free(a), free(vv), free(out);
}

/* Layer L back at its starting states (from x), its outputs poisoned (NaN). */
static void step_reset(const step_layer *L, const step_host *x)
{
    size_t C = (size_t)L->H * L->dk, st_n = (size_t)(L->K - 1) * 3 * C, S_n = C * L->dk;
    CUDA_OK(kern_to_device(L->st, x->st, (st_n ? st_n : 1) * 4));
    CUDA_OK(kern_to_device(L->S, x->S, S_n * 4));
    CUDA_OK(kern_memset(L->o, 0xff, (size_t)L->T * C * 4));
    if (L->trail)
        CUDA_OK(kern_memset(L->trail, 0xff, (size_t)L->T * S_n * 4));
}

/* Layer L's outputs into h: o, the state, the conv state, the trail (as many as each has). */
static void step_read(const step_layer *L, float *h)
{
    size_t C = (size_t)L->H * L->dk, st_n = (size_t)(L->K - 1) * 3 * C, S_n = C * L->dk;
    size_t in_n = (size_t)L->T * C;
    CUDA_OK(kern_sync());
    CUDA_OK(kern_to_host(h, L->o, in_n * 4));
    CUDA_OK(kern_to_host(h + in_n, L->S, S_n * 4));
    if (st_n)
        CUDA_OK(kern_to_host(h + in_n + S_n, L->st, st_n * 4));
    if (L->trail)
        CUDA_OK(kern_to_host(h + in_n + S_n + st_n, L->trail, (size_t)L->T * S_n * 4));
}

/* got and want (step_read's layout) bit for bit, part by part. */
static void step_same_bits(const char *what, const char *against, const step_layer *L,
                           const float *got, const float *want)
{
    size_t C = (size_t)L->H * L->dk, st_n = (size_t)(L->K - 1) * 3 * C, S_n = C * L->dk;
    size_t in_n = (size_t)L->T * C, tr_n = L->trail ? (size_t)L->T * S_n : 0;
    const char *names[4] = {"o", "state", "conv state", "trail"};
    size_t at[4] = {0, in_n, in_n + S_n, in_n + S_n + st_n}, n[4] = {in_n, S_n, st_n, tr_n};
    for (int i = 0; i < 4; i++) {
        if (!n[i])
            continue;
        char line[400];
        snprintf(line, sizeof line, "%s: %s equals %s", what, names[i], against);
        same_bits(line, got + at[i], want + at[i], n[i]);
    }
}

/* The step (a cluster of ceil(dk / 32) blocks a head) from random inputs and states: every output
 * written and finite; o, the state and the trail within 1e-4 of each row's magnitude of the step in
 * double (float's rounding through 8 rows of the recurrence reaches 2e-5 of a row's magnitude at
 * the decode shape with the lower bound on), the conv state exactly; a second run the same bits;
 * the T rows in one call the bits of T one-row calls in sequence (each row's work does not depend
 * on the rows beside it); and with the products given (not folded), the bits of the prefill path's
 * kernels (eng_kda_conv_norm, eng_kda_gate, eng_kda_scan_trail, eng_kda_out_norm), which check_prep
 * and check_scan tie to the decode path's prep and to the C reference of the delta rule. */
static void check_step(const step_case *c)
{
    step_layer L;
    step_layer_make(&L, c);
    step_host x;
    step_host_read(&x, &L);
    int H = c->H, dk = c->dk, K = c->K, T = c->T;
    size_t C = (size_t)H * dk, in_n = (size_t)T * C, st_n = (size_t)(K - 1) * 3 * C;
    size_t S_n = C * dk, tr_n = c->trail ? (size_t)T * S_n : 0, on = in_n + S_n + st_n + tr_n;
    float *out = xmalloc(on * 4), *again = xmalloc(on * 4);
    step_reset(&L, &x);
    step_run(&L, NULL);
    step_read(&L, out);
    char what[240];
    snprintf(what, sizeof what, "KDA step (%d heads of %d, %d taps, %d row(s), %s, lower bound "
             "%s%s)", H, dk, K, T, c->R ? "f_b/g_b folded" : "g/gate given",
             c->lb ? "on" : "off", c->trail ? ", trail" : "");
    size_t nonfinite = 0;
    for (size_t i = 0; i < on; i++)
        nonfinite += !isfinite(out[i]);
    printf("%s %s: every output written and finite (%zu not)\n", nonfinite ? "FAIL" : "ok  ",
           what, nonfinite);
    failures += nonfinite != 0;
    /* against the step in double */
    double *ro = xmalloc(in_n * sizeof *ro), *rS = xmalloc(S_n * sizeof *rS);
    double *rtr = tr_n ? xmalloc(tr_n * sizeof *rtr) : NULL;
    float *rst = xmalloc((st_n ? st_n : 1) * 4);
    step_reference(&L, &x, ro, rS, rtr, rst);
    char line[400];
    snprintf(line, sizeof line, "%s: o within 1e-4 of the step in double", what);
    near_rows(line, out, ro, (size_t)T * H, (size_t)dk, 1e-4);
    snprintf(line, sizeof line, "%s: state within 1e-4 of the step in double", what);
    near_rows(line, out + in_n, rS, (size_t)H * dk, (size_t)dk, 1e-4);
    if (st_n) {
        snprintf(line, sizeof line, "%s: conv state equals the window's last rows", what);
        same_bits(line, out + in_n + S_n, rst, st_n);
    }
    if (tr_n) {
        snprintf(line, sizeof line, "%s: trail within 1e-4 of the step in double", what);
        near_rows(line, out + in_n + S_n + st_n, rtr, (size_t)T * H * dk, (size_t)dk, 1e-4);
    }
    free(ro), free(rS), free(rtr), free(rst);
    /* a second run */
    step_reset(&L, &x);
    step_run(&L, NULL);
    step_read(&L, again);
    step_same_bits(what, "a second run's", &L, again, out);
    /* a row a call */
    if (T > 1) {
        step_reset(&L, &x);
        for (int t = 0; t < T; t++)
            step_run_rows(&L, t, 1, NULL);
        step_read(&L, again);
        snprintf(line, sizeof line, "%d one-row calls'", T);
        step_same_bits(what, line, &L, again, out);
    }
    /* the prefill path's kernels */
    if (!c->R) {
        step_reset(&L, &x);
        float qscale = 1.0f / sqrtf((float)dk);
        float *g = dev_copy(x.g, in_n * 4), *beta = dev_copy(x.beta, (size_t)T * H * 4);
        float *qc = dev_alloc(in_n * 4), *kc = dev_alloc(in_n * 4), *vc = dev_alloc(in_n * 4);
        CUDA_OK(eng_kda_conv_norm(L.q, L.k, L.v, L.st, L.qw, L.kw, L.vw, T, H, dk, K, qscale, qc,
                                  kc, vc, NULL));
        CUDA_OK(eng_kda_gate(g, beta, L.A, L.dt, T, H, dk, c->lb, -5.0f, NULL));
        CUDA_OK(eng_kda_scan_trail(L.S, qc, kc, vc, g, beta, T, H, dk, L.o, L.trail, NULL));
        CUDA_OK(eng_kda_out_norm(L.o, L.gate, L.w, T, H, dk, 1e-5f, NULL));
        step_read(&L, again);
        step_same_bits(what, "the prefill path's kernels'", &L, again, out);
        kern_free(g), kern_free(beta), kern_free(qc), kern_free(kc), kern_free(vc);
    }
    free(out), free(again);
    step_host_free(&x);
    step_layer_free(&L);
}

/* eng_kda_scan_norm (a cluster a head, 8 tokens a launch) from random inputs and state (H heads
 * of dk, T tokens): every output written and finite, and o, the state and the trail bit for bit
 * those of eng_kda_scan_trail then eng_kda_out_norm (the prefill path's kernels, which check_scan
 * ties to the C reference), and of a second run. */
static void check_scan_norm(int H, int dk, int T, int trail)
{
    size_t C = (size_t)H * dk, n = (size_t)T * C, S_n = (size_t)H * dk * dk;
    size_t tr_n = trail ? (size_t)T * S_n : 0, on = n + S_n + tr_n;
    float *hq = unit_rows(T, H, dk, 1.0f / sqrtf((float)dk)), *hk = unit_rows(T, H, dk, 1.0f);
    float *hg = gates(n), *hS = xmalloc(S_n * 4), *hb = xmalloc((size_t)T * H * 4);
    for (size_t i = 0; i < S_n; i++)
        hS[i] = 0.5f * frand();
    for (size_t i = 0; i < (size_t)T * H; i++)
        hb[i] = urand();
    float *q = dev_copy(hq, n * 4), *k = dev_copy(hk, n * 4), *g = dev_copy(hg, n * 4);
    float *v = dev_random(n, 1.0f), *gate = dev_random(n, 2.0f), *w = dev_random((size_t)dk, 1.0f);
    float *beta = dev_copy(hb, (size_t)T * H * 4), *S = dev_alloc(S_n * 4), *o = dev_alloc(n * 4);
    float *tr = tr_n ? dev_alloc(tr_n * 4) : NULL, *out[3];
    for (int f = 0; f < 3; f++) { /* 0, 1: eng_kda_scan_norm twice; 2: the prefill path's */
        CUDA_OK(kern_to_device(S, hS, S_n * 4));
        CUDA_OK(kern_memset(o, 0xff, n * 4)); /* poisoned: NaN */
        if (tr_n)
            CUDA_OK(kern_memset(tr, 0xff, tr_n * 4));
        if (f < 2) {
            CUDA_OK(eng_kda_scan_norm(S, q, k, v, g, beta, T, H, dk, o, tr, gate, w, 1e-5f, NULL));
        } else {
            CUDA_OK(eng_kda_scan_trail(S, q, k, v, g, beta, T, H, dk, o, tr, NULL));
            CUDA_OK(eng_kda_out_norm(o, gate, w, T, H, dk, 1e-5f, NULL));
        }
        CUDA_OK(kern_sync());
        out[f] = xmalloc(on * 4);
        CUDA_OK(kern_to_host(out[f], o, n * 4));
        CUDA_OK(kern_to_host(out[f] + n, S, S_n * 4));
        if (tr_n)
            CUDA_OK(kern_to_host(out[f] + n + S_n, tr, tr_n * 4));
    }
    char what[240];
    size_t nonfinite = 0;
    for (size_t i = 0; i < on; i++)
        nonfinite += !isfinite(out[0][i]);
    snprintf(what, sizeof what, "delta rule + gated norm (eng_kda_scan_norm, %d heads of %d, %d "
             "tokens%s)", H, dk, T, trail ? ", trail" : "");
    printf("%s %s: every output written and finite (%zu not)\n", nonfinite ? "FAIL" : "ok  ",
           what, nonfinite);
    failures += nonfinite != 0;
    const char *names[3] = {"o", "state", "trail"};
    const char *against[2] = {"eng_kda_scan_trail + eng_kda_out_norm's", "a second run's"};
    size_t at[3] = {0, n, n + S_n}, cnt[3] = {n, S_n, tr_n};
    for (int r = 0; r < 2; r++)
        for (int i = 0; i < 3; i++) {
            if (!cnt[i])
                continue;
            char line[320];
            snprintf(line, sizeof line, "%s: %s equals %s", what, names[i], against[r]);
            same_bits(line, out[0] + at[i], out[r ? 1 : 2] + at[i], cnt[i]);
        }
    free(out[0]), free(out[1]), free(out[2]), free(hq), free(hk), free(hg), free(hS), free(hb);
    kern_free(q), kern_free(k), kern_free(g), kern_free(v), kern_free(gate), kern_free(w);
    kern_free(beta), kern_free(S), kern_free(o);
    if (tr)
        kern_free(tr);
}

/* The step's time at GLM-5.3-Flash's decode shape on a rank (32 heads of 128, 4 taps, f_b/g_b of
 * 128 columns folded in), T rows: a graph of kStepCalls calls over kStepLayers layers' states and
 * weights in turn (more than L2 holds, as a decode step's layers are), the median of 5 replays;
 * against the floor of its bytes (each layer's state read and written, f_b and g_b read, the
 * trail written) at the copy rate. The graph's 6 replays (dependent launches, each step starting
 * while the one before ends, the states carried through 12 steps a layer) must leave each
 * layer's state, conv state and output with the bits of the same calls launched one by one. */
enum { kStepLayers = 24, kStepCalls = 48, kStepReplays = 6 };

static void time_step(int T, int trail, double gbs, void *ev0, void *ev1)
{
    step_case c = {32, 128, 4, T, 128, 1, trail};
    step_layer *L = xmalloc(kStepLayers * sizeof *L);
    for (int i = 0; i < kStepLayers; i++)
        step_layer_make(&L[i], &c);
    size_t C = (size_t)c.H * c.dk, S_n = C * c.dk, st_n = (size_t)(c.K - 1) * 3 * C;
    size_t o_n = (size_t)T * C, per = S_n + st_n + o_n;
    float **S0 = xmalloc(kStepLayers * sizeof *S0), **st0 = xmalloc(kStepLayers * sizeof *st0);
    float *after[2] = {xmalloc(kStepLayers * per * 4), xmalloc(kStepLayers * per * 4)};
    for (int i = 0; i < kStepLayers; i++) {
        S0[i] = to_host(L[i].S, S_n * 4);
        st0[i] = to_host(L[i].st, st_n * 4);
    }
    void *st, *graph;
    CUDA_OK(eng_stream_new(&st));
    float ms[kStepReplays];
    for (int f = 0; f < 2; f++) { /* 0: the calls one by one, 1: the graph's replays */
        for (int i = 0; i < kStepLayers; i++) {
            CUDA_OK(kern_to_device(L[i].S, S0[i], S_n * 4));
            CUDA_OK(kern_to_device(L[i].st, st0[i], st_n * 4));
        }
        CUDA_OK(kern_sync());
        if (f == 0) {
            for (int pass = 0; pass < kStepReplays; pass++)
                for (int i = 0; i < kStepCalls; i++)
                    step_run(&L[i % kStepLayers], st);
        } else {
            CUDA_OK(eng_capture_begin(st));
            for (int i = 0; i < kStepCalls; i++)
                step_run(&L[i % kStepLayers], st);
            CUDA_OK(eng_capture_end(st, &graph));
            for (int pass = 0; pass < kStepReplays; pass++) { /* pass 0: warm-up */
                CUDA_OK(eng_event_record(ev0, st));
                CUDA_OK(eng_graph_launch(graph, st));
                CUDA_OK(eng_event_record(ev1, st));
                CUDA_OK(eng_event_ms(ev0, ev1, &ms[pass]));
            }
            eng_graph_free(graph);
        }
        CUDA_OK(eng_stream_sync(st));
        for (int i = 0; i < kStepLayers; i++) {
            float *h = after[f] + (size_t)i * per;
            CUDA_OK(kern_to_host(h, L[i].S, S_n * 4));
            CUDA_OK(kern_to_host(h + S_n, L[i].st, st_n * 4));
            CUDA_OK(kern_to_host(h + S_n + st_n, L[i].o, o_n * 4));
        }
    }
    eng_stream_free(st);
    double us = 1000.0 * median(ms + 1, kStepReplays - 1) / kStepCalls;
    char line[240];
    snprintf(line, sizeof line, "KDA step, %d row(s)%s, %d replays of a graph of %d steps over %d "
             "layers: every state, conv state and output equals the calls' one by one", T,
             trail ? " with the trail" : "", kStepReplays, kStepCalls, kStepLayers);
    same_bits(line, after[1], after[0], kStepLayers * per);
    for (int i = 0; i < kStepLayers; i++)
        free(S0[i]), free(st0[i]);
    free(S0), free(st0), free(after[0]), free(after[1]);
    double S_bytes = 32.0 * 128 * 128 * 4;
    double bytes = 2 * S_bytes + 2.0 * 32 * 128 * 128 * 2 + (trail ? T * S_bytes : 0);
    double floor_us = bytes / (gbs * 1e9) * 1e6;
    printf("time the KDA step (32 heads of 128, f_b/g_b folded), %d row(s)%s, in a graph: "
           "%.2f us; floor %.2f us (%.1f MB at %.0f GB/s); %.0f%% of the floor\n", T,
           trail ? " with the trail" : "", us, floor_us, bytes / 1e6, gbs,
           100.0 * floor_us / us);
    for (int i = 0; i < kStepLayers; i++)
        step_layer_free(&L[i]);
    free(L);
}

int main(int argc, char **argv)
{
    char name[256];
    int timed = gpu_test_begin(argc, argv, name, sizeof name);
    void *ev0, *ev1;
    gpu_test_events(&ev0, &ev1);
    const scan_case scans[] = {
        {64, 128, 1, 0, 1, 1, 0},    /* one token: a group in part */
        {64, 128, 7, 1, 1, 1, 0},    /* less than a staged group, from a zero state */
        {64, 128, 64, 0, 1, 1, 0},   /* whole groups, the buffers reused */
        {64, 128, 77, 1, 1, 0, 0},   /* a last group in part */
        {2, 128, 4096, 0, 1, 0, 0},  /* the chunk's length */
        {64, 128, 4096, 0, 0, 0, 0}, /* the chunk's shape: against the decode path only */
        {4, 128, 29, 0, 1, 1, 1},    /* unaligned arrays: word copies */
        {3, 96, 37, 0, 1, 1, 0},     /* dk < 128: rows and columns out of range */
        {2, 42, 19, 1, 1, 1, 0},     /* dk % 4 != 0: word copies */
        {5, 64, 9, 0, 1, 1, 1},      /* one block of columns exactly; unaligned */
    };
    for (size_t i = 0; i < sizeof scans / sizeof *scans; i++)
        check_scan(&scans[i]);
    const prep_case preps[] = {
        {64, 128, 4, 4096, 1, 1}, /* the prefill chunk's shape */
        {64, 128, 4, 37, 0, 1},   /* a run in part; softplus gates */
        {3, 40, 2, 19, 1, 1},     /* heads of 40: lanes with two channels, with one */
        {3, 42, 3, 21, 0, 1},     /* dk % 4 != 0: a gate a thread */
        {4, 64, 8, 50, 1, 1},     /* the most taps the decode path's prep takes */
        {2, 32, 17, 40, 1, 0},    /* the most taps the backend takes (prefill only) */
        {2, 32, 1, 5, 0, 1},      /* one tap: no conv state */
    };
    for (size_t i = 0; i < sizeof preps / sizeof *preps; i++)
        check_prep(&preps[i]);
    const step_case steps[] = {
        {32, 128, 4, 1, 128, 0, 0}, /* a decode step of the model's shape on a rank */
        {32, 128, 4, 1, 128, 1, 1},
        {32, 128, 4, 1, 0, 0, 0},   /* the products given */
        {32, 128, 4, 2, 128, 0, 1}, /* drafted rows in a verification window */
        {32, 128, 4, 3, 0, 1, 1},
        {32, 128, 4, 4, 128, 1, 1},
        {32, 128, 4, 5, 0, 0, 0},
        {32, 128, 4, 8, 128, 0, 1}, /* the most rows the step takes */
        {32, 128, 4, 8, 0, 1, 1},
        {64, 128, 4, 4, 256, 0, 1}, /* all 64 heads on one rank; products of 256 columns */
        {8, 96, 8, 1, 64, 1, 1},    /* dk < 128: a cluster of 3; the most taps */
        {8, 96, 8, 4, 0, 0, 1},
        {8, 96, 8, 8, 64, 1, 0},
        {4, 64, 2, 3, 128, 0, 1},   /* a cluster of 2 */
        {4, 64, 2, 8, 0, 1, 1},
        {3, 40, 2, 5, 200, 1, 1},   /* a block's columns in part */
        {3, 40, 1, 2, 0, 0, 1},     /* one tap: no conv state */
    };
    for (size_t i = 0; i < sizeof steps / sizeof *steps; i++)
        check_step(&steps[i]);
    check_scan_norm(32, 128, 1, 0); /* a token a launch, as the decode path runs it */
    check_scan_norm(32, 128, 8, 1);
    check_scan_norm(32, 128, 20, 1); /* launches of 8, 8 and 4 tokens */
    check_scan_norm(8, 96, 9, 1);
    check_scan_norm(3, 40, 17, 0);
    if (timed) {
        time_scan(ev0, ev1);
        time_prep(ev0, ev1);
        double gbs = copy_rate(ev0, ev1);
        time_step(1, 0, gbs, ev0, ev1);
        time_step(4, 1, gbs, ev0, ev1);
    }
    eng_event_free(ev0);
    eng_event_free(ev1);
    printf("%s: %d failure(s)\n", failures ? "FAIL" : "PASS", failures);
    return failures ? 1 : 0;
}
