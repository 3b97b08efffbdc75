/* tcp.c: TCP for the two ranks: sockets with deadlines, framed control messages, and the tcp
 * data transport (each all-gather sends and receives at once in one poll loop). */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "base/le.h"
#include "tp/transport.h"

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
               "exchanges send floats in the machine's order; glmchat's ranks are little-endian");

#define TP_DATA_MAGIC 0x44544c47u /* "GLTD" */
#define TP_DATA_HEADER_BYTES 16u
#define TP_POLL_SLICE_MS 50

int64_t tp_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int ms_left(int64_t deadline_ms)
{
    int64_t left = deadline_ms - tp_now_ms();
    if (left <= 0)
        return 0;
    return left > TP_POLL_SLICE_MS ? TP_POLL_SLICE_MS : (int)left;
}

glm_status tp_parse_hostport(const char *hostport, char *host, size_t host_cap, char *port,
                             size_t port_cap, glm_error *err)
{
    if (!hostport || !*hostport)
        return glm_error_set(err, GLM_ERR_ARG, "no address given; write it as HOST:PORT, e.g. 10.0.0.2:7070");
    const char *colon;
    const char *h = hostport;
    size_t hlen;
    if (hostport[0] == '[') {
        const char *close = strchr(hostport, ']');
        if (!close || close[1] != ':')
            return glm_error_set(err, GLM_ERR_ARG, "address '%s' is not [IPV6]:PORT", hostport);
        h = hostport + 1;
        hlen = (size_t)(close - h);
        colon = close + 1;
    } else {
        colon = strrchr(hostport, ':');
        if (!colon)
            return glm_error_set(err, GLM_ERR_ARG, "address '%s' has no port; write it as HOST:PORT", hostport);
        hlen = (size_t)(colon - hostport);
    }
    const char *p = colon + 1;
    size_t plen = strlen(p);
    if (hlen == 0 || hlen >= host_cap)
        return glm_error_set(err, GLM_ERR_ARG, "address '%s' has an empty or too long host", hostport);
    if (plen == 0 || plen > 5 || plen >= port_cap || strspn(p, "0123456789") != plen || atoi(p) > 65535)
        return glm_error_set(err, GLM_ERR_ARG, "address '%s' has port '%s'; give a number 0-65535",
                             hostport, p);
    memcpy(host, h, hlen);
    host[hlen] = '\0';
    memcpy(port, p, plen + 1);
    return GLM_OK;
}

static int set_socket_options(int fd)
{
    int one = 1;
    int flags = fcntl(fd, F_GETFL);
    if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0)
        return -1;
    if (fcntl(fd, F_SETFD, FD_CLOEXEC) < 0)
        return -1;
    /* Only TCP sockets take TCP_NODELAY; failing on another family is not an error. */
    (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return 0;
}

static struct addrinfo *resolve(const char *hostport, int passive, glm_error *err)
{
    char host[256], port[8];
    if (tp_parse_hostport(hostport, host, sizeof host, port, sizeof port, err) != GLM_OK)
        return NULL;
    struct addrinfo hints = {0}, *res = NULL;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = passive ? AI_PASSIVE : 0;
    int rc = getaddrinfo(host, port, &hints, &res);
    if (rc != 0) {
        glm_error_set(err, GLM_ERR_ARG, "cannot resolve '%s': %s", host, gai_strerror(rc));
        return NULL;
    }
    return res;
}

