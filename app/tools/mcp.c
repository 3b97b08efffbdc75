/* mcp.c: the MCP stdio client: spawn, JSON-RPC 2.0 requests framed as one JSON object a line,
 * initialize, tools/list (paged), tools/call; timeouts, cancellation and crash reports. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "app/tools/mcp.h"
#include "app/tools/mcp_rpc.h"
#include "app/tools/proc.h"

typedef struct mcp_tool_ctx {
    mcp_client *client;
    char *tool; /* the server's name for it */
} mcp_tool_ctx;

struct mcp_client {
    char *name;
    char *log_path;
    long long log_start; /* the log's size when this run of the server began */
    int pid;
    int to_server;   /* our end of the server's stdin (a socket: writes never raise SIGPIPE) */
    int from_server; /* the server's stdout */
    int timeout_ms;
    long long next_id;
    char *buf;       /* bytes read, not yet a whole line */
    size_t len, cap;
    int dead;        /* 1: exited, killed or broken; why says how */
    char why[1024];
    mcp_tool *tools;
    int n_tools;
    mcp_tool_ctx *ctxs;
    int n_ctxs;
};

static void set_why(mcp_client *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void set_why(mcp_client *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->why, sizeof c->why, fmt, ap);
    va_end(ap);
}

const char *mcp_name(const mcp_client *c)
{
    return c->name;
}

int mcp_tool_count(const mcp_client *c)
{
    return c->n_tools;
}

const mcp_tool *mcp_tool_get(const mcp_client *c, int i)
{
    return i >= 0 && i < c->n_tools ? &c->tools[i] : NULL;
}

/* ---- the process ------------------------------------------------------------------------- */

