/* test_gemm_rows.c: eng_gemm (the dense prefill products) at every dense shape GLM-5.3-Flash's and
 * mkmodel small's prefill uses: a row's bits whatever the chunk's size and the row's place in it,
 * run to run; the values against an f64 host reference; the time against cublasGemmEx's default;
 * the fixed mode's BF16 form (two fp16 parts, "fp16x2") at each BF16 shape against the three bf16
 * parts (cuda_gemm = three, the LM head's form), and its time against them.
 * Usage: test_gemm_rows [--no-time]; exit status 1 on any failure. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/engine.h"
#include "kernels/kernels.h"

#define GPU_TEST_NAME "test_gemm_rows"
#include "tests/gpu/gpu_test.h"
#include "tests/common/rng.h"

static uint64_t rng_state = 0x2545f4914f6cdd1dull;
static int failures;

static uint16_t to_bf16(float f) /* round to nearest even */
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

static float from_bf16(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

typedef struct shape {
    const char *name;
    int rows, cols;
} shape;

/* eng_gemm in the mode cuda_gemm = `mode` names, then back to the fixed algorithms. NULL: the
 * fixed algorithms with every BF16 weight in three bf16 parts (cuda_gemm = three: the form an LM
 * head takes, "the three parts" below), "fp16x2": the fixed algorithms as the engine runs them
 * (BF16 weights in two fp16 parts, cuda_gemm = fixed); "nosplit" and "default" on F32 weights. */
static int gemm(const char *mode, const eng_mat *w, const float *x, int T, float *y)
{
    int m = !mode ? ENG_GEMM_THREE
            : strcmp(mode, "nosplit") == 0 ? ENG_GEMM_NOSPLIT
            : strcmp(mode, "default") == 0 ? ENG_GEMM_CUBLAS
            : strcmp(mode, "fp16x2") == 0 ? ENG_GEMM_FIXED
            : strcmp(mode, "onepart") == 0 ? ENG_GEMM_ONEPART : -1;
    if (eng_gemm_set_mode(m))
        return -1;
    int rc = eng_gemm(w, x, T, y, NULL);
    eng_gemm_set_mode(ENG_GEMM_FIXED);
    return rc;
}

/* The kernels' lines (the algorithms chosen, failures) on stderr, as glmchat's stderr log has them. */
static void log_to_stderr(void *user, int level, const char *msg)
{
    (void)user;
    (void)level;
    fprintf(stderr, "glmchat: %s\n", msg);
}

static double time_us(const char *mode, const eng_mat *w, const float *x, int T, float *y, void *ev0,
                      void *ev1)
{
    const int reps = 10;
    CUDA_OK(gemm(mode, w, x, T, y)); /* warm: the plan, the buffers */
    CUDA_OK(eng_event_record(ev0, NULL));
    for (int i = 0; i < reps; i++)
        CUDA_OK(gemm(mode, w, x, T, y));
    CUDA_OK(eng_event_record(ev1, NULL));
    float ms = 0;
    CUDA_OK(eng_event_ms(ev0, ev1, &ms));
    return 1000.0 * ms / reps;
}

/* The chunk sizes (all > ENG_GEMM_MIN_ROWS), up to the memory plan's largest chunk of its own
 * choice (CUDA_CHUNK_CAP); the largest is the reference. */
static const int kT[] = {9, 17, 64, 288, 307, 1024, 2048, 4096, 8192, 16384};
enum { NT = sizeof kT / sizeof *kT, TMAX = 16384 };

/* The first row and column of `got` (T rows from row `at` of the reference) that differ. */
static int first_mismatch(const float *got, const float *ref, int T, int at, int rows, int *r, int *c)
{
    for (int i = 0; i < T; i++)
        for (int j = 0; j < rows; j++)
            if (memcmp(&got[(size_t)i * rows + j], &ref[(size_t)(at + i) * rows + j], 4) != 0) {
                *r = i;
                *c = j;
                return 1;
            }
    return 0;
}

/* Whether every T at two places (the chunk's first rows, its last rows), and T = TMAX again, gives
 * the bits of T = TMAX (`ref`, host) under `mode`; the first difference into `where`. */
static int bits_hold(const char *mode, const eng_mat *w, const float *xd, const float *ref, float *yd,
                     float *got, char *where, size_t n)
{
    int R = w->rows, K = w->cols;
    for (int t = 0; t < NT; t++) {
        int T = kT[t];
        int at[2] = {0, TMAX - T};
        for (int k = 0; k < (T == TMAX ? 1 : 2); k++) {
            CUDA_OK(gemm(mode, w, xd + (size_t)at[k] * K, T, yd));
            CUDA_OK(kern_sync());
            CUDA_OK(kern_to_host(got, yd, (size_t)T * R * sizeof *got));
            int r, c;
            if (first_mismatch(got, ref, T, at[k], R, &r, &c)) {
                float g = got[(size_t)r * R + c], e = ref[(size_t)(at[k] + r) * R + c];
                snprintf(where, n, "T=%d from row %d: row %d output %d is %.9g, at T=%d %.9g", T, at[k],
                         at[k] + r, c, g, TMAX, e);
                return 0;
            }
        }
    }
    return 1;
}

/* The rows whose values are checked against f64 sums: the ordinary ones (the fixed path's and
 * fp16x2's error against their bounds), and the special rows set_special_rows makes (the fp16x2
 * parts' per-row scale at its extremes; fp16x2's error there against the three parts' on the
 * same row: special_bound). */
static const int kOrdinary[] = {0, 1, TMAX / 2 + 3, TMAX - 1};
static const int kSpecial[] = {5, 6, 7, 8};
enum { NORDINARY = sizeof kOrdinary / sizeof *kOrdinary, NSPECIAL = sizeof kSpecial / sizeof *kSpecial };

/* Row 5 times 2^20, row 6 times 2^-20, row 7 zero, row 8 with its last element 1.5 * 2^20 (the
 * others at most 8: the row's scale set by one outlier, the rest 2^17 and more below it). The
 * outlier is the last term so that no accumulation step follows it in any split-K slice: past it
 * the tensor cores' truncating accumulation loses about 2^-24 of it a step (2^-24 K / 32 of
 * sum|w x| at K/2, past the fixed path's bound from K = 8192), in amounts that depend on where the
 * plan splits K, which the two modes' plans may do differently. */
static void set_special_rows(float *xh, int K)
{
    for (int k = 0; k < K; k++) {
        xh[(size_t)5 * K + k] = ldexpf(xh[(size_t)5 * K + k], 20);
        xh[(size_t)6 * K + k] = ldexpf(xh[(size_t)6 * K + k], -20);
        xh[(size_t)7 * K + k] = 0.0f;
    }
    xh[(size_t)8 * K + K - 1] = ldexpf(1.5f, 20);
}

/* The worst |y - f64| / sum|w x| over y's (host, TMAX x R) rows `rows` (n of them), output
 * `skip` left out (-1: none); a zero row's outputs count as their own magnitude (they must be 0). */
static double worst_error(const float *y, const float *xh, const float *wf, int R, int K, const int *rows,
                          int n, int skip)
{
    double worst = 0;
    for (int i = 0; i < n; i++) {
        const float *xr = xh + (size_t)rows[i] * K;
        for (int j = 0; j < R; j++) {
            if (j == skip)
                continue;
            const float *wr = wf + (size_t)j * K;
            double sum = 0, mag = 0;
            for (int k = 0; k < K; k++) {
                double p = (double)wr[k] * xr[k];
                sum += p;
                mag += fabs(p);
            }
            double e = fabs((double)y[(size_t)rows[i] * R + j] - sum) / (mag > 0 ? mag : 1);
            if (!(e <= worst)) /* NaN too */
                worst = e;
        }
    }
    return worst;
}

/* A shape's weight and inputs (host and device) and the output buffers its checks share. */
typedef struct shape_case {
    const shape *s;
    const char *dn; /* the weight's type */
    eng_mat w;
    void *wd;              /* device: w.data */
    float *wf, *xh;        /* host: the weight as the GPU holds it (in f32), the inputs */
    float *xd, *yref, *yd; /* device */
    float *ref, *got;      /* host: TMAX x rows */
} shape_case;

static shape_case case_make(const shape *s, int dtype)
{
    int R = s->rows, K = s->cols;
    shape_case c = {.s = s, .dn = dtype == ENG_BF16 ? "bf16" : "f32"};
    size_t wn = (size_t)R * K, xn = (size_t)TMAX * K, yn = (size_t)TMAX * R;
    /* weights ~ 1/sqrt(K), inputs over a few binades with all 24 significant bits (the split's
     * lower parts matter; two fp16 parts carry 22 of them) */
    c.wf = xmalloc(wn * sizeof *c.wf);
    c.xh = xmalloc(xn * sizeof *c.xh);
    float amp = 1.0f / sqrtf((float)K);
    for (size_t i = 0; i < wn; i++)
        c.wf[i] = amp * test_rng_uniform(&rng_state);
    for (size_t i = 0; i < xn; i++)
        c.xh[i] = (float)(2.0 * test_rng_unit(&rng_state) - 1.0) * (float)(1u << (test_rng_u32(&rng_state) % 4));
    set_special_rows(c.xh, K);
    void *wd;
    if (dtype == ENG_BF16) {
        uint16_t *wb = xmalloc(wn * sizeof *wb);
        for (size_t i = 0; i < wn; i++) {
            wb[i] = to_bf16(c.wf[i]);
            c.wf[i] = from_bf16(wb[i]); /* the reference multiplies what the GPU holds */
        }
        wd = dev_copy(wb, wn * sizeof *wb);
        free(wb);
    } else {
        wd = dev_copy(c.wf, wn * sizeof *c.wf);
    }
    c.wd = wd;
    c.w = (eng_mat){.dtype = dtype, .rows = R, .cols = K, .data = wd};
    c.xd = dev_copy(c.xh, xn * sizeof *c.xh);
    CUDA_OK(kern_malloc((void **)&c.yref, yn * sizeof *c.yref));
    CUDA_OK(kern_malloc((void **)&c.yd, yn * sizeof *c.yd));
    c.ref = xmalloc(yn * sizeof *c.ref);
    c.got = xmalloc(yn * sizeof *c.got);
    return c;
}

static void case_free(shape_case *c)
{
    free(c->wf);
    free(c->xh);
    free(c->ref);
    free(c->got);
    kern_free(c->wd);
    kern_free(c->xd);
    kern_free(c->yref);
    kern_free(c->yd);
}

static const int kTimedT[2] = {TMAX, 64};

/* The two fp16 parts' result at a BF16 shape: row bits across T (must hold), its worst error on
 * the ordinary rows (must be within fp16x2_bound) and on each special row (within special_bound),
 * the time at each of kTimedT when timed. */
typedef struct fp16x2_result {
    int equal, worst_ok; /* the bits hold; every row's error is within its bound */
    double worst, bound;
    double us[2];
} fp16x2_result;

/* Two fp16 parts keep about 22 bits a term (a term's error under 2^-22 of it), which over K
 * random terms is far below what the f32 accumulation itself loses, so their worst error on the
 * ordinary rows may not pass twice the three bf16 parts' on the same rows (worst3; 0 where those
 * did not run), nor kFp16x2Floor where that is smaller (the accumulation's error on H100 reaches
 * 1.1e-6 at K = 16384). A product of the hi parts alone (11 bits a term) errs by about
 * 2^-12 / sqrt(K) an output (rms), several times past the bound at every K here. */
static const double kFp16x2Floor = 1e-6;

static double fp16x2_bound(double worst3)
{
    return 2 * worst3 > kFp16x2Floor ? 2 * worst3 : kFp16x2Floor;
}

/* A special row's bound: its error in the three bf16 parts (e3) is the same accumulation's as
 * fp16x2's (the row's scale is a power of two in either mode, which moves no relative error, and
 * the outlier's last-step truncation is the same in both), so fp16x2 may not pass twice it, nor
 * kFp16x2Floor where that is smaller, as on the ordinary rows; a row the three parts give exactly
 * (the zero row: every output 0) must be exact. Without the three parts (e3 < 0): the floor. */
static double special_bound(double e3)
{
    return e3 == 0 ? 0 : fp16x2_bound(e3 > 0 ? e3 : 0);
}

static fp16x2_result check_fp16x2(shape_case *c, double worst3, const double *err3, int timed, void *ev0,
                                  void *ev1)
{
    int R = c->w.rows, K = c->w.cols;
    size_t yn = (size_t)TMAX * R;
    fp16x2_result r = {0, 0, 0, fp16x2_bound(worst3), {0, 0}};
    CUDA_OK(gemm("fp16x2", &c->w, c->xd, TMAX, c->yref));
    CUDA_OK(kern_sync());
    CUDA_OK(kern_to_host(c->ref, c->yref, yn * sizeof *c->ref));
    char where[160] = "";
    r.equal = bits_hold("fp16x2", &c->w, c->xd, c->ref, c->yd, c->got, where, sizeof where);
    if (!r.equal)
        printf("  %s fp16x2: %s\n", c->s->name, where);
    r.worst = worst_error(c->ref, c->xh, c->wf, R, K, kOrdinary, NORDINARY, -1);
    int close = r.worst <= r.bound;
    if (!close)
        printf("  %s fp16x2: error %.2e of sum|w x| over the bound %.2e\n", c->s->name, r.worst, r.bound);
    for (int i = 0; i < NSPECIAL; i++) {
        double e = worst_error(c->ref, c->xh, c->wf, R, K, &kSpecial[i], 1, -1);
        double b = special_bound(err3 ? err3[i] : -1);
        if (!(e <= b)) {
            printf("  %s fp16x2: special row %d's error %.2e over the bound %.2e (three parts: %.2e)\n",
                   c->s->name, kSpecial[i], e, b, err3 ? err3[i] : -1.0);
            close = 0;
        }
    }
    r.worst_ok = close;
    failures += !r.equal + !close;
    for (int k = 0; timed && k < 2; k++)
        r.us[k] = time_us("fp16x2", &c->w, c->xd, kTimedT[k], c->yd, ev0, ev1);
    return r;
}

/* A shape only the two fp16 parts run (main's odd_shapes). */
static void check_fp16x2_only(shape_case *c, int timed, void *ev0, void *ev1)
{
    fp16x2_result h = check_fp16x2(c, 0, NULL, timed, ev0, ev1);
    printf("%-18s %5d x %-6d %-4s fp16x2 only: bit %-3s error %.1e %s", c->s->name, c->w.rows, c->w.cols,
           c->dn, h.equal ? "yes" : "NO", h.worst, h.worst_ok ? "ok" : "FAIL");
    if (timed)
        printf("; us at T %d: %.1f, at T %d: %.1f", kTimedT[0], h.us[0], kTimedT[1], h.us[1]);
    printf("\n");
}

/* The output every input row's sum over the weight's row kBadRow, which holds one +Inf and one NaN. */
enum { kBadRow = 3 };

/* One Inf and one NaN in a BF16 weight (row kBadRow): fp16x2 leaves them out of the weight's
 * scale, so its other outputs keep their precision (within fp16x2_bound of the fixed path's error
 * on the same outputs) and output kBadRow is non-finite wherever the fixed path's is. Were they
 * in the maximum, the shift would turn every finite weight into fp16 zero and those outputs to 0. */
static void check_fp16x2_nonfinite(shape_case *c)
{
    int R = c->w.rows, K = c->w.cols;
    size_t yn = (size_t)TMAX * R;
    const uint16_t inf = 0x7f80, nan = 0x7fc0;
    char *row = (char *)c->wd + (size_t)kBadRow * K * 2;
    CUDA_OK(kern_to_device(row + 2 * 10, &inf, 2));
    CUDA_OK(kern_to_device(row + 2 * (K - 7), &nan, 2));
    CUDA_OK(gemm(NULL, &c->w, c->xd, TMAX, c->yref));
    CUDA_OK(kern_sync());
    CUDA_OK(kern_to_host(c->ref, c->yref, yn * sizeof *c->ref));
    double worst3 = worst_error(c->ref, c->xh, c->wf, R, K, kOrdinary, NORDINARY, kBadRow);
    int fixed_nonfinite[NORDINARY];
    for (int i = 0; i < NORDINARY; i++)
        fixed_nonfinite[i] = !isfinite(c->ref[(size_t)kOrdinary[i] * R + kBadRow]);
    CUDA_OK(gemm("fp16x2", &c->w, c->xd, TMAX, c->yd));
    CUDA_OK(kern_sync());
    CUDA_OK(kern_to_host(c->got, c->yd, yn * sizeof *c->got));
    double worst = worst_error(c->got, c->xh, c->wf, R, K, kOrdinary, NORDINARY, kBadRow);
    double bound = fp16x2_bound(worst3);
    int ok = worst <= bound, spread = 1;
    for (int i = 0; i < NORDINARY; i++)
        if (fixed_nonfinite[i] && isfinite(c->got[(size_t)kOrdinary[i] * R + kBadRow]))
            spread = 0;
    printf("%-18s %5d x %-6d %-4s fp16x2 vs one Inf and one NaN in weight row %d: other outputs' error %.1e "
           "(fixed path %.1e) %s; output %d non-finite where the fixed path's is: %s\n", c->s->name, R, K,
           c->dn, kBadRow, worst, worst3, ok ? "ok" : "FAIL", kBadRow, spread ? "yes" : "NO (FAIL)");
    failures += !ok + !spread;
}

/* cuda_gemm = onepart at a BF16 shape: the hi part alone, each input rounded to fp16 (a term's
 * error at most 2^-11 of it): row bits across T must hold, and the error on the ordinary rows
 * stay within 2^-11 of sum|w x| past the two parts' bound. */
static void check_onepart(shape_case *c, double bound2)
{
    int R = c->w.rows, K = c->w.cols;
    size_t yn = (size_t)TMAX * R;
    CUDA_OK(gemm("onepart", &c->w, c->xd, TMAX, c->yref));
    CUDA_OK(kern_sync());
    CUDA_OK(kern_to_host(c->ref, c->yref, yn * sizeof *c->ref));
    char where[160] = "";
    int equal = bits_hold("onepart", &c->w, c->xd, c->ref, c->yd, c->got, where, sizeof where);
    double worst = worst_error(c->ref, c->xh, c->wf, R, K, kOrdinary, NORDINARY, -1);
    double bound = bound2 + 0x1p-11;
    printf("  %s onepart: bit %s%s, error %.2e of sum|w x| (bound %.2e) %s\n", c->s->name,
           equal ? "yes" : "NO ", where, worst, bound, worst <= bound ? "ok" : "FAIL");
    failures += !equal + !(worst <= bound);
}

/* The fixed algorithms in three parts ("new path"), cublasGemmEx's default (the old) and, for BF16,
 * the two fp16 parts. */
static void check_modes(shape_case *c, int timed, void *ev0, void *ev1)
{
    const shape *s = c->s;
    const eng_mat *w = &c->w;
    int R = w->rows, K = w->cols;
    const char *dn = c->dn;
    size_t yn = (size_t)TMAX * R;
    CUDA_OK(gemm(NULL, w, c->xd, TMAX, c->yref));
    CUDA_OK(kern_sync());
    CUDA_OK(kern_to_host(c->ref, c->yref, yn * sizeof *c->ref));
    char where[160] = "";
    int equal = bits_hold(NULL, w, c->xd, c->ref, c->yd, c->got, where, sizeof where);
    /* values: a few rows against f64 sums, the error over sum |w x|; the bound is 16 f32 rounding
     * units and a random walk's 2 sqrt(K); a product of the hi parts alone errs by about
     * 2^-9 / sqrt(K) an output (rms), so its worst output is past the bound at every K here */
    double tol = ldexp(1.0, -24) * (16.0 + 2.0 * sqrt((double)K));
    double worst = worst_error(c->ref, c->xh, c->wf, R, K, kOrdinary, NORDINARY, -1);
    double err3[NSPECIAL]; /* the special rows', for fp16x2's bounds only */
    for (int i = 0; i < NSPECIAL; i++)
        err3[i] = worst_error(c->ref, c->xh, c->wf, R, K, &kSpecial[i], 1, -1);
    int close = worst <= tol;
    if (!equal)
        printf("  %s %s: %s\n", s->name, dn, where);
    if (!equal && w->dtype == ENG_F32) {
        /* what the second fixed choice (no split-K) does here, for the diagnosis */
        CUDA_OK(gemm("nosplit", w, c->xd, TMAX, c->yref));
        CUDA_OK(kern_sync());
        CUDA_OK(kern_to_host(c->ref, c->yref, yn * sizeof *c->ref));
        char w2[160] = "";
        int ns = bits_hold("nosplit", w, c->xd, c->ref, c->yd, c->got, w2, sizeof w2);
        printf("  %s %s: cuda_gemm = nosplit %s%s\n", s->name, dn, ns ? "is bit-equal" : "differs too: ", w2);
    }
    if (!close)
        printf("  %s %s: error %.2e of sum|w x| over the bound %.2e\n", s->name, dn, worst, tol);
    failures += !equal + !close;
    /* the former path, for comparison only: whether its rows keep their bits across chunks */
    CUDA_OK(gemm("default", w, c->xd, TMAX, c->yref));
    CUDA_OK(kern_sync());
    CUDA_OK(kern_to_host(c->ref, c->yref, yn * sizeof *c->ref));
    char w3[160] = "";
    int old_equal = bits_hold("default", w, c->xd, c->ref, c->yd, c->got, w3, sizeof w3);
    int bf16 = w->dtype == ENG_BF16;
    fp16x2_result h = {1, 1, 0, 0, {0, 0}};
    char hbits[48] = "";
    if (bf16) {
        h = check_fp16x2(c, worst, err3, timed, ev0, ev1);
        check_onepart(c, h.bound);
        snprintf(hbits, sizeof hbits, "   %-3s  %.1e %s", h.equal ? "yes" : "NO", h.worst,
                 h.worst_ok ? "ok" : "FAIL");
    }
    if (!timed) {
        printf("%-18s %5d x %-6d %-4s %-35s %-3s  %-3s  %.1e %-4s|%s\n", s->name, R, K, dn, "",
               equal ? "yes" : "NO", old_equal ? "yes" : "no", worst, close ? "ok" : "FAIL", hbits);
        return;
    }
    for (int k = 0; k < 2; k++) {
        double un = time_us(NULL, w, c->xd, kTimedT[k], c->yd, ev0, ev1);
        double uo = time_us("default", w, c->xd, kTimedT[k], c->yd, ev0, ev1);
        char htime[48] = "";
        if (bf16)
            snprintf(htime, sizeof htime, " %9.1f %6.2f", h.us[k], h.us[k] / un);
        printf("%-18s %5d x %-6d %-4s T%-5d %9.1f %9.1f %6.2f   %-3s  %-3s  %.1e %-4s|%-17s%s\n", s->name,
               R, K, dn, kTimedT[k], un, uo, un / uo, equal ? "yes" : "NO", old_equal ? "yes" : "no", worst,
               close ? "ok" : "FAIL", htime, hbits);
    }
}

/* how check_shape checks a shape */
enum { CHECK_MODES, CHECK_FP16X2_ONLY, CHECK_NONFINITE };

static void check_shape(const shape *s, int dtype, int how, int timed, void *ev0, void *ev1)
{
    shape_case c = case_make(s, dtype);
    if (how == CHECK_NONFINITE)
        check_fp16x2_nonfinite(&c);
    else if (how == CHECK_FP16X2_ONLY)
        check_fp16x2_only(&c, timed, ev0, ev1);
    else
        check_modes(&c, timed, ev0, ev1);
    case_free(&c);
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0); /* the table and eng_gemm's choices (stderr) in order */
    kern_set_log(log_to_stderr, NULL);
    char name[256];
    int timed = gpu_test_begin(argc, argv, name, sizeof name);
    void *ev0, *ev1;
    gpu_test_events(&ev0, &ev1);
    /* GLM-5.3-Flash: hidden 4096, 4 HC streams (24 mixing rows), KDA 64 x 128, MLA 64 heads of
     * 256, q_lora 2048, kv_lora 512, indexer 32 x 128, 288 experts, shared expert 2048, dense FFN
     * 12288; then mkmodel small (hidden 256, KDA 4 x 64, MLA 4 x 64, q_lora 128, kv_lora 64,
     * indexer 8 x 32, 16 experts, expert 64, dense FFN 512). One line a distinct shape. */
    const shape shapes[] = {
        {"hc mixing", 24, 16384},        {"kda q/k/v", 8192, 4096},      {"kda f_a/g_a, ix wk", 128, 4096},
        {"kda f_b/g_b", 8192, 128},      {"kda b", 64, 4096},            {"kda o, mtp eh", 4096, 8192},
        {"q_a, shared g/u", 2048, 4096}, {"q_b", 16384, 2048},           {"kv_a", 512, 4096},
        {"mla o", 4096, 16384},          {"ix wq_b", 4096, 2048},        {"ix weights", 32, 4096},
        {"router", 288, 4096},           {"shared down", 4096, 2048},    {"dense gate/up", 12288, 4096},
        {"dense down", 4096, 12288},     {"s: hc mixing", 24, 1024},     {"s: kda qkv/o, q_b", 256, 256},
        {"s: kda f_a, kv_a", 64, 256},   {"s: kda f_b/g_b", 256, 64},    {"s: kda b", 4, 256},
        {"s: q_a", 128, 256},            {"s: q_b, ix wq_b", 256, 128},  {"s: ix wk", 32, 256},
        {"s: ix weights", 8, 256},       {"s: router", 16, 256},         {"s: dense gate/up", 512, 256},
        {"s: dense down, eh", 256, 512},
    };
    /* no model's, for the two fp16 parts only: cols % 8 != 0 and rows % 4 != 0 (the weight's
     * conversion and the scale pass element by element), narrow (one GEMM of [W' W'], whose
     * 2 cols keep its rows on 16-byte boundaries) */
    const shape odd_shapes[] = {{"odd", 37, 100}};
    printf("bit: rows bit-equal to T=%d's at T in {9, 17, 64, 288, 307, 1024, 2048, 4096, 8192} (the first and the last rows "
           "of the %d) and run to run (new path: the fixed algorithms, three bf16 parts; must be yes); old: the same for cublasGemmEx's default "
           "(cuda_gemm = cublas, information); error: worst |y - f64| / sum|w x| over %d ordinary rows "
           "(new path); us: a product's time, new and old, ratio new / old; after |, BF16 only: "
           "the two fp16 parts' time (cuda_gemm = fixed) and its ratio to the new path's (timed), its bit (must be yes) "
           "and error on the same rows (must be <= twice the new path's, or <= %.0e; also checked on "
           "rows times 2^20 and 2^-20, a zero row and a row whose last element is 2^20 above the rest, "
           "each against the new path's error on that row)\n", TMAX, TMAX, NORDINARY, kFp16x2Floor);
    printf("%-18s %-14s %-4s %-6s %9s %9s %6s   %-3s  %-3s  %-12s|%s\n", "shape", "rows x cols", "w", "T",
           "us new", "us old", "ratio", "bit", "old", "error", timed ? " us f16x2  ratio   bit  error" : "   bit  error");
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) {
        check_shape(&shapes[i], ENG_BF16, CHECK_MODES, timed, ev0, ev1);
        check_shape(&shapes[i], ENG_F32, CHECK_MODES, timed, ev0, ev1);
    }
    for (size_t i = 0; i < sizeof odd_shapes / sizeof *odd_shapes; i++)
        check_shape(&odd_shapes[i], ENG_BF16, CHECK_FP16X2_ONLY, timed, ev0, ev1);
    const shape nonfinite = {"inf/nan weight", 128, 4096};
    check_shape(&nonfinite, ENG_BF16, CHECK_NONFINITE, 0, ev0, ev1);
    eng_event_free(ev0);
    eng_event_free(ev1);
    printf("%s: %d failure(s)\n", failures ? "FAIL" : "PASS", failures);
    return failures ? 1 : 0;
}
