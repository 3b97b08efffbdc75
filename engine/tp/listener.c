/* listener.c: the worker's listening socket and its handshakes in progress, each read a frame at
 * a time without blocking, so idle, slow or hostile connections never delay a real head. */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/le.h"
#include "tp/hmac_sha256.h"
#include "tp/listener.h"
#include "tp/transport.h"

/* A handshake frame (HELLO is the largest) fits in this; longer ones are refused unread. */
#define PENDING_FRAME_MAX 512u
/* A refused connection is kept this long to let our ERROR reach its peer before we close. */
#define CLOSING_MS 200

typedef enum pending_state {
    PENDING_FIRST,   /* waiting for HELLO (a head) or ATTACH (a data connection) */
    PENDING_AUTH,    /* sent CHALLENGE, waiting for the head's AUTH */
    PENDING_CLOSING, /* refused: draining until the peer closes or CLOSING_MS pass */
} pending_state;

typedef struct tp_pending {
    int fd;
    pending_state state;
    int64_t deadline_ms;
    char who[128];
    tp_hello hello;
    uint8_t nonce[TP_AUTH_NONCE_BYTES]; /* the CHALLENGE's */
    uint8_t frame[TP_FRAME_HEADER_BYTES + PENDING_FRAME_MAX];
    size_t have, need;
} tp_pending;

struct tp_listener {
    int fd;
    tp_pending pending[TP_PENDING_MAX];
    int n_pending;
};

glm_status tp_listen_allowed(const char *hostport, const tp_key *key, glm_error *err)
{
    if (key && key->set)
        return GLM_OK;
    int loopback = tp_address_is_loopback(hostport, err);
    if (loopback < 0)
        return err ? err->status : GLM_ERR_ARG;
    if (loopback)
        return GLM_OK;
    return glm_error_set(err, GLM_ERR_ARG, "refusing to listen on %s without a key: anyone who can reach "
                         "that address could drive this worker. Make a key with `glmchat worker --new-key "
                         "FILE`, copy FILE to the head (mode 0600) and start both ranks with --key-file "
                         "FILE; only a loopback address (127.0.0.1) may run without one", hostport);
}

tp_listener *tp_listener_open(const char *hostport, const tp_key *key, glm_error *err)
{
    if (tp_listen_allowed(hostport, key, err) != GLM_OK)
        return NULL;
    tp_listener *l = calloc(1, sizeof *l);
    if (!l) {
        glm_error_set(err, GLM_ERR_NOMEM, "out of memory for a listener");
        return NULL;
    }
    l->fd = tp_tcp_listen(hostport, err);
    if (l->fd < 0) {
        free(l);
        return NULL;
    }
    return l;
}

int tp_listener_port(const tp_listener *l)
{
    return tp_tcp_local_port(l->fd);
}

int tp_listener_fd(const tp_listener *l)
{
    return l->fd;
}

static void pending_remove(tp_listener *l, int i, int close_fd)
{
    if (close_fd)
        close(l->pending[i].fd);
    l->pending[i] = l->pending[--l->n_pending];
}

void tp_listener_close(tp_listener *l)
{
    if (!l)
        return;
    while (l->n_pending > 0)
        pending_remove(l, 0, 1);
    close(l->fd);
    free(l);
}

/* Tells the peer text (best effort, never waiting: a new connection's send buffer is empty),
 * stops writing and keeps the connection only to drain it. */
static void pending_refuse(tp_pending *p, const char *text)
{
    tp_msg m;
    glm_error ignored;
    tp_msg_error(&m, 1, "%s", text);
    (void)tp_ctrl_send(p->fd, &m, tp_now_ms(), &ignored);
    shutdown(p->fd, SHUT_WR);
    p->state = PENDING_CLOSING;
    p->deadline_ms = tp_now_ms() + CLOSING_MS;
}

/* Accepts every connection waiting on the socket; busy_text, when given, refuses them at once. */
static void accept_all(tp_listener *l, const char *busy_text)
{
    for (;;) {
        char who[128];
        glm_error e;
        int fd = tp_tcp_accept(l->fd, tp_now_ms(), who, sizeof who, &e);
        if (fd < 0)
            return;
        if (l->n_pending == TP_PENDING_MAX)
            pending_remove(l, 0, 1); /* the oldest has had the most time to finish */
        tp_pending *p = &l->pending[l->n_pending++];
        memset(p, 0, sizeof *p);
        p->fd = fd;
        p->state = PENDING_FIRST;
        p->deadline_ms = tp_now_ms() + TP_HANDSHAKE_MS;
        p->need = TP_FRAME_HEADER_BYTES;
        snprintf(p->who, sizeof p->who, "%s", who);
        if (busy_text)
            pending_refuse(p, busy_text);
    }
}

/* Reads what has arrived of p's next frame. 1: a whole message is in m; 0: more is needed;
 * -1: the peer closed or sent something that is no handshake frame (err says which). */
