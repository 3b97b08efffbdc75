/* test_chat.c: Check suite for the chat loop on a real SQLite file: parts saved in order and
 * byte-exact, kept reasoning sent back, reasoning memory restored, the tool loop (built-in and
 * through the MCP test server), cancellation, errors, retry/edit/branch and settings. Replies
 * come from the recorded-reply test source. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "app/chat.h"
#include "app/chat_memory.h"
#include "tests/app/test_reply_source.h"
#include "app/tools/builtin.h"
#include "app/tools/mcp.h"
#include "tests/common/check_main.h"

static char dir[64];
static char db_file[128];
static char replies_file[128];
static app_config cfg;
static db_store *db;
static test_reply_source *src_rec;
static chat_source src;
static tool_registry *reg;
static tool_policy policy;
static builtin_ctx bctx;
static chat *ch;

/* sink state */
static int cancel_after_content; /* cancel once this many content events arrived */
static int content_events;
static char seen[8192];

static int sink_event(void *u, const glm_event *ev)
{
    (void)u;
    if (ev->type == GLM_EV_CONTENT_DELTA)
        content_events++;
    if (ev->type == GLM_EV_TOOL_CALL_END) {
        ck_assert_ptr_nonnull(ev->call_id);
        strncat(seen, "[call ", sizeof seen - strlen(seen) - 1);
        strncat(seen, ev->call_id, sizeof seen - strlen(seen) - 1);
        strncat(seen, "]", sizeof seen - strlen(seen) - 1);
    }
    return cancel_after_content && content_events >= cancel_after_content;
}

static void sink_tool_result(void *u, const char *call_id, const char *name, const tool_result *r)
{
    (void)u;
    (void)call_id;
    strncat(seen, "[result ", sizeof seen - strlen(seen) - 1);
    strncat(seen, name, sizeof seen - strlen(seen) - 1);
    strncat(seen, r->is_error ? " error]" : " ok]", sizeof seen - strlen(seen) - 1);
}

