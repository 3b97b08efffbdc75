/* spec.h: speculative decoding: drafts (copy drafts by prompt lookup; the model's MTP layer)
 * verified in windows so that a drafted reply equals the undrafted one token for token, greedy
 * or sampled with a seed; acceptance counted per draft position. */
#ifndef GLMCHAT_ENGINE_SPEC_H
#define GLMCHAT_ENGINE_SPEC_H

#include <stdint.h>

#include "glm.h"
#include "sampler.h"

#define SPEC_MAX_DRAFT 8
#define SPEC_MAX_BACKOFF 32 /* most plain steps between drafting probes while windows do not pay */
#define SPEC_RETIME_EVERY 32 /* windows in a row after which one plain step is timed again */
#define SPEC_EXPLORE_EVERY 16 /* every this many windows one runs at the acceptance's cap */

typedef enum spec_mode { SPEC_OFF = 1, SPEC_COPY = 2, SPEC_MTP = 3 } spec_mode;

/* Per draft position i (0: the first drafted token): how often one was proposed and accepted. */
typedef struct spec_stats {
    int64_t windows;       /* verification forwards */
    int64_t backoff_steps; /* plain steps taken while drafting backed off: nothing accepted, or
                            * a window's rows cost more than the tokens they were expected to give */
    int64_t timing_steps;  /* plain steps taken to time one (the first two, then one every
                            * SPEC_RETIME_EVERY windows) */
    int64_t proposed[SPEC_MAX_DRAFT], accepted[SPEC_MAX_DRAFT];
} spec_stats;

/* The drafting mode glm_engine_params.draft asks for (DEFAULT: off); the application resolved
 * it from its flags, variables and config (backend_check_params checked the range). */
static inline spec_mode spec_mode_of(glm_draft draft)
{
    _Static_assert((int)SPEC_OFF == (int)GLM_DRAFT_OFF && (int)SPEC_COPY == (int)GLM_DRAFT_COPY &&
                   (int)SPEC_MTP == (int)GLM_DRAFT_MTP, "drafting modes numbered apart");
    return draft == GLM_DRAFT_COPY || draft == GLM_DRAFT_MTP ? (spec_mode)draft : SPEC_OFF;
}

/* Copy draft: finds the latest earlier occurrence of ctx's last tokens (the longest match of 3
 * to 8) and proposes up to max tokens that followed it; where those run into the tail (a loop:
 * the match lies within max tokens of it) the loop goes on round. Returns how many it wrote. */
int spec_copy_draft(const int32_t *ctx, int n, int32_t *out, int max);

struct glm_session;
typedef int (*spec_token_fn)(int32_t token, void *user);

/* A drafter from outside the engine (a separate draft model, a test's oracle): proposes up to max
 * tokens to follow ctx[0..n) into out and returns how many. */
typedef int (*spec_draft_fn)(const int32_t *ctx, int n, int32_t *out, int max, void *user);

/* The cost a forward of rows tokens counts for in the choice between a window and a plain step:
 * NULL counts the measured seconds; a test gives a model's costs instead (so that the choice
 * does not depend on the machine's speed). */
typedef double (*spec_cost_fn)(int rows, double measured_s, void *user);

/* The generation loop with drafts (glm_session_generate_tokens when drafting is on): emits up
 * to max_new tokens through on_token exactly as the one-token loop would, sampling each from
 * smp in order. *n_out: tokens emitted. */
typedef struct spec_drafter {
    spec_mode mode;
    spec_draft_fn fn; /* NULL: the mode's own drafts */
    void *user;
    spec_cost_fn cost; /* NULL: measured seconds */
    void *cost_user;
} spec_drafter;

glm_status spec_generate(struct glm_session *s, const spec_drafter *d, glm_sampler *smp,
                         const int *eos, int n_eos, int max_new, spec_token_fn on_token, void *user,
                         int *n_out, spec_stats *stats, glm_error *err);

#endif
