/* test_model.c: Check suite for model loading: config.json parsing and refusals, safetensors
 * reading and writing, number conversions (BF16, F16, FP8), and the loader's error messages for
 * a missing tensor, a wrong shape, a truncated shard and a config that contradicts the weights. */
#include <check.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model/config.h"
#include "model/model.h"
#include "model/safetensors.h"
#include "model/weights.h"
#include "session.h"
#include "test_engine_util.h"
#include "tests/common/check_main.h"

static glm_status parse(glm_config *c, const char *json, glm_error *err)
{
    return glm_config_parse(c, json, "config.json", err);
}

START_TEST(flat_config_gets_the_reference_defaults)
{
    glm_config c;
    glm_error err = {0};
    ck_assert_int_eq(parse(&c, "{\"model_type\": \"glm5_next_text\"}", &err), GLM_OK);
    ck_assert_int_eq(c.hidden_size, 4096);
    ck_assert_int_eq(c.num_layers, 45);
    ck_assert_int_eq(c.vocab_size, 154880);
    ck_assert_int_eq(c.index_kpool, 16); /* the reference's default, not the model's 4 */
    ck_assert_int_eq(c.index_topk, 2048);
    ck_assert_int_eq(c.kda_heads, 64);
    ck_assert_int_eq(c.kda_has_lower_bound, 1);
    ck_assert_float_eq(c.kda_lower_bound, -5.0f);
    ck_assert_int_eq(c.hc_sinkhorn_iters, 20);
    for (int i = 0; i < 45; i++) {
        ck_assert_int_eq(c.attn[i], i % 4 == 3 ? GLM_ATTN_DSA : GLM_ATTN_KDA);
        ck_assert_int_eq(c.moe[i], i >= 3);
        ck_assert_int_eq(c.indexer_shared[i], 0);
    }
    ck_assert_int_eq(glm_config_count(&c, GLM_ATTN_DSA), 11);
    ck_assert_int_eq(glm_config_rank_of(&c, 7), 1);
    ck_assert_int_eq(c.pad_token_id, 154820);
}
END_TEST

START_TEST(nested_config_and_its_spellings)
{
    glm_config c;
    glm_error err = {0};
    const char *j =
        "{\"model_type\": \"glm5_next\", \"quantization_config\": {\"quant_method\": \"fp8\", "
        "\"weight_block_size\": [64, 32]}, \"text_config\": {\"model_type\": \"glm5_next_text\", "
        "\"num_hidden_layers\": 4, \"index_topk_pattern\": \"FFFF\", \"layer_types\": "
        "[\"linear_attention\", \"full_attention\", \"deepseek_sparse_attention\", "
        "\"linear_attention\"], \"indexer_types\": [\"full\", \"full\", \"shared\", \"full\"], "
        "\"linear_attn_config\": {\"num_heads\": 8, \"head_dim\": 16, \"short_conv_kernel_size\": 3, "
        "\"gate_lower_bound\": -4.0}, \"eos_token_id\": [1, 2, 3], \"mlp_layer_types\": [\"dense\", "
        "\"sparse\", \"sparse\", \"dense\"]}}";
    ck_assert_msg(parse(&c, j, &err) == GLM_OK, "%s", err.message);
    ck_assert_int_eq(c.attn[1], GLM_ATTN_DSA);
    ck_assert_int_eq(c.indexer_shared[2], 1);
    ck_assert_int_eq(c.kda_heads, 8);
    ck_assert_int_eq(c.kda_head_dim, 16);
    ck_assert_int_eq(c.kda_conv_kernel, 3);
    ck_assert_float_eq(c.kda_lower_bound, -4.0f);
    ck_assert_int_eq(c.n_eos, 3);
    ck_assert_int_eq(c.eos[2], 3);
    ck_assert_int_eq(c.fp8_block_rows, 64);
    ck_assert_int_eq(c.fp8_block_cols, 32);
    ck_assert_int_eq(c.moe[3], 0);
    /* a null lower bound selects the softplus gate; the pattern letters work without the list */
    ck_assert_int_eq(parse(&c, "{\"model_type\": \"glm5_next_text\", \"linear_lower_bound\": null, "
                               "\"num_hidden_layers\": 8, \"index_topk_pattern\": \"FFFFFFFF\"}",
                           &err), GLM_OK);
    ck_assert_int_eq(c.kda_has_lower_bound, 0);
}
END_TEST

/* Each config is refused with a message naming the field (and value where it has one). */
/* The published config.json: text_config nesting with linear_attn_config (layers numbered from
 * 1), first_k_dense_replace, mhc, moe_router_dtype, eos at both levels, and the EXL3 release's
 * quantization_config with head_bits 16 and a scope. */
