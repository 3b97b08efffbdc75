/* hmac_sha256.h: HMAC-SHA256 (RFC 2104) over glmchat's one SHA-256 (base/sha256.c), for
 * the two ranks' shared-key handshake, so the engine links no crypto library. */
#ifndef GLMCHAT_TP_HMAC_SHA256_H
#define GLMCHAT_TP_HMAC_SHA256_H

#include <stddef.h>
#include <stdint.h>

#include "base/sha256.h"

#define TP_SHA256_BYTES 32u
#define TP_SHA256_BLOCK 64u

/* HMAC over several pieces: init with the key, update with each piece, final. */
typedef struct tp_hmac_sha256 {
    sha256_ctx inner;
    uint8_t outer_pad[TP_SHA256_BLOCK]; /* the key XOR 0x5c, for final */
} tp_hmac_sha256;

void tp_hmac_sha256_init(tp_hmac_sha256 *h, const void *key, size_t key_len);
void tp_hmac_sha256_update(tp_hmac_sha256 *h, const void *data, size_t len);
void tp_hmac_sha256_final(tp_hmac_sha256 *h, uint8_t out[TP_SHA256_BYTES]);

/* One-shot HMAC-SHA256 of data under key. */
void tp_hmac_sha256_once(const void *key, size_t key_len, const void *data, size_t len,
                         uint8_t out[TP_SHA256_BYTES]);

/* 1 when a and b (n bytes each) are equal; its time does not depend on where they differ. */
int tp_equal_secret(const uint8_t *a, const uint8_t *b, size_t n);

#endif
