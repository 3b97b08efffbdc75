/* emulate_trace.c: the tap's recorder and the comparison of two recorded runs (emulate_trace.h),
 * for test_cuda_emulate's --trace and the CPU tests of the tap. */
#include "tests/gpu/emulate_trace.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* the order a row's steps run in */
static const backend_tap_what step_order[] = {
    BACKEND_TAP_ATTN_IN, BACKEND_TAP_CACHE_IN, BACKEND_TAP_CACHE,  BACKEND_TAP_SCORES,
    BACKEND_TAP_SELECT,  BACKEND_TAP_ATTN,     BACKEND_TAP_FFN_IN, BACKEND_TAP_ROUTER,
    BACKEND_TAP_EXPERTS, BACKEND_TAP_FFN};

const char *emu_trace_step_name(backend_tap_what what)
{
    switch (what) {
    case BACKEND_TAP_ATTN_IN: return "attention input";
    case BACKEND_TAP_SELECT: return "indexer selection";
    case BACKEND_TAP_SCORES: return "indexer scores";
    case BACKEND_TAP_CACHE_IN: return "cache rows unrounded";
    case BACKEND_TAP_CACHE: return "cache rows stored";
    case BACKEND_TAP_POOL_KEY: return "pool keys stored";
    case BACKEND_TAP_ATTN: return "attention output";
    case BACKEND_TAP_FFN_IN: return "FFN input";
    case BACKEND_TAP_ROUTER: return "router logits";
    case BACKEND_TAP_EXPERTS: return "routed experts";
    case BACKEND_TAP_FFN: return "FFN output";
    default: return "?";
    }
}

#define N_STEPS ((int)(sizeof step_order / sizeof step_order[0]))

/* Step w's place in step_order (-1: not a step of it). */
static int step_index(backend_tap_what w)
{
    for (int k = 0; k < N_STEPS; k++)
        if (step_order[k] == w)
            return k;
    return -1;
}

/* Where step k (of step_order) of layer l at row r comes in a run of `layers` layers. */
static long scan_pos(int layers, int r, int l, int k)
{
    return ((long)r * layers + l) * N_STEPS + k;
}

static int is_int_step(backend_tap_what what)
{
    return what == BACKEND_TAP_SELECT || what == BACKEND_TAP_EXPERTS;
}

int emu_trace_init(emu_trace *t, const glm_config *c, int N)
{
    memset(t, 0, sizeof *t);
    if (c->num_layers > 64 || N < 1)
        return -1;
    t->N = N;
    t->layers = c->num_layers;
    t->cache_fmt = NUMFMT_CACHE_F32;
    t->score_width = N / (c->index_kpool > 0 ? c->index_kpool : 1) + 1;
    return 0;
}

void emu_trace_free(emu_trace *t)
{
    for (int l = 0; l < 64; l++)
        for (int w = 0; w < BACKEND_TAP_COUNT; w++)
            free(t->rows[l][w]);
    memset(t, 0, sizeof *t);
}

/* rows not (yet) recorded: NaN floats, -2 ints */
static void *new_rows(backend_tap_what what, size_t n)
{
    void *p = malloc(n * 4);
    if (!p)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        if (is_int_step(what))
            ((int32_t *)p)[i] = -2;
        else
            ((float *)p)[i] = NAN;
    }
    return p;
}

static void record(void *user, int layer, backend_tap_what what, int pos0, int T, const void *vals,
                   int per_row)
{
    emu_trace *t = user;
    if (t->failed)
        return;
    if (layer < 0 || layer >= 64 || (int)what < 0 || what >= BACKEND_TAP_COUNT || pos0 < 0 ||
        T < 1 || pos0 + T > t->N || per_row < 1) {
        t->failed = 1;
        return;
    }
    int width = what == BACKEND_TAP_SCORES ? t->score_width : per_row;
    if (!t->rows[layer][what]) {
        t->rows[layer][what] = new_rows(what, (size_t)t->N * width);
        t->width[layer][what] = width;
        if (!t->rows[layer][what]) {
            t->failed = 1;
            return;
        }
    }
    if (t->width[layer][what] != width) {
        t->failed = 1;
        return;
    }
    int keep = per_row < width ? per_row : width;
    for (int r = 0; r < T; r++) {
        char *dst = (char *)t->rows[layer][what] + ((size_t)(pos0 + r) * width) * 4;
        memcpy(dst, (const char *)vals + (size_t)r * per_row * 4, (size_t)keep * 4);
        for (int i = keep; i < width; i++)
            ((float *)dst)[i] = NAN; /* only the scores' rows are narrower */
    }
}

