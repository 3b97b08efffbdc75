/* test_tp_protocol.c: Check suite for the ranks' control protocol: every message round-trips,
 * every malformed frame or field is refused with a message, HELLO differences are named. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/le.h"
#include "tp/nccl.h"
#include "tp/protocol.h"
#include "tests/common/check_main.h"

/* Encodes m, checks and decodes the frame back into out. */
static glm_status round_trip(const tp_msg *m, tp_msg *out, glm_error *err)
{
    uint8_t *frame;
    size_t len;
    glm_status st = tp_msg_encode(m, &frame, &len, err);
    if (st != GLM_OK)
        return st;
    uint32_t type, plen;
    st = tp_frame_header_decode(frame, &type, &plen, err);
    if (st == GLM_OK) {
        ck_assert_uint_eq(plen + TP_FRAME_HEADER_BYTES, len);
        st = tp_msg_decode(type, frame + TP_FRAME_HEADER_BYTES, plen, out, err);
    }
    free(frame);
    return st;
}

static tp_hello sample_hello(void)
{
    tp_hello h = {0};
    h.protocol = TP_PROTOCOL_VERSION;
    h.rank = 0;
    strcpy(h.version, "0.1.0");
    strcpy(h.model_name, "glm5_next");
    h.config_hash = 0x1122334455667788ull;
    h.weights_hash = 0x99aabbccddeeff00ull;
    h.settings = (tp_settings){2, TP_TRANSPORT_TCP, 1000, 5000, 1 << 20, 1, 1};
    h.session = 42;
    h.peer_rank = 1;
    return h;
}

START_TEST(hello_round_trips)
{
    tp_msg m = {.type = TP_MSG_HELLO}, out;
    m.u.hello = sample_hello();
    glm_error err;
    ck_assert_int_eq(round_trip(&m, &out, &err), GLM_OK);
    ck_assert_int_eq(out.type, TP_MSG_HELLO);
    ck_assert_str_eq(out.u.hello.version, "0.1.0");
    ck_assert_str_eq(out.u.hello.model_name, "glm5_next");
    ck_assert(out.u.hello.config_hash == m.u.hello.config_hash);
    ck_assert(out.u.hello.weights_hash == m.u.hello.weights_hash);
    ck_assert(memcmp(&out.u.hello.settings, &m.u.hello.settings, sizeof m.u.hello.settings) == 0);
    ck_assert(out.u.hello.session == 42);
}
END_TEST

