/* spec.c: drafted decoding on the CUDA backend: a verification window runs its n tokens as one
 * forward whose rows are bit for bit one-token steps (dense products through the one-row GEMV,
 * the KDA scan token by token as always) and keeps each KDA layer's state after every position,
 * so going back inside the window is a copy, not a second forward.
 * Why keep rather than recompute: at GLM-5.3-Flash's shapes a KDA state is 4 MiB a layer, so a
 * 9-token window writes ~36 MiB a layer (~1.2 GB over the KDA layers, ~0.3 ms at the H200's
 * bandwidth), while recomputing the accepted prefix from the state before the window would read
 * every weight again (a whole forward). The cost is that memory, per state.
 * The window runs as forwards of at most CUDA_DECODE_T rows (a longer one in groups, each after
 * the last): at that size every kernel takes the decode path a one-token step takes (the fused
 * products of eng_matmul_jobs, the fused HC step, the KDA prep, the split latent attention), and
 * each of them computes a row with the same operations in the same order whatever the row count
 * (no reduction is split by the number of rows), so a row's bits do not depend on its window.
 * Bit-equality holds where every product is deterministic and batch-invariant: the dense and
 * fused-dense paths are, and so are the EXL3 kernels (kernels/exl3_gemm.cu, exl3_moe.cu: fixed
 * k splits, partials summed in index order, no float atomics) at any row count of a path. */
#ifdef HAVE_CUDA
#include <stdlib.h>
#include <string.h>

#include "cuda/cuda_internal.h"

void cuda_trail_free(cuda_state *s)
{
    int nk = glm_config_count(&s->be->m->cfg, GLM_ATTN_KDA);
    for (int i = 0; i < nk; i++) {
        if (s->trail_S)
            kern_free(s->trail_S[i]);
        if (s->trail_conv)
            kern_free(s->trail_conv[i]);
    }
    free(s->trail_S);
    free(s->trail_conv);
    s->trail_S = s->trail_conv = NULL;
    s->trail_cap = s->trail_n = 0;
}

/* Bytes of one KDA layer's conv trail for n positions: the K-1 window rows, then n rows. */
static size_t conv_trail_bytes(const glm_config *c, int n)
{
    return (size_t)(c->kda_conv_kernel - 1 + n) * 3 * c->kda_heads * c->kda_head_dim * sizeof(float);
}

/* Room for windows of n positions in every KDA layer. */
static glm_status reserve_trail(cuda_state *s, int n, glm_error *err)
{
    const glm_config *c = &s->be->m->cfg;
    int nk = glm_config_count(c, GLM_ATTN_KDA);
    if (n <= s->trail_cap)
        return GLM_OK;
    cuda_trail_free(s);
    s->trail_S = calloc((size_t)(nk ? nk : 1), sizeof *s->trail_S);
    s->trail_conv = calloc((size_t)(nk ? nk : 1), sizeof *s->trail_conv);
    int bad = !s->trail_S || !s->trail_conv;
    for (int i = 0; !bad && i < nk; i++)
        bad = kern_malloc((void **)&s->trail_S[i], (size_t)n * cuda_rec_bytes(c)) ||
              kern_malloc((void **)&s->trail_conv[i], conv_trail_bytes(c, n));
    if (bad) {
        cuda_trail_free(s);
        return glm_error_set(err, GLM_ERR_NOMEM, "out of GPU memory for a verification window of "
                             "%d tokens (%zu bytes of KDA states a layer)", n,
                             (size_t)n * cuda_rec_bytes(c));
    }
    s->trail_cap = n;
    return GLM_OK;
}

