/* test_device_facts.c: Check suite for the kernels' per-device bookkeeping (kernels/device_facts.h):
 * limits raised once a device and never lowered, from racing threads; device indices past the tables. */
#include <check.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/device_facts.h"
#include "tests/common/check_main.h"

/* A stand-in for cudaFuncSetAttribute on a kernel: the limit each device has, the calls made, and
 * a refusal above `optin` (a device's opt-in limit) with an error code. */
typedef struct fake_kernel {
    int limit[KERN_MAX_DEVICES];
    int calls[KERN_MAX_DEVICES];
    int optin;
    int dev;         /* the calling thread's device where one thread calls */
    int lowered;     /* a call that set a lower limit than the device had */
    int slow;        /* 1: each call takes a while, so that racing threads meet inside it */
} fake_kernel;

#define REFUSED 17 /* what cudaFuncSetAttribute returns for too much (any nonzero code) */

/* An empty table and a kernel whose device allows optin bytes a block. */
static void fresh(kern_smem_raised *r, fake_kernel *k, int optin)
{
    memset(r, 0, sizeof *r);
    memset(k, 0, sizeof *k);
    k->optin = optin;
}

static int set_on(fake_kernel *k, int dev, int bytes)
{
    if (k->slow)
        usleep(200);
    if (bytes > k->optin)
        return REFUSED;
    __atomic_fetch_add(&k->calls[dev], 1, __ATOMIC_RELAXED);
    if (bytes < __atomic_load_n(&k->limit[dev], __ATOMIC_ACQUIRE))
        __atomic_store_n(&k->lowered, 1, __ATOMIC_RELAXED);
    __atomic_store_n(&k->limit[dev], bytes, __ATOMIC_RELEASE);
    return 0;
}

static int set_one(void *ctx, int bytes)
{
    fake_kernel *k = ctx;
    return set_on(k, k->dev, bytes);
}

START_TEST(device_table_bounds)
{
    ck_assert(kern_device_in_table(0));
    ck_assert(kern_device_in_table(KERN_MAX_DEVICES - 1));
    ck_assert(!kern_device_in_table(KERN_MAX_DEVICES));
    ck_assert(!kern_device_in_table(-1));
}
END_TEST

/* Two devices of one kernel: the second is raised too (a process-wide flag would skip it), and
 * each only once for one size. */
START_TEST(raised_once_a_device)
{
    static kern_smem_raised r;
    static fake_kernel k;
    fresh(&r, &k, 227 * 1024);
    for (int dev = 0; dev < 2; dev++) {
        k.dev = dev;
        for (int i = 0; i < 3; i++)
            ck_assert_int_eq(kern_smem_raise_once(&r, dev, 100000, set_one, &k), 0);
        ck_assert_int_eq(k.calls[dev], 1);
        ck_assert_int_eq(k.limit[dev], 100000);
    }
    /* the last device of the table has its own entry too */
    k.dev = KERN_MAX_DEVICES - 1;
    ck_assert_int_eq(kern_smem_raise_once(&r, k.dev, 100000, set_one, &k), 0);
    ck_assert_int_eq(k.calls[k.dev], 1);
    ck_assert_int_eq(k.calls[0] + k.calls[1], 2);
}
END_TEST

/* A limit only grows: a smaller size after a bigger one finds it there (no call); a bigger one
 * raises it again. */
START_TEST(raised_limit_only_grows)
{
    static kern_smem_raised r;
    static fake_kernel k;
    fresh(&r, &k, 227 * 1024);
    ck_assert_int_eq(kern_smem_raise_once(&r, 0, 80000, set_one, &k), 0);
    ck_assert_int_eq(kern_smem_raise_once(&r, 0, 50000, set_one, &k), 0);
    ck_assert_int_eq(k.calls[0], 1);
    ck_assert_int_eq(k.limit[0], 80000);
    ck_assert_int_eq(kern_smem_raise_once(&r, 0, 120000, set_one, &k), 0);
    ck_assert_int_eq(k.calls[0], 2);
    ck_assert_int_eq(k.limit[0], 120000);
    ck_assert_int_eq(kern_smem_raise_once(&r, 0, 0, set_one, &k), 0);
    ck_assert_int_eq(k.calls[0], 2);
    ck_assert(!k.lowered);
}
END_TEST

/* A refused raise returns the device's code and keeps the earlier limit: smaller sizes still
 * launch, and the refused size is asked again (refused again) rather than taken as raised. */
START_TEST(refused_raise_returns_its_error)
{
    static kern_smem_raised r;
    static fake_kernel k;
    fresh(&r, &k, 99 * 1024);
    ck_assert_int_eq(kern_smem_raise_once(&r, 0, 60000, set_one, &k), 0);
    ck_assert_int_eq(kern_smem_raise_once(&r, 0, 150000, set_one, &k), REFUSED);
    ck_assert_int_eq(kern_smem_raise_once(&r, 0, 150000, set_one, &k), REFUSED);
    ck_assert_int_eq(r.bytes[0], 60000);
    ck_assert_int_eq(kern_smem_raise_once(&r, 0, 60000, set_one, &k), 0);
    ck_assert_int_eq(k.calls[0], 1);
    ck_assert_int_eq(k.limit[0], 60000);
}
END_TEST

