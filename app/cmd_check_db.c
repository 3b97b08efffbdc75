/* cmd_check_db.c: `glmchat check-db`: the full integrity check of the database (every page,
 * index and the search index) on a read-only handle, with what to do when it is damaged. */
#include <getopt.h>
#include <stdio.h>

#include "app/commands.h"
#include "app/paths.h"
#include "storage/storage.h"

static void print_usage(void)
{
    printf("Usage: glmchat check-db\n"
           "Checks the whole database (--db) read-only: every page and index (SQLite's\n"
           "integrity_check) and the search index. Prints 'ok' and exits 0, or names the damage\n"
           "and how to recover and exits 1. Every command already runs a quick check when it\n"
           "opens the database and refuses to write to a damaged one.\n"
           "\n"
           "  -h, --help show this help\n");
}

int cmd_check_db(int argc, char **argv, const cli_globals *g)
{
    int rc = cli_help_only(argc, argv, "check-db", print_usage);
    if (rc >= 0)
        return rc;
    if (optind < argc)
        return cli_usage_error("check-db", "takes no arguments ('%s')", argv[optind]);
    glm_paths p;
    char err[2048];
    if (paths_resolve(&p, g, err, sizeof err) != 0)
        return cli_runtime_error("%s", err);
    db_store *db = db_open_mode(p.db_file, DB_OPEN_CHECK, err, sizeof err);
    if (!db)
        return cli_runtime_error("%s", err);
    int ok = db_integrity_ok(db);
    rc = CLI_EXIT_OK;
    if (ok == 1)
        printf("ok: %s\n", p.db_file);
    else
        rc = cli_runtime_error("%s", db_errmsg(db));
    db_close(db);
    return rc;
}
