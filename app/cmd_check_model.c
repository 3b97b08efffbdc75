/* cmd_check_model.c: `glmchat check-model DIR`: what to run after downloading a checkpoint (the
 * checks are glm_check_model's): the report on stdout, progress on a terminal, problems on stderr. */
#include <getopt.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include "app/commands.h"
#include "engine/glm_tokens.h"

static void report_line(void *user, const char *line)
{
    (void)user;
    printf("%s\n", line);
}

/* Each problem after the report, which is flushed first so the two streams read in order. */
static void report_problem(void *user, const char *text)
{
    (void)user;
    fflush(stdout);
    fprintf(stderr, "glmchat: check-model: %s\n", text);
}

/* What is being read, over the last progress line (stderr is a terminal). */
static void show_progress(void *user, const char *text)
{
    (void)user;
    fprintf(stderr, "\r\033[K%s", text);
    fflush(stderr);
}

static const char usage[] =
    "Usage: glmchat check-model DIR   (or glmchat --model DIR check-model)\n"
    "Checks a downloaded checkpoint without loading it: model.safetensors.index.json against the\n"
    "shard files (missing, truncated or extra), every header, every tensor config.json needs (the\n"
    "MTP layer's included) with its dtype and shape, the tokenizer's special tokens and the chat\n"
    "template's revision. Prints a summary and the memory plan for one rank and for each of two\n"
    "ranks, on this machine's GPU and on a DGX Spark. Exit 0 when complete, 1 with every problem\n"
    "listed on stderr.\n";

int cmd_check_model(int argc, char **argv, const cli_globals *g)
{
    static const struct option opts[] = {{"help", no_argument, NULL, 'h'}, {NULL, 0, NULL, 0}};
    int c;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
        if (c == 'h')
            return fputs(usage, stdout), CLI_EXIT_OK;
        return cli_usage_error("check-model", "unknown option '%s'", argv[optind - 1]);
    }
    if (argc - optind > 1)
        return cli_usage_error("check-model", "unexpected argument '%s'", argv[optind + 1]);
    const char *dir = optind < argc ? argv[optind] : g->model_dir;
    if (!dir)
        return cli_usage_error("check-model", "give the model directory: glmchat check-model DIR");
    struct stat sb;
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return cli_runtime_error("check-model: %s is not a directory; give the directory holding config.json "
                                 "and the safetensors", dir);
    printf("glmchat check-model %s\n", dir);
    glm_check_model_params p = {.dir = dir, .report = report_line, .problem = report_problem};
    if (isatty(STDERR_FILENO))
        p.progress = show_progress;
    int n = glm_check_model(&p);
    if (n == 0)
        return CLI_EXIT_OK;
    fprintf(stderr, "glmchat: check-model: %d problem%s in %s\n", n, n == 1 ? "" : "s", dir);
    return CLI_EXIT_RUNTIME;
}
