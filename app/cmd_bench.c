/* cmd_bench.c: `glmchat bench` (CLI.md): measures the machine's ceilings and then the model's
 * prefill and decode in the same run, and prints each as a ratio to its ceiling. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include "app/bench_ceiling.h"
#include "app/commands.h"
#include "app/config.h"
#include "app/engine_log.h"
#include "app/demo_model.h"
#include "engine/glm.h"
#include "engine/glm_tokens.h"

static const char bench_usage[] =
    "Usage: glmchat bench [--model DIR] [--prompt N] [--tokens N] [--threads N]\n"
    "Measures, in one run, the machine's ceilings (memory read bandwidth over 512 MiB, the float\n"
    "multiply-add rate) and then the model on the CPU backend: a prefill of N prompt tokens\n"
    "(default 64) and a decode of M tokens one at a time (--tokens, default 16), on seeded\n"
    "random token ids. Prints a table: prefill FLOP rate against the FMA ceiling, decode time\n"
    "against the floor (the bytes one token must read / the measured read bandwidth).\n"
    "Without --model it measures the embedded demo model.\n";

typedef struct bench_opts {
    const char *model;
    int prompt, tokens, threads;
} bench_opts;

typedef struct bench_result {
    double read_bw, fma, prefill_s, decode_s; /* decode_s: median seconds per token */
    double step_bytes, step_flops; /* one decode token at the decode's middle context */
    int vocab;
} bench_result;

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void random_ids(int32_t *ids, int n, int vocab, unsigned seed)
{
    unsigned long long s = seed * 6364136223846793005ULL + 1442695040888963407ULL;
    for (int i = 0; i < n; i++) {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        ids[i] = (int32_t)((s >> 33) % (unsigned long long)vocab);
    }
}

static int measure_model(glm_engine *e, const bench_opts *o, bench_result *r)
{
    glm_error err = {0};
    glm_session *s = glm_session_new(e, &err);
    if (!s)
        return cli_runtime_error("%s", err.message);
    int n = o->prompt + o->tokens, rc = 0;
    int32_t *ids = malloc((size_t)n * sizeof *ids);
    double *step = malloc((size_t)o->tokens * sizeof *step);
    if (!ids || !step) {
        rc = cli_runtime_error("out of memory for the benchmark's tokens");
        goto out;
    }
    random_ids(ids, n, r->vocab, 1);
    double t0 = bench_now();
    if (glm_session_feed(s, ids, o->prompt, NULL, &err)) {
        rc = cli_runtime_error("prefill: %s", err.message);
        goto out;
    }
    r->prefill_s = bench_now() - t0;
    for (int i = 0; i < o->tokens; i++) {
        t0 = bench_now();
        if (glm_session_feed(s, ids + o->prompt + i, 1, NULL, &err)) {
            rc = cli_runtime_error("decode: %s", err.message);
            goto out;
        }
        step[i] = bench_now() - t0;
    }
    qsort(step, (size_t)o->tokens, sizeof *step, cmp_double);
    r->decode_s = step[o->tokens / 2];
out:
    free(ids);
    free(step);
    glm_session_free(s);
    return rc;
}

static void cpu_name(char *buf, size_t n)
{
    snprintf(buf, n, "unknown CPU");
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[512];
    while (f && fgets(line, sizeof line, f)) {
        char *colon = strchr(line, ':');
        if (strncmp(line, "model name", 10) == 0 && colon) {
            snprintf(buf, n, "%s", colon + 2);
            buf[strcspn(buf, "\n")] = 0;
            break;
        }
    }
    if (f)
        fclose(f);
}

static void print_table(const bench_opts *o, const char *model, int threads, const bench_result *r)
{
    char cpu[256], day[32];
    struct utsname u;
    time_t now = time(NULL);
    strftime(day, sizeof day, "%Y-%m-%d %H:%M UTC", gmtime(&now));
    cpu_name(cpu, sizeof cpu);
    if (uname(&u) != 0)
        snprintf(u.nodename, sizeof u.nodename, "?");
    printf("glmchat bench: %s, cpu backend, %d threads; %s (%s), %s\n", model, threads, cpu,
           u.nodename, day);
    double bytes = r->step_bytes;
    double floor_s = bytes / r->read_bw;
    double prefill_rate = r->step_flops * o->prompt / r->prefill_s;
    char prefill[64], prefill_ceil[64], decode[64], floor_txt[64], label[64];
    snprintf(prefill, sizeof prefill, "%.0f tok/s, %.2f GFLOP/s", o->prompt / r->prefill_s,
             prefill_rate / 1e9);
    snprintf(prefill_ceil, sizeof prefill_ceil, "%.2f GFLOP/s", r->fma / 1e9);
    snprintf(decode, sizeof decode, "%.3f ms/token", r->decode_s * 1e3);
    snprintf(floor_txt, sizeof floor_txt, "%.3f ms floor, %.3f MB/token", floor_s * 1e3, bytes / 1e6);
    printf("%-24s %-28s %-32s %s\n", "what", "measured", "ceiling (this run)", "ratio");
    printf("%-24s %.2f GB/s%-18s %-32s %s\n", "memory read", r->read_bw / 1e9, "", "-", "-");
    printf("%-24s %.2f GFLOP/s%-15s %-32s %s\n", "float multiply-add", r->fma / 1e9, "", "-", "-");
    snprintf(label, sizeof label, "prefill %d tokens", o->prompt);
    printf("%-24s %-28s %-32s %.3f\n", label, prefill, prefill_ceil, prefill_rate / r->fma);
    snprintf(label, sizeof label, "decode, median of %d", o->tokens);
    printf("%-24s %-28s %-32s %.3f\n", label, decode, floor_txt, floor_s / r->decode_s);
}