/* The last line or so of the server's log, for crash messages. */
static void log_tail(const mcp_client *c, char *out, size_t n)
{
    out[0] = 0;
    if (!c->log_path || n < 2)
        return;
    int fd = open(c->log_path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return;
    off_t end = lseek(fd, 0, SEEK_END);
    size_t want = n - 1 < 300 ? n - 1 : 300;
    off_t from = end > (off_t)want ? end - (off_t)want : 0;
    if (from < (off_t)c->log_start)
        from = (off_t)c->log_start; /* only what this run wrote */
    if (end <= from) {
        close(fd);
        return;
    }
    ssize_t got = pread(fd, out, (size_t)(end - from), from);
    close(fd);
    if (got <= 0)
        return;
    out[got] = 0;
    while (got > 0 && (out[got - 1] == '\n' || out[got - 1] == '\r'))
        out[--got] = 0;
    for (char *p = out; *p; p++)
        if (*p == '\n' || *p == '\r' || *p == '\t')
            *p = ' ';
}

static void describe_exit(mcp_client *c, int status)
{
    char tail[320];
    log_tail(c, tail, sizeof tail);
    char how[64];
    if (WIFEXITED(status))
        snprintf(how, sizeof how, "exited with status %d", WEXITSTATUS(status));
    else if (WIFSIGNALED(status))
        snprintf(how, sizeof how, "was killed by signal %d", WTERMSIG(status));
    else
        snprintf(how, sizeof how, "stopped");
    set_why(c, "the MCP server '%s' %s%s%s%s", c->name, how, tail[0] ? "; its last words: \"" : "", tail,
            tail[0] ? "\"" : "");
}

/* Marks the server gone: reaps it, giving it a moment to exit on its own (a server that
 * closed its stdout is usually exiting), then killing its group. */
static void mark_dead(mcp_client *c)
{
    if (c->pid > 0) {
        int status = 0;
        long long end = proc_now_ms() + 500;
        pid_t w;
        while ((w = waitpid(c->pid, &status, WNOHANG)) == 0 && proc_now_ms() < end)
            usleep(2000);
        if (w == 0)
            status = proc_kill_group(c->pid, 500);
        if (!c->dead)
            describe_exit(c, status);
        c->pid = -1;
    }
    c->dead = 1;
}

int mcp_alive(mcp_client *c)
{
    if (c->dead)
        return 0;
    int status;
    if (waitpid(c->pid, &status, WNOHANG) == c->pid) {
        describe_exit(c, status);
        c->pid = -1;
        c->dead = 1;
        return 0;
    }
    return 1;
}

static int spawn(mcp_client *c, const config_mcp_server *cfg, char *err, size_t errlen)
{
    int sv[2], out[2], exec_err[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
        snprintf(err, errlen, "cannot make a socket for MCP server '%s': %s", c->name, strerror(errno));
        return -1;
    }
    if (pipe2(out, O_CLOEXEC) != 0) {
        snprintf(err, errlen, "cannot make a pipe for MCP server '%s': %s", c->name, strerror(errno));
        close(sv[0]);
        close(sv[1]);
        return -1;
    }
    if (pipe2(exec_err, O_CLOEXEC) != 0) {
        snprintf(err, errlen, "cannot make a pipe for MCP server '%s': %s", c->name, strerror(errno));
        close(sv[0]), close(sv[1]), close(out[0]), close(out[1]);
        return -1;
    }
    struct stat st;
    c->log_start = c->log_path && stat(c->log_path, &st) == 0 ? (long long)st.st_size : 0;
    pid_t pid = fork();
    if (pid < 0) {
        snprintf(err, errlen, "cannot start MCP server '%s': %s", c->name, strerror(errno));
        close(sv[0]), close(sv[1]), close(out[0]), close(out[1]), close(exec_err[0]), close(exec_err[1]);
        return -1;
    }
    if (pid == 0) {
        setpgid(0, 0); /* Ctrl-C at the terminal is glmchat's to handle, not the server's */
        signal(SIGPIPE, SIG_DFL);
        signal(SIGINT, SIG_DFL);
        dup2(sv[1], 0);
        dup2(out[1], 1);
        int log_fd = open(c->log_path ? c->log_path : "/dev/null", O_WRONLY | O_CREAT | O_APPEND, 0600);
        if (log_fd >= 0)
            dup2(log_fd, 2);
        for (int i = 0; i < cfg->n_env; i++)
            putenv(cfg->env[i]);
        if (cfg->cwd && chdir(cfg->cwd) != 0) {
            dprintf(exec_err[1], "cannot enter %s: %s", cfg->cwd, strerror(errno));
            _exit(127);
        }
        execvp(cfg->argv[0], cfg->argv);
        dprintf(exec_err[1], "cannot run %s: %s", cfg->argv[0], strerror(errno));
        _exit(127);
    }
    setpgid(pid, pid);
    close(sv[1]);
    close(out[1]);
    close(exec_err[1]);
    char why[512];
    ssize_t n;
    while ((n = read(exec_err[0], why, sizeof why - 1)) < 0 && errno == EINTR) {
    }
    close(exec_err[0]);
    if (n > 0) {
        why[n] = 0;
        snprintf(err, errlen, "MCP server '%s': %s; check 'command' in its [mcp.%s] section", c->name, why,
                 c->name);
        close(sv[0]);
        close(out[0]);
        while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {
        }
        return -1;
    }
    c->pid = pid;
    c->to_server = sv[0];
    c->from_server = out[0];
    return 0;
}

/* ---- framing ------------------------------------------------------------------------------- */

static int send_json(mcp_client *c, cJSON *msg)
{
    char *text = cJSON_PrintUnformatted(msg);
    if (!text) {
        set_why(c, "out of memory");
        return -1;
    }
    size_t n = strlen(text);
    text[n] = '\n'; /* replaces the NUL: one message, one line */
    size_t off = 0;
    while (off < n + 1) {
        ssize_t w = send(c->to_server, text + off, n + 1 - off, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            free(text);
            mark_dead(c);
            return -1;
        }
        off += (size_t)w;
    }
    free(text);
    return 0;
}

/* Reads until a whole line is buffered or the deadline passes. Returns 1 with the line
 * (NUL-terminated, in c->buf, length *line_len), 0 on timeout, -2 when canceled, -1 when
 * the server is gone or broken (c->why says why). */
static int read_line(mcp_client *c, long long deadline, const volatile sig_atomic_t *cancel, size_t *line_len)
{
    for (;;) {
        char *nl = c->len ? memchr(c->buf, '\n', c->len) : NULL;
        if (nl) {
            *nl = 0;
            *line_len = (size_t)(nl - c->buf);
            return 1;
        }
        if (c->len > MCP_MAX_LINE) {
            set_why(c, "the MCP server '%s' wrote a line over %d bytes; it was stopped", c->name, MCP_MAX_LINE);
            c->dead = 1;
            mark_dead(c);
            return -1;
        }
        if (cancel && *cancel)
            return -2;
        long long left = deadline - proc_now_ms();
        if (left <= 0)
            return 0;
        struct pollfd pfd = {.fd = c->from_server, .events = POLLIN};
        int pr = poll(&pfd, 1, left < 100 ? (int)left : 100);
        if (pr < 0 && errno != EINTR) {
            set_why(c, "poll failed: %s", strerror(errno));
            return -1;
        }
        if (pr <= 0)
            continue;
        if (c->cap - c->len < 65536) {
            size_t ncap = c->cap ? c->cap * 2 : 131072;
            char *nb = realloc(c->buf, ncap);
            if (!nb) {
                set_why(c, "out of memory");
                return -1;
            }
            c->buf = nb;
            c->cap = ncap;
        }
        ssize_t n = read(c->from_server, c->buf + c->len, c->cap - c->len - 1);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            mark_dead(c);
            return -1;
        }
        c->len += (size_t)n;
    }
}

