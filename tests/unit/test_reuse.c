/* test_reuse.c: Check suite for prompt reuse: CPU state snapshots round-trip exactly, the kept
 * states' cache (longest prefix, LRU budget, disk tier with refusals), and replies after switching
 * between conversations that equal replies after a full prefill. */
#include <check.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend.h"
#include "cpu/forward.h"
#include "cpu/snapshot.h"
#include "model/mkmodel.h"
#include "prefix_cache.h"
#include "session.h"
#include "test_engine_util.h"
#include "tests/common/cancel_later.h"
#include "tests/common/check_main.h"
#include "tests/common/files.h"

static char *model_dir;

static void make_model(void)
{
    glm_error err = {0};
    char *tmp = tu_tmpdir();
    static char dir[4096];
    snprintf(dir, sizeof dir, "%s/model", tmp);
    free(tmp);
    glm_mkmodel_params p = {.out_dir = dir, .preset = "tiny", .seed = 11};
    ck_assert_msg(glm_mkmodel(&p, &err) == GLM_OK, "%s", err.message);
    model_dir = dir;
}

static void remove_model(void)
{
    char *slash = strrchr(model_dir, '/');
    *slash = '\0';
    tu_rmtree(model_dir);
}

static glm_engine *open_engine(int64_t cache_bytes, const char *cache_dir)
{
    glm_error err = {0};
    glm_engine_params p = {.model_dir = model_dir, .backend = GLM_BACKEND_CPU, .n_threads = 2,
                           .prompt_cache_bytes = cache_bytes, .prompt_cache_dir = cache_dir};
    glm_engine *e = glm_engine_open(&p, &err);
    ck_assert_msg(e != NULL, "%s", err.message);
    return e;
}

static int32_t *some_tokens_below(int n, uint64_t seed, int vocab)
{
    int32_t *t = malloc((size_t)n * sizeof *t);
    for (int i = 0; i < n; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        t[i] = (int32_t)((seed >> 33) % (uint64_t)(vocab - 32)) + 32;
    }
    return t;
}

static int32_t *some_tokens(int n, uint64_t seed)
{
    return some_tokens_below(n, seed, 4032);
}

/* ---- snapshots -------------------------------------------------------------------------- */

START_TEST(snapshot_round_trip_is_exact)
{
    glm_error err = {0};
    const char *dir = tu_fixture(_i == 0 ? "tiny-A" : "dsa-first-hc3");
    glm_model *m = glm_model_open(dir, &err);
    ck_assert_msg(m != NULL, "%s", err.message);
    engine_backend be;
    ck_assert_int_eq(backend_open_cpu(m, 2, &be, &err), GLM_OK);
    void *a = be.ops->state_new(be.impl, &err), *b = be.ops->state_new(be.impl, &err);
    int V = m->cfg.vocab_size, P = 37 + _i * 30, K = 9;
    int32_t *ids = some_tokens_below(P + K, 5, V);
    ck_assert_int_eq(be.ops->prefill(be.impl, a, ids, P, NULL, 0, &err), GLM_OK);
    size_t n = be.ops->snapshot_size(a);
    unsigned char *snap = malloc(n), *again = malloc(n);
    ck_assert_int_eq(be.ops->snapshot_save(a, snap, n, &err), GLM_OK);
    /* b holds something else first: loading replaces it */
    ck_assert_int_eq(be.ops->prefill(be.impl, b, ids + 3, 20, NULL, 0, &err), GLM_OK);
    ck_assert_msg(be.ops->snapshot_load(b, snap, n, &err) == GLM_OK, "%s", err.message);
    ck_assert_int_eq(be.ops->state_length(b), P);
    ck_assert_uint_eq(be.ops->snapshot_size(b), n);
    ck_assert_int_eq(be.ops->snapshot_save(b, again, n, &err), GLM_OK);
    ck_assert_int_eq(memcmp(snap, again, n), 0);
    float *la = malloc((size_t)K * V * sizeof *la), *lb = malloc((size_t)K * V * sizeof *lb);
    ck_assert_int_eq(be.ops->prefill(be.impl, a, ids + P, K, la, 1, &err), GLM_OK);
    ck_assert_int_eq(be.ops->prefill(be.impl, b, ids + P, K, lb, 1, &err), GLM_OK);
    ck_assert_int_eq(memcmp(la, lb, (size_t)K * V * sizeof *la), 0);
    /* a loaded state is marked: it can come back to the loaded length */
    ck_assert_int_eq(be.ops->state_truncate(b, P, &err), GLM_OK);
    ck_assert_int_eq(be.ops->prefill(be.impl, b, ids + P, K, lb, 1, &err), GLM_OK);
    ck_assert_int_eq(memcmp(la, lb, (size_t)K * V * sizeof *la), 0);
    free(la);
    free(lb);
    free(snap);
    free(again);
    free(ids);
    be.ops->state_free(a);
    be.ops->state_free(b);
    backend_close(&be);
    glm_model_close(m);
}
END_TEST

START_TEST(snapshot_bad_input_is_refused)
{
    glm_error err = {0};
    glm_model *m = glm_model_open(tu_fixture("tiny-A"), &err);
    glm_model *other = glm_model_open(tu_fixture("groups-kpool2"), &err);
    ck_assert(m && other);
    engine_backend be, be2;
    ck_assert_int_eq(backend_open_cpu(m, 1, &be, &err), GLM_OK);
    ck_assert_int_eq(backend_open_cpu(other, 1, &be2, &err), GLM_OK);
    void *a = be.ops->state_new(be.impl, &err), *f = be2.ops->state_new(be2.impl, &err);
    int32_t *ids = some_tokens_below(20, 9, m->cfg.vocab_size);
    ck_assert_int_eq(be.ops->prefill(be.impl, a, ids, 20, NULL, 0, &err), GLM_OK);
    size_t n = be.ops->snapshot_size(a);
    unsigned char *snap = malloc(n);
    ck_assert_int_eq(be.ops->snapshot_save(a, snap, n, &err), GLM_OK);
    ck_assert_int_eq(be.ops->snapshot_save(a, snap, n - 1, &err), GLM_ERR_ARG);
    ck_assert_int_eq(be.ops->snapshot_save(a, snap, n, &err), GLM_OK);
    /* truncated, padded, a bad signature, another model: refused, the state unchanged */
    ck_assert_int_eq(be.ops->snapshot_load(a, snap, n - 4, &err), GLM_ERR_FORMAT);
    ck_assert_ptr_nonnull(strstr(err.message, "bytes"));
    ck_assert_int_eq(be.ops->snapshot_load(a, snap, 7, &err), GLM_ERR_FORMAT);
    snap[0] ^= 1;
    ck_assert_int_eq(be.ops->snapshot_load(a, snap, n, &err), GLM_ERR_FORMAT);
    snap[0] ^= 1;
    ck_assert_int_eq(be2.ops->snapshot_load(f, snap, n, &err), GLM_ERR_FORMAT);
    ck_assert_ptr_nonnull(strstr(err.message, "another model"));
    ck_assert_int_eq(be.ops->state_length(a), 20);
    ck_assert_int_eq(be2.ops->state_length(f), 0);
    free(snap);
    free(ids);
    be.ops->state_free(a);
    be2.ops->state_free(f);
    backend_close(&be);
    backend_close(&be2);
    glm_model_close(m);
    glm_model_close(other);
}
END_TEST