int tp_tcp_listen(const char *hostport, glm_error *err)
{
    struct addrinfo *res = resolve(hostport, 1, err);
    if (!res)
        return -1;
    int fd = -1, saved = 0;
    for (struct addrinfo *a = res; a; a = a->ai_next) {
        fd = socket(a->ai_family, a->ai_socktype, a->ai_protocol);
        if (fd < 0) {
            saved = errno;
            continue;
        }
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (bind(fd, a->ai_addr, a->ai_addrlen) == 0 && listen(fd, 8) == 0 &&
            set_socket_options(fd) == 0)
            break;
        saved = errno;
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    if (fd < 0)
        glm_error_set(err, GLM_ERR_IO, "cannot listen on %s: %s; pick a free port or a local address",
                      hostport, strerror(saved));
    return fd;
}

int tp_tcp_local_port(int fd)
{
    struct sockaddr_storage ss;
    socklen_t len = sizeof ss;
    if (getsockname(fd, (struct sockaddr *)&ss, &len) != 0)
        return -1;
    if (ss.ss_family == AF_INET)
        return ntohs(((struct sockaddr_in *)&ss)->sin_port);
    if (ss.ss_family == AF_INET6)
        return ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
    return -1;
}

static void format_peer(const struct sockaddr_storage *ss, char *out, size_t cap)
{
    char host[INET6_ADDRSTRLEN] = "?";
    int port = 0;
    if (ss->ss_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)ss;
        inet_ntop(AF_INET, &in->sin_addr, host, sizeof host);
        port = ntohs(in->sin_port);
    } else if (ss->ss_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)ss;
        inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof host);
        port = ntohs(in6->sin6_port);
    }
    snprintf(out, cap, "%s:%d", host, port);
}

int tp_tcp_accept(int listen_fd, int64_t deadline_ms, char *peer_name, size_t cap, glm_error *err)
{
    for (;;) {
        struct sockaddr_storage ss;
        socklen_t len = sizeof ss;
        int fd = accept(listen_fd, (struct sockaddr *)&ss, &len);
        if (fd >= 0) {
            if (set_socket_options(fd) != 0) {
                glm_error_set(err, GLM_ERR_IO, "cannot configure an accepted socket: %s", strerror(errno));
                close(fd);
                return -1;
            }
            if (peer_name)
                format_peer(&ss, peer_name, cap);
            return fd;
        }
        if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR && errno != ECONNABORTED) {
            glm_error_set(err, GLM_ERR_IO, "accept failed: %s", strerror(errno));
            return -1;
        }
        int wait = ms_left(deadline_ms);
        if (wait == 0) {
            glm_error_set(err, GLM_ERR_PEER, "no connection arrived in time");
            return -1;
        }
        struct pollfd p = {listen_fd, POLLIN, 0};
        if (poll(&p, 1, wait) < 0 && errno != EINTR) {
            glm_error_set(err, GLM_ERR_IO, "poll failed: %s", strerror(errno));
            return -1;
        }
    }
}

/* One non-blocking connect attempt to one address, bounded by the deadline. */
static int connect_one(const struct addrinfo *a, int64_t deadline_ms, int *err_no)
{
    int fd = socket(a->ai_family, a->ai_socktype, a->ai_protocol);
    if (fd < 0 || set_socket_options(fd) != 0) {
        *err_no = errno;
        if (fd >= 0)
            close(fd);
        return -1;
    }
    if (connect(fd, a->ai_addr, a->ai_addrlen) == 0)
        return fd;
    if (errno != EINPROGRESS) {
        *err_no = errno;
        close(fd);
        return -1;
    }
    for (;;) {
        int wait = ms_left(deadline_ms);
        if (wait == 0) {
            *err_no = ETIMEDOUT;
            close(fd);
            return -1;
        }
        struct pollfd p = {fd, POLLOUT, 0};
        int rc = poll(&p, 1, wait);
        if (rc < 0 && errno != EINTR) {
            *err_no = errno;
            close(fd);
            return -1;
        }
        if (rc > 0) {
            int so = 0;
            socklen_t sl = sizeof so;
            getsockopt(fd, SOL_SOCKET, SO_ERROR, &so, &sl);
            if (so == 0)
                return fd;
            *err_no = so;
            close(fd);
            return -1;
        }
    }
}

int tp_tcp_connect(const char *hostport, int64_t deadline_ms, glm_error *err)
{
    struct addrinfo *res = resolve(hostport, 0, err);
    if (!res)
        return -1;
    int fd = -1, err_no = ECONNREFUSED;
    for (struct addrinfo *a = res; a && fd < 0; a = a->ai_next)
        fd = connect_one(a, deadline_ms, &err_no);
    freeaddrinfo(res);
    if (fd < 0)
        glm_error_set(err, GLM_ERR_PEER, "cannot connect to %s: %s", hostport, strerror(err_no));
    return fd;
}

