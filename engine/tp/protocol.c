/* protocol.c: encoding and strict decoding of the control messages between the two ranks.
 * Bytes from the network are hostile until every field has been checked. */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/le.h"
#include "tp/protocol.h"

const char *tp_msg_type_name(uint32_t type)
{
    switch (type) {
    case TP_MSG_HELLO: return "HELLO";
    case TP_MSG_STEP: return "STEP";
    case TP_MSG_HEARTBEAT: return "HEARTBEAT";
    case TP_MSG_BYE: return "BYE";
    case TP_MSG_ERROR: return "ERROR";
    case TP_MSG_ATTACH: return "ATTACH";
    case TP_MSG_PARAMS: return "PARAMS";
    case TP_MSG_READY: return "READY";
    case TP_MSG_CHALLENGE: return "CHALLENGE";
    case TP_MSG_AUTH: return "AUTH";
    case TP_MSG_NCCL_ID: return "NCCL_ID";
    default: return "unknown";
    }
}

const char *tp_transport_kind_name(uint32_t kind)
{
    switch (kind) {
    case TP_TRANSPORT_AUTO: return "auto";
    case TP_TRANSPORT_TCP: return "tcp";
    case TP_TRANSPORT_RDMA: return "rdma";
    case TP_TRANSPORT_NCCL: return "nccl";
    default: return "unknown";
    }
}

/* The largest payload each type can have; anything longer is refused before it is read. */
static uint32_t max_payload(uint32_t type)
{
    switch (type) {
    case TP_MSG_HELLO: return 8 + 2 * (2 + TP_NAME_MAX) + 16 + 7 * 4 + 8 + 4;
    case TP_MSG_STEP: return 8 + 4 * 4 + 4 * TP_STEP_MAX_TOKENS;
    case TP_MSG_HEARTBEAT: return 36;
    case TP_MSG_BYE: return 4;
    case TP_MSG_ERROR: return 4 + 2 + TP_TEXT_MAX;
    case TP_MSG_ATTACH: return 8;
    case TP_MSG_PARAMS: return 4 + TP_BLOB_MAX;
    case TP_MSG_READY: return 4;
    case TP_MSG_CHALLENGE: return 4 + TP_AUTH_NONCE_BYTES;
    case TP_MSG_AUTH: return TP_AUTH_NONCE_BYTES + TP_AUTH_PROOF_BYTES;
    case TP_MSG_NCCL_ID: return TP_NCCL_ID_BYTES;
    default: return 0;
    }
}

glm_status tp_frame_header_decode(const uint8_t hdr[TP_FRAME_HEADER_BYTES], uint32_t *type,
                                  uint32_t *payload_len, glm_error *err)
{
    uint32_t magic = le_get_u32(hdr);
    uint16_t t = le_get_u16(hdr + 4);
    uint16_t flags = le_get_u16(hdr + 6);
    uint32_t len = le_get_u32(hdr + 8);
    if (magic != TP_FRAME_MAGIC)
        return glm_error_set(err, GLM_ERR_PEER,
                             "the peer is not a glmchat rank: frame magic is 0x%08" PRIx32
                             ", expected 0x%08x (is another program on that port?)",
                             magic, TP_FRAME_MAGIC);
    if (max_payload(t) == 0)
        return glm_error_set(err, GLM_ERR_PEER, "the peer sent an unknown message type %u", t);
    if (flags != 0)
        return glm_error_set(err, GLM_ERR_PEER, "the peer's %s frame has flags 0x%04x, expected 0",
                             tp_msg_type_name(t), flags);
    if (len > max_payload(t))
        return glm_error_set(err, GLM_ERR_PEER,
                             "the peer's %s frame claims %" PRIu32 " bytes, more than the %" PRIu32
                             " it can hold",
                             tp_msg_type_name(t), len, max_payload(t));
    *type = t;
    *payload_len = len;
    return GLM_OK;
}

/* A string field: u16 length, then that many bytes of printable UTF-8 (no NUL, no control
 * characters except newline and tab when multiline is set). */
