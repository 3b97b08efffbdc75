/* protocol.h: the control protocol between rank 0 (head) and rank 1 (worker): framed, versioned,
 * typed messages (HELLO, STEP, HEARTBEAT, BYE, ERROR, ...). Decoding checks every field and length. */
#ifndef GLMCHAT_TP_PROTOCOL_H
#define GLMCHAT_TP_PROTOCOL_H

#include <stddef.h>
#include <stdint.h>

#include "glm.h"

/* Bumped whenever a message's layout or meaning changes; peers must match exactly. */
/* 8: heartbeats carry the steps the sender sent (a head) or received (a worker); 9: a prefill
 * makes one more exchange a layer, the ranks' cancel flags summed (backend.h); 10: under the
 * one-part products a prefill chunk's indexer query takes one fp16 part (the ranks' selections
 * must be made alike); 11: a CUDA prefill chunk of 512 rows or more exchanged through the host
 * runs as two halves, each exchanging its own partial sums (the ranks must cut alike); 12: drafted
 * decoding over ranks: VERIFY and REWIND steps */
#define TP_PROTOCOL_VERSION 13u

/* A frame is a 12-byte header (magic "GLTP", type u16, flags u16 = 0, payload length u32),
 * then the payload; all integers little-endian. */
#define TP_FRAME_MAGIC 0x50544c47u
#define TP_FRAME_HEADER_BYTES 12u
#define TP_STEP_MAX_TOKENS (1u << 20)
/* A verification window's tokens at most (drafting verifies the chosen token and up to 8 drafts:
 * spec.h's SPEC_MAX_DRAFT; room to grow without a protocol change) */
#define TP_VERIFY_MAX_TOKENS 64u
#define TP_MAX_SLOTS 16u   /* conversation states a head may keep open on one worker at once */
#define TP_NAME_MAX 127u   /* version and model name, bytes (plus a NUL in memory) */
#define TP_MAX_RANKS 16u   /* ranks in one split: a head and up to 15 workers */
#define TP_TEXT_MAX 1000u  /* ERROR text, bytes */
#define TP_BLOB_MAX 1024u  /* an opaque transport parameter blob (RDMA queue pair details) */
#define TP_FRAME_MAX_PAYLOAD (32u + 4u * TP_STEP_MAX_TOKENS)

typedef enum tp_msg_type {
    TP_MSG_HELLO = 1,     /* who I am: versions, model identity, settings */
    TP_MSG_STEP = 2,      /* rank 0's decision for one step; rank 1 applies it */
    TP_MSG_HEARTBEAT = 3, /* I am alive */
    TP_MSG_BYE = 4,       /* clean stop */
    TP_MSG_ERROR = 5,     /* refusal or failure, with a sentence for the user */
    TP_MSG_ATTACH = 6,    /* first message on the TCP data connection: the session token */
    TP_MSG_PARAMS = 7,    /* transport parameters (RDMA queue pairs, GIDs, keys) */
    TP_MSG_READY = 8,     /* the data path is connected and checked */
    TP_MSG_CHALLENGE = 9, /* worker -> head after HELLO: whether it has a key, its fresh nonce */
    TP_MSG_AUTH = 10,     /* each side's nonce and proof of the key (tp/auth.h) */
    TP_MSG_NCCL_ID = 11,  /* head -> worker: the NCCL communicator's unique id (tp/nccl.h) */
} tp_msg_type;

#define TP_AUTH_NONCE_BYTES 32u
#define TP_AUTH_PROOF_BYTES 32u
#define TP_NCCL_ID_BYTES 128u /* ncclUniqueId's size (NCCL_UNIQUE_ID_BYTES); nccl.c checks */

typedef enum tp_transport_kind {
    TP_TRANSPORT_AUTO = 0, /* worker only: whatever the head asks for */
    TP_TRANSPORT_TCP = 1,
    TP_TRANSPORT_RDMA = 2,
    TP_TRANSPORT_NCCL = 3, /* one NCCL communicator among all ranks (CUDA builds with NCCL only) */
} tp_transport_kind;

/* Settings both ranks must share; HELLO carries them and a difference refuses the peer. */
typedef struct tp_settings {
    uint32_t world;        /* number of ranks: 2 .. TP_MAX_RANKS (the head and its workers) */
    uint32_t transport;    /* tp_transport_kind of the data path */
    uint32_t heartbeat_ms; /* interval between heartbeats */
    uint32_t timeout_ms;   /* a peer silent this long has failed */
    uint32_t max_context;  /* the most tokens a state may hold (the backend's context) */
    uint32_t kv_format;    /* the attention caches' types: BACKEND_KV(latent, indexer), backend.h */
    uint32_t backend;      /* 1 cpu, 2 cuda: the ranks' replicated ops must round alike */
} tp_settings;

typedef struct tp_hello {
    uint32_t protocol;               /* TP_PROTOCOL_VERSION */
    uint32_t rank;                   /* the sender's rank */
    char version[TP_NAME_MAX + 1];   /* glmchat version */
    char model_name[TP_NAME_MAX + 1];
    uint64_t config_hash;            /* hash of config.json */
    uint64_t weights_hash;           /* hash of the weight index */
    tp_settings settings;
    uint64_t session;                /* head: its session id; worker: the data attach token */
    uint32_t peer_rank;              /* head: the rank the worker is to take (1 .. world-1);
                                        worker: 0, the head's. Sent last and only when world > 2:
                                        two ranks keep version 4's layout (the peer implied), so
                                        builds either side of it refuse each other by version */
} tp_hello;

