/* fuzz_model_config.c: libFuzzer target for config.json parsing: any text gives a config whose
 * layer tables are consistent, or an error message. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "model/config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    if (!text)
        return 0;
    memcpy(text, data, size);
    text[size] = 0;
    glm_config c;
    glm_error err = {0};
    if (glm_config_parse(&c, text, "config.json", &err) == GLM_OK) {
        if (c.num_layers < 1 || c.num_layers > GLM_MAX_LAYERS || c.hidden_size < 1 ||
            c.index_kpool < 1 || c.index_topk % c.index_kpool || c.n_routed_experts % c.n_group)
            abort();
        for (int i = 0; i < c.num_layers; i++)
            if (c.indexer_shared[i] && (i == 0 || c.attn[i - 1] != GLM_ATTN_DSA))
                abort();
    } else if (!err.message[0]) {
        abort();
    }
    free(text);
    return 0;
}
