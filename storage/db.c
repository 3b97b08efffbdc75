/* db.c: opening glmchat's SQLite file safely (refusing foreign, damaged or newer files without
 * touching them), connection PRAGMAs, transactions, statement cache and error sentences. */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "storage/db_internal.h"

#define DB_BUSY_TIMEOUT_MS 5000
#define DB_RECOVERY_ADVICE                                                                     \
    "to recover, keep the file and run `sqlite3 FILE .recover | sqlite3 NEW.db`, then use "    \
    "--db NEW.db (or restore a copy)"

int64_t db_now_ms(void)
{
    struct timespec ts;
    if (clock_gettime(CLOCK_REALTIME, &ts) != 0)
        return 0;
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- errors ------------------------------------------------------------------------------ */

static const char *advice_for(int code)
{
    switch (code & 0xff) {
    case SQLITE_FULL:
        return "the disk or the database's size limit is full: free some space and retry; "
               "everything saved before is intact";
    case SQLITE_READONLY:
        return "the database cannot be written: check the permissions of the file and of its "
               "directory";
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB:
        return "the database is damaged: " DB_RECOVERY_ADVICE;
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
        return "another process holds the database locked: close it and retry";
    case SQLITE_IOERR:
        return "the disk reported an I/O error: check the disk";
    case SQLITE_CANTOPEN:
        return "the file cannot be opened: check the path and its permissions";
    case SQLITE_NOMEM:
        return "out of memory";
    case SQLITE_TOOBIG:
        return "a value is larger than SQLite accepts (1 GB)";
    default:
        return NULL;
    }
}

/* SQLite's check reports span lines ("*** in database main ***\nPage 3: ..."); a message is
 * one line. */
static void one_line(char *out, size_t cap, const char *s)
{
    size_t k = 0;
    for (; *s && k + 3 < cap; s++) {
        if (*s != '\n') {
            out[k++] = *s;
        } else if (s[1]) {
            out[k++] = ';';
            out[k++] = ' ';
        }
    }
    out[k] = 0;
}

void db_clear_error(db_store *db)
{
    db->err[0] = '\0';
}

int db_failf(db_store *db, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(db->err, sizeof db->err, fmt, ap);
    va_end(ap);
    return -1;
}

int db_fail(db_store *db, const char *what, ...)
{
    char head[512];
    va_list ap;
    va_start(ap, what);
    vsnprintf(head, sizeof head, what, ap);
    va_end(ap);
    int code = sqlite3_extended_errcode(db->sql);
    const char *advice = advice_for(code);
    snprintf(db->err, sizeof db->err, "%s in %s: %s%s%s", head, db->path, sqlite3_errmsg(db->sql),
             advice ? "; " : "", advice ? advice : "");
    return -1;
}

const char *db_errmsg(const db_store *db)
{
    return db ? db->err : "no database handle";
}

const char *db_path(const db_store *db)
{
    return db->path;
}

/* ---- statements and transactions --------------------------------------------------------- */

sqlite3_stmt *db_stmt(db_store *db, enum db_stmt_id id, const char *sql)
{
    sqlite3_stmt *st = db->stmts[id];
    if (st) {
        sqlite3_reset(st);
        sqlite3_clear_bindings(st);
        return st;
    }
    if (sqlite3_prepare_v3(db->sql, sql, -1, SQLITE_PREPARE_PERSISTENT, &st, NULL) != SQLITE_OK) {
        db_fail(db, "preparing a query");
        return NULL;
    }
    db->stmts[id] = st;
    return st;
}

int db_step_done(db_store *db, sqlite3_stmt *st, const char *what)
{
    int rc = sqlite3_step(st);
    if (rc == SQLITE_DONE || rc == SQLITE_ROW) {
        sqlite3_reset(st);
        return 0;
    }
    db_fail(db, "%s", what);
    sqlite3_reset(st);
    return -1;
}

int db_bind_text_or_null(sqlite3_stmt *st, int col, const char *s)
{
    return s ? sqlite3_bind_text(st, col, s, -1, SQLITE_TRANSIENT) : sqlite3_bind_null(st, col);
}

int db_column_copy(sqlite3_stmt *st, int col, char **out, size_t *len)
{
    *out = NULL;
    if (len)
        *len = 0;
    if (sqlite3_column_type(st, col) == SQLITE_NULL)
        return 0;
    const void *p = sqlite3_column_blob(st, col);
    size_t n = (size_t)sqlite3_column_bytes(st, col);
    char *copy = bytes_dup(p ? p : "", n);
    if (!copy)
        return -1;
    *out = copy;
    if (len)
        *len = n;
    return 0;
}

static int exec_sql(db_store *db, const char *sql, const char *what)
{
    if (sqlite3_exec(db->sql, sql, NULL, NULL, NULL) != SQLITE_OK)
        return db_fail(db, "%s", what);
    return 0;
}

int db_tx_start(db_store *db)
{
    if (!sqlite3_get_autocommit(db->sql))
        return 0;
    if (exec_sql(db, "BEGIN IMMEDIATE", "starting a transaction") != 0)
        return -1;
    return 1;
}

int db_tx_end(db_store *db, int opened, int ok)
{
    if (!opened)
        return ok ? 0 : -1;
    if (ok) {
        if (exec_sql(db, "COMMIT", "saving (commit)") == 0)
            return 0;
        ok = 0;
    }
    /* Keep the first failure's message: it says what went wrong. */
    if (!sqlite3_get_autocommit(db->sql))
        sqlite3_exec(db->sql, "ROLLBACK", NULL, NULL, NULL);
    return -1;
}

int db_begin(db_store *db)
{
    db_clear_error(db);
    if (!sqlite3_get_autocommit(db->sql))
        return db_failf(db, "db_begin: a transaction is already open on %s; commit it first",
                        db->path);
    return exec_sql(db, "BEGIN IMMEDIATE", "starting a transaction");
}

int db_commit(db_store *db)
{
    db_clear_error(db);
    if (sqlite3_get_autocommit(db->sql))
        return db_failf(db, "db_commit: no transaction is open on %s", db->path);
    if (exec_sql(db, "COMMIT", "saving (commit)") != 0) {
        if (!sqlite3_get_autocommit(db->sql))
            sqlite3_exec(db->sql, "ROLLBACK", NULL, NULL, NULL);
        return -1;
    }
    return 0;
}

int db_rollback(db_store *db)
{
    db_clear_error(db);
    if (sqlite3_get_autocommit(db->sql))
        return 0;
    return exec_sql(db, "ROLLBACK", "rolling back");
}

int db_set_max_pages(db_store *db, int64_t pages)
{
    char sql[64];
    db_clear_error(db);
    snprintf(sql, sizeof sql, "PRAGMA max_page_count = %lld", (long long)pages);
    return exec_sql(db, sql, "setting the page limit");
}

int db_idle(db_store *db)
{
    db_clear_error(db);
    if (db->read_only)
        return 0;
    if (search_index_pending(db) != 0)
        return -1;
    int rc = sqlite3_wal_checkpoint_v2(db->sql, NULL, SQLITE_CHECKPOINT_PASSIVE, NULL, NULL);
    if (rc != SQLITE_OK && rc != SQLITE_BUSY)
        return db_fail(db, "checkpointing the write-ahead log");
    return 0;
}

int db_integrity_ok(db_store *db)
{
    sqlite3_stmt *st;
    db_clear_error(db);
    if (sqlite3_prepare_v2(db->sql, "PRAGMA integrity_check", -1, &st, NULL) != SQLITE_OK)
        return db_fail(db, "checking integrity");
    int rc = sqlite3_step(st);
    int result = -1;
    if (rc == SQLITE_ROW) {
        const char *first = (const char *)sqlite3_column_text(st, 0);
        result = first && strcmp(first, "ok") == 0;
        char detail[320];
        one_line(detail, sizeof detail, first ? first : "(no detail)");
        if (!result)
            db_failf(db, "%s is damaged: %s; %s", db->path, detail, DB_RECOVERY_ADVICE);
    } else {
        db_fail(db, "checking integrity");
    }
    sqlite3_finalize(st);
    if (result != 1)
        return result;
    /* The search index must match the parts it was built from (after indexing what waits);
     * a read-only handle checks what is indexed (FTS5's check is an INSERT, a write). */
    if (db->read_only)
        return 1;
    if (search_index_pending(db) != 0)
        return -1;
    if (sqlite3_exec(db->sql, "INSERT INTO part_fts(part_fts) VALUES ('integrity-check')", NULL, NULL,
                     NULL) != SQLITE_OK) {
        int code = sqlite3_extended_errcode(db->sql) & 0xff;
        if (code == SQLITE_CORRUPT) {
            db_failf(db, "the search index of %s is damaged: %s; %s", db->path,
                     sqlite3_errmsg(db->sql), DB_RECOVERY_ADVICE);
            return 0;
        }
        return db_fail(db, "checking the search index");
    }
    return 1;
}

/* ---- opening ----------------------------------------------------------------------------- */

static int mkdir_parents(const char *path, char *err, size_t errlen)
{
    char dir[4096];
    const char *slash = strrchr(path, '/');
    if (!slash || slash == path)
        return 0;
    size_t n = (size_t)(slash - path);
    if (n >= sizeof dir) {
        snprintf(err, errlen, "database path %s is too long", path);
        return -1;
    }
    memcpy(dir, path, n);
    dir[n] = '\0';
    for (char *s = dir + 1;; s++) {
        char c = *s;
        if (c != '/' && c != '\0')
            continue;
        *s = '\0';
        if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
            snprintf(err, errlen, "cannot create directory %s for the database %s: %s", dir, path,
                     strerror(errno));
            return -1;
        }
        *s = c;
        if (c == '\0')
            break;
    }
    return 0;
}