typedef enum tp_step_cmd {
    TP_STEP_FORWARD = 1,  /* run tokens[0..n) at positions pos..pos+n-1 */
    TP_STEP_RESET = 2,    /* drop the session's state (n must be 0) */
    TP_STEP_TRUNCATE = 3, /* keep the first pos tokens of state (n must be 0) */
    TP_STEP_MARK = 4,     /* remember the state at pos tokens, for a later truncate (n must be 0) */
    TP_STEP_FORWARD_ALL = 5, /* a forward that also computes every row's logits */
    TP_STEP_CLOSE = 6,    /* the head freed this slot's state: free the mirror (n must be 0) */
    TP_STEP_VERIFY = 7,   /* a verification window of drafted tokens at positions pos..pos+n-1:
                           * run as drafted decoding verifies them (the state can go back inside) */
    TP_STEP_REWIND = 8,   /* back to pos tokens inside the last window (n must be 0) */
    TP_STEP_KEEP = 9,     /* keep the state of pos tokens in the worker's prompt cache (n must be 0) */
    TP_STEP_RESTORE = 10, /* restore the kept state of tokens[0..n) (pos = n) from the worker's
                           * prompt cache; one exchange follows: every rank's 1 if it could not */
} tp_step_cmd;

/* A step that runs the forward (its exchanges follow): FORWARD, FORWARD_ALL or VERIFY. */
static inline int tp_step_is_forward(uint32_t cmd)
{
    return cmd == TP_STEP_FORWARD || cmd == TP_STEP_FORWARD_ALL || cmd == TP_STEP_VERIFY;
}

/* A step with exchanges after it (the ranks busy until it ends): the forwards and RESTORE. */
static inline int tp_step_exchanges(uint32_t cmd)
{
    return tp_step_is_forward(cmd) || cmd == TP_STEP_RESTORE;
}

typedef struct tp_step {
    uint64_t seq;      /* steps are numbered 1, 2, ... without gaps */
    uint32_t slot;     /* which of the head's conversation states, 0..TP_MAX_SLOTS-1 */
    uint32_t cmd;      /* tp_step_cmd */
    uint32_t pos;
    uint32_t n_tokens;
    uint32_t *tokens;  /* n_tokens ids, owned by the message (tp_msg_clear frees) */
} tp_step;

typedef struct tp_msg {
    tp_msg_type type;
    union {
        tp_hello hello;
        tp_step step;
        /* exchanges: the sender's exchanges on this link so far (begun); steps: the steps a head
         * sent, or a worker received; busy: 1 while the sender is in a forward step (a worker:
         * or has one waiting), on its way to its next exchange (a late peer is waited for only
         * while it says so: rank.c's late_peer_deadline) */
        struct { uint64_t seq; uint64_t sent_ms; uint64_t exchanges; uint64_t steps; uint32_t busy; } heartbeat;
        struct { uint32_t reason; } bye;
        struct { uint32_t code; char text[TP_TEXT_MAX + 1]; } error;
        struct { uint64_t token; } attach;
        struct { uint32_t len; uint8_t bytes[TP_BLOB_MAX]; } params;
        struct { uint32_t status; } ready;
        struct { uint32_t keyed; uint8_t nonce[TP_AUTH_NONCE_BYTES]; } challenge;
        struct { uint8_t nonce[TP_AUTH_NONCE_BYTES]; uint8_t proof[TP_AUTH_PROOF_BYTES]; } auth;
        struct { uint8_t id[TP_NCCL_ID_BYTES]; } nccl_id; /* opaque; all zero is refused */
    } u;
} tp_msg;

const char *tp_msg_type_name(uint32_t type);
const char *tp_transport_kind_name(uint32_t kind);

/* Checks a frame header; on success sets the type and payload length. Rejects a bad magic,
 * an unknown type, nonzero flags and a length beyond what that type can need. */
glm_status tp_frame_header_decode(const uint8_t hdr[TP_FRAME_HEADER_BYTES], uint32_t *type,
                                  uint32_t *payload_len, glm_error *err);

/* Decodes one payload of the given type into out, checking every field; the whole payload must
 * be consumed. On failure out holds nothing to free. */
glm_status tp_msg_decode(uint32_t type, const uint8_t *payload, size_t len, tp_msg *out,
                         glm_error *err);

/* Encodes m as one frame (header + payload) into a new buffer the caller frees. */
glm_status tp_msg_encode(const tp_msg *m, uint8_t **frame, size_t *frame_len, glm_error *err);

/* Frees what a decoded message owns (STEP tokens) and zeroes it. */
void tp_msg_clear(tp_msg *m);

/* Compares the peer's HELLO with ours. On a difference, returns GLM_ERR_PEER with a sentence
 * naming the field and both values ("model differs: config hash ... here, ... on the worker"). */
glm_status tp_hello_compare(const tp_hello *mine, const tp_hello *peer, const char *peer_role,
                            glm_error *err);

/* tp_settings.kv_format for messages: "f32, bf16 dense weights", or "fp8 latent, f32 indexer, q4
 * dense weights" (backend.h's BACKEND_KV: the latent cache's type in the low byte, the indexer's
 * in the next, 0 f32, 1 bf16, 2 fp8; bit 16 BACKEND_DENSE_Q4; bits 29-31 the CUDA prefill
 * chunk, ", prefill chunks of 4096 rows"). */
const char *tp_kv_format_name(uint32_t kv_format, char *buf, size_t cap);

/* Sets up an ERROR message with printf-style text (cut to TP_TEXT_MAX). */
void tp_msg_error(tp_msg *m, uint32_t code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#endif