static glm_status io_wait(int fd, short events, int64_t deadline_ms, const char *what,
                          size_t done, size_t len, glm_error *err)
{
    int wait = ms_left(deadline_ms);
    if (wait == 0)
        return glm_error_set(err, GLM_ERR_PEER, "timed out %s (%zu of %zu bytes done)", what, done, len);
    struct pollfd p = {fd, events, 0};
    if (poll(&p, 1, wait) < 0 && errno != EINTR)
        return glm_error_set(err, GLM_ERR_IO, "poll failed %s: %s", what, strerror(errno));
    return GLM_OK;
}

glm_status tp_io_write(int fd, const void *buf, size_t len, int64_t deadline_ms, const char *what,
                       glm_error *err)
{
    const uint8_t *p = buf;
    size_t done = 0;
    while (done < len) {
        ssize_t n = send(fd, p + done, len - done, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) {
            done += (size_t)n;
            continue;
        }
        if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
            return glm_error_set(err, GLM_ERR_PEER, "connection lost %s: %s", what, strerror(errno));
        glm_status st = io_wait(fd, POLLOUT, deadline_ms, what, done, len, err);
        if (st != GLM_OK)
            return st;
    }
    return GLM_OK;
}

glm_status tp_io_read(int fd, void *buf, size_t len, int64_t deadline_ms, const char *what,
                      glm_error *err)
{
    uint8_t *p = buf;
    size_t done = 0;
    while (done < len) {
        ssize_t n = recv(fd, p + done, len - done, MSG_DONTWAIT);
        if (n > 0) {
            done += (size_t)n;
            continue;
        }
        if (n == 0)
            return glm_error_set(err, GLM_ERR_PEER, "the peer closed the connection %s", what);
        if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
            return glm_error_set(err, GLM_ERR_PEER, "connection lost %s: %s", what, strerror(errno));
        glm_status st = io_wait(fd, POLLIN, deadline_ms, what, done, len, err);
        if (st != GLM_OK)
            return st;
    }
    return GLM_OK;
}

glm_status tp_ctrl_send(int fd, const tp_msg *m, int64_t deadline_ms, glm_error *err)
{
    uint8_t *frame;
    size_t len;
    glm_status st = tp_msg_encode(m, &frame, &len, err);
    if (st != GLM_OK)
        return st;
    char what[48];
    snprintf(what, sizeof what, "sending %s", tp_msg_type_name(m->type));
    st = tp_io_write(fd, frame, len, deadline_ms, what, err);
    free(frame);
    return st;
}

glm_status tp_ctrl_recv(int fd, tp_msg *m, int64_t deadline_ms, glm_error *err)
{
    memset(m, 0, sizeof *m);
    uint8_t hdr[TP_FRAME_HEADER_BYTES];
    glm_status st = tp_io_read(fd, hdr, sizeof hdr, deadline_ms, "reading a control message", err);
    if (st != GLM_OK)
        return st;
    uint32_t type, len;
    st = tp_frame_header_decode(hdr, &type, &len, err);
    if (st != GLM_OK)
        return st;
    uint8_t *payload = malloc(len ? len : 1);
    if (!payload)
        return glm_error_set(err, GLM_ERR_NOMEM, "out of memory for a %" PRIu32 "-byte %s message",
                             len, tp_msg_type_name(type));
    st = tp_io_read(fd, payload, len, deadline_ms, "reading a control message", err);
    if (st == GLM_OK)
        st = tp_msg_decode(type, payload, len, m, err);
    free(payload);
    return st;
}

/* ---- generic transport entry points ---------------------------------------------------- */

int64_t tp_wait_longer(tp_transport *t, uint64_t seq)
{
    if (!t->late_deadline)
        return 0;
    int64_t later = t->late_deadline(t->abort_user, seq);
    return later > tp_now_ms() ? later : 0;
}

