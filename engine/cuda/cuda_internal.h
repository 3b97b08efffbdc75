/* cuda_internal.h: the CUDA backend's pieces (the files of engine/cuda): the uploaded weights, the memory
 * plan's scratch layout, a conversation's device state, the forward and the decode graph. */
#ifndef GLMCHAT_ENGINE_CUDA_INTERNAL_H
#define GLMCHAT_ENGINE_CUDA_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "cuda/plan.h"
#include "kernels/engine.h"
#include "kernels/kernels.h"
#include "model/model.h"

/* Tokens a forward chunk holds at most (prefills run in chunks of this many). */
#define CUDA_CHUNK 256
/* Rows a decode-path launch takes (eng_matmul_jobs, the fused HC step); more go the prefill way. */
#define CUDA_DECODE_T 8
/* The fused HC step's bounds: S * hidden columns split over at most 64 blocks of 256, and the
 * hidden row in shared memory. */
#define CUDA_HC_MAX_COLS (64 * 256)
#define CUDA_HC_MAX_HIDDEN 8192
/* Queries of one indexer scoring launch (bounds the score scratch). */
#define CUDA_SCORE_ROWS 16

/* A linear layer on the device: a dense matrix or an EXL3 module. */
typedef struct cu_lin {
    int exl3;
    eng_mat m;
    kern_exl3_linear x;
} cu_lin;

typedef struct cu_mlp {
    cu_lin gate, up, down;
} cu_mlp;

typedef struct cu_experts {
    int fused;                /* 1: kern_exl3_moe over stacked EXL3 experts */
    kern_exl3_experts ex;     /* fused */
    eng_mat *gate, *up, *down; /* else: device tables of n_routed_experts dense matrices */
    void *moe_work;           /* fused: cu_weights.moe_work */
} cu_experts;

typedef struct cu_layer {
    eng_mat hc_attn_fn, hc_ffn_fn; /* dense (never EXL3) */
    cu_lin hc_attn_lin, hc_ffn_lin;
    const float *hc_attn_base, *hc_attn_scale, *hc_ffn_base, *hc_ffn_scale;
    const float *input_norm, *post_norm;
    /* KDA */
    cu_lin q_proj, k_proj, v_proj, f_a, f_b, b_proj, g_a, g_b, kda_o;
    const float *q_conv, *k_conv, *v_conv, *A_log, *dt_bias, *o_norm;
    /* DSA */
    cu_lin q_a, q_b, kv_a, dsa_o, idx_wq_b, idx_wk, idx_weights, idx_gate;
    eng_mat kv_b;
    const float *q_a_norm, *kv_a_norm, *idx_k_norm_w, *idx_k_norm_b, *idx_ape;
    int has_indexer;
    /* FFN */
    cu_mlp mlp; /* dense MLP or the shared expert */
    int has_shared;
    cu_lin router;
    const float *router_bias;
    cu_experts experts;
} cu_layer;

/* Everything uploaded at open; allocations are kept in a list and freed together. */
typedef struct cu_weights {
    eng_mat embed;
    cu_lin lm_head;
    const float *final_norm;
    cu_layer *layers;
    int n_layers;
    void **allocs;
    size_t n_allocs, cap_allocs;
    size_t bytes;            /* device bytes held */
    size_t exl3_work_bytes;  /* the largest kern_exl3_matmul workspace at CUDA_CHUNK rows */
    void *exl3_work;
    void *moe_work;          /* kern_exl3_moe workspace, shared by the fused layers */
    size_t moe_work_bytes;
    size_t dry_bytes;        /* what a dry run counted */
    int n_dequantized_experts; /* EXL3 expert layers the fused kernel cannot take (run dense) */
    int n_q4, n_q4_kept;     /* dense_q4: matrices requantized, kept (cols not a multiple of 128) */
} cu_weights;

/* dense_q4: the BF16 (or F32) linears (attention, dense and shared MLPs, LM head) requantized to
 * ENG_Q4 on the GPU (GLMCHAT_CUDA_DENSE=q4); the HC products, router, embedding and kv_b stay. */
glm_status cu_weights_upload(const glm_model *m, int dense_q4, cu_weights *w, glm_error *err);
void cu_weights_free(cu_weights *w);
/* Device bytes the model's weights will take as cu_weights_upload lays them out. */
size_t cu_weights_bytes(const glm_model *m, int dense_q4);

