/* chat.c: a conversation's turns (the loop chat.h describes): the request from the stored path
 * with kept and restored reasoning, streaming into storage as parts finish, and the tool loop. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "app/chat.h"
#include "app/chat_memory.h"
#include "base/errbuf.h"

#define CHAT_DEFAULT_MAX_STEPS 32
#define CHAT_TITLE_MAX 60

struct chat {
    chat_options o;
    chat_source src;
    chat_sink sink;
    int64_t conv;
    int think;
    glm_effort effort;
    char *system_prompt;
    glm_sampling sampling;
    int seed_set;
};

static int db_fail(chat *c, char *err, size_t errlen, const char *what)
{
    return errbuf_fail(err, errlen, "%s: %s", what, db_errmsg(c->o.db));
}

chat *chat_new(const chat_options *o, const chat_source *src, const chat_sink *sink, char *err, size_t errlen)
{
    if (!o || !o->cfg || !o->db || !src || !src->generate) {
        errbuf_fail(err, errlen, "chat_new needs a config, a database and a reply source");
        return NULL;
    }
    if (o->tools && !o->policy) {
        errbuf_fail(err, errlen, "chat_new: tools need an approval policy");
        return NULL;
    }
    chat *c = calloc(1, sizeof *c);
    if (!c) {
        errbuf_fail(err, errlen, "out of memory");
        return NULL;
    }
    c->o = *o;
    if (c->o.max_steps <= 0)
        c->o.max_steps = CHAT_DEFAULT_MAX_STEPS;
    c->src = *src;
    if (sink)
        c->sink = *sink;
    c->think = o->cfg->think;
    c->effort = o->cfg->effort;
    c->sampling = o->cfg->sampling;
    c->seed_set = o->cfg->seed_set;
    if (o->cfg->system_prompt && !(c->system_prompt = strdup(o->cfg->system_prompt))) {
        free(c);
        errbuf_fail(err, errlen, "out of memory");
        return NULL;
    }
    return c;
}

void chat_free(chat *c)
{
    if (!c)
        return;
    free(c->system_prompt);
    free(c);
}

int64_t chat_conversation(const chat *c)
{
    return c->conv;
}

int chat_think(const chat *c)
{
    return c->think;
}

glm_effort chat_effort(const chat *c)
{
    return c->effort;
}

glm_sampling *chat_sampling(chat *c)
{
    return &c->sampling;
}

void chat_fix_seed(chat *c, int fixed)
{
    c->seed_set = fixed != 0;
}

int chat_seed_fixed(const chat *c)
{
    return c->seed_set;
}

const char *chat_system_prompt(const chat *c)
{
    return c->system_prompt;
}

/* ---- per-conversation settings ------------------------------------------------------------ */

static int save_settings(chat *c, char *err, size_t errlen)
{
    if (!c->conv)
        return 0;
    char json[128];
    snprintf(json, sizeof json, "{\"think\":%s,\"effort\":\"%s\"}", c->think ? "true" : "false",
             config_effort_name(c->effort));
    if (conv_set_settings(c->o.db, c->conv, json) != 0)
        return db_fail(c, err, errlen, "cannot save the conversation's settings");
    return 0;
}

static void load_settings(chat *c, const char *json)
{
    cJSON *s = json ? cJSON_Parse(json) : NULL;
    const cJSON *think = cJSON_GetObjectItemCaseSensitive(s, "think");
    const cJSON *effort = cJSON_GetObjectItemCaseSensitive(s, "effort");
    if (cJSON_IsBool(think))
        c->think = cJSON_IsTrue(think);
    if (cJSON_IsString(effort)) {
        if (strcmp(effort->valuestring, "low") == 0)
            c->effort = GLM_EFFORT_LOW;
        else if (strcmp(effort->valuestring, "high") == 0)
            c->effort = GLM_EFFORT_HIGH;
        else if (strcmp(effort->valuestring, "max") == 0)
            c->effort = GLM_EFFORT_MAX;
    }
    cJSON_Delete(s);
}

int chat_open(chat *c, int64_t id, char *err, size_t errlen)
{
    if (c->o.policy && id != c->conv) /* "this conversation" approvals end with it */
        tool_policy_new_conversation(c->o.policy);
    if (id == 0) { /* a new conversation starts from the configured system prompt */
        char *dflt = c->o.cfg->system_prompt ? strdup(c->o.cfg->system_prompt) : NULL;
        if (c->o.cfg->system_prompt && !dflt)
            return errbuf_fail(err, errlen, "out of memory");
        free(c->system_prompt);
        c->system_prompt = dflt;
        c->conv = 0;
        return 0;
    }
    int exists = conv_exists(c->o.db, id);
    if (exists < 0)
        return db_fail(c, err, errlen, "cannot look the conversation up");
    if (!exists)
        return errbuf_fail(err, errlen, "there is no conversation %lld in %s; `glmchat list` shows them", (long long)id,
                    db_path(c->o.db));
    if (msg_end_interrupted(c->o.db, id) < 0) /* replies a killed process left streaming */
        return db_fail(c, err, errlen, "cannot end the replies a crash interrupted");
    c->conv = id;
    char *settings = NULL, *prompt = NULL;
    if (conv_get_settings(c->o.db, id, &settings) != 0 || conv_get_system_prompt(c->o.db, id, &prompt) != 0) {
        free(settings);
        return db_fail(c, err, errlen, "cannot read the conversation's settings");
    }
    load_settings(c, settings);
    free(settings);
    free(c->system_prompt); /* none stored means none: not the previous conversation's */
    c->system_prompt = prompt;
    return 0;
}

