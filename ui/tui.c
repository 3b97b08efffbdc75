/* tui.c: the ncurses view: transcript pane, growing input box, status line, conversation
 * list; one poll() loop serves keys, the app's event queue, resizes and timers.
 *
 * File structure: drawing a frame (transcript, list pane, status, input) -> the app's events
 * (into transcript.c) -> actions to the app -> keys -> the loop and setup. Every frame is
 * composed in stdscr and sent with one doupdate(), so ncurses writes only the cells that
 * changed: settled lines are never sent twice, and a streamed reply costs one line a token. */
#include <errno.h>
#include <langinfo.h>
#include <locale.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <curses.h>

#include "base/suggest.h"
#include "base/utf8.h"
#include "ui/clipboard.h"
#include "ui/codeblock.h"
#include "ui/render.h"
#include "ui/transcript.h"
#include "ui/tui.h"
#include "ui/view_impl.h"

enum {
    KEY_PASTE_BEGIN = 0x1001, /* our codes for sequences ncurses does not know (define_key) */
    KEY_PASTE_END,
    KEY_ALT_UP,
    KEY_ALT_DOWN,
    KEY_CTRL_LEFT,
    KEY_CTRL_RIGHT,
};

struct tui {
    ui_view *v;
    transcript tr;       /* what is shown */
    int scroll;          /* lines scrolled up from the bottom; 0 follows the reply */
    int last_total;
    char flash[256];     /* a short message in the status line */
    double flash_until;
    double last_ctrl_c;  /* an idle Ctrl-C showed the quit hint then */
    double cancel_ctrl_c; /* a Ctrl-C canceled a reply then */
    int list_open, list_sel; /* the conversation list */
    int list_mode;       /* LIST_BROWSE, or a question about list_target */
    char list_target[32];      /* the id the question is about */
    char list_edit[256];       /* LIST_RENAME: the title being typed */
    char query[128];
    char list_empty[200]; /* what the list says when it holds nothing: no conversations, or no match */
    int paste;           /* inside a bracketed paste */
    trs_buf pastebuf;
    int input_dirty, dirty, full_redraw;
    int input_above, input_below; /* rows of an input taller than its box, out of sight */
    int quit, stop;
    double last_draw;
    int color_ok;
    SCREEN *screen;
    FILE *latency_log;   /* ui_config.latency_log, opened */
    const char *empty_hint; /* ui_config.empty_hint (the app's, alive as long as the view); NULL: none */
};

/* What keys in the conversation list do: move and filter, or answer a question. */
enum { LIST_BROWSE, LIST_CONFIRM_DELETE, LIST_RENAME };

static volatile sig_atomic_t got_term_signal;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* ---- drawing ------------------------------------------------------------------------------------- */

enum { PAIR_USER = 1, PAIR_CODEBLOCK, PAIR_CODE, PAIR_ERROR, PAIR_TOOL, PAIR_ASK, PAIR_LABEL,
       PAIR_STATUS, PAIR_LIST, PAIR_SYN_KEYWORD, PAIR_SYN_STRING, PAIR_SYN_COMMENT,
       PAIR_SYN_NUMBER };

/* NO_COLOR (no-color.org): present and not empty turns colours off; attributes stay. */
static int no_color_asked(void)
{
    const char *v = getenv("NO_COLOR");
    return v && v[0];
}

static void init_colors(tui *t)
{
    if (no_color_asked() || !has_colors() || start_color() == ERR)
        return;
    t->color_ok = 1;
    use_default_colors();
    int code_bg = COLORS >= 256 ? 236 : COLOR_BLUE;
    init_pair(PAIR_USER, COLOR_CYAN, -1);
    init_pair(PAIR_CODEBLOCK, COLORS >= 256 ? 252 : COLOR_WHITE, code_bg);
    init_pair(PAIR_CODE, COLOR_YELLOW, -1);
    init_pair(PAIR_ERROR, COLOR_RED, -1);
    init_pair(PAIR_TOOL, COLOR_MAGENTA, -1);
    init_pair(PAIR_ASK, COLOR_BLACK, COLOR_YELLOW);
    init_pair(PAIR_LABEL, COLOR_CYAN, code_bg);
    init_pair(PAIR_STATUS, COLOR_BLACK, COLOR_CYAN);
    init_pair(PAIR_LIST, -1, -1);
    int wide = COLORS >= 256;
    init_pair(PAIR_SYN_KEYWORD, wide ? 75 : COLOR_CYAN, code_bg);
    init_pair(PAIR_SYN_STRING, wide ? 114 : COLOR_GREEN, code_bg);
    init_pair(PAIR_SYN_COMMENT, wide ? 245 : COLOR_WHITE, code_bg);
    init_pair(PAIR_SYN_NUMBER, wide ? 215 : COLOR_YELLOW, code_bg);
}

static attr_t style_attr(const tui *t, unsigned s)
{
    attr_t a = A_NORMAL;
    if (s & (RD_BOLD | RD_HEADING))
        a |= A_BOLD;
    if (s & RD_ITALIC)
        a |= A_ITALIC;
    if (s & (RD_DIM | RD_NOTICE | RD_QUOTE))
        a |= A_DIM;
    if (s & RD_HEADING)
        a |= A_UNDERLINE;
    if (s & RD_SELECT)
        a |= A_REVERSE;
    if (!t->color_ok) { /* readable without colours: keywords bold, comments dim */
        if (s & (RD_CODEBLOCK | RD_ASK))
            a |= A_REVERSE;
        if (s & (RD_CODE | RD_SYN_KEYWORD))
            a |= A_BOLD;
        if (s & RD_SYN_COMMENT)
            a |= A_DIM;
        return a;
    }
    if (s & RD_SYN_KEYWORD)
        a |= COLOR_PAIR(PAIR_SYN_KEYWORD);
    else if (s & RD_SYN_STRING)
        a |= COLOR_PAIR(PAIR_SYN_STRING);
    else if (s & RD_SYN_COMMENT)
        a |= COLOR_PAIR(PAIR_SYN_COMMENT);
    else if (s & RD_SYN_NUMBER)
        a |= COLOR_PAIR(PAIR_SYN_NUMBER);
    else if (s & RD_LABEL)
        a |= COLOR_PAIR(PAIR_LABEL);
    else if (s & RD_CODEBLOCK)
        a |= COLOR_PAIR(PAIR_CODEBLOCK);
    else if (s & RD_ASK)
        a |= COLOR_PAIR(PAIR_ASK);
    else if (s & RD_CODE)
        a |= COLOR_PAIR(PAIR_CODE);
    else if (s & RD_ERROR)
        a |= COLOR_PAIR(PAIR_ERROR);
    else if (s & RD_TOOL)
        a |= COLOR_PAIR(PAIR_TOOL);
    else if (s & RD_USER)
        a |= COLOR_PAIR(PAIR_USER);
    return a;
}

static void draw_line(const tui *t, const rd_doc *d, const rd_line *ln, int y, int x, int w)
{
    move(y, x);
    for (size_t k = 0; k < ln->nseg; k++) {
        const rd_seg *sg = &d->segs[ln->seg0 + k];
        attrset(style_attr(t, sg->style));
        addnstr(d->text + sg->off, (int)sg->len);
    }
    if (ln->fill) {
        attrset(style_attr(t, ln->fill));
        for (int c = ln->width; c < w; c++)
            addch(' ');
    }
    attrset(A_NORMAL);
}

static int text_width(const tui *t)
{
    (void)t;
    int w = COLS - 2;
    return w < 4 ? 4 : w;
}

