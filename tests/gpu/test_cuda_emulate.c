/* test_cuda_emulate.c: the CUDA backend's lossy modes against the CPU backend's emulation of
 * them (--kv-cache fp8|bf16, --dense q4, cuda_gemm = onepart and pairings): both backends opened
 * with one backend_settings, a prompt prefilled then decoded, logits compared per row at f32
 * tolerance.
 * Usage: test_cuda_emulate [--trace|--trace-all] MODEL_DIR [PROMPT_TOKENS [DECODE_STEPS [LABEL]]].
 * Needs a GPU. A mode over tolerance (OVER) is run again with both backends' taps
 * (emulate_trace.h) and judged to its first flip at a near tie (judge_to_near_tie states the
 * rule) against the model's noise floor, its f32 runs traced alike (emu_trace_floor); a one-part
 * mode against its own noise floor too (measure_mode_floor: its roundings amplify the backends'
 * f32 noise). --trace prints the floor and, for each such mode, where the runs part: per layer and step the first
 * row over its threshold (EMU_TRACE_FLOOR_K x the floor, at least 1e-4), the first cache rows that differ, each flip of the indexer's pools or the router's
 * experts with their scores; --trace-all does so for the f32 run and every mode.
 * test_cuda_emulate --noise-check MODEL_DIR [PROMPT_TOKENS [DECODE_STEPS [LABEL]]] needs no GPU:
 * the mode floor's CPU side (the noise wrap off and on, the f32 and one-part floors it gives) and
 * the judge of the one-part modes with the CPU standing in for CUDA (noise_check); exit 1 when
 * any of it does not hold. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/gpu/cuda_env.h"
#include "tests/gpu/emulate_noise.h"
#include "tests/gpu/emulate_trace.h"
#include "backend.h"
#include "model/model.h"

/* Relative to the CPU emulation's largest |logit|, per row: the two backends store the same
 * values and differ only in f32 summation orders (test_cuda_engine's TOL_F32). A value sitting
 * on a rounding boundary of the cache format can round the other way on the other backend, a
 * step of 1/16 (fp8) or 1/256 (bf16) of it that later rows inherit: up to 2% of the rows may go
 * over, and the median row must stay inside. */
#define TOL_F32 1e-3
#define OVER_ROWS(n) ((n) / 50 > 1 ? (n) / 50 : 1)

typedef struct mode {
    const char *name;
    glm_kv_cache kv;
    glm_dense_format dense;
    glm_cuda_gemm gemm; /* ONEPART: the BF16 prefill products against one fp16 part */
} mode;

static const mode modes[] = {
    {"fp8 cache", GLM_KV_CACHE_FP8, GLM_DENSE_BF16, GLM_CUDA_GEMM_FIXED},
    {"bf16 cache", GLM_KV_CACHE_BF16, GLM_DENSE_BF16, GLM_CUDA_GEMM_FIXED},
    {"q4 dense", GLM_KV_CACHE_F32, GLM_DENSE_Q4, GLM_CUDA_GEMM_FIXED},
    {"fp8 + q4", GLM_KV_CACHE_FP8, GLM_DENSE_Q4, GLM_CUDA_GEMM_FIXED},
    {"bf16 + q4", GLM_KV_CACHE_BF16, GLM_DENSE_Q4, GLM_CUDA_GEMM_FIXED},
    {"one part", GLM_KV_CACHE_F32, GLM_DENSE_BF16, GLM_CUDA_GEMM_ONEPART},
    {"fp8 + one part", GLM_KV_CACHE_FP8, GLM_DENSE_BF16, GLM_CUDA_GEMM_ONEPART},
    {"q4 + one part", GLM_KV_CACHE_F32, GLM_DENSE_Q4, GLM_CUDA_GEMM_ONEPART}, /* the router's */
};

/* What runs where a test asks for CUDA (run's cuda): CUDA itself; or, for --noise-check where no
 * GPU is, the CPU backend (cpu) with one part left out (skip_onepart: a broken one part, which
 * the judge must fail) and noise_ulps of noise of its own from seed (emulate_noise.h: a run whose
 * f32 noise differs from the emulation's, as CUDA's does). */
static struct {
    int cpu, skip_onepart;
    double noise_ulps;
    uint64_t seed;
} stand_in;

/* (P + S) x vocab logits: P tokens in one prefill (all rows), then S decode steps. */
static int run(const glm_model *m, int cuda, const backend_settings *s, const int32_t *tok, int P,
               int S, float *out, glm_error *err)
{
    engine_backend be;
    backend_settings own;
    int standing_in = cuda && stand_in.cpu;
    if (standing_in) {
        own = *s;
        if (stand_in.skip_onepart)
            own.cuda.gemm = GLM_CUDA_GEMM_FIXED;
        s = &own;
    }
    glm_status st = cuda && !standing_in ? backend_open_cuda_with(m, s, &be, err)
                                         : backend_open_cpu_with(m, 0, s, &be, err);
    if (st)
        return -1;
    if (standing_in)
        emu_noise_set(stand_in.noise_ulps, stand_in.seed);
    int V = m->cfg.vocab_size, rc = -1;
    void *state = be.ops->state_new(be.impl, err);
    if (state && be.ops->prefill(be.impl, state, tok, P, out, 1, err) == GLM_OK) {
        rc = 0;
        for (int t = P; rc == 0 && t < P + S; t++)
            if (be.ops->prefill(be.impl, state, tok + t, 1, out + (size_t)t * V, 0, err))
                rc = -1;
    }
    if (standing_in)
        emu_noise_set(0, 0);
    if (state)
        be.ops->state_free(state);
    backend_close(&be);
    return rc;
}

