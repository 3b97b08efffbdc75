/* test_engine.c: Check suite for the CPU engine against the reference fixtures: full passes,
 * prefill-then-decode, uneven pieces, prefix truncation, sharded, BF16 and FP8 checkpoints. */
#include <check.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/forward.h"
#include "engine_impl.h"
#include "model/safetensors.h"
#include "sampler.h"
#include "session.h"
#include "test_engine_util.h"
#include "tests/common/check_main.h"

static const char *const fixtures[] = {"tiny-A", "groups-kpool2", "shared-indexer-hc2",
                                       "dsa-first-hc3", "softplus-kpool1-hc1"};
#define N_FIXTURES (int)(sizeof fixtures / sizeof *fixtures)
#define TOLERANCE 1e-3f

typedef struct opened {
    glm_engine *e;
    glm_session *s;
} opened;

static opened open_threads(const char *dir, int threads)
{
    glm_error err = {0};
    glm_engine_params p = {.model_dir = dir, .backend = GLM_BACKEND_CPU, .n_threads = threads};
    opened o = {0};
    o.e = glm_engine_open(&p, &err);
    ck_assert_msg(o.e != NULL, "%s: %s", dir, err.message);
    o.s = glm_session_new(o.e, &err);
    ck_assert_msg(o.s != NULL, "%s", err.message);
    return o;
}

static opened open_model(const char *dir)
{
    return open_threads(dir, 2);
}

static void close_model(opened *o)
{
    glm_session_free(o->s);
    glm_engine_close(o->e);
}

/* Runs ids with a first piece of `first` tokens and the rest in pieces of `step`. */
static float *run_pieces(glm_session *s, const int32_t *ids, int n, int first, int step)
{
    int V = glm_session_vocab(s);
    float *logits = malloc((size_t)n * V * sizeof *logits);
    glm_error err = {0};
    glm_session_reset(s);
    ck_assert_int_eq(glm_session_feed(s, ids, first, logits, &err), GLM_OK);
    for (int t = first; t < n; t += step) {
        int m = n - t < step ? n - t : step;
        ck_assert_msg(glm_session_feed(s, ids + t, m, logits + (size_t)t * V, &err) == GLM_OK, "%s",
                      err.message);
    }
    ck_assert_int_eq(glm_session_length(s), n);
    return logits;
}

START_TEST(fixture_full_and_cached_match_reference)
{
    const char *name = fixtures[_i];
    const char *dir = tu_fixture(name);
    tu_reference r;
    tu_load_reference(dir, &r);
    opened o = open_model(dir);
    ck_assert_int_eq(glm_session_vocab(o.s), r.vocab);
    size_t nv = (size_t)r.n * r.vocab;
    float *full = run_pieces(o.s, r.ids, r.n, r.n, 1);
    float *cached = run_pieces(o.s, r.ids, r.n, r.prefill, 1);
    float d_full = tu_max_abs_diff(full, r.full, nv), d_cached = tu_max_abs_diff(cached, r.full, nv);
    float d_ref_cached = tu_max_abs_diff(cached, r.cached, nv);
    printf("fixture %-20s T %3d prefill %2d: full %.2e, prefill+decode %.2e (vs reference cached "
           "%.2e)\n", name, r.n, r.prefill, (double)d_full, (double)d_cached, (double)d_ref_cached);
    ck_assert_msg(d_full <= TOLERANCE, "%s full pass differs by %g", name, (double)d_full);
    ck_assert_msg(d_cached <= TOLERANCE, "%s prefill+decode differs by %g", name, (double)d_cached);
    free(full);
    free(cached);
    close_model(&o);
    tu_free_reference(&r);
}
END_TEST

START_TEST(uneven_pieces_match_one_pass)
{
    const char *dir = tu_fixture("dsa-first-hc3");
    tu_reference r;
    tu_load_reference(dir, &r);
    opened o = open_model(dir);
    float *a = run_pieces(o.s, r.ids, r.n, 7, 23); /* crosses KDA chunks and pools unaligned */
    float d = tu_max_abs_diff(a, r.full, (size_t)r.n * r.vocab);
    ck_assert_msg(d <= TOLERANCE, "pieces of 23 differ by %g", (double)d);
    free(a);
    close_model(&o);
    tu_free_reference(&r);
}
END_TEST

