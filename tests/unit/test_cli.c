/* test_cli.c: Check suite for the command line: global options anywhere, their checks,
 * the command table, XDG path resolution, and reading a stream whole. */
#include <check.h>
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app/cli.h"
#include "app/config.h"
#include "app/commands.h"
#include "app/paths.h"
#include "engine/glm.h"
#include "tests/common/check_main.h"

START_TEST(globals_before_and_after_command)
{
    char *argv[] = {"glmchat", "--db", "/tmp/a.db", "list", "--json", "--model=/m", "--backend", "cpu", NULL};
    cli_globals g = {0};
    int argc = cli_take_globals(8, argv, 1, &g);
    ck_assert_int_eq(argc, 3);
    ck_assert_str_eq(argv[1], "list");
    ck_assert_str_eq(argv[2], "--json");
    ck_assert_ptr_null(argv[3]);
    ck_assert_str_eq(g.db_path, "/tmp/a.db");
    ck_assert_str_eq(g.model_dir, "/m");
    ck_assert_str_eq(g.backend, "cpu");
    ck_assert_ptr_null(g.peer);
}
END_TEST

START_TEST(double_dash_stops_global_parsing)
{
    char *argv[] = {"glmchat", "chat", "--", "--db", "x", NULL};
    cli_globals g = {0};
    int argc = cli_take_globals(5, argv, 1, &g);
    ck_assert_int_eq(argc, 5);
    ck_assert_ptr_null(g.db_path);
    ck_assert_str_eq(argv[3], "--db");
}
END_TEST

START_TEST(bad_choice_and_missing_value_are_usage_errors)
{
    char *a1[] = {"glmchat", "--backend", "tpu", NULL};
    cli_globals g = {0};
    ck_assert_int_eq(cli_take_globals(3, a1, 1, &g), -1);
    char *a2[] = {"glmchat", "list", "--db", NULL};
    ck_assert_int_eq(cli_take_globals(3, a2, 1, &g), -1);
    char *a3[] = {"glmchat", "--transport=", NULL};
    ck_assert_int_eq(cli_take_globals(2, a3, 1, &g), -1);
    char *a4[] = {"glmchat", "--db=", NULL};
    ck_assert_int_eq(cli_take_globals(2, a4, 1, &g), -1);
}
END_TEST

START_TEST(engine_setting_globals_are_checked)
{
    char *a1[] = {"glmchat", "chat", "--context", "4096", "--kv-cache=bf16", NULL};
    cli_globals g = {0};
    ck_assert_int_eq(cli_take_globals(5, a1, 1, &g), 2);
    ck_assert_str_eq(g.context, "4096");
    ck_assert_str_eq(g.kv_cache, "bf16");
    app_config c;
    char err[512];
    unsetenv("GLMCHAT_CONTEXT");
    unsetenv("GLMCHAT_CUDA_CONTEXT");
    unsetenv("GLMCHAT_KV_CACHE");
    unsetenv("GLMCHAT_CUDA_KV");
    ck_assert_msg(config_engine_settings(&c, &g, err, sizeof err) == 0, "%s", err);
    glm_engine_params p = glm_engine_default_params();
    config_engine_params(&c, &p);
    config_free(&c);
    ck_assert_int_eq(p.context, 4096);
    ck_assert_int_eq(p.kv_cache, GLM_KV_CACHE_BF16);
    const char *bad[] = {"0", "-5", "1073741825", "12k", " 12", "", "0x10", "99999999999999999999"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char *a[] = {"glmchat", "--context", (char *)bad[i], NULL};
        cli_globals h = {0};
        ck_assert_msg(cli_take_globals(3, a, 1, &h) == -1, "--context '%s' was taken", bad[i]);
    }
    char *a2[] = {"glmchat", "--kv-cache", "FP8", NULL};
    ck_assert_int_eq(cli_take_globals(3, a2, 1, &g), -1);
    /* not given: the defaults (the engine's own) */
    cli_globals none = {0};
    ck_assert_msg(config_engine_settings(&c, &none, err, sizeof err) == 0, "%s", err);
    glm_engine_params q = glm_engine_default_params();
    config_engine_params(&c, &q);
    config_free(&c);
    ck_assert_int_eq(q.context, 0);
    ck_assert_int_eq(q.kv_cache, GLM_KV_CACHE_DEFAULT);
}
END_TEST

