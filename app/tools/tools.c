/* tools.c: the tool registry, the approval policy (y / n / always per conversation) and
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
    *n = reg->n;
    if (reg->n == 0)
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

void tool_policy_init(tool_policy *p, config_approval mode, tool_ask_fn ask, void *ask_user)
{
    memset(p, 0, sizeof *p);
    p->mode = mode;
    p->ask = ask;
    p->ask_user = ask_user;
}

void tool_policy_clear(tool_policy *p)
{
    for (int i = 0; i < p->n_always; i++)
        free(p->always[i]);
    free(p->always);
    p->always = NULL;
    p->n_always = 0;
}

static int policy_remember(tool_policy *p, const char *name)
{
    char **grown = realloc(p->always, (size_t)(p->n_always + 1) * sizeof *grown);
    if (!grown)
        return -1;
    p->always = grown;
    grown[p->n_always] = strdup(name);
    if (!grown[p->n_always])
        return -1;
    p->n_always++;
    return 0;
}

int tool_policy_allows(tool_policy *p, const tool_def *def, const char *args_json)
{
    if (!def->risky || p->mode == CONFIG_APPROVAL_AUTO)
        return 1;
    if (p->mode == CONFIG_APPROVAL_DENY || !p->ask)
        return 0;
    for (int i = 0; i < p->n_always; i++)
        if (strcmp(p->always[i], def->name) == 0)
            return 1;
    tool_answer a = p->ask(p->ask_user, def->name, args_json);
    if (a == TOOL_ANSWER_ALWAYS) {
        policy_remember(p, def->name); /* out of memory: it asks again next time */
        return 1;
    }
    return a == TOOL_ANSWER_YES;
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

int tools_call(tool_registry *reg, tool_policy *policy, const char *name, const char *args_json,
               const volatile sig_atomic_t *cancel, tool_result *out)
{
    tool_result_clear(out);
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
    if (!tool_policy_allows(policy, def, text)) {
        cJSON_Delete(args);
        return tool_result_set(out, 1, "error: the user did not allow this call of %s", name);
    }
    int r = def->run(def->ctx, args, cancel, out);
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
