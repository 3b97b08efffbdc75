/* rank.c: a two-rank session: bootstrap over TCP (HELLO, data path, check), a watch thread that
 * beats and listens for the peer, step decisions rank 0 -> rank 1, and bounded all-gathers. */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "model/identity.h"
#include "tp/auth.h"
#include "tp/hmac_sha256.h"
#include "tp/listener.h"
#include "tp/rank.h"
#include "tp/transport.h"

#define TP_CHECK_FLOATS 1024
#define TP_TURN_AWAY_MS 200
#define TP_BYE_MS 500

typedef struct tp_step_node {
    tp_step step;
    struct tp_step_node *next;
} tp_step_node;

struct tp_rank {
    int rank;               /* this side of the link: 0 head, 1 worker */
    int index, world;       /* this rank among the split's world ranks (the head is 0) */
    int assigned;           /* rank 0: the rank its worker on this link takes */
    int ctrl_fd;
    tp_listener *listener;  /* worker: to turn other heads away while serving; else NULL */
    char peer[128];
    const char *peer_role;  /* "worker" or "head" */
    int heartbeat_ms, timeout_ms;
    tp_transport *data;
    _Atomic uint64_t exchange_seq; /* exchanges begun on this link (the heartbeats tell it) */
    uint64_t step_seq;
    _Atomic uint64_t steps_seen;   /* a head's steps sent, a worker's received (the heartbeats) */
    atomic_int busy;               /* 1 from a forward step's start to its end (tp_rank_step_end) */
    int64_t exchange_started_ms;   /* when the exchange in progress began (late_peer_deadline) */
    int waited_late;               /* that exchange's wait went past the timeout */
    int wait_canceled;             /* and was given up because the reply was canceled */
    int (*canceled)(void *user);   /* tp_rank_set_cancel */
    void *canceled_user;
    void (*note)(void *user, const tp_late_wait *w); /* tp_rank_set_note */
    void *note_user;
    float *scratch;
    size_t scratch_n;
    size_t piece_want;             /* tp_rank_options.piece_floats */
    size_t piece;                  /* the most floats an exchange carries (0: any); start_watch */

    pthread_t watch;
    int watch_started;
    atomic_int stop;
    atomic_int failed;
    pthread_mutex_t lock;       /* guards failure, bye, the step queue, last_heard_ms, peer_* */
    pthread_cond_t cond;
    pthread_mutex_t write_lock; /* one writer at a time on ctrl_fd */
    glm_error failure;
    int bye;
    tp_step_node *queue_head, *queue_tail;
    int64_t last_heard_ms;
    /* the peer's last heartbeat: its exchanges begun, its steps (a head's sent, a worker's
     * received), whether it was in a step, when it came */
    uint64_t peer_exchanges, peer_steps;
    int peer_busy;
    int64_t peer_progress_ms;
    int answered;               /* head bootstrap: the worker has sent a message */

    /* rank 0: what it connected with, to connect again after the worker restarts */
    tp_identity id;
    tp_rank_options opts;
    char transport[16];
    int reconnects;
    /* worker, transport nccl: the head's communicator id (NCCL_ID) */
    uint8_t nccl_id[TP_NCCL_ID_BYTES];
    int has_nccl_id;
};

/* ---- identity ------------------------------------------------------------------------------ */

_Static_assert(MODEL_TYPE_MAX == TP_NAME_MAX, "a model_type must fit HELLO's model name");

glm_status tp_identity_from_model_dir(const char *dir, tp_identity *id, glm_error *err)
{
    memset(id, 0, sizeof *id);
    model_identity m;
    glm_status st = model_identity_read(dir, &m, err);
    if (st != GLM_OK)
        return st;
    memcpy(id->model_name, m.model_type, sizeof id->model_name);
    id->config_hash = m.config_hash;
    id->weights_hash = m.weights_hash;
    return GLM_OK;
}

uint32_t tp_backend_code(const char *backend_name)
{
    return backend_name && strcmp(backend_name, "cuda") == 0 ? 2 : 1;
}

/* ---- failure bookkeeping ------------------------------------------------------------------- */

static const char *next_move(const tp_rank *r)
{
    return r->rank == 0 ? "check it is running (same --model); the next message reconnects"
                        : "this worker will wait for a head to connect again";
}

static void set_failed(tp_rank *r, glm_status status, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static void set_failed(tp_rank *r, glm_status status, const char *fmt, ...)
{
    pthread_mutex_lock(&r->lock);
    if (!atomic_load(&r->failed)) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(r->failure.message, sizeof r->failure.message, fmt, ap);
        va_end(ap);
        r->failure.status = status;
        atomic_store(&r->failed, 1);
    }
    pthread_cond_broadcast(&r->cond);
    pthread_mutex_unlock(&r->lock);
}

static glm_status copy_failure(tp_rank *r, glm_error *err)
{
    pthread_mutex_lock(&r->lock);
    glm_error f = r->failure;
    pthread_mutex_unlock(&r->lock);
    if (err)
        *err = f;
    return f.status;
}

static int rank_aborted(void *user)
{
    return atomic_load(&((tp_rank *)user)->failed);
}

/* A data wait at its deadline goes on while the peer's heartbeats say it is alive, in a forward
 * step and not yet at this exchange (it has begun fewer than seq of them: it is computing its
 * share before seq, on a loaded machine or with the longer share of the work; the heartbeat may be
 * older than the last exchange), or while its heartbeats are from before the step (a worker's from
 * before the step reached it, its watch thread starved: a stopped or swamped process; a head's
 * from before it had sent the step). Anything else fails it as before: a peer out of its step (its
 * step failed, or it never began one), one already in this exchange (the data path is what is
 * stuck), one not heard for a timeout (the watch thread's own rule for a silent peer, which a
 * starved but live peer's heartbeats still meet).
 * The head gives up after TP_LATE_PEER_HEAD timeouts in all, the worker after twice that, so the
 * head is the one that ends a link whose peer never comes, and says why to its user. */
#define TP_LATE_PEER_HEAD 24

static int64_t late_peer_deadline(void *user, uint64_t seq)
{
    tp_rank *r = user;
    if (r->canceled && r->canceled(r->canceled_user)) {
        r->wait_canceled = 1;
        return 0;
    }
    int64_t now = tp_now_ms();
    pthread_mutex_lock(&r->lock);
    int busy = r->peer_busy;
    uint64_t begun = r->peer_exchanges, steps = r->peer_steps;
    int64_t heard = r->peer_progress_ms;
    pthread_mutex_unlock(&r->lock);
    /* a peer's last heartbeat from before this step says nothing of the step yet: a worker's
     * from before the step reached it (a starved worker may not have read it), a head's from
     * before it had sent it (its busy flag is set once the send returns): coming while heard */
    uint64_t mine = r->rank == 0 ? r->step_seq : atomic_load(&r->steps_seen);
    int unread = steps < mine;
    if (now - heard > (int64_t)r->timeout_ms || (!unread && (!busy || begun >= seq)))
        return 0;
    int64_t cap = r->exchange_started_ms +
                  (int64_t)(r->rank == 0 ? TP_LATE_PEER_HEAD : 2 * TP_LATE_PEER_HEAD) * r->timeout_ms;
    if (now >= cap)
        return 0;
    int64_t later = now + r->heartbeat_ms; /* asked again after the next heartbeat */
    if (!r->waited_late && r->note) {
        tp_late_wait w = {.role = r->peer_role, .peer = r->peer, .exchange = seq,
                          .late_s = (now - r->exchange_started_ms) / 1000.0,
                          .limit_s = (cap - r->exchange_started_ms) / 1000.0};
        r->note(r->note_user, &w);
    }
    r->waited_late = 1;
    return later < cap ? later : cap;
}

