/* suggest.c: the closest known word to a mistyped one (suggest.h), by optimal string alignment
 * distance over at most 64 bytes a word. */
#include <ctype.h>
#include <string.h>

#include "base/suggest.h"

enum { kMaxWord = 64 };

/* The optimal string alignment distance of a and b (lengths at most kMaxWord), any case. */
static int distance(const char *a, size_t na, const char *b, size_t nb)
{
    int d[kMaxWord + 1][kMaxWord + 1];
    for (size_t i = 0; i <= na; i++)
        d[i][0] = (int)i;
    for (size_t j = 0; j <= nb; j++)
        d[0][j] = (int)j;
    for (size_t i = 1; i <= na; i++)
        for (size_t j = 1; j <= nb; j++) {
            int same = tolower((unsigned char)a[i - 1]) == tolower((unsigned char)b[j - 1]);
            int best = d[i - 1][j - 1] + !same;
            if (d[i - 1][j] + 1 < best)
                best = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < best)
                best = d[i][j - 1] + 1;
            if (i > 1 && j > 1 && tolower((unsigned char)a[i - 1]) == tolower((unsigned char)b[j - 2]) &&
                tolower((unsigned char)a[i - 2]) == tolower((unsigned char)b[j - 1]) && d[i - 2][j - 2] + 1 < best)
                best = d[i - 2][j - 2] + 1; /* two neighbours swapped */
            d[i][j] = best;
        }
    return d[na][nb];
}

const char *suggest_closest(const char *word, const char *const *candidates, size_t n)
{
    size_t nw = word ? strlen(word) : 0;
    if (nw == 0 || nw > kMaxWord)
        return NULL;
    const char *best = NULL;
    int best_d = 0, tied = 0;
    for (size_t i = 0; i < n; i++) {
        size_t nc = candidates[i] ? strlen(candidates[i]) : 0;
        if (nc == 0 || nc > kMaxWord)
            continue;
        size_t longer = nw > nc ? nw : nc;
        int limit = (int)(longer / 3);
        limit = limit < 1 ? 1 : limit > 3 ? 3 : limit;
        int d = distance(word, nw, candidates[i], nc);
        if (d == 0 || d > limit)
            continue; /* the word itself is no suggestion */
        if (!best || d < best_d) {
            best = candidates[i];
            best_d = d;
            tied = 0;
        } else if (d == best_d) {
            tied = 1;
        }
    }
    return tied ? NULL : best;
}
