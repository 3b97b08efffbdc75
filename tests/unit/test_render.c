/* test_render.c: ui/render.c: UTF-8, widths, wrapping (examples and properties over random
 * text), Markdown-lite lines and spans, code blocks, and streamed layout = whole layout; the
 * code highlighter (ui/highlight.c) and table layout. */
#include <check.h>
#include <locale.h>
#include <stdlib.h>
#include <string.h>

#include "ui/highlight.h"
#include "ui/render.h"
#include "tests/common/check_main.h"

/* ---- UTF-8 and width ---- */

/* The views repair bad UTF-8 by base/utf8.h's one policy (its own tests are in test_base.c).
 * Before it, the views gave one U+FFFD per byte: a character cut short by the next character
 * ("\xe4\xb8" then "x", "\xf0\x9f\x98" then "!") showed as two or three replacement characters,
 * two or three columns; now one, as the model's tokenizer, storage and jsonl show it. */
START_TEST(invalid_utf8_is_one_replacement_per_subpart)
{
    size_t n;
    char *s = rd_sanitize("\xe4\xb8x", 3, &n);
    ck_assert_str_eq(s, "\xef\xbf\xbdx");
    free(s);
    s = rd_sanitize("a\xf0\x9f\x98!", 5, &n);
    ck_assert_str_eq(s, "a\xef\xbf\xbd!");
    free(s);
    ck_assert_uint_eq(rd_width("\xe4\xb8x", 3), 2);
    ck_assert_uint_eq(rd_width("\xf0\x9f\x98", 3), 1);
    /* bytes that can start nothing, and an overlong form, are still one U+FFFD each */
    ck_assert_uint_eq(rd_width("\x80\xff", 2), 2);
    ck_assert_uint_eq(rd_width("\xc0\x80", 2), 2);
    ck_assert_uint_eq(rd_cluster_len("\xe4\xb8x", 3, NULL), 2);
}
END_TEST

START_TEST(widths)
{
    ck_assert_int_eq(rd_cp_width('a'), 1);
    ck_assert_int_eq(rd_cp_width(0x4E2D), 2);  /* 中 */
    ck_assert_int_eq(rd_cp_width(0x0301), 0);  /* combining acute */
    ck_assert_int_eq(rd_cp_width(0x200D), 0);  /* zero-width joiner */
    ck_assert_int_eq(rd_cp_width(0x1F600), 2); /* emoji */
    ck_assert_int_eq(rd_cp_width(0xFF21), 2);  /* fullwidth A */
    ck_assert_uint_eq(rd_width("e\xcc\x81", 3), 1);
    ck_assert_uint_eq(rd_width("\xe4\xb8\xad\xe6\x96\x87", 6), 4);
    ck_assert_uint_eq(rd_width("ab\xf0\x9f\x98\x80", 6), 4);
    int w;
    ck_assert_uint_eq(rd_cluster_len("e\xcc\x81x", 4, &w), 3);
    ck_assert_int_eq(w, 1);
}
END_TEST

START_TEST(sanitize)
{
    size_t n;
    const char *in = "\x1b[31mred\r\nx\ty\tz\xff";
    char *s = rd_sanitize(in, strlen(in), &n);
    ck_assert_ptr_nonnull(s);
    ck_assert_str_eq(s, "^[[31mred\nx   y   z\xef\xbf\xbd"); /* ESC visible, CRLF a line end */
    ck_assert_uint_eq(n, strlen(s));
    free(s);
    in = "a\rb\x07\x7f\xc2\x9b" "2J\x1b]52;c;eA==\x07"; /* CR, BEL, DEL, C1 CSI, OSC 52 */
    s = rd_sanitize(in, strlen(in), &n);
    ck_assert_str_eq(s, "a^Mb^G^?\\u009b2J^[]52;c;eA==^G");
    ck_assert_uint_eq(n, strlen(s));
    free(s);
    s = rd_sanitize("\xe4\xb8\xad\tx", 5, &n); /* the tab stop counts the wide char as 2 */
    ck_assert_str_eq(s, "\xe4\xb8\xad  x");
    free(s);
    s = rd_sanitize("", 0, &n);
    ck_assert_str_eq(s, "");
    free(s);
}
END_TEST

/* ---- wrapping: examples ---- */

static char *joined(const char *s, const rd_pieces *p)
{
    static char out[4096];
    size_t o = 0;
    for (size_t i = 0; i < p->n; i++) {
        if (i)
            out[o++] = '|';
        memcpy(out + o, s + p->v[i].off, p->v[i].len);
        o += p->v[i].len;
    }
    out[o] = '\0';
    return out;
}

