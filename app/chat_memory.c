/* chat_memory.c: the reasoning-memory keys, built on SHA-256 (base/sha256.c): a signature
 * of the conversation before a step, and the step's call ids. */
#include <stdio.h>
#include <string.h>

#include "app/chat_memory.h"
#include "base/sha256.h"

/* A field as its length then its bytes, so ("ab","c") and ("a","bc") differ. */
static void put_field(sha256_ctx *c, const char *s)
{
    uint64_t n = s ? strlen(s) : UINT64_MAX;
    unsigned char len[8];
    for (int i = 0; i < 8; i++)
        len[i] = (unsigned char)(n >> (8 * i));
    sha256_update(c, len, 8);
    if (s)
        sha256_update(c, s, (size_t)n);
}

static void put_message(sha256_ctx *c, const glm_message *m, int with_content)
{
    unsigned char role = (unsigned char)m->role;
    sha256_update(c, &role, 1);
    put_field(c, with_content ? m->content : NULL);
    for (int i = 0; i < m->n_tool_calls; i++) {
        put_field(c, m->tool_calls[i].name);
        put_field(c, m->tool_calls[i].arguments_json);
    }
}

void chat_signature(const glm_message *messages, int n, const glm_message *step, char out[CHAT_SIGNATURE_LEN + 1])
{
    sha256_ctx c;
    sha256_init(&c);
    put_field(&c, "glmchat reasoning memory 1");
    for (int i = 0; i < n; i++)
        put_message(&c, &messages[i], 1);
    put_message(&c, step, 0);
    unsigned char d[32];
    sha256_final(&c, d);
    for (int i = 0; i < 32; i++)
        snprintf(out + 2 * i, 3, "%02x", d[i]);
}

int chat_call_ids(const glm_message *step, char *out, size_t outlen)
{
    size_t off = 0;
    if (outlen == 0)
        return -1;
    out[0] = 0;
    for (int i = 0; i < step->n_tool_calls; i++) {
        const char *id = step->tool_calls[i].id ? step->tool_calls[i].id : "";
        int w = snprintf(out + off, outlen - off, "%s%s", i ? "," : "", id);
        if (w < 0 || (size_t)w >= outlen - off)
            return -1;
        off += (size_t)w;
    }
    return 0;
}
