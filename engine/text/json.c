/* json.c: glmchat's JSON reader and Python-compatible writer (see json.h).
 * Recursive descent with a depth limit; every allocation checked; errors name the byte offset. */
#include "engine/text/json.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/utf8.h"

enum { JV_MAX_DEPTH = 512 };

typedef jv_cursor jv_reader;

jv *jv_new(jv_type t)
{
    jv *v = calloc(1, sizeof *v);
    if (v)
        v->type = t;
    return v;
}

void jv_free(jv *v)
{
    if (!v)
        return;
    for (size_t i = 0; i < v->n; i++) {
        jv_free(v->items[i]);
        if (v->keys)
            free(v->keys[i]);
    }
    free(v->items);
    free(v->keys);
    free(v->key_lens);
    free(v->str);
    free(v);
}

jv *jv_new_string(const char *s, size_t len)
{
    jv *v = jv_new(JV_STRING);
    if (!v)
        return NULL;
    v->str = malloc(len + 1);
    if (!v->str) {
        free(v);
        return NULL;
    }
    if (len)
        memcpy(v->str, s, len);
    v->str[len] = '\0';
    v->len = len;
    return v;
}

static int grow(jv *v, int with_keys)
{
    if (v->n < v->cap)
        return 0;
    size_t cap = v->cap ? v->cap * 2 : 4;
    jv **items = realloc(v->items, cap * sizeof *items);
    if (!items)
        return -1;
    v->items = items;
    if (with_keys) {
        char **keys = realloc(v->keys, cap * sizeof *keys);
        if (!keys)
            return -1;
        v->keys = keys;
        size_t *kl = realloc(v->key_lens, cap * sizeof *kl);
        if (!kl)
            return -1;
        v->key_lens = kl;
    }
    v->cap = cap;
    return 0;
}

glm_status jv_array_push(jv *arr, jv *item)
{
    if (grow(arr, 0) != 0) {
        jv_free(item);
        return GLM_ERR_NOMEM;
    }
    arr->items[arr->n++] = item;
    return GLM_OK;
}

/* Appends without looking for the key (the reader dedupes a whole object at once). */
static glm_status object_append(jv *obj, const char *key, size_t klen, jv *val)
{
    char *k = malloc(klen + 1);
    if (!k || grow(obj, 1) != 0) {
        free(k);
        jv_free(val);
        return GLM_ERR_NOMEM;
    }
    memcpy(k, key, klen);
    k[klen] = '\0';
    obj->keys[obj->n] = k;
    obj->key_lens[obj->n] = klen;
    obj->items[obj->n++] = val;
    return GLM_OK;
}

static _Thread_local const jv *sort_obj; /* qsort has no context argument */

static int key_order(const void *a, const void *b)
{
    size_t i = *(const size_t *)a, j = *(const size_t *)b;
    size_t li = sort_obj->key_lens[i], lj = sort_obj->key_lens[j];
    int c = memcmp(sort_obj->keys[i], sort_obj->keys[j], li < lj ? li : lj);
    if (c)
        return c;
    if (li != lj)
        return li < lj ? -1 : 1;
    return i < j ? -1 : i > j ? 1 : 0;
}

/* Python's dict for repeated keys: the first position keeps the last value. Sorting keeps it
 * O(n log n) for tokenizer vocabularies of 150k keys. */
