/* tools.c: the tool registry, the approval policy (once / this conversation / always) and
 * tools_call, which turns every failure of a call into a result the model can read. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app/tools/tools.h"

struct tool_registry {
    tool_def *defs;
    glm_tool *glm;
    int n;
    int off; /* /tools off: nothing offered, calls refused */
};

int tool_result_set(tool_result *r, int is_error, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *text = NULL;
    int n = vasprintf(&text, fmt, ap);
    va_end(ap);
    if (n < 0)
        return -1;
    tool_result_take(r, is_error, text);
    return 0;
}

void tool_result_take(tool_result *r, int is_error, char *text)
{
    free(r->text);
    r->text = text;
    r->is_error = is_error;
}

void tool_result_clear(tool_result *r)
{
    free(r->text);
    r->text = NULL;
    r->is_error = 0;
    r->approval = TOOL_APPROVAL_NOT_NEEDED;
}

tool_registry *tools_new(void)
{
    return calloc(1, sizeof(tool_registry));
}

static void def_free(tool_def *d)
{
    free((char *)d->name);
    free((char *)d->description);
    free((char *)d->schema_json);
}

void tools_free(tool_registry *reg)
{
    if (!reg)
        return;
    for (int i = 0; i < reg->n; i++)
        def_free(&reg->defs[i]);
    free(reg->defs);
    free(reg->glm);
    free(reg);
}

static int valid_tool_name(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 64)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char ch = s[i];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
              ch == '_' || ch == '-'))
            return 0;
    }
    return 1;
}

