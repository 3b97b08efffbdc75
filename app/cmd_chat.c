/* cmd_chat.c: `glmchat chat` (CLI.md): options, config, database, tools and MCP servers, then
 * scripted mode: prompts from stdin or --prompt, the answer on stdout, events as text or jsonl. */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "app/chat.h"
#include "app/chat_engine.h"
#include "app/chat_tui.h"
#include "app/commands.h"
#include "app/config.h"
#include "app/config_save.h"
#include "app/jsonl.h"
#include "app/paths.h"
#include "app/signals.h"
#include "app/test_reply_source.h"
#include "ui/visible.h"
#include "app/tools/builtin.h"
#include "app/tools/mcp.h"
#include "engine/setting.h"

/* Test hook: replay recorded replies (app/test_reply_source.h) instead of running a model. */
#define TEST_HOOK_REPLIES "GLMCHAT_TEST_REPLIES"
#define TEST_HOOK_REQUESTS "GLMCHAT_TEST_REQUESTS"
#define TEST_HOOK_DELAY "GLMCHAT_TEST_REPLY_DELAY_MS"

typedef enum reasoning_to { REASONING_STDERR, REASONING_STDOUT, REASONING_NONE } reasoning_to;

typedef struct chat_args {
    int continue_latest;
    int64_t conversation;
    const char *prompt;
    int jsonl;
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
    int64_t from;
} chat_args;

