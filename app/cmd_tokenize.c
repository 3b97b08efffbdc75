/* cmd_tokenize.c: `glmchat tokenize --tokenizer FILE [--lines]` (CLI.md): UTF-8 text on stdin to ids.
 * Invalid UTF-8 is repaired first, one U+FFFD per maximal invalid subpart (engine/text/tokenizer.h). */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app/commands.h"
#include "engine/glm_tokens.h"

static void usage(FILE *f)
{
    fputs("Usage: glmchat tokenize --tokenizer FILE [--lines]\n"
          "Reads UTF-8 text on stdin and prints its token ids, space-separated, on one line.\n"
          "  --tokenizer FILE  a Hugging Face tokenizer.json (default: tokenizer.json in --model DIR)\n"
          "  --lines           encode each input line (without its newline) alone; one output line each\n"
          "Invalid UTF-8 input is read as Python's bytes.decode('utf-8', 'replace') reads it.\n",
          f);
}

static int print_ids(const int32_t *ids, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (printf(i ? " %ld" : "%ld", (long)ids[i]) < 0)
            return -1;
    return putchar('\n') == EOF ? -1 : 0;
}

static int encode_and_print(const glm_tokenizer *t, const char *s, size_t n)
{
    int32_t *ids;
    size_t n_ids;
    glm_error err = {0};
    if (glm_tokenize(t, s, n, &ids, &n_ids, &err) != GLM_OK)
        return cli_runtime_error("tokenize: %s", err.message);
    int rc = print_ids(ids, n_ids);
    free(ids);
    return rc == 0 ? CLI_EXIT_OK : cli_runtime_error("tokenize: cannot write to stdout");
}

static int run(const glm_tokenizer *t, const char *s, size_t len, int lines)
{
    if (!lines)
        return encode_and_print(t, s, len);
    size_t at = 0;
    while (at < len) {
        const char *nl = memchr(s + at, '\n', len - at);
        size_t end = nl ? (size_t)(nl - s) : len;
        int rc = encode_and_print(t, s + at, end - at);
        if (rc != CLI_EXIT_OK)
            return rc;
        at = end + 1;
    }
    return CLI_EXIT_OK;
}

int cmd_tokenize(int argc, char **argv, const cli_globals *g)
{
    static const struct option opts[] = {
        {"tokenizer", required_argument, NULL, 't'}, {"lines", no_argument, NULL, 'l'},
        {"help", no_argument, NULL, 'h'}, {NULL, 0, NULL, 0}};
    const char *path = NULL;
    int lines = 0, c;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
        if (c == 't')
            path = optarg;
        else if (c == 'l')
            lines = 1;
        else if (c == 'h')
            return usage(stdout), CLI_EXIT_OK;
        else if (c == ':')
            return cli_usage_error("tokenize", "option '%s' needs a value", argv[optind - 1]);
        else
            return cli_usage_error("tokenize", "unknown option '%s'", argv[optind - 1]);
    }
    if (optind < argc)
        return cli_usage_error("tokenize", "unexpected argument '%s'", argv[optind]);
    char fallback[4096];
    if (!path && g->model_dir) {
        snprintf(fallback, sizeof fallback, "%s/tokenizer.json", g->model_dir);
        path = fallback;
    }
    if (!path)
        return cli_usage_error("tokenize", "give --tokenizer FILE (or --model DIR holding tokenizer.json)");
    glm_error err = {0};
    glm_tokenizer *t = glm_tokenizer_load(path, &err);
    if (!t)
        return cli_runtime_error("tokenize: %s", err.message);
    size_t len = 0;
    char *in = cli_read_stream(stdin, &len);
    int rc = in ? run(t, in, len, lines) : cli_runtime_error("tokenize: cannot read stdin");
    free(in);
    glm_tokenizer_free(t);
    if (rc == CLI_EXIT_OK && fflush(stdout) != 0)
        rc = cli_runtime_error("tokenize: cannot write to stdout");
    return rc;
}
