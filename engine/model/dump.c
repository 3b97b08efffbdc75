/* dump.c: glm_dump_tensor (glm_tokens.h): one tensor of a checkpoint to a float32 file, for
 * comparing the loader's view of a weight with a reference's. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "glm_tokens.h"
#include "model/safetensors.h"
#include "model/weights.h"

_Static_assert(sizeof ((glm_tensor_info *)0)->shape / sizeof(int64_t) >= ST_MAX_DIMS,
               "glm_tensor_info holds every dimension a safetensors tensor has");

/* Writes n floats to path, whole or with an error naming it. */
static glm_status write_floats(const char *path, const float *vals, size_t n, glm_error *err)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return glm_error_set(err, GLM_ERR_IO, "cannot create %s: %s", path, strerror(errno));
    int bad = fwrite(vals, sizeof *vals, n, f) != n;
    bad |= fclose(f) != 0;
    if (bad)
        return glm_error_set(err, GLM_ERR_IO, "cannot write %s: %s", path, strerror(errno));
    return GLM_OK;
}

glm_status glm_dump_tensor(const char *model_dir, const char *name, const char *out_path,
                           glm_tensor_info *info, glm_error *err)
{
    memset(info, 0, sizeof *info);
    st_model *m = st_open_dir(model_dir, err);
    if (!m)
        return err && err->status ? err->status : GLM_ERR_IO;
    float *vals = NULL;
    int64_t numel = 0;
    glm_error why = {0};
    glm_status st = glm_tensor_to_f32(m, name, &vals, &numel, &info->ndim, info->shape, &why);
    if (st != GLM_OK)
        glm_error_set(err, st, "%s: %s", model_dir, why.message);
    else
        st = write_floats(out_path, vals, (size_t)numel, err);
    if (st == GLM_OK) {
        const st_tensor *t = st_find(m, name);
        snprintf(info->dtype, sizeof info->dtype, "%s", t ? st_dtype_name(t->dtype) : "EXL3");
    }
    free(vals);
    st_close(m);
    return st;
}
