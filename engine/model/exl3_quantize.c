/* exl3_quantize.c: the EXL3 quantizer (research/exl3.md section 3): sign and scale vectors,
 * Hadamard rotations, a tail-biting Viterbi search per 16x16 tile, LDLQ error feedback. */
#include "engine/model/exl3.h"

#include <float.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "engine/model/hadamard.h"

/* ---- codebook tables ------------------------------------------------------------------------- */

static float codebook_tables[3][65536];
static pthread_once_t codebook_once[3] = {PTHREAD_ONCE_INIT, PTHREAD_ONCE_INIT,
                                          PTHREAD_ONCE_INIT};

static void fill_table(exl3_codebook cb)
{
    for (uint32_t s = 0; s < 65536; s++)
        codebook_tables[cb][s] = exl3_f16_to_f32(exl3_codebook_value(cb, s));
}
static void fill_3inst(void) { fill_table(EXL3_CB_3INST); }
static void fill_mcg(void) { fill_table(EXL3_CB_MCG); }
static void fill_mul1(void) { fill_table(EXL3_CB_MUL1); }

const float *exl3_codebook_table(exl3_codebook cb)
{
    static void (*const fill[3])(void) = {fill_3inst, fill_mcg, fill_mul1};
    int i = cb == EXL3_CB_MCG ? 1 : cb == EXL3_CB_MUL1 ? 2 : 0;
    pthread_once(&codebook_once[i], fill[i]);
    return codebook_tables[i];
}

/* The codebook's standard deviation over all states: rows are scaled to it before encoding. */
static double codebook_sigma(exl3_codebook cb)
{
    const float *t = exl3_codebook_table(cb);
    double sum = 0, sq = 0;
    for (int s = 0; s < 65536; s++) {
        sum += t[s];
        sq += (double)t[s] * t[s];
    }
    double mean = sum / 65536.0;
    return sqrt(sq / 65536.0 - mean * mean);
}

/* ---- tile encoder ---------------------------------------------------------------------------- */

/* Scratch of one encoding thread: costs per node and K-bit back pointers per position. */
typedef struct viterbi_ws {
    float *prev, *cur;
    uint8_t *back; /* [256][nodes] */
} viterbi_ws;

static int viterbi_ws_init(viterbi_ws *ws)
{
    size_t nodes = 1u << 15; /* the most (K = 1) */
    ws->prev = malloc(nodes * sizeof *ws->prev);
    ws->cur = malloc(nodes * sizeof *ws->cur);
    ws->back = malloc(EXL3_TILE_VALUES * nodes);
    if (!ws->prev || !ws->cur || !ws->back) {
        free(ws->prev);
        free(ws->cur);
        free(ws->back);
        return -1;
    }
    return 0;
}

static void viterbi_ws_free(viterbi_ws *ws)
{
    free(ws->prev);
    free(ws->cur);
    free(ws->back);
}

/* Four nodes at a time (GCC/Clang vector extensions: one SSE2 or NEON register). */
typedef float viterbi_vf __attribute__((vector_size(16)));
typedef int32_t viterbi_vi __attribute__((vector_size(16)));

/* One forward pass over positions first, first+1, ... (mod 256). start < 0: free start; else
 * the node entering the first position is forced. Leaves final costs in ws->prev. For each node
 * e the 2^K branches differ in the state's top K bits t: S = t << (16-K) | e, coming from node
 * S >> K. Ties keep the smallest t. */