/* The shared activations of one forward chunk (plan.h's layout, one device allocation). */
typedef struct cu_scratch {
    void *base;
    float *X, *c, *u, *y, *flat, *mu, *pre, *post, *comb;
    float *q, *k, *v, *qc, *kc, *vc, *g, *o, *gate, *lo, *beta;
    float *qa, *qd, *kvl, *wk, *ig, *iq, *hw, *qt, *ot, *od;
    int32_t *sel_idx;
    int *sel_count;
    float *fg, *fu, *rlog, *rscratch, *rw, *mh, *mye, *mx, *ffn_y;
    int32_t *rids;
    float *part; /* the fused HC step's partial sums: CUDA_DECODE_T x 64 x (mix + 1) */
    float *apart; /* the decode latent attention's partial sums: ENG_ATTEND_PAIRS x (R + 2) */
    float *hfin, *logits;
} cu_scratch;

/* Op timing for the bench: when on, each op records an event after it (eager runs only). */
#define CUDA_PROF_MAX 2048
typedef struct cu_prof {
    int on, n;
    void *ev[CUDA_PROF_MAX];
    const char *what[CUDA_PROF_MAX];
} cu_prof;

typedef struct cuda_backend {
    const glm_model *m;
    cu_weights w;
    cu_scratch s;
    cuda_plan plan;
    void *stream;
    int kv_dtype;  /* eng_cache_dtype of the latent cache */
    int kv_index_dtype; /* of the indexer's key, gate and pool-key caches */
    int context;   /* the most tokens a state may hold */
    int dense_q4;  /* GLMCHAT_CUDA_DENSE=q4 */
    cu_prof prof;
} cuda_backend;

typedef struct cu_dsa_cache {
    eng_cache latent, idx_key, idx_gate, pool_key;
} cu_dsa_cache;

typedef struct cuda_state {
    cuda_backend *be;
    int n, cap, mark_n;
    float **kda_conv, **kda_S;      /* per KDA layer */
    float **mark_conv, **mark_S;    /* saved at the mark, or NULL */
    cu_dsa_cache *dsa;              /* per DSA layer, cap rows */
    float *scores;                  /* CUDA_SCORE_ROWS x (cap / kpool + 1) */
    int *d_pos;                     /* the chunk's first position */
    int32_t *d_tokens;              /* CUDA_CHUNK */
    int *h_pos;                     /* pinned */
    int32_t *h_tokens;              /* pinned */
    float *h_logits;                /* pinned: 2 x CUDA_CHUNK x max(vocab, hidden) */
    void *graph;                    /* the decode step, captured at this cap; NULL: none */
    int graph_cap;
    backend_collective coll;
} cuda_state;

/* state.c */
cuda_state *cuda_state_new(cuda_backend *be, glm_error *err);
void cuda_state_free(cuda_state *s);
void cuda_state_reset(cuda_state *s);
glm_status cuda_state_mark(cuda_state *s, glm_error *err);
glm_status cuda_state_truncate(cuda_state *s, int n, glm_error *err);
/* Grows the caches to hold need tokens (doubling, up to the context); drops the graph. */
glm_status cuda_state_reserve(cuda_state *s, int need, glm_error *err);

/* forward.c: one chunk of T <= CUDA_CHUNK tokens whose ids and first position are already in
 * s->d_tokens / s->d_pos; with want_logits the final rows' logits are on their way into
 * s->h_logits (rows: all T when all_rows, else the last; sync the stream before reading).
 * Returns 0, -1 (a kernel failed: err set) or -2 (the peer). */
int cuda_forward(cuda_state *s, int T, int all_rows, int want_logits, glm_error *err);
/* Its two halves: the embedding and the layers; the final norm and the LM head (logits left on
 * the device in be->s.logits with one rank, gathered into s->h_logits with two). */
int cuda_forward_layers(cuda_state *s, int T, glm_error *err);
int cuda_forward_head(cuda_state *s, int T, int all_rows, glm_error *err);
/* Decode timing for the bench: runs one eager step at the state's length and writes each
 * layer's microseconds into us[num_layers] (and the head's into *head_us). The state grows. */
glm_status cuda_time_layers(cuda_state *s, int32_t token, float *us, float *head_us,
                            glm_error *err);

/* Records the op profile's next event (no-op unless be->prof.on). */
void cuda_prof_mark(cuda_backend *be, const char *what);

/* graph.c: one decode step through the captured graph (captured on first use at this cap). */
glm_status cuda_decode_graph(cuda_state *s, glm_error *err);

/* The plan of an open CUDA backend (NULL for another backend). */
const cuda_plan *backend_cuda_plan(const engine_backend *b);

/* Message for a kernel failure. */
glm_status cuda_fail(glm_error *err, const char *what, int code);

#endif
