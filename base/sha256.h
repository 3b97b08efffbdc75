/* sha256.h: SHA-256 (FIPS 180-4): streaming, and one call to lowercase hex. Used by the reasoning
 * memory's keys, the chat template revision check and the ranks' HMAC. */
#ifndef GLMCHAT_BASE_SHA256_H
#define GLMCHAT_BASE_SHA256_H

#include <stddef.h>
#include <stdint.h>

typedef struct sha256_ctx {
    uint32_t h[8];
    uint64_t bytes;
    unsigned char block[64];
    size_t fill;
} sha256_ctx;

void sha256_init(sha256_ctx *c);
void sha256_update(sha256_ctx *c, const void *data, size_t n);
void sha256_final(sha256_ctx *c, unsigned char out[32]);
/* The digest of data[0..n) as 64 lowercase hex digits and a NUL. */
void sha256_hex(const void *data, size_t n, char out[65]);

#endif