/* run() with a trace of the forward (emulate_trace.h) into t. */
static int run_traced(const glm_model *m, int cuda, const backend_settings *s, const int32_t *tok,
                      int P, int S, float *out, emu_trace *t, glm_error *err)
{
    if (emu_trace_init(t, &m->cfg, P + S)) {
        glm_error_set(err, GLM_ERR_ARG, "the trace takes models of at most 64 layers");
        return -1;
    }
    t->cache_fmt = s->kv_cache == GLM_KV_CACHE_FP8    ? NUMFMT_CACHE_FP8
                   : s->kv_cache == GLM_KV_CACHE_BF16 ? NUMFMT_CACHE_BF16
                                                      : NUMFMT_CACHE_F32;
    t->fp8_rule = s->fp8_rule;
    backend_settings ts = *s;
    ts.tap = emu_trace_tap(t);
    return run(m, cuda, &ts, tok, P, S, out, err);
}

/* Both backends again under s, traced; where they part (printed with verbose). *ok: 0 when a
 * traced run failed. out: scratch logits. */
static emu_trace_diff trace_mode(const glm_model *m, const backend_settings *s, const int32_t *tok,
                                 int P, int S, float *out, const char *label, const char *mode,
                                 int verbose, const emu_trace_floor *floor, int *ok)
{
    emu_trace cpu, gpu;
    glm_error err = {0};
    char head[256];
    emu_trace_diff d = {.first_row = -1, .first_tie_row = -1, .first_other_flip_row = -1,
                        .first_pos = -1, .tie_pos = -1};
    memset(&cpu, 0, sizeof cpu); /* freed below even where a run failed before its trace began */
    memset(&gpu, 0, sizeof gpu);
    snprintf(head, sizeof head, "TRACE %s %s", label, mode);
    *ok = 1;
    if (run_traced(m, 0, s, tok, P, S, out, &cpu, &err) ||
        run_traced(m, 1, s, tok, P, S, out, &gpu, &err)) {
        printf("%s: the traced run failed: %s\n", head, err.message);
        *ok = 0;
    } else {
        d = emu_trace_compare_floor(verbose ? stdout : NULL, head, m, &cpu, &gpu, floor);
    }
    emu_trace_free(&cpu);
    emu_trace_free(&gpu);
    fflush(stdout);
    return d;
}

/* The largest per-op difference of f, and where (*wl, *ww; -1: none). The pool keys are left
 * out: their rows are pools, not tokens, so the floor compares them past its rows. */
static double floor_worst(const glm_model *m, const emu_trace_floor *f, int *wl, int *ww)
{
    double worst = 0;
    *wl = *ww = -1;
    for (int l = 0; l < m->cfg.num_layers && l < 64; l++)
        for (int w = 0; w < BACKEND_TAP_COUNT; w++)
            if (w != BACKEND_TAP_POOL_KEY && f->rel[l][w] > worst)
                worst = f->rel[l][w], *wl = l, *ww = w;
    return worst;
}

/* The model's noise floor: both backends' f32 runs (f32 cache, bf16 dense) traced, per (layer,
 * step) their largest difference over the rows before their first flip. 0, or -1 when a traced
 * run failed (the judge then falls back to the fixed 1e-4). */
static int measure_floor(const glm_model *m, const backend_settings *s, const int32_t *tok, int P,
                         int S, float *out, const char *label, int verbose, emu_trace_floor *f)
{
    backend_settings f32 = *s;
    f32.kv_cache = GLM_KV_CACHE_F32;
    f32.dense = GLM_DENSE_BF16;
    f32.cuda.gemm = GLM_CUDA_GEMM_FIXED;
    emu_trace cpu, gpu;
    glm_error err = {0};
    int rc = 0;
    memset(&cpu, 0, sizeof cpu);
    memset(&gpu, 0, sizeof gpu);
    if (run_traced(m, 0, &f32, tok, P, S, out, &cpu, &err) ||
        run_traced(m, 1, &f32, tok, P, S, out, &gpu, &err)) {
        printf("FLOOR %s: the traced f32 run failed: %s; judged against 1e-4\n", label, err.message);
        rc = -1;
    } else if (cpu.failed || gpu.failed) {
        printf("FLOOR %s: a traced f32 run failed (out of memory); judged against 1e-4\n", label);
        rc = -1;
    } else {
        emu_trace_floor_measure(&cpu, &gpu, f);
        for (int l = 0; verbose && l < m->cfg.num_layers && l < 64; l++)
            for (int w = 0; w < BACKEND_TAP_COUNT; w++)
                if (f->rel[l][w] > 0)
                    printf("FLOOR %s   layer %d %-20s f32 CUDA vs CPU %.2e -> threshold %.2e\n",
                           label, l, emu_trace_step_name((backend_tap_what)w), f->rel[l][w],
                           emu_trace_threshold(f, l, (backend_tap_what)w));
        int wl, ww;
        double worst = floor_worst(m, f, &wl, &ww);
        printf("FLOOR %s: f32 CUDA vs CPU over rows 0-%d (before their first flip): the largest "
               "per-op difference %.2e (layer %d %s)%s; thresholds %.0f x the floor, within "
               "[%.0e, %.0e]\n", label, f->rows - 1, worst, wl,
               ww >= 0 ? emu_trace_step_name((backend_tap_what)ww) : "none",
               f->nonfinite ? ", some steps non-finite (left out)" : "", EMU_TRACE_FLOOR_K,
               EMU_TRACE_DIFF, EMU_TRACE_FLOOR_CAP);
    }
    emu_trace_free(&cpu);
    emu_trace_free(&gpu);
    fflush(stdout);
    return rc;
}

