/* test_spec.c: Check suite for speculative decoding: a verifying forward's rows equal one-token
 * decode bit for bit, going back inside its window, copy drafts, and drafted replies identical to
 * undrafted ones (greedy and seeded sampling), with acceptance counted per draft position. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app/demo_model.h"
#include "backend.h"
#include "model/mkmodel.h"
#include "session.h"
#include "spec.h"
#include "test_engine_util.h"
#include "text/tokenizer.h"
#include "tests/common/check_main.h"

static const char *const fixtures[] = {"tiny-A", "groups-kpool2", "shared-indexer-hc2",
                                       "dsa-first-hc3", "softplus-kpool1-hc1"};
START_TEST(verify_rows_equal_decode_bit_for_bit)
{
    glm_error err = {0};
    /* the fixtures are float32; the demo model is BF16 (its products widen on the fly) */
    int n_fix = (int)(sizeof fixtures / sizeof *fixtures);
    const char *name = _i < n_fix ? fixtures[_i] : "demo";
    glm_model *m = glm_model_open(_i < n_fix ? tu_fixture(fixtures[_i]) : demo_model_dir(), &err);
    ck_assert_msg(m != NULL, "%s", err.message);
    engine_backend be;
    ck_assert_int_eq(backend_open_cpu(m, 2, &be, &err), GLM_OK);
    const backend_ops *o = be.ops;
    int V = m->cfg.vocab_size, P = 45, K = 7;
    int32_t *ids = tu_some_tokens(P + K, 17 + (uint64_t)_i, V < 2000 ? V : 2000);
    void *dec = o->state_new(be.impl, &err), *ver = o->state_new(be.impl, &err);
    ck_assert_int_eq(o->prefill(be.impl, dec, ids, P, NULL, 0, &err), GLM_OK);
    ck_assert_int_eq(o->prefill(be.impl, ver, ids, P, NULL, 0, &err), GLM_OK);
    ck_assert_int_eq(o->state_mark(ver, &err), GLM_OK);
    size_t row = (size_t)V * sizeof(float);
    float *want = malloc((size_t)K * row), *got = malloc((size_t)K * row);
    ck_assert_int_eq(o->state_mark(dec, &err), GLM_OK);
    for (int t = 0; t < K; t++)
        ck_assert_int_eq(o->prefill(be.impl, dec, ids + P + t, 1, want + (size_t)t * V, 0, &err),
                         GLM_OK);
    ck_assert_int_eq(o->verify(be.impl, ver, ids + P, K, got, &err), GLM_OK);
    ck_assert_int_eq(o->state_length(ver), P + K);
    for (int t = 0; t < K; t++)
        ck_assert_msg(memcmp(want + (size_t)t * V, got + (size_t)t * V, row) == 0,
                      "%s: verify row %d differs from decode (max %g)", name, t,
                      (double)tu_max_abs_diff(want + (size_t)t * V, got + (size_t)t * V, (size_t)V));
    /* the chunked prefill is not bit-identical in general: that is why verify exists; both are
     * close to each other */
    float *chunked = malloc((size_t)K * row);
    void *pre = o->state_new(be.impl, &err);
    ck_assert_int_eq(o->prefill(be.impl, pre, ids, P, NULL, 0, &err), GLM_OK);
    ck_assert_int_eq(o->prefill(be.impl, pre, ids + P, K, chunked, 1, &err), GLM_OK);
    ck_assert(tu_max_abs_diff(chunked, want, (size_t)K * V) < 1e-3f);
    /* going back to every position of the window, then decoding on, equals decoding there */
    for (int j = 1; j <= K; j++) {
        ck_assert_int_eq(o->state_truncate(ver, P, &err), GLM_OK);
        ck_assert_int_eq(o->verify(be.impl, ver, ids + P, K, got, &err), GLM_OK);
        ck_assert_int_eq(o->state_rewind(ver, P + j, &err), GLM_OK);
        ck_assert_int_eq(o->state_truncate(dec, P, &err), GLM_OK);
        for (int t = 0; t < j; t++)
            ck_assert_int_eq(o->prefill(be.impl, dec, ids + P + t, 1, NULL, 0, &err), GLM_OK);
        int32_t tok = ids[(j * 7) % P];
        ck_assert_int_eq(o->prefill(be.impl, dec, &tok, 1, want, 0, &err), GLM_OK);
        ck_assert_int_eq(o->prefill(be.impl, ver, &tok, 1, chunked, 0, &err), GLM_OK);
        ck_assert_msg(memcmp(want, chunked, row) == 0, "%s: decode after going back to %d differs",
                      name, P + j);
    }
    /* outside the window: refused with a message */
    ck_assert_int_eq(o->state_rewind(ver, P, &err), GLM_ERR_ARG);
    ck_assert_ptr_nonnull(strstr(err.message, "verification window"));
    free(want);
    free(got);
    free(chunked);
    free(ids);
    o->state_free(dec);
    o->state_free(ver);
    o->state_free(pre);
    backend_close(&be);
    glm_model_close(m);
}
END_TEST

