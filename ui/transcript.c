/* transcript.c: the TUI's model of the conversation (transcript.h): items built from the
 * app's events, thinking that folds when the reply moves on, tool calls with their approval,
 * live rates, and each item's layout into lines (complete answer lines laid out only once). */
#include "ui/transcript.h"

#include <stdlib.h>
#include <string.h>

/* ---- items ----------------------------------------------------------------------------------- */

int trs_buf_add(trs_buf *b, const char *s, size_t n)
{
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *p = realloc(b->s, cap);
        if (!p)
            return -1;
        b->s = p;
        b->cap = cap;
    }
    memcpy(b->s + b->len, s, n);
    b->len += n;
    b->s[b->len] = '\0';
    return 0;
}

static void buf_set(trs_buf *b, const char *s, size_t n)
{
    b->len = 0;
    if (trs_buf_add(b, s, n) < 0 && b->s)
        b->s[0] = '\0';
}

static void item_free(trs_item *it)
{
    if (!it)
        return;
    free(it->text.s);
    free(it->result.s);
    free(it->error.s);
    free(it->id);
    free(it->name);
    free(it->question);
    rd_doc_free(&it->body);
    rd_doc_free(&it->settled);
    free(it);
}

static trs_item *item_add(transcript *t, trs_kind kind)
{
    if (t->n == t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 64;
        trs_item **v = realloc(t->items, cap * sizeof *v);
        if (!v)
            return NULL;
        t->items = v;
        t->cap = cap;
    }
    trs_item *it = calloc(1, sizeof *it);
    if (!it)
        return NULL;
    it->kind = kind;
    it->dirty = 1;
    it->turn = t->turn;
    t->items[t->n++] = it;
    t->changed = 1;
    return it;
}

trs_item *trs_add_text(transcript *t, trs_kind kind, const char *s, size_t n)
{
    trs_item *it = item_add(t, kind);
    if (it)
        buf_set(&it->text, s, n);
    return it;
}

int trs_foldable(const trs_item *it)
{
    return it->kind == TRS_THINK || it->kind == TRS_TOOL;
}

void trs_clear(transcript *t)
{
    for (size_t i = 0; i < t->n; i++)
        item_free(t->items[i]);
    t->n = 0;
    t->think = t->text = NULL;
    t->sel = t->ask = t->code_sel = -1;
    t->ttft = t->tok_s = -1; /* the last reply's numbers went with it */
    t->gen_tokens = 0;
    t->app_rates = t->app_tokens = 0;
    t->changed = 1;
}

static trs_item *find_tool(transcript *t, const char *id)
{
    for (size_t i = t->n; i-- > 0;) {
        trs_item *it = t->items[i];
        if (it->kind == TRS_TOOL && (!id || !it->id || strcmp(it->id, id) == 0))
            return it;
    }
    return NULL;
}

static int item_index(transcript *t, const trs_item *it)
{
    for (size_t i = 0; i < t->n; i++)
        if (t->items[i] == it)
            return (int)i;
    return -1;
}

/* ---- layout of one trs_item ----------------------------------------------------------------------- */

/* Lays out the answer text: complete lines once (settled), the unfinished tail every time. */
static void layout_answer(trs_item *it, int w)
{
    if (it->settled_w != w) {
        rd_doc_reset(&it->settled);
        it->settled_raw = 0;
        it->settled_w = w;
        memset(&it->settled_st, 0, sizeof it->settled_st);
        it->settled_st.select_block = it->code_sel;
    }
    const char *s = it->text.s ? it->text.s : "";
    size_t upto = rd_md_settled_end(s, it->text.len); /* a table still growing stays open */
    if (upto > it->settled_raw) {
        size_t clean_len;
        char *clean = rd_sanitize(s + it->settled_raw, upto - it->settled_raw, &clean_len);
        if (clean)
            rd_render_markdown(&it->settled, clean, clean_len, w, 0, &it->settled_st);
        free(clean);
        it->settled_raw = upto;
    }
    rd_doc_reset(&it->body);
    rd_doc_append(&it->body, &it->settled);
    if (it->text.len > upto) {
        size_t clean_len;
        char *clean = rd_sanitize(s + upto, it->text.len - upto, &clean_len);
        rd_md_state st = it->settled_st;
        if (clean)
            rd_render_markdown(&it->body, clean, clean_len, w, 0, &st);
        free(clean);
    }
}