static void drop_line(mcp_client *c, size_t line_len)
{
    size_t rest = c->len - line_len - 1;
    memmove(c->buf, c->buf + line_len + 1, rest);
    c->len = rest;
}

static cJSON *new_message(const char *method)
{
    cJSON *m = cJSON_CreateObject();
    if (!m || !cJSON_AddStringToObject(m, "jsonrpc", "2.0") || (method && !cJSON_AddStringToObject(m, "method", method))) {
        cJSON_Delete(m);
        return NULL;
    }
    return m;
}

/* Answers a request the server sent us: ping gets {}, anything else "method not found". */
static void answer_server_request(mcp_client *c, const cJSON *msg)
{
    const cJSON *method = cJSON_GetObjectItemCaseSensitive(msg, "method");
    cJSON *reply = new_message(NULL);
    cJSON *id = cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(msg, "id"), 1);
    if (!reply || !id) {
        cJSON_Delete(reply);
        cJSON_Delete(id);
        return;
    }
    cJSON_AddItemToObject(reply, "id", id);
    if (cJSON_IsString(method) && strcmp(method->valuestring, "ping") == 0) {
        cJSON_AddItemToObject(reply, "result", cJSON_CreateObject());
    } else {
        cJSON *e = cJSON_AddObjectToObject(reply, "error");
        if (e) {
            cJSON_AddNumberToObject(e, "code", -32601);
            cJSON_AddStringToObject(e, "message", "glmchat does not offer this method");
        }
    }
    send_json(c, reply);
    cJSON_Delete(reply);
}

static void send_cancelled(mcp_client *c, long long id, const char *reason)
{
    cJSON *n = new_message("notifications/cancelled");
    cJSON *p = n ? cJSON_AddObjectToObject(n, "params") : NULL;
    if (p) {
        cJSON_AddNumberToObject(p, "requestId", (double)id);
        cJSON_AddStringToObject(p, "reason", reason);
        send_json(c, n);
    }
    cJSON_Delete(n);
}

/* Sends a request and waits for its response. params is consumed. Returns the result object
 * (caller deletes), or NULL with c->why set; *canceled is set when cancel stopped it. */
static cJSON *request(mcp_client *c, const char *method, cJSON *params, int timeout_ms,
                      const volatile sig_atomic_t *cancel, int *canceled)
{
    *canceled = 0;
    if (c->dead || !mcp_alive(c)) {
        cJSON_Delete(params);
        return NULL;
    }
    long long id = ++c->next_id;
    cJSON *msg = new_message(method);
    if (!msg) {
        cJSON_Delete(params);
        set_why(c, "out of memory");
        return NULL;
    }
    cJSON_AddNumberToObject(msg, "id", (double)id);
    if (params)
        cJSON_AddItemToObject(msg, "params", params);
    int sent = send_json(c, msg);
    cJSON_Delete(msg);
    if (sent)
        return NULL;
    long long deadline = proc_now_ms() + timeout_ms;
    for (;;) {
        size_t line_len;
        int r = read_line(c, deadline, cancel, &line_len);
        if (r == 0) {
            send_cancelled(c, id, "timed out");
            set_why(c, "the MCP server '%s' did not answer %s within %d s", c->name, method, timeout_ms / 1000);
            return NULL;
        }
        if (r == -2) {
            send_cancelled(c, id, "canceled by the user");
            *canceled = 1;
            set_why(c, "%s on MCP server '%s' was canceled by the user", method, c->name);
            return NULL;
        }
        if (r < 0)
            return NULL;
        cJSON *m = NULL;
        char why[600];
        mcp_line_kind kind = mcp_classify_line(c->buf, line_len, id, &m, why, sizeof why);
        drop_line(c, line_len);
        switch (kind) {
        case MCP_LINE_BLANK:
        case MCP_LINE_NOTIFICATION:
        case MCP_LINE_OTHER_RESPONSE: /* e.g. the late answer to a request that timed out */
            continue;
        case MCP_LINE_SERVER_REQUEST:
            answer_server_request(c, m);
            cJSON_Delete(m);
            continue;
        case MCP_LINE_NOT_JSONRPC:
            c->dead = 1;
            mark_dead(c);
            set_why(c, "the MCP server '%s' %s; it was stopped (servers must log to stderr)", c->name, why);
            return NULL;
        case MCP_LINE_ERROR:
            set_why(c, "the MCP server '%s' answered %s with %s", c->name, method, why);
            return NULL;
        case MCP_LINE_RESULT:
            return m;
        }
    }
}

