/* test_tp_split.c: Check suite for the two-rank weight split: on the tiny-A fixture the LM head's
 * vocabulary halves give exactly the one-rank logits and MLP halves summed in rank order match one
 * rank; EXL3 output halves are exact, input halves and EXL3 MLPs sum to one rank, bad cuts refused. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/blocks.h"
#include "cpu/ops.h"
#include "model/exl3.h"
#include "model/model.h"
#include "tp/split.h"

static glm_model *open_fixture(void)
{
    const char *src = getenv("GLMCHAT_SRCDIR");
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/tests/fixtures/models/tiny-A", src ? src : ".");
    glm_error err = {0};
    glm_model *m = glm_model_open(dir, &err);
    ck_assert_msg(m != NULL, "%s", err.message);
    return m;
}

static void fill(float *x, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        x[i] = ((float)(seed >> 8) / (float)(1u << 24) - 0.5f) * 2.0f;
    }
}

START_TEST(lm_head_vocabulary_halves_are_exact)
{
    glm_model *m = open_fixture();
    const glm_weight *head = &m->w.lm_head;
    int D = m->cfg.hidden_size, V = (int)head->rows, T = 3;
    float *x = malloc(sizeof(float) * (size_t)T * D), *full = malloc(sizeof(float) * (size_t)T * V);
    float *half[2] = {malloc(sizeof(float) * (size_t)T * V / 2), malloc(sizeof(float) * (size_t)T * V / 2)};
    fill(x, (size_t)T * D, 7);
    ck_assert_int_eq(cpu_matmul(NULL, head, x, T, full), 0);
    glm_error err;
    for (int r = 0; r < 2; r++) {
        glm_weight h;
        ck_assert_int_eq(tp_split_rows(head, r, &h, &err), GLM_OK);
        ck_assert_int_eq(cpu_matmul(NULL, &h, x, T, half[r]), 0);
    }
    /* each output row is the same dot product on one rank or two: identical bits */
    for (int t = 0; t < T; t++)
        for (int r = 0; r < 2; r++)
            ck_assert_mem_eq(half[r] + (size_t)t * V / 2, full + (size_t)t * V + (size_t)r * V / 2,
                             sizeof(float) * (size_t)V / 2);
    free(x);
    free(full);
    free(half[0]);
    free(half[1]);
    glm_model_close(m);
}
END_TEST

START_TEST(mlp_halves_sum_to_the_full_mlp)
{
    glm_model *m = open_fixture();
    const glm_config *c = &m->cfg;
    int li = 0;
    while (li < c->num_layers && c->moe[li])
        li++;
    ck_assert_int_lt(li, c->num_layers);
    const glm_mlp_weights *w = &m->w.layers[li].mlp;
    int D = c->hidden_size, T = 4;
    float *x = malloc(sizeof(float) * (size_t)T * D), *full = malloc(sizeof(float) * (size_t)T * D);
    float *part[2] = {malloc(sizeof(float) * (size_t)T * D), malloc(sizeof(float) * (size_t)T * D)};
    fill(x, (size_t)T * D, 11);
    ck_assert_int_eq(cpu_mlp(NULL, c, w, c->intermediate_size, x, T, full), 0);
    glm_error err;
    for (int r = 0; r < 2; r++) {
        glm_mlp_weights h = *w;
        tp_split_owned owned = {0};
        ck_assert_int_eq(tp_split_mlp(&h, r, &owned, &err), GLM_OK);
        ck_assert_int_eq(cpu_mlp(NULL, c, &h, c->intermediate_size / 2, x, T, part[r]), 0);
        tp_split_owned_free(&owned);
    }
    double worst = 0;
    for (size_t i = 0; i < (size_t)T * D; i++) {
        float sum = part[0][i] + part[1][i]; /* rank order, as both ranks compute it */
        double d = fabs((double)sum - full[i]) / (fabs(full[i]) + 1e-3);
        if (d > worst)
            worst = d;
    }
    ck_assert_msg(worst < 1e-5, "rank-order sum differs from one rank by %g (relative)", worst);
    printf("mlp split: worst relative difference %.3g\n", worst);
    free(x);
    free(full);
    free(part[0]);
    free(part[1]);
    glm_model_close(m);
}
END_TEST

START_TEST(unsplittable_shapes_are_refused)
{
    glm_weight w = {.name = "odd", .kind = GLM_W_PLAIN, .dtype = ST_F32, .rows = 3, .cols = 4};
    float data[12] = {0};
    w.data = data;
    glm_weight h;
    float *owned;
    glm_error err;
    ck_assert_int_eq(tp_split_rows(&w, 0, &h, &err), GLM_ERR_ARG);
    ck_assert_ptr_nonnull(strstr(err.message, "odd has 3 rows"));
    ck_assert_int_eq(tp_split_cols(&w, 1, &h, &owned, &err), GLM_OK);
    ck_assert_int_eq(h.cols, 2);
    free(owned);
    w.kind = GLM_W_EXL3;
    ck_assert_int_eq(tp_split_cols(&w, 0, &h, &owned, &err), GLM_ERR_UNSUPPORTED);
}
END_TEST

