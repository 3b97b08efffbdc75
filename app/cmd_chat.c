/* cmd_chat.c: `glmchat chat` (CLI.md): options, config, database, tools and MCP servers, then
 * scripted mode: prompts from stdin or --prompt, the answer on stdout, events as text or jsonl. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "app/attach.h"
#include "app/chat.h"
#include "app/chat_engine.h"
#include "app/chat_tui.h"
#include "app/demo_model.h"
#include "app/commands.h"
#include "app/config.h"
#include "app/config_save.h"
#include "app/engine_log.h"
#include "app/jsonl.h"
#include "app/paths.h"
#include "app/signals.h"
#include "app/source_hook.h"
#include "ui/visible.h"
#include "app/tools/builtin.h"
#include "app/tools/mcp.h"
#include "app/tools/mcp_boot.h"
#include "base/setting.h"

const chat_source_hook *chat_source_hook_installed = NULL;

typedef enum reasoning_to { REASONING_STDERR, REASONING_STDOUT, REASONING_NONE } reasoning_to;
typedef enum output_format { OUTPUT_TEXT, OUTPUT_JSONL, OUTPUT_JSON } output_format;

#define MAX_ATTACHED_FILES 64

typedef struct chat_args {
    int continue_latest;
    int64_t conversation;
    const char *prompt;
    output_format format;
    int jsonl;             /* format == OUTPUT_JSONL */
    int lines;             /* --lines: each stdin line is a prompt (the old scripted mode) */
    const char *files[MAX_ATTACHED_FILES];
    int n_files;
    const char *temperature, *top_p, *seed;
    int no_save;
    const char *think;
    const char *effort;
    const char *max_tokens;
    const char *system;
    int allow_tools;
    const char *allow_tool[64]; /* --allow-tool NAME[,NAME]...: risky tools that run unasked */
    int n_allow_tool;
    reasoning_to reasoning;
    int retry;
    const char *edit;
    int compact;           /* --compact: summarise the conversation (chat_compact) */
    int64_t from;
} chat_args;

static void usage(FILE *f)
{
    fprintf(f,
            "Usage: glmchat chat [OPTION]...\n"
            "Chat with the model. On a terminal this is the TUI; otherwise all of stdin is one\n"
            "prompt (or, with --prompt, a document attached to it) and the answer goes to stdout.\n"
            "\n"
            "  -c, --continue            continue the latest conversation\n"
            "      --conversation ID     continue conversation ID (see `glmchat list`)\n"
            "      --prompt TEXT         one turn with TEXT; piped stdin is attached after it,\n"
            "                            fenced and labelled 'stdin'\n"
            "  -f, --file FILE           attach a text file (repeatable; inside the workspace,\n"
            "                            at most 1 MiB each) after the prompt, fenced, by name\n"
            "      --lines               each stdin line is a prompt of its own (a line ending\n"
            "                            in '\\' continues): several turns in one run\n"
            "      --output-format FMT   text (default), jsonl (one JSON event a line) or json\n"
            "                            (one object when the turn ends: reply, reasoning, tool\n"
            "                            calls, usage, ids, finish)\n"
            "      --no-save             keep this chat in memory only (no ids are reported)\n"
            "      --temperature X       sampling temperature 0..10 for this run\n"
            "      --top-p X             nucleus sampling 0..1 for this run (1: off)\n"
            "      --seed N              the sampling seed for this run\n"
            "      --think on|off        thinking for this conversation (saved with it)\n"
            "      --effort low|high|max reasoning effort for this conversation (saved with it)\n"
            "      --system TEXT         the conversation's system prompt (saved with it)\n"
            "      --max-tokens N        stop each reply after N tokens\n"
            "      --allow-tools         offer the built-in and MCP tools; risky ones (write_file,\n"
            "                            run_command, untrusted MCP tools) ask on the terminal first,\n"
            "                            and are refused when there is no terminal to ask\n"
            "      --allow-tool NAME     also run tool NAME (NAME,NAME... or the flag again) without\n"
            "                            asking; implies --allow-tools (--approve NAME is the same)\n"
            "      --reasoning WHERE     text output: thinking to stderr (default), stdout or none\n"
            "      --retry               answer the last message of the conversation again\n"
            "      --edit TEXT           replace the last message by TEXT and answer it\n"
            "      --from MSG            continue from message MSG (a branch)\n"
            "      --compact             summarise the conversation (with -c or --conversation):\n"
            "                            it goes on from the summary on a new branch\n"
            "  -h, --help                show this help\n"
            "\n"
            "Exit status: 0 done, 1 error, 2 bad usage, 130 interrupted by Ctrl-C, 143 by SIGTERM,\n"
            "129 by SIGHUP (the partial reply is saved, marked canceled). Settings: glmchat --paths\n"
            "shows the config file.\n");
}

static int parse_id(const char *cmd, const char *opt, const char *v, int64_t *out)
{
    long long x;
    if (setting_int(opt, v, 1, INT64_MAX, &x, NULL, 0))
        return cli_usage_error(cmd, "'%s' takes a number (an id from `glmchat list`), not '%s'", opt, v);
    *out = x;
    return 0;
}