static int parse_count(const char *option, const char *v, int lo, int *out)
{
    long long x;
    int rc = cli_int_option("bench", option, v, lo, 1 << 20, &x);
    if (!rc)
        *out = (int)x;
    return rc;
}

static int parse_opts(int argc, char **argv, const cli_globals *g, bench_opts *o)
{
    static const struct option opts[] = {
        {"model", required_argument, NULL, 'm'},   {"prompt", required_argument, NULL, 'p'},
        {"tokens", required_argument, NULL, 't'},  {"threads", required_argument, NULL, 'j'},
        {"help", no_argument, NULL, 'h'},          {NULL, 0, NULL, 0},
    };
    *o = (bench_opts){.model = g->model_dir, .prompt = 64, .tokens = 16, .threads = 0};
    int c, rc = 0;
    optind = 1;
    while (!rc && (c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'm': o->model = optarg; break;
        case 'p': rc = parse_count("--prompt", optarg, 1, &o->prompt); break;
        case 't': rc = parse_count("--tokens", optarg, 1, &o->tokens); break;
        case 'j': rc = parse_count("--threads", optarg, 0, &o->threads); break;
        case 'h': fputs(bench_usage, stdout); return -1;
        default: return cli_usage_error("bench", "bad option (see glmchat bench --help)");
        }
    }
    if (!rc && optind < argc)
        rc = cli_usage_error("bench", "unexpected argument '%s'", argv[optind]);
    if (!rc && g->backend && strcmp(g->backend, "cpu") != 0)
        rc = cli_usage_error("bench", "measures the cpu backend; the CUDA engine's benchmark is "
                             "bench/bench_cuda_engine (run on a GPU machine)");
    if (!rc && g->peer)
        rc = cli_usage_error("bench", "measures one rank; the two-rank exchange has bench/bench_tp");
    return rc;
}

int cmd_bench(int argc, char **argv, const cli_globals *g)
{
    bench_opts o;
    int rc = parse_opts(argc, argv, g, &o);
    if (rc)
        return rc < 0 ? CLI_EXIT_OK : rc;
    const char *model = o.model ? o.model : demo_model_dir();
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int threads = o.threads > 0 ? o.threads : cores > 0 ? (int)cores : 1;
    glm_error err = {0};
    app_config ec; /* the engine's settings: flags, then GLMCHAT_* (no config file) */
    glm_engine_params p;
    char cfg_err[1024];
    if (config_command_params(&ec, g, &p, cfg_err, sizeof cfg_err)) {
        config_free(&ec);
        return cli_runtime_error("%s", cfg_err);
    }
    p.model_dir = model;
    p.backend = GLM_BACKEND_CPU;
    p.n_threads = threads;
    p.log = app_log_engine; /* to stderr */
    glm_engine *e = glm_engine_open(&p, &err);
    if (!e) {
        config_free(&ec);
        return cli_runtime_error("%s", err.message);
    }
    bench_result r = {0};
    r.vocab = glm_engine_vocab(e);
    /* the median step runs at about the middle of the decode; the CPU backend's caches are f32 */
    glm_engine_step_traffic(e, o.prompt + o.tokens / 2, &r.step_bytes, &r.step_flops);
    r.read_bw = bench_read_bandwidth((size_t)512 << 20, threads, 3);
    r.fma = bench_fma_rate(threads, 3);
    if (r.read_bw <= 0 || r.fma <= 0) {
        glm_engine_close(e);
        config_free(&ec);
        return cli_runtime_error("cannot measure the ceilings (out of memory or threads)");
    }
    rc = measure_model(e, &o, &r);
    if (!rc)
        print_table(&o, model, threads, &r);
    glm_engine_close(e);
    config_free(&ec);
    return rc;
}
