/* fuzz_cpu_snapshot.c: libFuzzer target for loading CPU state snapshots (engine/cpu/snapshot.c)
 * into a state of a small real model: any bytes are refused with a message, leaving the state as
 * it was, or load into a state that saves back to a loadable snapshot of the same size.
 * Run: tests/fuzz/fuzz_reuse.sh [SECONDS] (the model: $GLMCHAT_FUZZ_MODEL, else a fixture). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/forward.h"
#include "cpu/snapshot.h"
#include "model/model.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

static glm_model *model;
static cpu_state *state;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    const char *dir = getenv("GLMCHAT_FUZZ_MODEL");
    glm_error err = {0};
    model = glm_model_open(dir ? dir : "tests/fixtures/models/dsa-first-hc3", &err);
    state = model ? cpu_state_new(model, &err) : NULL;
    if (!state)
        abort();
    /* a seed: a real snapshot of 41 tokens, written where $GLMCHAT_FUZZ_SEED says */
    const char *seed = getenv("GLMCHAT_FUZZ_SEED");
    cpu_pool *pool = seed ? cpu_pool_new(1) : NULL;
    if (pool) {
        int32_t ids[41];
        for (int i = 0; i < 41; i++)
            ids[i] = (i * 7) % model->cfg.vocab_size;
        size_t n;
        void *buf;
        FILE *f;
        if (cpu_prefill(state, pool, ids, 41, NULL, 0, &err) == GLM_OK &&
            (buf = malloc(n = cpu_snapshot_size(state))) &&
            cpu_snapshot_save(state, buf, n, &err) == GLM_OK && (f = fopen(seed, "wb"))) {
            fwrite(buf, 1, n, f);
            fclose(f);
            free(buf);
        }
        cpu_pool_free(pool);
        cpu_state_reset(state);
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    glm_error err = {0};
    cpu_state_reset(state);
    if (cpu_snapshot_load(state, data, size, &err) != GLM_OK) {
        if (!err.message[0] || cpu_state_length(state) != 0)
            abort();
        return 0;
    }
    size_t n = cpu_snapshot_size(state);
    void *again = malloc(n ? n : 1);
    if (!again || cpu_snapshot_save(state, again, n, &err) != GLM_OK)
        abort();
    cpu_state_reset(state);
    if (cpu_snapshot_load(state, again, n, &err) != GLM_OK)
        abort();
    free(again);
    return 0;
}
