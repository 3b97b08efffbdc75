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

/* Above this many rows the EXL3 experts run grouped by expert (kern_exl3_moe_prefill) rather
 * than through the decode kernel (kern_exl3_moe) in launches of its pair limit. */
#define CUDA_MOE_GROUPED_ROWS 8
/* Rows a decode-path launch takes (eng_matmul_jobs, the fused HC step, the KDA prep, the split
 * latent attention); more go the prefill way. A verification window runs in forwards of at most
 * this many rows (cuda/spec.c), so that each of its rows is computed as a one-token step is. */
#define CUDA_DECODE_T 8
/* Several ranks exchanging through the host: a prefill chunk of at least twice this many rows
 * runs as two halves whose exchanges overlap the other half's work (forward.c's
 * layers_in_halves); below it the exchanges are short and a half's kernels would fill the GPU
 * less well. */
#define CUDA_HALF_ROWS 256
/* The fused HC step's bounds: S * hidden columns split over at most 64 blocks of 256, and the
 * hidden row in shared memory. */
#define CUDA_HC_MAX_COLS (64 * 256)
#define CUDA_HC_MAX_HIDDEN 8192

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
    void *prefill_work;       /* fused: cu_weights.moe_prefill_work (kern_exl3_moe_prefill) */
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
    size_t exl3_work_bytes;  /* the largest kern_exl3_matmul workspace at the plan's chunk rows */
    void *exl3_work;
    void *moe_work;          /* kern_exl3_moe workspace, shared by the fused layers */
    size_t moe_work_bytes;
    void *moe_prefill_work;  /* kern_exl3_moe_prefill workspace at the plan's chunk rows, shared */
    size_t moe_prefill_work_bytes;
    size_t dry_bytes;        /* what a dry run counted */
    int n_dequantized_experts; /* EXL3 expert layers the fused kernel cannot take (run dense) */
    /* The MTP block (architecture.md 2.8; cuda/mtp.c): on one rank where the model has it. */
    int has_mtp;
    cu_lin mtp_eh_proj;
    const float *mtp_enorm, *mtp_hnorm, *mtp_head_norm;
    cu_layer mtp_layer; /* a DSA layer with its indexer and the FFN; no hyper-connections */
    int n_q4, n_q4_kept;     /* dense_q4: matrices requantized, kept (cols not a multiple of 128) */
} cu_weights;

/* dense_q4: the BF16 (or F32) linears (attention, dense and shared MLPs, LM head) requantized to
 * ENG_Q4 on the GPU (dense = q4); the HC products, router, embedding and kv_b stay. */
/* chunk: the prefill chunk's rows, which size the EXL3 products' workspaces. */
glm_status cu_weights_upload(const glm_model *m, int dense_q4, int chunk, cu_weights *w,
                             glm_error *err);
void cu_weights_free(cu_weights *w);
/* 1 when some MoE layer of the model (with mtp, the MTP block's too) has routed experts the
 * fused EXL3 kernels cannot take (BF16 experts, or EXL3 of other shapes or mixed formats), which
 * then run through eng_moe_dense and its scratch buffers (cuda_plan_scratch's dense_experts). */
int cu_weights_dense_experts(const glm_model *m, int mtp);
/* Device bytes the model's weights will take as cu_weights_upload lays them out. */
size_t cu_weights_bytes(const glm_model *m, int dense_q4, int chunk);
/* The MTP block's weights into w's mtp fields (after cu_weights_upload; its allocations join
 * w's), or with dry only their bytes into *bytes; dense_q4 and chunk as for cu_weights_upload.
 * Refuses a block the CUDA forward cannot run. */
glm_status cu_weights_put_mtp(const glm_model *m, int dense_q4, int chunk, cu_weights *w, int dry,
                              size_t *bytes, glm_error *err);

/* The shared activations of one forward chunk (plan.h's layout, one device allocation). */
typedef struct cu_scratch {
    void *base;
    float *X, *c, *u, *y, *flat, *mu, *pre, *post, *comb;
    float *q, *k, *v, *qc, *kc, *vc, *g, *o, *gate, *lo, *beta;
    float *qa, *qd, *kvl, *wk, *ig, *iq, *hw, *qt, *ot, *od;
    int32_t *sel_idx;
    int *sel_count;
    float *fg, *fu, *rlog, *rscratch, *rw, *mh, *mye, *ffn_y; /* mh, mye: dense_experts only */
    int32_t *rids;
    float *part; /* the fused HC step's partial sums: CUDA_DECODE_T x 64 x (mix + 1) */
    float *apart; /* the decode latent attention's partial sums:
                     ENG_ATTEND_PART_FLOATS(H, R, width) */
    float *hfin, *logits;
    int *iq_shift; /* the indexer query's one-part shifts (eng_one_part_rows), T x IH */
} cu_scratch;