int chat_set_think(chat *c, int think, char *err, size_t errlen)
{
    c->think = think != 0;
    return save_settings(c, err, errlen);
}

int chat_set_effort(chat *c, glm_effort effort, char *err, size_t errlen)
{
    c->effort = effort;
    return save_settings(c, err, errlen);
}

int chat_set_system_prompt(chat *c, const char *prompt, char *err, size_t errlen)
{
    char *copy = prompt && *prompt ? strdup(prompt) : NULL;
    if (prompt && *prompt && !copy)
        return errbuf_fail(err, errlen, "out of memory");
    free(c->system_prompt);
    c->system_prompt = copy;
    if (c->conv && conv_set_system_prompt(c->o.db, c->conv, copy) != 0)
        return db_fail(c, err, errlen, "cannot save the system prompt");
    return 0;
}

/* A title from the first line of text, at most CHAT_TITLE_MAX bytes, cut at a UTF-8 boundary. */
static void make_title(const char *text, char *out, size_t outlen)
{
    while (*text == ' ' || *text == '\n' || *text == '\t')
        text++;
    size_t n = strcspn(text, "\n");
    if (n > CHAT_TITLE_MAX)
        n = CHAT_TITLE_MAX;
    while (n > 0 && ((unsigned char)text[n] & 0xC0) == 0x80)
        n--;
    if (n >= outlen)
        n = outlen - 1;
    memcpy(out, text, n);
    out[n] = 0;
}

static int ensure_conversation(chat *c, const char *first_text, char *err, size_t errlen)
{
    if (c->conv)
        return 0;
    char title[CHAT_TITLE_MAX + 1];
    make_title(first_text, title, sizeof title);
    int64_t id = conv_create(c->o.db, title[0] ? title : NULL, c->src.model_name);
    if (id < 0)
        return db_fail(c, err, errlen, "cannot create the conversation");
    c->conv = id;
    if (save_settings(c, err, errlen))
        return -1;
    if (c->system_prompt && conv_set_system_prompt(c->o.db, id, c->system_prompt) != 0)
        return db_fail(c, err, errlen, "cannot save the system prompt");
    return 0;
}

/* ---- the request ---------------------------------------------------------------------------- */

struct chat_request {
    conv_messages path;
    glm_message *msgs;
    int n;
    glm_tool_call *calls;
    char **owned;
    int n_owned;
    glm_request req;
};

static char *keep(chat_request *cr, char *s)
{
    if (!s)
        return NULL;
    char **grown = realloc(cr->owned, (size_t)(cr->n_owned + 1) * sizeof *grown);
    if (!grown) {
        free(s);
        return NULL;
    }
    cr->owned = grown;
    grown[cr->n_owned++] = s;
    return s;
}

/* The parts of m of one kind joined, or NULL when it has none. *failed on out of memory. */
static const char *joined(chat_request *cr, const msg *m, part_kind kind, int *failed)
{
    const part *only = NULL;
    size_t total = 0, count = 0;
    for (size_t i = 0; i < m->nparts; i++)
        if (m->parts[i].kind == kind) {
            only = &m->parts[i];
            total += m->parts[i].len;
            count++;
        }
    if (count == 0)
        return NULL;
    if (count == 1)
        return only->data;
    char *s = malloc(total + 1);
    if (!s) {
        *failed = 1;
        return NULL;
    }
    size_t off = 0;
    for (size_t i = 0; i < m->nparts; i++)
        if (m->parts[i].kind == kind) {
            memcpy(s + off, m->parts[i].data, m->parts[i].len);
            off += m->parts[i].len;
        }
    s[off] = 0;
    if (!keep(cr, s))
        *failed = 1;
    return s;
}

static glm_role role_of(msg_role r)
{
    switch (r) {
    case MSG_SYSTEM: return GLM_ROLE_SYSTEM;
    case MSG_USER: return GLM_ROLE_USER;
    case MSG_ASSISTANT: return GLM_ROLE_ASSISTANT;
    case MSG_TOOL: return GLM_ROLE_TOOL;
    }
    return GLM_ROLE_USER;
}

/* Puts stored reasoning back into tool-calling steps that lack it. */
static void restore_reasoning(chat *c, chat_request *cr)
{
    for (int i = 0; i < cr->n; i++) {
        glm_message *m = &cr->msgs[i];
        if (m->role != GLM_ROLE_ASSISTANT || m->n_tool_calls == 0 || m->reasoning)
            continue;
        char sig[CHAT_SIGNATURE_LEN + 1], ids[4096];
        chat_signature(cr->msgs, i, m, sig);
        if (chat_call_ids(m, ids, sizeof ids))
            continue;
        char *text = NULL;
        size_t len = 0;
        if (mem_get(c->o.db, sig, ids, &text, &len) == 1)
            m->reasoning = keep(cr, text);
    }
}

void chat_request_free(chat_request *cr)
{
    if (!cr)
        return;
    conv_messages_free(&cr->path);
    free(cr->msgs);
    free(cr->calls);
    for (int i = 0; i < cr->n_owned; i++)
        free(cr->owned[i]);
    free(cr->owned);
    free(cr);
}