/* A prompt resumed from a state kept on the grid and prefilled on gives the bits of one pass. */
START_TEST(resume_on_the_grid_equals_full_prefill_bits)
{
    glm_error err = {0};
    static const char *const names[] = {"tiny-A", "dsa-first-hc3", "groups-kpool2"};
    const char *dir = tu_fixture(names[_i]);
    glm_engine_params p = {.model_dir = dir, .backend = GLM_BACKEND_CPU, .n_threads = 2,
                           .prompt_cache_bytes = 64 << 20};
    glm_engine *e = glm_engine_open(&p, &err);
    ck_assert_msg(e != NULL, "%s", err.message);
    int V = engine_model(e)->cfg.vocab_size;
    glm_session *full = glm_session_new(e, &err), *part = glm_session_new(e, &err);
    int n = 150;
    int32_t *ids = some_tokens_below(n, 31 + (uint64_t)_i, V);
    float *want = malloc((size_t)n * V * sizeof *want), *got = malloc((size_t)n * V * sizeof *got);
    ck_assert_int_eq(glm_session_feed(full, ids, n, want, &err), GLM_OK);
    for (int A = GLM_KEEP_ALIGN; A < n; A += 3 * GLM_KEEP_ALIGN) {
        glm_session_reset(part);
        /* the kept state came in two uneven pieces, both ending on the grid */
        ck_assert_int_eq(glm_session_feed(part, ids, GLM_KEEP_ALIGN, NULL, &err), GLM_OK);
        if (A > GLM_KEEP_ALIGN)
            ck_assert_int_eq(glm_session_feed(part, ids + GLM_KEEP_ALIGN, A - GLM_KEEP_ALIGN, NULL,
                                              &err), GLM_OK);
        ck_assert_int_eq(glm_session_keep(part, &err), GLM_OK);
        glm_session *s = glm_session_new(e, &err);
        ck_assert_int_eq(glm_session_restore(s, ids, n, 0, n - 1), A);
        ck_assert_int_eq(glm_session_feed(s, ids + A, n - A, got + (size_t)A * V, &err), GLM_OK);
        ck_assert_msg(memcmp(want + (size_t)A * V, got + (size_t)A * V,
                             (size_t)(n - A) * V * sizeof *got) == 0,
                      "%s: resumed at %d, the logits differ from one pass by up to %g", names[_i], A,
                      (double)tu_max_abs_diff(want + (size_t)A * V, got + (size_t)A * V,
                                              (size_t)(n - A) * V));
        glm_session_free(s);
    }
    free(want);
    free(got);
    free(ids);
    glm_session_free(full);
    glm_session_free(part);
    glm_engine_close(e);
}
END_TEST

/* ---- the cache -------------------------------------------------------------------------- */

static glm_status count_load(void *user, const void *snap, size_t n, glm_error *err)
{
    (void)err;
    *(size_t *)user = n + ((const unsigned char *)snap)[0];
    return GLM_OK;
}

static void *filled(size_t n, unsigned char v)
{
    unsigned char *p = malloc(n);
    memset(p, v, n);
    return p;
}

START_TEST(cache_longest_prefix_and_lru_budget)
{
    glm_error err = {0};
    pc_cache *c = pc_new(250, NULL, 1, &err);
    int32_t *ids = some_tokens(64, 3);
    size_t got = 0;
    ck_assert_int_eq(pc_put(c, ids, 10, filled(100, 1), 100, &err), GLM_OK);
    ck_assert_int_eq(pc_put(c, ids, 20, filled(100, 2), 100, &err), GLM_OK);
    /* the longest prefix within [min, max] */
    ck_assert_int_eq(pc_lookup(c, ids, 64, 0, 63, count_load, &got), 20);
    ck_assert_uint_eq(got, 102);
    ck_assert_int_eq(pc_lookup(c, ids, 64, 0, 15, count_load, &got), 10);
    ck_assert_int_eq(pc_lookup(c, ids, 64, 20, 63, count_load, &got), 0);
    ck_assert_int_eq(pc_lookup(c, ids, 19, 0, 63, count_load, &got), 10);
    int32_t other[20];
    memcpy(other, ids, sizeof other);
    other[5]++;
    ck_assert_int_eq(pc_lookup(c, other, 20, 0, 20, count_load, &got), 0);
    /* 10 was used last: a third state evicts 20, the least recently used */
    ck_assert_int_eq(pc_put(c, ids, 30, filled(100, 3), 100, &err), GLM_OK);
    pc_stats st;
    pc_get_stats(c, &st);
    ck_assert_int_eq(st.evictions, 1);
    ck_assert_int_eq(st.entries, 2);
    ck_assert_uint_le(st.bytes, 250);
    ck_assert(pc_contains(c, ids, 10) && pc_contains(c, ids, 30) && !pc_contains(c, ids, 20));
    /* larger than the whole budget: not kept, nothing evicted */
    ck_assert_int_eq(pc_put(c, ids, 40, filled(300, 4), 300, &err), GLM_OK);
    ck_assert(!pc_contains(c, ids, 40) && pc_contains(c, ids, 10));
    pc_get_stats(c, &st);
    ck_assert_uint_eq(st.bytes, 200); /* what is held, not less */
    ck_assert_int_eq(st.entries, 2);
    pc_free(c);
    free(ids);
}
END_TEST

static int has_note(pc_cache *c, const char *a, const char *b)
{
    for (int i = 0; i < pc_n_notes(c); i++)
        if (strstr(pc_note(c, i), a) && strstr(pc_note(c, i), b))
            return 1;
    return 0;
}

