/* render.c: text layout for the views: UTF-8, display width, wrapping, Markdown-lite.
 * Pure functions over byte strings; the TUI draws the rd_doc lines these produce. */
#include "ui/render.h"
#include "ui/visible.h"

#include <stdlib.h>
#include <string.h>
#include <wchar.h>

#include "base/grow.h"
#include "base/md_table.h"
#include "base/utf8.h"
#include "ui/highlight.h"

/* ---- widths (UTF-8 is decoded by base/utf8.h: one U+FFFD per maximal invalid subpart) ---- */

/* Used when the locale gives no answer (C locale): the common zero-width and wide ranges. */
static int fallback_width(uint32_t cp)
{
    static const uint32_t zero[][2] = {
        {0x0300, 0x036F}, {0x0483, 0x0489}, {0x0591, 0x05BD}, {0x0610, 0x061A},
        {0x064B, 0x065F}, {0x0E31, 0x0E31}, {0x0E34, 0x0E3A}, {0x1AB0, 0x1AFF},
        {0x1DC0, 0x1DFF}, {0x200B, 0x200F}, {0x20D0, 0x20FF}, {0xFE00, 0xFE0F},
        {0xFE20, 0xFE2F}, {0xE0100, 0xE01EF},
    };
    static const uint32_t wide[][2] = {
        {0x1100, 0x115F}, {0x231A, 0x231B}, {0x2E80, 0x303E}, {0x3041, 0x33FF},
        {0x3400, 0x4DBF}, {0x4E00, 0x9FFF}, {0xA000, 0xA4CF}, {0xAC00, 0xD7A3},
        {0xF900, 0xFAFF}, {0xFE30, 0xFE4F}, {0xFF00, 0xFF60}, {0xFFE0, 0xFFE6},
        {0x1F300, 0x1F64F}, {0x1F680, 0x1F6FF}, {0x1F900, 0x1F9FF}, {0x20000, 0x3FFFD},
    };
    for (size_t i = 0; i < sizeof zero / sizeof zero[0]; i++)
        if (cp >= zero[i][0] && cp <= zero[i][1])
            return 0;
    for (size_t i = 0; i < sizeof wide / sizeof wide[0]; i++)
        if (cp >= wide[i][0] && cp <= wide[i][1])
            return 2;
    return 1;
}

int rd_cp_width(uint32_t cp)
{
    if (cp < 0x20 || cp == 0x7F)
        return 1;
    if (cp < 0x7F)
        return 1;
    int w = wcwidth((wchar_t)cp);
    if (w >= 0 && w <= 2)
        return w;
    return fallback_width(cp);
}

size_t rd_width(const char *s, size_t len)
{
    size_t w = 0;
    for (size_t i = 0; i < len;) {
        uint32_t cp;
        i += utf8_next(s + i, len - i, &cp);
        w += (size_t)rd_cp_width(cp);
    }
    return w;
}

size_t rd_cluster_len(const char *s, size_t len, int *width)
{
    uint32_t cp;
    size_t n = utf8_next(s, len, &cp);
    int w = rd_cp_width(cp);
    while (n < len) {
        size_t m = utf8_next(s + n, len - n, &cp);
        if (cp < 0x80 || rd_cp_width(cp) != 0)
            break;
        n += m;
    }
    if (width)
        *width = w;
    return n;
}

char *rd_sanitize(const char *s, size_t len, size_t *out_len)
{
    /* Worst cases: a byte becomes U+FFFD (3 bytes); a tab becomes 4 spaces; a C1 control (2
     * bytes) becomes \u0080 (6). */
    if (len > (SIZE_MAX - 1) / 4)
        return NULL;
    char *out = malloc(len * 4 + 1);
    if (!out)
        return NULL;
    size_t o = 0, col = 0;
    for (size_t i = 0; i < len;) {
        uint32_t cp;
        i += utf8_next(s + i, len - i, &cp);
        if (cp == '\n') {
            out[o++] = '\n';
            col = 0;
            continue;
        }
        if (cp == '\r' && i < len && s[i] == '\n')
            continue; /* a CRLF line end: the line end alone */
        if (cp == '\t') {
            do {
                out[o++] = ' ';
                col++;
            } while (col % 4);
            continue;
        }
        char esc[8];
        size_t e = visible_escape(cp, esc); /* a control character shows as ^[ or \u009b */
        if (e) {
            memcpy(out + o, esc, e);
            o += e;
            col += e;
            continue;
        }
        o += (size_t)utf8_encode(cp, out + o);
        col += (size_t)rd_cp_width(cp);
    }
    out[o] = '\0';
    *out_len = o;
    return out;
}

