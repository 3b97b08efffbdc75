/* template.c: GLM-5's chat template in C, written from its behaviour under HF's jinja settings.
 * Values follow jinja on Python objects: a missing key is undefined (NULL here), truthiness is Python's. */
#include "engine/text/template.h"

#include <stdio.h>
#include <string.h>

#include "base/utf8.h"

typedef struct tmpl_ctx {
    const jv *messages;
    const jv *tools;  /* NULL when absent or empty */
    int clear_thinking;
    tbuf *out;
    glm_error *err;
} tmpl_ctx;

#define TRY(x)                         \
    do {                               \
        glm_status st_ = (x);          \
        if (st_ != GLM_OK)             \
            return st_;                \
    } while (0)

static glm_status nomem(tmpl_ctx *c)
{
    return glm_error_set(c->err, GLM_ERR_NOMEM, "chat template: out of memory");
}

static glm_status put(tmpl_ctx *c, const char *s, size_t n)
{
    return tbuf_append(c->out, s, n) == GLM_OK ? GLM_OK : nomem(c);
}

static glm_status puts_(tmpl_ctx *c, const char *s)
{
    return put(c, s, strlen(s));
}

static int is_map(const jv *v)
{
    return v && v->type == JV_OBJECT;
}

static int is_list(const jv *v)
{
    return v && v->type == JV_ARRAY;
}

static int is_string(const jv *v)
{
    return v && v->type == JV_STRING;
}

static const jv *attr(const jv *v, const char *key)
{
    return is_map(v) ? jv_get(v, key) : NULL;
}

/* Python's str() of a scalar, as jinja prints it; containers are refused. */
static glm_status py_str(tmpl_ctx *c, const jv *v, tbuf *out, const char *what)
{
    if (!v)
        return GLM_OK; /* undefined prints nothing */
    glm_status st;
    switch (v->type) {
    case JV_STRING:
        st = tbuf_append(out, v->str, v->len);
        break;
    case JV_NULL:
        st = tbuf_puts(out, "None");
        break;
    case JV_TRUE:
        st = tbuf_puts(out, "True");
        break;
    case JV_FALSE:
        st = tbuf_puts(out, "False");
        break;
    case JV_INT:
        st = tbuf_append(out, v->str, v->len);
        break;
    case JV_FLOAT:
        st = jv_dump_float(v->num, out);
        break;
    default:
        return glm_error_set(c->err, GLM_ERR_ARG, "chat template: %s is a JSON %s; give text instead", what,
                             v->type == JV_ARRAY ? "array" : "object");
    }
    return st == GLM_OK ? GLM_OK : nomem(c);
}

/* Python ==, enough for ids and names: strings, numbers (bools count as 0/1), null; undefined == undefined. */
static int py_eq(const jv *a, const jv *b)
{
    if (!a || !b)
        return a == b;
    int an = a->type == JV_INT || a->type == JV_FLOAT || a->type == JV_TRUE || a->type == JV_FALSE;
    int bn = b->type == JV_INT || b->type == JV_FLOAT || b->type == JV_TRUE || b->type == JV_FALSE;
    if (an && bn) {
        double x = a->type == JV_TRUE ? 1 : a->type == JV_FALSE ? 0 : a->num;
        double y = b->type == JV_TRUE ? 1 : b->type == JV_FALSE ? 0 : b->num;
        return x == y;
    }
    if (a->type != b->type)
        return 0;
    if (a->type == JV_NULL)
        return 1;
    if (a->type == JV_STRING)
        return a->len == b->len && memcmp(a->str, b->str, a->len) == 0;
    return a == b;
}

/* ---- macros of the template ---- */

static glm_status tool_to_json(tmpl_ctx *c, const jv *tool, tbuf *out)
{
    if (!is_map(tool))
        return glm_error_set(c->err, GLM_ERR_ARG, "chat template: a tool is not a JSON object");
    int first = 1;
    if (tbuf_putc(out, '{') != GLM_OK)
        return nomem(c);
    for (size_t i = 0; i < tool->n; i++) {
        if (strcmp(tool->keys[i], "defer_loading") == 0 || strcmp(tool->keys[i], "strict") == 0)
            continue;
        if ((!first && tbuf_puts(out, ", ") != GLM_OK) || tbuf_putc(out, '"') != GLM_OK ||
            tbuf_append(out, tool->keys[i], tool->key_lens[i]) != GLM_OK || tbuf_puts(out, "\": ") != GLM_OK ||
            jv_dump_py(tool->items[i], out) != GLM_OK)
            return nomem(c);
        first = 0;
    }
    return tbuf_putc(out, '}') == GLM_OK ? GLM_OK : nomem(c);
}

