/* accuracy.c: what the lossy modes cost the demo model (CPU, teacher-forced): over held-out
 * conversations (heldout_text.py), per token KL(f32 || mode) and top-1 agreement with the exact run,
 * for the fp8 and bf16 caches, q4 dense at 32 and 64 values a scale with fp16 or float scales, and
 * the pairings CUDA runs. Usage: accuracy MODEL_DIR HELDOUT.jsonl [MIN_TOKENS [THREADS]] */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "model/model.h"
#include "model/numfmt.h"
#include "text/tokenizer.h"

typedef struct acc_mode {
    const char *name;
    backend_settings s;
    engine_backend be;
    void *state;
    void *prefix_snap;
    size_t prefix_bytes;
    double *kl; /* per scored token */
    long top1;
} acc_mode;

#define KV(kv) .kv_cache = GLM_KV_CACHE_##kv
#define MODE(nm, kv, dn, rule, group, f32s)                                                        \
    {.name = nm, .s = {.context = 1 << 16, KV(kv), .dense = GLM_DENSE_##dn, .fp8_rule = rule,      \
                       .q4_group = group, .q4_f32_scale = f32s}}

static acc_mode modes[] = {
    MODE("f32 (the reference)", F32, BF16, 0, 0, 0),
    MODE("fp8 cache (CUDA's default)", FP8, BF16, 0, 0, 0),
    MODE("bf16 cache", BF16, BF16, 0, 0, 0),
    MODE("fp8 cache, exact f32 scale", FP8, BF16, NUMFMT_FP8_EXACT, 0, 0),
    MODE("q4-32 dense, fp16 scale (CUDA's)", F32, Q4, 0, 32, 0),
    MODE("q4-32 dense, f32 scale", F32, Q4, 0, 32, 1),
    MODE("q4-64 dense, fp16 scale", F32, Q4, 0, 64, 0),
    MODE("q4-64 dense, f32 scale", F32, Q4, 0, 64, 1),
    MODE("fp8 cache + q4-32 dense", FP8, Q4, 0, 32, 0),
    MODE("bf16 cache + q4-32 dense", BF16, Q4, 0, 32, 0),
};
#define N_MODES (int)(sizeof modes / sizeof modes[0])

static void die(const char *what, const char *why)
{
    fprintf(stderr, "accuracy: %s: %s\n", what, why);
    exit(1);
}

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p)
        die("malloc", "out of memory");
    return p;
}

/* log-softmax of x (n) into out, in double. */
static void log_softmax(const float *x, int n, double *out)
{
    double mx = -INFINITY, sum = 0;
    for (int i = 0; i < n; i++)
        mx = fmax(mx, x[i]);
    for (int i = 0; i < n; i++)
        sum += exp((double)x[i] - mx);
    double lse = mx + log(sum);
    for (int i = 0; i < n; i++)
        out[i] = (double)x[i] - lse;
}

static int argmax(const float *x, int n)
{
    int b = 0;
    for (int i = 1; i < n; i++)
        b = x[i] > x[b] ? i : b;
    return b;
}

static void encode(const tok_tokenizer *tok, const char *text, tok_ids *ids)
{
    glm_error err = {0};
    if (tok_encode(tok, text, strlen(text), ids, &err))
        die("tokenizing", err.message);
}

/* Each mode's backend and state, with the shared prefix prefilled and kept as a snapshot. */
static void open_modes(const glm_model *m, int threads, const tok_ids *prefix)
{
    glm_error err = {0};
    for (int k = 0; k < N_MODES; k++) {
        acc_mode *a = &modes[k];
        if (backend_open_cpu_with(m, threads, &a->s, &a->be, &err) ||
            !(a->state = a->be.ops->state_new(a->be.impl, &err)) ||
            a->be.ops->prefill(a->be.impl, a->state, prefix->v, (int)prefix->n, NULL, 0, &err))
            die(a->name, err.message);
        a->prefix_bytes = a->be.ops->snapshot_size(a->state);
        a->prefix_snap = xmalloc(a->prefix_bytes);
        if (a->be.ops->snapshot_save(a->state, a->prefix_snap, a->prefix_bytes, &err))
            die(a->name, err.message);
    }
}

/* The logits after each token of ids but the last (T - 1 rows) predict the next token: the
 * prefix's last row is left out, the conversation's rows scored. */
