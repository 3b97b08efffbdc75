/* reply_parser.c: the reply stream state machine (see reply_parser.h for the rules it follows).
 * Unprocessed text waits in one buffer; only a tail that could still become a tag is ever held back. */
#include "engine/text/reply_parser.h"

#include <stdlib.h>
#include <string.h>

#include "engine/text/json.h"
#include "engine/text/tbuf.h"

enum { RP_THINK_HOLD_MAX = 64 * 1024, RP_NAME_MAX = 256 };

static const char THINK_END[] = "</think>";
static const char CALL_OPEN[] = "<tool_call>";
static const char CALL_CLOSE[] = "</tool_call>";
static const char KEY_OPEN[] = "<arg_key>";
static const char KEY_CLOSE[] = "</arg_key>";
static const char VAL_OPEN[] = "<arg_value>";
static const char VAL_CLOSE[] = "</arg_value>";

typedef enum rp_state {
    ST_REASON,
    ST_THINK_HELD,
    ST_CONTENT_NL,
    ST_CONTENT,
    ST_CALL_NAME,
    ST_CALL_ARGS,
    ST_CALL_SKIP /* a call while no tools are offered: its note was given, its text is dropped */
} rp_state;

typedef struct rp_tool {
    char *name;
    jv *params; /* the parameters schema, or NULL */
} rp_tool;

struct rp_parser {
    rp_state st;
    tbuf pend; /* text not yet given out */
    tbuf args; /* raw arguments of the open call */
    size_t args_at; /* args[0..args_at) are pairs already given out as JSON */
    jv *obj;        /* the open call's arguments so far */
    tbuf json;      /* the JSON text given out so far for the open call */
    tbuf name;
    rp_tool *tools;
    int n_tools;
    glm_event_fn fn;
    void *user;
    int n_calls, canceled, done;
    int answer_begun; /* a content or tool-call byte was given out */
    glm_error *err;
};

/* ---- events ---- */

static glm_status emit(rp_parser *p, glm_event_type type, const char *text, size_t len, const char *name,
                       const char *finish)
{
    if (type != GLM_EV_DONE && (p->canceled || (len == 0 && type != GLM_EV_TOOL_CALL_END)))
        return p->canceled ? GLM_ERR_CANCELED : GLM_OK;
    if (type == GLM_EV_CONTENT_DELTA || type == GLM_EV_TOOL_CALL_BEGIN || type == GLM_EV_TOOL_ARG_DELTA)
        p->answer_begun = 1;
    glm_event ev = {.type = type, .text = text, .len = len, .name = name, .finish = finish};
    if (p->fn(&ev, p->user) != 0 && type != GLM_EV_DONE) {
        p->canceled = 1;
        return glm_error_set(p->err, GLM_ERR_CANCELED, "the reply was canceled by its reader");
    }
    return GLM_OK;
}

static glm_status nomem(rp_parser *p)
{
    return glm_error_set(p->err, GLM_ERR_NOMEM, "reply parser: out of memory");
}

#define TRY(x)                         \
    do {                               \
        glm_status st_ = (x);          \
        if (st_ != GLM_OK)             \
            return st_;                \
    } while (0)

/* ---- scanning ---- */

static long find(const char *s, size_t n, const char *tag)
{
    size_t m = strlen(tag);
    if (n < m)
        return -1;
    const char *end = s + n - m;
    for (const char *q = s; q <= end; q++) {
        q = memchr(q, tag[0], (size_t)(end - q) + 1);
        if (!q)
            return -1;
        if (memcmp(q, tag, m) == 0)
            return q - s;
    }
    return -1;
}

/* Length of the longest suffix of s that is a proper prefix of one of the tags. */
static size_t partial(const char *s, size_t n, const char *const *tags)
{
    size_t best = 0;
    for (; *tags; tags++) {
        size_t m = strlen(*tags);
        for (size_t k = m - 1 < n ? m - 1 : n; k > best; k--)
            if (memcmp(s + n - k, *tags, k) == 0) {
                best = k;
                break;
            }
    }
    return best;
}

