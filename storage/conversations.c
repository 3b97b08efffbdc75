/* conversations.c: conversations, the message tree (branches for edit and regenerate, the
 * current leaf) and ordered byte-exact parts: creating, updating, listing and loading them. */
#include <stdlib.h>
#include <string.h>

#include "base/utf8.h"
#include "storage/db_internal.h"

static const char *const role_names[] = {"system", "user", "assistant", "tool"};
static const char *const status_names[] = {"streaming", "complete", "canceled", "error"};
static const char *const kind_names[] = {"text", "reasoning", "tool_call", "tool_result"};

#define COUNT_OF(a) (sizeof(a) / sizeof((a)[0]))

static int name_index(const char *const *names, size_t n, const char *name)
{
    for (size_t i = 0; name && i < n; i++)
        if (strcmp(names[i], name) == 0)
            return (int)i;
    return -1;
}

const char *msg_role_name(msg_role role)
{
    return (unsigned)role < COUNT_OF(role_names) ? role_names[role] : "?";
}

int msg_role_parse(const char *name)
{
    return name_index(role_names, COUNT_OF(role_names), name);
}

const char *msg_status_name(msg_status status)
{
    return (unsigned)status < COUNT_OF(status_names) ? status_names[status] : "?";
}

int msg_status_parse(const char *name)
{
    return name_index(status_names, COUNT_OF(status_names), name);
}

const char *part_kind_name(part_kind kind)
{
    return (unsigned)kind < COUNT_OF(kind_names) ? kind_names[kind] : "?";
}

int part_kind_parse(const char *name)
{
    return name_index(kind_names, COUNT_OF(kind_names), name);
}

/* ---- conversations ----------------------------------------------------------------------- */

int64_t conv_create(db_store *db, const char *title, const char *model)
{
    db_clear_error(db);
    sqlite3_stmt *st = db_stmt(db, STMT_CONV_CREATE,
                               "INSERT INTO conversation(title, model, created_at, updated_at) "
                               "VALUES (?1, ?2, ?3, ?3)");
    if (!st)
        return -1;
    db_bind_text_or_null(st, 1, title);
    db_bind_text_or_null(st, 2, model);
    sqlite3_bind_int64(st, 3, db_now_ms());
    if (db_step_done(db, st, "creating a conversation") != 0)
        return -1;
    return sqlite3_last_insert_rowid(db->sql);
}

/* Runs one write statement with conv bound as ?1 (and text as ?2 when given); -1 when it
 * fails or touches no row (an unknown conversation). */
static int conv_write(db_store *db, int64_t conv, const char *sql, int bind_text, const char *text,
                      const char *what)
{
    sqlite3_stmt *st;
    db_clear_error(db);
    if (sqlite3_prepare_v2(db->sql, sql, -1, &st, NULL) != SQLITE_OK)
        return db_fail(db, "%s", what);
    sqlite3_bind_int64(st, 1, conv);
    if (bind_text) {
        db_bind_text_or_null(st, 2, text);
        sqlite3_bind_int64(st, 3, db_now_ms());
    }
    int rc = sqlite3_step(st);
    int changed = sqlite3_changes(db->sql);
    if (rc != SQLITE_DONE)
        db_fail(db, "%s", what);
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE)
        return -1;
    if (changed == 0)
        return db_failf(db, "%s: conversation %lld does not exist in %s", what, (long long)conv,
                        db->path);
    return 0;
}

int conv_delete(db_store *db, int64_t conv)
{
    /* Foreign keys cascade the rest: messages (by conversation and by parent), their parts
     * (whose delete trigger takes their rows out of the search index) and reasoning memory.
     * The leaf goes first so that no row points at a message being deleted. */
    int opened = db_tx_start(db);
    if (opened < 0)
        return -1;
    int ok = conv_write(db, conv, "UPDATE conversation SET leaf_id = NULL WHERE id = ?1", 0, NULL,
                        "deleting a conversation") == 0 &&
             conv_write(db, conv, "DELETE FROM conversation WHERE id = ?1", 0, NULL,
                        "deleting a conversation") == 0;
    return db_tx_end(db, opened, ok);
}

