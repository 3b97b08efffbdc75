/* test_reply_parser.c: Check suite for the reply stream parser: seed.md 4.5's edge cases one by one,
 * then properties over random replies: any chunking gives the same events, and every byte is accounted
 * for as reply_parser_check.h states. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/text/reply_parser.h"
#include "engine/text/tbuf.h"
#include "tests/unit/reply_parser_check.h"
#include "tests/common/check_main.h"

typedef struct ev_rec {
    glm_event_type type;
    tbuf text;
    char name[128];
    char finish[32];
} ev_rec;

typedef struct ev_log {
    ev_rec ev[4096];
    int n;
    int cancel_at; /* cancel when this many events were seen (0: never) */
} ev_log;

static int is_delta(glm_event_type t)
{
    return t == GLM_EV_REASONING_DELTA || t == GLM_EV_CONTENT_DELTA || t == GLM_EV_TOOL_ARG_DELTA;
}

static int record(const glm_event *e, void *user)
{
    ev_log *log = user;
    ck_assert(e->type == GLM_EV_DONE || e->type == GLM_EV_TOOL_CALL_END || e->len > 0);
    if (log->n > 0 && is_delta(e->type) && log->ev[log->n - 1].type == e->type) { /* coalesce deltas */
        ck_assert_int_eq(tbuf_append(&log->ev[log->n - 1].text, e->text, e->len), GLM_OK);
    } else {
        ck_assert_int_lt(log->n, 4096);
        ev_rec *r = &log->ev[log->n++];
        memset(r, 0, sizeof *r);
        r->type = e->type;
        ck_assert_int_eq(tbuf_append(&r->text, e->text ? e->text : "", e->len), GLM_OK);
        if (e->name)
            snprintf(r->name, sizeof r->name, "%s", e->name);
        if (e->finish)
            snprintf(r->finish, sizeof r->finish, "%s", e->finish);
    }
    return log->cancel_at && log->n >= log->cancel_at;
}

static void log_free(ev_log *log)
{
    for (int i = 0; i < log->n; i++)
        tbuf_free(&log->ev[i].text);
    log->n = 0;
}

static const glm_tool TOOLS[] = {
    {"get_weather", "weather",
     "{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"},\"days\":{\"type\":\"integer\"},"
     "\"metric\":{\"type\":\"boolean\"},\"note\":{\"type\":[\"string\",\"null\"]},\"opts\":{\"type\":\"object\"},"
     "\"tags\":{\"type\":\"array\"},\"ratio\":{\"type\":\"number\"},\"mode\":{\"enum\":[\"a\",\"b\"]}}}"},
    {"f", NULL, "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":\"string\"}}}"},
};

/* Feeds text in pieces of the given sizes (cycled; 0 = all at once), then finishes. */
static void run(ev_log *log, const char *text, size_t len, const size_t *sizes, int n_sizes, int think,
                int tools, rp_end why)
{
    glm_error err = {0};
    rp_parser *p = rp_new(tools ? TOOLS : NULL, tools ? 2 : 0, think, record, log, &err);
    ck_assert_msg(p != NULL, "%s", err.message);
    size_t at = 0;
    for (int k = 0; at < len; k++) {
        size_t n = n_sizes ? sizes[k % n_sizes] : len;
        if (n > len - at)
            n = len - at;
        glm_status st = rp_feed(p, text + at, n, &err);
        if (st == GLM_ERR_CANCELED)
            break;
        ck_assert_int_eq(st, GLM_OK);
        at += n;
    }
    rp_finish(p, why, &err);
    rp_free(p);
}

static void run1(ev_log *log, const char *text, int think, int tools, rp_end why)
{
    run(log, text, strlen(text), NULL, 0, think, tools, why);
}

static void expect(ev_log *log, int i, glm_event_type type, const char *text)
{
    ck_assert_msg(i < log->n, "only %d events", log->n);
    ck_assert_msg(log->ev[i].type == type, "event %d: type %d, want %d", i, log->ev[i].type, type);
    if (text)
        ck_assert_msg(strcmp(log->ev[i].text.p, text) == 0, "event %d: text '%s', want '%s'", i, log->ev[i].text.p,
                      text);
}