/* Draws the transcript into rows [0, rows): the newest lines at the bottom, t->scroll up. */
static void draw_transcript(tui *t, int rows)
{
    int w = text_width(t);
    int total = 0;
    for (size_t i = 0; i < t->tr.n; i++)
        total += trs_item_lines(&t->tr, (size_t)(int)i, w);
    if (t->scroll > 0 && total > t->last_total)
        t->scroll += total - t->last_total; /* keep the page still while reading back */
    t->last_total = total;
    int max_scroll = total > rows ? total - rows : 0;
    if (t->scroll > max_scroll)
        t->scroll = max_scroll;
    if (t->scroll < 0)
        t->scroll = 0;
    if (t->tr.n == 0 && t->empty_hint) { /* nothing said yet: the app's word on what to try */
        rd_doc d = {0};
        rd_md_state st = {0};
        rd_render_markdown(&d, t->empty_hint, strlen(t->empty_hint), w, RD_DIM, &st);
        for (int j = 0; j < (int)d.nlines && 1 + j < rows; j++)
            draw_line(t, &d, &d.lines[j], 1 + j, 1, w);
        rd_doc_free(&d);
        return;
    }
    int first = total > rows ? total - rows - t->scroll : 0; /* the top line shown */
    int line = 0, y = 0;
    rd_doc hdr = {0};
    for (size_t i = 0; i < t->tr.n && y < rows; i++) {
        int n = trs_item_lines(&t->tr, (size_t)(int)i, w);
        if (line + n <= first) {
            line += n;
            continue;
        }
        trs_item *it = t->tr.items[i];
        int k = 0;
        int bb = trs_blank_before(&t->tr, i);
        if (trs_has_header(it)) {
            rd_doc_reset(&hdr);
            trs_item_header(&t->tr, i, w, now_s(), &hdr);
        }
        for (; k < n && y < rows; k++, line++) {
            if (line < first)
                continue;
            int j = k - bb;
            if (j >= 0 && trs_has_header(it)) {
                if (j == 0) {
                    if (hdr.nlines)
                        draw_line(t, &hdr, &hdr.lines[0], y, 1, w);
                    y++;
                    continue;
                }
                j--;
            }
            if (j >= 0 && (size_t)j < it->body.nlines)
                draw_line(t, &it->body, &it->body.lines[j], y, 1, w);
            y++;
        }
    }
    rd_doc_free(&hdr);
    if (t->scroll > 0 && rows > 0) {
        char more[64];
        snprintf(more, sizeof more, " \xe2\x86\x93 %d more lines (PageDown) ", t->scroll);
        int mw = (int)rd_width(more, strlen(more));
        attrset(A_REVERSE);
        mvaddstr(rows - 1, COLS > mw ? COLS - mw - 1 : 0, more);
        attrset(A_NORMAL);
    }
}

static void human_count(char *out, size_t cap, long n)
{
    if (n >= 1000000)
        snprintf(out, cap, "%.1fM", (double)n / 1e6);
    else if (n >= 10000)
        snprintf(out, cap, "%.0fk", (double)n / 1e3);
    else if (n >= 1000)
        snprintf(out, cap, "%.1fk", (double)n / 1e3);
    else
        snprintf(out, cap, "%ld", n);
}

/* The conversation's title in at most cols columns (and an ellipsis where cut) into out;
 * 0 when nothing of it fits. */
static int status_title(const char *title, int cols, char *out, size_t cap)
{
    size_t clen;
    char *clean = rd_sanitize(title, strlen(title), &clen);
    rd_pieces p = {0};
    int ok = clean && cols > 0 && rd_wrap_hard(clean, clen, cols, &p) == 0 && p.n;
    if (ok)
        snprintf(out, cap, "%.*s%s", (int)p.v[0].len, clean, p.n > 1 ? "\xe2\x80\xa6" : "");
    rd_pieces_free(&p);
    free(clean);
    return ok;
}

/* The fewest columns a shortened title keeps before the status line drops it. */
enum { kTitleMin = 12 };

static void draw_status(tui *t, int y)
{
    char f[10][300];
    int prio[10];
    int nf = 0;
    double now = now_s();
    if (t->flash[0] && now < t->flash_until) {
        snprintf(f[nf], sizeof f[nf], "%s", t->flash);
        prio[nf++] = 0;
    } else {
        t->flash[0] = '\0';
    }
    int title = -1; /* the title's field, shortened before it is dropped */
    if (t->tr.conv_title && t->tr.conv_title[0] && status_title(t->tr.conv_title, 32, f[nf], sizeof f[nf])) {
        title = nf;
        prio[nf++] = 6;
    }
    if (t->tr.model) {
        snprintf(f[nf], sizeof f[nf], "%s", t->tr.model);
        prio[nf++] = 3;
    }
    if (t->tr.backend) {
        if (t->tr.ranks > 1)
            snprintf(f[nf], sizeof f[nf], "%s \xc3\x97%d", t->tr.backend, t->tr.ranks);
        else
            snprintf(f[nf], sizeof f[nf], "%s", t->tr.backend);
        prio[nf++] = 5;
    }
    if (t->tr.ctx_window > 0) {
        char u[32], w[32];
        human_count(u, sizeof u, t->tr.ctx_used > 0 ? t->tr.ctx_used : 0);
        human_count(w, sizeof w, t->tr.ctx_window);
        snprintf(f[nf], sizeof f[nf], "ctx %s/%s %ld%%", u, w,
                 (t->tr.ctx_used > 0 ? t->tr.ctx_used : 0) * 100 / t->tr.ctx_window);
        prio[nf++] = 2;
    }
    if (t->tr.ttft >= 0) {
        snprintf(f[nf], sizeof f[nf], "TTFT %.2f s", t->tr.ttft);
        prio[nf++] = 4;
    }
    if (t->tr.tok_s >= 0) {
        snprintf(f[nf], sizeof f[nf], "%.1f tok/s", t->tr.tok_s);
        prio[nf++] = 1;
    }
    if (t->input_above > 0 || t->input_below > 0) { /* the input is taller than its box */
        char up[24] = "", down[24] = "";
        if (t->input_above > 0)
            snprintf(up, sizeof up, "\xe2\x86\x91%d", t->input_above);
        if (t->input_below > 0)
            snprintf(down, sizeof down, "%s\xe2\x86\x93%d", up[0] ? " " : "", t->input_below);
        snprintf(f[nf], sizeof f[nf], "input %s%s rows", up, down);
        prio[nf++] = 1;
    }
    trs_reply_state(&t->tr, now, f[nf], sizeof f[nf]);
    prio[nf++] = 0;
    /* Drop the least important fields until the line fits. */
    int keep[10];
    for (int i = 0; i < nf; i++)
        keep[i] = 1;
    for (;;) {
        int w = 1;
        for (int i = 0; i < nf; i++)
            if (keep[i])
                w += (int)rd_width(f[i], strlen(f[i])) + 3;
        if (w <= COLS)
            break;
        int worst = -1;
        for (int i = 0; i < nf; i++)
            if (keep[i] && prio[i] > 0 && (worst < 0 || prio[i] > prio[worst]))
                worst = i;
        if (worst < 0)
            break;
        int tw = worst == title ? (int)rd_width(f[title], strlen(f[title])) : 0;
        if (worst == title && tw - (w - COLS) >= kTitleMin &&
            status_title(t->tr.conv_title, tw - (w - COLS) - 1, f[title], sizeof f[title]))
            continue; /* shortened to the room left (its ellipsis takes a column) */
        keep[worst] = 0;
    }
    attrset(t->color_ok ? COLOR_PAIR(PAIR_STATUS) : A_REVERSE);
    move(y, 0);
    for (int c = 0; c < COLS; c++)
        addch(' ');
    move(y, 1);
    int first = 1, x = 1;
    for (int i = 0; i < nf; i++) {
        if (!keep[i])
            continue;
        int fw = (int)rd_width(f[i], strlen(f[i]));
        if (!first && x + 3 <= COLS - 1) {
            addstr(" \xe2\x94\x82 ");
            x += 3;
        }
        if (x + fw > COLS - 1) { /* one field too wide: cut it at a cluster */
            rd_pieces p = {0};
            if (COLS - 1 - x >= 2 && rd_wrap_hard(f[i], strlen(f[i]), COLS - 1 - x, &p) == 0 && p.n)
                addnstr(f[i], (int)p.v[0].len);
            rd_pieces_free(&p);
            break;
        }
        addstr(f[i]);
        x += fw;
        first = 0;
    }
    attrset(A_NORMAL);
}

