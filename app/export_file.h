/* export_file.h: a transcript written to a file, for `glmchat export -o` and the TUI's /export:
 * a folder takes glmchat-ID.FORMAT, the file is written whole or not at all, mode 0600. */
#ifndef GLMCHAT_APP_EXPORT_FILE_H
#define GLMCHAT_APP_EXPORT_FILE_H

#include <stddef.h>
#include <stdint.h>

#include "storage/storage.h"

/* The file path names for conversation id (0: every one) in format f, into out: path itself,
 * or glmchat-ID.EXT (glmchat-all.EXT) inside it when path is a folder. 0, or -1 (too long). */
int export_file_path(const char *path, int64_t id, export_format f, char *out, size_t cap);

/* Writes conversation id (0: every one) in format f to file: a temporary file beside it,
 * renamed over it once complete, so a failed write leaves what was there. *replaced (may be
 * NULL): 1 when a file was there. 0, or -1 with err naming the file and the cause. */
int export_file_write(db_store *db, int64_t id, export_format f, const char *file, int *replaced,
                      char *err, size_t errlen);

#endif