START_TEST(copy_drafts_follow_the_latest_match)
{
    int32_t ctx[] = {1, 2, 3, 4, 5, 9, 2, 3, 4, 6, 7, 8, 2, 3, 4};
    int32_t out[8];
    /* the tail "2 3 4" occurred twice; the latest is followed by 6 7 8 2 3 4, then the tail:
     * a loop of six, which goes on round (6 7) */
    int k = spec_copy_draft(ctx, 15, out, 8);
    ck_assert_int_eq(k, 8);
    int32_t want[8] = {6, 7, 8, 2, 3, 4, 6, 7};
    ck_assert_int_eq(memcmp(out, want, sizeof want), 0);
    ck_assert_int_eq(spec_copy_draft(ctx, 15, out, 2), 2);
    ck_assert_int_eq(out[1], 7);
    /* a reply stuck on two words: every draft goes on with them */
    int32_t loop[] = {5, 9, 11, 40, 41, 40, 41, 40, 41};
    ck_assert_int_eq(spec_copy_draft(loop, 9, out, 5), 5);
    int32_t round[5] = {40, 41, 40, 41, 40};
    ck_assert_int_eq(memcmp(out, round, sizeof round), 0);
    int32_t none[] = {1, 2, 3, 4, 5};
    ck_assert_int_eq(spec_copy_draft(none, 5, out, 8), 0);
    int32_t one[] = {7};
    ck_assert_int_eq(spec_copy_draft(one, 1, out, 8), 0);
}
END_TEST

static glm_engine *open_engine_cache(const char *dir, int draft, int64_t cache_bytes)
{
    glm_error err = {0};
    glm_engine_params p = {.model_dir = dir, .backend = GLM_BACKEND_CPU, .n_threads = 2,
                           .prompt_cache_bytes = cache_bytes, .draft = draft};
    glm_engine *e = glm_engine_open(&p, &err);
    ck_assert_msg(e != NULL, "%s", err.message);
    return e;
}

static glm_engine *open_engine_at(const char *dir, int draft)
{
    return open_engine_cache(dir, draft, -1);
}

/* A prompt that repeats itself, so copy drafts have something to propose. */
static int32_t *looping_prompt(int n, int vocab_used)
{
    int32_t *p = tu_some_tokens(n, 3, vocab_used);
    for (int i = 24; i < n; i++)
        p[i] = p[i % 24];
    return p;
}

