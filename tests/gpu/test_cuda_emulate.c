/* test_cuda_emulate.c: the CUDA backend's lossy modes against the CPU backend's emulation of
 * them (--kv-cache fp8|bf16, --dense q4, cuda_gemm = onepart and pairings): both backends opened
 * with one backend_settings, a prompt prefilled then decoded, logits compared per row at f32
 * tolerance.
 * Usage: test_cuda_emulate [--trace|--trace-all] MODEL_DIR [PROMPT_TOKENS [DECODE_STEPS [LABEL]]].
 * Needs a GPU. A mode over tolerance (OVER) is run again with both backends' taps
 * (emulate_trace.h) and judged to its first flip at a near tie (judge_to_near_tie states the
 * rule) against the model's noise floor, its f32 runs traced alike (emu_trace_floor). --trace
 * prints the floor and, for each such mode, where the runs part: per layer and step the first
 * row over its threshold (EMU_TRACE_FLOOR_K x the floor, at least 1e-4), the first cache rows that differ, each flip of the indexer's pools or the router's
 * experts with their scores; --trace-all does so for the f32 run and every mode. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/gpu/cuda_env.h"
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
    {"fp8 cache", GLM_KV_CACHE_FP8, GLM_DENSE_BF16, GLM_CUDA_GEMM_DEFAULT},
    {"bf16 cache", GLM_KV_CACHE_BF16, GLM_DENSE_BF16, GLM_CUDA_GEMM_DEFAULT},
    {"q4 dense", GLM_KV_CACHE_F32, GLM_DENSE_Q4, GLM_CUDA_GEMM_DEFAULT},
    {"fp8 + q4", GLM_KV_CACHE_FP8, GLM_DENSE_Q4, GLM_CUDA_GEMM_DEFAULT},
    {"bf16 + q4", GLM_KV_CACHE_BF16, GLM_DENSE_Q4, GLM_CUDA_GEMM_DEFAULT},
    {"one part", GLM_KV_CACHE_F32, GLM_DENSE_BF16, GLM_CUDA_GEMM_ONEPART},
    {"fp8 + one part", GLM_KV_CACHE_FP8, GLM_DENSE_BF16, GLM_CUDA_GEMM_ONEPART},
    {"q4 + one part", GLM_KV_CACHE_F32, GLM_DENSE_Q4, GLM_CUDA_GEMM_ONEPART}, /* the router's */
};