/* The first column of the first row of sql (with arg bound as ?1 when the query has it),
 * 0 for SQL NULL, missing when there is no row, -1 on error. */
static int64_t query_int(db_store *db, const char *sql, int64_t arg, int64_t missing,
                         const char *what)
{
    sqlite3_stmt *st;
    db_clear_error(db);
    if (sqlite3_prepare_v2(db->sql, sql, -1, &st, NULL) != SQLITE_OK)
        return db_fail(db, "%s", what);
    if (sqlite3_bind_parameter_count(st) > 0)
        sqlite3_bind_int64(st, 1, arg);
    int rc = sqlite3_step(st);
    int64_t value = missing;
    if (rc == SQLITE_ROW)
        value = sqlite3_column_type(st, 0) == SQLITE_NULL ? 0 : sqlite3_column_int64(st, 0);
    else if (rc != SQLITE_DONE)
        value = db_fail(db, "%s", what);
    sqlite3_finalize(st);
    return value;
}

int conv_exists(db_store *db, int64_t conv)
{
    return (int)query_int(db, "SELECT 1 FROM conversation WHERE id = ?1", conv, 0,
                          "looking up a conversation");
}

int64_t conv_latest(db_store *db)
{
    return query_int(db, "SELECT id FROM conversation ORDER BY updated_at DESC, id DESC LIMIT 1",
                     0, 0, "finding the latest conversation");
}

int64_t conv_leaf(db_store *db, int64_t conv)
{
    int64_t leaf = query_int(db, "SELECT leaf_id FROM conversation WHERE id = ?1", conv, -2,
                             "reading the current message");
    if (leaf == -2)
        return db_failf(db, "conversation %lld does not exist in %s", (long long)conv, db->path);
    return leaf;
}

static int conv_get_text(db_store *db, int64_t conv, const char *sql, char **out)
{
    sqlite3_stmt *st;
    *out = NULL;
    db_clear_error(db);
    if (sqlite3_prepare_v2(db->sql, sql, -1, &st, NULL) != SQLITE_OK)
        return db_fail(db, "reading a conversation");
    sqlite3_bind_int64(st, 1, conv);
    int rc = sqlite3_step(st);
    int result = 0;
    if (rc == SQLITE_ROW) {
        if (db_column_copy(st, 0, out, NULL) != 0)
            result = db_failf(db, "out of memory reading conversation %lld", (long long)conv);
    } else if (rc == SQLITE_DONE) {
        result = db_failf(db, "conversation %lld does not exist in %s", (long long)conv, db->path);
    } else {
        result = db_fail(db, "reading conversation %lld", (long long)conv);
    }
    sqlite3_finalize(st);
    return result;
}

