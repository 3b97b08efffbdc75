/* test_engine_log.c: the engine speaks only through glm_engine_params.log: a capturing callback
 * sees the settings (verbose), the template and prompt-cache notes; stderr stays empty. */
#include <check.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "session.h"
#include "test_engine_util.h"
#include "tests/common/check_main.h"

#define MAX_LINES 64

typedef struct captured {
    int n;
    int level[MAX_LINES];
    char line[MAX_LINES][1024];
} captured;

static void capture(void *user, int level, const char *msg)
{
    captured *c = user;
    if (c->n >= MAX_LINES)
        return;
    c->level[c->n] = level;
    snprintf(c->line[c->n], sizeof c->line[c->n], "%s", msg);
    c->n++;
}

/* The first line holding `part` at `level`, or -1. */
static int find_line(const captured *c, int level, const char *part)
{
    for (int i = 0; i < c->n; i++)
        if (c->level[i] == level && strstr(c->line[i], part))
            return i;
    return -1;
}

/* Runs with fd 2 sent to a file; *bytes: what was written there. */
static int stderr_to_file(const char *path)
{
    fflush(stderr);
    int saved = dup(2);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_ge(dup2(fd, 2), 0);
    close(fd);
    return saved;
}

static long stderr_back(int saved, const char *path)
{
    fflush(stderr);
    ck_assert_int_ge(dup2(saved, 2), 0);
    close(saved);
    struct stat sb;
    ck_assert_int_eq(stat(path, &sb), 0);
    return (long)sb.st_size;
}

START_TEST(settings_and_notes_reach_the_callback_and_nothing_stderr)
{
    char *dir = tu_tmpdir();
    char kept[4096], junk[4200], err_path[4200];
    snprintf(kept, sizeof kept, "%s/kept", dir);
    snprintf(err_path, sizeof err_path, "%s/stderr", dir);
    ck_assert_int_eq(mkdir(kept, 0700), 0);
    /* a damaged kept-state file: the cache refuses it with a note while indexing the dir */
    snprintf(junk, sizeof junk, "%s/0123456789abcdef-4.kept", kept);
    FILE *f = fopen(junk, "wb");
    ck_assert_ptr_nonnull(f);
    fputs("not a kept state", f);
    fclose(f);

    /* a model whose chat template is not a revision glmchat renders: a note at open */
    char model[4200], tmpl[4300];
    snprintf(model, sizeof model, "%s/model", dir);
    ck_assert_int_eq(mkdir(model, 0700), 0);
    ck_assert_int_eq(tu_copy_model(tu_fixture("tiny-A"), model), 0);
    snprintf(tmpl, sizeof tmpl, "%s/chat_template.jinja", model);
    f = fopen(tmpl, "w");
    ck_assert_ptr_nonnull(f);
    fputs("{% for m in messages %}{{ m.content }}{% endfor %}", f);
    fclose(f);

    captured c = {0};
    glm_engine_params p = glm_engine_default_params();
    p.model_dir = model;
    p.backend = GLM_BACKEND_CPU;
    p.n_threads = 2;
    p.context = 300;
    p.prompt_cache_dir = kept;
    p.verbose = 1;
    p.log = capture;
    p.log_user = &c;
    int saved = stderr_to_file(err_path);
    glm_error err = {0};
    glm_engine *e = glm_engine_open(&p, &err);
    glm_session *s = e ? glm_session_new(e, &err) : NULL;
    int32_t *ids = tu_some_tokens(20, 7, 256);
    glm_status st = s ? glm_session_feed(s, ids, 20, NULL, &err) : GLM_ERR_ARG;
    glm_session_free(s);
    glm_engine_close(e);
    long written = stderr_back(saved, err_path);
    free(ids);
    ck_assert_msg(e != NULL && st == GLM_OK, "%s", err.message);
    for (int i = 0; i < c.n; i++)
        printf("  log %d: %s\n", c.level[i], c.line[i]);
    ck_assert_msg(written == 0, "the engine wrote %ld bytes to stderr", written);
    /* verbose: the settings the engine resolved, once */
    int at = find_line(&c, GLM_LOG_INFO, "engine: cpu backend, context 300 tokens, kv cache f32, "
                                         "dense bf16, drafting off, prompt cache ");
    ck_assert_msg(at >= 0, "no settings line among %d", c.n);
    ck_assert_ptr_nonnull(strstr(c.line[at], kept));
    ck_assert_msg(strstr(c.line[at], ", prefill products exact"), "%s", c.line[at]);
    /* the notes: the refused file, named */
    ck_assert_msg(find_line(&c, GLM_LOG_WARN, "0123456789abcdef-4.kept refused") >= 0,
                  "no note of the refused file among %d lines", c.n);
    ck_assert_msg(find_line(&c, GLM_LOG_WARN, "chat template") >= 0,
                  "no note of the model's chat template among %d lines", c.n);
    tu_rmtree(dir);
    free(dir);
}
END_TEST