START_TEST(published_config_is_read)
{
    static const char j[] =
        "{\"model_type\": \"glm5_next\", \"eos_token_id\": [154820, 9], \"quantization_config\": "
        "{\"quant_method\":\"exl3\",\"bits\":4,\"codebook\":\"mcg\",\"head_bits\":16,"
        "\"scope\":\"glm53_routed_experts_only\"}, \"text_config\": {\"model_type\": "
        "\"glm5_next_text\", \"num_hidden_layers\": 8, \"first_k_dense_replace\": 3, \"mhc\": true, "
        "\"moe_router_dtype\": \"float32\", \"num_nextn_predict_layers\": 1, \"index_kpool\": 4, "
        "\"eos_token_id\": [154820, 154827, 154829], \"mlp_layer_types\": [\"dense\", \"dense\", "
        "\"dense\", \"sparse\", \"sparse\", \"sparse\", \"sparse\", \"sparse\"], "
        "\"linear_attn_config\": {\"num_heads\": 8, \"head_dim\": 32, \"short_conv_kernel_size\": 4, "
        "\"gate_lower_bound\": -5.0, \"kda_layers\": [1, 2, 4, 5, 6, 7], \"full_attn_layers\": "
        "[3, 8]}}}";
    glm_config c;
    glm_error err = {0};
    ck_assert_msg(parse(&c, j, &err) == GLM_OK, "%s", err.message);
    ck_assert_int_eq(c.exl3, 1);
    ck_assert_int_eq(c.exl3_head_bits, 16);
    ck_assert_int_eq(c.exl3_codebook, EXL3_CB_MCG);
    ck_assert_int_eq(c.kda_heads, 8);
    ck_assert_int_eq(c.kda_head_dim, 32);
    for (int i = 0; i < 8; i++) {
        ck_assert_int_eq(c.attn[i], (i == 2 || i == 7) ? GLM_ATTN_DSA : GLM_ATTN_KDA);
        ck_assert_int_eq(c.moe[i], i >= 3);
    }
    ck_assert_int_eq(c.n_eos, 4); /* text_config's three and the top level's 9 */
    ck_assert_int_eq(c.eos[3], 9);
    ck_assert(c.index_kpool_given && c.nextn_given && !c.n_routed_experts_given);
    /* without index_kpool, HF's default of 16 is not held against index_topk: the indexer's
     * tensors give the pool size at open */
    ck_assert_msg(parse(&c, "{\"model_type\": \"glm5_next_text\", \"index_topk\": 20}", &err) ==
                  GLM_OK, "%s", err.message);
    ck_assert(!c.index_kpool_given);
}
END_TEST

