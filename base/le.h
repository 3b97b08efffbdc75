/* le.h: little-endian reads and writes for glmchat's byte formats (the ranks' wire messages, the
 * kept-state file header, safetensors' header length), so every field has one byte order whatever
 * the machine, and a bounded reader that latches a failure instead of reading past the end. */
#ifndef GLMCHAT_BASE_LE_H
#define GLMCHAT_BASE_LE_H

#include <stddef.h>
#include <stdint.h>

static inline void le_put_u16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

static inline void le_put_u32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static inline void le_put_u64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static inline uint16_t le_get_u16(const uint8_t *p)
{
    return (uint16_t)(p[0] | (p[1] << 8));
}

static inline uint32_t le_get_u32(const uint8_t *p)
{
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

static inline uint64_t le_get_u64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

/* A bounded reader: every read checks that the bytes are there and latches a failure, so a
 * decoder can read a whole message and test `ok` once at the end (a failed read gives 0). */
typedef struct le_reader {
    const uint8_t *p;
    size_t len;
    size_t pos;
    int ok;
} le_reader;

/* The next n bytes, or NULL (and ok cleared) when fewer are left. */
static inline const uint8_t *le_take(le_reader *r, size_t n)
{
    if (!r->ok || n > r->len - r->pos) {
        r->ok = 0;
        return NULL;
    }
    const uint8_t *at = r->p + r->pos;
    r->pos += n;
    return at;
}

static inline uint8_t le_read_u8(le_reader *r)
{
    const uint8_t *p = le_take(r, 1);
    return p ? p[0] : 0;
}

static inline uint16_t le_read_u16(le_reader *r)
{
    const uint8_t *p = le_take(r, 2);
    return p ? le_get_u16(p) : 0;
}

static inline uint32_t le_read_u32(le_reader *r)
{
    const uint8_t *p = le_take(r, 4);
    return p ? le_get_u32(p) : 0;
}

static inline uint64_t le_read_u64(le_reader *r)
{
    const uint8_t *p = le_take(r, 8);
    return p ? le_get_u64(p) : 0;
}

#endif