static void viterbi_forward(viterbi_ws *ws, const float *table, const float *target, int bits,
                            int first, int start)
{
    const int node_bits = 16 - bits;
    const uint32_t nodes = 1u << node_bits;
    const uint32_t branches = 1u << bits;
    for (uint32_t e = 0; e < nodes; e++)
        ws->prev[e] = start < 0 || e == (uint32_t)start ? 0.0f : FLT_MAX;
    for (int i = 0; i < EXL3_TILE_VALUES; i++) {
        const float w = target[(first + i) % EXL3_TILE_VALUES];
        const viterbi_vf wv = {w, w, w, w};
        uint8_t *back = ws->back + (size_t)i * nodes;
        for (uint32_t e0 = 0; e0 < nodes; e0 += 4) {
            viterbi_vf best;
            viterbi_vi best_t = {0, 0, 0, 0};
            for (int j = 0; j < 4; j++)
                best[j] = FLT_MAX;
            for (uint32_t t = 0; t < branches; t++) {
                viterbi_vf tv, pv;
                memcpy(&tv, table + (t << node_bits) + e0, sizeof tv);
                const float *prev = ws->prev + (t << (node_bits - bits));
                if (bits >= 2) { /* four neighbouring nodes share one predecessor */
                    float p = prev[e0 >> bits];
                    pv = (viterbi_vf){p, p, p, p};
                } else {
                    for (int j = 0; j < 4; j++)
                        pv[j] = prev[(e0 + (uint32_t)j) >> bits];
                }
                viterbi_vf d = tv - wv;
                viterbi_vf c = pv + d * d;
                viterbi_vi better = c < best;
                viterbi_vi tt = {(int32_t)t, (int32_t)t, (int32_t)t, (int32_t)t};
                best = (viterbi_vf)(((viterbi_vi)c & better) | ((viterbi_vi)best & ~better));
                best_t = (tt & better) | (best_t & ~better);
            }
            memcpy(ws->cur + e0, &best, sizeof best);
            for (int j = 0; j < 4; j++)
                back[e0 + (uint32_t)j] = (uint8_t)best_t[j];
        }
        float *swap = ws->prev;
        ws->prev = ws->cur;
        ws->cur = swap;
    }
}

/* Walks back from node `end` at the pass's last position; fills states (by position). Returns
 * the node entering the pass's first position. */
static uint32_t viterbi_backtrack(const viterbi_ws *ws, int bits, int first, uint32_t end,
                                  uint16_t *states)
{
    const int node_bits = 16 - bits;
    const uint32_t nodes = 1u << node_bits;
    uint32_t e = end;
    for (int i = EXL3_TILE_VALUES - 1; i >= 0; i--) {
        uint32_t s = ((uint32_t)ws->back[(size_t)i * nodes + e] << node_bits) | e;
        if (states)
            states[(first + i) % EXL3_TILE_VALUES] = (uint16_t)s;
        e = s >> bits;
    }
    return e;
}

static double encode_tile_ws(viterbi_ws *ws, const float *target, int bits, exl3_codebook cb,
                             uint16_t *states)
{
    const float *table = exl3_codebook_table(cb);
    const uint32_t nodes = 1u << (16 - bits);
    /* (a) free run from position 128; its path gives the node entering position 0 */
    viterbi_forward(ws, table, target, bits, 128, -1);
    uint32_t best = 0;
    for (uint32_t e = 1; e < nodes; e++)
        if (ws->prev[e] < ws->prev[best])
            best = e;
    uint16_t tmp[EXL3_TILE_VALUES];
    viterbi_backtrack(ws, bits, 128, best, tmp);
    uint32_t start = tmp[0] >> bits;
    /* (b) from position 0 with that start, ending on the same node: the chain closes */
    viterbi_forward(ws, table, target, bits, 0, (int)start);
    viterbi_backtrack(ws, bits, 0, start, states);
    double err = 0;
    for (int p = 0; p < EXL3_TILE_VALUES; p++) {
        double d = (double)table[states[p]] - target[p];
        err += d * d;
    }
    return err;
}

double exl3_encode_tile(const float target[EXL3_TILE_VALUES], int bits, exl3_codebook cb,
                        uint16_t states[EXL3_TILE_VALUES])
{
    viterbi_ws ws;
    if (bits < 1 || bits > EXL3_MAX_BITS || viterbi_ws_init(&ws) != 0)
        return -1.0;
    double err = encode_tile_ws(&ws, target, bits, cb, states);
    viterbi_ws_free(&ws);
    return err;
}

