/* rdma_logic.h: the parts of the rdma transport that need no RDMA hardware: region layout, slots,
 * sequence flags, striping over HCAs, GID choice, and the parameter blob the ranks exchange. */
#ifndef GLMCHAT_TP_RDMA_LOGIC_H
#define GLMCHAT_TP_RDMA_LOGIC_H

#include <stddef.h>
#include <stdint.h>

#include "glm.h"

#define TP_RDMA_MAX_HCA 4u
#define TP_RDMA_SLOTS 2u
#define TP_RDMA_FLAG_STRIDE 64u   /* one cache line per flag, so flags never share a line */
#define TP_RDMA_STRIPE_ALIGN 16u  /* stripes are cut at 16-byte packs */
#define TP_RDMA_PAGE 4096u
#define TP_RDMA_BLOB_MAGIC 0x41444d52u /* "RMDA" */
#define TP_RDMA_BLOB_VERSION 1u
#define TP_RDMA_MAX_GIDS 256u

/* One rank's registered region:
 *   recv[slot]            slot_bytes each   written by the peer's NIC, read here
 *   flag[slot][hca]       64-byte stride    written by the peer's NIC (the sequence number)
 *   send[slot]            slot_bytes each   written here, read by our NIC
 * Every part starts on a 4096-byte boundary. */
typedef struct tp_rdma_layout {
    size_t slot_bytes;
    unsigned n_hca;
    size_t recv_off[TP_RDMA_SLOTS];
    size_t flag_off;
    size_t send_off[TP_RDMA_SLOTS];
    size_t total;
} tp_rdma_layout;

/* slot_bytes must be a positive multiple of 4096 and n_hca 1..TP_RDMA_MAX_HCA; refuses sizes
 * whose arithmetic would overflow. */
glm_status tp_rdma_layout_make(size_t slot_bytes, unsigned n_hca, tp_rdma_layout *l, glm_error *err);

/* Offset of the flag that the peer's HCA `hca` writes for `slot`. */
size_t tp_rdma_flag_offset(const tp_rdma_layout *l, unsigned slot, unsigned hca);

/* Exchanges are numbered 1, 2, ...; exchange seq uses slot seq & 1. */
unsigned tp_rdma_slot(uint64_t seq);

/* What a flag word says while we wait for exchange seq in its slot. */
typedef enum tp_flag_state {
    TP_FLAG_WAIT = 0,  /* still the value from two exchanges ago (or zero before the first) */
    TP_FLAG_READY = 1, /* the peer's data for seq has been placed */
    TP_FLAG_BAD = 2,   /* any other value: the ranks are out of step */
} tp_flag_state;
tp_flag_state tp_rdma_flag_state(uint64_t flag, uint64_t seq);

/* Cuts nbytes into n_hca near-equal stripes of whole 16-byte packs (the last pack may be short);
 * stripe h is [*off, *off + *len). Stripes of zero length are possible for tiny buffers. */
void tp_rdma_stripe(size_t nbytes, unsigned n_hca, unsigned h, size_t *off, size_t *len);

/* ---- GIDs ------------------------------------------------------------------------------ */

typedef enum tp_gid_type { TP_GID_UNKNOWN = 0, TP_GID_IB_ROCE_V1 = 1, TP_GID_ROCE_V2 = 2 } tp_gid_type;

typedef struct tp_gid_entry {
    int index;
    tp_gid_type type;
    uint8_t gid[16];
} tp_gid_entry;

/* 1 when gid is an IPv4-mapped address (::ffff:a.b.c.d); then ipv4 (when non-NULL) gets a.b.c.d. */
int tp_gid_is_ipv4(const uint8_t gid[16], uint8_t ipv4[4]);

/* The index of the RoCE v2 entry carrying an IPv4 address: the one equal to want_ipv4 when that
 * is given, else the lowest such index. -1 when there is none. The index is looked up every
 * time because it is not stable: an address re-added after a peer reboot may move to the next. */
int tp_rdma_pick_gid(const tp_gid_entry *table, size_t n, const uint8_t *want_ipv4);

/* Parses sysfs text: a GID "fe80:0000:...:0001" (8 groups of 4 hex digits) and a type
 * "RoCE v2" / "IB/RoCE v1". Return 0 on success, -1 on malformed text. */
int tp_gid_parse(const char *text, uint8_t gid[16]);
tp_gid_type tp_gid_type_parse(const char *text);

/* Reads port `port` of device `dev` from a sysfs tree (normally "/sys/class/infiniband"):
 * ports/PORT/gids/N and ports/PORT/gid_attrs/types/N. Entries that are all zero are skipped.
 * Hardware-free, so tests point it at a directory of their own. */
glm_status tp_rdma_read_gids(const char *sysfs_root, const char *dev, int port, tp_gid_entry *out,
                             size_t cap, size_t *n, glm_error *err);

/* ---- the parameter blob exchanged over the TCP bootstrap -------------------------------- */

typedef struct tp_rdma_hca_params {
    uint32_t qpn;   /* 24 bits */
    uint32_t psn;   /* 24 bits */
    uint32_t rkey;
    uint16_t lid;
    uint8_t port;
    uint8_t mtu;    /* enum ibv_mtu: 1 (256) .. 5 (4096) */
    uint8_t gid[16];
    char name[32];  /* device name, for messages */
} tp_rdma_hca_params;

typedef struct tp_rdma_params {
    uint32_t n_hca;
    uint32_t slot_bytes;
    uint64_t addr;  /* the region's address in the sender's process */
    tp_rdma_hca_params hca[TP_RDMA_MAX_HCA];
} tp_rdma_params;

#define TP_RDMA_BLOB_BYTES (4 + 4 + 4 + 4 + 8 + TP_RDMA_MAX_HCA * (4 + 4 + 4 + 2 + 1 + 1 + 16 + 32))

/* Encodes into buf (at least TP_RDMA_BLOB_BYTES); returns the byte count. */
size_t tp_rdma_params_encode(const tp_rdma_params *p, uint8_t *buf);
/* Decodes and checks every field (magic, version, counts, 24-bit numbers, MTU, names). */
glm_status tp_rdma_params_decode(const uint8_t *buf, size_t len, tp_rdma_params *p, glm_error *err);

/* Checks that the two ranks' geometry matches (HCA count, slot size). */
glm_status tp_rdma_params_compatible(const tp_rdma_params *mine, const tp_rdma_params *peer,
                                     glm_error *err);

/* The path MTU both ends support (the smaller enum ibv_mtu value). */
uint8_t tp_rdma_path_mtu(uint8_t mine, uint8_t peer);

/* A 24-bit packet sequence number from a seed (time, pid): never the same for a restarted rank,
 * so stale packets of an old connection cannot be taken for new ones. */
uint32_t tp_rdma_psn(uint64_t seed);

#endif
