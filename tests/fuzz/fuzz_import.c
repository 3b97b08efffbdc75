/* fuzz_import.c: libFuzzer target for glmchat's JSON transcript importer: any input must give
 * a clean error or an import, and every import must export, re-import and re-export the same. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "storage/storage.h"

static char *export_buffer(db_store *db, int64_t conv, size_t *len)
{
    char *buf = NULL;
    FILE *f = open_memstream(&buf, len);
    if (!f)
        return NULL;
    int rc = export_write(db, conv, EXPORT_JSON, f);
    fclose(f);
    if (rc != 0) {
        free(buf);
        return NULL;
    }
    return buf;
}

/* The export text after the top-level id's digits (what must match between copies). */
static const char *after_id(const char *json)
{
    const char *p = strstr(json, "\n  \"id\": ");
    if (!p)
        return NULL;
    for (p += 9; *p >= '0' && *p <= '9'; p++)
        ;
    return p;
}

static void check_round_trip(db_store *db, int64_t conv)
{
    size_t alen, blen;
    char *a = export_buffer(db, conv, &alen);
    if (!a)
        __builtin_trap(); /* an imported conversation must export */
    int64_t *ids;
    size_t n;
    if (import_json(db, a, alen, &ids, &n) != 0 || n != 1)
        __builtin_trap(); /* and what export wrote must import */
    char *b = export_buffer(db, ids[0], &blen);
    const char *ta = after_id(a), *tb = b ? after_id(b) : NULL;
    if (!ta || !tb || strcmp(ta, tb) != 0)
        __builtin_trap(); /* and the copy must export the same */
    conv_delete(db, ids[0]);
    free(ids);
    free(a);
    free(b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static db_store *db;
    char err[512];
    if (!db && !(db = db_open(":memory:", err, sizeof err)))
        __builtin_trap();
    int64_t *ids;
    size_t n;
    if (import_json(db, (const char *)data, size, &ids, &n) != 0) {
        if (!db_errmsg(db)[0])
            __builtin_trap(); /* a failure always says why */
        return 0;
    }
    for (size_t i = 0; i < n; i++) {
        check_round_trip(db, ids[i]);
        conv_delete(db, ids[i]);
    }
    free(ids);
    return 0;
}