START_TEST(cache_disk_tier_survives_and_refuses)
{
    glm_error err = {0};
    char *dir = tu_tmpdir();
    int32_t *ids = some_tokens(64, 4);
    size_t got = 0;
    pc_cache *c = pc_new(1000, dir, 77, &err);
    ck_assert_ptr_nonnull(c);
    ck_assert_int_eq(pc_put(c, ids, 12, filled(50, 5), 50, &err), GLM_OK);
    ck_assert_int_eq(pc_put(c, ids, 24, filled(60, 6), 60, &err), GLM_OK);
    ck_assert_int_eq(pc_put(c, ids, 36, filled(70, 7), 70, &err), GLM_OK);
    pc_flush(c); /* the writer thread has written them */
    pc_stats st;
    pc_get_stats(c, &st);
    ck_assert_int_eq(st.disk_writes, 3);
    /* larger than the memory budget: kept on disk only, and found there */
    ck_assert_int_eq(pc_put(c, ids, 48, filled(2000, 8), 2000, &err), GLM_OK);
    pc_flush(c);
    pc_get_stats(c, &st);
    ck_assert_int_eq(st.disk_writes, 4);
    ck_assert_uint_le(st.bytes, 1000);
    ck_assert_int_eq(pc_lookup(c, ids, 64, 40, 63, count_load, &got), 48);
    ck_assert_uint_eq(got, 2008);
    pc_free(c);
    char p48[4200];
    snprintf(p48, sizeof p48, "%s/%016llx-48.kept", dir, (unsigned long long)pc_hash_tokens(ids, 48));
    ck_assert_int_eq(unlink(p48), 0);
    /* after a restart: found again, read lazily */
    c = pc_new(1000, dir, 77, &err);
    ck_assert_int_eq(pc_lookup(c, ids, 64, 0, 30, count_load, &got), 24);
    ck_assert_uint_eq(got, 66);
    pc_get_stats(c, &st);
    ck_assert_int_eq(st.disk_loads, 1);
    ck_assert_int_eq(pc_n_notes(c), 0);
    pc_free(c);
    /* another model's files are refused at open, with the file named, and left alone */
    c = pc_new(1000, dir, 78, &err);
    ck_assert_int_eq(pc_lookup(c, ids, 64, 0, 63, count_load, &got), 0);
    ck_assert(has_note(c, dir, "another model"));
    ck_assert(has_note(c, dir, "left in place"));
    pc_get_stats(c, &st);
    ck_assert_int_eq(st.deleted_files, 0);
    pc_free(c);
    /* corrupt one state byte, truncate another file, garble a third's header */
    char p12[4200], p24[4200], p36[4200];
    snprintf(p12, sizeof p12, "%s/%016llx-12.kept", dir, (unsigned long long)pc_hash_tokens(ids, 12));
    snprintf(p24, sizeof p24, "%s/%016llx-24.kept", dir, (unsigned long long)pc_hash_tokens(ids, 24));
    snprintf(p36, sizeof p36, "%s/%016llx-36.kept", dir, (unsigned long long)pc_hash_tokens(ids, 36));
    size_t n;
    char *b = test_read_file(p36, &n);
    b[n - 3] ^= 0x40;
    test_write_file(p36, b, n);
    free(b);
    b = test_read_file(p24, &n);
    test_write_file(p24, b, n - 10);
    free(b);
    b = test_read_file(p12, &n);
    memset(b, 'x', 8);
    test_write_file(p12, b, n);
    free(b);
    c = pc_new(1000, dir, 77, &err);
    ck_assert_ptr_nonnull(c);
    ck_assert(has_note(c, p24, "truncated"));
    ck_assert(has_note(c, p12, "signature"));
    /* damaged files are deleted at once; 36's header is sound, so it is found at its first use */
    ck_assert(access(p24, F_OK) != 0 && access(p12, F_OK) != 0 && access(p36, F_OK) == 0);
    ck_assert_int_eq(pc_lookup(c, ids, 64, 0, 63, count_load, &got), 0); /* 36 fails its checksum */
    ck_assert(has_note(c, p36, "checksum mismatch: the file is corrupted; deleted"));
    ck_assert(access(p36, F_OK) != 0);
    pc_get_stats(c, &st);
    ck_assert_int_eq(st.refused_files, 3);
    ck_assert_int_eq(st.deleted_files, 3);
    ck_assert_int_eq(st.entries, 0);
    ck_assert_uint_eq(st.disk_bytes, 0);
    pc_free(c);
    free(ids);
    tu_rmtree(dir);
    free(dir);
}
END_TEST

/* The bytes of a kept-state file of n tokens and a state of `bytes`. */
static uint64_t file_size(int n, size_t bytes)
{
    return PC_HEADER_BYTES + 4ull * (uint64_t)n + bytes;
}

static int dir_has(const char *dir, const int32_t *ids, int n)
{
    char p[4200];
    snprintf(p, sizeof p, "%s/%016llx-%d.kept", dir, (unsigned long long)pc_hash_tokens(ids, n), n);
    return access(p, F_OK) == 0;
}

static int count_suffix(const char *dir, const char *suffix)
{
    char cmd[4300];
    snprintf(cmd, sizeof cmd, "ls -a '%s' | grep -c -- '%s$'", dir, suffix);
    FILE *f = popen(cmd, "r");
    int n = -1;
    ck_assert(f && fscanf(f, "%d", &n) == 1);
    pclose(f);
    return n;
}

/* The ranks of a split keep their parts in one directory apart: each writes its tag into its
 * files' names and passes over the other's files (and an unsplit cache over both) without a
 * note; each finds its own again. */
static glm_status peer_fails(void *user, const void *snap, size_t n, glm_error *err)
{
    (void)user, (void)snap, (void)n;
    return glm_error_set(err, GLM_ERR_PEER, "the link to the worker failed");
}

static glm_status refuses(void *user, const void *snap, size_t n, glm_error *err)
{
    (void)user, (void)snap, (void)n;
    return glm_error_set(err, GLM_ERR_FORMAT, "not this backend's snapshot");
}

/* A restore the ranks could not agree on (GLM_ERR_PEER: the link) ends the lookup and keeps the
 * state for later; one the backend refuses drops it and the next shorter one is tried. */
START_TEST(cache_keeps_a_state_whose_restore_the_link_failed)
{
    glm_error err = {0};
    int32_t *ids = some_tokens(32, 3);
    size_t got = 0;
    pc_cache *c = pc_new(1000, NULL, 0, &err);
    ck_assert_int_eq(pc_put(c, ids, 8, filled(10, 1), 10, &err), GLM_OK);
    ck_assert_int_eq(pc_put(c, ids, 16, filled(20, 2), 20, &err), GLM_OK);
    ck_assert_int_eq(pc_lookup(c, ids, 32, 0, 31, peer_fails, NULL), 0);
    ck_assert(pc_contains(c, ids, 16) && pc_contains(c, ids, 8));
    ck_assert_int_eq(pc_lookup(c, ids, 32, 0, 31, count_load, &got), 16);
    ck_assert_uint_eq(got, 22);
    ck_assert_int_eq(pc_lookup(c, ids, 32, 0, 31, refuses, NULL), 0);
    ck_assert(!pc_contains(c, ids, 16) && !pc_contains(c, ids, 8));
    pc_free(c);
    free(ids);
}
END_TEST