/* ---- wrapping ---------------------------------------------------------------------------- */

void rd_pieces_free(rd_pieces *p)
{
    free(p->v);
    p->v = NULL;
    p->n = p->cap = 0;
}

static int pieces_add(rd_pieces *p, size_t off, size_t len, int width)
{
    if (grow_array((void **)&p->v, &p->cap, p->n + 1, sizeof *p->v, 16) != 0)
        return -1;
    p->v[p->n++] = (rd_piece){off, len, width};
    return 0;
}

/* Appends the clusters of s[from, to) to lines of at most width columns; the first line
 * continues one that already holds *col columns and starts at *start. */
static int hard_break(const char *s, size_t from, size_t to, int width, size_t *start, int *col,
                      rd_pieces *out)
{
    size_t i = from;
    while (i < to) {
        int w;
        size_t n = rd_cluster_len(s + i, to - i, &w);
        if (*col + w > width) {
            if (pieces_add(out, *start, i - *start, *col) < 0)
                return -1;
            *start = i;
            *col = 0;
        }
        *col += w;
        i += n;
    }
    return 0;
}

int rd_wrap_hard(const char *s, size_t len, int width, rd_pieces *out)
{
    if (width < 2)
        return -1;
    size_t start = 0;
    int col = 0;
    if (hard_break(s, 0, len, width, &start, &col, out) < 0)
        return -1;
    return pieces_add(out, start, len - start, col);
}

int rd_wrap(const char *s, size_t len, int width, rd_pieces *out)
{
    if (width < 2)
        return -1;
    size_t start = 0;   /* where the current line starts */
    int col = 0;        /* its columns so far */
    size_t ws_at = 0;   /* where the last space run on this line began */
    int have_ws = 0;    /* the line holds a space run after some text: a break point */
    size_t i = 0;
    while (i < len) {
        if (s[i] == ' ') {
            size_t j = i;
            while (j < len && s[j] == ' ')
                j++;
            int w = (int)(j - i);
            if (col + w <= width || col == 0) {
                if (col == 0 && w > width) { /* indentation wider than the line */
                    if (hard_break(s, i, j, width, &start, &col, out) < 0)
                        return -1;
                } else {
                    col += w;
                }
                if (i > start) {
                    ws_at = i;
                    have_ws = 1;
                }
                i = j;
                continue;
            }
            /* The run overflows: break here and drop it. */
            if (pieces_add(out, start, i - start, col) < 0)
                return -1;
            start = j;
            col = 0;
            have_ws = 0;
            i = j;
            continue;
        }
        size_t j = i;
        while (j < len && s[j] != ' ')
            j++;
        int w = (int)rd_width(s + i, j - i);
        if (col + w <= width) {
            col += w;
            i = j;
            continue;
        }
        if (have_ws) { /* break at the last space run (it ends at i), dropping it */
            if (pieces_add(out, start, ws_at - start, (int)rd_width(s + start, ws_at - start)) < 0)
                return -1;
            start = i;
            col = 0;
            have_ws = 0;
            continue; /* the word again, on the new line */
        }
        if (hard_break(s, i, j, width, &start, &col, out) < 0)
            return -1;
        i = j;
    }
    return pieces_add(out, start, len - start, col);
}

/* ---- documents ----------------------------------------------------------------------------- */

void rd_doc_reset(rd_doc *d)
{
    d->tlen = d->nsegs = d->nlines = 0;
    d->oom = 0;
}

void rd_doc_free(rd_doc *d)
{
    free(d->text);
    free(d->segs);
    free(d->lines);
    memset(d, 0, sizeof *d);
}

static void doc_line_begin(rd_doc *d, unsigned fill)
{
    if (d->oom ||
        grow_array((void **)&d->lines, &d->linecap, d->nlines + 1, sizeof *d->lines, 64) < 0) {
        d->oom = 1;
        return;
    }
    d->lines[d->nlines++] = (rd_line){d->nsegs, 0, 0, fill};
}

