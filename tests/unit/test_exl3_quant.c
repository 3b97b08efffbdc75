/* test_exl3_quant.c: the EXL3 quantizer: the tile search's chains and optimality on known data,
 * Gaussian error per bit width, quantize -> decode round trips, LDLQ's gain with a Hessian. */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/model/exl3.h"
#include "tests/common/check_main.h"
#include "tests/common/rng.h"

static uint64_t rng_state = 0x243F6A8885A308D3ull;

static double rng_gauss(void)
{
    double u1 = ((test_rng_u32(&rng_state) & 0xFFFFFF) + 1.0) / 16777218.0;
    double u2 = ((test_rng_u32(&rng_state) & 0xFFFFFF) + 1.0) / 16777218.0;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

START_TEST(encoder_recovers_a_legal_tile_exactly)
{
    int bits = _i + 1;
    const exl3_codebook cb = (exl3_codebook)(_i % 3);
    uint16_t words[128], truth[256], states[256], again[128], back[256];
    for (int i = 0; i < 16 * bits; i++)
        words[i] = (uint16_t)test_rng_u32(&rng_state);
    exl3_tile_states(words, bits, truth);
    const float *table = exl3_codebook_table(cb);
    float target[256];
    for (int p = 0; p < 256; p++)
        target[p] = table[truth[p]];
    double err = exl3_encode_tile(target, bits, cb, states);
    ck_assert_double_eq(err, 0.0);
    /* the result is a closed chain: packing keeps it */
    exl3_tile_pack(states, bits, again);
    exl3_tile_states(again, bits, back);
    for (int p = 0; p < 256; p++) {
        ck_assert_uint_eq(back[p], states[p]);
        ck_assert_float_eq(table[states[p]], target[p]);
    }
}
END_TEST

/* Relative MSE of Gaussian tiles at the codebook's sigma (research/exl3.md 3.4: K=2 0.0687,
 * K=3 0.0176, K=4 0.0047). */
START_TEST(gaussian_tile_error_per_bits)
{
    static const double limit[5] = {0, 0.30, 0.075, 0.020, 0.0055};
    int bits = _i + 1;
    double err = 0, energy = 0;
    for (int tile = 0; tile < 6; tile++) {
        float target[256];
        uint16_t states[256];
        for (int p = 0; p < 256; p++) {
            target[p] = (float)(1.2437 * rng_gauss());
            energy += (double)target[p] * target[p];
        }
        double e = exl3_encode_tile(target, bits, EXL3_CB_MCG, states);
        ck_assert(e >= 0);
        /* the returned error is the error of the returned states */
        const float *table = exl3_codebook_table(EXL3_CB_MCG);
        double check = 0;
        for (int p = 0; p < 256; p++)
            check += ((double)table[states[p]] - target[p]) * ((double)table[states[p]] - target[p]);
        ck_assert_double_eq_tol(e, check, 1e-9 * check + 1e-12);
        err += e;
    }
    ck_assert_double_le(err / energy, limit[bits]);
    ck_assert_double_ge(err / energy, limit[bits] / 4); /* a few bits cannot be free */
}
END_TEST

typedef struct quantized {
    uint16_t *trellis, *suh, *svh;
    exl3_tensor t;
} quantized;

static glm_status quantize(const float *w, int out, int in, const float *h, int bits,
                           int scale_search, quantized *q)
{
    q->trellis = malloc((size_t)in * out / 256 * 16 * bits * sizeof *q->trellis);
    q->suh = malloc((size_t)in * sizeof *q->suh);
    q->svh = malloc((size_t)out * sizeof *q->svh);
    ck_assert(q->trellis && q->suh && q->svh);
    exl3_quant_params p = {.bits = bits, .codebook = EXL3_CB_MCG, .seed = 7, .out_scales = 1,
                           .scale_search = scale_search, .threads = 2};
    exl3_quant_out o = {.trellis = q->trellis, .suh = q->suh, .svh = q->svh};
    q->t = (exl3_tensor){.in = in, .out = out, .bits = bits, .codebook = EXL3_CB_MCG,
                         .trellis = q->trellis, .suh = q->suh, .svh = q->svh};
    return exl3_quantize(w, out, in, h, &p, &o, NULL);
}

static void quantized_free(quantized *q)
{
    free(q->trellis);
    free(q->suh);
    free(q->svh);
}

static double relative_error(const float *a, const float *b, size_t n)
{
    double e = 0, s = 0;
    for (size_t i = 0; i < n; i++) {
        e += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        s += (double)b[i] * b[i];
    }
    return e / s;
}

START_TEST(round_trip_gaussian_layer)
{
    int bits = _i == 0 ? 3 : 4;
    int out = 128, in = 128;
    float *w = malloc((size_t)out * in * sizeof *w), *d = malloc((size_t)out * in * sizeof *d);
    ck_assert(w && d);
    for (int i = 0; i < out * in; i++) /* per-output scales, as real layers have */
        w[i] = (float)(0.02 * (1.0 + (i / in) % 3) * rng_gauss());
    quantized q;
    ck_assert_int_eq(quantize(w, out, in, NULL, bits, bits == 4, &q), GLM_OK);
    ck_assert_int_eq(exl3_dequantize_f32(&q.t, d, NULL), GLM_OK);
    double rel = relative_error(d, w, (size_t)out * in);
    ck_assert_double_le(rel, bits == 4 ? 0.0055 : 0.020);
    /* the product through the Hadamard scheme agrees with the dequantized weight */
    float x[128], y[128];
    for (int i = 0; i < in; i++)
        x[i] = (float)rng_gauss();
    ck_assert_int_eq(exl3_matvec(&q.t, x, y, NULL), GLM_OK);
    for (int j = 0; j < out; j++) {
        double ref = 0, mag = 0;
        for (int i = 0; i < in; i++) {
            ref += (double)d[j * in + i] * x[i];
            mag += fabs((double)d[j * in + i] * x[i]);
        }
        ck_assert_double_eq_tol(y[j], ref, 1e-5 * mag);
    }
    quantized_free(&q);
    free(w);
    free(d);
}
END_TEST

/* With calibration rows whose channels are strongly correlated, LDLQ's output error
 * tr(E H E^T) must beat quantizing without feedback. */
START_TEST(ldlq_lowers_the_output_error)
{
    int out = 128, in = 128, rows = 512;
    float *w = malloc((size_t)out * in * sizeof *w);
    float *x = malloc((size_t)rows * in * sizeof *x);
    float *h = calloc((size_t)in * in, sizeof *h);
    ck_assert(w && x && h);
    for (int i = 0; i < out * in; i++)
        w[i] = (float)rng_gauss();
    /* activations that live near a 12-dimensional subspace, as real layers' inputs do */
    enum { FACTORS = 12 };
    float *mix = malloc((size_t)FACTORS * in * sizeof *mix);
    ck_assert_ptr_nonnull(mix);
    for (int i = 0; i < FACTORS * in; i++)
        mix[i] = (float)rng_gauss();
    for (int r = 0; r < rows; r++) {
        double f[FACTORS];
        for (int a = 0; a < FACTORS; a++)
            f[a] = rng_gauss();
        for (int i = 0; i < in; i++) {
            double v = 0.1 * rng_gauss();
            for (int a = 0; a < FACTORS; a++)
                v += f[a] * mix[a * in + i];
            x[r * in + i] = (float)v;
        }
    }
    free(mix);
    for (int r = 0; r < rows; r++)
        for (int i = 0; i < in; i++)
            for (int j = 0; j < in; j++)
                h[i * in + j] += x[r * in + i] * x[r * in + j] / (float)rows;
    double loss[2];
    for (int mode = 0; mode < 2; mode++) {
        quantized q;
        ck_assert_int_eq(quantize(w, out, in, mode ? h : NULL, 3, 0, &q), GLM_OK);
        float *d = malloc((size_t)out * in * sizeof *d);
        ck_assert_ptr_nonnull(d);
        ck_assert_int_eq(exl3_dequantize_f32(&q.t, d, NULL), GLM_OK);
        double num = 0, den = 0;
        for (int j = 0; j < out; j++)
            for (int a = 0; a < in; a++)
                for (int b = 0; b < in; b++) {
                    double ea = (double)d[j * in + a] - w[j * in + a];
                    double eb = (double)d[j * in + b] - w[j * in + b];
                    num += ea * h[a * in + b] * eb;
                    den += (double)w[j * in + a] * h[a * in + b] * w[j * in + b];
                }
        loss[mode] = num / den;
        free(d);
        quantized_free(&q);
    }
    ck_assert_double_lt(loss[1], 0.5 * loss[0]);
    free(w);
    free(x);
    free(h);
}
END_TEST

START_TEST(bad_arguments_are_refused)
{
    float w[128 * 128] = {0};
    uint16_t trellis[64 * 64], suh[128], svh[128];
    exl3_quant_out o = {.trellis = trellis, .suh = suh, .svh = svh};
    exl3_quant_params p = {.bits = 9, .codebook = EXL3_CB_MCG};
    glm_error err;
    ck_assert_int_eq(exl3_quantize(w, 128, 128, NULL, &p, &o, &err), GLM_ERR_ARG);
    ck_assert_ptr_nonnull(strstr(err.message, "9 bits"));
    p.bits = 4;
    ck_assert_int_eq(exl3_quantize(w, 100, 128, NULL, &p, &o, &err), GLM_ERR_ARG);
    ck_assert_ptr_nonnull(strstr(err.message, "100"));
    float h[128 * 128] = {0}; /* all-zero calibration */
    ck_assert_int_eq(exl3_quantize(w, 128, 128, h, &p, &o, &err), GLM_ERR_ARG);
    ck_assert_ptr_nonnull(strstr(err.message, "Hessian"));
}
END_TEST

static Suite *quant_suite(void)
{
    Suite *s = suite_create("exl3_quant");
    TCase *tc = tcase_create("quantize");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, encoder_recovers_a_legal_tile_exactly, 0, 8);
    tcase_add_loop_test(tc, gaussian_tile_error_per_bits, 1, 4);
    tcase_add_loop_test(tc, round_trip_gaussian_layer, 0, 2);
    tcase_add_test(tc, ldlq_lowers_the_output_error);
    tcase_add_test(tc, bad_arguments_are_refused);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return test_run_suite(quant_suite());
}
