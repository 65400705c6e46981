/* wl_versions: a program whose versions differ in one function, for the
 * group diff and check tests. `wl_versions A_KIB B_KIB C_KIB ROUNDS
 * ROUND_MS [D_KIB]`: over ROUNDS rounds (ROUND_MS apart) steady_a keeps
 * A_KIB KiB in 4 KiB blocks, grow_b B_KIB KiB in 4 KiB blocks, steady_c
 * C_KIB KiB in 256-byte blocks and grow_d D_KIB KiB (default 0) in 4 KiB
 * blocks through a helper, pool_get (the blocks' site), all live to the
 * end (a leak each round, so the leak detector sees them grow). Blocks much smaller than the
 * default sample interval (512 KiB): every estimate is noisy, as a real heap's is. Prints "truth A
 * B C" in bytes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void *keep[1 << 20];
static size_t nkeep;

/* Each function calls malloc itself: it is its blocks' site. */
#define HOLD(bytes, block)                                                                         \
    for (size_t done = 0; done < (bytes) && nkeep < sizeof keep / sizeof keep[0];                  \
         done += (block)) {                                                                        \
        char *p = malloc(block);                                                                   \
        if (!p) abort();                                                                           \
        memset(p, 1, block);                                                                       \
        keep[nkeep++] = p;                                                                         \
    }

static __attribute__((noinline)) void steady_a(size_t bytes)
{
    HOLD(bytes, 4096);
}

static __attribute__((noinline)) void grow_b(size_t bytes)
{
    HOLD(bytes, 4096);
}

static __attribute__((noinline)) void steady_c(size_t bytes)
{
    HOLD(bytes, 256);
}

static __attribute__((noinline)) void *pool_get(size_t block)
{
    char *p = malloc(block);
    if (!p) abort();
    memset(p, 1, block);
    return p;
}

static __attribute__((noinline)) void grow_d(size_t bytes)
{
    for (size_t done = 0; done < bytes && nkeep < sizeof keep / sizeof keep[0]; done += 4096)
        keep[nkeep++] = pool_get(4096);
    __asm__ volatile("" ::: "memory");
}

int main(int argc, char **argv)
{
    if (argc != 6 && argc != 7) {
        fprintf(stderr, "usage: wl_versions A_KIB B_KIB C_KIB ROUNDS ROUND_MS [D_KIB]\n");
        return 2;
    }
    size_t a = strtoull(argv[1], NULL, 10) << 10, b = strtoull(argv[2], NULL, 10) << 10;
    size_t c = strtoull(argv[3], NULL, 10) << 10;
    size_t d = argc > 6 ? strtoull(argv[6], NULL, 10) << 10 : 0;
    int rounds = atoi(argv[4]), ms = atoi(argv[5]);
    if (rounds < 1) rounds = 1;
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    for (int r = 0; r < rounds; r++) {
        steady_a(a / (size_t)rounds);
        grow_b(b / (size_t)rounds);
        steady_c(c / (size_t)rounds);
        grow_d(d / (size_t)rounds);
        nanosleep(&ts, NULL);
    }
    printf("truth %zu %zu %zu %zu\n", a, b, c, d);
    return 0;
}
