/* bench_spec.c: drafted decoding against plain decoding on the CPU engine, on the same machine in
 * the same run: decode tok/s per draft mode, the ratio to plain, acceptance per draft position,
 * and a check that every drafted reply equals the plain one. Usage: bench_spec MODEL_DIR [MAX]. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "session.h"
#include "spec.h"

/* Each workload's prompts run this many times per mode (the decode times add up). */
#define ROUNDS 5

typedef struct workload {
    const char *name;
    const char *prompts[6];
} workload;

/* The demo model was trained on tool tasks (structured, code-like replies: reasoning, a shell
 * command, its answer); the prose prompts are outside what it learned. */
static const workload workloads[] = {
    {"tool/code", {"How much is 731 + 86?", "Please calculate 178 times 40.",
                   "What day of the week is 2020-01-11?", "List the files in /tmp for me.",
                   "How much is 12 * 12 + 7?", "Count the lines of /etc/hostname."}},
    {"prose", {"Tell me a short story about a lighthouse keeper.",
               "Describe the sea on a windy morning.", "Why do people enjoy long walks?",
               "Write a few sentences about autumn leaves.", "What makes a good friend?",
               "Explain why the sky looks blue."}},
};

typedef struct collect {
    char text[16384];
    size_t len;
    glm_stats done;
} collect;

