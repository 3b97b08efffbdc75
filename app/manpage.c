/* manpage.c: glmchat.1 and the bash and zsh completions, generated from the command table and
 * from each command's own --help text, so that neither can drift from what the binary does. */
#include "app/manpage.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "app/cli.h"
#include "app/commands.h"
#include "ui/view.h"

/* ---- capturing help text ------------------------------------------------------------------- */

typedef void (*print_fn)(const cli_command *c);

static void print_command_help(const cli_command *c)
{
    char name[64], help[] = "--help";
    snprintf(name, sizeof name, "%s", c->name);
    char *argv[] = {name, help, NULL};
    cli_globals g = {0};
    c->run(2, argv, &g);
}

static void print_global_usage(const cli_command *c)
{
    (void)c;
    cli_print_usage();
}

/* What fn writes to stdout, run in a child (a command's --help may exit or print to a FILE it
 * owns). A malloc'd string, or NULL with the reason on stderr. */
static char *capture(print_fn fn, const cli_command *c)
{
    int fd[2];
    if (pipe(fd) != 0) {
        perror("glmchat: pipe");
        return NULL;
    }
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0) {
        perror("glmchat: fork");
        close(fd[0]), close(fd[1]);
        return NULL;
    }
    if (pid == 0) {
        close(fd[0]);
        if (dup2(fd[1], STDOUT_FILENO) < 0)
            _exit(127);
        fn(c);
        fflush(stdout);
        _exit(0);
    }
    close(fd[1]);
    size_t len = 0, cap = 4096;
    char *buf = malloc(cap);
    ssize_t n = 0;
    while (buf && (n = read(fd[0], buf + len, cap - len - 1)) > 0) {
        len += (size_t)n;
        if (cap - len < 2) {
            char *b = realloc(buf, cap * 2);
            if (!b) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = b;
            cap *= 2;
        }
    }
    close(fd[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    if (!buf) {
        fputs("glmchat: out of memory\n", stderr);
        return NULL;
    }
    buf[len] = '\0';
    if (len == 0) {
        fprintf(stderr, "glmchat: '%s --help' printed nothing\n", c ? c->name : "glmchat");
        free(buf);
        return NULL;
    }
    return buf;
}

/* ---- roff ---------------------------------------------------------------------------------- */

/* Writes s[0, n) as roff text: backslashes and dashes escaped, a leading dot or quote
 * guarded. */
static void roff_text(FILE *out, const char *s, size_t n)
{
    if (n && (s[0] == '.' || s[0] == '\''))
        fputs("\\&", out);
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '\\')
            fputs("\\e", out);
        else if (s[i] == '-')
            fputs("\\-", out);
        else
            fputc(s[i], out);
    }
}

static size_t indent_of(const char *s, size_t n)
{
    size_t i = 0;
    while (i < n && s[i] == ' ')
        i++;
    return i;
}

/* Where an option line's description starts (after the first run of two spaces past the
 * option), or n when it has none. */
static size_t option_split(const char *s, size_t n, size_t from)
{
    for (size_t i = from; i + 1 < n; i++)
        if (s[i] == ' ' && s[i + 1] == ' ') {
            size_t j = i;
            while (j < n && s[j] == ' ')
                j++;
            return j;
        }
    return n;
}

typedef enum { IN_TEXT, IN_OPTION, IN_USAGE, IN_SKIP } help_state;

/* Converts a --help text to roff: the usage line(s) as a no-fill block, option lines as
 * tagged paragraphs (their continuation lines joined), blank lines as paragraph breaks, the
 * rest as filled text. With global set, the command list is left out (COMMANDS lists the
 * table) and the "Options" heading becomes the OPTIONS section. */
