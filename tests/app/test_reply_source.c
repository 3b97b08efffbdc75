/* test_reply_source.c: FOR TESTS ONLY. Replays recorded replies (jsonl events) as if a model
 * wrote them and logs each request it is given; see test_reply_source.h. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "app/config.h"
#include "tests/app/test_reply_source.h"
#include "engine/glm_tokens.h"

struct test_reply_source {
    FILE *f;
    char *path;
    char *next_path; /* FILE.next: where the next reply starts, so runs share one script */
    char *request_log;
    int delay_ms;
    int replies;
    int line;
    volatile sig_atomic_t canceled;
    int context; /* > 0: measure counts a prompt's rendered bytes as its tokens against this */
};

test_reply_source *test_reply_source_open(const char *path, const char *request_log, int delay_ms,
                                          char *err, size_t errlen)
{
    test_reply_source *t = calloc(1, sizeof *t);
    if (!t) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    t->f = fopen(path, "r");
    t->path = strdup(path);
    t->request_log = request_log ? strdup(request_log) : NULL;
    t->delay_ms = delay_ms;
    if (!t->f || !t->path || (request_log && !t->request_log)) {
        snprintf(err, errlen, "cannot read the recorded replies %s: %s", path, strerror(errno));
        test_reply_source_free(t);
        return NULL;
    }
    if (asprintf(&t->next_path, "%s.next", path) < 0) {
        t->next_path = NULL;
        snprintf(err, errlen, "out of memory");
        test_reply_source_free(t);
        return NULL;
    }
    FILE *nf = fopen(t->next_path, "r");
    long offset = 0;
    if (nf) {
        if (fscanf(nf, "%ld %d %d", &offset, &t->line, &t->replies) != 3 || fseek(t->f, offset, SEEK_SET) != 0) {
            snprintf(err, errlen, "%s is damaged; delete it to replay from the start", t->next_path);
            fclose(nf);
            test_reply_source_free(t);
            return NULL;
        }
        fclose(nf);
    }
    return t;
}

void test_reply_source_free(test_reply_source *t)
{
    if (!t)
        return;
    if (t->f)
        fclose(t->f);
    free(t->path);
    free(t->next_path);
    free(t->request_log);
    free(t);
}

static void save_position(test_reply_source *t)
{
    FILE *nf = fopen(t->next_path, "w");
    if (!nf)
        return;
    fprintf(nf, "%ld %d %d\n", ftell(t->f), t->line, t->replies);
    fclose(nf);
}

static const char *role_name(glm_role r)
{
    static const char *names[] = {"system", "user", "assistant", "tool"};
    return (unsigned)r < 4 ? names[r] : "?";
}

char *test_reply_request_json(const glm_request *r)
{
    cJSON *j = cJSON_CreateObject();
    cJSON *msgs = cJSON_AddArrayToObject(j, "messages");
    for (int i = 0; i < r->n_messages; i++) {
        const glm_message *m = &r->messages[i];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "role", role_name(m->role));
        if (m->content)
            cJSON_AddStringToObject(o, "content", m->content);
        if (m->reasoning)
            cJSON_AddStringToObject(o, "reasoning", m->reasoning);
        if (m->tool_call_id)
            cJSON_AddStringToObject(o, "tool_call_id", m->tool_call_id);
        if (m->n_tool_calls) {
            cJSON *calls = cJSON_AddArrayToObject(o, "tool_calls");
            for (int k = 0; k < m->n_tool_calls; k++) {
                cJSON *c = cJSON_CreateObject();
                if (m->tool_calls[k].id)
                    cJSON_AddStringToObject(c, "id", m->tool_calls[k].id);
                cJSON_AddStringToObject(c, "name", m->tool_calls[k].name);
                cJSON_AddStringToObject(c, "arguments", m->tool_calls[k].arguments_json);
                cJSON_AddItemToArray(calls, c);
            }
        }
        cJSON_AddItemToArray(msgs, o);
    }
    cJSON *tools = cJSON_AddArrayToObject(j, "tools");
    for (int i = 0; i < r->n_tools; i++)
        cJSON_AddItemToArray(tools, cJSON_CreateString(r->tools[i].name));
    cJSON_AddBoolToObject(j, "think", r->think);
    cJSON_AddStringToObject(j, "effort", config_effort_name(r->effort));
    cJSON_AddNumberToObject(j, "max_tokens", r->sampling.max_tokens);
    cJSON_AddNumberToObject(j, "temperature", r->sampling.temperature);
    cJSON_AddNumberToObject(j, "top_p", r->sampling.top_p);
    cJSON_AddNumberToObject(j, "top_k", r->sampling.top_k);
    cJSON_AddNumberToObject(j, "seed", (double)r->sampling.seed);
    char *s = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    return s;
}

