/* emulate_trace.h: records a backend's forward through the diagnostic tap (backend.h) and tells
 * where two runs of one prompt part: the first row, layer and step that differ, and each flip of
 * a discrete choice (the indexer's pools, the router's experts) with its scores' margin. */
#ifndef GLMCHAT_TESTS_GPU_EMULATE_TRACE_H
#define GLMCHAT_TESTS_GPU_EMULATE_TRACE_H

#include <stdio.h>

#include "backend.h"
#include "model/model.h"
#include "model/numfmt.h"

/* Each (layer, step)'s rows of one run: N rows of the widths the tap gave (scores: N / kpool + 1,
 * wider rows cut, narrower padded with NaN). */
typedef struct emu_trace {
    int N, layers;
    int width[64][BACKEND_TAP_COUNT]; /* 0: no rows came */
    void *rows[64][BACKEND_TAP_COUNT];
    int score_width;
    int failed; /* out of memory, or a row outside [0, N) or a layer past 64 came */
    int cache_fmt, fp8_rule; /* the run's numfmt_cache and numfmt_fp8_rule (init: f32) */
} emu_trace;

/* A trace of up to N rows of model c; 0, or -1 when c has more than 64 layers. */
int emu_trace_init(emu_trace *t, const glm_config *c, int N);
void emu_trace_free(emu_trace *t);
/* The tap that records into t. */
backend_tap emu_trace_tap(emu_trace *t);

/* What two traces' comparison found (ref: the reference run, the CPU emulation). */
typedef struct emu_trace_diff {
    int first_row, first_layer, first_step; /* the first step over its threshold; -1: none */
    /* where the first step over its threshold and the first near tie lie in the order the runs
     * compute them (row, layer, step): a difference earlier in the tie's own row is not the
     * tie's (-1: none) */
    long first_pos, tie_pos;
    double first_rel, first_threshold;
    int select_flips, select_near_ties;   /* rows whose selected pools differ; at a near tie */
    int expert_flips, expert_near_ties;   /* rows whose experts differ; at a near tie */
    int first_flip_row;                   /* the first row of either flip; -1: none */
    int first_tie_row, tie_layer, tie_step; /* the first flip at a near tie; -1: none */
    double tie_spread;                    /* its scores' spread (EMU_TRACE_NEAR_TIE's measure) */
    int first_other_flip_row;             /* the first flip not at a near tie; -1: none */
    /* each run's cache rows checked against numfmt's rounding of its own unrounded rows: rows
     * checked, and rows where a stored value is not that rounding ([0] ref, [1] the other) */
    int rounding_rows[2], rounding_bad[2];
} emu_trace_diff;

/* A float step differs where max |a - b| over the row passes this share of the reference row's
 * largest magnitude, without a measured floor (emu_trace_floor): most models' f32 runs differ by
 * about 1e-5, but an EXL3 model's CUDA FFN (fp16 activations) by up to ~1e-3. */
#define EMU_TRACE_DIFF 1e-4
/* A flip is at a near tie where the scores the two runs ordered differently lie within this
 * share of the row's largest score magnitude in the reference run. */
#define EMU_TRACE_NEAR_TIE 1e-4

/* The noise floor of a model: per (layer, step) the largest relative difference (row_rel, as
 * EMU_TRACE_DIFF measures) between two f32 runs of the same prompt on the two backends, over the
 * rows before their first flip (from a flip on the rows follow other choices, not noise). A
 * model whose backends compute an op otherwise (the CUDA EXL3 kernels multiply fp16 activations
 * where the CPU keeps f32) differs there by far more than EMU_TRACE_DIFF in f32 already. */
typedef struct emu_trace_floor {
    double rel[64][BACKEND_TAP_COUNT];
    int rows;      /* rows measured: the f32 runs' first flip row, or all */
    int nonfinite; /* steps where one run had NaN/inf: left out of the floor */
} emu_trace_floor;

/* A lossy mode's difference at an op stays explained while within EMU_TRACE_FLOOR_K times the
 * f32 floor there: the mode adds its own roundings to the same f32 (or fp16) noise, and its
 * inputs already carry the earlier ops' noise, so its difference can be a few times the f32
 * one; a real error of a format (a wrong scale or element) moves a value by a rounding step of
 * the format (1/16 for fp8, 1/256 for bf16), far beyond 4 x the noise. Thresholds never go below
 * EMU_TRACE_DIFF (models with a quiet f32 floor are judged as before) nor above
 * EMU_TRACE_FLOOR_CAP (a floor that large is not noise to hide behind). */
#define EMU_TRACE_FLOOR_K 4.0
#define EMU_TRACE_FLOOR_CAP 1e-2

/* The floor of two traced f32 runs (ref: the CPU's). */
void emu_trace_floor_measure(const emu_trace *ref, const emu_trace *b, emu_trace_floor *f);
/* The threshold at (layer, what): EMU_TRACE_DIFF without a floor, else EMU_TRACE_FLOOR_K x
 * the floor held within [EMU_TRACE_DIFF, EMU_TRACE_FLOOR_CAP]. */
double emu_trace_threshold(const emu_trace_floor *f, int layer, backend_tap_what what);

/* Compares run b against ref, printing to out (NULL: nothing; label starts each line): per (layer, step) the
 * first row that differs and the worst, each flip of the first few with its scores, the first
 * cache rows that differ (with the reference's rounding margin, numfmt_cache_row_margin), each
 * run's stored cache rows against numfmt's rounding of its own unrounded rows, and a summary
 * line. m gives the router's bias (the experts' choice scores) and the cache rows' widths. */
emu_trace_diff emu_trace_compare(FILE *out, const char *label, const glm_model *m,
                                 const emu_trace *ref, const emu_trace *b);
/* emu_trace_compare against a noise floor (NULL: the fixed EMU_TRACE_DIFF and
 * EMU_TRACE_NEAR_TIE): a step differs where it passes emu_trace_threshold; a flip is at a near
 * tie where its scores' spread lies within the threshold of the scores (the router's logits,
 * the indexer's scores); a cache row stored differently is a rounding tie where the unrounded
 * rows agree within their threshold and the reference row's rounding margin lies within it. */
emu_trace_diff emu_trace_compare_floor(FILE *out, const char *label, const glm_model *m,
                                       const emu_trace *ref, const emu_trace *b,
                                       const emu_trace_floor *floor);

/* The judge's verdict on a comparison (test_cuda_emulate's judge_to_near_tie prints it): */
typedef enum emu_trace_verdict {
    EMU_TRACE_TO_TIE,      /* explained up to its first near tie (the rows before it judged apart) */
    EMU_TRACE_NOT_NUMFMT,  /* a run's cache rows are not numfmt's rounding of its unrounded rows */
    EMU_TRACE_NO_TIE,      /* it differs, and no flip or rounding at a near tie explains it */
    EMU_TRACE_BEYOND,      /* against a floor: an op beyond its threshold before the first tie */
    EMU_TRACE_CLEAR_FLIP,  /* a flip at a clear margin before the first near tie */
} emu_trace_verdict;

/* d's verdict; floored: d came from emu_trace_compare_floor with a floor (only then is an op
 * beyond its threshold before the tie a failure: the fixed 1e-4 is below some models' noise). */
emu_trace_verdict emu_trace_judge(const emu_trace_diff *d, int floored);

const char *emu_trace_step_name(backend_tap_what what);

#endif