/* ---- the watch thread -------------------------------------------------------------------- */

static glm_status ctrl_send_locked(tp_rank *r, const tp_msg *m, int64_t deadline, glm_error *err)
{
    pthread_mutex_lock(&r->write_lock);
    glm_status st = tp_ctrl_send(r->ctrl_fd, m, deadline, err);
    pthread_mutex_unlock(&r->write_lock);
    return st;
}

static void queue_step(tp_rank *r, tp_msg *m)
{
    tp_step_node *node = malloc(sizeof *node);
    if (!node) {
        tp_msg_clear(m);
        set_failed(r, GLM_ERR_NOMEM, "out of memory queueing a step from the %s", r->peer_role);
        return;
    }
    node->step = m->u.step;
    node->next = NULL;
    atomic_fetch_add(&r->steps_seen, 1);
    m->u.step.tokens = NULL; /* now owned by the queue */
    pthread_mutex_lock(&r->lock);
    if (r->queue_tail)
        r->queue_tail->next = node;
    else
        r->queue_head = node;
    r->queue_tail = node;
    pthread_cond_broadcast(&r->cond);
    pthread_mutex_unlock(&r->lock);
}

static void handle_message(tp_rank *r, tp_msg *m)
{
    switch (m->type) {
    case TP_MSG_HEARTBEAT:
        pthread_mutex_lock(&r->lock);
        r->peer_exchanges = m->u.heartbeat.exchanges;
        r->peer_steps = m->u.heartbeat.steps;
        r->peer_busy = (int)m->u.heartbeat.busy;
        r->peer_progress_ms = tp_now_ms();
        pthread_mutex_unlock(&r->lock);
        break;
    case TP_MSG_STEP:
        if (r->rank == 1) {
            queue_step(r, m);
            break;
        }
        set_failed(r, GLM_ERR_PEER, "the worker at %s sent a STEP, which only a head may send; "
                   "restart it with the same glmchat build", r->peer);
        break;
    case TP_MSG_BYE:
        pthread_mutex_lock(&r->lock);
        r->bye = 1;
        pthread_mutex_unlock(&r->lock);
        set_failed(r, GLM_ERR_PEER, "the %s at %s stopped (it was shut down); %s", r->peer_role,
                   r->peer, r->rank == 0 ? "start it again; the next message reconnects" : next_move(r));
        break;
    case TP_MSG_ERROR:
        set_failed(r, GLM_ERR_PEER, "the %s at %s reported: %s", r->peer_role, r->peer, m->u.error.text);
        break;
    default:
        set_failed(r, GLM_ERR_PEER, "the %s at %s sent an unexpected %s message; restart both ranks",
                   r->peer_role, r->peer, tp_msg_type_name(m->type));
        break;
    }
    tp_msg_clear(m);
}

static void close_gently(int fd);

/* Other connections while this worker is busy: told so, then closed, never blocking the beat. */
static void turn_away(tp_rank *r)
{
    char text[256];
    snprintf(text, sizeof text, "this worker is busy serving the head at %s; stop that head first, or "
             "start another worker", r->peer);
    tp_listener_turn_away(r->listener, text);
}

/* The peer closed the control connection: it exited or restarted. */
static void fail_closed(tp_rank *r)
{
    set_failed(r, GLM_ERR_PEER, "the %s at %s closed the connection (it exited or restarted); %s",
               r->peer_role, r->peer,
               r->rank == 0 ? "start `glmchat worker` there again (same --model); the next "
                              "message reconnects" : next_move(r));
}

static int watch_once(tp_rank *r, int64_t *next_beat, uint64_t *beat)
{
    int64_t now = tp_now_ms();
    glm_error e;
    if (now >= *next_beat) {
        tp_msg hb = {.type = TP_MSG_HEARTBEAT};
        hb.u.heartbeat.seq = ++*beat;
        hb.u.heartbeat.sent_ms = (uint64_t)now;
        hb.u.heartbeat.exchanges = atomic_load(&r->exchange_seq);
        hb.u.heartbeat.steps = atomic_load(&r->steps_seen);
        /* a step already here counts: a starved worker may not have taken it from the queue
         * yet, though it is on its way to the step's exchanges */
        pthread_mutex_lock(&r->lock);
        int queued = r->queue_head != NULL;
        pthread_mutex_unlock(&r->lock);
        hb.u.heartbeat.busy = (uint32_t)(atomic_load(&r->busy) || queued);
        if (ctrl_send_locked(r, &hb, now + r->timeout_ms, &e) != GLM_OK) {
            set_failed(r, GLM_ERR_PEER, "lost the %s at %s (%s); %s", r->peer_role, r->peer, e.message,
                       next_move(r));
            return 0;
        }
        *next_beat = now + r->heartbeat_ms;
    }
    pthread_mutex_lock(&r->lock);
    int64_t silent = now - r->last_heard_ms;
    pthread_mutex_unlock(&r->lock);
    /* a peer whose message waits unread is not silent: this side was starved (a loaded or
     * stopped process) and reads it below */
    struct pollfd pending = {r->ctrl_fd, POLLIN, 0};
    if (silent > r->timeout_ms && !(poll(&pending, 1, 0) > 0 && (pending.revents & POLLIN))) {
        set_failed(r, GLM_ERR_PEER, "the %s at %s stopped answering after %.1f s; %s", r->peer_role,
                   r->peer, silent / 1000.0, next_move(r));
        return 0;
    }
    struct pollfd fds[2] = {{r->ctrl_fd, POLLIN, 0}, {r->listener ? tp_listener_fd(r->listener) : -1, POLLIN, 0}};
    int64_t wait = *next_beat - now;
    if (wait > 50)
        wait = 50;
    if (wait < 0)
        wait = 0;
    int rc = poll(fds, r->listener ? 2 : 1, (int)wait);
    if (rc < 0 && errno != EINTR) {
        set_failed(r, GLM_ERR_IO, "poll failed watching the %s: %s", r->peer_role, strerror(errno));
        return 0;
    }
    if (rc > 0 && (fds[0].revents & (POLLIN | POLLHUP | POLLERR))) {
        char probe;
        if (recv(r->ctrl_fd, &probe, 1, MSG_PEEK | MSG_DONTWAIT) == 0) {
            fail_closed(r);
            return 0;
        }
        tp_msg m;
        if (tp_ctrl_recv(r->ctrl_fd, &m, tp_now_ms() + r->timeout_ms, &e) != GLM_OK) {
            set_failed(r, GLM_ERR_PEER, "lost the %s at %s (%s); %s", r->peer_role, r->peer, e.message,
                       next_move(r));
            return 0;
        }
        pthread_mutex_lock(&r->lock);
        r->last_heard_ms = tp_now_ms();
        pthread_mutex_unlock(&r->lock);
        handle_message(r, &m);
    }
    /* Heads that came while this one is served are told so; once it has said BYE (or failed),
     * a head already waiting is the next one, left for the worker's next accept. */
    if (r->listener && !atomic_load(&r->failed)) /* also finishes closing those turned away before */
        turn_away(r);
    return !atomic_load(&r->failed);
}

