/* test_cuda_spec.c: prompt reuse and drafted decoding on the CUDA backend, run on a GPU machine
 * by tests/gpu/spec.sh: verification rows equal one-token steps bit for bit, going back inside a
 * window (windows of 7, 9 and 17 rows), snapshots resumed on the grid equal a full prefill bit
 * for bit (and bad ones, other cache dtypes and other dense weights are refused), drafted replies equal undrafted ones (greedy and seeded sampling, copy and oracle
 * drafts) with acceptance per draft position, and chat turns after reuse equal full prefills;
 * on a model with an MTP layer its drafts against the CPU backend's and along every path the
 * state takes, and replies with draft = mtp equal undrafted ones.
 * Usage: test_cuda_spec MODEL_DIR LABEL. Prints one line per check; exit 1 on any failure. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "tests/gpu/cuda_env.h"
#include "cpu/snapshot.h"
#include "cuda/cuda_internal.h"
#include "sampler.h"
#include "session.h"
#include "spec.h"
#include "test_engine_util.h"

static int failures;
static const char *label = "";

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            printf("FAIL %s: ", label);                                                            \
            printf(__VA_ARGS__);                                                                   \
            printf("\n");                                                                          \
            failures++;                                                                            \
        }                                                                                          \
    } while (0)

#define OK(expr)                                                                                   \
    do {                                                                                           \
        glm_status st_ = (expr);                                                                   \
        if (st_) {                                                                                 \
            printf("FAIL %s: %s: %s\n", label, #expr, err.message);                                \
            failures++;                                                                            \
            goto out;                                                                              \
        }                                                                                          \
    } while (0)

/* Verification windows of K rows against K one-token steps, and going back to each position. */
static void check_verify(engine_backend *be, int V, int K)
{
    const backend_ops *o = be->ops;
    glm_error err = {0};
    int P = 45, rows_equal = 0, backs_equal = 0;
    int32_t *ids = tu_some_tokens(P + K, 17 + (uint64_t)K, V < 2000 ? V : 2000);
    size_t row = (size_t)V * sizeof(float);
    float *want = malloc((size_t)K * row), *got = malloc((size_t)K * row), *a = malloc(row),
          *b = malloc(row);
    void *dec = o->state_new(be->impl, &err), *ver = o->state_new(be->impl, &err);
    OK(o->prefill(be->impl, dec, ids, P, NULL, 0, &err));
    OK(o->prefill(be->impl, ver, ids, P, NULL, 0, &err));
    OK(o->state_mark(dec, &err));
    OK(o->state_mark(ver, &err));
    for (int t = 0; t < K; t++)
        OK(o->prefill(be->impl, dec, ids + P + t, 1, want + (size_t)t * V, 0, &err));
    OK(o->verify(be->impl, ver, ids + P, K, got, &err));
    CHECK(o->state_length(ver) == P + K, "verify left %d tokens, not %d", o->state_length(ver), P + K);
    for (int t = 0; t < K; t++) {
        int eq = memcmp(want + (size_t)t * V, got + (size_t)t * V, row) == 0;
        rows_equal += eq;
        CHECK(eq, "verify row %d of %d differs from a one-token step (max %g)", t, K,
              (double)tu_max_abs_diff(want + (size_t)t * V, got + (size_t)t * V, (size_t)V));
    }
    for (int j = 1; j <= K; j++) {
        OK(o->state_truncate(ver, P, &err));
        OK(o->verify(be->impl, ver, ids + P, K, got, &err));
        OK(o->state_rewind(ver, P + j, &err));
        OK(o->state_truncate(dec, P, &err));
        for (int t = 0; t < j; t++)
            OK(o->prefill(be->impl, dec, ids + P + t, 1, NULL, 0, &err));
        int32_t tok = ids[(j * 7) % P];
        OK(o->prefill(be->impl, dec, &tok, 1, a, 0, &err));
        OK(o->prefill(be->impl, ver, &tok, 1, b, 0, &err));
        int eq = memcmp(a, b, row) == 0;
        backs_equal += eq;
        CHECK(eq, "decode after going back to %d of a %d-row window differs (max %g)", P + j, K,
              (double)tu_max_abs_diff(a, b, (size_t)V));
    }
    CHECK(o->state_rewind(ver, P, &err) == GLM_ERR_ARG && strstr(err.message, "verification window"),
          "going back outside the window was not refused with a message");
    printf("%-22s verify %d rows: %d/%d rows equal one-token steps bit for bit; back to each "
           "position then on: %d/%d equal\n", label, K, rows_equal, K, backs_equal, K);
out:
    o->state_free(dec);
    o->state_free(ver);
    free(ids);
    free(want);
    free(got);
    free(a);
    free(b);
}

