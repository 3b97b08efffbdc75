/* test_prefill_projection.c: Check suite for the prefill chunk's op groups and their projection
 * onto two Sparks (engine/model/prefill_projection.c), against figures computed by hand below. */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model/config.h"
#include "model/prefill_projection.h"
#include "tests/common/tiny_config.h"

START_TEST(tiny_chunk_costs_by_hand)
{
    glm_config c;
    tiny_config(&c);
    glm_prefill_format f = {.dense_bytes = 2, .expert_bits = 4, .cache_bytes = 1};
    double fl[GLM_PF_GROUPS], tn[GLM_PF_GROUPS], by[GLM_PF_GROUPS];
    glm_prefill_costs(&c, 16, 0, &f, fl, tn, by);
    /* experts: 2 x 32 pairs x 3 x 128 x 256; the 4 experts' 3 x 128 x 256 half-bytes each times
     * 4 (1 - 0.75^32) selected, 32 pairs x (2 x 256 x 2 + 2 x 128 x 4 + 128 x 2 + 256 x 4) = 106496
     * and 2 x 16 x 256 x 4 = 32768 of rows in and out */
    ck_assert_double_eq_tol(fl[GLM_PF_EXPERTS], 6291456, 0.5);
    ck_assert_double_eq_tol(by[GLM_PF_EXPERTS], 49152 * 4 * (1 - pow(0.75, 32)) + 139264, 0.5);
    /* KDA: 16 x 6 x 2 x 128^2; 16 x 256 x 4 x 10 + 2 x 2 x 128^2 x 4 */
    ck_assert_double_eq_tol(fl[GLM_PF_KDA], 3145728, 0.5);
    ck_assert_double_eq_tol(by[GLM_PF_KDA], 163840 + 262144, 0.5);
    /* attention at position 0: mid 8, 9 selected (< 8 + 4 - 1); a row: absorb 2 x 2 x 64 x 64 =
     * 16384, scores and sums 4 x 2 x 9 x 64 = 4608, expand 16384, indexer 2 x 2 x 32 x 8/4 = 256:
     * 37632 x 16 rows; bytes: kv_b 2 x 128 x 64 x 2 = 32768, 16 cache rows of 64 + 4, 4 pools of
     * 32 + 4, rows 16 x 2 x (64 + 128 + 64) x 4 = 32768 */
    ck_assert_double_eq_tol(fl[GLM_PF_ATTENTION], 602112, 0.5);
    ck_assert_double_eq_tol(by[GLM_PF_ATTENTION], 32768 + 1088 + 144 + 32768, 0.5);
    /* dense: HC 4 x 2 x 16 x 512 x 8 = 524288; KDA q/k/v 6291456, gates a/b 2 x 2097152, beta
     * 16384, output 2097152; MLP 6291456; DSA q_a 1048576, q_b 524288, kv_a 524288, o 1048576,
     * indexer 262144 x 3 + 16384; router 32768; shared 3145728: 26542080 in all. Bytes: each
     * product's weights once (the router in bf16) plus 16 rows in and out in f32: 2411008 in all */
    ck_assert_double_eq_tol(fl[GLM_PF_DENSE], 26542080, 0.5);
    ck_assert_double_eq_tol(by[GLM_PF_DENSE], 2411008, 0.5);
    ck_assert(fl[GLM_PF_REST] == 0 && by[GLM_PF_REST] == 0 && tn[GLM_PF_REST] == 0);
    /* no parts given: the tensor work is the FLOPs */
    for (int g = 0; g < GLM_PF_GROUPS; g++)
        ck_assert_double_eq_tol(tn[g], fl[g], 0.5);
    /* later in the prompt: the attention selects its full window of 11 and reads the cache
     * rows up to the chunk's end */
    glm_prefill_costs(&c, 16, 1000, &f, fl, tn, by);
    ck_assert_double_eq_tol(fl[GLM_PF_ATTENTION], 16 * (16384 + 4 * 2 * 11 * 64 + 16384 +
                                                         2 * 2 * 32 * (1008.0 / 4)), 0.5);
    ck_assert_double_eq_tol(by[GLM_PF_ATTENTION], 32768 + 1016 * 68 + 254 * 36 + 32768, 0.5);
}
END_TEST

/* The tensor work the CUDA kernels issue (two fp16 parts a dense product, three bf16 parts for
 * the absorb, the expansion and the indexer, two for the attention) against the same FLOPs
 * counted by hand; the FLOPs and bytes do not move with the parts. */
