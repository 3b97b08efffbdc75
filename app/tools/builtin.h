/* builtin.h: glmchat's five built-in tools: read_file, list_directory, search_files (safe) and
 * write_file, run_command (risky: they ask for approval), all confined to one workspace.
 *
 * Limits: read_file returns at most 256 KiB a call (offset/max_bytes page on; binary files are
 * described, not shown); list_directory at most 1,000 entries; search_files at most 500 matching
 * lines, skips files over 2 MiB, binary files and .git directories, and visits at most 20,000
 * files; write_file at most 4 MiB, written to a temporary file then renamed; run_command runs
 * `/bin/sh -c COMMAND` in the workspace with stdin from /dev/null, keeps 64 KiB of output,
 * and kills its whole process group at the timeout (default tool_timeout, at most 600 s). */
#ifndef GLMCHAT_APP_TOOLS_BUILTIN_H
#define GLMCHAT_APP_TOOLS_BUILTIN_H

#include <stddef.h>

#include "app/tools/tools.h"
#include "app/tools/workspace.h"

#define BUILTIN_READ_MAX (256 * 1024)
#define BUILTIN_LIST_MAX 1000
#define BUILTIN_SEARCH_MAX 500
#define BUILTIN_SEARCH_FILE_MAX (2 * 1024 * 1024)
#define BUILTIN_SEARCH_FILES_MAX 20000
#define BUILTIN_WRITE_MAX (4 * 1024 * 1024)
#define BUILTIN_OUTPUT_MAX (64 * 1024)
#define BUILTIN_COMMAND_TIMEOUT_MAX 600

typedef struct builtin_ctx {
    workspace ws;
    int command_timeout_s; /* run_command's default */
} builtin_ctx;

/* Registers the five tools with ctx (which must outlive reg). 0, or -1 with err. */
int builtin_tools_add(tool_registry *reg, builtin_ctx *ctx, char *err, size_t errlen);

/* The handlers, for tests that call one directly. */
int builtin_read_file(void *ctx, const cJSON *args, const volatile sig_atomic_t *cancel, tool_result *out);
int builtin_list_directory(void *ctx, const cJSON *args, const volatile sig_atomic_t *cancel,
                           tool_result *out);
int builtin_search_files(void *ctx, const cJSON *args, const volatile sig_atomic_t *cancel,
                         tool_result *out);
int builtin_write_file(void *ctx, const cJSON *args, const volatile sig_atomic_t *cancel, tool_result *out);
int builtin_run_command(void *ctx, const cJSON *args, const volatile sig_atomic_t *cancel,
                        tool_result *out);
/* write_file's approval question: a unified diff against the file on disk, or the first lines
 * of a new file (malloc'd; NULL when the arguments are malformed). */
char *builtin_write_preview(void *ctx, const cJSON *args);

#endif
