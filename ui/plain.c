/* plain.c: the stdio view for scripts and pipes: a message per input line, the answer on
 * out, thinking (when asked), tool lines and notices on errs; no terminal control at all. */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ui/view_impl.h"
#include "ui/visible.h"

typedef struct plain_view {
    FILE *in, *out, *errs;
    int in_fd;
    char *buf;            /* bytes read from in, not yet a whole line */
    size_t blen, bcap;
    char *msg;            /* a message continued with '\' */
    size_t mlen;
    int eof, busy, stop, quit;
    int text_open;        /* the answer's last line has no '\n' yet */
    int think_open;
    char *approve_id;     /* a tool call waiting for y/c/a/n on the next line */
    visible_stream out_vs, errs_vs; /* control characters are shown escaped */
} plain_view;

static void plain_act(ui_view *v, ui_action_type t, const char *text, const char *name,
                      const char *id, char answer)
{
    ui_action a = {t, text ? text : "", text ? strlen(text) : 0, name, id, answer};
    ui_view_act(v, &a);
}

static void end_open_lines(plain_view *p)
{
    visible_flush(p->errs, &p->errs_vs);
    visible_flush(p->out, &p->out_vs);
    if (p->think_open) {
        fputc('\n', p->errs);
        p->think_open = 0;
    }
    if (p->text_open) {
        fputc('\n', p->out);
        p->text_open = 0;
    }
}

static void show_help(plain_view *p)
{
    for (size_t i = 0; i < ui_commands_count; i++)
        fprintf(p->errs, "/%s %s  %s\n", ui_commands[i].name, ui_commands[i].args,
                ui_commands[i].help);
    fprintf(p->errs, "A line led by a path (/etc/hosts: ...) is a message; //text sends /text\n");
}

static void plain_event(ui_view *v, plain_view *p, const uiq_item *it)
{
    switch (it->type) {
    case UI_EV_REPLY_BEGIN:
        p->busy = 1;
        break;
    case UI_EV_REASONING_DELTA:
        if (v->cfg.show_thinking) {
            visible_write_stream(p->errs, &p->errs_vs, it->text, it->len);
            p->think_open = it->len > 0 && it->text[it->len - 1] != '\n';
        }
        break;
    case UI_EV_CONTENT_DELTA:
        if (p->think_open) {
            fputc('\n', p->errs);
            p->think_open = 0;
        }
        visible_write_stream(p->out, &p->out_vs, it->text, it->len);
        if (it->len)
            p->text_open = it->text[it->len - 1] != '\n';
        fflush(p->out);
        break;
    case UI_EV_TOOL_BEGIN:
        end_open_lines(p);
        fprintf(p->errs, "[tool %s]\n", it->name ? it->name : "?");
        break;
    case UI_EV_TOOL_END:
        fprintf(p->errs, "[tool arguments] ");
        visible_write(p->errs, it->text, it->len);
        fputc('\n', p->errs);
        break;
    case UI_EV_TOOL_APPROVE:
        end_open_lines(p);
        visible_write(p->errs, it->len ? it->text : "run this tool?", it->len ? it->len : 14);
        fprintf(p->errs, "\n%s: ", UI_APPROVAL_CHOICES);
        fflush(p->errs);
        free(p->approve_id);
        p->approve_id = strdup(it->id ? it->id : "");
        break;
    case UI_EV_TOOL_RESULT:
        fprintf(p->errs, "[tool result, %zu bytes]\n", it->len);
        break;
    case UI_EV_TOOL_ERROR:
        fprintf(p->errs, "[tool error] ");
        visible_write(p->errs, it->text, it->len);
        fputc('\n', p->errs);
        break;
    case UI_EV_FINISH:
        end_open_lines(p);
        if (strcmp(it->text, "canceled") == 0 || strcmp(it->text, "length") == 0)
            fprintf(p->errs, "[%s]\n", it->text);
        p->busy = 0;
        break;
    case UI_EV_NOTICE:
        end_open_lines(p);
        fprintf(p->errs, "%s\n", it->text);
        break;
    case UI_EV_ERROR:
        end_open_lines(p);
        fprintf(p->errs, "error: ");
        visible_write(p->errs, it->text, it->len);
        fputc('\n', p->errs);
        break;
    case UI_EV_CONV_ITEM:
        fprintf(p->errs, "%s  %s  %s\n", it->id, it->name, it->text);
        break;
    case UIQ_STOP:
        p->stop = 1;
        break;
    default: /* the user's own line, status, list and input changes: nothing to print */
        break;
    }
}

static void drain(ui_view *v, plain_view *p)
{
    uiq_item *it = ui_view_take(v);
    while (it) {
        uiq_item *n = it->next;
        plain_event(v, p, it);
        uiq_item_free(it);
        it = n;
    }
    fflush(p->out);
    fflush(p->errs);
}