backend_tap emu_trace_tap(emu_trace *t)
{
    return (backend_tap){record, t};
}

/* max |a - b| over a row of n floats against the largest |a| (NaN on one side only: infinite). */
static double row_rel(const float *a, const float *b, int n)
{
    double d = 0, mag = 0;
    for (int i = 0; i < n; i++) {
        if (isnan(a[i]) || isnan(b[i])) {
            if (isnan(a[i]) != isnan(b[i]))
                return INFINITY;
            continue;
        }
        d = fmax(d, fabs((double)a[i] - b[i]));
        mag = fmax(mag, fabs((double)a[i]));
    }
    return mag > 0 ? d / mag : d;
}

static const void *row_of(const emu_trace *t, int layer, backend_tap_what what, int r)
{
    return (const char *)t->rows[layer][what] + (size_t)r * t->width[layer][what] * 4;
}

/* The members of the sorted list a (n, ended by a negative) missing from b, each divided by
 * `unit` and told once; their count. */
static int missing(const int32_t *a, const int32_t *b, int n, int unit, int32_t *out)
{
    int k = 0;
    for (int i = 0; i < n && a[i] >= 0; i++) {
        int found = 0;
        for (int j = 0; j < n && b[j] >= 0 && !found; j++)
            found = b[j] == a[i];
        int32_t v = a[i] / unit;
        if (!found && (k == 0 || out[k - 1] != v))
            out[k++] = v;
    }
    return k;
}

/* The spread (largest minus smallest) of score over the members of x and y, against the largest
 * magnitude of the n scores (NaN skipped). */
static double spread(const float *score, int n, const int32_t *x, int nx, const int32_t *y, int ny)
{
    double lo = INFINITY, hi = -INFINITY, mag = 0;
    for (int i = 0; i < n; i++)
        if (!isnan(score[i]))
            mag = fmax(mag, fabs(score[i]));
    for (int i = 0; i < nx + ny; i++) {
        int32_t p = i < nx ? x[i] : y[i - nx];
        double v = p >= 0 && p < n ? score[p] : NAN;
        if (isnan(v))
            return INFINITY;
        lo = fmin(lo, v);
        hi = fmax(hi, v);
    }
    return mag > 0 ? (hi - lo) / mag : hi - lo;
}

static void print_list(FILE *out, const char *what, const int32_t *v, int n, const float *sa,
                       const float *sb, int ns)
{
    fprintf(out, " %s {", what);
    for (int i = 0; i < n; i++) {
        fprintf(out, "%s%d", i ? " " : "", v[i]);
        if (sa && v[i] >= 0 && v[i] < ns)
            fprintf(out, ": %.7g/%.7g", sa[v[i]], sb[v[i]]);
    }
    fprintf(out, "}");
}

/* The experts' choice scores of a row (sigmoid(logit) + bias, cpu_route's), in out (E). */
static void choice_scores(const float *logits, const float *bias, int E, float *out)
{
    for (int e = 0; e < E; e++)
        out[e] = 1.0f / (1.0f + expf(-logits[e])) + (bias ? bias[e] : 0.0f);
}

