/* prefix_cache.c: kept states keyed by their token prefix: longest-prefix lookup, a memory budget
 * with least-recently-used eviction, and a disk tier of checksummed files read back lazily,
 * written crash-safe by a writer thread within a disk budget (least recently used deleted first). */
#include "prefix_cache.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/errbuf.h"
#include "base/hash.h"
#include "base/le.h"

#define MAX_NOTES 64

typedef struct pc_job pc_job;

typedef struct pc_entry {
    int32_t *tokens;
    int n;
    uint64_t hash;
    void *snap;   /* NULL: only on disk */
    size_t bytes; /* of snap */
    uint64_t used; /* tick of the last use */
    char *path;   /* its file, or NULL */
    uint64_t file_bytes; /* of that file */
    pc_job *job;  /* its file being written, or NULL */
} pc_entry;

struct pc_cache {
    pthread_mutex_t lock;
    pc_entry *e;
    int n, cap;
    size_t budget, bytes;
    uint64_t disk_budget, disk_bytes;
    uint64_t tick, model_id;
    char *dir;
    char tag[32]; /* in the files' names before .kept (pc_new_tagged) */
    pc_stats st;
    char *notes[MAX_NOTES];
    int n_notes, dropped_notes; /* the oldest are dropped past MAX_NOTES */
    engine_log log;             /* each note is also said here as it is made */
    /* the writer thread and its queue (oldest first) */
    pthread_t writer;
    pthread_cond_t work, done;
    pc_job *queue, *queue_tail;
    int writer_started, writing, stopping;
};

uint64_t pc_hash_tokens(const int32_t *ids, int n)
{
    return fnv1a64(FNV1A64_SEED, ids, (size_t)n * sizeof *ids);
}

