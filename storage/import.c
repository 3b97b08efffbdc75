/* import.c: reading back the JSON that export writes (one conversation or all of them) in one
 * transaction, checking every field and naming the JSON path of the first bad one. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "storage/export_internal.h"

/* Where in the document we are, for error messages: "conversations[2].messages[3].parts[0]". */
typedef struct import_ctx {
    db_store *db;
    char where[256];
} import_ctx;

static int bad(import_ctx *c, const char *field, const char *what)
{
    return db_failf(c->db, "cannot import: %s%s%s %s; only JSON written by 'glmchat export "
                           "--format json' can be imported (storage/FORMATS.md)",
                    c->where, c->where[0] && field[0] ? "." : "", field, what);
}

/* Bytes of field name (a string, or name_b64 in base64); *data NULL when null or absent and
 * optional. Returns 0 or -1. Only text and arguments may hold NUL bytes: the other fields are
 * C strings in the API, so a NUL could not round-trip. */
static int get_bytes_checked(import_ctx *c, const cJSON *obj, const char *name, int required,
                             char **data, size_t *len);

static int get_bytes(import_ctx *c, const cJSON *obj, const char *name, int required, char **data,
                     size_t *len)
{
    if (get_bytes_checked(c, obj, name, required, data, len) != 0)
        return -1;
    int nul_allowed = strcmp(name, "text") == 0 || strcmp(name, "arguments") == 0;
    if (*data && !nul_allowed && memchr(*data, '\0', *len)) {
        free(*data);
        *data = NULL;
        return bad(c, name, "contains a NUL byte, which only text and arguments may");
    }
    return 0;
}

static int get_bytes_checked(import_ctx *c, const cJSON *obj, const char *name, int required,
                             char **data, size_t *len)
{
    char b64name[64];
    *data = NULL;
    *len = 0;
    snprintf(b64name, sizeof b64name, "%s_b64", name);
    const cJSON *plain = cJSON_GetObjectItemCaseSensitive(obj, name);
    const cJSON *b64 = cJSON_GetObjectItemCaseSensitive(obj, b64name);
    if (plain && b64)
        return bad(c, name, "is given both as text and as base64");
    if (b64) {
        if (!cJSON_IsString(b64))
            return bad(c, b64name, "is not a string");
        int invalid = 0;
        *data = bytes_base64_decode(b64->valuestring, strlen(b64->valuestring), len, &invalid);
        if (!*data)
            return invalid ? bad(c, b64name, "is not valid base64") : db_failf(c->db, "out of memory importing");
        return 0;
    }
    if (!plain || cJSON_IsNull(plain)) {
        if (required)
            return bad(c, name, plain ? "must not be null" : "is missing");
        return 0;
    }
    if (!cJSON_IsString(plain))
        return bad(c, name, "is not a string");
    *len = strlen(plain->valuestring);
    *data = bytes_dup(plain->valuestring, *len);
    return *data ? 0 : db_failf(c->db, "out of memory importing");
}

/* An integer field; null (or absent when optional) gives *v = -1. */
static int get_int(import_ctx *c, const cJSON *obj, const char *name, int nullable, int64_t *v)
{
    const cJSON *item = cJSON_GetObjectItemCaseSensitive(obj, name);
    *v = -1;
    if (!item || cJSON_IsNull(item))
        return nullable ? 0 : bad(c, name, item ? "must not be null" : "is missing");
    if (!cJSON_IsNumber(item))
        return bad(c, name, "is not a number");
    double d = item->valuedouble;
    if (!(d >= 0 && d <= 9007199254740992.0) || floor(d) != d)
        return bad(c, name, "is not a whole number between 0 and 2^53");
    *v = (int64_t)d;
    return 0;
}

static int get_name(import_ctx *c, const cJSON *obj, const char *name, int (*parse)(const char *),
                    const char *choices, int *out)
{
    const cJSON *item = cJSON_GetObjectItemCaseSensitive(obj, name);
    if (!cJSON_IsString(item))
        return bad(c, name, item ? "is not a string" : "is missing");
    *out = parse(item->valuestring);
    if (*out < 0) {
        char what[160];
        snprintf(what, sizeof what, "is not one of %s", choices);
        return bad(c, name, what);
    }
    return 0;
}

