/* test_engine_util.h: helpers for the engine's Check suites (and the GPU tests): scratch model
 * directories, tensors loaded and rewritten (to break a model on purpose), reference logits,
 * fixtures, replies, drafted replies against plain ones. */
#ifndef GLMCHAT_TESTS_TEST_ENGINE_UTIL_H
#define GLMCHAT_TESTS_TEST_ENGINE_UTIL_H

#include <stddef.h>
#include <stdint.h>

#include "glm.h"
#include "model/safetensors.h"
#include "session.h"
#include "spec.h"

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

/* $GLMCHAT_SRCDIR/tests/fixtures/models/NAME (tiny-A included); aborts the test loudly when
 * the fixture is missing. */
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

/* The helpers below need no Check (test_engine_util_draft.c): the GPU tests link them too. */
float tu_max_abs_diff(const float *a, const float *b, size_t n);
/* n ids below vocab from a seeded generator (malloc'd). */
int32_t *tu_some_tokens(int n, uint64_t seed, int vocab);

/* A reply's tokens (the first TU_MAX_REPLY); tu_keep_token is the glm_token_fn that fills one. */
#define TU_MAX_REPLY 512
typedef struct tu_tokens {
    int32_t v[TU_MAX_REPLY];
    int n;
} tu_tokens;
int tu_keep_token(int32_t t, void *user);

/* An outside drafter: the undrafted reply with about one proposal in five wrong (scattered by a
 * hash of the position), so windows accept and refuse at every draft position; or, with
 * wrong_until > 0, every proposal for reply positions below it wrong and every later one right. */
typedef struct tu_oracle {
    const tu_tokens *reply;
    int n_prompt, vocab;
    int wrong_until;
} tu_oracle;
int tu_oracle_draft(const int32_t *ctx, int n, int32_t *out, int max, void *user);

/* Acceptance per draft position: summed, and printed as "W windows, accepted/proposed by
 * position: a/p ..." (no newline). */
void tu_add_stats(spec_stats *all, const spec_stats *st);
void tu_print_acceptance(const spec_stats *st);

/* One prompt's reply on a plain engine and on a drafted one (the drafted engine's own drafts, or
 * with oracle_vocab > 0 the oracle above over ids below it), greedy or sampled as smp says. */
typedef struct tu_drafted_run {
    tu_tokens plain, drafted;
    glm_status plain_st, drafted_st;
    glm_error err;         /* the failing run's error */
    int same;              /* both ran, same tokens, same state length after */
    int logits_same;       /* and the same next logits, bit for bit */
    int64_t plain_windows; /* the plain session's verification windows (0 expected) */
    spec_stats stats;      /* the drafted session's */
    int mtp_drafts;        /* session_mtp_draft's count for 4 after the drafted reply */
} tu_drafted_run;
void tu_run_drafted(glm_engine *plain, glm_engine *drafted, const int32_t *prompt, int n_prompt,
                    const glm_sampling *smp, int max_new, int oracle_vocab, tu_drafted_run *r);
/* The same with the oracle's wrong_until (tu_run_drafted: 0). Both count every forward of the
 * drafted session as costing 1 whatever its rows (tu_cost_flat: windows always worth their
 * drafts), so that their window counts do not depend on the machine's speed. */
void tu_run_drafted_oracle(glm_engine *plain, glm_engine *drafted, const int32_t *prompt,
                           int n_prompt, const glm_sampling *smp, int max_new, int oracle_vocab,
                           int wrong_until, tu_drafted_run *r);
double tu_cost_flat(int rows, double measured_s, void *user);
/* The same with the drafted session's forwards counted by cost (session_set_forward_cost). */
void tu_run_drafted_costed(glm_engine *plain, glm_engine *drafted, const int32_t *prompt,
                           int n_prompt, const glm_sampling *smp, int max_new, int oracle_vocab,
                           int wrong_until, glm_cost_fn cost, void *cost_user, tu_drafted_run *r);

/* A reply as glm_generate streams it: reasoning and content text in order (up to the buffer),
 * and the DONE event's stats. tu_collect_reply is the glm_event_fn that fills one. */
typedef struct tu_reply {
    char text[8192];
    size_t len;
    glm_stats done;
    /* the PROMPT events: each one's tokens in (up to 64), their total, and how many came after
     * the reply's first text */
    int n_prompt, prompt_done[64], prompt_total, prompt_after_text;
} tu_reply;
int tu_collect_reply(const glm_event *ev, void *reply);

#endif
