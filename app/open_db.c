/* open_db.c: cli_open_database: path resolution plus db_open, with the error printed as
 * "glmchat: ..." so each command only checks for NULL. */
#include <errno.h>
#include <string.h>
#include <sys/stat.h>

#include "app/open_db.h"
#include "app/paths.h"

static db_store *open_database(const cli_globals *g, int must_exist)
{
    glm_paths p;
    char err[1024];
    if (paths_resolve(&p, g, err, sizeof err) != 0) {
        cli_runtime_error("%s", err);
        return NULL;
    }
    struct stat st;
    if (must_exist && stat(p.db_file, &st) != 0) {
        if (errno == ENOENT)
            cli_runtime_error("no database at %s: nothing has been saved there (a chat makes it; "
                              "check --db and $GLMCHAT_DB)", p.db_file);
        else
            cli_runtime_error("cannot read the database %s: %s", p.db_file, strerror(errno));
        return NULL;
    }
    db_store *db = db_open(p.db_file, err, sizeof err);
    if (!db)
        cli_runtime_error("%s", err);
    return db;
}

db_store *cli_open_database(const cli_globals *g)
{
    return open_database(g, 0);
}

db_store *cli_open_existing_database(const cli_globals *g)
{
    return open_database(g, 1);
}
