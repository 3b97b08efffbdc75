/* split.c: slicing the model's matrices between two ranks: row halves are views into the mapping,
 * column halves are converted copies (the matrices are row-major without a stride). */
#include <stdlib.h>
#include <string.h>

#include "tp/split.h"

static size_t elem_bytes(const glm_weight *w)
{
    switch (w->dtype) {
    case ST_F32: return 4;
    case ST_BF16:
    case ST_F16: return 2;
    case ST_F8_E4M3: return 1;
    default: return 0;
    }
}

glm_status tp_split_rows(const glm_weight *w, int rank, glm_weight *half, glm_error *err)
{
    size_t eb = elem_bytes(w);
    if (w->kind == GLM_W_EXL3 || eb == 0)
        return glm_error_set(err, GLM_ERR_UNSUPPORTED, "tensor %s: splitting this storage type between "
                             "ranks is not supported yet", w->name ? w->name : "?");
    if (rank < 0 || rank > 1 || w->rows % 2 != 0)
        return glm_error_set(err, GLM_ERR_ARG, "tensor %s has %lld rows: it cannot be halved between two ranks",
                             w->name ? w->name : "?", (long long)w->rows);
    int64_t r0 = rank * (w->rows / 2);
    *half = *w;
    half->rows = w->rows / 2;
    half->data = (const uint8_t *)w->data + (size_t)r0 * (size_t)w->cols * eb;
    if (w->kind == GLM_W_FP8_BLOCK) {
        if (r0 % w->block_rows != 0)
            return glm_error_set(err, GLM_ERR_UNSUPPORTED, "tensor %s: the rank boundary at row %lld cuts "
                                 "an FP8 scale block of %d rows", w->name, (long long)r0, w->block_rows);
        half->scale = w->scale + (size_t)(r0 / w->block_rows) * (size_t)w->scale_cols;
    }
    return GLM_OK;
}

glm_status tp_split_cols(const glm_weight *w, int rank, glm_weight *half, float **owned, glm_error *err)
{
    *owned = NULL;
    if (w->kind == GLM_W_EXL3 || elem_bytes(w) == 0)
        return glm_error_set(err, GLM_ERR_UNSUPPORTED, "tensor %s: splitting this storage type between "
                             "ranks is not supported yet", w->name ? w->name : "?");
    if (rank < 0 || rank > 1 || w->cols % 2 != 0)
        return glm_error_set(err, GLM_ERR_ARG, "tensor %s has %lld columns: it cannot be halved between two ranks",
                             w->name ? w->name : "?", (long long)w->cols);
    int64_t hc = w->cols / 2, c0 = rank * hc;
    float *out = malloc((size_t)w->rows * (size_t)hc * sizeof *out);
    float *row = malloc((size_t)w->cols * sizeof *row);
    if (!out || !row) {
        free(out);
        free(row);
        return glm_error_set(err, GLM_ERR_NOMEM, "out of memory splitting tensor %s", w->name ? w->name : "?");
    }
    for (int64_t r = 0; r < w->rows; r++) {
        const float *src = glm_weight_row(w, r, row);
        memcpy(out + (size_t)r * (size_t)hc, src + c0, (size_t)hc * sizeof *out);
    }
    free(row);
    *half = *w;
    half->kind = GLM_W_PLAIN;
    half->dtype = ST_F32;
    half->cols = hc;
    half->data = out;
    half->scale = NULL;
    *owned = out;
    return GLM_OK;
}

glm_status tp_split_mlp(const glm_mlp_weights *w, int rank, glm_mlp_weights *half, float **owned,
                        glm_error *err)
{
    glm_status st = tp_split_rows(&w->gate, rank, &half->gate, err);
    if (st == GLM_OK)
        st = tp_split_rows(&w->up, rank, &half->up, err);
    if (st == GLM_OK)
        st = tp_split_cols(&w->down, rank, &half->down, owned, err);
    return st;
}
