/* render.h: text layout for the views, pure functions with no terminal: UTF-8 decoding,
 * display width, word wrapping, Markdown-lite lines and spans, code blocks. */
#ifndef GLMCHAT_UI_RENDER_H
#define GLMCHAT_UI_RENDER_H

#include <stddef.h>
#include <stdint.h>

/* Columns a code point takes: 0 (combining, zero-width joiners, variation selectors), 1 or 2
 * (East Asian wide, emoji). Control characters count 1: rd_sanitize turns them into U+FFFD.
 * Needs a UTF-8 LC_CTYPE (setlocale) for wcwidth; falls back to built-in ranges otherwise. */
int rd_cp_width(uint32_t cp);
/* Columns of a UTF-8 string. */
size_t rd_width(const char *s, size_t len);
/* Bytes of the grapheme cluster (a code point and the zero-width ones after it) at s. */
size_t rd_cluster_len(const char *s, size_t len, int *width);

/* A copy of s that is safe to draw: invalid UTF-8 and control characters become U+FFFD,
 * tabs become spaces to the next multiple of 4 columns, "\r\n" becomes "\n", a lone '\r' is
 * dropped. Keeps '\n'. Returns a malloc'd NUL-terminated string (free it), NULL when out of
 * memory; *out_len gets its length. */
char *rd_sanitize(const char *s, size_t len, size_t *out_len);

/* ---- wrapping -------------------------------------------------------------------------- */

typedef struct rd_piece {
    size_t off, len; /* bytes of the input */
    int width;       /* columns, <= the wrap width */
} rd_piece;

typedef struct rd_pieces {
    rd_piece *v;
    size_t n, cap;
} rd_pieces;

void rd_pieces_free(rd_pieces *p);

/* Word-wraps one line s (no '\n') to width columns (width >= 2), appending pieces to out.
 * Breaks at runs of spaces, dropping the run where it breaks; a word longer than the width
 * is broken between grapheme clusters. An empty line gives one empty piece. Concatenating
 * the pieces gives s minus the dropped spaces. Returns 0, or -1 (width < 2, out of memory). */
int rd_wrap(const char *s, size_t len, int width, rd_pieces *out);
/* Like rd_wrap but breaks only when a line is full, keeping every space (code blocks). */
int rd_wrap_hard(const char *s, size_t len, int width, rd_pieces *out);

/* ---- styled lines ---------------------------------------------------------------------- */

enum {
    RD_BOLD = 1 << 0,
    RD_ITALIC = 1 << 1,
    RD_CODE = 1 << 2,      /* inline code */
    RD_CODEBLOCK = 1 << 3, /* a line of a fenced code block (the view fills its width) */
    RD_HEADING = 1 << 4,
    RD_DIM = 1 << 5,
    RD_QUOTE = 1 << 6,
    RD_MARK = 1 << 7,      /* list bullets, fold markers, rules */
    RD_USER = 1 << 8,
    RD_ERROR = 1 << 9,
    RD_TOOL = 1 << 10,
    RD_NOTICE = 1 << 11,
    RD_SELECT = 1 << 12,   /* the selected transcript item */
    RD_ASK = 1 << 13,      /* an approval question */
    RD_LABEL = 1 << 14,    /* the language label over a code block */
    /* syntax classes inside a code block (ui/highlight.c) */
    RD_SYN_KEYWORD = 1 << 15,
    RD_SYN_STRING = 1 << 16,
    RD_SYN_COMMENT = 1 << 17,
    RD_SYN_NUMBER = 1 << 18,
    RD_TABLE = 1 << 19,    /* a Markdown table's rules and cells */
};

typedef struct rd_seg {
    unsigned style;
    size_t off, len; /* into rd_doc.text */
} rd_seg;

typedef struct rd_line {
    size_t seg0, nseg; /* into rd_doc.segs */
    int width;         /* columns used */
    unsigned fill;     /* style for the rest of the row (code blocks), 0 for none */
} rd_line;

