/* cli.h: what every glmchat command shares: global options, exit codes, usage errors, reading
 * stdin whole. The command table (commands.c) maps names to the cmd_*.c files that implement them. */
#ifndef GLMCHAT_APP_CLI_H
#define GLMCHAT_APP_CLI_H

#include <stddef.h>
#include <stdio.h>

enum {
    CLI_EXIT_OK = 0,
    CLI_EXIT_RUNTIME = 1,     /* something failed; stderr says what and what to do */
    CLI_EXIT_USAGE = 2,       /* bad command line */
    CLI_EXIT_INTERRUPTED = 130,
};

/* Options every command accepts, before or after its name. NULL when not given. */
typedef struct cli_globals {
    const char *db_path;    /* --db FILE */
    const char *model_dir;  /* --model DIR */
    const char *backend;    /* --backend cpu|cuda */
    const char *peer;       /* --peer HOST:PORT, repeated ones joined: "HOST:PORT,HOST:PORT" */
    const char *transport;  /* --transport rdma|tcp|nccl */
    const char *context;    /* --context N (checked: a whole number 1..2^30) */
    const char *kv_cache;   /* --kv-cache fp8|bf16|f32 */
    const char *dense;      /* --dense bf16|q4 */
    const char *key_file;   /* --key-file FILE: the key the head and its worker share */
    char peers[2048];       /* where repeated --peer values are joined */
} cli_globals;

typedef int (*cli_command_fn)(int argc, char **argv, const cli_globals *g);

typedef struct cli_command {
    const char *name;
    cli_command_fn run;
    const char *summary;
} cli_command;

/* Removes the global options from argv[from..argc) (stopping at "--"), storing them in g.
 * Returns the new argc, or -1 after printing a usage error for a global option lacking a
 * value or with a value outside its choices. */
int cli_take_globals(int argc, char **argv, int from, cli_globals *g);

/* Prints "glmchat CMD: MESSAGE" and the hint to --help on stderr; returns CLI_EXIT_USAGE. */
int cli_usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Parses an option's whole number in lo..hi (base/setting.h); on a bad one prints the usage
 * error of cmd naming the option and the value, and returns CLI_EXIT_USAGE; else 0. */
int cli_int_option(const char *cmd, const char *option, const char *text, long long lo,
                   long long hi, long long *out);

/* The same for one of choices ('|'-separated): its index in *out, else the usage error. */
int cli_choice_option(const char *cmd, const char *option, const char *text, const char *choices,
                      int *out);

/* For a command whose only option is --help: reads the options (stopping at the first word);
 * returns -1 to go on (optind at the first word), else the exit status to return: help printed
 * by usage, or an unknown option said as bad usage. */
int cli_help_only(int argc, char **argv, const char *cmd, void (*usage)(void));

/* Prints "glmchat: MESSAGE" on stderr; returns CLI_EXIT_RUNTIME. */
int cli_runtime_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Reads f to its end into a new NUL-terminated buffer (any bytes, no size limit but memory);
 * *len gets its length without the NUL. NULL with errno on failure (ENOMEM, or the read's). */
char *cli_read_stream(FILE *f, size_t *len);

/* For commands whose implementation has not landed yet: says so, returns CLI_EXIT_RUNTIME. */
int cli_not_built(const char *cmd);

void cli_print_version(void);
void cli_print_usage(void);

#endif
