/* bench_cuda_spec.c: prompt reuse and drafted decoding on the CUDA backend (tests/gpu/spec.sh):
 * time to first token of a new turn after a long conversation, resumed from a kept state against
 * a full prefill measured in the same run; the cost of a verification window in decode steps;
 * then decode tok/s on prose and on code with copy drafts, MTP drafts (a model with an MTP
 * layer: mkmodel small-mtp) and all-right drafts against plain decode, with acceptance per draft
 * position; exit 1 when a drafted reply differs from the plain one.
 * Usage: bench_cuda_spec MODEL_DIR [CONTEXT] [NEW] [DECODE_TOKENS] [ROUNDS]. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "session.h"
#include "spec.h"
#include "spec_decode.h"
#include "tests/gpu/cuda_env.h"
#include "bench/bench_clock.h"

static glm_engine *open_engine(const char *dir, int draft, int64_t cache, glm_error *err)
{
    glm_engine_params p;
    if (gpu_env_params(&p, err))
        return NULL;
    p.model_dir = dir;
    p.backend = GLM_BACKEND_CUDA;
    p.draft = (glm_draft)draft;
    p.prompt_cache_bytes = cache;
    return glm_engine_open(&p, err);
}

/* Time to first token of a new turn of `fresh` tokens after ctx tokens, with and without reuse. */
static int bench_reuse(const char *dir, int ctx, int fresh)
{
    glm_error err = {0};
    glm_engine *e = open_engine(dir, SPEC_OFF, (int64_t)16 << 30, &err);
    if (!e) {
        fprintf(stderr, "bench_cuda_spec: %s\n", err.message);
        return 1;
    }
    int n = ctx + fresh, V = engine_model(e)->cfg.vocab_size;
    int32_t *ids = malloc((size_t)n * sizeof *ids);
    uint64_t x = 7;
    for (int i = 0; i < n; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        ids[i] = (int32_t)((x >> 33) % (uint64_t)(V < 2000 ? V : 2000));
    }
    glm_session *a = glm_session_new(e, &err), *b = glm_session_new(e, &err);
    float *want = malloc((size_t)V * sizeof *want);
    glm_status st = glm_session_feed(a, ids, 64, NULL, &err); /* warm-up: first launches */
    glm_session_reset(a);
    double full = 0, keep = 0, resumed[3] = {0};
    if (!st) {
        double t0 = bench_now_s();
        st = glm_session_feed(a, ids, n, NULL, &err); /* the full prefill: the ceiling */
        full = bench_now_s() - t0;
    }
    if (!st)
        memcpy(want, glm_session_logits(a), (size_t)V * sizeof *want);
    glm_session_reset(a);
    if (!st)
        st = glm_session_feed(a, ids, ctx, NULL, &err); /* the conversation so far */
    if (!st) {
        double t0 = bench_now_s();
        st = glm_session_keep(a, &err);
        keep = bench_now_s() - t0;
    }
    float diff = 0;
    for (int r = 0; r < 3 && !st; r++) {
        glm_session_reset(b);
        double t0 = bench_now_s();
        int got = glm_session_restore(b, ids, n, 0, n - 1);
        if (got != ctx) {
            fprintf(stderr, "bench_cuda_spec: the kept state was not found (%d)\n", got);
            return 1;
        }
        st = glm_session_feed(b, ids + ctx, fresh, NULL, &err);
        resumed[r] = bench_now_s() - t0;
        const float *l = glm_session_logits(b);
        for (int i = 0; !st && i < V; i++)
            diff = fmaxf(diff, fabsf(l[i] - want[i]));
    }
    if (st) {
        fprintf(stderr, "bench_cuda_spec: %s\n", err.message);
        return 1;
    }
    double best = resumed[0];
    for (int r = 1; r < 3; r++)
        best = resumed[r] < best ? resumed[r] : best;
    glm_cache_stats cs;
    glm_engine_cache_stats(e, &cs);
    printf("reuse: context %d + %d new tokens: full prefill %.3f s (%.0f tok/s), resumed from the "
           "kept state %.4f s (best of 3: %.4f, %.4f, %.4f) = %.2f%% of the full prefill; keeping "
           "the state %.4f s, %.1f MiB; last logits differ by %.3g (0: bit for bit)\n", ctx, fresh,
           full, n / full, best, resumed[0], resumed[1], resumed[2], 100.0 * best / full, keep,
           cs.bytes / 1048576.0, (double)diff);
    free(want);
    free(ids);
    glm_session_free(a);
    glm_session_free(b);
    glm_engine_close(e);
    return 0;
}

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
    int rc = bench_reuse(argv[1], ctx / 16 * 16, fresh);
    rc |= sd_window_costs(&o, 256);
    rc |= sd_bench_text(&o, "prose", sd_prose);
    rc |= sd_bench_text(&o, "code", sd_code);
    sd_print_note();
    printf("RESULT: %s\n", rc ? "FAIL" : "PASS (drafted replies identical to plain decoding)");
    return rc;
}