static uint32_t be32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* Whether path+suffix exists and is not empty. */
static int has_sidecar(const char *path, const char *suffix)
{
    char side[4200];
    struct stat sb;
    snprintf(side, sizeof side, "%s%s", path, suffix);
    return stat(side, &sb) == 0 && sb.st_size > 0;
}

/* Refuses a schema version glmchat never writes (negative) or does not know yet (newer). */
static int check_version(const char *path, int64_t version, char *err, size_t errlen)
{
    if (version < 0) {
        snprintf(err, errlen,
                 "%s has schema version %lld, which no glmchat writes (versions count up from 0): "
                 "it is damaged or another program's file; it was left untouched: move it away or "
                 "pass another file with --db",
                 path, (long long)version);
        return -1;
    }
    if (version > DB_SCHEMA_VERSION) {
        snprintf(err, errlen,
                 "%s was written by a newer glmchat (schema %lld; this one knows up to %d); it was "
                 "left untouched: upgrade glmchat to open it",
                 path, (long long)version, DB_SCHEMA_VERSION);
        return -1;
    }
    return 0;
}

/* Looks at an existing file before SQLite does, so that a file we must refuse is never
 * opened for writing. 0: fine (absent, empty, or an SQLite file of a version we know). */
static int probe_file(const char *path, char *err, size_t errlen)
{
    struct stat sb;
    if (stat(path, &sb) != 0)
        return 0;
    if (!S_ISREG(sb.st_mode)) {
        snprintf(err, errlen, "%s is not a regular file; pass a database file with --db", path);
        return -1;
    }
    /* glmchat never leaves an empty file behind (create_database builds a new one aside and
     * links it in whole), so an empty one is someone else's, or a copy that went wrong. A WAL
     * beside it would hold the pages, so that case is left to SQLite. */
    if (sb.st_size == 0 && !has_sidecar(path, "-wal")) {
        snprintf(err, errlen,
                 "%s is an empty file (0 bytes), not a glmchat database; it was left untouched: "
                 "delete it to let glmchat create a new database there, or pass another file "
                 "with --db",
                 path);
        return -1;
    }
    if (sb.st_size == 0)
        return 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        snprintf(err, errlen, "cannot read the database %s: %s; check its permissions", path,
                 strerror(errno));
        return -1;
    }
    unsigned char head[100];
    ssize_t got = read(fd, head, sizeof head);
    close(fd);
    if (got < 0) {
        snprintf(err, errlen, "cannot read the database %s: %s", path, strerror(errno));
        return -1;
    }
    if (got < (ssize_t)sizeof head || memcmp(head, "SQLite format 3", 16) != 0) {
        snprintf(err, errlen,
                 "%s is not a glmchat database (it is not an SQLite file); it was left untouched: "
                 "move it away or pass another file with --db",
                 path);
        return -1;
    }
    /* The header's page count is trustworthy when its "valid for" stamp matches the change
     * counter and no WAL or journal is left to replay (a checkpoint killed midway leaves the
     * header ahead of the file; the WAL repairs that); a file shorter than that lost pages. */
    uint32_t page_size = (uint32_t)head[16] << 8 | head[17];
    if (page_size == 1)
        page_size = 65536;
    uint64_t pages = be32(head + 28);
    if (be32(head + 92) == be32(head + 24) && pages * page_size > (uint64_t)sb.st_size &&
        !has_sidecar(path, "-wal") && !has_sidecar(path, "-journal")) {
        snprintf(err, errlen,
                 "%s is damaged: it is cut short (%lld of %llu bytes); it was left untouched: "
                 "restore a backup or move it away",
                 path, (long long)sb.st_size, (unsigned long long)(pages * page_size));
        return -1;
    }
    /* user_version is a signed 32-bit number */
    int32_t version = (int32_t)be32(head + 60);
    return check_version(path, version, err, errlen);
}

