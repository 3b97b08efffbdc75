/* backend_cuda.c: the CUDA backend behind backend.h: checks for a GPU, plans the memory (and
 * refuses with the figures when it will not fit), uploads the weights, and runs prefill in chunks
 * and decode through a captured graph. Every setting comes in backend_settings (backend.c
 * resolves them from glm_engine_params): the context, the caches' dtypes, the dense weights'
 * format and the developers' switches (glm_cuda_params: indexer cache, graph, PDL, GEMM
 * algorithm). */
#include "backend.h"

#ifndef HAVE_CUDA
glm_status backend_open_cuda_with(const glm_model *m, const backend_settings *s, engine_backend *out,
                                  glm_error *err)
{
    (void)m;
    (void)s;
    (void)out;
    return glm_error_set(err, GLM_ERR_UNSUPPORTED, "this glmchat was built without CUDA "
                         "(configure found no nvcc); use --backend cpu, or rebuild with --with-cuda");
}
#else
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/cuda_internal.h"
#include "prefill_grid.h"
#include "session.h"

static void *cu_state_new(void *impl, glm_error *err)
{
    return cuda_state_new(impl, err);
}

static void cu_state_free(void *st)
{
    cuda_state_free(st);
}

static void cu_set_collective(void *st, const backend_collective *coll)
{
    cuda_state *s = st;
    if (coll)
        s->coll = *coll;
    else
        memset(&s->coll, 0, sizeof s->coll);
}

static void cu_set_cancel(void *st, const atomic_int *flag)
{
    ((cuda_state *)st)->cancel = flag;
}

static void cu_reset(void *st)
{
    cuda_state_reset(st);
}

static int cu_length(const void *st)
{
    return ((const cuda_state *)st)->n;
}

static glm_status cu_mark(void *st, glm_error *err)
{
    return cuda_state_mark(st, err);
}

static int cu_mark_length(const void *st)
{
    return ((const cuda_state *)st)->mark_n;
}

static glm_status cu_truncate(void *st, int n, glm_error *err)
{
    return cuda_state_truncate(st, n, err);
}

static glm_status run_chunk(cuda_state *s, const int32_t *tokens, int T, int all_rows, int want,
                            glm_error *err)
{
    cuda_backend *be = s->be;
    glm_status gs = cuda_state_staging(s, T, want ? (all_rows ? T : 1) : 0, err);
    if (gs)
        return gs;
    memcpy(s->h_tokens, tokens, (size_t)T * sizeof *tokens);
    *s->h_pos = s->n;
    /* the decode graph: one rank, or ranks whose exchanges stay on the GPU (captured with it) */
    int graph = !s->coll.all_reduce || cuda_coll_on_device(s, 1);
    if (T == 1 && want && !all_rows && graph && !be->graph_off) {
        glm_status st = cuda_decode_graph(s, err);
        if (st)
            return st;
    } else {
        int rc = eng_copy_async(s->d_tokens, s->h_tokens, (size_t)T * sizeof(int32_t), be->stream);
        if (!rc)
            rc = eng_copy_async(s->d_pos, s->h_pos, sizeof(int), be->stream);
        if (rc)
            return cuda_fail(err, "copying the tokens in", rc);
        glm_error ferr = {0};
        rc = cuda_forward(s, T, all_rows, want, &ferr);
        if (rc) {
            eng_stream_sync(be->stream);
            eng_last_error();
            if (err)
                *err = ferr;
            return ferr.status ? ferr.status : (rc == -2 ? GLM_ERR_PEER : GLM_ERR_BACKEND);
        }
    }
    /* device gathers wait on the other ranks' GPUs: a bounded wait that gives up (and aborts
     * them) when a rank fails, where a stream sync would wait forever */
    if (s->coll.device_wait && cuda_coll_on_device(s, T))
        return s->coll.device_wait(s->coll.user, be->stream, err);
    int rc = eng_stream_sync(be->stream);
    return rc ? cuda_fail(err, "the forward pass", rc) : GLM_OK;
}

