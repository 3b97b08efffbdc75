/* fuzz_mcp.c: libFuzzer target for what an MCP server may write: each input line is classified
 * as the client does for a pending request (id 1), and results are rendered as text.
 * Build and run for a minute from the top of a configured tree:
 *   clang -g -O1 -fsanitize=fuzzer,address,undefined -include config.h -I. \
 *     $(pkg-config --cflags libcjson) tests/fuzz/fuzz_mcp.c app/tools/mcp_rpc.c \
 *     $(pkg-config --libs libcjson) -o /tmp/fuzz_mcp && /tmp/fuzz_mcp -max_total_time=60 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "app/tools/mcp_rpc.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *s = (const char *)data;
    size_t i = 0;
    while (i < size) {
        const char *nl = memchr(s + i, '\n', size - i);
        size_t n = nl ? (size_t)(nl - (s + i)) : size - i;
        cJSON *msg = NULL;
        char why[600];
        mcp_line_kind k = mcp_classify_line(s + i, n, 1, &msg, why, sizeof why);
        if ((k == MCP_LINE_RESULT || k == MCP_LINE_SERVER_REQUEST) != (msg != NULL))
            __builtin_trap();
        if (k == MCP_LINE_RESULT)
            free(mcp_result_text(msg));
        cJSON_Delete(msg);
        i += n + 1;
    }
    return 0;
}