static int parse_args(int argc, char **argv, chat_args *a)
{
    enum { O_CONV = 256, O_PROMPT, O_FORMAT, O_NOSAVE, O_THINK, O_EFFORT, O_MAXTOK, O_SYSTEM, O_TOOLS,
           O_REASONING, O_RETRY, O_EDIT, O_FROM, O_ALLOW_TOOL, O_LINES, O_TEMP, O_TOPP, O_SEED, O_COMPACT };
    static const struct option opts[] = {
        {"continue", no_argument, NULL, 'c'},        {"conversation", required_argument, NULL, O_CONV},
        {"prompt", required_argument, NULL, O_PROMPT}, {"output-format", required_argument, NULL, O_FORMAT},
        {"no-save", no_argument, NULL, O_NOSAVE},    {"think", required_argument, NULL, O_THINK},
        {"effort", required_argument, NULL, O_EFFORT}, {"max-tokens", required_argument, NULL, O_MAXTOK},
        {"system", required_argument, NULL, O_SYSTEM}, {"allow-tools", no_argument, NULL, O_TOOLS},
        {"reasoning", required_argument, NULL, O_REASONING}, {"retry", no_argument, NULL, O_RETRY},
        {"edit", required_argument, NULL, O_EDIT},   {"from", required_argument, NULL, O_FROM},
        {"allow-tool", required_argument, NULL, O_ALLOW_TOOL}, {"approve", required_argument, NULL, O_ALLOW_TOOL},
        {"file", required_argument, NULL, 'f'},      {"lines", no_argument, NULL, O_LINES},
        {"temperature", required_argument, NULL, O_TEMP}, {"top-p", required_argument, NULL, O_TOPP},
        {"seed", required_argument, NULL, O_SEED},      {"compact", no_argument, NULL, O_COMPACT},
        {"help", no_argument, NULL, 'h'},            {NULL, 0, NULL, 0},
    };
    memset(a, 0, sizeof *a);
    optind = 1;
    opterr = 0;
    int ch, pick;
    while ((ch = getopt_long(argc, argv, ":chf:", opts, NULL)) != -1) {
        switch (ch) {
        case 'c': a->continue_latest = 1; break;
        case 'f':
            if (a->n_files == MAX_ATTACHED_FILES)
                return cli_usage_error("chat", "at most %d files can be attached", MAX_ATTACHED_FILES);
            a->files[a->n_files++] = optarg;
            break;
        case O_LINES: a->lines = 1; break;
        case O_TEMP: a->temperature = optarg; break;
        case O_TOPP: a->top_p = optarg; break;
        case O_SEED: a->seed = optarg; break;
        case 'h': usage(stdout); return -1;
        case O_CONV:
            if (parse_id("chat", "--conversation", optarg, &a->conversation))
                return CLI_EXIT_USAGE;
            break;
        case O_PROMPT: a->prompt = optarg; break;
        case O_FORMAT:
            if (cli_choice_option("chat", "--output-format", optarg, "text|jsonl|json", &pick))
                return CLI_EXIT_USAGE;
            a->format = (output_format)pick;
            a->jsonl = a->format == OUTPUT_JSONL;
            break;
        case O_NOSAVE: a->no_save = 1; break;
        case O_THINK:
            if (cli_choice_option("chat", "--think", optarg, "on|off", &pick))
                return CLI_EXIT_USAGE;
            a->think = optarg;
            break;
        case O_EFFORT:
            if (cli_choice_option("chat", "--effort", optarg, "low|high|max", &pick))
                return CLI_EXIT_USAGE;
            a->effort = optarg;
            break;
        case O_MAXTOK: a->max_tokens = optarg; break;
        case O_SYSTEM: a->system = optarg; break;
        case O_TOOLS: a->allow_tools = 1; break;
        case O_ALLOW_TOOL:
            if (!*optarg || a->n_allow_tool == (int)(sizeof a->allow_tool / sizeof a->allow_tool[0]))
                return cli_usage_error("chat", "'%s' takes a tool name (see /tools), at most 64 times",
                                       argv[optind - 1]);
            a->allow_tool[a->n_allow_tool++] = optarg;
            a->allow_tools = 1;
            break;
        case O_REASONING: {
            static const reasoning_to where[] = {REASONING_STDERR, REASONING_STDOUT, REASONING_NONE};
            if (cli_choice_option("chat", "--reasoning", optarg, "stderr|stdout|none", &pick))
                return CLI_EXIT_USAGE;
            a->reasoning = where[pick];
            break;
        }
        case O_RETRY: a->retry = 1; break;
        case O_EDIT: a->edit = optarg; break;
        case O_COMPACT: a->compact = 1; break;
        case O_FROM:
            if (parse_id("chat", "--from", optarg, &a->from))
                return CLI_EXIT_USAGE;
            break;
        case ':': return cli_usage_error("chat", "'%s' needs a value", argv[optind - 1]);
        default: return cli_usage_error("chat", "unrecognized option '%s'", argv[optind - 1]);
        }
    }
    if (optind < argc)
        return cli_usage_error("chat", "unexpected argument '%s'; give the prompt with --prompt", argv[optind]);
    if (a->continue_latest && a->conversation)
        return cli_usage_error("chat", "give -c or --conversation, not both");
    if (a->no_save && a->compact)
        return cli_usage_error("chat", "--compact summarises a saved conversation; it goes without --no-save");
    if (a->no_save && (a->continue_latest || a->conversation || a->retry || a->edit || a->from))
        return cli_usage_error("chat", "--no-save starts a fresh chat in memory; it cannot continue one");
    if ((a->retry || a->edit) && !a->continue_latest && !a->conversation)
        return cli_usage_error("chat", "--retry and --edit need -c or --conversation ID");
    if (a->compact && !a->continue_latest && !a->conversation)
        return cli_usage_error("chat", "--compact needs -c or --conversation ID");
    if ((a->retry != 0) + (a->edit != NULL) + (a->prompt != NULL) + (a->compact != 0) > 1)
        return cli_usage_error("chat", "give one of --prompt, --retry, --edit and --compact");
    if (a->compact && (a->lines || a->n_files))
        return cli_usage_error("chat", "--compact summarises the conversation; it goes without --lines and -f");
    if (a->from && !a->conversation)
        return cli_usage_error("chat", "--from MSG needs --conversation ID");
    if (a->lines && (a->prompt || a->retry || a->edit || a->n_files))
        return cli_usage_error("chat", "--lines reads every prompt from stdin; it goes without --prompt, "
                                       "--retry, --edit and -f");
    if (a->n_files && (a->retry || a->edit))
        return cli_usage_error("chat", "-f attaches files to a new prompt; it goes without --retry and --edit");
    return 0;
}

/* ---- the output of scripted mode ---------------------------------------------------------------- */

/* What --output-format json gathers over a turn, written as one object when it ends. */
typedef struct json_turn {
    int64_t user_message;     /* its number in the conversation; 0 unsaved */
    attach_buf reply, reasoning;
    cJSON *tool_calls;
    int prompt_tokens, reused_tokens, generated_tokens, steps;
    int drafting, draft_windows, drafts_proposed, drafts_accepted; /* summed over the steps */
    double ttft_s, decode_tok_s;
} json_turn;

/* Exit status run_one gives when stdout's reader went away: the caller exits as other commands
 * do on SIGPIPE, quietly, after the reply is saved. */
#define EXIT_BROKEN_PIPE (-2)

typedef struct script_out {
    int jsonl;
    int json;
    int no_save;           /* nothing is saved: no ids are shown */
    int quiet_content;     /* --compact in text output: the summary is not printed */
    db_store *db;
    json_turn jt;
    int broken_pipe;       /* a write to stdout failed with EPIPE */
    jsonl_writer jw;
    reasoning_to reasoning;
    chat *chat;
    int session_sent;
    int continued;
    int in_reasoning;      /* the last text written was reasoning (stderr needs a newline) */
    int content_open;      /* content written without a final newline */
    int write_failed;
    char streamed_error[1024]; /* this turn's error event as the reply's events carried it */
    glm_stats done;        /* the last reply's final figures: its budget and where it came from */
    visible_stream out_vs, reasoning_vs; /* text mode shows control characters escaped */
    tool_policy *policy;   /* NULL without tools */
    int tool_note;         /* text output without tools: a reply asked for one (said once at the end) */
    const char *cache_dir; /* prompt_cache_dir, or NULL: where kept prompt states outlive the process */
} script_out;

