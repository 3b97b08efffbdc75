/* export_file.c: a transcript written to a file (export_file.h): the folder's default name, and
 * a temporary file beside the target renamed over it once the whole transcript is written. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "app/export_file.h"

static const char *extension(export_format f)
{
    return f == EXPORT_JSON ? "json" : f == EXPORT_HTML ? "html" : "md";
}

int export_file_path(const char *path, int64_t id, export_format f, char *out, size_t cap)
{
    struct stat st;
    int n;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
        size_t len = strlen(path);
        const char *sep = len && path[len - 1] == '/' ? "" : "/";
        if (id > 0)
            n = snprintf(out, cap, "%s%sglmchat-%lld.%s", path, sep, (long long)id, extension(f));
        else
            n = snprintf(out, cap, "%s%sglmchat-all.%s", path, sep, extension(f));
    } else {
        n = snprintf(out, cap, "%s", path);
    }
    return n < 0 || (size_t)n >= cap ? -1 : 0;
}

int export_file_write(db_store *db, int64_t id, export_format f, const char *file, int *replaced,
                      char *err, size_t errlen)
{
    struct stat st;
    if (replaced)
        *replaced = stat(file, &st) == 0;
    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s.tmp-XXXXXX", file) >= (int)sizeof tmp) {
        snprintf(err, errlen, "the file name %s is too long", file);
        return -1;
    }
    int fd = mkstemp(tmp); /* mode 0600: transcripts may hold secrets */
    if (fd < 0) {
        snprintf(err, errlen, "cannot write %s: %s; check the folder", file, strerror(errno));
        return -1;
    }
    FILE *out = fdopen(fd, "w");
    if (!out) {
        snprintf(err, errlen, "cannot write %s: %s", file, strerror(errno));
        close(fd);
        unlink(tmp);
        return -1;
    }
    int failed = export_write(db, id, f, out) != 0;
    int closed = fclose(out);
    if (failed || closed != 0) {
        snprintf(err, errlen, "%s", failed ? db_errmsg(db) : "writing the export failed; check the disk");
        unlink(tmp);
        return -1;
    }
    if (rename(tmp, file) != 0) {
        snprintf(err, errlen, "cannot write %s: %s", file, strerror(errno));
        unlink(tmp);
        return -1;
    }
    return 0;
}
