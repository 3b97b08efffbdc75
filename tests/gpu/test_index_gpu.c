/* test_index_gpu.c: the DSA indexer's top-k (eng_dsa_topk) against the CPU backend's rule (sort by
 * score, ties to the lower pool, tokens in order, the open tail) index for index, its scores
 * (eng_dsa_scores) against an fp64 reference for every cache format and the stream score kernel's
 * against the tile kernel's bit for bit, and its time (eng_dsa_select, its scores and its top-k
 * alone; launched one by one and replayed as a graph, as the engine's decode step is) at positions
 * 1k (every pool taken) to 256k for a prefill chunk and for decode, and the two score kernels' at
 * 8k to 1M. Usage: test_index_gpu [--no-time]; exit status 1 on any failure. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/engine.h"
#include "kernels/gemm_fp16x2.h"
#include "kernels/kernels.h"
#include "cpu/blocks.h"
#include "model/numfmt.h"

#define GPU_TEST_NAME "test_index_gpu"
#include "tests/gpu/gpu_test.h"

/* engine_index.cu's internal switch (not in engine.h: only this test uses it): 1 the stream score
 * kernel, 0 the tile kernel before it, where both take the shape; waves: the stream kernel's grid
 * (< 1 leaves it). Returns the kernel in use before. */
int eng_dsa_score_kernel(int stream, int waves);
long eng_dsa_stream_launches(void); /* the stream kernel's launches so far */

/* The rows of one eng_dsa_select call in the engine (engine/cuda/plan.h: CUDA_SCORE_ROWS). */
enum { CALL_ROWS = 64, CHUNK = 1024 };

static uint64_t rng_state = 0x2545f4914f6cdd1dull;
static int failures;

static uint32_t rng_u32(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 16);
}

static float rng_uniform(void) /* [-1, 1) */
{
    return (float)(rng_u32() & 0xFFFFFF) / (float)0x800000 - 1.0f;
}

static float *dev_random(size_t n, float amp)
{
    float *h = xmalloc(n * sizeof *h);
    for (size_t i = 0; i < n; i++)
        h[i] = amp * rng_uniform();
    float *d = dev_copy(h, n * sizeof *h);
    free(h);
    return d;
}

/* ---- the CPU rule: engine/cpu/dsa.c's dsa_select_rule, the CPU backend's own ---- */
static int ref_select(const float *sc, int pos, int kp, int budget, pool_score *ps, int32_t *out)
{
    return dsa_select_rule(sc, pos, kp, budget, ps, out);
}

/* idx/count of rows pos0 + t_off + t (downloaded) against ref_select on scores (host), all T rows;
 * 0 when all equal, else prints the first difference. */
static int compare_rows(const char *what, const float *scores, int max_pools, const int32_t *idx,
                        const int *count, int pos_first, int T, int kp, int budget, int width)
{
    int P_last = (pos_first + T) / kp;
    pool_score *ps = xmalloc((size_t)(P_last + 1) * sizeof *ps);
    int32_t *ref = xmalloc((size_t)width * sizeof *ref);
    int bad = 0;
    for (int t = 0; t < T && !bad; t++) {
        int n = ref_select(scores + (size_t)t * max_pools, pos_first + t, kp, budget, ps, ref);
        if (count[t] != n) {
            printf("  %s: row %d (position %d): count %d, expected %d\n", what, t, pos_first + t,
                   count[t], n);
            bad = 1;
            break;
        }
        for (int i = 0; i < n; i++)
            if (idx[(size_t)t * width + i] != ref[i]) {
                printf("  %s: row %d (position %d): index %d is %d, expected %d\n", what, t,
                       pos_first + t, i, idx[(size_t)t * width + i], ref[i]);
                bad = 1;
                break;
            }
    }
    free(ps);
    free(ref);
    return bad;
}

/* ---- the selection on given scores ---- */
typedef enum score_kind {
    RANDOM,       /* uniform in [-1, 1) */
    ALL_EQUAL,    /* every pool 0.5 */
    FEW_VALUES,   /* three values: ties at any threshold */
    SIGNED_ZEROS, /* +0 and -0 (one key), a few positives and negatives: the threshold at zero */
    NEGATIVE,     /* all below zero */
    RELU_SUMS,    /* as real scores: many exact zeros, positives spread over octaves */
    CLUSTERED,    /* 1 + k ulp, k < 64: one top bin, ties in the last bits */
    SPECIAL,      /* infinities, subnormals, FLT_MAX, zeros */
    DESCENDING,   /* distinct, larger first */
    KINDS
} score_kind;

static const char *kind_name[KINDS] = {"random", "all equal", "three values", "signed zeros",
                                       "negative", "relu sums", "clustered", "special",
                                       "descending"};