/* ---- parallel tile batches ------------------------------------------------------------------- */

/* A batch of tiles: targets [count][256] in stream order -> states and squared errors. */
typedef struct tile_batch {
    const float *targets;
    uint16_t *states;
    double *errors;
    int count, bits;
    exl3_codebook cb;
    int next;
    int failed;
    pthread_mutex_t lock;
} tile_batch;

static void *tile_worker(void *arg)
{
    tile_batch *b = arg;
    viterbi_ws ws;
    if (viterbi_ws_init(&ws) != 0) {
        pthread_mutex_lock(&b->lock);
        b->failed = 1;
        pthread_mutex_unlock(&b->lock);
        return NULL;
    }
    for (;;) {
        pthread_mutex_lock(&b->lock);
        int i = b->next++;
        pthread_mutex_unlock(&b->lock);
        if (i >= b->count)
            break;
        double e = encode_tile_ws(&ws, b->targets + (size_t)i * EXL3_TILE_VALUES, b->bits, b->cb,
                                  b->states + (size_t)i * EXL3_TILE_VALUES);
        if (b->errors)
            b->errors[i] = e;
    }
    viterbi_ws_free(&ws);
    return NULL;
}

/* Encodes all tiles of the batch with up to `threads` threads; 0 or -1 (out of memory). */
static int encode_batch(const float *targets, uint16_t *states, double *errors, int count,
                        int bits, exl3_codebook cb, int threads)
{
    tile_batch b = {.targets = targets, .states = states, .errors = errors, .count = count,
                    .bits = bits, .cb = cb};
    if (pthread_mutex_init(&b.lock, NULL) != 0)
        return -1;
    int extra = threads > count ? count - 1 : threads - 1;
    pthread_t tid[64];
    if (extra > 63)
        extra = 63;
    int started = 0;
    for (; started < extra; started++)
        if (pthread_create(&tid[started], NULL, tile_worker, &b) != 0)
            break;
    tile_worker(&b);
    for (int i = 0; i < started; i++)
        pthread_join(tid[i], NULL);
    pthread_mutex_destroy(&b.lock);
    return b.failed && b.next <= count ? -1 : 0;
}

/* ---- the layer ------------------------------------------------------------------------------- */

static uint64_t splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Tile (tk, tn) of m [k][n] in stream order, or back. */
static void gather_tile(const double *m, int n, int tk, int tn, float *target)
{
    for (int p = 0; p < EXL3_TILE_VALUES; p++) {
        int r, c;
        exl3_tile_position(p, &r, &c);
        target[p] = (float)m[(size_t)(tk * 16 + r) * (size_t)n + (size_t)(tn * 16 + c)];
    }
}

static void scatter_states(const uint16_t *states, const float *table, double *m, int n, int tk,
                           int tn)
{
    for (int p = 0; p < EXL3_TILE_VALUES; p++) {
        int r, c;
        exl3_tile_position(p, &r, &c);
        m[(size_t)(tk * 16 + r) * (size_t)n + (size_t)(tn * 16 + c)] = table[states[p]];
    }
}

/* Squared error of quantizing `count` sample tiles of t scaled by g, in t's units. */
static double scale_trial(const double *t, int k, int n, const int *tiles, int count, double g,
                          const exl3_quant_params *p, float *targets, uint16_t *states,
                          double *errors)
{
    (void)k;
    for (int i = 0; i < count; i++) {
        gather_tile(t, n, tiles[2 * i], tiles[2 * i + 1], targets + (size_t)i * 256);
        for (int v = 0; v < 256; v++)
            targets[(size_t)i * 256 + v] *= (float)g;
    }
    if (encode_batch(targets, states, errors, count, p->bits, p->codebook, p->threads) != 0)
        return -1;
    double sum = 0;
    for (int i = 0; i < count; i++)
        sum += errors[i];
    return sum / (g * g);
}