/* Snapshots at split points on the grid, resumed and prefilled on: the bits of a full prefill,
 * for the prompt's logits and 24 greedy steps after it. */
static void check_reuse(engine_backend *be, int V)
{
    const backend_ops *o = be->ops;
    glm_error err = {0};
    const int N = 307, splits[] = {16, 96, 256, 288, 304};
    int n_splits = (int)(sizeof splits / sizeof *splits), equal = 0, steps = 24;
    int32_t *ids = tu_some_tokens(N, 5, V < 2000 ? V : 2000);
    size_t row = (size_t)V * sizeof(float);
    float *full = malloc((size_t)(steps + 1) * row), *got = malloc(row);
    void *c = o->state_new(be->impl, &err), *a = o->state_new(be->impl, &err),
         *b = o->state_new(be->impl, &err);
    unsigned char *snap = NULL;
    OK(o->prefill(be->impl, c, ids, N, full, 0, &err));
    for (int t = 0; t < steps; t++) {
        int32_t tok = glm_argmax(full + (size_t)t * V, V);
        OK(o->prefill(be->impl, c, &tok, 1, full + (size_t)(t + 1) * V, 0, &err));
    }
    for (int i = 0; i < n_splits; i++) {
        int k = splits[i], same = 1;
        o->state_reset(a);
        o->state_reset(b);
        OK(o->prefill(be->impl, a, ids, k, NULL, 0, &err));
        size_t bytes = o->snapshot_size(a);
        free(snap);
        snap = malloc(bytes);
        OK(o->snapshot_save(a, snap, bytes, &err));
        OK(o->snapshot_load(b, snap, bytes, &err));
        CHECK(o->state_length(b) == k, "a loaded snapshot holds %d tokens, not %d",
              o->state_length(b), k);
        OK(o->prefill(be->impl, b, ids + k, N - k, got, 0, &err));
        same = memcmp(got, full, row) == 0;
        CHECK(same, "resumed at %d of %d: the prompt's logits differ from a full prefill (max %g)", k,
              N, (double)tu_max_abs_diff(got, full, (size_t)V));
        for (int t = 0; same && t < steps; t++) {
            int32_t tok = glm_argmax(full + (size_t)t * V, V);
            OK(o->prefill(be->impl, b, &tok, 1, got, 0, &err));
            same = memcmp(got, full + (size_t)(t + 1) * V, row) == 0;
            CHECK(same, "resumed at %d: greedy step %d differs from the full prefill's", k, t);
        }
        equal += same;
        if (i == n_splits - 1) { /* bad snapshots are refused, the state unchanged */
            unsigned char *bad = malloc(bytes);
            memcpy(bad, snap, bytes);
            bad[0] ^= 1;
            CHECK(o->snapshot_load(b, bad, bytes, &err) == GLM_ERR_FORMAT, "a bad magic loaded");
            printf("%-22s refused: %s\n", label, err.message);
            CHECK(o->snapshot_load(b, snap, bytes - 1, &err) == GLM_ERR_FORMAT, "a short snapshot loaded");
            printf("%-22s refused: %s\n", label, err.message);
            memcpy(bad, snap, bytes);
            bad[16] ^= 0x55; /* the config fingerprint */
            CHECK(o->snapshot_load(b, bad, bytes, &err) == GLM_ERR_FORMAT, "another model's loaded");
            printf("%-22s refused: %s\n", label, err.message);
            free(bad);
            CHECK(o->state_length(b) == N + steps, "a refused snapshot changed the state");
        }
    }
    printf("%-22s reuse: %d/%d split points (of %d tokens) give the full prefill's bits, prompt "
           "logits and %d greedy steps\n", label, equal, n_splits, N, steps);
out:
    free(snap);
    free(full);
    free(got);
    free(ids);
    o->state_free(a);
    o->state_free(b);
    o->state_free(c);
}

/* Another backend's snapshots, other cache dtypes and other dense weights are refused by name. */

