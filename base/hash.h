/* hash.h: the one non-cryptographic byte hash, 64-bit FNV-1a, for identities and checksums that
 * must agree across files, ranks and runs (kept-state files, model identities, config prints). */
#ifndef GLMCHAT_BASE_HASH_H
#define GLMCHAT_BASE_HASH_H

#include <stddef.h>
#include <stdint.h>

/* FNV-1a's 64-bit offset basis (the hash of no bytes) and prime. */
#define FNV1A64_SEED 0xcbf29ce484222325ull
#define FNV1A64_PRIME 0x100000001b3ull

/* FNV-1a over data[0..n), continuing from h (start from FNV1A64_SEED): hashing a then b in two
 * calls gives the hash of their concatenation. */
static inline uint64_t fnv1a64(uint64_t h, const void *data, size_t n)
{
    const unsigned char *p = data;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= FNV1A64_PRIME;
    }
    return h;
}

#endif
