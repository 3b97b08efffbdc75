/* split.h: the two-rank weight split (architecture.md 5.1): output-feature halves as views into
 * the mapped weights, input-feature halves as float32 copies, and the block-level rules built on them. */
#ifndef GLMCHAT_TP_SPLIT_H
#define GLMCHAT_TP_SPLIT_H

#include "glm.h"
#include "model/weights.h"

/* Rank r's half of w's rows (output features): a view, nothing is copied. rows must be even; an
 * FP8-blocked weight's half must start on a scale block. */
glm_status tp_split_rows(const glm_weight *w, int rank, glm_weight *half, glm_error *err);

/* Rank r's half of w's columns (input features) as a new float32 matrix; *owned receives the
 * buffer to free. glm_weight has no row stride, hence the copy. */
glm_status tp_split_cols(const glm_weight *w, int rank, glm_weight *half, float **owned, glm_error *err);

/* A SwiGLU MLP (dense, shared or routed expert): gate/up rows and down columns halved; the
 * rank's partial output summed over both ranks in rank order is the full MLP's output. */
glm_status tp_split_mlp(const glm_mlp_weights *w, int rank, glm_mlp_weights *half, float **owned,
                        glm_error *err);

#endif
