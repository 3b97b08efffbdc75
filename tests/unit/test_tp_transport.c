/* test_tp_transport.c: Check suite for the tcp data transport and control framing over a real
 * socket pair: large crossing exchanges, rank-order sums, out-of-step, silent and closed peers. */
#include <check.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "base/le.h"
#include "tp/transport.h"
#include "tests/common/check_main.h"

typedef struct side {
    tp_transport *t;
    float *mine, *both;
    size_t n;
    uint64_t seq;
    int timeout_ms;
    glm_status st;
    glm_error err;
} side;

static void *run_side(void *arg)
{
    side *s = arg;
    s->st = tp_all_gather(s->t, s->mine, s->both, s->n, s->seq, s->timeout_ms, &s->err);
    return NULL;
}

static void make_pair(tp_transport **a, tp_transport **b)
{
    int sv[2];
    ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    glm_error err;
    *a = tp_tcp_transport_new(sv[0], 0, "rank-1-test", &err);
    *b = tp_tcp_transport_new(sv[1], 1, "rank-0-test", &err);
    ck_assert_ptr_nonnull(*a);
    ck_assert_ptr_nonnull(*b);
}

static side new_side(tp_transport *t, size_t n, uint64_t seq, float base)
{
    side s = {.t = t, .n = n, .seq = seq, .timeout_ms = 5000};
    s.mine = malloc(n * sizeof(float));
    s.both = malloc(2 * n * sizeof(float));
    ck_assert_ptr_nonnull(s.mine);
    ck_assert_ptr_nonnull(s.both);
    for (size_t i = 0; i < n; i++)
        s.mine[i] = base + (float)i * 0.001f;
    return s;
}

static void free_side(side *s)
{
    free(s->mine);
    free(s->both);
}

/* fn(a) and fn(b) on two threads at once (the two ranks), both joined. */
static void run_pair(void *(*fn)(void *), void *a, void *b)
{
    pthread_t ta, tb;
    pthread_create(&ta, NULL, fn, a);
    pthread_create(&tb, NULL, fn, b);
    pthread_join(ta, NULL);
    pthread_join(tb, NULL);
}

static void run_both(side *a, side *b)
{
    run_pair(run_side, a, b);
}

START_TEST(large_exchanges_cross_without_deadlock)
{
    tp_transport *a, *b;
    make_pair(&a, &b);
    size_t n = 4u << 20; /* 16 MiB each way, far beyond the socket buffers */
    side sa = new_side(a, n, 1, 1.0f), sb = new_side(b, n, 1, -7.0f);
    run_both(&sa, &sb);
    ck_assert_int_eq(sa.st, GLM_OK);
    ck_assert_int_eq(sb.st, GLM_OK);
    ck_assert_mem_eq(sa.both, sa.mine, n * sizeof(float));
    ck_assert_mem_eq(sa.both + n, sb.mine, n * sizeof(float));
    ck_assert_mem_eq(sb.both, sa.both, 2 * n * sizeof(float));
    free_side(&sa);
    free_side(&sb);
    tp_transport_free(a);
    tp_transport_free(b);
}
END_TEST

typedef struct strided_side {
    tp_transport *t;
    float mine[300], out[1000];
    glm_status st;
} strided_side;

static void *run_strided(void *arg)
{
    strided_side *s = arg;
    glm_error err;
    s->st = tp_all_gather_at(s->t, s->mine, s->out, 500, 300, 1, 5000, &err);
    return NULL;
}

/* A piece of a larger gather lands in place: rank r's floats at r * stride, the floats between
 * untouched; a stride shorter than the floats is refused by name. */