START_TEST(quiet_without_verbose_and_without_a_callback)
{
    captured c = {0};
    glm_engine_params p = glm_engine_default_params();
    p.model_dir = tu_fixture("tiny-A");
    p.backend = GLM_BACKEND_CPU;
    p.n_threads = 2;
    p.log = capture;
    p.log_user = &c;
    glm_error err = {0};
    glm_engine *e = glm_engine_open(&p, &err);
    ck_assert_msg(e != NULL, "%s", err.message);
    glm_engine_close(e);
    ck_assert_int_eq(find_line(&c, GLM_LOG_INFO, "engine:"), -1);
    /* no callback: the lines are dropped, and still nothing reaches stderr */
    char *dir = tu_tmpdir();
    char err_path[4200];
    snprintf(err_path, sizeof err_path, "%s/stderr", dir);
    p.log = NULL;
    p.verbose = 1;
    int saved = stderr_to_file(err_path);
    e = glm_engine_open(&p, &err);
    glm_engine_close(e);
    long written = stderr_back(saved, err_path);
    ck_assert_msg(e != NULL, "%s", err.message);
    ck_assert_int_eq(written, 0);
    tu_rmtree(dir);
    free(dir);
}
END_TEST

START_TEST(bad_enums_are_refused_by_name)
{
    glm_engine_params p = glm_engine_default_params();
    p.model_dir = tu_fixture("tiny-A");
    p.backend = GLM_BACKEND_CPU;
    glm_error err = {0};
    p.cuda.gemm = (glm_cuda_gemm)7;
    ck_assert_ptr_null(glm_engine_open(&p, &err));
    ck_assert_msg(strstr(err.message, "cuda.gemm 7"), "%s", err.message);
    p.cuda.gemm = GLM_CUDA_GEMM_DEFAULT;
    p.draft = (glm_draft)9;
    ck_assert_ptr_null(glm_engine_open(&p, &err));
    ck_assert_msg(strstr(err.message, "draft 9"), "%s", err.message);
    p.draft = GLM_DRAFT_DEFAULT;
    /* a prefill chunk that is no power of two, or out of range */
    const int chunks[] = {1000, 64, 32768, -128};
    for (int i = 0; i < 4; i++) {
        p.cuda.chunk = chunks[i];
        ck_assert_ptr_null(glm_engine_open(&p, &err));
        char want[64];
        snprintf(want, sizeof want, "cuda.chunk %d is not a power of two from 128 to %d",
                 chunks[i], GLM_CUDA_CHUNK_LIMIT);
        ck_assert_msg(strstr(err.message, want), "%s", err.message);
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("engine_log");
    TCase *tc = tcase_create("engine_log");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, settings_and_notes_reach_the_callback_and_nothing_stderr);
    tcase_add_test(tc, quiet_without_verbose_and_without_a_callback);
    tcase_add_test(tc, bad_enums_are_refused_by_name);
    suite_add_tcase(s, tc);
    return test_run_suite(s);
}
