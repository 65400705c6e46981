/* The small-object churn workload: THREADS threads (argv[1], default 2) each
 * make PAIRS malloc/free pairs (argv[2], default 3500000) over a private
 * window of 1024 blocks and a pool of 16384 longer-lived ones, with WORK units of computation
 * between pairs (argv[3], default 65; one unit is a multiply-xorshift step, about 1.5 ns here, so
 * ~100 ns per pair). Sizes are small and mixed: 8 to 512 B, three quarters of them under 128 B, as
 * a program of strings, nodes and small vectors makes them. Each pair frees a block and allocates
 * its successor from a call stack 4 to 7 frames deep, then writes its first 16 bytes: seven times
 * in eight the oldest block of the window (temporaries), else a random one of the pool (data that
 * stays a while, interleaved in memory with the temporaries, as a program's long-lived objects
 * are). This is the steady state where every hook's fast path counts: at the default rate one
 * allocation in several thousand is sampled, and every free must tell its block is not one of them.
 * Prints the number of pairs and a checksum of the work (so it is not optimised away). */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WINDOW 1024
#define KEEP   16384

typedef struct ctx {
    uint64_t seed;
    unsigned long pairs;
    unsigned work;
    uint64_t sum;
    void *win[WINDOW];
    void *keep[KEEP];
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
    unsigned q = (unsigned)(r & 3);
    if (q != 3) return 8 + (size_t)((r >> 2) % 120); /* 8..127 */
    return 128 + (size_t)((r >> 2) % 385);           /* 128..512 */
}

__attribute__((noinline)) static void *leaf(size_t n)
{
    void *p = malloc(n);
    if (p) memset(p, 0x5a, n < 16 ? n : 16);
    return p;
}

typedef void *(*step_fn)(size_t, int);
static step_fn steps[4];

#define STEP(i)                                                                                    \
    __attribute__((noinline)) static void *s##i(size_t n, int depth)                               \
    {                                                                                              \
        void *p = depth <= 1 ? leaf(n) : steps[(i + 1) % 4](n, depth - 1);                         \
        __asm__ volatile("" ::: "memory");                                                         \
        return p;                                                                                  \
    }
STEP(0)
STEP(1)
STEP(2)
STEP(3)

static void *worker(void *arg)
{
    ctx *c = arg;
    uint64_t acc = c->seed;
    for (unsigned long i = 0; i < c->pairs; i++) {
        uint64_t r = rnd(&c->seed);
        void **slot = (r >> 56) % 8 == 0 ? &c->keep[(r >> 20) % KEEP] : &c->win[i % WINDOW];
        free(*slot);
        *slot = steps[(r >> 40) & 3](pick_size(r), 1 + (int)((r >> 50) & 3));
        for (unsigned w = 0; w < c->work; w++) {
            acc = acc * 0x9E3779B97F4A7C15ull + w;
            acc ^= acc >> 29;
        }
    }
    for (unsigned k = 0; k < WINDOW; k++) free(c->win[k]);
    for (unsigned k = 0; k < KEEP; k++) free(c->keep[k]);
    c->sum = acc;
    return NULL;
}

int main(int argc, char **argv)
{
    int threads = argc > 1 ? atoi(argv[1]) : 2;
    unsigned long pairs = argc > 2 ? strtoul(argv[2], NULL, 10) : 3500000;
    unsigned work = argc > 3 ? (unsigned)strtoul(argv[3], NULL, 10) : 65;
    if (threads < 1 || threads > 64) threads = 2;
    step_fn fs[4] = {s0, s1, s2, s3};
    memcpy(steps, fs, sizeof fs);
    pthread_t th[64];
    ctx *cs = calloc((size_t)threads, sizeof *cs);
    if (!cs) return 1;
    for (int i = 0; i < threads; i++) {
        cs[i].seed = 0x9E3779B97F4A7C15ull * (uint64_t)(i + 1);
        cs[i].pairs = pairs;
        cs[i].work = work;
        pthread_create(&th[i], NULL, worker, &cs[i]);
    }
    uint64_t sum = 0;
    for (int i = 0; i < threads; i++) {
        pthread_join(th[i], NULL);
        sum ^= cs[i].sum;
    }
    free(cs);
    printf("pairs %lu sum %llx\n", pairs * (unsigned long)threads, (unsigned long long)sum);
    return 0;
}