int tools_add(tool_registry *reg, const tool_def *def, char *err, size_t errlen)
{
    if (!def->name || !valid_tool_name(def->name)) {
        snprintf(err, errlen, "the tool name '%s' is not 1-64 of A-Z a-z 0-9 _ -",
                 def->name ? def->name : "(null)");
        return -1;
    }
    if (tools_find(reg, def->name)) {
        snprintf(err, errlen, "two tools are named '%s'; rename one (MCP tools are SERVER__TOOL)",
                 def->name);
        return -1;
    }
    cJSON *schema = cJSON_Parse(def->schema_json ? def->schema_json : "");
    int is_obj = cJSON_IsObject(schema);
    cJSON_Delete(schema);
    if (!is_obj) {
        snprintf(err, errlen, "the schema of tool '%s' is not a JSON object", def->name);
        return -1;
    }
    tool_def *grown = realloc(reg->defs, (size_t)(reg->n + 1) * sizeof *grown);
    if (!grown) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    reg->defs = grown;
    tool_def *d = &grown[reg->n];
    *d = *def;
    d->name = strdup(def->name);
    d->description = strdup(def->description ? def->description : "");
    d->schema_json = strdup(def->schema_json);
    if (!d->name || !d->description || !d->schema_json) {
        def_free(d);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    reg->n++;
    free(reg->glm);
    reg->glm = NULL;
    return 0;
}

int tools_count(const tool_registry *reg)
{
    return reg->n;
}

const tool_def *tools_get(const tool_registry *reg, int i)
{
    return i >= 0 && i < reg->n ? &reg->defs[i] : NULL;
}

const tool_def *tools_find(const tool_registry *reg, const char *name)
{
    for (int i = 0; i < reg->n; i++)
        if (strcmp(reg->defs[i].name, name) == 0)
            return &reg->defs[i];
    return NULL;
}

const glm_tool *tools_as_glm(tool_registry *reg, int *n)
{
    *n = reg->off ? 0 : reg->n;
    if (*n == 0)
        return NULL;
    if (!reg->glm) {
        reg->glm = calloc((size_t)reg->n, sizeof *reg->glm);
        if (!reg->glm) {
            *n = 0;
            return NULL;
        }
        for (int i = 0; i < reg->n; i++) {
            reg->glm[i].name = reg->defs[i].name;
            reg->glm[i].description = reg->defs[i].description;
            reg->glm[i].parameters_json = reg->defs[i].schema_json;
        }
    }
    return reg->glm;
}

/* ---- approval ------------------------------------------------------------------------------ */

const char *tool_approval_name(int approval)
{
    static const char *const names[] = {"not_needed", "auto",     "flag",        "once",  "conversation",
                                        "always",     "declined", "no_terminal", "denied"};
    return approval >= 0 && approval < (int)(sizeof names / sizeof names[0]) ? names[approval] : "?";
}

int tool_approval_allows(tool_approval a)
{
    return a <= TOOL_APPROVAL_ALWAYS;
}

static int names_has(const tool_names *l, const char *name)
{
    for (int i = 0; i < l->n; i++)
        if (strcmp(l->v[i], name) == 0)
            return 1;
    return 0;
}

static int names_add(tool_names *l, const char *name)
{
    if (names_has(l, name))
        return 0;
    char *copy = strdup(name);
    char **grown = copy ? realloc(l->v, (size_t)(l->n + 1) * sizeof *grown) : NULL;
    if (!grown) {
        free(copy);
        return -1;
    }
    l->v = grown;
    l->v[l->n++] = copy;
    return 0;
}

/* Removes name; 1 when it was there. */
static int names_remove(tool_names *l, const char *name)
{
    for (int i = 0; i < l->n; i++)
        if (strcmp(l->v[i], name) == 0) {
            free(l->v[i]);
            l->v[i] = l->v[--l->n];
            return 1;
        }
    return 0;
}

static void names_clear(tool_names *l)
{
    for (int i = 0; i < l->n; i++)
        free(l->v[i]);
    free(l->v);
    l->v = NULL;
    l->n = 0;
}

void tool_policy_init(tool_policy *p, config_approval mode, tool_ask_fn ask, void *ask_user)
{
    memset(p, 0, sizeof *p);
    p->mode = mode;
    p->ask = ask;
    p->ask_user = ask_user;
}

void tool_policy_clear(tool_policy *p)
{
    names_clear(&p->flag);
    names_clear(&p->conversation);
    names_clear(&p->always);
}

int tool_policy_allow_by_flag(tool_policy *p, const char *name)
{
    return names_add(&p->flag, name);
}

int tool_policy_allow_always(tool_policy *p, const char *name)
{
    return names_add(&p->always, name);
}

void tool_policy_new_conversation(tool_policy *p)
{
    names_clear(&p->conversation);
}

static int save_always(tool_policy *p, char *err, size_t errlen)
{
    if (!p->save)
        return 0;
    return p->save(p->save_user, p->always.v, p->always.n, err, errlen);
}

int tool_policy_revoke(tool_policy *p, const char *name, char *err, size_t errlen)
{
    names_remove(&p->flag, name);
    names_remove(&p->conversation, name);
    if (names_remove(&p->always, name))
        return save_always(p, err, errlen);
    return 0;
}

tool_approval tool_policy_state(const tool_policy *p, const tool_def *def)
{
    if (!def->risky)
        return TOOL_APPROVAL_NOT_NEEDED;
    if (p->mode == CONFIG_APPROVAL_DENY)
        return TOOL_APPROVAL_DENIED;
    if (p->mode == CONFIG_APPROVAL_AUTO)
        return TOOL_APPROVAL_AUTO;
    if (names_has(&p->flag, def->name))
        return TOOL_APPROVAL_FLAG;
    if (names_has(&p->always, def->name))
        return TOOL_APPROVAL_ALWAYS;
    if (names_has(&p->conversation, def->name))
        return TOOL_APPROVAL_CONVERSATION;
    return p->ask ? TOOL_APPROVAL_ONCE : TOOL_APPROVAL_NO_TERMINAL;
}

/* Remembers an answer's scope; an "always" that cannot be saved lasts for this conversation,
 * and save_err says why. */
static tool_approval remember(tool_policy *p, const char *name, tool_answer a)
{
    if (a == TOOL_ANSWER_YES)
        return TOOL_APPROVAL_ONCE;
    if (a == TOOL_ANSWER_ALWAYS && names_add(&p->always, name) == 0) {
        if (save_always(p, p->save_err, sizeof p->save_err) == 0) {
            p->save_err[0] = 0;
            return TOOL_APPROVAL_ALWAYS;
        }
        names_remove(&p->always, name);
    }
    names_add(&p->conversation, name); /* out of memory: it asks again next time */
    return TOOL_APPROVAL_CONVERSATION;
}

tool_approval tool_policy_decide(tool_policy *p, const tool_def *def, const char *preview)
{
    tool_approval state = tool_policy_state(p, def);
    if (state != TOOL_APPROVAL_ONCE)
        return state;
    tool_answer a = p->ask(p->ask_user, def->name, preview);
    if (a == TOOL_ANSWER_NO)
        return TOOL_APPROVAL_DECLINED;
    return remember(p, def->name, a);
}

void tools_set_enabled(tool_registry *reg, int on)
{
    reg->off = !on;
}

int tools_enabled(const tool_registry *reg)
{
    return !reg->off;
}

/* ---- calls --------------------------------------------------------------------------------- */

static int unknown_tool(const tool_registry *reg, const char *name, tool_result *out)
{
    size_t cap = 64;
    for (int i = 0; i < reg->n; i++)
        cap += strlen(reg->defs[i].name) + 2;
    char *list = malloc(cap);
    if (!list)
        return -1;
    list[0] = 0;
    for (int i = 0; i < reg->n; i++) {
        if (i)
            strcat(list, ", ");
        strcat(list, reg->defs[i].name);
    }
    int r = tool_result_set(out, 1, "error: there is no tool named '%.100s'; the tools are: %s", name,
                            reg->n ? list : "(none)");
    free(list);
    return r;
}

/* The approval question's text: the tool's own preview, else the arguments as JSON. */
static tool_approval decide(tool_policy *policy, const tool_def *def, const cJSON *args, const char *args_json)
{
    if (tool_policy_state(policy, def) != TOOL_APPROVAL_ONCE)
        return tool_policy_state(policy, def);
    char *preview = def->preview ? def->preview(def->ctx, args) : NULL;
    tool_approval a = tool_policy_decide(policy, def, preview ? preview : args_json);
    free(preview);
    return a;
}

static int refuse(tool_result *out, const char *name, tool_approval a)
{
    if (a == TOOL_APPROVAL_NO_TERMINAL)
        return tool_result_set(out, 1,
                               "error: %s needs the user's approval and there is no terminal to ask; it did not "
                               "run (the user can allow it with --allow-tool %s)",
                               name, name);
    if (a == TOOL_APPROVAL_DENIED)
        return tool_result_set(out, 1, "error: %s is refused by the configuration (approval = deny)", name);
    return tool_result_set(out, 1, "error: the user did not allow this call of %s", name);
}

int tools_call(tool_registry *reg, tool_policy *policy, const char *name, const char *args_json,
               const volatile sig_atomic_t *cancel, tool_result *out)
{
    tool_result_clear(out);
    if (reg->off)
        return tool_result_set(out, 1, "error: the user turned tools off; %s did not run", name ? name : "?");
    const tool_def *def = tools_find(reg, name ? name : "");
    if (!def)
        return unknown_tool(reg, name ? name : "", out);
    const char *text = args_json && *args_json ? args_json : "{}";
    cJSON *args = cJSON_Parse(text);
    if (!cJSON_IsObject(args)) {
        cJSON_Delete(args);
        return tool_result_set(out, 1, "error: the arguments of %s must be a JSON object, not: %.200s",
                               name, text);
    }
    tool_approval approval = decide(policy, def, args, text);
    if (!tool_approval_allows(approval)) {
        cJSON_Delete(args);
        int r = refuse(out, name, approval);
        out->approval = approval;
        return r;
    }
    int r = def->run(def->ctx, args, cancel, out);
    out->approval = approval;
    cJSON_Delete(args);
    if (r != 0)
        return -1;
    if (!out->text)
        return tool_result_set(out, 0, "(no output)");
    return 0;
}

/* ---- argument helpers ------------------------------------------------------------------------ */

const char *tool_arg_string(const cJSON *args, const char *key, int required, tool_result *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(args, key);
    if (cJSON_IsString(v) && v->valuestring)
        return v->valuestring;
    if (!v || cJSON_IsNull(v)) {
        if (required)
            tool_result_set(out, 1, "error: the argument '%s' is required", key);
        return NULL;
    }
    tool_result_set(out, 1, "error: the argument '%s' must be a string", key);
    return NULL;
}

int tool_arg_int(const cJSON *args, const char *key, long long def, long long min, long long max,
                 long long *value, tool_result *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(args, key);
    if (!v || cJSON_IsNull(v)) {
        *value = def;
        return 0;
    }
    double d = 0;
    int is_number = 0;
    if (cJSON_IsNumber(v)) {
        d = v->valuedouble;
        is_number = 1;
    } else if (cJSON_IsString(v) && v->valuestring) {
        char *end;
        d = strtod(v->valuestring, &end); /* the model sometimes quotes numbers */
        is_number = end != v->valuestring && *end == 0;
    }
    if (!is_number || !(d >= (double)min && d <= (double)max) || d != floor(d)) {
        tool_result_set(out, 1, "error: the argument '%s' must be a whole number from %lld to %lld", key,
                        min, max);
        return -1;
    }
    *value = (long long)d;
    return 0;
}
