/* fuzz_prompt_cache.c: libFuzzer target for kept-state files (engine/prefix_cache.c): any bytes
 * are refused with a reason or parse to a header whose sizes add up to the file's.
 * Run: tests/fuzz/fuzz_reuse.sh [SECONDS] (clang -fsanitize=fuzzer,address,undefined). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "prefix_cache.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* the model identity the file claims, so the parser gets past that check too */
    uint64_t model_id = 0;
    if (size >= 24)
        memcpy(&model_id, data + 16, sizeof model_id);
    pc_file_header h;
    char why[256] = "";
    const int32_t *tokens = NULL;
    const void *snap = NULL;
    glm_status hs = pc_parse_header(data, size, size, model_id, &h, why, sizeof why);
    if (hs != GLM_OK && !why[0])
        abort();
    if (hs == GLM_OK && PC_HEADER_BYTES + (uint64_t)h.n_tokens * 4 + h.snap_bytes != size)
        abort();
    why[0] = '\0';
    glm_status fs = pc_parse_file(data, size, model_id, &h, &tokens, &snap, why, sizeof why);
    if (fs != GLM_OK && !why[0])
        abort();
    if (fs == GLM_OK) {
        if (hs != GLM_OK || pc_hash_tokens(tokens, (int)h.n_tokens) != h.prefix_hash)
            abort();
        volatile uint8_t sink = 0;
        for (uint64_t i = 0; i < h.snap_bytes; i++) /* the state lies inside the buffer */
            sink ^= ((const uint8_t *)snap)[i];
        (void)sink;
    }
    /* a wrong model is always refused */
    if (size >= PC_HEADER_BYTES &&
        pc_parse_header(data, size, size, model_id ^ 1, &h, why, sizeof why) == GLM_OK)
        abort();
    return 0;
}