/* The chunks follow prefill_grid.h (the CPU backend's emulation of the one-part products reads
 * the same grid): the products pick their kernel by chunk size, the GEMV up to 8 rows, a GEMM
 * above, so a prefill resumed from a kept state runs every row as a full prefill does. */
_Static_assert(PREFILL_GEMV_ROWS == CUDA_DECODE_T, "the decode forms take the GEMV's rows");

static glm_status cu_prefill(void *impl, void *st, const int32_t *tokens, int n, float *logits_out,
                             int all_rows, glm_error *err)
{
    cuda_backend *be = impl;
    cuda_state *s = st;
    const glm_config *c = &be->m->cfg;
    glm_status rs = backend_check_tokens(c, tokens, n, err);
    if (rs)
        return rs;
    rs = cuda_state_reserve(s, s->n + n, err);
    if (rs)
        return rs;
    /* the GEMM mode is process-wide: an engine opened later with another cuda_gemm would run this
     * one's prefill products in its form, under this one's format tag and snapshots */
    if (eng_gemm_one_part() != be->one_part)
        return glm_error_set(err, GLM_ERR_BACKEND, "another CUDA engine in this process runs the "
                             "prefill products %s (cuda_gemm); this one was opened to run them %s: "
                             "close one of them", be->one_part ? "exactly" : "in one fp16 part",
                             be->one_part ? "in one fp16 part" : "exactly");
    s->trail_n = 0; /* a window kept by cuda_verify ends here */
    size_t V = (size_t)c->vocab_size;
    for (int done = 0; done < n;) {
        int T = prefill_chunk_len(s->n, n - done, be->chunk);
        int last = done + T == n, want = logits_out && (all_rows || last);
        s->stopped_at_layer = 0;
        glm_status cs = run_chunk(s, tokens + done, T, all_rows, want, err);
        /* canceled within the chunk: the layers that ran moved the KDA states on, which a mark
         * made at this length puts back; anything else (a failed exchange) forgets the mark, so
         * the caller resets the state */
        if (cs == GLM_ERR_CANCELED && s->stopped_at_layer && s->mark_n == s->n && s->mark_conv) {
            glm_error rerr = {0};
            if (cuda_state_back_to_mark(s, &rerr)) {
                s->mark_n = -1;
                if (err)
                    *err = rerr;
                return rerr.status;
            }
        } else if (cs) {
            s->mark_n = -1;
        }
        if (cs)
            return cs;
        if (want && all_rows)
            memcpy(logits_out + (size_t)done * V, s->h_logits, (size_t)T * V * sizeof(float));
        else if (want)
            memcpy(logits_out, s->h_logits, V * sizeof(float));
        if ((cs = cuda_mtp_catch_up(s, tokens + done, s->n, T, err)))
            return cs;
        s->n += T;
        done += T;
    }
    return GLM_OK;
}

static size_t cu_snapshot_size(const void *st)
{
    return cuda_snapshot_size(st);
}

static glm_status cu_snapshot_save(const void *st, void *buf, size_t n, glm_error *err)
{
    return cuda_snapshot_save(st, buf, n, err);
}

static glm_status cu_snapshot_load(void *st, const void *buf, size_t n, glm_error *err)
{
    return cuda_snapshot_load(st, buf, n, err);
}

static glm_status cu_verify(void *impl, void *st, const int32_t *tokens, int n, float *logits_all,
                            glm_error *err)
{
    (void)impl;
    return cuda_verify(st, tokens, n, logits_all, err);
}

static glm_status cu_rewind(void *st, int n, glm_error *err)
{
    return cuda_state_rewind(st, n, err);
}

static glm_status cu_mtp_draft(void *impl, void *st, int32_t next, int32_t *out, int max,
                               int *n_out, glm_error *err)
{
    (void)impl;
    return cuda_mtp_draft(st, next, out, max, n_out, err);
}

static void cu_close(void *impl)
{
    cuda_backend *be = impl;
    if (!be)
        return;
    if (be->log.fn && kern_log_user() == be->log.user)
        kern_set_log(NULL, NULL); /* the hook's user may go with this engine */
    kern_free(be->s.base);
    kern_free(be->route_done);
    for (int i = 0; i < CUDA_PROF_MAX; i++)
        eng_event_free(be->prof.ev[i]);
    cu_weights_free(&be->w);
    eng_event_free(be->fork);
    eng_event_free(be->join);
    eng_stream_free(be->side);
    eng_stream_free(be->stream);
    free(be);
}