static void help_to_roff(FILE *out, const char *text, int global)
{
    help_state st = IN_TEXT;
    size_t opt_indent = 0;
    int para = 1; /* a paragraph break was just written */
    for (const char *p = text; *p;) {
        const char *nl = strchr(p, '\n');
        size_t n = nl ? (size_t)(nl - p) : strlen(p);
        const char *line = p;
        p = nl ? nl + 1 : p + n;
        size_t ind = indent_of(line, n);
        int blank_line = ind == n;
        if (st == IN_SKIP) {
            if (blank_line)
                st = IN_TEXT;
            continue;
        }
        if (blank_line) {
            if (st == IN_USAGE)
                fputs(".fi\n", out);
            if (!para)
                fputs(".PP\n", out);
            para = 1;
            st = IN_TEXT;
            continue;
        }
        if (strncasecmp(line, "usage:", 6) == 0) {
            if (global)
                continue; /* SYNOPSIS has it */
            fputs(".PP\n.nf\n", out);
            roff_text(out, line + 7, n > 7 ? n - 7 : 0);
            fputc('\n', out);
            st = IN_USAGE;
            para = 0;
            continue;
        }
        if (st == IN_USAGE && ind >= 8) {
            roff_text(out, line + ind, n - ind);
            fputc('\n', out);
            continue;
        }
        if (st == IN_USAGE) {
            fputs(".fi\n.PP\n", out);
            st = IN_TEXT;
        }
        if (global && n == 9 && strncmp(line, "Commands:", 9) == 0) {
            st = IN_SKIP;
            continue;
        }
        if (global && strncmp(line, "Options", 7) == 0 && line[n - 1] == ':') {
            fputs(".SH OPTIONS\n", out);
            para = 1;
            continue;
        }
        if (ind >= 2 && ind <= 8 && line[ind] == '-') {
            size_t d = option_split(line, n, ind);
            fputs(".TP\n\\fB", out);
            roff_text(out, line + ind, (d < n ? d : n) - ind);
            fputs("\\fR\n", out);
            /* the tag's trailing spaces went with the split */
            if (d < n) {
                roff_text(out, line + d, n - d);
                fputc('\n', out);
            }
            st = IN_OPTION;
            opt_indent = ind;
            para = 0;
            continue;
        }
        if (st == IN_OPTION && ind > opt_indent) {
            roff_text(out, line + ind, n - ind);
            fputc('\n', out);
            continue;
        }
        if (st == IN_OPTION) {
            fputs(".PP\n", out);
            st = IN_TEXT;
        }
        roff_text(out, line + ind, n - ind);
        fputc('\n', out);
        para = 0;
    }
    if (st == IN_USAGE)
        fputs(".fi\n", out);
}

static void key_to_roff(const char *keys, const char *help, void *user)
{
    FILE *out = user;
    fputs(".TP\n\\fB", out);
    roff_text(out, keys, strlen(keys));
    fputs("\\fR\n", out);
    roff_text(out, help, strlen(help));
    fputc('\n', out);
}

/* The chat TUI's slash commands and keys, from the tables the TUI itself runs (ui/). */
static void tui_commands_to_roff(FILE *out)
{
    fputs(".SH \"CHAT COMMANDS\"\nIn the chat TUI a line that starts with one '/' is a command "
          "(\\fB//\\fR sends a message that starts with '/').\n", out);
    for (size_t i = 0; i < ui_commands_count; i++) {
        const ui_command *c = &ui_commands[i];
        fputs(".TP\n\\fB/", out);
        roff_text(out, c->name, strlen(c->name));
        if (c->alias) {
            fputs("\\fR or \\fB/", out);
            roff_text(out, c->alias, strlen(c->alias));
        }
        fputs("\\fR", out);
        if (c->args[0]) {
            fputs(" \\fI", out);
            roff_text(out, c->args, strlen(c->args));
            fputs("\\fR", out);
        }
        fputc('\n', out);
        roff_text(out, c->help, strlen(c->help));
        fputs((c->flags & UI_CMD_WHILE_STREAMING) ? " (also while a reply streams)\n" : "\n", out);
    }
    fputs(".SH \"CHAT KEYS\"\n", out);
    ui_keys_each(key_to_roff, out);
}

