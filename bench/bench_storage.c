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

#include "bench/bench_clock.h"
#include "storage/storage.h"
#include "tests/common/rng.h"

#define VOCAB 50000

typedef struct rng {
    uint64_t s;
} rng;

static uint64_t rng_next(rng *r)
{
    return test_rng_next(&r->s);
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

static double pct(double *v, size_t n, double p)
{
    qsort(v, n, sizeof *v, bench_cmp_double);
    size_t i = (size_t)(p * (double)(n - 1) + 0.5);
    return v[i];
}

/* One insert stream: its latencies (seconds) and bytes. */
typedef struct stream {
    const char *name;
    double *lat;
    size_t nlat;
    double total_s;   /* sum of its write latencies */
    double idle_max_ms, idle_total_s; /* db_idle calls between turns, timed apart */
    size_t idles;
    size_t bytes;
} stream;

static void stream_add(stream *s, double seconds)
{
    s->lat[s->nlat++] = seconds;
    s->total_s += seconds;
}

/* The ceiling: raw sqlite3 with the same PRAGMAs, one autocommit INSERT of the same bytes
 * per row into a bare table (no index, no FTS, no foreign keys). */
static sqlite3_stmt *raw_open(const char *path, const char *sync, sqlite3 **sql)
{
    sqlite3_stmt *st = NULL;
    char pragmas[256];
    snprintf(pragmas, sizeof pragmas,
             "PRAGMA journal_mode = WAL; PRAGMA synchronous = %s;"
             "CREATE TABLE raw(id INTEGER PRIMARY KEY, message_id INTEGER, body BLOB)",
             sync);
    if (sqlite3_open(path, sql) != SQLITE_OK || sqlite3_exec(*sql, pragmas, NULL, NULL, NULL) != SQLITE_OK ||
        sqlite3_prepare_v2(*sql, "INSERT INTO raw(message_id, body) VALUES (?1, ?2)", -1, &st, NULL) != SQLITE_OK)
        fprintf(stderr, "bench_storage: raw sqlite %s: %s\n", path, sqlite3_errmsg(*sql));
    return st;
}

static int raw_insert(sqlite3_stmt *st, size_t i, const char *data, size_t len, stream *s)
{
    double t0 = bench_now_s();
    sqlite3_bind_int64(st, 1, (int64_t)(i / 8));
    sqlite3_bind_blob(st, 2, data, (int)len, SQLITE_STATIC);
    int rc = sqlite3_step(st);
    sqlite3_reset(st);
    stream_add(s, bench_now_s() - t0);
    s->bytes += len;
    return rc == SQLITE_DONE ? 0 : -1;
}

/* glmchat as the chat uses it: a message every 8 parts, each part_append durable on return;
 * with idle, db_idle after every 64 parts (a turn), timed apart from the writes. */
typedef struct chat_writer {
    db_store *db;
    int64_t conv, msg;
    int idle;
} chat_writer;

static int chat_insert(chat_writer *w, size_t i, const char *data, size_t len, stream *s)
{
    if (w->idle && i % 64 == 0 && i) {
        double t0 = bench_now_s();
        if (db_idle(w->db) != 0)
            return -1;
        double t = bench_now_s() - t0;
        s->idle_total_s += t;
        s->idles++;
        if (t * 1e3 > s->idle_max_ms)
            s->idle_max_ms = t * 1e3;
    }
    if (i % 8 == 0) {
        double t0 = bench_now_s();
        w->msg = msg_append(w->db, w->conv, w->msg > 0 ? w->msg : 0, i % 16 ? MSG_ASSISTANT : MSG_USER,
                            MSG_STREAMING, NULL);
        stream_add(s, bench_now_s() - t0);
        if (w->msg < 0)
            return -1;
    }
    part_in p = {.kind = i % 3 == 1 ? PART_REASONING : PART_TEXT, .data = data, .len = len};
    double t0 = bench_now_s();
    int64_t id = part_append(w->db, w->msg, &p);
    stream_add(s, bench_now_s() - t0);
    s->bytes += len;
    return id > 0 ? 0 : -1;
}

static void print_stream(stream *s, size_t rows, double ceiling_rows)
{
    double rate = (double)rows / s->total_s;
    double p50 = pct(s->lat, s->nlat, 0.5) * 1e3, p99 = pct(s->lat, s->nlat, 0.99) * 1e3;
    double max = pct(s->lat, s->nlat, 1.0) * 1e3;
    printf("%-44s %9.0f %8.2f %8.3f %8.3f %8.2f", s->name, rate, (double)s->bytes / s->total_s / 1e6,
           p50, p99, max);
    if (ceiling_rows > 0)
        printf("  %5.2f", rate / ceiling_rows);
    printf("\n");
}

/* Runs the streams row by row in turn, so that all see the same disk at the same moments
 * (the machine's fsync time drifts over minutes). */
static int bench_inserts(const char *dir, size_t nparts, const char *texts, const size_t *sizes,
                         const size_t *offsets)
{
    char raw_full[4096], raw_normal[4096], plain[4096], idle[4096], err[1024];
    int pid = (int)getpid();
    snprintf(raw_full, sizeof raw_full, "%s/bench-raw-full-%d.db", dir, pid);
    snprintf(raw_normal, sizeof raw_normal, "%s/bench-raw-normal-%d.db", dir, pid);
    snprintf(plain, sizeof plain, "%s/bench-chat-%d.db", dir, pid);
    snprintf(idle, sizeof idle, "%s/bench-chat-idle-%d.db", dir, pid);
    stream st[4] = {{.name = "raw sqlite3 INSERT, synchronous=FULL (ceiling)"},
                    {.name = "raw sqlite3 INSERT, synchronous=NORMAL"},
                    {.name = "glmchat msg_append + part_append"},
                    {.name = "glmchat, db_idle between turns"}};
    for (int k = 0; k < 4; k++)
        if (!(st[k].lat = malloc(nparts * 2 * sizeof(double))))
            return -1;
    sqlite3 *full_sql, *normal_sql;
    sqlite3_stmt *full = raw_open(raw_full, "FULL", &full_sql), *normal = raw_open(raw_normal, "NORMAL", &normal_sql);
    chat_writer w[2] = {{db_open(plain, err, sizeof err), 0, 0, 0}, {db_open(idle, err, sizeof err), 0, 0, 1}};
    if (!full || !normal || !w[0].db || !w[1].db) {
        fprintf(stderr, "bench_storage: opening: %s\n", err);
        return -1;
    }
    for (int k = 0; k < 2; k++)
        w[k].conv = conv_create(w[k].db, "bench", NULL);
    for (size_t i = 0; i < nparts; i++) {
        const char *data = texts + offsets[i];
        if (raw_insert(full, i, data, sizes[i], &st[0]) != 0 || raw_insert(normal, i, data, sizes[i], &st[1]) != 0 ||
            chat_insert(&w[0], i, data, sizes[i], &st[2]) != 0 || chat_insert(&w[1], i, data, sizes[i], &st[3]) != 0) {
            fprintf(stderr, "bench_storage: insert %zu failed: %s / %s\n", i, db_errmsg(w[0].db), db_errmsg(w[1].db));
            return -1;
        }
    }
    double ceiling = (double)nparts / st[0].total_s;
    printf("%-44s %9s %8s %8s %8s %8s  %5s\n", "inserts (one durable transaction per row)", "rows/s",
           "MB/s", "p50 ms", "p99 ms", "max ms", "ratio");
    print_stream(&st[0], nparts, 0);
    for (int k = 1; k < 4; k++)
        print_stream(&st[k], nparts, ceiling);
    printf("(glmchat's rows/s counts parts; its latencies include a message row every 8 parts.\n"
           " db_idle every 64 parts indexes them for search and checkpoints: %zu calls, mean %.1f ms,\n"
           " slowest %.1f ms, all between turns, outside the writes above)\n\n",
           st[3].idles, st[3].idles ? st[3].idle_total_s * 1e3 / (double)st[3].idles : 0.0, st[3].idle_max_ms);
    sqlite3_finalize(full);
    sqlite3_finalize(normal);
    sqlite3_close(full_sql);
    sqlite3_close(normal_sql);
    db_close(w[0].db);
    db_close(w[1].db);
    for (int k = 0; k < 4; k++)
        free(st[k].lat);
    unlink(raw_full);
    unlink(raw_normal);
    unlink(plain);
    unlink(idle);
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
    double start = bench_now_s();
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
    *seconds = bench_now_s() - start;
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
        double t0 = bench_now_s(), c0 = cpu_s();
        if (search_parts(db, query, 50, &h, &n) != 0) {
            fprintf(stderr, "bench_storage: search: %s\n", db_errmsg(db));
            free(lat);
            return -1;
        }
        lat[i] = bench_now_s() - t0;
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
    double t0 = bench_now_s();
    *matches = sqlite3_step(st) == SQLITE_ROW ? sqlite3_column_int64(st, 0) : -1;
    double t = bench_now_s() - t0;
    sqlite3_finalize(st);
    sqlite3_close(sql);
    return t;
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

    char big_db[4096];
    snprintf(big_db, sizeof big_db, "%s/bench-big-%d.db", dir, (int)getpid());
    printf("glmchat storage benchmark: %zu streamed parts (%.1f MB), SQLite %s\n\n", nparts,
           (double)total / 1e6, sqlite3_libversion());
    if (bench_inserts(dir, nparts, texts, sizes, offsets) != 0)
        return 1;

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
    /* Bulk writes leave indexing to db_idle, as the chat does between turns. */
    double t_index = bench_now_s();
    if (db_idle(db) != 0) {
        fprintf(stderr, "bench_storage: %s\n", db_errmsg(db));
        return 1;
    }
    t_index = bench_now_s() - t_index;
    printf("indexing them for search (db_idle): %.1f s, %.1f MB/s of text; database now %lld MB\n\n",
           t_index, (double)bytes / t_index / 1e6, file_size(big_db) / (1024 * 1024));
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
    if (keep)
        printf("kept %s\n", big_db);
    else
        unlink(big_db);
    free(texts);
    free(sizes);
    free(offsets);
    return 0;
}
