/* generate.c: glm_generate, one reply from a request: template, tokens, prompt reuse against what
 * the session already holds, sampling, UTF-8-safe decoding and the reply stream parser's events. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "glm.h"
#include "session.h"
#include "spec.h"
#include "text/reply_parser.h"
#include "text/template.h"
#include "text/tokenizer.h"

/* How often (in generated tokens) a STATS event reports progress. */
#define STATS_EVERY 8

typedef struct reply {
    glm_session *s;
    const glm_model *m;
    const tok_tokenizer *tok;
    tok_stream *stream;
    rp_parser *parser;
    tbuf text;
    glm_event_fn on_event;
    void *user;
    const int *eos;
    int n_eos;
    int ended_on_eos;
    int canceled;
    glm_status failure; /* a decode or parse error inside the token callback */
    glm_error *err;
    glm_stats stats;
    spec_stats draft_base; /* the session's drafting counts when the reply's decoding began */
    double t_start, t_first;
} reply;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The reply's numbers that change as it decodes, brought up to date before an event carries
 * them: the decode rate and, when it drafts, the session's drafting counts since it began. */
static void update_numbers(reply *r)
{
    double t = now_s();
    if (r->stats.generated_tokens > 1 && t > r->t_first)
        r->stats.decode_tok_s = (r->stats.generated_tokens - 1) / (t - r->t_first);
    if (!r->stats.drafting)
        return;
    const spec_stats *before = &r->draft_base, *after = session_spec_stats(r->s);
    r->stats.draft_windows = (int)(after->windows - before->windows);
    r->stats.drafts_proposed = r->stats.drafts_accepted = 0;
    for (int i = 0; i < SPEC_MAX_DRAFT; i++) {
        r->stats.drafts_proposed += (int)(after->proposed[i] - before->proposed[i]);
        r->stats.drafts_accepted += (int)(after->accepted[i] - before->accepted[i]);
    }
}

/* The parser's events pass through here so DONE carries the reply's numbers. */
static int forward_event(const glm_event *ev, void *user)
{
    reply *r = user;
    if (ev->type != GLM_EV_DONE)
        return r->on_event ? r->on_event(ev, r->user) : 0;
    glm_event done = *ev;
    update_numbers(r);
    done.stats = r->stats;
    return r->on_event ? r->on_event(&done, r->user) : 0;
}

static int send_stats(reply *r)
{
    glm_event ev = {.type = GLM_EV_STATS, .stats = r->stats};
    return r->on_event ? r->on_event(&ev, r->user) : 0;
}

static int on_token(int32_t tok, void *user)
{
    reply *r = user;
    if (r->stats.generated_tokens == 0) {
        r->t_first = now_s();
        r->stats.ttft_s = r->t_first - r->t_start;
    }
    r->stats.generated_tokens++;
    if (glm_token_is_eos(tok, r->eos, r->n_eos)) {
        r->ended_on_eos = 1;
        return 1;
    }
    tbuf_clear(&r->text);
    glm_status st = tok_stream_feed(r->stream, tok, &r->text, r->err);
    if (!st && r->text.len)
        st = rp_feed(r->parser, r->text.p, r->text.len, r->err);
    if (st == GLM_ERR_CANCELED) {
        r->canceled = 1;
        return 1;
    }
    if (st) {
        r->failure = st;
        return 1;
    }
    if (r->stats.generated_tokens % STATS_EVERY == 0) {
        update_numbers(r);
        if (send_stats(r)) {
            r->canceled = 1;
            return 1;
        }
    }
    return 0;
}

static int common_prefix(const int32_t *a, int na, const int32_t *b, int nb)
{
    int n = na < nb ? na : nb, i = 0;
    while (i < n && a[i] == b[i])
        i++;
    return i;
}

/* Brings the session to a kept prefix of ids and returns where feeding starts: the state it
 * marked in the last prompt, the longest state the engine kept (another conversation's, a shared
 * system prompt's), or nothing. Kept states lie on the GLM_KEEP_ALIGN grid and decoded tokens are
 * never continued from, so the prompt's logits are those of a full prefill, bit for bit. */
static int reuse_prefix(glm_session *s, const int32_t *ids, int n, glm_error *err)
{
    int held = glm_session_length(s);
    int shared = common_prefix(glm_session_tokens(s), held, ids, n);
    int marked = glm_session_marked(s);
    int own = marked > 0 && shared >= marked && marked < n ? marked : 0;
    int kept = glm_session_restore(s, ids, n, own, n - 1);
    if (kept > 0)
        return kept;
    if (own > 0 && !glm_session_truncate(s, own, err))
        return own;
    glm_session_reset(s);
    return 0;
}