START_TEST(drafted_replies_equal_undrafted)
{
    float temperature = _i == 0 ? 0.0f : 0.8f;
    const char *dir = tu_fixture("dsa-first-hc3");
    glm_engine *plain = open_engine_at(dir, SPEC_OFF), *drafted = open_engine_at(dir, SPEC_COPY);
    int V = 200;
    spec_stats all = {0};
    for (int trial = 0; trial < 4; trial++) {
        int n_prompt = 60 + 11 * trial, max_new = 50 + 7 * trial;
        int32_t *prompt = looping_prompt(n_prompt, V);
        glm_sampling smp = {.temperature = temperature, .top_p = 1, .top_k = 40,
                            .seed = 1000 + (uint64_t)trial};
        tu_drafted_run r;
        /* trial 0: the engine's copy drafts; then the oracle */
        tu_run_drafted(plain, drafted, prompt, n_prompt, &smp, max_new, trial > 0 ? V : 0, &r);
        ck_assert_msg(r.plain_st == GLM_OK && r.drafted_st == GLM_OK, "%s", r.err.message);
        ck_assert_int_eq(r.plain.n, max_new);
        ck_assert_msg(r.same, "trial %d: the drafted reply differs from the undrafted one", trial);
        /* the state after the reply is the same too: the same length and next logits */
        ck_assert(r.logits_same);
        ck_assert_int_eq(r.plain_windows, 0);
        for (int i = 0; i < SPEC_MAX_DRAFT; i++)
            ck_assert_int_le(r.stats.accepted[i], r.stats.proposed[i]);
        if (trial > 0) /* fewer forwards than tokens */
            ck_assert_int_lt(r.stats.windows, max_new / 2);
        tu_add_stats(&all, &r.stats);
        free(prompt);
    }
    printf("temperature %.1f: ", (double)temperature);
    tu_print_acceptance(&all);
    printf("\n");
    /* the oracle is mostly right: the first positions see acceptances and refusals */
    for (int i = 0; i < 4; i++)
        ck_assert(all.accepted[i] > 0 && (i == 0 || all.accepted[i] < all.proposed[i]));
    glm_engine_close(plain);
    glm_engine_close(drafted);
}
END_TEST

/* Drafts that are never accepted cost a verifying row each: drafting backs off to plain steps
 * between probes, and comes back when drafts are accepted again. The replies stay equal. */
START_TEST(drafting_backs_off_while_nothing_is_accepted)
{
    float temperature = _i == 0 ? 0.0f : 0.8f;
    const char *dir = tu_fixture("dsa-first-hc3");
    glm_engine *plain = open_engine_at(dir, SPEC_OFF), *drafted = open_engine_at(dir, SPEC_COPY);
    int V = 200, n_prompt = 60, max_new = 240;
    int32_t *prompt = looping_prompt(n_prompt, V);
    glm_sampling smp = {.temperature = temperature, .top_p = 1, .top_k = 40, .seed = 77};
    /* every draft wrong: a few windows while the mean falls, then probes 1, 2, 4 .. 32 steps
     * apart (without the back-off: a window every step) */
    tu_drafted_run r;
    tu_run_drafted_oracle(plain, drafted, prompt, n_prompt, &smp, max_new, V, max_new, &r);
    ck_assert_msg(r.plain_st == GLM_OK && r.drafted_st == GLM_OK, "%s", r.err.message);
    ck_assert_msg(r.same && r.logits_same, "the drafted reply differs from the undrafted one");
    ck_assert_int_eq(r.stats.accepted[0], 0);
    printf("all drafts wrong (temperature %.1f): %lld windows, %lld plain steps backed off in %d "
           "tokens\n", (double)temperature, (long long)r.stats.windows,
           (long long)r.stats.backoff_steps, max_new);
    fflush(stdout);
    ck_assert_int_le(r.stats.windows, 20);
    ck_assert_int_ge(r.stats.backoff_steps, max_new - 40);
    /* wrong for the first 120 positions, right after: drafting comes back within a probe gap
     * (32 steps) and the last 120 tokens need far fewer windows than tokens */
    tu_run_drafted_oracle(plain, drafted, prompt, n_prompt, &smp, max_new, V, 120, &r);
    ck_assert_msg(r.same && r.logits_same, "the drafted reply differs from the undrafted one");
    int64_t accepted = 0;
    for (int i = 0; i < SPEC_MAX_DRAFT; i++)
        accepted += r.stats.accepted[i];
    printf("drafts wrong for 120 then right: %lld windows, %lld accepted, %lld backed off\n",
           (long long)r.stats.windows, (long long)accepted, (long long)r.stats.backoff_steps);
    fflush(stdout);
    ck_assert_int_ge(accepted, 120 - 32 - 30);
    ck_assert_int_le(r.stats.backoff_steps, 120 + SPEC_MAX_BACKOFF);
    free(prompt);
    glm_engine_close(plain);
    glm_engine_close(drafted);
}
END_TEST

