/* sampler.h: picks the next token from a row of logits: greedy, or sampled with temperature,
 * top-k, top-p and min-p from a seeded generator (the same seed gives the same tokens). */
#ifndef GLMCHAT_ENGINE_SAMPLER_H
#define GLMCHAT_ENGINE_SAMPLER_H

#include <stdint.h>

#include "glm.h"
#include "glm_tokens.h" /* glm_argmax */

typedef struct glm_sampler glm_sampler;

/* Order of the filters, as transformers applies them: temperature, top-k, top-p, min-p.
 * temperature <= 0 is greedy: the largest logit, the lowest id among equal ones. Candidates
 * with equal logits are ordered by id, so every filter is deterministic. */
glm_sampler *sampler_new(const glm_sampling *p, int vocab, glm_error *err);
int32_t sampler_pick(glm_sampler *s, const float *logits);
void sampler_free(glm_sampler *s);

/* The generator: splitmix64, exposed for tests. */
uint64_t sampler_rng_next(uint64_t *state);
double sampler_rng_uniform(uint64_t *state); /* [0, 1) with 53 random bits */

#endif
