/* blocks.h: the CPU forward's sub-blocks (hyper-connections, KDA, DSA with its indexer, dense
 * and MoE FFN) and the state they read and extend; internal to engine/cpu. */
#ifndef GLMCHAT_ENGINE_CPU_BLOCKS_H
#define GLMCHAT_ENGINE_CPU_BLOCKS_H

#include "cpu/forward.h"
#include "cpu/ops.h"

typedef struct kda_state {
    float *conv; /* (K-1) x 3C pre-conv rows, oldest first */
    float *S;    /* heads x dk x dv */
} kda_state;

typedef struct dsa_cache {
    float *latent;  /* cap x kv_lora_rank */
    float *idx_key; /* cap x index_head_dim (LayerNormed wk output) */
    float *idx_gate; /* cap x index_head_dim (pool gate logits) */
    float *pool_key; /* (cap / kpool) x index_head_dim */
    int n_pools;     /* completed pools with keys */
} dsa_cache;

/* A verification window's KDA states of one layer, one per position (cpu_verify). */
typedef struct kda_trail {
    float *conv; /* cap x (K-1) x 3C */
    float *S;    /* cap x heads x dk x dv */
} kda_trail;

struct cpu_state {
    const glm_model *m;
    int n, cap;
    kda_state *kda; /* one per KDA layer */
    dsa_cache *dsa; /* one per DSA layer */
    kda_state *mark; /* saved KDA states, or NULL */
    int mark_n;
    cpu_collective coll; /* all_reduce NULL: one rank */
    const atomic_int *cancel; /* polled between layers of a prefill (one rank), or NULL */
    kda_trail *trail;  /* one per KDA layer, or NULL */
    int trail_cap;     /* positions each trail holds */
    int trail_base, trail_n; /* the last verification ran positions trail_base.. + trail_n */
    int verifying;     /* set while cpu_verify runs */
    cpu_numerics num;  /* the formats the DSA cache rows are rounded to (f32: none) */
    /* The MTP layer (cpu/mtp.c): its own DSA cache, row i pairing the main model's final-normed
     * row h_i with token i+1, so it holds n-1 rows (mtp_n; -1: lost, no drafts until a reset);
     * h: the final-normed rows of the last forward, positions h_base.. h_base + h_n. */
    dsa_cache mtp;
    int mtp_n;
    float *h;
    int h_base, h_n, h_cap;
    float *mark_h; /* h of the marked length's last token, or NULL */
    int mark_mtp_n;
    backend_tap tap; /* diagnostics (backend.h); fn NULL: none */
};

/* Grows the DSA caches to hold need tokens. */
glm_status cpu_state_reserve(cpu_state *s, int need, glm_error *err);

/* The MTP layer runs: the model has it and this is one rank. */
int cpu_mtp_on(const cpu_state *s);
/* After a forward of T tokens from pos0 whose final-normed rows are hrows (T x D): the MTP
 * layer's cache catches up to the new length - 1, and the rows are kept for the next one. */
int cpu_mtp_catch_up(cpu_state *s, cpu_pool *pool, const int32_t *tokens, int pos0, int T,
                     const float *hrows);
/* The MTP cache follows the state back to n tokens (truncate, rewind, reset). */
void cpu_mtp_cut(cpu_state *s, int n);
void cpu_mtp_free(cpu_state *s);

/* Per-query token selection of a DSA layer: count[t] tokens in idx[t * width ...]. */
typedef struct dsa_selection {
    int width;
    int *count;
    int32_t *idx;
    /* where not NULL (the diagnostic tap), the indexer's pool scores a row, score_width each:
     * pool p's score at p, NaN where the row scores no pool p (p past its pools, or the row's
     * pools within the budget) */
    float *scores;
    int score_width;
    /* where not NULL (the tap), each row's cache rows before rounding: latent, key, gate */
    float *cache_in;
} dsa_selection;

/* The indexer's selection rule for the query at pos from its pool scores (scores[p], pool p < P =
 * (pos + 1) / kp): every token while P <= budget, else the budget best pools (ties: the lower
 * pool), each as its kp tokens; then the open tail (pos - pos % kp ... pos, the query itself
 * included); out ascending. work: room for P + 1 pool_scores (dsa_select_work_bytes). Returns
 * the count (at most budget * kp + kp). The CUDA top-k is checked index for index against this. */
typedef struct pool_score {
    float score;
    int pool;
} pool_score;
int dsa_select_rule(const float *scores, int pos, int kp, int budget, pool_score *work,
                    int32_t *out);

/* HC_pre of T tokens: X is T x S x D; writes post (T x S), comb (T x S x S) and the collapsed
 * rows c (T x D). */
int cpu_hc_pre(cpu_pool *pool, const glm_config *c, const glm_weight *fn, const float *base,
               const float *scale, const float *X, int T, float *post, float *comb, float *out,
               const cpu_inputs *in);
/* X[j] <- post_j * y + sum_i comb[i][j] X[i], per token. */
int cpu_hc_post(const glm_config *c, float *X, const float *y, const float *post,
                const float *comb, int T);

/* pos0: the position of u's first row (chunks follow the absolute grid). trail: NULL, or each
 * position's state is kept there and the T tokens run one at a time in the recurrent form (bit
 * for bit the decode step's arithmetic). in (here and below): the rows whose products take the
 * one-part inputs (ops.h), or NULL. */
int cpu_kda(cpu_pool *pool, const glm_config *c, const glm_kda_weights *w, kda_state *st,
            int pos0, const float *u, int T, float *out, kda_trail *trail, const cpu_inputs *in);
/* sel_in: the previous layer's selection (shared layers); sel_out receives this layer's. nf:
 * the cache rows' format (each row rounded as the CUDA cache stores it). */
int cpu_dsa(cpu_pool *pool, const glm_config *c, const glm_dsa_weights *w, dsa_cache *cache,
            const cpu_numerics *nf, int pos0, const float *u, int T, const dsa_selection *sel_in,
            dsa_selection *sel_out, float *out, const cpu_inputs *in);
int cpu_mlp(cpu_pool *pool, const glm_config *c, const glm_mlp_weights *w, int64_t inter,
            const float *x, int T, float *out, const cpu_inputs *in);
/* (the router and the shared expert take in; the routed experts never) */
int cpu_moe(cpu_pool *pool, const glm_config *c, const glm_layer_weights *w, const float *x, int T,
            float *out, const cpu_inputs *in);
/* The router's choice for one token: experts[k] and weights[k], k < num_experts_per_tok.
 * scratch: 3 * n_routed_experts + n_group floats. Ties go to the lower group / expert index. */
void cpu_route(const glm_config *c, const float *logits, const float *bias, float *scratch,
               int *experts, float *weights);

#endif
