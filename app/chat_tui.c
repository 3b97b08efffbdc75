/* chat_tui.c: the interactive chat (chat_tui.h): view actions on the UI thread, turns on a worker
 * thread, engine events and tool approvals pushed to the view, slash commands over storage. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "app/attach.h"
#include "app/chat_branches.h"
#include "app/chat_tui.h"
#include "app/export_file.h"
#include "app/signals.h"
#include "base/setting.h"
#include "base/suggest.h"
#include "ui/view.h"

typedef enum tui_job { JOB_TURN, JOB_RETRY, JOB_EDIT, JOB_COMPACT } tui_job;

#define CHAT_TUI_MAX_ATTACHED 16

struct chat_tui {
    chat_tui_opts o;
    ui_view *view;
    chat *chat;
    pthread_t thread;
    int thread_live;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int busy;          /* a turn runs on the worker */
    char answer;       /* approval answer; 0 while waiting */
    int approving;
    char call_id[128]; /* the call about to run (for the approval question) */
    int editing;       /* the next submit replaces the last message */
    tui_job job;
    char *job_text;
    glm_stats last;    /* the last reply's numbers */
    char *attached[CHAT_TUI_MAX_ATTACHED]; /* /attach: files for the next message */
    int n_attached;
};

/* ---- pushing ------------------------------------------------------------------------------- */