START_TEST(step_round_trips_and_owns_its_tokens)
{
    uint32_t toks[5] = {1, 154879, 0, 7, 99};
    tp_msg m = {.type = TP_MSG_STEP}, out;
    m.u.step = (tp_step){.seq = 9, .cmd = TP_STEP_FORWARD, .pos = 100, .n_tokens = 5, .tokens = toks};
    glm_error err;
    ck_assert_int_eq(round_trip(&m, &out, &err), GLM_OK);
    ck_assert(out.u.step.seq == 9);
    ck_assert_uint_eq(out.u.step.pos, 100);
    ck_assert_uint_eq(out.u.step.n_tokens, 5);
    ck_assert(out.u.step.tokens != toks);
    ck_assert_mem_eq(out.u.step.tokens, toks, sizeof toks);
    tp_msg_clear(&out);
    ck_assert_ptr_null(out.u.step.tokens);

    m.u.step = (tp_step){.seq = 10, .cmd = TP_STEP_TRUNCATE, .pos = 50};
    ck_assert_int_eq(round_trip(&m, &out, &err), GLM_OK);
    ck_assert_uint_eq(out.u.step.cmd, TP_STEP_TRUNCATE);
    ck_assert_ptr_null(out.u.step.tokens);
    tp_msg_clear(&out);

    m.u.step = (tp_step){.seq = 11, .cmd = TP_STEP_MARK, .pos = 50};
    ck_assert_int_eq(round_trip(&m, &out, &err), GLM_OK);
    ck_assert_uint_eq(out.u.step.cmd, TP_STEP_MARK);
    ck_assert_uint_eq(out.u.step.pos, 50);
    tp_msg_clear(&out);

    m.u.step = (tp_step){.seq = 12, .cmd = TP_STEP_FORWARD_ALL, .pos = 50, .n_tokens = 5, .tokens = toks};
    ck_assert_int_eq(round_trip(&m, &out, &err), GLM_OK);
    ck_assert_uint_eq(out.u.step.cmd, TP_STEP_FORWARD_ALL);
    ck_assert_mem_eq(out.u.step.tokens, toks, sizeof toks);
    tp_msg_clear(&out);

    /* a verification window carries its drafted tokens; going back inside it carries none */
    m.u.step = (tp_step){.seq = 12, .cmd = TP_STEP_VERIFY, .pos = 55, .n_tokens = 5, .tokens = toks};
    ck_assert_int_eq(round_trip(&m, &out, &err), GLM_OK);
    ck_assert_uint_eq(out.u.step.cmd, TP_STEP_VERIFY);
    ck_assert_uint_eq(out.u.step.pos, 55);
    ck_assert_mem_eq(out.u.step.tokens, toks, sizeof toks);
    ck_assert(tp_step_is_forward(TP_STEP_VERIFY) && !tp_step_is_forward(TP_STEP_REWIND));
    tp_msg_clear(&out);
    m.u.step = (tp_step){.seq = 12, .cmd = TP_STEP_REWIND, .pos = 57};
    ck_assert_int_eq(round_trip(&m, &out, &err), GLM_OK);
    ck_assert_uint_eq(out.u.step.cmd, TP_STEP_REWIND);
    ck_assert_uint_eq(out.u.step.pos, 57);
    ck_assert_uint_eq(out.u.step.n_tokens, 0);
    tp_msg_clear(&out);

    /* a state kept on the worker carries no tokens; restoring one carries the state's tokens */
    m.u.step = (tp_step){.seq = 12, .cmd = TP_STEP_KEEP, .pos = 64};
    ck_assert_int_eq(round_trip(&m, &out, &err), GLM_OK);
    ck_assert_uint_eq(out.u.step.cmd, TP_STEP_KEEP);
    ck_assert_uint_eq(out.u.step.pos, 64);
    ck_assert_uint_eq(out.u.step.n_tokens, 0);
    tp_msg_clear(&out);
    m.u.step = (tp_step){.seq = 12, .cmd = TP_STEP_RESTORE, .pos = 5, .n_tokens = 5, .tokens = toks};
    ck_assert_int_eq(round_trip(&m, &out, &err), GLM_OK);
    ck_assert_uint_eq(out.u.step.cmd, TP_STEP_RESTORE);
    ck_assert_mem_eq(out.u.step.tokens, toks, sizeof toks);
    ck_assert(tp_step_exchanges(TP_STEP_RESTORE) && !tp_step_is_forward(TP_STEP_RESTORE) &&
              !tp_step_exchanges(TP_STEP_KEEP));
    tp_msg_clear(&out);

    /* the conversation slot travels; one past the last cannot even be encoded */
    m.u.step = (tp_step){.seq = 13, .slot = TP_MAX_SLOTS - 1, .cmd = TP_STEP_CLOSE};
    ck_assert_int_eq(round_trip(&m, &out, &err), GLM_OK);
    ck_assert_uint_eq(out.u.step.slot, TP_MAX_SLOTS - 1);
    ck_assert_uint_eq(out.u.step.cmd, TP_STEP_CLOSE);
    tp_msg_clear(&out);
    m.u.step.slot = TP_MAX_SLOTS;
    uint8_t *frame;
    size_t len;
    ck_assert_int_eq(tp_msg_encode(&m, &frame, &len, &err), GLM_ERR_ARG);
    ck_assert_ptr_nonnull(strstr(err.message, "slot 16"));
}
END_TEST