static void layout_plain(rd_doc *d, const char *s, size_t n, int w, unsigned style,
                         const char *prefix, const char *cont, unsigned pstyle)
{
    size_t clean_len;
    char *clean = rd_sanitize(s ? s : "", s ? n : 0, &clean_len);
    if (clean)
        rd_render_plain(d, clean, clean_len, w, style, prefix, cont, pstyle);
    free(clean);
}

static void layout_tool(trs_item *it, int w)
{
    rd_doc_reset(&it->body);
    if (it->tstate == TOOL_ASK && it->question)
        layout_plain(&it->body, it->question, strlen(it->question), w, RD_ASK, "  ? ", "    ",
                     RD_ASK | RD_BOLD);
    if (it->tstate == TOOL_ASK)
        layout_plain(&it->body, UI_APPROVAL_CHOICES, strlen(UI_APPROVAL_CHOICES), w, RD_ASK,
                     "    ", "    ", RD_ASK);
    if (!it->open)
        return;
    const char *bar = "  \xe2\x94\x82 ";
    layout_plain(&it->body, "arguments", 9, w, RD_DIM | RD_BOLD, bar, bar, RD_DIM);
    layout_plain(&it->body, it->text.s, it->text.len, w, RD_DIM, bar, bar, RD_DIM);
    if (it->result.len) {
        layout_plain(&it->body, "result", 6, w, RD_DIM | RD_BOLD, bar, bar, RD_DIM);
        layout_plain(&it->body, it->result.s, it->result.len, w, 0, bar, bar, RD_DIM);
    }
    if (it->error.len) {
        layout_plain(&it->body, "error", 5, w, RD_ERROR | RD_BOLD, bar, bar, RD_DIM);
        layout_plain(&it->body, it->error.s, it->error.len, w, RD_ERROR, bar, bar, RD_DIM);
    }
}

int trs_has_header(const trs_item *it)
{
    return trs_foldable(it);
}

int trs_body_shown(const trs_item *it)
{
    if (it->kind == TRS_THINK)
        return it->open;
    return 1;
}

static void item_layout(trs_item *it, int w)
{
    if (!it->dirty && it->body_w == w)
        return;
    it->body_w = w;
    it->dirty = 0;
    switch (it->kind) {
    case TRS_USER:
        rd_doc_reset(&it->body);
        layout_plain(&it->body, it->text.s, it->text.len, w, RD_USER, "\xe2\x80\xba ", "  ",
                     RD_USER | RD_BOLD);
        break;
    case TRS_THINK:
        rd_doc_reset(&it->body);
        layout_plain(&it->body, it->text.s, it->text.len, w, RD_DIM | RD_ITALIC,
                     "\xe2\x94\x82 ", "\xe2\x94\x82 ", RD_DIM);
        break;
    case TRS_TEXT:
        layout_answer(it, w);
        break;
    case TRS_TOOL:
        layout_tool(it, w);
        break;
    case TRS_NOTICE:
        rd_doc_reset(&it->body);
        layout_plain(&it->body, it->text.s, it->text.len, w, RD_NOTICE, "\xc2\xb7 ", "  ",
                     RD_NOTICE);
        break;
    case TRS_ERROR:
        rd_doc_reset(&it->body);
        layout_plain(&it->body, it->text.s, it->text.len, w, RD_ERROR, "\xe2\x9c\x97 ", "  ",
                     RD_ERROR | RD_BOLD);
        break;
    case TRS_FOOTER:
        rd_doc_reset(&it->body);
        layout_plain(&it->body, it->text.s, it->text.len, w, RD_DIM, "", "", RD_DIM);
        break;
    }
}

