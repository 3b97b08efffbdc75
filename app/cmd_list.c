/* cmd_list.c: `glmchat list [--json]` (CLI.md): the saved conversations, most recently updated
 * first, as an aligned table or as a JSON array for scripts. */
#include <cjson/cJSON.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "app/commands.h"
#include "app/open_db.h"
#include "storage/storage.h"

static void print_usage(void)
{
    printf("Usage: glmchat list [--json]\n"
           "Lists the saved conversations, most recently updated first: id, last update (UTC),\n"
           "number of messages (every branch) and title (else the first words typed).\n"
           "\n"
           "  --json     one JSON array of {id, title, preview, model, created_at, updated_at,\n"
           "             messages}; times in milliseconds since the Unix epoch\n"
           "  -h, --help show this help\n");
}

static int print_json(const conv_summary *list, size_t n)
{
    cJSON *arr = cJSON_CreateArray();
    for (size_t i = 0; arr && i < n; i++) {
        cJSON *o = cJSON_CreateObject();
        if (!o || !cJSON_AddItemToArray(arr, o))
            break;
        cJSON_AddNumberToObject(o, "id", (double)list[i].id);
        cJSON_AddItemToObject(o, "title", list[i].title ? cJSON_CreateString(list[i].title) : cJSON_CreateNull());
        cJSON_AddItemToObject(o, "preview", list[i].preview ? cJSON_CreateString(list[i].preview) : cJSON_CreateNull());
        cJSON_AddItemToObject(o, "model", list[i].model ? cJSON_CreateString(list[i].model) : cJSON_CreateNull());
        cJSON_AddNumberToObject(o, "created_at", (double)list[i].created_at);
        cJSON_AddNumberToObject(o, "updated_at", (double)list[i].updated_at);
        cJSON_AddNumberToObject(o, "messages", (double)list[i].messages);
    }
    char *text = arr ? cJSON_PrintUnformatted(arr) : NULL;
    cJSON_Delete(arr);
    if (!text)
        return cli_runtime_error("out of memory printing the list");
    puts(text);
    free(text);
    return CLI_EXIT_OK;
}

static void print_table(const conv_summary *list, size_t n)
{
    if (n == 0) {
        fprintf(stderr, "glmchat: no saved conversations yet\n");
        return;
    }
    printf("%6s  %-16s  %5s  %s\n", "ID", "UPDATED (UTC)", "MSGS", "TITLE");
    for (size_t i = 0; i < n; i++) {
        char when[32];
        time_t t = (time_t)(list[i].updated_at / 1000);
        struct tm tm;
        if (!gmtime_r(&t, &tm) || !strftime(when, sizeof when, "%Y-%m-%d %H:%M", &tm))
            snprintf(when, sizeof when, "?");
        const char *title = list[i].title ? list[i].title : list[i].preview ? list[i].preview : "(empty)";
        printf("%6lld  %-16s  %5lld  %s\n", (long long)list[i].id, when, (long long)list[i].messages, title);
    }
}

int cmd_list(int argc, char **argv, const cli_globals *g)
{
    static const struct option options[] = {
        {"json", no_argument, NULL, 'j'}, {"help", no_argument, NULL, 'h'}, {NULL, 0, NULL, 0}};
    int json = 0, c;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "h", options, NULL)) != -1) {
        if (c == 'j')
            json = 1;
        else if (c == 'h') {
            print_usage();
            return CLI_EXIT_OK;
        } else
            return cli_usage_error("list", "unrecognized option '%s'", argv[optind - 1]);
    }
    if (optind < argc)
        return cli_usage_error("list", "takes no arguments, not '%s'", argv[optind]);
    db_store *db = cli_open_existing_database(g);
    if (!db)
        return CLI_EXIT_RUNTIME;
    conv_summary *list;
    size_t n;
    int rc = CLI_EXIT_OK;
    if (conv_list(db, &list, &n) != 0) {
        rc = cli_runtime_error("%s", db_errmsg(db));
    } else {
        if (json)
            rc = print_json(list, n);
        else
            print_table(list, n);
        conv_list_free(list, n);
    }
    db_close(db);
    return rc;
}
