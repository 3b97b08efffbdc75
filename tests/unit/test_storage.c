/* test_storage.c: Check suites for glmchat's storage on real SQLite files: schema and reopen,
 * conversations, the message tree and its branches, byte-exact parts, reasoning memory, search. */
#define _XOPEN_SOURCE 700
#include <ftw.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/unit/test_storage.h"

/* ---- shared helpers ---------------------------------------------------------------------- */

char *scratch_new(void)
{
    const char *base = getenv("TMPDIR");
    char *dir = malloc(4096);
    ck_assert_ptr_nonnull(dir);
    snprintf(dir, 4096, "%s/glmchat-storage-XXXXXX", base && base[0] ? base : "/tmp");
    ck_assert_ptr_nonnull(mkdtemp(dir));
    return dir;
}

static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path);
}

void scratch_free(char *dir)
{
    nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
    free(dir);
}

char *scratch_path(const char *dir, const char *name)
{
    char *p = malloc(strlen(dir) + strlen(name) + 2);
    ck_assert_ptr_nonnull(p);
    sprintf(p, "%s/%s", dir, name);
    return p;
}

db_store *open_fresh(const char *dir, const char *name)
{
    char err[1024];
    char *path = scratch_path(dir, name);
    db_store *db = db_open(path, err, sizeof err);
    ck_assert_msg(db != NULL, "db_open(%s): %s", path, err);
    free(path);
    return db;
}

char *export_to_buffer(db_store *db, int64_t conv, export_format format, size_t *len)
{
    char *buf = NULL;
    FILE *f = open_memstream(&buf, len);
    ck_assert_ptr_nonnull(f);
    int rc = export_write(db, conv, format, f);
    ck_assert_msg(rc == 0, "export_write: %s", db_errmsg(db));
    fclose(f);
    return buf;
}

static int64_t add_text(db_store *db, int64_t msg, part_kind kind, const char *text)
{
    part_in p = {.kind = kind, .data = text, .len = strlen(text)};
    int64_t id = part_append(db, msg, &p);
    ck_assert_msg(id > 0, "part_append: %s", db_errmsg(db));
    return id;
}

/* ---- schema and opening ------------------------------------------------------------------ */

START_TEST(open_creates_parents_private_and_reopens)
{
    char *dir = scratch_new();
    char *path = scratch_path(dir, "a/b/c/glmchat.db");
    char err[1024];
    db_store *db = db_open(path, err, sizeof err);
    ck_assert_msg(db != NULL, "%s", err);
    struct stat sb;
    char *parent = scratch_path(dir, "a/b/c");
    ck_assert_int_eq(stat(parent, &sb), 0);
    ck_assert_int_eq(sb.st_mode & 0777, 0700);
    ck_assert_int_eq(stat(path, &sb), 0);
    ck_assert_int_eq(sb.st_mode & 0077, 0);
    int64_t conv = conv_create(db, "kept", NULL);
    ck_assert_int_gt(conv, 0);
    db_close(db);
    db = db_open(path, err, sizeof err);
    ck_assert_msg(db != NULL, "%s", err);
    char *title;
    ck_assert_int_eq(conv_get_title(db, conv, &title), 0);
    ck_assert_str_eq(title, "kept");
    free(title);
    ck_assert_int_eq(db_idle(db), 0);
    ck_assert_int_eq(db_integrity_ok(db), 1);
    db_close(db);
    free(parent);
    free(path);
    scratch_free(dir);
}
END_TEST

