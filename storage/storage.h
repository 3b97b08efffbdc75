/* storage.h: glmchat's saved conversations, byte-exact message parts, reasoning memory,
 * full-text search and transcript export/import, in one SQLite file (the only public header).
 *
 * Model
 *   conversation -> messages (a tree: each has a parent or none; edit/regenerate = a sibling)
 *   message      -> ordered parts (text, reasoning, tool_call, tool_result), bytes kept exactly
 *   A conversation has a "current leaf": the path root -> leaf is what the chat shows and what
 *   the model is sent. msg_append moves the leaf to the new message; conv_set_leaf moves it to
 *   another branch. Old branches are never deleted by editing.
 *
 * Durability
 *   Every call that writes is one transaction (unless the caller opened one with db_begin) and
 *   is on disk when it returns (WAL, synchronous=FULL): a process killed afterwards loses
 *   nothing. A streamed reasoning or text block is saved with one part_append when it ends.
 *
 * Errors
 *   Functions return 0 / an id > 0 on success and -1 on failure; db_errmsg() then holds one
 *   sentence naming the file, the value and what to do. Nothing here prints, exits or aborts.
 *   A handle is used by one thread at a time (the error text lives in it).
 *
 * A turn, as the chat loop does it
 *   db_store *db = db_open(paths.db_file, err, sizeof err);       // once, at start
 *   int64_t conv = conv_latest(db) or conv_create(db, NULL, model);
 *   conv_messages path; conv_load_path(db, conv, &path);           // history to render/send
 *   int64_t u = msg_append(db, conv, conv_leaf(db, conv), MSG_USER, MSG_COMPLETE, NULL);
 *   part_append(db, u, &(part_in){.kind = PART_TEXT, .data = line, .len = n});
 *   int64_t a = msg_append(db, conv, u, MSG_ASSISTANT, MSG_STREAMING, model);
 *   ... on each finished block: part_append(db, a, reasoning / tool_call / text part) ...
 *   ... a tool result is its own message: msg_append(.., a, MSG_TOOL, ..) + PART_TOOL_RESULT
 *   msg_finish(db, a, MSG_COMPLETE or MSG_CANCELED or MSG_ERROR, "stop", &stats);
 *   db_idle(db);                                                    // between turns
 *   Regenerate: msg_append(db, conv, u, MSG_ASSISTANT, ...) again (a sibling of the old
 *   answer). Edit: msg_append(db, conv, parent_of_u, MSG_USER, ...) (a sibling of u).
 *   A message still MSG_STREAMING after a restart was cut off by a crash; its parts are kept.
 *
 * Memory
 *   Whatever a function returns through an out-pointer belongs to the caller and has its
 *   _free function named beside it. Byte buffers (part data, arguments) are also
 *   NUL-terminated for convenience, but may contain NULs: use the length. */
#ifndef GLMCHAT_STORAGE_STORAGE_H
#define GLMCHAT_STORAGE_STORAGE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* ---- the database ------------------------------------------------------------------------ */

typedef struct db_store db_store;

/* The schema version this glmchat writes (PRAGMA user_version). */
#define DB_SCHEMA_VERSION 3
/* The oldest schema a read-only open reads as it is (no migration can run there): the steps
 * after it change only how new rows are numbered, not what reads see. */
#define DB_SCHEMA_READABLE_FROM 2

/* Opens (creating where missing, with parent directories mode 0700) the database at path, or
 * an in-memory one for ":memory:". Refuses, leaving the file byte-for-byte untouched: a file
 * that is not SQLite, a damaged one, another program's SQLite file, and one written by a newer
 * glmchat. Returns the handle, or NULL with the reason in err (errlen bytes, always
 * terminated). */
db_store *db_open(const char *path, char *err, size_t errlen);

/* How db_open_mode opens: NORMAL as db_open; CHECK read-only, and without the quick check
 * at open, for db_integrity_ok to look at a file that may be damaged. */
typedef enum db_open_kind { DB_OPEN_NORMAL, DB_OPEN_CHECK } db_open_kind;
db_store *db_open_mode(const char *path, db_open_kind kind, char *err, size_t errlen);

/* 1 when the handle is read-only (db_open opens so when the file or its directory is not
 * writable, creating no -wal or -shm); its writes fail with a message saying so. */
