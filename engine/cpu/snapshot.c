/* snapshot.c: a CPU conversation state as one flat byte string (prompt reuse and its disk
 * tier): a header of the shapes it was made with, then KDA windows and states, then DSA rows. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/blocks.h"
#include "cpu/snapshot.h"

#define SNAP_MAGIC 0x50414e53u /* "SNAP" */
#define SNAP_VERSION 3u
#define SNAP_LOST 0xffffffffu /* mtp_rows: the MTP cache is out of step */
#define SNAP_MAX_DSA 256

/* The shapes a snapshot depends on: a snapshot loads only where all of them agree. */
typedef struct snap_header {
    uint32_t magic, version;
    uint32_t n, n_kda, n_dsa, conv, rec, latent, index_dim, kpool;
    uint32_t has_mtp, mtp_rows, mtp_pools, hidden; /* the MTP layer's cache, and h of n-1 */
    uint32_t numerics; /* cpu_numerics.tag: the cache and weight formats the rows were made in */
    uint32_t n_pools[SNAP_MAX_DSA]; /* the first n_dsa are written: completed pools per layer */
} snap_header;

/* The fixed part of the header, before the pool counts. */
#define SNAP_FIXED (15 * sizeof(uint32_t))

static size_t conv_floats(const glm_config *c)
{
    return (size_t)(c->kda_conv_kernel - 1) * 3 * c->kda_heads * c->kda_head_dim;
}

static size_t rec_floats(const glm_config *c)
{
    return (size_t)c->kda_heads * c->kda_head_dim * c->kda_head_dim;
}

static void fill_header(const cpu_state *s, snap_header *h)
{
    const glm_config *c = &s->m->cfg;
    memset(h, 0, sizeof *h);
    h->magic = SNAP_MAGIC;
    h->version = SNAP_VERSION;
    h->n = (uint32_t)s->n;
    h->n_kda = (uint32_t)glm_config_count(c, GLM_ATTN_KDA);
    h->n_dsa = (uint32_t)glm_config_count(c, GLM_ATTN_DSA);
    h->conv = (uint32_t)conv_floats(c);
    h->rec = (uint32_t)rec_floats(c);
    h->latent = (uint32_t)c->kv_lora_rank;
    h->index_dim = (uint32_t)c->index_head_dim;
    h->kpool = (uint32_t)c->index_kpool;
    h->has_mtp = (uint32_t)cpu_mtp_on(s);
    h->hidden = (uint32_t)c->hidden_size;
    h->numerics = s->num.tag;
    if (h->has_mtp && s->mtp_n >= 0 && s->n > 0 && s->mtp_n == s->n - 1 &&
        s->n - 1 >= s->h_base && s->n - 1 < s->h_base + s->h_n) {
        h->mtp_rows = (uint32_t)s->mtp_n;
        h->mtp_pools = (uint32_t)s->mtp.n_pools;
    } else {
        h->mtp_rows = SNAP_LOST;
    }
}

/* Floats of the MTP section: its rows, pool keys and h. */
static size_t mtp_floats(const snap_header *h)
{
    if (!h->has_mtp || h->mtp_rows == SNAP_LOST)
        return 0;
    return (size_t)h->mtp_rows * (h->latent + 2 * (size_t)h->index_dim) +
           (size_t)h->mtp_pools * h->index_dim + h->hidden;
}

static size_t header_bytes(uint32_t n_dsa)
{
    return SNAP_FIXED + (size_t)n_dsa * sizeof(uint32_t);
}

/* Floats of the body for a header's shapes and pool counts. */
static size_t body_floats(const snap_header *h)
{
    size_t f = (size_t)h->n_kda * (h->conv + h->rec);
    for (uint32_t i = 0; i < h->n_dsa; i++)
        f += (size_t)h->n * (h->latent + 2 * (size_t)h->index_dim) +
             (size_t)h->n_pools[i] * h->index_dim;
    return f + mtp_floats(h);
}

size_t cpu_snapshot_size(const cpu_state *s)
{
    snap_header h;
    fill_header(s, &h);
    for (uint32_t i = 0; i < h.n_dsa && i < SNAP_MAX_DSA; i++)
        h.n_pools[i] = (uint32_t)s->dsa[i].n_pools;
    return header_bytes(h.n_dsa) + body_floats(&h) * sizeof(float);
}

