/* view.h: the one interface between the app and the view (the ncurses TUI).
 * The app pushes transcript items and streaming deltas in; the view hands user actions out.
 *
 * THREADING CONTRACT
 *   - ui_run() runs the view's event loop on the calling thread (the "UI thread") until the
 *     user quits or ui_stop() is called. The on_action callback runs only on that thread,
 *     from inside ui_run(). It must return quickly: never generate inside it; start or signal
 *     the engine thread instead (a slow callback freezes the keyboard).
 *   - ui_push_*() and ui_stop() may be called from ANY thread at any time between ui_*_new()
 *     and ui_free(), including from inside on_action. They copy their arguments into a
 *     mutex-guarded queue and wake the UI thread through a pipe in its poll() loop, so they
 *     never block on the screen and never call ncurses. Events are shown in push order.
 *   - ui_free() only after ui_run() has returned and every pushing thread has stopped.
 *
 * HOW THE APP USES IT (app/chat.c; tests/ui/tui_driver.c is a complete, running example)
 *
 *     static void on_action(const ui_action *a, void *user) {       // UI thread
 *         chat *c = user;
 *         switch (a->type) {
 *         case UI_ACT_SUBMIT:  ui_push_text(c->view, UI_EV_USER, a->text, a->len);
 *                              ui_push_text(c->view, UI_EV_REPLY_BEGIN, NULL, 0);
 *                              start_turn_thread(c, a->text);  break;  // calls glm_generate
 *         case UI_ACT_CANCEL:  glm_cancel(c->session); break;           // thread pushes FINISH
 *         case UI_ACT_COMMAND: run_command(c, a->name, a->text); break;  // "retry", "export"...
 *         case UI_ACT_APPROVE: answer_pending_tool(c, a->id, a->answer); break;
 *         case UI_ACT_OPEN:    open_conversation(c, a->id); break;       // UI_EV_CLEAR + items
 *         case UI_ACT_QUIT:    break;                                    // ui_run returns next
 *         }
 *     }
 *     static int on_event(const glm_event *ev, void *user) {        // engine thread
 *         chat *c = user;                                               // GLM_EV_* -> UI_EV_*
 *         if (ev->type == GLM_EV_CONTENT_DELTA)
 *             ui_push_text(c->view, UI_EV_CONTENT_DELTA, ev->text, ev->len);
 *         ...                                           // DONE -> ui_push_finish(view, finish)
 *         return 0;
 *     }
 *     ui_config cfg = { .history_file = path, .on_action = on_action, .user = c };
 *     c->view = ui_tui_new(&cfg, err, sizeof err);    // scripts and pipes: app/cmd_chat.c
 *     ui_push_status(c->view, &(ui_status){ .model = "GLM-5.3-Flash", .backend = "cuda", ... });
 *     int rc = ui_run(c->view);     // returns when the user quits (0) or on a terminal error (-1)
 *     join_turn_thread(c);  ui_free(c->view);
 *
 * A reply is: REPLY_BEGIN, then any mix of REASONING_DELTA, CONTENT_DELTA and TOOL_* events,
 * then exactly one FINISH. Push REPLY_BEGIN before on_action returns when the action starts a
 * reply (SUBMIT, /retry, /edit...), so that its timing starts there. While a
 * reply runs the view shows it live and offers cancel; no SUBMIT and no COMMAND is sent until
 * FINISH arrives (the TUI keeps the typed line), except the commands flagged
 * UI_CMD_WHILE_STREAMING (/help /copy /quit), which the TUI runs itself and still reports. A tool needing approval: the engine thread pushes
 * TOOL_APPROVE and waits (condition variable) for UI_ACT_APPROVE or UI_ACT_CANCEL.
 * GLM_EV_* map one to one: REASONING_DELTA, CONTENT_DELTA, TOOL_CALL_BEGIN -> TOOL_BEGIN,
 * TOOL_ARG_DELTA -> TOOL_ARGS_DELTA, TOOL_CALL_END -> TOOL_END, STATS -> ui_push_status
 * (ttft_s, tok_s = decode_tok_s, gen_tokens, ctx_used), DONE -> ui_push_finish(finish),
 * ERROR -> UI_EV_ERROR then ui_push_finish("error").
 */
#ifndef GLMCHAT_UI_VIEW_H
#define GLMCHAT_UI_VIEW_H

