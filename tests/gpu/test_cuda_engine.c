/* test_cuda_engine.c: the CUDA backend against the CPU backend on one model directory (run on a
 * GPU machine by tests/gpu/engine.sh): prompt logits per cache dtype, prefill-then-decode against
 * full prefill, greedy replies, mark/truncate, the same bits at prefill chunks of 4096, 1024 and
 * 128 rows, a cancel read between a chunk's layers, the decode step's in-graph op profile (the same logits, its marks read back), two
 * ranks in one process, and the q4 dense option (its quantizer and products against a CPU
 * dequantization first). Table lines last. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "bench/op_marks.h"
#include "bench/op_profile.h"
#include "tests/gpu/cuda_env.h"
#include "cuda/cuda_internal.h"
#include "kernels/engine.h"
#include "kernels/kernels.h"
#include "model/exl3.h"
#include "model/model.h"
#include "tp/split.h"

/* Tolerances relative to the largest |logit| of the CPU reference, per logit row. f32 cache: the
 * GPU computes every step in f32 like the CPU (BF16 weights times a hi + lo bf16 split of the
 * inputs on tensor cores keep 16 bits of each input), only in other summation orders; 1e-3
 * leaves room for those over 8 layers of random weights. A row may still differ more where the
 * indexer's top-k meets a near-tie between two pools (a one-ulp score difference selects another
 * pool): up to 1% of the rows may, and greedy replies must match. The bf16 and fp8 caches round
 * the latent (and indexer) rows; on these random models that alone moves the CPU's own logits by
 * up to 0.2 of their scale (rounding the CPU's latent to bf16 does the same), so those runs are
 * reported against the f32 CPU, bounded only against garbage (NaN). */
#define TOL_F32 1e-3
#define TOL_BF16 (1.0 / 64)
#define TOL_FP8 0.25
#define NVAR 5
#define NEAR_TIE_ROWS(n) ((n) / 100 > 1 ? (n) / 100 : 1)

static int failures;

static void check(int ok, const char *what)
{
    if (!ok) {
        printf("FAIL: %s\n", what);
        failures++;
    }
}

static int argmax(const float *x, int n)
{
    int b = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[b])
            b = i;
    return b;
}

static double max_abs(const float *x, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; i++)
        m = fmax(m, fabs(x[i]));
    return m;
}

static double max_diff(const float *a, const float *b, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (!(d <= m)) /* NaN counts as infinite */
            m = isnan(d) ? INFINITY : d;
    }
    return m;
}

typedef struct run {
    engine_backend be;
    void *st;
} run;

static uint64_t rng = 0x2545f4914f6cdd1dull;

static float frand(void) /* uniform in [-1, 1) */
{
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((double)(rng >> 11) / 9007199254740992.0 * 2 - 1);
}

static uint16_t bf16_of(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}

static float f32_of_bf16(uint16_t b)
{
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* The q4 option's kernels against the CPU: eng_quantize_q4 (scales fp16(amax / 7), every code
 * within half a step of its weight) and the products of the codes read back and dequantized here
 * (eng_matmul at 1, 3, 8 and 20 rows; one eng_matmul_jobs launch with a Q4 and a BF16 job and a
 * SwiGLU pair accumulated into y). Rows of 1536 columns: a full run of 8 tiles and one of 4. */