static glm_status object_dedupe(jv *obj)
{
    if (obj->n < 2)
        return GLM_OK;
    size_t *idx = malloc(obj->n * sizeof *idx);
    if (!idx)
        return GLM_ERR_NOMEM;
    for (size_t i = 0; i < obj->n; i++)
        idx[i] = i;
    sort_obj = obj;
    qsort(idx, obj->n, sizeof *idx, key_order);
    sort_obj = NULL;
    int any = 0;
    for (size_t r = 0; r < obj->n;) {
        size_t e = r + 1;
        while (e < obj->n && obj->key_lens[idx[e]] == obj->key_lens[idx[r]] &&
               memcmp(obj->keys[idx[e]], obj->keys[idx[r]], obj->key_lens[idx[r]]) == 0)
            e++;
        if (e - r > 1) { /* idx[r] is the first position, idx[e-1] the last value */
            any = 1;
            jv *last = obj->items[idx[e - 1]];
            obj->items[idx[e - 1]] = NULL;
            jv_free(obj->items[idx[r]]);
            obj->items[idx[r]] = last;
            for (size_t k = r + 1; k < e; k++) {
                jv_free(obj->items[idx[k]]);
                obj->items[idx[k]] = NULL;
                free(obj->keys[idx[k]]);
                obj->keys[idx[k]] = NULL;
            }
        }
        r = e;
    }
    free(idx);
    if (!any)
        return GLM_OK;
    size_t w = 0;
    for (size_t i = 0; i < obj->n; i++) {
        if (!obj->keys[i])
            continue;
        obj->keys[w] = obj->keys[i];
        obj->key_lens[w] = obj->key_lens[i];
        obj->items[w++] = obj->items[i];
    }
    obj->n = w;
    return GLM_OK;
}

glm_status jv_object_set(jv *obj, const char *key, size_t klen, jv *val)
{
    if (!key) /* an empty key read into a tbuf that never grew: memcmp and memcpy want a pointer */
        key = "";
    for (size_t i = 0; i < obj->n; i++) {
        if (obj->key_lens[i] == klen && memcmp(obj->keys[i], key, klen) == 0) {
            jv_free(obj->items[i]); /* Python's dict: the first position, the last value */
            obj->items[i] = val;
            return GLM_OK;
        }
    }
    char *k = malloc(klen + 1);
    if (!k || grow(obj, 1) != 0) {
        free(k);
        jv_free(val);
        return GLM_ERR_NOMEM;
    }
    memcpy(k, key, klen);
    k[klen] = '\0';
    obj->keys[obj->n] = k;
    obj->key_lens[obj->n] = klen;
    obj->items[obj->n++] = val;
    return GLM_OK;
}

jv *jv_clone(const jv *v)
{
    jv *c = jv_new(v->type);
    if (!c)
        return NULL;
    c->num = v->num;
    if (v->str) {
        c->str = malloc(v->len + 1);
        if (!c->str)
            goto fail;
        memcpy(c->str, v->str, v->len + 1);
        c->len = v->len;
    }
    for (size_t i = 0; i < v->n; i++) {
        jv *item = jv_clone(v->items[i]);
        if (!item)
            goto fail;
        glm_status st = v->type == JV_OBJECT ? jv_object_set(c, v->keys[i], v->key_lens[i], item)
                                             : jv_array_push(c, item);
        if (st != GLM_OK)
            goto fail;
    }
    return c;
fail:
    jv_free(c);
    return NULL;
}

const jv *jv_get(const jv *obj, const char *key)
{
    if (!obj || obj->type != JV_OBJECT)
        return NULL;
    size_t kl = strlen(key);
    for (size_t i = 0; i < obj->n; i++)
        if (obj->key_lens[i] == kl && memcmp(obj->keys[i], key, kl) == 0)
            return obj->items[i];
    return NULL;
}

int jv_is_str(const jv *v, const char *s)
{
    return v && v->type == JV_STRING && strlen(s) == v->len && memcmp(v->str, s, v->len) == 0;
}

int jv_truthy(const jv *v)
{
    if (!v)
        return 0;
    switch (v->type) {
    case JV_NULL:
    case JV_FALSE:
        return 0;
    case JV_TRUE:
        return 1;
    case JV_INT:
    case JV_FLOAT:
        return v->num != 0.0;
    case JV_STRING:
        return v->len > 0;
    default:
        return v->n > 0;
    }
}

/* ---- reading ---- */

static jv *fail_at(jv_reader *r, const char *what)
{
    glm_error_set(r->err, GLM_ERR_FORMAT, "JSON: %s at byte %zu", what, r->i);
    return NULL;
}

