/* state.c: a conversation's state in device memory for the CUDA backend: per KDA layer the conv
 * window and the fp32 recurrent state (and their copies at the mark), per DSA layer the latent and
 * indexer caches grown by doubling up to the context, the device position and token slots. */
#ifdef HAVE_CUDA
#include <stdlib.h>
#include <string.h>

#include "cuda/cuda_internal.h"

size_t cuda_conv_bytes(const glm_config *c)
{
    size_t n = (size_t)(c->kda_conv_kernel - 1) * 3 * c->kda_heads * c->kda_head_dim * sizeof(float);
    return n ? n : sizeof(float);
}

size_t cuda_rec_bytes(const glm_config *c)
{
    return (size_t)c->kda_heads * c->kda_head_dim * c->kda_head_dim * sizeof(float);
}

size_t cuda_value_bytes(int dtype)
{
    return dtype == ENG_CACHE_F32 ? 4 : dtype == ENG_CACHE_BF16 ? 2 : 1;
}

static void cache_free(eng_cache *c)
{
    kern_free(c->rows);
    kern_free(c->scale);
    c->rows = NULL;
    c->scale = NULL;
}

/* A cache of `rows` rows, keeping the first `keep` rows of old. */
static int cache_grow(eng_cache *c, int dtype, int width, size_t rows, size_t keep)
{
    eng_cache n = {.dtype = dtype, .width = width};
    size_t rb = (size_t)width * cuda_value_bytes(dtype);
    if (kern_malloc(&n.rows, rows * rb))
        return -1;
    if (dtype == ENG_CACHE_FP8 && kern_malloc((void **)&n.scale, rows * sizeof(float))) {
        kern_free(n.rows);
        return -1;
    }
    if (keep && c->rows) {
        if (eng_copy_async(n.rows, c->rows, keep * rb, NULL) ||
            (n.scale && eng_copy_async(n.scale, c->scale, keep * sizeof(float), NULL)) || kern_sync()) {
            cache_free(&n);
            return -1;
        }
    }
    cache_free(c);
    *c = n;
    return 0;
}

static void free_layers(float **p, int n)
{
    for (int i = 0; p && i < n; i++)
        kern_free(p[i]);
    free(p);
}

static float **new_layers(int n, size_t bytes)
{
    float **p = calloc((size_t)(n ? n : 1), sizeof *p);
    for (int i = 0; p && i < n; i++) {
        if (kern_malloc((void **)&p[i], bytes) || kern_memset(p[i], 0, bytes)) {
            free_layers(p, n);
            return NULL;
        }
    }
    return p;
}

void cuda_state_free(cuda_state *s)
{
    if (!s)
        return;
    const glm_config *c = &s->be->m->cfg;
    int nk = glm_config_count(c, GLM_ATTN_KDA), nd = glm_config_count(c, GLM_ATTN_DSA);
    free_layers(s->kda_conv, nk);
    free_layers(s->kda_S, nk);
    free_layers(s->mark_conv, nk);
    free_layers(s->mark_S, nk);
    for (int i = 0; s->dsa && i < nd; i++) {
        cache_free(&s->dsa[i].latent);
        cache_free(&s->dsa[i].idx_key);
        cache_free(&s->dsa[i].idx_gate);
        cache_free(&s->dsa[i].pool_key);
    }
    free(s->dsa);
    cuda_trail_free(s);
    cuda_mtp_free(s);
    kern_free(s->scores);
    kern_free(s->d_pos);
    kern_free(s->d_tokens);
    eng_host_free(s->h_pos);
    eng_host_free(s->h_tokens);
    eng_host_free(s->h_logits);
    kern_free(s->d_coll);
    eng_graph_free(s->graph);
    eng_event_free(s->layer_done[0]);
    eng_event_free(s->layer_done[1]);
    eng_event_free(s->copied[0]);
    eng_event_free(s->copied[1]);
    free(s);
}

