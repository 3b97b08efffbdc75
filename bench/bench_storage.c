/* bench_storage.c: glmchat storage benchmark: streamed part inserts (each durable on return)
 * against raw SQLite inserts of the same bytes, then FTS5 search latency on a large database.
 * Usage: bench/bench_storage [--dir DIR] [--parts N] [--db-mb MB] [--repeat R] [--keep] */
#include <getopt.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "storage/storage.h"

#define VOCAB 50000

typedef struct rng {
    uint64_t s;
} rng;

static uint64_t rng_next(rng *r)
{
    r->s ^= r->s << 13;
    r->s ^= r->s >> 7;
    r->s ^= r->s << 17;
    return r->s;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Words with a Zipf distribution, so the index has common and rare terms like real chat. */
typedef struct vocab {
    char words[VOCAB][12];
    double cdf[VOCAB];
} vocab;

static void vocab_init(vocab *v, rng *r)
{
    double total = 0;
    for (int i = 0; i < VOCAB; i++) {
        int len = 3 + (int)(rng_next(r) % 8);
        for (int k = 0; k < len; k++)
            v->words[i][k] = (char)('a' + rng_next(r) % 26);
        v->words[i][len] = '\0';
        total += 1.0 / (i + 1);
        v->cdf[i] = total;
    }
    for (int i = 0; i < VOCAB; i++)
        v->cdf[i] /= total;
}

static const char *vocab_pick(const vocab *v, rng *r)
{
    double u = (double)(rng_next(r) >> 11) / 9007199254740992.0;
    int lo = 0, hi = VOCAB - 1;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (v->cdf[mid] < u)
            lo = mid + 1;
        else
            hi = mid;
    }
    return v->words[lo];
}

/* Fills buf with len bytes of words and punctuation. */
static void make_text(const vocab *v, rng *r, char *buf, size_t len)
{
    size_t n = 0;
    while (n < len) {
        const char *w = vocab_pick(v, r);
        size_t wl = strlen(w);
        for (size_t k = 0; k < wl && n < len; k++)
            buf[n++] = w[k];
        if (n < len)
            buf[n++] = rng_next(r) % 12 == 0 ? '\n' : ' ';
    }
}

/* A part size like streamed chat: mostly a few hundred bytes, some long blocks; mean ~1 KB. */
static size_t part_size(rng *r)
{
    uint64_t x = rng_next(r) % 100;
    if (x < 60)
        return 50 + rng_next(r) % 500;
    if (x < 95)
        return 500 + rng_next(r) % 2000;
    return 2500 + rng_next(r) % 8000;
}

static double cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double pct(double *v, size_t n, double p)
{
    qsort(v, n, sizeof *v, cmp_double);
    size_t i = (size_t)(p * (double)(n - 1) + 0.5);
    return v[i];
}

typedef struct insert_result {
    double seconds, p50_ms, p99_ms, max_ms;
    double checkpoint_max_ms; /* the idle-time checkpoints between turns */
    size_t bytes;
} insert_result;

/* glmchat: part_append per part (one durable transaction each), a message every 8 parts. */
static int bench_glmchat_inserts(const char *path, size_t nparts, const char *texts,
                                 const size_t *sizes, const size_t *offsets, int checkpoint,
                                 insert_result *res)
{
    char err[1024];
    db_store *db = db_open(path, err, sizeof err);
    if (!db) {
        fprintf(stderr, "bench_storage: %s\n", err);
        return -1;
    }
    double *lat = malloc(nparts * 2 * sizeof *lat);
    if (!lat)
        return -1;
    size_t nlat = 0;
    int64_t conv = conv_create(db, "bench", "bench");
    int64_t msg = 0, parent = 0;
    double start = now_s();
    res->bytes = 0;
    for (size_t i = 0; i < nparts; i++) {
        if (i % 64 == 0 && i && checkpoint) { /* a turn ended: the chat checkpoints while idle */
            double t0 = now_s();
            if (db_checkpoint(db) != 0)
                goto fail;
            double t = (now_s() - t0) * 1e3;
            if (t > res->checkpoint_max_ms)
                res->checkpoint_max_ms = t;
        }
        if (i % 8 == 0) {
            double t0 = now_s();
            msg = msg_append(db, conv, parent, i % 16 ? MSG_ASSISTANT : MSG_USER, MSG_STREAMING, NULL);
            lat[nlat++] = now_s() - t0;
            parent = msg;
            if (msg < 0)
                goto fail;
        }
        part_in p = {.kind = i % 3 == 1 ? PART_REASONING : PART_TEXT, .data = texts + offsets[i],
                     .len = sizes[i]};
        double t0 = now_s();
        if (part_append(db, msg, &p) < 0)
            goto fail;
        lat[nlat++] = now_s() - t0;
        res->bytes += sizes[i];
    }
    res->seconds = now_s() - start;
    res->max_ms = pct(lat, nlat, 1.0) * 1e3;
    res->p99_ms = pct(lat, nlat, 0.99) * 1e3;
    res->p50_ms = pct(lat, nlat, 0.5) * 1e3;
    free(lat);
    db_close(db);
    return 0;
fail:
    fprintf(stderr, "bench_storage: %s\n", db_errmsg(db));
    free(lat);
    db_close(db);
    return -1;
}

