/* test_checkpoints.c: the published GLM-5.3-Flash checkpoint layouts (EXL3 4-bit and official FP8)
 * rebuilt from test models: they open, give the logits of the layouts glmchat already ran, and
 * their faults are refused naming the file, key and value. */
#include <check.h>
#include <cjson/cJSON.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "app/cli.h"
#include "app/commands.h"
#include "model/model.h"
#include "model/safetensors.h"
#include "session.h"
#include "test_engine_util.h"
#include "tests/common/check_main.h"

#define TOLERANCE 1e-3f
#define P "model.language_model."

/* ---- tensors in memory ----------------------------------------------------------------------- */

typedef struct tlist {
    tu_tensor *t;
    int n, cap;
} tlist;

static tu_tensor *push(tlist *l, const char *name, st_dtype dtype, int ndim, const int64_t *shape)
{
    if (l->n == l->cap) {
        l->cap = l->cap ? l->cap * 2 : 256;
        l->t = realloc(l->t, (size_t)l->cap * sizeof *l->t);
        ck_assert_ptr_nonnull(l->t);
    }
    tu_tensor *t = &l->t[l->n++];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->dtype = dtype;
    t->ndim = ndim;
    size_t n = 1;
    for (int i = 0; i < ndim; i++)
        n *= (size_t)(t->shape[i] = shape[i]);
    t->nbytes = n * st_dtype_size(dtype);
    t->data = calloc(1, t->nbytes ? t->nbytes : 1);
    ck_assert_ptr_nonnull(t->data);
    return t;
}

/* Every tensor of a model directory (one file or shards), copied. */
static tlist load_dir(const char *dir)
{
    glm_error err = {0};
    st_model *m = st_open_dir(dir, &err);
    ck_assert_msg(m != NULL, "%s", err.message);
    tlist l = {0};
    for (size_t i = 0; i < st_count(m); i++) {
        const st_tensor *s = st_at(m, i);
        tu_tensor *t = push(&l, s->name, s->dtype, s->ndim, s->shape);
        memcpy(t->data, s->data, s->nbytes);
    }
    st_close(m);
    return l;
}

static void drop(tlist *l, const char *name)
{
    for (int i = 0; i < l->n; i++)
        if (strcmp(l->t[i].name, name) == 0) {
            free(l->t[i].data);
            l->t[i] = l->t[--l->n];
            return;
        }
    ck_abort_msg("no tensor %s to drop", name);
}

static void free_list(tlist *l)
{
    tu_free_tensors(l->t, l->n);
    memset(l, 0, sizeof *l);
}