/* A device past the table, or a negative size, is refused without a call. */
START_TEST(raise_refuses_a_device_past_the_table)
{
    static kern_smem_raised r;
    static fake_kernel k;
    fresh(&r, &k, 227 * 1024);
    k.dev = 0;
    ck_assert_int_eq(kern_smem_raise_once(&r, KERN_MAX_DEVICES, 100000, set_one, &k), -1);
    ck_assert_int_eq(kern_smem_raise_once(&r, -1, 100000, set_one, &k), -1);
    ck_assert_int_eq(kern_smem_raise_once(&r, 0, -5, set_one, &k), -1);
    ck_assert_int_eq(k.calls[0], 0);
    ck_assert_int_eq(r.bytes[0], 0);
}
END_TEST

/* ---- racing threads: ranks of one process, two to a device ---- */

#define RACERS 8
#define RACE_DEVICES 4
#define RACE_ROUNDS 300

typedef struct racer {
    kern_smem_raised *r;
    fake_kernel *k;
    pthread_barrier_t *start; /* every thread's first call at once */
    int dev;
    int seed;
    int short_limits; /* a launch that found a lower limit than it asked for */
} racer;

typedef struct racer_call {
    fake_kernel *k;
    int dev;
} racer_call;

static int set_racer(void *ctx, int bytes)
{
    racer_call *c = ctx;
    return set_on(c->k, c->dev, bytes);
}

static void *race(void *arg)
{
    racer *me = arg;
    static const int sizes[] = {30000, 70000, 110000, 150000};
    racer_call call = {me->k, me->dev};
    unsigned s = (unsigned)me->seed;
    pthread_barrier_wait(me->start);
    for (int i = 0; i < RACE_ROUNDS; i++) {
        s = s * 1103515245u + 12345u;
        int bytes = sizes[(s >> 16) % 4];
        if (kern_smem_raise_once(me->r, me->dev, bytes, set_racer, &call))
            continue;
        /* what a launch right after would meet */
        if (__atomic_load_n(&me->k->limit[me->dev], __ATOMIC_ACQUIRE) < bytes)
            me->short_limits++;
    }
    return NULL;
}

/* Threads on four devices raise one kernel's limit at random sizes at once: each returns only
 * when its device's limit covers its size, no call ever lowers a limit, and a device sees at most
 * one call a size (four). */
START_TEST(racing_threads_raise_each_device_once_a_size)
{
    static kern_smem_raised r;
    static fake_kernel k;
    fresh(&r, &k, 227 * 1024);
    k.slow = 1;
    racer rs[RACERS];
    pthread_t th[RACERS];
    pthread_barrier_t start;
    ck_assert_int_eq(pthread_barrier_init(&start, NULL, RACERS), 0);
    for (int i = 0; i < RACERS; i++) {
        rs[i] = (racer){&r, &k, &start, i % RACE_DEVICES, 7919 * (i + 1), 0};
        ck_assert_int_eq(pthread_create(&th[i], NULL, race, &rs[i]), 0);
    }
    for (int i = 0; i < RACERS; i++)
        ck_assert_int_eq(pthread_join(th[i], NULL), 0);
    pthread_barrier_destroy(&start);
    for (int i = 0; i < RACERS; i++)
        ck_assert_msg(rs[i].short_limits == 0, "thread %d launched %d times below its size", i,
                      rs[i].short_limits);
    ck_assert(!k.lowered);
    for (int d = 0; d < RACE_DEVICES; d++) {
        ck_assert_msg(k.calls[d] >= 1 && k.calls[d] <= 4, "device %d: %d calls", d, k.calls[d]);
        ck_assert_int_eq(k.limit[d], r.bytes[d]);
    }
    for (int d = RACE_DEVICES; d < KERN_MAX_DEVICES; d++)
        ck_assert_int_eq(k.calls[d], 0);
}
END_TEST

/* ---- SM counts and resident blocks ---- */

START_TEST(device_ints_are_a_device)
{
    static kern_device_ints t;
    memset(&t, 0, sizeof t);
    ck_assert_int_eq(kern_device_int_get(&t, 1), 0);
    ck_assert_int_eq(kern_device_int_put(&t, 0, 132), 0);
    ck_assert_int_eq(kern_device_int_put(&t, 1, 48), 0);
    ck_assert_int_eq(kern_device_int_get(&t, 0), 132);
    ck_assert_int_eq(kern_device_int_get(&t, 1), 48);
    ck_assert_int_eq(kern_device_int_put(&t, KERN_MAX_DEVICES, 7), -1);
    ck_assert_int_eq(kern_device_int_get(&t, KERN_MAX_DEVICES), 0);
    ck_assert_int_eq(kern_device_int_get(&t, -1), 0);
}
END_TEST