/* The ceiling: raw sqlite3, same PRAGMAs, one autocommit INSERT of the same bytes per row,
 * a bare table with no index, no FTS, no foreign keys. */
static int bench_raw_inserts(const char *path, size_t nparts, const char *texts, const size_t *sizes,
                             const size_t *offsets, const char *sync, insert_result *res)
{
    sqlite3 *sql;
    sqlite3_stmt *st;
    char pragmas[256];
    snprintf(pragmas, sizeof pragmas,
             "PRAGMA journal_mode = WAL; PRAGMA synchronous = %s;"
             "CREATE TABLE raw(id INTEGER PRIMARY KEY, message_id INTEGER, body BLOB)",
             sync);
    if (sqlite3_open(path, &sql) != SQLITE_OK || sqlite3_exec(sql, pragmas, NULL, NULL, NULL) != SQLITE_OK ||
        sqlite3_prepare_v2(sql, "INSERT INTO raw(message_id, body) VALUES (?1, ?2)", -1, &st, NULL) != SQLITE_OK) {
        fprintf(stderr, "bench_storage: raw sqlite: %s\n", sqlite3_errmsg(sql));
        return -1;
    }
    double *lat = malloc(nparts * sizeof *lat);
    if (!lat)
        return -1;
    double start = now_s();
    res->bytes = 0;
    for (size_t i = 0; i < nparts; i++) {
        double t0 = now_s();
        sqlite3_bind_int64(st, 1, (int64_t)(i / 8));
        sqlite3_bind_blob(st, 2, texts + offsets[i], (int)sizes[i], SQLITE_STATIC);
        if (sqlite3_step(st) != SQLITE_DONE) {
            fprintf(stderr, "bench_storage: raw insert: %s\n", sqlite3_errmsg(sql));
            return -1;
        }
        sqlite3_reset(st);
        lat[i] = now_s() - t0;
        res->bytes += sizes[i];
    }
    res->seconds = now_s() - start;
    res->max_ms = pct(lat, nparts, 1.0) * 1e3;
    res->p99_ms = pct(lat, nparts, 0.99) * 1e3;
    res->p50_ms = pct(lat, nparts, 0.5) * 1e3;
    free(lat);
    sqlite3_finalize(st);
    sqlite3_close(sql);
    return 0;
}

static long long file_size(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0 ? (long long)sb.st_size : 0;
}

/* Grows the database to mb megabytes through the API, 4000 parts per db_begin/db_commit. */
static int grow(const char *path, long long mb, const vocab *v, rng *r, double *seconds, long long *rows,
                long long *bytes)
{
    char err[1024];
    db_store *db = db_open(path, err, sizeof err);
    if (!db) {
        fprintf(stderr, "bench_storage: %s\n", err);
        return -1;
    }
    char *buf = malloc(16384);
    if (!buf)
        return -1;
    double start = now_s();
    *rows = 0;
    *bytes = 0;
    int64_t conv = 0, msg = 0;
    while (file_size(path) < mb * 1024 * 1024) {
        if (db_begin(db) != 0)
            goto fail;
        for (int k = 0; k < 4000; k++) {
            if (k % 64 == 0 && (conv = conv_create(db, NULL, NULL)) < 0)
                goto fail;
            if (k % 8 == 0 && (msg = msg_append(db, conv, 0, MSG_ASSISTANT, MSG_COMPLETE, NULL)) < 0)
                goto fail;
            size_t len = part_size(r);
            make_text(v, r, buf, len);
            part_in p = {.kind = k % 3 == 1 ? PART_REASONING : PART_TEXT, .data = buf, .len = len};
            if (part_append(db, msg, &p) < 0)
                goto fail;
            (*rows)++;
            *bytes += (long long)len;
        }
        if (db_commit(db) != 0)
            goto fail;
    }
    *seconds = now_s() - start;
    free(buf);
    db_close(db);
    return 0;
fail:
    fprintf(stderr, "bench_storage: growing: %s\n", db_errmsg(db));
    free(buf);
    db_close(db);
    return -1;
}

