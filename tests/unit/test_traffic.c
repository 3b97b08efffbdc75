/* test_traffic.c: Check suite for the per-op decode traffic (engine/model/traffic.c) and the Spark
 * projection (engine/model/projection.c), against figures computed by hand in the comments. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/config.h"
#include "model/projection.h"
#include "model/traffic.h"
#include "tests/common/check_main.h"
#include "tests/common/real_config.h"
#include "tests/common/tiny_config.h"

static glm_traffic_params params(int ranks, glm_traffic_dense f, int context)
{
    return (glm_traffic_params){.ranks = ranks, .context = context, .dense = f, .expert_bits = 4,
                                .latent_cache = GLM_CACHE_FP8, .index_cache = GLM_CACHE_FP8};
}

START_TEST(tiny_bf16_one_rank_by_hand)
{
    glm_config c;
    tiny_config(&c);
    glm_traffic_params p = params(1, GLM_TRAFFIC_BF16, 100);
    glm_traffic_table t;
    glm_error err = {0};
    ck_assert_int_eq(glm_traffic_step(&c, &p, &t, &err), GLM_OK);
    /* embedding: one row of 256 bf16 = 512 */
    ck_assert_double_eq(t.op[GLM_OP_EMBED].bytes, 512);
    /* HC mix: mix = (2 + 2) x 2 = 8 rows of 2 x 256 bf16 = 8192, the streams 2 x 256 x 4 = 2048;
     * 2 sites x 2 layers = 4 calls: 4 x 10240 = 40960 */
    ck_assert_int_eq(t.op[GLM_OP_HC_MIX].calls, 4);
    ck_assert_double_eq(t.op[GLM_OP_HC_MIX].bytes, 40960);
    /* collapse: streams 2048 + norm weight 1024, x 4 = 12288; update: 2 x 2048 + y 1024, x 4 = 20480 */
    ck_assert_double_eq(t.op[GLM_OP_HC_COLLAPSE].bytes, 12288);
    ck_assert_double_eq(t.op[GLM_OP_HC_UPDATE].bytes, 20480);
    /* KDA in: q, k, v 256 x 256, f_a, g_a 128 x 256, beta 2 x 256 = 262656 values x 2 = 525312 */
    ck_assert_double_eq(t.op[GLM_OP_KDA_PROJ].bytes, 525312);
    /* state: 2 heads x 128 x 128 x 4 bytes, read and written = 262144 */
    ck_assert_double_eq(t.op[GLM_OP_KDA_STATE].bytes, 262144);
    /* conv: weights 3 x 256 x 4 x 4 = 12288, window 3 rows x 768 x 4, read and written = 18432 */
    ck_assert_double_eq(t.op[GLM_OP_KDA_CONV].bytes, 30720);
    /* latent: min(100, 8 + 4 - 1) = 11 rows of 64 fp8 + 4-byte scale = 11 x 68 = 748 */
    ck_assert_double_eq(t.op[GLM_OP_LATENT].bytes, 748);
    /* indexer: floor(100 / 4) = 25 pooled keys of 32 fp8 + 4 = 25 x 36 = 900 */
    ck_assert_double_eq(t.op[GLM_OP_INDEXER_SCORE].bytes, 900);
    /* routed: 2 experts x 3 matrices of 256 x 128 at 4 bits (16384) + fp16 scales 2 x (256 + 128)
     * = 768: 2 x 3 x 17152 = 102912 */
    ck_assert_double_eq(t.op[GLM_OP_ROUTED].bytes, 102912);
    /* router: 4 x 256 bf16 = 2048, bias 16 */
    ck_assert_double_eq(t.op[GLM_OP_ROUTER].bytes, 2064);
    /* dense MLP: 3 x 256 x 256 bf16 = 393216; shared: 3 x 128 x 256 bf16 = 196608 */
    ck_assert_double_eq(t.op[GLM_OP_DENSE_MLP].bytes, 393216);
    ck_assert_double_eq(t.op[GLM_OP_SHARED].bytes, 196608);
    /* kv_b: key half 2 x 64 rows x 64 bf16 = 16384, value half the same */
    ck_assert_double_eq(t.op[GLM_OP_DSA_KV_B_K].bytes, 16384);
    ck_assert_double_eq(t.op[GLM_OP_DSA_KV_B_V].bytes, 16384);
    /* head: 512 x 256 bf16 = 262144; final norm: streams 2048 + weight 1024 */
    ck_assert_double_eq(t.op[GLM_OP_LM_HEAD].bytes, 262144);
    ck_assert_double_eq(t.op[GLM_OP_FINAL_NORM].bytes, 3072);
    /* a short context reads all its rows: 5 latent rows, 1 pool */
    p.context = 5;
    ck_assert_int_eq(glm_traffic_step(&c, &p, &t, &err), GLM_OK);
    ck_assert_double_eq(t.op[GLM_OP_LATENT].bytes, 5 * 68);
    ck_assert_double_eq(t.op[GLM_OP_INDEXER_SCORE].bytes, 36);
}
END_TEST

