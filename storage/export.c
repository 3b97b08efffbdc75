/* export.c: exporting one or every conversation as JSON (lossless), Markdown or HTML: loads the
 * conversation's fields and messages and hands them to the format's writer. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "base/utf8.h"
#include "storage/export_internal.h"

int export_format_parse(const char *name)
{
    if (!name)
        return -1;
    if (strcmp(name, "md") == 0 || strcmp(name, "markdown") == 0)
        return EXPORT_MD;
    if (strcmp(name, "json") == 0)
        return EXPORT_JSON;
    if (strcmp(name, "html") == 0)
        return EXPORT_HTML;
    return -1;
}

int export_format_of_path(const char *path)
{
    const char *base = path ? strrchr(path, '/') : NULL;
    base = base ? base + 1 : path;
    const char *dot = base ? strrchr(base, '.') : NULL;
    if (!dot || dot == base)
        return -1; /* no extension, or a dot file such as ".md" */
    static const struct { const char *ext; export_format f; } exts[] = {
        {".md", EXPORT_MD}, {".markdown", EXPORT_MD}, {".json", EXPORT_JSON},
        {".html", EXPORT_HTML}, {".htm", EXPORT_HTML}};
    for (size_t i = 0; i < sizeof exts / sizeof exts[0]; i++)
        if (strcasecmp(dot, exts[i].ext) == 0)
            return (int)exts[i].f;
    return -1;
}

void conv_record_clear(conv_record *r)
{
    free(r->title.data);
    free(r->model.data);
    free(r->settings.data);
    free(r->system_prompt.data);
    memset(r, 0, sizeof *r);
}

int conv_record_load(db_store *db, int64_t conv, conv_record *r)
{
    sqlite3_stmt *st;
    memset(r, 0, sizeof *r);
    if (sqlite3_prepare_v2(db->sql,
                           "SELECT title, model, settings_json, system_prompt, created_at,"
                           " updated_at, leaf_id FROM conversation WHERE id = ?1",
                           -1, &st, NULL) != SQLITE_OK)
        return db_fail(db, "exporting conversation %lld", (long long)conv);
    sqlite3_bind_int64(st, 1, conv);
    int rc = sqlite3_step(st), result = 0;
    if (rc == SQLITE_ROW) {
        r->id = conv;
        r->created_at = sqlite3_column_int64(st, 4);
        r->updated_at = sqlite3_column_int64(st, 5);
        r->leaf = sqlite3_column_type(st, 6) == SQLITE_NULL ? 0 : sqlite3_column_int64(st, 6);
        if (db_column_copy(st, 0, &r->title.data, &r->title.len) != 0 ||
            db_column_copy(st, 1, &r->model.data, &r->model.len) != 0 ||
            db_column_copy(st, 2, &r->settings.data, &r->settings.len) != 0 ||
            db_column_copy(st, 3, &r->system_prompt.data, &r->system_prompt.len) != 0)
            result = db_failf(db, "out of memory exporting conversation %lld", (long long)conv);
    } else if (rc == SQLITE_DONE) {
        result = db_failf(db, "conversation %lld does not exist in %s; 'glmchat list' shows the ids",
                          (long long)conv, db->path);
    } else {
        result = db_fail(db, "exporting conversation %lld", (long long)conv);
    }
    sqlite3_finalize(st);
    if (result != 0)
        conv_record_clear(r);
    return result;
}

void export_format_time(int64_t ms, char *buf, size_t n)
{
    time_t t = (time_t)(ms / 1000);
    struct tm tm;
    if (!gmtime_r(&t, &tm) || strftime(buf, n, "%Y-%m-%d %H:%M UTC", &tm) == 0)
        snprintf(buf, n, "%lld ms", (long long)ms);
}