/* ---- EXL3 ---------------------------------------------------------------------------------- */

/* A random [out, in] EXL3 weight (random trellis words and scales: any words decode, and the
 * split is about which words and scales each rank takes); buffers live in q (exl3_weight_free). */
typedef struct exl3_weight {
    exl3_tensor t;
    glm_weight w;
    uint16_t *bias;
} exl3_weight;

static void exl3_weight_make(exl3_weight *q, const char *name, int out, int in, unsigned seed)
{
    int bits = 4;
    size_t words = (size_t)(in / 16) * (size_t)(out / 16) * 16 * (size_t)bits;
    uint16_t *trellis = malloc(words * 2), *suh = malloc((size_t)in * 2), *svh = malloc((size_t)out * 2);
    ck_assert(trellis && suh && svh);
    for (size_t i = 0; i < words; i++) {
        seed = seed * 1103515245u + 12345u;
        trellis[i] = (uint16_t)(seed >> 12);
    }
    float *s = malloc(sizeof(float) * (size_t)(in + out));
    fill(s, (size_t)(in + out), seed);
    for (int i = 0; i < in; i++)
        suh[i] = exl3_f16_from_f64(s[i] < 0 ? s[i] - 0.5 : s[i] + 0.5);
    for (int i = 0; i < out; i++)
        svh[i] = exl3_f16_from_f64(0.02 * (s[in + i] + 1.5));
    free(s);
    q->t = (exl3_tensor){.in = in, .out = out, .bits = bits, .codebook = EXL3_CB_MCG,
                         .trellis = trellis, .suh = suh, .svh = svh};
    q->w = (glm_weight){.name = name, .kind = GLM_W_EXL3, .dtype = ST_I16, .rows = out, .cols = in,
                        .data = trellis, .exl3 = &q->t};
    q->bias = NULL;
}

static void exl3_weight_free(exl3_weight *q)
{
    free((void *)q->t.trellis);
    free((void *)q->t.suh);
    free((void *)q->t.svh);
    free(q->bias);
}

START_TEST(exl3_output_halves_are_exact)
{
    exl3_weight q;
    exl3_weight_make(&q, "gate.trellis", 256, 128, 5);
    int T = 3, N = 256, K = 128;
    float *x = malloc(sizeof(float) * (size_t)T * K), *full = malloc(sizeof(float) * (size_t)T * N);
    float *half = malloc(sizeof(float) * (size_t)T * N / 2);
    fill(x, (size_t)T * K, 9);
    ck_assert_int_eq(cpu_matmul(NULL, &q.w, x, T, full), 0);
    glm_error err;
    for (int r = 0; r < 2; r++) {
        glm_weight h;
        void *owned;
        ck_assert_int_eq(tp_split_exl3(&q.w, r, 0, &h, &owned, &err), GLM_OK);
        ck_assert_int_eq(h.rows, N / 2);
        ck_assert_int_eq(h.cols, K);
        ck_assert_int_eq(cpu_matmul(NULL, &h, x, T, half), 0);
        for (int t = 0; t < T; t++)
            ck_assert_mem_eq(half + (size_t)t * N / 2, full + (size_t)t * N + (size_t)r * N / 2,
                             sizeof(float) * (size_t)N / 2);
        free(owned);
    }
    free(x);
    free(full);
    free(half);
    exl3_weight_free(&q);
}
END_TEST

START_TEST(exl3_input_halves_sum_to_the_whole)
{
    exl3_weight q;
    exl3_weight_make(&q, "down.trellis", 128, 256, 6);
    int T = 2, N = 128, K = 256;
    q.bias = malloc(sizeof(uint16_t) * (size_t)N);
    for (int i = 0; i < N; i++)
        q.bias[i] = exl3_f16_from_f64(0.01 * (i % 7) - 0.03);
    q.t.bias = q.bias;
    float *x = malloc(sizeof(float) * (size_t)T * K), *full = malloc(sizeof(float) * (size_t)T * N);
    float *xh = malloc(sizeof(float) * (size_t)T * K / 2);
    float *part[2] = {malloc(sizeof(float) * (size_t)T * N), malloc(sizeof(float) * (size_t)T * N)};
    fill(x, (size_t)T * K, 10);
    ck_assert_int_eq(cpu_matmul(NULL, &q.w, x, T, full), 0);
    glm_error err;
    for (int r = 0; r < 2; r++) {
        glm_weight h;
        void *owned;
        ck_assert_int_eq(tp_split_exl3(&q.w, r, 1, &h, &owned, &err), GLM_OK);
        ck_assert_int_eq(h.cols, K / 2);
        ck_assert(r == 0 ? h.exl3->bias != NULL : h.exl3->bias == NULL);
        for (int t = 0; t < T; t++)
            memcpy(xh + (size_t)t * K / 2, x + (size_t)t * K + (size_t)r * K / 2, sizeof(float) * (size_t)K / 2);
        ck_assert_int_eq(cpu_matmul(NULL, &h, xh, T, part[r]), 0);
        free(owned);
    }
    double worst = 0, scale = 0;
    for (size_t i = 0; i < (size_t)T * N; i++)
        scale = fmax(scale, fabs(full[i]));
    for (size_t i = 0; i < (size_t)T * N; i++)
        worst = fmax(worst, fabs((double)(part[0][i] + part[1][i]) - full[i]) / scale);
    ck_assert_msg(worst < 1e-6, "EXL3 input halves differ from the whole by %g of the largest output", worst);
    ck_assert_msg(worst > 0 || part[0][0] != 0, "the partial products are empty");
    printf("exl3 input split: worst difference %.3g of the largest output\n", worst);
    free(x);
    free(xh);
    free(full);
    free(part[0]);
    free(part[1]);
    exl3_weight_free(&q);
}
END_TEST

