/* glm_tokens.h: glmchat's engine below a chat, for the commands that need it (logits, bench,
 * tokenize, render, check-model, quantize, ...): ids, logits, prompt states, text, model files. */
#ifndef GLMCHAT_GLM_TOKENS_H
#define GLMCHAT_GLM_TOKENS_H

#include <stddef.h>
#include <stdint.h>

#include "glm.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- the engine ---------------------------------------------------------------------------- */

/* The backend the engine runs on ("cpu" or "cuda"), the attention cache's format as opened and
 * the model's vocabulary (the width of a row of logits). */
const char *glm_engine_backend_name(const glm_engine *e);
glm_kv_cache glm_engine_kv_cache(const glm_engine *e);
int glm_engine_vocab(const glm_engine *e);
/* What one decode step of the engine's model moves through memory (bytes, summed over its
 * ops) and its matrix products' FLOPs, with context tokens cached in float32 as the CPU backend
 * keeps them (model/traffic.h's count): the floor and ceiling `glmchat bench` measures against. */
void glm_engine_step_traffic(const glm_engine *e, int context, double *bytes, double *flops);

/* ---- a session's tokens ---------------------------------------------------------------------- */

/* The tokens the session holds and the model's vocabulary; reset empties it. */
int glm_session_length(const glm_session *s);
int glm_session_vocab(const glm_session *s);
void glm_session_reset(glm_session *s);

/* Runs n tokens after what the session holds (a prefill when the session is empty, or a
 * continuation). logits_all: n x vocab floats, or NULL; the last row is always kept and
 * available through glm_session_logits. One token at a time is the decode step. On an error
 * the session is reset (its state would be half-updated); tokens past the engine's context are
 * refused first, the session left as it was. glm_cancel stops a feed with GLM_ERR_CANCELED
 * before its next piece (the session keeps the pieces that ran) or before its next layer (the
 * session is reset, unless it marked the state at the piece's start and the backend can go
 * back there: then it keeps the pieces before it, as session_feed_marked arranges). */
glm_status glm_session_feed(glm_session *s, const int32_t *tokens, int n, float *logits_all,
                            glm_error *err);
/* Logits of the last token fed, or NULL when none. */
const float *glm_session_logits(const glm_session *s);

/* Remembers the current length: glm_session_truncate can come back to it (prompt reuse keeps
 * the linear-attention state there; attention caches are cut exactly). */
glm_status glm_session_mark(glm_session *s, glm_error *err);
/* Back to n tokens: the current length, 0, or the marked length. */
glm_status glm_session_truncate(glm_session *s, int n, glm_error *err);

/* The glm_session_length() tokens the state holds, in the order they were fed. */
const int32_t *glm_session_tokens(const glm_session *s);
/* The length at the last glm_session_mark (0 after a reset). */
int glm_session_marked(const glm_session *s);

/* The greedy pick of n logits: the largest, the lowest id among equal ones. */
int32_t glm_argmax(const float *logits, int n);

/* Whether t is one of the n_eos end ids. */
int glm_token_is_eos(int32_t t, const int *eos, int n_eos);

/* Called with each generated token; return nonzero to stop after it. */
typedef int (*glm_token_fn)(int32_t token, void *user);

/* Feeds prompt (may be empty when the session already holds tokens), then samples up to
 * max_new tokens, stopping after an eos id (which is reported to on_token too), when on_token
 * returns nonzero, or on glm_cancel. *n_out: tokens generated. Ids that MODEL_DIR/tokenizer.json
 * has no text for are never sampled (loaded here when it exists; none masked without one), so
 * the reply depends on the model directory only, not on whether the tokenizer was asked for. */
glm_status glm_session_generate_tokens(glm_session *s, const int32_t *prompt, int n_prompt,
                                       const glm_sampling *sampling, const int *eos, int n_eos,
                                       int max_new, glm_token_fn on_token, void *user, int *n_out,
                                       glm_error *err);

/* ---- prompt states ---------------------------------------------------------------------------- */

/* Prompt states are marked and kept at multiples of this many tokens: the CPU backend's KDA
 * chunk grid (cpu/kda.c), so resuming from one and prefilling the rest gives the bits of a full
 * prefill. */
#define GLM_KEEP_ALIGN 16

/* Prompt reuse across conversations: the engine keeps states by the tokens they hold (memory
 * budget, least recently used out first; optionally a directory too). keep: saves the session's
 * state at its current length (nothing when the cache is off or already holds those tokens). */
glm_status glm_session_keep(glm_session *s, glm_error *err);
/* Restores the longest kept state holding a prefix of ids[0..n) longer than min_len and at most
 * max_len tokens; returns its length (the session's new length, marked), or 0 (unchanged). */
int glm_session_restore(glm_session *s, const int32_t *ids, int n, int min_len, int max_len);