/* Both caches' types and the dense weights' format for the two-rank identity (plan.h numbers them as backend.h's
 * BACKEND_KV_* do). */
static uint32_t cu_cache_format(const void *impl)
{
    _Static_assert((int)CUDA_KV_F32 == (int)BACKEND_KV_F32 &&
                   (int)CUDA_KV_BF16 == (int)BACKEND_KV_BF16 &&
                   (int)CUDA_KV_FP8 == (int)BACKEND_KV_FP8, "cache type numbers differ");
    const cuda_backend *be = impl;
    uint32_t chunk_code = 1;
    while ((128 << (chunk_code - 1)) < be->chunk)
        chunk_code++;
    _Static_assert((128LL << ((1 << BACKEND_CHUNK_BITS) - 2)) >= GLM_CUDA_CHUNK_LIMIT,
                   "backend.h's chunk bits hold the largest chunk");
    return BACKEND_KV(be->kv_dtype, be->kv_index_dtype) | (be->dense_q4 ? BACKEND_DENSE_Q4 : 0) |
           (be->one_part ? BACKEND_ONE_PART : 0) | chunk_code << BACKEND_CHUNK_SHIFT;
}

static int cu_prefill_rows(const void *impl)
{
    return ((const cuda_backend *)impl)->chunk;
}

static const backend_ops cuda_ops = {
    .name = "cuda",
    .state_new = cu_state_new,
    .state_free = cu_state_free,
    .state_set_collective = cu_set_collective,
    .state_set_cancel = cu_set_cancel,
    .state_reset = cu_reset,
    .state_length = cu_length,
    .state_mark = cu_mark,
    .state_mark_length = cu_mark_length,
    .state_truncate = cu_truncate,
    .prefill = cu_prefill,
    .prefill_rows = cu_prefill_rows,
    .snapshot_size = cu_snapshot_size,
    .snapshot_save = cu_snapshot_save,
    .snapshot_load = cu_snapshot_load,
    .close = cu_close,
    .verify = cu_verify,
    .state_rewind = cu_rewind,
    .verifies_over_ranks = 1,
    .mtp_draft = cu_mtp_draft,
    .cache_format = cu_cache_format,
};

static int kv_dtype_of(glm_kv_cache k)
{
    return k == GLM_KV_CACHE_BF16 ? CUDA_KV_BF16 : k == GLM_KV_CACHE_F32 ? CUDA_KV_F32 : CUDA_KV_FP8;
}

/* The kernels' process-wide switches and log hook follow the backend opened last. */
static glm_status apply_kernel_switches(const backend_settings *set, glm_error *err)
{
    static const int gemm_modes[] = {ENG_GEMM_ONEPART, ENG_GEMM_FIXED, ENG_GEMM_SHOW, ENG_GEMM_NOSPLIT,
                                     ENG_GEMM_CUBLAS, ENG_GEMM_THREE, ENG_GEMM_ONEPART};
    _Static_assert(sizeof gemm_modes / sizeof *gemm_modes == GLM_CUDA_GEMM_ONEPART + 1,
                   "a GEMM mode without its kernel mode");
    _Static_assert(GLM_LOG_ERROR == 0 && GLM_LOG_WARN == 1 && GLM_LOG_INFO == 2 && GLM_LOG_DEBUG == 3,
                   "kern_log's levels are glm_log_level's");
    if (eng_gemm_set_mode(gemm_modes[set->cuda.gemm]))
        return glm_error_set(err, GLM_ERR_ARG, "cuda.gemm %d has no kernel mode", (int)set->cuda.gemm);
    kern_set_pdl(!set->cuda.pdl_off);
    if (set->log.fn)
        kern_set_log(set->log.fn, set->log.user);
    return GLM_OK;
}

