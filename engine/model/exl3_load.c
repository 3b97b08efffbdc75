/* exl3_load.c: finds an EXL3 module's tensors in a safetensors checkpoint and checks them
 * against the format (research/exl3.md section 1.1) before anything decodes them. */
#include "engine/model/exl3_load.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* "<module>.<part>" into buf; the module is prefix without a trailing ".weight". */
static const st_tensor *part(const st_model *m, const char *prefix, const char *suffix,
                             char *buf, size_t n)
{
    size_t len = strlen(prefix);
    if (len > 7 && strcmp(prefix + len - 7, ".weight") == 0)
        len -= 7;
    snprintf(buf, n, "%.*s.%s", (int)len, prefix, suffix);
    return st_find(m, buf);
}

int exl3_is_stored(const st_model *m, const char *prefix)
{
    char name[512];
    return part(m, prefix, "trellis", name, sizeof name) != NULL;
}

static glm_status want(const st_tensor *t, const char *name, st_dtype dtype, int ndim,
                       const int64_t *shape, glm_error *err)
{
    int ok = t->dtype == dtype && t->ndim == ndim;
    for (int i = 0; ok && i < ndim; i++)
        ok = t->shape[i] == shape[i];
    if (!ok) {
        char got[128] = "", exp[128] = "";
        size_t a = 0, b = 0;
        for (int i = 0; i < t->ndim && a < sizeof got; i++)
            a += (size_t)snprintf(got + a, sizeof got - a, "%s%lld", i ? ", " : "",
                                  (long long)t->shape[i]);
        for (int i = 0; i < ndim && b < sizeof exp; i++)
            b += (size_t)snprintf(exp + b, sizeof exp - b, "%s%lld", i ? ", " : "",
                                  (long long)shape[i]);
        return glm_error_set(err, GLM_ERR_FORMAT, "EXL3 tensor %s is %s [%s]; the format needs "
                             "%s [%s]", name, st_dtype_name(t->dtype), got, st_dtype_name(dtype),
                             exp);
    }
    if ((uintptr_t)t->data % 2)
        return glm_error_set(err, GLM_ERR_UNSUPPORTED, "EXL3 tensor %s in %s starts at an odd "
                             "byte offset; rewrite the file with aligned tensors", name, t->file);
    return GLM_OK;
}

/* A codebook marker: I32 of shape [] (as glmchat quantize writes it) or [1] (as the published
 * checkpoint stores it). Its value is not read: the multipliers are fixed, and exllamav3 selects
 * the codebook by the marker's presence alone (research/exl3.md 1.1). */
static glm_status check_marker(const st_tensor *x, glm_error *err)
{
    if (x->dtype != ST_I32 || !(x->ndim == 0 || (x->ndim == 1 && x->shape[0] == 1))) {
        char shape[128] = "";
        size_t o = 0;
        for (int i = 0; i < x->ndim && o < sizeof shape; i++)
            o += (size_t)snprintf(shape + o, sizeof shape - o, "%s%lld", i ? ", " : "",
                                  (long long)x->shape[i]);
        return glm_error_set(err, GLM_ERR_FORMAT, "EXL3 codebook marker %s in %s is %s [%s]; the "
                             "format needs I32 of shape [] or [1]", x->name, x->file,
                             st_dtype_name(x->dtype), shape);
    }
    return GLM_OK;
}

static glm_status pick_codebook(const st_model *m, const char *prefix, int config_codebook,
                                exl3_tensor *t, glm_error *err)
{
    char name[512];
    const st_tensor *mcg = part(m, prefix, "mcg", name, sizeof name);
    const st_tensor *mul1 = part(m, prefix, "mul1", name, sizeof name);
    if (mcg && mul1)
        return glm_error_set(err, GLM_ERR_FORMAT, "EXL3 module %s has both .mcg and .mul1 "
                             "markers; keep the one its codebook needs", prefix);
    glm_status st;
    if (mcg && (st = check_marker(mcg, err)) != GLM_OK)
        return st;
    if (mul1 && (st = check_marker(mul1, err)) != GLM_OK)
        return st;
    if (mcg || mul1)
        return exl3_codebook_from_markers(mcg != NULL, mul1 != NULL, &t->codebook, err);
    if (config_codebook < 0) {
        const st_tensor *tr = part(m, prefix, "trellis", name, sizeof name);
        return glm_error_set(err, GLM_ERR_FORMAT, "EXL3 module %s (%s) has no codebook marker "
                             "(.mcg or .mul1) and config.json's quantization_config names no "
                             "codebook; add \"codebook\": \"3inst\" (or the one it was "
                             "quantized with) there", prefix, tr ? tr->file : "?");
    }
    t->codebook = (exl3_codebook)config_codebook;
    return GLM_OK;
}