glm_status tp_all_gather_at(tp_transport *t, const float *mine, float *gathered, size_t stride,
                            size_t n, uint64_t seq, int timeout_ms, glm_error *err)
{
    glm_error local;
    glm_error *e = err ? err : &local;
    glm_status st;
    if (n == 0 || n > SIZE_MAX / (2 * sizeof(float)) || seq == 0)
        st = glm_error_set(e, GLM_ERR_ARG, "an exchange needs n > 0 floats and seq > 0 (got n %zu, seq %" PRIu64 ")",
                           n, seq);
    else if (stride < n || stride > SIZE_MAX / (2 * sizeof(float)))
        st = glm_error_set(e, GLM_ERR_ARG, "an exchange of %zu floats a rank needs them %zu or more "
                           "apart, not %zu", n, n, stride);
    else
        st = t->ops->all_gather(t, mine, gathered, stride, n, seq, tp_now_ms() + timeout_ms, e);
    if (st != GLM_OK)
        t->last = *e;
    return st;
}

glm_status tp_all_gather(tp_transport *t, const float *mine, float *gathered, size_t n,
                         uint64_t seq, int timeout_ms, glm_error *err)
{
    return tp_all_gather_at(t, mine, gathered, n, n, seq, timeout_ms, err);
}

glm_status tp_exchange(tp_transport *t, const float *out, size_t out_n, float *in, size_t in_n,
                       uint64_t seq, int timeout_ms, glm_error *err)
{
    glm_error local;
    glm_error *e = err ? err : &local;
    glm_status st;
    if (!t->ops->exchange)
        st = glm_error_set(e, GLM_ERR_UNSUPPORTED, "the %s transport exchanges between two ranks only; "
                           "use --transport tcp for more", t->ops->name);
    else if (out_n > SIZE_MAX / sizeof(float) || in_n > SIZE_MAX / sizeof(float) || seq == 0)
        st = glm_error_set(e, GLM_ERR_ARG, "an exchange needs sizes that fit and seq > 0 (got %zu and %zu "
                           "floats, seq %" PRIu64 ")", out_n, in_n, seq);
    else
        st = t->ops->exchange(t, out, out_n, in, in_n, seq, tp_now_ms() + timeout_ms, e);
    if (st != GLM_OK)
        t->last = *e;
    return st;
}

glm_status tp_all_reduce_sum(tp_transport *t, float *buf, float *scratch, size_t n, uint64_t seq,
                             int timeout_ms, glm_error *err)
{
    glm_status st = tp_all_gather(t, buf, scratch, n, seq, timeout_ms, err);
    if (st != GLM_OK)
        return st;
    for (size_t i = 0; i < n; i++)
        buf[i] = scratch[i] + scratch[n + i];
    return GLM_OK;
}

const char *tp_transport_last_error(const tp_transport *t)
{
    return t->last.status == GLM_OK ? "" : t->last.message;
}

void tp_transport_free(tp_transport *t)
{
    if (t)
        t->ops->free(t);
}

/* ---- the tcp data transport ------------------------------------------------------------ */

typedef struct tp_tcp_transport {
    tp_transport base;
    int fd;
} tp_tcp_transport;

/* Progress on the outgoing frame (header then payload) and the incoming one, together, so two
 * ranks sending large buffers at once cannot both block on full socket buffers. */
typedef struct tcp_progress {
    uint8_t out_hdr[TP_DATA_HEADER_BYTES];
    const uint8_t *out_payload;
    uint8_t in_hdr[TP_DATA_HEADER_BYTES];
    uint8_t *in_payload;
    size_t out_bytes, in_bytes; /* payloads; equal in an all-gather, not in a star's halves */
    size_t sent, received;      /* bytes of header + payload */
} tcp_progress;

/* Fills iov with what is left of a frame (header then payload) past `done` bytes. */
static int frame_iov(struct iovec iov[2], uint8_t *hdr, uint8_t *payload, size_t payload_bytes, size_t done)
{
    int n = 0;
    if (done < TP_DATA_HEADER_BYTES) {
        iov[n].iov_base = hdr + done;
        iov[n].iov_len = TP_DATA_HEADER_BYTES - done;
        n++;
        done = TP_DATA_HEADER_BYTES;
    }
    size_t at = done - TP_DATA_HEADER_BYTES;
    if (at < payload_bytes) {
        iov[n].iov_base = payload + at;
        iov[n].iov_len = payload_bytes - at;
        n++;
    }
    return n;
}

