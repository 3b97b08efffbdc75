/* export_html_md.c: the Markdown of a message as HTML for the HTML transcript: paragraphs,
 * emphasis, code spans, fenced code, lists, headings, quotes, tables and http(s) links. Only
 * the tags written here reach the page: every byte of content goes through the escaper. */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/md_table.h"
#include "storage/export_internal.h"

#define MD_MAX_QUOTE_DEPTH 8
#define MD_MAX_COLS 64

typedef struct md_line {
    const char *s;
    size_t len;
} md_line;

static void put_lit(FILE *out, const char *s)
{
    fputs(s, out);
}

/* ---- inline spans ----------------------------------------------------------------------------- */

enum { TAG_STRONG, TAG_EM };

static size_t run_of(const char *s, size_t len, size_t i, char c)
{
    size_t n = 0;
    while (i + n < len && s[i + n] == c)
        n++;
    return n;
}

/* Where a run of exactly n backticks after from starts, or len. */
static size_t closing_ticks(const char *s, size_t len, size_t from, size_t n)
{
    for (size_t i = from; i < len;) {
        size_t m = run_of(s, len, i, '`');
        if (m == n)
            return i;
        i += m ? m : 1;
    }
    return len;
}

/* Whether a closing run of c (n long: 1 or 2) with no space before it follows from. */
static int closer_after(const char *s, size_t len, size_t from, char c, size_t n)
{
    for (size_t i = from; i < len;) {
        size_t m = run_of(s, len, i, c);
        if (m == 0) {
            i++;
            continue;
        }
        if (s[i - 1] != ' ' && (m == n || (n == 2 && m > 2)))
            return 1;
        i += m;
    }
    return 0;
}

/* An http or https URL with nothing a browser could read as another scheme or attribute. */
static int safe_url(const char *u, size_t n)
{
    if (!((n > 7 && strncasecmp(u, "http://", 7) == 0) ||
          (n > 8 && strncasecmp(u, "https://", 8) == 0)))
        return 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)u[i];
        if (c <= ' ' || c == 0x7F || c == '"' || c == '\'' || c == '<' || c == '>' || c == '`')
            return 0;
    }
    return 1;
}

static void inline_md(FILE *out, const char *s, size_t len, int links);

/* A [text](url) at s[i]: writes it (an anchor only for http(s)) and returns the bytes used,
 * or 0 when there is no complete link there. */
static size_t link_at(FILE *out, const char *s, size_t len, size_t i, int links)
{
    const char *close = memchr(s + i + 1, ']', len - i - 1);
    if (!close)
        return 0;
    size_t tb = (size_t)(close - s);
    if (tb + 1 >= len || s[tb + 1] != '(')
        return 0;
    size_t ue = tb + 2;
    int open = 1; /* parentheses nest inside a URL */
    for (; ue < len && open; ue++)
        open += s[ue] == '(' ? 1 : s[ue] == ')' ? -1 : 0;
    if (open)
        return 0;
    const char *paren = s + --ue;
    size_t ua = tb + 2;
    while (ua < ue && s[ua] == ' ')
        ua++;
    while (ue > ua && s[ue - 1] == ' ')
        ue--;
    int anchor = links && safe_url(s + ua, ue - ua);
    if (anchor) {
        put_lit(out, "<a href=\"");
        export_html_escape(out, s + ua, ue - ua);
        put_lit(out, "\" rel=\"noopener noreferrer nofollow\">");
    }
    inline_md(out, s + i + 1, tb - i - 1, 0);
    if (anchor)
        put_lit(out, "</a>");
    return (size_t)(paren - s) + 1 - i;
}