/* Forward costs as a model: a plain step costs 1, each further row of a window `per_row`. */
static double cost_per_row(int rows, double measured_s, void *user)
{
    (void)measured_s;
    return 1.0 + (rows - 1) * *(const double *)user;
}

START_TEST(drafting_follows_what_windows_cost)
{
    float temperature = _i == 0 ? 0.0f : 0.8f;
    const char *dir = tu_fixture("dsa-first-hc3");
    glm_engine *plain = open_engine_at(dir, SPEC_OFF), *drafted = open_engine_at(dir, SPEC_COPY);
    int V = 200, n_prompt = 60, max_new = 240;
    int32_t *prompt = looping_prompt(n_prompt, V);
    glm_sampling smp = {.temperature = temperature, .top_p = 1, .top_k = 40, .seed = 91};
    /* the oracle's drafts are right four times in five. Rows that cost as much as a step (an
     * arithmetic-bound forward): a window of k drafts gives at most k + 1 tokens for k + 1
     * steps, less with a wrong draft, so drafting backs off after the first windows */
    double dear = 1.0, cheap = 0.1;
    tu_drafted_run r;
    tu_run_drafted_costed(plain, drafted, prompt, n_prompt, &smp, max_new, V, 0, cost_per_row,
                          &dear, &r);
    ck_assert_msg(r.plain_st == GLM_OK && r.drafted_st == GLM_OK, "%s", r.err.message);
    ck_assert_msg(r.same && r.logits_same, "the drafted reply differs from the undrafted one");
    printf("rows as dear as steps (temperature %.1f): %lld windows, %lld plain steps backed off, "
           "%lld timed, in %d tokens\n", (double)temperature, (long long)r.stats.windows,
           (long long)r.stats.backoff_steps, (long long)r.stats.timing_steps, max_new);
    fflush(stdout);
    ck_assert_int_ge(r.stats.timing_steps, 1);
    ck_assert_int_le(r.stats.windows, 24);
    ck_assert_int_ge(r.stats.backoff_steps, max_new / 2);
    /* rows at a tenth of a step (a forward bound by its weights' reads): every window pays */
    tu_run_drafted_costed(plain, drafted, prompt, n_prompt, &smp, max_new, V, 0, cost_per_row,
                          &cheap, &r);
    ck_assert_msg(r.same && r.logits_same, "the drafted reply differs from the undrafted one");
    printf("rows at a tenth of a step: %lld windows, %lld backed off, %lld timed\n",
           (long long)r.stats.windows, (long long)r.stats.backoff_steps,
           (long long)r.stats.timing_steps);
    fflush(stdout);
    ck_assert_int_eq(r.stats.backoff_steps, 0);
    ck_assert_int_le(r.stats.timing_steps, 2 + r.stats.windows / SPEC_RETIME_EVERY);
    ck_assert_int_lt(r.stats.windows, max_new / 2);
    free(prompt);
    glm_engine_close(plain);
    glm_engine_close(drafted);
}
END_TEST