static int ends_with(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

/* model.visual.*: BF16 tensors the text engine skips, a 5-D patch embedding among them (those
 * the model already has, as tiny-A has its vision tower, are kept as they are). */
static void add_vision(tlist *l)
{
    static const struct {
        const char *name;
        int ndim;
        int64_t shape[5];
    } v[] = {
        {"model.visual.patch_embed.proj.weight", 5, {32, 3, 2, 14, 14}},
        {"model.visual.patch_embed.proj.bias", 1, {32}},
        {"model.visual.blocks.0.attn.qkv.weight", 2, {96, 32}},
        {"model.visual.blocks.0.norm1.weight", 1, {32}},
        {"model.visual.merger.proj.weight", 2, {64, 128}},
    };
    for (size_t i = 0; i < sizeof v / sizeof *v; i++) {
        if (tu_find(l->t, l->n, v[i].name))
            continue;
        tu_tensor *t = push(l, v[i].name, ST_BF16, v[i].ndim, v[i].shape);
        uint16_t *h = t->data;
        for (size_t k = 0; k < t->nbytes / 2; k++)
            h[k] = st_f32_to_bf16((float)((k * 37) % 11) * 0.01f);
    }
}

/* ---- config.json ----------------------------------------------------------------------------- */

static cJSON *read_json(const char *path)
{
    FILE *f = fopen(path, "rb");
    ck_assert_ptr_nonnull(f);
    static char buf[1 << 20];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    cJSON *j = cJSON_Parse(buf);
    ck_assert_ptr_nonnull(j);
    return j;
}

static void write_json(const char *path, cJSON *j)
{
    char *text = cJSON_Print(j);
    FILE *f = fopen(path, "wb");
    ck_assert(text && f);
    fputs(text, f);
    ck_assert_int_eq(fclose(f), 0);
    free(text);
}

static cJSON *exl3_published_quant(void)
{
    return cJSON_Parse("{\"quant_method\":\"exl3\",\"bits\":4,\"codebook\":\"mcg\",\"head_bits\":16,"
                       "\"scope\":\"glm53_routed_experts_only\"}");
}

static cJSON *fp8_official_quant(void)
{
    return cJSON_Parse("{\"quant_method\":\"fp8\",\"activation_scheme\":\"dynamic\","
                       "\"weight_block_size\":[128,128]}");
}

/* SRC's config.json rewritten the published way into DIR: the flat linear_* keys become
 * linear_attn_config (layer lists numbered from 1), the published keys are added, index_kpool
 * and n_routed_experts are left for the tensors to give, quantization_config is quant. */
static void published_config(const char *src, const char *dir, cJSON *quant)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/config.json", src);
    cJSON *root = read_json(path);
    cJSON *t = cJSON_GetObjectItem(root, "text_config");
    ck_assert_ptr_nonnull(t);
    cJSON *la = cJSON_CreateObject(), *kda = cJSON_CreateArray(), *full = cJSON_CreateArray();
    cJSON *lt = cJSON_GetObjectItem(t, "layer_types");
    int i = 1, first_sparse = 0;
    for (cJSON *e = lt->child; e; e = e->next, i++)
        cJSON_AddItemToArray(strcmp(e->valuestring, "linear_attention") == 0 ? kda : full,
                             cJSON_CreateNumber(i));
    for (cJSON *e = cJSON_GetObjectItem(t, "mlp_layer_types")->child;
         e && strcmp(e->valuestring, "dense") == 0; e = e->next)
        first_sparse++;
    static const struct {
        const char *flat, *nested;
    } keys[] = {{"linear_num_heads", "num_heads"},
                {"linear_head_dim", "head_dim"},
                {"linear_conv_kernel_dim", "short_conv_kernel_size"},
                {"linear_lower_bound", "gate_lower_bound"}};
    for (size_t k = 0; k < 4; k++) {
        cJSON *v = cJSON_DetachItemFromObject(t, keys[k].flat);
        ck_assert_ptr_nonnull(v);
        cJSON_AddItemToObject(la, keys[k].nested, v);
    }
    cJSON_AddItemToObject(la, "kda_layers", kda);
    cJSON_AddItemToObject(la, "full_attn_layers", full);
    cJSON_AddItemToObject(t, "linear_attn_config", la);
    cJSON_AddNumberToObject(t, "first_k_dense_replace", first_sparse);
    cJSON_AddBoolToObject(t, "mhc", 1);
    cJSON_AddStringToObject(t, "moe_router_dtype", "float32");
    cJSON_DeleteItemFromObject(t, "index_kpool");
    cJSON_DeleteItemFromObject(t, "n_routed_experts");
    cJSON_DeleteItemFromObject(root, "quantization_config");
    if (quant)
        cJSON_AddItemToObject(root, "quantization_config", quant);
    snprintf(path, sizeof path, "%s/config.json", dir);
    write_json(path, root);
    cJSON_Delete(root);
    char a[PATH_MAX], b[PATH_MAX];
    snprintf(a, sizeof a, "%s/generation_config.json", src);
    snprintf(b, sizeof b, "%s/generation_config.json", dir);
    ck_assert_int_eq(tu_copy_file(a, b), 0);
}

/* Sets one key of DIR/config.json (a dotted path from the top; NULL value deletes it). */
static void set_config(const char *dir, const char *obj, const char *key, cJSON *value)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/config.json", dir);
    cJSON *root = read_json(path), *o = obj ? cJSON_GetObjectItem(root, obj) : root;
    ck_assert_ptr_nonnull(o);
    cJSON_DeleteItemFromObject(o, key);
    if (value)
        cJSON_AddItemToObject(o, key, value);
    write_json(path, root);
    cJSON_Delete(root);
}

/* ---- running ------------------------------------------------------------------------------- */

static float *logits_of(const char *dir, const int32_t *ids, int n, int *vocab)
{
    glm_error err = {0};
    glm_engine_params p = {.model_dir = dir, .backend = GLM_BACKEND_CPU, .n_threads = 2};
    glm_engine *e = glm_engine_open(&p, &err);
    ck_assert_msg(e != NULL, "%s: %s", dir, err.message);
    glm_session *s = glm_session_new(e, &err);
    ck_assert_msg(s != NULL, "%s", err.message);
    int V = glm_session_vocab(s);
    float *l = malloc((size_t)n * V * sizeof *l);
    ck_assert_ptr_nonnull(l);
    ck_assert_msg(glm_session_feed(s, ids, n, l, &err) == GLM_OK, "%s", err.message);
    glm_session_free(s);
    glm_engine_close(e);
    *vocab = V;
    return l;
}