static void doc_seg(rd_doc *d, unsigned style, const char *s, size_t n)
{
    if (d->oom || d->nlines == 0 || n == 0)
        return;
    if (grow_array((void **)&d->text, &d->tcap, d->tlen + n, 1, 64) < 0 ||
        grow_array((void **)&d->segs, &d->segcap, d->nsegs + 1, sizeof *d->segs, 64) < 0) {
        d->oom = 1;
        return;
    }
    rd_line *ln = &d->lines[d->nlines - 1];
    memcpy(d->text + d->tlen, s, n);
    if (ln->nseg > 0 && d->segs[d->nsegs - 1].style == style) {
        d->segs[d->nsegs - 1].len += n;
    } else {
        d->segs[d->nsegs++] = (rd_seg){style, d->tlen, n};
        ln->nseg++;
    }
    d->tlen += n;
    ln->width += (int)rd_width(s, n);
}

int rd_doc_append(rd_doc *d, const rd_doc *src)
{
    for (size_t l = 0; l < src->nlines; l++) {
        const rd_line *ln = &src->lines[l];
        doc_line_begin(d, ln->fill);
        for (size_t k = 0; k < ln->nseg; k++) {
            const rd_seg *sg = &src->segs[ln->seg0 + k];
            doc_seg(d, sg->style, src->text + sg->off, sg->len);
        }
    }
    return d->oom ? -1 : 0;
}

/* ---- Markdown-lite ------------------------------------------------------------------------- */

static size_t count_char(const char *s, size_t len, size_t from, char c)
{
    size_t n = 0;
    while (from + n < len && s[from + n] == c)
        n++;
    return n;
}

static int all_space(const char *s, size_t len, size_t from)
{
    for (size_t i = from; i < len; i++)
        if (s[i] != ' ')
            return 0;
    return 1;
}

static int is_rule(const char *s, size_t len, size_t from)
{
    char c = s[from];
    if (c != '-' && c != '*' && c != '_')
        return 0;
    int n = 0;
    for (size_t i = from; i < len; i++) {
        if (s[i] == c)
            n++;
        else if (s[i] != ' ')
            return 0;
    }
    return n >= 3;
}

rd_line_class rd_md_classify(const char *s, size_t len, rd_md_state *st)
{
    rd_line_class c = {RD_L_PARA, 0, 0, 0, 0};
    size_t ind = count_char(s, len, 0, ' ');
    c.indent = ind;
    if (st->in_code) {
        size_t n = ind <= 3 ? count_char(s, len, ind, st->fence) : 0;
        if ((int)n >= st->fence_len && all_space(s, len, ind + n)) {
            st->in_code = 0;
            c.kind = RD_L_FENCE_CLOSE;
            return c;
        }
        c.kind = RD_L_CODE;
        return c;
    }
    if (ind == len) {
        c.kind = RD_L_BLANK;
        return c;
    }
    char ch = s[ind];
    if (ind <= 3 && (ch == '`' || ch == '~')) {
        size_t n = count_char(s, len, ind, ch);
        if (n >= 3) {
            st->in_code = 1;
            st->fence = ch;
            st->fence_len = (int)n;
            c.kind = RD_L_FENCE_OPEN;
            c.body = ind + n;
            while (c.body < len && s[c.body] == ' ')
                c.body++;
            return c;
        }
    }
    if (ind <= 3 && ch == '#') {
        size_t n = count_char(s, len, ind, '#');
        if (n <= 6 && (ind + n == len || s[ind + n] == ' ')) {
            c.kind = RD_L_HEADING;
            c.level = (int)n;
            c.body = ind + n;
            while (c.body < len && s[c.body] == ' ')
                c.body++;
            return c;
        }
    }
    if (is_rule(s, len, ind)) {
        c.kind = RD_L_RULE;
        return c;
    }
    if ((ch == '-' || ch == '*' || ch == '+') && ind + 1 < len && s[ind + 1] == ' ') {
        c.kind = RD_L_BULLET;
        c.marker_len = 2;
        c.body = ind + 2;
        return c;
    }
    size_t d = 0;
    while (ind + d < len && d < 9 && s[ind + d] >= '0' && s[ind + d] <= '9')
        d++;
    if (d > 0 && ind + d + 1 < len && (s[ind + d] == '.' || s[ind + d] == ')') &&
        s[ind + d + 1] == ' ') {
        c.kind = RD_L_NUMBER;
        c.marker_len = d + 2;
        c.body = ind + d + 2;
        return c;
    }
    if (ch == '>') {
        c.kind = RD_L_QUOTE;
        c.body = ind + 1;
        if (c.body < len && s[c.body] == ' ')
            c.body++;
        return c;
    }
    return c;
}

static int is_punct_or_space(char c)
{
    return c == ' ' || c == '.' || c == ',' || c == ';' || c == ':' || c == '!' || c == '?' ||
           c == '(' || c == ')' || c == '"' || c == '\'' || c == '-';
}