static void note(pc_cache *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void note(pc_cache *c, const char *fmt, ...)
{
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (c->n_notes == MAX_NOTES) { /* keep the newest */
        free(c->notes[0]);
        memmove(c->notes, c->notes + 1, (MAX_NOTES - 1) * sizeof *c->notes);
        c->n_notes--;
        c->dropped_notes++;
    }
    char *s = strdup(buf);
    if (s)
        c->notes[c->n_notes++] = s;
    engine_logf(&c->log, GLM_LOG_WARN, "%s", buf);
}

void pc_set_log(pc_cache *c, const engine_log *log)
{
    if (c)
        c->log = *log;
}

/* ---- file format ----------------------------------------------------------------------------- */

static glm_status refuse(char *why, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static glm_status refuse(char *why, size_t len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    errbuf_vset(why, len, fmt, ap);
    va_end(ap);
    return GLM_ERR_FORMAT;
}

glm_status pc_parse_header(const void *buf, size_t n, uint64_t file_size, uint64_t model_id,
                           pc_file_header *h, char *why, size_t why_len)
{
    const unsigned char *p = buf;
    if (n < PC_HEADER_BYTES || file_size < PC_HEADER_BYTES)
        return refuse(why, why_len, "truncated: %llu bytes, shorter than the %u-byte header",
                      (unsigned long long)file_size, PC_HEADER_BYTES);
    if (memcmp(p, PC_FILE_MAGIC, 8) != 0)
        return refuse(why, why_len, "not a kept-state file (no %s signature)", PC_FILE_MAGIC);
    h->version = le_get_u32(p + 8);
    h->n_tokens = le_get_u32(p + 12);
    h->model_id = le_get_u64(p + 16);
    h->prefix_hash = le_get_u64(p + 24);
    h->snap_bytes = le_get_u64(p + 32);
    h->checksum = le_get_u64(p + 40);
    if (h->version != PC_FILE_VERSION)
        return refuse(why, why_len, "format version %u, this glmchat reads version %u", h->version,
                      PC_FILE_VERSION);
    if (h->model_id != model_id)
        return refuse(why, why_len, "made by another model (identity %016llx, this model is "
                      "%016llx)", (unsigned long long)h->model_id, (unsigned long long)model_id);
    if (h->n_tokens == 0 || h->n_tokens > PC_MAX_TOKENS)
        return refuse(why, why_len, "token count %u out of range (1..%d)", h->n_tokens,
                      PC_MAX_TOKENS);
    uint64_t want = PC_HEADER_BYTES + (uint64_t)h->n_tokens * 4;
    if (h->snap_bytes > UINT64_MAX - want || want + h->snap_bytes != file_size)
        return refuse(why, why_len, "truncated or padded: %llu bytes, the header says %llu tokens "
                      "and a %llu-byte state", (unsigned long long)file_size,
                      (unsigned long long)h->n_tokens, (unsigned long long)h->snap_bytes);
    return GLM_OK;
}

glm_status pc_parse_file(const void *buf, size_t n, uint64_t model_id, pc_file_header *h,
                         const int32_t **tokens, const void **snap, char *why, size_t why_len)
{
    glm_status st = pc_parse_header(buf, n, n, model_id, h, why, why_len);
    if (st)
        return st;
    const unsigned char *p = (const unsigned char *)buf + PC_HEADER_BYTES;
    size_t tok_bytes = (size_t)h->n_tokens * 4;
    if (fnv1a64(FNV1A64_SEED, p, tok_bytes) != h->prefix_hash)
        return refuse(why, why_len, "its tokens do not match the prefix hash in its header");
    if (fnv1a64(fnv1a64(FNV1A64_SEED, p, tok_bytes), p + tok_bytes, (size_t)h->snap_bytes) != h->checksum)
        return refuse(why, why_len, "checksum mismatch: the file is corrupted");
    *tokens = (const int32_t *)(const void *)p;
    *snap = p + tok_bytes;
    return GLM_OK;
}

/* ---- disk tier -------------------------------------------------------------------------------- */

static int read_whole(const char *path, unsigned char **out, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return -1;
    struct stat sb;
    if (fstat(fileno(f), &sb) != 0 || sb.st_size < 0) {
        fclose(f);
        return -1;
    }
    *n = (size_t)sb.st_size;
    *out = malloc(*n ? *n : 1);
    int ok = *out && fread(*out, 1, *n, f) == *n;
    fclose(f);
    if (!ok) {
        free(*out);
        *out = NULL;
        return -1;
    }
    return 0;
}

static int grow_entries(pc_cache *c)
{
    if (c->n < c->cap)
        return 0;
    int cap = c->cap ? 2 * c->cap : 16;
    pc_entry *e = realloc(c->e, (size_t)cap * sizeof *e);
    if (!e)
        return -1;
    c->e = e;
    c->cap = cap;
    return 0;
}

/* Whether a refused file's first bytes are a well-formed kept-state header of another model or
 * format version: such a file belongs to another glmchat and is left alone. */
static int is_foreign(const unsigned char *hdr, size_t n, uint64_t model_id)
{
    if (n < PC_HEADER_BYTES || memcmp(hdr, PC_FILE_MAGIC, 8) != 0)
        return 0;
    return le_get_u32(hdr + 8) != PC_FILE_VERSION || le_get_u64(hdr + 16) != model_id;
}

/* A damaged file: refused with a note naming it and why, and deleted so it is never loaded. */
static void refuse_and_delete(pc_cache *c, const char *path, const char *why)
{
    c->st.refused_files++;
    if (unlink(path) == 0) {
        c->st.deleted_files++;
        note(c, "kept-state file %s refused: %s; deleted", path, why);
    } else {
        note(c, "kept-state file %s refused: %s; could not delete it (%s)", path, why,
             strerror(errno));
    }
}

/* Indexes one file: its header and tokens (the state is read when it is first used). */
static void index_file(pc_cache *c, const char *path)
{
    FILE *f = fopen(path, "rb");
    unsigned char hdr[PC_HEADER_BYTES];
    struct stat sb;
    char why[512];
    pc_file_header h;
    if (!f) {
        note(c, "kept-state file %s refused: cannot open it (%s)", path, strerror(errno));
        c->st.refused_files++;
        return;
    }
    size_t got = fread(hdr, 1, sizeof hdr, f);
    if (fstat(fileno(f), &sb) != 0) {
        note(c, "kept-state file %s refused: cannot stat it (%s)", path, strerror(errno));
        fclose(f);
        c->st.refused_files++;
        return;
    }
    if (pc_parse_header(hdr, got, (uint64_t)sb.st_size, c->model_id, &h, why, sizeof why)) {
        fclose(f);
        if (is_foreign(hdr, got, c->model_id)) {
            note(c, "kept-state file %s refused: %s; left in place", path, why);
            c->st.refused_files++;
        } else {
            refuse_and_delete(c, path, why);
        }
        return;
    }
    int32_t *tokens = malloc((size_t)h.n_tokens * sizeof *tokens);
    int ok = tokens && fread(tokens, sizeof *tokens, h.n_tokens, f) == h.n_tokens;
    fclose(f);
    if (ok && pc_hash_tokens(tokens, (int)h.n_tokens) != h.prefix_hash) {
        refuse_and_delete(c, path, "its tokens do not match the prefix hash in its header");
        ok = 0;
    }
    char *p = ok ? strdup(path) : NULL;
    if (!p || grow_entries(c)) {
        free(tokens);
        free(p);
        return;
    }
    /* for now the file's mtime; open_dir turns these into ticks in the order of last use */
    c->e[c->n++] = (pc_entry){.tokens = tokens, .n = (int)h.n_tokens, .hash = h.prefix_hash,
                              .path = p, .file_bytes = (uint64_t)sb.st_size,
                              .used = (uint64_t)sb.st_mtim.tv_sec * 1000000000ull +
                                      (uint64_t)sb.st_mtim.tv_nsec};
    c->disk_bytes += (uint64_t)sb.st_size;
}

static int has_suffix(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

/* NAME.kept.PID.tmp of a process that is gone: a write that a crash interrupted. */
static int is_stale_temp(const char *name)
{
    const char *k = strstr(name, ".kept.");
    if (!k || !has_suffix(name, ".tmp"))
        return 0;
    char *end;
    long pid = strtol(k + 6, &end, 10);
    if (end == k + 6 || strcmp(end, ".tmp") != 0 || pid <= 0)
        return 0;
    return kill((pid_t)pid, 0) != 0 && errno == ESRCH;
}

static int by_use(const void *a, const void *b)
{
    const pc_entry *x = a, *y = b;
    return x->used < y->used ? -1 : x->used > y->used;
}

/* Whether a kept-state file's name (or its temporary's) carries this cache's tag: the files of
 * another rank of a split (another tag, or a tag where this cache has none) are its own, not
 * another model's, and are passed over without a note. */
static int is_ours(const pc_cache *c, const char *name)
{
    const char *k = strstr(name, ".kept");
    if (!k)
        return 0;
    size_t stem = (size_t)(k - name), tl = strlen(c->tag);
    if (tl)
        return stem >= tl && memcmp(k - tl, c->tag, tl) == 0;
    const char *r = NULL; /* the last ".rank" in the stem */
    for (const char *p = name; (p = strstr(p, ".rank")) && p < k; p++)
        r = p;
    unsigned a, b;
    char tail[8];
    return !(r && sscanf(r, ".rank%uof%u%7s", &a, &b, tail) == 3 && strncmp(tail, ".kept", 5) == 0);
}

static glm_status open_dir(pc_cache *c, const char *dir, glm_error *err)
{
    if (mkdir(dir, 0700) != 0 && errno != EEXIST)
        return glm_error_set(err, GLM_ERR_IO, "cannot make the prompt cache directory %s: %s", dir,
                             strerror(errno));
    DIR *d = opendir(dir);
    if (!d)
        return glm_error_set(err, GLM_ERR_IO, "cannot read the prompt cache directory %s: %s", dir,
                             strerror(errno));
    struct dirent *de;
    char path[4096];
    while ((de = readdir(d))) {
        int ours = is_ours(c, de->d_name), kept = ours && has_suffix(de->d_name, ".kept"),
            stale = ours && !kept && is_stale_temp(de->d_name);
        if ((!kept && !stale) ||
            snprintf(path, sizeof path, "%s/%s", dir, de->d_name) >= (int)sizeof path)
            continue;
        if (stale)
            unlink(path);
        else
            index_file(c, path);
    }
    closedir(d);
    /* least recently used first, then ticks 1..n in that order */
    if (c->n > 1)
        qsort(c->e, (size_t)c->n, sizeof *c->e, by_use);
    for (int i = 0; i < c->n; i++)
        c->e[i].used = (uint64_t)i + 1;
    c->tick = (uint64_t)c->n;
    return GLM_OK;
}

static void drop_entry(pc_cache *c, int i);

/* Deletes files, least recently used first, sparing entry `keep` (-1: none), until `need` more
 * bytes fit the disk budget; returns keep's index afterwards. An entry still in memory stays
 * (memory only); one that was only on disk is forgotten. */
static int make_disk_room(pc_cache *c, uint64_t need, int keep)
{
    while (c->disk_bytes + need > c->disk_budget) {
        int lru = -1;
        for (int i = 0; i < c->n; i++)
            if (i != keep && c->e[i].path && (lru < 0 || c->e[i].used < c->e[lru].used))
                lru = i;
        if (lru < 0)
            break;
        pc_entry *e = &c->e[lru];
        if (unlink(e->path) != 0 && errno != ENOENT)
            note(c, "could not delete the kept-state file %s for the disk budget: %s", e->path,
                 strerror(errno));
        c->disk_bytes -= e->file_bytes;
        c->st.disk_evictions++;
        free(e->path);
        e->path = NULL;
        e->file_bytes = 0;
        if (!e->snap) {
            if (keep == c->n - 1)
                keep = lru; /* drop_entry moves the last entry into the hole */
            drop_entry(c, lru);
        }
    }
    return keep;
}

/* Makes a rename durable: the directory's entry, after the file's own bytes. */
static int sync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd < 0)
        return -1;
    int rc = fsync(fd);
    close(fd);
    return rc;
}

/* Reads entry e's state back from its file; on a refusal (-1) the caller forgets the entry,
 * and a damaged file is deleted. */
static int load_file(pc_cache *c, pc_entry *e)
{
    unsigned char *buf = NULL;
    size_t n = 0;
    char why[512] = "";
    pc_file_header h;
    const int32_t *tokens;
    const void *snap;
    if (read_whole(e->path, &buf, &n) != 0) {
        note(c, "kept-state file %s refused: cannot read it (%s)", e->path, strerror(errno));
        c->st.refused_files++;
        return -1;
    }
    if (pc_parse_file(buf, n, c->model_id, &h, &tokens, &snap, why, sizeof why) ||
        (int)h.n_tokens != e->n || memcmp(tokens, e->tokens, (size_t)e->n * sizeof *tokens) != 0) {
        if (!why[0])
            snprintf(why, sizeof why, "it changed since it was indexed");
        free(buf);
        refuse_and_delete(c, e->path, why);
        return -1;
    }
    void *copy = malloc((size_t)h.snap_bytes ? (size_t)h.snap_bytes : 1);
    if (copy)
        memcpy(copy, snap, (size_t)h.snap_bytes);
    free(buf);
    if (!copy)
        return -1;
    e->snap = copy;
    e->bytes = (size_t)h.snap_bytes;
    c->bytes += e->bytes;
    c->st.disk_loads++;
    return 0;
}

/* Marks a file used now, so the order of use survives a restart (mtimes order the files). */
static void touch_file(const pc_entry *e)
{
    if (e->path)
        utimensat(AT_FDCWD, e->path, NULL, 0);
}

/* ---- the writer: kept-state files are written on a thread of their own ---------------------- */

/* One file to write. The job holds the entry's snapshot while it writes; whoever would free it
 * meanwhile hands it over instead (release_snap), and a dropped entry orphans its job. */
struct pc_job {
    struct pc_job *next;
    int32_t *tokens; /* a copy */
    int n;
    uint64_t hash, size;
    const void *snap;
    size_t bytes;
    void *owned;  /* the snapshot, once the job frees it after writing */
    int orphaned; /* the entry is gone: the file is not kept */
    int ok, err;  /* the write's outcome: ok, else errno */
    char path[4096];
};

/* Frees entry e's snapshot, or hands it to the job writing it; e->snap is NULL afterwards. The
 * caller keeps c->bytes. */
static void release_snap(pc_entry *e)
{
    if (e->job && e->snap)
        e->job->owned = e->snap;
    else
        free(e->snap);
    e->snap = NULL;
}

/* Writes job's file through a temporary name, flushed to the disk before the rename. No lock. */
static void write_job(pc_job *j, const char *dir, uint64_t model_id)
{
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.%ld.tmp", j->path, (long)getpid());
    unsigned char hdr[PC_HEADER_BYTES];
    size_t tok_bytes = (size_t)j->n * sizeof *j->tokens;
    uint64_t sum = fnv1a64(fnv1a64(FNV1A64_SEED, j->tokens, tok_bytes), j->snap, j->bytes);
    memcpy(hdr, PC_FILE_MAGIC, 8);
    le_put_u32(hdr + 8, PC_FILE_VERSION);
    le_put_u32(hdr + 12, (uint32_t)j->n);
    le_put_u64(hdr + 16, model_id);
    le_put_u64(hdr + 24, j->hash);
    le_put_u64(hdr + 32, j->bytes);
    le_put_u64(hdr + 40, sum);
    FILE *f = fopen(tmp, "wb");
    int ok = f && fwrite(hdr, 1, sizeof hdr, f) == sizeof hdr &&
             fwrite(j->tokens, 1, tok_bytes, f) == tok_bytes &&
             fwrite(j->snap, 1, j->bytes, f) == j->bytes && fflush(f) == 0 &&
             fsync(fileno(f)) == 0;
    int saved = errno;
    if (f && fclose(f) != 0 && ok) {
        ok = 0;
        saved = errno;
    }
    if (ok && rename(tmp, j->path) != 0) {
        ok = 0;
        saved = errno;
    }
    if (!ok) {
        unlink(tmp);
        j->ok = 0;
        j->err = saved;
        return;
    }
    j->ok = sync_dir(dir) == 0 ? 1 : -1; /* -1: renamed, the directory not synced */
    j->err = j->ok < 0 ? errno : 0;
}

/* Under the lock: the job's outcome into the cache. */
static void finish_job(pc_cache *c, pc_job *j)
{
    int i = 0;
    while (i < c->n && c->e[i].job != j)
        i++;
    if (j->ok && j->orphaned)
        unlink(j->path);
    if (!j->ok && !j->orphaned)
        note(c, "could not write the kept-state file %s: %s", j->path, strerror(j->err));
    if (j->ok < 0 && !j->orphaned)
        note(c, "kept-state file %s: its directory could not be synced (%s); a crash now may lose "
             "the file", j->path, strerror(j->err));
    if (!j->orphaned && i < c->n) {
        pc_entry *e = &c->e[i];
        e->job = NULL;
        if (j->ok && (e->path = strdup(j->path))) {
            e->file_bytes = j->size;
            c->disk_bytes += j->size;
            c->st.disk_writes++;
            /* files written while this one waited may have filled the budget: the older go */
            i = make_disk_room(c, 0, i);
            e = &c->e[i];
        } else if (j->ok) {
            unlink(j->path);
        }
        if (!e->snap && !e->path)
            drop_entry(c, i); /* its state was only in the job */
    }
    free(j->owned);
    free(j->tokens);
    free(j);
}

static void *writer_main(void *arg)
{
    pc_cache *c = arg;
    pthread_mutex_lock(&c->lock);
    for (;;) {
        while (!c->queue && !c->stopping)
            pthread_cond_wait(&c->work, &c->lock);
        pc_job *j = c->queue;
        if (!j)
            break;
        c->queue = j->next;
        if (!c->queue)
            c->queue_tail = NULL;
        c->writing = 1;
        if (!j->orphaned) {
            pthread_mutex_unlock(&c->lock);
            write_job(j, c->dir, c->model_id);
            pthread_mutex_lock(&c->lock);
        }
        finish_job(c, j);
        c->writing = 0;
        pthread_cond_broadcast(&c->done);
    }
    pthread_mutex_unlock(&c->lock);
    return NULL;
}

/* Under the lock: queues the file of entry i (its snapshot in memory), deleting older files for
 * its room first, and starts the writer when it is not running. The files written stay within
 * the disk budget (finish_job deletes the older when writes queued together overfill it); only
 * the one being written is over it, for as long as it is written. Returns i's index afterwards. */
static int queue_write(pc_cache *c, int i)
{
    pc_entry *e = &c->e[i];
    char path[4096];
    uint64_t size = PC_HEADER_BYTES + (uint64_t)e->n * sizeof *e->tokens + e->bytes;
    if (c->disk_budget == 0)
        return i;
    if (snprintf(path, sizeof path, "%s/%016llx-%d%s.kept", c->dir, (unsigned long long)e->hash,
                 e->n, c->tag) >= (int)sizeof path)
        return i;
    if (size > c->disk_budget) {
        note(c, "kept-state file %s not written: its %llu bytes are over the disk budget of %llu "
             "(prompt_cache_disk_mb)", path, (unsigned long long)size,
             (unsigned long long)c->disk_budget);
        return i;
    }
    pc_job *j = calloc(1, sizeof *j);
    int32_t *tokens = j ? malloc((size_t)e->n * sizeof *tokens) : NULL;
    if (!tokens || (!c->writer_started &&
                    pthread_create(&c->writer, NULL, writer_main, c) != 0)) {
        note(c, "kept-state file %s not written: %s", path,
             tokens ? "cannot start the writer thread" : "out of memory");
        free(tokens);
        free(j);
        return i;
    }
    c->writer_started = 1;
    i = make_disk_room(c, size, i);
    e = &c->e[i];
    memcpy(tokens, e->tokens, (size_t)e->n * sizeof *tokens);
    *j = (pc_job){.tokens = tokens, .n = e->n, .hash = e->hash, .size = size, .snap = e->snap,
                  .bytes = e->bytes};
    snprintf(j->path, sizeof j->path, "%s", path);
    e->job = j;
    if (c->queue_tail)
        c->queue_tail->next = j;
    else
        c->queue = j;
    c->queue_tail = j;
    pthread_cond_signal(&c->work);
    return i;
}

/* Under the lock: waits until every queued file is written. */
static void wait_writes(pc_cache *c)
{
    while (c->queue || c->writing)
        pthread_cond_wait(&c->done, &c->lock);
}

/* ---- the cache -------------------------------------------------------------------------------- */

pc_cache *pc_new(size_t budget, const char *dir, uint64_t model_id, glm_error *err)
{
    return pc_new_tagged(budget, dir, model_id, "", err);
}

pc_cache *pc_new_tagged(size_t budget, const char *dir, uint64_t model_id, const char *tag,
                        glm_error *err)
{
    static const char allowed[] = ".0123456789abcdefghijklmnopqrstuvwxyz";
    if (strlen(tag) >= sizeof ((pc_cache *)0)->tag || strspn(tag, allowed) != strlen(tag)) {
        glm_error_set(err, GLM_ERR_ARG, "the prompt cache's file tag '%s' is not up to 31 "
                      "lower-case letters, digits and dots", tag);
        return NULL;
    }
    pc_cache *c = calloc(1, sizeof *c);
    if (!c) {
        glm_error_set(err, GLM_ERR_NOMEM, "out of memory starting the prompt cache");
        return NULL;
    }
    pthread_mutex_init(&c->lock, NULL);
    pthread_cond_init(&c->work, NULL);
    pthread_cond_init(&c->done, NULL);
    c->budget = budget;
    c->disk_budget = PC_DEFAULT_DISK_BUDGET;
    c->model_id = model_id;
    snprintf(c->tag, sizeof c->tag, "%s", tag);
    if (dir && !(c->dir = strdup(dir))) {
        pc_free(c);
        glm_error_set(err, GLM_ERR_NOMEM, "out of memory starting the prompt cache");
        return NULL;
    }
    if (dir && open_dir(c, dir, err) != GLM_OK) {
        pc_free(c);
        return NULL;
    }
    return c;
}

static void drop_entry(pc_cache *c, int i)
{
    pc_entry *e = &c->e[i];
    if (e->snap)
        c->bytes -= e->bytes;
    if (e->path) /* the file stays (a state the backend refused): found again at the next open */
        c->disk_bytes -= e->file_bytes;
    if (e->job)
        e->job->orphaned = 1;
    release_snap(e);
    free(e->tokens);
    free(e->path);
    c->e[i] = c->e[--c->n];
}

void pc_set_disk_budget(pc_cache *c, uint64_t bytes)
{
    if (!c)
        return;
    pthread_mutex_lock(&c->lock);
    c->disk_budget = bytes;
    make_disk_room(c, 0, -1);
    pthread_mutex_unlock(&c->lock);
}

void pc_flush(pc_cache *c)
{
    if (!c)
        return;
    pthread_mutex_lock(&c->lock);
    wait_writes(c);
    pthread_mutex_unlock(&c->lock);
}

void pc_free(pc_cache *c)
{
    if (!c)
        return;
    if (c->writer_started) { /* the queued files are written first */
        pthread_mutex_lock(&c->lock);
        c->stopping = 1;
        pthread_cond_signal(&c->work);
        pthread_mutex_unlock(&c->lock);
        pthread_join(c->writer, NULL);
    }
    while (c->n)
        drop_entry(c, c->n - 1);
    free(c->e);
    free(c->dir);
    for (int i = 0; i < c->n_notes; i++)
        free(c->notes[i]);
    pthread_cond_destroy(&c->work);
    pthread_cond_destroy(&c->done);
    pthread_mutex_destroy(&c->lock);
    free(c);
}

/* Frees memory until `need` more bytes fit, least recently used first, sparing entry `keep`
 * (-1: none), whose index after the evictions it returns. An evicted state with a file stays
 * known (on disk only). */
static int make_room(pc_cache *c, size_t need, int keep)
{
    while (c->bytes + need > c->budget) {
        int lru = -1;
        for (int i = 0; i < c->n; i++)
            if (i != keep && c->e[i].snap && (lru < 0 || c->e[i].used < c->e[lru].used))
                lru = i;
        if (lru < 0)
            break;
        c->st.evictions++;
        if (c->e[lru].path || c->e[lru].job) { /* stays known: on disk, or soon */
            c->bytes -= c->e[lru].bytes;
            release_snap(&c->e[lru]);
        } else {
            if (keep == c->n - 1)
                keep = lru; /* drop_entry moves the last entry into the hole */
            drop_entry(c, lru);
        }
    }
    return keep;
}

static int is_prefix(const pc_entry *e, const int32_t *ids, int n)
{
    return e->n <= n && memcmp(e->tokens, ids, (size_t)e->n * sizeof *ids) == 0;
}

int pc_lookup(pc_cache *c, const int32_t *ids, int n, int min_len, int max_len, pc_load_fn load,
              void *user)
{
    if (!c)
        return 0;
    pthread_mutex_lock(&c->lock);
    int restored = 0;
    for (;;) {
        int best = -1;
        for (int i = 0; i < c->n; i++) {
            const pc_entry *e = &c->e[i];
            /* (a state whose file is still being written and that left memory waits for it) */
            if (e->n > min_len && e->n <= max_len && (e->snap || e->path) && is_prefix(e, ids, n) &&
                (best < 0 || e->n > c->e[best].n))
                best = i;
        }
        if (best < 0)
            break;
        pc_entry *e = &c->e[best];
        if (!e->snap) {
            if (load_file(c, e) != 0) { /* counted and noted there */
                drop_entry(c, best);
                continue;
            }
            best = make_room(c, 0, best);
            e = &c->e[best];
        }
        glm_error lerr = {0};
        glm_status ls = load(user, e->snap, e->bytes, &lerr);
        if (ls == GLM_ERR_PEER) {
            note(c, "a kept state of %d tokens was not restored (kept for later): %s", e->n,
                 lerr.message);
            break;
        }
        if (ls != GLM_OK) {
            note(c, "a kept state of %d tokens could not be restored: %s", e->n, lerr.message);
            drop_entry(c, best);
            continue;
        }
        e->used = ++c->tick;
        touch_file(e);
        c->st.hits++;
        restored = e->n;
        break;
    }
    pthread_mutex_unlock(&c->lock);
    return restored;
}

static int find_exact(pc_cache *c, const int32_t *ids, int n)
{
    for (int i = 0; i < c->n; i++)
        if (c->e[i].n == n && is_prefix(&c->e[i], ids, n))
            return i;
    return -1;
}

int pc_contains(pc_cache *c, const int32_t *ids, int n)
{
    if (!c)
        return 0;
    pthread_mutex_lock(&c->lock);
    int i = find_exact(c, ids, n);
    if (i >= 0)
        c->e[i].used = ++c->tick;
    pthread_mutex_unlock(&c->lock);
    return i >= 0;
}

glm_status pc_put(pc_cache *c, const int32_t *ids, int n, void *snap, size_t bytes, glm_error *err)
{
    if (!c || n <= 0) {
        free(snap);
        return GLM_OK;
    }
    pthread_mutex_lock(&c->lock);
    glm_status st = GLM_OK;
    int i = find_exact(c, ids, n);
    if (i >= 0) { /* already kept: the same tokens give the same state */
        c->e[i].used = ++c->tick;
        touch_file(&c->e[i]);
        free(snap);
        goto out;
    }
    int32_t *tokens = malloc((size_t)n * sizeof *tokens);
    if (!tokens || grow_entries(c)) {
        free(tokens);
        free(snap);
        st = glm_error_set(err, GLM_ERR_NOMEM, "out of memory keeping a prompt state");
        goto out;
    }
    memcpy(tokens, ids, (size_t)n * sizeof *tokens);
    if (bytes <= c->budget)
        make_room(c, bytes, -1);
    int at = c->n++;
    c->e[at] = (pc_entry){.tokens = tokens, .n = n, .hash = pc_hash_tokens(ids, n), .snap = snap,
                          .bytes = bytes, .used = ++c->tick};
    if (c->dir)
        at = queue_write(c, at);
    pc_entry *e = &c->e[at];
    if (bytes > c->budget) { /* never fits in memory: on disk only, or not kept */
        release_snap(e); /* (never counted in c->bytes) */
        if (!e->job)
            drop_entry(c, at);
        goto out;
    }
    c->bytes += bytes;
out:
    pthread_mutex_unlock(&c->lock);
    return st;
}

void pc_get_stats(pc_cache *c, pc_stats *out)
{
    memset(out, 0, sizeof *out);
    if (!c)
        return;
    pthread_mutex_lock(&c->lock);
    *out = c->st;
    out->entries = c->n;
    for (int i = 0; i < c->n; i++)
        out->in_memory += c->e[i].snap != NULL;
    out->bytes = c->bytes;
    out->budget = c->budget;
    out->disk_bytes = c->disk_bytes;
    out->disk_budget = c->disk_budget;
    pthread_mutex_unlock(&c->lock);
}

int pc_n_notes(pc_cache *c)
{
    if (!c)
        return 0;
    pthread_mutex_lock(&c->lock);
    int n = c->dropped_notes + c->n_notes;
    pthread_mutex_unlock(&c->lock);
    return n;
}

const char *pc_note(pc_cache *c, int i)
{
    if (!c)
        return NULL;
    pthread_mutex_lock(&c->lock);
    i -= c->dropped_notes;
    const char *s = i >= 0 && i < c->n_notes ? c->notes[i] : NULL;
    pthread_mutex_unlock(&c->lock);
    return s;
}
