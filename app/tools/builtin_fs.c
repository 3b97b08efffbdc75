/* builtin_fs.c: the file tools: read_file, list_directory, search_files, write_file, each
 * confined to the workspace and bounded in size (limits in builtin.h). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "app/tools/builtin.h"

static int path_error(tool_result *out, const char *msg)
{
    return tool_result_set(out, 1, "error: %s", msg);
}

/* Length of the longest prefix of s[0..n) that does not end inside a UTF-8 sequence. */
static size_t utf8_whole(const char *s, size_t n)
{
    size_t i = n;
    size_t back = 0;
    while (i > 0 && back < 4 && ((unsigned char)s[i - 1] & 0xC0) == 0x80) {
        i--;
        back++;
    }
    if (i == 0)
        return n;
    unsigned char lead = (unsigned char)s[i - 1];
    size_t need = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
    return back + 1 >= need ? n : i - 1;
}

/* Finishes a memstream into a result. */
static int stream_result(FILE *f, char **buf, int is_error, tool_result *out)
{
    if (fclose(f) != 0) {
        free(*buf);
        return -1;
    }
    tool_result_take(out, is_error, *buf);
    return 0;
}

/* ---- read_file --------------------------------------------------------------------------- */

int builtin_read_file(void *vctx, const cJSON *args, const volatile sig_atomic_t *cancel, tool_result *out)
{
    (void)cancel;
    builtin_ctx *ctx = vctx;
    const char *path = tool_arg_string(args, "path", 1, out);
    if (!path)
        return 0;
    long long offset, max_bytes;
    if (tool_arg_int(args, "offset", 0, 0, (long long)1 << 50, &offset, out) ||
        tool_arg_int(args, "max_bytes", BUILTIN_READ_MAX, 1, BUILTIN_READ_MAX, &max_bytes, out))
        return 0;
    char full[PATH_MAX], err[PATH_MAX + 200];
    if (workspace_resolve(&ctx->ws, path, full, sizeof full, err, sizeof err))
        return path_error(out, err);
    int fd = open(full, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0)
        return tool_result_set(out, 1, "error: cannot open %s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        if (S_ISDIR(st.st_mode))
            return tool_result_set(out, 1, "error: %s is a directory; use list_directory", path);
        return tool_result_set(out, 1, "error: %s is not a regular file", path);
    }
    char *buf = malloc((size_t)max_bytes + 1);
    if (!buf) {
        close(fd);
        return -1;
    }
    size_t got = 0;
    while (got < (size_t)max_bytes) {
        ssize_t n = pread(fd, buf + got, (size_t)max_bytes - got, (off_t)offset + (off_t)got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            int e = errno;
            close(fd);
            free(buf);
            return tool_result_set(out, 1, "error: cannot read %s: %s", path, strerror(e));
        }
        if (n == 0)
            break;
        got += (size_t)n;
    }
    close(fd);
    if (memchr(buf, 0, got)) {
        free(buf);
        return tool_result_set(out, 1, "error: %s is a binary file (%lld bytes); it is not shown", path,
                               (long long)st.st_size);
    }
    long long end = offset + (long long)got;
    if (end < (long long)st.st_size) {
        got = utf8_whole(buf, got);
        end = offset + (long long)got;
    }
    buf[got] = 0;
    if (end >= (long long)st.st_size && offset == 0) {
        tool_result_take(out, 0, buf);
        return 0;
    }
    int r = tool_result_set(out, 0, "%s\n[read_file: bytes %lld-%lld of %lld%s]", buf, offset, end,
                            (long long)st.st_size,
                            end < (long long)st.st_size ? "; call again with a larger offset for more" : "");
    free(buf);
    return r;
}

/* ---- list_directory --------------------------------------------------------------------- */

