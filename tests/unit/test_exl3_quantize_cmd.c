/* test_exl3_quantize_cmd.c: `glmchat quantize` on a small checkpoint written here: experts
 * become EXL3 tensors the loader binds and decodes close to the originals, the rest is copied. */
#include <check.h>
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "app/cli.h"
#include "app/commands.h"
#include "engine/model/exl3_load.h"
#include "engine/model/safetensors.h"
#include "tests/common/check_main.h"
#include "tests/common/rng.h"

#define GATE "model.language_model.layers.0.mlp.experts.0.gate_proj"
#define DOWN "model.language_model.layers.0.mlp.experts.0.down_proj"
#define ODD "model.language_model.layers.0.mlp.experts.1.up_proj.weight"
#define EMBED "model.language_model.embed_tokens.weight"

static char in_dir[64], out_dir[64];
static float gate[128 * 256], down[256 * 128], odd[96 * 128], embed[10 * 128];
static uint16_t down_bf16[256 * 128];

static uint64_t rng_state = 0x1234567887654321ull;

static void write_input(void)
{
    strcpy(in_dir, "/tmp/glmchat-quant-in-XXXXXX");
    strcpy(out_dir, "/tmp/glmchat-quant-out-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(in_dir));
    ck_assert_ptr_nonnull(mkdtemp(out_dir));
    for (size_t i = 0; i < sizeof gate / sizeof *gate; i++)
        gate[i] = (float)(0.02 * test_rng_gauss(&rng_state));
    for (size_t i = 0; i < sizeof down / sizeof *down; i++) {
        down_bf16[i] = st_f32_to_bf16((float)(0.03 * test_rng_gauss(&rng_state)));
        down[i] = st_bf16_to_f32(down_bf16[i]);
    }
    for (size_t i = 0; i < sizeof odd / sizeof *odd; i++)
        odd[i] = (float)test_rng_gauss(&rng_state);
    for (size_t i = 0; i < sizeof embed / sizeof *embed; i++)
        embed[i] = (float)test_rng_gauss(&rng_state);
    char path[128];
    snprintf(path, sizeof path, "%s/model.safetensors", in_dir);
    glm_error err;
    st_writer *w = st_writer_new(path, &err);
    ck_assert_ptr_nonnull(w);
    int64_t sg[2] = {128, 256}, sd[2] = {256, 128}, so[2] = {96, 128}, se[2] = {10, 128};
    ck_assert_int_eq(st_writer_declare(w, GATE ".weight", ST_F32, 2, sg, &err), GLM_OK);
    ck_assert_int_eq(st_writer_declare(w, DOWN ".weight", ST_BF16, 2, sd, &err), GLM_OK);
    ck_assert_int_eq(st_writer_declare(w, ODD, ST_F32, 2, so, &err), GLM_OK);
    ck_assert_int_eq(st_writer_declare(w, EMBED, ST_F32, 2, se, &err), GLM_OK);
    ck_assert_int_eq(st_writer_begin(w, &err), GLM_OK);
    ck_assert_int_eq(st_writer_write(w, gate, sizeof gate, &err), GLM_OK);
    ck_assert_int_eq(st_writer_write(w, down_bf16, sizeof down_bf16, &err), GLM_OK);
    ck_assert_int_eq(st_writer_write(w, odd, sizeof odd, &err), GLM_OK);
    ck_assert_int_eq(st_writer_write(w, embed, sizeof embed, &err), GLM_OK);
    ck_assert_int_eq(st_writer_close(w, &err), GLM_OK);
    snprintf(path, sizeof path, "%s/config.json", in_dir);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs("{\"model_type\": \"glm5_next\", \"hidden_size\": 128}\n", f);
    fclose(f);
    snprintf(path, sizeof path, "%s/tokenizer.json", in_dir);
    f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs("{\"version\": \"1.0\"}", f);
    fclose(f);
}

static void remove_dir(const char *dir)
{
    const char *names[] = {"model.safetensors", "config.json", "tokenizer.json"};
    char path[128];
    for (int i = 0; i < 3; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        remove(path);
    }
    rmdir(dir);
}

static int run(int argc, const char **args)
{
    char *argv[16];
    for (int i = 0; i < argc; i++)
        argv[i] = (char *)args[i];
    argv[argc] = NULL;
    cli_globals g = {0};
    return cmd_quantize(argc, argv, &g);
}

static double rel_error(const float *a, const float *b, size_t n)
{
    double e = 0, s = 0;
    for (size_t i = 0; i < n; i++) {
        e += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        s += (double)b[i] * b[i];
    }
    return e / s;
}

START_TEST(quantizes_experts_and_copies_the_rest)
{
    write_input();
    const char *args[] = {"quantize", "--in", in_dir, "--out", out_dir, "--bits", "3",
                          "--threads", "2"};
    ck_assert_int_eq(run(9, args), CLI_EXIT_OK);
    glm_error err;
    st_model *m = st_open_dir(out_dir, &err);
    ck_assert_msg(m != NULL, "%s", err.message);
    ck_assert_ptr_null(st_find(m, GATE ".weight"));
    ck_assert(exl3_is_stored(m, GATE ".weight"));
    const st_tensor *tr = st_find(m, GATE ".trellis");
    ck_assert_ptr_nonnull(tr);
    ck_assert_int_eq(tr->dtype, ST_I16);
    ck_assert(tr->ndim == 3 && tr->shape[0] == 16 && tr->shape[1] == 8 && tr->shape[2] == 48);
    const st_tensor *mk = st_find(m, GATE ".mcg");
    ck_assert(mk && mk->ndim == 0 && mk->dtype == ST_I32);
    ck_assert_uint_eq(*(const uint32_t *)mk->data, EXL3_MCG_MARKER);
    /* the loader binds them and they decode close to the original weights */
    float *w;
    int out, in;
    ck_assert_int_eq(exl3_load_dequantized(m, GATE, &w, &out, &in, &err), GLM_OK);
    ck_assert(out == 128 && in == 256);
    ck_assert_double_le(rel_error(w, gate, 128 * 256), 0.02);
    free(w);
    ck_assert_int_eq(exl3_load_dequantized(m, DOWN ".weight", &w, &out, &in, &err), GLM_OK);
    ck_assert(out == 256 && in == 128);
    ck_assert_double_le(rel_error(w, down, 256 * 128), 0.02);
    free(w);
    /* 96 outputs cannot be EXL3: copied, like the embedding, bit for bit */
    const st_tensor *o = st_find(m, ODD), *e = st_find(m, EMBED);
    ck_assert(o && e);
    ck_assert_int_eq(memcmp(o->data, odd, sizeof odd), 0);
    ck_assert_int_eq(memcmp(e->data, embed, sizeof embed), 0);
    ck_assert_int_eq(exl3_load(m, EMBED, &(exl3_tensor){0}, &err), GLM_ERR_ARG);
    st_close(m);
    /* config.json says how; other files are copied */
    char path[128];
    snprintf(path, sizeof path, "%s/config.json", out_dir);
    FILE *f = fopen(path, "r");
    ck_assert_ptr_nonnull(f);
    char buf[4096];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = '\0';
    fclose(f);
    cJSON *cfg = cJSON_Parse(buf);
    ck_assert_ptr_nonnull(cfg);
    cJSON *qc = cJSON_GetObjectItem(cfg, "quantization_config");
    ck_assert_str_eq(cJSON_GetObjectItem(qc, "quant_method")->valuestring, "exl3");
    ck_assert_int_eq(cJSON_GetObjectItem(qc, "bits")->valueint, 3);
    ck_assert_str_eq(cJSON_GetObjectItem(qc, "codebook")->valuestring, "mcg");
    ck_assert_int_eq(cJSON_GetObjectItem(cfg, "hidden_size")->valueint, 128);
    cJSON_Delete(cfg);
    snprintf(path, sizeof path, "%s/tokenizer.json", out_dir);
    f = fopen(path, "r");
    ck_assert_ptr_nonnull(f);
    fclose(f);
    remove_dir(in_dir);
    remove_dir(out_dir);
}
END_TEST

START_TEST(bad_command_lines_and_inputs)
{
    const char *no_out[] = {"quantize", "--in", "/nonexistent"};
    ck_assert_int_eq(run(3, no_out), CLI_EXIT_USAGE);
    const char *bits[] = {"quantize", "--in", "/a", "--out", "/b", "--bits", "9"};
    ck_assert_int_eq(run(7, bits), CLI_EXIT_USAGE);
    const char *cb[] = {"quantize", "--in", "/a", "--out", "/b", "--codebook", "x"};
    ck_assert_int_eq(run(7, cb), CLI_EXIT_USAGE);
    const char *same[] = {"quantize", "--in", "/tmp", "--out", "/tmp"};
    ck_assert_int_eq(run(5, same), CLI_EXIT_USAGE);
    const char *missing[] = {"quantize", "--in", "/nonexistent-glmchat-dir", "--out",
                             "/tmp/glmchat-never-created"};
    ck_assert_int_eq(run(5, missing), CLI_EXIT_RUNTIME);
    const char *help[] = {"quantize", "--help"};
    ck_assert_int_eq(run(2, help), CLI_EXIT_OK);
}
END_TEST

/* One module "m" with the given trellis dtype/shape, optional suh, svh and markers. */
static glm_status load_variant(st_dtype tdtype, int64_t k16, int with_suh, int both_markers,
                               char *msg, size_t n)
{
    char dir[64] = "/tmp/glmchat-exl3-load-XXXXXX", path[128];
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    glm_error err;
    st_writer *w = st_writer_new(path, &err);
    ck_assert_ptr_nonnull(w);
    int64_t ts[3] = {8, 8, k16}, ks[1] = {128};
    static uint16_t zeros[8 * 8 * 128];
    ck_assert_int_eq(st_writer_declare(w, "m.trellis", tdtype, 3, ts, &err), GLM_OK);
    if (with_suh)
        ck_assert_int_eq(st_writer_declare(w, "m.suh", ST_F16, 1, ks, &err), GLM_OK);
    ck_assert_int_eq(st_writer_declare(w, "m.svh", ST_F16, 1, ks, &err), GLM_OK);
    ck_assert_int_eq(st_writer_declare(w, "m.mcg", ST_I32, 0, NULL, &err), GLM_OK);
    if (both_markers)
        ck_assert_int_eq(st_writer_declare(w, "m.mul1", ST_I32, 0, NULL, &err), GLM_OK);
    ck_assert_int_eq(st_writer_begin(w, &err), GLM_OK);
    size_t tbytes = (size_t)(8 * 8 * k16) * st_dtype_size(tdtype);
    ck_assert_int_eq(st_writer_write(w, zeros, tbytes, &err), GLM_OK);
    if (with_suh)
        ck_assert_int_eq(st_writer_write(w, zeros, 256, &err), GLM_OK);
    ck_assert_int_eq(st_writer_write(w, zeros, 256, &err), GLM_OK);
    ck_assert_int_eq(st_writer_write(w, zeros, 4, &err), GLM_OK);
    if (both_markers)
        ck_assert_int_eq(st_writer_write(w, zeros, 4, &err), GLM_OK);
    ck_assert_int_eq(st_writer_close(w, &err), GLM_OK);
    st_model *m = st_open_dir(dir, &err);
    ck_assert_ptr_nonnull(m);
    exl3_tensor t;
    glm_status st = exl3_load(m, "m", &t, &err);
    snprintf(msg, n, "%s", st == GLM_OK ? "" : err.message);
    if (st == GLM_OK) {
        ck_assert(t.in == 128 && t.out == 128 && t.codebook == EXL3_CB_MCG);
        ck_assert_int_eq(t.bits, (int)(k16 / 16));
    }
    st_close(m);
    remove(path);
    rmdir(dir);
    return st;
}

START_TEST(loader_checks_the_format)
{
    char msg[1024];
    ck_assert_int_eq(load_variant(ST_I16, 64, 1, 0, msg, sizeof msg), GLM_OK);
    ck_assert_int_eq(load_variant(ST_I32, 64, 1, 0, msg, sizeof msg), GLM_ERR_FORMAT);
    ck_assert_ptr_nonnull(strstr(msg, "m.trellis"));
    ck_assert_int_eq(load_variant(ST_I16, 60, 1, 0, msg, sizeof msg), GLM_ERR_FORMAT);
    ck_assert_int_eq(load_variant(ST_I16, 144, 1, 0, msg, sizeof msg), GLM_ERR_FORMAT);
    ck_assert_int_eq(load_variant(ST_I16, 64, 0, 0, msg, sizeof msg), GLM_ERR_FORMAT);
    ck_assert_ptr_nonnull(strstr(msg, "suh"));
    ck_assert_int_eq(load_variant(ST_I16, 64, 1, 1, msg, sizeof msg), GLM_ERR_FORMAT);
    ck_assert_ptr_nonnull(strstr(msg, "mul1"));
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("quantize_cmd");
    TCase *tc = tcase_create("cmd");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, quantizes_experts_and_copies_the_rest);
    tcase_add_test(tc, bad_command_lines_and_inputs);
    tcase_add_test(tc, loader_checks_the_format);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return test_run_suite(suite());
}