/* The open is refused, and the message holds every needle. */
static void refused(const char *dir, const char *const *needles)
{
    glm_error err = {0};
    glm_model *m = glm_model_open(dir, &err);
    ck_assert_msg(m == NULL, "%s opened, but should have been refused", dir);
    for (const char *const *n = needles; *n; n++)
        ck_assert_msg(strstr(err.message, *n), "message lacks '%s': %s", *n, err.message);
    printf("refused as expected: %s\n", err.message);
}

static void same_logits(const char *a, const char *b, const int32_t *ids, int n)
{
    int va, vb;
    float *la = logits_of(a, ids, n, &va), *lb = logits_of(b, ids, n, &vb);
    ck_assert_int_eq(va, vb);
    ck_assert_msg(memcmp(la, lb, (size_t)n * va * sizeof *la) == 0,
                  "%s and %s differ: max |diff| %.3g", a, b,
                  (double)tu_max_abs_diff(la, lb, (size_t)n * va));
    free(la);
    free(lb);
}

static const int32_t some_ids[] = {5, 17, 200, 3, 3, 9, 101, 44, 250, 7, 64, 1};
#define N_IDS (int)(sizeof some_ids / sizeof *some_ids)

/* ---- (a) the EXL3-published structure ---------------------------------------------------------- */

typedef int (*cmd_fn)(int, char **, const cli_globals *);

static void run_cmd(cmd_fn fn, const char *const *args)
{
    char *argv[16];
    int argc = 0;
    for (; args[argc]; argc++)
        argv[argc] = (char *)args[argc];
    argv[argc] = NULL;
    cli_globals g = {0};
    ck_assert_int_eq(fn(argc, argv, &g), 0);
}

static char *scratch, quant2[PATH_MAX], quant3[PATH_MAX], mixed[PATH_MAX];

/* tiny-exl3 quantized at 2 and at 3 bits; MIXED takes layer 1's expert 0 from the 3-bit one
 * and the rest from the 2-bit one: the layout glmchat already accepts (one file, [] markers). */
static void setup_quantized(void)
{
    scratch = tu_tmpdir();
    char src[PATH_MAX];
    snprintf(src, sizeof src, "%s/src", scratch);
    snprintf(quant2, sizeof quant2, "%s/q2", scratch);
    snprintf(quant3, sizeof quant3, "%s/q3", scratch);
    snprintf(mixed, sizeof mixed, "%s/mixed", scratch);
    run_cmd(cmd_mkmodel, (const char *[]){"mkmodel", "--out", src, "--preset", "tiny-exl3",
                                          "--seed", "5", NULL});
    run_cmd(cmd_quantize, (const char *[]){"quantize", "--in", src, "--out", quant2, "--bits", "2",
                                           "--threads", "2", NULL});
    run_cmd(cmd_quantize, (const char *[]){"quantize", "--in", src, "--out", quant3, "--bits", "3",
                                           "--threads", "2", NULL});
    tlist a = load_dir(quant2), b = load_dir(quant3);
    int swapped = 0;
    for (int i = 0; i < a.n; i++) {
        if (!strstr(a.t[i].name, P "layers.1.mlp.experts.0."))
            continue;
        tu_tensor *o = tu_find(b.t, b.n, a.t[i].name);
        ck_assert_ptr_nonnull(o);
        free(a.t[i].data);
        a.t[i] = *o;
        o->data = NULL;
        swapped++;
    }
    ck_assert_int_eq(swapped, 12); /* gate, up, down x trellis, suh, svh, mcg */
    char path[PATH_MAX + 32];
    ck_assert_int_eq(mkdir(mixed, 0755), 0);
    snprintf(path, sizeof path, "%s/model.safetensors", mixed);
    ck_assert_int_eq(tu_write_tensors(path, a.t, a.n), 0);
    static const char *files[] = {"config.json", "generation_config.json", "tokenizer.json"};
    for (int i = 0; i < 3; i++) {
        char x[PATH_MAX + 32], y[PATH_MAX + 32];
        snprintf(x, sizeof x, "%s/%s", quant2, files[i]);
        snprintf(y, sizeof y, "%s/%s", mixed, files[i]);
        ck_assert_int_eq(tu_copy_file(x, y), 0);
    }
    free_list(&a);
    free_list(&b);
}

