/* mcp_rpc.h: the pure part of the MCP client: what one line from a server means for the request
 * we wait on, and the text of a tools/call result. No processes here, so it can be fuzzed. */
#ifndef GLMCHAT_APP_TOOLS_MCP_RPC_H
#define GLMCHAT_APP_TOOLS_MCP_RPC_H

#include <stddef.h>

#include <cjson/cJSON.h>

typedef enum mcp_line_kind {
    MCP_LINE_BLANK,          /* whitespace only: skipped */
    MCP_LINE_NOT_JSONRPC,    /* not a JSON object: the server is broken (why says what it wrote) */
    MCP_LINE_SERVER_REQUEST, /* the server asks us something: *msg holds it, answer it */
    MCP_LINE_NOTIFICATION,   /* a notification from the server: skipped */
    MCP_LINE_OTHER_RESPONSE, /* the answer to another (timed-out) request: skipped */
    MCP_LINE_ERROR,          /* our request failed: why has the server's code and message */
    MCP_LINE_RESULT,         /* our request's result object is in *msg */
} mcp_line_kind;

/* Classifies line[0..n) for the request with id `id`. *msg is set (caller deletes) for
 * SERVER_REQUEST and RESULT, else NULL; why is filled for NOT_JSONRPC and ERROR. */
mcp_line_kind mcp_classify_line(const char *line, size_t n, long long id, cJSON **msg, char *why,
                                size_t whylen);

/* The text of a tools/call result: its text items joined by newlines, other items named,
 * structuredContent when there is no content. NULL when out of memory. */
char *mcp_result_text(const cJSON *result);

#endif
