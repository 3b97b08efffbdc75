/* prefix_cache.h: kept conversation states keyed by the tokens they hold, for prompt reuse across
 * conversations: a memory tier within a byte budget (least recently used out first) and an
 * optional directory of checksummed files that survives restarts, within its own byte budget. */
#ifndef GLMCHAT_ENGINE_PREFIX_CACHE_H
#define GLMCHAT_ENGINE_PREFIX_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "glm.h"
#include "log.h"

typedef struct pc_cache pc_cache;

typedef struct pc_stats {
    int entries;        /* states known (in memory or on disk) */
    int in_memory;
    size_t bytes;       /* held in memory */
    size_t budget;
    int64_t hits;       /* lookups that restored a state */
    int64_t evictions;  /* states dropped from memory for the budget */
    int64_t disk_writes, disk_loads, refused_files;
    uint64_t disk_bytes;    /* of the files this cache knows in its directory */
    uint64_t disk_budget;
    int64_t disk_evictions; /* files deleted for the disk budget */
    int64_t deleted_files;  /* damaged files deleted (refused, never loaded) */
} pc_stats;

/* budget: bytes of snapshots kept in memory. dir: NULL, or a directory of kept-state files
 * (made when missing) read now and written as states are kept. model_id identifies the model
 * (files of another model or format version are refused and left alone). Files that cannot be
 * used are refused with a note (pc_note) naming the file and the reason, and damaged ones
 * (truncated, no signature, a checksum or hash that does not match) are deleted; none stops the
 * cache from opening. Leftover temporary files of writers that are gone are deleted. */
pc_cache *pc_new(size_t budget, const char *dir, uint64_t model_id, glm_error *err);
/* pc_new for one rank of a split: tag (up to 31 lower-case letters, digits and dots, e.g.
 * ".rank1of2") goes into its files' names (HASH-N<tag>.kept), and the directory's files of another
 * tag (another rank's parts, or an unsplit glmchat's where tag is "") are passed over without a
 * note, so ranks sharing a directory keep apart. A file is still known by its header. */
pc_cache *pc_new_tagged(size_t budget, const char *dir, uint64_t model_id, const char *tag,
                        glm_error *err);

/* The bytes the files in the directory may take (PC_DEFAULT_DISK_BUDGET until set; 0: no file
 * is written). Files are deleted, least recently used first (their modification times order
 * them across restarts), until the budget holds, now and before each write. */
#define PC_DEFAULT_DISK_BUDGET ((uint64_t)4 << 30)
void pc_set_disk_budget(pc_cache *c, uint64_t bytes);
void pc_free(pc_cache *c);

/* Called with a kept snapshot to restore it; an error makes the lookup drop that state and try
 * the next, except GLM_ERR_PEER (the ranks could not agree: a link, not the state, failed), which
 * ends the lookup with the state kept. */
typedef glm_status (*pc_load_fn)(void *user, const void *snap, size_t n, glm_error *err);

/* Restores the longest kept state whose tokens are a prefix of ids[0..n) and that holds at most
 * max_len tokens and more than min_len; returns its length, or 0 when none was restored. */
int pc_lookup(pc_cache *c, const int32_t *ids, int n, int min_len, int max_len, pc_load_fn load,
              void *user);
/* Whether a state holding exactly ids[0..n) is kept. */
int pc_contains(pc_cache *c, const int32_t *ids, int n);
/* Keeps snap (malloc'ed, bytes long; the cache owns it from now on, also on an error) as the
 * state after ids[0..n); a state larger than the whole budget is kept only on disk. With a
 * directory its file is queued and written by the cache's writer thread, so the caller does not
 * wait for the disk, crash-safe: to a temporary name, flushed to the disk (fsync), renamed over,
 * then the directory synced. A state leaving memory before its file is written is found again
 * once it is. */
glm_status pc_put(pc_cache *c, const int32_t *ids, int n, void *snap, size_t bytes, glm_error *err);
/* Waits until every queued file is written (pc_free does too, before it frees). */
void pc_flush(pc_cache *c);

/* What the cache holds now (files still queued are not counted as written yet). */
void pc_get_stats(pc_cache *c, pc_stats *out);
/* The refusals so far (files that could not be used, disk writes that failed), numbered from 0
 * in order; only the newest 64 are kept (an older number gives NULL). */
int pc_n_notes(pc_cache *c);
const char *pc_note(pc_cache *c, int i);
/* Each later note is also handed to log (GLM_LOG_WARN) as it is made. */
void pc_set_log(pc_cache *c, const engine_log *log);

/* ---- the file format, exposed for the fuzz target and tests ------------------------------- */
/* The header's numbers are little-endian (base/le.h); the tokens and the snapshot follow it as
 * this machine holds them. */

#define PC_FILE_MAGIC "GLMKEPT1"
#define PC_FILE_VERSION 1u
#define PC_HEADER_BYTES 48u
#define PC_MAX_TOKENS (1 << 26)

typedef struct pc_file_header {
    uint32_t version, n_tokens;
    uint64_t model_id, prefix_hash, snap_bytes, checksum;
} pc_file_header;

/* FNV-1a 64 of n token ids. */
uint64_t pc_hash_tokens(const int32_t *ids, int n);
/* Checks a file's first bytes (at least PC_HEADER_BYTES, else an error) against the whole file's
 * size and the model; on an error why says what is wrong. */
glm_status pc_parse_header(const void *buf, size_t n, uint64_t file_size, uint64_t model_id,
                           pc_file_header *h, char *why, size_t why_len);
/* Checks a whole file image (header, tokens, snapshot, checksum); on success *tokens and *snap
 * point into buf. */
glm_status pc_parse_file(const void *buf, size_t n, uint64_t model_id, pc_file_header *h,
                         const int32_t **tokens, const void **snap, char *why, size_t why_len);

#endif
