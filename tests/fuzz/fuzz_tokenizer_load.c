/* fuzz_tokenizer_load.c: libFuzzer target for loading tokenizer.json (tok_load_mem, the in-place reader of
 * model.vocab and model.merges): any bytes load or are refused with a message naming the file. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/text/tokenizer.h"

#define FUZZ_NAME "fuzz/tokenizer.json"

/* A loaded tokenizer must work: every id that encode gives decodes (no round trip is asked: an added
 * token may reuse a vocabulary id, as in HF). */
static void use(const tok_tokenizer *t)
{
    static const char text[] = "Hi, caf\xc3\xa9 <|user|> 12345 \xf0\x9f\x98\x80\n  end";
    tok_ids ids = {0};
    tbuf back = {0};
    glm_error err = {0};
    if (tok_encode(t, text, sizeof text - 1, &ids, &err) == GLM_OK &&
        tok_decode(t, ids.v, ids.n, &back, &err) != GLM_OK)
        abort();
    tok_ids_free(&ids);
    tbuf_free(&back);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* an exact-size copy, so that reading past the end is ASan's to see */
    char *text = malloc(size ? size : 1);
    if (!text)
        return 0;
    memcpy(text, data, size);
    glm_error err = {0};
    tok_tokenizer *t = tok_load_mem(text, size, FUZZ_NAME, &err);
    if (t) {
        use(t);
        tok_free(t);
    } else if (err.status == GLM_OK || !strstr(err.message, FUZZ_NAME)) {
        abort(); /* a refusal must say so, and name the file */
    }
    free(text);
    return 0;
}
