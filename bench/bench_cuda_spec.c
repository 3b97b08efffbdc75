/* bench_cuda_spec.c: prompt reuse and drafted decoding on the CUDA backend (tests/gpu/spec.sh):
 * time to first token of a new turn after a long conversation, resumed from a kept state against
 * a full prefill measured in the same run; then decode tok/s with copy drafts against plain
 * decode on prose and on code, with acceptance per draft position and the replies compared.
 * Usage: bench_cuda_spec MODEL_DIR [CONTEXT] [NEW] [DECODE_TOKENS]. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "session.h"
#include "spec.h"
#include "text/tokenizer.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static glm_engine *open_engine(const char *dir, int draft, int64_t cache, glm_error *err)
{
    glm_engine_params p = {.model_dir = dir, .backend = GLM_BACKEND_CUDA, .draft = draft,
                           .prompt_cache_bytes = cache};
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
    int n = ctx + fresh, V = glm_engine_model(e)->cfg.vocab_size;
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
        double t0 = now_s();
        st = glm_session_feed(a, ids, n, NULL, &err); /* the full prefill: the ceiling */
        full = now_s() - t0;
    }
    if (!st)
        memcpy(want, glm_session_logits(a), (size_t)V * sizeof *want);
    glm_session_reset(a);
    if (!st)
        st = glm_session_feed(a, ids, ctx, NULL, &err); /* the conversation so far */
    if (!st) {
        double t0 = now_s();
        st = glm_session_keep(a, &err);
        keep = now_s() - t0;
    }
    float diff = 0;
    for (int r = 0; r < 3 && !st; r++) {
        glm_session_reset(b);
        double t0 = now_s();
        int got = glm_session_restore(b, ids, n, 0, n - 1);
        if (got != ctx) {
            fprintf(stderr, "bench_cuda_spec: the kept state was not found (%d)\n", got);
            return 1;
        }
        st = glm_session_feed(b, ids + ctx, fresh, NULL, &err);
        resumed[r] = now_s() - t0;
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

typedef struct collected {
    int32_t *v;
    int n, cap;
} collected;

static int keep_token(int32_t t, void *user)
{
    collected *c = user;
    if (c->n < c->cap)
        c->v[c->n++] = t;
    return 0;
}

static const char prose[] =
    "The river ran slowly past the old mill, where the miller's daughter sat each evening and "
    "watched the light fade over the hills. She had read every book in the village twice, and "
    "she dreamed of the cities beyond the mountains, of libraries with more books than a person "
    "could read in a lifetime. One autumn a traveller came down the road with a pack of maps.";

static const char code[] =
    "static int sum(const int *v, int n)\n{\n    int s = 0;\n    for (int i = 0; i < n; i++)\n"
    "        s += v[i];\n    return s;\n}\n\nstatic int max(const int *v, int n)\n{\n"
    "    int m = v[0];\n    for (int i = 1; i < n; i++)\n        if (v[i] > m)\n"
    "            m = v[i];\n    return m;\n}\n\nstatic int min(const int *v, int n)\n{\n";

/* The plain reply as drafts (all right): the verification windows' own speed, the ceiling of
 * what drafts of full acceptance give on this machine. */
typedef struct oracle {
    const collected *reply;
    int n_prompt;
} oracle;

static int oracle_draft(const int32_t *ctx, int n, int32_t *out, int max, void *user)
{
    const oracle *o = user;
    int at = n - o->n_prompt, k = 0;
    for (; k < max && at + k < o->reply->n; k++)
        out[k] = o->reply->v[at + k];
    (void)ctx;
    return k;
}

static void print_stats(const spec_stats *st)
{
    printf("%lld windows; accepted/proposed by draft position:", (long long)st->windows);
    for (int i = 0; i < SPEC_MAX_DRAFT; i++)
        printf(" %lld/%lld", (long long)st->accepted[i], (long long)st->proposed[i]);
}

/* Plain, copy-drafted and oracle-drafted decode of max_new greedy tokens after a text; tok/s,
 * acceptance, and the replies compared. */
static int bench_decode(const char *dir, const char *what, const char *text, int max_new)
{
    glm_error err = {0};
    glm_engine *e[3] = {open_engine(dir, SPEC_OFF, -1, &err), NULL, NULL};
    if (e[0])
        e[1] = open_engine(dir, SPEC_COPY, -1, &err);
    e[2] = e[1];
    /* the tokenizer on both: loading it masks the ids it has no text for */
    const tok_tokenizer *tk = e[0] ? glm_engine_tokenizer(e[0], &err) : NULL;
    if (tk && (!e[1] || !glm_engine_tokenizer(e[1], &err)))
        tk = NULL;
    tok_ids ids = {0};
    if (!e[1] || !tk || tok_encode(tk, text, strlen(text), &ids, &err)) {
        fprintf(stderr, "bench_cuda_spec: %s\n", err.message);
        return 1;
    }
    int eos[] = {-1};
    glm_sampling smp = {.temperature = 0, .top_p = 1};
    collected out[3];
    double secs[3];
    spec_stats stats[3];
    oracle orc = {.reply = &out[0], .n_prompt = (int)ids.n};
    for (int k = 0; k < 3; k++) {
        out[k] = (collected){.v = malloc((size_t)max_new * sizeof(int32_t)), .cap = max_new};
        glm_session *s = glm_session_new(e[k], &err);
        if (k == 2)
            glm_session_set_drafter(s, oracle_draft, &orc);
        /* the prompt first, untimed; then the decode */
        glm_status st = glm_session_feed(s, ids.v, (int)ids.n, NULL, &err);
        int n = 0;
        double t0 = now_s();
        if (!st)
            st = glm_session_generate_tokens(s, NULL, 0, &smp, eos, 1, max_new, keep_token,
                                             &out[k], &n, &err);
        secs[k] = now_s() - t0;
        if (st) {
            fprintf(stderr, "bench_cuda_spec: %s\n", err.message);
            return 1;
        }
        stats[k] = *glm_session_spec_stats(s);
        glm_session_free(s);
    }
    int same = 1;
    for (int k = 1; k < 3; k++)
        same &= out[0].n == out[k].n && memcmp(out[0].v, out[k].v, (size_t)out[0].n * 4) == 0;
    printf("decode %-5s (%zu prompt tokens, %d greedy): plain %.1f tok/s; copy drafts %.1f tok/s "
           "= %.2fx (", what, ids.n, out[0].n, out[0].n / secs[0], out[1].n / secs[1],
           secs[0] / secs[1]);
    print_stats(&stats[1]);
    printf("); all-right drafts %.1f tok/s = %.2fx (", out[2].n / secs[2], secs[0] / secs[2]);
    print_stats(&stats[2]);
    printf("); replies %s\n", same ? "identical" : "DIFFERENT");
    for (int k = 0; k < 3; k++)
        free(out[k].v);
    tok_ids_free(&ids);
    glm_engine_close(e[0]);
    glm_engine_close(e[1]);
    return same ? 0 : 1;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: bench_cuda_spec MODEL_DIR [CONTEXT] [NEW] [DECODE_TOKENS]\n");
        return 2;
    }
    int ctx = argc > 2 ? atoi(argv[2]) : 32768, fresh = argc > 3 ? atoi(argv[3]) : 64;
    int decode = argc > 4 ? atoi(argv[4]) : 256;
    if (ctx < 16 || fresh < 1 || decode < 1) {
        fprintf(stderr, "bench_cuda_spec: CONTEXT must be at least 16, NEW and DECODE_TOKENS "
                        "positive\n");
        return 2;
    }
    int rc = bench_reuse(argv[1], ctx / 16 * 16, fresh);
    rc |= bench_decode(argv[1], "prose", prose, decode);
    rc |= bench_decode(argv[1], "code", code, decode);
    return rc;
}