static void q4_kernels(void)
{
    const int R = 201, Cc = 1536, TM = 20; /* an odd row count: a Q4 warp takes rows in pairs */
    size_t n = (size_t)R * Cc;
    uint16_t *w = malloc(n * 2), *sc = malloc(n / 32 * 2);
    uint8_t *codes = malloc(n / 2);
    float *deq = malloc(n * sizeof *deq), *x = malloc((size_t)TM * Cc * sizeof *x);
    float *y = malloc((size_t)TM * R * sizeof *y), *y0 = malloc((size_t)R * sizeof *y0);
    void *dw = NULL, *dc = NULL, *ds = NULL, *dx = NULL, *dy = NULL, *dy2 = NULL;
    for (size_t i = 0; i < n; i++) /* rows of different magnitudes, a zero group */
        w[i] = bf16_of(frand() * (float)(1 + (i / Cc) % 7) * 0.01f * (i < 32 ? 0.0f : 1.0f));
    for (size_t i = 0; i < (size_t)TM * Cc; i++)
        x[i] = frand();
    for (int r = 0; r < R; r++)
        y0[r] = frand();
    int rc = kern_malloc(&dw, n * 2) || kern_malloc(&dc, n / 2) || kern_malloc(&ds, n / 32 * 2) ||
             kern_malloc(&dx, (size_t)TM * Cc * 4) || kern_malloc(&dy, (size_t)TM * R * 4) ||
             kern_malloc(&dy2, (size_t)R * 4) || kern_to_device(dw, w, n * 2) ||
             kern_to_device(dx, x, (size_t)TM * Cc * 4);
    eng_mat src = {.dtype = ENG_BF16, .rows = R, .cols = Cc, .data = dw}, q = {0};
    rc = rc || eng_quantize_q4(&src, dc, ds, &q, NULL) || kern_sync() ||
         kern_to_host(codes, dc, n / 2) || kern_to_host(sc, ds, n / 32 * 2);
    check(rc == 0 && q.dtype == ENG_Q4, "q4: the quantizer ran");
    if (rc)
        goto out;
    int bad_scale = 0, bad_code = 0;
    for (int r = 0; r < R; r++)
        for (int g = 0; g < Cc / 32; g++) {
            float amax = 0;
            for (int i = 0; i < 32; i++)
                amax = fmaxf(amax, fabsf(f32_of_bf16(w[(size_t)r * Cc + g * 32 + i])));
            size_t byte, si;
            eng_q4_offsets(Cc, g * 32, &byte, &si);
            uint16_t s16 = sc[(size_t)r * (Cc / 32) + si];
            bad_scale += s16 != exl3_f16_from_f64((double)(amax / 7.0f));
            float s = exl3_f16_to_f32(s16);
            for (int i = 0; i < 32; i++) {
                int c = g * 32 + i;
                eng_q4_offsets(Cc, c, &byte, &si);
                uint8_t b = codes[(size_t)r * (Cc / 2) + byte];
                int code = (c % 2) ? b >> 4 : b & 15;
                float v = (float)(code - 8) * s, ref = f32_of_bf16(w[(size_t)r * Cc + c]);
                deq[(size_t)r * Cc + c] = v;
                bad_code += code < 1 || fabsf(v - ref) > 0.5f * s * 1.001f + 1e-12f;
            }
        }
    char what[200];
    snprintf(what, sizeof what, "q4: scales fp16(amax / 7) (%d wrong), codes within half a step "
             "(%d wrong)", bad_scale, bad_code);
    check(bad_scale == 0 && bad_code == 0, what);
    const int Ts[4] = {1, 3, 8, TM};
    for (int k = 0; k < 4; k++) {
        int T = Ts[k];
        rc = eng_matmul(&q, dx, T, dy, NULL) || kern_sync() ||
             kern_to_host(y, dy, (size_t)T * R * 4);
        double md = 0, mr = 0;
        for (int t = 0; !rc && t < T; t++)
            for (int r = 0; r < R; r++) {
                double a = 0;
                for (int c = 0; c < Cc; c++)
                    a += (double)deq[(size_t)r * Cc + c] * x[(size_t)t * Cc + c];
                md = fmax(md, fabs(a - y[(size_t)t * R + r]));
                mr = fmax(mr, fabs(a));
            }
        snprintf(what, sizeof what, "q4: the product of %d rows equals the CPU's of the codes "
                 "(max |diff| %.3g of %.3g)", T, md, mr);
        check(rc == 0 && md <= 1e-5 * mr, what);
    }
    /* one launch: a plain Q4 job into dy, a SwiGLU pair (Q4 gate, BF16 up) added into dy2 */
    eng_gemv_job jobs[2] = {{&q, NULL, dx, dy, 0.0f, 0}, {&q, &src, dx, dy2, 0.05f, 1}};
    float *y2 = malloc((size_t)R * sizeof *y2);
    rc = kern_to_device(dy2, y0, (size_t)R * 4) || eng_matmul_jobs(jobs, 2, 1, NULL) ||
         kern_sync() || kern_to_host(y, dy, (size_t)R * 4) || kern_to_host(y2, dy2, (size_t)R * 4);
    double md = 0, mr = 0;
    for (int r = 0; !rc && r < R; r++) {
        double g = 0, u = 0;
        for (int c = 0; c < Cc; c++) {
            g += (double)deq[(size_t)r * Cc + c] * x[c];
            u += (double)f32_of_bf16(w[(size_t)r * Cc + c]) * x[c];
        }
        double gl = fmin(g, 0.05), ul = fmin(fmax(u, -0.05), 0.05);
        double want = y0[r] + gl / (1 + exp(-gl)) * ul;
        md = fmax(md, fmax(fabs(g - y[r]), fabs(want - y2[r]) * 100));
        mr = fmax(mr, fabs(g));
    }
    snprintf(what, sizeof what, "q4: one launch of a Q4 job and a SwiGLU pair added into y "
             "(max |diff| %.3g of %.3g)", md, mr);
    check(rc == 0 && md <= 1e-5 * mr, what);
    free(y2);
out:
    kern_free(dw), kern_free(dc), kern_free(ds), kern_free(dx), kern_free(dy), kern_free(dy2);
    free(w), free(sc), free(codes), free(deq), free(x), free(y), free(y0);
}

/* The settings the next CUDA runs take over the environment's (the cache formats and the
 * dense format of the variant under test; 0 fields: the environment's). */
static struct {
    glm_kv_cache kv, kv_index;
    glm_dense_format dense;
    int verbose;
    int chunk; /* cuda_chunk; 0: the plan's */
} g_variant;

static void print_log(void *user, int level, const char *msg)
{
    (void)user;
    (void)level;
    printf("  engine: %s\n", msg);
}

static void apply_variant(glm_engine_params *p, void *user)
{
    (void)user;
    if (g_variant.kv)
        p->kv_cache = g_variant.kv;
    if (g_variant.kv_index)
        p->cuda.kv_index = g_variant.kv_index;
    if (g_variant.dense)
        p->dense = g_variant.dense;
    p->verbose |= g_variant.verbose;
    p->cuda.chunk = g_variant.chunk;
    /* the exact products unless the environment names a form: every check here is against the
     * CPU's exact products (test_cuda_emulate judges the CUDA default, onepart, against the CPU's
     * emulation of it) */
    if (p->cuda.gemm == GLM_CUDA_GEMM_DEFAULT)
        p->cuda.gemm = GLM_CUDA_GEMM_FIXED;
    p->log = print_log;
}

static glm_kv_cache kv_named(const char *name)
{
    return strcmp(name, "f32") == 0 ? GLM_KV_CACHE_F32
           : strcmp(name, "bf16") == 0 ? GLM_KV_CACHE_BF16 : GLM_KV_CACHE_FP8;
}