/* One complete input line (without '\n'). */
static void plain_line(ui_view *v, plain_view *p, char *line)
{
    size_t n = strlen(line);
    if (p->approve_id) {
        char c = (char)(line[0] | 0x20);
        char ans = c == 'y' || c == 'c' || c == 'a' ? c : 'n';
        char *id = p->approve_id;
        p->approve_id = NULL;
        plain_act(v, UI_ACT_APPROVE, NULL, NULL, id, ans);
        free(id);
        return;
    }
    int cont = n > 0 && line[n - 1] == '\\';
    if (cont)
        line[--n] = '\0';
    char *m = realloc(p->msg, p->mlen + n + 2);
    if (!m) {
        fprintf(p->errs, "error: out of memory reading the input line\n");
        return;
    }
    p->msg = m;
    memcpy(p->msg + p->mlen, line, n);
    p->mlen += n;
    if (cont) {
        p->msg[p->mlen++] = '\n';
        return;
    }
    p->msg[p->mlen] = '\0';
    p->mlen = 0;
    if (p->msg[0] == '\0')
        return;
    if (ui_line_is_command(p->msg)) {
        char name[32];
        const char *args;
        const ui_command *c = ui_command_parse(p->msg, name, sizeof name, &args);
        if (!c) {
            fprintf(p->errs, "error: unknown command /%s: /help lists the commands\n", name);
            return;
        }
        if (strcmp(name, "quit") == 0) {
            plain_act(v, UI_ACT_QUIT, NULL, NULL, NULL, 0);
            p->quit = 1;
            return;
        }
        if (strcmp(name, "help") == 0)
            show_help(p);
        plain_act(v, UI_ACT_COMMAND, args, name, NULL, 0);
        return;
    }
    plain_act(v, UI_ACT_SUBMIT, ui_line_message(p->msg), NULL, NULL, 0);
}

/* Reads what is there on in; hands over complete lines while no reply runs. */
static int read_input(plain_view *p)
{
    if (p->bcap - p->blen < 4096) {
        char *b = realloc(p->buf, p->bcap + 8192);
        if (!b)
            return -1;
        p->buf = b;
        p->bcap += 8192;
    }
    ssize_t got = read(p->in_fd, p->buf + p->blen, p->bcap - p->blen - 1);
    if (got < 0)
        return errno == EINTR || errno == EAGAIN ? 0 : -1;
    if (got == 0)
        p->eof = 1;
    p->blen += (size_t)got;
    return 0;
}

/* Hands over the next complete line, if any and if no reply runs. 1 when one was handed. */
static int next_line(ui_view *v, plain_view *p)
{
    if (p->busy && !p->approve_id)
        return 0;
    char *nl = memchr(p->buf, '\n', p->blen);
    if (!nl && !(p->eof && p->blen > 0))
        return 0;
    size_t n = nl ? (size_t)(nl - p->buf) : p->blen;
    p->buf[n] = '\0';
    char *line = strdup(p->buf);
    size_t used = nl ? n + 1 : n;
    memmove(p->buf, p->buf + used, p->blen - used);
    p->blen -= used;
    if (!line)
        return -1;
    plain_line(v, p, line);
    free(line);
    return 1;
}

static int plain_run(ui_view *v)
{
    plain_view *p = v->impl;
    while (!p->stop && !p->quit) {
        drain(v, p);
        if (p->stop || p->quit)
            break;
        int handed = next_line(v, p);
        if (handed < 0)
            return -1;
        if (handed)
            continue;
        if (p->eof && p->blen == 0 && !p->busy) {
            if (p->mlen > 0) { /* a last line ending in '\' */
                p->msg[p->mlen] = '\0';
                p->mlen = 0;
                plain_act(v, UI_ACT_SUBMIT, p->msg, NULL, NULL, 0);
                continue;
            }
            plain_act(v, UI_ACT_QUIT, NULL, NULL, NULL, 0);
            break;
        }
        struct pollfd fds[2] = {{v->wake[0], POLLIN, 0}, {p->in_fd, POLLIN, 0}};
        int nfds = p->eof ? 1 : 2;
        if (poll(fds, (nfds_t)nfds, -1) < 0 && errno != EINTR)
            return -1;
        if (nfds == 2 && (fds[1].revents & (POLLIN | POLLHUP | POLLERR)) && read_input(p) < 0)
            return -1;
    }
    drain(v, p);
    end_open_lines(p);
    fflush(p->out);
    return 0;
}

static void plain_free(ui_view *v)
{
    plain_view *p = v->impl;
    if (!p)
        return;
    free(p->buf);
    free(p->msg);
    free(p->approve_id);
    free(p);
}

static const ui_view_ops plain_ops = {plain_run, plain_free};

ui_view *ui_plain_new(const ui_config *cfg, FILE *in, FILE *out, FILE *errs, char *err,
                      size_t errlen)
{
    ui_view *v = malloc(sizeof *v);
    plain_view *p = calloc(1, sizeof *p);
    if (!v || !p) {
        snprintf(err, errlen, "out of memory making the plain view");
        free(v);
        free(p);
        return NULL;
    }
    if (ui_view_init(v, cfg, &plain_ops, err, errlen) < 0) {
        free(v);
        free(p);
        return NULL;
    }
    p->in = in;
    p->out = out;
    p->errs = errs;
    p->in_fd = fileno(in);
    v->impl = p;
    return v;
}