static float make_score(score_kind k, int p)
{
    uint32_t r = rng_u32();
    switch (k) {
    case RANDOM: return rng_uniform();
    case ALL_EQUAL: return 0.5f;
    case FEW_VALUES: return 0.25f * (float)(1 + r % 3);
    case SIGNED_ZEROS: return r % 10 == 0 ? rng_uniform() : (r & 16) ? -0.0f : 0.0f;
    case NEGATIVE: return -fabsf(rng_uniform()) - 1e-3f;
    case RELU_SUMS: {
        float x = rng_uniform();
        return x < 0.2f ? 0.0f : ldexpf(x, -(int)(r % 12));
    }
    case CLUSTERED: return 1.0f + (float)(r % 64) * 0x1p-23f;
    case SPECIAL: {
        static const float v[] = {INFINITY, -INFINITY, 0x1p-140f, -0x1p-140f, 3.4028235e38f,
                                  0.0f,     -0.0f,     1.0f,      -1.0f,      0x1p-149f};
        return v[r % 10];
    }
    default: return (float)(1 << 20) - (float)p;
    }
}

/* One case: T rows from position pos_first, scores of `kind` (pools past each row's P are +inf:
 * reading them would select them), eng_dsa_topk twice (the work area reused) against the rule. */
static void check_select(score_kind kind, int pos_first, int T, int kp, int budget)
{
    int max_pools = (pos_first + T) / kp + 3, width = budget * kp + kp;
    size_t nsc = ENG_DSA_SCORE_FLOATS(T, max_pools);
    float *h = xmalloc((size_t)T * max_pools * sizeof *h);
    for (int t = 0; t < T; t++) {
        int P = (pos_first + t + 1) / kp;
        for (int p = 0; p < max_pools; p++)
            h[(size_t)t * max_pools + p] = p < P ? make_score(kind, p) : INFINITY;
    }
    float *d_sc = dev_alloc(nsc * sizeof(float));
    CUDA_OK(kern_memset(d_sc, 0x7f, nsc * sizeof(float))); /* the work area starts as garbage */
    CUDA_OK(kern_to_device(d_sc, h, (size_t)T * max_pools * sizeof *h));
    int zero = 0, *d_pos = dev_copy(&zero, sizeof zero);
    int32_t *d_idx = dev_alloc((size_t)T * width * sizeof(int32_t));
    int *d_count = dev_alloc((size_t)T * sizeof(int));
    char what[200];
    snprintf(what, sizeof what, "select %-12s T%-2d positions %d..%d (P %d..%d) kpool %d budget %d",
             kind_name[kind], T, pos_first, pos_first + T - 1, (pos_first + 1) / kp,
             (pos_first + T) / kp, kp, budget);
    int bad = 0;
    for (int run = 0; run < 2 && !bad; run++) {
        CUDA_OK(kern_memset(d_idx, 0xff, (size_t)T * width * sizeof(int32_t)));
        CUDA_OK(eng_dsa_topk(d_sc, d_pos, pos_first, T, kp, budget, max_pools, width, d_idx, d_count,
                             NULL));
        int32_t *idx = to_host(d_idx, (size_t)T * width * sizeof(int32_t));
        int *count = to_host(d_count, (size_t)T * sizeof(int));
        bad = compare_rows(what, h, max_pools, idx, count, pos_first, T, kp, budget, width);
        free(idx);
        free(count);
    }
    printf("%-92s %s\n", what, bad ? "FAIL" : "exact");
    failures += bad;
    free(h);
    kern_free(d_sc);
    kern_free(d_pos);
    kern_free(d_idx);
    kern_free(d_count);
}

static void check_selections(void)
{
    const int kp = 4, budget = 512; /* the real model's: index_topk 2048, index_kpool 4 */
    for (int k = 0; k < KINDS; k++) {
        check_select(k, budget * kp - 9, CALL_ROWS, kp, budget); /* P from budget - 2 to budget + 1 */
        check_select(k, 8192, CALL_ROWS, kp, budget);             /* P 2048: two segments */
        check_select(k, 65536, CALL_ROWS, kp, budget);            /* P 16384: 16 segments */
        check_select(k, 262144 - 1, 1, kp, budget);               /* decode, P 65536: 64 segments */
    }
    check_select(RANDOM, 262144, CALL_ROWS, kp, budget);   /* the 256k prefill call */
    check_select(RELU_SUMS, 280000, 3, kp, budget);        /* P 70000: more than 64 x 1024 */
    check_select(RANDOM, 4 * 16384 - 1, 1, kp, budget);    /* P 16384: one first-digit block */
    check_select(ALL_EQUAL, 4 * 16385 - 1, 1, kp, budget); /* 16385: two, the second of one pool */
    check_select(RELU_SUMS, 4 * 32768 - 2, 3, kp, budget); /* P 32767..32768: two blocks */
    check_select(ALL_EQUAL, 4 * 4096 - 1, 1, kp, budget);  /* 4096 candidates: they just fit */
    check_select(ALL_EQUAL, 4 * 4097 - 1, 1, kp, budget);  /* 4097: read from the scores */
    check_select(CLUSTERED, 4 * 5000, 5, kp, 4000);        /* most pools taken */
    check_select(RANDOM, budget * kp + 3, 1, kp, budget);   /* P = budget + 1 */
    check_select(RANDOM, budget * kp - 1, 1, kp, budget);   /* P = budget */
    check_select(RANDOM, 100, 7, kp, budget);               /* all pools, no scores read */
    check_select(FEW_VALUES, 20000, 9, 1, 2048);            /* kpool 1 */
    check_select(SIGNED_ZEROS, 20000, CALL_ROWS, 16, 128);  /* kpool 16: the default config */
    check_select(RANDOM, 1000, 4, 2, 1);                    /* a budget of one pool */
    check_select(SIGNED_ZEROS, 1000, 4, 4, 0);              /* no pools: the open tail alone */
}

