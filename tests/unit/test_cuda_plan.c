/* test_cuda_plan.c: Check suite for the CUDA backend's memory plan (engine/cuda/plan.c), pure
 * arithmetic on the real GLM-5.3-Flash config (tests/fixtures/cuda): the per-token and per-session
 * cache figures of architecture.md 2.10, the weights of section 1.1, one rank and two, the fit
 * check's refusals and the scratch layout. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/plan.h"
#include "kernels/engine.h"
#include "model/config.h"
#include "tests/common/real_config.h"
#include "model/model.h"
#include "tp/split.h"
#include "tests/common/check_main.h"

#define MIB (1024.0 * 1024.0)
#define GB 1e9

static glm_config real;

static int load_real(void)
{
    return real_config_load(&real, "test_cuda_plan");
}

/* The CUDA side's N-rank arithmetic (cuda_plan_part_of, cuda_plan_rank_config_of,
 * cuda_plan_ranks_of) against split.c's tp_part_of on the real config: every rank's KDA and MLA
 * heads, dense and expert features and vocabulary part, the parts covering each whole in rank
 * order; and two ranks giving exactly cuda_plan_rank_config's halves (the two-rank path unmoved). */
START_TEST(n_rank_configs_follow_the_cpu_split_on_the_real_config)
{
    const int64_t whole[5] = {real.kda_heads, real.num_heads, real.intermediate_size,
                              real.moe_intermediate_size, real.vocab_size};
    for (int world = 2; world <= 4; world++) {
        int64_t next[5] = {0};
        for (int r = 0; r < world; r++) {
            glm_config rc;
            cuda_plan_rank_config_of(&real, r, world, &rc);
            const int64_t got[5] = {rc.kda_heads, rc.num_heads, rc.intermediate_size,
                                    rc.moe_intermediate_size,
                                    cuda_plan_part_of(real.vocab_size, r, world).count};
            for (int f = 0; f < 5; f++) {
                tp_part want = tp_part_of(whole[f], r, world);
                cuda_plan_part mine = cuda_plan_part_of(whole[f], r, world);
                ck_assert_int_eq(mine.start, want.start);
                ck_assert_int_eq(mine.count, want.count);
                ck_assert_int_eq(got[f], want.count);
                ck_assert_int_eq(mine.start, next[f]);
                next[f] += mine.count;
            }
            ck_assert_int_eq(rc.vocab_size, real.vocab_size);
            ck_assert_int_eq(rc.hidden_size, real.hidden_size);
            ck_assert_int_eq(cuda_plan_ranks_of(real.vocab_size, got[4]), world);
        }
        for (int f = 0; f < 5; f++)
            ck_assert_int_eq(next[f], whole[f]);
    }
    /* the real config among 3: 154880 = 51627 + 51627 + 51626, the remainder on rank 0 */
    ck_assert_int_eq(cuda_plan_part_of(real.vocab_size, 0, 3).count, 51627);
    ck_assert_int_eq(cuda_plan_part_of(real.vocab_size, 2, 3).start, 103254);
    ck_assert_int_eq(cuda_plan_ranks_of(real.vocab_size, real.vocab_size), 1);
    ck_assert_int_eq(cuda_plan_ranks_of(real.vocab_size, 12345), 0);
    glm_config half, of;
    cuda_plan_rank_config(&real, &half);
    for (int r = 0; r < 2; r++) {
        cuda_plan_rank_config_of(&real, r, 2, &of);
        ck_assert_mem_eq(&of, &half, sizeof half);
    }
}
END_TEST

/* A real model (tiny-A: 4 KDA heads, 4 MLA heads, 512 vocabulary entries) split by
 * tp_split_model_ranks among 2, 3 and 4: the config the CUDA side expects each rank to hold is
 * the one the split left, and the tensors it uploads have those rows and columns (KDA
 * projections and o_proj, MLA q_b and o_proj, every routed expert's gate rows and down columns,
 * the LM head's vocabulary part). */
START_TEST(n_rank_configs_match_a_real_split_model)
{
    const char *src = getenv("GLMCHAT_SRCDIR");
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/tests/fixtures/models/tiny-A", src ? src : ".");
    for (int world = 2; world <= 4; world++) {
        for (int r = 0; r < world; r++) {
            glm_error err = {0};
            glm_model *m = glm_model_open(dir, &err);
            ck_assert_msg(m != NULL, "%s", err.message);
            glm_config full = m->cfg, want;
            cuda_plan_rank_config_of(&full, r, world, &want);
            tp_split_owned owned = {0};
            ck_assert_msg(tp_split_model_ranks(m, r, world, &owned, &err) == GLM_OK, "%s", err.message);
            const glm_config *c = &m->cfg;
            ck_assert_int_eq(c->kda_heads, want.kda_heads);
            ck_assert_int_eq(c->num_heads, want.num_heads);
            ck_assert_int_eq(c->intermediate_size, want.intermediate_size);
            ck_assert_int_eq(c->moe_intermediate_size, want.moe_intermediate_size);
            ck_assert_int_eq(c->vocab_size, full.vocab_size);
            cuda_plan_part vocab = cuda_plan_part_of(full.vocab_size, r, world);
            ck_assert_int_eq(m->w.lm_head.rows, vocab.count);
            ck_assert_int_eq(cuda_plan_ranks_of(c->vocab_size, m->w.lm_head.rows), world);
            int64_t kda = (int64_t)want.kda_heads * c->kda_head_dim;
            int64_t mla_v = (int64_t)want.num_heads * c->v_head_dim;
            for (int li = 0; li < c->num_layers; li++) {
                const glm_layer_weights *L = &m->w.layers[li];
                if (c->attn[li] == GLM_ATTN_KDA) {
                    ck_assert_int_eq(L->kda.q_proj.rows, kda);
                    ck_assert_int_eq(L->kda.o_proj.cols, kda);
                } else {
                    ck_assert_int_eq(L->dsa.q_b.rows % want.num_heads, 0);
                    ck_assert_int_eq(L->dsa.o_proj.cols, mla_v);
                }
                for (int e = 0; L->experts && e < c->n_routed_experts; e++) {
                    ck_assert_int_eq(L->experts[e].gate.rows, want.moe_intermediate_size);
                    ck_assert_int_eq(L->experts[e].down.cols, want.moe_intermediate_size);
                }
            }
            tp_split_owned_free(&owned);
            glm_model_close(m);
        }
    }
}
END_TEST

