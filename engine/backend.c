/* backend.c: picks and opens the backend a session runs on (cpu or cuda) from the engine's
 * parameters; --backend auto takes the CUDA backend where a GPU is present (it matches the CPU
 * backend: tests/gpu/engine.sh), else the CPU one. Resolves the context and cache settings. */
#include "backend.h"

#include <string.h>

#include "spec.h"

glm_status backend_check_params(const glm_engine_params *p, glm_error *err)
{
    if (!p)
        return GLM_OK;
    if (p->kv_cache < GLM_KV_CACHE_DEFAULT || p->kv_cache > GLM_KV_CACHE_F32)
        return glm_error_set(err, GLM_ERR_ARG, "kv_cache %d is not a cache format", (int)p->kv_cache);
    if (p->dense < GLM_DENSE_DEFAULT || p->dense > GLM_DENSE_Q4)
        return glm_error_set(err, GLM_ERR_ARG, "dense %d is not a dense weight format", (int)p->dense);
    if (p->draft < GLM_DRAFT_DEFAULT || p->draft > GLM_DRAFT_MTP)
        return glm_error_set(err, GLM_ERR_ARG, "draft %d is not off (1), copy (2) or mtp (3)",
                             (int)p->draft);
    if (p->context < 0)
        return glm_error_set(err, GLM_ERR_ARG, "context %d is not a number of tokens (0: the "
                             "model's)", p->context);
    if (p->rdma_gid_given && p->rdma_gid_index < 0)
        return glm_error_set(err, GLM_ERR_ARG, "rdma_gid_index %d is not a GID table entry",
                             p->rdma_gid_index);
    const glm_cuda_params *c = &p->cuda;
    if (c->kv_index < GLM_KV_CACHE_DEFAULT || c->kv_index > GLM_KV_CACHE_F32)
        return glm_error_set(err, GLM_ERR_ARG, "cuda.kv_index %d is not a cache format",
                             (int)c->kv_index);
    if (c->gemm < GLM_CUDA_GEMM_DEFAULT || c->gemm > GLM_CUDA_GEMM_ONEPART)
        return glm_error_set(err, GLM_ERR_ARG, "cuda.gemm %d is not the default (0), fixed (1), "
                             "show (2), nosplit (3), cublas (4), three (5) or onepart (6)", (int)c->gemm);
    if (c->chunk && (c->chunk < GLM_CUDA_CHUNK_LEAST || c->chunk > GLM_CUDA_CHUNK_LIMIT ||
                     (c->chunk & (c->chunk - 1))))
        return glm_error_set(err, GLM_ERR_ARG, "cuda.chunk %d is not a power of two from %d to %d "
                             "rows (0: the memory plan's choice)", c->chunk, GLM_CUDA_CHUNK_LEAST,
                             GLM_CUDA_CHUNK_LIMIT);
    return GLM_OK;
}

int backend_cuda_one_part(glm_cuda_gemm gemm)
{
    return gemm == GLM_CUDA_GEMM_ONEPART || gemm == GLM_CUDA_GEMM_DEFAULT;
}

int backend_cancel_agreed(const backend_collective *coll, const atomic_int *flag, glm_error *err)
{
    float asked = flag && atomic_load(flag) ? 1.0f : 0.0f;
    if (coll->all_reduce && coll->all_reduce(coll->user, &asked, 1, err) != GLM_OK)
        return -2;
    return asked > 0;
}

glm_status backend_resolve_settings(const glm_model *m, const glm_engine_params *p,
                                    glm_backend which, backend_settings *out, glm_error *err)
{
    glm_status st = backend_check_params(p, err);
    if (st)
        return st;
    memset(out, 0, sizeof *out);
    const glm_config *c = &m->cfg;
    out->context = c->max_position_embeddings > 0 ? c->max_position_embeddings : 4096;
    if (p && p->context > 0)
        out->context = p->context;
    out->kv_cache = which == GLM_BACKEND_CUDA ? GLM_KV_CACHE_FP8 : GLM_KV_CACHE_F32;
    if (p && p->kv_cache != GLM_KV_CACHE_DEFAULT)
        out->kv_cache = p->kv_cache;
    out->dense = p && p->dense != GLM_DENSE_DEFAULT ? p->dense : GLM_DENSE_BF16;
    /* drafting verifies the chosen token and up to SPEC_MAX_DRAFT drafts (several ranks: copy
     * drafts, whose windows a worker runs too: glm_worker_serve asks for them) */
    int drafting = p && spec_mode_of(p->draft) != SPEC_OFF;
    out->draft_rows = drafting ? SPEC_MAX_DRAFT + 1 : 0;
    if (p) {
        out->verbose = p->verbose;
        out->cuda = p->cuda;
        out->log.fn = p->log;
        out->log.user = p->log_user;
    }
    return GLM_OK;
}

glm_status backend_open(const glm_model *m, const glm_engine_params *p, engine_backend *out,
                        glm_error *err)
{
    out->ops = NULL;
    out->impl = NULL;
    int cuda = p->backend == GLM_BACKEND_CUDA ||
               (p->backend == GLM_BACKEND_AUTO && glm_cuda_available());
    backend_settings s;
    glm_status st = backend_resolve_settings(m, p, cuda ? GLM_BACKEND_CUDA : GLM_BACKEND_CPU, &s, err);
    if (st)
        return st;
    if (cuda)
        return backend_open_cuda_with(m, &s, out, err);
    return backend_open_cpu_with(m, p->n_threads, &s, out, err);
}

void backend_close(engine_backend *b)
{
    if (b->ops && b->ops->close)
        b->ops->close(b->impl);
    b->ops = NULL;
    b->impl = NULL;
}

glm_status backend_check_tokens(const glm_config *c, const int32_t *tokens, int n, glm_error *err)
{
    if (n <= 0)
        return glm_error_set(err, GLM_ERR_ARG, "no tokens to run");
    for (int t = 0; t < n; t++)
        if (tokens[t] < 0 || tokens[t] >= c->vocab_size)
            return glm_error_set(err, GLM_ERR_ARG, "token id %d at position %d is outside the "
                                 "vocabulary (0..%d)", tokens[t], t, c->vocab_size - 1);
    return GLM_OK;
}