START_TEST(configs_the_engine_cannot_honour_are_refused)
{
    static const struct {
        const char *json, *needle1, *needle2;
        glm_status status;
    } cases[] = {
        {"{\"model_type\": \"llama\"}", "model_type", "llama", GLM_ERR_UNSUPPORTED},
        {"{}", "model_type", "missing", GLM_ERR_UNSUPPORTED},
        {"{\"model_type\": \"glm5_next_text\", \"qk_rope_head_dim\": 64}", "qk_rope_head_dim", "0",
         GLM_ERR_UNSUPPORTED},
        {"{\"model_type\": \"glm5_next_text\", \"hidden_act\": \"gelu\"}", "hidden_act", "gelu",
         GLM_ERR_UNSUPPORTED},
        {"{\"model_type\": \"glm5_next_text\", \"attention_bias\": true}", "attention_bias", "true",
         GLM_ERR_UNSUPPORTED},
        {"{\"model_type\": \"glm5_next_text\", \"index_kpool_always_select_tail\": false}",
         "index_kpool_always_select_tail", "false", GLM_ERR_UNSUPPORTED},
        {"{\"model_type\": \"glm5_next_text\", \"index_kpool_compress\": false}",
         "index_kpool_compress", "false", GLM_ERR_UNSUPPORTED},
        {"{\"model_type\": \"glm5_next_text\", \"num_hidden_layers\": 2, \"layer_types\": "
         "[\"linear_attention\", \"mamba\"]}", "layer_types", "mamba", GLM_ERR_UNSUPPORTED},
        {"{\"model_type\": \"glm5_next_text\", \"num_hidden_layers\": 3, \"layer_types\": "
         "[\"linear_attention\", \"linear_attention\"]}", "layer_types", "per layer", GLM_ERR_FORMAT},
        {"{\"model_type\": \"glm5_next_text\", \"num_hidden_layers\": 2, \"layer_types\": "
         "[\"linear_attention\", \"deepseek_sparse_attention\"], \"indexer_types\": [\"full\", "
         "\"shared\"]}", "indexer_types", "layer 1 is shared", GLM_ERR_UNSUPPORTED},
        {"{\"model_type\": \"glm5_next_text\", \"n_group\": 5}", "n_group", "groups",
         GLM_ERR_FORMAT},
        {"{\"model_type\": \"glm5_next_text\", \"num_key_value_heads\": 8}", "num_key_value_heads",
         "num_attention_heads", GLM_ERR_FORMAT},
        {"{\"model_type\": \"glm5_next_text\", \"index_topk\": 2050, \"index_kpool\": 4}",
         "index_topk", "index_kpool", GLM_ERR_FORMAT},
        {"{\"model_type\": \"glm5_next_text\", \"scoring_func\": \"softmax\"}", "scoring_func",
         "softmax", GLM_ERR_UNSUPPORTED},
        {"{\"model_type\": \"glm5_next_text\", \"hidden_size\": \"big\"}", "hidden_size", "integer",
         GLM_ERR_FORMAT},
        {"{\"model_type\": \"glm5_next_text\", \"hidden_size\": 0}", "hidden_size",
         "out of range (min 1, max 65536)", GLM_ERR_FORMAT},
        /* every integer is bounded by what the architecture allows, and the bound is named */
        {"{\"model_type\": \"glm5_next_text\", \"hc_sinkhorn_iters\": 999999999}",
         "hc_sinkhorn_iters", "999999999 is out of range (min 1, max 100)", GLM_ERR_FORMAT},
        {"{\"model_type\": \"glm5_next_text\", \"hc_sinkhorn_iters\": 1e12}",
         "hc_sinkhorn_iters", "out of range (min 1, max 100)", GLM_ERR_FORMAT},
        {"{\"model_type\": \"glm5_next_text\", \"vocab_size\": 4294967296}", "vocab_size",
         "out of range", GLM_ERR_FORMAT},
        {"{\"model_type\": \"glm5_next_text\", \"n_routed_experts\": 1000000}",
         "n_routed_experts", "max 4096", GLM_ERR_FORMAT},
        {"{\"model_type\": \"glm5_next_text\", \"max_position_embeddings\": 2147483647}",
         "max_position_embeddings", "max 16777216", GLM_ERR_FORMAT},
        {"{\"model_type\": \"glm5_next_text\", \"linear_attn_config\": {\"head_dim\": 65536}}",
         "head_dim", "max 1024", GLM_ERR_FORMAT},
        {"{\"model_type\": \"glm5_next_text\", \"num_attention_heads\": -3}",
         "num_attention_heads", "-3 is out of range", GLM_ERR_FORMAT},
        {"{\"model_type\": \"glm5_next_text\", \"hidden_size\": 1.5}", "hidden_size", "integer",
         GLM_ERR_FORMAT},
        {"{\"model_type\": \"glm5_next_text\", \"eos_token_id\": [1, -7]}", "eos_token_id",
         "-7 is out of range", GLM_ERR_FORMAT},
        {"{\"model_type\": \"glm5_next\", \"quantization_config\": {\"quant_method\": \"fp8\", "
         "\"weight_block_size\": [128, 1e10]}}", "weight_block_size", "max 4096", GLM_ERR_FORMAT},
        {"{\"model_type\": \"glm5_next_text\", \"first_k_dense_replace\": 1}",
         "first_k_dense_replace", "mlp_layer_types", GLM_ERR_UNSUPPORTED},
        {"{\"model_type\": \"glm5_next\", \"quantization_config\": {\"quant_method\": \"exl3\", "
         "\"codebook\": \"e8p\"}}", "quantization_config.codebook", "e8p", GLM_ERR_UNSUPPORTED},
        {"{\"model_type\": \"glm5_next\", \"quantization_config\": {\"quant_method\": \"exl3\", "
         "\"bits\": 12}}", "quantization_config.bits", "between 1 and 8", GLM_ERR_UNSUPPORTED},
        {"{\"model_type\": \"glm5_next\", \"quantization_config\": {\"quant_method\": \"exl3\", "
         "\"original_quantization_config\": {\"quant_method\": \"gptq\"}}}",
         "original_quantization_config.quant_method", "gptq", GLM_ERR_UNSUPPORTED},
        {"{\"model_type\": \"glm5_next\", \"quantization_config\": {\"quant_method\": \"awq\"}}",
         "quant_method", "awq", GLM_ERR_UNSUPPORTED},
        {"{\"model_type\": \"glm5_next\", \"text_config\": {\"model_type\": \"qwen3\"}}",
         "text_config.model_type", "qwen3", GLM_ERR_UNSUPPORTED},
        {"[1, 2]", "config.json", "JSON object", GLM_ERR_FORMAT},
        {"{\"model_type\": \"glm5_next\", \"quantization_config\": {\"quant_method\": \"exl3\", "
         "\"head_bits\": 9}}", "quantization_config.head_bits", "is 9", GLM_ERR_UNSUPPORTED},
        {"{\"model_type\": \"glm5_next\", \"quantization_config\": {\"quant_method\": \"exl3\", "
         "\"scope\": 7}}", "quantization_config.scope", "is 7", GLM_ERR_FORMAT},
        {"{\"model_type\": \"glm5_next_text\", \"moe_router_dtype\": \"bfloat16\"}",
         "moe_router_dtype", "\"bfloat16\"", GLM_ERR_UNSUPPORTED},
        {"{\"model_type\": \"glm5_next_text\", \"mhc\": false}", "mhc", "is false",
         GLM_ERR_UNSUPPORTED},
        {"{\"model_type\": \"glm5_next_text\", \"num_hidden_layers\": 3, \"first_k_dense_replace\": "
         "2, \"mlp_layer_types\": [\"dense\", \"sparse\", \"sparse\"]}", "first_k_dense_replace",
         "is 2, but mlp_layer_types makes the first 1", GLM_ERR_FORMAT},
        {"{\"model_type\": \"glm5_next_text\", \"num_hidden_layers\": 4, \"linear_attn_config\": "
         "{\"kda_layers\": [1, 2, 3], \"full_attn_layers\": [4]}, \"layer_types\": "
         "[\"linear_attention\", \"deepseek_sparse_attention\", \"linear_attention\", "
         "\"deepseek_sparse_attention\"]}", "linear_attn_config.kda_layers", "layer 1 (numbered 2",
         GLM_ERR_FORMAT},
        {"{\"model_type\": \"glm5_next_text\", \"num_hidden_layers\": 4, \"linear_attn_config\": "
         "{\"kda_layers\": [1, 2], \"full_attn_layers\": [4]}}", "linear_attn_config.kda_layers",
         "every layer once", GLM_ERR_FORMAT},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        glm_config c;
        glm_error err = {0};
        glm_status st = parse(&c, cases[i].json, &err);
        ck_assert_msg(st == cases[i].status, "case %zu: status %d, message: %s", i, st, err.message);
        ck_assert_msg(strstr(err.message, cases[i].needle1) && strstr(err.message, cases[i].needle2),
                      "case %zu: message lacks '%s'/'%s': %s", i, cases[i].needle1, cases[i].needle2,
                      err.message);
        ck_assert_ptr_nonnull(strstr(err.message, "config.json"));
    }
}
END_TEST