int manpage_print(FILE *out)
{
    char *usage = capture(print_global_usage, NULL);
    if (!usage)
        return -1;
    fprintf(out, ".\\\" glmchat.1: generated by 'glmchat --man' from the command table and each\n"
                 ".\\\" command's --help; edit those, not this file.\n"
                 ".TH GLMCHAT 1 \"\" \"glmchat %s\" \"User Commands\"\n"
                 ".SH NAME\nglmchat \\- a terminal chat with its own GLM\\-5.3\\-Flash engine\n"
                 ".SH SYNOPSIS\n.B glmchat\n[\\fIOPTION\\fR]... [\\fICOMMAND\\fR [\\fIARG\\fR]...]\n"
                 ".SH DESCRIPTION\n",
            PACKAGE_VERSION);
    help_to_roff(out, usage, 1);
    free(usage);
    fputs(".SH COMMANDS\n", out);
    for (const cli_command *c = cli_commands; c->name; c++) {
        fputs(".TP\n\\fB", out);
        roff_text(out, c->name, strlen(c->name));
        fputs("\\fR\n", out);
        roff_text(out, c->summary, strlen(c->summary));
        fputc('\n', out);
    }
    for (const cli_command *c = cli_commands; c->name; c++) {
        char *help = capture(print_command_help, c);
        if (!help)
            return -1;
        fputs(".SS \"glmchat ", out);
        roff_text(out, c->name, strlen(c->name));
        fputs("\"\n", out);
        help_to_roff(out, help, 0);
        free(help);
    }
    tui_commands_to_roff(out);
    fputs(".SH FILES\n\\fBglmchat \\-\\-paths\\fR prints where the configuration, database, history "
          "and logs are.\n.SH \"SEE ALSO\"\nThe README and CLI.md of the glmchat sources.\n",
          out);
    return ferror(out) ? -1 : 0;
}

/* ---- completions --------------------------------------------------------------------------- */

/* Appends word (w bytes) to the sep-separated list in buf unless it is there already. */
static void list_add(char *buf, size_t cap, const char *word, size_t w, char sep)
{
    size_t o = strlen(buf);
    for (const char *p = buf; *p;) {
        const char *e = strchr(p, sep);
        size_t n = e ? (size_t)(e - p) : strlen(p);
        if (n == w && strncmp(p, word, w) == 0)
            return;
        p = e ? e + 1 : p + n;
    }
    if (o + w + 2 < cap)
        snprintf(buf + o, cap - o, "%s%.*s", o ? (char[2]){sep, 0} : "", (int)w, word);
}

/* The options an --help text offers: each "-x" or "--word" on its option lines, once, space
 * separated, into all; those followed by a value ("--db FILE") also into valued, separated
 * by '|' (a shell case pattern). */
static void help_options(const char *text, char *all, char *valued, size_t cap)
{
    all[0] = valued[0] = '\0';
    int in_usage = 0;
    for (const char *p = text; *p;) {
        const char *nl = strchr(p, '\n');
        size_t n = nl ? (size_t)(nl - p) : strlen(p);
        const char *line = p;
        p = nl ? nl + 1 : p + n;
        size_t ind = indent_of(line, n), end;
        if (strncasecmp(line, "usage:", 6) == 0 || (in_usage && ind >= 8)) {
            in_usage = 1; /* "[--prefill N]", "ID|--all": the names, not the brackets */
            ind = 6;
            end = n;
        } else if (ind >= 2 && ind <= 8 && ind < n && line[ind] == '-') {
            in_usage = 0;
            end = option_split(line, n, ind);
        } else {
            in_usage = 0;
            continue;
        }
        const char *prev = NULL; /* the option name before this word */
        size_t prev_len = 0;
        for (size_t i = ind; i < end;) {
            while (i < end && (line[i] == '[' || line[i] == '|'))
                i++;
            size_t j = i;
            while (j < end && !strchr(" ,=[]|", line[j]))
                j++;
            size_t w = j - i, lead = w >= 2 && line[i + 1] == '-' ? 2 : 1;
            int name = w > lead && line[i] == '-' && isalpha((unsigned char)line[i + lead]);
            for (size_t k = i + 1; name && k < j; k++)
                name = isalnum((unsigned char)line[k]) || line[k] == '-';
            if (name)
                list_add(all, cap, line + i, w, ' ');
            else if (prev && w > 0)
                list_add(valued, cap, prev, prev_len, '|'); /* "--db FILE", "--x=N" */
            prev = name ? line + i : NULL;
            prev_len = w;
            if (j < end && line[j] == '=' && name) {
                list_add(valued, cap, line + i, w, '|');
                prev = NULL;
            }
            i = j;
            while (i < end && strchr(" ,=]|", line[i]))
                i++;
        }
    }
}

