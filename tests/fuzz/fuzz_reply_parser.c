/* fuzz_reply_parser.c: libFuzzer target for the reply stream parser: any text, fed whole and in
 * chunks the input chooses, must give the same events, with every byte accounted for
 * (tests/unit/reply_parser_check.h says how). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/text/reply_parser.h"
#include "engine/text/tbuf.h"
#include "tests/unit/reply_parser_check.h"

typedef struct transcript {
    tbuf all;    /* "type:" + text per event, deltas coalesced by construction of the format */
    tbuf texts;  /* every event's text, one after the other */
    rpc_piece pieces[8192];
    size_t offsets[8192]; /* where each piece's text starts in texts (it may move while growing) */
    int n, last;
} transcript;

static int record(const glm_event *e, void *user)
{
    transcript *tr = user;
    int delta = e->type == GLM_EV_REASONING_DELTA || e->type == GLM_EV_CONTENT_DELTA ||
                e->type == GLM_EV_TOOL_ARG_DELTA;
    if (!delta || e->type != tr->last) {
        char tag[4] = {'\n', (char)('A' + e->type), ':', 0};
        if (tbuf_puts(&tr->all, tag) != GLM_OK)
            abort();
        if (e->name && tbuf_puts(&tr->all, e->name) != GLM_OK)
            abort();
        if (e->finish && tbuf_puts(&tr->all, e->finish) != GLM_OK)
            abort();
    }
    tr->last = delta ? (int)e->type : -1;
    if (tbuf_append(&tr->all, e->text ? e->text : "", e->len) != GLM_OK)
        abort();
    if (tr->n == 8192)
        abort(); /* inputs are at most 4096 bytes: never this many events */
    tr->offsets[tr->n] = tr->texts.len;
    tr->pieces[tr->n++] = (rpc_piece){e->type, NULL, e->len};
    if (tbuf_append(&tr->texts, e->text ? e->text : "", e->len) != GLM_OK)
        abort();
    return 0;
}

static const glm_tool TOOLS[] = {
    {"f", NULL, "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},\"o\":{\"type\":\"object\"},"
                "\"s\":{\"type\":[\"string\",\"null\"]},\"l\":{\"type\":\"array\"},\"b\":{\"type\":\"boolean\"}}}"},
    {"get_weather", NULL, NULL},
};

static void run(const char *text, size_t len, const uint8_t *sizes, size_t n_sizes, int think, int tools,
                rp_end why, transcript *tr)
{
    glm_error err = {0};
    rp_parser *p = rp_new(tools ? TOOLS : NULL, tools ? 2 : 0, think, record, tr, &err);
    if (!p)
        abort();
    tr->last = -1;
    size_t at = 0;
    for (size_t k = 0; at < len; k++) {
        size_t n = n_sizes ? (size_t)(sizes[k % n_sizes] % 16) + 1 : len;
        if (n > len - at)
            n = len - at;
        if (rp_feed(p, text + at, n, &err) != GLM_OK)
            abort();
        at += n;
    }
    if (rp_finish(p, why, &err) != GLM_OK)
        abort();
    rp_free(p);
}

static void free_tr(transcript *tr)
{
    tbuf_free(&tr->all);
    tbuf_free(&tr->texts);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 4)
        return 0;
    int think = data[0] & 1, tools = (data[0] >> 1) & 1;
    rp_end why = (data[0] >> 2) % 3 == 0 ? RP_LENGTH : RP_END_TOKEN;
    size_t n_sizes = (size_t)(data[1] % 8) + 1;
    if (size < 2 + n_sizes)
        return 0;
    const uint8_t *sizes = data + 2;
    const char *text = (const char *)data + 2 + n_sizes;
    size_t len = size - 2 - n_sizes;
    static transcript whole, split; /* too big for the stack */
    memset(&whole, 0, sizeof whole);
    memset(&split, 0, sizeof split);
    run(text, len, NULL, 0, think, tools, why, &whole);
    run(text, len, sizes, n_sizes, think, tools, why, &split);
    if (whole.all.len != split.all.len || memcmp(whole.all.p, split.all.p, whole.all.len) != 0)
        abort(); /* chunking changed the events */
    for (int i = 0; i < whole.n; i++)
        whole.pieces[i].text = whole.texts.p ? whole.texts.p + whole.offsets[i] : "";
    char fail_reason[512];
    if (!rpc_conserved(text, len, think, tools, whole.pieces, whole.n, fail_reason, sizeof fail_reason))
        abort(); /* a byte lost, added or changed */
    free_tr(&whole);
    free_tr(&split);
    return 0;
}
