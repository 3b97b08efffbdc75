/* tp_peer.c: a test program acting as either rank over the real transport: exchanges
 * deterministic buffers step by step, checks them, and prints a digest of the rank-order sums. */
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/hash.h"
#include "tp/group.h"
#include "tp/nccl.h"
#include "tp/rank.h"
#include "tp/transport.h"

typedef struct peer_opts {
    const char *role;
    const char *addr;
    const char *port_file;
    const char *transport;
    const char *model_name;
    const char *model_dir; /* identity from a real model directory instead */
    uint64_t config_hash;
    long steps;          /* 0: until the peer stops */
    int per_step;        /* exchanges per step */
    int floats;          /* floats per exchange (other sizes are mixed in) */
    int heads;           /* worker: heads to serve before exiting */
    int reconnect;       /* head: after a failure, reconnect and run `steps` more */
    int step_sleep_us;
    int reduce_every;    /* every k-th exchange also as an all-reduce, checked (0: none) */
    long late_step;      /* this step's first exchange comes late_ms late (in the step: busy) */
    int late_ms;
    long drop_step;      /* worker: this step's exchanges are not made (a step that failed here) */
    int cancel_after_ms; /* head: a wait for a late worker is canceled this long after the start */
    long context;        /* --model: the backend settings a glmchat rank would send */
    long kv_format;
    int cuda;            /* --cuda: the identity of a cuda rank (backend 2), which nccl needs */
    tp_rank_options rank;
} peer_opts;

/* ---- --transport nccl: the bootstrap only ------------------------------------------------
 * The head makes the communicator id and sends it as NCCL_ID on the link; the worker prints
 * what it received; both then try to join a communicator of two (a GPU each), printing the
 * outcome. Ids are printed as FNV-1a digests so a test can hold them equal. */

static uint64_t id_digest(const uint8_t *id)
{
    return fnv1a64(FNV1A64_SEED, id, TP_NCCL_ID_BYTES);
}

static int head_nccl(peer_opts *o, const tp_identity *id)
{
#ifdef HAVE_NCCL
    glm_error err = {0};
    if (tp_transport_refusal(o->rank.transport, id->backend, &err) != GLM_OK ||
        tp_nccl_unique_id(o->rank.nccl_id, &err) != GLM_OK) {
        printf("head: %s\n", err.message);
        return 3;
    }
    o->rank.nccl_id_set = 1;
    printf("head: communicator id %016" PRIx64 "\n", id_digest(o->rank.nccl_id));
    tp_rank *r = tp_head_connect(o->addr, id, &o->rank, &err);
    if (!r) {
        printf("head: connect failed: %s\n", err.message);
        return 3;
    }
    printf("head: connected to %s over %s\n", tp_rank_peer(r), tp_rank_transport_name(r));
    tp_transport *t = tp_nccl_transport_new(o->rank.nccl_id, 0, 2, o->rank.timeout_ms > 0 ?
                                            o->rank.timeout_ms : TP_NCCL_INIT_MS, &err);
    printf("head: join %s\n", t ? "ok" : err.message);
    tp_transport_free(t);
    tp_rank_close(r);
    return t ? 0 : 4;
#else
    (void)id;
    glm_error err = {0};
    tp_transport_refusal(o->rank.transport, 2, &err);
    printf("head: %s\n", err.message);
    return 3;
#endif
}

/* The worker's side after its link is up: the id it holds, then the group's join. */
static int worker_nccl(tp_rank *r)
{
    const uint8_t *id = tp_rank_nccl_id(r);
    if (!id) {
        printf("worker: no communicator id from the head\n");
        return 1;
    }
    printf("worker: communicator id %016" PRIx64 " over %s\n", id_digest(id), tp_rank_transport_name(r));
    glm_error err = {0};
    tp_group *g = tp_group_of_worker(r, &err);
    printf("worker: join %s\n", g ? "ok" : err.message);
    tp_group_close(g);
    return g ? 0 : 1;
}

/* ---- deterministic data ------------------------------------------------------------------- */