int db_read_only(const db_store *db);

/* Parts a read-only handle could not add to the search index (searches miss them), or -1. */
int64_t search_unindexed(db_store *db);

/* Closes the handle (NULL is fine). Uncommitted db_begin work is rolled back. */
void db_close(db_store *db);

/* The last failure's sentence; "" after success. Valid until the next call on db. */
const char *db_errmsg(const db_store *db);

/* The path db_open was given. */
const char *db_path(const db_store *db);

/* Groups many writes into one transaction (import, benchmarks, bulk edits): the functions
 * below then join it instead of committing each. db_commit makes it durable; db_rollback
 * drops it. Not nestable: db_begin inside one fails. */
int db_begin(db_store *db);
int db_commit(db_store *db);
int db_rollback(db_store *db);

/* Caps the file at pages pages (PRAGMA max_page_count; a quota, and how tests fill a disk).
 * Writes past it fail with a "full" message and change nothing. */
int db_set_max_pages(db_store *db, int64_t pages);

/* The work kept out of a turn's writes, to run when the chat is idle (a turn is over):
 * adds the parts written since the last call to the search index (part_append does not
 * index, so a streamed part is one small commit), then copies the WAL into the database file
 * (a passive checkpoint; SQLite also does one by itself inside whichever write takes the WAL
 * past 1000 pages). Searching indexes what is pending first, so results are always complete. */
int db_idle(db_store *db);

/* PRAGMA integrity_check plus the FTS5 index's: 1 when "ok", 0 when damaged (the first problem in db_errmsg),
 * -1 when it could not run. */
int db_integrity_ok(db_store *db);

/* The time storage stamps rows with: milliseconds since the Unix epoch (UTC). */
int64_t db_now_ms(void);

/* ---- conversations ----------------------------------------------------------------------- */

/* Creates a conversation; title and model may be NULL. Returns its id (> 0) or -1. */
int64_t conv_create(db_store *db, const char *title, const char *model);

/* Deletes a conversation with its messages, parts, search index rows and reasoning memory, in
 * one transaction (or the caller's db_begin one). 0, or -1 (unknown id included). */
int conv_delete(db_store *db, int64_t conv);

/* 1 when the conversation exists, 0 when not, -1 on error. */
int conv_exists(db_store *db, int64_t conv);

/* The most recently updated conversation's id, 0 when there is none, -1 on error. */
int64_t conv_latest(db_store *db);

/* Text fields of a conversation. set_* take NULL to clear. get_* return 0 with *out a
 * malloc'd copy (NULL when unset), or -1. settings is JSON text, stored as given. */
int conv_set_title(db_store *db, int64_t conv, const char *title);
int conv_get_title(db_store *db, int64_t conv, char **out);
int conv_set_model(db_store *db, int64_t conv, const char *model);
int conv_get_model(db_store *db, int64_t conv, char **out);
int conv_set_settings(db_store *db, int64_t conv, const char *settings_json);
int conv_get_settings(db_store *db, int64_t conv, char **out);
int conv_set_system_prompt(db_store *db, int64_t conv, const char *prompt);
int conv_get_system_prompt(db_store *db, int64_t conv, char **out);

/* The current leaf (0 when the conversation has no message yet), or -1. */
int64_t conv_leaf(db_store *db, int64_t conv);
/* Makes msg (a message of conv) the current leaf: the chat shows root -> msg. msg 0 empties
 * the path (the next message is a new root; the old ones stay as branches). */
int conv_set_leaf(db_store *db, int64_t conv, int64_t msg);

/* Display strings (title, preview, model here; title and snippet in search_hit) are valid
 * UTF-8: bytes that are not become U+FFFD. The exact bytes are in the messages. */
typedef struct conv_summary {
    int64_t id;
    char *title;        /* NULL when never set */
    char *preview;      /* the first user text, up to 80 bytes cut at a UTF-8 boundary; or NULL */
    char *model;        /* or NULL */
    int64_t created_at; /* ms */
    int64_t updated_at; /* ms */
    int64_t messages;   /* every message of every branch */
} conv_summary;

/* Every conversation, most recently updated first. */
int conv_list(db_store *db, conv_summary **out, size_t *count);
void conv_list_free(conv_summary *list, size_t count);

/* ---- messages ---------------------------------------------------------------------------- */

