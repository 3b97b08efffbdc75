/* view.c: the part of view.h both views share: the event queue the app pushes into from any
 * thread, its wakeup pipe, and ui_run/ui_free dispatch to the view (the TUI). */
#include "ui/view_impl.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

ui_status ui_status_none(void)
{
    return (ui_status){NULL, NULL, NULL, -1, -1, -1, -1.0, -1.0, -1, -1.0, NULL, -1.0, -1, -1};
}

static char *dup_or_null(const char *s, size_t len)
{
    if (!s)
        return NULL;
    char *d = malloc(len + 1);
    if (!d)
        return NULL;
    memcpy(d, s, len);
    d[len] = '\0';
    return d;
}

static char *dup_str(const char *s)
{
    return s ? dup_or_null(s, strlen(s)) : NULL;
}

void uiq_item_free(uiq_item *it)
{
    if (!it)
        return;
    free(it->text);
    free(it->id);
    free(it->name);
    free((char *)it->status.model);
    free((char *)it->status.backend);
    free((char *)it->status.conversation);
    free((char *)it->status.waiting);
    free(it);
}

static void enqueue(ui_view *v, uiq_item *it)
{
    pthread_mutex_lock(&v->mu);
    int was_empty = v->head == NULL;
    if (v->tail)
        v->tail->next = it;
    else
        v->head = it;
    v->tail = it;
    pthread_mutex_unlock(&v->mu);
    if (was_empty) {
        char b = 1;
        /* The pipe is non-blocking; a full pipe already means "wake up". */
        while (write(v->wake[1], &b, 1) < 0 && errno == EINTR)
            ;
    }
}

static uiq_item *item_new(int type)
{
    uiq_item *it = calloc(1, sizeof *it);
    if (it) {
        it->type = type;
        it->status = ui_status_none();
    }
    return it;
}

static void note_lost(ui_view *v)
{
    pthread_mutex_lock(&v->mu);
    v->lost++;
    pthread_mutex_unlock(&v->mu);
}

void ui_push_tool(ui_view *v, ui_event_type type, const char *id, const char *name,
                  const char *text, size_t len)
{
    if (!v)
        return;
    uiq_item *it = item_new(type);
    if (!it) {
        note_lost(v);
        return;
    }
    it->text = dup_or_null(text ? text : "", text ? len : 0);
    it->len = text ? len : 0;
    it->id = dup_str(id);
    it->name = dup_str(name);
    if (!it->text || (id && !it->id) || (name && !it->name)) {
        uiq_item_free(it);
        note_lost(v);
        return;
    }
    enqueue(v, it);
}

void ui_push_text(ui_view *v, ui_event_type type, const char *text, size_t len)
{
    ui_push_tool(v, type, NULL, NULL, text, len);
}

void ui_push_finish(ui_view *v, const char *reason)
{
    reason = reason ? reason : "stop";
    ui_push_tool(v, UI_EV_FINISH, NULL, NULL, reason, strlen(reason));
}

void ui_push_conv(ui_view *v, const char *id, const char *title, const char *detail)
{
    detail = detail ? detail : "";
    ui_push_tool(v, UI_EV_CONV_ITEM, id ? id : "", title ? title : "", detail, strlen(detail));
}

void ui_push_status(ui_view *v, const ui_status *s)
{
    if (!v || !s)
        return;
    uiq_item *it = item_new(UI_EV_STATUS);
    if (!it) {
        note_lost(v);
        return;
    }
    it->status = *s;
    it->status.model = dup_str(s->model);
    it->status.backend = dup_str(s->backend);
    it->status.conversation = dup_str(s->conversation);
    it->status.waiting = dup_str(s->waiting);
    if ((s->model && !it->status.model) || (s->backend && !it->status.backend) ||
        (s->conversation && !it->status.conversation) || (s->waiting && !it->status.waiting)) {
        uiq_item_free(it);
        note_lost(v);
        return;
    }
    enqueue(v, it);
}

void ui_stop(ui_view *v)
{
    if (!v)
        return;
    uiq_item *it = item_new(UIQ_STOP);
    if (!it) {
        note_lost(v);
        return;
    }
    enqueue(v, it);
}

int ui_view_init(ui_view *v, const ui_config *cfg, const ui_view_ops *ops, char *err,
                 size_t errlen)
{
    memset(v, 0, sizeof *v);
    v->ops = ops;
    if (cfg)
        v->cfg = *cfg;
    if (pipe(v->wake) < 0) {
        snprintf(err, errlen, "cannot make the view's wakeup pipe: %s", strerror(errno));
        return -1;
    }
    for (int i = 0; i < 2; i++) {
        int fl = fcntl(v->wake[i], F_GETFL);
        if (fl < 0 || fcntl(v->wake[i], F_SETFL, fl | O_NONBLOCK) < 0 ||
            fcntl(v->wake[i], F_SETFD, FD_CLOEXEC) < 0) {
            snprintf(err, errlen, "cannot set up the view's wakeup pipe: %s", strerror(errno));
            close(v->wake[0]);
            close(v->wake[1]);
            return -1;
        }
    }
    pthread_mutex_init(&v->mu, NULL);
    return 0;
}

uiq_item *ui_view_take(ui_view *v)
{
    char buf[256];
    while (read(v->wake[0], buf, sizeof buf) > 0)
        ;
    pthread_mutex_lock(&v->mu);
    uiq_item *h = v->head;
    v->head = v->tail = NULL;
    pthread_mutex_unlock(&v->mu);
    return h;
}

void ui_view_act(ui_view *v, const ui_action *a)
{
    if (v->cfg.on_action)
        v->cfg.on_action(a, v->cfg.user);
}

int ui_run(ui_view *v)
{
    return v ? v->ops->run(v) : -1;
}

void ui_free(ui_view *v)
{
    if (!v)
        return;
    v->ops->free_impl(v);
    uiq_item *it = v->head;
    while (it) {
        uiq_item *n = it->next;
        uiq_item_free(it);
        it = n;
    }
    close(v->wake[0]);
    close(v->wake[1]);
    pthread_mutex_destroy(&v->mu);
    free(v);
}
