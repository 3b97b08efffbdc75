/* snapshot.c: a CUDA conversation state as one flat host byte string (prompt reuse and its disk
 * tier): a header naming the backend, the model's config fingerprint, the cache dtypes, the dense
 * weights' format and the length, then per KDA layer the conv window and fp32 state, per DSA
 * layer the cache rows, and where the MTP layer is in step its cache rows and the last token's
 * final-normed row. */
#ifdef HAVE_CUDA
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/hash.h"
#include "cuda/cuda_internal.h"

#define CSNAP_MAGIC 0x4e534355u /* "CUSN" */
#define CSNAP_VERSION 5u /* 2: the MTP layer's section; 3: the dense weights' format; 4: the
                          * prefill products' form; 5: the indexer's query in one part under
                          * it (a kept state from before is dropped and its prompt run again) */

/* Everything a snapshot's bytes depend on; it loads only where all of it agrees. */
typedef struct csnap_header {
    uint32_t magic, version;
    char backend[8];       /* "cuda" */
    uint64_t fingerprint;  /* of the model's config (config_fingerprint) */
    uint32_t kv_dtype, kv_index_dtype;
    uint32_t n;            /* tokens held */
    uint32_t n_kda, n_dsa, conv_bytes, rec_bytes;
    uint32_t latent, index_dim, kpool;
    uint32_t mtp, hidden;  /* mtp: 0, no MTP section; else 1 + its rows (n - 1) */
    uint32_t dense_q4;     /* 1: made with the dense linears requantized (dense = q4) */
    uint32_t one_part;     /* 1: made with one fp16 part of the prefill products' inputs */
} csnap_header;

#define MIX(h, v) ((h) = fnv1a64((h), &(v), sizeof(v)))

/* A hash of the config's fields, one by one (the struct's padding is not hashed). */
static uint64_t config_fingerprint(const glm_config *c)
{
    uint64_t h = FNV1A64_SEED;
    MIX(h, c->vocab_size), MIX(h, c->hidden_size), MIX(h, c->num_layers);
    MIX(h, c->intermediate_size), MIX(h, c->moe_intermediate_size), MIX(h, c->rms_norm_eps);
    MIX(h, c->swiglu_limit), MIX(h, c->tie_word_embeddings), MIX(h, c->hc_mult);
    MIX(h, c->hc_sinkhorn_iters), MIX(h, c->hc_eps), MIX(h, c->kda_heads), MIX(h, c->kda_head_dim);
    MIX(h, c->kda_conv_kernel), MIX(h, c->kda_has_lower_bound), MIX(h, c->kda_lower_bound);
    MIX(h, c->num_heads), MIX(h, c->q_lora_rank), MIX(h, c->kv_lora_rank);
    MIX(h, c->qk_nope_head_dim), MIX(h, c->v_head_dim), MIX(h, c->index_n_heads);
    MIX(h, c->index_head_dim), MIX(h, c->index_topk), MIX(h, c->index_kpool);
    MIX(h, c->n_routed_experts), MIX(h, c->num_experts_per_tok), MIX(h, c->n_shared_experts);
    MIX(h, c->n_group), MIX(h, c->topk_group), MIX(h, c->norm_topk_prob);
    MIX(h, c->routed_scaling_factor), MIX(h, c->exl3), MIX(h, c->exl3_bits);
    for (int i = 0; i < c->num_layers && i < GLM_MAX_LAYERS; i++)
        MIX(h, c->attn[i]), MIX(h, c->moe[i]), MIX(h, c->indexer_shared[i]);
    return h;
}