/* Reads what SQLite sees: schema version and whether tables exist. Reading only. */
static int check_contents(db_store *db, char *err, size_t errlen)
{
    sqlite3_stmt *st;
    int version = 0, tables = -1, read = 0;
    if (sqlite3_prepare_v2(db->sql, "SELECT (SELECT user_version FROM pragma_user_version), "
                                    "(SELECT count(*) FROM sqlite_master)",
                           -1, &st, NULL) == SQLITE_OK) {
        if (sqlite3_step(st) == SQLITE_ROW) {
            version = sqlite3_column_int(st, 0);
            tables = sqlite3_column_int(st, 1);
            read = 1;
        }
        sqlite3_finalize(st);
    }
    if (!read) {
        int code = sqlite3_extended_errcode(db->sql);
        const char *advice = advice_for(code);
        if (db->read_only && has_sidecar(db->path, "-wal")) {
            snprintf(err, errlen, "cannot open the read-only database %s: %s; its -wal file holds "
                     "changes not yet in the database, and reading them needs its -shm file or a "
                     "writable directory: make the directory writable and run glmchat list once",
                     db->path, sqlite3_errmsg(db->sql));
            return -1;
        }
        if ((code & 0xff) == SQLITE_READONLY || (code & 0xff) == SQLITE_CANTOPEN) {
            snprintf(err, errlen, "cannot open the database %s: %s; %s", db->path,
                     sqlite3_errmsg(db->sql), advice);
            return -1;
        }
        snprintf(err, errlen, "%s cannot be read as a glmchat database: %s; it was left untouched%s%s",
                 db->path, sqlite3_errmsg(db->sql), advice ? "; " : "", advice ? advice : "");
        return -1;
    }
    if (check_version(db->path, version, err, errlen) != 0)
        return -1;
    if (version == 0 && tables > 0) {
        snprintf(err, errlen,
                 "%s is an SQLite database of another program (it has tables but no glmchat "
                 "schema); it was left untouched: pass another file with --db",
                 db->path);
        return -1;
    }
    if (db->read_only && version < DB_SCHEMA_READABLE_FROM) {
        snprintf(err, errlen,
                 "%s has schema %d and this glmchat needs %d; upgrading it needs write access, "
                 "but the file or its directory is read-only: make both writable and retry",
                 db->path, version, DB_SCHEMA_VERSION);
        return -1;
    }
    return 0;
}

