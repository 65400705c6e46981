/* wl_trend: a program whose heap is set by its arguments, for the tests of
 * questions across many runs (trend, gc): one "version" of a program is one
 * choice of them.
 *
 *   wl_trend BASE_KIB EXTRA_KIB MS
 *
 * In STEPS steps over about MS milliseconds it
 *   - keeps BASE_KIB KiB from STACKS distinct stacks (steady_alloc under a
 *     binary tree of calls, LEVELS deep: each path is its own stack), all
 *     allocated before the first step and live to the end;
 *   - adds EXTRA_KIB / STEPS KiB in regressed_cache at every step, never
 *     freed: the regression planted in one version (0 elsewhere);
 *   - at step STEPS / 2 holds a TRANSIENT_MIB MiB buffer for one step
 *     (transient_buffer), the peak of the live heap.
 * Peak = BASE + EXTRA * (STEPS / 2 + 1) / STEPS + TRANSIENT (KiB-exact with
 * every allocation sampled); end = BASE + EXTRA. Built -O0 so that every
 * call stays where it is written.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define STEPS         40
#define LEVELS        11 /* 2^11 = 2048 stacks */
#define STACKS        (1 << LEVELS)
#define TRANSIENT_MIB 8

static void *volatile sink;
static void *keep[STACKS + STEPS];
static int nkeep;

static void pause_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts)) {
    }
}

__attribute__((noinline)) static void steady_alloc(size_t size)
{
    void *p = malloc(size);
    if (p) memset(p, 1, size);
    sink = keep[nkeep++] = p;
}

/* One stack per path: the two calls are on lines of their own. */
__attribute__((noinline)) static void descend(int level, unsigned path, size_t size)
{
    if (level == 0) {
        steady_alloc(size);
        return;
    }
    if (path & 1)
        descend(level - 1, path >> 1, size);
    else
        descend(level - 1, path >> 1, size);
}

__attribute__((noinline)) static void regressed_cache(size_t size)
{
    void *p = malloc(size);
    if (p) memset(p, 2, size);
    sink = keep[nkeep++] = p;
}

__attribute__((noinline)) static void transient_buffer(long hold_ms)
{
    size_t n = (size_t)TRANSIENT_MIB << 20;
    char *p = malloc(n);
    if (p) memset(p, 3, n);
    sink = p;
    pause_ms(hold_ms);
    free(p);
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: wl_trend BASE_KIB EXTRA_KIB MS\n");
        return 2;
    }
    long base = atol(argv[1]), extra = atol(argv[2]), ms = atol(argv[3]);
    if (base < 0 || extra < 0 || ms < STEPS) return 2;
    for (unsigned s = 0; base && s < STACKS; s++) descend(LEVELS, s, (size_t)base * 1024 / STACKS);
    for (int i = 0; i < STEPS; i++) {
        if (extra) regressed_cache((size_t)extra * 1024 / STEPS);
        if (i == STEPS / 2)
            transient_buffer(ms / STEPS);
        else
            pause_ms(ms / STEPS);
    }
    printf("wl_trend: base %ld KiB, extra %ld KiB\n", base, extra);
    return 0; /* what keep holds stays live at the end */
}