static const jv *unwrap_function(const jv *tool)
{
    const jv *fn = attr(tool, "function");
    return fn ? fn : tool; /* 'function' in tool: the key's presence decides */
}

static glm_status tool_references(tmpl_ctx *c, const jv *refs, tbuf *out)
{
    if (!c->tools)
        return glm_error_set(c->err, GLM_ERR_ARG,
                             "chat template: a tool_reference result needs the request's tools");
    if (tbuf_puts(out, "<tool_response><tools>\n") != GLM_OK)
        return nomem(c);
    for (size_t i = 0; is_list(refs) && i < refs->n; i++) {
        for (size_t j = 0; j < c->tools->n; j++) {
            const jv *tool = unwrap_function(c->tools->items[j]);
            if (!py_eq(attr(tool, "name"), attr(refs->items[i], "name")))
                continue;
            TRY(tool_to_json(c, tool, out));
            if (tbuf_putc(out, '\n') != GLM_OK)
                return nomem(c);
        }
    }
    return tbuf_puts(out, "</tools></tool_response>") == GLM_OK ? GLM_OK : nomem(c);
}

static int type_is(const jv *item, const char *const *names)
{
    const jv *t = attr(item, "type");
    for (; *names; names++)
        if (jv_is_str(t, *names))
            return 1;
    return 0;
}

static glm_status visible_text(tmpl_ctx *c, const jv *content, tbuf *out)
{
    static const char *const image[] = {"image", "image_url", NULL};
    static const char *const video[] = {"video", "video_url", NULL};
    static const char *const audio[] = {"audio", "audio_url", "input_audio", NULL};
    if (!content || !is_list(content))
        return py_str(c, content, out, "a message's content");
    for (size_t i = 0; i < content->n; i++) {
        const jv *item = content->items[i];
        const char *marker = NULL;
        if (is_map(item) && jv_is_str(attr(item, "type"), "text"))
            TRY(py_str(c, attr(item, "text"), out, "a text part's text"));
        else if (is_string(item))
            TRY(py_str(c, item, out, "a content part"));
        else if (is_map(item) && type_is(item, image))
            marker = "<|begin_of_image|><|image|><|end_of_image|>";
        else if (is_map(item) && type_is(item, video))
            marker = "<|begin_of_video|><|video|><|end_of_video|>";
        else if (is_map(item) && type_is(item, audio))
            marker = "<|begin_of_audio|><|end_of_audio|>";
        if (marker && tbuf_puts(out, marker) != GLM_OK)
            return nomem(c);
    }
    return GLM_OK;
}

static glm_status tool_response(tmpl_ctx *c, const jv *content)
{
    TRY(puts_(c, "<tool_response>"));
    TRY(visible_text(c, content, c->out));
    return puts_(c, "</tool_response>");
}

/* content.0 of a non-empty list, with jinja's failure for objects (content.0 is undefined there). */
static glm_status first_item(tmpl_ctx *c, const jv *content, const jv **item)
{
    *item = NULL;
    if (!jv_truthy(content))
        return GLM_OK;
    if (is_map(content))
        return glm_error_set(c->err, GLM_ERR_ARG, "chat template: a tool message's content is a JSON object; "
                                                  "give text or a list of parts");
    if (is_list(content))
        *item = content->items[0];
    return GLM_OK;
}

static glm_status list_of_outputs(tmpl_ctx *c, const jv *m, int *yes)
{
    const jv *item;
    TRY(first_item(c, attr(m, "content"), &item));
    *yes = is_map(item) && jv_get(item, "output") != NULL;
    return GLM_OK;
}

static int refs_list(const jv *output)
{
    return is_list(output) && output->n > 0 && jv_is_str(attr(output->items[0], "type"), "tool_reference");
}

static glm_status output_entry(tmpl_ctx *c, const jv *entry)
{
    const jv *output = attr(entry, "output");
    if (refs_list(output))
        return tool_references(c, output, c->out);
    return tool_response(c, output);
}

