/* hmac_sha256.c: HMAC-SHA256 for the ranks' shared-key handshake, written from RFC 2104 over
 * base/sha256.c; tests/unit/test_tp_auth.c checks both against FIPS and RFC 4231 vectors. */
#include <string.h>

#include "tp/hmac_sha256.h"

void tp_hmac_sha256_init(tp_hmac_sha256 *h, const void *key, size_t key_len)
{
    /* A key longer than a block is replaced by its hash (RFC 2104, section 2). */
    uint8_t block_key[TP_SHA256_BLOCK] = {0};
    if (key_len > TP_SHA256_BLOCK) {
        sha256_ctx s;
        sha256_init(&s);
        sha256_update(&s, key, key_len);
        sha256_final(&s, block_key);
        memset(&s, 0, sizeof s); /* sha256_final leaves its state: this one held the key */
    } else if (key_len > 0) {
        memcpy(block_key, key, key_len);
    }
    uint8_t inner_pad[TP_SHA256_BLOCK];
    for (size_t i = 0; i < TP_SHA256_BLOCK; i++) {
        inner_pad[i] = block_key[i] ^ 0x36;
        h->outer_pad[i] = block_key[i] ^ 0x5c;
    }
    sha256_init(&h->inner);
    sha256_update(&h->inner, inner_pad, sizeof inner_pad);
    memset(block_key, 0, sizeof block_key);
    memset(inner_pad, 0, sizeof inner_pad);
}

void tp_hmac_sha256_update(tp_hmac_sha256 *h, const void *data, size_t len)
{
    sha256_update(&h->inner, data, len);
}

void tp_hmac_sha256_final(tp_hmac_sha256 *h, uint8_t out[TP_SHA256_BYTES])
{
    uint8_t inner_hash[TP_SHA256_BYTES];
    sha256_final(&h->inner, inner_hash);
    sha256_ctx outer;
    sha256_init(&outer);
    sha256_update(&outer, h->outer_pad, sizeof h->outer_pad);
    sha256_update(&outer, inner_hash, sizeof inner_hash);
    sha256_final(&outer, out);
    memset(&outer, 0, sizeof outer);
    memset(h, 0, sizeof *h);
    memset(inner_hash, 0, sizeof inner_hash);
}

void tp_hmac_sha256_once(const void *key, size_t key_len, const void *data, size_t len,
                         uint8_t out[TP_SHA256_BYTES])
{
    tp_hmac_sha256 h;
    tp_hmac_sha256_init(&h, key, key_len);
    tp_hmac_sha256_update(&h, data, len);
    tp_hmac_sha256_final(&h, out);
}

int tp_equal_secret(const uint8_t *a, const uint8_t *b, size_t n)
{
    volatile uint8_t diff = 0;
    for (size_t i = 0; i < n; i++)
        diff |= a[i] ^ b[i];
    return diff == 0;
}
