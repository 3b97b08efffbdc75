/* fuzz_exl3.c: libFuzzer target for EXL3 modules in a safetensors file: any bytes must bind
 * (exl3_load) and decode, or give a clean error; tile words must survive unpack -> pack.
 * Build and run (from the source root, after ./configure):
 *   clang -g -O1 -fsanitize=fuzzer,address,undefined -I. -Iengine -include config.h \
 *     $(pkg-config --cflags libcjson) tests/fuzz/fuzz_exl3.c engine/model/exl3*.c \
 *     engine/model/hadamard.c engine/model/safetensors.c engine/error.c \
 *     $(pkg-config --libs libcjson) -lm -pthread -o /tmp/fuzz_exl3
 *   /tmp/fuzz_exl3 -max_total_time=60 -max_len=65536 CORPUS_DIR */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model/exl3.h"
#include "model/exl3_load.h"
#include "model/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The first bytes as one tile of each width: states, then packing them, gives the words back. */
static void tile_round_trip(const uint8_t *data, size_t size)
{
    uint16_t words[16 * EXL3_MAX_BITS], again[16 * EXL3_MAX_BITS], states[256], tile[256];
    memset(words, 0, sizeof words);
    memcpy(words, data, size < sizeof words ? size : sizeof words);
    for (int bits = 1; bits <= EXL3_MAX_BITS; bits++) {
        exl3_tile_states(words, bits, states);
        exl3_tile_pack(states, bits, again);
        if (memcmp(words, again, (size_t)bits * 32) != 0)
            abort();
        exl3_decode_tile(words, bits, (exl3_codebook)(bits % 3), tile);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    tile_round_trip(data, size);
    char path[] = "/tmp/glmchat-fuzz-exl3-XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0)
        return 0;
    if (write(fd, data, size) != (ssize_t)size) {
        close(fd);
        unlink(path);
        return 0;
    }
    close(fd);
    glm_error err = {0};
    st_model *m = st_open_file(path, &err);
    if (m) {
        for (size_t i = 0; i < st_count(m); i++) {
            const char *name = st_at(m, i)->name;
            size_t n = strlen(name);
            if (n < 8 || strcmp(name + n - 8, ".trellis") != 0 || n > 400)
                continue;
            char module[512];
            snprintf(module, sizeof module, "%.*s", (int)(n - 8), name);
            exl3_tensor t;
            if (exl3_load(m, module, &t, &err) != GLM_OK)
                continue;
            if ((size_t)t.in * (size_t)t.out > (1u << 18))
                continue;
            float *x = calloc((size_t)t.in, sizeof *x), *y = malloc((size_t)t.out * sizeof *y);
            float *w = malloc((size_t)t.in * (size_t)t.out * sizeof *w);
            if (x && y && w) {
                x[0] = 1.0f;
                (void)exl3_matvec(&t, x, y, &err);
                (void)exl3_dequantize_f32(&t, w, &err);
            }
            free(x);
            free(y);
            free(w);
        }
        st_close(m);
    }
    unlink(path);
    return 0;
}