/* The one-line header of a thought or a tool call, laid out fresh (it holds a live clock). */
void trs_item_header(const transcript *t, size_t idx, int w, double now, rd_doc *d)
{
    const trs_item *it = t->items[idx];
    char line[512];
    unsigned sel = (int)idx == t->sel ? RD_SELECT : 0;
    if (it->kind == TRS_THINK) {
        double secs = (it->live ? now : it->t1) - it->t0;
        if (it->live)
            snprintf(line, sizeof line, "%s thinking\xe2\x80\xa6 %.1f s", it->open ? "\xe2\x96\xbe" : "\xe2\x96\xb8", secs);
        else
            snprintf(line, sizeof line, "%s thought for %.1f s%s", it->open ? "\xe2\x96\xbe" : "\xe2\x96\xb8",
                     secs, it->open ? "" : "  (Ctrl-T)");
        layout_plain(d, line, strlen(line), w, RD_DIM | RD_MARK | sel, "", "", RD_DIM);
        return;
    }
    char args[160];
    size_t a = 0;
    for (size_t i = 0; i < it->text.len && a + 4 < sizeof args; i++)
        args[a++] = (it->text.s[i] == '\n' || it->text.s[i] == '\t') ? ' ' : it->text.s[i];
    args[a] = '\0';
    const char *state = "\xe2\x80\xa6";
    char took[48] = "";
    switch (it->tstate) {
    case TOOL_ARGS: state = "writing\xe2\x80\xa6"; break;
    case TOOL_READY: state = "running\xe2\x80\xa6"; break;
    case TOOL_ASK: state = "waiting for you"; break;
    case TOOL_OK: state = "\xe2\x9c\x93"; snprintf(took, sizeof took, " %.1f s", it->t1 - it->t0); break;
    case TOOL_FAILED: state = "\xe2\x9c\x97 failed"; break;
    case TOOL_DENIED: state = "\xe2\x9c\x97 not run: you said no"; break;
    }
    snprintf(line, sizeof line, "%s %s %s", it->open ? "\xe2\x96\xbe" : "\xe2\x96\xb8",
             it->name ? it->name : "tool", args);
    /* cut the arguments so the state always shows */
    char tail[96];
    snprintf(tail, sizeof tail, "  %s%s", state, took);
    size_t tw = rd_width(tail, strlen(tail));
    rd_pieces p = {0};
    size_t clean_len;
    char *clean = rd_sanitize(line, strlen(line), &clean_len);
    if (clean && w > (int)tw + 4 && rd_wrap_hard(clean, clean_len, w - (int)tw - 1, &p) == 0 && p.n > 0) {
        char out[700];
        size_t n = p.v[0].len < 500 ? p.v[0].len : 500;
        memcpy(out, clean, n);
        snprintf(out + n, sizeof out - n, "%s%s", p.n > 1 ? "\xe2\x80\xa6" : "", tail);
        layout_plain(d, out, strlen(out), w, RD_TOOL | sel, "", "", RD_TOOL);
    } else {
        layout_plain(d, line, strlen(line), w, RD_TOOL | sel, "", "", RD_TOOL);
    }
    free(clean);
    rd_pieces_free(&p);
}

int trs_blank_before(const transcript *t, size_t idx)
{
    if (idx == 0)
        return 0;
    trs_kind k = t->items[idx]->kind, prev = t->items[idx - 1]->kind;
    return k == TRS_USER || prev == TRS_USER || (k == TRS_NOTICE && prev != TRS_NOTICE) ||
           (prev == TRS_FOOTER);
}

int trs_item_lines(transcript *t, size_t idx, int w)
{
    trs_item *it = t->items[idx];
    item_layout(it, w);
    return trs_blank_before(t, idx) + trs_has_header(it) + (trs_body_shown(it) ? (int)it->body.nlines : 0);
}


/* ---- the app's events ---- */

static void end_thinking(transcript *t)
{
    if (t->think && t->think->live) {
        t->think->live = 0;
        t->think->t1 = t->now;
        if (!t->think->pinned)
            t->think->open = 0;
        t->think->dirty = 1;
    }
    t->think = NULL;
}

static void count_delta(transcript *t)
{
    double now = t->now;
    t->ndeltas++;
    if (t->t_first == 0) {
        t->t_first = now;
        if (!t->app_rates)
            t->ttft = now - t->t_begin;
    }
    if (!t->app_rates && now - t->t_first > 0.2)
        t->tok_s = (double)(t->ndeltas - 1) / (now - t->t_first);
    if (!t->app_tokens)
        t->gen_tokens = t->ndeltas;
}

