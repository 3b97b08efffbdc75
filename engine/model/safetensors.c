/* safetensors.c: the safetensors reader (mmap, header validation, shards through the index)
 * and the streaming writer; also the float conversions every loader needs (BF16, F16, FP8). */
#include "model/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#define ST_MAX_HEADER (256u << 20)

static const struct {
    const char *name;
    size_t size;
} dtype_info[ST_DTYPE_COUNT] = {
    [ST_F32] = {"F32", 4},   [ST_BF16] = {"BF16", 2}, [ST_F16] = {"F16", 2},
    [ST_F8_E4M3] = {"F8_E4M3", 1}, [ST_F64] = {"F64", 8}, [ST_I64] = {"I64", 8},
    [ST_I32] = {"I32", 4},   [ST_I16] = {"I16", 2},   [ST_I8] = {"I8", 1},
    [ST_U8] = {"U8", 1},     [ST_BOOL] = {"BOOL", 1},
};

size_t st_dtype_size(st_dtype t)
{
    return (unsigned)t < ST_DTYPE_COUNT ? dtype_info[t].size : 0;
}

const char *st_dtype_name(st_dtype t)
{
    return (unsigned)t < ST_DTYPE_COUNT ? dtype_info[t].name : "?";
}

int st_dtype_parse(const char *name, st_dtype *out)
{
    for (int i = 0; i < ST_DTYPE_COUNT; i++) {
        if (strcmp(name, dtype_info[i].name) == 0) {
            *out = (st_dtype)i;
            return 0;
        }
    }
    return -1;
}

int64_t st_numel(const st_tensor *t)
{
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++)
        n *= t->shape[i];
    return n;
}

/* ---- reader -------------------------------------------------------------------------------- */

typedef struct st_file {
    char *path;
    void *map;
    size_t size;
    cJSON *metadata; /* the __metadata__ object (owned by header) or NULL */
    cJSON *header;
} st_file;

struct st_model {
    st_file *files;
    size_t n_files;
    st_tensor *tensors;
    size_t n_tensors, cap_tensors;
};

static int cmp_tensor(const void *a, const void *b)
{
    return strcmp(((const st_tensor *)a)->name, ((const st_tensor *)b)->name);
}

void st_close(st_model *m)
{
    if (!m)
        return;
    for (size_t i = 0; i < m->n_tensors; i++)
        free((char *)m->tensors[i].name);
    free(m->tensors);
    for (size_t i = 0; i < m->n_files; i++) {
        if (m->files[i].map)
            munmap(m->files[i].map, m->files[i].size);
        cJSON_Delete(m->files[i].header);
        free(m->files[i].path);
    }
    free(m->files);
    free(m);
}

static glm_status push_tensor(st_model *m, const st_tensor *t, glm_error *err)
{
    if (m->n_tensors == m->cap_tensors) {
        size_t cap = m->cap_tensors ? m->cap_tensors * 2 : 256;
        st_tensor *n = realloc(m->tensors, cap * sizeof *n);
        if (!n)
            return glm_error_set(err, GLM_ERR_NOMEM, "out of memory reading %s", t->file);
        m->tensors = n;
        m->cap_tensors = cap;
    }
    m->tensors[m->n_tensors++] = *t;
    return GLM_OK;
}

static glm_status parse_shape(const char *path, const char *name, const cJSON *shape, st_tensor *t,
                              glm_error *err)
{
    if (!cJSON_IsArray(shape))
        return glm_error_set(err, GLM_ERR_FORMAT, "%s: tensor %s has no shape array", path, name);
    int n = cJSON_GetArraySize(shape);
    if (n > ST_MAX_DIMS)
        return glm_error_set(err, GLM_ERR_FORMAT, "%s: tensor %s has %d dimensions (at most %d)",
                             path, name, n, ST_MAX_DIMS);
    t->ndim = n;
    for (int i = 0; i < n; i++) {
        const cJSON *d = cJSON_GetArrayItem(shape, i);
        if (!cJSON_IsNumber(d) || d->valuedouble < 0 || d->valuedouble > 1e15 ||
            d->valuedouble != floor(d->valuedouble))
            return glm_error_set(err, GLM_ERR_FORMAT, "%s: tensor %s has a bad dimension %d",
                                 path, name, i);
        t->shape[i] = (int64_t)d->valuedouble;
    }
    return GLM_OK;
}