/* Where input_layout places the cursor (its row in the whole text, its column), and, asked
 * for a row and column, the offset whose cursor is there or last before it on that row. */
typedef struct input_pos {
    int row, col;            /* the cursor's */
    int find_row, find_col;  /* asked for; find_row -1: nothing asked */
    size_t found;            /* the offset asked for (SIZE_MAX: the row does not exist) */
    int rows;                /* the text's rows */
} input_pos;

/* The input box: prompt and text hard-wrapped, later rows indented under the prompt. Returns
 * its rows for the given height limit; draws only when draw is set, placing *cy, *cx; pos
 * (may be NULL) gets the layout's positions. */
static int input_layout_at(tui *t, int max_rows, int y0, int draw, int *cy, int *cx, input_pos *pos)
{
    const char *search = tui_input_search_prompt();
    const char *prompt = search ? search : "\xe2\x80\xba ";
    const char *text = tui_input_text();
    size_t point = tui_input_point();
    size_t plen_w = rd_width(prompt, strlen(prompt));
    int indent = search ? 0 : (int)plen_w;
    int w = COLS - 1;
    if (w < indent + 2)
        indent = 0;
    size_t tlen = strlen(text);
    /* rows: list of (offset, len) pieces of the text, first row after the prompt */
    int row = 0, col = (int)plen_w, crow = 0, ccol = col;
    int total_rows;
    int top = 0;
    for (int pass = 0; pass < 2; pass++) {
        row = 0;
        col = (int)plen_w;
        if (col >= w) {
            row = 1;
            col = indent;
        }
        if (pass == 1 && draw) {
            attrset(search ? A_BOLD : (t->color_ok ? COLOR_PAIR(PAIR_USER) | A_BOLD : A_BOLD));
            if (row - top >= 0 && row - top < max_rows) {
                move(y0, 0);
                addnstr(prompt, (int)strlen(prompt));
            }
            attrset(A_NORMAL);
        }
        for (size_t i = 0; i <= tlen;) {
            if (i == point) {
                crow = row;
                ccol = col;
            }
            if (pass == 0 && pos && row == pos->find_row && col <= pos->find_col)
                pos->found = i;
            if (i == tlen)
                break;
            if (text[i] == '\n') {
                row++;
                col = indent;
                i++;
                continue;
            }
            int cw;
            size_t n = rd_cluster_len(text + i, tlen - i, &cw);
            if (col + cw > w) {
                row++;
                col = indent;
            }
            if (pass == 1 && draw && row - top >= 0 && row - top < max_rows) {
                uint32_t cp;
                utf8_next(text + i, tlen - i, &cp);
                move(y0 + row - top, col);
                if (cp < 0x20 || cp == 0x7F)
                    addstr("\xef\xbf\xbd");
                else
                    addnstr(text + i, (int)n);
            }
            col += cw;
            i += n;
        }
        total_rows = row + 1;
        if (pass == 0) {
            int rows = total_rows < max_rows ? total_rows : max_rows;
            if (crow >= top + rows)
                top = crow - rows + 1;
            if (!pos) { /* the box's own layout: its rows out of sight, for the status line */
                t->input_above = top;
                t->input_below = total_rows - top - rows;
            } else {
                pos->row = crow;
                pos->col = ccol;
                pos->rows = total_rows;
            }
            if (!draw)
                return rows;
        }
    }
    if (draw && tlen == 0 && !search) {
        const char *hint = t->tr.ask >= 0      ? "y once, c this conversation, a always, n no"
                           : t->tr.streaming ? "Esc cancels the reply \xc2\xb7 PageUp reads back"
                                          : "message \xc2\xb7 Enter sends \xc2\xb7 Alt-Enter new line \xc2\xb7 /help";
        attrset(A_DIM);
        int room = w - (int)plen_w;
        rd_pieces p = {0};
        if (room >= 2 && rd_wrap_hard(hint, strlen(hint), room, &p) == 0 && p.n)
            mvaddnstr(y0, (int)plen_w, hint, (int)p.v[0].len);
        rd_pieces_free(&p);
        attrset(A_NORMAL);
    }
    *cy = y0 + crow - top;
    *cx = ccol;
    return total_rows < max_rows ? total_rows : max_rows;
}

static int input_layout(tui *t, int max_rows, int y0, int draw, int *cy, int *cx)
{
    return input_layout_at(t, max_rows, y0, draw, cy, cx, NULL);
}

/* Up and Down: the cursor to the row above or below in the input box, keeping its column (the
 * wrapped rows of a long line too); from the first or last row, readline's history. */
static void input_row_key(tui *t, int delta)
{
    int cy, cx;
    input_pos pos = {.find_row = -1, .found = SIZE_MAX};
    input_layout_at(t, 1, 0, 0, &cy, &cx, &pos);
    int target = pos.row + delta;
    if (tui_input_searching() || target < 0 || target >= pos.rows) {
        tui_input_feed(delta < 0 ? "\033[A" : "\033[B", 3);
        return;
    }
    pos.find_row = target;
    pos.find_col = pos.col;
    input_layout_at(t, 1, 0, 0, &cy, &cx, &pos);
    if (pos.found != SIZE_MAX)
        tui_input_set_point(pos.found);
}

static void up_key(tui *t)
{
    input_row_key(t, -1);
}

static void down_key(tui *t)
{
    input_row_key(t, 1);
}

static void draw_cut(const char *s, int y, int x, int w, attr_t a)
{
    size_t clean_len;
    char *clean = rd_sanitize(s, strlen(s), &clean_len);
    if (!clean || w < 2) {
        free(clean);
        return;
    }
    for (char *p = clean; *p; p++)
        if (*p == '\n')
            *p = ' ';
    rd_pieces p = {0};
    attrset(a);
    if (rd_wrap_hard(clean, clean_len, w, &p) == 0 && p.n)
        mvaddnstr(y, x, clean, (int)p.v[0].len);
    attrset(A_NORMAL);
    rd_pieces_free(&p);
    free(clean);
}

static void draw_list(tui *t, int rows, int *cy, int *cx)
{
    int lw = COLS < 60 ? COLS : (COLS / 2 < 44 ? COLS / 2 : 44);
    for (int y = 0; y < rows; y++) {
        move(y, 0);
        for (int x = 0; x < lw; x++)
            addch(' ');
        if (lw < COLS)
            mvaddstr(y, lw - 1, "\xe2\x94\x82");
    }
    int iw = lw - (lw < COLS ? 3 : 2);
    draw_cut("Conversations", 0, 1, iw, A_BOLD);
    if (rows > 4) {
        draw_cut("\xe2\x86\x91\xe2\x86\x93 Enter opens \xc2\xb7 Esc closes", rows - 1, 1, iw, A_DIM);
        draw_cut("Del deletes \xc2\xb7 Ctrl-R renames", rows - 2, 1, iw, A_DIM);
    }
    char q[400];
    if (t->list_mode == LIST_RENAME)
        snprintf(q, sizeof q, "title: %s", t->list_edit);
    else if (t->list_mode == LIST_CONFIRM_DELETE)
        snprintf(q, sizeof q, "delete #%s? y deletes, any key keeps", t->list_target);
    else
        snprintf(q, sizeof q, "/ %s", t->query);
    draw_cut(q, 1, 1, iw, t->list_mode == LIST_BROWSE ? A_NORMAL : A_BOLD);
    *cy = 1;
    *cx = 1 + (int)rd_width(q, strlen(q));
    if (*cx > iw)
        *cx = iw;
    int shown = 0, y = 2, matched = 0;
    int per = 2;
    int room = (rows - 4) / per;
    int first = t->list_sel >= room ? t->list_sel - room + 1 : 0;
    for (size_t i = 0; i < t->tr.nconv; i++) {
        if (!trs_conv_matches(&t->tr.convs[i], t->query))
            continue;
        if (matched++ < first)
            continue;
        if (y + 1 >= rows - 2)
            break;
        attr_t a = shown + first == t->list_sel ? A_REVERSE : A_NORMAL;
        draw_cut(t->tr.convs[i].title[0] ? t->tr.convs[i].title : t->tr.convs[i].id, y, 1, iw, a | A_BOLD);
        if (y + 1 < rows)
            draw_cut(t->tr.convs[i].detail, y + 1, 3, iw - 2, A_DIM);
        y += per;
        shown++;
    }
    if (matched == 0)
        draw_cut(t->tr.nconv ? "no conversation matches" : t->list_empty, 2, 1, iw, A_DIM);
}