static void skip_ws(jv_reader *r)
{
    while (r->i < r->n) {
        char c = r->s[r->i];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r')
            break;
        r->i++;
    }
}

static int hex4(const char *s, unsigned *out)
{
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        char c = s[i];
        v <<= 4;
        if (c >= '0' && c <= '9')
            v |= (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f')
            v |= (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F')
            v |= (unsigned)(c - 'A' + 10);
        else
            return -1;
    }
    *out = v;
    return 0;
}

static int read_string_into(jv_reader *r, tbuf *b)
{
    r->i++; /* the opening quote */
    for (;;) {
        size_t start = r->i;
        while (r->i < r->n && r->s[r->i] != '"' && r->s[r->i] != '\\' && (unsigned char)r->s[r->i] >= 0x20)
            r->i++;
        if (r->i > start) {
            if (!utf8_valid(r->s + start, r->i - start)) {
                fail_at(r, "a string is not valid UTF-8");
                return -1;
            }
            if (tbuf_append(b, r->s + start, r->i - start) != GLM_OK)
                goto nomem;
        }
        if (r->i >= r->n) {
            fail_at(r, "an unterminated string");
            return -1;
        }
        char c = r->s[r->i];
        if (c == '"') {
            r->i++;
            return 0;
        }
        if (c != '\\') {
            fail_at(r, "a control character inside a string");
            return -1;
        }
        if (r->i + 1 >= r->n) {
            fail_at(r, "an unterminated escape");
            return -1;
        }
        char e = r->s[r->i + 1];
        r->i += 2;
        const char *simple = strchr("\"\\/bfnrt", e);
        if (e && simple) {
            static const char map[] = "\"\\/\b\f\n\r\t";
            if (tbuf_putc(b, map[simple - "\"\\/bfnrt"]) != GLM_OK)
                goto nomem;
            continue;
        }
        if (e != 'u') {
            fail_at(r, "an unknown escape");
            return -1;
        }
        unsigned cp, lo;
        if (r->i + 4 > r->n || hex4(r->s + r->i, &cp) != 0) {
            fail_at(r, "a bad \\u escape");
            return -1;
        }
        r->i += 4;
        if (cp >= 0xD800 && cp <= 0xDBFF) {
            if (r->i + 6 > r->n || r->s[r->i] != '\\' || r->s[r->i + 1] != 'u' ||
                hex4(r->s + r->i + 2, &lo) != 0 || lo < 0xDC00 || lo > 0xDFFF) {
                fail_at(r, "a lone surrogate (the text cannot be UTF-8)");
                return -1;
            }
            r->i += 6;
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
        } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
            fail_at(r, "a lone surrogate (the text cannot be UTF-8)");
            return -1;
        }
        char u[4];
        int k = utf8_encode(cp, u);
        if (tbuf_append(b, u, (size_t)k) != GLM_OK)
            goto nomem;
    }
nomem:
    glm_error_set(r->err, GLM_ERR_NOMEM, "JSON: out of memory");
    return -1;
}

static jv *read_string(jv_reader *r)
{
    tbuf b = {0};
    if (read_string_into(r, &b) != 0) {
        tbuf_free(&b);
        return NULL;
    }
    jv *v = jv_new_string(b.p ? b.p : "", b.len);
    tbuf_free(&b);
    if (!v)
        glm_error_set(r->err, GLM_ERR_NOMEM, "JSON: out of memory");
    return v;
}

/* Scans a JSON number at s; returns its length and whether it is an integer, or 0 if malformed. */
static size_t scan_number(const char *s, size_t n, int *is_int)
{
    size_t i = 0;
    *is_int = 1;
    if (i < n && s[i] == '-')
        i++;
    if (i >= n)
        return 0;
    if (s[i] == '0') {
        i++;
    } else if (s[i] >= '1' && s[i] <= '9') {
        while (i < n && s[i] >= '0' && s[i] <= '9')
            i++;
    } else {
        return 0;
    }
    if (i < n && s[i] == '.') {
        *is_int = 0;
        i++;
        size_t d = i;
        while (i < n && s[i] >= '0' && s[i] <= '9')
            i++;
        if (i == d)
            return 0;
    }
    if (i < n && (s[i] == 'e' || s[i] == 'E')) {
        *is_int = 0;
        i++;
        if (i < n && (s[i] == '+' || s[i] == '-'))
            i++;
        size_t d = i;
        while (i < n && s[i] >= '0' && s[i] <= '9')
            i++;
        if (i == d)
            return 0;
    }
    return i;
}

