/* test_jsonl.c: Check suite for the jsonl event stream: every event type parses back as one JSON
 * object a line with the documented fields, and bad UTF-8 or control bytes stay valid JSON. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "app/jsonl.h"
#include "tests/common/check_main.h"

static char *buf;
static size_t len;
static FILE *mem;
static jsonl_writer w;

static void open_stream(void)
{
    buf = NULL;
    len = 0;
    mem = open_memstream(&buf, &len);
    ck_assert_ptr_nonnull(mem);
    jsonl_init(&w, mem);
}

static void close_stream(void)
{
    fclose(mem);
    free(buf);
}

/* The n-th line (0-based) of what was written, parsed; fails unless it is one JSON object. */
static cJSON *line(int n)
{
    fflush(mem);
    const char *s = buf;
    for (int i = 0; i < n; i++) {
        s = strchr(s, '\n');
        ck_assert_ptr_nonnull(s);
        s++;
    }
    const char *e = strchr(s, '\n');
    ck_assert_ptr_nonnull(e);
    cJSON *j = cJSON_ParseWithLength(s, (size_t)(e - s));
    ck_assert_msg(cJSON_IsObject(j), "line %d is not a JSON object: %.*s", n, (int)(e - s), s);
    return j;
}

static const char *str(cJSON *j, const char *key)
{
    cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
    ck_assert_msg(cJSON_IsString(v), "no string '%s'", key);
    return v->valuestring;
}

static double num(cJSON *j, const char *key)
{
    cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
    ck_assert_msg(cJSON_IsNumber(v), "no number '%s'", key);
    return v->valuedouble;
}

START_TEST(session_user_assistant_and_turn_end)
{
    ck_assert_int_eq(jsonl_session(&w, 7, 1), 0);
    ck_assert_int_eq(jsonl_user(&w, 12, "what is 2+2?"), 0);
    ck_assert_int_eq(jsonl_assistant(&w, 13), 0);
    ck_assert_int_eq(jsonl_turn_end(&w, 7, 9000000000LL, "stop"), 0);
    cJSON *j = line(0);
    ck_assert_str_eq(str(j, "type"), "session");
    ck_assert_int_eq((int)num(j, "version"), JSONL_VERSION);
    ck_assert_int_eq((int)num(j, "conversation"), 7);
    ck_assert(cJSON_IsTrue(cJSON_GetObjectItem(j, "continued")));
    cJSON_Delete(j);
    j = line(1);
    ck_assert_str_eq(str(j, "type"), "user");
    ck_assert_int_eq((int)num(j, "message"), 12);
    ck_assert_str_eq(str(j, "text"), "what is 2+2?");
    cJSON_Delete(j);
    j = line(2);
    ck_assert_str_eq(str(j, "type"), "assistant");
    cJSON_Delete(j);
    j = line(3);
    ck_assert_str_eq(str(j, "type"), "turn_end");
    ck_assert_str_eq(str(j, "finish"), "stop");
    ck_assert_double_eq(num(j, "message"), 9000000000.0);
    cJSON_Delete(j);
}
END_TEST