static void *watch_main(void *arg)
{
    tp_rank *r = arg;
    int64_t next_beat = tp_now_ms();
    uint64_t beat = 0;
    while (!atomic_load(&r->stop) && watch_once(r, &next_beat, &beat))
        ;
    return NULL;
}

/* ---- construction ------------------------------------------------------------------------- */

static tp_rank *rank_new(int rank, const tp_rank_options *o, glm_error *err)
{
    tp_rank *r = calloc(1, sizeof *r);
    if (!r) {
        glm_error_set(err, GLM_ERR_NOMEM, "out of memory for a rank");
        return NULL;
    }
    r->rank = rank;
    r->index = rank;
    r->world = 2;
    r->assigned = 1;
    r->ctrl_fd = -1;
    r->peer_role = rank == 0 ? "worker" : "head";
    r->heartbeat_ms = o && o->heartbeat_ms > 0 ? o->heartbeat_ms : TP_DEFAULT_HEARTBEAT_MS;
    r->timeout_ms = o && o->timeout_ms > 0 ? o->timeout_ms : TP_DEFAULT_TIMEOUT_MS;
    r->piece_want = o ? o->piece_floats : 0;
    pthread_mutex_init(&r->lock, NULL);
    pthread_mutex_init(&r->write_lock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&r->cond, &ca);
    pthread_condattr_destroy(&ca);
    return r;
}

static void rank_free(tp_rank *r)
{
    if (!r)
        return;
    atomic_store(&r->stop, 1);
    if (r->watch_started)
        pthread_join(r->watch, NULL);
    tp_transport_free(r->data);
    if (r->ctrl_fd >= 0)
        close(r->ctrl_fd);
    for (tp_step_node *n = r->queue_head, *next; n; n = next) {
        next = n->next;
        free(n->step.tokens);
        free(n);
    }
    free(r->scratch);
    pthread_cond_destroy(&r->cond);
    pthread_mutex_destroy(&r->lock);
    pthread_mutex_destroy(&r->write_lock);
    free(r);
}

/* Why this build cannot run an nccl transport; NULL when it can. */
static const char *nccl_missing(void)
{
#ifdef HAVE_NCCL
    return NULL;
#elif defined(HAVE_CUDA)
    return "this glmchat's CUDA toolkit had no nccl.h when it was built; build it again with NCCL "
           "installed, or use --transport tcp";
#else
    return "this glmchat was built without CUDA (the nccl transport runs on the GPUs); build it "
           "with CUDA and NCCL, or use --transport tcp";
#endif
}

glm_status tp_transport_refusal(const char *transport, uint32_t backend, glm_error *err)
{
    if (!transport || strcmp(transport, "tcp") == 0 || strcmp(transport, "rdma") == 0)
        return GLM_OK;
    if (strcmp(transport, "nccl") != 0)
        return glm_error_set(err, GLM_ERR_ARG, "transport '%s' is unknown; use rdma, tcp or nccl",
                             transport);
    const char *missing = nccl_missing();
    if (missing)
        return glm_error_set(err, GLM_ERR_UNSUPPORTED, "--transport nccl: %s", missing);
    if (backend != 2)
        return glm_error_set(err, GLM_ERR_UNSUPPORTED, "--transport nccl needs --backend cuda (its "
                             "collectives run on the GPUs); the cpu backend's ranks use --transport tcp");
    return GLM_OK;
}

static glm_status parse_transport(const char *name, uint32_t *kind, glm_error *err)
{
    if (!name)
        *kind = TP_TRANSPORT_AUTO;
    else if (strcmp(name, "tcp") == 0)
        *kind = TP_TRANSPORT_TCP;
    else if (strcmp(name, "rdma") == 0)
        *kind = TP_TRANSPORT_RDMA;
    else if (strcmp(name, "nccl") == 0 && !nccl_missing())
        *kind = TP_TRANSPORT_NCCL;
    else
        return tp_transport_refusal(name, 2, err);
    return GLM_OK;
}

static uint64_t random_u64(void)
{
    uint64_t v = 0;
    if (getrandom(&v, sizeof v, 0) != (ssize_t)sizeof v || v == 0)
        v = ((uint64_t)getpid() << 32) ^ (uint64_t)tp_now_ms() ^ (uint64_t)time(NULL) ^ 1;
    return v;
}

static void make_hello(const tp_rank *r, const tp_identity *id, uint32_t transport, tp_hello *h)
{
    memset(h, 0, sizeof *h);
    h->protocol = TP_PROTOCOL_VERSION;
    h->rank = (uint32_t)r->index;
    h->peer_rank = r->rank == 0 ? (uint32_t)r->assigned : 0;
    snprintf(h->version, sizeof h->version, "%s", glm_version());
    snprintf(h->model_name, sizeof h->model_name, "%s", id->model_name);
    h->config_hash = id->config_hash;
    h->weights_hash = id->weights_hash;
    h->settings.world = (uint32_t)r->world;
    h->settings.transport = transport;
    h->settings.heartbeat_ms = (uint32_t)r->heartbeat_ms;
    h->settings.timeout_ms = (uint32_t)r->timeout_ms;
    h->settings.max_context = id->max_context;
    h->settings.kv_format = id->kv_format;
    h->settings.backend = id->backend ? id->backend : 1;
    h->session = random_u64();
}

/* Sends an ERROR to the peer, best effort: the connection may already be gone. */
static void tell_peer(int fd, const char *text)
{
    tp_msg m;
    glm_error ignored;
    tp_msg_error(&m, 1, "%s", text);
    (void)tp_ctrl_send(fd, &m, tp_now_ms() + TP_TURN_AWAY_MS, &ignored);
}

/* Closes a refused connection without resetting it: what we told the peer must reach it even
 * when it had sent more than we read. Bounded by TP_TURN_AWAY_MS. */
static void close_gently(int fd)
{
    shutdown(fd, SHUT_WR);
    int64_t deadline = tp_now_ms() + TP_TURN_AWAY_MS;
    char sink[4096];
    for (;;) {
        ssize_t n = recv(fd, sink, sizeof sink, MSG_DONTWAIT);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
            break;
        int64_t left = deadline - tp_now_ms();
        if (left <= 0)
            break;
        if (n < 0) {
            struct pollfd p = {fd, POLLIN, 0};
            poll(&p, 1, (int)left);
        }
    }
    close(fd);
}

