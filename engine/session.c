/* session.c: glm_engine (a model plus its backend) and glm_session (a conversation's
 * token-level state): open, feed, truncate, a token generation loop, cancellation. */
#include "session.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <unistd.h>

#include "backend.h"
#include "prefix_cache.h"
#include "sampler.h"
#include "spec.h"
#include "text/template_check.h"
#include "text/tokenizer.h"
#include "tp/group.h"
#include "tp/rank.h"
#include "tp/split.h"

/* Prefills run in pieces of at most this many tokens (bounds the scratch memory). */
#define FEED_PIECE 1024

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
    tp_split_owned split;
    pc_cache *cache;    /* kept prompt states, or NULL (off, two ranks, no snapshots) */
    spec_mode draft;    /* SPEC_OFF unless the backend verifies and one rank runs */
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
};

/* The memory budget of kept prompt states: the parameter, else an eighth of RAM. -1 in *out:
 * off. */
static int64_t cache_budget(const glm_engine_params *p)
{
    if (p->prompt_cache_bytes)
        return p->prompt_cache_bytes;
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    return pages > 0 && page > 0 ? (int64_t)pages * page / 8 : (int64_t)1 << 30;
}

/* The disk budget of kept-state files: the parameter, else 4 GiB; 0: none written. */
static uint64_t disk_budget(const glm_engine_params *p)
{
    if (p->prompt_cache_disk_bytes)
        return p->prompt_cache_disk_bytes > 0 ? (uint64_t)p->prompt_cache_disk_bytes : 0;
    return PC_DEFAULT_DISK_BUDGET;
}

/* A hash of the model's config and weight index: kept-state files of another model are refused. */
static glm_status model_identity(const glm_model *m, uint64_t *id, glm_error *err)
{
    tp_identity t;
    glm_status st = tp_identity_from_model_dir(m->dir, &t, err);
    if (st)
        return st;
    uint64_t h = fnv1a64(FNV1A64_SEED, &t.config_hash, sizeof t.config_hash);
    *id = fnv1a64(h, &t.weights_hash, sizeof t.weights_hash);
    return GLM_OK;
}

static glm_status open_cache(glm_engine *e, const glm_engine_params *p, glm_error *err)
{
    int64_t budget = cache_budget(p);
    const backend_ops *ops = e->be.ops;
    if (budget <= 0 || !ops->snapshot_size || !ops->snapshot_save || !ops->snapshot_load)
        return GLM_OK;
    const char *dir = p->prompt_cache_dir && *p->prompt_cache_dir ? p->prompt_cache_dir : NULL;
    uint64_t id = 0, disk = disk_budget(p);
    if (dir && model_identity(e->model, &id, err) != GLM_OK)
        return err ? err->status : GLM_ERR_IO;
    e->cache = pc_new((size_t)budget, dir, id, err);
    if (!e->cache)
        return err ? err->status : GLM_ERR_NOMEM;
    if (dir)
        pc_set_disk_budget(e->cache, disk);
    /* the notes of opening it (files refused while indexing dir), then each as it is made */
    for (int i = 0; i < pc_n_notes(e->cache); i++)
        engine_logf(&e->log, GLM_LOG_WARN, "%s", pc_note(e->cache, i));
    pc_set_log(e->cache, &e->log);
    return GLM_OK;
}

/* The drafting mode p asks for; one that cannot run here is refused by name, never turned off
 * quietly. Needs the backend open. */
static glm_status choose_draft(glm_engine *e, const glm_engine_params *p, glm_error *err)
{
    e->draft = spec_mode_of(p->draft);
    if (e->draft == SPEC_OFF)
        return GLM_OK;
    if (p->peer)
        return glm_error_set(err, GLM_ERR_UNSUPPORTED, "drafting runs on one rank only; with --peer "
                             "set draft = off (config or GLMCHAT_DRAFT)");
    if (e->draft == SPEC_MTP && !e->model->w.has_mtp)
        return glm_error_set(err, GLM_ERR_UNSUPPORTED, "draft = mtp: %s has no MTP layer "
                             "(num_nextn_predict_layers and layers.%d); use draft = copy or off",
                             e->model->dir, e->model->cfg.num_layers);
    if (!e->be.ops->verify || !e->be.ops->state_rewind)
        return glm_error_set(err, GLM_ERR_UNSUPPORTED, "the %s backend cannot verify drafts yet; "
                             "set draft = off (config or GLMCHAT_DRAFT)", e->be.ops->name);
    if (e->draft == SPEC_MTP && !e->be.ops->mtp_draft)
        return glm_error_set(err, GLM_ERR_UNSUPPORTED, "draft = mtp: the %s backend cannot run "
                             "the MTP layer yet; use draft = copy or off", e->be.ops->name);
    return GLM_OK;
}

