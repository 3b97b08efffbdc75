/* migrations.c: glmchat's schema as an append-only list of steps keyed on PRAGMA user_version;
 * each step runs in its own transaction together with the version bump. Never edit a step. */
#include <stdio.h>

#include "storage/db_internal.h"

/* Step i takes the schema from version i to i + 1. */
static const char *const migration_steps[] = {
    /* 1: conversations, the message tree, ordered byte-exact parts, reasoning memory, FTS5. */
    "CREATE TABLE conversation ("
    "  id INTEGER PRIMARY KEY,"
    "  title TEXT, model TEXT, settings_json TEXT, system_prompt TEXT,"
    "  created_at INTEGER NOT NULL, updated_at INTEGER NOT NULL,"
    "  leaf_id INTEGER REFERENCES message(id) ON DELETE SET NULL);"
    "CREATE INDEX conversation_updated ON conversation(updated_at, id);"
    "CREATE TABLE message ("
    "  id INTEGER PRIMARY KEY,"
    "  conversation_id INTEGER NOT NULL REFERENCES conversation(id) ON DELETE CASCADE,"
    "  parent_id INTEGER REFERENCES message(id) ON DELETE CASCADE,"
    "  role TEXT NOT NULL CHECK (role IN ('system','user','assistant','tool')),"
    "  status TEXT NOT NULL CHECK (status IN ('streaming','complete','canceled','error')),"
    "  model TEXT, finish_reason TEXT,"
    "  prompt_tokens INTEGER, completion_tokens INTEGER, reasoning_tokens INTEGER,"
    "  ttft_ms INTEGER, prompt_ms INTEGER, gen_ms INTEGER,"
    "  created_at INTEGER NOT NULL, finished_at INTEGER);"
    "CREATE INDEX message_conversation ON message(conversation_id, id);"
    "CREATE INDEX message_parent ON message(parent_id);"
    /* AUTOINCREMENT: part ids never repeat, so "indexed through id N" stays true. */
    "CREATE TABLE part ("
    "  id INTEGER PRIMARY KEY AUTOINCREMENT,"
    "  message_id INTEGER NOT NULL REFERENCES message(id) ON DELETE CASCADE,"
    "  seq INTEGER NOT NULL,"
    "  kind TEXT NOT NULL CHECK (kind IN ('text','reasoning','tool_call','tool_result')),"
    "  body BLOB NOT NULL, name TEXT, call_id TEXT, args BLOB,"
    "  is_error INTEGER NOT NULL DEFAULT 0, created_at INTEGER NOT NULL,"
    "  UNIQUE (message_id, seq));"
    "CREATE TABLE reasoning_memory ("
    "  id INTEGER PRIMARY KEY,"
    "  signature TEXT NOT NULL, call_ids TEXT NOT NULL,"
    "  reasoning BLOB NOT NULL, size INTEGER NOT NULL,"
    "  created_at INTEGER NOT NULL, last_used_at INTEGER NOT NULL, use_seq INTEGER NOT NULL,"
    "  UNIQUE (signature, call_ids));"
    "CREATE INDEX reasoning_memory_lru ON reasoning_memory(use_seq);"
    /* Only text and reasoning are searchable; the view is the FTS index's content table.
     * Parts are indexed in batches between turns (search.c), not inside each write, so a
     * streamed part costs one small commit; search_state says how far indexing has got. */
    "CREATE VIEW part_search_source AS"
    "  SELECT id, CAST(body AS TEXT) AS body FROM part WHERE kind IN ('text','reasoning');"
    "CREATE VIRTUAL TABLE part_fts USING fts5(body, content='part_search_source',"
    "  content_rowid='id', tokenize='unicode61 remove_diacritics 2');"
    "CREATE TABLE search_state (id INTEGER PRIMARY KEY CHECK (id = 1),"
    "  indexed_through INTEGER NOT NULL);"
    "INSERT INTO search_state VALUES (1, 0);"
    "CREATE TRIGGER part_fts_delete AFTER DELETE ON part"
    "  WHEN old.kind IN ('text','reasoning')"
    "   AND old.id <= (SELECT indexed_through FROM search_state) BEGIN"
    "  INSERT INTO part_fts(part_fts, rowid, body) VALUES ('delete', old.id, CAST(old.body AS TEXT));"
    "  END;"
    "CREATE TRIGGER part_fts_update AFTER UPDATE OF body, kind ON part"
    "  WHEN old.id <= (SELECT indexed_through FROM search_state) BEGIN"
    "  INSERT INTO part_fts(part_fts, rowid, body) SELECT 'delete', old.id, CAST(old.body AS TEXT)"
    "    WHERE old.kind IN ('text','reasoning');"
    "  INSERT INTO part_fts(rowid, body) SELECT new.id, CAST(new.body AS TEXT)"
    "    WHERE new.kind IN ('text','reasoning'); END;",
    /* 2: reasoning memory names the conversation it came from, so deleting a conversation
     * deletes its reasoning too (entries from before this step have none and stay until
     * evicted). */
    "ALTER TABLE reasoning_memory ADD COLUMN conversation_id INTEGER"
    "  REFERENCES conversation(id) ON DELETE CASCADE;"
    "CREATE INDEX reasoning_memory_conversation ON reasoning_memory(conversation_id);",
    /* 3: conversation ids are never given twice: a plain rowid key hands the newest deleted id
     * to the next conversation, so an id kept in a script or shell history would name another
     * conversation. SQLite cannot add AUTOINCREMENT to a table, so the table is rebuilt with
     * every row and id as it was (foreign keys off around it: see rebuilds_table); copying the
     * rows sets the high-water mark to the largest id. */
    "CREATE TABLE conversation_next ("
    "  id INTEGER PRIMARY KEY AUTOINCREMENT,"
    "  title TEXT, model TEXT, settings_json TEXT, system_prompt TEXT,"
    "  created_at INTEGER NOT NULL, updated_at INTEGER NOT NULL,"
    "  leaf_id INTEGER REFERENCES message(id) ON DELETE SET NULL);"
    "INSERT INTO conversation_next (id, title, model, settings_json, system_prompt,"
    "  created_at, updated_at, leaf_id)"
    "  SELECT id, title, model, settings_json, system_prompt, created_at, updated_at, leaf_id"
    "  FROM conversation ORDER BY id;"
    "DROP TABLE conversation;"
    "ALTER TABLE conversation_next RENAME TO conversation;"
    "CREATE INDEX conversation_updated ON conversation(updated_at, id);",
};

