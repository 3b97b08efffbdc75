/* mcp_rpc.c: classifies the lines an MCP server writes (JSON-RPC 2.0 responses, requests,
 * notifications, garbage) and renders tools/call results as text for the model. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app/tools/mcp_rpc.h"

static mcp_line_kind not_jsonrpc(const char *line, size_t n, char *why, size_t whylen)
{
    char shown[81];
    size_t k = n < sizeof shown - 1 ? n : sizeof shown - 1;
    memcpy(shown, line, k);
    shown[k] = 0;
    for (char *p = shown; *p; p++)
        if ((unsigned char)*p < 0x20 || *p == '"')
            *p = '?';
    snprintf(why, whylen, "wrote a line that is not JSON-RPC on its stdout: \"%s\"", shown);
    return MCP_LINE_NOT_JSONRPC;
}

mcp_line_kind mcp_classify_line(const char *line, size_t n, long long id, cJSON **msg, char *why,
                                size_t whylen)
{
    *msg = NULL;
    size_t i = 0;
    while (i < n && (line[i] == ' ' || line[i] == '\t' || line[i] == '\r'))
        i++;
    if (i == n)
        return MCP_LINE_BLANK;
    cJSON *m = cJSON_ParseWithLength(line, n);
    if (!cJSON_IsObject(m)) {
        cJSON_Delete(m);
        return not_jsonrpc(line + i, n - i, why, whylen);
    }
    const cJSON *mid = cJSON_GetObjectItemCaseSensitive(m, "id");
    const cJSON *method = cJSON_GetObjectItemCaseSensitive(m, "method");
    if (method) {
        if (mid && !cJSON_IsNull(mid)) {
            *msg = m;
            return MCP_LINE_SERVER_REQUEST;
        }
        cJSON_Delete(m);
        return MCP_LINE_NOTIFICATION;
    }
    if (!cJSON_IsNumber(mid) || mid->valuedouble != (double)id) {
        cJSON_Delete(m);
        return MCP_LINE_OTHER_RESPONSE;
    }
    const cJSON *error = cJSON_GetObjectItemCaseSensitive(m, "error");
    if (error) {
        const cJSON *code = cJSON_GetObjectItemCaseSensitive(error, "code");
        const cJSON *text = cJSON_GetObjectItemCaseSensitive(error, "message");
        snprintf(why, whylen, "error %d: %.400s", cJSON_IsNumber(code) ? (int)code->valuedouble : 0,
                 cJSON_IsString(text) ? text->valuestring : "(no message)");
        cJSON_Delete(m);
        return MCP_LINE_ERROR;
    }
    cJSON *result = cJSON_DetachItemFromObjectCaseSensitive(m, "result");
    cJSON_Delete(m);
    if (!cJSON_IsObject(result)) {
        cJSON_Delete(result);
        snprintf(why, whylen, "a response without a result object");
        return MCP_LINE_ERROR;
    }
    *msg = result;
    return MCP_LINE_RESULT;
}

char *mcp_result_text(const cJSON *result)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f)
        return NULL;
    const cJSON *content = cJSON_GetObjectItemCaseSensitive(result, "content");
    const cJSON *items = cJSON_IsArray(content) ? content : NULL;
    const cJSON *item;
    int n = 0;
    cJSON_ArrayForEach(item, items)
    {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(item, "type");
        const cJSON *text = cJSON_GetObjectItemCaseSensitive(item, "text");
        if (n++)
            fputc('\n', f);
        if (cJSON_IsString(type) && strcmp(type->valuestring, "text") == 0 && cJSON_IsString(text)) {
            fputs(text->valuestring, f);
        } else {
            const cJSON *mime = cJSON_GetObjectItemCaseSensitive(item, "mimeType");
            fprintf(f, "[%s content%s%s: not shown]", cJSON_IsString(type) ? type->valuestring : "unknown",
                    cJSON_IsString(mime) ? " " : "", cJSON_IsString(mime) ? mime->valuestring : "");
        }
    }
    const cJSON *structured = cJSON_GetObjectItemCaseSensitive(result, "structuredContent");
    if (n == 0 && structured) {
        char *s = cJSON_PrintUnformatted(structured);
        if (s)
            fputs(s, f);
        free(s);
    }
    if (fclose(f) != 0) {
        free(buf);
        return NULL;
    }
    return buf;
}
