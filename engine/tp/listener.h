/* listener.h (inside engine/tp): the worker's listening socket and the handshakes in progress on
 * it, read side by side without blocking, so an idle or hostile connection cannot hold up a head. */
#ifndef GLMCHAT_TP_LISTENER_H
#define GLMCHAT_TP_LISTENER_H

#include <stdint.h>

#include "glm.h"
#include "tp/auth.h"
#include "tp/protocol.h"
#include "tp/rank.h"

/* A connection gets this long from being accepted to proving the key (HELLO, then AUTH). */
#define TP_HANDSHAKE_MS 2000
/* What a worker tells a connection it dropped for that: a head reading it tries again while its
 * connect window lasts (a lossy link delayed its handshake; the worker did not refuse the head). */
#define TP_LATE_HANDSHAKE_REFUSAL "this glmchat worker received no handshake in time and closed the connection"
/* Handshakes read side by side; past this many the oldest is dropped for a new one. */
#define TP_PENDING_MAX 32

/* A head that sent HELLO and proved the key (or, keyless on loopback, sent AUTH). */
typedef struct tp_handshake {
    int fd;
    char who[128];
    tp_hello hello;
    uint8_t worker_nonce[TP_AUTH_NONCE_BYTES];
    uint8_t head_nonce[TP_AUTH_NONCE_BYTES];
} tp_handshake;

/* Serves the listener until deadline_ms. data_token 0: waits for a head's handshake and returns
 * GLM_OK with *out filled once one proves the key. data_token nonzero: waits for the data
 * connection whose ATTACH carries it (out->fd), telling heads that arrive meanwhile busy_text.
 * Returns GLM_ERR_PEER with err when a connection was refused or dropped (a line for the log;
 * call again to go on), or when the deadline passed ("no connection arrived in time"). */
glm_status tp_listener_wait(tp_listener *l, const tp_key *key, uint64_t data_token,
                            const char *busy_text, int64_t deadline_ms, tp_handshake *out,
                            glm_error *err);

/* While a head is served: refuses new connections and unfinished handshakes with busy_text and
 * closes refused ones once they have read it; never blocks. */
void tp_listener_turn_away(tp_listener *l, const char *busy_text);

int tp_listener_fd(const tp_listener *l);

#endif