/* A flip of a discrete step in row r of layer l: reported (the first few) and judged. */
static void flip(FILE *out, const char *label, const glm_model *m, const emu_trace *a,
                 const emu_trace *b, int l, backend_tap_what what, int r, emu_trace_diff *d,
                 const emu_trace_floor *floor)
{
    int n = a->width[l][what], sel = what == BACKEND_TAP_SELECT;
    int unit = sel ? m->cfg.index_kpool : 1;
    int32_t *xa = malloc((size_t)n * sizeof *xa), *xb = malloc((size_t)n * sizeof *xb);
    int E = m->cfg.n_routed_experts;
    float *ca = malloc((size_t)(E > 0 ? E : 1) * sizeof *ca), *cb = malloc((size_t)(E > 0 ? E : 1) * sizeof *cb);
    if (!xa || !xb || !ca || !cb) {
        free(xa), free(xb), free(ca), free(cb);
        return;
    }
    int na = missing(row_of(a, l, what, r), row_of(b, l, what, r), n, unit, xa);
    int nb = missing(row_of(b, l, what, r), row_of(a, l, what, r), n, unit, xb);
    const float *sa = NULL, *sb = NULL;
    int ns = 0;
    if (sel && a->rows[l][BACKEND_TAP_SCORES] && b->rows[l][BACKEND_TAP_SCORES]) {
        sa = row_of(a, l, BACKEND_TAP_SCORES, r);
        sb = row_of(b, l, BACKEND_TAP_SCORES, r);
        ns = a->score_width;
    } else if (!sel && a->rows[l][BACKEND_TAP_ROUTER] && b->rows[l][BACKEND_TAP_ROUTER]) {
        const float *bias = m->w.layers[l].router_bias;
        choice_scores(row_of(a, l, BACKEND_TAP_ROUTER, r), bias, E, ca);
        choice_scores(row_of(b, l, BACKEND_TAP_ROUTER, r), bias, E, cb);
        sa = ca, sb = cb, ns = E;
    }
    double gap = sa ? spread(sa, ns, xa, na, xb, nb) : INFINITY;
    /* within the noise of the scores that made the choice */
    double tie = floor ? fmax(EMU_TRACE_NEAR_TIE,
                              emu_trace_threshold(floor, l, sel ? BACKEND_TAP_SCORES : BACKEND_TAP_ROUTER))
                       : EMU_TRACE_NEAR_TIE;
    int near = gap <= tie;
    int *flips = sel ? &d->select_flips : &d->expert_flips;
    int *nears = sel ? &d->select_near_ties : &d->expert_near_ties;
    if (*flips < 4) {
        fprintf(out, "%s   row %d layer %d %s flips%s (the flipped %s' scores, reference/other,"
                     " spread %.2e of the row's largest):", label, r, l, emu_trace_step_name(what),
                near ? " at a near tie" : "", sel ? "pools" : "experts", gap);
        print_list(out, "reference only", xa, na, sa, sb, ns);
        print_list(out, "other only", xb, nb, sa, sb, ns);
        fprintf(out, "\n");
    }
    (*flips)++;
    *nears += near;
    if (d->first_flip_row < 0)
        d->first_flip_row = r;
    if (near && d->first_tie_row < 0) {
        d->first_tie_row = r, d->tie_layer = l, d->tie_step = (int)what;
        d->tie_spread = gap;
    }
    if (!near && d->first_other_flip_row < 0)
        d->first_other_flip_row = r;
    free(xa), free(xb), free(ca), free(cb);
}

/* The cache rows' segments: latent, then the indexer's key and gate. */
static int segments(const glm_config *c, int width, int start[3], int len[3])
{
    int R = c->kv_lora_rank, ID = c->index_head_dim;
    start[0] = 0, len[0] = R, start[1] = R, len[1] = ID, start[2] = R + ID, len[2] = ID;
    return width == R ? 1 : width == R + 2 * ID ? 3 : 0;
}

static const char *segment_name(int k)
{
    return k == 0 ? "latent" : k == 1 ? "key" : "gate";
}

/* A stored cache row that differs (the first few): per segment its differing values (both runs')
 * and the reference's rounding margin of its unrounded segment. */
