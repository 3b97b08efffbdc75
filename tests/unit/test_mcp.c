/* test_mcp.c: Check suite for the MCP stdio client against tests/mcp/test_mcp_server, a real
 * process: tools listed and called, errors, timeouts, crashes, garbage, paging, env. */
#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "app/tools/mcp.h"
#include "app/tools/proc.h"
#include "tests/common/check_main.h"

static char server[1024];
static char log_path[256];

static void find_server(void)
{
    const char *b = getenv("GLMCHAT_BUILDDIR");
    snprintf(server, sizeof server, "%s/tests/mcp/test_mcp_server", b ? b : ".");
    ck_assert_msg(access(server, X_OK) == 0, "no test server at %s; run through make check", server);
    snprintf(log_path, sizeof log_path, "/tmp/glmchat-test-mcp.%d.log", (int)getpid());
    unlink(log_path);
}

static void cleanup(void)
{
    unlink(log_path);
}

/* A config for the test server in mode (NULL: normal). */
static config_mcp_server *server_cfg(const char *mode, int timeout_s)
{
    static char *argv[4];
    static config_mcp_server cfg;
    argv[0] = server;
    argv[1] = mode ? "--mode" : NULL;
    argv[2] = (char *)mode;
    argv[3] = NULL;
    memset(&cfg, 0, sizeof cfg);
    cfg.name = "t";
    cfg.argv = argv;
    cfg.timeout_s = timeout_s;
    cfg.enabled = 1;
    return &cfg;
}

static mcp_client *start_ok(const char *mode)
{
    char err[1024];
    mcp_client *c = mcp_start(server_cfg(mode, 5), log_path, err, sizeof err);
    ck_assert_msg(c != NULL, "start failed: %s", err);
    return c;
}

static void expect_call(mcp_client *c, const char *tool, const char *args, int want_error, const char *want)
{
    tool_result r = {0};
    ck_assert_int_eq(mcp_call(c, tool, args, 0, NULL, &r), 0);
    ck_assert_msg(r.is_error == want_error, "%s: is_error %d: %s", tool, r.is_error, r.text);
    ck_assert_msg(strstr(r.text, want), "%s: '%s' lacks '%s'", tool, r.text, want);
    tool_result_clear(&r);
}

START_TEST(lists_and_calls_tools)
{
    mcp_client *c = start_ok(NULL);
    ck_assert_str_eq(mcp_name(c), "t");
    ck_assert_int_eq(mcp_tool_count(c), 6);
    ck_assert_str_eq(mcp_tool_get(c, 0)->name, "echo");
    ck_assert_str_eq(mcp_tool_get(c, 0)->description, "Repeats the text it is given.");
    ck_assert_ptr_nonnull(strstr(mcp_tool_get(c, 0)->schema_json, "\"required\":[\"text\"]"));
    expect_call(c, "echo", "{\"text\":\"hi \\u00e9\\n\"}", 0, "hi \xC3\xA9\n");
    expect_call(c, "add", "{\"a\":2,\"b\":40}", 0, "42");
    expect_call(c, "fail", "{}", 1, "this tool always fails");
    expect_call(c, "nope", "{}", 1, "the MCP server 't' answered tools/call with error -32602: unknown tool");
    expect_call(c, "echo", "[]", 1, "must be a JSON object");
    ck_assert(mcp_alive(c));
    mcp_stop(c);
}
END_TEST

START_TEST(registers_tools_as_server__tool)
{
    mcp_client *c = start_ok(NULL);
    tool_registry *reg = tools_new();
    char err[512];
    ck_assert_int_eq(mcp_register_tools(c, reg, 0, err, sizeof err), 0);
    ck_assert_int_eq(tools_count(reg), 6);
    const tool_def *d = tools_find(reg, "t__echo");
    ck_assert_ptr_nonnull(d);
    ck_assert_int_eq(d->risky, 1);
    tool_policy p;
    tool_policy_init(&p, CONFIG_APPROVAL_AUTO, NULL, NULL);
    tool_result r = {0};
    ck_assert_int_eq(tools_call(reg, &p, "t__echo", "{\"text\":\"through the registry\"}", NULL, &r), 0);
    ck_assert_str_eq(r.text, "through the registry");
    tool_result_clear(&r);
    tool_policy_clear(&p);
    tools_free(reg);
    mcp_stop(c);
}
END_TEST

START_TEST(a_slow_call_times_out_and_the_server_survives)
{
    mcp_client *c = start_ok(NULL);
    tool_result r = {0};
    long long t0 = proc_now_ms();
    ck_assert_int_eq(mcp_call(c, "slow", "{\"ms\":3000}", 1000, NULL, &r), 0);
    ck_assert_int_lt(proc_now_ms() - t0, 2500);
    ck_assert_int_eq(r.is_error, 1);
    ck_assert_msg(strstr(r.text, "the MCP server 't' did not answer tools/call within 1 s"), "%s", r.text);
    tool_result_clear(&r);
    /* The late answer to the slow call must not be taken for the next call's. */
    expect_call(c, "echo", "{\"text\":\"after\"}", 0, "after");
    mcp_stop(c);
}
END_TEST

static volatile sig_atomic_t cancel_flag;

