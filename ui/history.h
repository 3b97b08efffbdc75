/* history.h: the input history file, one entry a line with '\n' and '\\' escaped so that
 * multi-line messages survive; kept across runs, trimmed to the newest entries. */
#ifndef GLMCHAT_UI_HISTORY_H
#define GLMCHAT_UI_HISTORY_H

#include <stddef.h>

typedef void (*hist_entry_fn)(const char *entry, void *user);

/* Calls fn for each entry of path, oldest first, at most the newest max entries. A missing
 * file is an empty history (0). -1 with a message in err when it cannot be read. */
int hist_load(const char *path, size_t max, hist_entry_fn fn, void *user, char *err,
              size_t errlen);
/* Appends one entry (mode 0600 when created). 0 or -1 with a message in err. */
int hist_append(const char *path, const char *entry, char *err, size_t errlen);
/* Rewrites path keeping only its newest max entries (atomically, through a temp file). */
int hist_trim(const char *path, size_t max, char *err, size_t errlen);

/* The escaped form of entry (malloc'd) and back; NULL when out of memory. */
char *hist_escape(const char *entry);
char *hist_unescape(const char *line);

#endif