static void log_request(test_reply_source *t, const glm_request *r)
{
    if (!t->request_log)
        return;
    char *s = test_reply_request_json(r);
    FILE *f = fopen(t->request_log, "a");
    if (f && s)
        fprintf(f, "%s\n", s);
    if (f)
        fclose(f);
    free(s);
}

static void pause_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

static const char *str_of(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* A number field, 0 when absent or out of int range. */
static double num_of(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsNumber(v) || !(v->valuedouble > -1e9 && v->valuedouble < 1e9))
        return 0;
    return v->valuedouble;
}

/* Turns one recorded line into an event; *json_args keeps printed arguments alive. */
static int to_event(const cJSON *o, glm_event *ev, char **json_args)
{
    const char *type = str_of(o, "type");
    memset(ev, 0, sizeof *ev);
    if (!type)
        return -1;
    const char *text = str_of(o, "text");
    ev->text = text ? text : "";
    ev->len = strlen(ev->text);
    ev->name = str_of(o, "name");
    ev->call_id = str_of(o, "id");
    if (strcmp(type, "reasoning") == 0) {
        ev->type = GLM_EV_REASONING_DELTA;
    } else if (strcmp(type, "content") == 0) {
        ev->type = GLM_EV_CONTENT_DELTA;
    } else if (strcmp(type, "tool_call_begin") == 0) {
        ev->type = GLM_EV_TOOL_CALL_BEGIN;
    } else if (strcmp(type, "tool_call_delta") == 0) {
        ev->type = GLM_EV_TOOL_ARG_DELTA;
    } else if (strcmp(type, "tool_call") == 0) {
        ev->type = GLM_EV_TOOL_CALL_END;
        const cJSON *args = cJSON_GetObjectItemCaseSensitive(o, "arguments");
        const char *args_text = str_of(o, "arguments_text");
        *json_args = args && !cJSON_IsNull(args) ? cJSON_PrintUnformatted(args) : NULL;
        ev->text = *json_args ? *json_args : args_text ? args_text : "{}";
        ev->len = strlen(ev->text);
    } else if (strcmp(type, "stats") == 0 || strcmp(type, "done") == 0) {
        ev->type = type[0] == 's' ? GLM_EV_STATS : GLM_EV_DONE;
        ev->finish = str_of(o, "finish");
        ev->stats.prompt_tokens = (int)num_of(o, "prompt_tokens");
        ev->stats.generated_tokens = (int)num_of(o, "generated_tokens");
        ev->stats.reused_tokens = (int)num_of(o, "reused_tokens");
        ev->stats.ttft_s = num_of(o, "ttft_s");
        ev->stats.decode_tok_s = num_of(o, "decode_tok_s");
        ev->stats.prefill_tok_s = num_of(o, "prefill_tok_s");
    } else if (strcmp(type, "error") == 0) {
        ev->type = GLM_EV_ERROR;
        const char *m = str_of(o, "message");
        ev->text = m ? m : "recorded error";
        ev->len = strlen(ev->text);
    } else {
        return -1;
    }
    return 0;
}

/* Skips to the end of the current reply (a "done", "error" or "end" line), so the next
 * generate starts at the next reply. */
static void skip_reply(test_reply_source *t, char **line, size_t *cap)
{
    while (getline(line, cap, t->f) > 0) {
        t->line++;
        if (strstr(*line, "\"type\":\"done\"") || strstr(*line, "\"type\":\"error\"") ||
            strstr(*line, "\"type\":\"end\""))
            return;
    }
}

/* One "raw" or "end" line: model text through the reply stream parser. 1 when the reply is
 * over (its end, a cancel, a failure), 0 to read on; *st gets the outcome. */