static void draw(tui *t)
{
    if (t->full_redraw) {
        clearok(curscr, TRUE);
        t->full_redraw = 0;
    }
    erase();
    int cy = 0, cx = 0;
    int max_in = LINES / 3 > 1 ? LINES / 3 : 1;
    int in_rows = input_layout(t, max_in, 0, 0, &cy, &cx);
    int status_y = LINES - in_rows - 1;
    if (status_y < 0)
        status_y = 0;
    draw_transcript(t, status_y);
    int lcy = -1, lcx = 0;
    if (t->list_open)
        draw_list(t, status_y, &lcy, &lcx);
    draw_status(t, status_y);
    input_layout(t, in_rows, status_y + 1, 1, &cy, &cx);
    if (t->list_open && lcy >= 0)
        move(lcy, lcx);
    else
        move(cy, cx < COLS ? cx : COLS - 1);
    curs_set(1);
    wnoutrefresh(stdscr);
    doupdate();
    t->dirty = t->input_dirty = 0;
    t->last_draw = now_s();
}

/* ---- the app's events ------------------------------------------------------------------------------ */

static void tui_flash(tui *t, const char *msg)
{
    size_t n = strlen(msg);
    if (n >= sizeof t->flash) { /* cut at a character: the status line cuts it further */
        n = sizeof t->flash - 1;
        while (n > 0 && ((unsigned char)msg[n] & 0xC0) == 0x80)
            n--;
    }
    memcpy(t->flash, msg, n);
    t->flash[n] = '\0';
    t->flash_until = now_s() + 3.0;
    t->dirty = 1;
}

/* One app event: the transcript takes most; the input line, stop and alerts are the TUI's. */
static void apply_event(tui *t, const uiq_item *ev)
{
    t->dirty = 1;
    switch (ev->type) {
    case UI_EV_SET_INPUT:
        tui_input_replace(ev->text);
        return;
    case UIQ_STOP:
        t->stop = 1;
        return;
    case UI_EV_USER:
    case UI_EV_CLEAR:
        t->scroll = 0;
        break;
    case UI_EV_TOOL_APPROVE:
        t->scroll = 0;
        t->flash[0] = '\0';
        beep();
        break;
    case UI_EV_FINISH:
        if (strcmp(ev->text, "canceled") == 0)
            tui_flash(t, "canceled: the partial reply is kept");
        break;
    case UI_EV_CONV_CLEAR:
        t->list_sel = 0;
        break;
    default:
        break;
    }
    trs_apply(&t->tr, ev, now_s());
}

static void drain_events(tui *t)
{
    uiq_item *it = ui_view_take(t->v);
    while (it) {
        uiq_item *n = it->next;
        apply_event(t, it);
        uiq_item_free(it);
        it = n;
    }
    if (t->v->lost) {
        pthread_mutex_lock(&t->v->mu);
        int lost = t->v->lost;
        t->v->lost = 0;
        pthread_mutex_unlock(&t->v->mu);
        char msg[96];
        snprintf(msg, sizeof msg, "out of memory: %d screen updates were dropped", lost);
        trs_add_text(&t->tr, TRS_ERROR, msg, strlen(msg));
    }
}

/* ---- actions to the app ----------------------------------------------------------------------------- */

static void act(tui *t, ui_action_type type, const char *text, const char *name, const char *id,
                char answer)
{
    ui_action a = {type, text ? text : "", text ? strlen(text) : 0, name, id, answer};
    ui_view_act(t->v, &a);
}

static void do_quit(tui *t)
{
    if (t->tr.streaming)
        act(t, UI_ACT_CANCEL, NULL, NULL, NULL, 0);
    act(t, UI_ACT_QUIT, NULL, NULL, NULL, 0);
    t->quit = 1;
}

static void do_cancel(tui *t)
{
    const trs_item *a = trs_answer(&t->tr, 'n', now_s());
    if (a)
        act(t, UI_ACT_APPROVE, NULL, NULL, a->id, 'n');
    act(t, UI_ACT_CANCEL, NULL, NULL, NULL, 0);
    tui_flash(t, "canceling the reply\xe2\x80\xa6");
}

/* ---- copying ------------------------------------------------------------------------------------ */

/* Sends text to the clipboard (and the copy file) and says in the status line what went where. */
static void copy_out(tui *t, const char *what, const char *text, size_t len)
{
    char how[700], msg[900];
    int rc = clip_copy(STDOUT_FILENO, t->v->cfg.copy_file, text, len, how, sizeof how);
    snprintf(msg, sizeof msg, "%s %s: %s", rc == 0 ? "copied" : "copy of", what, how);
    tui_flash(t, msg);
}

static int count_lines(const char *s, size_t n)
{
    int lines = n > 0;
    for (size_t i = 0; i + 1 < n; i++)
        lines += s[i] == '\n';
    return lines;
}

/* Copies the last reply's raw text (Markdown as written). */
static void copy_last_reply(tui *t)
{
    size_t len = 0;
    char *text = trs_last_reply(&t->tr, &len);
    if (!text || !len) {
        tui_flash(t, "no reply to copy yet");
        free(text);
        return;
    }
    char what[96];
    int lines = count_lines(text, len);
    snprintf(what, sizeof what, "the last reply (%d line%s, %zu bytes)", lines, lines == 1 ? "" : "s", len);
    copy_out(t, what, text, len);
    free(text);
}

/* Scrolls so that the selected code block's first line shows (at the top when it did not). */
static void show_code(tui *t)
{
    int w = text_width(t), rows = LINES - 3, below = 0, found = -1;
    for (size_t i = t->tr.n; i-- > 0;) {
        int n = trs_item_lines(&t->tr, i, w);
        int at = found < 0 ? trs_code_line(&t->tr, i, w) : -1;
        if (at >= 0) {
            found = below + (n - at); /* lines from the block's first to the end */
            break;
        }
        below += n;
    }
    if (found < 0 || rows < 1)
        return;
    if (t->scroll < found && found <= t->scroll + rows)
        return;
    t->scroll = found - rows > 0 ? found - rows : 0;
}

/* Copies block k (0-based) of the last reply's n code blocks, and shows it selected. */
static void copy_block(tui *t, const trs_code *c, int k, int n)
{
    size_t len;
    const trs_item *it = c[k].item;
    char *text = cb_text(it->text.s ? it->text.s : "", &c[k].block, &len);
    if (!text) {
        tui_flash(t, "out of memory copying the code block");
        return;
    }
    trs_code_select(&t->tr, k);
    show_code(t);
    t->dirty = 1;
    char what[160];
    const char *lang = c[k].block.lang;
    int lines = c[k].block.lines;
    snprintf(what, sizeof what, "code block %d/%d (%s%s%d line%s)", k + 1, n, lang, lang[0] ? ", " : "",
             lines, lines == 1 ? "" : "s");
    if (len == 0) {
        char msg[200];
        snprintf(msg, sizeof msg, "%s is empty: nothing copied", what);
        tui_flash(t, msg);
    } else {
        copy_out(t, what, text, len);
    }
    free(text);
}

/* Alt-K: the last reply's last code block; again, the one before it (round to the last). */
static void copy_code_key(tui *t)
{
    trs_code *c;
    size_t n;
    if (trs_code_blocks(&t->tr, &c, &n) < 0) {
        tui_flash(t, "out of memory finding the code blocks");
        return;
    }
    if (n == 0) {
        tui_flash(t, "no code block in the last reply (Alt-W copies the whole reply)");
        return;
    }
    int sel = t->tr.code_sel;
    int k = sel >= 1 && (size_t)sel < n ? sel - 1 : (int)n - 1;
    copy_block(t, c, k, (int)n);
    free(c);
}