static void setup(void)
{
    strcpy(dir, "/tmp/glmchat-test-chat.XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(db_file, sizeof db_file, "%s/chat.db", dir);
    snprintf(replies_file, sizeof replies_file, "%s/replies.jsonl", dir);
    config_init(&cfg);
    char err[1024];
    db = db_open(db_file, err, sizeof err);
    ck_assert_msg(db != NULL, "%s", err);
    reg = NULL;
    ch = NULL;
    src_rec = NULL;
    cancel_after_content = 0;
    content_events = 0;
    seen[0] = 0;
}

static void teardown(void)
{
    chat_free(ch);
    tools_free(reg);
    tool_policy_clear(&policy);
    test_reply_source_free(src_rec);
    db_close(db);
    config_free(&cfg);
    char cmd[160];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    ck_assert_int_eq(system(cmd), 0);
}

/* Writes the recorded replies and makes a chat (with the built-in tools when tools is set). */
static void start(const char *replies, int tools, int max_steps)
{
    FILE *f = fopen(replies_file, "w");
    ck_assert_ptr_nonnull(f);
    fputs(replies, f);
    fclose(f);
    char err[1024];
    src_rec = test_reply_source_open(replies_file, NULL, 0, err, sizeof err);
    ck_assert_msg(src_rec != NULL, "%s", err);
    src = test_reply_source_as_source(src_rec);
    if (tools) {
        reg = tools_new();
        ck_assert_int_eq(workspace_open(&bctx.ws, dir, err, sizeof err), 0);
        bctx.command_timeout_s = 5;
        ck_assert_int_eq(builtin_tools_add(reg, &bctx, err, sizeof err), 0);
        tool_policy_init(&policy, CONFIG_APPROVAL_AUTO, NULL, NULL);
    }
    chat_options o = {.cfg = &cfg, .db = db, .tools = reg, .policy = tools ? &policy : NULL, .max_steps = max_steps};
    chat_sink sink = {.event = sink_event, .tool_result = sink_tool_result};
    ch = chat_new(&o, &src, &sink, err, sizeof err);
    ck_assert_msg(ch != NULL, "%s", err);
}

static chat_outcome turn(const char *text)
{
    chat_outcome out;
    char err[1024];
    ck_assert_msg(chat_turn(ch, text, &out, err, sizeof err) == 0, "%s", err);
    return out;
}

static void load(conv_messages *m)
{
    ck_assert_int_eq(conv_load_path(db, chat_conversation(ch), m), 0);
}

static void expect_part(const msg *m, size_t i, part_kind kind, const char *data)
{
    ck_assert_msg(i < m->nparts, "message %lld has %zu parts, wanted part %zu", (long long)m->id, m->nparts, i);
    ck_assert_int_eq(m->parts[i].kind, kind);
    ck_assert_uint_eq(m->parts[i].len, strlen(data));
    ck_assert_msg(memcmp(m->parts[i].data, data, m->parts[i].len) == 0, "part %zu: '%s' != '%s'", i,
                  m->parts[i].data, data);
}

START_TEST(a_turn_saves_parts_in_order_byte_exact)
{
    start("{\"type\":\"reasoning\",\"text\":\"  think \\t\"}\n"
          "{\"type\":\"reasoning\",\"text\":\"more\\n\"}\n"
          "{\"type\":\"content\",\"text\":\"Hel\"}\n"
          "{\"type\":\"content\",\"text\":\"lo \\u00e9\"}\n"
          "{\"type\":\"reasoning\",\"text\":\"second thought\"}\n"
          "{\"type\":\"content\",\"text\":\"!\"}\n"
          "{\"type\":\"done\",\"finish\":\"stop\",\"prompt_tokens\":9,\"generated_tokens\":6,\"ttft_s\":0.5}\n",
          0, 0);
    chat_outcome out = turn("Hi there\nsecond line");
    ck_assert_str_eq(out.finish, "stop");
    ck_assert_int_eq(out.steps, 1);
    conv_messages m;
    load(&m);
    ck_assert_uint_eq(m.count, 2);
    ck_assert_int_eq(m.msgs[0].role, MSG_USER);
    expect_part(&m.msgs[0], 0, PART_TEXT, "Hi there\nsecond line");
    const msg *a = &m.msgs[1];
    ck_assert_int_eq(a->role, MSG_ASSISTANT);
    ck_assert_int_eq(a->status, MSG_COMPLETE);
    ck_assert_str_eq(a->finish_reason, "stop");
    ck_assert_uint_eq(a->nparts, 4);
    expect_part(a, 0, PART_REASONING, "  think \tmore\n");
    expect_part(a, 1, PART_TEXT, "Hello \xC3\xA9");
    expect_part(a, 2, PART_REASONING, "second thought");
    expect_part(a, 3, PART_TEXT, "!");
    ck_assert_int_eq(a->stats.prompt_tokens, 9);
    ck_assert_int_eq(a->stats.completion_tokens, 6);
    ck_assert_int_eq(a->stats.ttft_ms, 500);
    ck_assert_str_eq(a->model, "recorded-replies");
    conv_messages_free(&m);
    char *title = NULL;
    ck_assert_int_eq(conv_get_title(db, chat_conversation(ch), &title), 0);
    ck_assert_str_eq(title, "Hi there");
    free(title);
}
END_TEST

START_TEST(the_next_request_carries_kept_reasoning)
{
    start("{\"type\":\"reasoning\",\"text\":\"r1 \\u0001 exact  \"}\n"
          "{\"type\":\"content\",\"text\":\"a1\"}\n"
          "{\"type\":\"done\",\"finish\":\"stop\"}\n",
          0, 0);
    char err[512];
    ck_assert_int_eq(chat_set_system_prompt(ch, "Be brief.", err, sizeof err), 0);
    turn("q1");
    chat_request *cr = chat_build_request(ch, err, sizeof err);
    ck_assert_ptr_nonnull(cr);
    const glm_request *r = chat_request_get(cr);
    ck_assert_int_eq(r->n_messages, 3);
    ck_assert_int_eq(r->messages[0].role, GLM_ROLE_SYSTEM);
    ck_assert_str_eq(r->messages[0].content, "Be brief.");
    ck_assert_str_eq(r->messages[1].content, "q1");
    ck_assert_int_eq(r->messages[2].role, GLM_ROLE_ASSISTANT);
    ck_assert_str_eq(r->messages[2].reasoning, "r1 \x01 exact  ");
    ck_assert_str_eq(r->messages[2].content, "a1");
    ck_assert_int_eq(r->think, 1);
    ck_assert_int_eq(r->effort, GLM_EFFORT_MAX);
    ck_assert_int_eq(r->n_tools, 0);
    chat_request_free(cr);
}
END_TEST

static const char tool_step[] =
    "{\"type\":\"reasoning\",\"text\":\"I should list the files.\"}\n"
    "{\"type\":\"content\",\"text\":\"\\n\"}\n"
    "{\"type\":\"tool_call_begin\",\"name\":\"list_directory\"}\n"
    "{\"type\":\"tool_call_delta\",\"text\":\"{}\"}\n"
    "{\"type\":\"tool_call\",\"name\":\"list_directory\",\"arguments\":{\"path\":\".\"}}\n"
    "{\"type\":\"done\",\"finish\":\"tool_calls\"}\n"
    "{\"type\":\"reasoning\",\"text\":\"There is a database.\"}\n"
    "{\"type\":\"content\",\"text\":\"I see chat.db.\"}\n"
    "{\"type\":\"done\",\"finish\":\"stop\"}\n";

START_TEST(a_tool_round_trip_is_saved_and_sent_back)
{
    start(tool_step, 1, 0);
    chat_outcome out = turn("what files are there?");
    ck_assert_str_eq(out.finish, "stop");
    ck_assert_int_eq(out.steps, 2);
    ck_assert_int_eq(out.tool_calls, 1);
    ck_assert_ptr_nonnull(strstr(seen, "[result list_directory ok]"));
    conv_messages m;
    load(&m);
    ck_assert_uint_eq(m.count, 4); /* user, assistant (call), tool, assistant */
    const msg *a = &m.msgs[1];
    ck_assert_str_eq(a->finish_reason, "tool_calls");
    expect_part(a, 0, PART_REASONING, "I should list the files.");
    expect_part(a, 1, PART_TEXT, "\n");
    ck_assert_int_eq(a->parts[2].kind, PART_TOOL_CALL);
    ck_assert_str_eq(a->parts[2].name, "list_directory");
    ck_assert_str_eq(a->parts[2].args, "{\"path\":\".\"}");
    ck_assert_int_eq(strncmp(a->parts[2].call_id, "call_", 5), 0);
    ck_assert_ptr_nonnull(strstr(seen, a->parts[2].call_id)); /* the sink saw the same id */
    const msg *t = &m.msgs[2];
    ck_assert_int_eq(t->role, MSG_TOOL);
    ck_assert_int_eq(t->parts[0].kind, PART_TOOL_RESULT);
    ck_assert_str_eq(t->parts[0].call_id, a->parts[2].call_id);
    ck_assert_int_eq(t->parts[0].is_error, 0);
    ck_assert_ptr_nonnull(strstr(t->parts[0].data, "chat.db"));
    expect_part(&m.msgs[3], 1, PART_TEXT, "I see chat.db.");
    conv_messages_free(&m);

    char err[512];
    chat_request *cr = chat_build_request(ch, err, sizeof err);
    const glm_request *r = chat_request_get(cr);
    ck_assert_int_eq(r->n_messages, 4);
    ck_assert_int_eq(r->messages[1].n_tool_calls, 1);
    ck_assert_str_eq(r->messages[1].reasoning, "I should list the files.");
    ck_assert_int_eq(r->messages[2].role, GLM_ROLE_TOOL);
    ck_assert_str_eq(r->messages[2].tool_call_id, r->messages[1].tool_calls[0].id);
    ck_assert_int_eq(r->n_tools, 5);
    chat_request_free(cr);
}
END_TEST

/* Copies the path of conversation from into a new conversation, leaving out reasoning parts:
 * what an import from a client that dropped reasoning looks like. */
static int64_t copy_without_reasoning(int64_t from)
{
    conv_messages m;
    ck_assert_int_eq(conv_load_path(db, from, &m), 0);
    int64_t to = conv_create(db, "copy", NULL);
    ck_assert_int_gt(to, 0);
    int64_t parent = 0;
    for (size_t i = 0; i < m.count; i++) {
        int64_t id = msg_append(db, to, parent, m.msgs[i].role, MSG_COMPLETE, NULL);
        ck_assert_int_gt(id, 0);
        for (size_t j = 0; j < m.msgs[i].nparts; j++) {
            const part *p = &m.msgs[i].parts[j];
            if (p->kind == PART_REASONING)
                continue;
            part_in in = {p->kind, p->data, p->len, p->name, p->call_id, p->args, p->args_len, p->is_error};
            ck_assert_int_gt(part_append(db, id, &in), 0);
        }
        parent = id;
    }
    conv_messages_free(&m);
    return to;
}

START_TEST(reasoning_memory_restores_a_step_that_lacks_it)
{
    start(tool_step, 1, 0);
    turn("what files are there?");
    int64_t original = chat_conversation(ch);
    int64_t entries = 0, bytes = 0;
    ck_assert_int_eq(mem_stats(db, &entries, &bytes), 0);
    ck_assert_int_eq(entries, 1); /* only the tool-calling step is remembered */
    ck_assert_int_eq(bytes, (int64_t)strlen("I should list the files."));

    int64_t copy = copy_without_reasoning(original);
    char err[512];
    ck_assert_int_eq(chat_open(ch, copy, err, sizeof err), 0);
    chat_request *cr = chat_build_request(ch, err, sizeof err);
    const glm_request *r = chat_request_get(cr);
    ck_assert_int_eq(r->messages[1].n_tool_calls, 1);
    ck_assert_ptr_nonnull(r->messages[1].reasoning);
    ck_assert_str_eq(r->messages[1].reasoning, "I should list the files."); /* restored */
    ck_assert_ptr_null(r->messages[3].reasoning); /* a final answer is not in memory */
    chat_request_free(cr);

    /* The same calls after a different question are another conversation: nothing restored. */
    conv_messages m;
    ck_assert_int_eq(conv_load_path(db, copy, &m), 0);
    int64_t other = conv_create(db, "other", NULL);
    int64_t u = msg_append(db, other, 0, MSG_USER, MSG_COMPLETE, NULL);
    part_in q = {.kind = PART_TEXT, .data = "a different question", .len = 20};
    part_append(db, u, &q);
    int64_t a = msg_append(db, other, u, MSG_ASSISTANT, MSG_COMPLETE, NULL);
    const part *call = &m.msgs[1].parts[1];
    part_in in = {call->kind, call->data, call->len, call->name, call->call_id, call->args, call->args_len, 0};
    ck_assert_int_eq(call->kind, PART_TOOL_CALL);
    part_append(db, a, &in);
    conv_messages_free(&m);
    ck_assert_int_eq(chat_open(ch, other, err, sizeof err), 0);
    cr = chat_build_request(ch, err, sizeof err);
    ck_assert_ptr_null(chat_request_get(cr)->messages[1].reasoning);
    chat_request_free(cr);
}
END_TEST

START_TEST(signatures_ignore_reasoning_and_ids_but_not_text)
{
    glm_tool_call calls[] = {{"call_a", "read_file", "{\"path\":\"x\"}"}};
    glm_message before[] = {{.role = GLM_ROLE_USER, .content = "hi"}};
    glm_message step = {.role = GLM_ROLE_ASSISTANT, .reasoning = "r", .tool_calls = calls, .n_tool_calls = 1};
    char s1[CHAT_SIGNATURE_LEN + 1], s2[CHAT_SIGNATURE_LEN + 1], s3[CHAT_SIGNATURE_LEN + 1];
    chat_signature(before, 1, &step, s1);
    step.reasoning = NULL;
    calls[0].id = "call_b";
    chat_signature(before, 1, &step, s2);
    ck_assert_str_eq(s1, s2);
    before[0].content = "hi!";
    chat_signature(before, 1, &step, s3);
    ck_assert_str_ne(s1, s3);
    ck_assert_uint_eq(strlen(s1), 64);
    char ids[64];
    glm_tool_call two[] = {{"c1", "a", "{}"}, {"c2", "b", "{}"}};
    glm_message st2 = {.role = GLM_ROLE_ASSISTANT, .tool_calls = two, .n_tool_calls = 2};
    ck_assert_int_eq(chat_call_ids(&st2, ids, sizeof ids), 0);
    ck_assert_str_eq(ids, "c1,c2");
    ck_assert_int_eq(chat_call_ids(&st2, ids, 3), -1);
}
END_TEST

START_TEST(cancel_mid_reply_keeps_the_partial_reply)
{
    start("{\"type\":\"reasoning\",\"text\":\"thinking\"}\n"
          "{\"type\":\"content\",\"text\":\"one \"}\n"
          "{\"type\":\"content\",\"text\":\"two \"}\n"
          "{\"type\":\"content\",\"text\":\"three\"}\n"
          "{\"type\":\"done\",\"finish\":\"stop\"}\n"
          "{\"type\":\"content\",\"text\":\"next reply\"}\n"
          "{\"type\":\"done\",\"finish\":\"stop\"}\n",
          0, 0);
    cancel_after_content = 2;
    chat_outcome out = turn("count");
    ck_assert_str_eq(out.finish, "canceled");
    conv_messages m;
    load(&m);
    const msg *a = &m.msgs[1];
    ck_assert_int_eq(a->status, MSG_CANCELED);
    ck_assert_str_eq(a->finish_reason, "canceled");
    expect_part(a, 0, PART_REASONING, "thinking");
    expect_part(a, 1, PART_TEXT, "one two ");
    conv_messages_free(&m);
    cancel_after_content = 0;
    out = turn("again"); /* the canceled reply's leftovers were skipped */
    ck_assert_str_eq(out.finish, "stop");
    load(&m);
    expect_part(&m.msgs[3], 0, PART_TEXT, "next reply");
    conv_messages_free(&m);
}
END_TEST

START_TEST(model_errors_finish_the_message_as_error)
{
    start("{\"type\":\"content\",\"text\":\"part\"}\n"
          "{\"type\":\"error\",\"message\":\"peer 10.0.0.2 stopped answering after 5 s\"}\n",
          0, 0);
    chat_outcome out = turn("hello");
    ck_assert_str_eq(out.finish, "error");
    ck_assert_str_eq(out.error, "peer 10.0.0.2 stopped answering after 5 s");
    conv_messages m;
    load(&m);
    ck_assert_int_eq(m.msgs[1].status, MSG_ERROR);
    expect_part(&m.msgs[1], 0, PART_TEXT, "part");
    conv_messages_free(&m);
    out = turn("and now?"); /* the recorded replies ran out: also an error, clearly worded */
    ck_assert_str_eq(out.finish, "error");
    ck_assert_ptr_nonnull(strstr(out.error, "ran out after 1 replies"));
}
END_TEST

START_TEST(tool_failures_are_results_and_the_loop_is_bounded)
{
    start("{\"type\":\"tool_call\",\"name\":\"read_file\",\"arguments\":{\"path\":\"/etc/passwd\"}}\n"
          "{\"type\":\"done\",\"finish\":\"tool_calls\"}\n"
          "{\"type\":\"tool_call\",\"name\":\"no_such_tool\",\"arguments\":{}}\n"
          "{\"type\":\"done\",\"finish\":\"tool_calls\"}\n"
          "{\"type\":\"tool_call\",\"name\":\"read_file\",\"arguments_text\":\"{broken\"}\n"
          "{\"type\":\"done\",\"finish\":\"tool_calls\"}\n",
          1, 3);
    chat_outcome out = turn("go");
    ck_assert_str_eq(out.finish, "tool_limit");
    ck_assert_int_eq(out.steps, 3);
    conv_messages m;
    load(&m);
    ck_assert_uint_eq(m.count, 7);
    ck_assert_int_eq(m.msgs[2].parts[0].is_error, 1);
    ck_assert_ptr_nonnull(strstr(m.msgs[2].parts[0].data, "outside the workspace"));
    ck_assert_ptr_nonnull(strstr(m.msgs[4].parts[0].data, "there is no tool named 'no_such_tool'"));
    ck_assert_ptr_nonnull(strstr(m.msgs[6].parts[0].data, "must be a JSON object"));
    conv_messages_free(&m);
}
END_TEST

START_TEST(calls_without_tools_offered_get_an_error_result)
{
    start("{\"type\":\"tool_call\",\"name\":\"run_command\",\"arguments\":{\"command\":\"ls\"}}\n"
          "{\"type\":\"done\",\"finish\":\"tool_calls\"}\n"
          "{\"type\":\"content\",\"text\":\"ok\"}\n"
          "{\"type\":\"done\",\"finish\":\"stop\"}\n",
          0, 0);
    chat_outcome out = turn("go");
    ck_assert_str_eq(out.finish, "stop");
    conv_messages m;
    load(&m);
    ck_assert_ptr_nonnull(strstr(m.msgs[2].parts[0].data, "no tools are offered in this chat"));
    conv_messages_free(&m);
}
END_TEST

START_TEST(mcp_tools_through_the_chat_loop)
{
    start("{\"type\":\"reasoning\",\"text\":\"Use the echo tool.\"}\n"
          "{\"type\":\"tool_call\",\"name\":\"t__echo\",\"arguments\":{\"text\":\"ping \\u00e9\"}}\n"
          "{\"type\":\"done\",\"finish\":\"tool_calls\"}\n"
          "{\"type\":\"tool_call\",\"name\":\"t__crash\",\"arguments\":{}}\n"
          "{\"type\":\"done\",\"finish\":\"tool_calls\"}\n"
          "{\"type\":\"tool_call\",\"name\":\"t__echo\",\"arguments\":{\"text\":\"again\"}}\n"
          "{\"type\":\"done\",\"finish\":\"tool_calls\"}\n"
          "{\"type\":\"content\",\"text\":\"The server is gone.\"}\n"
          "{\"type\":\"done\",\"finish\":\"stop\"}\n",
          1, 0);
    const char *b = getenv("GLMCHAT_BUILDDIR");
    char server[512];
    snprintf(server, sizeof server, "%s/tests/mcp/test_mcp_server", b ? b : ".");
    char *argv[] = {server, NULL};
    config_mcp_server mc = {.name = "t", .argv = argv, .timeout_s = 5, .enabled = 1};
    char err[1024];
    mcp_client *mcp = mcp_start(&mc, NULL, err, sizeof err);
    ck_assert_msg(mcp != NULL, "%s", err);
    ck_assert_int_eq(mcp_register_tools(mcp, reg, 1, err, sizeof err), 0);
    chat_outcome out = turn("echo something");
    ck_assert_str_eq(out.finish, "stop");
    ck_assert_int_eq(out.steps, 4);
    conv_messages m;
    load(&m);
    ck_assert_str_eq(m.msgs[2].parts[0].data, "ping \xC3\xA9");
    ck_assert_int_eq(m.msgs[2].parts[0].is_error, 0);
    ck_assert_int_eq(m.msgs[4].parts[0].is_error, 1);
    ck_assert_ptr_nonnull(strstr(m.msgs[4].parts[0].data, "the MCP server 't' exited with status 3"));
    ck_assert_ptr_nonnull(strstr(m.msgs[6].parts[0].data, "cannot be used until glmchat restarts it"));
    expect_part(&m.msgs[7], 0, PART_TEXT, "The server is gone.");
    conv_messages_free(&m);
    mcp_stop(mcp);
}
END_TEST

START_TEST(retry_edit_and_branch_make_siblings)
{
    start("{\"type\":\"content\",\"text\":\"first answer\"}\n{\"type\":\"done\"}\n"
          "{\"type\":\"content\",\"text\":\"second answer\"}\n{\"type\":\"done\"}\n"
          "{\"type\":\"content\",\"text\":\"answer to the edit\"}\n{\"type\":\"done\"}\n"
          "{\"type\":\"content\",\"text\":\"from the branch\"}\n{\"type\":\"done\"}\n",
          0, 0);
    chat_outcome out = turn("question");
    int64_t first_answer = out.last_message;
    char err[512];
    ck_assert_int_eq(chat_retry(ch, &out, err, sizeof err), 0);
    conv_messages m;
    load(&m);
    ck_assert_uint_eq(m.count, 2);
    expect_part(&m.msgs[1], 0, PART_TEXT, "second answer");
    ck_assert_int_eq(m.msgs[1].parent, m.msgs[0].id);
    int64_t user = m.msgs[0].id;
    conv_messages_free(&m);
    int64_t *kids;
    size_t n;
    ck_assert_int_eq(msg_children(db, chat_conversation(ch), user, &kids, &n), 0);
    ck_assert_uint_eq(n, 2);
    free(kids);

    ck_assert_int_eq(chat_edit(ch, "question, edited", &out, err, sizeof err), 0);
    load(&m);
    ck_assert_uint_eq(m.count, 2);
    expect_part(&m.msgs[0], 0, PART_TEXT, "question, edited");
    expect_part(&m.msgs[1], 0, PART_TEXT, "answer to the edit");
    conv_messages_free(&m);
    ck_assert_int_eq(msg_children(db, chat_conversation(ch), 0, &kids, &n), 0);
    ck_assert_uint_eq(n, 2); /* two root user messages: the original and the edit */
    free(kids);

    ck_assert_int_eq(chat_branch(ch, first_answer, err, sizeof err), 0);
    turn("follow-up on the first answer");
    load(&m);
    ck_assert_uint_eq(m.count, 4);
    expect_part(&m.msgs[1], 0, PART_TEXT, "first answer");
    expect_part(&m.msgs[3], 0, PART_TEXT, "from the branch");
    conv_messages_free(&m);
    ck_assert_int_eq(chat_branch(ch, 999999, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "cannot continue from message 999999"));
}
END_TEST

START_TEST(raw_model_text_goes_through_the_reply_parser)
{
    start("{\"type\":\"raw\",\"text\":\"Let me look.</th\"}\n"
          "{\"type\":\"raw\",\"text\":\"ink>\\n<tool_call>list_directory<arg_key>path</arg_key>\"}\n"
          "{\"type\":\"raw\",\"text\":\"<arg_value>.</arg_value></tool_call>\"}\n"
          "{\"type\":\"end\",\"why\":\"token\"}\n"
          "{\"type\":\"raw\",\"text\":\"Found it.</think>The database is here.\"}\n"
          "{\"type\":\"raw\",\"text\":\" Now <tool_call>read_file<arg_key>path</arg_key><arg_value>chat\"}\n"
          "{\"type\":\"end\",\"why\":\"length\"}\n",
          1, 0);
    chat_outcome out = turn("where is the database?");
    ck_assert_str_eq(out.finish, "length");
    ck_assert_int_eq(out.steps, 2);
    ck_assert_int_eq(out.tool_calls, 1); /* the call cut by the budget is not a call */
    conv_messages m;
    load(&m);
    ck_assert_uint_eq(m.count, 4);
    const msg *a = &m.msgs[1];
    expect_part(a, 0, PART_REASONING, "Let me look.");
    ck_assert_int_eq(a->parts[1].kind, PART_TOOL_CALL);
    ck_assert_str_eq(a->parts[1].name, "list_directory");
    ck_assert_str_eq(a->parts[1].args, "{\"path\":\".\"}");
    ck_assert_str_eq(a->finish_reason, "tool_calls");
    ck_assert_ptr_nonnull(strstr(m.msgs[2].parts[0].data, "chat.db"));
    const msg *b = &m.msgs[3];
    expect_part(b, 0, PART_REASONING, "Found it.");
    ck_assert_int_eq(b->parts[1].kind, PART_TEXT);
    ck_assert_ptr_nonnull(strstr(b->parts[1].data, "The database is here."));
    ck_assert_str_eq(b->finish_reason, "length");
    for (size_t i = 0; i < b->nparts; i++)
        ck_assert_int_ne(b->parts[i].kind, PART_TOOL_CALL);
    conv_messages_free(&m);
}
END_TEST

START_TEST(settings_are_kept_per_conversation)
{
    start("{\"type\":\"content\",\"text\":\"a\"}\n{\"type\":\"done\"}\n", 0, 0);
    char err[512];
    ck_assert_int_eq(chat_set_think(ch, 0, err, sizeof err), 0);
    ck_assert_int_eq(chat_set_effort(ch, GLM_EFFORT_LOW, err, sizeof err), 0);
    ck_assert_int_eq(chat_set_system_prompt(ch, "Answer in French.", err, sizeof err), 0);
    turn("bonjour");
    int64_t conv = chat_conversation(ch);
    chat_free(ch);
    chat_options o = {.cfg = &cfg, .db = db};
    ch = chat_new(&o, &src, NULL, err, sizeof err);
    ck_assert_int_eq(chat_think(ch), 1); /* the config's default, until the conversation opens */
    ck_assert_int_eq(chat_open(ch, conv, err, sizeof err), 0);
    ck_assert_int_eq(chat_think(ch), 0);
    ck_assert_int_eq(chat_effort(ch), GLM_EFFORT_LOW);
    chat_request *cr = chat_build_request(ch, err, sizeof err);
    const glm_request *r = chat_request_get(cr);
    ck_assert_int_eq(r->think, 0);
    ck_assert_int_eq(r->effort, GLM_EFFORT_LOW);
    ck_assert_str_eq(r->messages[0].content, "Answer in French.");
    chat_request_free(cr);
    ck_assert_int_eq(chat_open(ch, 424242, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "there is no conversation 424242 in"), "%s", err);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("chat");
    TCase *tc = tcase_create("turns");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, a_turn_saves_parts_in_order_byte_exact);
    tcase_add_test(tc, the_next_request_carries_kept_reasoning);
    tcase_add_test(tc, a_tool_round_trip_is_saved_and_sent_back);
    tcase_add_test(tc, reasoning_memory_restores_a_step_that_lacks_it);
    tcase_add_test(tc, signatures_ignore_reasoning_and_ids_but_not_text);
    tcase_add_test(tc, cancel_mid_reply_keeps_the_partial_reply);
    tcase_add_test(tc, model_errors_finish_the_message_as_error);
    tcase_add_test(tc, tool_failures_are_results_and_the_loop_is_bounded);
    tcase_add_test(tc, calls_without_tools_offered_get_an_error_result);
    tcase_add_test(tc, mcp_tools_through_the_chat_loop);
    tcase_add_test(tc, retry_edit_and_branch_make_siblings);
    tcase_add_test(tc, raw_model_text_goes_through_the_reply_parser);
    tcase_add_test(tc, settings_are_kept_per_conversation);
    suite_add_tcase(s, tc);
    return test_run_suite(s);
}