/* ---- the scores ---- */
/* The cache's rows as floats, read back (the values the kernels see). */
static float *cache_values(const eng_cache *c, int rows)
{
    size_t n = (size_t)rows * c->width, esz = c->dtype == ENG_CACHE_FP8 ? 1 : c->dtype == ENG_CACHE_BF16 ? 2 : 4;
    unsigned char *raw = to_host(c->rows, n * esz);
    float *scale = c->dtype == ENG_CACHE_FP8 ? to_host(c->scale, (size_t)rows * sizeof(float)) : NULL;
    float *v = xmalloc(n * sizeof *v);
    for (size_t i = 0; i < n; i++) {
        if (c->dtype == ENG_CACHE_F32)
            memcpy(&v[i], raw + 4 * i, 4);
        else if (c->dtype == ENG_CACHE_BF16)
            v[i] = numfmt_bf16_value((uint16_t)(raw[2 * i] | raw[2 * i + 1] << 8));
        else
            v[i] = numfmt_e4m3_value(raw[i]) * scale[i / c->width];
    }
    free(raw);
    free(scale);
    return v;
}

/* A pool cache of max_pools rows of ID random keys (amplitude 2), written by eng_cache_write:
 * quantised to dt as the engine does. */
static eng_cache random_pool(int dt, int ID, int max_pools)
{
    eng_cache c = {dt, ID, NULL, NULL};
    size_t esz = dt == ENG_CACHE_FP8 ? 1 : dt == ENG_CACHE_BF16 ? 2 : 4;
    c.rows = dev_alloc((size_t)max_pools * ID * esz + 16);
    c.scale = dev_alloc((size_t)max_pools * sizeof(float));
    float *src = dev_random((size_t)max_pools * ID, 2.0f);
    int zero = 0, *d_zero = dev_copy(&zero, sizeof zero);
    CUDA_OK(eng_cache_write(&c, d_zero, src, max_pools, NULL));
    CUDA_OK(kern_sync());
    kern_free(src);
    kern_free(d_zero);
    return c;
}

static void free_pool(eng_cache *c)
{
    kern_free(c->rows);
    kern_free(c->scale);
}

/* The one-part form's query: q (rows x width on the device) rounded in place by eng_one_part_rows,
 * its shifts returned (device); 1 added to failures unless the rounded rows and the shifts are
 * the bits numfmt_one_part_row and gemm_fp16x2_shift give on the host. */
static int *round_one_part(float *q, int rows, int width, const char *what)
{
    float *before = to_host(q, (size_t)rows * width * sizeof(float));
    int *d_shift = dev_alloc((size_t)rows * sizeof(int));
    CUDA_OK(eng_one_part_rows(q, rows, width, d_shift, NULL));
    float *got = to_host(q, (size_t)rows * width * sizeof(float));
    int *shift = to_host(d_shift, (size_t)rows * sizeof(int)), bad = 0;
    for (int r = 0; r < rows && !bad; r++) {
        float *x = before + (size_t)r * width;
        uint32_t most = 0;
        for (int d = 0; d < width; d++) {
            uint32_t u;
            memcpy(&u, &x[d], sizeof u);
            most = (u & 0x7fffffffu) > most ? (u & 0x7fffffffu) : most;
        }
        numfmt_one_part_row(x, x, (size_t)width);
        if (shift[r] != gemm_fp16x2_shift(most) ||
            memcmp(x, got + (size_t)r * width, (size_t)width * sizeof(float))) {
            printf("  %s: the one-part row %d differs from numfmt_one_part_row's (shift %d, "
                   "expected %d)\n", what, r, shift[r], gemm_fp16x2_shift(most));
            bad = 1;
        }
    }
    failures += bad;
    free(before);
    free(got);
    free(shift);
    return d_shift;
}

/* eng_one_part_rows on rows of special values: all zeros (-0 kept), an Inf among finite values, a
 * row past fp16's range (2^60), one far below it (2^-100), one whose small values fall in fp16's
 * subnormals, and a ties-to-even row; each the host's bits (NaN's bits are left out: the CPU's
 * NaN is 0x7fc00000 whatever its sign). */