const glm_request *chat_request_get(const chat_request *cr)
{
    return &cr->req;
}

static int count_slots(const conv_messages *p, size_t *n_msgs, size_t *n_calls)
{
    *n_msgs = 1;
    *n_calls = 0;
    for (size_t i = 0; i < p->count; i++) {
        *n_msgs += 1;
        for (size_t j = 0; j < p->msgs[i].nparts; j++) {
            if (p->msgs[i].parts[j].kind == PART_TOOL_CALL)
                (*n_calls)++;
            if (p->msgs[i].parts[j].kind == PART_TOOL_RESULT)
                (*n_msgs)++;
        }
    }
    return 0;
}

chat_request *chat_build_request(chat *c, char *err, size_t errlen)
{
    chat_request *cr = calloc(1, sizeof *cr);
    if (!cr) {
        errbuf_fail(err, errlen, "out of memory");
        return NULL;
    }
    if (c->conv && conv_load_path(c->o.db, c->conv, &cr->path) != 0) {
        db_fail(c, err, errlen, "cannot load the conversation");
        free(cr);
        return NULL;
    }
    size_t n_msgs, n_calls;
    count_slots(&cr->path, &n_msgs, &n_calls);
    cr->msgs = calloc(n_msgs, sizeof *cr->msgs);
    cr->calls = calloc(n_calls ? n_calls : 1, sizeof *cr->calls);
    int failed = !cr->msgs || !cr->calls;
    if (!failed && c->system_prompt)
        cr->msgs[cr->n++] = (glm_message){.role = GLM_ROLE_SYSTEM, .content = c->system_prompt};
    size_t call_at = 0;
    for (size_t i = 0; !failed && i < cr->path.count; i++) {
        const msg *m = &cr->path.msgs[i];
        if (m->nparts == 0 && m->role == MSG_ASSISTANT && i + 1 < cr->path.count &&
            cr->path.msgs[i + 1].role == MSG_USER) {
            /* a reply canceled or interrupted before its first token: an empty answer keeps
             * the turns alternating */
            cr->msgs[cr->n++] = (glm_message){.role = GLM_ROLE_ASSISTANT, .content = ""};
            continue;
        }
        if (m->nparts == 0)
            continue;
        if (m->role == MSG_TOOL) {
            for (size_t j = 0; j < m->nparts; j++) {
                const part *p = &m->parts[j];
                if (p->kind != PART_TOOL_RESULT)
                    continue;
                cr->msgs[cr->n++] = (glm_message){.role = GLM_ROLE_TOOL, .content = p->data,
                                                  .tool_call_id = p->call_id};
            }
            continue;
        }
        glm_message *g = &cr->msgs[cr->n++];
        g->role = role_of(m->role);
        g->content = joined(cr, m, PART_TEXT, &failed);
        g->reasoning = joined(cr, m, PART_REASONING, &failed);
        g->tool_calls = &cr->calls[call_at];
        for (size_t j = 0; j < m->nparts; j++) {
            const part *p = &m->parts[j];
            if (p->kind != PART_TOOL_CALL)
                continue;
            cr->calls[call_at++] = (glm_tool_call){.id = p->call_id, .name = p->name ? p->name : "",
                                                   .arguments_json = p->args ? p->args : "{}"};
            g->n_tool_calls++;
        }
        if (g->n_tool_calls == 0)
            g->tool_calls = NULL;
    }
    if (failed) {
        errbuf_fail(err, errlen, "out of memory");
        chat_request_free(cr);
        return NULL;
    }
    restore_reasoning(c, cr);
    cr->req.messages = cr->msgs;
    cr->req.n_messages = cr->n;
    if (c->o.tools)
        cr->req.tools = tools_as_glm(c->o.tools, &cr->req.n_tools);
    cr->req.sampling = c->sampling;
    cr->req.think = c->think;
    cr->req.effort = c->effort;
    cr->req.clear_thinking = c->o.cfg->clear_thinking;
    return cr;
}

/* ---- one model reply (a step) -------------------------------------------------------------- */

typedef struct step_call {
    char *id, *name, *args;
} step_call;

typedef struct step {
    chat *c;
    int64_t msg;
    part_kind open_kind; /* of the block in buf; valid when len > 0 */
    char *buf;
    size_t len, cap;
    char *reasoning;     /* every reasoning byte of the step, for reasoning memory */
    size_t rlen, rcap;
    step_call *calls;
    int n_calls;
    char *cur_id, *cur_name; /* the call being written */
    char finish[32];
    glm_stats stats;
    int got_done;
    char error[1024];
    glm_status status; /* what generate returned */
    int storage_failed;
    char storage_err[1024];
    int canceled;
} step;

static int grow_append(char **buf, size_t *len, size_t *cap, const char *s, size_t n)
{
    if (*len + n + 1 > *cap) {
        size_t ncap = *cap ? *cap : 256;
        while (ncap < *len + n + 1)
            ncap *= 2;
        char *nb = realloc(*buf, ncap);
        if (!nb)
            return -1;
        *buf = nb;
        *cap = ncap;
    }
    memcpy(*buf + *len, s, n);
    *len += n;
    (*buf)[*len] = 0;
    return 0;
}

