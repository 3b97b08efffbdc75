/* cmd_worker.c: `glmchat worker --listen HOST:PORT [--transport rdma|tcp] [--key-file FILE]`
 * (CLI.md): a worker rank (the head says which), headless; serves one head at a time (a mirror
 * state for each of its conversation states) until interrupted, saying on stderr what happens.
 * --new-key makes a key. */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "app/commands.h"
#include "app/config.h"
#include "app/engine_log.h"
#include "app/paths.h"
#include "session.h"
#include "tp/group.h"
#include "tp/rank.h"
#include "tp/transport.h"

static volatile sig_atomic_t worker_stop;

static void on_signal(int sig)
{
    worker_stop = sig;
}

static void usage(FILE *out)
{
    fprintf(out,
            "usage: glmchat worker --listen HOST:PORT [--transport rdma|tcp] --key-file FILE --model DIR\n"
            "       glmchat worker --new-key FILE\n"
            "Runs a worker rank of a model split: waits for a head (`glmchat --peer HOST:PORT`, one\n"
            "--peer per worker) and serves one head at a time, as the rank the head gives it (1 for\n"
            "the first --peer, 2 for the next, ...). All machines need the same glmchat build, the\n"
            "same model files and a copy of the same key file.\n"
            "  --listen HOST:PORT   address to listen on: the link's own (e.g. 192.168.100.2:7070);\n"
            "                       without a key only a loopback one (127.0.0.1:PORT)\n"
            "  --key-file FILE      the key the head must prove it holds (also a global option;\n"
            "                       config: worker_key_file); mode 0600, as ssh wants a private key\n"
            "  --new-key FILE       write a new random key to FILE (mode 0600) and exit\n"
            "  --transport KIND     rdma or tcp; default: whatever the head asks for\n"
            "  --model DIR          the model directory (also a global option)\n"
            "  --threads N          CPU threads (0: one per core)\n"
            "  --dump-logits FILE   write the float32 logits of every step to FILE (for tests)\n"
            "  --port-file FILE     once listening, write the port to FILE (whole, by rename)\n");
}

/* --port-file: the port, written to a temporary name and renamed, so a reader never sees half. */
static glm_status write_port_file(const char *path, int port, glm_error *err)
{
    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s.tmp", path) >= (int)sizeof tmp)
        return glm_error_set(err, GLM_ERR_ARG, "--port-file %s: the path is too long", path);
    FILE *f = fopen(tmp, "w");
    int ok = f && fprintf(f, "%d\n", port) > 0;
    ok = f && fclose(f) == 0 && ok;
    if (!ok || rename(tmp, path) != 0) {
        glm_status st = glm_error_set(err, GLM_ERR_IO, "--port-file %s: cannot write it: %s", path,
                                      strerror(errno));
        unlink(tmp);
        return st;
    }
    return GLM_OK;
}

/* --new-key FILE: a fresh random key, mode 0600, never over an existing file. */
static int make_key(const char *path)
{
    glm_error err = {0};
    if (tp_key_create(path, &err) != GLM_OK)
        return cli_runtime_error("%s", err.message);
    fprintf(stderr, "glmchat worker: wrote a new key to %s (mode 0600); copy it to the head over a "
            "secure channel (e.g. scp) and start both ranks with --key-file %s\n", path, path);
    return CLI_EXIT_OK;
}

/* The key file: --key-file, else worker_key_file from the config (or GLMCHAT_WORKER_KEY_FILE);
 * none leaves key unset, which tp_listener_open allows on loopback only. */
static int load_key(const cli_globals *g, tp_key *key)
{
    char msg[2048];
    glm_paths paths;
    app_config cfg;
    if (paths_resolve(&paths, g, msg, sizeof msg) != 0)
        return cli_runtime_error("%s", msg);
    if (config_load(&cfg, paths.config_file, g, msg, sizeof msg) != 0) {
        config_free(&cfg);
        return cli_runtime_error("%s", msg);
    }
    glm_error err = {0};
    int rc = CLI_EXIT_OK;
    if (cfg.worker_key_file && tp_key_load(cfg.worker_key_file, key, &err) != GLM_OK)
        rc = cli_runtime_error("%s", err.message);
    config_free(&cfg);
    return rc;
}

