/* mtp.c: the MTP layer on the CUDA backend (architecture.md 2.8): its cache kept in step with the
 * main state after every forward chunk, at marks, truncates and rewinds, and its greedy drafts
 * chained through the block (cuda_forward_mtp), as the CPU backend's cpu/mtp.c does. */
#ifdef HAVE_CUDA
#include <stdlib.h>
#include <string.h>

#include "cuda/cuda_internal.h"
#include "sampler.h"

int cuda_mtp_on(const cuda_state *s)
{
    return s->be->w.has_mtp && !s->coll.all_reduce;
}

glm_status cuda_mtp_new(cuda_state *s, glm_error *err)
{
    cu_mtp_state *m = &s->mtp;
    size_t D = (size_t)s->be->m->cfg.hidden_size, chunk = (size_t)s->be->chunk,
           rows = chunk * D * sizeof(float);
    m->mark_n = -1;
    if (!s->be->w.has_mtp)
        return GLM_OK;
    float **bufs[] = {&m->kept, &m->fresh, &m->h_in, &m->x, &m->g};
    int bad = 0;
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs && !bad; i++)
        bad = kern_malloc((void **)bufs[i], rows) != 0;
    bad = bad || kern_malloc((void **)&m->cat, 2 * rows) || kern_malloc((void **)&m->zero, D * 4) ||
          kern_memset(m->zero, 0, D * 4) || kern_malloc((void **)&m->mark_h, D * 4) ||
          kern_malloc((void **)&m->d_pos, sizeof(int)) ||
          kern_malloc((void **)&m->d_tok, chunk * sizeof(int32_t)) ||
          eng_host_alloc((void **)&m->h_pos, sizeof(int)) ||
          eng_host_alloc((void **)&m->h_tok, chunk * sizeof(int32_t)) || kern_sync();
    if (bad)
        return glm_error_set(err, GLM_ERR_NOMEM, "out of GPU memory for the MTP layer's rows "
                             "(%zu bytes)", 8 * rows);
    return GLM_OK;
}

static void cache_free(eng_cache *c)
{
    kern_free(c->rows);
    kern_free(c->scale);
    c->rows = NULL;
    c->scale = NULL;
}

void cuda_mtp_free(cuda_state *s)
{
    cu_mtp_state *m = &s->mtp;
    cache_free(&m->cache.latent);
    cache_free(&m->cache.idx_key);
    cache_free(&m->cache.idx_gate);
    cache_free(&m->cache.pool_key);
    float *dev[] = {m->kept, m->fresh, m->h_in, m->x, m->g, m->cat, m->zero, m->mark_h};
    for (size_t i = 0; i < sizeof dev / sizeof *dev; i++)
        kern_free(dev[i]);
    kern_free(m->d_pos);
    kern_free(m->d_tok);
    eng_host_free(m->h_pos);
    eng_host_free(m->h_tok);
    memset(m, 0, sizeof *m);
}

void cuda_mtp_reset(cuda_state *s)
{
    s->mtp.n = 0;
    s->mtp.kept_n = 0;
}

const float *cuda_mtp_kept_row(const cuda_state *s, int p)
{
    const cu_mtp_state *m = &s->mtp;
    if (p < m->kept_base || p >= m->kept_base + m->kept_n)
        return NULL;
    return m->kept + (size_t)(p - m->kept_base) * s->be->m->cfg.hidden_size;
}

/* Runs the block over T rows from position pos (tokens on the host, h rows from h_in's row r0)
 * and syncs. */
