/* quantize_dir.c: glm_quantize_dir (glm_tokens.h), `glmchat quantize`'s engine side: EXL3-quantizes
 * a checkpoint's routed experts (optionally its other linears) into the EXL3 checkpoint's layout. */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "glm_tokens.h"
#include "log.h"
#include "model/exl3.h"
#include "model/exl3_load.h"
#include "model/mkmodel.h"
#include "model/safetensors.h"

typedef struct quant_opts {
    const char *in, *out;
    int bits, all_linear, threads;
    exl3_codebook codebook;
    unsigned long long seed;
    const glm_quantize_params *p; /* where the notes go */
} quant_opts;

static int ends_with(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

/* 1 when the options select this tensor and its shape allows it; *why says why not. */
static int selected(const quant_opts *o, const st_tensor *t, const char **why)
{
    *why = NULL;
    if (!ends_with(t->name, ".weight") || t->ndim != 2)
        return 0;
    int expert = strstr(t->name, ".mlp.experts.") != NULL;
    int linear = !strstr(t->name, "embed") && !strstr(t->name, "lm_head") &&
                 !strstr(t->name, "norm") && !strstr(t->name, ".mlp.gate.weight");
    if (!expert && !(o->all_linear && linear))
        return 0;
    if (t->dtype != ST_F32 && t->dtype != ST_BF16 && t->dtype != ST_F16) {
        *why = "not F32/BF16/F16";
        return 0;
    }
    if (t->shape[0] % 128 || t->shape[1] % 128) {
        *why = "dimensions not multiples of 128";
        return 0;
    }
    return 1;
}

static void module_name(const char *weight, const char *part, char *buf, size_t n)
{
    snprintf(buf, n, "%.*s.%s", (int)(strlen(weight) - 7), weight, part);
}

static const char *codebook_name(exl3_codebook cb)
{
    return cb == EXL3_CB_MCG ? "mcg" : cb == EXL3_CB_MUL1 ? "mul1" : "3inst";
}

/* A line for the user (glm_quantize_params.log). */
static void note(const quant_opts *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void note(const quant_opts *o, const char *fmt, ...)
{
    engine_log to = {o->p->log, o->p->log_user};
    va_list ap;
    va_start(ap, fmt);
    engine_vlogf(&to, GLM_LOG_WARN, fmt, ap);
    va_end(ap);
}

static glm_status declare_all(const quant_opts *o, const st_model *m, st_writer *w, size_t *nq,
                              glm_error *err)
{
    glm_status st = GLM_OK;
    *nq = 0;
    for (size_t i = 0; i < st_count(m) && st == GLM_OK; i++) {
        const st_tensor *t = st_at(m, i);
        const char *why;
        if (!selected(o, t, &why)) {
            if (why)
                note(o, "%s copied unquantized: %s", t->name, why);
            st = st_writer_declare(w, t->name, t->dtype, t->ndim, t->shape, err);
            continue;
        }
        int64_t out = t->shape[0], in = t->shape[1];
        char name[600];
        int64_t tshape[3] = {in / 16, out / 16, 16 * (int64_t)o->bits};
        module_name(t->name, "trellis", name, sizeof name);
        st = st_writer_declare(w, name, ST_I16, 3, tshape, err);
        module_name(t->name, "suh", name, sizeof name);
        if (st == GLM_OK)
            st = st_writer_declare(w, name, ST_F16, 1, &in, err);
        module_name(t->name, "svh", name, sizeof name);
        if (st == GLM_OK)
            st = st_writer_declare(w, name, ST_F16, 1, &out, err);
        if (st == GLM_OK && o->codebook != EXL3_CB_3INST) {
            module_name(t->name, codebook_name(o->codebook), name, sizeof name);
            st = st_writer_declare(w, name, ST_I32, 0, NULL, err);
        }
        (*nq)++;
    }
    return st;
}

/* Quantizes one weight and streams its tensors; adds its relative error to *err_sum. */
static glm_status write_quantized(const quant_opts *o, const st_tensor *t, st_writer *w,
                                  double *err_sum, glm_error *err)
{
    int out = (int)t->shape[0], in = (int)t->shape[1];
    size_t n = (size_t)out * (size_t)in;
    size_t words = n / 256 * 16 * (size_t)o->bits;
    float *wf = malloc(n * sizeof *wf), *back = malloc(n * sizeof *back);
    uint16_t *trellis = malloc(words * sizeof *trellis);
    uint16_t *suh = malloc((size_t)in * sizeof *suh), *svh = malloc((size_t)out * sizeof *svh);
    glm_status st = GLM_OK;
    if (!wf || !back || !trellis || !suh || !svh) {
        st = glm_error_set(err, GLM_ERR_NOMEM, "%s: out of memory", t->name);
        goto done;
    }
    if (st_to_f32(t->dtype, t->data, 0, n, wf) != 0) {
        st = glm_error_set(err, GLM_ERR_FORMAT, "%s: cannot read as float", t->name);
        goto done;
    }
    exl3_quant_params p = {.bits = o->bits, .codebook = o->codebook, .seed = o->seed,
                           .out_scales = 1, .scale_search = 1, .threads = o->threads};
    exl3_quant_out q = {.trellis = trellis, .suh = suh, .svh = svh};
    if ((st = exl3_quantize(wf, out, in, NULL, &p, &q, err)) != GLM_OK)
        goto done;
    exl3_tensor x = {.in = in, .out = out, .bits = o->bits, .codebook = o->codebook,
                     .trellis = trellis, .suh = suh, .svh = svh};
    if ((st = exl3_dequantize_f32(&x, back, err)) != GLM_OK)
        goto done;
    double e = 0, s = 0;
    for (size_t i = 0; i < n; i++) {
        e += ((double)back[i] - wf[i]) * ((double)back[i] - wf[i]);
        s += (double)wf[i] * wf[i];
    }
    *err_sum += s > 0 ? e / s : 0;
    st = st_writer_write(w, trellis, words * sizeof *trellis, err);
    if (st == GLM_OK)
        st = st_writer_write(w, suh, (size_t)in * sizeof *suh, err);
    if (st == GLM_OK)
        st = st_writer_write(w, svh, (size_t)out * sizeof *svh, err);
    if (st == GLM_OK && o->codebook != EXL3_CB_3INST) {
        uint32_t marker = o->codebook == EXL3_CB_MCG ? EXL3_MCG_MARKER : EXL3_MUL1_MARKER;
        st = st_writer_write(w, &marker, sizeof marker, err);
    }
done:
    free(wf);
    free(back);
    free(trellis);
    free(suh);
    free(svh);
    return st;
}

static char *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char *buf = NULL;
    size_t cap = 0, n = 0;
    for (;;) {
        if (n + 4096 + 1 > cap) {
            cap = (cap + 4096) * 2;
            char *grown = realloc(buf, cap);
            if (!grown) {
                free(buf);
                fclose(f);
                return NULL;
            }
            buf = grown;
        }
        size_t got = fread(buf + n, 1, 4096, f);
        n += got;
        if (got < 4096)
            break;
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        return NULL;
    }
    buf[n] = '\0';
    *len = n;
    return buf;
}

static int write_file(const char *path, const char *data, size_t len)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    int bad = fwrite(data, 1, len, f) != len;
    bad |= fclose(f) != 0;
    return bad ? -1 : 0;
}

