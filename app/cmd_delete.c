/* cmd_delete.c: `glmchat delete [--yes] ID...` (CLI.md): deletes saved conversations with every
 * message, search entry and kept reasoning, after a yes on the terminal or with --yes. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "app/commands.h"
#include "app/open_db.h"
#include "storage/storage.h"

static void print_usage(void)
{
    printf("Usage: glmchat delete [--yes] ID...\n"
           "Deletes the conversations ID (as `glmchat list` shows them) with all their messages\n"
           "and branches, their search entries and their kept reasoning. It cannot be undone:\n"
           "on a terminal it asks first; without one it needs --yes. Every ID must exist, or\n"
           "nothing is deleted.\n"
           "\n"
           "  -y, --yes   delete without asking\n"
           "  -h, --help  show this help\n");
}

/* The ids of argv, checked and without repeats, into ids (argc entries); their count or -1. */
static int parse_ids(int argc, char **argv, int64_t *ids)
{
    int n = 0;
    for (int i = 0; i < argc; i++) {
        long long id;
        if (cli_int_option("delete", "ID", argv[i], 1, INT64_MAX, &id) != 0)
            return -1;
        int seen = 0;
        for (int j = 0; j < n; j++)
            seen |= ids[j] == id;
        if (!seen)
            ids[n++] = id;
    }
    return n;
}

/* Shows what would go and reads the answer from the terminal: 1 for yes. */
static int confirmed(db_store *db, const int64_t *ids, int n)
{
    conv_summary *list;
    size_t count;
    if (conv_list(db, &list, &count) == 0) {
        for (int i = 0; i < n; i++)
            for (size_t j = 0; j < count; j++)
                if (list[j].id == ids[i]) {
                    const char *title = list[j].title ? list[j].title : list[j].preview ? list[j].preview : "(empty)";
                    fprintf(stderr, "  %lld  %s (%lld messages)\n", (long long)ids[i], title,
                            (long long)list[j].messages);
                }
        conv_list_free(list, count);
    }
    fprintf(stderr, "Delete %s? It cannot be undone. [y/N] ", n == 1 ? "this conversation" : "these conversations");
    fflush(stderr);
    char line[64];
    if (!fgets(line, sizeof line, stdin))
        return 0;
    line[strcspn(line, "\r\n")] = 0;
    return strcmp(line, "y") == 0 || strcmp(line, "Y") == 0 || strcmp(line, "yes") == 0;
}

static int delete_all(db_store *db, const int64_t *ids, int n)
{
    for (int i = 0; i < n; i++) {
        int exists = conv_exists(db, ids[i]);
        if (exists < 0)
            return cli_runtime_error("%s", db_errmsg(db));
        if (!exists)
            return cli_runtime_error("there is no conversation %lld in %s (`glmchat list` shows them); "
                                     "nothing was deleted",
                                     (long long)ids[i], db_path(db));
    }
    if (db_begin(db) != 0)
        return cli_runtime_error("%s", db_errmsg(db));
    for (int i = 0; i < n; i++)
        if (conv_delete(db, ids[i]) != 0) {
            char why[1024];
            snprintf(why, sizeof why, "%s", db_errmsg(db));
            db_rollback(db);
            return cli_runtime_error("%s; nothing was deleted", why);
        }
    if (db_commit(db) != 0)
        return cli_runtime_error("%s; nothing was deleted", db_errmsg(db));
    for (int i = 0; i < n; i++)
        printf("deleted conversation %lld\n", (long long)ids[i]);
    return CLI_EXIT_OK;
}

int cmd_delete(int argc, char **argv, const cli_globals *g)
{
    static const struct option options[] = {
        {"yes", no_argument, NULL, 'y'}, {"help", no_argument, NULL, 'h'}, {NULL, 0, NULL, 0}};
    int yes = 0, c;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "yh", options, NULL)) != -1) {
        if (c == 'y')
            yes = 1;
        else if (c == 'h') {
            print_usage();
            return CLI_EXIT_OK;
        } else
            return cli_usage_error("delete", "unrecognized option '%s'", argv[optind - 1]);
    }
    if (optind >= argc)
        return cli_usage_error("delete", "needs the ID of a conversation (see `glmchat list`)");
    int64_t *ids = malloc((size_t)(argc - optind) * sizeof *ids);
    if (!ids)
        return cli_runtime_error("out of memory");
    int n = parse_ids(argc - optind, argv + optind, ids);
    if (n < 0) {
        free(ids);
        return CLI_EXIT_USAGE;
    }
    if (!yes && !isatty(STDIN_FILENO)) {
        free(ids);
        return cli_usage_error("delete", "will not delete without asking, and stdin is not a terminal "
                                         "to ask on; pass --yes to delete anyway");
    }
    db_store *db = cli_open_existing_database(g);
    if (!db) {
        free(ids);
        return CLI_EXIT_RUNTIME;
    }
    int rc;
    if (!yes && !confirmed(db, ids, n))
        rc = cli_runtime_error("nothing was deleted");
    else
        rc = delete_all(db, ids, n);
    db_close(db);
    free(ids);
    return rc;
}
