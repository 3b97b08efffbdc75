/* commands.h: the table of glmchat's subcommands, one cmd_*.c file each (tmux style).
 * main.c looks a name up here; adding a command is one row and one file. */
#ifndef GLMCHAT_APP_COMMANDS_H
#define GLMCHAT_APP_COMMANDS_H

#include "app/cli.h"

extern const cli_command cli_commands[];

const cli_command *cli_find_command(const char *name);

int cmd_chat(int argc, char **argv, const cli_globals *g);
int cmd_worker(int argc, char **argv, const cli_globals *g);
int cmd_list(int argc, char **argv, const cli_globals *g);
int cmd_check_db(int argc, char **argv, const cli_globals *g);
int cmd_rename(int argc, char **argv, const cli_globals *g);
int cmd_delete(int argc, char **argv, const cli_globals *g);
int cmd_search(int argc, char **argv, const cli_globals *g);
int cmd_export(int argc, char **argv, const cli_globals *g);
int cmd_import(int argc, char **argv, const cli_globals *g);
int cmd_tokenize(int argc, char **argv, const cli_globals *g);
int cmd_detokenize(int argc, char **argv, const cli_globals *g);
int cmd_render(int argc, char **argv, const cli_globals *g);
int cmd_logits(int argc, char **argv, const cli_globals *g);
int cmd_dump_tensor(int argc, char **argv, const cli_globals *g);
int cmd_mkmodel(int argc, char **argv, const cli_globals *g);
int cmd_quantize(int argc, char **argv, const cli_globals *g);
int cmd_check_model(int argc, char **argv, const cli_globals *g);
int cmd_bench(int argc, char **argv, const cli_globals *g);

#endif