static int align_down(int n)
{
    return n / GLM_KEEP_ALIGN * GLM_KEEP_ALIGN;
}

/* Where the leading system messages and tools end in ids (0: none), found by rendering the
 * request without its conversation: the state there is kept, for conversations that share it. */
static int shared_prefix_end(const glm_request *rq, const tok_tokenizer *tok, const tok_ids *ids)
{
    int n_sys = 0;
    while (n_sys < rq->n_messages && rq->messages[n_sys].role == GLM_ROLE_SYSTEM)
        n_sys++;
    if (n_sys == 0 && rq->n_tools == 0)
        return 0;
    glm_request head = *rq;
    head.n_messages = n_sys;
    tbuf text = {0};
    tok_ids part = {0};
    glm_error ignored;
    int end = 0;
    if (!tmpl_render(&head, &text, &ignored) && !tok_encode(tok, text.p, text.len, &part, &ignored))
        end = common_prefix(part.v, (int)part.n, ids->v, (int)ids->n);
    tbuf_free(&text);
    tok_ids_free(&part);
    return end;
}

static void emit_error(glm_event_fn on_event, void *user, const glm_error *err)
{
    if (!on_event)
        return;
    glm_event ev = {.type = GLM_EV_ERROR, .text = err->message, .len = strlen(err->message)};
    on_event(&ev, user);
}

static glm_status prepare_prompt(const glm_request *rq, const tok_tokenizer *tok, tok_ids *ids,
                                 glm_error *err)
{
    tbuf prompt = {0};
    glm_status st = tmpl_render(rq, &prompt, err);
    if (!st)
        st = tok_encode(tok, prompt.p, prompt.len, ids, err);
    tbuf_free(&prompt);
    if (!st && ids->n == 0)
        st = glm_error_set(err, GLM_ERR_ARG, "the request rendered to an empty prompt");
    return st;
}

glm_status glm_count_prompt(glm_session *s, const glm_request *r, int *tokens, glm_error *err)
{
    const tok_tokenizer *tok = glm_engine_tokenizer(session_engine(s), err);
    if (!tok)
        return err && err->status ? err->status : GLM_ERR_ARG;
    tok_ids ids = {0};
    glm_status st = prepare_prompt(r, tok, &ids, err);
    if (!st)
        *tokens = (int)ids.n;
    tok_ids_free(&ids);
    return st;
}

/* The request's sampling with "the model's own" (negative) values filled from the model. */
static glm_sampling resolve_sampling(const glm_model *m, const glm_sampling *asked)
{
    glm_sampling s = *asked;
    if (s.temperature < 0)
        s.temperature = m->gen.temperature;
    if (s.top_p < 0)
        s.top_p = m->gen.top_p;
    if (s.top_k < 0)
        s.top_k = m->gen.top_k;
    return s;
}

int generate_reply_budget(const glm_generation_config *gen, int asked, int room, glm_limit *from)
{
    int budget = GLM_DEFAULT_MAX_TOKENS;
    *from = GLM_LIMIT_DEFAULT;
    if (asked > 0) {
        budget = asked;
        *from = GLM_LIMIT_REQUEST;
    } else if (gen->max_new_tokens > 0) {
        budget = gen->max_new_tokens;
        *from = GLM_LIMIT_MODEL;
    }
    if (budget > room) { /* the reply stops ("length") where the context is full */
        budget = room;
        *from = GLM_LIMIT_CONTEXT;
    }
    return budget;
}