glm_status exl3_load(const st_model *m, const char *prefix, exl3_tensor *t, glm_error *err)
{
    return exl3_load_codebook(m, prefix, -1, t, err);
}

glm_status exl3_load_codebook(const st_model *m, const char *prefix, int config_codebook,
                              exl3_tensor *t, glm_error *err)
{
    char name[512];
    memset(t, 0, sizeof *t);
    const st_tensor *tr = part(m, prefix, "trellis", name, sizeof name);
    if (!tr)
        return glm_error_set(err, GLM_ERR_ARG, "%s is not stored as EXL3 (no %s)", prefix, name);
    if (tr->dtype != ST_I16 || tr->ndim != 3 || tr->shape[2] % 16 || tr->shape[2] < 16 ||
        tr->shape[2] > 16 * EXL3_MAX_BITS || tr->shape[0] < 1 || tr->shape[1] < 1 ||
        tr->shape[0] > (1 << 20) || tr->shape[1] > (1 << 20))
        return glm_error_set(err, GLM_ERR_FORMAT, "EXL3 tensor %s must be I16 [in/16, out/16, "
                             "16*K] with K in 1..8", name);
    t->in = (int)tr->shape[0] * 16;
    t->out = (int)tr->shape[1] * 16;
    t->bits = (int)(tr->shape[2] / 16);
    if (t->in % 128 || t->out % 128)
        return glm_error_set(err, GLM_ERR_FORMAT, "EXL3 tensor %s covers %d x %d weights; both "
                             "must be multiples of 128", name, t->in, t->out);
    glm_status st = want(tr, name, ST_I16, 3, tr->shape, err);
    if (st != GLM_OK)
        return st;
    t->trellis = tr->data;
    int64_t in_shape[1] = {t->in}, out_shape[1] = {t->out};
    int64_t in_signs[1] = {t->in / 16}, out_signs[1] = {t->out / 16};
    const st_tensor *x;
    if ((x = part(m, prefix, "suh", name, sizeof name))) {
        if ((st = want(x, name, ST_F16, 1, in_shape, err)) != GLM_OK)
            return st;
        t->suh = x->data;
    } else if ((x = part(m, prefix, "su", name, sizeof name))) {
        if ((st = want(x, name, ST_I16, 1, in_signs, err)) != GLM_OK)
            return st;
        t->su = x->data;
    } else {
        return glm_error_set(err, GLM_ERR_FORMAT, "EXL3 module %s has a trellis but neither "
                             ".suh nor .su", prefix);
    }
    if ((x = part(m, prefix, "svh", name, sizeof name))) {
        if ((st = want(x, name, ST_F16, 1, out_shape, err)) != GLM_OK)
            return st;
        t->svh = x->data;
    } else if ((x = part(m, prefix, "sv", name, sizeof name))) {
        if ((st = want(x, name, ST_I16, 1, out_signs, err)) != GLM_OK)
            return st;
        t->sv = x->data;
    } else {
        return glm_error_set(err, GLM_ERR_FORMAT, "EXL3 module %s has a trellis but neither "
                             ".svh nor .sv", prefix);
    }
    if ((x = part(m, prefix, "bias", name, sizeof name))) {
        if ((st = want(x, name, ST_F16, 1, out_shape, err)) != GLM_OK)
            return st;
        t->bias = x->data;
    }
    if ((st = pick_codebook(m, prefix, config_codebook, t, err)) != GLM_OK)
        return st;
    return exl3_check(t, err);
}

glm_status exl3_load_dequantized(const st_model *m, const char *prefix, float **w, int *out,
                                 int *in, glm_error *err)
{
    return exl3_load_dequantized_codebook(m, prefix, -1, w, out, in, err);
}

glm_status exl3_load_dequantized_codebook(const st_model *m, const char *prefix,
                                          int config_codebook, float **w, int *out, int *in,
                                          glm_error *err)
{
    exl3_tensor t;
    *w = NULL;
    glm_status st = exl3_load_codebook(m, prefix, config_codebook, &t, err);
    if (st != GLM_OK)
        return st;
    float *buf = malloc((size_t)t.in * (size_t)t.out * sizeof *buf);
    if (!buf)
        return glm_error_set(err, GLM_ERR_NOMEM, "%s: no memory for %d x %d weights", prefix,
                             t.out, t.in);
    st = exl3_dequantize_f32(&t, buf, err);
    if (st != GLM_OK) {
        free(buf);
        return st;
    }
    *w = buf;
    *out = t.out;
    *in = t.in;
    return GLM_OK;
}