static int utf8_printable(const uint8_t *s, size_t n, int multiline)
{
    size_t i = 0;
    while (i < n) {
        uint8_t c = s[i];
        if (c < 0x80) {
            if ((c < 0x20 && !(multiline && (c == '\n' || c == '\t'))) || c == 0x7f)
                return 0;
            i++;
            continue;
        }
        size_t extra;
        uint32_t cp;
        if (c >= 0xc2 && c <= 0xdf) {
            extra = 1;
            cp = c & 0x1f;
        } else if (c >= 0xe0 && c <= 0xef) {
            extra = 2;
            cp = c & 0x0f;
        } else if (c >= 0xf0 && c <= 0xf4) {
            extra = 3;
            cp = c & 0x07;
        } else {
            return 0;
        }
        if (extra > n - i - 1)
            return 0;
        for (size_t k = 1; k <= extra; k++) {
            if ((s[i + k] & 0xc0) != 0x80)
                return 0;
            cp = (cp << 6) | (s[i + k] & 0x3f);
        }
        if ((extra == 2 && cp < 0x800) || (extra == 3 && (cp < 0x10000 || cp > 0x10ffff)) ||
            (cp >= 0xd800 && cp <= 0xdfff))
            return 0;
        i += extra + 1;
    }
    return 1;
}

static int read_string(le_reader *r, char *out, size_t max, int multiline)
{
    uint16_t n = le_read_u16(r);
    if (!r->ok || n > max)
        return 0;
    const uint8_t *s = le_take(r, n);
    if (!s || !utf8_printable(s, n, multiline))
        return 0;
    memcpy(out, s, n);
    out[n] = '\0';
    return 1;
}

static glm_status bad(glm_error *err, uint32_t type, const char *what)
{
    return glm_error_set(err, GLM_ERR_PEER, "the peer's %s message is malformed: %s",
                         tp_msg_type_name(type), what);
}

static glm_status decode_hello(le_reader *r, tp_hello *h, glm_error *err)
{
    h->protocol = le_read_u32(r);
    h->rank = le_read_u32(r);
    if (!read_string(r, h->version, TP_NAME_MAX, 0))
        return bad(err, TP_MSG_HELLO, "the version is not a short printable string");
    if (!read_string(r, h->model_name, TP_NAME_MAX, 0))
        return bad(err, TP_MSG_HELLO, "the model name is not a short printable string");
    h->config_hash = le_read_u64(r);
    h->weights_hash = le_read_u64(r);
    h->settings.world = le_read_u32(r);
    h->settings.transport = le_read_u32(r);
    h->settings.heartbeat_ms = le_read_u32(r);
    h->settings.timeout_ms = le_read_u32(r);
    h->settings.max_context = le_read_u32(r);
    h->settings.kv_format = le_read_u32(r);
    h->settings.backend = le_read_u32(r);
    h->session = le_read_u64(r);
    /* version 4 ended here: its two ranks took each other as the peer */
    h->peer_rank = r->ok && r->pos == r->len ? (h->rank == 0 ? 1u : 0u) : le_read_u32(r);
    if (!r->ok)
        return bad(err, TP_MSG_HELLO, "it is shorter than its fields");
    if (h->settings.world < 2 || h->settings.world > TP_MAX_RANKS)
        return bad(err, TP_MSG_HELLO, "the number of ranks is not 2 to 16");
    if (h->rank >= h->settings.world || h->peer_rank >= h->settings.world || h->rank == h->peer_rank)
        return bad(err, TP_MSG_HELLO, "its ranks are not two different ranks of the split");
    if (h->settings.transport > TP_TRANSPORT_NCCL)
        return bad(err, TP_MSG_HELLO, "the transport is unknown");
    /* The protocol version is compared by tp_hello_compare, so a newer peer gets a clear
     * "version differs" rather than a parse error; the layout above is version 1's. */
    return GLM_OK;
}