static double row_diff(const float *a, const float *b, int V);
static double rms_rel(const float *a, const float *b, size_t n);
static void compare(const float *a, const float *b, int N, int V, double tol, double *rows,
                    int *over, int *first, double *median, double *worst);

/* The noise put on each CPU product for a mode's own floor: one ulp at most (emulate_noise.h),
 * no more than two summation orders leave between the backends' f32 products (the largest of
 * their measured floor must not be smaller: measure_mode_floor checks). */
#define EMU_NOISE_ULPS 1.0

/* The CPU emulation under s traced twice, the second with EMU_NOISE_ULPS of noise on every
 * product (emulate_noise.h): per (layer, step) the largest difference over the rows before the
 * noisy run's first flip (emu_trace_floor_measure) into f, and the logits' rows over those rows
 * (as compare measures them): the largest into *logits, the median into *median. 0, or -1 saying
 * why. */
static int noise_floor(const glm_model *m, const backend_settings *s, const int32_t *tok, int P,
                       int S, float *out_a, float *out_b, double *rows, const char *label,
                       emu_trace_floor *f, double *logits, double *median)
{
    emu_trace a, b;
    glm_error err = {0};
    memset(&a, 0, sizeof a);
    memset(&b, 0, sizeof b);
    emu_noise_set(0, 0);
    int rc = run_traced(m, 0, s, tok, P, S, out_a, &a, &err);
    emu_noise_set(EMU_NOISE_ULPS, 1);
    if (!rc)
        rc = run_traced(m, 0, s, tok, P, S, out_b, &b, &err);
    uint64_t noised = emu_noise_products();
    emu_noise_set(0, 0);
    int failed = rc || a.failed || b.failed || !noised;
    if (rc || a.failed || b.failed)
        printf("MODE FLOOR %s: a traced CPU run failed: %s\n", label,
               rc ? err.message : "out of memory");
    else if (!noised)
        printf("MODE FLOOR %s: no product took the noise: the program is not linked with "
               "-Wl,--wrap=cpu_matmul and tests/gpu/emulate_noise.c\n", label);
    else {
        emu_trace_floor_measure(&a, &b, f);
        int over;
        *logits = *median = 0;
        if (f->rows > 0)
            compare(out_a, out_b, f->rows, m->cfg.vocab_size, TOL_F32, rows, &over, NULL, median,
                    logits);
    }
    emu_trace_free(&a);
    emu_trace_free(&b);
    return failed ? -1 : 0;
}

/* The calibration of a mode floor's noise: how far EMU_NOISE_ULPS on each CPU product moves the
 * f32 runs (the largest op, floor_worst), measured once (state 0 not yet, 1 measured, -1 failed)
 * for every one-part mode of the run: it depends on the model and prompt alone. */
typedef struct noise_cal {
    int state, layer, step;
    double worst;
} noise_cal;

/* cal measured now if it is not yet, under s's f32 form (f32 cache, bf16 dense, no one part).
 * 0, or -1 (said by noise_floor). */
static int noise_calibrate(const glm_model *m, const backend_settings *s, const int32_t *tok,
                           int P, int S, float *out_a, float *out_b, double *rows,
                           const char *label, noise_cal *cal)
{
    if (!cal->state) {
        backend_settings plain = *s;
        plain.kv_cache = GLM_KV_CACHE_F32;
        plain.dense = GLM_DENSE_BF16;
        plain.cuda.gemm = GLM_CUDA_GEMM_FIXED;
        emu_trace_floor f;
        double logits, median;
        cal->state = noise_floor(m, &plain, tok, P, S, out_a, out_b, rows, label, &f, &logits,
                                 &median) ? -1 : 1;
        if (cal->state > 0)
            cal->worst = floor_worst(m, &f, &cal->layer, &cal->step);
    }
    return cal->state > 0 ? 0 : -1;
}

/* A one-part mode's own noise floor. Its products round each input row to fp16 (a power-of-two
 * row scale): the backends' f32 noise moves values across fp16 rounding midpoints, and each
 * crossing moves a product by an fp16 step, so the mode's runs differ far beyond the f32 floor
 * while computing the same thing (mkmodel small, one ulp on each CPU product: 4.4e-4 at layer 0's
 * FFN output, where the f32 runs differ by 1.3e-6). Measured so: noise_floor under the mode with
 * an f32 cache (a cache format's own midpoints are the tie rule's, emulate_trace.c), allowed only
 * where the same noise moves the f32 runs (cal, noise_calibrate) by no more than the largest
 * difference of the backends' own measured f32 floor (f32). mf: per op the larger of f32's and the mode's; *tol:
 * each logits row's tolerance and *tol_median the median row's, the mode's largest and median
 * logits differences times EMU_TRACE_FLOOR_K, within [TOL_F32, EMU_TRACE_FLOOR_CAP]. 0, or -1
 * saying why (the mode is then judged as every other mode). */