static glm_status render_tool_response(tmpl_ctx *c, const jv *m)
{
    const jv *content = attr(m, "content");
    if (is_string(content))
        return tool_response(c, content);
    const jv *item;
    TRY(first_item(c, content, &item));
    if (item && jv_is_str(attr(item, "type"), "tool_reference"))
        return tool_references(c, content, c->out);
    int lo;
    TRY(list_of_outputs(c, m, &lo));
    if (lo) {
        for (size_t i = 0; i < content->n; i++)
            TRY(output_entry(c, content->items[i]));
        return GLM_OK;
    }
    return tool_response(c, content);
}

/* id_of: tool_call_id if truthy, else id if truthy, else "" (as text). */
static glm_status id_of(tmpl_ctx *c, const jv *obj, tbuf *out)
{
    tbuf_clear(out);
    const jv *a = attr(obj, "tool_call_id");
    if (jv_truthy(a))
        return py_str(c, a, out, "a tool_call_id");
    const jv *b = attr(obj, "id");
    if (jv_truthy(b))
        return py_str(c, b, out, "an id");
    return tbuf_puts(out, "") == GLM_OK ? GLM_OK : nomem(c);
}

static int buf_eq(const tbuf *a, const tbuf *b)
{
    return a->len == b->len && (a->len == 0 || memcmp(a->p, b->p, a->len) == 0);
}

typedef struct tool_block {
    size_t lo, hi; /* inclusive message range */
    const jv *calls;
    tbuf a, b;    /* scratch ids */
} tool_block;

static glm_status count_id(tmpl_ctx *c, tool_block *tb, const tbuf *target, int *dup)
{
    int n = 0;
    tbuf id = {0};
    glm_status st = GLM_OK;
    for (size_t k = tb->lo; k <= tb->hi && n <= 1 && st == GLM_OK; k++) {
        const jv *m = c->messages->items[k];
        int lo;
        st = list_of_outputs(c, m, &lo);
        if (st != GLM_OK)
            break;
        if (lo) {
            const jv *content = attr(m, "content");
            for (size_t e = 0; e < content->n && st == GLM_OK; e++) {
                st = id_of(c, content->items[e], &id);
                n += st == GLM_OK && buf_eq(&id, target);
            }
        } else {
            st = id_of(c, m, &id);
            n += st == GLM_OK && buf_eq(&id, target);
        }
    }
    tbuf_free(&id);
    *dup = n > 1;
    return st;
}

static glm_status call_id_exists(tmpl_ctx *c, const jv *calls, const tbuf *target, int *found)
{
    tbuf id = {0};
    glm_status st = GLM_OK;
    *found = 0;
    for (size_t i = 0; i < calls->n && !*found && st == GLM_OK; i++) {
        st = id_of(c, calls->items[i], &id);
        *found = st == GLM_OK && buf_eq(&id, target);
    }
    tbuf_free(&id);
    return st;
}

static glm_status result_sortable(tmpl_ctx *c, tool_block *tb, const jv *obj, int *ok)
{
    TRY(id_of(c, obj, &tb->a));
    if (tb->a.len == 0) {
        *ok = 0;
        return GLM_OK;
    }
    int dup, found;
    TRY(count_id(c, tb, &tb->a, &dup));
    TRY(call_id_exists(c, tb->calls, &tb->a, &found));
    if (dup || !found)
        *ok = 0;
    return GLM_OK;
}

/* Results re-ordered into the calls' order only when every result and call has a unique, matching id. */
static glm_status can_sort(tmpl_ctx *c, tool_block *tb, int *ok)
{
    *ok = is_list(tb->calls) && tb->calls->n > 0;
    if (!*ok)
        return GLM_OK;
    for (size_t k = tb->lo; k <= tb->hi; k++) {
        const jv *m = c->messages->items[k];
        int lo;
        TRY(list_of_outputs(c, m, &lo));
        if (lo) {
            const jv *content = attr(m, "content");
            for (size_t e = 0; e < content->n; e++)
                TRY(result_sortable(c, tb, content->items[e], ok));
        } else {
            TRY(result_sortable(c, tb, m, ok));
        }
    }
    for (size_t i = 0; i < tb->calls->n; i++) {
        TRY(id_of(c, tb->calls->items[i], &tb->a));
        if (tb->a.len == 0)
            *ok = 0;
        for (size_t j = i + 1; j < tb->calls->n; j++) {
            TRY(id_of(c, tb->calls->items[j], &tb->b));
            if (buf_eq(&tb->a, &tb->b))
                *ok = 0;
        }
    }
    return GLM_OK;
}