static void finish_reply(transcript *t, const char *reason)
{
    end_thinking(t);
    t->text = NULL;
    t->streaming = 0;
    if (t->ask >= 0) {
        trs_item *a = t->items[t->ask];
        if (a->tstate == TOOL_ASK)
            a->tstate = TOOL_FAILED;
        a->dirty = 1;
        t->ask = -1;
    }
    char line[256];
    size_t n = 0;
    if (strcmp(reason, "canceled") == 0) {
        n += (size_t)snprintf(line + n, sizeof line - n, "\xe2\x8a\x98 canceled \xc2\xb7 ");
    }
    else if (strcmp(reason, "length") == 0) /* and how to give the next one more room */
        n += (size_t)snprintf(line + n, sizeof line - n, "\xe2\x80\xa6 stopped at the token limit%s "
                              "(/set max_tokens N raises it) \xc2\xb7 ",
                              t->answered ? "" : " before any answer");
    else if (strcmp(reason, "error") == 0)
        n += (size_t)snprintf(line + n, sizeof line - n, "stopped by an error \xc2\xb7 ");
    n += (size_t)snprintf(line + n, sizeof line - n, "%ld tokens", t->gen_tokens > 0 ? t->gen_tokens : 0);
    if (t->tok_s >= 0)
        n += (size_t)snprintf(line + n, sizeof line - n, " \xc2\xb7 %.1f tok/s", t->tok_s);
    if (t->ttft >= 0)
        snprintf(line + n, sizeof line - n, " \xc2\xb7 TTFT %.2f s", t->ttft);
    trs_add_text(t, TRS_FOOTER, line, strlen(line));
}

static void set_str(char **dst, const char *src)
{
    if (!src)
        return;
    char *d = strdup(src);
    if (!d)
        return;
    free(*dst);
    *dst = d;
}

/* The current reply's last thought took secs: it ends, dated back from now. */
static void set_last_thought(transcript *t, double secs)
{
    end_thinking(t);
    for (size_t i = t->n; i-- > 0;) {
        trs_item *it = t->items[i];
        if (it->kind == TRS_USER)
            return;
        if (it->kind == TRS_THINK) {
            it->t0 = it->t1 - secs;
            it->dirty = 1;
            return;
        }
    }
}

/* The wait is over: the late rank came, or the reply moved on or ended. */
static void end_wait(transcript *t)
{
    free(t->waiting);
    t->waiting = NULL;
}

static void apply_status(transcript *t, const ui_status *s)
{
    set_str(&t->model, s->model);
    set_str(&t->backend, s->backend);
    set_str(&t->conv_title, s->conversation);
    if (s->ranks >= 0)
        t->ranks = s->ranks;
    if (s->ctx_used >= 0)
        t->ctx_used = s->ctx_used;
    if (s->ctx_window >= 0)
        t->ctx_window = s->ctx_window;
    if (s->ttft_s >= 0) {
        t->ttft = s->ttft_s;
        t->app_rates = 1;
    }
    if (s->tok_s >= 0) {
        t->tok_s = s->tok_s;
        t->app_rates = 1;
    }
    if (s->gen_tokens >= 0) {
        t->gen_tokens = s->gen_tokens;
        t->app_tokens = 1;
    }
    if (s->think_s >= 0)
        set_last_thought(t, s->think_s);
    if (s->prompt_total >= 0 && s->prompt_done >= 0 && t->streaming) {
        if (t->prompt_total == 0) { /* the reply's first report: the rate is measured from it */
            t->prompt_done0 = s->prompt_done;
            t->prompt_t0 = t->now;
        }
        t->prompt_done = s->prompt_done;
        t->prompt_total = s->prompt_total;
        t->prompt_t = t->now;
    }
    if (s->waiting && !s->waiting[0])
        end_wait(t);
    else if (s->waiting && t->streaming) { /* a wait reported after its reply ended is over */
        set_str(&t->waiting, s->waiting);
        t->wait_since = t->now - (s->waited_s > 0 ? s->waited_s : 0);
    }
}

static void add_conv(transcript *t, const uiq_item *it)
{
    if (t->nconv == t->convcap) {
        size_t cap = t->convcap ? t->convcap * 2 : 32;
        trs_conv *c = realloc(t->convs, cap * sizeof *c);
        if (!c)
            return;
        t->convs = c;
        t->convcap = cap;
    }
    trs_conv c = {strdup(it->id ? it->id : ""), strdup(it->name ? it->name : ""), strdup(it->text)};
    if (!c.id || !c.title || !c.detail) {
        free(c.id);
        free(c.title);
        free(c.detail);
        return;
    }
    t->convs[t->nconv++] = c;
}

