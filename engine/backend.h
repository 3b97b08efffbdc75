/* backend.h: what a session asks of a backend (engine/cpu, engine/cuda): a conversation state that
 * prefills and decodes tokens, marks and truncates, and saves to or loads from a flat snapshot. */
#ifndef GLMCHAT_ENGINE_BACKEND_H
#define GLMCHAT_ENGINE_BACKEND_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "glm.h"
#include "log.h"
#include "model/model.h"

/* Several ranks (architecture.md 5): each rank holds its part of the heads, FFN features and
 * vocabulary (tp_part_of in tp/split.h: n / world each, the first n % world ranks one more).
 * all_reduce sums n host floats over the ranks in rank order 0..world-1 (identical bits on all);
 * all_gather writes rank 0's n floats, then rank 1's, ... into all (world * n floats). Both
 * return GLM_OK or set err. world 0 is taken as 2 (the CUDA backend's two ranks). */
typedef struct backend_collective {
    glm_status (*all_reduce)(void *user, float *buf, size_t n, glm_error *err);
    glm_status (*all_gather)(void *user, const float *mine, float *all, size_t n, glm_error *err);
    void *user;
    int rank, world;
    /* Optional (the nccl transport; NULL otherwise): all_gather on device memory, queued on stream
     * (a cudaStream_t) and not waited for, so a decode graph may capture it; and the wait for a
     * stream holding such gathers, bounded and stopped when a rank fails (a plain stream sync
     * would wait forever on a gather whose peer is gone). */
    glm_status (*all_gather_device)(void *user, const float *d_mine, float *d_all, size_t n,
                                    void *stream, glm_error *err);
    glm_status (*device_wait)(void *user, void *stream, glm_error *err);
} backend_collective;

/* Cache value types, as kv_format codes: 0 f32, 1 bf16, 2 fp8 (the CUDA backend's numbering), the
 * latent cache's in bits 0-7, the indexer's in bits 8-11; tp_kv_format_name (tp/protocol.h) reads
 * them back for messages. */
enum { BACKEND_KV_F32 = 0, BACKEND_KV_BF16 = 1, BACKEND_KV_FP8 = 2 };
#define BACKEND_KV(latent, indexer) ((uint32_t)(latent) | (uint32_t)(indexer) << 8)
/* Or'ed into a cache_format: the dense linears were requantized to 4 bits at load (--dense
 * q4), which changes every partial sum the ranks exchange. */
#define BACKEND_DENSE_Q4 ((uint32_t)1 << 16)
/* Or'ed in by the CUDA backend: its prefill chunk (a power of two from 128 rows) as
 * log2(rows / 128) + 1 in bits 12-15 (up to 128 x 2^14 rows); two ranks run the same chunks (each
 * exchange carries a chunk's rows), so they must agree on it. 0 there: no chunk (the CPU
 * backend). */
#define BACKEND_CHUNK_SHIFT 12
#define BACKEND_CHUNK_BITS 4
/* Or'ed in by both backends where the dense BF16 prefill products take one fp16 part of each
 * input (cuda_gemm = onepart: the CUDA backend runs it, the CPU backend emulates it). */
#define BACKEND_ONE_PART ((uint32_t)1 << 29)
/* Or'ed in by the CPU backend for the variants of backend_settings (fp8_rule, q4_group,
 * q4_f32_scale), so states made under one are never loaded under another. */
#define BACKEND_VARIANT(rule, group, f32_scale) \
    ((uint32_t)((rule) & 1) << 17 | (uint32_t)((group) & 0x3FF) << 18 | (uint32_t)((f32_scale) & 1) << 28)

/* A diagnostic tap on the forward pass (tests/gpu/test_cuda_emulate's trace; NULL in every other
 * use): each layer of a one-rank forward hands fn host copies of its steps' values, T rows from
 * position pos0, per_row values a row. The CUDA backend waits for each copy and runs its decode
 * step kernel by kernel while a tap is set (no graph): slow, and meant only for diagnostics. */