/* config.json with quantization_config, then every other file that is not a weight file. */
static glm_status copy_side_files(const quant_opts *o, glm_error *err)
{
    DIR *d = opendir(o->in);
    if (!d)
        return glm_error_set(err, GLM_ERR_IO, "cannot list %s: %s", o->in, strerror(errno));
    struct dirent *de;
    glm_status rc = GLM_OK;
    char src[4096], dst[4096];
    while (!rc && (de = readdir(d))) {
        const char *n = de->d_name;
        if (n[0] == '.' || ends_with(n, ".safetensors") ||
            strcmp(n, "model.safetensors.index.json") == 0)
            continue;
        snprintf(src, sizeof src, "%s/%s", o->in, n);
        snprintf(dst, sizeof dst, "%s/%s", o->out, n);
        struct stat sb;
        if (stat(src, &sb) != 0 || !S_ISREG(sb.st_mode))
            continue;
        size_t len = 0;
        char *data = read_file(src, &len);
        if (!data) {
            rc = glm_error_set(err, GLM_ERR_IO, "cannot read %s: %s", src, strerror(errno));
            break;
        }
        if (strcmp(n, "config.json") == 0) {
            cJSON *cfg = cJSON_Parse(data);
            cJSON *qc = cJSON_CreateObject();
            char *text = NULL;
            if (cfg && qc && cJSON_IsObject(cfg)) {
                cJSON_AddStringToObject(qc, "quant_method", "exl3");
                cJSON_AddNumberToObject(qc, "bits", o->bits);
                cJSON_AddStringToObject(qc, "codebook", codebook_name(o->codebook));
                cJSON_AddStringToObject(qc, "quantizer", "glmchat");
                cJSON *old = cJSON_DetachItemFromObject(cfg, "quantization_config");
                if (old)
                    cJSON_AddItemToObject(qc, "original_quantization_config", old);
                cJSON_AddItemToObject(cfg, "quantization_config", qc);
                qc = NULL;
                if (!glm_config_json_floats(cfg))
                    text = cJSON_Print(cfg);
            }
            cJSON_Delete(qc);
            cJSON_Delete(cfg);
            if (!text)
                rc = glm_error_set(err, GLM_ERR_FORMAT, "%s is not a JSON object; fix or remove it", src);
            else if (write_file(dst, text, strlen(text)) != 0)
                rc = glm_error_set(err, GLM_ERR_IO, "cannot write %s: %s", dst, strerror(errno));
            free(text);
        } else if (write_file(dst, data, len) != 0) {
            rc = glm_error_set(err, GLM_ERR_IO, "cannot write %s: %s", dst, strerror(errno));
        }
        free(data);
    }
    closedir(d);
    return rc;
}