/* Op timing for the bench: when on, each op records an event after it on the stream it ran on
 * (what: its label; side: 1 for the side stream), and each fork records one on the side stream
 * where its work may start (what NULL: a starting point, ending no op). in_graph: the step is
 * being captured, so the records become event record nodes of the graph (eng_event_record_node),
 * timed again by every replay. */
#define CUDA_PROF_MAX 2048
typedef struct cu_prof {
    int on, in_graph, n;
    void *ev[CUDA_PROF_MAX];
    const char *what[CUDA_PROF_MAX];
    unsigned char side[CUDA_PROF_MAX];
} cu_prof;

typedef struct cuda_backend {
    const glm_model *m;
    cu_weights w;
    cu_scratch s;
    cuda_plan plan;
    void *stream;
    /* A side stream for work off the step's critical path (decode: the HC Sinkhorn mix, the
     * shared expert): forked from stream by fork, joined back by join; side_pending while a
     * join is owed. */
    void *side, *fork, *join;
    int side_pending;
    /* eng_router_route's count of finished blocks (one unsigned on the device, zero between
     * launches) */
    unsigned *route_done;
    int kv_dtype;  /* eng_cache_dtype of the latent cache */
    int kv_index_dtype; /* of the indexer's key, gate and pool-key caches */
    int context;   /* the most tokens a state may hold */
    int rowwise;   /* 1 while a verification runs: dense products through the one-row GEMV */
    int dense_q4;  /* dense = q4 */
    int dense_experts; /* some MoE layer runs eng_moe_dense (cu_weights_dense_experts): the
                        * scratch holds its buffers */
    int one_part;  /* cuda.gemm = onepart: the BF16 prefill products take one fp16 part */
    int graph_off;  /* cuda.graph_off: decode launched kernel by kernel */
    int chunk;      /* rows a forward chunk holds at most (the plan's; prefills run in chunks) */
    engine_log log; /* where the backend's lines go */
    backend_tap tap; /* diagnostics (backend.h): set, the decode step runs without its graph */
    cu_prof prof;
} cuda_backend;

typedef struct cu_dsa_cache {
    eng_cache latent, idx_key, idx_gate, pool_key;
} cu_dsa_cache;

/* The MTP block's side of a state (cuda/mtp.c): its own DSA cache, row i pairing the main
 * model's final-normed row h_i with token i+1, so it holds n - 1 rows (n: -1 when it lost step,
 * no drafts until a reset); kept: the final-normed rows of the last forward chunk, positions
 * kept_base .. kept_base + kept_n - 1; the rest is the block's input and output rows. */
typedef struct cu_mtp_state {
    cu_dsa_cache cache;
    int n, kept_base, kept_n;
    int mark_n;                 /* n at the mark (-1: out of step there); mark_h: h of its last */
    float *kept, *fresh, *h_in; /* chunk x hidden each (be->chunk) */
    float *cat;                 /* chunk x 2 hidden: [enorm(embed) | hnorm(h)] */
    float *x, *g;               /* chunk x hidden: the residual, the head-normed rows */
    float *zero, *mark_h;       /* hidden */
    int *d_pos, *h_pos;         /* the block's first position (device, pinned) */
    int32_t *d_tok, *h_tok;     /* chunk tokens (device, pinned) */
} cu_mtp_state;

