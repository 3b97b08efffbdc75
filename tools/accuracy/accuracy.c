/* accuracy.c: what the lossy modes cost the demo model (CPU, teacher-forced): over held-out
 * conversations (heldout_text.py), per token KL(f32 || mode) and top-1 agreement with the exact
 * run, for the fp8 and bf16 caches and the variants of 4-bit dense weights (requant.h), GPTQ ones
 * calibrated on other conversations (calib_text.py). Usage: see usage() below. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend.h"
#include "cpu/ops.h"
#include "cpu/requant.h"
#include "model/model.h"
#include "model/numfmt.h"
#include "text/tokenizer.h"

typedef struct acc_mode {
    const char *name;
    backend_settings s;
    int requant;  /* 1: the dense weights are rq's view, made by cpu_requant_make_with */
    cpu_requant_opts o;
    int gptq;     /* 1: o.hessian is the calibration's */
    cpu_requant *rq;
    engine_backend be;
    void *state;
    void *prefix_snap;
    size_t prefix_bytes;
    double *kl; /* per scored token */
    long top1;
    int selected;
    const char *other_dir; /* -x: the checkpoint this mode runs instead of MODEL_DIR's */
} acc_mode;

#define KV(kv) .kv_cache = GLM_KV_CACHE_##kv
#define CACHE(nm, kv, rule)                                                                        \
    {.name = nm, .s = {.context = 1 << 16, KV(kv), .dense = GLM_DENSE_BF16, .fp8_rule = rule}}
/* a q4 variant on the f32 (or the named) cache: numfmt_q4 fields, then requant options */
#define Q4(nm, kv, g, f32s, sc, as, ms, head, kvb, gp)                                             \
    {.name = nm, .s = {.context = 1 << 16, KV(kv), .dense = GLM_DENSE_BF16}, .requant = 1,         \
     .o = {.q = {.group = g, .f16_scale = !(f32s), .scales = sc, .asym = as, .mse = ms},           \
           .keep_head = head, .quant_kv_b = kvb},                                                  \
     .gptq = gp}
#define U8_256 NUMFMT_Q4_SCALES_U8_256
#define U8_ROW NUMFMT_Q4_SCALES_U8_ROW

