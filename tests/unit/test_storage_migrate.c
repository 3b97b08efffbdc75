/* test_storage_migrate.c: Check suite for schema migrations on real SQLite files: a database
 * made by the previous schema's own SQL upgrades in place keeping every row, ids never repeat. */
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/unit/test_storage.h"
#include "tests/common/files.h"

/* Schema version 2 exactly as glmchat wrote it (migration steps 1 and 2), so this test keeps
 * describing the files users have even if the migration list were ever edited by mistake. */
static const char schema_v2[] =
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
    "    WHERE new.kind IN ('text','reasoning'); END;"
    "ALTER TABLE reasoning_memory ADD COLUMN conversation_id INTEGER"
    "  REFERENCES conversation(id) ON DELETE CASCADE;"
    "CREATE INDEX reasoning_memory_conversation ON reasoning_memory(conversation_id);";

/* Rows as an old glmchat left them: ids with gaps (conversations 3 and 4 were deleted, 5 is the
 * newest), a branch, every part kind, a NUL inside a body, reasoning memory, a leaf per
 * conversation, an index already built through part 2. */
static const char rows_v2[] =
    "INSERT INTO conversation VALUES (1, 'Trip', 'glm', '{\"temperature\": 0.6}', 'Be brief',"
    "  1000, 2000, NULL);"
    "INSERT INTO conversation VALUES (2, NULL, NULL, NULL, NULL, 1100, 2100, NULL);"
    "INSERT INTO conversation VALUES (5, 'Puffins', 'glm', NULL, NULL, 1200, 2200, NULL);"
    "INSERT INTO message VALUES (1, 1, NULL, 'user', 'complete', NULL, NULL, NULL, NULL, NULL,"
    "  NULL, NULL, NULL, 1001, NULL);"
    "INSERT INTO message VALUES (2, 1, 1, 'assistant', 'complete', 'glm', 'stop', 10, 20, 5,"
    "  30, 40, 50, 1002, 1003);"
    "INSERT INTO message VALUES (3, 1, 1, 'assistant', 'canceled', 'glm', 'canceled', 10, 2,"
    "  NULL, 30, 40, 5, 1004, 1005);"
    "INSERT INTO message VALUES (7, 2, NULL, 'user', 'complete', NULL, NULL, NULL, NULL, NULL,"
    "  NULL, NULL, NULL, 1101, NULL);"
    "INSERT INTO message VALUES (9, 5, NULL, 'user', 'complete', NULL, NULL, NULL, NULL, NULL,"
    "  NULL, NULL, NULL, 1201, NULL);"
    "UPDATE conversation SET leaf_id = 3 WHERE id = 1;"
    "UPDATE conversation SET leaf_id = 7 WHERE id = 2;"
    "UPDATE conversation SET leaf_id = 9 WHERE id = 5;"
    "INSERT INTO part VALUES (1, 1, 0, 'text', CAST('Plan a day in Paris' AS BLOB), NULL, NULL,"
    "  NULL, 0, 1001);"
    "INSERT INTO part VALUES (2, 2, 0, 'reasoning', CAST('museums first' AS BLOB), NULL, NULL,"
    "  NULL, 0, 1002);"
    "INSERT INTO part VALUES (3, 2, 1, 'tool_call', CAST('' AS BLOB), 'weather', 'c1',"
    "  CAST('{\"city\":\"Paris\"}' AS BLOB), 0, 1002);"
    "INSERT INTO part VALUES (4, 2, 2, 'text', X'4c6f7576726500ff', NULL, NULL, NULL, 0, 1003);"
    "INSERT INTO part VALUES (6, 9, 0, 'text', CAST('where do puffins nest' AS BLOB), NULL,"
    "  NULL, NULL, 0, 1201);"
    "INSERT INTO part_fts(rowid, body) SELECT id, body FROM part_search_source WHERE id <= 2;"
    "UPDATE search_state SET indexed_through = 2;"
    "INSERT INTO reasoning_memory VALUES (1, 'sig', 'c1', CAST('remembered' AS BLOB), 10, 1002,"
    "  1002, 1, 1);"
    "INSERT INTO reasoning_memory VALUES (2, 'old', 'c0', CAST('from before v2' AS BLOB), 14,"
    "  900, 900, 0, NULL);";

static const char *const tables[] = {"conversation", "message", "part", "reasoning_memory",
                                     "search_state"};

static void exec_ok(sqlite3 *sql, const char *text)
{
    char *msg = NULL;
    int rc = sqlite3_exec(sql, text, NULL, NULL, &msg);
    ck_assert_msg(rc == SQLITE_OK, "%s", msg ? msg : sqlite3_errstr(rc));
}