cuda_state *cuda_state_new(cuda_backend *be, glm_error *err)
{
    const glm_config *c = &be->m->cfg;
    int nk = glm_config_count(c, GLM_ATTN_KDA), nd = glm_config_count(c, GLM_ATTN_DSA);
    cuda_state *s = calloc(1, sizeof *s);
    if (!s) {
        glm_error_set(err, GLM_ERR_NOMEM, "out of memory creating a session state");
        return NULL;
    }
    s->be = be;
    s->mark_n = -1;
    s->kda_conv = new_layers(nk, cuda_conv_bytes(c));
    s->kda_S = new_layers(nk, cuda_rec_bytes(c));
    s->dsa = calloc((size_t)(nd ? nd : 1), sizeof *s->dsa);
    /* the staging starts at a row of logits per rank (a decode step's, a draft's) and grows for
     * all-rows prefills and verification windows (cuda_state_staging): a chunk's worth for every
     * state would pin 2 x chunk x vocab floats of host memory each (1.2 GiB at GLM's vocabulary) */
    size_t V = (size_t)(c->vocab_size > c->hidden_size ? c->vocab_size : c->hidden_size);
    s->h_logits_cap = 2 * V;
    if (!s->kda_conv || !s->kda_S || !s->dsa || kern_malloc((void **)&s->d_pos, 2 * sizeof(int)) ||
        kern_malloc((void **)&s->d_tokens, (size_t)be->chunk * sizeof(int32_t)) ||
        eng_host_alloc((void **)&s->h_pos, 2 * sizeof(int)) ||
        eng_host_alloc((void **)&s->h_tokens, (size_t)be->chunk * sizeof(int32_t)) ||
        eng_host_alloc((void **)&s->h_logits, s->h_logits_cap * sizeof(float)) ||
        eng_fence_new(&s->layer_done[0]) || eng_fence_new(&s->layer_done[1]) ||
        eng_fence_new(&s->copied[0]) || eng_fence_new(&s->copied[1])) {
        cuda_state_free(s);
        glm_error_set(err, GLM_ERR_NOMEM, "out of GPU memory creating a session state (KDA "
                      "states %zu bytes a layer)", cuda_rec_bytes(c) + cuda_conv_bytes(c));
        return NULL;
    }
    glm_status st = cuda_mtp_new(s, err);
    if (!st)
        st = cuda_state_reserve(s, 256 < be->context ? 256 : be->context, err);
    if (st) {
        cuda_state_free(s);
        return NULL;
    }
    return s;
}

glm_status cuda_state_reserve(cuda_state *s, int need, glm_error *err)
{
    const glm_config *c = &s->be->m->cfg;
    if (need <= s->cap)
        return GLM_OK;
    if (need > s->be->context)
        return glm_error_set(err, GLM_ERR_ARG, "the conversation would hold %d tokens, past the "
                             "CUDA backend's context of %d (--context, context in the config or GLMCHAT_CONTEXT)", need,
                             s->be->context);
    int cap = s->cap ? s->cap : 256;
    while (cap < need)
        cap = cap > s->be->context / 2 ? s->be->context : cap * 2;
    int nd = glm_config_count(c, GLM_ATTN_DSA), kp = c->index_kpool, ID = c->index_head_dim;
    int dt = s->be->kv_dtype, di = s->be->kv_index_dtype;
    size_t keep = (size_t)s->n;
    for (int i = 0; i < nd; i++) {
        cu_dsa_cache *d = &s->dsa[i];
        if (cache_grow(&d->latent, dt, c->kv_lora_rank, (size_t)cap, keep) ||
            cache_grow(&d->idx_key, di, ID, (size_t)cap, keep) ||
            cache_grow(&d->idx_gate, di, ID, (size_t)cap, keep) ||
            cache_grow(&d->pool_key, di, ID, (size_t)cap / kp + 1, keep / kp))
            return glm_error_set(err, GLM_ERR_NOMEM, "out of GPU memory growing the attention "
                                 "cache to %d tokens", cap);
    }
    if (s->be->w.has_mtp) { /* the MTP layer's cache, grown with the main ones */
        cu_dsa_cache *d = &s->mtp.cache;
        size_t mk = s->mtp.n > 0 ? (size_t)s->mtp.n : 0;
        if (cache_grow(&d->latent, dt, c->kv_lora_rank, (size_t)cap, mk) ||
            cache_grow(&d->idx_key, di, ID, (size_t)cap, mk) ||
            cache_grow(&d->idx_gate, di, ID, (size_t)cap, mk) ||
            cache_grow(&d->pool_key, di, ID, (size_t)cap / kp + 1, mk / kp))
            return glm_error_set(err, GLM_ERR_NOMEM, "out of GPU memory growing the MTP layer's "
                                 "cache to %d tokens", cap);
    }
    kern_free(s->scores);
    s->scores = NULL;
    if ((nd || s->be->w.has_mtp) && kern_malloc((void **)&s->scores,
                          ENG_DSA_SCORE_FLOATS(CUDA_SCORE_ROWS, (size_t)cap / kp + 1) * sizeof(float)))
        return glm_error_set(err, GLM_ERR_NOMEM, "out of GPU memory for the indexer's scores");
    s->cap = cap;
    eng_graph_free(s->graph); /* it points at the old caches */
    s->graph = NULL;
    return GLM_OK;
}

