/* demo_greedy.c: greedy replies of a model on glmchat's CPU engine to rendered prompts, for measuring
 * the demo model's held-out accuracy as glmchat runs it (tools/demo/eval_glmchat.py drives it). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/model/model.h"
#include "engine/session.h"
#include "engine/sampler.h"
#include "engine/text/json.h"
#include "engine/text/tbuf.h"
#include "engine/text/tokenizer.h"
#include "glm.h"

static const char usage[] =
    "Usage: demo_greedy MODEL_DIR [THREADS] < REQUESTS.jsonl\n"
    "Each input line is {\"prefix\": TEXT} (fed once and kept; later prompts that start with it\n"
    "reuse its state) or {\"prompt\": TEXT, \"max\": N}; for each prompt prints one line\n"
    "{\"text\": REPLY, \"last\": ID, \"n\": TOKENS}: REPLY decoded with special tokens kept, without\n"
    "the end token that stopped it; LAST the final token generated.\n";

static const int demo_eos[] = {154820, 154827, 154829};

typedef struct greedy_ctx {
    glm_session *session;
    const tok_tokenizer *tok;
    tok_ids prefix;
} greedy_ctx;

static int starts_with_ids(const tok_ids *a, const tok_ids *prefix)
{
    return prefix->n > 0 && a->n > prefix->n && memcmp(a->v, prefix->v, prefix->n * sizeof *a->v) == 0;
}

static glm_status feed_prefix(greedy_ctx *c, const char *text, size_t len, glm_error *err)
{
    tok_ids_free(&c->prefix);
    glm_status st = tok_encode(c->tok, text, len, &c->prefix, err);
    if (st)
        return st;
    glm_session_reset(c->session);
    if ((st = glm_session_feed(c->session, c->prefix.v, (int)c->prefix.n, NULL, err)))
        return st;
    return glm_session_mark(c->session, err);
}

/* Feeds the prompt (after the kept prefix when it starts with it) and decodes greedily. */
static glm_status reply(greedy_ctx *c, const char *text, size_t len, int max_new, tok_ids *gen, glm_error *err)
{
    tok_ids ids = {0};
    glm_status st = tok_encode(c->tok, text, len, &ids, err);
    if (st)
        return st;
    size_t skip = 0;
    if (starts_with_ids(&ids, &c->prefix)) {
        st = glm_session_truncate(c->session, glm_session_marked(c->session), err);
        skip = c->prefix.n;
    } else {
        glm_session_reset(c->session);
    }
    if (!st && ids.n <= skip)
        st = glm_error_set(err, GLM_ERR_ARG, "empty prompt");
    if (!st)
        st = glm_session_feed(c->session, ids.v + skip, (int)(ids.n - skip), NULL, err);
    tok_ids_free(&ids);
    for (int i = 0; !st && i < max_new; i++) {
        int32_t next = glm_argmax(glm_session_logits(c->session), glm_session_vocab(c->session));
        if ((st = tok_ids_push(gen, next)))
            break;
        if (glm_token_is_eos(next, demo_eos, 3))
            break;
        st = glm_session_feed(c->session, &next, 1, NULL, err);
    }
    return st;
}

static glm_status print_reply(const greedy_ctx *c, const tok_ids *gen, glm_error *err)
{
    int32_t last = gen->n ? gen->v[gen->n - 1] : -1;
    size_t n_text = gen->n && glm_token_is_eos(last, demo_eos, 3) ? gen->n - 1 : gen->n;
    tbuf text = {0}, line = {0};
    glm_status st = tok_decode(c->tok, gen->v, n_text, &text, err);
    if (!st)
        st = tbuf_puts(&line, "{\"text\": ");
    if (!st)
        st = jv_dump_string(text.p ? text.p : "", text.len, &line);
    if (!st) {
        char tail[64];
        snprintf(tail, sizeof tail, ", \"last\": %d, \"n\": %zu}\n", (int)last, gen->n);
        st = tbuf_puts(&line, tail);
    }
    if (!st && fwrite(line.p, 1, line.len, stdout) != line.len)
        st = glm_error_set(err, GLM_ERR_IO, "cannot write to stdout");
    fflush(stdout);
    tbuf_free(&text);
    tbuf_free(&line);
    return st;
}

static glm_status run_line(greedy_ctx *c, const char *line, size_t len, glm_error *err)
{
    jv *req = jv_parse(line, len, err);
    if (!req)
        return GLM_ERR_ARG;
    const jv *prefix = jv_get(req, "prefix"), *prompt = jv_get(req, "prompt"), *max = jv_get(req, "max");
    glm_status st = GLM_OK;
    if (prefix && prefix->type == JV_STRING) {
        st = feed_prefix(c, prefix->str, prefix->len, err);
    } else if (prompt && prompt->type == JV_STRING) {
        tok_ids gen = {0};
        int max_new = max && max->type == JV_INT ? (int)max->num : 96;
        st = reply(c, prompt->str, prompt->len, max_new, &gen, err);
        if (!st)
            st = print_reply(c, &gen, err);
        tok_ids_free(&gen);
    } else {
        st = glm_error_set(err, GLM_ERR_ARG, "a request line needs a string \"prefix\" or \"prompt\"");
    }
    jv_free(req);
    return st;
}

int main(int argc, char **argv)
{
    if (argc < 2 || argc > 3 || !strcmp(argv[1], "--help")) {
        fputs(usage, argc < 2 || argc > 3 ? stderr : stdout);
        return argc < 2 || argc > 3 ? 2 : 0;
    }
    glm_error err = {0};
    glm_engine_params p = {.model_dir = argv[1], .backend = GLM_BACKEND_CPU,
                           .n_threads = argc > 2 ? atoi(argv[2]) : 0};
    glm_engine *e = glm_engine_open(&p, &err);
    if (!e) {
        fprintf(stderr, "demo_greedy: cannot open the model in %s: %s\n", argv[1], err.message);
        return 1;
    }
    greedy_ctx c = {0};
    c.tok = glm_engine_tokenizer(e, &err);
    c.session = c.tok ? glm_session_new(e, &err) : NULL;
    int rc = 0;
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    while (c.session && (len = getline(&line, &cap, stdin)) > 0) {
        if (run_line(&c, line, (size_t)len, &err) != GLM_OK) {
            fprintf(stderr, "demo_greedy: %s\n", err.message);
            rc = 1;
            break;
        }
    }
    if (!c.session) {
        fprintf(stderr, "demo_greedy: %s\n", err.message);
        rc = 1;
    }
    free(line);
    tok_ids_free(&c.prefix);
    if (c.session)
        glm_session_free(c.session);
    glm_engine_close(e);
    return rc;
}
