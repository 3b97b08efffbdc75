/* jsonl.h: the event stream of `glmchat chat --output-format jsonl`: one JSON object a line,
 * flushed as it is written, so a script can follow a turn while it happens.
 *
 * Schema, version 1 (every object has "type"; strings are UTF-8, invalid bytes become U+FFFD;
 * a conversation id is the one `glmchat list` shows; a message id is the message's number in
 * its conversation, 1..N in creation order, as search, --from, /branch and JSON export number
 * them (storage.h msg_number); under --no-save nothing is saved and every id is null):
 *   {"type":"session","version":1,"conversation":ID,"continued":BOOL}       first line
 *   {"type":"user","message":ID,"text":S}                          the prompt, once saved
 *   {"type":"assistant","message":ID}                        a model reply (a step) begins
 *   {"type":"reasoning","text":S}                                  thinking, as written
 *   {"type":"content","text":S}                                    the answer, as written
 *   {"type":"tool_call_begin","id":ID,"name":S}
 *   {"type":"tool_call_delta","id":ID,"text":S}      the arguments' JSON text as it is built, as
 *        OpenAI-style clients expect (never the model's own argument markup): "{" with the first
 *        argument once its value is complete, "," with each next one, then "}" ("{}" for none);
 *        a call's deltas concatenated are exactly its "arguments" text
 *   {"type":"tool_call","id":ID,"name":S,"arguments":OBJECT}      the call, complete
 *   {"type":"tool_result","id":ID,"name":S,"is_error":BOOL,"approval":S,"text":S}
 *     approval: how the call was let run or refused: not_needed, auto, flag (--allow-tool),
 *     once, conversation, always, declined (the user said no), no_terminal (nobody to ask),
 *     denied (approval = deny)
 *   {"type":"stats","prompt_tokens":N,"reused_tokens":N,"generated_tokens":N,
 *    "ttft_s":X,"prefill_tok_s":X,"decode_tok_s":X}     with drafting on (draft = copy or mtp)
 *    also "draft_windows":N,"drafts_proposed":N,"drafts_accepted":N: the reply's verification
 *    windows, the drafts they checked, and those accepted
 *   {"type":"done","finish":"stop"|"length"|"tool_calls"|"canceled", ...stats fields,
 *    "max_tokens":N,"limit":"max_tokens"|"model"|"default"|"context"}
 *                                                        one model reply ended; its budget and
 *                                                        the limit that set it (a "length" finish
 *                                                        stopped there): --max-tokens or the config's
 *                                                        max_tokens, generation_config.json's
 *                                                        max_new_tokens, the 32768 default, or the
 *                                                        room the context had left
 *   {"type":"error","message":S}
 *   {"type":"waiting","for":S,"waited_s":X}          the reply waits for a rank that is alive and
 *        working but late to its part of a step: S says which ("the worker at HOST:PORT"), X how
 *        long the step has waited there so far; once a late exchange
 *   {"type":"waited","for":S,"waited_s":X}           that rank came, after X seconds in all
 *   {"type":"prompt","done":N,"total":M}             a long prompt's prefill: N of its M tokens
 *        are in (reused ones too); before its first piece and after each but the last, only
 *        for a prompt whose new tokens run in more than one piece
 *   {"type":"turn_end","conversation":ID,"message":ID,"finish":F}   the turn ended; F is
 *        "stop", "length", "canceled", "error" or "tool_limit"
 * A missing tool call id is null. "arguments" is the object the model wrote, typed by the tool's schema,
 * written as the engine gave it (one line, valid UTF-8; else re-printed on one line); when that is not
 * valid JSON, "arguments" is null and "arguments_text" holds the text. */
#ifndef GLMCHAT_APP_JSONL_H
#define GLMCHAT_APP_JSONL_H

#include <stdint.h>
#include <stdio.h>

#include "engine/glm.h"

#define JSONL_VERSION 1

typedef struct jsonl_writer {
    FILE *f;
    int failed; /* a write failed (e.g. the reader went away); later writes are skipped */
} jsonl_writer;

void jsonl_init(jsonl_writer *w, FILE *f);

/* Each writes one line and flushes; 0, or -1 once writing has failed. */
int jsonl_session(jsonl_writer *w, int64_t conversation, int continued);
int jsonl_user(jsonl_writer *w, int64_t message, const char *text);
int jsonl_assistant(jsonl_writer *w, int64_t message);
int jsonl_event(jsonl_writer *w, const glm_event *ev);
int jsonl_tool_result(jsonl_writer *w, const char *call_id, const char *name, int is_error, const char *approval,
                      const char *text);
int jsonl_error(jsonl_writer *w, const char *message);
int jsonl_turn_end(jsonl_writer *w, int64_t conversation, int64_t message, const char *finish);

/* Writes s[0..len) as a JSON string (quotes included), replacing invalid UTF-8 with U+FFFD. */
void jsonl_put_string(FILE *f, const char *s, size_t len);

#endif
