/* rank.h: the two ranks' session: bootstrap (versions, model identity, settings, data path),
 * heartbeats and timeouts, step decisions from rank 0 to rank 1, and the per-layer all-gathers. */
#ifndef GLMCHAT_TP_RANK_H
#define GLMCHAT_TP_RANK_H

#include <stddef.h>
#include <stdint.h>

#include "base/hash.h" /* the identity's hashes are fnv1a64 */
#include "glm.h"
#include "tp/auth.h"
#include "tp/protocol.h"
#include "tp/rdma.h"

#define TP_DEFAULT_HEARTBEAT_MS 1000
#define TP_DEFAULT_TIMEOUT_MS 5000
#define TP_DEFAULT_CONNECT_MS 10000

typedef struct tp_rank_options {
    const char *transport;  /* "tcp", "rdma" or "nccl"; NULL: head picks rdma when a device is
                               present, else tcp; a worker takes what the head asks for. nccl:
                               each link keeps a tcp data path (its checks), and the group's
                               collectives go through one NCCL communicator (tp/nccl.h) */
    int heartbeat_ms;       /* 0: TP_DEFAULT_HEARTBEAT_MS */
    int timeout_ms;         /* a peer silent this long has failed; 0: TP_DEFAULT_TIMEOUT_MS */
    int connect_ms;         /* head: how long to keep trying to reach the worker; 0: default */
    tp_rdma_options rdma;
    tp_key key;             /* the shared key (tp_key_load); unset: keyless, which both ranks must be */
    /* worker: called once the head is known (its key proved, HELLOs alike) with the rank the head
     * gives this worker and the number of ranks, before the worker answers: it makes the model
     * that rank's part. A failure is told to the head as its refusal. NULL: nothing to do. */
    glm_status (*assign)(void *user, int rank, int world, glm_error *err);
    void *assign_user;
    /* head, transport nccl: the communicator's unique id (tp_nccl_unique_id), sent to the worker
     * in an NCCL_ID message after the HELLOs; tp_group_connect fills it */
    uint8_t nccl_id[TP_NCCL_ID_BYTES];
    int nccl_id_set;
    /* The most floats an exchange carries from a rank: a larger all-gather or all-reduce goes as
     * several exchanges in order (both ranks must give the same). 0: the data transport's own
     * limit (rdma: its slot of 16 MiB), none over tcp; tests set it to split over tcp too. */
    size_t piece_floats;
} tp_rank_options;

/* Why this build or backend cannot use the transport named (NULL: the default), as GLM_ERR_ARG or
 * GLM_ERR_UNSUPPORTED with a sentence naming what to do; GLM_OK when it can. backend is
 * tp_backend_code's (nccl needs cuda: its collectives run on the GPUs). */
glm_status tp_transport_refusal(const char *transport, uint32_t backend, glm_error *err);

/* What both ranks must agree on about the model. */
typedef struct tp_identity {
    char model_name[TP_NAME_MAX + 1]; /* config.json's model_type */
    uint64_t config_hash;             /* of config.json's bytes (FNV-1a) */
    uint64_t weights_hash;            /* of the weight index (or the weight files' names and sizes) */
    uint32_t max_context;
    uint32_t kv_format;
    uint32_t backend; /* 1 cpu, 2 cuda (tp_settings.backend); 0 is taken as cpu */
} tp_identity;

/* tp_identity.backend for a backend's name ("cpu" 1, "cuda" 2). */
uint32_t tp_backend_code(const char *backend_name);

/* The identity of the model in dir (model/identity.h), the other fields zero. */
glm_status tp_identity_from_model_dir(const char *dir, tp_identity *id, glm_error *err);

typedef struct tp_rank tp_rank;
typedef struct tp_listener tp_listener;

/* Rank 0: connects to the worker at hostport, retrying until opts->connect_ms has passed, and
 * runs the bootstrap. NULL with err on failure; a refusal names the difference. opts is copied
 * (opts->rdma's strings must outlive the rank). */
