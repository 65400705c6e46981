/* A library whose debug information lives in a separate, compressed file
 * (libwl_split.so.debug, linked by .gnu_debuglink; see CMakeLists.txt), as
 * Debian's -dbg packages install it. The library itself is stripped of every
 * symbol table but the dynamic one, so split_site's name can only come from
 * that separate file. */
#include <stdlib.h>

void *wl_split_work(size_t n);
int wl_split_line(void);

static int site_line;

/* The allocation site the test looks for. */
__attribute__((noinline)) static void *split_site(size_t n)
{
    void *p = (site_line = __LINE__, malloc(n));
    __asm__ volatile("" : : "r"(p) : "memory");
    return p;
}

void *wl_split_work(size_t n)
{
    return split_site(n);
}

int wl_split_line(void)
{
    return site_line;
}
