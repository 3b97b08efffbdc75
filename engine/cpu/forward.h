/* forward.h: the CPU backend's forward pass in float32 over a conversation's state: prefill
 * (KDA in chunked form) and decode (KDA recurrent form), per architecture.md section 2. */
#ifndef GLMCHAT_ENGINE_CPU_FORWARD_H
#define GLMCHAT_ENGINE_CPU_FORWARD_H

#include <stdint.h>

#include "backend.h"
#include "cpu/threads.h"
#include "model/model.h"
#include "model/numfmt.h"

/* A conversation's caches: per KDA layer the conv window and recurrent state, per DSA layer the
 * latent rows, the indexer's per-token keys and gate logits, and the completed pool keys. */
typedef struct cpu_state cpu_state;

/* The number formats a state emulates (numfmt.h): every DSA cache row (latent, indexer keys,
 * gates, pool keys; the MTP layer's too) rounded to `cache` with the fp8 scale `rule`; tag is
 * the backend's cache_format, kept in snapshots so that one is loaded only where it agrees. */
typedef struct cpu_numerics {
    numfmt_cache cache;
    numfmt_fp8_rule rule;
    uint32_t tag;
    /* 1: the CUDA backend's one-part products (cuda_gemm = onepart) emulated: the BF16 products'
     * inputs of a prefill's rows in chunks of more than 8 rows (prefill_grid.h) rounded as
     * numfmt_one_part_row does; chunk: the CUDA chunk (0: unknown, so calls must start on the
     * 16-token grid). One rank only. */
    int one_part, chunk;
} cpu_numerics;

/* Two ranks: the exchanges of backend.h. */
typedef backend_collective cpu_collective;

cpu_state *cpu_state_new(const glm_model *m, glm_error *err);
/* Makes the state's forward one of two ranks: the model's weights must be this rank's half
 * (tp_split_model). NULL: one rank (the default). */
void cpu_state_set_collective(cpu_state *s, const cpu_collective *coll);
/* The flag a prefill polls before each layer (backend.h, state_set_cancel); NULL: none. */
void cpu_state_set_cancel(cpu_state *s, const atomic_int *flag);
/* The formats of the state's caches (the default: f32, tag BACKEND_KV(f32, f32)); set before
 * the first token. */
void cpu_state_set_numerics(cpu_state *s, const cpu_numerics *nf);
/* The diagnostic tap of backend.h the state's forward feeds (NULL or fn NULL: none). */
void cpu_state_set_tap(cpu_state *s, const backend_tap *tap);
void cpu_state_free(cpu_state *s);
void cpu_state_reset(cpu_state *s);
int cpu_state_length(const cpu_state *s);
/* Saves the KDA states at the current length, so cpu_state_truncate can come back to it. */
glm_status cpu_state_mark(cpu_state *s, glm_error *err);
int cpu_state_mark_length(const cpu_state *s); /* -1: none */
/* Back to n tokens: n == length (nothing to do), 0 (reset) or the marked length. */
glm_status cpu_state_truncate(cpu_state *s, int n, glm_error *err);

/* Runs n tokens after the state's current length and appends them to it. logits_out: n x vocab
 * floats when all_rows, else vocab floats for the last token; may be NULL. KDA runs chunked on
 * a grid of absolute positions (multiples of 16; a chunk of one token is the recurrent step), so
 * pieces split on the grid give the bits of one pass. */
glm_status cpu_prefill(cpu_state *s, cpu_pool *pool, const int32_t *tokens, int n, float *logits_out,
                       int all_rows, glm_error *err);
/* Runs n drafted tokens for verification: logits_all gets n x vocab floats, each row bit for bit
 * what the decode step would give at that position (KDA runs token by token in its recurrent
 * form; every other product is row-independent). Each position's KDA state is kept, so
 * cpu_state_rewind can come back to any length inside the window. */
glm_status cpu_verify(cpu_state *s, cpu_pool *pool, const int32_t *tokens, int n, float *logits_all,
                      glm_error *err);
/* Back to n tokens inside the last verification window (its first token and later), until the
 * next prefill, truncate or reset. */
glm_status cpu_state_rewind(cpu_state *s, int n, glm_error *err);
/* Up to max drafts from the MTP layer to follow the state's tokens and then `next` (greedy,
 * chained); *n_out 0 when the model has no MTP layer or its cache is out of step. The state is
 * unchanged. */
glm_status cpu_mtp_draft(cpu_state *s, cpu_pool *pool, int32_t next, int32_t *out, int max,
                         int *n_out, glm_error *err);
/* One token (the decode step): cpu_prefill with n = 1. */
glm_status cpu_decode(cpu_state *s, cpu_pool *pool, int32_t token, float *logits_out, glm_error *err);

#endif