START_TEST(pragmas_and_schema_version)
{
    char *dir = scratch_new();
    db_store *db = open_fresh(dir, "p.db");
    db_close(db);
    char *path = scratch_path(dir, "p.db");
    sqlite3 *sql;
    ck_assert_int_eq(sqlite3_open_v2(path, &sql, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    sqlite3_stmt *st;
    ck_assert_int_eq(sqlite3_prepare_v2(sql, "SELECT (SELECT user_version FROM pragma_user_version),"
                                             " (SELECT journal_mode FROM pragma_journal_mode)",
                                        -1, &st, NULL),
                     SQLITE_OK);
    ck_assert_int_eq(sqlite3_step(st), SQLITE_ROW);
    ck_assert_int_eq(sqlite3_column_int(st, 0), DB_SCHEMA_VERSION);
    ck_assert_str_eq((const char *)sqlite3_column_text(st, 1), "wal");
    sqlite3_finalize(st);
    sqlite3_close(sql);
    free(path);
    scratch_free(dir);
}
END_TEST

/* Several processes creating the same new database at once: every one opens it, the schema
 * is made once (a migration re-reads the version under the write lock). */
START_TEST(concurrent_first_opens_migrate_once)
{
    char *dir = scratch_new();
    char *path = scratch_path(dir, "race.db");
    pid_t kids[6];
    for (int i = 0; i < 6; i++) {
        kids[i] = fork();
        ck_assert_int_ge(kids[i], 0);
        if (kids[i] == 0) {
            char err[1024];
            db_store *db = db_open(path, err, sizeof err);
            if (!db) {
                fprintf(stderr, "opener %d: %s\n", i, err);
                _exit(1);
            }
            int ok = conv_create(db, "racer", NULL) > 0;
            db_close(db);
            _exit(ok ? 0 : 2);
        }
    }
    for (int i = 0; i < 6; i++) {
        int status;
        ck_assert_int_eq(waitpid(kids[i], &status, 0), kids[i]);
        ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "opener %d failed", i);
    }
    db_store *db = open_fresh(dir, "race.db");
    conv_summary *list;
    size_t n;
    ck_assert_int_eq(conv_list(db, &list, &n), 0);
    ck_assert_uint_eq(n, 6);
    conv_list_free(list, n);
    ck_assert_int_eq(db_integrity_ok(db), 1);
    db_close(db);
    free(path);
    scratch_free(dir);
}
END_TEST

/* Bad UTF-8 in a title or a preview is shown by base/utf8.h's one policy: one U+FFFD per maximal
 * invalid subpart. Storage used to give one per byte, so a character cut short ("\xe2\x82" of
 * U+20AC) showed as two replacement characters here and one in the model's own decoding. */
START_TEST(listing_repairs_bad_utf8_one_replacement_per_subpart)
{
    char *dir = scratch_new();
    db_store *db = open_fresh(dir, "t.db");
    int64_t c = conv_create(db, "price \xe2\x82 and \xf0\x9f\x98!", NULL);
    int64_t m = msg_append(db, c, 0, MSG_USER, MSG_COMPLETE, NULL);
    add_text(db, m, PART_TEXT, "cut\xe2\x82 here\xff\xfe");
    conv_summary *list;
    size_t n;
    ck_assert_int_eq(conv_list(db, &list, &n), 0);
    ck_assert_uint_eq(n, 1);
    ck_assert_str_eq(list[0].title, "price \xef\xbf\xbd and \xef\xbf\xbd!");
    ck_assert_str_eq(list[0].preview, "cut\xef\xbf\xbd here\xef\xbf\xbd\xef\xbf\xbd");
    conv_list_free(list, n);
    db_close(db);
    scratch_free(dir);
}
END_TEST

START_TEST(foreign_keys_are_enforced)
{
    db_store *db = db_open(":memory:", (char[256]){0}, 256);
    ck_assert_ptr_nonnull(db);
    ck_assert_int_eq(msg_append(db, 999, 0, MSG_USER, MSG_COMPLETE, NULL), -1);
    ck_assert_ptr_nonnull(strstr(db_errmsg(db), "999"));
    part_in p = {.kind = PART_TEXT, .data = "x", .len = 1};
    ck_assert_int_eq(part_append(db, 12345, &p), -1);
    ck_assert_ptr_nonnull(strstr(db_errmsg(db), "12345"));
    db_close(db);
}
END_TEST

/* ---- conversations, tree, parts ---------------------------------------------------------- */

START_TEST(conversation_fields_and_listing_order)
{
    char *dir = scratch_new();
    db_store *db = open_fresh(dir, "c.db");
    int64_t a = conv_create(db, NULL, "glm-5.3-flash");
    int64_t b = conv_create(db, "second", NULL);
    ck_assert_int_gt(b, a);
    ck_assert_int_eq(conv_set_settings(db, a, "{\"temperature\": 0.7}"), 0);
    ck_assert_int_eq(conv_set_system_prompt(db, a, "You are terse."), 0);
    char *s;
    ck_assert_int_eq(conv_get_settings(db, a, &s), 0);
    ck_assert_str_eq(s, "{\"temperature\": 0.7}");
    free(s);
    ck_assert_int_eq(conv_get_system_prompt(db, a, &s), 0);
    ck_assert_str_eq(s, "You are terse.");
    free(s);
    ck_assert_int_eq(conv_get_title(db, a, &s), 0);
    ck_assert_ptr_null(s);
    ck_assert_int_eq(conv_set_title(db, 777, "x"), -1);
    ck_assert_ptr_nonnull(strstr(db_errmsg(db), "777"));
    usleep(5000);
    int64_t m = msg_append(db, a, 0, MSG_USER, MSG_COMPLETE, NULL);
    add_text(db, m, PART_TEXT, "first words\nof the user");
    ck_assert_int_eq(conv_latest(db), a); /* a message makes a the most recent */
    conv_summary *list;
    size_t n;
    ck_assert_int_eq(conv_list(db, &list, &n), 0);
    ck_assert_uint_eq(n, 2);
    ck_assert_int_eq(list[0].id, a);
    ck_assert_int_eq(list[0].messages, 1);
    ck_assert_str_eq(list[0].preview, "first words of the user");
    ck_assert_str_eq(list[0].model, "glm-5.3-flash");
    ck_assert_int_eq(list[1].id, b);
    ck_assert_str_eq(list[1].title, "second");
    ck_assert_ptr_null(list[1].preview);
    conv_list_free(list, n);
    ck_assert_int_eq(conv_delete(db, b), 0);
    ck_assert_int_eq(conv_exists(db, b), 0);
    ck_assert_int_eq(conv_delete(db, b), -1);
    db_close(db);
    scratch_free(dir);
}
END_TEST

START_TEST(regenerate_branches_and_path_follows_leaf)
{
    char *dir = scratch_new();
    db_store *db = open_fresh(dir, "t.db");
    int64_t c = conv_create(db, "tree", NULL);
    ck_assert_int_eq(conv_leaf(db, c), 0);
    int64_t u = msg_append(db, c, 0, MSG_USER, MSG_COMPLETE, NULL);
    add_text(db, u, PART_TEXT, "question");
    int64_t a1 = msg_append(db, c, u, MSG_ASSISTANT, MSG_STREAMING, "m");
    add_text(db, a1, PART_TEXT, "first answer");
    ck_assert_int_eq(msg_finish(db, a1, MSG_CANCELED, NULL, NULL), 0);
    int64_t a2 = msg_append(db, c, u, MSG_ASSISTANT, MSG_STREAMING, "m"); /* regenerate */
    add_text(db, a2, PART_REASONING, "think again");
    add_text(db, a2, PART_TEXT, "second answer");
    msg_stats st = {10, 20, 5, 120, 30, 400};
    ck_assert_int_eq(msg_finish(db, a2, MSG_COMPLETE, "stop", &st), 0);
    ck_assert_int_eq(conv_leaf(db, c), a2);

    int64_t *kids;
    size_t n;
    ck_assert_int_eq(msg_children(db, c, u, &kids, &n), 0);
    ck_assert_uint_eq(n, 2);
    ck_assert_int_eq(kids[0], a1);
    ck_assert_int_eq(kids[1], a2);
    free(kids);
    ck_assert_int_eq(msg_children(db, c, 0, &kids, &n), 0);
    ck_assert_uint_eq(n, 1);
    ck_assert_int_eq(kids[0], u);
    free(kids);

    conv_messages path;
    ck_assert_int_eq(conv_load_path(db, c, &path), 0);
    ck_assert_uint_eq(path.count, 2);
    ck_assert_int_eq(path.msgs[0].id, u);
    ck_assert_int_eq(path.msgs[1].id, a2);
    ck_assert_int_eq(path.msgs[1].parent, u);
    ck_assert_int_eq(path.msgs[1].status, MSG_COMPLETE);
    ck_assert_str_eq(path.msgs[1].finish_reason, "stop");
    ck_assert_int_eq(path.msgs[1].stats.completion_tokens, 20);
    ck_assert_int_eq(path.msgs[1].stats.gen_ms, 400);
    ck_assert_uint_eq(path.msgs[1].nparts, 2);
    ck_assert_int_eq(path.msgs[1].parts[0].kind, PART_REASONING);
    ck_assert_str_eq(path.msgs[1].parts[1].data, "second answer");
    conv_messages_free(&path);

    /* Back to the old branch: it is intact, and canceled. */
    ck_assert_int_eq(conv_set_leaf(db, c, a1), 0);
    ck_assert_int_eq(conv_load_path(db, c, &path), 0);
    ck_assert_uint_eq(path.count, 2);
    ck_assert_int_eq(path.msgs[1].id, a1);
    ck_assert_int_eq(path.msgs[1].status, MSG_CANCELED);
    ck_assert_int_eq(path.msgs[1].stats.prompt_tokens, -1);
    ck_assert_str_eq(path.msgs[1].parts[0].data, "first answer");
    conv_messages_free(&path);

    /* Following a branch down: a1 is a leaf; from u the newest child chain ends at a2. */
    ck_assert_int_eq(msg_descend(db, a1), a1);
    ck_assert_int_eq(msg_descend(db, u), a2);
    ck_assert_int_eq(msg_descend(db, 424242), -1);

    conv_messages tree;
    ck_assert_int_eq(conv_load_tree(db, c, &tree), 0);
    ck_assert_uint_eq(tree.count, 3);
    conv_messages_free(&tree);

    /* A parent from another conversation and a leaf from another conversation are refused. */
    int64_t other = conv_create(db, NULL, NULL);
    ck_assert_int_eq(msg_append(db, other, u, MSG_USER, MSG_COMPLETE, NULL), -1);
    ck_assert_int_eq(conv_set_leaf(db, other, u), -1);
    db_close(db);
    scratch_free(dir);
}
END_TEST

START_TEST(tool_parts_keep_every_field_in_order)
{
    db_store *db = db_open(":memory:", (char[256]){0}, 256);
    int64_t c = conv_create(db, NULL, NULL);
    int64_t m = msg_append(db, c, 0, MSG_ASSISTANT, MSG_STREAMING, NULL);
    add_text(db, m, PART_REASONING, "I should look it up.");
    const char args[] = "{\"q\": \"weather\",  \"n\":1}";
    part_in call = {.kind = PART_TOOL_CALL, .name = "search", .call_id = "call_7", .args = args,
                    .args_len = sizeof args - 1};
    ck_assert_int_gt(part_append(db, m, &call), 0);
    part_in result = {.kind = PART_TOOL_RESULT, .data = "no network", .len = 10, .name = "search",
                      .call_id = "call_7", .is_error = 1};
    ck_assert_int_gt(part_append(db, m, &result), 0);
    add_text(db, m, PART_REASONING, "It failed.");
    conv_messages path;
    ck_assert_int_eq(conv_load_path(db, c, &path), 0);
    const msg *got = &path.msgs[0];
    ck_assert_uint_eq(got->nparts, 4);
    ck_assert_int_eq(got->parts[1].kind, PART_TOOL_CALL);
    ck_assert_str_eq(got->parts[1].name, "search");
    ck_assert_str_eq(got->parts[1].call_id, "call_7");
    ck_assert_uint_eq(got->parts[1].args_len, sizeof args - 1);
    ck_assert_mem_eq(got->parts[1].args, args, sizeof args - 1);
    ck_assert_int_eq(got->parts[2].is_error, 1);
    ck_assert_str_eq(got->parts[2].data, "no network");
    ck_assert_str_eq(got->parts[3].data, "It failed.");
    conv_messages_free(&path);
    db_close(db);
}
END_TEST

START_TEST(parts_are_byte_exact_with_nul_and_invalid_utf8)
{
    char *dir = scratch_new();
    db_store *db = open_fresh(dir, "b.db");
    int64_t c = conv_create(db, NULL, NULL);
    int64_t m = msg_append(db, c, 0, MSG_USER, MSG_COMPLETE, NULL);
    char bytes[512];
    for (int i = 0; i < 512; i++)
        bytes[i] = (char)(i * 7 + 3);
    part_in p = {.kind = PART_TEXT, .data = bytes, .len = sizeof bytes};
    ck_assert_int_gt(part_append(db, m, &p), 0);
    part_in empty = {.kind = PART_REASONING, .data = "", .len = 0};
    ck_assert_int_gt(part_append(db, m, &empty), 0);
    db_close(db);
    db = open_fresh(dir, "b.db");
    conv_messages path;
    ck_assert_int_eq(conv_load_path(db, c, &path), 0);
    ck_assert_uint_eq(path.msgs[0].parts[0].len, sizeof bytes);
    ck_assert_mem_eq(path.msgs[0].parts[0].data, bytes, sizeof bytes);
    ck_assert_uint_eq(path.msgs[0].parts[1].len, 0);
    ck_assert_str_eq(path.msgs[0].parts[1].data, "");
    conv_messages_free(&path);
    db_close(db);
    scratch_free(dir);
}
END_TEST

START_TEST(batched_writes_commit_together_or_not_at_all)
{
    db_store *db = db_open(":memory:", (char[256]){0}, 256);
    ck_assert_int_eq(db_begin(db), 0);
    ck_assert_int_eq(db_begin(db), -1);
    int64_t c = conv_create(db, "rolled back", NULL);
    ck_assert_int_gt(msg_append(db, c, 0, MSG_USER, MSG_COMPLETE, NULL), 0);
    ck_assert_int_eq(db_rollback(db), 0);
    ck_assert_int_eq(conv_exists(db, c), 0);
    ck_assert_int_eq(db_begin(db), 0);
    c = conv_create(db, "kept", NULL);
    ck_assert_int_gt(msg_append(db, c, 0, MSG_USER, MSG_COMPLETE, NULL), 0);
    ck_assert_int_eq(db_commit(db), 0);
    ck_assert_int_eq(conv_exists(db, c), 1);
    ck_assert_int_eq(db_commit(db), -1);
    db_close(db);
}
END_TEST

/* ---- reasoning memory -------------------------------------------------------------------- */

START_TEST(memory_put_get_replace)
{
    db_store *db = db_open(":memory:", (char[256]){0}, 256);
    const char r[] = "step 1\0step 2 \xff";
    ck_assert_int_eq(mem_put(db, 0, "sig-a", "call_1,call_2", r, sizeof r - 1), 0);
    char *text;
    size_t len;
    ck_assert_int_eq(mem_get(db, "sig-a", "call_1,call_2", &text, &len), 1);
    ck_assert_uint_eq(len, sizeof r - 1);
    ck_assert_mem_eq(text, r, sizeof r - 1);
    free(text);
    ck_assert_int_eq(mem_get(db, "sig-a", "call_1", &text, &len), 0);
    ck_assert_ptr_null(text);
    ck_assert_int_eq(mem_put(db, 0, "sig-a", "call_1,call_2", "new", 3), 0);
    ck_assert_int_eq(mem_get(db, "sig-a", "call_1,call_2", &text, &len), 1);
    ck_assert_str_eq(text, "new");
    free(text);
    ck_assert_int_eq(mem_put(db, 0, "sig-b", NULL, "none", 4), 0);
    ck_assert_int_eq(mem_get(db, "sig-b", "", &text, &len), 1);
    free(text);
    int64_t entries, bytes;
    ck_assert_int_eq(mem_stats(db, &entries, &bytes), 0);
    ck_assert_int_eq(entries, 2);
    ck_assert_int_eq(bytes, 7);
    db_close(db);
}
END_TEST

START_TEST(memory_evicts_least_recently_used_by_count_and_bytes)
{
    db_store *db = db_open(":memory:", (char[256]){0}, 256);
    ck_assert_int_eq(mem_set_limits(db, 3, 1000), 0);
    char sig[16];
    for (int i = 0; i < 3; i++) {
        snprintf(sig, sizeof sig, "s%d", i);
        ck_assert_int_eq(mem_put(db, 0, sig, "", "0123456789", 10), 0);
    }
    ck_assert_int_eq(mem_touch(db, "s0", ""), 1); /* s0 is now newer than s1 */
    ck_assert_int_eq(mem_touch(db, "nope", ""), 0);
    ck_assert_int_eq(mem_put(db, 0, "s3", "", "0123456789", 10), 0);
    char *t;
    size_t n;
    ck_assert_int_eq(mem_get(db, "s1", "", &t, &n), 0); /* evicted by count */
    ck_assert_int_eq(mem_get(db, "s0", "", &t, &n), 1);
    free(t);
    /* Bytes: a 600-byte entry pushes out the oldest until the total fits 1000. */
    char big[990];
    memset(big, 'x', sizeof big);
    ck_assert_int_eq(mem_put(db, 0, "big", "", big, 600), 0);
    int64_t entries, bytes;
    ck_assert_int_eq(mem_stats(db, &entries, &bytes), 0);
    ck_assert_int_le(bytes, 1000);
    ck_assert_int_eq(entries, 3);
    ck_assert_int_eq(mem_put(db, 0, "huge", "", big, 980), 0);
    ck_assert_int_eq(mem_stats(db, &entries, &bytes), 0);
    ck_assert_int_eq(entries, 1); /* strict LRU: big and the older small ones all had to go */
    ck_assert_int_eq(mem_get(db, "huge", "", &t, &n), 1);
    free(t);
    ck_assert_int_eq(mem_put(db, 0, "too-big", "", big, 990), 0);
    ck_assert_int_eq(mem_stats(db, &entries, &bytes), 0);
    ck_assert_int_eq(entries, 1);
    ck_assert_int_eq(mem_set_limits(db, 0, 100), 0); /* shrinking evicts at once */
    ck_assert_int_eq(mem_stats(db, &entries, &bytes), 0);
    ck_assert_int_eq(entries, 0);
    ck_assert_int_eq(mem_put(db, 0, "x", "", big, 101), -1);
    ck_assert_ptr_nonnull(strstr(db_errmsg(db), "101 bytes"));
    db_close(db);
}
END_TEST

/* ---- search ------------------------------------------------------------------------------ */

START_TEST(search_finds_text_and_reasoning_not_tools)
{
    char *dir = scratch_new();
    db_store *db = open_fresh(dir, "s.db");
    int64_t c = conv_create(db, "Paris trip", NULL);
    int64_t u = msg_append(db, c, 0, MSG_USER, MSG_COMPLETE, NULL);
    add_text(db, u, PART_TEXT, "Plan a week in Paris for a Café lover");
    int64_t a = msg_append(db, c, u, MSG_ASSISTANT, MSG_COMPLETE, NULL);
    int64_t rp = add_text(db, a, PART_REASONING, "The user likes coffee; think of Montmartre.");
    part_in call = {.kind = PART_TOOL_CALL, .name = "maps", .call_id = "c1", .args = "{\"zebra\":1}",
                    .args_len = 11};
    ck_assert_int_gt(part_append(db, a, &call), 0);
    part_in res = {.kind = PART_TOOL_RESULT, .data = "zebra crossing", .len = 14, .call_id = "c1"};
    ck_assert_int_gt(part_append(db, a, &res), 0);
    search_hit *hits;
    size_t n;
    ck_assert_int_eq(search_parts(db, "montmartre", 0, &hits, &n), 0);
    ck_assert_uint_eq(n, 1);
    ck_assert_int_eq(hits[0].part, rp);
    ck_assert_int_eq(hits[0].msg, a);
    ck_assert_int_eq(hits[0].conv, c);
    ck_assert_int_eq(hits[0].kind, PART_REASONING);
    ck_assert_str_eq(hits[0].title, "Paris trip");
    ck_assert_ptr_nonnull(strstr(hits[0].snippet, "[Montmartre]"));
    search_hits_free(hits, n);
    ck_assert_int_eq(search_parts(db, "cafe PARIS", 0, &hits, &n), 0); /* diacritics, case */
    ck_assert_uint_eq(n, 1);
    ck_assert_int_eq(hits[0].kind, PART_TEXT);
    search_hits_free(hits, n);
    ck_assert_int_eq(search_parts(db, "zebra", 0, &hits, &n), 0);
    ck_assert_uint_eq(n, 0);
    /* FTS5 syntax in the query is plain text, never an error. */
    const char *odd[] = {"\"unbalanced", "AND OR NOT", "a*b(c)", "NEAR(x y)", "^-:", "   "};
    for (size_t i = 0; i < sizeof odd / sizeof odd[0]; i++) {
        ck_assert_msg(search_parts(db, odd[i], 0, &hits, &n) == 0, "%s: %s", odd[i], db_errmsg(db));
        search_hits_free(hits, n);
    }
    /* Deleting the conversation removes it from the index. */
    ck_assert_int_eq(conv_delete(db, c), 0);
    ck_assert_int_eq(search_parts(db, "montmartre", 0, &hits, &n), 0);
    ck_assert_uint_eq(n, 0);
    ck_assert_int_eq(db_integrity_ok(db), 1);
    db_close(db);
    scratch_free(dir);
}
END_TEST

/* Parts are indexed between turns (db_idle) or by the next search, never lost to search. */
START_TEST(search_indexes_pending_parts_first)
{
    char *dir = scratch_new();
    db_store *db = open_fresh(dir, "pending.db");
    int64_t c = conv_create(db, NULL, NULL);
    int64_t m = msg_append(db, c, 0, MSG_USER, MSG_COMPLETE, NULL);
    int64_t p1 = add_text(db, m, PART_TEXT, "pelican one");
    char *path = scratch_path(dir, "pending.db");
    sqlite3 *sql;
    ck_assert_int_eq(sqlite3_open_v2(path, &sql, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    sqlite3_stmt *st;
    ck_assert_int_eq(sqlite3_prepare_v2(sql, "SELECT indexed_through FROM search_state", -1, &st, NULL), SQLITE_OK);
    ck_assert_int_eq(sqlite3_step(st), SQLITE_ROW);
    ck_assert_int_lt(sqlite3_column_int64(st, 0), p1); /* the write did not index */
    sqlite3_reset(st);
    search_hit *hits;
    size_t n;
    ck_assert_int_eq(search_parts(db, "pelican", 0, &hits, &n), 0);
    ck_assert_uint_eq(n, 1);
    search_hits_free(hits, n);
    /* A part deleted before it was indexed, one deleted after: the index stays consistent. */
    int64_t m2 = msg_append(db, c, m, MSG_ASSISTANT, MSG_COMPLETE, NULL);
    add_text(db, m2, PART_TEXT, "pelican two");
    ck_assert_int_eq(db_idle(db), 0);
    ck_assert_int_eq(sqlite3_step(st), SQLITE_ROW);
    ck_assert_int_gt(sqlite3_column_int64(st, 0), p1);
    sqlite3_finalize(st);
    sqlite3_close(sql);
    int64_t m3 = msg_append(db, c, m2, MSG_USER, MSG_COMPLETE, NULL);
    add_text(db, m3, PART_REASONING, "pelican three");
    ck_assert_int_eq(conv_delete(db, c), 0);
    ck_assert_int_eq(search_parts(db, "pelican", 0, &hits, &n), 0);
    ck_assert_uint_eq(n, 0);
    ck_assert_int_eq(db_integrity_ok(db), 1);
    db_close(db);
    free(path);
    scratch_free(dir);
}
END_TEST

/* Deleting a conversation takes its messages, parts and reasoning memory, and nothing else. */
START_TEST(delete_takes_messages_parts_and_memory)
{
    char *dir = scratch_new();
    db_store *db = open_fresh(dir, "delete.db");
    int64_t gone = conv_create(db, "gone", NULL), kept = conv_create(db, "kept", NULL);
    for (int i = 0; i < 2; i++) {
        int64_t c = i ? kept : gone;
        int64_t u = msg_append(db, c, 0, MSG_USER, MSG_COMPLETE, NULL);
        add_text(db, u, PART_TEXT, "heron question");
        int64_t a = msg_append(db, c, u, MSG_ASSISTANT, MSG_COMPLETE, NULL);
        add_text(db, a, PART_REASONING, "heron thoughts");
        ck_assert_int_eq(mem_put(db, c, i ? "sig-kept" : "sig-gone", "call_1", "why", 3), 0);
    }
    ck_assert_int_eq(mem_put(db, 0, "sig-none", "", "old", 3), 0);
    ck_assert_int_eq(db_idle(db), 0);
    ck_assert_int_eq(conv_delete(db, gone), 0);
    char *t;
    size_t n;
    ck_assert_int_eq(mem_get(db, "sig-gone", "call_1", &t, &n), 0);
    ck_assert_int_eq(mem_get(db, "sig-kept", "call_1", &t, &n), 1);
    free(t);
    ck_assert_int_eq(mem_get(db, "sig-none", "", &t, &n), 1);
    free(t);
    search_hit *hits;
    size_t nh;
    ck_assert_int_eq(search_parts(db, "heron", 0, &hits, &nh), 0);
    ck_assert_uint_eq(nh, 2);
    for (size_t i = 0; i < nh; i++)
        ck_assert_int_eq(hits[i].conv, kept);
    search_hits_free(hits, nh);
    conv_messages tree;
    ck_assert_int_eq(conv_load_tree(db, kept, &tree), 0);
    ck_assert_uint_eq(tree.count, 2);
    conv_messages_free(&tree);
    ck_assert_int_eq(conv_load_tree(db, gone, &tree), -1);
    char *path = scratch_path(dir, "delete.db");
    sqlite3 *sql;
    ck_assert_int_eq(sqlite3_open_v2(path, &sql, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    sqlite3_stmt *st;
    ck_assert_int_eq(sqlite3_prepare_v2(sql, "SELECT (SELECT count(*) FROM message), (SELECT count(*) FROM part)",
                                        -1, &st, NULL), SQLITE_OK);
    ck_assert_int_eq(sqlite3_step(st), SQLITE_ROW);
    ck_assert_int_eq(sqlite3_column_int(st, 0), 2);
    ck_assert_int_eq(sqlite3_column_int(st, 1), 2);
    sqlite3_finalize(st);
    sqlite3_close(sql);
    ck_assert_int_eq(db_integrity_ok(db), 1);
    db_close(db);
    free(path);
    scratch_free(dir);
}
END_TEST

Suite *storage_core_suite(void)
{
    Suite *s = suite_create("storage");
    TCase *t = tcase_create("core");
    tcase_add_test(t, open_creates_parents_private_and_reopens);
    tcase_add_test(t, pragmas_and_schema_version);
    tcase_add_test(t, concurrent_first_opens_migrate_once);
    tcase_add_test(t, foreign_keys_are_enforced);
    tcase_add_test(t, listing_repairs_bad_utf8_one_replacement_per_subpart);
    tcase_add_test(t, conversation_fields_and_listing_order);
    tcase_add_test(t, regenerate_branches_and_path_follows_leaf);
    tcase_add_test(t, tool_parts_keep_every_field_in_order);
    tcase_add_test(t, parts_are_byte_exact_with_nul_and_invalid_utf8);
    tcase_add_test(t, batched_writes_commit_together_or_not_at_all);
    tcase_add_test(t, memory_put_get_replace);
    tcase_add_test(t, memory_evicts_least_recently_used_by_count_and_bytes);
    tcase_add_test(t, search_finds_text_and_reasoning_not_tools);
    tcase_add_test(t, search_indexes_pending_parts_first);
    tcase_add_test(t, delete_takes_messages_parts_and_memory);
    suite_add_tcase(s, t);
    return s;
}

int main(void)
{
    SRunner *r = srunner_create(storage_core_suite());
    srunner_add_suite(r, storage_export_suite());
    srunner_add_suite(r, storage_faults_suite());
    srunner_add_suite(r, storage_migrate_suite());
    srunner_run_all(r, CK_NORMAL);
    int failed = srunner_ntests_failed(r);
    srunner_free(r);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
