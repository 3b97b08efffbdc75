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
    int approval; /* a tool_approval: how tools_call decided that the call may run (or not) */
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
    /* Optional: what the call will do, readable, for the approval question (malloc'd; NULL
     * when it cannot say: the arguments are shown instead). */
    char *(*preview)(void *ctx, const cJSON *args);
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

/* The user's answer to one approval question, and the scope it grants. */
typedef enum tool_answer {
    TOOL_ANSWER_NO = 0,
    TOOL_ANSWER_YES,          /* once: this call only */
    TOOL_ANSWER_CONVERSATION, /* this tool, until another conversation is opened */
    TOOL_ANSWER_ALWAYS,       /* this tool, from now on (saved in the config file) */
} tool_answer;

/* The scope words every prompt and /tools use. */
#define TOOL_SCOPES_PROMPT "[y] once  [c] this conversation  [a] always for this tool  [n] no"

/* Asks the user about one call; preview says what it will do (readable text, not JSON). */
typedef tool_answer (*tool_ask_fn)(void *user, const char *tool, const char *preview);

/* Saves the tools allowed "always" (names, n of them) where they outlive the process (the
 * config file). 0, or -1 with err. */
typedef int (*tool_save_fn)(void *user, char *const *names, int n, char *err, size_t errlen);

/* How a call's approval was decided (tool_result.approval; tool_approval_name spells it). */
typedef enum tool_approval {
    TOOL_APPROVAL_NOT_NEEDED = 0, /* a safe tool, or an MCP server marked trusted */
    TOOL_APPROVAL_AUTO,           /* approval = auto in the config */
    TOOL_APPROVAL_FLAG,           /* allowed by name on the command line (--allow-tool) */
    TOOL_APPROVAL_ONCE,           /* the user said yes to this call */
    TOOL_APPROVAL_CONVERSATION,   /* allowed for this conversation */
    TOOL_APPROVAL_ALWAYS,         /* allowed always (the config file's always_allow) */
    TOOL_APPROVAL_DECLINED,       /* the user said no */
    TOOL_APPROVAL_NO_TERMINAL,    /* refused: it needs approval and there is nobody to ask */
    TOOL_APPROVAL_DENIED,         /* refused: approval = deny in the config */
} tool_approval;

const char *tool_approval_name(int approval); /* "not_needed", "flag", "no_terminal" ... */

typedef struct tool_names {
    char **v;
    int n;
} tool_names;

/* The approvals of a session: the configured mode, the asker, and the tools allowed by flag,
 * for the current conversation, and always. */
typedef struct tool_policy {
    config_approval mode;
    tool_ask_fn ask; /* NULL: risky calls under ASK are refused (no terminal to ask) */
    void *ask_user;
    tool_save_fn save; /* NULL: "always" lasts for this process only */
    void *save_user;
    tool_names flag, conversation, always;
    char save_err[512]; /* why the last "always" could not be saved; "" when it was */
} tool_policy;

void tool_policy_init(tool_policy *p, config_approval mode, tool_ask_fn ask, void *ask_user);
void tool_policy_clear(tool_policy *p);
/* Adds name to the flag-allowed or always-allowed tools (no saving). 0, or -1 out of memory. */
int tool_policy_allow_by_flag(tool_policy *p, const char *name);
int tool_policy_allow_always(tool_policy *p, const char *name);
/* Forgets the approvals of "this conversation" (another conversation was opened). */
void tool_policy_new_conversation(tool_policy *p);
/* Makes name ask again: removes it from every allowed list (saving "always" when it was
 * there). 0, or -1 with err when the config file could not be written. */
int tool_policy_revoke(tool_policy *p, const char *name, char *err, size_t errlen);
/* How a call of def would be decided now, without asking (for /tools): a tool_approval, with
 * TOOL_APPROVAL_ONCE standing for "asks first". */
tool_approval tool_policy_state(const tool_policy *p, const tool_def *def);
/* Decides a call of def (asking if needed, with preview). Returns the tool_approval; it may
 * run when tool_approval_allows says so. */
tool_approval tool_policy_decide(tool_policy *p, const tool_def *def, const char *preview);
int tool_approval_allows(tool_approval a);

/* Turns every tool on or off for the model (off: none offered, calls refused). */
void tools_set_enabled(tool_registry *reg, int on);
int tools_enabled(const tool_registry *reg);

/* Runs one call the model made: unknown tools, arguments that are not a JSON object, a
 * declined approval and handler failures all become error results for the model (out->approval
 * says how the approval went). Returns 0, or -1 only when out of memory. */
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
