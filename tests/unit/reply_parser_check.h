/* reply_parser_check.h: what the reply stream parser conserves, checked the same way by the unit
 * suite (test_reply_parser.c) and the fuzz target (fuzz_reply_parser.c).
 *
 * The reply's text is: the reasoning deltas, then (thinking on) maybe "</think>" and the newlines
 * after it, then the other events in order, where
 *   - a content delta's bytes are the reply's bytes, except that every "</think>" between them is
 *     dropped (with the newlines after it while nothing of the answer was given yet);
 *   - a tool call's header ("<tool_call>NAME") is the reply's bytes, and its raw arguments run up to
 *     the first "</tool_call>" (included) or the next "<tool_call>" or the end; its argument deltas
 *     are JSON, and together they are the TOOL_CALL_END text;
 *   - with no tools offered, a "[the model asked for tool NAME, but tools are off]" note stands for a
 *     call block ("<tool_call>NAME" up to the same end), and there are no tool events at all. */
#ifndef GLMCHAT_TESTS_REPLY_PARSER_CHECK_H
#define GLMCHAT_TESTS_REPLY_PARSER_CHECK_H

#include <stdio.h>
#include <string.h>

#include "engine/glm.h"

typedef struct rpc_piece {
    glm_event_type type;
    const char *text;
    size_t len;
} rpc_piece;

static const char RPC_NOTE_HEAD[] = "[the model asked for tool ";
static const char RPC_NOTE_TAIL[] = ", but tools are off]";

static int rpc_at(const char *s, size_t n, size_t at, const char *tag)
{
    size_t m = strlen(tag);
    return at <= n && n - at >= m && memcmp(s + at, tag, m) == 0;
}

/* Where a call block whose header ends at `at` ends in the reply. */
static size_t rpc_call_end(const char *s, size_t n, size_t at)
{
    for (size_t i = at; i < n; i++) {
        if (rpc_at(s, n, i, "</tool_call>"))
            return i + 12;
        if (rpc_at(s, n, i, "<tool_call>"))
            return i;
    }
    return n;
}

static void rpc_skip_think_ends(const char *s, size_t n, size_t *at, int begun)
{
    while (rpc_at(s, n, *at, "</think>")) {
        *at += 8;
        while (!begun && *at < n && s[*at] == '\n')
            (*at)++;
    }
}

/* 1 when the events account for the reply as the header says; else 0 and why in `why`. */
static int rpc_conserved(const char *s, size_t n, int think, int tools, const rpc_piece *ev, int n_ev, char *why,
                         size_t why_len)
{
    size_t at = 0;
    int k = 0;
    for (; k < n_ev && ev[k].type == GLM_EV_REASONING_DELTA; k++) {
        if (n - at < ev[k].len || memcmp(s + at, ev[k].text, ev[k].len) != 0) {
            snprintf(why, why_len, "reasoning differs at byte %zu", at);
            return 0;
        }
        at += ev[k].len;
    }
    if (think && rpc_at(s, n, at, "</think>")) {
        at += 8;
        while (at < n && s[at] == '\n')
            at++;
    }
    int begun = 0;
    const char *args = NULL; /* the open call's argument JSON so far, checked against its end */
    char json[65536]; /* a call's JSON is at most 6 times its raw text (\u escapes) */
    size_t json_len = 0;
    for (; k < n_ev; k++) {
        const rpc_piece *e = &ev[k];
        if (e->type == GLM_EV_REASONING_DELTA) {
            snprintf(why, why_len, "reasoning after the answer began (event %d)", k);
            return 0;
        }
        if (!tools && (e->type == GLM_EV_TOOL_CALL_BEGIN || e->type == GLM_EV_TOOL_ARG_DELTA ||
                       e->type == GLM_EV_TOOL_CALL_END)) {
            snprintf(why, why_len, "a tool event (%d) while no tools are offered", e->type);
            return 0;
        }
        if (e->type == GLM_EV_TOOL_ARG_DELTA) {
            if (json_len + e->len >= sizeof json) {
                snprintf(why, why_len, "arguments too long for the check");
                return 0;
            }
            memcpy(json + json_len, e->text, e->len);
            json_len += e->len;
            args = json;
            continue;
        }
        if (e->type == GLM_EV_TOOL_CALL_END) {
            if (e->len != json_len || (json_len && memcmp(args, e->text, json_len) != 0)) {
                snprintf(why, why_len, "argument deltas '%.*s' are not the call's JSON '%.*s'", (int)json_len, json,
                         (int)e->len, e->text);
                return 0;
            }
            json_len = 0;
            continue;
        }
        if (e->type == GLM_EV_TOOL_CALL_BEGIN) {
            rpc_skip_think_ends(s, n, &at, begun);
            if (n - at < e->len || memcmp(s + at, e->text, e->len) != 0) {
                snprintf(why, why_len, "call header differs at byte %zu", at);
                return 0;
            }
            at = rpc_call_end(s, n, at + e->len);
            begun = 1;
            json_len = 0;
            continue;
        }
        if (e->type != GLM_EV_CONTENT_DELTA)
            continue;
        for (size_t j = 0; j < e->len;) {
            rpc_skip_think_ends(s, n, &at, begun);
            begun = 1;
            if (!tools && rpc_at(e->text, e->len, j, RPC_NOTE_HEAD) && rpc_at(s, n, at, "<tool_call>")) {
                size_t tail = j;
                while (tail < e->len && !rpc_at(e->text, e->len, tail, RPC_NOTE_TAIL))
                    tail++;
                if (tail == e->len) {
                    snprintf(why, why_len, "a note with no end");
                    return 0;
                }
                j = tail + strlen(RPC_NOTE_TAIL);
                at = rpc_call_end(s, n, at + 11);
                continue;
            }
            if (at >= n || s[at] != e->text[j]) {
                snprintf(why, why_len, "content differs at reply byte %zu (event %d byte %zu)", at, k, j);
                return 0;
            }
            at++, j++;
        }
    }
    rpc_skip_think_ends(s, n, &at, begun);
    if (at != n) {
        snprintf(why, why_len, "reply bytes from %zu on are in no event", at);
        return 0;
    }
    return 1;
}

#endif
