/* engine.c: glm_engine (a model plus its backend): open and close, its settings, the prompt
 * cache, the tokenizer (loaded on first use) and the notes the app shows once. */
#include "engine_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model/identity.h"
#include "model/traffic.h"
#include "text/template_check.h"

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

/* The prompt cache's key: kept-state files of another model are refused. */
static glm_status model_key(const glm_model *m, uint64_t *key, glm_error *err)
{
    model_identity id;
    glm_status st = model_identity_read(m->dir, &id, err);
    if (st == GLM_OK)
        *key = model_identity_key(&id);
    return st;
}

/* A split rank's files hold its part of each state: their key and name say which part, so that
 * ranks sharing a directory (one machine) never take or overwrite each other's. */
static uint64_t rank_key(uint64_t key, int rank, int world)
{
    uint64_t x = key ^ ((uint64_t)(uint32_t)rank << 32 | (uint32_t)world);
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull; /* splitmix64's finish */
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

glm_status engine_open_cache(glm_engine *e, glm_error *err)
{
    const glm_engine_params *p = &e->params;
    pc_free(e->cache);
    e->cache = NULL;
    int64_t budget = cache_budget(p);
    const backend_ops *ops = e->be.ops;
    if (budget <= 0 || !ops->snapshot_size || !ops->snapshot_save || !ops->snapshot_load)
        return GLM_OK;
    const char *dir = p->prompt_cache_dir && *p->prompt_cache_dir ? p->prompt_cache_dir : NULL;
    uint64_t id = 0, disk = disk_budget(p);
    if (dir && model_key(e->model, &id, err) != GLM_OK)
        return err ? err->status : GLM_ERR_IO;
    if (e->rank >= 0)
        id = rank_key(id, e->rank, e->world);
    char tag[32] = "";
    if (e->rank >= 0)
        snprintf(tag, sizeof tag, ".rank%dof%d", e->rank, e->world);
    e->cache = pc_new_tagged((size_t)budget, dir, id, tag, err);
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
    if (p->peer && e->draft == SPEC_MTP)
        return glm_error_set(err, GLM_ERR_UNSUPPORTED, "draft = mtp runs on one rank only (the MTP "
                             "layer is not split between ranks); with --peer use draft = copy or "
                             "off (config or GLMCHAT_DRAFT)");
    if (p->peer && e->be.ops->verify && !e->be.ops->verifies_over_ranks)
        return glm_error_set(err, GLM_ERR_UNSUPPORTED, "the %s backend verifies drafts on one rank "
                             "only; with --peer set draft = off (config or GLMCHAT_DRAFT), or run "
                             "the ranks with --backend cpu", e->be.ops->name);
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
    int one_part = (e->be.ops->cache_format(e->be.impl) & BACKEND_ONE_PART) != 0;
    engine_logf(&e->log, GLM_LOG_INFO, "engine: %s backend%s, context %d tokens, kv cache %s, "
                "dense %s, drafting %s, prompt cache %s, prefill products %s", e->be.ops->name,
                p->peer ? " (rank 0 of two)" : "", s->context, kv_cache_name(s->kv_cache),
                s->dense == GLM_DENSE_Q4 ? "q4" : "bf16", drafts[spec_mode_of(p->draft)], cache,
                one_part ? "in one fp16 part (cuda_gemm onepart)" : "exact");
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
        st = p->peer ? engine_split(e, 0, 1 + tp_group_count_peers(p->peer), err)
                     : backend_open(e->model, p, &e->be, err);
    if (st == GLM_OK)
        st = choose_draft(e, p, err);
    /* split (a head of several ranks): this rank's part of each state; every worker keeps and
     * restores its own part as the head tells it (mirror_keep, mirror_restore) */
    if (st == GLM_OK)
        st = engine_open_cache(e, err);
    if (st != GLM_OK) {
        glm_engine_close(e);
        return NULL;
    }
    log_settings(e, p);
    if (!p->peer)
        return e;
    if (mirror_connect(e, p, err) != GLM_OK) {
        glm_engine_close(e);
        return NULL;
    }
    return e;
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

const glm_model *engine_model(const glm_engine *e)
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

int glm_engine_vocab(const glm_engine *e)
{
    return e->model->cfg.vocab_size;
}

void glm_engine_step_traffic(const glm_engine *e, int context, double *bytes, double *flops)
{
    glm_traffic_table t;
    glm_model_traffic(e->model, context, GLM_CACHE_F32, &t);
    *bytes = glm_traffic_bytes(&t);
    *flops = glm_traffic_flops(&t);
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
glm_status engine_load_mask(glm_engine *e, glm_error *err)
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
