/* export_json.c: the lossless JSON transcript (storage/FORMATS.md): every branch, every part,
 * bytes that are not UTF-8 in base64 fields; message ids renumbered 1..N so exports compare. */
#include <stdlib.h>
#include <string.h>

#include "storage/export_internal.h"

/* An object being written: fields go one a line at indent, commas between them. */
typedef struct json_obj {
    FILE *out;
    int indent;
    int fields;
} json_obj;

static void put_indent(FILE *out, int n)
{
    for (int i = 0; i < n; i++)
        fputc(' ', out);
}

static void key(json_obj *o, const char *name)
{
    fputs(o->fields++ ? ",\n" : "\n", o->out);
    put_indent(o->out, o->indent);
    fprintf(o->out, "\"%s\": ", name);
}

static void close_obj(json_obj *o)
{
    fputc('\n', o->out);
    put_indent(o->out, o->indent - 2);
    fputc('}', o->out);
}

/* A JSON string of valid UTF-8: quotes, backslashes and controls escaped, the rest as is. */
static void put_string(FILE *out, const char *s, size_t len)
{
    static const char hex[] = "0123456789abcdef";
    fputc('"', out);
    size_t run = 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c != '"' && c != '\\')
            continue;
        fwrite(s + run, 1, i - run, out);
        run = i + 1;
        switch (c) {
        case '"': fputs("\\\"", out); break;
        case '\\': fputs("\\\\", out); break;
        case '\n': fputs("\\n", out); break;
        case '\r': fputs("\\r", out); break;
        case '\t': fputs("\\t", out); break;
        case '\b': fputs("\\b", out); break;
        case '\f': fputs("\\f", out); break;
        default:
            fputs("\\u00", out);
            fputc(hex[c >> 4], out);
            fputc(hex[c & 15], out);
        }
    }
    fwrite(s + run, 1, len - run, out);
    fputc('"', out);
}

/* "name": "text", or "name_b64": "..." when the bytes are not UTF-8 (or hold a NUL),
 * or "name": null. -1 when out of memory. */
static int bytes_field(json_obj *o, const char *name, const char *data, size_t len)
{
    if (!data) {
        key(o, name);
        fputs("null", o->out);
        return 0;
    }
    if (bytes_valid_utf8(data, len)) {
        key(o, name);
        put_string(o->out, data, len);
        return 0;
    }
    char b64name[64];
    size_t n;
    snprintf(b64name, sizeof b64name, "%s_b64", name);
    char *enc = bytes_base64_encode(data, len, &n);
    if (!enc)
        return -1;
    key(o, b64name);
    fputc('"', o->out);
    fwrite(enc, 1, n, o->out);
    fputc('"', o->out);
    free(enc);
    return 0;
}

static void int_field(json_obj *o, const char *name, int64_t v, int null_when_negative)
{
    key(o, name);
    if (null_when_negative && v < 0)
        fputs("null", o->out);
    else
        fprintf(o->out, "%lld", (long long)v);
}

static void text_field(json_obj *o, const char *name, const char *s)
{
    key(o, name);
    put_string(o->out, s, strlen(s));
}

