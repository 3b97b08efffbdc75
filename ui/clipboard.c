/* clipboard.c: OSC 52 and the copy file for the TUI's copy keys and /copy (clipboard.h).
 * No terminal library: the sequence is written to the terminal's fd between frames. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ui/clipboard.h"

static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

char *clip_osc52(const char *text, size_t len, size_t *olen)
{
    static const char head[] = "\033]52;c;";
    size_t hl = sizeof head - 1;
    char *o = malloc(hl + (len + 2) / 3 * 4 + 2);
    if (!o)
        return NULL;
    memcpy(o, head, hl);
    size_t k = hl;
    const unsigned char *s = (const unsigned char *)text;
    for (size_t i = 0; i < len; i += 3) {
        unsigned v = (unsigned)s[i] << 16;
        if (i + 1 < len)
            v |= (unsigned)s[i + 1] << 8;
        if (i + 2 < len)
            v |= s[i + 2];
        o[k++] = b64[(v >> 18) & 63];
        o[k++] = b64[(v >> 12) & 63];
        o[k++] = i + 1 < len ? b64[(v >> 6) & 63] : '=';
        o[k++] = i + 2 < len ? b64[v & 63] : '=';
    }
    o[k++] = '\a';
    o[k] = '\0';
    *olen = k;
    return o;
}

static int write_all(int fd, const char *s, size_t n)
{
    size_t off = 0;
    while (off < n) {
        ssize_t w = write(fd, s + off, n - off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        off += (size_t)w;
    }
    return 0;
}

/* path with $HOME shown as ~, for a status line that has little room. */
static void short_path(const char *path, char *out, size_t cap)
{
    const char *home = getenv("HOME");
    size_t hl = home ? strlen(home) : 0;
    if (hl > 1 && strncmp(path, home, hl) == 0 && path[hl] == '/')
        snprintf(out, cap, "~%s", path + hl);
    else
        snprintf(out, cap, "%s", path);
}

static int write_file(const char *path, const char *text, size_t len, char *why, size_t cap)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) {
        snprintf(why, cap, "%s", strerror(errno));
        return -1;
    }
    int rc = fchmod(fd, 0600) == 0 && write_all(fd, text, len) == 0 ? 0 : -1;
    if (rc < 0)
        snprintf(why, cap, "%s", strerror(errno));
    if (close(fd) != 0 && rc == 0) {
        snprintf(why, cap, "%s", strerror(errno));
        rc = -1;
    }
    return rc;
}

int clip_copy(int fd, const char *path, const char *text, size_t len, char *how, size_t howlen)
{
    size_t olen;
    char *seq = clip_osc52(text, len, &olen);
    int osc_ok = seq && write_all(fd, seq, olen) == 0;
    const char *osc_why = seq ? strerror(errno) : "out of memory";
    char osc[160];
    if (osc_ok)
        snprintf(osc, sizeof osc, "OSC 52");
    else
        snprintf(osc, sizeof osc, "OSC 52 not sent (%s)", osc_why);
    free(seq);
    if (!path) {
        snprintf(how, howlen, "%s", osc);
        return osc_ok ? 0 : -1;
    }
    char shown[512], why[256];
    short_path(path, shown, sizeof shown);
    int file_ok = write_file(path, text, len, why, sizeof why) == 0;
    if (file_ok)
        snprintf(how, howlen, "%s + %s", osc, shown);
    else
        snprintf(how, howlen, "%s; %s not written: %s", osc, shown, why);
    return osc_ok && file_ok ? 0 : -1;
}