START_TEST(exl3_mlp_halves_sum_to_the_full_mlp)
{
    glm_model *m = open_fixture(); /* for the config's SwiGLU settings only */
    int D = 128, I = 256, T = 3;
    exl3_weight g, u, d;
    exl3_weight_make(&g, "gate", I, D, 21);
    exl3_weight_make(&u, "up", I, D, 22);
    exl3_weight_make(&d, "down", D, I, 23);
    glm_mlp_weights w = {g.w, u.w, d.w};
    float *x = malloc(sizeof(float) * (size_t)T * D), *full = malloc(sizeof(float) * (size_t)T * D);
    float *part[2] = {malloc(sizeof(float) * (size_t)T * D), malloc(sizeof(float) * (size_t)T * D)};
    fill(x, (size_t)T * D, 12);
    ck_assert_int_eq(cpu_mlp(NULL, &m->cfg, &w, I, x, T, full), 0);
    glm_error err;
    for (int r = 0; r < 2; r++) {
        glm_mlp_weights h = w;
        tp_split_owned owned = {0};
        ck_assert_msg(tp_split_mlp(&h, r, &owned, &err) == GLM_OK, "%s", err.message);
        ck_assert_int_eq(owned.n, 3);
        ck_assert_int_eq(cpu_mlp(NULL, &m->cfg, &h, I / 2, x, T, part[r]), 0);
        tp_split_owned_free(&owned);
    }
    double worst = 0, scale = 0;
    for (size_t i = 0; i < (size_t)T * D; i++)
        scale = fmax(scale, fabs(full[i]));
    for (size_t i = 0; i < (size_t)T * D; i++)
        worst = fmax(worst, fabs((double)(part[0][i] + part[1][i]) - full[i]) / scale);
    ck_assert_msg(worst < 1e-6, "EXL3 MLP halves differ from the whole by %g of the largest output", worst);
    printf("exl3 mlp split: worst difference %.3g of the largest output\n", worst);
    free(x);
    free(full);
    free(part[0]);
    free(part[1]);
    exl3_weight_free(&g);
    exl3_weight_free(&u);
    exl3_weight_free(&d);
    glm_model_close(m);
}
END_TEST

START_TEST(exl3_cuts_inside_a_hadamard_block_are_refused)
{
    exl3_weight q;
    exl3_weight_make(&q, "layers.1.mlp.experts.0.gate_proj.trellis", 128, 256, 7);
    glm_weight h;
    void *owned = (void *)1;
    glm_error err;
    ck_assert_int_eq(tp_split_exl3(&q.w, 0, 0, &h, &owned, &err), GLM_ERR_UNSUPPORTED);
    ck_assert_ptr_null(owned);
    ck_assert_msg(strstr(err.message, "layers.1.mlp.experts.0.gate_proj.trellis: EXL3 weights [128 out, "
                                      "256 in]") && strstr(err.message, "each rank's 64 is not a multiple of 128"),
                  "%s", err.message);
    ck_assert_int_eq(tp_split_exl3(&q.w, 1, 1, &h, &owned, &err), GLM_OK); /* 256 inputs halve */
    free(owned);
    glm_mlp_weights w = {q.w, q.w, q.w};
    tp_split_owned o = {0};
    ck_assert_int_eq(tp_split_mlp(&w, 0, &o, &err), GLM_ERR_UNSUPPORTED);
    tp_split_owned_free(&o);
    exl3_weight_free(&q);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("tp_split");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, lm_head_vocabulary_halves_are_exact);
    tcase_add_test(tc, mlp_halves_sum_to_the_full_mlp);
    tcase_add_test(tc, unsplittable_shapes_are_refused);
    tcase_add_test(tc, exl3_output_halves_are_exact);
    tcase_add_test(tc, exl3_input_halves_sum_to_the_whole);
    tcase_add_test(tc, exl3_mlp_halves_sum_to_the_full_mlp);
    tcase_add_test(tc, exl3_cuts_inside_a_hadamard_block_are_refused);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
