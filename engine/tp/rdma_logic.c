/* rdma_logic.c: hardware-free logic of the rdma transport (layout, flags, stripes, GIDs, the
 * parameter blob), kept apart from libibverbs so the unit tests can check it anywhere. */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "base/le.h"
#include "tp/rdma_logic.h"

static size_t page_round(size_t v)
{
    return (v + TP_RDMA_PAGE - 1) / TP_RDMA_PAGE * TP_RDMA_PAGE;
}

glm_status tp_rdma_layout_make(size_t slot_bytes, unsigned n_hca, tp_rdma_layout *l, glm_error *err)
{
    memset(l, 0, sizeof *l);
    if (slot_bytes == 0 || slot_bytes % TP_RDMA_PAGE != 0)
        return glm_error_set(err, GLM_ERR_ARG, "the rdma slot size %zu is not a positive multiple of 4096",
                             slot_bytes);
    if (n_hca == 0 || n_hca > TP_RDMA_MAX_HCA)
        return glm_error_set(err, GLM_ERR_ARG, "the rdma transport uses 1 to %u HCAs, not %u",
                             TP_RDMA_MAX_HCA, n_hca);
    /* 2 recv + 2 send slots plus the flag page must fit in size_t with room for rounding. */
    if (slot_bytes > (SIZE_MAX - 16 * TP_RDMA_PAGE) / 4)
        return glm_error_set(err, GLM_ERR_ARG, "the rdma slot size %zu is too large", slot_bytes);
    l->slot_bytes = slot_bytes;
    l->n_hca = n_hca;
    size_t at = 0;
    for (unsigned s = 0; s < TP_RDMA_SLOTS; s++) {
        l->recv_off[s] = at;
        at += slot_bytes;
    }
    l->flag_off = at;
    at += page_round((size_t)TP_RDMA_SLOTS * TP_RDMA_MAX_HCA * TP_RDMA_FLAG_STRIDE);
    for (unsigned s = 0; s < TP_RDMA_SLOTS; s++) {
        l->send_off[s] = at;
        at += slot_bytes;
    }
    l->total = at;
    return GLM_OK;
}

size_t tp_rdma_flag_offset(const tp_rdma_layout *l, unsigned slot, unsigned hca)
{
    return l->flag_off + ((size_t)slot * TP_RDMA_MAX_HCA + hca) * TP_RDMA_FLAG_STRIDE;
}

unsigned tp_rdma_slot(uint64_t seq)
{
    return (unsigned)(seq & 1u);
}

tp_flag_state tp_rdma_flag_state(uint64_t flag, uint64_t seq)
{
    if (flag == seq)
        return TP_FLAG_READY;
    /* Two slots: the slot of seq last carried seq - 2 (nothing yet for seq 1 and 2). */
    uint64_t stale = seq > 2 ? seq - 2 : 0;
    return flag == stale ? TP_FLAG_WAIT : TP_FLAG_BAD;
}

void tp_rdma_stripe(size_t nbytes, unsigned n_hca, unsigned h, size_t *off, size_t *len)
{
    size_t packs = (nbytes + TP_RDMA_STRIPE_ALIGN - 1) / TP_RDMA_STRIPE_ALIGN;
    size_t base = packs / n_hca, extra = packs % n_hca;
    /* The first `extra` stripes get one pack more. */
    size_t first = (size_t)h * base + (h < extra ? h : extra);
    size_t count = base + (h < extra ? 1 : 0);
    size_t start = first * TP_RDMA_STRIPE_ALIGN;
    size_t end = (first + count) * TP_RDMA_STRIPE_ALIGN;
    if (start > nbytes)
        start = nbytes;
    if (end > nbytes)
        end = nbytes;
    *off = start;
    *len = end - start;
}

/* ---- GIDs ------------------------------------------------------------------------------ */

int tp_gid_is_ipv4(const uint8_t gid[16], uint8_t ipv4[4])
{
    for (int i = 0; i < 10; i++)
        if (gid[i] != 0)
            return 0;
    if (gid[10] != 0xff || gid[11] != 0xff)
        return 0;
    if (ipv4)
        memcpy(ipv4, gid + 12, 4);
    return 1;
}

