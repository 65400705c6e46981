/* Links libwl_early.so, whose constructor allocates before a preloaded
 * collector's constructor runs; main frees one of those blocks (a free of a
 * block allocated before the collector's constructor) and allocates one of
 * its own, then exits with the other two still live. */
#include <stdio.h>
#include <stdlib.h>

#include "wl_early.h"

int main(void)
{
    if (!wl_early_blocks[0] || !wl_early_blocks[1] || !wl_early_blocks[2]) return 1;
    if (!getenv("WL_EARLY_SET")) return 2;
    free(wl_early_blocks[2]);
    void *p = malloc(22222);
    printf("wl_early: %p\n", p);
    free(p);
    return 0;
}
