/* test_config.c: Check suite for the config file: the format, every error naming file:line and
 * the key, environment overrides and the precedence flags > env > file > defaults. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "app/config.h"
#include "tests/common/check_main.h"
#include "tests/common/files.h"

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
    expect_error("think = on\nfrobnicate = 1\n", "cfg:2: unknown key 'frobnicate'; the keys are");
    expect_error("temprature = 0.5\n", "cfg:1: unknown key 'temprature' (did you mean 'temperature'?); the keys are");
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

START_TEST(files_missing_unreadable_and_loaded)
{
    ck_assert_ptr_nonnull(mkdtemp(tmpdir));
    char path[256];
    snprintf(path, sizeof path, "%s/config", tmpdir);
    app_config c;
    char err[512];
    config_init(&c);
    ck_assert_int_eq(config_load_file(&c, path, err, sizeof err), 0); /* missing: defaults */
    test_write_text(path, "temperature = 0.2\nbogus = 1\n");
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
    test_write_text(path, "dense = q4\n");
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
    ck_assert_msg(config_engine_settings(&c, NULL, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(c.dense, GLM_DENSE_Q4);
    config_free(&c);
    ck_assert_msg(config_engine_settings(&c, &g, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(c.dense, GLM_DENSE_BF16);
    config_free(&c);
    unsetenv("GLMCHAT_DENSE");
    setenv("GLMCHAT_CUDA_DENSE", "q3", 1);
    ck_assert_int_eq(config_engine_settings(&c, NULL, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "GLMCHAT_CUDA_DENSE: 'dense' takes bf16 or q4, not 'q3'"), "%s", err);
    config_free(&c);
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
    test_write_text(path, "model = /from/file\nbackend = cuda\ntemperature = 0.3\ntop_k = 7\n");
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

/* Every variable the engine and its kernels used to read, now read here only: each lands in
 * glm_engine_params (config_engine_params), the same through config_load and through the
 * commands without a config file, and a bad value names the variable. */
static const char *const engine_vars[] = {
    "GLMCHAT_CONTEXT", "GLMCHAT_CUDA_CONTEXT", "GLMCHAT_KV_CACHE", "GLMCHAT_CUDA_KV",
    "GLMCHAT_DENSE", "GLMCHAT_CUDA_DENSE", "GLMCHAT_DRAFT", "GLMCHAT_PROMPT_CACHE_MB",
    "GLMCHAT_PROMPT_CACHE_DIR", "GLMCHAT_PROMPT_CACHE_DISK_MB", "GLMCHAT_RDMA_HCA",
    "GLMCHAT_RDMA_GID_INDEX", "GLMCHAT_VERBOSE", "GLMCHAT_CUDA_VERBOSE", "GLMCHAT_CUDA_KV_INDEX",
    "GLMCHAT_CUDA_GRAPH", "GLMCHAT_CUDA_PDL", "GLMCHAT_CUDA_GEMM", "GLMCHAT_CUDA_CHUNK",
};

static void unset_engine_vars(void)
{
    for (size_t i = 0; i < sizeof engine_vars / sizeof *engine_vars; i++)
        unsetenv(engine_vars[i]);
}

START_TEST(engine_variables_become_params)
{
    char err[1024];
    app_config c;
    unset_engine_vars();
    /* nothing set: the params are the defaults */
    ck_assert_msg(config_engine_settings(&c, NULL, err, sizeof err) == 0, "%s", err);
    glm_engine_params p = glm_engine_default_params(), d = glm_engine_default_params();
    config_engine_params(&c, &p);
    ck_assert_int_eq(memcmp(&p, &d, sizeof p), 0);
    config_free(&c);

    setenv("GLMCHAT_CUDA_CONTEXT", "4096", 1);
    setenv("GLMCHAT_CUDA_KV", "bf16", 1);
    setenv("GLMCHAT_DRAFT", "mtp", 1);
    setenv("GLMCHAT_PROMPT_CACHE_MB", "0", 1);
    setenv("GLMCHAT_PROMPT_CACHE_DIR", "/kept", 1);
    setenv("GLMCHAT_PROMPT_CACHE_DISK_MB", "3", 1);
    setenv("GLMCHAT_RDMA_HCA", "rocep1s0f0,rocep2s0f0", 1);
    setenv("GLMCHAT_RDMA_GID_INDEX", "3", 1);
    setenv("GLMCHAT_CUDA_VERBOSE", "1", 1);
    setenv("GLMCHAT_CUDA_KV_INDEX", "f32", 1);
    setenv("GLMCHAT_CUDA_GRAPH", "0", 1);
    setenv("GLMCHAT_CUDA_PDL", "0", 1);
    setenv("GLMCHAT_CUDA_GEMM", "show", 1);
    setenv("GLMCHAT_CUDA_CHUNK", "4096", 1);
    setenv("GLMCHAT_TEMPERATURE", "hot", 1); /* not an engine key: those commands ignore it */
    ck_assert_msg(config_engine_settings(&c, NULL, err, sizeof err) == 0, "%s", err);
    config_engine_params(&c, &p);
    ck_assert_int_eq(p.context, 4096);
    ck_assert_int_eq(p.kv_cache, GLM_KV_CACHE_BF16);
    ck_assert_int_eq(p.draft, GLM_DRAFT_MTP);
    ck_assert(p.prompt_cache_bytes < 0); /* 0 MB: off */
    ck_assert_str_eq(p.prompt_cache_dir, "/kept");
    ck_assert(p.prompt_cache_disk_bytes == (int64_t)3 << 20);
    ck_assert_str_eq(p.rdma_hca, "rocep1s0f0,rocep2s0f0");
    ck_assert_int_eq(p.rdma_gid_given, 1);
    ck_assert_int_eq(p.rdma_gid_index, 3);
    ck_assert_int_eq(p.verbose, 1);
    ck_assert_int_eq(p.cuda.kv_index, GLM_KV_CACHE_F32);
    ck_assert_int_eq(p.cuda.graph_off, 1);
    ck_assert_int_eq(p.cuda.pdl_off, 1);
    ck_assert_int_eq(p.cuda.gemm, GLM_CUDA_GEMM_SHOW);
    ck_assert_int_eq(p.cuda.chunk, 4096);
    config_free(&c);
    /* the newer names win over the older ones */
    setenv("GLMCHAT_CONTEXT", "512", 1);
    setenv("GLMCHAT_VERBOSE", "off", 1);
    ck_assert_msg(config_engine_settings(&c, NULL, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(c.context, 512);
    ck_assert_int_eq(c.verbose, 0);
    config_free(&c);
    /* the whole chain reads them too (and there GLMCHAT_TEMPERATURE counts) */
    ck_assert_int_eq(config_load(&c, NULL, NULL, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "GLMCHAT_TEMPERATURE"), "%s", err);
    config_free(&c);
    unsetenv("GLMCHAT_TEMPERATURE");
    ck_assert_msg(config_load(&c, NULL, NULL, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(c.cuda.gemm, GLM_CUDA_GEMM_SHOW);
    ck_assert_int_eq(c.draft, GLM_DRAFT_MTP);
    config_free(&c);
    /* a bad value is refused naming the variable, never taken as a default */
    static const char *const bad[][3] = {
        {"GLMCHAT_RDMA_GID_INDEX", "3x",
         "GLMCHAT_RDMA_GID_INDEX: 'rdma_gid_index' takes a whole number from 0 to 255, not '3x'"},
        {"GLMCHAT_RDMA_GID_INDEX", "-1", "not '-1'"},
        {"GLMCHAT_CUDA_GEMM", "auto", "'cuda_gemm' takes fixed, show, nosplit, cublas, three or onepart, not 'auto'"},
        {"GLMCHAT_CUDA_GRAPH", "2", "GLMCHAT_CUDA_GRAPH: 'cuda_graph' takes on or off, not '2'"},
        {"GLMCHAT_CUDA_CHUNK", "32768",
         "GLMCHAT_CUDA_CHUNK: 'cuda_chunk' takes a whole number from 0 to 16384, not '32768'"},
        {"GLMCHAT_CUDA_KV_INDEX", "fp4", "GLMCHAT_CUDA_KV_INDEX: 'cuda_kv_index' takes fp8, bf16 or f32"},
        {"GLMCHAT_DRAFT", "yes", "GLMCHAT_DRAFT: 'draft' takes off, copy or mtp, not 'yes'"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const char *was = getenv(bad[i][0]);
        char keep[256];
        snprintf(keep, sizeof keep, "%s", was ? was : "");
        setenv(bad[i][0], bad[i][1], 1);
        ck_assert_int_eq(config_engine_settings(&c, NULL, err, sizeof err), -1);
        ck_assert_msg(strstr(err, bad[i][2]), "%s=%s: %s", bad[i][0], bad[i][1], err);
        config_free(&c);
        setenv(bad[i][0], keep, 1);
    }
    unset_engine_vars();
}
END_TEST

START_TEST(engine_keys_in_the_file_and_their_precedence)
{
    char dir[] = "/tmp/glmchat-test-config.XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char path[256], err[1024];
    snprintf(path, sizeof path, "%s/config", dir);
    unset_engine_vars();
    test_write_text(path, "cuda_gemm = nosplit\ncuda_graph = off\ndraft = copy\nverbose = on\n"
                     "rdma_gid_index = 0\ncuda_chunk = 2048\n");
    app_config c;
    ck_assert_msg(config_load(&c, path, NULL, err, sizeof err) == 0, "%s", err);
    glm_engine_params p = glm_engine_default_params();
    config_engine_params(&c, &p);
    ck_assert_int_eq(p.cuda.gemm, GLM_CUDA_GEMM_NOSPLIT);
    ck_assert_int_eq(p.cuda.graph_off, 1);
    ck_assert_int_eq(p.cuda.pdl_off, 0);
    ck_assert_int_eq(p.draft, GLM_DRAFT_COPY);
    ck_assert_int_eq(p.verbose, 1);
    ck_assert_int_eq(p.rdma_gid_given, 1); /* entry 0 is an entry, not "unset" */
    ck_assert_int_eq(p.rdma_gid_index, 0);
    ck_assert_int_eq(p.cuda.chunk, 2048);
    config_free(&c);
    /* the variable beats the file */
    setenv("GLMCHAT_CUDA_GEMM", "show", 1);
    setenv("GLMCHAT_DRAFT", "off", 1);
    ck_assert_msg(config_load(&c, path, NULL, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(c.cuda.gemm, GLM_CUDA_GEMM_SHOW);
    ck_assert_int_eq(c.draft, GLM_DRAFT_OFF);
    config_free(&c);
    setenv("GLMCHAT_CUDA_GEMM", "three", 1);
    ck_assert_msg(config_load(&c, path, NULL, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(c.cuda.gemm, GLM_CUDA_GEMM_THREE);
    config_free(&c);
    /* the last of cuda_gemm's values maps to the last mode */
    setenv("GLMCHAT_CUDA_GEMM", "onepart", 1);
    ck_assert_msg(config_load(&c, path, NULL, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(c.cuda.gemm, GLM_CUDA_GEMM_ONEPART);
    config_free(&c);
    unset_engine_vars();
    /* the developers' switches are marked, the users' keys not */
    ck_assert(config_key_is_dev("cuda_gemm") && config_key_is_dev("cuda_pdl") &&
              config_key_is_dev("cuda_chunk") &&
              config_key_is_dev("verbose") && config_key_is_dev("cuda_graph"));
    ck_assert(!config_key_is_dev("context") && !config_key_is_dev("rdma_hca") &&
              !config_key_is_dev("nonsense"));
    unlink(path);
    rmdir(dir);
}
END_TEST

/* cuda_attend chose the decode latent attention's kernel until its tensor-core form lost its
 * timed run and was deleted: the key is refused by name like any unknown key, and its variable,
 * like any GLMCHAT_* variable that names no key, is read by nothing. */
START_TEST(the_removed_cuda_attend_key_is_unknown)
{
    expect_error("verbose = on\ncuda_attend = mma\n", "cfg:2: unknown key 'cuda_attend'");
    expect_error("cuda_attend = split\n", "cfg:1: unknown key 'cuda_attend'");
    ck_assert(!config_key_is_dev("cuda_attend"));
    char err[1024];
    app_config c;
    unset_engine_vars();
    setenv("GLMCHAT_CUDA_ATTEND", "mma", 1);
    ck_assert_msg(config_engine_settings(&c, NULL, err, sizeof err) == 0, "%s", err);
    glm_engine_params p = glm_engine_default_params(), d = glm_engine_default_params();
    config_engine_params(&c, &p);
    ck_assert_int_eq(memcmp(&p, &d, sizeof p), 0);
    config_free(&c);
    unsetenv("GLMCHAT_CUDA_ATTEND");
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
    tcase_add_test(tc, engine_variables_become_params);
    tcase_add_test(tc, engine_keys_in_the_file_and_their_precedence);
    tcase_add_test(tc, the_removed_cuda_attend_key_is_unknown);
    suite_add_tcase(s, tc);
    return test_run_suite(s);
}
