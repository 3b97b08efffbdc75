/* bench_spec_reuse.c: time to first token of a new turn after a long conversation on the CPU
 * engine, resumed from a kept state against a full prefill, measured in the same run, plus the
 * kept state's size and the time to keep it. Usage: bench_spec_reuse MODEL_DIR [CONTEXT] [NEW]. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "session.h"
#include "bench/bench_clock.h"

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: bench_spec_reuse MODEL_DIR [CONTEXT] [NEW]\n");
        return 2;
    }
    int ctx = argc > 2 ? atoi(argv[2]) : 4096, fresh = argc > 3 ? atoi(argv[3]) : 64;
    glm_error err = {0};
    glm_engine_params p = {.model_dir = argv[1], .backend = GLM_BACKEND_CPU,
                           .prompt_cache_bytes = (int64_t)4 << 30};
    glm_engine *e = glm_engine_open(&p, &err);
    if (!e || ctx < 1 || fresh < 1) {
        fprintf(stderr, "bench_spec_reuse: %s\n", e ? "CONTEXT and NEW must be positive" : err.message);
        return 1;
    }
    int n = ctx + fresh, V = engine_model(e)->cfg.vocab_size;
    int32_t *ids = malloc((size_t)n * sizeof *ids);
    uint64_t x = 7;
    for (int i = 0; i < n; i++) { /* ids of the first 2,000 (real tokens in the demo model) */
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        ids[i] = (int32_t)((x >> 33) % (uint64_t)(V < 2000 ? V : 2000));
    }
    glm_session *a = glm_session_new(e, &err), *b = glm_session_new(e, &err);
    double t0 = bench_now_s();
    glm_status st = glm_session_feed(a, ids, n, NULL, &err); /* the full prefill: the ceiling */
    double full = bench_now_s() - t0;
    float *want = malloc((size_t)V * sizeof *want);
    if (!st)
        memcpy(want, glm_session_logits(a), (size_t)V * sizeof *want);
    glm_session_reset(a);
    if (!st)
        st = glm_session_feed(a, ids, ctx, NULL, &err); /* the conversation so far */
    t0 = bench_now_s();
    if (!st)
        st = glm_session_keep(a, &err);
    double keep = bench_now_s() - t0;
    t0 = bench_now_s();
    int got = st ? 0 : glm_session_restore(b, ids, n, 0, n - 1);
    if (!st && got == ctx)
        st = glm_session_feed(b, ids + ctx, fresh, NULL, &err);
    double resumed = bench_now_s() - t0;
    if (st || got != ctx) {
        fprintf(stderr, "bench_spec_reuse: %s\n", st ? err.message : "the kept state was not found");
        return 1;
    }
    float diff = 0;
    const float *l = glm_session_logits(b);
    for (int i = 0; i < V; i++)
        diff = fmaxf(diff, fabsf(l[i] - want[i]));
    glm_cache_stats cs;
    glm_engine_cache_stats(e, &cs);
    printf("context %d + %d new tokens: full prefill %.3f s, resumed %.4f s (%.2f%% of full); "
           "keeping the state %.4f s, %.1f MiB; last logits differ by at most %.2e\n", ctx, fresh,
           full, resumed, 100.0 * resumed / full, keep, cs.bytes / 1048576.0, (double)diff);
    free(want);
    free(ids);
    glm_session_free(a);
    glm_session_free(b);
    glm_engine_close(e);
    return 0;
}