/* The global scale: a coarse grid on a spread sample of tiles, then a parabola through the best
 * point and its neighbours. */
static int search_scale(const double *t, int k, int n, const exl3_quant_params *p, double *g_out)
{
    enum { SAMPLE = 16, GRID = 5 };
    int tk_count = k / 16, tn_count = n / 16;
    int count = tk_count * tn_count < SAMPLE ? tk_count * tn_count : SAMPLE;
    int tiles[2 * SAMPLE];
    for (int i = 0; i < count; i++) {
        tiles[2 * i] = (int)((long)i * tk_count / count);
        tiles[2 * i + 1] = (int)(((long)i * 7 + i / 3) % tn_count);
    }
    float *targets = malloc((size_t)count * 256 * sizeof *targets);
    uint16_t *states = malloc((size_t)count * 256 * sizeof *states);
    double *errors = malloc((size_t)count * sizeof *errors);
    int rc = -1;
    if (!targets || !states || !errors)
        goto done;
    static const double grid[GRID] = {0.75, 0.85, 0.95, 1.05, 1.15};
    double err[GRID];
    int best = 0;
    for (int i = 0; i < GRID; i++) {
        err[i] = scale_trial(t, k, n, tiles, count, grid[i], p, targets, states, errors);
        if (err[i] < 0)
            goto done;
        if (err[i] < err[best])
            best = i;
    }
    double g = grid[best];
    if (best > 0 && best < GRID - 1) {
        double a = err[best - 1], b = err[best], c = err[best + 1];
        double denom = a - 2 * b + c;
        if (denom > 0)
            g += 0.5 * (a - c) / denom * (grid[1] - grid[0]);
    }
    *g_out = g;
    rc = 0;
done:
    free(targets);
    free(states);
    free(errors);
    return rc;
}

/* Block LDL of the k x k matrix h (double, modified): returns in l the unit block-lower factor
 * with h = L D L^T (16x16 diagonal blocks of L are identity). -1 when h is not positive
 * definite. */
static int block_ldl(double *h, int k, double *l)
{
    /* Cholesky h = C C^T into l */
    memset(l, 0, (size_t)k * (size_t)k * sizeof *l);
    for (int j = 0; j < k; j++) {
        double d = h[(size_t)j * k + j];
        for (int m = 0; m < j; m++)
            d -= l[(size_t)j * k + m] * l[(size_t)j * k + m];
        if (!(d > 0))
            return -1;
        double cjj = sqrt(d);
        l[(size_t)j * k + j] = cjj;
        for (int i = j + 1; i < k; i++) {
            double s = h[(size_t)i * k + j];
            const double *li = l + (size_t)i * k, *lj = l + (size_t)j * k;
            for (int m = 0; m < j; m++)
                s -= li[m] * lj[m];
            l[(size_t)i * k + j] = s / cjj;
        }
    }
    /* each 16-column block times the inverse of its diagonal block: L = C blockdiag(C_bb)^-1 */
    double inv[16 * 16];
    for (int b = 0; b < k; b += 16) {
        /* invert the lower-triangular 16x16 block C_bb */
        memset(inv, 0, sizeof inv);
        for (int c = 0; c < 16; c++) {
            inv[c * 16 + c] = 1.0 / l[(size_t)(b + c) * k + b + c];
            for (int r = c + 1; r < 16; r++) {
                double s = 0;
                for (int m = c; m < r; m++)
                    s += l[(size_t)(b + r) * k + b + m] * inv[m * 16 + c];
                inv[r * 16 + c] = -s / l[(size_t)(b + r) * k + b + r];
            }
        }
        double row[16];
        for (int i = b; i < k; i++) {
            double *li = l + (size_t)i * k + b;
            for (int c = 0; c < 16; c++) {
                double s = 0;
                for (int m = c; m < 16; m++)
                    s += li[m] * inv[m * 16 + c];
                row[c] = s;
            }
            memcpy(li, row, sizeof row);
        }
    }
    return 0;
}