static void check_one_part_rows(void)
{
    enum { R = 6, W = 40 };
    float h[R * W];
    for (int d = 0; d < W; d++) {
        float u = rng_uniform();
        h[0 * W + d] = d % 2 ? -0.0f : 0.0f;
        h[1 * W + d] = d == 7 ? INFINITY : u;
        h[2 * W + d] = ldexpf(u, 60);
        h[3 * W + d] = ldexpf(u, -100);
        h[4 * W + d] = d == 0 ? 1.0f : ldexpf(u, -30 + d % 8);
        h[5 * W + d] = 1.0f + (float)(2 * d + 1) * 0x1p-11f; /* halfway between two fp16 */
    }
    float *q = dev_copy(h, sizeof h);
    int *shift = round_one_part(q, R, W, "special rows");
    printf("%-60s %s\n", "one-part rows: zeros, Inf, 2^60, 2^-100, subnormal, ties", "checked");
    kern_free(q);
    kern_free(shift);
}

/* eng_dsa_select on random keys (written by eng_cache_write: quantised as the engine does): each
 * score within tol of the fp64 sum, as a fraction of the sum of the magnitudes of its terms; the
 * selection the rule's on those scores. one: the one-part form (q rounded by eng_one_part_rows,
 * checked against the host's rounding; the reference on the rounded q, whose products are exact). */
static void check_scores(int dt, int IH, int ID, int T, int pos_first, int kp, int budget, int one)
{
    const double tol = 5e-6; /* f32 sums in another order; one bf16 part of q alone errs ~1e-4 */
    int max_pools = (pos_first + T) / kp + 1, width = budget * kp + kp;
    eng_cache c = random_pool(dt, ID, max_pools);
    int zero = 0, *d_zero = dev_copy(&zero, sizeof zero);
    float *iq = dev_random((size_t)T * IH * ID, 1.5f), *hw = dev_random((size_t)T * IH, 1.0f);
    size_t nsc = ENG_DSA_SCORE_FLOATS(T, max_pools);
    float *d_sc = dev_alloc(nsc * sizeof(float));
    CUDA_OK(kern_memset(d_sc, 0x7f, nsc * sizeof(float))); /* the work area starts as garbage */
    int32_t *d_idx = dev_alloc((size_t)T * width * sizeof(int32_t));
    int *d_count = dev_alloc((size_t)T * sizeof(int));
    int *d_shift = one ? round_one_part(iq, T * IH, ID, "scores") : NULL;
    CUDA_OK(eng_dsa_select(&c, iq, d_shift, hw, d_zero, pos_first, T, IH, ID, kp, budget,
                           max_pools, d_sc, width, d_idx, d_count, NULL));
    float *got = to_host(d_sc, (size_t)T * max_pools * sizeof(float));
    float *key = cache_values(&c, max_pools);
    float *q = to_host(iq, (size_t)T * IH * ID * sizeof(float)), *w = to_host(hw, (size_t)T * IH * sizeof(float));
    double worst = 0, hscale = 1 / sqrt((double)IH), dscale = 1 / sqrt((double)ID);
    int bad = 0;
    for (int t = 0; t < T; t++) {
        int P = (pos_first + t + 1) / kp;
        if (P <= budget)
            continue;
        for (int p = 0; p < P; p++) {
            double ref = 0, mag = 0;
            for (int hh = 0; hh < IH; hh++) {
                double dot = 0, dmag = 0;
                for (int d = 0; d < ID; d++) {
                    double prod = (double)q[((size_t)t * IH + hh) * ID + d] * key[(size_t)p * ID + d];
                    dot += prod;
                    dmag += fabs(prod);
                }
                double wh = (double)w[(size_t)t * IH + hh] * hscale;
                ref += wh * (dot > 0 ? dot * dscale : 0);
                mag += fabs(wh) * dmag * dscale;
            }
            double e = fabs(got[(size_t)t * max_pools + p] - ref) / (mag > 0 ? mag : 1);
            if (!(e <= tol))
                bad++;
            worst = e > worst || e != e ? e : worst;
        }
    }
    int32_t *idx = to_host(d_idx, (size_t)T * width * sizeof(int32_t));
    int *count = to_host(d_count, (size_t)T * sizeof(int));
    char what[160];
    snprintf(what, sizeof what, "scores %-4s%s IH %-2d ID %-3d T%-2d P %d..%d", cache_name(dt),
             one ? " one" : "", IH, ID, T, (pos_first + 1) / kp, (pos_first + T) / kp);
    int sel_bad = compare_rows(what, got, max_pools, idx, count, pos_first, T, kp, budget, width);
    printf("%-60s max error %.2e of the terms' magnitude (tol %.0e), selection %s %s\n", what,
           worst, tol, sel_bad ? "differs" : "exact", bad || sel_bad ? "FAIL" : "ok");
    failures += bad > 0 || sel_bad;
    free(got);
    free(key);
    free(q);
    free(w);
    free(idx);
    free(count);
    free_pool(&c);
    kern_free(d_zero);
    kern_free(iq);
    kern_free(hw);
    kern_free(d_sc);
    kern_free(d_idx);
    kern_free(d_count);
    kern_free(d_shift);
}

