/* engine_log.h: where the engine's lines (glm_log_fn) go in glmchat: "glmchat: LINE" on stderr
 * in scripted mode and for the commands, appended to a log file while the TUI owns the screen. */
#ifndef GLMCHAT_APP_ENGINE_LOG_H
#define GLMCHAT_APP_ENGINE_LOG_H

#include <stdio.h>

#include "engine/glm.h"

typedef struct app_log {
    FILE *file;    /* NULL: stderr */
    int own_file;  /* 1: app_log_close closes it */
} app_log;

/* Lines to stderr. */
void app_log_init(app_log *l);

/* Lines appended to path from now on (the directory must exist). 0, or -1 with err naming the
 * file; l keeps what it had on failure. */
int app_log_to_file(app_log *l, const char *path, char *err, size_t errlen);

void app_log_close(app_log *l);

/* The glm_log_fn to give the engine, with l as its user pointer. */
void app_log_engine(void *user, int level, const char *msg);

#endif
