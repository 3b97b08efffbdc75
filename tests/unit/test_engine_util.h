/* test_engine_util.h: helpers for the engine's Check suites: scratch model directories, tensors
 * loaded and rewritten (to break a model on purpose), reference logits, fixtures, replies. */
#ifndef GLMCHAT_TESTS_TEST_ENGINE_UTIL_H
#define GLMCHAT_TESTS_TEST_ENGINE_UTIL_H

#include <stddef.h>
#include <stdint.h>

#include "glm.h"
#include "model/safetensors.h"

typedef struct tu_tensor {
    char name[256];
    st_dtype dtype;
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    void *data;
    size_t nbytes;
} tu_tensor;

typedef struct tu_reference {
    int32_t *ids;
    int n, vocab, prefill;
    float *full, *cached;
} tu_reference;

/* $GLMCHAT_SRCDIR/tests/fixtures/models/NAME, or $GLMCHAT_SHARED/fixtures/NAME for tiny-A;
 * aborts the test loudly when the variable is missing. */
const char *tu_fixture(const char *name);
/* A fresh scratch directory under $TMPDIR. */
char *tu_tmpdir(void);
void tu_rmtree(const char *dir);
int tu_copy_file(const char *src, const char *dst);
/* Copies config.json, generation_config.json and model.safetensors of a model directory. */
int tu_copy_model(const char *src_dir, const char *dst_dir);
/* Replaces the first occurrence of find by repl in DIR/config.json; 0 when found. */
int tu_edit_config(const char *dir, const char *find, const char *repl);

int tu_load_tensors(const char *path, tu_tensor **out, int *n);
int tu_write_tensors(const char *path, const tu_tensor *t, int n);
/* Writes DIR/model-0000K-of-0000S.safetensors and the index, tensors dealt round-robin. */
int tu_write_sharded(const char *dir, const tu_tensor *t, int n, int shards);
void tu_free_tensors(tu_tensor *t, int n);
tu_tensor *tu_find(tu_tensor *t, int n, const char *name);

int tu_load_reference(const char *dir, tu_reference *r);
void tu_free_reference(tu_reference *r);
float tu_max_abs_diff(const float *a, const float *b, size_t n);

/* A reply as glm_generate streams it: reasoning and content text in order (up to the buffer),
 * and the DONE event's stats. tu_collect_reply is the glm_event_fn that fills one. */
typedef struct tu_reply {
    char text[8192];
    size_t len;
    glm_stats done;
} tu_reply;
int tu_collect_reply(const glm_event *ev, void *reply);

#endif
