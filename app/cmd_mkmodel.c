/* cmd_mkmodel.c: `glmchat mkmodel` (CLI.md): writes a random-weight model of this architecture
 * in the real checkpoint layout, from a preset and a seed. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app/commands.h"
#include "base/setting.h"
#include "model/mkmodel.h"

static void mkmodel_usage(void)
{
    printf("Usage: glmchat mkmodel --out DIR [--preset NAME] [--seed N] [--dtype f32|bf16]\n"
           "                        [--shard-mb N] [--like LAYOUT]\n"
           "Writes config.json, generation_config.json, tokenizer.json and random weights in the\n"
           "GLM-5.3-Flash checkpoint layout (sharded with an index when larger than the shard\n"
           "size, 4096 MiB unless --shard-mb says otherwise). The same preset and seed give the\n"
           "same files. Presets:\n%s"
           "--like writes the preset in a published checkpoint's layout (BF16 unless --dtype;\n"
           "always sharded, in four or more shards unless --shard-mb). Layouts:\n%s",
           glm_mkmodel_presets(), glm_mkmodel_likes());
}

int cmd_mkmodel(int argc, char **argv, const cli_globals *g)
{
    static const struct option opts[] = {
        {"out", required_argument, NULL, 'o'},   {"preset", required_argument, NULL, 'p'},
        {"seed", required_argument, NULL, 's'},  {"dtype", required_argument, NULL, 'd'},
        {"shard-mb", required_argument, NULL, 'm'}, {"like", required_argument, NULL, 'l'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    (void)g;
    glm_mkmodel_params p = {.preset = "tiny"};
    int c;
    long long v;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'o': p.out_dir = optarg; break;
        case 'p': p.preset = optarg; break;
        case 'l': p.like = optarg; break;
        case 's': {
            char msg[512];
            if (setting_u64("--seed", optarg, &p.seed, msg, sizeof msg))
                return cli_usage_error("mkmodel", "%s", msg);
            break;
        }
        case 'd': {
            int pick;
            if (cli_choice_option("mkmodel", "--dtype", optarg, "f32|bf16", &pick))
                return CLI_EXIT_USAGE;
            p.dtype_set = 1;
            p.dtype = pick == 0 ? ST_F32 : ST_BF16;
            break;
        }
        case 'm':
            if (cli_int_option("mkmodel", "--shard-mb", optarg, 1, 1 << 20, &v))
                return CLI_EXIT_USAGE;
            p.shard_bytes = (int64_t)v << 20;
            break;
        case 'h': mkmodel_usage(); return CLI_EXIT_OK;
        default: return cli_usage_error("mkmodel", "bad option");
        }
    }
    if (optind < argc)
        return cli_usage_error("mkmodel", "unexpected argument '%s'", argv[optind]);
    if (!p.out_dir)
        return cli_usage_error("mkmodel", "needs --out DIR");
    glm_error err = {0};
    if (glm_mkmodel(&p, &err))
        return err.status == GLM_ERR_ARG ? cli_usage_error("mkmodel", "%s", err.message)
                                         : cli_runtime_error("%s", err.message);
    return CLI_EXIT_OK;
}
