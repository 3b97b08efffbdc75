/* cmd_export.c: `glmchat export ID|--all --format md|json|html [-o FILE]` (CLI.md): transcripts
 * to stdout or to a file written whole (a temporary beside it, then renamed; mode 0600). */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "app/commands.h"
#include "app/export_file.h"
#include "app/open_db.h"
#include "base/setting.h"
#include "storage/storage.h"

static void print_usage(void)
{
    printf("Usage: glmchat export ID|--all [--format md|json|html] [-o FILE]\n"
           "Writes a conversation (or all of them, oldest first) as a transcript.\n"
           "\n"
           "  --all              every conversation\n"
           "  --format FORMAT    json (default, unless -o FILE's name ends in .md or .html):\n"
           "                     lossless, every branch, re-importable;\n"
           "                     md: Markdown of the current branch, reasoning folded;\n"
           "                     html: one self-contained page of the current branch\n"
           "  -o, --output FILE  write FILE (mode 0600, replaced whole) instead of stdout;\n"
           "                     a folder takes glmchat-ID.FORMAT (--all: glmchat-all.FORMAT)\n"
           "  -h, --help         show this help\n"
           "The formats are described in storage/FORMATS.md.\n");
}

static int export_to_file(db_store *db, int64_t id, export_format format, const char *path)
{
    char file[4096], err[4400];
    if (export_file_path(path, id, format, file, sizeof file) != 0)
        return cli_runtime_error("output path %s is too long", path);
    if (export_file_write(db, id, format, file, NULL, err, sizeof err) != 0)
        return cli_runtime_error("%s", err);
    return CLI_EXIT_OK;
}

int cmd_export(int argc, char **argv, const cli_globals *g)
{
    static const struct option options[] = {{"all", no_argument, NULL, 'a'},
                                            {"format", required_argument, NULL, 'f'},
                                            {"output", required_argument, NULL, 'o'},
                                            {"help", no_argument, NULL, 'h'},
                                            {NULL, 0, NULL, 0}};
    int all = 0, c, format = -1;
    const char *output = NULL;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "o:h", options, NULL)) != -1) {
        switch (c) {
        case 'a':
            all = 1;
            break;
        case 'f':
            format = export_format_parse(optarg);
            if (format < 0)
                return cli_usage_error("export", "'--format' takes md, json or html, not '%s'", optarg);
            break;
        case 'o':
            output = optarg;
            break;
        case 'h':
            print_usage();
            return CLI_EXIT_OK;
        default:
            if (optopt == 'f' || optopt == 'o')
                return cli_usage_error("export", "'%s' needs a value", argv[optind - 1]);
            return cli_usage_error("export", "unrecognized option '%s'", argv[optind - 1]);
        }
    }
    if (format < 0 && (!output || (format = export_format_of_path(output)) < 0))
        format = EXPORT_JSON; /* not given: the output file's name says it, else JSON */
    int64_t id = 0;
    if (all && optind < argc)
        return cli_usage_error("export", "give an ID or --all, not both");
    if (!all) {
        if (optind >= argc)
            return cli_usage_error("export", "needs a conversation ID (see 'glmchat list') or --all");
        if (optind + 1 < argc)
            return cli_usage_error("export", "takes one ID, not also '%s'", argv[optind + 1]);
        long long v;
        if (setting_int("ID", argv[optind], 1, INT64_MAX, &v, NULL, 0))
            return cli_usage_error("export", "'%s' is not a conversation id (a number from 'glmchat list')",
                                   argv[optind]);
        id = v;
    }
    db_store *db = cli_open_existing_database(g);
    if (!db)
        return CLI_EXIT_RUNTIME;
    int rc = CLI_EXIT_OK;
    if (output)
        rc = export_to_file(db, id, (export_format)format, output);
    else if (export_write(db, id, (export_format)format, stdout) != 0)
        rc = cli_runtime_error("%s", db_errmsg(db));
    db_close(db);
    return rc;
}