static void storage_error(step *s, const char *what)
{
    if (s->storage_failed)
        return;
    s->storage_failed = 1;
    snprintf(s->storage_err, sizeof s->storage_err, "%s: %s", what, db_errmsg(s->c->o.db));
}

/* Saves the open reasoning or text block as a part. */
static void flush_block(step *s)
{
    if (s->len == 0)
        return;
    part_in p = {.kind = s->open_kind, .data = s->buf, .len = s->len};
    if (part_append(s->c->o.db, s->msg, &p) < 0)
        storage_error(s, "cannot save the reply");
    s->len = 0;
}

static void add_delta(step *s, part_kind kind, const char *text, size_t n)
{
    if (s->len && s->open_kind != kind)
        flush_block(s);
    s->open_kind = kind;
    if (grow_append(&s->buf, &s->len, &s->cap, text, n))
        storage_error(s, "out of memory keeping the reply");
    if (kind == PART_REASONING && grow_append(&s->reasoning, &s->rlen, &s->rcap, text, n))
        storage_error(s, "out of memory keeping the reasoning");
}

static char *new_call_id(void)
{
    unsigned char r[12];
    if (getrandom(r, sizeof r, 0) != (ssize_t)sizeof r) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        uint64_t x = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 20) ^ (uint64_t)(uintptr_t)r;
        for (size_t i = 0; i < sizeof r; i++, x = x * 6364136223846793005ULL + 1442695040888963407ULL)
            r[i] = (unsigned char)(x >> 56);
    }
    char *id = malloc(6 + 24 + 1);
    if (!id)
        return NULL;
    memcpy(id, "call_", 5);
    for (size_t i = 0; i < sizeof r; i++)
        snprintf(id + 5 + 2 * i, 3, "%02x", r[i]);
    return id;
}

static void end_call(step *s, const char *name, const char *args, size_t args_len)
{
    flush_block(s);
    if (!name)
        name = s->cur_name ? s->cur_name : "";
    char *id = s->cur_id ? s->cur_id : new_call_id();
    s->cur_id = NULL;
    if (!args || args_len == 0) {
        args = "{}";
        args_len = 2;
    }
    step_call *grown = realloc(s->calls, (size_t)(s->n_calls + 1) * sizeof *grown);
    char *name_copy = strdup(name);
    char *args_copy = strndup(args, args_len);
    if (!grown || !id || !name_copy || !args_copy) {
        if (grown)
            s->calls = grown;
        free(id), free(name_copy), free(args_copy);
        storage_error(s, "out of memory keeping a tool call");
        return;
    }
    s->calls = grown;
    grown[s->n_calls++] = (step_call){id, name_copy, args_copy};
    part_in p = {.kind = PART_TOOL_CALL, .name = name_copy, .call_id = id, .args = args_copy, .args_len = args_len};
    if (part_append(s->c->o.db, s->msg, &p) < 0)
        storage_error(s, "cannot save a tool call");
    free(s->cur_name);
    s->cur_name = NULL;
}

static int on_event(const glm_event *ev, void *user)
{
    step *s = user;
    chat *c = s->c;
    glm_event fwd = *ev;
    switch (ev->type) {
    case GLM_EV_REASONING_DELTA:
        add_delta(s, PART_REASONING, ev->text, ev->len);
        break;
    case GLM_EV_CONTENT_DELTA:
        add_delta(s, PART_TEXT, ev->text, ev->len);
        break;
    case GLM_EV_TOOL_CALL_BEGIN:
        flush_block(s);
        free(s->cur_id);
        free(s->cur_name);
        s->cur_id = ev->call_id ? strdup(ev->call_id) : new_call_id();
        s->cur_name = strdup(ev->name ? ev->name : "");
        fwd.call_id = s->cur_id;
        break;
    case GLM_EV_TOOL_ARG_DELTA:
        if (!ev->call_id)
            fwd.call_id = s->cur_id;
        break;
    case GLM_EV_TOOL_CALL_END:
        if (!s->cur_id)
            s->cur_id = ev->call_id ? strdup(ev->call_id) : new_call_id();
        fwd.call_id = s->cur_id;
        if (c->sink.event && c->sink.event(c->sink.u, &fwd))
            s->canceled = 1;
        end_call(s, ev->name, ev->text, ev->text ? ev->len : 0);
        return s->canceled || (c->o.cancel && *c->o.cancel);
    case GLM_EV_STATS:
        s->stats = ev->stats;
        break;
    case GLM_EV_DONE:
        s->got_done = 1;
        s->stats = ev->stats;
        snprintf(s->finish, sizeof s->finish, "%s", ev->finish ? ev->finish : "stop");
        break;
    case GLM_EV_ERROR:
        snprintf(s->error, sizeof s->error, "%.*s", (int)(ev->len < 1000 ? ev->len : 1000), ev->text ? ev->text : "");
        break;
    case GLM_EV_WAITING:
    case GLM_EV_WAITED:
    case GLM_EV_PROMPT:
        break; /* the view's: nothing of the reply */
    }
    if (c->sink.event && c->sink.event(c->sink.u, &fwd))
        s->canceled = 1;
    return s->canceled || (c->o.cancel && *c->o.cancel);
}

static void step_free(step *s)
{
    free(s->buf);
    free(s->reasoning);
    for (int i = 0; i < s->n_calls; i++) {
        free(s->calls[i].id);
        free(s->calls[i].name);
        free(s->calls[i].args);
    }
    free(s->calls);
    free(s->cur_id);
    free(s->cur_name);
}