static void bind_bytes(sqlite3_stmt *st, int col, const char *data, size_t len, int as_blob)
{
    if (!data)
        sqlite3_bind_null(st, col);
    else if (as_blob)
        sqlite3_bind_blob64(st, col, len ? data : "", len, SQLITE_TRANSIENT);
    else
        sqlite3_bind_text64(st, col, data, len, SQLITE_TRANSIENT, SQLITE_UTF8);
}

static void bind_count(sqlite3_stmt *st, int col, int64_t v)
{
    if (v >= 0)
        sqlite3_bind_int64(st, col, v);
    else
        sqlite3_bind_null(st, col);
}

static int run(import_ctx *c, sqlite3_stmt *st, const char *what)
{
    int rc = sqlite3_step(st);
    sqlite3_reset(st);
    if (rc != SQLITE_DONE)
        return db_fail(c->db, "importing %s", what);
    return 0;
}

static int import_part(import_ctx *c, const cJSON *jp, int64_t msg_id, int seq, sqlite3_stmt *st)
{
    int kind;
    int64_t created;
    char *text = NULL, *name = NULL, *call_id = NULL, *args = NULL;
    size_t text_len, name_len, call_len, args_len;
    if (!cJSON_IsObject(jp))
        return bad(c, "", "is not an object");
    const cJSON *err_item = cJSON_GetObjectItemCaseSensitive(jp, "is_error");
    if (err_item && !cJSON_IsBool(err_item))
        return bad(c, "is_error", "is not true or false");
    int rc = -1;
    if (get_name(c, jp, "kind", part_kind_parse, "text, reasoning, tool_call, tool_result", &kind) == 0 &&
        get_bytes(c, jp, "text", 0, &text, &text_len) == 0 &&
        get_bytes(c, jp, "name", 0, &name, &name_len) == 0 &&
        get_bytes(c, jp, "call_id", 0, &call_id, &call_len) == 0 &&
        get_bytes(c, jp, "arguments", 0, &args, &args_len) == 0 &&
        get_int(c, jp, "created_at", 0, &created) == 0) {
        sqlite3_bind_int64(st, 1, msg_id);
        sqlite3_bind_int(st, 2, seq);
        sqlite3_bind_text(st, 3, part_kind_name((part_kind)kind), -1, SQLITE_STATIC);
        sqlite3_bind_blob64(st, 4, text && text_len ? text : "", text ? text_len : 0, SQLITE_TRANSIENT);
        bind_bytes(st, 5, name, name_len, 0);
        bind_bytes(st, 6, call_id, call_len, 0);
        bind_bytes(st, 7, args, args_len, 1);
        sqlite3_bind_int(st, 8, cJSON_IsTrue(err_item) ? 1 : 0);
        sqlite3_bind_int64(st, 9, created);
        rc = run(c, st, "a part");
    }
    free(text);
    free(name);
    free(call_id);
    free(args);
    return rc;
}

/* Message ids of the file ascend; each maps to the row id it got. */
typedef struct id_map {
    int64_t *file_ids, *db_ids;
    size_t count;
} id_map;