/* Receives one message that must be `want`; an ERROR from the peer becomes its text. */
static glm_status expect(tp_rank *r, int fd, tp_msg_type want, tp_msg *m, int64_t deadline, glm_error *err)
{
    glm_status st = tp_ctrl_recv(fd, m, deadline, err);
    if (st != GLM_OK)
        return st;
    /* (a worker that dropped the connection for a late handshake gave no answer to the head) */
    r->answered = m->type != TP_MSG_ERROR || strcmp(m->u.error.text, TP_LATE_HANDSHAKE_REFUSAL) != 0;
    if (m->type == TP_MSG_ERROR) {
        st = glm_error_set(err, GLM_ERR_PEER, "the %s at %s refused: %s", r->peer_role, r->peer,
                           m->u.error.text);
        tp_msg_clear(m);
        return st;
    }
    if (m->type != want) {
        st = glm_error_set(err, GLM_ERR_PEER, "the %s at %s sent %s where %s was expected; run the same "
                           "glmchat build on both", r->peer_role, r->peer, tp_msg_type_name(m->type),
                           tp_msg_type_name(want));
        tp_msg_clear(m);
        return st;
    }
    return GLM_OK;
}

static float check_value(int rank, int i)
{
    return (float)((rank + 1) * 100003 + i) * 0.25f;
}

/* The first exchange checks the data path end to end with a known pattern, then both sides say
 * READY over the control connection. */
static glm_status verify_data_path(tp_rank *r, int64_t deadline, glm_error *err)
{
    float mine[TP_CHECK_FLOATS], both[2 * TP_CHECK_FLOATS];
    for (int i = 0; i < TP_CHECK_FLOATS; i++)
        mine[i] = check_value(r->rank, i);
    glm_status st = tp_all_gather(r->data, mine, both, TP_CHECK_FLOATS, ++r->exchange_seq,
                                  (int)(deadline - tp_now_ms()), err);
    if (st != GLM_OK)
        return st;
    int other = 1 - r->rank;
    for (int i = 0; i < TP_CHECK_FLOATS; i++) {
        if (both[other * TP_CHECK_FLOATS + i] != check_value(other, i) ||
            both[r->rank * TP_CHECK_FLOATS + i] != mine[i]) {
            st = glm_error_set(err, GLM_ERR_PEER, "the %s data path to %s corrupted the check pattern at "
                               "float %d; check the link (see engine/tp/SPARKS.md)",
                               r->data->ops->name, r->peer, i);
            tell_peer(r->ctrl_fd, err->message);
            return st;
        }
    }
    tp_msg ready = {.type = TP_MSG_READY};
    st = tp_ctrl_send(r->ctrl_fd, &ready, deadline, err);
    if (st != GLM_OK)
        return st;
    tp_msg m;
    st = expect(r, r->ctrl_fd, TP_MSG_READY, &m, deadline, err);
    tp_msg_clear(&m);
    return st;
}

static glm_status start_watch(tp_rank *r, glm_error *err)
{
    size_t limit = r->data->max_floats, want = r->piece_want;
    r->piece = want && (!limit || want < limit) ? want : limit;
    r->last_heard_ms = tp_now_ms();
    r->data->aborted = rank_aborted;
    r->data->late_deadline = late_peer_deadline;
    r->data->abort_user = r;
    int rc = pthread_create(&r->watch, NULL, watch_main, r);
    if (rc)
        return glm_error_set(err, GLM_ERR_NOMEM, "cannot start the heartbeat thread: %s", strerror(rc));
    r->watch_started = 1;
    return GLM_OK;
}

/* ---- the data path, both sides -------------------------------------------------------------- */

static glm_status rdma_setup(tp_rank *r, const tp_rank_options *o, int64_t deadline, glm_error *err)
{
    tp_rdma_options ro = {0};
    if (o)
        ro = o->rdma;
    tp_rdma_params local, peer;
    tp_rdma *rd = tp_rdma_prepare(r->rank, &ro, &local, err);
    if (!rd) {
        tell_peer(r->ctrl_fd, err->message);
        return err->status;
    }
    tp_msg m = {.type = TP_MSG_PARAMS};
    m.u.params.len = (uint32_t)tp_rdma_params_encode(&local, m.u.params.bytes);
    glm_status st = tp_ctrl_send(r->ctrl_fd, &m, deadline, err);
    if (st == GLM_OK)
        st = expect(r, r->ctrl_fd, TP_MSG_PARAMS, &m, deadline, err);
    if (st == GLM_OK)
        st = tp_rdma_params_decode(m.u.params.bytes, m.u.params.len, &peer, err);
    if (st == GLM_OK)
        st = tp_rdma_connect(rd, &peer, r->peer, err);
    if (st != GLM_OK) {
        tell_peer(r->ctrl_fd, err->message);
        tp_rdma_free(rd);
        return st;
    }
    r->data = tp_rdma_transport(rd);
    return GLM_OK;
}

/* ---- rank 0 ------------------------------------------------------------------------------------ */

static int connect_with_retries(const char *hostport, int connect_ms, int timeout_ms, glm_error *err)
{
    int64_t give_up = tp_now_ms() + connect_ms;
    for (;;) {
        int64_t now = tp_now_ms();
        int64_t deadline = now + timeout_ms < give_up ? now + timeout_ms : give_up;
        int fd = tp_tcp_connect(hostport, deadline, err);
        if (fd >= 0 || err->status == GLM_ERR_ARG)
            return fd;
        if (tp_now_ms() + 200 >= give_up)
            return -1;
        struct timespec nap = {0, 200 * 1000000L};
        nanosleep(&nap, NULL);
    }
}

/* Head, after its HELLO: the worker's CHALLENGE says whether it has a key; both must agree. The
 * head proves the key for the worker's fresh nonce, then checks the worker's proof for its own,
 * so neither side accepts a proof recorded from another session. */
static glm_status head_prove_key(tp_rank *r, const tp_rank_options *o, int64_t deadline, glm_error *err)
{
    const tp_key *key = o ? &o->key : NULL;
    int keyed = key && key->set;
    tp_msg m;
    glm_status st = expect(r, r->ctrl_fd, TP_MSG_CHALLENGE, &m, deadline, err);
    if (st != GLM_OK)
        return st;
    uint8_t worker_nonce[TP_NONCE_BYTES];
    memcpy(worker_nonce, m.u.challenge.nonce, sizeof worker_nonce);
    if (m.u.challenge.keyed && !keyed) {
        tell_peer(r->ctrl_fd, "the head has no key, so it stopped; give it --key-file with a copy of "
                  "this worker's key file");
        return glm_error_set(err, GLM_ERR_PEER, "the worker at %s requires a key: give this head "
                             "--key-file FILE (or worker_key_file in the config) with a copy of the "
                             "worker's key file", r->peer);
    }
    if (!m.u.challenge.keyed && keyed) {
        tell_peer(r->ctrl_fd, "the head has a key but this worker has none, so the head stopped; "
                  "start the worker with --key-file and a copy of the head's key file");
        return glm_error_set(err, GLM_ERR_PEER, "the worker at %s runs without a key but this head has "
                             "one (--key-file): start the worker with --key-file and a copy of the "
                             "same key file", r->peer);
    }
    tp_msg auth = {.type = TP_MSG_AUTH};
    st = tp_random_bytes(auth.u.auth.nonce, TP_NONCE_BYTES, err);
    if (st != GLM_OK)
        return st;
    if (keyed)
        tp_auth_proof(key, "head", worker_nonce, auth.u.auth.nonce, auth.u.auth.proof);
    st = tp_ctrl_send(r->ctrl_fd, &auth, deadline, err);
    if (st == GLM_OK)
        st = expect(r, r->ctrl_fd, TP_MSG_AUTH, &m, deadline, err);
    if (st != GLM_OK || !keyed)
        return st;
    uint8_t want[TP_PROOF_BYTES];
    tp_auth_proof(key, "worker", worker_nonce, auth.u.auth.nonce, want);
    int ok = tp_equal_secret(want, m.u.auth.proof, sizeof want);
    memset(want, 0, sizeof want);
    if (ok)
        return GLM_OK;
    tell_peer(r->ctrl_fd, "the key differs: the worker's proof does not match the head's key file; "
              "give both ranks a copy of the same key file (--key-file)");
    return glm_error_set(err, GLM_ERR_PEER, "the key differs: the worker at %s did not prove it holds "
                         "this head's key; give both ranks a copy of the same key file (--key-file)",
                         r->peer);
}