/* One non-blocking sendmsg of the rest of our frame: header and payload leave in one segment. */
static glm_status exchange_send(tp_tcp_transport *t, tcp_progress *x, glm_error *err)
{
    struct iovec iov[2];
    struct msghdr mh = {0};
    mh.msg_iov = iov;
    mh.msg_iovlen = (size_t)frame_iov(iov, x->out_hdr, (uint8_t *)x->out_payload, x->out_bytes, x->sent);
    ssize_t n = sendmsg(t->fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0)
        x->sent += (size_t)n;
    else if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
        return glm_error_set(err, GLM_ERR_PEER, "the data connection to %s failed: %s", t->base.peer,
                             strerror(errno));
    return GLM_OK;
}

static glm_status check_data_header(const tp_tcp_transport *t, const tcp_progress *x, uint64_t seq,
                                    glm_error *err)
{
    uint32_t magic = le_get_u32(x->in_hdr);
    uint32_t bytes = le_get_u32(x->in_hdr + 4);
    uint64_t peer_seq = le_get_u64(x->in_hdr + 8);
    if (magic != TP_DATA_MAGIC)
        return glm_error_set(err, GLM_ERR_PEER, "the data connection to %s carried a bad frame "
                             "(magic 0x%08" PRIx32 "); restart both ranks", t->base.peer, magic);
    if (peer_seq != seq || bytes != x->in_bytes)
        return glm_error_set(err, GLM_ERR_PEER, "the ranks are out of step: exchange %" PRIu64 " of %zu bytes "
                             "here, %" PRIu64 " of %" PRIu32 " bytes from %s; restart both ranks",
                             seq, x->in_bytes, peer_seq, bytes, t->base.peer);
    return GLM_OK;
}

/* One non-blocking recvmsg into the rest of the peer's frame. The payload lands straight in the
 * caller's buffer; a header that does not match is an error before the exchange can succeed. */
static glm_status exchange_recv(tp_tcp_transport *t, tcp_progress *x, uint64_t seq, glm_error *err)
{
    struct iovec iov[2];
    struct msghdr mh = {0};
    size_t before = x->received;
    mh.msg_iov = iov;
    mh.msg_iovlen = (size_t)frame_iov(iov, x->in_hdr, x->in_payload, x->in_bytes, x->received);
    ssize_t n = recvmsg(t->fd, &mh, MSG_DONTWAIT);
    if (n == 0)
        return glm_error_set(err, GLM_ERR_PEER, "%s closed the data connection during exchange %" PRIu64,
                             t->base.peer, seq);
    if (n < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
            return GLM_OK;
        return glm_error_set(err, GLM_ERR_PEER, "the data connection to %s failed: %s",
                             t->base.peer, strerror(errno));
    }
    x->received += (size_t)n;
    if (before < TP_DATA_HEADER_BYTES && x->received >= TP_DATA_HEADER_BYTES)
        return check_data_header(t, x, seq, err);
    return GLM_OK;
}

