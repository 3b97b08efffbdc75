/* plan.h: the CUDA backend's memory plan: bytes of weights, one session's caches at the context
 * window, and the forward's scratch, from the config alone; checked against the device at open. */
#ifndef GLMCHAT_ENGINE_CUDA_PLAN_H
#define GLMCHAT_ENGINE_CUDA_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "glm.h"
#include "model/config.h"
#include "model/traffic.h"

/* Cache dtypes (kernels/engine.h eng_cache_dtype): bytes per value 4, 2, 1 (+ a row scale); the
 * numbers of model/traffic.h's glm_cache_format, whose glm_cache_row_bytes sizes a row. */
enum { CUDA_KV_F32 = GLM_CACHE_F32, CUDA_KV_BF16 = GLM_CACHE_BF16, CUDA_KV_FP8 = GLM_CACHE_FP8 };

/* Queries of one indexer launch (eng_dsa_select), which bounds the score scratch: 64, so a prefill
 * chunk takes a quarter of the launches 16 did; a query's selection depends on its scores alone,
 * and its scores not on the launch, so the rows are the same at any count. */
#define CUDA_SCORE_ROWS 64

typedef struct cuda_plan {
    int ranks, context, kv_dtype, kv_index_dtype, chunk; /* latent; indexer keys, gates, pools */
    int chunk_given;       /* 1: the chunk was set (cuda_chunk), 0: cuda_plan_pick_chunk chose it */
    size_t weights;        /* device bytes of this rank's weights */
    size_t kda_state;      /* one session: KDA conv windows + recurrent states, and their mark */
    size_t dsa_per_token;  /* one session: DSA cache bytes per token (all DSA layers) */
    size_t score_per_token; /* the indexer's score scratch, per token of the context */
    size_t dsa_fixed;      /* the DSA caches' part that the context does not scale (the
                            * indexer's selection work area) */
    size_t dsa_cache;      /* (dsa_per_token + score_per_token) * context + dsa_fixed */
    size_t scratch;        /* the forward chunk's activations and gemm (device) */
    size_t gemm;           /* of which eng_gemm's: workspace, the larger of the two forms'
                            * splits of a chunk, the fp16 copy of the largest weight it takes
                            * (three-part weights' copies: inside the larger split's room) */
    size_t host_pinned;    /* one session's logits staging at open (host; counts on unified
                            * memory): grown on demand to rows x vocab for all-rows prefills */
    /* drafting (cuda_plan_drafting; 0 when off) */
    int window_rows;       /* rows of a verification window */
    size_t windows;        /* one session: every KDA layer's states after each row of a window */
    size_t mtp_per_token;  /* draft = mtp: the MTP layer's cache bytes per token */
    size_t mtp_cache;      /* its cache for the context and its rows for a chunk */
    size_t total;          /* device bytes: weights + kda_state + dsa_cache + scratch, and
                            * windows + mtp_cache when drafting */
} cuda_plan;

/* A config as one of two ranks holds it (tp_split_model's halving). Kept as it was so the two-rank
 * path's arithmetic does not move; cuda_plan_rank_config_of(full, r, 2) equals it for every config
 * whose split counts are even (the real one: test_cuda_plan checks). */
void cuda_plan_rank_config(const glm_config *full, glm_config *rank);

/* The most ranks the CUDA backend splits a model among (tp/protocol.h's TP_MAX_RANKS). */
#define CUDA_PLAN_MAX_RANKS 16

/* Rank r's share of n heads, features or vocabulary entries among world ranks: n / world each,
 * the first n % world ranks one more, in rank order (tp_part_of's rule, written here so the CUDA
 * side needs no CPU split code and test_cuda_plan can hold the two against each other). */
typedef struct cuda_plan_part {
    int64_t start, count;
} cuda_plan_part;
cuda_plan_part cuda_plan_part_of(int64_t n, int rank, int world);

/* The config rank r of world holds after tp_split_model_ranks: its KDA and MLA heads, dense and
 * expert features; vocab_size stays whole. */
void cuda_plan_rank_config_of(const glm_config *full, int rank, int world, glm_config *out);

/* The number of ranks a split LM head of head_rows rows (of vocab) belongs to: 1 when whole, else
 * the smallest world 2..CUDA_PLAN_MAX_RANKS one of whose parts has that many rows; 0: none. */
int cuda_plan_ranks_of(int64_t vocab, int64_t head_rows);

/* Bytes of one rank's weights as glmchat lays them out, for the full (unsplit) config: the
 * resident count of model/traffic.c (every expert, the whole embedding), dense linears in dense,
 * routed experts EXL3 of expert_bits; 0 when traffic.c refuses the arguments. */
size_t cuda_plan_weights_estimate(const glm_config *full, int ranks, glm_traffic_dense dense, int expert_bits);

/* Rows of logits the forward's scratch holds (T x vocab floats: 10.1 GB at 16,384 rows of GLM's
 * vocabulary, 0.16 GB at 256): an ordinary prefill wants the last row's, a verification window
 * CUDA_DECODE_T rows; a chunk's every row (all-rows prefills, for tools) runs the LM head in
 * pieces of at most this many rows. */
