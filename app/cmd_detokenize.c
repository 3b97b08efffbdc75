/* cmd_detokenize.c: `glmchat detokenize --tokenizer FILE [--raw]` (CLI.md): ids on stdin to text.
 * The text equals HF's decode(ids, skip_special_tokens=False); --raw writes the tokens' bytes unrepaired. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app/commands.h"
#include "base/setting.h"
#include "engine/text/tokenizer.h"
#include "base/utf8.h"

static void usage(FILE *f)
{
    fputs("Usage: glmchat detokenize --tokenizer FILE [--raw]\n"
          "Reads token ids (whitespace-separated) on stdin and writes their text on stdout.\n"
          "  --tokenizer FILE  a Hugging Face tokenizer.json (default: tokenizer.json in --model DIR)\n"
          "  --raw             write the tokens' bytes as they are; without it, byte sequences that are not\n"
          "                    UTF-8 become U+FFFD exactly as HF tokenizers' decode does\n",
          f);
}

static int read_ids(FILE *f, tok_ids *ids, const tok_tokenizer *t)
{
    char word[32];
    int c;
    size_t n = 0, count = 0;
    for (;;) {
        c = fgetc(f);
        if (c != EOF && !strchr(" \t\r\n\v\f", c)) {
            if (n + 1 >= sizeof word)
                return cli_runtime_error("detokenize: id %zu is too long to be a token id", count + 1);
            word[n++] = (char)c;
            continue;
        }
        if (n) {
            word[n] = '\0';
            long long v;
            if (setting_int("token id", word, 0, (long long)tok_vocab_size(t) - 1, &v, NULL, 0))
                return cli_runtime_error("detokenize: '%s' (item %zu) is not a token id in 0..%ld", word,
                                         count + 1, (long)tok_vocab_size(t) - 1);
            if (tok_ids_push(ids, (int32_t)v) != GLM_OK)
                return cli_runtime_error("detokenize: out of memory");
            count++;
            n = 0;
        }
        if (c == EOF)
            return ferror(f) ? cli_runtime_error("detokenize: cannot read stdin") : CLI_EXIT_OK;
    }
}

int cmd_detokenize(int argc, char **argv, const cli_globals *g)
{
    static const struct option opts[] = {
        {"tokenizer", required_argument, NULL, 't'}, {"raw", no_argument, NULL, 'r'},
        {"help", no_argument, NULL, 'h'}, {NULL, 0, NULL, 0}};
    const char *path = NULL;
    int raw = 0, c;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
        if (c == 't')
            path = optarg;
        else if (c == 'r')
            raw = 1;
        else if (c == 'h')
            return usage(stdout), CLI_EXIT_OK;
        else if (c == ':')
            return cli_usage_error("detokenize", "option '%s' needs a value", argv[optind - 1]);
        else
            return cli_usage_error("detokenize", "unknown option '%s'", argv[optind - 1]);
    }
    if (optind < argc)
        return cli_usage_error("detokenize", "unexpected argument '%s'", argv[optind]);
    char fallback[4096];
    if (!path && g->model_dir) {
        snprintf(fallback, sizeof fallback, "%s/tokenizer.json", g->model_dir);
        path = fallback;
    }
    if (!path)
        return cli_usage_error("detokenize", "give --tokenizer FILE (or --model DIR holding tokenizer.json)");
    glm_error err = {0};
    tok_tokenizer *t = tok_load(path, &err);
    if (!t)
        return cli_runtime_error("detokenize: %s", err.message);
    tok_ids ids = {0};
    tbuf bytes = {0}, text = {0};
    int rc = read_ids(stdin, &ids, t);
    if (rc == CLI_EXIT_OK && tok_decode(t, ids.v, ids.n, &bytes, &err) != GLM_OK)
        rc = cli_runtime_error("detokenize: %s", err.message);
    const tbuf *out = &bytes;
    if (rc == CLI_EXIT_OK && !raw) {
        if (tbuf_append_utf8(&text, bytes.p ? bytes.p : "", bytes.len, 1, NULL) != GLM_OK)
            rc = cli_runtime_error("detokenize: out of memory");
        out = &text;
    }
    if (rc == CLI_EXIT_OK && ((out->len && fwrite(out->p, 1, out->len, stdout) != out->len) || fflush(stdout)))
        rc = cli_runtime_error("detokenize: cannot write to stdout");
    tbuf_free(&bytes);
    tbuf_free(&text);
    tok_ids_free(&ids);
    tok_free(t);
    return rc;
}