/* The ids outputs show: the conversation's, and a message's number in it; 0 (null) under
 * --no-save, whose in-memory database numbers nothing the user can open again. */
static int64_t shown_conversation(const script_out *so)
{
    return so->no_save ? 0 : chat_conversation(so->chat);
}

static int64_t shown_message(const script_out *so, int64_t msg)
{
    if (so->no_save || msg <= 0)
        return 0;
    int64_t n = msg_number(so->db, chat_conversation(so->chat), msg);
    return n > 0 ? n : 0;
}

static void note_write(script_out *so, int failed)
{
    if (!failed)
        return;
    if (errno == EPIPE)
        so->broken_pipe = 1;
    so->write_failed = 1;
}

static void send_session(script_out *so)
{
    if (so->session_sent || !so->jsonl)
        return;
    so->session_sent = 1;
    note_write(so, jsonl_session(&so->jw, shown_conversation(so), so->continued) != 0);
}

static void on_user(void *u, int64_t msg, const char *text)
{
    script_out *so = u;
    send_session(so);
    if (so->jsonl)
        note_write(so, jsonl_user(&so->jw, shown_message(so, msg), text) != 0);
    if (so->json)
        so->jt.user_message = shown_message(so, msg);
}

static void on_assistant(void *u, int64_t msg)
{
    script_out *so = u;
    if (so->jsonl)
        note_write(so, jsonl_assistant(&so->jw, shown_message(so, msg)) != 0);
}

/* ---- --output-format json --------------------------------------------------------------------- */

static void json_turn_reset(json_turn *jt)
{
    attach_buf_free(&jt->reply);
    attach_buf_free(&jt->reasoning);
    cJSON_Delete(jt->tool_calls);
    memset(jt, 0, sizeof *jt);
}

static void json_append(attach_buf *b, const char *text, size_t len)
{
    char err[64];
    char *copy = strndup(text ? text : "", len);
    if (copy)
        attach_add_text(b, copy, err, sizeof err);
    free(copy);
}

static void json_tool_call(json_turn *jt, const glm_event *ev)
{
    if (!jt->tool_calls)
        jt->tool_calls = cJSON_CreateArray();
    cJSON *call = cJSON_CreateObject();
    if (!jt->tool_calls || !call || !cJSON_AddItemToArray(jt->tool_calls, call)) {
        cJSON_Delete(call);
        return;
    }
    cJSON_AddItemToObject(call, "id", ev->call_id ? cJSON_CreateString(ev->call_id) : cJSON_CreateNull());
    cJSON_AddStringToObject(call, "name", ev->name ? ev->name : "");
    char *text = strndup(ev->text ? ev->text : "", ev->len);
    cJSON *args = text ? cJSON_Parse(text) : NULL;
    if (args && cJSON_IsObject(args)) {
        cJSON_AddItemToObject(call, "arguments", args);
    } else {
        cJSON_Delete(args);
        cJSON_AddNullToObject(call, "arguments");
        cJSON_AddStringToObject(call, "arguments_text", text ? text : "");
    }
    free(text);
}

static void json_event(json_turn *jt, const glm_event *ev)
{
    switch (ev->type) {
    case GLM_EV_REASONING_DELTA: json_append(&jt->reasoning, ev->text, ev->len); return;
    case GLM_EV_CONTENT_DELTA: json_append(&jt->reply, ev->text, ev->len); return;
    case GLM_EV_TOOL_CALL_END: json_tool_call(jt, ev); return;
    case GLM_EV_DONE:
        if (jt->steps++ == 0)
            jt->ttft_s = ev->stats.ttft_s;
        jt->prompt_tokens = ev->stats.prompt_tokens; /* the last step's prompt holds the others */
        jt->reused_tokens += ev->stats.reused_tokens;
        jt->generated_tokens += ev->stats.generated_tokens;
        jt->decode_tok_s = ev->stats.decode_tok_s;
        jt->drafting |= ev->stats.drafting;
        jt->draft_windows += ev->stats.draft_windows;
        jt->drafts_proposed += ev->stats.drafts_proposed;
        jt->drafts_accepted += ev->stats.drafts_accepted;
        return;
    default: return;
    }
}

static void json_tool_result(json_turn *jt, const char *call_id, const tool_result *r)
{
    cJSON *call;
    cJSON_ArrayForEach(call, jt->tool_calls) {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(call, "id");
        int same = call_id ? cJSON_IsString(id) && strcmp(id->valuestring, call_id) == 0 : cJSON_IsNull(id);
        if (!same || cJSON_GetObjectItemCaseSensitive(call, "result"))
            continue;
        cJSON *res = cJSON_AddObjectToObject(call, "result");
        if (res) {
            cJSON_AddBoolToObject(res, "is_error", r->is_error);
            cJSON_AddStringToObject(res, "text", r->text ? r->text : "");
        }
        return;
    }
}

static cJSON *id_or_null(int64_t id)
{
    return id > 0 ? cJSON_CreateNumber((double)id) : cJSON_CreateNull();
}

/* The turn's one object on stdout. */
static void json_write_turn(script_out *so, const chat_outcome *out)
{
    json_turn *jt = &so->jt;
    cJSON *o = cJSON_CreateObject(), *usage = cJSON_CreateObject();
    if (!o || !usage) {
        cJSON_Delete(o);
        cJSON_Delete(usage);
        so->write_failed = 1;
        return;
    }
    cJSON_AddNumberToObject(o, "version", 1);
    cJSON_AddItemToObject(o, "conversation", id_or_null(shown_conversation(so)));
    cJSON_AddItemToObject(o, "user_message", id_or_null(jt->user_message));
    cJSON_AddItemToObject(o, "message", id_or_null(shown_message(so, out->last_message)));
    cJSON_AddStringToObject(o, "reply", jt->reply.text ? jt->reply.text : "");
    cJSON_AddStringToObject(o, "reasoning", jt->reasoning.text ? jt->reasoning.text : "");
    cJSON_AddItemToObject(o, "tool_calls", jt->tool_calls ? jt->tool_calls : cJSON_CreateArray());
    jt->tool_calls = NULL;
    cJSON_AddNumberToObject(usage, "prompt_tokens", jt->prompt_tokens);
    cJSON_AddNumberToObject(usage, "reused_tokens", jt->reused_tokens);
    cJSON_AddNumberToObject(usage, "generated_tokens", jt->generated_tokens);
    cJSON_AddNumberToObject(usage, "steps", jt->steps);
    cJSON_AddNumberToObject(usage, "ttft_s", jt->ttft_s);
    cJSON_AddNumberToObject(usage, "decode_tok_s", jt->decode_tok_s);
    if (jt->drafting) { /* as jsonl's stats: only with drafting on */
        cJSON_AddNumberToObject(usage, "draft_windows", jt->draft_windows);
        cJSON_AddNumberToObject(usage, "drafts_proposed", jt->drafts_proposed);
        cJSON_AddNumberToObject(usage, "drafts_accepted", jt->drafts_accepted);
    }
    cJSON_AddItemToObject(o, "usage", usage);
    cJSON_AddStringToObject(o, "finish", out->finish);
    cJSON_AddItemToObject(o, "error", strcmp(out->finish, "error") == 0 && out->error[0]
                                          ? cJSON_CreateString(out->error) : cJSON_CreateNull());
    char *text = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    note_write(so, !text || puts(text) == EOF || fflush(stdout) != 0);
    free(text);
    json_turn_reset(jt);
}

