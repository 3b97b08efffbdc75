/* suggest.h: the known word a mistyped one was most likely meant to be ("did you mean"), for
 * unknown config keys, commands and subcommands. */
#ifndef GLMCHAT_BASE_SUGGEST_H
#define GLMCHAT_BASE_SUGGEST_H

#include <stddef.h>

/* The candidate closest to word by edit distance (insertions, deletions, substitutions and
 * swaps of two neighbours, byte-wise, case-insensitive), if within a third of the longer's
 * length (at least 1, at most 3) and not tied with another; else NULL. */
const char *suggest_closest(const char *word, const char *const *candidates, size_t n);

#endif