/* A verification window of 4 rows on the tiny config (context 100), against the one-row figures
 * of tiny_bf16_one_rank_by_hand: weights once, each row's streams and states again. */
START_TEST(tiny_window_of_four_rows_by_hand)
{
    glm_config c;
    tiny_config(&c);
    glm_traffic_params p = params(1, GLM_TRAFFIC_BF16, 100);
    glm_traffic_table one, zero, t;
    glm_error err = {0};
    ck_assert_int_eq(glm_traffic_step(&c, &p, &zero, &err), GLM_OK);
    p.rows = 1; /* one row is the step */
    ck_assert_int_eq(glm_traffic_step(&c, &p, &one, &err), GLM_OK);
    ck_assert_int_eq(memcmp(&one, &zero, sizeof one), 0);
    p.rows = 4;
    ck_assert_int_eq(glm_traffic_step(&c, &p, &t, &err), GLM_OK);
    /* embedding: 4 rows of 512 */
    ck_assert_double_eq(t.op[GLM_OP_EMBED].bytes, 2048);
    /* HC mix: fn 8192 once, the streams 2048 a row: 8192 + 8192 = 16384 a site, x 4 = 65536;
     * collapse: norm 1024 + 4 x 2048 = 9216, x 4 = 36864; update: 4 x (2 x 2048 + 1024) = 20480,
     * x 4 = 81920 */
    ck_assert_double_eq(t.op[GLM_OP_HC_MIX].bytes, 65536);
    ck_assert_double_eq(t.op[GLM_OP_HC_COLLAPSE].bytes, 36864);
    ck_assert_double_eq(t.op[GLM_OP_HC_UPDATE].bytes, 81920);
    /* the products' weights once, their flops a row */
    ck_assert_double_eq(t.op[GLM_OP_KDA_PROJ].bytes, 525312);
    ck_assert_double_eq(t.op[GLM_OP_KDA_PROJ].flops, 4 * one.op[GLM_OP_KDA_PROJ].flops);
    ck_assert_double_eq(t.op[GLM_OP_LM_HEAD].bytes, 262144);
    ck_assert_double_eq(t.op[GLM_OP_DENSE_MLP].bytes, 393216);
    /* state: read once, written after each row: 5 x 131072 = 655360; conv: weights 12288 and the
     * window of 3 x 768 floats 5 times (5 x 9216 = 46080) */
    ck_assert_double_eq(t.op[GLM_OP_KDA_STATE].bytes, 655360);
    ck_assert_double_eq(t.op[GLM_OP_KDA_CONV].bytes, 58368);
    /* latent: 4 rows' selections of 11 rows each, within the context and rows (103): 44 x 68;
     * pooled keys once */
    ck_assert_double_eq(t.op[GLM_OP_LATENT].bytes, 44 * 68);
    ck_assert_double_eq(t.op[GLM_OP_INDEXER_SCORE].bytes, 900);
    /* routed: 4 rows x top-2, at most the 4 experts: 4 x 3 x 17152 = 205824; final norm: weight
     * 1024 + 4 x 2048 */
    ck_assert_double_eq(t.op[GLM_OP_ROUTED].bytes, 205824);
    ck_assert_double_eq(t.op[GLM_OP_FINAL_NORM].bytes, 9216);
    /* the union measured: 3 experts */
    p.experts_read = 3;
    ck_assert_int_eq(glm_traffic_step(&c, &p, &t, &err), GLM_OK);
    ck_assert_double_eq(t.op[GLM_OP_ROUTED].bytes, 3 * 3 * 17152);
    /* a short context: the rows' selections are the context's rows and the window's own */
    p.context = 5;
    ck_assert_int_eq(glm_traffic_step(&c, &p, &t, &err), GLM_OK);
    ck_assert_double_eq(t.op[GLM_OP_LATENT].bytes, 8 * 68);
    /* what a rank holds does not depend on the rows */
    p = params(1, GLM_TRAFFIC_BF16, 100);
    p.resident = 1;
    ck_assert_int_eq(glm_traffic_step(&c, &p, &one, &err), GLM_OK);
    p.rows = 4;
    p.experts_read = 3;
    ck_assert_int_eq(glm_traffic_step(&c, &p, &t, &err), GLM_OK);
    ck_assert_double_eq(glm_traffic_bytes(&t), glm_traffic_bytes(&one));
}
END_TEST

