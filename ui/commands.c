/* commands.c: the slash commands, one table for the TUI, the app, /help and the man page.
 * Flags say who runs a command and whether it runs while a reply streams (view.h). */
#include <string.h>

#include "ui/view_impl.h"

#define VIEW UI_CMD_VIEW
#define APP UI_CMD_APP
#define STREAMING UI_CMD_WHILE_STREAMING

const ui_command ui_commands[] = {
    {"new", NULL, "", APP, "start a new conversation"},
    {"list", NULL, "", VIEW | APP, "show the conversation list (F2); type there to filter"},
    {"open", NULL, "ID", APP, "open a saved conversation"},
    {"search", NULL, "QUERY", VIEW | APP, "search every conversation, thinking included"},
    {"export", NULL, "[md|json|html] [FILE]", APP,
     "write this conversation to a file (Markdown unless FILE ends in .json or .html)"},
    {"system", NULL, "[TEXT|clear]", APP, "show the system prompt, set it to TEXT, or clear it"},
    {"think", NULL, "[on|off]", APP, "turn the model's thinking on or off"},
    {"effort", NULL, "[low|high|max]", APP, "how hard the model thinks"},
    {"tools", NULL, "[on|off|NAME|ask NAME]", APP,
     "list tools and their approvals, turn them on or off, make one ask again"},
    {"retry", NULL, "", APP, "regenerate the last reply (a new branch)"},
    {"edit", NULL, "", APP, "edit your last message (a new branch)"},
    {"branch", NULL, "[N]", APP, "list the alternatives of this path, or switch to one"},
    {"drop", NULL, "[N]", APP, "take message N (default: your last) and what follows off this path"},
    {"compact", NULL, "", APP, "summarise this conversation and go on from the summary (a new branch)"},
    {"stats", NULL, "", APP, "speed and token counts of the last reply"},
    {"attach", NULL, "[FILE|clear]", APP, "a text file for your next message (or write @FILE in it)"},
    {"set", NULL, "[KEY VALUE]", APP, "sampling for this session: temperature, top_p, top_k, seed, max_tokens"},
    {"copy", NULL, "[N|all]", VIEW | STREAMING,
     "copy code block N of the last reply (default: its last; all: the whole reply) to the clipboard"},
    {"help", NULL, "", VIEW | STREAMING, "commands and keys"},
    {"quit", "exit", "", VIEW | STREAMING, "leave glmchat (Ctrl-D)"},
};
const size_t ui_commands_count = sizeof ui_commands / sizeof ui_commands[0];

const ui_command *ui_command_find(const char *name)
{
    for (size_t i = 0; i < ui_commands_count; i++)
        if (strcmp(ui_commands[i].name, name) == 0 ||
            (ui_commands[i].alias && strcmp(ui_commands[i].alias, name) == 0))
            return &ui_commands[i];
    return NULL;
}

int ui_command_while_streaming(const char *name)
{
    const ui_command *c = ui_command_find(name);
    return c && (c->flags & UI_CMD_WHILE_STREAMING);
}

const ui_command *ui_command_parse(const char *line, char *name, size_t name_cap,
                                   const char **args)
{
    const char *p = line;
    while (*p == ' ')
        p++;
    if (*p == '/')
        p++;
    size_t n = 0;
    while (p[n] && p[n] != ' ' && p[n] != '\n')
        n++;
    if (n >= name_cap)
        n = name_cap - 1;
    memcpy(name, p, n);
    name[n] = '\0';
    const char *a = p + n;
    while (*a == ' ' || *a == '\n')
        a++;
    *args = a;
    return ui_command_find(name);
}

/* The first word after the leading blanks and the '/': its start and length. */
static const char *first_word(const char *line, size_t *len)
{
    while (*line == ' ' || *line == '\n')
        line++;
    if (*line == '/')
        line++;
    size_t n = 0;
    while (line[n] && line[n] != ' ' && line[n] != '\n' && line[n] != '\t')
        n++;
    *len = n;
    return line;
}

int ui_line_is_command(const char *line)
{
    const char *p = line;
    while (*p == ' ' || *p == '\n')
        p++;
    if (p[0] != '/' || p[1] == '/')
        return 0;
    size_t n;
    const char *word = first_word(p, &n);
    char name[32];
    if (n < sizeof name) {
        memcpy(name, word, n);
        name[n] = '\0';
        if (ui_command_find(name))
            return 1;
    }
    return memchr(word, '/', n) == NULL; /* a path is a message; another word an unknown command */
}

const char *ui_line_message(const char *line)
{
    const char *p = line;
    while (*p == ' ' || *p == '\n')
        p++;
    return p[0] == '/' && p[1] == '/' ? p + 1 : line;
}
