/* tp_sessions.c: several conversation states of one head over one worker (tests/e2e/tp_sessions.sh
 * starts the worker): interleaved sessions each give one rank's logits, a freed slot is reused
 * clean, a state past the worker's limit is refused by name, and after the worker restarts
 * (RESTART_CMD) a state it no longer holds is refused by name while a fresh one goes on; a long
 * marked feed canceled partway keeps its pieces on both ranks and goes on to one rank's logits;
 * a greedy reply drafted on the ranks (verification windows and rewinds on each) equals the
 * undrafted one and one rank's; a state kept on every rank restores on every rank, and after the
 * restart the head's kept state, which the worker lost, is refused by the ranks' agreement and runs
 * again. HOST:PORT may list several workers (HOST:PORT,HOST:PORT: more ranks).
 * Usage: tp_sessions [--cuda] MODEL_DIR HOST:PORT [RESTART_CMD]   (exit 0 when every check
 * passed; --cuda: both engines on the CUDA backend with f32 caches, against a CUDA worker
 * started with --kv-cache f32) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "glm.h"
#include "session.h"
#include "spec.h"
#include "tp/protocol.h"
#include "tests/common/cancel_later.h"

static int failures;
/* the tolerance of two ranks' logits against one rank's, of the largest one-rank logit: the ranks
 * sum their halves in another order; on CUDA the f32 sums of the split products (and the fp16
 * part of a prompt's inputs) move a prompt's logits a little further (1.2e-5 measured, H100) */
static double tolerance = 1e-5;

static void check(int ok, const char *what)
{
    printf("%s: %s\n", ok ? "PASS" : "FAIL", what);
    failures += !ok;
}

/* A session of two ranks and its one-rank reference, fed the same tokens. */
typedef struct pair {
    glm_session *two, *one;
    const char *name;
} pair;

/* Feeds n tokens to both and compares the last logits: within tolerance of the largest one-rank
 * logit. */
static void feed_both(pair *p, const int32_t *tokens, int n)
{
    glm_error err = {0};
    char what[1400];
    glm_status a = glm_session_feed(p->two, tokens, n, NULL, &err);
    if (a != GLM_OK) {
        snprintf(what, sizeof what, "%s: two-rank feed of %d tokens: %s", p->name, n, err.message);
        check(0, what);
        return;
    }
    glm_status b = glm_session_feed(p->one, tokens, n, NULL, &err);
    if (b != GLM_OK) {
        snprintf(what, sizeof what, "%s: one-rank feed: %s", p->name, err.message);
        check(0, what);
        return;
    }
    const float *x = glm_session_logits(p->two), *y = glm_session_logits(p->one);
    int V = glm_session_vocab(p->one);
    double scale = 0, diff = 0;
    for (int i = 0; i < V; i++) {
        scale = fmax(scale, fabs(y[i]));
        double d = fabs((double)x[i] - y[i]);
        diff = d > diff || isnan(d) ? d : diff;
    }
    snprintf(what, sizeof what, "%s at %d tokens: max |diff| %.3g of max |logit| %.3g", p->name,
             glm_session_length(p->two), diff, scale);
    check(diff <= tolerance * scale && glm_session_length(p->two) == glm_session_length(p->one),
          what);
}

/* A long marked feed (a reply's prompt) over the two ranks canceled partway: both keep the pieces
 * that ran (the head's marks reach the worker, and both go back to the mark within a piece), so
 * feeding the rest gives one rank's logits; a worker that had reset would refuse the next feed
 * ("the ranks disagree"). */
static void canceled_feed_keeps_its_pieces(glm_engine *two, glm_engine *one, int V)
{
    enum { N = 3000 };
    static int32_t t[N];
    glm_error err = {0};
    char what[1400];
    for (int i = 0; i < N; i++)
        t[i] = (int32_t)((i * 104729 + 17) % (V - 1) + 1);
    pair d = {glm_session_new(two, &err), glm_session_new(one, &err), "a canceled long feed"};
    if (!d.two || !d.one) {
        check(0, err.message);
        return;
    }
    double t0 = test_now_s();
    glm_status st = session_feed_marked(d.two, t, N, &err);
    double whole = test_now_s() - t0;
    check(st == GLM_OK, st ? err.message : "an uncanceled long feed over two ranks");
    glm_session_reset(d.two);
    session_clear_cancel(d.two);
    test_canceler later;
    check(test_cancel_after(&later, d.two, whole / 2) == 0, "a thread that cancels later");
    st = session_feed_marked(d.two, t, N, &err);
    test_cancel_join(&later);
    session_clear_cancel(d.two);
    int held = glm_session_length(d.two);
    snprintf(what, sizeof what, "%s: canceled at half its %.0f ms (status %d), holding %d tokens "
             "marked there: %s", d.name, whole * 1e3, (int)st, held, err.message);
    check((st == GLM_ERR_CANCELED && held % 1024 == 0 && glm_session_marked(d.two) == held) ||
              (st == GLM_OK && held == N), what);
    if (glm_session_feed(d.one, t, held, NULL, &err) != GLM_OK)
        check(0, err.message);
    feed_both(&d, t + held, N - held);
    glm_session_free(d.two);
    glm_session_free(d.one);
}

