/* identity.c: what identifies a model's files (config.json, the weight index): the two ranks
 * compare it at bootstrap and the prompt cache keys its files by it. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/hash.h"
#include "base/le.h"
#include "model/identity.h"

/* Hashes a whole file into *h; GLM_ERR_IO when it cannot be read. */
static glm_status hash_file(const char *path, size_t limit, uint64_t *h, char **text, glm_error *err)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return glm_error_set(err, GLM_ERR_IO, "cannot read %s: %s", path, strerror(errno));
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap + 1);
    while (buf) {
        size_t n = fread(buf + len, 1, cap - len, f);
        len += n;
        if (n == 0 || len > limit)
            break;
        if (len == cap) {
            char *grown = realloc(buf, 2 * cap + 1);
            if (!grown) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = grown;
            cap *= 2;
        }
    }
    int bad = ferror(f);
    fclose(f);
    if (!buf)
        return glm_error_set(err, GLM_ERR_NOMEM, "out of memory reading %s", path);
    if (bad || len > limit) {
        free(buf);
        return glm_error_set(err, GLM_ERR_IO, "cannot read %s (unreadable or over %zu bytes)", path, limit);
    }
    buf[len] = '\0';
    *h = fnv1a64(*h, buf, len);
    if (text)
        *text = buf;
    else
        free(buf);
    return GLM_OK;
}

/* A safetensors file's header (8-byte length + JSON): names, dtypes, shapes and offsets. */
static glm_status hash_safetensors_header(const char *path, uint64_t *h, glm_error *err)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return glm_error_set(err, GLM_ERR_IO, "cannot read %s: %s", path, strerror(errno));
    uint8_t lenbuf[8];
    glm_status st = GLM_OK;
    if (fread(lenbuf, 1, 8, f) != 8) {
        st = glm_error_set(err, GLM_ERR_FORMAT, "%s is too short for a safetensors file", path);
    } else {
        uint64_t n = le_get_u64(lenbuf);
        char *hdr = n <= (100u << 20) ? malloc(n ? n : 1) : NULL;
        if (!hdr || fread(hdr, 1, n, f) != n)
            st = glm_error_set(err, GLM_ERR_FORMAT, "%s has an unreadable header of %" PRIu64 " bytes", path, n);
        else
            *h = fnv1a64(fnv1a64(*h, lenbuf, 8), hdr, n);
        free(hdr);
    }
    fclose(f);
    return st;
}

/* model_type from config.json, without a JSON library: the first "model_type": "..." pair. */
static void config_model_type(const char *json, char *out, size_t cap)
{
    snprintf(out, cap, "unknown");
    const char *k = strstr(json, "\"model_type\"");
    if (!k)
        return;
    const char *q = strchr(k + 12, '"');
    if (!q)
        return;
    const char *e = strchr(q + 1, '"');
    if (!e || (size_t)(e - q - 1) >= cap)
        return;
    size_t n = (size_t)(e - q - 1);
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)q[1 + i] < 0x20 || (unsigned char)q[1 + i] >= 0x7f)
            return;
    memcpy(out, q + 1, n);
    out[n] = '\0';
}

glm_status model_identity_read(const char *dir, model_identity *id, glm_error *err)
{
    memset(id, 0, sizeof *id);
    char path[4096];
    char *config = NULL;
    id->config_hash = FNV1A64_SEED;
    snprintf(path, sizeof path, "%s/config.json", dir);
    glm_status st = hash_file(path, 16u << 20, &id->config_hash, &config, err);
    if (st != GLM_OK)
        return glm_error_set(err, st, "model dir %s has no readable config.json; give --model the "
                             "model's directory", dir);
    config_model_type(config, id->model_type, sizeof id->model_type);
    free(config);
    id->weights_hash = FNV1A64_SEED;
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    if (access(path, R_OK) == 0)
        return hash_file(path, 64u << 20, &id->weights_hash, NULL, err);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    if (access(path, R_OK) == 0)
        return hash_safetensors_header(path, &id->weights_hash, err);
    return glm_error_set(err, GLM_ERR_IO, "model dir %s has neither model.safetensors.index.json nor "
                         "model.safetensors", dir);
}

uint64_t model_identity_key(const model_identity *id)
{
    uint64_t h = fnv1a64(FNV1A64_SEED, &id->config_hash, sizeof id->config_hash);
    return fnv1a64(h, &id->weights_hash, sizeof id->weights_hash);
}
