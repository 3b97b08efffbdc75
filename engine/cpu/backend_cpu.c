/* backend_cpu.c: the CPU backend behind backend.h: the float32 forward (cpu/forward.h) over a
 * thread pool, optionally emulating the CUDA backend's lossy formats: its caches' rows rounded to
 * fp8 or bf16, its dense weights requantized to q4 (cpu/requant.h). */
#include <stdlib.h>

#include "backend.h"
#include "cpu/forward.h"
#include "cpu/requant.h"
#include "cpu/snapshot.h"

typedef struct cpu_backend {
    const glm_model *m; /* the model as opened, or rq's copy */
    cpu_pool *pool;
    cpu_numerics num;
    cpu_requant *rq; /* --dense q4, else NULL */
    backend_tap tap; /* diagnostics (backend.h) */
} cpu_backend;

static void *cpu_be_state_new(void *impl, glm_error *err)
{
    cpu_backend *b = impl;
    cpu_state *s = cpu_state_new(b->m, err);
    if (s) {
        cpu_state_set_numerics(s, &b->num);
        cpu_state_set_tap(s, &b->tap);
    }
    return s;
}

static void cpu_be_state_free(void *st)
{
    cpu_state_free(st);
}

static void cpu_be_set_collective(void *st, const backend_collective *coll)
{
    cpu_state_set_collective(st, coll);
}

static void cpu_be_set_cancel(void *st, const atomic_int *flag)
{
    cpu_state_set_cancel(st, flag);
}

static void cpu_be_reset(void *st)
{
    cpu_state_reset(st);
}

static int cpu_be_length(const void *st)
{
    return cpu_state_length(st);
}

static glm_status cpu_be_mark(void *st, glm_error *err)
{
    return cpu_state_mark(st, err);
}

static int cpu_be_mark_length(const void *st)
{
    return cpu_state_mark_length(st);
}

static glm_status cpu_be_truncate(void *st, int n, glm_error *err)
{
    return cpu_state_truncate(st, n, err);
}

static glm_status cpu_be_prefill(void *impl, void *st, const int32_t *tokens, int n, float *logits_out,
                                 int all_rows, glm_error *err)
{
    return cpu_prefill(st, ((cpu_backend *)impl)->pool, tokens, n, logits_out, all_rows, err);
}

static size_t cpu_be_snapshot_size(const void *st)
{
    return cpu_snapshot_size(st);
}

static glm_status cpu_be_snapshot_save(const void *st, void *buf, size_t n, glm_error *err)
{
    return cpu_snapshot_save(st, buf, n, err);
}

static glm_status cpu_be_snapshot_load(void *st, const void *buf, size_t n, glm_error *err)
{
    return cpu_snapshot_load(st, buf, n, err);
}

static glm_status cpu_be_verify(void *impl, void *st, const int32_t *tokens, int n,
                                float *logits_all, glm_error *err)
{
    return cpu_verify(st, ((cpu_backend *)impl)->pool, tokens, n, logits_all, err);
}

static glm_status cpu_be_rewind(void *st, int n, glm_error *err)
{
    return cpu_state_rewind(st, n, err);
}

static glm_status cpu_be_mtp_draft(void *impl, void *st, int32_t next, int32_t *out, int max,
                                   int *n_out, glm_error *err)
{
    return cpu_mtp_draft(st, ((cpu_backend *)impl)->pool, next, out, max, n_out, err);
}

static uint32_t cpu_be_cache_format(const void *impl)
{
    return ((const cpu_backend *)impl)->num.tag;
}

static void cpu_be_close(void *impl)
{
    cpu_backend *b = impl;
    if (!b)
        return;
    cpu_pool_free(b->pool);
    cpu_requant_free(b->rq);
    free(b);
}