static unsigned char *put(unsigned char *p, const float *src, size_t n)
{
    if (n)
        memcpy(p, src, n * sizeof(float));
    return p + n * sizeof(float);
}

static const unsigned char *get(const unsigned char *p, float *dst, size_t n)
{
    if (n)
        memcpy(dst, p, n * sizeof(float));
    return p + n * sizeof(float);
}

glm_status cpu_snapshot_save(const cpu_state *s, void *buf, size_t n, glm_error *err)
{
    size_t need = cpu_snapshot_size(s);
    if (n != need)
        return glm_error_set(err, GLM_ERR_ARG, "a snapshot of this state takes %zu bytes, not %zu",
                             need, n);
    snap_header h;
    fill_header(s, &h);
    if (h.n_dsa > SNAP_MAX_DSA)
        return glm_error_set(err, GLM_ERR_UNSUPPORTED, "snapshots hold at most %d DSA layers",
                             SNAP_MAX_DSA);
    for (uint32_t i = 0; i < h.n_dsa; i++)
        h.n_pools[i] = (uint32_t)s->dsa[i].n_pools;
    unsigned char *p = buf;
    memcpy(p, &h, header_bytes(h.n_dsa));
    p += header_bytes(h.n_dsa);
    for (uint32_t i = 0; i < h.n_kda; i++) {
        p = put(p, s->kda[i].conv, h.conv);
        p = put(p, s->kda[i].S, h.rec);
    }
    for (uint32_t i = 0; i < h.n_dsa; i++) {
        const dsa_cache *d = &s->dsa[i];
        p = put(p, d->latent, (size_t)h.n * h.latent);
        p = put(p, d->idx_key, (size_t)h.n * h.index_dim);
        p = put(p, d->idx_gate, (size_t)h.n * h.index_dim);
        p = put(p, d->pool_key, (size_t)d->n_pools * h.index_dim);
    }
    if (mtp_floats(&h)) {
        p = put(p, s->mtp.latent, (size_t)h.mtp_rows * h.latent);
        p = put(p, s->mtp.idx_key, (size_t)h.mtp_rows * h.index_dim);
        p = put(p, s->mtp.idx_gate, (size_t)h.mtp_rows * h.index_dim);
        p = put(p, s->mtp.pool_key, (size_t)h.mtp_pools * h.index_dim);
        put(p, s->h + (size_t)(s->n - 1 - s->h_base) * h.hidden, h.hidden);
    }
    return GLM_OK;
}

