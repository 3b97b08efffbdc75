/* tui_driver.c: the real TUI with a scripted reply source instead of the
 * engine, for the tmux tests; it is also a complete example of how the app wires view.h.
 *
 * Usage: tui_driver [--history FILE] [--script FILE] [--script-dir DIR] [--no-mouse]
 *                   [--latency-log FILE]
 * Every submitted message is answered by a reply script: DIR/<first word>.script when it
 * exists, else FILE. A script line is "<delay ms> <kind> <args>"; text escapes \n \t \\:
 *   think TEXT | text TEXT              one reasoning / content delta
 *   think_words TEXT | text_words TEXT  one delta per word, the delay before each
 *   tool ID NAME | tool_args ID TEXT | tool_end ID JSON | result ID TEXT | tool_error ID TEXT
 *   approve ID QUESTION                 waits for the user's y / c / a / n
 *   finish REASON                       (a script without one finishes with "stop")
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ui/view.h"

typedef struct step {
    long delay_ms;
    char kind[16];
    char id[64];
    char *text; /* unescaped */
} step;

typedef struct driver {
    ui_view *view;
    const char *script, *script_dir;
    pthread_t thread;
    int thread_live;
    atomic_int cancel, quit;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    char answer;             /* the approval answer, 0 while waiting */
    char last_prompt[4096];
    char script_now[4096];   /* the script the running reply reads */
    long ctx_used;
    int thinking;
} driver;

static void unescape(char *s)
{
    char *o = s;
    for (char *p = s; *p; p++) {
        if (*p == '\\' && p[1]) {
            p++;
            *o++ = *p == 'n' ? '\n' : *p == 't' ? '\t' : *p;
        } else {
            *o++ = *p;
        }
    }
    *o = '\0';
}

/* Parses one script line; 0, 1 for a blank or comment line, -1 when malformed. */
static int parse_step(char *line, step *s)
{
    line[strcspn(line, "\n")] = '\0';
    if (line[0] == '\0' || line[0] == '#')
        return 1;
    int used = 0;
    if (sscanf(line, "%ld %15s %n", &s->delay_ms, s->kind, &used) < 2)
        return -1;
    char *rest = line + used;
    s->id[0] = '\0';
    if (strncmp(s->kind, "tool", 4) == 0 || strcmp(s->kind, "result") == 0 ||
        strcmp(s->kind, "approve") == 0) {
        int n = 0;
        if (sscanf(rest, "%63s %n", s->id, &n) < 1)
            return -1;
        rest += n;
    }
    s->text = strdup(rest);
    if (!s->text)
        return -1;
    unescape(s->text);
    return 0;
}

/* Sleeps ms in small slices; 1 when the reply was canceled meanwhile. */
static int nap(driver *d, long ms)
{
    while (ms > 0) {
        if (atomic_load(&d->cancel) || atomic_load(&d->quit))
            return 1;
        long slice = ms < 5 ? ms : 5;
        struct timespec ts = {0, slice * 1000000L};
        nanosleep(&ts, NULL);
        ms -= slice;
    }
    return atomic_load(&d->cancel) || atomic_load(&d->quit);
}

static void push_ctx(driver *d)
{
    ui_status st = ui_status_none();
    st.ctx_used = d->ctx_used;
    ui_push_status(d->view, &st);
}

static void delta(driver *d, ui_event_type type, const char *text)
{
    ui_push_text(d->view, type, text, strlen(text));
    d->ctx_used++;
    push_ctx(d);
}

/* Runs one step; 1 when the reply ended (canceled or finished). */
static int run_step(driver *d, const step *s)
{
    int words = strstr(s->kind, "_words") != NULL;
    ui_event_type type = strncmp(s->kind, "think", 5) == 0 ? UI_EV_REASONING_DELTA : UI_EV_CONTENT_DELTA;
    if (words) {
        const char *p = s->text;
        while (*p) {
            const char *e = strchr(p, ' ');
            size_t n = e ? (size_t)(e - p) + 1 : strlen(p);
            char w[512];
            if (n >= sizeof w)
                n = sizeof w - 1;
            memcpy(w, p, n);
            w[n] = '\0';
            if (nap(d, s->delay_ms))
                return 1;
            delta(d, type, w);
            p += n;
        }
        return 0;
    }
    if (nap(d, s->delay_ms))
        return 1;
    if (strcmp(s->kind, "think") == 0 || strcmp(s->kind, "text") == 0) {
        delta(d, type, s->text);
    } else if (strcmp(s->kind, "tool") == 0) {
        ui_push_tool(d->view, UI_EV_TOOL_BEGIN, s->id, s->text, NULL, 0);
    } else if (strcmp(s->kind, "tool_args") == 0) {
        ui_push_tool(d->view, UI_EV_TOOL_ARGS_DELTA, s->id, NULL, s->text, strlen(s->text));
    } else if (strcmp(s->kind, "tool_end") == 0) {
        ui_push_tool(d->view, UI_EV_TOOL_END, s->id, NULL, s->text, strlen(s->text));
    } else if (strcmp(s->kind, "result") == 0) {
        ui_push_tool(d->view, UI_EV_TOOL_RESULT, s->id, NULL, s->text, strlen(s->text));
    } else if (strcmp(s->kind, "tool_error") == 0) {
        ui_push_tool(d->view, UI_EV_TOOL_ERROR, s->id, NULL, s->text, strlen(s->text));
    } else if (strcmp(s->kind, "approve") == 0) {
        pthread_mutex_lock(&d->mu);
        d->answer = 0;
        pthread_mutex_unlock(&d->mu);
        ui_push_tool(d->view, UI_EV_TOOL_APPROVE, s->id, NULL, s->text, strlen(s->text));
        pthread_mutex_lock(&d->mu);
        while (!d->answer && !atomic_load(&d->cancel) && !atomic_load(&d->quit))
            pthread_cond_wait(&d->cv, &d->mu);
        char a = d->answer;
        pthread_mutex_unlock(&d->mu);
        if (a == 'n')
            ui_push_tool(d->view, UI_EV_TOOL_ERROR, s->id, NULL, "denied by the user", 18);
        if (!a)
            return 1;
    } else if (strcmp(s->kind, "finish") == 0) {
        ui_push_finish(d->view, s->text);
        return 1;
    }
    return 0;
}