START_TEST(small_messages_round_trip)
{
    glm_error err;
    tp_msg m, out;
    m = (tp_msg){.type = TP_MSG_HEARTBEAT};
    m.u.heartbeat.seq = 3;
    m.u.heartbeat.sent_ms = 123456789;
    m.u.heartbeat.exchanges = 0x1234567890ull;
    m.u.heartbeat.steps = 0xabcdef01234ull;
    m.u.heartbeat.busy = 1;
    ck_assert_int_eq(round_trip(&m, &out, &err), GLM_OK);
    ck_assert(out.u.heartbeat.seq == 3 && out.u.heartbeat.sent_ms == 123456789);
    ck_assert(out.u.heartbeat.exchanges == 0x1234567890ull && out.u.heartbeat.busy == 1);
    ck_assert(out.u.heartbeat.steps == 0xabcdef01234ull);
    /* a busy flag other than 0 or 1, and heartbeats of the older 16- and 28-byte forms, are
     * refused */
    uint8_t hb[36] = {0};
    hb[32] = 2;
    ck_assert_int_eq(tp_msg_decode(TP_MSG_HEARTBEAT, hb, sizeof hb, &out, &err), GLM_ERR_PEER);
    ck_assert_ptr_nonnull(strstr(err.message, "busy flag is neither 0 nor 1"));
    hb[32] = 0;
    ck_assert_int_eq(tp_msg_decode(TP_MSG_HEARTBEAT, hb, 16, &out, &err), GLM_ERR_PEER);
    ck_assert_ptr_nonnull(strstr(err.message, "shorter than its fields"));
    ck_assert_int_eq(tp_msg_decode(TP_MSG_HEARTBEAT, hb, 28, &out, &err), GLM_ERR_PEER);
    ck_assert_ptr_nonnull(strstr(err.message, "shorter than its fields"));
    tp_msg_error(&m, 7, "worker says: \x01 bad\tthing\n%d", 5);
    ck_assert_int_eq(round_trip(&m, &out, &err), GLM_OK);
    ck_assert_uint_eq(out.u.error.code, 7);
    ck_assert_str_eq(out.u.error.text, "worker says:   bad\tthing\n5");
    m = (tp_msg){.type = TP_MSG_PARAMS};
    m.u.params.len = 3;
    memcpy(m.u.params.bytes, "abc", 3);
    ck_assert_int_eq(round_trip(&m, &out, &err), GLM_OK);
    ck_assert_uint_eq(out.u.params.len, 3);
    ck_assert_mem_eq(out.u.params.bytes, "abc", 3);
    m = (tp_msg){.type = TP_MSG_ATTACH};
    m.u.attach.token = 0xfeedfacecafebeefull;
    ck_assert_int_eq(round_trip(&m, &out, &err), GLM_OK);
    ck_assert(out.u.attach.token == 0xfeedfacecafebeefull);
    m = (tp_msg){.type = TP_MSG_BYE};
    ck_assert_int_eq(round_trip(&m, &out, &err), GLM_OK);
    ck_assert_int_eq(out.type, TP_MSG_BYE);
    m = (tp_msg){.type = TP_MSG_CHALLENGE};
    m.u.challenge.keyed = 1;
    memset(m.u.challenge.nonce, 0xa5, sizeof m.u.challenge.nonce);
    ck_assert_int_eq(round_trip(&m, &out, &err), GLM_OK);
    ck_assert_uint_eq(out.u.challenge.keyed, 1);
    ck_assert_mem_eq(out.u.challenge.nonce, m.u.challenge.nonce, TP_AUTH_NONCE_BYTES);
    m.u.challenge.keyed = 2; /* neither keyless nor keyed */
    ck_assert_int_eq(round_trip(&m, &out, &err), GLM_ERR_PEER);
    ck_assert_ptr_nonnull(strstr(err.message, "CHALLENGE message is malformed"));
    m = (tp_msg){.type = TP_MSG_AUTH};
    for (unsigned i = 0; i < TP_AUTH_NONCE_BYTES; i++) {
        m.u.auth.nonce[i] = (uint8_t)i;
        m.u.auth.proof[i] = (uint8_t)(255 - i);
    }
    ck_assert_int_eq(round_trip(&m, &out, &err), GLM_OK);
    ck_assert_mem_eq(out.u.auth.nonce, m.u.auth.nonce, TP_AUTH_NONCE_BYTES);
    ck_assert_mem_eq(out.u.auth.proof, m.u.auth.proof, TP_AUTH_PROOF_BYTES);
    uint8_t short_auth[40] = {0};
    ck_assert_int_eq(tp_msg_decode(TP_MSG_AUTH, short_auth, sizeof short_auth, &out, &err), GLM_ERR_PEER);
}
END_TEST

START_TEST(long_error_text_is_cut_on_a_character_boundary)
{
    char big[1500];
    /* 'é' is two bytes: 1000 is even, so shift by one byte to force a cut inside a character. */
    big[0] = 'x';
    for (int i = 1; i + 1 < (int)sizeof big; i += 2) {
        big[i] = (char)0xc3;
        big[i + 1] = (char)0xa9;
    }
    big[sizeof big - 1] = '\0';
    tp_msg m, out;
    tp_msg_error(&m, 1, "%s", big);
    glm_error err;
    ck_assert_int_eq(round_trip(&m, &out, &err), GLM_OK);
    ck_assert_uint_le(strlen(out.u.error.text), TP_TEXT_MAX);
    ck_assert_uint_ge(strlen(out.u.error.text), TP_TEXT_MAX - 2);
}
END_TEST

START_TEST(bad_headers_are_refused)
{
    uint8_t h[TP_FRAME_HEADER_BYTES];
    uint32_t type, len;
    glm_error err;
    memcpy(h, "GET / HTTP/1", 12);
    ck_assert_int_eq(tp_frame_header_decode(h, &type, &len, &err), GLM_ERR_PEER);
    ck_assert_ptr_nonnull(strstr(err.message, "not a glmchat rank"));
    le_put_u32(h, TP_FRAME_MAGIC);
    le_put_u16(h + 4, 0);
    le_put_u16(h + 6, 0);
    le_put_u32(h + 8, 0);
    ck_assert_int_eq(tp_frame_header_decode(h, &type, &len, &err), GLM_ERR_PEER);
    ck_assert_ptr_nonnull(strstr(err.message, "unknown message type 0"));
    le_put_u16(h + 4, TP_MSG_BYE);
    le_put_u16(h + 6, 1);
    ck_assert_int_eq(tp_frame_header_decode(h, &type, &len, &err), GLM_ERR_PEER);
    ck_assert_ptr_nonnull(strstr(err.message, "flags"));
    le_put_u16(h + 6, 0);
    le_put_u32(h + 8, 5);
    ck_assert_int_eq(tp_frame_header_decode(h, &type, &len, &err), GLM_ERR_PEER);
    ck_assert_ptr_nonnull(strstr(err.message, "claims 5 bytes"));
    le_put_u32(h + 8, 4);
    ck_assert_int_eq(tp_frame_header_decode(h, &type, &len, &err), GLM_OK);
    ck_assert_uint_eq(type, TP_MSG_BYE);
    ck_assert_uint_eq(len, 4);
}
END_TEST