static const char *wrap_str(const char *s, int width)
{
    rd_pieces p = {0};
    ck_assert_int_eq(rd_wrap(s, strlen(s), width, &p), 0);
    const char *r = joined(s, &p);
    rd_pieces_free(&p);
    return r;
}

START_TEST(wrap_examples)
{
    ck_assert_str_eq(wrap_str("hello world", 5), "hello|world");
    ck_assert_str_eq(wrap_str("hello world", 11), "hello world");
    ck_assert_str_eq(wrap_str("a b c d e f", 3), "a b|c d|e f");
    ck_assert_str_eq(wrap_str("abcdefghij", 4), "abcd|efgh|ij");
    ck_assert_str_eq(wrap_str("aaa   bbb", 4), "aaa|bbb");
    ck_assert_str_eq(wrap_str("   indented", 20), "   indented");
    ck_assert_str_eq(wrap_str("", 10), "");
    ck_assert_str_eq(wrap_str("x yyyyyyyy", 4), "x|yyyy|yyyy");
    /* wide characters never straddle the edge */
    ck_assert_str_eq(wrap_str("\xe4\xb8\xad\xe6\x96\x87\xe4\xb8\xad", 5),
                     "\xe4\xb8\xad\xe6\x96\x87|\xe4\xb8\xad");
    ck_assert_str_eq(wrap_str("a\xe4\xb8\xad", 2), "a|\xe4\xb8\xad");
    /* a combining mark stays with its base */
    ck_assert_str_eq(wrap_str("e\xcc\x81" "e\xcc\x81" "e\xcc\x81", 2),
                     "e\xcc\x81" "e\xcc\x81|e\xcc\x81");
    rd_pieces p = {0};
    ck_assert_int_eq(rd_wrap("abc", 3, 1, &p), -1);
    rd_pieces_free(&p);
}
END_TEST

START_TEST(wrap_hard_keeps_spaces)
{
    rd_pieces p = {0};
    const char *s = "  int  x = 1;";
    ck_assert_int_eq(rd_wrap_hard(s, strlen(s), 5, &p), 0);
    ck_assert_str_eq(joined(s, &p), "  int|  x =| 1;");
    rd_pieces_free(&p);
}
END_TEST

/* ---- wrapping: properties over random text ---- */

static unsigned long rng_state = 12345;
static unsigned rnd(unsigned n)
{
    rng_state = rng_state * 6364136223846793005UL + 1442695040888963407UL;
    return (unsigned)((rng_state >> 33) % n);
}

static size_t random_line(char *out, size_t cap)
{
    static const char *atoms[] = {
        "a", "b", "word", " ", " ", "  ", "\xe4\xb8\xad", "e\xcc\x81", "\xf0\x9f\x98\x80",
        "supercalifragilisticexpialidocious", "\xc3\xa9", "-", "\xe2\x80\x8d",
    };
    size_t n = 0, k = rnd(40);
    for (size_t i = 0; i < k; i++) {
        const char *a = atoms[rnd(sizeof atoms / sizeof atoms[0])];
        size_t l = strlen(a);
        if (n + l >= cap)
            break;
        memcpy(out + n, a, l);
        n += l;
    }
    out[n] = '\0';
    return n;
}

static int is_cont_byte(char c)
{
    return ((unsigned char)c & 0xC0) == 0x80;
}

START_TEST(wrap_properties)
{
    char s[2048];
    for (int iter = 0; iter < 4000; iter++) {
        size_t len = random_line(s, sizeof s);
        int width = 2 + (int)rnd(30);
        for (int hard = 0; hard < 2; hard++) {
            rd_pieces p = {0};
            ck_assert_int_eq(hard ? rd_wrap_hard(s, len, width, &p) : rd_wrap(s, len, width, &p), 0);
            ck_assert_uint_ge(p.n, 1);
            size_t at = 0;
            for (size_t i = 0; i < p.n; i++) {
                rd_piece *pc = &p.v[i];
                /* never wider than the line, and the width it reports is the true one */
                ck_assert_int_le(pc->width, width);
                ck_assert_uint_eq((size_t)pc->width, rd_width(s + pc->off, pc->len));
                /* in order; what lies between pieces is dropped break whitespace only */
                ck_assert_uint_ge(pc->off, at);
                for (size_t k = at; k < pc->off; k++)
                    ck_assert_int_eq(s[k], ' ');
                if (hard)
                    ck_assert_uint_eq(pc->off, at);
                /* never inside a UTF-8 sequence */
                if (pc->off < len)
                    ck_assert(!is_cont_byte(s[pc->off]));
                at = pc->off + pc->len;
            }
            for (size_t k = at; k < len; k++)
                ck_assert_int_eq(s[k], ' ');
            if (hard)
                ck_assert_uint_eq(at, len);
            rd_pieces_free(&p);
        }
    }
}
END_TEST

