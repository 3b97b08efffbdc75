/* test_config.c: Check suite for the config file: the format, every error naming file:line and
 * the key, environment overrides and the precedence flags > env > file > defaults. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "app/config.h"

static int parse(app_config *c, const char *text, char *err, size_t n)
{
    config_init(c);
    return config_parse(c, "cfg", text, strlen(text), err, n);
}

static void expect_error(const char *text, const char *want)
{
    app_config c;
    char err[1024] = "";
    ck_assert_msg(parse(&c, text, err, sizeof err) == -1, "accepted: %s", text);
    ck_assert_msg(strstr(err, want) != NULL, "error '%s' lacks '%s'", err, want);
    config_free(&c);
}

START_TEST(defaults_are_documented_values)
{
    app_config c;
    config_init(&c);
    ck_assert_float_lt(c.sampling.temperature, 0.0f); /* unset: the model's own */
    ck_assert_float_lt(c.sampling.top_p, 0.0f);
    ck_assert_int_lt(c.sampling.top_k, 0);
    ck_assert_int_eq(c.sampling.max_tokens, 0);
    ck_assert_int_eq(c.think, 1);
    ck_assert_int_eq(c.clear_thinking, 0); /* earlier reasoning kept, as the recipe serves it */
    ck_assert_int_eq(c.effort, GLM_EFFORT_MAX);
    ck_assert_int_eq(c.tool_timeout_s, 30);
    ck_assert_int_eq(c.approval, CONFIG_APPROVAL_ASK);
    ck_assert_int_eq(c.seed_set, 0);
    ck_assert_ptr_null(c.model_dir);
    config_free(&c);
}
END_TEST

START_TEST(every_top_level_key_is_read)
{
    const char *text = "# a comment\n"
                       "; another\n"
                       "\n"
                       "model = /models/glm flash\n"
                       "backend=cpu\n"
                       "  peer = 10.0.0.2:7000  \n"
                       "transport = tcp\n"
                       "threads = 4\n"
                       "temperature = 0.6\n"
                       "top_p = 0.9\n"
                       "top_k = 40\n"
                       "min_p = 0.05\n"
                       "seed = 18446744073709551615\n"
                       "max_tokens = 2048\n"
                       "think = off\n"
                       "clear_thinking = on\n"
                       "effort = low\n"
                       "system_prompt = \"Be brief.\\nSay \\\"hi\\\".\" # trailing comment\n"
                       "tools = no\n"
                       "tool_timeout = 5\n"
                       "workspace = /tmp\n"
                       "approval = deny\n";
    app_config c;
    char err[512];
    ck_assert_msg(parse(&c, text, err, sizeof err) == 0, "%s", err);
    ck_assert_str_eq(c.model_dir, "/models/glm flash");
    ck_assert_str_eq(c.backend, "cpu");
    ck_assert_str_eq(c.peer, "10.0.0.2:7000");
    ck_assert_str_eq(c.transport, "tcp");
    ck_assert_int_eq(c.threads, 4);
    ck_assert_float_eq_tol(c.sampling.temperature, 0.6f, 1e-6);
    ck_assert_float_eq_tol(c.sampling.top_p, 0.9f, 1e-6);
    ck_assert_int_eq(c.sampling.top_k, 40);
    ck_assert_float_eq_tol(c.sampling.min_p, 0.05f, 1e-6);
    ck_assert(c.sampling.seed == UINT64_MAX);
    ck_assert_int_eq(c.seed_set, 1);
    ck_assert_int_eq(c.sampling.max_tokens, 2048);
    ck_assert_int_eq(c.think, 0);
    ck_assert_int_eq(c.clear_thinking, 1);
    ck_assert_int_eq(c.effort, GLM_EFFORT_LOW);
    ck_assert_str_eq(c.system_prompt, "Be brief.\nSay \"hi\".");
    ck_assert_int_eq(c.tools_enabled, 0);
    ck_assert_int_eq(c.tool_timeout_s, 5);
    ck_assert_str_eq(c.workspace, "/tmp");
    ck_assert_int_eq(c.approval, CONFIG_APPROVAL_DENY);
    config_free(&c);
}
END_TEST