static int on_event(const glm_event *ev, void *user)
{
    collect *c = user;
    if ((ev->type == GLM_EV_CONTENT_DELTA || ev->type == GLM_EV_REASONING_DELTA ||
         ev->type == GLM_EV_TOOL_ARG_DELTA) &&
        c->len + ev->len < sizeof c->text) {
        memcpy(c->text + c->len, ev->text, ev->len);
        c->len += ev->len;
    }
    if (ev->type == GLM_EV_DONE)
        c->done = ev->stats;
    return 0;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

typedef struct result {
    int tokens;
    double decode_s;
    spec_stats spec;
} result;

static int run(const char *dir, int draft, const workload *w, int max_tokens, collect *out,
               result *r)
{
    glm_error err = {0};
    glm_engine_params p = {.model_dir = dir, .backend = GLM_BACKEND_CPU, .n_threads = 0,
                           .prompt_cache_bytes = -1, .draft = draft};
    glm_engine *e = glm_engine_open(&p, &err);
    if (!e) {
        fprintf(stderr, "bench_spec: %s\n", err.message);
        return -1;
    }
    memset(r, 0, sizeof *r);
    for (int j = 0; j < ROUNDS * 6; j++) {
        int i = j % 6;
        glm_session *s = glm_session_new(e, &err);
        glm_message m = {.role = GLM_ROLE_USER, .content = w->prompts[i]};
        glm_request rq = {.messages = &m, .n_messages = 1,
                          .sampling = {.temperature = 0, .top_p = 1, .max_tokens = max_tokens}};
        memset(&out[j], 0, sizeof out[j]);
        double t0 = now_s();
        glm_status st = s ? glm_generate(s, &rq, on_event, &out[j], &err) : GLM_ERR_NOMEM;
        double t1 = now_s();
        if (st) {
            fprintf(stderr, "bench_spec: %s\n", err.message);
            glm_session_free(s);
            glm_engine_close(e);
            return -1;
        }
        r->tokens += out[j].done.generated_tokens;
        r->decode_s += (t1 - t0) - out[j].done.ttft_s;
        const spec_stats *ss = glm_session_spec_stats(s);
        r->spec.windows += ss->windows;
        for (int k = 0; k < SPEC_MAX_DRAFT; k++) {
            r->spec.proposed[k] += ss->proposed[k];
            r->spec.accepted[k] += ss->accepted[k];
        }
        glm_session_free(s);
    }
    glm_engine_close(e);
    return 0;
}

/* The cost of a verifying forward of T rows against one decode step, on a 256-token context:
 * drafting pays when (1 + accepted drafts) exceeds it. */
static int window_costs(const char *dir)
{
    glm_error err = {0};
    glm_engine_params p = {.model_dir = dir, .backend = GLM_BACKEND_CPU, .prompt_cache_bytes = -1};
    glm_engine *e = glm_engine_open(&p, &err);
    glm_session *s = e ? glm_session_new(e, &err) : NULL;
    if (!s) {
        fprintf(stderr, "bench_spec: %s\n", err.message);
        glm_engine_close(e);
        return -1;
    }
    int V = glm_session_vocab(s), ctx = 256, reps = 20;
    int32_t ids[256 + SPEC_MAX_DRAFT + 1];
    for (int i = 0; i < ctx + SPEC_MAX_DRAFT + 1; i++)
        ids[i] = (i * 37) % 2000;
    float *rows = malloc((size_t)(SPEC_MAX_DRAFT + 1) * V * sizeof *rows);
    glm_status st = glm_session_feed(s, ids, ctx, NULL, &err);
    if (!st)
        st = glm_session_mark(s, &err);
    double step = 0;
    printf("verifying window of T rows, cost in decode steps (context %d):", ctx);
    for (int T = 1; !st && T <= SPEC_MAX_DRAFT + 1; T++) {
        double best = 1e9;
        for (int r = 0; !st && r < reps; r++) {
            double t0 = now_s();
            st = T == 1 ? glm_session_feed(s, ids + ctx, 1, NULL, &err)
                        : glm_session_verify(s, ids + ctx, T, rows, &err);
            double dt = now_s() - t0;
            best = dt < best ? dt : best;
            if (!st)
                st = glm_session_truncate(s, ctx, &err);
        }
        if (T == 1)
            step = best;
        printf(" T=%d %.2f", T, best / step);
    }
    printf(" (one step %.2f ms)\n", step * 1e3);
    free(rows);
    glm_session_free(s);
    glm_engine_close(e);
    if (st)
        fprintf(stderr, "bench_spec: %s\n", err.message);
    return st ? -1 : 0;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: bench_spec MODEL_DIR [MAX_TOKENS]\n");
        return 2;
    }
    int max_tokens = argc > 2 ? atoi(argv[2]) : 128;
    static collect plain[ROUNDS * 6], drafted[ROUNDS * 6];
    const char *mode_names[] = {"", "off", "copy", "mtp"};
    printf("%-10s %-5s %7s %9s %7s %8s  accepted/proposed at draft positions 1..8\n", "workload",
           "draft", "tokens", "decode/s", "ratio", "windows");
    if (window_costs(argv[1]))
        return 1;
    int mismatches = 0;
    for (size_t wi = 0; wi < sizeof workloads / sizeof *workloads; wi++) {
        result base;
        if (run(argv[1], SPEC_OFF, &workloads[wi], max_tokens, plain, &base))
            return 1;
        double base_rate = base.tokens / base.decode_s;
        printf("%-10s %-5s %7d %9.1f %7.3f %8s\n", workloads[wi].name, "off", base.tokens, base_rate,
               1.0, "-");
        for (int mode = SPEC_COPY; mode <= SPEC_MTP; mode++) {
            result r;
            if (run(argv[1], mode, &workloads[wi], max_tokens, drafted, &r))
                return 1;
            for (int i = 0; i < ROUNDS * 6; i++)
                if (plain[i].len != drafted[i].len ||
                    memcmp(plain[i].text, drafted[i].text, plain[i].len) != 0) {
                    mismatches++;
                    fprintf(stderr, "bench_spec: %s reply %d differs with %s drafts\n",
                            workloads[wi].name, i % 6, mode_names[mode]);
                }
            double rate = r.tokens / r.decode_s;
            printf("%-10s %-5s %7d %9.1f %7.3f %8lld ", workloads[wi].name, mode_names[mode],
                   r.tokens, rate, rate / base_rate, (long long)r.spec.windows);
            for (int k = 0; k < SPEC_MAX_DRAFT; k++)
                printf(" %lld/%lld", (long long)r.spec.accepted[k], (long long)r.spec.proposed[k]);
            printf("\n");
        }
    }
    printf("replies identical to plain decoding: %s\n", mismatches ? "NO" : "yes");
    return mismatches ? 1 : 0;
}