static void conv_clear(transcript *t)
{
    for (size_t i = 0; i < t->nconv; i++) {
        free(t->convs[i].id);
        free(t->convs[i].title);
        free(t->convs[i].detail);
    }
    t->nconv = 0;
}

/* A tool call's item, ending the thinking or text before it. */
static trs_item *add_tool(transcript *t, const uiq_item *ev)
{
    end_thinking(t);
    t->text = NULL;
    trs_item *it = item_add(t, TRS_TOOL);
    if (!it)
        return NULL;
    it->id = ev->id ? strdup(ev->id) : NULL;
    it->name = ev->name ? strdup(ev->name) : NULL;
    it->t0 = t->now;
    return it;
}

static void apply_tool(transcript *t, const uiq_item *ev)
{
    if (ev->type == UI_EV_TOOL_BEGIN) {
        add_tool(t, ev);
        return;
    }
    /* A call whose begin never came (a source that sends the whole call at once) still gets its
     * item: its approval question must be seen, or the turn waits for an answer for ever. */
    trs_item *it = find_tool(t, ev->id);
    if (!it)
        it = add_tool(t, ev);
    if (!it)
        return;
    it->dirty = 1;
    t->changed = 1;
    switch (ev->type) {
    case UI_EV_TOOL_ARGS_DELTA:
        trs_buf_add(&it->text, ev->text, ev->len);
        count_delta(t);
        break;
    case UI_EV_TOOL_END:
        buf_set(&it->text, ev->text, ev->len);
        it->tstate = TOOL_READY;
        it->t0 = t->now;
        break;
    case UI_EV_TOOL_APPROVE:
        free(it->question);
        it->question = strdup(ev->len ? ev->text : "run this tool?");
        it->tstate = TOOL_ASK;
        t->ask = item_index(t, it);
        break;
    case UI_EV_TOOL_RESULT:
        buf_set(&it->result, ev->text, ev->len);
        it->tstate = TOOL_OK;
        it->t1 = t->now;
        break;
    case UI_EV_TOOL_ERROR:
        buf_set(&it->error, ev->text, ev->len);
        if (it->tstate != TOOL_DENIED) /* a refused call's result is an error too */
            it->tstate = TOOL_FAILED;
        it->t1 = t->now;
        break;
    default:
        break;
    }
}

void trs_apply(transcript *t, const uiq_item *ev, double now)
{
    t->now = now;
    t->changed = 1;
    switch (ev->type) {
    case UI_EV_REPLY_BEGIN:
    case UI_EV_REASONING_DELTA:
    case UI_EV_CONTENT_DELTA:
    case UI_EV_TOOL_BEGIN:
    case UI_EV_TOOL_ARGS_DELTA:
    case UI_EV_TOOL_END:
    case UI_EV_FINISH:
    case UI_EV_CLEAR:
        end_wait(t);
        break;
    default:
        break;
    }
    switch (ev->type) {
    case UI_EV_USER:
        trs_add_text(t, TRS_USER, ev->text, ev->len);
            break;
    case UI_EV_REPLY_BEGIN:
        trs_code_select(t, -1); /* the selection was in the reply before */
        t->streaming = 1;
        t->turn++;
        t->think = t->text = NULL;
        t->answered = 0;
        t->t_begin = t->now;
        t->t_first = 0;
        t->prompt_done = t->prompt_total = t->prompt_done0 = 0;
        t->prompt_t0 = t->prompt_t = 0;
        t->ndeltas = 0;
        t->ttft = t->tok_s = -1;
        t->gen_tokens = 0;
        t->app_rates = t->app_tokens = 0;
        break;
    case UI_EV_REASONING_DELTA:
        if (!t->think || t->n == 0 || t->items[t->n - 1] != t->think) {
            end_thinking(t);
            t->think = item_add(t, TRS_THINK);
            if (!t->think)
                break;
            t->think->live = t->think->open = 1;
            t->think->t0 = t->now;
        }
        trs_buf_add(&t->think->text, ev->text, ev->len);
        t->think->dirty = 1;
        count_delta(t);
        break;
    case UI_EV_CONTENT_DELTA:
        end_thinking(t);
        if (!t->text || t->n == 0 || t->items[t->n - 1] != t->text)
            t->text = item_add(t, TRS_TEXT);
        if (!t->text)
            break;
        trs_buf_add(&t->text->text, ev->text, ev->len);
        t->text->dirty = 1;
        t->answered |= ev->len > 0;
        count_delta(t);
        break;
    case UI_EV_TOOL_BEGIN:
    case UI_EV_TOOL_ARGS_DELTA:
    case UI_EV_TOOL_END:
    case UI_EV_TOOL_APPROVE:
    case UI_EV_TOOL_RESULT:
    case UI_EV_TOOL_ERROR:
        apply_tool(t, ev);
        break;
    case UI_EV_FINISH:
        finish_reply(t, ev->text);
        break;
    case UI_EV_NOTICE:
        trs_add_text(t, TRS_NOTICE, ev->text, ev->len);
        break;
    case UI_EV_ERROR:
        trs_add_text(t, TRS_ERROR, ev->text, ev->len);
        break;
    case UI_EV_CLEAR:
        trs_clear(t);
        break;
    case UI_EV_CONV_CLEAR:
        conv_clear(t);
        break;
    case UI_EV_CONV_ITEM:
        add_conv(t, ev);
        break;
    case UI_EV_STATUS:
        apply_status(t, &ev->status);
        break;
    default:
        break;
    }
}


