/* graph.c: the decode step as a CUDA graph: captured once per cache size (the kernels read the
 * position from the device, so one capture serves every step until the caches grow), then
 * replayed after the token and position are copied in. */
#ifdef HAVE_CUDA
#include "cuda/cuda_internal.h"

static glm_status capture(cuda_state *s, glm_error *err)
{
    cuda_backend *be = s->be;
    int rc = eng_capture_begin(be->stream);
    if (rc)
        return cuda_fail(err, "starting the decode graph's capture", rc);
    glm_error ferr = {0};
    int frc = cuda_forward(s, 1, 0, 1, &ferr);
    void *g = NULL;
    rc = eng_capture_end(be->stream, &g);
    if (frc) {
        eng_graph_free(g);
        eng_last_error();
        if (err)
            *err = ferr;
        return ferr.status ? ferr.status : GLM_ERR_BACKEND;
    }
    if (rc) {
        eng_last_error();
        return cuda_fail(err, "capturing the decode graph", rc);
    }
    s->graph = g;
    s->graph_cap = s->cap;
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
