/* split.h: the weight split among N ranks (architecture.md 5.1): output-feature parts as views into
 * the mapped weights, input-feature parts as float32 copies, and the block-level rules built on them. */
#ifndef GLMCHAT_TP_SPLIT_H
#define GLMCHAT_TP_SPLIT_H

#include "glm.h"
#include "model/model.h"
#include "model/weights.h"

/* The most ranks a split shares a model among. */
#define TP_SPLIT_MAX_RANKS 16

/* Rank r's share of n things (heads, features, vocabulary entries) among world ranks: n / world
 * each, and the first n % world ranks one more; the parts follow each other in rank order. */
typedef struct tp_part {
    int64_t start, count;
} tp_part;
tp_part tp_part_of(int64_t n, int rank, int world);

/* Rank r's part of w's rows (output features), w's rows being `units` equal groups (heads,
 * features) shared as tp_part_of says: a view, nothing is copied. Refused: rows that are not
 * whole groups, a rank left without any, and an FP8-blocked part not starting on a scale block. */
glm_status tp_split_rows(const glm_weight *w, int64_t units, int rank, int world, glm_weight *part,
                         glm_error *err);

/* Rank r's part of w's columns (input features), in `units` groups as tp_split_rows, as a new
 * float32 matrix; *owned receives the buffer to free. glm_weight has no row stride, hence the copy. */
glm_status tp_split_cols(const glm_weight *w, int64_t units, int rank, int world, glm_weight *part,
                         float **owned, glm_error *err);

/* Rank r's part of an EXL3 weight, by outputs (by_inputs 0: whole 16-wide tile columns of the
 * trellis copied, svh/sv and bias cut; exact, as the output Hadamard works per 128 outputs) or
 * by inputs (1: a view of the trellis rows, suh/su cut, the bias on rank 0 only; the ranks'
 * partial products summed give the whole). Every rank's part must start and end on a multiple of
 * 128 (the Hadamard block): otherwise GLM_ERR_UNSUPPORTED naming the tensor, its shape and the
 * rank. *owned receives one block holding the part's exl3_tensor (part->exl3 points into it);
 * free() releases it. */
glm_status tp_split_exl3(const glm_weight *w, int64_t units, int rank, int world, int by_inputs,
                         glm_weight *part, void **owned, glm_error *err);

/* What a split model owns: float32 column halves and EXL3 halves, each one free()d block. */
typedef struct tp_split_owned {
    void **bufs;
    int n, cap;
} tp_split_owned;

/* A SwiGLU MLP (dense, shared or routed expert) of `units` feature groups, in place: gate/up by
 * output parts and down by input parts (plain or EXL3); the ranks' partial outputs summed in rank
 * order are the full MLP's output. The copies made are added to o. */
glm_status tp_split_mlp(glm_mlp_weights *w, int64_t units, int rank, int world, tp_split_owned *o,
                        glm_error *err);

/* Makes m rank r's part of the model among world ranks (2..TP_SPLIT_MAX_RANKS), in place
 * (architecture.md 5.1): KDA heads (projections, conv taps, decay, beta and gate rows; o_proj
 * columns), MLA heads (q_b, kv_b rows; o_proj columns; the indexer stays whole), dense, shared
 * and routed FFN features (gate/up rows, down columns) and the LM head's vocabulary part (rows),
 * each shared as tp_part_of says. The config's kda_heads, num_heads, intermediate_size and
 * moe_intermediate_size become this rank's counts so the blocks index only its part; vocab_size
 * stays the full vocabulary. A dimension with fewer units than ranks is refused naming the
 * config field; EXL3 weights split as tp_split_exl3 says. owned receives the copies
 * (tp_split_owned_free). */
glm_status tp_split_model_ranks(glm_model *m, int rank, int world, tp_split_owned *owned, glm_error *err);
/* tp_split_model_ranks for two ranks. */
glm_status tp_split_model(glm_model *m, int rank, tp_split_owned *owned, glm_error *err);
void tp_split_owned_free(tp_split_owned *owned);

#endif