/* The approval answers and their scopes, worded the same in every view and prompt. */
#define UI_APPROVAL_CHOICES "[y] once  [c] this conversation  [a] always for this tool  [n] no"

#include <stddef.h>
#include <stdio.h>

typedef struct ui_view ui_view;

/* ---- app -> view --------------------------------------------------------------------------- */

typedef enum ui_event_type {
    UI_EV_USER,            /* text: a user message, shown as a transcript item */
    UI_EV_REPLY_BEGIN,     /* an assistant reply starts (times TTFT, enables cancel) */
    UI_EV_REASONING_DELTA, /* text: thinking, streamed dim, folded when the reply moves on */
    UI_EV_CONTENT_DELTA,   /* text: answer text (Markdown-lite) */
    UI_EV_TOOL_BEGIN,      /* id, name: a tool call starts */
    UI_EV_TOOL_ARGS_DELTA, /* id, text: argument text as the model writes it */
    UI_EV_TOOL_END,        /* id, text: the complete arguments (JSON); replaces the deltas */
    UI_EV_TOOL_APPROVE,    /* id, text: the question; the view asks once / this conversation / always inline and
                              answers with UI_ACT_APPROVE */
    UI_EV_TOOL_RESULT,     /* id, text: the tool's output */
    UI_EV_TOOL_ERROR,      /* id, text: why the tool failed (or was denied) */
    UI_EV_FINISH,          /* text: finish reason "stop" | "length" | "tool_calls" | "canceled"
                              | "error"; ends the reply */
    UI_EV_NOTICE,          /* text: an informational line from the app (command output) */
    UI_EV_ERROR,           /* text: an error a user can act on */
    UI_EV_CLEAR,           /* the transcript empties (before /new or /open pushes items) */
    UI_EV_SET_INPUT,       /* text: replaces the input line (for /edit) */
    UI_EV_CONV_CLEAR,      /* the conversation list empties */
    UI_EV_CONV_ITEM,       /* id, name: title, text: a second line (date, snippet); appends to
                              the conversation list (after /list or /search) */
    UI_EV_STATUS,          /* status: see ui_status */
} ui_event_type;

/* Status line fields. In ui_push_status a NULL string or a negative number means "unchanged",
 * so the app can push only what it knows; the TUI also measures TTFT and live tok/s itself
 * from REPLY_BEGIN and the deltas until the app reports the engine's numbers. */
typedef struct ui_status {
    const char *model;        /* "GLM-5.3-Flash" */
    const char *backend;      /* "cuda", "cpu" */
    const char *conversation; /* title or id of the open conversation */
    int ranks;                /* 1 or 2 */
    long ctx_used;            /* tokens in the conversation */
    long ctx_window;          /* the model's window */
    double ttft_s;            /* time to first token of the last reply */
    double tok_s;             /* decode speed, live while streaming */
    long gen_tokens;          /* tokens generated in the current reply */
    double think_s;           /* the reply's last thought took this long (a reopened one's
                                 stored time, as the view cannot measure it) */
    const char *waiting;      /* the running reply waits for this ("the worker at HOST:PORT",
                                 late to its part of a step); "": the wait is over (as is any wait
                                 at the reply's next text, tool call or end) */
    double waited_s;          /* how long it has waited so far (with waiting) */
    long prompt_done;         /* the running reply's prompt: tokens in (its prefill's progress) */
    long prompt_total;        /* of its tokens (with prompt_done) */
} ui_status;

/* The status with every field "unchanged"; set the ones to push. */
ui_status ui_status_none(void);

void ui_push_text(ui_view *v, ui_event_type type, const char *text, size_t len);
void ui_push_tool(ui_view *v, ui_event_type type, const char *id, const char *name,
                  const char *text, size_t len);
void ui_push_finish(ui_view *v, const char *reason);
void ui_push_conv(ui_view *v, const char *id, const char *title, const char *detail);
void ui_push_status(ui_view *v, const ui_status *s);
/* Asks ui_run to return (0) after it has shown everything pushed before. */
void ui_stop(ui_view *v);

/* ---- view -> app --------------------------------------------------------------------------- */

