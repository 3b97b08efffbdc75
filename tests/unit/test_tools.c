/* test_tools.c: Check suite for the tool registry, approvals and the five built-in tools on a
 * real scratch workspace: confinement, limits, atomic writes, commands and their timeouts. */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "app/tools/builtin.h"
#include "app/tools/proc.h"
#include "app/tools/tools.h"
#include "tests/common/check_main.h"

static char root[64];
static char outside[64];
static builtin_ctx ctx;
static tool_registry *reg;
static tool_policy policy;

static void put(const char *rel, const char *text)
{
    char p[256];
    snprintf(p, sizeof p, "%s/%s", root, rel);
    FILE *f = fopen(p, "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    fclose(f);
}

static void setup(void)
{
    strcpy(root, "/tmp/glmchat-tools.XXXXXX");
    strcpy(outside, "/tmp/glmchat-outside.XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(root));
    ck_assert_ptr_nonnull(mkdtemp(outside));
    char p[256];
    snprintf(p, sizeof p, "%s/sub", root);
    mkdir(p, 0755);
    put("hello.txt", "hello world\nsecond line\n");
    put("sub/notes.md", "alpha\nBeta gamma\nbeta delta\n");
    snprintf(p, sizeof p, "%s/secret", outside);
    FILE *f = fopen(p, "w");
    fputs("top secret\n", f);
    fclose(f);
    snprintf(p, sizeof p, "%s/escape", root);
    ck_assert_int_eq(symlink(outside, p), 0);
    char err[256];
    ck_assert_int_eq(workspace_open(&ctx.ws, root, err, sizeof err), 0);
    ctx.command_timeout_s = 10;
    reg = tools_new();
    ck_assert_int_eq(builtin_tools_add(reg, &ctx, err, sizeof err), 0);
    tool_policy_init(&policy, CONFIG_APPROVAL_AUTO, NULL, NULL);
}

static void teardown(void)
{
    tools_free(reg);
    tool_policy_clear(&policy);
    char cmd[200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' '%s'", root, outside);
    ck_assert_int_eq(system(cmd), 0);
}

/* Calls a tool; returns its result text (static), is_error in *is_error. */
static const char *call(const char *name, const char *args, int *is_error)
{
    static tool_result r;
    tool_result_clear(&r);
    ck_assert_int_eq(tools_call(reg, &policy, name, args, NULL, &r), 0);
    ck_assert_ptr_nonnull(r.text);
    *is_error = r.is_error;
    return r.text;
}

static void expect(const char *name, const char *args, int want_error, const char *want)
{
    int e;
    const char *text = call(name, args, &e);
    ck_assert_msg(e == want_error, "%s %s: is_error %d, text: %s", name, args, e, text);
    ck_assert_msg(strstr(text, want), "%s %s: '%s' lacks '%s'", name, args, text, want);
}

START_TEST(registry_offers_five_tools_with_object_schemas)
{
    int n;
    const glm_tool *t = tools_as_glm(reg, &n);
    ck_assert_int_eq(n, 5);
    const char *names[] = {"read_file", "list_directory", "search_files", "write_file", "run_command"};
    for (int i = 0; i < 5; i++) {
        ck_assert_str_eq(t[i].name, names[i]);
        cJSON *s = cJSON_Parse(t[i].parameters_json);
        ck_assert_msg(cJSON_IsObject(s), "%s schema", names[i]);
        ck_assert_str_eq(cJSON_GetObjectItem(s, "type")->valuestring, "object");
        cJSON_Delete(s);
    }
    ck_assert_int_eq(tools_find(reg, "write_file")->risky, 1);
    ck_assert_int_eq(tools_find(reg, "run_command")->risky, 1);
    ck_assert_int_eq(tools_find(reg, "read_file")->risky, 0);
    char err[200];
    tool_def dup = {"read_file", "x", "{}", 0, builtin_read_file, &ctx, NULL};
    ck_assert_int_eq(tools_add(reg, &dup, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "two tools are named 'read_file'"));
    tool_def bad = {"has space", "x", "{}", 0, builtin_read_file, &ctx, NULL};
    ck_assert_int_eq(tools_add(reg, &bad, err, sizeof err), -1);
    tool_def bad_schema = {"ok_name", "x", "[1]", 0, builtin_read_file, &ctx, NULL};
    ck_assert_int_eq(tools_add(reg, &bad_schema, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "not a JSON object"));
}
END_TEST

START_TEST(bad_calls_become_error_results)
{
    expect("no_such_tool", "{}", 1, "there is no tool named 'no_such_tool'; the tools are: read_file,");
    expect("read_file", "[1,2]", 1, "must be a JSON object");
    expect("read_file", "{not json", 1, "must be a JSON object");
    expect("read_file", "{}", 1, "the argument 'path' is required");
    expect("read_file", "{\"path\":7}", 1, "'path' must be a string");
    expect("read_file", "{\"path\":\"hello.txt\",\"offset\":-1}", 1, "'offset' must be a whole number");
    expect("read_file", "{\"path\":\"hello.txt\",\"max_bytes\":1.5}", 1, "'max_bytes' must be a whole number");
    expect("run_command", "{\"command\":\"true\",\"timeout\":100000}", 1, "'timeout' must be a whole number from 1 to 600");
}
END_TEST

START_TEST(read_file_pages_and_refuses_binaries)
{
    expect("read_file", "{\"path\":\"hello.txt\"}", 0, "hello world\nsecond line\n");
    expect("read_file", "{\"path\":\"hello.txt\",\"offset\":6,\"max_bytes\":5}", 0, "world\n[read_file: bytes 6-11 of 24; call again");
    expect("read_file", "{\"path\":\"hello.txt\",\"offset\":\"12\"}", 0, "second line\n\n[read_file: bytes 12-24 of 24]");
    put("utf8.txt", "h\xC3\xA9llo"); /* é is 2 bytes at offset 1 */
    expect("read_file", "{\"path\":\"utf8.txt\",\"max_bytes\":2}", 0, "h\n[read_file: bytes 0-1 of 6");
    char p[256];
    snprintf(p, sizeof p, "%s/bin.dat", root);
    FILE *f = fopen(p, "wb");
    fwrite("ab\0cd", 1, 5, f);
    fclose(f);
    expect("read_file", "{\"path\":\"bin.dat\"}", 1, "bin.dat is a binary file (5 bytes)");
    expect("read_file", "{\"path\":\"sub\"}", 1, "sub is a directory; use list_directory");
    expect("read_file", "{\"path\":\"nope.txt\"}", 1, "nope.txt: No such file or directory");
}
END_TEST

START_TEST(paths_stay_inside_the_workspace)
{
    char args[512];
    expect("read_file", "{\"path\":\"../../etc/passwd\"}", 1, "is outside the workspace");
    expect("read_file", "{\"path\":\"/etc/passwd\"}", 1, "is outside the workspace");
    expect("read_file", "{\"path\":\"escape/secret\"}", 1, "is outside the workspace");
    expect("list_directory", "{\"path\":\"escape\"}", 1, "is outside the workspace");
    expect("write_file", "{\"path\":\"escape/new\",\"content\":\"x\"}", 1, "is outside the workspace");
    expect("write_file", "{\"path\":\"../x\",\"content\":\"x\"}", 1, "is outside the workspace");
    /* An existing directory and file outside are refused as outside, never described. */
    const char *outside_name = strrchr(outside, '/') + 1;
    snprintf(args, sizeof args, "{\"path\":\"../%s\",\"content\":\"x\"}", outside_name);
    expect("write_file", args, 1, "is outside the workspace");
    snprintf(args, sizeof args, "{\"path\":\"../%s/secret\",\"content\":\"x\"}", outside_name);
    expect("write_file", args, 1, "is outside the workspace");
    snprintf(args, sizeof args, "{\"path\":\"%s\",\"content\":\"x\"}", outside);
    expect("write_file", args, 1, "is outside the workspace");
    expect("search_files", "{\"pattern\":\"secret\",\"path\":\"escape\"}", 1, "is outside the workspace");
    /* A missing name outside gets the same answer as an existing one: nothing tells which. */
    const char *probes[] = {"/etc/no-such-file-here", "/no-such-dir/x", "../no-such-file", "escape/no-such-file",
                            "escape/no-such-dir/x"};
    for (size_t i = 0; i < sizeof probes / sizeof probes[0]; i++) {
        snprintf(args, sizeof args, "{\"path\":\"%s\"}", probes[i]);
        expect("read_file", args, 1, "is outside the workspace");
        expect("list_directory", args, 1, "is outside the workspace");
        snprintf(args, sizeof args, "{\"path\":\"%s/new\",\"content\":\"x\"}", probes[i]);
        expect("write_file", args, 1, "is outside the workspace");
    }
    expect("read_file", "{\"path\":\"no-such-file\"}", 1, "No such file"); /* inside: said plainly */
    snprintf(args, sizeof args, "{\"path\":\"%s/hello.txt\"}", root); /* absolute but inside */
    expect("read_file", args, 0, "hello world");
    char link[256];
    snprintf(link, sizeof link, "%s/link_out", root);
    char target[256];
    snprintf(target, sizeof target, "%s/secret", outside);
    ck_assert_int_eq(symlink(target, link), 0);
    expect("write_file", "{\"path\":\"link_out\",\"content\":\"overwritten\"}", 1, "is outside the workspace");
    FILE *f = fopen(target, "r");
    char buf[64] = "";
    ck_assert_ptr_nonnull(fgets(buf, sizeof buf, f));
    fclose(f);
    ck_assert_str_eq(buf, "top secret\n");
    expect("list_directory", "{}", 0, "escape@\nhello.txt  24 bytes\nlink_out@\nsub/\n");
}
END_TEST

START_TEST(search_finds_lines_and_skips_binaries)
{
    expect("search_files", "{\"pattern\":\"beta\"}", 0, "sub/notes.md:3: beta delta\n");
    int e;
    const char *text = call("search_files", "{\"pattern\":\"beta\",\"ignore_case\":true}", &e);
    ck_assert_ptr_nonnull(strstr(text, "sub/notes.md:2: Beta gamma"));
    ck_assert_ptr_nonnull(strstr(text, "sub/notes.md:3: beta delta"));
    ck_assert_ptr_null(strstr(text, "secret")); /* the link out is not followed */
    expect("search_files", "{\"pattern\":\"l+o\",\"path\":\"hello.txt\"}", 0, "hello.txt:1: hello world");
    expect("search_files", "{\"pattern\":\"zzz\"}", 0, "no lines match /zzz/");
    expect("search_files", "{\"pattern\":\"(\"}", 1, "not a POSIX extended regular expression");
    text = call("search_files", "{\"pattern\":\"e\",\"max_results\":2}", &e);
    ck_assert_ptr_nonnull(strstr(text, "stopped at 2 matches"));
}
END_TEST

START_TEST(write_file_replaces_atomically_and_keeps_mode)
{
    expect("write_file", "{\"path\":\"sub/new.txt\",\"content\":\"fresh\\n\"}", 0, "wrote 6 bytes to sub/new.txt");
    expect("read_file", "{\"path\":\"sub/new.txt\"}", 0, "fresh\n");
    char p[256];
    snprintf(p, sizeof p, "%s/hello.txt", root);
    chmod(p, 0600);
    expect("write_file", "{\"path\":\"hello.txt\",\"content\":\"replaced\"}", 0, "wrote 8 bytes");
    struct stat st;
    ck_assert_int_eq(stat(p, &st), 0);
    ck_assert_int_eq(st.st_mode & 0777, 0600);
    expect("write_file", "{\"path\":\"no/such/dir/x\",\"content\":\"\"}", 1, "the directory of no/such/dir/x");
    expect("write_file", "{\"path\":\"sub\",\"content\":\"\"}", 1, "sub is a directory");
    expect("list_directory", "{\"path\":\"sub\"}", 0, "new.txt  6 bytes\nnotes.md"); /* no temp file left */
}
END_TEST

START_TEST(run_command_reports_status_and_output)
{
    expect("run_command", "{\"command\":\"echo out; echo err >&2; pwd\"}", 0, "out\nerr\n");
    int e;
    const char *text = call("run_command", "{\"command\":\"pwd\"}", &e);
    ck_assert_ptr_nonnull(strstr(text, root));
    ck_assert_ptr_nonnull(strstr(text, "[exit status 0]"));
    expect("run_command", "{\"command\":\"exit 3\"}", 1, "[exit status 3]");
    expect("run_command", "{\"command\":\"kill -9 $$\"}", 1, "[killed by signal 9]");
    expect("run_command", "{\"command\":\"cat\"}", 0, "[exit status 0]"); /* stdin is /dev/null */
    text = call("run_command", "{\"command\":\"head -c 100000 /dev/zero | tr '\\\\0' a\"}", &e);
    ck_assert_ptr_nonnull(strstr(text, "[output cut at 65536 of 100000 bytes]"));
}
END_TEST

START_TEST(run_command_timeout_kills_the_process_group)
{
    char pidfile[256];
    snprintf(pidfile, sizeof pidfile, "%s/bg.pid", root);
    char args[512];
    snprintf(args, sizeof args, "{\"command\":\"sleep 30 & echo $! > bg.pid; sleep 30\",\"timeout\":1}");
    long long t0 = proc_now_ms();
    expect("run_command", args, 1, "[timed out after 1 s; the command's processes were killed]");
    ck_assert_int_lt(proc_now_ms() - t0, 5000);
    FILE *f = fopen(pidfile, "r");
    ck_assert_ptr_nonnull(f);
    int pid = 0;
    ck_assert_int_eq(fscanf(f, "%d", &pid), 1);
    fclose(f);
    int gone = 0;
    for (int i = 0; i < 100 && !gone; i++) { /* the orphan is reaped by init shortly */
        gone = kill(pid, 0) != 0 && errno == ESRCH;
        if (!gone)
            usleep(20000);
    }
    ck_assert_msg(gone, "background child %d survived the timeout", pid);
}
END_TEST

START_TEST(background_child_does_not_hold_the_call)
{
    long long t0 = proc_now_ms();
    expect("run_command", "{\"command\":\"sleep 20 & echo started\",\"timeout\":10}", 0, "started\n[exit status 0]");
    ck_assert_int_lt(proc_now_ms() - t0, 3000);
}
END_TEST

static volatile sig_atomic_t cancel_now;

START_TEST(run_command_stops_when_canceled)
{
    tool_result r = {0};
    cancel_now = 1;
    long long t0 = proc_now_ms();
    ck_assert_int_eq(tools_call(reg, &policy, "run_command", "{\"command\":\"sleep 20\"}", &cancel_now, &r), 0);
    ck_assert_int_lt(proc_now_ms() - t0, 3000);
    ck_assert_ptr_nonnull(strstr(r.text, "[canceled by the user"));
    tool_result_clear(&r);
    cancel_now = 0;
}
END_TEST

static int asked;
static tool_answer next_answer;

static tool_answer ask(void *user, const char *tool, const char *args_json)
{
    (void)user;
    ck_assert_str_eq(tool, "run_command");
    ck_assert_ptr_nonnull(strstr(args_json, "echo hi"));
    asked++;
    return next_answer;
}

static char saved[256];
static int save_fails;

static int save(void *user, char *const *names, int n, char *err, size_t errlen)
{
    (void)user;
    if (save_fails) {
        snprintf(err, errlen, "cannot write the config file");
        return -1;
    }
    saved[0] = 0;
    for (int i = 0; i < n; i++)
        snprintf(saved + strlen(saved), sizeof saved - strlen(saved), "%s%s", i ? "," : "", names[i]);
    return 0;
}

static int approval_of(const char *name, const char *args)
{
    tool_result r = {0};
    ck_assert_int_eq(tools_call(reg, &policy, name, args, NULL, &r), 0);
    int a = r.approval;
    tool_result_clear(&r);
    return a;
}

START_TEST(approval_scopes_and_modes)
{
    const char *hi = "{\"command\":\"echo hi\"}";
    tool_policy_clear(&policy);
    tool_policy_init(&policy, CONFIG_APPROVAL_ASK, ask, NULL);
    policy.save = save;
    asked = 0;
    next_answer = TOOL_ANSWER_NO;
    expect("run_command", hi, 1, "the user did not allow this call of run_command");
    next_answer = TOOL_ANSWER_YES;
    expect("run_command", hi, 0, "hi");
    ck_assert_int_eq(asked, 2);
    ck_assert_int_eq(approval_of("run_command", hi), TOOL_APPROVAL_ONCE); /* once: asked again */
    ck_assert_int_eq(asked, 3);
    ck_assert_int_eq(approval_of("read_file", "{\"path\":\"hello.txt\"}"), TOOL_APPROVAL_NOT_NEEDED);
    ck_assert_int_eq(asked, 3);

    next_answer = TOOL_ANSWER_CONVERSATION;
    ck_assert_int_eq(approval_of("run_command", hi), TOOL_APPROVAL_CONVERSATION);
    next_answer = TOOL_ANSWER_NO; /* not asked again in this conversation */
    ck_assert_int_eq(approval_of("run_command", hi), TOOL_APPROVAL_CONVERSATION);
    ck_assert_int_eq(asked, 4);
    tool_policy_new_conversation(&policy); /* another conversation asks again */
    ck_assert_int_eq(approval_of("run_command", hi), TOOL_APPROVAL_DECLINED);
    ck_assert_int_eq(asked, 5);

    next_answer = TOOL_ANSWER_ALWAYS; /* always: saved, and it outlives the conversation */
    ck_assert_int_eq(approval_of("run_command", hi), TOOL_APPROVAL_ALWAYS);
    ck_assert_str_eq(saved, "run_command");
    tool_policy_new_conversation(&policy);
    ck_assert_int_eq(approval_of("run_command", hi), TOOL_APPROVAL_ALWAYS);
    ck_assert_int_eq(asked, 6);
    char err[200];
    ck_assert_int_eq(tool_policy_revoke(&policy, "run_command", err, sizeof err), 0); /* /tools ask */
    ck_assert_str_eq(saved, "");
    next_answer = TOOL_ANSWER_NO;
    ck_assert_int_eq(approval_of("run_command", hi), TOOL_APPROVAL_DECLINED);
    ck_assert_int_eq(asked, 7);

    save_fails = 1; /* an "always" that cannot be saved holds for this conversation, and says so */
    next_answer = TOOL_ANSWER_ALWAYS;
    ck_assert_int_eq(approval_of("run_command", hi), TOOL_APPROVAL_CONVERSATION);
    ck_assert_ptr_nonnull(strstr(policy.save_err, "cannot write the config file"));
    save_fails = 0;

    ck_assert_int_eq(tool_policy_allow_by_flag(&policy, "write_file"), 0);
    ck_assert_int_eq(approval_of("write_file", "{\"path\":\"w.txt\",\"content\":\"x\"}"), TOOL_APPROVAL_FLAG);
    tool_policy_clear(&policy);

    tool_policy_init(&policy, CONFIG_APPROVAL_DENY, ask, NULL);
    expect("run_command", hi, 1, "refused by the configuration (approval = deny)");
    ck_assert_int_eq(asked, 8);
    tool_policy_clear(&policy);
    tool_policy_init(&policy, CONFIG_APPROVAL_ASK, NULL, NULL); /* nobody to ask: refused, saying why */
    expect("write_file", "{\"path\":\"a\",\"content\":\"b\"}", 1, "there is no terminal to ask");
    ck_assert_int_eq(approval_of("write_file", "{\"path\":\"a\",\"content\":\"b\"}"), TOOL_APPROVAL_NO_TERMINAL);
    ck_assert_int_eq(tool_policy_allow_by_flag(&policy, "write_file"), 0); /* --allow-tool write_file */
    ck_assert_int_eq(approval_of("write_file", "{\"path\":\"a\",\"content\":\"b\"}"), TOOL_APPROVAL_FLAG);
    tools_set_enabled(reg, 0); /* /tools off */
    int n;
    ck_assert_ptr_null(tools_as_glm(reg, &n));
    ck_assert_int_eq(n, 0);
    expect("read_file", "{\"path\":\"hello.txt\"}", 1, "turned tools off");
    tools_set_enabled(reg, 1);
    ck_assert_ptr_nonnull(tools_as_glm(reg, &n));
}
END_TEST

int main(void)
{
    Suite *s = suite_create("tools");
    TCase *tc = tcase_create("builtin");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, registry_offers_five_tools_with_object_schemas);
    tcase_add_test(tc, bad_calls_become_error_results);
    tcase_add_test(tc, read_file_pages_and_refuses_binaries);
    tcase_add_test(tc, paths_stay_inside_the_workspace);
    tcase_add_test(tc, search_finds_lines_and_skips_binaries);
    tcase_add_test(tc, write_file_replaces_atomically_and_keeps_mode);
    tcase_add_test(tc, run_command_reports_status_and_output);
    tcase_add_test(tc, run_command_timeout_kills_the_process_group);
    tcase_add_test(tc, background_child_does_not_hold_the_call);
    tcase_add_test(tc, run_command_stops_when_canceled);
    tcase_add_test(tc, approval_scopes_and_modes);
    suite_add_tcase(s, tc);
    return test_run_suite(s);
}
