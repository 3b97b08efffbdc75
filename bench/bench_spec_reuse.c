/* bench_spec_reuse.c: time to first token of a new turn after a long conversation on the CPU
 * engine, resumed from a kept state against a full prefill, measured in the same run, plus the
 * kept state's size and the time to keep it (sd_bench_reuse, which bench_cuda_spec runs on the
 * CUDA backend). Usage: bench_spec_reuse MODEL_DIR [CONTEXT] [NEW]. */
#include <stdio.h>
#include <stdlib.h>

#include "spec_decode.h"

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: bench_spec_reuse MODEL_DIR [CONTEXT] [NEW]\n");
        return 2;
    }
    int ctx = argc > 2 ? atoi(argv[2]) : 4096, fresh = argc > 3 ? atoi(argv[3]) : 64;
    if (ctx < 1 || fresh < 1) {
        fprintf(stderr, "bench_spec_reuse: CONTEXT and NEW must be positive\n");
        return 2;
    }
    sd_options o = {.model_dir = argv[1], .backend = GLM_BACKEND_CPU};
    return sd_bench_reuse(&o, ctx, fresh, (int64_t)4 << 30);
}
