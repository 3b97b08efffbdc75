/* workspace.h: the directory the built-in tools are confined to, and the check that a path the
 * model gives stays inside it after symbolic links are followed.
 *
 * Rules: a relative path is taken from the workspace root; an absolute one must lie inside it;
 * every existing component is resolved (realpath), so a link pointing outside is refused; for a
 * file that does not exist yet its parent directory must exist inside the root. */
#ifndef GLMCHAT_APP_TOOLS_WORKSPACE_H
#define GLMCHAT_APP_TOOLS_WORKSPACE_H

#include <limits.h>
#include <stddef.h>

typedef struct workspace {
    char root[PATH_MAX]; /* resolved, no trailing '/' (except "/" itself) */
} workspace;

/* Resolves dir (NULL: the current directory). 0, or -1 with err. */
int workspace_open(workspace *w, const char *dir, char *err, size_t errlen);

/* What the resolvers return for a path outside the root (err says so); other failures are -1. */
#define WORKSPACE_OUTSIDE (-2)

/* Resolves path for reading: it must exist inside the root. Writes the full path to out. 0, or
 * WORKSPACE_OUTSIDE or -1 with err. */
int workspace_resolve(const workspace *w, const char *path, char *out, size_t outlen, char *err,
                      size_t errlen);

/* Resolves path for creating or replacing a file: its parent must exist inside the root and
 * the name must not be "." or ".."; when the file exists (or is a link) it must resolve inside
 * the root too. */
int workspace_resolve_new(const workspace *w, const char *path, char *out, size_t outlen, char *err,
                          size_t errlen);

/* path relative to the root for display ("." for the root itself). */
const char *workspace_relative(const workspace *w, const char *full);

#endif