static void end_reasoning(script_out *so)
{
    if (!so->in_reasoning)
        return;
    so->in_reasoning = 0;
    FILE *f = so->reasoning == REASONING_STDOUT ? stdout : stderr;
    visible_flush(f, &so->reasoning_vs);
    fputs("\n", f);
    fflush(f);
}

static void text_event(script_out *so, const glm_event *ev)
{
    switch (ev->type) {
    case GLM_EV_REASONING_DELTA:
        if (so->reasoning == REASONING_NONE || ev->len == 0)
            return;
        FILE *f = so->reasoning == REASONING_STDOUT ? stdout : stderr;
        visible_write_stream(f, &so->reasoning_vs, ev->text, ev->len);
        fflush(f);
        so->in_reasoning = 1;
        return;
    case GLM_EV_CONTENT_DELTA:
        if (ev->len == 0 || so->quiet_content)
            return;
        /* the engine's note for a call while no tools are offered (engine/text/reply_parser.h) */
        if (!so->policy && memmem(ev->text, ev->len, "[the model asked for tool ", 26))
            so->tool_note = 1;
        end_reasoning(so);
        note_write(so, visible_write_stream(stdout, &so->out_vs, ev->text, ev->len) != 0 || fflush(stdout) != 0);
        so->content_open = ev->text[ev->len - 1] != '\n';
        return;
    case GLM_EV_TOOL_CALL_END:
        end_reasoning(so);
        fprintf(stderr, "[tool call] ");
        visible_write(stderr, ev->name ? ev->name : "?", strlen(ev->name ? ev->name : "?"));
        fputc(' ', stderr);
        visible_write(stderr, ev->text ? ev->text : "", ev->text ? ev->len : 0);
        fputc('\n', stderr);
        return;
    case GLM_EV_ERROR:
        end_reasoning(so);
        fprintf(stderr, "glmchat: the model failed: ");
        visible_write(stderr, ev->text ? ev->text : "", ev->text ? ev->len : 0);
        fputc('\n', stderr);
        return;
    default:
        return;
    }
}

static int on_event(void *u, const glm_event *ev)
{
    script_out *so = u;
    if (ev->type == GLM_EV_ERROR) /* kept as chat.c keeps it: at most 1000 bytes */
        snprintf(so->streamed_error, sizeof so->streamed_error, "%.*s",
                 (int)(ev->len < 1000 ? ev->len : 1000), ev->text ? ev->text : "");
    if (ev->type == GLM_EV_DONE)
        so->done = ev->stats;
    if (so->jsonl) {
        note_write(so, jsonl_event(&so->jw, ev) != 0);
    } else if (so->json) {
        json_event(&so->jt, ev);
    } else {
        text_event(so, ev);
    }
    return so->write_failed; /* nobody reads the answer any more: stop generating it */
}

static void on_tool_result(void *u, const char *call_id, const char *name, const tool_result *r)
{
    script_out *so = u;
    if (so->policy && so->policy->save_err[0]) { /* an "always" the config file did not take */
        fprintf(stderr, "glmchat: %s is allowed for this conversation only: %s\n", name, so->policy->save_err);
        so->policy->save_err[0] = 0;
    }
    if (so->jsonl) {
        note_write(so, jsonl_tool_result(&so->jw, call_id, name, r->is_error, tool_approval_name(r->approval),
                                         r->text) != 0);
        return;
    }
    if (so->json) {
        json_tool_result(&so->jt, call_id, r);
        return;
    }
    if (r->approval == TOOL_APPROVAL_FLAG)
        fprintf(stderr, "glmchat: %s ran without asking: allowed by --allow-tool\n", name);
    else if (r->approval == TOOL_APPROVAL_NO_TERMINAL)
        fprintf(stderr, "glmchat: %s was refused: it needs approval and there is no terminal to ask "
                        "(allow it with --allow-tool %s)\n", name, name);
    const char *t = r->text ? r->text : "";
    size_t first = strcspn(t, "\n");
    size_t shown = first < 400 ? first : 400;
    int more = shown < first || t[first + strspn(t + first, " \t\r\n")] != 0;
    fprintf(stderr, "[tool %s] %s: ", r->is_error ? "error" : "result", name);
    visible_write(stderr, t, shown);
    fprintf(stderr, "%s\n", more ? " ..." : "");
}

static void finish_turn(script_out *so, const chat_outcome *out)
{
    end_reasoning(so);
    if (so->jsonl) {
        send_session(so);
        /* an error the reply's events already carried is not written twice */
        if (strcmp(out->finish, "error") == 0 && out->error[0] && strcmp(out->error, so->streamed_error) != 0)
            jsonl_error(&so->jw, out->error);
        so->streamed_error[0] = 0;
        note_write(so, jsonl_turn_end(&so->jw, shown_conversation(so), shown_message(so, out->last_message),
                                      out->finish) != 0);
        return;
    }
    if (so->json) {
        json_write_turn(so, out);
        return;
    }
    visible_flush(stdout, &so->out_vs);
    if (so->content_open) {
        fputs("\n", stdout);
        fflush(stdout);
        so->content_open = 0;
    }
}

/* ---- setup ---------------------------------------------------------------------------------------- */

typedef struct chat_env {
    glm_paths paths;
    app_config cfg;
    db_store *db;
    void *hook_state;  /* the test build's model (source_hook.h), NULL in glmchat */
    chat_engine *engine;
    chat_source src;
    tool_registry *tools;
    tool_policy policy;
    builtin_ctx builtin;
    mcp_boot *mcp;
    app_log log;       /* the engine's lines: stderr, or the log file while the TUI runs */
} chat_env;

static void env_free(chat_env *e)
{
    mcp_boot_free(e->mcp);
    tools_free(e->tools);
    tool_policy_clear(&e->policy);
    if (e->hook_state)
        chat_source_hook_installed->close(e->hook_state);
    chat_engine_close(e->engine);
    app_log_close(&e->log);
    db_close(e->db);
    config_free(&e->cfg);
}