static void fill_header(const cuda_state *s, csnap_header *h)
{
    const cuda_backend *be = s->be;
    const glm_config *c = &be->m->cfg;
    memset(h, 0, sizeof *h);
    h->magic = CSNAP_MAGIC;
    h->version = CSNAP_VERSION;
    memcpy(h->backend, "cuda", 5);
    h->fingerprint = config_fingerprint(c);
    h->kv_dtype = (uint32_t)be->kv_dtype;
    h->kv_index_dtype = (uint32_t)be->kv_index_dtype;
    h->n = (uint32_t)s->n;
    h->n_kda = (uint32_t)glm_config_count(c, GLM_ATTN_KDA);
    h->n_dsa = (uint32_t)glm_config_count(c, GLM_ATTN_DSA);
    h->conv_bytes = (uint32_t)cuda_conv_bytes(c);
    h->rec_bytes = (uint32_t)cuda_rec_bytes(c);
    h->latent = (uint32_t)c->kv_lora_rank;
    h->index_dim = (uint32_t)c->index_head_dim;
    h->kpool = (uint32_t)c->index_kpool;
    h->hidden = (uint32_t)c->hidden_size;
    h->dense_q4 = (uint32_t)be->dense_q4;
    h->one_part = (uint32_t)be->one_part;
    const cu_mtp_state *m = &s->mtp;
    if (cuda_mtp_on(s) && s->n > 0 && m->n == s->n - 1 && cuda_mtp_kept_row(s, s->n - 1))
        h->mtp = (uint32_t)m->n + 1;
}

/* Bytes of rows [0, rows) of a cache of this dtype and width: the values, then FP8's scales. */
static size_t cache_part(int dtype, uint32_t width, size_t rows)
{
    return rows * width * cuda_value_bytes(dtype) + (dtype == ENG_CACHE_FP8 ? rows * sizeof(float) : 0);
}

static size_t body_bytes(const csnap_header *h)
{
    size_t n = h->n, pools = h->kpool ? n / h->kpool : 0;
    size_t per_dsa = cache_part((int)h->kv_dtype, h->latent, n) +
                     2 * cache_part((int)h->kv_index_dtype, h->index_dim, n) +
                     cache_part((int)h->kv_index_dtype, h->index_dim, pools);
    size_t mtp = 0;
    if (h->mtp) {
        size_t r = h->mtp - 1, rp = h->kpool ? r / h->kpool : 0;
        mtp = cache_part((int)h->kv_dtype, h->latent, r) +
              2 * cache_part((int)h->kv_index_dtype, h->index_dim, r) +
              cache_part((int)h->kv_index_dtype, h->index_dim, rp) + (size_t)h->hidden * sizeof(float);
    }
    return (size_t)h->n_kda * ((size_t)h->conv_bytes + h->rec_bytes) + (size_t)h->n_dsa * per_dsa +
           mtp;
}

size_t cuda_snapshot_size(const cuda_state *s)
{
    csnap_header h;
    fill_header(s, &h);
    return sizeof h + body_bytes(&h);
}

/* Rows [0, rows) of c to or from p (to_host: device to host); returns p moved past them. */
static unsigned char *move_rows(const eng_cache *c, unsigned char *p, size_t rows, int to_host,
                                void *stream, int *rc)
{
    size_t vb = rows * (size_t)c->width * cuda_value_bytes(c->dtype);
    if (*rc == 0 && vb)
        *rc = to_host ? eng_copy_async(p, c->rows, vb, stream) : eng_copy_async(c->rows, p, vb, stream);
    p += vb;
    if (c->dtype == ENG_CACHE_FP8) {
        size_t sb = rows * sizeof(float);
        if (*rc == 0 && sb)
            *rc = to_host ? eng_copy_async(p, c->scale, sb, stream)
                          : eng_copy_async(c->scale, p, sb, stream);
        p += sb;
    }
    return p;
}

