/* exl3_decode.c: the CPU reference decoder of EXL3 tensors: fp16 helpers, the three codebooks,
 * the tail-biting bit stream of a tile, its tensor-core layout, and whole-tensor dequantization. */
#include "engine/model/exl3.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "engine/model/hadamard.h"

/* ---- fp16 ------------------------------------------------------------------------------------ */

float exl3_f16_to_f32(uint16_t h)
{
    int sign = (h >> 15) & 1;
    int exp = (h >> 10) & 0x1F;
    int man = h & 0x3FF;
    double v;
    if (exp == 0)
        v = ldexp((double)man, -24);
    else if (exp == 31)
        v = man ? NAN : INFINITY;
    else
        v = ldexp((double)(man | 0x400), exp - 25);
    return (float)(sign ? -v : v);
}

uint16_t exl3_f16_from_f64(double v)
{
    if (isnan(v))
        return 0x7E00;
    uint16_t sign = signbit(v) ? 0x8000 : 0;
    double a = fabs(v);
    if (a >= 65520.0) /* halfway above the largest half (65504) ties to infinity */
        return sign | 0x7C00;
    if (a < 0x1p-14) /* subnormal: integer units of 2^-24; 1024 units is the smallest normal */
        return sign | (uint16_t)nearbyint(a * 0x1p24);
    int e;
    (void)frexp(a, &e); /* a = m * 2^e, m in [0.5, 1): a has exponent e - 1 */
    double q = nearbyint(ldexp(a, 11 - e)); /* the 11-bit significand, [1024, 2048] */
    if (q >= 2048.0) {
        q = 1024.0;
        e++;
    }
    int field = e - 1 + 15;
    if (field >= 31)
        return sign | 0x7C00;
    return sign | (uint16_t)(field << 10) | (uint16_t)((int)q - 1024);
}

/* ---- codebooks ------------------------------------------------------------------------------- */

static uint16_t half_add(uint16_t a, uint16_t b)
{
    /* the sum of two halves is exact in double; one rounding to fp16 */
    return exl3_f16_from_f64((double)exl3_f16_to_f32(a) + (double)exl3_f16_to_f32(b));
}

uint16_t exl3_codebook_value(exl3_codebook cb, uint32_t state)
{
    uint32_t s = state & 0xFFFFu;
    if (cb == EXL3_CB_MUL1) {
        uint32_t x = s * EXL3_MUL1_MARKER;
        uint32_t bytesum = (x & 0xFF) + ((x >> 8) & 0xFF) + ((x >> 16) & 0xFF) + (x >> 24);
        double h = 1024.0 + (double)bytesum;                  /* fp16 0x6400 + bytesum, exact */
        double m = (double)exl3_f16_to_f32(0x1EEE);           /* 0.00676727294921875 */
        double c = (double)exl3_f16_to_f32(0xC931);           /* -10.3828125 */
        return exl3_f16_from_f64(h * m + c);                  /* exact in double, rounded once */
    }
    uint32_t x = cb == EXL3_CB_MCG ? s * EXL3_MCG_MARKER : s * 89226354u + 64248484u;
    x = (x & 0x8FFF8FFFu) ^ 0x3B603B60u;
    return half_add((uint16_t)(x & 0xFFFF), (uint16_t)(x >> 16));
}

/* ---- one tile -------------------------------------------------------------------------------- */

/* Stored int16 pairs read as little-endian 32-bit words, taken most significant bit first. */
static uint32_t tile_word(const uint16_t *words, int m)
{
    return (uint32_t)words[2 * m] | ((uint32_t)words[2 * m + 1] << 16);
}

void exl3_tile_states(const uint16_t *words, int bits, uint16_t states[EXL3_TILE_VALUES])
{
    int nwords = 8 * bits; /* 32-bit words in the tile */
    int total = EXL3_TILE_VALUES * bits;
    for (int p = 0; p < EXL3_TILE_VALUES; p++) {
        int first = (p + 1) * bits - 16 + total; /* window start, kept non-negative */
        int i0 = (first / 32) % nwords;
        int i1 = (i0 + 1) % nwords;
        int off = first % 32;
        uint64_t v = ((uint64_t)tile_word(words, i0) << 32) | tile_word(words, i1);
        states[p] = (uint16_t)((v >> (48 - off)) & 0xFFFF);
    }
}