/* path as the previous glmchat left it: schema 2 in WAL mode, rows_v2 in it. */
static void make_v2_database(const char *path)
{
    sqlite3 *sql;
    ck_assert_int_eq(sqlite3_open(path, &sql), SQLITE_OK);
    exec_ok(sql, "PRAGMA journal_mode = WAL");
    exec_ok(sql, "BEGIN");
    exec_ok(sql, schema_v2);
    exec_ok(sql, rows_v2);
    exec_ok(sql, "PRAGMA user_version = 2");
    exec_ok(sql, "COMMIT");
    ck_assert_int_eq(sqlite3_close(sql), SQLITE_OK);
}

/* Every row of every table, each value quoted, in id order: equal dumps mean nothing was lost,
 * renumbered or changed. */
static char *dump_rows(const char *path)
{
    sqlite3 *sql;
    ck_assert_int_eq(sqlite3_open_v2(path, &sql, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    size_t cap = 1 << 16, len = 0;
    char *out = malloc(cap);
    ck_assert_ptr_nonnull(out);
    out[0] = 0;
    for (size_t t = 0; t < sizeof tables / sizeof tables[0]; t++) {
        char q[256];
        snprintf(q, sizeof q, "SELECT * FROM %s ORDER BY rowid", tables[t]);
        sqlite3_stmt *st;
        ck_assert_int_eq(sqlite3_prepare_v2(sql, q, -1, &st, NULL), SQLITE_OK);
        len += (size_t)snprintf(out + len, cap - len, "[%s]\n", tables[t]);
        while (sqlite3_step(st) == SQLITE_ROW) {
            for (int c = 0; c < sqlite3_column_count(st); c++) {
                sqlite3_stmt *quote;
                ck_assert_int_eq(sqlite3_prepare_v2(sql, "SELECT quote(?1)", -1, &quote, NULL),
                                 SQLITE_OK);
                sqlite3_bind_value(quote, 1, sqlite3_column_value(st, c));
                ck_assert_int_eq(sqlite3_step(quote), SQLITE_ROW);
                len += (size_t)snprintf(out + len, cap - len, "%s=%s ", sqlite3_column_name(st, c),
                                        (const char *)sqlite3_column_text(quote, 0));
                sqlite3_finalize(quote);
            }
            len += (size_t)snprintf(out + len, cap - len, "\n");
            ck_assert_uint_lt(len, cap - 1024);
        }
        sqlite3_finalize(st);
    }
    sqlite3_close(sql);
    return out;
}

/* One number from a query on the raw file. */
static int64_t query_int(const char *path, const char *q)
{
    sqlite3 *sql;
    sqlite3_stmt *st;
    ck_assert_int_eq(sqlite3_open_v2(path, &sql, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    ck_assert_int_eq(sqlite3_prepare_v2(sql, q, -1, &st, NULL), SQLITE_OK);
    ck_assert_int_eq(sqlite3_step(st), SQLITE_ROW);
    int64_t v = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    sqlite3_close(sql);
    return v;
}

static db_store *open_path(const char *path, db_open_kind kind)
{
    char err[2048];
    db_store *db = db_open_mode(path, kind, err, sizeof err);
    ck_assert_msg(db != NULL, "db_open(%s): %s", path, err);
    return db;
}

START_TEST(previous_schema_migrates_keeping_every_row)
{
    char *dir = scratch_new();
    char *path = scratch_path(dir, "v2.db");
    make_v2_database(path);
    char *before = dump_rows(path);
    db_store *db = open_path(path, DB_OPEN_NORMAL);
    db_close(db);
    ck_assert_int_eq(query_int(path, "PRAGMA user_version"), DB_SCHEMA_VERSION);
    ck_assert_int_eq(query_int(path, "SELECT instr(sql, 'AUTOINCREMENT') > 0 FROM sqlite_master "
                                     "WHERE name = 'conversation'"), 1);
    ck_assert_int_eq(query_int(path, "SELECT count(*) FROM sqlite_master WHERE name = "
                                     "'conversation_updated'"), 1);
    ck_assert_int_eq(query_int(path, "SELECT count(*) FROM pragma_foreign_key_check"), 0);
    char *after = dump_rows(path);
    ck_assert_str_eq(after, before);

    db = open_path(path, DB_OPEN_NORMAL);
    ck_assert_int_eq(db_integrity_ok(db), 1);
    ck_assert_int_eq(conv_leaf(db, 1), 3);
    search_hit *hits;
    size_t n;
    ck_assert_int_eq(search_parts(db, "puffins", 10, &hits, &n), 0);
    ck_assert_uint_eq(n, 1); /* indexed now, after the upgrade */
    ck_assert_int_eq(hits[0].conv, 5);
    search_hits_free(hits, n);
    /* references into the rebuilt table still cascade */
    ck_assert_int_eq(conv_delete(db, 1), 0);
    ck_assert_int_eq(query_int(path, "SELECT count(*) FROM message WHERE conversation_id = 1"), 0);
    ck_assert_int_eq(query_int(path, "SELECT count(*) FROM reasoning_memory WHERE id = 1"), 0);
    /* the newest conversation deleted: its id is not given again, here or after a reopen */
    ck_assert_int_eq(conv_delete(db, 5), 0);
    ck_assert_int_eq(conv_create(db, "next", NULL), 6);
    ck_assert_int_eq(conv_delete(db, 6), 0);
    db_close(db);
    db = open_path(path, DB_OPEN_NORMAL);
    ck_assert_int_eq(conv_create(db, "after reopen", NULL), 7);
    ck_assert_int_eq(search_parts(db, "puffins", 10, &hits, &n), 0);
    ck_assert_uint_eq(n, 0); /* conversation 5 went with its index rows */
    search_hits_free(hits, n);
    db_close(db);
    free(before);
    free(after);
    free(path);
    scratch_free(dir);
}
END_TEST

/* check-db and read-only files get a read-only handle, which cannot migrate: schema 2 is read
 * as it is, and the file stays byte-identical. */
START_TEST(previous_schema_reads_read_only_untouched)
{
    char *dir = scratch_new();
    char *path = scratch_path(dir, "v2.db");
    make_v2_database(path);
    size_t before_len, after_len;
    char *before = test_read_file(path, &before_len);
    db_store *db = open_path(path, DB_OPEN_CHECK);
    ck_assert_int_eq(db_read_only(db), 1);
    ck_assert_int_eq(db_integrity_ok(db), 1);
    conv_summary *list;
    size_t n;
    ck_assert_int_eq(conv_list(db, &list, &n), 0);
    ck_assert_uint_eq(n, 3);
    conv_list_free(list, n);
    ck_assert_int_eq(conv_leaf(db, 5), 9);
    db_close(db);
    char *after = test_read_file(path, &after_len);
    ck_assert_uint_eq(before_len, after_len);
    ck_assert(memcmp(before, after, before_len) == 0);
    ck_assert_int_eq(query_int(path, "PRAGMA user_version"), 2);
    free(before);
    free(after);
    free(path);
    scratch_free(dir);
}
END_TEST

/* A schema glmchat cannot read without migrating is refused read-only with what to do. */
START_TEST(older_schema_read_only_says_what_to_do)
{
    char *dir = scratch_new();
    char *path = scratch_path(dir, "v1.db");
    make_v2_database(path);
    sqlite3 *sql;
    ck_assert_int_eq(sqlite3_open(path, &sql), SQLITE_OK);
    exec_ok(sql, "PRAGMA user_version = 1");
    ck_assert_int_eq(sqlite3_close(sql), SQLITE_OK);
    char err[2048];
    ck_assert_ptr_null(db_open_mode(path, DB_OPEN_CHECK, err, sizeof err));
    ck_assert_msg(strstr(err, "has schema 1") && strstr(err, "make both writable"), "%s", err);
    free(path);
    scratch_free(dir);
}
END_TEST

START_TEST(new_database_never_reuses_deleted_ids)
{
    char *dir = scratch_new();
    char *path = scratch_path(dir, "new.db");
    db_store *db = open_path(path, DB_OPEN_NORMAL);
    for (int64_t want = 1; want <= 3; want++)
        ck_assert_int_eq(conv_create(db, NULL, NULL), want);
    ck_assert_int_eq(conv_delete(db, 3), 0);
    ck_assert_int_eq(conv_create(db, NULL, NULL), 4);
    ck_assert_int_eq(conv_delete(db, 4), 0);
    db_close(db);
    db = open_path(path, DB_OPEN_NORMAL);
    ck_assert_int_eq(conv_latest(db), 2);
    ck_assert_int_eq(conv_create(db, NULL, NULL), 5);
    db_close(db);
    free(path);
    scratch_free(dir);
}
END_TEST

Suite *storage_migrate_suite(void)
{
    Suite *s = suite_create("storage_migrate");
    TCase *t = tcase_create("migrate");
    tcase_add_test(t, previous_schema_migrates_keeping_every_row);
    tcase_add_test(t, previous_schema_reads_read_only_untouched);
    tcase_add_test(t, older_schema_read_only_says_what_to_do);
    tcase_add_test(t, new_database_never_reuses_deleted_ids);
    suite_add_tcase(s, t);
    return s;
}