/* The quantization-basis Hessian Hk diag(su) H diag(su) Hk, regularised, factored. */
static glm_status ldl_factor(const float *hessian, const float *su, int k, double *l,
                             glm_error *err)
{
    double *h = malloc((size_t)k * (size_t)k * sizeof *h);
    if (!h)
        return glm_error_set(err, GLM_ERR_NOMEM, "EXL3 quantize: no memory for a %d x %d "
                             "Hessian", k, k);
    for (int i = 0; i < k; i++)
        for (int j = 0; j < k; j++)
            h[(size_t)i * k + j] = (double)hessian[(size_t)i * k + j] * su[i] * su[j];
    for (int i = 0; i < k; i++) /* rows, then columns (h is symmetric) */
        for (int b = 0; b < k; b += HADAMARD_BLOCK)
            hadamard128_f64(h + (size_t)i * k + b);
    double *col = malloc((size_t)k * sizeof *col);
    if (!col) {
        free(h);
        return glm_error_set(err, GLM_ERR_NOMEM, "EXL3 quantize: out of memory");
    }
    for (int j = 0; j < k; j++) {
        for (int i = 0; i < k; i++)
            col[i] = h[(size_t)i * k + j];
        for (int b = 0; b < k; b += HADAMARD_BLOCK)
            hadamard128_f64(col + b);
        for (int i = 0; i < k; i++)
            h[(size_t)i * k + j] = col[i];
    }
    free(col);
    double mean = 0;
    for (int i = 0; i < k; i++)
        mean += h[(size_t)i * k + i];
    mean /= k;
    glm_status st = GLM_OK;
    if (!(mean > 1e-20) || !isfinite(mean)) {
        st = glm_error_set(err, GLM_ERR_ARG, "EXL3 quantize: the Hessian's diagonal mean is %g; "
                           "give calibration rows that are not all zero", mean);
        goto done;
    }
    double reg = 0.025 * mean;
    for (int attempt = 0;; attempt++) {
        for (int i = 0; i < k; i++)
            h[(size_t)i * k + i] += reg;
        if (block_ldl(h, k, l) == 0)
            break;
        if (attempt == 10) {
            st = glm_error_set(err, GLM_ERR_ARG, "EXL3 quantize: the Hessian is not positive "
                               "definite even after regularisation");
            goto done;
        }
        reg = 0.05 * mean;
    }
done:
    free(h);
    return st;
}

/* Quantizes the regularised target t [k][n] strip by strip from the last, feeding each strip's
 * error back through l (NULL: no feedback). Writes the states of every tile. */