/* The backend's prefill calls as a session makes them; the real CPU prefill runs each. */
static struct {
    const backend_ops *real;
    int pos[256], n[256], all[256], calls;
} fed;

static glm_status counting_prefill(void *impl, void *st, const int32_t *tokens, int n, float *out,
                                   int all_rows, glm_error *err)
{
    if (fed.calls < 256) {
        fed.pos[fed.calls] = fed.real->state_length(st);
        fed.n[fed.calls] = n;
        fed.all[fed.calls] = all_rows;
    }
    fed.calls++;
    return fed.real->prefill(impl, st, tokens, n, out, all_rows, err);
}

static int chunk_of_16(const void *impl)
{
    (void)impl;
    return 16;
}

/* A backend that names its chunk (backend_ops.prefill_rows, as CUDA's plan) gets a prompt in whole
 * chunks aligned to its multiples, whatever the feed's start; a feed for every row's logits keeps
 * pieces of BACKEND_FEED_PIECE. The CPU backend runs them: the logits match the reference. */
START_TEST(pieces_follow_the_backends_chunk)
{
    const char *dir = tu_fixture("dsa-first-hc3");
    tu_reference r;
    tu_load_reference(dir, &r);
    ck_assert_int_gt(r.n, 40);
    opened o = open_model(dir);
    backend_ops ops = *o.e->be.ops;
    fed.real = o.e->be.ops;
    fed.calls = 0;
    ops.prefill = counting_prefill;
    ops.prefill_rows = chunk_of_16;
    o.e->be.ops = &ops;
    glm_error err = {0};
    ck_assert_int_eq(glm_session_feed(o.s, r.ids, 5, NULL, &err), GLM_OK); /* 0..5 */
    ck_assert_msg(glm_session_feed(o.s, r.ids + 5, r.n - 5, NULL, &err) == GLM_OK, "%s", err.message);
    /* 5, then 11 (to 16), then 16 at a time and the rest */
    ck_assert_int_eq(fed.calls, 2 + (r.n - 16 + 15) / 16);
    ck_assert(fed.pos[0] == 0 && fed.n[0] == 5 && fed.pos[1] == 5 && fed.n[1] == 11);
    for (int i = 1; i < fed.calls; i++) {
        ck_assert_int_eq(fed.pos[i], fed.pos[i - 1] + fed.n[i - 1]);
        ck_assert_int_le(fed.n[i], 16);
        if (i + 1 < fed.calls)
            ck_assert_int_eq((fed.pos[i] + fed.n[i]) % 16, 0);
    }
    const float *got = glm_session_logits(o.s), *ref = r.full + (size_t)(r.n - 1) * r.vocab;
    float d = tu_max_abs_diff(got, ref, (size_t)r.vocab);
    ck_assert_msg(d <= TOLERANCE, "the last row differs by %g", (double)d);
    /* every row's logits: pieces of BACKEND_FEED_PIECE (here one), not chunks */
    glm_session_reset(o.s);
    fed.calls = 0;
    float *all = malloc((size_t)r.n * r.vocab * sizeof *all);
    ck_assert_int_eq(glm_session_feed(o.s, r.ids, r.n, all, &err), GLM_OK);
    ck_assert_int_eq(fed.calls, (r.n + BACKEND_FEED_PIECE - 1) / BACKEND_FEED_PIECE);
    ck_assert(fed.n[0] == (r.n < BACKEND_FEED_PIECE ? r.n : BACKEND_FEED_PIECE) && fed.all[0]);
    d = tu_max_abs_diff(all, r.full, (size_t)r.n * r.vocab);
    ck_assert_msg(d <= TOLERANCE, "all rows differ by %g", (double)d);
    free(all);
    o.e->be.ops = fed.real;
    close_model(&o);
    tu_free_reference(&r);
}
END_TEST