START_TEST(real_config_has_the_documented_layers)
{
    ck_assert_int_eq(glm_config_count(&real, GLM_ATTN_KDA), 34);
    ck_assert_int_eq(glm_config_count(&real, GLM_ATTN_DSA), 11);
    ck_assert_int_eq(real.max_position_embeddings, 1048576);
}
END_TEST

START_TEST(cache_figures_match_the_architecture_notes)
{
    cuda_plan p;
    /* bf16: per DSA layer 512 latent values (1 KiB), 2 x 128 indexer values, 128 per 4 tokens */
    cuda_plan_make(&real, 1, 1048576, CUDA_KV_BF16, CUDA_KV_BF16, 256, 1, 0, &p);
    ck_assert_uint_eq(p.dsa_per_token, 11 * (1024 + 2 * 256 + 256 / 4));
    /* KDA: 136 MiB of fp32 states and 3 conv rows of 3 x 8192 f32 channels a layer, kept twice
     * (the live state and the mark) */
    double kda = 136 * MIB + 34.0 * 3 * 3 * 8192 * 4;
    ck_assert_double_eq_tol((double)p.kda_state, 2 * kda, 1.0);
    /* fp8: one byte a value plus a 4-byte scale a row */
    cuda_plan_make(&real, 1, 1048576, CUDA_KV_FP8, CUDA_KV_FP8, 256, 1, 0, &p);
    ck_assert_uint_eq(p.dsa_per_token, 11 * (512 + 4 + 2 * (128 + 4) + (128 + 4) / 4));
    ck_assert_uint_ge(p.dsa_cache, p.dsa_per_token * (size_t)1048576);
    /* two ranks keep the caches whole (replicated) and half the KDA state */
    glm_config half;
    cuda_plan_rank_config(&real, &half);
    cuda_plan p2;
    cuda_plan_make(&half, 2, 1048576, CUDA_KV_FP8, CUDA_KV_FP8, 256, 1, 0, &p2);
    ck_assert_uint_eq(p2.dsa_per_token, p.dsa_per_token);
    ck_assert_uint_eq(p2.kda_state * 2, p.kda_state);
}
END_TEST

/* The indexer's score scratch the session allocates (engine/cuda/state.c: the scores of
 * CUDA_SCORE_ROWS queries over cap / kpool + 1 pools and their work areas) lies within the plan's
 * bound, at every context and index cache format. */
START_TEST(score_scratch_bound_covers_the_allocation)
{
    static const int contexts[] = {1, 3, 4, 4097, 65536, 1048576};
    static const int formats[] = {CUDA_KV_F32, CUDA_KV_BF16, CUDA_KV_FP8};
    for (int i = 0; i < 6; i++)
        for (int f = 0; f < 3; f++) {
            cuda_plan p;
            cuda_plan_make(&real, 1, contexts[i], CUDA_KV_FP8, formats[f], 256, 1, 0, &p);
            size_t pools = (size_t)contexts[i] / (size_t)real.index_kpool + 1;
            size_t bytes = ENG_DSA_SCORE_FLOATS(CUDA_SCORE_ROWS, pools) * sizeof(float);
            size_t bound = p.score_per_token * (size_t)contexts[i] + p.dsa_fixed;
            ck_assert_msg(bound >= bytes, "context %d: score scratch %zu bytes, plan bound %zu",
                          contexts[i], bytes, bound);
        }
}
END_TEST

START_TEST(weights_match_the_parameter_counts)
{
    /* section 1.1: routed experts 304.6 B parameters (4-bit EXL3 here, plus fp16 scales); KDA
     * 4.7 B, DSA 1.4 B, shared 1.1 B, dense 0.45 B, embedding + head 1.3 B in BF16 */
    double experts = 304.6e9 * 0.5, rest = (4.7 + 1.4 + 1.1 + 0.45 + 1.3) * 1e9 * 2;
    double one = (double)cuda_plan_weights_estimate(&real, 1, GLM_TRAFFIC_BF16, 4);
    ck_assert_msg(one > 0.97 * (experts + rest) && one < 1.03 * (experts + rest),
                  "one rank: %.1f GB, expected about %.1f GB", one / GB, (experts + rest) / GB);
    double two = (double)cuda_plan_weights_estimate(&real, 2, GLM_TRAFFIC_BF16, 4);
    /* halves, plus what both ranks hold whole: the embedding, the indexer, q_a, kv_a, routers */
    ck_assert_msg(two > 0.5 * one && two < 0.53 * one, "two ranks: %.1f of %.1f GB", two / GB,
                  one / GB);
    /* 2-bit experts: half the 4-bit trellis */
    double two_bit = (double)cuda_plan_weights_estimate(&real, 1, GLM_TRAFFIC_BF16, 2);
    ck_assert_double_lt(two_bit, one - 0.99 * experts / 2);
    ck_assert_double_gt(two_bit, one - 1.01 * experts / 2);
    /* the q4 dense option: the linears at 4.5 bits, the embedding (0.6 B) and the small HC and
     * kv_b products still BF16, so it saves about (rest - embedding) * (1 - 4.5 / 16) */
    double q4 = (double)cuda_plan_weights_estimate(&real, 1, GLM_TRAFFIC_Q4_G32, 4);
    double most = (rest - 0.635e9 * 2) * (1 - 4.5 / 16);
    ck_assert_msg(one - q4 > 0.85 * most && one - q4 < 1.05 * most, "q4 saves %.2f GB, about %.2f",
                  (one - q4) / GB, most / GB);
}
END_TEST

