/* Workload whose stacks our own unwinder cannot walk: allocations inside a
 * signal handler (the signal frame's unwind rule is a DWARF expression,
 * left to libunwind). argv[1]: signals to raise (default 20). Prints
 * "sigalloc N UNW_BEFORE UNW_AFTER": the handler's allocations, and whether
 * libunwind was mapped before the first signal and after the last (the
 * collector loads it only when a stack needs it). */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static volatile sig_atomic_t handled;

__attribute__((noinline)) static void on_signal(int sig)
{
    (void)sig;
    char *volatile p = malloc(100);
    if (p) p[0] = 1;
    free(p);
    handled++;
}

/* 1 if a mapping of libunwind is in /proc/self/maps. */
static int unwinder_mapped(void)
{
    FILE *f = fopen("/proc/self/maps", "r");
    if (!f) return -1;
    char line[4096];
    int found = 0;
    while (fgets(line, sizeof line, f))
        if (strstr(line, "/libunwind.so")) found = 1;
    fclose(f);
    return found;
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 20;
    char *volatile q = malloc(1000); /* an ordinary stack first */
    free(q);
    int before = unwinder_mapped();
    signal(SIGUSR1, on_signal);
    for (int i = 0; i < n; i++) raise(SIGUSR1);
    printf("sigalloc %d %d %d\n", (int)handled, before, unwinder_mapped());
    return 0;
}
