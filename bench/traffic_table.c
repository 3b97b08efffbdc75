/* traffic_table.c: prints model/traffic.c's per-op bytes of one decode step for a model
 * directory's config.json, per rank, for dense formats x context lengths side by side. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/config.h"
#include "model/traffic.h"

#define MAX_COLS 8

static const char usage[] =
    "usage: traffic_table MODEL_DIR [RANKS [CACHE [CONTEXTS [DENSE]]]]\n"
    "  RANKS 1 or 2 (default 2); CACHE fp8, bf16 or f32 (default fp8; latent and indexer keys);\n"
    "  CONTEXTS comma-separated token counts (default 1024,65536);\n"
    "  DENSE comma-separated bf16, q4/32, q4/64 (default q4/32,bf16). Experts: EXL3 4-bit.\n";

static int parse_dense(const char *s, glm_traffic_dense *f)
{
    for (int i = GLM_TRAFFIC_BF16; i <= GLM_TRAFFIC_Q4_G64; i++)
        if (strcmp(s, glm_traffic_dense_name((glm_traffic_dense)i)) == 0) {
            *f = (glm_traffic_dense)i;
            return 0;
        }
    return -1;
}

static int parse_cache(const char *s, glm_cache_format *f)
{
    for (int i = GLM_CACHE_F32; i <= GLM_CACHE_FP8; i++)
        if (strcmp(s, glm_cache_format_name((glm_cache_format)i)) == 0) {
            *f = (glm_cache_format)i;
            return 0;
        }
    return -1;
}

int main(int argc, char **argv)
{
    if (argc < 2 || argc > 6) {
        fputs(usage, stderr);
        return 2;
    }
    glm_config c;
    glm_error err = {0};
    if (glm_config_load(&c, argv[1], &err) != GLM_OK) {
        fprintf(stderr, "traffic_table: %s\n", err.message);
        return 1;
    }
    int ranks = argc > 2 ? atoi(argv[2]) : 2;
    glm_cache_format cache = GLM_CACHE_FP8;
    if (argc > 3 && parse_cache(argv[3], &cache)) {
        fprintf(stderr, "traffic_table: cache '%s': give fp8, bf16 or f32\n", argv[3]);
        return 2;
    }
    char ctxs[256], denses[256];
    snprintf(ctxs, sizeof ctxs, "%s", argc > 4 ? argv[4] : "1024,65536");
    snprintf(denses, sizeof denses, "%s", argc > 5 ? argv[5] : "q4/32,bf16");
    glm_traffic_params p[MAX_COLS];
    glm_traffic_table t[MAX_COLS];
    int n = 0;
    for (char *d = strtok(denses, ","); d; d = strtok(NULL, ",")) {
        glm_traffic_dense f;
        if (parse_dense(d, &f)) {
            fprintf(stderr, "traffic_table: dense format '%s': give bf16, q4/32 or q4/64\n", d);
            return 2;
        }
        char list[256];
        snprintf(list, sizeof list, "%s", ctxs);
        for (char *save, *x = strtok_r(list, ",", &save); x; x = strtok_r(NULL, ",", &save)) {
            if (n == MAX_COLS) {
                fprintf(stderr, "traffic_table: at most %d columns (formats x contexts)\n", MAX_COLS);
                return 2;
            }
            char *end;
            long ctx = strtol(x, &end, 10);
            if (*end || ctx < 0 || ctx > (1L << 30)) {
                fprintf(stderr, "traffic_table: context '%s': give a token count\n", x);
                return 2;
            }
            p[n] = (glm_traffic_params){.ranks = ranks, .context = (int)ctx, .dense = f,
                                        .expert_bits = 4, .latent_cache = cache, .index_cache = cache};
            if (glm_traffic_step(&c, &p[n], &t[n], &err) != GLM_OK) {
                fprintf(stderr, "traffic_table: %s\n", err.message);
                return 2;
            }
            n++;
        }
    }
    printf("bytes one decode step moves per rank (MB = 1e6 bytes): %s, %d layers, %d rank%s, %s "
           "caches, EXL3 4-bit experts\n%-28s %6s", argv[1], c.num_layers, ranks,
           ranks > 1 ? "s" : "", glm_cache_format_name(cache), "op", "calls");
    for (int j = 0; j < n; j++) {
        char h[48];
        snprintf(h, sizeof h, "%s@%d", glm_traffic_dense_name(p[j].dense), p[j].context);
        printf(" %14s", h);
    }
    printf("\n");
    for (int op = 0; op < GLM_OP_COUNT; op++) {
        printf("%-28s %6d", glm_traffic_op_name((glm_traffic_op)op), t[0].op[op].calls);
        for (int j = 0; j < n; j++)
            printf(" %14.3f", t[j].op[op].bytes / 1e6);
        printf("\n");
    }
    printf("%-28s %6s", "total MB", "");
    for (int j = 0; j < n; j++)
        printf(" %14.3f", glm_traffic_bytes(&t[j]) / 1e6);
    printf("\n%-28s %6s", "us at 273 GB/s", "");
    for (int j = 0; j < n; j++)
        printf(" %14.1f", glm_traffic_bytes(&t[j]) / 273e9 * 1e6);
    printf("\n%-28s %6s", "tok/s at 273 GB/s + 90x11us", "");
    for (int j = 0; j < n; j++)
        printf(" %14.1f", 1e6 / (glm_traffic_bytes(&t[j]) / 273e9 * 1e6 + (ranks > 1 ? 990 : 0)));
    printf("\n");
    return 0;
}
