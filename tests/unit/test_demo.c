/* test_demo.c: the embedded demo model on glmchat's CPU engine: its logits equal transformers'
 * (models/demo/reference.safetensors), and a scripted tool session works end to end. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app/demo_model.h"
#include "engine/model/safetensors.h"
#include "engine/session.h"
#include "engine/text/json.h"
#include "engine/text/tbuf.h"
#include "engine/text/template.h"
#include "engine/text/tokenizer.h"
#include "glm.h"

static const int demo_eos[] = {154820, 154827, 154829};
#define OBSERVATION_ID 154829

static char *src_path(const char *rel)
{
    const char *src = getenv("GLMCHAT_SRCDIR");
    static char buf[4096];
    snprintf(buf, sizeof buf, "%s/%s", src ? src : ".", rel);
    return buf;
}

static glm_engine *open_demo(void)
{
    glm_error err = {0};
    glm_engine_params p = {.model_dir = demo_model_dir(), .backend = GLM_BACKEND_CPU, .n_threads = 2};
    glm_engine *e = glm_engine_open(&p, &err);
    ck_assert_msg(e != NULL, "cannot open the demo model in %s: %s", demo_model_dir(), err.message);
    return e;
}

START_TEST(logits_match_reference)
{
    glm_error err = {0};
    st_model *ref = st_open_file(src_path("models/demo/reference.safetensors"), &err);
    ck_assert_msg(ref != NULL, "%s", err.message);
    glm_engine *e = open_demo();
    glm_session *s = glm_session_new(e, &err);
    ck_assert_msg(s != NULL, "%s", err.message);
    for (int k = 0; k < 2; k++) {
        char name[64];
        snprintf(name, sizeof name, "input_ids_%d", k);
        const st_tensor *ids = st_find(ref, name);
        snprintf(name, sizeof name, "logits_last_%d", k);
        const st_tensor *want = st_find(ref, name);
        ck_assert(ids && want && ids->dtype == ST_I32 && want->dtype == ST_F32);
        int n = (int)ids->shape[0], V = glm_session_vocab(s);
        ck_assert_int_eq(want->shape[0], V);
        glm_session_reset(s);
        ck_assert_msg(glm_session_feed(s, ids->data, n, NULL, &err) == GLM_OK, "%s", err.message);
        const float *got = glm_session_logits(s), *w = want->data;
        double worst = 0;
        for (int i = 0; i < V; i++)
            worst = fmax(worst, fabs((double)got[i] - w[i]));
        printf("demo prompt %d (%d tokens): max |logit - transformers| = %.3g\n", k, n, worst);
        ck_assert_msg(worst < 1e-3, "prompt %d: logits differ from transformers' by %g", k, worst);
    }
    glm_session_free(s);
    glm_engine_close(e);
    st_close(ref);
}
END_TEST

static char *read_text(const char *path)
{
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "cannot open %s", path);
    static char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    return buf;
}

/* Greedy reply after prompt; returns its text (special tokens kept) and the last token. */
static void reply(glm_session *s, const tok_tokenizer *t, const char *prompt, tbuf *out, int32_t *last)
{
    glm_error err = {0};
    tok_ids ids = {0}, gen = {0};
    ck_assert_msg(tok_encode(t, prompt, strlen(prompt), &ids, &err) == GLM_OK, "%s", err.message);
    glm_session_reset(s);
    ck_assert_msg(glm_session_feed(s, ids.v, (int)ids.n, NULL, &err) == GLM_OK, "%s", err.message);
    for (int i = 0; i < 96; i++) {
        const float *lg = glm_session_logits(s);
        int32_t best = 0;
        for (int v = 1; v < glm_session_vocab(s); v++)
            if (lg[v] > lg[best])
                best = v;
        ck_assert(tok_ids_push(&gen, best) == GLM_OK);
        *last = best;
        if (best == demo_eos[0] || best == demo_eos[1] || best == demo_eos[2])
            break;
        ck_assert_msg(glm_session_feed(s, &best, 1, NULL, &err) == GLM_OK, "%s", err.message);
    }
    ck_assert(tok_decode(t, gen.v, gen.n - 1, out, &err) == GLM_OK);
    ck_assert(tbuf_putc(out, 0) == GLM_OK);
    tok_ids_free(&ids);
    tok_ids_free(&gen);
}