/* The 1-based position of message id in the tree (ids ascend), 0 when absent. */
static int64_t ordinal(const conv_messages *tree, int64_t id)
{
    size_t lo = 0, hi = tree->count;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (tree->msgs[mid].id < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < tree->count && tree->msgs[lo].id == id ? (int64_t)lo + 1 : 0;
}

static int write_part(FILE *out, const part *p, int indent)
{
    json_obj o = {out, indent + 2, 0};
    fputc('{', out);
    text_field(&o, "kind", part_kind_name(p->kind));
    if (bytes_field(&o, "text", p->data, p->len) != 0 ||
        bytes_field(&o, "name", p->name, p->name ? strlen(p->name) : 0) != 0 ||
        bytes_field(&o, "call_id", p->call_id, p->call_id ? strlen(p->call_id) : 0) != 0 ||
        bytes_field(&o, "arguments", p->args, p->args_len) != 0)
        return -1;
    key(&o, "is_error");
    fputs(p->is_error ? "true" : "false", out);
    int_field(&o, "created_at", p->created_at, 0);
    close_obj(&o);
    return 0;
}

static int write_message(FILE *out, const conv_messages *tree, size_t i, int indent)
{
    const msg *m = &tree->msgs[i];
    json_obj o = {out, indent + 2, 0};
    fputc('{', out);
    int_field(&o, "id", (int64_t)i + 1, 0);
    key(&o, "parent");
    int64_t parent = m->parent ? ordinal(tree, m->parent) : 0;
    if (parent)
        fprintf(out, "%lld", (long long)parent);
    else
        fputs("null", out);
    text_field(&o, "role", msg_role_name(m->role));
    text_field(&o, "status", msg_status_name(m->status));
    if (bytes_field(&o, "model", m->model, m->model ? strlen(m->model) : 0) != 0 ||
        bytes_field(&o, "finish_reason", m->finish_reason,
                    m->finish_reason ? strlen(m->finish_reason) : 0) != 0)
        return -1;
    int_field(&o, "created_at", m->created_at, 0);
    int_field(&o, "finished_at", m->finished_at, 1);
    int_field(&o, "prompt_tokens", m->stats.prompt_tokens, 1);
    int_field(&o, "completion_tokens", m->stats.completion_tokens, 1);
    int_field(&o, "reasoning_tokens", m->stats.reasoning_tokens, 1);
    int_field(&o, "ttft_ms", m->stats.ttft_ms, 1);
    int_field(&o, "prompt_ms", m->stats.prompt_ms, 1);
    int_field(&o, "gen_ms", m->stats.gen_ms, 1);
    key(&o, "parts");
    fputc('[', out);
    for (size_t k = 0; k < m->nparts; k++) {
        fputs(k ? ",\n" : "\n", out);
        put_indent(out, indent + 4);
        if (write_part(out, &m->parts[k], indent + 4) != 0)
            return -1;
    }
    if (m->nparts) {
        fputc('\n', out);
        put_indent(out, indent + 2);
    }
    fputc(']', out);
    close_obj(&o);
    return 0;
}

int export_json_conversation(FILE *out, const conv_record *r, const conv_messages *tree,
                             int top_level, int indent)
{
    json_obj o = {out, indent + 2, 0};
    if (!top_level)
        put_indent(out, indent);
    fputc('{', out);
    if (top_level) {
        text_field(&o, "format", "glmchat-conversation");
        int_field(&o, "version", EXPORT_JSON_VERSION, 0);
    }
    int_field(&o, "id", r->id, 0);
    if (bytes_field(&o, "title", r->title.data, r->title.len) != 0 ||
        bytes_field(&o, "model", r->model.data, r->model.len) != 0 ||
        bytes_field(&o, "system_prompt", r->system_prompt.data, r->system_prompt.len) != 0 ||
        bytes_field(&o, "settings_json", r->settings.data, r->settings.len) != 0)
        return -1;
    int_field(&o, "created_at", r->created_at, 0);
    int_field(&o, "updated_at", r->updated_at, 0);
    key(&o, "current_leaf");
    int64_t leaf = r->leaf ? ordinal(tree, r->leaf) : 0;
    if (leaf)
        fprintf(out, "%lld", (long long)leaf);
    else
        fputs("null", out);
    key(&o, "messages");
    fputc('[', out);
    for (size_t i = 0; i < tree->count; i++) {
        fputs(i ? ",\n" : "\n", out);
        put_indent(out, indent + 4);
        if (write_message(out, tree, i, indent + 4) != 0)
            return -1;
    }
    if (tree->count) {
        fputc('\n', out);
        put_indent(out, indent + 2);
    }
    fputc(']', out);
    close_obj(&o);
    if (top_level)
        fputc('\n', out);
    return 0;
}
