/* error.c: glm_error_set, the one way engine code reports a failure to its caller.
 * Messages are sentences that say what failed and what to do. */
#include <stdarg.h>
#include <stdio.h>

#include "glm.h"

glm_status glm_error_set(glm_error *err, glm_status status, const char *fmt, ...)
{
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->message, sizeof err->message, fmt, ap);
        va_end(ap);
        err->status = status;
    }
    return status;
}

const char *glm_version(void)
{
    return PACKAGE_VERSION;
}