typedef struct glm_cache_stats {
    int on, entries, in_memory;
    size_t bytes, budget;
    int64_t hits, evictions, disk_writes, disk_loads, refused_files;
    uint64_t disk_bytes, disk_budget; /* of the files in prompt_cache_dir */
    int64_t disk_evictions, deleted_files; /* files deleted for the budget, damaged files deleted */
} glm_cache_stats;
void glm_engine_cache_stats(glm_engine *e, glm_cache_stats *out);
/* Files refused and writes that failed, each naming the file and the reason, oldest first. */
int glm_engine_cache_n_notes(glm_engine *e);
const char *glm_engine_cache_note(glm_engine *e, int i);
/* Everything the engine has to tell the user, oldest first, each said once by the app: the model's
 * chat template when it is not a revision glmchat renders (from open), then the cache's notes. */
int glm_engine_n_notes(glm_engine *e);
const char *glm_engine_note(glm_engine *e, int i);

/* ---- the tokenizer ------------------------------------------------------------------------ */

/* A loaded tokenizer.json (byte-level BPE, encoding and decoding as Hugging Face tokenizers
 * does); read-only once loaded: many threads may use one at once. */
typedef struct tok_tokenizer glm_tokenizer;

/* The engine's (MODEL_DIR/tokenizer.json), loaded on first use; NULL + err when the model
 * directory has none or it cannot be read. Shared: the engine frees it. */
const glm_tokenizer *glm_engine_tokenizer(glm_engine *e, glm_error *err);
/* A tokenizer.json of one's own; NULL + err (naming the file) when unreadable or unsupported. */
glm_tokenizer *glm_tokenizer_load(const char *path, glm_error *err);
void glm_tokenizer_free(glm_tokenizer *t);
/* 1 + the largest id. */
int32_t glm_tokenizer_vocab(const glm_tokenizer *t);
/* One token's bytes (*len set), or NULL when the id has none. */
const char *glm_token_bytes(const glm_tokenizer *t, int32_t id, size_t *len);
/* The id of a token written exactly so (added or in the vocabulary), or -1. */
int32_t glm_token_id(const glm_tokenizer *t, const char *s, size_t len);
/* text[0..len)'s ids into *ids (malloc'd, *n of them; free() them). Added tokens in the text
 * are matched literally; invalid UTF-8 is repaired first (one U+FFFD per maximal invalid
 * subpart), glmchat's one policy for bytes. */
glm_status glm_tokenize(const glm_tokenizer *t, const char *text, size_t len, int32_t **ids,
                        size_t *n, glm_error *err);
/* The raw bytes of ids[0..n) into *text (malloc'd, NUL-terminated, *len bytes; free() it): no
 * repair, byte-exact; an id outside the vocabulary is an error naming it. */
glm_status glm_detokenize(const glm_tokenizer *t, const int32_t *ids, size_t n, char **text,
                          size_t *len, glm_error *err);

/* ---- the chat template ---------------------------------------------------------------------- */

/* The exact prompt an OpenAI-style request (JSON text: messages, tools, reasoning_effort,
 * enable_thinking, clear_thinking) renders to in GLM-5's chat template, as glm_generate renders
 * its glm_request; *prompt malloc'd, NUL-terminated, *n bytes. A request that is not JSON is
 * GLM_ERR_FORMAT with the parser's message; one the template cannot render, GLM_ERR_ARG with
 * the reason. */
glm_status glm_render_request(const char *json, size_t len, char **prompt, size_t *n,
                              glm_error *err);
/* The same for the engine's request: the prompt glm_generate feeds for r (*prompt malloc'd,
 * NUL-terminated, *n bytes); GLM_ERR_ARG with the reason when the template cannot render it. */
glm_status glm_render_prompt(const glm_request *r, char **prompt, size_t *n, glm_error *err);
/* A sentence for the user when model_dir's own chat template (chat_template.jinja or
 * tokenizer_config.json's) is not a revision glmchat renders, or cannot be checked, into buf:
 * 1 when there is one, 0 when none is due (no template, or a known one). */
int glm_template_notice(const char *model_dir, char *buf, size_t n);

/* ---- model directories (the developer commands) ------------------------------------------------ */

/* mkmodel: a random-weight GLM-5.3-Flash model directory in the real checkpoint layout (config,
 * safetensors, a byte-level tokenizer.json), for tests and benchmarks. */
typedef enum glm_mkmodel_dtype { GLM_MKMODEL_F32 = 0, GLM_MKMODEL_BF16 } glm_mkmodel_dtype;
typedef struct glm_mkmodel_params {
    const char *out_dir;
    const char *preset; /* "tiny", "small", "real-N" (N layers of the real shapes) */
    uint64_t seed;
    int dtype_set;      /* 0: the preset's (F32 for tiny, BF16 otherwise) */
    glm_mkmodel_dtype dtype;
    int64_t shard_bytes; /* 0: one file up to 4 GiB, else shards of 4 GiB */
    const char *like;    /* NULL, or a published layout: "exl3-published", "fp8-official" */
} glm_mkmodel_params;

