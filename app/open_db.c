/* open_db.c: cli_open_database: path resolution plus db_open, with the error printed as
 * "glmchat: ..." so each command only checks for NULL. */
#include "app/open_db.h"
#include "app/paths.h"

db_store *cli_open_database(const cli_globals *g)
{
    glm_paths p;
    char err[1024];
    if (paths_resolve(&p, g, err, sizeof err) != 0) {
        cli_runtime_error("%s", err);
        return NULL;
    }
    db_store *db = db_open(p.db_file, err, sizeof err);
    if (!db)
        cli_runtime_error("%s", err);
    return db;
}