/* The environment's settings with the latent cache in another format (bf16, or f32 when the
 * environment's is bf16). */
static void other_cache(glm_engine_params *p, void *user)
{
    (void)user;
    p->kv_cache = p->kv_cache == GLM_KV_CACHE_BF16 ? GLM_KV_CACHE_F32 : GLM_KV_CACHE_BF16;
}

/* The environment's settings with the other dense format; *(int *)user: 1 when the
 * environment's was q4. */
static void other_dense(glm_engine_params *p, void *user)
{
    *(int *)user = p->dense == GLM_DENSE_Q4;
    p->dense = p->dense == GLM_DENSE_Q4 ? GLM_DENSE_BF16 : GLM_DENSE_Q4;
}

static void check_foreign(const glm_model *m, engine_backend *be)
{
    glm_error err = {0};
    engine_backend cpu = {0}, other = {0}, dense = {0};
    void *cs = NULL, *gs = NULL, *os = NULL, *ds = NULL;
    unsigned char *snap = NULL;
    int32_t ids[20];
    for (int i = 0; i < 20; i++)
        ids[i] = i + 3;
    OK(backend_open_cpu(m, 2, &cpu, &err));
    cs = cpu.ops->state_new(cpu.impl, &err);
    OK(cpu.ops->prefill(cpu.impl, cs, ids, 20, NULL, 0, &err));
    size_t n = cpu.ops->snapshot_size(cs);
    snap = malloc(n);
    OK(cpu.ops->snapshot_save(cs, snap, n, &err));
    gs = be->ops->state_new(be->impl, &err);
    CHECK(be->ops->snapshot_load(gs, snap, n, &err) == GLM_ERR_FORMAT, "a CPU snapshot loaded on CUDA");
    printf("%-22s refused: %s\n", label, err.message);
    glm_status st = gpu_open_cuda_edit(m, other_cache, NULL, &other, &err);
    OK(st);
    OK(be->ops->prefill(be->impl, gs, ids, 20, NULL, 0, &err));
    free(snap);
    n = be->ops->snapshot_size(gs);
    snap = malloc(n);
    OK(be->ops->snapshot_save(gs, snap, n, &err));
    os = other.ops->state_new(other.impl, &err);
    CHECK(other.ops->snapshot_load(os, snap, n, &err) == GLM_ERR_FORMAT,
          "a snapshot of other cache dtypes loaded");
    printf("%-22s refused: %s\n", label, err.message);
    int q4 = 0;
    st = gpu_open_cuda_edit(m, other_dense, &q4, &dense, &err);
    OK(st);
    ds = dense.ops->state_new(dense.impl, &err);
    st = dense.ops->snapshot_load(ds, snap, n, &err);
    CHECK(st == GLM_ERR_FORMAT && strstr(err.message, "GLMCHAT_CUDA_DENSE"),
          "a snapshot of %s dense weights loaded on %s ones", q4 ? "q4" : "bf16", q4 ? "bf16" : "q4");
    printf("%-22s refused: %s\n", label, err.message);
out:
    free(snap);
    if (cs)
        cpu.ops->state_free(cs);
    if (gs)
        be->ops->state_free(gs);
    if (os)
        other.ops->state_free(os);
    if (ds)
        dense.ops->state_free(ds);
    if (cpu.ops)
        backend_close(&cpu);
    if (other.ops)
        backend_close(&other);
    if (dense.ops)
        backend_close(&dense);
}

static glm_engine *open_engine(const char *dir, int draft, int64_t cache)
{
    glm_error err = {0};
    glm_engine_params p;
    glm_engine *e = NULL;
    if (gpu_env_params(&p, &err) == GLM_OK) {
        p.model_dir = dir;
        p.backend = GLM_BACKEND_CUDA;
        p.draft = (glm_draft)draft;
        p.prompt_cache_bytes = cache;
        e = glm_engine_open(&p, &err);
    }
    if (!e) {
        printf("FAIL %s: opening the engine: %s\n", label, err.message);
        failures++;
    }
    return e;
}

/* Replies of a plain and a drafted engine over `trials` prompts (tu_run_drafted): equal, with
 * the acceptance per draft position. oracle: trial 0 runs the engine's own drafts, the others
 * the oracle's. Returns the drafted replies' summed stats; *equal: the replies that matched. */