static glm_status decode_step(le_reader *r, tp_step *s, glm_error *err)
{
    s->seq = le_read_u64(r);
    s->cmd = le_read_u32(r);
    s->pos = le_read_u32(r);
    s->n_tokens = le_read_u32(r);
    s->slot = le_read_u32(r);
    if (!r->ok)
        return bad(err, TP_MSG_STEP, "it is shorter than its header");
    if (s->slot >= TP_MAX_SLOTS)
        return bad(err, TP_MSG_STEP, "its conversation slot is past the 16 a worker keeps");
    if (s->seq == 0)
        return bad(err, TP_MSG_STEP, "its sequence number is 0 (steps count from 1)");
    if (s->cmd < TP_STEP_FORWARD || s->cmd > TP_STEP_RESTORE)
        return bad(err, TP_MSG_STEP, "the command is unknown");
    int carries = tp_step_exchanges(s->cmd);
    if (carries && s->n_tokens == 0)
        return bad(err, TP_MSG_STEP, "a forward or restore step has no tokens");
    if (!carries && s->n_tokens != 0)
        return bad(err, TP_MSG_STEP, "a reset, truncate, mark, close, rewind or keep step carries "
                   "tokens");
    if (s->cmd == TP_STEP_RESTORE && s->pos != s->n_tokens)
        return bad(err, TP_MSG_STEP, "a restore step's position is not its token count");
    if (s->n_tokens > TP_STEP_MAX_TOKENS)
        return bad(err, TP_MSG_STEP, "it has more tokens than a step may carry");
    if (s->cmd == TP_STEP_VERIFY && s->n_tokens > TP_VERIFY_MAX_TOKENS)
        return bad(err, TP_MSG_STEP, "a verification window has more tokens than one may carry");
    if ((uint64_t)s->pos + s->n_tokens > UINT32_MAX)
        return bad(err, TP_MSG_STEP, "its positions run past 2^32");
    if ((size_t)s->n_tokens * 4 != r->len - r->pos)
        return bad(err, TP_MSG_STEP, "its token count does not match its length");
    s->tokens = NULL;
    if (s->n_tokens == 0)
        return GLM_OK;
    s->tokens = malloc((size_t)s->n_tokens * sizeof *s->tokens);
    if (!s->tokens)
        return glm_error_set(err, GLM_ERR_NOMEM, "out of memory for a step of %" PRIu32 " tokens",
                             s->n_tokens);
    for (uint32_t i = 0; i < s->n_tokens; i++)
        s->tokens[i] = le_read_u32(r);
    return GLM_OK;
}

static int all_zero(const uint8_t *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (b[i])
            return 0;
    return 1;
}