static long earliest(const char *s, size_t n, const char *a, const char *b, int *which)
{
    long i = find(s, n, a), j = b ? find(s, n, b) : -1;
    if (i >= 0 && (j < 0 || i <= j)) {
        *which = 0;
        return i;
    }
    *which = 1;
    return j;
}

static void consume(rp_parser *p, size_t n)
{
    if (n == 0)
        return;
    memmove(p->pend.p, p->pend.p + n, p->pend.len - n);
    p->pend.len -= n;
    p->pend.p[p->pend.len] = '\0';
}

static glm_status take_pairs(rp_parser *p, int final);

/* Gives pend[0..n) out as a delta of that type; argument text goes into the open call instead, which
 * gives out the JSON of each pair it completes. */
static glm_status give(rp_parser *p, glm_event_type type, size_t n)
{
    if (type == GLM_EV_TOOL_ARG_DELTA) {
        if (tbuf_append(&p->args, p->pend.p, n) != GLM_OK)
            return nomem(p);
        consume(p, n);
        return take_pairs(p, 0);
    }
    glm_status st = emit(p, type, p->pend.p, n, NULL, NULL);
    consume(p, n);
    return st;
}

/* ---- tool names ---- */

static int is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

static void trim(const char **s, size_t *n)
{
    while (*n && is_space(**s))
        (*s)++, (*n)--;
    while (*n && is_space((*s)[*n - 1]))
        (*n)--;
}

static const rp_tool *offered(const rp_parser *p, const char *s, size_t n)
{
    for (int i = 0; i < p->n_tools; i++)
        if (strlen(p->tools[i].name) == n && memcmp(p->tools[i].name, s, n) == 0)
            return &p->tools[i];
    return NULL;
}

static int plain_name(const char *s, size_t n)
{
    if (n < 1 || n > 64)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-'))
            return 0;
    }
    return 1;
}

static int name_ok(const rp_parser *p, const char *s, size_t n)
{
    trim(&s, &n);
    return offered(p, s, n) || plain_name(s, n);
}

/* 1 when the text after <tool_call> can no longer turn into "NAME<arg_key>" or "NAME</tool_call>". */
static int never_a_name(const rp_parser *p, const char *s, size_t n)
{
    if (n > RP_NAME_MAX)
        return 1;
    size_t i = 0;
    while (i < n && is_space(s[i]))
        i++;
    size_t start = i;
    while (i < n && !is_space(s[i]) && s[i] != '<')
        i++;
    size_t end = i;
    while (i < n && is_space(s[i]))
        i++;
    if (i < n) { /* the rest must be the beginning of a tag */
        size_t r = n - i;
        if (!(r < sizeof KEY_OPEN - 1 && memcmp(s + i, KEY_OPEN, r) == 0) &&
            !(r < sizeof CALL_CLOSE - 1 && memcmp(s + i, CALL_CLOSE, r) == 0))
            return 1;
    }
    if (end == start)
        return 0;
    for (int t = 0; t < p->n_tools; t++) /* a prefix of an offered name may still grow into it */
        if (strlen(p->tools[t].name) >= end - start && memcmp(p->tools[t].name, s + start, end - start) == 0)
            return 0;
    return !plain_name(s + start, end - start);
}

/* ---- arguments ---- */

enum { TY_STRING = 1, TY_NUMBER = 2, TY_INTEGER = 4, TY_BOOLEAN = 8, TY_NULL = 16, TY_OBJECT = 32, TY_ARRAY = 64 };

static int type_bit(const jv *t)
{
    static const char *const names[] = {"string", "number", "integer", "boolean", "null", "object", "array"};
    for (int i = 0; i < 7; i++)
        if (jv_is_str(t, names[i]))
            return 1 << i;
    return 0;
}