/* ---- the protocol ---------------------------------------------------------------------------- */

static int initialize(mcp_client *c, const volatile sig_atomic_t *cancel)
{
    cJSON *params = cJSON_CreateObject();
    cJSON *info = params ? cJSON_AddObjectToObject(params, "clientInfo") : NULL;
    if (!info || !cJSON_AddStringToObject(params, "protocolVersion", MCP_PROTOCOL_VERSION) ||
        !cJSON_AddObjectToObject(params, "capabilities") || !cJSON_AddStringToObject(info, "name", "glmchat") ||
        !cJSON_AddStringToObject(info, "version", PACKAGE_VERSION)) {
        cJSON_Delete(params);
        set_why(c, "out of memory");
        return -1;
    }
    int canceled;
    cJSON *result = request(c, "initialize", params, c->timeout_ms, cancel, &canceled);
    if (!result)
        return -1;
    cJSON_Delete(result);
    cJSON *note = new_message("notifications/initialized");
    int r = note ? send_json(c, note) : -1;
    cJSON_Delete(note);
    return r;
}

static int add_tool(mcp_client *c, const cJSON *t)
{
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(t, "name");
    const cJSON *desc = cJSON_GetObjectItemCaseSensitive(t, "description");
    const cJSON *schema = cJSON_GetObjectItemCaseSensitive(t, "inputSchema");
    if (!cJSON_IsString(name) || !name->valuestring[0])
        return 0; /* nameless: nothing to call it by */
    mcp_tool *grown = realloc(c->tools, (size_t)(c->n_tools + 1) * sizeof *grown);
    if (!grown)
        return -1;
    c->tools = grown;
    mcp_tool *mt = &grown[c->n_tools];
    mt->name = strdup(name->valuestring);
    mt->description = strdup(cJSON_IsString(desc) ? desc->valuestring : "");
    mt->schema_json = cJSON_IsObject(schema) ? cJSON_PrintUnformatted(schema) : strdup("{\"type\":\"object\"}");
    c->n_tools++;
    if (!mt->name || !mt->description || !mt->schema_json)
        return -1;
    return 0;
}

static int list_tools(mcp_client *c, const volatile sig_atomic_t *cancel)
{
    char *cursor = NULL;
    for (int page = 0; page < 100; page++) {
        cJSON *params = cJSON_CreateObject();
        if (!params || (cursor && !cJSON_AddStringToObject(params, "cursor", cursor))) {
            cJSON_Delete(params);
            free(cursor);
            set_why(c, "out of memory");
            return -1;
        }
        free(cursor);
        cursor = NULL;
        int canceled;
        cJSON *result = request(c, "tools/list", params, c->timeout_ms, cancel, &canceled);
        if (!result)
            return -1;
        const cJSON *tools = cJSON_GetObjectItemCaseSensitive(result, "tools");
        const cJSON *t;
        cJSON_ArrayForEach(t, tools)
        {
            if (add_tool(c, t)) {
                cJSON_Delete(result);
                set_why(c, "out of memory");
                return -1;
            }
        }
        const cJSON *next = cJSON_GetObjectItemCaseSensitive(result, "nextCursor");
        if (cJSON_IsString(next) && next->valuestring[0])
            cursor = strdup(next->valuestring);
        cJSON_Delete(result);
        if (!cursor)
            return 0;
    }
    free(cursor);
    set_why(c, "the MCP server '%s' listed more than 100 pages of tools", c->name);
    return -1;
}

mcp_client *mcp_start(const config_mcp_server *cfg, const char *stderr_log, char *err, size_t errlen)
{
    return mcp_start_cancelable(cfg, stderr_log, NULL, err, errlen);
}

mcp_client *mcp_start_cancelable(const config_mcp_server *cfg, const char *stderr_log,
                                 const volatile sig_atomic_t *cancel, char *err, size_t errlen)
{
    mcp_client *c = calloc(1, sizeof *c);
    if (!c) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    c->pid = -1;
    c->to_server = c->from_server = -1;
    c->name = strdup(cfg->name);
    c->log_path = stderr_log ? strdup(stderr_log) : NULL;
    c->timeout_ms = (cfg->timeout_s > 0 ? cfg->timeout_s : 30) * 1000;
    if (!c->name || (stderr_log && !c->log_path)) {
        snprintf(err, errlen, "out of memory");
        mcp_stop(c);
        return NULL;
    }
    if (!cfg->argv || !cfg->argv[0]) {
        snprintf(err, errlen, "MCP server '%s' has no command", cfg->name);
        mcp_stop(c);
        return NULL;
    }
    if (spawn(c, cfg, err, errlen)) {
        mcp_stop(c);
        return NULL;
    }
    if (initialize(c, cancel) || list_tools(c, cancel)) {
        snprintf(err, errlen, "%s", c->why);
        mcp_stop(c);
        return NULL;
    }
    return c;
}

