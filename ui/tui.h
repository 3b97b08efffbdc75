/* tui.h: what tui.c (screen, transcript, keys) and input.c (readline in callback mode) tell
 * each other. Internal to the TUI; the app sees only view.h. */
#ifndef GLMCHAT_UI_TUI_H
#define GLMCHAT_UI_TUI_H

#include <stddef.h>

typedef struct tui tui;

/* ---- input.c ---- */
/* Installs readline's callback interface with glmchat's keys, hooks and history (path may be
 * NULL). 0, or -1 with a message in err. */
int tui_input_open(tui *t, const char *history_path, char *err, size_t errlen);
void tui_input_close(void);
/* Hands bytes to readline as if typed. */
void tui_input_feed(const char *bytes, size_t n);
/* The line being edited and the cursor's byte offset in it. */
const char *tui_input_text(void);
size_t tui_input_point(void);
/* The prompt readline shows now when it is not ours (incremental search), else NULL. */
const char *tui_input_search_prompt(void);
int tui_input_searching(void);
void tui_input_replace(const char *text);
void tui_input_insert(const char *text);
/* Moves the cursor to byte offset point (at most the line's end). */
void tui_input_set_point(size_t point);
/* Records a submitted line in readline's history and the history file. */
void tui_input_remember(const char *line);
/* The saved history could not be written: the message, once, or NULL. */
const char *tui_input_take_error(void);

/* ---- tui.c, called from input.c ---- */
/* readline finished a line (malloc'd, the TUI frees it) or saw Ctrl-D on an empty one (NULL). */
void tui_line_done(tui *t, char *line);
/* readline changed what the input box shows. */
void tui_input_changed(tui *t);
/* readline has several completions for a slash command: shows them. */
void tui_show_completions(tui *t, char **matches, int count);
/* Ctrl-G: the TUI suspends the screen, runs $EDITOR on the line, resumes. */
void tui_edit_external(tui *t);

/* ---- tui.c, for the tests ---- */
/* Whether the TUI has a handler for the named command (each one flagged UI_CMD_VIEW must). */
int tui_runs_command(const char *name);

#endif
