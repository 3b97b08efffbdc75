/* test_exl3_engine.c: the CPU engine on an EXL3 checkpoint made by `glmchat quantize`: logits
 * match the same model with its experts dequantized to F32, dump-tensor decodes, bad tensors named. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "app/cli.h"
#include "app/commands.h"
#include "engine/model/exl3_load.h"
#include "engine/model/model.h"
#include "engine/model/safetensors.h"
#include "test_engine_util.h"
#include "tests/common/check_main.h"

#define GATE1 "model.language_model.layers.1.mlp.experts.1.gate_proj"
#define TOKENS "5 17 200 3 3 9 101 44"
#define N_TOKENS 8

static char *scratch, src[4096], quant[4096], ref[4096];

typedef int (*cmd_fn)(int, char **, const cli_globals *);

static int run(cmd_fn fn, const char *a0, const char *a1, const char *a2, const char *a3,
               const char *a4, const char *a5, const char *a6, const char *a7, const char *a8)
{
    const char *args[] = {a0, a1, a2, a3, a4, a5, a6, a7, a8};
    char *argv[10];
    int argc = 0;
    for (int i = 0; i < 9 && args[i]; i++)
        argv[argc++] = (char *)args[i];
    argv[argc] = NULL;
    cli_globals g = {0};
    return fn(argc, argv, &g);
}

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

/* The part of an EXL3 module other than its trellis, which the reference leaves out. */
static int exl3_part(const st_model *m, const char *name)
{
    static const char *parts[] = {".suh", ".svh", ".su", ".sv", ".mcg", ".mul1"};
    char module[512];
    for (size_t i = 0; i < sizeof parts / sizeof *parts; i++)
        if (ends_with(name, parts[i])) {
            snprintf(module, sizeof module, "%.*s", (int)(strlen(name) - strlen(parts[i])), name);
            if (exl3_is_stored(m, module))
                return 1;
        }
    return 0;
}

/* REF: the quantized checkpoint with every EXL3 module as its dequantized F32 .weight. */
static void write_reference(void)
{
    glm_error err = {0};
    st_model *m = st_open_dir(quant, &err);
    ck_assert_msg(m != NULL, "%s", err.message);
    size_t n = st_count(m), k = 0;
    tu_tensor *t = calloc(n, sizeof *t);
    ck_assert_ptr_nonnull(t);
    int replaced = 0;
    for (size_t i = 0; i < n; i++) {
        const st_tensor *s = st_at(m, i);
        if (exl3_part(m, s->name))
            continue;
        tu_tensor *o = &t[k++];
        if (ends_with(s->name, ".trellis")) {
            float *w;
            int out, in;
            snprintf(o->name, sizeof o->name, "%.*s.weight", (int)(strlen(s->name) - 8), s->name);
            ck_assert_int_eq(exl3_load_dequantized(m, o->name, &w, &out, &in, &err), GLM_OK);
            o->dtype = ST_F32;
            o->ndim = 2;
            o->shape[0] = out;
            o->shape[1] = in;
            o->data = w;
            o->nbytes = (size_t)out * (size_t)in * sizeof *w;
            replaced++;
            continue;
        }
        snprintf(o->name, sizeof o->name, "%s", s->name);
        o->dtype = s->dtype;
        o->ndim = s->ndim;
        memcpy(o->shape, s->shape, sizeof o->shape);
        o->nbytes = (size_t)st_numel(s) * st_dtype_size(s->dtype);
        o->data = malloc(o->nbytes ? o->nbytes : 1);
        ck_assert_ptr_nonnull(o->data);
        memcpy(o->data, s->data, o->nbytes);
    }
    ck_assert_int_eq(replaced, 6); /* 2 experts x gate, up, down */
    char path[4200];
    snprintf(path, sizeof path, "%s/model.safetensors", ref);
    ck_assert_int_eq(tu_write_tensors(path, t, (int)k), 0);
    tu_free_tensors(t, (int)k);
    st_close(m);
    static const char *files[] = {"config.json", "generation_config.json", "tokenizer.json"};
    for (size_t i = 0; i < 3; i++) {
        char a[4200], b[4200];
        snprintf(a, sizeof a, "%s/%s", quant, files[i]);
        snprintf(b, sizeof b, "%s/%s", ref, files[i]);
        ck_assert_int_eq(tu_copy_file(a, b), 0);
    }
}

