/* model.c: opens a model directory (config, generation config, safetensors, weights) and
 * closes it; the one place that knows what a complete model directory holds. */
#include "model/model.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

glm_model *glm_model_open(const char *dir, glm_error *err)
{
    glm_model *m = calloc(1, sizeof *m);
    if (!m || !(m->dir = strdup(dir))) {
        free(m);
        glm_error_set(err, GLM_ERR_NOMEM, "out of memory opening %s", dir);
        return NULL;
    }
    char where[PATH_MAX];
    snprintf(where, sizeof where, "%s/model.safetensors.index.json", dir);
    if (access(where, F_OK) != 0)
        snprintf(where, sizeof where, "%s/model.safetensors", dir);
    if (glm_config_load(&m->cfg, dir, err) || glm_generation_config_load(&m->gen, dir, err))
        goto fail;
    m->st = st_open_dir(dir, err);
    if (!m->st || glm_weights_bind(&m->w, &m->cfg, m->st, where, err))
        goto fail;
    return m;
fail:
    glm_model_close(m);
    return NULL;
}

void glm_model_close(glm_model *m)
{
    if (!m)
        return;
    glm_weights_free(&m->w);
    st_close(m->st);
    free(m->dir);
    free(m);
}
