/* cmd_import.c: `glmchat import FILE.json` (CLI.md): reads a JSON transcript that export wrote
 * (one conversation or --all) in one transaction and prints each new conversation id. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app/commands.h"
#include "app/open_db.h"
#include "storage/storage.h"

static void print_usage(void)
{
    printf("Usage: glmchat import FILE.json\n"
           "Imports the JSON that 'glmchat export --format json' wrote (one conversation or\n"
           "--all; '-' reads stdin) as new conversations, all or nothing, and prints each new\n"
           "conversation id on its own line.\n"
           "\n"
           "  -h, --help  show this help\n");
}

int cmd_import(int argc, char **argv, const cli_globals *g)
{
    static const struct option options[] = {{"help", no_argument, NULL, 'h'}, {NULL, 0, NULL, 0}};
    int c;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "h", options, NULL)) != -1) {
        if (c != 'h')
            return cli_usage_error("import", "unrecognized option '%s'", argv[optind - 1]);
        print_usage();
        return CLI_EXIT_OK;
    }
    if (optind >= argc)
        return cli_usage_error("import", "needs a FILE.json");
    if (optind + 1 < argc)
        return cli_usage_error("import", "takes one file, not also '%s'", argv[optind + 1]);
    const char *path = argv[optind];
    int from_stdin = strcmp(path, "-") == 0;
    FILE *in = from_stdin ? stdin : fopen(path, "rb");
    if (!in)
        return cli_runtime_error("cannot read %s: %s", path, strerror(errno));
    size_t len = 0;
    char *json = cli_read_stream(in, &len);
    int read_errno = errno;
    if (!from_stdin)
        fclose(in);
    if (!json)
        return cli_runtime_error("cannot read %s: %s", path, strerror(read_errno));
    db_store *db = cli_open_database(g);
    if (!db) {
        free(json);
        return CLI_EXIT_RUNTIME;
    }
    int64_t *ids;
    size_t n;
    int rc = CLI_EXIT_OK;
    if (import_json(db, json, len, &ids, &n) != 0) {
        rc = cli_runtime_error("%s: %s", path, db_errmsg(db));
    } else {
        for (size_t i = 0; i < n; i++)
            printf("%lld\n", (long long)ids[i]);
        free(ids);
    }
    free(json);
    db_close(db);
    return rc;
}