/* Appends logits to the dump file (--dump-logits), in the order the steps computed them. */
static int dump_logits(FILE *dump, const float *logits, size_t n)
{
    return !dump || (fwrite(logits, sizeof *logits, n, dump) == n && fflush(dump) == 0);
}

/* Runs one forward step of the head's; the session is rank 1's mirror of the head's. */
static glm_status run_forward(glm_session *s, const tp_step *step, FILE *dump, glm_error *err)
{
    if ((int)step->pos != glm_session_length(s))
        return glm_error_set(err, GLM_ERR_PEER, "the head ran tokens at position %u but this worker "
                             "holds %d: the ranks disagree", step->pos, glm_session_length(s));
    size_t V = (size_t)glm_session_vocab(s);
    int all = step->cmd == TP_STEP_FORWARD_ALL;
    float *logits = all ? malloc((size_t)step->n_tokens * V * sizeof *logits) : NULL;
    if (all && !logits)
        return glm_error_set(err, GLM_ERR_NOMEM, "out of memory for %u rows of logits", step->n_tokens);
    glm_status st = glm_session_feed(s, (const int32_t *)step->tokens, (int)step->n_tokens, logits, err);
    if (st == GLM_OK && !dump_logits(dump, all ? logits : glm_session_logits(s), all ? step->n_tokens * V : V))
        st = glm_error_set(err, GLM_ERR_IO, "cannot write the logits dump: %s", strerror(errno));
    free(logits);
    return st;
}

/* The worker's mirrors of the head's conversation states, by slot, made on first use. */
typedef struct mirrors {
    glm_session *slot[TP_MAX_SLOTS];
} mirrors;

static void mirrors_free(mirrors *m)
{
    for (unsigned i = 0; i < TP_MAX_SLOTS; i++) {
        glm_session_free(m->slot[i]);
        m->slot[i] = NULL;
    }
}

static glm_status apply_step(glm_engine *e, mirrors *m, const tp_step *step, FILE *dump,
                             glm_error *err)
{
    if (step->cmd == TP_STEP_CLOSE) {
        glm_session_free(m->slot[step->slot]);
        m->slot[step->slot] = NULL;
        return GLM_OK;
    }
    glm_session *s = m->slot[step->slot];
    if (!s && !(s = m->slot[step->slot] = glm_session_new(e, err))) {
        /* the head holds this state: a worker that cannot mirror it must stop the pair */
        glm_error why = *err;
        return glm_error_set(err, GLM_ERR_PEER, "the worker cannot open a state for the head's "
                             "conversation %u: %s", step->slot, why.message);
    }
    switch (step->cmd) {
    case TP_STEP_RESET: glm_session_reset(s); return GLM_OK;
    case TP_STEP_TRUNCATE: return glm_session_truncate(s, (int)step->pos, err);
    case TP_STEP_MARK:
        if ((int)step->pos != glm_session_length(s))
            return glm_error_set(err, GLM_ERR_PEER, "the head marked %u tokens but this worker holds "
                                 "%d: the ranks disagree", step->pos, glm_session_length(s));
        return glm_session_mark(s, err);
    default: return run_forward(s, step, dump, err);
    }
}

/* The worker's engine, split as the last head asked (rank 1 of 2 until a head asks otherwise). */
typedef struct worker_engine {
    glm_engine *e;
    glm_engine_params params;
    int rank, world;
} worker_engine;

/* tp_rank_options.assign: a head of another number of ranks, or giving this worker another rank,
 * gets the model opened again and split as it asks (the split is made once per open). */
static glm_status assign_rank(void *user, int rank, int world, glm_error *err)
{
    worker_engine *w = user;
    if (w->e && w->rank == rank && w->world == world)
        return GLM_OK;
    fprintf(stderr, "glmchat worker: the head asks for rank %d of %d: splitting the model again\n", rank, world);
    glm_engine_close(w->e);
    w->rank = w->world = 0;
    w->e = glm_engine_open(&w->params, err);
    if (!w->e)
        return err->status;
    glm_status st = glm_engine_split(w->e, rank, world, err);
    if (st != GLM_OK) {
        glm_error why = *err;
        glm_engine_close(w->e);
        w->e = NULL;
        return glm_error_set(err, st, "the worker cannot be rank %d of %d: %s", rank, world, why.message);
    }
    w->rank = rank;
    w->world = world;
    return GLM_OK;
}