static void teardown_quantized(void)
{
    tu_rmtree(scratch);
    free(scratch);
}

/* MIXED in the published structure: [1] markers, vision tensors, 4 shards with an index, the
 * nested published config with head_bits 16 and scope. with_markers 0 drops the markers. */
static void write_published_exl3(const char *dir, int with_markers, int64_t marker_len)
{
    tlist l = load_dir(mixed);
    for (int i = 0; i < l.n; i++) {
        if (!ends_with(l.t[i].name, ".mcg"))
            continue;
        if (!with_markers) {
            drop(&l, l.t[i].name);
            i--;
            continue;
        }
        tu_tensor *t = &l.t[i];
        uint32_t v;
        memcpy(&v, t->data, 4);
        free(t->data);
        t->ndim = 1;
        t->shape[0] = marker_len;
        t->nbytes = (size_t)marker_len * 4;
        t->data = malloc(t->nbytes);
        for (int64_t k = 0; k < marker_len; k++)
            memcpy((char *)t->data + 4 * k, &v, 4);
    }
    add_vision(&l);
    ck_assert_int_eq(tu_write_sharded(dir, l.t, l.n, 4), 0);
    free_list(&l);
    published_config(mixed, dir, exl3_published_quant());
}

START_TEST(exl3_published_structure_gives_the_same_logits_bit_for_bit)
{
    char *dir = tu_tmpdir();
    write_published_exl3(dir, 1, 1);
    glm_error err = {0};
    glm_model *m = glm_model_open(dir, &err);
    ck_assert_msg(m != NULL, "%s", err.message);
    ck_assert_int_eq(m->cfg.exl3_head_bits, 16);
    ck_assert_int_eq(m->cfg.n_routed_experts, 2); /* from the tensors, not the default 288 */
    ck_assert_int_eq(m->w.layers[1].experts[0].gate.exl3->bits, 3); /* mixed widths */
    ck_assert_int_eq(m->w.layers[1].experts[1].gate.exl3->bits, 2);
    ck_assert_int_eq(m->w.layers[1].experts[0].gate.exl3->codebook, EXL3_CB_MCG);
    glm_model_close(m);
    same_logits(dir, mixed, some_ids, N_IDS);
    tu_rmtree(dir);
    free(dir);
}
END_TEST

START_TEST(exl3_without_markers_uses_the_config_codebook_or_is_refused)
{
    char *dir = tu_tmpdir();
    write_published_exl3(dir, 0, 0);
    same_logits(dir, mixed, some_ids, N_IDS); /* "codebook": "mcg" decodes them */
    set_config(dir, "quantization_config", "codebook", NULL);
    refused(dir, (const char *[]){"model.language_model.layers.1.mlp.experts.0.gate_proj",
                                  "model-0000", "no codebook marker", "codebook", NULL});
    tu_rmtree(dir);
    free(dir);
}
END_TEST

START_TEST(exl3_marker_of_another_shape_is_refused)
{
    char *dir = tu_tmpdir();
    write_published_exl3(dir, 1, 2);
    refused(dir, (const char *[]){".mcg", "model-0000", "I32 [2]", "[] or [1]", NULL});
    tu_rmtree(dir);
    free(dir);
}
END_TEST

START_TEST(head_bits_9_is_refused_naming_file_key_value)
{
    char *dir = tu_tmpdir();
    write_published_exl3(dir, 1, 1);
    set_config(dir, "quantization_config", "head_bits", cJSON_CreateNumber(9));
    refused(dir, (const char *[]){"config.json", "quantization_config.head_bits", "is 9", NULL});
    tu_rmtree(dir);
    free(dir);
}
END_TEST

/* tiny-A (experts 32 wide: too narrow for EXL3, so they stay F32) in the published structure:
 * the reference logits, and bit for bit those of the fixture as it is. */
