/* bench_tokenizer.c: single-threaded tokenizer speed: encode (whole text and line by line), decode,
 * against the ceiling of the GLM split regex alone (PCRE2 JIT). Usage: TOKENIZER.json TEXTFILE [REPS]. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/text/pretokenize.h"
#include "engine/text/tokenizer.h"

static const char GLM_SPLIT[] = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}|"
                                " ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

static glm_status count_piece(const char *piece, size_t len, void *user)
{
    (void)piece;
    *(size_t *)user += len;
    return GLM_OK;
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
        free(b);
        b = NULL;
    }
    fclose(f);
    *len = (size_t)n;
    return b;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: %s TOKENIZER.json TEXTFILE [REPS]\n", argv[0]);
        return 2;
    }
    int reps = argc > 3 ? atoi(argv[3]) : 3;
    glm_error err = {0};
    /* loading: the best of reps (each a whole tok_load and tok_free) */
    double best_load = 1e30;
    tok_tokenizer *t = NULL;
    for (int r = 0; r < (reps > 0 ? reps : 1); r++) {
        tok_free(t);
        double t0 = now();
        t = tok_load(argv[1], &err);
        if (!t) {
            fprintf(stderr, "%s\n", err.message);
            return 1;
        }
        if (now() - t0 < best_load)
            best_load = now() - t0;
    }
    size_t len;
    char *text = slurp(argv[2], &len);
    if (!text) {
        fprintf(stderr, "cannot read %s\n", argv[2]);
        return 1;
    }
    double best_whole = 1e9, best_lines = 1e9, best_dec = 1e9, best_split = 1e9;
    pt_splitter *sp = pt_new(GLM_SPLIT, &err);
    if (!sp) {
        fprintf(stderr, "%s\n", err.message);
        return 1;
    }
    for (int r = 0; r < reps; r++) {
        size_t covered = 0;
        double t0 = now();
        if (pt_split(sp, text, len, count_piece, &covered, &err) != GLM_OK || covered != len)
            return 1;
        double dt = now() - t0;
        if (dt < best_split)
            best_split = dt;
    }
    pt_free(sp);
    tok_ids ids = {0};
    unsigned long sum = 0;
    for (int r = 0; r < reps; r++) {
        ids.n = 0;
        double t0 = now();
        if (tok_encode(t, text, len, &ids, &err) != GLM_OK) {
            fprintf(stderr, "%s\n", err.message);
            return 1;
        }
        double dt = now() - t0;
        if (dt < best_whole)
            best_whole = dt;
    }
    for (size_t i = 0; i < ids.n; i++)
        sum = sum * 31 + (unsigned long)ids.v[i];
    size_t n_ids = ids.n;
    for (int r = 0; r < reps; r++) {
        double t0 = now();
        size_t at = 0;
        while (at < len) {
            const char *nl = memchr(text + at, '\n', len - at);
            size_t end = nl ? (size_t)(nl - text) : len;
            tok_ids line = {0};
            if (tok_encode(t, text + at, end - at, &line, &err) != GLM_OK)
                return 1;
            tok_ids_free(&line);
            at = end + 1;
        }
        double dt = now() - t0;
        if (dt < best_lines)
            best_lines = dt;
    }
    for (int r = 0; r < reps; r++) {
        tbuf out = {0};
        double t0 = now();
        if (tok_decode(t, ids.v, ids.n, &out, &err) != GLM_OK)
            return 1;
        double dt = now() - t0;
        if (dt < best_dec)
            best_dec = dt;
        tbuf_free(&out);
    }
    printf("glmchat load_s %.3f bytes %zu ids %zu encode_whole_MBps %.2f encode_lines_MBps %.2f decode_MBps %.2f "
           "split_only_MBps %.2f encode/split %.2f checksum %lx\n",
           best_load, len, n_ids, len / best_whole / 1e6, len / best_lines / 1e6, len / best_dec / 1e6, len / best_split / 1e6,
           best_split / best_whole, sum);
    tok_ids_free(&ids);
    free(text);
    tok_free(t);
    return 0;
}