START_TEST(two_sparks_fit_the_full_window_one_does_not)
{
    size_t spark = cuda_plan_unified_limit();
    ck_assert_uint_lt(spark, (size_t)128 * 1000 * 1000 * 1000);
    glm_config half;
    cuda_plan_rank_config(&real, &half);
    cuda_plan p;
    glm_error err = {0};
    for (int kv = CUDA_KV_BF16; kv <= CUDA_KV_FP8; kv++) {
        cuda_plan_make(&half, 2, 1048576, kv, kv, 256, 1, cuda_plan_weights_estimate(&real, 2, GLM_TRAFFIC_BF16, 4), &p);
        ck_assert_msg(cuda_plan_check(&p, spark, &err) == GLM_OK, "%s: %s", cuda_kv_name(kv),
                      err.message);
        ck_assert_uint_eq(p.total, p.weights + p.kda_state + p.dsa_cache + p.scratch);
    }
    cuda_plan_make(&real, 1, 1048576, CUDA_KV_FP8, CUDA_KV_FP8, 256, 1,
                   cuda_plan_weights_estimate(&real, 1, GLM_TRAFFIC_BF16, 4), &p);
    ck_assert_int_eq(cuda_plan_check(&p, spark, &err), GLM_ERR_NOMEM);
    ck_assert_msg(strstr(err.message, "two ranks") && strstr(err.message, "GiB"), "%s", err.message);
}
END_TEST

START_TEST(refusal_names_a_context_that_fits)
{
    glm_config half;
    cuda_plan_rank_config(&real, &half);
    cuda_plan p;
    cuda_plan_make(&half, 2, 1048576, CUDA_KV_BF16, CUDA_KV_BF16, 256, 1,
                   cuda_plan_weights_estimate(&real, 2, GLM_TRAFFIC_BF16, 4), &p);
    /* room for the weights and half the bf16 cache */
    size_t avail = p.weights + p.kda_state + p.scratch + ((size_t)1 << 30) + p.dsa_cache / 2;
    glm_error err = {0};
    ck_assert_int_eq(cuda_plan_check(&p, avail, &err), GLM_ERR_NOMEM);
    ck_assert_msg(strstr(err.message, "(--context ") && strstr(err.message, "--kv-cache fp8"), "%s",
                  err.message);
    int tokens = atoi(strstr(err.message, "(--context ") + strlen("(--context "));
    ck_assert_int_gt(tokens, 1048576 / 2 - 4096);
    ck_assert_int_lt(tokens, 1048576 / 2 + 4096);
    cuda_plan q;
    cuda_plan_make(&half, 2, tokens, CUDA_KV_BF16, CUDA_KV_BF16, 256, 1, p.weights, &q);
    ck_assert_int_eq(cuda_plan_check(&q, avail, &err), GLM_OK);
}
END_TEST

/* eng_gemm's share holds either form of the BF16 products: the larger of the three bf16 parts of
 * the widest input (16384: the HC streams, the MLA heads' values) with the narrow weights' copies
 * (cuda_gemm = three), and the two-part form's split buffer (two fp16 parts and its rows' shifts,
 * or three bf16 parts for a weight it leaves to them) with the fp16 copy of the largest weight it
 * takes (the MLA output's 4096 x 16384, exactly ENG_GEMM_HALF_BYTES; a small model's LM head). */
