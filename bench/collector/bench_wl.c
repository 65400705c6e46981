/* The collector benchmark's workload: THREADS threads (argv[1], default 4)
 * each run OPS allocation operations (argv[2], default 400000) over a private
 * array of 4096 slots. An operation frees or reallocates the slot's block if
 * it has one, else allocates a new one with malloc (60%), calloc (20%) or
 * posix_memalign (20%), from a call stack 5 to 15 frames deep (a chain of
 * distinct functions, so stacks differ). Sizes run from 16 B to 1 MiB: 90%
 * up to 1 KiB, 9% up to 64 KiB, 1% up to 1 MiB, log-uniform within each
 * band. Each new block is written: its first 64 bytes and one byte per
 * 4 KiB page, as a program that uses its memory would. Prints the number of
 * allocation calls it made. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SLOTS 4096

typedef struct ctx {
    uint64_t seed;
    void *slot[SLOTS];
    unsigned long calls;
} ctx;

static uint64_t rnd(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static size_t pick_size(uint64_t r)
{
    unsigned band = (unsigned)(r % 100);
    unsigned lo, hi; /* log2 bounds */
    if (band < 90)
        lo = 4, hi = 10;
    else if (band < 99)
        lo = 10, hi = 16;
    else
        lo = 16, hi = 20;
    unsigned e = lo + (unsigned)((r >> 8) % (hi - lo));
    size_t base = (size_t)1 << e;
    return base + (size_t)((r >> 16) % base);
}

static void touch(void *p, size_t n)
{
    if (!p) return;
    memset(p, 0x5a, n < 64 ? n : 64);
    for (size_t i = 4096; i < n; i += 4096) ((volatile char *)p)[i] = 1;
}

/* The operation at the bottom of every chain. */
__attribute__((noinline)) static void op(ctx *c, uint64_t r)
{
    unsigned k = (unsigned)(r % SLOTS);
    size_t n = pick_size(r >> 12);
    void *p = c->slot[k];
    if (p) {
        if ((r >> 40) % 4 == 0) {
            void *q = realloc(p, n);
            if (q) {
                c->slot[k] = q;
                touch(q, n);
            }
            c->calls++;
        } else {
            free(p);
            c->slot[k] = NULL;
        }
        return;
    }
    unsigned how = (unsigned)((r >> 44) % 10);
    if (how < 6) {
        p = malloc(n);
    } else if (how < 8) {
        p = calloc(1, n);
    } else if (posix_memalign(&p, 64, n) != 0) {
        p = NULL;
    }
    c->calls++;
    touch(p, n);
    c->slot[k] = p;
}

/* f0 .. f14: each calls the next until depth frames deep, then op(). */
typedef void (*link_fn)(ctx *, uint64_t, int);
static link_fn chain[16];

#define LINK(i)                                                                                    \
    __attribute__((noinline)) static void f##i(ctx *c, uint64_t r, int depth)                     \
    {                                                                                              \
        if (depth <= 1)                                                                            \
            op(c, r);                                                                              \
        else                                                                                       \
            chain[(i + 1) % 15](c, r, depth - 1);                                                  \
        __asm__ volatile("" ::: "memory");                                                         \
    }
LINK(0)
LINK(1)
LINK(2)
LINK(3)
LINK(4)
LINK(5)
LINK(6)
LINK(7)
LINK(8)
LINK(9)
LINK(10)
LINK(11)
LINK(12)
LINK(13)
LINK(14)

static unsigned long ops_per_thread;

static void *worker(void *arg)
{
    ctx *c = arg;
    for (unsigned long i = 0; i < ops_per_thread; i++) {
        uint64_t r = rnd(&c->seed);
        int depth = 5 + (int)((r >> 56) % 11); /* 5..15 */
        chain[(r >> 50) % 15](c, r, depth);
    }
    for (unsigned k = 0; k < SLOTS; k++) free(c->slot[k]);
    return NULL;
}

int main(int argc, char **argv)
{
    int threads = argc > 1 ? atoi(argv[1]) : 4;
    ops_per_thread = argc > 2 ? strtoul(argv[2], NULL, 10) : 400000;
    if (threads < 1 || threads > 64) threads = 4;
    link_fn fs[15] = {f0, f1, f2, f3, f4, f5, f6, f7, f8, f9, f10, f11, f12, f13, f14};
    memcpy(chain, fs, sizeof fs);
    pthread_t th[64];
    ctx *cs = calloc((size_t)threads, sizeof *cs);
    if (!cs) return 1;
    for (int i = 0; i < threads; i++) {
        cs[i].seed = 0x9E3779B97F4A7C15ull * (uint64_t)(i + 1);
        pthread_create(&th[i], NULL, worker, &cs[i]);
    }
    unsigned long calls = 0;
    for (int i = 0; i < threads; i++) {
        pthread_join(th[i], NULL);
        calls += cs[i].calls;
    }
    free(cs);
    printf("calls %lu\n", calls);
    return 0;
}
