/* highlight.c: a small table-driven highlighter for the code blocks of replies: one lexer
 * walks a line, each language's table says its keywords, comments and string quotes. */
#include "ui/highlight.h"

#include <ctype.h>
#include <string.h>
#include <strings.h>

#include "ui/render.h"

/* What spans lines, kept in hl_line's *state. */
enum { ST_CODE, ST_BLOCK_COMMENT, ST_TRIPLE_DQ, ST_TRIPLE_SQ, ST_BACKTICK };

typedef struct lang_def {
    const char *const *keywords; /* NULL-terminated */
    const char *line_comment;    /* "//", "#", NULL */
    int block_comment;           /* C's slash-star comments */
    const char *quotes;          /* characters that open a one-line string */
    int triple_quotes;           /* Python's triple-quoted strings span lines */
    int backtick_spans;          /* a backtick string spans lines (js template, go raw) */
    int hash_at_word;            /* '#' starts a comment only at the start of a word (sh) */
    int rust_chars;              /* '\'' is a char literal only as 'x' or '\n' (lifetimes) */
} lang_def;

static const char *const kw_c[] = {
    "auto", "bool", "break", "case", "char", "const", "continue", "default", "do", "double",
    "else", "enum", "extern", "false", "float", "for", "goto", "if", "inline", "int", "long",
    "NULL", "register", "restrict", "return", "short", "signed", "size_t", "sizeof", "static",
    "struct", "switch", "true", "typedef", "union", "unsigned", "void", "volatile", "while",
    "#include", "#define", "#if", "#ifdef", "#ifndef", "#endif", "#else", "#elif", NULL};
static const char *const kw_python[] = {
    "False", "None", "True", "and", "as", "assert", "async", "await", "break", "class",
    "continue", "def", "del", "elif", "else", "except", "finally", "for", "from", "global", "if",
    "import", "in", "is", "lambda", "nonlocal", "not", "or", "pass", "raise", "return", "try",
    "while", "with", "yield", "self", NULL};
static const char *const kw_sh[] = {
    "if", "then", "else", "elif", "fi", "for", "while", "until", "do", "done", "case", "esac",
    "in", "function", "return", "local", "export", "readonly", "set", "unset", "shift", "exit",
    "break", "continue", "source", NULL};
static const char *const kw_js[] = {
    "async", "await", "break", "case", "catch", "class", "const", "continue", "default",
    "delete", "do", "else", "enum", "export", "extends", "false", "finally", "for", "function",
    "if", "implements", "import", "in", "instanceof", "interface", "let", "new", "null", "of",
    "return", "static", "super", "switch", "this", "throw", "true", "try", "type", "typeof",
    "undefined", "var", "void", "while", "yield", "from", "as", NULL};
static const char *const kw_json[] = {"true", "false", "null", NULL};
static const char *const kw_rust[] = {
    "as", "async", "await", "break", "const", "continue", "crate", "dyn", "else", "enum",
    "extern", "false", "fn", "for", "if", "impl", "in", "let", "loop", "match", "mod", "move",
    "mut", "pub", "ref", "return", "self", "Self", "static", "struct", "super", "trait", "true",
    "type", "unsafe", "use", "where", "while", NULL};
static const char *const kw_go[] = {
    "break", "case", "chan", "const", "continue", "default", "defer", "else", "fallthrough",
    "for", "func", "go", "goto", "if", "import", "interface", "map", "package", "range",
    "return", "select", "struct", "switch", "type", "var", "nil", "true", "false", NULL};

static const lang_def langs[] = {
    [HL_NONE] = {NULL, NULL, 0, "", 0, 0, 0, 0},
    [HL_C] = {kw_c, "//", 1, "\"'", 0, 0, 0, 0},
    [HL_PYTHON] = {kw_python, "#", 0, "\"'", 1, 0, 0, 0},
    [HL_SH] = {kw_sh, "#", 0, "\"'", 0, 0, 1, 0},
    [HL_JS] = {kw_js, "//", 1, "\"'", 0, 1, 0, 0},
    [HL_JSON] = {kw_json, NULL, 0, "\"", 0, 0, 0, 0},
    [HL_RUST] = {kw_rust, "//", 1, "\"", 0, 0, 0, 1},
    [HL_GO] = {kw_go, "//", 1, "\"'", 0, 1, 0, 0},
};