static glm_status read_settings(cuda_backend *be, const backend_settings *set, glm_error *err)
{
    be->kv_dtype = kv_dtype_of(set->kv_cache);
    be->kv_index_dtype = set->cuda.kv_index == GLM_KV_CACHE_DEFAULT ? be->kv_dtype
                                                                     : kv_dtype_of(set->cuda.kv_index);
    be->dense_q4 = set->dense == GLM_DENSE_Q4;
    be->one_part = backend_cuda_one_part(set->cuda.gemm);
    be->tap = set->tap;
    be->graph_off = set->cuda.graph_off || set->tap.fn; /* a graph would skip the tap's copies */
    be->log = set->log;
    be->context = set->context;
    return apply_kernel_switches(set, err);
}

static glm_status bind_scratch(cuda_backend *be, glm_error *err)
{
    size_t off[CUDA_SCRATCH_BUFFERS];
    size_t bytes = cuda_plan_scratch(&be->m->cfg, be->chunk, be->dense_experts, off);
    int rc = kern_malloc(&be->s.base, bytes);
    if (rc)
        return glm_error_set(err, GLM_ERR_NOMEM, "cannot place the %zu-byte forward scratch on "
                             "the GPU: %s", bytes, kern_error_string(rc));
    char *b = be->s.base;
    cu_scratch *s = &be->s;
    float **f[] = {&s->X, &s->c, &s->u, &s->y, &s->flat, &s->mu, &s->pre, &s->post, &s->comb,
                   &s->q, &s->k, &s->v, &s->qc, &s->kc, &s->vc, &s->g, &s->o, &s->gate, &s->lo,
                   &s->beta, &s->qa, &s->qd, &s->kvl, &s->wk, &s->ig, &s->iq, &s->hw, &s->qt,
                   &s->ot, &s->od};
    int nf = (int)(sizeof f / sizeof f[0]);
    for (int i = 0; i < nf; i++)
        *f[i] = (float *)(b + off[i]);
    s->sel_idx = (int32_t *)(b + off[nf]);
    s->sel_count = (int *)(b + off[nf + 1]);
    float **g[] = {&s->fg, &s->fu, &s->rlog, &s->rscratch, &s->rw, &s->mh, &s->mye, &s->ffn_y};
    int ng = (int)(sizeof g / sizeof g[0]);
    for (int i = 0; i < ng; i++)
        *g[i] = (float *)(b + off[nf + 2 + i]);
    s->rids = (int32_t *)(b + off[nf + 2 + ng]);
    s->part = (float *)(b + off[nf + 3 + ng]);
    _Static_assert(sizeof f / sizeof f[0] + 4 + sizeof g / sizeof g[0] == CUDA_SCRATCH_ATTEND_PART,
                   "plan.h names the attention's partial sums by their place in the layout");
    s->apart = (float *)(b + off[CUDA_SCRATCH_ATTEND_PART]);
    s->hfin = (float *)(b + off[nf + 5 + ng]);
    s->logits = (float *)(b + off[CUDA_SCRATCH_LOGITS]);
    s->iq_shift = (int *)(b + off[CUDA_SCRATCH_IQ_SHIFT]);
    _Static_assert(sizeof f / sizeof f[0] + 6 + sizeof g / sizeof g[0] == CUDA_SCRATCH_LOGITS &&
                       CUDA_SCRATCH_IQ_SHIFT + 1 == CUDA_SCRATCH_BUFFERS,
                   "plan.h names the logits and the shifts by their place in the layout");
    void *done = NULL;
    if ((rc = kern_malloc(&done, sizeof(unsigned))) == 0)
        be->route_done = done;
    if (rc || (rc = kern_memset(done, 0, sizeof(unsigned))))
        return glm_error_set(err, GLM_ERR_NOMEM, "cannot place the router's block count on the "
                             "GPU: %s", kern_error_string(rc));
    return GLM_OK;
}

/* The plan at a prefill chunk of `chunk` rows: the weights with their workspaces at that chunk,
 * the MTP block's (one rank only), the caches and drafting's part; or the MTP block's refusal. */
