/* test_decode_tables.c: Check suite for bench/decode_tables.c, the arithmetic of the CUDA decode
 * bench's tables, against values worked out by hand (the public window costs' 1.33x, 1.89x and
 * 2.37x at 2, 4 and 8 rows). */
#include <check.h>
#include <math.h>
#include <stdlib.h>

#include "bench/decode_tables.h"

START_TEST(public_window_ratios_match_the_published_ones)
{
    ck_assert_double_eq_tol(dt_public_ratio(1), 1.0, 1e-12);
    ck_assert_double_eq_tol(dt_public_ratio(2), 38.9 / 29.2, 1e-12);
    ck_assert_double_eq_tol(dt_public_ratio(2), 1.33, 0.005); /* as published: 1.33x at 2 rows */
    ck_assert_double_eq_tol(dt_public_ratio(4), 1.89, 0.005);
    ck_assert_double_eq_tol(dt_public_ratio(8), 2.37, 0.005);
    ck_assert_double_eq_tol(dt_public_ratio(8), 2.369863, 1e-6);
    ck_assert_double_eq(dt_public_ratio(0), 0);
    ck_assert_double_eq(dt_public_ratio(9), 0);  /* none published for 16 rows */
    ck_assert_double_eq(dt_public_ratio(16), 0);
}
END_TEST

START_TEST(ratios_and_shares)
{
    ck_assert_double_eq_tol(dt_ratio(5.5, 5.0), 1.1, 1e-12);
    ck_assert_double_eq_tol(dt_ratio(3120.0, 2900.0), 1.0758620689655172, 1e-12);
    ck_assert_double_eq(dt_ratio(1.0, 0.0), 0);
    ck_assert_double_eq(dt_ratio(1.0, -2.0), 0);
    ck_assert_double_eq_tol(dt_share(25.0, 200.0), 12.5, 1e-12);
    ck_assert_double_eq_tol(dt_share(1.0, 3.0), 33.333333333333336, 1e-9);
    ck_assert_double_eq(dt_share(1.0, 0.0), 0);
}
END_TEST

START_TEST(within_ten_percent)
{
    ck_assert_int_eq(dt_within(5.49, 5.0, 0.10), 1);
    ck_assert_int_eq(dt_within(5.51, 5.0, 0.10), 0);
    ck_assert_int_eq(dt_within(4.0, 5.0, 0.10), 1); /* faster than the base is within */
    ck_assert_int_eq(dt_within(1.0, 0.0, 0.10), 0); /* no base: not met */
}
END_TEST

START_TEST(distinct_experts)
{
    int32_t ids[] = {3, 1, 3, 7, 1, 280, 0, 7};
    ck_assert_int_eq(dt_distinct(ids, 8), 5);
    ck_assert_int_eq(dt_distinct(ids, 1), 1);
    ck_assert_int_eq(dt_distinct(ids, 0), 0);
    ck_assert_int_eq(ids[0], 3); /* the input is left as it was */
    ck_assert_int_eq(ids[5], 280);
}
END_TEST

START_TEST(random_union)
{
    ck_assert_double_eq_tol(dt_random_union(288, 8, 1), 8.0, 1e-9);
    /* 288 (1 - (35/36)^2) = 288 x 71 / 1296 */
    ck_assert_double_eq_tol(dt_random_union(288, 8, 2), 288.0 * 71.0 / 1296.0, 1e-9);
    ck_assert_double_eq_tol(dt_random_union(4, 2, 3), 4 * (1 - 0.125), 1e-12);
    ck_assert_double_eq(dt_random_union(288, 8, 0), 0);
}
END_TEST

START_TEST(order_descending_ties_by_index)
{
    double us[] = {2.0, 5.0, 5.0, 1.0, 7.5};
    int idx[5];
    dt_order_desc(us, 5, idx);
    ck_assert_int_eq(idx[0], 4);
    ck_assert_int_eq(idx[1], 1);
    ck_assert_int_eq(idx[2], 2);
    ck_assert_int_eq(idx[3], 0);
    ck_assert_int_eq(idx[4], 3);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("decode_tables");
    TCase *tc = tcase_create("arithmetic");
    tcase_add_test(tc, public_window_ratios_match_the_published_ones);
    tcase_add_test(tc, ratios_and_shares);
    tcase_add_test(tc, within_ten_percent);
    tcase_add_test(tc, distinct_experts);
    tcase_add_test(tc, random_union);
    tcase_add_test(tc, order_descending_ties_by_index);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