typedef struct cuda_state {
    cuda_backend *be;
    int n, cap, mark_n;
    float **kda_conv, **kda_S;      /* per KDA layer */
    float **mark_conv, **mark_S;    /* saved at the mark, or NULL */
    cu_dsa_cache *dsa;              /* per DSA layer, cap rows */
    float *scores;                  /* ENG_DSA_SCORE_FLOATS(CUDA_SCORE_ROWS, cap / kpool + 1) */
    int *d_pos;                     /* the chunk's first position; [1]: its second half's
                                     * (halves_overlap) */
    int32_t *d_tokens;              /* be->chunk */
    int *h_pos;                     /* pinned, 2 as d_pos */
    int32_t *h_tokens;              /* pinned */
    float *h_logits;                /* pinned staging: h_logits_cap floats, grown on demand */
    size_t h_logits_cap;            /* at first 2 x max(vocab, hidden): a row of logits per rank */
    void *graph;                    /* the decode step, captured at this cap; NULL: none */
    int graph_cap;
    backend_collective coll;
    /* Device collectives (coll.all_gather_device): the gathers of up to CUDA_COLL_DEVICE_ROWS rows
     * land here (cuda_state_staging allocates it, outside any capture) */
    float *d_coll;
    size_t d_coll_floats;
    /* Drafted decoding (spec.c): while verifying, each KDA layer's state after every position of
     * the window and its conv window rows; rewind goes back to one of them. */
    int verifying;
    float **trail_S, **trail_conv;  /* per KDA layer: trail_cap states; K-1+trail_cap rows */
    int trail_cap, trail_base, trail_n; /* the window: positions trail_base+1 .. +trail_n */
    int trail_at;                   /* while verifying: the window row this forward starts at */
    cu_mtp_state mtp;               /* where be->w.has_mtp */
    /* The session's cancel (backend.h's state_set_cancel; NULL: none) and the fences a prefill
     * chunk records after each layer, two in turn, to read it one layer behind the GPU */
    const atomic_int *cancel;
    void *layer_done[2];
    /* Several ranks: a fence after each copy of a chunk's partial sums (or of a half's: [1] the
     * second half's) to the host, which the exchange of them waits on */
    void *copied[2];
    int stopped_at_layer; /* the chunk stopped for the cancel between two layers (set by
                           * cuda_forward_layers; cu_prefill clears it before each chunk) */
} cuda_state;

/* state.c */
cuda_state *cuda_state_new(cuda_backend *be, glm_error *err);
void cuda_state_free(cuda_state *s);
void cuda_state_reset(cuda_state *s);
glm_status cuda_state_mark(cuda_state *s, glm_error *err);
glm_status cuda_state_truncate(cuda_state *s, int n, glm_error *err);
/* The KDA states back to the mark (a prefill canceled at the mark's length: the layers that ran
 * moved them on; DSA rows past the length are rewritten, pool keys remade as pools complete). */
glm_status cuda_state_back_to_mark(cuda_state *s, glm_error *err);
/* Grows the caches to hold need tokens (doubling, up to the context); drops the graph. */
glm_status cuda_state_reserve(cuda_state *s, int need, glm_error *err);
/* Grows the pinned staging (h_logits) to hold what a forward of T rows copies through it: the
 * logits of rows_out rows (split among ranks: also every rank's part padded to the widest, for
 * the gather) and, split, the T x hidden partial sums. Call before queueing work that uses it; drops the decode graph when
 * it moves (the graph copies into it). */
glm_status cuda_state_staging(cuda_state *s, int T, int rows_out, glm_error *err);

/* Bytes of one KDA layer's conv window and recurrent state. */
size_t cuda_conv_bytes(const glm_config *c);
size_t cuda_rec_bytes(const glm_config *c);
/* Bytes of one cached value of an eng_cache_dtype. */
size_t cuda_value_bytes(int dtype);

/* spec.c: drafted decoding's verification windows. */
glm_status cuda_verify(cuda_state *s, const int32_t *tokens, int n, float *logits_all,
                       glm_error *err);
glm_status cuda_state_rewind(cuda_state *s, int n, glm_error *err);
void cuda_trail_free(cuda_state *s);

/* mtp.c: the MTP block's state kept in step with the main one, and its drafts. */
int cuda_mtp_on(const cuda_state *s); /* the weights have it and this is one rank */
glm_status cuda_mtp_new(cuda_state *s, glm_error *err); /* buffers (not the cache) */
void cuda_mtp_free(cuda_state *s);
void cuda_mtp_reset(cuda_state *s);
/* After a main forward of T tokens from pos0 (its streams still in be->s.X): the block's cache
 * catches up to pos0 + T - 1 rows and the chunk's final-normed rows are kept. */
glm_status cuda_mtp_catch_up(cuda_state *s, const int32_t *tokens, int pos0, int T,
                             glm_error *err);
/* The same in two steps: the final-normed rows of be->s.X's T rows into the block's rows from
 * r0 (a verification window stages each of its forwards' rows), then the catch-up over the T
 * staged rows (in groups of CUDA_DECODE_T while be->rowwise). cuda_mtp_stage returns a kernel
 * code (0: queued). */
int cuda_mtp_stage(cuda_state *s, int r0, int T);
glm_status cuda_mtp_catch_up_staged(cuda_state *s, const int32_t *tokens, int pos0, int T,
                                    glm_error *err);
