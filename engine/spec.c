/* spec.c: drafted decoding. Each window feeds the chosen token and its drafts in one verifying
 * forward (rows bit for bit those of one-token decode), samples each row in order and keeps the
 * longest prefix of drafts the sampler agrees with; the state goes back to the last accepted. */
#include "spec.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "session.h"

#define COPY_MIN_MATCH 3
#define COPY_MAX_MATCH 8

int spec_copy_draft(const int32_t *ctx, int n, int32_t *out, int max)
{
    for (int m = n - 1 < COPY_MAX_MATCH ? n - 1 : COPY_MAX_MATCH; m >= COPY_MIN_MATCH; m--) {
        const int32_t *tail = ctx + n - m;
        /* the latest earlier occurrence whose continuation lies before the tail */
        for (int at = n - m - 1; at >= 0; at--) {
            if (memcmp(ctx + at, tail, (size_t)m * sizeof *ctx) != 0)
                continue;
            /* what followed it, up to the tail's end; a match that close is a loop (its period:
             * n - at - m tokens), so the drafts go on round it */
            int k = 0, period = n - at - m;
            while (k < max && at + m + k < n)
                out[k] = ctx[at + m + k], k++;
            while (k > 0 && k < max)
                out[k] = out[k - period], k++;
            if (k > 0)
                return k;
        }
    }
    return 0;
}

typedef struct spec_run {
    glm_session *s;
    glm_sampler *smp;
    const int *eos;
    int n_eos, max_new, *n_out;
    spec_token_fn on_token;
    void *user;
} spec_run;

/* Reports one token; nonzero: the reply stops after it. */
static int emit(spec_run *r, int32_t tok)
{
    (*r->n_out)++;
    int stop = r->on_token ? r->on_token(tok, r->user) : 0;
    return stop || glm_token_is_eos(tok, r->eos, r->n_eos) || *r->n_out >= r->max_new;
}

static int32_t pick(spec_run *r, float *row)
{
    session_mask_logits(r->s, row);
    return sampler_pick(r->smp, row);
}

/* Drafts to follow the session's tokens + next: an outside drafter's, the MTP layer's (copy
 * drafts where it has none to give), or copy drafts. -1: the MTP layer failed (err set). */