static void check_all_scores(void)
{
    static const int dts[] = {ENG_CACHE_FP8, ENG_CACHE_BF16, ENG_CACHE_F32};
    for (int one = 0; one < 2; one++)
        for (int i = 0; i < 3; i++) {
            check_scores(dts[i], 32, 128, CALL_ROWS, 4 * 3000, 4, 512, one); /* real, prefill */
            check_scores(dts[i], 32, 128, 1, 4 * 3000, 4, 512, one);         /* and one row */
            check_scores(dts[i], 8, 32, 5, 700, 4, 16, one);                 /* mkmodel small */
            check_scores(dts[i], 12, 16, 3, 300, 2, 8, one);    /* a fixture's, heads off 16 */
            check_scores(dts[i], 4, 8, CALL_ROWS, 200, 4, 4, one);  /* ID off 16: padded */
            check_scores(dts[i], 40, 64, 2, 900, 4, 32, one);       /* IH past the tiles: f32 */
        }
    /* P 500..516: rows of every pool and rows selected in one call, in one group of a block */
    check_scores(ENG_CACHE_FP8, 32, 128, CALL_ROWS, 4 * 500 + 2, 4, 512, 0);
    check_scores(ENG_CACHE_FP8, 32, 128, CALL_ROWS, 4 * 500 + 2, 4, 512, 1);
    /* P 16390: the histogram summed over two blocks, its work area cleared by the score kernel */
    check_scores(ENG_CACHE_FP8, 32, 128, 2, 4 * 16390, 4, 512, 0);
    check_scores(ENG_CACHE_FP8, 32, 128, 2, 4 * 16390, 4, 512, 1);
}

/* ---- the stream score kernel against the tile kernel, bit for bit ---- */

/* eng_dsa_scores of both kernels into buffers of the same garbage: T rows of max_pools (spare
 * pools past the last row's, as the engine's capacity leaves), every float the same bits; the
 * stream kernel at the given waves; one: both in the one-part form. 1 on a difference. */
static void check_score_bits(int dt, int IH, int T, int pos_first, int kp, int budget, int spare,
                             int waves, int one)
{
    const int ID = 128;
    int max_pools = (pos_first + T) / kp + 1 + spare;
    size_t n = (size_t)T * max_pools;
    eng_cache c = random_pool(dt, ID, max_pools);
    int zero = 0, *d_zero = dev_copy(&zero, sizeof zero);
    float *iq = dev_random((size_t)T * IH * ID, 1.5f), *hw = dev_random((size_t)T * IH, 1.0f);
    float *d_sc[2];
    uint32_t *got[2];
    long launches[2];
    int *d_shift = one ? round_one_part(iq, T * IH, ID, "score bits") : NULL;
    for (int k = 0; k < 2; k++) {
        d_sc[k] = dev_alloc(ENG_DSA_SCORE_FLOATS(T, max_pools) * sizeof(float));
        CUDA_OK(kern_memset(d_sc[k], 0x7f, n * sizeof(float)));
        eng_dsa_score_kernel(k, waves);
        long before = eng_dsa_stream_launches();
        CUDA_OK(eng_dsa_scores(&c, iq, d_shift, hw, d_zero, pos_first, T, IH, ID, kp, budget,
                               max_pools, d_sc[k], NULL));
        launches[k] = eng_dsa_stream_launches() - before;
        got[k] = to_host(d_sc[k], n * sizeof(float));
    }
    eng_dsa_score_kernel(1, 1);
    long differ = 0, written = 0, first = -1;
    for (size_t i = 0; i < n; i++) {
        written += got[0][i] != 0x7f7f7f7fu;
        if (got[0][i] != got[1][i] && differ++ == 0)
            first = (long)i;
    }
    char what[160];
    snprintf(what, sizeof what, "score bits %-4s%s IH %-2d T%-2d P %d..%d spare %d waves %d",
             cache_name(dt), one ? " one" : "", IH, T, (pos_first + 1) / kp, (pos_first + T) / kp,
             spare, waves);
    if (differ)
        printf("  %s: row %ld pool %ld: stream %08x, tile kernel %08x\n", what,
               first / max_pools, first % max_pools, got[1][first], got[0][first]);
    if (launches[0] != 0 || launches[1] != 1)
        printf("  %s: the stream kernel ran %ld time(s) for the tile kernel's scores, %ld for "
               "its own (0 and 1 expected)\n", what, launches[0], launches[1]);
    int bad = differ > 0 || written == 0 || launches[0] != 0 || launches[1] != 1;
    printf("%-66s %ld scores, %ld differ %s\n", what, written, differ, bad ? "FAIL" : "same bits");
    failures += bad;
    for (int k = 0; k < 2; k++) {
        free(got[k]);
        kern_free(d_sc[k]);
    }
    free_pool(&c);
    kern_free(d_zero);
    kern_free(iq);
    kern_free(hw);
    kern_free(d_shift);
}