#define CONV_TEXT_FIELD(field, column)                                                           \
    int conv_set_##field(db_store *db, int64_t conv, const char *value)                         \
    {                                                                                            \
        return conv_write(db, conv,                                                              \
                          "UPDATE conversation SET " column " = ?2, "                            \
                          "updated_at = max(updated_at, ?3) WHERE id = ?1",                      \
                          1, value, "setting the " #field);                                      \
    }                                                                                            \
    int conv_get_##field(db_store *db, int64_t conv, char **out)                                \
    {                                                                                            \
        return conv_get_text(db, conv, "SELECT " column " FROM conversation WHERE id = ?1", out); \
    }

CONV_TEXT_FIELD(title, "title")
CONV_TEXT_FIELD(model, "model")
CONV_TEXT_FIELD(settings, "settings_json")
CONV_TEXT_FIELD(system_prompt, "system_prompt")

int conv_set_leaf(db_store *db, int64_t conv, int64_t msg)
{
    sqlite3_stmt *st;
    db_clear_error(db);
    if (msg == 0)
        return conv_write(db, conv, "UPDATE conversation SET leaf_id = NULL WHERE id = ?1", 0, NULL,
                          "emptying the current path");
    if (sqlite3_prepare_v2(db->sql,
                           "UPDATE conversation SET leaf_id = ?2 WHERE id = ?1 AND EXISTS "
                           "(SELECT 1 FROM message WHERE id = ?2 AND conversation_id = ?1)",
                           -1, &st, NULL) != SQLITE_OK)
        return db_fail(db, "choosing a branch");
    sqlite3_bind_int64(st, 1, conv);
    sqlite3_bind_int64(st, 2, msg);
    int rc = sqlite3_step(st);
    int changed = sqlite3_changes(db->sql);
    if (rc != SQLITE_DONE)
        db_fail(db, "choosing a branch");
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE)
        return -1;
    if (!changed)
        return db_failf(db, "message %lld is not in conversation %lld of %s", (long long)msg,
                        (long long)conv, db->path);
    return 0;
}

static void conv_summary_clear(conv_summary *s)
{
    free(s->title);
    free(s->preview);
    free(s->model);
}

void conv_list_free(conv_summary *list, size_t count)
{
    for (size_t i = 0; list && i < count; i++)
        conv_summary_clear(&list[i]);
    free(list);
}

static int summary_from_row(sqlite3_stmt *st, conv_summary *s)
{
    memset(s, 0, sizeof *s);
    s->id = sqlite3_column_int64(st, 0);
    s->created_at = sqlite3_column_int64(st, 3);
    s->updated_at = sqlite3_column_int64(st, 4);
    s->messages = sqlite3_column_int64(st, 5);
    size_t title_len, model_len;
    if (db_column_copy(st, 1, &s->title, &title_len) != 0 ||
        db_column_copy(st, 2, &s->model, &model_len) != 0 ||
        bytes_make_display(&s->title, title_len) != 0 || bytes_make_display(&s->model, model_len) != 0)
        return -1;
    char *first = NULL;
    size_t len = 0;
    if (db_column_copy(st, 6, &first, &len) != 0)
        return -1;
    if (first) {
        size_t cut = utf8_prefix(first, len, 80);
        for (size_t i = 0; i < cut; i++)
            if (first[i] == '\n' || first[i] == '\r' || first[i] == '\t')
                first[i] = ' ';
        first[cut] = '\0';
        s->preview = first;
        if (bytes_make_display(&s->preview, cut) != 0)
            return -1;
    }
    return 0;
}

int conv_list(db_store *db, conv_summary **out, size_t *count)
{
    sqlite3_stmt *st;
    *out = NULL;
    *count = 0;
    db_clear_error(db);
    const char *sql =
        "SELECT c.id, c.title, c.model, c.created_at, c.updated_at,"
        " (SELECT count(*) FROM message m WHERE m.conversation_id = c.id),"
        " (SELECT substr(p.body, 1, 400) FROM message m JOIN part p ON p.message_id = m.id"
        "   WHERE m.conversation_id = c.id AND m.role = 'user' AND p.kind = 'text'"
        "   ORDER BY m.id, p.seq LIMIT 1)"
        " FROM conversation c ORDER BY c.updated_at DESC, c.id DESC";
    if (sqlite3_prepare_v2(db->sql, sql, -1, &st, NULL) != SQLITE_OK)
        return db_fail(db, "listing conversations");
    conv_summary *list = NULL;
    size_t n = 0, cap = 0;
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (n == cap) {
            size_t ncap = cap ? cap * 2 : 16;
            conv_summary *grown = realloc(list, ncap * sizeof *list);
            if (!grown)
                break;
            list = grown;
            cap = ncap;
        }
        if (summary_from_row(st, &list[n]) != 0) {
            conv_summary_clear(&list[n]);
            break;
        }
        n++;
    }
    if (rc != SQLITE_DONE) {
        if (rc == SQLITE_ROW)
            db_failf(db, "out of memory listing the conversations of %s", db->path);
        else
            db_fail(db, "listing conversations");
        sqlite3_finalize(st);
        conv_list_free(list, n);
        return -1;
    }
    sqlite3_finalize(st);
    *out = list;
    *count = n;
    return 0;
}