START_TEST(tiny_q4_two_ranks_by_hand)
{
    glm_config c;
    tiny_config(&c);
    glm_traffic_params p = params(2, GLM_TRAFFIC_Q4_G32, 100);
    glm_traffic_table t;
    glm_error err = {0};
    ck_assert_int_eq(glm_traffic_step(&c, &p, &t, &err), GLM_OK);
    /* q4/32: n values -> n / 2 + 2 n / 32. q, k, v: 128 rows (half) x 256 = 32768 values -> 18432
     * each; f_a, g_a whole 128 x 256 -> 18432 each; beta 1 x 256 -> 128 + 16 = 144:
     * 3 x 18432 + 2 x 18432 + 144 = 92304 */
    ck_assert_double_eq(t.op[GLM_OP_KDA_PROJ].bytes, 92304);
    /* state: 1 head on a rank = 131072; the HC fn stays bf16 and whole: 4 x 10240 */
    ck_assert_double_eq(t.op[GLM_OP_KDA_STATE].bytes, 131072);
    ck_assert_double_eq(t.op[GLM_OP_HC_MIX].bytes, 40960);
    /* DSA o: 256 x (128 / 2 = 64) columns, not a multiple of 128: stays bf16 = 32768 */
    ck_assert_double_eq(t.op[GLM_OP_DSA_O].bytes, 32768);
    /* routed: experts 64 wide on a rank: 256 x 64 / 2 = 8192 + 2 x (256 + 64) = 8832, x 3 x 2 = 52992 */
    ck_assert_double_eq(t.op[GLM_OP_ROUTED].bytes, 52992);
    /* head: 256 rows x 256 -> 32768 + 4096 = 36864; the embedding row stays bf16 = 512 */
    ck_assert_double_eq(t.op[GLM_OP_LM_HEAD].bytes, 36864);
    ck_assert_double_eq(t.op[GLM_OP_EMBED].bytes, 512);
    /* the latent and the indexer are whole on both ranks */
    ck_assert_double_eq(t.op[GLM_OP_LATENT].bytes, 748);
    /* q4/64: KDA o 256 x 128 per rank = 32768 values -> 16384 + 1024 = 17408 */
    p.dense = GLM_TRAFFIC_Q4_G64;
    ck_assert_int_eq(glm_traffic_step(&c, &p, &t, &err), GLM_OK);
    ck_assert_double_eq(t.op[GLM_OP_KDA_O].bytes, 17408);
}
END_TEST

/* A bound model of the tiny shapes: bf16 dense weights and router, 4-bit EXL3 experts. */
static glm_weight plain(int64_t rows, int64_t cols, st_dtype d)
{
    return (glm_weight){.kind = GLM_W_PLAIN, .dtype = d, .rows = rows, .cols = cols};
}

static exl3_tensor g_ex[2];
static uint16_t g_scales[1];

static glm_weight expert(int in, int out, int which)
{
    exl3_tensor *t = &g_ex[which];
    t->in = in, t->out = out, t->bits = 4, t->suh = g_scales, t->svh = g_scales;
    return (glm_weight){.kind = GLM_W_EXL3, .rows = out, .cols = in, .exl3 = t};
}