typedef enum msg_role { MSG_SYSTEM, MSG_USER, MSG_ASSISTANT, MSG_TOOL } msg_role;

typedef enum msg_status {
    MSG_STREAMING, /* being written; left so by a crash */
    MSG_COMPLETE,
    MSG_CANCELED,  /* the user stopped it; its parts are kept */
    MSG_ERROR,
} msg_status;

const char *msg_role_name(msg_role role);       /* "user" ... */
int msg_role_parse(const char *name);           /* the role, or -1 */
const char *msg_status_name(msg_status status); /* "complete" ... */
int msg_status_parse(const char *name);         /* the status, or -1 */

/* Adds a message to conv under parent (0: a root message) and makes it the current leaf.
 * A second child of the same parent is how edit and regenerate branch. model may be NULL.
 * Returns the message id (> 0) or -1. */
int64_t msg_append(db_store *db, int64_t conv, int64_t parent, msg_role role, msg_status status,
                   const char *model);

/* What a finished generation reports; -1 in a number means "not known". */
typedef struct msg_stats {
    int64_t prompt_tokens, completion_tokens, reasoning_tokens;
    int64_t ttft_ms, prompt_ms, gen_ms;
} msg_stats;
#define MSG_STATS_UNKNOWN {-1, -1, -1, -1, -1, -1}

/* Sets a message's final status, finish reason (e.g. "stop", "length", "tool_calls"; may be
 * NULL), counts and timings (stats may be NULL), and stamps finished_at. */
int msg_finish(db_store *db, int64_t msg, msg_status status, const char *finish_reason,
               const msg_stats *stats);

/* Ends the messages of conv left MSG_STREAMING by a process that died while writing them
 * (SIGKILL, a crash): MSG_CANCELED with finish reason "interrupted", parts kept. Call it when
 * a conversation is opened to go on. Returns how many were marked, or -1. */
int msg_end_interrupted(db_store *db, int64_t conv);

/* The leaf reached from msg by following its newest child at every step (msg itself when it
 * has none): where to put the current leaf when the user switches to msg's branch. */
int64_t msg_descend(db_store *db, int64_t msg);

/* The children of msg in creation order (msg 0: the roots of conv). *ids is malloc'd. */
int msg_children(db_store *db, int64_t conv, int64_t msg, int64_t **ids, size_t *count);

/* Message numbers: every output names a message by its number in its conversation, 1..N in
 * creation order (the order of the database ids, and the ids JSON export writes), so an id means
 * the same in jsonl, search, --from, /branch and export, and survives export and import.
 * msg_number: msg's number (> 0), 0 when msg is not in conv, -1 on error.
 * msg_by_number: the database id of message number n of conv, 0 when there is none, -1 on error. */
int64_t msg_number(db_store *db, int64_t conv, int64_t msg);
int64_t msg_by_number(db_store *db, int64_t conv, int64_t n);

/* ---- parts ------------------------------------------------------------------------------- */

typedef enum part_kind { PART_TEXT, PART_REASONING, PART_TOOL_CALL, PART_TOOL_RESULT } part_kind;

const char *part_kind_name(part_kind kind); /* "text", "reasoning", "tool_call", "tool_result" */
int part_kind_parse(const char *name);      /* the kind, or -1 */

/* One part to append. data: the text, reasoning, or tool result (any bytes, len given);
 * tool_call: name, call_id and args (the arguments JSON exactly as the model wrote it);
 * tool_result: call_id (and name) of the call it answers, is_error when the tool failed. */
typedef struct part_in {
    part_kind kind;
    const char *data;
    size_t len;
    const char *name;    /* or NULL */
    const char *call_id; /* or NULL */
    const char *args;    /* or NULL */
    size_t args_len;
    int is_error;
} part_in;

/* Appends a part after the message's last one, durably (own transaction). Returns its id. */
int64_t part_append(db_store *db, int64_t msg, const part_in *part);

/* ---- loading ----------------------------------------------------------------------------- */

typedef struct part {
    int64_t id;
    part_kind kind;
    char *data;  /* len bytes (+ a NUL); "" when none */
    size_t len;
    char *name;  /* or NULL */
    char *call_id;
    char *args;  /* args_len bytes (+ a NUL), or NULL */
    size_t args_len;
    int is_error;
    int64_t created_at; /* ms */
} part;