static glm_status ldlq(double *t, int k, int n, const double *l, const exl3_quant_params *p,
                       uint16_t *states_all, glm_error *err)
{
    int tn_count = n / 16;
    const float *table = exl3_codebook_table(p->codebook);
    double *e = l ? calloc((size_t)k * (size_t)n, sizeof *e) : NULL; /* t - q of done strips */
    double *strip = malloc((size_t)16 * (size_t)n * sizeof *strip);
    float *targets = malloc((size_t)tn_count * 256 * sizeof *targets);
    glm_status st = GLM_OK;
    if ((l && !e) || !strip || !targets) {
        st = glm_error_set(err, GLM_ERR_NOMEM, "EXL3 quantize %d x %d: out of memory", k, n);
        goto done;
    }
    for (int tk = k / 16 - 1; tk >= 0; tk--) {
        memcpy(strip, t + (size_t)tk * 16 * n, (size_t)16 * n * sizeof *strip);
        if (l)
            for (int m = (tk + 1) * 16; m < k; m++) {
                const double *em = e + (size_t)m * n;
                for (int r = 0; r < 16; r++) {
                    double c = l[(size_t)m * k + tk * 16 + r];
                    double *sr = strip + (size_t)r * n;
                    for (int j = 0; j < n; j++)
                        sr[j] += c * em[j];
                }
            }
        for (int tn = 0; tn < tn_count; tn++)
            gather_tile(strip, n, 0, tn, targets + (size_t)tn * 256);
        uint16_t *states = states_all + (size_t)tk * tn_count * 256;
        if (encode_batch(targets, states, NULL, tn_count, p->bits, p->codebook, p->threads) != 0) {
            st = glm_error_set(err, GLM_ERR_NOMEM, "EXL3 quantize: out of memory in the search");
            goto done;
        }
        if (l) {
            /* q of this strip, then e = t - q (the original target, without the feedback) */
            double *q = strip;
            for (int tn = 0; tn < tn_count; tn++)
                scatter_states(states + (size_t)tn * 256, table, q, n, 0, tn);
            for (int r = 0; r < 16; r++)
                for (int j = 0; j < n; j++) {
                    size_t at = (size_t)(tk * 16 + r) * n + j;
                    e[at] = t[at] - q[(size_t)r * n + j];
                }
        }
    }
done:
    free(e);
    free(strip);
    free(targets);
    return st;
}

static glm_status check_params(int out, int in, const exl3_quant_params *p, glm_error *err)
{
    if (in <= 0 || out <= 0 || in % 128 || out % 128)
        return glm_error_set(err, GLM_ERR_ARG, "EXL3 quantize: shape [%d, %d] must be positive "
                             "multiples of 128", out, in);
    if (p->bits < 1 || p->bits > EXL3_MAX_BITS)
        return glm_error_set(err, GLM_ERR_ARG, "EXL3 quantize: %d bits; use 1..8", p->bits);
    if (p->codebook != EXL3_CB_3INST && p->codebook != EXL3_CB_MCG && p->codebook != EXL3_CB_MUL1)
        return glm_error_set(err, GLM_ERR_ARG, "EXL3 quantize: unknown codebook %d",
                             (int)p->codebook);
    return GLM_OK;
}