static int apply_flags(chat_env *e, const chat_args *a)
{
    char err[1024];
    static const struct {
        const char *key, *flag;
        size_t offset;
    } flags[] = {
        {"max_tokens", "--max-tokens", offsetof(chat_args, max_tokens)},
        {"temperature", "--temperature", offsetof(chat_args, temperature)},
        {"top_p", "--top-p", offsetof(chat_args, top_p)},
        {"seed", "--seed", offsetof(chat_args, seed)},
    };
    for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++) {
        const char *value = *(const char *const *)((const char *)a + flags[i].offset);
        if (value && config_set(&e->cfg, flags[i].key, value, flags[i].flag, err, sizeof err))
            return cli_usage_error("chat", "%s", err);
    }
    return 0;
}

static int open_source(chat_env *e)
{
    char err[2048];
    int hooked = chat_source_hook_installed
                     ? chat_source_hook_installed->open(&e->src, &e->hook_state, err, sizeof err)
                     : 0;
    if (hooked < 0)
        return cli_runtime_error("%s", err);
    if (hooked)
        return 0;
    e->engine = chat_engine_open(&e->cfg, &e->log, err, sizeof err);
    if (!e->engine)
        return cli_runtime_error("%s", err);
    e->src = chat_engine_source(e->engine);
    return 0;
}

/* Asks on the controlling terminal (a separate stream from stderr, which may be a file). */
static tool_answer ask_on_tty(void *user, const char *tool, const char *preview)
{
    (void)user;
    FILE *tty = fopen("/dev/tty", "r+");
    if (!tty)
        return TOOL_ANSWER_NO;
    tool_answer a = TOOL_ANSWER_NO;
    fprintf(tty, "glmchat: %s wants to run:\n", tool);
    visible_write(tty, preview, strlen(preview));
    fprintf(tty, "%s", preview[0] && preview[strlen(preview) - 1] == '\n' ? "" : "\n");
    for (;;) {
        fprintf(tty, "%s: ", TOOL_SCOPES_PROMPT);
        fflush(tty);
        char line[32];
        if (!fgets(line, sizeof line, tty))
            break;
        char c = (char)(line[0] | 0x20);
        if (c == 'y' || c == 'c' || c == 'a') {
            a = c == 'y' ? TOOL_ANSWER_YES : c == 'c' ? TOOL_ANSWER_CONVERSATION : TOOL_ANSWER_ALWAYS;
            break;
        }
        if (c == 'n' || line[0] == '\n')
            break;
    }
    fclose(tty);
    return a;
}

/* Whether a terminal can be asked: the controlling terminal opens (stderr does not matter). */
static int terminal_to_ask(void)
{
    FILE *tty = fopen("/dev/tty", "r+");
    if (!tty)
        return 0;
    fclose(tty);
    return 1;
}

/* tool_save_fn: the always-allowed tools go to the config file's always_allow line. */
static int save_always_allow(void *user, char *const *names, int n, char *err, size_t errlen)
{
    const char *config_file = user;
    size_t cap = 1;
    for (int i = 0; i < n; i++)
        cap += strlen(names[i]) + 2;
    char *list = malloc(cap);
    if (!list) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    list[0] = 0;
    for (int i = 0; i < n; i++) {
        if (i)
            strcat(list, ", ");
        strcat(list, names[i]);
    }
    int rc = config_save_top_key(config_file, "always_allow", list, err, errlen);
    free(list);
    return rc;
}

/* Each name in a list separated by commas or blanks: fn(name); stops at the first nonzero. */
static int each_name(const char *list, int (*fn)(void *u, const char *name), void *u)
{
    while (list && *list) {
        size_t skip = strspn(list, ", \t"), n;
        list += skip;
        n = strcspn(list, ", \t");
        if (n == 0)
            break;
        char name[128];
        snprintf(name, sizeof name, "%.*s", (int)(n < sizeof name - 1 ? n : sizeof name - 1), list);
        int rc = fn(u, name);
        if (rc)
            return rc;
        list += n;
    }
    return 0;
}

typedef struct allow_ctx {
    chat_env *e;
    const char *where; /* the flag or the config key, for messages */
} allow_ctx;

static int allow_flag_name(void *u, const char *name)
{
    allow_ctx *x = u;
    if (!tools_find(x->e->tools, name) && !mcp_boot_pending_tool(x->e->mcp, name))
        return cli_usage_error("chat", "%s names '%s', which is not a tool here (risky tools: write_file, "
                                       "run_command, and MCP tools as SERVER__TOOL)", x->where, name);
    if (tool_policy_allow_by_flag(&x->e->policy, name))
        return cli_runtime_error("out of memory");
    return 0;
}

static int allow_always_name(void *u, const char *name)
{
    allow_ctx *x = u;
    /* a tool of a server still starting in the background is kept */
    if (!tools_find(x->e->tools, name) && !mcp_boot_pending_tool(x->e->mcp, name)) {
        /* an MCP server that did not start: said already */
        fprintf(stderr, "glmchat: always_allow in %s names '%s', which is not a tool here; ignored\n",
                x->e->paths.config_file, name);
        return 0;
    }
    if (tool_policy_allow_always(&x->e->policy, name))
        return cli_runtime_error("out of memory");
    return 0;
}

/* Approvals by policy: the config's mode, --allow-tool names, always_allow, and a terminal to
 * ask when there is one; never whether stderr is a terminal. */
static int setup_policy(chat_env *e, const chat_args *a)
{
    tool_policy_init(&e->policy, e->cfg.approval, terminal_to_ask() ? ask_on_tty : NULL, NULL);
    e->policy.save = save_always_allow;
    e->policy.save_user = e->paths.config_file;
    allow_ctx flag = {e, "--allow-tool"}, always = {e, "always_allow"};
    int rc = 0;
    for (int i = 0; i < a->n_allow_tool && rc == 0; i++)
        rc = each_name(a->allow_tool[i], allow_flag_name, &flag);
    if (rc == 0)
        rc = each_name(e->cfg.always_allow, allow_always_name, &always);
    return rc;
}

static void report_on_stderr(void *user, int failed, const char *text)
{
    (void)user;
    if (failed)
        fprintf(stderr, "glmchat: %s\n", text);
}

/* in_background: the TUI starts the MCP servers once its view is up (chat_tui.c), showing
 * their progress; their tools are named in --allow-tool and always_allow before they exist. */