static glm_status plan_at(cuda_backend *be, const backend_settings *set, int ranks, int chunk,
                          cuda_plan *p, glm_error *err)
{
    const glm_model *m = be->m;
    int mtp = m->w.has_mtp && ranks == 1;
    size_t mtp_bytes = 0;
    glm_status st = mtp ? cu_weights_put_mtp(m, be->dense_q4, chunk, NULL, 1, &mtp_bytes, err) : GLM_OK;
    if (st)
        return st;
    cuda_plan_make(&m->cfg, ranks, be->context, be->kv_dtype, be->kv_index_dtype, chunk,
                   be->dense_experts, cu_weights_bytes(m, be->dense_q4, chunk) + mtp_bytes, p);
    p->chunk_given = set->cuda.chunk > 0;
    cuda_plan_drafting(p, &m->cfg, set->draft_rows, mtp);
    return GLM_OK;
}

typedef struct plan_need {
    cuda_backend *be;
    const backend_settings *set;
    int ranks;
} plan_need;

/* cuda_plan_pick_chunk's measure: the plan's device bytes at a chunk (a refusal: all of them). */
static size_t need_at(void *ctx, int chunk)
{
    plan_need *n = ctx;
    cuda_plan p;
    glm_error e = {0};
    return plan_at(n->be, n->set, n->ranks, chunk, &p, &e) ? SIZE_MAX : p.total;
}

/* What the kernels need of the GPU, said by name before anything is placed: code for its
 * architecture in this build, and (for a model with KDA layers) thread-block clusters for the KDA
 * decode step, the one kernel launched in clusters. */
static glm_status check_device(const glm_config *c, glm_error *err)
{
    char name[160] = "this GPU";
    kern_device_describe(0, name, (int)sizeof name);
    int rc = kern_device_runs_build();
    if (rc) {
        int cc = 0;
        kern_device_capability(0, &cc); /* 0 where it cannot be read: the error below says so */
        if (cc > 0 && cc < 90)
            return glm_error_set(err, GLM_ERR_UNSUPPORTED, "--backend cuda: %s is older than "
                                 "sm_90; glmchat's kernels need sm_90 or newer (thread-block "
                                 "clusters); use --backend cpu", name);
        if (cc > 0 && (rc == KERN_ERR_NO_KERNEL_IMAGE || rc == KERN_ERR_INVALID_DEVICE_FUNCTION))
            return glm_error_set(err, GLM_ERR_UNSUPPORTED, "--backend cuda: glmchat's kernels "
                                 "were built for sm " GLM_CUDA_ARCHS ", not for %s (%s); rebuild "
                                 "for it (./configure CUDA_ARCHS=\"%d\" && make), or use "
                                 "--backend cpu", name, kern_error_string(rc), cc);
        return glm_error_set(err, GLM_ERR_BACKEND, "--backend cuda: asking whether glmchat's "
                             "kernels run on %s failed: %s", name, kern_error_string(rc));
    }
    int kda = 0;
    for (int li = 0; li < c->num_layers; li++)
        kda |= c->attn[li] == GLM_ATTN_KDA;
    if (!kda)
        return GLM_OK;
    int clusters = 0;
    rc = eng_kda_step_clusters(c->kda_heads, c->kda_head_dim, &clusters);
    if (rc || clusters < 1)
        return glm_error_set(err, GLM_ERR_UNSUPPORTED, "--backend cuda: the KDA decode step runs "
                             "in thread-block clusters of %d blocks sharing their shared memory, "
                             "and %s cannot launch them (%s); use --backend cpu",
                             (c->kda_head_dim + 31) / 32, name,
                             rc ? kern_error_string(rc) : "it holds no such cluster at once");
    return GLM_OK;
}