/* Drafted decoding over two ranks: the head drafts, the worker runs each verification window
 * (its exchanges) and goes back inside it as the head does. The drafts come from the one-rank
 * reply (an oracle), one in five of them wrong, so windows are both accepted and refused. */
typedef struct oracle {
    const int32_t *reply;
    int n_reply, n_prompt, vocab;
} oracle;

static int oracle_draft(const int32_t *ctx, int n, int32_t *out, int max, void *user)
{
    const oracle *o = user;
    int at = n - o->n_prompt, k = 0; /* reply tokens the context holds */
    for (; k < max && at + k < o->n_reply; k++) {
        uint32_t h = (uint32_t)(at + k) * 2654435761u;
        out[k] = (h >> 16) % 5 == 0 ? (o->reply[at + k] + 1) % o->vocab : o->reply[at + k];
    }
    (void)ctx;
    return k;
}

typedef struct reply {
    int32_t v[64];
    int n;
} reply;

static int keep_token(int32_t tok, void *user)
{
    reply *r = user;
    if (r->n < 64)
        r->v[r->n++] = tok;
    return 0;
}

static double flat_cost(int rows, double measured_s, void *user)
{
    (void)rows, (void)measured_s, (void)user;
    return 1.0; /* windows always pay: the choice does not hang on this machine's speed */
}

/* A greedy reply of NEW tokens after the prompt on a fresh session of e (drafts: its drafter). */
static glm_status greedy_reply(glm_session *s, const int32_t *prompt, int np, int max_new, reply *r,
                               glm_error *err)
{
    glm_sampling greedy = {.temperature = 0, .top_p = 1};
    int eos[] = {-1}, n = 0;
    r->n = 0;
    return glm_session_generate_tokens(s, prompt, np, &greedy, eos, 1, max_new, keep_token, r, &n,
                                       err);
}

static void drafted_reply_equals_undrafted(glm_engine *two, glm_engine *one, int V, int ranks)
{
    enum { NP = 40, NEW = 48 };
    int32_t prompt[NP];
    for (int i = 0; i < NP; i++)
        prompt[i] = (int32_t)(1 + (i * 37) % (V - 1));
    glm_error err = {0};
    reply plain = {.n = 0}, drafted = {.n = 0}, single = {.n = 0};
    glm_session *undrafted = glm_session_new(two, &err);
    pair p = {glm_session_new(two, &err), glm_session_new(one, &err), "drafted conversation"};
    if (!undrafted || !p.two || !p.one) {
        check(0, err.message);
        return;
    }
    glm_status a = greedy_reply(undrafted, prompt, NP, NEW, &plain, &err);
    oracle o = {plain.v, plain.n, NP, V};
    session_set_drafter(p.two, oracle_draft, &o);
    session_set_forward_cost(p.two, flat_cost, NULL);
    glm_status b = a ? a : greedy_reply(p.two, prompt, NP, NEW, &drafted, &err);
    glm_status c = a || b ? a | b : greedy_reply(p.one, prompt, NP, NEW, &single, &err);
    const spec_stats *st = session_spec_stats(p.two);
    long long proposed = 0, accepted = 0;
    for (int i = 0; i < SPEC_MAX_DRAFT; i++)
        proposed += st->proposed[i], accepted += st->accepted[i];
    int same = plain.n == NEW && drafted.n == NEW &&
               memcmp(plain.v, drafted.v, sizeof plain.v[0] * NEW) == 0;
    const float *la = glm_session_logits(undrafted), *lb = glm_session_logits(p.two);
    int state_same = la && lb && glm_session_length(undrafted) == glm_session_length(p.two) &&
                     memcmp(la, lb, (size_t)V * sizeof *la) == 0;
    int one_same = single.n == NEW && memcmp(plain.v, single.v, sizeof plain.v[0] * NEW) == 0;
    char what[1400];
    snprintf(what, sizeof what, "drafted decoding on %d ranks: %d tokens equal the undrafted "
             "reply's %d on those ranks (%s one rank's), the next logits the same bits: %s; %lld "
             "windows, %lld of %lld drafts accepted%s%s", ranks, drafted.n, plain.n,
             one_same ? "and" : "NOT", state_same ? "yes" : "no", (long long)st->windows,
             accepted, proposed, a || b || c ? ": " : "", a || b || c ? err.message : "");
    check(!a && !b && !c && same && state_same && one_same && st->windows > 0 && accepted > 0 &&
              accepted < proposed,
          what);
    /* the worker went back inside the windows as the head did: the next step agrees with one rank */
    int32_t next = plain.v[NEW - 1];
    feed_both(&p, &next, 1);
    glm_session_free(undrafted);
    glm_session_free(p.two);
    glm_session_free(p.one);
}