static void usage(FILE *f)
{
    fprintf(f,
            "Usage: glmchat chat [OPTION]...\n"
            "Chat with the model. On a terminal this is the TUI; otherwise prompts come from stdin,\n"
            "one a line (a line ending in '\\' continues), and the answers go to stdout.\n"
            "\n"
            "  -c, --continue            continue the latest conversation\n"
            "      --conversation ID     continue conversation ID (see `glmchat list`)\n"
            "      --prompt TEXT         one turn with TEXT instead of reading stdin\n"
            "      --output-format FMT   text (default) or jsonl: one JSON event a line\n"
            "      --no-save             keep this chat in memory only\n"
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
           O_REASONING, O_RETRY, O_EDIT, O_FROM, O_ALLOW_TOOL };
    static const struct option opts[] = {
        {"continue", no_argument, NULL, 'c'},        {"conversation", required_argument, NULL, O_CONV},
        {"prompt", required_argument, NULL, O_PROMPT}, {"output-format", required_argument, NULL, O_FORMAT},
        {"no-save", no_argument, NULL, O_NOSAVE},    {"think", required_argument, NULL, O_THINK},
        {"effort", required_argument, NULL, O_EFFORT}, {"max-tokens", required_argument, NULL, O_MAXTOK},
        {"system", required_argument, NULL, O_SYSTEM}, {"allow-tools", no_argument, NULL, O_TOOLS},
        {"reasoning", required_argument, NULL, O_REASONING}, {"retry", no_argument, NULL, O_RETRY},
        {"edit", required_argument, NULL, O_EDIT},   {"from", required_argument, NULL, O_FROM},
        {"allow-tool", required_argument, NULL, O_ALLOW_TOOL}, {"approve", required_argument, NULL, O_ALLOW_TOOL},
        {"help", no_argument, NULL, 'h'},            {NULL, 0, NULL, 0},
    };
    memset(a, 0, sizeof *a);
    optind = 1;
    opterr = 0;
    int ch, pick;
    while ((ch = getopt_long(argc, argv, ":ch", opts, NULL)) != -1) {
        switch (ch) {
        case 'c': a->continue_latest = 1; break;
        case 'h': usage(stdout); return -1;
        case O_CONV:
            if (parse_id("chat", "--conversation", optarg, &a->conversation))
                return CLI_EXIT_USAGE;
            break;
        case O_PROMPT: a->prompt = optarg; break;
        case O_FORMAT:
            if (cli_choice_option("chat", "--output-format", optarg, "text|jsonl", &pick))
                return CLI_EXIT_USAGE;
            a->jsonl = pick == 1;
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
    if (a->no_save && (a->continue_latest || a->conversation || a->retry || a->edit || a->from))
        return cli_usage_error("chat", "--no-save starts a fresh chat in memory; it cannot continue one");
    if ((a->retry || a->edit) && !a->continue_latest && !a->conversation)
        return cli_usage_error("chat", "--retry and --edit need -c or --conversation ID");
    if ((a->retry != 0) + (a->edit != NULL) + (a->prompt != NULL) > 1)
        return cli_usage_error("chat", "give one of --prompt, --retry and --edit");
    if (a->from && !a->conversation)
        return cli_usage_error("chat", "--from MSG needs --conversation ID");
    return 0;
}

/* ---- the output of scripted mode ---------------------------------------------------------------- */

typedef struct script_out {
    int jsonl;
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
} script_out;

static void send_session(script_out *so)
{
    if (so->session_sent || !so->jsonl)
        return;
    so->session_sent = 1;
    jsonl_session(&so->jw, chat_conversation(so->chat), so->continued);
}

static void on_user(void *u, int64_t msg, const char *text)
{
    script_out *so = u;
    send_session(so);
    if (so->jsonl)
        jsonl_user(&so->jw, msg, text);
}

static void on_assistant(void *u, int64_t msg)
{
    script_out *so = u;
    if (so->jsonl)
        jsonl_assistant(&so->jw, msg);
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
        if (ev->len == 0)
            return;
        end_reasoning(so);
        if (visible_write_stream(stdout, &so->out_vs, ev->text, ev->len) != 0 || fflush(stdout) != 0)
            so->write_failed = 1;
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
        if (jsonl_event(&so->jw, ev))
            so->write_failed = 1;
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
        jsonl_tool_result(&so->jw, call_id, name, r->is_error, tool_approval_name(r->approval), r->text);
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
        jsonl_turn_end(&so->jw, chat_conversation(so->chat), out->last_message, out->finish);
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
    test_reply_source *replies;
    chat_engine *engine;
    chat_source src;
    tool_registry *tools;
    tool_policy policy;
    builtin_ctx builtin;
    mcp_client **mcp;
    int n_mcp;
} chat_env;

static void env_free(chat_env *e)
{
    for (int i = 0; i < e->n_mcp; i++)
        mcp_stop(e->mcp[i]);
    free(e->mcp);
    tools_free(e->tools);
    tool_policy_clear(&e->policy);
    test_reply_source_free(e->replies);
    chat_engine_close(e->engine);
    db_close(e->db);
    config_free(&e->cfg);
}

static int apply_flags(chat_env *e, const chat_args *a)
{
    char err[1024];
    if (a->max_tokens && config_set(&e->cfg, "max_tokens", a->max_tokens, "--max-tokens", err, sizeof err))
        return cli_usage_error("chat", "%s", err);
    return 0;
}

static int open_source(chat_env *e)
{
    const char *replies = getenv(TEST_HOOK_REPLIES);
    char err[2048];
    if (!replies || !*replies) {
        e->engine = chat_engine_open(&e->cfg, err, sizeof err);
        if (!e->engine)
            return cli_runtime_error("%s", err);
        e->src = chat_engine_source(e->engine);
        return 0;
    }
    const char *delay = getenv(TEST_HOOK_DELAY);
    long long delay_ms = 0;
    if (delay && *delay && setting_int(TEST_HOOK_DELAY, delay, 0, 600000, &delay_ms, err, sizeof err))
        return cli_runtime_error("%s", err);
    e->replies = test_reply_source_open(replies, getenv(TEST_HOOK_REQUESTS), (int)delay_ms, err, sizeof err);
    if (!e->replies)
        return cli_runtime_error("%s", err);
    e->src = test_reply_source_as_source(e->replies);
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
    if (!tools_find(x->e->tools, name))
        return cli_usage_error("chat", "%s names '%s', which is not a tool here (risky tools: write_file, "
                                       "run_command, and MCP tools as SERVER__TOOL)", x->where, name);
    if (tool_policy_allow_by_flag(&x->e->policy, name))
        return cli_runtime_error("out of memory");
    return 0;
}

static int allow_always_name(void *u, const char *name)
{
    allow_ctx *x = u;
    if (!tools_find(x->e->tools, name)) /* an MCP server that did not start: said already */
        fprintf(stderr, "glmchat: always_allow in %s names '%s', which is not a tool here; ignored\n",
                x->e->paths.config_file, name);
    else if (tool_policy_allow_always(&x->e->policy, name))
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

static int open_tools(chat_env *e, const chat_args *a)
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
    e->mcp = calloc((size_t)(e->cfg.n_mcp ? e->cfg.n_mcp : 1), sizeof *e->mcp);
    if (!e->mcp)
        return cli_runtime_error("out of memory");
    if (e->cfg.n_mcp && paths_mkdirs(e->paths.state_dir) != 0)
        fprintf(stderr, "glmchat: cannot create %s for MCP server logs: %s\n", e->paths.state_dir, strerror(errno));
    for (int i = 0; i < e->cfg.n_mcp; i++) {
        const config_mcp_server *s = &e->cfg.mcp[i];
        if (!s->enabled)
            continue;
        char log[PATH_MAX + 64];
        int w = snprintf(log, sizeof log, "%s/mcp-%s.log", e->paths.state_dir, s->name);
        if (w < 0 || (size_t)w >= sizeof log) {
            fprintf(stderr, "glmchat: the state directory path is too long for MCP server logs\n");
            continue;
        }
        mcp_client *m = mcp_start(s, log, err, sizeof err);
        if (!m) {
            fprintf(stderr, "glmchat: %s; its tools are not offered (its log: %s)\n", err, log);
            continue;
        }
        e->mcp[e->n_mcp++] = m;
        if (mcp_register_tools(m, e->tools, s->trusted, err, sizeof err) > 0)
            fprintf(stderr, "glmchat: %s\n", err);
    }
    return setup_policy(e, a);
}

/* The TUI when stdin and stdout are a terminal and no one-shot action was asked for. */
static int interactive(const chat_args *a)
{
    return !a->prompt && !a->retry && !a->edit && !a->jsonl && isatty(0) && isatty(1);
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
    if (tools && (rc = open_tools(e, a)))
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

/* The next prompt from in: one line, or several joined where a line ends in '\'. NULL at EOF. */
static char *read_prompt(FILE *in)
{
    char *out = NULL, *line = NULL;
    size_t len = 0, cap = 0;
    ssize_t n;
    while ((n = getline(&line, &cap, in)) > 0) {
        if (line[n - 1] == '\n')
            line[--n] = 0;
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
    if (so->write_failed)
        return cli_runtime_error("cannot write the answer to stdout: %s; the reply is saved in conversation %lld",
                                 strerror(errno), (long long)chat_conversation(c));
    if (strcmp(out.finish, "canceled") == 0) {
        fprintf(stderr, "glmchat: %s; the partial reply is saved as message %lld of conversation %lld\n",
                signals_what(), (long long)out.last_message, (long long)chat_conversation(c));
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

static int apply_conversation_flags(chat *c, const chat_args *a)
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
    if (a->from && chat_branch(c, a->from, err, sizeof err))
        return cli_runtime_error("%s", err);
    return 0;
}

static int run_tui(chat_env *e, const chat_args *a, int64_t conv)
{
    char err[2048], history[PATH_MAX + 16];
    int w = snprintf(history, sizeof history, "%s/history", e->paths.state_dir);
    int keep_history = w > 0 && (size_t)w < sizeof history && paths_mkdirs(e->paths.state_dir) == 0;
    chat_tui_opts to = {.db = e->db, .src = &e->src, .tools = e->tools, .policy = e->tools ? &e->policy : NULL,
                        .history_file = keep_history ? history : NULL, .backend = e->cfg.backend};
    chat_tui *t = chat_tui_new(&to, err, sizeof err);
    if (!t)
        return cli_runtime_error("%s", err);
    chat_options o = {.cfg = &e->cfg, .db = e->db, .tools = e->tools, .policy = e->tools ? &e->policy : NULL,
                      .cancel = signals_cancel_flag()};
    chat_sink sink = chat_tui_sink(t);
    chat *c = chat_new(&o, &e->src, &sink, err, sizeof err);
    int rc = 0;
    if (!c)
        rc = cli_runtime_error("%s", err);
    else if (chat_open(c, conv, err, sizeof err))
        rc = cli_runtime_error("%s", err);
    else if ((rc = apply_conversation_flags(c, a)) == 0 && chat_tui_run(t, c, err, sizeof err) != 0)
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
        if (conv == 0 && (a->retry || a->edit))
            return cli_runtime_error("there is no conversation to continue in %s", e->paths.db_file);
    }
    if (interactive(a))
        return run_tui(e, a, conv);
    script_out so = {.jsonl = a->jsonl, .reasoning = a->reasoning, .continued = conv != 0,
                     .policy = e->tools ? &e->policy : NULL};
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
    int rc = chat_open(c, conv, err, sizeof err) ? cli_runtime_error("%s", err) : apply_conversation_flags(c, a);
    if (rc == 0 && conv)
        send_session(&so);
    if (rc == 0 && (a->prompt || a->retry || a->edit)) {
        if (a->prompt && blank(a->prompt))
            rc = cli_usage_error("chat", "the prompt is empty");
        else
            rc = run_one(c, &so, a, a->prompt, &peer_failed);
    } else if (rc == 0) {
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
    }
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
    return rc;
}
