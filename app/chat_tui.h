/* chat_tui.h: the interactive chat: the view of ui/view.h (the ncurses TUI) wired to the chat
 * loop. Turns run on a worker thread; the UI thread only pushes and reads actions; tool
 * approvals are asked in the view (once / this conversation / always) while the worker waits.
 *
 * Slash commands handled here: /new, /open ID, /list, /search QUERY, /export [md|json|html]
 * [FILE], /system [TEXT|clear], /think [on|off], /effort [low|high|max], /tools, /retry,
 * /edit [TEXT] (without TEXT the last message is put in the input line; the next submit
 * replaces it), /branch [N] (the alternatives at every branching point of the path; N switches
 * to one, chat_branches.h), /drop [N], /compact (the model summarises the path; the conversation
 * goes on from the summary on a new branch, chat_compact), /stats, /set [KEY VALUE],
 * /attach [FILE|clear] (text files fenced after the next message, as `chat -f` does; a word
 * @PATH naming an existing file in a message attaches it too). */
#ifndef GLMCHAT_APP_CHAT_TUI_H
#define GLMCHAT_APP_CHAT_TUI_H

#include <stddef.h>

#include "app/chat.h"
#include "app/tools/mcp_boot.h"
#include "app/tools/tools.h"

typedef struct chat_tui_opts {
    db_store *db;
    const chat_source *src;
    tool_registry *tools;  /* may be NULL */
    tool_policy *policy;   /* may be NULL; its asker is replaced by the view's */
    mcp_boot *mcp;         /* may be NULL; started once the view is up, its steps shown */
    const char *history_file;
    const char *copy_file; /* the copy keys and /copy write the text here too (ui_config) */
    const char *backend;   /* for the status line */
    const char *workspace; /* where /attach and @FILE may read (NULL: the current directory) */
    const char *empty_hint; /* shown before a conversation's first message (ui_config); NULL: none */
} chat_tui_opts;

typedef struct chat_tui chat_tui;

chat_tui *chat_tui_new(const chat_tui_opts *o, char *err, size_t errlen);
void chat_tui_free(chat_tui *t);
/* The sink to make the chat with (chat_new), so its events reach the view. */
chat_sink chat_tui_sink(chat_tui *t);
/* Whether the app has a handler for the named command (each one flagged UI_CMD_APP must). */
int chat_tui_runs_command(const char *name);
/* Runs the view until the user quits: 0, or -1 with err (the terminal could not be used). */
int chat_tui_run(chat_tui *t, chat *c, char *err, size_t errlen);

#endif
