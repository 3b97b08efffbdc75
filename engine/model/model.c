/* model.c: opens a model directory (config, generation config, safetensors, weights) and
 * closes it; the one place that knows what a complete model directory holds. */
#include "model/model.h"

#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model/exl3_load.h"

#define MAX_EXPERTS_PROBED 65536

/* A weight present as a plain tensor or as an EXL3 module. */
static int has_weight(const st_model *m, const char *name)
{
    return st_find(m, name) || exl3_is_stored(m, name);
}

static glm_status contradiction(glm_error *err, const char *cfg_path, const char *key, int given,
                                const char *file, const char *what, int found)
{
    return glm_error_set(err, GLM_ERR_FORMAT, "%s: field text_config.%s is %d, but %s holds %s "
                         "%d; the config contradicts the weights (fix the config or the "
                         "checkpoint)", cfg_path, key, given, file, what, found);
}

/* index_kpool from the first indexer's compress_ape [kpool, index_head_dim]. */
static glm_status kpool_from_tensors(glm_config *c, const st_model *m, const char *prefix,
                                     const char *cfg_path, glm_error *err)
{
    char n[512];
    for (int i = 0; i < c->num_layers; i++) {
        if (c->attn[i] != GLM_ATTN_DSA || c->indexer_shared[i])
            continue;
        snprintf(n, sizeof n, "%slayers.%d.self_attn.indexer.index_kpool_compress_ape", prefix, i);
        const st_tensor *t = st_find(m, n);
        if (!t || t->ndim != 2 || t->shape[0] < 1 || t->shape[0] > INT_MAX)
            return GLM_OK; /* the binder names what is wrong with it */
        int kp = (int)t->shape[0];
        if (c->index_kpool_given && kp != c->index_kpool) {
            char what[600];
            snprintf(what, sizeof what, "%s of shape [%" PRId64 ", %" PRId64 "], an index_kpool of",
                     t->name, t->shape[0], t->shape[1]);
            return contradiction(err, cfg_path, "index_kpool", c->index_kpool, t->file, what, kp);
        }
        if (kp > 64 || c->index_topk % kp)
            return glm_error_set(err, GLM_ERR_UNSUPPORTED, "%s: tensor %s gives index_kpool %d, "
                                 "which glmchat cannot run with index_topk %d (at most 64, and a "
                                 "divisor of index_topk)", t->file, t->name, kp, c->index_topk);
        c->index_kpool = kp;
        return GLM_OK;
    }
    return GLM_OK;
}

/* The routed experts of the first MoE layer, counted by name (plain or EXL3). */
static glm_status experts_from_tensors(glm_config *c, const st_model *m, const char *prefix,
                                       const char *cfg_path, glm_error *err)
{
    char n[512];
    for (int i = 0; i < c->num_layers; i++) {
        if (!c->moe[i])
            continue;
        int e = 0;
        for (; e < MAX_EXPERTS_PROBED; e++) {
            snprintf(n, sizeof n, "%slayers.%d.mlp.experts.%d.gate_proj.weight", prefix, i, e);
            if (!has_weight(m, n))
                break;
        }
        if (e == 0)
            return GLM_OK; /* none at all: the binder names the first missing one */
        if (c->n_routed_experts_given && e != c->n_routed_experts) {
            char what[600];
            snprintf(what, sizeof what, "layer %d's routed experts (%slayers.%d.mlp.experts.0 "
                     "to .%d): a count of", i, prefix, i, e - 1);
            snprintf(n, sizeof n, "%slayers.%d.mlp.experts.0.gate_proj.weight", prefix, i);
            const st_tensor *t = st_find(m, n);
            if (!t) {
                snprintf(n, sizeof n, "%slayers.%d.mlp.experts.0.gate_proj.trellis", prefix, i);
                t = st_find(m, n);
            }
            return contradiction(err, cfg_path, "n_routed_experts", c->n_routed_experts,
                                 t ? t->file : "the checkpoint", what, e);
        }
        c->n_routed_experts = e;
        return GLM_OK;
    }
    return GLM_OK;
}

/* The MTP layer (layers.N): its presence sets num_nextn_predict_layers when the config is
 * silent, and a config of 0 beside an MTP layer is a contradiction. A config of 1 without the
 * layer stays allowed: converted checkpoints often drop it, and the engine drafts without it. */
