/* test_mcp_server.c: glmchat's MCP test server (stdio, one JSON-RPC message a line) with a few
 * tools and modes that misbehave on purpose, so the client's error paths run against a process.
 *
 * Usage: test_mcp_server [--mode MODE]
 *   normal (default)  tools: echo {text}, add {a, b}, fail {}, slow {ms}, crash {}, env {name}
 *   crash-on-start    writes a last word to stderr and exits 3 before reading anything
 *   hang-on-init      reads requests and never answers
 *   garbage           answers initialize with a line that is not JSON
 *   chatty            before each answer, sends a ping request and a log notification
 *   paged             tools/list in two pages (nextCursor)
 * Every mode logs "test_mcp_server: MODE started" to stderr. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

static const char *mode = "normal";

static void send_msg(cJSON *m)
{
    char *s = cJSON_PrintUnformatted(m);
    if (s) {
        printf("%s\n", s);
        fflush(stdout);
    }
    free(s);
    cJSON_Delete(m);
}

static cJSON *reply_to(const cJSON *req)
{
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "jsonrpc", "2.0");
    cJSON_AddItemToObject(m, "id", cJSON_Duplicate(cJSON_GetObjectItem(req, "id"), 1));
    return m;
}

static void send_error(const cJSON *req, int code, const char *message)
{
    cJSON *m = reply_to(req);
    cJSON *e = cJSON_AddObjectToObject(m, "error");
    cJSON_AddNumberToObject(e, "code", code);
    cJSON_AddStringToObject(e, "message", message);
    send_msg(m);
}

static void send_text_result(const cJSON *req, const char *text, int is_error)
{
    cJSON *m = reply_to(req);
    cJSON *r = cJSON_AddObjectToObject(m, "result");
    cJSON *content = cJSON_AddArrayToObject(r, "content");
    cJSON *item = cJSON_CreateObject();
    cJSON_AddStringToObject(item, "type", "text");
    cJSON_AddStringToObject(item, "text", text);
    cJSON_AddItemToArray(content, item);
    if (is_error)
        cJSON_AddTrueToObject(r, "isError");
    send_msg(m);
}

static void add_tool(cJSON *list, const char *name, const char *desc, const char *schema)
{
    cJSON *t = cJSON_CreateObject();
    cJSON_AddStringToObject(t, "name", name);
    cJSON_AddStringToObject(t, "description", desc);
    cJSON_AddItemToObject(t, "inputSchema", cJSON_Parse(schema));
    cJSON_AddItemToArray(list, t);
}

static void list_tools(const cJSON *req)
{
    const cJSON *params = cJSON_GetObjectItem(req, "params");
    const cJSON *cursor = cJSON_GetObjectItem(params, "cursor");
    int second_page = cJSON_IsString(cursor) && strcmp(cursor->valuestring, "page2") == 0;
    cJSON *m = reply_to(req);
    cJSON *r = cJSON_AddObjectToObject(m, "result");
    cJSON *tools = cJSON_AddArrayToObject(r, "tools");
    int paged = strcmp(mode, "paged") == 0;
    if (!paged || !second_page) {
        add_tool(tools, "echo", "Repeats the text it is given.",
                 "{\"type\":\"object\",\"properties\":{\"text\":{\"type\":\"string\"}},\"required\":[\"text\"]}");
        add_tool(tools, "add", "Adds two numbers.",
                 "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"number\"},\"b\":{\"type\":\"number\"}}}");
        add_tool(tools, "fail", "Always fails.", "{\"type\":\"object\"}");
    }
    if (!paged || second_page) {
        add_tool(tools, "slow", "Sleeps for ms milliseconds.",
                 "{\"type\":\"object\",\"properties\":{\"ms\":{\"type\":\"integer\"}}}");
        add_tool(tools, "crash", "Exits in the middle of the call.", "{\"type\":\"object\"}");
        add_tool(tools, "env", "Returns an environment variable.",
                 "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"}}}");
    }
    if (paged && !second_page)
        cJSON_AddStringToObject(r, "nextCursor", "page2");
    send_msg(m);
}

static void call_tool(const cJSON *req)
{
    const cJSON *params = cJSON_GetObjectItem(req, "params");
    const cJSON *name = cJSON_GetObjectItem(params, "name");
    const cJSON *args = cJSON_GetObjectItem(params, "arguments");
    const char *n = cJSON_IsString(name) ? name->valuestring : "";
    char buf[256];
    if (strcmp(n, "echo") == 0) {
        const cJSON *t = cJSON_GetObjectItem(args, "text");
        send_text_result(req, cJSON_IsString(t) ? t->valuestring : "", 0);
    } else if (strcmp(n, "add") == 0) {
        double a = cJSON_GetNumberValue(cJSON_GetObjectItem(args, "a"));
        double b = cJSON_GetNumberValue(cJSON_GetObjectItem(args, "b"));
        snprintf(buf, sizeof buf, "%g", a + b);
        send_text_result(req, buf, 0);
    } else if (strcmp(n, "fail") == 0) {
        send_text_result(req, "this tool always fails", 1);
    } else if (strcmp(n, "slow") == 0) {
        int ms = (int)cJSON_GetNumberValue(cJSON_GetObjectItem(args, "ms"));
        struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
        nanosleep(&ts, NULL);
        snprintf(buf, sizeof buf, "slept %d ms", ms);
        send_text_result(req, buf, 0);
    } else if (strcmp(n, "crash") == 0) {
        fprintf(stderr, "test_mcp_server: crashing on purpose\n");
        exit(3);
    } else if (strcmp(n, "env") == 0) {
        const cJSON *v = cJSON_GetObjectItem(args, "name");
        const char *val = cJSON_IsString(v) ? getenv(v->valuestring) : NULL;
        send_text_result(req, val ? val : "(unset)", 0);
    } else {
        send_error(req, -32602, "unknown tool");
    }
}

static void be_chatty(void)
{
    cJSON *ping = cJSON_CreateObject();
    cJSON_AddStringToObject(ping, "jsonrpc", "2.0");
    cJSON_AddStringToObject(ping, "id", "server-ping-1");
    cJSON_AddStringToObject(ping, "method", "ping");
    send_msg(ping);
    cJSON *note = cJSON_CreateObject();
    cJSON_AddStringToObject(note, "jsonrpc", "2.0");
    cJSON_AddStringToObject(note, "method", "notifications/message");
    cJSON *p = cJSON_AddObjectToObject(note, "params");
    cJSON_AddStringToObject(p, "level", "info");
    cJSON_AddStringToObject(p, "data", "hello from the test server");
    send_msg(note);
}

static void handle(const cJSON *req)
{
    const cJSON *method = cJSON_GetObjectItem(req, "method");
    const cJSON *id = cJSON_GetObjectItem(req, "id");
    if (!cJSON_IsString(method))
        return; /* a response (to our ping) */
    const char *m = method->valuestring;
    if (!id)
        return; /* notifications: initialized, cancelled */
    if (strcmp(mode, "hang-on-init") == 0)
        return;
    if (strcmp(mode, "chatty") == 0)
        be_chatty();
    if (strcmp(m, "initialize") == 0) {
        if (strcmp(mode, "garbage") == 0) {
            printf("this is not json, it is a log line on stdout\n");
            fflush(stdout);
            return;
        }
        cJSON *r = reply_to(req);
        cJSON *res = cJSON_AddObjectToObject(r, "result");
        cJSON_AddStringToObject(res, "protocolVersion", "2025-06-18");
        cJSON *caps = cJSON_AddObjectToObject(res, "capabilities");
        cJSON_AddObjectToObject(caps, "tools");
        cJSON *info = cJSON_AddObjectToObject(res, "serverInfo");
        cJSON_AddStringToObject(info, "name", "test_mcp_server");
        cJSON_AddStringToObject(info, "version", "1");
        send_msg(r);
    } else if (strcmp(m, "tools/list") == 0) {
        list_tools(req);
    } else if (strcmp(m, "tools/call") == 0) {
        call_tool(req);
    } else if (strcmp(m, "ping") == 0) {
        cJSON *r = reply_to(req);
        cJSON_AddObjectToObject(r, "result");
        send_msg(r);
    } else {
        send_error(req, -32601, "method not found");
    }
}

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--mode") == 0 && i + 1 < argc)
            mode = argv[++i];
        else if (strncmp(argv[i], "--mode=", 7) == 0)
            mode = argv[i] + 7;
    }
    fprintf(stderr, "test_mcp_server: %s started\n", mode);
    if (strcmp(mode, "crash-on-start") == 0) {
        fprintf(stderr, "test_mcp_server: fatal: simulated crash on start\n");
        return 3;
    }
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    while ((n = getline(&line, &cap, stdin)) > 0) {
        cJSON *req = cJSON_ParseWithLength(line, (size_t)n);
        if (!req) {
            fprintf(stderr, "test_mcp_server: a line that is not JSON\n");
            continue;
        }
        handle(req);
        cJSON_Delete(req);
    }
    free(line);
    fprintf(stderr, "test_mcp_server: stdin closed, leaving\n");
    return 0;
}