static glm_status decode_body(uint32_t type, le_reader *r, tp_msg *out, glm_error *err)
{
    switch (type) {
    case TP_MSG_HELLO:
        return decode_hello(r, &out->u.hello, err);
    case TP_MSG_STEP:
        return decode_step(r, &out->u.step, err);
    case TP_MSG_HEARTBEAT:
        out->u.heartbeat.seq = le_read_u64(r);
        out->u.heartbeat.sent_ms = le_read_u64(r);
        out->u.heartbeat.exchanges = le_read_u64(r);
        out->u.heartbeat.steps = le_read_u64(r);
        out->u.heartbeat.busy = le_read_u32(r);
        if (out->u.heartbeat.busy > 1)
            return bad(err, TP_MSG_HEARTBEAT, "its busy flag is neither 0 nor 1");
        break;
    case TP_MSG_BYE:
        out->u.bye.reason = le_read_u32(r);
        break;
    case TP_MSG_ERROR:
        out->u.error.code = le_read_u32(r);
        if (!read_string(r, out->u.error.text, TP_TEXT_MAX, 1))
            return bad(err, type, "its text is not printable UTF-8 of at most 1000 bytes");
        break;
    case TP_MSG_ATTACH:
        out->u.attach.token = le_read_u64(r);
        break;
    case TP_MSG_PARAMS: {
        uint32_t n = le_read_u32(r);
        if (!r->ok || n == 0 || n > TP_BLOB_MAX)
            return bad(err, type, "its blob length is 0 or too large");
        const uint8_t *b = le_take(r, n);
        if (!b)
            return bad(err, type, "its blob is shorter than its length");
        out->u.params.len = n;
        memcpy(out->u.params.bytes, b, n);
        break;
    }
    case TP_MSG_READY:
        out->u.ready.status = le_read_u32(r);
        break;
    case TP_MSG_CHALLENGE: {
        out->u.challenge.keyed = le_read_u32(r);
        const uint8_t *nonce = le_take(r, TP_AUTH_NONCE_BYTES);
        if (!nonce || out->u.challenge.keyed > 1)
            return bad(err, type, "it is short or its key flag is neither 0 nor 1");
        memcpy(out->u.challenge.nonce, nonce, TP_AUTH_NONCE_BYTES);
        break;
    }
    case TP_MSG_AUTH: {
        const uint8_t *nonce = le_take(r, TP_AUTH_NONCE_BYTES);
        const uint8_t *proof = le_take(r, TP_AUTH_PROOF_BYTES);
        if (!nonce || !proof)
            return bad(err, type, "it is shorter than a nonce and a proof");
        memcpy(out->u.auth.nonce, nonce, TP_AUTH_NONCE_BYTES);
        memcpy(out->u.auth.proof, proof, TP_AUTH_PROOF_BYTES);
        break;
    }
    case TP_MSG_NCCL_ID: {
        const uint8_t *id = le_take(r, TP_NCCL_ID_BYTES);
        if (!id)
            return bad(err, type, "it is shorter than the 128-byte unique id");
        if (all_zero(id, TP_NCCL_ID_BYTES))
            return bad(err, type, "its unique id is all zero (rank 0 made none)");
        memcpy(out->u.nccl_id.id, id, TP_NCCL_ID_BYTES);
        break;
    }
    default:
        return glm_error_set(err, GLM_ERR_PEER, "the peer sent an unknown message type %" PRIu32,
                             type);
    }
    if (!r->ok)
        return bad(err, type, "it is shorter than its fields");
    return GLM_OK;
}

glm_status tp_msg_decode(uint32_t type, const uint8_t *payload, size_t len, tp_msg *out,
                         glm_error *err)
{
    memset(out, 0, sizeof *out);
    if (len > max_payload(type))
        return glm_error_set(err, GLM_ERR_PEER, "the peer's %s message is %zu bytes, too long",
                             tp_msg_type_name(type), len);
    le_reader r = {payload, len, 0, 1};
    out->type = (tp_msg_type)type;
    glm_status st = decode_body(type, &r, out, err);
    if (st == GLM_OK && r.pos != r.len) {
        tp_msg_clear(out);
        return bad(err, type, "it has bytes after its last field");
    }
    if (st != GLM_OK) {
        tp_msg_clear(out);
        return st;
    }
    return GLM_OK;
}

void tp_msg_clear(tp_msg *m)
{
    if (m->type == TP_MSG_STEP)
        free(m->u.step.tokens);
    memset(m, 0, sizeof *m);
}

/* ---- encoding ------------------------------------------------------------------------- */

typedef struct tp_writer {
    uint8_t *p;
    size_t pos;
} tp_writer;

static void w_u32(tp_writer *w, uint32_t v)
{
    le_put_u32(w->p + w->pos, v);
    w->pos += 4;
}

static void w_u64(tp_writer *w, uint64_t v)
{
    le_put_u64(w->p + w->pos, v);
    w->pos += 8;
}

static void w_string(tp_writer *w, const char *s, size_t max)
{
    size_t n = strnlen(s, max);
    le_put_u16(w->p + w->pos, (uint16_t)n);
    memcpy(w->p + w->pos + 2, s, n);
    w->pos += 2 + n;
}

static size_t payload_bound(const tp_msg *m)
{
    if (m->type == TP_MSG_STEP)
        return 24 + 4 * (size_t)m->u.step.n_tokens;
    return max_payload(m->type);
}

