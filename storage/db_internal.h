/* db_internal.h: what the storage files share and the rest of glmchat does not see: the
 * handle's fields, cached statements, error helpers, transactions, small byte utilities. */
#ifndef GLMCHAT_STORAGE_DB_INTERNAL_H
#define GLMCHAT_STORAGE_DB_INTERNAL_H

#include <sqlite3.h>

#include "storage/storage.h"

/* Statements prepared once per handle, by the file that uses them. */
enum db_stmt_id {
    STMT_CONV_CREATE,
    STMT_CONV_TOUCH,
    STMT_MSG_APPEND,
    STMT_MSG_SET_LEAF,
    STMT_MSG_FINISH,
    STMT_MSG_CONV,
    STMT_PART_APPEND,
    STMT_MEM_PUT,
    STMT_MEM_GET,
    STMT_MEM_TOUCH,
    STMT_COUNT
};

struct db_store {
    sqlite3 *sql;
    sqlite3_stmt *stmts[STMT_COUNT];
    int64_t mem_max_entries;
    int64_t mem_max_bytes;
    char path[4096];
    char err[8192];
    int read_only; /* opened read-only: the file or its directory is not writable, or check-db */
};

/* The cached statement id (prepared from sql on first use, reset and unbound), or NULL with
 * db->err set. */
sqlite3_stmt *db_stmt(db_store *db, enum db_stmt_id id, const char *sql);

/* Sets db->err to "WHAT: <SQLite's reason and what to do>" and returns -1. */
int db_fail(db_store *db, const char *what, ...) __attribute__((format(printf, 2, 3)));
/* Sets db->err to the formatted sentence as it is and returns -1. */
int db_failf(db_store *db, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void db_clear_error(db_store *db);

/* A write made of several statements: joins the caller's db_begin transaction or opens its
 * own (BEGIN IMMEDIATE). tx_end commits (ok) or rolls back (!ok) only what tx_start opened.
 * tx_start returns 1 when it opened one, 0 when it joined, -1 on error. */
int db_tx_start(db_store *db);
int db_tx_end(db_store *db, int opened, int ok);

/* Steps a write statement to completion; 0 or -1 (db_fail with what). */
int db_step_done(db_store *db, sqlite3_stmt *st, const char *what);

/* Binds text or NULL. */
int db_bind_text_or_null(sqlite3_stmt *st, int col, const char *s);

/* malloc'd copy of a column (text or blob) with a terminating NUL, or NULL for SQL NULL.
 * len gets the byte count when not NULL. Returns -1 only when out of memory. */
int db_column_copy(sqlite3_stmt *st, int col, char **out, size_t *len);

/* Adds parts written since the last call to the FTS index, in one transaction (search.c).
 * 0 (also when nothing was pending) or -1. */
int search_index_pending(db_store *db);

/* Runs migrations on an open handle (migrations.c). */
int db_migrate(db_store *db);

/* Byte utilities (bytes.c). */
int bytes_valid_utf8(const char *s, size_t len);       /* 1 when valid UTF-8 without NUL */
char *bytes_base64_encode(const char *s, size_t len, size_t *outlen);
/* Returns malloc'd bytes (+NUL) or NULL when s is not base64 (or out of memory: *bad = 0). */
char *bytes_base64_decode(const char *s, size_t len, size_t *outlen, int *bad);
char *bytes_dup(const char *s, size_t len); /* len bytes + NUL, or NULL when out of memory */
/* A malloc'd valid UTF-8 copy: each NUL and each maximal invalid subpart (base/utf8.h's policy)
 * becomes U+FFFD. NULL when out of memory. */
char *bytes_utf8_lossy(const char *s, size_t len);
/* Replaces *s (len bytes) by its lossy UTF-8 copy; -1 when out of memory. NULL stays NULL. */
int bytes_make_display(char **s, size_t len);

#endif