/* Steps that drop and recreate a table others refer to: with foreign keys on, dropping the old
 * table would cascade into the rows that refer to it, so the step runs with them off and is
 * committed only when PRAGMA foreign_key_check finds every reference intact. */
static int rebuilds_table(int step)
{
    return step == 2;
}

#define MIGRATION_COUNT ((int)(sizeof migration_steps / sizeof migration_steps[0]))

_Static_assert(MIGRATION_COUNT == DB_SCHEMA_VERSION, "one migration step per schema version");

static int user_version(db_store *db, int *version)
{
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(db->sql, "PRAGMA user_version", -1, &st, NULL) != SQLITE_OK)
        return db_fail(db, "reading the schema version");
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW)
        *version = sqlite3_column_int(st, 0);
    sqlite3_finalize(st);
    return rc == SQLITE_ROW ? 0 : db_fail(db, "reading the schema version");
}

/* 0 when no row refers to a missing one (run inside the step's transaction). */
static int references_intact(db_store *db, int step)
{
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(db->sql, "PRAGMA foreign_key_check", -1, &st, NULL) != SQLITE_OK)
        return db_fail(db, "checking references after schema migration %d", step + 1);
    int rc = sqlite3_step(st);
    char table[128] = "";
    if (rc == SQLITE_ROW)
        snprintf(table, sizeof table, "%s", (const char *)sqlite3_column_text(st, 0));
    sqlite3_finalize(st);
    if (rc == SQLITE_ROW)
        return db_failf(db, "%s: schema migration %d found a row of table %s that refers to a "
                        "missing row; nothing was changed: run glmchat check-db on it",
                        db->path, step + 1, table);
    return rc == SQLITE_DONE ? 0 : db_fail(db, "checking references after schema migration %d",
                                           step + 1);
}

static int run_step(db_store *db, int step)
{
    char bump[64];
    if (sqlite3_exec(db->sql, "BEGIN IMMEDIATE", NULL, NULL, NULL) != SQLITE_OK)
        return db_fail(db, "starting schema migration %d", step + 1);
    /* Another process may have migrated while we waited for the lock. */
    int now = 0;
    if (user_version(db, &now) != 0)
        goto fail;
    if (now > step) {
        sqlite3_exec(db->sql, "ROLLBACK", NULL, NULL, NULL);
        return 0;
    }
    snprintf(bump, sizeof bump, "PRAGMA user_version = %d", step + 1);
    if (sqlite3_exec(db->sql, migration_steps[step], NULL, NULL, NULL) != SQLITE_OK ||
        sqlite3_exec(db->sql, bump, NULL, NULL, NULL) != SQLITE_OK) {
        db_fail(db, "applying schema migration %d (nothing was changed)", step + 1);
        goto fail;
    }
    if (rebuilds_table(step) && references_intact(db, step) != 0)
        goto fail;
    if (sqlite3_exec(db->sql, "COMMIT", NULL, NULL, NULL) != SQLITE_OK) {
        db_fail(db, "committing schema migration %d (nothing was changed)", step + 1);
        goto fail;
    }
    return 0;
fail:
    if (!sqlite3_get_autocommit(db->sql))
        sqlite3_exec(db->sql, "ROLLBACK", NULL, NULL, NULL);
    return -1;
}

/* PRAGMA foreign_keys does nothing inside a transaction, so it is switched around the step's. */
static int apply_step(db_store *db, int step)
{
    if (!rebuilds_table(step))
        return run_step(db, step);
    if (sqlite3_exec(db->sql, "PRAGMA foreign_keys = OFF", NULL, NULL, NULL) != SQLITE_OK)
        return db_fail(db, "preparing schema migration %d", step + 1);
    int rc = run_step(db, step);
    if (sqlite3_exec(db->sql, "PRAGMA foreign_keys = ON", NULL, NULL, NULL) != SQLITE_OK && rc == 0)
        return db_fail(db, "finishing schema migration %d", step + 1);
    return rc;
}

int db_migrate(db_store *db)
{
    int version = 0;
    if (user_version(db, &version) != 0)
        return -1;
    for (int step = version; step < MIGRATION_COUNT; step++)
        if (apply_step(db, step) != 0)
            return -1;
    return 0;
}