static glm_status head_bootstrap(tp_rank *r, const char *hostport, const tp_identity *id,
                                 const tp_rank_options *o, glm_error *err)
{
    uint32_t kind;
    glm_status st = parse_transport(o ? o->transport : NULL, &kind, err);
    if (st != GLM_OK)
        return st;
    if (kind == TP_TRANSPORT_RDMA && r->world > 2)
        return glm_error_set(err, GLM_ERR_ARG, "--transport rdma joins two ranks only (a head and one "
                             "worker); with %d workers use --transport tcp", r->world - 1);
    if (kind == TP_TRANSPORT_AUTO) {
        char names[1][32];
        kind = r->world == 2 && tp_rdma_list_devices(names, 1) > 0 ? TP_TRANSPORT_RDMA : TP_TRANSPORT_TCP;
    }
    int64_t deadline = tp_now_ms() + r->timeout_ms;
    tp_msg m = {.type = TP_MSG_HELLO};
    make_hello(r, id, kind, &m.u.hello);
    tp_hello mine = m.u.hello;
    st = tp_ctrl_send(r->ctrl_fd, &m, deadline, err);
    if (st == GLM_OK)
        st = head_prove_key(r, o, deadline, err);
    if (st == GLM_OK)
        st = expect(r, r->ctrl_fd, TP_MSG_HELLO, &m, deadline, err);
    if (st != GLM_OK)
        return st;
    tp_hello theirs = m.u.hello;
    st = tp_hello_compare(&mine, &theirs, "worker", err);
    if (st == GLM_OK && theirs.rank != (uint32_t)r->assigned)
        st = glm_error_set(err, GLM_ERR_PEER, "the worker at %s took rank %" PRIu32 " where rank %d was "
                           "asked; run the same glmchat build on all machines", r->peer, theirs.rank,
                           r->assigned);
    if (st != GLM_OK) {
        tell_peer(r->ctrl_fd, err->message);
        return st;
    }
    if (kind == TP_TRANSPORT_RDMA)
        return rdma_setup(r, o, deadline, err);
    if (kind == TP_TRANSPORT_NCCL) {
        if (!o || !o->nccl_id_set)
            return glm_error_set(err, GLM_ERR_ARG, "--transport nccl: no communicator id to send "
                                 "the worker at %s (tp_group_connect makes it)", r->peer);
        tp_msg id = {.type = TP_MSG_NCCL_ID};
        memcpy(id.u.nccl_id.id, o->nccl_id, TP_NCCL_ID_BYTES);
        if ((st = tp_ctrl_send(r->ctrl_fd, &id, deadline, err)) != GLM_OK)
            return st;
    }
    int dfd = tp_tcp_connect(hostport, deadline, err);
    if (dfd < 0)
        return err->status;
    tp_msg attach = {.type = TP_MSG_ATTACH};
    attach.u.attach.token = theirs.session;
    st = tp_ctrl_send(dfd, &attach, deadline, err);
    if (st != GLM_OK) {
        close(dfd);
        return st;
    }
    r->data = tp_tcp_transport_new(dfd, 0, r->peer, err);
    return r->data ? GLM_OK : err->status;
}

/* Connects r (rank 0, not linked) to the worker at r->peer and bootstraps, retrying until
 * connect_ms has passed. On failure r holds no connection (rank_free or unlink_peer clean up). */
static glm_status head_link(tp_rank *r, const char *then, glm_error *err)
{
    const char *hostport = r->peer;
    int connect_ms = r->opts.connect_ms > 0 ? r->opts.connect_ms : TP_DEFAULT_CONNECT_MS;
    int64_t give_up = tp_now_ms() + connect_ms;
    glm_status st;
    /* A worker that is exiting or restarting may take the connection and drop it before it
     * answers, and one may drop it when a lossy link delayed the handshake past its wait; both are
     * retried like a refused connection. An answer (even a refusal) is final. */
    for (;;) {
        int left = (int)(give_up - tp_now_ms());
        r->ctrl_fd = left > 0 ? connect_with_retries(hostport, left, r->timeout_ms, err) : -1;
        if (r->ctrl_fd < 0) {
            glm_error why = *err;
            if (why.status != GLM_ERR_ARG)
                glm_error_set(err, GLM_ERR_PEER, "cannot reach the worker at %s within %.1f s (%s); start "
                              "`glmchat worker --listen %s` there with the same --model, then %s",
                              hostport, connect_ms / 1000.0, why.message, hostport, then);
            return err->status;
        }
        r->answered = 0;
        st = head_bootstrap(r, hostport, &r->id, &r->opts, err);
        if (st == GLM_OK || r->answered || tp_now_ms() + 200 >= give_up)
            break;
        tp_transport_free(r->data);
        r->data = NULL;
        close(r->ctrl_fd);
        r->ctrl_fd = -1;
        struct timespec nap = {0, 200 * 1000000L};
        nanosleep(&nap, NULL);
    }
    int64_t deadline = tp_now_ms() + r->timeout_ms;
    if (st == GLM_OK)
        st = verify_data_path(r, deadline, err);
    if (st == GLM_OK)
        st = start_watch(r, err);
    return st;
}

tp_rank *tp_head_connect(const char *hostport, const tp_identity *id, const tp_rank_options *opts,
                         glm_error *err)
{
    return tp_head_connect_rank(hostport, 1, 2, id, opts, err);
}

tp_rank *tp_head_connect_rank(const char *hostport, int worker_rank, int world, const tp_identity *id,
                              const tp_rank_options *opts, glm_error *err)
{
    glm_error local;
    if (!err)
        err = &local;
    if (world < 2 || world > (int)TP_MAX_RANKS || worker_rank < 1 || worker_rank >= world) {
        glm_error_set(err, GLM_ERR_ARG, "worker rank %d of %d: a split has 2 to %u ranks and its "
                      "workers are ranks 1 and up", worker_rank, world, TP_MAX_RANKS);
        return NULL;
    }
    tp_rank *r = rank_new(0, opts, err);
    if (!r)
        return NULL;
    r->world = world;
    r->assigned = worker_rank;
    snprintf(r->peer, sizeof r->peer, "%s", hostport ? hostport : "");
    r->id = *id;
    if (opts)
        r->opts = *opts;
    if (opts && opts->transport) {
        snprintf(r->transport, sizeof r->transport, "%s", opts->transport);
        r->opts.transport = r->transport;
    }
    if (head_link(r, "start glmchat again", err) != GLM_OK) {
        rank_free(r);
        return NULL;
    }
    return r;
}