static glm_status parse_entry(st_model *m, st_file *f, const cJSON *e, const uint8_t *data,
                              size_t data_size, glm_error *err)
{
    const char *name = e->string;
    st_tensor t = {0};
    t.file = f->path;
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(e, "dtype");
    if (!cJSON_IsObject(e) || !cJSON_IsString(dt))
        return glm_error_set(err, GLM_ERR_FORMAT, "%s: tensor %s has no dtype", f->path, name);
    if (st_dtype_parse(dt->valuestring, &t.dtype) != 0)
        return glm_error_set(err, GLM_ERR_UNSUPPORTED, "%s: tensor %s has dtype %s, which "
                             "glmchat cannot read", f->path, name, dt->valuestring);
    glm_status st = parse_shape(f->path, name, cJSON_GetObjectItemCaseSensitive(e, "shape"), &t, err);
    if (st)
        return st;
    const cJSON *off = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
    const cJSON *b = cJSON_GetArrayItem(off, 0), *en = cJSON_GetArrayItem(off, 1);
    if (!cJSON_IsArray(off) || cJSON_GetArraySize(off) != 2 || !cJSON_IsNumber(b) ||
        !cJSON_IsNumber(en) || b->valuedouble < 0 || en->valuedouble < b->valuedouble)
        return glm_error_set(err, GLM_ERR_FORMAT, "%s: tensor %s has bad data_offsets", f->path,
                             name);
    double begin = b->valuedouble, end = en->valuedouble;
    if (end > (double)data_size)
        return glm_error_set(err, GLM_ERR_FORMAT, "%s: tensor %s ends at byte %.0f of the data "
                             "but the file holds only %zu: the file is truncated (download it again)",
                             f->path, name, end, data_size);
    int64_t numel = st_numel(&t);
    double want = (double)numel * (double)st_dtype_size(t.dtype);
    if (want != end - begin)
        return glm_error_set(err, GLM_ERR_FORMAT, "%s: tensor %s holds %.0f bytes but its shape "
                             "and dtype need %.0f", f->path, name, end - begin, want);
    t.data = data + (size_t)begin;
    t.nbytes = (size_t)(end - begin);
    t.name = strdup(name);
    if (!t.name)
        return glm_error_set(err, GLM_ERR_NOMEM, "out of memory reading %s", f->path);
    st = push_tensor(m, &t, err);
    if (st)
        free((char *)t.name);
    return st;
}

