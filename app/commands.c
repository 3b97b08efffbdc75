/* commands.c: the one table of subcommands and their one-line summaries for --help.
 * Each row's function lives in app/cmd_<name>.c. */
#include <string.h>

#include "app/commands.h"

const cli_command cli_commands[] = {
    {"chat", cmd_chat, "one chat (TUI on a terminal, scripted otherwise)"},
    {"worker", cmd_worker, "rank 1, headless: serves one head at a time"},
    {"list", cmd_list, "conversations, newest first"},
    {"rename", cmd_rename, "gives a conversation a new title"},
    {"delete", cmd_delete, "deletes conversations (asks first on a terminal)"},
    {"search", cmd_search, "full-text search over messages and reasoning"},
    {"export", cmd_export, "transcripts as Markdown, JSON or HTML"},
    {"import", cmd_import, "a JSON transcript that export wrote"},
    {"check-db", cmd_check_db, "the full integrity check of the database, read-only"},
    {"tokenize", cmd_tokenize, "UTF-8 text on stdin to token ids"},
    {"detokenize", cmd_detokenize, "token ids on stdin to text"},
    {"render", cmd_render, "a request JSON on stdin to the prompt the model sees"},
    {"logits", cmd_logits, "runs the model over token ids, writes float32 logits"},
    {"dump-tensor", cmd_dump_tensor, "a weight as float32, dequantized if EXL3"},
    {"mkmodel", cmd_mkmodel, "writes a random-weight model in the real checkpoint layout"},
    {"quantize", cmd_quantize, "EXL3-quantizes the routed experts of a checkpoint"},
    {"check-model", cmd_check_model, "checks a downloaded checkpoint: shards, tensors, tokenizer, memory plan"},
    {"bench", cmd_bench, "benchmarks; prints a table of ratios"},
    {NULL, NULL, NULL},
};

const cli_command *cli_find_command(const char *name)
{
    for (const cli_command *c = cli_commands; c->name; c++)
        if (strcmp(c->name, name) == 0)
            return c;
    return NULL;
}
