/* search.c: full-text search (FTS5) over the text and reasoning parts of every conversation,
 * turning the user's plain words into a safe FTS5 query and returning ranked snippets. */
#include <stdlib.h>
#include <string.h>

#include "storage/db_internal.h"

#define SEARCH_DEFAULT_LIMIT 50
/* Ranking reads every match (bm25); a word in every message of a large history would take
 * seconds. Only the newest this many matches are ranked, which bounds a search's time. */
#define SEARCH_RANK_WINDOW 4000

/* Every whitespace-separated word becomes a quoted FTS5 string ("" inside doubled), so no
 * input is an FTS5 syntax error; FTS5 ANDs them. NULL when out of memory; "" for no words. */
static char *fts_query(const char *query)
{
    size_t n = strlen(query);
    char *out = malloc(n * 3 + 3);
    if (!out)
        return NULL;
    size_t o = 0;
    const char *s = query;
    while (*s) {
        while (*s == ' ' || *s == '\t' || *s == '\n' || *s == '\r' || *s == '\f' || *s == '\v')
            s++;
        if (!*s)
            break;
        if (o)
            out[o++] = ' ';
        out[o++] = '"';
        while (*s && !(*s == ' ' || *s == '\t' || *s == '\n' || *s == '\r' || *s == '\f' || *s == '\v')) {
            if (*s == '"')
                out[o++] = '"';
            out[o++] = *s++;
        }
        out[o++] = '"';
    }
    out[o] = '\0';
    return out;
}

void search_hits_free(search_hit *hits, size_t count)
{
    for (size_t i = 0; hits && i < count; i++) {
        free(hits[i].title);
        free(hits[i].snippet);
    }
    free(hits);
}

static int hit_from_row(sqlite3_stmt *st, search_hit *h)
{
    memset(h, 0, sizeof *h);
    h->part = sqlite3_column_int64(st, 0);
    h->msg = sqlite3_column_int64(st, 1);
    h->conv = sqlite3_column_int64(st, 2);
    int kind = part_kind_parse((const char *)sqlite3_column_text(st, 3));
    int role = msg_role_parse((const char *)sqlite3_column_text(st, 4));
    h->kind = kind < 0 ? PART_TEXT : (part_kind)kind;
    h->role = role < 0 ? MSG_USER : (msg_role)role;
    h->created_at = sqlite3_column_int64(st, 7);
    h->number = sqlite3_column_int64(st, 8);
    size_t title_len, snippet_len;
    if (db_column_copy(st, 5, &h->title, &title_len) != 0 ||
        db_column_copy(st, 6, &h->snippet, &snippet_len) != 0 ||
        bytes_make_display(&h->title, title_len) != 0 ||
        bytes_make_display(&h->snippet, snippet_len) != 0)
        return -1;
    if (!h->snippet && !(h->snippet = bytes_dup("", 0)))
        return -1;
    return 0;
}

/* Whether parts past search_state.indexed_through exist: 1, 0, or -1 on error. */
static int index_pending_exists(db_store *db)
{
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(db->sql,
                           "SELECT EXISTS (SELECT 1 FROM part WHERE id >"
                           " (SELECT indexed_through FROM search_state))",
                           -1, &st, NULL) != SQLITE_OK)
        return db_fail(db, "checking the search index");
    int rc = sqlite3_step(st);
    int pending = rc == SQLITE_ROW ? sqlite3_column_int(st, 0) : db_fail(db, "checking the search index");
    sqlite3_finalize(st);
    return pending;
}

int64_t search_unindexed(db_store *db)
{
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(db->sql,
                           "SELECT count(*) FROM part WHERE kind IN ('text','reasoning') AND id >"
                           " (SELECT indexed_through FROM search_state)",
                           -1, &st, NULL) != SQLITE_OK)
        return db_fail(db, "checking the search index");
    int64_t n = sqlite3_step(st) == SQLITE_ROW ? sqlite3_column_int64(st, 0)
                                               : db_fail(db, "checking the search index");
    sqlite3_finalize(st);
    return n;
}