/* The text between open and close after from, copied into dst. */
static int between(const char *from, const char *open, const char *close, char *dst, size_t cap)
{
    const char *a = strstr(from, open);
    if (!a)
        return -1;
    a += strlen(open);
    const char *b = strstr(a, close);
    if (!b || (size_t)(b - a) >= cap)
        return -1;
    memcpy(dst, a, (size_t)(b - a));
    dst[b - a] = 0;
    return 0;
}

START_TEST(tool_session)
{
    glm_error err = {0};
    char path[4096];
    snprintf(path, sizeof path, "%s/tokenizer.json", demo_model_dir());
    tok_tokenizer *t = tok_load(path, &err);
    ck_assert_msg(t != NULL, "%s", err.message);
    const char *req_text = read_text(src_path("models/demo/demo-request.json"));
    jv *req = jv_parse(req_text, strlen(req_text), &err);
    ck_assert_msg(req != NULL, "%s", err.message);
    tbuf prompt = {0}, first = {0}, second = {0}, full = {0};
    ck_assert_msg(tmpl_render_json(req, &prompt, &err) == GLM_OK, "%s", err.message);
    ck_assert(tbuf_putc(&prompt, 0) == GLM_OK);
    glm_engine *e = open_demo();
    glm_session *s = glm_session_new(e, &err);
    ck_assert_msg(s != NULL, "%s", err.message);

    int32_t last = -1;
    reply(s, t, prompt.p, &first, &last);
    printf("user: How much is 67 plus 66?\nassistant (turn 1): %s\n", first.p);
    ck_assert_msg(last == OBSERVATION_ID, "the model did not end its turn with <|observation|>");
    const char *end_think = strstr(first.p, "</think>");
    ck_assert_msg(end_think && end_think > first.p, "no reasoning before </think>: %s", first.p);
    char name[64], key[64], value[256];
    ck_assert_msg(between(end_think, "<tool_call>", "<arg_key>", name, sizeof name) == 0 &&
                      between(end_think, "<arg_key>", "</arg_key>", key, sizeof key) == 0 &&
                      between(end_think, "<arg_value>", "</arg_value>", value, sizeof value) == 0 &&
                      strstr(end_think, "</tool_call>"),
                  "no well-formed tool call: %s", end_think);
    ck_assert_str_eq(name, "run_command");
    ck_assert_str_eq(key, "command");

    /* run the command for real, and report it as glmchat's run_command does */
    FILE *p = popen(value, "r");
    ck_assert(p != NULL);
    char out[256] = "";
    size_t n = fread(out, 1, sizeof out - 1, p);
    out[n] = 0;
    int status = pclose(p);
    ck_assert_int_eq(status, 0);
    if (n && out[n - 1] == '\n')
        out[n - 1] = 0;
    printf("tool run_command `%s` -> %s\n", value, out);
    ck_assert_str_eq(out, "133");

    ck_assert(tbuf_puts(&full, prompt.p) == GLM_OK && tbuf_puts(&full, first.p) == GLM_OK);
    ck_assert(tbuf_puts(&full, "<|observation|><tool_response>") == GLM_OK && tbuf_puts(&full, out) == GLM_OK);
    ck_assert(tbuf_puts(&full, "\n[exit status 0]</tool_response><|assistant|><think>") == GLM_OK);
    ck_assert(tbuf_putc(&full, 0) == GLM_OK);
    reply(s, t, full.p, &second, &last);
    printf("assistant (turn 2): %s\n", second.p);
    const char *answer = strstr(second.p, "</think>");
    ck_assert_msg(answer && answer > second.p, "no reasoning in the answer turn: %s", second.p);
    ck_assert_msg(strstr(answer, out) != NULL, "the answer does not use the tool's result %s: %s", out, answer);
    ck_assert_msg(last == demo_eos[0] || last == demo_eos[1], "the answer did not end the turn");

    tbuf_free(&prompt);
    tbuf_free(&first);
    tbuf_free(&second);
    tbuf_free(&full);
    jv_free(req);
    glm_session_free(s);
    glm_engine_close(e);
    tok_free(t);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("demo");
    TCase *tc = tcase_create("demo");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, logits_match_reference);
    tcase_add_test(tc, tool_session);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_VERBOSE);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
