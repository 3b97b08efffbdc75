/* spec_decode.h: the drafted-decoding benchmark bench_spec (CPU) and bench_cuda_spec (CUDA) share:
 * plain, copy-drafted, MTP-drafted and all-right (oracle) decode of one text, timed in one run. */
#ifndef GLMCHAT_BENCH_SPEC_DECODE_H
#define GLMCHAT_BENCH_SPEC_DECODE_H

#include "glm.h"

typedef struct sd_options {
    const char *model_dir;
    glm_backend backend;
    int max_new; /* greedy tokens per reply */
    int rounds;  /* timed replies per mode; the best counts */
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

/* The line that says how far acceptance on a random-weight model means anything. */
void sd_print_note(void);

#endif
