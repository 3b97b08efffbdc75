/* test_storage_writer.c: a test helper for storage's crash safety. "write DB" saves conversations,
 * messages and parts forever, printing each id once committed; "verify DB IDS" checks them. */
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "storage/storage.h"

/* Prints "KIND ID" after the write returned, so every printed id is committed. */
static void committed(char kind, int64_t id)
{
    printf("%c %lld\n", kind, (long long)id);
    fflush(stdout);
}

static int write_forever(const char *path, unsigned seed)
{
    char err[1024];
    db_store *db = db_open(path, err, sizeof err);
    if (!db) {
        fprintf(stderr, "test_storage_writer: %s\n", err);
        return 1;
    }
    srand(seed);
    size_t cap = 1 << 20;
    char *buf = malloc(cap);
    if (!buf)
        return 1;
    for (size_t i = 0; i < cap; i++)
        buf[i] = (char)('a' + i % 26);
    for (;;) {
        int64_t conv = conv_create(db, "crash test", "writer");
        if (conv < 0)
            break;
        committed('C', conv);
        int64_t parent = 0;
        for (int m = 0; m < 6; m++) {
            int64_t id = msg_append(db, conv, parent, m % 2 ? MSG_ASSISTANT : MSG_USER, MSG_STREAMING, NULL);
            if (id < 0)
                goto fail;
            committed('M', id);
            for (int k = 0; k < 4; k++) {
                /* Mostly small parts, sometimes one large enough to trigger a checkpoint. */
                size_t len = (size_t)(rand() % 8 == 0 ? rand() % (int)cap : rand() % 2000);
                part_in p = {.kind = k % 2 ? PART_REASONING : PART_TEXT, .data = buf, .len = len};
                int64_t pid = part_append(db, id, &p);
                if (pid < 0)
                    goto fail;
                committed('P', pid);
            }
            if (msg_finish(db, id, MSG_COMPLETE, "stop", NULL) != 0)
                goto fail;
            /* Between turns: indexing and checkpoints get killed midway too. */
            if (m % 2 == 1 && db_idle(db) != 0)
                goto fail;
            parent = id;
        }
    }
fail:
    fprintf(stderr, "test_storage_writer: %s\n", db_errmsg(db));
    free(buf);
    db_close(db);
    return 1;
}

static int exists(sqlite3 *sql, char kind, long long id)
{
    const char *q = kind == 'C' ? "SELECT 1 FROM conversation WHERE id = ?1"
                  : kind == 'M' ? "SELECT 1 FROM message WHERE id = ?1"
                                : "SELECT 1 FROM part WHERE id = ?1";
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(sql, q, -1, &st, NULL) != SQLITE_OK)
        return -1;
    sqlite3_bind_int64(st, 1, id);
    int found = sqlite3_step(st) == SQLITE_ROW;
    sqlite3_finalize(st);
    return found;
}

static int verify(const char *path, const char *ids_path)
{
    char err[1024];
    db_store *db = db_open(path, err, sizeof err); /* recovers the WAL as glmchat would */
    if (!db) {
        fprintf(stderr, "test_storage_writer: reopening after the kill: %s\n", err);
        return 1;
    }
    int ok = db_integrity_ok(db);
    if (ok != 1) {
        fprintf(stderr, "test_storage_writer: integrity: %s\n", db_errmsg(db));
        db_close(db);
        return 1;
    }
    db_close(db);
    sqlite3 *sql;
    FILE *ids = fopen(ids_path, "r");
    if (!ids || sqlite3_open_v2(path, &sql, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK) {
        fprintf(stderr, "test_storage_writer: cannot open %s or %s\n", path, ids_path);
        return 1;
    }
    char line[64];
    long checked = 0, missing = 0;
    while (fgets(line, sizeof line, ids)) {
        char kind;
        long long id;
        if (!strchr(line, '\n') || sscanf(line, "%c %lld", &kind, &id) != 2)
            continue; /* the kill cut this line short: it was not reported */
        int found = exists(sql, kind, id);
        checked++;
        if (found != 1) {
            fprintf(stderr, "test_storage_writer: committed %c %lld is missing\n", kind, id);
            missing++;
        }
    }
    fclose(ids);
    sqlite3_close(sql);
    printf("verified %ld committed ids, %ld missing\n", checked, missing);
    return missing ? 1 : 0;
}

int main(int argc, char **argv)
{
    if (argc == 4 && strcmp(argv[1], "write") == 0)
        return write_forever(argv[2], (unsigned)strtoul(argv[3], NULL, 10));
    if (argc == 4 && strcmp(argv[1], "verify") == 0)
        return verify(argv[2], argv[3]);
    fprintf(stderr, "usage: test_storage_writer write DB SEED | verify DB IDS\n");
    return 2;
}
