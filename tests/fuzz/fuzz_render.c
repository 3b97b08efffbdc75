/* fuzz_render.c: libFuzzer target for ui/render.c: any bytes through sanitize, wrap and the
 * Markdown-lite layout, checking the invariants the TUI relies on (widths, coverage).
 * Build and run (bounded):
 *   clang -g -O1 -fsanitize=fuzzer,address,undefined -I. -include config.h tests/fuzz/fuzz_render.c \
 *     ui/render.c ui/highlight.c ui/visible.c base/utf8.c base/grow.c -o fuzz_render &&
 *   ./fuzz_render -max_total_time=60 */
#include <locale.h>
#include <stdlib.h>
#include <string.h>

#include "ui/render.h"

static void check_pieces(const char *s, size_t len, int width, const rd_pieces *p, int hard)
{
    size_t at = 0;
    for (size_t i = 0; i < p->n; i++) {
        const rd_piece *pc = &p->v[i];
        if (pc->width > width || (size_t)pc->width != rd_width(s + pc->off, pc->len) ||
            pc->off < at || pc->off + pc->len > len)
            abort();
        for (size_t k = at; k < pc->off; k++)
            if (s[k] != ' ' || hard)
                abort();
        at = pc->off + pc->len;
    }
    for (size_t k = at; k < len; k++)
        if (s[k] != ' ')
            abort();
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
    static int init;
    if (!init) {
        setlocale(LC_CTYPE, "C.UTF-8");
        init = 1;
    }
    if (size < 1)
        return 0;
    int width = 2 + data[0] % 60;
    const char *s = (const char *)data + 1;
    size_t len = size - 1;
    size_t clen;
    char *clean = rd_sanitize(s, len, &clen);
    if (!clean)
        return 0;
    if (strlen(clean) != clen)
        abort(); /* no NUL survives sanitizing: it is a control character */
    const char *line = clean;
    const char *nl = memchr(clean, '\n', clen);
    size_t llen = nl ? (size_t)(nl - clean) : clen;
    for (int hard = 0; hard < 2; hard++) {
        rd_pieces p = {0};
        if ((hard ? rd_wrap_hard(line, llen, width, &p) : rd_wrap(line, llen, width, &p)) == 0)
            check_pieces(line, llen, width, &p, hard);
        rd_pieces_free(&p);
    }
    rd_doc d = {0};
    rd_md_state st = {0};
    int w = width < 4 ? 4 : width;
    if (rd_render_markdown(&d, clean, clen, w, 0, &st) == 0)
        for (size_t l = 0; l < d.nlines; l++)
            if (d.lines[l].width > w)
                abort();
    rd_doc_reset(&d);
    if (rd_render_plain(&d, clean, clen, w, 0, "> ", "  ", 0) == 0)
        for (size_t l = 0; l < d.nlines; l++)
            if (d.lines[l].width > w)
                abort();
    rd_doc_free(&d);
    free(clean);
    return 0;
}