static uint64_t mix(uint64_t z)
{
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Finite floats of both signs over exponents 2^-20..2^8, so sums round in every way. */
static float value_of(int rank, uint64_t exchange, size_t i)
{
    uint64_t h = mix(((uint64_t)rank << 62) ^ (exchange << 24) ^ i);
    uint32_t sign = (uint32_t)(h >> 63) << 31;
    uint32_t exponent = (uint32_t)(127 - 20 + (h >> 32) % 29) << 23;
    uint32_t mantissa = (uint32_t)h & 0x7fffff;
    uint32_t bits = sign | exponent | mantissa;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* Both ranks derive the same size for each exchange: mostly the row size, sometimes odd sizes,
 * rarely a 4 MiB one so two large sends cross in flight. */
static size_t size_of(uint64_t exchange, int floats)
{
    if (exchange % 997 == 0)
        return 1u << 20;
    if (exchange % 13 == 0)
        return 1 + (size_t)(mix(exchange) % 5000);
    return (size_t)floats;
}

typedef struct peer_state {
    float *mine, *both, *sum;
    size_t cap;
    uint64_t exchanges;
    uint64_t digest;
} peer_state;

static int exchange_once(tp_rank *r, peer_state *s, int floats, int reduce_every, glm_error *err)
{
    uint64_t ex = ++s->exchanges;
    size_t n = size_of(ex, floats);
    int me = tp_rank_index(r), other = 1 - me;
    for (size_t i = 0; i < n; i++)
        s->mine[i] = value_of(me, ex, i);
    if (tp_rank_all_gather(r, s->mine, s->both, n, err) != GLM_OK)
        return -1;
    for (size_t i = 0; i < n; i++) {
        float want = value_of(other, ex, i);
        if (memcmp(&s->both[(size_t)other * n + i], &want, sizeof want) != 0 ||
            memcmp(&s->both[(size_t)me * n + i], &s->mine[i], sizeof want) != 0) {
            glm_error_set(err, GLM_ERR_PEER, "exchange %" PRIu64 ": float %zu of %zu is wrong", ex, i, n);
            return -1;
        }
        float sum = s->both[i] + s->both[n + i]; /* rank order */
        s->digest = fnv1a64(s->digest, &sum, sizeof sum);
    }
    if (reduce_every && ex % (uint64_t)reduce_every == 0) { /* the same sums by all-reduce */
        memcpy(s->sum, s->mine, n * sizeof *s->sum);
        if (tp_rank_all_reduce(r, s->sum, n, err) != GLM_OK)
            return -1;
        for (size_t i = 0; i < n; i++) {
            float want = s->both[i] + s->both[n + i];
            if (memcmp(&s->sum[i], &want, sizeof want) != 0) {
                glm_error_set(err, GLM_ERR_PEER, "all-reduce %" PRIu64 ": float %zu of %zu is not "
                              "the rank-order sum", ex, i, n);
                return -1;
            }
        }
    }
    return 0;
}

static int run_steps(tp_rank *r, const peer_opts *o, peer_state *s, long *done, glm_error *err)
{
    for (long step = 1; o->steps == 0 || step <= o->steps; step++) {
        uint32_t token = (uint32_t)step;
        if (tp_head_send_step(r, 0, TP_STEP_FORWARD, (uint32_t)(step - 1), &token, 1, err) != GLM_OK)
            return -1;
        if (step == o->late_step)
            usleep((useconds_t)o->late_ms * 1000u);
        for (int k = 0; k < o->per_step; k++)
            if (exchange_once(r, s, o->floats, o->reduce_every, err) != 0) {
                tp_rank_step_end(r);
                return -1;
            }
        tp_rank_step_end(r);
        ++*done;
        if (o->step_sleep_us)
            usleep((useconds_t)o->step_sleep_us);
    }
    return 0;
}

/* A wait for a late peer's note, on stdout ("head: note: ..." / "worker: note: ...") */
static void print_note(void *user, const tp_late_wait *w)
{
    char text[320];
    tp_late_wait_text(w, text, sizeof text);
    printf("%s: note: %s\n", (const char *)user, text);
    fflush(stdout);
}

/* --cancel-after-ms: the user's cancel, asked by a wait for a late worker */
static int64_t cancel_at_ms;
static int canceled_now(void *user)
{
    (void)user;
    return tp_now_ms() >= cancel_at_ms;
}

static int run_head(const peer_opts *o, const tp_identity *id, peer_state *s)
{
    glm_error err = {0};
    int64_t t0 = tp_now_ms();
    tp_rank *r = tp_head_connect(o->addr, id, &o->rank, &err);
    if (!r) {
        printf("head: connect failed after %" PRId64 " ms: %s\n", tp_now_ms() - t0, err.message);
        return 3;
    }
    tp_rank_set_note(r, print_note, "head");
    if (o->cancel_after_ms > 0) {
        cancel_at_ms = tp_now_ms() + o->cancel_after_ms;
        tp_rank_set_cancel(r, canceled_now, NULL);
    }
    printf("head: connected to %s over %s\n", tp_rank_peer(r), tp_rank_transport_name(r));
    fflush(stdout);
    long done = 0;
    if (run_steps(r, o, s, &done, &err) != 0) {
        printf("head: FAILED after %ld steps: %s\n", done, err.message);
        fflush(stdout);
        tp_rank_close(r);
        if (!o->reconnect)
            return 4;
        t0 = tp_now_ms();
        r = tp_head_connect(o->addr, id, &o->rank, &err);
        if (!r) {
            printf("head: reconnect failed after %" PRId64 " ms: %s\n", tp_now_ms() - t0, err.message);
            return 5;
        }
        printf("head: reconnected to %s\n", tp_rank_peer(r));
        s->exchanges = 0;
        s->digest = FNV1A64_SEED;
        done = 0;
        if (run_steps(r, o, s, &done, &err) != 0) {
            printf("head: FAILED after reconnecting, %ld steps: %s\n", done, err.message);
            tp_rank_close(r);
            return 6;
        }
    }
    printf("head: steps %ld exchanges %" PRIu64 " digest %016" PRIx64 "\n", done, s->exchanges, s->digest);
    tp_rank_close(r);
    return 0;
}

static int serve_one(tp_rank *r, const peer_opts *o, peer_state *s)
{
    glm_error err = {0};
    long steps = 0;
    tp_rank_set_note(r, print_note, "worker");
    for (;;) {
        tp_step step;
        int bye = 0;
        if (tp_worker_next_step(r, -1, &step, &bye, &err) != GLM_OK) {
            printf("worker: head lost after %ld steps: %s\n", steps, err.message);
            return 1;
        }
        if (bye)
            break;
        int ok = step.cmd == TP_STEP_FORWARD && step.n_tokens == 1 && step.tokens[0] == (uint32_t)(steps + 1) &&
                 step.pos == (uint32_t)steps;
        free(step.tokens);
        if (!ok) {
            printf("worker: step %ld carried the wrong decision\n", steps + 1);
            return 1;
        }
        if (steps + 1 == o->drop_step) { /* as a step that failed on this side: no exchanges */
            printf("worker: dropped step %ld\n", steps + 1);
            steps++;
            continue;
        }
        if (steps + 1 == o->late_step)
            usleep((useconds_t)o->late_ms * 1000u);
        for (int k = 0; k < o->per_step; k++) {
            if (exchange_once(r, s, o->floats, o->reduce_every, &err) != 0) {
                printf("worker: FAILED in step %ld: %s\n", steps + 1, err.message);
                return 1;
            }
        }
        steps++;
    }
    printf("worker: steps %ld exchanges %" PRIu64 " digest %016" PRIx64 "\n", steps, s->exchanges, s->digest);
    return 0;
}

static int run_worker(const peer_opts *o, const tp_identity *id, peer_state *s)
{
    glm_error err = {0};
    tp_listener *l = tp_listener_open(o->addr, &o->rank.key, &err);
    if (!l) {
        printf("worker: %s\n", err.message);
        return 3;
    }
    if (o->port_file) {
        FILE *f = fopen(o->port_file, "w");
        if (!f || fprintf(f, "%d\n", tp_listener_port(l)) < 0 || fclose(f) != 0) {
            printf("worker: cannot write %s\n", o->port_file);
            return 3;
        }
    }
    int failures = 0, refused = 0;
    for (int served = 0; served < o->heads;) {
        tp_rank *r = tp_worker_accept(l, id, &o->rank, tp_now_ms() + 60000, &err);
        if (!r) {
            printf("worker: %s\n", err.message);
            fflush(stdout);
            if (++refused > 50) {
                failures++;
                break;
            }
            continue;
        }
        s->exchanges = 0;
        s->digest = FNV1A64_SEED;
        int nccl = o->rank.transport && strcmp(o->rank.transport, "nccl") == 0;
        int rc = nccl ? worker_nccl(r) : serve_one(r, o, s);
        fflush(stdout);
        tp_rank_close(r);
        served++;
        if (rc != 0)
            failures++;
    }
    tp_listener_close(l);
    return failures ? 1 : 0;
}

int main(int argc, char **argv)
{
    peer_opts o = {.per_step = 90, .floats = 4096, .heads = 1, .model_name = "glm5_next",
                   .config_hash = 1};
    static const struct option longs[] = {
        {"role", required_argument, 0, 'r'},      {"addr", required_argument, 0, 'a'},
        {"port-file", required_argument, 0, 'p'}, {"transport", required_argument, 0, 't'},
        {"steps", required_argument, 0, 's'},     {"per-step", required_argument, 0, 'k'},
        {"floats", required_argument, 0, 'n'},    {"heads", required_argument, 0, 'H'},
        {"timeout-ms", required_argument, 0, 'T'}, {"heartbeat-ms", required_argument, 0, 'B'},
        {"connect-ms", required_argument, 0, 'C'}, {"model-name", required_argument, 0, 'm'},
        {"config-hash", required_argument, 0, 'c'}, {"reconnect", no_argument, 0, 'R'},
        {"step-sleep-us", required_argument, 0, 'S'}, {"model", required_argument, 0, 'M'},
        {"context", required_argument, 0, 'X'}, {"kv-format", required_argument, 0, 'K'},
        {"key-file", required_argument, 0, 'F'},  {"cuda", no_argument, 0, 'U'},
        {"late-step", required_argument, 0, 'l'}, {"late-ms", required_argument, 0, 'L'},
        {"drop-step", required_argument, 0, 'D'}, {"cancel-after-ms", required_argument, 0, 'Q'},
        {"piece", required_argument, 0, 'P'},     {"reduce-every", required_argument, 0, 'E'},
        {0, 0, 0, 0}};
    int c;
    while ((c = getopt_long(argc, argv, "", longs, NULL)) != -1) {
        switch (c) {
        case 'r': o.role = optarg; break;
        case 'a': o.addr = optarg; break;
        case 'p': o.port_file = optarg; break;
        case 't': o.rank.transport = optarg; break;
        case 's': o.steps = atol(optarg); break;
        case 'k': o.per_step = atoi(optarg); break;
        case 'n': o.floats = atoi(optarg); break;
        case 'H': o.heads = atoi(optarg); break;
        case 'T': o.rank.timeout_ms = atoi(optarg); break;
        case 'B': o.rank.heartbeat_ms = atoi(optarg); break;
        case 'C': o.rank.connect_ms = atoi(optarg); break;
        case 'm': o.model_name = optarg; break;
        case 'c': o.config_hash = strtoull(optarg, NULL, 0); break;
        case 'R': o.reconnect = 1; break;
        case 'S': o.step_sleep_us = atoi(optarg); break;
        case 'M': o.model_dir = optarg; break;
        case 'X': o.context = atol(optarg); break;
        case 'K': o.kv_format = atol(optarg); break;
        case 'U': o.cuda = 1; break;
        case 'l': o.late_step = atol(optarg); break;
        case 'L': o.late_ms = atoi(optarg); break;
        case 'D': o.drop_step = atol(optarg); break;
        case 'Q': o.cancel_after_ms = atoi(optarg); break;
        case 'P': o.rank.piece_floats = (size_t)atol(optarg); break;
        case 'E': o.reduce_every = atoi(optarg); break;
        case 'F': {
            glm_error err = {0};
            if (tp_key_load(optarg, &o.rank.key, &err) != GLM_OK) {
                fprintf(stderr, "tp_peer: %s\n", err.message);
                return 2;
            }
            break;
        }
        default:
            fprintf(stderr, "usage: tp_peer --role head|worker --addr HOST:PORT [options]\n");
            return 2;
        }
    }
    if (!o.role || !o.addr || o.floats <= 0 || o.per_step <= 0) {
        fprintf(stderr, "tp_peer: --role and --addr are required\n");
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    setvbuf(stdout, NULL, _IOLBF, 0);
    tp_identity id = {0};
    snprintf(id.model_name, sizeof id.model_name, "%s", o.model_name);
    id.config_hash = o.config_hash;
    id.weights_hash = 2;
    glm_error id_err;
    if (o.model_dir && tp_identity_from_model_dir(o.model_dir, &id, &id_err) != GLM_OK) {
        fprintf(stderr, "tp_peer: %s\n", id_err.message);
        return 2;
    }
    id.max_context = (uint32_t)o.context;
    id.kv_format = (uint32_t)o.kv_format;
    id.backend = o.cuda ? 2 : 1;
    peer_state s = {0};
    s.cap = 1u << 20;
    s.mine = malloc(s.cap * sizeof(float));
    s.both = malloc(2 * s.cap * sizeof(float));
    s.sum = malloc(s.cap * sizeof(float));
    s.digest = FNV1A64_SEED;
    if (!s.mine || !s.both || !s.sum)
        return 3;
    int head = strcmp(o.role, "head") == 0;
    int nccl = o.rank.transport && strcmp(o.rank.transport, "nccl") == 0;
    int rc = head && nccl ? head_nccl(&o, &id) : head ? run_head(&o, &id, &s) : run_worker(&o, &id, &s);
    free(s.mine);
    free(s.both);
    free(s.sum);
    return rc;
}