static void tokens_of(int32_t *t, int n, int seed, int vocab)
{
    for (int i = 0; i < n; i++)
        t[i] = (int32_t)((seed * 7919 + i * 104729) % (vocab - 1) + 1);
}

/* A state kept on the head and its workers (glm_session_keep: each rank's part in its own prompt
 * cache) restored by another conversation (glm_session_restore): every rank restores its part,
 * and the next tokens give one rank's logits. worker_holds 0 (the workers restarted since the
 * keep, so they lost their parts): the ranks' agreement refuses the head's state, the prompt runs
 * from the start, and once kept again it restores on every rank. */
static void kept_state_restores(glm_engine *two, glm_engine *one, int V, int worker_holds)
{
    enum { N = 40, M = 6 };
    int32_t t[N + M + 1];
    tokens_of(t, N + M + 1, 5, V);
    glm_error err = {0};
    char what[1400];
    if (worker_holds) {
        glm_session *src = glm_session_new(two, &err);
        glm_status st = src ? glm_session_feed(src, t, N, NULL, &err) : err.status;
        if (st == GLM_OK)
            st = glm_session_keep(src, &err);
        snprintf(what, sizeof what, "a state of %d tokens kept on every rank%s%s", N,
                 st ? ": " : "", st ? err.message : "");
        check(st == GLM_OK, what);
        glm_session_free(src);
    }
    pair p = {glm_session_new(two, &err), glm_session_new(one, &err),
              worker_holds ? "a kept state restored on every rank"
                           : "a kept state the workers lost, run again"};
    if (!p.two || !p.one) {
        check(0, err.message);
        return;
    }
    int got = glm_session_restore(p.two, t, N + M, 0, N + M - 1);
    snprintf(what, sizeof what, "%s: the head restored %d tokens (expected %d)", p.name, got,
             worker_holds ? N : 0);
    check(got == (worker_holds ? N : 0) && glm_session_length(p.two) == got, what);
    if (got == N && glm_session_feed(p.one, t, N, NULL, &err) != GLM_OK)
        check(0, err.message);
    feed_both(&p, t + got, N + M - got);
    if (!worker_holds) { /* kept again (every rank), then restored by another conversation */
        if (glm_session_keep(p.two, &err) != GLM_OK)
            check(0, err.message);
        pair q = {glm_session_new(two, &err), glm_session_new(one, &err),
                  "a state kept again after the workers restarted, restored"};
        if (q.two && q.one) {
            got = glm_session_restore(q.two, t, N + M + 1, 0, N + M);
            snprintf(what, sizeof what, "%s: %d tokens (expected %d)", q.name, got, N + M);
            check(got == N + M, what);
            if (got == N + M && glm_session_feed(q.one, t, N + M, NULL, &err) != GLM_OK)
                check(0, err.message);
            feed_both(&q, t + got, N + M + 1 - got);
        }
        glm_session_free(q.two);
        glm_session_free(q.one);
    }
    glm_session_free(p.two);
    glm_session_free(p.one);
}