START_TEST(cache_ranks_share_a_directory_apart)
{
    glm_error err = {0};
    char *dir = tu_tmpdir();
    int32_t *ids = some_tokens(32, 9);
    size_t got = 0;
    pc_cache *r0 = pc_new_tagged(1000, dir, 501, ".rank0of2", &err);
    pc_cache *r1 = pc_new_tagged(1000, dir, 502, ".rank1of2", &err);
    ck_assert_ptr_nonnull(r0);
    ck_assert_ptr_nonnull(r1);
    ck_assert_int_eq(pc_put(r0, ids, 16, filled(40, 1), 40, &err), GLM_OK);
    ck_assert_int_eq(pc_put(r1, ids, 16, filled(30, 2), 30, &err), GLM_OK);
    pc_free(r0);
    pc_free(r1);
    char p0[4200], p1[4200];
    snprintf(p0, sizeof p0, "%s/%016llx-16.rank0of2.kept", dir,
             (unsigned long long)pc_hash_tokens(ids, 16));
    snprintf(p1, sizeof p1, "%s/%016llx-16.rank1of2.kept", dir,
             (unsigned long long)pc_hash_tokens(ids, 16));
    ck_assert_int_eq(access(p0, F_OK), 0);
    ck_assert_int_eq(access(p1, F_OK), 0);
    r0 = pc_new_tagged(1000, dir, 501, ".rank0of2", &err);
    r1 = pc_new_tagged(1000, dir, 502, ".rank1of2", &err);
    pc_cache *one = pc_new(1000, dir, 500, &err);
    ck_assert_int_eq(pc_n_notes(r0) + pc_n_notes(r1) + pc_n_notes(one), 0);
    ck_assert_int_eq(pc_lookup(r0, ids, 32, 0, 31, count_load, &got), 16);
    ck_assert_uint_eq(got, 41); /* its own 40 bytes of 1s (count_load: size + first byte) */
    ck_assert_int_eq(pc_lookup(r1, ids, 32, 0, 31, count_load, &got), 16);
    ck_assert_uint_eq(got, 32);
    ck_assert_int_eq(pc_lookup(one, ids, 32, 0, 31, count_load, &got), 0);
    pc_free(r0);
    pc_free(r1);
    pc_free(one);
    /* a tag of other characters is refused by name */
    ck_assert_ptr_null(pc_new_tagged(1000, dir, 501, "/../x", &err));
    ck_assert_ptr_nonnull(strstr(err.message, "'/../x'"));
    free(ids);
    tu_rmtree(dir);
}
END_TEST

START_TEST(cache_disk_budget_deletes_least_recently_used)
{
    glm_error err = {0};
    char *dir = tu_tmpdir();
    int32_t *ids = some_tokens(64, 9);
    uint64_t s12 = file_size(12, 50), s24 = file_size(24, 60), s36 = file_size(36, 70);
    pc_cache *c = pc_new(1000, dir, 5, &err);
    ck_assert_ptr_nonnull(c);
    pc_set_disk_budget(c, s12 + s36 + 10); /* not room for all three */
    size_t got = 0;
    ck_assert_int_eq(pc_put(c, ids, 12, filled(50, 1), 50, &err), GLM_OK);
    pc_flush(c);
    usleep(30000); /* file times are kept at the kernel's tick: keep the uses apart */
    ck_assert_int_eq(pc_put(c, ids, 24, filled(60, 2), 60, &err), GLM_OK);
    pc_flush(c);
    usleep(30000);
    ck_assert_int_eq(pc_lookup(c, ids, 64, 0, 20, count_load, &got), 12); /* 12 used after 24 */
    pc_stats st;
    pc_get_stats(c, &st);
    ck_assert_uint_eq(st.disk_bytes, s12 + s24);
    usleep(30000);
    ck_assert_int_eq(pc_put(c, ids, 36, filled(70, 3), 70, &err), GLM_OK);
    pc_flush(c);
    pc_get_stats(c, &st);
    ck_assert_int_eq(st.disk_writes, 3);
    ck_assert_int_eq(st.disk_evictions, 1);
    ck_assert_uint_eq(st.disk_bytes, s12 + s36);
    ck_assert(dir_has(dir, ids, 12) && !dir_has(dir, ids, 24) && dir_has(dir, ids, 36));
    ck_assert(pc_contains(c, ids, 24)); /* still in memory, no longer on disk */
    ck_assert_int_eq(count_suffix(dir, ".tmp"), 0);
    pc_free(c);
    /* after a restart the files' times order them: 12 was used before 36 was written */
    c = pc_new(1000, dir, 5, &err);
    pc_get_stats(c, &st);
    ck_assert_int_eq(st.entries, 2);
    ck_assert_uint_eq(st.disk_bytes, s12 + s36);
    pc_set_disk_budget(c, s36);
    ck_assert(!dir_has(dir, ids, 12) && dir_has(dir, ids, 36));
    pc_get_stats(c, &st);
    ck_assert_int_eq(st.entries, 1); /* 12 was on disk only: forgotten */
    ck_assert_uint_eq(st.disk_bytes, s36);
    ck_assert_int_eq(pc_lookup(c, ids, 64, 0, 63, count_load, &got), 36);
    ck_assert_uint_eq(got, 73);
    /* a state whose file alone is over the budget is not written, and says so */
    ck_assert_int_eq(pc_put(c, ids, 48, filled(80, 4), 80, &err), GLM_OK);
    pc_flush(c);
    ck_assert(!dir_has(dir, ids, 48) && dir_has(dir, ids, 36));
    ck_assert(has_note(c, dir, "over the disk budget"));
    ck_assert(pc_contains(c, ids, 48));
    /* budget 0: nothing written, what is there deleted */
    pc_set_disk_budget(c, 0);
    ck_assert_int_eq(pc_put(c, ids, 60, filled(90, 5), 90, &err), GLM_OK);
    pc_flush(c);
    ck_assert(!dir_has(dir, ids, 60) && !dir_has(dir, ids, 36));
    ck_assert_int_eq(count_suffix(dir, ".kept"), 0);
    pc_free(c);
    /* a temporary file of a writer that is gone (a crash mid-write) is deleted at open; one of a
     * live process (this one) is not */
    char stale[4200], live[4200];
    snprintf(stale, sizeof stale, "%s/00000000000000aa-4.kept.2147483646.tmp", dir);
    snprintf(live, sizeof live, "%s/00000000000000aa-4.kept.%ld.tmp", dir, (long)getpid());
    test_write_file(stale, "half", 4);
    test_write_file(live, "half", 4);
    c = pc_new(1000, dir, 5, &err);
    ck_assert(access(stale, F_OK) != 0 && access(live, F_OK) == 0);
    pc_get_stats(c, &st);
    ck_assert_int_eq(st.entries, 0);
    ck_assert_int_eq(st.refused_files, 0);
    pc_free(c);
    free(ids);
    tu_rmtree(dir);
    free(dir);
}
END_TEST