static int pending_read(tp_pending *p, tp_msg *m, glm_error *err)
{
    ssize_t n = recv(p->fd, p->frame + p->have, p->need - p->have, MSG_DONTWAIT);
    if (n == 0) {
        glm_error_set(err, GLM_ERR_PEER, "it closed the connection");
        return -1;
    }
    if (n < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
            return 0;
        glm_error_set(err, GLM_ERR_PEER, "the connection failed: %s", strerror(errno));
        return -1;
    }
    p->have += (size_t)n;
    if (p->have < p->need)
        return 0;
    uint32_t type, len;
    if (p->need == TP_FRAME_HEADER_BYTES) {
        if (tp_frame_header_decode(p->frame, &type, &len, err) != GLM_OK)
            return -1;
        if (len > PENDING_FRAME_MAX) {
            glm_error_set(err, GLM_ERR_PEER, "it sent a %" PRIu32 "-byte %s where a handshake was "
                          "expected", len, tp_msg_type_name(type));
            return -1;
        }
        p->need += len;
        if (len > 0)
            return 0;
    }
    (void)tp_frame_header_decode(p->frame, &type, &len, err);
    p->have = 0;
    p->need = TP_FRAME_HEADER_BYTES;
    return tp_msg_decode(type, p->frame + TP_FRAME_HEADER_BYTES, len, m, err) == GLM_OK ? 1 : -1;
}

/* A HELLO from a would-be head: the protocol must match; then the challenge. */
static glm_status on_hello(tp_pending *p, const tp_msg *m, const tp_key *key, glm_error *err)
{
    if (m->u.hello.protocol != TP_PROTOCOL_VERSION) {
        glm_error_set(err, GLM_ERR_PEER, "the rank protocol version differs: %u here, %" PRIu32 " on the "
                      "head; run the same glmchat build on both machines", TP_PROTOCOL_VERSION,
                      m->u.hello.protocol);
        return GLM_ERR_PEER;
    }
    p->hello = m->u.hello;
    tp_msg c = {.type = TP_MSG_CHALLENGE};
    c.u.challenge.keyed = key && key->set;
    glm_status st = tp_random_bytes(p->nonce, sizeof p->nonce, err);
    if (st != GLM_OK)
        return st;
    memcpy(c.u.challenge.nonce, p->nonce, sizeof p->nonce);
    if (tp_ctrl_send(p->fd, &c, tp_now_ms() + CLOSING_MS, err) != GLM_OK)
        return GLM_ERR_PEER;
    p->state = PENDING_AUTH;
    return GLM_OK;
}

/* The head's AUTH: its proof must be ours for its nonce (keyless: nothing to prove). */
static glm_status on_auth(tp_pending *p, const tp_msg *m, const tp_key *key, tp_handshake *out,
                          glm_error *err)
{
    if (key && key->set) {
        uint8_t want[TP_AUTH_PROOF_BYTES];
        tp_auth_proof(key, "head", p->nonce, m->u.auth.nonce, want);
        int ok = tp_equal_secret(want, m->u.auth.proof, sizeof want);
        memset(want, 0, sizeof want);
        if (!ok)
            return glm_error_set(err, GLM_ERR_PEER, "the key differs: the head's proof does not match "
                                 "this worker's key file; give both ranks a copy of the same key file "
                                 "(--key-file)");
    }
    out->fd = p->fd;
    snprintf(out->who, sizeof out->who, "%s", p->who);
    out->hello = p->hello;
    memcpy(out->worker_nonce, p->nonce, sizeof p->nonce);
    memcpy(out->head_nonce, m->u.auth.nonce, sizeof out->head_nonce);
    return GLM_OK;
}

typedef enum outcome { GO_ON, REFUSED, DONE } outcome;

/* One message from p. DONE: *out is ready (p's fd now belongs to it); REFUSED: p was told why
 * and err holds a line for the log. */
static outcome on_message(tp_pending *p, tp_msg *m, const tp_key *key, uint64_t data_token,
                          const char *busy_text, tp_handshake *out, glm_error *err)
{
    glm_error why = {0};
    if (m->type == TP_MSG_ATTACH && p->state == PENDING_FIRST && data_token &&
        m->u.attach.token == data_token) {
        out->fd = p->fd;
        snprintf(out->who, sizeof out->who, "%s", p->who);
        return DONE;
    }
    if (m->type == TP_MSG_HELLO && p->state == PENDING_FIRST && data_token) {
        pending_refuse(p, busy_text);
        glm_error_set(err, GLM_ERR_PEER, "turned away a head at %s: %s", p->who, busy_text);
        return REFUSED;
    }
    const char *told = "this glmchat worker refused the connection: ";
    if (m->type == TP_MSG_HELLO && p->state == PENDING_FIRST) {
        if (on_hello(p, m, key, &why) == GLM_OK)
            return GO_ON;
        told = ""; /* a glmchat head: it says "the worker refused: ..." itself */
    } else if (m->type == TP_MSG_AUTH && p->state == PENDING_AUTH) {
        if (on_auth(p, m, key, out, &why) == GLM_OK)
            return DONE;
        told = "";
    } else if (m->type == TP_MSG_ERROR && p->state == PENDING_AUTH) {
        pending_refuse(p, "the handshake ended");
        glm_error_set(err, GLM_ERR_PEER, "the head at %s gave up the handshake: %s", p->who, m->u.error.text);
        return REFUSED;
    } else {
        glm_error_set(&why, GLM_ERR_PEER, "it sent %s instead of %s", tp_msg_type_name(m->type),
                      p->state == PENDING_AUTH ? "AUTH" : data_token ? "ATTACH" : "HELLO");
    }
    char text[1200];
    snprintf(text, sizeof text, "%s%s", told, why.message);
    pending_refuse(p, text);
    glm_error_set(err, GLM_ERR_PEER, "refused a connection from %s: %s", p->who, why.message);
    return REFUSED;
}