static int measure_mode_floor(const glm_model *m, const backend_settings *s, const int32_t *tok,
                              int P, int S, float *out_a, float *out_b, double *rows,
                              const char *label, const char *mode, int verbose,
                              const emu_trace_floor *f32, noise_cal *cal, emu_trace_floor *mf,
                              double *tol, double *tol_median)
{
    backend_settings own_s = *s;
    own_s.kv_cache = GLM_KV_CACHE_F32;
    emu_trace_floor own;
    double own_logits, own_median;
    int fl, fw, ol, ow;
    if (noise_calibrate(m, s, tok, P, S, out_a, out_b, rows, label, cal) ||
        noise_floor(m, &own_s, tok, P, S, out_a, out_b, rows, label, &own, &own_logits, &own_median))
        return -1;
    double cal_worst = cal->worst, f32_worst = floor_worst(m, f32, &fl, &fw);
    int cl = cal->layer, cw = cal->step;
    if (!(cal_worst <= f32_worst)) {
        printf("MODE FLOOR %s %s: %.0f ulp on each CPU product moves the f32 runs by %.2e (layer %d "
               "%s), more than the backends' own f32 floor %.2e: not a measure of their noise; "
               "judged against the f32 floor\n", label, mode, EMU_NOISE_ULPS, cal_worst, cl,
               cw >= 0 ? emu_trace_step_name((backend_tap_what)cw) : "none", f32_worst);
        return -1;
    }
    if (!isfinite(own_logits) || !isfinite(own_median) || own.nonfinite || own.rows < 1) {
        printf("MODE FLOOR %s %s: the noisy run %s; judged against the f32 floor\n", label, mode,
               own.rows < 1 ? "flips a choice at row 0 already" : "has non-finite values");
        return -1;
    }
    *mf = *f32;
    for (int l = 0; l < 64; l++)
        for (int w = 0; w < BACKEND_TAP_COUNT; w++) {
            mf->rel[l][w] = fmax(f32->rel[l][w], own.rel[l][w]);
            if (verbose && own.rel[l][w] > 0 && l < m->cfg.num_layers)
                printf("MODE FLOOR %s %s   layer %d %-20s %.2e (f32 %.2e) -> threshold %.2e\n",
                       label, mode, l, emu_trace_step_name((backend_tap_what)w), own.rel[l][w],
                       f32->rel[l][w], emu_trace_threshold(mf, l, (backend_tap_what)w));
        }
    double own_worst = floor_worst(m, &own, &ol, &ow);
    *tol = fmin(fmax(TOL_F32, EMU_TRACE_FLOOR_K * own_logits), EMU_TRACE_FLOOR_CAP);
    *tol_median = fmin(fmax(TOL_F32, EMU_TRACE_FLOOR_K * own_median), EMU_TRACE_FLOOR_CAP);
    printf("MODE FLOOR %s %s: the CPU emulation against itself with %.0f ulp on each product "
           "(which moves its f32 runs by at most %.2e, within the backends' %.2e) over rows 0-%d: "
           "the largest per-op difference %.2e (layer %d %s), logits %.2e (median %.2e); "
           "thresholds %.0f x the larger floor, each logits row within %.2e, the median %.2e\n",
           label, mode, EMU_NOISE_ULPS, cal_worst, f32_worst, own.rows - 1, own_worst, ol,
           ow >= 0 ? emu_trace_step_name((backend_tap_what)ow) : "none", own_logits, own_median,
           EMU_TRACE_FLOOR_K, *tol, *tol_median);
    fflush(stdout);
    return 0;
}

/* A mode that failed, judged again up to its first flip at a near tie, against the model's noise
 * floor (floor; NULL: the fixed EMU_TRACE_DIFF and EMU_TRACE_NEAR_TIE). The two backends' f32
 * runs already differ per op by the floor (on the EXL3 models up to ~1e-3: the CUDA kernels
 * multiply fp16 activations), so a mode's difference at an op within EMU_TRACE_FLOOR_K x the floor
 * there is the backends' own. A discrete choice (a MoE router's experts, the indexer's pools)
 * whose candidates the emulation scored within that noise of each other is one the noise decides:
 * no emulation can promise CUDA's choice there, and the runs differ legitimately from that row
 * on. So is a cache row that the two store differently while their unrounded rows agree within
 * the noise and lie within it of a rounding midpoint, each run rounding its own row exactly as
 * numfmt does. The rule: every cache row of both runs is numfmt's rounding of the run's own
 * unrounded row; no op of a row before the first near tie differs beyond its threshold; the first
 * flip must be at a near tie (a flip at a clear margin fails); and the rows before it must pass
 * as a whole run must (OVER_ROWS; each row within tol and the median within tol_median: TOL_F32,
 * or a one-part mode's own, measure_mode_floor); the rows from it on are counted, not judged.
 * 1: passes so. */