/* ---- messages ---------------------------------------------------------------------------- */

static int touch_conversation(db_store *db, int64_t conv, int64_t now)
{
    sqlite3_stmt *st = db_stmt(db, STMT_CONV_TOUCH,
                               "UPDATE conversation SET updated_at = max(updated_at, ?2) WHERE id = ?1");
    if (!st)
        return -1;
    sqlite3_bind_int64(st, 1, conv);
    sqlite3_bind_int64(st, 2, now);
    return db_step_done(db, st, "updating a conversation");
}

static int64_t insert_message(db_store *db, int64_t conv, int64_t parent, msg_role role,
                              msg_status status, const char *model, int64_t now)
{
    if (parent > 0) {
        int64_t parent_conv = query_int(db, "SELECT conversation_id FROM message WHERE id = ?1",
                                        parent, 0, "looking up the parent message");
        if (parent_conv < 0)
            return -1;
        if (parent_conv != conv)
            return db_failf(db, "message %lld is not in conversation %lld of %s; a parent must be "
                                "in the same conversation",
                            (long long)parent, (long long)conv, db->path);
    }
    sqlite3_stmt *st = db_stmt(db, STMT_MSG_APPEND,
                               "INSERT INTO message(conversation_id, parent_id, role, status, model,"
                               " created_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6)");
    if (!st)
        return -1;
    sqlite3_bind_int64(st, 1, conv);
    if (parent > 0)
        sqlite3_bind_int64(st, 2, parent);
    sqlite3_bind_text(st, 3, msg_role_name(role), -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 4, msg_status_name(status), -1, SQLITE_STATIC);
    db_bind_text_or_null(st, 5, model);
    sqlite3_bind_int64(st, 6, now);
    if (db_step_done(db, st, "saving a message") != 0) {
        if ((sqlite3_extended_errcode(db->sql) & 0xff) == SQLITE_CONSTRAINT)
            db_failf(db, "cannot add a message to conversation %lld of %s: it does not exist",
                     (long long)conv, db->path);
        return -1;
    }
    return sqlite3_last_insert_rowid(db->sql);
}

int64_t msg_append(db_store *db, int64_t conv, int64_t parent, msg_role role, msg_status status,
                   const char *model)
{
    db_clear_error(db);
    if ((unsigned)role >= COUNT_OF(role_names) || (unsigned)status >= COUNT_OF(status_names))
        return db_failf(db, "msg_append: role %d or status %d is out of range", (int)role,
                        (int)status);
    int opened = db_tx_start(db);
    if (opened < 0)
        return -1;
    int64_t now = db_now_ms();
    int64_t id = insert_message(db, conv, parent, role, status, model, now);
    int ok = id > 0;
    if (ok) {
        sqlite3_stmt *st = db_stmt(db, STMT_MSG_SET_LEAF,
                                   "UPDATE conversation SET leaf_id = ?2 WHERE id = ?1");
        ok = st != NULL;
        if (ok) {
            sqlite3_bind_int64(st, 1, conv);
            sqlite3_bind_int64(st, 2, id);
            ok = db_step_done(db, st, "moving the current message") == 0 &&
                 touch_conversation(db, conv, now) == 0;
        }
    }
    if (db_tx_end(db, opened, ok) != 0)
        return -1;
    return id;
}

static void bind_count(sqlite3_stmt *st, int col, int64_t v)
{
    if (v >= 0)
        sqlite3_bind_int64(st, col, v);
    else
        sqlite3_bind_null(st, col);
}

