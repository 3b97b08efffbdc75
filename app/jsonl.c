/* jsonl.c: writes glmchat's jsonl event stream (schema in jsonl.h): a JSON string writer that
 * checks UTF-8, and one function per event type. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "app/jsonl.h"
#include "base/utf8.h"

void jsonl_init(jsonl_writer *w, FILE *f)
{
    w->f = f;
    w->failed = 0;
}

void jsonl_put_string(FILE *f, const char *str, size_t len)
{
    const unsigned char *s = (const unsigned char *)(str ? str : "");
    fputc('"', f);
    for (size_t i = 0; i < len;) {
        unsigned char c = s[i];
        if (c == '"' || c == '\\') {
            fputc('\\', f);
            fputc(c, f);
            i++;
        } else if (c < 0x20 || c == 0x7F) {
            switch (c) {
            case '\n': fputs("\\n", f); break;
            case '\r': fputs("\\r", f); break;
            case '\t': fputs("\\t", f); break;
            case '\b': fputs("\\b", f); break;
            case '\f': fputs("\\f", f); break;
            default: fprintf(f, "\\u%04x", c); break;
            }
            i++;
        } else {
            uint32_t cp; /* U+FFFD for each maximal invalid subpart (base/utf8.h) */
            size_t n = utf8_next((const char *)s + i, len - i, &cp);
            if (cp == 0xFFFD)
                fputs(UTF8_REPLACEMENT, f);
            else
                fwrite(s + i, 1, n, f);
            i += n;
        }
    }
    fputc('"', f);
}

static void put_cstr(FILE *f, const char *s)
{
    if (s)
        jsonl_put_string(f, s, strlen(s));
    else
        fputs("null", f);
}

static void put_num(FILE *f, double x)
{
    if (isfinite(x))
        fprintf(f, "%.6g", x);
    else
        fputs("null", f);
}

static int begin(jsonl_writer *w, const char *type)
{
    if (w->failed)
        return -1;
    fputs("{\"type\":", w->f);
    put_cstr(w->f, type);
    return 0;
}

static int end(jsonl_writer *w)
{
    fputs("}\n", w->f);
    if (fflush(w->f) != 0 || ferror(w->f))
        w->failed = 1;
    return w->failed ? -1 : 0;
}

static void put_key(jsonl_writer *w, const char *key)
{
    fprintf(w->f, ",\"%s\":", key);
}

static void put_int(jsonl_writer *w, const char *key, int v)
{
    put_key(w, key);
    fprintf(w->f, "%d", v);
}

static void put_stats(jsonl_writer *w, const glm_stats *s)
{
    put_int(w, "prompt_tokens", s->prompt_tokens);
    put_int(w, "reused_tokens", s->reused_tokens);
    put_int(w, "generated_tokens", s->generated_tokens);
    put_key(w, "ttft_s");
    put_num(w->f, s->ttft_s);
    put_key(w, "prefill_tok_s");
    put_num(w->f, s->prefill_tok_s);
    put_key(w, "decode_tok_s");
    put_num(w->f, s->decode_tok_s);
    if (s->drafting) {
        put_int(w, "draft_windows", s->draft_windows);
        put_int(w, "drafts_proposed", s->drafts_proposed);
        put_int(w, "drafts_accepted", s->drafts_accepted);
    }
}

/* The reply's budget and which limit set it, when the reply source told them. */
static void put_limit(jsonl_writer *w, const glm_stats *s)
{
    static const char *const names[] = {[GLM_LIMIT_REQUEST] = "max_tokens", [GLM_LIMIT_MODEL] = "model",
                                        [GLM_LIMIT_DEFAULT] = "default", [GLM_LIMIT_CONTEXT] = "context"};
    if (s->limit_from <= GLM_LIMIT_UNKNOWN || s->limit_from > GLM_LIMIT_CONTEXT)
        return;
    put_int(w, "max_tokens", s->max_tokens);
    put_key(w, "limit");
    put_cstr(w->f, names[s->limit_from]);
}

/* An id, or null for 0 (nothing saved: --no-save). */
static void put_id(jsonl_writer *w, int64_t id)
{
    if (id > 0)
        fprintf(w->f, "%lld", (long long)id);
    else
        fputs("null", w->f);
}

int jsonl_session(jsonl_writer *w, int64_t conversation, int continued)
{
    if (begin(w, "session"))
        return -1;
    fprintf(w->f, ",\"version\":%d", JSONL_VERSION);
    put_key(w, "conversation");
    put_id(w, conversation);
    put_key(w, "continued");
    fputs(continued ? "true" : "false", w->f);
    return end(w);
}

int jsonl_user(jsonl_writer *w, int64_t message, const char *text)
{
    if (begin(w, "user"))
        return -1;
    put_key(w, "message");
    put_id(w, message);
    put_key(w, "text");
    put_cstr(w->f, text);
    return end(w);
}

int jsonl_assistant(jsonl_writer *w, int64_t message)
{
    if (begin(w, "assistant"))
        return -1;
    put_key(w, "message");
    put_id(w, message);
    return end(w);
}

