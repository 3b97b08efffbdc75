/* session.c: glm_session (a conversation's token-level state): feed, truncate, keep and
 * restore prompt states, drafts' verification, a token generation loop, cancellation. */
#include "engine_impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sampler.h"

/* The tokens of the next prefill piece at position pos with left to go: up to the next multiple
 * of the backend's chunk (backend_ops.prefill_rows), or BACKEND_FEED_PIECE tokens; all_rows (every
 * row's logits, a diagnostic feed) keeps BACKEND_FEED_PIECE: the backend stages a vocabulary of
 * logits a row in pinned host memory, 1.2 GB at 1,024 rows of the real vocabulary, and a chunk of
 * 8,192 rows would take 8x that. */
static int feed_piece(const engine_backend *be, int pos, int left, int all_rows)
{
    int rows = !all_rows && be->ops->prefill_rows ? be->ops->prefill_rows(be->impl) : 0;
    int piece = rows > 0 ? rows - pos % rows : BACKEND_FEED_PIECE;
    return left < piece ? left : piece;
}

/* Refuses n more tokens after `at` when the state would then hold more than the context. */
static glm_status check_room(const glm_session *s, int at, int n, glm_error *err)
{
    int ctx = s->e->be.settings.context;
    if (n <= ctx - at)
        return GLM_OK;
    return glm_error_set(err, GLM_ERR_ARG, "%d more tokens after the %d held would make %lld, over "
                         "the context of %d tokens (--context, context in the config or "
                         "GLMCHAT_CONTEXT): start a new conversation or raise it", n, at,
                         (long long)at + n, ctx);
}

glm_session *glm_session_new(glm_engine *e, glm_error *err)
{
    glm_session *s = calloc(1, sizeof *s);
    if (!s) {
        glm_error_set(err, GLM_ERR_NOMEM, "out of memory creating a session");
        return NULL;
    }
    s->e = e;
    if (e->rank == 0 && mirror_take_slot(s, err) != GLM_OK) {
        free(s);
        return NULL;
    }
    s->logits = malloc((size_t)e->model->cfg.vocab_size * sizeof *s->logits);
    s->st = s->logits ? e->be.ops->state_new(e->be.impl, err) : NULL;
    if (!s->st) {
        if (!s->logits)
            glm_error_set(err, GLM_ERR_NOMEM, "out of memory creating a session");
        glm_session_free(s);
        return NULL;
    }
    atomic_init(&s->cancel, 0);
    if (e->be.ops->state_set_cancel)
        e->be.ops->state_set_cancel(s->st, &s->cancel);
    if (e->rank >= 0 && mirror_session_start(s, err) != GLM_OK) {
        glm_session_free(s);
        return NULL;
    }
    return s;
}

void glm_session_free(glm_session *s)
{
    if (!s)
        return;
    if (s->e->rank == 0)
        mirror_release_slot(s);
    if (s->st)
        s->e->be.ops->state_free(s->st);
    free(s->logits);
    free(s->hist);
    free(s);
}

void glm_cancel(glm_session *s)
{
    if (s)
        atomic_store(&s->cancel, 1);
}

int glm_session_length(const glm_session *s)
{
    return s->e->be.ops->state_length(s->st);
}

int glm_session_vocab(const glm_session *s)
{
    return s->e->model->cfg.vocab_size;
}

void glm_session_reset(glm_session *s)
{
    /* a failed send marks the session failed: the next forward reports it */
    mirror_step(s, TP_STEP_RESET, 0, NULL, 0, NULL);
    s->e->be.ops->state_reset(s->st);
    s->has_logits = 0;
    s->marked = 0;
}

int session_cancel_requested(glm_session *s)
{
    return atomic_load(&s->cancel);
}

void session_clear_cancel(glm_session *s)
{
    atomic_store(&s->cancel, 0);
}

void session_set_events(glm_session *s, glm_event_fn on_event, void *user)
{
    s->on_event = on_event;
    s->event_user = user;
}

/* A PROMPT event with the tokens the state holds of the running reply's prompt, while some are
 * still to run. */
