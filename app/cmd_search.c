/* cmd_search.c: `glmchat search QUERY [--json]` (CLI.md): full-text search over what was said
 * and thought in every conversation, best matches first, with snippets. */
#include <cjson/cJSON.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app/commands.h"
#include "app/open_db.h"
#include "storage/storage.h"

static void print_usage(void)
{
    printf("Usage: glmchat search [--json] [--limit N] QUERY...\n"
           "Options may come before or after the words; a word that starts with '-' goes\n"
           "after '--'.\n"
           "Searches the text and reasoning of every saved conversation. All words of QUERY\n"
           "must occur (any case, accents ignored); punctuation and quotes are plain text.\n"
           "Matched words are shown between [ and ].\n"
           "\n"
           "  --json      one JSON array of {conversation, message, part, kind, role, title,\n"
           "              snippet, created_at}; message is its number in the conversation\n"
           "              (1..N, as export, --from and the chat's jsonl number them)\n"
           "  --limit N   at most N results (default 50)\n"
           "  -h, --help  show this help\n"
           "Finding nothing is not an error: the exit status is 0 (and --json prints []).\n");
}

static int print_json(const search_hit *hits, size_t n)
{
    cJSON *arr = cJSON_CreateArray();
    for (size_t i = 0; arr && i < n; i++) {
        cJSON *o = cJSON_CreateObject();
        if (!o || !cJSON_AddItemToArray(arr, o))
            break;
        cJSON_AddNumberToObject(o, "conversation", (double)hits[i].conv);
        cJSON_AddNumberToObject(o, "message", (double)hits[i].number);
        cJSON_AddNumberToObject(o, "part", (double)hits[i].part);
        cJSON_AddStringToObject(o, "kind", part_kind_name(hits[i].kind));
        cJSON_AddStringToObject(o, "role", msg_role_name(hits[i].role));
        cJSON_AddItemToObject(o, "title", hits[i].title ? cJSON_CreateString(hits[i].title) : cJSON_CreateNull());
        cJSON_AddStringToObject(o, "snippet", hits[i].snippet);
        cJSON_AddNumberToObject(o, "created_at", (double)hits[i].created_at);
    }
    char *text = arr ? cJSON_PrintUnformatted(arr) : NULL;
    cJSON_Delete(arr);
    if (!text)
        return cli_runtime_error("out of memory printing the results");
    puts(text);
    free(text);
    return CLI_EXIT_OK;
}

static void print_text(const search_hit *hits, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        printf("conversation %lld, message %lld (%s%s)%s%s\n", (long long)hits[i].conv,
               (long long)hits[i].number, msg_role_name(hits[i].role),
               hits[i].kind == PART_REASONING ? ", reasoning" : "", hits[i].title ? ": " : "",
               hits[i].title ? hits[i].title : "");
        printf("    ");
        for (const char *s = hits[i].snippet; *s; s++)
            putchar(*s == '\n' || *s == '\r' ? ' ' : *s);
        putchar('\n');
    }
}

/* QUERY... joined with spaces; NULL when out of memory. */
static char *join_words(int argc, char **argv)
{
    size_t len = 1;
    for (int i = 0; i < argc; i++)
        len += strlen(argv[i]) + 1;
    char *q = malloc(len);
    if (!q)
        return NULL;
    q[0] = '\0';
    for (int i = 0; i < argc; i++) {
        if (i)
            strcat(q, " ");
        strcat(q, argv[i]);
    }
    return q;
}

int cmd_search(int argc, char **argv, const cli_globals *g)
{
    static const struct option options[] = {{"json", no_argument, NULL, 'j'},
                                            {"limit", required_argument, NULL, 'l'},
                                            {"help", no_argument, NULL, 'h'},
                                            {NULL, 0, NULL, 0}};
    int json = 0, c;
    long long limit = 50;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "h", options, NULL)) != -1) {
        if (c == 'j') {
            json = 1;
        } else if (c == 'l') {
            if (cli_int_option("search", "--limit", optarg, 1, 100000, &limit))
                return CLI_EXIT_USAGE;
        } else if (c == 'h') {
            print_usage();
            return CLI_EXIT_OK;
        } else if (optopt == 'l') {
            return cli_usage_error("search", "'--limit' needs a value");
        } else {
            return cli_usage_error("search", "unrecognized option '%s'", argv[optind - 1]);
        }
    }
    if (optind >= argc)
        return cli_usage_error("search", "needs a QUERY");
    char *query = join_words(argc - optind, argv + optind);
    if (!query)
        return cli_runtime_error("out of memory");
    db_store *db = cli_open_existing_database(g);
    if (!db) {
        free(query);
        return CLI_EXIT_RUNTIME;
    }
    search_hit *hits;
    size_t n;
    int rc = CLI_EXIT_OK;
    if (search_parts(db, query, (size_t)limit, &hits, &n) != 0) {
        rc = cli_runtime_error("%s", db_errmsg(db));
    } else {
        if (json)
            rc = print_json(hits, n);
        else
            print_text(hits, n);
        if (!json && n == 0)
            fprintf(stderr, "glmchat: nothing matches '%s'\n", query);
        int64_t missed = db_read_only(db) ? search_unindexed(db) : 0;
        if (missed > 0)
            fprintf(stderr, "glmchat: %s is read-only, so its %lld newest messages are not in the "
                    "search index and were not searched; make it writable to search them\n",
                    db_path(db), (long long)missed);
        search_hits_free(hits, n);
    }
    free(query);
    db_close(db);
    return rc;
}
