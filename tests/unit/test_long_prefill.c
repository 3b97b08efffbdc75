/* test_long_prefill.c: Check suite for bench/long_prefill.c, the rules of bench_cuda_engine's
 * long-prefill mode: its arguments (bad ones refused with the value named), the time limit's stop
 * rule, and the progress, result and BENCHMARKS.md lines worked out by hand. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "bench/long_prefill.h"
#include "tests/common/check_main.h"

#define WINDOW 1048576

static int parse(const char *layers, const char *sizes, const char *limit, const char *every,
                 lp_args *a, char *msg)
{
    char *args[5] = {"--long", (char *)layers, (char *)sizes, (char *)limit, (char *)every};
    int n = every ? 5 : limit ? 4 : sizes ? 3 : layers ? 2 : 1;
    return lp_parse(n, args, WINDOW, 256, a, msg, 512);
}

START_TEST(the_lead_s_command_parses)
{
    lp_args a;
    char msg[512] = "";
    ck_assert_int_eq(parse("16", "65536,262144,1048576", "330", "16", &a, msg), 0);
    ck_assert_int_eq(a.layers, 16);
    ck_assert_int_eq(a.n_sizes, 3);
    ck_assert_int_eq(a.sizes[0], 65536);
    ck_assert_int_eq(a.sizes[2], 1048576);
    ck_assert_double_eq(a.limit_s, 330.0);
    ck_assert_int_eq(a.every, 16);
    /* the defaults: 300 s a size, a line every 16 chunks */
    ck_assert_int_eq(parse("4", "1024", NULL, NULL, &a, msg), 0);
    ck_assert_double_eq(a.limit_s, LP_DEFAULT_LIMIT_S);
    ck_assert_int_eq(a.every, LP_DEFAULT_EVERY);
    ck_assert_int_eq(parse("16", "262144", "12.5", NULL, &a, msg), 0);
    ck_assert_double_eq(a.limit_s, 12.5);
}
END_TEST

/* Each bad argument is refused with a message that names it and its value. */
static void refused(const char *layers, const char *sizes, const char *limit, const char *every,
                    const char *want1, const char *want2)
{
    lp_args a;
    char msg[512] = "";
    ck_assert_int_eq(parse(layers, sizes, limit, every, &a, msg), -1);
    ck_assert_msg(strstr(msg, want1) && strstr(msg, want2), "'%s' / '%s': %s", want1, want2, msg);
}

START_TEST(bad_sizes_are_refused_by_name)
{
    refused("16", "2097152", NULL, NULL, "2097152 tokens is past the model's window", "1048576");
    refused("16", "1048577", NULL, NULL, "1048577", "past the model's window");
    refused("16", "512", NULL, NULL, "512 tokens is below", "1024");
    refused("16", "65k", NULL, NULL, "'65k' is not a whole number", "SIZES");
    refused("16", "8192,,65536", NULL, NULL, "empty", "8192,,65536");
    refused("16", "8192,", NULL, NULL, "empty", "SIZES");
    refused("16", "", NULL, NULL, "SIZES is empty", "comma-separated");
    refused("16", "-8192", NULL, NULL, "-8192", "below");
    refused("16", "65536,65536", NULL, NULL, "65536 is given twice", "SIZES");
    refused("16", "99999999999999999999", NULL, NULL, "not a whole number", "9999");
    refused("16", "1024,2048,3072,4096,5120,6144,7168,8192,9216", NULL, NULL, "more than 8",
            "9216");
}
END_TEST

START_TEST(bad_layers_limits_and_counts_are_refused_by_name)
{
    refused("0", "8192", NULL, NULL, "LAYERS '0'", "1 to 256");
    refused("257", "8192", NULL, NULL, "LAYERS '257'", "1 to 256");
    refused("16x", "8192", NULL, NULL, "LAYERS '16x'", "whole number");
    refused("16", "8192", "0", NULL, "LIMIT_S '0'", "above 0");
    refused("16", "8192", "-5", NULL, "LIMIT_S '-5'", "above 0");
    refused("16", "8192", "nan", NULL, "LIMIT_S 'nan'", "seconds");
    refused("16", "8192", "10m", NULL, "LIMIT_S '10m'", "seconds");
    refused("16", "8192", "86401", NULL, "LIMIT_S '86401'", "86400");
    refused("16", "8192", "300", "0", "EVERY '0'", "1 to 65536");
    refused("16", "8192", "300", "4.5", "EVERY '4.5'", "whole number");
    refused("16", NULL, NULL, NULL, "too few arguments", "--long LAYERS SIZES");
    lp_args a;
    char msg[512];
    char *many[6] = {"--long", "16", "8192", "300", "16", "extra"};
    ck_assert_int_eq(lp_parse(6, many, WINDOW, 256, &a, msg, sizeof msg), -1);
    ck_assert_ptr_nonnull(strstr(msg, "too many arguments"));
}
END_TEST

START_TEST(the_limit_stops_after_the_chunk_that_passes_it)
{
    ck_assert_int_eq(lp_stop(299.9, 300, 4096, 1048576), 0);
    ck_assert_int_eq(lp_stop(300.0, 300, 4096, 1048576), 1);
    ck_assert_int_eq(lp_stop(301.0, 300, 524288, 1048576), 1);
    /* a size done is never partial, however long it took */
    ck_assert_int_eq(lp_stop(900.0, 300, 1048576, 1048576), 0);
}
END_TEST

