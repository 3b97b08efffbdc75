/* test_codeblock.c: a reply's code blocks as the TUI copies them (ui/codeblock.c), the OSC 52
 * sequence (ui/clipboard.c), and the command and key tables both dispatchers read. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "app/chat_tui.h"
#include "ui/clipboard.h"
#include "ui/codeblock.h"
#include "ui/tui.h"
#include "ui/view.h"

static char *block_text(const char *s, size_t k, size_t *n_blocks)
{
    cb_block *b;
    ck_assert_int_eq(cb_find(s, strlen(s), &b, n_blocks), 0);
    ck_assert_uint_lt(k, *n_blocks);
    size_t len;
    char *t = cb_text(s, &b[k], &len);
    ck_assert_ptr_nonnull(t);
    ck_assert_uint_eq(len, strlen(t));
    free(b);
    return t;
}

START_TEST(blocks_text_exactly_as_written)
{
    const char *s = "Intro\n\n```python\ndef f():\n\treturn 1  \n```\ntext\n"
                    "1. step\n   ~~~sh {.x}\n   make\n     indented more\n   ~~~\n"
                    "```\r\ncrlf\r\n```\r\n";
    size_t n;
    char *t = block_text(s, 0, &n);
    ck_assert_uint_eq(n, 3);
    ck_assert_str_eq(t, "def f():\n\treturn 1  "); /* tab and trailing blanks kept, no final newline */
    free(t);
    t = block_text(s, 1, &n);
    ck_assert_str_eq(t, "make\n  indented more"); /* the fence's indentation comes off */
    free(t);
    t = block_text(s, 2, &n);
    ck_assert_str_eq(t, "crlf");
    free(t);
    cb_block *b;
    ck_assert_int_eq(cb_find(s, strlen(s), &b, &n), 0);
    ck_assert_str_eq(b[0].lang, "python");
    ck_assert_str_eq(b[1].lang, "sh");
    ck_assert_str_eq(b[2].lang, "");
    ck_assert_int_eq(b[0].lines, 2);
    ck_assert_int_eq(b[1].lines, 2);
    free(b);
}
END_TEST

START_TEST(open_empty_and_no_blocks)
{
    size_t n;
    char *t = block_text("a\n````js\nlet x\n```\nstill code", 0, &n);
    ck_assert_uint_eq(n, 1); /* a shorter fence does not close a longer one; open to the end */
    ck_assert_str_eq(t, "let x\n```\nstill code");
    free(t);
    t = block_text("```\n```\n", 0, &n);
    ck_assert_str_eq(t, "");
    free(t);
    t = block_text("```\n\n\n```", 0, &n);
    ck_assert_str_eq(t, "\n"); /* two empty lines */
    free(t);
    cb_block *b;
    ck_assert_int_eq(cb_find("plain `code` text\n    indented is no fence\n", 43, &b, &n), 0);
    ck_assert_uint_eq(n, 0);
    ck_assert_ptr_null(b);
}
END_TEST

START_TEST(osc52_encodes)
{
    size_t n;
    char *o = clip_osc52("hi\tthere\n", 9, &n);
    ck_assert_str_eq(o, "\033]52;c;aGkJdGhlcmUK\a");
    ck_assert_uint_eq(n, strlen(o));
    free(o);
    o = clip_osc52("ab", 2, &n);
    ck_assert_str_eq(o, "\033]52;c;YWI=\a");
    free(o);
}
END_TEST

/* Each command has its runner: the view's when flagged UI_CMD_VIEW, the app's when UI_CMD_APP,
 * and no handler for a side that does not run it. */
START_TEST(every_command_has_its_handlers)
{
    for (size_t i = 0; i < ui_commands_count; i++) {
        const ui_command *c = &ui_commands[i];
        ck_assert_msg(c->flags & (UI_CMD_VIEW | UI_CMD_APP), "/%s: nobody runs it", c->name);
        ck_assert_msg(!!(c->flags & UI_CMD_VIEW) == tui_runs_command(c->name), "/%s: the view's handler vs its flag",
                      c->name);
        ck_assert_msg(!!(c->flags & UI_CMD_APP) == chat_tui_runs_command(c->name),
                      "/%s: the app's handler vs its flag", c->name);
        ck_assert_ptr_eq(ui_command_find(c->name), c);
        if (c->alias)
            ck_assert_ptr_eq(ui_command_find(c->alias), c);
    }
    ck_assert(ui_command_while_streaming("copy"));
    ck_assert(ui_command_while_streaming("exit"));
    ck_assert(!ui_command_while_streaming("list"));
    ck_assert(!ui_command_while_streaming("nosuch"));
}
END_TEST

static void count_key(const char *keys, const char *help, void *user)
{
    ck_assert(keys[0] && help[0]);
    if (strcmp(keys, "Alt-K") == 0)
        ++*(int *)user;
}

START_TEST(keys_listed_once)
{
    int alt_k = 0;
    ui_keys_each(count_key, &alt_k);
    ck_assert_int_eq(alt_k, 1);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("codeblock");
    TCase *tc = tcase_create("copy");
    tcase_add_test(tc, blocks_text_exactly_as_written);
    tcase_add_test(tc, open_empty_and_no_blocks);
    tcase_add_test(tc, osc52_encodes);
    tcase_add_test(tc, every_command_has_its_handlers);
    tcase_add_test(tc, keys_listed_once);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