START_TEST(wrap_is_greedy)
{
    /* A piece is never followed by a word that would have fitted on it. */
    char s[2048];
    for (int iter = 0; iter < 2000; iter++) {
        size_t len = random_line(s, sizeof s);
        int width = 4 + (int)rnd(30);
        rd_pieces p = {0};
        ck_assert_int_eq(rd_wrap(s, len, width, &p), 0);
        for (size_t i = 0; i + 1 < p.n; i++) {
            size_t gap = p.v[i + 1].off - (p.v[i].off + p.v[i].len);
            if (gap == 0)
                continue; /* a hard break inside a long word */
            size_t w = 0, e = p.v[i + 1].off;
            while (e < len && s[e] != ' ')
                e++;
            w = rd_width(s + p.v[i + 1].off, e - p.v[i + 1].off);
            ck_assert_int_gt((int)(p.v[i].width + gap + w), width);
        }
        rd_pieces_free(&p);
    }
}
END_TEST

/* ---- Markdown-lite ---- */

static rd_line_class cls(const char *s, rd_md_state *st)
{
    return rd_md_classify(s, strlen(s), st);
}

START_TEST(md_classify)
{
    rd_md_state st = {0};
    ck_assert_int_eq(cls("# Title", &st).kind, RD_L_HEADING);
    ck_assert_int_eq(cls("### Sub", &st).level, 3);
    ck_assert_int_eq(cls("#hashtag", &st).kind, RD_L_PARA);
    ck_assert_int_eq(cls("####### seven", &st).kind, RD_L_PARA);
    ck_assert_int_eq(cls("- item", &st).kind, RD_L_BULLET);
    ck_assert_int_eq(cls("  * nested", &st).indent, 2);
    ck_assert_int_eq(cls("-not a list", &st).kind, RD_L_PARA);
    ck_assert_int_eq(cls("12. twelve", &st).kind, RD_L_NUMBER);
    ck_assert_uint_eq(cls("12. twelve", &st).marker_len, 4);
    ck_assert_int_eq(cls("3) three", &st).kind, RD_L_NUMBER);
    ck_assert_int_eq(cls("> quoted", &st).kind, RD_L_QUOTE);
    ck_assert_int_eq(cls("---", &st).kind, RD_L_RULE);
    ck_assert_int_eq(cls("* * *", &st).kind, RD_L_RULE);
    ck_assert_int_eq(cls("   ", &st).kind, RD_L_BLANK);
    ck_assert_int_eq(cls("plain words", &st).kind, RD_L_PARA);
    rd_line_class c = cls("```python", &st);
    ck_assert_int_eq(c.kind, RD_L_FENCE_OPEN);
    ck_assert_str_eq("```python" + c.body, "python");
    ck_assert_int_eq(st.in_code, 1);
    ck_assert_int_eq(cls("# not a heading in code", &st).kind, RD_L_CODE);
    ck_assert_int_eq(cls("~~~", &st).kind, RD_L_CODE); /* another fence char does not close */
    ck_assert_int_eq(cls("``", &st).kind, RD_L_CODE);  /* a shorter fence does not close */
    ck_assert_int_eq(cls("````", &st).kind, RD_L_FENCE_CLOSE);
    ck_assert_int_eq(st.in_code, 0);
}
END_TEST

static const char *inl(const char *s, unsigned *styles_out)
{
    static char plain[512];
    static unsigned st[512];
    size_t n = rd_md_inline(s, strlen(s), 0, plain, st);
    plain[n] = '\0';
    if (styles_out)
        memcpy(styles_out, st, n * sizeof *st);
    return plain;
}