tp_rank *tp_head_connect(const char *hostport, const tp_identity *id, const tp_rank_options *opts,
                         glm_error *err);

/* Rank 0 of world (2 .. TP_MAX_RANKS): tp_head_connect to the worker that is to take rank
 * worker_rank (1 .. world-1), which HELLO tells it with world. rdma joins two ranks only: with
 * world > 2 it is refused by name, and no transport named means tcp. */
tp_rank *tp_head_connect_rank(const char *hostport, int worker_rank, int world, const tp_identity *id,
                              const tp_rank_options *opts, glm_error *err);

/* Rank 0: closes the connection (control and data) without a BYE, as a failed one; the rank
 * stays usable for tp_head_reconnect. A worker in an exchange with it sees it closed at once. */
void tp_head_drop(tp_rank *r);

/* Rank 1: listens on hostport (port 0: any; tp_listener_port tells which). Without a key (key
 * NULL or unset) only a loopback address is allowed: elsewhere anyone who reaches the port could
 * drive the worker, so that is refused, saying how to make a key. */
tp_listener *tp_listener_open(const char *hostport, const tp_key *key, glm_error *err);
/* The check tp_listener_open makes first, for a caller to make before slow work (a model's load). */
glm_status tp_listen_allowed(const char *hostport, const tp_key *key, glm_error *err);
int tp_listener_port(const tp_listener *l);
void tp_listener_close(tp_listener *l);

/* Rank 1: waits until deadline_ms (monotonic, tp_now_ms) for one head and runs the bootstrap.
 * Handshakes are read side by side: a head must send HELLO and prove opts->key within
 * TP_HANDSHAKE_MS of connecting, and idle or slow connections do not hold up others. NULL with
 * err when none came or a connection was refused or dropped (err says why, for the log); the
 * listener stays usable. While a head is served, other connections are told the worker is busy. */
tp_rank *tp_worker_accept(tp_listener *l, const tp_identity *id, const tp_rank_options *opts,
                          int64_t deadline_ms, glm_error *err);

/* The collective of the forward: gathered[0..2n) = rank 0's n floats then rank 1's. Both ranks
 * must call it in the same order with the same n. Bounded by the timeout. More floats than the
 * data transport carries at once (tp_rank_options.piece_floats) go as several exchanges, each
 * numbered and bounded as one. */
glm_status tp_rank_all_gather(tp_rank *r, const float *mine, float *gathered, size_t n, glm_error *err);

/* Gathers and sums in rank order into buf (identical bits on both ranks). */
glm_status tp_rank_all_reduce(tp_rank *r, float *buf, size_t n, glm_error *err);

/* One exchange with the peer of unequal halves: out_n floats sent, in_n received (either may be
 * 0; the peer calls it with the two mirrored). Numbered and bounded as the all-gather; the star
 * of more than two ranks is built on it (tp/group.h). */
glm_status tp_rank_exchange(tp_rank *r, const float *out, size_t out_n, float *in, size_t in_n,
                            glm_error *err);

/* Rank 0: drops the connection and connects to the worker again (same address, identity and
 * options; retried for connect_ms), starting from step 0 with an empty worker. The rank stays
 * failed, saying why, when the worker cannot be reached or refuses. */
glm_status tp_head_reconnect(tp_rank *r, glm_error *err);
int tp_rank_reconnects(const tp_rank *r); /* rank 0: successful reconnects so far */

/* Rank 0: sends the next step decision for one of its conversation states (slot, 0..
 * TP_MAX_SLOTS-1; the worker keeps a mirror state per slot). A failed rank reconnects first when
 * the step is a forward from position 0 (that state is empty, as a restarted worker's are); other
 * steps of a failed rank return its failure. */
