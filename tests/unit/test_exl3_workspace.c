/* test_exl3_workspace.c: the grouped EXL3 experts' prefill workspace as the kernels carve it
 * (kern_exl3_moe_prefill_workspace) against the count the memory plan makes without a GPU
 * (kern_exl3_moe_prefill_bytes): host code only, so it runs wherever the kernels build. */
#include <check.h>
#include <string.h>

#include "kernels/kernels.h"
#include "tests/common/check_main.h"

/* Every shape of a grid (experts, hidden, intermediate, rows, slots), the real ones among them:
 * the two counts agree to the byte; a zero-row or zero-slot call asks for nothing. */
START_TEST(the_carving_and_the_count_agree)
{
    static const int E[] = {1, 3, 12, 288}, H[] = {128, 512, 4096}, I[] = {128, 256, 1024, 2048};
    static const int R[] = {1, 17, 300, 4096, 16384}, K[] = {1, 2, 8};
    int shapes = 0;
    for (size_t a = 0; a < sizeof E / sizeof *E; a++)
        for (size_t b = 0; b < sizeof H / sizeof *H; b++)
            for (size_t c = 0; c < sizeof I / sizeof *I; c++)
                for (size_t d = 0; d < sizeof R / sizeof *R; d++)
                    for (size_t e = 0; e < sizeof K / sizeof *K; e++) {
                        kern_exl3_experts ex;
                        memset(&ex, 0, sizeof ex);
                        ex.n_experts = E[a], ex.hidden = H[b], ex.inter = I[c];
                        size_t carved = kern_exl3_moe_prefill_workspace(&ex, R[d], K[e]);
                        size_t counted = kern_exl3_moe_prefill_bytes(E[a], H[b], I[c], R[d], K[e]);
                        ck_assert_msg(carved == counted, "E %d H %d I %d rows %d slots %d: %zu "
                                      "carved, %zu counted", E[a], H[b], I[c], R[d], K[e], carved,
                                      counted);
                        shapes++;
                    }
    ck_assert_int_eq(shapes, 720);
    kern_exl3_experts ex;
    memset(&ex, 0, sizeof ex);
    ex.n_experts = 288, ex.hidden = 4096, ex.inter = 2048;
    ck_assert_uint_eq(kern_exl3_moe_prefill_workspace(&ex, 0, 8), 0);
    ck_assert_uint_eq(kern_exl3_moe_prefill_workspace(&ex, 16, 0), 0);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("exl3_workspace");
    TCase *t = tcase_create("exl3_workspace");
    tcase_add_test(t, the_carving_and_the_count_agree);
    suite_add_tcase(s, t);
    return s;
}

int main(void)
{
    return test_run_suite(suite());
}