static int judge_to_near_tie(const glm_model *m, const backend_settings *s, const int32_t *tok,
                             int P, int S, const float *emu, const float *gpu, float *scratch,
                             double *rows, const char *label, const char *mode, int verbose,
                             const emu_trace_floor *floor, double tol, double tol_median)
{
    int N = P + S, V = m->cfg.vocab_size, ok;
    emu_trace_diff d = trace_mode(m, s, tok, P, S, scratch, label, mode, verbose, floor, &ok);
    if (!ok)
        return 0;
    emu_trace_verdict v = emu_trace_judge(&d, floor != NULL);
    if (v == EMU_TRACE_NOT_NUMFMT) {
        printf("FAIL: %-22s %-10s cache rows stored otherwise than numfmt rounds the backend's own "
               "unrounded rows: CUDA %d of %d, CPU %d of %d (run with --trace for the first)\n",
               label, mode, d.rounding_bad[1], d.rounding_rows[1], d.rounding_bad[0],
               d.rounding_rows[0]);
        return 0;
    }
    const char *against = floor ? "its threshold, the floor's" : "the fixed 1e-4";
    if (v == EMU_TRACE_NO_TIE) {
        printf("FAIL: %-22s %-10s no flip at a near tie explains the difference (the first step "
               "over %s: row %d layer %d %s, %.2e over %.2e; CUDA's %d cache rows are numfmt's "
               "rounding of its own unrounded rows)\n", label, mode, against, d.first_row,
               d.first_layer,
               d.first_step >= 0 ? emu_trace_step_name((backend_tap_what)d.first_step) : "none",
               d.first_rel, d.first_threshold, d.rounding_rows[1]);
        return 0;
    }
    if (v == EMU_TRACE_BEYOND) {
        printf("FAIL: %-22s %-10s row %d layer %d %s differs by %.2e, beyond %s (%.2e), before "
               "the first near tie (row %d): not the backends' noise\n", label, mode, d.first_row,
               d.first_layer, emu_trace_step_name((backend_tap_what)d.first_step), d.first_rel,
               against, d.first_threshold, d.first_tie_row);
        return 0;
    }
    if (v == EMU_TRACE_CLEAR_FLIP) {
        printf("FAIL: %-22s %-10s row %d flips a choice at a clear margin, before the first near "
               "tie (row %d); run with --trace for its scores\n", label, mode,
               d.first_other_flip_row, d.first_tie_row);
        return 0;
    }
    int R = d.first_tie_row, over = 0, first = -1;
    double median = 0, worst = 0;
    const char *what = d.tie_step == BACKEND_TAP_EXPERTS ? "router's experts"
                       : d.tie_step == BACKEND_TAP_SELECT ? "indexer's pools"
                       : d.tie_step == BACKEND_TAP_POOL_KEY
                           ? "pool key's rounding (made from alike keys and gates)"
                           : floor ? "cache row's rounding (unrounded rows and margin within the floor's threshold, margin)"
                                   : "cache row's rounding (unrounded rows within 1e-4, margin)";
    if (R > 0)
        compare(emu, gpu, R, V, tol, rows, &over, &first, &median, &worst);
    ok = R == 0 || (over <= OVER_ROWS(R) && median <= tol_median && isfinite(worst));
    char before[128];
    if (R > 0)
        snprintf(before, sizeof before, "rows 0-%d %s (%d over %.2e, median %.2e, worst %.2e)",
                 R - 1, ok ? "agree" : "differ", over, tol, median, worst);
    else
        snprintf(before, sizeof before, "no row before it (every op within the floor's threshold)");
    printf("%s: %-22s %-10s to a near tie: %s; at row %d layer %d the %s, scored within %.2e of "
           "each other by the emulation, went the other way on CUDA: the %d rows from there on "
           "follow other choices and are not judged; CUDA's %d cache rows are numfmt's rounding of "
           "its own unrounded rows\n",
           ok ? "PASS" : "FAIL", label, mode, before, R, d.tie_layer, what, d.tie_spread, N - R,
           d.rounding_rows[1]);
    return ok;
}

/* The buffers of a mode's check: N x vocab logits each, and N doubles. */
typedef struct check_bufs {
    float *ref, *emu, *gpu, *scratch, *noisy;
    double *rows;
} check_bufs;

/* One mode (s as the mode sets it): the CPU emulation and CUDA run, their logits compared row by
 * row; a mode over tolerance judged again to its first near tie (judge_to_near_tie) against the
 * f32 floor (measured once, for the first mode judged: *floor_state 0 not yet, 1 measured, -1
 * failed) or, a one-part mode, its own where it can be measured (its noise calibrated once: cal).
 * 1: passes. */