static void inline_md(FILE *out, const char *s, size_t len, int links)
{
    int stack[2], depth = 0; /* open TAG_*, innermost last */
    size_t i = 0, plain = 0; /* s[plain, i) is text not yet written */
#define FLUSH() (export_html_escape(out, s + plain, i - plain))
    while (i < len) {
        char c = s[i];
        if (c == '\\' && i + 1 < len && ispunct((unsigned char)s[i + 1])) {
            FLUSH();
            export_html_escape(out, s + i + 1, 1);
            i += 2;
            plain = i;
            continue;
        }
        if (c == '`') {
            size_t n = run_of(s, len, i, '`');
            size_t end = closing_ticks(s, len, i + n, n);
            if (end == len) {
                i += n;
                continue;
            }
            FLUSH();
            size_t a = i + n, b = end;
            if (b - a >= 2 && s[a] == ' ' && s[b - 1] == ' ')
                a++, b--;
            put_lit(out, "<code>");
            export_html_escape(out, s + a, b - a);
            put_lit(out, "</code>");
            i = end + n;
            plain = i;
            continue;
        }
        if (c == '[' && links) {
            FLUSH();
            size_t used = link_at(out, s, len, i, links);
            if (used) {
                i += used;
                plain = i;
                continue;
            }
            plain = i;
        }
        if (c == '*' || c == '_') {
            size_t m = run_of(s, len, i, c);
            size_t n = m >= 2 ? 2 : 1;
            int tag = n == 2 ? TAG_STRONG : TAG_EM;
            int open_here = depth > 0 && stack[depth - 1] == tag;
            int opened_elsewhere = depth > 0 && stack[0] == tag;
            if (open_here && i > 0 && s[i - 1] != ' ') {
                FLUSH();
                put_lit(out, tag == TAG_STRONG ? "</strong>" : "</em>");
                depth--;
                i += n;
                plain = i;
                continue;
            }
            int word_ok = c != '_' || i == 0 || !isalnum((unsigned char)s[i - 1]);
            if (!opened_elsewhere && depth < 2 && word_ok && i + n < len && s[i + n] != ' ' &&
                closer_after(s, len, i + n + 1, c, n)) {
                FLUSH();
                put_lit(out, tag == TAG_STRONG ? "<strong>" : "<em>");
                stack[depth++] = tag;
                i += n;
                plain = i;
                continue;
            }
            i += m;
            continue;
        }
        i++;
    }
    FLUSH();
#undef FLUSH
    while (depth > 0)
        put_lit(out, stack[--depth] == TAG_STRONG ? "</strong>" : "</em>");
}

/* ---- blocks ----------------------------------------------------------------------------------- */

static size_t indent_of(const md_line *l)
{
    size_t n = 0;
    while (n < l->len && l->s[n] == ' ')
        n++;
    return n;
}

static int blank(const md_line *l)
{
    return indent_of(l) == l->len;
}

/* A fence opener's character and length, or 0. */
static size_t fence_at(const md_line *l, char *ch)
{
    size_t ind = indent_of(l);
    if (ind > 3 || ind >= l->len || (l->s[ind] != '`' && l->s[ind] != '~'))
        return 0;
    size_t n = run_of(l->s, l->len, ind, l->s[ind]);
    if (n < 3)
        return 0;
    *ch = l->s[ind];
    return n;
}

static int heading_level(const md_line *l, size_t *body)
{
    size_t ind = indent_of(l);
    size_t n = ind <= 3 ? run_of(l->s, l->len, ind, '#') : 0;
    if (n == 0 || n > 6 || (ind + n < l->len && l->s[ind + n] != ' '))
        return 0;
    *body = ind + n;
    while (*body < l->len && l->s[*body] == ' ')
        (*body)++;
    return (int)n;
}

static int is_rule(const md_line *l)
{
    size_t ind = indent_of(l);
    if (ind >= l->len || !strchr("-*_", l->s[ind]))
        return 0;
    int n = 0;
    for (size_t i = ind; i < l->len; i++) {
        if (l->s[i] == l->s[ind])
            n++;
        else if (l->s[i] != ' ')
            return 0;
    }
    return n >= 3;
}

/* A list item: 'u' (bullet) or 'o' (ordered, *number set), 0 when none; *body where its
 * text starts. */
static char list_item(const md_line *l, size_t *body, long *number)
{
    size_t ind = indent_of(l);
    const char *s = l->s;
    if (ind + 1 < l->len && strchr("-*+", s[ind]) && s[ind + 1] == ' ') {
        *body = ind + 2;
        return 'u';
    }
    size_t d = 0;
    while (ind + d < l->len && d < 9 && isdigit((unsigned char)s[ind + d]))
        d++;
    if (d && ind + d + 1 < l->len && (s[ind + d] == '.' || s[ind + d] == ')') &&
        s[ind + d + 1] == ' ') {
        *number = strtol(s + ind, NULL, 10);
        *body = ind + d + 2;
        return 'o';
    }
    return 0;
}

static int is_quote(const md_line *l)
{
    size_t ind = indent_of(l);
    return ind <= 3 && ind < l->len && l->s[ind] == '>';
}

/* Cells of a table row: the outer pipes dropped, split at unescaped pipes, trimmed. */
static int table_cells(const md_line *l, size_t *off, size_t *n, int max)
{
    return md_table_cells(l->s, l->len, off, n, max);
}

/* The alignment of each column when l is a delimiter row of ncols cells: "left", "right",
 * "center" or NULL; returns 0 when l is no delimiter row. */
