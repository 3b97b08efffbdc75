/* long_prefill.c: the rules of bench_cuda_engine's long-prefill mode (long_prefill.h): argument
 * checks whose messages name the bad value, the time limit's stop rule, the printed lines. */
#include "bench/long_prefill.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char lp_usage[] = "bench_cuda_engine --long LAYERS SIZES [LIMIT_S [EVERY]] (e.g. --long "
                        "16 65536,262144,1048576 300 16: each size's prefill from an empty "
                        "session, stopped after the chunk that passes LIMIT_S seconds, a progress "
                        "line every EVERY chunks)";

/* A whole number in lo..hi from the whole of s; 0, or -1. */
static int whole(const char *s, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (end == s || *end || errno || v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

int lp_parse_sizes(const char *arg, int window, int *out, int max, char *msg, size_t msg_n)
{
    int n = 0;
    if (!*arg) {
        snprintf(msg, msg_n, "SIZES is empty: give prompt sizes in tokens, comma-separated (e.g. "
                 "65536,262144,1048576)");
        return -1;
    }
    for (const char *p = arg;;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        char item[32];
        long v;
        if (len == 0 || len >= sizeof item) {
            snprintf(msg, msg_n, "SIZES '%s': an empty or overlong entry; give whole numbers of "
                     "tokens, comma-separated", arg);
            return -1;
        }
        memcpy(item, p, len);
        item[len] = 0;
        if (whole(item, -(1L << 40), 1L << 40, &v)) {
            snprintf(msg, msg_n, "SIZES '%s': '%s' is not a whole number of tokens", arg, item);
            return -1;
        }
        if (v < LP_MIN_SIZE || v > window) {
            snprintf(msg, msg_n, "SIZES '%s': %ld tokens is %s; give %d to %d (the model's window, "
                     "max_position_embeddings)", arg, v,
                     v < LP_MIN_SIZE ? "below the smallest size timed" : "past the model's window",
                     LP_MIN_SIZE, window);
            return -1;
        }
        for (int i = 0; i < n; i++)
            if (out[i] == v) {
                snprintf(msg, msg_n, "SIZES '%s': %ld is given twice", arg, v);
                return -1;
            }
        if (n == max) {
            snprintf(msg, msg_n, "SIZES '%s': more than %d sizes", arg, max);
            return -1;
        }
        out[n++] = (int)v;
        if (!comma)
            return n;
        p = comma + 1;
    }
}

static int parse_limit(const char *s, double *out, char *msg, size_t msg_n)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || *end || errno || !(v > 0) || v > LP_MAX_LIMIT_S) {
        snprintf(msg, msg_n, "LIMIT_S '%s': give the seconds a size may run, above 0 and at most "
                 "%.0f (a size stops after the chunk that passes them)", s, LP_MAX_LIMIT_S);
        return -1;
    }
    *out = v;
    return 0;
}

int lp_parse(int n, char *const *args, int window, int max_layers, lp_args *a, char *msg,
             size_t msg_n)
{
    long v;
    memset(a, 0, sizeof *a);
    a->limit_s = LP_DEFAULT_LIMIT_S;
    a->every = LP_DEFAULT_EVERY;
    if (n < 3 || n > 5) {
        snprintf(msg, msg_n, "%s arguments: usage: %s", n < 3 ? "too few" : "too many", lp_usage);
        return -1;
    }
    if (whole(args[1], 1, max_layers, &v)) {
        snprintf(msg, msg_n, "LAYERS '%s': give a whole number of layers from 1 to %d", args[1],
                 max_layers);
        return -1;
    }
    a->layers = (int)v;
    if ((a->n_sizes = lp_parse_sizes(args[2], window, a->sizes, LP_MAX_SIZES, msg, msg_n)) < 0)
        return -1;
    if (n > 3 && parse_limit(args[3], &a->limit_s, msg, msg_n))
        return -1;
    if (n > 4) {
        if (whole(args[4], 1, LP_MAX_EVERY, &v)) {
            snprintf(msg, msg_n, "EVERY '%s': give the chunks between progress lines, a whole "
                     "number from 1 to %d", args[4], LP_MAX_EVERY);
            return -1;
        }
        a->every = (int)v;
    }
    return 0;
}

int lp_stop(double elapsed, double limit_s, int done, int size)
{
    return done < size && elapsed >= limit_s;
}

double lp_rate(const lp_result *r)
{
    return r->seconds > 0 ? r->done / r->seconds : 0;
}

