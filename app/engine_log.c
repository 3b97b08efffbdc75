/* engine_log.c: the application's end of the engine's log callback: one line per message, on
 * stderr or in a file (the TUI's log), never onto a screen ncurses draws. */
#include "app/engine_log.h"

#include <errno.h>
#include <string.h>
#include <time.h>

void app_log_init(app_log *l)
{
    l->file = NULL;
    l->own_file = 0;
}

int app_log_to_file(app_log *l, const char *path, char *err, size_t errlen)
{
    FILE *f = fopen(path, "a");
    if (!f) {
        snprintf(err, errlen, "cannot open the log file %s: %s", path, strerror(errno));
        return -1;
    }
    setvbuf(f, NULL, _IOLBF, 0);
    app_log_close(l);
    l->file = f;
    l->own_file = 1;
    return 0;
}

void app_log_close(app_log *l)
{
    if (l->own_file && l->file)
        fclose(l->file);
    app_log_init(l);
}

void app_log_engine(void *user, int level, const char *msg)
{
    app_log *l = user;
    /* the level is in the words already ("cannot", "refused"); the lines read as before */
    (void)level;
    if (!l || !l->file) {
        fprintf(stderr, "glmchat: %s\n", msg);
        return;
    }
    char stamp[32] = "";
    time_t now = time(NULL);
    struct tm tm;
    if (localtime_r(&now, &tm))
        strftime(stamp, sizeof stamp, "%Y-%m-%d %H:%M:%S ", &tm);
    fprintf(l->file, "%s%s\n", stamp, msg);
}