int builtin_list_directory(void *vctx, const cJSON *args, const volatile sig_atomic_t *cancel,
                           tool_result *out)
{
    (void)cancel;
    builtin_ctx *ctx = vctx;
    const char *path = tool_arg_string(args, "path", 0, out);
    if (!path && out->text)
        return 0;
    if (!path)
        path = ".";
    char full[PATH_MAX], err[PATH_MAX + 200];
    if (workspace_resolve(&ctx->ws, path, full, sizeof full, err, sizeof err))
        return path_error(out, err);
    struct dirent **names = NULL;
    int n = scandir(full, &names, NULL, alphasort);
    if (n < 0)
        return tool_result_set(out, 1, "error: cannot list %s: %s", path, strerror(errno));
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) {
        for (int i = 0; i < n; i++)
            free(names[i]);
        free(names);
        return -1;
    }
    int shown = 0, total = 0;
    for (int i = 0; i < n; i++) {
        const char *nm = names[i]->d_name;
        if (strcmp(nm, ".") == 0 || strcmp(nm, "..") == 0)
            continue;
        total++;
        if (shown >= BUILTIN_LIST_MAX)
            continue;
        shown++;
        char entry[PATH_MAX];
        struct stat st;
        int w = snprintf(entry, sizeof entry, "%s/%s", full, nm);
        if (w < 0 || (size_t)w >= sizeof entry || lstat(entry, &st) != 0)
            fprintf(f, "%s\n", nm);
        else if (S_ISDIR(st.st_mode))
            fprintf(f, "%s/\n", nm);
        else if (S_ISLNK(st.st_mode))
            fprintf(f, "%s@\n", nm);
        else
            fprintf(f, "%s  %lld bytes\n", nm, (long long)st.st_size);
    }
    for (int i = 0; i < n; i++)
        free(names[i]);
    free(names);
    if (total == 0)
        fprintf(f, "(%s is empty)\n", path);
    else if (shown < total)
        fprintf(f, "[list_directory: %d of %d entries shown]\n", shown, total);
    return stream_result(f, &buf, 0, out);
}

/* ---- search_files ------------------------------------------------------------------------- */

typedef struct search {
    regex_t re;
    const workspace *ws;
    FILE *out;
    int matches, max_matches, files, skipped_large;
    const volatile sig_atomic_t *cancel;
} search;

static void search_file(search *s, const char *full, off_t size)
{
    if (size > BUILTIN_SEARCH_FILE_MAX) {
        s->skipped_large++;
        return;
    }
    int fd = open(full, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0)
        return;
    char *buf = malloc((size_t)size + 1);
    size_t got = 0;
    while (buf && got < (size_t)size) {
        ssize_t n = read(fd, buf + got, (size_t)size - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    close(fd);
    if (!buf)
        return;
    buf[got] = 0;
    s->files++;
    if (memchr(buf, 0, got < 8192 ? got : 8192)) { /* binary */
        free(buf);
        return;
    }
    int lineno = 0;
    for (char *line = buf; line && *line && s->matches < s->max_matches;) {
        lineno++;
        char *nl = strchr(line, '\n');
        if (nl)
            *nl = 0;
        if (regexec(&s->re, line, 0, NULL, 0) == 0) {
            size_t ll = strlen(line);
            size_t show = ll > 240 ? utf8_whole(line, 240) : ll;
            fprintf(s->out, "%s:%d: %.*s%s\n", workspace_relative(s->ws, full), lineno, (int)show, line,
                    show < ll ? " ..." : "");
            s->matches++;
        }
        line = nl ? nl + 1 : NULL;
    }
    free(buf);
}

static void search_dir(search *s, const char *dir, int depth)
{
    if (depth > 64)
        return;
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d)) && s->matches < s->max_matches && s->files < BUILTIN_SEARCH_FILES_MAX) {
        if (s->cancel && *s->cancel)
            break;
        const char *nm = e->d_name;
        if (strcmp(nm, ".") == 0 || strcmp(nm, "..") == 0 || strcmp(nm, ".git") == 0)
            continue;
        char full[PATH_MAX];
        int w = snprintf(full, sizeof full, "%s/%s", dir, nm);
        struct stat st;
        if (w < 0 || (size_t)w >= sizeof full || lstat(full, &st) != 0)
            continue;
        if (S_ISDIR(st.st_mode))
            search_dir(s, full, depth + 1);
        else if (S_ISREG(st.st_mode))
            search_file(s, full, st.st_size);
    }
    closedir(d);
}

