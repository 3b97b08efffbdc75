/* test_exl3.c: the EXL3 CPU reference decoder against the format's published facts (codebook
 * checksums and sample states, the packing example) and against independent re-derivations. */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/model/exl3.h"
#include "engine/model/hadamard.h"
#include "tests/common/check_main.h"
#include "tests/common/rng.h"

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;

/* ---- fp16 ------------------------------------------------------------------------------------ */

START_TEST(f16_round_trip_every_pattern)
{
    for (uint32_t h = 0; h < 0x10000; h++) {
        float f = exl3_f16_to_f32((uint16_t)h);
        if (isnan(f))
            continue;
        ck_assert_uint_eq(exl3_f16_from_f64(f), h);
    }
}
END_TEST

START_TEST(f16_rounds_to_nearest_even)
{
    ck_assert_uint_eq(exl3_f16_from_f64(1.0 + 0x1p-11), 0x3C00);       /* tie -> even (down) */
    ck_assert_uint_eq(exl3_f16_from_f64(1.0 + 3 * 0x1p-11), 0x3C02);   /* tie -> even (up) */
    ck_assert_uint_eq(exl3_f16_from_f64(1.0 + 0x1p-11 + 0x1p-30), 0x3C01);
    ck_assert_uint_eq(exl3_f16_from_f64(65504.0), 0x7BFF);
    ck_assert_uint_eq(exl3_f16_from_f64(65519.0), 0x7BFF);
    ck_assert_uint_eq(exl3_f16_from_f64(65520.0), 0x7C00);
    ck_assert_uint_eq(exl3_f16_from_f64(-0x1p-24), 0x8001);
    ck_assert_uint_eq(exl3_f16_from_f64(0x1p-25), 0x0000);             /* tie -> even zero */
    ck_assert_uint_eq(exl3_f16_from_f64(3 * 0x1p-25), 0x0002);
    ck_assert_uint_eq(exl3_f16_from_f64(1023.5 * 0x1p-24), 0x0400);    /* subnormal -> normal */
    ck_assert_uint_eq(exl3_f16_from_f64(1022.5 * 0x1p-24), 0x03FE);
}
END_TEST

/* ---- codebooks: the spec's table (research/exl3.md 2.3) ------------------------------------- */

typedef struct codebook_facts {
    exl3_codebook cb;
    uint32_t sum, xor_;
    uint16_t s0, s1, s1234, sffff;
    double mean, std;
} codebook_facts;

static const codebook_facts facts[3] = {
    {EXL3_CB_3INST, 0x79195A11u, 0x7AEB, 0x3A25, 0xBB5B, 0xC066, 0xB110, 0.000210, 1.243711},
    {EXL3_CB_MCG, 0x792935B3u, 0xE33F, 0x3F60, 0x304E, 0x3E0F, 0x3ACD, -0.000037, 1.244112},
    {EXL3_CB_MUL1, 0x787205B0u, 0xDE08, 0xC2E8, 0x3921, 0xB89E, 0xB936, -0.001931, 1.000310},
};

START_TEST(codebook_matches_published_table)
{
    const codebook_facts *f = &facts[_i];
    uint32_t sum = 0;
    uint16_t x = 0;
    double mean = 0, sq = 0;
    for (uint32_t s = 0; s < 0x10000; s++) {
        uint16_t v = exl3_codebook_value(f->cb, s);
        sum += v;
        x ^= v;
        double d = exl3_f16_to_f32(v);
        mean += d;
        sq += d * d;
    }
    mean /= 65536.0;
    double std = sqrt(sq / 65536.0 - mean * mean);
    ck_assert_uint_eq(sum, f->sum);
    ck_assert_uint_eq(x, f->xor_);
    ck_assert_uint_eq(exl3_codebook_value(f->cb, 0), f->s0);
    ck_assert_uint_eq(exl3_codebook_value(f->cb, 1), f->s1);
    ck_assert_uint_eq(exl3_codebook_value(f->cb, 0x1234), f->s1234);
    ck_assert_uint_eq(exl3_codebook_value(f->cb, 0xFFFF), f->sffff);
    ck_assert_double_eq_tol(mean, f->mean, 1e-6);
    ck_assert_double_eq_tol(std, f->std, 1e-6);
    /* the float table the quantizer uses is the same values */
    const float *table = exl3_codebook_table(f->cb);
    for (uint32_t s = 0; s < 0x10000; s += 257)
        ck_assert_float_eq(table[s], exl3_f16_to_f32(exl3_codebook_value(f->cb, s)));
}
END_TEST

