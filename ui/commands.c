/* commands.c: the slash commands, one table for the TUI, the plain view and /help.
 * The view handles /help, /quit, /list and /copy itself; every command also reaches the app. */
#include <string.h>

#include "ui/view_impl.h"

const ui_command ui_commands[] = {
    {"new", "", "start a new conversation"},
    {"list", "", "show the conversation list (F2); type there to filter"},
    {"open", "ID", "open a saved conversation"},
    {"search", "QUERY", "search every conversation, thinking included"},
    {"export", "[md|json|html] [FILE]", "write this conversation to a file"},
    {"system", "[TEXT|clear]", "show the system prompt, set it to TEXT, or clear it"},
    {"think", "[on|off]", "turn the model's thinking on or off"},
    {"effort", "[low|high|max]", "how hard the model thinks"},
    {"tools", "[on|off|NAME|ask NAME]", "list tools and their approvals, turn them on or off, make one ask again"},
    {"retry", "", "regenerate the last reply (a new branch)"},
    {"edit", "", "edit your last message (a new branch)"},
    {"branch", "[N]", "list the alternatives of this path, or switch to one"},
    {"drop", "[N]", "take message N (default: your last) and what follows off this path"},
    {"compact", "", "summarise this conversation and go on from the summary (a new branch)"},
    {"stats", "", "speed and token counts of the last reply"},
    {"attach", "[FILE|clear]", "a text file for your next message (or write @FILE in it)"},
    {"set", "[KEY VALUE]", "sampling for this session: temperature, top_p, top_k, seed, max_tokens"},
    {"copy", "", "copy the last reply to the clipboard (OSC 52)"},
    {"help", "", "commands and keys"},
    {"quit", "", "leave glmchat (Ctrl-D)"},
};
const size_t ui_commands_count = sizeof ui_commands / sizeof ui_commands[0];

const ui_command *ui_command_find(const char *name)
{
    for (size_t i = 0; i < ui_commands_count; i++)
        if (strcmp(ui_commands[i].name, name) == 0)
            return &ui_commands[i];
    return NULL;
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
