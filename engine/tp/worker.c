/* worker.c: a worker rank (glm.h glm_worker_*): opens the engine as the rank a head gives it,
 * listens, and runs each head's steps on a mirror state per conversation until told to stop. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "session.h"
#include "tp/auth.h"
#include "tp/group.h"
#include "tp/rank.h"
#include "tp/transport.h"

/* One line for the worker's user (the app prefixes and prints it). */
static void say(const glm_worker_params *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(const glm_worker_params *p, const char *fmt, ...)
{
    engine_log to = {p->log, p->log_user};
    va_list ap;
    va_start(ap, fmt);
    engine_vlogf(&to, GLM_LOG_WARN, fmt, ap);
    va_end(ap);
}

/* A wait for a late head, in the worker's log (tp_rank_set_note). */
static void late_note(void *user, const tp_late_wait *w)
{
    char text[320];
    tp_late_wait_text(w, text, sizeof text);
    say(user, "%s", text);
}

static int stopped(const glm_worker_params *p)
{
    return p->stop && p->stop(p->stop_user);
}

glm_status glm_worker_new_key(const char *path, glm_error *err)
{
    return tp_key_create(path, err);
}

/* The key file's key, or an unset key when there is none (loopback only). */
static glm_status load_key(const char *key_file, tp_key *key, glm_error *err)
{
    memset(key, 0, sizeof *key);
    return key_file ? tp_key_load(key_file, key, err) : GLM_OK;
}

glm_status glm_worker_check(const char *listen, const char *key_file, glm_error *err)
{
    tp_key key;
    glm_status st = load_key(key_file, &key, err);
    return st != GLM_OK ? st : tp_listen_allowed(listen, &key, err);
}

/* Appends logits to the dump file (--dump-logits), in the order the steps computed them. */
static int dump_logits(FILE *dump, const float *logits, size_t n)
{
    return !dump || (fwrite(logits, sizeof *logits, n, dump) == n && fflush(dump) == 0);
}

/* Runs one forward step of the head's; the session is rank 1's mirror of the head's. */
static glm_status run_forward(glm_session *s, const tp_step *step, FILE *dump, glm_error *err)
{
    if ((int)step->pos != glm_session_length(s))
        return glm_error_set(err, GLM_ERR_PEER, "the head ran tokens at position %u but this worker "
                             "holds %d: the ranks disagree", step->pos, glm_session_length(s));
    size_t V = (size_t)glm_session_vocab(s);
    int all = step->cmd == TP_STEP_FORWARD_ALL;
    float *logits = all ? malloc((size_t)step->n_tokens * V * sizeof *logits) : NULL;
    if (all && !logits)
        return glm_error_set(err, GLM_ERR_NOMEM, "out of memory for %u rows of logits", step->n_tokens);
    glm_status st = glm_session_feed(s, (const int32_t *)step->tokens, (int)step->n_tokens, logits, err);
    if (st == GLM_OK && !dump_logits(dump, all ? logits : glm_session_logits(s), all ? step->n_tokens * V : V))
        st = glm_error_set(err, GLM_ERR_IO, "cannot write the logits dump: %s", strerror(errno));
    free(logits);
    return st;
}

/* Runs a verification window of the head's (its drafted tokens, every row's logits), which a
 * REWIND step may then go back inside. */
static glm_status run_verify(glm_session *s, const tp_step *step, FILE *dump, glm_error *err)
{
    if ((int)step->pos != glm_session_length(s))
        return glm_error_set(err, GLM_ERR_PEER, "the head verified tokens at position %u but this "
                             "worker holds %d: the ranks disagree", step->pos, glm_session_length(s));
    size_t V = (size_t)glm_session_vocab(s);
    float *logits = malloc((size_t)step->n_tokens * V * sizeof *logits);
    if (!logits)
        return glm_error_set(err, GLM_ERR_NOMEM, "out of memory for a window of %u rows of logits",
                             step->n_tokens);
    glm_status st = session_verify(s, (const int32_t *)step->tokens, (int)step->n_tokens, logits, err);
    if (st == GLM_OK && !dump_logits(dump, logits, step->n_tokens * V))
        st = glm_error_set(err, GLM_ERR_IO, "cannot write the logits dump: %s", strerror(errno));
    free(logits);
    return st;
}

/* The worker's mirrors of the head's conversation states, by slot, made on first use. */
typedef struct mirrors {
    glm_session *slot[TP_MAX_SLOTS];
} mirrors;

static void mirrors_free(mirrors *m)
{
    for (unsigned i = 0; i < TP_MAX_SLOTS; i++) {
        glm_session_free(m->slot[i]);
        m->slot[i] = NULL;
    }
}

static glm_status apply_step(glm_engine *e, mirrors *m, const tp_step *step, FILE *dump,
                             glm_error *err)
{
    if (step->cmd == TP_STEP_CLOSE) {
        glm_session_free(m->slot[step->slot]);
        m->slot[step->slot] = NULL;
        return GLM_OK;
    }
    glm_session *s = m->slot[step->slot];
    if (!s && !(s = m->slot[step->slot] = glm_session_new(e, err))) {
        /* the head holds this state: a worker that cannot mirror it must stop the pair */
        glm_error why = *err;
        return glm_error_set(err, GLM_ERR_PEER, "the worker cannot open a state for the head's "
                             "conversation %u: %s", step->slot, why.message);
    }
    switch (step->cmd) {
    case TP_STEP_RESET: glm_session_reset(s); return GLM_OK;
    case TP_STEP_TRUNCATE: return glm_session_truncate(s, (int)step->pos, err);
    case TP_STEP_MARK:
        if ((int)step->pos != glm_session_length(s))
            return glm_error_set(err, GLM_ERR_PEER, "the head marked %u tokens but this worker holds "
                                 "%d: the ranks disagree", step->pos, glm_session_length(s));
        return glm_session_mark(s, err);
    case TP_STEP_VERIFY: return run_verify(s, step, dump, err);
    case TP_STEP_KEEP: return mirror_serve_keep(s, (int)step->pos, err);
    case TP_STEP_RESTORE:
        return mirror_serve_restore(s, (const int32_t *)step->tokens, (int)step->pos, err);
    case TP_STEP_REWIND: {
        /* the head went back already: a worker that cannot no longer holds its state */
        glm_status st = session_rewind(s, (int)step->pos, NULL, err);
        if (st != GLM_OK) {
            glm_error why = *err;
            return glm_error_set(err, GLM_ERR_PEER, "the head went back to %u tokens inside its "
                                 "verification window but this worker cannot: %s", step->pos,
                                 why.message);
        }
        return GLM_OK;
    }
    default: return run_forward(s, step, dump, err);
    }
}

/* The worker's engine from its parameters, with room planned for the verification windows a
 * drafting head sends (copy drafts ask nothing else of a worker; the MTP layer runs on one rank). */
static glm_engine *open_worker_engine(const glm_worker_params *p, glm_error *err)
{
    glm_engine_params ep = p->engine;
    if (ep.draft == GLM_DRAFT_DEFAULT || ep.draft == GLM_DRAFT_OFF)
        ep.draft = GLM_DRAFT_COPY;
    return glm_engine_open(&ep, err);
}

/* The worker's engine, split as the last head asked (rank 1 of 2 until a head asks otherwise). */
typedef struct worker_engine {
    glm_engine *e;
    const glm_worker_params *p;
    int rank, world;
} worker_engine;

/* tp_rank_options.assign: a head of another number of ranks, or giving this worker another rank,
 * gets the model opened again and split as it asks (the split is made once per open). */
static glm_status assign_rank(void *user, int rank, int world, glm_error *err)
{
    worker_engine *w = user;
    if (w->e && w->rank == rank && w->world == world)
        return GLM_OK;
    say(w->p, "the head asks for rank %d of %d: splitting the model again", rank, world);
    glm_engine_close(w->e);
    w->rank = w->world = 0;
    w->e = open_worker_engine(w->p, err);
    if (!w->e)
        return err->status;
    glm_status st = engine_split(w->e, rank, world, err);
    if (st != GLM_OK) {
        glm_error why = *err;
        glm_engine_close(w->e);
        w->e = NULL;
        return glm_error_set(err, st, "the worker cannot be rank %d of %d: %s", rank, world, why.message);
    }
    w->rank = rank;
    w->world = world;
    return GLM_OK;
}

/* Serves one connected head until it leaves, fails or we are told to stop. */
static void serve(const glm_worker_params *p, tp_rank *r, glm_engine *e, FILE *dump)
{
    glm_error err = {0};
    tp_group *g = tp_group_of_worker(r, &err);
    if (!g) {
        say(p, "%s", err.message);
        tp_rank_report(r, err.message);
        return;
    }
    say(p, "serving the head at %s over %s as rank %d of %d", tp_rank_peer(r),
        tp_rank_transport_name(r), tp_group_rank(g), tp_group_world(g));
    tp_rank_set_note(r, late_note, (void *)p);
    engine_attach_peer(e, g);
    mirrors m = {0};
    while (!stopped(p)) {
        tp_step step;
        int bye = 0;
        if (tp_worker_next_step(r, 500, &step, &bye, &err) != GLM_OK) {
            say(p, "%s", err.message);
            break;
        }
        if (bye) {
            say(p, "the head at %s left; waiting for the next head", tp_rank_peer(r));
            break;
        }
        if (step.cmd == 0)
            continue;
        glm_status st = apply_step(e, &m, &step, dump, &err);
        free(step.tokens);
        if (st == GLM_ERR_PEER || st == GLM_ERR_IO || st == GLM_ERR_NOMEM) {
            tp_rank_report(r, err.message);
            say(p, "%s", err.message);
            break;
        }
        /* a cancel the head's user asked for (the ranks agreed on the layer: backend.h) */
        if (st == GLM_ERR_CANCELED)
            say(p, "the head's user canceled its prompt: %s", err.message);
        /* other failures (a bad token id) happen on the head too, which says so to its user */
        else if (st != GLM_OK)
            say(p, "step failed as on the head: %s", err.message);
    }
    mirrors_free(&m);
    engine_attach_peer(e, NULL);
    tp_group_close(g);
}

/* Accepts heads on l one after another until told to stop. */
static void accept_heads(const glm_worker_params *p, worker_engine *we, tp_listener *l,
                         const tp_identity *id, const tp_rank_options *opts, FILE *dump)
{
    glm_error err = {0};
    while (!stopped(p)) {
        tp_rank *r = tp_worker_accept(l, id, opts, tp_now_ms() + 500, &err);
        if (!r) {
            if (err.status != GLM_ERR_PEER || strstr(err.message, "no connection arrived") == NULL)
                say(p, "%s", err.message);
            continue;
        }
        serve(p, r, we->e, dump);
        tp_rank_close(r);
    }
}

/* Listens (the listener and the port's report) and serves; the engine is open and split. */
static glm_status listen_and_serve(const glm_worker_params *p, worker_engine *we, const tp_identity *id,
                                   tp_rank_options *opts, FILE *dump, glm_error *err)
{
    tp_listener *l = tp_listener_open(p->listen, &opts->key, err);
    if (!l)
        return err->status;
    glm_status st;
    if (p->on_listen && (st = p->on_listen(p->on_listen_user, tp_listener_port(l), err)) != GLM_OK) {
        tp_listener_close(l);
        return st;
    }
    say(p, "listening on %s (port %d) for a head, model %s (%s), transport %s, %s", p->listen,
        tp_listener_port(l), p->engine.model_dir, id->model_name,
        p->engine.transport ? p->engine.transport : "as the head asks",
        opts->key.set ? "heads must prove the key" : "no key (loopback only)");
    accept_heads(p, we, l, id, opts, dump);
    tp_listener_close(l);
    return GLM_OK;
}

glm_status glm_worker_serve(const glm_worker_params *p, glm_error *err)
{
    tp_rank_options opts = {.transport = p->engine.transport};
    glm_status st = load_key(p->key_file, &opts.key, err);
    if (st != GLM_OK)
        return st;
    engine_rdma_options(&p->engine, &opts.rdma);
    worker_engine we = {.p = p, .rank = 1, .world = 2};
    if (!(we.e = open_worker_engine(p, err)))
        return err->status;
    opts.assign = assign_rank;
    opts.assign_user = &we;
    /* the head refuses a worker whose backend or its settings differ: the replicated ops must
     * round alike and both ranks' caches hold the same window */
    tp_identity id;
    st = engine_split(we.e, 1, 2, err);
    if (st == GLM_OK)
        st = engine_tp_identity(we.e, &id, err);
    /* a worker told to use a transport it cannot run says so now, not when a head comes */
    if (st == GLM_OK)
        st = tp_transport_refusal(p->engine.transport, id.backend, err);
    FILE *dump = NULL;
    if (st == GLM_OK && p->dump_logits && !(dump = fopen(p->dump_logits, "wb")))
        st = glm_error_set(err, GLM_ERR_IO, "cannot create %s: %s", p->dump_logits, strerror(errno));
    if (st == GLM_OK)
        st = listen_and_serve(p, &we, &id, &opts, dump, err);
    if (dump)
        fclose(dump);
    glm_engine_close(we.e);
    return st;
}
