/* pretokenize.h: the Split pre-tokenizer of a tokenizer.json (behaviour Isolated), run with PCRE2 JIT.
 * The Oniguruma pattern HF uses is translated so PCRE2 matches the same pieces (\s is Unicode
 * White_Space in Oniguruma, a narrower set in PCRE2; \d and \w likewise).
 *
 * API:
 *   pt_splitter *pt_new(pattern, err)       compiles; NULL + err for a pattern PCRE2 refuses
 *   pt_split(sp, text, len, fn, user)       calls fn for each piece, in order; text must be valid
 *                                           UTF-8; pieces cover text exactly (unmatched gaps are
 *                                           pieces too, as HF's Isolated does)
 *   pt_translate(pattern, out, err)         the translation alone (for tests) */
#ifndef GLMCHAT_TEXT_PRETOKENIZE_H
#define GLMCHAT_TEXT_PRETOKENIZE_H

#include <stddef.h>

#include "engine/text/tbuf.h"
#include "glm.h"

typedef struct pt_splitter pt_splitter;

/* Returns GLM_OK to go on. */
typedef glm_status (*pt_piece_fn)(const char *piece, size_t len, void *user);

pt_splitter *pt_new(const char *pattern, glm_error *err);
void pt_free(pt_splitter *sp);
glm_status pt_split(const pt_splitter *sp, const char *text, size_t len, pt_piece_fn fn, void *user,
                    glm_error *err);
glm_status pt_translate(const char *pattern, tbuf *out, glm_error *err);

#endif
