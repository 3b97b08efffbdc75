/* glm.h: the public header of glmchat's GLM-5.3-Flash engine for chats (glm_tokens.h adds the
 * token level): opaque handles, plain structs, errors as values. Nothing here includes CUDA. */
#ifndef GLMCHAT_GLM_H
#define GLMCHAT_GLM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- errors ---------------------------------------------------------------------------- */

typedef enum glm_status {
    GLM_OK = 0,
    GLM_ERR_IO,          /* a file could not be read or written */
    GLM_ERR_FORMAT,      /* a file's contents are not what they must be */
    GLM_ERR_UNSUPPORTED, /* valid, but this engine cannot honour it */
    GLM_ERR_NOMEM,
    GLM_ERR_ARG,         /* a caller's argument is out of range */
    GLM_ERR_BACKEND,     /* the GPU or a kernel failed */
    GLM_ERR_PEER,        /* the other rank failed, refused us or stopped answering */
    GLM_ERR_CANCELED,
} glm_status;

/* Filled by every function that can fail: a sentence a user can act on. */
typedef struct glm_error {
    glm_status status;
    char message[1024];
} glm_error;

/* Sets err (when non-NULL) and returns status; printf-style. */
glm_status glm_error_set(glm_error *err, glm_status status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* ---- requests ---------------------------------------------------------------------------- */

typedef enum glm_role { GLM_ROLE_SYSTEM, GLM_ROLE_USER, GLM_ROLE_ASSISTANT, GLM_ROLE_TOOL } glm_role;

typedef struct glm_tool_call {
    const char *id;             /* call id, may be NULL */
    const char *name;
    const char *arguments_json; /* a JSON object */
} glm_tool_call;

typedef struct glm_message {
    glm_role role;
    const char *content;            /* visible text (may be NULL) */
    const char *reasoning;          /* assistant: kept reasoning, byte-exact (NULL: none) */
    const glm_tool_call *tool_calls; /* assistant */
    int n_tool_calls;
    const char *tool_call_id;       /* tool: the call this result answers */
} glm_message;

typedef struct glm_tool {
    const char *name;
    const char *description;
    const char *parameters_json; /* JSON schema of the arguments */
} glm_tool;

typedef enum glm_effort { GLM_EFFORT_MAX = 0, GLM_EFFORT_HIGH, GLM_EFFORT_LOW } glm_effort;

/* temperature, top_p and top_k below 0 mean the model's own (its generation_config.json; a
 * do_sample false there is greedy), else temperature 1, top_p 1, top_k 0. */
typedef struct glm_sampling {
    float temperature; /* 0: greedy */
    float top_p;       /* 1: off */
    int top_k;         /* 0: off */
    float min_p;       /* 0: off */
    uint64_t seed;
    int max_tokens;    /* 0: the model's generation_config max_new_tokens, else GLM_DEFAULT_MAX_TOKENS */
} glm_sampling;

/* The reply budget when neither the request nor generation_config.json's max_new_tokens gives
 * one (what the public recipe serves); every budget is cut to what the context has left. */
#define GLM_DEFAULT_MAX_TOKENS 32768

/* Which limit a reply's budget came from (glm_stats.limit_from): a "length" finish stopped there. */
typedef enum glm_limit {
    GLM_LIMIT_UNKNOWN = 0, /* not told (a reply source other than the engine) */
    GLM_LIMIT_REQUEST,     /* glm_sampling.max_tokens */
    GLM_LIMIT_MODEL,       /* generation_config.json's max_new_tokens */
    GLM_LIMIT_DEFAULT,     /* GLM_DEFAULT_MAX_TOKENS */
    GLM_LIMIT_CONTEXT,     /* the room the context window had left */
} glm_limit;

typedef struct glm_request {
    const glm_message *messages;
    int n_messages;
    const glm_tool *tools;
    int n_tools;
    glm_sampling sampling;
    int think;          /* 1: thinking on */
    glm_effort effort;
    /* 1: earlier turns' reasoning (assistant turns up to the last user message) is rendered as
     * an empty think block, as the checkpoint's template does with clear_thinking; 0 (the
     * default, as the public recipe serves it, and what keeps prompt reuse exact): kept. */
    int clear_thinking;
} glm_request;

/* ---- events streamed back while a reply is generated -------------------------------------- */

typedef enum glm_event_type {
    GLM_EV_REASONING_DELTA,
    GLM_EV_CONTENT_DELTA,
    GLM_EV_TOOL_CALL_BEGIN, /* name */
    GLM_EV_TOOL_ARG_DELTA,  /* text: the arguments' JSON as it is built; the deltas add up to TOOL_CALL_END's */
    GLM_EV_TOOL_CALL_END,   /* name, text: arguments as a JSON object typed by the tool's schema */
    GLM_EV_STATS,
    GLM_EV_DONE,            /* finish: "stop", "length", "tool_calls", "canceled" */
    GLM_EV_ERROR,           /* text: the message */
    GLM_EV_WAITING,         /* text: who the reply waits for ("the worker at HOST:PORT"), a rank
                               alive and working but late to its part of a step; wait_s: how long
                               the step has waited there so far. Once a late exchange, then WAITED */
    GLM_EV_WAITED,          /* text: who came; wait_s: how long the step waited for it in all.
                               WAITING and WAITED come from inside a step (the engine's step lock
                               held): the callback must not block and may call no engine function
                               but glm_cancel; returning nonzero cancels the reply as elsewhere */
    GLM_EV_PROMPT,          /* prompt_done of the prompt's prompt_total tokens are in the state
                               (the reused ones count), for a prompt whose new tokens run in more
                               than one piece (a chunk on CUDA, 1,024 tokens on the CPU): before
                               its first piece and after each but the last, between steps */
} glm_event_type;

typedef struct glm_stats {
    int prompt_tokens;
    int reused_tokens;      /* prompt tokens served from a kept state */
    int kept_tokens;        /* a reply canceled within its prompt's prefill: the prompt's first
                               tokens the session holds (the pieces that ran), which the same
                               prompt sent again goes on from; 0 otherwise */
    int generated_tokens;
    double ttft_s;          /* time to first token */
    double prefill_tok_s;
    double decode_tok_s;
    int drafting;           /* 1: the reply decoded with drafts (draft = copy or mtp), and: */
    int draft_windows;      /*   the verification windows it ran, */
    int drafts_proposed;    /*   the drafts they checked, */
    int drafts_accepted;    /*   and those the model agreed with (a token each without a step) */
    int context_window;     /* the tokens a conversation may hold (the engine's context) */
    int max_tokens;         /* the reply's budget (its limit, after the cut to the context) */
    glm_limit limit_from;   /* where that budget came from */
} glm_stats;

typedef struct glm_event {
    glm_event_type type;
    const char *text; /* not NUL-terminated in general: use len */
    size_t len;
    const char *name;   /* tool name for TOOL_CALL_* */
    const char *call_id;
    const char *finish; /* DONE */
    glm_stats stats;    /* STATS and DONE */
    double wait_s;      /* WAITING, WAITED */
    int prompt_done, prompt_total; /* PROMPT */
} glm_event;

/* Return nonzero to cancel the reply. */
typedef int (*glm_event_fn)(const glm_event *ev, void *user);

/* ---- engine and sessions ---------------------------------------------------------------- */

typedef enum glm_backend { GLM_BACKEND_AUTO = 0, GLM_BACKEND_CPU, GLM_BACKEND_CUDA } glm_backend;

/* The DSA latent cache's format (the CUDA backend also keeps the indexer caches in it unless
 * glm_cuda_params.kv_index says otherwise; the CPU backend keeps every DSA cache in it). The CPU
 * backend emulates fp8 and bf16 value for value: its rows hold what the CUDA cache gives back. */
typedef enum glm_kv_cache {
    GLM_KV_CACHE_DEFAULT = 0, /* the backend's own: fp8 on CUDA, f32 on CPU */
    GLM_KV_CACHE_FP8,
    GLM_KV_CACHE_BF16,
    GLM_KV_CACHE_F32,
} glm_kv_cache;
/* The settings' spellings and bounds, shared by the flags, the config file and the environment:
 * the cache formats in glm_kv_cache order after DEFAULT, the largest context, and the largest
 * prompt-cache budget in MiB. */
#define GLM_KV_CACHE_CHOICES "fp8|bf16|f32"
/* The dense linears' format (attention, dense and shared MLPs, the LM head; not the embedding,
 * kv_b, the hyper-connections, the router or the experts): as stored, or requantized at load to
 * signed 4-bit codes with an fp16 scale per 32 inputs (matrices whose width is a multiple of
 * 128 and stored as BF16 or F32). Both backends do q4 (the CPU one to the same values). */
typedef enum glm_dense_format {
    GLM_DENSE_DEFAULT = 0, /* bf16: as stored */
    GLM_DENSE_BF16,
    GLM_DENSE_Q4,
} glm_dense_format;
#define GLM_DENSE_CHOICES "bf16|q4"
#define GLM_MAX_CONTEXT (1LL << 30)
#define GLM_MAX_CACHE_MB 16777216LL

/* Speculative decoding (the values match the config's off|copy|mtp after DEFAULT). */
typedef enum glm_draft {
    GLM_DRAFT_DEFAULT = 0, /* off */
    GLM_DRAFT_OFF,
    GLM_DRAFT_COPY,        /* copy drafts (prompt lookup) */
    GLM_DRAFT_MTP,         /* the model's MTP layer */
} glm_draft;
#define GLM_DRAFT_CHOICES "off|copy|mtp"

/* The dense prefill products' algorithm on CUDA (cuBLASLt). */
typedef enum glm_cuda_gemm {
    GLM_CUDA_GEMM_DEFAULT = 0, /* onepart on the CUDA backend (the form a Spark's tensor rate asks
                                * for: bench/BENCHMARKS.md); the CPU backend runs its exact
                                * products, emulating onepart only when it is named */
    GLM_CUDA_GEMM_FIXED,       /* exact: one fixed algorithm a weight shape (row bits do not depend
                                * on T), BF16 weights in two scaled fp16 parts of each input (three
                                * bf16 parts for one over ENG_GEMM_HALF_BYTES as fp16, an LM head) */
    GLM_CUDA_GEMM_SHOW,        /* fixed, and each shape's choice logged (GLM_LOG_DEBUG) */
    GLM_CUDA_GEMM_NOSPLIT,     /* fixed algorithms without split-K (a second choice to compare) */
    GLM_CUDA_GEMM_CUBLAS,      /* cublasGemmEx's own choice: comparison only, row bits depend on T */
    GLM_CUDA_GEMM_THREE,       /* fixed, every BF16 weight in three bf16 parts (to compare forms) */
    GLM_CUDA_GEMM_ONEPART,     /* fixed, the BF16 weights that take two fp16 parts take one (the
                                * hi part): half the tensor work, each input rounded to fp16 after
                                * its row's power-of-two scale; lossy (under the fp8 cache's loss),
                                * so the CPU backend emulates it (the one cuda switch it reads) */
} glm_cuda_gemm;
#define GLM_CUDA_GEMM_CHOICES "fixed|show|nosplit|cublas|three|onepart"

/* Switches of the CUDA backend that developers flip to compare kernels; all zero: the defaults.
 * The CPU backend ignores them but gemm = onepart (named, not the default) and chunk, which say
 * what it emulates. Those that change what the ranks compute (kv_index) are part of
 * the two-rank handshake. The kernels' process-wide switches (pdl_off, gemm) follow the engine
 * opened last. */
typedef struct glm_cuda_params {
    glm_kv_cache kv_index;   /* the indexer caches' format; DEFAULT: the latent cache's */
    glm_cuda_gemm gemm;
    int graph_off;           /* 1: decode launches kernel by kernel, without the captured graph */
    int pdl_off;             /* 1: plain stream-ordered launches, no programmatic dependent launch */
    /* Rows of a prefill chunk: a power of two from GLM_CUDA_CHUNK_LEAST to GLM_CUDA_CHUNK_LIMIT;
     * 0: the memory plan's choice (the most its room allows, up to its cap). A row's logits do
     * not depend on it (tests/gpu/test_cuda_engine.c compares them bit for bit); two ranks must
     * agree on it (part of the two-rank handshake). */
    int chunk;
} glm_cuda_params;
#define GLM_CUDA_CHUNK_LEAST 128
#define GLM_CUDA_CHUNK_LIMIT 16384

/* How the engine and its kernels speak: the application decides where the words go (the
 * engine writes nothing to stdout or stderr). msg is one line without a newline, valid for the
 * call only. May be called from the engine's threads, one call at a time per engine. */
typedef enum glm_log_level {
    GLM_LOG_ERROR = 0, /* a failure, also returned as an error */
    GLM_LOG_WARN,      /* a note the user should see: the model's template, a refused cache file */
    GLM_LOG_INFO,      /* what was asked for with verbose: the settings and the memory plan */
    GLM_LOG_DEBUG,     /* developer traces asked for by a switch (GLM_CUDA_GEMM_SHOW) */
} glm_log_level;
typedef void (*glm_log_fn)(void *user, int level, const char *msg);

/* Every field's zero is its default (glm_engine_default_params gives that struct): the engine
 * reads no environment variable and no file but the model's; the application resolves its
 * flags, GLMCHAT_* variables and config file into these fields. */
typedef struct glm_engine_params {
    const char *model_dir;
    glm_backend backend;
    const char *peer;      /* "HOST:PORT" of a worker (rank 1), or NULL for one rank */
    const char *transport; /* "rdma" or "tcp"; NULL: rdma where a device exists, else tcp */
    const char *peer_key_file; /* the key shared with the worker (64 hex digits, mode 0600); NULL:
                                  none, which a worker accepts only when it has none either */
    int n_threads;         /* CPU threads; 0: one per core */
    /* Prompt reuse across conversations: bytes of memory for kept prompt states; 0: an eighth
     * of the RAM; < 0: off. */
    int64_t prompt_cache_bytes;
    /* A directory where kept states are saved too, found again after a restart; NULL: memory
     * only. */
    const char *prompt_cache_dir;
    glm_draft draft;
    /* Bytes the kept-state files in prompt_cache_dir may take, the least recently used deleted
     * first: 0: 4 GiB; < 0: none written (the files there are still read). */
    int64_t prompt_cache_disk_bytes;
    /* The most tokens a conversation state may hold, prompt and reply, on either backend (a
     * longer prompt is refused, a reply stops there): 0: the model's max_position_embeddings. */
    int context;
    /* DEFAULT: the backend's own (fp8 on CUDA, f32 on the CPU, which emulates fp8 and bf16 too). */
    glm_kv_cache kv_cache;
    /* DEFAULT: as stored. */
    glm_dense_format dense;
    /* The RDMA transport (two ranks): the devices to use, comma-separated (NULL: every device
     * whose port is ACTIVE with a RoCE v2 IPv4 GID), and the GID table entry rdma_gid_index
     * when rdma_gid_given is 1 (0: scan for the RoCE v2 IPv4 entry). */
    const char *rdma_hca;
    int rdma_gid_given;
    int rdma_gid_index;
    /* 1: the resolved settings (and on CUDA the memory plan) logged at GLM_LOG_INFO at open. */
    int verbose;
    glm_cuda_params cuda;
    /* Where the engine's messages go (NULL: nowhere; errors still come back as glm_error). */
    glm_log_fn log;
    void *log_user;
} glm_engine_params;

/* The defaults (every field zero), for callers that fill the struct field by field. */
glm_engine_params glm_engine_default_params(void);

typedef struct glm_engine glm_engine;
typedef struct glm_session glm_session;

glm_engine *glm_engine_open(const glm_engine_params *p, glm_error *err);
void glm_engine_close(glm_engine *e);

glm_session *glm_session_new(glm_engine *e, glm_error *err);
/* Generates one reply to r, calling on_event as text arrives; returns GLM_OK or an error code
 * (also sent as an ERROR event). Cancellation is GLM_ERR_CANCELED with a DONE("canceled"). */
glm_status glm_generate(glm_session *s, const glm_request *r, glm_event_fn on_event, void *user,
                        glm_error *err);
/* Safe from any thread or a signal handler: the engine checks between steps. */
void glm_cancel(glm_session *s);
void glm_session_free(glm_session *s);

/* The most tokens a session may hold (glm_engine_params.context as resolved at open). */
int glm_engine_context(const glm_engine *e);
/* How many tokens r's prompt is, rendered and tokenized as glm_generate would (no model run):
 * what a caller checks against glm_engine_context before saving a message. */
glm_status glm_count_prompt(glm_session *s, const glm_request *r, int *tokens, glm_error *err);

/* ---- a worker rank ------------------------------------------------------------------------ */

/* Writes a new random key for the two ranks to path (mode 0600), never over an existing file. */
glm_status glm_worker_new_key(const char *path, glm_error *err);
/* The check glm_worker_serve makes of its address before the model's slow load: key_file's key
 * is readable (NULL: none) and, without a key, listen is a loopback address. */
glm_status glm_worker_check(const char *listen, const char *key_file, glm_error *err);

typedef struct glm_worker_params {
    glm_engine_params engine; /* the model and its settings; engine.transport: the one to accept
                                 (NULL: whatever the head asks for) */
    const char *listen;       /* HOST:PORT to listen on */
    const char *key_file;     /* the key heads must prove they hold; NULL: none (loopback only) */
    const char *dump_logits;  /* a file for the float32 logits of every step (tests), or NULL */
    /* Called once listening, with the port (e.g. to write a port file, then to take the signals
     * that stop the worker); an error stops the worker before any head is served. */
    glm_status (*on_listen)(void *user, int port, glm_error *err);
    void *on_listen_user;
    /* Asked between steps and connections: nonzero stops the worker (safe to set from a signal
     * handler's flag). NULL: never. */
    int (*stop)(void *user);
    void *stop_user;
    /* The worker's own lines (a head connected, left, failed), one at a time, without a prefix;
     * the engine's lines go to engine.log. */
    glm_log_fn log;
    void *log_user;
} glm_worker_params;

/* Runs a worker rank: opens the engine as rank 1 of 2 (a head may ask for another split), listens
 * and serves one head at a time, a mirror state per head conversation, until stop says so
 * (GLM_OK) or the engine, the key or the listener fails (the error). */
glm_status glm_worker_serve(const glm_worker_params *p, glm_error *err);

/* 1 when the CUDA backend is built in and a GPU is present. */
int glm_cuda_available(void);

const char *glm_version(void);

#ifdef __cplusplus
}
#endif

#endif