static glm_status render_sorted(tmpl_ctx *c, tool_block *tb)
{
    tbuf want = {0}, id = {0};
    glm_status st = GLM_OK;
    for (size_t i = 0; i < tb->calls->n && st == GLM_OK; i++) {
        st = id_of(c, tb->calls->items[i], &want);
        for (size_t k = tb->lo; k <= tb->hi && st == GLM_OK; k++) {
            const jv *m = c->messages->items[k];
            int lo;
            st = list_of_outputs(c, m, &lo);
            if (st != GLM_OK)
                break;
            if (lo) {
                const jv *content = attr(m, "content");
                for (size_t e = 0; e < content->n && st == GLM_OK; e++) {
                    st = id_of(c, content->items[e], &id);
                    if (st == GLM_OK && buf_eq(&id, &want))
                        st = output_entry(c, content->items[e]);
                }
            } else {
                st = id_of(c, m, &id);
                if (st == GLM_OK && buf_eq(&id, &want))
                    st = render_tool_response(c, m);
            }
        }
    }
    tbuf_free(&want);
    tbuf_free(&id);
    return st;
}

static int role_is(const jv *m, const char *role)
{
    return jv_is_str(attr(m, "role"), role);
}

static glm_status render_tool_block(tmpl_ctx *c, size_t start)
{
    TRY(puts_(c, "<|observation|>"));
    tool_block tb = {start, start, NULL, {0}, {0}};
    while (tb.hi + 1 < c->messages->n && role_is(c->messages->items[tb.hi + 1], "tool"))
        tb.hi++;
    if (start > 0) {
        const jv *prev = c->messages->items[start - 1];
        if (role_is(prev, "assistant") && jv_truthy(attr(prev, "tool_calls")))
            tb.calls = attr(prev, "tool_calls");
    }
    int ok = 0;
    glm_status st = can_sort(c, &tb, &ok);
    if (st == GLM_OK && ok)
        st = render_sorted(c, &tb);
    for (size_t k = tb.lo; st == GLM_OK && !ok && k <= tb.hi; k++)
        st = render_tool_response(c, c->messages->items[k]);
    tbuf_free(&tb.a);
    tbuf_free(&tb.b);
    return st;
}

/* ---- assistant turns ---- */

