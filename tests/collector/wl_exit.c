/* Workload for the _exit tests: a program whose children leave through
 * _exit and _Exit, as shells, Python's os._exit and multiprocessing's
 * workers do.
 *
 *   wl_exit N K [WINDOW [calm]]
 *
 * The parent starts a thread that allocates 2,000 blocks of 48 bytes at
 * uexit_parent_thread while the parent forks N children, at most WINDOW
 * (default 25) alive at once, so that some children are forked from a
 * threaded program mid-allocation. With "calm" the thread allocates its
 * blocks before the first fork and then waits, still alive, until the
 * children are done: an allocator without fork handlers (the ASan runtime
 * of GCC 12) can leave a child with a lock that thread held, and the child's
 * first call to it waits forever. Child i allocates K blocks of 777 bytes
 * at uexit_child_block, keeps them, and leaves by case i % 4:
 *   0  _exit(0) from main
 *   1  _Exit(0) from main
 *   2  _exit(0) from a SIGUSR1 handler (raise)
 *   3  _exit(0) from a second thread while main waits in pthread_join
 * Then the parent vforks 20 times; each vfork child calls _exit(0) at once
 * (it must leave the parent's run alone). Last, the parent allocates 100
 * blocks of 555 bytes at uexit_parent_block and returns from main.
 *
 * Prints "parent PID", then "children N K FAILED" (FAILED: children that did
 * not exit with status 0).
 *
 *   wl_exit sigs
 *
 * Allocates for a while (the collector's thread starts and sends meanwhile),
 * then prints "sigs" and, for each signal, its disposition (D default, I
 * ignored, H handled, - not settable) and whether the main thread blocks it;
 * the signals an ASan runtime handles itself are left out. */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define CHILD_SIZE  777
#define PARENT_SIZE 555
#define THREAD_SIZE 48
#define THREAD_N    2000
#define VFORKS      20

static void *volatile sink;

__attribute__((noinline)) static void *uexit_child_block(size_t n)
{
    void *p = malloc(n);
    __asm__ volatile("" ::: "memory");
    return p;
}

__attribute__((noinline)) static void *uexit_parent_block(size_t n)
{
    void *p = malloc(n);
    __asm__ volatile("" ::: "memory");
    return p;
}

__attribute__((noinline)) static void *uexit_parent_thread(size_t n)
{
    void *p = malloc(n);
    __asm__ volatile("" ::: "memory");
    return p;
}

static void on_usr1(int sig)
{
    (void)sig;
    _exit(0);
}

static void *leaver(void *arg)
{
    (void)arg;
    _exit(0);
}

static int calm, ready_pipe[2], done_pipe[2];

static void *parent_thread(void *arg)
{
    (void)arg;
    for (int i = 0; i < THREAD_N; i++) {
        sink = uexit_parent_thread(THREAD_SIZE);
        if (i % 100 == 0 && !calm) usleep(500);
    }
    if (calm) {
        char c;
        if (write(ready_pipe[1], "", 1) != 1 || read(done_pipe[0], &c, 1) != 1) abort();
    }
    return NULL;
}

static void child(int i, unsigned long k)
{
    for (unsigned long j = 0; j < k; j++) sink = uexit_child_block(CHILD_SIZE);
    switch (i % 4) {
    case 0:
        _exit(0);
    case 1:
        _Exit(0);
    case 2: {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_usr1;
        sigaction(SIGUSR1, &sa, NULL);
        raise(SIGUSR1);
        _exit(3); /* not reached */
    }
    default: {
        pthread_t th;
        if (pthread_create(&th, NULL, leaver, NULL) != 0) _exit(4);
        pthread_join(th, NULL);
        _exit(5); /* not reached */
    }
    }
}

static int run_sigs(void)
{
    for (int i = 0; i < 20000; i++) {
        free((void *)sink);
        sink = uexit_parent_block(PARENT_SIZE);
        if (i % 1000 == 0) usleep(10000);
    }
    sigset_t blocked;
    pthread_sigmask(SIG_BLOCK, NULL, &blocked);
    printf("sigs");
    for (int sig = 1; sig < NSIG; sig++) {
        if (sig == SIGSEGV || sig == SIGBUS || sig == SIGFPE || sig == SIGILL || sig == SIGABRT)
            continue;
        struct sigaction sa;
        char d = '-';
        if (sigaction(sig, NULL, &sa) == 0)
            d = sa.sa_handler == SIG_DFL ? 'D' : sa.sa_handler == SIG_IGN ? 'I' : 'H';
        printf(" %d%c%s", sig, d, sigismember(&blocked, sig) == 1 ? "b" : "");
    }
    printf("\n");
    return 0;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc > 1 && !strcmp(argv[1], "sigs")) return run_sigs();
    int n = argc > 1 ? atoi(argv[1]) : 200;
    unsigned long k = argc > 2 ? strtoul(argv[2], NULL, 10) : 1000;
    int window = argc > 3 ? atoi(argv[3]) : 25;
    calm = argc > 4 && !strcmp(argv[4], "calm");
    printf("parent %d\n", (int)getpid());
    if (calm && (pipe(ready_pipe) != 0 || pipe(done_pipe) != 0)) return 1;
    pthread_t th;
    if (pthread_create(&th, NULL, parent_thread, NULL) != 0) return 1;
    char c;
    if (calm && read(ready_pipe[0], &c, 1) != 1) return 1; /* its blocks are allocated */
    int alive = 0, failed = 0, st;
    for (int i = 0; i < n; i++) {
        if (alive >= window) {
            if (wait(&st) > 0 && !(WIFEXITED(st) && WEXITSTATUS(st) == 0)) failed++;
            alive--;
        }
        pid_t pid = fork();
        if (pid == 0) child(i, k);
        if (pid < 0) return 1;
        alive++;
    }
    for (; alive > 0; alive--)
        if (wait(&st) > 0 && !(WIFEXITED(st) && WEXITSTATUS(st) == 0)) failed++;
    if (calm && write(done_pipe[1], "", 1) != 1) return 1;
    pthread_join(th, NULL);
    for (int i = 0; i < VFORKS; i++) {
        pid_t pid = vfork();
        if (pid == 0) _exit(0);
        if (pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
            failed++;
    }
    for (int i = 0; i < 100; i++) sink = uexit_parent_block(PARENT_SIZE);
    printf("children %d %lu %d\n", n, k, failed);
    return 0;
}