START_TEST(drafted_chat_turns_equal_undrafted)
{
    glm_error err = {0};
    /* the demo model writes structured text, so copy drafts find matches */
    glm_engine *e[2] = {open_engine_at(demo_model_dir(), SPEC_OFF),
                        open_engine_at(demo_model_dir(), SPEC_COPY)};
    tu_reply out[2][3];
    int64_t windows = 0;
    memset(out, 0, sizeof out);
    const char *asks[3] = {"Write the numbers one two three one two three one two three",
                           "again: one two three one two three", "and once more"};
    for (int k = 0; k < 2; k++) {
        glm_session *s = glm_session_new(e[k], &err);
        glm_message msgs[6];
        int n = 0;
        for (int t = 0; t < 3; t++) {
            msgs[n++] = (glm_message){.role = GLM_ROLE_USER, .content = asks[t]};
            glm_request rq = {.messages = msgs, .n_messages = n,
                              .sampling = {.temperature = _i ? 0.7f : 0.0f, .top_p = 1,
                                           .seed = 42, .max_tokens = 40}};
            ck_assert_msg(glm_generate(s, &rq, tu_collect_reply, &out[k][t], &err) == GLM_OK, "%s",
                          err.message);
            out[k][t].text[out[k][t].len] = '\0';
            msgs[n++] = (glm_message){.role = GLM_ROLE_ASSISTANT, .content = out[k][t].text};
        }
        if (k == 1)
            windows = glm_session_spec_stats(s)->windows;
        glm_session_free(s);
    }
    for (int t = 0; t < 3; t++)
        ck_assert_msg(strcmp(out[0][t].text, out[1][t].text) == 0, "turn %d: '%s' undrafted, '%s' "
                      "drafted", t, out[0][t].text, out[1][t].text);
    ck_assert_int_gt(strlen(out[0][0].text), 0);
    printf("demo chat (temperature %.1f), drafted windows %lld: '%s'\n", _i ? 0.7 : 0.0,
           (long long)windows, out[1][0].text);
    glm_engine_close(e[0]);
    glm_engine_close(e[1]);
}
END_TEST

static char mtp_dir[4096];

static void make_mtp_model(void)
{
    glm_error err = {0};
    char *tmp = tu_tmpdir();
    snprintf(mtp_dir, sizeof mtp_dir, "%s/mtp", tmp);
    free(tmp);
    glm_mkmodel_params p = {.out_dir = mtp_dir, .preset = "tiny-mtp", .seed = 21};
    ck_assert_msg(glm_mkmodel(&p, &err) == GLM_OK, "%s", err.message);
}

static void remove_mtp_model(void)
{
    char *slash = strrchr(mtp_dir, '/');
    *slash = '\0';
    tu_rmtree(mtp_dir);
}

/* Without draft = mtp the engine does not run the MTP layer (it would cost a layer a step):
 * no MTP drafts, and the same logits as with it (the main model does not depend on it). */
START_TEST(mtp_layer_off_unless_drafting)
{
    glm_error err = {0};
    glm_engine *on = open_engine_at(mtp_dir, SPEC_MTP);
    glm_engine *off = open_engine_at(mtp_dir, SPEC_OFF);
    ck_assert(glm_engine_model(on)->w.has_mtp);
    ck_assert(!glm_engine_model(off)->w.has_mtp);
    glm_session *a = glm_session_new(on, &err), *b = glm_session_new(off, &err);
    int32_t *ids = tu_some_tokens(20, 5, 5000), out[4];
    ck_assert_int_eq(glm_session_feed(a, ids, 20, NULL, &err), GLM_OK);
    ck_assert_int_eq(glm_session_feed(b, ids, 20, NULL, &err), GLM_OK);
    ck_assert_int_eq(glm_session_mtp_draft(b, 7, out, 4, &err), 0);
    ck_assert_int_eq(glm_session_mtp_draft(a, 7, out, 4, &err), 4);
    int V = glm_session_vocab(a);
    ck_assert_int_eq(memcmp(glm_session_logits(a), glm_session_logits(b), (size_t)V * 4), 0);
    free(ids);
    glm_session_free(a);
    glm_session_free(b);
    glm_engine_close(on);
    glm_engine_close(off);
}
END_TEST

/* The MTP layer's drafts after the state got somewhere along different paths: decoding one by
 * one, a verification window gone back into, a snapshot, a truncate to the mark. */