/* Lists the --like layouts, for usage messages. */
const char *glm_mkmodel_likes(void);

/* Lists the preset names, one per line, for usage messages. */
const char *glm_mkmodel_presets(void);

glm_status glm_mkmodel(const glm_mkmodel_params *p, glm_error *err);

/* check-model: a downloaded checkpoint checked without loading it: the weight index against the
 * shard files (missing, truncated or extra), every header, every tensor config.json needs with
 * its dtype and shape, the tokenizer's special tokens, the chat template's revision; a summary
 * and the memory plan (one rank, each of two; this machine's GPU and a DGX Spark). */
typedef struct glm_check_model_params {
    const char *dir;
    void (*report)(void *user, const char *line);   /* each line of the report, no newline */
    void (*progress)(void *user, const char *text); /* what is being read, for a terminal; ""
                                                       when done. NULL: none */
    void (*problem)(void *user, const char *text);  /* each problem, in order, after the report */
    void *user;
} glm_check_model_params;
/* The number of problems found: 0 when the checkpoint is complete. */
int glm_check_model(const glm_check_model_params *p);

/* quantize: EXL3-quantizes a checkpoint's routed experts (mlp.experts.N.{gate,up,down}_proj,
 * F32/BF16/F16; with all_linear its other 2-D linears, not embeddings or the head) into the EXL3
 * checkpoint's names and layout (<module>.trellis, .suh, .svh, the codebook marker) in
 * out/model.safetensors; other tensors copied; config.json gains a quantization_config; the
 * directory's other files are copied. Weights whose sides are not multiples of 128 are copied
 * and told to log. */
typedef enum glm_exl3_codebook { GLM_EXL3_MCG = 0, GLM_EXL3_MUL1, GLM_EXL3_3INST } glm_exl3_codebook;
/* "mcg", "mul1", "3inst". */
const char *glm_exl3_codebook_name(glm_exl3_codebook cb);
typedef struct glm_quantize_params {
    const char *in, *out; /* checkpoint directories (out made when missing; not in itself) */
    int bits;             /* per weight, 1..8 */
    glm_exl3_codebook codebook;
    int all_linear;
    int threads;          /* the tile search's, 1..64 */
    unsigned long long seed; /* of the sign vectors */
    glm_log_fn log;       /* a line for each weight copied unquantized, and why; NULL: none */
    void *log_user;
} glm_quantize_params;
typedef struct glm_quantize_result {
    size_t quantized, tensors; /* weights quantized, tensors in the input */
    double mean_error;         /* mean relative squared error of the quantized weights */
    char path[4096];           /* the safetensors file written */
} glm_quantize_result;
glm_status glm_quantize_dir(const glm_quantize_params *p, glm_quantize_result *r, glm_error *err);

/* dump-tensor: what a tensor of a checkpoint was written as. */
typedef struct glm_tensor_info {
    int ndim;
    int64_t shape[8];
    char dtype[16]; /* as stored ("BF16", "F8_E4M3", ...), "EXL3" for a quantized module */
} glm_tensor_info;
/* Writes the tensor name of model_dir's checkpoint to out_path as float32 little-endian, in the
 * Hugging Face orientation: FP8 times its weight_scale_inv blocks; an EXL3 module (named as
 * <module>.weight or <module>) dequantized [out, in]. Errors name the model, the tensor or the
 * file. */
glm_status glm_dump_tensor(const char *model_dir, const char *name, const char *out_path,
                           glm_tensor_info *info, glm_error *err);

/* ---- the reply parser ------------------------------------------------------------------------ */

/* GLM's generated text in, glm_events out as the text arrives (reasoning, content, tool calls
 * typed by tools' schemas), as glm_generate reports a reply: for a source of replies other than
 * the model (recorded ones, in tests). */
typedef struct rp_parser glm_reply_parser;
typedef enum glm_reply_end {
    GLM_REPLY_END_TOKEN = 0, /* the model ended it: DONE "stop" or "tool_calls" */
    GLM_REPLY_LENGTH,        /* the budget ran out: DONE "length" */
    GLM_REPLY_CANCELED,      /* DONE "canceled" */
} glm_reply_end;
glm_reply_parser *glm_reply_parser_new(const glm_tool *tools, int n_tools, int think,
                                       glm_event_fn on_event, void *user, glm_error *err);
glm_status glm_reply_parser_feed(glm_reply_parser *p, const char *text, size_t len, glm_error *err);
glm_status glm_reply_parser_finish(glm_reply_parser *p, glm_reply_end why, glm_error *err);
void glm_reply_parser_free(glm_reply_parser *p);

#ifdef __cplusplus
}
#endif

#endif
