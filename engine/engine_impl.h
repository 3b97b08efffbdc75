/* engine_impl.h: the engine's and a session's insides, shared by engine.c, session.c and
 * tp/mirror.c (two-rank mirroring); nothing outside engine/ includes it. */
#ifndef GLMCHAT_ENGINE_IMPL_H
#define GLMCHAT_ENGINE_IMPL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "backend.h"
#include "log.h"
#include "prefix_cache.h"
#include "session.h"
#include "spec.h"
#include "text/tokenizer.h"
#include "tp/group.h"
#include "tp/split.h"

struct glm_engine {
    glm_model *model;
    engine_backend be;
    glm_engine_params params;
    tok_tokenizer *tok; /* loaded on first use: logits-only models need none */
    uint8_t *untokenizable; /* vocab flags: ids the tokenizer has no text for (padding rows) */
    pthread_mutex_t tok_lock;
    int rank;           /* -1: one rank; else this process's rank of world */
    int world;          /* ranks in the split (2 or more) when rank >= 0 */
    tp_group *tp;       /* the other ranks, when rank >= 0 and they are attached */
    /* Rank 0: one step at a time goes to the worker, with its exchanges (sessions may be used
     * from several threads); slots_used: the worker's mirror states in use (TP_MAX_SLOTS bits). */
    pthread_mutex_t step_lock;
    uint32_t slots_used;
    glm_session *stepping; /* rank 0: the session whose step holds step_lock (its cancel ends a
                            * wait for a late worker: mirror_connect) */
    tp_split_owned split;
    pc_cache *cache;    /* kept prompt states (this rank's part of each), or NULL (off, no snapshots) */
    spec_mode draft;    /* SPEC_OFF unless the backend verifies (copy drafts over ranks where it
                         * verifies over them) */
    char *template_note; /* the model's chat template is another revision (or unreadable), or NULL */
    engine_log log;     /* where the engine's lines go (glm_engine_params.log) */
};

struct glm_session {
    glm_engine *e;
    void *st; /* the backend's state */
    float *logits; /* vocab */
    int has_logits;
    atomic_int cancel;
    int32_t *hist; /* the tokens the state holds, in order */
    int hist_cap;
    int marked;    /* length at the last glm_session_mark */
    spec_stats spec;
    spec_drafter drafter; /* fn set: an outside drafter */
    uint32_t slot;  /* rank 0: the worker's mirror state this session drives */
    int tp_epoch;   /* rank 0: the peer's reconnect count when the mirror last started empty */
    glm_event_fn on_event; /* the running reply's (session_set_events) */
    void *event_user;
    int prompt_total;      /* the running reply's prompt tokens (session_prompt), 0: none */
};

/* Two-rank mirroring (tp/mirror.c). Rank 0 tells the worker each step of a session before
 * running it; the _locked form is for a caller that holds step_lock (a forward and its
 * exchanges with no other session's in between). */
glm_status mirror_step_locked(glm_session *s, tp_step_cmd cmd, int pos, const int32_t *tokens, int n,
                              glm_error *err);
glm_status mirror_step(glm_session *s, tp_step_cmd cmd, int pos, const int32_t *tokens, int n,
                       glm_error *err);
/* Rank 0, after a forward step's own work (done or failed), step_lock held: the workers hear
 * that this rank is no longer on its way to an exchange (tp_group_step_end). */
void mirror_step_end(glm_session *s);
/* Rank 0: a free mirror slot on the worker for a new session, and giving it back. */
glm_status mirror_take_slot(glm_session *s, glm_error *err);
void mirror_release_slot(glm_session *s);
/* A new session of a split engine: its backend state exchanges through the engine's group,
 * and the worker's mirror starts empty. */
glm_status mirror_session_start(glm_session *s, glm_error *err);
/* Rank 0, its own state of ids[0..n) restored from its cache: the workers restore theirs, and
 * the ranks agree (one exchange) whether every one did. 1: all did (always, on a worker or one
 * rank); 0: one could not (the caller resets its own; the others did); -1: the exchange failed
 * (err). */
int mirror_restore(glm_session *s, const int32_t *ids, int n, glm_error *err);
/* The prompt cache of this engine's rank (engine.c): opened, or opened again after a split (its
 * files are the rank's part of each state, apart from another rank's in the same directory). */
glm_status engine_open_cache(glm_engine *e, glm_error *err);
/* Rank 0 at open: connects to p->peer's workers (key, identity, transport). */
glm_status mirror_connect(glm_engine *e, const glm_engine_params *p, glm_error *err);
/* engine.c: loads the tokenizer for generation's mask when the model directory has one. */
glm_status engine_load_mask(glm_engine *e, glm_error *err);

#endif
