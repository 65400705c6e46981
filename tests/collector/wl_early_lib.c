/* A library whose constructor allocates, as libstdc++'s (its 72 KiB
 * emergency pool) and many others do. The program that links it (wl_early)
 * has it initialised before a preloaded collector's own constructor runs,
 * so these allocations come before the collector's constructor. Known
 * answer: one block of WL_EARLY_KEPT bytes (malloc) and one of
 * WL_EARLY_BIG bytes (calloc) stay live; one of WL_EARLY_FREED bytes is
 * freed in the constructor itself, and one of WL_EARLY_MOVED bytes is grown
 * by realloc to WL_EARLY_MOVED_TO bytes and kept. It first sets a variable
 * with setenv (which allocates while holding the environment's lock). */
#include <stdlib.h>
#include <string.h>

#include "wl_early.h"

void *wl_early_blocks[3];
/* Keeps the compiler from pairing away the freed block's malloc and free. */
void *volatile wl_early_sink;

__attribute__((noinline)) static void wl_early_setup(void)
{
    /* The process's first allocation, made by setenv under the C library's
     * environment lock: a collector that started its run here and set its
     * own variables would wait for that lock forever. */
    setenv("WL_EARLY_SET", "set by libwl_early's constructor", 1);
    wl_early_blocks[0] = malloc(WL_EARLY_KEPT);
    wl_early_blocks[1] = calloc(1, WL_EARLY_BIG);
    void *f = malloc(WL_EARLY_FREED);
    if (f) memset(f, 1, WL_EARLY_FREED);
    wl_early_sink = f;
    free(wl_early_sink);
    void *m = malloc(WL_EARLY_MOVED);
    wl_early_blocks[2] = realloc(m, WL_EARLY_MOVED_TO);
}

__attribute__((constructor)) static void wl_early_ctor(void)
{
    wl_early_setup();
    __asm__ volatile("" ::: "memory");
}