static int check_mode(const glm_model *m, const backend_settings *s, const char *name,
                      const int32_t *tok, int P, int S, const char *label, int trace,
                      const check_bufs *b, int *floor_state, emu_trace_floor *floor,
                      noise_cal *cal)
{
    int N = P + S, V = m->cfg.vocab_size;
    size_t NV = (size_t)N * V;
    glm_error err = {0};
    if (run(m, 0, s, tok, P, S, b->emu, &err)) {
        printf("FAIL: %s %s: the CPU emulation: %s\n", label, name, err.message);
        return 0;
    }
    if (run(m, 1, s, tok, P, S, b->gpu, &err)) {
        printf("FAIL: %s %s: the CUDA backend: %s\n", label, name, err.message);
        return 0;
    }
    int over = 0, first = -1;
    double median = 0, worst = 0;
    compare(b->emu, b->gpu, N, V, TOL_F32, b->rows, &over, &first, &median, &worst);
    double vs_emu = rms_rel(b->emu, b->gpu, NV), vs_f32 = rms_rel(b->ref, b->gpu, NV);
    int ok = over <= OVER_ROWS(N) && median <= TOL_F32 && isfinite(worst);
    printf("%s: %-22s %-10s CUDA vs CPU emulation: rows max|diff|/scale median %.2e, worst "
           "%.2e, %d/%d over %.0e (first %d); rms rel: vs emulation %.2e, vs CPU f32 %.2e\n",
           ok ? "PASS" : "OVER", label, name, median, worst, over, N, TOL_F32, first, vs_emu,
           vs_f32);
    if (ok) {
        if (trace == 2) {
            int traced;
            trace_mode(m, s, tok, P, S, b->scratch, label, name, 1, NULL, &traced);
        }
        return 1;
    }
    if (!*floor_state)
        *floor_state = measure_floor(m, s, tok, P, S, b->scratch, label, trace > 0, floor) ? -1 : 1;
    emu_trace_floor mode_floor;
    const emu_trace_floor *judge_floor = *floor_state > 0 ? floor : NULL;
    double tol = TOL_F32, tol_median = TOL_F32;
    if (*floor_state > 0 && s->cuda.gemm == GLM_CUDA_GEMM_ONEPART &&
        !measure_mode_floor(m, s, tok, P, S, b->scratch, b->noisy, b->rows, label, name, trace > 0,
                            floor, cal, &mode_floor, &tol, &tol_median))
        judge_floor = &mode_floor;
    /* judged again to its first flip at a near tie (traced: the logits kept) */
    return judge_to_near_tie(m, s, tok, P, S, b->emu, b->gpu, b->scratch, b->rows, label, name,
                             trace > 0, judge_floor, tol, tol_median);
}

/* --noise-check, where no GPU is: (1) the mode floor's machinery: without noise two traced CPU
 * runs are equal bit for bit; with it the wrap took the products and moved the f32 runs by f32's
 * size (above 0, under EMU_TRACE_DIFF); the one-part floor it gives, printed. (2) The judge of the
 * one-part modes (f32 and fp8 caches) with the CPU standing in for CUDA (stand_in): a correct run
 * with noise of its own (EMU_NOISE_ULPS x 4, so its f32 floor clearly covers the floor's noise) must pass,
 * one with one part left out and the same noise must fail. 0: all held. */
