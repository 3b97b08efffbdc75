/* md_table.h: the one reading of a Markdown table row, shared by the TUI's renderer (ui/render.c)
 * and the HTML export (storage/export_html_md.c): its cells between unescaped pipes. */
#ifndef GLMCHAT_BASE_MD_TABLE_H
#define GLMCHAT_BASE_MD_TABLE_H

#include <stddef.h>
#include <string.h>

/* The cells of the row s[0..len): leading and trailing spaces and one outer pipe on each side
 * dropped, split at pipes not escaped by a backslash, each cell trimmed of spaces. Writes the
 * first max cells' offsets and lengths; returns how many cells the row has, or -1 when it has no
 * pipe (no table row). Header-only: both layers above base use it without a link dependency. */
static inline int md_table_cells(const char *s, size_t len, size_t *off, size_t *n, int max)
{
    if (!memchr(s, '|', len))
        return -1;
    size_t a = 0, b = len;
    while (a < b && s[a] == ' ')
        a++;
    while (b > a && s[b - 1] == ' ')
        b--;
    if (a < b && s[a] == '|')
        a++;
    if (b > a && s[b - 1] == '|' && (b - 1 == a || s[b - 2] != '\\'))
        b--;
    int k = 0;
    size_t start = a;
    for (size_t i = a; i <= b; i++) {
        if (i < b && !(s[i] == '|' && (i == a || s[i - 1] != '\\')))
            continue;
        size_t x = start, y = i;
        while (x < y && s[x] == ' ')
            x++;
        while (y > x && s[y - 1] == ' ')
            y--;
        if (k < max) {
            off[k] = x;
            n[k] = y - x;
        }
        k++;
        start = i + 1;
    }
    return k;
}

#endif