static glm_status run_block(cuda_state *s, const int32_t *tokens, int pos, int r0, int T,
                            int want_logits, glm_error *err)
{
    cuda_backend *be = s->be;
    cu_mtp_state *m = &s->mtp;
    memcpy(m->h_tok, tokens, (size_t)T * sizeof *tokens);
    *m->h_pos = pos;
    int rc = eng_copy_async(m->d_tok, m->h_tok, (size_t)T * sizeof(int32_t), be->stream);
    if (!rc)
        rc = eng_copy_async(m->d_pos, m->h_pos, sizeof(int), be->stream);
    if (rc)
        return cuda_fail(err, "copying the MTP layer's tokens in", rc);
    glm_error ferr = {0};
    const float *h = m->h_in + (size_t)r0 * s->be->m->cfg.hidden_size;
    rc = cuda_forward_mtp(s, h, T, pos == 0, want_logits, &ferr);
    int sync = eng_stream_sync(be->stream);
    if (rc) {
        eng_last_error();
        if (err)
            *err = ferr;
        return ferr.status ? ferr.status : GLM_ERR_BACKEND;
    }
    return sync ? cuda_fail(err, "the MTP layer", sync) : GLM_OK;
}

int cuda_mtp_stage(cuda_state *s, int r0, int T)
{
    cuda_backend *be = s->be;
    const glm_config *c = &be->m->cfg;
    /* the chunk's final-normed rows, as the main head computes them */
    return eng_stream_mean_norm(s->mtp.fresh + (size_t)r0 * c->hidden_size, be->s.X,
                                be->w.final_norm, T, c->hc_mult, c->hidden_size, c->rms_norm_eps,
                                be->stream);
}

glm_status cuda_mtp_catch_up(cuda_state *s, const int32_t *tokens, int pos0, int T, glm_error *err)
{
    if (!cuda_mtp_on(s))
        return GLM_OK;
    int rc = cuda_mtp_stage(s, 0, T);
    if (rc) {
        s->mtp.n = -1;
        return cuda_fail(err, "the MTP layer's input rows", rc);
    }
    return cuda_mtp_catch_up_staged(s, tokens, pos0, T, err);
}

glm_status cuda_mtp_catch_up_staged(cuda_state *s, const int32_t *tokens, int pos0, int T,
                                    glm_error *err)
{
    if (!cuda_mtp_on(s))
        return GLM_OK;
    cuda_backend *be = s->be;
    cu_mtp_state *m = &s->mtp;
    const glm_config *c = &be->m->cfg;
    int D = c->hidden_size, rc = 0;
    size_t row = (size_t)D * sizeof(float);
    void *st = be->stream;
    const float *prev = pos0 > 0 ? cuda_mtp_kept_row(s, pos0 - 1) : NULL;
    glm_status gs = GLM_OK;
    if (m->n == (pos0 > 0 ? pos0 - 1 : 0) && (pos0 == 0 || prev)) {
        /* rows: h_{pos0-1} with tokens[0], then h_{pos0+t} with tokens[t+1] */
        int rows = pos0 > 0 ? T : T - 1;
        if (pos0 > 0) {
            rc = eng_copy_async(m->h_in, prev, row, st);
            if (!rc && T > 1)
                rc = eng_copy_async(m->h_in + D, m->fresh, (size_t)(T - 1) * row, st);
        } else if (rows > 0) {
            rc = eng_copy_async(m->h_in, m->fresh, (size_t)rows * row, st);
        }
        if (rc) {
            m->n = -1;
            return cuda_fail(err, "the MTP layer's input rows", rc);
        }
        /* a verification window (be->rowwise) in groups of the decode path's rows, so that its
         * rows are the block's one-token steps bit for bit, as the main forward's are */
        const int32_t *tk = pos0 > 0 ? tokens : tokens + 1;
        int group = be->rowwise ? CUDA_DECODE_T : rows;
        for (int r0 = 0; r0 < rows; r0 += group) {
            int g = rows - r0 < group ? rows - r0 : group;
            if ((gs = run_block(s, tk + r0, m->n + r0, r0, g, 0, err))) {
                m->n = -1;
                return gs;
            }
        }
        m->n += rows;
    } else {
        m->n = -1; /* lost step (a state the block never saw): no drafts until a reset */
    }
    if ((rc = eng_stream_sync(st))) {
        m->n = -1;
        return cuda_fail(err, "the MTP layer's input rows", rc);
    }
    float *t = m->kept;
    m->kept = m->fresh;
    m->fresh = t;
    m->kept_base = pos0;
    m->kept_n = T;
    return GLM_OK;
}

