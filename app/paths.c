/* paths.c: resolves glmchat's config, data, state and cache locations (XDG base directories)
 * and creates directories on demand. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "app/paths.h"

static int xdg_dir(char *out, size_t n, const char *var, const char *fallback, char *err, size_t errlen)
{
    const char *v = getenv(var);
    int len;
    if (v && v[0] == '/') {
        len = snprintf(out, n, "%s/glmchat", v);
    } else {
        const char *home = getenv("HOME");
        if (!home || home[0] != '/') {
            snprintf(err, errlen, "neither $%s nor $HOME is an absolute path; set one of them", var);
            return -1;
        }
        len = snprintf(out, n, "%s/%s/glmchat", home, fallback);
    }
    if (len < 0 || (size_t)len >= n) {
        snprintf(err, errlen, "the path from $%s is too long", var);
        return -1;
    }
    return 0;
}

int paths_resolve(glm_paths *p, const cli_globals *g, char *err, size_t errlen)
{
    char config_dir[4096];
    if (xdg_dir(config_dir, sizeof config_dir, "XDG_CONFIG_HOME", ".config", err, errlen) ||
        xdg_dir(p->data_dir, sizeof p->data_dir, "XDG_DATA_HOME", ".local/share", err, errlen) ||
        xdg_dir(p->state_dir, sizeof p->state_dir, "XDG_STATE_HOME", ".local/state", err, errlen) ||
        xdg_dir(p->cache_dir, sizeof p->cache_dir, "XDG_CACHE_HOME", ".cache", err, errlen))
        return -1;
    int len = snprintf(p->config_file, sizeof p->config_file, "%s/config", config_dir);
    const char *db = g && g->db_path ? g->db_path : getenv("GLMCHAT_DB");
    int dlen = db && db[0] ? snprintf(p->db_file, sizeof p->db_file, "%s", db)
                           : snprintf(p->db_file, sizeof p->db_file, "%s/glmchat.db", p->data_dir);
    if (len < 0 || (size_t)len >= sizeof p->config_file || dlen < 0 || (size_t)dlen >= sizeof p->db_file) {
        snprintf(err, errlen, "a configured path is too long");
        return -1;
    }
    return 0;
}

int paths_mkdirs(const char *dir)
{
    char buf[4096];
    size_t n = strlen(dir);
    if (n == 0 || n >= sizeof buf) {
        errno = ENAMETOOLONG;
        return -1;
    }
    memcpy(buf, dir, n + 1);
    for (char *s = buf + 1; *s; s++) {
        if (*s != '/')
            continue;
        *s = '\0';
        if (mkdir(buf, 0700) != 0 && errno != EEXIST)
            return -1;
        *s = '/';
    }
    if (mkdir(buf, 0700) != 0 && errno != EEXIST)
        return -1;
    return 0;
}
