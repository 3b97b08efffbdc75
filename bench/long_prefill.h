/* long_prefill.h: the rules of bench_cuda_engine's long-prefill mode (--long): its arguments, a
 * size's time limit, its progress and result lines; pure C so a CPU test checks them. */
#ifndef GLMCHAT_BENCH_LONG_PREFILL_H
#define GLMCHAT_BENCH_LONG_PREFILL_H

#include <stddef.h>

#define LP_MAX_SIZES 8
#define LP_MIN_SIZE 1024
#define LP_REFERENCE 8192       /* the size whose rate every size is compared with, timed first */
#define LP_GOAL_RATIO 0.85      /* the goal: 64k and 256k at this share of the 8k rate at least */
#define LP_GOAL_LARGEST 262144  /* the largest size the goal speaks of */
#define LP_DEFAULT_LIMIT_S 300.0
#define LP_DEFAULT_EVERY 16
#define LP_MAX_LIMIT_S 86400.0
#define LP_MAX_EVERY 65536

typedef struct lp_args {
    int layers;
    int sizes[LP_MAX_SIZES], n_sizes; /* prompt lengths in tokens, in the order given */
    double limit_s;                   /* a size stops after the chunk that passes these seconds */
    int every;                        /* a progress line every this many chunks */
} lp_args;

/* The usage line, for messages. */
extern const char lp_usage[];

/* "--long LAYERS SIZES [LIMIT_S [EVERY]]": args[0] is "--long", n its count with it. window: the
 * model's max_position_embeddings; max_layers: the most layers a model holds. 0, or -1 with msg
 * naming the argument, its value and what to give. */
int lp_parse(int n, char *const *args, int window, int max_layers, lp_args *a, char *msg,
             size_t msg_n);

/* A comma-separated list of prompt sizes, each LP_MIN_SIZE..window, at most max, none twice;
 * their count, or -1 with msg. */
int lp_parse_sizes(const char *arg, int window, int *out, int max, char *msg, size_t msg_n);

/* 1 when a size's prefill stops now: `elapsed` seconds spent, `done` of `size` tokens prefilled,
 * past the limit and not finished. */
int lp_stop(double elapsed, double limit_s, int done, int size);

/* One size's run: `done` of `size` tokens in `seconds`, chunks of `chunk` rows; partial when the
 * limit stopped it; tflops: the dense-equivalent weight products a second. */
typedef struct lp_result {
    int size, done, chunk, partial;
    double seconds, tflops;
} lp_result;

/* Tokens a second (0 without time). */
double lp_rate(const lp_result *r);

/* v with thousands separated by commas and `decimals` decimals: 1048576 -> "1,048,576". */
void lp_thousands(double v, int decimals, char *buf, size_t n);

/* The progress line after `done` of `size` tokens at `elapsed` s, the last window of `rows`
 * rows taking `window_s` s; mem_gib: the device memory the backend holds (GiB), plan_gib: its
 * plan's. */
void lp_progress_line(int size, int done, double elapsed, int rows, double window_s,
                      double mem_gib, double plan_gib, char *buf, size_t n);

/* The result line: value, ceilings (ref_rate: the 8k rate of the same run; cublas: cuBLAS bf16
 * TFLOP/s) and ratios, and the goal's verdict for sizes above the reference up to
 * LP_GOAL_LARGEST; a partial run says where it stopped. */
void lp_result_line(const lp_result *r, double ref_rate, double cublas, double limit_s, char *buf,
                    size_t n);

/* The bench/BENCHMARKS.md row's first four cells (figure | value | ceiling | ratio). */
void lp_bench_row(const lp_result *r, double ref_rate, double cublas, char *buf, size_t n);

#endif
