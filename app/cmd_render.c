/* cmd_render.c: `glmchat render --model DIR [--ids]` (CLI.md): an OpenAI-style request on stdin to the
 * exact prompt GLM-5.3-Flash sees. The template is glmchat's native GLM-5 one, whatever DIR holds. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "app/commands.h"
#include "engine/glm_tokens.h"

static void usage(FILE *f)
{
    fputs("Usage: glmchat render --model DIR [--ids]\n"
          "Reads an OpenAI-style chat request (JSON: messages, tools, reasoning_effort, enable_thinking,\n"
          "clear_thinking, chat_template_kwargs) on stdin and writes the prompt text the model sees.\n"
          "The prompt is GLM-5's chat template as glmchat implements it natively; a chat_template.jinja\n"
          "in DIR is not interpreted (a revision glmchat does not implement is named on stderr).\n"
          "  --model DIR  the model directory (global option; may also come before 'render')\n"
          "  --ids        print the prompt's token ids (DIR/tokenizer.json) instead of its text\n",
          f);
}

static int write_ids(const char *model_dir, const char *prompt, size_t len)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/tokenizer.json", model_dir);
    glm_error err = {0};
    glm_tokenizer *t = glm_tokenizer_load(path, &err);
    if (!t)
        return cli_runtime_error("render: %s", err.message);
    int32_t *ids = NULL;
    size_t n = 0;
    int rc = CLI_EXIT_OK;
    if (glm_tokenize(t, prompt, len, &ids, &n, &err) != GLM_OK)
        rc = cli_runtime_error("render: %s", err.message);
    for (size_t i = 0; rc == CLI_EXIT_OK && i < n; i++)
        printf(i ? " %ld" : "%ld", (long)ids[i]);
    if (rc == CLI_EXIT_OK)
        putchar('\n');
    free(ids);
    glm_tokenizer_free(t);
    return rc;
}

/* The model's own template, when it is another revision than the one rendered here. */
static void tell_template(const char *model_dir)
{
    char note[8192];
    if (glm_template_notice(model_dir, note, sizeof note))
        fprintf(stderr, "glmchat: %s\n", note);
}

static int render(const char *model_dir, int want_ids)
{
    size_t in_len = 0;
    char *in = cli_read_stream(stdin, &in_len);
    if (!in)
        return cli_runtime_error("render: cannot read the request from stdin");
    glm_error err = {0};
    char *prompt = NULL;
    size_t len = 0;
    glm_status st = glm_render_request(in, in_len, &prompt, &len, &err);
    free(in);
    if (st == GLM_ERR_FORMAT)
        return cli_runtime_error("render: the request on stdin is not valid JSON: %s", err.message);
    int rc = CLI_EXIT_OK;
    if (st != GLM_OK)
        rc = cli_runtime_error("render: cannot render this request: %s", err.message);
    if (rc == CLI_EXIT_OK && want_ids)
        rc = write_ids(model_dir, prompt, len);
    else if (rc == CLI_EXIT_OK && len && fwrite(prompt, 1, len, stdout) != len)
        rc = cli_runtime_error("render: cannot write to stdout");
    free(prompt);
    if (rc == CLI_EXIT_OK && fflush(stdout) != 0)
        rc = cli_runtime_error("render: cannot write to stdout");
    return rc;
}

int cmd_render(int argc, char **argv, const cli_globals *g)
{
    static const struct option opts[] = {
        {"ids", no_argument, NULL, 'i'}, {"help", no_argument, NULL, 'h'}, {NULL, 0, NULL, 0}};
    int want_ids = 0, c;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
        if (c == 'i')
            want_ids = 1;
        else if (c == 'h')
            return usage(stdout), CLI_EXIT_OK;
        else
            return cli_usage_error("render", "unknown option '%s'", argv[optind - 1]);
    }
    if (optind < argc)
        return cli_usage_error("render", "unexpected argument '%s'", argv[optind]);
    if (!g->model_dir)
        return cli_usage_error("render", "give --model DIR (the model whose prompt to render)");
    struct stat st;
    if (stat(g->model_dir, &st) != 0 || !S_ISDIR(st.st_mode))
        return cli_runtime_error("render: model directory %s does not exist; give the directory holding "
                                 "config.json and tokenizer.json",
                                 g->model_dir);
    tell_template(g->model_dir);
    return render(g->model_dir, want_ids);
}