START_TEST(mtp_drafts_follow_the_state)
{
    glm_error err = {0};
    glm_engine *e = open_engine_cache(mtp_dir, SPEC_MTP, 64 << 20);
    ck_assert(glm_engine_model(e)->w.has_mtp);
    glm_session *a = glm_session_new(e, &err), *b = glm_session_new(e, &err);
    int P = 30, K = 6, j = 4;
    int32_t *ids = tu_some_tokens(P + K, 77, 5000);
    int32_t da[8], db[8], dc[8];
    ck_assert_int_eq(glm_session_feed(a, ids, P, NULL, &err), GLM_OK);
    ck_assert_int_eq(glm_session_feed(b, ids, P, NULL, &err), GLM_OK);
    ck_assert_int_eq(glm_session_mark(b, &err), GLM_OK);
    for (int t = 0; t < j; t++)
        ck_assert_int_eq(glm_session_feed(a, ids + P + t, 1, NULL, &err), GLM_OK);
    float *rows = malloc((size_t)K * glm_session_vocab(b) * sizeof *rows);
    ck_assert_int_eq(glm_session_verify(b, ids + P, K, rows, &err), GLM_OK);
    ck_assert_int_eq(glm_session_rewind(b, P + j, NULL, &err), GLM_OK);
    int na = glm_session_mtp_draft(a, 99, da, 5, NULL);
    int nb = glm_session_mtp_draft(b, 99, db, 5, NULL);
    ck_assert_int_eq(na, 5);
    ck_assert_int_eq(nb, 5);
    ck_assert_int_eq(memcmp(da, db, sizeof(int32_t) * 5), 0);
    /* drafting leaves the state as it was: the same drafts again */
    ck_assert_int_eq(glm_session_mtp_draft(a, 99, dc, 5, NULL), 5);
    ck_assert_int_eq(memcmp(da, dc, sizeof(int32_t) * 5), 0);
    ck_assert_int_eq(glm_session_length(a), P + j);
    /* a snapshot carries the MTP cache */
    glm_session *c = glm_session_new(e, &err);
    ck_assert_int_eq(glm_session_keep(a, &err), GLM_OK);
    ck_assert_int_eq(glm_session_restore(c, ids, P + j, 0, P + j), P + j);
    ck_assert_int_eq(glm_session_mtp_draft(c, 99, dc, 5, NULL), 5);
    ck_assert_int_eq(memcmp(da, dc, sizeof(int32_t) * 5), 0);
    /* back to the mark: the same drafts as right after the prompt */
    glm_session *d = glm_session_new(e, &err);
    ck_assert_int_eq(glm_session_feed(d, ids, P, NULL, &err), GLM_OK);
    ck_assert_int_eq(glm_session_mtp_draft(d, 7, da, 5, NULL), 5);
    ck_assert_int_eq(glm_session_truncate(b, P, &err), GLM_OK);
    ck_assert_int_eq(glm_session_mtp_draft(b, 7, db, 5, NULL), 5);
    ck_assert_int_eq(memcmp(da, db, sizeof(int32_t) * 5), 0);
    free(rows);
    free(ids);
    glm_session_free(a);
    glm_session_free(b);
    glm_session_free(c);
    glm_session_free(d);
    glm_engine_close(e);
}
END_TEST

/* A reply never holds an id the model directory's tokenizer has no text for, whether or not
 * the engine was asked for its tokenizer first (mkmodel's tokenizer knows 332 of 154,880 ids:
 * an engine that masked only after glm_engine_tokenizer gave another reply). */