/* Where the closing run of n backticks for a code span starting after from is, or len. */
static size_t find_ticks(const char *s, size_t len, size_t from, size_t n)
{
    for (size_t i = from; i < len;) {
        if (s[i] != '`') {
            i++;
            continue;
        }
        size_t m = count_char(s, len, i, '`');
        if (m == n)
            return i;
        i += m;
    }
    return len;
}

/* Whether a closing marker (c repeated n times, n 1 or 2) follows from, before any code span,
 * with a non-space before it. */
static int has_closer(const char *s, size_t len, size_t from, char c, size_t n)
{
    for (size_t i = from; i < len; i++) {
        if (s[i] == '`') { /* markers inside a code span do not count */
            size_t n_ticks = count_char(s, len, i, '`');
            size_t close = find_ticks(s, len, i + n_ticks, n_ticks);
            i = close < len ? close + n_ticks - 1 : i + n_ticks - 1;
            continue;
        }
        if (s[i] != c)
            continue;
        size_t m = count_char(s, len, i, c);
        int ok = i > from && s[i - 1] != ' ';
        if (n == 2 && m >= 2 && ok)
            return 1;
        if (n == 1 && m == 1 && ok &&
            (c != '_' || i + 1 == len || is_punct_or_space(s[i + 1])))
            return 1;
        i += m - 1;
    }
    return 0;
}

size_t rd_md_inline(const char *s, size_t len, unsigned base, char *plain, unsigned *styles)
{
    size_t o = 0;
    int bold = 0, ital = 0;
    char ital_c = 0;
    for (size_t i = 0; i < len;) {
        unsigned st = base | (bold ? RD_BOLD : 0u) | (ital ? RD_ITALIC : 0u);
        char c = s[i];
        if (c == '\\' && i + 1 < len && s[i + 1] != ' ' && strchr("\\`*_#[]()>-+.!", s[i + 1])) {
            plain[o] = s[i + 1];
            styles[o++] = st;
            i += 2;
            continue;
        }
        if (c == '`') {
            size_t n = count_char(s, len, i, '`');
            size_t close = find_ticks(s, len, i + n, n);
            if (close < len) {
                for (size_t k = i + n; k < close; k++) {
                    plain[o] = s[k];
                    styles[o++] = base | RD_CODE;
                }
                i = close + n;
                continue;
            }
            for (size_t k = 0; k < n; k++) {
                plain[o] = '`';
                styles[o++] = st;
            }
            i += n;
            continue;
        }
        if (c == '*' && i + 1 < len && s[i + 1] == '*') {
            if (bold) {
                bold = 0;
                i += 2;
                continue;
            }
            if (i + 2 < len && s[i + 2] != ' ' && has_closer(s, len, i + 3, '*', 2)) {
                bold = 1;
                i += 2;
                continue;
            }
        } else if (c == '*' || c == '_') {
            if (ital && c == ital_c) {
                ital = 0;
                i++;
                continue;
            }
            int open_ok = !ital && i + 1 < len && s[i + 1] != ' ' && s[i + 1] != c &&
                          (c != '_' || i == 0 || is_punct_or_space(s[i - 1]));
            if (open_ok && has_closer(s, len, i + 2, c, 1)) {
                ital = 1;
                ital_c = c;
                i++;
                continue;
            }
        }
        plain[o] = c;
        styles[o++] = st;
        i++;
    }
    return o;
}

/* Emits text with per-byte styles, word-wrapped (or hard-wrapped when hard) to width; the
 * first row starts with prefix, later rows with cont, both in pstyle. */
static int emit_wrapped(rd_doc *d, const char *text, const unsigned *styles, size_t n, int width,
                        const char *prefix, const char *cont, unsigned pstyle, unsigned fill,
                        int hard)
{
    int pw = (int)rd_width(prefix, strlen(prefix));
    int cw = (int)rd_width(cont, strlen(cont));
    int w = width - (pw > cw ? pw : cw);
    if (w < 2) { /* too narrow for the indentation: drop it rather than overflow */
        prefix = cont = "";
        w = width;
    }
    rd_pieces p = {0};
    int rc = hard ? rd_wrap_hard(text, n, w, &p) : rd_wrap(text, n, w, &p);
    if (rc < 0) {
        rd_pieces_free(&p);
        return -1;
    }
    for (size_t k = 0; k < p.n; k++) {
        doc_line_begin(d, fill);
        const char *pre = k == 0 ? prefix : cont;
        doc_seg(d, pstyle, pre, strlen(pre));
        size_t a = p.v[k].off, end = a + p.v[k].len;
        while (a < end) {
            size_t b = a + 1;
            while (b < end && styles[b] == styles[a])
                b++;
            doc_seg(d, styles[a], text + a, b - a);
            a = b;
        }
    }
    rd_pieces_free(&p);
    return d->oom ? -1 : 0;
}