int tp_rdma_pick_gid(const tp_gid_entry *table, size_t n, const uint8_t *want_ipv4)
{
    int best = -1;
    for (size_t i = 0; i < n; i++) {
        uint8_t v4[4];
        if (table[i].type != TP_GID_ROCE_V2 || !tp_gid_is_ipv4(table[i].gid, v4))
            continue;
        if (want_ipv4 && memcmp(v4, want_ipv4, 4) != 0)
            continue;
        if (best < 0 || table[i].index < best)
            best = table[i].index;
    }
    return best;
}

static int hex_value(int c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    c = tolower(c);
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1;
}

int tp_gid_parse(const char *text, uint8_t gid[16])
{
    const char *p = text;
    for (int group = 0; group < 8; group++) {
        unsigned v = 0;
        for (int k = 0; k < 4; k++) {
            int h = hex_value((unsigned char)*p);
            if (h < 0)
                return -1;
            v = (v << 4) | (unsigned)h;
            p++;
        }
        gid[2 * group] = (uint8_t)(v >> 8);
        gid[2 * group + 1] = (uint8_t)v;
        if (group < 7) {
            if (*p != ':')
                return -1;
            p++;
        }
    }
    while (*p == '\n' || *p == ' ')
        p++;
    return *p == '\0' ? 0 : -1;
}

tp_gid_type tp_gid_type_parse(const char *text)
{
    size_t n = strcspn(text, "\n");
    if (n == 7 && strncmp(text, "RoCE v2", 7) == 0)
        return TP_GID_ROCE_V2;
    if (n == 10 && strncmp(text, "IB/RoCE v1", 10) == 0)
        return TP_GID_IB_ROCE_V1;
    return TP_GID_UNKNOWN;
}

/* Reads a small sysfs file into buf. 0, or -1 when absent or unreadable. */
static int read_small(const char *path, char *buf, size_t cap)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    size_t n = fread(buf, 1, cap - 1, f);
    int bad = ferror(f);
    fclose(f);
    if (bad)
        return -1;
    buf[n] = '\0';
    return 0;
}

glm_status tp_rdma_read_gids(const char *sysfs_root, const char *dev, int port, tp_gid_entry *out,
                             size_t cap, size_t *n, glm_error *err)
{
    *n = 0;
    char path[1024], text[128];
    snprintf(path, sizeof path, "%s/%s/ports/%d/gids/0", sysfs_root, dev, port);
    if (read_small(path, text, sizeof text) != 0)
        return glm_error_set(err, GLM_ERR_IO, "cannot read %s: %s; is %s an RDMA device with port %d?",
                             path, strerror(errno), dev, port);
    for (unsigned i = 0; i < TP_RDMA_MAX_GIDS && *n < cap; i++) {
        snprintf(path, sizeof path, "%s/%s/ports/%d/gids/%u", sysfs_root, dev, port, i);
        if (read_small(path, text, sizeof text) != 0)
            break;
        tp_gid_entry e = {(int)i, TP_GID_UNKNOWN, {0}};
        if (tp_gid_parse(text, e.gid) != 0)
            continue;
        static const uint8_t zero[16];
        if (memcmp(e.gid, zero, 16) == 0)
            continue;
        snprintf(path, sizeof path, "%s/%s/ports/%d/gid_attrs/types/%u", sysfs_root, dev, port, i);
        /* Unset entries make the kernel refuse the read (EINVAL): leave those unknown. */
        if (read_small(path, text, sizeof text) == 0)
            e.type = tp_gid_type_parse(text);
        out[(*n)++] = e;
    }
    return GLM_OK;
}

/* ---- the parameter blob ------------------------------------------------------------------ */

size_t tp_rdma_params_encode(const tp_rdma_params *p, uint8_t *buf)
{
    uint8_t *w = buf;
    le_put_u32(w, TP_RDMA_BLOB_MAGIC);
    le_put_u32(w + 4, TP_RDMA_BLOB_VERSION);
    le_put_u32(w + 8, p->n_hca);
    le_put_u32(w + 12, p->slot_bytes);
    le_put_u64(w + 16, p->addr);
    w += 24;
    for (unsigned h = 0; h < TP_RDMA_MAX_HCA; h++) {
        const tp_rdma_hca_params *c = &p->hca[h];
        le_put_u32(w, c->qpn);
        le_put_u32(w + 4, c->psn);
        le_put_u32(w + 8, c->rkey);
        le_put_u16(w + 12, c->lid);
        w[14] = c->port;
        w[15] = c->mtu;
        memcpy(w + 16, c->gid, 16);
        memset(w + 32, 0, 32);
        memcpy(w + 32, c->name, strnlen(c->name, 31));
        w += 64;
    }
    return (size_t)(w - buf);
}

