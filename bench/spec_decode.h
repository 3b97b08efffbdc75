/* spec_decode.h: the drafted-decoding benchmark bench_spec (CPU) and bench_cuda_spec (CUDA) share:
 * plain, copy-drafted, MTP-drafted and all-right (oracle) decode of one text, timed in one run;
 * and the prompt-reuse benchmark of bench_spec_reuse (CPU) and bench_cuda_spec. */
#ifndef GLMCHAT_BENCH_SPEC_DECODE_H
#define GLMCHAT_BENCH_SPEC_DECODE_H

#include "glm.h"

typedef struct sd_options {
    const char *model_dir;
    glm_backend backend;
    int max_new; /* greedy tokens per reply */
    int rounds;  /* timed replies per mode; the best counts */
    const char *peer; /* a worker's HOST:PORT: the engines run as rank 0 of two (NULL: one rank) */
} sd_options;

/* A prose paragraph and a piece of C code: the two texts the benches continue. */
extern const char sd_prose[], sd_code[];

/* Decodes max_new greedy tokens after `text` (label names it) with each draft mode: plain, copy
 * drafts, the model's MTP layer (when it has one) and the plain reply as drafts (every draft
 * right: the ceiling, what the verification windows alone cost or gain); prints tok/s, the
 * ratio to plain, acceptance per draft position, and checks every reply against the plain one
 * token for token. 0: all identical; 1: a reply differs or a run failed (FAIL lines say which). */
int sd_bench_text(const sd_options *o, const char *label, const char *text);

/* The cost of a verifying forward of T = 1..9 rows, in one-token decode steps, after ctx tokens:
 * drafting gains only where 1 + the accepted drafts exceed it. 0, or 1 on failure. */
int sd_window_costs(const sd_options *o, int ctx);

/* Time to first token of a new turn of `fresh` tokens after ctx tokens, with and without reuse,
 * on an engine with cache_bytes of prompt cache: a full prefill of all ctx + fresh tokens
 * (after a warm-up) against a fresh session resumed from the state kept after ctx tokens (best
 * of 3), the time to keep that state and its size, and the last logits' largest difference
 * from the full prefill's (0: bit for bit). One line; 0, or 1 on failure (a FAIL line). */
int sd_bench_reuse(const sd_options *o, int ctx, int fresh, int64_t cache_bytes);

/* The line that says how far acceptance on a random-weight model means anything. */
void sd_print_note(void);

#endif