static const backend_ops cpu_ops = {
    .name = "cpu",
    .state_new = cpu_be_state_new,
    .state_free = cpu_be_state_free,
    .state_set_collective = cpu_be_set_collective,
    .state_set_cancel = cpu_be_set_cancel,
    .state_reset = cpu_be_reset,
    .state_length = cpu_be_length,
    .state_mark = cpu_be_mark,
    .state_mark_length = cpu_be_mark_length,
    .state_truncate = cpu_be_truncate,
    .prefill = cpu_be_prefill,
    .snapshot_size = cpu_be_snapshot_size,
    .snapshot_save = cpu_be_snapshot_save,
    .snapshot_load = cpu_be_snapshot_load,
    .close = cpu_be_close,
    .cache_format = cpu_be_cache_format,
    .verify = cpu_be_verify,
    .state_rewind = cpu_be_rewind,
    .verifies_over_ranks = 1,
    .mtp_draft = cpu_be_mtp_draft,
};

/* The tag of backend.h's cache_format for s: the caches' formats (every DSA cache in one), q4,
 * and the variants only tests and the accuracy tool ask for. */
static uint32_t numerics_tag(const backend_settings *s, numfmt_cache fmt)
{
    uint32_t tag = BACKEND_KV(fmt, fmt) | (s->dense == GLM_DENSE_Q4 ? BACKEND_DENSE_Q4 : 0);
    if (s->fp8_rule || s->q4_group || s->q4_f32_scale)
        tag |= BACKEND_VARIANT(s->fp8_rule, s->q4_group, s->q4_f32_scale);
    if (s->cuda.gemm == GLM_CUDA_GEMM_ONEPART)
        tag |= BACKEND_ONE_PART;
    return tag;
}

glm_status backend_open_cpu_with(const glm_model *m, int n_threads, const backend_settings *s,
                                 engine_backend *out, glm_error *err)
{
    numfmt_cache fmt = s->kv_cache == GLM_KV_CACHE_FP8    ? NUMFMT_CACHE_FP8
                       : s->kv_cache == GLM_KV_CACHE_BF16 ? NUMFMT_CACHE_BF16
                                                          : NUMFMT_CACHE_F32;
    if (s->fp8_rule != NUMFMT_FP8_POW2 && s->fp8_rule != NUMFMT_FP8_EXACT)
        return glm_error_set(err, GLM_ERR_ARG, "fp8 scale rule %d is not one of numfmt.h's",
                             s->fp8_rule);
    cpu_backend *b = calloc(1, sizeof *b);
    if (b)
        b->pool = cpu_pool_new(n_threads);
    if (!b || !b->pool) {
        free(b);
        return glm_error_set(err, GLM_ERR_NOMEM, "out of memory starting the CPU backend");
    }
    b->m = m;
    b->num = (cpu_numerics){fmt, (numfmt_fp8_rule)s->fp8_rule, numerics_tag(s, fmt),
                            s->cuda.gemm == GLM_CUDA_GEMM_ONEPART, s->cuda.chunk};
    b->tap = s->tap;
    if (s->dense == GLM_DENSE_Q4) {
        numfmt_q4 q = NUMFMT_Q4_GPU;
        if (s->q4_group)
            q.group = s->q4_group;
        q.f16_scale = !s->q4_f32_scale;
        glm_status st = cpu_requant_make(m, &q, &b->rq, err);
        if (st) {
            cpu_be_close(b);
            return st;
        }
        b->m = &b->rq->model;
    }
    out->ops = &cpu_ops;
    out->impl = b;
    out->settings = *s;
    return GLM_OK;
}

glm_status backend_open_cpu(const glm_model *m, int n_threads, engine_backend *out, glm_error *err)
{
    /* the defaults; backend_open resolves what the engine's params ask for */
    backend_settings s = {.context = m->cfg.max_position_embeddings > 0
                                         ? m->cfg.max_position_embeddings : 4096,
                          .kv_cache = GLM_KV_CACHE_F32,
                          .dense = GLM_DENSE_BF16};
    return backend_open_cpu_with(m, n_threads, &s, out, err);
}
