/* log.h: the engine's one way to say something: a printf-style line handed to the application's
 * glm_log_fn (glm_engine_params.log); without one the line is dropped. */
#ifndef GLMCHAT_ENGINE_LOG_H
#define GLMCHAT_ENGINE_LOG_H

#include <stdarg.h>

#include "glm.h"

/* The destination of an engine's lines: the application's callback and its pointer. */
typedef struct engine_log {
    glm_log_fn fn; /* NULL: lines are dropped */
    void *user;
} engine_log;

/* Formats one line (cut at 4 KiB) and hands it to log->fn at `level` (glm_log_level). */
void engine_logf(const engine_log *log, int level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* The same from a va_list, for the engine's own printf-style helpers. */
void engine_vlogf(const engine_log *log, int level, const char *fmt, va_list ap)
    __attribute__((format(printf, 3, 0)));

#endif