static void quote_single(FILE *out, const char *s)
{
    fputc('\'', out);
    for (; *s; s++)
        if (*s == '\'')
            fputs("'\\''", out);
        else
            fputc(*s, out);
    fputc('\'', out);
}

int completion_print(FILE *out, const char *shell)
{
    int zsh = strcmp(shell, "zsh") == 0;
    if (!zsh && strcmp(shell, "bash") != 0) {
        fprintf(stderr, "glmchat: --completion takes bash or zsh, not '%s'\n", shell);
        return -1;
    }
    char *usage = capture(print_global_usage, NULL);
    if (!usage)
        return -1;
    char globals[4096], global_valued[4096];
    help_options(usage, globals, global_valued, sizeof globals);
    free(usage);
    if (zsh)
        fputs("#compdef glmchat\n", out);
    fprintf(out, "# %s completion for glmchat %s, generated by 'glmchat --completion %s' from the\n"
                 "# command table and each command's --help.\n",
            shell, PACKAGE_VERSION, shell);
    if (zsh) {
        fputs("_glmchat() {\n    local -a commands opts\n    commands=(\n", out);
        for (const cli_command *c = cli_commands; c->name; c++) {
            char spec[512];
            snprintf(spec, sizeof spec, "%s:%s", c->name, c->summary);
            fputs("        ", out);
            quote_single(out, spec);
            fputc('\n', out);
        }
        fprintf(out, "    )\n    local globals='%s'\n    local cmd='' i\n"
                     "    for (( i = 2; i < CURRENT; i++ )); do\n"
                     "        case ${words[i]} in\n"
                     "            (%s) (( i++ )) ;;\n            (-*) ;;\n"
                     "            (*) cmd=${words[i]}; break ;;\n        esac\n    done\n"
                     "    case $cmd in\n",
                globals, global_valued);
    } else {
        fputs("_glmchat() {\n    local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]}\n"
              "    local commands='",
              out);
        for (const cli_command *c = cli_commands; c->name; c++)
            fprintf(out, "%s%s", c == cli_commands ? "" : " ", c->name);
        fprintf(out, "'\n    local globals='%s'\n    local cmd='' opts='' i\n"
                     "    case $prev in\n"
                     "        --db|--model|-o|--output|--out|--in|--tokenizer|--tokens-file)\n"
                     "            COMPREPLY=($(compgen -f -- \"$cur\")); return ;;\n    esac\n"
                     "    for (( i = 1; i < COMP_CWORD; i++ )); do\n"
                     "        case ${COMP_WORDS[i]} in\n"
                     "            %s) (( i++ )) ;;\n            -*) ;;\n"
                     "            *) cmd=${COMP_WORDS[i]}; break ;;\n        esac\n    done\n"
                     "    case $cmd in\n",
                globals, global_valued);
    }
    for (const cli_command *c = cli_commands; c->name; c++) {
        char *help = capture(print_command_help, c);
        if (!help)
            return -1;
        char opts[4096], valued[4096];
        help_options(help, opts, valued, sizeof opts);
        free(help);
        fprintf(out, zsh ? "        (%s) opts=(%s) ;;\n" : "        %s) opts='%s' ;;\n", c->name, opts);
    }
    if (zsh)
        fputs("    esac\n"
              "    if [[ -z $cmd ]]; then\n"
              "        if [[ $PREFIX == -* ]]; then compadd -- ${=globals}\n"
              "        else _describe -t commands 'glmchat command' commands; fi\n"
              "        return\n    fi\n"
              "    if [[ $PREFIX == -* ]]; then compadd -- $opts ${=globals}; else _files; fi\n"
              "}\n_glmchat \"$@\"\n",
              out);
    else
        fputs("    esac\n"
              "    if [[ -z $cmd ]]; then\n"
              "        COMPREPLY=($(compgen -W \"$commands $globals\" -- \"$cur\"))\n"
              "    elif [[ $cur == -* ]]; then\n"
              "        COMPREPLY=($(compgen -W \"$opts $globals\" -- \"$cur\"))\n"
              "    else\n        COMPREPLY=($(compgen -f -- \"$cur\"))\n    fi\n"
              "}\ncomplete -F _glmchat glmchat\n",
              out);
    return ferror(out) ? -1 : 0;
}