jv *jv_new_number_text(const char *s, size_t len)
{
    int is_int;
    if (scan_number(s, len, &is_int) != len || len == 0)
        return NULL;
    char tmp[64];
    char *buf = len < sizeof tmp ? tmp : malloc(len + 1);
    if (!buf)
        return NULL;
    memcpy(buf, s, len);
    buf[len] = '\0';
    double d = strtod(buf, NULL);
    jv *v = NULL;
    if (is_int) {
        v = jv_new(JV_INT);
        const char *digits = buf;
        int neg = digits[0] == '-';
        if (neg && strcmp(digits, "-0") == 0)
            digits = "0", neg = 0;
        if (v) {
            v->str = strdup(digits);
            if (!v->str) {
                free(v);
                v = NULL;
            } else {
                v->len = strlen(v->str);
            }
        }
    } else {
        v = jv_new(JV_FLOAT);
    }
    if (v)
        v->num = d;
    if (buf != tmp)
        free(buf);
    return v;
}

static jv *read_value(jv_reader *r);

static jv *read_array(jv_reader *r)
{
    jv *a = jv_new(JV_ARRAY);
    if (!a)
        return fail_at(r, "out of memory");
    r->i++;
    skip_ws(r);
    if (r->i < r->n && r->s[r->i] == ']') {
        r->i++;
        return a;
    }
    for (;;) {
        jv *item = read_value(r);
        if (!item || jv_array_push(a, item) != GLM_OK)
            goto fail;
        skip_ws(r);
        if (r->i < r->n && r->s[r->i] == ',') {
            r->i++;
            continue;
        }
        if (r->i < r->n && r->s[r->i] == ']') {
            r->i++;
            return a;
        }
        fail_at(r, "expected ',' or ']'");
        goto fail;
    }
fail:
    if (r->err && r->err->status == GLM_OK)
        fail_at(r, "out of memory");
    jv_free(a);
    return NULL;
}

static jv *read_object(jv_reader *r)
{
    jv *o = jv_new(JV_OBJECT);
    if (!o)
        return fail_at(r, "out of memory");
    r->i++;
    skip_ws(r);
    if (r->i < r->n && r->s[r->i] == '}') {
        r->i++;
        return o;
    }
    for (;;) {
        skip_ws(r);
        if (r->i >= r->n || r->s[r->i] != '"') {
            fail_at(r, "expected a string key");
            goto fail;
        }
        tbuf key = {0};
        if (read_string_into(r, &key) != 0) {
            tbuf_free(&key);
            goto fail;
        }
        skip_ws(r);
        if (r->i >= r->n || r->s[r->i] != ':') {
            tbuf_free(&key);
            fail_at(r, "expected ':'");
            goto fail;
        }
        r->i++;
        jv *val = read_value(r);
        glm_status st = val ? object_append(o, key.p ? key.p : "", key.len, val) : GLM_ERR_FORMAT;
        tbuf_free(&key);
        if (st != GLM_OK)
            goto fail;
        skip_ws(r);
        if (r->i < r->n && r->s[r->i] == ',') {
            r->i++;
            continue;
        }
        if (r->i < r->n && r->s[r->i] == '}') {
            r->i++;
            if (object_dedupe(o) == GLM_OK)
                return o;
            glm_error_set(r->err, GLM_ERR_NOMEM, "JSON: out of memory");
            goto fail;
        }
        fail_at(r, "expected ',' or '}'");
        goto fail;
    }
fail:
    if (r->err && r->err->status == GLM_OK)
        fail_at(r, "out of memory");
    jv_free(o);
    return NULL;
}