static void prompt_progress(glm_session *s)
{
    if (!s->on_event || s->prompt_total <= 0 || glm_session_length(s) >= s->prompt_total)
        return;
    glm_event ev = {.type = GLM_EV_PROMPT, .prompt_done = glm_session_length(s),
                    .prompt_total = s->prompt_total};
    if (s->on_event(&ev, s->event_user))
        atomic_store(&s->cancel, 1); /* the feed stops before its next piece */
}

void session_prompt(glm_session *s, int total)
{
    int held = glm_session_length(s), left = total - held;
    /* a prompt whose new tokens run as one piece says nothing: its first token is its progress */
    s->prompt_total = left > feed_piece(&s->e->be, held, left, 0) ? total : 0;
    prompt_progress(s);
}

void session_waiting(glm_session *s, const char *who, double waited_s, int over)
{
    if (!s->on_event)
        return;
    glm_event ev = {.type = over ? GLM_EV_WAITED : GLM_EV_WAITING, .text = who, .len = strlen(who),
                    .wait_s = waited_s};
    if (s->on_event(&ev, s->event_user))
        atomic_store(&s->cancel, 1); /* the wait asks at its next heartbeat */
}

glm_engine *session_engine(const glm_session *s)
{
    return s->e;
}

const int32_t *glm_session_tokens(const glm_session *s)
{
    return s->hist;
}

int glm_session_marked(const glm_session *s)
{
    return s->marked;
}

static glm_status remember_tokens(glm_session *s, const int32_t *tokens, int n, int at, glm_error *err)
{
    if (at + n > s->hist_cap) {
        int cap = s->hist_cap ? s->hist_cap : 256;
        while (cap < at + n)
            cap *= 2;
        int32_t *h = realloc(s->hist, (size_t)cap * sizeof *h);
        if (!h)
            return glm_error_set(err, GLM_ERR_NOMEM, "out of memory keeping the session's tokens");
        s->hist = h;
        s->hist_cap = cap;
    }
    memcpy(s->hist + at, tokens, (size_t)n * sizeof *tokens);
    return GLM_OK;
}

/* glm_cancel between two pieces of a feed: the session holds the pieces that ran and the last
 * one's logits (reuse_prefix continues from them where they were marked: session_feed_marked). */
static glm_status stop_feed(glm_session *s, int done, int n, int all_rows, glm_error *err)
{
    if (done > 0)
        s->has_logits = !all_rows; /* all_rows: the row went to the caller's buffer */
    return glm_error_set(err, GLM_ERR_CANCELED, "the prompt was canceled after %d of its %d tokens",
                         done, n);
}

/* Whether a prefill canceled within its piece left the state at len, the piece's start: the
 * backend goes back there when it was marked there (backend.h), else the state must be reset. */
static int back_at_mark(const glm_session *s, int len)
{
    const backend_ops *ops = s->e->be.ops;
    return len > 0 && s->marked == len && ops->state_mark_length &&
           ops->state_mark_length(s->st) == len && glm_session_length(s) == len;
}

/* The pieces of a feed; mark_pieces: the state marked before each piece of a feed of several,
 * so that a cancel keeps the pieces that ran, marked where it stopped. */