/* Drops r's connection (watch thread, data path, control socket, queued steps) and clears its
 * failure and counters, as before a first bootstrap. */
static void unlink_peer(tp_rank *r)
{
    atomic_store(&r->stop, 1);
    if (r->watch_started)
        pthread_join(r->watch, NULL);
    r->watch_started = 0;
    tp_transport_free(r->data);
    r->data = NULL;
    if (r->ctrl_fd >= 0)
        close(r->ctrl_fd);
    r->ctrl_fd = -1;
    pthread_mutex_lock(&r->lock);
    for (tp_step_node *n = r->queue_head, *next; n; n = next) {
        next = n->next;
        free(n->step.tokens);
        free(n);
    }
    r->queue_head = r->queue_tail = NULL;
    r->bye = 0;
    memset(&r->failure, 0, sizeof r->failure);
    atomic_store(&r->failed, 0);
    r->peer_exchanges = r->peer_steps = 0;
    r->peer_busy = 0;
    pthread_mutex_unlock(&r->lock);
    atomic_store(&r->stop, 0);
    atomic_store(&r->exchange_seq, 0);
    atomic_store(&r->busy, 0);
    atomic_store(&r->steps_seen, 0);
    r->step_seq = 0;
}

void tp_head_drop(tp_rank *r)
{
    if (r && r->rank == 0)
        unlink_peer(r);
}

glm_status tp_head_reconnect(tp_rank *r, glm_error *err)
{
    glm_error local;
    if (!err)
        err = &local;
    if (r->rank != 0)
        return glm_error_set(err, GLM_ERR_ARG, "only rank 0 reconnects");
    unlink_peer(r);
    glm_status st = head_link(r, "send the message again", err);
    if (st != GLM_OK) {
        /* stay failed, with why the reconnect failed, until the next attempt */
        glm_error why = *err;
        unlink_peer(r);
        set_failed(r, st, "%s", why.message);
        return copy_failure(r, err);
    }
    r->reconnects++;
    return GLM_OK;
}

int tp_rank_reconnects(const tp_rank *r)
{
    return r->reconnects;
}

/* ---- rank 1 ------------------------------------------------------------------------------------ */

/* Waits for the head's data connection carrying the token; heads that arrive meanwhile are told
 * the worker is busy, and idle connections are dropped, while the wait goes on. */
static glm_status accept_data(tp_rank *r, tp_listener *l, uint64_t token, int64_t deadline, glm_error *err)
{
    char busy[256];
    snprintf(busy, sizeof busy, "this worker is busy setting up a session with the head at %s; stop "
             "that head first, or start another worker", r->peer);
    tp_handshake h;
    glm_error e;
    if (tp_listener_wait(l, NULL, token, busy, deadline, &h, &e) != GLM_OK)
        return glm_error_set(err, GLM_ERR_PEER, "the head at %s did not open its data connection in time",
                             r->peer);
    r->data = tp_tcp_transport_new(h.fd, 1, r->peer, err);
    return r->data ? GLM_OK : err->status;
}

/* After the head proved the key: the worker's own proof, then the HELLOs compared. */
static glm_status worker_bootstrap(tp_rank *r, tp_listener *l, const tp_handshake *h,
                                   const tp_identity *id, const tp_rank_options *o, glm_error *err)
{
    uint32_t kind;
    glm_status st = parse_transport(o ? o->transport : NULL, &kind, err);
    if (st != GLM_OK)
        return st;
    int64_t deadline = tp_now_ms() + r->timeout_ms;
    tp_msg auth = {.type = TP_MSG_AUTH};
    memcpy(auth.u.auth.nonce, h->worker_nonce, TP_NONCE_BYTES);
    if (o && o->key.set)
        tp_auth_proof(&o->key, "worker", h->worker_nonce, h->head_nonce, auth.u.auth.proof);
    st = tp_ctrl_send(r->ctrl_fd, &auth, deadline, err);
    if (st != GLM_OK)
        return st;
    tp_hello theirs = h->hello;
    /* the head says how many ranks there are and which one this worker is */
    if (theirs.rank != 0 || theirs.peer_rank < 1) {
        glm_error_set(err, GLM_ERR_PEER, "the head at %s claims rank %" PRIu32 " and gives this worker rank "
                      "%" PRIu32 "; a head is rank 0 and its workers 1 and up: run the same glmchat build "
                      "on all machines", r->peer, theirs.rank, theirs.peer_rank);
        tell_peer(r->ctrl_fd, err->message);
        return err->status;
    }
    r->world = (int)theirs.settings.world;
    r->index = (int)theirs.peer_rank;
    tp_hello mine;
    make_hello(r, id, kind, &mine);
    glm_error for_head;
    if (tp_hello_compare(&theirs, &mine, "worker", &for_head) != GLM_OK) {
        tell_peer(r->ctrl_fd, for_head.message);
        glm_error why;
        tp_hello_compare(&mine, &theirs, "head", &why);
        return glm_error_set(err, GLM_ERR_PEER, "refused the head at %s: %s", r->peer, why.message);
    }
    mine.settings.transport = theirs.settings.transport;
    if (mine.settings.transport == TP_TRANSPORT_RDMA && r->world > 2) {
        glm_error_set(err, GLM_ERR_PEER, "the head at %s asked for rdma among %d ranks; rdma joins two "
                      "only: use --transport tcp", r->peer, r->world);
        tell_peer(r->ctrl_fd, err->message);
        return err->status;
    }
    if (mine.settings.transport == TP_TRANSPORT_NCCL &&
        tp_transport_refusal("nccl", mine.settings.backend, err) != GLM_OK) {
        char text[TP_TEXT_MAX + 1];
        snprintf(text, sizeof text, "the worker at rank %d cannot join: %.900s", r->index, err->message);
        tell_peer(r->ctrl_fd, text);
        return err->status;
    }
    if (o && o->assign && o->assign(o->assign_user, r->index, r->world, err) != GLM_OK) {
        tell_peer(r->ctrl_fd, err->message);
        return err->status;
    }
    tp_msg reply = {.type = TP_MSG_HELLO};
    reply.u.hello = mine;
    st = tp_ctrl_send(r->ctrl_fd, &reply, deadline, err);
    if (st != GLM_OK)
        return st;
    if (mine.settings.transport == TP_TRANSPORT_RDMA)
        return rdma_setup(r, o, deadline, err);
    if (mine.settings.transport == TP_TRANSPORT_NCCL) {
        tp_msg id;
        if ((st = expect(r, r->ctrl_fd, TP_MSG_NCCL_ID, &id, deadline, err)) != GLM_OK)
            return st;
        memcpy(r->nccl_id, id.u.nccl_id.id, TP_NCCL_ID_BYTES);
        r->has_nccl_id = 1;
    }
    return accept_data(r, l, mine.session, deadline, err);
}