START_TEST(thousands)
{
    char b[32];
    lp_thousands(1048576, 0, b, sizeof b);
    ck_assert_str_eq(b, "1,048,576");
    lp_thousands(8119.4, 0, b, sizeof b);
    ck_assert_str_eq(b, "8,119");
    lp_thousands(999, 0, b, sizeof b);
    ck_assert_str_eq(b, "999");
    lp_thousands(1234567.891, 2, b, sizeof b);
    ck_assert_str_eq(b, "1,234,567.89");
    lp_thousands(0, 0, b, sizeof b);
    ck_assert_str_eq(b, "0");
    lp_thousands(-4096, 0, b, sizeof b);
    ck_assert_str_eq(b, "-4,096");
}
END_TEST

/* 262,144 tokens in 40 s = 6,553.6 tok/s, against an 8k rate of 8,119: 0.807, the goal not met;
 * 80 of cuBLAS's 876 TFLOP/s: 0.091. */
START_TEST(the_result_line_has_value_ceilings_and_ratios)
{
    lp_result r = {.size = 262144, .done = 262144, .chunk = 4096, .seconds = 40.0, .tflops = 80.0};
    char line[1024];
    ck_assert_double_eq_tol(lp_rate(&r), 6553.6, 1e-9);
    lp_result_line(&r, 8119.0, 876.0, 300, line, sizeof line);
    const char *want[] = {"RESULT prefill 262,144 tokens, chunks of 4,096: 40.00 s = 6,554 tok/s, "
                          "80.0 TFLOP/s", "the 8k rate of this run 8,119 tok/s",
                          "cuBLAS bf16 GEMM 8192^3 876 TFLOP/s", "ratio 0.807 of the 8k rate "
                          "(goal >= 0.85: NOT met), 0.091 of cuBLAS"};
    for (int i = 0; i < 4; i++)
        ck_assert_msg(strstr(line, want[i]), "'%s' not in: %s", want[i], line);
    ck_assert_ptr_null(strstr(line, "PARTIAL"));
    /* 64k at 7,654 tok/s: 0.943, met */
    r = (lp_result){.size = 65536, .done = 65536, .chunk = 4096, .seconds = 65536 / 7654.0};
    lp_result_line(&r, 8119.0, 876.0, 300, line, sizeof line);
    ck_assert_msg(strstr(line, "ratio 0.943 of the 8k rate (goal >= 0.85: met)"), "%s", line);
    /* the goal speaks of 64k and 256k, not of 1M or the reference itself */
    r.size = r.done = 1048576;
    lp_result_line(&r, 8119.0, 876.0, 300, line, sizeof line);
    ck_assert_ptr_null(strstr(line, "goal"));
    r.size = r.done = 8192;
    lp_result_line(&r, 8119.0, 876.0, 300, line, sizeof line);
    ck_assert_ptr_null(strstr(line, "goal"));
    char row[1024];
    r = (lp_result){.size = 262144, .done = 262144, .chunk = 4096, .seconds = 40.0, .tflops = 80.0};
    lp_bench_row(&r, 8119.0, 876.0, row, sizeof row);
    ck_assert_str_eq(row, "| engine model, 262,144 tokens, chunks of 4,096 | 40.00 s = 6,554 "
                          "tok/s, 80.0 TFLOP/s | the 8k rate of this run: 8,119 tok/s; cuBLAS bf16 "
                          "8192^3: 876 TFLOP/s | **0.807** (0.091 of cuBLAS) |");
}
END_TEST

/* Stopped at 524,288 of 1,048,576 after 301 s: the rate of the tokens done, marked partial
 * wherever it is printed, with no goal verdict. */
START_TEST(a_partial_run_says_so_everywhere)
{
    lp_result r = {.size = 1048576, .done = 524288, .chunk = 4096, .partial = 1, .seconds = 301.0,
                   .tflops = 50.0};
    char line[1024], row[1024];
    lp_result_line(&r, 8119.0, 876.0, 300, line, sizeof line);
    ck_assert_msg(strstr(line, "PARTIAL, stopped by the 300 s limit at position 524,288 (50.0%): "
                               "301.00 s = 1,742 tok/s") &&
                  strstr(line, "0.215 of the 8k rate (partial: the rate of the tokens done"),
                  "%s", line);
    ck_assert_ptr_null(strstr(line, "goal"));
    lp_bench_row(&r, 8119.0, 876.0, row, sizeof row);
    ck_assert_msg(strstr(row, "1,048,576 tokens, chunks of 4,096 (PARTIAL: stopped at 524,288 "
                              "tokens)"), "%s", row);
}
END_TEST

/* At 65,536 of 1,048,576 after 8 s, the last 16 chunks (65,536 rows) in 8 s: 8,192 tok/s, and
 * 983,040 tokens to go at that pace: 120 s. */
START_TEST(the_progress_line)
{
    char line[512];
    lp_progress_line(1048576, 65536, 8.0, 65536, 8.0, 71.75, 71.19, line, sizeof line);
    ck_assert_msg(strstr(line, "progress 1,048,576: position 65,536 (6.2%) after 8.0 s: 8,192 "
                               "tok/s so far, the last 65,536 rows 8,192 tok/s; at that pace 120 s "
                               "to go") &&
                      strstr(line, "the backend holds 71.75 GiB of device memory (its plan: "
                                   "71.19)"),
                  "%s", line);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("long_prefill");
    TCase *tc = tcase_create("rules");
    tcase_add_test(tc, the_lead_s_command_parses);
    tcase_add_test(tc, bad_sizes_are_refused_by_name);
    tcase_add_test(tc, bad_layers_limits_and_counts_are_refused_by_name);
    tcase_add_test(tc, the_limit_stops_after_the_chunk_that_passes_it);
    tcase_add_test(tc, thousands);
    tcase_add_test(tc, the_result_line_has_value_ceilings_and_ratios);
    tcase_add_test(tc, a_partial_run_says_so_everywhere);
    tcase_add_test(tc, the_progress_line);
    suite_add_tcase(s, tc);
    return test_run_suite(s);
}