typedef enum backend_tap_what {
    BACKEND_TAP_ATTN_IN = 0,   /* floats: the attention's input (HC collapse, input norm), T x D */
    BACKEND_TAP_SELECT,        /* int32: a DSA layer's selected cache rows, ascending, -1 past
                                * the row's count; T x (index_topk + index_kpool - 1) */
    BACKEND_TAP_SCORES,        /* floats: the indexer's pool scores, pool p's at p, NaN where
                                * a row scores none (p past its pools, or all its pools taken);
                                * T x a width of at least (pos0 + T) / index_kpool */
    BACKEND_TAP_CACHE_IN,      /* floats: a DSA layer's cache rows before rounding to the cache's
                                * format: the latent, then (with an indexer) its key and gate,
                                * T x (kv_lora_rank [+ 2 index_head_dim]) */
    BACKEND_TAP_CACHE,         /* floats: the same rows as stored, read back in f32 */
    BACKEND_TAP_POOL_KEY,      /* floats: the indexer's pool keys this forward completed, as
                                * stored: pos0 and T count pools here, T x index_head_dim */
    BACKEND_TAP_ATTN,          /* floats: the attention's output, T x D */
    BACKEND_TAP_FFN_IN,        /* floats: the FFN's input (HC collapse, post norm), T x D */
    BACKEND_TAP_ROUTER,        /* floats: a MoE layer's router logits, T x n_routed_experts */
    BACKEND_TAP_EXPERTS,       /* int32: the experts it chose, ascending, T x num_experts_per_tok */
    BACKEND_TAP_FFN,           /* floats: the FFN's output (routed and shared experts), T x D */
    BACKEND_TAP_COUNT
} backend_tap_what;

typedef struct backend_tap {
    void (*fn)(void *user, int layer, backend_tap_what what, int pos0, int T, const void *vals,
               int per_row);
    void *user;
} backend_tap;

/* The tokens of a prefill piece for a backend without prefill_rows. */
#define BACKEND_FEED_PIECE 1024

/* A backend's functions. `impl` is the backend (its weights, pools, streams), `state` one
 * conversation's caches; both are opaque to the session. */
typedef struct backend_ops {
    const char *name; /* "cpu", "cuda" */
    void *(*state_new)(void *impl, glm_error *err);
    void (*state_free)(void *state);
    /* NULL coll: one rank (the default). */
    void (*state_set_collective)(void *state, const backend_collective *coll);
    /* The flag (the session's cancel) a prefill polls between layers (the CPU backend before each
     * layer of more than one token; the CUDA one in chunks past its decode forms' rows, on one
     * rank a layer behind the GPU): once set, the prefill stops there with GLM_ERR_CANCELED; the
     * state is then back at its length before the call when it was marked there and the backend
     * has state_mark_length (the CPU one), else it must be reset. Several ranks agree where to
     * stop through one more exchange a layer (the sum of every rank's flag: a worker's stays 0),
     * made whether or not a flag was given. May be NULL (one rank then runs a prefill to its end;
     * the session still stops between pieces). */
    void (*state_set_cancel)(void *state, const atomic_int *flag);
    void (*state_reset)(void *state);
    int (*state_length)(const void *state);
    /* Saves the linear-attention state at the current length, so truncate can come back. */
    glm_status (*state_mark)(void *state, glm_error *err);
    /* The length the state was last marked at (-1: none; also after a prefill that failed or was
     * canceled in an exchange, whose state must be reset); NULL where a canceled prefill always
     * needs a reset (the CUDA backend: its going back to the mark has not run on a GPU yet). */
    int (*state_mark_length)(const void *state);
    /* Back to n tokens: n == length (nothing), 0 (reset) or the marked length. */
    glm_status (*state_truncate)(void *state, int n, glm_error *err);
    /* Runs n tokens after the state's length and appends them. logits_out (host floats): n x vocab
     * when all_rows, else vocab for the last token; may be NULL. */
    glm_status (*prefill)(void *impl, void *state, const int32_t *tokens, int n, float *logits_out,
                          int all_rows, glm_error *err);
    /* The rows one prefill chunk runs at once (the CUDA memory plan's chunk): the session feeds
     * a prompt in pieces of whole chunks, aligned to multiples of it, so each runs at the size
     * the backend was planned for (a cancel is read between its layers: state_set_cancel).
     * NULL: pieces of BACKEND_FEED_PIECE tokens (the CPU backend);
     * a feed that asks for every row's logits takes those too (their host staging). */
    int (*prefill_rows)(const void *impl);
    /* Snapshots for prompt reuse across conversations and its disk tier: the whole state at its
     * current length as a flat byte string in host memory, loadable into any state of the same
     * backend and model. save: buf of snapshot_size bytes. */
    size_t (*snapshot_size)(const void *state);
    glm_status (*snapshot_save)(const void *state, void *buf, size_t n, glm_error *err);
    glm_status (*snapshot_load)(void *state, const void *buf, size_t n, glm_error *err);
    void (*close)(void *impl);
    /* BACKEND_KV(latent cache, indexer cache) of the attention caches as opened, with
     * BACKEND_DENSE_Q4 when the dense weights were requantized (required): the two ranks of a
     * split must agree on it, with the context (tp_identity). */
    uint32_t (*cache_format)(const void *impl);
    /* Speculative decoding (NULL where a backend has none: the session then decodes one token at
     * a time). verify runs n drafted tokens after the state's length: logits_all gets n x vocab
     * host floats, each row bit for bit what a one-token prefill would give there; each
     * position's state is kept so state_rewind can go back to a length inside that window (its
     * first token or later), until the next prefill, truncate or reset. */
    glm_status (*verify)(void *impl, void *state, const int32_t *tokens, int n, float *logits_all,
                         glm_error *err);
    glm_status (*state_rewind)(void *state, int n, glm_error *err);
    /* 1 when verify also runs with several ranks (each rank's state_set_collective), so drafting
     * may run over ranks (the head mirrors its windows and rewinds to the workers); 0: one rank */
    int verifies_over_ranks;
    /* Up to max drafts from the model's MTP layer to follow the state's tokens and then next
     * (*n_out 0: none, e.g. the model has no MTP layer); the state is unchanged. May be NULL. */
    glm_status (*mtp_draft)(void *impl, void *state, int32_t next, int32_t *out, int max, int *n_out,
                            glm_error *err);
} backend_ops;