static int open_run(const glm_model *m, int cuda, run *r, glm_error *err)
{
    glm_status s = cuda ? gpu_open_cuda_edit(m, apply_variant, NULL, &r->be, err)
                        : backend_open_cpu(m, 0, &r->be, err);
    if (s)
        return -1;
    r->st = r->be.ops->state_new(r->be.impl, err);
    return r->st ? 0 : -1;
}

static void close_run(run *r)
{
    if (r->st)
        r->be.ops->state_free(r->st);
    backend_close(&r->be);
    r->st = NULL;
}

static int prefill(run *r, const int32_t *tok, int n, float *out, int all_rows, glm_error *err)
{
    return r->be.ops->prefill(r->be.impl, r->st, tok, n, out, all_rows, err) == GLM_OK ? 0 : -1;
}

/* Greedy continuation of n tokens from the state's current logits `last`. */
static int greedy(run *r, float *last, int V, int n, int32_t *out, glm_error *err)
{
    for (int i = 0; i < n; i++) {
        out[i] = argmax(last, V);
        if (prefill(r, &out[i], 1, last, 0, err))
            return -1;
    }
    return 0;
}

/* ---- two ranks in one process: two threads and a host exchange ------------------------- */

typedef struct pair_ex {
    pthread_barrier_t bar;
    float *bufs[2];
    const float *mine[2];
    size_t n;
} pair_ex;

typedef struct rank_ctx {
    pair_ex *ex;
    int rank;
    glm_model *m;
    tp_split_owned owned;
    run r;
    const int32_t *tok;
    int n;
    float *logits;
    int rc;
    glm_error err;
    /* rank 0's cancel, set before a first prefill that both ranks must stop after layer 1 (the
     * ranks agree through their flags' exchange; rank 1's flag stays 0, as a worker's does) */
    atomic_int *cancel;
    glm_status canceled;
    char canceled_msg[sizeof(glm_error){0}.message];
} rank_ctx;

static glm_status ex_reduce(void *user, float *buf, size_t n, glm_error *err)
{
    rank_ctx *c = user;
    (void)err;
    pair_ex *e = c->ex;
    e->bufs[c->rank] = buf;
    pthread_barrier_wait(&e->bar);
    float *tmp = malloc(n * sizeof *tmp);
    for (size_t i = 0; tmp && i < n; i++)
        tmp[i] = e->bufs[0][i] + e->bufs[1][i];
    pthread_barrier_wait(&e->bar);
    if (tmp)
        memcpy(buf, tmp, n * sizeof *tmp);
    free(tmp);
    pthread_barrier_wait(&e->bar);
    return tmp ? GLM_OK : GLM_ERR_NOMEM;
}

static glm_status ex_gather(void *user, const float *mine, float *all, size_t n, glm_error *err)
{
    rank_ctx *c = user;
    (void)err;
    pair_ex *e = c->ex;
    e->mine[c->rank] = mine;
    pthread_barrier_wait(&e->bar);
    for (int r = 0; r < 2; r++) /* a rank's own floats may already be in place (the reduce's) */
        if (all + (size_t)r * n != e->mine[r])
            memcpy(all + (size_t)r * n, e->mine[r], n * sizeof *all);
    pthread_barrier_wait(&e->bar);
    return GLM_OK;
}

static void *rank_main(void *arg)
{
    rank_ctx *c = arg;
    backend_collective coll = {.all_reduce = ex_reduce, .all_gather = ex_gather, .user = c,
                               .rank = c->rank, .world = 2};
    atomic_int never;
    atomic_init(&never, 0);
    c->rc = -1;
    if (open_run(c->m, 1, &c->r, &c->err) == 0) {
        const backend_ops *ops = c->r.be.ops;
        ops->state_set_collective(c->r.st, &coll);
        ops->state_set_cancel(c->r.st, c->rank == 0 ? c->cancel : &never);
        glm_error e = {0};
        c->canceled = ops->prefill(c->r.be.impl, c->r.st, c->tok, c->n, c->logits, 1, &e);
        snprintf(c->canceled_msg, sizeof c->canceled_msg, "%s", e.message);
        ops->state_reset(c->r.st);
        if (c->rank == 0) /* read by this rank's own next exchange: no race with rank 1 */
            atomic_store(c->cancel, 0);
        c->rc = prefill(&c->r, c->tok, c->n, c->logits, 1, &c->err);
    }
    return NULL;
}

