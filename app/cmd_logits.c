/* cmd_logits.c: `glmchat logits` (CLI.md): runs the model over token ids from a file, in one
 * pass or as a prefill of N then one token at a time, optionally generates greedily after them,
 * and writes the float32 logits of every row. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app/commands.h"
#include "app/config.h"
#include "app/engine_log.h"
#include "engine/glm.h"
#include "engine/glm_tokens.h"

static const char logits_usage[] =
    "Usage: glmchat logits --model DIR --tokens-file F [--prefill N] [--greedy N] --out F.f32\n"
    "                      [--threads N]\n"
    "Runs the model over the whitespace-separated token ids in F and writes T x vocab float32\n"
    "little-endian logits. With --prefill N the first N tokens run in one pass, then the rest\n"
    "one at a time (the decode path). With --greedy N, N more tokens follow, each the argmax of\n"
    "the row before (decode steps): their ids go to stdout on one line and their rows are\n"
    "appended to the output ((T + N) x vocab).\n";

static int read_tokens(const char *path, int32_t **out, int *n)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return cli_runtime_error("cannot open %s: %s", path, strerror(errno));
    int cap = 256, len = 0;
    int32_t *ids = malloc((size_t)cap * sizeof *ids);
    long v;
    int rc = 0;
    while (ids) {
        int got = fscanf(f, "%ld", &v);
        if (got == EOF)
            break;
        if (got != 1 || v < 0 || v > 0x7fffffff) {
            rc = cli_runtime_error("%s: token %d is not a non-negative integer id", path, len + 1);
            break;
        }
        if (len == cap) {
            cap *= 2;
            int32_t *n2 = realloc(ids, (size_t)cap * sizeof *ids);
            if (!n2) {
                free(ids);
                ids = NULL;
                break;
            }
            ids = n2;
        }
        ids[len++] = (int32_t)v;
    }
    fclose(f);
    if (!ids)
        return cli_runtime_error("out of memory reading %s", path);
    if (!rc && len == 0)
        rc = cli_runtime_error("%s holds no token ids", path);
    if (rc) {
        free(ids);
        return rc;
    }
    *out = ids;
    *n = len;
    return 0;
}

static int run_logits(const cli_globals *g, const char *model_dir, glm_backend backend,
                      const int32_t *ids, int n, int prefill, int greedy, int threads,
                      const char *out_path)
{
    glm_error err = {0};
    app_config ec; /* the engine's settings: flags, then GLMCHAT_* (no config file) */
    glm_engine_params p;
    char cfg_err[1024];
    if (config_command_params(&ec, g, &p, cfg_err, sizeof cfg_err)) {
        config_free(&ec);
        return cli_runtime_error("%s", cfg_err);
    }
    p.model_dir = model_dir;
    p.backend = backend;
    p.n_threads = threads;
    p.peer = g->peer;
    p.transport = g->transport;
    p.peer_key_file = g->key_file;
    p.log = app_log_engine; /* to stderr */
    glm_engine *e = glm_engine_open(&p, &err);
    if (!e) {
        config_free(&ec);
        return cli_runtime_error("%s", err.message);
    }
    glm_session *s = glm_session_new(e, &err);
    int V = glm_engine_vocab(e), rc = 0;
    float *logits = s ? malloc((size_t)(n + greedy) * V * sizeof *logits) : NULL;
    if (!s || !logits) {
        rc = cli_runtime_error("%s", s ? "out of memory for the logits" : err.message);
        goto out;
    }
    int first = prefill > 0 ? prefill : n;
    if (glm_session_feed(s, ids, first, logits, &err)) {
        rc = cli_runtime_error("%s", err.message);
        goto out;
    }
    for (int t = first; t < n; t++) {
        if (glm_session_feed(s, ids + t, 1, logits + (size_t)t * V, &err)) {
            rc = cli_runtime_error("%s", err.message);
            goto out;
        }
    }
    for (int t = n; t < n + greedy; t++) {
        int32_t next = glm_argmax(logits + (size_t)(t - 1) * V, V);
        printf("%s%d", t == n ? "" : " ", (int)next);
        if (glm_session_feed(s, &next, 1, logits + (size_t)t * V, &err)) {
            rc = cli_runtime_error("%s", err.message);
            goto out;
        }
    }
    if (greedy)
        printf("\n");
    FILE *f = fopen(out_path, "wb");
    if (!f) {
        rc = cli_runtime_error("cannot create %s: %s", out_path, strerror(errno));
        goto out;
    }
    size_t want = (size_t)(n + greedy) * V;
    int bad = fwrite(logits, sizeof *logits, want, f) != want;
    bad |= fclose(f) != 0;
    if (bad)
        rc = cli_runtime_error("cannot write %s: %s", out_path, strerror(errno));
out:
    free(logits);
    glm_session_free(s);
    glm_engine_close(e);
    config_free(&ec);
    return rc;
}

int cmd_logits(int argc, char **argv, const cli_globals *g)
{
    static const struct option opts[] = {
        {"model", required_argument, NULL, 'm'},   {"tokens-file", required_argument, NULL, 't'},
        {"prefill", required_argument, NULL, 'p'}, {"out", required_argument, NULL, 'o'},
        {"threads", required_argument, NULL, 'j'}, {"greedy", required_argument, NULL, 'g'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *model = g->model_dir, *tokens = NULL, *out = NULL;
    int prefill = 0, threads = 0, greedy = 0, c;
    long long v;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'm': model = optarg; break;
        case 't': tokens = optarg; break;
        case 'o': out = optarg; break;
        case 'p':
            if (cli_int_option("logits", "--prefill", optarg, 1, 1 << 24, &v))
                return CLI_EXIT_USAGE;
            prefill = (int)v;
            break;
        case 'g':
            if (cli_int_option("logits", "--greedy", optarg, 0, 1 << 24, &v))
                return CLI_EXIT_USAGE;
            greedy = (int)v;
            break;
        case 'j':
            if (cli_int_option("logits", "--threads", optarg, 0, 4096, &v))
                return CLI_EXIT_USAGE;
            threads = (int)v;
            break;
        case 'h': fputs(logits_usage, stdout); return CLI_EXIT_OK;
        default: return cli_usage_error("logits", "bad option");
        }
    }
    if (optind < argc)
        return cli_usage_error("logits", "unexpected argument '%s'", argv[optind]);
    if (!model || !tokens || !out)
        return cli_usage_error("logits", "needs --model DIR, --tokens-file F and --out F.f32");
    int32_t *ids = NULL;
    int n = 0, rc = read_tokens(tokens, &ids, &n);
    if (rc)
        return rc;
    if (prefill > n) {
        free(ids);
        return cli_usage_error("logits", "--prefill %d is more than the %d tokens in %s", prefill, n,
                               tokens);
    }
    glm_backend backend = g->backend && strcmp(g->backend, "cuda") == 0 ? GLM_BACKEND_CUDA
                                                                        : GLM_BACKEND_CPU;
    rc = run_logits(g, model, backend, ids, n, prefill, greedy, threads, out);
    free(ids);
    return rc;
}
