/* test_transcript.c: ui/transcript.c, the TUI's model, with the clock given by the test:
 * thinking folds when the answer starts, tool calls and approvals, rates, footers, layout. */
#include <check.h>
#include <locale.h>
#include <stdlib.h>
#include <string.h>

#include "ui/transcript.h"
#include "tests/common/check_main.h"

static transcript tr;

static void setup(void)
{
    trs_init(&tr);
}

static void teardown(void)
{
    trs_free(&tr);
}

static void ev_at(double now, int type, const char *id, const char *name, const char *text)
{
    uiq_item ev;
    memset(&ev, 0, sizeof ev);
    ev.type = type;
    ev.id = (char *)id;
    ev.name = (char *)name;
    ev.text = (char *)(text ? text : "");
    ev.len = strlen(ev.text);
    ev.status = ui_status_none();
    trs_apply(&tr, &ev, now);
}

static void ev(double now, int type, const char *text)
{
    ev_at(now, type, NULL, NULL, text);
}

/* The status line's reply state at time now. */
static const char *state(double now)
{
    static char out[300];
    trs_reply_state(&tr, now, out, sizeof out);
    return out;
}

/* The app pushes status s (ui_status_none's fields "unchanged" where not set) at time now. */
static void status_at(double now, ui_status s)
{
    uiq_item st;
    memset(&st, 0, sizeof st);
    st.type = UI_EV_STATUS;
    st.status = s;
    trs_apply(&tr, &st, now);
}

/* The app says the reply waits for who, waited_s so far. */
static void waiting(double now, const char *who, double waited_s)
{
    ui_status s = ui_status_none();
    s.waiting = who;
    s.waited_s = waited_s;
    status_at(now, s);
}

/* The text of line l of a doc. */
static const char *line_of(const rd_doc *d, size_t l)
{
    static char out[1024];
    size_t o = 0;
    for (size_t k = 0; k < d->lines[l].nseg; k++) {
        const rd_seg *sg = &d->segs[d->lines[l].seg0 + k];
        memcpy(out + o, d->text + sg->off, sg->len);
        o += sg->len;
    }
    out[o] = '\0';
    return out;
}

static const char *header_of(size_t idx, double now)
{
    static char out[1024];
    rd_doc d = {0};
    trs_item_header(&tr, idx, 60, now, &d);
    strcpy(out, d.nlines ? line_of(&d, 0) : "");
    rd_doc_free(&d);
    return out;
}

START_TEST(thinking_folds_when_answer_starts)
{
    ev(0.0, UI_EV_USER, "hi");
    ev(0.0, UI_EV_REPLY_BEGIN, NULL);
    ev(0.5, UI_EV_REASONING_DELTA, "let me ");
    ev(0.6, UI_EV_REASONING_DELTA, "think");
    ck_assert_uint_eq(tr.n, 2); /* one thought for both deltas */
    trs_item *th = tr.items[1];
    ck_assert_int_eq(th->kind, TRS_THINK);
    ck_assert_int_eq(th->live, 1);
    ck_assert_int_eq(th->open, 1); /* shown while it streams */
    ck_assert_str_eq(th->text.s, "let me think");
    ck_assert_str_eq(state(tr.now), "\xe2\x97\x8f thinking");
    ck_assert_ptr_nonnull(strstr(header_of(1, 1.7), "thinking\xe2\x80\xa6 1.2 s"));
    ev(2.5, UI_EV_CONTENT_DELTA, "Answer");
    ck_assert_int_eq(th->live, 0);
    ck_assert_int_eq(th->open, 0); /* folded */
    ck_assert_ptr_nonnull(strstr(header_of(1, 9.0), "thought for 2.0 s"));
    ck_assert_int_eq(trs_body_shown(th), 0);
    ck_assert_int_eq(trs_blank_before(&tr, 1), 1);   /* a blank line after the user's */
    ck_assert_int_eq(trs_item_lines(&tr, 1, 60), 2); /* and the header only */
    ck_assert_int_eq(tr.items[2]->kind, TRS_TEXT);
    ck_assert_str_eq(state(tr.now), "\xe2\x97\x8f writing");
    /* unfold and fold */
    ck_assert_int_eq(trs_toggle(&tr), 1);
    ck_assert_int_eq(trs_item_lines(&tr, 1, 60), 3);
    ck_assert_int_eq(trs_toggle(&tr), 1);
    ck_assert_int_eq(trs_item_lines(&tr, 1, 60), 2);
}
END_TEST