/* The model's own chat template, when it is not a revision glmchat renders (or cannot be read):
 * a note for the app, said once; the engine goes on with its native template either way. */
static void note_template(glm_engine *e, const char *dir)
{
    tmpl_check tc;
    glm_error err = {0};
    char text[8192];
    if (tmpl_check_dir(dir, &tc, &err) != GLM_OK)
        snprintf(text, sizeof text, "the model's chat template could not be checked: %s; glmchat "
                 "renders its own GLM-5.3-Flash template", err.message);
    else if (!tmpl_check_notice(&tc, text, sizeof text))
        return;
    engine_logf(&e->log, GLM_LOG_WARN, "%s", text);
    e->template_note = strdup(text); /* out of memory: the note is lost, nothing else */
}

static const char *kv_cache_name(glm_kv_cache k)
{
    return k == GLM_KV_CACHE_FP8 ? "fp8" : k == GLM_KV_CACHE_BF16 ? "bf16" : "f32";
}

/* With verbose: the settings the engine resolved, one line. */
static void log_settings(glm_engine *e, const glm_engine_params *p)
{
    if (!p->verbose)
        return;
    const backend_settings *s = &e->be.settings;
    static const char *drafts[] = {"off", "off", "copy", "mtp"};
    char cache[160];
    if (!e->cache)
        snprintf(cache, sizeof cache, "off");
    else {
        glm_cache_stats cs;
        glm_engine_cache_stats(e, &cs);
        snprintf(cache, sizeof cache, "%zu MiB in memory%s%s", (size_t)(cs.budget >> 20),
                 p->prompt_cache_dir ? ", files in " : "",
                 p->prompt_cache_dir ? p->prompt_cache_dir : "");
    }
    engine_logf(&e->log, GLM_LOG_INFO, "engine: %s backend%s, context %d tokens, kv cache %s, "
                "dense %s, drafting %s, prompt cache %s", e->be.ops->name,
                p->peer ? " (rank 0 of two)" : "", s->context, kv_cache_name(s->kv_cache),
                s->dense == GLM_DENSE_Q4 ? "q4" : "bf16", drafts[spec_mode_of(p->draft)], cache);
}

glm_engine *glm_engine_open(const glm_engine_params *p, glm_error *err)
{
    if (!p || !p->model_dir) {
        glm_error_set(err, GLM_ERR_ARG, "no model directory given (use --model DIR)");
        return NULL;
    }
    glm_engine *e = calloc(1, sizeof *e);
    if (!e) {
        glm_error_set(err, GLM_ERR_NOMEM, "out of memory opening the engine");
        return NULL;
    }
    e->rank = -1;
    e->log = (engine_log){.fn = p->log, .user = p->log_user};
    pthread_mutex_init(&e->tok_lock, NULL);
    pthread_mutex_init(&e->step_lock, NULL);
    glm_status st = backend_check_params(p, err);
    e->model = st ? NULL : glm_model_open(p->model_dir, err);
    if (!e->model) {
        glm_engine_close(e);
        return NULL;
    }
    e->params = *p;
    note_template(e, p->model_dir);
    /* The MTP layer costs a layer's forward (and its cache, and on CUDA its weights' upload)
     * every step: the backends run it only when it drafts. */
    if (spec_mode_of(p->draft) != SPEC_MTP)
        e->model->w.has_mtp = 0;
    /* rank 0 of the head and its workers (a comma list): the backend opens over this rank's part */
    if (st == GLM_OK)
        st = p->peer ? glm_engine_split(e, 0, 1 + tp_group_count_peers(p->peer), err)
                     : backend_open(e->model, p, &e->be, err);
    if (st == GLM_OK)
        st = choose_draft(e, p, err);
    if (st == GLM_OK && !p->peer)
        st = open_cache(e, p, err);
    if (st != GLM_OK) {
        glm_engine_close(e);
        return NULL;
    }
    log_settings(e, p);
    if (!p->peer)
        return e;
    tp_identity id;
    tp_rank_options opts = {.transport = p->transport};
    glm_engine_rdma_options(p, &opts.rdma);
    if (p->peer_key_file && tp_key_load(p->peer_key_file, &opts.key, err) != GLM_OK) {
        glm_engine_close(e);
        return NULL;
    }
    if (glm_engine_tp_identity(e, &id, err) != GLM_OK) {
        glm_engine_close(e);
        return NULL;
    }
    if (!(e->tp = tp_group_connect(p->peer, &id, &opts, err))) {
        glm_engine_close(e);
        return NULL;
    }
    return e;
}

