/* grow.h: the one growth rule of glmchat's growable arrays (a pointer, a count, a capacity):
 * capacity doubles from a first size, and a size that would overflow is refused like no memory. */
#ifndef GLMCHAT_BASE_GROW_H
#define GLMCHAT_BASE_GROW_H

#include <stddef.h>

/* Makes room for at least need elements of elem bytes in the array *items of capacity *cap: when
 * need > *cap, reallocates to first elements (an empty array) or doubles until need fits.
 * 0, or -1 when out of memory or the bytes would overflow (*items and *cap unchanged).
 * Used as: if (grow_array((void **)&l->v, &l->cap, l->n + 1, sizeof *l->v, 16)) fail. */
int grow_array(void **items, size_t *cap, size_t need, size_t elem, size_t first);

#endif