static void check_all_score_bits(void)
{
    for (int one = 0; one < 2; one++) {
        check_score_bits(ENG_CACHE_FP8, 32, CALL_ROWS, 4 * 3000, 4, 512, 0, 1, one); /* real shape */
        check_score_bits(ENG_CACHE_BF16, 32, CALL_ROWS, 4 * 3000, 4, 512, 0, 1, one);
        check_score_bits(ENG_CACHE_FP8, 32, CALL_ROWS, 4 * 500 + 2, 4, 512, 900, 1, one); /* P 500.. */
        check_score_bits(ENG_CACHE_FP8, 32, CALL_ROWS, 65536, 4, 512, 40000, 1, one); /* many tiles */
        check_score_bits(ENG_CACHE_FP8, 32, CALL_ROWS, 65536 + 77, 4, 512, 0, 3, one);
        check_score_bits(ENG_CACHE_BF16, 32, 16, 4 * 20000 + 5, 4, 512, 129, 2, one);
        check_score_bits(ENG_CACHE_FP8, 32, 5, 4 * 16390, 4, 512, 0, 1, one); /* a one-query pair */
        check_score_bits(ENG_CACHE_FP8, 16, 7, 4 * 2000 + 1, 4, 512, 0, 1, one); /* one head tile */
        check_score_bits(ENG_CACHE_FP8, 20, CALL_ROWS, 4 * 2100, 4, 512, 0, 1, one); /* IH 20 */
        check_score_bits(ENG_CACHE_FP8, 32, 4, 300, 1, 128, 1000, 1, one);     /* kpool 1 */
        check_score_bits(ENG_CACHE_FP8, 32, CALL_ROWS, 20000, 16, 128, 0, 1, one); /* kpool 16 */
    }
}

/* ---- time ---- */
static float time_ms(void *a, void *b)
{
    float ms = 0;
    CUDA_OK(eng_event_ms(a, b, &ms));
    return ms;
}

typedef struct bench {
    eng_cache pool;
    float *iq, *hw, *scores;
    int32_t *idx;
    int *count, *d_pos, IH, ID, kp, budget, max_pools, width, call_rows;
    int *shift; /* the one-part form: iq rounded by eng_one_part_rows, its shifts; else null */
    void *st, *ev0, *ev1;
} bench;

typedef enum part { WHOLE, SCORES, TOPK } part;

/* The rows [0, rows) from position *d_pos as the engine calls them, b->call_rows at a time: the
 * whole eng_dsa_select, its scores alone or its top-k alone. */
static void run_rows(const bench *b, part which, int rows)
{
    for (int t0 = 0; t0 < rows; t0 += b->call_rows) {
        int nt = rows - t0 < b->call_rows ? rows - t0 : b->call_rows;
        const float *iq = b->iq + (size_t)t0 * b->IH * b->ID, *hw = b->hw + (size_t)t0 * b->IH;
        const int *sh = b->shift ? b->shift + (size_t)t0 * b->IH : NULL;
        int32_t *idx = b->idx + (size_t)t0 * b->width;
        if (which == WHOLE)
            CUDA_OK(eng_dsa_select(&b->pool, iq, sh, hw, b->d_pos, t0, nt, b->IH, b->ID, b->kp,
                                   b->budget, b->max_pools, b->scores, b->width, idx,
                                   b->count + t0, b->st));
        else if (which == SCORES)
            CUDA_OK(eng_dsa_scores(&b->pool, iq, sh, hw, b->d_pos, t0, nt, b->IH, b->ID, b->kp,
                                   b->budget, b->max_pools, b->scores, b->st));
        else
            CUDA_OK(eng_dsa_topk(b->scores, b->d_pos, t0, nt, b->kp, b->budget, b->max_pools,
                                 b->width, idx, b->count + t0, b->st));
    }
}

/* us a run of the rows; graph: captured once and replayed (the launches' host cost gone). */
static double time_rows(const bench *b, part which, int rows, int reps, int graph)
{
    void *exec = NULL;
    if (graph) {
        CUDA_OK(eng_capture_begin(b->st));
        run_rows(b, which, rows);
        CUDA_OK(eng_capture_end(b->st, &exec));
        CUDA_OK(eng_graph_launch(exec, b->st)); /* warm */
    } else {
        run_rows(b, which, rows); /* warm */
    }
    CUDA_OK(eng_event_record(b->ev0, b->st));
    for (int r = 0; r < reps; r++) {
        if (graph)
            CUDA_OK(eng_graph_launch(exec, b->st));
        else
            run_rows(b, which, rows);
    }
    CUDA_OK(eng_event_record(b->ev1, b->st));
    double us = time_ms(b->ev0, b->ev1) * 1000.0 / reps;
    if (exec)
        eng_graph_free(exec);
    return us;
}

/* The last call's rows of a run of `rows` against the rule on their scores (real score
 * distributions); 1 on a difference. */