static const char *done(ev_log *log)
{
    ck_assert_int_gt(log->n, 0);
    ck_assert_int_eq(log->ev[log->n - 1].type, GLM_EV_DONE);
    return log->ev[log->n - 1].finish;
}

START_TEST(reasoning_then_content)
{
    ev_log log = {0};
    run1(&log, "let me think</think>\n\nThe answer.", 1, 1, RP_END_TOKEN);
    expect(&log, 0, GLM_EV_REASONING_DELTA, "let me think");
    expect(&log, 1, GLM_EV_CONTENT_DELTA, "The answer.");
    ck_assert_str_eq(done(&log), "stop");
    log_free(&log);
    run1(&log, "<think>x</think>y", 0, 1, RP_END_TOKEN); /* thinking off: text, less the markup */
    expect(&log, 0, GLM_EV_CONTENT_DELTA, "<think>xy");
    log_free(&log);
}
END_TEST

START_TEST(stray_think_end_is_dropped)
{
    ev_log log = {0};
    static const size_t one[] = {1};
    const char *a = "</think>\n\nThe answer.";
    for (int tools = 0; tools < 2; tools++) { /* thinking off, whole and byte by byte */
        run1(&log, a, 0, tools, RP_END_TOKEN);
        expect(&log, 0, GLM_EV_CONTENT_DELTA, "The answer.");
        ck_assert_int_eq(log.n, 2);
        log_free(&log);
        run(&log, a, strlen(a), one, 1, 0, tools, RP_END_TOKEN);
        expect(&log, 0, GLM_EV_CONTENT_DELTA, "The answer.");
        log_free(&log);
    }
    run1(&log, "One</think>\ntwo", 0, 0, RP_END_TOKEN); /* mid-answer: the newline is text */
    expect(&log, 0, GLM_EV_CONTENT_DELTA, "One\ntwo");
    log_free(&log);
    run1(&log, "r</think>\n\nA</think>B</thi", 1, 0, RP_END_TOKEN); /* thinking on: a second one too */
    expect(&log, 0, GLM_EV_REASONING_DELTA, "r");
    expect(&log, 1, GLM_EV_CONTENT_DELTA, "AB</thi");
    log_free(&log);
}
END_TEST

START_TEST(tool_call_typed_by_schema)
{
    ev_log log = {0};
    run1(&log,
         "</think>Checking.<tool_call>get_weather\n<arg_key>city</arg_key><arg_value>Paris</arg_value>"
         "<arg_key>days</arg_key><arg_value>3</arg_value><arg_key>metric</arg_key><arg_value>true</arg_value>"
         "<arg_key>note</arg_key><arg_value>null</arg_value><arg_key>tags</arg_key><arg_value>[\"a\", 1]"
         "</arg_value><arg_key>ratio</arg_key><arg_value>0.5</arg_value><arg_key>mode</arg_key><arg_value>b"
         "</arg_value><arg_key>extra</arg_key><arg_value>{\"x\": 1}</arg_value></tool_call>",
         1, 1, RP_END_TOKEN);
    expect(&log, 0, GLM_EV_CONTENT_DELTA, "Checking.");
    expect(&log, 1, GLM_EV_TOOL_CALL_BEGIN, "<tool_call>get_weather\n");
    ck_assert_str_eq(log.ev[1].name, "get_weather");
    const char *json = "{\"city\":\"Paris\",\"days\":3,\"metric\":true,\"note\":null,\"tags\":[\"a\",1],"
                       "\"ratio\":0.5,\"mode\":\"b\",\"extra\":{\"x\":1}}";
    expect(&log, 2, GLM_EV_TOOL_ARG_DELTA, json); /* the deltas are the arguments' JSON, not GLM's tags */
    expect(&log, 3, GLM_EV_TOOL_CALL_END, json);
    ck_assert_str_eq(done(&log), "tool_calls");
    log_free(&log);
}
END_TEST

