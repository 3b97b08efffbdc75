/* main.c: glmchat's entry point: global options, then the subcommand from the command table.
 * With no command it chats (the TUI on a terminal, scripted otherwise). */
#include <stdio.h>
#include <string.h>

#include "app/cli.h"
#include "app/commands.h"
#include "app/manpage.h"
#include "app/paths.h"
#include "base/suggest.h"

static int print_paths(const cli_globals *g)
{
    glm_paths p;
    char err[256];
    if (paths_resolve(&p, g, err, sizeof err) != 0)
        return cli_runtime_error("%s", err);
    printf("config   %s\n"
           "data     %s\n"
           "database %s\n"
           "state    %s\n"
           "history  %s/history\n"
           "mcp logs %s/mcp-NAME.log\n"
           "cache    %s\n"
           "model    %s\n",
           p.config_file, p.data_dir, p.db_file, p.state_dir, p.state_dir, p.state_dir, p.cache_dir,
           g->model_dir ? g->model_dir : "(the config file's, else the embedded demo model)");
    return CLI_EXIT_OK;
}

int main(int argc, char **argv)
{
    cli_globals g = {0};
    argc = cli_take_globals(argc, argv, 1, &g);
    if (argc < 0)
        return CLI_EXIT_USAGE;

    if (argc < 2) {
        char *chat_argv[] = {"chat", NULL};
        return cmd_chat(1, chat_argv, &g);
    }
    const char *first = argv[1];
    if (strcmp(first, "-h") == 0 || strcmp(first, "--help") == 0) {
        cli_print_usage();
        return CLI_EXIT_OK;
    }
    if (strcmp(first, "--version") == 0) {
        cli_print_version();
        return CLI_EXIT_OK;
    }
    if (strcmp(first, "--paths") == 0)
        return print_paths(&g);
    /* build-time generators (app/local.mk): glmchat.1 and the shell completions */
    if (strcmp(first, "--man") == 0)
        return manpage_print(stdout) == 0 ? CLI_EXIT_OK : CLI_EXIT_RUNTIME;
    if (strcmp(first, "--completion") == 0) {
        if (argc < 3)
            return cli_usage_error(NULL, "'--completion' needs a shell: bash or zsh");
        return completion_print(stdout, argv[2]) == 0 ? CLI_EXIT_OK : CLI_EXIT_USAGE;
    }
    const cli_command *c = cli_find_command(first);
    if (c)
        return c->run(argc - 1, argv + 1, &g);
    if (first[0] == '-')
        return cli_usage_error(NULL, "unrecognized option '%s'", first);
    const char *names[64];
    size_t n = 0;
    for (const cli_command *k = cli_commands; k->name && n < 64; k++)
        names[n++] = k->name;
    const char *meant = suggest_closest(first, names, n);
    if (meant)
        return cli_usage_error(NULL, "unknown command '%s' (did you mean '%s'?)", first, meant);
    return cli_usage_error(NULL, "unknown command '%s'", first);
}
