/* paths.h: where glmchat keeps its files, after the XDG base-directory rules.
 * An unset, empty or relative XDG variable means its default under $HOME. */
#ifndef GLMCHAT_APP_PATHS_H
#define GLMCHAT_APP_PATHS_H

#include <stddef.h>

#include "app/cli.h"

typedef struct glm_paths {
    char config_file[4096];  /* $XDG_CONFIG_HOME/glmchat/config */
    char data_dir[4096];     /* $XDG_DATA_HOME/glmchat */
    char db_file[4096];      /* --db, else $GLMCHAT_DB, else data_dir/glmchat.db */
    char state_dir[4096];    /* $XDG_STATE_HOME/glmchat: input history, logs */
    char cache_dir[4096];    /* $XDG_CACHE_HOME/glmchat: kept prompt states */
} glm_paths;

/* Fills p from the environment and g. Returns 0, or -1 with a message in err when neither
 * HOME nor the XDG variables give a place, or a path would not fit. */
int paths_resolve(glm_paths *p, const cli_globals *g, char *err, size_t errlen);

/* Creates dir and its parents with mode 0700 where missing. 0 or -1 with errno set. */
int paths_mkdirs(const char *dir);

#endif
