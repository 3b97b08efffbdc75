/* open_db.h: opens the conversation database a command was pointed at (--db, $GLMCHAT_DB, XDG),
 * the one way list, search, export and import get their db_store. */
#ifndef GLMCHAT_APP_OPEN_DB_H
#define GLMCHAT_APP_OPEN_DB_H

#include "app/cli.h"
#include "storage/storage.h"

/* The database of g's paths, or NULL after printing why on stderr. */
db_store *cli_open_database(const cli_globals *g);

/* For commands that only read (list, search, export): the same, but a database that does not
 * exist is an error ("no database at PATH"), never a new empty file. */
db_store *cli_open_existing_database(const cli_globals *g);

#endif