static void *reply_thread(void *arg)
{
    driver *d = arg;
    FILE *f = fopen(d->script_now, "r");
    if (!f) {
        char msg[4200];
        snprintf(msg, sizeof msg, "cannot read the reply script %s: %s", d->script_now, strerror(errno));
        ui_push_text(d->view, UI_EV_ERROR, msg, strlen(msg));
        ui_push_finish(d->view, "error");
        return NULL;
    }
    char line[8192];
    int ended = 0;
    while (!ended && fgets(line, sizeof line, f)) {
        step s = {0};
        int rc = parse_step(line, &s);
        if (rc < 0) {
            ui_push_text(d->view, UI_EV_ERROR, "malformed reply script line", 27);
            ui_push_finish(d->view, "error");
            free(s.text);
            fclose(f);
            return NULL;
        }
        if (rc == 0)
            ended = run_step(d, &s);
        free(s.text);
    }
    fclose(f);
    if (atomic_load(&d->cancel) || atomic_load(&d->quit))
        ui_push_finish(d->view, "canceled");
    else if (!ended)
        ui_push_finish(d->view, "stop");
    return NULL;
}

static void join_reply(driver *d)
{
    if (!d->thread_live)
        return;
    pthread_mutex_lock(&d->mu);
    pthread_cond_broadcast(&d->cv);
    pthread_mutex_unlock(&d->mu);
    pthread_join(d->thread, NULL);
    d->thread_live = 0;
}

static void start_reply(driver *d, const char *prompt)
{
    join_reply(d); /* the last one has finished: the view sends no SUBMIT before FINISH */
    char first[64] = "";
    sscanf(prompt, "%63s", first);
    snprintf(d->script_now, sizeof d->script_now, "%s", d->script);
    if (d->script_dir && first[0]) {
        char p[4096];
        snprintf(p, sizeof p, "%s/%s.script", d->script_dir, first);
        if (access(p, R_OK) == 0)
            snprintf(d->script_now, sizeof d->script_now, "%s", p);
    }
    atomic_store(&d->cancel, 0);
    ui_push_text(d->view, UI_EV_REPLY_BEGIN, NULL, 0);
    if (pthread_create(&d->thread, NULL, reply_thread, d) != 0) {
        ui_push_text(d->view, UI_EV_ERROR, "cannot start the reply thread", 29);
        ui_push_finish(d->view, "error");
        return;
    }
    d->thread_live = 1;
}

static void notice(driver *d, const char *fmt, const char *a, const char *b)
{
    char msg[512];
    snprintf(msg, sizeof msg, fmt, a, b);
    ui_push_text(d->view, UI_EV_NOTICE, msg, strlen(msg));
}

/* The driver's stand-in for storage: three saved conversations. */
static const char *const saved[][3] = {
    {"c3", "Trellis codes in EXL3", "2026-12-02 14:10 · 12 messages"},
    {"c2", "RoCE between two Sparks", "2026-12-01 09:30 · 4 messages"},
    {"c1", "A haiku about caches", "2026-11-30 22:05 · 2 messages"},
};

static void push_conversations(driver *d)
{
    ui_push_text(d->view, UI_EV_CONV_CLEAR, NULL, 0);
    for (size_t i = 0; i < sizeof saved / sizeof saved[0]; i++)
        ui_push_conv(d->view, saved[i][0], saved[i][1], saved[i][2]);
}

static const char *saved_title(const char *id)
{
    for (size_t i = 0; i < sizeof saved / sizeof saved[0]; i++)
        if (strcmp(saved[i][0], id) == 0)
            return saved[i][1];
    return id;
}