/* /copy [N|all]: code block N of the last reply (1-based), its last by default, or all of it;
 * a reply without code blocks is copied whole, and the status line says so. */
static void copy_command(tui *t, const char *line_args)
{
    char args[64];
    size_t an = strcspn(line_args, " \t\n");
    snprintf(args, sizeof args, "%.*s", (int)(an < sizeof args ? an : sizeof args - 1), line_args);
    if (line_args[an + strspn(line_args + an, " \t\n")]) {
        tui_flash(t, "/copy takes one word: a code block number or 'all'");
        return;
    }
    if (strcmp(args, "all") == 0) {
        copy_last_reply(t);
        return;
    }
    trs_code *c;
    size_t n;
    if (trs_code_blocks(&t->tr, &c, &n) < 0) {
        tui_flash(t, "out of memory finding the code blocks");
        return;
    }
    char msg[200];
    char *end;
    long k = args[0] ? strtol(args, &end, 10) : (long)n;
    if (args[0] && (*end || end == args)) {
        snprintf(msg, sizeof msg, "/copy takes a code block number or 'all', not '%.40s'", args);
        tui_flash(t, msg);
    } else if (n == 0 && !args[0]) {
        copy_last_reply(t); /* its message says it was the whole reply */
    } else if (n == 0) {
        tui_flash(t, "the last reply has no code block: /copy all copies the whole reply");
    } else if (k < 1 || (size_t)k > n) {
        if (n == 1)
            snprintf(msg, sizeof msg, "the last reply has 1 code block: /copy 1 (or /copy all)");
        else
            snprintf(msg, sizeof msg, "the last reply has %zu code blocks: /copy 1 to %zu (or /copy all)", n, n);
        tui_flash(t, msg);
    } else {
        copy_block(t, c, (int)k - 1, (int)n);
    }
    free(c);
}

/* ---- slash commands (the view's part) ------------------------------------------------------------ */

static void add_help_key(const char *keys, const char *help, void *user)
{
    trs_buf *h = user;
    if (h->len && h->s[h->len - 1] != '\n')
        trs_buf_add(h, " \xc2\xb7 ", 4);
    trs_buf_add(h, keys, strlen(keys));
    trs_buf_add(h, " ", 1);
    trs_buf_add(h, help, strlen(help));
}

/* /help: the command table and the key table, written out. */
static void show_help(tui *t, const char *args)
{
    (void)args;
    trs_buf h = {0};
    for (size_t i = 0; i < ui_commands_count; i++) {
        const ui_command *c = &ui_commands[i];
        char line[300];
        snprintf(line, sizeof line, "/%s%s%s%s%s \xe2\x80\x94 %s\n", c->name, c->alias ? " or /" : "",
                 c->alias ? c->alias : "", c->args[0] ? " " : "", c->args, c->help);
        trs_buf_add(&h, line, strlen(line));
    }
    ui_keys_each(add_help_key, &h);
    const char *notes = "\nShift-drag selects text \xc2\xb7 A line led by a path (/etc/hosts: ...) is a message "
                        "\xc2\xb7 //text sends /text";
    trs_buf_add(&h, notes, strlen(notes));
    if (h.s)
        trs_add_text(&t->tr, TRS_NOTICE, h.s, h.len);
    free(h.s);
}

/* Opens (or closes) the conversation list; empty says what it shows while it holds nothing. */
static void open_list(tui *t, int open, const char *empty)
{
    snprintf(t->list_empty, sizeof t->list_empty, "%s", empty);
    t->list_open = open;
    t->list_sel = 0;
    t->list_mode = LIST_BROWSE;
    t->query[0] = '\0';
    t->dirty = 1;
}

static void list_command(tui *t, const char *args)
{
    (void)args;
    open_list(t, 1, "no saved conversations yet"); /* the app fills it */
}

static void search_command(tui *t, const char *args)
{
    char empty[200];
    snprintf(empty, sizeof empty, "no match for %.150s", args);
    open_list(t, 1, empty);
}

static void quit_command(tui *t, const char *args)
{
    (void)args;
    do_quit(t);
}

/* The view's handlers of the commands flagged UI_CMD_VIEW in ui/commands.c. */
typedef struct tui_command {
    const char *name;
    void (*run)(tui *t, const char *args);
} tui_command;

static const tui_command tui_commands[] = {
    {"list", list_command}, {"search", search_command}, {"copy", copy_command},
    {"help", show_help},    {"quit", quit_command},
};

static const tui_command *tui_command_find(const char *name)
{
    for (size_t i = 0; i < sizeof tui_commands / sizeof tui_commands[0]; i++)
        if (strcmp(tui_commands[i].name, name) == 0)
            return &tui_commands[i];
    return NULL;
}

int tui_runs_command(const char *name)
{
    return tui_command_find(name) != NULL;
}

static void run_command(tui *t, const char *line)
{
    char name[32];
    const char *args;
    const ui_command *c = ui_command_parse(line, name, sizeof name, &args);
    if (!c) {
        const char *names[64];
        size_t n = 0;
        for (size_t i = 0; i < ui_commands_count && n < 64; i++)
            names[n++] = ui_commands[i].name;
        const char *meant = suggest_closest(name, names, n);
        char msg[160];
        if (meant)
            snprintf(msg, sizeof msg, "unknown command /%s: did you mean /%s? /help lists the commands", name,
                     meant);
        else
            snprintf(msg, sizeof msg, "unknown command /%s: /help lists the commands", name);
        trs_add_text(&t->tr, TRS_ERROR, msg, strlen(msg));
        return;
    }
    if (c->flags & UI_CMD_VIEW) {
        const tui_command *h = tui_command_find(c->name);
        if (!h) {
            char msg[128];
            snprintf(msg, sizeof msg, "/%s has no handler in the TUI (a bug: ui/tui.c tui_commands)", c->name);
            trs_add_text(&t->tr, TRS_ERROR, msg, strlen(msg));
            return;
        }
        h->run(t, args);
    }
    if (!t->quit) /* the app hears of every command but /quit, which it gets as UI_ACT_QUIT */
        act(t, UI_ACT_COMMAND, args, c->name, NULL, 0);
}

void tui_line_done(tui *t, char *line)
{
    if (!line) {
        do_quit(t);
        return;
    }
    const char *p = line;
    while (*p == ' ' || *p == '\n')
        p++;
    if (*p) {
        tui_input_remember(line);
        const char *err = tui_input_take_error();
        if (err)
            trs_add_text(&t->tr, TRS_ERROR, err, strlen(err));
        if (ui_line_is_command(p))
            run_command(t, p);
        else
            act(t, UI_ACT_SUBMIT, ui_line_message(line), NULL, NULL, 0);
        t->scroll = 0;
    }
    free(line);
    t->dirty = 1;
}

void tui_input_changed(tui *t)
{
    t->input_dirty = 1;
}

void tui_show_completions(tui *t, char **matches, int count)
{
    char msg[256];
    size_t n = 0;
    for (int i = 0; i < count && n + 2 < sizeof msg; i++)
        n += (size_t)snprintf(msg + n, sizeof msg - n, "%s ", matches[i]);
    tui_flash(t, msg);
}

static void term_on(tui *t)
{
    static const char on[] = "\033[?2004h";
    reset_prog_mode();
    if (!t->v->cfg.no_mouse)
        mousemask(BUTTON4_PRESSED | BUTTON5_PRESSED, NULL);
    refresh();
    if (write(STDOUT_FILENO, on, sizeof on - 1) < 0) {
        /* bracketed paste is a nicety; a terminal that cannot take it still works */
    }
    t->full_redraw = 1;
}

static void term_off(void)
{
    static const char off[] = "\033[?2004l";
    mousemask(0, NULL);
    def_prog_mode();
    endwin();
    if (write(STDOUT_FILENO, off, sizeof off - 1) < 0) {
        /* nothing to do: the terminal is being left anyway */
    }
}

