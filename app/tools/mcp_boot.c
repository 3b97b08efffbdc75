/* mcp_boot.c: starts the configured MCP servers one after another and reports each step as it
 * happens (mcp_boot.h), so a server that hangs or crashes at start is seen at once. */
#include "app/tools/mcp_boot.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app/paths.h"
#include "app/tools/mcp.h"

struct mcp_boot {
    const app_config *cfg;
    char *state_dir;
    tool_registry *reg;
    mcp_client **clients;
    int n_clients;
    volatile sig_atomic_t cancel;
    mcp_boot_report_fn report;
    void *user;
    pthread_t thread;
    int thread_live; /* a thread was started and not yet joined */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int done;        /* the start has finished (under mu; cv is signalled) */
};

mcp_boot *mcp_boot_new(const app_config *cfg, const char *state_dir, tool_registry *reg)
{
    mcp_boot *b = calloc(1, sizeof *b);
    if (!b)
        return NULL;
    b->cfg = cfg;
    b->reg = reg;
    b->state_dir = strdup(state_dir);
    b->clients = calloc((size_t)(cfg->n_mcp ? cfg->n_mcp : 1), sizeof *b->clients);
    if (!b->state_dir || !b->clients) {
        free(b->state_dir);
        free(b->clients);
        free(b);
        return NULL;
    }
    pthread_mutex_init(&b->mu, NULL);
    pthread_cond_init(&b->cv, NULL);
    return b;
}

int mcp_boot_count(const mcp_boot *b)
{
    int n = 0;
    for (int i = 0; i < b->cfg->n_mcp; i++)
        n += b->cfg->mcp[i].enabled != 0;
    return n;
}

int mcp_boot_pending_tool(mcp_boot *b, const char *name)
{
    if (!b || mcp_boot_done(b))
        return 0;
    for (int i = 0; i < b->cfg->n_mcp; i++) {
        const config_mcp_server *s = &b->cfg->mcp[i];
        size_t n = strlen(s->name);
        if (s->enabled && strncmp(name, s->name, n) == 0 && strncmp(name + n, "__", 2) == 0 && name[n + 2])
            return 1;
    }
    return 0;
}

static void say(mcp_boot *b, int failed, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void say(mcp_boot *b, int failed, const char *fmt, ...)
{
    char text[3072];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    if (b->report)
        b->report(b->user, failed, text);
}

static void start_one(mcp_boot *b, const config_mcp_server *s)
{
    char log[PATH_MAX + 64], err[2048];
    int w = snprintf(log, sizeof log, "%s/mcp-%s.log", b->state_dir, s->name);
    if (w < 0 || (size_t)w >= sizeof log) {
        say(b, 1, "the MCP server '%s' is not started: the state directory path is too long for "
                  "its log", s->name);
        return;
    }
    int timeout_s = s->timeout_s > 0 ? s->timeout_s : 30;
    const char *prog = s->argv && s->argv[0] ? s->argv[0] : "?";
    const char *base = strrchr(prog, '/');
    say(b, 0, "MCP server '%s': starting %s (gives up after %d s)", s->name, base ? base + 1 : prog,
        timeout_s);
    mcp_client *m = mcp_start_cancelable(s, log, &b->cancel, err, sizeof err);
    if (!m) {
        if (!b->cancel)
            say(b, 1, "%s; its tools are not offered (its log: %s)", err, log);
        return;
    }
    b->clients[b->n_clients++] = m;
    int skipped = mcp_register_tools(m, b->reg, s->trusted, err, sizeof err);
    if (skipped != 0)
        say(b, 1, "%s", skipped < 0 ? "out of memory registering MCP tools" : err);
    int n = mcp_tool_count(m) - (skipped > 0 ? skipped : 0);
    say(b, 0, "MCP server '%s': ready, %d tool%s", s->name, n, n == 1 ? "" : "s");
}

static void set_done(mcp_boot *b)
{
    pthread_mutex_lock(&b->mu);
    b->done = 1;
    pthread_cond_broadcast(&b->cv);
    pthread_mutex_unlock(&b->mu);
}

void mcp_boot_run(mcp_boot *b, mcp_boot_report_fn report, void *user)
{
    b->report = report;
    b->user = user;
    if (mcp_boot_count(b) > 0 && paths_mkdirs(b->state_dir) != 0)
        say(b, 1, "cannot create %s for MCP server logs: %s", b->state_dir, strerror(errno));
    for (int i = 0; i < b->cfg->n_mcp && !b->cancel; i++)
        if (b->cfg->mcp[i].enabled)
            start_one(b, &b->cfg->mcp[i]);
    set_done(b);
}

static void *boot_thread(void *arg)
{
    mcp_boot *b = arg;
    mcp_boot_run(b, b->report, b->user);
    return NULL;
}

int mcp_boot_start(mcp_boot *b, mcp_boot_report_fn report, void *user)
{
    b->report = report;
    b->user = user;
    if (pthread_create(&b->thread, NULL, boot_thread, b) != 0) {
        say(b, 1, "cannot start a thread for the MCP servers; their tools are not offered");
        set_done(b);
        return -1;
    }
    b->thread_live = 1;
    return 0;
}

int mcp_boot_done(mcp_boot *b)
{
    pthread_mutex_lock(&b->mu);
    int done = b->done;
    pthread_mutex_unlock(&b->mu);
    return done;
}

void mcp_boot_wait(mcp_boot *b)
{
    pthread_mutex_lock(&b->mu);
    while (b->thread_live && !b->done)
        pthread_cond_wait(&b->cv, &b->mu);
    pthread_mutex_unlock(&b->mu);
}

void mcp_boot_cancel(mcp_boot *b)
{
    b->cancel = 1;
    if (b->thread_live) {
        pthread_join(b->thread, NULL);
        b->thread_live = 0;
    }
    b->report = NULL;
}

void mcp_boot_free(mcp_boot *b)
{
    if (!b)
        return;
    mcp_boot_cancel(b);
    for (int i = 0; i < b->n_clients; i++)
        mcp_stop(b->clients[i]);
    free(b->clients);
    free(b->state_dir);
    pthread_mutex_destroy(&b->mu);
    pthread_cond_destroy(&b->cv);
    free(b);
}