/* ---- life, selection, answers ---- */

void trs_init(transcript *t)
{
    memset(t, 0, sizeof *t);
    t->sel = t->ask = t->code_sel = -1;
    t->ttft = t->tok_s = -1;
    t->ranks = 1;
}

void trs_free(transcript *t)
{
    trs_clear(t);
    free(t->items);
    conv_clear(t);
    free(t->convs);
    free(t->model);
    free(t->backend);
    free(t->conv_title);
    free(t->waiting);
    memset(t, 0, sizeof *t);
}

int trs_last_foldable(const transcript *t)
{
    for (size_t i = t->n; i-- > 0;)
        if (trs_foldable(t->items[i]))
            return (int)i;
    return -1;
}

int trs_toggle(transcript *t)
{
    int i = t->sel >= 0 ? t->sel : trs_last_foldable(t);
    if (i < 0)
        return -1;
    trs_item *it = t->items[i];
    it->open = !it->open;
    it->pinned = 1;
    it->dirty = 1;
    t->changed = 1;
    return i;
}

int trs_select_step(transcript *t, int dir)
{
    int i = t->sel >= 0 ? t->sel + dir : (dir < 0 ? (int)t->n - 1 : -1);
    while (i >= 0 && i < (int)t->n && !trs_foldable(t->items[i]))
        i += dir;
    if (i < 0 || i >= (int)t->n)
        i = dir < 0 && t->sel >= 0 ? t->sel : -1; /* past the first: stay; past the last: none */
    t->sel = i;
    t->changed = 1;
    return i;
}

const trs_item *trs_answer(transcript *t, char answer, double now)
{
    if (t->ask < 0)
        return NULL;
    trs_item *a = t->items[t->ask];
    a->answer = answer;
    a->tstate = answer == 'n' ? TOOL_DENIED : TOOL_READY;
    a->t0 = now; /* the tool's time starts with the answer, not while it waited for one */
    a->dirty = 1;
    t->ask = -1;
    t->changed = 1;
    return a;
}

char *trs_last_reply(const transcript *t, size_t *len)
{
    int turn = -1;
    for (size_t i = t->n; i-- > 0;)
        if (t->items[i]->kind == TRS_TEXT) {
            turn = t->items[i]->turn;
            break;
        }
    trs_buf b = {0};
    for (size_t i = 0; i < t->n && turn >= 0; i++)
        if (t->items[i]->kind == TRS_TEXT && t->items[i]->turn == turn &&
            trs_buf_add(&b, t->items[i]->text.s, t->items[i]->text.len) < 0) {
            free(b.s);
            return NULL;
        }
    *len = b.len;
    return b.s;
}

/* The turn of the last reply with answer text, or -1. */
static int last_text_turn(const transcript *t)
{
    for (size_t i = t->n; i-- > 0;)
        if (t->items[i]->kind == TRS_TEXT)
            return t->items[i]->turn;
    return -1;
}

