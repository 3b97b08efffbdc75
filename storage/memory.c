/* memory.c: the reasoning memory: the model's reasoning kept byte-exact per conversation
 * signature and tool call ids, for GLM's preserved thinking, with LRU eviction by count and bytes. */
#include <stdlib.h>

#include "storage/db_internal.h"

static int evict(db_store *db)
{
    sqlite3_stmt *st;
    /* Keep the most recently used entries while both running totals fit the limits. */
    if (sqlite3_prepare_v2(db->sql,
                           "DELETE FROM reasoning_memory WHERE id IN (SELECT id FROM (SELECT id,"
                           " count(*) OVER w AS n, sum(size) OVER w AS bytes FROM reasoning_memory"
                           " WINDOW w AS (ORDER BY use_seq DESC ROWS UNBOUNDED PRECEDING))"
                           " WHERE n > ?1 OR bytes > ?2)",
                           -1, &st, NULL) != SQLITE_OK)
        return db_fail(db, "evicting reasoning memory");
    sqlite3_bind_int64(st, 1, db->mem_max_entries);
    sqlite3_bind_int64(st, 2, db->mem_max_bytes);
    int rc = db_step_done(db, st, "evicting reasoning memory");
    sqlite3_finalize(st);
    return rc;
}

int mem_set_limits(db_store *db, int64_t max_entries, int64_t max_bytes)
{
    db_clear_error(db);
    if (max_entries < 0 || max_bytes < 0)
        return db_failf(db, "mem_set_limits: limits must not be negative (%lld entries, %lld bytes)",
                        (long long)max_entries, (long long)max_bytes);
    if (max_entries)
        db->mem_max_entries = max_entries;
    if (max_bytes)
        db->mem_max_bytes = max_bytes;
    return evict(db);
}

int mem_put(db_store *db, int64_t conv, const char *signature, const char *call_ids, const char *text,
            size_t len)
{
    db_clear_error(db);
    if (!signature)
        return db_failf(db, "mem_put: no conversation signature given");
    if ((int64_t)len > db->mem_max_bytes)
        return db_failf(db, "reasoning of %zu bytes is larger than the reasoning memory's limit of "
                            "%lld bytes; raise the limit to keep it",
                        len, (long long)db->mem_max_bytes);
    int opened = db_tx_start(db);
    if (opened < 0)
        return -1;
    sqlite3_stmt *st = db_stmt(db, STMT_MEM_PUT,
                               "INSERT INTO reasoning_memory(signature, call_ids, reasoning, size,"
                               " created_at, last_used_at, use_seq, conversation_id) VALUES (?1, ?2,"
                               " ?3, ?4, ?5, ?5,"
                               " (SELECT coalesce(max(use_seq), 0) + 1 FROM reasoning_memory), ?6)"
                               " ON CONFLICT(signature, call_ids) DO UPDATE SET"
                               " reasoning = excluded.reasoning, size = excluded.size,"
                               " conversation_id = excluded.conversation_id,"
                               " last_used_at = excluded.last_used_at, use_seq = excluded.use_seq");
    int ok = st != NULL;
    if (ok) {
        sqlite3_bind_text(st, 1, signature, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 2, call_ids ? call_ids : "", -1, SQLITE_STATIC);
        sqlite3_bind_blob64(st, 3, len ? text : "", len, SQLITE_STATIC);
        sqlite3_bind_int64(st, 4, (int64_t)len);
        sqlite3_bind_int64(st, 5, db_now_ms());
        if (conv > 0)
            sqlite3_bind_int64(st, 6, conv);
        ok = db_step_done(db, st, "saving reasoning memory") == 0 && evict(db) == 0;
    }
    return db_tx_end(db, opened, ok);
}

/* 1 when the entry exists (and is now the most recently used), 0 when not, -1 on error. */
static int touch(db_store *db, const char *signature, const char *call_ids)
{
    sqlite3_stmt *st = db_stmt(db, STMT_MEM_TOUCH,
                               "UPDATE reasoning_memory SET last_used_at = ?3, use_seq ="
                               " (SELECT max(use_seq) + 1 FROM reasoning_memory)"
                               " WHERE signature = ?1 AND call_ids = ?2");
    if (!st)
        return -1;
    sqlite3_bind_text(st, 1, signature, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, call_ids ? call_ids : "", -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 3, db_now_ms());
    if (db_step_done(db, st, "marking reasoning memory used") != 0)
        return -1;
    return sqlite3_changes(db->sql) > 0;
}

int mem_touch(db_store *db, const char *signature, const char *call_ids)
{
    db_clear_error(db);
    if (!signature)
        return db_failf(db, "mem_touch: no conversation signature given");
    return touch(db, signature, call_ids);
}

int mem_get(db_store *db, const char *signature, const char *call_ids, char **text, size_t *len)
{
    *text = NULL;
    *len = 0;
    db_clear_error(db);
    if (!signature)
        return db_failf(db, "mem_get: no conversation signature given");
    int opened = db_tx_start(db);
    if (opened < 0)
        return -1;
    sqlite3_stmt *st = db_stmt(db, STMT_MEM_GET,
                               "SELECT reasoning FROM reasoning_memory WHERE signature = ?1 AND"
                               " call_ids = ?2");
    int found = -1;
    if (st) {
        sqlite3_bind_text(st, 1, signature, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 2, call_ids ? call_ids : "", -1, SQLITE_STATIC);
        int rc = sqlite3_step(st);
        if (rc == SQLITE_ROW) {
            found = db_column_copy(st, 0, text, len) == 0 ? 1 : db_failf(db, "out of memory reading reasoning memory");
        } else if (rc == SQLITE_DONE) {
            found = 0;
        } else {
            db_fail(db, "reading reasoning memory");
        }
        sqlite3_reset(st);
    }
    if (found == 1 && touch(db, signature, call_ids) < 0)
        found = -1;
    if (db_tx_end(db, opened, found >= 0) != 0) {
        free(*text);
        *text = NULL;
        *len = 0;
        return -1;
    }
    return found;
}

int mem_stats(db_store *db, int64_t *entries, int64_t *bytes)
{
    sqlite3_stmt *st;
    db_clear_error(db);
    if (sqlite3_prepare_v2(db->sql, "SELECT count(*), coalesce(sum(size), 0) FROM reasoning_memory",
                           -1, &st, NULL) != SQLITE_OK)
        return db_fail(db, "counting reasoning memory");
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        *entries = sqlite3_column_int64(st, 0);
        *bytes = sqlite3_column_int64(st, 1);
    } else {
        db_fail(db, "counting reasoning memory");
    }
    sqlite3_finalize(st);
    return rc == SQLITE_ROW ? 0 : -1;
}