static void cache_row(FILE *out, const char *label, const glm_model *m, const emu_trace *a,
                      const emu_trace *b, int l, int r, double rel)
{
    const float *x = row_of(a, l, BACKEND_TAP_CACHE, r), *y = row_of(b, l, BACKEND_TAP_CACHE, r);
    const float *in = a->rows[l][BACKEND_TAP_CACHE_IN] ? row_of(a, l, BACKEND_TAP_CACHE_IN, r) : NULL;
    int start[3], len[3], n = segments(&m->cfg, a->width[l][BACKEND_TAP_CACHE], start, len);
    fprintf(out, "%s   row %d layer %d cache rows stored differ (%.2e of the row's largest):", label,
            r, l, rel);
    for (int k = 0; k < n; k++) {
        int diff = 0;
        for (int i = start[k]; i < start[k] + len[k]; i++)
            diff += x[i] != y[i];
        if (!diff)
            continue;
        fprintf(out, " %s %d of %d", segment_name(k), diff, len[k]);
        if (in)
            fprintf(out, " (reference margin %.2e)",
                    numfmt_cache_row_margin((numfmt_cache)a->cache_fmt, (numfmt_fp8_rule)a->fp8_rule,
                                            in + start[k], (size_t)len[k]));
        for (int i = start[k], shown = 0; i < start[k] + len[k] && shown < 3; i++)
            if (x[i] != y[i]) {
                fprintf(out, " [%d] %.7g/%.7g", i - start[k], x[i], y[i]);
                shown++;
            }
        fprintf(out, ";");
    }
    fprintf(out, "\n");
}

/* Run t's stored cache rows against numfmt's rounding of its own unrounded rows: rows checked
 * and rows where they differ (the first reported). */
static void check_rounding(FILE *out, const char *label, const char *who, const glm_model *m,
                           const emu_trace *t, int *rows_checked, int *rows_bad)
{
    *rows_checked = *rows_bad = 0;
    if (t->cache_fmt == NUMFMT_CACHE_F32)
        return;
    for (int l = 0; l < t->layers; l++) {
        if (!t->rows[l][BACKEND_TAP_CACHE_IN] || !t->rows[l][BACKEND_TAP_CACHE])
            continue;
        int width = t->width[l][BACKEND_TAP_CACHE], start[3], len[3];
        int n = segments(&m->cfg, width, start, len);
        float *seg = malloc((size_t)width * sizeof *seg);
        if (!seg || !n || t->width[l][BACKEND_TAP_CACHE_IN] != width) {
            free(seg);
            continue;
        }
        for (int r = 0; r < t->N; r++) {
            const float *in = row_of(t, l, BACKEND_TAP_CACHE_IN, r), *st = row_of(t, l, BACKEND_TAP_CACHE, r);
            if (isnan(in[0]) || isnan(st[0]))
                continue; /* a row not traced */
            int bad = -1;
            for (int k = 0; k < n && bad < 0; k++) {
                memcpy(seg, in + start[k], (size_t)len[k] * sizeof *seg);
                numfmt_cache_row((numfmt_cache)t->cache_fmt, (numfmt_fp8_rule)t->fp8_rule, seg,
                                 (size_t)len[k]);
                for (int i = 0; i < len[k] && bad < 0; i++)
                    if (memcmp(&seg[i], &st[start[k] + i], sizeof *seg))
                        bad = start[k] + i;
            }
            (*rows_checked)++;
            if (bad < 0)
                continue;
            if (!*rows_bad) {
                int k = bad < start[1] || n == 1 ? 0 : bad < start[2] ? 1 : 2;
                memcpy(seg, in + start[k], (size_t)len[k] * sizeof *seg);
                numfmt_cache_row((numfmt_cache)t->cache_fmt, (numfmt_fp8_rule)t->fp8_rule, seg,
                                 (size_t)len[k]);
                fprintf(out, "%s   %s stores row %d layer %d %s[%d] = %.7g where numfmt rounds its "
                             "own unrounded %.7g to %.7g\n", label, who, r, l, segment_name(k),
                        bad - start[k], st[bad], in[bad], seg[bad - start[k]]);
            }
            (*rows_bad)++;
        }
        free(seg);
    }
    fprintf(out, "%s   %s: %d cache rows stored as numfmt rounds them, %d not\n", label, who,
            *rows_checked - *rows_bad, *rows_bad);
}

/* Stored cache rows that differ while the unrounded rows agree within their threshold
 * (emu_trace_threshold): values the two runs' f32 noise put on either side of a rounding
 * midpoint (that each run rounds its own rows as numfmt does is checked apart, check_rounding):
 * a near tie of the cache's format. Against a floor, the reference row's rounding margin must
 * lie within that threshold too: noise that small can carry a value across. */