static int open_tools(chat_env *e, const chat_args *a, int in_background)
{
    char err[2048];
    e->tools = tools_new();
    if (!e->tools)
        return cli_runtime_error("out of memory");
    if (workspace_open(&e->builtin.ws, e->cfg.workspace, err, sizeof err))
        return cli_runtime_error("%s; set 'workspace' in %s", err, e->paths.config_file);
    e->builtin.command_timeout_s = e->cfg.tool_timeout_s;
    if (builtin_tools_add(e->tools, &e->builtin, err, sizeof err))
        return cli_runtime_error("%s", err);
    e->mcp = mcp_boot_new(&e->cfg, e->paths.state_dir, e->tools);
    if (!e->mcp)
        return cli_runtime_error("out of memory");
    if (!in_background)
        mcp_boot_run(e->mcp, report_on_stderr, NULL);
    return setup_policy(e, a);
}

/* The TUI when stdin and stdout are a terminal and no one-shot action was asked for. */
static int interactive(const chat_args *a)
{
    return !a->prompt && !a->retry && !a->edit && !a->compact && a->format == OUTPUT_TEXT && !a->n_files && !a->lines &&
           isatty(0) && isatty(1);
}

static int setup(chat_env *e, const chat_args *a, const cli_globals *g)
{
    char err[2048];
    if (paths_resolve(&e->paths, g, err, sizeof err))
        return cli_runtime_error("%s", err);
    if (config_load(&e->cfg, e->paths.config_file, g, err, sizeof err))
        return cli_runtime_error("%s", err);
    int rc = apply_flags(e, a);
    if (rc)
        return rc;
    e->db = db_open(a->no_save ? ":memory:" : e->paths.db_file, err, sizeof err);
    if (!e->db)
        return cli_runtime_error("%s", err);
    if (a->conversation && conv_exists(e->db, a->conversation) == 0) /* before a slow model load */
        return cli_runtime_error("there is no conversation %lld in %s; `glmchat list` shows them",
                                 (long long)a->conversation, e->paths.db_file);
    if ((rc = open_source(e)))
        return rc;
    int tools = a->allow_tools || (interactive(a) && e->cfg.tools_enabled);
    if (tools && (rc = open_tools(e, a, interactive(a))))
        return rc;
    return 0;
}

/* ---- the session ------------------------------------------------------------------------------------ */

static void cancel_source(void *arg)
{
    const chat_source *src = arg;
    if (src->cancel)
        src->cancel(src->self);
}

/* The next prompt from in: one line, or several joined where a line ends in '\'. NULL at EOF.
 * A line may end in CRLF (a file from Windows): the CR goes with the LF. */
static char *read_prompt(FILE *in)
{
    char *out = NULL, *line = NULL;
    size_t len = 0, cap = 0;
    ssize_t n;
    while ((n = getline(&line, &cap, in)) > 0) {
        if (line[n - 1] == '\n') {
            line[--n] = 0;
            if (n > 0 && line[n - 1] == '\r')
                line[--n] = 0;
        }
        int more = n > 0 && line[n - 1] == '\\';
        if (more)
            line[n - 1] = '\n';
        char *grown = realloc(out, len + (size_t)n + 1);
        if (!grown)
            break;
        out = grown;
        memcpy(out + len, line, (size_t)n + 1);
        len += (size_t)n;
        if (!more)
            break;
    }
    free(line);
    return out;
}

static int blank(const char *s)
{
    for (; *s; s++)
        if (*s != ' ' && *s != '\t' && *s != '\n' && *s != '\r')
            return 0;
    return 1;
}

/* Drops the newlines that end text (the one `echo` adds, most often). */
static void trim_final_newlines(char *text, size_t *len)
{
    while (*len > 0 && (text[*len - 1] == '\n' || text[*len - 1] == '\r'))
        text[--*len] = 0;
}

/* The one prompt of a scripted run: --prompt TEXT with piped stdin attached after it, else all
 * of stdin; then each -f FILE. prompt->text stays NULL when there is nothing to send (stdin
 * empty, no --prompt and no file): no turn, as an empty script has none. */
static int build_prompt(chat_env *e, const chat_args *a, attach_buf *prompt)
{
    char err[PATH_MAX + 512];
    char *in = NULL;
    size_t in_len = 0;
    if (!isatty(0) && fcntl(0, F_GETFD) != -1) { /* a closed stdin is no document */
        in = attach_read_stream(stdin, a->prompt ? "stdin" : "the prompt on stdin", &in_len, err, sizeof err);
        if (!in)
            return cli_runtime_error("%s", err);
        trim_final_newlines(in, &in_len);
    }
    int rc = 0;
    if (a->prompt && blank(a->prompt)) {
        rc = cli_usage_error("chat", "the prompt is empty");
    } else if (a->prompt) {
        if (attach_add_text(prompt, a->prompt, err, sizeof err) ||
            (in && !blank(in) && attach_add_document(prompt, "stdin", in, in_len, err, sizeof err)))
            rc = cli_runtime_error("%s", err);
    } else if (in && !blank(in)) {
        if (attach_add_text(prompt, in, err, sizeof err))
            rc = cli_runtime_error("%s", err);
    } else if (a->n_files) {
        rc = cli_usage_error("chat", "-f attaches files to a prompt: give --prompt TEXT or pipe one on stdin");
    }
    free(in);
    if (rc || !a->n_files)
        return rc;
    workspace ws;
    if (workspace_open(&ws, e->cfg.workspace, err, sizeof err))
        return cli_runtime_error("%s; set 'workspace' in %s", err, e->paths.config_file);
    for (int i = 0; i < a->n_files; i++)
        if (attach_add_file(prompt, &ws, a->files[i], err, sizeof err))
            return cli_runtime_error("%s", err);
    return 0;
}

/* A reply cut at its budget: which limit cut it, and how to change it. */
static void tell_cut(const glm_stats *s, const chat_args *a)
{
    switch (s->limit_from) {
    case GLM_LIMIT_CONTEXT:
        fprintf(stderr, "glmchat: the reply was cut where the context window of %d tokens is full "
                        "(--context)\n", s->context_window);
        return;
    case GLM_LIMIT_REQUEST:
        if (a->max_tokens)
            fprintf(stderr, "glmchat: the reply was cut at the token limit (--max-tokens %d)\n",
                    s->max_tokens);
        else
            fprintf(stderr, "glmchat: the reply was cut at the token limit of %d (max_tokens in the "
                            "config file or GLMCHAT_MAX_TOKENS)\n", s->max_tokens);
        return;
    case GLM_LIMIT_MODEL:
        fprintf(stderr, "glmchat: the reply was cut at the token limit of %d (max_new_tokens in the "
                        "model's generation_config.json; --max-tokens N to change it)\n", s->max_tokens);
        return;
    case GLM_LIMIT_DEFAULT:
        fprintf(stderr, "glmchat: the reply was cut at the default token limit of %d (--max-tokens N "
                        "to change it)\n", s->max_tokens);
        return;
    default:
        fprintf(stderr, "glmchat: the reply was cut at the token limit\n");
        return;
    }
}