START_TEST(md_inline_spans)
{
    unsigned st[512];
    ck_assert_str_eq(inl("a **bold** b", st), "a bold b");
    ck_assert_uint_eq(st[0], 0);
    ck_assert_uint_eq(st[2], RD_BOLD);
    ck_assert_uint_eq(st[5], RD_BOLD);
    ck_assert_uint_eq(st[6], 0);
    ck_assert_str_eq(inl("use `x**2` here", st), "use x**2 here");
    ck_assert_uint_eq(st[4], RD_CODE);
    ck_assert_uint_eq(st[7], RD_CODE);
    ck_assert_str_eq(inl("an *italic* word", st), "an italic word");
    ck_assert_uint_eq(st[3], RD_ITALIC);
    ck_assert_str_eq(inl("snake_case_name stays", NULL), "snake_case_name stays");
    ck_assert_str_eq(inl("unclosed **bold", NULL), "unclosed **bold");
    ck_assert_str_eq(inl("2 * 3 * 4", NULL), "2 * 3 * 4");
    ck_assert_str_eq(inl("\\*not italic\\*", NULL), "*not italic*");
    ck_assert_str_eq(inl("``a ` b``", st), "a ` b");
    ck_assert_uint_eq(st[2], RD_CODE);
    ck_assert_str_eq(inl("**bold with `code` inside**", st), "bold with code inside");
    ck_assert_uint_eq(st[10], RD_CODE);
}
END_TEST

static const char *line_text(const rd_doc *d, size_t l)
{
    static char out[1024];
    size_t o = 0;
    const rd_line *ln = &d->lines[l];
    for (size_t k = 0; k < ln->nseg; k++) {
        const rd_seg *sg = &d->segs[ln->seg0 + k];
        memcpy(out + o, d->text + sg->off, sg->len);
        o += sg->len;
    }
    out[o] = '\0';
    return out;
}

static unsigned line_styles(const rd_doc *d, size_t l)
{
    unsigned s = 0;
    for (size_t k = 0; k < d->lines[l].nseg; k++)
        s |= d->segs[d->lines[l].seg0 + k].style;
    return s;
}

START_TEST(md_render_blocks)
{
    const char *md = "# Title\nSome **bold** text.\n\n- one two three four five six\n"
                     "```c\nint x;\n```\nafter";
    rd_doc d = {0};
    rd_md_state st = {0};
    ck_assert_int_eq(rd_render_markdown(&d, md, strlen(md), 20, 0, &st), 0);
    ck_assert_str_eq(line_text(&d, 0), "Title");
    ck_assert(line_styles(&d, 0) & RD_HEADING);
    ck_assert_str_eq(line_text(&d, 1), "Some bold text.");
    ck_assert_str_eq(line_text(&d, 2), "");
    ck_assert_str_eq(line_text(&d, 3), "\xe2\x80\xa2 one two three four");
    ck_assert_str_eq(line_text(&d, 4), "  five six");
    ck_assert(d.lines[5].fill & RD_CODEBLOCK);         /* the label line */
    ck_assert_str_eq(line_text(&d, 5), " c");
    ck_assert_str_eq(line_text(&d, 6), " int x;");
    ck_assert(d.lines[6].fill & RD_CODEBLOCK);
    ck_assert_str_eq(line_text(&d, 7), "after");
    ck_assert_uint_eq(d.nlines, 8);
    ck_assert_int_eq(st.in_code, 0);
    rd_doc_free(&d);
}
END_TEST

START_TEST(md_render_width_property)
{
    static const char *atoms[] = {
        "# ", "## ", "- ", "1. ", "> ", "```\n", "`", "**", "*", "_", "word ", "\n", "\n\n",
        "\xe4\xb8\xad\xe6\x96\x87 ", "e\xcc\x81 ", "\xf0\x9f\x98\x80", "averyveryverylongwordindeed ",
        "    indented ", "---\n", "~~~py\n", "| a | \xe4\xb8\xad |\n", "|---|:-:|\n", "|",
        "| e\xcc\x81 | `x|y` |\n",
    };
    char s[4096];
    for (int iter = 0; iter < 1500; iter++) {
        size_t n = 0, k = rnd(60);
        for (size_t i = 0; i < k; i++) {
            const char *a = atoms[rnd(sizeof atoms / sizeof atoms[0])];
            size_t l = strlen(a);
            if (n + l >= sizeof s)
                break;
            memcpy(s + n, a, l);
            n += l;
        }
        int width = 4 + (int)rnd(40);
        rd_doc d = {0};
        rd_md_state st = {0};
        ck_assert_int_eq(rd_render_markdown(&d, s, n, width, 0, &st), 0);
        for (size_t l = 0; l < d.nlines; l++) {
            ck_assert_int_le(d.lines[l].width, width);
            const char *t = line_text(&d, l);
            ck_assert_uint_eq(rd_width(t, strlen(t)), (size_t)d.lines[l].width);
        }
        rd_doc_free(&d);
    }
}
END_TEST