/* States keep leaving memory (a budget of one) while the writer thread is still writing their
 * files: none is lost or mixed up, each is found again, from memory or from its file. */
START_TEST(cache_states_leaving_memory_while_written_are_found)
{
    glm_error err = {0};
    char *dir = tu_tmpdir();
    enum { N = 40, BYTES = 4096 };
    int32_t *ids = some_tokens(N + 1, 21);
    pc_cache *c = pc_new(BYTES, dir, 9, &err);
    ck_assert_ptr_nonnull(c);
    size_t got = 0;
    for (int k = 1; k <= N; k++) {
        ck_assert_int_eq(pc_put(c, ids, k, filled(BYTES, (unsigned char)k), BYTES, &err), GLM_OK);
        /* the one before: in memory no more, its file perhaps not written yet */
        int back = pc_lookup(c, ids, k - 1, k - 2, k - 1, count_load, &got);
        ck_assert(back == 0 || (back == k - 1 && got == BYTES + (size_t)(k - 1)));
    }
    pc_flush(c);
    pc_stats st;
    pc_get_stats(c, &st);
    ck_assert_int_eq(st.disk_writes, N);
    ck_assert_int_eq(st.entries, N);
    ck_assert_uint_le(st.bytes, BYTES);
    ck_assert_int_eq(pc_n_notes(c), 0);
    for (int k = 1; k <= N; k++) {
        ck_assert_int_eq(pc_lookup(c, ids, k, k - 1, k, count_load, &got), k);
        ck_assert_uint_eq(got, BYTES + (size_t)k);
    }
    pc_free(c);
    free(ids);
    tu_rmtree(dir);
    free(dir);
}
END_TEST

/* ---- replies after switching conversations -------------------------------------------------- */

#define N_CONV 3
#define N_TURNS 3

static const char *const system_prompt = "You are a terse assistant that answers in one line.";

/* Conversation k's messages up to turn t (its earlier replies from replies[k][..]). */
static int build(int k, int t, char replies[N_CONV][N_TURNS][8192], glm_message *msgs)
{
    static char users[N_CONV][N_TURNS][64];
    int n = 0;
    msgs[n++] = (glm_message){.role = GLM_ROLE_SYSTEM, .content = system_prompt};
    for (int i = 0; i <= t; i++) {
        snprintf(users[k][i], sizeof users[k][i], "conversation %d, question %d: why?", k, i);
        msgs[n++] = (glm_message){.role = GLM_ROLE_USER, .content = users[k][i]};
        if (i < t)
            msgs[n++] = (glm_message){.role = GLM_ROLE_ASSISTANT, .content = replies[k][i]};
    }
    return n;
}

static void run_all(int switching, float temperature, char replies[N_CONV][N_TURNS][8192],
                    int reused[N_CONV][N_TURNS], glm_cache_stats *cs)
{
    glm_error err = {0};
    glm_engine *e = open_engine(switching ? 64 << 20 : -1, NULL);
    glm_session *one = switching ? glm_session_new(e, &err) : NULL;
    for (int t = 0; t < N_TURNS; t++)
        for (int k = 0; k < N_CONV; k++) {
            glm_message msgs[2 * N_TURNS + 1];
            glm_request rq = {.messages = msgs, .n_messages = build(k, t, replies, msgs),
                              .sampling = {.temperature = temperature, .top_p = 1, .top_k = 0,
                                           .seed = 99 + (uint64_t)k, .max_tokens = 12}};
            glm_session *s = switching ? one : glm_session_new(e, &err);
            tu_reply c = {0};
            ck_assert_msg(glm_generate(s, &rq, tu_collect_reply, &c, &err) == GLM_OK, "%s", err.message);
            memcpy(replies[k][t], c.text, c.len);
            replies[k][t][c.len] = '\0';
            reused[k][t] = c.done.reused_tokens;
            if (!switching)
                glm_session_free(s);
        }
    glm_engine_cache_stats(e, cs);
    glm_session_free(one);
    glm_engine_close(e);
}

START_TEST(switching_conversations_equals_full_prefill)
{
    static char kept[N_CONV][N_TURNS][8192], full[N_CONV][N_TURNS][8192];
    int reused_kept[N_CONV][N_TURNS], reused_full[N_CONV][N_TURNS];
    glm_cache_stats ck, cf;
    float temperature = _i == 0 ? 0.0f : 0.9f;
    memset(kept, 0, sizeof kept);
    memset(full, 0, sizeof full);
    run_all(1, temperature, kept, reused_kept, &ck);
    run_all(0, temperature, full, reused_full, &cf);
    for (int t = 0; t < N_TURNS; t++)
        for (int k = 0; k < N_CONV; k++) {
            ck_assert_msg(strcmp(kept[k][t], full[k][t]) == 0, "conversation %d turn %d: '%s' after "
                          "reuse, '%s' after a full prefill", k, t, kept[k][t], full[k][t]);
            ck_assert_int_eq(reused_full[k][t], 0);
            /* every turn but the very first starts from a kept state: the shared system prompt,
             * or the conversation's own last prompt although the session held another one */
            if (t > 0 || k > 0)
                ck_assert_msg(reused_kept[k][t] > 0, "conversation %d turn %d reused nothing", k, t);
        }
    for (int k = 0; k < N_CONV; k++)
        ck_assert_msg(strlen(kept[k][0]) > 0, "conversation %d got an empty first reply", k);
    /* later turns resume their own conversation's prompt, longer than the system prompt */
    ck_assert_int_gt(reused_kept[0][2], reused_kept[1][0]);
    ck_assert(ck.on && !cf.on);
    ck_assert_int_ge(ck.hits, N_CONV * N_TURNS - 1);
    printf("switching %d conversations (temperature %.1f): %lld restores, %d kept states, %zu "
           "bytes; first reply '%s'\n", N_CONV, (double)temperature, (long long)ck.hits, ck.entries,
           ck.bytes, kept[0][0]);
}
END_TEST

