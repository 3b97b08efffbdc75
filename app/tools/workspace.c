/* workspace.c: confines the built-in tools' paths to one directory tree (rules in
 * workspace.h), resolving links with realpath so none leads outside. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "app/tools/workspace.h"

int workspace_open(workspace *w, const char *dir, char *err, size_t errlen)
{
    char *real = realpath(dir ? dir : ".", NULL);
    if (!real) {
        snprintf(err, errlen, "the workspace %s cannot be used: %s", dir ? dir : ".", strerror(errno));
        return -1;
    }
    struct stat st;
    if (stat(real, &st) != 0 || !S_ISDIR(st.st_mode)) {
        snprintf(err, errlen, "the workspace %s is not a directory", real);
        free(real);
        return -1;
    }
    if (strlen(real) >= sizeof w->root) {
        snprintf(err, errlen, "the workspace path is too long");
        free(real);
        return -1;
    }
    strcpy(w->root, real);
    free(real);
    return 0;
}

static int inside(const workspace *w, const char *real)
{
    size_t n = strlen(w->root);
    if (strcmp(w->root, "/") == 0)
        return real[0] == '/';
    return strncmp(real, w->root, n) == 0 && (real[n] == 0 || real[n] == '/');
}

/* Whether the deepest ancestor of path that resolves lies inside the root. A path that does
 * not resolve is answered "outside" when this is 0, so that the answer for a missing name out
 * there is the same as for an existing one and tells nothing about what exists outside. */
static int ancestor_inside(const workspace *w, const char *path)
{
    char up[PATH_MAX];
    snprintf(up, sizeof up, "%s", path);
    for (;;) {
        size_t n = strlen(up);
        while (n > 1 && up[n - 1] == '/')
            up[--n] = 0;
        char *slash = strrchr(up, '/');
        if (!slash)
            return 0;
        slash[slash == up ? 1 : 0] = 0;
        char *real = realpath(up, NULL);
        if (real) {
            int ok = inside(w, real);
            free(real);
            return ok;
        }
        if (strcmp(up, "/") == 0)
            return 0;
    }
}

static void say_outside(const workspace *w, const char *path, char *err, size_t errlen)
{
    snprintf(err, errlen, "%s is outside the workspace %s; tools may only use paths inside it", path, w->root);
}

/* root + "/" + path, or path when absolute. */
static int join(const workspace *w, const char *path, char *out, size_t outlen, char *err, size_t errlen)
{
    if (!path || !*path)
        path = ".";
    int n = path[0] == '/' ? snprintf(out, outlen, "%s", path) : snprintf(out, outlen, "%s/%s", w->root, path);
    if (n < 0 || (size_t)n >= outlen) {
        snprintf(err, errlen, "the path is too long");
        return -1;
    }
    return 0;
}

int workspace_resolve(const workspace *w, const char *path, char *out, size_t outlen, char *err,
                      size_t errlen)
{
    char joined[PATH_MAX];
    if (join(w, path, joined, sizeof joined, err, errlen))
        return -1;
    char *real = realpath(joined, NULL);
    if (!real) {
        int e = errno;
        if (!ancestor_inside(w, joined)) {
            say_outside(w, path, err, errlen);
            return WORKSPACE_OUTSIDE;
        }
        snprintf(err, errlen, "%s: %s", path && *path ? path : ".", strerror(e));
        return -1;
    }
    int ok = inside(w, real);
    if (ok && strlen(real) >= outlen)
        ok = -1;
    if (ok == 1)
        strcpy(out, real);
    free(real);
    if (ok == -1) {
        snprintf(err, errlen, "the path is too long");
        return -1;
    }
    if (!ok) {
        say_outside(w, path, err, errlen);
        return WORKSPACE_OUTSIDE;
    }
    return 0;
}

int workspace_resolve_new(const workspace *w, const char *path, char *out, size_t outlen, char *err,
                          size_t errlen)
{
    char joined[PATH_MAX];
    if (join(w, path, joined, sizeof joined, err, errlen))
        return -1;
    size_t n = strlen(joined);
    while (n > 1 && joined[n - 1] == '/')
        joined[--n] = 0;
    char *slash = strrchr(joined, '/');
    const char *name = slash + 1;
    if (!*name || strcmp(name, ".") == 0 || strcmp(name, "..") == 0) {
        snprintf(err, errlen, "%s does not name a file", path);
        return -1;
    }
    /* The directory holding the name must be inside before anything about the name is said, so an
     * answer never tells what exists outside. */
    char parent[PATH_MAX];
    size_t pn = (size_t)(slash - joined);
    memcpy(parent, joined, pn ? pn : 1);
    parent[pn ? pn : 1] = 0;
    char *real = realpath(parent, NULL);
    if (!real) {
        int e = errno;
        if (!ancestor_inside(w, parent)) {
            say_outside(w, path, err, errlen);
            return WORKSPACE_OUTSIDE;
        }
        snprintf(err, errlen, "the directory of %s: %s", path, strerror(e));
        return -1;
    }
    int ok = inside(w, real);
    int len = ok ? snprintf(out, outlen, "%s/%s", strcmp(real, "/") == 0 ? "" : real, name) : 0;
    free(real);
    if (!ok) {
        say_outside(w, path, err, errlen);
        return WORKSPACE_OUTSIDE;
    }
    struct stat st;
    if (lstat(joined, &st) == 0) {
        if (S_ISDIR(st.st_mode)) {
            snprintf(err, errlen, "%s is a directory", path);
            return -1;
        }
        if (S_ISLNK(st.st_mode)) /* replacing a link writes where it points: check there */
            return workspace_resolve(w, path, out, outlen, err, errlen);
    }
    if (len < 0 || (size_t)len >= outlen) {
        snprintf(err, errlen, "the path is too long");
        return -1;
    }
    return 0;
}

const char *workspace_relative(const workspace *w, const char *full)
{
    size_t n = strlen(w->root);
    if (strcmp(w->root, "/") == 0)
        return full[1] ? full + 1 : ".";
    if (strncmp(full, w->root, n) != 0)
        return full;
    if (full[n] == 0)
        return ".";
    return full[n] == '/' ? full + n + 1 : full;
}
