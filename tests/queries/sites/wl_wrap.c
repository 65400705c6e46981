/* wl_wrap: allocation wrappers and a function gcc splits (-O2).
 *
 * Per round (ROUNDS of them, ROUND_MS apart):
 *   leak_via_xmalloc: 10 blocks of 3000 B through xmalloc (a default wrapper);
 *   leak_via_pool:    10 blocks of 5000 B through pool_alloc, a wrapper only
 *                     the user knows (--wrappers pool_alloc);
 *   keep_block:       one block of 700 B, and in every fourth round one of
 *                     1400 B from its unlikely branch, which gcc moves to
 *                     keep_block.cold.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

void *xmalloc(size_t n);
void *pool_alloc(size_t n);
void leak_via_xmalloc(void);
void leak_via_pool(void);
void keep_block(size_t n, int rare);

static void *volatile sink[100000];
static int nsink;

__attribute__((noinline)) void *xmalloc(size_t n)
{
    void *p = malloc(n);
    if (!p) abort();
    memset(p, 1, n);
    return p;
}

__attribute__((noinline)) void *pool_alloc(size_t n)
{
    void *p = malloc(n);
    if (!p) abort();
    memset(p, 2, n);
    return p;
}

__attribute__((noinline)) void leak_via_xmalloc(void)
{
    for (int i = 0; i < 10; i++) sink[nsink++] = xmalloc(3000);
}

__attribute__((noinline)) void leak_via_pool(void)
{
    for (int i = 0; i < 10; i++) sink[nsink++] = pool_alloc(5000);
}

__attribute__((cold, noinline)) static void complain(const char *what)
{
    fprintf(stderr, "wl_wrap: %s\n", what);
}

__attribute__((noinline)) void keep_block(size_t n, int rare)
{
    if (rare) {
        complain("the rare branch");
        void *p = malloc(n * 2);
        memset(p, 3, n * 2);
        sink[nsink++] = p;
        return;
    }
    void *p = malloc(n);
    memset(p, 4, n);
    sink[nsink++] = p;
}

int main(int argc, char **argv)
{
    int rounds = argc > 1 ? atoi(argv[1]) : 20, ms = argc > 2 ? atoi(argv[2]) : 50;
    for (int r = 0; r < rounds; r++) {
        leak_via_xmalloc();
        leak_via_pool();
        keep_block(700, r % 4 == 3);
        struct timespec ts = {0, ms * 1000000L};
        nanosleep(&ts, NULL);
    }
    printf("wl_wrap: %d rounds\n", rounds);
    return 0;
}