static int table_delimiter(const md_line *l, int ncols, const char **align)
{
    size_t off[MD_MAX_COLS], n[MD_MAX_COLS];
    if (table_cells(l, off, n, MD_MAX_COLS) != ncols)
        return 0;
    for (int k = 0; k < ncols; k++) {
        const char *c = l->s + off[k];
        size_t m = n[k];
        int left = m > 0 && c[0] == ':', right = m > 1 && c[m - 1] == ':';
        if (m < (size_t)(1 + left + right))
            return 0;
        for (size_t i = (size_t)left; i < m - (size_t)right; i++)
            if (c[i] != '-')
                return 0;
        align[k] = left && right ? "center" : right ? "right" : left ? "left" : NULL;
    }
    return 1;
}

/* The columns of a table starting at lines[i] (a header then a delimiter row), else 0. */
static int table_at(const md_line *lines, size_t n, size_t i, const char **align)
{
    size_t off[MD_MAX_COLS], len[MD_MAX_COLS];
    int cols = table_cells(&lines[i], off, len, MD_MAX_COLS);
    if (cols < 1 || cols > MD_MAX_COLS || i + 1 >= n)
        return 0;
    return table_delimiter(&lines[i + 1], cols, align) ? cols : 0;
}

/* A cell's text with "\|" as '|', then its inline Markdown. */
static void table_cell(FILE *out, const char *s, size_t n, char *tmp)
{
    size_t m = 0;
    for (size_t i = 0; i < n; i++)
        if (!(s[i] == '\\' && i + 1 < n && s[i + 1] == '|'))
            tmp[m++] = s[i];
    inline_md(out, tmp, m, 1);
}

static size_t emit_table(FILE *out, const md_line *lines, size_t n, size_t i, int cols,
                         const char **align)
{
    char *tmp = NULL;
    put_lit(out, "<table>\n");
    for (size_t r = i; r < n; r++) {
        if (r == i + 1)
            continue;
        if (r > i + 1 && (blank(&lines[r]) || !memchr(lines[r].s, '|', lines[r].len))) {
            n = r;
            break;
        }
        size_t off[MD_MAX_COLS], len[MD_MAX_COLS];
        int have = table_cells(&lines[r], off, len, MD_MAX_COLS);
        char *t = realloc(tmp, lines[r].len + 1);
        if (!t)
            break;
        tmp = t;
        put_lit(out, r == i ? "<thead><tr>" : "<tr>");
        for (int k = 0; k < cols; k++) {
            const char *cell = r == i ? "th" : "td";
            if (align[k])
                fprintf(out, "<%s style=\"text-align:%s\">", cell, align[k]);
            else
                fprintf(out, "<%s>", cell);
            if (k < have)
                table_cell(out, lines[r].s + off[k], len[k], tmp);
            fprintf(out, "</%s>", cell);
        }
        put_lit(out, r == i ? "</tr></thead>\n<tbody>\n" : "</tr>\n");
    }
    free(tmp);
    put_lit(out, "</tbody></table>\n");
    return n;
}

/* Whether line l starts a block other than a paragraph (ending the paragraph before it). */
static int starts_block(const md_line *lines, size_t n, size_t i)
{
    size_t body;
    long num;
    char ch;
    const char *align[MD_MAX_COLS];
    const md_line *l = &lines[i];
    return blank(l) || fence_at(l, &ch) || heading_level(l, &body) || is_rule(l) ||
           list_item(l, &body, &num) || is_quote(l) || table_at(lines, n, i, align);
}

static int render_blocks(FILE *out, const char *s, size_t len, int depth);

static size_t emit_fence(FILE *out, const md_line *lines, size_t n, size_t i)
{
    char ch;
    size_t flen = fence_at(&lines[i], &ch);
    const md_line *l = &lines[i];
    size_t a = indent_of(l) + flen, b = a;
    while (a < l->len && l->s[a] == ' ')
        a++;
    b = a;
    while (b < l->len && (isalnum((unsigned char)l->s[b]) || strchr("+-_.#", l->s[b])))
        b++;
    if (b > a) {
        put_lit(out, "<pre><code class=\"language-");
        export_html_escape(out, l->s + a, b - a);
        put_lit(out, "\">");
    } else {
        put_lit(out, "<pre><code>");
    }
    size_t r = i + 1;
    for (; r < n; r++) {
        char c2;
        size_t m = fence_at(&lines[r], &c2);
        size_t ind = indent_of(&lines[r]);
        if (m >= flen && c2 == ch && indent_of(&lines[r]) + m <= lines[r].len) {
            size_t k = ind + m;
            while (k < lines[r].len && lines[r].s[k] == ' ')
                k++;
            if (k == lines[r].len)
                break;
        }
        if (r > i + 1)
            put_lit(out, "\n");
        export_html_escape(out, lines[r].s, lines[r].len);
    }
    put_lit(out, "</code></pre>\n");
    return r < n ? r + 1 : n;
}

