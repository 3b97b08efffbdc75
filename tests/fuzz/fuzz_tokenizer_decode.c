/* fuzz_tokenizer_decode.c: libFuzzer target for the tokenizer: decode of arbitrary ids (whole and
 * streamed must agree), and encode of arbitrary bytes (decode(encode(x)) must be x, U+FFFD-repaired). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/text/tokenizer.h"
#include "base/utf8.h"

static tok_tokenizer *tokenizer(void)
{
    static tok_tokenizer *t;
    if (!t) {
        const char *path = getenv("GLMCHAT_FUZZ_TOKENIZER");
        glm_error err = {0};
        t = tok_load(path ? path : "tests/fixtures/text/glm-bpe.tokenizer.json", &err);
        if (!t) {
            fprintf(stderr, "fuzz: %s (set GLMCHAT_FUZZ_TOKENIZER)\n", err.message);
            abort();
        }
    }
    return t;
}

static void check_decode(const tok_tokenizer *t, const uint8_t *data, size_t size)
{
    size_t n = size / 3;
    int32_t *ids = malloc((n ? n : 1) * sizeof *ids);
    if (!ids)
        return;
    for (size_t i = 0; i < n; i++) /* mostly real ids, sometimes any */
        ids[i] = (int32_t)(((uint32_t)data[3 * i] << 16 | (uint32_t)data[3 * i + 1] << 8 | data[3 * i + 2]) %
                           (uint32_t)(tok_vocab_size(t) + 8));
    tbuf raw = {0}, whole = {0}, streamed = {0};
    glm_error err = {0};
    if (tok_decode(t, ids, n, &raw, &err) == GLM_OK) {
        if (tbuf_append_utf8(&whole, raw.p ? raw.p : "", raw.len, 1, NULL) != GLM_OK)
            abort();
        tok_stream *s = tok_stream_new(t);
        if (!s)
            abort();
        for (size_t i = 0; i < n; i++)
            if (tok_stream_feed(s, ids[i], &streamed, &err) != GLM_OK)
                abort();
        if (tok_stream_finish(s, &streamed) != GLM_OK)
            abort();
        tok_stream_free(s);
        if (streamed.len != whole.len || memcmp(streamed.p ? streamed.p : "", whole.p ? whole.p : "", whole.len))
            abort();
    }
    tbuf_free(&raw);
    tbuf_free(&whole);
    tbuf_free(&streamed);
    free(ids);
}

static void check_encode(const tok_tokenizer *t, const uint8_t *data, size_t size)
{
    tok_ids ids = {0};
    tbuf fixed = {0}, back = {0};
    glm_error err = {0};
    if (tok_encode(t, (const char *)data, size, &ids, &err) != GLM_OK)
        abort();
    if (tbuf_append_utf8(&fixed, (const char *)data, size, 1, NULL) != GLM_OK ||
        tok_decode(t, ids.v, ids.n, &back, &err) != GLM_OK)
        abort();
    if (back.len != fixed.len || memcmp(back.p ? back.p : "", fixed.p ? fixed.p : "", fixed.len) != 0)
        abort(); /* byte-level BPE loses nothing */
    tok_ids_free(&ids);
    tbuf_free(&fixed);
    tbuf_free(&back);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    const tok_tokenizer *t = tokenizer();
    if (data[0] & 1)
        check_decode(t, data + 1, size - 1);
    else
        check_encode(t, data + 1, size - 1);
    return 0;
}