/* Encodes a STEP, then lets the test corrupt its payload before decoding. */
static glm_status decode_corrupted_step(void (*corrupt)(uint8_t *payload, size_t *len), glm_error *err)
{
    uint32_t toks[2] = {5, 6};
    tp_msg m = {.type = TP_MSG_STEP}, out;
    m.u.step = (tp_step){.seq = 1, .cmd = TP_STEP_FORWARD, .pos = 0, .n_tokens = 2, .tokens = toks};
    uint8_t *frame;
    size_t len;
    ck_assert_int_eq(tp_msg_encode(&m, &frame, &len, err), GLM_OK);
    size_t plen = len - TP_FRAME_HEADER_BYTES;
    corrupt(frame + TP_FRAME_HEADER_BYTES, &plen);
    glm_status st = tp_msg_decode(TP_MSG_STEP, frame + TP_FRAME_HEADER_BYTES, plen, &out, err);
    free(frame);
    if (st == GLM_OK)
        tp_msg_clear(&out);
    return st;
}

static void zero_seq(uint8_t *p, size_t *len) { (void)len; le_put_u64(p, 0); }
static void bad_cmd(uint8_t *p, size_t *len) { (void)len; le_put_u32(p + 8, TP_STEP_RESTORE + 1); }
static void more_tokens(uint8_t *p, size_t *len) { (void)len; le_put_u32(p + 16, 3); }
static void huge_tokens(uint8_t *p, size_t *len) { (void)len; le_put_u32(p + 16, 0xffffffffu); }
static void slot_past_the_last(uint8_t *p, size_t *len) { (void)len; le_put_u32(p + 20, TP_MAX_SLOTS); }
static void close_with_tokens(uint8_t *p, size_t *len) { (void)len; le_put_u32(p + 8, TP_STEP_CLOSE); }
static void short_by_one(uint8_t *p, size_t *len) { (void)p; *len -= 1; }
static void position_overflow(uint8_t *p, size_t *len) { (void)len; le_put_u32(p + 12, 0xffffffffu); }
static void reset_with_tokens(uint8_t *p, size_t *len) { (void)len; le_put_u32(p + 8, TP_STEP_RESET); }
static void mark_with_tokens(uint8_t *p, size_t *len) { (void)len; le_put_u32(p + 8, TP_STEP_MARK); }
static void rewind_with_tokens(uint8_t *p, size_t *len) { (void)len; le_put_u32(p + 8, TP_STEP_REWIND); }
static void keep_with_tokens(uint8_t *p, size_t *len) { (void)len; le_put_u32(p + 8, TP_STEP_KEEP); }
static void restore_not_at_its_count(uint8_t *p, size_t *len)
{
    (void)len;
    le_put_u32(p + 8, TP_STEP_RESTORE);
    le_put_u32(p + 12, le_get_u32(p + 16) + 1); /* pos one past its tokens */
}
static void restore_without_tokens(uint8_t *p, size_t *len)
{
    le_put_u32(p + 8, TP_STEP_RESTORE);
    le_put_u32(p + 12, 0);
    le_put_u32(p + 16, 0);
    *len = 24;
}
static void verify_too_long(uint8_t *p, size_t *len)
{
    (void)len;
    le_put_u32(p + 8, TP_STEP_VERIFY);
    le_put_u32(p + 16, TP_VERIFY_MAX_TOKENS + 1); /* (refused before its length is checked) */
}
static void verify_without_tokens(uint8_t *p, size_t *len)
{
    le_put_u32(p + 8, TP_STEP_VERIFY);
    le_put_u32(p + 16, 0);
    *len = 24; /* the header alone */
}