/* ---- the bit stream -------------------------------------------------------------------------- */

/* An independent reading of section 2.1-2.2: expand the tile into its bit string b[], then read
 * each state's 16-bit window bit by bit. */
static void states_by_bits(const uint16_t *words, int bits, uint16_t *states)
{
    int total = 256 * bits;
    unsigned char *b = malloc((size_t)total);
    ck_assert_ptr_nonnull(b);
    for (int i = 0; i < total; i++) {
        uint32_t w = (uint32_t)words[2 * (i / 32)] | ((uint32_t)words[2 * (i / 32) + 1] << 16);
        b[i] = (unsigned char)((w >> (31 - i % 32)) & 1);
    }
    for (int p = 0; p < 256; p++) {
        int e = (p + 1) * bits;
        uint32_t s = 0;
        for (int i = e - 16; i < e; i++)
            s = (s << 1) | b[((i % total) + total) % total];
        states[p] = (uint16_t)s;
    }
    free(b);
}

START_TEST(packing_worked_example_k4)
{
    /* codes 0, 1, ..., 15 repeated: the stream is 0x0123, 0x4567, ...; on disk the halves of
     * each 32-bit pair are swapped */
    uint16_t states[256], words[64], back[256];
    for (int p = 0; p < 256; p++)
        states[p] = (uint16_t)(p % 16); /* only the low 4 bits are stored */
    exl3_tile_pack(states, 4, words);
    ck_assert_uint_eq(words[0], 0x4567);
    ck_assert_uint_eq(words[1], 0x0123);
    ck_assert_uint_eq(words[2], 0xCDEF);
    ck_assert_uint_eq(words[3], 0x89AB);
    exl3_tile_states(words, 4, back);
    ck_assert_uint_eq(back[0], 0xDEF0); /* wraps: codes 13, 14, 15 of the tile's end, then 0 */
    ck_assert_uint_eq(back[1], 0xEF01);
    ck_assert_uint_eq(back[3], 0x0123);
    ck_assert_uint_eq(back[255], 0xCDEF);
}
END_TEST

START_TEST(states_match_bitwise_reading)
{
    int bits = _i + 1;
    for (int trial = 0; trial < 20; trial++) {
        uint16_t words[16 * 8], a[256], b[256];
        for (int i = 0; i < 16 * bits; i++)
            words[i] = (uint16_t)test_rng_u32(&rng_state);
        if (trial == 0)
            memset(words, 0xFF, sizeof words);
        if (trial == 1)
            memset(words, 0, sizeof words);
        exl3_tile_states(words, bits, a);
        states_by_bits(words, bits, b);
        for (int p = 0; p < 256; p++)
            ck_assert_uint_eq(a[p], b[p]);
        /* any word string is legal, and packing its states gives the same words back */
        uint16_t again[16 * 8];
        exl3_tile_pack(a, bits, again);
        for (int i = 0; i < 16 * bits; i++)
            ck_assert_uint_eq(again[i], words[i]);
        /* neighbouring states overlap: the tail-biting shift register */
        for (int p = 0; p < 256; p++) {
            uint32_t prev = a[(p + 255) % 256];
            uint32_t expect = ((prev << bits) | (a[p] & ((1u << bits) - 1))) & 0xFFFF;
            ck_assert_uint_eq(a[p], expect);
        }
    }
}
END_TEST

START_TEST(tile_positions_are_the_mma_fragment_layout)
{
    int seen[256] = {0};
    for (int p = 0; p < 256; p++) {
        int r, c;
        exl3_tile_position(p, &r, &c);
        ck_assert(r >= 0 && r < 16 && c >= 0 && c < 16);
        seen[r * 16 + c]++;
    }
    for (int i = 0; i < 256; i++)
        ck_assert_int_eq(seen[i], 1);
    int r, c;
    exl3_tile_position(0, &r, &c);
    ck_assert(r == 0 && c == 0);
    exl3_tile_position(1, &r, &c);
    ck_assert(r == 1 && c == 0);
    exl3_tile_position(2, &r, &c);
    ck_assert(r == 8 && c == 0);
    exl3_tile_position(4, &r, &c);
    ck_assert(r == 0 && c == 8);
    exl3_tile_position(8, &r, &c); /* lane 1: rows 2t with t = 1 */
    ck_assert(r == 2 && c == 0);
    exl3_tile_position(8 * 4 + 7, &r, &c); /* lane 4: column 1 (+8), rows 9 */
    ck_assert(r == 9 && c == 9);
}
END_TEST