glm_status exl3_quantize(const float *w, int out, int in, const float *hessian,
                         const exl3_quant_params *p, exl3_quant_out *q, glm_error *err)
{
    glm_status st = check_params(out, in, p, err);
    if (st != GLM_OK)
        return st;
    int k = in, n = out;
    size_t kn = (size_t)k * (size_t)n;
    double *t = malloc(kn * sizeof *t);
    float *su = malloc((size_t)k * sizeof *su);
    float *sv = malloc((size_t)n * sizeof *sv);
    uint16_t *states = malloc(kn * sizeof *states);
    double *l = hessian ? malloc((size_t)k * (size_t)k * sizeof *l) : NULL;
    double *row = malloc((size_t)(k > n ? k : n) * sizeof *row);
    if (!t || !su || !sv || !states || (hessian && !l) || !row) {
        st = glm_error_set(err, GLM_ERR_NOMEM, "EXL3 quantize [%d, %d]: out of memory", out, in);
        goto done;
    }
    uint64_t seed = p->seed;
    for (int i = 0; i < k; i++)
        su[i] = (splitmix(&seed) & 1) ? -1.0f : 1.0f;
    for (int j = 0; j < n; j++)
        sv[j] = (splitmix(&seed) & 1) ? -1.0f : 1.0f;
    for (int i = 0; i < k; i++) /* EXL3 orientation [in][out] */
        for (int j = 0; j < n; j++)
            t[(size_t)i * n + j] = w[(size_t)j * k + i];
    /* output scales: per-column RMS over its mean, rounded to what svh stores */
    double mean_rms = 0;
    for (int j = 0; j < n; j++) {
        double s = 0;
        for (int i = 0; i < k; i++)
            s += t[(size_t)i * n + j] * t[(size_t)i * n + j];
        row[j] = sqrt(s / k);
        mean_rms += row[j];
    }
    mean_rms /= n;
    for (int j = 0; j < n; j++) {
        double scale = p->out_scales ? (mean_rms > 0 ? row[j] / mean_rms : 0) : 1.0;
        if (row[j] == 0)
            scale = 0;
        sv[j] = exl3_f16_to_f32(exl3_f16_from_f64(sv[j] * scale));
    }
    for (int i = 0; i < k; i++) {
        double *ti = t + (size_t)i * n;
        for (int j = 0; j < n; j++)
            ti[j] = sv[j] != 0 ? ti[j] / sv[j] : 0;
        for (int b = 0; b < n; b += HADAMARD_BLOCK)
            hadamard128_f64(ti + b);
    }
    /* input scales: rows to the codebook's sigma */
    double sigma = codebook_sigma(p->codebook);
    for (int i = 0; i < k; i++) {
        double s = 0;
        for (int j = 0; j < n; j++)
            s += t[(size_t)i * n + j] * t[(size_t)i * n + j];
        double rms = sqrt(s / n);
        su[i] *= (float)((rms > 0 ? rms : 0.1) / sigma);
    }
    double g = 1.0;
    if (p->scale_search) {
        /* the search works on a provisional copy rotated with unrounded scales */
        double *trial = malloc(kn * sizeof *trial);
        if (!trial) {
            st = glm_error_set(err, GLM_ERR_NOMEM, "EXL3 quantize: out of memory");
            goto done;
        }
        for (int i = 0; i < k; i++)
            for (int j = 0; j < n; j++)
                trial[(size_t)i * n + j] = t[(size_t)i * n + j] / su[i];
        for (int j = 0; j < n; j++) {
            for (int i = 0; i < k; i++)
                row[i] = trial[(size_t)i * n + j];
            for (int b = 0; b < k; b += HADAMARD_BLOCK)
                hadamard128_f64(row + b);
            for (int i = 0; i < k; i++)
                trial[(size_t)i * n + j] = row[i];
        }
        int rc = search_scale(trial, k, n, p, &g);
        free(trial);
        if (rc != 0) {
            st = glm_error_set(err, GLM_ERR_NOMEM, "EXL3 quantize: out of memory in the scale "
                               "search");
            goto done;
        }
    }
    for (int i = 0; i < k; i++) {
        su[i] = exl3_f16_to_f32(exl3_f16_from_f64(su[i] / g));
        if (su[i] == 0) /* never a zero input scale: it would erase the row */
            su[i] = 0x1p-24f;
        for (int j = 0; j < n; j++)
            t[(size_t)i * n + j] /= su[i];
    }
    for (int j = 0; j < n; j++) {
        for (int i = 0; i < k; i++)
            row[i] = t[(size_t)i * n + j];
        for (int b = 0; b < k; b += HADAMARD_BLOCK)
            hadamard128_f64(row + b);
        for (int i = 0; i < k; i++)
            t[(size_t)i * n + j] = row[i];
    }
    if (hessian) {
        st = ldl_factor(hessian, su, k, l, err);
        if (st != GLM_OK)
            goto done;
    }
    st = ldlq(t, k, n, l, p, states, err);
    if (st != GLM_OK)
        goto done;
    size_t per_tile = (size_t)16 * (size_t)p->bits;
    for (size_t tile = 0; tile < kn / 256; tile++)
        exl3_tile_pack(states + tile * 256, p->bits, q->trellis + tile * per_tile);
    for (int i = 0; i < k; i++)
        q->suh[i] = exl3_f16_from_f64(su[i]);
    for (int j = 0; j < n; j++)
        q->svh[j] = exl3_f16_from_f64(sv[j]);
done:
    free(t);
    free(su);
    free(sv);
    free(states);
    free(l);
    free(row);
    return st;
}