static glm_status map_file(st_file *f, glm_error *err)
{
    int fd = open(f->path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return glm_error_set(err, GLM_ERR_IO, "cannot open %s: %s", f->path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        close(fd);
        return glm_error_set(err, GLM_ERR_IO, "cannot stat %s: %s", f->path, strerror(errno));
    }
    if (sb.st_size < 8) {
        close(fd);
        return glm_error_set(err, GLM_ERR_FORMAT, "%s is %lld bytes: too short to be a "
                             "safetensors file (truncated?)", f->path, (long long)sb.st_size);
    }
    f->size = (size_t)sb.st_size;
    f->map = mmap(NULL, f->size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (f->map == MAP_FAILED) {
        f->map = NULL;
        return glm_error_set(err, GLM_ERR_IO, "cannot map %s: %s", f->path, strerror(errno));
    }
    return GLM_OK;
}

static glm_status load_file(st_model *m, const char *path, glm_error *err)
{
    st_file *nf = realloc(m->files, (m->n_files + 1) * sizeof *nf);
    if (!nf)
        return glm_error_set(err, GLM_ERR_NOMEM, "out of memory opening %s", path);
    m->files = nf;
    st_file *f = &m->files[m->n_files++];
    memset(f, 0, sizeof *f);
    f->path = strdup(path);
    if (!f->path)
        return glm_error_set(err, GLM_ERR_NOMEM, "out of memory opening %s", path);
    glm_status st = map_file(f, err);
    if (st)
        return st;
    const uint8_t *p = f->map;
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--)
        hlen = (hlen << 8) | p[i];
    if (hlen > ST_MAX_HEADER || hlen > f->size - 8)
        return glm_error_set(err, GLM_ERR_FORMAT, "%s: header length %llu does not fit the %zu-byte "
                             "file (truncated or not safetensors)", path, (unsigned long long)hlen,
                             f->size);
    f->header = cJSON_ParseWithLength((const char *)p + 8, (size_t)hlen);
    if (!cJSON_IsObject(f->header))
        return glm_error_set(err, GLM_ERR_FORMAT, "%s: the header is not a JSON object", path);
    const uint8_t *data = p + 8 + hlen;
    size_t data_size = f->size - 8 - (size_t)hlen;
    for (const cJSON *e = f->header->child; e; e = e->next) {
        if (strcmp(e->string, "__metadata__") == 0) {
            f->metadata = (cJSON *)e;
            continue;
        }
        st = parse_entry(m, f, e, data, data_size, err);
        if (st)
            return st;
    }
    return GLM_OK;
}

static glm_status finish(st_model *m, glm_error *err)
{
    if (m->n_tensors)
        qsort(m->tensors, m->n_tensors, sizeof *m->tensors, cmp_tensor);
    for (size_t i = 1; i < m->n_tensors; i++) {
        if (strcmp(m->tensors[i - 1].name, m->tensors[i].name) == 0)
            return glm_error_set(err, GLM_ERR_FORMAT, "tensor %s is in both %s and %s",
                                 m->tensors[i].name, m->tensors[i - 1].file, m->tensors[i].file);
    }
    return GLM_OK;
}

st_model *st_open_file(const char *path, glm_error *err)
{
    st_model *m = calloc(1, sizeof *m);
    if (!m) {
        glm_error_set(err, GLM_ERR_NOMEM, "out of memory opening %s", path);
        return NULL;
    }
    if (load_file(m, path, err) || finish(m, err)) {
        st_close(m);
        return NULL;
    }
    return m;
}

st_model *st_open_files(const char *const *paths, size_t n, glm_error *err)
{
    st_model *m = calloc(1, sizeof *m);
    if (!m) {
        glm_error_set(err, GLM_ERR_NOMEM, "out of memory opening %zu files", n);
        return NULL;
    }
    glm_status st = GLM_OK;
    for (size_t i = 0; i < n && st == GLM_OK; i++)
        st = load_file(m, paths[i], err);
    if (st == GLM_OK)
        st = finish(m, err);
    if (st) {
        st_close(m);
        return NULL;
    }
    return m;
}

static char *read_text(const char *path, glm_error *err)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        glm_error_set(err, GLM_ERR_IO, "cannot open %s: %s", path, strerror(errno));
        return NULL;
    }
    char *buf = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len + 4096 + 1 > cap) {
            cap = cap ? cap * 2 : 65536;
            char *n = realloc(buf, cap);
            if (!n) {
                free(buf);
                fclose(f);
                glm_error_set(err, GLM_ERR_NOMEM, "out of memory reading %s", path);
                return NULL;
            }
            buf = n;
        }
        size_t got = fread(buf + len, 1, cap - len - 1, f);
        len += got;
        if (got == 0)
            break;
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        glm_error_set(err, GLM_ERR_IO, "cannot read %s", path);
        return NULL;
    }
    buf[len] = 0;
    return buf;
}

static int has_file(st_model *m, const char *path)
{
    for (size_t i = 0; i < m->n_files; i++)
        if (strcmp(m->files[i].path, path) == 0)
            return 1;
    return 0;
}

static glm_status check_index_entry(st_model *m, const char *index_path, const char *name,
                                    const char *shard_path, glm_error *err)
{
    const st_tensor *t = st_find(m, name);
    if (!t)
        return glm_error_set(err, GLM_ERR_FORMAT, "%s names tensor %s in %s, but that file does not "
                             "hold it (incomplete or mixed-up shards)", index_path, name, shard_path);
    if (strcmp(t->file, shard_path) != 0)
        return glm_error_set(err, GLM_ERR_FORMAT, "%s puts tensor %s in %s, but it is in %s",
                             index_path, name, shard_path, t->file);
    return GLM_OK;
}

static glm_status load_index(st_model *m, const char *dir, const char *index_path, glm_error *err)
{
    char *text = read_text(index_path, err);
    if (!text)
        return err ? err->status : GLM_ERR_IO;
    cJSON *root = cJSON_Parse(text);
    free(text);
    const cJSON *map = cJSON_GetObjectItemCaseSensitive(root, "weight_map");
    glm_status st = GLM_OK;
    if (!cJSON_IsObject(map)) {
        st = glm_error_set(err, GLM_ERR_FORMAT, "%s has no weight_map object", index_path);
        goto out;
    }
    char path[PATH_MAX];
    for (const cJSON *e = map->child; e && !st; e = e->next) {
        if (!cJSON_IsString(e) || strchr(e->valuestring, '/') || e->valuestring[0] == '.') {
            st = glm_error_set(err, GLM_ERR_FORMAT, "%s: tensor %s maps to a bad shard name",
                               index_path, e->string);
            break;
        }
        snprintf(path, sizeof path, "%s/%s", dir, e->valuestring);
        if (!has_file(m, path))
            st = load_file(m, path, err);
    }
    if (!st)
        st = finish(m, err);
    for (const cJSON *e = map->child; e && !st; e = e->next) {
        snprintf(path, sizeof path, "%s/%s", dir, e->valuestring);
        st = check_index_entry(m, index_path, e->string, path, err);
    }
out:
    cJSON_Delete(root);
    return st;
}

