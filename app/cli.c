/* cli.c: global options, usage and version text, and the error printers every command uses.
 * GNU conventions: --help and --version on stdout with exit 0; bad usage on stderr with exit 2. */
#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app/cli.h"
#include "app/commands.h"
#include "engine/glm.h"
#include "base/grow.h"
#include "base/setting.h"

typedef struct global_option {
    const char *name;     /* without the leading "--" */
    size_t offset;        /* where its value goes in cli_globals */
    const char *choices;  /* allowed values, '|'-separated; NULL: any non-empty value */
    long long lo, hi;     /* hi > 0: a whole number in lo..hi */
} global_option;

static const global_option global_options[] = {
    {"db", offsetof(cli_globals, db_path), NULL, 0, 0},
    {"model", offsetof(cli_globals, model_dir), NULL, 0, 0},
    {"backend", offsetof(cli_globals, backend), "cpu|cuda", 0, 0},
    {"peer", offsetof(cli_globals, peer), NULL, 0, 0},
    {"transport", offsetof(cli_globals, transport), "rdma|tcp|nccl", 0, 0},
    {"context", offsetof(cli_globals, context), NULL, 1, GLM_MAX_CONTEXT},
    {"kv-cache", offsetof(cli_globals, kv_cache), GLM_KV_CACHE_CHOICES, 0, 0},
    {"dense", offsetof(cli_globals, dense), GLM_DENSE_CHOICES, 0, 0},
    {"key-file", offsetof(cli_globals, key_file), NULL, 0, 0},
};

static const global_option *find_global(const char *arg, size_t len)
{
    for (size_t i = 0; i < sizeof global_options / sizeof global_options[0]; i++)
        if (strlen(global_options[i].name) == len && strncmp(global_options[i].name, arg, len) == 0)
            return &global_options[i];
    return NULL;
}

/* 0 when value suits o, else -1 with the reason in msg. */
static int check_value(const global_option *o, const char *value, char *msg, size_t n)
{
    char flag[32];
    snprintf(flag, sizeof flag, "--%s", o->name);
    int i;
    long long x;
    if (o->choices)
        return setting_choice(flag, value, o->choices, &i, msg, n);
    if (o->hi > 0)
        return setting_int(flag, value, o->lo, o->hi, &x, msg, n);
    if (!value[0]) {
        snprintf(msg, n, "'%s' needs a non-empty value", flag);
        return -1;
    }
    return 0;
}

/* A repeated --peer: one worker more, joined to those before with a comma. */
static int join_peer(cli_globals *g, const char *value)
{
    char joined[sizeof g->peers];
    if (snprintf(joined, sizeof joined, "%s,%s", g->peer, value) >= (int)sizeof joined) {
        cli_usage_error(NULL, "option '--peer': the workers' addresses exceed %zu bytes", sizeof joined - 1);
        return -1;
    }
    memcpy(g->peers, joined, sizeof joined);
    g->peer = g->peers;
    return 0;
}

int cli_take_globals(int argc, char **argv, int from, cli_globals *g)
{
    int out = from;
    for (int i = from; i < argc; i++) {
        char *arg = argv[i];
        if (strcmp(arg, "--") == 0) {
            while (i < argc)
                argv[out++] = argv[i++];
            break;
        }
        if (strncmp(arg, "--", 2) != 0) {
            argv[out++] = arg;
            continue;
        }
        const char *name = arg + 2;
        const char *eq = strchr(name, '=');
        const global_option *o = find_global(name, eq ? (size_t)(eq - name) : strlen(name));
        if (!o) {
            argv[out++] = arg;
            continue;
        }
        const char *value = eq ? eq + 1 : NULL;
        if (!value) {
            if (i + 1 >= argc) {
                cli_usage_error(NULL, "option '--%s' needs a value", o->name);
                return -1;
            }
            value = argv[++i];
        }
        char msg[512];
        if (check_value(o, value, msg, sizeof msg)) {
            cli_usage_error(NULL, "option %s", msg);
            return -1;
        }
        if (o->offset == offsetof(cli_globals, peer) && g->peer && join_peer(g, value))
            return -1;
        else if (o->offset != offsetof(cli_globals, peer) || !g->peer)
            *(const char **)((char *)g + o->offset) = value;
    }
    argv[out] = NULL;
    return out;
}

int cli_int_option(const char *cmd, const char *option, const char *text, long long lo,
                   long long hi, long long *out)
{
    char msg[512];
    if (setting_int(option, text, lo, hi, out, msg, sizeof msg))
        return cli_usage_error(cmd, "%s", msg);
    return 0;
}

int cli_choice_option(const char *cmd, const char *option, const char *text, const char *choices,
                      int *out)
{
    char msg[512];
    if (setting_choice(option, text, choices, out, msg, sizeof msg))
        return cli_usage_error(cmd, "%s", msg);
    return 0;
}

