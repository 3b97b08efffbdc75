/* test_reply_source.h: FOR TESTS ONLY. A chat_source that replays recorded model replies from a
 * file instead of running a model, so the chat loop, storage and tools can be tested end to end.
 * glmchat does not contain it: the test build glmchat-test (tests/app/reply_hook.c) puts it in
 * place of the model when GLMCHAT_TEST_REPLIES=FILE is set; test_chat links it directly.
 *
 * FILE holds events in the jsonl schema of app/jsonl.h, one a line: reasoning, content,
 * tool_call_begin, tool_call_delta, tool_call, stats, done, error; a reply is the lines up to
 * and including a "done" (or "error") line. Or a reply is the model's own text, as generated:
 * {"type":"raw","text":"...</think>...<tool_call>..."} lines (each one chunk) fed through the
 * engine's reply stream parser (engine/text/reply_parser.h, with the request's tools and think
 * flag), ended by {"type":"end","why":"token"|"length"}. Each generate call plays the next reply. Blank lines
 * and lines starting with '#' are skipped. Runs share the script: where the next reply starts is
 * kept in FILE.next (delete it to start over). Each request received is appended as one JSON line to
 * the request log when one is given (what a test checks kept reasoning against). */
#ifndef GLMCHAT_TESTS_TEST_REPLY_SOURCE_H
#define GLMCHAT_TESTS_TEST_REPLY_SOURCE_H

#include <stddef.h>

#include "app/chat.h"

typedef struct test_reply_source test_reply_source;

/* delay_ms: a pause before each event (to interrupt a reply mid-way); request_log may be NULL. */
test_reply_source *test_reply_source_open(const char *path, const char *request_log, int delay_ms,
                                          char *err, size_t errlen);
void test_reply_source_free(test_reply_source *t);
/* context > 0: the source measures prompts (a rendered byte counts as a token) against a context
 * of that many, so the chat's too-long checks can be tested without a model. Before _as_source. */
void test_reply_source_set_context(test_reply_source *t, int context);
chat_source test_reply_source_as_source(test_reply_source *t);

/* The request as the JSON line the log holds (malloc'd), for tests. */
char *test_reply_request_json(const glm_request *r);

#endif