START_TEST(bad_steps_are_refused)
{
    void (*cases[])(uint8_t *, size_t *) = {zero_seq, bad_cmd, more_tokens, huge_tokens, slot_past_the_last,
                                           short_by_one, position_overflow, reset_with_tokens,
                                           mark_with_tokens, close_with_tokens, rewind_with_tokens,
                                           verify_without_tokens, verify_too_long, keep_with_tokens,
                                           restore_not_at_its_count, restore_without_tokens};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        glm_error err = {0};
        ck_assert_msg(decode_corrupted_step(cases[i], &err) == GLM_ERR_PEER, "case %zu accepted", i);
        ck_assert_ptr_nonnull(strstr(err.message, "STEP"));
    }
}
END_TEST

/* Two ranks keep version 4's HELLO layout (the peer rank implied); more carry it last. */
START_TEST(hello_gives_the_worker_its_rank_among_n)
{
    glm_error err;
    uint8_t *frame;
    size_t len, len2;
    tp_msg m = {.type = TP_MSG_HELLO}, out;
    m.u.hello = sample_hello();
    ck_assert_int_eq(tp_msg_encode(&m, &frame, &len2, &err), GLM_OK);
    ck_assert_int_eq(tp_msg_decode(TP_MSG_HELLO, frame + TP_FRAME_HEADER_BYTES, len2 - TP_FRAME_HEADER_BYTES,
                                   &out, &err), GLM_OK);
    ck_assert_uint_eq(out.u.hello.peer_rank, 1); /* implied: the worker of two */
    free(frame);
    m.u.hello.settings.world = 4;
    m.u.hello.peer_rank = 3;
    ck_assert_int_eq(tp_msg_encode(&m, &frame, &len, &err), GLM_OK);
    ck_assert_uint_eq(len, len2 + 4);
    uint8_t *p = frame + TP_FRAME_HEADER_BYTES;
    size_t plen = len - TP_FRAME_HEADER_BYTES;
    ck_assert_int_eq(tp_msg_decode(TP_MSG_HELLO, p, plen, &out, &err), GLM_OK);
    ck_assert_uint_eq(out.u.hello.settings.world, 4);
    ck_assert_uint_eq(out.u.hello.peer_rank, 3);
    le_put_u32(p + plen - 4, 4); /* rank 4 of 4 */
    ck_assert_int_eq(tp_msg_decode(TP_MSG_HELLO, p, plen, &out, &err), GLM_ERR_PEER);
    ck_assert_msg(strstr(err.message, "its ranks are not two different ranks of the split"), "%s", err.message);
    le_put_u32(p + plen - 4, 0); /* the head's own rank */
    ck_assert_int_eq(tp_msg_decode(TP_MSG_HELLO, p, plen, &out, &err), GLM_ERR_PEER);
    free(frame);
    for (uint32_t world = 0; world < 20; world += 17) { /* 0 and 17: outside 2 .. 16 */
        m.u.hello.settings.world = world;
        ck_assert_int_eq(tp_msg_encode(&m, &frame, &len, &err), GLM_OK);
        ck_assert_int_eq(tp_msg_decode(TP_MSG_HELLO, frame + TP_FRAME_HEADER_BYTES,
                                       len - TP_FRAME_HEADER_BYTES, &out, &err), GLM_ERR_PEER);
        ck_assert_msg(strstr(err.message, "the number of ranks is not 2 to 16"), "%s", err.message);
        free(frame);
    }
}
END_TEST

START_TEST(bad_strings_and_trailing_bytes_are_refused)
{
    tp_msg m = {.type = TP_MSG_HELLO}, out;
    m.u.hello = sample_hello();
    uint8_t *frame;
    size_t len;
    glm_error err;
    ck_assert_int_eq(tp_msg_encode(&m, &frame, &len, &err), GLM_OK);
    uint8_t *p = frame + TP_FRAME_HEADER_BYTES;
    size_t plen = len - TP_FRAME_HEADER_BYTES;
    /* version string starts at 8 (u16 length), its bytes at 10 */
    uint8_t saved = p[10];
    p[10] = 0xff; /* not UTF-8 */
    ck_assert_int_eq(tp_msg_decode(TP_MSG_HELLO, p, plen, &out, &err), GLM_ERR_PEER);
    p[10] = 0x00; /* NUL inside */
    ck_assert_int_eq(tp_msg_decode(TP_MSG_HELLO, p, plen, &out, &err), GLM_ERR_PEER);
    p[10] = saved;
    le_put_u16(p + 8, 500); /* longer than allowed */
    ck_assert_int_eq(tp_msg_decode(TP_MSG_HELLO, p, plen, &out, &err), GLM_ERR_PEER);
    le_put_u16(p + 8, 5);
    ck_assert_int_eq(tp_msg_decode(TP_MSG_HELLO, p, plen, &out, &err), GLM_OK);
    ck_assert_int_eq(tp_msg_decode(TP_MSG_HELLO, p, plen - 1, &out, &err), GLM_ERR_PEER);
    free(frame);

    uint8_t bye[5] = {0, 0, 0, 0, 9};
    ck_assert_int_eq(tp_msg_decode(TP_MSG_BYE, bye, 5, &out, &err), GLM_ERR_PEER);
    ck_assert_int_eq(tp_msg_decode(TP_MSG_BYE, bye, 4, &out, &err), GLM_OK);
    ck_assert_int_eq(tp_msg_decode(77, bye, 4, &out, &err), GLM_ERR_PEER);
    /* overlong encodings and surrogates are not UTF-8 */
    uint8_t error_msg[4 + 2 + 3] = {1, 0, 0, 0, 3, 0, 0xed, 0xa0, 0x80};
    ck_assert_int_eq(tp_msg_decode(TP_MSG_ERROR, error_msg, sizeof error_msg, &out, &err), GLM_ERR_PEER);
    uint8_t overlong[4 + 2 + 2] = {1, 0, 0, 0, 2, 0, 0xc0, 0xaf};
    ck_assert_int_eq(tp_msg_decode(TP_MSG_ERROR, overlong, sizeof overlong, &out, &err), GLM_ERR_PEER);
}
END_TEST

