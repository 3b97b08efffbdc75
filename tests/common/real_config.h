/* real_config.h: GLM-5.3-Flash's published config (tests/fixtures/cuda/config.json) for the unit
 * suites that compute on the real shapes: the plan, the traffic count, the kernels' limits. */
#ifndef GLMCHAT_TESTS_COMMON_REAL_CONFIG_H
#define GLMCHAT_TESTS_COMMON_REAL_CONFIG_H

#include <stdio.h>
#include <stdlib.h>

#include "model/config.h"

/* Loads it from $GLMCHAT_SRCDIR (the source tree; else the current directory) into c; 0, or -1
 * after saying why on stderr, prefixed with the suite's name `who`. */
static inline int real_config_load(glm_config *c, const char *who)
{
    const char *src = getenv("GLMCHAT_SRCDIR");
    char path[1024];
    snprintf(path, sizeof path, "%s/tests/fixtures/cuda", src ? src : ".");
    glm_error err = {0};
    if (glm_config_load(c, path, &err) == GLM_OK)
        return 0;
    fprintf(stderr, "%s: %s\n", who, err.message);
    return -1;
}

#endif
