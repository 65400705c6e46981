/* wl_leaks: shapes of growth with known answers, for
 * tests/queries/test_leak_shapes.c (built -O2, no sibling calls, so that
 * every caller keeps its frame).
 *
 * Arguments: ROUNDS ROUND_MS SCALE. Every round:
 *   leak_a keeps a block of 4000 * SCALE bytes;
 *   leak_b keeps one of 6000 * SCALE bytes, called through via_1 .. via_5,
 *          each for a fifth of the rounds in turn: five stacks, one site;
 *   sawtooth allocates 20000 * SCALE bytes and frees everything it holds
 *          every fourth round (ROUNDS a multiple of 4: it ends empty).
 * keep_once allocates a block of 8 MiB a third of the way through and one
 * more three rounds later, and keeps them: a big step up, in two. After
 * the loop the program pauses as long as the loop took, allocating nothing
 * (growth over half the run, then none). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_ROUNDS 1000

void leak_a(size_t n);
void leak_b(size_t n);
void via_1(size_t n);
void via_2(size_t n);
void via_3(size_t n);
void via_4(size_t n);
void via_5(size_t n);
void keep_once(void);
void sawtooth(int i, size_t n);

static void *volatile kept[2 * MAX_ROUNDS + 1];
static void *volatile saw[4];
static int nkept, nsaw;

static void *must(void *p)
{
    if (!p) abort();
    return p;
}

__attribute__((noinline)) void leak_a(size_t n)
{
    kept[nkept++] = must(malloc(n));
}

__attribute__((noinline)) void leak_b(size_t n)
{
    kept[nkept++] = must(malloc(n));
}

__attribute__((noinline)) void via_1(size_t n)
{
    leak_b(n);
}
__attribute__((noinline)) void via_2(size_t n)
{
    leak_b(n);
}
__attribute__((noinline)) void via_3(size_t n)
{
    leak_b(n);
}
__attribute__((noinline)) void via_4(size_t n)
{
    leak_b(n);
}
__attribute__((noinline)) void via_5(size_t n)
{
    leak_b(n);
}

__attribute__((noinline)) void keep_once(void)
{
    kept[nkept++] = must(malloc(8u << 20));
}

__attribute__((noinline)) void sawtooth(int i, size_t n)
{
    saw[nsaw++] = must(malloc(n));
    if (i % 4 != 3) return;
    for (int k = 0; k < nsaw; k++) free(saw[k]);
    nsaw = 0;
}

int main(int argc, char **argv)
{
    if (argc != 4) return 2;
    int rounds = atoi(argv[1]), ms = atoi(argv[2]);
    size_t scale = (size_t)atoi(argv[3]);
    if (rounds < 1 || rounds > MAX_ROUNDS || ms < 0) return 2;
    void (*const callers[])(size_t) = {via_1, via_2, via_3, via_4, via_5};
    struct timespec pause = {ms / 1000, (long)(ms % 1000) * 1000000L};
    for (int i = 0; i < rounds; i++) {
        if (i == rounds / 3 || i == rounds / 3 + 3) keep_once();
        leak_a(4000 * scale);
        callers[i * 5 / rounds](6000 * scale);
        sawtooth(i, 20000 * scale);
        nanosleep(&pause, NULL);
    }
    for (int i = 0; i < rounds; i++) nanosleep(&pause, NULL);
    printf("truth %zu %zu\n", (size_t)rounds * 4000 * scale, (size_t)rounds * 6000 * scale);
    return 0;
}
