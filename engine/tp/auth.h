/* auth.h: the ranks' shared key (a file of 64 hex digits, mode 0600) and the challenge-response
 * proofs both ranks give in the handshake, so only holders of the key can drive a worker. */
#ifndef GLMCHAT_TP_AUTH_H
#define GLMCHAT_TP_AUTH_H

#include <stddef.h>
#include <stdint.h>

#include "glm.h"

#define TP_KEY_BYTES 32u
#define TP_NONCE_BYTES 32u
#define TP_PROOF_BYTES 32u

typedef struct tp_key {
    int set;                     /* 0: no key (allowed only on loopback) */
    uint8_t bytes[TP_KEY_BYTES];
} tp_key;

/* Reads a key file: 64 hex digits, optionally followed by a newline. Like ssh with a private
 * key, a file that its group or others may read or write is refused (chmod 600 FILE), as is one
 * that is not a regular file. The error names the file and says what to do. */
glm_status tp_key_load(const char *path, tp_key *key, glm_error *err);

/* Writes a new random key to path with mode 0600; never replaces an existing file. */
glm_status tp_key_create(const char *path, glm_error *err);

/* n bytes from the kernel's random source; GLM_ERR_IO when it fails (never a weaker fallback). */
glm_status tp_random_bytes(uint8_t *out, size_t n, glm_error *err);

/* A rank's proof that it holds the key: HMAC-SHA256 under the key of the role ("head" or
 * "worker") and both nonces (the worker's, then the head's). */
void tp_auth_proof(const tp_key *key, const char *role, const uint8_t worker_nonce[TP_NONCE_BYTES],
                   const uint8_t head_nonce[TP_NONCE_BYTES], uint8_t out[TP_PROOF_BYTES]);

/* 1 when every address hostport resolves to (for listening) is a loopback one, 0 when one is
 * not, -1 with err when it cannot be resolved. */
int tp_address_is_loopback(const char *hostport, glm_error *err);

#endif