static int emit_inline(rd_doc *d, const char *s, size_t len, int width, unsigned base,
                       const char *prefix, const char *cont, unsigned pstyle)
{
    char *plain = malloc(len + 1);
    unsigned *styles = malloc((len + 1) * sizeof *styles);
    int rc = -1;
    if (plain && styles) {
        size_t n = rd_md_inline(s, len, base, plain, styles);
        rc = emit_wrapped(d, plain, styles, n, width, prefix, cont, pstyle, 0, 0);
    }
    free(plain);
    free(styles);
    return rc;
}

static int emit_one_style(rd_doc *d, const char *s, size_t len, int width, unsigned style,
                          const char *prefix, const char *cont, unsigned pstyle, unsigned fill,
                          int hard)
{
    unsigned *styles = malloc((len + 1) * sizeof *styles);
    if (!styles)
        return -1;
    for (size_t i = 0; i < len; i++)
        styles[i] = style;
    int rc = emit_wrapped(d, s, styles, len, width, prefix, cont, pstyle, fill, hard);
    free(styles);
    return rc;
}

/* One line of a fenced code block, highlighted for the block's language, hard-wrapped. */
static int emit_code(rd_doc *d, const char *s, size_t len, int width, unsigned base,
                     rd_md_state *st)
{
    unsigned *styles = malloc((len + 1) * sizeof *styles);
    if (!styles)
        return -1;
    for (size_t i = 0; i < len; i++)
        styles[i] = base | RD_CODEBLOCK;
    hl_line((hl_lang)st->lang, s, len, &st->hl_state, styles);
    int rc = emit_wrapped(d, s, styles, len, width, " ", " ", base | RD_CODEBLOCK,
                          base | RD_CODEBLOCK, 1);
    free(styles);
    return rc;
}

/* RD_SELECT while inside the code block chosen for copying (rd_md_state.select_block). */
static unsigned selected_block(const rd_md_state *st)
{
    return st->select_block > 0 && st->blocks == st->select_block ? RD_SELECT : 0;
}

static int render_md_line(rd_doc *d, const char *s, size_t len, int width, unsigned base,
                          rd_md_state *st)
{
    rd_line_class c = rd_md_classify(s, len, st);
    char pre[64], cont[64];
    switch (c.kind) {
    case RD_L_BLANK:
        doc_line_begin(d, 0);
        return d->oom ? -1 : 0;
    case RD_L_FENCE_CLOSE:
        return 0;
    case RD_L_FENCE_OPEN: {
        st->lang = (int)hl_lang_from_info(s + c.body, len - c.body);
        st->hl_state = 0;
        st->blocks++;
        base |= selected_block(st);
        doc_line_begin(d, base | RD_CODEBLOCK);
        size_t n = len - c.body;
        if (n > (size_t)width - 2)
            n = (size_t)width > 2 ? (size_t)width - 2 : 0;
        while (n > 0 && ((unsigned char)s[c.body + n] & 0xC0) == 0x80)
            n--; /* never cut inside a UTF-8 sequence */
        if (n > 0 && rd_width(s + c.body, n) <= (size_t)width - 1) {
            doc_seg(d, base | RD_CODEBLOCK, " ", 1);
            doc_seg(d, base | RD_CODEBLOCK | RD_LABEL, s + c.body, n);
        }
        return d->oom ? -1 : 0;
    }
    case RD_L_CODE:
        return emit_code(d, s, len, width, base | selected_block(st), st);
    case RD_L_RULE: {
        doc_line_begin(d, 0);
        for (int i = 0; i < width; i++)
            doc_seg(d, base | RD_MARK, "\xe2\x94\x80", 3); /* U+2500 */
        return d->oom ? -1 : 0;
    }
    case RD_L_HEADING:
        return emit_inline(d, s + c.body, len - c.body, width, base | RD_HEADING | RD_BOLD, "",
                           "", base);
    case RD_L_BULLET:
    case RD_L_NUMBER: {
        size_t ind = c.indent > 40 ? 40 : c.indent;
        size_t ml = c.marker_len > 11 ? 11 : c.marker_len;
        memset(pre, ' ', ind);
        if (c.kind == RD_L_BULLET) {
            memcpy(pre + ind, "\xe2\x80\xa2 ", 4); /* U+2022 and a space */
            pre[ind + 4] = '\0';
        } else {
            memcpy(pre + ind, s + c.indent, ml);
            pre[ind + ml] = '\0';
        }
        memset(cont, ' ', ind + (c.kind == RD_L_BULLET ? 2 : ml));
        cont[ind + (c.kind == RD_L_BULLET ? 2 : ml)] = '\0';
        return emit_inline(d, s + c.body, len - c.body, width, base, pre, cont, base | RD_MARK);
    }
    case RD_L_QUOTE:
        return emit_inline(d, s + c.body, len - c.body, width, base | RD_QUOTE,
                           "\xe2\x94\x82 ", "\xe2\x94\x82 ", base | RD_QUOTE | RD_MARK);
    case RD_L_PARA:
    default:
        return emit_inline(d, s, len, width, base, "", "", base);
    }
}