static acc_mode modes[] = {
    CACHE("f32 (the reference)", F32, 0),
    CACHE("fp8 cache (CUDA's cache)", FP8, 0),
    CACHE("bf16 cache", BF16, 0),
    CACHE("fp8 cache, exact f32 scale", FP8, NUMFMT_FP8_EXACT),
    /* cuda_gemm = onepart: the conversations start off the 16-token grid (after the shared
     * prefix), where the rows rounded depend on the CUDA chunk: the plan's pick on an H200 */
    {.name = "one fp16 part (cuda_gemm = onepart)",
     .s = {.context = 1 << 16, KV(F32), .dense = GLM_DENSE_BF16,
           .cuda = {.gemm = GLM_CUDA_GEMM_ONEPART, .chunk = 16384}}},
    {.name = "fp8 cache + one fp16 part (CUDA's default)",
     .s = {.context = 1 << 16, KV(FP8), .dense = GLM_DENSE_BF16,
           .cuda = {.gemm = GLM_CUDA_GEMM_ONEPART, .chunk = 16384}}},
    Q4("q4-32 fp16 scale (CUDA's)", F32, 32, 0, 0, 0, 0, 0, 0, 0),
    Q4("q4-32 f32 scale", F32, 32, 1, 0, 0, 0, 0, 0, 0),
    Q4("q4-64 fp16 scale", F32, 64, 0, 0, 0, 0, 0, 0, 0),
    Q4("q4-64 f32 scale", F32, 64, 1, 0, 0, 0, 0, 0, 0),
    Q4("q4-32 u8 scale, fp16 per 256", F32, 32, 0, U8_256, 0, 0, 0, 0, 0),
    Q4("q4-64 u8 scale, fp16 per 256", F32, 64, 0, U8_256, 0, 0, 0, 0, 0),
    Q4("q4-32 u8 scale, f32 per row", F32, 32, 0, U8_ROW, 0, 0, 0, 0, 0),
    Q4("q4-32 asym fp16", F32, 32, 0, 0, 1, 0, 0, 0, 0),
    Q4("q4-64 asym fp16", F32, 64, 0, 0, 1, 0, 0, 0, 0),
    Q4("q4-32 fp16 mse", F32, 32, 0, 0, 0, 1, 0, 0, 0),
    Q4("q4-64 fp16 mse", F32, 64, 0, 0, 0, 1, 0, 0, 0),
    Q4("q4-64 u8/256 mse", F32, 64, 0, U8_256, 0, 1, 0, 0, 0),
    Q4("q4-32 asym mse", F32, 32, 0, 0, 1, 1, 0, 0, 0),
    Q4("q4-64 asym mse", F32, 64, 0, 0, 1, 1, 0, 0, 0),
    Q4("q4-32 fp16 gptq", F32, 32, 0, 0, 0, 0, 0, 0, 1),
    Q4("q4-64 fp16 gptq", F32, 64, 0, 0, 0, 0, 0, 0, 1),
    Q4("q4-64 fp16 mse gptq", F32, 64, 0, 0, 0, 1, 0, 0, 1),
    Q4("q4-64 u8/256 mse gptq", F32, 64, 0, U8_256, 0, 1, 0, 0, 1),
    Q4("q4-64 asym mse gptq", F32, 64, 0, 0, 1, 1, 0, 0, 1),
    Q4("q4-32 + kv_b q4", F32, 32, 0, 0, 0, 0, 0, 1, 0),
    Q4("q4-32, head bf16", F32, 32, 0, 0, 0, 0, 1, 0, 0),
    Q4("q4-64, head bf16", F32, 64, 0, 0, 0, 0, 1, 0, 0),
    Q4("q4-64 mse gptq, head bf16", F32, 64, 0, 0, 0, 1, 1, 0, 1),
    Q4("q4-64 asym mse gptq, head bf16", F32, 64, 0, 0, 1, 1, 1, 0, 1),
    Q4("fp8 cache + q4-32 (CUDA's)", FP8, 32, 0, 0, 0, 0, 0, 0, 0),
    Q4("bf16 cache + q4-32", BF16, 32, 0, 0, 0, 0, 0, 0, 0),
    /* slots for -x: another checkpoint of the model (experts requantized) on the f32 path */
    {0}, {0}, {0}, {0}, {0}, {0}, {0}, {0},
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

/* ---- calibration Hessians: every product of the f32 run while collecting adds x x^T for its
 * matrix (the link wraps cpu_matmul, tools/local.mk) ------------------------------------------ */

typedef struct hess {
    const void *data; /* the matrix's stored values: its identity in every view of the model */
    int64_t cols;
    double *H; /* lower triangle while collecting; full once finished */
    long rows_seen;
} hess;

static hess *hessians;
static int n_hessians, cap_hessians, collecting;

int __real_cpu_matmul(cpu_pool *pool, const glm_weight *w, const float *x, int T, float *y);
int __wrap_cpu_matmul(cpu_pool *pool, const glm_weight *w, const float *x, int T, float *y);

static hess *hessian_of(const void *data, int64_t cols, int create)
{
    for (int i = 0; i < n_hessians; i++)
        if (hessians[i].data == data)
            return &hessians[i];
    if (!create)
        return NULL;
    if (n_hessians == cap_hessians) {
        cap_hessians = cap_hessians ? 2 * cap_hessians : 64;
        hessians = realloc(hessians, (size_t)cap_hessians * sizeof *hessians);
        if (!hessians)
            die("calibration", "out of memory");
    }
    hess *h = &hessians[n_hessians++];
    *h = (hess){.data = data, .cols = cols, .H = calloc((size_t)(cols * cols), sizeof(double))};
    if (!h->H)
        die("calibration", "out of memory");
    return h;
}

int __wrap_cpu_matmul(cpu_pool *pool, const glm_weight *w, const float *x, int T, float *y)
{
    if (collecting && w->kind == GLM_W_PLAIN) {
        hess *h = hessian_of(w->data, w->cols, 1);
        int64_t n = w->cols;
        for (int t = 0; t < T; t++) {
            const float *xt = x + (size_t)t * n;
            for (int64_t i = 0; i < n; i++) {
                double xi = xt[i], *row = h->H + i * n;
                for (int64_t j = 0; j <= i; j++)
                    row[j] += xi * xt[j];
            }
        }
        h->rows_seen += T;
    }
    return __real_cpu_matmul(pool, w, x, T, y);
}

static const double *calibration_hessian(void *ctx, const glm_weight *w)
{
    (void)ctx;
    hess *h = hessian_of(w->data, w->cols, 0);
    return h && h->rows_seen > 0 && h->cols == w->cols ? h->H : NULL;
}

static void encode(const tok_tokenizer *tok, const char *text, tok_ids *ids)
{
    glm_error err = {0};
    if (tok_encode(tok, text, strlen(text), ids, &err))
        die("tokenizing", err.message);
}

/* A jsonl of heldout_text.py's form: line 1's prefix, tokenized into prefix. */
static FILE *open_texts(const char *path, const tok_tokenizer *tok, tok_ids *prefix)
{
    FILE *f = fopen(path, "r");
    if (!f)
        die(path, "cannot open");
    static char line[1 << 20];
    if (!fgets(line, sizeof line, f))
        die(path, "empty");
    cJSON *j = cJSON_Parse(line);
    const cJSON *pf = cJSON_GetObjectItemCaseSensitive(j, "prefix");
    if (!cJSON_IsString(pf))
        die(path, "line 1 is not {\"prefix\": TEXT}");
    encode(tok, pf->valuestring, prefix);
    cJSON_Delete(j);
    return f;
}

/* The next conversation's tokens into ids; 0 at the end of the file. */
static int next_text(FILE *f, const char *path, const tok_tokenizer *tok, tok_ids *ids)
{
    static char line[1 << 20];
    if (!fgets(line, sizeof line, f))
        return 0;
    cJSON *j = cJSON_Parse(line);
    const cJSON *tx = cJSON_GetObjectItemCaseSensitive(j, "text");
    if (!cJSON_IsString(tx))
        die(path, "a line is not {\"text\": TEXT}");
    encode(tok, tx->valuestring, ids);
    cJSON_Delete(j);
    return 1;
}

/* The Hessians of the f32 run over every token of the calibration file: the prefix once, then each
 * conversation after it (from the prefix's snapshot), finished to full symmetric matrices. */
static void calibrate(const glm_model *m, int threads, const char *path, const tok_tokenizer *tok)
{
    glm_error err = {0};
    engine_backend be;
    void *st;
    if (backend_open_cpu_with(m, threads, &modes[0].s, &be, &err) ||
        !(st = be.ops->state_new(be.impl, &err)))
        die("calibration", err.message);
    tok_ids prefix = {0}, ids = {0};
    FILE *f = open_texts(path, tok, &prefix);
    size_t V = (size_t)m->cfg.vocab_size;
    float *logits = xmalloc(prefix.n * V * sizeof *logits);
    collecting = 1;
    /* every row's logits, so that the LM head sees every token's input */
    if (be.ops->prefill(be.impl, st, prefix.v, (int)prefix.n, logits, 1, &err))
        die("calibration", err.message);
    size_t snap_bytes = be.ops->snapshot_size(st);
    void *snap = xmalloc(snap_bytes);
    if (be.ops->snapshot_save(st, snap, snap_bytes, &err))
        die("calibration", err.message);
    long tokens = (long)prefix.n;
    int convs = 0;
    while (next_text(f, path, tok, &ids)) {
        free(logits);
        logits = xmalloc(ids.n * V * sizeof *logits);
        if (be.ops->snapshot_load(st, snap, snap_bytes, &err) ||
            be.ops->prefill(be.impl, st, ids.v, (int)ids.n, logits, 1, &err))
            die("calibration", err.message);
        tokens += (long)ids.n;
        convs++;
        tok_ids_free(&ids);
        fprintf(stderr, "\rcalibration: %d conversations, %ld tokens", convs, tokens);
    }
    collecting = 0;
    fprintf(stderr, "\n");
    fclose(f);
    free(snap);
    free(logits);
    be.ops->state_free(st);
    be.ops->close(be.impl);
    for (int k = 0; k < n_hessians; k++) {
        int64_t n = hessians[k].cols;
        for (int64_t i = 0; i < n; i++)
            for (int64_t j = 0; j < i; j++)
                hessians[k].H[j * n + i] = hessians[k].H[i * n + j];
    }
    printf("calibration: %ld tokens (the %zu-token system prompt once, then %d conversations) of "
           "%s, f32 run; Hessians of %d matrices\n",
           tokens, prefix.n, convs, path, n_hessians);
    tok_ids_free(&prefix);
}

/* Each selected mode's backend and state, the shared prefix prefilled and kept as a snapshot. */
static void open_modes(const glm_model *m, int threads, const tok_ids *prefix)
{
    glm_error err = {0};
    for (int k = 0; k < N_MODES; k++) {
        acc_mode *a = &modes[k];
        if (!a->selected)
            continue;
        const glm_model *mm = m;
        if (a->other_dir && !(mm = glm_model_open(a->other_dir, &err)))
            die(a->other_dir, err.message);
        if (a->other_dir && mm->cfg.vocab_size != m->cfg.vocab_size)
            die(a->other_dir, "has another vocabulary size than MODEL_DIR; -x takes the "
                              "same model");
        if (a->requant) {
            if (a->gptq)
                a->o.hessian = calibration_hessian;
            if (cpu_requant_make_with(m, &a->o, &a->rq, &err))
                die(a->name, err.message);
            mm = &a->rq->model;
        }
        if (backend_open_cpu_with(mm, threads, &a->s, &a->be, &err) ||
            !(a->state = a->be.ops->state_new(a->be.impl, &err)) ||
            a->be.ops->prefill(a->be.impl, a->state, prefix->v, (int)prefix->n, NULL, 0, &err))
            die(a->name, err.message);
        a->prefix_bytes = a->be.ops->snapshot_size(a->state);
        a->prefix_snap = xmalloc(a->prefix_bytes);
        if (a->be.ops->snapshot_save(a->state, a->prefix_snap, a->prefix_bytes, &err))
            die(a->name, err.message);
    }
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

/* Marks the modes whose name holds one of the comma-separated parts of pattern (all when NULL);
 * the reference always. */
static void select_modes(const char *pattern, int have_calibration)
{
    for (int k = 0; k < N_MODES; k++) {
        acc_mode *a = &modes[k];
        if (!a->name)
            continue;
        a->selected = k == 0 || !pattern || a->other_dir;
        for (const char *p = pattern; p && *p && !a->selected;) {
            size_t len = strcspn(p, ",");
            char part[128];
            snprintf(part, sizeof part, "%.*s", (int)len, p);
            a->selected = len > 0 && strstr(a->name, part) != NULL;
            p += len + (p[len] == ',');
        }
        if (a->selected && a->gptq && !have_calibration) {
            fprintf(stderr, "accuracy: %s needs -c CALIB.jsonl (calib_text.py); left out\n",
                    a->name);
            a->selected = 0;
        }
    }
}

/* A -x mode: DIR's checkpoint, f32 cache and its dense weights as stored, in a free slot. */
static void add_other(const char *dir, int i)
{
    int slot = N_MODES - 8 + i;
    if (i >= 8)
        die(dir, "more than 8 -x checkpoints");
    static char names[8][64];
    snprintf(names[i], sizeof names[i], "%.60s", dir);
    modes[slot] = (acc_mode){.name = names[i], .s = modes[0].s, .other_dir = dir};
}

static void usage(void)
{
    fprintf(stderr, "usage: accuracy [-c CALIB.jsonl] [-m NAME,NAME...] [-x DIR]... MODEL_DIR "
                    "HELDOUT.jsonl [MIN_TOKENS [THREADS]]\n"
                    "  -c  calibration conversations for the GPTQ modes (calib_text.py)\n"
                    "  -m  only the modes whose names contain one of these parts\n"
                    "  -x  also the checkpoint DIR (the same model otherwise quantized) on the f32 "
                    "path against MODEL_DIR's (up to 8)\n");
    exit(2);
}

static void print_table(long scored)
{
    printf("%-34s %5s %9s %9s %10s %10s %10s %8s\n", "mode", "bits", "dense MB", "head MB",
           "KL mean", "KL p99", "KL max", "top-1");
    for (int k = 1; k < N_MODES; k++) {
        acc_mode *a = &modes[k];
        if (!a->selected)
            continue;
        double mean = 0;
        for (long i = 0; i < scored; i++)
            mean += a->kl[i];
        mean /= (double)scored;
        qsort(a->kl, (size_t)scored, sizeof *a->kl, cmp_double);
        double p99 = a->kl[(size_t)floor(0.99 * (double)(scored - 1))], mx = a->kl[scored - 1];
        char bits[16] = "-", dense[16] = "-", head[16] = "-";
        if (a->rq) {
            snprintf(bits, sizeof bits, "%.3g", numfmt_q4_bits(&a->o.q, 256));
            snprintf(dense, sizeof dense, "%.2f", (a->rq->dense_bytes - a->rq->head_bytes) / 1e6);
            snprintf(head, sizeof head, "%.2f", a->rq->head_bytes / 1e6);
        }
        printf("%-34s %5s %9s %9s %10.3e %10.3e %10.3e %7.2f%%\n", a->name, bits, dense, head,
               mean, p99, mx, 100.0 * (double)a->top1 / (double)scored);
    }
}

int main(int argc, char **argv)
{
    const char *calib = NULL, *pattern = NULL;
    int opt;
    int n_other = 0;
    while ((opt = getopt(argc, argv, "c:m:x:")) != -1) {
        if (opt == 'c')
            calib = optarg;
        else if (opt == 'x')
            add_other(optarg, n_other++);
        else if (opt == 'm')
            pattern = optarg;
        else
            usage();
    }
    if (argc - optind < 2)
        usage();
    const char *model_dir = argv[optind], *heldout = argv[optind + 1];
    long min_tokens = argc - optind > 2 ? atol(argv[optind + 2]) : 2000;
    int threads = argc - optind > 3 ? atoi(argv[optind + 3]) : 0;
    if (min_tokens < 1)
        die("MIN_TOKENS", "must be a positive count of tokens");
    select_modes(pattern, calib != NULL);
    glm_error err = {0};
    glm_model *m = glm_model_open(model_dir, &err);
    if (!m)
        die(model_dir, err.message);
    char path[4096];
    snprintf(path, sizeof path, "%s/tokenizer.json", model_dir);
    tok_tokenizer *tok = tok_load(path, &err);
    if (!tok)
        die(path, err.message);
    int any_gptq = 0;
    for (int k = 0; k < N_MODES; k++)
        any_gptq |= modes[k].selected && modes[k].gptq;
    if (any_gptq)
        calibrate(m, threads, calib, tok);
    tok_ids prefix = {0};
    FILE *f = open_texts(heldout, tok, &prefix);
    open_modes(m, threads, &prefix);
    int V = m->cfg.vocab_size;
    for (int k = 0; k < N_MODES; k++)
        modes[k].kl = xmalloc((size_t)(min_tokens + 4096) * sizeof(double));
    double *lq = xmalloc((size_t)V * sizeof *lq);
    long scored = 0;
    int convs = 0;
    tok_ids ids = {0};
    while (scored < min_tokens && next_text(f, heldout, tok, &ids)) {
        int T = (int)ids.n, rows = T - 1; /* the last token predicts nothing scored */
        if (rows < 1 || scored + rows > min_tokens + 4096)
            break;
        float *ref = xmalloc((size_t)T * V * sizeof *ref);
        float *got = xmalloc((size_t)T * V * sizeof *got);
        double *lp = xmalloc((size_t)rows * V * sizeof *lp); /* the f32 run's log-probabilities */
        double *pp = xmalloc((size_t)rows * V * sizeof *pp); /* and probabilities */
        run_mode(&modes[0], &ids, ref);
        for (size_t i = 0; i < (size_t)rows * V; i += (size_t)V) {
            log_softmax(ref + i, V, lp + i);
            for (int v = 0; v < V; v++)
                pp[i + v] = exp(lp[i + v]);
        }
        for (int k = 1; k < N_MODES; k++) {
            acc_mode *a = &modes[k];
            if (!a->selected)
                continue;
            run_mode(a, &ids, got);
            for (int t = 0; t < rows; t++) {
                const float *q = got + (size_t)t * V;
                const double *lpt = lp + (size_t)t * V, *ppt = pp + (size_t)t * V;
                log_softmax(q, V, lq);
                double kl = 0;
                for (int v = 0; v < V; v++)
                    kl += ppt[v] * (lpt[v] - lq[v]);
                a->kl[scored + t] = kl > 0 ? kl : 0; /* rounding can take a zero just below */
                a->top1 += argmax(ref + (size_t)t * V, V) == argmax(q, V);
            }
        }
        scored += rows;
        convs++;
        free(ref);
        free(got);
        free(lp);
        free(pp);
        tok_ids_free(&ids);
        fprintf(stderr, "\r%d conversations, %ld tokens scored", convs, scored);
    }
    fprintf(stderr, "\n");
    if (scored < 1)
        die(heldout, "no conversation to score");
    printf("%s: %ld tokens of %d held-out conversations (after the %zu-token system prompt), "
           "teacher-forced, CPU backend; bits a weight of the requantized rows of 256, the dense "
           "roles' MB (kv_b included) read a token besides the LM head's\n",
           model_dir, scored, convs, prefix.n);
    print_table(scored);
    fclose(f);
    return 0;
}