START_TEST(truncate_to_mark_replays_exactly)
{
    const char *dir = tu_fixture("tiny-A");
    tu_reference r;
    tu_load_reference(dir, &r);
    opened o = open_model(dir);
    glm_error err = {0};
    int V = r.vocab, P = 40, K = 12;
    float *first = malloc((size_t)K * V * sizeof *first), *again = malloc((size_t)K * V * sizeof *again);
    ck_assert_int_eq(glm_session_feed(o.s, r.ids, P, NULL, &err), GLM_OK);
    ck_assert_int_eq(glm_session_mark(o.s, &err), GLM_OK);
    ck_assert_int_eq(glm_session_feed(o.s, r.ids + P, K, first, &err), GLM_OK);
    ck_assert_int_eq(glm_session_truncate(o.s, P, &err), GLM_OK);
    ck_assert_int_eq(glm_session_length(o.s), P);
    ck_assert_ptr_null(glm_session_logits(o.s));
    ck_assert_int_eq(glm_session_feed(o.s, r.ids + P, K, again, &err), GLM_OK);
    ck_assert_int_eq(memcmp(first, again, (size_t)K * V * sizeof *first), 0);
    /* a length that was never marked is refused, with a message */
    ck_assert_int_eq(glm_session_truncate(o.s, P + 3, &err), GLM_ERR_ARG);
    ck_assert_ptr_nonnull(strstr(err.message, "cannot go back to"));
    free(first);
    free(again);
    close_model(&o);
    tu_free_reference(&r);
}
END_TEST

START_TEST(sharded_checkpoint_gives_the_same_logits)
{
    const char *src = tu_fixture("shared-indexer-hc2");
    char *dir = tu_tmpdir(), path[PATH_MAX];
    tu_reference r;
    tu_load_reference(src, &r);
    tu_tensor *t;
    int n;
    snprintf(path, sizeof path, "%s/model.safetensors", src);
    ck_assert_int_eq(tu_load_tensors(path, &t, &n), 0);
    ck_assert_int_eq(tu_copy_model(src, dir), 0);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    ck_assert_int_eq(remove(path), 0);
    ck_assert_int_eq(tu_write_sharded(dir, t, n, 3), 0);
    opened o = open_model(dir);
    float *full = run_pieces(o.s, r.ids, r.n, r.n, 1);
    ck_assert_float_le(tu_max_abs_diff(full, r.full, (size_t)r.n * r.vocab), TOLERANCE);
    free(full);
    close_model(&o);
    tu_free_tensors(t, n);
    tu_free_reference(&r);
    tu_rmtree(dir);
    free(dir);
}
END_TEST

/* Rewrites every 2-D weight of a fixture: to BF16 (bf16 != 0) or to FP8 with 128x128 block
 * scales; the "exact" copy gets the same values dequantized to F32. */