START_TEST(decode_tile_places_codebook_of_states)
{
    int bits = _i + 1;
    for (int cb = 0; cb < 3; cb++) {
        uint16_t words[16 * 8], states[256], tile[256];
        for (int i = 0; i < 16 * bits; i++)
            words[i] = (uint16_t)test_rng_u32(&rng_state);
        states_by_bits(words, bits, states);
        exl3_decode_tile(words, bits, (exl3_codebook)cb, tile);
        for (int p = 0; p < 256; p++) {
            int r, c;
            exl3_tile_position(p, &r, &c);
            ck_assert_uint_eq(tile[r * 16 + c], exl3_codebook_value((exl3_codebook)cb, states[p]));
        }
    }
}
END_TEST

/* ---- whole tensors --------------------------------------------------------------------------- */

typedef struct test_tensor {
    exl3_tensor t;
    uint16_t *trellis, *suh, *svh, *bias;
} test_tensor;

static void test_tensor_init(test_tensor *tt, int in, int out, int bits, exl3_codebook cb)
{
    memset(tt, 0, sizeof *tt);
    size_t words = (size_t)(in / 16) * (size_t)(out / 16) * 16 * (size_t)bits;
    tt->trellis = malloc(words * sizeof *tt->trellis);
    tt->suh = malloc((size_t)in * sizeof *tt->suh);
    tt->svh = malloc((size_t)out * sizeof *tt->svh);
    tt->bias = malloc((size_t)out * sizeof *tt->bias);
    ck_assert(tt->trellis && tt->suh && tt->svh && tt->bias);
    for (size_t i = 0; i < words; i++)
        tt->trellis[i] = (uint16_t)test_rng_u32(&rng_state);
    for (int i = 0; i < in; i++)
        tt->suh[i] = exl3_f16_from_f64(0.01 + 0.02 * test_rng_uniform(&rng_state));
    for (int i = 0; i < out; i++) {
        tt->svh[i] = exl3_f16_from_f64(test_rng_uniform(&rng_state));
        tt->bias[i] = exl3_f16_from_f64(0.1 * test_rng_uniform(&rng_state));
    }
    tt->t = (exl3_tensor){.in = in, .out = out, .bits = bits, .codebook = cb,
                          .trellis = tt->trellis, .suh = tt->suh, .svh = tt->svh};
}

static void test_tensor_free(test_tensor *tt)
{
    free(tt->trellis);
    free(tt->suh);
    free(tt->svh);
    free(tt->bias);
}

static int popcount_parity(unsigned v)
{
    int c = 0;
    for (; v; v &= v - 1)
        c ^= 1;
    return c;
}

/* W = diag(suh) Hk W^ Hn diag(svh) with an explicit dense H, for one 128 x 128 layer. */
START_TEST(dequantize_equals_dense_hadamard_formula)
{
    test_tensor tt;
    test_tensor_init(&tt, 128, 128, 3, EXL3_CB_MCG);
    uint16_t *w_hat = malloc(128 * 128 * sizeof *w_hat);
    float *w = malloc(128 * 128 * sizeof *w);
    double *tmp = malloc(128 * 128 * sizeof *tmp);
    ck_assert(w_hat && w && tmp);
    ck_assert_int_eq(exl3_decode_raw(&tt.t, w_hat, NULL), GLM_OK);
    ck_assert_int_eq(exl3_dequantize_f32(&tt.t, w, NULL), GLM_OK);
    const double s = 1.0 / sqrt(128.0);
    for (int i = 0; i < 128; i++) /* tmp = W^ Hn */
        for (int j = 0; j < 128; j++) {
            double acc = 0;
            for (int m = 0; m < 128; m++)
                acc += exl3_f16_to_f32(w_hat[i * 128 + m]) * (popcount_parity((unsigned)(m & j)) ? -s : s);
            tmp[i * 128 + j] = acc;
        }
    for (int i = 0; i < 128; i++)
        for (int j = 0; j < 128; j++) {
            double acc = 0;
            for (int m = 0; m < 128; m++)
                acc += (popcount_parity((unsigned)(i & m)) ? -s : s) * tmp[m * 128 + j];
            double ref = acc * exl3_f16_to_f32(tt.suh[i]) * exl3_f16_to_f32(tt.svh[j]);
            ck_assert_double_eq_tol(w[j * 128 + i], ref, 1e-6 * fabs(ref) + 1e-9);
        }
    free(w_hat);
    free(w);
    free(tmp);
    test_tensor_free(&tt);
}
END_TEST

