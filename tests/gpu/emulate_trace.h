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
    int first_row, first_layer, first_step; /* the first step over EMU_TRACE_DIFF; -1: none */
    double first_rel;
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
 * largest magnitude (the f32 runs of the EXL3 models differ by about 1e-5). */
#define EMU_TRACE_DIFF 1e-4
/* A flip is at a near tie where the scores the two runs ordered differently lie within this
 * share of the row's largest score magnitude in the reference run. */
#define EMU_TRACE_NEAR_TIE 1e-4

/* Compares run b against ref, printing to out (NULL: nothing; label starts each line): per (layer, step) the
 * first row that differs and the worst, each flip of the first few with its scores, the first
 * cache rows that differ (with the reference's rounding margin, numfmt_cache_row_margin), each
 * run's stored cache rows against numfmt's rounding of its own unrounded rows, and a summary
 * line. m gives the router's bias (the experts' choice scores) and the cache rows' widths. */
emu_trace_diff emu_trace_compare(FILE *out, const char *label, const glm_model *m,
                                 const emu_trace *ref, const emu_trace *b);

const char *emu_trace_step_name(backend_tap_what what);

#endif
