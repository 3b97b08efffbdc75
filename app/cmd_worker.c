/* cmd_worker.c: `glmchat worker --listen HOST:PORT [--transport rdma|tcp]` (CLI.md): rank 1,
 * headless; serves one head at a time until interrupted, saying on stderr what happens. */
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app/commands.h"
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
            "usage: glmchat worker --listen HOST:PORT [--transport rdma|tcp] --model DIR\n"
            "Runs rank 1 of a two-machine model split: waits for a head (`glmchat --peer HOST:PORT`)\n"
            "and serves one head at a time. Both machines need the same glmchat build and the same\n"
            "model files.\n"
            "  --listen HOST:PORT   address to listen on (0.0.0.0:7070 for every interface)\n"
            "  --transport KIND     rdma or tcp; default: whatever the head asks for\n"
            "  --model DIR          the model directory (also a global option)\n");
}

/* Serves one connected head until it leaves, fails or we are interrupted. */
static void serve(tp_rank *r)
{
    fprintf(stderr, "glmchat worker: serving the head at %s over %s\n", tp_rank_peer(r),
            tp_rank_transport_name(r));
    while (!worker_stop) {
        tp_step step;
        int bye = 0;
        glm_error err = {0};
        if (tp_worker_next_step(r, 500, &step, &bye, &err) != GLM_OK) {
            fprintf(stderr, "glmchat worker: %s\n", err.message);
            return;
        }
        if (bye) {
            fprintf(stderr, "glmchat worker: the head at %s left; waiting for the next head\n", tp_rank_peer(r));
            return;
        }
        if (step.cmd == 0)
            continue;
        free(step.tokens);
        if (step.cmd == TP_STEP_RESET || step.cmd == TP_STEP_TRUNCATE)
            continue;
        /* The transport and bootstrap are here; the model split across ranks is not wired into
         * the forward yet, so a step cannot be computed. Say so to both users. */
        const char *why = "this worker cannot compute steps yet: this glmchat build has the two-rank "
                          "transport but not the split forward; run the model on one machine (no --peer)";
        tp_rank_report(r, why);
        fprintf(stderr, "glmchat worker: %s\n", why);
        return;
    }
}

int cmd_worker(int argc, char **argv, const cli_globals *g)
{
    static const struct option longs[] = {{"listen", required_argument, 0, 'l'},
                                          {"transport", required_argument, 0, 't'},
                                          {"help", no_argument, 0, 'h'},
                                          {0, 0, 0, 0}};
    const char *listen_addr = NULL, *transport = g->transport;
    optind = 1;
    int c;
    while ((c = getopt_long(argc, argv, "h", longs, NULL)) != -1) {
        switch (c) {
        case 'l': listen_addr = optarg; break;
        case 't': transport = optarg; break;
        case 'h': usage(stdout); return CLI_EXIT_OK;
        default: return cli_usage_error("worker", "unknown option");
        }
    }
    if (optind < argc)
        return cli_usage_error("worker", "unexpected argument '%s'", argv[optind]);
    if (!listen_addr)
        return cli_usage_error("worker", "--listen HOST:PORT is required");
    if (transport && strcmp(transport, "tcp") != 0 && strcmp(transport, "rdma") != 0)
        return cli_usage_error("worker", "--transport must be rdma or tcp, not '%s'", transport);
    if (!g->model_dir)
        return cli_usage_error("worker", "--model DIR is required: the same model directory as the head's");
    glm_error err = {0};
    tp_identity id;
    if (tp_identity_from_model_dir(g->model_dir, &id, &err) != GLM_OK)
        return cli_runtime_error("%s", err.message);
    tp_listener *l = tp_listener_open(listen_addr, &err);
    if (!l)
        return cli_runtime_error("%s", err.message);
    struct sigaction sa = {0};
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    tp_rank_options opts = {.transport = transport};
    fprintf(stderr, "glmchat worker: listening on %s (port %d) for a head, model %s (%s), transport %s\n",
            listen_addr, tp_listener_port(l), g->model_dir, id.model_name, transport ? transport : "as the head asks");
    while (!worker_stop) {
        tp_rank *r = tp_worker_accept(l, &id, &opts, tp_now_ms() + 500, &err);
        if (!r) {
            if (err.status != GLM_ERR_PEER || strstr(err.message, "no connection arrived") == NULL)
                fprintf(stderr, "glmchat worker: %s\n", err.message);
            continue;
        }
        serve(r);
        tp_rank_close(r);
    }
    tp_listener_close(l);
    fprintf(stderr, "glmchat worker: stopped\n");
    return worker_stop == SIGINT ? CLI_EXIT_INTERRUPTED : CLI_EXIT_OK;
}