START_TEST(gemm_share_holds_either_products_form)
{
    const size_t widest = 16384, largest = (size_t)4096 * 16384;
    ck_assert_uint_eq(2 * largest, ENG_GEMM_HALF_BYTES);
    for (int chunk = 256; chunk <= 4096; chunk *= 4) {
        cuda_plan p;
        cuda_plan_make(&real, 1, 65536, CUDA_KV_FP8, CUDA_KV_FP8, chunk, 1, 0, &p);
        size_t three = ENG_GEMM_CONCAT_BYTES + 6 * (size_t)chunk * widest + 3 * 256;
        size_t parts2 = 4 * (size_t)chunk * widest + 4 * (size_t)chunk + 4 * 256;
        size_t parts3 = 6 * (size_t)chunk * widest + 3 * 256;
        size_t two = (parts2 > parts3 ? parts2 : parts3) + 2 * largest;
        ck_assert_uint_eq(p.gemm, ENG_GEMM_WORKSPACE + (three > two ? three : two));
        ck_assert_uint_ge(p.scratch, p.gemm);
    }
    /* a small model's LM head fits the fp16 copy's cap, so the two-part form takes it, and it is
     * by far its largest weight: mkmodel small's 154880 x 256 (79 MiB as fp16), widest dense 1024
     * (the HC streams); as one rank and as the first of two (77440 rows) */
    glm_config small = real;
    small.hidden_size = 256, small.intermediate_size = 512, small.moe_intermediate_size = 64;
    small.num_heads = 4, small.q_lora_rank = 128, small.kv_lora_rank = 64, small.qk_nope_head_dim = 64;
    small.v_head_dim = 64, small.index_n_heads = 8, small.index_head_dim = 32, small.kda_heads = 4;
    small.kda_head_dim = 64, small.n_routed_experts = 16, small.num_experts_per_tok = 4;
    ck_assert_int_eq(small.vocab_size, 154880);
    ck_assert_int_eq(small.hc_mult, 4);
    for (int ranks = 1; ranks <= 2; ranks++) {
        size_t head = 2 * (size_t)(154880 / ranks) * 256, chunk = 1024, cols = 4 * 256;
        ck_assert_uint_le(head, ENG_GEMM_HALF_BYTES);
        cuda_plan p;
        cuda_plan_make(&small, ranks, 65536, CUDA_KV_FP8, CUDA_KV_FP8, (int)chunk, 1, 0, &p);
        size_t parts3 = 6 * chunk * cols + 3 * 256, parts2 = 4 * chunk * cols + 4 * chunk + 4 * 256;
        size_t two = (parts2 > parts3 ? parts2 : parts3) + head;
        size_t three = ENG_GEMM_CONCAT_BYTES + parts3;
        ck_assert_uint_eq(p.gemm, ENG_GEMM_WORKSPACE + (three > two ? three : two));
    }
}
END_TEST

/* Drafting's memory: each KDA layer's state after every row of a 9-row window (4 MiB a layer
 * and row at GLM's shapes), the MTP layer's one-DSA-layer cache; in the total and the words. */
START_TEST(drafting_counts_windows_and_the_mtp_cache)
{
    cuda_plan p;
    cuda_plan_make(&real, 1, 65536, CUDA_KV_FP8, CUDA_KV_FP8, 1024, 1, 0, &p);
    size_t plain = p.total;
    ck_assert_uint_eq(p.windows + p.mtp_cache, 0);
    ck_assert_uint_eq(p.host_pinned, (size_t)2 * 154880 * 4); /* a row a rank, not a chunk */
    char line[1024];
    cuda_plan_describe(&p, line, sizeof line);
    ck_assert_ptr_nonnull(strstr(line, "no drafting"));
    cuda_plan_drafting(&p, &real, 9, 0);
    double windows = 34.0 * (9 * 4 * MIB + (3 + 9) * 3 * 8192 * 4);
    ck_assert_double_eq_tol((double)p.windows, windows, 1.0);
    ck_assert_uint_eq(p.total, plain + p.windows);
    cuda_plan_drafting(&p, &real, 9, 1); /* again, with the MTP layer: not counted twice */
    ck_assert_uint_eq(p.mtp_per_token, 512 + 4 + 2 * (128 + 4) + (128 + 4) / 4);
    ck_assert_uint_eq(p.mtp_cache, p.mtp_per_token * 65536 + (size_t)7 * 1024 * 4096 * 4);
    ck_assert_uint_eq(p.total, plain + p.windows + p.mtp_cache);
    cuda_plan_describe(&p, line, sizeof line);
    ck_assert_ptr_nonnull(strstr(line, "verification windows of 9 rows"));
    ck_assert_ptr_nonnull(strstr(line, "MTP layer's cache"));
    /* a refusal names them, and the context it names fits with them */
    glm_error err = {0};
    size_t avail = p.total + ((size_t)1 << 30) - p.dsa_cache / 2; /* the reserve, half the cache */
    ck_assert_int_eq(cuda_plan_check(&p, avail, &err), GLM_ERR_NOMEM);
    ck_assert_ptr_nonnull(strstr(err.message, "verification windows of 9 rows"));
    const char *at = strstr(err.message, "--context ");
    ck_assert_ptr_nonnull(at);
    int tokens = atoi(at + 10);
    cuda_plan q;
    cuda_plan_make(&real, 1, tokens, CUDA_KV_FP8, CUDA_KV_FP8, 1024, 1, 0, &q);
    cuda_plan_drafting(&q, &real, 9, 1);
    ck_assert_int_eq(cuda_plan_check(&q, avail, &err), GLM_OK);
    cuda_plan_make(&real, 1, tokens + 64, CUDA_KV_FP8, CUDA_KV_FP8, 1024, 1, 0, &q);
    cuda_plan_drafting(&q, &real, 9, 1);
    ck_assert_int_eq(cuda_plan_check(&q, avail, &err), GLM_ERR_NOMEM);
}
END_TEST