static void notice(chat_tui *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void notice(chat_tui *t, const char *fmt, ...)
{
    char buf[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    ui_push_text(t->view, UI_EV_NOTICE, buf, strlen(buf));
}

static void error_line(chat_tui *t, const char *msg)
{
    ui_push_text(t->view, UI_EV_ERROR, msg, strlen(msg));
}

static void push_conversation_status(chat_tui *t)
{
    ui_status st = ui_status_none();
    char label[160];
    int64_t id = chat_conversation(t->chat);
    char *title = NULL;
    if (id > 0 && conv_get_title(t->o.db, id, &title) == 0 && title)
        snprintf(label, sizeof label, "#%lld %s", (long long)id, title);
    else if (id > 0)
        snprintf(label, sizeof label, "#%lld", (long long)id);
    else
        snprintf(label, sizeof label, "new conversation");
    free(title);
    st.conversation = label;
    st.model = t->o.src->model_name;
    st.backend = t->o.backend;
    st.ranks = 1;
    if (t->o.src->context_window > 0) /* so the window shows before the first reply */
        st.ctx_window = t->o.src->context_window;
    if (id <= 0)
        st.ctx_used = 0;
    ui_push_status(t->view, &st);
}

/* ---- the sink (worker thread) ---------------------------------------------------------------- */

static int sink_event(void *u, const glm_event *ev)
{
    chat_tui *t = u;
    switch (ev->type) {
    case GLM_EV_REASONING_DELTA:
        ui_push_text(t->view, UI_EV_REASONING_DELTA, ev->text, ev->len);
        break;
    case GLM_EV_CONTENT_DELTA:
        ui_push_text(t->view, UI_EV_CONTENT_DELTA, ev->text, ev->len);
        break;
    case GLM_EV_TOOL_CALL_BEGIN:
        ui_push_tool(t->view, UI_EV_TOOL_BEGIN, ev->call_id, ev->name, NULL, 0);
        break;
    case GLM_EV_TOOL_ARG_DELTA:
        ui_push_tool(t->view, UI_EV_TOOL_ARGS_DELTA, ev->call_id, NULL, ev->text, ev->len);
        break;
    case GLM_EV_TOOL_CALL_END:
        ui_push_tool(t->view, UI_EV_TOOL_END, ev->call_id, ev->name, ev->text, ev->len);
        break;
    case GLM_EV_STATS:
    case GLM_EV_DONE: {
        t->last = ev->stats;
        ui_status st = ui_status_none();
        st.ttft_s = ev->stats.ttft_s;
        st.tok_s = ev->stats.decode_tok_s;
        st.gen_tokens = ev->stats.generated_tokens;
        st.ctx_used = ev->stats.prompt_tokens + ev->stats.generated_tokens;
        if (ev->stats.context_window > 0)
            st.ctx_window = ev->stats.context_window;
        ui_push_status(t->view, &st);
        break;
    }
    case GLM_EV_ERROR:
        break; /* the turn's outcome carries it; shown once at the end */
    case GLM_EV_PROMPT: {
        ui_status st = ui_status_none();
        st.prompt_done = ev->prompt_done;
        st.prompt_total = ev->prompt_total;
        ui_push_status(t->view, &st);
        break;
    }
    case GLM_EV_WAITING:
    case GLM_EV_WAITED: {
        char who[256];
        snprintf(who, sizeof who, "%.*s", (int)(ev->len < 255 ? ev->len : 255), ev->text ? ev->text : "");
        ui_status st = ui_status_none();
        st.waiting = ev->type == GLM_EV_WAITING ? who : ""; /* "": the wait is over */
        st.waited_s = ev->wait_s;
        ui_push_status(t->view, &st);
        break;
    }
    }
    return 0;
}

static void sink_tool_start(void *u, const char *call_id, const char *name, const char *args)
{
    (void)name;
    (void)args;
    chat_tui *t = u;
    snprintf(t->call_id, sizeof t->call_id, "%s", call_id ? call_id : "");
}

static void sink_tool_result(void *u, const char *call_id, const char *name, const tool_result *r)
{
    chat_tui *t = u;
    if (r->approval == TOOL_APPROVAL_CONVERSATION && t->o.policy && t->o.policy->save_err[0]) {
        notice(t, "%s is allowed for this conversation only: %s", name, t->o.policy->save_err);
        t->o.policy->save_err[0] = 0;
    }
    const char *text = r->text ? r->text : "";
    ui_push_tool(t->view, r->is_error ? UI_EV_TOOL_ERROR : UI_EV_TOOL_RESULT, call_id, NULL, text, strlen(text));
}

chat_sink chat_tui_sink(chat_tui *t)
{
    chat_sink s = {.event = sink_event, .tool_start = sink_tool_start, .tool_result = sink_tool_result, .u = t};
    return s;
}

/* Asks in the view and waits for the answer (worker thread). */
static tool_answer ask_in_view(void *user, const char *tool, const char *preview)
{
    chat_tui *t = user;
    char q[4096];
    snprintf(q, sizeof q, "%s wants to run:\n%.3900s", tool, preview);
    pthread_mutex_lock(&t->mu);
    t->answer = 0;
    t->approving = 1;
    pthread_mutex_unlock(&t->mu);
    ui_push_tool(t->view, UI_EV_TOOL_APPROVE, t->call_id, tool, q, strlen(q));
    pthread_mutex_lock(&t->mu);
    while (!t->answer && !signals_interrupted())
        pthread_cond_wait(&t->cv, &t->mu);
    char a = t->answer;
    t->approving = 0;
    pthread_mutex_unlock(&t->mu);
    return a == 'y' ? TOOL_ANSWER_YES : a == 'c' ? TOOL_ANSWER_CONVERSATION : a == 'a' ? TOOL_ANSWER_ALWAYS
                                                                                   : TOOL_ANSWER_NO;
}

/* ---- the worker ------------------------------------------------------------------------------- */

static const char *view_finish(const char *finish)
{
    return strcmp(finish, "tool_limit") == 0 ? "tool_calls" : finish;
}

static void *worker(void *arg)
{
    chat_tui *t = arg;
    chat_outcome out;
    char err[2048];
    if (t->o.mcp && !mcp_boot_done(t->o.mcp))
        notice(t, "waiting for the MCP servers to start");
    if (t->o.mcp)
        mcp_boot_wait(t->o.mcp); /* their tools are in the registry before the turn reads it */
    int summarised = 0;
    t->last.kept_tokens = 0;
    int rc = t->job == JOB_RETRY   ? chat_retry(t->chat, &out, err, sizeof err)
           : t->job == JOB_EDIT    ? chat_edit(t->chat, t->job_text, &out, err, sizeof err)
           : t->job == JOB_COMPACT ? chat_compact(t->chat, &out, &summarised, err, sizeof err)
                                   : chat_turn(t->chat, t->job_text, &out, err, sizeof err);
    push_conversation_status(t);
    pthread_mutex_lock(&t->mu);
    t->busy = 0; /* from here on the worker touches neither the chat nor the database */
    pthread_mutex_unlock(&t->mu);
    if (rc != 0) {
        error_line(t, err);
        ui_push_finish(t->view, "error");
    } else {
        if (strcmp(out.finish, "error") == 0)
            error_line(t, out.error[0] ? out.error : "the reply failed");
        if (strcmp(out.finish, "tool_limit") == 0)
            notice(t, "the model kept calling tools; stopped after %d replies", out.steps);
        if (t->job == JOB_COMPACT && out.error[0] && strcmp(out.finish, "error") != 0)
            notice(t, "%s", out.error);
        /* canceled within a long prompt: the engine keeps the pieces that ran, which the same
         * prompt sent again goes on from */
        if (t->job != JOB_COMPACT && strcmp(out.finish, "canceled") == 0 && t->last.kept_tokens > 0)
            notice(t, "canceled within the prompt: its first %d of %d tokens ran and are kept; "
                      "/retry goes on from there", t->last.kept_tokens, t->last.prompt_tokens);
        ui_push_finish(t->view, view_finish(out.finish));
        if (summarised > 0)
            notice(t, "summarised %d messages into one: the conversation goes on from the summary on a new "
                      "branch (/branch reaches the old one)", summarised);
    }
    return NULL;
}

/* Starts a job on the worker (UI thread). 0, or -1 when one runs already. */
static int start_job(chat_tui *t, tui_job job, const char *text)
{
    pthread_mutex_lock(&t->mu);
    int busy = t->busy;
    pthread_mutex_unlock(&t->mu);
    if (busy) {
        notice(t, "a reply is still being written; wait for it or cancel it");
        return -1;
    }
    if (t->thread_live) {
        pthread_join(t->thread, NULL);
        t->thread_live = 0;
    }
    free(t->job_text);
    t->job_text = text ? strdup(text) : NULL;
    if (text && !t->job_text) {
        error_line(t, "out of memory");
        return -1;
    }
    t->job = job;
    t->busy = 1;
    signals_clear();
    ui_push_text(t->view, UI_EV_REPLY_BEGIN, NULL, 0);
    if (pthread_create(&t->thread, NULL, worker, t) != 0) {
        t->busy = 0;
        error_line(t, "cannot start the reply's thread");
        ui_push_finish(t->view, "error");
        return -1;
    }
    t->thread_live = 1;
    return 0;
}

/* ---- transcripts ------------------------------------------------------------------------------- */

/* A stored thought's length: from the reply's first token (or the previous part) to the time
 * its part was saved, which is when the next kind of text began. */
static void replay_thought_time(chat_tui *t, const msg *m, size_t j)
{
    int64_t from = j > 0 ? m->parts[j - 1].created_at
                         : m->created_at + (m->stats.ttft_ms > 0 ? m->stats.ttft_ms : 0);
    int64_t ms = m->parts[j].created_at - from;
    ui_status st = ui_status_none();
    st.think_s = ms > 0 ? (double)ms / 1000.0 : 0.0;
    ui_push_status(t->view, &st);
}

static void replay_parts(chat_tui *t, const msg *m)
{
    for (size_t j = 0; j < m->nparts; j++) {
        const part *p = &m->parts[j];
        switch (p->kind) {
        case PART_TEXT:
            ui_push_text(t->view, m->role == MSG_USER ? UI_EV_USER : UI_EV_CONTENT_DELTA, p->data, p->len);
            break;
        case PART_REASONING:
            ui_push_text(t->view, UI_EV_REASONING_DELTA, p->data, p->len);
            replay_thought_time(t, m, j);
            break;
        case PART_TOOL_CALL:
            ui_push_tool(t->view, UI_EV_TOOL_BEGIN, p->call_id, p->name, NULL, 0);
            ui_push_tool(t->view, UI_EV_TOOL_END, p->call_id, p->name, p->args ? p->args : "{}",
                         p->args ? p->args_len : 2);
            break;
        case PART_TOOL_RESULT:
            ui_push_tool(t->view, p->is_error ? UI_EV_TOOL_ERROR : UI_EV_TOOL_RESULT, p->call_id, NULL, p->data, p->len);
            break;
        }
    }
}

static const char *stored_finish(const msg *m)
{
    if (m->status == MSG_CANCELED)
        return "canceled";
    if (m->status == MSG_ERROR)
        return "error";
    return m->finish_reason ? m->finish_reason : "stop";
}

/* A reopened reply's stored numbers, summed over its steps, into the view (and /stats). */
typedef struct reply_numbers {
    int64_t tokens, gen_ms, ttft_ms, prompt_tokens;
    int steps;
} reply_numbers;

static void count_reply(reply_numbers *n, const msg *m)
{
    if (n->steps++ == 0)
        n->ttft_ms = m->stats.ttft_ms;
    if (m->stats.completion_tokens > 0)
        n->tokens += m->stats.completion_tokens;
    if (m->stats.gen_ms > 0)
        n->gen_ms += m->stats.gen_ms;
    if (m->stats.prompt_tokens > 0)
        n->prompt_tokens = m->stats.prompt_tokens;
}

static void finish_replayed(chat_tui *t, const msg *last, reply_numbers *n)
{
    ui_status st = ui_status_none();
    st.gen_tokens = n->tokens;
    if (n->ttft_ms >= 0)
        st.ttft_s = (double)n->ttft_ms / 1000.0;
    if (n->gen_ms > 0)
        st.tok_s = (double)n->tokens * 1000.0 / (double)n->gen_ms;
    if (n->prompt_tokens > 0)
        st.ctx_used = n->prompt_tokens + n->tokens;
    ui_push_status(t->view, &st);
    ui_push_finish(t->view, stored_finish(last));
    t->last = (glm_stats){.prompt_tokens = (int)n->prompt_tokens, .generated_tokens = (int)n->tokens,
                          .ttft_s = n->ttft_ms >= 0 ? (double)n->ttft_ms / 1000.0 : 0,
                          .decode_tok_s = st.tok_s > 0 ? st.tok_s : 0};
    memset(n, 0, sizeof *n);
}

/* Shows the current path: each user message, then its replies as one reply item with the
 * numbers stored with them. */
static void replay(chat_tui *t)
{
    ui_push_text(t->view, UI_EV_CLEAR, NULL, 0);
    int64_t id = chat_conversation(t->chat);
    conv_messages path;
    if (id <= 0 || conv_load_path(t->o.db, id, &path) != 0)
        return;
    const msg *open_reply = NULL;
    reply_numbers numbers = {0};
    for (size_t i = 0; i < path.count; i++) {
        const msg *m = &path.msgs[i];
        if (m->role == MSG_USER) {
            if (open_reply)
                finish_replayed(t, open_reply, &numbers);
            open_reply = NULL;
            replay_parts(t, m);
            continue;
        }
        if (m->role == MSG_ASSISTANT) {
            if (!open_reply)
                ui_push_text(t->view, UI_EV_REPLY_BEGIN, NULL, 0);
            open_reply = m;
            count_reply(&numbers, m);
        }
        replay_parts(t, m);
    }
    if (open_reply)
        finish_replayed(t, open_reply, &numbers);
    conv_messages_free(&path);
}

static void open_conversation(chat_tui *t, const char *arg)
{
    long long id;
    if (setting_int("/open", arg, 1, INT64_MAX, &id, NULL, 0)) {
        notice(t, "give a conversation number: /open ID (see /list)");
        return;
    }
    char err[1024];
    if (chat_open(t->chat, id, err, sizeof err) != 0) {
        error_line(t, err);
        return;
    }
    t->editing = 0;
    replay(t);
    push_conversation_status(t);
}

/* ---- slash commands ------------------------------------------------------------------------------ */

static void list_conversations(chat_tui *t)
{
    conv_summary *list;
    size_t n;
    if (conv_list(t->o.db, &list, &n) != 0) {
        error_line(t, db_errmsg(t->o.db));
        return;
    }
    ui_push_text(t->view, UI_EV_CONV_CLEAR, NULL, 0);
    for (size_t i = 0; i < n; i++) {
        char id[32], when[64];
        snprintf(id, sizeof id, "%lld", (long long)list[i].id);
        time_t s = (time_t)(list[i].updated_at / 1000);
        struct tm tm;
        localtime_r(&s, &tm);
        strftime(when, sizeof when, "%Y-%m-%d %H:%M", &tm);
        char detail[200];
        snprintf(detail, sizeof detail, "%s, %lld messages", when, (long long)list[i].messages);
        ui_push_conv(t->view, id, list[i].title ? list[i].title : list[i].preview ? list[i].preview : "(empty)",
                     detail);
    }
    conv_list_free(list, n);
    if (n == 0)
        notice(t, "no saved conversations yet");
}

static void search(chat_tui *t, const char *query)
{
    search_hit *hits;
    size_t n;
    if (!*query) {
        notice(t, "give words to search for: /search QUERY");
        return;
    }
    if (search_parts(t->o.db, query, 50, &hits, &n) != 0) {
        error_line(t, db_errmsg(t->o.db));
        return;
    }
    ui_push_text(t->view, UI_EV_CONV_CLEAR, NULL, 0);
    for (size_t i = 0; i < n; i++) {
        char id[32], detail[1200];
        snprintf(id, sizeof id, "%lld", (long long)hits[i].conv);
        /* where in the conversation: one conversation can match in several messages */
        const char *who = hits[i].role == MSG_USER        ? "you"
                          : hits[i].kind == PART_REASONING ? "thinking"
                          : hits[i].role == MSG_TOOL       ? "tool"
                          : hits[i].role == MSG_SYSTEM     ? "system"
                                                           : "reply";
        snprintf(detail, sizeof detail, "%s: %s", who, hits[i].snippet ? hits[i].snippet : "");
        ui_push_conv(t->view, id, hits[i].title ? hits[i].title : "(untitled)", detail);
    }
    notice(t, "%zu matches for \"%s\"", n, query);
    search_hits_free(hits, n);
}

/* /export [md|json|html] [FILE], or /export FILE whose name says the format (.md, .json, .html);
 * no FILE: glmchat-ID.FORMAT here (as for a folder: that name in it); no format: md. FILE may
 * hold spaces; "~/" is $HOME. */
static void export_conversation(chat_tui *t, const char *args)
{
    int64_t id = chat_conversation(t->chat);
    if (id <= 0) {
        notice(t, "nothing to export yet");
        return;
    }
    while (*args == ' ')
        args++;
    char word[16] = "";
    size_t wlen = strcspn(args, " ");
    if (wlen < sizeof word)
        memcpy(word, args, wlen), word[wlen] = '\0';
    int f = wlen ? export_format_parse(word) : EXPORT_MD;
    const char *name = f >= 0 ? args + wlen : args; /* the file, when given */
    while (*name == ' ')
        name++;
    size_t nlen = strlen(name);
    while (nlen && name[nlen - 1] == ' ')
        nlen--;
    char file[1024], err[2300];
    const char *home = getenv("HOME");
    int n;
    if (nlen == 0) /* this folder: export_file_path gives the default name */
        n = snprintf(file, sizeof file, ".");
    else if (nlen >= 2 && name[0] == '~' && name[1] == '/' && home && *home)
        n = snprintf(file, sizeof file, "%s%.*s", home, (int)nlen - 1, name + 1);
    else
        n = snprintf(file, sizeof file, "%.*s", (int)nlen, name);
    if (n < 0 || (size_t)n >= sizeof file) {
        error_line(t, "/export: the file name is too long");
        return;
    }
    char target[1100];
    if (f < 0 && export_format_of_path(file) < 0) { /* a folder's file is Markdown unless named */
        struct stat st;
        if (stat(file, &st) == 0 && S_ISDIR(st.st_mode))
            f = EXPORT_MD;
    }
    if (f < 0 && (f = export_format_of_path(file)) < 0) {
        snprintf(err, sizeof err,
                 "/export: '%s' is not a format (md, json, html) and its name does not end in .md, "
                 ".json or .html; say which: /export md %s",
                 file, file);
        error_line(t, err);
        return;
    }
    if (export_file_path(file, id, (export_format)f, target, sizeof target) != 0) {
        error_line(t, "/export: the file name is too long");
        return;
    }
    int replaced = 0;
    if (export_file_write(t->o.db, id, (export_format)f, target, &replaced, err, sizeof err) != 0) {
        char line[2400];
        snprintf(line, sizeof line, "/export: %s", err);
        error_line(t, line);
        return;
    }
    char *full = realpath(target, NULL);
    notice(t, "wrote %s (%s%s)", full ? full : target,
           f == EXPORT_JSON ? "JSON" : f == EXPORT_HTML ? "HTML" : "Markdown",
           replaced ? "; it replaced the file that was there" : "");
    free(full);
}

/* The text of the last user message on the path (malloc'd) or NULL. */
static char *last_user_text(chat_tui *t)
{
    conv_messages path;
    int64_t id = chat_conversation(t->chat);
    if (id <= 0 || conv_load_path(t->o.db, id, &path) != 0)
        return NULL;
    char *text = NULL;
    for (size_t i = path.count; i-- > 0 && !text;)
        if (path.msgs[i].role == MSG_USER)
            for (size_t j = 0; j < path.msgs[i].nparts && !text; j++)
                if (path.msgs[i].parts[j].kind == PART_TEXT)
                    text = strdup(path.msgs[i].parts[j].data);
    conv_messages_free(&path);
    return text;
}

static void set_think(chat_tui *t, const char *arg)
{
    char err[512];
    if (*arg && strcmp(arg, "on") != 0 && strcmp(arg, "off") != 0) {
        snprintf(err, sizeof err, "/think takes on or off, not '%.400s'", arg);
        error_line(t, err);
        return;
    }
    if (*arg && chat_set_think(t->chat, strcmp(arg, "on") == 0, err, sizeof err) != 0) {
        error_line(t, err);
        return;
    }
    notice(t, "thinking: %s", chat_think(t->chat) ? "on" : "off");
}

static void set_effort(chat_tui *t, const char *arg)
{
    char err[512];
    if (*arg) {
        glm_effort e;
        if (strcmp(arg, "low") == 0)
            e = GLM_EFFORT_LOW;
        else if (strcmp(arg, "high") == 0)
            e = GLM_EFFORT_HIGH;
        else if (strcmp(arg, "max") == 0)
            e = GLM_EFFORT_MAX;
        else {
            snprintf(err, sizeof err, "/effort takes low, high or max, not '%.400s'", arg);
            error_line(t, err);
            return;
        }
        if (chat_set_effort(t->chat, e, err, sizeof err) != 0) {
            error_line(t, err);
            return;
        }
    }
    notice(t, "reasoning effort: %s", config_effort_name(chat_effort(t->chat)));
}

/* A tool's approval state in the words of the approval question. */
static const char *approval_state(const tool_policy *p, const tool_def *d)
{
    switch (tool_policy_state(p, d)) {
    case TOOL_APPROVAL_NOT_NEEDED: return "runs without asking (safe)";
    case TOOL_APPROVAL_AUTO: return "runs without asking (approval = auto)";
    case TOOL_APPROVAL_FLAG: return "allowed by --allow-tool";
    case TOOL_APPROVAL_CONVERSATION: return "allowed for this conversation";
    case TOOL_APPROVAL_ALWAYS: return "allowed always (always_allow in the config file)";
    case TOOL_APPROVAL_DENIED: return "refused (approval = deny)";
    case TOOL_APPROVAL_NO_TERMINAL: return "refused (no terminal to ask)";
    default: return "asks first";
    }
}

static void list_tools(chat_tui *t)
{
    notice(t, "tools are %s (/tools on|off); approvals: once, this conversation, or always for this tool "
              "(/tools ask NAME makes a tool ask again)",
           tools_enabled(t->o.tools) ? "on" : "off");
    for (int i = 0; i < tools_count(t->o.tools); i++) {
        const tool_def *d = tools_get(t->o.tools, i);
        notice(t, "%s - %s; %s", d->name, approval_state(t->o.policy, d), d->description);
    }
}

/* /tools [on|off|NAME|ask NAME] */
static void tools_command(chat_tui *t, const char *args)
{
    if (t->o.mcp && !mcp_boot_done(t->o.mcp)) { /* the registry is being filled */
        notice(t, "the MCP servers are still starting; /tools works once they are up");
        return;
    }
    if (!t->o.tools || tools_count(t->o.tools) == 0) {
        notice(t, "no tools are offered (set `tools = on` in the config file)");
        return;
    }
    if (!*args) {
        list_tools(t);
        return;
    }
    if (strcmp(args, "on") == 0 || strcmp(args, "off") == 0) {
        tools_set_enabled(t->o.tools, args[1] == 'n');
        notice(t, "tools are %s", args[1] == 'n' ? "on: the model may call them" : "off: none offered to the model");
        return;
    }
    int ask = strncmp(args, "ask ", 4) == 0;
    const char *name = ask ? args + 4 : args;
    while (*name == ' ')
        name++;
    const tool_def *d = tools_find(t->o.tools, name);
    if (!d) {
        const char *names[256];
        int n = 0;
        for (int i = 0; i < tools_count(t->o.tools) && n < 256; i++)
            names[n++] = tools_get(t->o.tools, i)->name;
        const char *meant = suggest_closest(name, names, (size_t)n);
        char err[600];
        if (meant)
            snprintf(err, sizeof err, "there is no tool '%.200s'; did you mean %s? /tools lists them", name, meant);
        else
            snprintf(err, sizeof err, "there is no tool '%.200s'; /tools lists them (/tools on|off|NAME|ask NAME)",
                     name);
        error_line(t, err);
        return;
    }
    char err[1024];
    if (ask && tool_policy_revoke(t->o.policy, name, err, sizeof err) != 0)
        error_line(t, err);
    else if (ask)
        notice(t, "%s: %s", name, approval_state(t->o.policy, d));
    else
        notice(t, "%s - %s; %s; arguments: %s", name, approval_state(t->o.policy, d), d->description,
               d->schema_json);
}

static void system_prompt(chat_tui *t, const char *arg)
{
    char err[1024];
    if (!*arg) {
        const char *now = chat_system_prompt(t->chat);
        if (now)
            notice(t, "system prompt: %s", now);
        else
            notice(t, "no system prompt; /system TEXT sets one");
        return;
    }
    int clear = strcmp(arg, "clear") == 0;
    if (chat_set_system_prompt(t->chat, clear ? NULL : arg, err, sizeof err) != 0)
        error_line(t, err);
    else
        notice(t, clear ? "system prompt cleared" : "system prompt set");
}

static void show_sampling(chat_tui *t)
{
    const glm_sampling *s = chat_sampling(t->chat);
    char seed[32] = "fresh each reply";
    if (chat_seed_fixed(t->chat))
        snprintf(seed, sizeof seed, "%llu", (unsigned long long)s->seed);
    /* below 0: the model's own value (its generation_config.json), as glm.h defines */
    char temp[32] = "the model's", top_p[32] = "the model's", top_k[32] = "the model's";
    if (s->temperature >= 0)
        snprintf(temp, sizeof temp, "%g%s", s->temperature, s->temperature == 0 ? " (greedy)" : "");
    if (s->top_p >= 0)
        snprintf(top_p, sizeof top_p, "%g%s", s->top_p, s->top_p >= 1 ? " (off)" : "");
    if (s->top_k >= 0)
        snprintf(top_k, sizeof top_k, "%d%s", s->top_k, s->top_k == 0 ? " (off)" : "");
    notice(t, "temperature %s, top_p %s, top_k %s, seed %s, max_tokens %d%s", temp, top_p, top_k, seed,
           s->max_tokens, s->max_tokens ? "" : " (the model's limit)");
}

/* /set KEY VALUE: one sampling setting for the rest of this session, checked as the config
 * file's key is. */
static void set_sampling(chat_tui *t, const char *args)
{
    static const char *const keys[] = {"temperature", "top_p", "top_k", "seed", "max_tokens"};
    if (!*args) {
        show_sampling(t);
        return;
    }
    char key[32], value[128], extra[2];
    int n = sscanf(args, "%31s %127s %1s", key, value, extra);
    int known = 0;
    for (size_t i = 0; n >= 1 && i < sizeof keys / sizeof keys[0]; i++)
        known |= strcmp(key, keys[i]) == 0;
    if (n != 2 || !known) {
        char err[256];
        const char *meant = n >= 1 && !known ? suggest_closest(key, keys, sizeof keys / sizeof keys[0]) : NULL;
        if (meant)
            snprintf(err, sizeof err, "/set: there is no setting '%s'; did you mean /set %s?", key, meant);
        else if (n >= 1 && !known)
            snprintf(err, sizeof err, "/set: there is no setting '%s'; /set KEY VALUE, KEY one of "
                     "temperature, top_p, top_k, seed, max_tokens", key);
        else
            snprintf(err, sizeof err, "/set %s takes one value: /set %s VALUE", key, key);
        error_line(t, err);
        return;
    }
    app_config scratch;
    config_init(&scratch);
    scratch.sampling = *chat_sampling(t->chat);
    char err[512];
    if (config_set(&scratch, key, value, "/set", err, sizeof err) != 0) {
        error_line(t, err);
    } else {
        *chat_sampling(t->chat) = scratch.sampling;
        if (strcmp(key, "seed") == 0)
            chat_fix_seed(t->chat, 1);
        show_sampling(t);
    }
    config_free(&scratch);
}

/* ---- attachments ---------------------------------------------------------------------------------- */

static void drop_attached(chat_tui *t)
{
    for (int i = 0; i < t->n_attached; i++)
        free(t->attached[i]);
    t->n_attached = 0;
}

/* /attach FILE: checked now (inside the workspace, text, small enough), read when sent. */
static void attach_file(chat_tui *t, const char *arg)
{
    if (!*arg) {
        if (t->n_attached == 0)
            notice(t, "nothing attached; /attach FILE adds a text file to your next message");
        for (int i = 0; i < t->n_attached; i++)
            notice(t, "attached for the next message: %s", t->attached[i]);
        return;
    }
    if (strcmp(arg, "clear") == 0) {
        drop_attached(t);
        notice(t, "attachments dropped");
        return;
    }
    if (t->n_attached == CHAT_TUI_MAX_ATTACHED) {
        notice(t, "at most %d files go with one message", CHAT_TUI_MAX_ATTACHED);
        return;
    }
    workspace ws;
    attach_buf probe = {0};
    char err[PATH_MAX + 512];
    if (workspace_open(&ws, t->o.workspace, err, sizeof err) != 0 ||
        attach_add_file(&probe, &ws, arg, err, sizeof err) != 0) {
        attach_buf_free(&probe);
        error_line(t, err);
        return;
    }
    attach_buf_free(&probe);
    if (!(t->attached[t->n_attached] = strdup(arg))) {
        error_line(t, "out of memory");
        return;
    }
    t->n_attached++;
    notice(t, "%s goes with your next message (/attach lists, /attach clear drops)", arg);
}

/* The word at s that starts with '@', without trailing punctuation, when it names an existing
 * file (a relative path taken from the workspace, as the file tools take it): its path in
 * path. 0 when it is no file, so an @name stays text. */
static int at_file(const workspace *ws, const char *s, char *path, size_t cap)
{
    size_t n = strcspn(s + 1, " \t\n");
    while (n > 0 && strchr(",.;:!?)'\"", s[n]))
        n--;
    if (n == 0 || n >= cap)
        return 0;
    memcpy(path, s + 1, n);
    path[n] = 0;
    char full[2 * PATH_MAX + 2];
    snprintf(full, sizeof full, "%s/%s", path[0] == '/' ? "" : ws->root, path);
    struct stat st;
    return stat(full, &st) == 0 && S_ISREG(st.st_mode);
}

/* text with the @FILE words' files and the /attach files fenced after it (malloc'd), or NULL
 * after saying why in the view; nothing is sent then. */
static char *message_with_files(chat_tui *t, const char *text)
{
    if (!strchr(text, '@') && t->n_attached == 0) {
        char *copy = strdup(text);
        if (!copy)
            error_line(t, "out of memory");
        return copy;
    }
    attach_buf msg = {0};
    char err[PATH_MAX + 512], path[PATH_MAX];
    workspace ws;
    int rc = workspace_open(&ws, t->o.workspace, err, sizeof err);
    if (rc == 0)
        rc = attach_add_text(&msg, text, err, sizeof err);
    for (const char *p = text; rc == 0 && (p = strchr(p, '@')) != NULL; p++)
        if ((p == text || strchr(" \t\n(", p[-1])) && at_file(&ws, p, path, sizeof path))
            rc = attach_add_file(&msg, &ws, path, err, sizeof err);
    for (int i = 0; rc == 0 && i < t->n_attached; i++)
        rc = attach_add_file(&msg, &ws, t->attached[i], err, sizeof err);
    if (rc != 0) {
        attach_buf_free(&msg);
        error_line(t, err);
        notice(t, "not sent; your message is in the history (Up)");
        return NULL;
    }
    drop_attached(t);
    return msg.text;
}

/* The alternatives of the current path, one line each under their branching point. */
static void list_branches(chat_tui *t, const chat_branch_alt *alts, size_t n)
{
    size_t cap = 256 + n * 160, len = 0;
    char *text = malloc(cap);
    if (!text) {
        error_line(t, "out of memory");
        return;
    }
    for (size_t i = 0; i < n; i++) {
        if (i == 0 || alts[i].at != alts[i - 1].at || alts[i].after != alts[i - 1].after) {
            if (alts[i].after && alts[i].at == 0)
                len += (size_t)snprintf(text + len, cap - len, "%sat the start:\n", i ? "\n" : "");
            else
                len += (size_t)snprintf(text + len, cap - len, "%s%s message %lld:\n", i ? "\n" : "",
                                        alts[i].after ? "after" : "at", (long long)alts[i].at);
        }
        len += (size_t)snprintf(text + len, cap - len, "  %zu: message %lld (%s) %s%s\n", i + 1,
                                (long long)alts[i].number, msg_role_name(alts[i].role), alts[i].preview,
                                alts[i].shown ? "  \xe2\x97\x80 shown" : "");
    }
    snprintf(text + len, cap - len, "/branch N switches to alternative N");
    ui_push_text(t->view, UI_EV_NOTICE, text, strlen(text));
    free(text);
}

/* /branch lists the alternatives at every branching point of the path; /branch N switches to
 * alternative N (the newest leaf below it, as the user left it). */
static void branches(chat_tui *t, const char *arg)
{
    int64_t conv = chat_conversation(t->chat);
    chat_branch_alt *alts;
    size_t n;
    if (conv <= 0) {
        notice(t, "no branches yet");
        return;
    }
    if (chat_branch_alternatives(t->o.db, conv, &alts, &n) != 0) {
        error_line(t, db_errmsg(t->o.db)[0] ? db_errmsg(t->o.db) : "out of memory listing the branches");
        return;
    }
    if (n == 0) {
        notice(t, "no branches yet: /edit and /retry make them");
    } else if (!*arg) {
        list_branches(t, alts, n);
    } else {
        long long k;
        char err[512];
        int64_t leaf;
        if (setting_int("/branch", arg, 1, (long long)n, &k, NULL, 0))
            notice(t, "there are %zu alternatives; /branch lists them and /branch N picks one", n);
        else if ((leaf = msg_descend(t->o.db, alts[k - 1].msg)) < 0)
            error_line(t, db_errmsg(t->o.db));
        else if (chat_branch(t->chat, leaf, err, sizeof err) != 0)
            error_line(t, err);
        else {
            replay(t);
            notice(t, "now on message %lld's branch", (long long)alts[k - 1].number);
        }
    }
    free(alts);
}

/* The number of the last user message on the path, 0 when there is none. */
static int64_t last_user_number(chat_tui *t)
{
    conv_messages path;
    int64_t id = chat_conversation(t->chat), found = 0;
    if (id <= 0 || conv_load_path(t->o.db, id, &path) != 0)
        return 0;
    for (size_t i = path.count; i-- > 0 && !found;)
        if (path.msgs[i].role == MSG_USER)
            found = path.msgs[i].id;
    conv_messages_free(&path);
    return found ? msg_number(t->o.db, id, found) : 0;
}

/* /drop [N]: message N (default: the last of yours) and what follows leave the path. */
static void drop_messages(chat_tui *t, const char *arg)
{
    long long n = 0;
    char err[1024];
    if (*arg && setting_int("/drop", arg, 1, INT64_MAX, &n, err, sizeof err)) {
        notice(t, "%s", err);
        return;
    }
    if (!*arg && (n = last_user_number(t)) == 0) {
        notice(t, "nothing to drop yet");
        return;
    }
    int64_t last = chat_drop(t->chat, n, err, sizeof err);
    if (last < 0) {
        error_line(t, err);
        return;
    }
    replay(t);
    notice(t, "dropped message %lld and what followed from this path (/branch %s)", n,
           "still reaches them");
}

static void new_conversation(chat_tui *t, const char *args)
{
    (void)args;
    char err[1024];
    chat_open(t->chat, 0, err, sizeof err);
    t->editing = 0;
    ui_push_text(t->view, UI_EV_CLEAR, NULL, 0);
    push_conversation_status(t);
}

static void list_command(chat_tui *t, const char *args)
{
    (void)args;
    list_conversations(t);
}

static void retry_reply(chat_tui *t, const char *args)
{
    (void)args;
    start_job(t, JOB_RETRY, NULL);
}

static void compact_conversation(chat_tui *t, const char *args)
{
    (void)args;
    start_job(t, JOB_COMPACT, NULL);
}

static void edit_message(chat_tui *t, const char *args)
{
    if (*args) {
        ui_push_text(t->view, UI_EV_USER, args, strlen(args));
        start_job(t, JOB_EDIT, args);
        return;
    }
    char *last = last_user_text(t);
    if (!last) {
        notice(t, "no message of yours to edit yet");
        return;
    }
    ui_push_text(t->view, UI_EV_SET_INPUT, last, strlen(last));
    free(last);
    t->editing = 1;
    notice(t, "edit the message and press Enter: it replaces the last one (a new branch)");
}

static void show_stats(chat_tui *t, const char *args)
{
    (void)args;
    char drafts[96] = "";
    if (t->last.drafting)
        snprintf(drafts, sizeof drafts, "; drafts: %d of %d accepted in %d windows",
                 t->last.drafts_accepted, t->last.drafts_proposed, t->last.draft_windows);
    notice(t, "last reply: %d prompt tokens (%d reused), %d generated, TTFT %.2f s, %.1f tok/s prefill, "
              "%.1f tok/s decode%s",
           t->last.prompt_tokens, t->last.reused_tokens, t->last.generated_tokens, t->last.ttft_s,
           t->last.prefill_tok_s, t->last.decode_tok_s, drafts);
}

/* The app's handlers of the commands flagged UI_CMD_APP in ui/commands.c (names, arguments,
 * help and the streaming rule are there). without_conversation: what the command says instead
 * of running when no conversation is open; NULL when it runs anyway. */
typedef struct app_command {
    const char *name;
    void (*run)(chat_tui *t, const char *args);
    const char *without_conversation;
} app_command;

static const app_command app_commands[] = {
    {"new", new_conversation, NULL},
    {"list", list_command, NULL},
    {"open", open_conversation, NULL},
    {"search", search, NULL},
    {"export", export_conversation, "nothing to export yet"},
    {"system", system_prompt, NULL},
    {"think", set_think, NULL},
    {"effort", set_effort, NULL},
    {"tools", tools_command, NULL},
    {"retry", retry_reply, "nothing to retry yet"},
    {"edit", edit_message, NULL},
    {"branch", branches, "no branches yet"},
    {"drop", drop_messages, NULL},
    {"compact", compact_conversation, "nothing to summarise yet"},
    {"stats", show_stats, NULL},
    {"attach", attach_file, NULL},
    {"set", set_sampling, NULL},
};

static const app_command *app_command_find(const char *name)
{
    for (size_t i = 0; i < sizeof app_commands / sizeof app_commands[0]; i++)
        if (strcmp(app_commands[i].name, name) == 0)
            return &app_commands[i];
    return NULL;
}

int chat_tui_runs_command(const char *name)
{
    return app_command_find(name) != NULL;
}

/* A command from the view: those the view runs alone (help, copy, quit) have no entry here. */
static void run_command(chat_tui *t, const char *name, const char *args)
{
    const ui_command *c = ui_command_find(name);
    const app_command *h = app_command_find(name);
    if (!c || !(c->flags & UI_CMD_APP))
        return;
    if (!h) {
        error_line(t, "this command has no handler in the app (a bug: app/chat_tui.c app_commands)");
        return;
    }
    if (h->without_conversation && chat_conversation(t->chat) <= 0) {
        notice(t, "%s", h->without_conversation);
        return;
    }
    h->run(t, args);
}

/* Deletes a conversation chosen in the list (the view asked first); the open one gives way to a
 * new conversation. */
static void delete_conversation(chat_tui *t, const char *arg)
{
    long long id;
    if (setting_int("conversation", arg, 1, INT64_MAX, &id, NULL, 0)) {
        notice(t, "no conversation %s to delete", arg);
        return;
    }
    if (conv_delete(t->o.db, id) != 0) {
        error_line(t, db_errmsg(t->o.db));
        return;
    }
    if (chat_conversation(t->chat) == id) {
        char err[256];
        chat_open(t->chat, 0, err, sizeof err);
        t->editing = 0;
        ui_push_text(t->view, UI_EV_CLEAR, NULL, 0);
        push_conversation_status(t);
    }
    notice(t, "deleted conversation %lld", id);
    list_conversations(t);
}

/* Renames a conversation chosen in the list. */
static void rename_conversation(chat_tui *t, const char *arg, const char *title)
{
    long long id;
    if (setting_int("conversation", arg, 1, INT64_MAX, &id, NULL, 0)) {
        notice(t, "no conversation %s to rename", arg);
        return;
    }
    while (*title == ' ')
        title++;
    if (!*title) {
        notice(t, "a title cannot be empty; the conversation keeps its title");
        return;
    }
    if (conv_set_title(t->o.db, id, title) != 0) {
        error_line(t, db_errmsg(t->o.db));
        return;
    }
    if (chat_conversation(t->chat) == id)
        push_conversation_status(t);
    list_conversations(t);
}

/* ---- actions (UI thread) ------------------------------------------------------------------------- */

static void on_action(const ui_action *a, void *user)
{
    chat_tui *t = user;
    switch (a->type) {
    case UI_ACT_SUBMIT: {
        char *text = message_with_files(t, a->text);
        if (!text) /* out of memory, or a file that cannot go: said in the view */
            break;
        ui_push_text(t->view, UI_EV_USER, text, strlen(text));
        start_job(t, t->editing ? JOB_EDIT : JOB_TURN, text);
        free(text);
        t->editing = 0;
        break;
    }
    case UI_ACT_CANCEL:
        signals_request_cancel();
        if (t->o.src->cancel)
            t->o.src->cancel(t->o.src->self);
        pthread_mutex_lock(&t->mu);
        pthread_cond_broadcast(&t->cv);
        pthread_mutex_unlock(&t->mu);
        break;
    case UI_ACT_APPROVE:
        pthread_mutex_lock(&t->mu);
        if (t->approving) {
            t->answer = a->answer ? a->answer : 'n';
            pthread_cond_broadcast(&t->cv);
        }
        pthread_mutex_unlock(&t->mu);
        break;
    case UI_ACT_COMMAND: {
        pthread_mutex_lock(&t->mu);
        int busy = t->busy;
        pthread_mutex_unlock(&t->mu);
        const char *name = a->name ? a->name : "";
        if (busy && !ui_command_while_streaming(name)) {
            notice(t, "a reply is still being written; /%s can wait for it", name);
            break;
        }
        run_command(t, name, a->text ? a->text : "");
        break;
    }
    case UI_ACT_OPEN: {
        pthread_mutex_lock(&t->mu);
        int busy = t->busy;
        pthread_mutex_unlock(&t->mu);
        if (busy)
            notice(t, "a reply is still being written");
        else
            open_conversation(t, a->id);
        break;
    }
    case UI_ACT_DELETE:
    case UI_ACT_RENAME: {
        pthread_mutex_lock(&t->mu);
        int busy = t->busy;
        pthread_mutex_unlock(&t->mu);
        if (busy)
            notice(t, "a reply is still being written; change the list after it");
        else if (a->type == UI_ACT_DELETE)
            delete_conversation(t, a->id ? a->id : "");
        else
            rename_conversation(t, a->id ? a->id : "", a->text ? a->text : "");
        break;
    }
    case UI_ACT_QUIT:
        signals_request_cancel();
        if (t->o.src->cancel)
            t->o.src->cancel(t->o.src->self);
        pthread_mutex_lock(&t->mu);
        pthread_cond_broadcast(&t->cv);
        pthread_mutex_unlock(&t->mu);
        break;
    }
}

/* ---- lifetime -------------------------------------------------------------------------------------- */

chat_tui *chat_tui_new(const chat_tui_opts *o, char *err, size_t errlen)
{
    chat_tui *t = calloc(1, sizeof *t);
    if (!t) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    t->o = *o;
    pthread_mutex_init(&t->mu, NULL);
    pthread_cond_init(&t->cv, NULL);
    if (o->policy) {
        o->policy->ask = ask_in_view;
        o->policy->ask_user = t;
    }
    return t;
}

void chat_tui_free(chat_tui *t)
{
    if (!t)
        return;
    if (t->thread_live)
        pthread_join(t->thread, NULL);
    pthread_mutex_destroy(&t->mu);
    pthread_cond_destroy(&t->cv);
    free(t->job_text);
    drop_attached(t);
    free(t);
}

static void report_mcp(void *user, int failed, const char *text)
{
    chat_tui *t = user;
    ui_push_text(t->view, failed ? UI_EV_ERROR : UI_EV_NOTICE, text, strlen(text));
}

int chat_tui_run(chat_tui *t, chat *c, char *err, size_t errlen)
{
    t->chat = c;
    const char *no_color = getenv("NO_COLOR"); /* set and not empty: no colors (no-color.org) */
    ui_config cfg = {.history_file = t->o.history_file, .copy_file = t->o.copy_file, .on_action = on_action, .user = t,
                     .no_color = no_color && *no_color, .empty_hint = t->o.empty_hint};
    t->view = ui_tui_new(&cfg, err, errlen);
    if (!t->view)
        return -1;
    push_conversation_status(t);
    if (chat_conversation(c) > 0)
        replay(t);
    if (t->o.mcp)
        mcp_boot_start(t->o.mcp, report_mcp, t);
    int rc = ui_run(t->view);
    if (t->o.mcp)
        mcp_boot_cancel(t->o.mcp); /* a server still starting is given up; no report after */
    signals_request_cancel(); /* a reply still running stops; its partial text is kept */
    if (t->o.src->cancel)
        t->o.src->cancel(t->o.src->self);
    pthread_mutex_lock(&t->mu);
    pthread_cond_broadcast(&t->cv);
    pthread_mutex_unlock(&t->mu);
    if (t->thread_live) {
        pthread_join(t->thread, NULL);
        t->thread_live = 0;
    }
    ui_free(t->view);
    t->view = NULL;
    if (rc != 0)
        snprintf(err, errlen, "the terminal failed; the conversation is saved");
    return rc;
}
