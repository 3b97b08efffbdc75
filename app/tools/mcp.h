/* mcp.h: a client for one MCP server over stdio (JSON-RPC 2.0, one message a line): it spawns
 * the server, initializes, lists its tools and calls them, with timeouts and crash detection.
 *
 * The server runs in its own process group with stdin and stdout connected to glmchat and
 * stderr appended to a log file. Every failure (a crash, a hang past the timeout, a line that
 * is not JSON-RPC, an error response) is a message naming the server; a call never blocks past
 * its timeout and a dead server's tools answer with an error result. */
#ifndef GLMCHAT_APP_TOOLS_MCP_H
#define GLMCHAT_APP_TOOLS_MCP_H

#include <signal.h>
#include <stddef.h>

#include "app/config.h"
#include "app/tools/tools.h"

#define MCP_PROTOCOL_VERSION "2025-06-18"
#define MCP_MAX_LINE (16 * 1024 * 1024)

typedef struct mcp_client mcp_client;

typedef struct mcp_tool {
    char *name;        /* as the server names it */
    char *description;
    char *schema_json; /* its inputSchema, printed */
} mcp_tool;

/* Starts the server of cfg, initializes it and lists its tools. stderr_log: file the server's
 * stderr is appended to (NULL: discarded). NULL with err on failure (the server is stopped). */
mcp_client *mcp_start(const config_mcp_server *cfg, const char *stderr_log, char *err, size_t errlen);
/* The same, giving up (NULL, err saying so) soon after *cancel becomes nonzero. */
mcp_client *mcp_start_cancelable(const config_mcp_server *cfg, const char *stderr_log,
                                 const volatile sig_atomic_t *cancel, char *err, size_t errlen);

/* Closes the server's stdin, gives it a moment to exit, then kills its process group. */
void mcp_stop(mcp_client *c);

const char *mcp_name(const mcp_client *c);
int mcp_alive(mcp_client *c);
int mcp_tool_count(const mcp_client *c);
const mcp_tool *mcp_tool_get(const mcp_client *c, int i);

/* Calls one tool (args_json: an object). 0 with a result (error results for every failure of
 * the server), or -1 when out of memory. timeout_ms <= 0: the server's configured timeout. */
int mcp_call(mcp_client *c, const char *tool, const char *args_json, int timeout_ms,
             const volatile sig_atomic_t *cancel, tool_result *out);

/* Registers the server's tools in reg as NAME__TOOL (risky unless trusted). Tools whose names
 * cannot be offered are skipped and named in err (returns the number skipped, -1 when out of
 * memory). */
int mcp_register_tools(mcp_client *c, tool_registry *reg, int trusted, char *err, size_t errlen);

#endif