void mcp_stop(mcp_client *c)
{
    if (!c)
        return;
    if (c->to_server >= 0)
        close(c->to_server); /* EOF on stdin: the polite way to ask a stdio server to leave */
    if (c->pid > 0) {
        int status;
        long long end = proc_now_ms() + 300;
        pid_t w;
        while ((w = waitpid(c->pid, &status, WNOHANG)) == 0 && proc_now_ms() < end)
            usleep(5000);
        if (w == 0)
            proc_kill_group(c->pid, 1000);
    }
    if (c->from_server >= 0)
        close(c->from_server);
    for (int i = 0; i < c->n_tools; i++) {
        free(c->tools[i].name);
        free(c->tools[i].description);
        free(c->tools[i].schema_json);
    }
    free(c->tools);
    for (int i = 0; i < c->n_ctxs; i++)
        free(c->ctxs[i].tool);
    free(c->ctxs);
    free(c->buf);
    free(c->name);
    free(c->log_path);
    free(c);
}

int mcp_call(mcp_client *c, const char *tool, const char *args_json, int timeout_ms,
             const volatile sig_atomic_t *cancel, tool_result *out)
{
    if (c->dead || !mcp_alive(c))
        return tool_result_set(out, 1, "error: %s; its tools cannot be used until glmchat restarts it", c->why);
    cJSON *params = cJSON_CreateObject();
    cJSON *args = cJSON_Parse(args_json && *args_json ? args_json : "{}");
    if (!params || !cJSON_IsObject(args) || !cJSON_AddStringToObject(params, "name", tool)) {
        cJSON_Delete(params);
        cJSON_Delete(args);
        return tool_result_set(out, 1, "error: the arguments must be a JSON object");
    }
    cJSON_AddItemToObject(params, "arguments", args);
    int canceled;
    cJSON *result = request(c, "tools/call", params, timeout_ms > 0 ? timeout_ms : c->timeout_ms, cancel, &canceled);
    if (!result)
        return tool_result_set(out, 1, "error: %s", c->why);
    char *text = mcp_result_text(result);
    int is_error = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(result, "isError"));
    cJSON_Delete(result);
    if (!text)
        return -1;
    tool_result_take(out, is_error, text);
    return 0;
}

/* ---- the registry's view --------------------------------------------------------------------- */

static int call_handler(void *vctx, const cJSON *args, const volatile sig_atomic_t *cancel, tool_result *out)
{
    mcp_tool_ctx *ctx = vctx;
    char *json = cJSON_PrintUnformatted(args);
    if (!json)
        return -1;
    int r = mcp_call(ctx->client, ctx->tool, json, 0, cancel, out);
    free(json);
    return r;
}

int mcp_register_tools(mcp_client *c, tool_registry *reg, int trusted, char *err, size_t errlen)
{
    free(c->ctxs);
    c->ctxs = calloc((size_t)(c->n_tools ? c->n_tools : 1), sizeof *c->ctxs);
    if (!c->ctxs)
        return -1;
    int skipped = 0;
    size_t off = 0;
    if (errlen)
        err[0] = 0;
    for (int i = 0; i < c->n_tools; i++) {
        char full[160];
        snprintf(full, sizeof full, "%s__%s", c->name, c->tools[i].name);
        mcp_tool_ctx *ctx = &c->ctxs[c->n_ctxs];
        ctx->client = c;
        ctx->tool = strdup(c->tools[i].name);
        if (!ctx->tool)
            return -1;
        c->n_ctxs++;
        tool_def def = {full, c->tools[i].description, c->tools[i].schema_json, !trusted, call_handler, ctx, NULL};
        char why[300];
        if (tools_add(reg, &def, why, sizeof why)) {
            skipped++;
            if (off < errlen) {
                int w = snprintf(err + off, errlen - off, "%sMCP server '%s': tool '%s' skipped: %s",
                                 off ? "; " : "", c->name, c->tools[i].name, why);
                off += w > 0 ? (size_t)w : 0;
            }
        }
    }
    return skipped;
}