/* Rank 0's all-row logits of a two-rank CUDA run, or -1. */
static int two_ranks(const char *dir, const int32_t *tok, int n, float *logits0, float *logits1)
{
    pair_ex ex = {0};
    pthread_barrier_init(&ex.bar, NULL, 2);
    rank_ctx ctx[2];
    memset(ctx, 0, sizeof ctx);
    pthread_t th[2];
    int ok = 1;
    atomic_int cancel;
    atomic_init(&cancel, 1);
    for (int r = 0; r < 2; r++) {
        ctx[r].cancel = &cancel;
        ctx[r].ex = &ex;
        ctx[r].rank = r;
        ctx[r].tok = tok;
        ctx[r].n = n;
        ctx[r].logits = r ? logits1 : logits0;
        ctx[r].m = glm_model_open(dir, &ctx[r].err);
        if (!ctx[r].m || tp_split_model(ctx[r].m, r, &ctx[r].owned, &ctx[r].err)) {
            printf("two ranks: %s\n", ctx[r].err.message);
            ok = 0;
        }
    }
    for (int r = 0; ok && r < 2; r++)
        pthread_create(&th[r], NULL, rank_main, &ctx[r]);
    for (int r = 0; ok && r < 2; r++)
        pthread_join(th[r], NULL);
    for (int r = 0; ok && r < 2; r++) {
        char what[1400];
        snprintf(what, sizeof what, "two CUDA ranks: rank 0's cancel stops rank %d after layer 1 "
                 "as rank 0 (status %d: %s)", r, (int)ctx[r].canceled, ctx[r].canceled_msg);
        check(ctx[r].canceled == GLM_ERR_CANCELED && strstr(ctx[r].canceled_msg, "at layer 1 of") &&
              strcmp(ctx[r].canceled_msg, ctx[0].canceled_msg) == 0, what);
    }
    for (int r = 0; r < 2; r++) {
        if (ok && ctx[r].rc)
            printf("two ranks: rank %d: %s\n", r, ctx[r].err.message);
        ok = ok && ctx[r].rc == 0;
        close_run(&ctx[r].r);
        tp_split_owned_free(&ctx[r].owned);
        glm_model_close(ctx[r].m);
    }
    pthread_barrier_destroy(&ex.bar);
    return ok ? 0 : -1;
}

/* Elements whose bits differ (a NaN is compared by its bits too). */
static size_t bits_differ(const float *a, const float *b, size_t n)
{
    size_t d = 0;
    for (size_t i = 0; i < n; i++)
        d += memcmp(&a[i], &b[i], sizeof *a) != 0;
    return d;
}

/* The prefill chunk does not change a row's result: the prompt prefilled (f32 caches, all rows'
 * logits) in chunks of 4096, 1024 and 128 rows gives the same bits (prompt reuse across chunk
 * sizes, and across a kept state resumed at another chunk, relies on it). */
static void chunk_invariance(const glm_model *m, const int32_t *tok, int N, int V,
                             const char *label, char *line, size_t cap)
{
    static const int chunks[] = {4096, 1024, 128};
    size_t NV = (size_t)N * V;
    float *first = malloc(NV * sizeof *first), *got = malloc(NV * sizeof *got);
    g_variant.kv = g_variant.kv_index = GLM_KV_CACHE_F32;
    int n = snprintf(line, cap, "%-24s chunks    ", label);
    { /* no chunk given: the plan's own, the cap where the memory allows it (a small model) */
        run gpu = {0};
        glm_error err = {0};
        g_variant.chunk = 0;
        char what[1400];
        int opened = open_run(m, 1, &gpu, &err) == 0;
        const cuda_plan *plan = opened ? backend_cuda_plan(&gpu.be) : NULL;
        snprintf(what, sizeof what, "%s: the plan picks prefill chunks of %d rows by itself (%d "
                 "expected) %s", label, plan ? plan->chunk : -1, CUDA_CHUNK_CAP, err.message);
        check(plan && plan->chunk == CUDA_CHUNK_CAP && !plan->chunk_given, what);
        close_run(&gpu);
    }
    for (int i = 0; i < 3 && first && got; i++) {
        g_variant.chunk = chunks[i];
        run gpu = {0};
        glm_error err = {0};
        char what[1400];
        if (open_run(m, 1, &gpu, &err) || prefill(&gpu, tok, N, i ? got : first, 1, &err)) {
            snprintf(what, sizeof what, "%s: prefill in chunks of %d rows: %s", label, chunks[i],
                     err.message);
            check(0, what);
            close_run(&gpu);
            break;
        }
        const cuda_plan *plan = backend_cuda_plan(&gpu.be);
        snprintf(what, sizeof what, "%s: cuda_chunk %d gives the plan's chunk (%d)", label,
                 chunks[i], plan ? plan->chunk : -1);
        check(plan && plan->chunk == chunks[i] && plan->chunk_given, what);
        close_run(&gpu);
        if (i == 0)
            continue;
        size_t d = bits_differ(first, got, NV);
        snprintf(what, sizeof what, "%s: logits in chunks of %d rows equal those in chunks of %d "
                 "bit for bit (%zu of %zu differ)", label, chunks[i], chunks[0], d, NV);
        check(d == 0, what);
        n += snprintf(line + n, cap > (size_t)n ? cap - (size_t)n : 0, "%d vs %d: %zu of %zu "
                      "logits differ%s", chunks[i], chunks[0], d, NV, i < 2 ? "; " : "");
    }
    if (!first || !got)
        check(0, "memory for the chunk comparison");
    g_variant.chunk = 0;
    free(first);
    free(got);
}

/* The CUDA backend opened with the default params runs its BF16 prefill products in one fp16 part
 * (onepart) and says so in its cache format (the two-rank handshake, snapshots); the CPU backend
 * with the same params runs them exactly. */
static void default_is_one_part(const glm_model *m, const char *label)
{
    glm_engine_params p = glm_engine_default_params();
    backend_settings s;
    engine_backend cu = {0}, cpu = {0};
    glm_error err = {0};
    int ok = backend_resolve_settings(m, &p, GLM_BACKEND_CUDA, &s, &err) == GLM_OK &&
             backend_open_cuda_with(m, &s, &cu, &err) == GLM_OK;
    uint32_t tag = ok ? cu.ops->cache_format(cu.impl) : 0;
    char what[1200];
    snprintf(what, sizeof what, "%s: the CUDA default runs onepart (cache format %08x%s%s)", label,
             (unsigned)tag, ok ? "" : ": ", ok ? "" : err.message);
    check(ok && ((cuda_backend *)cu.impl)->one_part && (tag & BACKEND_ONE_PART), what);
    if (ok)
        backend_close(&cu);
    ok = backend_resolve_settings(m, &p, GLM_BACKEND_CPU, &s, &err) == GLM_OK &&
         backend_open_cpu_with(m, 0, &s, &cpu, &err) == GLM_OK;
    tag = ok ? cpu.ops->cache_format(cpu.impl) : 0;
    snprintf(what, sizeof what, "%s: the CPU default runs exactly (cache format %08x%s%s)", label,
             (unsigned)tag, ok ? "" : ": ", ok ? "" : err.message);
    check(ok && !(tag & BACKEND_ONE_PART), what);
    if (ok)
        backend_close(&cpu);
}

