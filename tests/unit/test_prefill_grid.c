/* test_prefill_grid.c: Check suite for the CUDA prefill's chunk grid and the rows its one-part
 * products round (engine/prefill_grid.c): hand-worked calls, an aligned call's rows the same at
 * every chunk size, the MTP catch-up's rows, and the calls that need the chunk refused. */
#include <check.h>

#include "prefill_grid.h"
#include "tests/common/check_main.h"

START_TEST(chunks_follow_the_grid_and_split_off_the_tail)
{
    ck_assert_int_eq(prefill_chunk_len(0, 300, 1024), 288);  /* the tail past 288 on its own */
    ck_assert_int_eq(prefill_chunk_len(288, 12, 1024), 12);
    ck_assert_int_eq(prefill_chunk_len(0, 5000, 1024), 1024); /* the chunk grid */
    ck_assert_int_eq(prefill_chunk_len(1000, 5000, 1024), 24);
    ck_assert_int_eq(prefill_chunk_len(0, 256, 128), 128);
    ck_assert_int_eq(prefill_chunk_len(5, 3, 128), 3);
}
END_TEST

START_TEST(gemm_rows_of_hand_worked_calls)
{
    int r0, r1;
    /* 300 from 0: chunks 288 and 12, both GEMM */
    ck_assert_int_eq(prefill_gemm_rows(0, 300, 1024, 0, &r0, &r1), 0);
    ck_assert(r0 == 0 && r1 == 300);
    /* 296 from 0: the tail of 8 is a GEMV */
    ck_assert_int_eq(prefill_gemm_rows(0, 296, 1024, 0, &r0, &r1), 0);
    ck_assert(r0 == 0 && r1 == 288);
    /* at most 8 rows: none */
    ck_assert_int_eq(prefill_gemm_rows(0, 8, 1024, 0, &r0, &r1), 0);
    ck_assert_int_eq(r1 - r0, 0);
    ck_assert_int_eq(prefill_gemm_rows(16, 9, 0, 0, &r0, &r1), 0);
    ck_assert(r0 == 0 && r1 == 9);
    /* from 120 at chunks of 128: 8 rows to the grid (GEMV), 80, the tail of 12 */
    ck_assert_int_eq(prefill_gemm_rows(120, 100, 128, 0, &r0, &r1), 0);
    ck_assert(r0 == 8 && r1 == 100);
    /* the same at chunks of 256: 88 to the tail, then 12 */
    ck_assert_int_eq(prefill_gemm_rows(120, 100, 256, 0, &r0, &r1), 0);
    ck_assert(r0 == 0 && r1 == 100);
    /* off the grid with no chunk known: refused, unless every chunk is a GEMV anyway */
    ck_assert_int_eq(prefill_gemm_rows(120, 100, 0, 0, &r0, &r1), -1);
    ck_assert_int_eq(prefill_gemm_rows(121, 8, 0, 0, &r0, &r1), 0);
    ck_assert_int_eq(r1 - r0, 0);
}
END_TEST

START_TEST(mtp_rows_follow_their_chunks)
{
    int r0, r1;
    /* 9 from 0: one chunk of 9, its MTP call 8 rows: a GEMV */
    ck_assert_int_eq(prefill_gemm_rows(0, 9, 1024, 1, &r0, &r1), 0);
    ck_assert_int_eq(r1 - r0, 0);
    /* 10 from 0: MTP rows 0..8 (9) */
    ck_assert_int_eq(prefill_gemm_rows(0, 10, 1024, 1, &r0, &r1), 0);
    ck_assert(r0 == 0 && r1 == 9);
    /* 300 from 0: chunks 288 (MTP rows 0..286) and 12 (MTP rows 287..298) */
    ck_assert_int_eq(prefill_gemm_rows(0, 300, 1024, 1, &r0, &r1), 0);
    ck_assert(r0 == 0 && r1 == 299);
    /* 24 from 32: chunks 16 (MTP rows 31..46) and 8 (a GEMV): the call's MTP rows 0..15 */
    ck_assert_int_eq(prefill_gemm_rows(32, 24, 1024, 1, &r0, &r1), 0);
    ck_assert(r0 == 0 && r1 == 16);
}
END_TEST

/* A call from a position on the 16-token grid rounds the same rows at every chunk size, so the
 * CPU backend need not know the CUDA backend's; every call's rows are one range. */
START_TEST(aligned_calls_do_not_depend_on_the_chunk)
{
    for (int mtp = 0; mtp < 2; mtp++)
        for (int p = 0; p <= 2048; p += 16)
            for (int n = 1; n <= 600; n += (n < 40 ? 1 : 7)) {
                int a0, a1;
                ck_assert_int_eq(prefill_gemm_rows(p, n, 0, mtp, &a0, &a1), 0);
                for (int chunk = 128; chunk <= 16384; chunk *= 2) {
                    int b0, b1;
                    ck_assert_int_eq(prefill_gemm_rows(p, n, chunk, mtp, &b0, &b1), 0);
                    ck_assert_msg(a0 == b0 && a1 == b1, "from %d, %d rows, chunk %d, mtp %d: [%d, "
                                  "%d) against [%d, %d)", p, n, chunk, mtp, b0, b1, a0, a1);
                }
            }
    /* unaligned starts: one range too (or the call says it is not) */
    for (int p = 1; p < 300; p += 3)
        for (int n = 1; n < 300; n += 5) {
            int r0, r1;
            ck_assert_int_eq(prefill_gemm_rows(p, n, 128, 0, &r0, &r1), 0);
            ck_assert(r0 >= 0 && r0 <= r1 && r1 <= n);
        }
}
END_TEST

START_TEST(half_copy_rule_is_the_kernels)
{
    ck_assert(eng_gemm_half_takes(4096, 16384));      /* MLA o_proj: 128 MiB exactly */
    ck_assert(!eng_gemm_half_takes(4097, 16384));
    ck_assert(!eng_gemm_half_takes(154880, 4096));    /* a real LM head */
    ck_assert(eng_gemm_half_takes(154880, 256));      /* the demo's */
    ck_assert(eng_gemm_half_takes(8192, 128));        /* narrow, counted twice: 4 MiB */
}
END_TEST

static Suite *grid_suite(void)
{
    Suite *s = suite_create("prefill_grid");
    TCase *tc = tcase_create("grid");
    tcase_add_test(tc, chunks_follow_the_grid_and_split_off_the_tail);
    tcase_add_test(tc, gemm_rows_of_hand_worked_calls);
    tcase_add_test(tc, mtp_rows_follow_their_chunks);
    tcase_add_test(tc, aligned_calls_do_not_depend_on_the_chunk);
    tcase_add_test(tc, half_copy_rule_is_the_kernels);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return test_run_suite(grid_suite());
}