static const struct {
    const char *name;
    hl_lang lang;
} lang_names[] = {
    {"c", HL_C}, {"h", HL_C}, {"cpp", HL_C}, {"c++", HL_C}, {"cc", HL_C},
    {"python", HL_PYTHON}, {"py", HL_PYTHON}, {"python3", HL_PYTHON},
    {"sh", HL_SH}, {"bash", HL_SH}, {"shell", HL_SH}, {"zsh", HL_SH}, {"console", HL_SH},
    {"js", HL_JS}, {"javascript", HL_JS}, {"jsx", HL_JS}, {"mjs", HL_JS},
    {"ts", HL_JS}, {"typescript", HL_JS}, {"tsx", HL_JS},
    {"json", HL_JSON}, {"jsonc", HL_JSON},
    {"rust", HL_RUST}, {"rs", HL_RUST},
    {"go", HL_GO}, {"golang", HL_GO},
};

hl_lang hl_lang_from_info(const char *info, size_t len)
{
    size_t n = 0;
    while (n < len && info[n] != ' ' && info[n] != '{' && info[n] != ',')
        n++;
    for (size_t i = 0; i < sizeof lang_names / sizeof lang_names[0]; i++)
        if (strlen(lang_names[i].name) == n && strncasecmp(lang_names[i].name, info, n) == 0)
            return lang_names[i].lang;
    return HL_NONE;
}

static int is_ident(char c)
{
    return isalnum((unsigned char)c) || c == '_' || (unsigned char)c >= 0x80;
}

static void paint(unsigned *styles, size_t from, size_t to, unsigned style)
{
    for (size_t i = from; i < to; i++)
        styles[i] |= style;
}

static int starts(const char *s, size_t len, size_t i, const char *word)
{
    size_t n = strlen(word);
    return i + n <= len && memcmp(s + i, word, n) == 0;
}

/* Where a string opened by quote q before from ends (after its closing quote), or len when it
 * runs on; *closed says which. A backslash escapes the next byte unless raw. */
static size_t string_end(const char *s, size_t len, size_t from, char q, int raw, int *closed)
{
    for (size_t i = from; i < len; i++) {
        if (s[i] == '\\' && !raw) {
            i++;
            continue;
        }
        if (s[i] == q) {
            *closed = 1;
            return i + 1;
        }
    }
    *closed = 0;
    return len;
}

/* Continues a construct that spans lines from the previous one; returns where code resumes. */
static size_t continue_state(const char *s, size_t len, int *state, int go_raw, unsigned *styles)
{
    size_t end = len;
    int closed = 0;
    if (*state == ST_BLOCK_COMMENT) {
        const char *e = NULL;
        for (size_t i = 0; i + 1 < len && !e; i++)
            if (s[i] == '*' && s[i + 1] == '/')
                e = s + i;
        if (e) {
            end = (size_t)(e - s) + 2;
            closed = 1;
        }
        paint(styles, 0, end, RD_SYN_COMMENT);
    } else if (*state == ST_TRIPLE_DQ || *state == ST_TRIPLE_SQ) {
        const char *q = *state == ST_TRIPLE_DQ ? "\"\"\"" : "'''";
        for (size_t i = 0; i + 3 <= len && !closed; i++)
            if (memcmp(s + i, q, 3) == 0) {
                end = i + 3;
                closed = 1;
            }
        paint(styles, 0, end, RD_SYN_STRING);
    } else if (*state == ST_BACKTICK) {
        end = string_end(s, len, 0, '`', go_raw, &closed);
        paint(styles, 0, end, RD_SYN_STRING);
    }
    if (closed)
        *state = ST_CODE;
    return end;
}

