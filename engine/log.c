/* log.c: engine_logf, the formatting in front of the application's glm_log_fn, and the
 * engine's default parameters. */
#include "log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

void engine_vlogf(const engine_log *log, int level, const char *fmt, va_list ap)
{
    if (!log || !log->fn)
        return;
    char line[4096];
    vsnprintf(line, sizeof line, fmt, ap);
    log->fn(log->user, level, line);
}

void engine_logf(const engine_log *log, int level, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    engine_vlogf(log, level, fmt, ap);
    va_end(ap);
}

glm_engine_params glm_engine_default_params(void)
{
    glm_engine_params p;
    memset(&p, 0, sizeof p);
    p.backend = GLM_BACKEND_AUTO;
    p.draft = GLM_DRAFT_DEFAULT;
    p.kv_cache = GLM_KV_CACHE_DEFAULT;
    p.dense = GLM_DENSE_DEFAULT;
    return p;
}