START_TEST(conversions_round_trip)
{
    /* BF16: round to nearest even */
    ck_assert_uint_eq(st_f32_to_bf16(1.0f), 0x3f80);
    ck_assert_float_eq(st_bf16_to_f32(st_f32_to_bf16(1.00390625f)), 1.0f); /* tie to even */
    ck_assert_float_eq(st_bf16_to_f32(st_f32_to_bf16(1.01171875f)), 1.015625f);
    ck_assert(isnan(st_bf16_to_f32(st_f32_to_bf16(NAN))));
    /* F16: every finite half survives a round trip through float32 */
    for (unsigned h = 0; h < 0x10000; h++) {
        float f = st_f16_to_f32((uint16_t)h);
        if (isnan(f))
            continue;
        ck_assert_msg(st_f32_to_f16(f) == h || (f == 0 && (h & 0x7fff) == 0), "half %04x", h);
    }
    /* e4m3: every finite byte survives; saturation at 448 */
    for (unsigned b = 0; b < 256; b++) {
        float f = st_e4m3_to_f32((uint8_t)b);
        if (isnan(f))
            continue;
        ck_assert_msg(st_f32_to_e4m3(f) == b || (f == 0 && (b & 0x7f) == 0), "byte %02x", b);
    }
    ck_assert_float_eq(st_e4m3_to_f32(st_f32_to_e4m3(1000.0f)), 448.0f);
    ck_assert_float_eq(st_e4m3_to_f32(st_f32_to_e4m3(-1000.0f)), -448.0f);
}
END_TEST