static msg_stats to_msg_stats(const glm_stats *g, int known)
{
    msg_stats m = MSG_STATS_UNKNOWN;
    if (!known)
        return m;
    m.prompt_tokens = g->prompt_tokens;
    m.completion_tokens = g->generated_tokens;
    m.ttft_ms = (int64_t)(g->ttft_s * 1000.0);
    if (g->prefill_tok_s > 0)
        m.prompt_ms = (int64_t)(g->prompt_tokens / g->prefill_tok_s * 1000.0);
    if (g->decode_tok_s > 0)
        m.gen_ms = (int64_t)(g->generated_tokens / g->decode_tok_s * 1000.0);
    return m;
}

static uint64_t fresh_seed(void)
{
    uint64_t x;
    if (getrandom(&x, sizeof x, 0) == (ssize_t)sizeof x)
        return x;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000007ULL ^ (uint64_t)ts.tv_nsec;
}

/* Remembers the step's reasoning under the request it answered and its calls. */
static void remember_reasoning(chat *c, const glm_request *r, const step *s)
{
    if (s->n_calls == 0 || s->rlen == 0)
        return;
    glm_tool_call *calls = calloc((size_t)s->n_calls, sizeof *calls);
    if (!calls)
        return;
    for (int i = 0; i < s->n_calls; i++)
        calls[i] = (glm_tool_call){s->calls[i].id, s->calls[i].name, s->calls[i].args};
    glm_message m = {.role = GLM_ROLE_ASSISTANT, .tool_calls = calls, .n_tool_calls = s->n_calls};
    char sig[CHAT_SIGNATURE_LEN + 1], ids[4096];
    chat_signature(r->messages, r->n_messages, &m, sig);
    if (chat_call_ids(&m, ids, sizeof ids) == 0)
        mem_put(c->o.db, c->conv, sig, ids, s->reasoning, s->rlen); /* a cache: a failure loses nothing saved */
    free(calls);
}

/* Runs one model reply. Returns 0 (s filled) or -1 when storage failed before it began. */
static int run_step(chat *c, step *s, char *err, size_t errlen)
{
    memset(s, 0, sizeof *s);
    s->c = c;
    chat_request *cr = chat_build_request(c, err, errlen);
    if (!cr)
        return -1;
    int64_t leaf = conv_leaf(c->o.db, c->conv);
    if (leaf < 0) {
        chat_request_free(cr);
        return db_fail(c, err, errlen, "cannot read the conversation");
    }
    s->msg = msg_append(c->o.db, c->conv, leaf, MSG_ASSISTANT, MSG_STREAMING, c->src.model_name);
    if (s->msg < 0) {
        chat_request_free(cr);
        return db_fail(c, err, errlen, "cannot save the reply");
    }
    if (c->sink.assistant)
        c->sink.assistant(c->sink.u, s->msg);
    if (!c->seed_set)
        cr->req.sampling.seed = fresh_seed();
    glm_error gerr = {0};
    glm_status st = GLM_OK;
    if (c->o.cancel && *c->o.cancel)
        st = GLM_ERR_CANCELED;
    else
        st = c->src.generate(c->src.self, &cr->req, on_event, s, &gerr);
    s->status = st;
    flush_block(s);
    if (st == GLM_ERR_CANCELED || s->canceled || strcmp(s->finish, "canceled") == 0 ||
        (c->o.cancel && *c->o.cancel)) {
        s->canceled = 1;
        snprintf(s->finish, sizeof s->finish, "canceled");
    } else if (st != GLM_OK) {
        snprintf(s->finish, sizeof s->finish, "error");
        if (!s->error[0])
            snprintf(s->error, sizeof s->error, "%s", gerr.message[0] ? gerr.message : "the model failed");
    } else if (!s->finish[0]) {
        snprintf(s->finish, sizeof s->finish, s->n_calls ? "tool_calls" : "stop");
    }
    msg_status status = s->canceled ? MSG_CANCELED : st != GLM_OK ? MSG_ERROR : MSG_COMPLETE;
    msg_stats ms = to_msg_stats(&s->stats, s->got_done || s->stats.generated_tokens > 0);
    if (msg_finish(c->o.db, s->msg, status, s->finish, &ms) != 0)
        storage_error(s, "cannot finish the reply");
    if (status == MSG_COMPLETE)
        remember_reasoning(c, &cr->req, s);
    chat_request_free(cr);
    return 0;
}

/* ---- tools ---------------------------------------------------------------------------------- */

static int save_tool_result(chat *c, const step_call *call, const tool_result *r, char *err, size_t errlen)
{
    int64_t leaf = conv_leaf(c->o.db, c->conv);
    int64_t m = leaf < 0 ? -1 : msg_append(c->o.db, c->conv, leaf, MSG_TOOL, MSG_COMPLETE, NULL);
    if (m < 0)
        return db_fail(c, err, errlen, "cannot save a tool result");
    const char *text = r->text ? r->text : "";
    part_in p = {.kind = PART_TOOL_RESULT, .data = text, .len = strlen(text), .name = call->name,
                 .call_id = call->id, .is_error = r->is_error};
    if (part_append(c->o.db, m, &p) < 0)
        return db_fail(c, err, errlen, "cannot save a tool result");
    if (c->sink.tool_result)
        c->sink.tool_result(c->sink.u, call->id, call->name, r);
    return 0;
}