/* (P + S) x vocab logits: P tokens in one prefill (all rows), then S decode steps. */
static int run(const glm_model *m, int cuda, const backend_settings *s, const int32_t *tok, int P,
               int S, float *out, glm_error *err)
{
    engine_backend be;
    glm_status st = cuda ? backend_open_cuda_with(m, s, &be, err)
                         : backend_open_cpu_with(m, 0, s, &be, err);
    if (st)
        return -1;
    int V = m->cfg.vocab_size, rc = -1;
    void *state = be.ops->state_new(be.impl, err);
    if (state && be.ops->prefill(be.impl, state, tok, P, out, 1, err) == GLM_OK) {
        rc = 0;
        for (int t = P; rc == 0 && t < P + S; t++)
            if (be.ops->prefill(be.impl, state, tok + t, 1, out + (size_t)t * V, 0, err))
                rc = -1;
    }
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
    emu_trace_diff d = {.first_row = -1, .first_tie_row = -1, .first_other_flip_row = -1};
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

/* The model's noise floor: both backends' f32 runs (f32 cache, bf16 dense) traced, per (layer,
 * step) their largest difference over the rows before their first flip. 0, or -1 when a traced
 * run failed (the judge then falls back to the fixed 1e-4). */
static int measure_floor(const glm_model *m, const backend_settings *s, const int32_t *tok, int P,
                         int S, float *out, const char *label, int verbose, emu_trace_floor *f)
{
    backend_settings f32 = *s;
    f32.kv_cache = GLM_KV_CACHE_F32;
    f32.dense = GLM_DENSE_BF16;
    f32.cuda.gemm = GLM_CUDA_GEMM_DEFAULT;
    emu_trace cpu, gpu;
    glm_error err = {0};
    int rc = 0;
    if (run_traced(m, 0, &f32, tok, P, S, out, &cpu, &err) ||
        run_traced(m, 1, &f32, tok, P, S, out, &gpu, &err)) {
        printf("FLOOR %s: the traced f32 run failed: %s; judged against 1e-4\n", label, err.message);
        rc = -1;
    } else if (cpu.failed || gpu.failed) {
        printf("FLOOR %s: a traced f32 run failed (out of memory); judged against 1e-4\n", label);
        rc = -1;
    } else {
        emu_trace_floor_measure(&cpu, &gpu, f);
        double worst = 0;
        int wl = -1, ww = -1;
        for (int l = 0; l < m->cfg.num_layers && l < 64; l++)
            for (int w = 0; w < BACKEND_TAP_COUNT; w++) {
                if (verbose && f->rel[l][w] > 0)
                    printf("FLOOR %s   layer %d %-20s f32 CUDA vs CPU %.2e -> threshold %.2e\n",
                           label, l, emu_trace_step_name((backend_tap_what)w), f->rel[l][w],
                           emu_trace_threshold(f, l, (backend_tap_what)w));
                if (f->rel[l][w] > worst)
                    worst = f->rel[l][w], wl = l, ww = w;
            }
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
static void compare(const float *a, const float *b, int N, int V, double *rows, int *over,
                    int *first, double *median, double *worst);

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
 * as a whole run must (OVER_ROWS, median, the per-row 1e-3); the rows from it on are counted,
 * not judged. 1: passes so. */
static int judge_to_near_tie(const glm_model *m, const backend_settings *s, const int32_t *tok,
                             int P, int S, const float *emu, const float *gpu, float *scratch,
                             double *rows, const char *label, const char *mode, int verbose,
                             const emu_trace_floor *floor)
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
    const char *against = floor ? "its threshold, the f32 floor's" : "the fixed 1e-4";
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
        compare(emu, gpu, R, V, rows, &over, &first, &median, &worst);
    ok = R == 0 || (over <= OVER_ROWS(R) && median <= TOL_F32 && isfinite(worst));
    char before[128];
    if (R > 0)
        snprintf(before, sizeof before, "rows 0-%d %s (%d over %.0e, median %.2e, worst %.2e)", R - 1,
                 ok ? "agree" : "differ", over, TOL_F32, median, worst);
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

/* Rows of b against a, each as max|diff| over a's largest |logit|: how many are over TOL_F32
 * (and the first), their median and the worst. rows: N scratch doubles. */
static void compare(const float *a, const float *b, int N, int V, double *rows, int *over,
                    int *first, double *median, double *worst)
{
    size_t NV = (size_t)N * V;
    double scale = 0, w = 0;
    for (size_t i = 0; i < NV; i++)
        scale = fmax(scale, fabs(a[i]));
    int n = 0, f = -1;
    for (int t = 0; t < N; t++) {
        rows[t] = row_diff(a + (size_t)t * V, b + (size_t)t * V, V) / scale;
        if (!(rows[t] <= TOL_F32)) {
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
    if (argc > 1 && (!strcmp(argv[1], "--trace") || !strcmp(argv[1], "--trace-all"))) {
        trace = argv[1][7] ? 2 : 1;
        argv++, argc--;
    }
    if (argc < 2) {
        fprintf(stderr, "usage: test_cuda_emulate [--trace|--trace-all] MODEL_DIR [PROMPT_TOKENS "
                        "[DECODE_STEPS [LABEL]]]\n");
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
    float *gpu = malloc(NV * sizeof *gpu);
    double *rows = malloc((size_t)N * sizeof *rows);
    if (!tok || !ref || !emu || !gpu || !rows || !ref_scratch) {
        fprintf(stderr, "test_cuda_emulate: out of memory\n");
        return 1;
    }
    uint64_t x = 0x9e3779b97f4a7c15ull; /* test_cuda_engine's prompt */
    for (int i = 0; i < N; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        tok[i] = (int32_t)((x >> 33) % (uint64_t)(V < 4096 ? V : 4096));
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
    glm_cuda_gemm given_gemm = s.cuda.gemm; /* the exact runs: the form given (or the default) */
    if (given_gemm == GLM_CUDA_GEMM_ONEPART)
        given_gemm = GLM_CUDA_GEMM_DEFAULT;
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
    compare(ref, gpu, N, V, rows, &base_over, NULL, &base_median, NULL);
    if (trace == 2) {
        int traced;
        trace_mode(m, &s, tok, P, S, emu, label, "f32", 1, NULL, &traced);
    }
    if (base_over > OVER_ROWS(N) || base_median > TOL_F32) {
        printf("NOT JUDGED: %s: its f32 CUDA and CPU runs already differ (%d/%d rows over %.0e, "
               "median %.2e, rms rel %.2e), so its lossy modes cannot be told from that\n",
               label, base_over, N, TOL_F32, base_median, rms_rel(ref, gpu, NV));
        free(tok), free(ref), free(emu), free(gpu), free(rows), free(ref_scratch);
        glm_model_close(m);
        return 0;
    }
    int failures = 0, floor_state = 0; /* 0: not measured, 1: measured, -1: failed */
    emu_trace_floor floor;
    for (size_t k = 0; k < sizeof modes / sizeof modes[0]; k++) {
        s.kv_cache = modes[k].kv;
        s.dense = modes[k].dense;
        s.cuda.gemm = modes[k].gemm == GLM_CUDA_GEMM_ONEPART ? GLM_CUDA_GEMM_ONEPART : given_gemm;
        if (run(m, 0, &s, tok, P, S, emu, &err)) {
            printf("FAIL: %s %s: the CPU emulation: %s\n", label, modes[k].name, err.message);
            failures++;
            continue;
        }
        if (run(m, 1, &s, tok, P, S, gpu, &err)) {
            printf("FAIL: %s %s: the CUDA backend: %s\n", label, modes[k].name, err.message);
            failures++;
            continue;
        }
        int over = 0, first = -1;
        double median = 0, worst = 0;
        compare(emu, gpu, N, V, rows, &over, &first, &median, &worst);
        double vs_emu = rms_rel(emu, gpu, NV), vs_f32 = rms_rel(ref, gpu, NV);
        int ok = over <= OVER_ROWS(N) && median <= TOL_F32 && isfinite(worst);
        printf("%s: %-22s %-10s CUDA vs CPU emulation: rows max|diff|/scale median %.2e, worst "
               "%.2e, %d/%d over %.0e (first %d); rms rel: vs emulation %.2e, vs CPU f32 %.2e\n",
               ok ? "PASS" : "OVER", label, modes[k].name, median, worst, over, N, TOL_F32, first,
               vs_emu, vs_f32);
        if (!ok && !floor_state) /* measured once, for the first mode judged */
            floor_state = measure_floor(m, &s, tok, P, S, ref_scratch, label, trace > 0, &floor) ? -1 : 1;
        if (!ok) /* judged again to its first flip at a near tie (traced: the logits kept) */
            ok = judge_to_near_tie(m, &s, tok, P, S, emu, gpu, ref_scratch, rows, label,
                                   modes[k].name, trace > 0, floor_state > 0 ? &floor : NULL);
        else if (trace == 2) {
            int traced;
            trace_mode(m, &s, tok, P, S, ref_scratch, label, modes[k].name, 1, NULL, &traced);
        }
        failures += !ok;
    }
    free(tok), free(ref), free(emu), free(gpu), free(rows), free(ref_scratch);
    glm_model_close(m);
    return failures ? 1 : 0;
}