static jv *read_value(jv_reader *r)
{
    skip_ws(r);
    if (r->i >= r->n)
        return fail_at(r, "unexpected end of input");
    if (++r->depth > JV_MAX_DEPTH)
        return fail_at(r, "nesting deeper than 512");
    jv *v = NULL;
    char c = r->s[r->i];
    if (c == '{') {
        v = read_object(r);
    } else if (c == '[') {
        v = read_array(r);
    } else if (c == '"') {
        v = read_string(r);
    } else if (r->n - r->i >= 4 && memcmp(r->s + r->i, "null", 4) == 0) {
        r->i += 4;
        v = jv_new(JV_NULL);
    } else if (r->n - r->i >= 4 && memcmp(r->s + r->i, "true", 4) == 0) {
        r->i += 4;
        v = jv_new(JV_TRUE);
    } else if (r->n - r->i >= 5 && memcmp(r->s + r->i, "false", 5) == 0) {
        r->i += 5;
        v = jv_new(JV_FALSE);
    } else if (c == 'N' || c == 'I' || (c == '-' && r->i + 1 < r->n && r->s[r->i + 1] == 'I')) {
        /* Python's json reads NaN, Infinity and -Infinity too (and writes them) */
        static const char *const words[] = {"NaN", "Infinity", "-Infinity"};
        for (int w = 0; w < 3 && !v; w++) {
            size_t k = strlen(words[w]);
            if (r->n - r->i >= k && memcmp(r->s + r->i, words[w], k) == 0) {
                v = jv_new(JV_FLOAT);
                if (v)
                    v->num = w == 0 ? NAN : w == 1 ? INFINITY : -INFINITY;
                r->i += k;
            }
        }
        if (!v) {
            r->depth--;
            return fail_at(r, "an unexpected character");
        }
    } else {
        int is_int;
        size_t k = scan_number(r->s + r->i, r->n - r->i, &is_int);
        if (k == 0) {
            r->depth--;
            return fail_at(r, "an unexpected character");
        }
        v = jv_new_number_text(r->s + r->i, k);
        r->i += k;
    }
    r->depth--;
    if (!v && r->err && r->err->status == GLM_OK)
        glm_error_set(r->err, GLM_ERR_NOMEM, "JSON: out of memory");
    return v;
}

jv *jv_parse(const char *text, size_t len, glm_error *err)
{
    glm_error local = {0};
    jv_reader r = {text, len, 0, 0, err ? err : &local};
    r.err->status = GLM_OK;
    jv *v = read_value(&r);
    if (!v)
        return NULL;
    skip_ws(&r);
    if (r.i != r.n) {
        jv_free(v);
        return fail_at(&r, "trailing characters after the value");
    }
    return v;
}

/* ---- reading one member at a time ---- */

void jv_cursor_init(jv_cursor *c, const char *text, size_t len, glm_error *err)
{
    *c = (jv_cursor){text, len, 0, 0, err};
    if (err)
        err->status = GLM_OK;
}

int jv_cursor_enter(jv_cursor *c, jv_type type)
{
    char open = type == JV_OBJECT ? '{' : '[', close = type == JV_OBJECT ? '}' : ']';
    skip_ws(c);
    if (c->i >= c->n || c->s[c->i] != open) {
        fail_at(c, type == JV_OBJECT ? "expected an object" : "expected an array");
        return -1;
    }
    c->i++;
    skip_ws(c);
    if (c->i < c->n && c->s[c->i] == close) {
        c->i++;
        return 0;
    }
    return 1;
}

int jv_cursor_next(jv_cursor *c, jv_type type)
{
    char close = type == JV_OBJECT ? '}' : ']';
    skip_ws(c);
    if (c->i < c->n && c->s[c->i] == ',') {
        c->i++;
        return 1;
    }
    if (c->i < c->n && c->s[c->i] == close) {
        c->i++;
        return 0;
    }
    fail_at(c, type == JV_OBJECT ? "expected ',' or '}'" : "expected ',' or ']'");
    return -1;
}