glm_status cuda_mtp_mark(cuda_state *s, glm_error *err);
/* The state went back to n tokens: to the mark (truncate), or inside the window (rewind). */
glm_status cuda_mtp_truncate(cuda_state *s, int n, glm_error *err);
void cuda_mtp_rewind(cuda_state *s, int n);
/* The kept row of position p (device), or NULL. */
const float *cuda_mtp_kept_row(const cuda_state *s, int p);
/* backend.h's mtp_draft: greedy drafts chained through the block; the state is unchanged. */
glm_status cuda_mtp_draft(cuda_state *s, int32_t next, int32_t *out, int max, int *n_out,
                          glm_error *err);

/* snapshot.c: the state as a flat host byte string (backend.h's snapshot ops). */
size_t cuda_snapshot_size(const cuda_state *s);
glm_status cuda_snapshot_save(const cuda_state *s, void *buf, size_t n, glm_error *err);
glm_status cuda_snapshot_load(cuda_state *s, const void *buf, size_t n, glm_error *err);

/* Forwards of at most this many rows keep their exchanges on the GPU when the collectives can
 * (the decode step, which the graph captures, and small verification rows); longer ones go
 * through the host as before, so d_coll stays small. */
#define CUDA_COLL_DEVICE_ROWS 8
/* 1 when a forward of rows rows exchanges on the device (d_coll), 0 through the host. */
int cuda_coll_on_device(const cuda_state *s, int rows);

/* forward.c: one chunk of T <= be->chunk tokens whose ids and first position are already in
 * s->d_tokens / s->d_pos; with want_logits the final rows' logits are on their way into
 * s->h_logits (rows: all T when all_rows, else the last; sync the stream before reading).
 * Returns 0, -1 (a kernel failed: err set) or -2 (the peer). */
int cuda_forward(cuda_state *s, int T, int all_rows, int want_logits, glm_error *err);
/* Its two halves: the embedding and the layers; the final norm and the LM head (logits left on
 * the device in be->s.logits with one rank or device collectives, gathered into s->h_logits
 * through the host otherwise). */
int cuda_forward_layers(cuda_state *s, int T, glm_error *err);
int cuda_forward_head(cuda_state *s, int T, int all_rows, glm_error *err);
/* Layer li alone, as cuda_forward_layers runs it (its last HC update runs layer li + 1's first
 * HC step where that fuses): for benches counting a layer's launches in a capture. */
int cuda_forward_layer(cuda_state *s, int li, int T, glm_error *err);
/* The MTP block over T rows at position *s->mtp.d_pos of its cache: h rows in h (device),
 * tokens in s->mtp.d_tok (zero_first: the first row's embedding is zero, position 0); the
 * head-normed rows into s->mtp.g and with want_logits the last one's logits into be->s.logits. */
int cuda_forward_mtp(cuda_state *s, const float *h, int T, int zero_first, int want_logits,
                     glm_error *err);
/* Decode timing for the bench: runs one eager step at the state's length and writes each
 * layer's microseconds into us[num_layers] (and the head's into *head_us). The state grows. */
glm_status cuda_time_layers(cuda_state *s, int32_t token, float *us, float *head_us,
                            glm_error *err);

/* Records the op profile's next event on the main stream (no-op unless be->prof.on); what NULL:
 * the profile's starting point. cuda_prof_mark_side: on the side stream. */
void cuda_prof_mark(cuda_backend *be, const char *what);
void cuda_prof_mark_side(cuda_backend *be, const char *what);

/* graph.c: one decode step through the captured graph (captured on first use at this cap). */
glm_status cuda_decode_graph(cuda_state *s, glm_error *err);
/* The decode step captured again into a graph of its own (*graph, an eng_graph exec for
 * eng_graph_launch; s->graph untouched) with the op profile's marks as event record nodes: after
 * a replay, be->prof's n events hold each mark's time in that replay (what and side as in eager
 * runs; event 0 the step's start). The graph reads the token and position already on the device;
 * free it with eng_graph_free before the next profile. captured (else NULL): the captured graph
 * as well (a cudaGraph_t to walk; eng_graph_destroy). */
glm_status cuda_decode_graph_profiled(cuda_state *s, void **graph, void **captured,
                                      glm_error *err);

/* The plan of an open CUDA backend (NULL for another backend). */
const cuda_plan *backend_cuda_plan(const engine_backend *b);
/* Decode through the captured graph (on: the default) or kernel by kernel, from the next step
 * (benches compare the two on one open backend). */
void backend_cuda_set_graph(engine_backend *b, int on);

/* Message for a kernel failure. */
glm_status cuda_fail(glm_error *err, const char *what, int code);

#endif