#define CUDA_HEAD_ROWS 256
/* The pieces of an all-rows head over T rows: ceil(T / CUDA_HEAD_ROWS) of nearly equal rows, in
 * order; piece i starts at row *r0 and has *n rows (each at least CUDA_HEAD_ROWS / 2 when T is
 * larger than CUDA_HEAD_ROWS). */
int cuda_plan_head_pieces(int T);
void cuda_plan_head_piece(int T, int i, int *r0, int *n);

/* One rank's chunk-sized prefill workspaces beside its weights, from its config (a rank's: the
 * split shapes): the grouped EXL3 experts' (kern_exl3_moe_prefill_bytes) where the model's routed
 * experts are EXL3, else 0. What the backend counts from the uploaded tensors themselves
 * (cu_weights_bytes), for plans made without them (glmchat check-model). */
size_t cuda_plan_workspace_estimate(const glm_config *rank, int chunk);

/* Bytes of the forward's scratch for chunk tokens; offsets (optional) receives each buffer's
 * offset in the order of cu_scratch's members (backend_cuda.c binds them in that order;
 * CUDA_SCRATCH_BUFFERS of them). dense_experts: some MoE layer (the MTP block's included) runs its
 * routed experts through eng_moe_dense (BF16 experts, or EXL3 ones the fused kernels cannot take,
 * dequantized), whose per-pair buffers (2.15 + 1.07 GB at 16,384 rows of the real shapes) are
 * then held; 0: every one runs the fused EXL3 kernels, which keep their own workspace. */
#define CUDA_SCRATCH_BUFFERS 46
#define CUDA_SCRATCH_ATTEND_PART 42 /* the decode latent attention's partial sums */
#define CUDA_SCRATCH_LOGITS 44      /* the chunk's logits (at most CUDA_HEAD_ROWS rows) */
#define CUDA_SCRATCH_IQ_SHIFT 45    /* the indexer query's one-part shifts (the last buffer) */
size_t cuda_plan_scratch(const glm_config *c, int chunk, int dense_experts, size_t *offsets);

/* The prefill chunk the plan picks by itself: the largest power of two from CUDA_CHUNK_CAP down
 * to CUDA_CHUNK_FLOOR whose whole plan fits the device's room (the routed experts' weights are
 * decoded once a chunk per expert, so a larger chunk spreads that over more rows; the scratch
 * and the experts' workspace grow linearly with it). The cap: past 16,384 rows the decode is
 * already spread thin (the experts' time a row fell 2.54 -> 2.15 -> 1.96 us from 4,096 to 8,192
 * to 16,384 rows on the H200) while the scratch doubles again; the kernels take at most 65,535
 * rows a launch. Where no room is known: CUDA_CHUNK_UNKNOWN. */
#define CUDA_CHUNK_CAP 16384
#define CUDA_CHUNK_FLOOR 256
#define CUDA_CHUNK_UNKNOWN 1024
/* Device bytes of the whole plan (weights with their chunk-sized workspaces, caches, scratch,
 * drafting) at a chunk of `chunk` rows. */
typedef size_t (*cuda_plan_need_fn)(void *ctx, int chunk);
/* given > 0: that chunk (the plan check then says whether it fits); else the pick above, with
 * `available` device bytes when known is 1. The reserve cuda_plan_check keeps is kept here too. */
int cuda_plan_pick_chunk(int given, int known, size_t available, cuda_plan_need_fn need, void *ctx);

/* Fills the plan for a rank config. weights: the uploaded bytes (workspaces included). */
void cuda_plan_make(const glm_config *c, int ranks, int context, int kv_dtype, int kv_index_dtype,
                    int chunk, int dense_experts, size_t weights, cuda_plan *p);

/* Drafting's part of a plan cuda_plan_make filled: the verification windows of window_rows rows
 * (0: no drafting) and, with mtp, the MTP layer's cache and rows; added to the total. */
void cuda_plan_drafting(cuda_plan *p, const glm_config *c, int window_rows, int mtp);

/* Checks the plan against `available` device bytes (free memory, or on a unified-memory machine
 * its share of the 128 GB less a margin). GLM_OK, or GLM_ERR_NOMEM with a message that names
 * the figures and the largest context that would fit. */
glm_status cuda_plan_check(const cuda_plan *p, size_t available, glm_error *err);

/* One line: "weights 85.1 GiB, caches ... ; total ...". */
void cuda_plan_describe(const cuda_plan *p, char *buf, size_t n);

/* Bytes a unified-memory machine (DGX Spark, 128 GB) lets the backend use: 128 GB less 8 GiB for
 * the system and the host side of the process. */
size_t cuda_plan_unified_limit(void);

const char *cuda_kv_name(int kv_dtype);

/* This machine's GPU (engine/cuda/probe.c): its free and total bytes and whether it shares the
 * host's memory (a DGX Spark's GB10); -1 when glmchat is built without CUDA or finds no GPU. */
int glm_cuda_memory(size_t *free_bytes, size_t *total_bytes, int *integrated);

#endif