st_model *st_open_dir(const char *dir, glm_error *err)
{
    char index_path[PATH_MAX], single[PATH_MAX];
    snprintf(index_path, sizeof index_path, "%s/model.safetensors.index.json", dir);
    snprintf(single, sizeof single, "%s/model.safetensors", dir);
    st_model *m = calloc(1, sizeof *m);
    if (!m) {
        glm_error_set(err, GLM_ERR_NOMEM, "out of memory opening %s", dir);
        return NULL;
    }
    glm_status st;
    if (access(index_path, F_OK) == 0)
        st = load_index(m, dir, index_path, err);
    else if (access(single, F_OK) == 0)
        st = load_file(m, single, err) || finish(m, err) ? (err ? err->status : GLM_ERR_FORMAT)
                                                         : GLM_OK;
    else
        st = glm_error_set(err, GLM_ERR_IO, "%s has neither model.safetensors nor "
                           "model.safetensors.index.json: is it a model directory?", dir);
    if (st) {
        st_close(m);
        return NULL;
    }
    return m;
}

const st_tensor *st_find(const st_model *m, const char *name)
{
    size_t lo = 0, hi = m->n_tensors;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(name, m->tensors[mid].name);
        if (c == 0)
            return &m->tensors[mid];
        if (c < 0)
            hi = mid;
        else
            lo = mid + 1;
    }
    return NULL;
}

size_t st_count(const st_model *m)
{
    return m->n_tensors;
}

const st_tensor *st_at(const st_model *m, size_t i)
{
    return i < m->n_tensors ? &m->tensors[i] : NULL;
}

