/* tp_hostile.c: a test client that feeds a worker's control port malformed and hostile bytes,
 * one connection per attack, and checks each is refused in time (never trusted, never a hang). */
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/le.h"
#include "tp/protocol.h"
#include "tp/transport.h"

static int answer_timeout_ms = 3000;

/* After an attack: the worker must answer ERROR or close the connection before the deadline. */
static int judge(int fd, const char *name, const char *want_text)
{
    tp_msg m;
    glm_error err = {0};
    int64_t t0 = tp_now_ms();
    glm_status st = tp_ctrl_recv(fd, &m, t0 + answer_timeout_ms, &err);
    int64_t took = tp_now_ms() - t0;
    int ok;
    if (st == GLM_OK && m.type == TP_MSG_ERROR) {
        ok = !want_text || strstr(m.u.error.text, want_text) != NULL;
        printf("%s: %s after %" PRId64 " ms: ERROR \"%s\"\n", name, ok ? "refused" : "WRONG TEXT", took,
               m.u.error.text);
    } else if (st == GLM_OK) {
        ok = 0;
        printf("%s: ACCEPTED (answered %s)\n", name, tp_msg_type_name(m.type));
    } else {
        /* Closed without a word is acceptable only when no text was required. */
        ok = !want_text && strstr(err.message, "timed out") == NULL;
        printf("%s: %s after %" PRId64 " ms: %s\n", name, ok ? "closed" : "NOT REFUSED", took, err.message);
    }
    tp_msg_clear(&m);
    return ok ? 0 : 1;
}

static int send_raw(int fd, const void *p, size_t n)
{
    glm_error err;
    return tp_io_write(fd, p, n, tp_now_ms() + 1000, "attacking", &err) == GLM_OK ? 0 : -1;
}

static void header(uint8_t *h, uint32_t magic, uint16_t type, uint16_t flags, uint32_t len)
{
    le_put_u32(h, magic);
    le_put_u16(h + 4, type);
    le_put_u16(h + 6, flags);
    le_put_u32(h + 8, len);
}

static tp_msg good_hello(const char *version)
{
    tp_msg m = {.type = TP_MSG_HELLO};
    m.u.hello.protocol = TP_PROTOCOL_VERSION;
    m.u.hello.rank = 0;
    m.u.hello.peer_rank = 1;
    snprintf(m.u.hello.version, sizeof m.u.hello.version, "%s", version);
    snprintf(m.u.hello.model_name, sizeof m.u.hello.model_name, "glm5_next");
    m.u.hello.config_hash = 1;
    m.u.hello.weights_hash = 2;
    m.u.hello.settings.world = 2;
    m.u.hello.settings.transport = TP_TRANSPORT_TCP;
    return m;
}

#define N_ATTACKS 10

/* A keyless worker on loopback answers a HELLO with CHALLENGE and compares the HELLO only once
 * the head has sent AUTH: send a keyless AUTH, so the comparison is what is judged. */
static int pass_challenge(int fd)
{
    tp_msg m;
    glm_error err;
    if (tp_ctrl_recv(fd, &m, tp_now_ms() + answer_timeout_ms, &err) != GLM_OK || m.type != TP_MSG_CHALLENGE) {
        printf("no CHALLENGE after HELLO: %s\n", m.type == TP_MSG_ERROR ? m.u.error.text : err.message);
        return -1;
    }
    tp_msg auth = {.type = TP_MSG_AUTH};
    if (tp_ctrl_send(fd, &auth, tp_now_ms() + 1000, &err) != GLM_OK)
        return -1;
    /* the worker's own proof comes before it compares the HELLOs */
    if (tp_ctrl_recv(fd, &m, tp_now_ms() + answer_timeout_ms, &err) != GLM_OK || m.type != TP_MSG_AUTH) {
        printf("no AUTH from the worker: %s\n", m.type == TP_MSG_ERROR ? m.u.error.text : err.message);
        return -1;
    }
    return 0;
}

