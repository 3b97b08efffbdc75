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
    int n_gptq;                /* of n_requantized, the ones rounded by error feedback */
    double dense_bytes;        /* the dense roles' matrices (and kv_b) as stored: q4 bits or bf16 */
    double head_bytes;         /* of dense_bytes, the LM head's */
} cpu_requant;

/* A calibration Hessian (cols x cols, sum of x x^T over the matrix's inputs) for w, or NULL. */
typedef const double *(*cpu_requant_hessian_fn)(void *ctx, const glm_weight *w);

/* Which variant of the requantization: q's format on the GPU's roles (cpu_requant_make's), or
 * with the LM head kept as stored, kv_b requantized too, or GPTQ rounding where hessian gives an
 * H (the others by q's plain rounding). */
typedef struct cpu_requant_opts {
    numfmt_q4 q;
    int keep_head;
    int quant_kv_b; /* kv_b's rows are kv_lora_rank wide: requantized where q->group divides it */
    cpu_requant_hessian_fn hessian;
    void *hessian_ctx;
    double gptq_damp; /* of H's mean diagonal; 0.01 where 0 */
} cpu_requant_opts;

/* The roles CUDA's loader requantizes (engine/cuda/weights.c put_lin: attention and indexer
 * linears, dense and shared MLPs, the LM head, the MTP layer's eh_proj and linears), each
 * plain BF16 or F32 matrix of a width that is a multiple of 128, per q. */
glm_status cpu_requant_make(const glm_model *m, const numfmt_q4 *q, cpu_requant **out,
                            glm_error *err);
glm_status cpu_requant_make_with(const glm_model *m, const cpu_requant_opts *o, cpu_requant **out,
                                 glm_error *err);
void cpu_requant_free(cpu_requant *r);

#endif
