/* tools.h: the tools a conversation offers the model: a registry of name, description, JSON
 * schema and handler, the approval policy for risky tools, and one call -> one text result. */
#ifndef GLMCHAT_APP_TOOLS_TOOLS_H
#define GLMCHAT_APP_TOOLS_TOOLS_H

#include <signal.h>
#include <stddef.h>

#include <cjson/cJSON.h>

#include "app/config.h"
#include "engine/glm.h"

/* What the model reads back. text is owned by the result (tool_result_clear frees it). */
typedef struct tool_result {
    char *text;
    int is_error; /* 1: the call failed; text says why */
} tool_result;

/* Sets r to a formatted message (is_error as given). 0, or -1 when out of memory. */
int tool_result_set(tool_result *r, int is_error, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Takes ownership of text (malloc'd). */
void tool_result_take(tool_result *r, int is_error, char *text);
void tool_result_clear(tool_result *r);

/* A handler: args is the parsed argument object; cancel, when set, asks it to stop early.
 * It fills out and returns 0; -1 only when it could not even say why (out of memory). */
typedef int (*tool_fn)(void *ctx, const cJSON *args, const volatile sig_atomic_t *cancel,
                       tool_result *out);

typedef struct tool_def {
    const char *name;        /* 1-64 of [A-Za-z0-9_-] */
    const char *description;
    const char *schema_json; /* JSON schema of the arguments (an object schema) */
    int risky;               /* 1: asks for approval under CONFIG_APPROVAL_ASK */
    tool_fn run;
    void *ctx;
} tool_def;

typedef struct tool_registry tool_registry;

tool_registry *tools_new(void);
void tools_free(tool_registry *reg);

/* Copies def's strings. Fails (-1, err) on a bad name, a schema that is not a JSON object,
 * or a name already taken. */
int tools_add(tool_registry *reg, const tool_def *def, char *err, size_t errlen);
int tools_count(const tool_registry *reg);
const tool_def *tools_get(const tool_registry *reg, int i);
const tool_def *tools_find(const tool_registry *reg, const char *name);
/* The tools as the engine's glm_tool array, valid while reg lives and is unchanged. */
const glm_tool *tools_as_glm(tool_registry *reg, int *n);

/* ---- approval ------------------------------------------------------------------------------ */

typedef enum tool_answer { TOOL_ANSWER_NO = 0, TOOL_ANSWER_YES, TOOL_ANSWER_ALWAYS } tool_answer;

/* Asks the user about one call (y / n / always for this conversation). */
typedef tool_answer (*tool_ask_fn)(void *user, const char *tool, const char *args_json);

/* One conversation's approvals: the configured mode, the asker, and the tools the user
 * answered "always" to. */
typedef struct tool_policy {
    config_approval mode;
    tool_ask_fn ask;  /* NULL: risky calls under ASK are declined */
    void *ask_user;
    char **always;
    int n_always;
} tool_policy;

void tool_policy_init(tool_policy *p, config_approval mode, tool_ask_fn ask, void *ask_user);
void tool_policy_clear(tool_policy *p);
/* 1 when a call of def may run now (asking if needed), 0 when it may not. */
int tool_policy_allows(tool_policy *p, const tool_def *def, const char *args_json);

/* Runs one call the model made: unknown tools, arguments that are not a JSON object, a
 * declined approval and handler failures all become error results for the model. Returns 0,
 * or -1 only when out of memory. */
int tools_call(tool_registry *reg, tool_policy *policy, const char *name, const char *args_json,
               const volatile sig_atomic_t *cancel, tool_result *out);

/* ---- argument helpers for handlers ------------------------------------------------------- */

/* A string argument: its value, or NULL (with an error result in out when required). */
const char *tool_arg_string(const cJSON *args, const char *key, int required, tool_result *out);
/* An integer argument within [min, max]; def when absent. -1 with an error result when the
 * value is not a whole number in range. */
int tool_arg_int(const cJSON *args, const char *key, long long def, long long min, long long max,
                 long long *value, tool_result *out);

#endif