static int noise_check(const glm_model *m, const int32_t *tok, int P, int S, const char *label,
                       const check_bufs *cb)
{
    int V = m->cfg.vocab_size, N = P + S, fails = 0;
    noise_cal cal = {0}; /* the f32 runs' noise below: the judge's calibration too */
    backend_settings s = {0};
    s.context = N;
    s.kv_cache = GLM_KV_CACHE_F32;
    s.dense = GLM_DENSE_BF16;
    s.cuda.chunk = 16384; /* the rows one part rounds depend on the CUDA chunk: the H200 plan's */
    emu_trace x, y;
    glm_error err = {0};
    memset(&x, 0, sizeof x);
    memset(&y, 0, sizeof y);
    emu_noise_set(0, 0);
    if (run_traced(m, 0, &s, tok, P, S, cb->emu, &x, &err) ||
        run_traced(m, 0, &s, tok, P, S, cb->gpu, &y, &err) || x.failed || y.failed) {
        printf("FAIL: %s: a traced CPU run failed: %s\n", label, err.status ? err.message : "out of memory");
        fails++;
    } else {
        emu_trace_floor same;
        emu_trace_floor_measure(&x, &y, &same);
        int l, w;
        double d = floor_worst(m, &same, &l, &w);
        int logits_differ = memcmp(cb->emu, cb->gpu, (size_t)N * V * sizeof(float)) != 0;
        if (d != 0 || logits_differ || emu_noise_products()) {
            printf("FAIL: %s: two CPU runs without noise differ (%s) or took noise\n", label,
                   d != 0 ? emu_trace_step_name((backend_tap_what)w) : logits_differ ? "logits" : "no");
            fails++;
        } else
            printf("PASS: %s: two CPU runs without noise are equal bit for bit\n", label);
    }
    emu_trace_free(&x);
    emu_trace_free(&y);
    for (int k = 0; k < 2; k++) {
        s.cuda.gemm = k ? GLM_CUDA_GEMM_ONEPART : GLM_CUDA_GEMM_FIXED;
        emu_trace_floor f;
        double logits = 0, median = 0;
        if (noise_floor(m, &s, tok, P, S, cb->emu, cb->gpu, cb->rows, label, &f, &logits, &median)) {
            printf("FAIL: %s: the %s noise floor could not be measured\n", label,
                   k ? "one-part" : "f32");
            fails++;
            continue;
        }
        int l, w;
        double worst = floor_worst(m, &f, &l, &w);
        const char *op = w >= 0 ? emu_trace_step_name((backend_tap_what)w) : "none";
        if (!k)
            cal = (noise_cal){1, l, w, worst};
        if (!k && !(worst > 0 && worst < EMU_TRACE_DIFF)) {
            printf("FAIL: %s: %.0f ulp on each product moved the f32 runs by %.2e (layer %d %s): "
                   "not f32's size (above 0, under %.0e)\n", label, EMU_NOISE_ULPS, worst, l, op,
                   EMU_TRACE_DIFF);
            fails++;
        } else
            printf("%s: %s: %.0f ulp on each product moves the %s runs by at most %.2e (layer %d "
                   "%s) over rows 0-%d, the logits by %.2e\n", k ? "MODE FLOOR" : "PASS", label,
                   EMU_NOISE_ULPS, k ? "one-part" : "f32", worst, l, op, f.rows - 1, logits);
    }
    /* the judge: the CPU f32 run as the reference's f32 (vs CPU f32 in the lines) */
    s.cuda.gemm = GLM_CUDA_GEMM_FIXED;
    if (run(m, 0, &s, tok, P, S, cb->ref, &err)) {
        printf("FAIL: %s: the CPU f32 run: %s\n", label, err.message);
        return 1;
    }
    s.cuda.gemm = GLM_CUDA_GEMM_ONEPART;
    if (run(m, 0, &s, tok, P, S, cb->emu, &err)) {
        printf("FAIL: %s: the CPU one-part run: %s\n", label, err.message);
        return 1;
    }
    if (!memcmp(cb->ref, cb->emu, (size_t)N * V * sizeof(float))) {
        printf("SKIP: %s: one part rounds none of this model's products (its logits are the f32 "
               "run's): a run without it is no broken one to judge\n", label);
        return fails ? 1 : 0;
    }
    static const mode judged[] = {
        {"one part", GLM_KV_CACHE_F32, GLM_DENSE_BF16, GLM_CUDA_GEMM_ONEPART},
        {"fp8 + one part", GLM_KV_CACHE_FP8, GLM_DENSE_BF16, GLM_CUDA_GEMM_ONEPART},
    };
    for (size_t k = 0; k < sizeof judged / sizeof judged[0]; k++)
        for (int broken = 0; broken < 2; broken++) {
            s.kv_cache = judged[k].kv;
            s.dense = judged[k].dense;
            s.cuda.gemm = judged[k].gemm;
            stand_in.cpu = 1, stand_in.skip_onepart = broken;
            stand_in.noise_ulps = 4 * EMU_NOISE_ULPS, stand_in.seed = 7;
            const char *what = broken ? "one part left out" : "a correct run with noise of its own";
            printf("== judge %s %s: the CPU stands for CUDA, %s (%s)\n", label, judged[k].name, what,
                   broken ? "must fail" : "must pass");
            int floor_state = 0;
            emu_trace_floor floor;
            int ok = check_mode(m, &s, judged[k].name, tok, P, S, label, 0, cb, &floor_state, &floor,
                                &cal);
            stand_in.cpu = 0;
            int held = ok != broken;
            printf("%s: %s %s: the judge %s %s\n", held ? "PASS" : "FAIL", label, judged[k].name,
                   ok ? "passed" : "failed", what);
            fails += !held;
        }
    return fails ? 1 : 0;
}

static double row_diff(const float *a, const float *b, int V)
{
    double d = 0;
    for (int v = 0; v < V; v++)
        d = fmax(d, fabs((double)a[v] - b[v]));
    return d;
}

static double rms_rel(const float *a, const float *b, size_t n)
{
    double num = 0, den = 1e-30;
    for (size_t i = 0; i < n; i++) {
        num += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        den += (double)a[i] * a[i];
    }
    return sqrt(num / den);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Rows of b against a, each as max|diff| over a's largest |logit|: how many are over tol (and the
 * first), their median and the worst. rows: N scratch doubles. */
static void compare(const float *a, const float *b, int N, int V, double tol, double *rows,
                    int *over, int *first, double *median, double *worst)
{
    size_t NV = (size_t)N * V;
    double scale = 0, w = 0;
    for (size_t i = 0; i < NV; i++)
        scale = fmax(scale, fabs(a[i]));
    int n = 0, f = -1;
    for (int t = 0; t < N; t++) {
        rows[t] = row_diff(a + (size_t)t * V, b + (size_t)t * V, V) / scale;
        if (!(rows[t] <= tol)) {
            n++;
            f = f < 0 ? t : f;
        }
        w = isfinite(rows[t]) ? fmax(w, rows[t]) : INFINITY;
    }
    qsort(rows, (size_t)N, sizeof *rows, cmp_double);
    *over = n;
    *median = rows[N / 2];
    if (first)
        *first = f;
    if (worst)
        *worst = w;
}

