/* test_tp_split.c: Check suite for the two-rank weight split on the tiny-A fixture: the LM head's
 * vocabulary halves give exactly the one-rank logits; MLP halves summed in rank order match one rank. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/blocks.h"
#include "cpu/ops.h"
#include "model/model.h"
#include "tp/split.h"

static glm_model *open_fixture(void)
{
    const char *shared = getenv("GLMCHAT_SHARED");
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/fixtures/tiny-A", shared ? shared : "../shared");
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
        glm_mlp_weights h;
        float *owned;
        ck_assert_int_eq(tp_split_mlp(w, r, &h, &owned, &err), GLM_OK);
        ck_assert_int_eq(cpu_mlp(NULL, c, &h, c->intermediate_size / 2, x, T, part[r]), 0);
        free(owned);
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

int main(void)
{
    Suite *s = suite_create("tp_split");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, lm_head_vocabulary_halves_are_exact);
    tcase_add_test(tc, mlp_halves_sum_to_the_full_mlp);
    tcase_add_test(tc, unsplittable_shapes_are_refused);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