int main(int argc, char **argv)
{
    int cuda = argc > 1 && strcmp(argv[1], "--cuda") == 0;
    argc -= cuda;
    argv += cuda;
    if (cuda)
        tolerance = 1e-4;
    if (argc != 3 && argc != 4) {
        fprintf(stderr, "usage: tp_sessions [--cuda] MODEL_DIR HOST:PORT [RESTART_CMD]\n");
        return 2;
    }
    glm_error err = {0};
    glm_engine_params one_p = {.model_dir = argv[1], .backend = cuda ? GLM_BACKEND_CUDA : GLM_BACKEND_CPU,
                               .n_threads = 1, .prompt_cache_bytes = -1,
                               /* f32 caches on CUDA: its fp8 default rounds the two splits' rows
                                * apart (the worker is started with --kv-cache f32 too) */
                               .kv_cache = cuda ? GLM_KV_CACHE_F32 : GLM_KV_CACHE_DEFAULT};
    glm_engine_params two_p = one_p;
    two_p.peer = argv[2];
    two_p.prompt_cache_bytes = (int64_t)64 << 20; /* kept_state_restores' (memory only) */
    glm_engine *one = glm_engine_open(&one_p, &err);
    glm_engine *two = one ? glm_engine_open(&two_p, &err) : NULL;
    if (!one || !two) {
        fprintf(stderr, "tp_sessions: %s\n", err.message);
        return 1;
    }
    int V = engine_model(one)->cfg.vocab_size;
    int32_t ta[24], tb[24], tc[24];
    tokens_of(ta, 24, 1, V);
    tokens_of(tb, 24, 2, V);
    tokens_of(tc, 24, 3, V);
    pair a = {glm_session_new(two, &err), glm_session_new(one, &err), "conversation A"};
    pair b = {glm_session_new(two, &err), glm_session_new(one, &err), "conversation B"};
    if (!a.two || !a.one || !b.two || !b.one) {
        fprintf(stderr, "tp_sessions: %s\n", err.message);
        return 1;
    }
    /* interleaved prefills and decode steps: each head state has its own mirror on the worker */
    feed_both(&a, ta, 9);
    feed_both(&b, tb, 5);
    for (int i = 0; i < 3; i++) {
        feed_both(&a, ta + 9 + i, 1);
        feed_both(&b, tb + 5 + i, 1);
    }
    /* a conversation switched: B restarts from nothing while A keeps going */
    glm_session_reset(b.two);
    glm_session_reset(b.one);
    feed_both(&b, tc, 6);
    feed_both(&a, ta + 12, 4);
    /* and switched as a chat does, back to a shared prefix: B is cut to its mark, then goes on */
    for (int i = 0; i < 2; i++) {
        glm_session *s = i ? b.one : b.two;
        if (glm_session_mark(s, &err) != GLM_OK)
            check(0, err.message);
    }
    feed_both(&b, tb, 3);
    for (int i = 0; i < 2; i++) {
        glm_session *s = i ? b.one : b.two;
        if (glm_session_truncate(s, 6, &err) != GLM_OK)
            check(0, err.message);
    }
    feed_both(&b, tb + 3, 3);

    /* a freed state's slot goes to the next one, which starts empty on the worker too */
    glm_session_free(a.two);
    glm_session_free(a.one);
    pair c = {glm_session_new(two, &err), glm_session_new(one, &err), "conversation C (A's slot)"};
    check(c.two && c.one, "a new state after one was freed");
    if (c.two && c.one) {
        feed_both(&c, tb, 3);
        feed_both(&c, tb + 3, 1);
    }

    /* the head refuses, by name, a state past what the worker keeps */
    glm_session *more[TP_MAX_SLOTS];
    int opened = 0;
    glm_error full = {0};
    while (opened < (int)TP_MAX_SLOTS && (more[opened] = glm_session_new(two, &full)))
        opened++;
    char what[1400];
    snprintf(what, sizeof what, "states past %u refused after %d more: %s", TP_MAX_SLOTS, opened,
             full.message);
    check(opened == (int)TP_MAX_SLOTS - 2 && strstr(full.message, "at most 16 conversation states"),
          what);
    for (int i = 0; i < opened; i++)
        glm_session_free(more[i]);

    /* B's mirror outlived all of that */
    feed_both(&b, tc + 6, 2);
    canceled_feed_keeps_its_pieces(two, one, V);
    int ranks = 2; /* the head and a worker for each address */
    for (const char *c = argv[2]; *c; c++)
        ranks += *c == ',';
    drafted_reply_equals_undrafted(two, one, V, ranks);
    kept_state_restores(two, one, V, 1);

    if (argc == 4 && c.two && c.one) {
        /* the worker restarts: C starting over reconnects; B's state is gone there, and B is told
         * so by name (not "the ranks disagree", which would stop C too), then starts over */
        fflush(stdout);
        check(system(argv[3]) == 0, "the worker restarted");
        glm_session_reset(c.two);
        glm_session_reset(c.one);
        feed_both(&c, tc, 5);
        glm_error gone = {0};
        int32_t next = tc[8];
        glm_status st = glm_session_feed(b.two, &next, 1, NULL, &gone);
        snprintf(what, sizeof what, "a state built before the restart is refused: %s", gone.message);
        check(st == GLM_ERR_PEER && strstr(gone.message, "no longer holds it") &&
              glm_session_length(b.two) == 0, what);
        glm_session_reset(b.one);
        feed_both(&b, tb, 4);
        feed_both(&c, tc + 5, 1);
        kept_state_restores(two, one, V, 0);
    }
    glm_session_free(b.two);
    glm_session_free(b.one);
    if (c.two)
        glm_session_free(c.two);
    if (c.one)
        glm_session_free(c.one);
    glm_engine_close(two);
    glm_engine_close(one);
    printf("%s: %d failures\n", failures ? "FAIL" : "PASS", failures);
    return failures ? 1 : 0;
}