int msg_finish(db_store *db, int64_t msg, msg_status status, const char *finish_reason,
               const msg_stats *stats)
{
    db_clear_error(db);
    if ((unsigned)status >= COUNT_OF(status_names))
        return db_failf(db, "msg_finish: status %d is out of range", (int)status);
    msg_stats none = MSG_STATS_UNKNOWN;
    if (!stats)
        stats = &none;
    int opened = db_tx_start(db);
    if (opened < 0)
        return -1;
    int64_t now = db_now_ms();
    int64_t conv = query_int(db, "SELECT conversation_id FROM message WHERE id = ?1", msg, 0,
                             "finding the message");
    int ok = conv > 0;
    if (conv == 0)
        db_failf(db, "message %lld does not exist in %s", (long long)msg, db->path);
    sqlite3_stmt *st = ok ? db_stmt(db, STMT_MSG_FINISH,
                                    "UPDATE message SET status = ?2, finish_reason = ?3,"
                                    " prompt_tokens = ?4, completion_tokens = ?5,"
                                    " reasoning_tokens = ?6, ttft_ms = ?7, prompt_ms = ?8,"
                                    " gen_ms = ?9, finished_at = ?10 WHERE id = ?1")
                          : NULL;
    if (st) {
        sqlite3_bind_int64(st, 1, msg);
        sqlite3_bind_text(st, 2, msg_status_name(status), -1, SQLITE_STATIC);
        db_bind_text_or_null(st, 3, finish_reason);
        bind_count(st, 4, stats->prompt_tokens);
        bind_count(st, 5, stats->completion_tokens);
        bind_count(st, 6, stats->reasoning_tokens);
        bind_count(st, 7, stats->ttft_ms);
        bind_count(st, 8, stats->prompt_ms);
        bind_count(st, 9, stats->gen_ms);
        sqlite3_bind_int64(st, 10, now);
        ok = db_step_done(db, st, "finishing a message") == 0 && touch_conversation(db, conv, now) == 0;
    } else {
        ok = 0;
    }
    return db_tx_end(db, opened, ok);
}

int64_t msg_descend(db_store *db, int64_t msg)
{
    int64_t leaf = query_int(db,
                             "WITH RECURSIVE down(id, depth) AS (SELECT id, 0 FROM message WHERE id = ?1"
                             " UNION ALL SELECT (SELECT max(c.id) FROM message c WHERE c.parent_id ="
                             " down.id), depth + 1 FROM down WHERE down.id IS NOT NULL)"
                             " SELECT id FROM down WHERE id IS NOT NULL ORDER BY depth DESC LIMIT 1",
                             msg, 0, "following a branch");
    if (leaf == 0)
        return db_failf(db, "message %lld does not exist in %s", (long long)msg, db->path);
    return leaf;
}

static int collect_ids(db_store *db, sqlite3_stmt *st, int64_t **ids, size_t *count)
{
    int64_t *list = NULL;
    size_t n = 0, cap = 0;
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (n == cap) {
            size_t ncap = cap ? cap * 2 : 8;
            int64_t *grown = realloc(list, ncap * sizeof *list);
            if (!grown) {
                free(list);
                return db_failf(db, "out of memory listing messages");
            }
            list = grown;
            cap = ncap;
        }
        list[n++] = sqlite3_column_int64(st, 0);
    }
    if (rc != SQLITE_DONE) {
        free(list);
        return db_fail(db, "listing messages");
    }
    *ids = list;
    *count = n;
    return 0;
}