static int value_bit(const jv *v)
{
    switch (v->type) {
    case JV_STRING: return TY_STRING;
    case JV_INT: return TY_INTEGER | TY_NUMBER;
    case JV_FLOAT: return TY_NUMBER;
    case JV_TRUE:
    case JV_FALSE: return TY_BOOLEAN;
    case JV_NULL: return TY_NULL;
    case JV_OBJECT: return TY_OBJECT;
    default: return TY_ARRAY;
    }
}

static int schema_types(const jv *schema, int depth)
{
    if (!schema || schema->type != JV_OBJECT || depth > 8)
        return 0;
    int bits = 0;
    const jv *t = jv_get(schema, "type");
    if (t && t->type == JV_ARRAY)
        for (size_t i = 0; i < t->n; i++)
            bits |= type_bit(t->items[i]);
    else
        bits |= type_bit(t);
    static const char *const unions[] = {"anyOf", "oneOf"};
    for (int u = 0; u < 2; u++) {
        const jv *alts = jv_get(schema, unions[u]);
        for (size_t i = 0; alts && alts->type == JV_ARRAY && i < alts->n; i++)
            bits |= schema_types(alts->items[i], depth + 1);
    }
    const jv *c = jv_get(schema, "const");
    if (c)
        bits |= value_bit(c);
    const jv *e = jv_get(schema, "enum");
    for (size_t i = 0; e && e->type == JV_ARRAY && i < e->n; i++)
        bits |= value_bit(e->items[i]);
    return bits;
}

static jv *parse_quiet(const char *s, size_t n)
{
    glm_error ignored = {0};
    return jv_parse(s, n, &ignored);
}

/* A JSON value one closing bracket short, closed. */
static jv *parse_closed(const char *s, size_t n, int bits)
{
    static const char closers[] = "}]";
    for (int i = 0; i < 2; i++) {
        tbuf b = {0};
        if (tbuf_append(&b, s, n) != GLM_OK || tbuf_putc(&b, closers[i]) != GLM_OK) {
            tbuf_free(&b);
            return NULL;
        }
        jv *v = parse_quiet(b.p, b.len);
        tbuf_free(&b);
        if (v && (value_bit(v) & bits))
            return v;
        jv_free(v);
    }
    return NULL;
}

/* GLM's value text typed by the parameter's schema (TensorFold's coerce_glm_value, less Python literals). */
static jv *coerce(const char *raw, size_t rn, int bits)
{
    const char *s = raw;
    size_t n = rn;
    trim(&s, &n);
    int is_null = n == 4 && memcmp(s, "null", 4) == 0;
    if (bits & TY_STRING) {
        if (n >= 2 && s[0] == '"' && s[n - 1] == '"') {
            jv *v = parse_quiet(s, n);
            if (v && v->type == JV_STRING)
                return v;
            jv_free(v);
        }
        if (is_null && (bits & TY_NULL))
            return jv_new(JV_NULL);
        if ((bits & ~(TY_STRING | TY_NULL)) == 0)
            return jv_new_string(raw, rn);
        jv *v = parse_quiet(s, n);
        if (v && (value_bit(v) & bits & ~TY_STRING))
            return v;
        jv_free(v);
        return jv_new_string(raw, rn);
    }
    if (bits && is_null)
        return jv_new(JV_NULL);
    jv *v = parse_quiet(s, n);
    if (v && (!bits || (value_bit(v) & bits)))
        return v;
    if (bits & (TY_OBJECT | TY_ARRAY)) {
        jv *c = parse_closed(s, n, bits);
        if (c) {
            jv_free(v);
            return c;
        }
    }
    return v ? v : jv_new_string(raw, rn);
}

static const jv *param_schema(const rp_tool *tool, const char *key)
{
    return tool ? jv_get(jv_get(tool->params, "properties"), key) : NULL;
}

static long find_from(const char *s, size_t n, size_t at, const char *tag)
{
    long i = at <= n ? find(s + at, n - at, tag) : -1;
    return i < 0 ? -1 : i + (long)at;
}

