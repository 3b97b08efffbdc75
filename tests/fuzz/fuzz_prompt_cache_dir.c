/* fuzz_prompt_cache_dir.c: libFuzzer target for the prompt cache's disk tier on a real directory
 * (engine/prefix_cache.c): any bytes as a kept-state file are either indexed and, when used,
 * restored exactly as the file holds them, or refused with a note naming the file and deleted
 * (left alone only when it is a sound header of another format version); never loaded damaged.
 * Run: tests/fuzz/fuzz_reuse.sh [SECONDS] (clang -fsanitize=fuzzer,address,undefined). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "prefix_cache.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

typedef struct loaded {
    int calls;
    const uint8_t *want;
    size_t want_n;
} loaded;

static glm_status check_load(void *user, const void *snap, size_t n, glm_error *err)
{
    (void)err;
    loaded *l = user;
    l->calls++;
    if (!l->want || n != l->want_n || (n && memcmp(snap, l->want, n) != 0))
        abort(); /* a state that is not the file's checked bytes was handed over */
    return GLM_OK;
}

static int noted(pc_cache *c, const char *path)
{
    for (int i = 0; i < pc_n_notes(c); i++)
        if (pc_note(c, i) && strstr(pc_note(c, i), path) && strstr(pc_note(c, i), "refused"))
            return 1;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static char dir[256];
    if (!dir[0]) {
        snprintf(dir, sizeof dir, "%s/glmchat-fuzz-pcdir.XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
        if (!mkdtemp(dir))
            abort();
    }
    char path[512];
    snprintf(path, sizeof path, "%s/00000000000000ab-1.kept", dir);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, size, f) != size || fclose(f) != 0)
        abort();
    uint64_t model_id = 0; /* the identity the file claims, to get past that check */
    if (size >= 24)
        memcpy(&model_id, data + 16, sizeof model_id);
    pc_file_header h;
    const int32_t *tokens = NULL;
    const void *snap = NULL;
    char why[256];
    int hdr_ok = pc_parse_header(data, size, size, model_id, &h, why, sizeof why) == GLM_OK;
    int foreign = size >= PC_HEADER_BYTES && memcmp(data, PC_FILE_MAGIC, 8) == 0 &&
                  (data[8] | data[9] << 8 | data[10] << 16 | (uint32_t)data[11] << 24) != PC_FILE_VERSION;
    int file_ok = pc_parse_file(data, size, model_id, &h, &tokens, &snap, why, sizeof why) == GLM_OK;
    glm_error err = {0};
    pc_cache *c = pc_new(1 << 20, dir, model_id, &err);
    if (!c)
        abort(); /* a bad file never stops the cache from opening */
    pc_stats st;
    pc_get_stats(c, &st);
    int present = access(path, F_OK) == 0;
    if (!hdr_ok) {
        if (st.entries != 0 || !noted(c, path) || present != foreign)
            abort();
    } else if (st.entries == 0) {
        /* a sound header whose tokens do not hash to it: refused and deleted */
        if (!noted(c, path) || present)
            abort();
    } else {
        /* indexed: a lookup with the file's tokens restores its checked state, or refuses it */
        size_t n = h.n_tokens;
        int32_t *ids = malloc(n * sizeof *ids);
        memcpy(ids, data + PC_HEADER_BYTES, n * sizeof *ids);
        loaded l = {.want = file_ok ? snap : NULL, .want_n = file_ok ? (size_t)h.snap_bytes : 0};
        int got = pc_lookup(c, ids, (int)n, 0, (int)n, check_load, &l);
        if (file_ok && (got != (int)n || l.calls != 1))
            abort();
        if (!file_ok && (got != 0 || l.calls != 0 || !noted(c, path) || access(path, F_OK) == 0))
            abort();
        free(ids);
    }
    pc_free(c);
    unlink(path);
    return 0;
}
