/* tokenizer.h: glmchat's byte-level BPE tokenizer, loading a Hugging Face tokenizer.json and
 * encoding/decoding exactly as HF tokenizers 0.23 does (GLM's split regex, ignore_merges, added tokens).
 *
 * API (all functions that can fail return a glm_status and fill err with a sentence):
 *   tok_tokenizer *tok_load(path, err)        reads tokenizer.json; NULL + err when unreadable/unsupported
 *   tok_load_mem(json, len, what, err)        the same from memory ("what" names it in messages)
 *   void tok_free(t)
 *   tok_encode(t, text, len, &ids, err)       appends text's ids to ids. Added tokens (special or not)
 *                                             in the text are matched literally, leftmost-longest.
 *                                             Invalid UTF-8 is first repaired like Python's
 *                                             bytes.decode("utf-8", "replace") (one U+FFFD per
 *                                             maximal invalid subpart): glmchat's one policy for bytes.
 *   tok_decode(t, ids, n, &out, err)          appends the raw bytes of the ids (no U+FFFD repair:
 *                                             byte-exact); an id outside the vocabulary is an error.
 *                                             HF's decode(ids, skip_special_tokens=False) equals
 *                                             tbuf_append_utf8() of these bytes.
 *   tok_token_bytes(t, id, &len)              one token's bytes, or NULL
 *   tok_token_id(t, s, len)                   id of a token written exactly so (added or vocab), or -1
 *   tok_vocab_size(t)                         1 + the largest id
 *   tok_stream_new/feed/finish/free           streaming decode: feed ids as they are sampled, get
 *                                             text that never ends inside a UTF-8 sequence; the
 *                                             concatenation of all outputs equals the repaired
 *                                             decode of all ids.
 * A loaded tokenizer is read-only: many threads may encode with it at once. */
#ifndef GLMCHAT_TEXT_TOKENIZER_H
#define GLMCHAT_TEXT_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "engine/text/tbuf.h"
#include "glm.h"

typedef struct tok_tokenizer tok_tokenizer;

typedef struct tok_ids {
    int32_t *v;
    size_t n, cap;
} tok_ids;

tok_tokenizer *tok_load(const char *path, glm_error *err);
tok_tokenizer *tok_load_mem(const char *json, size_t len, const char *what, glm_error *err);
void tok_free(tok_tokenizer *t);

glm_status tok_encode(const tok_tokenizer *t, const char *text, size_t len, tok_ids *ids, glm_error *err);
glm_status tok_decode(const tok_tokenizer *t, const int32_t *ids, size_t n, tbuf *out, glm_error *err);

const char *tok_token_bytes(const tok_tokenizer *t, int32_t id, size_t *len);
int32_t tok_token_id(const tok_tokenizer *t, const char *s, size_t len);
int32_t tok_vocab_size(const tok_tokenizer *t);

glm_status tok_ids_push(tok_ids *ids, int32_t id);
void tok_ids_free(tok_ids *ids);

typedef struct tok_stream tok_stream;
tok_stream *tok_stream_new(const tok_tokenizer *t);
/* Appends to out the text that id completes (possibly nothing). */
glm_status tok_stream_feed(tok_stream *s, int32_t id, tbuf *out, glm_error *err);
/* Appends what is held back (an unfinished UTF-8 sequence, as U+FFFD) and resets the stream. */
glm_status tok_stream_finish(tok_stream *s, tbuf *out);
void tok_stream_free(tok_stream *s);

#endif