/* ---- tables ------------------------------------------------------------------------------- */

#define RD_TABLE_MAX_COLS 64

int rd_table_cells(const char *s, size_t len, size_t *off, size_t *n, int max)
{
    return md_table_cells(s, len, off, n, max);
}

typedef enum { ALIGN_LEFT, ALIGN_RIGHT, ALIGN_CENTER } cell_align;

/* Whether the line is a delimiter row of ncols cells (---, :--, --:, :-:); fills align. */
static int table_delimiter(const char *s, size_t len, int ncols, cell_align *align)
{
    size_t off[RD_TABLE_MAX_COLS], n[RD_TABLE_MAX_COLS];
    if (rd_table_cells(s, len, off, n, RD_TABLE_MAX_COLS) != ncols)
        return 0;
    for (int k = 0; k < ncols; k++) {
        const char *c = s + off[k];
        size_t m = n[k];
        int left = m > 0 && c[0] == ':', right = m > 1 && c[m - 1] == ':';
        size_t dashes = 0;
        for (size_t i = (size_t)left; i < m - (size_t)right; i++) {
            if (c[i] != '-')
                return 0;
            dashes++;
        }
        if (dashes == 0)
            return 0;
        align[k] = left && right ? ALIGN_CENTER : right ? ALIGN_RIGHT : ALIGN_LEFT;
    }
    return 1;
}

typedef struct table_row {
    size_t off, len; /* the raw line in the text */
} table_row;

/* A cell's text with its inline Markdown applied: bytes in plain, styles in styles (both with
 * room for the cell's length); "\|" becomes '|'. Returns the plain length. */
static size_t cell_text(const char *s, size_t n, unsigned base, char *tmp, char *plain,
                        unsigned *styles)
{
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '\\' && i + 1 < n && s[i + 1] == '|')
            continue;
        tmp[m++] = s[i];
    }
    return rd_md_inline(tmp, m, base, plain, styles);
}

/* One table row as one or more lines: each cell's text word-wrapped to its column's width
 * (colw[k] >= 2), aligned within it; a row's lines are as many as its tallest cell needs.
 * plain and styles have room for the row's length. */