START_TEST(pinned_thinking_stays_open)
{
    ev(0.0, UI_EV_REPLY_BEGIN, NULL);
    ev(0.1, UI_EV_REASONING_DELTA, "a");
    trs_toggle(&tr); /* the user folds it while it streams */
    trs_toggle(&tr); /* and opens it again: their choice wins */
    ev(0.2, UI_EV_CONTENT_DELTA, "b");
    ck_assert_int_eq(tr.items[0]->open, 1);
}
END_TEST

/* The app says how far the reply's prompt is. */
static void prompt(double now, long done, long total)
{
    ui_status s = ui_status_none();
    s.prompt_done = done;
    s.prompt_total = total;
    status_at(now, s);
}

/* A long prompt's prefill shows its share and tokens until the first token, and from its second
 * report the time left at the rate since the first (never under 1 s); the next reply starts
 * with none; progress told outside a reply is dropped. */
START_TEST(prefill_progress_until_the_first_token)
{
    prompt(9.0, 10, 100); /* no reply yet */
    ev(10.0, UI_EV_REPLY_BEGIN, NULL);
    ck_assert_str_eq(state(tr.now), "\xe2\x97\x8f prefill");
    prompt(10.1, 0, 65536);
    ck_assert_str_eq(state(tr.now), "\xe2\x97\x8f prefill 0% 0/65536"); /* no rate yet */
    prompt(12.0, 24576, 65536); /* 24,576 tokens in 1.9 s: 40,960 to go, 3.2 s at that rate */
    ck_assert_str_eq(state(12.0), "\xe2\x97\x8f prefill 37% 24576/65536 \xc2\xb7 3 s left");
    ck_assert_str_eq(state(14.5), "\xe2\x97\x8f prefill 37% 24576/65536 \xc2\xb7 1 s left"); /* late */
    ev(14.0, UI_EV_CONTENT_DELTA, "a");
    ck_assert_str_eq(state(tr.now), "\xe2\x97\x8f writing");
    ev(15.0, UI_EV_FINISH, "stop");
    ev(16.0, UI_EV_REPLY_BEGIN, NULL);
    ck_assert_str_eq(state(tr.now), "\xe2\x97\x8f prefill");
}
END_TEST

START_TEST(rates_measured_from_deltas)
{
    ev(10.0, UI_EV_REPLY_BEGIN, NULL);
    ck_assert_str_eq(state(tr.now), "\xe2\x97\x8f prefill");
    ev(10.25, UI_EV_CONTENT_DELTA, "a");
    ck_assert(tr.ttft > 0.2499 && tr.ttft < 0.2501);
    for (int i = 1; i <= 20; i++)
        ev(10.25 + i * 0.05, UI_EV_CONTENT_DELTA, "x");
    ck_assert(tr.tok_s > 19.99 && tr.tok_s < 20.01); /* 20 deltas in 1 s */
    ck_assert_int_eq(tr.gen_tokens, 21);
    /* the engine's own numbers win once the app reports them */
    ui_status st = ui_status_none();
    st.tok_s = 55.5;
    st.gen_tokens = 30;
    status_at(11.4, st);
    ev(11.5, UI_EV_CONTENT_DELTA, "y");
    ck_assert(tr.tok_s > 55.49 && tr.tok_s < 55.51);
    ck_assert_int_eq(tr.gen_tokens, 30);
    ev(11.6, UI_EV_FINISH, "stop");
    ck_assert_int_eq(tr.streaming, 0);
    trs_item *f = tr.items[tr.n - 1];
    ck_assert_int_eq(f->kind, TRS_FOOTER);
    ck_assert_str_eq(f->text.s, "30 tokens \xc2\xb7 55.5 tok/s \xc2\xb7 TTFT 0.25 s");
}
END_TEST