tp_rank *tp_worker_accept(tp_listener *l, const tp_identity *id, const tp_rank_options *opts,
                          int64_t deadline_ms, glm_error *err)
{
    glm_error local;
    if (!err)
        err = &local;
    tp_handshake h;
    if (tp_listener_wait(l, opts ? &opts->key : NULL, 0, NULL, deadline_ms, &h, err) != GLM_OK)
        return NULL;
    tp_rank *r = rank_new(1, opts, err);
    if (!r) {
        close(h.fd);
        return NULL;
    }
    r->ctrl_fd = h.fd;
    snprintf(r->peer, sizeof r->peer, "%s", h.who);
    glm_status st = worker_bootstrap(r, l, &h, id, opts, err);
    if (st == GLM_OK)
        st = verify_data_path(r, tp_now_ms() + r->timeout_ms, err);
    if (st == GLM_OK) {
        r->listener = l;
        turn_away(r); /* handshakes begun meanwhile: this head is served now */
        st = start_watch(r, err);
    }
    if (st != GLM_OK) {
        r->listener = NULL;
        close_gently(r->ctrl_fd);
        r->ctrl_fd = -1;
        rank_free(r);
        return NULL;
    }
    return r;
}

/* ---- running ------------------------------------------------------------------------------------ */

glm_status tp_rank_health(tp_rank *r, glm_error *err)
{
    if (!atomic_load(&r->failed))
        return GLM_OK;
    return copy_failure(r, err);
}

/* After an exchange: a failure marks the rank failed, saying why. */
static glm_status after_exchange(tp_rank *r, glm_status st, uint64_t seq, const glm_error *e, glm_error *err)
{
    if (st == GLM_OK) {
        if (r->waited_late && r->note) { /* the late peer came: whoever was told hears so */
            tp_late_wait w = {.role = r->peer_role, .peer = r->peer, .exchange = seq, .over = 1,
                              .late_s = (tp_now_ms() - r->exchange_started_ms) / 1000.0};
            r->note(r->note_user, &w);
        }
        return GLM_OK;
    }
    if (st == GLM_ERR_ARG || st == GLM_ERR_UNSUPPORTED) {
        if (err)
            *err = *e;
        return st;
    }
    int64_t waited = tp_now_ms() - r->exchange_started_ms;
    if (r->wait_canceled) { /* the link fails (the peer is mid-step); the reply is canceled */
        set_failed(r, st, "exchange %" PRIu64 " with the %s at %s was given up after %.1f s: the reply "
                   "was canceled while the %s was late; %s", seq, r->peer_role, r->peer,
                   waited / 1000.0, r->peer_role, r->rank == 0 ? "the next message reconnects"
                                                              : next_move(r));
        copy_failure(r, err);
        if (err)
            err->status = GLM_ERR_CANCELED;
        return GLM_ERR_CANCELED;
    }
    /* A peer that died breaks the data connection and the control connection together; give
     * the watch thread a moment to say which (exited, stopped answering, reported an error),
     * since that says more to the user than the data path's errno. */
    for (int i = 0; i < 20 && !atomic_load(&r->failed); i++) {
        struct timespec nap = {0, 10 * 1000000L};
        nanosleep(&nap, NULL);
    }
    waited = tp_now_ms() - r->exchange_started_ms;
    if (r->waited_late) /* the wait went on while the peer said it was coming */
        set_failed(r, st, "exchange %" PRIu64 " with the %s at %s failed after %.1f s: %s; %s", seq,
                   r->peer_role, r->peer, waited / 1000.0, e->message, next_move(r));
    else
        set_failed(r, st, "exchange %" PRIu64 " with the %s at %s failed: %s; %s", seq, r->peer_role,
                   r->peer, e->message, next_move(r));
    return copy_failure(r, err);
}

/* Before an exchange: its number, and when it began (late_peer_deadline, after_exchange). */
static uint64_t begin_exchange(tp_rank *r)
{
    r->exchange_started_ms = tp_now_ms();
    r->waited_late = r->wait_canceled = 0;
    return ++r->exchange_seq;
}

/* One exchange of n floats (at most r->piece) through the data transport, rank k's floats at
 * gathered + k * stride. */
static glm_status gather_once(tp_rank *r, const float *mine, float *gathered, size_t stride, size_t n,
                              glm_error *err)
{
    if (atomic_load(&r->failed))
        return copy_failure(r, err);
    uint64_t seq = begin_exchange(r);
    glm_error e;
    glm_status st = tp_all_gather_at(r->data, mine, gathered, stride, n, seq, r->timeout_ms, &e);
    return after_exchange(r, st, seq, &e, err);
}

/* r->scratch of at least n floats. */
static glm_status scratch_for(tp_rank *r, size_t n, glm_error *err)
{
    if (r->scratch_n >= n)
        return GLM_OK;
    float *grown = realloc(r->scratch, n * sizeof *grown);
    if (!grown)
        return glm_error_set(err, GLM_ERR_NOMEM, "out of memory for a %zu-float exchange", n / 2);
    r->scratch = grown;
    r->scratch_n = n;
    return GLM_OK;
}

/* The floats of the exchange that starts at offset o of a collective of n (r->piece at most). */
static size_t piece_at(const tp_rank *r, size_t o, size_t n)
{
    return r->piece && n - o > r->piece ? r->piece : n - o;
}

/* A collective larger than the transport carries at once (a prefill chunk's partial sums over
 * rdma's 16 MiB slot) goes as exchanges of r->piece floats in order, each landing in place in
 * both ranks' halves. */
glm_status tp_rank_all_gather(tp_rank *r, const float *mine, float *gathered, size_t n, glm_error *err)
{
    glm_status st;
    size_t o = 0;
    do { /* at least one exchange: n = 0 is the transport's to refuse */
        size_t len = piece_at(r, o, n);
        st = gather_once(r, mine + o, gathered + o, n, len, err);
        o += len;
    } while (st == GLM_OK && o < n);
    return st;
}

glm_status tp_rank_exchange(tp_rank *r, const float *out, size_t out_n, float *in, size_t in_n,
                            glm_error *err)
{
    if (atomic_load(&r->failed))
        return copy_failure(r, err);
    uint64_t seq = begin_exchange(r);
    glm_error e;
    glm_status st = tp_exchange(r->data, out, out_n, in, in_n, seq, r->timeout_ms, &e);
    return after_exchange(r, st, seq, &e, err);
}

/* Rank-order sums (rank 0's partial + rank 1's), an exchange of at most r->piece floats at a
 * time: the same bits as one exchange of all n, with scratch for one piece. */
glm_status tp_rank_all_reduce(tp_rank *r, float *buf, size_t n, glm_error *err)
{
    glm_status st = scratch_for(r, 2 * piece_at(r, 0, n), err);
    size_t o = 0;
    while (st == GLM_OK && o < n) {
        size_t len = piece_at(r, o, n);
        st = gather_once(r, buf + o, r->scratch, len, len, err);
        for (size_t i = 0; st == GLM_OK && i < len; i++)
            buf[o + i] = r->scratch[i] + r->scratch[len + i];
        o += len;
    }
    return st;
}

