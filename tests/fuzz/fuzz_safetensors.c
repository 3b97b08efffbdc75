/* fuzz_safetensors.c: libFuzzer target for the safetensors reader: any bytes as a file must
 * give a tensor table whose entries lie inside the file, sized as their shapes say and apart
 * from each other, or a clean error. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "model/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[] = "/tmp/glmchat-fuzz-st-XXXXXX";
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
        float buf[16];
        for (size_t i = 0; i < st_count(m); i++) {
            const st_tensor *t = st_at(m, i);
            size_t n = (size_t)st_numel(t);
            size_t first = n > 16 ? n - 16 : 0;
            st_to_f32(t->dtype, t->data, first, n - first, buf); /* the last elements */
            if (st_find(m, t->name) != t || (uint64_t)n * st_dtype_size(t->dtype) != t->nbytes)
                abort();
            /* no two tensors share a byte */
            for (size_t j = 0; j < i && j < 64; j++) {
                const st_tensor *u = st_at(m, j);
                const uint8_t *a = t->data, *b = u->data;
                if (t->nbytes && u->nbytes && a < b + u->nbytes && b < a + t->nbytes)
                    abort();
            }
        }
        st_metadata(m, "format");
        st_close(m);
    }
    unlink(path);
    return 0;
}