START_TEST(strided_gathers_land_in_place)
{
    tp_transport *a, *b;
    make_pair(&a, &b);
    static strided_side sa, sb;
    sa.t = a;
    sb.t = b;
    for (int i = 0; i < 300; i++)
        sa.mine[i] = (float)i + 0.25f, sb.mine[i] = -(float)i - 0.5f;
    for (int i = 0; i < 1000; i++)
        sa.out[i] = sb.out[i] = 77.0f;
    run_pair(run_strided, &sa, &sb);
    ck_assert_int_eq(sa.st, GLM_OK);
    ck_assert_int_eq(sb.st, GLM_OK);
    for (int i = 0; i < 1000; i++) {
        float want = i < 300 ? sa.mine[i] : i >= 500 && i < 800 ? sb.mine[i - 500] : 77.0f;
        ck_assert_float_eq(sa.out[i], want);
        ck_assert_float_eq(sb.out[i], want);
    }
    glm_error err;
    ck_assert_int_eq(tp_all_gather_at(a, sa.mine, sa.out, 299, 300, 2, 100, &err), GLM_ERR_ARG);
    ck_assert_ptr_nonnull(strstr(err.message, "300 or more apart, not 299"));
    tp_transport_free(a);
    tp_transport_free(b);
}
END_TEST

typedef struct reduce_side {
    tp_transport *t;
    float buf[4096], scratch[8192];
    glm_status st;
} reduce_side;

static void *run_reduce(void *arg)
{
    reduce_side *s = arg;
    glm_error err;
    for (uint64_t seq = 1; seq <= 200 && (s->st = tp_all_reduce_sum(s->t, s->buf, s->scratch, 4096, seq, 5000, &err)) == GLM_OK; seq++)
        ;
    return NULL;
}

START_TEST(rank_order_sums_are_bit_identical)
{
    tp_transport *a, *b;
    make_pair(&a, &b);
    static reduce_side ra, rb;
    ra.t = a;
    rb.t = b;
    for (int i = 0; i < 4096; i++) {
        ra.buf[i] = 1.0f / (float)(i + 1);
        rb.buf[i] = -3.0f / (float)(i + 7) + 1e-7f * (float)i;
    }
    run_pair(run_reduce, &ra, &rb);
    ck_assert_int_eq(ra.st, GLM_OK);
    ck_assert_int_eq(rb.st, GLM_OK);
    ck_assert_mem_eq(ra.buf, rb.buf, sizeof ra.buf);
    tp_transport_free(a);
    tp_transport_free(b);
}
END_TEST

START_TEST(out_of_step_ranks_are_reported)
{
    tp_transport *a, *b;
    make_pair(&a, &b);
    side sa = new_side(a, 16, 5, 0), sb = new_side(b, 16, 6, 0);
    run_both(&sa, &sb);
    ck_assert_int_eq(sa.st, GLM_ERR_PEER);
    ck_assert_ptr_nonnull(strstr(sa.err.message, "out of step: exchange 5 of 64 bytes here, 6 of 64"));
    ck_assert_str_eq(tp_transport_last_error(a), sa.err.message);
    free_side(&sa);
    free_side(&sb);
    side sc = new_side(a, 16, 7, 0), sd = new_side(b, 32, 7, 0);
    run_both(&sc, &sd);
    ck_assert_int_eq(sc.st, GLM_ERR_PEER);
    ck_assert_int_eq(sd.st, GLM_ERR_PEER);
    free_side(&sc);
    free_side(&sd);
    tp_transport_free(a);
    tp_transport_free(b);
}
END_TEST

static int always_aborted(void *user)
{
    (void)user;
    return 1;
}

START_TEST(silent_closed_and_abandoned_peers_end_in_time)
{
    tp_transport *a, *b;
    make_pair(&a, &b);
    side sa = new_side(a, 4096, 1, 0);
    sa.timeout_ms = 300;
    int64_t t0 = tp_now_ms();
    run_side(&sa);
    int64_t took = tp_now_ms() - t0;
    ck_assert_int_eq(sa.st, GLM_ERR_PEER);
    ck_assert_ptr_nonnull(strstr(sa.err.message, "did not answer exchange 1 in time"));
    ck_assert_int_ge(took, 290);
    ck_assert_int_le(took, 800);

    a->aborted = always_aborted;
    t0 = tp_now_ms();
    sa.timeout_ms = 5000;
    run_side(&sa);
    ck_assert_int_eq(sa.st, GLM_ERR_PEER);
    ck_assert_ptr_nonnull(strstr(sa.err.message, "abandoned"));
    ck_assert_int_le(tp_now_ms() - t0, 200);
    a->aborted = NULL;

    tp_transport_free(b);
    run_side(&sa);
    ck_assert_int_eq(sa.st, GLM_ERR_PEER);
    ck_assert_msg(strstr(sa.err.message, "closed") || strstr(sa.err.message, "failed"), "%s", sa.err.message);
    ck_assert_int_eq(tp_all_gather(a, sa.mine, sa.both, 0, 1, 100, &sa.err), GLM_ERR_ARG);
    ck_assert_int_eq(tp_all_gather(a, sa.mine, sa.both, 4, 0, 100, &sa.err), GLM_ERR_ARG);
    free_side(&sa);
    tp_transport_free(a);
}
END_TEST