START_TEST(tensor_work_counts_the_parts)
{
    glm_config c;
    tiny_config(&c);
    glm_prefill_format one = {.dense_bytes = 2, .expert_bits = 4, .cache_bytes = 1};
    glm_prefill_format cuda = one;
    cuda.dense_parts = 2, cuda.absorb_parts = 3, cuda.attend_parts = 2, cuda.index_parts = 3;
    double fl[GLM_PF_GROUPS], tn[GLM_PF_GROUPS], by[GLM_PF_GROUPS];
    double fl1[GLM_PF_GROUPS], tn1[GLM_PF_GROUPS], by1[GLM_PF_GROUPS];
    glm_prefill_costs(&c, 16, 0, &cuda, fl, tn, by);
    glm_prefill_costs(&c, 16, 0, &one, fl1, tn1, by1);
    for (int g = 0; g < GLM_PF_GROUPS; g++) {
        ck_assert_double_eq_tol(fl[g], fl1[g], 0.5);
        ck_assert_double_eq_tol(by[g], by1[g], 0.5);
    }
    /* dense: every product twice but the two HC mixing products (524288, FMA pipes, once) */
    ck_assert_double_eq_tol(tn[GLM_PF_DENSE], 2 * (26542080 - 524288) + 524288, 0.5);
    /* attention at 0 a row: absorb and expand 2 x 16384 x 3, scores and sums 4608 x 2, indexer
     * 256 x 3; the experts and the KDA delta rule once */
    ck_assert_double_eq_tol(tn[GLM_PF_ATTENTION], 16 * (32768 * 3 + 4608 * 2 + 256 * 3), 0.5);
    ck_assert_double_eq_tol(tn[GLM_PF_EXPERTS], 6291456, 0.5);
    ck_assert_double_eq_tol(tn[GLM_PF_KDA], 3145728, 0.5);
}
END_TEST

START_TEST(group_projection_by_hand)
{
    glm_prefill_target t = {62.5e12, 48, 273e9, 12e9, 11.0};
    glm_prefill_here h = {1e14, 1e12, 132};
    double floor_us, at_eff, by_sm;
    /* here: 1 GFLOP at 100 TFLOP/s = 10 us, 1 MB at 1 TB/s = 1 us, ran 100 us (a tenth of its
     * floor); there: 2 GFLOP at 62.5 TFLOP/s = 32 us over 5 MB / 273 GB/s = 18.3 us: 32 us, and
     * at the same tenth 320 us; by SM: the work twice here's (2 GFLOP at here's rate 20 us against
     * 10), so 100 x 2 x 132 / 48 = 550 us, over the floor */
    glm_project_prefill_group(100, 1e9, 1e6, &h, 2e9, 5e6, 1, &t, &floor_us, &at_eff, &by_sm);
    ck_assert_double_eq_tol(floor_us, 32, 1e-9);
    ck_assert_double_eq_tol(at_eff, 320, 1e-9);
    ck_assert_double_eq_tol(by_sm, 550, 1e-9);
    /* run at its floor here (10 us): by SM 10 x 2 x 2.75 = 55 us, at eff the floor 32 */
    glm_project_prefill_group(10, 1e9, 1e6, &h, 2e9, 5e6, 1, &t, &floor_us, &at_eff, &by_sm);
    ck_assert_double_eq_tol(at_eff, 32, 1e-9);
    ck_assert_double_eq_tol(by_sm, 55, 1e-9);
    /* memory-bound there: 1 GB / 273 GB/s = 3663 us; by SM: the work at here's rates is 1 GB at
     * 1 TB/s = 1000 us, 100 times here's 10 us floor: 100 x 100 x 2.75 = 27,500 us; and never
     * below the floor */
    glm_project_prefill_group(100, 1e9, 1e6, &h, 2e9, 1e9, 1, &t, &floor_us, &at_eff, &by_sm);
    ck_assert_double_eq_tol(floor_us, 1e9 / 273e9 * 1e6, 1e-6);
    ck_assert_double_eq_tol(by_sm, 27500, 1e-6);
    glm_project_prefill_group(0.001, 1e9, 1e6, &h, 2e9, 1e9, 1, &t, &floor_us, &at_eff, &by_sm);
    ck_assert_double_eq_tol(by_sm, floor_us, 1e-9);
    /* no FLOPs or bytes counted (the rest): 50 us at 3 TB/s here over 16 layers, the target's 45
     * whole on each rank: 50 x 45/16 x 3000 / 273 at eff, 50 x 45/16 x 132/48 by SM */
    glm_prefill_here h3 = {1e14, 3e12, 132};
    glm_project_prefill_group(50, 0, 0, &h3, 0, 0, 45.0 / 16, &t, &floor_us, &at_eff, &by_sm);
    ck_assert_double_eq_tol(floor_us, 0, 1e-12);
    ck_assert_double_eq_tol(at_eff, 50 * 45.0 / 16 * 3e12 / 273e9, 1e-6);
    ck_assert_double_eq_tol(by_sm, 50 * 45.0 / 16 * 132 / 48, 1e-9);
    /* exchanges: 45 layers x 2 x (4096 x 4096 x 4 bytes / 12 GB/s + 11 us), and a layer's
     * cancel flags: 45 x (4 bytes / 12 GB/s + 11 us) */
    ck_assert_double_eq_tol(glm_prefill_exchange_us(&t, 45, 4096, 4096),
                            90 * (67108864 / 12e9 * 1e6 + 11) + 45 * (4 / 12e9 * 1e6 + 11), 1e-6);
    /* as two halves of 4096 rows: a half's exchange 67108864 / 12e9 s + 11 us = 5,603.4 us; with
     * 3.6 s of compute a phase (of 180) takes 20,000 us, so only the last exchange waits; with 0.36
     * s (2,000 us a phase) each of the first 179 waits 3,603.4 us */
    double e = 67108864 / 12e9 * 1e6 + 11, flags = 45 * (4 / 12e9 * 1e6 + 11);
    ck_assert_double_eq_tol(glm_prefill_exchange_halves_us(&t, 45, 4096, 4096, 3.6e6), e + flags,
                            1e-6);
    ck_assert_double_eq_tol(glm_prefill_exchange_halves_us(&t, 45, 4096, 4096, 3.6e5),
                            179 * (e - 2000) + e + flags, 1e-6);
    /* no compute to hide behind: every exchange of the halves waits whole, twice the bytes' count
     * of the unsplit chunk's less nothing (4 x 45 exchanges of half the rows) */
    ck_assert_double_eq_tol(glm_prefill_exchange_halves_us(&t, 45, 4096, 4096, 0), 180 * e + flags,
                            1e-6);
    /* the Sparks' rates as the header states them */
    glm_prefill_target s = GLM_PREFILL_SPARKS;
    ck_assert(s.flops_per_s == 62.5e12 && s.sms == 48 && s.bytes_per_s == 273e9 &&
              s.link_bytes_per_s == 12e9);
}
END_TEST