/* Gives one more piece of the open call's arguments JSON out (and keeps it for TOOL_CALL_END). */
static glm_status give_json(rp_parser *p, const char *piece, size_t n)
{
    if (tbuf_append(&p->json, piece, n) != GLM_OK)
        return nomem(p);
    return emit(p, GLM_EV_TOOL_ARG_DELTA, piece, n, p->name.p, NULL);
}

/* Adds one pair to the call's object and gives it out as JSON text: "{" before the first pair, ","
 * before the others. A key seen before keeps its first value: what was given out cannot be taken back. */
static glm_status add_pair(rp_parser *p, const rp_tool *tool, const char *k, size_t kn, const char *v, size_t vn)
{
    trim(&k, &kn);
    if (!p->obj && !(p->obj = jv_new(JV_OBJECT)))
        return nomem(p);
    jv *key = jv_new_string(k, kn);
    if (!key)
        return nomem(p);
    if (jv_get(p->obj, key->str)) {
        jv_free(key);
        return GLM_OK;
    }
    jv *val = coerce(v, vn, schema_types(param_schema(tool, key->str), 0));
    tbuf piece = {0};
    int failed = !val || tbuf_puts(&piece, p->obj->n ? "," : "{") != GLM_OK ||
                 jv_dump_compact(key, &piece) != GLM_OK || tbuf_putc(&piece, ':') != GLM_OK ||
                 jv_dump_compact(val, &piece) != GLM_OK;
    if (failed || jv_object_set(p->obj, key->str, kn, val) != GLM_OK) {
        if (!failed)
            val = NULL; /* jv_object_set freed it */
        jv_free(val);
        jv_free(key);
        tbuf_free(&piece);
        return nomem(p);
    }
    jv_free(key);
    glm_status st = give_json(p, piece.p, piece.len);
    tbuf_free(&piece);
    return st;
}

/* Takes the pairs "<arg_key>K</arg_key><arg_value>V</arg_value>" of the call's raw arguments from
 * args_at on, each once its value is closed (by </arg_value> or the next <arg_key>); final: the call
 * ended, so a value left open runs to the end. A key whose <arg_key> is missing
 * ("...</arg_value>\nK</arg_key>") is taken as written up to </arg_key>. */
static glm_status take_pairs(rp_parser *p, int final)
{
    const rp_tool *tool = offered(p, p->name.p, p->name.len);
    const char *s = p->args.p ? p->args.p : "";
    size_t n = p->args.len;
    for (;;) {
        size_t at = p->args_at;
        while (at < n && is_space(s[at]))
            at++;
        if (at >= n)
            return GLM_OK;
        if (n - at >= sizeof KEY_OPEN - 1 && memcmp(s + at, KEY_OPEN, sizeof KEY_OPEN - 1) == 0)
            at += sizeof KEY_OPEN - 1;
        long kend = find_from(s, n, at, KEY_CLOSE);
        if (kend < 0)
            return GLM_OK;
        const char *k = s + at;
        size_t kn = (size_t)kend - at;
        at = (size_t)kend + sizeof KEY_CLOSE - 1;
        while (at < n && is_space(s[at]))
            at++;
        if (n - at >= sizeof VAL_OPEN - 1 && memcmp(s + at, VAL_OPEN, sizeof VAL_OPEN - 1) == 0)
            at += sizeof VAL_OPEN - 1;
        long vend = find_from(s, n, at, VAL_CLOSE);
        long next = find_from(s, n, at, KEY_OPEN);
        if (!final && vend < 0 && next < 0)
            return GLM_OK; /* the value may still grow */
        size_t stop = vend >= 0 && (next < 0 || vend < next) ? (size_t)vend : next >= 0 ? (size_t)next : n;
        TRY(add_pair(p, tool, k, kn, s + at, stop - at));
        p->args_at = stop == (size_t)vend && vend >= 0 ? stop + sizeof VAL_CLOSE - 1 : stop;
    }
}

