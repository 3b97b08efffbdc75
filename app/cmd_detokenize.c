/* cmd_detokenize.c: `glmchat detokenize --tokenizer FILE [--raw]` (CLI.md): ids on stdin to text.
 * The text equals HF's decode(ids, skip_special_tokens=False); --raw writes the tokens' bytes unrepaired. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app/commands.h"
#include "base/setting.h"
#include "base/utf8.h"
#include "engine/glm_tokens.h"

static void usage(FILE *f)
{
    fputs("Usage: glmchat detokenize --tokenizer FILE [--raw]\n"
          "Reads token ids (whitespace-separated) on stdin and writes their text on stdout.\n"
          "  --tokenizer FILE  a Hugging Face tokenizer.json (default: tokenizer.json in --model DIR)\n"
          "  --raw             write the tokens' bytes as they are; without it, byte sequences that are not\n"
          "                    UTF-8 become U+FFFD exactly as HF tokenizers' decode does\n",
          f);
}

/* The ids read so far. */
typedef struct id_list {
    int32_t *v;
    size_t n, cap;
} id_list;

static int push_id(id_list *ids, int32_t id)
{
    if (ids->n == ids->cap) {
        size_t cap = ids->cap ? 2 * ids->cap : 256;
        int32_t *v = realloc(ids->v, cap * sizeof *v);
        if (!v)
            return -1;
        ids->v = v;
        ids->cap = cap;
    }
    ids->v[ids->n++] = id;
    return 0;
}

static int read_ids(FILE *f, id_list *ids, const glm_tokenizer *t)
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
            if (setting_int("token id", word, 0, (long long)glm_tokenizer_vocab(t) - 1, &v, NULL, 0))
                return cli_runtime_error("detokenize: '%s' (item %zu) is not a token id in 0..%ld", word,
                                         count + 1, (long)glm_tokenizer_vocab(t) - 1);
            if (push_id(ids, (int32_t)v) != 0)
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
    glm_tokenizer *t = glm_tokenizer_load(path, &err);
    if (!t)
        return cli_runtime_error("detokenize: %s", err.message);
    id_list ids = {0};
    char *raw_bytes = NULL;
    size_t n_bytes = 0;
    char *text = NULL;
    int rc = read_ids(stdin, &ids, t);
    if (rc == CLI_EXIT_OK && glm_detokenize(t, ids.v, ids.n, &raw_bytes, &n_bytes, &err) != GLM_OK)
        rc = cli_runtime_error("detokenize: %s", err.message);
    const char *out = raw_bytes;
    size_t out_len = n_bytes;
    if (rc == CLI_EXIT_OK && !raw) {
        text = malloc(UTF8_REPAIR_MAX(n_bytes) + 1);
        if (!text)
            rc = cli_runtime_error("detokenize: out of memory");
        else
            out_len = utf8_repair(raw_bytes ? raw_bytes : "", n_bytes, 1, text, NULL);
        out = text;
    }
    if (rc == CLI_EXIT_OK && ((out_len && fwrite(out, 1, out_len, stdout) != out_len) || fflush(stdout)))
        rc = cli_runtime_error("detokenize: cannot write to stdout");
    free(raw_bytes);
    free(text);
    free(ids.v);
    glm_tokenizer_free(t);
    return rc;
}