/* Sends out (out_bytes) and receives the peer's frame into in (in_bytes) at once. */
static glm_status tcp_exchange_bytes(tp_tcp_transport *t, const void *out, size_t out_bytes, void *in,
                                     size_t in_bytes, uint64_t seq, int64_t deadline_ms, glm_error *err)
{
    tp_transport *base = &t->base;
    if (out_bytes > UINT32_MAX || in_bytes > UINT32_MAX)
        return glm_error_set(err, GLM_ERR_ARG, "an exchange of %zu bytes is too large for tcp",
                             out_bytes > in_bytes ? out_bytes : in_bytes);
    tcp_progress x = {0};
    le_put_u32(x.out_hdr, TP_DATA_MAGIC);
    le_put_u32(x.out_hdr + 4, (uint32_t)out_bytes);
    le_put_u64(x.out_hdr + 8, seq);
    x.out_payload = out;
    x.in_payload = in;
    x.out_bytes = out_bytes;
    x.in_bytes = in_bytes;
    size_t out_total = TP_DATA_HEADER_BYTES + out_bytes, in_total = TP_DATA_HEADER_BYTES + in_bytes;
    /* Try both directions before sleeping in poll: a small exchange usually completes in the
     * first send and the first or second receive. */
    glm_status st = exchange_send(t, &x, err);
    if (st == GLM_OK)
        st = exchange_recv(t, &x, seq, err);
    if (st != GLM_OK)
        return st;
    while (x.sent < out_total || x.received < in_total) {
        if (base->aborted && base->aborted(base->abort_user))
            return glm_error_set(err, GLM_ERR_PEER, "exchange %" PRIu64 " with %s was abandoned: the peer failed",
                                 seq, base->peer);
        struct pollfd p = {t->fd, 0, 0};
        if (x.sent < out_total)
            p.events |= POLLOUT;
        if (x.received < in_total)
            p.events |= POLLIN;
        int wait = ms_left(deadline_ms);
        if (wait == 0) {
            int64_t later = tp_wait_longer(base, seq);
            if (later > 0) {
                deadline_ms = later;
                continue;
            }
            return glm_error_set(err, GLM_ERR_PEER, "%s did not answer exchange %" PRIu64
                                 " in time (%zu of %zu bytes received)", base->peer, seq,
                                 x.received, in_total);
        }
        int rc = poll(&p, 1, wait);
        if (rc < 0 && errno != EINTR)
            return glm_error_set(err, GLM_ERR_IO, "poll failed: %s", strerror(errno));
        if (rc <= 0)
            continue;
        if ((p.revents & POLLOUT) && x.sent < out_total && (st = exchange_send(t, &x, err)) != GLM_OK)
            return st;
        if ((p.revents & (POLLIN | POLLHUP | POLLERR)) && x.received < in_total) {
            if ((st = exchange_recv(t, &x, seq, err)) != GLM_OK)
                return st;
        } else if ((p.revents & (POLLHUP | POLLERR)) && x.sent < out_total) {
            return glm_error_set(err, GLM_ERR_PEER, "the data connection to %s was closed", base->peer);
        }
    }
    return GLM_OK;
}

static glm_status tcp_all_gather(tp_transport *base, const float *mine, float *gathered,
                                 size_t stride, size_t n, uint64_t seq, int64_t deadline_ms,
                                 glm_error *err)
{
    size_t bytes = n * sizeof(float);
    float *own = gathered + (size_t)base->rank * stride;
    if (own != mine)
        memmove(own, mine, bytes);
    return tcp_exchange_bytes((tp_tcp_transport *)base, own, bytes,
                              gathered + (size_t)(1 - base->rank) * stride, bytes, seq, deadline_ms, err);
}

static glm_status tcp_exchange(tp_transport *base, const float *out, size_t out_n, float *in, size_t in_n,
                               uint64_t seq, int64_t deadline_ms, glm_error *err)
{
    return tcp_exchange_bytes((tp_tcp_transport *)base, out, out_n * sizeof(float), in, in_n * sizeof(float),
                              seq, deadline_ms, err);
}

static void tcp_free(tp_transport *base)
{
    tp_tcp_transport *t = (tp_tcp_transport *)base;
    if (t->fd >= 0)
        close(t->fd);
    free(t);
}

static const tp_transport_ops tcp_ops = {"tcp", tcp_all_gather, tcp_free, tcp_exchange};

tp_transport *tp_tcp_transport_new(int fd, int rank, const char *peer, glm_error *err)
{
    tp_tcp_transport *t = calloc(1, sizeof *t);
    if (!t) {
        glm_error_set(err, GLM_ERR_NOMEM, "out of memory for the tcp transport");
        close(fd);
        return NULL;
    }
    t->base.ops = &tcp_ops;
    t->base.rank = rank;
    snprintf(t->base.peer, sizeof t->base.peer, "%s", peer ? peer : "the peer");
    t->fd = fd;
    return &t->base;
}
