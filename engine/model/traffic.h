/* traffic.h: the one count of what a decode step moves through memory, per op and per rank
 * (weights by their format, caches at a context length, states), and its matrix-product FLOPs. */
#ifndef GLMCHAT_ENGINE_MODEL_TRAFFIC_H
#define GLMCHAT_ENGINE_MODEL_TRAFFIC_H

#include <stddef.h>

#include "glm.h"
#include "model/model.h"

/* How the dense linears are stored: BF16 as shipped, or requantized at load to 4-bit codes with
 * an fp16 scale per group of 32 or 64 values (engine/cuda/weights.c put_q4). A matrix whose
 * per-rank width is not a multiple of 128 stays BF16, as the loader keeps it. */
typedef enum glm_traffic_dense { GLM_TRAFFIC_BF16 = 0, GLM_TRAFFIC_Q4_G32, GLM_TRAFFIC_Q4_G64 } glm_traffic_dense;

/* A cache row's storage: 4 or 2 bytes a value, or 1 byte a value plus a 4-byte row scale (the
 * same numbering as the CUDA backend's CUDA_KV_*). */
typedef enum glm_cache_format { GLM_CACHE_F32 = 0, GLM_CACHE_BF16 = 1, GLM_CACHE_FP8 = 2 } glm_cache_format;

/* The ops of a decode step, each a count of its own weights and memory. */
typedef enum glm_traffic_op {
    GLM_OP_EMBED,         /* one row of the embedding */
    GLM_OP_HC_MIX,        /* an HC site's mixing product: its fn matrix and the streams */
    GLM_OP_HC_COLLAPSE,   /* an HC site's collapse of the streams and its RMSNorm */
    GLM_OP_HC_UPDATE,     /* an HC site's update: the streams read and written, the sublayer's y */
    GLM_OP_KDA_PROJ,      /* q, k, v, f_a, g_a, beta: the products of the input */
    GLM_OP_KDA_GATES_B,   /* f_b, g_b: the gates' second (low-rank) products */
    GLM_OP_KDA_CONV,      /* the conv weights and the conv window, read and written */
    GLM_OP_KDA_STATE,     /* the recurrent state, read and written */
    GLM_OP_KDA_O,         /* the output projection */
    GLM_OP_DSA_Q_A,
    GLM_OP_DSA_Q_B,
    GLM_OP_DSA_KV_A,
    GLM_OP_DSA_KV_B_K,    /* kv_b's key half (the absorbed query) */
    GLM_OP_DSA_KV_B_V,    /* kv_b's value half (the value expansion) */
    GLM_OP_DSA_O,
    GLM_OP_INDEXER_IN,    /* the indexer's key, gate and head-weight products of the input */
    GLM_OP_INDEXER_Q,     /* the indexer's query product of q_a */
    GLM_OP_INDEXER_SCORE, /* the pooled keys the indexer scores, at the context length */
    GLM_OP_LATENT,        /* the latent cache rows the attention reads (the selection) */
    GLM_OP_ROUTER,
    GLM_OP_SHARED,        /* the shared expert(s) */
    GLM_OP_ROUTED,        /* the top-k routed experts */
    GLM_OP_DENSE_MLP,     /* the dense MLPs of the first layers */
    GLM_OP_FINAL_NORM,    /* the stream mean and final norm */
    GLM_OP_LM_HEAD,
    GLM_OP_COUNT
} glm_traffic_op;

typedef struct glm_traffic_params {
    int ranks;                     /* 1, or 2 (tp_split_model's halves: engine/tp/split.c) */
    int context;                   /* tokens in the cache when the step runs */
    glm_traffic_dense dense;
    int expert_bits;               /* EXL3 bits a value of the routed experts (1..8) */
    glm_cache_format latent_cache; /* the DSA latent rows */
    glm_cache_format index_cache;  /* the indexer's pooled keys */
    int resident;                  /* 1: every weight whole (all experts, the whole embedding)
                                    * and no cache, state or stream: what a rank holds */
    /* A verification window (0 or 1: a one-row decode step): rows forwarded together, each
     * weight read once for all of them; the streams, embedding rows and conv and recurrent
     * states after each row (a window keeps them all) once a row; the latent rows the rows'
     * selections take together (at most the context and the rows); the pooled keys once. */
    int rows;
    /* Routed experts a MoE layer reads for the rows (the union of their top-k); 0: the top-k
     * for one row, rows x top-k (at most every expert) for more. */
    double experts_read;
} glm_traffic_params;

typedef struct glm_traffic_row {
    int calls;    /* times the op runs in a step */
    double bytes; /* moved per rank, summed over the step's calls */
    double flops; /* 2 per multiply-add of its matrix products, per rank */
} glm_traffic_row;

typedef struct glm_traffic_table {
    glm_traffic_row op[GLM_OP_COUNT];
} glm_traffic_table;

const char *glm_traffic_op_name(glm_traffic_op op);
/* The words used for the formats in tables and messages: "bf16", "q4/32", "q4/64"; "f32" ... */
const char *glm_traffic_dense_name(glm_traffic_dense f);
const char *glm_cache_format_name(glm_cache_format f);

/* GLM_OK, or GLM_ERR_ARG naming the parameter that is out of range (or the config's sizes that
 * two ranks cannot halve). */
glm_status glm_traffic_check(const glm_config *c, const glm_traffic_params *p, glm_error *err);

/* The step of config c (its full, unsplit shapes) for one rank under p. */
glm_status glm_traffic_step(const glm_config *c, const glm_traffic_params *p, glm_traffic_table *t,
                            glm_error *err);
/* One layer's ops of the same count (p as glm_traffic_check accepts). */
void glm_traffic_layer(const glm_config *c, const glm_traffic_params *p, int li, glm_traffic_table *t);
/* The step of a loaded model, its weights counted as bound (their stored types and shapes; a
 * split model's halves as they are), at context tokens with caches of the given format. */
void glm_model_traffic(const glm_model *m, int context, glm_cache_format cache, glm_traffic_table *t);

double glm_traffic_bytes(const glm_traffic_table *t);
double glm_traffic_flops(const glm_traffic_table *t);

/* Bytes of one weight as stored (values, block scales, EXL3 trellis and its scale vectors). */
double glm_weight_bytes(const glm_weight *w);
/* Bytes of a dense rows x cols matrix in format f. */
double glm_dense_bytes(double rows, double cols, glm_traffic_dense f);
/* Bytes of one cache row of width values in format f. */
size_t glm_cache_row_bytes(size_t width, glm_cache_format f);

#endif