static int64_t map_find(const id_map *m, int64_t file_id)
{
    size_t lo = 0, hi = m->count;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (m->file_ids[mid] < file_id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < m->count && m->file_ids[lo] == file_id ? m->db_ids[lo] : 0;
}

static int import_message(import_ctx *c, const cJSON *jm, int64_t conv, id_map *map,
                          sqlite3_stmt *msg_st, sqlite3_stmt *part_st)
{
    int64_t id, parent, created, finished, counts[6];
    int role, status;
    char *model = NULL, *finish = NULL;
    size_t model_len, finish_len;
    static const char *const count_names[6] = {"prompt_tokens", "completion_tokens", "reasoning_tokens",
                                               "ttft_ms", "prompt_ms", "gen_ms"};
    if (!cJSON_IsObject(jm))
        return bad(c, "", "is not an object");
    if (get_int(c, jm, "id", 0, &id) != 0 || get_int(c, jm, "parent", 1, &parent) != 0 ||
        get_name(c, jm, "role", msg_role_parse, "system, user, assistant, tool", &role) != 0 ||
        get_name(c, jm, "status", msg_status_parse, "streaming, complete, canceled, error", &status) != 0 ||
        get_int(c, jm, "created_at", 0, &created) != 0 || get_int(c, jm, "finished_at", 1, &finished) != 0)
        return -1;
    for (int i = 0; i < 6; i++)
        if (get_int(c, jm, count_names[i], 1, &counts[i]) != 0)
            return -1;
    if (id == 0 || (map->count && id <= map->file_ids[map->count - 1]))
        return bad(c, "id", "must be above 0 and above the previous message's id");
    int64_t parent_row = 0;
    if (parent >= 0 && !(parent_row = map_find(map, parent)))
        return bad(c, "parent", "does not name an earlier message of this conversation");
    const cJSON *parts = cJSON_GetObjectItemCaseSensitive(jm, "parts");
    if (!cJSON_IsArray(parts))
        return bad(c, "parts", parts ? "is not an array" : "is missing");
    if (get_bytes(c, jm, "model", 0, &model, &model_len) != 0)
        return -1;
    if (get_bytes(c, jm, "finish_reason", 0, &finish, &finish_len) != 0) {
        free(model);
        return -1;
    }
    sqlite3_bind_int64(msg_st, 1, conv);
    if (parent_row)
        sqlite3_bind_int64(msg_st, 2, parent_row);
    else
        sqlite3_bind_null(msg_st, 2);
    sqlite3_bind_text(msg_st, 3, msg_role_name((msg_role)role), -1, SQLITE_STATIC);
    sqlite3_bind_text(msg_st, 4, msg_status_name((msg_status)status), -1, SQLITE_STATIC);
    bind_bytes(msg_st, 5, model, model_len, 0);
    bind_bytes(msg_st, 6, finish, finish_len, 0);
    for (int i = 0; i < 6; i++)
        bind_count(msg_st, 7 + i, counts[i]);
    sqlite3_bind_int64(msg_st, 13, created);
    bind_count(msg_st, 14, finished);
    int rc = run(c, msg_st, "a message");
    free(model);
    free(finish);
    if (rc != 0)
        return -1;
    int64_t row = sqlite3_last_insert_rowid(c->db->sql);
    map->file_ids[map->count] = id;
    map->db_ids[map->count] = row;
    map->count++;
    size_t base = strlen(c->where);
    int seq = 0;
    const cJSON *jp;
    cJSON_ArrayForEach(jp, parts)
    {
        snprintf(c->where + base, sizeof c->where - base, ".parts[%d]", seq);
        if (import_part(c, jp, row, seq, part_st) != 0)
            return -1;
        seq++;
    }
    c->where[base] = '\0';
    return 0;
}

static int import_messages(import_ctx *c, const cJSON *messages, int64_t conv, id_map *map)
{
    sqlite3_stmt *msg_st = NULL, *part_st = NULL;
    int rc = -1;
    if (sqlite3_prepare_v2(c->db->sql,
                           "INSERT INTO message(conversation_id, parent_id, role, status, model,"
                           " finish_reason, prompt_tokens, completion_tokens, reasoning_tokens,"
                           " ttft_ms, prompt_ms, gen_ms, created_at, finished_at) VALUES"
                           " (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)",
                           -1, &msg_st, NULL) != SQLITE_OK ||
        sqlite3_prepare_v2(c->db->sql,
                           "INSERT INTO part(message_id, seq, kind, body, name, call_id, args,"
                           " is_error, created_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
                           -1, &part_st, NULL) != SQLITE_OK) {
        db_fail(c->db, "preparing the import");
        goto done;
    }
    size_t base = strlen(c->where);
    int i = 0;
    const cJSON *jm;
    rc = 0;
    cJSON_ArrayForEach(jm, messages)
    {
        snprintf(c->where + base, sizeof c->where - base, "%smessages[%d]", base ? "." : "", i++);
        if ((rc = import_message(c, jm, conv, map, msg_st, part_st)) != 0)
            break;
    }
    if (rc == 0)
        c->where[base] = '\0';
done:
    sqlite3_finalize(msg_st);
    sqlite3_finalize(part_st);
    return rc;
}

static int64_t import_conversation(import_ctx *c, const cJSON *jc)
{
    int64_t created, updated, leaf;
    field_bytes f[4] = {{0}};
    static const char *const names[4] = {"title", "model", "system_prompt", "settings_json"};
    if (!cJSON_IsObject(jc))
        return bad(c, "", "is not an object");
    const cJSON *messages = cJSON_GetObjectItemCaseSensitive(jc, "messages");
    if (!cJSON_IsArray(messages))
        return bad(c, "messages", messages ? "is not an array" : "is missing");
    if (get_int(c, jc, "created_at", 0, &created) != 0 || get_int(c, jc, "updated_at", 0, &updated) != 0 ||
        get_int(c, jc, "current_leaf", 1, &leaf) != 0)
        return -1;
    int64_t conv = -1;
    int n = cJSON_GetArraySize(messages);
    id_map map = {malloc(((size_t)n + 1) * sizeof(int64_t)), malloc(((size_t)n + 1) * sizeof(int64_t)), 0};
    sqlite3_stmt *st = NULL;
    if (!map.file_ids || !map.db_ids) {
        db_failf(c->db, "out of memory importing");
        goto done;
    }
    for (int i = 0; i < 4; i++)
        if (get_bytes(c, jc, names[i], 0, &f[i].data, &f[i].len) != 0)
            goto done;
    if (sqlite3_prepare_v2(c->db->sql,
                           "INSERT INTO conversation(title, model, system_prompt, settings_json,"
                           " created_at, updated_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                           -1, &st, NULL) != SQLITE_OK) {
        db_fail(c->db, "importing a conversation");
        goto done;
    }
    for (int i = 0; i < 4; i++)
        bind_bytes(st, i + 1, f[i].data, f[i].len, 0);
    sqlite3_bind_int64(st, 5, created);
    sqlite3_bind_int64(st, 6, updated);
    if (run(c, st, "a conversation") != 0)
        goto done;
    int64_t id = sqlite3_last_insert_rowid(c->db->sql);
    if (import_messages(c, messages, id, &map) != 0)
        goto done;
    if (leaf >= 0) {
        int64_t leaf_row = map_find(&map, leaf);
        if (!leaf_row) {
            bad(c, "current_leaf", "does not name a message of this conversation");
            goto done;
        }
        sqlite3_finalize(st);
        st = NULL;
        if (sqlite3_prepare_v2(c->db->sql, "UPDATE conversation SET leaf_id = ?2 WHERE id = ?1", -1,
                               &st, NULL) != SQLITE_OK) {
            db_fail(c->db, "importing a conversation");
            goto done;
        }
        sqlite3_bind_int64(st, 1, id);
        sqlite3_bind_int64(st, 2, leaf_row);
        if (run(c, st, "the current message") != 0)
            goto done;
    }
    conv = id;
done:
    sqlite3_finalize(st);
    for (int i = 0; i < 4; i++)
        free(f[i].data);
    free(map.file_ids);
    free(map.db_ids);
    return conv;
}

static int check_header(import_ctx *c, const cJSON *root, const char **format)
{
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(root, "format");
    if (!cJSON_IsString(fmt) || (strcmp(fmt->valuestring, "glmchat-conversation") != 0 &&
                                 strcmp(fmt->valuestring, "glmchat-export") != 0))
        return bad(c, "format", "is not \"glmchat-conversation\" or \"glmchat-export\"");
    int64_t version;
    if (get_int(c, root, "version", 0, &version) != 0)
        return -1;
    if (version != EXPORT_JSON_VERSION)
        return db_failf(c->db, "cannot import: the file is export format version %lld and this "
                               "glmchat reads version %d; import it with a glmchat of that version",
                        (long long)version, EXPORT_JSON_VERSION);
    *format = fmt->valuestring;
    return 0;
}

static int import_all(import_ctx *c, const cJSON *root, int64_t **ids, size_t *count)
{
    const char *format = NULL;
    if (check_header(c, root, &format) != 0)
        return -1;
    if (strcmp(format, "glmchat-conversation") == 0) {
        int64_t id = import_conversation(c, root);
        if (id < 0)
            return -1;
        (*ids)[0] = id;
        *count = 1;
        return 0;
    }
    const cJSON *list = cJSON_GetObjectItemCaseSensitive(root, "conversations");
    if (!cJSON_IsArray(list))
        return bad(c, "conversations", list ? "is not an array" : "is missing");
    int n = cJSON_GetArraySize(list), i = 0;
    int64_t *grown = realloc(*ids, ((size_t)n + 1) * sizeof *grown);
    if (!grown)
        return db_failf(c->db, "out of memory importing");
    *ids = grown;
    const cJSON *jc;
    cJSON_ArrayForEach(jc, list)
    {
        snprintf(c->where, sizeof c->where, "conversations[%d]", i);
        int64_t id = import_conversation(c, jc);
        if (id < 0)
            return -1;
        (*ids)[i++] = id;
    }
    *count = (size_t)i;
    return 0;
}

/* Whether the JSON text has a \u0000 escape (an odd run of backslashes before "u0000"): the
 * parser would cut the string there, so such input is refused rather than shortened. */
static int has_nul_escape(const char *json, size_t len)
{
    for (size_t i = 1; i + 5 <= len; i++) {
        if (memcmp(json + i, "u0000", 5) != 0 || json[i - 1] != '\\')
            continue;
        size_t slashes = 0;
        for (size_t k = i; k > 0 && json[k - 1] == '\\'; k--)
            slashes++;
        if (slashes % 2 == 1)
            return 1;
    }
    return 0;
}

int import_json(db_store *db, const char *json, size_t len, int64_t **ids, size_t *count)
{
    *ids = NULL;
    *count = 0;
    db_clear_error(db);
    import_ctx c = {db, ""};
    if (has_nul_escape(json, len))
        return db_failf(db, "cannot import: a string holds \\u0000, which glmchat never writes (it "
                            "writes bytes with NULs as base64 in a \"..._b64\" field); fix the file");
    cJSON *root = cJSON_ParseWithLength(json, len);
    if (!root)
        return db_failf(db, "cannot import: the file is not valid JSON (near byte %zu); only JSON "
                            "written by 'glmchat export --format json' can be imported",
                        cJSON_GetErrorPtr() ? (size_t)(cJSON_GetErrorPtr() - json) : (size_t)0);
    int64_t *out = malloc(sizeof *out);
    size_t n = 0;
    int rc = -1;
    if (!out) {
        db_failf(db, "out of memory importing");
    } else if (!cJSON_IsObject(root)) {
        bad(&c, "the document", "is not a JSON object");
    } else {
        /* A savepoint keeps "all or nothing" inside a caller's db_begin transaction too. */
        int opened = db_tx_start(db);
        if (opened >= 0 && sqlite3_exec(db->sql, "SAVEPOINT glmchat_import", NULL, NULL, NULL) != SQLITE_OK)
            db_fail(db, "starting the import");
        else if (opened >= 0) {
            int ok = import_all(&c, root, &out, &n) == 0;
            if (!ok)
                sqlite3_exec(db->sql, "ROLLBACK TO glmchat_import", NULL, NULL, NULL);
            sqlite3_exec(db->sql, "RELEASE glmchat_import", NULL, NULL, NULL);
            rc = db_tx_end(db, opened, ok);
        }
    }
    cJSON_Delete(root);
    if (rc != 0) {
        free(out);
        return -1;
    }
    *ids = out;
    *count = n;
    return 0;
}