START_TEST(tiny_a_in_the_published_structure_matches_the_reference)
{
    const char *src = tu_fixture("tiny-A");
    char *dir = tu_tmpdir(), path[PATH_MAX];
    snprintf(path, sizeof path, "%s/model.safetensors", src);
    tlist l = {0};
    ck_assert_int_eq(tu_load_tensors(path, &l.t, &l.n), 0);
    l.cap = l.n;
    add_vision(&l);
    ck_assert_int_eq(tu_write_sharded(dir, l.t, l.n, 3), 0);
    free_list(&l);
    published_config(src, dir, exl3_published_quant());
    glm_error err = {0};
    glm_model *m = glm_model_open(dir, &err);
    ck_assert_msg(m != NULL, "%s", err.message);
    ck_assert_int_eq(m->cfg.index_kpool, 4);      /* from the indexer, not HF's default 16 */
    ck_assert_int_eq(m->cfg.n_routed_experts, 8); /* from the tensors, not the default 288 */
    glm_model_close(m);
    tu_reference r;
    tu_load_reference(src, &r);
    int V;
    float *got = logits_of(dir, r.ids, r.n, &V);
    ck_assert_int_eq(V, r.vocab);
    float d = tu_max_abs_diff(got, r.full, (size_t)r.n * V);
    printf("tiny-A, published structure: max |diff| to transformers %.2e\n", (double)d);
    ck_assert_float_le(d, TOLERANCE);
    free(got);
    same_logits(dir, src, r.ids, r.n);
    tu_free_reference(&r);
    tu_rmtree(dir);
    free(dir);
}
END_TEST

/* ---- (b) the official FP8 structure ------------------------------------------------------------ */

/* The weights the release stores as FP8: every MLP projection, the DSA q_a/q_b/kv_a/o. */
static int fp8_weight(const tu_tensor *t)
{
    if (t->ndim != 2 || t->dtype != ST_F32 || strncmp(t->name, "model.visual.", 13) == 0)
        return 0;
    if (strstr(t->name, ".mlp.") && ends_with(t->name, "_proj.weight"))
        return 1;
    int dsa = strstr(t->name, "layers.3.") || strstr(t->name, "layers.7.");
    return dsa && (strstr(t->name, "q_a_proj.weight") || strstr(t->name, "q_b_proj.weight") ||
                   strstr(t->name, "kv_a_proj_with_mqa.weight") ||
                   strstr(t->name, "self_attn.o_proj.weight"));
}

/* FP8: the tiny-A weights as F8_E4M3 with F32 128x128 block scales (shards, published config,
 * vision tensors); EXACT: the same model with those weights dequantized, as F32, one file. */
static int write_fp8(const char *src, const char *fp8, const char *exact)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/model.safetensors", src);
    tlist q = {0}, e = {0};
    ck_assert_int_eq(tu_load_tensors(path, &q.t, &q.n), 0);
    ck_assert_int_eq(tu_load_tensors(path, &e.t, &e.n), 0);
    q.cap = q.n;
    int converted = 0, n0 = q.n;
    for (int i = 0; i < n0; i++) {
        tu_tensor *x = &q.t[i];
        if (!fp8_weight(x))
            continue;
        int64_t R = x->shape[0], C = x->shape[1], SR = (R + 127) / 128, SC = (C + 127) / 128;
        int64_t ss[2] = {SR, SC};
        char sname[300];
        snprintf(sname, sizeof sname, "%s_scale_inv", x->name);
        tu_tensor *s = push(&q, sname, ST_F32, 2, ss);
        x = &q.t[i]; /* push may move the array */
        float *scale = s->data, *f = x->data, *ef = tu_find(e.t, e.n, x->name)->data;
        for (int64_t r = 0; r < R; r++)
            for (int64_t c = 0; c < C; c++) {
                float *b = &scale[(r / 128) * SC + c / 128];
                *b = fmaxf(*b, fabsf(f[r * C + c]) / 448.0f);
            }
        uint8_t *b8 = malloc((size_t)(R * C));
        for (int64_t k = 0; k < R * C; k++) {
            float sc = scale[(k / C / 128) * SC + (k % C) / 128];
            b8[k] = st_f32_to_e4m3(sc > 0 ? f[k] / sc : 0);
            ef[k] = st_e4m3_to_f32(b8[k]) * sc;
        }
        free(x->data);
        x->data = b8;
        x->dtype = ST_F8_E4M3;
        x->nbytes = (size_t)(R * C);
        converted++;
    }
    add_vision(&q);
    ck_assert_int_eq(tu_write_sharded(fp8, q.t, q.n, 3), 0);
    published_config(src, fp8, fp8_official_quant());
    ck_assert_int_eq(tu_copy_model(src, exact), 0);
    snprintf(path, sizeof path, "%s/model.safetensors", exact);
    ck_assert_int_eq(tu_write_tensors(path, e.t, e.n), 0);
    free_list(&q);
    free_list(&e);
    return converted;
}