/* Serves one connected head until it leaves, fails or we are interrupted. */
static void serve(tp_rank *r, glm_engine *e, FILE *dump)
{
    glm_error err = {0};
    tp_group *g = tp_group_of_worker(r, &err);
    if (!g) {
        fprintf(stderr, "glmchat worker: %s\n", err.message);
        tp_rank_report(r, err.message);
        return;
    }
    fprintf(stderr, "glmchat worker: serving the head at %s over %s as rank %d of %d\n", tp_rank_peer(r),
            tp_rank_transport_name(r), tp_group_rank(g), tp_group_world(g));
    glm_engine_attach_peer(e, g);
    mirrors m = {0};
    while (!worker_stop) {
        tp_step step;
        int bye = 0;
        if (tp_worker_next_step(r, 500, &step, &bye, &err) != GLM_OK) {
            fprintf(stderr, "glmchat worker: %s\n", err.message);
            break;
        }
        if (bye) {
            fprintf(stderr, "glmchat worker: the head at %s left; waiting for the next head\n", tp_rank_peer(r));
            break;
        }
        if (step.cmd == 0)
            continue;
        glm_status st = apply_step(e, &m, &step, dump, &err);
        free(step.tokens);
        if (st == GLM_ERR_PEER || st == GLM_ERR_IO || st == GLM_ERR_NOMEM) {
            tp_rank_report(r, err.message);
            fprintf(stderr, "glmchat worker: %s\n", err.message);
            break;
        }
        /* other failures (a bad token id) happen on the head too, which says so to its user */
        if (st != GLM_OK)
            fprintf(stderr, "glmchat worker: step failed as on the head: %s\n", err.message);
    }
    mirrors_free(&m);
    glm_engine_attach_peer(e, NULL);
    tp_group_close(g);
}

/* What cmd_worker serves with, after its options are checked. */
typedef struct worker_run {
    const char *listen_addr, *transport, *dump_path, *port_path, *model_dir;
} worker_run;

/* Opens the engine as rank 1 and serves heads on run->listen_addr until a signal. */
static int serve_engine(const worker_run *run, const glm_engine_params *params,
                        const tp_rank_options *opts_in)
{
    glm_error err = {0};
    tp_rank_options opts = *opts_in;
    tp_identity id;
    const char *listen_addr = run->listen_addr, *transport = run->transport;
    const char *dump_path = run->dump_path, *port_path = run->port_path;
    worker_engine we = {.params = *params, .rank = 1, .world = 2};
    glm_engine *e = we.e = glm_engine_open(params, &err);
    if (!e)
        return cli_runtime_error("%s", err.message);
    if (glm_engine_split(e, 1, 2, &err) != GLM_OK) {
        glm_engine_close(e);
        return cli_runtime_error("%s", err.message);
    }
    opts.assign = assign_rank;
    opts.assign_user = &we;
    /* the head refuses a worker whose backend or its settings differ: the replicated ops must
     * round alike and both ranks' caches hold the same window */
    if (glm_engine_tp_identity(e, &id, &err) != GLM_OK) {
        glm_engine_close(e);
        return cli_runtime_error("%s", err.message);
    }
    FILE *dump = dump_path ? fopen(dump_path, "wb") : NULL;
    if (dump_path && !dump) {
        glm_engine_close(e);
        return cli_runtime_error("cannot create %s: %s", dump_path, strerror(errno));
    }
    tp_listener *l = tp_listener_open(listen_addr, &opts.key, &err);
    if (!l) {
        if (dump)
            fclose(dump);
        glm_engine_close(e);
        return cli_runtime_error("%s", err.message);
    }
    if (port_path && write_port_file(port_path, tp_listener_port(l), &err) != GLM_OK) {
        tp_listener_close(l);
        if (dump)
            fclose(dump);
        glm_engine_close(e);
        return cli_runtime_error("%s", err.message);
    }
    struct sigaction sa = {0};
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    fprintf(stderr, "glmchat worker: listening on %s (port %d) for a head, model %s (%s), transport %s, %s\n",
            listen_addr, tp_listener_port(l), run->model_dir, id.model_name, transport ? transport : "as the head asks",
            opts.key.set ? "heads must prove the key" : "no key (loopback only)");
    while (!worker_stop) {
        tp_rank *r = tp_worker_accept(l, &id, &opts, tp_now_ms() + 500, &err);
        if (!r) {
            if (err.status != GLM_ERR_PEER || strstr(err.message, "no connection arrived") == NULL)
                fprintf(stderr, "glmchat worker: %s\n", err.message);
            continue;
        }
        serve(r, we.e, dump);
        tp_rank_close(r);
    }
    tp_listener_close(l);
    if (dump)
        fclose(dump);
    glm_engine_close(we.e);
    fprintf(stderr, "glmchat worker: stopped\n");
    return worker_stop == SIGINT ? CLI_EXIT_INTERRUPTED : CLI_EXIT_OK;
}