/* Resident blocks are kept a device, a block size and a shared memory size: another device or
 * size misses rather than finding the first one's count. */
START_TEST(fits_are_a_device_and_size)
{
    static kern_fit_cache c;
    memset(&c, 0, sizeof c);
    int blocks = -1;
    ck_assert(!kern_fit_lookup(&c, 0, 256, 66560, &blocks));
    ck_assert_int_eq(kern_fit_store(&c, 0, 256, 66560, 264), 0);
    ck_assert(kern_fit_lookup(&c, 0, 256, 66560, &blocks));
    ck_assert_int_eq(blocks, 264);
    ck_assert(!kern_fit_lookup(&c, 1, 256, 66560, &blocks));
    ck_assert(!kern_fit_lookup(&c, 0, 256, 33280, &blocks));
    ck_assert(!kern_fit_lookup(&c, 0, 128, 66560, &blocks));
    ck_assert_int_eq(kern_fit_store(&c, 1, 256, 66560, 48), 0);
    ck_assert(kern_fit_lookup(&c, 1, 256, 66560, &blocks));
    ck_assert_int_eq(blocks, 48);
    ck_assert(kern_fit_lookup(&c, 0, 256, 66560, &blocks));
    ck_assert_int_eq(blocks, 264);
    /* a second store of a kept size takes no second entry */
    ck_assert_int_eq(kern_fit_store(&c, 0, 256, 66560, 264), 0);
    ck_assert_int_eq(c.entry[0][1], 0);
    /* zero blocks is a fact too (kept, found) */
    ck_assert_int_eq(kern_fit_store(&c, 0, 256, 0, 0), 0);
    ck_assert(kern_fit_lookup(&c, 0, 256, 0, &blocks));
    ck_assert_int_eq(blocks, 0);
}
END_TEST

/* Past KERN_FIT_SIZES sizes a device keeps no more (the caller asks the device each time); sizes
 * past the entry's fields and devices past the table are never kept. */
START_TEST(fits_full_or_out_of_range_are_not_kept)
{
    static kern_fit_cache c;
    memset(&c, 0, sizeof c);
    int blocks = -1;
    for (int i = 0; i < KERN_FIT_SIZES; i++)
        ck_assert_int_eq(kern_fit_store(&c, 2, 256, (size_t)(i + 1) * 1024, i + 1), 0);
    ck_assert_int_eq(kern_fit_store(&c, 2, 256, 99 * 1024, 3), 1);
    ck_assert(!kern_fit_lookup(&c, 2, 256, 99 * 1024, &blocks));
    for (int i = 0; i < KERN_FIT_SIZES; i++) {
        ck_assert(kern_fit_lookup(&c, 2, 256, (size_t)(i + 1) * 1024, &blocks));
        ck_assert_int_eq(blocks, i + 1);
    }
    ck_assert_int_eq(kern_fit_store(&c, 0, 256, KERN_FIT_MAX_SMEM + 1, 1), 1);
    ck_assert(!kern_fit_lookup(&c, 0, 256, KERN_FIT_MAX_SMEM + 1, &blocks));
    ck_assert_int_eq(kern_fit_store(&c, 0, KERN_FIT_MAX_THREADS + 1, 1024, 1), 1);
    ck_assert_int_eq(kern_fit_store(&c, 0, KERN_FIT_MAX_THREADS, KERN_FIT_MAX_SMEM, 5), 0);
    ck_assert(kern_fit_lookup(&c, 0, KERN_FIT_MAX_THREADS, KERN_FIT_MAX_SMEM, &blocks));
    ck_assert_int_eq(blocks, 5);
    ck_assert_int_eq(kern_fit_store(&c, KERN_MAX_DEVICES, 256, 1024, 1), -1);
    ck_assert(!kern_fit_lookup(&c, KERN_MAX_DEVICES, 256, 1024, &blocks));
    ck_assert_int_eq(kern_fit_store(&c, 0, 256, 1024, -1), -1);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("device_facts");
    TCase *tc = tcase_create("facts");
    tcase_add_test(tc, device_table_bounds);
    tcase_add_test(tc, raised_once_a_device);
    tcase_add_test(tc, raised_limit_only_grows);
    tcase_add_test(tc, refused_raise_returns_its_error);
    tcase_add_test(tc, raise_refuses_a_device_past_the_table);
    tcase_add_test(tc, racing_threads_raise_each_device_once_a_size);
    tcase_add_test(tc, device_ints_are_a_device);
    tcase_add_test(tc, fits_are_a_device_and_size);
    tcase_add_test(tc, fits_full_or_out_of_range_are_not_kept);
    suite_add_tcase(s, tc);
    return test_run_suite(s);
}
