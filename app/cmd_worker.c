/* cmd_worker.c: `glmchat worker --listen HOST:PORT [--transport rdma|tcp|nccl] [--key-file FILE]`
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
#include "engine/glm.h"

static volatile sig_atomic_t worker_stop;

static void on_signal(int sig)
{
    worker_stop = sig;
}

static void usage(FILE *out)
{
    fprintf(out,
            "usage: glmchat worker --listen HOST:PORT [--transport rdma|tcp|nccl] --key-file FILE --model DIR\n"
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
            "  --transport KIND     rdma, tcp or nccl (cuda only); default: whatever the head asks for\n"
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
    if (glm_worker_new_key(path, &err) != GLM_OK)
        return cli_runtime_error("%s", err.message);
    fprintf(stderr, "glmchat worker: wrote a new key to %s (mode 0600); copy it to the head over a "
            "secure channel (e.g. scp) and start both ranks with --key-file %s\n", path, path);
    return CLI_EXIT_OK;
}

/* The key file: --key-file, else worker_key_file from the config (or GLMCHAT_WORKER_KEY_FILE),
 * checked with the listen address before the model's load; none leaves *key_file NULL, which
 * the worker allows on loopback only. The config's strings live in cfg. */
static int check_key(const cli_globals *g, const char *listen_addr, app_config *cfg,
                     const char **key_file)
{
    char msg[2048];
    glm_paths paths;
    if (paths_resolve(&paths, g, msg, sizeof msg) != 0)
        return cli_runtime_error("%s", msg);
    if (config_load(cfg, paths.config_file, g, msg, sizeof msg) != 0)
        return cli_runtime_error("%s", msg);
    *key_file = cfg->worker_key_file;
    glm_error err = {0};
    if (glm_worker_check(listen_addr, *key_file, &err) != GLM_OK)
        return cli_runtime_error("%s", err.message);
    return CLI_EXIT_OK;
}

/* glm_worker_params.log: the worker's lines on stderr. */
static void worker_log(void *user, int level, const char *msg)
{
    (void)user;
    (void)level;
    fprintf(stderr, "glmchat worker: %s\n", msg);
}

static int stop_requested(void *user)
{
    (void)user;
    return worker_stop != 0;
}

/* glm_worker_params.on_listen: the port file, then the signals that stop the worker. */
static glm_status on_listening(void *user, int port, glm_error *err)
{
    const char *port_path = user;
    if (port_path && write_port_file(port_path, port, err) != GLM_OK)
        return err->status;
    struct sigaction sa = {0};
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    return GLM_OK;
}

/* What cmd_worker serves with, after its options are checked. */
typedef struct worker_run {
    const char *listen_addr, *transport, *dump_path, *port_path;
} worker_run;

/* Serves heads on run->listen_addr until a signal. */
static int serve_engine(const worker_run *run, const glm_engine_params *params, const char *key_file)
{
    glm_error err = {0};
    glm_worker_params wp = {.engine = *params, .listen = run->listen_addr, .key_file = key_file,
                            .dump_logits = run->dump_path, .on_listen = on_listening,
                            .on_listen_user = (void *)run->port_path, .stop = stop_requested,
                            .log = worker_log};
    wp.engine.transport = run->transport;
    if (glm_worker_serve(&wp, &err) != GLM_OK)
        return cli_runtime_error("%s", err.message);
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
    if (transport && strcmp(transport, "tcp") != 0 && strcmp(transport, "rdma") != 0 &&
        strcmp(transport, "nccl") != 0)
        return cli_usage_error("worker", "--transport must be rdma, tcp or nccl, not '%s'", transport);
    if (!g->model_dir)
        return cli_usage_error("worker", "--model DIR is required: the same model directory as the head's");
    app_config cfg;
    config_init(&cfg);
    const char *key_file = NULL;
    int rc = check_key(g, listen_addr, &cfg, &key_file); /* before the model's load */
    if (rc != CLI_EXIT_OK) {
        config_free(&cfg);
        return rc;
    }
    if (g->backend && strcmp(g->backend, "cpu") != 0 && strcmp(g->backend, "cuda") != 0) {
        config_free(&cfg);
        return cli_usage_error("worker", "--backend must be cpu or cuda, not '%s'", g->backend);
    }
    glm_backend backend = !g->backend ? GLM_BACKEND_AUTO
                          : strcmp(g->backend, "cuda") == 0 ? GLM_BACKEND_CUDA : GLM_BACKEND_CPU;
    app_config ec; /* the engine's settings: flags, then GLMCHAT_* (no config file) */
    glm_engine_params params;
    char cfg_err[1024];
    if (config_command_params(&ec, g, &params, cfg_err, sizeof cfg_err)) {
        config_free(&ec);
        config_free(&cfg);
        return cli_runtime_error("%s", cfg_err);
    }
    params.model_dir = g->model_dir;
    params.backend = backend;
    params.n_threads = threads;
    params.log = app_log_engine; /* to stderr */
    worker_run run = {.listen_addr = listen_addr, .transport = transport, .dump_path = dump_path,
                      .port_path = port_path};
    rc = serve_engine(&run, &params, key_file);
    config_free(&ec);
    config_free(&cfg);
    return rc;
}