void glm_engine_rdma_options(const glm_engine_params *p, tp_rdma_options *out)
{
    out->hca_list = p->rdma_hca && *p->rdma_hca ? p->rdma_hca : NULL;
    out->gid_index_given = p->rdma_gid_given;
    out->gid_index = p->rdma_gid_index;
}

glm_status glm_engine_split(glm_engine *e, int rank, int world, glm_error *err)
{
    if (e->rank >= 0)
        return glm_error_set(err, GLM_ERR_ARG, "this engine is already split (rank %d of %d); open it "
                             "again to split it otherwise", e->rank, e->world);
    if (world > 2 && e->params.backend == GLM_BACKEND_CUDA)
        return glm_error_set(err, GLM_ERR_UNSUPPORTED, "the cuda backend splits a model between two "
                             "ranks only, not %d; run more ranks with --backend cpu", world);
    /* the backend reads the weights as they are when it opens: reopen it over the parts */
    backend_close(&e->be);
    glm_status st = tp_split_model_ranks(e->model, rank, world, &e->split, err);
    if (st == GLM_OK) {
        e->rank = rank;
        e->world = world;
        st = backend_open(e->model, &e->params, &e->be, err);
    }
    if (st == GLM_OK && world > 2 && strcmp(e->be.ops->name, "cpu") != 0)
        st = glm_error_set(err, GLM_ERR_UNSUPPORTED, "the %s backend splits a model between two ranks "
                           "only, not %d; run more ranks with --backend cpu", e->be.ops->name, world);
    return st;
}

glm_status glm_engine_tp_identity(const glm_engine *e, tp_identity *id, glm_error *err)
{
    glm_status st = tp_identity_from_model_dir(e->model->dir, id, err);
    if (st != GLM_OK)
        return st;
    id->backend = tp_backend_code(e->be.ops->name);
    id->max_context = (uint32_t)e->be.settings.context;
    id->kv_format = e->be.ops->cache_format(e->be.impl);
    return GLM_OK;
}