START_TEST(call_inside_think_ending_the_reply)
{
    ev_log log = {0};
    run1(&log, "I should call f.<tool_call>f<arg_key>a</arg_key><arg_value>1</arg_value></tool_call>", 1, 1,
         RP_END_TOKEN);
    expect(&log, 0, GLM_EV_REASONING_DELTA, "I should call f.");
    expect(&log, 1, GLM_EV_TOOL_CALL_BEGIN, "<tool_call>f");
    expect(&log, 3, GLM_EV_TOOL_CALL_END, "{\"a\":1}");
    ck_assert_str_eq(done(&log), "tool_calls");
    log_free(&log);
    /* the same call, but the think block goes on: it was reasoning */
    run1(&log, "a<tool_call>f</tool_call>b</think>c", 1, 1, RP_END_TOKEN);
    expect(&log, 0, GLM_EV_REASONING_DELTA, "a<tool_call>f</tool_call>b");
    expect(&log, 1, GLM_EV_CONTENT_DELTA, "c");
    ck_assert_str_eq(done(&log), "stop");
    log_free(&log);
    /* cut by the budget while held: reasoning, no call */
    run1(&log, "a<tool_call>f<arg_key>a</arg_key>", 1, 1, RP_LENGTH);
    expect(&log, 0, GLM_EV_REASONING_DELTA, "a<tool_call>f<arg_key>a</arg_key>");
    ck_assert_str_eq(done(&log), "length");
    log_free(&log);
}
END_TEST

START_TEST(cut_inside_a_call_and_unclosed_calls)
{
    ev_log log = {0};
    run1(&log, "</think><tool_call>f<arg_key>a</arg_key><arg_value>12", 1, 1, RP_LENGTH);
    expect(&log, 0, GLM_EV_TOOL_CALL_BEGIN, "<tool_call>f");
    ck_assert_str_eq(done(&log), "length");
    ck_assert_int_eq(log.n, 2); /* no TOOL_CALL_END, and no JSON for a value still open */
    log_free(&log);
    /* a pair is given out as JSON as soon as its value closes, before the call ends */
    run1(&log, "</think><tool_call>f<arg_key>a</arg_key><arg_value>1</arg_value><arg_key>b</arg_key><arg_value>x",
         1, 1, RP_LENGTH);
    expect(&log, 1, GLM_EV_TOOL_ARG_DELTA, "{\"a\":1");
    ck_assert_int_eq(log.n, 3);
    log_free(&log);
    run1(&log, "</think><tool_call>f<arg_key>a</arg_key><arg_value>12", 1, 1, RP_END_TOKEN);
    expect(&log, 2, GLM_EV_TOOL_CALL_END, "{\"a\":12}");
    ck_assert_str_eq(done(&log), "tool_calls");
    log_free(&log);
    run1(&log, "</think><tool_call>f", 1, 1, RP_END_TOKEN); /* no arguments at all */
    expect(&log, 0, GLM_EV_TOOL_CALL_BEGIN, "<tool_call>f");
    expect(&log, 1, GLM_EV_TOOL_ARG_DELTA, "{}");
    expect(&log, 2, GLM_EV_TOOL_CALL_END, "{}");
    log_free(&log);
    /* a key written twice keeps its first value: the deltas already carried it */
    run1(&log, "<tool_call>f<arg_key>a</arg_key><arg_value>1</arg_value><arg_key>a</arg_key><arg_value>2"
               "</arg_value></tool_call>", 0, 1, RP_END_TOKEN);
    expect(&log, 1, GLM_EV_TOOL_ARG_DELTA, "{\"a\":1}");
    expect(&log, 2, GLM_EV_TOOL_CALL_END, "{\"a\":1}");
    log_free(&log);
}
END_TEST

START_TEST(missing_arg_key_and_short_bracket)
{
    ev_log log = {0};
    run1(&log,
         "<tool_call>f<arg_key>a</arg_key><arg_value>1</arg_value>\nb</arg_key><arg_value>x y</arg_value>"
         "</tool_call>",
         0, 1, RP_END_TOKEN);
    expect(&log, 2, GLM_EV_TOOL_CALL_END, "{\"a\":1,\"b\":\"x y\"}");
    log_free(&log);
    run1(&log,
         "<tool_call>get_weather<arg_key>opts</arg_key><arg_value>{\"k\": [1, 2]</arg_value><arg_key>tags"
         "</arg_key><arg_value>[1, [2]</arg_value></tool_call>",
         0, 1, RP_END_TOKEN);
    expect(&log, 2, GLM_EV_TOOL_CALL_END, "{\"opts\":{\"k\":[1,2]},\"tags\":[1,[2]]}");
    log_free(&log);
}
END_TEST

