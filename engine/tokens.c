/* tokens.c: glm_tokens.h's tokenizer and chat-template entry points, over engine/text (the
 * tokenizer, the native template and its revision check) with plain malloc'd buffers. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "glm_tokens.h"
#include "text/json.h"
#include "text/reply_parser.h"
#include "text/tbuf.h"
#include "text/template.h"
#include "text/template_check.h"
#include "text/tokenizer.h"

glm_tokenizer *glm_tokenizer_load(const char *path, glm_error *err)
{
    return tok_load(path, err);
}

void glm_tokenizer_free(glm_tokenizer *t)
{
    tok_free(t);
}

int32_t glm_tokenizer_vocab(const glm_tokenizer *t)
{
    return tok_vocab_size(t);
}

const char *glm_token_bytes(const glm_tokenizer *t, int32_t id, size_t *len)
{
    return tok_token_bytes(t, id, len);
}

int32_t glm_token_id(const glm_tokenizer *t, const char *s, size_t len)
{
    return tok_token_id(t, s, len);
}

glm_status glm_tokenize(const glm_tokenizer *t, const char *text, size_t len, int32_t **ids,
                        size_t *n, glm_error *err)
{
    tok_ids out = {0};
    *ids = NULL;
    *n = 0;
    glm_status st = tok_encode(t, text, len, &out, err);
    if (st != GLM_OK) {
        tok_ids_free(&out);
        return st;
    }
    *ids = out.v;
    *n = out.n;
    return GLM_OK;
}

/* Hands a text buffer's bytes to the caller (an empty one as a malloc'd ""). */
static glm_status give_text(tbuf *b, char **text, size_t *len, glm_error *err)
{
    if (!b->p && tbuf_reserve(b, 1) != GLM_OK)
        return glm_error_set(err, GLM_ERR_NOMEM, "out of memory");
    b->p[b->len] = '\0';
    *text = b->p;
    *len = b->len;
    return GLM_OK;
}

glm_status glm_detokenize(const glm_tokenizer *t, const int32_t *ids, size_t n, char **text,
                          size_t *len, glm_error *err)
{
    tbuf out = {0};
    *text = NULL;
    *len = 0;
    glm_status st = tok_decode(t, ids, n, &out, err);
    if (st == GLM_OK)
        st = give_text(&out, text, len, err);
    if (st != GLM_OK)
        tbuf_free(&out);
    return st;
}

glm_status glm_render_request(const char *json, size_t len, char **prompt, size_t *n,
                              glm_error *err)
{
    *prompt = NULL;
    *n = 0;
    glm_error parse = {0};
    jv *req = jv_parse(json, len, &parse);
    if (!req)
        return glm_error_set(err, GLM_ERR_FORMAT, "%s", parse.message);
    tbuf out = {0};
    glm_status st = tmpl_render_json(req, &out, err);
    jv_free(req);
    if (st == GLM_OK)
        st = give_text(&out, prompt, n, err);
    if (st != GLM_OK)
        tbuf_free(&out);
    return st;
}

glm_status glm_render_prompt(const glm_request *r, char **prompt, size_t *n, glm_error *err)
{
    tbuf out = {0};
    *prompt = NULL;
    *n = 0;
    glm_status st = tmpl_render(r, &out, err);
    if (st == GLM_OK)
        st = give_text(&out, prompt, n, err);
    if (st != GLM_OK)
        tbuf_free(&out);
    return st;
}

int glm_template_notice(const char *model_dir, char *buf, size_t n)
{
    tmpl_check tc;
    glm_error err = {0};
    if (tmpl_check_dir(model_dir, &tc, &err) == GLM_OK)
        return tmpl_check_notice(&tc, buf, n);
    snprintf(buf, n, "the model's chat template could not be checked: %s", err.message);
    return 1;
}

_Static_assert((int)GLM_REPLY_END_TOKEN == (int)RP_END_TOKEN && (int)GLM_REPLY_LENGTH == (int)RP_LENGTH &&
                   (int)GLM_REPLY_CANCELED == (int)RP_CANCELED,
               "glm_reply_end names rp_end's values");

glm_reply_parser *glm_reply_parser_new(const glm_tool *tools, int n_tools, int think,
                                       glm_event_fn on_event, void *user, glm_error *err)
{
    return rp_new(tools, n_tools, think, on_event, user, err);
}

glm_status glm_reply_parser_feed(glm_reply_parser *p, const char *text, size_t len, glm_error *err)
{
    return rp_feed(p, text, len, err);
}

glm_status glm_reply_parser_finish(glm_reply_parser *p, glm_reply_end why, glm_error *err)
{
    return rp_finish(p, (rp_end)why, err);
}

void glm_reply_parser_free(glm_reply_parser *p)
{
    rp_free(p);
}
