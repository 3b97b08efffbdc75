/* graph.c: the decode step as a CUDA graph: captured once per cache size (the kernels read the
 * position from the device, so one capture serves every step until the caches grow), then
 * replayed after the token and position are copied in. */
#ifdef HAVE_CUDA
#include "cuda/cuda_internal.h"

/* One decode step captured into *g (with be->prof.on, its marks become event record nodes); with
 * kept (else NULL), the captured graph too (eng_capture_end_keep). */
static glm_status capture_step(cuda_state *s, void **g, void **kept, glm_error *err)
{
    cuda_backend *be = s->be;
    void *graph = NULL;
    *g = NULL;
    int rc = eng_capture_begin(be->stream);
    if (rc)
        return cuda_fail(err, "starting the decode graph's capture", rc);
    glm_error ferr = {0};
    int frc = cuda_forward(s, 1, 0, 1, &ferr);
    rc = eng_capture_end_keep(be->stream, &graph, g);
    if (kept && !frc)
        *kept = graph;
    else
        eng_graph_destroy(graph);
    if (frc) {
        eng_graph_free(*g);
        *g = NULL;
        eng_last_error();
        if (err)
            *err = ferr;
        return ferr.status ? ferr.status : GLM_ERR_BACKEND;
    }
    if (rc) {
        eng_last_error();
        return cuda_fail(err, "capturing the decode graph", rc);
    }
    return GLM_OK;
}

static glm_status capture(cuda_state *s, glm_error *err)
{
    void *g = NULL;
    glm_status st = capture_step(s, &g, NULL, err);
    if (st)
        return st;
    s->graph = g;
    s->graph_cap = s->cap;
    return GLM_OK;
}

/* Every event the op profile may record, made before the capture so that it holds only the step. */
static int prof_events(cu_prof *p)
{
    for (int i = 0; i < CUDA_PROF_MAX; i++) {
        int rc = p->ev[i] ? 0 : eng_event_new(&p->ev[i]);
        if (rc)
            return rc;
    }
    return 0;
}

glm_status cuda_decode_graph_profiled(cuda_state *s, void **graph, void **captured,
                                      glm_error *err)
{
    cuda_backend *be = s->be;
    cu_prof *p = &be->prof;
    *graph = NULL;
    if (captured)
        *captured = NULL;
    int rc = prof_events(p);
    if (rc)
        return cuda_fail(err, "creating the op profile's events", rc);
    p->on = 1;
    p->in_graph = 1;
    p->n = 0;
    glm_status st = capture_step(s, graph, captured, err);
    p->on = 0;
    p->in_graph = 0;
    if (st)
        return st;
    if (p->n >= CUDA_PROF_MAX) { /* marks past the last event were dropped */
        eng_graph_free(*graph);
        *graph = NULL;
        if (captured) {
            eng_graph_destroy(*captured);
            *captured = NULL;
        }
        return glm_error_set(err, GLM_ERR_BACKEND, "the profiled decode step needs more than %d "
                             "marks (CUDA_PROF_MAX in engine/cuda/cuda_internal.h): raise it",
                             CUDA_PROF_MAX);
    }
    return GLM_OK;
}

glm_status cuda_decode_graph(cuda_state *s, glm_error *err)
{
    cuda_backend *be = s->be;
    if (!s->graph || s->graph_cap != s->cap) {
        eng_graph_free(s->graph);
        s->graph = NULL;
        glm_status st = capture(s, err);
        if (st)
            return st;
    }
    int rc = eng_copy_async(s->d_tokens, s->h_tokens, sizeof(int32_t), be->stream);
    if (!rc)
        rc = eng_copy_async(s->d_pos, s->h_pos, sizeof(int), be->stream);
    if (!rc)
        rc = eng_graph_launch(s->graph, be->stream);
    return rc ? cuda_fail(err, "replaying the decode graph", rc) : GLM_OK;
}
#endif