typedef struct msg {
    int64_t id, parent; /* parent 0 for a root */
    msg_role role;
    msg_status status;
    char *model;         /* or NULL */
    char *finish_reason; /* or NULL */
    int64_t created_at, finished_at; /* ms; finished_at -1 when not finished */
    msg_stats stats;
    part *parts;
    size_t nparts;
} msg;

typedef struct conv_messages {
    int64_t conv;
    msg *msgs;
    size_t count;
} conv_messages;

/* The path root -> current leaf with every part: what the chat renders and sends. */
int conv_load_path(db_store *db, int64_t conv, conv_messages *out);
/* Every message of every branch, in creation order (parents before children). */
int conv_load_tree(db_store *db, int64_t conv, conv_messages *out);
void conv_messages_free(conv_messages *m);

/* ---- reasoning memory -------------------------------------------------------------------- */

/* The model's reasoning kept for GLM's interleaved/preserved thinking, keyed by a conversation
 * signature (the caller's hash of the prompt prefix) and the tool call ids it led to (e.g.
 * "call_1,call_2"; "" for none). Least recently used entries are evicted past either limit. */
#define MEM_DEFAULT_MAX_ENTRIES 4096
#define MEM_DEFAULT_MAX_BYTES (64 * 1024 * 1024)

/* Sets the limits (0 keeps the current one) and evicts down to them. */
int mem_set_limits(db_store *db, int64_t max_entries, int64_t max_bytes);

/* Stores (or replaces) an entry for conversation conv (0: none; deleting conv deletes the
 * entry) and marks it most recently used; then evicts. An entry larger than max_bytes by itself
 * is refused with a message. */
int mem_put(db_store *db, int64_t conv, const char *signature, const char *call_ids, const char *text,
            size_t len);

/* 1 with *text (malloc'd, len bytes + NUL) and the entry marked used; 0 when absent; -1. */
int mem_get(db_store *db, const char *signature, const char *call_ids, char **text, size_t *len);

/* Marks an entry used without reading it: 1 when found, 0 when absent, -1 on error. */
int mem_touch(db_store *db, const char *signature, const char *call_ids);

/* How many entries and reasoning bytes the memory holds. */
int mem_stats(db_store *db, int64_t *entries, int64_t *bytes);

/* ---- search ------------------------------------------------------------------------------ */

typedef struct search_hit {
    int64_t conv, msg, part;
    int64_t number;    /* the message's number in its conversation (msg_number), what users see */
    part_kind kind;    /* PART_TEXT or PART_REASONING */
    msg_role role;
    char *title;       /* the conversation's title, or NULL */
    char *snippet;     /* matched words between [ and ], cut with "..." */
    int64_t created_at;
} search_hit;

/* Full-text search (FTS5) over text and reasoning parts. query is plain words, all of which
 * must occur (any case, diacritics ignored); quotes and operators are taken literally.
 * Best matches (bm25) first, at most limit (0: 50), ranked among the newest 4000 matching
 * parts so that a word found everywhere still answers in milliseconds. An empty query finds
 * nothing. */
int search_parts(db_store *db, const char *query, size_t limit, search_hit **hits, size_t *count);
void search_hits_free(search_hit *hits, size_t count);

/* ---- export and import (formats: storage/FORMATS.md) ------------------------------------- */

typedef enum export_format { EXPORT_MD, EXPORT_JSON, EXPORT_HTML } export_format;

int export_format_parse(const char *name); /* "md", "json", "html" -> format, else -1 */
/* The format a file's name says: .md/.markdown, .json, .html/.htm (any case), else -1. */
int export_format_of_path(const char *path);

/* Writes one conversation (conv > 0) or all of them (conv == 0) to out. JSON holds every
 * branch and byte; Markdown and HTML show the current path. For a buffer, use
 * open_memstream. */
int export_write(db_store *db, int64_t conv, export_format format, FILE *out);

/* Imports JSON that export_write wrote (one conversation or all), in one transaction: all
 * or nothing. *ids (malloc'd) gets the new conversation ids in file order. Errors name the
 * JSON path of the bad field, e.g. "messages[3].parts[0].kind". */
int import_json(db_store *db, const char *json, size_t len, int64_t **ids, size_t *count);

#endif
