/* test_kernel_limits.c: Check suite for the kernels' host-side choices from shared-memory limits
 * (kernels/kernel_limits.h) at the real GLM-5.3-Flash shapes, with sm_90's and sm_121's limits. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>

#include "kernels/kernel_limits.h"
#include "model/config.h"
#include "tests/common/real_config.h"
#include "tests/common/check_main.h"

/* A block's dynamic shared memory with the opt-in (cudaDevAttrMaxSharedMemoryPerBlockOptin):
 * H100/H200 (sm_90) and the DGX Spark's GB10 (sm_121). */
#define SM90_OPTIN ((size_t)227 * 1024)
#define SM121_OPTIN ((size_t)99 * 1024)

static glm_config real;

static int load_real(void)
{
    return real_config_load(&real, "test_kernel_limits");
}

/* The absorbed query's scalar kernel (f32, f16 or fp8 kv_b) at the real dn and R: the whole R in
 * one block asks more than an sm_121 block may have, so the chooser splits the columns into
 * blocks that fit the default 48 KiB (no opt-in on any device). Two ranks halve the heads, not
 * a head's shapes, so the same choice holds for either rank. */
START_TEST(absorb_fits_a_spark_block_at_the_real_shapes)
{
    int dn = real.qk_nope_head_dim, R = real.kv_lora_rank;
    ck_assert_int_eq(dn, 256);
    ck_assert_int_eq(R, 512);
    ck_assert_msg(kern_absorb_smem(dn, R) > SM121_OPTIN, "the whole of R: %zu bytes",
                  kern_absorb_smem(dn, R));
    int cols = kern_absorb_cols(dn, R, KERN_SMEM_DEFAULT);
    ck_assert_int_eq(cols, 128);
    ck_assert_uint_le(kern_absorb_smem(dn, cols), KERN_SMEM_DEFAULT);
    ck_assert_uint_le(kern_absorb_smem(dn, cols), SM121_OPTIN);
    ck_assert_int_eq(R % cols, 0);
}
END_TEST

/* Over many dn, R and limits: R itself where it fits; otherwise a multiple of 64 below R that
 * fits, or 0 only where not even 64 columns fit. */
START_TEST(absorb_columns_fit_the_limit_or_refuse)
{
    const size_t limits[] = {KERN_SMEM_DEFAULT, SM121_OPTIN, SM90_OPTIN, 4096};
    for (size_t l = 0; l < sizeof limits / sizeof *limits; l++)
        for (int dn = 1; dn <= 2048; dn += 37)
            for (int R = 1; R <= 2048; R += 29) {
                int cols = kern_absorb_cols(dn, R, limits[l]);
                if (kern_absorb_smem(dn, R) <= limits[l]) {
                    ck_assert_int_eq(cols, R);
                    continue;
                }
                if (kern_absorb_smem(dn, 64) > limits[l]) {
                    ck_assert_int_eq(cols, 0);
                    continue;
                }
                ck_assert_msg(cols >= 64 && cols < R && cols % 64 == 0 &&
                                  kern_absorb_smem(dn, cols) <= limits[l],
                              "dn %d R %d limit %zu: cols %d", dn, R, limits[l], cols);
            }
    ck_assert_int_eq(kern_absorb_cols(0, 512, KERN_SMEM_DEFAULT), 0);
    ck_assert_int_eq(kern_absorb_cols(256, 0, KERN_SMEM_DEFAULT), 0);
}
END_TEST

int main(void)
{
    if (load_real())
        return EXIT_FAILURE;
    Suite *s = suite_create("kernel_limits");
    TCase *tc = tcase_create("limits");
    tcase_add_test(tc, absorb_fits_a_spark_block_at_the_real_shapes);
    tcase_add_test(tc, absorb_columns_fit_the_limit_or_refuse);
    suite_add_tcase(s, tc);
    return test_run_suite(s);
}
