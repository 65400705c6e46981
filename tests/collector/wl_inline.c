/* wl_inline: allocations from functions the compiler inlined (always_inline,
 * two levels deep) into one that it did not, for the collector's inlined
 * frames. Prints "inline FN LINE" for each frame the stack must show, the
 * innermost first. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define AT(var, expr) (var = __LINE__, (expr))

static int l_grab, l_fill, l_holder;
static void *volatile sink[64];

static inline __attribute__((always_inline)) void *grab(size_t n)
{
    return AT(l_grab, malloc(n));
}

static inline __attribute__((always_inline)) void *fill(size_t n)
{
    void *p = AT(l_fill, grab(n));
    if (p) memset(p, 7, n);
    return p;
}

__attribute__((noinline)) void holder(int i);
__attribute__((noinline)) void holder(int i)
{
    sink[i] = AT(l_holder, fill(1000 + (size_t)i));
}

int main(void)
{
    for (int i = 0; i < 64; i++) holder(i);
    printf("inline grab %d\ninline fill %d\ninline holder %d\n", l_grab, l_fill, l_holder);
    return 0;
}