static glm_status feed(glm_session *s, const int32_t *tokens, int n, float *logits_all,
                       int mark_pieces, glm_error *err)
{
    int V = s->e->model->cfg.vocab_size;
    int at = glm_session_length(s);
    glm_status kept = check_room(s, at, n, err);
    if (kept)
        return kept;
    kept = n > 0 ? remember_tokens(s, tokens, n, at, err) : GLM_OK;
    if (kept)
        return kept;
    /* a backend that cannot go back to a mark within a piece resets on a cancel anyway */
    mark_pieces = mark_pieces && s->e->be.ops->state_mark_length &&
                  n > feed_piece(&s->e->be, at, n, logits_all != NULL);
    for (int done = 0; done < n;) {
        if (mark_pieces) { /* also where a cancel before this piece leaves the state */
            glm_status st = glm_session_mark(s, err);
            if (st) {
                glm_session_reset(s);
                return st;
            }
        }
        if (atomic_load(&s->cancel))
            return stop_feed(s, done, n, logits_all != NULL, err);
        int piece = feed_piece(&s->e->be, at + done, n - done, logits_all != NULL);
        float *out = logits_all ? logits_all + (size_t)done * V : s->logits;
        /* rank 0: the step and its exchanges, with no other session's in between */
        if (s->e->rank == 0) {
            pthread_mutex_lock(&s->e->step_lock);
            s->e->stepping = s;
        }
        glm_status st = mirror_step_locked(s, logits_all ? TP_STEP_FORWARD_ALL : TP_STEP_FORWARD,
                                         at + done, tokens + done, piece, err);
        if (st == GLM_OK)
            st = s->e->be.ops->prefill(s->e->be.impl, s->st, tokens + done, piece, out,
                                          logits_all != NULL, err);
        if (s->e->rank == 0) {
            mirror_step_end(s); /* done or failed: a worker waiting on this rank stops waiting */
            s->e->stepping = NULL;
            pthread_mutex_unlock(&s->e->step_lock);
        }
        if (st) {
            if (st == GLM_ERR_CANCELED && back_at_mark(s, at + done)) {
                s->marked = at + done; /* the pieces before this one stay, as stop_feed keeps them */
                if (done > 0)
                    s->has_logits = logits_all == NULL;
                return st; /* err: where within the piece it stopped */
            }
            glm_session_reset(s);
            return st;
        }
        done += piece;
        prompt_progress(s);
        if (logits_all && done == n)
            memcpy(s->logits, logits_all + (size_t)(n - 1) * V, (size_t)V * sizeof *s->logits);
    }
    if (n > 0)
        s->has_logits = 1;
    return GLM_OK;
}

glm_status glm_session_feed(glm_session *s, const int32_t *tokens, int n, float *logits_all,
                            glm_error *err)
{
    return feed(s, tokens, n, logits_all, 0, err);
}

void session_keep_canceled(glm_session *s)
{
    glm_error err = {0};
    int n = glm_session_length(s);
    if (n > 0 && glm_session_keep(s, &err) != GLM_OK)
        engine_logf(&s->e->log, GLM_LOG_WARN, "the %d tokens a canceled prompt ran could not be "
                    "kept for reuse: %s", n, err.message);
}

glm_status session_feed_marked(glm_session *s, const int32_t *tokens, int n, glm_error *err)
{
    return feed(s, tokens, n, NULL, 1, err);
}

const float *glm_session_logits(const glm_session *s)
{
    return s->has_logits ? s->logits : NULL;
}

glm_status glm_session_mark(glm_session *s, glm_error *err)
{
    glm_status st = mirror_step(s, TP_STEP_MARK, glm_session_length(s), NULL, 0, err);
    if (st == GLM_OK)
        st = s->e->be.ops->state_mark(s->st, err);
    if (!st)
        s->marked = glm_session_length(s);
    return st;
}

glm_status glm_session_truncate(glm_session *s, int n, glm_error *err)
{
    int before = glm_session_length(s);
    glm_status st = n == before ? GLM_OK : mirror_step(s, TP_STEP_TRUNCATE, n, NULL, 0, err);
    if (st == GLM_OK)
        st = s->e->be.ops->state_truncate(s->st, n, err);
    if (!st && n != before)
        s->has_logits = 0; /* the logits of token n-1 are not kept; feed again to get them */
    if (!st && n < s->marked)
        s->marked = 0;
    return st;
}

glm_status glm_session_keep(glm_session *s, glm_error *err)
{
    pc_cache *c = s->e->cache;
    int n = glm_session_length(s);
    if (!c || n == 0)
        return GLM_OK;
    /* the workers keep their parts too (each skips one it holds: a restarted worker may hold
     * none of this rank's) */
    glm_status st = mirror_step(s, TP_STEP_KEEP, n, NULL, 0, err);
    if (st || pc_contains(c, s->hist, n))
        return st;
    const backend_ops *ops = s->e->be.ops;
    size_t bytes = ops->snapshot_size(s->st);
    void *snap = malloc(bytes ? bytes : 1);
    if (!snap)
        return glm_error_set(err, GLM_ERR_NOMEM, "out of memory keeping a prompt state of %zu "
                             "bytes", bytes);
    st = ops->snapshot_save(s->st, snap, bytes, err);
    if (st) {
        free(snap);
        return st;
    }
    return pc_put(c, s->hist, n, snap, bytes, err);
}