static void rounding_tie(const glm_model *m, const emu_trace *a, const emu_trace *b, int l, int r,
                         emu_trace_diff *d, const emu_trace_floor *floor)
{
    if (d->first_tie_row >= 0 || !a->rows[l][BACKEND_TAP_CACHE_IN] ||
        !b->rows[l][BACKEND_TAP_CACHE_IN] ||
        a->width[l][BACKEND_TAP_CACHE_IN] != b->width[l][BACKEND_TAP_CACHE_IN])
        return;
    const float *x = row_of(a, l, BACKEND_TAP_CACHE_IN, r), *y = row_of(b, l, BACKEND_TAP_CACHE_IN, r);
    double within = emu_trace_threshold(floor, l, BACKEND_TAP_CACHE_IN);
    if (!(row_rel(x, y, a->width[l][BACKEND_TAP_CACHE_IN]) <= within))
        return; /* the inputs differ already: a consequence, not a tie */
    int start[3], len[3], n = segments(&m->cfg, a->width[l][BACKEND_TAP_CACHE_IN], start, len);
    double margin = INFINITY;
    for (int k = 0; k < n; k++)
        margin = fmin(margin, numfmt_cache_row_margin((numfmt_cache)a->cache_fmt,
                                                      (numfmt_fp8_rule)a->fp8_rule, x + start[k],
                                                      (size_t)len[k]));
    if (floor && !(margin <= within))
        return; /* no value lies within the noise of a rounding midpoint or scale boundary */
    d->first_tie_row = r, d->tie_layer = l, d->tie_step = BACKEND_TAP_CACHE;
    d->tie_spread = margin;
}

/* Pool keys the two runs store differently although the keys and gates they are made of are
 * stored alike in both: the f32 noise of the pooling (its exponentials and sums) put a value on
 * either side of a rounding midpoint, a near tie of the format, at the row that completes the
 * pool (the first few are printed; the first such row can become the first tie). */
static void pool_ties(FILE *out, const char *label, const glm_model *m, const emu_trace *a,
                      const emu_trace *b, emu_trace_diff *d)
{
    int kp = m->cfg.index_kpool, R = m->cfg.kv_lora_rank, ID = m->cfg.index_head_dim;
    for (int l = 0; l < a->layers; l++) {
        if (!a->rows[l][BACKEND_TAP_POOL_KEY] || !b->rows[l][BACKEND_TAP_POOL_KEY] ||
            !a->rows[l][BACKEND_TAP_CACHE] || !b->rows[l][BACKEND_TAP_CACHE] ||
            a->width[l][BACKEND_TAP_CACHE] != R + 2 * ID)
            continue;
        int shown = 0, ties = 0, other = 0;
        for (int p = 0; (p + 1) * kp <= a->N; p++) {
            const float *x = row_of(a, l, BACKEND_TAP_POOL_KEY, p), *y = row_of(b, l, BACKEND_TAP_POOL_KEY, p);
            if (isnan(x[0]) || isnan(y[0]) || !memcmp(x, y, (size_t)ID * sizeof *x))
                continue;
            int same = 1;
            for (int t = p * kp; t < (p + 1) * kp && same; t++)
                same = !memcmp((const float *)row_of(a, l, BACKEND_TAP_CACHE, t) + R,
                               (const float *)row_of(b, l, BACKEND_TAP_CACHE, t) + R,
                               (size_t)2 * ID * sizeof(float));
            int row = (p + 1) * kp - 1;
            ties += same, other += !same;
            if (same && (d->first_tie_row < 0 || row < d->first_tie_row)) {
                d->first_tie_row = row, d->tie_layer = l, d->tie_step = BACKEND_TAP_POOL_KEY;
                d->tie_spread = 0;
                /* made with the row's cache rows: where they are stored */
                d->tie_pos = scan_pos(a->layers, row, l, step_index(BACKEND_TAP_CACHE));
            }
            if (shown++ < 3) {
                int k = 0;
                while (k < ID && x[k] == y[k])
                    k++;
                fprintf(out, "%s   layer %d pool %d (completed at row %d) stored differently%s: [%d] "
                             "%.7g/%.7g\n", label, l, p, row,
                        same ? " from alike keys and gates (a rounding tie)" : "", k, x[k], y[k]);
            }
        }
        if (ties + other)
            fprintf(out, "%s   layer %d pool keys stored differently: %d from alike keys and gates, "
                         "%d from differing ones\n", label, l, ties, other);
    }
}