void tui_edit_external(tui *t)
{
    const char *editor = getenv("VISUAL");
    if (!editor || !*editor)
        editor = getenv("EDITOR");
    if (!editor || !*editor)
        editor = "vi";
    const char *dir = getenv("TMPDIR");
    char path[4096];
    snprintf(path, sizeof path, "%s/glmchat-message-XXXXXX", dir && *dir ? dir : "/tmp");
    int fd = mkstemp(path);
    if (fd < 0) {
        tui_flash(t, "cannot make a temporary file for the editor");
        return;
    }
    const char *text = tui_input_text();
    size_t len = strlen(text), off = 0;
    while (off < len) {
        ssize_t w = write(fd, text + off, len - off);
        if (w <= 0)
            break;
        off += (size_t)w;
    }
    close(fd);
    term_off();
    pid_t pid = fork();
    if (pid == 0) {
        /* $0 unquoted: an editor given with options ("emacs -nw") splits into words */
        execl("/bin/sh", "sh", "-c", "$0 \"$1\"", editor, path, (char *)NULL);
        _exit(127);
    }
    int status = 0;
    if (pid > 0)
        while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
            ;
    term_on(t);
    FILE *f = fopen(path, "r");
    trs_buf b = {0};
    if (pid > 0 && f && WIFEXITED(status) && WEXITSTATUS(status) == 0) {
        char chunk[4096];
        size_t got;
        while ((got = fread(chunk, 1, sizeof chunk, f)) > 0)
            trs_buf_add(&b, chunk, got);
        while (b.len > 0 && b.s[b.len - 1] == '\n')
            b.s[--b.len] = '\0';
        tui_input_replace(b.s ? b.s : "");
    } else {
        tui_flash(t, "the editor failed; the message is unchanged");
    }
    if (f)
        fclose(f);
    free(b.s);
    unlink(path);
}

/* ---- keys --------------------------------------------------------------------------------------------- */

static void toggle_fold(tui *t)
{
    if (trs_toggle(&t->tr) < 0)
        tui_flash(t, "nothing to fold: no thinking or tool call yet");
    t->dirty = 1;
}

/* Scrolls so that item idx's first line shows. */
static void show_item(tui *t, int idx)
{
    int w = text_width(t);
    int below = 0;
    for (size_t i = (size_t)idx + 1; i < t->tr.n; i++)
        below += trs_item_lines(&t->tr, (size_t)(int)i, w);
    int n = trs_item_lines(&t->tr, (size_t)idx, w);
    int rows = LINES - 3;
    if (t->scroll > below + n - 1 || t->scroll + rows < below + n)
        t->scroll = below + n - (rows > 0 ? rows : 1) > 0 ? below + n - rows / 2 : 0;
    if (t->scroll < 0)
        t->scroll = 0;
}

static void select_step(tui *t, int dir)
{
    int i = trs_select_step(&t->tr, dir);
    if (i >= 0)
        show_item(t, i);
    t->dirty = 1;
}

static void scroll_by(tui *t, int lines)
{
    t->scroll += lines;
    if (t->scroll < 0)
        t->scroll = 0;
    t->dirty = 1;
}

static void finish_paste(tui *t)
{
    t->paste = 0;
    size_t n;
    char *clean = rd_sanitize(t->pastebuf.s ? t->pastebuf.s : "", t->pastebuf.len, &n);
    if (clean)
        tui_input_insert(clean);
    free(clean);
    t->pastebuf.len = 0;
}

static int visible_convs(const tui *t)
{
    int n = 0;
    for (size_t i = 0; i < t->tr.nconv; i++)
        n += trs_conv_matches(&t->tr.convs[i], t->query);
    return n;
}

/* The conversation shown at the selection, or NULL. */
static const trs_conv *selected_conv(const tui *t)
{
    int k = 0;
    for (size_t i = 0; i < t->tr.nconv; i++)
        if (trs_conv_matches(&t->tr.convs[i], t->query) && k++ == t->list_sel)
            return &t->tr.convs[i];
    return NULL;
}

/* Edits a one-line buffer with a key: backspace or a printable byte. */
static void edit_line(char *buf, size_t cap, int ch)
{
    size_t q = strlen(buf);
    if (ch == KEY_BACKSPACE || ch == 127 || ch == 8) {
        while (q > 0 && ((unsigned char)buf[q - 1] & 0xC0) == 0x80)
            q--;
        if (q > 0)
            q--;
        buf[q] = '\0';
    } else if (ch >= 0x20 && ch < 0x100 && ch != 0x7F && q + 1 < cap) {
        buf[q] = (char)ch;
        buf[q + 1] = '\0';
    }
}

/* A key while the list asks something (delete? the new title). */
static void list_question_key(tui *t, int ch)
{
    if (t->list_mode == LIST_CONFIRM_DELETE) {
        t->list_mode = LIST_BROWSE;
        if (ch == 'y' || ch == 'Y') {
            act(t, UI_ACT_DELETE, NULL, NULL, t->list_target, 0);
            t->list_sel = 0;
        }
        return;
    }
    if (ch == 27 || ch == 3) {
        t->list_mode = LIST_BROWSE;
    } else if (ch == '\r' || ch == KEY_ENTER || ch == '\n') {
        t->list_mode = LIST_BROWSE;
        act(t, UI_ACT_RENAME, t->list_edit, NULL, t->list_target, 0);
    } else {
        edit_line(t->list_edit, sizeof t->list_edit, ch);
    }
}

/* Del or Ctrl-R on the selected conversation: asks first. */
static void list_ask(tui *t, int mode)
{
    const trs_conv *c = selected_conv(t);
    if (!c)
        return;
    snprintf(t->list_target, sizeof t->list_target, "%s", c->id);
    snprintf(t->list_edit, sizeof t->list_edit, "%s", c->title);
    t->list_mode = mode;
}

static void list_key(tui *t, int ch)
{
    t->dirty = 1;
    if (t->list_mode != LIST_BROWSE) {
        list_question_key(t, ch);
        return;
    }
    if (ch == 27 || ch == KEY_F(2) || ch == 3) {
        open_list(t, 0, "");
        return;
    }
    if (ch == KEY_DC || ch == 18 /* Ctrl-R */) {
        list_ask(t, ch == KEY_DC ? LIST_CONFIRM_DELETE : LIST_RENAME);
        return;
    }
    if (ch == KEY_UP && t->list_sel > 0) {
        t->list_sel--;
        return;
    }
    if (ch == KEY_DOWN && t->list_sel + 1 < visible_convs(t)) {
        t->list_sel++;
        return;
    }
    if (ch == '\r' || ch == KEY_ENTER || ch == '\n') {
        int k = 0;
        for (size_t i = 0; i < t->tr.nconv; i++) {
            if (!trs_conv_matches(&t->tr.convs[i], t->query))
                continue;
            if (k++ == t->list_sel) {
                char *id = strdup(t->tr.convs[i].id);
                open_list(t, 0, "");
                if (id)
                    act(t, UI_ACT_OPEN, NULL, NULL, id, 0);
                free(id);
                return;
            }
        }
        return;
    }
    edit_line(t->query, sizeof t->query, ch);
    t->list_sel = 0;
}

static void ctrl_c(tui *t)
{
    double now = now_s();
    if (tui_input_searching()) {
        tui_input_feed("\007", 1);
        return;
    }
    if (t->tr.streaming) { /* a second press on a reply that has not stopped yet quits */
        if (now - t->cancel_ctrl_c < 2.0) {
            do_quit(t);
            return;
        }
        do_cancel(t);
        t->cancel_ctrl_c = now;
        t->last_ctrl_c = 0; /* the next press, once the reply stopped, shows the hint first */
        return;
    }
    if (now - t->last_ctrl_c < 2.0) {
        do_quit(t);
        return;
    }
    t->last_ctrl_c = now;
    if (tui_input_text()[0]) {
        tui_input_replace("");
        tui_flash(t, "input cleared \xc2\xb7 Ctrl-C again quits");
        return;
    }
    tui_flash(t, "Ctrl-C again or Ctrl-D quits");
}