START_TEST(engine_cache_evicts_under_budget)
{
    glm_error err = {0};
    glm_engine *probe = open_engine(64 << 20, NULL);
    glm_session *s = glm_session_new(probe, &err);
    int32_t *ids = some_tokens(300, 8);
    ck_assert_int_eq(glm_session_feed(s, ids, 100, NULL, &err), GLM_OK);
    ck_assert_int_eq(glm_session_keep(s, &err), GLM_OK);
    glm_cache_stats st;
    glm_engine_cache_stats(probe, &st);
    size_t one = st.bytes; /* a state of 100 tokens */
    glm_session_free(s);
    glm_engine_close(probe);
    /* room for two states of about 100 tokens */
    glm_engine *e = open_engine((int64_t)(2.5 * (double)one), NULL);
    s = glm_session_new(e, &err);
    int32_t *conv[3];
    for (int k = 0; k < 3; k++) {
        conv[k] = some_tokens(100, 20 + (uint64_t)k);
        glm_session_reset(s);
        ck_assert_int_eq(glm_session_feed(s, conv[k], 100, NULL, &err), GLM_OK);
        ck_assert_int_eq(glm_session_keep(s, &err), GLM_OK);
        if (k == 1) /* touch the first: the second becomes the least recently used */
            ck_assert_int_eq(glm_session_restore(s, conv[0], 100, 0, 100), 100);
    }
    glm_engine_cache_stats(e, &st);
    ck_assert_int_eq(st.evictions, 1);
    ck_assert_int_eq(st.entries, 2);
    ck_assert_int_eq(glm_session_restore(s, conv[1], 100, 0, 100), 0);
    ck_assert_int_eq(glm_session_restore(s, conv[0], 100, 0, 100), 100);
    ck_assert_int_eq(glm_session_restore(s, conv[2], 100, 0, 100), 100);
    ck_assert_int_eq(glm_session_length(s), 100);
    ck_assert_int_eq(memcmp(glm_session_tokens(s), conv[2], 100 * sizeof(int32_t)), 0);
    for (int k = 0; k < 3; k++)
        free(conv[k]);
    free(ids);
    glm_session_free(s);
    glm_engine_close(e);
}
END_TEST

/* The memory budget is a parameter: the engine reads no variable (the application maps
 * GLMCHAT_PROMPT_CACHE_MB, tests/unit/test_config.c), and a budget below 0 turns the cache off. */
START_TEST(engine_cache_budget_from_the_params)
{
    glm_error err = {0};
    glm_engine_params p = {.model_dir = model_dir, .backend = GLM_BACKEND_CPU, .n_threads = 2};
    setenv("GLMCHAT_PROMPT_CACHE_MB", "12x", 1); /* not the engine's to read */
    glm_engine *e = glm_engine_open(&p, &err);
    ck_assert_msg(e != NULL, "%s", err.message);
    glm_cache_stats st;
    glm_engine_cache_stats(e, &st);
    ck_assert_int_eq(st.on, 1);
    glm_engine_close(e);
    unsetenv("GLMCHAT_PROMPT_CACHE_MB");
    p.prompt_cache_bytes = -1;
    e = glm_engine_open(&p, &err);
    ck_assert_msg(e != NULL, "%s", err.message);
    glm_session *s = glm_session_new(e, &err);
    int32_t *ids = some_tokens(40, 3);
    ck_assert_int_eq(glm_session_feed(s, ids, 40, NULL, &err), GLM_OK);
    glm_session_keep(s, &err);
    glm_engine_cache_stats(e, &st);
    ck_assert_int_eq(st.on, 0);
    ck_assert_int_eq(st.entries, 0);
    free(ids);
    glm_session_free(s);
    glm_engine_close(e);
}
END_TEST

/* ---- a prefill canceled midway -------------------------------------------------------------- */

/* Cancels s after ms from now while call runs in this thread. */
#define WITH_CANCEL_AFTER(sess, ms, call)                                                           \
    do {                                                                                            \
        test_canceler c_;                                                                           \
        ck_assert_int_eq(test_cancel_after(&c_, (sess), (ms) / 1e3), 0);                            \
        call;                                                                                       \
        ck_assert_int_eq(test_cancel_join(&c_), 0);                                                 \
    } while (0)

enum { LONG_FEED = 3000 };
static const int cancel_delays_ms[] = {0, 5, 30, 90};

/* glm_cancel from another thread stops a long feed before its next piece (the session keeps
 * the pieces that ran) or before its next layer (the session is reset): feeding the rest from
 * where it stopped gives the bits of one uninterrupted prefill. */
START_TEST(canceled_feed_resumes_to_the_same_bits)
{
    glm_error err = {0};
    glm_engine *e = open_engine(-1, NULL);
    glm_session *s = glm_session_new(e, &err);
    ck_assert_msg(s != NULL, "%s", err.message);
    int V = glm_session_vocab(s);
    int32_t *ids = some_tokens(LONG_FEED, 21);
    ck_assert_int_eq(glm_session_feed(s, ids, LONG_FEED, NULL, &err), GLM_OK);
    float *want = malloc((size_t)V * sizeof *want);
    memcpy(want, glm_session_logits(s), (size_t)V * sizeof *want);
    int stopped = 0, between_pieces = 0, within_a_piece = 0;
    for (size_t k = 0; k < sizeof cancel_delays_ms / sizeof cancel_delays_ms[0]; k++) {
        glm_session_reset(s);
        session_clear_cancel(s);
        glm_status st;
        WITH_CANCEL_AFTER(s, cancel_delays_ms[k], st = glm_session_feed(s, ids, LONG_FEED, NULL, &err));
        int held = glm_session_length(s);
        if (st == GLM_ERR_CANCELED) {
            stopped++;
            ck_assert_int_lt(held, LONG_FEED);
            if (strstr(err.message, "at layer")) {
                within_a_piece++;
                ck_assert_int_eq(held, 0);
            } else {
                ck_assert_msg(strstr(err.message, "canceled after"), "%s", err.message);
                between_pieces += held > 0;
            }
        } else {
            ck_assert_msg(st == GLM_OK, "%s", err.message);
            ck_assert_int_eq(held, LONG_FEED);
        }
        session_clear_cancel(s);
        ck_assert_msg(glm_session_feed(s, ids + held, LONG_FEED - held, NULL, &err) == GLM_OK, "%s",
                      err.message);
        ck_assert_msg(memcmp(glm_session_logits(s), want, (size_t)V * sizeof *want) == 0,
                      "logits differ after a cancel %d ms in (held %d)", cancel_delays_ms[k], held);
    }
    ck_assert_int_gt(stopped, 0);
    printf("canceled feeds: %d of %zu (%d between pieces, %d within one)\n", stopped,
           sizeof cancel_delays_ms / sizeof cancel_delays_ms[0], between_pieces, within_a_piece);
    free(want);
    free(ids);
    glm_session_free(s);
    glm_engine_close(e);
}
END_TEST