const char *st_metadata(const st_model *m, const char *key)
{
    if (!m->n_files || !m->files[0].metadata)
        return NULL;
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(m->files[0].metadata, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* ---- conversions ---------------------------------------------------------------------------- */

float st_bf16_to_f32(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

uint16_t st_f32_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40); /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

float st_f16_to_f32(uint16_t h)
{
    int sign = h >> 15, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
    float v;
    if (exp == 0)
        v = ldexpf((float)man, -24);
    else if (exp == 31)
        v = man ? NAN : INFINITY;
    else
        v = ldexpf((float)(man | 0x400), exp - 25);
    return sign ? -v : v;
}

uint16_t st_f32_to_f16(float f)
{
    uint16_t sign = signbit(f) ? 0x8000 : 0;
    float a = fabsf(f);
    if (isnan(f))
        return 0x7e00;
    if (a >= 65520.0f)
        return sign | 0x7c00;
    if (a < ldexpf(1.0f, -14)) { /* subnormal: units of 2^-24 */
        float q = nearbyintf(a * 16777216.0f);
        return sign | (uint16_t)q;
    }
    int e;
    float m = frexpf(a, &e); /* a = m * 2^e, m in [0.5, 1) */
    float q = nearbyintf(m * 2048.0f); /* 11 significant bits */
    if (q >= 2048.0f) {
        q /= 2.0f;
        e++;
    }
    int exp = e - 1 + 15;
    if (exp >= 31)
        return sign | 0x7c00;
    return sign | (uint16_t)(exp << 10) | (uint16_t)((int)q - 1024);
}

float st_e4m3_to_f32(uint8_t b)
{
    int sign = b >> 7, exp = (b >> 3) & 0xf, man = b & 7;
    float v;
    if (exp == 15 && man == 7)
        return NAN;
    if (exp == 0)
        v = ldexpf((float)man, -9);
    else
        v = ldexpf((float)(man | 8), exp - 10);
    return sign ? -v : v;
}

uint8_t st_f32_to_e4m3(float f)
{
    if (isnan(f))
        return 0x7f;
    uint8_t sign = signbit(f) ? 0x80 : 0;
    float a = fabsf(f);
    if (a >= 448.0f)
        return sign | 0x7e;
    if (a < ldexpf(1.0f, -6)) /* subnormal: units of 2^-9 */
        return sign | (uint8_t)nearbyintf(a * 512.0f);
    int e;
    float m = frexpf(a, &e);
    float q = nearbyintf(m * 16.0f); /* 4 significant bits */
    if (q >= 16.0f) {
        q /= 2.0f;
        e++;
    }
    int exp = e - 1 + 7;
    if (exp > 15 || (exp == 15 && q - 8 >= 7))
        return sign | 0x7e;
    return sign | (uint8_t)(exp << 3) | (uint8_t)((int)q - 8);
}

int st_to_f32(st_dtype t, const void *data, size_t first, size_t n, float *out)
{
    switch (t) {
    case ST_F32:
        memcpy(out, (const float *)data + first, n * 4);
        return 0;
    case ST_BF16: {
        const uint8_t *p = (const uint8_t *)data + first * 2;
        for (size_t i = 0; i < n; i++)
            out[i] = st_bf16_to_f32((uint16_t)(p[2 * i] | p[2 * i + 1] << 8));
        return 0;
    }
    case ST_F16: {
        const uint8_t *p = (const uint8_t *)data + first * 2;
        for (size_t i = 0; i < n; i++)
            out[i] = st_f16_to_f32((uint16_t)(p[2 * i] | p[2 * i + 1] << 8));
        return 0;
    }
    case ST_F8_E4M3: {
        const uint8_t *p = (const uint8_t *)data + first;
        for (size_t i = 0; i < n; i++)
            out[i] = st_e4m3_to_f32(p[i]);
        return 0;
    }
    case ST_F64: {
        const double *p = (const double *)data + first;
        for (size_t i = 0; i < n; i++)
            out[i] = (float)p[i];
        return 0;
    }
    default:
        return -1;
    }
}

/* ---- writer --------------------------------------------------------------------------------- */

typedef struct st_decl {
    char *name;
    st_dtype dtype;
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    size_t nbytes;
} st_decl;

struct st_writer {
    char *path;
    FILE *f;
    cJSON *metadata;
    st_decl *decls;
    size_t n_decls, cap_decls;
    size_t total, written;
    int begun;
};

st_writer *st_writer_new(const char *path, glm_error *err)
{
    st_writer *w = calloc(1, sizeof *w);
    if (!w || !(w->path = strdup(path)) || !(w->metadata = cJSON_CreateObject())) {
        if (w)
            free(w->path);
        free(w);
        glm_error_set(err, GLM_ERR_NOMEM, "out of memory creating %s", path);
        return NULL;
    }
    w->f = fopen(path, "wb");
    if (!w->f) {
        glm_error_set(err, GLM_ERR_IO, "cannot create %s: %s", path, strerror(errno));
        cJSON_Delete(w->metadata);
        free(w->path);
        free(w);
        return NULL;
    }
    return w;
}

glm_status st_writer_metadata(st_writer *w, const char *key, const char *value, glm_error *err)
{
    if (w->begun)
        return glm_error_set(err, GLM_ERR_ARG, "%s: metadata after the header was written", w->path);
    cJSON_DeleteItemFromObjectCaseSensitive(w->metadata, key);
    if (!cJSON_AddStringToObject(w->metadata, key, value))
        return glm_error_set(err, GLM_ERR_NOMEM, "out of memory writing %s", w->path);
    return GLM_OK;
}

glm_status st_writer_declare(st_writer *w, const char *name, st_dtype dtype, int ndim,
                             const int64_t *shape, glm_error *err)
{
    if (w->begun)
        return glm_error_set(err, GLM_ERR_ARG, "%s: tensor %s declared after the header", w->path,
                             name);
    if (ndim < 0 || ndim > ST_MAX_DIMS || (unsigned)dtype >= ST_DTYPE_COUNT)
        return glm_error_set(err, GLM_ERR_ARG, "%s: tensor %s has a bad dtype or rank", w->path,
                             name);
    if (w->n_decls == w->cap_decls) {
        size_t cap = w->cap_decls ? w->cap_decls * 2 : 64;
        st_decl *n = realloc(w->decls, cap * sizeof *n);
        if (!n)
            return glm_error_set(err, GLM_ERR_NOMEM, "out of memory writing %s", w->path);
        w->decls = n;
        w->cap_decls = cap;
    }
    st_decl *d = &w->decls[w->n_decls];
    memset(d, 0, sizeof *d);
    d->name = strdup(name);
    if (!d->name)
        return glm_error_set(err, GLM_ERR_NOMEM, "out of memory writing %s", w->path);
    d->dtype = dtype;
    d->ndim = ndim;
    size_t n = 1;
    for (int i = 0; i < ndim; i++) {
        d->shape[i] = shape[i];
        n *= (size_t)shape[i];
    }
    d->nbytes = n * st_dtype_size(dtype);
    w->total += d->nbytes;
    w->n_decls++;
    return GLM_OK;
}

size_t st_writer_data_bytes(const st_writer *w)
{
    return w->total;
}

static cJSON *decl_json(const st_decl *d, size_t offset)
{
    cJSON *o = cJSON_CreateObject();
    cJSON *shape = cJSON_CreateArray();
    cJSON *off = cJSON_CreateArray();
    if (!o || !shape || !off) {
        cJSON_Delete(o);
        cJSON_Delete(shape);
        cJSON_Delete(off);
        return NULL;
    }
    cJSON_AddStringToObject(o, "dtype", st_dtype_name(d->dtype));
    for (int i = 0; i < d->ndim; i++)
        cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)d->shape[i]));
    cJSON_AddItemToObject(o, "shape", shape);
    cJSON_AddItemToArray(off, cJSON_CreateNumber((double)offset));
    cJSON_AddItemToArray(off, cJSON_CreateNumber((double)(offset + d->nbytes)));
    cJSON_AddItemToObject(o, "data_offsets", off);
    return o;
}