/* The Hadamard-scheme product equals the product with the materialised matrix, K = 1..8 and
 * every codebook, with a bias. */
START_TEST(matmul_equals_dequantized_product)
{
    int bits = _i + 1;
    for (int cb = 0; cb < 3; cb++) {
        test_tensor tt;
        int in = 256, out = 384, rows = 3;
        test_tensor_init(&tt, in, out, bits, (exl3_codebook)cb);
        tt.t.bias = tt.bias;
        float *w = malloc((size_t)in * out * sizeof *w);
        float *x = malloc((size_t)rows * in * sizeof *x);
        float *y = malloc((size_t)rows * out * sizeof *y);
        ck_assert(w && x && y);
        for (int i = 0; i < rows * in; i++)
            x[i] = test_rng_uniform(&rng_state);
        ck_assert_int_eq(exl3_dequantize_f32(&tt.t, w, NULL), GLM_OK);
        ck_assert_int_eq(exl3_matmul(&tt.t, x, y, rows, NULL), GLM_OK);
        for (int r = 0; r < rows; r++)
            for (int j = 0; j < out; j++) {
                double ref = exl3_f16_to_f32(tt.bias[j]), mag = fabs(ref);
                for (int i = 0; i < in; i++) {
                    ref += (double)w[(size_t)j * in + i] * x[r * in + i];
                    mag += fabs((double)w[(size_t)j * in + i] * x[r * in + i]);
                }
                ck_assert_double_eq_tol(y[r * out + j], ref, 1e-6 * mag + 1e-9);
            }
        /* the single-row entry point is the same computation */
        float *y1 = malloc((size_t)out * sizeof *y1);
        ck_assert_ptr_nonnull(y1);
        ck_assert_int_eq(exl3_matvec(&tt.t, x + in, y1, NULL), GLM_OK);
        for (int j = 0; j < out; j++)
            ck_assert_float_eq(y1[j], y[out + j]);
        free(y1);
        free(w);
        free(x);
        free(y);
        test_tensor_free(&tt);
    }
}
END_TEST

START_TEST(legacy_sign_vectors)
{
    test_tensor tt;
    test_tensor_init(&tt, 128, 256, 4, EXL3_CB_3INST);
    uint16_t su[8], sv[16];
    for (int i = 0; i < 8; i++)
        su[i] = (uint16_t)test_rng_u32(&rng_state);
    for (int i = 0; i < 16; i++)
        sv[i] = (uint16_t)test_rng_u32(&rng_state);
    /* the same tensor with fp16 +-1 scales */
    for (int i = 0; i < 128; i++)
        tt.suh[i] = ((su[i / 16] >> (i % 16)) & 1) ? 0xBC00 : 0x3C00;
    for (int i = 0; i < 256; i++)
        tt.svh[i] = ((sv[i / 16] >> (i % 16)) & 1) ? 0xBC00 : 0x3C00;
    exl3_tensor legacy = tt.t;
    legacy.suh = NULL;
    legacy.svh = NULL;
    legacy.su = su;
    legacy.sv = sv;
    float *a = malloc(128 * 256 * sizeof *a), *b = malloc(128 * 256 * sizeof *b);
    ck_assert(a && b);
    ck_assert_int_eq(exl3_dequantize_f32(&tt.t, a, NULL), GLM_OK);
    ck_assert_int_eq(exl3_dequantize_f32(&legacy, b, NULL), GLM_OK);
    ck_assert_int_eq(memcmp(a, b, 128 * 256 * sizeof *a), 0);
    uint16_t *h = malloc(128 * 256 * sizeof *h);
    ck_assert_ptr_nonnull(h);
    ck_assert_int_eq(exl3_dequantize_f16(&legacy, h, NULL), GLM_OK);
    for (int i = 0; i < 128 * 256; i++) /* one rounding from double vs two through float */
        ck_assert_int_le(abs((int)h[i] - (int)exl3_f16_from_f64(a[i])), 1);
    free(h);
    free(a);
    free(b);
    test_tensor_free(&tt);
}
END_TEST