static spec_stats compare_replies(glm_engine *plain, glm_engine *drafted, const char *what,
                                  float temperature, int trials, int oracle, int *equal,
                                  int *mtp_gave)
{
    int V = 200;
    spec_stats all = {0};
    *equal = *mtp_gave = 0;
    for (int trial = 0; trial < trials; trial++) {
        int n_prompt = oracle ? 60 + 11 * trial : 40 + 13 * trial;
        int max_new = oracle ? 50 + 7 * trial : 48 + 5 * trial;
        int32_t *prompt = tu_some_tokens(n_prompt, oracle ? 3 : 29 + (uint64_t)trial, V);
        if (oracle) /* repeats itself: copy drafts find matches */
            for (int i = 24; i < n_prompt; i++)
                prompt[i] = prompt[i % 24];
        glm_sampling smp = {.temperature = temperature, .top_p = 1, .top_k = 40,
                            .seed = (oracle ? 1000 : 2000) + (uint64_t)trial};
        tu_drafted_run r;
        tu_run_drafted(plain, drafted, prompt, n_prompt, &smp, max_new, oracle && trial > 0 ? V : 0,
                       &r);
        CHECK(r.plain_st == GLM_OK, "undrafted generation: %s", r.err.message);
        CHECK(r.plain_st != GLM_OK || r.drafted_st == GLM_OK, "drafted generation (%s): %s", what,
              r.err.message);
        CHECK(r.same, "%s, temperature %.1f trial %d: the drafted reply (%d tokens) differs from "
              "the undrafted one (%d)", what, (double)temperature, trial, r.drafted.n, r.plain.n);
        *mtp_gave += r.mtp_drafts == 4;
        tu_add_stats(&all, &r.stats);
        *equal += r.same;
        free(prompt);
    }
    return all;
}

static void check_drafted(const char *dir, float temperature)
{
    glm_engine *plain = open_engine(dir, SPEC_OFF, -1), *drafted = open_engine(dir, SPEC_COPY, -1);
    int equal = 0, trials = 4, mtp_gave = 0;
    if (!plain || !drafted)
        goto out;
    spec_stats all = compare_replies(plain, drafted, "copy + oracle drafts", temperature, trials, 1,
                                     &equal, &mtp_gave);
    CHECK(all.windows > 0 && all.accepted[0] > 0, "no draft was verified and accepted");
    printf("%-22s drafted == undrafted (temperature %.1f, copy + oracle drafts): %d/%d replies; ",
           label, (double)temperature, equal, trials);
    tu_print_acceptance(&all);
    printf("\n");
out:
    glm_engine_close(plain);
    glm_engine_close(drafted);
}

/* Prints n draft ids into buf (for failure messages). */
static const char *ids_text(const int32_t *v, int n, char *buf, size_t cap)
{
    size_t at = 0;
    buf[0] = '\0';
    for (int i = 0; i < n && at + 12 < cap; i++)
        at += (size_t)snprintf(buf + at, cap - at, "%s%d", i ? "," : "[", (int)v[i]);
    if (at + 2 < cap)
        snprintf(buf + at, cap - at, "]");
    return buf;
}

/* The MTP layer's drafts on CUDA: the CPU backend's (emulating the CUDA backend's prefill
 * products) for a sequence of positions (after a multi-chunk prompt, then one-token steps
 * through the decode graph), and the same drafts after the state got somewhere along different
 * paths: one by one, a verification window gone back into, drafting twice, a snapshot, a
 * truncate to the mark. */