START_TEST(engine_events_map_to_their_types)
{
    const char *delta = "partial text, not NUL-terminated XYZ";
    glm_event evs[] = {
        {.type = GLM_EV_REASONING_DELTA, .text = "I think\n", .len = 8},
        {.type = GLM_EV_CONTENT_DELTA, .text = delta, .len = 12},
        {.type = GLM_EV_TOOL_CALL_BEGIN, .name = "read_file", .call_id = "call_1"},
        {.type = GLM_EV_TOOL_ARG_DELTA, .text = "{\"pa", .len = 4, .call_id = "call_1"},
        {.type = GLM_EV_TOOL_CALL_END, .name = "read_file", .call_id = "call_1",
         .text = "{\"path\": \"a b.txt\",\n \"n\": 3}", .len = 28},
        {.type = GLM_EV_TOOL_CALL_END, .name = "x", .text = "{broken", .len = 7},
        {.type = GLM_EV_STATS, .stats = {.prompt_tokens = 10, .reused_tokens = 4, .generated_tokens = 7,
                                         .ttft_s = 0.25, .prefill_tok_s = 100.5, .decode_tok_s = 20}},
        {.type = GLM_EV_DONE, .finish = "tool_calls", .stats = {.generated_tokens = 7}},
        {.type = GLM_EV_ERROR, .text = "peer stopped answering", .len = 22},
        {.type = GLM_EV_WAITING, .text = "the worker at 10.0.0.2:7070XYZ", .len = 27, .wait_s = 5.25},
        {.type = GLM_EV_WAITED, .text = "the worker at 10.0.0.2:7070", .len = 27, .wait_s = 7.5},
        {.type = GLM_EV_PROMPT, .prompt_done = 24576, .prompt_total = 65536},
    };
    for (size_t i = 0; i < sizeof evs / sizeof evs[0]; i++)
        ck_assert_int_eq(jsonl_event(&w, &evs[i]), 0);
    ck_assert_int_eq(jsonl_tool_result(&w, "call_1", "read_file", 1, "not_needed", "error: no such file"), 0);

    cJSON *j = line(0);
    ck_assert_str_eq(str(j, "type"), "reasoning");
    ck_assert_str_eq(str(j, "text"), "I think\n");
    cJSON_Delete(j);
    j = line(1);
    ck_assert_str_eq(str(j, "type"), "content");
    ck_assert_str_eq(str(j, "text"), "partial text");
    cJSON_Delete(j);
    j = line(2);
    ck_assert_str_eq(str(j, "type"), "tool_call_begin");
    ck_assert_str_eq(str(j, "id"), "call_1");
    ck_assert_str_eq(str(j, "name"), "read_file");
    cJSON_Delete(j);
    j = line(3);
    ck_assert_str_eq(str(j, "type"), "tool_call_delta");
    ck_assert_str_eq(str(j, "text"), "{\"pa");
    cJSON_Delete(j);
    j = line(4);
    ck_assert_str_eq(str(j, "type"), "tool_call");
    cJSON *args = cJSON_GetObjectItem(j, "arguments");
    ck_assert(cJSON_IsObject(args));
    ck_assert_str_eq(str(args, "path"), "a b.txt");
    ck_assert_int_eq((int)num(args, "n"), 3);
    cJSON_Delete(j);
    j = line(5);
    ck_assert(cJSON_IsNull(cJSON_GetObjectItem(j, "arguments")));
    ck_assert(cJSON_IsNull(cJSON_GetObjectItem(j, "id")));
    ck_assert_str_eq(str(j, "arguments_text"), "{broken");
    cJSON_Delete(j);
    j = line(6);
    ck_assert_str_eq(str(j, "type"), "stats");
    ck_assert_int_eq((int)num(j, "prompt_tokens"), 10);
    ck_assert_int_eq((int)num(j, "reused_tokens"), 4);
    ck_assert_double_eq_tol(num(j, "ttft_s"), 0.25, 1e-9);
    ck_assert_double_eq_tol(num(j, "prefill_tok_s"), 100.5, 1e-9);
    cJSON_Delete(j);
    j = line(7);
    ck_assert_str_eq(str(j, "type"), "done");
    ck_assert_str_eq(str(j, "finish"), "tool_calls");
    ck_assert_int_eq((int)num(j, "generated_tokens"), 7);
    cJSON_Delete(j);
    j = line(8);
    ck_assert_str_eq(str(j, "type"), "error");
    ck_assert_str_eq(str(j, "message"), "peer stopped answering");
    cJSON_Delete(j);
    j = line(9);
    ck_assert_str_eq(str(j, "type"), "waiting");
    ck_assert_str_eq(str(j, "for"), "the worker at 10.0.0.2:7070");
    ck_assert_double_eq_tol(num(j, "waited_s"), 5.25, 1e-9);
    cJSON_Delete(j);
    j = line(10);
    ck_assert_str_eq(str(j, "type"), "waited");
    ck_assert_str_eq(str(j, "for"), "the worker at 10.0.0.2:7070");
    ck_assert_double_eq_tol(num(j, "waited_s"), 7.5, 1e-9);
    cJSON_Delete(j);
    j = line(11);
    ck_assert_str_eq(str(j, "type"), "prompt");
    ck_assert_int_eq((int)num(j, "done"), 24576);
    ck_assert_int_eq((int)num(j, "total"), 65536);
    cJSON_Delete(j);
    j = line(12);
    ck_assert_str_eq(str(j, "type"), "tool_result");
    ck_assert(cJSON_IsTrue(cJSON_GetObjectItem(j, "is_error")));
    ck_assert_str_eq(str(j, "text"), "error: no such file");
    ck_assert_str_eq(str(j, "approval"), "not_needed");
    cJSON_Delete(j);
}
END_TEST