START_TEST(scratch_layout_is_aligned_and_covers_every_buffer)
{
    size_t off[CUDA_SCRATCH_BUFFERS];
    size_t total = cuda_plan_scratch(&real, 256, 1, off);
    ck_assert_uint_eq(off[0], 0);
    for (int i = 1; i < CUDA_SCRATCH_BUFFERS; i++) {
        ck_assert_uint_gt(off[i], off[i - 1]);
        ck_assert_uint_eq(off[i] % 256, 0);
    }
    ck_assert_uint_gt(total, off[CUDA_SCRATCH_BUFFERS - 1]);
    /* the chunk's logits: 256 x vocab floats; then the last, the indexer query's shifts: a
     * 4-byte shift a head (32) a row */
    ck_assert_uint_eq(off[CUDA_SCRATCH_IQ_SHIFT] - off[CUDA_SCRATCH_LOGITS], (size_t)256 * 154880 * 4);
    ck_assert_uint_eq(total - off[CUDA_SCRATCH_IQ_SHIFT], (size_t)256 * 32 * 4);
    ck_assert_uint_lt(cuda_plan_scratch(&real, 1, 1, NULL), total);
    /* past CUDA_HEAD_ROWS rows the logits stop growing (an all-rows head runs in pieces): the
     * chunk's logits at 16,384 rows are CUDA_HEAD_ROWS x vocab floats, not 10.1 GB */
    size_t big[CUDA_SCRATCH_BUFFERS];
    size_t big_total = cuda_plan_scratch(&real, 16384, 1, big);
    ck_assert_uint_eq(big[CUDA_SCRATCH_IQ_SHIFT] - big[CUDA_SCRATCH_LOGITS],
                      ((size_t)CUDA_HEAD_ROWS * 154880 * 4 + 255) & ~(size_t)255);
    ck_assert_uint_eq(big_total - big[CUDA_SCRATCH_IQ_SHIFT], (size_t)16384 * 32 * 4);
    ck_assert_uint_eq(big[CUDA_SCRATCH_LOGITS] - big[CUDA_SCRATCH_LOGITS - 1],
                      (size_t)16384 * 4096 * 4); /* hfin: every row */
    /* with every MoE layer on the fused EXL3 kernels the dense experts' pair buffers (a row's 8
     * pairs of intermediate and hidden floats) are left out, the layout otherwise the same */
    size_t fused[CUDA_SCRATCH_BUFFERS];
    size_t fused_total = cuda_plan_scratch(&real, 16384, 0, fused);
    ck_assert_uint_eq(big_total - fused_total, (size_t)16384 * 8 * (2048 + 4096) * 4 - 2 * 256);
    ck_assert_uint_eq(fused[0], big[0]);
    ck_assert_uint_eq(big_total - big[CUDA_SCRATCH_ATTEND_PART], fused_total - fused[CUDA_SCRATCH_ATTEND_PART]);
}
END_TEST

/* The decode latent attention (eng_mla_attend_decode) writes R + 2 floats a (row, head, slice)
 * for up to 8 rows: its MQA kernel cuts a row's selection (width 2,051) in slices of at most 64
 * rows (33 slices). The scratch holds them for one rank's 64 heads and for each of two ranks' 32,
 * whatever the chunk. */
START_TEST(scratch_holds_the_decode_attention_partial_sums)
{
    glm_config half;
    cuda_plan_rank_config(&real, &half);
    const glm_config *configs[2] = {&real, &half};
    for (int i = 0; i < 2; i++) {
        const glm_config *c = configs[i];
        size_t H = (size_t)c->num_heads, R = (size_t)c->kv_lora_rank;
        size_t width = (size_t)c->index_topk + (size_t)c->index_kpool - 1;
        size_t slices = (width + 63) / 64;
        size_t need = 8 * H * slices * (R + 2) * sizeof(float);
        ck_assert_uint_eq(width, 2051);
        ck_assert_uint_eq(slices, 33);
        for (int chunk = 1; chunk <= 256; chunk *= 16) {
            size_t off[CUDA_SCRATCH_BUFFERS];
            cuda_plan_scratch(c, chunk, 1, off);
            size_t room = off[CUDA_SCRATCH_ATTEND_PART + 1] - off[CUDA_SCRATCH_ATTEND_PART];
            ck_assert_msg(room >= need, "H %zu chunk %d: %zu bytes for %zu", H, chunk, room, need);
        }
    }
    ck_assert_int_eq(real.num_heads, 64);
    ck_assert_int_eq(half.num_heads, 32);
}
END_TEST

/* The chunk pick: a plan of the real config (one rank, fp8 caches, a 64k context) whose weights
 * are a fixed 60 GiB plus a workspace of 1 MiB a row, the way the EXL3 workspaces grow. */
typedef struct pick_ctx {
    size_t fixed, per_row;
    int calls;
} pick_ctx;

static size_t pick_need(void *ctx, int chunk)
{
    pick_ctx *k = ctx;
    cuda_plan p;
    k->calls++;
    cuda_plan_make(&real, 1, 65536, CUDA_KV_FP8, CUDA_KV_FP8, chunk, 1,
                   k->fixed + (size_t)chunk * k->per_row, &p);
    return p.total;
}

#define GIB_BYTES ((size_t)1 << 30)

START_TEST(chunk_pick_takes_the_most_the_room_allows)
{
    pick_ctx k = {(size_t)60 << 30, (size_t)1 << 20, 0};
    /* room for everything: the cap */
    ck_assert_int_eq(cuda_plan_pick_chunk(0, 1, (size_t)200 << 30, pick_need, &k), CUDA_CHUNK_CAP);
    ck_assert_int_eq(CUDA_CHUNK_CAP, 16384);
    /* exactly the 2048-row plan and its 1 GiB reserve: 2048; a byte less: 1024 */
    size_t at2048 = pick_need(&k, 2048) + GIB_BYTES;
    ck_assert_int_eq(cuda_plan_pick_chunk(0, 1, at2048, pick_need, &k), 2048);
    ck_assert_int_eq(cuda_plan_pick_chunk(0, 1, at2048 - 1, pick_need, &k), 1024);
    /* the 4096-row plan is larger than the 2048-row one by the rows' scratch and workspace */
    size_t step = pick_need(&k, 4096) - pick_need(&k, 2048);
    ck_assert_uint_ge(step, (size_t)2048 * k.per_row + cuda_plan_scratch(&real, 2048, 1, NULL));
    /* no room at all: the floor, which the check then refuses with the chunk named */
    ck_assert_int_eq(cuda_plan_pick_chunk(0, 1, (size_t)10 << 30, pick_need, &k), CUDA_CHUNK_FLOOR);
    cuda_plan p;
    cuda_plan_make(&real, 1, 65536, CUDA_KV_FP8, CUDA_KV_FP8, CUDA_CHUNK_FLOOR, 1,
                   k.fixed + (size_t)CUDA_CHUNK_FLOOR * k.per_row, &p);
    glm_error err = {0};
    ck_assert_int_eq(cuda_plan_check(&p, (size_t)10 << 30, &err), GLM_ERR_NOMEM);
    ck_assert_ptr_nonnull(strstr(err.message, "for prefill chunks of 256 rows"));
    /* a chunk given is taken as given, without asking the measure */
    k.calls = 0;
    ck_assert_int_eq(cuda_plan_pick_chunk(8192, 1, 1, pick_need, &k), 8192);
    ck_assert_int_eq(cuda_plan_pick_chunk(512, 0, 0, pick_need, &k), 512);
    /* no memory figure: the former fixed chunk */
    ck_assert_int_eq(cuda_plan_pick_chunk(0, 0, 0, pick_need, &k), CUDA_CHUNK_UNKNOWN);
    ck_assert_int_eq(k.calls, 0);
}
END_TEST

