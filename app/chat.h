/* chat.h: one conversation's turns: save the user message, build the request from the stored
 * path (kept reasoning, restored from reasoning memory where a step lacks it), generate, stream
 * events to the view and to storage, run tool calls, append results, loop until the model answers.
 *
 * A turn, step by step:
 *   1. the user message is appended (committed before generation starts);
 *   2. the path root -> leaf becomes a glm_request: the conversation's system prompt, every
 *      message with its text, its reasoning byte-exact, its tool calls and results; a tool-
 *      calling step stored without reasoning gets it back from reasoning memory;
 *   3. an assistant message is appended as "streaming"; events go to the sink as they come and
 *      to storage as parts finish (a reasoning or text block when the next kind starts, a
 *      tool call when its arguments are complete);
 *   4. the message is finished (complete / canceled / error, with the finish reason and the
 *      engine's numbers); a tool-calling step's reasoning is put in reasoning memory;
 *   5. each call runs through the tool registry (approval, errors and timeouts become results),
 *      each result is appended as a tool message, and the loop goes back to 2 - at most
 *      max_steps times, then the turn ends with "tool_limit".
 * Cancellation (the cancel flag, or the sink's event callback returning nonzero) keeps what
 * was written, marked canceled. */
#ifndef GLMCHAT_APP_CHAT_H
#define GLMCHAT_APP_CHAT_H

#include <signal.h>
#include <stdint.h>

#include "app/config.h"
#include "app/tools/tools.h"
#include "engine/glm.h"
#include "storage/storage.h"

/* Where replies come from: the engine's session, or (tests only) recorded replies. */
typedef struct chat_source {
    glm_status (*generate)(void *self, const glm_request *r, glm_event_fn on_event, void *user,
                           glm_error *err);
    void (*cancel)(void *self); /* async-signal-safe; may be NULL */
    /* The prompt tokens r would take and the context they must fit; NULL: not known (a message
     * is then saved without the check, and an over-long prompt fails when generating). */
    glm_status (*measure)(void *self, const glm_request *r, int *prompt_tokens, int *context,
                          glm_error *err);
    void *self;
    const char *model_name;     /* stored with each reply */
    int context_window;         /* the tokens a conversation may hold; 0: not known */
} chat_source;

/* What the chat tells its view while a turn runs. Every member may be NULL. */
typedef struct chat_sink {
    void (*user)(void *u, int64_t msg, const char *text);
    void (*assistant)(void *u, int64_t msg);
    /* Engine events as they arrive (call ids filled in). Nonzero cancels the reply. */
    int (*event)(void *u, const glm_event *ev);
    /* A call is about to run (approval, if asked, comes after this and before the result). */
    void (*tool_start)(void *u, const char *call_id, const char *name, const char *args_json);
    void (*tool_result)(void *u, const char *call_id, const char *name, const tool_result *r);
    void *u;
} chat_sink;

typedef struct chat_options {
    const app_config *cfg;        /* sampling defaults, think, effort, system prompt */
    db_store *db;                 /* where the conversation lives (":memory:" for --no-save) */
    tool_registry *tools;         /* NULL: no tools offered */
    tool_policy *policy;          /* approvals; required when tools is set */
    int max_steps;                /* model replies per turn; 0: 32 */
    const volatile sig_atomic_t *cancel; /* nonzero: stop the turn (SIGINT) */
} chat_options;

/* How a turn ended. */
typedef struct chat_outcome {
    const char *finish;   /* "stop", "length", "canceled", "error", "tool_limit" */
    int64_t last_message; /* the last assistant message */
    int steps;            /* model replies */
    int tool_calls;
    char error[1024];     /* finish "error": what failed */
    int peer_failed;      /* finish "error" because the worker (--peer) failed: the next turn
                             connects to it again */
} chat_outcome;

typedef struct chat chat;

chat *chat_new(const chat_options *o, const chat_source *src, const chat_sink *sink, char *err,
               size_t errlen);
void chat_free(chat *c);

/* Opens conversation id (an error naming it when there is none), or starts a new one for id 0
 * (created when the first message is saved). Loads its think/effort/system prompt settings. */
int chat_open(chat *c, int64_t id, char *err, size_t errlen);
int64_t chat_conversation(const chat *c); /* 0 until the first message is saved */

/* Per-conversation settings, saved with the conversation (once it exists). */
int chat_set_think(chat *c, int think, char *err, size_t errlen);
int chat_set_effort(chat *c, glm_effort effort, char *err, size_t errlen);
int chat_set_system_prompt(chat *c, const char *prompt, char *err, size_t errlen);
int chat_think(const chat *c);
glm_effort chat_effort(const chat *c);
/* Sampling for this conversation's replies (cfg's, overridable per run, e.g. --max-tokens). */
glm_sampling *chat_sampling(chat *c);
/* Whether replies use chat_sampling's seed (1) or a fresh one each (0); set by `seed` in the
 * config, --seed and /set seed. */
void chat_fix_seed(chat *c, int fixed);
int chat_seed_fixed(const chat *c);
/* The system prompt the next request carries, or NULL for none. */
const char *chat_system_prompt(const chat *c);

/* One turn for the user's text. 0 when the turn ran (whatever its finish; see out), -1 when
 * it could not (storage failed; err says why). */
int chat_turn(chat *c, const char *text, chat_outcome *out, char *err, size_t errlen);
/* Generates a new reply to the last user message, as a sibling of the old one. */
int chat_retry(chat *c, chat_outcome *out, char *err, size_t errlen);
/* Replaces the last user message by text (a sibling branch) and answers it. */
int chat_edit(chat *c, const char *text, chat_outcome *out, char *err, size_t errlen);
/* Moves the conversation to message msg: the next turn continues from there (a branch). */
int chat_branch(chat *c, int64_t msg, char *err, size_t errlen);
/* Takes message number n (as numbered in the conversation) and everything after it off the
 * current path: the path ends at its parent (empty for a first message); nothing is deleted,
 * so /branch still reaches it. Returns the number of the new last message (0: none), or -1. */
int64_t chat_drop(chat *c, int64_t n, char *err, size_t errlen);

/* /compact: asks the model (one generation, thinking and tools off) to summarise the current
 * path, then starts a new branch - a root message of the same conversation - whose first user
 * message is CHAT_SUMMARY_PREFIX and the summary; the next turn continues from it, and the old
 * path stays reachable as the other alternative at the root (chat_branches.h). Events go to the
 * sink as a reply's do. 0 when the generation ran (out->finish: only "stop" made the branch, and
 * *summarised is then the number of messages the summary replaces; "length" and "error" leave
 * the conversation as it was, with out->error saying why), -1 when it could not (err). */
#define CHAT_SUMMARY_PREFIX "Summary of the earlier conversation: "
int chat_compact(chat *c, chat_outcome *out, int *summarised, char *err, size_t errlen);

/* A request built from the current path (tests and `render`-like tools): fills *r, valid until
 * chat_request_free. */
typedef struct chat_request chat_request;
chat_request *chat_build_request(chat *c, char *err, size_t errlen);
const glm_request *chat_request_get(const chat_request *cr);
void chat_request_free(chat_request *cr);

#endif
