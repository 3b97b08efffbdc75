/* rdma.c: the rdma data transport over libibverbs (RoCE v2 on the Sparks' ConnectX-7): region,
 * queue pairs INIT->RTR->RTS, and each exchange as RDMA WRITE payload + inline WRITE of the flag. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <infiniband/verbs.h>

#include "tp/rdma.h"

#define TP_RDMA_SEND_DEPTH 256
#define TP_RDMA_DEFAULT_SLOT (16u << 20)
#define TP_RDMA_SYSFS "/sys/class/infiniband"

typedef struct tp_rdma_hca {
    struct ibv_context *ctx;
    struct ibv_pd *pd;
    struct ibv_mr *mr;
    struct ibv_cq *cq;
    struct ibv_qp *qp;
    uint8_t port;
    int gid_index;
    union ibv_gid gid;
    enum ibv_mtu mtu;
    uint16_t lid;
    uint32_t psn;
    uint64_t posted;    /* signaled flag writes posted */
    uint64_t completed; /* and completed */
    char name[32];
} tp_rdma_hca;

struct tp_rdma {
    tp_transport base;
    tp_rdma_layout layout;
    uint8_t *region;
    unsigned n_hca;
    tp_rdma_hca hca[TP_RDMA_MAX_HCA];
    tp_rdma_params peer;
    uint8_t ack_timeout, traffic_class;
    int connected;
};

int tp_rdma_list_devices(char names[][32], int cap)
{
    int num = 0;
    struct ibv_device **list = ibv_get_device_list(&num);
    if (!list)
        return 0;
    int n = 0;
    for (int i = 0; i < num && n < cap; i++)
        snprintf(names[n++], 32, "%s", ibv_get_device_name(list[i]));
    ibv_free_device_list(list);
    return n;
}

/* Is name in the comma-separated list (NULL list: every name)? */
static int listed(const char *list, const char *name)
{
    if (!list)
        return 1;
    size_t n = strlen(name);
    for (const char *p = list; *p;) {
        size_t len = strcspn(p, ",");
        if (len == n && strncmp(p, name, n) == 0)
            return 1;
        p += len;
        if (*p == ',')
            p++;
    }
    return 0;
}

static int choose_gid(const char *sysfs, const char *dev, int port, const tp_rdma_options *o, glm_error *err)
{
    if (o->gid_index_given)
        return o->gid_index;
    tp_gid_entry table[TP_RDMA_MAX_GIDS];
    size_t n = 0;
    if (tp_rdma_read_gids(sysfs, dev, port, table, TP_RDMA_MAX_GIDS, &n, err) != GLM_OK)
        return -1;
    int idx = tp_rdma_pick_gid(table, n, NULL);
    if (idx < 0)
        glm_error_set(err, GLM_ERR_UNSUPPORTED,
                      "RDMA device %s port %d has no RoCE v2 GID with an IPv4 address (see "
                      "show_gids); give its interface an IPv4 address or set rdma_gid_index (config or "
                      "GLMCHAT_RDMA_GID_INDEX)",
                      dev, port);
    return idx;
}

static void hca_close(tp_rdma_hca *h)
{
    if (h->qp)
        ibv_destroy_qp(h->qp);
    if (h->cq)
        ibv_destroy_cq(h->cq);
    if (h->mr)
        ibv_dereg_mr(h->mr);
    if (h->pd)
        ibv_dealloc_pd(h->pd);
    if (h->ctx)
        ibv_close_device(h->ctx);
    memset(h, 0, sizeof *h);
}