/* Moves the body between buf (after the header) and the state's device arrays. */
static int move_body(const cuda_state *s, const csnap_header *h, unsigned char *p, int to_host)
{
    void *st = s->be->stream;
    int rc = 0;
    for (uint32_t i = 0; i < h->n_kda && rc == 0; i++) {
        rc = to_host ? eng_copy_async(p, s->kda_conv[i], h->conv_bytes, st)
                     : eng_copy_async(s->kda_conv[i], p, h->conv_bytes, st);
        p += h->conv_bytes;
        if (rc == 0)
            rc = to_host ? eng_copy_async(p, s->kda_S[i], h->rec_bytes, st)
                         : eng_copy_async(s->kda_S[i], p, h->rec_bytes, st);
        p += h->rec_bytes;
    }
    size_t n = h->n, pools = n / h->kpool;
    for (uint32_t i = 0; i < h->n_dsa && rc == 0; i++) {
        const cu_dsa_cache *d = &s->dsa[i];
        p = move_rows(&d->latent, p, n, to_host, st, &rc);
        p = move_rows(&d->idx_key, p, n, to_host, st, &rc);
        p = move_rows(&d->idx_gate, p, n, to_host, st, &rc);
        p = move_rows(&d->pool_key, p, pools, to_host, st, &rc);
    }
    if (h->mtp && rc == 0) { /* the MTP layer's rows, then h of n-1 */
        const cu_dsa_cache *d = &s->mtp.cache;
        size_t r = h->mtp - 1, hb = (size_t)h->hidden * sizeof(float);
        p = move_rows(&d->latent, p, r, to_host, st, &rc);
        p = move_rows(&d->idx_key, p, r, to_host, st, &rc);
        p = move_rows(&d->idx_gate, p, r, to_host, st, &rc);
        p = move_rows(&d->pool_key, p, r / h->kpool, to_host, st, &rc);
        if (rc == 0)
            rc = to_host ? eng_copy_async(p, cuda_mtp_kept_row(s, (int)h->n - 1), hb, st)
                         : eng_copy_async(s->mtp.kept, p, hb, st);
    }
    int sync = eng_stream_sync(st);
    return rc ? rc : sync;
}

glm_status cuda_snapshot_save(const cuda_state *s, void *buf, size_t n, glm_error *err)
{
    csnap_header h;
    fill_header(s, &h);
    size_t need = sizeof h + body_bytes(&h);
    if (n != need)
        return glm_error_set(err, GLM_ERR_ARG, "a snapshot of this CUDA state takes %zu bytes, "
                             "not %zu", need, n);
    memcpy(buf, &h, sizeof h);
    int rc = move_body(s, &h, (unsigned char *)buf + sizeof h, 1);
    return rc ? cuda_fail(err, "copying the state into a snapshot", rc) : GLM_OK;
}

static const char *dtype_name(uint32_t d)
{
    return d == ENG_CACHE_F32 ? "f32" : d == ENG_CACHE_BF16 ? "bf16" : d == ENG_CACHE_FP8 ? "fp8" : "?";
}