static void put_text(jsonl_writer *w, const glm_event *ev)
{
    put_key(w, "text");
    jsonl_put_string(w->f, ev->text ? ev->text : "", ev->text ? ev->len : 0);
}

static void put_arguments(jsonl_writer *w, const glm_event *ev)
{
    cJSON *args = ev->text ? cJSON_ParseWithLength(ev->text, ev->len) : NULL;
    int object = cJSON_IsObject(args);
    /* the engine's own JSON is written as it is, so that the call's deltas add up to it exactly */
    int verbatim = object && !memchr(ev->text, '\n', ev->len) && !memchr(ev->text, '\r', ev->len) &&
                   utf8_valid(ev->text, ev->len);
    char *printed = object && !verbatim ? cJSON_PrintUnformatted(args) : NULL;
    cJSON_Delete(args);
    put_key(w, "arguments");
    if (verbatim) {
        fwrite(ev->text, 1, ev->len, w->f);
        return;
    }
    if (printed) {
        fputs(printed, w->f); /* cJSON re-prints: one line, whatever the model's layout */
        free(printed);
        return;
    }
    fputs("null", w->f);
    put_key(w, "arguments_text");
    jsonl_put_string(w->f, ev->text ? ev->text : "", ev->text ? ev->len : 0);
}

int jsonl_event(jsonl_writer *w, const glm_event *ev)
{
    static const char *names[] = {
        [GLM_EV_REASONING_DELTA] = "reasoning", [GLM_EV_CONTENT_DELTA] = "content",
        [GLM_EV_TOOL_CALL_BEGIN] = "tool_call_begin", [GLM_EV_TOOL_ARG_DELTA] = "tool_call_delta",
        [GLM_EV_TOOL_CALL_END] = "tool_call", [GLM_EV_STATS] = "stats",
        [GLM_EV_DONE] = "done", [GLM_EV_ERROR] = "error", [GLM_EV_WAITING] = "waiting",
        [GLM_EV_WAITED] = "waited", [GLM_EV_PROMPT] = "prompt",
    };
    if ((unsigned)ev->type >= sizeof names / sizeof names[0] || begin(w, names[ev->type]))
        return -1;
    switch (ev->type) {
    case GLM_EV_REASONING_DELTA:
    case GLM_EV_CONTENT_DELTA:
        put_text(w, ev);
        break;
    case GLM_EV_TOOL_CALL_BEGIN:
    case GLM_EV_TOOL_ARG_DELTA:
    case GLM_EV_TOOL_CALL_END:
        put_key(w, "id");
        put_cstr(w->f, ev->call_id);
        if (ev->type != GLM_EV_TOOL_ARG_DELTA) {
            put_key(w, "name");
            put_cstr(w->f, ev->name);
        }
        if (ev->type == GLM_EV_TOOL_ARG_DELTA)
            put_text(w, ev);
        else if (ev->type == GLM_EV_TOOL_CALL_END)
            put_arguments(w, ev);
        break;
    case GLM_EV_STATS:
        put_stats(w, &ev->stats);
        break;
    case GLM_EV_DONE:
        put_key(w, "finish");
        put_cstr(w->f, ev->finish ? ev->finish : "stop");
        put_stats(w, &ev->stats);
        put_limit(w, &ev->stats);
        break;
    case GLM_EV_ERROR:
        put_key(w, "message");
        jsonl_put_string(w->f, ev->text ? ev->text : "", ev->text ? ev->len : 0);
        break;
    case GLM_EV_WAITING:
    case GLM_EV_WAITED:
        put_key(w, "for");
        jsonl_put_string(w->f, ev->text ? ev->text : "", ev->text ? ev->len : 0);
        put_key(w, "waited_s");
        put_num(w->f, ev->wait_s);
        break;
    case GLM_EV_PROMPT:
        put_key(w, "done");
        fprintf(w->f, "%d", ev->prompt_done);
        put_key(w, "total");
        fprintf(w->f, "%d", ev->prompt_total);
        break;
    }
    return end(w);
}

int jsonl_tool_result(jsonl_writer *w, const char *call_id, const char *name, int is_error, const char *approval,
                      const char *text)
{
    if (begin(w, "tool_result"))
        return -1;
    put_key(w, "id");
    put_cstr(w->f, call_id);
    put_key(w, "name");
    put_cstr(w->f, name);
    put_key(w, "is_error");
    fputs(is_error ? "true" : "false", w->f);
    put_key(w, "approval");
    put_cstr(w->f, approval);
    put_key(w, "text");
    put_cstr(w->f, text ? text : "");
    return end(w);
}

int jsonl_error(jsonl_writer *w, const char *message)
{
    if (begin(w, "error"))
        return -1;
    put_key(w, "message");
    put_cstr(w->f, message ? message : "");
    return end(w);
}

int jsonl_turn_end(jsonl_writer *w, int64_t conversation, int64_t message, const char *finish)
{
    if (begin(w, "turn_end"))
        return -1;
    put_key(w, "conversation");
    put_id(w, conversation);
    put_key(w, "message");
    put_id(w, message);
    put_key(w, "finish");
    put_cstr(w->f, finish);
    return end(w);
}