/* A prefill chunk reads the session's cancel one layer behind the GPU (f32 caches, chunks of 128):
 * set before the call, the prompt stops after two layers with GLM_ERR_CANCELED naming layer 2 and
 * the state's length unchanged; rows of the decode forms (CUDA_DECODE_T at most) run to the end
 * regardless; after a reset with the flag clear the prompt gives the uncanceled logits bit for bit
 * (nothing the canceled chunk left behind leaks into the next prompt). */
static void cancel_between_layers(const glm_model *m, const int32_t *tok, int N, int V,
                                  const char *label)
{
    int L = m->cfg.num_layers;
    char what[1400];
    if (L < 2 || N <= 2 * CUDA_DECODE_T) {
        snprintf(what, sizeof what, "%s: a cancel between layers needs 2 layers and %d tokens "
                 "(%d, %d)", label, 2 * CUDA_DECODE_T + 1, L, N);
        check(0, what);
        return;
    }
    size_t NV = (size_t)N * V;
    float *whole = malloc(NV * sizeof *whole), *again = malloc(NV * sizeof *again);
    g_variant.kv = g_variant.kv_index = GLM_KV_CACHE_F32;
    g_variant.chunk = 128;
    run gpu = {0};
    glm_error err = {0};
    atomic_int flag;
    atomic_init(&flag, 0);
    int ok = whole && again && open_run(m, 1, &gpu, &err) == 0 &&
             prefill(&gpu, tok, N, whole, 1, &err) == 0;
    snprintf(what, sizeof what, "%s: the uncanceled prefill ran (%s)", label, err.message);
    check(ok, what);
    if (ok) {
        const backend_ops *ops = gpu.be.ops;
        ops->state_reset(gpu.st);
        ops->state_set_cancel(gpu.st, &flag);
        atomic_store(&flag, 1);
        glm_error cerr = {0};
        glm_status cs = ops->prefill(gpu.be.impl, gpu.st, tok, N, again, 1, &cerr);
        char want[64], stopped[sizeof cerr.message];
        snprintf(want, sizeof want, "at layer 2 of %d", L);
        snprintf(stopped, sizeof stopped, "%s", cerr.message);
        snprintf(what, sizeof what, "%s: a prompt of %d tokens with the cancel set stops at its "
                 "second layer (status %d, length %d: %s)", label, N, (int)cs,
                 ops->state_length(gpu.st), stopped);
        check(cs == GLM_ERR_CANCELED && strstr(stopped, want) && ops->state_length(gpu.st) == 0,
              what);
        ops->state_reset(gpu.st);
        cs = ops->prefill(gpu.be.impl, gpu.st, tok, CUDA_DECODE_T, again, 1, &cerr);
        int ran = cs == GLM_OK && ops->state_length(gpu.st) == CUDA_DECODE_T;
        snprintf(what, sizeof what, "%s: %d rows (the decode forms') run through a set cancel "
                 "(status %d, length %d: %s)", label, CUDA_DECODE_T, (int)cs,
                 ops->state_length(gpu.st), cs ? cerr.message : "");
        check(ran, what);
        atomic_store(&flag, 0);
        ops->state_reset(gpu.st);
        cs = ops->prefill(gpu.be.impl, gpu.st, tok, N, again, 1, &cerr);
        size_t d = cs == GLM_OK ? bits_differ(whole, again, NV) : NV;
        snprintf(what, sizeof what, "%s: after a canceled prompt and a reset the prompt's logits "
                 "equal the uncanceled ones bit for bit (%zu of %zu differ%s%s)", label, d, NV,
                 cs ? ": " : "", cs ? cerr.message : "");
        check(d == 0, what);
        /* marked at 16 tokens, canceled within the next chunk: back at the mark (the layers
         * that ran put back), and the rest run from there gives the uncanceled rows' bits */
        enum { K = 16 };
        ops->state_reset(gpu.st);
        glm_status ks = ops->prefill(gpu.be.impl, gpu.st, tok, K, NULL, 0, &cerr);
        if (!ks)
            ks = ops->state_mark(gpu.st, &cerr);
        atomic_store(&flag, 1);
        cs = ks ? ks : ops->prefill(gpu.be.impl, gpu.st, tok + K, N - K, again, 1, &cerr);
        int kept = cs == GLM_ERR_CANCELED && ops->state_length(gpu.st) == K &&
                   ops->state_mark_length && ops->state_mark_length(gpu.st) == K;
        snprintf(what, sizeof what, "%s: marked at %d, a canceled prompt goes back to the mark "
                 "(status %d, length %d, mark %d: %s)", label, K, (int)cs,
                 ops->state_length(gpu.st), ops->state_mark_length ? ops->state_mark_length(gpu.st) : -2,
                 cerr.message);
        check(kept, what);
        atomic_store(&flag, 0);
        cs = ops->prefill(gpu.be.impl, gpu.st, tok + K, N - K, again, 1, &cerr);
        size_t dk = cs == GLM_OK ? bits_differ(whole + (size_t)K * V, again, (size_t)(N - K) * V)
                                 : NV;
        snprintf(what, sizeof what, "%s: the rest run from the mark equals the uncanceled rows bit "
                 "for bit (%zu differ%s%s)", label, dk, cs ? ": " : "", cs ? cerr.message : "");
        check(kept && dk == 0, what);
        printf("%-24s cancel    set before a prompt of %d: \"%s\"; %d rows through it: %s; "
               "after a reset %zu of %zu logits differ; marked at %d: %s, the rest %zu differ\n",
               label, N, stopped, CUDA_DECODE_T, ran ? "ran" : "FAILED", d, NV, K,
               kept ? "kept" : "NOT KEPT", dk);
    }
    close_run(&gpu);
    g_variant.chunk = 0;
    free(whole);
    free(again);
}

