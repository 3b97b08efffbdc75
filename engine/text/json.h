/* json.h: a small JSON reader and writer for glmchat's text layer, faithful to Python's json module
 * where the chat template needs it: key order kept, ints exact, floats printed as Python's repr.
 *
 * API:
 *   jv *jv_parse(text, len, err)   RFC 8259 plus Python's NaN/Infinity (UTF-8 only, no lone surrogates);
 *                                  NULL + err on failure
 *   jv_get(obj, key)                member of an object or NULL; jv_free frees a tree
 *   jv_dump_py(v, out)              json.dumps(v, ensure_ascii=False) with ", " and ": " separators
 *   jv_dump_compact(v, out)         the same with "," and ":" (for machine-facing output)
 *   jv_new_* / jv_array_push / jv_object_set   build values (the parser owns what it returns) */
#ifndef GLMCHAT_TEXT_JSON_H
#define GLMCHAT_TEXT_JSON_H

#include <stddef.h>

#include "engine/text/tbuf.h"
#include "glm.h"

typedef enum jv_type { JV_NULL, JV_FALSE, JV_TRUE, JV_INT, JV_FLOAT, JV_STRING, JV_ARRAY, JV_OBJECT } jv_type;

typedef struct jv jv;
struct jv {
    jv_type type;
    char *str;      /* JV_STRING: the bytes (NUL-terminated, may hold NULs); JV_INT: canonical digits */
    size_t len;
    double num;     /* JV_FLOAT (and JV_INT, approximately) */
    jv **items;     /* JV_ARRAY, JV_OBJECT values */
    char **keys;    /* JV_OBJECT keys (NUL-terminated) */
    size_t *key_lens;
    size_t n, cap;
};

jv *jv_parse(const char *text, size_t len, glm_error *err);
void jv_free(jv *v);

const jv *jv_get(const jv *obj, const char *key);
/* 1 when v is a string equal to s. */
int jv_is_str(const jv *v, const char *s);
/* Python truthiness: null, false, 0, 0.0, "", [] and {} are false. */
int jv_truthy(const jv *v);

glm_status jv_dump_py(const jv *v, tbuf *out);
glm_status jv_dump_compact(const jv *v, tbuf *out);
/* Appends s as a JSON string literal, Python style (non-ASCII kept, controls as \u00XX). */
glm_status jv_dump_string(const char *s, size_t len, tbuf *out);
/* Python repr of a double ("1.0", "1e-05", "1e+16", "Infinity"). */
glm_status jv_dump_float(double d, tbuf *out);

/* Walking a large document without building it: a cursor steps through an object's members or
 * an array's elements and parses only what it is asked for (tokenizer.json's 150k-entry
 * vocabulary and 300k merges would otherwise cost many times the file in small allocations).
 * Errors are jv_parse's, with the byte offset, in err. */
typedef struct jv_cursor {
    const char *s;
    size_t n, i; /* the text, its length, where the cursor is */
    int depth;
    glm_error *err;
} jv_cursor;

void jv_cursor_init(jv_cursor *c, const char *text, size_t len, glm_error *err);
/* Steps into the object or array (type) at the cursor: 1 at its first member, 0 when it is
 * empty (then stepped over), -1 when the value is not one. */
int jv_cursor_enter(jv_cursor *c, jv_type type);
/* After a member: 1 at the next one, 0 when the container closed (stepped over), -1 on error. */
int jv_cursor_next(jv_cursor *c, jv_type type);
/* Reads a member's key into key (cleared first) and the ':' after it. */
glm_status jv_cursor_key(jv_cursor *c, tbuf *key);
/* Parses the value at the cursor into a tree (jv_free it); NULL + err on failure. */
jv *jv_cursor_value(jv_cursor *c);
/* Steps over the value at the cursor, checked as jv_parse checks it, keeping nothing;
 * *start gets the offset where it begins (for a second cursor to read it later). */
glm_status jv_cursor_skip(jv_cursor *c, size_t *start);
/* GLM_OK when only whitespace is left. */
glm_status jv_cursor_end(jv_cursor *c);

jv *jv_new(jv_type t);
jv *jv_new_string(const char *s, size_t len);
jv *jv_new_number_text(const char *s, size_t len); /* a JSON number's text; NULL if malformed */
jv *jv_clone(const jv *v);
glm_status jv_array_push(jv *arr, jv *item);               /* takes item */
glm_status jv_object_set(jv *obj, const char *key, size_t klen, jv *val); /* takes val; replaces */

#endif