static void reset_call(rp_parser *p)
{
    tbuf_clear(&p->args);
    tbuf_clear(&p->json);
    p->args_at = 0;
    jv_free(p->obj);
    p->obj = NULL;
}

/* The call ended: its last pairs, the closing "}" ("{}" when it had none), then TOOL_CALL_END. */
static glm_status end_call(rp_parser *p)
{
    TRY(take_pairs(p, 1));
    TRY(p->json.len ? give_json(p, "}", 1) : give_json(p, "{}", 2));
    p->n_calls++;
    glm_status st = emit(p, GLM_EV_TOOL_CALL_END, p->json.p, p->json.len, p->name.p, NULL);
    reset_call(p);
    return st;
}

/* The call's header "<tool_call>" + pend[0..n) as written; the name is its trimmed text. */
static glm_status begin_call(rp_parser *p, size_t n)
{
    const char *s = p->pend.p;
    size_t k = n;
    trim(&s, &k);
    tbuf_clear(&p->name);
    tbuf raw = {0};
    if (tbuf_append(&p->name, s, k) != GLM_OK || tbuf_puts(&raw, CALL_OPEN) != GLM_OK ||
        tbuf_append(&raw, p->pend.p, n) != GLM_OK) {
        tbuf_free(&raw);
        return nomem(p);
    }
    glm_status st = emit(p, GLM_EV_TOOL_CALL_BEGIN, raw.p, raw.len, p->name.p, NULL);
    tbuf_free(&raw);
    consume(p, n);
    reset_call(p);
    p->st = ST_CALL_ARGS;
    return st;
}

/* A call while no tools are offered, header "<tool_call>" + pend[0..n): shown as a one-line note in
 * its place, its text dropped up to </tool_call>. Raw markup would only confuse the reader, and the
 * note tells the user why nothing ran. */
static glm_status skip_call(rp_parser *p, size_t n)
{
    const char *s = p->pend.p;
    size_t k = n;
    trim(&s, &k);
    tbuf note = {0};
    if (tbuf_puts(&note, "[the model asked for tool ") != GLM_OK || tbuf_append(&note, s, k) != GLM_OK ||
        tbuf_puts(&note, ", but tools are off]") != GLM_OK) {
        tbuf_free(&note);
        return nomem(p);
    }
    glm_status st = emit(p, GLM_EV_CONTENT_DELTA, note.p, note.len, NULL, NULL);
    tbuf_free(&note);
    consume(p, n);
    p->st = ST_CALL_SKIP;
    return st;
}

static glm_status start_call(rp_parser *p, size_t n)
{
    return p->n_tools ? begin_call(p, n) : skip_call(p, n);
}

/* "<tool_call>" was text after all: give it out as content and read on from what followed it. */
static glm_status not_a_call(rp_parser *p)
{
    p->st = ST_CONTENT;
    return emit(p, GLM_EV_CONTENT_DELTA, CALL_OPEN, sizeof CALL_OPEN - 1, NULL, NULL);
}

/* ---- the state machine ---- */

