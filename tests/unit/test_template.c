/* test_template.c: Check suite for glmchat's native GLM-5 chat template against jinja2's rendering of
 * the real template (tests/fixtures/text/template-cases.jsonl, made by tools/text/make_template_fixtures.py). */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/text/json.h"
#include "engine/text/template.h"
#include "tests/common/check_main.h"

static FILE *open_fixture(const char *name)
{
    const char *src = getenv("GLMCHAT_SRCDIR");
    char path[4096];
    snprintf(path, sizeof path, "%s/tests/fixtures/text/%s", src ? src : ".", name);
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "cannot open %s", path);
    return f;
}

static void show_diff(size_t line, const char *got, size_t gl, const char *want, size_t wl)
{
    size_t i = 0;
    while (i < gl && i < wl && got[i] == want[i])
        i++;
    size_t from = i > 40 ? i - 40 : 0;
    fprintf(stderr, "case on line %zu differs at byte %zu:\n  got  ...%.*s\n  want ...%.*s\n", line, i,
            (int)(gl - from < 100 ? gl - from : 100), got + from, (int)(wl - from < 100 ? wl - from : 100),
            want + from);
}

START_TEST(renders_like_jinja)
{
    FILE *f = open_fixture("template-cases.jsonl");
    char *line = NULL;
    size_t cap = 0, n_line = 0, n_ok = 0, n_refused = 0, n_bad = 0;
    ssize_t len;
    while ((len = getline(&line, &cap, f)) > 0) {
        n_line++;
        glm_error err = {0};
        jv *rec = jv_parse(line, (size_t)len, &err);
        ck_assert_msg(rec != NULL, "line %zu: %s", n_line, err.message);
        const jv *req_text = jv_get(rec, "request"), *want = jv_get(rec, "prompt");
        jv *req = jv_parse(req_text->str, req_text->len, &err);
        ck_assert_msg(req != NULL, "line %zu: request: %s", n_line, err.message);
        tbuf out = {0};
        glm_status st = tmpl_render_json(req, &out, &err);
        if (want) {
            if (st != GLM_OK) {
                if (n_bad++ < 5)
                    fprintf(stderr, "line %zu: refused (%s) but jinja renders it\n", n_line, err.message);
            } else if (out.len != want->len || memcmp(out.p, want->str, want->len) != 0) {
                if (n_bad++ < 5)
                    show_diff(n_line, out.p, out.len, want->str, want->len);
            } else {
                n_ok++;
            }
        } else if (st == GLM_OK) {
            if (n_bad++ < 5)
                fprintf(stderr, "line %zu: rendered, but jinja refuses it (%s)\n", n_line,
                        jv_get(rec, "error")->str);
        } else {
            ck_assert_int_eq(st, GLM_ERR_ARG);
            ck_assert(strlen(err.message) > 10);
            n_refused++;
        }
        tbuf_free(&out);
        jv_free(req);
        jv_free(rec);
    }
    free(line);
    fclose(f);
    fprintf(stderr, "template: %zu requests, %zu rendered equal, %zu refused as jinja does, %zu differ\n", n_line,
            n_ok, n_refused, n_bad);
    ck_assert_uint_gt(n_ok, 380);
    ck_assert_uint_gt(n_refused, 2);
    ck_assert_uint_eq(n_bad, 0);
}
END_TEST

