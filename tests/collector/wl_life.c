/* Workload for the life-of-a-process tests. argv[1] picks the case:
 *
 *   exec N     allocate N blocks at life_before, try to exec a program that
 *              does not exist (execv fails: the run has ended all the same),
 *              then execl this program as "after N": it allocates N blocks
 *              at life_after and exits normally. Prints "after PID N" from
 *              the new image.
 *   usable N   N blocks of odd sizes: malloc_usable_size must cover each
 *              (all of it is written), the blocks are freed with free_sized
 *              when the C library or the collector offers it (else free).
 *              Prints "usable N FREED_SIZED" (FREED_SIZED: 1 if free_sized
 *              was found).
 *   signal S   two threads churn at life_churn for S seconds while the main
 *              thread sends them SIGALRM every millisecond, whose handler
 *              mallocs and frees at life_signal (the
 *              process must run on an allocator that tolerates that, see
 *              wl_alloc.c). Prints "signal CHURN_ALLOCS CHURN_FREES
 *              HANDLER_ALLOCS".
 *
 * Every case exits through a destructor that allocates after the
 * collector's exit flush. */
#include <dlfcn.h>
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static void *volatile sink;

__attribute__((noinline)) static void *life_before(size_t n)
{
    void *p = malloc(n);
    __asm__ volatile("" ::: "memory");
    return p;
}
__attribute__((noinline)) static void *life_after(size_t n)
{
    void *p = malloc(n);
    __asm__ volatile("" ::: "memory");
    return p;
}
__attribute__((noinline)) static void *life_usable(size_t n)
{
    void *p = malloc(n);
    __asm__ volatile("" ::: "memory");
    return p;
}
__attribute__((noinline)) static void *life_churn(size_t n)
{
    void *p = malloc(n);
    __asm__ volatile("" ::: "memory");
    return p;
}
__attribute__((noinline)) static void *life_signal(size_t n)
{
    void *p = malloc(n);
    __asm__ volatile("" ::: "memory");
    return p;
}

__attribute__((destructor)) static void late_destructor(void)
{
    free(malloc(321));
}

static int run_exec(char **argv, unsigned long n)
{
    for (unsigned long i = 0; i < n; i++) sink = life_before(100);
    char num[32];
    snprintf(num, sizeof num, "%lu", n);
    char *missing[] = {"/nonexistent/wl_life", NULL};
    fflush(stdout);
    if (execv(missing[0], missing) == 0 || errno != ENOENT) return 1;
    execl("/proc/self/exe", argv[0], "after", num, (char *)NULL);
    perror("execl");
    return 1;
}

static int run_after(unsigned long n)
{
    for (unsigned long i = 0; i < n; i++) sink = life_after(200);
    printf("after %d %lu\n", (int)getpid(), n);
    return 0;
}

static int run_usable(unsigned long n)
{
    void (*fs)(void *, size_t) = (void (*)(void *, size_t))dlsym(RTLD_DEFAULT, "free_sized");
    for (unsigned long i = 0; i < n; i++) {
        size_t sz = 1 + (i * 7919) % 5000;
        char *p = life_usable(sz);
        if (!p) return 1;
        size_t u = malloc_usable_size(p);
        if (u < sz) {
            printf("usable size %zu < %zu\n", u, sz);
            return 1;
        }
        memset(p, 1, u);
        if (fs)
            fs(p, sz);
        else
            free(p);
    }
    if (malloc_usable_size(NULL) != 0) return 1;
    printf("usable %lu %d\n", n, fs != NULL);
    return 0;
}

static atomic_int stop;
static atomic_ulong churn_allocs, churn_frees, handler_allocs;

static void on_alarm(int sig)
{
    (void)sig;
    void *p = life_signal(48);
    if (p) {
        atomic_fetch_add(&handler_allocs, 1);
        free(p);
    }
}

static void *churner(void *arg)
{
    unsigned long seed = (unsigned long)(size_t)arg * 2654435761u + 1, a = 0, f = 0;
    void *slot[256] = {0};
    while (!atomic_load(&stop)) {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        unsigned k = (unsigned)(seed % 256);
        if (slot[k]) {
            free(slot[k]);
            slot[k] = NULL;
            f++;
        } else if ((slot[k] = life_churn(16 + (seed >> 20) % 2000)) != NULL) {
            a++;
        }
    }
    for (int k = 0; k < 256; k++)
        if (slot[k]) {
            free(slot[k]);
            f++;
        }
    atomic_fetch_add(&churn_allocs, a);
    atomic_fetch_add(&churn_frees, f);
    return NULL;
}

static int run_signal(double seconds)
{
    struct sigaction sa = {0};
    sa.sa_handler = on_alarm;
    sa.sa_flags = SA_RESTART;
    sigaction(SIGALRM, &sa, NULL);
    pthread_t th[2];
    for (long k = 0; k < 2; k++) pthread_create(&th[k], NULL, churner, (void *)(k + 1));
    /* Aimed at the churning threads, which spend most of their time in
     * the allocator (and, at rate 1, in the collector). */
    struct timespec t0, now;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    unsigned long i = 0;
    do {
        pthread_kill(th[i++ % 2], SIGALRM);
        nanosleep(&(struct timespec){0, 1000000}, NULL);
        clock_gettime(CLOCK_MONOTONIC, &now);
    } while ((double)(now.tv_sec - t0.tv_sec) + (double)(now.tv_nsec - t0.tv_nsec) / 1e9 < seconds);
    atomic_store(&stop, 1);
    for (int k = 0; k < 2; k++) pthread_join(th[k], NULL);
    printf("signal %lu %lu %lu\n", atomic_load(&churn_allocs), atomic_load(&churn_frees),
           atomic_load(&handler_allocs));
    return 0;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    const char *mode = argc > 1 ? argv[1] : "";
    unsigned long n = argc > 2 ? strtoul(argv[2], NULL, 10) : 1000;
    if (!strcmp(mode, "exec")) return run_exec(argv, n);
    if (!strcmp(mode, "after")) return run_after(n);
    if (!strcmp(mode, "usable")) return run_usable(n);
    if (!strcmp(mode, "signal")) return run_signal(argc > 2 ? atof(argv[2]) : 2);
    fprintf(stderr, "usage: wl_life exec|usable|signal ARG\n");
    return 2;
}