START_TEST(bare_values_keep_hash_and_last_key_wins)
{
    app_config c;
    char err[512];
    ck_assert_int_eq(parse(&c, "system_prompt = use C#freely\r\nthink = on\nthink = false\n", err, sizeof err), 0);
    ck_assert_str_eq(c.system_prompt, "use C#freely");
    ck_assert_int_eq(c.think, 0);
    config_free(&c);
}
END_TEST

START_TEST(inline_comments_after_values)
{
    app_config c;
    char err[512];
    const char *text = "temperature = 0.3  # cooler\n"
                       "max_tokens = 64\t# short replies\n"
                       "model = /m/C#   #the model\n"
                       "system_prompt = \"keep # inside\"  # but not this\n";
    ck_assert_msg(parse(&c, text, err, sizeof err) == 0, "%s", err);
    ck_assert_float_eq_tol(c.sampling.temperature, 0.3, 1e-6);
    ck_assert_int_eq(c.sampling.max_tokens, 64);
    ck_assert_str_eq(c.model_dir, "/m/C#");
    ck_assert_str_eq(c.system_prompt, "keep # inside");
    config_free(&c);
    expect_error("model = # only a comment\n", "cfg:1: 'model' takes a non-empty value");
}
END_TEST

START_TEST(mcp_sections_and_keys)
{
    const char *text = "tool_timeout = 12\n"
                       "[mcp.files]\n"
                       "command = /usr/bin/server --root \"/srv/my files\" 'a b' c\\ d\n"
                       "env.TOKEN = abc=1\n"
                       "env.MODE = x\n"
                       "cwd = /tmp\n"
                       "trust = yes\n"
                       "[mcp.Other-2]\n"
                       "command = other\n"
                       "timeout = 3\n"
                       "enabled = no\n";
    app_config c;
    char err[512];
    ck_assert_msg(parse(&c, text, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(c.n_mcp, 2);
    const config_mcp_server *m = config_find_mcp(&c, "files");
    ck_assert_ptr_nonnull(m);
    ck_assert_str_eq(m->argv[0], "/usr/bin/server");
    ck_assert_str_eq(m->argv[1], "--root");
    ck_assert_str_eq(m->argv[2], "/srv/my files");
    ck_assert_str_eq(m->argv[3], "a b");
    ck_assert_str_eq(m->argv[4], "c d");
    ck_assert_ptr_null(m->argv[5]);
    ck_assert_int_eq(m->n_env, 2);
    ck_assert_str_eq(m->env[0], "TOKEN=abc=1");
    ck_assert_str_eq(m->cwd, "/tmp");
    ck_assert_int_eq(m->trusted, 1);
    ck_assert_int_eq(m->enabled, 1);
    ck_assert_int_eq(m->timeout_s, 12); /* inherits tool_timeout */
    m = config_find_mcp(&c, "Other-2");
    ck_assert_ptr_nonnull(m);
    ck_assert_int_eq(m->timeout_s, 3);
    ck_assert_int_eq(m->enabled, 0);
    ck_assert_int_eq(m->trusted, 0);
    config_free(&c);
}
END_TEST

START_TEST(errors_name_the_line_and_the_key)
{
    expect_error("think = on\nfrobnicate = 1\n", "cfg:2: unknown key 'frobnicate'");
    expect_error("\n\ntemperature = hot\n", "cfg:3: 'temperature' takes a number from 0 to 10, not 'hot'");
    expect_error("top_p = 1.5\n", "cfg:1: 'top_p' takes a number from 0 to 1");
    expect_error("top_k = -1\n", "'top_k' takes a whole number");
    expect_error("max_tokens = 12abc\n", "'max_tokens'");
    expect_error("seed = -3\n", "'seed'");
    expect_error("backend = tpu\n", "cfg:1: 'backend' takes cpu or cuda, not 'tpu'");
    expect_error("effort = medium\n", "takes low, high or max");
    expect_error("think = maybe\n", "'think' takes on or off");
    expect_error("model =\n", "'model' takes a non-empty value");
    expect_error("just words\n", "cfg:1: expected `key = value`");
    expect_error("= 3\n", "cfg:1: a line starts with '='");
    expect_error("[mcp.x\n", "cfg:1: a section header needs a closing ']'");
    expect_error("[servers]\n", "cfg:1: unknown section [servers]");
    expect_error("[mcp.bad name]\ncommand = x\n", "cfg:1: the MCP server name 'bad name'");
    expect_error("[mcp.a]\ncommand = x\n[mcp.a]\ncommand = y\n", "cfg:3: [mcp.a] is defined twice (first at line 1)");
    expect_error("[mcp.a]\ntimeout = 5\n", "cfg:1: [mcp.a] has no 'command'");
    expect_error("[mcp.a]\ntimeout = 5\n[keys]\n", "cfg:1: [mcp.a] has no 'command'");
    expect_error("[mcp.a]\ncommand = \"x\n", "cfg:2: 'command': the quoted value has no closing");
    expect_error("[mcp.a]\ncommand = x 'y\n", "cfg:2: 'command' of [mcp.a]: the command has an unclosed ' quote");
    expect_error("[mcp.a]\ncommand = x\nport = 3\n", "cfg:3: unknown key 'port' in [mcp.a]");
    expect_error("[mcp.a]\ncommand = x\ntimeout = 0\n", "cfg:3: 'timeout' of [mcp.a] takes seconds");
    expect_error("[mcp.a]\ncommand = x\ntrust = sometimes\n", "'trust' of [mcp.a] takes yes or no");
    expect_error("[mcp.a]\ncommand = x\nenv.1X = y\n", "cfg:3: 'env.1X'");
    expect_error("[mcp.a]\ncommand =   \n", "the command is empty");
    expect_error("[keys]\ncancel = C-c\n", "cfg:1: [keys] is not supported: the TUI's keys are fixed");
    expect_error("system_prompt = \"a\\q\"\n", "cfg:1: 'system_prompt': unknown escape '\\q'");
    expect_error("system_prompt = \"a\" b\n", "text after the closing");
}
END_TEST

START_TEST(nul_bytes_are_refused)
{
    app_config c;
    char err[256];
    config_init(&c);
    ck_assert_int_eq(config_parse(&c, "cfg", "think = o\0n\n", 11, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "cfg:1: a NUL byte"));
    config_free(&c);
}
END_TEST

static char tmpdir[] = "/tmp/glmchat-test-config.XXXXXX";

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    fclose(f);
}

START_TEST(files_missing_unreadable_and_loaded)
{
    ck_assert_ptr_nonnull(mkdtemp(tmpdir));
    char path[256];
    snprintf(path, sizeof path, "%s/config", tmpdir);
    app_config c;
    char err[512];
    config_init(&c);
    ck_assert_int_eq(config_load_file(&c, path, err, sizeof err), 0); /* missing: defaults */
    write_file(path, "temperature = 0.2\nbogus = 1\n");
    ck_assert_int_eq(config_load_file(&c, path, err, sizeof err), -1);
    char want[300];
    snprintf(want, sizeof want, "%s:2: unknown key 'bogus'", path);
    ck_assert_msg(strstr(err, want), "%s", err);
    config_free(&c);
    config_init(&c);
    ck_assert_int_eq(config_load_file(&c, tmpdir, err, sizeof err), -1); /* a directory */
    ck_assert_ptr_nonnull(strstr(err, tmpdir));
    config_free(&c);
    unlink(path);
    rmdir(tmpdir);
}
END_TEST

START_TEST(dense_key_flag_and_older_variable)
{
    char dir[] = "/tmp/glmchat-test-config.XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char path[256];
    snprintf(path, sizeof path, "%s/config", dir);
    write_file(path, "dense = q4\n");
    app_config c;
    char err[512];
    unsetenv("GLMCHAT_DENSE");
    unsetenv("GLMCHAT_CUDA_DENSE");
    ck_assert_msg(config_load(&c, NULL, NULL, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(c.dense, GLM_DENSE_DEFAULT);
    config_free(&c);
    ck_assert_msg(config_load(&c, path, NULL, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(c.dense, GLM_DENSE_Q4);
    config_free(&c);
    /* the CUDA backend's older variable still counts, now read here, and the newer one wins */
    setenv("GLMCHAT_CUDA_DENSE", "bf16", 1);
    ck_assert_msg(config_load(&c, path, NULL, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(c.dense, GLM_DENSE_BF16);
    config_free(&c);
    setenv("GLMCHAT_DENSE", "q4", 1);
    ck_assert_msg(config_load(&c, path, NULL, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(c.dense, GLM_DENSE_Q4);
    config_free(&c);
    cli_globals g = {.dense = "bf16"};
    ck_assert_msg(config_load(&c, path, &g, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(c.dense, GLM_DENSE_BF16);
    config_free(&c);
    /* commands without a config file: the flag, else the variables */
    glm_dense_format d = GLM_DENSE_DEFAULT;
    ck_assert_int_eq(config_dense_setting(NULL, &d, err, sizeof err), 0);
    ck_assert_int_eq(d, GLM_DENSE_Q4);
    ck_assert_int_eq(config_dense_setting(&g, &d, err, sizeof err), 0);
    ck_assert_int_eq(d, GLM_DENSE_BF16);
    unsetenv("GLMCHAT_DENSE");
    setenv("GLMCHAT_CUDA_DENSE", "q3", 1);
    ck_assert_int_eq(config_dense_setting(NULL, &d, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "GLMCHAT_CUDA_DENSE: 'dense' takes bf16 or q4, not 'q3'"), "%s", err);
    ck_assert_int_eq(config_load(&c, NULL, NULL, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "GLMCHAT_CUDA_DENSE"), "%s", err);
    config_free(&c);
    unsetenv("GLMCHAT_CUDA_DENSE");
    unlink(path);
    rmdir(dir);
}
END_TEST

START_TEST(precedence_flags_env_file_defaults)
{
    char dir[] = "/tmp/glmchat-test-config.XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char path[256];
    snprintf(path, sizeof path, "%s/config", dir);
    write_file(path, "model = /from/file\nbackend = cuda\ntemperature = 0.3\ntop_k = 7\n");
    setenv("GLMCHAT_MODEL", "/from/env", 1);
    setenv("GLMCHAT_TEMPERATURE", "0.4", 1);
    setenv("GLMCHAT_TOP_P", "", 1); /* empty: unset */
    cli_globals g = {.model_dir = "/from/flag"};
    app_config c;
    char err[512];
    ck_assert_msg(config_load(&c, path, &g, err, sizeof err) == 0, "%s", err);
    ck_assert_str_eq(c.model_dir, "/from/flag");
    ck_assert_str_eq(c.backend, "cuda");
    ck_assert_float_eq_tol(c.sampling.temperature, 0.4f, 1e-6);
    ck_assert_int_eq(c.sampling.top_k, 7);
    ck_assert_float_lt(c.sampling.top_p, 0.0f); /* empty env: still the model's own */
    config_free(&c);

    setenv("GLMCHAT_MAX_TOKENS", "lots", 1);
    ck_assert_int_eq(config_load(&c, path, NULL, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "GLMCHAT_MAX_TOKENS: 'max_tokens' takes a whole number"), "%s", err);
    config_free(&c);
    unsetenv("GLMCHAT_MAX_TOKENS");
    unsetenv("GLMCHAT_MODEL");
    unsetenv("GLMCHAT_TEMPERATURE");
    unsetenv("GLMCHAT_TOP_P");

    ck_assert_int_eq(config_set(&c, "effort", "high", "--effort", err, sizeof err), 0);
    ck_assert_int_eq(c.effort, GLM_EFFORT_HIGH);
    ck_assert_int_eq(config_set(&c, "effort", "huge", "--effort", err, sizeof err), -1);
    ck_assert_msg(strstr(err, "--effort: 'effort' takes low, high or max, not 'huge'"), "%s", err);
    config_free(&c);
    unlink(path);
    rmdir(dir);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("config");
    TCase *tc = tcase_create("config");
    tcase_add_test(tc, defaults_are_documented_values);
    tcase_add_test(tc, every_top_level_key_is_read);
    tcase_add_test(tc, bare_values_keep_hash_and_last_key_wins);
    tcase_add_test(tc, mcp_sections_and_keys);
    tcase_add_test(tc, inline_comments_after_values);
    tcase_add_test(tc, errors_name_the_line_and_the_key);
    tcase_add_test(tc, nul_bytes_are_refused);
    tcase_add_test(tc, files_missing_unreadable_and_loaded);
    tcase_add_test(tc, precedence_flags_env_file_defaults);
    tcase_add_test(tc, dense_key_flag_and_older_variable);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