const char *glm_exl3_codebook_name(glm_exl3_codebook cb)
{
    return cb == GLM_EXL3_MCG ? "mcg" : cb == GLM_EXL3_MUL1 ? "mul1" : "3inst";
}

/* The options as the quantizer takes them. */
static glm_status quant_options(const glm_quantize_params *p, quant_opts *o, glm_error *err)
{
    if (!p->in || !p->out)
        return glm_error_set(err, GLM_ERR_ARG, "quantize needs an input and an output directory");
    if (p->bits < 1 || p->bits > 8)
        return glm_error_set(err, GLM_ERR_ARG, "EXL3 takes 1 to 8 bits a weight, not %d", p->bits);
    static const exl3_codebook books[] = {EXL3_CB_MCG, EXL3_CB_MUL1, EXL3_CB_3INST};
    if ((unsigned)p->codebook >= sizeof books / sizeof books[0])
        return glm_error_set(err, GLM_ERR_ARG, "unknown EXL3 codebook %d", (int)p->codebook);
    *o = (quant_opts){.in = p->in, .out = p->out, .bits = p->bits, .all_linear = p->all_linear,
                      .threads = p->threads < 1 ? 1 : p->threads > 64 ? 64 : p->threads,
                      .codebook = books[p->codebook], .seed = p->seed, .p = p};
    return GLM_OK;
}

glm_status glm_quantize_dir(const glm_quantize_params *p, glm_quantize_result *r, glm_error *err)
{
    quant_opts opts = {0}, *o = &opts;
    memset(r, 0, sizeof *r);
    glm_status st = quant_options(p, o, err);
    if (st != GLM_OK)
        return st;
    st_model *m = st_open_dir(o->in, err);
    if (!m)
        return err && err->status ? err->status : GLM_ERR_IO;
    if (mkdir(o->out, 0755) != 0 && errno != EEXIST) {
        st_close(m);
        return glm_error_set(err, GLM_ERR_IO, "cannot create %s: %s", o->out, strerror(errno));
    }
    char *path = r->path;
    snprintf(path, sizeof r->path, "%s/model.safetensors", o->out);
    st_writer *w = st_writer_new(path, err);
    if (!w) {
        st_close(m);
        return err && err->status ? err->status : GLM_ERR_IO;
    }
    size_t nq = 0;
    double err_sum = 0;
    st = declare_all(o, m, w, &nq, err);
    if (st == GLM_OK)
        st = st_writer_begin(w, err);
    for (size_t i = 0; i < st_count(m) && st == GLM_OK; i++) {
        const st_tensor *t = st_at(m, i);
        const char *why;
        if (selected(o, t, &why))
            st = write_quantized(o, t, w, &err_sum, err);
        else
            st = st_writer_write(w, t->data, t->nbytes, err);
    }
    if (st != GLM_OK) {
        st_writer_abort(w);
        st_close(m);
        return st;
    }
    st = st_writer_close(w, err);
    size_t total = st_count(m);
    st_close(m);
    if (st == GLM_OK)
        st = copy_side_files(o, err);
    if (st != GLM_OK)
        return st;
    r->quantized = nq;
    r->tensors = total;
    r->mean_error = nq ? err_sum / (double)nq : 0.0;
    return GLM_OK;
}