static double correlation(const float *a, const float *b, size_t n)
{
    double ma = 0, mb = 0, ab = 0, aa = 0, bb = 0;
    for (size_t i = 0; i < n; i++)
        ma += a[i], mb += b[i];
    ma /= (double)n;
    mb /= (double)n;
    for (size_t i = 0; i < n; i++) {
        ab += (a[i] - ma) * (b[i] - mb);
        aa += (a[i] - ma) * (a[i] - ma);
        bb += (b[i] - mb) * (b[i] - mb);
    }
    return ab / sqrt(aa * bb);
}

START_TEST(fp8_official_structure_runs_its_dequantized_values)
{
    const char *src = tu_fixture("tiny-A");
    char *fp8 = tu_tmpdir(), *exact = tu_tmpdir();
    /* 7 MoE layers x (8 experts + shared) x 3 + the dense MLP's 3 + 2 DSA layers x 4 */
    ck_assert_int_eq(write_fp8(src, fp8, exact), 7 * 9 * 3 + 3 + 2 * 4);
    tu_reference r;
    tu_load_reference(src, &r);
    int V;
    float *got = logits_of(fp8, r.ids, r.n, &V);
    float d = tu_max_abs_diff(got, r.full, (size_t)r.n * V), peak = 0;
    for (size_t i = 0; i < (size_t)r.n * V; i++)
        peak = fmaxf(peak, fabsf(r.full[i]));
    double corr = correlation(got, r.full, (size_t)r.n * V);
    printf("tiny-A as FP8 blocks: max |diff| to transformers %.3g (logits up to %.3g), "
           "correlation %.4f\n", (double)d, (double)peak, corr);
    /* e4m3 keeps 4 significant bits (each weight within 1/16 of itself). The random tiny model
     * turns rounding into logit differences as large as the logits through flipped expert and
     * key choices: the same weights rounded to BF16 (1/256) already differ by up to 3.3 and
     * correlate 0.96; FP8 gives 0.77. What rounding leaves is the logits' shape (scales taken
     * wrongly leave next to none); the exact check is the bit-for-bit one below */
    ck_assert_msg(corr >= 0.7, "FP8 logits correlate %.4f with the reference", corr);
    free(got);
    same_logits(fp8, exact, r.ids, r.n);
    tu_free_reference(&r);
    tu_rmtree(fp8);
    tu_rmtree(exact);
    free(fp8);
    free(exact);
}
END_TEST

/* Rewrites one shard-held tensor of DIR in place through fn (all shards are reloaded). */
static void edit_tensors(const char *dir, void (*fn)(tlist *l))
{
    tlist l = load_dir(dir);
    fn(&l);
    ck_assert_int_eq(tu_write_sharded(dir, l.t, l.n, 3), 0);
    free_list(&l);
}

#define FP8_VICTIM P "layers.3.self_attn.q_b_proj.weight"

static void drop_scale(tlist *l)
{
    drop(l, FP8_VICTIM "_scale_inv");
}

static void poison_nan(tlist *l)
{
    tu_tensor *t = tu_find(l->t, l->n, FP8_VICTIM);
    ck_assert_ptr_nonnull(t);
    ((uint8_t *)t->data)[70] = 0xff; /* S.1111.111: e4m3fn's NaN */
}

START_TEST(fp8_faults_are_refused_naming_the_tensor)
{
    const char *src = tu_fixture("tiny-A");
    char *fp8 = tu_tmpdir(), *exact = tu_tmpdir();
    write_fp8(src, fp8, exact);
    edit_tensors(fp8, poison_nan);
    refused(fp8, (const char *[]){FP8_VICTIM, "model-0000", "NaN", "0xff", NULL});
    edit_tensors(fp8, drop_scale);
    refused(fp8, (const char *[]){FP8_VICTIM, FP8_VICTIM "_scale_inv", "model-0000", NULL});
    tu_rmtree(fp8);
    tu_rmtree(exact);
    free(fp8);
    free(exact);
}
END_TEST

/* ---- config against tensors ------------------------------------------------------------------ */

