/* The browser test's workload: a program whose heap the test knows exactly.
 *
 * Built twice from this file: web_leaky (remember_request() keeps every
 * record) and web_fixed (-DHS_WORKLOAD_FIXED: it frees each record once the
 * next one exists). Everything else is the same, so that stacks match by
 * function name across the two versions. Sizes, in bytes:
 *
 *   load_table       8 blocks of 1 MiB, live from the start until after the
 *                    loop and a pause: the biggest site at the peak; and its
 *                    array of 8 pointers through xmalloc, an allocation
 *                    wrapper: named load_table by the user's site, xmalloc
 *                    by the leaf
 *   remember_request 40 blocks of 64 KiB, one per iteration; web_leaky never
 *                    frees them (2.5 MiB at the end), web_fixed keeps one
 *   scratch_buffer   256 KiB, allocated and freed in each iteration
 *   load_config      4 KiB through xmalloc, kept to the end: named
 *                    load_config by the user's site, xmalloc by the leaf
 *
 * Each function is noinline and the program is built without optimization,
 * so every site is its own frame. Times: the loop takes about 40 × 25 ms,
 * the table is held 400 ms more, then the program waits 300 ms and exits.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define NOINLINE __attribute__((noinline))

enum { TABLE_BLOCKS = 8, TABLE_BLOCK = 1 << 20, ITERATIONS = 40, RECORD = 64 << 10,
       SCRATCH = 256 << 10, CONFIG = 4 << 10 };

static void pause_ms(long ms)
{
    struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
    while (nanosleep(&ts, &ts) != 0) {}
}

/* Touch the memory so that neither the compiler nor the allocator elides it. */
static void *fill(void *p, size_t n, int c)
{
    if (!p) abort();
    memset(p, c, n);
    return p;
}

/* Not static: sites look through wrappers by name (GNU's xmalloc family). */
NOINLINE void *xmalloc(size_t n);
NOINLINE void *xmalloc(size_t n)
{
    void *p = malloc(n);
    if (!p) abort();
    return p;
}

static NOINLINE char **load_table(void)
{
    char **table = fill(xmalloc(TABLE_BLOCKS * sizeof *table), TABLE_BLOCKS * sizeof *table, 0);
    for (int i = 0; i < TABLE_BLOCKS; i++) table[i] = fill(malloc(TABLE_BLOCK), TABLE_BLOCK, i);
    return table;
}

static void *volatile config; /* kept to the end */

static NOINLINE void *load_config(void)
{
    return fill(xmalloc(CONFIG), CONFIG, 1);
}

static NOINLINE void free_table(char **table)
{
    for (int i = 0; i < TABLE_BLOCKS; i++) free(table[i]);
    free(table);
}

static NOINLINE void *remember_request(int i)
{
    return fill(malloc(RECORD), RECORD, i);
}

static NOINLINE int scratch_buffer(int i)
{
    volatile unsigned char *p = fill(malloc(SCRATCH), SCRATCH, i);
    int r = p[SCRATCH - 1];
    free((void *)p);
    return r;
}

static NOINLINE int serve(void *records[], int n)
{
    int sum = 0;
    for (int i = 0; i < n; i++) {
        records[i] = remember_request(i);
#ifdef HS_WORKLOAD_FIXED
        if (i > 0) {
            free(records[i - 1]);
            records[i - 1] = NULL;
        }
#endif
        sum += scratch_buffer(i);
        pause_ms(25);
    }
    return sum;
}

int main(void)
{
    static void *records[ITERATIONS];
    config = load_config();
    char **table = load_table();
    int sum = serve(records, ITERATIONS);
    pause_ms(400);
    free_table(table);
    pause_ms(300);
    return sum == -1; /* keeps `sum` alive; never true */
}