/* A reply canceled within its prompt's prefill: the pieces that ran are in the prompt cache, which
 * outlives the process only with a directory (said only then). */
static void tell_kept(const script_out *so)
{
    if (so->done.kept_tokens > 0 && so->cache_dir && *so->cache_dir)
        fprintf(stderr, "glmchat: the prompt's first %d of %d tokens ran and are kept in %s "
                        "(prompt_cache_dir): the same prompt goes on from there\n",
                so->done.kept_tokens, so->done.prompt_tokens, so->cache_dir);
}

/* Runs one action; returns the exit status it calls for (0 to go on). *peer_failed is set when
 * the reply failed because the worker did: the next turn connects to it again. */
static int run_one(chat *c, script_out *so, const chat_args *a, const char *text, int *peer_failed)
{
    *peer_failed = 0;
    chat_outcome out;
    char err[2048];
    int rc;
    if (a->retry)
        rc = chat_retry(c, &out, err, sizeof err);
    else if (a->edit)
        rc = chat_edit(c, a->edit, &out, err, sizeof err);
    else
        rc = chat_turn(c, text, &out, err, sizeof err);
    if (rc != 0) {
        if (so->jsonl)
            jsonl_error(&so->jw, err);
        return cli_runtime_error("%s", err);
    }
    finish_turn(so, &out);
    if (so->broken_pipe) /* the reader has all it wanted (`| head`): no error, as for other commands */
        return EXIT_BROKEN_PIPE;
    if (so->write_failed && so->no_save)
        return cli_runtime_error("cannot write the answer to stdout: %s; nothing was saved (--no-save)",
                                 strerror(errno));
    if (so->write_failed)
        return cli_runtime_error("cannot write the answer to stdout: %s; the reply is saved in conversation %lld",
                                 strerror(errno), (long long)chat_conversation(c));
    if (strcmp(out.finish, "canceled") == 0 && so->no_save) {
        fprintf(stderr, "glmchat: %s; nothing was saved (--no-save)\n", signals_what());
        tell_kept(so);
        return signals_exit_status();
    }
    if (strcmp(out.finish, "canceled") == 0) {
        fprintf(stderr, "glmchat: %s; the partial reply is saved as message %lld of conversation %lld\n",
                signals_what(), (long long)shown_message(so, out.last_message), (long long)chat_conversation(c));
        tell_kept(so);
        return signals_exit_status();
    }
    if (strcmp(out.finish, "error") == 0) {
        *peer_failed = out.peer_failed;
        int said = out.error[0] && strcmp(out.error, so->streamed_error) == 0; /* by text_event */
        so->streamed_error[0] = 0;
        return said ? CLI_EXIT_RUNTIME
                    : cli_runtime_error("the reply failed: %s", out.error[0] ? out.error : "unknown error");
    }
    if (strcmp(out.finish, "length") == 0 && !so->jsonl)
        tell_cut(&so->done, a);
    if (strcmp(out.finish, "tool_limit") == 0)
        fprintf(stderr, "glmchat: the model kept calling tools; stopped after %d replies\n", out.steps);
    return 0;
}

/* --compact: the summary's events go out as a reply's do in jsonl and json; text output gets one
 * line saying what happened, since the summary itself is the new branch's first message. */
static int run_compact(chat *c, script_out *so)
{
    chat_outcome out;
    char err[2048];
    int summarised = 0;
    so->quiet_content = !so->jsonl && !so->json;
    int rc = chat_compact(c, &out, &summarised, err, sizeof err);
    so->quiet_content = 0;
    if (rc != 0) {
        if (so->jsonl)
            jsonl_error(&so->jw, err);
        return cli_runtime_error("%s", err);
    }
    finish_turn(so, &out);
    if (so->broken_pipe)
        return EXIT_BROKEN_PIPE;
    if (strcmp(out.finish, "canceled") == 0) {
        fprintf(stderr, "glmchat: %s; the conversation is unchanged\n", signals_what());
        return signals_exit_status();
    }
    if (strcmp(out.finish, "stop") != 0) {
        int said = out.error[0] && strcmp(out.error, so->streamed_error) == 0;
        so->streamed_error[0] = 0;
        return said ? CLI_EXIT_RUNTIME
                    : cli_runtime_error("%s", out.error[0] ? out.error : "the summary failed; the conversation is unchanged");
    }
    if (!so->jsonl && !so->json) {
        note_write(so, printf("summarised %d messages into one; conversation %lld goes on from the summary on a new "
                              "branch\n", summarised, (long long)chat_conversation(c)) < 0 || fflush(stdout) != 0);
    }
    if (so->write_failed)
        return cli_runtime_error("cannot write to stdout: %s; the summary is saved in conversation %lld",
                                 strerror(errno), (long long)chat_conversation(c));
    return 0;
}

static int apply_conversation_flags(chat *c, db_store *db, const chat_args *a)
{
    char err[1024];
    if (a->think && chat_set_think(c, strcmp(a->think, "on") == 0, err, sizeof err))
        return cli_runtime_error("%s", err);
    if (a->effort) {
        glm_effort e = a->effort[0] == 'l' ? GLM_EFFORT_LOW : a->effort[0] == 'h' ? GLM_EFFORT_HIGH : GLM_EFFORT_MAX;
        if (chat_set_effort(c, e, err, sizeof err))
            return cli_runtime_error("%s", err);
    }
    if (a->system && chat_set_system_prompt(c, a->system, err, sizeof err))
        return cli_runtime_error("%s", err);
    if (a->from) {
        int64_t msg = msg_by_number(db, chat_conversation(c), a->from);
        if (msg < 0)
            return cli_runtime_error("%s", db_errmsg(db));
        if (msg == 0)
            return cli_runtime_error("conversation %lld has no message %lld; `glmchat export %lld --format md` "
                                     "shows them", (long long)chat_conversation(c), (long long)a->from,
                                     (long long)chat_conversation(c));
        if (chat_branch(c, msg, err, sizeof err))
            return cli_runtime_error("%s", err);
    }
    return 0;
}

/* While the TUI owns the screen the engine's lines go to STATE_DIR/engine.log. */
static int log_to_state_dir(chat_env *e)
{
    char path[PATH_MAX + 16], err[PATH_MAX + 256];
    int w = snprintf(path, sizeof path, "%s/engine.log", e->paths.state_dir);
    if (w < 0 || (size_t)w >= sizeof path)
        return cli_runtime_error("the state directory %s is too long a path", e->paths.state_dir);
    if (paths_mkdirs(e->paths.state_dir) != 0)
        return cli_runtime_error("cannot create the state directory %s (for engine.log): %s",
                                 e->paths.state_dir, strerror(errno));
    if (app_log_to_file(&e->log, path, err, sizeof err))
        return cli_runtime_error("%s", err);
    return 0;
}