/* The FP8 fixture: torch's e4m3 decoding of all 256 bytes, and a block-scaled weight. */
START_TEST(fp8_matches_the_reference_decoding)
{
    char path[PATH_MAX];
    const char *src = getenv("GLMCHAT_SRCDIR");
    snprintf(path, sizeof path, "%s/tests/fixtures/fp8/fp8_blocks.safetensors", src ? src : ".");
    glm_error err = {0};
    st_model *m = st_open_file(path, &err);
    ck_assert_msg(m != NULL, "%s", err.message);
    const st_tensor *all = st_find(m, "all_bytes_f32"), *w = st_find(m, "w.weight");
    const st_tensor *scale = st_find(m, "w.weight_scale_inv"), *want = st_find(m, "w.expected");
    const st_tensor *is_nan = st_find(m, "w.is_nan");
    ck_assert(all && w && scale && want && is_nan);
    ck_assert_int_eq(w->dtype, ST_F8_E4M3);
    const float *ref = all->data;
    for (int b = 0; b < 256; b++) {
        float f = st_e4m3_to_f32((uint8_t)b);
        ck_assert_msg((isnan(f) && isnan(ref[b])) || f == ref[b], "byte %d: %g vs %g", b, (double)f,
                      (double)ref[b]);
    }
    glm_weight gw = {.kind = GLM_W_FP8_BLOCK, .dtype = ST_F8_E4M3, .rows = w->shape[0],
                     .cols = w->shape[1], .data = w->data, .scale = scale->data,
                     .scale_cols = scale->shape[1], .block_rows = 128, .block_cols = 128};
    float *row = malloc((size_t)gw.cols * sizeof *row);
    const float *exp = want->data;
    const uint8_t *nanm = is_nan->data;
    for (int64_t r = 0; r < gw.rows; r++) {
        const float *got = glm_weight_row(&gw, r, row);
        for (int64_t c = 0; c < gw.cols; c++) {
            size_t i = (size_t)(r * gw.cols + c);
            if (nanm[i])
                ck_assert(isnan(got[c]));
            else
                ck_assert_msg(got[c] == exp[i], "[%ld, %ld]: %g vs %g", (long)r, (long)c,
                              (double)got[c], (double)exp[i]);
        }
    }
    /* dump-tensor's path multiplies by the blocks too */
    float *vals;
    int64_t numel, shape[ST_MAX_DIMS];
    int ndim;
    ck_assert_int_eq(glm_tensor_to_f32(m, "w.weight", &vals, &numel, &ndim, shape, &err), GLM_OK);
    ck_assert_int_eq(numel, gw.rows * gw.cols);
    for (int64_t i = 0; i < numel; i++)
        if (!nanm[i])
            ck_assert(vals[i] == exp[i]);
    free(vals);
    free(row);
    st_close(m);
}
END_TEST

START_TEST(writer_and_reader_agree)
{
    char *dir = tu_tmpdir(), path[PATH_MAX];
    snprintf(path, sizeof path, "%s/x.safetensors", dir);
    glm_error err = {0};
    st_writer *w = st_writer_new(path, &err);
    ck_assert_ptr_nonnull(w);
    int64_t s1[2] = {2, 3}, s2[1] = {5}, s3[1] = {0};
    float a[6] = {1, 2, 3, 4, 5, 6};
    uint16_t b[5] = {0x3f80, 0x4000, 0, 0x8000, 0x7f80};
    ck_assert_int_eq(st_writer_metadata(w, "prefill", "61", &err), GLM_OK);
    ck_assert_int_eq(st_writer_declare(w, "b.weight", ST_F32, 2, s1, &err), GLM_OK);
    ck_assert_int_eq(st_writer_declare(w, "a.bias", ST_BF16, 1, s2, &err), GLM_OK);
    ck_assert_int_eq(st_writer_declare(w, "empty", ST_F32, 1, s3, &err), GLM_OK);
    ck_assert_int_eq(st_writer_begin(w, &err), GLM_OK);
    ck_assert_int_eq(st_writer_write(w, a, sizeof a, &err), GLM_OK);
    ck_assert_int_eq(st_writer_write(w, b, 4, &err), GLM_OK); /* in pieces */
    ck_assert_int_eq(st_writer_write(w, (const char *)b + 4, 6, &err), GLM_OK);
    ck_assert_int_eq(st_writer_write(w, a, 1, &err), GLM_ERR_ARG); /* more than declared */
    ck_assert_int_eq(st_writer_close(w, &err), GLM_OK);
    st_model *m = st_open_file(path, &err);
    ck_assert_msg(m != NULL, "%s", err.message);
    ck_assert_int_eq(st_count(m), 3);
    ck_assert_str_eq(st_at(m, 0)->name, "a.bias"); /* sorted */
    const st_tensor *t = st_find(m, "b.weight");
    ck_assert_int_eq(t->ndim, 2);
    ck_assert_int_eq(t->shape[1], 3);
    ck_assert_int_eq(memcmp(t->data, a, sizeof a), 0);
    float f[5];
    ck_assert_int_eq(st_to_f32(ST_BF16, st_find(m, "a.bias")->data, 0, 5, f), 0);
    ck_assert_float_eq(f[1], 2.0f);
    ck_assert(isinf(f[4]));
    ck_assert_str_eq(st_metadata(m, "prefill"), "61");
    ck_assert_ptr_null(st_find(m, "missing"));
    st_close(m);
    /* a writer closed short of its data removes the file and says so */
    w = st_writer_new(path, &err);
    ck_assert_int_eq(st_writer_declare(w, "x", ST_F32, 2, s1, &err), GLM_OK);
    ck_assert_int_eq(st_writer_close(w, &err), GLM_ERR_ARG);
    ck_assert_int_ne(access(path, F_OK), 0);
    tu_rmtree(dir);
    free(dir);
}
END_TEST

static void write_bytes(const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(data, 1, n, f), n);
    ck_assert_int_eq(fclose(f), 0);
}

