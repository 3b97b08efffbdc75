/* bench_spec.c: drafted decoding against plain decoding on the CPU backend, in one run: the cost
 * of a verification window in decode steps, then decode tok/s on a prose and a code text with
 * copy drafts, MTP drafts (a model with an MTP layer: mkmodel tiny-mtp) and all-right drafts,
 * the ratio to plain, acceptance per draft position, and every drafted reply checked equal to
 * the plain one (exit 1 when one differs). Usage: bench_spec MODEL_DIR [DECODE_TOKENS] [ROUNDS]. */
#include <stdio.h>
#include <stdlib.h>

#include "spec_decode.h"

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: bench_spec MODEL_DIR [DECODE_TOKENS (128)] [ROUNDS (2)]\n");
        return 2;
    }
    sd_options o = {.model_dir = argv[1], .backend = GLM_BACKEND_CPU,
                    .max_new = argc > 2 ? atoi(argv[2]) : 128, .rounds = argc > 3 ? atoi(argv[3]) : 2};
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