static int run_tui(chat_env *e, const chat_args *a, int64_t conv)
{
    char err[2048], history[PATH_MAX + 16], copied[PATH_MAX + 16];
    int rc = log_to_state_dir(e);
    if (rc)
        return rc;
    int w = snprintf(history, sizeof history, "%s/history", e->paths.state_dir);
    int keep_history = w > 0 && (size_t)w < sizeof history && paths_mkdirs(e->paths.state_dir) == 0;
    int cw = snprintf(copied, sizeof copied, "%s/copied.txt", e->paths.state_dir);
    int keep_copies = keep_history && cw > 0 && (size_t)cw < sizeof copied;
    chat_tui_opts to = {.db = e->db, .src = &e->src, .tools = e->tools, .policy = e->tools ? &e->policy : NULL,
                        .mcp = e->mcp, .history_file = keep_history ? history : NULL,
                        .copy_file = keep_copies ? copied : NULL,
                        .backend = chat_engine_backend_name(&e->cfg), .workspace = e->cfg.workspace,
                        /* no --model, GLMCHAT_MODEL or `model =`: the demo model (chat_engine_open) */
                        .empty_hint = e->cfg.model_dir ? NULL : demo_model_hint()};
    chat_tui *t = chat_tui_new(&to, err, sizeof err);
    if (!t)
        return cli_runtime_error("%s", err);
    chat_options o = {.cfg = &e->cfg, .db = e->db, .tools = e->tools, .policy = e->tools ? &e->policy : NULL,
                      .cancel = signals_cancel_flag()};
    chat_sink sink = chat_tui_sink(t);
    chat *c = chat_new(&o, &e->src, &sink, err, sizeof err);
    if (!c)
        rc = cli_runtime_error("%s", err);
    else if (chat_open(c, conv, err, sizeof err))
        rc = cli_runtime_error("%s", err);
    else if ((rc = apply_conversation_flags(c, e->db, a)) == 0 && chat_tui_run(t, c, err, sizeof err) != 0)
        rc = cli_runtime_error("%s", err);
    chat_free(c);
    chat_tui_free(t);
    return rc;
}

static int run_session(chat_env *e, const chat_args *a)
{
    char err[2048];
    int64_t conv = a->conversation;
    if (a->continue_latest) {
        conv = conv_latest(e->db);
        if (conv < 0)
            return cli_runtime_error("%s", db_errmsg(e->db));
        if (conv == 0 && (a->retry || a->edit || a->compact))
            return cli_runtime_error("there is no conversation to continue in %s", e->paths.db_file);
    }
    if (interactive(a))
        return run_tui(e, a, conv);
    script_out so = {.jsonl = a->jsonl, .json = a->format == OUTPUT_JSON, .no_save = a->no_save, .db = e->db,
                     .reasoning = a->reasoning, .continued = conv != 0, .policy = e->tools ? &e->policy : NULL,
                     .cache_dir = e->cfg.prompt_cache_dir};
    jsonl_init(&so.jw, stdout);
    chat_options o = {.cfg = &e->cfg, .db = e->db, .tools = e->tools, .policy = e->tools ? &e->policy : NULL,
                      .cancel = signals_cancel_flag()};
    chat_sink sink = {.user = on_user, .assistant = on_assistant, .event = on_event, .tool_result = on_tool_result,
                      .u = &so};
    chat *c = chat_new(&o, &e->src, &sink, err, sizeof err);
    if (!c)
        return cli_runtime_error("%s", err);
    so.chat = c;
    int peer_failed = 0;
    int rc = chat_open(c, conv, err, sizeof err) ? cli_runtime_error("%s", err) : apply_conversation_flags(c, e->db, a);
    if (rc == 0 && conv)
        send_session(&so);
    if (rc == 0 && a->compact) {
        rc = run_compact(c, &so);
    } else if (rc == 0 && (a->retry || a->edit)) {
        rc = run_one(c, &so, a, NULL, &peer_failed);
    } else if (rc == 0 && a->lines) {
        char *text;
        int lines = 0, lost = 0, lost_last = 0;
        while (rc == 0 && (text = read_prompt(stdin))) {
            if (!blank(text) && !signals_interrupted()) {
                lines++;
                rc = run_one(c, &so, a, text, &peer_failed);
                /* the worker failed: the next line connects to it again, as its message says */
                lost_last = rc == CLI_EXIT_RUNTIME && peer_failed;
                if (lost_last) {
                    lost++;
                    rc = 0;
                }
            }
            free(text);
        }
        if (rc == 0 && signals_interrupted()) /* a signal while waiting for the next prompt */
            rc = signals_exit_status();
        if (rc == 0 && lost)
            rc = cli_runtime_error("%d of %d replies failed because the worker did%s", lost, lines,
                                   lost_last ? "; the last one too, so start the worker and send it again"
                                             : "; the worker was reached again for the lines after");
    } else if (rc == 0) {
        attach_buf prompt = {0};
        rc = build_prompt(e, a, &prompt);
        if (rc == 0 && prompt.text)
            rc = run_one(c, &so, a, prompt.text, &peer_failed);
        attach_buf_free(&prompt);
    }
    if (so.tool_note)
        fprintf(stderr, "glmchat: the model asked for a tool, but none is offered here: --allow-tools "
                        "offers them (risky ones ask on a terminal first)\n");
    json_turn_reset(&so.jt);
    chat_free(c);
    return rc;
}

int cmd_chat(int argc, char **argv, const cli_globals *g)
{
    chat_args a;
    int rc = parse_args(argc, argv, &a);
    if (rc)
        return rc < 0 ? CLI_EXIT_OK : rc;
    chat_env e;
    memset(&e, 0, sizeof e);
    config_init(&e.cfg);
    rc = setup(&e, &a, g);
    if (rc == 0 && interactive(&a)) {
        rc = run_session(&e, &a); /* the TUI reads Ctrl-C as a key */
    } else if (rc == 0) {
        if (signals_install() != 0) {
            rc = cli_runtime_error("cannot install the Ctrl-C handler: %s", strerror(errno));
        } else {
            signals_on_interrupt(cancel_source, &e.src);
            rc = run_session(&e, &a);
            signals_on_interrupt(NULL, NULL);
            signals_restore();
        }
    }
    env_free(&e);
    if (rc == EXIT_BROKEN_PIPE) { /* end as a command killed by SIGPIPE does, now the reply is saved */
        fflush(stderr);
        signal(SIGPIPE, SIG_DFL);
        raise(SIGPIPE);
        return CLI_EXIT_RUNTIME;
    }
    return rc;
}