START_TEST(mentioned_tags_and_unknown_tools)
{
    ev_log log = {0};
    run1(&log, "Use the <tool_call> tag, like `<tool_call>`.", 0, 1, RP_END_TOKEN);
    expect(&log, 0, GLM_EV_CONTENT_DELTA, "Use the <tool_call> tag, like `<tool_call>`.");
    ck_assert_int_eq(log.n, 2);
    ck_assert_str_eq(done(&log), "stop");
    log_free(&log);
    run1(&log, "<tool_call>other_tool<arg_key>x</arg_key><arg_value>[1]</arg_value></tool_call>", 0, 1,
         RP_END_TOKEN);
    expect(&log, 0, GLM_EV_TOOL_CALL_BEGIN, NULL);
    ck_assert_str_eq(log.ev[0].name, "other_tool");
    expect(&log, 2, GLM_EV_TOOL_CALL_END, "{\"x\":[1]}");
    log_free(&log);
    run1(&log, "<tool_call>not a name</tool_call>", 0, 1, RP_END_TOKEN);
    expect(&log, 0, GLM_EV_CONTENT_DELTA, "<tool_call>not a name</tool_call>");
    log_free(&log);
}
END_TEST

START_TEST(calls_while_tools_are_off)
{
    ev_log log = {0};
    static const size_t one[] = {1};
    const char *a = "Let me look.\n<tool_call>get_weather\n<arg_key>city</arg_key><arg_value>Paris</arg_value>"
                    "</tool_call>\nDone.";
    for (int chunked = 0; chunked < 2; chunked++) {
        run(&log, a, strlen(a), one, chunked, 0, 0, RP_END_TOKEN);
        expect(&log, 0, GLM_EV_CONTENT_DELTA,
               "Let me look.\n[the model asked for tool get_weather, but tools are off]\nDone.");
        ck_assert_int_eq(log.n, 2);
        ck_assert_str_eq(done(&log), "stop");
        log_free(&log);
    }
    run1(&log, "<tool_call>f</tool_call>", 0, 0, RP_END_TOKEN);
    expect(&log, 0, GLM_EV_CONTENT_DELTA, "[the model asked for tool f, but tools are off]");
    log_free(&log);
    run1(&log, "<tool_call>f", 0, 0, RP_END_TOKEN); /* no arguments, ended by the end token */
    expect(&log, 0, GLM_EV_CONTENT_DELTA, "[the model asked for tool f, but tools are off]");
    log_free(&log);
    run1(&log, "x<tool_call>f<arg_key>a</arg_key><arg_value>1", 0, 0, RP_LENGTH); /* cut by the budget */
    expect(&log, 0, GLM_EV_CONTENT_DELTA, "x[the model asked for tool f, but tools are off]");
    ck_assert_str_eq(done(&log), "length");
    log_free(&log);
    run1(&log, "Write <tool_call> to call one.", 0, 0, RP_END_TOKEN); /* a mention stays text */
    expect(&log, 0, GLM_EV_CONTENT_DELTA, "Write <tool_call> to call one.");
    log_free(&log);
}
END_TEST

START_TEST(cancel_from_the_reader)
{
    ev_log log = {.cancel_at = 1};
    run1(&log, "abc</think>def", 1, 1, RP_END_TOKEN);
    ck_assert_str_eq(done(&log), "canceled");
    ck_assert_int_eq(log.n, 2);
    log_free(&log);
}
END_TEST

/* ---- properties over random replies ---- */