static glm_status mtp_from_tensors(glm_config *c, const st_model *m, const char *prefix,
                                   const char *cfg_path, glm_error *err)
{
    char n[512];
    snprintf(n, sizeof n, "%slayers.%d.eh_proj.weight", prefix, c->num_layers);
    if (!has_weight(m, n))
        return GLM_OK;
    if (c->nextn_given && c->num_nextn_predict_layers == 0) {
        const st_tensor *t = st_find(m, n);
        return glm_error_set(err, GLM_ERR_FORMAT, "%s: field text_config.num_nextn_predict_layers "
                             "is 0, but %s holds an MTP layer (%s): 1; the config contradicts "
                             "the weights", cfg_path, t ? t->file : "the checkpoint", n);
    }
    if (!c->nextn_given)
        c->num_nextn_predict_layers = 1;
    return GLM_OK;
}

glm_status glm_config_from_tensors(glm_config *c, const st_model *m, const char *cfg_path,
                                   glm_error *err)
{
    const char *prefix = glm_weights_prefix(m);
    glm_status st = kpool_from_tensors(c, m, prefix, cfg_path, err);
    if (!st)
        st = experts_from_tensors(c, m, prefix, cfg_path, err);
    if (!st && c->num_layers < GLM_MAX_LAYERS)
        st = mtp_from_tensors(c, m, prefix, cfg_path, err);
    if (st)
        return st;
    if (c->num_experts_per_tok > c->topk_group * (c->n_routed_experts / c->n_group) ||
        c->n_routed_experts % c->n_group)
        return glm_error_set(err, GLM_ERR_FORMAT, "%s: the checkpoint holds %d routed experts a "
                             "layer, which num_experts_per_tok %d and n_group %d do not fit",
                             cfg_path, c->n_routed_experts, c->num_experts_per_tok, c->n_group);
    return GLM_OK;
}

glm_status model_required_tensors(const glm_config *c, const char *prefix, int with_mtp,
                                  glm_required_tensor **out, size_t *n, glm_error *err)
{
    glm_required_list l;
    glm_status st = glm_weights_list(c, prefix, with_mtp, &l, err);
    *out = st ? NULL : l.t;
    *n = st ? 0 : l.n;
    return st;
}

glm_model *glm_model_open(const char *dir, glm_error *err)
{
    glm_model *m = calloc(1, sizeof *m);
    if (!m || !(m->dir = strdup(dir))) {
        free(m);
        glm_error_set(err, GLM_ERR_NOMEM, "out of memory opening %s", dir);
        return NULL;
    }
    char where[PATH_MAX], cfg_path[PATH_MAX];
    snprintf(where, sizeof where, "%s/model.safetensors.index.json", dir);
    if (access(where, F_OK) != 0)
        snprintf(where, sizeof where, "%s/model.safetensors", dir);
    snprintf(cfg_path, sizeof cfg_path, "%s/config.json", dir);
    if (glm_config_load(&m->cfg, dir, err) || glm_generation_config_load(&m->gen, dir, err))
        goto fail;
    /* every id any of the three places calls an end of turn ends a reply */
    if (glm_eos_merge(m->cfg.eos, &m->cfg.n_eos, m->gen.eos, m->gen.n_eos)) {
        glm_error_set(err, GLM_ERR_FORMAT, "%s and generation_config.json together list more than "
                      "%d distinct eos_token_id values", cfg_path, GLM_MAX_EOS);
        goto fail;
    }
    memcpy(m->gen.eos, m->cfg.eos, sizeof m->gen.eos);
    m->gen.n_eos = m->cfg.n_eos;
    m->st = st_open_dir(dir, err);
    if (!m->st || glm_config_from_tensors(&m->cfg, m->st, cfg_path, err) ||
        glm_weights_bind(&m->w, &m->cfg, m->st, where, err))
        goto fail;
    return m;
fail:
    glm_model_close(m);
    return NULL;
}

void glm_model_close(glm_model *m)
{
    if (!m)
        return;
    glm_weights_free(&m->w);
    st_close(m->st);
    free(m->dir);
    free(m);
}
