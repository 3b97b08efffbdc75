/* input.c: the input line, GNU readline in callback mode inside the ncurses screen: keys
 * reach readline through rl_getc_function, it draws through rl_redisplay_function. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <readline/history.h>
#include <readline/readline.h>

#include "ui/history.h"
#include "ui/tui.h"
#include "ui/view.h"

enum { HISTORY_KEEP = 2000 };

static tui *cur;               /* readline is global; so is the TUI it serves */
static unsigned char feed[64]; /* bytes of the key being handed to readline */
static size_t feed_len, feed_pos;
static FILE *rl_null;          /* readline's own output goes nowhere: the TUI draws */
static char history_path[4096];
static char history_err[512];
static int history_err_new;

static int input_getc(FILE *f)
{
    (void)f;
    if (feed_pos < feed_len)
        return feed[feed_pos++];
    return '\0'; /* never reached: readline reads one byte per rl_callback_read_char */
}

static int input_available(void)
{
    return feed_pos < feed_len;
}

static void input_redisplay(void)
{
    if (cur)
        tui_input_changed(cur);
}

static void no_prep(int meta)
{
    (void)meta;
}

static void no_deprep(void)
{
}

static void on_line(char *line)
{
    if (cur)
        tui_line_done(cur, line);
    else
        free(line);
}

static int insert_newline(int count, int key)
{
    (void)key;
    for (int i = 0; i < (count > 0 ? count : 1); i++)
        rl_insert_text("\n");
    return 0;
}

static int edit_external(int count, int key)
{
    (void)count;
    (void)key;
    if (cur)
        tui_edit_external(cur);
    return 0;
}

/* Completion: slash command names when the line starts with '/'; nothing else. */
static char *command_generator(const char *text, int state)
{
    static size_t next;
    if (state == 0)
        next = 0;
    size_t n = strlen(text) > 0 ? strlen(text) - 1 : 0; /* without the '/' */
    while (next < ui_commands_count) {
        const char *name = ui_commands[next++].name;
        if (strncmp(name, text + 1, n) == 0) {
            char *m = malloc(strlen(name) + 2);
            if (m) {
                m[0] = '/';
                strcpy(m + 1, name);
            }
            return m;
        }
    }
    return NULL;
}

static char **complete(const char *text, int start, int end)
{
    (void)end;
    rl_attempted_completion_over = 1; /* never fall back to file names */
    if (start != 0 || text[0] != '/')
        return NULL;
    return rl_completion_matches(text, command_generator);
}

static void display_matches(char **matches, int count, int max_len)
{
    (void)max_len;
    if (cur)
        tui_show_completions(cur, matches + 1, count);
}

static void load_entry(const char *entry, void *user)
{
    (void)user;
    add_history(entry);
}

int tui_input_open(tui *t, const char *hist, char *err, size_t errlen)
{
    cur = t;
    rl_null = fopen("/dev/null", "w");
    if (!rl_null) {
        snprintf(err, errlen, "cannot open /dev/null for readline's output");
        return -1;
    }
    rl_readline_name = "glmchat";
    rl_catch_signals = 0;
    rl_catch_sigwinch = 0;
    rl_change_environment = 0;
    rl_outstream = rl_null;
    rl_getc_function = input_getc;
    rl_input_available_hook = input_available;
    rl_redisplay_function = input_redisplay;
    rl_prep_term_function = no_prep;
    rl_deprep_term_function = no_deprep;
    rl_attempted_completion_function = complete;
    rl_completion_display_matches_hook = display_matches;
    rl_completion_append_character = ' ';
    using_history();
    stifle_history(HISTORY_KEEP);
    history_path[0] = '\0';
    if (hist && *hist) {
        snprintf(history_path, sizeof history_path, "%s", hist);
        if (hist_trim(history_path, HISTORY_KEEP, err, errlen) < 0 ||
            hist_load(history_path, HISTORY_KEEP, load_entry, NULL, err, errlen) < 0) {
            fclose(rl_null);
            rl_null = NULL;
            return -1;
        }
    }
    rl_callback_handler_install("", on_line);
    rl_variable_bind("enable-bracketed-paste", "off"); /* the TUI reads pastes itself */
    rl_variable_bind("horizontal-scroll-mode", "off");
    rl_variable_bind("bell-style", "none");
    rl_variable_bind("completion-query-items", "1000");
    rl_variable_bind("page-completions", "off");
    rl_bind_key('\n', insert_newline);         /* Ctrl-J */
    rl_bind_keyseq("\\e\\r", insert_newline);  /* Alt-Enter */
    rl_bind_keyseq("\\e\\n", insert_newline);
    rl_bind_key(7, edit_external);             /* Ctrl-G */
    rl_bind_keyseq("\\e[3~", rl_delete);
    rl_bind_keyseq("\\e[H", rl_beg_of_line);
    rl_bind_keyseq("\\e[F", rl_end_of_line);
    return 0;
}

void tui_input_close(void)
{
    rl_callback_handler_remove();
    clear_history();
    rl_outstream = stdout;
    if (rl_null)
        fclose(rl_null);
    rl_null = NULL;
    cur = NULL;
}

void tui_input_feed(const char *bytes, size_t n)
{
    while (n > 0) {
        size_t k = n < sizeof feed ? n : sizeof feed;
        memcpy(feed, bytes, k);
        feed_len = k;
        feed_pos = 0;
        while (feed_pos < feed_len)
            rl_callback_read_char();
        bytes += k;
        n -= k;
    }
    feed_len = feed_pos = 0;
}

const char *tui_input_text(void)
{
    return rl_line_buffer ? rl_line_buffer : "";
}

size_t tui_input_point(void)
{
    return rl_point > 0 ? (size_t)rl_point : 0;
}

int tui_input_searching(void)
{
    return RL_ISSTATE(RL_STATE_ISEARCH | RL_STATE_NSEARCH) != 0;
}

const char *tui_input_search_prompt(void)
{
    if (!tui_input_searching() || !rl_display_prompt)
        return NULL;
    return rl_display_prompt;
}

void tui_input_replace(const char *text)
{
    rl_replace_line(text, 0);
    rl_point = rl_end;
    input_redisplay();
}

void tui_input_set_point(size_t point)
{
    rl_point = point < (size_t)rl_end ? (int)point : rl_end;
    input_redisplay();
}

void tui_input_insert(const char *text)
{
    rl_insert_text(text);
    input_redisplay();
}

void tui_input_remember(const char *line)
{
    add_history(line);
    if (!history_path[0])
        return;
    if (hist_append(history_path, line, history_err, sizeof history_err) < 0)
        history_err_new = 1;
}

const char *tui_input_take_error(void)
{
    if (!history_err_new)
        return NULL;
    history_err_new = 0;
    return history_err;
}
