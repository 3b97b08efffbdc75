/* codeblock.h: the fenced code blocks of a reply's raw Markdown, found with the renderer's own
 * fence rules (rd_md_classify), and the text of one block as the user copies it. */
#ifndef GLMCHAT_UI_CODEBLOCK_H
#define GLMCHAT_UI_CODEBLOCK_H

#include <stddef.h>

typedef struct cb_block {
    size_t first;   /* byte offset of the first content line (after the opening fence's line) */
    size_t end;     /* byte offset where the content ends: the closing fence's line, or len */
    size_t indent;  /* the opening fence's indentation, taken off every content line */
    char lang[32];  /* the info string's first word ("python"), "" when none */
    int lines;      /* content lines */
} cb_block;

/* The fenced blocks of s[0, len) in order, into a malloc'd array (*out, free it; NULL when
 * none). A fence still open at the end (a reply cut off or still streaming) runs to len.
 * Returns 0, or -1 when out of memory. */
int cb_find(const char *s, size_t len, cb_block **out, size_t *n);

/* The block's text as copied: its content lines exactly as written (tabs and all) with up to
 * `indent` leading spaces and a trailing '\r' taken off each, joined by '\n', with NO newline
 * after the last line (a pasted shell command waits for Enter). malloc'd, NUL-terminated, its
 * length in *len; NULL when out of memory. */
char *cb_text(const char *s, const cb_block *b, size_t *len);

#endif