static int replay_raw(test_reply_source *t, const cJSON *o, const glm_request *r, glm_reply_parser **rp,
                      glm_event_fn on_event, void *user, glm_status *st, glm_error *err)
{
    if (!*rp && !(*rp = glm_reply_parser_new(r->tools, r->n_tools, r->think, on_event, user, err))) {
        *st = err->status ? err->status : GLM_ERR_NOMEM;
        return 1;
    }
    const char *type = str_of(o, "type");
    if (t->canceled) {
        glm_reply_parser_finish(*rp, GLM_REPLY_CANCELED, err);
        *st = GLM_ERR_CANCELED;
        return 1;
    }
    if (strcmp(type, "end") == 0) {
        const char *why = str_of(o, "why");
        *st = glm_reply_parser_finish(*rp, why && strcmp(why, "length") == 0 ? GLM_REPLY_LENGTH : GLM_REPLY_END_TOKEN, err);
        return 1;
    }
    const char *text = str_of(o, "text");
    glm_status fs = glm_reply_parser_feed(*rp, text ? text : "", text ? strlen(text) : 0, err);
    if (fs == GLM_ERR_CANCELED) {
        glm_reply_parser_finish(*rp, GLM_REPLY_CANCELED, err);
        *st = GLM_ERR_CANCELED;
        return 1;
    }
    *st = fs;
    return fs != GLM_OK;
}

static glm_status replay(void *self, const glm_request *r, glm_event_fn on_event, void *user, glm_error *err)
{
    test_reply_source *t = self;
    t->canceled = 0;
    log_request(t, r);
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    int events = 0;
    glm_status st = GLM_OK;
    glm_reply_parser *rp = NULL;
    while ((n = getline(&line, &cap, t->f)) > 0) {
        t->line++;
        if (line[0] == '\n' || line[0] == '#')
            continue;
        cJSON *o = cJSON_ParseWithLength(line, (size_t)n);
        const char *type = cJSON_IsObject(o) ? str_of(o, "type") : NULL;
        if (type && (strcmp(type, "raw") == 0 || strcmp(type, "end") == 0)) {
            events++;
            if (t->delay_ms > 0)
                pause_ms(t->delay_ms);
            int over = replay_raw(t, o, r, &rp, on_event, user, &st, err);
            int ended = strcmp(type, "end") == 0;
            cJSON_Delete(o);
            if (over && !ended)
                skip_reply(t, &line, &cap);
            if (over)
                break;
            continue;
        }
        glm_event ev;
        char *args = NULL;
        if (!type || to_event(o, &ev, &args)) {
            cJSON_Delete(o);
            st = glm_error_set(err, GLM_ERR_FORMAT, "%s:%d: not a recorded event", t->path, t->line);
            break;
        }
        events++;
        if (t->delay_ms > 0)
            pause_ms(t->delay_ms);
        int stop = t->canceled || on_event(&ev, user) != 0;
        if (stop) {
            glm_event done = {.type = GLM_EV_DONE, .finish = "canceled"};
            on_event(&done, user);
            st = GLM_ERR_CANCELED;
        }
        int last = ev.type == GLM_EV_DONE || ev.type == GLM_EV_ERROR;
        if (ev.type == GLM_EV_ERROR && !stop)
            st = glm_error_set(err, GLM_ERR_BACKEND, "%s", ev.text);
        free(args);
        cJSON_Delete(o);
        if (stop && !last)
            skip_reply(t, &line, &cap);
        if (stop || last)
            break;
    }
    glm_reply_parser_free(rp);
    free(line);
    if (st == GLM_OK && events == 0)
        return glm_error_set(err, GLM_ERR_ARG, "the recorded replies in %s ran out after %d replies", t->path,
                             t->replies);
    t->replies++;
    save_position(t);
    return st;
}

static void cancel_replay(void *self)
{
    test_reply_source *t = self;
    t->canceled = 1;
}

/* A stand-in for the tokenizer: one token per byte of the rendered prompt (no model here). */
static glm_status measure_bytes(void *self, const glm_request *r, int *prompt_tokens, int *context,
                                glm_error *err)
{
    test_reply_source *t = self;
    char *prompt = NULL;
    size_t len = 0;
    glm_status st = glm_render_prompt(r, &prompt, &len, err);
    *prompt_tokens = (int)len;
    *context = t->context;
    free(prompt);
    return st;
}

void test_reply_source_set_context(test_reply_source *t, int context)
{
    t->context = context;
}

chat_source test_reply_source_as_source(test_reply_source *t)
{
    chat_source s = {.generate = replay, .cancel = cancel_replay, .self = t, .model_name = "recorded-replies",
                     .context_window = t->context > 0 ? t->context : 0};
    if (t->context > 0)
        s.measure = measure_bytes;
    return s;
}