int main(int argc, char **argv)
{
    int trace = 0; /* 1: the failing modes, 2: every run */
    int check = 0; /* --noise-check: the CPU side of the mode floor alone */
    if (argc > 1 && (!strcmp(argv[1], "--trace") || !strcmp(argv[1], "--trace-all"))) {
        trace = argv[1][7] ? 2 : 1;
        argv++, argc--;
    } else if (argc > 1 && !strcmp(argv[1], "--noise-check")) {
        check = 1;
        argv++, argc--;
    }
    if (argc < 2) {
        fprintf(stderr, "usage: test_cuda_emulate [--trace|--trace-all|--noise-check] MODEL_DIR "
                        "[PROMPT_TOKENS [DECODE_STEPS [LABEL]]]\n");
        return 2;
    }
    int P = argc > 2 ? atoi(argv[2]) : 40, S = argc > 3 ? atoi(argv[3]) : 24;
    const char *label = argc > 4 ? argv[4] : argv[1];
    if (P < 1 || S < 0) {
        fprintf(stderr, "test_cuda_emulate: PROMPT_TOKENS must be >= 1, DECODE_STEPS >= 0\n");
        return 2;
    }
    glm_error err = {0};
    glm_model *m = glm_model_open(argv[1], &err);
    if (!m) {
        fprintf(stderr, "test_cuda_emulate: %s\n", err.message);
        return 1;
    }
    int V = m->cfg.vocab_size, N = P + S;
    size_t NV = (size_t)N * V;
    int32_t *tok = malloc((size_t)N * sizeof *tok);
    float *ref = malloc(NV * sizeof *ref), *emu = malloc(NV * sizeof *emu);
    float *ref_scratch = malloc(NV * sizeof *ref_scratch); /* the traced runs' logits */
    float *noisy = malloc(NV * sizeof *noisy); /* a one-part mode's noisy CPU run's logits */
    float *gpu = malloc(NV * sizeof *gpu);
    double *rows = malloc((size_t)N * sizeof *rows);
    if (!tok || !ref || !emu || !gpu || !rows || !ref_scratch || !noisy) {
        fprintf(stderr, "test_cuda_emulate: out of memory\n");
        return 1;
    }
    uint64_t x = 0x9e3779b97f4a7c15ull; /* test_cuda_engine's prompt */
    for (int i = 0; i < N; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        tok[i] = (int32_t)((x >> 33) % (uint64_t)(V < 4096 ? V : 4096));
    }
    check_bufs cb = {ref, emu, gpu, ref_scratch, noisy, rows};
    if (check) {
        int rc = noise_check(m, tok, P, S, label, &cb);
        free(tok), free(ref), free(emu), free(gpu), free(rows), free(ref_scratch), free(noisy);
        glm_model_close(m);
        return rc;
    }
    backend_settings s;
    app_config cfg;
    glm_engine_params params;
    if (gpu_params_from_env(&cfg, &params, &err) == GLM_OK) {
        /* the CPU keeps every DSA cache in one format: the CUDA indexer caches must follow */
        params.cuda.kv_index = GLM_KV_CACHE_DEFAULT;
        gpu_settings(m, &params, &s, &err);
    }
    config_free(&cfg);
    if (err.status) {
        fprintf(stderr, "test_cuda_emulate: %s\n", err.message);
        return 1;
    }
    if (s.context < N)
        s.context = N;
    s.draft_rows = 0;
    s.kv_cache = GLM_KV_CACHE_F32;
    s.dense = GLM_DENSE_BF16;
    /* the exact runs: the form given, or fixed where that is onepart (CUDA's default) */
    glm_cuda_gemm given_gemm = s.cuda.gemm;
    if (backend_cuda_one_part(given_gemm))
        given_gemm = GLM_CUDA_GEMM_FIXED;
    s.cuda.gemm = given_gemm;
    if (run(m, 0, &s, tok, P, S, ref, &err)) {
        fprintf(stderr, "test_cuda_emulate: the CPU backend (f32): %s\n", err.message);
        return 1;
    }
    /* The exact run first: where the two backends' f32 runs already differ past the tolerance
     * (a model whose EXL3 decode and prefill paths sum in other orders, amplified by random
     * weights), a lossy mode's difference cannot be told from the backends' own, so the model is
     * reported and not judged; the formats are judged on the models whose f32 runs agree. */
    if (run(m, 1, &s, tok, P, S, gpu, &err)) {
        printf("FAIL: %s f32: the CUDA backend: %s\n", label, err.message);
        return 1;
    }
    int base_over = 0;
    double base_median = 0;
    compare(ref, gpu, N, V, TOL_F32, rows, &base_over, NULL, &base_median, NULL);
    if (trace == 2) {
        int traced;
        trace_mode(m, &s, tok, P, S, emu, label, "f32", 1, NULL, &traced);
    }
    if (base_over > OVER_ROWS(N) || base_median > TOL_F32) {
        printf("NOT JUDGED: %s: its f32 CUDA and CPU runs already differ (%d/%d rows over %.0e, "
               "median %.2e, rms rel %.2e), so its lossy modes cannot be told from that\n",
               label, base_over, N, TOL_F32, base_median, rms_rel(ref, gpu, NV));
        free(tok), free(ref), free(emu), free(gpu), free(rows), free(ref_scratch), free(noisy);
        glm_model_close(m);
        return 0;
    }
    int failures = 0, floor_state = 0; /* 0: not measured, 1: measured, -1: failed */
    noise_cal cal = {0};
    emu_trace_floor floor;
    for (size_t k = 0; k < sizeof modes / sizeof modes[0]; k++) {
        s.kv_cache = modes[k].kv;
        s.dense = modes[k].dense;
        s.cuda.gemm = modes[k].gemm == GLM_CUDA_GEMM_ONEPART ? GLM_CUDA_GEMM_ONEPART : given_gemm;
        failures += !check_mode(m, &s, modes[k].name, tok, P, S, label, trace, &cb, &floor_state,
                                &floor, &cal);
    }
    free(tok), free(ref), free(emu), free(gpu), free(rows), free(ref_scratch), free(noisy);
    glm_model_close(m);
    return failures ? 1 : 0;
}