int msg_children(db_store *db, int64_t conv, int64_t msg, int64_t **ids, size_t *count)
{
    sqlite3_stmt *st;
    *ids = NULL;
    *count = 0;
    db_clear_error(db);
    const char *sql = msg > 0 ? "SELECT id FROM message WHERE conversation_id = ?1 AND "
                                "parent_id = ?2 ORDER BY id"
                              : "SELECT id FROM message WHERE conversation_id = ?1 AND "
                                "parent_id IS NULL ORDER BY id";
    if (sqlite3_prepare_v2(db->sql, sql, -1, &st, NULL) != SQLITE_OK)
        return db_fail(db, "listing messages");
    sqlite3_bind_int64(st, 1, conv);
    if (msg > 0)
        sqlite3_bind_int64(st, 2, msg);
    int result = collect_ids(db, st, ids, count);
    sqlite3_finalize(st);
    return result;
}

int64_t msg_number(db_store *db, int64_t conv, int64_t msg)
{
    sqlite3_stmt *st;
    db_clear_error(db);
    if (sqlite3_prepare_v2(db->sql,
                           "SELECT CASE WHEN EXISTS (SELECT 1 FROM message WHERE id = ?2 AND "
                           "conversation_id = ?1) THEN (SELECT count(*) FROM message WHERE "
                           "conversation_id = ?1 AND id <= ?2) ELSE 0 END",
                           -1, &st, NULL) != SQLITE_OK)
        return db_fail(db, "numbering a message");
    sqlite3_bind_int64(st, 1, conv);
    sqlite3_bind_int64(st, 2, msg);
    int64_t n = sqlite3_step(st) == SQLITE_ROW ? sqlite3_column_int64(st, 0) : db_fail(db, "numbering a message");
    sqlite3_finalize(st);
    return n;
}

int64_t msg_by_number(db_store *db, int64_t conv, int64_t n)
{
    sqlite3_stmt *st;
    db_clear_error(db);
    if (n < 1)
        return 0;
    if (sqlite3_prepare_v2(db->sql,
                           "SELECT id FROM message WHERE conversation_id = ?1 ORDER BY id LIMIT 1 OFFSET ?2",
                           -1, &st, NULL) != SQLITE_OK)
        return db_fail(db, "finding a message by its number");
    sqlite3_bind_int64(st, 1, conv);
    sqlite3_bind_int64(st, 2, n - 1);
    int rc = sqlite3_step(st);
    int64_t id = rc == SQLITE_ROW ? sqlite3_column_int64(st, 0)
                 : rc == SQLITE_DONE ? 0 : db_fail(db, "finding a message by its number");
    sqlite3_finalize(st);
    return id;
}

/* ---- parts ------------------------------------------------------------------------------- */

int64_t part_append(db_store *db, int64_t msg, const part_in *p)
{
    db_clear_error(db);
    if (!p || (unsigned)p->kind >= COUNT_OF(kind_names))
        return db_failf(db, "part_append: no part or kind %d out of range", p ? (int)p->kind : -1);
    sqlite3_stmt *st = db_stmt(db, STMT_PART_APPEND,
                               "INSERT INTO part(message_id, seq, kind, body, name, call_id, args,"
                               " is_error, created_at) VALUES (?1, (SELECT coalesce(max(seq) + 1, 0)"
                               " FROM part WHERE message_id = ?1), ?2, ?3, ?4, ?5, ?6, ?7, ?8)");
    if (!st)
        return -1;
    sqlite3_bind_int64(st, 1, msg);
    sqlite3_bind_text(st, 2, part_kind_name(p->kind), -1, SQLITE_STATIC);
    sqlite3_bind_blob64(st, 3, p->data && p->len ? p->data : "", p->data ? p->len : 0, SQLITE_STATIC);
    db_bind_text_or_null(st, 4, p->name);
    db_bind_text_or_null(st, 5, p->call_id);
    if (p->args)
        sqlite3_bind_blob64(st, 6, p->args_len ? p->args : "", p->args_len, SQLITE_STATIC);
    sqlite3_bind_int(st, 7, p->is_error ? 1 : 0);
    sqlite3_bind_int64(st, 8, db_now_ms());
    int rc = sqlite3_step(st);
    if (rc != SQLITE_DONE) {
        if ((sqlite3_extended_errcode(db->sql) & 0xff) == SQLITE_CONSTRAINT)
            db_failf(db, "cannot add a part to message %lld of %s: the message does not exist",
                     (long long)msg, db->path);
        else
            db_fail(db, "saving a %s part of message %lld", part_kind_name(p->kind), (long long)msg);
        sqlite3_reset(st);
        sqlite3_clear_bindings(st);
        return -1;
    }
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    return sqlite3_last_insert_rowid(db->sql);
}