/* Checks a snapshot's header against s's model and its size against the header. */
static glm_status check_header(const cpu_state *s, const unsigned char *buf, size_t n,
                               snap_header *mine, glm_error *err)
{
    snap_header h;
    if (n < SNAP_FIXED)
        return glm_error_set(err, GLM_ERR_FORMAT, "a state snapshot of %zu bytes is shorter than "
                             "its header", n);
    memcpy(&h, buf, SNAP_FIXED);
    if (h.magic != SNAP_MAGIC || h.version != SNAP_VERSION)
        return glm_error_set(err, GLM_ERR_FORMAT, "not a CPU state snapshot of version %u",
                             SNAP_VERSION);
    fill_header(s, mine);
    if (h.n_kda != mine->n_kda || h.n_dsa != mine->n_dsa || h.conv != mine->conv ||
        h.rec != mine->rec || h.latent != mine->latent || h.index_dim != mine->index_dim ||
        h.kpool != mine->kpool || h.has_mtp != mine->has_mtp || h.hidden != mine->hidden)
        return glm_error_set(err, GLM_ERR_FORMAT, "the state snapshot was made by another model "
                             "(layers, head or cache sizes differ)");
    if (h.numerics != mine->numerics)
        return glm_error_set(err, GLM_ERR_FORMAT, "the state snapshot was made with other number "
                             "formats (cache and dense weights: %#x, this backend's %#x; "
                             "--kv-cache and --dense must match)", h.numerics, mine->numerics);
    if (h.n > (1u << 30) || h.n_dsa > SNAP_MAX_DSA || n < header_bytes(h.n_dsa))
        return glm_error_set(err, GLM_ERR_FORMAT, "the state snapshot's length %u or size %zu is "
                             "out of range", h.n, n);
    mine->n = h.n;
    mine->mtp_rows = h.mtp_rows;
    mine->mtp_pools = h.mtp_pools;
    if (h.has_mtp && h.mtp_rows != SNAP_LOST &&
        (h.n == 0 || h.mtp_rows != h.n - 1 || h.mtp_pools > h.mtp_rows / h.kpool))
        return glm_error_set(err, GLM_ERR_FORMAT, "the state snapshot's MTP cache (%u rows, %u "
                             "pools) does not fit its %u tokens", h.mtp_rows, h.mtp_pools, h.n);
    for (uint32_t i = 0; i < h.n_dsa; i++) {
        memcpy(&mine->n_pools[i], buf + SNAP_FIXED + i * sizeof(uint32_t), sizeof(uint32_t));
        if (mine->n_pools[i] > h.n / h.kpool)
            return glm_error_set(err, GLM_ERR_FORMAT, "the state snapshot's DSA layer %u has %u "
                                 "pool keys, more than the %u pools of %u tokens", i,
                                 mine->n_pools[i], h.n / h.kpool, h.n);
    }
    size_t need = header_bytes(h.n_dsa) + body_floats(mine) * sizeof(float);
    if (n != need)
        return glm_error_set(err, GLM_ERR_FORMAT, "the state snapshot has %zu bytes, not the %zu "
                             "its header says", n, need);
    return GLM_OK;
}

glm_status cpu_snapshot_load(cpu_state *s, const void *buf, size_t n, glm_error *err)
{
    const glm_config *c = &s->m->cfg;
    uint32_t nd = (uint32_t)glm_config_count(c, GLM_ATTN_DSA);
    snap_header hdr;
    glm_status st = check_header(s, buf, n, &hdr, err);
    if (st)
        return st;
    snap_header *h = &hdr;
    if ((st = cpu_state_reserve(s, (int)h->n, err)))
        return st;
    if (mtp_floats(h) && s->h_cap < 1) { /* room for h, before anything changes */
        float *row = malloc((size_t)h->hidden * sizeof *row);
        if (!row)
            return glm_error_set(err, GLM_ERR_NOMEM, "out of memory loading a state snapshot");
        free(s->h);
        s->h = row;
        s->h_cap = 1;
    }
    const unsigned char *p = (const unsigned char *)buf + header_bytes(nd);
    for (uint32_t i = 0; i < h->n_kda; i++) {
        p = get(p, s->kda[i].conv, h->conv);
        p = get(p, s->kda[i].S, h->rec);
    }
    for (uint32_t i = 0; i < nd; i++) {
        dsa_cache *d = &s->dsa[i];
        p = get(p, d->latent, (size_t)h->n * h->latent);
        p = get(p, d->idx_key, (size_t)h->n * h->index_dim);
        p = get(p, d->idx_gate, (size_t)h->n * h->index_dim);
        p = get(p, d->pool_key, (size_t)h->n_pools[i] * h->index_dim);
        d->n_pools = (int)h->n_pools[i];
    }
    s->mtp_n = h->has_mtp && h->mtp_rows != SNAP_LOST ? (int)h->mtp_rows : h->n ? -1 : 0;
    if (mtp_floats(h)) {
        p = get(p, s->mtp.latent, (size_t)h->mtp_rows * h->latent);
        p = get(p, s->mtp.idx_key, (size_t)h->mtp_rows * h->index_dim);
        p = get(p, s->mtp.idx_gate, (size_t)h->mtp_rows * h->index_dim);
        p = get(p, s->mtp.pool_key, (size_t)h->mtp_pools * h->index_dim);
        get(p, s->h, h->hidden);
        s->mtp.n_pools = (int)h->mtp_pools;
        s->h_base = (int)h->n - 1;
        s->h_n = 1;
    }
    s->n = (int)h->n;
    s->trail_n = 0;
    /* a loaded state can come back to where it was loaded, like a marked one */
    return cpu_state_mark(s, err);
}