static int emit_cells(rd_doc *d, const char *s, size_t len, int ncols, const int *colw,
                      const cell_align *align, unsigned base, char *tmp, char *plain,
                      unsigned *styles)
{
    size_t off[RD_TABLE_MAX_COLS], n[RD_TABLE_MAX_COLS], at[RD_TABLE_MAX_COLS];
    rd_pieces p[RD_TABLE_MAX_COLS] = {{0}};
    int have = rd_table_cells(s, len, off, n, RD_TABLE_MAX_COLS), rc = 0;
    size_t used = 0, lines = 1;
    for (int k = 0; k < ncols && rc == 0; k++) {
        size_t m = k < have ? cell_text(s + off[k], n[k], base | RD_TABLE, tmp, plain + used, styles + used) : 0;
        at[k] = used;
        if (m > 0) /* an empty cell has no piece; a column of them may be 0 wide */
            rc = rd_wrap(plain + used, m, colw[k] > 2 ? colw[k] : 2, &p[k]);
        used += m;
        lines = p[k].n > lines ? p[k].n : lines;
    }
    unsigned rule = base | RD_TABLE | RD_MARK;
    for (size_t l = 0; l < lines && rc == 0; l++) {
        doc_line_begin(d, 0);
        doc_seg(d, rule, "\xe2\x94\x82", 3); /* U+2502 */
        for (int k = 0; k < ncols; k++) {
            const rd_piece *pc = l < p[k].n ? &p[k].v[l] : NULL;
            const char *txt = pc ? plain + at[k] + pc->off : "";
            const unsigned *sty = pc ? styles + at[k] + pc->off : NULL;
            size_t m = pc ? pc->len : 0;
            int pad = colw[k] - (pc ? pc->width : 0);
            int before = align[k] == ALIGN_RIGHT ? pad : align[k] == ALIGN_CENTER ? pad / 2 : 0;
            for (int i = 0; i < 1 + before; i++)
                doc_seg(d, base | RD_TABLE, " ", 1);
            for (size_t a = 0; a < m;) {
                size_t e = a + 1;
                while (e < m && sty[e] == sty[a])
                    e++;
                doc_seg(d, sty[a], txt + a, e - a);
                a = e;
            }
            for (int i = 0; i < 1 + pad - before; i++)
                doc_seg(d, base | RD_TABLE, " ", 1);
            doc_seg(d, rule, "\xe2\x94\x82", 3);
        }
    }
    for (int k = 0; k < ncols; k++)
        rd_pieces_free(&p[k]);
    return rc;
}

static void emit_table_rule(rd_doc *d, int ncols, const int *colw, unsigned base)
{
    unsigned rule = base | RD_TABLE | RD_MARK;
    doc_line_begin(d, 0);
    doc_seg(d, rule, "\xe2\x94\x9c", 3); /* U+251C */
    for (int k = 0; k < ncols; k++) {
        for (int i = 0; i < colw[k] + 2; i++)
            doc_seg(d, rule, "\xe2\x94\x80", 3); /* U+2500 */
        doc_seg(d, rule, k + 1 < ncols ? "\xe2\x94\xbc" : "\xe2\x94\xa4", 3); /* U+253C U+2524 */
    }
}

/* Lays out a table (rows[0] the header, rows[1] the delimiter) as aligned columns, or as its
 * raw lines when they do not fit width. */
static int render_table(rd_doc *d, const char *s, const table_row *rows, size_t nrows,
                        int ncols, const cell_align *align, int width, unsigned base)
{
    size_t longest = 0;
    for (size_t r = 0; r < nrows; r++)
        longest = rows[r].len > longest ? rows[r].len : longest;
    char *tmp = malloc(longest + 1), *plain = malloc(longest + 1);
    unsigned *styles = malloc((longest + 1) * sizeof *styles);
    int colw[RD_TABLE_MAX_COLS] = {0}, wordw[RD_TABLE_MAX_COLS] = {0};
    if (!tmp || !plain || !styles) {
        free(tmp), free(plain), free(styles);
        return -1;
    }
    for (size_t r = 0; r < nrows; r++) {
        if (r == 1)
            continue;
        size_t off[RD_TABLE_MAX_COLS], n[RD_TABLE_MAX_COLS];
        int have = rd_table_cells(s + rows[r].off, rows[r].len, off, n, RD_TABLE_MAX_COLS);
        for (int k = 0; k < ncols && k < have; k++) {
            size_t m = cell_text(s + rows[r].off + off[k], n[k], 0, tmp, plain, styles);
            int w = (int)rd_width(plain, m);
            colw[k] = w > colw[k] ? w : colw[k];
            for (size_t a = 0; a < m;) { /* the cell's longest word */
                size_t e = a;
                while (e < m && plain[e] != ' ')
                    e++;
                int ww = (int)rd_width(plain + a, e - a);
                wordw[k] = ww > wordw[k] ? ww : wordw[k];
                a = e + 1;
            }
        }
    }
    /* Columns wider than the room shrink, their cells then wrapped: first the widest of those
     * still wider than their longest word, then (words broken) the widest; below kTableMinCol
     * columns each the table is its raw lines, wrapped. */
    enum { kTableMinCol = 4 };
    int total = 1;
    for (int k = 0; k < ncols; k++)
        total += colw[k] + 3;
    while (total > width && total - width <= (total - 1 - 3 * ncols) - kTableMinCol * ncols) {
        int widest = -1;
        for (int k = 0; k < ncols; k++) /* wider than its longest word */
            if (colw[k] > wordw[k] && (widest < 0 || colw[k] > colw[widest]))
                widest = k;
        if (widest < 0) /* every column at its longest word: the widest breaks words */
            for (int k = widest = 0; k < ncols; k++)
                widest = colw[k] > colw[widest] ? k : widest;
        colw[widest]--;
        total--;
    }
    int rc = 0;
    if (total > width) { /* too narrow even for narrow columns: the raw lines, wrapped */
        for (size_t r = 0; r < nrows && rc == 0; r++)
            rc = emit_one_style(d, s + rows[r].off, rows[r].len, width, base, "", "", base, 0, 0);
    } else {
        for (size_t r = 0; r < nrows && rc == 0; r++) {
            if (r == 1)
                emit_table_rule(d, ncols, colw, base);
            else
                rc = emit_cells(d, s + rows[r].off, rows[r].len, ncols, colw, align,
                                r == 0 ? base | RD_BOLD : base, tmp, plain, styles);
        }
        rc = rc || d->oom ? -1 : 0;
    }
    free(tmp), free(plain), free(styles);
    return rc;
}