void exl3_tile_pack(const uint16_t states[EXL3_TILE_VALUES], int bits, uint16_t *words)
{
    int n16 = EXL3_TILE * bits;
    uint16_t stream[EXL3_TILE * EXL3_MAX_BITS];
    memset(stream, 0, sizeof stream);
    uint32_t mask = (1u << bits) - 1;
    for (int p = 0; p < EXL3_TILE_VALUES; p++) {
        uint32_t code = states[p] & mask;
        for (int b = 0; b < bits; b++) {
            int pos = p * bits + b; /* MSB of the code first */
            if ((code >> (bits - 1 - b)) & 1)
                stream[pos / 16] |= (uint16_t)(0x8000u >> (pos % 16));
        }
    }
    for (int m = 0; m < n16 / 2; m++) { /* halves of each 32-bit pair are swapped on disk */
        words[2 * m] = stream[2 * m + 1];
        words[2 * m + 1] = stream[2 * m];
    }
}

void exl3_tile_position(int p, int *row, int *col)
{
    int lane = p / 8;
    int j = p % 8;
    *row = 2 * (lane % 4) + (j & 1) + 8 * ((j >> 1) & 1);
    *col = lane / 4 + 8 * (j >> 2);
}

static int where[EXL3_TILE_VALUES]; /* row-major index of each stream position */
static pthread_once_t where_once = PTHREAD_ONCE_INIT;

static void fill_where(void)
{
    for (int p = 0; p < EXL3_TILE_VALUES; p++) {
        int row, col;
        exl3_tile_position(p, &row, &col);
        where[p] = row * EXL3_TILE + col;
    }
}

/* Every state's value per codebook, built once (the arithmetic above is the definition). */
static uint16_t value_tables[3][65536];
static pthread_once_t value_once[3] = {PTHREAD_ONCE_INIT, PTHREAD_ONCE_INIT, PTHREAD_ONCE_INIT};

static void fill_values(exl3_codebook cb)
{
    for (uint32_t s = 0; s < 65536; s++)
        value_tables[cb][s] = exl3_codebook_value(cb, s);
}
static void fill_values_3inst(void) { fill_values(EXL3_CB_3INST); }
static void fill_values_mcg(void) { fill_values(EXL3_CB_MCG); }
static void fill_values_mul1(void) { fill_values(EXL3_CB_MUL1); }

static const uint16_t *value_table(exl3_codebook cb)
{
    static void (*const fill[3])(void) = {fill_values_3inst, fill_values_mcg, fill_values_mul1};
    int i = cb == EXL3_CB_MCG ? 1 : cb == EXL3_CB_MUL1 ? 2 : 0;
    pthread_once(&value_once[i], fill[i]);
    return value_tables[i];
}

void exl3_decode_tile(const uint16_t *words, int bits, exl3_codebook cb,
                      uint16_t tile[EXL3_TILE_VALUES])
{
    pthread_once(&where_once, fill_where);
    const uint16_t *values = value_table(cb);
    uint16_t states[EXL3_TILE_VALUES];
    exl3_tile_states(words, bits, states);
    for (int p = 0; p < EXL3_TILE_VALUES; p++)
        tile[where[p]] = values[states[p]];
}

/* ---- whole tensors --------------------------------------------------------------------------- */

glm_status exl3_codebook_from_markers(int has_mcg, int has_mul1, exl3_codebook *cb,
                                      glm_error *err)
{
    if (has_mcg && has_mul1)
        return glm_error_set(err, GLM_ERR_FORMAT,
                             "EXL3 tensor has both `mcg` and `mul1` markers; keep only one");
    *cb = has_mcg ? EXL3_CB_MCG : has_mul1 ? EXL3_CB_MUL1 : EXL3_CB_3INST;
    return GLM_OK;
}

glm_status exl3_check(const exl3_tensor *t, glm_error *err)
{
    if (t->in <= 0 || t->out <= 0 || t->in % 128 || t->out % 128)
        return glm_error_set(err, GLM_ERR_FORMAT,
                             "EXL3 shape %d x %d: inputs and outputs must be positive multiples "
                             "of 128", t->in, t->out);
    if (t->bits < 1 || t->bits > EXL3_MAX_BITS)
        return glm_error_set(err, GLM_ERR_FORMAT,
                             "EXL3 bit width %d: trellis.shape[-1] / 16 must be 1..8", t->bits);
    if (t->codebook != EXL3_CB_3INST && t->codebook != EXL3_CB_MCG && t->codebook != EXL3_CB_MUL1)
        return glm_error_set(err, GLM_ERR_FORMAT, "EXL3 codebook %d is unknown",
                             (int)t->codebook);
    if (!t->trellis)
        return glm_error_set(err, GLM_ERR_FORMAT, "EXL3 tensor has no trellis");
    if (!t->suh && !t->su)
        return glm_error_set(err, GLM_ERR_FORMAT, "EXL3 tensor has neither suh nor su");
    if (!t->svh && !t->sv)
        return glm_error_set(err, GLM_ERR_FORMAT, "EXL3 tensor has neither svh nor sv");
    return GLM_OK;
}