void glm_engine_attach_peer(glm_engine *e, struct tp_group *g)
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
static glm_status send_step_locked(glm_session *s, tp_step_cmd cmd, int pos, const int32_t *tokens,
                                   int n, glm_error *err)
{
    glm_engine *e = s->e;
    if (e->rank != 0)
        return GLM_OK;
    if (!e->tp)
        return glm_error_set(err, GLM_ERR_PEER, "rank 0 has no worker connected");
    int forward = cmd == TP_STEP_FORWARD || cmd == TP_STEP_FORWARD_ALL;
    int fresh = cmd == TP_STEP_RESET || cmd == TP_STEP_CLOSE ||
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

static glm_status send_step(glm_session *s, tp_step_cmd cmd, int pos, const int32_t *tokens, int n,
                            glm_error *err)
{
    if (s->e->rank != 0)
        return GLM_OK;
    pthread_mutex_lock(&s->e->step_lock);
    glm_status st = send_step_locked(s, cmd, pos, tokens, n, err);
    pthread_mutex_unlock(&s->e->step_lock);
    return st;
}

/* Rank 0: a free mirror slot on the worker for a new session. */
static glm_status take_slot(glm_session *s, glm_error *err)
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
static void release_slot(glm_session *s)
{
    glm_engine *e = s->e;
    pthread_mutex_lock(&e->step_lock);
    if (e->tp && !tp_group_health(e->tp, NULL))
        (void)send_step_locked(s, TP_STEP_CLOSE, 0, NULL, 0, NULL);
    e->slots_used &= ~(1u << s->slot);
    pthread_mutex_unlock(&e->step_lock);
}

void glm_engine_close(glm_engine *e)
{
    if (!e)
        return;
    if (e->rank == 0) /* a worker's group is its caller's */
        tp_group_close(e->tp);
    pc_free(e->cache);
    backend_close(&e->be);
    tok_free(e->tok);
    free(e->untokenizable);
    pthread_mutex_destroy(&e->tok_lock);
    pthread_mutex_destroy(&e->step_lock);
    glm_model_close(e->model);
    tp_split_owned_free(&e->split);
    free(e->template_note);
    free(e);
}

const glm_model *glm_engine_model(const glm_engine *e)
{
    return e->model;
}

const char *glm_engine_backend_name(const glm_engine *e)
{
    return e->be.ops ? e->be.ops->name : "none";
}

int glm_engine_context(const glm_engine *e)
{
    return e->be.settings.context;
}

glm_kv_cache glm_engine_kv_cache(const glm_engine *e)
{
    return e->be.settings.kv_cache;
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
    if (e->rank == 0 && take_slot(s, err) != GLM_OK) {
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
    if (e->rank >= 0) {
        backend_collective coll = {.all_reduce = coll_reduce, .all_gather = coll_gather, .user = e,
                                   .rank = e->rank, .world = e->world};
        e->be.ops->state_set_collective(s->st, &coll);
        /* a new conversation: the worker starts from an empty state too */
        if (send_step(s, TP_STEP_RESET, 0, NULL, 0, err) != GLM_OK) {
            glm_session_free(s);
            return NULL;
        }
    }
    return s;
}

void glm_session_free(glm_session *s)
{
    if (!s)
        return;
    if (s->e->rank == 0)
        release_slot(s);
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
    send_step(s, TP_STEP_RESET, 0, NULL, 0, NULL);
    s->e->be.ops->state_reset(s->st);
    s->has_logits = 0;
    s->marked = 0;
}

/* A checkpoint's vocabulary is padded past the tokenizer's (GLM: 154,880 rows, 154,856 tokens):
 * generation must never pick an id that has no text. */
static int flag_untokenizable(glm_engine *e, glm_error *err)
{
    int V = e->model->cfg.vocab_size;
    e->untokenizable = calloc((size_t)V, 1);
    if (!e->untokenizable) {
        glm_error_set(err, GLM_ERR_NOMEM, "out of memory loading the tokenizer");
        return 0;
    }
    int known = 0;
    for (int id = 0; id < V; id++) {
        size_t len;
        e->untokenizable[id] = tok_token_bytes(e->tok, id, &len) == NULL;
        known += !e->untokenizable[id];
    }
    if (known == 0) {
        glm_error_set(err, GLM_ERR_FORMAT, "%s/tokenizer.json has no token below the model's "
                      "vocab_size %d", e->model->dir, V);
        return 0;
    }
    return 1;
}

const tok_tokenizer *glm_engine_tokenizer(glm_engine *e, glm_error *err)
{
    pthread_mutex_lock(&e->tok_lock);
    if (!e->tok) {
        char path[4096];
        if (snprintf(path, sizeof path, "%s/tokenizer.json", e->model->dir) >= (int)sizeof path)
            glm_error_set(err, GLM_ERR_ARG, "the model directory's path is too long");
        else
            e->tok = tok_load(path, err);
        if (e->tok && !flag_untokenizable(e, err)) {
            tok_free(e->tok);
            e->tok = NULL;
        }
    }
    const tok_tokenizer *t = e->tok;
    pthread_mutex_unlock(&e->tok_lock);
    return t;
}

/* Generation never picks an id the model directory's tokenizer has no text for: whether ids
 * are masked depends on the directory alone (a tokenizer.json there is loaded for its mask
 * before the first token is sampled), never on whether someone asked for the tokenizer first.
 * A directory without one (a logits-only model) masks nothing; one that cannot be read is an
 * error naming it. */
static glm_status load_mask(glm_engine *e, glm_error *err)
{
    pthread_mutex_lock(&e->tok_lock);
    int ready = e->untokenizable != NULL;
    pthread_mutex_unlock(&e->tok_lock);
    if (ready)
        return GLM_OK;
    char path[4096];
    if (snprintf(path, sizeof path, "%s/tokenizer.json", e->model->dir) >= (int)sizeof path)
        return glm_error_set(err, GLM_ERR_ARG, "the model directory's path is too long");
    if (access(path, F_OK) != 0)
        return GLM_OK;
    if (!glm_engine_tokenizer(e, err))
        return err && err->status ? err->status : GLM_ERR_FORMAT;
    return GLM_OK;
}

int glm_session_cancel_requested(glm_session *s)
{
    return atomic_load(&s->cancel);
}

void glm_session_clear_cancel(glm_session *s)
{
    atomic_store(&s->cancel, 0);
}

glm_engine *glm_session_engine(const glm_session *s)
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

/* glm_cancel between two pieces of a feed: the session holds the pieces that ran (a state
 * reuse_prefix never continues from, only truncates or replaces) and the last one's logits. */
static glm_status stop_feed(glm_session *s, int done, int n, int all_rows, glm_error *err)
{
    if (done > 0)
        s->has_logits = !all_rows; /* all_rows: the row went to the caller's buffer */
    return glm_error_set(err, GLM_ERR_CANCELED, "the prompt was canceled after %d of its %d tokens",
                         done, n);
}

glm_status glm_session_feed(glm_session *s, const int32_t *tokens, int n, float *logits_all,
                            glm_error *err)
{
    int V = s->e->model->cfg.vocab_size;
    int at = glm_session_length(s);
    glm_status kept = check_room(s, at, n, err);
    if (kept)
        return kept;
    kept = n > 0 ? remember_tokens(s, tokens, n, at, err) : GLM_OK;
    if (kept)
        return kept;
    for (int done = 0; done < n;) {
        if (atomic_load(&s->cancel))
            return stop_feed(s, done, n, logits_all != NULL, err);
        int piece = n - done < FEED_PIECE ? n - done : FEED_PIECE;
        float *out = logits_all ? logits_all + (size_t)done * V : s->logits;
        /* rank 0: the step and its exchanges, with no other session's in between */
        if (s->e->rank == 0)
            pthread_mutex_lock(&s->e->step_lock);
        glm_status st = send_step_locked(s, logits_all ? TP_STEP_FORWARD_ALL : TP_STEP_FORWARD,
                                         at + done, tokens + done, piece, err);
        if (st == GLM_OK)
            st = s->e->be.ops->prefill(s->e->be.impl, s->st, tokens + done, piece, out,
                                          logits_all != NULL, err);
        if (s->e->rank == 0)
            pthread_mutex_unlock(&s->e->step_lock);
        if (st) {
            glm_session_reset(s);
            return st;
        }
        done += piece;
        if (logits_all && done == n)
            memcpy(s->logits, logits_all + (size_t)(n - 1) * V, (size_t)V * sizeof *s->logits);
    }
    if (n > 0)
        s->has_logits = 1;
    return GLM_OK;
}

const float *glm_session_logits(const glm_session *s)
{
    return s->has_logits ? s->logits : NULL;
}

glm_status glm_session_mark(glm_session *s, glm_error *err)
{
    glm_status st = send_step(s, TP_STEP_MARK, glm_session_length(s), NULL, 0, err);
    if (st == GLM_OK)
        st = s->e->be.ops->state_mark(s->st, err);
    if (!st)
        s->marked = glm_session_length(s);
    return st;
}

glm_status glm_session_truncate(glm_session *s, int n, glm_error *err)
{
    int before = glm_session_length(s);
    glm_status st = n == before ? GLM_OK : send_step(s, TP_STEP_TRUNCATE, n, NULL, 0, err);
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
    if (!c || n == 0 || pc_contains(c, s->hist, n))
        return GLM_OK;
    const backend_ops *ops = s->e->be.ops;
    size_t bytes = ops->snapshot_size(s->st);
    void *snap = malloc(bytes ? bytes : 1);
    if (!snap)
        return glm_error_set(err, GLM_ERR_NOMEM, "out of memory keeping a prompt state of %zu "
                             "bytes", bytes);
    glm_status st = ops->snapshot_save(s->st, snap, bytes, err);
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

void glm_engine_cache_stats(glm_engine *e, glm_cache_stats *out)
{
    pc_stats p;
    pc_get_stats(e->cache, &p);
    *out = (glm_cache_stats){.on = e->cache != NULL, .entries = p.entries, .in_memory = p.in_memory,
                             .bytes = p.bytes, .budget = p.budget, .hits = p.hits,
                             .evictions = p.evictions, .disk_writes = p.disk_writes,
                             .disk_loads = p.disk_loads, .refused_files = p.refused_files,
                             .disk_bytes = p.disk_bytes, .disk_budget = p.disk_budget,
                             .disk_evictions = p.disk_evictions, .deleted_files = p.deleted_files};
}

int glm_engine_cache_n_notes(glm_engine *e)
{
    return pc_n_notes(e->cache);
}

const char *glm_engine_cache_note(glm_engine *e, int i)
{
    return pc_note(e->cache, i);
}

int glm_engine_n_notes(glm_engine *e)
{
    return (e->template_note != NULL) + pc_n_notes(e->cache);
}

const char *glm_engine_note(glm_engine *e, int i)
{
    int own = e->template_note != NULL;
    if (i < own)
        return e->template_note;
    return pc_note(e->cache, i - own);
}

glm_status glm_session_verify(glm_session *s, const int32_t *tokens, int n, float *logits_all,
                              glm_error *err)
{
    const backend_ops *ops = s->e->be.ops;
    if (!ops->verify || s->e->rank >= 0)
        return glm_error_set(err, GLM_ERR_UNSUPPORTED, "the %s backend cannot verify drafts%s",
                             ops->name, s->e->rank >= 0 ? " over two ranks" : "");
    int at = glm_session_length(s);
    glm_status st = check_room(s, at, n, err);
    if (st)
        return st;
    st = remember_tokens(s, tokens, n, at, err);
    if (!st)
        st = ops->verify(s->e->be.impl, s->st, tokens, n, logits_all, err);
    if (st) {
        glm_session_reset(s);
        return st;
    }
    int V = s->e->model->cfg.vocab_size;
    memcpy(s->logits, logits_all + (size_t)(n - 1) * V, (size_t)V * sizeof *s->logits);
    s->has_logits = 1;
    return GLM_OK;
}

int glm_session_mtp_draft(glm_session *s, int32_t next, int32_t *out, int max, glm_error *err)
{
    const backend_ops *ops = s->e->be.ops;
    int n = 0;
    if (!ops->mtp_draft || s->e->rank >= 0)
        return 0;
    if (ops->mtp_draft(s->e->be.impl, s->st, next, out, max, &n, err) != GLM_OK)
        return -1;
    return n;
}

glm_status glm_session_rewind(glm_session *s, int n, const float *row, glm_error *err)
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
    glm_status st = ops->state_rewind(s->st, n, err);
    if (!st) {
        s->has_logits = row != NULL;
        if (row && row != s->logits)
            memcpy(s->logits, row, (size_t)V * sizeof *s->logits);
        if (n < s->marked)
            s->marked = 0;
    }
    return st;
}

float *glm_session_logits_mut(glm_session *s)
{
    return s->has_logits ? s->logits : NULL;
}

void glm_session_mask_logits(const glm_session *s, float *row)
{
    if (!s->e->untokenizable) /* set before generation starts (load_mask); read-only after */
        return;
    for (int id = 0; id < s->e->model->cfg.vocab_size; id++)
        if (s->e->untokenizable[id])
            row[id] = -INFINITY;
}

const struct spec_stats *glm_session_spec_stats(const glm_session *s)
{
    return &s->spec;
}

void glm_session_set_drafter(glm_session *s, spec_draft_fn fn, void *user)
{
    s->drafter.fn = fn;
    s->drafter.user = user;
}

void glm_session_set_forward_cost(glm_session *s, spec_cost_fn fn, void *user)
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
    if ((st = load_mask(s->e, err)))
        return st;
    glm_sampler *smp = glm_sampler_new(sampling, glm_session_vocab(s), err);
    if (!smp)
        return err ? err->status : GLM_ERR_ARG;
    if ((s->e->draft != SPEC_OFF || s->drafter.fn) && s->e->be.ops->verify && s->e->rank < 0) {
        spec_drafter d = s->drafter;
        d.mode = s->e->draft;
        st = spec_generate(s, &d, smp, eos, n_eos, max_new, on_token, user, n_out, &s->spec, err);
        glm_sampler_free(smp);
        return st;
    }
    while (*n_out < max_new) {
        if (atomic_load(&s->cancel)) {
            st = glm_error_set(err, GLM_ERR_CANCELED, "generation canceled");
            break;
        }
        glm_session_mask_logits(s, s->logits);
        int32_t tok = glm_sampler_pick(smp, s->logits);
        (*n_out)++;
        int stop = on_token ? on_token(tok, user) : 0;
        if (stop || glm_token_is_eos(tok, eos, n_eos) || *n_out >= max_new)
            break;
        if ((st = glm_session_feed(s, &tok, 1, NULL, err)))
            break;
    }
    glm_sampler_free(smp);
    return st;
}
