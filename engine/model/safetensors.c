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

#include "base/le.h"

/* Bounds on what a file may ask of the reader: the header is parsed in place (about one
 * st_tensor per entry), the metadata into a JSON tree (many times its size), text files whole. */
#define ST_MAX_HEADER (100u << 20)
#define ST_MAX_METADATA (1u << 20)
#define ST_MAX_TEXT (64u << 20)
#define ST_MAX_NAME 4096
#define ST_MAX_NESTING 32

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
    /* unsigned: a loaded tensor's product was checked to fit (shape_bytes); for any other the
     * product wraps instead of being undefined */
    uint64_t n = 1;
    for (int i = 0; i < t->ndim; i++)
        n *= (uint64_t)t->shape[i];
    return (int64_t)n;
}

/* ---- reader -------------------------------------------------------------------------------- */

typedef struct st_file {
    char *path;
    void *map;
    size_t size;
    cJSON *metadata; /* the __metadata__ object or NULL */
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
        cJSON_Delete(m->files[i].metadata);
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

/* ---- header parser ---------------------------------------------------------------------------
 * The header is read in place, straight into st_tensor entries: a JSON tree of a crafted header
 * (millions of tiny entries or shape numbers) costs over ten times the header's size. */

typedef struct hdr {
    const char *s; /* the header text (not NUL-terminated) */
    size_t n, i;   /* its length, the read position */
    const char *path;
    glm_error *err;
} hdr;

/* What one tensor entry says, before it is checked against the file. */
typedef struct hdr_entry {
    char dtype[16];
    int has_dtype, has_shape, has_offsets;
    int ndim;
    uint64_t shape[ST_MAX_DIMS];
    uint64_t begin, end;
} hdr_entry;

static glm_status hdr_fail(hdr *h, const char *what)
{
    return glm_error_set(h->err, GLM_ERR_FORMAT, "%s: the header is not valid safetensors JSON: %s "
                         "at byte %zu (a damaged or hand-made file; download it again)", h->path,
                         what, h->i + 8);
}

static int hdr_peek(hdr *h)
{
    while (h->i < h->n && (h->s[h->i] == ' ' || h->s[h->i] == '\t' || h->s[h->i] == '\n' ||
                           h->s[h->i] == '\r'))
        h->i++;
    return h->i < h->n ? (unsigned char)h->s[h->i] : -1;
}

static glm_status hdr_expect(hdr *h, char c)
{
    if (hdr_peek(h) == c) {
        h->i++;
        return GLM_OK;
    }
    char what[32];
    snprintf(what, sizeof what, "'%c' expected", c);
    return hdr_fail(h, what);
}

static int hdr_hex4(hdr *h, unsigned *out)
{
    if (h->n - h->i < 4)
        return -1;
    unsigned v = 0;
    for (int k = 0; k < 4; k++) {
        char c = h->s[h->i++];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
              : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0)
            return -1;
        v = v << 4 | (unsigned)d;
    }
    *out = v;
    return 0;
}

