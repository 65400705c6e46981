/* wl_exact: a program whose heap's true peak, its moment and its counts are
 * known, for test_exact.c.
 *
 *   wl_exact MIB THREADS GROW_MS CHURN
 *
 * THREADS threads (1: the main thread alone) each grow their share of MIB
 * MiB in blocks of mixed sizes (24 B to 200 KB), spread over GROW_MS ms,
 * with CHURN malloc/free pairs of small blocks in between; they meet at a
 * barrier, which is the peak; then everything is freed at once and the
 * program lingers 300 ms with a small heap before it exits. It prints, on
 * stdout, one line of facts: the true live bytes at the peak (the
 * allocator's usable sizes of every block it holds then, as
 * malloc_usable_size says), the wall-clock time of the peak (ns,
 * CLOCK_REALTIME, to compare with runs.start_unix_ns), and the number of
 * allocation and free calls it made.
 */
#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static const size_t sizes[] = {24, 100, 700, 5000, 70000, 200000, 40, 300};
#define NSIZES (sizeof sizes / sizeof *sizes)

static size_t share, churn;
static long grow_ms;
static pthread_barrier_t peak;
static uint64_t peak_ns;

typedef struct worker {
    pthread_t th;
    void **blocks;
    size_t n, cap;
    uint64_t live; /* usable bytes of blocks, plus the array's */
    uint64_t allocs, frees;
} worker;

static uint64_t now_ns(clockid_t c)
{
    struct timespec ts;
    clock_gettime(c, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void hold(worker *w, void *p)
{
    if (w->n == w->cap) {
        if (w->blocks) {
            w->live -= malloc_usable_size(w->blocks);
            w->frees++; /* realloc: a free and an allocation */
        }
        w->cap = w->cap ? 2 * w->cap : 1024;
        w->blocks = realloc(w->blocks, w->cap * sizeof *w->blocks);
        if (!w->blocks) abort();
        w->allocs++;
        w->live += malloc_usable_size(w->blocks);
    }
    w->blocks[w->n++] = p;
    w->live += malloc_usable_size(p);
}

static void *grow(void *arg)
{
    worker *w = arg;
    uint64_t start = now_ns(CLOCK_MONOTONIC), want = share;
    size_t k = 0, steps = 0;
    while (w->live < want) {
        void *p = malloc(sizes[k++ % NSIZES]);
        if (!p) abort();
        w->allocs++;
        hold(w, p);
        for (size_t c = 0; c < churn; c++) {
            volatile char *q = malloc(16 + c % 200);
            q[0] = 1;
            free((void *)q);
            w->allocs++;
            w->frees++;
        }
        /* spread the growth over grow_ms: sleep while ahead of schedule */
        if (++steps % 2 == 0) {
            uint64_t due = start + (uint64_t)grow_ms * 1000000u * w->live / want;
            uint64_t t = now_ns(CLOCK_MONOTONIC);
            if (due > t) usleep((useconds_t)((due - t) / 1000));
        }
    }
    if (pthread_barrier_wait(&peak) == PTHREAD_BARRIER_SERIAL_THREAD)
        peak_ns = now_ns(CLOCK_REALTIME);
    pthread_barrier_wait(&peak); /* everyone holds its blocks until the time is taken */
    return NULL;
}

static void release(worker *w)
{
    for (size_t i = 0; i < w->n; i++) free(w->blocks[i]);
    free(w->blocks);
    w->frees += w->n + 1;
}

int main(int argc, char **argv)
{
    if (argc != 5) {
        fprintf(stderr, "usage: wl_exact MIB THREADS GROW_MS CHURN\n");
        return 2;
    }
    size_t mib = strtoul(argv[1], NULL, 10), nt = strtoul(argv[2], NULL, 10);
    grow_ms = strtol(argv[3], NULL, 10);
    churn = strtoul(argv[4], NULL, 10);
    if (nt < 1 || nt > 64) return 2;
    share = (mib << 20) / nt;
    static worker ws[64];
    pthread_barrier_init(&peak, NULL, (unsigned)nt);
    for (size_t i = 1; i < nt; i++)
        if (pthread_create(&ws[i].th, NULL, grow, &ws[i])) return 1;
    grow(&ws[0]);
    uint64_t live = 0, allocs = 0, frees = 0;
    for (size_t i = 1; i < nt; i++) pthread_join(ws[i].th, NULL);
    for (size_t i = 0; i < nt; i++) live += ws[i].live;
    for (size_t i = 0; i < nt; i++) release(&ws[i]);
    /* a small heap for a while after the peak */
    void *small[64];
    for (int i = 0; i < 64; i++) small[i] = malloc(100);
    usleep(300000);
    for (int i = 0; i < 64; i++) free(small[i]);
    for (size_t i = 0; i < nt; i++) {
        allocs += ws[i].allocs;
        frees += ws[i].frees;
    }
    allocs += 64;
    frees += 64;
    printf("peak_bytes=%llu peak_unix_ns=%llu allocs=%llu frees=%llu pid=%d\n",
           (unsigned long long)live, (unsigned long long)peak_ns, (unsigned long long)allocs,
           (unsigned long long)frees, (int)getpid());
    return 0;
}