/* Median and worst latency of search_parts(query) over repeat runs; hits of the last run. */
static int time_search(db_store *db, const char *query, int repeat, double *median_ms, double *max_ms,
                       double *cpu_ms, size_t *hits)
{
    double *lat = malloc((size_t)repeat * sizeof *lat), *cpu = malloc((size_t)repeat * sizeof *cpu);
    if (!lat || !cpu)
        return -1;
    for (int i = 0; i < repeat; i++) {
        search_hit *h;
        size_t n;
        double t0 = now_s(), c0 = cpu_s();
        if (search_parts(db, query, 50, &h, &n) != 0) {
            fprintf(stderr, "bench_storage: search: %s\n", db_errmsg(db));
            free(lat);
            return -1;
        }
        lat[i] = now_s() - t0;
        cpu[i] = cpu_s() - c0;
        search_hits_free(h, n);
        *hits = n;
    }
    *median_ms = pct(lat, (size_t)repeat, 0.5) * 1e3;
    *max_ms = pct(lat, (size_t)repeat, 1.0) * 1e3;
    *cpu_ms = pct(cpu, (size_t)repeat, 0.5) * 1e3;
    free(lat);
    free(cpu);
    return 0;
}

/* Time of a full scan for a word (what search would cost without the index). */
static double time_scan(const char *path, const char *word, long long *matches)
{
    sqlite3 *sql;
    sqlite3_stmt *st;
    if (sqlite3_open_v2(path, &sql, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK ||
        sqlite3_prepare_v2(sql, "SELECT count(*) FROM part WHERE instr(body, ?1) > 0", -1, &st, NULL) != SQLITE_OK)
        return -1;
    sqlite3_bind_text(st, 1, word, -1, SQLITE_STATIC);
    double t0 = now_s();
    *matches = sqlite3_step(st) == SQLITE_ROW ? sqlite3_column_int64(st, 0) : -1;
    double t = now_s() - t0;
    sqlite3_finalize(st);
    sqlite3_close(sql);
    return t;
}

static void print_insert(const char *name, const insert_result *r, size_t n, double ceiling_rows)
{
    double rows = (double)n / r->seconds;
    printf("%-44s %9.0f %8.1f %8.3f %8.3f %8.2f", name, rows, (double)r->bytes / r->seconds / 1e6,
           r->p50_ms, r->p99_ms, r->max_ms);
    if (ceiling_rows > 0)
        printf("  %5.2f", rows / ceiling_rows);
    printf("\n");
}

int main(int argc, char **argv)
{
    static const struct option options[] = {{"dir", required_argument, NULL, 'd'},
                                            {"parts", required_argument, NULL, 'p'},
                                            {"db-mb", required_argument, NULL, 'm'},
                                            {"repeat", required_argument, NULL, 'r'},
                                            {"keep", no_argument, NULL, 'k'},
                                            {NULL, 0, NULL, 0}};
    const char *dir = "/tmp";
    size_t nparts = 100000;
    long long mb = 1024;
    int repeat = 20, keep = 0, c;
    while ((c = getopt_long(argc, argv, "", options, NULL)) != -1) {
        if (c == 'd')
            dir = optarg;
        else if (c == 'p')
            nparts = (size_t)strtoull(optarg, NULL, 10);
        else if (c == 'm')
            mb = strtoll(optarg, NULL, 10);
        else if (c == 'r')
            repeat = atoi(optarg);
        else if (c == 'k')
            keep = 1;
        else
            return 2;
    }
    if (nparts < 16 || repeat < 1) {
        fprintf(stderr, "bench_storage: --parts needs at least 16, --repeat at least 1\n");
        return 2;
    }
    static vocab v;
    rng r = {0x9e3779b97f4a7c15ull};
    vocab_init(&v, &r);

    /* The same bytes for glmchat and the raw ceiling. */
    size_t *sizes = malloc(nparts * sizeof *sizes), *offsets = malloc(nparts * sizeof *offsets);
    size_t total = 0;
    for (size_t i = 0; i < nparts; i++) {
        sizes[i] = part_size(&r);
        offsets[i] = total;
        total += sizes[i];
    }
    char *texts = malloc(total);
    if (!sizes || !offsets || !texts)
        return 1;
    make_text(&v, &r, texts, total);

    char stream_db[4096], raw_db[4096], raw_normal_db[4096], big_db[4096];
    snprintf(stream_db, sizeof stream_db, "%s/bench-stream-%d.db", dir, (int)getpid());
    snprintf(raw_db, sizeof raw_db, "%s/bench-raw-%d.db", dir, (int)getpid());
    snprintf(raw_normal_db, sizeof raw_normal_db, "%s/bench-raw-normal-%d.db", dir, (int)getpid());
    snprintf(big_db, sizeof big_db, "%s/bench-big-%d.db", dir, (int)getpid());

    printf("glmchat storage benchmark: %zu streamed parts (%.1f MB), SQLite %s\n\n", nparts,
           (double)total / 1e6, sqlite3_libversion());
    printf("%-44s %9s %8s %8s %8s %8s  %5s\n", "inserts (one durable transaction per row)", "rows/s",
           "MB/s", "p50 ms", "p99 ms", "max ms", "ratio");
    insert_result raw = {0}, raw_normal = {0}, ours = {0}, ours_idle = {0};
    char stream2_db[4200];
    snprintf(stream2_db, sizeof stream2_db, "%s.idle", stream_db);
    if (bench_raw_inserts(raw_db, nparts, texts, sizes, offsets, "FULL", &raw) != 0 ||
        bench_raw_inserts(raw_normal_db, nparts, texts, sizes, offsets, "NORMAL", &raw_normal) != 0 ||
        bench_glmchat_inserts(stream_db, nparts, texts, sizes, offsets, 0, &ours) != 0 ||
        bench_glmchat_inserts(stream2_db, nparts, texts, sizes, offsets, 1, &ours_idle) != 0)
        return 1;
    double ceiling = (double)nparts / raw.seconds;
    print_insert("raw sqlite3 INSERT, synchronous=FULL (ceiling)", &raw, nparts, 0);
    print_insert("raw sqlite3 INSERT, synchronous=NORMAL", &raw_normal, nparts, ceiling);
    print_insert("glmchat part_append (+FTS5, FULL)", &ours, nparts, ceiling);
    print_insert("glmchat, db_checkpoint between turns", &ours_idle, nparts, ceiling);
    printf("(glmchat's rows/s counts parts only; a message row every 8 parts is in its latencies;\n"
           " with db_checkpoint every 64 parts, the slowest checkpoint took %.2f ms, between turns)\n\n",
           ours_idle.checkpoint_max_ms);

    double grow_s;
    long long rows, bytes;
    if (grow(big_db, mb, &v, &r, &grow_s, &rows, &bytes) != 0)
        return 1;
    printf("bulk load to %lld MB: %lld parts, %.0f MB of text in %.1f s: %.0f rows/s, %.1f MB/s\n\n",
           file_size(big_db) / (1024 * 1024), rows, (double)bytes / 1e6, grow_s, (double)rows / grow_s,
           (double)bytes / grow_s / 1e6);

    char err[1024];
    db_store *db = db_open(big_db, err, sizeof err);
    if (!db) {
        fprintf(stderr, "bench_storage: %s\n", err);
        return 1;
    }
    char q2[64], q3[64];
    snprintf(q2, sizeof q2, "%s %s", v.words[20], v.words[200]);
    snprintf(q3, sizeof q3, "%s zzzznotaword", v.words[5]);
    struct {
        const char *what, *query;
    } queries[] = {
        {"rare word (rank 40000)", v.words[40000]},
        {"uncommon word (rank 2000)", v.words[2000]},
        {"common word (rank 10)", v.words[10]},
        {"most common word (rank 0)", v.words[0]},
        {"two words (ranks 20, 200)", q2},
        {"no match", q3},
    };
    printf("%-30s %-24s %6s %10s %10s %10s\n", "search (limit 50)", "query", "hits", "median ms",
           "max ms", "CPU ms");
    for (size_t i = 0; i < sizeof queries / sizeof queries[0]; i++) {
        double med, max, cpu;
        size_t hits;
        if (time_search(db, queries[i].query, repeat, &med, &max, &cpu, &hits) != 0)
            return 1;
        printf("%-30s %-24s %6zu %10.2f %10.2f %10.2f\n", queries[i].what, queries[i].query, hits, med,
               max, cpu);
    }
    double fts_med, fts_max, fts_cpu;
    size_t hits;
    time_search(db, v.words[40000], repeat, &fts_med, &fts_max, &fts_cpu, &hits);
    db_close(db);
    long long matches = -1;
    double scan = time_scan(big_db, v.words[40000], &matches);
    printf("\nfull scan without the index (instr over every part) for the rare word: %.0f ms, %lld "
           "matches; the FTS5 search is %.0fx faster\n",
           scan * 1e3, matches, scan * 1e3 / fts_med);
    unlink(stream_db);
    unlink(stream2_db);
    unlink(raw_db);
    unlink(raw_normal_db);
    if (keep)
        printf("kept %s\n", big_db);
    else
        unlink(big_db);
    free(texts);
    free(sizes);
    free(offsets);
    return 0;
}