/* Runs the step's calls in order. Returns 0, or -1 when storage failed. *canceled when the
 * user stopped it (the calls not run get a "canceled" result, so every call has one). */
static int run_tools(chat *c, const step *s, int *canceled, char *err, size_t errlen)
{
    *canceled = 0;
    for (int i = 0; i < s->n_calls; i++) {
        const step_call *call = &s->calls[i];
        tool_result r = {0};
        int rc = 0;
        if (*canceled || (c->o.cancel && *c->o.cancel)) {
            *canceled = 1;
            rc = tool_result_set(&r, 1, "error: canceled by the user before it ran");
        } else if (!c->o.tools) {
            rc = tool_result_set(&r, 1, "error: no tools are offered in this chat, so %s cannot run",
                                 call->name);
        } else {
            if (c->sink.tool_start)
                c->sink.tool_start(c->sink.u, call->id, call->name, call->args);
            rc = tools_call(c->o.tools, c->o.policy, call->name, call->args, c->o.cancel, &r);
            if (c->o.cancel && *c->o.cancel)
                *canceled = 1;
        }
        if (rc != 0) {
            tool_result_clear(&r);
            return errbuf_fail(err, errlen, "out of memory running %s", call->name);
        }
        int saved = save_tool_result(c, call, &r, err, errlen);
        tool_result_clear(&r);
        if (saved)
            return -1;
    }
    return 0;
}

/* ---- turns ------------------------------------------------------------------------------------ */

static int run_steps(chat *c, chat_outcome *out, char *err, size_t errlen)
{
    for (int n = 0; n < c->o.max_steps; n++) {
        step s;
        if (run_step(c, &s, err, errlen))
            return -1;
        out->steps++;
        out->last_message = s.msg;
        out->tool_calls += s.n_calls;
        if (s.storage_failed) {
            errbuf_fail(err, errlen, "%s", s.storage_err);
            step_free(&s);
            return -1;
        }
        const char *finish = s.finish;
        int more = !s.canceled && strcmp(finish, "error") != 0 && strcmp(finish, "length") != 0 && s.n_calls > 0;
        if (strcmp(finish, "error") == 0) {
            snprintf(out->error, sizeof out->error, "%s", s.error);
            out->peer_failed = s.status == GLM_ERR_PEER;
        }
        if (!more) {
            out->finish = s.canceled ? "canceled" : strcmp(finish, "error") == 0 ? "error"
                          : strcmp(finish, "length") == 0 ? "length" : "stop";
            step_free(&s);
            return 0;
        }
        int canceled;
        int rc = run_tools(c, &s, &canceled, err, errlen);
        step_free(&s);
        if (rc)
            return -1;
        if (canceled) {
            out->finish = "canceled";
            return 0;
        }
    }
    out->finish = "tool_limit";
    return 0;
}

static void outcome_init(chat_outcome *out)
{
    memset(out, 0, sizeof *out);
    out->finish = "error";
}

/* Appends a user message under parent and makes it the leaf. */
static int save_user(chat *c, int64_t parent, const char *text, char *err, size_t errlen)
{
    int64_t m = msg_append(c->o.db, c->conv, parent, MSG_USER, MSG_COMPLETE, NULL);
    if (m < 0)
        return db_fail(c, err, errlen, "cannot save your message");
    part_in p = {.kind = PART_TEXT, .data = text, .len = strlen(text)};
    if (part_append(c->o.db, m, &p) < 0)
        return db_fail(c, err, errlen, "cannot save your message");
    if (c->sink.user)
        c->sink.user(c->sink.u, m, text);
    return 0;
}

/* Refuses text before it is saved when the prompt with it (after the path, or in place of the
 * path's last user message when replacing) leaves the context no room for a reply: saved, it
 * would make every later turn fail. */
static int check_fits(chat *c, const char *text, int replacing, char *err, size_t errlen)
{
    if (!c->src.measure)
        return 0;
    chat_request *cr = chat_build_request(c, err, errlen);
    if (!cr)
        return -1;
    size_t n = cr->req.n_messages;
    if (replacing)
        while (n > 0 && cr->req.messages[n - 1].role != GLM_ROLE_USER)
            n--;
    if (replacing && n > 0)
        n--;
    glm_message *msgs = calloc(n + 1, sizeof *msgs);
    if (!msgs) {
        chat_request_free(cr);
        return errbuf_fail(err, errlen, "out of memory");
    }
    memcpy(msgs, cr->req.messages, n * sizeof *msgs);
    msgs[n] = (glm_message){.role = GLM_ROLE_USER, .content = text};
    glm_request r = cr->req, alone = cr->req;
    r.messages = msgs;
    r.n_messages = (int)n + 1;
    alone.messages = &msgs[n];
    alone.n_messages = 1;
    int tokens = 0, own = 0, context = 0;
    glm_error gerr = {0};
    glm_status st = c->src.measure(c->src.self, &r, &tokens, &context, &gerr);
    int rc = 0;
    if (st != GLM_OK) {
        rc = errbuf_fail(err, errlen, "cannot measure the prompt: %s", gerr.message);
    } else if (tokens >= context) {
        if (c->src.measure(c->src.self, &alone, &own, &context, &gerr) != GLM_OK)
            own = -1;
        if (own >= context || n == 0)
            rc = errbuf_fail(err, errlen, "your message was not sent: it is %d tokens, and the context holds %d "
                                   "(--context, context in the config); shorten it",
                      own, context);
        else
            rc = errbuf_fail(err, errlen, "your message was not sent: with the %d tokens of the conversation before "
                                   "it the prompt is %d tokens, and the context holds %d (--context, "
                                   "context in the config); /compact summarises the conversation, /drop N "
                                   "takes old turns off it, /new starts afresh",
                      tokens - own, tokens, context);
    }
    free(msgs);
    chat_request_free(cr);
    return rc;
}