/* Lines laid out for a width: text bytes, segments with a style, lines of segments. */
typedef struct rd_doc {
    char *text;
    size_t tlen, tcap;
    rd_seg *segs;
    size_t nsegs, segcap;
    rd_line *lines;
    size_t nlines, linecap;
    int oom; /* set when an append failed; the doc is then incomplete */
} rd_doc;

void rd_doc_reset(rd_doc *d); /* empties it, keeping the memory */
void rd_doc_free(rd_doc *d);
/* Appends the lines of src to d. 0 or -1 (out of memory). */
int rd_doc_append(rd_doc *d, const rd_doc *src);

/* Markdown-lite state carried from line to line (inside a code fence or not). */
typedef struct rd_md_state {
    int in_code;
    char fence;      /* '`' or '~' */
    int fence_len;
    int lang;        /* the code block's hl_lang (ui/highlight.h), 0 for none */
    int hl_state;    /* the highlighter's state between the block's lines */
    int blocks;      /* code blocks opened so far (the current one is number `blocks`) */
    int select_block; /* the code block (1-based) drawn selected (RD_SELECT), 0 for none */
} rd_md_state;

/* Kinds of Markdown-lite line (rd_md_classify). */
typedef enum rd_line_kind {
    RD_L_PARA, RD_L_BLANK, RD_L_HEADING, RD_L_BULLET, RD_L_NUMBER, RD_L_QUOTE, RD_L_RULE,
    RD_L_FENCE_OPEN, RD_L_FENCE_CLOSE, RD_L_CODE,
} rd_line_kind;

typedef struct rd_line_class {
    rd_line_kind kind;
    int level;           /* heading level 1..6 */
    size_t indent;       /* leading spaces (lists, quotes) */
    size_t body;         /* byte offset where the text after the marker starts */
    size_t marker_len;   /* bytes of the marker ("- ", "12. ") */
} rd_line_class;

/* Classifies one line (no '\n') given the state; advances the state over fences. */
rd_line_class rd_md_classify(const char *s, size_t len, rd_md_state *st);

/* Inline spans of a paragraph line: **bold**, *italic*, `code`. Writes the text without the
 * markers to plain (room for len bytes) and the style of each of its bytes to styles (len
 * entries, base ORed in). Unclosed markers stay as text. Returns the plain length. */
size_t rd_md_inline(const char *s, size_t len, unsigned base, char *plain, unsigned *styles);

/* Lays out Markdown-lite text (complete lines; a last line without '\n' is laid out too) to
 * width columns, appending to d; st carries fence state in and out. A table (a header row, a
 * delimiter row like |---|:-:|, then rows) is laid out as aligned columns when it fits the
 * width, else as its raw lines; so a table must not be split between two calls (see
 * rd_md_settled_end). 0 or -1. */
int rd_render_markdown(rd_doc *d, const char *s, size_t len, int width, unsigned base,
                       rd_md_state *st);
/* Where the laying out of s (len bytes) may stop for now without cutting a table: the end
 * of its last complete line, moved back before a trailing run of lines holding '|' (a table
 * that may still grow). */
size_t rd_md_settled_end(const char *s, size_t len);

/* Cells of one table row (the outer pipes dropped; "\|" does not split a cell); -1 when the line
 * has no pipe. At most max cells are stored: cell k is s[off[k], off[k] + n[k]) trimmed. */
int rd_table_cells(const char *s, size_t len, size_t *off, size_t *n, int max);

/* Lays out plain text (no Markdown) with one style, word-wrapped; every line starts with
 * prefix (first line) or cont (later lines), both drawn in prefix_style. 0 or -1. */
int rd_render_plain(rd_doc *d, const char *s, size_t len, int width, unsigned style,
                    const char *prefix, const char *cont, unsigned prefix_style);

#endif