static void encode_body(const tp_msg *m, tp_writer *w)
{
    switch (m->type) {
    case TP_MSG_HELLO: {
        const tp_hello *h = &m->u.hello;
        w_u32(w, h->protocol);
        w_u32(w, h->rank);
        w_string(w, h->version, TP_NAME_MAX);
        w_string(w, h->model_name, TP_NAME_MAX);
        w_u64(w, h->config_hash);
        w_u64(w, h->weights_hash);
        w_u32(w, h->settings.world);
        w_u32(w, h->settings.transport);
        w_u32(w, h->settings.heartbeat_ms);
        w_u32(w, h->settings.timeout_ms);
        w_u32(w, h->settings.max_context);
        w_u32(w, h->settings.kv_format);
        w_u32(w, h->settings.backend);
        w_u64(w, h->session);
        if (h->settings.world > 2) /* two ranks: version 4's layout, the peer implied */
            w_u32(w, h->peer_rank);
        break;
    }
    case TP_MSG_STEP:
        w_u64(w, m->u.step.seq);
        w_u32(w, m->u.step.cmd);
        w_u32(w, m->u.step.pos);
        w_u32(w, m->u.step.n_tokens);
        w_u32(w, m->u.step.slot);
        for (uint32_t i = 0; i < m->u.step.n_tokens; i++)
            w_u32(w, m->u.step.tokens[i]);
        break;
    case TP_MSG_HEARTBEAT:
        w_u64(w, m->u.heartbeat.seq);
        w_u64(w, m->u.heartbeat.sent_ms);
        w_u64(w, m->u.heartbeat.exchanges);
        w_u64(w, m->u.heartbeat.steps);
        w_u32(w, m->u.heartbeat.busy);
        break;
    case TP_MSG_BYE:
        w_u32(w, m->u.bye.reason);
        break;
    case TP_MSG_ERROR:
        w_u32(w, m->u.error.code);
        w_string(w, m->u.error.text, TP_TEXT_MAX);
        break;
    case TP_MSG_ATTACH:
        w_u64(w, m->u.attach.token);
        break;
    case TP_MSG_PARAMS:
        w_u32(w, m->u.params.len);
        memcpy(w->p + w->pos, m->u.params.bytes, m->u.params.len);
        w->pos += m->u.params.len;
        break;
    case TP_MSG_READY:
        w_u32(w, m->u.ready.status);
        break;
    case TP_MSG_CHALLENGE:
        w_u32(w, m->u.challenge.keyed);
        memcpy(w->p + w->pos, m->u.challenge.nonce, TP_AUTH_NONCE_BYTES);
        w->pos += TP_AUTH_NONCE_BYTES;
        break;
    case TP_MSG_AUTH:
        memcpy(w->p + w->pos, m->u.auth.nonce, TP_AUTH_NONCE_BYTES);
        memcpy(w->p + w->pos + TP_AUTH_NONCE_BYTES, m->u.auth.proof, TP_AUTH_PROOF_BYTES);
        w->pos += TP_AUTH_NONCE_BYTES + TP_AUTH_PROOF_BYTES;
        break;
    case TP_MSG_NCCL_ID:
        memcpy(w->p + w->pos, m->u.nccl_id.id, TP_NCCL_ID_BYTES);
        w->pos += TP_NCCL_ID_BYTES;
        break;
    }
}