int cli_usage_error(const char *cmd, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, cmd ? "glmchat %s: " : "glmchat: ", cmd);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\nTry 'glmchat %s%s--help' for more information.\n", cmd ? cmd : "",
            cmd ? " " : "");
    return CLI_EXIT_USAGE;
}

int cli_runtime_error(const char *fmt, ...)
{
    va_list ap;
    fputs("glmchat: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    return CLI_EXIT_RUNTIME;
}

char *cli_read_stream(FILE *f, size_t *len)
{
    char *buf = NULL;
    size_t cap = 0, n = 0;
    errno = 0; /* so a failed read without its own errno is told as EIO, not an older error */
    for (;;) {
        /* room for one more byte at least: the NUL, or the next read */
        if (grow_array((void **)&buf, &cap, n + 1, 1, (size_t)1 << 16)) {
            free(buf);
            errno = ENOMEM;
            return NULL;
        }
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (got == 0)
            break;
    }
    if (ferror(f)) {
        int read_errno = errno ? errno : EIO;
        free(buf);
        errno = read_errno;
        return NULL;
    }
    buf[n] = '\0';
    *len = n;
    return buf;
}

int cli_not_built(const char *cmd)
{
    return cli_runtime_error("'%s' is not built in glmchat %s yet; see CHANGELOG.md for what is",
                             cmd, PACKAGE_VERSION);
}

void cli_print_version(void)
{
    printf("glmchat %s\n"
           "A terminal chat with its own GLM-5.3-Flash engine.\n"
#ifdef HAVE_CUDA
           "Built with CUDA kernels for sm: " GLM_CUDA_ARCHS " (DGX Spark: 121).\n"
#else
           "Built without CUDA: the CPU backend only.\n"
#endif
           "License Apache-2.0: <https://www.apache.org/licenses/LICENSE-2.0>.\n"
           "This is free software: you are free to change and redistribute it.\n"
           "There is NO WARRANTY, to the extent permitted by law.\n",
           PACKAGE_VERSION);
}

void cli_print_usage(void)
{
    printf("Usage: glmchat [OPTION]... [COMMAND [ARG]...]\n"
           "Chat with GLM-5.3-Flash in the terminal. With no command: the TUI when stdin and\n"
           "stdout are terminals, else a scripted chat reading its prompt from stdin.\n"
           "\n"
           "Commands:\n");
    for (const cli_command *c = cli_commands; c->name; c++)
        printf("  %-12s %s\n", c->name, c->summary);
    printf("\n"
           "Options (before or after the command):\n"
           "      --db FILE            the conversation database (else $GLMCHAT_DB, else\n"
           "                           $XDG_DATA_HOME/glmchat/glmchat.db)\n"
           "      --model DIR          the model directory (else the config file's, else the\n"
           "                           embedded demo model)\n"
           "      --backend cpu|cuda   the engine backend (default: cuda where a GPU is found)\n"
           "      --peer HOST:PORT     run as rank 0 with a worker there; repeat it (or give\n"
           "                           HOST:PORT,HOST:PORT) for more workers, ranks 1, 2, ...\n"
           "      --transport rdma|tcp|nccl how the ranks talk (rdma: two ranks only; nccl: cuda only)\n"
           "      --key-file FILE      the key the head and its worker share (glmchat worker --new-key)\n"
           "      --context N          the most tokens a conversation may hold, prompt and reply\n"
           "                           (else $GLMCHAT_CONTEXT, else the config's context, else\n"
           "                           the model's window)\n"
           "      --kv-cache fp8|bf16|f32  the attention cache's format (else $GLMCHAT_KV_CACHE,\n"
           "                           else the config's kv_cache, else fp8 on cuda, f32 on the\n"
           "                           cpu, which emulates fp8 and bf16 exactly)\n"
           "      --dense bf16|q4      the dense weights as stored, or requantized to 4 bits at\n"
           "                           load (else $GLMCHAT_DENSE or $GLMCHAT_CUDA_DENSE, else the\n"
           "                           config's dense, else bf16)\n"
           "      --paths              print where glmchat keeps its files, then exit\n"
           "      --man                print the manual page (roff), then exit\n"
           "      --completion bash|zsh  print a shell completion script, then exit\n"
           "  -h, --help               print this help, then exit\n"
           "      --version            print the version, then exit\n"
           "\n"
           "'glmchat COMMAND --help' describes one command.\n"
           "Exit status: 0 done, 1 runtime error, 2 bad usage, 130 interrupted (129 SIGHUP, 143 SIGTERM).\n"
           "Report bugs to: %s\n",
           PACKAGE_BUGREPORT);
}

int cli_help_only(int argc, char **argv, const char *cmd, void (*usage)(void))
{
    static const struct option options[] = {{"help", no_argument, NULL, 'h'}, {NULL, 0, NULL, 0}};
    int c;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "+h", options, NULL)) != -1) {
        if (c != 'h')
            return cli_usage_error(cmd, "unrecognized option '%s'", argv[optind - 1]);
        usage();
        return CLI_EXIT_OK;
    }
    return -1;
}
