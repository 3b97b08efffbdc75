/* check_dir.c: glm_check_model (glm_tokens.h), `glmchat check-model`'s engine side: the shards
 * against their index, every header, every tensor the config needs, the tokenizer and the chat
 * template; a summary and the memory plan; every problem listed, not just the first. */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "base/grow.h"
#include "cuda/plan.h"
#include "glm_tokens.h"
#include "model/config.h"
#include "model/exl3_load.h"
#include "model/model.h"
#include "model/safetensors.h"
#include "text/template_check.h"
#include "text/tokenizer.h"

#define GIB (1024.0 * 1024 * 1024)
#define GB 1e9

typedef struct shard {
    char *name;      /* the file name, as the index spells it */
    char *path;
    st_model *st;    /* its header, or NULL when missing or broken */
    int mapped;      /* tensors the index maps to it */
} shard;

typedef struct checker {
    const char *dir;
    const glm_check_model_params *p; /* where the report, progress and problems go */
    char *line;             /* the report's line being written */
    size_t line_len, line_cap;
    char **problems;
    int n_problems;
    size_t cap_problems;
    shard *shards;
    int n_shards;
    cJSON *index;           /* model.safetensors.index.json, or NULL */
    const cJSON *weight_map;
    st_model *all;          /* the readable shards as one model */
    glm_config cfg;
    int cfg_ok;
    glm_generation_config gen;
    const char *prefix;
    char **used;            /* names the config reads, sorted after the walk */
    size_t n_used, cap_used;
    size_t skipped;         /* required tensors in a missing or broken shard (its problem covers them) */
    size_t checked;
    int with_mtp;
    double exl3_bits_sum, exl3_values; /* for the EXL3 tensors' average bits */
} checker;