/* The profiled graph replayed between two events of this stream (e0 before, e1 after): its marks
 * must all fall between them, so each replay records them anew; *whole_us: e0 to e1. */
static int replay_between(cuda_backend *cb, void *g, op_mark *m, double *whole_us, int *inside)
{
    void *e0 = NULL, *e1 = NULL;
    float ms = 0, before = -1, after = -1;
    int rc = eng_event_new(&e0) || eng_event_new(&e1) || eng_event_record(e0, cb->stream) ||
             eng_graph_launch(g, cb->stream) || eng_event_record(e1, cb->stream) ||
             eng_event_ms(e0, e1, &ms) || eng_event_ms(e0, cb->prof.ev[0], &before) ||
             eng_event_ms(cb->prof.ev[cb->prof.n - 1], e1, &after) || op_marks_read(cb, m);
    *whole_us = ms * 1000.0;
    *inside = before >= 0 && after >= 0;
    eng_event_free(e0);
    eng_event_free(e1);
    return rc ? -1 : 0;
}

/* The decode step as cuda_decode_graph_profiled captures it (a graph of its own with an event
 * record node after each op): the same logits as the step's own graph bit for bit (same kernels
 * in the same order), that graph kept, and the marks read back from a replay: each inside it,
 * attributed by bench/op_profile.c, the main stream's span within the replay's time. */