START_TEST(a_bound_model_counts_as_its_config)
{
    glm_model m;
    memset(&m, 0, sizeof m);
    glm_config *c = &m.cfg;
    tiny_config(c);
    int D = 256, S = 2, mix = (2 + S) * S, I = 128;
    glm_layer_weights L[2];
    memset(L, 0, sizeof L);
    glm_mlp_weights ex[4];
    m.w.embed = plain(512, D, ST_BF16);
    m.w.lm_head = plain(512, D, ST_BF16);
    m.w.n_layers = 2;
    m.w.layers = L;
    for (int li = 0; li < 2; li++) {
        L[li].hc_attn_fn = L[li].hc_ffn_fn = plain(mix, S * D, ST_BF16);
    }
    glm_kda_weights *k = &L[0].kda;
    k->q_proj = k->k_proj = k->v_proj = plain(256, D, ST_BF16);
    k->f_a = k->g_a = plain(128, D, ST_BF16);
    k->f_b = k->g_b = plain(256, 128, ST_BF16);
    k->b_proj = plain(2, D, ST_BF16);
    k->o_proj = plain(D, 256, ST_BF16);
    L[0].mlp.gate = L[0].mlp.up = plain(256, D, ST_BF16);
    L[0].mlp.down = plain(D, 256, ST_BF16);
    glm_dsa_weights *a = &L[1].dsa;
    a->q_a = plain(128, D, ST_BF16);
    a->q_b = plain(128, 128, ST_BF16);
    a->kv_a = plain(64, D, ST_BF16);
    a->kv_b = plain(256, 64, ST_BF16);
    a->o_proj = plain(D, 128, ST_BF16);
    a->has_indexer = 1;
    a->idx_wq_b = plain(64, 128, ST_BF16);
    a->idx_wk = a->idx_gate = plain(32, D, ST_BF16);
    a->idx_weights = plain(2, D, ST_BF16);
    L[1].has_shared = 1;
    L[1].mlp.gate = L[1].mlp.up = plain(I, D, ST_BF16);
    L[1].mlp.down = plain(D, I, ST_BF16);
    L[1].router = plain(4, D, ST_BF16);
    for (int e = 0; e < 4; e++) {
        ex[e].gate = ex[e].up = expert(D, I, 0);
        ex[e].down = expert(I, D, 1);
    }
    L[1].experts = ex;
    glm_traffic_table bound, fromcfg;
    glm_model_traffic(&m, 100, GLM_CACHE_FP8, &bound);
    glm_traffic_params p = params(1, GLM_TRAFFIC_BF16, 100);
    glm_error err = {0};
    ck_assert_int_eq(glm_traffic_step(c, &p, &fromcfg, &err), GLM_OK);
    for (int op = 0; op < GLM_OP_COUNT; op++) {
        ck_assert_msg(bound.op[op].bytes == fromcfg.op[op].bytes, "%s: bound %.1f, config %.1f",
                      glm_traffic_op_name(op), bound.op[op].bytes, fromcfg.op[op].bytes);
        ck_assert_int_eq(bound.op[op].calls, fromcfg.op[op].calls);
        ck_assert_double_eq_tol(bound.op[op].flops, fromcfg.op[op].flops, 1e-6);
    }
}
END_TEST

START_TEST(real_model_calls_and_two_ranks)
{
    glm_config c;
    glm_error err = {0};
    ck_assert_int_eq(real_config_load(&c, "test_traffic"), 0);
    glm_traffic_params p = params(1, GLM_TRAFFIC_BF16, 1024);
    glm_traffic_table one, two;
    ck_assert_int_eq(glm_traffic_step(&c, &p, &one, &err), GLM_OK);
    p.ranks = 2;
    ck_assert_int_eq(glm_traffic_step(&c, &p, &two, &err), GLM_OK);
    /* 45 layers: 34 KDA, 11 DSA, 3 dense MLPs, 42 MoE; 2 HC sites a layer */
    ck_assert_int_eq(one.op[GLM_OP_KDA_STATE].calls, 34);
    ck_assert_int_eq(one.op[GLM_OP_LATENT].calls, 11);
    ck_assert_int_eq(one.op[GLM_OP_INDEXER_SCORE].calls, 11);
    ck_assert_int_eq(one.op[GLM_OP_DENSE_MLP].calls, 3);
    ck_assert_int_eq(one.op[GLM_OP_ROUTED].calls, 42);
    ck_assert_int_eq(one.op[GLM_OP_HC_MIX].calls, 90);
    /* routed experts at 4 bits: 42 layers x 8 x 3 x (2048 x 4096 / 2 + 2 x 6144) */
    ck_assert_double_eq(one.op[GLM_OP_ROUTED].bytes, 42.0 * 8 * 3 * (2048.0 * 4096 / 2 + 12288));
    /* split ops halve exactly, replicated ones stay */
    ck_assert_double_eq(two.op[GLM_OP_KDA_STATE].bytes * 2, one.op[GLM_OP_KDA_STATE].bytes);
    ck_assert_double_eq(two.op[GLM_OP_LM_HEAD].bytes * 2, one.op[GLM_OP_LM_HEAD].bytes);
    ck_assert_double_eq(two.op[GLM_OP_ROUTER].bytes, one.op[GLM_OP_ROUTER].bytes);
    ck_assert_double_eq(two.op[GLM_OP_LATENT].bytes, one.op[GLM_OP_LATENT].bytes);
    ck_assert_double_eq(two.op[GLM_OP_DSA_Q_A].bytes, one.op[GLM_OP_DSA_Q_A].bytes);
    double b1 = glm_traffic_bytes(&one), b2 = glm_traffic_bytes(&two);
    ck_assert_msg(b2 > 0.5 * b1 && b2 < 0.56 * b1, "two ranks %.3f GB of %.3f", b2 / 1e9, b1 / 1e9);
}
END_TEST

