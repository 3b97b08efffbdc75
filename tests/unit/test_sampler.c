/* test_sampler.c: Check suite for token choice: greedy ties, seeds, and what top-k, top-p,
 * min-p and temperature keep, measured on draws from known distributions. */
#include <check.h>
#include <math.h>
#include <stdlib.h>

#include "sampler.h"
#include "tests/common/check_main.h"

static int32_t pick_once(const glm_sampling *p, const float *logits, int n)
{
    glm_error err = {0};
    glm_sampler *s = glm_sampler_new(p, n, &err);
    ck_assert_ptr_nonnull(s);
    int32_t t = glm_sampler_pick(s, logits);
    glm_sampler_free(s);
    return t;
}

START_TEST(greedy_takes_the_lowest_id_among_equal_maxima)
{
    float l[5] = {0.5f, 2.0f, -1.0f, 2.0f, 1.9f};
    glm_sampling g = {.temperature = 0};
    ck_assert_int_eq(pick_once(&g, l, 5), 1);
    glm_sampling k1 = {.temperature = 1.0f, .top_k = 1, .seed = 9};
    ck_assert_int_eq(pick_once(&k1, l, 5), 1);
    glm_sampling minp = {.temperature = 1.0f, .min_p = 1.0f, .seed = 9};
    int32_t t = pick_once(&minp, l, 5); /* min_p 1 keeps exactly the maxima */
    ck_assert(t == 1 || t == 3);
    float l2[5] = {0.5f, 2.0f, -1.0f, 1.0f, 1.9f};
    ck_assert_int_eq(pick_once(&minp, l2, 5), 1);
}
END_TEST

/* Frequencies of n draws from one sampler. */
static void histogram(const glm_sampling *p, const float *logits, int vocab, int n, int *count)
{
    glm_error err = {0};
    glm_sampler *s = glm_sampler_new(p, vocab, &err);
    ck_assert_ptr_nonnull(s);
    for (int i = 0; i < vocab; i++)
        count[i] = 0;
    for (int i = 0; i < n; i++)
        count[glm_sampler_pick(s, logits)]++;
    glm_sampler_free(s);
}

START_TEST(filters_keep_what_they_should)
{
    /* probabilities 0.5, 0.25, 0.125, 0.0625, 0.0625 */
    float l[5] = {logf(0.5f), logf(0.25f), logf(0.125f), logf(0.0625f), logf(0.0625f)};
    int c[5], n = 40000;
    glm_sampling plain = {.temperature = 1.0f, .seed = 1};
    histogram(&plain, l, 5, n, c);
    ck_assert_float_eq_tol(c[0] / (float)n, 0.5f, 0.015f);
    ck_assert_float_eq_tol(c[2] / (float)n, 0.125f, 0.01f);
    glm_sampling topk = {.temperature = 1.0f, .top_k = 2, .seed = 2};
    histogram(&topk, l, 5, n, c);
    ck_assert_int_eq(c[2] + c[3] + c[4], 0);
    ck_assert_float_eq_tol(c[0] / (float)n, 2.0f / 3.0f, 0.015f);
    glm_sampling topp = {.temperature = 1.0f, .top_p = 0.7f, .seed = 3}; /* keeps 0.5 + 0.25 */
    histogram(&topp, l, 5, n, c);
    ck_assert_int_eq(c[2] + c[3] + c[4], 0);
    glm_sampling minp = {.temperature = 1.0f, .min_p = 0.2f, .seed = 4}; /* floor 0.1 */
    histogram(&minp, l, 5, n, c);
    ck_assert_int_eq(c[3] + c[4], 0);
    ck_assert_int_gt(c[2], 0);
    glm_sampling cold = {.temperature = 0.25f, .seed = 5}; /* p^4: 0.5^4 dominates */
    histogram(&cold, l, 5, n, c);
    ck_assert_float_gt(c[0] / (float)n, 0.9f);
}
END_TEST

START_TEST(same_seed_same_tokens)
{
    float l[64];
    for (int i = 0; i < 64; i++)
        l[i] = sinf((float)i);
    glm_sampling p = {.temperature = 1.0f, .top_p = 0.95f, .seed = 1234};
    glm_error err = {0};
    glm_sampler *a = glm_sampler_new(&p, 64, &err), *b = glm_sampler_new(&p, 64, &err);
    p.seed = 1235;
    glm_sampler *c = glm_sampler_new(&p, 64, &err);
    int differ = 0;
    for (int i = 0; i < 200; i++) {
        int32_t x = glm_sampler_pick(a, l), y = glm_sampler_pick(b, l), z = glm_sampler_pick(c, l);
        ck_assert_int_eq(x, y);
        differ |= x != z;
    }
    ck_assert(differ);
    glm_sampler_free(a);
    glm_sampler_free(b);
    glm_sampler_free(c);
    uint64_t s1 = 7, s2 = 7;
    ck_assert_uint_eq(glm_rng_next(&s1), glm_rng_next(&s2));
    double u = glm_rng_uniform(&s1);
    ck_assert(u >= 0 && u < 1);
}
END_TEST

START_TEST(bad_settings_are_refused)
{
    glm_error err = {0};
    glm_sampling p = {.temperature = 1.0f, .top_p = 1.5f};
    ck_assert_ptr_null(glm_sampler_new(&p, 10, &err));
    ck_assert_int_eq(err.status, GLM_ERR_ARG);
    p.top_p = 1.0f;
    p.top_k = -1;
    ck_assert_ptr_null(glm_sampler_new(&p, 10, &err));
}
END_TEST

int main(void)
{
    Suite *s = suite_create("sampler");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, greedy_takes_the_lowest_id_among_equal_maxima);
    tcase_add_test(tc, filters_keep_what_they_should);
    tcase_add_test(tc, same_seed_same_tokens);
    tcase_add_test(tc, bad_settings_are_refused);
    suite_add_tcase(s, tc);
    return test_run_suite(s);
}