START_TEST(md_streamed_equals_whole)
{
    /* The TUI lays out complete lines once and the open tail again each time; the result
     * must equal laying out the whole text at once. */
    const char *md = "Intro **bold**\n```sh\nls -la\n# comment\n```\n- a\n- b\n> q\n"
                     "| k | v |\n|---|---|\n| 1 | 2 |\n\ntail";
    size_t len = strlen(md);
    rd_doc whole = {0};
    rd_md_state st = {0};
    rd_render_markdown(&whole, md, len, 16, 0, &st);
    for (size_t cut = 0; cut <= len; cut++) {
        if (cut > 0 && md[cut - 1] != '\n')
            continue;
        if (cut < len && rd_md_settled_end(md, cut) != cut)
            continue; /* inside a table: the TUI keeps such lines open (rd_md_settled_end) */
        rd_doc part = {0};
        rd_md_state s2 = {0};
        rd_render_markdown(&part, md, cut, 16, 0, &s2);
        rd_render_markdown(&part, md + cut, len - cut, 16, 0, &s2);
        ck_assert_uint_eq(part.nlines, whole.nlines);
        for (size_t l = 0; l < whole.nlines; l++) {
            char a[1024];
            strcpy(a, line_text(&whole, l));
            ck_assert_str_eq(line_text(&part, l), a);
            ck_assert_uint_eq(part.lines[l].fill, whole.lines[l].fill);
        }
        rd_doc_free(&part);
    }
    rd_doc_free(&whole);
}
END_TEST

START_TEST(plain_prefixes)
{
    rd_doc d = {0};
    const char *s = "first line wraps here\nsecond";
    ck_assert_int_eq(rd_render_plain(&d, s, strlen(s), 12, RD_USER, "> ", "  ", RD_BOLD), 0);
    ck_assert_uint_eq(d.nlines, 3);
    ck_assert_str_eq(line_text(&d, 0), "> first line");
    ck_assert_str_eq(line_text(&d, 1), "  wraps here");
    ck_assert_str_eq(line_text(&d, 2), "  second");
    ck_assert_uint_eq(d.segs[d.lines[0].seg0].style, RD_BOLD);
    ck_assert_uint_eq(d.segs[d.lines[0].seg0 + 1].style, RD_USER);
    rd_doc_reset(&d);
    ck_assert_int_eq(rd_render_plain(&d, "", 0, 12, 0, "x ", "  ", 0), 0);
    ck_assert_uint_eq(d.nlines, 1);
    rd_doc_reset(&d);
    ck_assert_int_eq(rd_render_plain(&d, "a\n", 2, 12, 0, "", "", 0), 0);
    ck_assert_uint_eq(d.nlines, 1);
    rd_doc_free(&d);
}
END_TEST


/* ---- syntax highlighting ---- */

/* The class of each byte of line under lang (state carried in *st): 'k' keyword, 's' string,
 * 'c' comment, 'n' number, '.' none. */
static const char *classes(hl_lang lang, const char *line, int *st)
{
    static char out[256];
    unsigned styles[256] = {0};
    size_t n = strlen(line);
    hl_line(lang, line, n, st, styles);
    for (size_t i = 0; i < n; i++)
        out[i] = styles[i] & RD_SYN_KEYWORD   ? 'k'
                 : styles[i] & RD_SYN_STRING  ? 's'
                 : styles[i] & RD_SYN_COMMENT ? 'c'
                 : styles[i] & RD_SYN_NUMBER  ? 'n'
                                              : '.';
    out[n] = '\0';
    return out;
}

START_TEST(hl_languages_from_info)
{
    ck_assert_int_eq(hl_lang_from_info("c", 1), HL_C);
    ck_assert_int_eq(hl_lang_from_info("Python", 6), HL_PYTHON);
    ck_assert_int_eq(hl_lang_from_info("bash title=x", 12), HL_SH);
    ck_assert_int_eq(hl_lang_from_info("tsx", 3), HL_JS);
    ck_assert_int_eq(hl_lang_from_info("json", 4), HL_JSON);
    ck_assert_int_eq(hl_lang_from_info("rs", 2), HL_RUST);
    ck_assert_int_eq(hl_lang_from_info("go", 2), HL_GO);
    ck_assert_int_eq(hl_lang_from_info("", 0), HL_NONE);
    ck_assert_int_eq(hl_lang_from_info("cobol", 5), HL_NONE);
    ck_assert_int_eq(hl_lang_from_info("gopher", 6), HL_NONE);
}
END_TEST

