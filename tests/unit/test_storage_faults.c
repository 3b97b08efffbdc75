/* test_storage_faults.c: Check suite for storage under bad conditions: files that are not
 * glmchat's (left byte-for-byte untouched), newer schemas, read-only directories, a full disk. */
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/unit/test_storage.h"

/* db_open(path) must fail with needle in the message and leave the file's bytes unchanged. */
static void expect_refused_untouched(const char *path, const char *needle)
{
    size_t before_len, after_len;
    char *before = test_read_file(path, &before_len);
    ck_assert_ptr_nonnull(before);
    char err[2048] = "";
    db_store *db = db_open(path, err, sizeof err);
    ck_assert_msg(db == NULL, "db_open accepted %s", path);
    ck_assert_msg(strstr(err, needle) != NULL, "error '%s' lacks '%s'", err, needle);
    ck_assert_msg(strstr(err, path) != NULL, "error '%s' does not name the file", err);
    char *after = test_read_file(path, &after_len);
    ck_assert_ptr_nonnull(after);
    ck_assert_uint_eq(before_len, after_len);
    ck_assert_msg(memcmp(before, after, before_len) == 0, "%s was modified", path);
    free(before);
    free(after);
}

START_TEST(text_file_is_refused_untouched)
{
    char *dir = scratch_new();
    char *path = scratch_path(dir, "notes.db");
    char text[4000];
    for (size_t i = 0; i < sizeof text; i++)
        text[i] = "my notes, not a database\n"[i % 25];
    test_write_file(path, text, sizeof text);
    expect_refused_untouched(path, "not an SQLite file");
    test_write_file(path, "SQLite", 6); /* shorter than a header */
    expect_refused_untouched(path, "not an SQLite file");
    free(path);
    scratch_free(dir);
}
END_TEST

START_TEST(garbage_after_a_valid_magic_is_refused_untouched)
{
    char *dir = scratch_new();
    char *path = scratch_path(dir, "garbage.db");
    char buf[16384];
    srand(3);
    for (size_t i = 0; i < sizeof buf; i++)
        buf[i] = (char)rand();
    memcpy(buf, "SQLite format 3", 16);
    memset(buf + 60, 0, 4); /* schema version 0: passes the version check */
    test_write_file(path, buf, sizeof buf);
    expect_refused_untouched(path, "untouched");
    free(path);
    scratch_free(dir);
}
END_TEST

START_TEST(truncated_database_is_refused_untouched)
{
    char *dir = scratch_new();
    db_store *db = open_fresh(dir, "t.db");
    int64_t c = conv_create(db, "soon truncated", NULL);
    int64_t m = msg_append(db, c, 0, MSG_USER, MSG_COMPLETE, NULL);
    char big[200000];
    memset(big, 'q', sizeof big);
    part_in p = {.kind = PART_TEXT, .data = big, .len = sizeof big};
    ck_assert_int_gt(part_append(db, m, &p), 0);
    db_close(db);
    char *path = scratch_path(dir, "t.db");
    struct stat sb;
    ck_assert_int_eq(stat(path, &sb), 0);
    ck_assert_int_eq(truncate(path, sb.st_size / 2), 0);
    expect_refused_untouched(path, "damaged");
    free(path);
    scratch_free(dir);
}
END_TEST

START_TEST(another_programs_database_is_refused_untouched)
{
    char *dir = scratch_new();
    char *path = scratch_path(dir, "other.db");
    sqlite3 *sql;
    ck_assert_int_eq(sqlite3_open(path, &sql), SQLITE_OK);
    ck_assert_int_eq(sqlite3_exec(sql, "CREATE TABLE photos(id, path); INSERT INTO photos VALUES (1, 'a.jpg')",
                                  NULL, NULL, NULL),
                     SQLITE_OK);
    sqlite3_close(sql);
    expect_refused_untouched(path, "another program");
    free(path);
    scratch_free(dir);
}
END_TEST