/* Conversations are private: a new database file (and so its -wal and -shm, which SQLite
 * creates with the same mode) is readable by its owner only. */
static int create_private(const char *path, char *err, size_t errlen)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd >= 0) {
        close(fd);
        return 0;
    }
    if (errno == EEXIST)
        return 0;
    snprintf(err, errlen, "cannot create the database %s: %s; check the permissions of its directory",
             path, strerror(errno));
    return -1;
}

static int set_pragmas(db_store *db, int in_memory)
{
    if (!in_memory) {
        sqlite3_stmt *st;
        if (sqlite3_prepare_v2(db->sql, "PRAGMA journal_mode = WAL", -1, &st, NULL) != SQLITE_OK)
            return db_fail(db, "switching to WAL");
        /* Several first opens at once: SQLite answers BUSY at once, without its busy handler, to
         * the one whose lock upgrade could deadlock; wait for the others within the timeout. */
        int rc = sqlite3_step(st);
        for (int waited_ms = 0; waited_ms < DB_BUSY_TIMEOUT_MS; waited_ms += 5) {
            if ((rc & 0xff) != SQLITE_BUSY && (rc & 0xff) != SQLITE_LOCKED)
                break;
            sqlite3_reset(st);
            sqlite3_sleep(5);
            rc = sqlite3_step(st);
        }
        const char *mode = rc == SQLITE_ROW ? (const char *)sqlite3_column_text(st, 0) : NULL;
        int wal = mode && strcmp(mode, "wal") == 0;
        sqlite3_finalize(st);
        if (rc != SQLITE_ROW)
            return db_fail(db, "switching to WAL");
        if (!wal)
            return db_failf(db, "%s cannot use write-ahead logging (journal mode stays '%s'); "
                                "put the database on a local disk",
                            db->path, mode ? mode : "?");
    }
    return exec_sql(db, "PRAGMA synchronous = FULL; PRAGMA foreign_keys = ON; "
                        "PRAGMA temp_store = MEMORY",
                    "setting connection options");
}