static void escape(tui *t)
{
    if (tui_input_searching()) { /* ends the search, keeping the line it found */
        tui_input_feed("\033", 1);
        return;
    }
    if (t->tr.streaming) {
        do_cancel(t);
        return;
    }
    if (t->tr.sel >= 0) {
        t->tr.sel = -1;
        t->dirty = 1;
    }
    if (t->tr.code_sel >= 0) {
        trs_code_select(&t->tr, -1);
        t->dirty = 1;
    }
}

static void feed_key(int ch)
{
    static const struct { int key; const char *seq; } map[] = {
        {KEY_LEFT, "\033[D"}, {KEY_RIGHT, "\033[C"}, {KEY_UP, "\033[A"}, {KEY_DOWN, "\033[B"},
        {KEY_HOME, "\033[H"}, {KEY_END, "\033[F"}, {KEY_DC, "\033[3~"}, {KEY_BACKSPACE, "\177"},
        {KEY_ENTER, "\r"}, {KEY_CTRL_LEFT, "\033b"}, {KEY_CTRL_RIGHT, "\033f"},
    };
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
        if (map[i].key == ch) {
            tui_input_feed(map[i].seq, strlen(map[i].seq));
            return;
        }
    if (ch >= 0 && ch < 0x100) {
        char c = (char)ch;
        tui_input_feed(&c, 1);
    }
}

static void mouse_key(tui *t)
{
    MEVENT m;
    if (getmouse(&m) != OK)
        return;
    if (m.bstate & BUTTON4_PRESSED)
        scroll_by(t, 3);
    else if (m.bstate & BUTTON5_PRESSED)
        scroll_by(t, -3);
}

/* Whether the line is a command allowed while a reply streams (UI_CMD_WHILE_STREAMING). */
static int runs_while_streaming(const char *line)
{
    char name[32];
    const char *args;
    const ui_command *c;
    if (!ui_line_is_command(line) || !(c = ui_command_parse(line, name, sizeof name, &args)))
        return 0;
    return (c->flags & UI_CMD_WHILE_STREAMING) != 0;
}

/* ---- the key table ---- */

static void page_up(tui *t)
{
    scroll_by(t, LINES / 2 > 1 ? LINES / 2 : 1);
}

static void page_down(tui *t)
{
    scroll_by(t, -(LINES / 2 > 1 ? LINES / 2 : 1));
}

static void paste_begin(tui *t)
{
    t->paste = 1;
    t->pastebuf.len = 0;
}

static void conversation_list_key(tui *t)
{
    if (!t->list_open)
        act(t, UI_ACT_COMMAND, "", "list", NULL, 0);
    open_list(t, !t->list_open, "no saved conversations yet");
}

static void select_up(tui *t)
{
    select_step(t, -1);
}

static void select_down(tui *t)
{
    select_step(t, 1);
}

static void redraw_key(tui *t)
{
    t->full_redraw = 1;
    t->dirty = 1;
}

static void suspend_key(tui *t)
{
    term_off();
    raise(SIGSTOP);
    term_on(t);
}

/* Enter: readline's, but a message waits while a reply streams; commands that may run then do. */
static void enter_key(tui *t)
{
    if ((t->tr.streaming || t->tr.ask >= 0) && !tui_input_searching() &&
        !runs_while_streaming(tui_input_text())) {
        tui_flash(t, "a reply is streaming: Esc cancels it; your message waits here");
        return;
    }
    feed_key('\r');
}

#define ALT(c) (0x2000 | (c)) /* Esc then the letter: our code for Alt-letter */

enum {
    TK_ANYWHERE = 1 << 0,        /* also while the conversation list is open */
    TK_WHILE_STREAMING = 1 << 1, /* also while a reply streams or a tool call asks */
};

/* A key the TUI answers itself; code 0 for readline's keys (input.c), listed for /help. An
 * entry with no help is documented by the one before it. */
typedef struct tui_key {
    int code;
    const char *keys; /* as /help writes them */
    unsigned flags;
    void (*run)(tui *t);
    const char *help;
} tui_key;

static const tui_key tui_keys[] = {
    {'\r', "Enter", TK_WHILE_STREAMING, enter_key, "sends"},
    {KEY_ENTER, "Enter", TK_WHILE_STREAMING, enter_key, NULL},
    {0, "Alt-Enter or Ctrl-J", 0, NULL, "new line"},
    {0, "Ctrl-G", 0, NULL, "edits in $EDITOR"},
    {0, "Ctrl-R", 0, NULL, "searches history"},
    {KEY_UP, "Up/Down", TK_WHILE_STREAMING, up_key, "move through a message's rows, then the history"},
    {KEY_DOWN, "Down", TK_WHILE_STREAMING, down_key, NULL},
    {0, "Tab", 0, NULL, "completes /commands"},
    {27, "Esc", TK_WHILE_STREAMING, escape, "cancels a reply or drops the selection"},
    {3, "Ctrl-C", TK_WHILE_STREAMING, ctrl_c, "cancels a reply; twice quits"},
    {0, "Ctrl-D", 0, NULL, "quits"},
    {KEY_PPAGE, "PageUp/PageDown or the wheel", TK_ANYWHERE | TK_WHILE_STREAMING, page_up, "scroll"},
    {KEY_NPAGE, "PageDown", TK_ANYWHERE | TK_WHILE_STREAMING, page_down, NULL},
    {KEY_MOUSE, "wheel", TK_ANYWHERE | TK_WHILE_STREAMING, mouse_key, NULL},
    {20, "Ctrl-T", TK_WHILE_STREAMING, toggle_fold, "folds or unfolds thinking and tool calls"},
    {KEY_ALT_UP, "Alt-Up/Alt-Down", TK_ANYWHERE | TK_WHILE_STREAMING, select_up, "select one"},
    {KEY_ALT_DOWN, "Alt-Down", TK_ANYWHERE | TK_WHILE_STREAMING, select_down, NULL},
    {ALT('k'), "Alt-K", TK_WHILE_STREAMING, copy_code_key,
     "copies the last code block of the last reply (again: the one before)"},
    {ALT('w'), "Alt-W", TK_WHILE_STREAMING, copy_last_reply, "copies the last reply"},
    {KEY_F(2), "F2", TK_ANYWHERE, conversation_list_key, "conversations"},
    {12, "Ctrl-L", TK_WHILE_STREAMING, redraw_key, "redraws"},
    {26, "Ctrl-Z", TK_WHILE_STREAMING, suspend_key, "suspends"},
    {KEY_PASTE_BEGIN, "paste", TK_ANYWHERE | TK_WHILE_STREAMING, paste_begin, NULL},
};

void ui_keys_each(void (*each)(const char *keys, const char *help, void *user), void *user)
{
    for (size_t i = 0; i < sizeof tui_keys / sizeof tui_keys[0]; i++)
        if (tui_keys[i].help)
            each(tui_keys[i].keys, tui_keys[i].help, user);
}

static const tui_key *key_find(int code)
{
    for (size_t i = 0; i < sizeof tui_keys / sizeof tui_keys[0]; i++)
        if (tui_keys[i].code == code && tui_keys[i].run)
            return &tui_keys[i];
    return NULL;
}

/* Runs the key's entry if it has one that applies now; 0 when the key is for readline. */
static int run_key(tui *t, const tui_key *k)
{
    if (!k || (t->list_open && !(k->flags & TK_ANYWHERE)))
        return 0;
    if ((t->tr.streaming || t->tr.ask >= 0) && !(k->flags & TK_WHILE_STREAMING)) {
        char msg[160];
        snprintf(msg, sizeof msg, "a reply is streaming: %s waits for it (Esc cancels it)", k->keys);
        tui_flash(t, msg);
        return 1;
    }
    k->run(t);
    return 1;
}

/* Whether Esc and then this key is how a terminal sends Alt-key: a printable ASCII character,
 * Enter or Ctrl-J (Alt-Enter), Backspace. Any other key (a control key such as Ctrl-D, a second
 * Esc, a byte of a UTF-8 character, a resize, the wheel, PageUp, F2, an arrow) has no Alt- form
 * here: it only came within Esc's wait, typed fast or read late on a busy machine. */