static int py_space(uint32_t cp)
{
    return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
           (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F ||
           cp == 0x3000;
}

/* Python's str.strip() on valid UTF-8: *s and *n narrowed in place. */
static void py_strip(const char **s, size_t *n)
{
    const unsigned char *u = (const unsigned char *)*s;
    size_t a = 0, b = *n;
    while (a < b) {
        size_t bad;
        int k = utf8_seq(u + a, b - a, &bad);
        if (k <= 0 || !py_space(utf8_decode(u + a, k)))
            break;
        a += (size_t)k;
    }
    while (b > a) {
        size_t st = b - 1;
        while (st > a && (u[st] & 0xC0) == 0x80)
            st--;
        size_t bad;
        int k = utf8_seq(u + st, b - st, &bad);
        if (k <= 0 || (size_t)k != b - st || !py_space(utf8_decode(u + st, k)))
            break;
        b = st;
    }
    *s += a;
    *n = b - a;
}

static const char *find(const char *s, size_t n, const char *pat)
{
    size_t m = strlen(pat);
    for (size_t i = 0; i + m <= n; i++)
        if (memcmp(s + i, pat, m) == 0)
            return s + i;
    return NULL;
}

static const char *find_last(const char *s, size_t n, const char *pat)
{
    size_t m = strlen(pat);
    for (size_t i = n >= m ? n - m + 1 : 0; i-- > 0;)
        if (memcmp(s + i, pat, m) == 0)
            return s + i;
    return NULL;
}

static glm_status render_call(tmpl_ctx *c, const jv *tc)
{
    const jv *fn = attr(tc, "function");
    if (jv_truthy(fn))
        tc = fn;
    const jv *name = attr(tc, "name");
    if (!is_string(name))
        return glm_error_set(c->err, GLM_ERR_ARG, "chat template: a tool call has no name (a string)");
    const jv *args = attr(tc, "arguments");
    if (!is_map(args))
        return glm_error_set(c->err, GLM_ERR_ARG, "chat template: tool call %s: arguments must be a JSON object",
                             name->str);
    TRY(puts_(c, "<tool_call>"));
    TRY(put(c, name->str, name->len));
    for (size_t i = 0; i < args->n; i++) {
        TRY(puts_(c, "<arg_key>"));
        TRY(put(c, args->keys[i], args->key_lens[i]));
        TRY(puts_(c, "</arg_key><arg_value>"));
        const jv *v = args->items[i];
        if (is_string(v))
            TRY(put(c, v->str, v->len));
        else if (jv_dump_py(v, c->out) != GLM_OK)
            return nomem(c);
        TRY(puts_(c, "</arg_value>"));
    }
    return puts_(c, "</tool_call>");
}

static glm_status render_assistant(tmpl_ctx *c, const jv *m, int keep_reasoning)
{
    TRY(puts_(c, "<|assistant|>"));
    tbuf text = {0};
    glm_status st = visible_text(c, attr(m, "content"), &text);
    if (st != GLM_OK) {
        tbuf_free(&text);
        return st;
    }
    const char *content = text.p ? text.p : "";
    size_t clen = text.len;
    const char *rs = NULL;
    size_t rlen = 0;
    const jv *rc = attr(m, "reasoning_content");
    if (is_string(rc)) {
        rs = rc->str;
        rlen = rc->len;
    } else if (find(content, clen, "</think>")) {
        const char *end = find(content, clen, "</think>");
        const char *open = find_last(content, (size_t)(end - content), "<think>");
        rs = open ? open + 7 : content;
        rlen = (size_t)(end - rs);
        const char *last = find_last(content, clen, "</think>") + 8;
        clen -= (size_t)(last - content);
        content = last;
    }
    if (keep_reasoning && rs) {
        st = puts_(c, "<think>");
        if (st == GLM_OK)
            st = put(c, rs, rlen);
        if (st == GLM_OK)
            st = puts_(c, "</think>");
    } else {
        st = puts_(c, "<think></think>");
    }
    py_strip(&content, &clen);
    if (st == GLM_OK && clen)
        st = put(c, content, clen);
    tbuf_free(&text);
    const jv *calls = attr(m, "tool_calls");
    if (st != GLM_OK || !jv_truthy(calls))
        return st;
    if (!is_list(calls))
        return glm_error_set(c->err, GLM_ERR_ARG, "chat template: tool_calls must be a JSON array");
    for (size_t i = 0; i < calls->n; i++)
        TRY(render_call(c, calls->items[i]));
    return GLM_OK;
}

/* ---- the whole prompt ---- */

static glm_status render_tools(tmpl_ctx *c)
{
    TRY(puts_(c, "<|system|>\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
                 "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"));
    for (size_t i = 0; i < c->tools->n; i++) {
        const jv *tool = unwrap_function(c->tools->items[i]);
        if (jv_truthy(attr(tool, "defer_loading")))
            continue;
        TRY(tool_to_json(c, tool, c->out));
        TRY(puts_(c, "\n"));
    }
    return puts_(c, "</tools>\n\nFor each function call, output the function name and arguments within the "
                    "following XML format:\n<tool_call>{function-name}<arg_key>{arg-key-1}</arg_key><arg_value>"
                    "{arg-value-1}</arg_value><arg_key>{arg-key-2}</arg_key><arg_value>{arg-value-2}</arg_value>..."
                    "</tool_call>");
}

static glm_status render_messages(tmpl_ctx *c, const char *effort)
{
    TRY(puts_(c, "[gMASK]<sop><|system|>Reasoning Effort: "));
    TRY(puts_(c, effort && strcmp(effort, "low") == 0 ? "Low" : effort && strcmp(effort, "high") == 0 ? "High"
                                                                                                   : "Max"));
    if (c->tools)
        TRY(render_tools(c));
    size_t n = c->messages->n;
    long last_user = -1;
    for (size_t i = 0; i < n; i++)
        if (role_is(c->messages->items[i], "user"))
            last_user = (long)i;
    for (size_t i = 0; i < n; i++) {
        const jv *m = c->messages->items[i];
        if (role_is(m, "user")) {
            TRY(puts_(c, "<|user|>"));
            TRY(visible_text(c, attr(m, "content"), c->out));
        } else if (role_is(m, "assistant")) {
            TRY(render_assistant(c, m, !c->clear_thinking || (long)i > last_user));
        } else if (role_is(m, "tool")) {
            if (i == 0 || !role_is(c->messages->items[i - 1], "tool"))
                TRY(render_tool_block(c, i));
        } else if (role_is(m, "system")) {
            TRY(puts_(c, "<|system|>"));
            TRY(visible_text(c, attr(m, "content"), c->out));
        }
    }
    return puts_(c, "<|assistant|><think>");
}

/* ---- request normalisation ---- */

static glm_status normalise_call(jv *tc, glm_error *err)
{
    jv *fn = (jv *)jv_get(tc, "function");
    if (!jv_truthy(fn))
        fn = tc;
    if (!is_map(fn))
        return glm_error_set(err, GLM_ERR_ARG, "chat template: a tool call is not a JSON object");
    const jv *a = jv_get(fn, "arguments");
    jv *parsed = NULL;
    if (!a || a->type == JV_NULL || (a->type == JV_STRING && a->len == 0)) {
        if (!a) /* absent arguments stay absent: the template refuses them */
            return GLM_OK;
        parsed = jv_new(JV_OBJECT);
    } else if (a->type == JV_STRING) {
        glm_error inner = {0};
        parsed = jv_parse(a->str, a->len, &inner);
        if (!parsed)
            return glm_error_set(err, GLM_ERR_ARG, "chat template: tool call arguments are not JSON (%s)",
                                 inner.message);
    } else {
        return is_map(a) ? GLM_OK
                         : glm_error_set(err, GLM_ERR_ARG, "chat template: tool call arguments must be a JSON object");
    }
    if (!parsed)
        return glm_error_set(err, GLM_ERR_NOMEM, "chat template: out of memory");
    if (!is_map(parsed)) {
        jv_free(parsed);
        return glm_error_set(err, GLM_ERR_ARG, "chat template: tool call arguments must be a JSON object");
    }
    return jv_object_set(fn, "arguments", 9, parsed) == GLM_OK
               ? GLM_OK
               : glm_error_set(err, GLM_ERR_NOMEM, "chat template: out of memory");
}

static glm_status normalise_message(jv *m, glm_error *err)
{
    if (!is_map(m))
        return glm_error_set(err, GLM_ERR_ARG, "chat template: every message must be a JSON object");
    const jv *content = jv_get(m, "content");
    if (content && content->type == JV_NULL) {
        jv *empty = jv_new_string("", 0);
        if (!empty || jv_object_set(m, "content", 7, empty) != GLM_OK)
            return glm_error_set(err, GLM_ERR_NOMEM, "chat template: out of memory");
    }
    if (!role_is(m, "assistant"))
        return GLM_OK;
    const jv *r = jv_get(m, "reasoning");
    if (!jv_get(m, "reasoning_content") && is_string(r)) {
        jv *copy = jv_clone(r);
        if (!copy || jv_object_set(m, "reasoning_content", 17, copy) != GLM_OK)
            return glm_error_set(err, GLM_ERR_NOMEM, "chat template: out of memory");
    }
    const jv *calls = jv_get(m, "tool_calls");
    for (size_t i = 0; is_list(calls) && i < calls->n; i++)
        TRY(normalise_call(calls->items[i], err));
    return GLM_OK;
}

/* reasoning_effort as the template takes it (low, high, else its Max): the OpenAI values mapped
 * (none is thinking off, decided by the caller); any other value is refused by name rather than
 * rendered as Max without a word. NULL *value: not given. */
static glm_status effort_value(const jv *e, const char **value, glm_error *err)
{
    static const char *const map[][2] = {{"minimal", "low"}, {"low", "low"}, {"medium", "high"},
                                         {"high", "high"}, {"xhigh", "xhigh"}, {"max", "max"},
                                         {"none", NULL}};
    *value = NULL;
    if (!e || e->type == JV_NULL)
        return GLM_OK;
    for (size_t i = 0; is_string(e) && i < sizeof map / sizeof map[0]; i++)
        if (jv_is_str(e, map[i][0])) {
            *value = map[i][1];
            return GLM_OK;
        }
    tbuf shown = {0};
    if (jv_dump_py(e, &shown) != GLM_OK || tbuf_putc(&shown, 0) != GLM_OK) {
        tbuf_free(&shown);
        return glm_error_set(err, GLM_ERR_NOMEM, "chat template: out of memory");
    }
    glm_error_set(err, GLM_ERR_ARG, "chat template: reasoning_effort %.200s is not one the template "
                  "knows; give none, minimal, low, medium, high, xhigh or max", shown.p);
    tbuf_free(&shown);
    return GLM_ERR_ARG;
}

/* clear_thinking: the request's own (true or false), else chat_template_kwargs' (truthy, as the
 * template reads it); off when neither gives it. */
static glm_status clear_thinking_of(const jv *request, int *on, glm_error *err)
{
    const jv *top = jv_get(request, "clear_thinking");
    *on = 0;
    if (top && top->type != JV_NULL) {
        if (top->type != JV_TRUE && top->type != JV_FALSE)
            return glm_error_set(err, GLM_ERR_ARG, "chat template: \"clear_thinking\" must be true or "
                                 "false");
        *on = top->type == JV_TRUE;
    }
    const jv *ctk = jv_get(request, "chat_template_kwargs");
    const jv *kw = is_map(ctk) ? jv_get(ctk, "clear_thinking") : NULL;
    if (kw)
        *on = jv_truthy(kw);
    return GLM_OK;
}

glm_status tmpl_render_json(const jv *request, tbuf *out, glm_error *err)
{
    if (!is_map(request))
        return glm_error_set(err, GLM_ERR_ARG, "chat template: the request must be a JSON object");
    const jv *msgs = jv_get(request, "messages");
    if (!is_list(msgs))
        return glm_error_set(err, GLM_ERR_ARG, "chat template: the request needs \"messages\", a JSON array");
    const jv *tools = jv_get(request, "tools");
    if (tools && tools->type != JV_NULL && !is_list(tools))
        return glm_error_set(err, GLM_ERR_ARG, "chat template: \"tools\" must be a JSON array");
    jv *copy = jv_clone(msgs);
    if (!copy)
        return glm_error_set(err, GLM_ERR_NOMEM, "chat template: out of memory");
    glm_status st = GLM_OK;
    for (size_t i = 0; i < copy->n && st == GLM_OK; i++)
        st = normalise_message(copy->items[i], err);
    const jv *effort = jv_get(request, "reasoning_effort");
    int think = !jv_is_str(effort, "none");
    const jv *sources[2] = {request, jv_get(request, "chat_template_kwargs")};
    for (int i = 0; i < 2; i++) {
        const jv *et = is_map(sources[i]) ? jv_get(sources[i], "enable_thinking") : NULL;
        if (et && (et->type == JV_TRUE || et->type == JV_FALSE))
            think = et->type == JV_TRUE;
    }
    const char *level = NULL;
    int clear = 0;
    if (st == GLM_OK)
        st = effort_value(effort, &level, err);
    if (st == GLM_OK)
        st = clear_thinking_of(request, &clear, err);
    tmpl_ctx c = {copy, is_list(tools) && tools->n ? tools : NULL, clear, out, err};
    size_t start = out->len;
    if (st == GLM_OK)
        st = render_messages(&c, think ? level : NULL);
    jv_free(copy);
    if (st != GLM_OK || think)
        return st;
    /* thinking off: drop the effort line, close the think block the prompt opened */
    static const char line[] = "<|system|>Reasoning Effort: Max";
    const char *at = find(out->p + start, out->len - start, line);
    if (at) {
        size_t off = (size_t)(at - out->p), k = sizeof line - 1;
        memmove(out->p + off, out->p + off + k, out->len - off - k + 1);
        out->len -= k;
    }
    return tbuf_puts(out, "</think>") == GLM_OK ? GLM_OK : glm_error_set(err, GLM_ERR_NOMEM, "out of memory");
}

/* ---- the engine's request ---- */

static jv *str_or_empty(const char *s)
{
    return jv_new_string(s ? s : "", s ? strlen(s) : 0);
}

static glm_status set_str(jv *obj, const char *key, const char *val)
{
    jv *v = str_or_empty(val);
    return v ? jv_object_set(obj, key, strlen(key), v) : GLM_ERR_NOMEM;
}

static glm_status set_json(jv *obj, const char *key, const char *json, const char *what, glm_error *err)
{
    const char *text = json && *json ? json : "{}";
    glm_error inner = {0};
    jv *v = jv_parse(text, strlen(text), &inner);
    if (!v)
        return glm_error_set(err, GLM_ERR_ARG, "%s is not valid JSON (%s)", what, inner.message);
    return jv_object_set(obj, key, strlen(key), v);
}

static glm_status message_from_glm(const glm_message *gm, jv *m, glm_error *err)
{
    static const char *const roles[] = {"system", "user", "assistant", "tool"};
    if ((int)gm->role < 0 || gm->role > GLM_ROLE_TOOL)
        return glm_error_set(err, GLM_ERR_ARG, "a message has an unknown role %d", (int)gm->role);
    TRY(set_str(m, "role", roles[gm->role]));
    TRY(set_str(m, "content", gm->content));
    if (gm->role == GLM_ROLE_ASSISTANT && gm->reasoning)
        TRY(set_str(m, "reasoning_content", gm->reasoning));
    if (gm->role == GLM_ROLE_TOOL && gm->tool_call_id)
        TRY(set_str(m, "tool_call_id", gm->tool_call_id));
    if (gm->role != GLM_ROLE_ASSISTANT || gm->n_tool_calls <= 0)
        return GLM_OK;
    jv *calls = jv_new(JV_ARRAY);
    if (!calls)
        return GLM_ERR_NOMEM;
    TRY(jv_object_set(m, "tool_calls", 10, calls));
    for (int i = 0; i < gm->n_tool_calls; i++) {
        const glm_tool_call *gc = &gm->tool_calls[i];
        jv *tc = jv_new(JV_OBJECT), *fn = jv_new(JV_OBJECT);
        if (!tc || !fn || jv_array_push(calls, tc) != GLM_OK) {
            jv_free(fn);
            return GLM_ERR_NOMEM;
        }
        if (gc->id)
            TRY(set_str(tc, "id", gc->id));
        TRY(jv_object_set(tc, "function", 8, fn));
        TRY(set_str(fn, "name", gc->name));
        TRY(set_json(fn, "arguments", gc->arguments_json, "a tool call's arguments", err));
    }
    return GLM_OK;
}

static glm_status request_from_glm(const glm_request *r, jv *req, glm_error *err)
{
    static const char *const efforts[] = {"max", "high", "low"};
    jv *msgs = jv_new(JV_ARRAY);
    if (!msgs)
        return GLM_ERR_NOMEM;
    TRY(jv_object_set(req, "messages", 8, msgs));
    for (int i = 0; i < r->n_messages; i++) {
        jv *m = jv_new(JV_OBJECT);
        if (!m || jv_array_push(msgs, m) != GLM_OK)
            return GLM_ERR_NOMEM;
        TRY(message_from_glm(&r->messages[i], m, err));
    }
    if (r->n_tools > 0) {
        jv *tools = jv_new(JV_ARRAY);
        if (!tools)
            return GLM_ERR_NOMEM;
        TRY(jv_object_set(req, "tools", 5, tools));
        for (int i = 0; i < r->n_tools; i++) {
            jv *t = jv_new(JV_OBJECT), *fn = jv_new(JV_OBJECT);
            if (!t || !fn || jv_array_push(tools, t) != GLM_OK) {
                jv_free(fn);
                return GLM_ERR_NOMEM;
            }
            TRY(set_str(t, "type", "function"));
            TRY(jv_object_set(t, "function", 8, fn));
            TRY(set_str(fn, "name", r->tools[i].name));
            if (r->tools[i].description)
                TRY(set_str(fn, "description", r->tools[i].description));
            TRY(set_json(fn, "parameters", r->tools[i].parameters_json, "a tool's parameters", err));
        }
    }
    if ((int)r->effort < 0 || r->effort > GLM_EFFORT_LOW)
        return glm_error_set(err, GLM_ERR_ARG, "the request has an unknown effort %d", (int)r->effort);
    TRY(set_str(req, "reasoning_effort", efforts[r->effort]));
    jv *think = jv_new(r->think ? JV_TRUE : JV_FALSE);
    if (!think || jv_object_set(req, "enable_thinking", 15, think) != GLM_OK)
        return GLM_ERR_NOMEM;
    jv *clear = jv_new(r->clear_thinking ? JV_TRUE : JV_FALSE);
    return clear ? jv_object_set(req, "clear_thinking", 14, clear) : GLM_ERR_NOMEM;
}

jv *tmpl_request_from_glm(const glm_request *r, glm_error *err)
{
    jv *req = jv_new(JV_OBJECT);
    if (!req) {
        glm_error_set(err, GLM_ERR_NOMEM, "chat template: out of memory");
        return NULL;
    }
    glm_error local = {0};
    glm_status st = request_from_glm(r, req, err ? err : &local);
    if (st != GLM_OK) {
        if (st == GLM_ERR_NOMEM)
            glm_error_set(err, GLM_ERR_NOMEM, "chat template: out of memory");
        jv_free(req);
        return NULL;
    }
    return req;
}

glm_status tmpl_render(const glm_request *r, tbuf *out, glm_error *err)
{
    jv *req = tmpl_request_from_glm(r, err);
    if (!req)
        return err ? err->status : GLM_ERR_ARG;
    glm_status st = tmpl_render_json(req, out, err);
    jv_free(req);
    return st;
}