glm_status cuda_state_staging(cuda_state *s, int T, int rows_out, glm_error *err)
{
    const glm_config *c = &s->be->m->cfg;
    size_t V = (size_t)c->vocab_size, D = (size_t)c->hidden_size;
    /* split_head's staging: the full rows, then every rank's padded part (2 x rows x V with two
     * ranks and an even vocabulary, as before) */
    int world = s->coll.world ? s->coll.world : 2;
    size_t widest = (size_t)cuda_plan_part_of((int64_t)V, 0, world).count;
    size_t need = (size_t)rows_out * (s->coll.all_gather ? V + (size_t)world * widest : V);
    if (s->coll.all_reduce && (size_t)world * T * D > need) /* every rank's partials (reduce) */
        need = (size_t)world * T * D;
    /* device collectives: every rank's rows of partial sums, or its padded logits and its own */
    size_t rows = CUDA_COLL_DEVICE_ROWS, dev = rows * (size_t)world * (D > widest ? D : widest) + rows * widest;
    if (s->coll.all_gather_device && s->d_coll_floats < dev) {
        int rc = eng_stream_sync(s->be->stream);
        kern_free(s->d_coll);
        s->d_coll = NULL;
        s->d_coll_floats = 0;
        if (rc || kern_malloc((void **)&s->d_coll, dev * sizeof(float)))
            return glm_error_set(err, GLM_ERR_NOMEM, "cannot allocate %zu bytes of GPU memory for "
                                 "the ranks' exchanges", dev * sizeof(float));
        s->d_coll_floats = dev;
        eng_graph_free(s->graph); /* it gathers into the old buffer */
        s->graph = NULL;
    }
    if (need <= s->h_logits_cap)
        return GLM_OK;
    float *grown = NULL;
    if (eng_stream_sync(s->be->stream) ||
        eng_host_alloc((void **)&grown, need * sizeof(float)))
        return glm_error_set(err, GLM_ERR_NOMEM, "cannot pin %zu bytes of host memory for the "
                             "logits of %d rows", need * sizeof(float), rows_out);
    eng_host_free(s->h_logits);
    s->h_logits = grown;
    s->h_logits_cap = need;
    eng_graph_free(s->graph); /* it copies into the old buffer */
    s->graph = NULL;
    return GLM_OK;
}

void cuda_state_reset(cuda_state *s)
{
    const glm_config *c = &s->be->m->cfg;
    int nk = glm_config_count(c, GLM_ATTN_KDA);
    for (int i = 0; i < nk; i++) {
        kern_memset(s->kda_conv[i], 0, cuda_conv_bytes(c));
        kern_memset(s->kda_S[i], 0, cuda_rec_bytes(c));
    }
    s->n = 0;
    s->trail_n = 0;
    s->mark_n = -1; /* a mark of the tokens before belongs to none of the next ones */
    cuda_mtp_reset(s);
}

/* Every KDA layer's conv and recurrent states into the mark's copies (to_mark) or back from
 * them, then a sync; nonzero on a failed copy. */
static int copy_kda_states(cuda_state *s, int to_mark)
{
    const glm_config *c = &s->be->m->cfg;
    int nk = glm_config_count(c, GLM_ATTN_KDA);
    for (int i = 0; i < nk; i++) {
        void *conv = s->kda_conv[i], *S = s->kda_S[i], *mconv = s->mark_conv[i], *mS = s->mark_S[i];
        if (eng_copy_async(to_mark ? mconv : conv, to_mark ? conv : mconv, cuda_conv_bytes(c),
                           s->be->stream) ||
            eng_copy_async(to_mark ? mS : S, to_mark ? S : mS, cuda_rec_bytes(c), s->be->stream))
            return -1;
    }
    return eng_stream_sync(s->be->stream);
}

glm_status cuda_state_mark(cuda_state *s, glm_error *err)
{
    const glm_config *c = &s->be->m->cfg;
    int nk = glm_config_count(c, GLM_ATTN_KDA);
    if (!s->mark_conv) {
        s->mark_conv = new_layers(nk, cuda_conv_bytes(c));
        s->mark_S = new_layers(nk, cuda_rec_bytes(c));
        if (!s->mark_conv || !s->mark_S) {
            free_layers(s->mark_conv, nk);
            free_layers(s->mark_S, nk);
            s->mark_conv = s->mark_S = NULL;
            return glm_error_set(err, GLM_ERR_NOMEM, "out of GPU memory saving a session state");
        }
    }
    if (copy_kda_states(s, 1))
        return glm_error_set(err, GLM_ERR_BACKEND, "copying the KDA states on the GPU failed");
    s->mark_n = s->n;
    return cuda_mtp_mark(s, err);
}

glm_status cuda_state_back_to_mark(cuda_state *s, glm_error *err)
{
    if (copy_kda_states(s, 0))
        return glm_error_set(err, GLM_ERR_BACKEND, "restoring the KDA states on the GPU failed");
    s->trail_n = 0;
    return GLM_OK;
}

glm_status cuda_state_truncate(cuda_state *s, int n, glm_error *err)
{
    if (n == s->n)
        return GLM_OK;
    if (n == 0) {
        cuda_state_reset(s);
        return GLM_OK;
    }
    if (n != s->mark_n || n > s->n)
        return glm_error_set(err, GLM_ERR_ARG, "cannot go back to %d tokens: the session holds %d "
                             "and kept the linear-attention state only at %d; run the prompt again",
                             n, s->n, s->mark_n);
    glm_status st = cuda_state_back_to_mark(s, err);
    if (st)
        return st;
    s->n = n; /* DSA rows past n are rewritten; pool keys are remade as their pools complete */
    return cuda_mtp_truncate(s, n, err);
}
#endif
