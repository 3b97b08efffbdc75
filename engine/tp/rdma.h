/* rdma.h: the rdma data transport (libibverbs, RoCE v2): RC queue pairs, one-shot RDMA writes of
 * payload plus a sequence flag into the peer's two-slot region, striped over one or more HCAs. */
#ifndef GLMCHAT_TP_RDMA_H
#define GLMCHAT_TP_RDMA_H

#include <stddef.h>

#include "glm.h"
#include "tp/rdma_logic.h"
#include "tp/transport.h"

typedef struct tp_rdma_options {
    const char *hca_list;    /* "rocep1s0f0,roceP2p1s0f0"; NULL: every device whose port is
                                ACTIVE with a RoCE v2 IPv4 GID (the config's rdma_hca) */
    int gid_index_given;     /* 0: scan for the RoCE v2 IPv4 entry (the config's rdma_gid_index) */
    int gid_index;           /* used when gid_index_given */
    size_t slot_bytes;       /* largest exchange per rank; 0: 16 MiB */
    uint8_t ack_timeout;     /* 4.096 us * 2^v per try; 0: 20 (~4 s), which rides out brief stalls */
    uint8_t traffic_class;
    const char *sysfs_root;  /* NULL: /sys/class/infiniband */
} tp_rdma_options;

typedef struct tp_rdma tp_rdma;

/* Names of the RDMA devices present (up to cap). Returns the count, 0 when there are none. */
int tp_rdma_list_devices(char names[][32], int cap);

/* Opens the HCAs, registers this rank's region and creates queue pairs in INIT; fills `local`
 * with what the peer needs. Fails with a sentence saying what is missing ("no RDMA device: use
 * --transport tcp") when the machine has no usable device. */
tp_rdma *tp_rdma_prepare(int rank, const tp_rdma_options *o, tp_rdma_params *local, glm_error *err);

/* Moves the queue pairs to RTR and RTS toward the peer's parameters. */
glm_status tp_rdma_connect(tp_rdma *r, const tp_rdma_params *peer, const char *peer_name, glm_error *err);

/* The connected transport; it owns r from then on (tp_transport_free releases everything). */
tp_transport *tp_rdma_transport(tp_rdma *r);

/* Releases a tp_rdma that never became a transport. */
void tp_rdma_free(tp_rdma *r);

#endif