glm_status st_writer_begin(st_writer *w, glm_error *err)
{
    cJSON *root = cJSON_CreateObject();
    if (!root)
        return glm_error_set(err, GLM_ERR_NOMEM, "out of memory writing %s", w->path);
    cJSON_AddItemReferenceToObject(root, "__metadata__", w->metadata);
    size_t offset = 0;
    for (size_t i = 0; i < w->n_decls; i++) {
        cJSON *o = decl_json(&w->decls[i], offset);
        if (!o || !cJSON_AddItemToObject(root, w->decls[i].name, o)) {
            cJSON_Delete(root);
            return glm_error_set(err, GLM_ERR_NOMEM, "out of memory writing %s", w->path);
        }
        offset += w->decls[i].nbytes;
    }
    char *text = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    if (!text)
        return glm_error_set(err, GLM_ERR_NOMEM, "out of memory writing %s", w->path);
    size_t len = strlen(text), padded = (len + 7) & ~(size_t)7;
    uint8_t hdr[8];
    for (int i = 0; i < 8; i++)
        hdr[i] = (uint8_t)((uint64_t)padded >> (8 * i));
    int ok = fwrite(hdr, 1, 8, w->f) == 8 && fwrite(text, 1, len, w->f) == len;
    for (size_t i = len; ok && i < padded; i++)
        ok = fputc(' ', w->f) != EOF;
    free(text);
    if (!ok)
        return glm_error_set(err, GLM_ERR_IO, "cannot write %s: %s", w->path, strerror(errno));
    w->begun = 1;
    return GLM_OK;
}

glm_status st_writer_write(st_writer *w, const void *data, size_t nbytes, glm_error *err)
{
    if (!w->begun)
        return glm_error_set(err, GLM_ERR_ARG, "%s: data before the header", w->path);
    if (w->written + nbytes > w->total)
        return glm_error_set(err, GLM_ERR_ARG, "%s: %zu more data bytes than declared", w->path,
                             w->written + nbytes - w->total);
    if (nbytes && fwrite(data, 1, nbytes, w->f) != nbytes)
        return glm_error_set(err, GLM_ERR_IO, "cannot write %s: %s", w->path, strerror(errno));
    w->written += nbytes;
    return GLM_OK;
}

static void writer_free(st_writer *w)
{
    for (size_t i = 0; i < w->n_decls; i++)
        free(w->decls[i].name);
    free(w->decls);
    cJSON_Delete(w->metadata);
    free(w->path);
    free(w);
}

glm_status st_writer_close(st_writer *w, glm_error *err)
{
    glm_status st = GLM_OK;
    if (!w->begun)
        st = st_writer_begin(w, err);
    if (!st && w->written != w->total)
        st = glm_error_set(err, GLM_ERR_ARG, "%s: %zu of %zu data bytes written", w->path,
                           w->written, w->total);
    if (fclose(w->f) != 0 && !st)
        st = glm_error_set(err, GLM_ERR_IO, "cannot write %s: %s", w->path, strerror(errno));
    if (st)
        remove(w->path);
    writer_free(w);
    return st;
}

void st_writer_abort(st_writer *w)
{
    if (!w)
        return;
    fclose(w->f);
    remove(w->path);
    writer_free(w);
}