static void requantize(const char *src, const char *dir, const char *exact_dir, int bf16)
{
    char path[PATH_MAX];
    tu_tensor *t, *e;
    int n, ne;
    snprintf(path, sizeof path, "%s/model.safetensors", src);
    ck_assert_int_eq(tu_load_tensors(path, &t, &n), 0);
    ck_assert_int_eq(tu_load_tensors(path, &e, &ne), 0);
    tu_tensor *all = calloc((size_t)(2 * n), sizeof *all);
    int m = 0;
    for (int i = 0; i < n; i++) {
        tu_tensor *x = &t[i];
        size_t count = x->nbytes / 4;
        float *f = x->data, *ef = e[i].data;
        int quant = x->ndim == 2 && x->dtype == ST_F32 && strstr(x->name, ".hc_") == NULL &&
                    strstr(x->name, "_ape") == NULL;
        if (!quant) {
            all[m++] = *x;
            continue;
        }
        if (bf16) {
            uint16_t *h = malloc(count * 2);
            for (size_t k = 0; k < count; k++) {
                h[k] = st_f32_to_bf16(f[k]);
                ef[k] = st_bf16_to_f32(h[k]);
            }
            free(x->data);
            x->data = h;
            x->nbytes = count * 2;
            x->dtype = ST_BF16;
            all[m++] = *x;
            continue;
        }
        int64_t R = x->shape[0], C = x->shape[1], SR = (R + 127) / 128, SC = (C + 127) / 128;
        float *scale = calloc((size_t)(SR * SC), sizeof *scale);
        for (int64_t i2 = 0; i2 < R; i2++)
            for (int64_t j = 0; j < C; j++) {
                float *s = &scale[(i2 / 128) * SC + j / 128];
                *s = fmaxf(*s, fabsf(f[i2 * C + j]) / 448.0f);
            }
        uint8_t *q = malloc((size_t)(R * C));
        for (int64_t i2 = 0; i2 < R; i2++)
            for (int64_t j = 0; j < C; j++) {
                float s = scale[(i2 / 128) * SC + j / 128];
                q[i2 * C + j] = st_f32_to_e4m3(s > 0 ? f[i2 * C + j] / s : 0);
                ef[i2 * C + j] = st_e4m3_to_f32(q[i2 * C + j]) * s;
            }
        free(x->data);
        x->data = q;
        x->nbytes = (size_t)(R * C);
        x->dtype = ST_F8_E4M3;
        all[m++] = *x;
        tu_tensor sc = {0};
        snprintf(sc.name, sizeof sc.name, "%.200s_scale_inv", x->name);
        sc.dtype = ST_F32;
        sc.ndim = 2;
        sc.shape[0] = SR;
        sc.shape[1] = SC;
        sc.data = scale;
        sc.nbytes = (size_t)(SR * SC) * 4;
        all[m++] = sc;
    }
    ck_assert_int_eq(tu_copy_model(src, dir), 0);
    ck_assert_int_eq(tu_copy_model(src, exact_dir), 0);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    ck_assert_int_eq(tu_write_tensors(path, all, m), 0);
    snprintf(path, sizeof path, "%s/model.safetensors", exact_dir);
    ck_assert_int_eq(tu_write_tensors(path, e, ne), 0);
    if (!bf16)
        ck_assert_int_eq(tu_edit_config(dir, "\"model_type\": \"glm5_next\",",
                                        "\"model_type\": \"glm5_next\", \"quantization_config\": "
                                        "{\"quant_method\": \"fp8\", \"activation_scheme\": "
                                        "\"dynamic\", \"weight_block_size\": [128, 128]},"),
                         0);
    for (int i = 0; i < m; i++)
        if (strstr(all[i].name, "_scale_inv"))
            free(all[i].data);
    free(all);
    tu_free_tensors(t, n);
    tu_free_tensors(e, ne);
}

static void check_requantized(int bf16)
{
    const char *src = tu_fixture("groups-kpool2");
    char *dir = tu_tmpdir(), *exact = tu_tmpdir();
    requantize(src, dir, exact, bf16);
    tu_reference r;
    tu_load_reference(src, &r);
    opened q = open_model(dir), x = open_model(exact);
    float *lq = run_pieces(q.s, r.ids, r.n, 30, 1), *lx = run_pieces(x.s, r.ids, r.n, 30, 1);
    float d = tu_max_abs_diff(lq, lx, (size_t)r.n * r.vocab);
    printf("%s weights vs their float32 values: max |diff| %.2e; vs the float32 model %.2e\n",
           bf16 ? "BF16" : "FP8 block", (double)d,
           (double)tu_max_abs_diff(lq, r.full, (size_t)r.n * r.vocab));
    ck_assert_float_le(d, 1e-4f);
    free(lq);
    free(lx);
    close_model(&q);
    close_model(&x);
    tu_free_reference(&r);
    tu_rmtree(dir);
    tu_rmtree(exact);
    free(dir);
    free(exact);
}

START_TEST(bf16_checkpoint_runs_its_values)
{
    check_requantized(1);
}
END_TEST

START_TEST(fp8_checkpoint_runs_its_dequantized_values)
{
    check_requantized(0);
}
END_TEST

typedef struct collected {
    int32_t tok[64];
    int n;
} collected;

static int collect(int32_t token, void *user)
{
    collected *c = user;
    c->tok[c->n++] = token;
    return 0;
}

