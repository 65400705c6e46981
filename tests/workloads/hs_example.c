/* hs-example: a small program whose heap is known, for heapstore's demo and
 * its tests.
 *
 * Over about four seconds (40 rounds of 100 ms) it
 *   - keeps a configuration block of 1 MiB for its whole life (load_config),
 *   - handles "requests" whose buffers are freed within the round
 *     (handle_request: 4 + 16 KiB),
 *   - leaks 512 KiB per round into a cache that is never trimmed
 *     (leaky_cache_add): 40 x 512 KiB = 20 MiB live at the end,
 *   - once, in round 20, builds a 64 MiB index (64 blocks of 1 MiB), holds it
 *     for 300 ms and frees it (build_index): the peak of the live heap,
 *     1 + 21 x 0.5 + 64 = 75.5 MiB.
 * With --no-leak the cache keeps only its newest entry (the fixed version:
 * peak 65.5 MiB, 1.5 MiB at the end); --rounds N and --round-ms M change the
 * length. The sizes are large enough that the default sampling (one sample
 * per 512 KiB) still sees every part.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define LEAK_BYTES        (512 * 1024)
#define CONFIG_BYTES      (1024 * 1024)
#define INDEX_BLOCKS      64
#define INDEX_BLOCK_BYTES (1024 * 1024)

static void *cache[4096];
static int ncache;
static void *config;
/* Every block's address is written here, so that the compiler cannot prove
 * a block unused and drop its malloc and free (which it may do for a block
 * that is only written and freed, or kept in a variable nobody reads). */
static void *volatile sink;

static void pause_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts)) {
    }
}

/* Each function below is kept out of line so it is its own allocation site. */
__attribute__((noinline)) static void load_config(void)
{
    sink = config = malloc(CONFIG_BYTES);
    if (config) memset(config, 1, CONFIG_BYTES);
}

__attribute__((noinline)) static void leaky_cache_add(int leak)
{
    void *p = sink = malloc(LEAK_BYTES);
    if (!p) return;
    memset(p, 2, LEAK_BYTES);
    if (!leak && ncache > 0) free(cache[--ncache]);
    if (ncache < (int)(sizeof cache / sizeof cache[0])) cache[ncache++] = p;
}

__attribute__((noinline)) static void handle_request(void)
{
    char *head = malloc(4096), *body = malloc(16384);
    sink = head;
    sink = body;
    if (head && body) {
        memset(head, 3, 4096);
        memset(body, 4, 16384);
    }
    free(head);
    free(body);
}

__attribute__((noinline)) static void build_index(long hold_ms)
{
    void *blocks[INDEX_BLOCKS];
    for (int i = 0; i < INDEX_BLOCKS; i++) {
        sink = blocks[i] = malloc(INDEX_BLOCK_BYTES);
        if (blocks[i]) memset(blocks[i], 5, INDEX_BLOCK_BYTES);
    }
    pause_ms(hold_ms);
    for (int i = 0; i < INDEX_BLOCKS; i++) free(blocks[i]);
}

int main(int argc, char **argv)
{
    int leak = 1, rounds = 40;
    long round_ms = 100;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--no-leak"))
            leak = 0;
        else if (!strcmp(argv[i], "--rounds") && i + 1 < argc)
            rounds = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--round-ms") && i + 1 < argc)
            round_ms = atol(argv[++i]);
        else {
            fprintf(stderr, "usage: hs-example [--no-leak] [--rounds N] [--round-ms MS]\n");
            return 2;
        }
    }
    if (rounds < 1 || rounds > 4000 || round_ms < 1) return 2;
    load_config();
    for (int r = 0; r < rounds; r++) {
        handle_request();
        leaky_cache_add(leak);
        if (r == rounds / 2)
            build_index(3 * round_ms);
        else
            pause_ms(round_ms);
    }
    printf("hs-example: %d rounds; %s; peak about %.1f MiB while build_index held its blocks\n",
           rounds, leak ? "leaked 512 KiB per round in leaky_cache_add" : "no leak (--no-leak)",
           (CONFIG_BYTES + (leak ? rounds / 2 + 1 : 1) * (double)LEAK_BYTES +
            INDEX_BLOCKS * (double)INDEX_BLOCK_BYTES) /
               1048576.0);
    return 0; /* config and the cache stay allocated: live at the end */
}