glm_status jv_cursor_key(jv_cursor *c, tbuf *key)
{
    tbuf_clear(key);
    skip_ws(c);
    if (c->i >= c->n || c->s[c->i] != '"') {
        fail_at(c, "expected a string key");
        return GLM_ERR_FORMAT;
    }
    if (read_string_into(c, key) != 0)
        return c->err ? c->err->status : GLM_ERR_FORMAT;
    skip_ws(c);
    if (c->i >= c->n || c->s[c->i] != ':') {
        fail_at(c, "expected ':'");
        return GLM_ERR_FORMAT;
    }
    c->i++;
    return GLM_OK;
}

jv *jv_cursor_value(jv_cursor *c)
{
    return read_value(c);
}

/* Checks the value at r as read_value would, keeping nothing but what scratch holds. */
static int skip_value(jv_reader *r, tbuf *scratch)
{
    skip_ws(r);
    if (r->i >= r->n) {
        fail_at(r, "unexpected end of input");
        return -1;
    }
    char c = r->s[r->i];
    if (c == '"') {
        tbuf_clear(scratch);
        return read_string_into(r, scratch);
    }
    if (c != '{' && c != '[') { /* a scalar: small, parsed and dropped */
        jv *v = read_value(r);
        jv_free(v);
        return v ? 0 : -1;
    }
    if (++r->depth > JV_MAX_DEPTH) {
        fail_at(r, "nesting deeper than 512");
        return -1;
    }
    jv_type type = c == '{' ? JV_OBJECT : JV_ARRAY;
    int more = jv_cursor_enter(r, type);
    while (more == 1) {
        if (type == JV_OBJECT && jv_cursor_key(r, scratch) != GLM_OK)
            return -1;
        if (skip_value(r, scratch) != 0)
            return -1;
        more = jv_cursor_next(r, type);
    }
    r->depth--;
    return more;
}

glm_status jv_cursor_skip(jv_cursor *c, size_t *start)
{
    tbuf scratch = {0};
    skip_ws(c);
    *start = c->i;
    int rc = skip_value(c, &scratch);
    tbuf_free(&scratch);
    if (rc == 0)
        return GLM_OK;
    return c->err && c->err->status ? c->err->status : GLM_ERR_FORMAT;
}

glm_status jv_cursor_end(jv_cursor *c)
{
    skip_ws(c);
    if (c->i == c->n)
        return GLM_OK;
    fail_at(c, "trailing characters after the value");
    return GLM_ERR_FORMAT;
}

/* ---- writing ---- */

glm_status jv_dump_string(const char *s, size_t len, tbuf *out)
{
    if (tbuf_reserve(out, len + 2) != GLM_OK || tbuf_putc(out, '"') != GLM_OK)
        return GLM_ERR_NOMEM;
    size_t run = 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c != '"' && c != '\\')
            continue;
        if (tbuf_append(out, s + run, i - run) != GLM_OK)
            return GLM_ERR_NOMEM;
        run = i + 1;
        char esc[8];
        switch (c) {
        case '"': strcpy(esc, "\\\""); break;
        case '\\': strcpy(esc, "\\\\"); break;
        case '\n': strcpy(esc, "\\n"); break;
        case '\r': strcpy(esc, "\\r"); break;
        case '\t': strcpy(esc, "\\t"); break;
        case '\b': strcpy(esc, "\\b"); break;
        case '\f': strcpy(esc, "\\f"); break;
        default: snprintf(esc, sizeof esc, "\\u%04x", c); break;
        }
        if (tbuf_puts(out, esc) != GLM_OK)
            return GLM_ERR_NOMEM;
    }
    if (tbuf_append(out, s + run, len - run) != GLM_OK)
        return GLM_ERR_NOMEM;
    return tbuf_putc(out, '"');
}