static void problem(checker *k, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void problem(checker *k, const char *fmt, ...)
{
    char buf[1400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (grow_array((void **)&k->problems, &k->cap_problems, (size_t)k->n_problems + 1,
                   sizeof *k->problems, 32) != 0)
        return; /* out of memory: the count below still says something went wrong */
    k->problems[k->n_problems++] = strdup(buf);
}

/* Appends n bytes to the report's line being written; 0 when out of memory (the rest of the
 * line is lost, the report goes on). */
static int line_append(checker *k, const char *s, size_t n)
{
    if (grow_array((void **)&k->line, &k->line_cap, k->line_len + n + 1, 1, 256) != 0)
        return 0;
    memcpy(k->line + k->line_len, s, n);
    k->line_len += n;
    k->line[k->line_len] = '\0';
    return 1;
}

/* Report text, given to p->report a whole line at a time (a line may be written in pieces). */
static void say(checker *k, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(checker *k, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *text = NULL;
    int n = vasprintf(&text, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    for (const char *c = text; *c;) {
        const char *nl = strchr(c, '\n');
        size_t len = nl ? (size_t)(nl - c) : strlen(c);
        line_append(k, c, len);
        c += len;
        if (!nl)
            break;
        if (k->p->report)
            k->p->report(k->p->user, k->line ? k->line : "");
        k->line_len = 0;
        if (k->line)
            k->line[0] = '\0';
        c++;
    }
    free(text);
}

static void progress(checker *k, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void progress(checker *k, const char *fmt, ...)
{
    if (!k->p->progress)
        return;
    char buf[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    k->p->progress(k->p->user, buf);
}

static void progress_done(checker *k)
{
    if (k->p->progress)
        k->p->progress(k->p->user, "");
}

static void shape_text(char *buf, size_t n, int ndim, const int64_t *shape)
{
    size_t o = (size_t)snprintf(buf, n, "[");
    for (int i = 0; i < ndim && o < n; i++)
        o += (size_t)snprintf(buf + o, n - o, "%s%" PRId64, i ? ", " : "", shape[i]);
    if (o < n)
        snprintf(buf + o, n - o, "]");
}

/* ---- the shards and their index ---- */

static char *read_whole(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char *buf = NULL;
    size_t len = 0, cap = 0, got;
    do {
        if (len + 65536 + 1 > cap) {
            char *n = realloc(buf, cap = cap ? 2 * cap : 1 << 20);
            if (!n) {
                free(buf);
                fclose(f);
                return NULL;
            }
            buf = n;
        }
        got = fread(buf + len, 1, cap - len - 1, f);
        len += got;
    } while (got > 0);
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        return NULL;
    }
    buf[len] = 0;
    return buf;
}

static shard *find_shard(checker *k, const char *name)
{
    for (int i = 0; i < k->n_shards; i++)
        if (strcmp(k->shards[i].name, name) == 0)
            return &k->shards[i];
    return NULL;
}

static shard *add_shard(checker *k, const char *name)
{
    shard *n = realloc(k->shards, (size_t)(k->n_shards + 1) * sizeof *n);
    if (!n)
        return NULL;
    k->shards = n;
    shard *s = &k->shards[k->n_shards];
    memset(s, 0, sizeof *s);
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", k->dir, name);
    s->name = strdup(name);
    s->path = strdup(path);
    if (!s->name || !s->path) {
        free(s->name);
        free(s->path);
        return NULL;
    }
    k->n_shards++;
    return s;
}

static int read_index(checker *k, const char *path)
{
    char *text = read_whole(path);
    if (!text) {
        problem(k, "%s: cannot read it (%s)", path, strerror(errno));
        return -1;
    }
    k->index = cJSON_Parse(text);
    free(text);
    k->weight_map = cJSON_GetObjectItemCaseSensitive(k->index, "weight_map");
    if (!cJSON_IsObject(k->weight_map)) {
        problem(k, "%s: not JSON with a weight_map object (download it again)", path);
        return -1;
    }
    for (const cJSON *e = k->weight_map->child; e; e = e->next) {
        if (!cJSON_IsString(e) || strchr(e->valuestring, '/') || e->valuestring[0] == '.') {
            problem(k, "%s: tensor %s maps to a bad shard name", path, e->string);
            continue;
        }
        shard *s = find_shard(k, e->valuestring);
        if (!s && !(s = add_shard(k, e->valuestring))) {
            problem(k, "out of memory reading %s", path);
            return -1;
        }
        s->mapped++;
    }
    return 0;
}

static int ends_with(const char *s, const char *tail)
{
    size_t a = strlen(s), b = strlen(tail);
    return a >= b && strcmp(s + a - b, tail) == 0;
}

/* safetensors files in the directory that the index does not name: leftovers that a loader
 * reading the index ignores, or a sign that the index is from another download. */
static void find_extra_shards(checker *k)
{
    DIR *d = opendir(k->dir);
    if (!d) {
        problem(k, "%s: cannot list it (%s)", k->dir, strerror(errno));
        return;
    }
    for (struct dirent *e; (e = readdir(d));)
        if (ends_with(e->d_name, ".safetensors") && !find_shard(k, e->d_name))
            problem(k, "%s/%s: a safetensors file the index does not name (a leftover, or the "
                    "index is from another download: remove it or download the index again)",
                    k->dir, e->d_name);
    closedir(d);
}

static int list_shards(checker *k)
{
    char index[4200], single[4200];
    snprintf(index, sizeof index, "%s/model.safetensors.index.json", k->dir);
    snprintf(single, sizeof single, "%s/model.safetensors", k->dir);
    if (access(index, F_OK) == 0) {
        if (read_index(k, index) != 0)
            return -1;
        find_extra_shards(k);
        return 0;
    }
    if (access(single, F_OK) == 0)
        return add_shard(k, "model.safetensors") ? 0 : -1;
    problem(k, "%s has neither model.safetensors nor model.safetensors.index.json: is it a model "
            "directory?", k->dir);
    return -1;
}

static void open_shards(checker *k)
{
    for (int i = 0; i < k->n_shards; i++) {
        shard *s = &k->shards[i];
        progress(k, "check-model: reading the header of shard %d of %d (%s)", i + 1, k->n_shards, s->name);
        struct stat sb;
        if (stat(s->path, &sb) != 0) {
            problem(k, "shard %s is missing (%s; the index maps %d tensors to it): download it",
                    s->path, strerror(errno), s->mapped);
            continue;
        }
        glm_error err = {0};
        s->st = st_open_file(s->path, &err);
        if (!s->st)
            problem(k, "shard %s cannot be read: %s", s->path, err.message);
    }
    progress_done(k);
}

/* The readable shards as one model; tensors in two of them are a problem here. */
static void merge_shards(checker *k)
{
    const char **paths = calloc((size_t)k->n_shards + 1, sizeof *paths);
    size_t n = 0;
    for (int i = 0; paths && i < k->n_shards; i++)
        if (k->shards[i].st)
            paths[n++] = k->shards[i].path;
    glm_error err = {0};
    if (paths)
        k->all = st_open_files(paths, n, &err);
    if (!k->all)
        problem(k, "%s", paths ? err.message : "out of memory");
    free(paths);
}

/* The index's entries against the shards that hold the tensors, both ways, and its total_size. */
static void check_index(checker *k)
{
    if (!k->index || !k->all)
        return;
    uint64_t total = 0;
    for (const cJSON *e = k->weight_map->child; e; e = e->next) {
        shard *s = cJSON_IsString(e) ? find_shard(k, e->valuestring) : NULL;
        if (!s || !s->st)
            continue; /* the shard's own problem says it */
        const st_tensor *t = st_find(k->all, e->string);
        if (!t)
            problem(k, "the index puts tensor %s in %s, which does not hold it (incomplete or mixed-up "
                    "shards)", e->string, s->name);
        else if (strcmp(t->file, s->path) != 0)
            problem(k, "the index puts tensor %s in %s, but it is in %s", e->string, s->name, t->file);
    }
    for (size_t i = 0; i < st_count(k->all); i++) {
        const st_tensor *t = st_at(k->all, i);
        total += t->nbytes;
        if (!cJSON_GetObjectItemCaseSensitive(k->weight_map, t->name))
            problem(k, "tensor %s in %s is not in the index", t->name, t->file);
    }
    const cJSON *size = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(k->index, "metadata"),
                                                         "total_size");
    int all_read = 1;
    for (int i = 0; i < k->n_shards; i++)
        all_read &= k->shards[i].st != NULL;
    if (all_read && cJSON_IsNumber(size) && (uint64_t)size->valuedouble != total)
        problem(k, "the index's metadata.total_size is %.0f bytes, but the shards' tensors hold %" PRIu64,
                size->valuedouble, total);
}

/* ---- the tensors the config needs ---- */

/* 1 when the index maps name (or, for an EXL3 module, its trellis) to a shard that is missing or
 * unreadable: that shard's problem covers it. */
static int in_lost_shard(checker *k, const char *name)
{
    if (!k->weight_map)
        return 0;
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(k->weight_map, name);
    if (!e && ends_with(name, ".weight")) {
        char trellis[260];
        snprintf(trellis, sizeof trellis, "%.*s.trellis", (int)(strlen(name) - 7), name);
        e = cJSON_GetObjectItemCaseSensitive(k->weight_map, trellis);
    }
    shard *s = cJSON_IsString(e) ? find_shard(k, e->valuestring) : NULL;
    return s && !s->st;
}

static void mark_used(checker *k, const char *name)
{
    if (grow_array((void **)&k->used, &k->cap_used, k->n_used + 1, sizeof *k->used, 1024) != 0)
        return;
    char *copy = strdup(name);
    if (copy)
        k->used[k->n_used++] = copy;
}

static int float_dtype(st_dtype d)
{
    return d == ST_F32 || d == ST_BF16 || d == ST_F16;
}

static void check_shape(checker *k, const st_tensor *t, const glm_required_tensor *r)
{
    int ok = t->ndim == r->ndim;
    for (int i = 0; ok && i < r->ndim; i++)
        ok = t->shape[i] == r->shape[i];
    if (ok)
        return;
    char got[128], want[128];
    shape_text(got, sizeof got, t->ndim, t->shape);
    shape_text(want, sizeof want, r->ndim, r->shape);
    problem(k, "tensor %s in %s has shape %s, but config.json implies %s", t->name, t->file, got, want);
}

static void check_fp8_scales(checker *k, const st_tensor *t, const glm_required_tensor *r)
{
    char sname[260];
    snprintf(sname, sizeof sname, "%s_scale_inv", t->name);
    const st_tensor *s = st_find(k->all, sname);
    if (!s) {
        if (!in_lost_shard(k, sname))
            problem(k, "FP8 tensor %s has no block scales %s", t->name, sname);
        return;
    }
    mark_used(k, sname);
    int br = k->cfg.fp8_block_rows ? k->cfg.fp8_block_rows : 128;
    int bc = k->cfg.fp8_block_cols ? k->cfg.fp8_block_cols : 128;
    glm_required_tensor want = {.ndim = 2, .shape = {(r->shape[0] + br - 1) / br, (r->shape[1] + bc - 1) / bc}};
    check_shape(k, s, &want);
    if (s->dtype != ST_F32)
        problem(k, "block scales %s in %s have dtype %s; they must be F32", sname, s->file,
                st_dtype_name(s->dtype));
}

static void check_exl3(checker *k, const glm_required_tensor *r)
{
    exl3_tensor x;
    glm_error err = {0};
    if (exl3_load(k->all, r->name, &x, &err) != GLM_OK) {
        problem(k, "EXL3 module %s: %s", r->name, err.message);
        return;
    }
    if (x.out != r->shape[0] || x.in != r->shape[1])
        problem(k, "EXL3 module %s holds [%d, %d] (out, in) weights, but config.json implies [%" PRId64
                ", %" PRId64 "]", r->name, x.out, x.in, r->shape[0], r->shape[1]);
    k->exl3_bits_sum += (double)x.bits * x.in * x.out;
    k->exl3_values += (double)x.in * x.out;
    char base[260];
    snprintf(base, sizeof base, "%.*s", (int)(strlen(r->name) - 7), r->name); /* its parts: base.* */
    mark_used(k, base);
}

static void check_required(checker *k, const glm_required_tensor *r)
{
    if (k->checked++ % 256 == 0)
        progress(k, "check-model: checking tensor %zu (%s)", k->checked, r->name);
    mark_used(k, r->name);
    if (in_lost_shard(k, r->name)) {
        k->skipped++;
        return;
    }
    const st_tensor *t = st_find(k->all, r->name);
    if (!t && r->role == GLM_TENSOR_MATRIX && ends_with(r->name, ".weight") && exl3_is_stored(k->all, r->name)) {
        check_exl3(k, r);
        return;
    }
    const char *what = r->layer < 0 ? "the model" : r->layer == k->cfg.num_layers ? "the MTP layer" : NULL;
    char layer[64];
    if (!what)
        snprintf(layer, sizeof layer, "layer %d", r->layer);
    if (!t) {
        problem(k, "tensor %s is missing (%s needs it)", r->name, what ? what : layer);
        return;
    }
    check_shape(k, t, r);
    if (r->role == GLM_TENSOR_MATRIX && t->dtype == ST_F8_E4M3 && t->ndim == 2)
        check_fp8_scales(k, t, r);
    else if (!float_dtype(t->dtype))
        problem(k, "tensor %s in %s has dtype %s; %s", t->name, t->file, st_dtype_name(t->dtype),
                r->role == GLM_TENSOR_MATRIX ? "a weight matrix must be F32, BF16, F16, F8_E4M3 (with block "
                                            "scales) or EXL3"
                                          : "it must be F32, BF16 or F16");
}

static int has_layer(const st_model *m, const char *prefix, int layer)
{
    char want[128];
    int n = snprintf(want, sizeof want, "%slayers.%d.", prefix, layer);
    for (size_t i = 0; i < st_count(m); i++)
        if (strncmp(st_at(m, i)->name, want, (size_t)n) == 0)
            return 1;
    return 0;
}

/* The index names a tensor of the layer (its shard may be lost: the MTP layer is still expected). */
static int index_has_layer(const checker *k, int layer)
{
    char want[128];
    int n = snprintf(want, sizeof want, "%slayers.%d.", k->prefix, layer);
    for (const cJSON *e = k->weight_map ? k->weight_map->child : NULL; e; e = e->next)
        if (strncmp(e->string, want, (size_t)n) == 0)
            return 1;
    return 0;
}

static void check_tensors(checker *k)
{
    if (!k->cfg_ok || !k->all)
        return;
    k->prefix = glm_weights_prefix(k->all);
    int L = k->cfg.num_layers;
    k->with_mtp = k->cfg.num_nextn_predict_layers >= 1 &&
                  (has_layer(k->all, k->prefix, L) || index_has_layer(k, L));
    glm_required_tensor *req = NULL;
    size_t n_req = 0;
    glm_error err = {0};
    if (model_required_tensors(&k->cfg, k->prefix, k->with_mtp, &req, &n_req, &err) != GLM_OK)
        problem(k, "cannot list the tensors config.json needs: %s", err.message);
    for (size_t i = 0; i < n_req; i++)
        check_required(k, &req[i]);
    free(req);
    progress_done(k);
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int is_used(checker *k, const char *name)
{
    if (bsearch(&name, k->used, k->n_used, sizeof *k->used, cmp_str))
        return 1;
    const char *dot = strrchr(name, '.'); /* an EXL3 module's part: <module>.trellis and the rest */
    char base[260];
    if (!dot || (size_t)(dot - name) >= sizeof base)
        return 0;
    snprintf(base, sizeof base, "%.*s", (int)(dot - name), name);
    const char *b = base;
    return bsearch(&b, k->used, k->n_used, sizeof *k->used, cmp_str) != NULL;
}

/* Layer index of a tensor under prefix + "layers.", or -1. */
static int layer_of(const char *prefix, const char *name)
{
    size_t n = strlen(prefix);
    if (strncmp(name, prefix, n) != 0 || strncmp(name + n, "layers.", 7) != 0 || !isdigit((unsigned char)name[n + 7]))
        return -1;
    return atoi(name + n + 7);
}

/* Tensors nothing reads: a layer beyond the config's is a mismatch; the rest (another tower's,
 * say) is only counted. */
static void check_unused(checker *k, size_t *n_unused)
{
    *n_unused = 0;
    if (!k->cfg_ok || !k->all)
        return;
    qsort(k->used, k->n_used, sizeof *k->used, cmp_str);
    int last_told = -1;
    for (size_t i = 0; i < st_count(k->all); i++) {
        const st_tensor *t = st_at(k->all, i);
        if (is_used(k, t->name))
            continue;
        int li = layer_of(k->prefix, t->name);
        int layers = k->cfg.num_layers + (k->cfg.num_nextn_predict_layers >= 1);
        if (li >= layers && li != last_told) {
            problem(k, "the checkpoint holds layer %d (%s), but config.json declares %d layers%s", li,
                    t->name, k->cfg.num_layers,
                    k->cfg.num_nextn_predict_layers >= 1 ? " and an MTP layer" : "");
            last_told = li;
        } else if (li < 0 || li < layers) {
            if (li >= 0)
                problem(k, "tensor %s in %s is not one config.json's layer %d has", t->name, t->file, li);
            else
                (*n_unused)++;
        }
    }
}

/* ---- tokenizer and template ---- */

static void check_tokenizer(checker *k)
{
    /* the tokens the template writes and the reply parser reads, one token each; the ids the
     * checkpoint's tokenizer gives the ones the prompt starts with */
    static const struct {
        const char *text;
        int id;
    } need[] = {
        {"[gMASK]", 154822}, {"<sop>", 154824},   {"<|system|>", 154826}, {"<|user|>", 154827},
        {"<|assistant|>", 154828}, {"<think>", 154841}, {"</think>", 154842}, {"<|observation|>", -1},
        {"<tool_call>", -1}, {"</tool_call>", -1}, {"<arg_key>", -1},       {"</arg_key>", -1},
        {"<arg_value>", -1}, {"</arg_value>", -1}, {"<tool_response>", -1}, {"</tool_response>", -1},
    };
    char path[4200];
    snprintf(path, sizeof path, "%s/tokenizer.json", k->dir);
    glm_error err = {0};
    tok_tokenizer *t = tok_load(path, &err);
    if (!t) {
        problem(k, "tokenizer: %s", err.message);
        return;
    }
    int n = 0;
    for (size_t i = 0; i < sizeof need / sizeof need[0]; i++) {
        int32_t id = tok_token_id(t, need[i].text, strlen(need[i].text));
        if (id < 0)
            problem(k, "%s has no token %s (the chat template needs it)", path, need[i].text);
        else if (need[i].id >= 0 && id != need[i].id)
            problem(k, "%s gives %s the id %d; GLM-5.3-Flash's is %d", path, need[i].text, (int)id, need[i].id);
        else if (k->cfg_ok && id >= k->cfg.vocab_size)
            problem(k, "%s gives %s the id %d, past config.json's vocab_size %d", path, need[i].text, (int)id,
                    k->cfg.vocab_size);
        else
            n++;
    }
    const int *eos = k->gen.n_eos ? k->gen.eos : k->cfg.eos;
    int n_eos = k->gen.n_eos ? k->gen.n_eos : k->cfg_ok ? k->cfg.n_eos : 0;
    for (int i = 0; i < n_eos; i++) {
        size_t len;
        if (!tok_token_bytes(t, eos[i], &len))
            problem(k, "end token id %d (generation_config.json or config.json) is not in %s", eos[i], path);
    }
    say(k, "  tokenizer: %d tokens; the template's %d special tokens present%s\n", (int)tok_vocab_size(t), n,
           n == (int)(sizeof need / sizeof need[0]) ? "" : " (some are not: see below)");
    tok_free(t);
}

static void check_template(checker *k)
{
    tmpl_check tc;
    glm_error err = {0};
    if (tmpl_check_dir(k->dir, &tc, &err) != GLM_OK) {
        problem(k, "chat template: %s", err.message);
        return;
    }
    if (!tc.found)
        say(k, "  chat template: none in the directory; glmchat renders its own GLM-5.3-Flash template\n");
    else if (tc.revision)
        say(k, "  chat template: %s (sha256 %s): %s, which glmchat renders natively\n", tc.source, tc.sha256,
               tc.revision);
    else
        say(k, "  chat template: %s (sha256 %s, %zu bytes): not a revision glmchat implements; glmchat "
               "renders its own GLM-5.3-Flash template (sha256 %.16s...) instead\n",
               tc.source, tc.sha256, tc.bytes, tmpl_revisions[0].sha256);
}

/* ---- summary and memory plan ---- */

static void print_summary(checker *k, size_t n_unused)
{
    const glm_config *c = &k->cfg;
    int moe = 0;
    for (int i = 0; i < c->num_layers; i++)
        moe += c->moe[i];
    say(k, "  layers: %d (%d KDA, %d DSA; %d MoE, %d dense), MTP layer: %s\n", c->num_layers,
           glm_config_count(c, GLM_ATTN_KDA), glm_config_count(c, GLM_ATTN_DSA), moe, c->num_layers - moe,
           k->with_mtp ? "yes" : c->num_nextn_predict_layers >= 1 ? "declared, not in the checkpoint" : "no");
    say(k, "  experts: %d routed (%d a token), %d shared, %d wide; hidden %d, vocabulary %d, context %d\n",
           c->n_routed_experts, c->num_experts_per_tok, c->n_shared_experts, c->moe_intermediate_size,
           c->hidden_size, c->vocab_size, c->max_position_embeddings);
    if (!k->all)
        return;
    uint64_t by[ST_DTYPE_COUNT] = {0}, total = 0;
    for (size_t i = 0; i < st_count(k->all); i++) {
        const st_tensor *t = st_at(k->all, i);
        by[t->dtype] += t->nbytes;
        total += t->nbytes;
    }
    say(k, "  tensors: %zu in %d shard%s, %.2f GB (%.2f GiB):", st_count(k->all), k->n_shards,
           k->n_shards == 1 ? "" : "s", total / GB, total / GIB);
    for (int d = 0; d < ST_DTYPE_COUNT; d++)
        if (by[d])
            say(k, " %s %.2f GB", st_dtype_name((st_dtype)d), by[d] / GB);
    say(k, "\n");
    if (k->exl3_values > 0)
        say(k, "  bits: EXL3 modules at %.2f bits a weight on average (config.json declares %.2f)\n",
               k->exl3_bits_sum / k->exl3_values, c->exl3_bits);
    else
        say(k, "  bits: %s\n", by[ST_F8_E4M3] ? "FP8 (e4m3) weights with block scales, the rest as stored"
                                              : "weights as stored (no quantized tensors)");
    if (n_unused)
        say(k, "  %zu tensors glmchat does not read (not the language model's)\n", n_unused);
}

static uint64_t checkpoint_bytes(const checker *k)
{
    uint64_t total = 0;
    for (size_t i = 0; k->all && i < st_count(k->all); i++)
        total += st_at(k->all, i)->nbytes;
    return total;
}

/* One plan, and whether it fits `avail` bytes ("" when avail is 0: no machine to check against). */
static void plan_line(checker *k, const char *who, const cuda_plan *p, size_t avail)
{
    glm_error err = {0};
    if (cuda_plan_check(p, avail, &err) == GLM_OK)
        say(k, "    %s: %.2f GiB needed of %.2f GiB (prefill chunks of %d rows): fits\n", who,
               p->total / GIB, avail / GIB, p->chunk);
    else
        say(k, "    %s: does not fit: %s\n", who, err.message);
}

/* A plan for one or two ranks as the backend would make it on a machine of `avail` bytes: the
 * checkpoint's bytes (a rank's share), the chunk-sized workspaces the config implies, and the
 * largest chunk whose whole plan fits (cuda_plan_pick_chunk). */
typedef struct check_plan {
    const glm_config *c; /* the rank's config */
    int ranks, context, dense_experts;
    size_t weights;
} check_plan;

static void check_plan_at(const check_plan *q, int chunk, cuda_plan *p)
{
    cuda_plan_make(q->c, q->ranks, q->context, CUDA_KV_FP8, CUDA_KV_FP8, chunk, q->dense_experts,
                   q->weights + cuda_plan_workspace_estimate(q->c, chunk), p);
}

static size_t check_need(void *ctx, int chunk)
{
    cuda_plan p;
    check_plan_at(ctx, chunk, &p);
    return p.total;
}

static void check_plan_for(const check_plan *q, size_t avail, cuda_plan *p)
{
    check_plan_at(q, cuda_plan_pick_chunk(0, 1, avail, check_need, (void *)q), p);
}

static void print_plan(checker *k)
{
    if (!k->cfg_ok || !k->all)
        return;
    const glm_config *c = &k->cfg;
    glm_config half;
    cuda_plan_rank_config(c, &half);
    int bits = c->exl3 ? (int)(c->exl3_bits + 0.5) : 0;
    double one = (double)checkpoint_bytes(k);
    /* each of two ranks: the checkpoint's bytes scaled as the split scales the estimate */
    double est1 = (double)cuda_plan_weights_estimate(c, 1, 2.0, bits);
    double est2 = (double)cuda_plan_weights_estimate(&half, 2, 2.0, bits);
    double two = est1 > 0 ? one * est2 / est1 : one / 2;
    int ctx = c->max_position_embeddings;
    /* EXL3 experts: the fused kernels' (the backend asks each layer's tensors) */
    int dense_experts = !c->exl3;
    check_plan q1 = {c, 1, ctx, dense_experts, (size_t)one};
    check_plan q2 = {&half, 2, ctx, dense_experts, (size_t)two};
    size_t spark = cuda_plan_unified_limit();
    cuda_plan p1, p2;
    check_plan_for(&q1, spark, &p1);
    check_plan_for(&q2, spark, &p2);
    char line[1200];
    say(k, "  memory plan (CUDA backend, fp8 caches, context %d tokens, draft off; prefill chunks "
           "as a DGX Spark's plan picks them):\n", ctx);
    cuda_plan_describe(&p1, line, sizeof line);
    say(k, "    one rank: %s\n", line);
    cuda_plan_describe(&p2, line, sizeof line);
    say(k, "    each of two ranks: %s\n", line);
    size_t free_b, total_b;
    int integrated;
    if (glm_cuda_memory(&free_b, &total_b, &integrated) == 0) {
        size_t avail = integrated && free_b > cuda_plan_unified_limit() ? cuda_plan_unified_limit() : free_b;
        say(k, "  this machine's GPU (%.2f GiB free of %.2f GiB%s):\n", free_b / GIB, total_b / GIB,
               integrated ? ", unified memory" : "");
        cuda_plan h1, h2;
        check_plan_for(&q1, avail, &h1);
        check_plan_for(&q2, avail, &h2);
        plan_line(k, "one rank", &h1, avail);
        plan_line(k, "each of two ranks", &h2, avail);
    } else {
        say(k, "  this machine: no GPU found (or glmchat was built without CUDA)\n");
    }
    say(k, "  a DGX Spark (128 GB unified memory, %.0f GiB of it kept for the system and the process's "
           "host side: %.2f GiB for the model):\n", (128 * GB - (double)spark) / GIB, spark / GIB);
    plan_line(k, "one rank on one Spark", &p1, spark);
    plan_line(k, "each of two ranks on two Sparks", &p2, spark);
}

/* ---- the command ---- */

static void check_configs(checker *k)
{
    glm_error err = {0};
    k->cfg_ok = glm_config_load(&k->cfg, k->dir, &err) == GLM_OK;
    if (!k->cfg_ok)
        problem(k, "config: %s", err.message);
    if (glm_generation_config_load(&k->gen, k->dir, &err) != GLM_OK)
        problem(k, "generation config: %s", err.message);
}

static void checker_free(checker *k)
{
    for (int i = 0; i < k->n_problems; i++)
        free(k->problems[i]);
    free(k->problems);
    for (int i = 0; i < k->n_shards; i++) {
        st_close(k->shards[i].st);
        free(k->shards[i].name);
        free(k->shards[i].path);
    }
    free(k->shards);
    for (size_t i = 0; i < k->n_used; i++)
        free(k->used[i]);
    free(k->used);
    st_close(k->all);
    cJSON_Delete(k->index);
    free(k->line);
}

static int report(checker *k)
{
    if (k->skipped)
        say(k, "  %zu tensors the config needs are in missing or unreadable shards (named below)\n", k->skipped);
    if (!k->n_problems) {
        say(k, "complete: every shard, header and tensor the config needs is present and consistent\n");
        return 0;
    }
    for (int i = 0; i < k->n_problems && k->p->problem; i++)
        k->p->problem(k->p->user, k->problems[i] ? k->problems[i] : "(out of memory)");
    return k->n_problems;
}

int glm_check_model(const glm_check_model_params *p)
{
    checker k = {.dir = p->dir, .p = p};
    check_configs(&k);
    if (list_shards(&k) == 0) {
        open_shards(&k);
        merge_shards(&k);
        check_index(&k);
    }
    check_tensors(&k);
    size_t n_unused;
    check_unused(&k, &n_unused);
    if (k.cfg_ok)
        print_summary(&k, n_unused);
    check_tokenizer(&k);
    check_template(&k);
    print_plan(&k);
    int n = report(&k);
    checker_free(&k);
    return n;
}