typedef enum ui_action_type {
    UI_ACT_SUBMIT,  /* text, len: the user's message (may hold newlines) */
    UI_ACT_COMMAND, /* name: a command from ui_commands (no '/', never an alias), text: its
                       arguments ("" if none). The view runs those flagged UI_CMD_VIEW itself */
    UI_ACT_CANCEL,  /* cancel the running reply; the app keeps the partial reply and pushes
                       FINISH "canceled" */
    UI_ACT_APPROVE, /* id: the tool call, answer: 'y' (once), 'c' (this conversation), 'a' (always), 'n' */
    UI_ACT_OPEN,    /* id: a conversation chosen in the list */
    UI_ACT_DELETE,  /* id: a conversation the user chose to delete in the list (confirmed) */
    UI_ACT_RENAME,  /* id: a conversation in the list, text: its new title */
    UI_ACT_QUIT,    /* the user quits; ui_run returns after this callback */
} ui_action_type;

typedef struct ui_action {
    ui_action_type type;
    const char *text; /* NUL-terminated; valid only during the callback */
    size_t len;
    const char *name;
    const char *id;
    char answer;
} ui_action;

typedef void (*ui_action_fn)(const ui_action *a, void *user);

/* The slash commands, one table (ui/commands.c): /help, Tab completion, the man page and both
 * dispatchers (the TUI's and the app's) read it; a command's flags are its rules. */
enum {
    UI_CMD_WHILE_STREAMING = 1 << 0, /* runs while a reply streams or a tool call waits for an
                                        answer; others wait (the TUI keeps the line, the app
                                        refuses) */
    UI_CMD_VIEW = 1 << 1,            /* the view runs it (wholly, or opens its pane first) */
    UI_CMD_APP = 1 << 2,             /* the app runs it; every command is still reported */
};
typedef struct ui_command {
    const char *name;  /* "export" */
    const char *alias; /* another name that runs it ("exit" for quit), NULL for none */
    const char *args;  /* "[md|json|html] [FILE]", "" when it takes none */
    unsigned flags;    /* UI_CMD_* */
    const char *help;  /* one line */
} ui_command;
extern const ui_command ui_commands[];
extern const size_t ui_commands_count;
/* The entry named name or its alias (without '/'), or NULL. */
const ui_command *ui_command_find(const char *name);
/* Whether the named command may run while a reply streams (UI_CMD_WHILE_STREAMING). */
int ui_command_while_streaming(const char *name);

/* The TUI's keys, in /help's order: calls each(keys, help, user) for each ("Alt-K", "copies a
 * code block ..."), for /help and the man page. */
void ui_keys_each(void (*each)(const char *keys, const char *help, void *user), void *user);

/* Whether an input line (leading blanks skipped) is a slash command rather than a message: it
 * starts with one '/', and its first word is a known command or holds no other '/'. So
 * "/etc/passwd: what is in it?" is a message, "/nosuch" an unknown command, and "//text" the
 * message "/text" (ui_line_message). */
int ui_line_is_command(const char *line);
/* The message a line that is not a command sends: "//text" loses its first '/'; else line. */
const char *ui_line_message(const char *line);

/* ---- making and running a view --------------------------------------------------------------- */

typedef struct ui_config {
    const char *history_file; /* input history, e.g. $XDG_STATE_HOME/glmchat/history; NULL:
                                 none kept. Its directory must exist (paths_mkdirs). */
    int no_mouse;             /* nonzero: leave the mouse to the terminal (no wheel scroll) */
    int no_color;             /* TUI: nonzero draws with attributes only (the app sets it from
                                 NO_COLOR, https://no-color.org) */
    const char *copy_file;    /* TUI: the copy keys and /copy also write the text here (mode
                                 0600), since a terminal cannot say whether it took OSC 52;
                                 NULL: OSC 52 only */
    const char *latency_log;  /* TUI, for measurements: appends "key_ms N" for every batch of
                                 keys, N the time from their arrival to the frame showing them */
    const char *empty_hint;   /* TUI: shown dim where the transcript is while the conversation
                                 holds nothing (what to try); NULL: nothing. Kept, not copied:
                                 it must outlive the view */
    ui_action_fn on_action;
    void *user;
} ui_config;

/* The ncurses TUI on the controlling terminal. NULL with a message in err when stdin/stdout
 * are not a terminal or the terminal cannot be set up. */
ui_view *ui_tui_new(const ui_config *cfg, char *err, size_t errlen);
/* Runs until quit or ui_stop: 0, or -1 when the terminal failed. Restores the terminal. */
int ui_run(ui_view *v);
void ui_free(ui_view *v);

#endif
