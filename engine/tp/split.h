/* split.h: the two-rank weight split (architecture.md 5.1): output-feature halves as views into
 * the mapped weights, input-feature halves as float32 copies, and the block-level rules built on them. */
#ifndef GLMCHAT_TP_SPLIT_H
#define GLMCHAT_TP_SPLIT_H

#include "glm.h"
#include "model/model.h"
#include "model/weights.h"

/* Rank r's half of w's rows (output features): a view, nothing is copied. rows must be even; an
 * FP8-blocked weight's half must start on a scale block. */
glm_status tp_split_rows(const glm_weight *w, int rank, glm_weight *half, glm_error *err);

/* Rank r's half of w's columns (input features) as a new float32 matrix; *owned receives the
 * buffer to free. glm_weight has no row stride, hence the copy. */
glm_status tp_split_cols(const glm_weight *w, int rank, glm_weight *half, float **owned, glm_error *err);

/* Rank r's half of an EXL3 weight, by outputs (by_inputs 0: whole 16-wide tile columns of the
 * trellis copied, svh/sv and bias halved; exact, as the output Hadamard works per 128 outputs) or
 * by inputs (1: a view of the trellis rows, suh/su halved, the bias on rank 0 only; the ranks'
 * partial products summed give the whole). Each half must be a multiple of 128 (the Hadamard
 * block): otherwise GLM_ERR_UNSUPPORTED naming the tensor and its shape. *owned receives one
 * block holding the half's exl3_tensor (half->exl3 points into it); free() releases it. */
glm_status tp_split_exl3(const glm_weight *w, int rank, int by_inputs, glm_weight *half, void **owned,
                         glm_error *err);

/* What a split model owns: float32 column halves and EXL3 halves, each one free()d block. */
typedef struct tp_split_owned {
    void **bufs;
    int n, cap;
} tp_split_owned;

/* A SwiGLU MLP (dense, shared or routed expert), in place: gate/up by output halves and down by
 * input halves (plain or EXL3); the rank's partial output summed over both ranks in rank order
 * is the full MLP's output. The copies made are added to o. */
glm_status tp_split_mlp(glm_mlp_weights *w, int rank, tp_split_owned *o, glm_error *err);

/* Makes m rank r's half of the model, in place (architecture.md 5.1): KDA heads (projections,
 * conv taps, decay, beta and gate rows; o_proj columns), MLA heads (q_b, kv_b rows; o_proj
 * columns; the indexer stays whole), dense, shared and routed FFN features (gate/up rows, down
 * columns) and the LM head's vocabulary half (rows). The config's kda_heads, num_heads,
 * intermediate_size and moe_intermediate_size are halved so the blocks index only this rank's
 * part; vocab_size stays the full vocabulary. EXL3 weights split as tp_split_exl3 says (whole
 * Hadamard blocks, else refused naming the tensor). owned receives the copies (tp_split_owned_free). */
glm_status tp_split_model(glm_model *m, int rank, tp_split_owned *owned, glm_error *err);
void tp_split_owned_free(tp_split_owned *owned);

#endif