typedef struct restore_ctx {
    glm_session *s;
    const int32_t *ids;
} restore_ctx;

static glm_status restore_one(void *user, const void *snap, size_t n, glm_error *err)
{
    restore_ctx *r = user;
    glm_session *s = r->s;
    glm_status st = s->e->be.ops->snapshot_load(s->st, snap, n, err);
    if (st)
        return st;
    int len = glm_session_length(s);
    if ((st = remember_tokens(s, r->ids, len, 0, err))) {
        s->e->be.ops->state_reset(s->st);
        return st;
    }
    /* rank 0: every rank restores its part, or none keeps it (the lookup then tries a shorter
     * state, or the prompt runs from the start) */
    int all = mirror_restore(s, r->ids, len, err);
    if (all != 1) {
        s->e->be.ops->state_reset(s->st);
        s->marked = 0;
        if (all < 0) { /* the link, not the state: kept for a later lookup (prefix_cache.h) */
            glm_error why = *err;
            return glm_error_set(err, GLM_ERR_PEER, "the ranks could not agree on restoring it: %s",
                                 why.message);
        }
        return glm_error_set(err, GLM_ERR_IO, "a worker does not hold its part of the kept state "
                             "of %d tokens", len);
    }
    return GLM_OK;
}

int glm_session_restore(glm_session *s, const int32_t *ids, int n, int min_len, int max_len)
{
    restore_ctx r = {.s = s, .ids = ids};
    int len = pc_lookup(s->e->cache, ids, n, min_len, max_len, restore_one, &r);
    if (len > 0) {
        s->has_logits = 0;
        s->marked = len;
    }
    return len;
}

_Static_assert(SPEC_MAX_DRAFT + 1 <= TP_VERIFY_MAX_TOKENS, "a drafted window fits a VERIFY step");

int session_drafting(const glm_session *s)
{
    const backend_ops *ops = s->e->be.ops;
    return (s->e->draft != SPEC_OFF || s->drafter.fn) && ops->verify &&
           (s->e->rank < 0 || (s->e->rank == 0 && ops->verifies_over_ranks));
}

glm_status session_verify(glm_session *s, const int32_t *tokens, int n, float *logits_all,
                          glm_error *err)
{
    const backend_ops *ops = s->e->be.ops;
    if (!ops->verify)
        return glm_error_set(err, GLM_ERR_UNSUPPORTED, "the %s backend cannot verify drafts",
                             ops->name);
    int at = glm_session_length(s);
    glm_status st = check_room(s, at, n, err);
    if (st)
        return st;
    st = remember_tokens(s, tokens, n, at, err);
    /* rank 0: the window and its exchanges, with no other session's in between (as feed) */
    if (s->e->rank == 0) {
        pthread_mutex_lock(&s->e->step_lock);
        s->e->stepping = s;
    }
    if (!st)
        st = mirror_step_locked(s, TP_STEP_VERIFY, at, tokens, n, err);
    if (!st)
        st = ops->verify(s->e->be.impl, s->st, tokens, n, logits_all, err);
    if (s->e->rank == 0) {
        mirror_step_end(s);
        s->e->stepping = NULL;
        pthread_mutex_unlock(&s->e->step_lock);
    }
    if (st) {
        glm_session_reset(s);
        return st;
    }
    int V = s->e->model->cfg.vocab_size;
    memcpy(s->logits, logits_all + (size_t)(n - 1) * V, (size_t)V * sizeof *s->logits);
    s->has_logits = 1;
    return GLM_OK;
}

int session_mtp_draft(glm_session *s, int32_t next, int32_t *out, int max, glm_error *err)
{
    const backend_ops *ops = s->e->be.ops;
    int n = 0;
    if (!ops->mtp_draft || s->e->rank >= 0)
        return 0;
    if (ops->mtp_draft(s->e->be.impl, s->st, next, out, max, &n, err) != GLM_OK)
        return -1;
    return n;
}