static int makes_alt_key(int ch)
{
    return (ch >= 0x20 && ch < 0x7f) || ch == '\r' || ch == '\n' || ch == 127 || ch == 8 ||
           ch == KEY_ENTER || ch == KEY_BACKSPACE;
}

/* Esc alone, or Esc and a key: Alt-key, ours or readline's. A key that makes no Alt-key goes
 * back to ncurses, to be read next on its own: handed to readline after a lone Esc it would be
 * lost (a resize, F2), or readline would hold that Esc and take the key after as Alt-key, so
 * that Ctrl-D no longer quits and Esc no longer cancels. */
static void escape_key(tui *t)
{
    int next = getch();
    if (next == ERR || !makes_alt_key(next)) {
        run_key(t, key_find(27));
        if (next != ERR && ungetch(next) == ERR)
            tui_flash(t, "a key pressed right after Esc was lost: press it again");
        return;
    }
    int lower = next >= 'A' && next <= 'Z' ? next - 'A' + 'a' : next;
    if (next < 0x100 && run_key(t, key_find(ALT(lower))))
        return;
    tui_input_feed("\033", 1);
    feed_key(next);
}

static void handle_key(tui *t, int ch)
{
    t->input_dirty = 1;
    if (ch == KEY_RESIZE) {
        t->dirty = 1;
        return;
    }
    if (t->paste) {
        if (ch == KEY_PASTE_END)
            finish_paste(t);
        else if (ch == '\r')
            trs_buf_add(&t->pastebuf, "\n", 1);
        else if (ch >= 0 && ch < 0x100) {
            char c = (char)ch;
            trs_buf_add(&t->pastebuf, &c, 1);
        }
        return;
    }
    const tui_key *k = key_find(ch);
    if (k && (k->flags & TK_ANYWHERE) && run_key(t, k))
        return;
    if (t->list_open) {
        list_key(t, ch);
        return;
    }
    if (t->tr.ask >= 0 && ch < 0x100 && strchr("yYcCnNaA", ch) && ch) {
        char ans = (char)(ch | 0x20);
        const trs_item *a = trs_answer(&t->tr, ans, now_s());
        t->dirty = 1;
        if (a)
            act(t, UI_ACT_APPROVE, NULL, NULL, a->id, ans);
        return;
    }
    if (ch == 27) {
        escape_key(t);
        return;
    }
    if (run_key(t, k))
        return;
    feed_key(ch);
}

/* ---- the loop ------------------------------------------------------------------------------------------ */

static void on_term_signal(int sig)
{
    got_term_signal = sig;
}

static int poll_timeout(const tui *t)
{
    if (t->tr.think && t->tr.think->live)
        return 100; /* the thinking clock */
    if (t->flash[0] || t->tr.waiting)
        return 250; /* the flash's end, the wait's clock */
    return 1000;
}

static int tui_run(ui_view *v)
{
    tui *t = v->impl;
    draw(t);
    double prev_woke = now_s();
    while (!t->quit && !t->stop && !got_term_signal) {
        struct pollfd fds[2] = {{STDIN_FILENO, POLLIN, 0}, {v->wake[0], POLLIN, 0}};
        int timeout = poll_timeout(t);
        if (t->dirty && !t->input_dirty) {
            /* Only app events pending: at most one frame every 8 ms. */
            double since = (now_s() - t->last_draw) * 1000.0;
            timeout = since >= 8 ? 0 : (int)(8 - since);
        }
        double poll_start = now_s();
        int r = poll(fds, 2, timeout);
        if (r < 0 && errno != EINTR)
            break;
        if (r > 0 && (fds[0].revents & (POLLHUP | POLLERR | POLLNVAL))) {
            do_quit(t); /* the terminal went away */
            break;
        }
        int ch, keys = 0;
        double woke = now_s();
        /* A key found without waiting came in while the last round worked: count from then. */
        double arrived = woke - poll_start < 0.0001 ? prev_woke : woke;
        prev_woke = woke;
        while ((ch = getch()) != ERR && !t->quit) {
            handle_key(t, ch);
            keys++;
        }
        drain_events(t);
        if (t->quit || t->stop)
            break;
        double since = (now_s() - t->last_draw) * 1000.0;
        if (t->input_dirty || (t->dirty && since >= 8) || r == 0)
            draw(t);
        if (keys && t->latency_log)
            fprintf(t->latency_log, "key_ms %.3f\n", (now_s() - arrived) * 1000.0);
    }
    if (got_term_signal && !t->quit) {
        act(t, UI_ACT_CANCEL, NULL, NULL, NULL, 0);
        act(t, UI_ACT_QUIT, NULL, NULL, NULL, 0);
    }
    return 0;
}

static void tui_free_impl(ui_view *v)
{
    tui *t = v->impl;
    if (!t)
        return;
    tui_input_close();
    term_off();
    trs_free(&t->tr);
    if (t->latency_log)
        fclose(t->latency_log);
    free(t->pastebuf.s);
    if (t->screen)
        delscreen(t->screen);
    free(t);
}

static const ui_view_ops tui_ops = {tui_run, tui_free_impl};

/* The TUI needs a UTF-8 LC_CTYPE for wide characters; C.UTF-8 when the user's is not. */
static void ensure_utf8_locale(void)
{
    const char *set = setlocale(LC_CTYPE, "");
    const char *cs = set ? nl_langinfo(CODESET) : "";
    if (!set || (strcmp(cs, "UTF-8") != 0 && strcmp(cs, "utf8") != 0))
        setlocale(LC_CTYPE, "C.UTF-8");
}

static void define_keys(void)
{
    define_key("\033[200~", KEY_PASTE_BEGIN);
    define_key("\033[201~", KEY_PASTE_END);
    define_key("\033[1;3A", KEY_ALT_UP);
    define_key("\033[1;3B", KEY_ALT_DOWN);
    define_key("\033[1;5D", KEY_CTRL_LEFT);
    define_key("\033[1;5C", KEY_CTRL_RIGHT);
}

ui_view *ui_tui_new(const ui_config *cfg, char *err, size_t errlen)
{
    if (!isatty(STDIN_FILENO) || !isatty(STDOUT_FILENO)) {
        snprintf(err, errlen, "the TUI needs a terminal on stdin and stdout; glmchat chat --prompt or piped stdin runs without one");
        return NULL;
    }
    ui_view *v = malloc(sizeof *v);
    tui *t = calloc(1, sizeof *t);
    if (!v || !t) {
        snprintf(err, errlen, "out of memory making the TUI");
        free(v);
        free(t);
        return NULL;
    }
    if (ui_view_init(v, cfg, &tui_ops, err, errlen) < 0) {
        free(v);
        free(t);
        return NULL;
    }
    t->v = v;
    trs_init(&t->tr);
    if (cfg && cfg->latency_log && !(t->latency_log = fopen(cfg->latency_log, "a"))) {
        snprintf(err, errlen, "cannot open the latency log %s: %s", cfg->latency_log, strerror(errno));
        v->impl = NULL;
        free(t);
        ui_free(v);
        return NULL;
    }
    if (t->latency_log)
        setvbuf(t->latency_log, NULL, _IOLBF, 0);
    t->empty_hint = cfg ? cfg->empty_hint : NULL;
    v->impl = t;
    ensure_utf8_locale();
    const char *term = getenv("TERM");
    SCREEN *sp = newterm(term && *term ? term : "xterm", stdout, stdin);
    if (!sp) {
        snprintf(err, errlen, "cannot set up the terminal TERM=%s: try TERM=xterm-256color",
                 term ? term : "(unset)");
        v->impl = NULL;
        free(t);
        ui_free(v);
        return NULL;
    }
    set_term(sp);
    t->screen = sp;
    raw();
    noecho();
    nonl();
    keypad(stdscr, TRUE);
    nodelay(stdscr, TRUE);
    set_escdelay(25);
    mouseinterval(0);
    if (!cfg || !cfg->no_color)
        init_colors(t);
    define_keys();
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_term_signal;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    if (tui_input_open(t, cfg ? cfg->history_file : NULL, err, errlen) < 0) {
        endwin();
        ui_free(v);
        return NULL;
    }
    term_on(t);
    return v;
}