START_TEST(bad_parameters_are_named)
{
    glm_config c;
    tiny_config(&c);
    glm_traffic_table t;
    glm_error err = {0};
    glm_traffic_params p = params(3, GLM_TRAFFIC_BF16, 10);
    ck_assert_int_eq(glm_traffic_step(&c, &p, &t, &err), GLM_ERR_ARG);
    ck_assert_msg(strstr(err.message, "ranks 3"), "%s", err.message);
    p = params(1, GLM_TRAFFIC_BF16, -1);
    ck_assert_int_eq(glm_traffic_step(&c, &p, &t, &err), GLM_ERR_ARG);
    ck_assert_msg(strstr(err.message, "context -1"), "%s", err.message);
    p = params(1, GLM_TRAFFIC_BF16, 10);
    p.expert_bits = 0;
    ck_assert_int_eq(glm_traffic_step(&c, &p, &t, &err), GLM_ERR_ARG);
    ck_assert_msg(strstr(err.message, "expert bits 0"), "%s", err.message);
    p = params(1, GLM_TRAFFIC_BF16, 10);
    p.rows = -1;
    ck_assert_int_eq(glm_traffic_step(&c, &p, &t, &err), GLM_ERR_ARG);
    ck_assert_msg(strstr(err.message, "-1 rows"), "%s", err.message);
    p.rows = 8;
    p.experts_read = 5; /* of 4 */
    ck_assert_int_eq(glm_traffic_step(&c, &p, &t, &err), GLM_ERR_ARG);
    ck_assert_msg(strstr(err.message, "reading 5 experts") && strstr(err.message, "0 to 4"), "%s",
                  err.message);
    c.num_heads = 3;
    p = params(2, GLM_TRAFFIC_BF16, 10);
    ck_assert_int_eq(glm_traffic_step(&c, &p, &t, &err), GLM_ERR_ARG);
    ck_assert_msg(strstr(err.message, "attention heads 3"), "%s", err.message);
}
END_TEST

/* The projection on a tiny op table. Target: 1 GB/s (1 byte = 0.001 us), 2 SMs, 3 exchanges of
 * 10 us; measured at 4 GB/s on 6 SMs, so the non-memory time runs 6 / 2 = 3x (2x more).
 *   A: 2 calls; target 50,000 B -> 50 us; measured 20 us for 40,000 B (10 us of memory, 10 of
 *      excess): lower max(50, 20) = 50, upper max(50, 20 + 10 x 2 = 40) = 50; x 2 = 100, 100
 *   B: 1 call; target 5,000 B -> 5 us; measured 30 us for 20,000 B (5 us memory, 25 excess):
 *      lower max(5, 30) = 30, upper max(5, 30 + 25 x 2 = 80) = 80
 *   C: 3 calls; target 0 B; measured 4 us for 40,000 B (10 us memory > 4: no excess): 4, 4; x 3 = 12
 * step: lower 100 + 30 + 12 + 30 = 172 us (5813.95 tok/s); upper 100 + 80 + 12 + 30 = 222 us */
START_TEST(projection_of_a_tiny_table_by_hand)
{
    glm_target t = {.bytes_per_s = 1e9, .sms = 2, .exchanges = 3, .exchange_us = 10};
    glm_projection_op ops[3] = {
        {"A", 2, 50000, 40000, 20},
        {"B", 1, 5000, 20000, 30},
        {"C", 3, 0, 40000, 4},
    };
    double lo, hi;
    glm_project_op(&ops[1], 4e9, 6, &t, &lo, &hi);
    ck_assert_double_eq_tol(lo, 30, 1e-9);
    ck_assert_double_eq_tol(hi, 80, 1e-9);
    glm_project_step(ops, 3, 4e9, 6, &t, &lo, &hi);
    ck_assert_double_eq_tol(lo, 172, 1e-9);
    ck_assert_double_eq_tol(hi, 222, 1e-9);
    ck_assert_double_eq_tol(1e6 / lo, 5813.953488, 1e-5);
    /* the Sparks' constants */
    glm_target s = GLM_TARGET_SPARKS;
    ck_assert_double_eq(s.bytes_per_s, 273e9);
    ck_assert_int_eq(s.sms, 48);
    ck_assert_int_eq(s.exchanges * s.exchange_us, 990);
}
END_TEST

