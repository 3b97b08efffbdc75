/* transcript.h: what the TUI shows, without a terminal: the items of the conversation (user
 * text, thinking, answer, tool calls, notices), the reply's state and the status fields, built
 * from the app's events, and each item laid out into rd_doc lines for a width. */
#ifndef GLMCHAT_UI_TRANSCRIPT_H
#define GLMCHAT_UI_TRANSCRIPT_H

#include "ui/codeblock.h"
#include "ui/render.h"
#include "ui/view_impl.h"

typedef enum trs_kind { TRS_USER, TRS_THINK, TRS_TEXT, TRS_TOOL, TRS_NOTICE, TRS_ERROR, TRS_FOOTER } trs_kind;
/* TOOL_DENIED: the user answered no to its question, so it never ran (not a failure of the tool). */
typedef enum trs_tool_state { TOOL_ARGS, TOOL_READY, TOOL_ASK, TOOL_OK, TOOL_FAILED, TOOL_DENIED } trs_tool_state;

typedef struct trs_buf {
    char *s;
    size_t len, cap;
} trs_buf;

typedef struct trs_item {
    trs_kind kind;
    trs_buf text;         /* user text, thinking, answer, notice; tool: its arguments */
    trs_buf result, error; /* tool */
    char *id, *name, *question;
    trs_tool_state tstate;
    char answer;         /* the approval given: 'y', 'c', 'a', 'n' */
    double t0, t1;       /* thinking / tool start and end (monotonic seconds) */
    int live;            /* thinking still streaming */
    int open;            /* expanded */
    int pinned;          /* the user toggled it: keep their choice when thinking ends */
    int turn;            /* which reply it belongs to */
    rd_doc body;         /* laid out for body_w; dirty when its text or state changed */
    int body_w, dirty;
    rd_doc settled;      /* answer: its complete lines, laid out once */
    size_t settled_raw;  /* bytes of text they cover */
    int settled_w;
    rd_md_state settled_st;
    int code_sel;        /* answer: its code block (1-based) shown selected, 0 none */
} trs_item;

typedef struct trs_conv {
    char *id, *title, *detail;
} trs_conv;

typedef struct transcript {
    trs_item **items;
    size_t n, cap;
    int sel;             /* selected foldable item, -1 none */
    int code_sel;        /* the last reply's code block chosen for copying (0-based), -1 none */
    int ask;             /* the tool item waiting for an approval answer, -1 none */
    /* the reply */
    int streaming, turn;
    int answered;        /* the reply has written answer text (not only thinking or tool calls) */
    trs_item *think, *text; /* the items the next deltas go to */
    double now;          /* the time of the event being applied */
    double t_begin, t_first;
    char *waiting;       /* what the reply waits for (ui_status.waiting), NULL: nothing */
    double wait_since;   /* when that wait began */
    long prompt_done, prompt_total; /* the reply's prefill so far (ui_status), 0: not told */
    long prompt_done0;              /* its first report's tokens, at prompt_t0 */
    double prompt_t0, prompt_t;     /* when the first and the latest report came */
    long ndeltas;
    /* status */
    char *model, *backend, *conv_title;
    int ranks;
    long ctx_used, ctx_window, gen_tokens;
    double ttft, tok_s;
    int app_rates, app_tokens; /* the app reported rates / token counts for this reply */
    /* the conversation list */
    trs_conv *convs;
    size_t nconv, convcap;
    int changed;         /* something to redraw */
} transcript;

void trs_init(transcript *t);
void trs_free(transcript *t);
/* Applies one app event at time now (seconds, monotonic). SET_INPUT and STOP are the TUI's. */
void trs_apply(transcript *t, const uiq_item *ev, double now);
trs_item *trs_add_text(transcript *t, trs_kind kind, const char *s, size_t n);
/* Appends n bytes of s to b, NUL-terminated. 0 or -1 (out of memory). */
int trs_buf_add(trs_buf *b, const char *s, size_t n);
void trs_clear(transcript *t);

/* Rows item idx takes at width w (a blank line before it included); lays it out. */
int trs_item_lines(transcript *t, size_t idx, int w);
/* Whether the item has a one-line header (thoughts, tool calls) and shows its body. */
int trs_has_header(const trs_item *it);
int trs_body_shown(const trs_item *it);
int trs_blank_before(const transcript *t, size_t idx);
/* Lays out the header of a thought or tool call at time now into d (it holds a live clock). */
void trs_item_header(const transcript *t, size_t idx, int w, double now, rd_doc *d);

int trs_foldable(const trs_item *it);
int trs_last_foldable(const transcript *t);
/* Folds or unfolds the selected item, else the last foldable one. -1 when there is none. */
int trs_toggle(transcript *t);
/* Moves the selection to the previous (dir -1) or next (+1) foldable item; returns it or -1. */
int trs_select_step(transcript *t, int dir);
/* Records the user's approval answer (given at now) for the waiting tool call; returns it, or
 * NULL. The call's time counts from the answer. */
const trs_item *trs_answer(transcript *t, char answer, double now);
/* The raw text of the last reply's answer (malloc'd, NULL when there is none). */
char *trs_last_reply(const transcript *t, size_t *len);
/* One code block of the last reply: the answer item it is in and where in its text. */
typedef struct trs_code {
    const trs_item *item;
    cb_block block;
} trs_code;
/* The last reply's code blocks in order (*out malloc'd, NULL when none). 0, or -1 (memory). */
int trs_code_blocks(const transcript *t, trs_code **out, size_t *n);
/* Draws the last reply's code block k (0-based) selected, or none for -1. */
void trs_code_select(transcript *t, int k);
/* The transcript line (counted from the top of item idx at width w) where the selected code
 * block starts, or -1. */
int trs_code_line(transcript *t, size_t idx, int w);
/* Whether conversation c matches the list filter query (case-insensitive, "" matches all). */
int trs_conv_matches(const trs_conv *c, const char *query);
/* The status line's reply state at time now into out: "ready", "thinking"... and, while a
 * reply waits for a late rank, how long and what for ("waiting 12 s for the worker at H:P": the
 * clock first, so a narrow status line that cuts the field keeps it). */
void trs_reply_state(const transcript *t, double now, char *out, size_t cap);

#endif