static int attack(const char *addr, int which)
{
    glm_error err;
    if (which >= N_ATTACKS)
        return -1;
    int fd = tp_tcp_connect(addr, tp_now_ms() + 2000, &err);
    if (fd < 0) {
        printf("attack %d: cannot connect: %s\n", which, err.message);
        return 1;
    }
    uint8_t buf[4096];
    int bad = 0;
    const char *name = "";
    const char *want = NULL;
    switch (which) {
    case 0:
        name = "http request";
        bad = send_raw(fd, "GET / HTTP/1.1\r\nHost: x\r\n\r\n", 27);
        want = "not a glmchat rank";
        break;
    case 1: {
        name = "random bytes";
        uint64_t z = 12345;
        for (size_t i = 0; i < sizeof buf; i++) {
            z = z * 6364136223846793005ull + 1442695040888963407ull;
            buf[i] = (uint8_t)(z >> 56);
        }
        bad = send_raw(fd, buf, sizeof buf);
        break;
    }
    case 2:
        name = "huge length";
        header(buf, TP_FRAME_MAGIC, TP_MSG_HELLO, 0, 0xfffffff0u);
        bad = send_raw(fd, buf, TP_FRAME_HEADER_BYTES);
        want = "more than";
        break;
    case 3:
        name = "unknown type";
        header(buf, TP_FRAME_MAGIC, 99, 0, 4);
        bad = send_raw(fd, buf, TP_FRAME_HEADER_BYTES + 4);
        want = "unknown message type";
        break;
    case 4:
        name = "truncated hello then silence";
        header(buf, TP_FRAME_MAGIC, TP_MSG_HELLO, 0, 60);
        bad = send_raw(fd, buf, TP_FRAME_HEADER_BYTES + 10);
        break;
    case 5: {
        name = "hello with a bad string";
        tp_msg m = good_hello("0.1.0");
        uint8_t *frame;
        size_t len;
        tp_msg_encode(&m, &frame, &len, &err);
        frame[TP_FRAME_HEADER_BYTES + 8 + 2] = 0x01; /* a control byte inside the version */
        bad = send_raw(fd, frame, len);
        free(frame);
        want = "malformed";
        break;
    }
    case 6: {
        name = "step before hello";
        uint32_t tok = 7;
        tp_msg m = {.type = TP_MSG_STEP};
        m.u.step.seq = 1;
        m.u.step.cmd = TP_STEP_FORWARD;
        m.u.step.n_tokens = 1;
        m.u.step.tokens = &tok;
        bad = tp_ctrl_send(fd, &m, tp_now_ms() + 1000, &err) != GLM_OK;
        want = "instead of HELLO";
        break;
    }
    case 7: {
        name = "hello from another version";
        tp_msg m = good_hello("9.9.9-other");
        bad = tp_ctrl_send(fd, &m, tp_now_ms() + 1000, &err) != GLM_OK || pass_challenge(fd) != 0;
        want = "version differs";
        break;
    }
    case 8: {
        name = "hello from another protocol";
        tp_msg m = good_hello(glm_version());
        m.u.hello.protocol = TP_PROTOCOL_VERSION + 1;
        bad = tp_ctrl_send(fd, &m, tp_now_ms() + 1000, &err) != GLM_OK;
        want = "protocol version differs";
        break;
    }
    case 9: {
        name = "hello claiming rank 1";
        tp_msg m = good_hello(glm_version());
        m.u.hello.rank = 1;
        m.u.hello.peer_rank = 0;
        bad = tp_ctrl_send(fd, &m, tp_now_ms() + 1000, &err) != GLM_OK || pass_challenge(fd) != 0;
        want = "claims rank 1 and gives this worker rank 0; a head is rank 0";
        break;
    }
    default:
        close(fd);
        return -1;
    }
    int rc = bad ? (printf("%s: could not send the attack\n", name), 1) : judge(fd, name, want);
    close(fd);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: tp_hostile HOST:PORT [answer-timeout-ms]\n");
        return 2;
    }
    if (argc > 2)
        answer_timeout_ms = atoi(argv[2]);
    signal(SIGPIPE, SIG_IGN);
    setvbuf(stdout, NULL, _IOLBF, 0);
    int failed = 0;
    for (int i = 0;; i++) {
        int rc = attack(argv[1], i);
        if (rc < 0)
            break;
        failed += rc;
    }
    printf("hostile: %d attacks not refused properly\n", failed);
    return failed ? 1 : 0;
}