static void on_command(driver *d, const char *name, const char *args)
{
    if (strcmp(name, "new") == 0) {
        ui_push_text(d->view, UI_EV_CLEAR, NULL, 0);
        notice(d, "new conversation%s%s", "", "");
    } else if (strcmp(name, "list") == 0 || strcmp(name, "search") == 0) {
        push_conversations(d);
    } else if (strcmp(name, "think") == 0) {
        d->thinking = strcmp(args, "off") != 0;
        notice(d, "thinking: %s%s", d->thinking ? "on" : "off", "");
    } else if (strcmp(name, "edit") == 0) {
        ui_push_text(d->view, UI_EV_SET_INPUT, d->last_prompt, strlen(d->last_prompt));
    } else if (strcmp(name, "retry") == 0) {
        if (d->last_prompt[0])
            start_reply(d, d->last_prompt);
    } else if (strcmp(name, "help") != 0 && strcmp(name, "copy") != 0) {
        notice(d, "driver ran /%s %s", name, args);
    }
}

static void on_action(const ui_action *a, void *user)
{
    driver *d = user;
    switch (a->type) {
    case UI_ACT_SUBMIT:
        snprintf(d->last_prompt, sizeof d->last_prompt, "%s", a->text);
        ui_push_text(d->view, UI_EV_USER, a->text, a->len);
        d->ctx_used += (long)a->len / 4 + 1;
        start_reply(d, a->text);
        break;
    case UI_ACT_COMMAND:
        on_command(d, a->name, a->text);
        break;
    case UI_ACT_CANCEL:
        atomic_store(&d->cancel, 1);
        pthread_mutex_lock(&d->mu);
        pthread_cond_broadcast(&d->cv);
        pthread_mutex_unlock(&d->mu);
        break;
    case UI_ACT_APPROVE:
        pthread_mutex_lock(&d->mu);
        d->answer = a->answer;
        pthread_cond_broadcast(&d->cv);
        pthread_mutex_unlock(&d->mu);
        break;
    case UI_ACT_OPEN:
        ui_push_text(d->view, UI_EV_CLEAR, NULL, 0);
        notice(d, "opened conversation %s%s", a->id, "");
        ui_status st = ui_status_none();
        st.conversation = saved_title(a->id);
        ui_push_status(d->view, &st);
        ui_push_text(d->view, UI_EV_USER, "an old question", 15);
        ui_push_text(d->view, UI_EV_REPLY_BEGIN, NULL, 0);
        ui_push_text(d->view, UI_EV_CONTENT_DELTA, "an old answer", 13);
        ui_push_finish(d->view, "stop");
        break;
    case UI_ACT_DELETE:
    case UI_ACT_RENAME: /* the real list actions are tested with glmchat (chat_tui_conversations.sh) */
        notice(d, "%s conversation %s", a->type == UI_ACT_DELETE ? "delete" : "rename", a->id);
        break;
    case UI_ACT_QUIT:
        atomic_store(&d->quit, 1);
        break;
    }
}

int main(int argc, char **argv)
{
    driver d;
    memset(&d, 0, sizeof d);
    pthread_mutex_init(&d.mu, NULL);
    pthread_cond_init(&d.cv, NULL);
    d.thinking = 1;
    const char *history = NULL, *latency_log = NULL;
    int no_mouse = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--no-mouse") == 0)
            no_mouse = 1;
        else if (strcmp(argv[i], "--history") == 0 && i + 1 < argc)
            history = argv[++i];
        else if (strcmp(argv[i], "--latency-log") == 0 && i + 1 < argc)
            latency_log = argv[++i];
        else if (strcmp(argv[i], "--script") == 0 && i + 1 < argc)
            d.script = argv[++i];
        else if (strcmp(argv[i], "--script-dir") == 0 && i + 1 < argc)
            d.script_dir = argv[++i];
        else {
            fprintf(stderr, "usage: tui_driver [--history FILE] [--script FILE] "
                            "[--script-dir DIR] [--no-mouse] [--latency-log FILE]\n");
            return 2;
        }
    }
    if (!d.script)
        d.script = "/dev/null";
    ui_config cfg = {.history_file = history, .no_mouse = no_mouse, .latency_log = latency_log,
                     .on_action = on_action, .user = &d};
    char err[512];
    d.view = ui_tui_new(&cfg, err, sizeof err);
    if (!d.view) {
        fprintf(stderr, "tui_driver: %s\n", err);
        return 1;
    }
    ui_status st = ui_status_none();
    st.model = "tiny-test";
    st.backend = "script";
    st.ranks = 1;
    st.ctx_used = 0;
    st.ctx_window = 4096;
    ui_push_status(d.view, &st);
    int rc = ui_run(d.view);
    atomic_store(&d.quit, 1);
    join_reply(&d);
    ui_free(d.view);
    pthread_cond_destroy(&d.cv);
    pthread_mutex_destroy(&d.mu);
    printf("tui_driver: terminal restored, rc %d\n", rc);
    return rc == 0 ? 0 : 1;
}
