/* mcp_boot.h: starting the configured MCP servers, one after another, with each step reported
 * as it happens (starting, ready with N tools, failed and why); in the background for the TUI
 * so the view is up and shows the progress, or in the foreground for scripted chats. */
#ifndef GLMCHAT_APP_TOOLS_MCP_BOOT_H
#define GLMCHAT_APP_TOOLS_MCP_BOOT_H

#include "app/config.h"
#include "app/tools/tools.h"

typedef struct mcp_boot mcp_boot;

/* One step: failed 0 for progress ("starting", "ready"), 1 for a server that is not used.
 * Called on the thread that starts the servers. */
typedef void (*mcp_boot_report_fn)(void *user, int failed, const char *text);

/* Prepares the start of cfg's enabled servers (logs in state_dir/mcp-NAME.log), their tools
 * going into reg. cfg and reg must outlive it. NULL when out of memory. */
mcp_boot *mcp_boot_new(const app_config *cfg, const char *state_dir, tool_registry *reg);
/* How many servers it will start. */
int mcp_boot_count(const mcp_boot *b);
/* Whether name could be a tool (SERVER__TOOL) of an enabled server whose start has not
 * finished: such a name can be allowed before the tool exists. 0 for a NULL b. */
int mcp_boot_pending_tool(mcp_boot *b, const char *name);
/* Starts them on this thread, reporting each step. */
void mcp_boot_run(mcp_boot *b, mcp_boot_report_fn report, void *user);
/* Starts them on a thread of its own. 0, or -1 when no thread could be made (then nothing
 * was started and the reason was reported). */
int mcp_boot_start(mcp_boot *b, mcp_boot_report_fn report, void *user);
/* Whether the background start has finished (no wait). */
int mcp_boot_done(mcp_boot *b);
/* Waits for the background start to finish (any thread); the registry is then safe to read. */
void mcp_boot_wait(mcp_boot *b);
/* Asks a background start to give up on the server it waits for and the ones after it, and
 * joins its thread (call it from the thread that started it): no report comes after this.
 * Servers already up stay up. */
void mcp_boot_cancel(mcp_boot *b);
/* Cancels, then stops every server that was started. */
void mcp_boot_free(mcp_boot *b);

#endif
