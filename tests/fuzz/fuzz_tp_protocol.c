/* fuzz_tp_protocol.c: libFuzzer target for the ranks' wire formats: a stream of control frames and
 * the rdma parameter blob. Whatever decodes must re-encode to bytes that decode to the same message.
 * Build and run (from the build directory, after ./configure):
 *   clang -std=c11 -g -O1 -fsanitize=fuzzer,address,undefined -include config.h -I. -Iengine \
 *     tests/fuzz/fuzz_tp_protocol.c engine/tp/protocol.c engine/tp/rdma_logic.c engine/error.c \
 *     -o /tmp/fuzz_tp_protocol && /tmp/fuzz_tp_protocol -max_total_time=180 -max_len=8192 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tp/protocol.h"
#include "tp/rdma_logic.h"

static void check_reencode(const tp_msg *m)
{
    uint8_t *frame;
    size_t len;
    glm_error err;
    if (tp_msg_encode(m, &frame, &len, &err) != GLM_OK)
        abort(); /* a decoded message must always be encodable */
    uint32_t type, plen;
    tp_msg again;
    if (tp_frame_header_decode(frame, &type, &plen, &err) != GLM_OK ||
        tp_msg_decode(type, frame + TP_FRAME_HEADER_BYTES, plen, &again, &err) != GLM_OK)
        abort();
    uint8_t *frame2;
    size_t len2;
    if (tp_msg_encode(&again, &frame2, &len2, &err) != GLM_OK || len2 != len || memcmp(frame, frame2, len) != 0)
        abort();
    free(frame);
    free(frame2);
    tp_msg_clear(&again);
}

static void fuzz_frames(const uint8_t *data, size_t size)
{
    size_t pos = 0;
    while (size - pos >= TP_FRAME_HEADER_BYTES) {
        uint32_t type, len;
        glm_error err;
        if (tp_frame_header_decode(data + pos, &type, &len, &err) != GLM_OK)
            return;
        pos += TP_FRAME_HEADER_BYTES;
        if (len > size - pos)
            return;
        tp_msg m;
        if (tp_msg_decode(type, data + pos, len, &m, &err) == GLM_OK) {
            check_reencode(&m);
            tp_msg_clear(&m);
        } else if (err.message[0] == '\0') {
            abort(); /* a refusal must say why */
        }
        pos += len;
    }
}

static void fuzz_rdma_blob(const uint8_t *data, size_t size)
{
    tp_rdma_params p;
    glm_error err;
    if (tp_rdma_params_decode(data, size, &p, &err) != GLM_OK)
        return;
    uint8_t buf[TP_RDMA_BLOB_BYTES];
    size_t n = tp_rdma_params_encode(&p, buf);
    tp_rdma_params q;
    if (n != size || tp_rdma_params_decode(buf, n, &q, &err) != GLM_OK || memcmp(&p, &q, sizeof p) != 0)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    if (data[0] & 1)
        fuzz_rdma_blob(data + 1, size - 1);
    else
        fuzz_frames(data + 1, size - 1);
    return 0;
}