static glm_status qp_to_init(tp_rdma_hca *h, glm_error *err)
{
    struct ibv_qp_attr a = {0};
    a.qp_state = IBV_QPS_INIT;
    a.pkey_index = 0;
    a.port_num = h->port;
    a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
    int rc = ibv_modify_qp(h->qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
    if (rc)
        return glm_error_set(err, GLM_ERR_BACKEND, "%s: queue pair to INIT failed: %s", h->name, strerror(rc));
    return GLM_OK;
}

/* Opens one device if its port is ACTIVE on Ethernet with a usable GID; 1 opened, 0 skipped. */
static int hca_open(tp_rdma *r, struct ibv_device *dev, const tp_rdma_options *o, const char *sysfs,
                    tp_rdma_hca *h, glm_error *err)
{
    snprintf(h->name, sizeof h->name, "%s", ibv_get_device_name(dev));
    h->port = 1;
    h->ctx = ibv_open_device(dev);
    if (!h->ctx) {
        glm_error_set(err, GLM_ERR_BACKEND, "cannot open RDMA device %s: %s", h->name, strerror(errno));
        return -1;
    }
    struct ibv_port_attr pa;
    if (ibv_query_port(h->ctx, h->port, &pa) != 0 || pa.state != IBV_PORT_ACTIVE) {
        glm_error_set(err, GLM_ERR_UNSUPPORTED, "RDMA device %s port 1 is not ACTIVE (ibv_devinfo); "
                      "check the cable and the link", h->name);
        hca_close(h);
        return 0;
    }
    h->mtu = pa.active_mtu;
    h->lid = pa.lid;
    h->gid_index = choose_gid(sysfs, h->name, h->port, o, err);
    if (h->gid_index < 0 || ibv_query_gid(h->ctx, h->port, h->gid_index, &h->gid) != 0) {
        hca_close(h);
        return 0;
    }
    h->pd = ibv_alloc_pd(h->ctx);
    /* The receive MR must not use relaxed ordering: the flag written after the payload on the
     * same queue pair is only trusted because RC places the two writes in order. */
    if (h->pd)
        h->mr = ibv_reg_mr(h->pd, r->region, r->layout.total,
                           IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    if (h->mr)
        h->cq = ibv_create_cq(h->ctx, TP_RDMA_SEND_DEPTH, NULL, NULL, 0);
    if (h->cq) {
        struct ibv_qp_init_attr qa = {0};
        qa.send_cq = h->cq;
        qa.recv_cq = h->cq;
        qa.qp_type = IBV_QPT_RC;
        qa.cap.max_send_wr = TP_RDMA_SEND_DEPTH;
        qa.cap.max_recv_wr = 1;
        qa.cap.max_send_sge = 1;
        qa.cap.max_recv_sge = 1;
        qa.cap.max_inline_data = 16;
        h->qp = ibv_create_qp(h->pd, &qa);
    }
    if (!h->qp) {
        glm_error_set(err, GLM_ERR_BACKEND, "RDMA device %s: cannot set up memory and queues: %s "
                      "(is the memlock limit high enough? ulimit -l unlimited)", h->name, strerror(errno));
        hca_close(h);
        return -1;
    }
    h->psn = tp_rdma_psn(((uint64_t)getpid() << 32) ^ (uint64_t)tp_now_ms() ^ h->qp->qp_num);
    if (qp_to_init(h, err) != GLM_OK) {
        hca_close(h);
        return -1;
    }
    return 1;
}

void tp_rdma_free(tp_rdma *r)
{
    if (!r)
        return;
    for (unsigned i = 0; i < r->n_hca; i++)
        hca_close(&r->hca[i]);
    free(r->region);
    free(r);
}

static void fill_local_params(const tp_rdma *r, tp_rdma_params *p)
{
    memset(p, 0, sizeof *p);
    p->n_hca = r->n_hca;
    p->slot_bytes = (uint32_t)r->layout.slot_bytes;
    p->addr = (uint64_t)(uintptr_t)r->region;
    for (unsigned i = 0; i < r->n_hca; i++) {
        const tp_rdma_hca *h = &r->hca[i];
        p->hca[i].qpn = h->qp->qp_num;
        p->hca[i].psn = h->psn;
        p->hca[i].rkey = h->mr->rkey;
        p->hca[i].lid = h->lid;
        p->hca[i].port = h->port;
        p->hca[i].mtu = (uint8_t)h->mtu;
        memcpy(p->hca[i].gid, h->gid.raw, 16);
        snprintf(p->hca[i].name, sizeof p->hca[i].name, "%s", h->name);
    }
}

static glm_status open_devices(tp_rdma *r, const tp_rdma_options *o, glm_error *err)
{
    const char *hcas = o->hca_list;
    const char *sysfs = o->sysfs_root ? o->sysfs_root : TP_RDMA_SYSFS;
    int num = 0;
    struct ibv_device **list = ibv_get_device_list(&num);
    if (!list || num == 0) {
        if (list)
            ibv_free_device_list(list);
        return glm_error_set(err, GLM_ERR_UNSUPPORTED, "no RDMA device on this machine (%s is empty; "
                             "ibv_devices lists none); use --transport tcp", sysfs);
    }
    glm_error skipped = {GLM_OK, ""};
    for (int i = 0; i < num && r->n_hca < TP_RDMA_MAX_HCA; i++) {
        if (!listed(hcas, ibv_get_device_name(list[i])))
            continue;
        int rc = hca_open(r, list[i], o, sysfs, &r->hca[r->n_hca], &skipped);
        if (rc < 0) {
            ibv_free_device_list(list);
            *err = skipped;
            return skipped.status;
        }
        if (rc == 1)
            r->n_hca++;
    }
    ibv_free_device_list(list);
    if (r->n_hca == 0) {
        if (skipped.status != GLM_OK)
            return glm_error_set(err, skipped.status, "%s", skipped.message);
        return glm_error_set(err, GLM_ERR_UNSUPPORTED, "none of the RDMA devices matches GLMCHAT_RDMA_HCA=%s "
                             "(ibv_devices lists the names)", hcas ? hcas : "");
    }
    return GLM_OK;
}

tp_rdma *tp_rdma_prepare(int rank, const tp_rdma_options *o, tp_rdma_params *local, glm_error *err)
{
    tp_rdma *r = calloc(1, sizeof *r);
    if (!r) {
        glm_error_set(err, GLM_ERR_NOMEM, "out of memory for the rdma transport");
        return NULL;
    }
    r->base.rank = rank;
    r->ack_timeout = o->ack_timeout ? o->ack_timeout : 20;
    r->traffic_class = o->traffic_class;
    size_t slot = o->slot_bytes ? o->slot_bytes : TP_RDMA_DEFAULT_SLOT;
    /* The HCA count is not known yet; the layout reserves flags for the maximum. */
    if (tp_rdma_layout_make(slot, TP_RDMA_MAX_HCA, &r->layout, err) != GLM_OK || slot > UINT32_MAX) {
        if (slot > UINT32_MAX)
            glm_error_set(err, GLM_ERR_ARG, "an rdma slot of %zu bytes is too large", slot);
        free(r);
        return NULL;
    }
    if (posix_memalign((void **)&r->region, TP_RDMA_PAGE, r->layout.total) != 0) {
        glm_error_set(err, GLM_ERR_NOMEM, "out of memory for a %zu-byte rdma region", r->layout.total);
        free(r);
        return NULL;
    }
    memset(r->region, 0, r->layout.total);
    if (open_devices(r, o, err) != GLM_OK) {
        tp_rdma_free(r);
        return NULL;
    }
    r->layout.n_hca = r->n_hca;
    fill_local_params(r, local);
    return r;
}

static glm_status qp_to_rts(tp_rdma *r, tp_rdma_hca *h, const tp_rdma_hca_params *peer, glm_error *err)
{
    struct ibv_qp_attr a = {0};
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = (enum ibv_mtu)tp_rdma_path_mtu((uint8_t)h->mtu, peer->mtu);
    a.dest_qp_num = peer->qpn;
    a.rq_psn = peer->psn;
    a.max_dest_rd_atomic = 1;
    a.min_rnr_timer = 12;
    a.ah_attr.is_global = 1; /* RoCE needs the global route header */
    memcpy(a.ah_attr.grh.dgid.raw, peer->gid, 16);
    a.ah_attr.grh.sgid_index = (uint8_t)h->gid_index;
    a.ah_attr.grh.hop_limit = 64;
    a.ah_attr.grh.traffic_class = r->traffic_class;
    a.ah_attr.dlid = peer->lid;
    a.ah_attr.port_num = h->port;
    int rc = ibv_modify_qp(h->qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                                          IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
    if (rc)
        return glm_error_set(err, GLM_ERR_PEER, "%s: queue pair to RTR toward %s failed: %s; check both "
                             "ends' GIDs (show_gids) and that the link addresses share a subnet",
                             h->name, peer->name, strerror(rc));
    memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_RTS;
    a.timeout = r->ack_timeout;
    a.retry_cnt = 7;
    a.rnr_retry = 7;
    a.sq_psn = h->psn;
    a.max_rd_atomic = 1;
    rc = ibv_modify_qp(h->qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                                      IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
    if (rc)
        return glm_error_set(err, GLM_ERR_PEER, "%s: queue pair to RTS failed: %s", h->name, strerror(rc));
    return GLM_OK;
}

glm_status tp_rdma_connect(tp_rdma *r, const tp_rdma_params *peer, const char *peer_name, glm_error *err)
{
    tp_rdma_params mine;
    fill_local_params(r, &mine);
    glm_status st = tp_rdma_params_compatible(&mine, peer, err);
    if (st != GLM_OK)
        return st;
    r->peer = *peer;
    snprintf(r->base.peer, sizeof r->base.peer, "%s", peer_name ? peer_name : "the peer");
    for (unsigned i = 0; i < r->n_hca; i++) {
        st = qp_to_rts(r, &r->hca[i], &peer->hca[i], err);
        if (st != GLM_OK)
            return st;
    }
    r->connected = 1;
    return GLM_OK;
}

/* Posts the payload stripe (unsignaled) chained to the 8-byte flag (inline, signaled). */
static glm_status post_stripe(tp_rdma *r, unsigned h, unsigned slot, size_t off, size_t len, uint64_t seq,
                              glm_error *err)
{
    tp_rdma_hca *c = &r->hca[h];
    struct ibv_sge data_sge = {(uint64_t)(uintptr_t)(r->region + r->layout.send_off[slot] + off),
                               (uint32_t)len, c->mr->lkey};
    struct ibv_sge flag_sge = {(uint64_t)(uintptr_t)&seq, sizeof seq, c->mr->lkey};
    struct ibv_send_wr flag_wr = {0}, data_wr = {0}, *bad = NULL;
    flag_wr.opcode = IBV_WR_RDMA_WRITE;
    flag_wr.sg_list = &flag_sge;
    flag_wr.num_sge = 1;
    flag_wr.send_flags = IBV_SEND_INLINE | IBV_SEND_SIGNALED;
    flag_wr.wr.rdma.remote_addr = r->peer.addr + tp_rdma_flag_offset(&r->layout, slot, h);
    flag_wr.wr.rdma.rkey = r->peer.hca[h].rkey;
    flag_wr.wr_id = seq;
    struct ibv_send_wr *first = &flag_wr;
    if (len > 0) {
        data_wr.opcode = IBV_WR_RDMA_WRITE;
        data_wr.sg_list = &data_sge;
        data_wr.num_sge = 1;
        data_wr.wr.rdma.remote_addr = r->peer.addr + r->layout.recv_off[slot] + off;
        data_wr.wr.rdma.rkey = r->peer.hca[h].rkey;
        data_wr.next = &flag_wr;
        first = &data_wr;
    }
    int rc = ibv_post_send(c->qp, first, &bad);
    if (rc)
        return glm_error_set(err, GLM_ERR_PEER, "%s: posting exchange %" PRIu64 " failed: %s",
                             c->name, seq, strerror(rc));
    c->posted++;
    return GLM_OK;
}

static glm_status drain_completions(tp_rdma *r, uint64_t seq, glm_error *err)
{
    for (unsigned h = 0; h < r->n_hca; h++) {
        tp_rdma_hca *c = &r->hca[h];
        struct ibv_wc wc[8];
        int n = ibv_poll_cq(c->cq, 8, wc);
        if (n < 0)
            return glm_error_set(err, GLM_ERR_PEER, "%s: polling completions failed", c->name);
        for (int i = 0; i < n; i++) {
            if (wc[i].status != IBV_WC_SUCCESS)
                return glm_error_set(err, GLM_ERR_PEER,
                                     "%s: RDMA write to %s failed at exchange %" PRIu64 ": %s (vendor "
                                     "error 0x%x); check the link (ibv_devinfo, ib_write_lat) and "
                                     "restart both ranks",
                                     c->name, r->base.peer, seq, ibv_wc_status_str(wc[i].status),
                                     wc[i].vendor_err);
            c->completed++;
        }
    }
    return GLM_OK;
}

static int all_sent(const tp_rdma *r)
{
    for (unsigned h = 0; h < r->n_hca; h++)
        if (r->hca[h].completed != r->hca[h].posted)
            return 0;
    return 1;
}

static glm_status rdma_all_gather(tp_transport *base, const float *mine, float *gathered,
                                  size_t stride, size_t n, uint64_t seq, int64_t deadline_ms,
                                  glm_error *err)
{
    tp_rdma *r = (tp_rdma *)base;
    size_t bytes = n * sizeof(float);
    if (!r->connected)
        return glm_error_set(err, GLM_ERR_ARG, "the rdma transport is not connected");
    if (bytes > r->layout.slot_bytes)
        return glm_error_set(err, GLM_ERR_ARG, "an exchange of %zu bytes exceeds the rdma slot of %zu",
                             bytes, r->layout.slot_bytes);
    unsigned slot = tp_rdma_slot(seq);
    memcpy(r->region + r->layout.send_off[slot], mine, bytes);
    for (unsigned h = 0; h < r->n_hca; h++) {
        size_t off, len;
        tp_rdma_stripe(bytes, r->n_hca, h, &off, &len);
        glm_status st = post_stripe(r, h, slot, off, len, seq, err);
        if (st != GLM_OK)
            return st;
    }
    unsigned ready = 0;
    int late = 0; /* past the timeout, waiting on a peer that said it is coming */
    for (uint64_t spins = 0;; spins++) {
        glm_status st = drain_completions(r, seq, err);
        if (st != GLM_OK)
            return st;
        for (unsigned h = 0; h < r->n_hca; h++) {
            const uint64_t *flag = (const uint64_t *)(r->region + tp_rdma_flag_offset(&r->layout, slot, h));
            uint64_t v = __atomic_load_n(flag, __ATOMIC_ACQUIRE);
            tp_flag_state fs = tp_rdma_flag_state(v, seq);
            if (fs == TP_FLAG_BAD)
                return glm_error_set(err, GLM_ERR_PEER, "the ranks are out of step: exchange %" PRIu64
                                     " here, flag %" PRIu64 " from %s on %s; restart both ranks",
                                     seq, v, r->base.peer, r->hca[h].name);
            if (fs == TP_FLAG_READY)
                ready |= 1u << h;
        }
        if (ready == (1u << r->n_hca) - 1 && all_sent(r))
            break;
        if ((spins & 1023) == 1023) {
            if (tp_now_ms() >= deadline_ms) {
                int64_t later = tp_wait_longer(base, seq);
                if (later == 0)
                    return glm_error_set(err, GLM_ERR_PEER, "%s did not answer rdma exchange %" PRIu64
                                         " in time", r->base.peer, seq);
                deadline_ms = later;
                late = 1;
            }
            if (late) { /* a late peer may take seconds: leave the cores it shares */
                struct timespec nap = {0, 50 * 1000L};
                nanosleep(&nap, NULL);
            }
            if (base->aborted && base->aborted(base->abort_user))
                return glm_error_set(err, GLM_ERR_PEER, "exchange %" PRIu64 " with %s was abandoned: the peer failed",
                                     seq, r->base.peer);
        }
    }
    float *own = gathered + (size_t)base->rank * stride;
    if (own != mine)
        memmove(own, mine, bytes);
    memcpy(gathered + (size_t)(1 - base->rank) * stride, r->region + r->layout.recv_off[slot], bytes);
    return GLM_OK;
}

static void rdma_free(tp_transport *base)
{
    tp_rdma_free((tp_rdma *)base);
}

/* no exchange: rdma is the two-rank fast path, refused for more ranks by name */
static const tp_transport_ops rdma_ops = {"rdma", rdma_all_gather, rdma_free, NULL};

tp_transport *tp_rdma_transport(tp_rdma *r)
{
    r->base.ops = &rdma_ops;
    r->base.max_floats = r->layout.slot_bytes / sizeof(float); /* a larger exchange is split above */
    return &r->base;
}