START_TEST(hl_classes_per_language)
{
    int st = 0;
    ck_assert_str_eq(classes(HL_C, "int x = 42; // hi", &st), "kkk.....nn..ccccc");
    ck_assert_str_eq(classes(HL_C, "s = \"a\\\"b\"; if", &st), "....ssssss..kk");
    ck_assert_str_eq(classes(HL_C, "#include <x.h>", &st), "kkkkkkkk......");
    ck_assert_str_eq(classes(HL_C, "printf1 x2", &st), "..........");
    ck_assert_str_eq(classes(HL_PYTHON, "def f(): return 0x1F # c", &st),
                     "kkk......kkkkkk.nnnn.ccc");
    ck_assert_str_eq(classes(HL_SH, "echo a#b # c 'x\\'", &st), ".........cccccccc");
    ck_assert_str_eq(classes(HL_SH, "if [ 'a\\' ]; then", &st), "kk...ssss....kkkk");
    ck_assert_str_eq(classes(HL_JS, "const s = `t`; let", &st), "kkkkk.....sss..kkk");
    ck_assert_str_eq(classes(HL_JSON, "{\"k\": -1.5e+3, \"t\": true}", &st),
                     ".sss..nnnnnnn..sss..kkkk.");
    ck_assert_str_eq(classes(HL_RUST, "fn f<'a>(x: &'a u8) { 'x' }", &st),
                     "kk....................sss..");
    ck_assert_str_eq(classes(HL_GO, "func f() { x := 1.5 }", &st), "kkkk............nnn..");
    ck_assert_int_eq(st, 0);
}
END_TEST

START_TEST(hl_state_spans_lines)
{
    int st = 0;
    ck_assert_str_eq(classes(HL_C, "a /* b", &st), "..cccc");
    ck_assert_int_ne(st, 0);
    ck_assert_str_eq(classes(HL_C, "int in comment", &st), "cccccccccccccc");
    ck_assert_str_eq(classes(HL_C, "end */ int", &st), "cccccc.kkk");
    ck_assert_int_eq(st, 0);
    ck_assert_str_eq(classes(HL_PYTHON, "x = \"\"\"doc", &st), "....ssssss");
    ck_assert_str_eq(classes(HL_PYTHON, "if not", &st), "ssssss");
    ck_assert_str_eq(classes(HL_PYTHON, "\"\"\" if", &st), "sss.kk");
    ck_assert_int_eq(st, 0);
    ck_assert_str_eq(classes(HL_GO, "s := `raw\\", &st), ".....sssss");
    ck_assert_str_eq(classes(HL_GO, "x` go", &st), "ss.kk");
    ck_assert_int_eq(st, 0);
    ck_assert_str_eq(classes(HL_NONE, "int x", &st), ".....");
}
END_TEST

START_TEST(md_code_block_highlighted)
{
    /* Fenced code gets the language's classes; the block's state carries over its lines and
     * resets at the next fence; an unknown language stays plain. */
    const char *md = "```c\nint a; /* x\ny */ return\n```\n```\nint b;\n```\nint c\n";
    rd_doc d = {0};
    rd_md_state st = {0};
    ck_assert_int_eq(rd_render_markdown(&d, md, strlen(md), 30, 0, &st), 0);
    ck_assert_str_eq(line_text(&d, 1), " int a; /* x");
    ck_assert(line_styles(&d, 1) & RD_SYN_KEYWORD);
    ck_assert(line_styles(&d, 1) & RD_SYN_COMMENT);
    ck_assert(line_styles(&d, 2) & RD_SYN_COMMENT);
    ck_assert(line_styles(&d, 2) & RD_SYN_KEYWORD); /* "return" after the comment ends */
    ck_assert_str_eq(line_text(&d, 4), " int b;");
    ck_assert(!(line_styles(&d, 4) & (RD_SYN_KEYWORD | RD_SYN_COMMENT)));
    ck_assert(!(line_styles(&d, 5) & RD_SYN_KEYWORD)); /* outside code: prose */
    rd_doc_free(&d);
}
END_TEST

/* ---- tables ---- */

/* Display column (0-based) of each U+2502 on line l. */
static int bar_columns(const rd_doc *d, size_t l, int *cols, int max)
{
    const char *t = line_text(d, l);
    int n = 0;
    size_t len = strlen(t);
    for (size_t i = 0; i < len;) {
        if (strncmp(t + i, "\xe2\x94\x82", 3) == 0 || strncmp(t + i, "\xe2\x94\xbc", 3) == 0 ||
            strncmp(t + i, "\xe2\x94\x9c", 3) == 0 || strncmp(t + i, "\xe2\x94\xa4", 3) == 0) {
            if (n < max)
                cols[n] = (int)rd_width(t, i);
            n++;
        }
        int w;
        i += rd_cluster_len(t + i, len - i, &w);
    }
    return n;
}