START_TEST(plan_line_names_the_chunk_and_who_chose_it)
{
    cuda_plan p;
    char line[1024];
    cuda_plan_make(&real, 1, 65536, CUDA_KV_FP8, CUDA_KV_FP8, 2048, 1, 0, &p);
    cuda_plan_describe(&p, line, sizeof line);
    ck_assert_msg(strstr(line, "prefill chunks of 2048 rows (the most the memory allows, at most "
                               "16384)") != NULL, "%s", line);
    p.chunk_given = 1;
    cuda_plan_describe(&p, line, sizeof line);
    ck_assert_msg(strstr(line, "prefill chunks of 2048 rows (cuda_chunk)") != NULL, "%s", line);
    /* a chunk given that does not fit: the refusal says smaller chunks would help */
    glm_error err = {0};
    ck_assert_int_eq(cuda_plan_check(&p, p.total / 2, &err), GLM_ERR_NOMEM);
    ck_assert_ptr_nonnull(strstr(err.message, "or smaller prefill chunks (cuda_chunk)"));
}
END_TEST


/* An all-rows head's pieces (forward.c, head_in_pieces): every row once, in order, each piece of
 * at least half the logits' scratch and at most all of it, so no piece drops to a product's GEMV
 * path (8 rows for eng_gemm, 16 for the EXL3 products) and its rows keep the whole chunk's bits. */
START_TEST(head_pieces_cover_the_rows)
{
    ck_assert_int_eq(cuda_plan_head_pieces(256), 1);
    ck_assert_int_eq(cuda_plan_head_pieces(257), 2);
    for (int T = CUDA_HEAD_ROWS + 1; T <= 70000; T += T < 1100 ? 1 : 997) {
        int pieces = cuda_plan_head_pieces(T), next = 0;
        for (int i = 0; i < pieces; i++) {
            int r0, n;
            cuda_plan_head_piece(T, i, &r0, &n);
            ck_assert_int_eq(r0, next);
            ck_assert_msg(n >= CUDA_HEAD_ROWS / 2 && n <= CUDA_HEAD_ROWS, "T %d piece %d: %d rows", T, i, n);
            next = r0 + n;
        }
        ck_assert_int_eq(next, T);
    }
}
END_TEST

/* The grouped EXL3 experts' workspace the plan counts without a GPU (kern_exl3_moe_prefill_bytes,
 * which kern_exl3_moe_prefill holds its carving to): per row, the 8 pairs' fp16 gate, up and down
 * inputs (2 x 4096 + 2048 halves) and f32 gate and up products (2 x 2048 floats), and three
 * 4-byte pair tables; the down product's results in the inputs' room. */
START_TEST(expert_workspace_by_hand)
{
    glm_config c = real;
    c.exl3 = 0;
    ck_assert_uint_eq(cuda_plan_workspace_estimate(&c, 4096), 0); /* BF16 experts: none */
    c.exl3 = 1;
    size_t per_row = 8 * (2 * 4096 * 2 + 2048 * 2 + 2 * 2048 * 4 + 3 * 4);
    size_t tables = (289 * 4 + 255) / 256 * 256 + (288 * 4 + 255) / 256 * 256;
    ck_assert_uint_eq(cuda_plan_workspace_estimate(&c, 16384), 16384 * per_row + tables);
    /* a rank's half of the intermediate */
    glm_config half;
    cuda_plan_rank_config(&c, &half);
    ck_assert_uint_eq(cuda_plan_workspace_estimate(&half, 16384),
                      16384 * (size_t)8 * (2 * 4096 * 2 + 1024 * 2 + 2 * 1024 * 4 + 3 * 4) + tables);
}
END_TEST

/* What a DGX Spark rank's plan picks for the real model (two ranks, EXL3 4-bit experts, BF16 or
 * q4 dense weights, fp8 caches; the weights as model/traffic.c counts a rank's, the experts'
 * workspace at each chunk; the unified-memory limit, 111.2 GiB, with the 1 GiB reserve): chunks
 * of 16,384 rows at the model's whole context (1,048,576 tokens) and at 202,752, in both formats.
 * At 1M tokens with BF16 dense weights: 104.27 GiB (weights 80.40, the experts' workspace 3.25,
 * scratch 11.68, caches 8.80); before the scratch held 256 rows of logits (not every row: 9.45
 * GiB more), the dense experts' buffers only where used (4.5 GiB more) and the experts' down
 * product in its inputs' room (2.0 GiB more), the plan would have needed about 120 GiB. */