/* Moves p along with what has arrived. */
static outcome pending_step(tp_pending *p, const tp_key *key, uint64_t data_token, const char *busy_text,
                            tp_handshake *out, glm_error *err)
{
    tp_msg m;
    glm_error why;
    int got = pending_read(p, &m, &why);
    if (got == 0)
        return GO_ON;
    if (got < 0) {
        char text[1200];
        snprintf(text, sizeof text, "this is a glmchat worker; it expected a glmchat handshake: %s",
                 why.message);
        pending_refuse(p, text);
        glm_error_set(err, GLM_ERR_PEER, "refused a connection from %s: %s", p->who, why.message);
        return REFUSED;
    }
    outcome o = on_message(p, &m, key, data_token, busy_text, out, err);
    tp_msg_clear(&m);
    return o;
}

/* Drains a refused connection; 1 once it can be closed. */
static int closing_done(tp_pending *p)
{
    char sink[512];
    for (;;) {
        ssize_t n = recv(p->fd, sink, sizeof sink, MSG_DONTWAIT);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
            return 1;
        if (n < 0)
            return tp_now_ms() >= p->deadline_ms;
    }
}

/* Ends handshakes past their time (told so) and refused connections done draining. Returns
 * REFUSED with err when a handshake timed out. */
static outcome expire(tp_listener *l, glm_error *err)
{
    int dropped = 0;
    int64_t now = tp_now_ms();
    for (int i = l->n_pending - 1; i >= 0; i--) {
        tp_pending *p = &l->pending[i];
        if (p->state == PENDING_CLOSING) {
            if (closing_done(p))
                pending_remove(l, i, 1);
        } else if (now >= p->deadline_ms) {
            if (dropped++ == 0)
                glm_error_set(err, GLM_ERR_PEER, "dropped the connection from %s: no glmchat handshake "
                              "within %.1f s", p->who, TP_HANDSHAKE_MS / 1000.0);
            else
                glm_error_set(err, GLM_ERR_PEER, "dropped %d connections (the last from %s): no glmchat "
                              "handshake within %.1f s", dropped, p->who, TP_HANDSHAKE_MS / 1000.0);
            pending_refuse(p, TP_LATE_HANDSHAKE_REFUSAL);
        }
    }
    return dropped ? REFUSED : GO_ON;
}

glm_status tp_listener_wait(tp_listener *l, const tp_key *key, uint64_t data_token,
                            const char *busy_text, int64_t deadline_ms, tp_handshake *out,
                            glm_error *err)
{
    memset(out, 0, sizeof *out);
    out->fd = -1;
    for (;;) {
        if (expire(l, err) == REFUSED && !data_token)
            return GLM_ERR_PEER;
        struct pollfd fds[1 + TP_PENDING_MAX];
        fds[0] = (struct pollfd){l->fd, POLLIN, 0};
        for (int i = 0; i < l->n_pending; i++)
            fds[1 + i] = (struct pollfd){l->pending[i].fd, POLLIN, 0};
        int64_t left = deadline_ms - tp_now_ms();
        if (left <= 0)
            return glm_error_set(err, GLM_ERR_PEER, "no connection arrived in time");
        int rc = poll(fds, (nfds_t)(1 + l->n_pending), left > 50 ? 50 : (int)left);
        if (rc < 0 && errno != EINTR)
            return glm_error_set(err, GLM_ERR_IO, "poll failed on the listener: %s", strerror(errno));
        if (rc <= 0)
            continue;
        int n = l->n_pending; /* accept_all may reorder: step only those polled */
        for (int i = n - 1; i >= 0; i--) {
            tp_pending *p = &l->pending[i];
            if (!(fds[1 + i].revents & (POLLIN | POLLHUP | POLLERR)) || p->state == PENDING_CLOSING)
                continue;
            outcome o = pending_step(p, key, data_token, busy_text, out, err);
            if (o == DONE) {
                pending_remove(l, i, 0);
                return GLM_OK;
            }
            if (o == REFUSED && !data_token)
                return GLM_ERR_PEER;
        }
        if (fds[0].revents & POLLIN)
            accept_all(l, NULL);
    }
}

void tp_listener_turn_away(tp_listener *l, const char *busy_text)
{
    for (int i = 0; i < l->n_pending; i++)
        if (l->pending[i].state != PENDING_CLOSING)
            pending_refuse(&l->pending[i], busy_text);
    accept_all(l, busy_text);
    glm_error ignored;
    (void)expire(l, &ignored);
}