START_TEST(newer_schema_is_refused_untouched)
{
    char *dir = scratch_new();
    db_store *db = open_fresh(dir, "new.db");
    ck_assert_int_gt(conv_create(db, "from the future", NULL), 0);
    db_close(db);
    char *path = scratch_path(dir, "new.db");
    sqlite3 *sql;
    ck_assert_int_eq(sqlite3_open(path, &sql), SQLITE_OK);
    ck_assert_int_eq(sqlite3_exec(sql, "PRAGMA user_version = 99", NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(sql);
    expect_refused_untouched(path, "newer glmchat (schema 99");
    free(path);
    scratch_free(dir);
}
END_TEST

START_TEST(directories_in_the_way_give_clear_errors)
{
    char *dir = scratch_new();
    char err[2048];
    ck_assert_ptr_null(db_open(dir, err, sizeof err));
    ck_assert_ptr_nonnull(strstr(err, "not a regular file"));
    char *file = scratch_path(dir, "plain");
    test_write_file(file, "x", 1);
    char *below = scratch_path(dir, "plain/sub/glmchat.db");
    ck_assert_ptr_null(db_open(below, err, sizeof err));
    ck_assert_msg(strstr(err, "cannot create directory") && strstr(err, "Not a directory"), "%s", err);
    ck_assert_ptr_null(db_open("", err, sizeof err));
    free(file);
    free(below);
    scratch_free(dir);
}
END_TEST

/* Runs db_open(path) as an unprivileged user (root ignores permissions) in a child; the child
 * exits 0 when the open failed with the path and needle in the message. */
static int open_fails_unprivileged(const char *path, const char *needle)
{
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        if (geteuid() == 0 && (setgid(65534) != 0 || setuid(65534) != 0))
            _exit(3);
        char err[2048] = "";
        db_store *db = db_open(path, err, sizeof err);
        if (db) {
            db_close(db);
            _exit(1);
        }
        _exit(strstr(err, path) && strstr(err, needle) ? 0 : 2);
    }
    int status;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* In a child as an unprivileged user: the database at path opens read-only, its conversations
 * and search work, and a write fails saying the file cannot be written. 0 when all hold. */
static int reads_unprivileged(const char *path)
{
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        if (geteuid() == 0 && (setgid(65534) != 0 || setuid(65534) != 0))
            _exit(3);
        char err[2048] = "";
        db_store *db = db_open(path, err, sizeof err);
        if (!db) {
            fprintf(stderr, "read-only open failed: %s\n", err);
            _exit(4);
        }
        search_hit *hits;
        size_t n;
        int ok = db_read_only(db) && conv_latest(db) > 0 &&
                 search_parts(db, "indexed", 10, &hits, &n) == 0;
        if (ok)
            search_hits_free(hits, n);
        ok = ok && n == 1 && search_unindexed(db) == 1 && db_idle(db) == 0;
        ok = ok && conv_create(db, "write", NULL) < 0 && strstr(db_errmsg(db), "cannot be written");
        if (!ok)
            fprintf(stderr, "read-only use failed: %s\n", db_errmsg(db));
        db_close(db);
        _exit(ok ? 0 : 5);
    }
    int status;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static void expect_no_sidecars(const char *path)
{
    char side[4200];
    struct stat sb;
    snprintf(side, sizeof side, "%s-wal", path);
    ck_assert_msg(stat(side, &sb) != 0, "%s was left behind", side);
    snprintf(side, sizeof side, "%s-shm", path);
    ck_assert_msg(stat(side, &sb) != 0, "%s was left behind", side);
}

/* A database with one indexed and one not yet indexed text part. */
static void fill_for_reading(db_store *db)
{
    int64_t c = conv_create(db, "existing", NULL);
    ck_assert_int_gt(c, 0);
    int64_t m = msg_append(db, c, 0, MSG_USER, MSG_COMPLETE, NULL);
    part_in first = {.kind = PART_TEXT, .data = "indexed words", .len = 13};
    ck_assert_int_gt(part_append(db, m, &first), 0);
    ck_assert_int_eq(db_idle(db), 0);
    part_in second = {.kind = PART_TEXT, .data = "pending words", .len = 13};
    ck_assert_int_gt(part_append(db, m, &second), 0);
}

START_TEST(read_only_files_open_read_only_without_side_files)
{
    char *dir = scratch_new();
    ck_assert_int_eq(chmod(dir, 0755), 0);
    db_store *db = open_fresh(dir, "mode.db");
    fill_for_reading(db);
    db_close(db);
    char *path = scratch_path(dir, "mode.db");
    expect_no_sidecars(path);
    size_t before_len, after_len;
    char *before = test_read_file(path, &before_len);
    ck_assert_int_eq(chmod(path, 0444), 0);
    ck_assert_int_eq(reads_unprivileged(path), 0);
    expect_no_sidecars(path);
    char *after = test_read_file(path, &after_len);
    ck_assert_uint_eq(before_len, after_len);
    ck_assert(memcmp(before, after, before_len) == 0);
    /* check-db's handle is read-only even where writing is allowed */
    char err[2048];
    ck_assert_int_eq(chmod(path, 0644), 0);
    db = db_open_mode(path, DB_OPEN_CHECK, err, sizeof err);
    ck_assert_msg(db != NULL, "%s", err);
    ck_assert_int_eq(db_read_only(db), 1);
    ck_assert_int_eq(db_integrity_ok(db), 1);
    db_close(db);
    expect_no_sidecars(path);
    free(before);
    free(after);
    free(path);
    scratch_free(dir);
}
END_TEST

START_TEST(empty_files_and_bad_versions_are_refused_untouched)
{
    char *dir = scratch_new();
    char *empty = scratch_path(dir, "empty.db");
    test_write_file(empty, "", 0);
    expect_refused_untouched(empty, "empty file (0 bytes)");
    db_store *db = open_fresh(dir, "neg.db");
    db_close(db);
    char *neg = scratch_path(dir, "neg.db");
    sqlite3 *raw;
    ck_assert_int_eq(sqlite3_open(neg, &raw), SQLITE_OK);
    ck_assert_int_eq(sqlite3_exec(raw, "PRAGMA user_version = -5", NULL, NULL, NULL), SQLITE_OK);
    ck_assert_int_eq(sqlite3_close(raw), SQLITE_OK);
    expect_refused_untouched(neg, "schema version -5");
    /* glmchat makes a missing file whole: never an empty one, whatever kills it */
    char *fresh = scratch_path(dir, "fresh.db");
    char err[2048];
    db = db_open(fresh, err, sizeof err);
    ck_assert_msg(db != NULL, "%s", err);
    db_close(db);
    struct stat sb;
    ck_assert_int_eq(stat(fresh, &sb), 0);
    ck_assert_int_gt(sb.st_size, 0);
    ck_assert_int_eq(sb.st_mode & 0777, 0600);
    free(empty);
    free(neg);
    free(fresh);
    scratch_free(dir);
}
END_TEST

START_TEST(read_only_directory_gives_clear_errors)
{
    char *dir = scratch_new();
    ck_assert_int_eq(chmod(dir, 0755), 0);
    char *ro = scratch_path(dir, "ro");
    ck_assert_int_eq(mkdir(ro, 0555), 0);
    char *fresh = scratch_path(dir, "ro/glmchat.db");
    ck_assert_int_eq(open_fails_unprivileged(fresh, "Permission denied"), 0);
    /* An existing database in a directory where the WAL cannot be created. */
    char *ro2 = scratch_path(dir, "ro2");
    ck_assert_int_eq(mkdir(ro2, 0755), 0);
    db_store *db = open_fresh(dir, "ro2/glmchat.db");
    fill_for_reading(db);
    db_close(db);
    char *existing = scratch_path(dir, "ro2/glmchat.db");
    ck_assert_int_eq(chmod(existing, 0644), 0);
    ck_assert_int_eq(chmod(ro2, 0555), 0);
    ck_assert_int_eq(reads_unprivileged(existing), 0);
    ck_assert_int_eq(chmod(ro2, 0755), 0);
    expect_no_sidecars(existing);
    free(ro);
    free(fresh);
    free(ro2);
    free(existing);
    scratch_free(dir);
}
END_TEST

START_TEST(full_disk_fails_clearly_and_keeps_what_was_saved)
{
    char *dir = scratch_new();
    db_store *db = open_fresh(dir, "full.db");
    int64_t c = conv_create(db, "full", NULL);
    int64_t m = msg_append(db, c, 0, MSG_USER, MSG_COMPLETE, NULL);
    part_in small = {.kind = PART_TEXT, .data = "saved before", .len = 12};
    ck_assert_int_gt(part_append(db, m, &small), 0);
    ck_assert_int_eq(db_set_max_pages(db, 40), 0);
    size_t size = 1 << 20;
    char *big = malloc(size);
    ck_assert_ptr_nonnull(big);
    memset(big, 'f', size);
    part_in huge = {.kind = PART_TEXT, .data = big, .len = size};
    ck_assert_int_eq(part_append(db, m, &huge), -1);
    ck_assert_msg(strstr(db_errmsg(db), "full") && strstr(db_errmsg(db), "full.db"), "%s", db_errmsg(db));
    ck_assert_int_eq(msg_append(db, c, m, MSG_ASSISTANT, MSG_COMPLETE, NULL) > 0, 1); /* small still fits */
    ck_assert_int_eq(db_integrity_ok(db), 1);
    conv_messages path;
    ck_assert_int_eq(conv_load_path(db, c, &path), 0);
    ck_assert_uint_eq(path.msgs[0].nparts, 1);
    ck_assert_str_eq(path.msgs[0].parts[0].data, "saved before");
    conv_messages_free(&path);
    ck_assert_int_eq(db_set_max_pages(db, 1 << 30), 0);
    ck_assert_int_gt(part_append(db, m, &huge), 0);
    free(big);
    db_close(db);
    scratch_free(dir);
}
END_TEST

START_TEST(damaged_page_reads_fail_with_a_message)
{
    char *dir = scratch_new();
    db_store *db = open_fresh(dir, "d.db");
    int64_t c = conv_create(db, "damaged", NULL);
    int64_t m = msg_append(db, c, 0, MSG_USER, MSG_COMPLETE, NULL);
    char big[60000];
    memset(big, 'd', sizeof big);
    part_in p = {.kind = PART_TOOL_RESULT, .data = big, .len = sizeof big};
    for (int i = 0; i < 8; i++)
        ck_assert_int_gt(part_append(db, m, &p), 0);
    db_close(db);
    char *path = scratch_path(dir, "d.db");
    size_t len;
    char *bytes = test_read_file(path, &len);
    ck_assert_ptr_nonnull(bytes);
    for (size_t i = len / 2; i < len / 2 + 8192 && i < len; i++)
        bytes[i] = (char)(i * 31);
    test_write_file(path, bytes, len);
    free(bytes);
    char err[2048];
    db = db_open(path, err, sizeof err);
    if (db) { /* page 1 was fine; the damage shows when read */
        ck_assert_int_eq(db_integrity_ok(db), 0);
        ck_assert_ptr_nonnull(strstr(db_errmsg(db), "damaged"));
        db_close(db);
    } else {
        ck_assert_ptr_nonnull(strstr(err, "untouched"));
    }
    free(path);
    scratch_free(dir);
}
END_TEST

Suite *storage_faults_suite(void)
{
    Suite *s = suite_create("storage faults");
    TCase *t = tcase_create("faults");
    tcase_add_test(t, text_file_is_refused_untouched);
    tcase_add_test(t, garbage_after_a_valid_magic_is_refused_untouched);
    tcase_add_test(t, truncated_database_is_refused_untouched);
    tcase_add_test(t, another_programs_database_is_refused_untouched);
    tcase_add_test(t, newer_schema_is_refused_untouched);
    tcase_add_test(t, directories_in_the_way_give_clear_errors);
    tcase_add_test(t, read_only_directory_gives_clear_errors);
    tcase_add_test(t, read_only_files_open_read_only_without_side_files);
    tcase_add_test(t, empty_files_and_bad_versions_are_refused_untouched);
    tcase_add_test(t, full_disk_fails_clearly_and_keeps_what_was_saved);
    tcase_add_test(t, damaged_page_reads_fail_with_a_message);
    suite_add_tcase(s, t);
    return s;
}