int builtin_search_files(void *vctx, const cJSON *args, const volatile sig_atomic_t *cancel,
                         tool_result *out)
{
    builtin_ctx *ctx = vctx;
    const char *pattern = tool_arg_string(args, "pattern", 1, out);
    if (!pattern)
        return 0;
    const char *path = tool_arg_string(args, "path", 0, out);
    if (!path && out->text)
        return 0;
    if (!path)
        path = ".";
    long long max_results;
    if (tool_arg_int(args, "max_results", 100, 1, BUILTIN_SEARCH_MAX, &max_results, out))
        return 0;
    const cJSON *ci = cJSON_GetObjectItemCaseSensitive(args, "ignore_case");
    int flags = REG_EXTENDED | REG_NOSUB | (cJSON_IsTrue(ci) ? REG_ICASE : 0);
    search s = {.ws = &ctx->ws, .max_matches = (int)max_results, .cancel = cancel};
    int rc = regcomp(&s.re, pattern, flags);
    if (rc != 0) {
        char why[200];
        regerror(rc, &s.re, why, sizeof why);
        return tool_result_set(out, 1, "error: the pattern is not a POSIX extended regular expression: %s",
                               why);
    }
    char full[PATH_MAX], err[PATH_MAX + 200];
    if (workspace_resolve(&ctx->ws, path, full, sizeof full, err, sizeof err)) {
        regfree(&s.re);
        return path_error(out, err);
    }
    char *buf = NULL;
    size_t len = 0;
    s.out = open_memstream(&buf, &len);
    if (!s.out) {
        regfree(&s.re);
        return -1;
    }
    struct stat st;
    if (stat(full, &st) == 0 && S_ISREG(st.st_mode))
        search_file(&s, full, st.st_size);
    else
        search_dir(&s, full, 0);
    regfree(&s.re);
    if (s.matches == 0)
        fprintf(s.out, "no lines match /%s/ in %s (%d files searched)\n", pattern, path, s.files);
    else if (s.matches >= s.max_matches)
        fprintf(s.out, "[search_files: stopped at %d matches; narrow the pattern or the path]\n", s.matches);
    if (s.skipped_large)
        fprintf(s.out, "[search_files: %d files over %d bytes were skipped]\n", s.skipped_large,
                BUILTIN_SEARCH_FILE_MAX);
    if (s.files >= BUILTIN_SEARCH_FILES_MAX)
        fprintf(s.out, "[search_files: stopped after %d files]\n", s.files);
    return stream_result(s.out, &buf, 0, out);
}

/* ---- write_file ----------------------------------------------------------------------------- */

static int write_all(int fd, const char *p, size_t n)
{
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

int builtin_write_file(void *vctx, const cJSON *args, const volatile sig_atomic_t *cancel, tool_result *out)
{
    (void)cancel;
    builtin_ctx *ctx = vctx;
    const char *path = tool_arg_string(args, "path", 1, out);
    if (!path)
        return 0;
    const char *content = tool_arg_string(args, "content", 1, out);
    if (!content)
        return 0;
    size_t n = strlen(content);
    if (n > BUILTIN_WRITE_MAX)
        return tool_result_set(out, 1, "error: the content is %zu bytes; write_file takes at most %d", n,
                               BUILTIN_WRITE_MAX);
    char full[PATH_MAX], err[PATH_MAX + 200];
    if (workspace_resolve_new(&ctx->ws, path, full, sizeof full, err, sizeof err))
        return path_error(out, err);
    char tmp[PATH_MAX + 32];
    char *slash = strrchr(full, '/');
    snprintf(tmp, sizeof tmp, "%.*s/.%s.glmchat-XXXXXX", (int)(slash - full), full, slash + 1);
    int fd = mkstemp(tmp);
    if (fd < 0)
        return tool_result_set(out, 1, "error: cannot create a file beside %s: %s", path, strerror(errno));
    struct stat st;
    mode_t mode = 0644;
    if (stat(full, &st) == 0)
        mode = st.st_mode & 07777;
    int ok = write_all(fd, content, n) == 0 && fchmod(fd, mode) == 0 && fsync(fd) == 0;
    int e = errno;
    ok = close(fd) == 0 && ok;
    if (!ok || rename(tmp, full) != 0) {
        e = ok ? errno : e;
        unlink(tmp);
        return tool_result_set(out, 1, "error: cannot write %s: %s", path, strerror(e));
    }
    return tool_result_set(out, 0, "wrote %zu bytes to %s", n, workspace_relative(&ctx->ws, full));
}
