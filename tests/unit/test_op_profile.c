/* test_op_profile.c: Check suite for bench/op_profile.c, per-op sums from the marks recorded
 * between ops on the decode step's main and side streams, against figures worked out by hand. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/op_profile.h"

static int slot(const op_profile *p, const char *label)
{
    for (int k = 0; k < p->n; k++)
        if (strcmp(p->op[k].label, label) == 0)
            return k;
    return -1;
}

/* A decode layer's shape: the HC step forks the Sinkhorn mix onto the side stream, the MoE forks
 * the shared expert there, and the HC update after the MoE joins it (waiting from 33 to 35).
 *   main: start 0, fn 3, collapse 6, attention 20, router 24, experts 33, update 40, fn 43
 *   side: fork 3.5, sinkhorn 10; fork 20.5, shared gate/up 30, shared down 35
 * By hand: fn 3 + 3 = 6 (2 calls), collapse 3, attention 14, router 4, experts 9, update 7
 * (its interval holds the join's wait); main total 43 = 43 - 0. Side: sinkhorn 10 - 3.5 = 6.5,
 * gate/up 30 - 20.5 = 9.5, down 35 - 30 = 5; side total 21. */
START_TEST(a_layer_with_two_forks_by_hand)
{
    const op_mark m[] = {
        {NULL, 0, 0.0},          {"fn", 0, 3.0},          {NULL, 1, 3.5},
        {"collapse", 0, 6.0},    {"sinkhorn", 1, 10.0},   {"attention", 0, 20.0},
        {NULL, 1, 20.5},         {"router", 0, 24.0},     {"shared gate/up", 1, 30.0},
        {"shared down", 1, 35.0}, {"experts", 0, 33.0},   {"update", 0, 40.0},
        {"fn", 0, 43.0},
    };
    op_profile p;
    char why[256] = "";
    ck_assert_int_eq(op_profile_build(m, (int)(sizeof m / sizeof *m), &p, why, sizeof why), 0);
    ck_assert_int_eq(p.n, 9);
    ck_assert_str_eq(p.op[0].label, "fn"); /* first seen first */
    ck_assert_double_eq_tol(p.op[slot(&p, "fn")].us, 6.0, 1e-12);
    ck_assert_int_eq(p.calls[slot(&p, "fn")], 2);
    ck_assert_double_eq_tol(p.op[slot(&p, "collapse")].us, 3.0, 1e-12);
    ck_assert_double_eq_tol(p.op[slot(&p, "attention")].us, 14.0, 1e-12);
    ck_assert_double_eq_tol(p.op[slot(&p, "router")].us, 4.0, 1e-12);
    ck_assert_double_eq_tol(p.op[slot(&p, "experts")].us, 9.0, 1e-12);
    ck_assert_double_eq_tol(p.op[slot(&p, "update")].us, 7.0, 1e-12);
    ck_assert_double_eq_tol(p.total_us, 43.0, 1e-12);
    /* side-stream ops: their own time apart, none of it on the main stream */
    ck_assert_double_eq_tol(p.side_us[slot(&p, "sinkhorn")], 6.5, 1e-12);
    ck_assert_double_eq_tol(p.side_us[slot(&p, "shared gate/up")], 9.5, 1e-12);
    ck_assert_double_eq_tol(p.side_us[slot(&p, "shared down")], 5.0, 1e-12);
    ck_assert_double_eq(p.op[slot(&p, "sinkhorn")].us, 0.0);
    ck_assert_double_eq(p.side_us[slot(&p, "fn")], 0.0);
    ck_assert_int_eq(p.calls[slot(&p, "shared down")], 1);
    ck_assert_double_eq_tol(p.side_us_total, 21.0, 1e-12);
}
END_TEST

/* Labels match by text, not by pointer; a label on both streams gets both columns. Marks: main
 * start 1, "a" 4 (3), side start 4, "a" on the side 9 (5), main "b" 12 (8), main "a" 12.5 (0.5). */
START_TEST(labels_match_by_text_on_either_stream)
{
    char a1[] = "a", a2[] = "a", a3[] = "a";
    const op_mark m[] = {{NULL, 0, 1.0}, {a1, 0, 4.0}, {NULL, 1, 4.0},
                         {a2, 1, 9.0},   {"b", 0, 12.0}, {a3, 0, 12.5}};
    op_profile p;
    char why[256] = "";
    ck_assert_int_eq(op_profile_build(m, 6, &p, why, sizeof why), 0);
    ck_assert_int_eq(p.n, 2);
    ck_assert_double_eq_tol(p.op[0].us, 3.5, 1e-12);
    ck_assert_double_eq_tol(p.side_us[0], 5.0, 1e-12);
    ck_assert_int_eq(p.calls[0], 3);
    ck_assert_double_eq_tol(p.op[1].us, 8.0, 1e-12);
    ck_assert_double_eq_tol(p.total_us, 11.5, 1e-12); /* 12.5 - 1 */
}
END_TEST

