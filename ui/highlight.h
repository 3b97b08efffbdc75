/* highlight.h: syntax highlighting of fenced code blocks, one line at a time, table-driven
 * (keywords, strings, comments, numbers) for c, python, sh, js/ts, json, rust and go. */
#ifndef GLMCHAT_UI_HIGHLIGHT_H
#define GLMCHAT_UI_HIGHLIGHT_H

#include <stddef.h>

/* A language, from a fence's info string; HL_NONE leaves the code unhighlighted. */
typedef enum hl_lang { HL_NONE, HL_C, HL_PYTHON, HL_SH, HL_JS, HL_JSON, HL_RUST, HL_GO } hl_lang;

/* The language a fence's info string names ("c", "py", "bash", "tsx"...): its first word,
 * case-insensitive; HL_NONE for anything else. */
hl_lang hl_lang_from_info(const char *info, size_t len);

/* ORs RD_SYN_KEYWORD, RD_SYN_STRING, RD_SYN_COMMENT or RD_SYN_NUMBER (render.h) into styles[i]
 * for each byte i of the line s (no '\n'). *state carries what spans lines (a block comment,
 * a triple-quoted or backtick string) from one line to the next: 0 at a block's start. */
void hl_line(hl_lang lang, const char *s, size_t len, int *state, unsigned *styles);

#endif