static void setup_models(void)
{
    scratch = tu_tmpdir();
    snprintf(src, sizeof src, "%s/src", scratch);
    snprintf(quant, sizeof quant, "%s/q", scratch);
    snprintf(ref, sizeof ref, "%s/ref", scratch);
    ck_assert_int_eq(run(cmd_mkmodel, "mkmodel", "--out", src, "--preset", "tiny-exl3", NULL,
                         NULL, NULL, NULL), 0);
    ck_assert_int_eq(run(cmd_quantize, "quantize", "--in", src, "--out", quant, "--bits", "4",
                         NULL, NULL), 0);
    ck_assert_int_eq(mkdir(ref, 0700), 0);
    write_reference();
}

static void teardown_models(void)
{
    tu_rmtree(scratch);
    free(scratch);
}

static float *read_f32(const char *path, size_t n)
{
    float *v = malloc(n * sizeof *v);
    ck_assert_ptr_nonnull(v);
    FILE *f = fopen(path, "rb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fread(v, sizeof *v, n, f), n);
    ck_assert_int_eq(fgetc(f), EOF);
    fclose(f);
    return v;
}

static float *logits_of(const char *model, const char *prefill)
{
    char ids[4200], out[4200];
    snprintf(ids, sizeof ids, "%s/ids.txt", scratch);
    snprintf(out, sizeof out, "%s/logits.f32", scratch);
    FILE *f = fopen(ids, "w");
    ck_assert_ptr_nonnull(f);
    fputs(TOKENS "\n", f);
    fclose(f);
    ck_assert_int_eq(run(cmd_logits, "logits", "--model", model, "--tokens-file", ids, "--out",
                         out, prefill ? "--prefill" : NULL, prefill), 0);
    return read_f32(out, (size_t)N_TOKENS * 154880);
}

START_TEST(logits_match_dequantized_reference)
{
    size_t n = (size_t)N_TOKENS * 154880;
    float *q = logits_of(quant, NULL), *r = logits_of(ref, NULL);
    float *qd = logits_of(quant, "3"); /* prefill 3, then decode one at a time */
    float scale = 0;
    for (size_t i = 0; i < n; i++)
        scale = fmaxf(scale, fabsf(r[i]));
    ck_assert_float_gt(scale, 0.1f); /* the comparison means something */
    float d = tu_max_abs_diff(q, r, n), dd = tu_max_abs_diff(qd, r, n);
    ck_assert_msg(d <= 1e-4f, "EXL3 vs dequantized F32 logits: max |diff| %g", d);
    ck_assert_msg(dd <= 1e-4f, "EXL3 prefill+decode vs F32 logits: max |diff| %g", dd);
    /* and the EXL3 experts changed the model (the reference is not the unquantized source) */
    float *s = logits_of(src, NULL);
    ck_assert_float_gt(tu_max_abs_diff(s, r, n), 1e-3f);
    free(q);
    free(r);
    free(qd);
    free(s);
}
END_TEST

START_TEST(model_binds_experts_as_exl3)
{
    glm_error err = {0};
    glm_model *m = glm_model_open(quant, &err);
    ck_assert_msg(m != NULL, "%s", err.message);
    ck_assert_int_eq(m->cfg.exl3, 1);
    const glm_weight *g = &m->w.layers[1].experts[1].gate;
    ck_assert_int_eq(g->kind, GLM_W_EXL3);
    ck_assert_int_eq(g->rows, 128);
    ck_assert_int_eq(g->cols, 128);
    ck_assert_int_eq(g->exl3->bits, 4);
    ck_assert_int_eq(m->w.layers[1].mlp.gate.kind, GLM_W_PLAIN); /* shared expert stays F32 */
    glm_model_close(m);
}
END_TEST

START_TEST(dump_tensor_writes_dequantized_weight)
{
    char out[4200];
    snprintf(out, sizeof out, "%s/gate.f32", scratch);
    static const char *names[] = {GATE1 ".weight", GATE1};
    glm_error err = {0};
    st_model *m = st_open_dir(quant, &err);
    ck_assert_ptr_nonnull(m);
    float *w;
    int rows, cols;
    ck_assert_int_eq(exl3_load_dequantized(m, GATE1, &w, &rows, &cols, &err), GLM_OK);
    for (int i = 0; i < 2; i++) {
        unlink(out);
        ck_assert_int_eq(run(cmd_dump_tensor, "dump-tensor", "--model", quant, "--name", names[i],
                             "--out", out, NULL, NULL), 0);
        float *d = read_f32(out, (size_t)rows * cols);
        ck_assert_int_eq(memcmp(d, w, (size_t)rows * cols * sizeof *d), 0);
        free(d);
    }
    free(w);
    st_close(m);
}
END_TEST

/* A copy of the quantized model with one tensor's shape changed (its bytes cut to match). */
static char *broken_copy(const char *tensor, int dim, int64_t size, char *path, size_t n)
{
    char *dir = tu_tmpdir(), in[4200];
    ck_assert_int_eq(tu_copy_model(quant, dir), 0);
    snprintf(in, sizeof in, "%s/model.safetensors", quant);
    tu_tensor *t;
    int count;
    ck_assert_int_eq(tu_load_tensors(in, &t, &count), 0);
    tu_tensor *x = tu_find(t, count, tensor);
    ck_assert_ptr_nonnull(x);
    x->nbytes = x->nbytes / (size_t)x->shape[dim] * (size_t)size;
    x->shape[dim] = size;
    snprintf(path, n, "%s/model.safetensors", dir);
    ck_assert_int_eq(tu_write_tensors(path, t, count), 0);
    tu_free_tensors(t, count);
    return dir;
}

static void expect_open_error(const char *dir, const char *n1, const char *n2, const char *n3)
{
    glm_error err = {0};
    glm_model *m = glm_model_open(dir, &err);
    ck_assert_msg(m == NULL, "opened a broken model in %s", dir);
    ck_assert_msg(strstr(err.message, n1) && strstr(err.message, n2) && strstr(err.message, n3),
                  "message lacks '%s', '%s' or '%s': %s", n1, n2, n3, err.message);
}

START_TEST(bad_exl3_tensors_are_named)
{
    char path[4200];
    /* trellis with half the output tiles: 64 outputs, not a multiple of 128 */
    char *dir = broken_copy(GATE1 ".trellis", 1, 4, path, sizeof path);
    expect_open_error(dir, path, GATE1 ".trellis", "128 x 64");
    tu_rmtree(dir);
    free(dir);
    /* suh shorter than the inputs */
    dir = broken_copy(GATE1 ".suh", 0, 64, path, sizeof path);
    expect_open_error(dir, path, GATE1 ".suh", "[128]");
    /* dump-tensor names them too */
    ck_assert_int_eq(run(cmd_dump_tensor, "dump-tensor", "--model", dir, "--name",
                         GATE1 ".weight", "--out", "/dev/null", NULL, NULL), CLI_EXIT_RUNTIME);
    tu_rmtree(dir);
    free(dir);
    /* a file cut short: the loader names the file */
    dir = tu_tmpdir();
    ck_assert_int_eq(tu_copy_model(quant, dir), 0);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    FILE *f = fopen(path, "rb");
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(fseek(f, 0, SEEK_END), 0);
    long size = ftell(f);
    fclose(f);
    ck_assert_int_eq(truncate(path, size - 1000), 0);
    expect_open_error(dir, path, "", "");
    tu_rmtree(dir);
    free(dir);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("exl3_engine");
    TCase *tc = tcase_create("engine");
    tcase_set_timeout(tc, 120);
    tcase_add_unchecked_fixture(tc, setup_models, teardown_models);
    tcase_add_test(tc, model_binds_experts_as_exl3);
    tcase_add_test(tc, logits_match_dequantized_reference);
    tcase_add_test(tc, dump_tensor_writes_dequantized_weight);
    tcase_add_test(tc, bad_exl3_tensors_are_named);
    suite_add_tcase(s, tc);
    return test_run_suite(s);
}