glm_status tp_msg_encode(const tp_msg *m, uint8_t **frame, size_t *frame_len, glm_error *err)
{
    *frame = NULL;
    *frame_len = 0;
    if (max_payload(m->type) == 0)
        return glm_error_set(err, GLM_ERR_ARG, "cannot encode message type %d", (int)m->type);
    if (m->type == TP_MSG_STEP && (m->u.step.n_tokens > TP_STEP_MAX_TOKENS ||
                                   (m->u.step.n_tokens && !m->u.step.tokens)))
        return glm_error_set(err, GLM_ERR_ARG, "a step of %" PRIu32 " tokens cannot be sent (at most %u)",
                             m->u.step.n_tokens, TP_STEP_MAX_TOKENS);
    if (m->type == TP_MSG_STEP && m->u.step.slot >= TP_MAX_SLOTS)
        return glm_error_set(err, GLM_ERR_ARG, "a step for conversation slot %" PRIu32 " cannot be "
                             "sent (slots 0..%u)", m->u.step.slot, TP_MAX_SLOTS - 1);
    if (m->type == TP_MSG_PARAMS && (m->u.params.len == 0 || m->u.params.len > TP_BLOB_MAX))
        return glm_error_set(err, GLM_ERR_ARG, "a parameter blob of %" PRIu32 " bytes cannot be sent",
                             m->u.params.len);
    if (m->type == TP_MSG_NCCL_ID && all_zero(m->u.nccl_id.id, TP_NCCL_ID_BYTES))
        return glm_error_set(err, GLM_ERR_ARG, "an all-zero NCCL unique id cannot be sent (make one "
                             "with ncclGetUniqueId first)");
    uint8_t *buf = malloc(TP_FRAME_HEADER_BYTES + payload_bound(m));
    if (!buf)
        return glm_error_set(err, GLM_ERR_NOMEM, "out of memory encoding a %s message",
                             tp_msg_type_name(m->type));
    tp_writer w = {buf + TP_FRAME_HEADER_BYTES, 0};
    encode_body(m, &w);
    le_put_u32(buf, TP_FRAME_MAGIC);
    le_put_u16(buf + 4, (uint16_t)m->type);
    le_put_u16(buf + 6, 0);
    le_put_u32(buf + 8, (uint32_t)w.pos);
    *frame = buf;
    *frame_len = TP_FRAME_HEADER_BYTES + w.pos;
    return GLM_OK;
}

void tp_msg_error(tp_msg *m, uint32_t code, const char *fmt, ...)
{
    memset(m, 0, sizeof *m);
    m->type = TP_MSG_ERROR;
    m->u.error.code = code;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m->u.error.text, sizeof m->u.error.text, fmt, ap);
    va_end(ap);
    /* Keep the text decodable by the peer: control characters become spaces, and a UTF-8
     * sequence cut by the length limit is dropped. */
    size_t n = strlen(m->u.error.text);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)m->u.error.text[i];
        if ((c < 0x20 && c != '\n' && c != '\t') || c == 0x7f)
            m->u.error.text[i] = ' ';
    }
    while (n > 0 && !utf8_printable((const uint8_t *)m->u.error.text, n, 1))
        m->u.error.text[--n] = '\0';
}

/* ---- comparing two HELLOs -------------------------------------------------------------- */

static glm_status differs_u64(glm_error *err, const char *what, uint64_t here, uint64_t there,
                              const char *peer_role, const char *hint)
{
    return glm_error_set(err, GLM_ERR_PEER,
                         "%s differs: %016" PRIx64 " here, %016" PRIx64 " on the %s; %s", what, here,
                         there, peer_role, hint);
}

static glm_status differs_u32(glm_error *err, const char *what, uint32_t here, uint32_t there,
                              const char *peer_role, const char *hint)
{
    return glm_error_set(err, GLM_ERR_PEER, "%s differs: %" PRIu32 " here, %" PRIu32 " on the %s; %s",
                         what, here, there, peer_role, hint);
}

static const char *kv_type_name(uint32_t t)
{
    switch (t) {
    case 0: return "f32";
    case 1: return "bf16";
    case 2: return "fp8";
    default: return "unknown";
    }
}

const char *tp_kv_format_name(uint32_t kv_format, char *buf, size_t cap)
{
    /* backend.h's layout: latent bits 0-7, indexer 8-11, the CUDA chunk 12-15, q4 16, the CPU
     * backend's variants 17-28 (never exchanged), one-part products 29 */
    enum { CHUNK_SHIFT = 12, CHUNK_BITS = 4 };
    uint32_t latent = kv_format & 0xff, indexer = kv_format >> 8 & 0xf;
    const char *dense = kv_format >> 16 & 1 ? ", q4 dense weights" : ", bf16 dense weights";
    uint32_t chunk_code = kv_format >> CHUNK_SHIFT & ((1u << CHUNK_BITS) - 1);
    char chunk[48] = "";
    if (chunk_code)
        snprintf(chunk, sizeof chunk, ", prefill chunks of %u rows", 64u << chunk_code);
    const char *one = kv_format >> 29 & 1 ? ", one fp16 part of each input" : "";
    if (kv_format >> 17 & ~(1u << 12))
        snprintf(buf, cap, "unknown (0x%08" PRIx32 ")", kv_format);
    else if (latent == indexer)
        snprintf(buf, cap, "%s%s%s%s", kv_type_name(latent), dense, one, chunk);
    else
        snprintf(buf, cap, "%s latent, %s indexer%s%s%s", kv_type_name(latent),
                 kv_type_name(indexer), dense, one, chunk);
    return buf;
}