START_TEST(every_contract_command_is_in_the_table)
{
    const char *names[] = {"chat", "worker", "list", "search", "export", "import", "tokenize",
                           "detokenize", "render", "logits", "dump-tensor", "mkmodel", "quantize",
                           "bench", "check-model"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        const cli_command *c = cli_find_command(names[i]);
        ck_assert_msg(c != NULL, "command %s missing", names[i]);
        ck_assert_ptr_nonnull(c->run);
    }
    ck_assert_ptr_null(cli_find_command("nope"));
}
END_TEST

START_TEST(xdg_paths_follow_the_spec)
{
    glm_paths p;
    char err[256];
    setenv("HOME", "/home/u", 1);
    setenv("XDG_DATA_HOME", "/d", 1);
    setenv("XDG_CONFIG_HOME", "relative/ignored", 1);
    setenv("XDG_STATE_HOME", "", 1);
    unsetenv("GLMCHAT_DB");
    unsetenv("XDG_CACHE_HOME");
    ck_assert_int_eq(paths_resolve(&p, NULL, err, sizeof err), 0);
    ck_assert_str_eq(p.data_dir, "/d/glmchat");
    ck_assert_str_eq(p.db_file, "/d/glmchat/glmchat.db");
    ck_assert_str_eq(p.config_file, "/home/u/.config/glmchat/config");
    ck_assert_str_eq(p.state_dir, "/home/u/.local/state/glmchat");
    ck_assert_str_eq(p.cache_dir, "/home/u/.cache/glmchat");
    setenv("GLMCHAT_DB", "/e.db", 1);
    ck_assert_int_eq(paths_resolve(&p, NULL, err, sizeof err), 0);
    ck_assert_str_eq(p.db_file, "/e.db");
    cli_globals g = {.db_path = "/flag.db"};
    ck_assert_int_eq(paths_resolve(&p, &g, err, sizeof err), 0);
    ck_assert_str_eq(p.db_file, "/flag.db");
    unsetenv("HOME");
    unsetenv("XDG_DATA_HOME");
    ck_assert_int_eq(paths_resolve(&p, NULL, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "HOME"));
}
END_TEST

/* A stream of n bytes with NULs and every byte value, over two of the reader's first buffers. */
START_TEST(read_stream_takes_any_bytes_whole)
{
    size_t n = 3 * 65536 + 17;
    FILE *f = tmpfile();
    ck_assert_ptr_nonnull(f);
    for (size_t i = 0; i < n; i++)
        ck_assert_int_ne(fputc((int)(i * 7 % 256), f), EOF);
    rewind(f);
    size_t len = 0;
    char *text = cli_read_stream(f, &len);
    ck_assert_ptr_nonnull(text);
    ck_assert_uint_eq(len, n);
    for (size_t i = 0; i < n; i++)
        ck_assert_int_eq((unsigned char)text[i], (int)(i * 7 % 256));
    ck_assert_int_eq(text[n], '\0');
    free(text);
    fclose(f);
    /* empty: a string, not NULL */
    f = tmpfile();
    ck_assert_ptr_nonnull(f);
    text = cli_read_stream(f, &len);
    ck_assert_ptr_nonnull(text);
    ck_assert_uint_eq(len, 0);
    ck_assert_str_eq(text, "");
    free(text);
    fclose(f);
}
END_TEST

/* A failed read is NULL with the read's errno (a directory: EISDIR), as import reports it. */
START_TEST(read_stream_failure_keeps_errno)
{
    FILE *f = fopen("/", "rb");
    ck_assert_ptr_nonnull(f);
    size_t len = 99;
    errno = ENOENT; /* a stale errno must not be what is reported */
    ck_assert_ptr_null(cli_read_stream(f, &len));
    ck_assert_int_eq(errno, EISDIR);
    ck_assert_uint_eq(len, 99);
    fclose(f);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("cli");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, globals_before_and_after_command);
    tcase_add_test(tc, double_dash_stops_global_parsing);
    tcase_add_test(tc, bad_choice_and_missing_value_are_usage_errors);
    tcase_add_test(tc, engine_setting_globals_are_checked);
    tcase_add_test(tc, every_contract_command_is_in_the_table);
    tcase_add_test(tc, xdg_paths_follow_the_spec);
    tcase_add_test(tc, read_stream_takes_any_bytes_whole);
    tcase_add_test(tc, read_stream_failure_keeps_errno);
    suite_add_tcase(s, tc);
    return test_run_suite(s);
}