void export_display_title(const conv_record *r, const conv_messages *path, char *buf, size_t n)
{
    const char *src = NULL;
    size_t len = 0;
    if (r->title.data && r->title.len) {
        src = r->title.data;
        len = r->title.len;
    }
    for (size_t i = 0; !src && path && i < path->count; i++) {
        const msg *m = &path->msgs[i];
        for (size_t k = 0; m->role == MSG_USER && k < m->nparts; k++)
            if (m->parts[k].kind == PART_TEXT && m->parts[k].len) {
                src = m->parts[k].data;
                len = m->parts[k].len;
                break;
            }
    }
    if (!src) {
        snprintf(buf, n, "Conversation %lld", (long long)r->id);
        return;
    }
    size_t cut = utf8_prefix(src, len, n > 80 ? 80 : n - 1);
    memcpy(buf, src, cut);
    buf[cut] = '\0';
    for (size_t i = 0; i < cut; i++)
        if (buf[i] == '\n' || buf[i] == '\r' || buf[i] == '\t' || buf[i] == '\0')
            buf[i] = ' ';
}

/* Loads and writes one conversation in format; JSON takes the whole tree, the others the path. */
static int write_one(db_store *db, int64_t conv, export_format format, FILE *out, int top_level,
                     int *first)
{
    conv_record r;
    conv_messages msgs;
    if (conv_record_load(db, conv, &r) != 0)
        return -1;
    int loaded = format == EXPORT_JSON ? conv_load_tree(db, conv, &msgs) : conv_load_path(db, conv, &msgs);
    if (loaded != 0) {
        conv_record_clear(&r);
        return -1;
    }
    int rc = 0;
    if (format == EXPORT_JSON) {
        if (!top_level)
            fputs(*first ? "\n" : ",\n", out);
        rc = export_json_conversation(out, &r, &msgs, top_level, top_level ? 0 : 4);
    } else if (format == EXPORT_MD) {
        if (!*first)
            fputs("\n---\n\n", out);
        rc = export_md_conversation(out, &r, &msgs);
    } else {
        rc = export_html_conversation(out, &r, &msgs);
    }
    *first = 0;
    conv_messages_free(&msgs);
    conv_record_clear(&r);
    if (rc != 0)
        return db_failf(db, "out of memory exporting conversation %lld", (long long)conv);
    return 0;
}

static int all_ids(db_store *db, int64_t **ids, size_t *count)
{
    conv_summary *list;
    size_t n;
    if (conv_list(db, &list, &n) != 0)
        return -1;
    int64_t *out = malloc((n ? n : 1) * sizeof *out);
    if (!out) {
        conv_list_free(list, n);
        return db_failf(db, "out of memory exporting");
    }
    /* Oldest first, so that an export of everything reads as a history. */
    for (size_t i = 0; i < n; i++)
        out[i] = list[n - 1 - i].id;
    conv_list_free(list, n);
    *ids = out;
    *count = n;
    return 0;
}

int export_write(db_store *db, int64_t conv, export_format format, FILE *out)
{
    db_clear_error(db);
    if ((unsigned)format > EXPORT_HTML)
        return db_failf(db, "export: format %d is not md, json or html", (int)format);
    int first = 1, rc = 0;
    if (conv > 0) {
        if (format == EXPORT_HTML) {
            conv_record r;
            if (conv_record_load(db, conv, &r) != 0)
                return -1;
            export_html_begin(out, &r);
            conv_record_clear(&r);
        }
        rc = write_one(db, conv, format, out, 1, &first);
    } else {
        int64_t *ids = NULL;
        size_t n = 0;
        if (all_ids(db, &ids, &n) != 0)
            return -1;
        if (format == EXPORT_JSON)
            fprintf(out, "{\n  \"format\": \"glmchat-export\",\n  \"version\": %d,\n  \"conversations\": [",
                    EXPORT_JSON_VERSION);
        else if (format == EXPORT_HTML)
            export_html_begin(out, NULL);
        for (size_t i = 0; rc == 0 && i < n; i++)
            rc = write_one(db, ids[i], format, out, 0, &first);
        if (format == EXPORT_JSON)
            fputs(n ? "\n  ]\n}\n" : "]\n}\n", out);
        free(ids);
    }
    if (rc == 0 && format == EXPORT_HTML)
        export_html_end(out);
    if (rc != 0)
        return -1;
    if (fflush(out) != 0 || ferror(out))
        return db_failf(db, "writing the export failed: %s; check the disk and the output path",
                        strerror(errno));
    return 0;
}
