/* mirror.c: two-rank mirroring: splitting the engine's model between ranks, the identity the
 * ranks agree on, and rank 0 telling the worker each step of a session (its mirror slot). */
#include "engine_impl.h"

#include <stdio.h>
#include <string.h>

#include "tp/group.h"
#include "tp/rank.h"

void engine_rdma_options(const glm_engine_params *p, tp_rdma_options *out)
{
    out->hca_list = p->rdma_hca && *p->rdma_hca ? p->rdma_hca : NULL;
    out->gid_index_given = p->rdma_gid_given;
    out->gid_index = p->rdma_gid_index;
}

glm_status engine_split(glm_engine *e, int rank, int world, glm_error *err)
{
    if (e->rank >= 0)
        return glm_error_set(err, GLM_ERR_ARG, "this engine is already split (rank %d of %d); open it "
                             "again to split it otherwise", e->rank, e->world);
    /* the backend reads the weights as they are when it opens: reopen it over the parts */
    backend_close(&e->be);
    glm_status st = tp_split_model_ranks(e->model, rank, world, &e->split, err);
    if (st == GLM_OK) {
        e->rank = rank;
        e->world = world;
        st = backend_open(e->model, &e->params, &e->be, err);
    }
    /* a worker's cache, opened before its split: its states are of the whole model */
    if (st == GLM_OK && e->cache)
        st = engine_open_cache(e, err);
    if (st == GLM_OK && world > 2 && strcmp(e->be.ops->name, "cpu") != 0 &&
        strcmp(e->be.ops->name, "cuda") != 0)
        st = glm_error_set(err, GLM_ERR_UNSUPPORTED, "the %s backend splits a model between two ranks "
                           "only, not %d; run more ranks with --backend cpu", e->be.ops->name, world);
    return st;
}

glm_status engine_tp_identity(const glm_engine *e, tp_identity *id, glm_error *err)
{
    glm_status st = tp_identity_from_model_dir(e->model->dir, id, err);
    if (st != GLM_OK)
        return st;
    id->backend = tp_backend_code(e->be.ops->name);
    id->max_context = (uint32_t)e->be.settings.context;
    id->kv_format = e->be.ops->cache_format(e->be.impl);
    return GLM_OK;
}

void engine_attach_peer(glm_engine *e, struct tp_group *g)
{
    e->tp = g;
}

static glm_status coll_reduce(void *user, float *buf, size_t n, glm_error *err)
{
    glm_engine *e = user;
    if (!e->tp)
        return glm_error_set(err, GLM_ERR_PEER, "this rank has no peer to exchange with");
    return tp_group_all_reduce(e->tp, buf, n, err);
}

static glm_status coll_gather(void *user, const float *mine, float *all, size_t n, glm_error *err)
{
    glm_engine *e = user;
    if (!e->tp)
        return glm_error_set(err, GLM_ERR_PEER, "this rank has no peer to exchange with");
    return tp_group_all_gather(e->tp, mine, all, n, err);
}

/* Rank 0 tells rank 1 each decision before acting on it, so both run the same steps in order;
 * the caller holds step_lock. A step that needs the worker's mirror as this session left it is
 * refused when the worker was reconnected since (the mirror is gone): the session starts over. */
glm_status mirror_step_locked(glm_session *s, tp_step_cmd cmd, int pos, const int32_t *tokens,
                                   int n, glm_error *err)
{
    glm_engine *e = s->e;
    if (e->rank != 0)
        return GLM_OK;
    if (!e->tp)
        return glm_error_set(err, GLM_ERR_PEER, "rank 0 has no worker connected");
    int forward = tp_step_is_forward(cmd);
    int fresh = cmd == TP_STEP_RESET || cmd == TP_STEP_CLOSE || cmd == TP_STEP_RESTORE ||
                (pos == 0 && (forward || cmd == TP_STEP_TRUNCATE));
    if (!fresh && s->tp_epoch != tp_group_reconnects(e->tp))
        return glm_error_set(err, GLM_ERR_PEER, "the worker at %s was reconnected after this "
                             "conversation's state was built there, so it no longer holds it; the "
                             "conversation starts over with the next message", tp_group_peer(e->tp));
    glm_status st = tp_group_send_step(e->tp, s->slot, cmd, (uint32_t)pos, (const uint32_t *)tokens,
                                       (uint32_t)n, err);
    if (st == GLM_OK && fresh)
        s->tp_epoch = tp_group_reconnects(e->tp);
    return st;
}