static glm_status blob_bad(glm_error *err, const char *what)
{
    return glm_error_set(err, GLM_ERR_PEER, "the peer's rdma parameters are malformed: %s", what);
}

static int name_ok(const uint8_t *name)
{
    size_t n = strnlen((const char *)name, 32);
    if (n == 0 || n == 32)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!isalnum(name[i]) && name[i] != '_' && name[i] != '-' && name[i] != '.')
            return 0;
    for (size_t i = n; i < 32; i++)
        if (name[i] != 0)
            return 0;
    return 1;
}

glm_status tp_rdma_params_decode(const uint8_t *buf, size_t len, tp_rdma_params *p, glm_error *err)
{
    memset(p, 0, sizeof *p);
    if (len != TP_RDMA_BLOB_BYTES)
        return blob_bad(err, "wrong length");
    if (le_get_u32(buf) != TP_RDMA_BLOB_MAGIC)
        return blob_bad(err, "wrong magic");
    if (le_get_u32(buf + 4) != TP_RDMA_BLOB_VERSION)
        return glm_error_set(err, GLM_ERR_PEER, "the peer's rdma parameters are version %" PRIu32
                             ", this build speaks %u; run the same glmchat build on both",
                             le_get_u32(buf + 4), TP_RDMA_BLOB_VERSION);
    p->n_hca = le_get_u32(buf + 8);
    p->slot_bytes = le_get_u32(buf + 12);
    p->addr = le_get_u64(buf + 16);
    if (p->n_hca == 0 || p->n_hca > TP_RDMA_MAX_HCA)
        return blob_bad(err, "HCA count outside 1..4");
    if (p->slot_bytes == 0 || p->slot_bytes % TP_RDMA_PAGE != 0)
        return blob_bad(err, "slot size is not a positive multiple of 4096");
    if (p->addr == 0)
        return blob_bad(err, "region address is 0");
    const uint8_t *r = buf + 24;
    for (unsigned h = 0; h < TP_RDMA_MAX_HCA; h++, r += 64) {
        tp_rdma_hca_params *c = &p->hca[h];
        c->qpn = le_get_u32(r);
        c->psn = le_get_u32(r + 4);
        c->rkey = le_get_u32(r + 8);
        c->lid = le_get_u16(r + 12);
        c->port = r[14];
        c->mtu = r[15];
        memcpy(c->gid, r + 16, 16);
        if (h >= p->n_hca) {
            static const uint8_t zero[64];
            if (memcmp(r, zero, 64) != 0)
                return blob_bad(err, "an unused HCA entry is not zero");
            continue;
        }
        if (c->qpn == 0 || c->qpn > 0xffffff || c->psn > 0xffffff)
            return blob_bad(err, "queue pair or packet sequence number outside 24 bits");
        if (c->port == 0 || c->mtu < 1 || c->mtu > 5)
            return blob_bad(err, "port 0 or MTU code outside 1..5");
        if (!name_ok(r + 32))
            return blob_bad(err, "device name is not a short plain name");
        memcpy(c->name, r + 32, 32);
    }
    return GLM_OK;
}

glm_status tp_rdma_params_compatible(const tp_rdma_params *mine, const tp_rdma_params *peer,
                                     glm_error *err)
{
    if (mine->n_hca != peer->n_hca)
        return glm_error_set(err, GLM_ERR_PEER,
                             "the ranks use different numbers of RDMA devices: %" PRIu32 " here, %" PRIu32
                             " on the peer; set GLMCHAT_RDMA_HCA to the same count on both",
                             mine->n_hca, peer->n_hca);
    if (mine->slot_bytes != peer->slot_bytes)
        return glm_error_set(err, GLM_ERR_PEER,
                             "the ranks use different rdma slot sizes: %" PRIu32 " here, %" PRIu32
                             " on the peer; run the same glmchat build on both",
                             mine->slot_bytes, peer->slot_bytes);
    return GLM_OK;
}

uint8_t tp_rdma_path_mtu(uint8_t mine, uint8_t peer)
{
    return mine < peer ? mine : peer;
}

uint32_t tp_rdma_psn(uint64_t seed)
{
    /* splitmix64 finaliser: neighbouring seeds give unrelated PSNs. */
    uint64_t z = seed + 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return (uint32_t)(z & 0xffffff);
}