START_TEST(table_cells_split)
{
    size_t off[8], n[8];
    const char *row = " | a | `b` \\| c |  d  | ";
    ck_assert_int_eq(rd_table_cells(row, strlen(row), off, n, 8), 3);
    ck_assert_int_eq((int)n[0], 1);
    ck_assert(strncmp(row + off[1], "`b` \\| c", n[1]) == 0 && n[1] == 8);
    ck_assert(strncmp(row + off[2], "d", n[2]) == 0 && n[2] == 1);
    ck_assert_int_eq(rd_table_cells("no pipe", 7, off, n, 8), -1);
    ck_assert_int_eq(rd_table_cells("a|b", 3, off, n, 8), 2);
}
END_TEST

START_TEST(table_aligned_columns)
{
    /* Wide (CJK) and combining characters take their display width; the columns line up. */
    const char *md = "Intro\n| Name | Score |\n|:-----|------:|\n| \xe4\xb8\xad\xe6\x96\x87 | 7 |\n"
                     "| e\xcc\x81t\xc3\xa9 | **12** |\n| x \\| y |\nafter\n";
    rd_doc d = {0};
    rd_md_state st = {0};
    ck_assert_int_eq(rd_render_markdown(&d, md, strlen(md), 40, 0, &st), 0);
    ck_assert_uint_eq(d.nlines, 7);
    ck_assert_str_eq(line_text(&d, 0), "Intro");
    ck_assert_str_eq(line_text(&d, 1), "\xe2\x94\x82 Name  \xe2\x94\x82 Score \xe2\x94\x82");
    ck_assert(line_styles(&d, 1) & RD_BOLD);
    ck_assert_str_eq(line_text(&d, 3), "\xe2\x94\x82 \xe4\xb8\xad\xe6\x96\x87  \xe2\x94\x82     7 \xe2\x94\x82");
    ck_assert_str_eq(line_text(&d, 4), "\xe2\x94\x82 e\xcc\x81t\xc3\xa9   \xe2\x94\x82    12 \xe2\x94\x82");
    ck_assert(line_styles(&d, 4) & RD_BOLD); /* inline Markdown inside a cell */
    ck_assert_str_eq(line_text(&d, 5), "\xe2\x94\x82 x | y \xe2\x94\x82       \xe2\x94\x82"); /* short row */
    int want[8], got[8];
    ck_assert_int_eq(bar_columns(&d, 1, want, 8), 3);
    for (size_t l = 2; l <= 5; l++) {
        ck_assert_int_eq(bar_columns(&d, l, got, 8), 3);
        for (int k = 0; k < 3; k++)
            ck_assert_int_eq(got[k], want[k]);
        ck_assert_int_eq(d.lines[l].width, d.lines[1].width);
    }
    ck_assert_str_eq(line_text(&d, 6), "after");
    rd_doc_free(&d);
}
END_TEST

START_TEST(table_too_narrow_wraps_its_cells)
{
    /* Narrower than its columns: the widest shrink and their cells wrap, a row taking the lines
     * its tallest cell needs, every bar still in its column; styles stay with their words. */
    const char *md = "| a long header | another long one |\n|---|--:|\n| **bold words here** | 2 |\n";
    rd_doc d = {0};
    rd_md_state st = {0};
    ck_assert_int_eq(rd_render_markdown(&d, md, strlen(md), 30, 0, &st), 0);
    for (size_t l = 0; l < d.nlines; l++)
        ck_assert_int_le(d.lines[l].width, 30);
    ck_assert_str_eq(line_text(&d, 0), "\xe2\x94\x82 a long      \xe2\x94\x82 another long \xe2\x94\x82");
    ck_assert_str_eq(line_text(&d, 1), "\xe2\x94\x82 header      \xe2\x94\x82          one \xe2\x94\x82");
    ck_assert_str_eq(line_text(&d, 3), "\xe2\x94\x82 bold words  \xe2\x94\x82            2 \xe2\x94\x82");
    ck_assert_str_eq(line_text(&d, 4), "\xe2\x94\x82 here        \xe2\x94\x82              \xe2\x94\x82");
    ck_assert(line_styles(&d, 4) & RD_BOLD);
    ck_assert_uint_eq(d.nlines, 5);
    int want[8], got[8];
    ck_assert_int_eq(bar_columns(&d, 0, want, 8), 3);
    for (size_t l = 1; l < d.nlines; l++) {
        ck_assert_int_eq(bar_columns(&d, l, got, 8), 3);
        for (int k = 0; k < 3; k++)
            ck_assert_int_eq(got[k], want[k]);
    }
    rd_doc_free(&d);
}
END_TEST

