/* traffic.h: what one decode step of a model must read from memory (the floor that decode
 * benchmarks compare against) and the floating-point work one token costs. */
#ifndef GLMCHAT_ENGINE_MODEL_TRAFFIC_H
#define GLMCHAT_ENGINE_MODEL_TRAFFIC_H

#include "model/model.h"

typedef struct glm_traffic {
    double weight_bytes; /* weights one decode token reads: all dense ones, the LM head, one
                          * embedding row, and num_experts_per_tok / n_routed_experts of the
                          * routed experts (the expected share when routing spreads evenly) */
    double state_bytes;  /* KDA recurrent states, read and written once a token */
    double flops;        /* 2 x multiply-adds of the token's matrix products */
} glm_traffic;

/* Bytes of one weight as stored (values, block scales, EXL3 trellis and its scale vectors). */
double glm_weight_bytes(const glm_weight *w);
void glm_model_traffic(const glm_model *m, glm_traffic *out);

#endif
