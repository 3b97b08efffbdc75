/* cmd_rename.c: `glmchat rename ID TITLE...` (CLI.md): gives a saved conversation a new title,
 * the one list, the TUI and exports show. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app/commands.h"
#include "app/open_db.h"
#include "base/utf8.h"
#include "storage/storage.h"

#define RENAME_TITLE_MAX 200 /* bytes: a title is one line of a list */

static void print_usage(void)
{
    printf("Usage: glmchat rename ID TITLE...\n"
           "Sets the title of conversation ID (as `glmchat list` shows them). The words of TITLE\n"
           "are joined by spaces; it is one line of UTF-8 text, at most %d bytes.\n"
           "\n"
           "  -h, --help  show this help\n",
           RENAME_TITLE_MAX);
}

/* The words joined by single spaces (malloc'd), or NULL when out of memory. */
static char *join_words(int n, char **words)
{
    size_t len = 1;
    for (int i = 0; i < n; i++)
        len += strlen(words[i]) + 1;
    char *s = malloc(len);
    if (!s)
        return NULL;
    s[0] = 0;
    for (int i = 0; i < n; i++) {
        if (i)
            strcat(s, " ");
        strcat(s, words[i]);
    }
    return s;
}

/* NULL when title can be a title, else what is wrong with it (in why). */
static const char *title_problem(const char *title, char *why, size_t whylen)
{
    size_t n = strlen(title);
    if (strspn(title, " ") == n)
        return "is empty";
    if (n > RENAME_TITLE_MAX) {
        snprintf(why, whylen, "is %zu bytes long; the most is %d", n, RENAME_TITLE_MAX);
        return why;
    }
    if (!utf8_valid(title, n))
        return "is not valid UTF-8";
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)title[i] < 0x20 || title[i] == 0x7f)
            return "holds a control character (a title is one line)";
    return NULL;
}

int cmd_rename(int argc, char **argv, const cli_globals *g)
{
    int rc = cli_help_only(argc, argv, "rename", print_usage);
    if (rc >= 0)
        return rc;
    if (argc - optind < 2)
        return cli_usage_error("rename", "needs a conversation ID and a TITLE");
    long long id;
    if (cli_int_option("rename", "ID", argv[optind], 1, INT64_MAX, &id) != 0)
        return CLI_EXIT_USAGE;
    char *title = join_words(argc - optind - 1, argv + optind + 1);
    if (!title)
        return cli_runtime_error("out of memory");
    char why[96];
    const char *problem = title_problem(title, why, sizeof why);
    if (problem) {
        free(title);
        return cli_usage_error("rename", "the TITLE %s", problem);
    }
    db_store *db = cli_open_existing_database(g);
    rc = CLI_EXIT_OK;
    if (!db)
        rc = CLI_EXIT_RUNTIME;
    else if (conv_exists(db, id) == 0)
        rc = cli_runtime_error("there is no conversation %lld in %s; `glmchat list` shows them", id, db_path(db));
    else if (conv_set_title(db, id, title) != 0)
        rc = cli_runtime_error("%s", db_errmsg(db));
    db_close(db);
    free(title);
    return rc;
}
