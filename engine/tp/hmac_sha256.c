/* hmac_sha256.c: SHA-256 and HMAC-SHA256 for the ranks' shared-key handshake, written from
 * FIPS 180-4 and RFC 2104; tests/unit/test_tp_auth.c checks them against RFC 4231's vectors. */
#include <string.h>

#include "tp/hmac_sha256.h"

/* The first 32 bits of the fractional parts of the cube roots of the first 64 primes. */
static const uint32_t round_constants[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

static uint32_t rotr(uint32_t x, int n)
{
    return (x >> n) | (x << (32 - n));
}

static uint32_t load_be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static void store_be32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

/* One 64-byte block into the state (FIPS 180-4, 6.2.2). */
static void compress(uint32_t state[8], const uint8_t block[TP_SHA256_BLOCK])
{
    uint32_t w[64];
    for (int t = 0; t < 16; t++)
        w[t] = load_be32(block + 4 * t);
    for (int t = 16; t < 64; t++) {
        uint32_t s0 = rotr(w[t - 15], 7) ^ rotr(w[t - 15], 18) ^ (w[t - 15] >> 3);
        uint32_t s1 = rotr(w[t - 2], 17) ^ rotr(w[t - 2], 19) ^ (w[t - 2] >> 10);
        w[t] = w[t - 16] + s0 + w[t - 7] + s1;
    }
    uint32_t a = state[0], b = state[1], c = state[2], d = state[3];
    uint32_t e = state[4], f = state[5], g = state[6], h = state[7];
    for (int t = 0; t < 64; t++) {
        uint32_t sum1 = rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25);
        uint32_t choose = (e & f) ^ (~e & g);
        uint32_t t1 = h + sum1 + choose + round_constants[t] + w[t];
        uint32_t sum0 = rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22);
        uint32_t majority = (a & b) ^ (a & c) ^ (b & c);
        uint32_t t2 = sum0 + majority;
        h = g;
        g = f;
        f = e;
        e = d + t1;
        d = c;
        c = b;
        b = a;
        a = t1 + t2;
    }
    state[0] += a;
    state[1] += b;
    state[2] += c;
    state[3] += d;
    state[4] += e;
    state[5] += f;
    state[6] += g;
    state[7] += h;
}

void tp_sha256_init(tp_sha256 *s)
{
    /* The first 32 bits of the fractional parts of the square roots of the first 8 primes. */
    static const uint32_t initial[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                        0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
    memcpy(s->state, initial, sizeof initial);
    s->total = 0;
    s->fill = 0;
}

void tp_sha256_update(tp_sha256 *s, const void *data, size_t len)
{
    const uint8_t *p = data;
    s->total += len;
    while (len > 0) {
        size_t take = TP_SHA256_BLOCK - s->fill;
        if (take > len)
            take = len;
        memcpy(s->block + s->fill, p, take);
        s->fill += take;
        p += take;
        len -= take;
        if (s->fill == TP_SHA256_BLOCK) {
            compress(s->state, s->block);
            s->fill = 0;
        }
    }
}

void tp_sha256_final(tp_sha256 *s, uint8_t out[TP_SHA256_BYTES])
{
    uint64_t bits = s->total * 8;
    /* Padding: 0x80, zeros up to 56 bytes into a block, then the length in bits, big-endian. */
    uint8_t pad[TP_SHA256_BLOCK + 8] = {0x80};
    size_t pad_len = s->fill < 56 ? 56 - s->fill : TP_SHA256_BLOCK + 56 - s->fill;
    for (int i = 0; i < 8; i++)
        pad[pad_len + (size_t)i] = (uint8_t)(bits >> (56 - 8 * i));
    uint64_t total = s->total;
    tp_sha256_update(s, pad, pad_len + 8);
    s->total = total;
    for (int i = 0; i < 8; i++)
        store_be32(out + 4 * i, s->state[i]);
    memset(s, 0, sizeof *s);
}

void tp_hmac_sha256_init(tp_hmac_sha256 *h, const void *key, size_t key_len)
{
    /* A key longer than a block is replaced by its hash (RFC 2104, section 2). */
    uint8_t block_key[TP_SHA256_BLOCK] = {0};
    if (key_len > TP_SHA256_BLOCK) {
        tp_sha256 s;
        tp_sha256_init(&s);
        tp_sha256_update(&s, key, key_len);
        tp_sha256_final(&s, block_key);
    } else if (key_len > 0) {
        memcpy(block_key, key, key_len);
    }
    uint8_t inner_pad[TP_SHA256_BLOCK];
    for (size_t i = 0; i < TP_SHA256_BLOCK; i++) {
        inner_pad[i] = block_key[i] ^ 0x36;
        h->outer_pad[i] = block_key[i] ^ 0x5c;
    }
    tp_sha256_init(&h->inner);
    tp_sha256_update(&h->inner, inner_pad, sizeof inner_pad);
    memset(block_key, 0, sizeof block_key);
    memset(inner_pad, 0, sizeof inner_pad);
}

void tp_hmac_sha256_update(tp_hmac_sha256 *h, const void *data, size_t len)
{
    tp_sha256_update(&h->inner, data, len);
}

void tp_hmac_sha256_final(tp_hmac_sha256 *h, uint8_t out[TP_SHA256_BYTES])
{
    uint8_t inner_hash[TP_SHA256_BYTES];
    tp_sha256_final(&h->inner, inner_hash);
    tp_sha256 outer;
    tp_sha256_init(&outer);
    tp_sha256_update(&outer, h->outer_pad, sizeof h->outer_pad);
    tp_sha256_update(&outer, inner_hash, sizeof inner_hash);
    tp_sha256_final(&outer, out);
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