static size_t line_end(const char *s, size_t len, size_t i)
{
    const char *nl = memchr(s + i, '\n', len - i);
    return nl ? (size_t)(nl - s) : len;
}

/* A table starting at line i: lays it out and returns the offset after it, or 0 when the
 * lines there are no table (or on failure, with *rc -1). */
static size_t try_table(rd_doc *d, const char *s, size_t len, size_t i, int width,
                        unsigned base, int *rc)
{
    size_t e = line_end(s, len, i);
    size_t off[RD_TABLE_MAX_COLS], n[RD_TABLE_MAX_COLS];
    int ncols = rd_table_cells(s + i, e - i, off, n, RD_TABLE_MAX_COLS);
    if (ncols < 1 || ncols > RD_TABLE_MAX_COLS || e >= len)
        return 0;
    cell_align align[RD_TABLE_MAX_COLS];
    size_t e2 = line_end(s, len, e + 1);
    if (!table_delimiter(s + e + 1, e2 - e - 1, ncols, align))
        return 0;
    table_row *rows = NULL;
    size_t nrows = 0, cap = 0, at = i;
    while (at < len) {
        size_t end = line_end(s, len, at);
        if (nrows >= 2 && (all_space(s + at, end - at, 0) || !memchr(s + at, '|', end - at)))
            break;
        if (grow_array((void **)&rows, &cap, nrows + 1, sizeof *rows, 16) != 0) {
            free(rows);
            *rc = -1;
            return 0;
        }
        rows[nrows++] = (table_row){at, end - at};
        at = end < len ? end + 1 : len;
    }
    *rc = render_table(d, s, rows, nrows, ncols, align, width, base);
    free(rows);
    return at;
}

size_t rd_md_settled_end(const char *s, size_t len)
{
    const char *nl = len ? memrchr(s, '\n', len) : NULL;
    size_t end = nl ? (size_t)(nl - s) + 1 : 0;
    while (end > 0) {
        size_t start = end - 1; /* the '\n' ending the last settled line */
        while (start > 0 && s[start - 1] != '\n')
            start--;
        if (!memchr(s + start, '|', end - 1 - start))
            break;
        end = start;
    }
    return end;
}

int rd_render_markdown(rd_doc *d, const char *s, size_t len, int width, unsigned base,
                       rd_md_state *st)
{
    if (width < 4)
        width = 4;
    size_t i = 0;
    while (i < len) {
        if (!st->in_code) {
            int rc = 0;
            size_t after = try_table(d, s, len, i, width, base, &rc);
            if (rc < 0)
                return -1;
            if (after) {
                i = after;
                continue;
            }
        }
        size_t e = line_end(s, len, i);
        if (render_md_line(d, s + i, e - i, width, base, st) < 0)
            return -1;
        i = e < len ? e + 1 : len;
    }
    return d->oom ? -1 : 0;
}

int rd_render_plain(rd_doc *d, const char *s, size_t len, int width, unsigned style,
                    const char *prefix, const char *cont, unsigned prefix_style)
{
    if (width < 4)
        width = 4;
    size_t i = 0;
    int first = 1;
    for (;;) {
        const char *nl = memchr(s + i, '\n', len - i);
        size_t e = nl ? (size_t)(nl - s) : len;
        if (emit_one_style(d, s + i, e - i, width, style, first ? prefix : cont, cont,
                           prefix_style, 0, 0) < 0)
            return -1;
        first = 0;
        if (!nl || e + 1 == len)
            break;
        i = e + 1;
    }
    return d->oom ? -1 : 0;
}