static int is_keyword(const lang_def *L, const char *s, size_t n)
{
    for (const char *const *k = L->keywords; k && *k; k++)
        if (strlen(*k) == n && memcmp(*k, s, n) == 0)
            return 1;
    return 0;
}

/* The end of a number starting at i (digits, hex, exponents, suffixes, one decimal point). */
static size_t number_end(const char *s, size_t len, size_t i)
{
    while (i < len) {
        char c = s[i];
        if (c == '.' && i + 1 < len && s[i + 1] == '.')
            break; /* a range: 0..10 */
        if (!(isalnum((unsigned char)c) || c == '_' || c == '.'))
            break;
        if ((c == 'e' || c == 'E') && i + 1 < len && (s[i + 1] == '-' || s[i + 1] == '+'))
            i++;
        i++;
    }
    return i;
}

void hl_line(hl_lang lang, const char *s, size_t len, int *state, unsigned *styles)
{
    if (lang <= HL_NONE || lang > HL_GO)
        return;
    const lang_def *L = &langs[lang];
    size_t i = *state != ST_CODE ? continue_state(s, len, state, lang == HL_GO, styles) : 0;
    while (i < len && *state == ST_CODE) {
        char c = s[i];
        int word_start = i == 0 || !is_ident(s[i - 1]);
        if (L->line_comment && starts(s, len, i, L->line_comment) &&
            (!L->hash_at_word || i == 0 || s[i - 1] == ' ' || s[i - 1] == ';')) {
            paint(styles, i, len, RD_SYN_COMMENT);
            return;
        }
        if (L->block_comment && starts(s, len, i, "/*")) {
            *state = ST_BLOCK_COMMENT;
            size_t rest = continue_state(s + i + 2, len - i - 2, state, 0, styles + i + 2);
            paint(styles, i, i + 2, RD_SYN_COMMENT);
            i += 2 + rest;
            continue;
        }
        if (L->triple_quotes && (starts(s, len, i, "\"\"\"") || starts(s, len, i, "'''"))) {
            *state = c == '"' ? ST_TRIPLE_DQ : ST_TRIPLE_SQ;
            size_t rest = continue_state(s + i + 3, len - i - 3, state, 0, styles + i + 3);
            paint(styles, i, i + 3, RD_SYN_STRING);
            i += 3 + rest;
            continue;
        }
        if (c == '`' && L->backtick_spans) {
            *state = ST_BACKTICK;
            size_t rest = continue_state(s + i + 1, len - i - 1, state, lang == HL_GO,
                                         styles + i + 1);
            paint(styles, i, i + 1, RD_SYN_STRING);
            i += 1 + rest;
            continue;
        }
        if (c == '\'' && L->rust_chars) {
            size_t close = i + 1 < len && s[i + 1] == '\\' ? i + 3 : i + 2;
            while (close < len && close < i + 10 && s[close] != '\'' && s[i + 1] == '\\')
                close++;
            if (close < len && s[close] == '\'') {
                paint(styles, i, close + 1, RD_SYN_STRING);
                i = close + 1;
                continue;
            }
        } else if (strchr(L->quotes, c) && c) {
            int closed;
            size_t end = string_end(s, len, i + 1, c, lang == HL_SH && c == '\'', &closed);
            paint(styles, i, end, RD_SYN_STRING);
            i = end;
            continue;
        }
        if (word_start && (isdigit((unsigned char)c) ||
                           (c == '-' && lang == HL_JSON && i + 1 < len &&
                            isdigit((unsigned char)s[i + 1])))) {
            size_t end = number_end(s, len, i + 1);
            paint(styles, i, end, RD_SYN_NUMBER);
            i = end;
            continue;
        }
        if (word_start && (is_ident(c) || (c == '#' && lang == HL_C))) {
            size_t end = i + 1;
            while (end < len && is_ident(s[end]))
                end++;
            if (!isdigit((unsigned char)c) && is_keyword(L, s + i, end - i))
                paint(styles, i, end, RD_SYN_KEYWORD);
            i = end;
            continue;
        }
        i++;
    }
}