START_TEST(table_shrinks_prose_before_breaking_words)
{
    /* The prose column wraps at its spaces; the one-word column keeps its word whole. */
    const char *md = "| id | text |\n|---|---|\n| alphabet | one two three four five six seven |\n";
    rd_doc d = {0};
    rd_md_state st = {0};
    ck_assert_int_eq(rd_render_markdown(&d, md, strlen(md), 30, 0, &st), 0);
    ck_assert_str_eq(line_text(&d, 2), "\xe2\x94\x82 alphabet \xe2\x94\x82 one two three   \xe2\x94\x82");
    ck_assert_str_eq(line_text(&d, 3), "\xe2\x94\x82          \xe2\x94\x82 four five six   \xe2\x94\x82");
    ck_assert_str_eq(line_text(&d, 4), "\xe2\x94\x82          \xe2\x94\x82 seven           \xe2\x94\x82");
    ck_assert_uint_eq(d.nlines, 5);
    rd_doc_free(&d);
}
END_TEST

START_TEST(table_too_narrow_for_its_columns_falls_back_to_raw_lines)
{
    /* Under 4 columns a cell: the raw lines, wrapped. */
    const char *md = "| a long header | another long one |\n|---|---|\n| 1 | 2 |\n";
    rd_doc d = {0};
    rd_md_state st = {0};
    ck_assert_int_eq(rd_render_markdown(&d, md, strlen(md), 14, 0, &st), 0);
    ck_assert_str_eq(line_text(&d, 0), "| a long");
    ck_assert_str_eq(line_text(&d, d.nlines - 2), "|---|---|");
    ck_assert_str_eq(line_text(&d, d.nlines - 1), "| 1 | 2 |");
    rd_doc_free(&d);
}
END_TEST

START_TEST(table_needs_a_delimiter_row)
{
    /* Pipes in prose, or a header whose delimiter has another cell count, stay text. */
    const char *md = "a | b\nc | d\n| x | y |\n|---|\n";
    rd_doc d = {0};
    rd_md_state st = {0};
    ck_assert_int_eq(rd_render_markdown(&d, md, strlen(md), 30, 0, &st), 0);
    ck_assert_uint_eq(d.nlines, 4);
    ck_assert_str_eq(line_text(&d, 0), "a | b");
    ck_assert_str_eq(line_text(&d, 3), "|---|");
    rd_doc_free(&d);
}
END_TEST

START_TEST(settled_end_keeps_a_growing_table_open)
{
    ck_assert_uint_eq(rd_md_settled_end("ab\ncd", 5), 3);
    ck_assert_uint_eq(rd_md_settled_end("ab\n|x|\n|-|\n|1", 14), 3);
    ck_assert_uint_eq(rd_md_settled_end("|x|\n|-|\n", 8), 0);
    ck_assert_uint_eq(rd_md_settled_end("|x|\n|-|\nend\n", 12), 12);
    ck_assert_uint_eq(rd_md_settled_end("", 0), 0);
}
END_TEST

static Suite *render_suite(void)
{
    Suite *s = suite_create("render");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, invalid_utf8_is_one_replacement_per_subpart);
    tcase_add_test(tc, widths);
    tcase_add_test(tc, sanitize);
    tcase_add_test(tc, wrap_examples);
    tcase_add_test(tc, wrap_hard_keeps_spaces);
    tcase_add_test(tc, wrap_properties);
    tcase_add_test(tc, wrap_is_greedy);
    tcase_add_test(tc, md_classify);
    tcase_add_test(tc, md_inline_spans);
    tcase_add_test(tc, md_render_blocks);
    tcase_add_test(tc, md_render_width_property);
    tcase_add_test(tc, md_streamed_equals_whole);
    tcase_add_test(tc, plain_prefixes);
    tcase_add_test(tc, hl_languages_from_info);
    tcase_add_test(tc, hl_classes_per_language);
    tcase_add_test(tc, hl_state_spans_lines);
    tcase_add_test(tc, md_code_block_highlighted);
    tcase_add_test(tc, table_cells_split);
    tcase_add_test(tc, table_aligned_columns);
    tcase_add_test(tc, table_too_narrow_wraps_its_cells);
    tcase_add_test(tc, table_shrinks_prose_before_breaking_words);
    tcase_add_test(tc, table_too_narrow_for_its_columns_falls_back_to_raw_lines);
    tcase_add_test(tc, table_needs_a_delimiter_row);
    tcase_add_test(tc, settled_end_keeps_a_growing_table_open);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    if (!setlocale(LC_CTYPE, "C.UTF-8"))
        setlocale(LC_CTYPE, "");
    return test_run_suite(render_suite());
}