START_TEST(labels_land_in_their_groups)
{
    ck_assert_int_eq(glm_prefill_group_of("the EXL3 experts (grouped by expert)"), GLM_PF_EXPERTS);
    ck_assert_int_eq(glm_prefill_group_of("the KDA q projection"), GLM_PF_DENSE);
    ck_assert_int_eq(glm_prefill_group_of("the HC mixing product"), GLM_PF_DENSE);
    ck_assert_int_eq(glm_prefill_group_of("the HC input norm and mixing product"), GLM_PF_DENSE);
    ck_assert_int_eq(glm_prefill_group_of("the HC collapse and layer norm"), GLM_PF_REST);
    ck_assert_int_eq(glm_prefill_group_of("the KDA delta rule"), GLM_PF_KDA);
    ck_assert_int_eq(glm_prefill_group_of("the KDA conv and q/k norms"), GLM_PF_KDA);
    ck_assert_int_eq(glm_prefill_group_of("the latent attention"), GLM_PF_ATTENTION);
    ck_assert_int_eq(glm_prefill_group_of("the indexer's top-k"), GLM_PF_ATTENTION);
    ck_assert_int_eq(glm_prefill_group_of("the HC update"), GLM_PF_REST);
    ck_assert_int_eq(glm_prefill_group_of("no such op"), GLM_PF_REST);
    for (int g = 0; g < GLM_PF_GROUPS; g++)
        ck_assert_ptr_nonnull(glm_prefill_group_names[g]);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("prefill_projection");
    TCase *t = tcase_create("costs");
    tcase_add_test(t, tiny_chunk_costs_by_hand);
    tcase_add_test(t, tensor_work_counts_the_parts);
    tcase_add_test(t, group_projection_by_hand);
    tcase_add_test(t, labels_land_in_their_groups);
    suite_add_tcase(s, t);
    SRunner *r = srunner_create(s);
    srunner_run_all(r, CK_NORMAL);
    int failed = srunner_ntests_failed(r);
    srunner_free(r);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
