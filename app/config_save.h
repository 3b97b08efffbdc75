/* config_save.h: rewrites one top-level `key = value` line of the config file in place (the
 * rest kept byte for byte), for settings glmchat changes itself, such as always_allow. */
#ifndef GLMCHAT_APP_CONFIG_SAVE_H
#define GLMCHAT_APP_CONFIG_SAVE_H

#include <stddef.h>

/* Sets key to value in the file at path: the top-level lines of key (before the first
 * [section]) are replaced by one `key = value` line where the first stood, or one is added
 * before the first section. A missing file (and its directory) is created with mode 0600.
 * The new text goes to a temporary file beside it, synced, then renamed over it. value must
 * be a bare value (no newline, no leading or trailing blank). 0, or -1 with err naming the file. */
int config_save_top_key(const char *path, const char *key, const char *value, char *err, size_t errlen);

#endif