static void check_mtp_drafts(const glm_model *m, engine_backend *be)
{
    const backend_ops *o = be->ops;
    glm_error err = {0};
    engine_backend cpu = {0};
    void *g = NULL, *c = NULL, *a = NULL, *b = NULL, *d = NULL, *e = NULL;
    unsigned char *snap = NULL;
    const int V = m->cfg.vocab_size, P = 300, steps = 16, N = 5, P0 = 30, K = 6, j = 4;
    int32_t *ids = tu_some_tokens(P + steps + 1, 41, V < 2000 ? V : 2000);
    float *row = malloc((size_t)V * sizeof *row), *rows = malloc((size_t)K * V * sizeof *rows);
    const backend_settings *bs = &be->settings;
    int f32 = bs->kv_cache == GLM_KV_CACHE_F32 &&
              (bs->cuda.kv_index == GLM_KV_CACHE_DEFAULT || bs->cuda.kv_index == GLM_KV_CACHE_F32);
    int32_t dg[8], dc[8], da[8], db[8], dd[8];
    int ng = 0, nc = 0, na = 0, nb = 0, nd = 0, same_cpu = 0, total = 0, paths = 0, f0 = failures;
    char t1[128], t2[128];
    CHECK(o->mtp_draft != NULL, "the CUDA backend has no mtp_draft");
    if (!o->mtp_draft)
        goto out;
    /* the CPU backend runs the CUDA backend's prefill products: one fp16 part (its default),
     * emulated on its chunks, or the exact ones */
    backend_settings cs = *bs;
    cs.cuda.gemm = ((const cuda_backend *)be->impl)->one_part ? GLM_CUDA_GEMM_ONEPART
                                                              : GLM_CUDA_GEMM_FIXED;
    cs.cuda.chunk = backend_cuda_plan(be)->chunk;
    OK(backend_open_cpu_with(m, 2, &cs, &cpu, &err));
    g = o->state_new(be->impl, &err);
    c = g ? cpu.ops->state_new(cpu.impl, &err) : NULL;
    if (!g || !c) {
        printf("FAIL %s: a state: %s\n", label, err.message);
        failures++;
        goto out;
    }
    OK(o->prefill(be->impl, g, ids, P, NULL, 0, &err));
    OK(cpu.ops->prefill(cpu.impl, c, ids, P, NULL, 0, &err));
    for (int t = 0; t <= steps; t++) {
        int32_t next = ids[P + t];
        OK(o->mtp_draft(be->impl, g, next, dg, N, &ng, &err));
        OK(cpu.ops->mtp_draft(cpu.impl, c, next, dc, N, &nc, &err));
        CHECK(ng == N, "position %d: %d CUDA MTP drafts, not %d", P + t, ng, N);
        CHECK(o->state_length(g) == P + t, "drafting changed the CUDA state's length");
        int eq = ng == nc && memcmp(dg, dc, (size_t)ng * sizeof *dg) == 0;
        same_cpu += eq;
        total++;
        if (f32)
            CHECK(eq, "position %d: the CUDA MTP drafts %s differ from the CPU backend's %s", P + t,
                  ids_text(dg, ng, t1, sizeof t1), ids_text(dc, nc, t2, sizeof t2));
        OK(o->prefill(be->impl, g, &next, 1, row, 0, &err)); /* the decode graph's path */
        OK(cpu.ops->prefill(cpu.impl, c, &next, 1, NULL, 0, &err));
    }
    if (f32)
        printf("%-22s MTP drafts (f32 cache): %d/%d positions give the CPU backend's %d draft ids: "
               "%s\n", label, same_cpu, total, N, same_cpu == total ? "PASS" : "FAIL");
    else
        printf("%-22s MTP drafts: against the CPU backend only with GLMCHAT_CUDA_KV=f32 (here %d/%d "
               "positions agree, not checked)\n", label, same_cpu, total);

    a = o->state_new(be->impl, &err);
    b = a ? o->state_new(be->impl, &err) : NULL;
    d = b ? o->state_new(be->impl, &err) : NULL;
    e = d ? o->state_new(be->impl, &err) : NULL;
    if (!e) {
        printf("FAIL %s: a state: %s\n", label, err.message);
        failures++;
        goto out;
    }
    int32_t x = ids[5], y = ids[6];
    OK(o->prefill(be->impl, a, ids, P0, NULL, 0, &err));
    OK(o->prefill(be->impl, b, ids, P0, NULL, 0, &err));
    OK(o->state_mark(b, &err));
    for (int t = 0; t < j; t++)
        OK(o->prefill(be->impl, a, ids + P0 + t, 1, row, 0, &err));
    OK(o->verify(be->impl, b, ids + P0, K, rows, &err));
    OK(o->state_rewind(b, P0 + j, &err));
    OK(o->mtp_draft(be->impl, a, x, da, N, &na, &err));
    OK(o->mtp_draft(be->impl, b, x, db, N, &nb, &err));
    int eq = na == N && nb == N && memcmp(da, db, sizeof(int32_t) * N) == 0;
    paths += eq;
    CHECK(eq, "drafts after one-token steps %s and after a window gone back into %s differ",
          ids_text(da, na, t1, sizeof t1), ids_text(db, nb, t2, sizeof t2));
    OK(o->mtp_draft(be->impl, a, x, dd, N, &nd, &err)); /* the state is as it was */
    eq = nd == N && memcmp(da, dd, sizeof(int32_t) * N) == 0 && o->state_length(a) == P0 + j;
    paths += eq;
    CHECK(eq, "drafting twice gave %s, then %s", ids_text(da, na, t1, sizeof t1),
          ids_text(dd, nd, t2, sizeof t2));
    size_t bytes = o->snapshot_size(a);
    snap = malloc(bytes);
    OK(o->snapshot_save(a, snap, bytes, &err));
    OK(o->snapshot_load(d, snap, bytes, &err));
    OK(o->mtp_draft(be->impl, d, x, dd, N, &nd, &err));
    eq = nd == N && memcmp(da, dd, sizeof(int32_t) * N) == 0;
    paths += eq;
    CHECK(eq, "drafts after a snapshot %s differ from the saved state's %s",
          ids_text(dd, nd, t1, sizeof t1), ids_text(da, na, t2, sizeof t2));
    OK(o->prefill(be->impl, e, ids, P0, NULL, 0, &err));
    OK(o->mtp_draft(be->impl, e, y, da, N, &na, &err));
    OK(o->state_truncate(b, P0, &err));
    OK(o->mtp_draft(be->impl, b, y, db, N, &nb, &err));
    eq = na == N && nb == N && memcmp(da, db, sizeof(int32_t) * N) == 0;
    paths += eq;
    CHECK(eq, "drafts after a truncate to the mark %s differ from right after the prompt %s",
          ids_text(db, nb, t1, sizeof t1), ids_text(da, na, t2, sizeof t2));
    printf("%-22s MTP drafts follow the state: %d/4 paths (window gone back into, twice, snapshot, "
           "truncate) give the same drafts: %s\n", label, paths, failures == f0 ? "PASS" : "FAIL");
out:
    if (g)
        o->state_free(g);
    if (a)
        o->state_free(a);
    if (b)
        o->state_free(b);
    if (d)
        o->state_free(d);
    if (e)
        o->state_free(e);
    if (c)
        cpu.ops->state_free(c);
    if (cpu.ops)
        backend_close(&cpu);
    free(snap);
    free(ids);
    free(row);
    free(rows);
}