/* Checks a snapshot against s's backend, model and settings, and its size against its length. */
static glm_status check_header(const cuda_state *s, const void *buf, size_t n, csnap_header *h,
                               glm_error *err)
{
    csnap_header mine;
    if (n < sizeof *h)
        return glm_error_set(err, GLM_ERR_FORMAT, "a state snapshot of %zu bytes is shorter than "
                             "the CUDA snapshot header (%zu)", n, sizeof *h);
    memcpy(h, buf, sizeof *h);
    fill_header(s, &mine);
    if (h->magic != CSNAP_MAGIC || memcmp(h->backend, "cuda", 5) != 0)
        return glm_error_set(err, GLM_ERR_FORMAT, "the state snapshot was not made by the CUDA "
                             "backend (another backend's snapshots do not load here)");
    if (h->version != CSNAP_VERSION)
        return glm_error_set(err, GLM_ERR_FORMAT, "the CUDA state snapshot is of version %u, not "
                             "%u", h->version, CSNAP_VERSION);
    if (h->fingerprint != mine.fingerprint || h->n_kda != mine.n_kda || h->n_dsa != mine.n_dsa ||
        h->conv_bytes != mine.conv_bytes || h->rec_bytes != mine.rec_bytes ||
        h->latent != mine.latent || h->index_dim != mine.index_dim || h->kpool != mine.kpool ||
        h->hidden != mine.hidden)
        return glm_error_set(err, GLM_ERR_FORMAT, "the CUDA state snapshot was made by another "
                             "model (config fingerprint %016llx, this model's %016llx)",
                             (unsigned long long)h->fingerprint,
                             (unsigned long long)mine.fingerprint);
    if (h->kv_dtype != mine.kv_dtype || h->kv_index_dtype != mine.kv_index_dtype)
        return glm_error_set(err, GLM_ERR_FORMAT, "the CUDA state snapshot holds %s/%s caches, this "
                             "backend %s/%s (kv_cache and cuda_kv_index must match)",
                             dtype_name(h->kv_dtype), dtype_name(h->kv_index_dtype),
                             dtype_name(mine.kv_dtype), dtype_name(mine.kv_index_dtype));
    if (h->dense_q4 != mine.dense_q4)
        return glm_error_set(err, GLM_ERR_FORMAT, "the CUDA state snapshot was made with %s dense "
                             "weights, this backend runs %s ones (--dense must match)",
                             h->dense_q4 ? "q4" : "bf16", mine.dense_q4 ? "q4" : "bf16");
    if (h->one_part != mine.one_part)
        return glm_error_set(err, GLM_ERR_FORMAT, "the CUDA state snapshot's prompt ran its "
                             "prefill products %s, this backend runs them %s (cuda_gemm must "
                             "match)",
                             h->one_part ? "in one fp16 part (onepart)" : "exactly",
                             mine.one_part ? "in one fp16 part (onepart)" : "exactly");
    if (h->n > (uint32_t)s->be->context)
        return glm_error_set(err, GLM_ERR_FORMAT, "the CUDA state snapshot holds %u tokens, past "
                             "this backend's context of %d (--context)", h->n,
                             s->be->context);
    if (h->mtp && !s->be->w.has_mtp)
        return glm_error_set(err, GLM_ERR_FORMAT, "the CUDA state snapshot carries an MTP layer's "
                             "cache, and this backend runs no MTP layer");
    if (h->mtp && (h->n == 0 || h->mtp - 1 != h->n - 1))
        return glm_error_set(err, GLM_ERR_FORMAT, "the CUDA state snapshot's MTP cache (%u rows) "
                             "does not fit its %u tokens", h->mtp - 1, h->n);
    size_t need = sizeof *h + body_bytes(h);
    if (n != need)
        return glm_error_set(err, GLM_ERR_FORMAT, "the CUDA state snapshot has %zu bytes, not the "
                             "%zu its header's %u tokens take", n, need, h->n);
    return GLM_OK;
}

glm_status cuda_snapshot_load(cuda_state *s, const void *buf, size_t n, glm_error *err)
{
    csnap_header h;
    glm_status st = check_header(s, buf, n, &h, err);
    if (st || (st = cuda_state_reserve(s, h.n > 0 ? (int)h.n : 1, err)))
        return st;
    int rc = move_body(s, &h, (unsigned char *)buf + sizeof h, 0);
    if (rc) {
        cuda_state_reset(s);
        return cuda_fail(err, "copying a snapshot into the state", rc);
    }
    s->n = (int)h.n;
    s->trail_n = 0;
    /* the MTP layer: in step as saved, or lost where the snapshot had it out of step */
    s->mtp.n = h.mtp ? (int)h.mtp - 1 : h.n ? -1 : 0;
    s->mtp.kept_base = h.n > 0 ? (int)h.n - 1 : 0;
    s->mtp.kept_n = h.mtp ? 1 : 0;
    /* a loaded state can come back to where it was loaded, like a marked one */
    return cuda_state_mark(s, err);
}
#endif