glm_status session_rewind(glm_session *s, int n, const float *row, glm_error *err)
{
    const backend_ops *ops = s->e->be.ops;
    int V = s->e->model->cfg.vocab_size;
    if (n == glm_session_length(s)) {
        if (row && row != s->logits)
            memcpy(s->logits, row, (size_t)V * sizeof *s->logits);
        return GLM_OK;
    }
    if (!ops->state_rewind)
        return glm_error_set(err, GLM_ERR_UNSUPPORTED, "the %s backend cannot go back in a "
                             "verification window", ops->name);
    glm_status st = mirror_step(s, TP_STEP_REWIND, n, NULL, 0, err);
    if (!st)
        st = ops->state_rewind(s->st, n, err);
    if (st) { /* the ranks may no longer agree on the state: start over on both (as verify) */
        glm_session_reset(s);
        return st;
    }
    s->has_logits = row != NULL;
    if (row && row != s->logits)
        memcpy(s->logits, row, (size_t)V * sizeof *s->logits);
    if (n < s->marked)
        s->marked = 0;
    return GLM_OK;
}

float *session_logits_mut(glm_session *s)
{
    return s->has_logits ? s->logits : NULL;
}

void session_mask_logits(const glm_session *s, float *row)
{
    if (!s->e->untokenizable) /* set before generation starts (engine_load_mask); read-only after */
        return;
    for (int id = 0; id < s->e->model->cfg.vocab_size; id++)
        if (s->e->untokenizable[id])
            row[id] = -INFINITY;
}

const struct spec_stats *session_spec_stats(const glm_session *s)
{
    return &s->spec;
}

void session_set_drafter(glm_session *s, spec_draft_fn fn, void *user)
{
    s->drafter.fn = fn;
    s->drafter.user = user;
}

void session_set_forward_cost(glm_session *s, spec_cost_fn fn, void *user)
{
    s->drafter.cost = fn;
    s->drafter.cost_user = user;
}

int glm_token_is_eos(int32_t t, const int *eos, int n_eos)
{
    for (int i = 0; i < n_eos; i++)
        if (eos[i] == t)
            return 1;
    return 0;
}

glm_status glm_session_generate_tokens(glm_session *s, const int32_t *prompt, int n_prompt,
                                       const glm_sampling *sampling, const int *eos, int n_eos,
                                       int max_new, glm_token_fn on_token, void *user, int *n_out,
                                       glm_error *err)
{
    *n_out = 0;
    atomic_store(&s->cancel, 0);
    glm_status st = n_prompt > 0 ? glm_session_feed(s, prompt, n_prompt, NULL, err) : GLM_OK;
    if (st)
        return st;
    if (!glm_session_logits(s))
        return glm_error_set(err, GLM_ERR_ARG, "nothing to continue from: give a prompt");
    if ((st = engine_load_mask(s->e, err)))
        return st;
    glm_sampler *smp = sampler_new(sampling, glm_session_vocab(s), err);
    if (!smp)
        return err ? err->status : GLM_ERR_ARG;
    if (session_drafting(s)) {
        spec_drafter d = s->drafter;
        d.mode = s->e->draft;
        st = spec_generate(s, &d, smp, eos, n_eos, max_new, on_token, user, n_out, &s->spec, err);
        sampler_free(smp);
        return st;
    }
    while (*n_out < max_new) {
        if (atomic_load(&s->cancel)) {
            st = glm_error_set(err, GLM_ERR_CANCELED, "generation canceled");
            break;
        }
        session_mask_logits(s, s->logits);
        int32_t tok = sampler_pick(smp, s->logits);
        (*n_out)++;
        int stop = on_token ? on_token(tok, user) : 0;
        if (stop || glm_token_is_eos(tok, eos, n_eos) || *n_out >= max_new)
            break;
        if ((st = glm_session_feed(s, &tok, 1, NULL, err)))
            break;
    }
    sampler_free(smp);
    return st;
}