START_TEST(broken_safetensors_files_are_named)
{
    char *dir = tu_tmpdir(), path[PATH_MAX];
    snprintf(path, sizeof path, "%s/bad.safetensors", dir);
    glm_error err = {0};
    write_bytes(path, "abc", 3);
    ck_assert_ptr_null(st_open_file(path, &err));
    ck_assert_ptr_nonnull(strstr(err.message, path));
    ck_assert_ptr_nonnull(strstr(err.message, "too short"));
    unsigned char huge[16] = {0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, '{', '}'};
    write_bytes(path, huge, sizeof huge);
    ck_assert_ptr_null(st_open_file(path, &err));
    ck_assert_ptr_nonnull(strstr(err.message, "limit of 100 MiB"));
    unsigned char past_end[16] = {0xe8, 0x03, 0, 0, 0, 0, 0, 0, '{', '}'};
    write_bytes(path, past_end, sizeof past_end);
    ck_assert_ptr_null(st_open_file(path, &err));
    ck_assert_ptr_nonnull(strstr(err.message, "header length"));
    const char hdr[] = "{\"t\": {\"dtype\": \"Q4\", \"shape\": [1], \"data_offsets\": [0, 4]}}";
    unsigned char buf[128] = {sizeof hdr - 1};
    memcpy(buf + 8, hdr, sizeof hdr - 1);
    write_bytes(path, buf, 8 + sizeof hdr - 1 + 4);
    ck_assert_ptr_null(st_open_file(path, &err));
    ck_assert_ptr_nonnull(strstr(err.message, "dtype Q4"));
    const char hdr2[] = "{\"t\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 4]}}";
    memset(buf, 0, sizeof buf);
    buf[0] = sizeof hdr2 - 1;
    memcpy(buf + 8, hdr2, sizeof hdr2 - 1);
    write_bytes(path, buf, 8 + sizeof hdr2 - 1 + 4);
    ck_assert_ptr_null(st_open_file(path, &err));
    ck_assert_ptr_nonnull(strstr(err.message, "need 8"));
    ck_assert_ptr_null(st_open_dir(dir, &err));
    ck_assert_ptr_nonnull(strstr(err.message, "neither model.safetensors"));
    tu_rmtree(dir);
    free(dir);
}
END_TEST

/* Writes a safetensors file of the header's first hlen bytes followed by data_len zero bytes. */
static void write_st(const char *path, const char *header, size_t hlen, size_t data_len)
{
    size_t n = 8 + hlen + data_len;
    unsigned char *buf = calloc(1, n);
    ck_assert_ptr_nonnull(buf);
    for (int i = 0; i < 8; i++)
        buf[i] = (unsigned char)((uint64_t)hlen >> (8 * i));
    memcpy(buf + 8, header, hlen);
    write_bytes(path, buf, n);
    free(buf);
}

/* Headers a fault-injection run built by hand: each is refused with a message naming the
 * problem, and none costs undefined behaviour (the unit runs under UBSan in the fuzzers). */
START_TEST(hostile_safetensors_headers_are_refused)
{
    static const struct {
        const char *header;
        size_t hlen; /* 0: strlen */
        const char *needle;
    } cases[] = {
        {"{\"t\":{\"dtype\":\"F32\",\"shape\":[9223372036854775807,2],\"data_offsets\":[0,0]}}", 0,
         "overflows 64 bits"},
        {"{\"unused\":{\"dtype\":\"U8\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,0]}}",
         0, "overflows 64 bits"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
         "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[2,6]}}", 0, "overlap"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
         "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 0, "overlap"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}\0\0\0", 59, "NUL byte"},
        {"{\"a\\u0000b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 0, "escape"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1e0],\"data_offsets\":[0,4]}}", 0, "whole number"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 0, "whole number"},
        {"{\"a\":{\"dtype\":\"F32\",\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 0,
         "dtype twice"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4,8]}}", 0, "more numbers"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]}}", 0,
         "more than 8 dimensions"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,99999999999999999999]}}", 0,
         "above 2^63"},
        {"{\"__metadata__\":[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}",
         0, "nested deeper"},
        {"{}x", 0, "bytes after"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}", 0, "expected"},
    };
    char *dir = tu_tmpdir(), path[PATH_MAX];
    snprintf(path, sizeof path, "%s/hostile.safetensors", dir);
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        glm_error err = {0};
        write_st(path, cases[i].header, cases[i].hlen ? cases[i].hlen : strlen(cases[i].header), 8);
        ck_assert_msg(st_open_file(path, &err) == NULL, "case %zu accepted", i);
        ck_assert_msg(strstr(err.message, cases[i].needle) && strstr(err.message, path),
                      "case %zu: message lacks '%s': %s", i, cases[i].needle, err.message);
    }
    /* what the format allows still loads: escapes, unknown keys, empty tensors sharing an
     * offset, a zero dimension beside huge ones, metadata, and space padding */
    const char good[] = "{\"__metadata__\":{\"format\":\"pt\"},\"caf\\u00e9\":{\"dtype\":\"F32\","
                        "\"shape\":[2],\"data_offsets\":[0,8],\"extra\":[1,{\"k\":null}]},"
                        "\"e1\":{\"dtype\":\"BF16\",\"shape\":[0],\"data_offsets\":[8,8]},"
                        "\"e2\":{\"dtype\":\"BF16\",\"shape\":[4294967296,4294967296,0],"
                        "\"data_offsets\":[8,8]}}    ";
    glm_error err = {0};
    write_st(path, good, sizeof good - 1, 8);
    st_model *m = st_open_file(path, &err);
    ck_assert_msg(m != NULL, "%s", err.message);
    ck_assert_uint_eq(st_count(m), 3);
    ck_assert_ptr_nonnull(st_find(m, "caf\xc3\xa9"));
    ck_assert_int_eq(st_numel(st_find(m, "e2")), 0);
    ck_assert_str_eq(st_metadata(m, "format"), "pt");
    st_close(m);
    tu_rmtree(dir);
    free(dir);
}
END_TEST

