/* builtin.c: run_command and the registration of the five built-in tools with their JSON
 * schemas (what the model reads to call them). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app/tools/builtin.h"
#include "app/tools/proc.h"

/* The output with each NUL byte written as \0, so the text keeps every byte after it
 * (malloc'd; *n_nul counts them). NULL when out of memory. */
static char *nul_escaped(const char *s, size_t len, size_t *n_nul)
{
    *n_nul = 0;
    for (size_t i = 0; i < len; i++)
        *n_nul += s[i] == 0;
    char *out = malloc(len + *n_nul + 1);
    if (!out)
        return NULL;
    size_t o = 0;
    for (size_t i = 0; i < len; i++) {
        if (s[i] == 0) {
            out[o++] = '\\';
            out[o++] = '0';
        } else {
            out[o++] = s[i];
        }
    }
    out[o] = 0;
    return out;
}

int builtin_run_command(void *vctx, const cJSON *args, const volatile sig_atomic_t *cancel,
                        tool_result *out)
{
    builtin_ctx *ctx = vctx;
    const char *command = tool_arg_string(args, "command", 1, out);
    if (!command)
        return 0;
    long long timeout_s;
    int def = ctx->command_timeout_s > 0 ? ctx->command_timeout_s : 30;
    if (def > BUILTIN_COMMAND_TIMEOUT_MAX)
        def = BUILTIN_COMMAND_TIMEOUT_MAX;
    if (tool_arg_int(args, "timeout", def, 1, BUILTIN_COMMAND_TIMEOUT_MAX, &timeout_s, out))
        return 0;
    char *argv[] = {"/bin/sh", "-c", (char *)command, NULL};
    proc_opts o = {.argv = argv, .cwd = ctx->ws.root, .timeout_ms = (int)timeout_s * 1000,
                   .max_output = BUILTIN_OUTPUT_MAX, .cancel = cancel};
    proc_result r;
    char err[600];
    if (proc_run(&o, &r, err, sizeof err))
        return tool_result_set(out, 1, "error: %s", err);
    char tail[200];
    int is_error = 1;
    if (r.timed_out)
        snprintf(tail, sizeof tail, "[timed out after %lld s; the command's processes were killed]", timeout_s);
    else if (r.canceled)
        snprintf(tail, sizeof tail, "[canceled by the user; the command's processes were killed]");
    else if (r.signal)
        snprintf(tail, sizeof tail, "[killed by signal %d]", r.signal);
    else {
        snprintf(tail, sizeof tail, "[exit status %d]", r.exit_status);
        is_error = r.exit_status != 0;
    }
    char dropped[100] = "", nuls[100] = "";
    if (r.total > r.len)
        snprintf(dropped, sizeof dropped, "[output cut at %zu of %zu bytes]\n", r.len, r.total);
    size_t n_nul = 0;
    char *shown = nul_escaped(r.output, r.len, &n_nul);
    if (n_nul)
        snprintf(nuls, sizeof nuls, "[%zu NUL bytes in the output are shown as \\0]\n", n_nul);
    int rc = shown ? tool_result_set(out, is_error, "%s%s%s%s%s", shown,
                                     r.len && r.output[r.len - 1] != '\n' ? "\n" : "", nuls, dropped, tail)
                   : -1;
    free(shown);
    proc_result_free(&r);
    return rc;
}

/* run_command's approval question: the command as the shell will read it. */
static char *command_preview(void *vctx, const cJSON *args)
{
    (void)vctx;
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(args, "command");
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(args, "timeout");
    if (!cJSON_IsString(c) || !c->valuestring)
        return NULL;
    char *text = NULL;
    if (cJSON_IsNumber(t) ? asprintf(&text, "%s\n(timeout %g s)", c->valuestring, t->valuedouble)
                          : asprintf(&text, "%s", c->valuestring) < 0)
        return NULL;
    return text;
}

static const char read_file_schema[] =
    "{\"type\":\"object\",\"properties\":{"
    "\"path\":{\"type\":\"string\",\"description\":\"file path, relative to the workspace\"},"
    "\"offset\":{\"type\":\"integer\",\"description\":\"first byte to read (default 0)\"},"
    "\"max_bytes\":{\"type\":\"integer\",\"description\":\"at most this many bytes (default and limit 262144)\"}},"
    "\"required\":[\"path\"]}";
static const char list_directory_schema[] =
    "{\"type\":\"object\",\"properties\":{"
    "\"path\":{\"type\":\"string\",\"description\":\"directory, relative to the workspace (default .)\"}}}";
static const char search_files_schema[] =
    "{\"type\":\"object\",\"properties\":{"
    "\"pattern\":{\"type\":\"string\",\"description\":\"POSIX extended regular expression matched against each line\"},"
    "\"path\":{\"type\":\"string\",\"description\":\"file or directory to search (default .)\"},"
    "\"ignore_case\":{\"type\":\"boolean\"},"
    "\"max_results\":{\"type\":\"integer\",\"description\":\"at most this many lines (default 100, limit 500)\"}},"
    "\"required\":[\"pattern\"]}";
static const char write_file_schema[] =
    "{\"type\":\"object\",\"properties\":{"
    "\"path\":{\"type\":\"string\",\"description\":\"file path, relative to the workspace; its directory must exist\"},"
    "\"content\":{\"type\":\"string\",\"description\":\"the whole new content of the file\"}},"
    "\"required\":[\"path\",\"content\"]}";
static const char run_command_schema[] =
    "{\"type\":\"object\",\"properties\":{"
    "\"command\":{\"type\":\"string\",\"description\":\"a /bin/sh command line, run in the workspace\"},"
    "\"timeout\":{\"type\":\"integer\",\"description\":\"seconds before it is killed (limit 600)\"}},"
    "\"required\":[\"command\"]}";

int builtin_tools_add(tool_registry *reg, builtin_ctx *ctx, char *err, size_t errlen)
{
    const tool_def defs[] = {
        {"read_file", "Read a text file in the workspace.", read_file_schema, 0, builtin_read_file, ctx, NULL},
        {"list_directory", "List the entries of a directory in the workspace (directories end in /).",
         list_directory_schema, 0, builtin_list_directory, ctx, NULL},
        {"search_files", "Find lines matching a regular expression in the workspace's files.",
         search_files_schema, 0, builtin_search_files, ctx, NULL},
        {"write_file", "Create or replace a file in the workspace.", write_file_schema, 1, builtin_write_file,
         ctx, builtin_write_preview},
        {"run_command", "Run a shell command in the workspace; returns its output and exit status.",
         run_command_schema, 1, builtin_run_command, ctx, command_preview},
    };
    for (size_t i = 0; i < sizeof defs / sizeof defs[0]; i++)
        if (tools_add(reg, &defs[i], err, errlen))
            return -1;
    return 0;
}