/* The nccl bootstrap: rank 0's unique id reaches a worker byte for byte over the control
 * connection; a short, long or all-zero id is refused, and a version 5 peer (which knows no nccl)
 * is refused by its version before any id is sent. */
START_TEST(nccl_id_round_trips_and_bad_ids_are_refused)
{
    tp_msg m = {.type = TP_MSG_NCCL_ID}, out;
    for (unsigned i = 0; i < TP_NCCL_ID_BYTES; i++)
        m.u.nccl_id.id[i] = (uint8_t)(i * 37u + 11u);
    glm_error err;
    ck_assert_int_eq(round_trip(&m, &out, &err), GLM_OK);
    ck_assert_int_eq(out.type, TP_MSG_NCCL_ID);
    ck_assert_mem_eq(out.u.nccl_id.id, m.u.nccl_id.id, TP_NCCL_ID_BYTES);
    ck_assert_str_eq(tp_msg_type_name(TP_MSG_NCCL_ID), "NCCL_ID");

    /* a frame header claiming more than the id is refused before the payload is read */
    uint8_t h[TP_FRAME_HEADER_BYTES];
    uint32_t type, len;
    le_put_u32(h, TP_FRAME_MAGIC);
    le_put_u16(h + 4, TP_MSG_NCCL_ID);
    le_put_u16(h + 6, 0);
    le_put_u32(h + 8, TP_NCCL_ID_BYTES + 1);
    ck_assert_int_eq(tp_frame_header_decode(h, &type, &len, &err), GLM_ERR_PEER);
    ck_assert_ptr_nonnull(strstr(err.message, "claims 129 bytes"));

    ck_assert_int_eq(tp_msg_decode(TP_MSG_NCCL_ID, m.u.nccl_id.id, TP_NCCL_ID_BYTES - 1, &out, &err),
                     GLM_ERR_PEER);
    ck_assert_ptr_nonnull(strstr(err.message, "shorter than the 128-byte unique id"));
    uint8_t zero[TP_NCCL_ID_BYTES] = {0};
    ck_assert_int_eq(tp_msg_decode(TP_MSG_NCCL_ID, zero, sizeof zero, &out, &err), GLM_ERR_PEER);
    ck_assert_ptr_nonnull(strstr(err.message, "all zero"));
    tp_msg empty = {.type = TP_MSG_NCCL_ID};
    uint8_t *frame = NULL;
    size_t flen = 0;
    ck_assert_int_eq(tp_msg_encode(&empty, &frame, &flen, &err), GLM_ERR_ARG);
    ck_assert_ptr_null(frame);
    ck_assert_ptr_nonnull(strstr(err.message, "all-zero NCCL unique id"));
}
END_TEST