void mirror_step_end(glm_session *s)
{
    if (s->e->rank == 0 && s->e->tp)
        tp_group_step_end(s->e->tp);
}

int mirror_restore(glm_session *s, const int32_t *ids, int n, glm_error *err)
{
    glm_engine *e = s->e;
    if (e->rank != 0)
        return 1;
    pthread_mutex_lock(&e->step_lock);
    e->stepping = s;
    float missing = 0.0f; /* this rank restored its own */
    glm_status st = mirror_step_locked(s, TP_STEP_RESTORE, n, ids, n, err);
    if (st == GLM_OK)
        st = coll_reduce(e, &missing, 1, err);
    mirror_step_end(s);
    e->stepping = NULL;
    pthread_mutex_unlock(&e->step_lock);
    if (st != GLM_OK)
        return -1;
    return missing == 0.0f;
}

glm_status mirror_serve_keep(glm_session *s, int n, glm_error *err)
{
    if (n != glm_session_length(s))
        return glm_error_set(err, GLM_ERR_PEER, "the head kept a state of %d tokens but this "
                             "worker holds %d: the ranks disagree", n, glm_session_length(s));
    /* a state this worker cannot keep (memory) is missed at a later restore, which the ranks
     * then agree on: no reason to stop serving */
    glm_error why = {0};
    if (glm_session_keep(s, &why) != GLM_OK)
        engine_logf(&s->e->log, GLM_LOG_WARN, "the head's state of %d tokens is not kept on this "
                    "worker: %s", n, why.message);
    return GLM_OK;
}

glm_status mirror_serve_restore(glm_session *s, const int32_t *ids, int n, glm_error *err)
{
    glm_engine *e = s->e;
    int got = glm_session_restore(s, ids, n, n - 1, n);
    float missing = got == n ? 0.0f : 1.0f;
    glm_status st = coll_reduce(e, &missing, 1, err);
    /* this rank or another did not have it (or the exchange failed): all start over */
    if (st != GLM_OK || missing != 0.0f)
        glm_session_reset(s);
    if (st != GLM_OK)
        return st;
    if (got != n)
        engine_logf(&e->log, GLM_LOG_INFO, "the head restored a kept state of %d tokens this "
                    "worker does not hold (restarted, or past its prompt cache's budget): the "
                    "prompt runs again on every rank", n);
    return GLM_OK;
}

glm_status mirror_step(glm_session *s, tp_step_cmd cmd, int pos, const int32_t *tokens, int n,
                            glm_error *err)
{
    if (s->e->rank != 0)
        return GLM_OK;
    pthread_mutex_lock(&s->e->step_lock);
    glm_status st = mirror_step_locked(s, cmd, pos, tokens, n, err);
    pthread_mutex_unlock(&s->e->step_lock);
    return st;
}

/* Rank 0: a free mirror slot on the worker for a new session. */
glm_status mirror_take_slot(glm_session *s, glm_error *err)
{
    glm_engine *e = s->e;
    pthread_mutex_lock(&e->step_lock);
    uint32_t slot = 0;
    while (slot < TP_MAX_SLOTS && (e->slots_used >> slot & 1u))
        slot++;
    if (slot < TP_MAX_SLOTS)
        e->slots_used |= 1u << slot;
    pthread_mutex_unlock(&e->step_lock);
    if (slot == TP_MAX_SLOTS)
        return glm_error_set(err, GLM_ERR_UNSUPPORTED, "a two-rank engine keeps at most %u "
                             "conversation states open on its worker, and all are in use; free one "
                             "(glm_session_free) before opening another", TP_MAX_SLOTS);
    s->slot = slot;
    s->tp_epoch = -1; /* the slot's mirror is made empty by the session's first step, a reset */
    return GLM_OK;
}