START_TEST(a_call_stops_when_canceled)
{
    mcp_client *c = start_ok(NULL);
    tool_result r = {0};
    cancel_flag = 1;
    long long t0 = proc_now_ms();
    ck_assert_int_eq(mcp_call(c, "slow", "{\"ms\":3000}", 0, &cancel_flag, &r), 0);
    ck_assert_int_lt(proc_now_ms() - t0, 1000);
    ck_assert_msg(strstr(r.text, "canceled by the user"), "%s", r.text);
    tool_result_clear(&r);
    cancel_flag = 0;
    mcp_stop(c);
}
END_TEST

START_TEST(a_crash_mid_call_is_reported_with_its_last_words)
{
    mcp_client *c = start_ok(NULL);
    tool_result r = {0};
    ck_assert_int_eq(mcp_call(c, "crash", "{}", 0, NULL, &r), 0);
    ck_assert_int_eq(r.is_error, 1);
    ck_assert_msg(strstr(r.text, "the MCP server 't' exited with status 3"), "%s", r.text);
    ck_assert_msg(strstr(r.text, "crashing on purpose"), "%s", r.text);
    tool_result_clear(&r);
    ck_assert(!mcp_alive(c));
    expect_call(c, "echo", "{\"text\":\"x\"}", 1, "cannot be used until glmchat restarts it");
    mcp_stop(c);
}
END_TEST

START_TEST(start_failures_are_clear)
{
    char err[1024];
    ck_assert_ptr_null(mcp_start(server_cfg("crash-on-start", 5), log_path, err, sizeof err));
    ck_assert_msg(strstr(err, "the MCP server 't' exited with status 3"), "%s", err);
    ck_assert_msg(strstr(err, "simulated crash on start"), "%s", err);

    long long t0 = proc_now_ms();
    ck_assert_ptr_null(mcp_start(server_cfg("hang-on-init", 1), log_path, err, sizeof err));
    ck_assert_int_lt(proc_now_ms() - t0, 3000);
    ck_assert_msg(strstr(err, "the MCP server 't' did not answer initialize within 1 s"), "%s", err);

    ck_assert_ptr_null(mcp_start(server_cfg("garbage", 5), log_path, err, sizeof err));
    ck_assert_msg(strstr(err, "wrote a line that is not JSON-RPC on its stdout: \"this is not json"), "%s", err);

    config_mcp_server *cfg = server_cfg(NULL, 5);
    char *missing[] = {"/nonexistent/mcp-server", NULL};
    cfg->argv = missing;
    ck_assert_ptr_null(mcp_start(cfg, log_path, err, sizeof err));
    ck_assert_msg(strstr(err, "MCP server 't': cannot run /nonexistent/mcp-server: No such file"), "%s", err);
    ck_assert_msg(strstr(err, "check 'command' in its [mcp.t] section"), "%s", err);
}
END_TEST

START_TEST(hung_servers_are_not_left_behind)
{
    char err[1024];
    ck_assert_ptr_null(mcp_start(server_cfg("hang-on-init", 1), log_path, err, sizeof err));
    /* Every child we started has been reaped: nothing is left to wait for. */
    ck_assert_int_eq(waitpid(-1, NULL, WNOHANG), -1);
}
END_TEST

START_TEST(server_requests_notifications_and_pages)
{
    mcp_client *c = start_ok("chatty");
    ck_assert_int_eq(mcp_tool_count(c), 6);
    expect_call(c, "echo", "{\"text\":\"despite the chatter\"}", 0, "despite the chatter");
    mcp_stop(c);
    c = start_ok("paged");
    ck_assert_int_eq(mcp_tool_count(c), 6);
    ck_assert_str_eq(mcp_tool_get(c, 5)->name, "env");
    mcp_stop(c);
}
END_TEST

START_TEST(env_and_cwd_reach_the_server)
{
    config_mcp_server *cfg = server_cfg(NULL, 5);
    char *env[] = {"GLMCHAT_TEST_MCP_VAR=from the config", NULL};
    cfg->env = env;
    cfg->n_env = 1;
    cfg->cwd = "/";
    char err[1024];
    mcp_client *c = mcp_start(cfg, log_path, err, sizeof err);
    ck_assert_msg(c != NULL, "%s", err);
    expect_call(c, "env", "{\"name\":\"GLMCHAT_TEST_MCP_VAR\"}", 0, "from the config");
    mcp_stop(c);
    FILE *f = fopen(log_path, "r");
    ck_assert_ptr_nonnull(f);
    char line[256] = "";
    ck_assert_ptr_nonnull(fgets(line, sizeof line, f));
    fclose(f);
    ck_assert_str_eq(line, "test_mcp_server: normal started\n");
}
END_TEST

int main(void)
{
    Suite *s = suite_create("mcp");
    TCase *tc = tcase_create("stdio");
    tcase_add_checked_fixture(tc, find_server, cleanup);
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, lists_and_calls_tools);
    tcase_add_test(tc, registers_tools_as_server__tool);
    tcase_add_test(tc, a_slow_call_times_out_and_the_server_survives);
    tcase_add_test(tc, a_call_stops_when_canceled);
    tcase_add_test(tc, a_crash_mid_call_is_reported_with_its_last_words);
    tcase_add_test(tc, start_failures_are_clear);
    tcase_add_test(tc, hung_servers_are_not_left_behind);
    tcase_add_test(tc, server_requests_notifications_and_pages);
    tcase_add_test(tc, env_and_cwd_reach_the_server);
    suite_add_tcase(s, tc);
    return test_run_suite(s);
}