START_TEST(hello_with_nccl_round_trips_and_version_6_is_refused_by_name)
{
    tp_msg m = {.type = TP_MSG_HELLO}, out;
    m.u.hello = sample_hello();
    m.u.hello.settings.world = 4;
    m.u.hello.settings.transport = TP_TRANSPORT_NCCL;
    m.u.hello.peer_rank = 3;
    glm_error err;
    ck_assert_int_eq(round_trip(&m, &out, &err), GLM_OK);
    ck_assert_uint_eq(out.u.hello.settings.transport, TP_TRANSPORT_NCCL);
    ck_assert_str_eq(tp_transport_kind_name(TP_TRANSPORT_NCCL), "nccl");
    ck_assert_uint_eq(TP_PROTOCOL_VERSION, 13);

    /* 12: no kept states on the worker (a head's KEEP and RESTORE steps would be refused as
     * unknown, and its restore's exchange would not pair); 11: no verification windows (a drafting head's windows would be refused as unknown
     * steps); 10: a long CUDA chunk's partial sums exchanged whole where this build exchanges halves (the
     * exchanges would not pair); 9: a prefill chunk's indexer query exact where this build rounds
     * it (the ranks would select differently); 8: without the cancel flags' exchange (it would
     * fall out of step) */
    tp_hello mine = m.u.hello, old = m.u.hello;
    old.rank = 3;
    old.peer_rank = 0;
    for (uint32_t v = 8; v <= 12; v++) {
        char want[80];
        old.protocol = v;
        snprintf(want, sizeof want, "rank protocol version differs: 13 here, %u on the worker", v);
        ck_assert_int_eq(tp_hello_compare(&mine, &old, "worker", &err), GLM_ERR_PEER);
        ck_assert_msg(strstr(err.message, want) != NULL, "%s", err.message);
    }

    tp_hello tcp = old;
    tcp.protocol = TP_PROTOCOL_VERSION;
    tcp.settings.transport = TP_TRANSPORT_TCP;
    ck_assert_int_eq(tp_hello_compare(&mine, &tcp, "worker", &err), GLM_ERR_PEER);
    ck_assert_ptr_nonnull(strstr(err.message, "transport differs: nccl here, tcp on the worker"));

    /* a transport past nccl is still unknown */
    m.u.hello.settings.transport = TP_TRANSPORT_NCCL + 1;
    ck_assert_int_eq(round_trip(&m, &out, &err), GLM_ERR_PEER);
    ck_assert_ptr_nonnull(strstr(err.message, "transport is unknown"));
}
END_TEST

#ifdef HAVE_NCCL
/* A CUDA build with NCCL: rank 0's id comes from libnccl (loaded here, no GPU needed) and crosses
 * as NCCL_ID byte for byte; a machine without libnccl.so.2 is refused by name instead. Joining a
 * communicator whose other rank never comes (or without a GPU) fails within its deadline. */
START_TEST(nccl_makes_an_id_and_a_lone_rank_fails_in_time)
{
    tp_msg m = {.type = TP_MSG_NCCL_ID}, out;
    glm_error err = {0};
    glm_status st = tp_nccl_unique_id(m.u.nccl_id.id, &err);
    if (st != GLM_OK) {
        ck_assert_int_eq(st, GLM_ERR_UNSUPPORTED);
        ck_assert_ptr_nonnull(strstr(err.message, "--transport nccl: NCCL is not installed here"));
        return;
    }
    ck_assert_int_eq(round_trip(&m, &out, &err), GLM_OK);
    ck_assert_mem_eq(out.u.nccl_id.id, m.u.nccl_id.id, TP_NCCL_ID_BYTES);
    int64_t t0 = tp_now_ms();
    tp_transport *t = tp_nccl_transport_new(m.u.nccl_id.id, 0, 2, 1500, &err);
    ck_assert_ptr_null(t);
    ck_assert_msg(tp_now_ms() - t0 < 15000, "a lone rank waited %lld ms", (long long)(tp_now_ms() - t0));
    ck_assert_ptr_nonnull(strstr(err.message, "--transport nccl: "));
    ck_assert_ptr_null(tp_nccl_transport_new(m.u.nccl_id.id, 2, 2, 100, &err));
    ck_assert_ptr_nonnull(strstr(err.message, "rank 2 of 2 is not a rank"));
}
END_TEST
#endif