/* Before a turn's first step: a worker that exited while the link sat idle has closed it, and the
 * watch thread may not have looked yet (it polls every 50 ms). Counted as a failure now, so the
 * turn connects again first instead of finding the close halfway through its first exchange. */
static void notice_close(tp_rank *r)
{
    if (r->ctrl_fd < 0 || atomic_load(&r->failed))
        return;
    struct pollfd p = {r->ctrl_fd, POLLRDHUP, 0};
    if (poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)))
        fail_closed(r);
}

glm_status tp_head_send_step(tp_rank *r, uint32_t slot, tp_step_cmd cmd, uint32_t pos,
                             const uint32_t *tokens, uint32_t n_tokens, glm_error *err)
{
    if (r->rank != 0)
        return glm_error_set(err, GLM_ERR_ARG, "only rank 0 sends steps");
    /* After a failure the head's state was reset; its next forward from position 0 (a new turn)
     * finds a restarted worker as empty as itself, so that is where it connects again. */
    int fresh_start = pos == 0 && tp_step_is_forward(cmd);
    if (fresh_start)
        notice_close(r);
    if (atomic_load(&r->failed) && (!fresh_start || tp_head_reconnect(r, err) != GLM_OK))
        return copy_failure(r, err);
    tp_msg m = {.type = TP_MSG_STEP};
    m.u.step.seq = r->step_seq + 1;
    m.u.step.slot = slot;
    m.u.step.cmd = cmd;
    m.u.step.pos = pos;
    m.u.step.n_tokens = n_tokens;
    m.u.step.tokens = (uint32_t *)tokens;
    glm_error e;
    glm_status st = ctrl_send_locked(r, &m, tp_now_ms() + r->timeout_ms, &e);
    if (st == GLM_ERR_ARG) {
        if (err)
            *err = e;
        return st;
    }
    if (st != GLM_OK) {
        set_failed(r, st, "lost the worker at %s sending step %" PRIu64 " (%s); %s", r->peer,
                   m.u.step.seq, e.message, next_move(r));
        return copy_failure(r, err);
    }
    r->step_seq++;
    atomic_store(&r->steps_seen, r->step_seq);
    if (tp_step_exchanges(cmd))
        atomic_store(&r->busy, 1); /* until tp_rank_step_end */
    return GLM_OK;
}

void tp_rank_step_end(tp_rank *r)
{
    atomic_store(&r->busy, 0);
}

void tp_rank_set_cancel(tp_rank *r, int (*canceled)(void *user), void *user)
{
    r->canceled = canceled;
    r->canceled_user = user;
}

void tp_late_wait_text(const tp_late_wait *w, char *out, size_t cap)
{
    if (w->over) {
        snprintf(out, cap, "the %s at %s came to exchange %" PRIu64 " after %.1f s", w->role, w->peer,
                 w->exchange, w->late_s);
        return;
    }
    snprintf(out, cap, "the %s at %s is %.1f s late to exchange %" PRIu64 " and still working toward "
             "it; waiting for it (at most %.0f s in all)", w->role, w->peer, w->late_s, w->exchange,
             w->limit_s);
}

void tp_rank_set_note(tp_rank *r, void (*note)(void *user, const tp_late_wait *w), void *user)
{
    r->note = note;
    r->note_user = user;
}

glm_status tp_worker_next_step(tp_rank *r, int wait_ms, tp_step *step, int *bye, glm_error *err)
{
    tp_rank_step_end(r); /* the step before this call, if any, is over */
    memset(step, 0, sizeof *step);
    *bye = 0;
    int64_t until = wait_ms < 0 ? INT64_MAX : tp_now_ms() + wait_ms;
    pthread_mutex_lock(&r->lock);
    while (!r->queue_head && !atomic_load(&r->failed)) {
        if (tp_now_ms() >= until) {
            pthread_mutex_unlock(&r->lock);
            return GLM_OK;
        }
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        ts.tv_nsec += 100 * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&r->cond, &r->lock, &ts);
    }
    tp_step_node *node = r->queue_head;
    if (node) {
        r->queue_head = node->next;
        if (!r->queue_head)
            r->queue_tail = NULL;
        /* in a step from here until the next call or tp_rank_step_end; set under the lock the
         * heartbeat reads the queue under, so it never sees the step neither queued nor begun */
        if (tp_step_exchanges(node->step.cmd))
            atomic_store(&r->busy, 1);
    }
    int clean_stop = r->bye;
    pthread_mutex_unlock(&r->lock);
    if (!node) {
        if (clean_stop) {
            *bye = 1;
            return GLM_OK;
        }
        return copy_failure(r, err);
    }
    *step = node->step;
    free(node);
    if (step->seq != r->step_seq + 1) {
        uint64_t got = step->seq;
        free(step->tokens);
        memset(step, 0, sizeof *step);
        set_failed(r, GLM_ERR_PEER, "the ranks are out of step: step %" PRIu64 " from the head at %s, "
                   "expected %" PRIu64 "; %s", got, r->peer, r->step_seq + 1, next_move(r));
        return copy_failure(r, err);
    }
    r->step_seq++;
    return GLM_OK;
}

void tp_rank_report(tp_rank *r, const char *text)
{
    tp_msg m;
    glm_error ignored;
    tp_msg_error(&m, 2, "%s", text);
    pthread_mutex_lock(&r->write_lock);
    (void)tp_ctrl_send(r->ctrl_fd, &m, tp_now_ms() + TP_BYE_MS, &ignored);
    pthread_mutex_unlock(&r->write_lock);
    set_failed(r, GLM_ERR_PEER, "%s", text);
}

const char *tp_rank_peer(const tp_rank *r)
{
    return r->peer;
}

int tp_rank_timeout_ms(const tp_rank *r)
{
    return r->timeout_ms;
}

const uint8_t *tp_rank_nccl_id(const tp_rank *r)
{
    return r->has_nccl_id ? r->nccl_id : NULL;
}

const char *tp_rank_transport_name(const tp_rank *r)
{
    if (r->has_nccl_id || r->opts.nccl_id_set) /* the link's own data path only checks the link */
        return "nccl";
    return r->data ? r->data->ops->name : "none";
}

int tp_rank_index(const tp_rank *r)
{
    return r->index;
}

int tp_rank_world(const tp_rank *r)
{
    return r->world;
}

uint64_t tp_rank_exchanges(const tp_rank *r)
{
    return r->exchange_seq;
}

void tp_rank_close(tp_rank *r)
{
    if (!r)
        return;
    atomic_store(&r->stop, 1);
    if (r->watch_started) {
        pthread_join(r->watch, NULL);
        r->watch_started = 0;
    }
    if (!atomic_load(&r->failed) && r->ctrl_fd >= 0) {
        tp_msg bye = {.type = TP_MSG_BYE};
        glm_error ignored;
        (void)tp_ctrl_send(r->ctrl_fd, &bye, tp_now_ms() + TP_BYE_MS, &ignored);
    }
    rank_free(r);
}