/* A \u escape (the "\u" already read), surrogate pairs joined, as UTF-8 into enc. */
static int hdr_unicode(hdr *h, char enc[4])
{
    unsigned cp, lo;
    if (hdr_hex4(h, &cp) || cp == 0 || (cp >= 0xdc00 && cp < 0xe000))
        return -1;
    if (cp >= 0xd800 && cp < 0xdc00) {
        if (h->n - h->i < 2 || h->s[h->i] != '\\' || h->s[h->i + 1] != 'u')
            return -1;
        h->i += 2;
        if (hdr_hex4(h, &lo) || lo < 0xdc00 || lo >= 0xe000)
            return -1;
        cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
    }
    if (cp < 0x80) {
        enc[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        enc[0] = (char)(0xc0 | cp >> 6);
        enc[1] = (char)(0x80 | (cp & 0x3f));
        return 2;
    }
    if (cp < 0x10000) {
        enc[0] = (char)(0xe0 | cp >> 12);
        enc[1] = (char)(0x80 | (cp >> 6 & 0x3f));
        enc[2] = (char)(0x80 | (cp & 0x3f));
        return 3;
    }
    enc[0] = (char)(0xf0 | cp >> 18);
    enc[1] = (char)(0x80 | (cp >> 12 & 0x3f));
    enc[2] = (char)(0x80 | (cp >> 6 & 0x3f));
    enc[3] = (char)(0x80 | (cp & 0x3f));
    return 4;
}

/* One escape (the backslash already read) into enc; its length, or -1. */
static int hdr_escape(hdr *h, char enc[4])
{
    if (h->i >= h->n)
        return -1;
    char e = h->s[h->i++];
    static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
    const char *k = e ? strchr(from, e) : NULL;
    if (k) {
        enc[0] = to[k - from];
        return 1;
    }
    return e == 'u' ? hdr_unicode(h, enc) : -1;
}

/* A JSON string, escapes decoded, into out (NUL-terminated; out NULL: only skipped). Control
 * characters, NUL and \u0000 are refused: no name may hide bytes from a C string. */
static glm_status hdr_string(hdr *h, char *out, size_t cap)
{
    glm_status st = hdr_expect(h, '"');
    if (st)
        return st;
    size_t k = 0;
    for (;;) {
        if (h->i >= h->n)
            return hdr_fail(h, "an unterminated string");
        char enc[4];
        int len = 1;
        enc[0] = h->s[h->i++];
        if (enc[0] == '"')
            break;
        if ((unsigned char)enc[0] < 0x20)
            return hdr_fail(h, "a control character in a string");
        if (enc[0] == '\\' && (len = hdr_escape(h, enc)) < 0)
            return hdr_fail(h, "a bad escape (or \\u0000) in a string");
        if (!out)
            continue;
        if (k + (size_t)len >= cap) /* names: 4096 bytes; keys inside an entry: 31 */
            return hdr_fail(h, "a string longer than glmchat allows there");
        memcpy(out + k, enc, (size_t)len);
        k += (size_t)len;
    }
    if (out)
        out[k] = 0;
    return GLM_OK;
}

/* A whole number in 0 .. 2^63-1, written as JSON digits (no sign, fraction or exponent). */
static glm_status hdr_count(hdr *h, uint64_t *out)
{
    if (hdr_peek(h) < '0' || hdr_peek(h) > '9')
        return hdr_fail(h, "a whole number expected");
    uint64_t v = 0;
    while (h->i < h->n && h->s[h->i] >= '0' && h->s[h->i] <= '9') {
        uint64_t d = (uint64_t)(h->s[h->i++] - '0');
        if (v > ((uint64_t)INT64_MAX - d) / 10)
            return hdr_fail(h, "a number above 2^63");
        v = v * 10 + d;
    }
    if (h->i < h->n && (h->s[h->i] == '.' || h->s[h->i] == 'e' || h->s[h->i] == 'E'))
        return hdr_fail(h, "a number that is not a whole number");
    *out = v;
    return GLM_OK;
}

/* [n, n, ...] with at most max numbers; *count gets how many. */
static glm_status hdr_counts(hdr *h, uint64_t *out, int max, int *count)
{
    glm_status st = hdr_expect(h, '[');
    *count = 0;
    if (!st && hdr_peek(h) == ']') {
        h->i++;
        return GLM_OK;
    }
    while (!st) {
        uint64_t v = 0;
        if ((st = hdr_count(h, &v)))
            return st;
        if (*count == max)
            return hdr_fail(h, "more numbers than a shape or data_offsets may hold");
        out[(*count)++] = v;
        if (hdr_peek(h) == ']') {
            h->i++;
            return GLM_OK;
        }
        st = hdr_expect(h, ',');
    }
    return st;
}

static glm_status hdr_skip(hdr *h, int depth);

/* The members of an object or elements of an array (the bracket already read), skipped. */
static glm_status hdr_skip_items(hdr *h, char close, int depth)
{
    if (hdr_peek(h) == close) {
        h->i++;
        return GLM_OK;
    }
    for (;;) {
        glm_status st = GLM_OK;
        if (close == '}' && ((st = hdr_string(h, NULL, 0)) || (st = hdr_expect(h, ':'))))
            return st;
        if ((st = hdr_skip(h, depth + 1)))
            return st;
        if (hdr_peek(h) == close) {
            h->i++;
            return GLM_OK;
        }
        if ((st = hdr_expect(h, ',')))
            return st;
    }
}

/* Any JSON value, checked for form and skipped; nesting bounded so the stack is. */
static glm_status hdr_skip(hdr *h, int depth)
{
    if (depth > ST_MAX_NESTING)
        return hdr_fail(h, "values nested deeper than 32");
    int c = hdr_peek(h);
    if (c == '"')
        return hdr_string(h, NULL, 0);
    if (c == '{' || c == '[') {
        h->i++;
        return hdr_skip_items(h, c == '{' ? '}' : ']', depth);
    }
    static const char *const words[] = {"true", "false", "null"};
    for (int k = 0; k < 3; k++) {
        size_t len = strlen(words[k]);
        if (h->n - h->i >= len && memcmp(h->s + h->i, words[k], len) == 0) {
            h->i += len;
            return GLM_OK;
        }
    }
    size_t start = h->i;
    while (h->i < h->n && strchr("0123456789+-.eE", h->s[h->i]) && h->s[h->i])
        h->i++;
    return h->i > start ? GLM_OK : hdr_fail(h, "a value expected");
}

/* One tensor's {"dtype": ..., "shape": [...], "data_offsets": [b, e]}; other keys skipped. */
static glm_status hdr_tensor(hdr *h, const char *name, hdr_entry *e)
{
    char key[32];
    glm_status st = hdr_expect(h, '{');
    memset(e, 0, sizeof *e);
    if (!st && hdr_peek(h) == '}') {
        h->i++;
        return GLM_OK;
    }
    while (!st) {
        if ((st = hdr_string(h, key, sizeof key)) || (st = hdr_expect(h, ':')))
            return st;
        int *seen = strcmp(key, "dtype") == 0 ? &e->has_dtype : strcmp(key, "shape") == 0
                  ? &e->has_shape : strcmp(key, "data_offsets") == 0 ? &e->has_offsets : NULL;
        if (seen && *seen)
            return glm_error_set(h->err, GLM_ERR_FORMAT, "%s: tensor %s gives %s twice", h->path,
                                 name, key);
        if (seen)
            *seen = 1;
        if (seen == &e->has_dtype) {
            st = hdr_string(h, e->dtype, sizeof e->dtype);
        } else if (seen == &e->has_shape) {
            uint64_t dims[ST_MAX_DIMS + 1];
            if (!(st = hdr_counts(h, dims, ST_MAX_DIMS + 1, &e->ndim)) && e->ndim > ST_MAX_DIMS)
                return glm_error_set(h->err, GLM_ERR_FORMAT, "%s: tensor %s has more than %d "
                                     "dimensions", h->path, name, ST_MAX_DIMS);
            memcpy(e->shape, dims, sizeof e->shape);
        } else if (seen) {
            uint64_t off[2];
            int n = 0;
            if (!(st = hdr_counts(h, off, 2, &n)) && n != 2)
                return glm_error_set(h->err, GLM_ERR_FORMAT, "%s: tensor %s has bad data_offsets "
                                     "(two numbers expected)", h->path, name);
            e->begin = off[0];
            e->end = off[1];
        } else {
            st = hdr_skip(h, 1);
        }
        if (st || hdr_peek(h) == '}')
            break;
        st = hdr_expect(h, ',');
    }
    if (!st)
        h->i++;
    return st;
}

/* Bytes a shape of a dtype holds, or -1 when the product does not fit in int64. A shape with a
 * zero dimension holds nothing, whatever its other dimensions. */
static int shape_bytes(const st_tensor *t, uint64_t *bytes)
{
    uint64_t n = 1;
    for (int i = 0; i < t->ndim; i++) {
        if (t->shape[i] == 0) {
            *bytes = 0;
            return 0;
        }
    }
    for (int i = 0; i < t->ndim; i++) {
        uint64_t d = (uint64_t)t->shape[i];
        if (d > (uint64_t)INT64_MAX / n)
            return -1;
        n *= d;
    }
    uint64_t size = st_dtype_size(t->dtype);
    if (n > (uint64_t)INT64_MAX / size)
        return -1;
    *bytes = n * size;
    return 0;
}

static glm_status check_entry(st_file *f, const char *name, const hdr_entry *e, st_tensor *t,
                              size_t data_size, glm_error *err)
{
    if (!e->has_dtype)
        return glm_error_set(err, GLM_ERR_FORMAT, "%s: tensor %s has no dtype", f->path, name);
    if (st_dtype_parse(e->dtype, &t->dtype) != 0)
        return glm_error_set(err, GLM_ERR_UNSUPPORTED, "%s: tensor %s has dtype %s, which "
                             "glmchat cannot read", f->path, name, e->dtype);
    if (!e->has_shape)
        return glm_error_set(err, GLM_ERR_FORMAT, "%s: tensor %s has no shape array", f->path, name);
    if (!e->has_offsets || e->end < e->begin)
        return glm_error_set(err, GLM_ERR_FORMAT, "%s: tensor %s has bad data_offsets", f->path,
                             name);
    t->ndim = e->ndim;
    for (int i = 0; i < e->ndim; i++)
        t->shape[i] = (int64_t)e->shape[i];
    uint64_t want;
    if (shape_bytes(t, &want))
        return glm_error_set(err, GLM_ERR_FORMAT, "%s: tensor %s has a shape whose element count "
                             "overflows 64 bits", f->path, name);
    if (e->end > data_size)
        return glm_error_set(err, GLM_ERR_FORMAT, "%s: tensor %s ends at byte %llu of the data "
                             "but the file holds only %zu: the file is truncated (download it again)",
                             f->path, name, (unsigned long long)e->end, data_size);
    if (want != e->end - e->begin)
        return glm_error_set(err, GLM_ERR_FORMAT, "%s: tensor %s holds %llu bytes but its shape "
                             "and dtype need %llu", f->path, name,
                             (unsigned long long)(e->end - e->begin), (unsigned long long)want);
    return GLM_OK;
}

static glm_status parse_entry(st_model *m, st_file *f, hdr *h, const char *name, const uint8_t *data,
                              size_t data_size, glm_error *err)
{
    hdr_entry e;
    st_tensor t = {0};
    t.file = f->path;
    glm_status st = hdr_tensor(h, name, &e);
    if (!st)
        st = check_entry(f, name, &e, &t, data_size, err);
    if (st)
        return st;
    t.data = data + e.begin;
    t.nbytes = (size_t)(e.end - e.begin);
    t.name = strdup(name);
    if (!t.name)
        return glm_error_set(err, GLM_ERR_NOMEM, "out of memory reading %s", f->path);
    st = push_tensor(m, &t, err);
    if (st)
        free((char *)t.name);
    return st;
}

static glm_status parse_metadata(st_file *f, hdr *h, glm_error *err)
{
    if (f->metadata)
        return glm_error_set(err, GLM_ERR_FORMAT, "%s: the header gives __metadata__ twice", f->path);
    hdr_peek(h);
    size_t start = h->i;
    glm_status st = hdr_skip(h, 1);
    if (st)
        return st;
    if (h->i - start > ST_MAX_METADATA)
        return glm_error_set(err, GLM_ERR_FORMAT, "%s: __metadata__ is %zu bytes, above glmchat's "
                             "limit of 1 MiB", f->path, h->i - start);
    f->metadata = cJSON_ParseWithLength(h->s + start, h->i - start);
    if (!cJSON_IsObject(f->metadata))
        return glm_error_set(err, GLM_ERR_FORMAT, "%s: __metadata__ is not an object", f->path);
    return GLM_OK;
}

static int cmp_data(const void *a, const void *b)
{
    const uint8_t *x = ((const st_tensor *)a)->data, *y = ((const st_tensor *)b)->data;
    return x < y ? -1 : x > y;
}

/* No two tensors of a file may share bytes: one written through the other would change both. */
static glm_status check_overlaps(st_model *m, size_t first, const char *path, glm_error *err)
{
    size_t n = m->n_tensors - first;
    if (n < 2) /* also: no table allocated yet */
        return GLM_OK;
    st_tensor *t = m->tensors + first;
    qsort(t, n, sizeof *t, cmp_data);
    const st_tensor *prev = NULL;
    for (size_t i = 0; i < n; i++) {
        if (!t[i].nbytes)
            continue;
        if (prev && (const uint8_t *)prev->data + prev->nbytes > (const uint8_t *)t[i].data)
            return glm_error_set(err, GLM_ERR_FORMAT, "%s: tensors %s and %s overlap in the file's "
                                 "data (a damaged or hand-made file)", path, prev->name, t[i].name);
        prev = &t[i];
    }
    return GLM_OK;
}

static glm_status parse_header(st_model *m, st_file *f, const char *text, size_t n, glm_error *err)
{
    const uint8_t *data = (const uint8_t *)text + n;
    size_t data_size = f->size - 8 - n, first = m->n_tensors;
    const char *nul = memchr(text, 0, n);
    if (nul)
        return glm_error_set(err, GLM_ERR_FORMAT, "%s: the header holds a NUL byte at byte %zu (a "
                             "damaged or hand-made file)", f->path, (size_t)(nul - text) + 8);
    hdr h = {.s = text, .n = n, .path = f->path, .err = err};
    char name[ST_MAX_NAME];
    glm_status st = hdr_expect(&h, '{');
    if (!st && hdr_peek(&h) == '}')
        h.i++;
    else
        while (!st) {
            if ((st = hdr_string(&h, name, sizeof name)) || (st = hdr_expect(&h, ':')))
                break;
            if (strcmp(name, "__metadata__") == 0)
                st = parse_metadata(f, &h, err);
            else
                st = parse_entry(m, f, &h, name, data, data_size, err);
            if (st || hdr_peek(&h) == '}') {
                h.i++;
                break;
            }
            st = hdr_expect(&h, ',');
        }
    if (!st && hdr_peek(&h) != -1)
        st = hdr_fail(&h, "bytes after the header's object");
    return st ? st : check_overlaps(m, first, f->path, err);
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
    uint64_t hlen = le_get_u64(p);
    if (hlen > ST_MAX_HEADER)
        return glm_error_set(err, GLM_ERR_FORMAT, "%s: the header is %llu bytes, above glmchat's "
                             "limit of 100 MiB (a damaged or hand-made file)", path,
                             (unsigned long long)hlen);
    if (hlen > f->size - 8)
        return glm_error_set(err, GLM_ERR_FORMAT, "%s: header length %llu does not fit the %zu-byte "
                             "file (truncated or not safetensors)", path, (unsigned long long)hlen,
                             f->size);
    return parse_header(m, f, (const char *)p + 8, (size_t)hlen, err);
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
            if (cap > ST_MAX_TEXT + 65536u) {
                free(buf);
                fclose(f);
                glm_error_set(err, GLM_ERR_FORMAT, "%s is larger than glmchat's limit of 64 MiB",
                              path);
                return NULL;
            }
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
            out[i] = st_bf16_to_f32(le_get_u16(p + 2 * i));
        return 0;
    }
    case ST_F16: {
        const uint8_t *p = (const uint8_t *)data + first * 2;
        for (size_t i = 0; i < n; i++)
            out[i] = st_f16_to_f32(le_get_u16(p + 2 * i));
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