/* draft = mtp on CUDA: the replies equal undrafted ones, greedy and sampled with a seed. */
static void check_mtp_replies(const char *dir, float temperature)
{
    glm_engine *plain = open_engine(dir, SPEC_OFF, -1), *drafted = open_engine(dir, SPEC_MTP, -1);
    int equal = 0, trials = 3, mtp_gave = 0, f0 = failures;
    if (!plain || !drafted)
        goto out;
    spec_stats all = compare_replies(plain, drafted, "draft = mtp", temperature, trials, 0, &equal,
                                     &mtp_gave);
    CHECK(mtp_gave == trials, "the engine's MTP layer gave drafts after %d of %d replies", mtp_gave,
          trials);
    CHECK(all.windows > 0 && all.proposed[0] > 0, "no MTP draft was verified");
    printf("%-22s drafted == undrafted (draft = mtp, temperature %.1f): %d/%d replies; ", label,
           (double)temperature, equal, trials);
    tu_print_acceptance(&all);
    printf("; MTP drafts after %d/%d replies: %s\n", mtp_gave, trials, failures == f0 ? "PASS" : "FAIL");
out:
    glm_engine_close(plain);
    glm_engine_close(drafted);
}

/* Appends a reply's text (into a 2,048-byte buffer) and notes the DONE event's reused tokens. */
typedef struct chat_acc {
    char *buf;
    size_t len;
    int reused;
} chat_acc;

static int collect(const glm_event *ev, void *user)
{
    chat_acc *acc = user;
    if (ev->type == GLM_EV_CONTENT_DELTA || ev->type == GLM_EV_REASONING_DELTA) {
        size_t n = ev->len;
        if (acc->len + n < 2047) {
            memcpy(acc->buf + acc->len, ev->text, n);
            acc->len += n;
            acc->buf[acc->len] = '\0';
        }
    } else if (ev->type == GLM_EV_DONE) {
        acc->reused = ev->stats.reused_tokens;
    }
    return 0;
}