START_TEST(engine_request_renders)
{
    glm_tool_call calls[] = {{"c1", "f", "{\"a\": [1, 2], \"b\": \"s\"}"}, {"c2", "g", NULL}};
    glm_message msgs[] = {
        {GLM_ROLE_USER, "x", NULL, NULL, 0, NULL},
        {GLM_ROLE_ASSISTANT, NULL, "because", calls, 2, NULL},
        {GLM_ROLE_TOOL, "R2", NULL, NULL, 0, "c2"},
        {GLM_ROLE_TOOL, "R1", NULL, NULL, 0, "c1"},
    };
    glm_tool tools[] = {{"f", NULL, "{}"}};
    glm_request r = {.messages = msgs, .n_messages = 4, .tools = tools, .n_tools = 1, .think = 1,
                     .effort = GLM_EFFORT_HIGH};
    tbuf out = {0};
    glm_error err = {0};
    ck_assert_int_eq(tmpl_render(&r, &out, &err), GLM_OK);
    const char *tail = "<|user|>x<|assistant|><think>because</think><tool_call>f<arg_key>a</arg_key><arg_value>"
                       "[1, 2]</arg_value><arg_key>b</arg_key><arg_value>s</arg_value></tool_call><tool_call>g"
                       "</tool_call><|observation|><tool_response>R1</tool_response><tool_response>R2"
                       "</tool_response><|assistant|><think>";
    ck_assert_msg(out.len > strlen(tail) && strcmp(out.p + out.len - strlen(tail), tail) == 0, "got %s", out.p);
    ck_assert(strncmp(out.p, "[gMASK]<sop><|system|>Reasoning Effort: High<|system|>\n# Tools", 62) == 0);
    ck_assert_ptr_nonnull(strstr(out.p, "{\"name\": \"f\", \"parameters\": {}}\n</tools>"));
    tbuf_clear(&out);
    r.think = 0;
    ck_assert_int_eq(tmpl_render(&r, &out, &err), GLM_OK);
    ck_assert(strncmp(out.p, "[gMASK]<sop><|system|>\n# Tools", 29) == 0);
    ck_assert_str_eq(out.p + out.len - 28, "<|assistant|><think></think>");
    /* clear_thinking: the assistant turn before the last user message loses its reasoning */
    glm_message turns[] = {{GLM_ROLE_USER, "q1", NULL, NULL, 0, NULL},
                           {GLM_ROLE_ASSISTANT, "a1", "r1", NULL, 0, NULL},
                           {GLM_ROLE_USER, "q2", NULL, NULL, 0, NULL}};
    glm_request h = {.messages = turns, .n_messages = 3, .think = 1};
    tbuf_clear(&out);
    ck_assert_int_eq(tmpl_render(&h, &out, &err), GLM_OK);
    ck_assert_ptr_nonnull(strstr(out.p, "<|user|>q1<|assistant|><think>r1</think>a1<|user|>q2"));
    h.clear_thinking = 1;
    tbuf_clear(&out);
    ck_assert_int_eq(tmpl_render(&h, &out, &err), GLM_OK);
    ck_assert_ptr_nonnull(strstr(out.p, "<|user|>q1<|assistant|><think></think>a1<|user|>q2"));
    calls[0].arguments_json = "[1]";
    tbuf_clear(&out);
    ck_assert_int_eq(tmpl_render(&r, &out, &err), GLM_ERR_ARG);
    ck_assert_ptr_nonnull(strstr(err.message, "JSON object"));
    tbuf_free(&out);
}
END_TEST

START_TEST(json_writes_like_python)
{
    /* expected values: Python's json.dumps(json.loads(in), ensure_ascii=False) */
    static const char *const cases[][2] = {
        {"1e22", "1e+22"}, {"1e16", "1e+16"}, {"1e15", "1000000000000000.0"}, {"0.0001", "0.0001"},
        {"0.00001", "1e-05"}, {"123.456", "123.456"}, {"-0.0", "-0.0"}, {"5e-324", "5e-324"},
        {"1.7976931348623157e308", "1.7976931348623157e+308"}, {"1e400", "Infinity"}, {"100.0", "100.0"},
        {"1E5", "100000.0"}, {"0.1", "0.1"}, {"2.5e-300", "2.5e-300"},
        {"12345678901234567890", "12345678901234567890"}, {"-0", "0"}, {"1.5e-07", "1.5e-07"},
        {"3.0e2", "300.0"}, {"{\"b\":1,\"a\":[true,null,{}],\"b\":2}", "{\"b\": 2, \"a\": [true, null, {}]}"},
        {"\"a\\u0001\\\"\\\\\\n\\t\x7f\\u2028\\u00e9\"", "\"a\\u0001\\\"\\\\\\n\\t\x7f\xe2\x80\xa8\xc3\xa9\""},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        glm_error err = {0};
        jv *v = jv_parse(cases[i][0], strlen(cases[i][0]), &err);
        ck_assert_msg(v != NULL, "%s: %s", cases[i][0], err.message);
        tbuf out = {0};
        ck_assert_int_eq(jv_dump_py(v, &out), GLM_OK);
        ck_assert_msg(strcmp(out.p, cases[i][1]) == 0, "%s -> %s, want %s", cases[i][0], out.p, cases[i][1]);
        tbuf_free(&out);
        jv_free(v);
    }
    static const char *const bad[] = {"", "[1,]", "{\"a\" 1}", "\"\\ud800\"", "\"\xff\"", "01", "[1] x",
                                      "nul", "\"a\nb\""};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        glm_error err = {0};
        ck_assert_msg(jv_parse(bad[i], strlen(bad[i]), &err) == NULL, "accepted %s", bad[i]);
        ck_assert_int_eq(err.status, GLM_ERR_FORMAT);
        ck_assert_ptr_nonnull(strstr(err.message, "byte"));
    }
    char deep[1200];
    memset(deep, '[', sizeof deep);
    glm_error err = {0};
    ck_assert_ptr_null(jv_parse(deep, sizeof deep, &err));
    ck_assert_ptr_nonnull(strstr(err.message, "nesting"));
}
END_TEST

int main(void)
{
    Suite *s = suite_create("template");
    TCase *tc = tcase_create("jinja");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, renders_like_jinja);
    tcase_add_test(tc, engine_request_renders);
    tcase_add_test(tc, json_writes_like_python);
    suite_add_tcase(s, tc);
    return test_run_suite(s);
}
