/* cmd_quantize.c: `glmchat quantize` (CLI.md): EXL3-quantizes a checkpoint's routed experts (and
 * with --all-linear its other linear layers) into the real EXL3 checkpoint's names and layout. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "app/commands.h"
#include "engine/glm_tokens.h"

static const char quantize_usage[] =
    "Usage: glmchat quantize --in DIR --out DIR [--bits 4] [options]\n"
    "Quantizes the routed experts (mlp.experts.N.{gate,up,down}_proj.weight, F32/BF16/F16) of\n"
    "the checkpoint in DIR to EXL3: <module>.trellis, .suh, .svh and the codebook marker, as the\n"
    "GLM-5.3-Flash EXL3 checkpoint stores them. Other tensors are copied unchanged into\n"
    "OUT/model.safetensors; config.json gains a quantization_config; other files are copied.\n"
    "  --bits K          bits per weight, 1..8 (default 4)\n"
    "  --codebook NAME   mcg (default), mul1 or 3inst\n"
    "  --all-linear      also quantize the other 2-D .weight tensors (not embeddings, head)\n"
    "  --threads N       tile-search threads (default: the online CPUs)\n"
    "  --seed N          seed of the sign vectors (default 0)\n"
    "Weights whose dimensions are not multiples of 128 are copied and reported.\n";

/* glm_quantize_params.log: the weights left unquantized, on stderr. */
static void quantize_note(void *user, int level, const char *msg)
{
    (void)user;
    (void)level;
    fprintf(stderr, "glmchat quantize: %s\n", msg);
}

int cmd_quantize(int argc, char **argv, const cli_globals *g)
{
    (void)g;
    static const struct option opts[] = {
        {"in", required_argument, NULL, 'i'},      {"out", required_argument, NULL, 'o'},
        {"bits", required_argument, NULL, 'b'},    {"codebook", required_argument, NULL, 'c'},
        {"all-linear", no_argument, NULL, 'a'},    {"threads", required_argument, NULL, 't'},
        {"seed", required_argument, NULL, 's'},    {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    glm_quantize_params o = {.bits = 4, .codebook = GLM_EXL3_MCG, .threads = cpus > 0 ? (int)cpus : 1,
                             .log = quantize_note};
    int c;
    long long v;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'i': o.in = optarg; break;
        case 'o': o.out = optarg; break;
        case 'a': o.all_linear = 1; break;
        case 'b':
            if (cli_int_option("quantize", "--bits", optarg, 1, 8, &v))
                return CLI_EXIT_USAGE;
            o.bits = (int)v;
            break;
        case 't':
            if (cli_int_option("quantize", "--threads", optarg, 1, 64, &v))
                return CLI_EXIT_USAGE;
            o.threads = (int)v;
            break;
        case 's':
            if (cli_int_option("quantize", "--seed", optarg, 0, 0x7FFFFFFFL, &v))
                return CLI_EXIT_USAGE;
            o.seed = (unsigned long long)v;
            break;
        case 'c': {
            static const glm_exl3_codebook books[] = {GLM_EXL3_MCG, GLM_EXL3_MUL1, GLM_EXL3_3INST};
            int pick;
            if (cli_choice_option("quantize", "--codebook", optarg, "mcg|mul1|3inst", &pick))
                return CLI_EXIT_USAGE;
            o.codebook = books[pick];
            break;
        }
        case 'h': fputs(quantize_usage, stdout); return CLI_EXIT_OK;
        default: return cli_usage_error("quantize", "bad option");
        }
    }
    if (optind < argc)
        return cli_usage_error("quantize", "unexpected argument '%s'", argv[optind]);
    if (!o.in || !o.out)
        return cli_usage_error("quantize", "needs --in DIR and --out DIR");
    if (o.threads > 64)
        o.threads = 64;
    char rin[4096], rout[4096];
    if (realpath(o.in, rin) && realpath(o.out, rout) && strcmp(rin, rout) == 0)
        return cli_usage_error("quantize", "--out must differ from --in");
    glm_error err = {0};
    glm_quantize_result r;
    if (glm_quantize_dir(&o, &r, &err) != GLM_OK)
        return cli_runtime_error("%s", err.message);
    printf("quantized %zu of %zu tensors to EXL3 (%d bits, %s); mean relative weight error "
           "%.5f; wrote %s\n", r.quantized, r.tensors, o.bits, glm_exl3_codebook_name(o.codebook),
           r.mean_error, r.path);
    return CLI_EXIT_OK;
}