/* A broken copy of a fixture model: the loader's message names the file and the tensor. */
static void expect_open_error(const char *dir, const char *n1, const char *n2, const char *n3)
{
    glm_error err = {0};
    glm_model *m = glm_model_open(dir, &err);
    ck_assert_msg(m == NULL, "opened a broken model in %s", dir);
    ck_assert_msg(strstr(err.message, n1) && strstr(err.message, n2) && strstr(err.message, n3),
                  "message lacks '%s', '%s' or '%s': %s", n1, n2, n3, err.message);
}

#define KDA_Q "model.language_model.layers.0.self_attn.q_proj.weight"

static char *broken_copy(tu_tensor **t, int *n)
{
    const char *src = tu_fixture("softplus-kpool1-hc1");
    char *dir = tu_tmpdir(), path[PATH_MAX];
    ck_assert_int_eq(tu_copy_model(src, dir), 0);
    snprintf(path, sizeof path, "%s/model.safetensors", src);
    ck_assert_int_eq(tu_load_tensors(path, t, n), 0);
    return dir;
}

START_TEST(missing_tensor_is_named)
{
    tu_tensor *t;
    int n;
    char *dir = broken_copy(&t, &n), path[PATH_MAX];
    tu_tensor *q = tu_find(t, n, KDA_Q);
    ck_assert_ptr_nonnull(q);
    snprintf(q->name, sizeof q->name, "renamed.tensor");
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    ck_assert_int_eq(tu_write_tensors(path, t, n), 0);
    expect_open_error(dir, path, KDA_Q, "missing");
    /* a .trellis that is not an EXL3 trellis (F32, 2-d): the file and the tensor are named */
    snprintf(q->name, sizeof q->name, "model.language_model.layers.0.self_attn.q_proj.trellis");
    ck_assert_int_eq(tu_write_tensors(path, t, n), 0);
    expect_open_error(dir, path, "q_proj.trellis", "I16");
    tu_free_tensors(t, n);
    tu_rmtree(dir);
    free(dir);
}
END_TEST

START_TEST(wrong_shape_is_named)
{
    tu_tensor *t;
    int n;
    char *dir = broken_copy(&t, &n), path[PATH_MAX];
    tu_tensor *q = tu_find(t, n, KDA_Q);
    q->shape[0] /= 2; /* [16, 32] -> [8, 64]: same bytes, wrong shape */
    q->shape[1] *= 2;
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    ck_assert_int_eq(tu_write_tensors(path, t, n), 0);
    expect_open_error(dir, path, KDA_Q, "has shape [8, 64]");
    tu_free_tensors(t, n);
    tu_rmtree(dir);
    free(dir);
}
END_TEST

START_TEST(truncated_shard_is_named)
{
    tu_tensor *t;
    int n;
    char *dir = broken_copy(&t, &n), path[PATH_MAX];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    ck_assert_int_eq(remove(path), 0);
    ck_assert_int_eq(tu_write_sharded(dir, t, n, 2), 0);
    snprintf(path, sizeof path, "%s/model-00002-of-00002.safetensors", dir);
    FILE *f = fopen(path, "rb");
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fclose(f);
    ck_assert_int_eq(truncate(path, size - 100), 0);
    glm_error err = {0};
    glm_model *m = glm_model_open(dir, &err);
    ck_assert_ptr_null(m);
    ck_assert_msg(strstr(err.message, path) && strstr(err.message, "truncated") &&
                      strstr(err.message, "tensor model."),
                  "%s", err.message);
    /* an index naming a shard that is not there */
    ck_assert_int_eq(remove(path), 0);
    expect_open_error(dir, path, "cannot open", "model-00002");
    tu_free_tensors(t, n);
    tu_rmtree(dir);
    free(dir);
}
END_TEST