START_TEST(waiting_for_a_late_worker)
{
    ev(0.0, UI_EV_REPLY_BEGIN, NULL);
    ev(0.2, UI_EV_REASONING_DELTA, "hm");
    waiting(6.0, "the worker at 10.0.0.2:7070", 5.2); /* the wait began 5.2 s before it was said */
    ck_assert_str_eq(state(6.0), "\xe2\x97\x8f waiting 5 s for the worker at 10.0.0.2:7070");
    ck_assert_str_eq(state(13.9), "\xe2\x97\x8f waiting 13 s for the worker at 10.0.0.2:7070");
    ck_assert_str_eq(tr.items[0]->text.s, "hm"); /* nothing added to the reply */
    ck_assert_uint_eq(tr.n, 1);
    waiting(13.95, "", 13.0); /* the worker came */
    ck_assert_str_eq(state(13.95), "\xe2\x97\x8f thinking");
    waiting(13.96, "the worker at 10.0.0.2:7070", 5.1); /* late again, a new clock */
    ck_assert_str_eq(state(14.0), "\xe2\x97\x8f waiting 5 s for the worker at 10.0.0.2:7070");
    ev(14.0, UI_EV_REASONING_DELTA, " ok"); /* the reply moves on */
    ck_assert_str_eq(state(14.0), "\xe2\x97\x8f thinking");
    ck_assert_str_eq(tr.items[0]->text.s, "hm ok"); /* the same thought goes on */
    waiting(20.0, "the worker at 10.0.0.2:7070", 5.0);
    ev(21.0, UI_EV_FINISH, "canceled"); /* canceled while waiting */
    ck_assert_str_eq(state(21.0), "ready");
    waiting(22.0, "the worker at 10.0.0.2:7070", 5.0); /* said after the reply ended: over */
    ck_assert_str_eq(state(22.0), "ready");
    ck_assert_ptr_null(tr.waiting);
    ev(30.0, UI_EV_REPLY_BEGIN, NULL);
    waiting(36.0, "the worker at 10.0.0.2:7070", 5.0);
    ev(36.5, UI_EV_TOOL_BEGIN, NULL); /* a tool call moves it on too */
    ck_assert_ptr_null(tr.waiting);
}
END_TEST

START_TEST(status_fields_merge)
{
    ui_status st = ui_status_none();
    st.model = "GLM-5.3-Flash";
    st.ranks = 2;
    st.ctx_window = 1048576;
    status_at(0, st);
    st = ui_status_none();
    st.ctx_used = 1200;
    status_at(0, st);
    ck_assert_str_eq(tr.model, "GLM-5.3-Flash"); /* unchanged by the second push */
    ck_assert_int_eq(tr.ranks, 2);
    ck_assert_int_eq(tr.ctx_used, 1200);
    ck_assert_int_eq(tr.ctx_window, 1048576);
}
END_TEST