int search_index_pending(db_store *db)
{
    if (db->read_only) /* searched as indexed; search_unindexed tells what that misses */
        return 0;
    int pending = index_pending_exists(db);
    if (pending <= 0)
        return pending;
    int opened = db_tx_start(db);
    if (opened < 0)
        return -1;
    int ok = sqlite3_exec(db->sql,
                          "INSERT INTO part_fts(rowid, body) SELECT id, CAST(body AS TEXT) FROM part"
                          " WHERE id > (SELECT indexed_through FROM search_state)"
                          " AND kind IN ('text','reasoning') ORDER BY id;"
                          "UPDATE search_state SET indexed_through = (SELECT max(id) FROM part)"
                          " WHERE (SELECT max(id) FROM part) > indexed_through",
                          NULL, NULL, NULL) == SQLITE_OK;
    if (!ok)
        db_fail(db, "indexing new messages for search");
    return db_tx_end(db, opened, ok);
}

/* The smallest rowid among the newest SEARCH_RANK_WINDOW matches (0 when there are fewer),
 * or -1 on error. */
static int64_t rank_window_floor(db_store *db, const char *match)
{
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(db->sql,
                           "SELECT rowid FROM part_fts WHERE part_fts MATCH ?1 ORDER BY rowid DESC"
                           " LIMIT 1 OFFSET ?2",
                           -1, &st, NULL) != SQLITE_OK)
        return db_fail(db, "searching");
    sqlite3_bind_text(st, 1, match, -1, SQLITE_STATIC);
    sqlite3_bind_int(st, 2, SEARCH_RANK_WINDOW - 1);
    int rc = sqlite3_step(st);
    int64_t lowest = rc == SQLITE_ROW ? sqlite3_column_int64(st, 0) : 0;
    if (rc != SQLITE_ROW && rc != SQLITE_DONE)
        lowest = db_fail(db, "searching");
    sqlite3_finalize(st);
    return lowest;
}

int search_parts(db_store *db, const char *query, size_t limit, search_hit **hits, size_t *count)
{
    *hits = NULL;
    *count = 0;
    db_clear_error(db);
    char *match = fts_query(query ? query : "");
    if (!match)
        return db_failf(db, "out of memory searching");
    if (!match[0]) {
        free(match);
        return 0;
    }
    if (search_index_pending(db) != 0) {
        free(match);
        return -1;
    }
    int64_t lowest = rank_window_floor(db, match);
    if (lowest < 0) {
        free(match);
        return -1;
    }
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(db->sql,
                           /* Rank and cut inside FTS5 first, so that snippets and joins
                            * are computed for the rows shown, not for every match. */
                           "SELECT p.id, m.id, m.conversation_id, p.kind, m.role, c.title,"
                           " f.snip, m.created_at, (SELECT count(*) FROM message n WHERE"
                           " n.conversation_id = m.conversation_id AND n.id <= m.id)"
                           " FROM (SELECT rowid AS id, rank AS score,"
                           "  snippet(part_fts, 0, '[', ']', '...', 16) AS snip FROM part_fts"
                           "  WHERE part_fts MATCH ?1 AND rowid >= ?3 ORDER BY rank LIMIT ?2) f"
                           " JOIN part p ON p.id = f.id JOIN message m ON m.id = p.message_id"
                           " JOIN conversation c ON c.id = m.conversation_id ORDER BY f.score",
                           -1, &st, NULL) != SQLITE_OK) {
        free(match);
        return db_fail(db, "searching");
    }
    sqlite3_bind_text(st, 1, match, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(st, 2, (int64_t)(limit ? limit : SEARCH_DEFAULT_LIMIT));
    sqlite3_bind_int64(st, 3, lowest);
    free(match);
    search_hit *list = NULL;
    size_t n = 0, cap = 0;
    int rc, oom = 0;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (n == cap) {
            size_t ncap = cap ? cap * 2 : 16;
            search_hit *grown = realloc(list, ncap * sizeof *grown);
            if (!grown) {
                oom = 1;
                break;
            }
            list = grown;
            cap = ncap;
        }
        if (hit_from_row(st, &list[n]) != 0) {
            free(list[n].title);
            free(list[n].snippet);
            oom = 1;
            break;
        }
        n++;
    }
    if (oom || rc != SQLITE_DONE) {
        if (oom)
            db_failf(db, "out of memory searching %s", db->path);
        else
            db_fail(db, "searching");
        sqlite3_finalize(st);
        search_hits_free(list, n);
        return -1;
    }
    sqlite3_finalize(st);
    *hits = list;
    *count = n;
    return 0;
}
