/* backend_cpu.c: the CPU backend behind backend.h: the float32 forward (cpu/forward.h) over a
 * thread pool. */
#include <stdlib.h>

#include "backend.h"
#include "cpu/forward.h"
#include "cpu/snapshot.h"

typedef struct cpu_backend {
    const glm_model *m;
    cpu_pool *pool;
} cpu_backend;

static void *cpu_be_state_new(void *impl, glm_error *err)
{
    return cpu_state_new(((cpu_backend *)impl)->m, err);
}

static void cpu_be_state_free(void *st)
{
    cpu_state_free(st);
}

static void cpu_be_set_collective(void *st, const backend_collective *coll)
{
    cpu_state_set_collective(st, coll);
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
    (void)impl;
    return BACKEND_KV(BACKEND_KV_F32, BACKEND_KV_F32); /* every cache is float32 */
}

static void cpu_be_close(void *impl)
{
    cpu_backend *b = impl;
    if (!b)
        return;
    cpu_pool_free(b->pool);
    free(b);
}

static const backend_ops cpu_ops = {
    .name = "cpu",
    .state_new = cpu_be_state_new,
    .state_free = cpu_be_state_free,
    .state_set_collective = cpu_be_set_collective,
    .state_reset = cpu_be_reset,
    .state_length = cpu_be_length,
    .state_mark = cpu_be_mark,
    .state_truncate = cpu_be_truncate,
    .prefill = cpu_be_prefill,
    .snapshot_size = cpu_be_snapshot_size,
    .snapshot_save = cpu_be_snapshot_save,
    .snapshot_load = cpu_be_snapshot_load,
    .close = cpu_be_close,
    .cache_format = cpu_be_cache_format,
    .verify = cpu_be_verify,
    .state_rewind = cpu_be_rewind,
    .mtp_draft = cpu_be_mtp_draft,
};

glm_status backend_open_cpu(const glm_model *m, int n_threads, engine_backend *out, glm_error *err)
{
    cpu_backend *b = calloc(1, sizeof *b);
    if (b)
        b->pool = cpu_pool_new(n_threads);
    if (!b || !b->pool) {
        free(b);
        return glm_error_set(err, GLM_ERR_NOMEM, "out of memory starting the CPU backend");
    }
    b->m = m;
    out->ops = &cpu_ops;
    out->impl = b;
    /* the defaults; backend_open sets what the engine's params ask for */
    out->settings = (backend_settings){.context = m->cfg.max_position_embeddings > 0
                                                      ? m->cfg.max_position_embeddings : 4096,
                                       .kv_cache = GLM_KV_CACHE_F32};
    return GLM_OK;
}