/* The owner's answer at a wait's deadline (tp_transport.late_deadline): `grant` more ms each
 * time while `left` answers remain, then 0; the exchanges it was asked about are counted. */
typedef struct lateness {
    int grant_ms, left, asked;
    uint64_t seq_asked;
} lateness;

static int64_t grant_more(void *user, uint64_t seq)
{
    lateness *l = user;
    l->asked++;
    l->seq_asked = seq;
    if (l->left <= 0)
        return 0;
    l->left--;
    return tp_now_ms() + l->grant_ms;
}

/* The peer side of an exchange that begins late. */
typedef struct late_side {
    side s;
    int delay_ms;
} late_side;

static void *run_late(void *arg)
{
    late_side *l = arg;
    struct timespec nap = {l->delay_ms / 1000, (long)(l->delay_ms % 1000) * 1000000L};
    nanosleep(&nap, NULL);
    return run_side(&l->s);
}

/* A wait at its deadline asks its owner: a later deadline (the peer is on its way) keeps it
 * going until the peer comes; none fails it there, as before. */
START_TEST(a_wait_goes_on_while_its_owner_says_the_peer_is_coming)
{
    tp_transport *a, *b;
    make_pair(&a, &b);
    lateness l = {.grant_ms = 100, .left = 100};
    a->late_deadline = grant_more;
    a->abort_user = &l;
    side sa = new_side(a, 1024, 1, 0);
    late_side lb = {new_side(b, 1024, 1, 1), 700};
    sa.timeout_ms = 250;
    pthread_t tb;
    int64_t t0 = tp_now_ms();
    pthread_create(&tb, NULL, run_late, &lb);
    run_side(&sa);
    pthread_join(tb, NULL);
    int64_t took = tp_now_ms() - t0;
    ck_assert_msg(sa.st == GLM_OK, "%s", sa.err.message);
    ck_assert_int_eq(lb.s.st, GLM_OK);
    ck_assert_int_ge(took, 650);
    ck_assert_int_ge(l.asked, 3); /* at 250 ms, then every 100 ms until 700 */
    ck_assert_int_le(l.asked, 6);
    ck_assert_uint_eq(l.seq_asked, 1);
    ck_assert(sa.both[1024] == lb.s.mine[0] && sa.both[0] == sa.mine[0]);

    l = (lateness){.grant_ms = 100, .left = 0}; /* the owner says no: the timeout holds */
    sa.seq = 2;
    t0 = tp_now_ms();
    run_side(&sa);
    took = tp_now_ms() - t0;
    ck_assert_int_eq(sa.st, GLM_ERR_PEER);
    ck_assert_ptr_nonnull(strstr(sa.err.message, "did not answer exchange 2 in time"));
    ck_assert_int_eq(l.asked, 1);
    ck_assert_int_ge(took, 240);
    ck_assert_int_le(took, 700);

    l = (lateness){.grant_ms = 50, .left = 4}; /* granted 4 times, then no: 250 + 4 x 50 */
    sa.seq = 3;
    t0 = tp_now_ms();
    run_side(&sa);
    took = tp_now_ms() - t0;
    ck_assert_int_eq(sa.st, GLM_ERR_PEER);
    ck_assert_int_eq(l.asked, 5);
    ck_assert_int_ge(took, 440);
    ck_assert_int_le(took, 1000);
    free_side(&sa), free_side(&lb.s);
    tp_transport_free(a), tp_transport_free(b);
}
END_TEST

