/* requant.h: the CPU backend's copy of a model whose dense linears are requantized to q4 as the
 * CUDA backend's loader does it (--dense q4), so the float forward runs on the same values. */
#ifndef GLMCHAT_ENGINE_CPU_REQUANT_H
#define GLMCHAT_ENGINE_CPU_REQUANT_H

#include "model/model.h"
#include "model/numfmt.h"

/* A glm_model sharing m's config, tensor map and untouched weights, with its own layer
 * array and float copies of the requantized matrices. */
typedef struct cpu_requant {
    glm_model model;
    glm_layer_weights *layers;
    float **owned;
    int n_owned, cap_owned;
    int n_requantized, n_kept; /* matrices made q4; BF16/F32 ones kept (width not a multiple of 128) */
} cpu_requant;

/* The roles CUDA's loader requantizes (engine/cuda/weights.c put_lin: attention and indexer
 * linears, dense and shared MLPs, the LM head, the MTP layer's eh_proj and linears), each
 * plain BF16 or F32 matrix of a width that is a multiple of 128, per q. */
glm_status cpu_requant_make(const glm_model *m, const numfmt_q4 *q, cpu_requant **out,
                            glm_error *err);
void cpu_requant_free(cpu_requant *r);

#endif