glm_status cuda_verify(cuda_state *s, const int32_t *tokens, int n, float *logits_all,
                       glm_error *err)
{
    cuda_backend *be = s->be;
    const glm_config *c = &be->m->cfg;
    s->trail_n = 0;
    if (n > be->chunk)
        return glm_error_set(err, GLM_ERR_ARG, "a verification window of %d tokens is longer than "
                             "the CUDA backend's chunk of %d", n, be->chunk);
    glm_status st = backend_check_tokens(c, tokens, n, err);
    if (st || (st = cuda_state_reserve(s, s->n + n, err)) || (st = reserve_trail(s, n, err)) ||
        (st = cuda_state_staging(s, n, n, err)))
        return st;
    memcpy(s->h_tokens, tokens, (size_t)n * sizeof *tokens);
    size_t V = (size_t)c->vocab_size;
    glm_error ferr = {0};
    int rc = 0, mtp = cuda_mtp_on(s);
    /* several ranks exchanging through the host gather each group's logits there (split_head);
     * one rank, or device collectives, leave them on the device */
    int gathered = s->coll.all_gather && !cuda_coll_on_device(s, CUDA_DECODE_T);
    be->rowwise = 1;
    s->verifying = 1;
    for (int t0 = 0; t0 < n && rc == 0; t0 += CUDA_DECODE_T) {
        int g = n - t0 < CUDA_DECODE_T ? n - t0 : CUDA_DECODE_T;
        *s->h_pos = s->n + t0; /* the previous group synced: its copy of h_pos is done */
        rc = eng_copy_async(s->d_tokens, s->h_tokens + t0, (size_t)g * sizeof(int32_t), be->stream);
        if (!rc)
            rc = eng_copy_async(s->d_pos, s->h_pos, sizeof(int), be->stream);
        if (rc) {
            cuda_fail(&ferr, "copying the drafted tokens in", rc);
            break;
        }
        s->trail_at = t0;
        rc = cuda_forward_layers(s, g, &ferr);
        if (!rc)
            rc = cuda_forward_head(s, g, 1, &ferr);
        if (!rc && gathered) {
            /* the group's full rows are at h_logits already, where the next group's exchanges
             * stage their partial sums: kept aside at once */
            if (logits_all)
                memcpy(logits_all + (size_t)t0 * V, s->h_logits, (size_t)g * V * sizeof(float));
        } else if (!rc && (rc = eng_copy_async(s->h_logits + (size_t)t0 * V, be->s.logits,
                                               (size_t)g * V * sizeof(float), be->stream))) {
            cuda_fail(&ferr, "the window's logits' copy", rc);
        }
        if (!rc && mtp && (rc = cuda_mtp_stage(s, t0, g))) /* the rows the MTP layer takes */
            cuda_fail(&ferr, "the MTP layer's input rows", rc);
        int sync = eng_stream_sync(be->stream);
        if (!rc && sync)
            rc = cuda_fail(&ferr, "the verifying forward", sync);
    }
    be->rowwise = 0;
    s->verifying = 0;
    s->trail_at = 0;
    if (rc) {
        eng_stream_sync(be->stream);
        eng_last_error();
        if (mtp)
            s->mtp.n = -1; /* its staged rows are partial */
        if (err)
            *err = ferr;
        return ferr.status ? ferr.status : GLM_ERR_BACKEND;
    }
    if (logits_all && !gathered)
        memcpy(logits_all, s->h_logits, (size_t)n * V * sizeof(float));
    be->rowwise = 1; /* the MTP rows too, as one-token steps compute them (in groups as above) */
    st = mtp ? cuda_mtp_catch_up_staged(s, tokens, s->n, n, err) : GLM_OK;
    be->rowwise = 0;
    if (st)
        return st;
    s->trail_base = s->n;
    s->trail_n = n;
    s->n += n;
    return GLM_OK;
}

glm_status cuda_state_rewind(cuda_state *s, int n, glm_error *err)
{
    const glm_config *c = &s->be->m->cfg;
    if (n == s->n)
        return GLM_OK;
    if (n <= s->trail_base || n > s->trail_base + s->trail_n || n > s->n)
        return glm_error_set(err, GLM_ERR_ARG, "cannot go back to %d tokens: the last verification "
                             "window kept positions %d..%d", n, s->trail_base + 1,
                             s->trail_base + s->trail_n);
    int nk = glm_config_count(c, GLM_ATTN_KDA), K = c->kda_conv_kernel;
    size_t at = (size_t)(n - s->trail_base - 1), row = (size_t)3 * c->kda_heads * c->kda_head_dim;
    void *st = s->be->stream;
    int rc = 0;
    for (int i = 0; i < nk && rc == 0; i++) {
        rc = eng_copy_async(s->kda_S[i], (const char *)s->trail_S[i] + at * cuda_rec_bytes(c),
                            cuda_rec_bytes(c), st);
        if (rc == 0 && K > 1) /* the window after at+1 tokens: trail rows at+1 .. at+K-1 */
            rc = eng_copy_async(s->kda_conv[i], s->trail_conv[i] + (at + 1) * row,
                                (size_t)(K - 1) * row * sizeof(float), st);
    }
    int sync = eng_stream_sync(st);
    if (rc || sync)
        return cuda_fail(err, "going back inside the verification window", rc ? rc : sync);
    /* DSA rows past n are rewritten; pool keys past n are remade as their pools complete */
    s->n = n;
    cuda_mtp_rewind(s, n);
    return GLM_OK;
}
#endif