glm_status jv_dump_float(double d, tbuf *out)
{
    if (isinf(d))
        return tbuf_puts(out, d > 0 ? "Infinity" : "-Infinity");
    if (isnan(d))
        return tbuf_puts(out, "NaN");
    char e[40];
    int prec;
    for (prec = 1; prec <= 17; prec++) { /* the shortest digits that read back exactly */
        snprintf(e, sizeof e, "%.*e", prec - 1, d);
        if (strtod(e, NULL) == d)
            break;
    }
    /* e is "[-]D[.DDD]e[+-]XX": split into sign, digits and decimal exponent */
    char digits[24];
    size_t nd = 0;
    const char *p = e;
    int neg = 0;
    if (*p == '-') {
        neg = 1;
        p++;
    }
    for (; *p && *p != 'e'; p++)
        if (*p != '.')
            digits[nd++] = *p;
    while (nd > 1 && digits[nd - 1] == '0')
        nd--;
    digits[nd] = '\0';
    int exp10 = atoi(p + 1);
    int decpt = exp10 + 1; /* digits are 0.DIGITS x 10^decpt */
    char buf[64];
    size_t k = 0;
    if (neg)
        buf[k++] = '-';
    if (decpt > -4 && decpt <= 16) {
        if (decpt <= 0) {
            buf[k++] = '0';
            buf[k++] = '.';
            for (int i = 0; i < -decpt; i++)
                buf[k++] = '0';
            memcpy(buf + k, digits, nd);
            k += nd;
        } else if ((size_t)decpt >= nd) {
            memcpy(buf + k, digits, nd);
            k += nd;
            for (size_t i = nd; i < (size_t)decpt; i++)
                buf[k++] = '0';
            buf[k++] = '.';
            buf[k++] = '0';
        } else {
            memcpy(buf + k, digits, (size_t)decpt);
            k += (size_t)decpt;
            buf[k++] = '.';
            memcpy(buf + k, digits + decpt, nd - (size_t)decpt);
            k += nd - (size_t)decpt;
        }
        buf[k] = '\0';
    } else {
        buf[k++] = digits[0];
        if (nd > 1) {
            buf[k++] = '.';
            memcpy(buf + k, digits + 1, nd - 1);
            k += nd - 1;
        }
        snprintf(buf + k, sizeof buf - k, "e%c%02d", exp10 < 0 ? '-' : '+', exp10 < 0 ? -exp10 : exp10);
    }
    return tbuf_puts(out, buf);
}

static glm_status dump(const jv *v, tbuf *out, const char *comma, const char *colon)
{
    switch (v->type) {
    case JV_NULL:
        return tbuf_puts(out, "null");
    case JV_FALSE:
        return tbuf_puts(out, "false");
    case JV_TRUE:
        return tbuf_puts(out, "true");
    case JV_INT:
        return tbuf_append(out, v->str, v->len);
    case JV_FLOAT:
        return jv_dump_float(v->num, out);
    case JV_STRING:
        return jv_dump_string(v->str, v->len, out);
    case JV_ARRAY:
    case JV_OBJECT:
        break;
    }
    int obj = v->type == JV_OBJECT;
    if (tbuf_putc(out, obj ? '{' : '[') != GLM_OK)
        return GLM_ERR_NOMEM;
    for (size_t i = 0; i < v->n; i++) {
        if (i && tbuf_puts(out, comma) != GLM_OK)
            return GLM_ERR_NOMEM;
        if (obj && (jv_dump_string(v->keys[i], v->key_lens[i], out) != GLM_OK ||
                    tbuf_puts(out, colon) != GLM_OK))
            return GLM_ERR_NOMEM;
        if (dump(v->items[i], out, comma, colon) != GLM_OK)
            return GLM_ERR_NOMEM;
    }
    return tbuf_putc(out, obj ? '}' : ']');
}

glm_status jv_dump_py(const jv *v, tbuf *out)
{
    return dump(v, out, ", ", ": ");
}

glm_status jv_dump_compact(const jv *v, tbuf *out)
{
    return dump(v, out, ",", ":");
}
