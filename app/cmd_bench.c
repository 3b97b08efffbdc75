/* cmd_bench.c: `glmchat bench` (CLI.md).
 * Not built yet: it says so and exits 1. */
#include "app/commands.h"

int cmd_bench(int argc, char **argv, const cli_globals *g)
{
    (void)argc;
    (void)argv;
    (void)g;
    return cli_not_built("bench");
}