int chat_turn(chat *c, const char *text, chat_outcome *out, char *err, size_t errlen)
{
    outcome_init(out);
    if (check_fits(c, text, 0, err, errlen))
        return -1;
    if (ensure_conversation(c, text, err, errlen))
        return -1;
    int64_t leaf = conv_leaf(c->o.db, c->conv);
    if (leaf < 0)
        return db_fail(c, err, errlen, "cannot read the conversation");
    if (save_user(c, leaf, text, err, errlen))
        return -1;
    return run_steps(c, out, err, errlen);
}

/* The last user message on the current path (0 when none), or -1. */
static int64_t last_user(chat *c, int64_t *parent, char *err, size_t errlen)
{
    conv_messages path;
    if (conv_load_path(c->o.db, c->conv, &path) != 0)
        return db_fail(c, err, errlen, "cannot load the conversation");
    int64_t id = 0;
    for (size_t i = path.count; i-- > 0;)
        if (path.msgs[i].role == MSG_USER) {
            id = path.msgs[i].id;
            *parent = path.msgs[i].parent;
            break;
        }
    conv_messages_free(&path);
    if (id == 0)
        return errbuf_fail(err, errlen, "the conversation has no message of yours to answer again");
    return id;
}

int chat_retry(chat *c, chat_outcome *out, char *err, size_t errlen)
{
    outcome_init(out);
    if (!c->conv)
        return errbuf_fail(err, errlen, "there is nothing to retry in a new conversation");
    int64_t parent;
    int64_t user = last_user(c, &parent, err, errlen);
    if (user < 0)
        return -1;
    if (conv_set_leaf(c->o.db, c->conv, user) != 0)
        return db_fail(c, err, errlen, "cannot go back to your last message");
    return run_steps(c, out, err, errlen);
}

int chat_edit(chat *c, const char *text, chat_outcome *out, char *err, size_t errlen)
{
    outcome_init(out);
    if (!c->conv)
        return errbuf_fail(err, errlen, "there is no message to edit in a new conversation");
    int64_t parent;
    if (last_user(c, &parent, err, errlen) < 0 || check_fits(c, text, 1, err, errlen))
        return -1;
    if (save_user(c, parent, text, err, errlen))
        return -1;
    return run_steps(c, out, err, errlen);
}

int chat_branch(chat *c, int64_t msg_id, char *err, size_t errlen)
{
    if (!c->conv)
        return errbuf_fail(err, errlen, "open a conversation before branching");
    if (conv_set_leaf(c->o.db, c->conv, msg_id) != 0)
        return errbuf_fail(err, errlen, "cannot continue from message %lld: %s", (long long)msg_id, db_errmsg(c->o.db));
    return 0;
}

int64_t chat_drop(chat *c, int64_t n, char *err, size_t errlen)
{
    if (!c->conv)
        return errbuf_fail(err, errlen, "there is nothing to drop in a new conversation");
    int64_t id = msg_by_number(c->o.db, c->conv, n);
    if (id < 0)
        return db_fail(c, err, errlen, "cannot find the message");
    conv_messages path;
    if (conv_load_path(c->o.db, c->conv, &path) != 0)
        return db_fail(c, err, errlen, "cannot load the conversation");
    int64_t parent = -1;
    for (size_t i = 0; id > 0 && i < path.count; i++)
        if (path.msgs[i].id == id)
            parent = path.msgs[i].parent;
    conv_messages_free(&path);
    if (parent < 0)
        return errbuf_fail(err, errlen, "message %lld is not on the path shown (/branch lists the others)",
                    (long long)n);
    if (conv_set_leaf(c->o.db, c->conv, parent) != 0)
        return db_fail(c, err, errlen, "cannot drop the message");
    return parent ? msg_number(c->o.db, c->conv, parent) : 0;
}

/* ---- /compact ------------------------------------------------------------------------------ */

/* What the model is asked to write; it goes after the path as the last user message. */
static const char compact_instruction[] =
    "Summarise our conversation so far so that it can go on from your summary alone: what I "
    "want, the facts, decisions, names, numbers and code that matter, and what is still open. "
    "Write only the summary, in plain prose, as briefly as keeps what matters.";

typedef struct summary_text {
    chat *c;
    char *buf;
    size_t len, cap;
    int failed; /* out of memory */
    int canceled;
    char finish[32];
    glm_stats stats;
    char error[1024];
} summary_text;