/* A long feed through session_feed_marked canceled past its first piece keeps the pieces that
 * ran, marked where it stopped (within a piece the CPU backend goes back to the mark made at the
 * piece's start; test_tp_split checks that going back alone), instead of losing them all:
 * cancels at a half and four fifths of the feed's own time, and feeding the rest from where each
 * stopped gives the bits of one uninterrupted prefill. */
START_TEST(canceled_marked_feed_keeps_the_pieces_that_ran)
{
    glm_error err = {0};
    glm_engine *e = open_engine(-1, NULL);
    glm_session *s = glm_session_new(e, &err);
    ck_assert_msg(s != NULL, "%s", err.message);
    int V = glm_session_vocab(s);
    int32_t *ids = some_tokens(LONG_FEED, 23);
    double t0 = test_now_s();
    ck_assert_int_eq(session_feed_marked(s, ids, LONG_FEED, &err), GLM_OK);
    double whole_ms = (test_now_s() - t0) * 1e3;
    float *want = malloc((size_t)V * sizeof *want);
    memcpy(want, glm_session_logits(s), (size_t)V * sizeof *want);
    static const double fractions[] = {0.5, 0.8};
    int kept = 0, within = 0;
    for (size_t k = 0; k < sizeof fractions / sizeof fractions[0]; k++) {
        glm_session_reset(s);
        session_clear_cancel(s);
        glm_status st;
        WITH_CANCEL_AFTER(s, (int)(fractions[k] * whole_ms),
                          st = session_feed_marked(s, ids, LONG_FEED, &err));
        int held = glm_session_length(s);
        if (st == GLM_ERR_CANCELED) {
            /* within a piece or between two: the pieces that ran, marked where the next began */
            ck_assert_int_eq(held % BACKEND_FEED_PIECE, 0);
            ck_assert_int_lt(held, LONG_FEED);
            if (held > 0)
                ck_assert_int_eq(glm_session_marked(s), held);
            kept += held > 0;
            within += held > 0 && strstr(err.message, "at layer") != NULL;
        } else {
            ck_assert_msg(st == GLM_OK, "%s", err.message);
        }
        session_clear_cancel(s);
        ck_assert_msg(glm_session_feed(s, ids + held, LONG_FEED - held, NULL, &err) == GLM_OK, "%s",
                      err.message);
        ck_assert_msg(memcmp(glm_session_logits(s), want, (size_t)V * sizeof *want) == 0,
                      "logits differ after a cancel at %.0f%% (held %d)", 100 * fractions[k], held);
    }
    printf("marked feeds canceled past their first piece, the pieces that ran kept: %d of %zu (%d "
           "within a piece; the whole feed %.0f ms)\n", kept,
           sizeof fractions / sizeof fractions[0], within, whole_ms);
    ck_assert_int_gt(kept, 0);
    free(want);
    free(ids);
    glm_session_free(s);
    glm_engine_close(e);
}
END_TEST

/* One turn of a conversation whose second user message is long; greedy. */
static glm_status conversation_turn(glm_session *s, const char *last_user, const char *first_reply,
                                    tu_reply *out, glm_error *err)
{
    glm_message msgs[4] = {
        {.role = GLM_ROLE_SYSTEM, .content = system_prompt},
        {.role = GLM_ROLE_USER, .content = "what do puffins eat?"},
        {.role = GLM_ROLE_ASSISTANT, .content = first_reply},
        {.role = GLM_ROLE_USER, .content = last_user},
    };
    glm_request rq = {.messages = msgs, .n_messages = first_reply ? 4 : 2,
                      .sampling = {.temperature = 0, .top_p = 1, .top_k = 0, .seed = 5, .max_tokens = 6}};
    if (!first_reply)
        msgs[1].content = last_user;
    memset(out, 0, sizeof *out);
    return glm_generate(s, &rq, tu_collect_reply, out, err);
}

static char *long_message(void)
{
    static const char *const words[] = {"river", "stone", "cloud", "seven", "garden", "paper"};
    size_t cap = 64 * 1024, len = 0;
    char *text = malloc(cap);
    uint64_t seed = 3;
    for (int i = 0; i < 2500; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        len += (size_t)snprintf(text + len, cap - len, "%s ", words[(seed >> 33) % 6]);
    }
    return text;
}

/* A long prompt's prefill is told piece by piece (PROMPT: tokens in, the reused ones too, of the
 * prompt's), rising, before the reply's first text; a prompt whose new tokens run as one piece
 * is not: its first token is its progress. */
START_TEST(long_prompts_tell_their_prefill_progress)
{
    glm_error err = {0};
    char *longer = long_message();
    glm_engine *e = open_engine(-1, NULL);
    glm_session *s = glm_session_new(e, &err);
    tu_reply first, r;
    ck_assert_msg(conversation_turn(s, "what do puffins eat?", NULL, &first, &err) == GLM_OK, "%s",
                  err.message);
    ck_assert_int_eq(first.n_prompt, 0);
    ck_assert_msg(conversation_turn(s, longer, first.text, &r, &err) == GLM_OK, "%s", err.message);
    ck_assert_int_gt(r.done.prompt_tokens - r.done.reused_tokens, 2 * BACKEND_FEED_PIECE);
    ck_assert_int_gt(r.done.reused_tokens, 0);
    ck_assert_int_ge(r.n_prompt, 3);
    ck_assert_int_le(r.n_prompt, 64);
    ck_assert_int_eq(r.prompt_total, r.done.prompt_tokens);
    ck_assert_int_eq(r.prompt_done[0], r.done.reused_tokens); /* before the first piece */
    for (int i = 1; i < r.n_prompt; i++)
        ck_assert_int_gt(r.prompt_done[i], r.prompt_done[i - 1]);
    ck_assert_int_lt(r.prompt_done[r.n_prompt - 1], r.prompt_total);
    ck_assert_int_eq(r.prompt_after_text, 0);
    glm_session_free(s);
    glm_engine_close(e);
    free(longer);
}
END_TEST

/* A turn canceled during its long prefill leaves prompt reuse consistent: the next turn on the
 * same session (a shorter question, then the long one again) gives the reply and the logits of
 * a fresh session that never saw the canceled turn; the long one again continues from where the
 * canceled prefill stopped (the pieces that ran were kept, marked: session_feed_marked), as many
 * as the canceled reply's kept_tokens said, and so does another session on the same engine (the
 * pieces went into its prompt cache). */