static void graph_profile(const glm_model *m, const int32_t *tok, int N, int V, const char *label,
                          char *line, size_t cap)
{
    g_variant.kv = g_variant.kv_index = GLM_KV_CACHE_F32;
    run gpu = {0};
    glm_error err = {0};
    int P = N / 2, inside = 0;
    float *a = malloc((size_t)V * sizeof *a);
    op_mark *marks = malloc(CUDA_PROF_MAX * sizeof *marks);
    int ok = a && marks && open_run(m, 1, &gpu, &err) == 0 &&
             prefill(&gpu, tok, P, NULL, 0, &err) == 0 &&
             gpu.be.ops->state_mark(gpu.st, &err) == GLM_OK &&
             prefill(&gpu, &tok[P], 1, a, 0, &err) == 0; /* through the step's own graph */
    cuda_state *s = gpu.st;
    void *plain = ok ? s->graph : NULL, *g = NULL;
    ok = ok && plain && gpu.be.ops->state_truncate(s, P, &err) == GLM_OK &&
         cuda_decode_graph_profiled(s, &g, NULL, &err) == GLM_OK;
    char what[1400];
    snprintf(what, sizeof what, "%s: the profiled decode graph captured (%s)", label, err.message);
    check(ok, what);
    cuda_backend *cb = ok ? s->be : NULL;
    size_t differ = (size_t)V;
    if (ok) { /* the same token at the same position, copied in as cuda_decode_graph does */
        s->h_tokens[0] = tok[P];
        *s->h_pos = s->n;
        ok = eng_copy_async(s->d_tokens, s->h_tokens, sizeof(int32_t), cb->stream) == 0 &&
             eng_copy_async(s->d_pos, s->h_pos, sizeof(int), cb->stream) == 0 &&
             eng_graph_launch(g, cb->stream) == 0 && eng_stream_sync(cb->stream) == 0;
        differ = ok ? bits_differ(a, s->h_logits, (size_t)V) : (size_t)V;
    }
    snprintf(what, sizeof what, "%s: the profiled graph's logits equal the step graph's bit for "
             "bit (%zu of %d differ), that graph kept", label, differ, V);
    check(ok && differ == 0 && s->graph == plain, what);
    double whole = 0;
    op_profile p;
    char why[256] = "not read";
    int built = ok && replay_between(cb, g, marks, &whole, &inside) == 0 &&
                op_profile_build(marks, cb->prof.n, &p, why, sizeof why) == 0;
    int sides = 0, monotone = 1;
    double prev = 0;
    for (int i = 0; built && i < cb->prof.n; i++) {
        sides += marks[i].side;
        if (!marks[i].side && marks[i].t_us < prev)
            monotone = 0;
        prev = marks[i].side ? prev : marks[i].t_us;
    }
    snprintf(what, sizeof what, "%s: the profiled graph's %d marks (%d on the side stream) read "
             "back from each replay, main stream in order, its span %.1f us within the replay's "
             "%.1f us (%s)", label, ok ? cb->prof.n : 0, sides, built ? p.total_us : -1.0, whole,
             built ? "attributed" : why);
    check(built && inside && monotone && p.total_us > 0 && p.total_us <= whole + 1.0, what);
    snprintf(line, cap, "%-24s in-graph profile: %d marks (%d side), main span %.1f us of a "
             "%.1f us replay, logits %s", label, ok ? cb->prof.n : 0, sides,
             built ? p.total_us : -1.0, whole, differ == 0 ? "equal" : "DIFFER");
    eng_graph_free(g);
    close_run(&gpu);
    free(a);
    free(marks);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: test_cuda_engine MODEL_DIR [PROMPT_TOKENS] [GREEDY_TOKENS] [LABEL]\n");
        return 2;
    }
    const char *dir = argv[1];
    int N = argc > 2 ? atoi(argv[2]) : 40, G = argc > 3 ? atoi(argv[3]) : 200;
    const char *label = argc > 4 ? argv[4] : dir;
    glm_error err = {0};
    q4_kernels();
    glm_model *m = glm_model_open(dir, &err);
    if (!m) {
        printf("FAIL: %s: %s\n", dir, err.message);
        return 1;
    }
    int V = m->cfg.vocab_size;
    int32_t *tok = malloc((size_t)N * sizeof *tok);
    uint64_t x = 0x9e3779b97f4a7c15ull;
    for (int i = 0; i < N; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        tok[i] = (int32_t)((x >> 33) % (uint64_t)(V < 4096 ? V : 4096));
    }
    size_t NV = (size_t)N * V;
    float *ref = malloc(NV * sizeof *ref), *got = malloc(NV * sizeof *got);
    float *step = malloc(NV * sizeof *step), *last = malloc((size_t)V * sizeof *last);
    int32_t *gref = malloc((size_t)G * sizeof *gref), *ggot = malloc((size_t)G * sizeof *ggot);
    run cpu = {0};
    if (open_run(m, 0, &cpu, &err) || prefill(&cpu, tok, N, ref, 1, &err)) {
        printf("FAIL: the CPU backend: %s\n", err.message);
        return 1;
    }
    memcpy(last, ref + (size_t)(N - 1) * V, (size_t)V * sizeof *last);
    if (greedy(&cpu, last, V, G, gref, &err)) {
        printf("FAIL: CPU greedy: %s\n", err.message);
        return 1;
    }
    close_run(&cpu);
    double scale = fmax(1e-6, max_abs(ref, NV));
    /* latent cache dtype, indexer caches' dtype, tolerance */
    const char *kvs[NVAR] = {"f32", "bf16", "fp8", "bf16", "fp8"};
    const char *kvis[NVAR] = {"f32", "bf16", "fp8", "f32", "f32"};
    const double tol[NVAR] = {TOL_F32, TOL_BF16, TOL_FP8, TOL_BF16, TOL_FP8};
    char line[NVAR][320];
    for (int k = 0; k < NVAR; k++) {
        char kvname[32];
        snprintf(kvname, sizeof kvname, "%s/%s", kvs[k], kvis[k]);
        g_variant.kv = kv_named(kvs[k]);
        g_variant.kv_index = kv_named(kvis[k]);
        run gpu = {0}, gpu2 = {0};
        char what[160];
        if (open_run(m, 1, &gpu, &err) || prefill(&gpu, tok, N, got, 1, &err)) {
            printf("FAIL: %s: the CUDA backend (%s): %s\n", label, kvname, err.message);
            failures++;
            close_run(&gpu);
            snprintf(line[k], sizeof line[k], "%-24s %-9s failed", label, kvname);
            continue;
        }
        double d = max_diff(ref, got, NV);
        int over = 0, first = -1;
        for (int t = 0; t < N; t++)
            if (max_diff(ref + (size_t)t * V, got + (size_t)t * V, (size_t)V) > tol[k] * scale) {
                over++;
                first = first < 0 ? t : first;
            }
        snprintf(what, sizeof what, "%s %s: prompt logits max |diff| %.3g > %.3g x max |logit| %.3g "
                 "(%d of %d rows over, the first at %d)", label, kvname, d, tol[k], scale, over, N,
                 first);
        if (k == 0)
            check(over <= NEAR_TIE_ROWS(N), what);
        check(isfinite(d), what);
        /* prefill the first half, decode the rest one token at a time (the graph) */
        int P = N / 2;
        double dstep = INFINITY;
        int step_over = N;
        if (open_run(m, 1, &gpu2, &err) == 0 && prefill(&gpu2, tok, P, step, 1, &err) == 0) {
            int ok = 1;
            for (int t = P; ok && t < N; t++)
                ok = prefill(&gpu2, &tok[t], 1, step + (size_t)t * V, 0, &err) == 0;
            if (ok) {
                dstep = max_diff(got, step, NV);
                step_over = 0;
                for (int t = 0; t < N; t++)
                    step_over += max_diff(got + (size_t)t * V, step + (size_t)t * V, (size_t)V) >
                                 tol[k] * scale;
            }
            /* mark, decode 3, truncate back, decode the same 3 again: equal logits */
            float *a = malloc(3 * (size_t)V * sizeof *a), *b = malloc(3 * (size_t)V * sizeof *b);
            int32_t more[3] = {1, 2, 3};
            ok = ok && a && b && gpu2.be.ops->state_mark(gpu2.st, &err) == GLM_OK;
            for (int i = 0; ok && i < 3; i++)
                ok = prefill(&gpu2, &more[i], 1, a + (size_t)i * V, 0, &err) == 0;
            ok = ok && gpu2.be.ops->state_truncate(gpu2.st, N, &err) == GLM_OK;
            for (int i = 0; ok && i < 3; i++)
                ok = prefill(&gpu2, &more[i], 1, b + (size_t)i * V, 0, &err) == 0;
            snprintf(what, sizeof what, "%s %s: mark/truncate replays the same logits", label, kvname);
            check(ok && max_diff(a, b, 3 * (size_t)V) == 0, what);
            free(a);
            free(b);
        }
        if (!isfinite(dstep))
            printf("prefill-then-decode failed: %s\n", err.message);
        snprintf(what, sizeof what, "%s %s: prefill-then-decode against full prefill %.3g (%d rows "
                 "over)", label, kvname, dstep, step_over);
        check(step_over <= NEAR_TIE_ROWS(N), what);
        close_run(&gpu2);
        memcpy(last, got + (size_t)(N - 1) * V, (size_t)V * sizeof *last);
        int same = 0;
        if (greedy(&gpu, last, V, G, ggot, &err) == 0)
            while (same < G && ggot[same] == gref[same])
                same++;
        else
            printf("greedy failed: %s\n", err.message);
        if (k == 0) {
            snprintf(what, sizeof what, "%s f32: greedy reply matches the CPU for %d of %d tokens",
                     label, same, G);
            check(same == G, what);
        }
        close_run(&gpu);
        snprintf(line[k], sizeof line[k],
                 "%-24s %-9s max|diff| %.3e (rel %.2e, %3d/%d rows over)  step-vs-prefill %.3e  "
                 "greedy %d/%d", label, kvname, d, d / scale, over, N, dstep, same, G);
    }
    char chunk_line[320];
    chunk_invariance(m, tok, N, V, label, chunk_line, sizeof chunk_line);
    cancel_between_layers(m, tok, N, V, label);
    default_is_one_part(m, label);
    char profile_line[320];
    graph_profile(m, tok, N, V, label, profile_line, sizeof profile_line);
    /* two ranks in one process (f32 cache) against one rank */
    char split_line[256] = "";
    if (m->cfg.kda_heads % 2 == 0 && m->cfg.num_heads % 2 == 0 && V % 2 == 0 &&
        m->cfg.intermediate_size % 2 == 0 && m->cfg.moe_intermediate_size % 2 == 0 && !m->cfg.exl3) {
        g_variant.kv = g_variant.kv_index = GLM_KV_CACHE_F32;
        float *l1 = malloc(NV * sizeof *l1);
        if (two_ranks(dir, tok, N, step, l1) == 0) {
            double d = max_diff(ref, step, NV), d01 = max_diff(step, l1, NV);
            int over = 0;
            for (int t = 0; t < N; t++)
                over += max_diff(ref + (size_t)t * V, step + (size_t)t * V, (size_t)V) > TOL_F32 * scale;
            char what[160];
            snprintf(what, sizeof what, "%s: two CUDA ranks against the CPU %.3g (%d rows over)", label,
                     d, over);
            check(over <= NEAR_TIE_ROWS(N), what);
            check(d01 == 0, "two CUDA ranks: rank 1's logits equal rank 0's");
            snprintf(split_line, sizeof split_line, "%-24s 2 ranks   max|diff| %.3e (rel %.2e, %3d/%d "
                     "rows over), ranks equal: %s", label, d, d / scale, over, N,
                     d01 == 0 ? "yes" : "no");
        } else {
            check(0, "two CUDA ranks in one process ran");
        }
        free(l1);
    }
    /* the q4 dense option (f32 caches): its logits against the CPU's of the stored weights */
    char q4_line[256];
    {
        g_variant.kv = g_variant.kv_index = GLM_KV_CACHE_F32;
        g_variant.dense = GLM_DENSE_Q4;
        g_variant.verbose = 1; /* the count of matrices requantized */
        run gpu = {0};
        if (open_run(m, 1, &gpu, &err) || prefill(&gpu, tok, N, got, 1, &err)) {
            printf("FAIL: %s: the CUDA backend with q4 dense weights: %s\n", label, err.message);
            failures++;
            snprintf(q4_line, sizeof q4_line, "%-24s q4 dense  failed", label);
        } else {
            double d = max_diff(ref, got, NV), num = 0, den = 0;
            for (size_t i = 0; i < NV; i++) {
                num += ((double)got[i] - ref[i]) * ((double)got[i] - ref[i]);
                den += (double)ref[i] * ref[i];
            }
            memcpy(last, got + (size_t)(N - 1) * V, (size_t)V * sizeof *last);
            int same = 0;
            if (greedy(&gpu, last, V, G, ggot, &err) == 0)
                while (same < G && ggot[same] == gref[same])
                    same++;
            char what[160];
            snprintf(what, sizeof what, "%s q4 dense: finite logits (max |diff| %.3g)", label, d);
            check(isfinite(d), what);
            snprintf(q4_line, sizeof q4_line, "%-24s q4 dense  max|diff| %.3e (rel %.2e), "
                     "|diff|/|ref| %.3e over all logits, greedy %d/%d", label, d, d / scale,
                     den > 0 ? sqrt(num / den) : 0.0, same, G);
        }
        close_run(&gpu);
        g_variant.dense = GLM_DENSE_DEFAULT;
        g_variant.verbose = 0;
    }
    for (int k = 0; k < NVAR; k++)
        printf("%s\n", line[k]);
    printf("%s\n", q4_line);
    printf("%s\n", chunk_line);
    printf("%s\n", profile_line);
    if (*split_line)
        printf("%s\n", split_line);
    free(tok);
    free(ref);
    free(got);
    free(step);
    free(last);
    free(gref);
    free(ggot);
    glm_model_close(m);
    return failures ? 1 : 0;
}