static int draft(glm_session *s, const spec_drafter *d, int32_t next, int32_t *out, int max,
                 int32_t **ctx_buf, int *ctx_cap, glm_error *err)
{
    if (!d->fn && d->mode == SPEC_MTP) {
        int k = session_mtp_draft(s, next, out, max, err);
        if (k != 0)
            return k;
    }
    int n = glm_session_length(s);
    if (n + 1 > *ctx_cap) {
        int cap = (n + 1) * 2;
        int32_t *b = realloc(*ctx_buf, (size_t)cap * sizeof *b);
        if (!b)
            return 0;
        *ctx_buf = b;
        *ctx_cap = cap;
    }
    memcpy(*ctx_buf, glm_session_tokens(s), (size_t)n * sizeof **ctx_buf);
    (*ctx_buf)[n] = next;
    int k = d->fn ? d->fn(*ctx_buf, n + 1, out, max, d->user)
                  : spec_copy_draft(*ctx_buf, n + 1, out, max);
    return k < 0 ? 0 : k > max ? max : k;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* What windows are worth: a forward's cost by its rows and how often each draft position is
 * accepted once the ones before it were, both running means over the reply so far. */
typedef struct spec_worth {
    double cost[SPEC_MAX_DRAFT + 2]; /* cost[r]: a forward of r rows; 0: none timed yet */
    int timed[SPEC_MAX_DRAFT + 2];   /* forwards of r rows timed (or tried to be) */
    double accept[SPEC_MAX_DRAFT];   /* P(draft i accepted | drafts 0..i-1 were) */
} spec_worth;

static void worth_init(spec_worth *w)
{
    memset(w->cost, 0, sizeof w->cost);
    memset(w->timed, 0, sizeof w->timed);
    for (int i = 0; i < SPEC_MAX_DRAFT; i++) /* hopeful: a position not yet reached is tried */
        w->accept[i] = 1.0;
}

static void worth_cost(spec_worth *w, const spec_drafter *d, int rows, double measured)
{
    if (rows < 1 || rows > SPEC_MAX_DRAFT + 1)
        return;
    int n = w->timed[rows]++; /* (attempts: a cost that cannot be used does not stall drafting) */
    double v = d->cost ? d->cost(rows, measured, d->cost_user) : measured;
    if (!(v > 0))
        return;
    double *c = &w->cost[rows];
    if (*c <= 0 || n == 1) { /* the first two: the smaller (a first forward may set up a graph) */
        *c = *c > 0 && *c < v ? *c : v;
        return;
    }
    if (v > 1.5 * *c) /* a stall (another process, a page fault) counts as 1.5 */
        v = 1.5 * *c;
    *c = 0.75 * *c + 0.25 * v;
}

/* A window of k drafts of which kept were accepted: positions 0..kept were reached. */
static void worth_window(spec_worth *w, int k, int kept)
{
    for (int i = 0; i < k && i <= kept; i++)
        w->accept[i] = 0.75 * w->accept[i] + 0.25 * (i < kept ? 1.0 : 0.0);
}

/* The drafts (1..cap) for the next window: the most whose window gives, a unit of cost, within
 * SPEC_MARGIN of the best window's tokens; 0 when even the best gives less than a plain step's
 * one token by more than SPEC_MARGIN; -1 when a cost is not known yet. (The margin keeps timing
 * noise from trading a deep window for a shallow one, or drafting for plain steps, on a hair.) */
#define SPEC_MARGIN 0.05

static int worth_best(const spec_worth *w, int cap)
{
    if (w->cost[1] <= 0 || w->cost[cap + 1] <= 0)
        return -1;
    double rate[SPEC_MAX_DRAFT + 1], best = 0.0, reached = 1.0, tokens = 1.0;
    for (int k = 1; k <= cap; k++) {
        reached *= w->accept[k - 1];
        tokens += reached; /* 1 + the drafts expected to be kept */
        rate[k] = w->cost[k + 1] > 0 ? tokens / w->cost[k + 1] : 0.0;
        if (rate[k] > best)
            best = rate[k];
    }
    if (best < (1.0 - SPEC_MARGIN) / w->cost[1])
        return 0;
    for (int k = cap; k >= 1; k--)
        if (rate[k] >= (1.0 - SPEC_MARGIN) * best)
            return k;
    return 0;
}

glm_status spec_generate(glm_session *s, const spec_drafter *d, glm_sampler *smp,
                         const int *eos, int n_eos, int max_new, spec_token_fn on_token, void *user,
                         int *n_out, spec_stats *stats, glm_error *err)
{
    spec_run r = {.s = s, .smp = smp, .eos = eos, .n_eos = n_eos, .max_new = max_new,
                  .n_out = n_out, .on_token = on_token, .user = user};
    int V = glm_session_vocab(s);
    float *rows = malloc((size_t)(SPEC_MAX_DRAFT + 1) * V * sizeof *rows);
    int32_t *ctx = NULL, window[SPEC_MAX_DRAFT + 1];
    int ctx_cap = 0, have_next = 0;
    glm_status st = GLM_OK;
    if (!rows)
        return glm_error_set(err, GLM_ERR_NOMEM, "out of memory for a verification window");
    float *logits = session_logits_mut(s);
    int32_t next = 0;
    /* Drafts per window follow how many were accepted lately (mean accepted a window, over
     * about four windows): a rejected draft costs a row of the verifying forward. Where almost
     * none are accepted (a mean below a quarter), drafting backs off: plain steps between
     * one-window probes, 1, 2, 4 .. SPEC_MAX_BACKOFF of them while probes keep failing, and
     * (until costs are timed) back to every step at the first accepted draft. Once plain steps
     * and a window are timed (two
     * plain steps first, then one every SPEC_RETIME_EVERY windows), a window runs with the
     * drafts (up to that cap) worth_best picks by expected tokens a unit of cost, and where even
     * the best is not worth a plain step, drafting backs off the same way; every
     * SPEC_EXPLORE_EVERY-th window runs at the cap, so that deep windows stay timed. Windows are
     * only cheap per row where a forward is bound by its weights' reads (a GPU), not by its
     * arithmetic (a CPU). Only speed depends on this: a window's tokens equal plain steps'. */
    double mean_accepted = 1.0;
    int backoff = 0, plain_left = 0, probe = 0, since_timed = 0, windows = 0;
    spec_worth worth;
    worth_init(&worth);
    while (*n_out < max_new) {
        if (session_cancel_requested(s)) {
            st = glm_error_set(err, GLM_ERR_CANCELED, "generation canceled");
            break;
        }
        if (!have_next && emit(&r, next = pick(&r, logits)))
            break;
        have_next = 0;
        int room = max_new - *n_out; /* tokens still to emit after next */
        int cap = 1 + (int)(2.0 * mean_accepted); /* twice the mean accepted, plus one */
        if (cap > SPEC_MAX_DRAFT)
            cap = SPEC_MAX_DRAFT;
        if (plain_left > 0) {
            plain_left--;
            stats->backoff_steps++;
            cap = 0;
            probe = plain_left == 0; /* the window after a back-off runs whatever it is worth */
        } else if (worth.timed[1] < 2 || since_timed >= SPEC_RETIME_EVERY) {
            stats->timing_steps++; /* a plain step's cost, timed again */
            since_timed = 0;
            cap = 0;
        } else if (probe || windows % SPEC_EXPLORE_EVERY == SPEC_EXPLORE_EVERY - 1) {
            probe = 0; /* (at the cap: the deeper windows' costs and acceptance kept current) */
        } else {
            int best = worth_best(&worth, cap);
            if (best == 0) { /* no window is expected to pay: plain steps, then a probe */
                backoff = backoff ? backoff * 2 : 1;
                if (backoff > SPEC_MAX_BACKOFF)
                    backoff = SPEC_MAX_BACKOFF;
                plain_left = backoff - 1;
                probe = plain_left == 0;
                stats->backoff_steps++;
                cap = 0;
            } else if (best > 0) {
                backoff = 0;
                cap = best;
            }
        }
        double t_draft = now_s(); /* (a window's cost counts its drafting: the MTP layer's run) */
        int k = cap > 0 ? draft(s, d, next, window + 1, room < cap ? room : cap, &ctx, &ctx_cap, err)
                        : 0;
        t_draft = now_s() - t_draft;
        if (k < 0) {
            st = err && err->status ? err->status : GLM_ERR_BACKEND;
            break;
        }
        if (k == 0) { /* nothing to verify: the plain decode step */
            double t0 = now_s();
            if ((st = glm_session_feed(s, &next, 1, NULL, err)))
                break;
            worth_cost(&worth, d, 1, now_s() - t0);
            continue;
        }
        window[0] = next;
        int base = glm_session_length(s), stop = 0, i;
        double t0 = now_s();
        if ((st = session_verify(s, window, k + 1, rows, err)))
            break;
        double verify_s = now_s() - t0 + t_draft;
        stats->windows++;
        since_timed++;
        windows++;
        for (i = 0; i < k; i++)
            stats->proposed[i]++;
        for (i = 0; i < k; i++) {
            if (session_cancel_requested(s)) {
                st = glm_error_set(err, GLM_ERR_CANCELED, "generation canceled");
                stop = 1;
                break;
            }
            int32_t p = pick(&r, rows + (size_t)i * V);
            if (p == window[i + 1])
                stats->accepted[i]++;
            if (emit(&r, p)) {
                stop = 1;
                break;
            }
            if (p != window[i + 1]) {
                next = p;
                have_next = 1;
                break;
            }
        }
        /* the state holds window[0..i]: the accepted drafts; row i is its last token's logits */
        int kept = i < k ? i : k;
        mean_accepted = 0.75 * mean_accepted + 0.25 * kept;
        worth_window(&worth, k, kept);
        if (kept > 0 && worth_best(&worth, k) < 0) {
            backoff = 0; /* (with both costs timed, worth_best decides instead) */
        } else if (kept == 0 && mean_accepted < 0.25) {
            backoff = backoff ? backoff * 2 : 1;
            if (backoff > SPEC_MAX_BACKOFF)
                backoff = SPEC_MAX_BACKOFF;
            plain_left = backoff;
        }
        double t1 = now_s();
        glm_status rs = session_rewind(s, base + 1 + kept, rows + (size_t)kept * V, err);
        if (rs) {
            st = rs;
            break;
        }
        worth_cost(&worth, d, k + 1, verify_s + (now_s() - t1));
        if (stop)
            break;
    }
    free(rows);
    free(ctx);
    return st;
}