START_TEST(config_contradicting_weights_is_named)
{
    tu_tensor *t;
    int n;
    char *dir = broken_copy(&t, &n), path[PATH_MAX];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    ck_assert_int_eq(tu_edit_config(dir, "\"hidden_size\": 32", "\"hidden_size\": 48"), 0);
    expect_open_error(dir, path, "embed_tokens.weight", "config.json implies [256, 48]");
    tu_free_tensors(t, n);
    tu_rmtree(dir);
    free(dir);
    dir = broken_copy(&t, &n);
    ck_assert_int_eq(tu_edit_config(dir, "\"linear_num_heads\": 2", "\"linear_num_heads\": 4"), 0);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    expect_open_error(dir, path, KDA_Q, "contradicts");
    tu_free_tensors(t, n);
    tu_rmtree(dir);
    free(dir);
}
END_TEST

/* The reply budget: the request's, else generation_config.json's max_new_tokens, else 32768
 * (the public recipe's), each cut to what the context has left, and which limit it was. */
START_TEST(reply_budget_precedence)
{
    glm_generation_config none = {0}, given = {.max_new_tokens = 256};
    glm_limit from;
    ck_assert_int_eq(glm_reply_budget(&none, 0, 1 << 20, &from), 32768);
    ck_assert_int_eq(from, GLM_LIMIT_DEFAULT);
    ck_assert_int_eq(glm_reply_budget(&none, 0, 1000, &from), 1000);
    ck_assert_int_eq(from, GLM_LIMIT_CONTEXT);
    ck_assert_int_eq(glm_reply_budget(&given, 0, 1 << 20, &from), 256);
    ck_assert_int_eq(from, GLM_LIMIT_MODEL);
    ck_assert_int_eq(glm_reply_budget(&given, 40000, 1 << 20, &from), 40000);
    ck_assert_int_eq(from, GLM_LIMIT_REQUEST);
    ck_assert_int_eq(glm_reply_budget(&given, 40000, 300, &from), 300);
    ck_assert_int_eq(from, GLM_LIMIT_CONTEXT);
    ck_assert_int_eq(glm_reply_budget(&given, 300, 300, &from), 300); /* equal: the request's */
    ck_assert_int_eq(from, GLM_LIMIT_REQUEST);
}
END_TEST

START_TEST(generation_config_is_read)
{
    glm_generation_config g;
    glm_error err = {0};
    char *dir = tu_tmpdir(), path[PATH_MAX];
    ck_assert_int_eq(glm_generation_config_load(&g, dir, &err), GLM_OK); /* absent: defaults */
    ck_assert_int_eq(g.n_eos, 0);
    snprintf(path, sizeof path, "%s/generation_config.json", dir);
    const char j[] = "{\"eos_token_id\": [154820, 154827, 154829], \"max_new_tokens\": 77, "
                     "\"top_p\": 0.95}";
    write_bytes(path, j, sizeof j - 1);
    ck_assert_int_eq(glm_generation_config_load(&g, dir, &err), GLM_OK);
    ck_assert_int_eq(g.n_eos, 3);
    ck_assert_int_eq(g.eos[1], 154827);
    ck_assert_int_eq(g.max_new_tokens, 77);
    ck_assert_float_eq_tol(g.top_p, 0.95f, 1e-6f);
    ck_assert_float_eq(g.temperature, 1.0f);
    const char greedy[] = "{\"temperature\": 0.7, \"do_sample\": false}";
    write_bytes(path, greedy, sizeof greedy - 1);
    ck_assert_int_eq(glm_generation_config_load(&g, dir, &err), GLM_OK);
    ck_assert_float_eq(g.temperature, 0.0f); /* do_sample false: greedy */
    const char bad[] = "{\"do_sample\": \"no\"}";
    write_bytes(path, bad, sizeof bad - 1);
    ck_assert_int_eq(glm_generation_config_load(&g, dir, &err), GLM_ERR_FORMAT);
    ck_assert_ptr_nonnull(strstr(err.message, "do_sample"));
    tu_rmtree(dir);
    free(dir);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("model");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, flat_config_gets_the_reference_defaults);
    tcase_add_test(tc, nested_config_and_its_spellings);
    tcase_add_test(tc, configs_the_engine_cannot_honour_are_refused);
    tcase_add_test(tc, published_config_is_read);
    tcase_add_test(tc, conversions_round_trip);
    tcase_add_test(tc, reply_budget_precedence);
    tcase_add_test(tc, fp8_matches_the_reference_decoding);
    tcase_add_test(tc, writer_and_reader_agree);
    tcase_add_test(tc, broken_safetensors_files_are_named);
    tcase_add_test(tc, hostile_safetensors_headers_are_refused);
    tcase_add_test(tc, missing_tensor_is_named);
    tcase_add_test(tc, wrong_shape_is_named);
    tcase_add_test(tc, truncated_shard_is_named);
    tcase_add_test(tc, config_contradicting_weights_is_named);
    tcase_add_test(tc, generation_config_is_read);
    suite_add_tcase(s, tc);
    return test_run_suite(s);
}