static void rnd_reply(unsigned *seed, tbuf *out)
{
    static const char *const frags[] = {
        "word ", "思考 ", "🙂", "\n", "\n\n", "</think>", "</thi", "<tool_call>", "<tool", "</tool_call>",
        "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>", "f", "get_weather", "city", "Paris", "{\"k\": [1",
        "]", "}", "null", "true", "42", " ", "<", ">", "unknown_fn", "a b", "`", "<think>",
        "<tool_call>f<arg_key>a</arg_key><arg_value>7</arg_value></tool_call>",
        "<tool_call>get_weather<arg_key>days</arg_key><arg_value>2</arg_value><arg_key>city</arg_key>"
        "<arg_value>Oslo</arg_value></tool_call>"};
    int n = (int)(rand_r(seed) % 30) + 1;
    for (int i = 0; i < n; i++)
        ck_assert_int_eq(tbuf_puts(out, frags[rand_r(seed) % (sizeof frags / sizeof frags[0])]), GLM_OK);
}

static int same_events(const ev_log *a, const ev_log *b)
{
    if (a->n != b->n)
        return 0;
    for (int i = 0; i < a->n; i++)
        if (a->ev[i].type != b->ev[i].type || a->ev[i].text.len != b->ev[i].text.len ||
            memcmp(a->ev[i].text.p, b->ev[i].text.p, a->ev[i].text.len) != 0 ||
            strcmp(a->ev[i].name, b->ev[i].name) != 0 || strcmp(a->ev[i].finish, b->ev[i].finish) != 0)
            return 0;
    return 1;
}

static int conserved(const ev_log *log, const char *text, size_t len, int think, int tools, char *why,
                     size_t why_len)
{
    static rpc_piece pieces[4096];
    for (int i = 0; i < log->n; i++)
        pieces[i] = (rpc_piece){log->ev[i].type, log->ev[i].text.p, log->ev[i].text.len};
    return rpc_conserved(text, len, think, tools, pieces, log->n, why, why_len);
}

START_TEST(any_chunking_gives_the_same_events)
{
    unsigned seed = 12345;
    int checked = 0;
    for (int iter = 0; iter < 3000; iter++) {
        tbuf text = {0};
        rnd_reply(&seed, &text);
        int think = rand_r(&seed) % 2, tools = rand_r(&seed) % 4 != 0;
        rp_end why = (rp_end)(rand_r(&seed) % 2);
        ev_log *whole = calloc(1, sizeof *whole), *split = calloc(1, sizeof *split);
        ck_assert(whole && split);
        run(whole, text.p, text.len, NULL, 0, think, tools, why);
        char reason[512];
        ck_assert_msg(conserved(whole, text.p, text.len, think, tools, reason, sizeof reason),
                      "not accounted for: %s: '%s' (think %d, tools %d)", reason, text.p, think, tools);
        for (int trial = 0; trial < 4; trial++) {
            size_t sizes[8];
            int ns = (int)(rand_r(&seed) % 8) + 1;
            for (int k = 0; k < ns; k++)
                sizes[k] = trial == 0 ? 1 : (size_t)(rand_r(&seed) % 13) + 1;
            run(split, text.p, text.len, sizes, trial == 0 ? 1 : ns, think, tools, why);
            ck_assert_msg(same_events(whole, split), "chunking changed the events of '%s' (think %d tools %d)",
                          text.p, think, tools);
            log_free(split);
            checked++;
        }
        log_free(whole);
        free(whole);
        free(split);
        tbuf_free(&text);
    }
    fprintf(stderr, "reply parser: 3000 random replies, %d re-chunkings, all equal and conserved\n", checked);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("reply_parser");
    TCase *tc = tcase_create("parser");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, reasoning_then_content);
    tcase_add_test(tc, stray_think_end_is_dropped);
    tcase_add_test(tc, tool_call_typed_by_schema);
    tcase_add_test(tc, call_inside_think_ending_the_reply);
    tcase_add_test(tc, cut_inside_a_call_and_unclosed_calls);
    tcase_add_test(tc, missing_arg_key_and_short_bracket);
    tcase_add_test(tc, mentioned_tags_and_unknown_tools);
    tcase_add_test(tc, calls_while_tools_are_off);
    tcase_add_test(tc, cancel_from_the_reader);
    tcase_add_test(tc, any_chunking_gives_the_same_events);
    suite_add_tcase(s, tc);
    return test_run_suite(s);
}