START_TEST(bad_tensors_are_refused_with_a_message)
{
    test_tensor tt;
    test_tensor_init(&tt, 128, 128, 4, EXL3_CB_MCG);
    glm_error err;
    exl3_tensor t = tt.t;
    t.in = 120;
    ck_assert_int_eq(exl3_check(&t, &err), GLM_ERR_FORMAT);
    ck_assert_ptr_nonnull(strstr(err.message, "120"));
    t = tt.t;
    t.bits = 9;
    ck_assert_int_eq(exl3_check(&t, &err), GLM_ERR_FORMAT);
    ck_assert_ptr_nonnull(strstr(err.message, "9"));
    t.bits = 0;
    ck_assert_int_eq(exl3_check(&t, &err), GLM_ERR_FORMAT);
    t = tt.t;
    t.suh = NULL;
    ck_assert_int_eq(exl3_check(&t, &err), GLM_ERR_FORMAT);
    ck_assert_ptr_nonnull(strstr(err.message, "suh"));
    t = tt.t;
    t.trellis = NULL;
    ck_assert_int_eq(exl3_dequantize_f32(&t, NULL, &err), GLM_ERR_FORMAT);
    exl3_codebook cb;
    ck_assert_int_eq(exl3_codebook_from_markers(1, 1, &cb, &err), GLM_ERR_FORMAT);
    ck_assert_int_eq(exl3_codebook_from_markers(0, 0, &cb, &err), GLM_OK);
    ck_assert_int_eq(cb, EXL3_CB_3INST);
    ck_assert_int_eq(exl3_codebook_from_markers(0, 1, &cb, &err), GLM_OK);
    ck_assert_int_eq(cb, EXL3_CB_MUL1);
    test_tensor_free(&tt);
}
END_TEST

START_TEST(hadamard_is_its_own_inverse)
{
    float v[256], orig[256];
    for (int i = 0; i < 256; i++)
        v[i] = orig[i] = test_rng_uniform(&rng_state);
    hadamard128_blocks(v, 256);
    hadamard128_blocks(v, 256);
    for (int i = 0; i < 256; i++)
        ck_assert_float_eq_tol(v[i], orig[i], 1e-5);
    /* row 0 of H is all ones: the first output is the scaled sum */
    float u[128];
    double sum = 0;
    for (int i = 0; i < 128; i++) {
        u[i] = orig[i];
        sum += orig[i];
    }
    hadamard128(u);
    ck_assert_double_eq_tol(u[0], sum / sqrt(128.0), 1e-5);
}
END_TEST

static Suite *exl3_suite(void)
{
    Suite *s = suite_create("exl3");
    TCase *tc = tcase_create("decode");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, f16_round_trip_every_pattern);
    tcase_add_test(tc, f16_rounds_to_nearest_even);
    tcase_add_loop_test(tc, codebook_matches_published_table, 0, 3);
    tcase_add_test(tc, packing_worked_example_k4);
    tcase_add_loop_test(tc, states_match_bitwise_reading, 0, 8);
    tcase_add_test(tc, tile_positions_are_the_mma_fragment_layout);
    tcase_add_loop_test(tc, decode_tile_places_codebook_of_states, 0, 8);
    tcase_add_test(tc, dequantize_equals_dense_hadamard_formula);
    tcase_add_loop_test(tc, matmul_equals_dequantized_product, 0, 8);
    tcase_add_test(tc, legacy_sign_vectors);
    tcase_add_test(tc, bad_tensors_are_refused_with_a_message);
    tcase_add_test(tc, hadamard_is_its_own_inverse);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return test_run_suite(exl3_suite());
}