START_TEST(greedy_generation_follows_argmax_and_seeds_repeat)
{
    const char *dir = tu_fixture("softplus-kpool1-hc1");
    tu_reference r;
    tu_load_reference(dir, &r);
    opened o = open_model(dir);
    glm_error err = {0};
    glm_sampling greedy = {.temperature = 0};
    collected g = {0};
    int n_out = 0;
    ck_assert_int_eq(glm_session_generate_tokens(o.s, r.ids, 20, &greedy, NULL, 0, 12, collect, &g,
                                                 &n_out, &err), GLM_OK);
    ck_assert_int_eq(n_out, 12);
    /* replay: each generated token is the argmax of the logits after the ones before it */
    glm_session_reset(o.s);
    ck_assert_int_eq(glm_session_feed(o.s, r.ids, 20, NULL, &err), GLM_OK);
    for (int i = 0; i < 12; i++) {
        const float *l = glm_session_logits(o.s);
        int best = 0;
        for (int v = 1; v < r.vocab; v++)
            if (l[v] > l[best])
                best = v;
        ck_assert_int_eq(best, g.tok[i]);
        ck_assert_int_eq(glm_session_feed(o.s, &g.tok[i], 1, NULL, &err), GLM_OK);
    }
    glm_sampling sampled = {.temperature = 1.0f, .top_p = 0.95f, .min_p = 0.01f, .seed = 42};
    collected a = {0}, b = {0}, c = {0};
    for (int k = 0; k < 3; k++) {
        glm_session_reset(o.s);
        if (k == 2)
            sampled.seed = 43;
        ck_assert_int_eq(glm_session_generate_tokens(o.s, r.ids, 20, &sampled, NULL, 0, 16, collect,
                                                     k == 0 ? &a : k == 1 ? &b : &c, &n_out, &err),
                         GLM_OK);
    }
    ck_assert_int_eq(memcmp(a.tok, b.tok, sizeof a.tok), 0);
    ck_assert_int_ne(memcmp(a.tok, c.tok, sizeof a.tok), 0);
    /* an eos id stops the reply right after it */
    glm_session_reset(o.s);
    collected e = {0};
    int eos = g.tok[3];
    ck_assert_int_eq(glm_session_generate_tokens(o.s, r.ids, 20, &greedy, &eos, 1, 12, collect, &e,
                                                 &n_out, &err), GLM_OK);
    ck_assert_int_le(n_out, 4);
    ck_assert_int_eq(e.tok[n_out - 1], eos);
    close_model(&o);
    tu_free_reference(&r);
}
END_TEST

START_TEST(thread_count_does_not_change_a_bit)
{
    const char *dir = tu_fixture("tiny-A");
    tu_reference r;
    tu_load_reference(dir, &r);
    opened one = open_threads(dir, 1), three = open_threads(dir, 3);
    float *a = run_pieces(one.s, r.ids, r.n, 50, 1), *b = run_pieces(three.s, r.ids, r.n, 50, 1);
    ck_assert_int_eq(memcmp(a, b, (size_t)r.n * r.vocab * sizeof *a), 0);
    free(a);
    free(b);
    close_model(&one);
    close_model(&three);
    tu_free_reference(&r);
}
END_TEST

START_TEST(bad_tokens_are_refused)
{
    opened o = open_model(tu_fixture("softplus-kpool1-hc1"));
    glm_error err = {0};
    int32_t bad[2] = {5, 100000};
    ck_assert_int_eq(glm_session_feed(o.s, bad, 2, NULL, &err), GLM_ERR_ARG);
    ck_assert_ptr_nonnull(strstr(err.message, "outside the vocabulary"));
    ck_assert_int_eq(glm_session_length(o.s), 0);
    close_model(&o);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("engine");
    TCase *tc = tcase_create("fixtures");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, fixture_full_and_cached_match_reference, 0, N_FIXTURES);
    tcase_add_test(tc, uneven_pieces_match_one_pass);
    tcase_add_test(tc, pieces_follow_the_backends_chunk);
    tcase_add_test(tc, truncate_to_mark_replays_exactly);
    tcase_add_test(tc, sharded_checkpoint_gives_the_same_logits);
    tcase_add_test(tc, bf16_checkpoint_runs_its_values);
    tcase_add_test(tc, fp8_checkpoint_runs_its_dequantized_values);
    tcase_add_test(tc, greedy_generation_follows_argmax_and_seeds_repeat);
    tcase_add_test(tc, thread_count_does_not_change_a_bit);
    tcase_add_test(tc, bad_tokens_are_refused);
    suite_add_tcase(s, tc);
    return test_run_suite(s);
}