/* A client that concatenates a call's deltas gets exactly the text of its "arguments". */
START_TEST(call_deltas_add_up_to_the_arguments_text)
{
    static const char *const pieces[] = {"{\"ratio\":1.50", ",\"city\":\"Zürich\"", ",\"big\":1e400", "}"};
    char whole[128] = "";
    for (int i = 0; i < 4; i++) {
        glm_event d = {.type = GLM_EV_TOOL_ARG_DELTA, .text = pieces[i], .len = strlen(pieces[i]), .call_id = "c"};
        ck_assert_int_eq(jsonl_event(&w, &d), 0);
        strcat(whole, pieces[i]);
    }
    glm_event end = {.type = GLM_EV_TOOL_CALL_END, .name = "f", .call_id = "c", .text = whole, .len = strlen(whole)};
    ck_assert_int_eq(jsonl_event(&w, &end), 0);
    fflush(mem);
    char joined[128] = "";
    for (int i = 0; i < 4; i++) {
        cJSON *j = line(i);
        strcat(joined, str(j, "text"));
        cJSON_Delete(j);
    }
    ck_assert_str_eq(joined, whole);
    char want[160];
    snprintf(want, sizeof want, "\"arguments\":%s}\n", whole); /* as given, not re-printed as 1.5 */
    ck_assert_msg(strstr(buf, want) != NULL, "arguments re-printed: %s", buf);
}
END_TEST

START_TEST(strings_stay_valid_json_and_utf8)
{
    const char raw[] = "q\"b\\s/\x01\x1f\x7f tab\t nl\n caf\xC3\xA9 \xF0\x9F\x98\x80 bad\xFF\xC3 \xED\xA0\x80 end";
    glm_event ev = {.type = GLM_EV_CONTENT_DELTA, .text = raw, .len = sizeof raw - 1};
    ck_assert_int_eq(jsonl_event(&w, &ev), 0);
    cJSON *j = line(0);
    const char *t = str(j, "text");
    ck_assert_str_eq(t, "q\"b\\s/\x01\x1f\x7f tab\t nl\n caf\xC3\xA9 \xF0\x9F\x98\x80 bad\xEF\xBF\xBD\xEF\xBF\xBD "
                        "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD end");
    cJSON_Delete(j);
    fflush(mem);
    ck_assert_ptr_null(memchr(buf, '\n', len - 1)); /* the only newline ends the line */
}
END_TEST

/* One U+FFFD per maximal invalid subpart (base/utf8.h), as the model's tokenizer decodes: a
 * character cut short by the next byte is one replacement, where jsonl used to write one per byte. */
START_TEST(a_cut_character_is_one_replacement)
{
    const char raw[] = "cut\xE2\x82 short\xF0\x9F\x98!";
    glm_event ev = {.type = GLM_EV_CONTENT_DELTA, .text = raw, .len = sizeof raw - 1};
    ck_assert_int_eq(jsonl_event(&w, &ev), 0);
    cJSON *j = line(0);
    ck_assert_str_eq(str(j, "text"), "cut\xEF\xBF\xBD short\xEF\xBF\xBD!");
    cJSON_Delete(j);
}
END_TEST

START_TEST(a_failed_stream_reports_and_stops)
{
    FILE *full = fopen("/dev/full", "w");
    if (!full)
        return; /* no /dev/full here: nothing to test against */
    jsonl_writer fw;
    jsonl_init(&fw, full);
    ck_assert_int_eq(jsonl_error(&fw, "x"), -1);
    ck_assert_int_eq(fw.failed, 1);
    ck_assert_int_eq(jsonl_user(&fw, 1, "y"), -1);
    fclose(full);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("jsonl");
    TCase *tc = tcase_create("events");
    tcase_add_checked_fixture(tc, open_stream, close_stream);
    tcase_add_test(tc, session_user_assistant_and_turn_end);
    tcase_add_test(tc, engine_events_map_to_their_types);
    tcase_add_test(tc, call_deltas_add_up_to_the_arguments_text);
    tcase_add_test(tc, strings_stay_valid_json_and_utf8);
    tcase_add_test(tc, a_cut_character_is_one_replacement);
    tcase_add_test(tc, a_failed_stream_reports_and_stops);
    suite_add_tcase(s, tc);
    return test_run_suite(s);
}