/* tiny-A with 16 routed experts in layer 1 (the 8 copied) against its config's 8. */
START_TEST(expert_count_contradicting_the_config_is_refused)
{
    const char *src = tu_fixture("tiny-A");
    char *dir = tu_tmpdir(), path[PATH_MAX];
    snprintf(path, sizeof path, "%s/model.safetensors", src);
    tlist l = {0};
    ck_assert_int_eq(tu_load_tensors(path, &l.t, &l.n), 0);
    l.cap = l.n;
    static const char *proj[] = {"gate_proj", "up_proj", "down_proj"};
    for (int e = 8; e < 16; e++)
        for (int k = 0; k < 3; k++) {
            char from[256], to[256];
            snprintf(from, sizeof from, P "layers.1.mlp.experts.%d.%s.weight", e - 8, proj[k]);
            snprintf(to, sizeof to, P "layers.1.mlp.experts.%d.%s.weight", e, proj[k]);
            tu_tensor *f = tu_find(l.t, l.n, from);
            ck_assert_ptr_nonnull(f);
            int64_t shape[2] = {f->shape[0], f->shape[1]};
            tu_tensor *t = push(&l, to, ST_F32, 2, shape);
            memcpy(t->data, tu_find(l.t, l.n, from)->data, t->nbytes);
        }
    ck_assert_int_eq(tu_copy_model(src, dir), 0);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    ck_assert_int_eq(tu_write_tensors(path, l.t, l.n), 0);
    free_list(&l);
    refused(dir, (const char *[]){"config.json", "n_routed_experts", "is 8", "16",
                                  "model.safetensors", NULL});
    tu_rmtree(dir);
    free(dir);
}
END_TEST

START_TEST(index_kpool_contradicting_the_indexer_is_refused)
{
    const char *src = tu_fixture("tiny-A");
    char *dir = tu_tmpdir();
    ck_assert_int_eq(tu_copy_model(src, dir), 0);
    ck_assert_int_eq(tu_edit_config(dir, "\"index_kpool\": 4", "\"index_kpool\": 8"), 0);
    ck_assert_int_eq(tu_edit_config(dir, "\"index_topk\": 16", "\"index_topk\": 32"), 0);
    refused(dir, (const char *[]){"config.json", "index_kpool", "is 8", "[4, 16]", NULL});
    tu_rmtree(dir);
    free(dir);
}
END_TEST

START_TEST(eos_ids_are_the_union_of_the_three_places)
{
    const char *src = tu_fixture("tiny-A");
    char *dir = tu_tmpdir();
    ck_assert_int_eq(tu_copy_model(src, dir), 0);
    cJSON *a = cJSON_CreateArray();
    cJSON_AddItemToArray(a, cJSON_CreateNumber(1));
    cJSON_AddItemToArray(a, cJSON_CreateNumber(2));
    set_config(dir, "text_config", "eos_token_id", a);
    set_config(dir, NULL, "eos_token_id", cJSON_CreateNumber(3));
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/generation_config.json", dir);
    cJSON *g = read_json(path);
    cJSON_DeleteItemFromObject(g, "eos_token_id");
    cJSON *ge = cJSON_CreateArray();
    cJSON_AddItemToArray(ge, cJSON_CreateNumber(2));
    cJSON_AddItemToArray(ge, cJSON_CreateNumber(4));
    cJSON_AddItemToObject(g, "eos_token_id", ge);
    write_json(path, g);
    cJSON_Delete(g);
    glm_error err = {0};
    glm_model *m = glm_model_open(dir, &err);
    ck_assert_msg(m != NULL, "%s", err.message);
    int want[] = {1, 2, 3, 4};
    ck_assert_int_eq(m->cfg.n_eos, 4);
    ck_assert_int_eq(m->gen.n_eos, 4);
    for (int i = 0; i < 4; i++) {
        ck_assert_int_eq(m->cfg.eos[i], want[i]);
        ck_assert_int_eq(m->gen.eos[i], want[i]);
    }
    glm_model_close(m);
    tu_rmtree(dir);
    free(dir);
}
END_TEST

/* The list check-model will use is what the binder reads: every name of tiny-A (and nothing
 * else) appears, with its shape; the MTP layer is listed on request. */