START_TEST(tool_call_with_approval)
{
    ev(0, UI_EV_REPLY_BEGIN, NULL);
    ev(0.1, UI_EV_REASONING_DELTA, "need a file");
    ev_at(0.2, UI_EV_TOOL_BEGIN, "c1", "read_file", NULL);
    ck_assert_int_eq(tr.items[0]->live, 0); /* a tool call ends the thought too */
    ev_at(0.3, UI_EV_TOOL_ARGS_DELTA, "c1", NULL, "{\"path\":");
    ev_at(0.4, UI_EV_TOOL_ARGS_DELTA, "c1", NULL, " \"a.txt\"}");
    trs_item *tool = tr.items[1];
    ck_assert_str_eq(tool->text.s, "{\"path\": \"a.txt\"}");
    ck_assert_int_eq(tool->tstate, TOOL_ARGS);
    ev_at(0.5, UI_EV_TOOL_END, "c1", NULL, "{\"path\":\"a.txt\"}");
    ck_assert_str_eq(tool->text.s, "{\"path\":\"a.txt\"}");
    ev_at(0.6, UI_EV_TOOL_APPROVE, "c1", NULL, "Read a.txt?");
    ck_assert_int_eq(tr.ask, 1);
    ck_assert_str_eq(state(tr.now), "\xe2\x97\x8f approve? y/c/a/n");
    /* the question shows even while the call is folded */
    ck_assert_int_eq(trs_item_lines(&tr, 1, 80), 3);
    ck_assert_str_eq(line_of(&tool->body, 0), "  ? Read a.txt?");
    ck_assert_ptr_nonnull(strstr(header_of(1, 1.0), "read_file {\"path\":\"a.txt\"}  waiting for you"));
    const trs_item *a = trs_answer(&tr, 'y', 5.0); /* the user took 4.4 s to answer */
    ck_assert_ptr_nonnull(a);
    ck_assert_str_eq(a->id, "c1");
    ck_assert_int_eq(tr.ask, -1);
    ck_assert_ptr_null(trs_answer(&tr, 'y', 5.0)); /* nothing waits any more */
    ev_at(5.5, UI_EV_TOOL_RESULT, "c1", NULL, "line one\nline two");
    ck_assert_int_eq(tool->tstate, TOOL_OK);
    /* the tool's time is its run after the answer, not the wait for it */
    ck_assert_ptr_nonnull(strstr(header_of(1, 6.0), "\xe2\x9c\x93 0.5 s"));
    ck_assert_int_eq(trs_item_lines(&tr, 1, 60), 1); /* folded: one line */
    ck_assert_int_eq(trs_toggle(&tr), 1);             /* the last foldable: the tool */
    ck_assert_int_gt(trs_item_lines(&tr, 1, 60), 4);  /* arguments and result */
    ev_at(5.6, UI_EV_TOOL_BEGIN, "c2", "shell", NULL);
    ev_at(5.7, UI_EV_TOOL_ERROR, "c2", NULL, "no such command");
    ck_assert_int_eq(tr.items[2]->tstate, TOOL_FAILED);
    ck_assert_ptr_nonnull(strstr(header_of(2, 6.0), "\xe2\x9c\x97 failed"));
    ck_assert_str_eq(tr.items[1]->result.s, "line one\nline two"); /* c1 untouched */
    /* answered no: it never ran, and says so, also once its error result arrives */
    ev_at(5.8, UI_EV_TOOL_BEGIN, "c3", "shell", NULL);
    ev_at(5.9, UI_EV_TOOL_APPROVE, "c3", NULL, "Run it?");
    ck_assert_ptr_nonnull(trs_answer(&tr, 'n', 6.0));
    ck_assert_int_eq(tr.items[3]->tstate, TOOL_DENIED);
    ev_at(6.1, UI_EV_TOOL_ERROR, "c3", NULL, "error: the user did not allow this call of shell");
    ck_assert_int_eq(tr.items[3]->tstate, TOOL_DENIED);
    ck_assert_ptr_nonnull(strstr(header_of(3, 6.2), "\xe2\x9c\x97 not run: you said no"));
    ck_assert_ptr_null(strstr(header_of(3, 6.2), "failed"));
}
END_TEST

START_TEST(cancel_footer_and_pending_question)
{
    ev(0, UI_EV_REPLY_BEGIN, NULL);
    ev(0.1, UI_EV_CONTENT_DELTA, "partial");
    ev_at(0.2, UI_EV_TOOL_BEGIN, "c1", "x", NULL);
    ev_at(0.3, UI_EV_TOOL_APPROVE, "c1", NULL, "ok?");
    ev(0.4, UI_EV_FINISH, "canceled");
    ck_assert_int_eq(tr.ask, -1);
    ck_assert_int_eq(tr.items[1]->tstate, TOOL_FAILED);
    ck_assert_str_eq(tr.items[0]->text.s, "partial"); /* kept */
    ck_assert_ptr_nonnull(strstr(tr.items[tr.n - 1]->text.s, "canceled"));
    ck_assert_str_eq(state(tr.now), "ready");
}
END_TEST

