/* test_plain.c: the plain stdio view through view.h: lines in, actions out, events pushed
 * from the callback and from other threads printed in order; slash commands; approvals. */
#include <check.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ui/view.h"
#include "tests/common/check_main.h"

typedef struct app {
    ui_view *view;
    char log[8192]; /* every action, one a line */
    size_t loglen;
    int threads;
} app;

static void logf_(app *a, const char *fmt, const char *s, const char *t)
{
    a->loglen += (size_t)snprintf(a->log + a->loglen, sizeof a->log - a->loglen, fmt, s, t);
}

typedef struct pusher {
    ui_view *v;
    int id;
} pusher;

static void *push_many(void *arg)
{
    pusher *p = arg;
    char line[32];
    for (int i = 0; i < 500; i++) {
        int n = snprintf(line, sizeof line, "t%d-%d\n", p->id, i);
        ui_push_text(p->v, UI_EV_CONTENT_DELTA, line, (size_t)n);
    }
    return NULL;
}

static void on_action(const ui_action *act, void *user)
{
    app *a = user;
    switch (act->type) {
    case UI_ACT_SUBMIT:
        logf_(a, "submit[%s]%s\n", act->text, "");
        if (strcmp(act->text, "threads") == 0) {
            /* replies may come from other threads; FINISH after they are done */
            ui_push_text(a->view, UI_EV_REPLY_BEGIN, NULL, 0);
            pthread_t th[4];
            pusher ps[4];
            for (int i = 0; i < 4; i++) {
                ps[i] = (pusher){a->view, i};
                pthread_create(&th[i], NULL, push_many, &ps[i]);
            }
            for (int i = 0; i < 4; i++)
                pthread_join(th[i], NULL);
            ui_push_finish(a->view, "stop");
        } else if (strcmp(act->text, "tool") == 0) {
            ui_push_text(a->view, UI_EV_REPLY_BEGIN, NULL, 0);
            ui_push_tool(a->view, UI_EV_TOOL_BEGIN, "c1", "read_file", NULL, 0);
            ui_push_tool(a->view, UI_EV_TOOL_APPROVE, "c1", NULL, "Read it?", 8);
        } else {
            ui_push_text(a->view, UI_EV_REPLY_BEGIN, NULL, 0);
            ui_push_text(a->view, UI_EV_REASONING_DELTA, "hmm", 3);
            ui_push_text(a->view, UI_EV_CONTENT_DELTA, "echo: ", 6);
            ui_push_text(a->view, UI_EV_CONTENT_DELTA, act->text, act->len);
            ui_push_finish(a->view, "stop");
        }
        break;
    case UI_ACT_COMMAND:
        logf_(a, "command[%s][%s]\n", act->name, act->text);
        break;
    case UI_ACT_APPROVE: {
        char ans[2] = {act->answer, 0};
        logf_(a, "approve[%s][%s]\n", act->id, ans);
        ui_push_tool(a->view, UI_EV_TOOL_RESULT, "c1", NULL, "ok", 2);
        ui_push_text(a->view, UI_EV_CONTENT_DELTA, "done", 4);
        ui_push_finish(a->view, "stop");
        break;
    }
    case UI_ACT_QUIT:
        logf_(a, "quit%s%s\n", "", "");
        break;
    default:
        logf_(a, "other%s%s\n", "", "");
        break;
    }
}

static char *slurp(FILE *f)
{
    static char b[65536];
    rewind(f);
    size_t n = fread(b, 1, sizeof b - 1, f);
    b[n] = '\0';
    return b;
}

/* Runs the plain view over input; returns the app log, out and errs in the statics. */
static char out_text[65536], err_text[65536];
static app run_plain(const char *input)
{
    static app a;
    memset(&a, 0, sizeof a);
    FILE *in = tmpfile(), *out = tmpfile(), *errs = tmpfile();
    ck_assert(in && out && errs);
    fputs(input, in);
    fflush(in);
    rewind(in);
    ui_config cfg = {.on_action = on_action, .user = &a, .show_thinking = 1};
    char err[256];
    a.view = ui_plain_new(&cfg, in, out, errs, err, sizeof err);
    ck_assert_ptr_nonnull(a.view);
    ck_assert_int_eq(ui_run(a.view), 0);
    ui_free(a.view);
    strcpy(out_text, slurp(out));
    strcpy(err_text, slurp(errs));
    fclose(in);
    fclose(out);
    fclose(errs);
    return a;
}

START_TEST(lines_and_commands)
{
    app a = run_plain("hello\n/think off\n/bogus\nline one\\\nline two\n/help\n");
    ck_assert_str_eq(a.log, "submit[hello]\ncommand[think][off]\nsubmit[line one\nline two]\n"
                            "command[help][]\nquit\n");
    ck_assert_str_eq(out_text, "echo: hello\necho: line one\nline two\n");
    ck_assert_ptr_nonnull(strstr(err_text, "unknown command /bogus"));
    ck_assert_ptr_nonnull(strstr(err_text, "hmm")); /* thinking shown on errs when asked */
    ck_assert_ptr_nonnull(strstr(err_text, "/export"));
}
END_TEST

START_TEST(quit_command_stops_reading)
{
    app a = run_plain("one\n/quit\ntwo\n");
    ck_assert_str_eq(a.log, "submit[one]\nquit\n");
}
END_TEST

START_TEST(approval_reads_next_line)
{
    app a = run_plain("tool\ny\nafter\n");
    ck_assert_str_eq(a.log, "submit[tool]\napprove[c1][y]\nsubmit[after]\nquit\n");
    ck_assert_ptr_nonnull(strstr(err_text, "Read it?\n[y] once  [c] this conversation  [a] always for this tool  [n] no: "));
    ck_assert_ptr_nonnull(strstr(out_text, "done"));
}
END_TEST

START_TEST(events_from_threads_all_arrive)
{
    app a = run_plain("threads\n");
    (void)a;
    int count = 0;
    for (const char *p = out_text; (p = strchr(p, '\n')); p++)
        count++;
    ck_assert_int_eq(count, 2000);
    /* each thread's own lines stay in its order */
    for (int t = 0; t < 4; t++) {
        const char *prev = out_text;
        for (int i = 0; i < 500; i += 50) {
            char key[32];
            snprintf(key, sizeof key, "t%d-%d\n", t, i);
            const char *at = strstr(out_text, key);
            ck_assert_ptr_nonnull(at);
            ck_assert(at >= prev);
            prev = at;
        }
    }
}
END_TEST

START_TEST(command_table)
{
    static const char *want[] = {"new", "list", "search", "export", "system", "think", "effort",
                                 "tools", "retry", "edit", "branch", "drop", "compact", "stats", "help", "quit", "open"};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        const ui_command *c = ui_command_find(want[i]);
        ck_assert_ptr_nonnull(c);
        ck_assert(strlen(c->help) > 0);
    }
    ck_assert_ptr_null(ui_command_find("nope"));
}
END_TEST

int main(void)
{
    Suite *s = suite_create("plain");
    TCase *tc = tcase_create("view");
    tcase_add_test(tc, lines_and_commands);
    tcase_add_test(tc, quit_command_stops_reading);
    tcase_add_test(tc, approval_reads_next_line);
    tcase_add_test(tc, events_from_threads_all_arrive);
    tcase_add_test(tc, command_table);
    suite_add_tcase(s, tc);
    return test_run_suite(s);
}