/* Every op's bytes land in exactly one group, so the groups' calls x bytes a call add up to the
 * step; the profile's times go to their groups per call, scaled, and unknown labels are named. */
START_TEST(profile_groups_cover_the_step)
{
    unsigned long seen = 0;
    for (int g = 0; g < glm_decode_group_count; g++) {
        ck_assert_msg((seen & glm_decode_groups[g].ops) == 0, "%s repeats an op",
                      glm_decode_groups[g].name);
        seen |= glm_decode_groups[g].ops;
    }
    ck_assert_uint_eq(seen, (1ul << GLM_OP_COUNT) - 1);
    glm_config c;
    tiny_config(&c);
    glm_traffic_params pm = params(1, GLM_TRAFFIC_BF16, 100), pt = params(2, GLM_TRAFFIC_Q4_G32, 100);
    glm_traffic_table measured, target;
    glm_error err = {0};
    ck_assert_int_eq(glm_traffic_step(&c, &pm, &measured, &err), GLM_OK);
    ck_assert_int_eq(glm_traffic_step(&c, &pt, &target, &err), GLM_OK);
    /* the HC takes 3 labels' time over 4 measured calls: (10 + 6 + 4) x 0.5 / 4 = 2.5 us a call */
    glm_label_time times[] = {{"the HC update with the next mixing product", 10},
                              {"the HC collapse and norm", 6},
                              {"the HC mixing product (split)", 4},
                              {"the EXL3 experts", 8},
                              {"a label nobody knows", 3},
                              {"the LM head", 7},
                              {"the logits' copy", 1}};
    glm_projection_op ops[64];
    const char *unknown[4];
    int n = glm_projection_from_profile(times, 7, 0.5, &measured, &target, ops, unknown, 4);
    ck_assert_int_eq(n, 1);
    ck_assert_str_eq(unknown[0], "a label nobody knows");
    double sum = 0;
    int hc = -1, routed = -1, head = -1;
    for (int g = 0; g < glm_decode_group_count; g++) {
        sum += ops[g].calls * ops[g].target_bytes;
        if (strcmp(ops[g].name, "HC mix, collapse + norm, update") == 0)
            hc = g;
        if (strcmp(ops[g].name, "routed experts (top-k)") == 0)
            routed = g;
        if (strcmp(ops[g].name, "LM head") == 0)
            head = g;
    }
    ck_assert_double_eq_tol(sum, glm_traffic_bytes(&target), 1e-6);
    ck_assert_int_ge(hc, 0);
    ck_assert_double_eq_tol(ops[hc].measured_us, 2.5, 1e-12);
    ck_assert_double_eq(ops[hc].calls, 4);
    /* bytes a call: measured (40960 + 12288 + 20480) / 4 = 18432 */
    ck_assert_double_eq(ops[hc].measured_bytes, 18432);
    ck_assert_double_eq_tol(ops[routed].measured_us, 4, 1e-12);
    ck_assert_double_eq(ops[routed].target_bytes, 52992);
    /* the logits' copy is the head's (its output to the host): (7 + 1) x 0.5 over its 1 call */
    ck_assert_int_ge(head, 0);
    ck_assert_double_eq_tol(ops[head].measured_us, 4, 1e-12);
    /* the unknown label's time stays, once, at no bytes */
    glm_projection_op *other = &ops[glm_decode_group_count];
    ck_assert_double_eq(other->calls, 1);
    ck_assert_double_eq_tol(other->measured_us, 1.5, 1e-12);
    ck_assert_double_eq(other->target_bytes, 0);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("traffic");
    TCase *t = tcase_create("traffic");
    tcase_add_test(t, tiny_bf16_one_rank_by_hand);
    tcase_add_test(t, tiny_window_of_four_rows_by_hand);
    tcase_add_test(t, tiny_q4_two_ranks_by_hand);
    tcase_add_test(t, a_bound_model_counts_as_its_config);
    tcase_add_test(t, real_model_calls_and_two_ranks);
    tcase_add_test(t, bad_parameters_are_named);
    tcase_add_test(t, projection_of_a_tiny_table_by_hand);
    tcase_add_test(t, profile_groups_cover_the_step);
    suite_add_tcase(s, t);
    return s;
}

int main(void)
{
    return test_run_suite(suite());
}