static int check_timed_rows(const bench *b, int pos, int rows)
{
    int nt = rows < b->call_rows ? rows : b->call_rows, t0 = rows - nt;
    run_rows(b, WHOLE, rows);
    CUDA_OK(eng_stream_sync(b->st));
    float *sc = to_host(b->scores, (size_t)nt * b->max_pools * sizeof(float));
    int32_t *idx = to_host(b->idx + (size_t)t0 * b->width, (size_t)nt * b->width * sizeof(int32_t));
    int *count = to_host(b->count + t0, nt * sizeof(int));
    char what[80];
    snprintf(what, sizeof what, "timed %s at %d", rows > 1 ? "chunk" : "decode", pos);
    int bad = compare_rows(what, sc, b->max_pools, idx, count, pos + t0, nt, b->kp, b->budget,
                           b->width);
    free(sc);
    free(idx);
    free(count);
    return bad;
}

/* One line of the table: the rows [0, rows) at position pos, launched and as a graph. */
static void time_line(bench *b, int pos, int rows, int reps)
{
    CUDA_OK(kern_to_device(b->d_pos, &pos, sizeof pos));
    int last = pos + rows - 1, P0 = (pos + 1) / b->kp, P1 = (last + 1) / b->kp;
    double whole = time_rows(b, WHOLE, rows, reps, 0), sc = time_rows(b, SCORES, rows, reps, 0);
    double tk = time_rows(b, TOPK, rows, reps, 0), g_whole = time_rows(b, WHOLE, rows, reps, 1);
    double g_sc = time_rows(b, SCORES, rows, reps, 1), g_tk = time_rows(b, TOPK, rows, reps, 1);
    int bad = check_timed_rows(b, pos, rows);
    failures += bad;
    char kind[16] = "decode";
    if (rows > 1)
        snprintf(kind, sizeof kind, "%s%d", b->shift ? "one" : "chunk", b->call_rows);
    printf("%-7s %8d %5d..%-5d | %9.1f %9.1f %9.1f %6.2f | %9.1f %9.1f %9.1f %6.2f %s%s\n", kind,
           pos, P0, P1, whole, sc, tk, tk / sc, g_whole, g_sc, g_tk,
           g_tk / g_sc, P1 <= b->budget ? "every pool taken" : "",
           bad ? " FAIL: selection" : "");
}

/* The timing benchmark's buffers for a chunk from position pos: fp8 keys, IH 32, ID 128. */
static bench bench_open(int pos, void *st, void *ev0, void *ev1)
{
    bench b = {.IH = 32, .ID = 128, .kp = 4, .budget = 512, .call_rows = CALL_ROWS, .st = st,
               .ev0 = ev0, .ev1 = ev1};
    b.max_pools = (pos + CHUNK) / b.kp + 1, b.width = b.budget * b.kp + b.kp;
    b.pool = random_pool(ENG_CACHE_FP8, b.ID, b.max_pools);
    b.iq = dev_random((size_t)CHUNK * b.IH * b.ID, 1.0f);
    b.hw = dev_random((size_t)CHUNK * b.IH, 1.0f);
    size_t nsc = ENG_DSA_SCORE_FLOATS(CALL_ROWS, b.max_pools);
    b.scores = dev_alloc(nsc * sizeof(float));
    b.idx = dev_alloc((size_t)CHUNK * b.width * sizeof(int32_t));
    b.count = dev_alloc((size_t)CHUNK * sizeof(int));
    b.d_pos = dev_copy(&pos, sizeof pos);
    return b;
}

static void bench_close(bench *b)
{
    free_pool(&b->pool);
    kern_free(b->iq);
    kern_free(b->hw);
    kern_free(b->scores);
    kern_free(b->idx);
    kern_free(b->count);
    kern_free(b->d_pos);
    kern_free(b->shift);
}

static void time_position(int pos, void *st, void *ev0, void *ev1)
{
    bench b = bench_open(pos, st, ev0, ev1);
    time_line(&b, pos, CHUNK, pos >= 65536 ? 3 : 10);
    b.call_rows = 16; /* the calls before CUDA_SCORE_ROWS was 64 */
    time_line(&b, pos, CHUNK, pos >= 65536 ? 3 : 10);
    b.call_rows = CALL_ROWS;
    time_line(&b, pos + CHUNK - 1, 1, 100); /* decode: one row, the chunk's last position */
    b.shift = round_one_part(b.iq, CHUNK * b.IH, b.ID, "timing"); /* the one-part form's chunk */
    time_line(&b, pos, CHUNK, pos >= 65536 ? 3 : 10);
    bench_close(&b);
}

/* The score kernels of a chunk of CHUNK rows (CALL_ROWS a call, a graph replayed) from position
 * pos: the tile kernel, then the stream kernel (its grid: one wave of resident blocks, which
 * timed as fast as two); us, TFLOP/s (the products the kernels issue: q's three parts against the
 * keys, 6 IH ID flops a scored pool, or one part's 2 IH ID) and the stream run's last call's
 * scores against the tile kernel's, bit for bit; the exact form's line, then the one-part
 * form's with its stream kernel against the exact one's (*stream3_us). */