static void scales_from(const uint16_t *half_scales, const uint16_t *sign_bits, int n,
                        float *scales)
{
    for (int i = 0; i < n; i++) {
        if (half_scales)
            scales[i] = exl3_f16_to_f32(half_scales[i]);
        else
            scales[i] = ((sign_bits[i / 16] >> (i % 16)) & 1) ? -1.0f : 1.0f;
    }
}

void exl3_input_scales(const exl3_tensor *t, float *scales)
{
    scales_from(t->suh, t->su, t->in, scales);
}

void exl3_output_scales(const exl3_tensor *t, float *scales)
{
    scales_from(t->svh, t->sv, t->out, scales);
}

static const uint16_t *tile_words(const exl3_tensor *t, int tk, int tn)
{
    size_t per_tile = (size_t)EXL3_TILE * (size_t)t->bits;
    return t->trellis + ((size_t)tk * (size_t)(t->out / EXL3_TILE) + (size_t)tn) * per_tile;
}

glm_status exl3_decode_raw(const exl3_tensor *t, uint16_t *w_hat, glm_error *err)
{
    glm_status st = exl3_check(t, err);
    if (st != GLM_OK)
        return st;
    uint16_t tile[EXL3_TILE_VALUES];
    for (int tk = 0; tk < t->in / EXL3_TILE; tk++)
        for (int tn = 0; tn < t->out / EXL3_TILE; tn++) {
            exl3_decode_tile(tile_words(t, tk, tn), t->bits, t->codebook, tile);
            for (int r = 0; r < EXL3_TILE; r++)
                memcpy(w_hat + (size_t)(tk * EXL3_TILE + r) * (size_t)t->out + (size_t)tn * EXL3_TILE,
                       tile + r * EXL3_TILE, EXL3_TILE * sizeof *tile);
        }
    return GLM_OK;
}

/* W in HF orientation [out][in] as doubles: rotate rows of W^ over n, transpose, rotate over k,
 * scale. */
static glm_status dequantize_f64(const exl3_tensor *t, double *w, glm_error *err)
{
    size_t k = (size_t)t->in, n = (size_t)t->out;
    uint16_t *w_hat = malloc(k * n * sizeof *w_hat);
    double *row = malloc(n * sizeof *row);
    float *su = malloc(k * sizeof *su);
    float *sv = malloc(n * sizeof *sv);
    glm_status st = GLM_OK;
    if (!w_hat || !row || !su || !sv) {
        st = glm_error_set(err, GLM_ERR_NOMEM, "EXL3 dequantize %zu x %zu: out of memory", k, n);
        goto done;
    }
    st = exl3_decode_raw(t, w_hat, err);
    if (st != GLM_OK)
        goto done;
    exl3_input_scales(t, su);
    exl3_output_scales(t, sv);
    for (size_t i = 0; i < k; i++) {
        for (size_t j = 0; j < n; j++)
            row[j] = exl3_f16_to_f32(w_hat[i * n + j]);
        for (size_t b = 0; b < n; b += HADAMARD_BLOCK)
            hadamard128_f64(row + b);
        for (size_t j = 0; j < n; j++)
            w[j * k + i] = row[j];
    }
    for (size_t j = 0; j < n; j++) {
        double *wr = w + j * k;
        for (size_t b = 0; b < k; b += HADAMARD_BLOCK)
            hadamard128_f64(wr + b);
        for (size_t i = 0; i < k; i++)
            wr[i] *= (double)su[i] * (double)sv[j];
    }
done:
    free(w_hat);
    free(row);
    free(su);
    free(sv);
    return st;
}

static glm_status dequantize_into(const exl3_tensor *t, float *wf, uint16_t *wh, glm_error *err)
{
    glm_status st = exl3_check(t, err);
    if (st != GLM_OK)
        return st;
    size_t count = (size_t)t->in * (size_t)t->out;
    double *w = malloc(count * sizeof *w);
    if (!w)
        return glm_error_set(err, GLM_ERR_NOMEM, "EXL3 dequantize %d x %d: out of memory",
                             t->in, t->out);
    st = dequantize_f64(t, w, err);
    if (st == GLM_OK)
        for (size_t i = 0; i < count; i++) {
            if (wf)
                wf[i] = (float)w[i];
            else
                wh[i] = exl3_f16_from_f64(w[i]);
        }
    free(w);
    return st;
}

glm_status exl3_dequantize_f32(const exl3_tensor *t, float *w, glm_error *err)
{
    return dequantize_into(t, w, NULL, err);
}

glm_status exl3_dequantize_f16(const exl3_tensor *t, uint16_t *w, glm_error *err)
{
    return dequantize_into(t, NULL, w, err);
}