START_TEST(required_tensors_are_what_the_binder_reads)
{
    const char *src = tu_fixture("tiny-A");
    glm_error err = {0};
    glm_model *m = glm_model_open(src, &err);
    ck_assert_msg(m != NULL, "%s", err.message);
    glm_required_tensor *req;
    size_t n;
    ck_assert_int_eq(model_required_tensors(&m->cfg, NULL, 0, &req, &n, &err), GLM_OK);
    size_t text = 0;
    for (size_t i = 0; i < st_count(m->st); i++)
        text += strncmp(st_at(m->st, i)->name, "model.visual.", 13) != 0;
    ck_assert_uint_eq(n, text);
    for (size_t i = 0; i < n; i++) {
        const st_tensor *t = st_find(m->st, req[i].name);
        ck_assert_msg(t != NULL, "listed %s is not in tiny-A", req[i].name);
        ck_assert_int_eq(t->ndim, req[i].ndim);
        for (int d = 0; d < t->ndim; d++)
            ck_assert_int_eq(t->shape[d], req[i].shape[d]);
        ck_assert_ptr_nonnull(req[i].dtypes);
    }
    free(req);
    ck_assert_int_eq(model_required_tensors(&m->cfg, NULL, 1, &req, &n, &err), GLM_OK);
    int mtp = 0;
    for (size_t i = 0; i < n; i++)
        mtp += req[i].layer == m->cfg.num_layers;
    ck_assert_int_gt(mtp, 0);
    ck_assert(strcmp(req[n - 1].name, P "layers.8.mlp.experts.7.down_proj.weight") == 0);
    free(req);
    glm_model_close(m);
}
END_TEST

/* mkmodel --like writes what the loader reads: it opens and generates a token. */
static void like_opens_and_generates(const char *like)
{
    char *dir = tu_tmpdir(), out[PATH_MAX];
    snprintf(out, sizeof out, "%s/m", dir);
    run_cmd(cmd_mkmodel, (const char *[]){"mkmodel", "--out", out, "--preset", "tiny", "--like",
                                          like, NULL});
    glm_error err = {0};
    glm_model *m = glm_model_open(out, &err);
    ck_assert_msg(m != NULL, "%s", err.message);
    ck_assert(m->w.has_mtp);
    ck_assert_int_eq(m->cfg.n_eos, 3);
    glm_model_close(m);
    glm_engine_params p = {.model_dir = out, .backend = GLM_BACKEND_CPU, .n_threads = 2};
    glm_engine *e = glm_engine_open(&p, &err);
    ck_assert_msg(e != NULL, "%s", err.message);
    glm_session *s = glm_session_new(e, &err);
    ck_assert_ptr_nonnull(s);
    tu_tokens got = {0};
    glm_sampling greedy = {.temperature = 0};
    int32_t prompt[3] = {100, 200, 300};
    int n_out = 0;
    ck_assert_int_eq(glm_session_generate_tokens(s, prompt, 3, &greedy, NULL, 0, 1, tu_keep_token,
                                                 &got, &n_out, &err),
                     GLM_OK);
    ck_assert_int_eq(got.n, 1);
    glm_session_free(s);
    glm_engine_close(e);
    tu_rmtree(dir);
    free(dir);
}

START_TEST(mkmodel_like_exl3_published_opens_and_generates)
{
    like_opens_and_generates("exl3-published");
}
END_TEST

START_TEST(mkmodel_like_fp8_official_opens_and_generates)
{
    like_opens_and_generates("fp8-official");
}
END_TEST

int main(void)
{
    Suite *s = suite_create("checkpoints");
    TCase *q = tcase_create("exl3");
    tcase_set_timeout(q, 600);
    tcase_add_unchecked_fixture(q, setup_quantized, teardown_quantized);
    tcase_add_test(q, exl3_published_structure_gives_the_same_logits_bit_for_bit);
    tcase_add_test(q, exl3_without_markers_uses_the_config_codebook_or_is_refused);
    tcase_add_test(q, exl3_marker_of_another_shape_is_refused);
    tcase_add_test(q, head_bits_9_is_refused_naming_file_key_value);
    suite_add_tcase(s, q);
    TCase *t = tcase_create("layouts");
    tcase_set_timeout(t, 600);
    tcase_add_test(t, tiny_a_in_the_published_structure_matches_the_reference);
    tcase_add_test(t, fp8_official_structure_runs_its_dequantized_values);
    tcase_add_test(t, fp8_faults_are_refused_naming_the_tensor);
    tcase_add_test(t, expert_count_contradicting_the_config_is_refused);
    tcase_add_test(t, index_kpool_contradicting_the_indexer_is_refused);
    tcase_add_test(t, eos_ids_are_the_union_of_the_three_places);
    tcase_add_test(t, required_tensors_are_what_the_binder_reads);
    tcase_add_test(t, mkmodel_like_exl3_published_opens_and_generates);
    tcase_add_test(t, mkmodel_like_fp8_official_opens_and_generates);
    suite_add_tcase(s, t);
    return test_run_suite(s);
}