/* ---- loading ----------------------------------------------------------------------------- */

static void part_clear(part *p)
{
    free(p->data);
    free(p->name);
    free(p->call_id);
    free(p->args);
}

static void msg_clear(msg *m)
{
    for (size_t i = 0; i < m->nparts; i++)
        part_clear(&m->parts[i]);
    free(m->parts);
    free(m->model);
    free(m->finish_reason);
}

void conv_messages_free(conv_messages *m)
{
    if (!m)
        return;
    for (size_t i = 0; i < m->count; i++)
        msg_clear(&m->msgs[i]);
    free(m->msgs);
    m->msgs = NULL;
    m->count = 0;
}

static int64_t column_count(sqlite3_stmt *st, int col)
{
    return sqlite3_column_type(st, col) == SQLITE_NULL ? -1 : sqlite3_column_int64(st, col);
}

#define MSG_COLUMNS                                                                              \
    "m.id, m.parent_id, m.role, m.status, m.model, m.finish_reason, m.created_at,"              \
    " m.finished_at, m.prompt_tokens, m.completion_tokens, m.reasoning_tokens, m.ttft_ms,"     \
    " m.prompt_ms, m.gen_ms"

static int msg_from_row(sqlite3_stmt *st, msg *m)
{
    memset(m, 0, sizeof *m);
    m->id = sqlite3_column_int64(st, 0);
    m->parent = sqlite3_column_type(st, 1) == SQLITE_NULL ? 0 : sqlite3_column_int64(st, 1);
    int role = msg_role_parse((const char *)sqlite3_column_text(st, 2));
    int status = msg_status_parse((const char *)sqlite3_column_text(st, 3));
    m->role = role < 0 ? MSG_USER : (msg_role)role;
    m->status = status < 0 ? MSG_ERROR : (msg_status)status;
    m->created_at = sqlite3_column_int64(st, 6);
    m->finished_at = column_count(st, 7);
    m->stats.prompt_tokens = column_count(st, 8);
    m->stats.completion_tokens = column_count(st, 9);
    m->stats.reasoning_tokens = column_count(st, 10);
    m->stats.ttft_ms = column_count(st, 11);
    m->stats.prompt_ms = column_count(st, 12);
    m->stats.gen_ms = column_count(st, 13);
    if (db_column_copy(st, 4, &m->model, NULL) != 0 ||
        db_column_copy(st, 5, &m->finish_reason, NULL) != 0)
        return -1;
    return 0;
}

static int part_from_row(sqlite3_stmt *st, part *p)
{
    memset(p, 0, sizeof *p);
    p->id = sqlite3_column_int64(st, 0);
    int kind = part_kind_parse((const char *)sqlite3_column_text(st, 1));
    p->kind = kind < 0 ? PART_TEXT : (part_kind)kind;
    p->is_error = sqlite3_column_int(st, 6);
    p->created_at = sqlite3_column_int64(st, 7);
    if (db_column_copy(st, 2, &p->data, &p->len) != 0 || db_column_copy(st, 3, &p->name, NULL) != 0 ||
        db_column_copy(st, 4, &p->call_id, NULL) != 0 ||
        db_column_copy(st, 5, &p->args, &p->args_len) != 0)
        return -1;
    if (!p->data && !(p->data = bytes_dup("", 0)))
        return -1;
    return 0;
}

