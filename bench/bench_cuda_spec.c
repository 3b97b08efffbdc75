/* bench_cuda_spec.c: prompt reuse and drafted decoding on the CUDA backend (tests/gpu/spec.sh):
 * time to first token of a new turn after a long conversation, resumed from a kept state against
 * a full prefill measured in the same run; the cost of a verification window in decode steps;
 * then decode tok/s on prose and on code with copy drafts, MTP drafts (a model with an MTP
 * layer: mkmodel small-mtp) and all-right drafts against plain decode, with acceptance per draft
 * position; exit 1 when a drafted reply differs from the plain one.
 * Usage: bench_cuda_spec MODEL_DIR [CONTEXT] [NEW] [DECODE_TOKENS] [ROUNDS]. */
#include <stdio.h>
#include <stdlib.h>

#include "spec_decode.h"

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: bench_cuda_spec MODEL_DIR [CONTEXT] [NEW] [DECODE_TOKENS] "
                        "[ROUNDS]\n");
        return 2;
    }
    int ctx = argc > 2 ? atoi(argv[2]) : 32768, fresh = argc > 3 ? atoi(argv[3]) : 64;
    sd_options o = {.model_dir = argv[1], .backend = GLM_BACKEND_CUDA,
                    .max_new = argc > 4 ? atoi(argv[4]) : 256, .rounds = argc > 5 ? atoi(argv[5]) : 3};
    if (ctx < 16 || fresh < 1 || o.max_new < 1 || o.rounds < 1) {
        fprintf(stderr, "bench_cuda_spec: CONTEXT must be at least 16, NEW, DECODE_TOKENS and "
                        "ROUNDS positive\n");
        return 2;
    }
    int rc = sd_bench_reuse(&o, ctx / 16 * 16, fresh, (int64_t)16 << 30);
    rc |= sd_window_costs(&o, 256);
    rc |= sd_bench_text(&o, "prose", sd_prose);
    rc |= sd_bench_text(&o, "code", sd_code);
    sd_print_note();
    printf("RESULT: %s\n", rc ? "FAIL" : "PASS (drafted replies identical to plain decoding)");
    return rc;
}