START_TEST(turn_after_a_canceled_prefill_equals_a_fresh_run)
{
    static const int delays_ms[] = {5, 60};
    glm_error err = {0};
    char *longer = long_message();
    const char *const nexts[2] = {"and where do they nest?", longer};
    tu_reply first, got, fresh[2];
    float *fresh_logits[2];
    /* what sessions that never saw the canceled turn answer */
    glm_engine *fe = open_engine(-1, NULL);
    glm_session *f = glm_session_new(fe, &err);
    ck_assert_msg(conversation_turn(f, "what do puffins eat?", NULL, &first, &err) == GLM_OK, "%s",
                  err.message);
    int V = glm_session_vocab(f);
    glm_session_free(f);
    for (int j = 0; j < 2; j++) {
        f = glm_session_new(fe, &err);
        ck_assert_msg(conversation_turn(f, nexts[j], first.text, &fresh[j], &err) == GLM_OK, "%s",
                      err.message);
        fresh_logits[j] = malloc((size_t)V * sizeof(float));
        memcpy(fresh_logits[j], glm_session_logits(f), (size_t)V * sizeof(float));
        glm_session_free(f);
    }
    glm_engine_close(fe);
    int in_prefill = 0, resumed = 0, others = 0;
    for (size_t k = 0; k < sizeof delays_ms / sizeof delays_ms[0]; k++)
        for (int j = 0; j < 2; j++) {
            glm_engine *e = open_engine(64 << 20, NULL);
            glm_session *s = glm_session_new(e, &err);
            ck_assert_int_eq(conversation_turn(s, "what do puffins eat?", NULL, &got, &err), GLM_OK);
            ck_assert_str_eq(got.text, first.text);
            glm_status st;
            WITH_CANCEL_AFTER(s, delays_ms[k], st = conversation_turn(s, longer, first.text, &got, &err));
            ck_assert_msg(st == GLM_OK || st == GLM_ERR_CANCELED, "%s", err.message);
            /* stopped partway: the session holds less than the prompt (before the cancel
             * reached the prefill, it ran to the end and only then gave up) */
            int held = glm_session_length(s);
            int partway = st == GLM_ERR_CANCELED && got.done.generated_tokens == 0 &&
                          held < got.done.prompt_tokens;
            in_prefill += partway;
            /* partway: the pieces that ran are kept (the turn resumed a state, so at least it) */
            ck_assert_msg(!partway || held > 0, "a turn canceled %d ms in kept nothing",
                          delays_ms[k]);
            /* the reply's stats say what it kept (the TUI tells the user so) */
            ck_assert_msg(got.done.kept_tokens == (partway ? held : 0), "kept_tokens %d, the "
                          "session holds %d of %d (partway: %d)", got.done.kept_tokens, held,
                          got.done.prompt_tokens, partway);
            /* the kept pieces are in the engine's prompt cache too: another session sending the
             * same prompt goes on from them (at the first delay; after it, this session finds
             * that session's whole prompt in the cache, so its own pieces are checked at the
             * second) */
            int via_other = partway && held > 0 && j == 1 && k == 0;
            if (via_other) {
                glm_session *other = glm_session_new(e, &err);
                tu_reply again;
                ck_assert_msg(conversation_turn(other, longer, first.text, &again, &err) == GLM_OK,
                              "%s", err.message);
                ck_assert_msg(again.done.reused_tokens == held, "canceled at %d tokens, another "
                              "session reused %d", held, again.done.reused_tokens);
                ck_assert_str_eq(again.text, fresh[1].text);
                glm_session_free(other);
                others++;
            }
            ck_assert_msg(conversation_turn(s, nexts[j], first.text, &got, &err) == GLM_OK, "%s",
                          err.message);
            if (partway && held > 0 && j == 1 && !via_other) { /* on from the kept pieces */
                ck_assert_msg(got.done.reused_tokens == held, "canceled at %d tokens of %d, the "
                              "turn again reused %d", held, got.done.prompt_tokens,
                              got.done.reused_tokens);
                resumed++;
            }
            ck_assert_msg(strcmp(got.text, fresh[j].text) == 0, "after a cancel %d ms in: '%s', "
                          "fresh: '%s'", delays_ms[k], got.text, fresh[j].text);
            ck_assert_msg(memcmp(glm_session_logits(s), fresh_logits[j], (size_t)V * sizeof(float)) == 0,
                          "logits differ from a fresh run after a cancel %d ms in", delays_ms[k]);
            glm_session_free(s);
            glm_engine_close(e);
        }
    ck_assert_int_gt(in_prefill, 0);
    printf("turns stopped partway through their prefill: %d of %zu; the long one again went on "
           "from where it stopped: %d in the same session, %d in another\n", in_prefill,
           2 * sizeof delays_ms / sizeof delays_ms[0], resumed, others);
    for (int j = 0; j < 2; j++)
        free(fresh_logits[j]);
    free(longer);
}
END_TEST

static Suite *reuse_suite(void)
{
    Suite *s = suite_create("reuse");
    TCase *tc = tcase_create("reuse");
    tcase_set_timeout(tc, 120);
    tcase_add_unchecked_fixture(tc, make_model, remove_model);
    tcase_add_loop_test(tc, snapshot_round_trip_is_exact, 0, 2);
    tcase_add_test(tc, snapshot_bad_input_is_refused);
    tcase_add_loop_test(tc, resume_on_the_grid_equals_full_prefill_bits, 0, 3);
    tcase_add_test(tc, cache_longest_prefix_and_lru_budget);
    tcase_add_test(tc, cache_disk_tier_survives_and_refuses);
    tcase_add_test(tc, cache_keeps_a_state_whose_restore_the_link_failed);
    tcase_add_test(tc, cache_ranks_share_a_directory_apart);
    tcase_add_test(tc, cache_disk_budget_deletes_least_recently_used);
    tcase_add_test(tc, canceled_marked_feed_keeps_the_pieces_that_ran);
    tcase_add_test(tc, cache_states_leaving_memory_while_written_are_found);
    tcase_add_loop_test(tc, switching_conversations_equals_full_prefill, 0, 2);
    tcase_add_test(tc, engine_cache_evicts_under_budget);
    tcase_add_test(tc, engine_cache_budget_from_the_params);
    tcase_add_test(tc, canceled_feed_resumes_to_the_same_bits);
    tcase_add_test(tc, long_prompts_tell_their_prefill_progress);
    tcase_add_test(tc, turn_after_a_canceled_prefill_equals_a_fresh_run);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return test_run_suite(reuse_suite());
}