/* A profile without its start mark: its first op has nothing to time from. */
START_TEST(a_labelled_first_mark_is_refused)
{
    const op_mark m[] = {{"fn", 0, 2.0}, {"collapse", 0, 5.0}};
    op_profile p;
    char why[256] = "";
    ck_assert_int_eq(op_profile_build(m, 2, &p, why, sizeof why), -1);
    ck_assert_ptr_nonnull(strstr(why, "mark 0 ('fn') on the main stream"));
}
END_TEST

/* A side op before any fork's starting point: the side stream's start is unknown. */
START_TEST(a_side_op_without_a_fork_mark_is_refused)
{
    const op_mark m[] = {{NULL, 0, 0.0}, {"fn", 0, 2.0}, {"sinkhorn", 1, 5.0}};
    op_profile p;
    char why[256] = "";
    ck_assert_int_eq(op_profile_build(m, 3, &p, why, sizeof why), -1);
    ck_assert_ptr_nonnull(strstr(why, "mark 2 ('sinkhorn') on the side stream"));
}
END_TEST

START_TEST(too_many_labels_are_refused)
{
    enum { N = OP_PROFILE_MAX + 2 };
    static char names[N][16];
    op_mark m[N];
    m[0] = (op_mark){NULL, 0, 0.0};
    for (int i = 1; i < N; i++) {
        snprintf(names[i], sizeof names[i], "op %d", i);
        m[i] = (op_mark){names[i], 0, (double)i};
    }
    op_profile p;
    char why[256] = "";
    ck_assert_int_eq(op_profile_build(m, N - 1, &p, why, sizeof why), 0); /* exactly the most */
    ck_assert_int_eq(p.n, OP_PROFILE_MAX);
    ck_assert_int_eq(op_profile_build(m, N, &p, why, sizeof why), -1);
    ck_assert_ptr_nonnull(strstr(why, "'op 129' is one too many"));
}
END_TEST

/* The main stream's ops with their kernels' own times: a profile of main "fn" 6 us (2 calls),
 * "copy" 2 us (no kernel), side "sinkhorn" 6.5 us; alone fn 2.5 (2 kernels), copy - (0 kernels),
 * sinkhorn 1.5 (1 kernel). By hand: fn 2.5, copy keeps its 2, sinkhorn 0 on the main stream (its
 * side time kept, 6.5); total 4.5. A main op whose kernels were not all timed is refused. */
START_TEST(alone_times_replace_the_main_streams_ops)
{
    const op_mark m[] = {{NULL, 0, 0.0}, {"fn", 0, 3.0},   {NULL, 1, 3.5}, {"sinkhorn", 1, 10.0},
                         {"fn", 0, 6.0}, {"copy", 0, 8.0}};
    op_profile p, a;
    char why[256] = "";
    ck_assert_int_eq(op_profile_build(m, (int)(sizeof m / sizeof *m), &p, why, sizeof why), 0);
    double alone[3];
    int kernels[3];
    alone[slot(&p, "fn")] = 2.5, kernels[slot(&p, "fn")] = 2;
    alone[slot(&p, "copy")] = 0, kernels[slot(&p, "copy")] = 0;
    alone[slot(&p, "sinkhorn")] = 1.5, kernels[slot(&p, "sinkhorn")] = 1;
    ck_assert_int_eq(op_profile_alone(&p, alone, kernels, &a, why, sizeof why), 0);
    ck_assert_int_eq(a.n, 3);
    ck_assert_double_eq_tol(a.op[slot(&a, "fn")].us, 2.5, 1e-12);
    ck_assert_int_eq(a.calls[slot(&a, "fn")], 2);
    ck_assert_double_eq_tol(a.op[slot(&a, "copy")].us, 2.0, 1e-12);
    ck_assert_double_eq(a.op[slot(&a, "sinkhorn")].us, 0.0);
    ck_assert_double_eq_tol(a.side_us[slot(&a, "sinkhorn")], 6.5, 1e-12);
    ck_assert_double_eq_tol(a.total_us, 4.5, 1e-12);
    alone[slot(&p, "fn")] = -1;
    ck_assert_int_eq(op_profile_alone(&p, alone, kernels, &a, why, sizeof why), -1);
    ck_assert_msg(strstr(why, "'fn'") != NULL, "%s", why);
    /* a side op's missing time does not matter: it is not on the main stream */
    alone[slot(&p, "fn")] = 2.5, alone[slot(&p, "sinkhorn")] = -1;
    ck_assert_int_eq(op_profile_alone(&p, alone, kernels, &a, why, sizeof why), 0);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("op_profile");
    TCase *t = tcase_create("core");
    tcase_add_test(t, a_layer_with_two_forks_by_hand);
    tcase_add_test(t, labels_match_by_text_on_either_stream);
    tcase_add_test(t, a_labelled_first_mark_is_refused);
    tcase_add_test(t, a_side_op_without_a_fork_mark_is_refused);
    tcase_add_test(t, too_many_labels_are_refused);
    tcase_add_test(t, alone_times_replace_the_main_streams_ops);
    suite_add_tcase(s, t);
    return s;
}

int main(void)
{
    SRunner *r = srunner_create(suite());
    srunner_run_all(r, CK_NORMAL);
    int failed = srunner_ntests_failed(r);
    srunner_free(r);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