static size_t emit_list(FILE *out, const md_line *lines, size_t n, size_t i)
{
    size_t body;
    long number = 1;
    char kind = list_item(&lines[i], &body, &number);
    if (kind == 'o' && number != 1)
        fprintf(out, "<ol start=\"%ld\">\n", number);
    else
        put_lit(out, kind == 'o' ? "<ol>\n" : "<ul>\n");
    size_t r = i;
    while (r < n) {
        long num;
        if (list_item(&lines[r], &body, &num) != kind)
            break;
        put_lit(out, "<li>");
        inline_md(out, lines[r].s + body, lines[r].len - body, 1);
        r++;
        /* indented lines that start no block continue the item */
        while (r < n && !starts_block(lines, n, r) && indent_of(&lines[r]) >= 2) {
            put_lit(out, "\n");
            size_t ind = indent_of(&lines[r]);
            inline_md(out, lines[r].s + ind, lines[r].len - ind, 1);
            r++;
        }
        put_lit(out, "</li>\n");
    }
    put_lit(out, kind == 'o' ? "</ol>\n" : "</ul>\n");
    return r;
}

static size_t emit_quote(FILE *out, const md_line *lines, size_t n, size_t i, int depth, int *rc)
{
    size_t r = i, total = 0;
    while (r < n && is_quote(&lines[r]))
        total += lines[r++].len + 1;
    char *inner = malloc(total + 1);
    if (!inner) {
        *rc = -1;
        return r;
    }
    size_t o = 0;
    for (size_t k = i; k < r; k++) {
        size_t a = indent_of(&lines[k]) + 1;
        if (a < lines[k].len && lines[k].s[a] == ' ')
            a++;
        memcpy(inner + o, lines[k].s + a, lines[k].len - a);
        o += lines[k].len - a;
        inner[o++] = '\n';
    }
    put_lit(out, "<blockquote>\n");
    if (render_blocks(out, inner, o, depth + 1) < 0)
        *rc = -1;
    put_lit(out, "</blockquote>\n");
    free(inner);
    return r;
}

static size_t emit_paragraph(FILE *out, const md_line *lines, size_t n, size_t i)
{
    put_lit(out, "<p>");
    size_t r = i;
    do {
        if (r > i)
            put_lit(out, "<br>\n");
        size_t ind = indent_of(&lines[r]);
        inline_md(out, lines[r].s + ind, lines[r].len - ind, 1);
        r++;
    } while (r < n && !starts_block(lines, n, r));
    put_lit(out, "</p>\n");
    return r;
}

static int render_blocks(FILE *out, const char *s, size_t len, int depth)
{
    size_t n = 0, cap = 0;
    md_line *lines = NULL;
    for (size_t i = 0; i < len;) {
        const char *nl = memchr(s + i, '\n', len - i);
        size_t e = nl ? (size_t)(nl - s) : len;
        if (n == cap) {
            cap = cap ? cap * 2 : 32;
            md_line *v = realloc(lines, cap * sizeof *v);
            if (!v) {
                free(lines);
                return -1;
            }
            lines = v;
        }
        size_t l = e - i;
        if (l && s[i + l - 1] == '\r')
            l--;
        lines[n++] = (md_line){s + i, l};
        i = nl ? e + 1 : len;
    }
    int rc = 0;
    size_t i = 0;
    while (i < n && rc == 0) {
        const md_line *l = &lines[i];
        size_t body;
        long num;
        char ch;
        const char *align[MD_MAX_COLS];
        int level, cols;
        if (blank(l)) {
            i++;
        } else if (fence_at(l, &ch)) {
            i = emit_fence(out, lines, n, i);
        } else if ((level = heading_level(l, &body)) > 0) {
            /* the page's h1 is the conversation and each message sits under it */
            int h = level + 2 > 6 ? 6 : level + 2;
            fprintf(out, "<h%d>", h);
            inline_md(out, l->s + body, l->len - body, 1);
            fprintf(out, "</h%d>\n", h);
            i++;
        } else if (is_rule(l)) {
            put_lit(out, "<hr>\n");
            i++;
        } else if ((cols = table_at(lines, n, i, align)) > 0) {
            i = emit_table(out, lines, n, i, cols, align);
        } else if (list_item(l, &body, &num)) {
            i = emit_list(out, lines, n, i);
        } else if (is_quote(l) && depth < MD_MAX_QUOTE_DEPTH) {
            i = emit_quote(out, lines, n, i, depth, &rc);
        } else {
            i = emit_paragraph(out, lines, n, i);
        }
    }
    free(lines);
    return rc;
}

int export_html_markdown(FILE *out, const char *s, size_t len)
{
    return render_blocks(out, s, len, 0);
}