static void time_score_kernels(int pos, void *st, void *ev0, void *ev1, int one, double *stream3_us)
{
    bench b = bench_open(pos, st, ev0, ev1);
    CUDA_OK(kern_to_device(b.d_pos, &pos, sizeof pos));
    if (one)
        b.shift = round_one_part(b.iq, CHUNK * b.IH, b.ID, "score timing");
    double flops = 0;
    for (int t = 0; t < CHUNK; t++) {
        int P = (pos + t + 1) / b.kp;
        flops += P > b.budget ? (one ? 2.0 : 6.0) * P * b.IH * b.ID : 0;
    }
    size_t n = (size_t)CALL_ROWS * b.max_pools;
    float *ref = NULL;
    double us[2];
    int bad = 0;
    for (int stream = 0; stream < 2; stream++) {
        eng_dsa_score_kernel(stream, 1);
        us[stream] = time_rows(&b, SCORES, CHUNK, pos >= 262144 ? 3 : 10, 1);
        CUDA_OK(kern_memset(b.scores, 0x7f, n * sizeof(float)));
        long before = eng_dsa_stream_launches();
        CUDA_OK(eng_dsa_scores(&b.pool, b.iq + (size_t)(CHUNK - CALL_ROWS) * b.IH * b.ID,
                               b.shift ? b.shift + (size_t)(CHUNK - CALL_ROWS) * b.IH : NULL,
                               b.hw + (size_t)(CHUNK - CALL_ROWS) * b.IH, b.d_pos,
                               CHUNK - CALL_ROWS, CALL_ROWS, b.IH, b.ID, b.kp, b.budget,
                               b.max_pools, b.scores, b.st));
        bad += eng_dsa_stream_launches() - before != stream; /* the kernel asked for ran */
        CUDA_OK(eng_stream_sync(b.st));
        float *got = to_host(b.scores, n * sizeof(float));
        if (!ref)
            ref = got;
        else {
            bad += memcmp(ref, got, n * sizeof(float)) != 0;
            free(got);
        }
    }
    eng_dsa_score_kernel(1, 1);
    char against[64] = "";
    if (!one)
        *stream3_us = us[1];
    else
        snprintf(against, sizeof against, "; stream %.2fx the exact form's", *stream3_us / us[1]);
    printf("%-6s %8d %6d..%-6d | %9.1f %6.1f | %9.1f %6.1f %5.2fx | %s%s\n", one ? "one" : "scores",
           pos, (pos + 1) / b.kp, (pos + CHUNK) / b.kp, us[0], flops / us[0] * 1e-6, us[1],
           flops / us[1] * 1e-6, us[0] / us[1], bad ? "FAIL: bits differ or the wrong kernel ran"
                                                    : "same bits", against);
    failures += bad;
    free(ref);
    bench_close(&b);
}

int main(int argc, char **argv)
{
    char name[256];
    int timed = gpu_test_begin(argc, argv, name, sizeof name);
    check_selections();
    check_one_part_rows();
    check_all_scores();
    check_all_score_bits();
    if (timed) {
        void *st, *ev0, *ev1;
        CUDA_OK(eng_stream_new(&st));
        gpu_test_events(&ev0, &ev1);
        printf("\neng_dsa_select (IH 32, ID 128, kpool 4, top-k 2048, fp8 keys), us a chunk of %d "
               "rows (chunkN: N rows a call) or a decode row; whole, its scores alone, its top-k "
               "alone, top-k / scores; launched one by one, then replayed as a graph\n", CHUNK);
        printf("%-7s %8s %12s | %9s %9s %9s %6s | %9s %9s %9s %6s\n", "", "position", "pools",
               "whole", "scores", "top-k", "tk/sc", "g whole", "g scores", "g top-k", "tk/sc");
        static const int positions[] = {1024, 8192, 65536, 262144};
        for (int i = 0; i < 4; i++)
            time_position(positions[i], st, ev0, ev1);
        printf("\nthe score kernels (eng_dsa_scores, graph replayed), us a chunk of %d rows (%d a "
               "call) and TFLOP/s (6 IH ID flops a pool: q's three bf16 parts; one: the one-part "
               "form, one fp16 part, 2 IH ID); tile: the kernel before, stream: walking the pools, "
               "its speedup; the last call's scores against the tile kernel's\n",
               CHUNK, CALL_ROWS);
        printf("%-6s %8s %14s | %9s %6s | %9s %6s %6s |\n", "", "position", "pools", "tile us",
               "TF/s", "stream", "TF/s", "");
        static const int score_positions[] = {8192, 65536, 262144, 1048576};
        for (int i = 0; i < 4; i++) {
            double stream3 = 0;
            time_score_kernels(score_positions[i], st, ev0, ev1, 0, &stream3);
            time_score_kernels(score_positions[i], st, ev0, ev1, 1, &stream3);
        }
        eng_event_free(ev0);
        eng_event_free(ev1);
        eng_stream_free(st);
    }
    printf("%s: %d failure(s)\n", failures ? "FAIL" : "PASS", failures);
    return failures ? 1 : 0;
}
