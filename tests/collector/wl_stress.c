/* Stress workload: 8 threads of allocation churn (malloc, calloc, realloc,
 * posix_memalign, free) for argv[1] seconds, while the main thread forks
 * children that churn on their own and exit, a thread dlopens and dlcloses
 * argv[2] (a library that allocates), and SIGALRM interrupts everyone every
 * millisecond. Every allocation goes through one of the wl_* functions, so
 * the tests can pick the program's own events out of the stream. Prints
 * "proc PID ALLOCS FREES" for itself and for each child (the child's line
 * comes from the child), counting only what the process itself allocated:
 * a child never frees its parent's blocks in its own count.
 * A destructor allocates after the collector's teardown. */
#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define THREADS 8
#define SLOTS   512

static atomic_ulong n_allocs, n_frees;
static atomic_int stop;
static const char *dl_path;
/* glibc's dlclose holds its exit-handler lock (__cxa_finalize), which a fork
 * child inherits as it was: a child forked during a dlclose deadlocks in
 * exit() with or without a profiler. The program serialises the two, as a
 * careful program must. */
static pthread_mutex_t dl_fork_lock = PTHREAD_MUTEX_INITIALIZER;

__attribute__((noinline)) static void *wl_malloc(size_t n)
{
    void *p = malloc(n);
    __asm__ volatile("" ::: "memory");
    return p;
}
__attribute__((noinline)) static void *wl_calloc(size_t n)
{
    void *p = calloc(1, n);
    __asm__ volatile("" ::: "memory");
    return p;
}
__attribute__((noinline)) static void *wl_realloc(void *q, size_t n)
{
    void *p = realloc(q, n);
    __asm__ volatile("" ::: "memory");
    return p;
}
__attribute__((noinline)) static void *wl_memalign(size_t n)
{
    void *p = NULL;
    int rc = posix_memalign(&p, 64, n);
    __asm__ volatile("" ::: "memory");
    return rc ? NULL : p;
}

static unsigned long rnd(unsigned long *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* One round of churn over a private slot array; counts into a/f. */
static void churn(void **slot, unsigned long *seed, unsigned long iters, unsigned long *a,
                  unsigned long *f)
{
    for (unsigned long i = 0; i < iters; i++) {
        unsigned long r = rnd(seed);
        unsigned k = (unsigned)(r % SLOTS);
        size_t n = 16 + (r >> 20) % 4000;
        if (slot[k]) {
            if ((r >> 10) % 4 == 0) {
                void *p = wl_realloc(slot[k], n);
                if (p) {
                    slot[k] = p;
                    (*a)++;
                    (*f)++;
                }
                continue;
            }
            free(slot[k]);
            slot[k] = NULL;
            (*f)++;
            continue;
        }
        switch ((r >> 12) % 3) {
        case 0:
            slot[k] = wl_malloc(n);
            break;
        case 1:
            slot[k] = wl_calloc(n);
            break;
        default:
            slot[k] = wl_memalign(n);
            break;
        }
        if (slot[k]) (*a)++;
    }
}

static void *worker(void *arg)
{
    unsigned long seed = 0x9E3779B97F4A7C15ul ^ (unsigned long)(size_t)arg * 7919;
    void *slot[SLOTS] = {0};
    unsigned long a = 0, f = 0;
    while (!atomic_load(&stop)) {
        churn(slot, &seed, 200, &a, &f);
        usleep(200);
    }
    /* Leave half of the blocks live at exit. */
    for (int k = 0; k < SLOTS; k += 2)
        if (slot[k]) {
            free(slot[k]);
            f++;
        }
    atomic_fetch_add(&n_allocs, a);
    atomic_fetch_add(&n_frees, f);
    return NULL;
}

static void *dl_loop(void *arg)
{
    (void)arg;
    while (!atomic_load(&stop)) {
        pthread_mutex_lock(&dl_fork_lock);
        void *h = dlopen(dl_path, RTLD_NOW | RTLD_LOCAL);
        if (h) {
            void (*fn)(int) = (void (*)(int))dlsym(h, "wl_dl_work");
            if (fn) fn(50);
            dlclose(h);
        }
        pthread_mutex_unlock(&dl_fork_lock);
        usleep(5000);
    }
    return NULL;
}

static void on_alarm(int sig)
{
    (void)sig;
}

static void child(void)
{
    unsigned long seed = (unsigned long)getpid() * 2654435761u, a = 0, f = 0;
    void *slot[SLOTS] = {0};
    for (int round = 0; round < 200; round++) {
        churn(slot, &seed, 100, &a, &f);
        usleep(500);
    }
    printf("proc %d %lu %lu\n", (int)getpid(), a, f);
    fflush(stdout);
    exit(0);
}

__attribute__((destructor)) static void late_destructor(void)
{
    /* After the collector's exit flush: must simply work. */
    free(malloc(123));
}

int main(int argc, char **argv)
{
    double seconds = argc > 1 ? atof(argv[1]) : 10;
    dl_path = argc > 2 ? argv[2] : NULL;
    setvbuf(stdout, NULL, _IOLBF, 0);
    struct sigaction sa = {0};
    sa.sa_handler = on_alarm;
    sa.sa_flags = SA_RESTART;
    sigaction(SIGALRM, &sa, NULL);
    struct itimerval it = {{0, 1000}, {0, 1000}};
    setitimer(ITIMER_REAL, &it, NULL);

    pthread_t th[THREADS], dl;
    for (long i = 0; i < THREADS; i++) pthread_create(&th[i], NULL, worker, (void *)(i + 1));
    if (dl_path) pthread_create(&dl, NULL, dl_loop, NULL);
    struct timespec t0, now;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int children = 0;
    for (;;) {
        usleep(500000);
        clock_gettime(CLOCK_MONOTONIC, &now);
        double el = (double)(now.tv_sec - t0.tv_sec) + (double)(now.tv_nsec - t0.tv_nsec) / 1e9;
        if (el >= seconds) break;
        pthread_mutex_lock(&dl_fork_lock);
        pid_t pid = fork();
        if (pid == 0) child();
        pthread_mutex_unlock(&dl_fork_lock);
        if (pid > 0) children++;
    }
    atomic_store(&stop, 1);
    for (int i = 0; i < THREADS; i++) pthread_join(th[i], NULL);
    if (dl_path) pthread_join(dl, NULL);
    int status, bad = 0;
    for (int i = 0; i < children; i++)
        if (wait(&status) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) bad++;
    it = (struct itimerval){{0, 0}, {0, 0}};
    setitimer(ITIMER_REAL, &it, NULL);
    printf("proc %d %lu %lu\n", (int)getpid(), atomic_load(&n_allocs), atomic_load(&n_frees));
    printf("children %d bad %d\n", children, bad);
    return bad ? 1 : 0;
}
