/* cmd_quantize.c: `glmchat quantize` (CLI.md): EXL3-quantizes a checkpoint's routed experts (and
 * with --all-linear its other linear layers) into the real EXL3 checkpoint's names and layout. */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "app/commands.h"
#include "model/exl3.h"
#include "model/exl3_load.h"
#include "model/mkmodel.h"
#include "model/safetensors.h"

static const char quantize_usage[] =
    "Usage: glmchat quantize --in DIR --out DIR [--bits 4] [options]\n"
    "Quantizes the routed experts (mlp.experts.N.{gate,up,down}_proj.weight, F32/BF16/F16) of\n"
    "the checkpoint in DIR to EXL3: <module>.trellis, .suh, .svh and the codebook marker, as the\n"
    "GLM-5.3-Flash EXL3 checkpoint stores them. Other tensors are copied unchanged into\n"
    "OUT/model.safetensors; config.json gains a quantization_config; other files are copied.\n"
    "  --bits K          bits per weight, 1..8 (default 4)\n"
    "  --codebook NAME   mcg (default), mul1 or 3inst\n"
    "  --all-linear      also quantize the other 2-D .weight tensors (not embeddings, head)\n"
    "  --threads N       tile-search threads (default: the online CPUs)\n"
    "  --seed N          seed of the sign vectors (default 0)\n"
    "Weights whose dimensions are not multiples of 128 are copied and reported.\n";

typedef struct quant_opts {
    const char *in, *out;
    int bits, all_linear, threads;
    exl3_codebook codebook;
    unsigned long long seed;
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
                fprintf(stderr, "glmchat quantize: %s copied unquantized: %s\n", t->name, why);
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
static int copy_side_files(const quant_opts *o)
{
    DIR *d = opendir(o->in);
    if (!d)
        return cli_runtime_error("cannot list %s: %s", o->in, strerror(errno));
    struct dirent *de;
    int rc = 0;
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
            rc = cli_runtime_error("cannot read %s: %s", src, strerror(errno));
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
                rc = cli_runtime_error("%s is not a JSON object; fix or remove it", src);
            else if (write_file(dst, text, strlen(text)) != 0)
                rc = cli_runtime_error("cannot write %s: %s", dst, strerror(errno));
            free(text);
        } else if (write_file(dst, data, len) != 0) {
            rc = cli_runtime_error("cannot write %s: %s", dst, strerror(errno));
        }
        free(data);
    }
    closedir(d);
    return rc;
}

static int quantize_model(const quant_opts *o)
{
    glm_error err = {0};
    st_model *m = st_open_dir(o->in, &err);
    if (!m)
        return cli_runtime_error("%s", err.message);
    if (mkdir(o->out, 0755) != 0 && errno != EEXIST) {
        st_close(m);
        return cli_runtime_error("cannot create %s: %s", o->out, strerror(errno));
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/model.safetensors", o->out);
    st_writer *w = st_writer_new(path, &err);
    if (!w) {
        st_close(m);
        return cli_runtime_error("%s", err.message);
    }
    size_t nq = 0;
    double err_sum = 0;
    glm_status st = declare_all(o, m, w, &nq, &err);
    if (st == GLM_OK)
        st = st_writer_begin(w, &err);
    for (size_t i = 0; i < st_count(m) && st == GLM_OK; i++) {
        const st_tensor *t = st_at(m, i);
        const char *why;
        if (selected(o, t, &why))
            st = write_quantized(o, t, w, &err_sum, &err);
        else
            st = st_writer_write(w, t->data, t->nbytes, &err);
    }
    if (st != GLM_OK) {
        st_writer_abort(w);
        st_close(m);
        return cli_runtime_error("%s", err.message);
    }
    st = st_writer_close(w, &err);
    size_t total = st_count(m);
    st_close(m);
    if (st != GLM_OK)
        return cli_runtime_error("%s", err.message);
    int rc = copy_side_files(o);
    if (rc)
        return rc;
    printf("quantized %zu of %zu tensors to EXL3 (%d bits, %s); mean relative weight error "
           "%.5f; wrote %s\n", nq, total, o->bits, codebook_name(o->codebook),
           nq ? err_sum / (double)nq : 0.0, path);
    return CLI_EXIT_OK;
}

int cmd_quantize(int argc, char **argv, const cli_globals *g)
{
    (void)g;
    static const struct option opts[] = {
        {"in", required_argument, NULL, 'i'},      {"out", required_argument, NULL, 'o'},
        {"bits", required_argument, NULL, 'b'},    {"codebook", required_argument, NULL, 'c'},
        {"all-linear", no_argument, NULL, 'a'},    {"threads", required_argument, NULL, 't'},
        {"seed", required_argument, NULL, 's'},    {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    quant_opts o = {.bits = 4, .codebook = EXL3_CB_MCG, .threads = cpus > 0 ? (int)cpus : 1};
    int c;
    long long v;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'i': o.in = optarg; break;
        case 'o': o.out = optarg; break;
        case 'a': o.all_linear = 1; break;
        case 'b':
            if (cli_int_option("quantize", "--bits", optarg, 1, 8, &v))
                return CLI_EXIT_USAGE;
            o.bits = (int)v;
            break;
        case 't':
            if (cli_int_option("quantize", "--threads", optarg, 1, 64, &v))
                return CLI_EXIT_USAGE;
            o.threads = (int)v;
            break;
        case 's':
            if (cli_int_option("quantize", "--seed", optarg, 0, 0x7FFFFFFFL, &v))
                return CLI_EXIT_USAGE;
            o.seed = (unsigned long long)v;
            break;
        case 'c': {
            static const exl3_codebook books[] = {EXL3_CB_MCG, EXL3_CB_MUL1, EXL3_CB_3INST};
            int pick;
            if (cli_choice_option("quantize", "--codebook", optarg, "mcg|mul1|3inst", &pick))
                return CLI_EXIT_USAGE;
            o.codebook = books[pick];
            break;
        }
        case 'h': fputs(quantize_usage, stdout); return CLI_EXIT_OK;
        default: return cli_usage_error("quantize", "bad option");
        }
    }
    if (optind < argc)
        return cli_usage_error("quantize", "unexpected argument '%s'", argv[optind]);
    if (!o.in || !o.out)
        return cli_usage_error("quantize", "needs --in DIR and --out DIR");
    if (o.threads > 64)
        o.threads = 64;
    char rin[4096], rout[4096];
    if (realpath(o.in, rin) && realpath(o.out, rout) && strcmp(rin, rout) == 0)
        return cli_usage_error("quantize", "--out must differ from --in");
    return quantize_model(&o);
}