/* A Spark rank's plan at a chunk (the arguments below). */
typedef struct spark_rank {
    const glm_config *half;
    int context;
    size_t weights;
} spark_rank;

static void spark_rank_plan(const spark_rank *r, int chunk, cuda_plan *p)
{
    cuda_plan_make(r->half, 2, r->context, CUDA_KV_FP8, CUDA_KV_FP8, chunk, 0,
                   r->weights + cuda_plan_workspace_estimate(r->half, chunk), p);
}

static size_t spark_rank_need(void *ctx, int chunk)
{
    cuda_plan p;
    spark_rank_plan(ctx, chunk, &p);
    return p.total;
}

START_TEST(a_spark_rank_picks_its_chunk)
{
    glm_config c = real, half;
    c.exl3 = 1;
    cuda_plan_rank_config(&c, &half);
    static const glm_traffic_dense fmt[2] = {GLM_TRAFFIC_BF16, GLM_TRAFFIC_Q4_G32};
    static const int contexts[2] = {1048576, 202752};
    for (int f = 0; f < 2; f++)
        for (int k = 0; k < 2; k++) {
            spark_rank r = {&half, contexts[k], cuda_plan_weights_estimate(&c, 2, fmt[f], 4)};
            int chunk = cuda_plan_pick_chunk(0, 1, cuda_plan_unified_limit(), spark_rank_need, &r);
            ck_assert_msg(chunk == 16384, "%s dense, context %d: chunks of %d",
                          glm_traffic_dense_name(fmt[f]), contexts[k], chunk);
            cuda_plan p;
            spark_rank_plan(&r, chunk, &p);
            glm_error err = {0};
            ck_assert_msg(cuda_plan_check(&p, cuda_plan_unified_limit(), &err) == GLM_OK, "%s",
                          err.message);
            if (f == 0 && k == 0) {
                double total = (double)p.total / (double)GIB_BYTES;
                ck_assert_msg(total > 103.8 && total < 104.8, "%.2f GiB", total);
            }
        }
}
END_TEST

/* The long-prefill bench's model (bench/bench_cuda_engine.c): the real config cut to 16 layers (12
 * KDA : 4 DSA as the real model interleaves them), layer 0 dense, the rest MoE with 4-bit EXL3
 * experts, BF16 dense weights. Its weights at a chunk: the resident bytes of model/traffic.c and
 * the grouped EXL3 experts' prefill workspace, which grows with the chunk
 * (cuda_plan_workspace_estimate, counted by hand in expert_workspace_by_hand). */
static glm_config bench16;

static void make_bench16(void)
{
    bench16 = real;
    bench16.num_layers = 16;
    bench16.exl3 = 1; /* the bench's experts */
    for (int i = 0; i < 16; i++)
        bench16.moe[i] = i >= 1;
}

static size_t bench16_weights(int chunk)
{
    return cuda_plan_weights_estimate(&bench16, 1, GLM_TRAFFIC_BF16, 4) +
           cuda_plan_workspace_estimate(&bench16, chunk);
}

typedef struct long_ctx {
    int context;
} long_ctx;

static size_t long_need(void *ctx, int chunk)
{
    const long_ctx *k = ctx;
    cuda_plan p;
    cuda_plan_make(&bench16, 1, k->context, CUDA_KV_FP8, CUDA_KV_FP8, chunk, 0, bench16_weights(chunk), &p);
    return p.total;
}

#define H100_FREE ((size_t)(78.7 * (double)GIB_BYTES)) /* an H100 80GB's free memory at open */

/* A 1,048,576-token prompt on the 16-layer bench model (fp8 caches, the bench's default) on an
 * H100: the plan takes chunks of 8,192 rows (4,096 while the scratch held a chunk's every row of
 * logits, 2.4 GiB more at 8,192), the context whole, and the figures the H100's plan line gave at
 * 71,680 tokens (weights 59.87 GiB at 4,096 rows, 59.31 since the experts' down product shares
 * its inputs' room). */
START_TEST(a_million_tokens_fit_the_h100_with_16_layers)
{
    make_bench16();
    ck_assert_int_eq(glm_config_count(&bench16, GLM_ATTN_KDA), 12);
    ck_assert_int_eq(glm_config_count(&bench16, GLM_ATTN_DSA), 4);
    double w = (double)bench16_weights(4096) / (double)GIB_BYTES;
    ck_assert_msg(w > 59.31 * 0.99 && w < 59.31 * 1.01, "weights at 4096 rows %.2f GiB", w);
    long_ctx k = {1048576};
    int chunk = cuda_plan_pick_chunk(0, 1, H100_FREE, long_need, &k);
    ck_assert_int_eq(chunk, 8192);
    cuda_plan p;
    cuda_plan_make(&bench16, 1, 1048576, CUDA_KV_FP8, CUDA_KV_FP8, chunk, 0, bench16_weights(chunk), &p);
    glm_error err = {0};
    ck_assert_msg(cuda_plan_check(&p, H100_FREE, &err) == GLM_OK, "%s", err.message);
    ck_assert_int_eq(p.context, 1048576);
    /* the caches: 4 DSA layers of an fp8 latent row (512 + a 4-byte scale), indexer key and gate
     * rows (128 + 4 each) and a pool key per 4 tokens, and 64 query rows of scores a pool */
    ck_assert_uint_eq(p.dsa_per_token, 4 * (516 + 2 * 132 + 132 / 4));
    ck_assert_uint_eq(p.score_per_token, 64);
    double cache = (double)p.dsa_cache / (double)GIB_BYTES;
    ck_assert_msg(cache > 3.2 && cache < 3.3, "caches %.3f GiB", cache);
    /* nothing else scales with the context: the plan at 8,192 tokens differs by the caches alone */
    cuda_plan small;
    cuda_plan_make(&bench16, 1, 8192, CUDA_KV_FP8, CUDA_KV_FP8, chunk, 0, bench16_weights(chunk), &small);
    ck_assert_uint_eq(p.total - small.total, p.dsa_cache - small.dsa_cache);
    ck_assert_uint_eq(p.scratch, small.scratch);
    ck_assert_uint_eq(p.host_pinned, small.host_pinned);
    /* 73.8 GiB with the reserve, 4.9 GiB to spare (the fused EXL3 experts: no dense experts'
     * pair buffers in the scratch) */
    double need = (double)(p.total + GIB_BYTES) / (double)GIB_BYTES;
    ck_assert_msg(need > 73.3 && need < 74.3, "the 1M plan needs %.2f GiB", need);
    char line[1024];
    cuda_plan_describe(&p, line, sizeof line);
    ck_assert_msg(strstr(line, "for 1048576 tokens") && strstr(line, "prefill chunks of 8192 rows"),
                  "%s", line);
}
END_TEST

