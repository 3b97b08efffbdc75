/* safetensors.h: reads Hugging Face safetensors checkpoints by mmap (one file, or shards named
 * by model.safetensors.index.json) and writes them in a streaming way (header first, then data). */
#ifndef GLMCHAT_ENGINE_MODEL_SAFETENSORS_H
#define GLMCHAT_ENGINE_MODEL_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "glm.h"

#define ST_MAX_DIMS 8

typedef enum st_dtype {
    ST_F32 = 0,
    ST_BF16,
    ST_F16,
    ST_F8_E4M3, /* float8 e4m3fn: 1 sign, 4 exponent (bias 7), 3 mantissa; no infinities */
    ST_F64,
    ST_I64,
    ST_I32,
    ST_I16,
    ST_I8,
    ST_U8,
    ST_BOOL,
    ST_DTYPE_COUNT
} st_dtype;

typedef struct st_tensor {
    const char *name;
    st_dtype dtype;
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    const void *data; /* inside the file's mapping; never copied */
    size_t nbytes;
    const char *file; /* the path of the file holding it, for messages */
} st_tensor;

typedef struct st_model st_model;

/* Bytes per element, and the name safetensors uses ("F32", "BF16", "F8_E4M3", ...). */
size_t st_dtype_size(st_dtype t);
const char *st_dtype_name(st_dtype t);
int st_dtype_parse(const char *name, st_dtype *out); /* 0 on success */
int64_t st_numel(const st_tensor *t);

/* Opens one safetensors file. */
st_model *st_open_file(const char *path, glm_error *err);
/* Opens a model directory: model.safetensors.index.json when present (every shard it names,
 * every tensor checked to be in the shard the index says), else model.safetensors. */
st_model *st_open_dir(const char *dir, glm_error *err);
void st_close(st_model *m);
/* Opens the given files as one model (no index): for checking shards a broken index names. */
st_model *st_open_files(const char *const *paths, size_t n, glm_error *err);

/* The tensor called name, or NULL. */
const st_tensor *st_find(const st_model *m, const char *name);
size_t st_count(const st_model *m);
const st_tensor *st_at(const st_model *m, size_t i); /* sorted by name */
/* Value of the __metadata__ key in the file holding the first tensor, or NULL. */
const char *st_metadata(const st_model *m, const char *key);

/* ---- conversion -------------------------------------------------------------------------- */
float st_bf16_to_f32(uint16_t h);
uint16_t st_f32_to_bf16(float f); /* round to nearest even; NaN stays NaN */
float st_f16_to_f32(uint16_t h);
uint16_t st_f32_to_f16(float f);
float st_e4m3_to_f32(uint8_t b);
uint8_t st_f32_to_e4m3(float f); /* round to nearest even, saturating at +-448 */
/* Converts n elements of a float tensor's data starting at element first to float32. */
int st_to_f32(st_dtype t, const void *data, size_t first, size_t n, float *out);

/* ---- writing ----------------------------------------------------------------------------- */
typedef struct st_writer st_writer;

/* Declare every tensor (in the order their data will come), then st_writer_begin writes the
 * header, then st_writer_write streams the data in that order, then st_writer_close checks that
 * every byte came and closes the file. Metadata pairs go into __metadata__. */
st_writer *st_writer_new(const char *path, glm_error *err);
glm_status st_writer_metadata(st_writer *w, const char *key, const char *value, glm_error *err);
glm_status st_writer_declare(st_writer *w, const char *name, st_dtype dtype, int ndim,
                             const int64_t *shape, glm_error *err);
glm_status st_writer_begin(st_writer *w, glm_error *err);
glm_status st_writer_write(st_writer *w, const void *data, size_t nbytes, glm_error *err);
size_t st_writer_data_bytes(const st_writer *w); /* total declared data bytes */
glm_status st_writer_close(st_writer *w, glm_error *err);
/* Frees a writer without finishing it (the partial file is removed). */
void st_writer_abort(st_writer *w);

#endif