static void run_mode(acc_mode *a, const tok_ids *ids, float *logits)
{
    glm_error err = {0};
    if (a->be.ops->snapshot_load(a->state, a->prefix_snap, a->prefix_bytes, &err) ||
        a->be.ops->prefill(a->be.impl, a->state, ids->v, (int)ids->n, logits, 1, &err))
        die(a->name, err.message);
}

static int cmp_double(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: accuracy MODEL_DIR HELDOUT.jsonl [MIN_TOKENS [THREADS]]\n");
        return 2;
    }
    long min_tokens = argc > 3 ? atol(argv[3]) : 2000;
    int threads = argc > 4 ? atoi(argv[4]) : 0;
    glm_error err = {0};
    glm_model *m = glm_model_open(argv[1], &err);
    if (!m)
        die(argv[1], err.message);
    char path[4096];
    snprintf(path, sizeof path, "%s/tokenizer.json", argv[1]);
    tok_tokenizer *tok = tok_load(path, &err);
    if (!tok)
        die(path, err.message);
    FILE *f = fopen(argv[2], "r");
    if (!f)
        die(argv[2], "cannot open");
    static char line[1 << 20];
    if (!fgets(line, sizeof line, f))
        die(argv[2], "empty");
    cJSON *j = cJSON_Parse(line);
    const cJSON *pf = cJSON_GetObjectItemCaseSensitive(j, "prefix");
    if (!cJSON_IsString(pf))
        die(argv[2], "line 1 is not {\"prefix\": TEXT}");
    tok_ids prefix = {0};
    encode(tok, pf->valuestring, &prefix);
    cJSON_Delete(j);
    open_modes(m, threads, &prefix);
    int V = m->cfg.vocab_size;
    for (int k = 0; k < N_MODES; k++)
        modes[k].kl = xmalloc((size_t)(min_tokens + 4096) * sizeof(double));
    double *lp = xmalloc((size_t)V * sizeof *lp), *lq = xmalloc((size_t)V * sizeof *lq);
    long scored = 0;
    int convs = 0;
    while (scored < min_tokens && fgets(line, sizeof line, f)) {
        j = cJSON_Parse(line);
        const cJSON *tx = cJSON_GetObjectItemCaseSensitive(j, "text");
        if (!cJSON_IsString(tx))
            die(argv[2], "a line is not {\"text\": TEXT}");
        tok_ids ids = {0};
        encode(tok, tx->valuestring, &ids);
        cJSON_Delete(j);
        int T = (int)ids.n, rows = T - 1; /* the last token predicts nothing scored */
        if (rows < 1 || scored + rows > min_tokens + 4096)
            break;
        float *ref = xmalloc((size_t)T * V * sizeof *ref), *got = xmalloc((size_t)T * V * sizeof *got);
        run_mode(&modes[0], &ids, ref);
        for (int k = 1; k < N_MODES; k++) {
            acc_mode *a = &modes[k];
            run_mode(a, &ids, got);
            for (int t = 0; t < rows; t++) {
                const float *p = ref + (size_t)t * V, *q = got + (size_t)t * V;
                log_softmax(p, V, lp);
                log_softmax(q, V, lq);
                double kl = 0;
                for (int v = 0; v < V; v++)
                    kl += exp(lp[v]) * (lp[v] - lq[v]);
                a->kl[scored + t] = kl > 0 ? kl : 0; /* rounding can take a zero just below */
                a->top1 += argmax(p, V) == argmax(q, V);
            }
        }
        scored += rows;
        convs++;
        free(ref);
        free(got);
        tok_ids_free(&ids);
        fprintf(stderr, "\r%d conversations, %ld tokens scored", convs, scored);
    }
    fprintf(stderr, "\n");
    printf("%s: %ld tokens of %d held-out conversations (after the %zu-token system prompt), "
           "teacher-forced, CPU backend\n", argv[1], scored, convs, prefix.n);
    printf("%-34s %12s %12s %12s %9s\n", "mode", "KL mean", "KL p99", "KL max", "top-1");
    for (int k = 1; k < N_MODES; k++) {
        acc_mode *a = &modes[k];
        double mean = 0;
        for (long i = 0; i < scored; i++)
            mean += a->kl[i];
        mean /= (double)scored;
        qsort(a->kl, (size_t)scored, sizeof *a->kl, cmp_double);
        double p99 = a->kl[(size_t)floor(0.99 * (double)(scored - 1))], mx = a->kl[scored - 1];
        printf("%-34s %12.3e %12.3e %12.3e %8.2f%%\n", a->name, mean, p99, mx,
               100.0 * (double)a->top1 / (double)scored);
    }
    fclose(f);
    return 0;
}