glm_status backend_open_cuda_with(const glm_model *m, const backend_settings *set, engine_backend *out,
                                  glm_error *err)
{
    if (kern_device_count() <= 0)
        return glm_error_set(err, GLM_ERR_UNSUPPORTED, "--backend cuda: no CUDA GPU is present "
                             "here (the driver reports none); use --backend cpu");
    cuda_backend *be = calloc(1, sizeof *be);
    if (!be)
        return glm_error_set(err, GLM_ERR_NOMEM, "out of memory starting the CUDA backend");
    be->m = m;
    const glm_config *c = &m->cfg;
    glm_status st = read_settings(be, set, err);
    if (st) {
        free(be);
        return st;
    }
    if (c->hc_mult > 16 || c->kda_head_dim > 128 || c->kda_conv_kernel > 17) {
        free(be);
        return glm_error_set(err, GLM_ERR_UNSUPPORTED, "the CUDA backend takes hc_mult <= 16, KDA "
                             "head_dim <= 128 and conv kernels <= 17 (this model: %d, %d, %d); use "
                             "--backend cpu", c->hc_mult, c->kda_head_dim, c->kda_conv_kernel);
    }
    if ((st = check_device(c, err))) {
        free(be);
        return st;
    }
    int ranks = cuda_plan_ranks_of(c->vocab_size, m->w.lm_head.rows);
    if (ranks == 0) {
        free(be);
        return glm_error_set(err, GLM_ERR_ARG, "the LM head has %lld rows, which is no rank's part "
                             "of the vocabulary's %d among 1 to %d ranks; the model was split "
                             "wrongly (tp_split_model_ranks)", (long long)m->w.lm_head.rows,
                             c->vocab_size, CUDA_PLAN_MAX_RANKS);
    }
    size_t free_b = 0, total_b = 0, avail = 0;
    int known = eng_mem_info(&free_b, &total_b) == 0;
    if (known) {
        avail = free_b;
        if (eng_device_integrated() && avail > cuda_plan_unified_limit())
            avail = cuda_plan_unified_limit();
    }
    be->dense_experts = cu_weights_dense_experts(m, m->w.has_mtp && ranks == 1);
    plan_need need = {be, set, ranks};
    be->chunk = cuda_plan_pick_chunk(set->cuda.chunk, known, avail, need_at, &need);
    if ((st = plan_at(be, set, ranks, be->chunk, &be->plan, err)) ||
        (known && (st = cuda_plan_check(&be->plan, avail, err)))) {
        free(be);
        return st;
    }
    int rc = eng_stream_new(&be->stream);
    if (!rc && !(rc = eng_stream_new(&be->side)) && !(rc = eng_fence_new(&be->fork)))
        rc = eng_fence_new(&be->join);
    if (rc) {
        cu_close(be);
        return cuda_fail(err, "creating the streams", rc);
    }
    if ((st = cu_weights_upload(m, be->dense_q4, be->chunk, &be->w, err)) ||
        (m->w.has_mtp && ranks == 1 &&
         (st = cu_weights_put_mtp(m, be->dense_q4, be->chunk, &be->w, 0, NULL, err))) ||
        (st = bind_scratch(be, err))) {
        cu_close(be);
        return st;
    }
    if (set->verbose) {
        char line[1024];
        cuda_plan_describe(&be->plan, line, sizeof line);
        engine_logf(&be->log, GLM_LOG_INFO, "cuda: %s", line);
        if (be->dense_q4)
            engine_logf(&be->log, GLM_LOG_INFO, "cuda: dense weights q4: %d matrices requantized, "
                        "%d kept as stored (columns not a multiple of 128)", be->w.n_q4,
                        be->w.n_q4_kept);
    }
    out->ops = &cuda_ops;
    out->impl = be;
    out->settings = *set;
    return GLM_OK;
}

#endif

glm_status backend_open_cuda(const glm_model *m, engine_backend *out, glm_error *err)
{
    backend_settings s;
    glm_status st = backend_resolve_settings(m, NULL, GLM_BACKEND_CUDA, &s, err);
    return st ? st : backend_open_cuda_with(m, &s, out, err);
}

#ifdef HAVE_CUDA
const cuda_plan *backend_cuda_plan(const engine_backend *b)
{
    return b && b->ops == &cuda_ops ? &((const cuda_backend *)b->impl)->plan : NULL;
}

void backend_cuda_set_graph(engine_backend *b, int on)
{
    if (b && b->ops == &cuda_ops)
        ((cuda_backend *)b->impl)->graph_off = !on;
}
#endif