glm_status tp_head_send_step(tp_rank *r, uint32_t slot, tp_step_cmd cmd, uint32_t pos,
                             const uint32_t *tokens, uint32_t n_tokens, glm_error *err);

/* This side's forward step is over (done or failed): its heartbeats stop saying it is on its way
 * to its next exchange, so the peer's wait for that exchange ends at its timeout. A forward step
 * begins with tp_head_send_step (rank 0) or its arrival at the worker (rank 1: a step in the
 * queue for tp_worker_next_step counts, as does any step after it until it ends). While a side
 * is in a step, a peer waiting for its next exchange waits past the timeout (the side is late,
 * not gone: a loaded machine, a longer share of the work), up to 24 timeouts at the head. A step
 * waiting in a worker's queue counts too, so a worker whose step thread hangs between steps is
 * waited for up to that cap, not one timeout. */
void tp_rank_step_end(tp_rank *r);

/* A wait past the timeout for a late peer asks canceled(user) at each heartbeat and gives up when
 * it says so (the user canceled the reply): the exchange returns GLM_ERR_CANCELED and the link
 * fails, as after any failed exchange (the next message reconnects). NULL: never. Called on the
 * exchange's thread. */
void tp_rank_set_cancel(tp_rank *r, int (*canceled)(void *user), void *user);

/* A wait that went past the timeout for a late peer: who, to which exchange, how late so far
 * (over: how long the exchange took) and how long the wait lasts at most (both from the
 * exchange's start). */
typedef struct tp_late_wait {
    const char *role; /* the peer's: "worker" or "head" */
    const char *peer; /* HOST:PORT */
    uint64_t exchange;
    double late_s, limit_s;
    int over;         /* the peer came: the exchange is done */
} tp_late_wait;

/* The wait as a sentence for a log ("the worker at H:P is 5.2 s late to exchange 42 and still
 * working toward it; waiting for it (at most 120 s in all)"; over: "the worker at H:P came to
 * exchange 42 after 7.3 s"). */
void tp_late_wait_text(const tp_late_wait *w, char *out, size_t cap);

/* note(user, wait) is told when a wait goes past the timeout for a late peer (once an exchange)
 * and again when that peer came (w->over), for the rank's log and its user. NULL: nothing is
 * said. Called on the exchange's thread. */
void tp_rank_set_note(tp_rank *r, void (*note)(void *user, const tp_late_wait *w), void *user);

/* Rank 1: waits up to wait_ms (< 0: as long as the head keeps beating) for the next step.
 * step->cmd is 0 when none came in time; *bye is set when the head stopped cleanly. The step's
 * tokens belong to the caller: free(step->tokens). A forward step keeps the worker "in a step"
 * (its heartbeats say so) until the next call or tp_rank_step_end. */
glm_status tp_worker_next_step(tp_rank *r, int wait_ms, tp_step *step, int *bye, glm_error *err);

/* Tells the peer about a failure on this side (an ERROR it shows its user) and marks the session
 * failed, so both ranks stop. */
void tp_rank_report(tp_rank *r, const char *text);

/* GLM_OK while the peer is healthy; else the failure, as a sentence for the user. */
glm_status tp_rank_health(tp_rank *r, glm_error *err);

const char *tp_rank_peer(const tp_rank *r);
const char *tp_rank_transport_name(const tp_rank *r);
int tp_rank_index(const tp_rank *r); /* this rank among the split's (the head is 0) */
int tp_rank_world(const tp_rank *r);
int tp_rank_timeout_ms(const tp_rank *r); /* a peer silent this long has failed */
/* A worker whose head asked for nccl: the communicator's unique id it sent; else NULL. */
const uint8_t *tp_rank_nccl_id(const tp_rank *r); /* the split's number of ranks (a worker: as its head said) */
uint64_t tp_rank_exchanges(const tp_rank *r);

/* Sends BYE when the peer is healthy, stops the heartbeat and frees everything. */
void tp_rank_close(tp_rank *r);

#endif