/* What a conversation state may hold and how: the engine's params, else the defaults
 * (backend_resolve_settings). */
typedef struct backend_settings {
    int context;           /* the most tokens a state may hold (the session refuses more) */
    glm_kv_cache kv_cache; /* the DSA latent cache's format; never DEFAULT */
    glm_dense_format dense; /* the dense linears' format; never DEFAULT */
    int draft_rows;        /* rows of the verification windows drafting runs; 0: no drafting */
    /* Variants no backend runs by default, for the accuracy tool and the tests (CPU backend
     * only; 0 everywhere else): the fp8 scale rule (numfmt_fp8_rule: 1 exact, not a power of
     * two), q4's values a scale (0: 32) and its scale in float instead of fp16. */
    int fp8_rule;
    int q4_group;
    int q4_f32_scale;
    int verbose;           /* 1: the backend logs its plan at open (GLM_LOG_INFO) */
    glm_cuda_params cuda;  /* the CUDA backend's switches, as given (DEFAULTs kept) */
    engine_log log;        /* where the backend's lines go */
    backend_tap tap;       /* diagnostics only (fn NULL: none) */
} backend_settings;

typedef struct engine_backend {
    const backend_ops *ops;
    void *impl;
    backend_settings settings; /* as the backend was opened with them */
} engine_backend;

/* Opens the backend p->backend names (auto: cuda where a GPU is present, else cpu) over m,
 * whose weights it reads as they are at this call (split them for two ranks first), with the
 * settings p or the defaults give. */
glm_status backend_open(const glm_model *m, const glm_engine_params *p, engine_backend *out,
                        glm_error *err);

/* The settings for backend `which` (CPU or CUDA) over m: p's fields (p may be NULL), else the
 * model's max_position_embeddings (4096 when it gives none), the backend's own cache format
 * (fp8 on CUDA, f32 on the CPU) and the weights as stored. A value outside its enum is an
 * error naming the field. */
/* Whether the CUDA backend runs its BF16 prefill products against one fp16 part of each input
 * under gemm: onepart, named or as the default (the CPU backend emulates it only when named). */
int backend_cuda_one_part(glm_cuda_gemm gemm);

/* Whether a prefill stops for its session's cancel (flag; NULL: none) before its next layer:
 * with several ranks (coll->all_reduce) they agree through one exchange of the sum of their flags
 * (a worker's stays 0), so all stop at the same layer. 1: stop, 0: go on, -2: the exchange
 * failed (err set). */
int backend_cancel_agreed(const backend_collective *coll, const atomic_int *flag, glm_error *err);

/* Each enum of p in its range, the context not negative: GLM_OK, or GLM_ERR_ARG naming the
 * field (p NULL: GLM_OK). */
glm_status backend_check_params(const glm_engine_params *p, glm_error *err);
glm_status backend_resolve_settings(const glm_model *m, const glm_engine_params *p,
                                    glm_backend which, backend_settings *out, glm_error *err);
void backend_close(engine_backend *b);

/* What every backend's prefill checks first: at least one token, each an id of c's vocabulary. */
glm_status backend_check_tokens(const glm_config *c, const int32_t *tokens, int n, glm_error *err);

/* The two backends (backend_open picks). The CUDA one says why when it cannot run here.
 * backend_open_cpu takes the defaults (the model's window, f32, the weights as stored);
 * backend_open_cpu_with s as given (the formats CUDA stores emulated: rounded cache rows, q4
 * weights in a float copy of the dense linears, kept until close); backend_open_cuda the
 * defaults (backend_resolve_settings without params); backend_open_cuda_with s as given. */
glm_status backend_open_cpu(const glm_model *m, int n_threads, engine_backend *out, glm_error *err);
glm_status backend_open_cpu_with(const glm_model *m, int n_threads, const backend_settings *s,
                                 engine_backend *out, glm_error *err);
glm_status backend_open_cuda(const glm_model *m, engine_backend *out, glm_error *err);
glm_status backend_open_cuda_with(const glm_model *m, const backend_settings *s, engine_backend *out,
                                  glm_error *err);

#endif