int cmd_worker(int argc, char **argv, const cli_globals *g)
{
    static const struct option longs[] = {{"listen", required_argument, 0, 'l'},
                                          {"new-key", required_argument, 0, 'N'},
                                          {"transport", required_argument, 0, 't'},
                                          {"dump-logits", required_argument, 0, 'd'},
                                          {"threads", required_argument, 0, 'j'},
                                          {"port-file", required_argument, 0, 'P'},
                                          {"help", no_argument, 0, 'h'},
                                          {0, 0, 0, 0}};
    const char *listen_addr = NULL, *transport = g->transport, *dump_path = NULL, *port_path = NULL;
    const char *new_key = NULL;
    int threads = 0;
    long long v;
    optind = 1;
    int c;
    while ((c = getopt_long(argc, argv, "h", longs, NULL)) != -1) {
        switch (c) {
        case 'l': listen_addr = optarg; break;
        case 't': transport = optarg; break;
        case 'd': dump_path = optarg; break;
        case 'P': port_path = optarg; break;
        case 'N': new_key = optarg; break;
        case 'j':
            if (cli_int_option("worker", "--threads", optarg, 0, 4096, &v))
                return CLI_EXIT_USAGE;
            threads = (int)v;
            break;
        case 'h': usage(stdout); return CLI_EXIT_OK;
        default: return cli_usage_error("worker", "unknown option");
        }
    }
    if (optind < argc)
        return cli_usage_error("worker", "unexpected argument '%s'", argv[optind]);
    if (new_key)
        return make_key(new_key);
    if (!listen_addr)
        return cli_usage_error("worker", "--listen HOST:PORT is required");
    if (transport && strcmp(transport, "tcp") != 0 && strcmp(transport, "rdma") != 0)
        return cli_usage_error("worker", "--transport must be rdma or tcp, not '%s'", transport);
    if (!g->model_dir)
        return cli_usage_error("worker", "--model DIR is required: the same model directory as the head's");
    glm_error err = {0};
    tp_rank_options opts = {.transport = transport};
    int rc = load_key(g, &opts.key);
    if (rc != CLI_EXIT_OK)
        return rc;
    if (tp_listen_allowed(listen_addr, &opts.key, &err) != GLM_OK) /* before the model's load */
        return cli_runtime_error("%s", err.message);
    if (g->backend && strcmp(g->backend, "cpu") != 0 && strcmp(g->backend, "cuda") != 0)
        return cli_usage_error("worker", "--backend must be cpu or cuda, not '%s'", g->backend);
    glm_backend backend = !g->backend ? GLM_BACKEND_AUTO
                          : strcmp(g->backend, "cuda") == 0 ? GLM_BACKEND_CUDA : GLM_BACKEND_CPU;
    app_config ec; /* the engine's settings: flags, then GLMCHAT_* (no config file) */
    glm_engine_params params;
    char cfg_err[1024];
    if (config_command_params(&ec, g, &params, cfg_err, sizeof cfg_err)) {
        config_free(&ec);
        return cli_runtime_error("%s", cfg_err);
    }
    params.model_dir = g->model_dir;
    params.backend = backend;
    params.n_threads = threads;
    params.log = app_log_engine; /* to stderr */
    glm_engine_rdma_options(&params, &opts.rdma);
    worker_run run = {.listen_addr = listen_addr, .transport = transport, .dump_path = dump_path,
                      .port_path = port_path, .model_dir = g->model_dir};
    rc = serve_engine(&run, &params, &opts);
    config_free(&ec);
    return rc;
}