void emu_trace_floor_measure(const emu_trace *a, const emu_trace *b, emu_trace_floor *f)
{
    memset(f, 0, sizeof *f);
    int N = a->N < b->N ? a->N : b->N, layers = a->layers < b->layers ? a->layers : b->layers;
    f->rows = N;
    for (int r = 0; r < N && f->rows == N; r++) /* the first flip ends the rows measured */
        for (int l = 0; l < layers; l++)
            for (int w = 0; w < BACKEND_TAP_COUNT; w++)
                if (is_int_step((backend_tap_what)w) && a->rows[l][w] && b->rows[l][w] &&
                    a->width[l][w] == b->width[l][w] &&
                    memcmp(row_of(a, l, (backend_tap_what)w, r), row_of(b, l, (backend_tap_what)w, r),
                           (size_t)a->width[l][w] * 4))
                    f->rows = r;
    for (int l = 0; l < layers; l++)
        for (int w = 0; w < BACKEND_TAP_COUNT; w++) {
            if (is_int_step((backend_tap_what)w) || !a->rows[l][w] || !b->rows[l][w] ||
                a->width[l][w] != b->width[l][w])
                continue;
            for (int r = 0; r < f->rows; r++) {
                double rel = row_rel(row_of(a, l, (backend_tap_what)w, r),
                                     row_of(b, l, (backend_tap_what)w, r), a->width[l][w]);
                if (!isfinite(rel))
                    f->nonfinite++;
                else
                    f->rel[l][w] = fmax(f->rel[l][w], rel);
            }
        }
}

double emu_trace_threshold(const emu_trace_floor *f, int layer, backend_tap_what what)
{
    if (!f || layer < 0 || layer >= 64 || (int)what < 0 || what >= BACKEND_TAP_COUNT)
        return EMU_TRACE_DIFF;
    double t = EMU_TRACE_FLOOR_K * f->rel[layer][what];
    return t < EMU_TRACE_DIFF ? EMU_TRACE_DIFF : t > EMU_TRACE_FLOOR_CAP ? EMU_TRACE_FLOOR_CAP : t;
}

emu_trace_verdict emu_trace_judge(const emu_trace_diff *d, int floored)
{
    if (d->rounding_bad[0] || d->rounding_bad[1])
        return EMU_TRACE_NOT_NUMFMT;
    if (d->first_tie_row < 0)
        return EMU_TRACE_NO_TIE;
    if (floored && d->first_row >= 0 && d->first_pos < d->tie_pos)
        return EMU_TRACE_BEYOND;
    if (d->first_other_flip_row >= 0 && d->first_other_flip_row < d->first_tie_row)
        return EMU_TRACE_CLEAR_FLIP;
    return EMU_TRACE_TO_TIE;
}

emu_trace_diff emu_trace_compare(FILE *out, const char *label, const glm_model *m,
                                 const emu_trace *a, const emu_trace *b)
{
    return emu_trace_compare_floor(out, label, m, a, b, NULL);
}

