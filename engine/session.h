/* session.h: a conversation at the token level: its state (KDA conv and recurrent states, DSA
 * latent and indexer caches), feeding tokens, the last logits, prefix truncation, generation. */
#ifndef GLMCHAT_ENGINE_SESSION_H
#define GLMCHAT_ENGINE_SESSION_H

#include <stdint.h>

#include "glm.h"
#include "model/model.h"

/* The engine's model, for callers that need its config (vocabulary, eos ids). */
const glm_model *glm_engine_model(const glm_engine *e);
/* The backend the engine runs on: "cpu" or "cuda". */
const char *glm_engine_backend_name(const glm_engine *e);
/* The most tokens a session may hold (glm_engine_params.context as resolved at open), and the
 * attention cache's format. */
int glm_engine_context(const glm_engine *e);
glm_kv_cache glm_engine_kv_cache(const glm_engine *e);
/* A reply's budget (engine/generate.c): asked (> 0: the request's max_tokens), else gen's
 * max_new_tokens, else GLM_DEFAULT_MAX_TOKENS; then cut to room, the tokens the context has
 * left. *from says which limit it is. */
int glm_reply_budget(const glm_generation_config *gen, int asked, int room, glm_limit *from);
/* How many tokens r's prompt is, rendered and tokenized as glm_generate would (no model run):
 * what a caller checks against glm_engine_context before saving a message. */
glm_status glm_count_prompt(glm_session *s, const glm_request *r, int *tokens, glm_error *err);

/* Several ranks: makes e hold rank's part of the model among world ranks (glm_engine_open does
 * this for rank 0 when given peers). Sessions created afterwards run as that rank and exchange
 * through the attached group. Once only: a split engine is refused (open another). More than two
 * ranks run on the cpu backend only. */
glm_status glm_engine_split(glm_engine *e, int rank, int world, glm_error *err);
/* What the two ranks must agree on (tp/rank.h): the model's files, the backend, and the
 * backend's context and cache format as opened (--context, --kv-cache, cuda_kv_index
 * on CUDA; the CPU keeps float32 caches). Needs the backend open. */
struct tp_identity;
glm_status glm_engine_tp_identity(const glm_engine *e, struct tp_identity *id, glm_error *err);
/* The RDMA options of p's rdma_hca and rdma_gid_* (the worker passes them to tp_worker_accept;
 * glm_engine_open to tp_head_connect). out's other fields are left as they are. */
struct tp_rdma_options;
void glm_engine_rdma_options(const glm_engine_params *p, struct tp_rdma_options *out);
/* A worker: the group of its connected head (tp_group_of_worker) the sessions exchange with
 * (NULL: none); the caller keeps it. */
struct tp_group;
void glm_engine_attach_peer(glm_engine *e, struct tp_group *g);

int glm_session_length(const glm_session *s);
int glm_session_vocab(const glm_session *s);
void glm_session_reset(glm_session *s);

/* Runs n tokens after what the session holds (a prefill when the session is empty, or a
 * continuation). logits_all: n x vocab floats, or NULL; the last row is always kept and
 * available through glm_session_logits. One token at a time is the decode step. On an error
 * the session is reset (its state would be half-updated); tokens past the engine's context are
 * refused first, the session left as it was. glm_cancel stops a feed with GLM_ERR_CANCELED
 * before its next piece (the session keeps the pieces that ran) or, where the backend polls
 * the flag, before its next layer (the session is reset). */
glm_status glm_session_feed(glm_session *s, const int32_t *tokens, int n, float *logits_all,
                            glm_error *err);
/* Logits of the last token fed, or NULL when none. */
const float *glm_session_logits(const glm_session *s);

/* Remembers the current length: glm_session_truncate can come back to it (prompt reuse keeps
 * the linear-attention state there; attention caches are cut exactly). */
glm_status glm_session_mark(glm_session *s, glm_error *err);
/* Back to n tokens: the current length, 0, or the marked length. */
glm_status glm_session_truncate(glm_session *s, int n, glm_error *err);

/* The engine's tokenizer (MODEL_DIR/tokenizer.json), loaded on first use; NULL + err when the
 * model directory has none or it cannot be read. Shared, read-only. */
struct tok_tokenizer;
const struct tok_tokenizer *glm_engine_tokenizer(glm_engine *e, glm_error *err);
glm_engine *glm_session_engine(const glm_session *s);
/* Whether glm_cancel was called since the last clear (generation clears it as it starts). */
int glm_session_cancel_requested(glm_session *s);
void glm_session_clear_cancel(glm_session *s);

/* The glm_session_length() tokens the state holds, in the order they were fed. */
const int32_t *glm_session_tokens(const glm_session *s);
/* The length at the last glm_session_mark (0 after a reset). */
int glm_session_marked(const glm_session *s);

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

/* Speculative decoding (engine/spec.c). verify: runs n drafted tokens, n x vocab logits into
 * logits_all, rows bit for bit those of one-token feeds; GLM_ERR_UNSUPPORTED where the backend
 * has no verification. rewind: back to a length inside the last verified window; row (vocab
 * floats, or NULL: none kept) is the logits of the new last token, known to the caller. */
glm_status glm_session_verify(glm_session *s, const int32_t *tokens, int n, float *logits_all,
                              glm_error *err);
glm_status glm_session_rewind(glm_session *s, int n, const float *row, glm_error *err);
/* Up to max drafts from the model's MTP layer after the session's tokens and next; 0 when it
 * has none (or the backend cannot run it); -1 when the backend failed running it (err set). */
int glm_session_mtp_draft(glm_session *s, int32_t next, int32_t *out, int max, glm_error *err);
/* The last logits, writable (the generation loop masks and samples in place); NULL when none. */
float *glm_session_logits_mut(glm_session *s);
/* Sets the logits of ids the tokenizer has no text for to -infinity (nothing when none). */
void glm_session_mask_logits(const glm_session *s, float *row);
/* Whether this engine drafts (glm_engine_params.draft) and what the session's drafts
 * achieved so far, per draft position. */
struct spec_stats;
const struct spec_stats *glm_session_spec_stats(const glm_session *s);
/* Drafts from outside the engine for this session's replies (NULL: the engine's own mode). */
typedef int (*glm_draft_fn)(const int32_t *ctx, int n, int32_t *out, int max, void *user);
void glm_session_set_drafter(glm_session *s, glm_draft_fn fn, void *user);
/* What a forward of rows tokens counts for when drafting chooses between a window and a plain
 * step (spec.h spec_cost_fn; NULL: the measured seconds): tests pin it to a model's costs. */
typedef double (*glm_cost_fn)(int rows, double measured_s, void *user);
void glm_session_set_forward_cost(glm_session *s, glm_cost_fn fn, void *user);

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

#endif