/* Rank 0: tells the worker to free the session's mirror (best effort: a failed peer has none)
 * and gives the slot back. */
void mirror_release_slot(glm_session *s)
{
    glm_engine *e = s->e;
    pthread_mutex_lock(&e->step_lock);
    if (e->tp && !tp_group_health(e->tp, NULL))
        (void)mirror_step_locked(s, TP_STEP_CLOSE, 0, NULL, 0, NULL);
    e->slots_used &= ~(1u << s->slot);
    pthread_mutex_unlock(&e->step_lock);
}

static glm_status coll_gather_device(void *user, const float *d_mine, float *d_all, size_t n,
                                     void *stream, glm_error *err)
{
    glm_engine *e = user;
    if (!e->tp)
        return glm_error_set(err, GLM_ERR_PEER, "this rank has no peer to exchange with");
    return tp_group_all_gather_device(e->tp, d_mine, d_all, n, stream, err);
}

static glm_status coll_device_wait(void *user, void *stream, glm_error *err)
{
    glm_engine *e = user;
    if (!e->tp)
        return glm_error_set(err, GLM_ERR_PEER, "this rank has no peer to exchange with");
    return tp_group_device_wait(e->tp, stream, err);
}

glm_status mirror_session_start(glm_session *s, glm_error *err)
{
    glm_engine *e = s->e;
    backend_collective coll = {.all_reduce = coll_reduce, .all_gather = coll_gather, .user = e,
                               .rank = e->rank, .world = e->world};
    if (e->tp && tp_group_device_collectives(e->tp)) {
        coll.all_gather_device = coll_gather_device;
        coll.device_wait = coll_device_wait;
    }
    e->be.ops->state_set_collective(s->st, &coll);
    /* a new conversation: the worker starts from an empty state too */
    return mirror_step(s, TP_STEP_RESET, 0, NULL, 0, err);
}

/* Whether the reply whose step is running was canceled: a wait for a late worker asks it (on the
 * step's own thread, under step_lock). */
static int step_canceled(void *user)
{
    glm_engine *e = user;
    return e->stepping && atomic_load(&e->stepping->cancel);
}

/* A wait for a late worker, in the engine's log and to the running reply (tp_rank_set_note; on
 * the step's own thread, under step_lock). */
static void late_note(void *user, const tp_late_wait *w)
{
    glm_engine *e = user;
    char text[320];
    tp_late_wait_text(w, text, sizeof text);
    engine_logf(&e->log, GLM_LOG_WARN, "%s", text);
    if (e->stepping) {
        snprintf(text, sizeof text, "the %s at %s", w->role, w->peer);
        session_waiting(e->stepping, text, w->late_s, w->over);
    }
}

glm_status mirror_connect(glm_engine *e, const glm_engine_params *p, glm_error *err)
{
    tp_identity id;
    tp_rank_options opts = {.transport = p->transport};
    engine_rdma_options(p, &opts.rdma);
    glm_status st = p->peer_key_file ? tp_key_load(p->peer_key_file, &opts.key, err) : GLM_OK;
    if (st == GLM_OK)
        st = engine_tp_identity(e, &id, err);
    if (st != GLM_OK)
        return st;
    e->tp = tp_group_connect(p->peer, &id, &opts, err);
    if (e->tp) {
        tp_group_set_cancel(e->tp, step_canceled, e);
        tp_group_set_note(e->tp, late_note, e);
    }
    return e->tp ? GLM_OK : err && err->status ? err->status : GLM_ERR_PEER;
}