static int load_parts(db_store *db, msg *m)
{
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(db->sql,
                           "SELECT id, kind, body, name, call_id, args, is_error, created_at FROM part "
                           "WHERE message_id = ?1 ORDER BY seq",
                           -1, &st, NULL) != SQLITE_OK)
        return db_fail(db, "loading parts");
    sqlite3_bind_int64(st, 1, m->id);
    size_t cap = 0;
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (m->nparts == cap) {
            size_t ncap = cap ? cap * 2 : 4;
            part *grown = realloc(m->parts, ncap * sizeof *grown);
            if (!grown)
                break;
            m->parts = grown;
            cap = ncap;
        }
        if (part_from_row(st, &m->parts[m->nparts]) != 0) {
            part_clear(&m->parts[m->nparts]);
            break;
        }
        m->nparts++;
    }
    sqlite3_finalize(st);
    if (rc == SQLITE_ROW)
        return db_failf(db, "out of memory loading message %lld", (long long)m->id);
    if (rc != SQLITE_DONE)
        return db_fail(db, "loading the parts of message %lld", (long long)m->id);
    return 0;
}

/* Fills out from a query returning MSG_COLUMNS, with conv bound as ?1. */
static int load_messages(db_store *db, int64_t conv, const char *sql, conv_messages *out)
{
    sqlite3_stmt *st;
    memset(out, 0, sizeof *out);
    out->conv = conv;
    db_clear_error(db);
    int exists = conv_exists(db, conv);
    if (exists <= 0)
        return exists < 0 ? -1
                          : db_failf(db, "conversation %lld does not exist in %s; 'glmchat list' "
                                         "shows the ids",
                                     (long long)conv, db->path);
    if (sqlite3_prepare_v2(db->sql, sql, -1, &st, NULL) != SQLITE_OK)
        return db_fail(db, "loading messages");
    sqlite3_bind_int64(st, 1, conv);
    size_t cap = 0;
    int rc, result = 0;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (out->count == cap) {
            size_t ncap = cap ? cap * 2 : 16;
            msg *grown = realloc(out->msgs, ncap * sizeof *grown);
            if (!grown) {
                result = db_failf(db, "out of memory loading conversation %lld", (long long)conv);
                break;
            }
            out->msgs = grown;
            cap = ncap;
        }
        msg *m = &out->msgs[out->count];
        if (msg_from_row(st, m) != 0) {
            msg_clear(m);
            result = db_failf(db, "out of memory loading conversation %lld", (long long)conv);
            break;
        }
        out->count++;
    }
    if (result == 0 && rc != SQLITE_DONE)
        result = db_fail(db, "loading conversation %lld", (long long)conv);
    sqlite3_finalize(st);
    for (size_t i = 0; result == 0 && i < out->count; i++)
        result = load_parts(db, &out->msgs[i]);
    if (result != 0)
        conv_messages_free(out);
    return result;
}

int conv_load_path(db_store *db, int64_t conv, conv_messages *out)
{
    /* Walk up from the leaf, then order root first (depth descending). */
    return load_messages(db, conv,
                         "WITH RECURSIVE up(id, depth) AS ("
                         " SELECT leaf_id, 0 FROM conversation WHERE id = ?1 AND leaf_id IS NOT NULL"
                         " UNION ALL SELECT m.parent_id, up.depth + 1 FROM message m JOIN up"
                         " ON m.id = up.id WHERE m.parent_id IS NOT NULL)"
                         " SELECT " MSG_COLUMNS " FROM up JOIN message m ON m.id = up.id"
                         " ORDER BY up.depth DESC",
                         out);
}

int conv_load_tree(db_store *db, int64_t conv, conv_messages *out)
{
    return load_messages(db, conv,
                         "SELECT " MSG_COLUMNS " FROM message m WHERE m.conversation_id = ?1"
                         " ORDER BY m.id",
                         out);
}