/* Processes pend as far as it can; returns with pend holding only what must wait for more text. */
static glm_status step(rp_parser *p)
{
    static const char *const reason_tags[] = {THINK_END, CALL_OPEN, NULL};
    static const char *const think_tags[] = {THINK_END, NULL};
    static const char *const content_tags[] = {CALL_OPEN, THINK_END, NULL};
    static const char *const arg_tags[] = {CALL_CLOSE, CALL_OPEN, NULL};
    for (;;) {
        const char *s = p->pend.p ? p->pend.p : "";
        size_t n = p->pend.len;
        int which;
        long i;
        switch (p->st) {
        case ST_REASON:
            i = earliest(s, n, THINK_END, p->n_tools ? CALL_OPEN : NULL, &which);
            if (i >= 0) {
                TRY(give(p, GLM_EV_REASONING_DELTA, (size_t)i));
                if (which == 0)
                    consume(p, sizeof THINK_END - 1);
                p->st = which == 0 ? ST_CONTENT_NL : ST_THINK_HELD;
                continue;
            }
            return give(p, GLM_EV_REASONING_DELTA, n - partial(s, n, p->n_tools ? reason_tags : think_tags));
        case ST_THINK_HELD:
            i = find(s, n, THINK_END);
            if (i >= 0) { /* the call was part of the reasoning */
                TRY(give(p, GLM_EV_REASONING_DELTA, (size_t)i));
                consume(p, sizeof THINK_END - 1);
                p->st = ST_CONTENT_NL;
                continue;
            }
            if (n > RP_THINK_HOLD_MAX) {
                p->st = ST_REASON;
                TRY(give(p, GLM_EV_REASONING_DELTA, n - partial(s, n, think_tags)));
            }
            return GLM_OK;
        case ST_CONTENT_NL:
            while (p->pend.len && p->pend.p[0] == '\n')
                consume(p, 1);
            if (!p->pend.len)
                return GLM_OK;
            p->st = ST_CONTENT;
            continue;
        case ST_CONTENT:
            i = earliest(s, n, CALL_OPEN, THINK_END, &which);
            if (i >= 0 && which == 1) { /* a stray </think> is markup, never text */
                TRY(give(p, GLM_EV_CONTENT_DELTA, (size_t)i));
                consume(p, sizeof THINK_END - 1);
                if (!p->answer_begun)
                    p->st = ST_CONTENT_NL;
                continue;
            }
            if (i >= 0) {
                TRY(give(p, GLM_EV_CONTENT_DELTA, (size_t)i));
                consume(p, sizeof CALL_OPEN - 1);
                p->st = ST_CALL_NAME;
                continue;
            }
            return give(p, GLM_EV_CONTENT_DELTA, n - partial(s, n, content_tags));
        case ST_CALL_NAME:
            i = earliest(s, n, KEY_OPEN, CALL_CLOSE, &which);
            if (i >= 0 && name_ok(p, s, (size_t)i)) {
                TRY(start_call(p, (size_t)i));
                continue;
            }
            if (i >= 0 || never_a_name(p, s, n)) {
                TRY(not_a_call(p));
                continue;
            }
            return GLM_OK;
        case ST_CALL_ARGS:
            i = earliest(s, n, CALL_CLOSE, CALL_OPEN, &which);
            if (i >= 0) {
                TRY(give(p, GLM_EV_TOOL_ARG_DELTA, (size_t)i));
                if (which == 0)
                    consume(p, sizeof CALL_CLOSE - 1);
                TRY(end_call(p));
                p->st = ST_CONTENT;
                continue;
            }
            return give(p, GLM_EV_TOOL_ARG_DELTA, n - partial(s, n, arg_tags));
        case ST_CALL_SKIP:
            i = earliest(s, n, CALL_CLOSE, CALL_OPEN, &which);
            if (i >= 0) {
                consume(p, (size_t)i + (which == 0 ? sizeof CALL_CLOSE - 1 : 0));
                p->st = ST_CONTENT;
                continue;
            }
            consume(p, n - partial(s, n, arg_tags));
            return GLM_OK;
        }
    }
}

rp_parser *rp_new(const glm_tool *tools, int n_tools, int think, glm_event_fn on_event, void *user,
                  glm_error *err)
{
    rp_parser *p = calloc(1, sizeof *p);
    if (!p || (n_tools > 0 && !(p->tools = calloc((size_t)n_tools, sizeof *p->tools)))) {
        free(p);
        glm_error_set(err, GLM_ERR_NOMEM, "reply parser: out of memory");
        return NULL;
    }
    p->st = think ? ST_REASON : ST_CONTENT;
    p->fn = on_event;
    p->user = user;
    for (int i = 0; i < n_tools; i++) {
        const char *pj = tools[i].parameters_json;
        p->tools[i].name = strdup(tools[i].name ? tools[i].name : "");
        p->tools[i].params = pj ? jv_parse(pj, strlen(pj), err) : NULL;
        p->n_tools = i + 1;
        if (!p->tools[i].name || (pj && !p->tools[i].params)) {
            if (pj && !p->tools[i].params)
                glm_error_set(err, GLM_ERR_ARG, "tool %s: parameters are not valid JSON", tools[i].name);
            else
                glm_error_set(err, GLM_ERR_NOMEM, "reply parser: out of memory");
            rp_free(p);
            return NULL;
        }
    }
    return p;
}