emu_trace_diff emu_trace_compare_floor(FILE *out, const char *label, const glm_model *m,
                                       const emu_trace *a, const emu_trace *b,
                                       const emu_trace_floor *floor)
{
    emu_trace_diff d = {.first_row = -1, .first_layer = -1, .first_step = -1, .first_flip_row = -1,
                        .first_tie_row = -1, .tie_layer = -1, .tie_step = -1,
                        .first_other_flip_row = -1, .first_pos = -1, .tie_pos = -1};
    FILE *sink = NULL;
    if (!out) /* compared in silence */
        out = sink = fopen("/dev/null", "w");
    if (!out)
        return d;
    int first[64][BACKEND_TAP_COUNT], worst_row[64][BACKEND_TAP_COUNT], over[64][BACKEND_TAP_COUNT];
    double worst[64][BACKEND_TAP_COUNT];
    for (int l = 0; l < 64; l++)
        for (int w = 0; w < BACKEND_TAP_COUNT; w++)
            first[l][w] = worst_row[l][w] = -1, over[l][w] = 0, worst[l][w] = 0;
    if (a->failed || b->failed || a->N != b->N) {
        fprintf(out, "%s: a trace failed (out of memory, or rows outside the prompt)\n", label);
        if (sink)
            fclose(sink);
        return d;
    }
    for (int r = 0; r < a->N; r++)
        for (int l = 0; l < a->layers; l++)
            for (int k = 0; k < N_STEPS; k++) {
                backend_tap_what w = step_order[k];
                if (!a->rows[l][w] || !b->rows[l][w] || a->width[l][w] != b->width[l][w])
                    continue;
                long pos = scan_pos(a->layers, r, l, k);
                int tied = d.first_tie_row >= 0;
                double rel;
                if (is_int_step(w))
                    rel = memcmp(row_of(a, l, w, r), row_of(b, l, w, r), (size_t)a->width[l][w] * 4)
                              ? INFINITY : 0.0;
                else
                    rel = row_rel(row_of(a, l, w, r), row_of(b, l, w, r), a->width[l][w]);
                double within = emu_trace_threshold(floor, l, w);
                if (!(rel <= within)) {
                    over[l][w]++;
                    if (first[l][w] < 0)
                        first[l][w] = r;
                    if (d.first_row < 0) {
                        d.first_row = r, d.first_layer = l, d.first_step = (int)w, d.first_rel = rel;
                        d.first_threshold = within;
                        d.first_pos = pos;
                    }
                    if (is_int_step(w))
                        flip(out, label, m, a, b, l, w, r, &d, floor);
                    else if (w == BACKEND_TAP_CACHE) {
                        if (over[l][w] <= 3)
                            cache_row(out, label, m, a, b, l, r, rel);
                        rounding_tie(m, a, b, l, r, &d, floor);
                    }
                } else if (floor && w == BACKEND_TAP_CACHE && rel > 0) {
                    /* a value rounded the other way but too small against its row to pass the
                     * threshold: still where the runs part, and a tie if within the noise */
                    rounding_tie(m, a, b, l, r, &d, floor);
                }
                if (!tied && d.first_tie_row >= 0)
                    d.tie_pos = pos;
                if (!(rel <= worst[l][w]))
                    worst[l][w] = rel, worst_row[l][w] = r;
            }
    for (int l = 0; l < a->layers; l++)
        for (int k = 0; k < N_STEPS; k++) {
            backend_tap_what w = step_order[k];
            if (over[l][w])
                fprintf(out, "%s   layer %d %-18s %4d/%d rows differ (over %.2e%s), the first %d;"
                             " worst %.2e at row %d\n", label, l, emu_trace_step_name(w),
                        over[l][w], a->N, emu_trace_threshold(floor, l, w),
                        floor ? ", the floor's" : "", first[l][w], worst[l][w], worst_row[l][w]);
        }
    pool_ties(out, label, m, a, b, &d);
    check_rounding(out, label, "reference", m, a, &d.rounding_rows[0], &d.rounding_bad[0]);
    check_rounding(out, label, "other", m, b, &d.rounding_rows[1], &d.rounding_bad[1]);
    if (d.first_row < 0)
        fprintf(out, "%s: every step of every row within %s\n", label,
                floor ? "its threshold (the floor's)" : "1e-04");
    else
        fprintf(out, "%s: the first difference: row %d layer %d %s (%.2e, over %.2e); indexer selection flips"
                     " %d (%d at near ties), expert flips %d (%d at near ties), the first flip row %d\n",
                label, d.first_row, d.first_layer,
                emu_trace_step_name((backend_tap_what)d.first_step), d.first_rel, d.first_threshold,
                d.select_flips,
                d.select_near_ties, d.expert_flips, d.expert_near_ties, d.first_flip_row);
    if (sink)
        fclose(sink);
    return d;
}