/* PRAGMA quick_check (the b-trees' structure, not the indexes' agreement with their tables):
 * linear in the file's size, a small part of what one turn costs, and it keeps glmchat from
 * writing into damaged pages, which SQLite would otherwise spread. 0 when ok. */
static int quick_check(db_store *db, char *err, size_t errlen)
{
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(db->sql, "PRAGMA quick_check(1)", -1, &st, NULL) != SQLITE_OK) {
        snprintf(err, errlen, "%s is damaged: %s; %s", db->path, sqlite3_errmsg(db->sql),
                 DB_RECOVERY_ADVICE);
        return -1;
    }
    int rc = sqlite3_step(st);
    const char *first = rc == SQLITE_ROW ? (const char *)sqlite3_column_text(st, 0) : NULL;
    int ok = first && strcmp(first, "ok") == 0;
    char detail[320];
    one_line(detail, sizeof detail, first ? first : sqlite3_errmsg(db->sql));
    if (!ok)
        snprintf(err, errlen, "%s is damaged (%s); glmchat will not write to it and left it "
                 "untouched; %s", db->path, detail, DB_RECOVERY_ADVICE);
    sqlite3_finalize(st);
    return ok ? 0 : -1;
}

/* Whether glmchat may write the file and create its -wal and -shm beside it. */
static int writable(const char *path)
{
    char dir[4096];
    const char *slash = strrchr(path, '/');
    if (!slash)
        snprintf(dir, sizeof dir, ".");
    else
        snprintf(dir, sizeof dir, "%.*s", slash == path ? 1 : (int)(slash - path), path);
    return access(path, W_OK) == 0 && access(dir, W_OK) == 0;
}

/* path as an SQLite URI ("file:" + percent-encoded path) with the given query. */
static void file_uri(char *out, size_t cap, const char *path, const char *query)
{
    size_t k = (size_t)snprintf(out, cap, "file:");
    for (const unsigned char *p = (const unsigned char *)path; *p && k + 4 < cap; p++) {
        if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
            strchr("/-._~", *p))
            out[k++] = (char)*p;
        else
            k += (size_t)snprintf(out + k, cap - k, "%%%02X", *p);
    }
    snprintf(out + k, cap - k, "?%s", query);
}

/* A read-only connection that creates nothing beside the file: immutable (no locks, no -shm)
 * unless a WAL holds pages the file lacks, which only a WAL reader (mode=ro) sees. */
static int open_sqlite(db_store *db, int in_memory)
{
    if (!db->read_only)
        return sqlite3_open_v2(db->path, &db->sql, SQLITE_OPEN_READWRITE |
                               (in_memory ? SQLITE_OPEN_CREATE : 0) | SQLITE_OPEN_NOMUTEX, NULL);
    char uri[3 * 4096 + 64];
    file_uri(uri, sizeof uri, db->path, has_sidecar(db->path, "-wal") ? "mode=ro" : "immutable=1");
    return sqlite3_open_v2(uri, &db->sql, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI |
                           SQLITE_OPEN_NOMUTEX, NULL);
}

static void remove_with_sidecars(const char *path)
{
    static const char *const suffixes[] = {"", "-wal", "-shm", "-journal"};
    char side[4200];
    for (int i = 0; i < 4; i++) {
        snprintf(side, sizeof side, "%s%s", path, suffixes[i]);
        unlink(side);
    }
}

/* A new database is built whole under a temporary name and linked in, so no process killed
 * midway leaves an empty or half-made file at path (and an empty file can be refused). */
