/* transport.h: what the two ranks use to talk: a TCP control connection carrying framed control
 * messages, and a data transport (tcp or rdma) whose one collective is a two-rank all-gather. */
#ifndef GLMCHAT_TP_TRANSPORT_H
#define GLMCHAT_TP_TRANSPORT_H

#include <stddef.h>
#include <stdint.h>

#include "glm.h"
#include "tp/protocol.h"

/* ---- time and sockets (tcp.c) ---------------------------------------------------------
 * Every wait has a deadline on the monotonic clock in ms; nothing blocks forever. Sockets are
 * non-blocking with TCP_NODELAY; writes never raise SIGPIPE. */

int64_t tp_now_ms(void);

/* Splits "HOST:PORT" (HOST may be "[v6]"); the port must be 0..65535. */
glm_status tp_parse_hostport(const char *hostport, char *host, size_t host_cap, char *port,
                             size_t port_cap, glm_error *err);

/* A listening socket on HOST:PORT (port 0: any free port; see tp_tcp_local_port). -1 on error. */
int tp_tcp_listen(const char *hostport, glm_error *err);
int tp_tcp_local_port(int fd);

/* Waits until deadline for a connection; returns its fd, or -1 with GLM_ERR_PEER ("no head
 * connected") or GLM_ERR_IO. The peer's address goes into peer_name. */
int tp_tcp_accept(int listen_fd, int64_t deadline_ms, char *peer_name, size_t cap, glm_error *err);

/* Connects once, giving up at deadline. -1 on error (err says why). */
int tp_tcp_connect(const char *hostport, int64_t deadline_ms, glm_error *err);

/* Writes or reads exactly len bytes before deadline. `what` names the transfer in errors. */
glm_status tp_io_write(int fd, const void *buf, size_t len, int64_t deadline_ms, const char *what,
                       glm_error *err);
glm_status tp_io_read(int fd, void *buf, size_t len, int64_t deadline_ms, const char *what,
                      glm_error *err);

/* One control message over the control connection. tp_ctrl_recv checks the frame header
 * before reading a payload, so a hostile length is refused without being allocated. */
glm_status tp_ctrl_send(int fd, const tp_msg *m, int64_t deadline_ms, glm_error *err);
glm_status tp_ctrl_recv(int fd, tp_msg *m, int64_t deadline_ms, glm_error *err);

/* ---- the data transport ---------------------------------------------------------------- */

typedef struct tp_transport tp_transport;

typedef struct tp_transport_ops {
    const char *name;
    /* Sends mine (n floats) to the peer and puts every rank's n floats in rank order, rank r's
     * at gathered + r * stride (stride >= n; n: packed, gathered[0..2n)). seq numbers the
     * exchange (1, 2, ...): both ranks must pass the same sequence of (seq, n); a difference is
     * reported as the ranks being out of step. */
    glm_status (*all_gather)(tp_transport *t, const float *mine, float *gathered, size_t stride,
                             size_t n, uint64_t seq, int64_t deadline_ms, glm_error *err);
    void (*free)(tp_transport *t);
    /* Sends out (out_n floats, 0 allowed) and receives the peer's in_n floats into in, the two
     * sides' sizes mirrored (my out_n is the peer's in_n); seq as all_gather's. The halves of the
     * star that joins more than two ranks (tp/group.h). NULL: two ranks only (rdma). */
    glm_status (*exchange)(tp_transport *t, const float *out, size_t out_n, float *in, size_t in_n,
                           uint64_t seq, int64_t deadline_ms, glm_error *err);
} tp_transport_ops;

struct tp_transport {
    const tp_transport_ops *ops;
    int rank;                   /* this side's rank, 0 or 1 */
    char peer[128];             /* the peer's address, for messages */
    /* Polled while waiting: nonzero means give up now (the heartbeat saw the peer fail). */
    int (*aborted)(void *user);
    void *abort_user;
    /* Asked (with abort_user) when a wait for exchange seq reaches its deadline: a later deadline
     * while the peer is known to be alive and still on its way to that exchange, else 0 (the
     * wait fails). NULL: the deadline holds. */
    int64_t (*late_deadline)(void *user, uint64_t seq);
    /* The most floats one exchange may carry from a rank (rdma: its slot); 0: any. A rank splits
     * a larger collective into exchanges of at most this many (tp_rank_all_gather). */
    size_t max_floats;
    glm_error last;             /* the last failure, kept for tp_transport_last_error */
};

/* The one entry point for collectives: runs ops->all_gather, bounding it by timeout_ms, and
 * keeps a failure in t->last. */
glm_status tp_all_gather(tp_transport *t, const float *mine, float *gathered, size_t n,
                         uint64_t seq, int timeout_ms, glm_error *err);

/* The same with rank r's floats at gathered + r * stride (stride >= n): a piece of a larger
 * gather lands in place (tp_rank_all_gather), with no copy between. */
glm_status tp_all_gather_at(tp_transport *t, const float *mine, float *gathered, size_t stride,
                            size_t n, uint64_t seq, int timeout_ms, glm_error *err);

/* The bounded entry point for ops->exchange, as tp_all_gather; GLM_ERR_UNSUPPORTED naming the
 * transport when it has none. */
glm_status tp_exchange(tp_transport *t, const float *out, size_t out_n, float *in, size_t in_n,
                       uint64_t seq, int timeout_ms, glm_error *err);

/* Gathers then sums both ranks' partials in rank order (rank 0 + rank 1) into buf, so both ranks
 * hold identical bits. scratch holds 2n floats. */
glm_status tp_all_reduce_sum(tp_transport *t, float *buf, float *scratch, size_t n, uint64_t seq,
                             int timeout_ms, glm_error *err);

/* At a wait's deadline: t->late_deadline's later one (past now), or 0 when the wait is to fail. */
int64_t tp_wait_longer(tp_transport *t, uint64_t seq);

const char *tp_transport_last_error(const tp_transport *t);
void tp_transport_free(tp_transport *t);

/* tcp: a second TCP connection used only for exchanges; the transport takes fd. */
tp_transport *tp_tcp_transport_new(int fd, int rank, const char *peer, glm_error *err);

#endif