START_TEST(hello_differences_are_named)
{
    tp_hello a = sample_hello(), b = sample_hello();
    b.rank = 1;
    glm_error err;
    ck_assert_int_eq(tp_hello_compare(&a, &b, "worker", &err), GLM_OK);
    b.settings.transport = TP_TRANSPORT_AUTO;
    ck_assert_int_eq(tp_hello_compare(&a, &b, "worker", &err), GLM_OK);

    tp_hello c = b;
    strcpy(c.version, "0.2.0");
    ck_assert_int_eq(tp_hello_compare(&a, &c, "worker", &err), GLM_ERR_PEER);
    ck_assert_str_eq(err.message, "the glmchat version differs: 0.1.0 here, 0.2.0 on the worker; run "
                                  "the same glmchat build on both machines");
    c = b;
    c.weights_hash ^= 1;
    ck_assert_int_eq(tp_hello_compare(&a, &c, "worker", &err), GLM_ERR_PEER);
    ck_assert_ptr_nonnull(strstr(err.message, "weight index differs: 99aabbccddeeff00 here, 99aabbccddeeff01"));
    c = b;
    c.settings.transport = TP_TRANSPORT_RDMA;
    ck_assert_int_eq(tp_hello_compare(&a, &c, "worker", &err), GLM_ERR_PEER);
    ck_assert_ptr_nonnull(strstr(err.message, "transport differs: tcp here, rdma on the worker"));
    c = b;
    c.settings.max_context = 4096;
    ck_assert_int_eq(tp_hello_compare(&a, &c, "head", &err), GLM_ERR_PEER);
    ck_assert_ptr_nonnull(strstr(err.message, "context limit (tokens) differs: 1048576 here, 4096 on "
                                              "the head; give both the same --context"));
    c = b;
    c.settings.kv_format = 2 | 2 << 8; /* fp8 both; a's is 1: a bf16 latent, an f32 indexer */
    ck_assert_int_eq(tp_hello_compare(&a, &c, "worker", &err), GLM_ERR_PEER);
    ck_assert_ptr_nonnull(strstr(err.message, "cache and weight formats differ: bf16 latent, f32 "
                                              "indexer, bf16 dense weights here, fp8, bf16 dense "
                                              "weights on the worker"));
    c = b;
    c.settings.kv_format = a.settings.kv_format | 1u << 16; /* the worker's dense weights in q4 */
    ck_assert_int_eq(tp_hello_compare(&a, &c, "worker", &err), GLM_ERR_PEER);
    ck_assert_ptr_nonnull(strstr(err.message, "bf16 dense weights here, bf16 latent, f32 indexer, "
                                              "q4 dense weights on the worker"));
    ck_assert_ptr_nonnull(strstr(err.message, "--dense (or GLMCHAT_DENSE)"));
    c = b;
    /* the CUDA prefill chunk (bits 12-15: log2(rows / 128) + 1): two ranks must run the same */
    a.settings.kv_format = 2 | 2 << 8 | 4u << 12;
    c.settings.kv_format = 2 | 2 << 8 | 6u << 12;
    ck_assert_int_eq(tp_hello_compare(&a, &c, "worker", &err), GLM_ERR_PEER);
    ck_assert_ptr_nonnull(strstr(err.message, "fp8, bf16 dense weights, prefill chunks of 1024 rows "
                                              "here, fp8, bf16 dense weights, prefill chunks of "
                                              "4096 rows on the worker"));
    ck_assert_ptr_nonnull(strstr(err.message, "GLMCHAT_CUDA_CHUNK"));
    c.settings.kv_format = 2 | 2 << 8 | 8u << 12; /* the largest chunk, 16,384 rows */
    ck_assert_int_eq(tp_hello_compare(&a, &c, "worker", &err), GLM_ERR_PEER);
    ck_assert_ptr_nonnull(strstr(err.message, "prefill chunks of 16384 rows on the worker"));
    c.settings.kv_format = 2 | 2 << 8 | 4u << 12 | 1u << 29; /* one fp16 part (cuda_gemm) */
    ck_assert_int_eq(tp_hello_compare(&a, &c, "worker", &err), GLM_ERR_PEER);
    ck_assert_ptr_nonnull(strstr(err.message, "fp8, bf16 dense weights, one fp16 part of each "
                                              "input, prefill chunks of 1024 rows on the worker"));
    a.settings.kv_format = b.settings.kv_format;
    c = b;
    c.settings.backend = 2;
    c.settings.max_context = 4096; /* the backend is named first: it explains the rest */
    ck_assert_int_eq(tp_hello_compare(&a, &c, "worker", &err), GLM_ERR_PEER);
    ck_assert_ptr_nonnull(strstr(err.message, "the backend differs: cpu here, cuda on the "
                                              "worker; give both the same --backend"));
    c = b;
    c.rank = 0;
    ck_assert_int_eq(tp_hello_compare(&a, &c, "worker", &err), GLM_ERR_PEER);
    ck_assert_ptr_nonnull(strstr(err.message, "both ranks claim rank 0"));
}
END_TEST

int main(void)
{
    Suite *s = suite_create("tp_protocol");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, hello_round_trips);
    tcase_add_test(tc, step_round_trips_and_owns_its_tokens);
    tcase_add_test(tc, small_messages_round_trip);
    tcase_add_test(tc, long_error_text_is_cut_on_a_character_boundary);
    tcase_add_test(tc, bad_headers_are_refused);
    tcase_add_test(tc, bad_steps_are_refused);
    tcase_add_test(tc, hello_gives_the_worker_its_rank_among_n);
    tcase_add_test(tc, bad_strings_and_trailing_bytes_are_refused);
    tcase_add_test(tc, hello_differences_are_named);
    tcase_add_test(tc, nccl_id_round_trips_and_bad_ids_are_refused);
    tcase_add_test(tc, hello_with_nccl_round_trips_and_version_6_is_refused_by_name);
#ifdef HAVE_NCCL
    tcase_add_test(tc, nccl_makes_an_id_and_a_lone_rank_fails_in_time);
    tcase_set_timeout(tc, 30);
#endif
    suite_add_tcase(s, tc);
    return test_run_suite(s);
}