/* A reply cut at the token limit says how to raise it, and whether any answer came before it
 * (a thinking-only reply shows nothing but its folded thought). */
START_TEST(length_footer_says_how_to_raise_it)
{
    ev(0, UI_EV_REPLY_BEGIN, NULL);
    ev(0.1, UI_EV_REASONING_DELTA, "thinking and thinking");
    ev(0.2, UI_EV_FINISH, "length");
    const char *f = tr.items[tr.n - 1]->text.s;
    ck_assert_ptr_nonnull(strstr(f, "stopped at the token limit before any answer"));
    ck_assert_ptr_nonnull(strstr(f, "/set max_tokens N raises it"));
    ev(1, UI_EV_REPLY_BEGIN, NULL);
    ev(1.1, UI_EV_CONTENT_DELTA, "part of an answer");
    ev(1.2, UI_EV_FINISH, "length");
    f = tr.items[tr.n - 1]->text.s;
    ck_assert_ptr_nonnull(strstr(f, "stopped at the token limit (/set max_tokens N raises it)"));
    ck_assert_ptr_null(strstr(f, "before any answer"));
    ev(2, UI_EV_REPLY_BEGIN, NULL);
    ev(2.1, UI_EV_CONTENT_DELTA, "done");
    ev(2.2, UI_EV_FINISH, "stop");
    ck_assert_ptr_null(strstr(tr.items[tr.n - 1]->text.s, "token limit"));
}
END_TEST

START_TEST(selection_and_copy)
{
    ev(0, UI_EV_USER, "q1");
    ev(0, UI_EV_REPLY_BEGIN, NULL);
    ev(0, UI_EV_REASONING_DELTA, "t1");
    ev(0, UI_EV_CONTENT_DELTA, "first answer");
    ev(0, UI_EV_FINISH, "stop");
    ev(0, UI_EV_USER, "q2");
    ev(0, UI_EV_REPLY_BEGIN, NULL);
    ev(0, UI_EV_REASONING_DELTA, "t2");
    ev(0, UI_EV_CONTENT_DELTA, "second ");
    ev_at(0, UI_EV_TOOL_BEGIN, "c", "f", NULL);
    ev(0, UI_EV_CONTENT_DELTA, "answer");
    ev(0, UI_EV_FINISH, "stop");
    /* items: 0 q1, 1 t1, 2 text, 3 footer, 4 q2, 5 t2, 6 text, 7 tool, 8 text, 9 footer */
    ck_assert_int_eq(trs_select_step(&tr, -1), 7);
    ck_assert_int_eq(trs_select_step(&tr, -1), 5);
    ck_assert_int_eq(trs_select_step(&tr, -1), 1);
    ck_assert_int_eq(trs_select_step(&tr, -1), 1); /* stays at the first */
    ck_assert_int_eq(trs_toggle(&tr), 1);
    ck_assert_int_eq(tr.items[1]->open, 1);
    ck_assert_int_eq(trs_select_step(&tr, 1), 5);
    ck_assert_int_eq(trs_select_step(&tr, 1), 7);
    ck_assert_int_eq(trs_select_step(&tr, 1), -1); /* past the last: no selection */
    size_t len;
    char *last = trs_last_reply(&tr, &len);
    ck_assert_str_eq(last, "second answer"); /* the whole last reply, raw */
    ck_assert_uint_eq(len, 13);
    free(last);
    ev(0, UI_EV_CLEAR, NULL);
    ck_assert_uint_eq(tr.n, 0);
    ck_assert_ptr_null(trs_last_reply(&tr, &len));
    ck_assert_int_eq(trs_toggle(&tr), -1);
}
END_TEST

