/* cmd_dump_tensor.c: `glmchat dump-tensor` (CLI.md): one weight of a model as float32 little-
 * endian in the Hugging Face orientation [out, in]; FP8 weights come out with their block scales,
 * EXL3 modules (named as <module>.weight or <module>) dequantized. */
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app/commands.h"
#include "engine/glm_tokens.h"

static const char dump_usage[] =
    "Usage: glmchat dump-tensor --model DIR --name NAME --out F.f32\n"
    "Writes the tensor NAME of the model in DIR as float32 little-endian (HF orientation) and\n"
    "prints its shape on stdout. FP8 tensors are multiplied by their weight_scale_inv blocks;\n"
    "an EXL3 module (NAME = <module>.weight or <module>) is written dequantized [out, in].\n";

int cmd_dump_tensor(int argc, char **argv, const cli_globals *g)
{
    static const struct option opts[] = {
        {"model", required_argument, NULL, 'm'}, {"name", required_argument, NULL, 'n'},
        {"out", required_argument, NULL, 'o'},   {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *model = g->model_dir, *name = NULL, *out = NULL;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'm': model = optarg; break;
        case 'n': name = optarg; break;
        case 'o': out = optarg; break;
        case 'h': fputs(dump_usage, stdout); return CLI_EXIT_OK;
        default: return cli_usage_error("dump-tensor", "bad option");
        }
    }
    if (optind < argc)
        return cli_usage_error("dump-tensor", "unexpected argument '%s'", argv[optind]);
    if (!model || !name || !out)
        return cli_usage_error("dump-tensor", "needs --model DIR, --name NAME and --out F.f32");
    glm_error err = {0};
    glm_tensor_info info;
    if (glm_dump_tensor(model, name, out, &info, &err) != GLM_OK)
        return cli_runtime_error("%s", err.message);
    printf("%s [", name);
    for (int i = 0; i < info.ndim; i++)
        printf("%s%" PRId64, i ? ", " : "", info.shape[i]);
    printf("] %s\n", info.dtype);
    return CLI_EXIT_OK;
}