/* Chat turns of three conversations through one session with prompt reuse, against a full
 * prefill of every prompt: the same replies. */
static void check_chat_reuse(const char *dir, float temperature)
{
    glm_error err = {0};
    enum { N_CONV = 3, N_TURNS = 3 };
    static char text[2][N_CONV][N_TURNS][2048];
    static char users[N_CONV][N_TURNS][64];
    int reused = 0, equal = 0;
    for (int pass = 0; pass < 2; pass++) {
        glm_engine *e = open_engine(dir, SPEC_OFF, pass ? -1 : (int64_t)256 << 20);
        if (!e)
            return;
        if (!glm_engine_tokenizer(e, &err)) {
            printf("%-22s chat reuse: skipped (%s)\n", label, err.message);
            glm_engine_close(e);
            return;
        }
        glm_session *one = glm_session_new(e, &err);
        for (int t = 0; t < N_TURNS; t++)
            for (int k = 0; k < N_CONV; k++) {
                glm_message msgs[2 * N_TURNS + 1];
                int n = 0;
                msgs[n++] = (glm_message){.role = GLM_ROLE_SYSTEM,
                                          .content = "You are a terse assistant."};
                for (int i = 0; i <= t; i++) {
                    snprintf(users[k][i], sizeof users[k][i], "conversation %d, question %d", k, i);
                    msgs[n++] = (glm_message){.role = GLM_ROLE_USER, .content = users[k][i]};
                    if (i < t)
                        msgs[n++] = (glm_message){.role = GLM_ROLE_ASSISTANT,
                                                  .content = text[pass][k][i]};
                }
                glm_request rq = {.messages = msgs, .n_messages = n,
                                  .sampling = {.temperature = temperature, .top_p = 1,
                                               .seed = 99 + (uint64_t)k, .max_tokens = 16}};
                glm_session *s = pass ? glm_session_new(e, &err) : one;
                chat_acc acc = {text[pass][k][t], 0, 0};
                glm_status st = glm_generate(s, &rq, collect, &acc, &err);
                CHECK(st == GLM_OK, "chat turn: %s", err.message);
                if (!pass)
                    reused += acc.reused > 0;
                if (pass)
                    glm_session_free(s);
            }
        glm_session_free(one);
        glm_engine_close(e);
    }
    for (int k = 0; k < N_CONV; k++)
        for (int t = 0; t < N_TURNS; t++) {
            int same = strcmp(text[0][k][t], text[1][k][t]) == 0;
            equal += same;
            CHECK(same, "conversation %d turn %d: '%s' after reuse, '%s' after a full prefill", k, t,
                  text[0][k][t], text[1][k][t]);
        }
    CHECK(reused >= N_CONV * N_TURNS - 1, "only %d of %d turns started from a kept state", reused,
          N_CONV * N_TURNS);
    printf("%-22s chat reuse (temperature %.1f): %d/%d replies equal a full prefill's; %d turns "
           "resumed from kept states\n", label, (double)temperature, equal, N_CONV * N_TURNS, reused);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: test_cuda_spec MODEL_DIR [LABEL]\n");
        return 2;
    }
    label = argc > 2 ? argv[2] : argv[1];
    glm_error err = {0};
    glm_model *m = glm_model_open(argv[1], &err);
    engine_backend be = {0};
    if (!m || gpu_open_cuda(m, &be, &err)) {
        printf("FAIL %s: %s\n", label, err.message);
        return 1;
    }
    int V = m->cfg.vocab_size;
    check_verify(&be, V, 7);
    check_verify(&be, V, 9);
    check_verify(&be, V, 17); /* three forwards of the decode path: 8 + 8 + 1 rows */
    check_reuse(&be, V);
    check_foreign(m, &be);
    if (m->w.has_mtp)
        check_mtp_drafts(m, &be);
    backend_close(&be);
    check_drafted(argv[1], 0.0f);
    check_drafted(argv[1], 0.8f);
    if (m->w.has_mtp) {
        check_mtp_replies(argv[1], 0.0f);
        check_mtp_replies(argv[1], 0.8f);
    }
    check_chat_reuse(argv[1], 0.0f);
    check_chat_reuse(argv[1], 0.9f);
    glm_model_close(m);
    printf("%-22s %s (%d failures)\n", label, failures ? "FAILED" : "all checks passed", failures);
    return failures ? 1 : 0;
}