START_TEST(streamed_answer_layout_equals_whole)
{
    /* The answer is laid out as deltas arrive (complete lines cached); at every step the
     * lines must equal a fresh layout of the text so far. */
    const char *md = "# Plan\nFirst **step** with `code`\n```py\nprint('x')\n\n```\n- one\n- two two two two\n"
                     "| k | value |\n|---|---|\n| 1 | long |\n| 22 | x |\n\nend";
    size_t len = strlen(md);
    ev(0, UI_EV_REPLY_BEGIN, NULL);
    char piece[4] = {0};
    for (size_t i = 0; i < len; i += 3) {
        size_t n = len - i < 3 ? len - i : 3;
        memcpy(piece, md + i, n);
        piece[n] = '\0';
        ev(0, UI_EV_CONTENT_DELTA, piece);
        trs_item *it = tr.items[0];
        int w = 12 + (int)(i % 7); /* the width changes now and then, as on resize */
        trs_item_lines(&tr, 0, w);
        rd_doc fresh = {0};
        rd_md_state st = {0};
        size_t clen;
        char *clean = rd_sanitize(it->text.s, it->text.len, &clen);
        rd_render_markdown(&fresh, clean, clen, w, 0, &st);
        free(clean);
        ck_assert_uint_eq(it->body.nlines, fresh.nlines);
        for (size_t l = 0; l < fresh.nlines; l++) {
            char want[1024];
            strcpy(want, line_of(&fresh, l));
            ck_assert_str_eq(line_of(&it->body, l), want);
        }
        rd_doc_free(&fresh);
    }
}
END_TEST

START_TEST(conversation_list)
{
    ev_at(0, UI_EV_CONV_ITEM, "c1", "Trellis codes", "2026-12-01");
    ev_at(0, UI_EV_CONV_ITEM, "c2", "RoCE setup", "two Sparks");
    ck_assert_uint_eq(tr.nconv, 2);
    ck_assert(trs_conv_matches(&tr.convs[0], ""));
    ck_assert(trs_conv_matches(&tr.convs[1], "roce"));
    ck_assert(!trs_conv_matches(&tr.convs[0], "roce"));
    ck_assert(trs_conv_matches(&tr.convs[1], "SPARKS")); /* the detail line counts */
    ev(0, UI_EV_CONV_CLEAR, NULL);
    ck_assert_uint_eq(tr.nconv, 0);
}
END_TEST

START_TEST(hostile_text_is_safe)
{
    /* escape sequences, invalid UTF-8, NUL bytes and huge lines lay out within the width */
    char big[5000];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    ev(0, UI_EV_USER, "\x1b]52;c;AAAA\x07 \x1b[2J\xff\xfe");
    ev(0, UI_EV_REPLY_BEGIN, NULL);
    ev(0, UI_EV_CONTENT_DELTA, big);
    for (size_t i = 0; i < tr.n; i++) {
        trs_item_lines(&tr, i, 20);
        const rd_doc *d = &tr.items[i]->body;
        for (size_t l = 0; l < d->nlines; l++) {
            ck_assert_int_le(d->lines[l].width, 20);
            ck_assert_ptr_null(strchr(line_of(d, l), '\x1b'));
        }
    }
}
END_TEST

int main(void)
{
    setlocale(LC_CTYPE, "C.UTF-8");
    Suite *s = suite_create("transcript");
    TCase *tc = tcase_create("model");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, thinking_folds_when_answer_starts);
    tcase_add_test(tc, pinned_thinking_stays_open);
    tcase_add_test(tc, prefill_progress_until_the_first_token);
    tcase_add_test(tc, rates_measured_from_deltas);
    tcase_add_test(tc, status_fields_merge);
    tcase_add_test(tc, waiting_for_a_late_worker);
    tcase_add_test(tc, tool_call_with_approval);
    tcase_add_test(tc, cancel_footer_and_pending_question);
    tcase_add_test(tc, length_footer_says_how_to_raise_it);
    tcase_add_test(tc, selection_and_copy);
    tcase_add_test(tc, streamed_answer_layout_equals_whole);
    tcase_add_test(tc, conversation_list);
    tcase_add_test(tc, hostile_text_is_safe);
    suite_add_tcase(s, tc);
    return test_run_suite(s);
}