glm_status cuda_mtp_mark(cuda_state *s, glm_error *err)
{
    cu_mtp_state *m = &s->mtp;
    const float *last = s->n > 0 ? cuda_mtp_kept_row(s, s->n - 1) : NULL;
    m->mark_n = -1;
    if (!cuda_mtp_on(s) || !last || m->n != s->n - 1)
        return GLM_OK;
    size_t row = (size_t)s->be->m->cfg.hidden_size * sizeof(float);
    int rc = eng_copy_async(m->mark_h, last, row, s->be->stream);
    if (!rc)
        rc = eng_stream_sync(s->be->stream);
    if (rc)
        return cuda_fail(err, "saving the MTP layer's row at the mark", rc);
    m->mark_n = m->n;
    return GLM_OK;
}

glm_status cuda_mtp_truncate(cuda_state *s, int n, glm_error *err)
{
    cu_mtp_state *m = &s->mtp;
    if (!cuda_mtp_on(s))
        return GLM_OK;
    if (m->mark_n != n - 1 || m->n < n - 1) {
        m->n = -1;
        return GLM_OK;
    }
    /* the block's rows before the mark are still its own; h of n-1 comes back from the mark */
    size_t row = (size_t)s->be->m->cfg.hidden_size * sizeof(float);
    int rc = eng_copy_async(m->kept, m->mark_h, row, s->be->stream);
    if (!rc)
        rc = eng_stream_sync(s->be->stream);
    if (rc) {
        m->n = -1;
        return cuda_fail(err, "restoring the MTP layer's row at the mark", rc);
    }
    m->n = n - 1;
    m->kept_base = n - 1;
    m->kept_n = 1;
    return GLM_OK;
}

void cuda_mtp_rewind(cuda_state *s, int n)
{
    /* the window's final-normed rows are kept: h of n-1 is among them; rows past n-1 are
     * rewritten by the next catch-up, and pool keys are remade as their pools complete */
    if (s->mtp.n > n - 1)
        s->mtp.n = n - 1;
}

glm_status cuda_mtp_draft(cuda_state *s, int32_t next, int32_t *out, int max, int *n_out,
                          glm_error *err)
{
    cuda_backend *be = s->be;
    cu_mtp_state *m = &s->mtp;
    const glm_config *c = &be->m->cfg;
    int D = c->hidden_size, V = c->vocab_size;
    *n_out = 0;
    const float *last = s->n > 0 ? cuda_mtp_kept_row(s, s->n - 1) : NULL;
    if (!cuda_mtp_on(s) || !last || m->n != s->n - 1 || max <= 0)
        return GLM_OK;
    glm_status st = backend_check_tokens(c, &next, 1, err);
    if (st)
        return st;
    if (m->n + max > be->context) /* the block's rows stay inside the context */
        max = be->context - m->n;
    if (max <= 0 || (st = cuda_state_reserve(s, m->n + max, err)))
        return st;
    int rc = eng_copy_async(m->h_in, last, (size_t)D * sizeof(float), be->stream);
    if (rc)
        return cuda_fail(err, "the MTP layer's input row", rc);
    int32_t tok = next;
    for (int k = 0; k < max; k++) {
        if ((st = run_block(s, &tok, m->n + k, 0, 1, 1, err)))
            return st; /* m->n is untouched: the drafted rows are rewritten by the next catch-up */
        rc = eng_copy_async(s->h_logits, be->s.logits, (size_t)V * sizeof(float), be->stream);
        /* chained: the head-normed row is the next h */
        if (!rc)
            rc = eng_copy_async(m->h_in, m->g, (size_t)D * sizeof(float), be->stream);
        if (!rc)
            rc = eng_stream_sync(be->stream);
        if (rc)
            return cuda_fail(err, "the MTP layer's logits", rc);
        tok = glm_argmax(s->h_logits, V);
        out[(*n_out)++] = tok;
    }
    return GLM_OK;
}
#endif