static int create_database(const char *path, char *err, size_t errlen)
{
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.new-%ld", path, (long)getpid());
    remove_with_sidecars(tmp); /* a leftover of an earlier process with this pid */
    if (create_private(tmp, err, errlen) != 0)
        return -1;
    db_store fresh = {0};
    snprintf(fresh.path, sizeof fresh.path, "%.4095s", tmp);
    int ok = sqlite3_open_v2(tmp, &fresh.sql, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX,
                             NULL) == SQLITE_OK;
    if (ok) {
        sqlite3_extended_result_codes(fresh.sql, 1);
        ok = set_pragmas(&fresh, 0) == 0 && db_migrate(&fresh) == 0;
    }
    if (!ok)
        snprintf(err, errlen, "cannot create the database %s: %s", path,
                 fresh.sql ? (fresh.err[0] ? fresh.err : sqlite3_errmsg(fresh.sql)) : "out of memory");
    /* closing the only connection checkpoints the WAL into the file and removes it */
    if (fresh.sql && sqlite3_close(fresh.sql) != SQLITE_OK && ok) {
        snprintf(err, errlen, "cannot create the database %s: closing it failed", path);
        ok = 0;
    }
    if (ok && link(tmp, path) != 0 && errno != EEXIST) { /* EEXIST: another process won */
        snprintf(err, errlen, "cannot create the database %s: %s; check the permissions of its "
                 "directory", path, strerror(errno));
        ok = 0;
    }
    remove_with_sidecars(tmp);
    return ok ? 0 : -1;
}

static db_store *open_failed(db_store *db, const char *err)
{
    (void)err;
    /* a refused file stays byte-identical: no checkpoint of a WAL left beside it */
    if (db->sql)
        sqlite3_db_config(db->sql, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1, NULL);
    db_close(db);
    return NULL;
}

db_store *db_open_mode(const char *path, db_open_kind kind, char *err, size_t errlen)
{
    if (!path || !path[0]) {
        snprintf(err, errlen, "no database path given");
        return NULL;
    }
    int in_memory = strcmp(path, ":memory:") == 0;
    struct stat sb;
    if (!in_memory && kind == DB_OPEN_CHECK && stat(path, &sb) != 0) {
        snprintf(err, errlen, "cannot check the database %s: %s", path, strerror(errno));
        return NULL;
    }
    if (!in_memory && (mkdir_parents(path, err, errlen) != 0 || probe_file(path, err, errlen) != 0))
        return NULL;
    if (!in_memory && stat(path, &sb) != 0 && (errno != ENOENT || create_database(path, err, errlen)))
        return NULL;
    db_store *db = calloc(1, sizeof *db);
    if (!db) {
        snprintf(err, errlen, "out of memory opening %s", path);
        return NULL;
    }
    snprintf(db->path, sizeof db->path, "%s", path);
    db->mem_max_entries = MEM_DEFAULT_MAX_ENTRIES;
    db->mem_max_bytes = MEM_DEFAULT_MAX_BYTES;
    db->read_only = !in_memory && (kind == DB_OPEN_CHECK || !writable(path));
    int rc = open_sqlite(db, in_memory);
    if (rc != SQLITE_OK) {
        int sys = db->sql ? sqlite3_system_errno(db->sql) : 0;
        snprintf(err, errlen, "cannot open the database %s%s: %s%s%s; check the path and the "
                 "permissions of its directory",
                 path, db->read_only ? " (read-only)" : "",
                 db->sql ? sqlite3_errmsg(db->sql) : sqlite3_errstr(rc), sys ? ": " : "",
                 sys ? strerror(sys) : "");
        return open_failed(db, err);
    }
    sqlite3_extended_result_codes(db->sql, 1);
    sqlite3_busy_timeout(db->sql, DB_BUSY_TIMEOUT_MS);
    if (check_contents(db, err, errlen) != 0)
        return open_failed(db, err);
    if (kind != DB_OPEN_CHECK && !in_memory && quick_check(db, err, errlen) != 0)
        return open_failed(db, err);
    if (db->read_only) {
        if (exec_sql(db, "PRAGMA query_only = ON; PRAGMA temp_store = MEMORY",
                     "setting connection options") != 0) {
            snprintf(err, errlen, "%s", db->err);
            return open_failed(db, err);
        }
    } else if (set_pragmas(db, in_memory) != 0 || db_migrate(db) != 0) {
        snprintf(err, errlen, "%s", db->err);
        db_close(db);
        return NULL;
    }
    db_clear_error(db);
    return db;
}

db_store *db_open(const char *path, char *err, size_t errlen)
{
    return db_open_mode(path, DB_OPEN_NORMAL, err, errlen);
}

int db_read_only(const db_store *db)
{
    return db->read_only;
}

void db_close(db_store *db)
{
    if (!db)
        return;
    for (int i = 0; i < STMT_COUNT; i++)
        sqlite3_finalize(db->stmts[i]);
    if (db->sql) {
        if (!sqlite3_get_autocommit(db->sql))
            sqlite3_exec(db->sql, "ROLLBACK", NULL, NULL, NULL);
        sqlite3_close(db->sql);
    }
    free(db);
}