glm_status rp_feed(rp_parser *p, const char *text, size_t len, glm_error *err)
{
    p->err = err;
    if (p->canceled)
        return glm_error_set(err, GLM_ERR_CANCELED, "the reply was canceled by its reader");
    if (p->done)
        return glm_error_set(err, GLM_ERR_ARG, "reply parser: text fed after the reply finished");
    if (tbuf_append(&p->pend, text, len) != GLM_OK)
        return nomem(p);
    return step(p);
}

static glm_status flush(rp_parser *p, rp_end why)
{
    for (;;) {
        TRY(step(p));
        size_t n = p->pend.len;
        switch (p->st) {
        case ST_REASON:
            return give(p, GLM_EV_REASONING_DELTA, n);
        case ST_THINK_HELD: {
            /* the reply ends on a call written inside the think block: it is the answer */
            long i = earliest(p->pend.p + (sizeof CALL_OPEN - 1), n - (sizeof CALL_OPEN - 1), KEY_OPEN,
                              CALL_CLOSE, &(int){0});
            size_t name_len = i >= 0 ? (size_t)i : n - (sizeof CALL_OPEN - 1);
            if (why == RP_END_TOKEN && name_ok(p, p->pend.p + sizeof CALL_OPEN - 1, name_len)) {
                p->st = ST_CONTENT;
                continue;
            }
            return give(p, GLM_EV_REASONING_DELTA, n);
        }
        case ST_CONTENT_NL:
            consume(p, n);
            return GLM_OK;
        case ST_CONTENT:
            return give(p, GLM_EV_CONTENT_DELTA, n);
        case ST_CALL_NAME:
            if (why == RP_END_TOKEN && name_ok(p, p->pend.p, n)) { /* a call with no arguments */
                TRY(start_call(p, n));
                if (p->st == ST_CALL_ARGS)
                    TRY(end_call(p));
                p->st = ST_CONTENT;
                continue;
            }
            TRY(not_a_call(p));
            continue;
        case ST_CALL_ARGS:
            TRY(give(p, GLM_EV_TOOL_ARG_DELTA, n));
            p->st = ST_CONTENT;
            if (why == RP_END_TOKEN) /* left open at an end token: closed */
                TRY(end_call(p));
            continue;
        case ST_CALL_SKIP:
            consume(p, n);
            p->st = ST_CONTENT;
            continue;
        }
    }
}

glm_status rp_finish(rp_parser *p, rp_end why, glm_error *err)
{
    p->err = err;
    if (p->done)
        return glm_error_set(err, GLM_ERR_ARG, "reply parser: the reply already finished");
    glm_status st = p->canceled ? GLM_ERR_CANCELED : flush(p, why);
    p->done = 1;
    const char *finish = why == RP_CANCELED || st == GLM_ERR_CANCELED ? "canceled"
                         : why == RP_LENGTH                         ? "length"
                         : p->n_calls                               ? "tool_calls"
                                                                    : "stop";
    glm_status done = emit(p, GLM_EV_DONE, NULL, 0, NULL, finish);
    return st != GLM_OK ? st : done;
}

void rp_free(rp_parser *p)
{
    if (!p)
        return;
    for (int i = 0; i < p->n_tools; i++) {
        free(p->tools[i].name);
        jv_free(p->tools[i].params);
    }
    free(p->tools);
    tbuf_free(&p->pend);
    tbuf_free(&p->args);
    tbuf_free(&p->json);
    jv_free(p->obj);
    tbuf_free(&p->name);
    free(p);
}
