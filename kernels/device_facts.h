/* device_facts.h: the bookkeeping behind the kernels' per-device launch facts (a kernel's raised
 * shared-memory limit, SM counts, resident blocks), pure C so that CI checks it without a GPU. */
#pragma once

#include <sched.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A function's attributes, its occupancy and the SM count belong to a device, and ranks of one
 * process may run on different devices (each thread its own current device), so every fact is
 * kept a device. The tables hold devices 0 to KERN_MAX_DEVICES - 1; a device past them is
 * refused (launch.cuh names it), never given another device's entry. */
#define KERN_MAX_DEVICES 64

static inline int kern_device_in_table(int dev)
{
    return dev >= 0 && dev < KERN_MAX_DEVICES;
}

/* ---- one int a device (the SM count): 0 while unknown ---- */

typedef struct kern_device_ints {
    int value[KERN_MAX_DEVICES];
} kern_device_ints;

/* dev's value, 0 while unknown or where dev is past the table. */
static inline int kern_device_int_get(const kern_device_ints *t, int dev)
{
    if (!kern_device_in_table(dev))
        return 0;
    return __atomic_load_n(&t->value[dev], __ATOMIC_ACQUIRE);
}

/* Keeps v for dev: 0, or -1 where dev is past the table (nothing kept). */
static inline int kern_device_int_put(kern_device_ints *t, int dev, int v)
{
    if (!kern_device_in_table(dev))
        return -1;
    __atomic_store_n(&t->value[dev], v, __ATOMIC_RELEASE);
    return 0;
}

/* ---- a kernel's dynamic shared memory limit, raised once a device ---- */

/* A cell's state while one thread raises that device's limit. */
#define KERN_SMEM_RAISING (-1)

/* One kernel instantiation's limit a device: the bytes it was raised to (0: never). */
typedef struct kern_smem_raised {
    int bytes[KERN_MAX_DEVICES];
} kern_smem_raised;

/* Sets the kernel's limit on the current device to bytes: 0, or the error code (nonzero). */
typedef int (*kern_smem_set_fn)(void *ctx, int bytes);

/* Makes dev's limit at least bytes: calls set(ctx, bytes) only where the limit there is lower (so
 * once a device for a kernel of one size), one thread a device at a time while the others wait,
 * so that the limit only grows and a thread told it is there can launch at once. 0 once the
 * limit is there; set's code where it fails (the device keeps its earlier limit, and the next
 * call tries again); -1 where dev is past the table or bytes < 0 (set not called). */
static inline int kern_smem_raise_once(kern_smem_raised *r, int dev, int bytes,
                                       kern_smem_set_fn set, void *ctx)
{
    if (!kern_device_in_table(dev) || bytes < 0)
        return -1;
    int *cell = &r->bytes[dev];
    for (;;) {
        int have = __atomic_load_n(cell, __ATOMIC_ACQUIRE);
        if (have >= bytes)
            return 0;
        if (have == KERN_SMEM_RAISING) {
            sched_yield();
            continue;
        }
        if (!__atomic_compare_exchange_n(cell, &have, KERN_SMEM_RAISING, 0, __ATOMIC_ACQ_REL,
                                         __ATOMIC_ACQUIRE))
            continue;
        int rc = set(ctx, bytes);
        __atomic_store_n(cell, rc ? have : bytes, __ATOMIC_RELEASE);
        return rc;
    }
}

/* ---- resident blocks of a kernel at a block size and shared memory, a device ---- */

/* The sizes a device's table keeps for one kernel: a launch site asks for a few (moe_kernel one a
 * row count up to 16 rows); past them the caller asks the device each time. */
#define KERN_FIT_SIZES 8

/* Entries: bit 63 set, threads in bits 52-62, smem in bits 32-51, blocks in bits 0-31; filled in
 * order, so the first empty entry ends a device's list. */
typedef struct kern_fit_cache {
    uint64_t entry[KERN_MAX_DEVICES][KERN_FIT_SIZES];
} kern_fit_cache;

#define KERN_FIT_MAX_THREADS 2047
#define KERN_FIT_MAX_SMEM ((size_t)(1u << 20) - 1)

/* The key of (threads, smem) in an entry's upper half, or 0 where they do not fit its fields
 * (such a size is never kept). */
static inline uint64_t kern_fit_key(int threads, size_t smem)
{
    if (threads < 0 || threads > KERN_FIT_MAX_THREADS || smem > KERN_FIT_MAX_SMEM)
        return 0;
    return (uint64_t)1 << 63 | (uint64_t)threads << 52 | (uint64_t)smem << 32;
}

/* 1 with *blocks where dev's table has (threads, smem), else 0. */
static inline int kern_fit_lookup(const kern_fit_cache *c, int dev, int threads, size_t smem,
                                  int *blocks)
{
    uint64_t key = kern_fit_key(threads, smem);
    if (!kern_device_in_table(dev) || !key)
        return 0;
    for (int i = 0; i < KERN_FIT_SIZES; i++) {
        uint64_t e = __atomic_load_n(&c->entry[dev][i], __ATOMIC_ACQUIRE);
        if (!e)
            return 0;
        if ((e & ~(uint64_t)0xffffffffu) == key) {
            *blocks = (int)(uint32_t)e;
            return 1;
        }
    }
    return 0;
}

/* Keeps blocks for (threads, smem) on dev: 0 when kept (or already there: a fact of the device is
 * the same whichever thread asked); 1 when not (the table full, or a size past its fields); -1
 * where dev is past the table or blocks < 0. */
static inline int kern_fit_store(kern_fit_cache *c, int dev, int threads, size_t smem, int blocks)
{
    if (!kern_device_in_table(dev) || blocks < 0)
        return -1;
    uint64_t key = kern_fit_key(threads, smem);
    if (!key)
        return 1;
    uint64_t want = key | (uint32_t)blocks;
    for (int i = 0; i < KERN_FIT_SIZES; i++) {
        uint64_t seen = 0;
        if (__atomic_compare_exchange_n(&c->entry[dev][i], &seen, want, 0, __ATOMIC_ACQ_REL,
                                        __ATOMIC_ACQUIRE))
            return 0;
        if ((seen & ~(uint64_t)0xffffffffu) == key)
            return 0;
    }
    return 1;
}

#ifdef __cplusplus
}
#endif
