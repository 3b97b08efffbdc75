/* interrupted.c: ends the replies a crash left MSG_STREAMING: canceled, finish reason
 * "interrupted", their saved parts kept, so a conversation goes on cleanly after one. */
#include "storage/db_internal.h"

int msg_end_interrupted(db_store *db, int64_t conv)
{
    db_clear_error(db);
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(db->sql,
                           "UPDATE message SET status = 'canceled', finish_reason = 'interrupted',"
                           " finished_at = coalesce(finished_at, ?2)"
                           " WHERE conversation_id = ?1 AND status = 'streaming'",
                           -1, &st, NULL) != SQLITE_OK)
        return db_fail(db, "marking interrupted replies");
    sqlite3_bind_int64(st, 1, conv);
    sqlite3_bind_int64(st, 2, db_now_ms());
    int rc = db_step_done(db, st, "marking interrupted replies");
    sqlite3_finalize(st);
    return rc < 0 ? -1 : sqlite3_changes(db->sql);
}