static int on_summary_event(const glm_event *ev, void *user)
{
    summary_text *s = user;
    chat *c = s->c;
    if (ev->type == GLM_EV_CONTENT_DELTA && !s->failed)
        s->failed = grow_append(&s->buf, &s->len, &s->cap, ev->text, ev->len) != 0;
    else if (ev->type == GLM_EV_DONE) {
        s->stats = ev->stats;
        snprintf(s->finish, sizeof s->finish, "%s", ev->finish ? ev->finish : "stop");
    } else if (ev->type == GLM_EV_ERROR)
        snprintf(s->error, sizeof s->error, "%.*s", (int)(ev->len < 1000 ? ev->len : 1000), ev->text ? ev->text : "");
    if (c->sink.event && c->sink.event(c->sink.u, ev))
        s->canceled = 1;
    return s->canceled || (c->o.cancel && *c->o.cancel);
}

/* Generates the summary of the current path into s (s->finish says how it ended). */
static int generate_summary(chat *c, summary_text *s, char *err, size_t errlen)
{
    chat_request *cr = chat_build_request(c, err, errlen);
    if (!cr)
        return -1;
    glm_message *msgs = calloc(cr->n + 1, sizeof *msgs);
    if (!msgs) {
        chat_request_free(cr);
        return errbuf_fail(err, errlen, "out of memory");
    }
    memcpy(msgs, cr->req.messages, cr->n * sizeof *msgs);
    msgs[cr->n] = (glm_message){.role = GLM_ROLE_USER, .content = compact_instruction};
    glm_request r = cr->req;
    r.messages = msgs;
    r.n_messages = (int)cr->n + 1;
    r.tools = NULL; /* a summary, not a step of the work: nothing to call */
    r.n_tools = 0;
    r.think = 0;
    if (!c->seed_set)
        r.sampling.seed = fresh_seed();
    glm_error gerr = {0};
    glm_status st = GLM_ERR_CANCELED;
    if (!(c->o.cancel && *c->o.cancel))
        st = c->src.generate(c->src.self, &r, on_summary_event, s, &gerr);
    if (st == GLM_ERR_CANCELED || s->canceled || strcmp(s->finish, "canceled") == 0 || (c->o.cancel && *c->o.cancel))
        snprintf(s->finish, sizeof s->finish, "canceled");
    else if (st != GLM_OK) {
        snprintf(s->finish, sizeof s->finish, "error");
        if (!s->error[0])
            snprintf(s->error, sizeof s->error, "%s", gerr.message[0] ? gerr.message : "the model failed");
    } else if (!s->finish[0])
        snprintf(s->finish, sizeof s->finish, "stop");
    free(msgs);
    chat_request_free(cr);
    return s->failed ? errbuf_fail(err, errlen, "out of memory") : 0;
}

/* The summary without the whitespace around it (in place); NULL when nothing is left. */
static char *trimmed(char *text, size_t len)
{
    while (len > 0 && (text[len - 1] == ' ' || text[len - 1] == '\n' || text[len - 1] == '\r' || text[len - 1] == '\t'))
        len--;
    text[len] = 0;
    while (*text == ' ' || *text == '\n' || *text == '\r' || *text == '\t')
        text++;
    return *text ? text : NULL;
}

/* Saves CHAT_SUMMARY_PREFIX + summary as a new root user message (the new branch). */
static int save_summary(chat *c, const char *summary, char *err, size_t errlen)
{
    size_t n = strlen(CHAT_SUMMARY_PREFIX) + strlen(summary) + 1;
    char *text = malloc(n);
    if (!text)
        return errbuf_fail(err, errlen, "out of memory");
    snprintf(text, n, "%s%s", CHAT_SUMMARY_PREFIX, summary);
    int rc = save_user(c, 0, text, err, errlen);
    free(text);
    return rc;
}

int chat_compact(chat *c, chat_outcome *out, int *summarised, char *err, size_t errlen)
{
    outcome_init(out);
    *summarised = 0;
    if (!c->conv)
        return errbuf_fail(err, errlen, "there is nothing to summarise in a new conversation");
    conv_messages path;
    if (conv_load_path(c->o.db, c->conv, &path) != 0)
        return db_fail(c, err, errlen, "cannot load the conversation");
    size_t count = path.count;
    conv_messages_free(&path);
    if (count == 0)
        return errbuf_fail(err, errlen, "there is nothing to summarise on this path");
    summary_text s = {.c = c};
    int rc = generate_summary(c, &s, err, errlen);
    out->steps = 1;
    if (rc == 0 && strcmp(s.finish, "stop") != 0) {
        out->finish = strcmp(s.finish, "canceled") == 0 ? "canceled" : strcmp(s.finish, "length") == 0 ? "length" : "error";
        snprintf(out->error, sizeof out->error, "%s",
                 strcmp(s.finish, "length") == 0
                     ? "the summary stopped at the token limit, so nothing was changed; raise it (/set max_tokens N) and /compact again"
                 : strcmp(s.finish, "canceled") == 0 ? "the summary was canceled; the conversation is unchanged"
                 : s.error[0] ? s.error : "the model failed");
    } else if (rc == 0) {
        char *summary = s.buf ? trimmed(s.buf, s.len) : NULL;
        if (!summary) {
            out->finish = "error";
            snprintf(out->error, sizeof out->error, "the model wrote an empty summary; the conversation is unchanged");
        } else if ((rc = save_summary(c, summary, err, errlen)) == 0) {
            out->finish = "stop";
            out->last_message = conv_leaf(c->o.db, c->conv);
            *summarised = (int)count;
        }
    }
    free(s.buf);
    return rc;
}