START_TEST(control_frames_with_hostile_lengths_are_refused_unread)
{
    int sv[2];
    ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    glm_error err;
    uint32_t toks[3] = {1, 2, 3};
    tp_msg m = {.type = TP_MSG_STEP}, out;
    m.u.step = (tp_step){.seq = 1, .cmd = TP_STEP_FORWARD, .pos = 4, .n_tokens = 3, .tokens = toks};
    ck_assert_int_eq(tp_ctrl_send(sv[0], &m, tp_now_ms() + 1000, &err), GLM_OK);
    ck_assert_int_eq(tp_ctrl_recv(sv[1], &out, tp_now_ms() + 1000, &err), GLM_OK);
    ck_assert_uint_eq(out.u.step.n_tokens, 3);
    ck_assert_uint_eq(out.u.step.tokens[2], 3);
    tp_msg_clear(&out);

    uint8_t h[TP_FRAME_HEADER_BYTES];
    le_put_u32(h, TP_FRAME_MAGIC);
    le_put_u16(h + 4, TP_MSG_STEP);
    le_put_u16(h + 6, 0);
    le_put_u32(h + 8, 0x7fffffffu);
    ck_assert_int_eq(write(sv[0], h, sizeof h), (ssize_t)sizeof h);
    int64_t t0 = tp_now_ms();
    ck_assert_int_eq(tp_ctrl_recv(sv[1], &out, tp_now_ms() + 1000, &err), GLM_ERR_PEER);
    ck_assert_int_le(tp_now_ms() - t0, 100); /* refused from the header alone */
    ck_assert_ptr_nonnull(strstr(err.message, "more than"));

    /* a header promising bytes that never come: bounded by the deadline */
    le_put_u32(h + 8, 8);
    le_put_u16(h + 4, TP_MSG_ATTACH);
    ck_assert_int_eq(write(sv[0], h, sizeof h), (ssize_t)sizeof h);
    t0 = tp_now_ms();
    ck_assert_int_eq(tp_ctrl_recv(sv[1], &out, tp_now_ms() + 200, &err), GLM_ERR_PEER);
    ck_assert_int_ge(tp_now_ms() - t0, 190);
    ck_assert_ptr_nonnull(strstr(err.message, "timed out"));
    close(sv[0]);
    close(sv[1]);
}
END_TEST

START_TEST(addresses_are_parsed_with_clear_errors)
{
    char host[64], port[8];
    glm_error err;
    ck_assert_int_eq(tp_parse_hostport("10.0.0.2:7070", host, sizeof host, port, sizeof port, &err), GLM_OK);
    ck_assert_str_eq(host, "10.0.0.2");
    ck_assert_str_eq(port, "7070");
    ck_assert_int_eq(tp_parse_hostport("[fe80::1]:9", host, sizeof host, port, sizeof port, &err), GLM_OK);
    ck_assert_str_eq(host, "fe80::1");
    ck_assert_int_eq(tp_parse_hostport("10.0.0.2", host, sizeof host, port, sizeof port, &err), GLM_ERR_ARG);
    ck_assert_ptr_nonnull(strstr(err.message, "HOST:PORT"));
    ck_assert_int_eq(tp_parse_hostport("h:70000", host, sizeof host, port, sizeof port, &err), GLM_ERR_ARG);
    ck_assert_int_eq(tp_parse_hostport(":1", host, sizeof host, port, sizeof port, &err), GLM_ERR_ARG);
    ck_assert_int_eq(tp_parse_hostport("h:1x", host, sizeof host, port, sizeof port, &err), GLM_ERR_ARG);
    ck_assert_int_lt(tp_tcp_connect("127.0.0.1:1", tp_now_ms() + 500, &err), 0);
    ck_assert_ptr_nonnull(strstr(err.message, "cannot connect to 127.0.0.1:1"));
}
END_TEST

int main(void)
{
    Suite *s = suite_create("tp_transport");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, large_exchanges_cross_without_deadlock);
    tcase_add_test(tc, strided_gathers_land_in_place);
    tcase_add_test(tc, rank_order_sums_are_bit_identical);
    tcase_add_test(tc, out_of_step_ranks_are_reported);
    tcase_add_test(tc, silent_closed_and_abandoned_peers_end_in_time);
    tcase_add_test(tc, a_wait_goes_on_while_its_owner_says_the_peer_is_coming);
    tcase_add_test(tc, control_frames_with_hostile_lengths_are_refused_unread);
    tcase_add_test(tc, addresses_are_parsed_with_clear_errors);
    suite_add_tcase(s, tc);
    return test_run_suite(s);
}
