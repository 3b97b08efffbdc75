/* session.h: the engine's insides beyond glm_tokens.h, for engine/ and its tests: the model,
 * splitting between ranks, cancellation flags, drafts' verification and rewinding. */
#ifndef GLMCHAT_ENGINE_SESSION_H
#define GLMCHAT_ENGINE_SESSION_H

#include <stdint.h>

#include "glm.h"
#include "glm_tokens.h"
#include "model/model.h"

/* The engine's model, for callers that need its config (vocabulary, eos ids). */
const glm_model *engine_model(const glm_engine *e);
/* A reply's budget (engine/generate.c): asked (> 0: the request's max_tokens), else gen's
 * max_new_tokens, else GLM_DEFAULT_MAX_TOKENS; then cut to room, the tokens the context has
 * left. *from says which limit it is. */
int generate_reply_budget(const glm_generation_config *gen, int asked, int room, glm_limit *from);

/* Several ranks: makes e hold rank's part of the model among world ranks (glm_engine_open does
 * this for rank 0 when given peers). Sessions created afterwards run as that rank and exchange
 * through the attached group. Once only: a split engine is refused (open another). More than two
 * ranks run on the cpu backend only. */
glm_status engine_split(glm_engine *e, int rank, int world, glm_error *err);
/* What the two ranks must agree on (tp/rank.h): the model's files, the backend, and the
 * backend's context and cache format as opened (--context, --kv-cache, cuda_kv_index
 * on CUDA; the CPU keeps float32 caches). Needs the backend open. */
struct tp_identity;
glm_status engine_tp_identity(const glm_engine *e, struct tp_identity *id, glm_error *err);
/* The RDMA options of p's rdma_hca and rdma_gid_* (the worker passes them to tp_worker_accept;
 * glm_engine_open to tp_head_connect). out's other fields are left as they are. */
struct tp_rdma_options;
void engine_rdma_options(const glm_engine_params *p, struct tp_rdma_options *out);
/* A worker: the group of its connected head (tp_group_of_worker) the sessions exchange with
 * (NULL: none); the caller keeps it. */
struct tp_group;
void engine_attach_peer(glm_engine *e, struct tp_group *g);

/* A worker's part of the head's KEEP step (its mirror's state of n tokens into its own prompt
 * cache; one it cannot keep is said in its log, and missed at a later restore) and of its
 * RESTORE step (its state of ids[0..n) from its cache, then the ranks' agreement on whether every
 * one restored: reset when any could not). tp/mirror.c. */
glm_status mirror_serve_keep(glm_session *s, int n, glm_error *err);
glm_status mirror_serve_restore(glm_session *s, const int32_t *ids, int n, glm_error *err);

glm_engine *session_engine(const glm_session *s);
/* Whether glm_cancel was called since the last clear (generation clears it as it starts). */
int session_cancel_requested(glm_session *s);
void session_clear_cancel(glm_session *s);
/* The running reply's events (glm_generate sets them as it starts and clears them as it ends;
 * NULL: none), for what the engine says during a step: session_waiting. */
void session_set_events(glm_session *s, glm_event_fn on_event, void *user);
/* A step of s waits for a late rank (who: "the worker at HOST:PORT", waited_s so far), or that
 * rank came (over, after waited_s): a WAITING or WAITED event to the running reply, if any; its
 * answer to cancel cancels the reply. Called on the step's thread. */
void session_waiting(glm_session *s, const char *who, double waited_s, int over);
/* The running reply's prompt is total tokens (0: the prompt is in). When its tokens not yet in
 * the state take more than one of glm_session_feed's pieces: a PROMPT event now with the tokens
 * the state holds, then one after each piece but the last; its answer to cancel cancels the
 * reply. */
void session_prompt(glm_session *s, int total);
/* glm_session_feed without logits, the state marked before each piece of a feed of several
 * where the backend can go back to a mark (state_mark_length): a cancel (between pieces, or
 * within one) keeps the pieces that ran, marked where the next began, so a prompt that shares
 * them continues there. */
glm_status session_feed_marked(glm_session *s, const int32_t *tokens, int n, glm_error *err);
/* After a prompt canceled within its prefill: the pieces the state kept go into the engine's
 * prompt cache (glm_session_keep: memory, and its files where a directory is set), so the same
 * prompt continues from them from another session or process. A state that cannot be kept is
 * said in the engine's log; the reply stays canceled. */
void session_keep_canceled(glm_session *s);

/* Speculative decoding (engine/spec.c). verify: runs n drafted tokens, n x vocab logits into
 * logits_all, rows bit for bit those of one-token feeds; GLM_ERR_UNSUPPORTED where the backend
 * has no verification. rewind: back to a length inside the last verified window; row (vocab
 * floats, or NULL: none kept) is the logits of the new last token, known to the caller. */
glm_status session_verify(glm_session *s, const int32_t *tokens, int n, float *logits_all,
                          glm_error *err);
glm_status session_rewind(glm_session *s, int n, const float *row, glm_error *err);
/* Up to max drafts from the model's MTP layer after the session's tokens and next; 0 when it
 * has none (or the backend cannot run it); -1 when the backend failed running it (err set). */
int session_mtp_draft(glm_session *s, int32_t next, int32_t *out, int max, glm_error *err);
/* The last logits, writable (the generation loop masks and samples in place); NULL when none. */
float *session_logits_mut(glm_session *s);
/* Sets the logits of ids the tokenizer has no text for to -infinity (nothing when none). */
void session_mask_logits(const glm_session *s, float *row);
/* Whether this engine drafts (glm_engine_params.draft) and what the session's drafts
 * achieved so far, per draft position. */
struct spec_stats;
const struct spec_stats *session_spec_stats(const glm_session *s);
/* 1 when glm_session_generate_tokens decodes with drafts here (the engine's draft mode or a
 * session drafter, a backend that verifies, and one rank or a head whose backend verifies over
 * ranks). */
int session_drafting(const glm_session *s);
/* Drafts from outside the engine for this session's replies (NULL: the engine's own mode). */
typedef int (*glm_draft_fn)(const int32_t *ctx, int n, int32_t *out, int max, void *user);
void session_set_drafter(glm_session *s, glm_draft_fn fn, void *user);
/* What a forward of rows tokens counts for when drafting chooses between a window and a plain
 * step (spec.h spec_cost_fn; NULL: the measured seconds): tests pin it to a model's costs. */
typedef double (*glm_cost_fn)(int rows, double measured_s, void *user);
void session_set_forward_cost(glm_session *s, glm_cost_fn fn, void *user);

#endif