static glm_status run_reply(reply *r, const glm_request *rq, const tok_ids *ids, glm_error *err)
{
    glm_session *s = r->s;
    const glm_model *m = r->m;
    int context = glm_engine_context(session_engine(s));
    if ((int64_t)ids->n >= context)
        return glm_error_set(err, GLM_ERR_ARG, "the prompt is %zu tokens, and the context holds %d "
                             "(--context, context in the config or GLMCHAT_CONTEXT), which leaves no "
                             "room for a reply: start a new conversation, shorten this one, or raise "
                             "the context", ids->n, context);
    int from = reuse_prefix(s, ids->v, (int)ids->n, err);
    r->stats.prompt_tokens = (int)ids->n;
    r->stats.context_window = context;
    r->stats.reused_tokens = from;
    double t0 = now_s();
    /* the prompt runs in pieces split on the grid: up to the shared head (kept for other
     * conversations), up to the last grid point before its end (marked and kept: where the next
     * turn, or this conversation after a switch, resumes), then the rest */
    int n = (int)ids->n, sys_end = align_down(shared_prefix_end(rq, r->tok, ids));
    int last = align_down(n - 1);
    glm_status st = GLM_OK;
    session_prompt(s, n); /* PROMPT events: now (the reused tokens), then after each piece */
    if (sys_end > from && sys_end < last) {
        st = glm_session_feed(s, ids->v + from, sys_end - from, NULL, err);
        if (!st)
            st = glm_session_keep(s, err);
        from = sys_end;
    }
    if (!st && last > from) {
        st = session_feed_marked(s, ids->v + from, last - from, err);
        from = last;
    }
    if (!st && last > 0 && last == from && glm_session_length(s) == last) {
        st = glm_session_mark(s, err);
        if (!st)
            st = glm_session_keep(s, err);
    }
    if (!st)
        st = glm_session_feed(s, ids->v + from, n - from, NULL, err);
    session_prompt(s, 0);
    /* canceled during the prefill (the feed stops between pieces and layers): no token is
     * generated, and the reply ends as any canceled one does */
    if (st == GLM_ERR_CANCELED || (!st && session_cancel_requested(s))) {
        r->canceled = 1;
        int held = glm_session_length(s); /* 0 where the state was reset (a failed exchange) */
        r->stats.kept_tokens = held < n ? held : 0;
        if (r->stats.kept_tokens > r->stats.reused_tokens)
            session_keep_canceled(s); /* for another session or process with the same prompt */
    } else if (st) {
        return st;
    }
    from = r->stats.reused_tokens;
    double t1 = now_s();
    if (t1 > t0 && !r->canceled)
        r->stats.prefill_tok_s = ((int)ids->n - from) / (t1 - t0);
    int n_out = 0, budget = generate_reply_budget(&m->gen, rq->sampling.max_tokens, context - n,
                                                  &r->stats.limit_from);
    r->stats.max_tokens = budget;
    glm_sampling sampling = resolve_sampling(m, &rq->sampling);
    st = GLM_OK;
    r->draft_base = *session_spec_stats(s);
    r->stats.drafting = session_drafting(s);
    if (!r->canceled)
        st = glm_session_generate_tokens(s, NULL, 0, &sampling, r->eos, r->n_eos, budget, on_token, r,
                                     &n_out, err);
    if (st == GLM_ERR_CANCELED)
        r->canceled = 1;
    else if (st)
        return st;
    if (r->failure)
        return r->failure;
    tbuf_clear(&r->text);
    tok_stream_finish(r->stream, &r->text);
    if (!r->canceled && r->text.len) {
        st = rp_feed(r->parser, r->text.p, r->text.len, err);
        if (st == GLM_ERR_CANCELED)
            r->canceled = 1;
        else if (st)
            return st;
    }
    rp_end why = r->canceled ? RP_CANCELED : r->ended_on_eos ? RP_END_TOKEN : RP_LENGTH;
    st = rp_finish(r->parser, why, err);
    if (st && st != GLM_ERR_CANCELED)
        return st;
    return r->canceled ? glm_error_set(err, GLM_ERR_CANCELED, "the reply was canceled") : GLM_OK;
}

glm_status glm_generate(glm_session *s, const glm_request *rq, glm_event_fn on_event, void *user,
                        glm_error *err)
{
    glm_error local;
    if (!err)
        err = &local;
    glm_engine *e = session_engine(s);
    const glm_model *m = engine_model(e);
    reply r = {.s = s, .m = m, .on_event = on_event, .user = user, .err = err, .t_start = now_s()};
    session_clear_cancel(s);
    session_set_events(s, on_event, user);
    r.eos = m->gen.n_eos ? m->gen.eos : m->cfg.eos;
    r.n_eos = m->gen.n_eos ? m->gen.n_eos : m->cfg.n_eos;
    tok_ids ids = {0};
    glm_status st = GLM_OK;
    r.tok = glm_engine_tokenizer(e, err);
    if (!r.tok)
        st = err->status ? err->status : GLM_ERR_IO;
    if (!st)
        st = prepare_prompt(rq, r.tok, &ids, err);
    if (!st && !(r.stream = tok_stream_new(r.tok)))
        st = glm_error_set(err, GLM_ERR_NOMEM, "out of memory starting a reply");
    if (!st && !(r.parser = rp_new(rq->tools, rq->n_tools, rq->think, forward_event, &r, err)))
        st = err->status ? err->status : GLM_ERR_NOMEM;
    if (!st)
        st = run_reply(&r, rq, &ids, err);
    if (st && st != GLM_ERR_CANCELED)
        emit_error(on_event, user, err);
    session_set_events(s, NULL, NULL);
    rp_free(r.parser);
    tok_stream_free(r.stream);
    tbuf_free(&r.text);
    tok_ids_free(&ids);
    return st;
}
