/* view_impl.h: what the view keeps behind view.h: the thread-safe event queue with its
 * wakeup pipe, and the table of a view's run/free functions. Not for the app. */
#ifndef GLMCHAT_UI_VIEW_IMPL_H
#define GLMCHAT_UI_VIEW_IMPL_H

#include <pthread.h>

#include "ui/view.h"

enum { UIQ_STOP = 1000 }; /* a queued ui_stop(), after the ui_event_type values */

/* One queued event; every string is an owned copy (NULL when not given). */
typedef struct uiq_item {
    int type; /* ui_event_type or UIQ_STOP */
    char *text;
    size_t len;
    char *id, *name;
    ui_status status; /* UI_EV_STATUS: strings owned by the item */
    struct uiq_item *next;
} uiq_item;

typedef struct ui_view_ops {
    int (*run)(ui_view *v);
    void (*free_impl)(ui_view *v);
} ui_view_ops;

struct ui_view {
    const ui_view_ops *ops;
    ui_config cfg;
    pthread_mutex_t mu;
    uiq_item *head, *tail;
    int wake[2];   /* [0] is polled by the UI thread; a byte in [1] means "queue not empty" */
    int lost;      /* pushes dropped for lack of memory, reported by the view */
    void *impl;
};

/* Sets up the shared part. 0, or -1 with a message in err. */
int ui_view_init(ui_view *v, const ui_config *cfg, const ui_view_ops *ops, char *err,
                 size_t errlen);
/* Takes every queued event, oldest first (free each with uiq_item_free), and drains the pipe. */
uiq_item *ui_view_take(ui_view *v);
void uiq_item_free(uiq_item *it);
/* Calls the app's on_action, if any. */
void ui_view_act(ui_view *v, const ui_action *a);
/* Splits "/name args" into the command entry and its arguments; NULL when name is unknown. */
const ui_command *ui_command_parse(const char *line, char *name, size_t name_cap,
                                   const char **args);

#endif