int trs_code_blocks(const transcript *t, trs_code **out, size_t *n)
{
    *out = NULL;
    *n = 0;
    int turn = last_text_turn(t);
    for (size_t i = 0; i < t->n && turn >= 0; i++) {
        const trs_item *it = t->items[i];
        if (it->kind != TRS_TEXT || it->turn != turn)
            continue;
        cb_block *b;
        size_t nb;
        if (cb_find(it->text.s ? it->text.s : "", it->text.len, &b, &nb) < 0)
            goto oom;
        trs_code *g = nb ? realloc(*out, (*n + nb) * sizeof *g) : *out;
        if (nb && !g) {
            free(b);
            goto oom;
        }
        *out = g;
        for (size_t k = 0; k < nb; k++)
            (*out)[(*n)++] = (trs_code){it, b[k]};
        free(b);
    }
    return 0;
oom:
    free(*out);
    *out = NULL;
    *n = 0;
    return -1;
}

/* Sets an answer item's selected block, laying it out again when that changes. */
static void item_code_sel(trs_item *it, int block)
{
    if (it->code_sel == block)
        return;
    it->code_sel = block;
    it->settled_w = -1; /* the settled lines carry the old selection */
    it->dirty = 1;
    it->body_w = -1;
}

void trs_code_select(transcript *t, int k)
{
    trs_code *c = NULL;
    size_t n = 0;
    if (k >= 0 && trs_code_blocks(t, &c, &n) < 0)
        k = -1;
    const trs_item *target = k >= 0 && (size_t)k < n ? c[k].item : NULL;
    int local = 0; /* the block's number inside its item */
    for (size_t j = 0; target && j <= (size_t)k; j++)
        if (c[j].item == target)
            local++;
    for (size_t i = 0; i < t->n; i++)
        if (t->items[i]->kind == TRS_TEXT)
            item_code_sel(t->items[i], t->items[i] == target ? local : 0);
    t->code_sel = target ? k : -1;
    t->changed = 1;
    free(c);
}

int trs_code_line(transcript *t, size_t idx, int w)
{
    trs_item_lines(t, idx, w); /* lays it out */
    const trs_item *it = t->items[idx];
    if (it->kind != TRS_TEXT || !it->code_sel)
        return -1;
    for (size_t j = 0; j < it->body.nlines; j++) {
        const rd_line *ln = &it->body.lines[j];
        if ((ln->fill & RD_SELECT) || (ln->nseg && (it->body.segs[ln->seg0].style & RD_SELECT)))
            return (int)j + trs_blank_before(t, idx);
    }
    return -1;
}

int trs_conv_matches(const trs_conv *c, const char *query)
{
    if (!query[0])
        return 1;
    return strcasestr(c->title, query) || strcasestr(c->detail, query) || strcasestr(c->id, query);
}

void trs_reply_state(const transcript *t, double now, char *out, size_t cap)
{
    const char *s = "\xe2\x97\x8f writing";
    if (t->ask >= 0)
        s = "\xe2\x97\x8f approve? y/c/a/n";
    else if (!t->streaming)
        s = "ready";
    else if (t->waiting) {
        double for_s = now - t->wait_since;
        snprintf(out, cap, "\xe2\x97\x8f waiting %.0f s for %s", for_s > 0 ? for_s : 0, t->waiting);
        return;
    } else if (t->think && t->think->live)
        s = "\xe2\x97\x8f thinking";
    else if (t->n && t->items[t->n - 1]->kind == TRS_TOOL)
        s = "\xe2\x97\x8f tool";
    else if (t->t_first == 0 && t->prompt_total > 0 && t->prompt_done < t->prompt_total) {
        /* a long prompt's progress, the share first (a narrow status line cuts the end), then,
         * once two reports give a rate, the time left at that rate since the latest */
        int at = snprintf(out, cap, "\xe2\x97\x8f prefill %ld%% %ld/%ld",
                          100 * t->prompt_done / t->prompt_total, t->prompt_done, t->prompt_total);
        double ran = t->prompt_t - t->prompt_t0;
        if (at > 0 && (size_t)at < cap && t->prompt_done > t->prompt_done0 && ran > 0) {
            double rate = (double)(t->prompt_done - t->prompt_done0) / ran;
            double left = (double)(t->prompt_total - t->prompt_done) / rate - (now - t->prompt_t);
            snprintf(out + at, cap - (size_t)at, " \xc2\xb7 %.0f s left", left > 1 ? left : 1);
        }
        return;
    } else if (t->t_first == 0)
        s = "\xe2\x97\x8f prefill";
    snprintf(out, cap, "%s", s);
}
