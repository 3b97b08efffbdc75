/* bench_spec.c: drafted decoding against plain decoding on the CPU backend, in one run: the cost
 * of a verification window in decode steps, then decode tok/s on a prose and a code text with
 * copy drafts, MTP drafts (a model with an MTP layer: mkmodel tiny-mtp) and all-right drafts,
 * the ratio to plain, acceptance per draft position, and every drafted reply checked equal to
 * the plain one (exit 1 when one differs). Usage: bench_spec [--peer HOST:PORT] MODEL_DIR
 * [DECODE_TOKENS] [ROUNDS]; with --peer the engines run as rank 0 of two with the worker there
 * (glmchat worker --model MODEL_DIR), the MTP drafts left out (they run on one rank). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "spec_decode.h"

int main(int argc, char **argv)
{
    const char *peer = NULL;
    if (argc > 2 && strcmp(argv[1], "--peer") == 0) {
        peer = argv[2];
        argc -= 2;
        argv += 2;
    }
    if (argc < 2) {
        fprintf(stderr, "usage: bench_spec [--peer HOST:PORT] MODEL_DIR [DECODE_TOKENS (128)] "
                        "[ROUNDS (2)]\n");
        return 2;
    }
    sd_options o = {.model_dir = argv[1], .backend = GLM_BACKEND_CPU,
                    .max_new = argc > 2 ? atoi(argv[2]) : 128, .rounds = argc > 3 ? atoi(argv[3]) : 2,
                    .peer = peer};
    if (o.max_new < 1 || o.rounds < 1) {
        fprintf(stderr, "bench_spec: DECODE_TOKENS and ROUNDS must be positive\n");
        return 2;
    }
    int rc = sd_window_costs(&o, 256);
    rc |= sd_bench_text(&o, "prose", sd_prose);
    rc |= sd_bench_text(&o, "code", sd_code);
    sd_print_note();
    printf("RESULT: %s\n", rc ? "FAIL" : "PASS (drafted replies identical to plain decoding)");
    return rc;
}