static const char *backend_code_name(uint32_t code)
{
    return code == 2 ? "cuda" : code == 1 || code == 0 ? "cpu" : "unknown";
}

glm_status tp_hello_compare(const tp_hello *mine, const tp_hello *peer, const char *peer_role,
                            glm_error *err)
{
    const char *same_build = "run the same glmchat build on both machines";
    const char *same_model = "give both ranks the same --model directory (same files)";
    const char *same_flags = "start both ranks with the same settings";
    if (peer->protocol != mine->protocol)
        return differs_u32(err, "the rank protocol version", mine->protocol, peer->protocol,
                           peer_role, same_build);
    if (strcmp(peer->version, mine->version) != 0)
        return glm_error_set(err, GLM_ERR_PEER, "the glmchat version differs: %s here, %s on the %s; %s",
                             mine->version, peer->version, peer_role, same_build);
    if (peer->rank == mine->rank)
        return glm_error_set(err, GLM_ERR_PEER, "both ranks claim rank %" PRIu32
                             "; start one `glmchat worker` and connect one head to it",
                             mine->rank);
    if (strcmp(peer->model_name, mine->model_name) != 0)
        return glm_error_set(err, GLM_ERR_PEER, "the model differs: %s here, %s on the %s; %s",
                             mine->model_name, peer->model_name, peer_role, same_model);
    if (peer->config_hash != mine->config_hash)
        return differs_u64(err, "the model's config.json", mine->config_hash, peer->config_hash,
                           peer_role, same_model);
    if (peer->weights_hash != mine->weights_hash)
        return differs_u64(err, "the model's weight index", mine->weights_hash, peer->weights_hash,
                           peer_role, same_model);
    const tp_settings *a = &mine->settings, *b = &peer->settings;
    if (a->world != b->world)
        return differs_u32(err, "the number of ranks", a->world, b->world, peer_role, same_flags);
    if (a->transport != b->transport && a->transport != TP_TRANSPORT_AUTO &&
        b->transport != TP_TRANSPORT_AUTO)
        return glm_error_set(err, GLM_ERR_PEER, "the transport differs: %s here, %s on the %s; "
                             "give both the same --transport",
                             tp_transport_kind_name(a->transport), tp_transport_kind_name(b->transport),
                             peer_role);
    if (a->heartbeat_ms != b->heartbeat_ms)
        return differs_u32(err, "the heartbeat interval (ms)", a->heartbeat_ms, b->heartbeat_ms,
                           peer_role, same_flags);
    if (a->timeout_ms != b->timeout_ms)
        return differs_u32(err, "the peer timeout (ms)", a->timeout_ms, b->timeout_ms, peer_role,
                           same_flags);
    if (a->backend != b->backend)
        return glm_error_set(err, GLM_ERR_PEER, "the backend differs: %s here, %s on the %s; give "
                             "both the same --backend", backend_code_name(a->backend),
                             backend_code_name(b->backend), peer_role);
    if (a->max_context != b->max_context)
        return differs_u32(err, "the context limit (tokens)", a->max_context, b->max_context,
                           peer_role, "give both the same --context (or GLMCHAT_CONTEXT)");
    if (a->kv_format != b->kv_format) {
        char here[128], there[128];
        return glm_error_set(err, GLM_ERR_PEER,
                             "the cache and weight formats differ: %s here, %s on the %s; give "
                             "both the same --kv-cache (or GLMCHAT_KV_CACHE), GLMCHAT_CUDA_KV_INDEX, "
                             "--dense (or GLMCHAT_DENSE) and GLMCHAT_CUDA_CHUNK",
                             tp_kv_format_name(a->kv_format, here, sizeof here),
                             tp_kv_format_name(b->kv_format, there, sizeof there), peer_role);
    }
    return GLM_OK;
}