void lp_thousands(double v, int decimals, char *buf, size_t n)
{
    char raw[64];
    snprintf(raw, sizeof raw, "%.*f", decimals, fabs(v));
    const char *dot = strchr(raw, '.');
    size_t digits = dot ? (size_t)(dot - raw) : strlen(raw), o = 0;
    char out[96];
    if (v < 0 && strspn(raw, "0.") != strlen(raw))
        out[o++] = '-';
    for (size_t i = 0; i < digits; i++) {
        if (i > 0 && (digits - i) % 3 == 0)
            out[o++] = ',';
        out[o++] = raw[i];
    }
    snprintf(out + o, sizeof out - o, "%s", dot ? dot : "");
    snprintf(buf, n, "%s", out);
}

void lp_progress_line(int size, int done, double elapsed, int rows, double window_s,
                      double mem_gib, double plan_gib, char *buf, size_t n)
{
    char s[32], d[32], so_far[32], recent[32], last[32];
    lp_thousands(size, 0, s, sizeof s);
    lp_thousands(rows, 0, last, sizeof last);
    lp_thousands(done, 0, d, sizeof d);
    lp_thousands(elapsed > 0 ? done / elapsed : 0, 0, so_far, sizeof so_far);
    lp_thousands(window_s > 0 ? rows / window_s : 0, 0, recent, sizeof recent);
    double pace = rows > 0 ? window_s / rows : 0; /* seconds a token, lately */
    snprintf(buf, n, "progress %s: position %s (%.1f%%) after %.1f s: %s tok/s so far, the last %s "
             "rows %s tok/s; at that pace %.0f s to go (more: the indexer grows with the "
             "position); the backend holds %.2f GiB of device memory (its plan: %.2f)", s, d,
             100.0 * done / size, elapsed, so_far, last, recent, pace * (size - done), mem_gib,
             plan_gib);
}

/* "0.805 of the 8k rate" and the goal's verdict where the goal speaks of the size. */
static void ratio_words(const lp_result *r, double ref_rate, char *buf, size_t n)
{
    double ratio = ref_rate > 0 ? lp_rate(r) / ref_rate : 0;
    const char *goal = "";
    if (r->partial)
        goal = " (partial: the rate of the tokens done, not the whole size's)";
    else if (r->size > LP_REFERENCE && r->size <= LP_GOAL_LARGEST)
        goal = ratio >= LP_GOAL_RATIO ? " (goal >= 0.85: met)" : " (goal >= 0.85: NOT met)";
    snprintf(buf, n, "%.3f of the 8k rate%s", ratio, goal);
}

void lp_result_line(const lp_result *r, double ref_rate, double cublas, double limit_s, char *buf,
                    size_t n)
{
    char size[32], done[32], chunk[32], rate[32], ref[32], ratio[128], where[160] = "";
    lp_thousands(r->size, 0, size, sizeof size);
    lp_thousands(r->done, 0, done, sizeof done);
    lp_thousands(r->chunk, 0, chunk, sizeof chunk);
    lp_thousands(lp_rate(r), 0, rate, sizeof rate);
    lp_thousands(ref_rate, 0, ref, sizeof ref);
    ratio_words(r, ref_rate, ratio, sizeof ratio);
    if (r->partial)
        snprintf(where, sizeof where, "PARTIAL, stopped by the %.0f s limit at position %s "
                 "(%.1f%%): ", limit_s, done, 100.0 * r->done / r->size);
    snprintf(buf, n, "RESULT prefill %s tokens, chunks of %s: %s%.2f s = %s tok/s, %.1f TFLOP/s | "
             "ceiling: the 8k rate of this run %s tok/s, cuBLAS bf16 GEMM 8192^3 %.0f TFLOP/s | "
             "ratio %s, %.3f of cuBLAS", size, chunk, where, r->seconds, rate, r->tflops, ref,
             cublas, ratio, cublas > 0 ? r->tflops / cublas : 0.0);
}

void lp_bench_row(const lp_result *r, double ref_rate, double cublas, char *buf, size_t n)
{
    char size[32], done[32], chunk[32], rate[32], ref[32], stop[96] = "";
    lp_thousands(r->size, 0, size, sizeof size);
    lp_thousands(r->done, 0, done, sizeof done);
    lp_thousands(r->chunk, 0, chunk, sizeof chunk);
    lp_thousands(lp_rate(r), 0, rate, sizeof rate);
    lp_thousands(ref_rate, 0, ref, sizeof ref);
    if (r->partial)
        snprintf(stop, sizeof stop, " (PARTIAL: stopped at %s tokens)", done);
    double ratio = ref_rate > 0 ? lp_rate(r) / ref_rate : 0;
    snprintf(buf, n, "| engine model, %s tokens, chunks of %s%s | %.2f s = %s tok/s, %.1f "
             "TFLOP/s | the 8k rate of this run: %s tok/s; cuBLAS bf16 8192^3: %.0f TFLOP/s | "
             "**%.3f** (%.3f of cuBLAS) |", size, chunk, stop, r->seconds, rate, r->tflops, ref,
             cublas, ratio, cublas > 0 ? r->tflops / cublas : 0.0);
}
