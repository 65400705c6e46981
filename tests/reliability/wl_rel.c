/* wl_rel: the programs the reliability tests run under the real collector.
 *
 *   wl_rel churn SECONDS RATE   allocate (and free) about RATE blocks a second
 *                               for SECONDS; prints "allocs N frees M"
 *   wl_rel fork N               fork N children at once, each allocating 100
 *                               blocks (freeing 50) and exiting; the parent
 *                               waits; prints "children N ok"
 *   wl_rel sigexit exit|_exit MS   allocate and free without end until
 *                               SIGALRM (after MS ms) whose handler calls
 *                               exit(3) or _exit(3): often inside malloc or free
 *
 * Every block comes from a site of its own (churn_site, child_site), so a
 * test can find them in the stored stacks. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define RING 64

static void *volatile sink;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

__attribute__((noinline)) static void *churn_site(size_t n)
{
    void *p = malloc(n);
    if (p) memset(p, 1, n < 64 ? n : 64);
    return sink = p;
}

__attribute__((noinline)) static void *child_site(size_t n)
{
    void *p = malloc(n);
    if (p) memset(p, 2, n < 64 ? n : 64);
    return sink = p;
}

static int churn(double seconds, long rate)
{
    void *ring[RING] = {0};
    long allocs = 0, frees = 0;
    double start = now_s();
    for (long i = 0;; i++) {
        if ((i & 255) == 0) {
            double t = now_s() - start;
            if (t >= seconds) break;
            /* ahead of the rate: sleep the difference */
            double ahead = (double)i / (double)rate - t;
            if (ahead > 0) {
                struct timespec ts = {(time_t)ahead, (long)((ahead - (double)(time_t)ahead) * 1e9)};
                nanosleep(&ts, NULL);
            }
        }
        int k = (int)(i % RING);
        if (ring[k]) {
            free(ring[k]);
            frees++;
        }
        ring[k] = churn_site(256 + (size_t)(i % 7) * 100);
        allocs++;
    }
    for (int k = 0; k < RING; k++)
        if (ring[k]) {
            free(ring[k]);
            frees++;
        }
    printf("allocs %ld frees %ld\n", allocs, frees);
    return 0;
}

static int forks(int n)
{
    void *keep = churn_site(4096);
    pid_t *pids = calloc((size_t)n, sizeof *pids);
    if (!pids) return 1;
    for (int i = 0; i < n; i++) {
        pids[i] = fork();
        if (pids[i] < 0) return 1;
        if (pids[i] == 0) {
            void *blocks[100];
            for (int k = 0; k < 100; k++) blocks[k] = child_site(1000 + (size_t)k);
            for (int k = 0; k < 50; k++) free(blocks[k]);
            exit(0);
        }
    }
    int ok = 0;
    for (int i = 0; i < n; i++) {
        int st;
        if (waitpid(pids[i], &st, 0) == pids[i] && WIFEXITED(st) && WEXITSTATUS(st) == 0) ok++;
    }
    free(pids);
    free(keep);
    printf("children %d %s\n", ok, ok == n ? "ok" : "failed");
    return ok == n ? 0 : 1;
}

static volatile sig_atomic_t use_exit;

static void on_alarm(int sig)
{
    (void)sig;
    if (use_exit) exit(3); /* runs atexit handlers and destructors from inside the handler */
    _exit(3);
}

__attribute__((noreturn)) static void sigexit(const char *how, long ms)
{
    use_exit = !strcmp(how, "exit");
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alarm;
    sigaction(SIGALRM, &sa, NULL);
    struct itimerval it = {{0, 0}, {ms / 1000, (ms % 1000) * 1000}};
    setitimer(ITIMER_REAL, &it, NULL);
    for (long i = 0;; i++) {
        void *p = churn_site(100 + (size_t)(i & 1023));
        free(p);
    }
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc == 4 && !strcmp(argv[1], "churn")) return churn(atof(argv[2]), atol(argv[3]));
    if (argc == 3 && !strcmp(argv[1], "fork")) return forks(atoi(argv[2]));
    if (argc == 4 && !strcmp(argv[1], "sigexit")) sigexit(argv[2], atol(argv[3]));
    fprintf(stderr, "usage: wl_rel churn SECONDS RATE | fork N | sigexit exit|_exit MS\n");
    return 2;
}
