/* grow.c: doubling growth for arrays (grow.h), in one place so every array checks its size the
 * same way before multiplying it by the element's. */
#include "base/grow.h"

#include <stdint.h>
#include <stdlib.h>

int grow_array(void **items, size_t *cap, size_t need, size_t elem, size_t first)
{
    if (need <= *cap)
        return 0;
    if (elem == 0 || need > SIZE_MAX / elem)
        return -1;
    size_t c = *cap ? *cap : (first ? first : 1);
    while (c < need)
        c = c > SIZE_MAX / 2 ? need : c * 2;
    if (c > SIZE_MAX / elem)
        c = need;
    void *grown = realloc(*items, c * elem);
    if (!grown)
        return -1;
    *items = grown;
    *cap = c;
    return 0;
}