/* With less room the pick takes smaller chunks and keeps the context; with too little for any
 * chunk the check refuses, naming the caches of the 1,048,576 tokens and a context that fits. */
START_TEST(a_million_tokens_with_less_room_shrink_the_chunk_never_the_context)
{
    make_bench16();
    long_ctx k = {1048576};
    size_t room = (size_t)65 << 30; /* the 2,048-row plan needs 65.6 GiB */
    int chunk = cuda_plan_pick_chunk(0, 1, room, long_need, &k);
    ck_assert_int_eq(chunk, 1024);
    cuda_plan p;
    cuda_plan_make(&bench16, 1, 1048576, CUDA_KV_FP8, CUDA_KV_FP8, chunk, 0, bench16_weights(chunk), &p);
    glm_error err = {0};
    ck_assert_msg(cuda_plan_check(&p, room, &err) == GLM_OK, "%s", err.message);
    ck_assert_int_eq(p.context, 1048576);
    room = (size_t)62 << 30;
    chunk = cuda_plan_pick_chunk(0, 1, room, long_need, &k);
    ck_assert_int_eq(chunk, CUDA_CHUNK_FLOOR);
    cuda_plan_make(&bench16, 1, 1048576, CUDA_KV_FP8, CUDA_KV_FP8, chunk, 0, bench16_weights(chunk), &p);
    ck_assert_int_eq(cuda_plan_check(&p, room, &err), GLM_ERR_NOMEM);
    ck_assert_int_eq(p.context, 1048576);
    ck_assert_msg(strstr(err.message, "the attention cache for a 1048576-token context") &&
                  strstr(err.message, "(--context "), "%s", err.message);
    int tokens = atoi(strstr(err.message, "(--context ") + strlen("(--context "));
    ck_assert_int_gt(tokens, 0);
    ck_assert_int_lt(tokens, 1048576);
    /* the whole model (45 layers) at 1M on one H100: the weights alone do not fit */
    cuda_plan_make(&real, 1, 1048576, CUDA_KV_FP8, CUDA_KV_FP8, 4096, 1,
                   cuda_plan_weights_estimate(&real, 1, GLM_TRAFFIC_BF16, 4), &p);
    ck_assert_int_eq(cuda_plan_check(&p, H100_FREE, &err), GLM_ERR_NOMEM);
    ck_assert_msg(strstr(err.message, "the weights alone do not fit"), "%s", err.message);
}
END_TEST

int main(void)
{
    if (load_real())
        return EXIT_FAILURE;
    Suite *s = suite_create("cuda_plan");
    TCase *tc = tcase_create("plan");
    tcase_add_test(tc, n_rank_configs_follow_the_cpu_split_on_the_real_config);
    tcase_add_test(tc, n_rank_configs_match_a_real_split_model);
    tcase_add_test(tc, real_config_has_the_documented_layers);
    tcase_add_test(tc, head_pieces_cover_the_rows);
    tcase_add_test(tc, expert_workspace_by_hand);
    tcase_add_test(tc, a_spark_rank_picks_its_chunk);
    tcase_add_test(tc, cache_figures_match_the_architecture_notes);
    tcase_add_test(tc, score_scratch_bound_covers_the_allocation);
    tcase_add_test(tc, weights_match_the_parameter_counts);
    tcase_add_test(tc, two_sparks_fit_the_full_window_one_does_not);
    tcase_add_test(tc, refusal_names_a_context_that_fits);
    tcase_add_test(tc, scratch_layout_is_aligned_and_covers_every_buffer);
    tcase_add_test(tc, scratch_holds_the_decode_attention_partial_sums);
    tcase_add_test(tc, gemm_share_holds_either_products_form);
    tcase_add_test(tc, drafting_counts_windows_and_the_mtp_cache);
    tcase_add_test(tc, chunk_pick_takes_the_most_the_room_allows);
    tcase_add_test(tc, plan_line_names_the_chunk_and_who_chose_it);
    tcase_add_test(tc, a_million_tokens_fit_the_h100_with_16_layers);
    tcase_add_test(tc, a_million_tokens_with_less_room_shrink_the_chunk_never_the_context);
    suite_add_tcase(s, tc);
    return test_run_suite(s);
}