START_TEST(replies_masked_by_the_model_dir_alone)
{
    glm_error err = {0};
    glm_engine *asked = open_engine_at(mtp_dir, _i ? SPEC_COPY : SPEC_OFF);
    glm_engine *not_asked = open_engine_at(mtp_dir, _i ? SPEC_COPY : SPEC_OFF);
    const tok_tokenizer *tk = glm_engine_tokenizer(asked, &err);
    ck_assert_msg(tk != NULL, "%s", err.message);
    int eos[] = {-1};
    int32_t *prompt = tu_some_tokens(40, 9, 5000);
    glm_sampling smp = {.temperature = 0, .top_p = 1};
    tu_tokens a = {0}, b = {0};
    glm_session *sa = glm_session_new(asked, &err), *sb = glm_session_new(not_asked, &err);
    int na = 0, nb = 0;
    ck_assert_int_eq(glm_session_generate_tokens(sb, prompt, 40, &smp, eos, 1, 48, tu_keep_token,
                                                 &b, &nb, &err), GLM_OK);
    ck_assert_int_eq(glm_session_generate_tokens(sa, prompt, 40, &smp, eos, 1, 48, tu_keep_token,
                                                 &a, &na, &err), GLM_OK);
    ck_assert_int_eq(a.n, 48);
    ck_assert_int_eq(a.n, b.n);
    ck_assert_msg(memcmp(a.v, b.v, (size_t)a.n * sizeof *a.v) == 0,
                  "the reply of an engine never asked for its tokenizer differs");
    for (int i = 0; i < b.n; i++) {
        size_t len;
        ck_assert_msg(tok_token_bytes(tk, b.v[i], &len) != NULL, "token %d of the reply is id %d, "
                      "which the tokenizer has no text for", i, (int)b.v[i]);
    }
    free(prompt);
    glm_session_free(sa);
    glm_session_free(sb);
    glm_engine_close(asked);
    glm_engine_close(not_asked);
}
END_TEST

START_TEST(mtp_drafted_replies_equal_undrafted)
{
    glm_engine *plain = open_engine_at(mtp_dir, SPEC_OFF), *mtp = open_engine_at(mtp_dir, SPEC_MTP);
    int32_t *prompt = tu_some_tokens(50, 5, 5000);
    glm_sampling smp = {.temperature = _i ? 0.9f : 0.0f, .top_p = 1, .seed = 3};
    tu_drafted_run r;
    tu_run_drafted(plain, mtp, prompt, 50, &smp, 40, 0, &r);
    ck_assert_msg(r.plain_st == GLM_OK && r.drafted_st == GLM_OK, "%s", r.err.message);
    ck_assert_int_eq(r.plain.n, 40);
    ck_assert_msg(r.same, "the reply with draft = mtp differs from the undrafted one");
    ck_assert_int_gt(r.stats.windows, 0); /* the MTP layer drafted */
    ck_assert_int_eq(r.mtp_drafts, 4);
    printf("tiny-mtp (random weights, temperature %.1f): %lld windows, first position accepted "
           "%lld/%lld\n", _i ? 0.9 : 0.0, (long long)r.stats.windows, (long long)r.stats.accepted[0],
           (long long)r.stats.proposed[0]);
    free(prompt);
    glm_engine_close(plain);
    glm_engine_close(mtp);
}
END_TEST

static Suite *spec_suite(void)
{
    Suite *s = suite_create("spec");
    TCase *tc = tcase_create("spec");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, verify_rows_equal_decode_bit_for_bit, 0,
                        (int)(sizeof fixtures / sizeof *fixtures) + 1);
    tcase_add_test(tc, copy_drafts_follow_the_latest_match);
    tcase_add_loop_test(tc, drafted_replies_equal_undrafted, 0, 2);
    tcase_add_loop_test(tc, drafted_chat_turns_equal_undrafted, 0, 2);
    tcase_add_loop_test(tc, drafting_backs_off_while_nothing_is_accepted, 0, 2);
    tcase_add_loop_test(tc, drafting_follows_what_windows_cost, 0, 2);
    suite_add_tcase(s, tc);
    TCase *mt = tcase_create("mtp");
    tcase_set_timeout(mt, 120);
    tcase_add_unchecked_fixture(mt, make_mtp_model, remove_mtp_model);
    tcase_add_test(mt, mtp_drafts_follow_the_state);
    tcase_add_test(mt, mtp_layer_off_unless_drafting);
    tcase_add_loop_test(mt, mtp_drafted_replies_equal_undrafted, 0, 2);
    tcase_add_loop_test(mt, replies_masked_by_the_model_dir_alone, 0, 2);
    suite_add_tcase(s, mt);
    return s;
}

int main(void)
{
    return test_run_suite(spec_suite());
}
