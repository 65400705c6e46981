/* Workload with known allocation sites: each site is one noinline function
 * whose allocation call sits on the line recorded in its l_* variable. Prints
 * one line per site: "site NAME LINE ALLOCS ALLOC_BYTES FREES FREED_BYTES",
 * from which the tests derive the exact and the leaked bytes per site.
 * argv[1]: divide every count by this (default 1). argv[2]: "_exit" to
 * leave with _exit(0); "big" to run only two sites of large blocks instead,
 * enough for the default sample interval (512 KiB): 1 MiB blocks made and
 * freed, 4 MiB blocks leaked (never touched, so they cost address space, not
 * memory). */
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define AT(var, expr) (var = __LINE__, (expr))

typedef struct site {
    const char *name;
    int line;
    unsigned long allocs, bytes, frees, freed;
} site;

static int l_small, l_medium, l_large, l_churn, l_half, l_calloc, l_realloc_a, l_realloc_b, l_posix,
    l_aligned, l_memalign, l_valloc;

__attribute__((noinline)) static void *site_small(void)
{
    return AT(l_small, malloc(64));
}
__attribute__((noinline)) static void *site_medium(void)
{
    return AT(l_medium, malloc(3000));
}
__attribute__((noinline)) static void *site_large(void)
{
    return AT(l_large, malloc(262144));
}
__attribute__((noinline)) static void *site_churn(void)
{
    return AT(l_churn, malloc(100));
}
__attribute__((noinline)) static void *site_half(void)
{
    return AT(l_half, malloc(1000));
}
__attribute__((noinline)) static void *site_calloc(void)
{
    return AT(l_calloc, calloc(10, 200));
}
__attribute__((noinline)) static void *site_realloc_a(void)
{
    return AT(l_realloc_a, malloc(1024));
}
__attribute__((noinline)) static void *site_realloc_b(void *p)
{
    return AT(l_realloc_b, realloc(p, 2048));
}
__attribute__((noinline)) static void *site_posix(void)
{
    void *p = NULL;
    return AT(l_posix, posix_memalign(&p, 64, 2000)) == 0 ? p : NULL;
}
__attribute__((noinline)) static void *site_aligned(void)
{
    return AT(l_aligned, aligned_alloc(64, 2048));
}
__attribute__((noinline)) static void *site_memalign(void)
{
    return AT(l_memalign, memalign(128, 2000));
}
__attribute__((noinline)) static void *site_valloc(void)
{
    return AT(l_valloc, valloc(2000));
}

static int l_big_churn, l_big_leak;

__attribute__((noinline)) static void *site_big_churn(void)
{
    return AT(l_big_churn, malloc(1 << 20));
}
__attribute__((noinline)) static void *site_big_leak(void)
{
    return AT(l_big_leak, malloc(4 << 20));
}

static void *volatile sink;

static void report(const char *name, int line, unsigned long n, unsigned long size,
                   unsigned long frees)
{
    printf("site %s %d %lu %lu %lu %lu\n", name, line, n, n * size, frees, frees * size);
}

int main(int argc, char **argv)
{
    unsigned long s = argc > 1 ? strtoul(argv[1], NULL, 10) : 1;
    if (!s) s = 1;
    if (argc > 2 && !strcmp(argv[2], "churn")) { /* many events, few blocks live */
        unsigned long n_churn = 1000000 / s;
        for (unsigned long i = 0; i < n_churn; i++) free(site_churn());
        report("site_churn", l_churn, n_churn, 100, n_churn);
        /* This image's peak RSS (the rusage figure also counts the image
         * before exec: a fork of a large test process). */
        char line[256];
        FILE *f = fopen("/proc/self/status", "r");
        while (f && fgets(line, sizeof line, f))
            if (!strncmp(line, "VmHWM:", 6)) printf("hwm %lu\n", strtoul(line + 6, NULL, 10));
        if (f) fclose(f);
        return 0;
    }
    if (argc > 2 && !strcmp(argv[2], "big")) {
        unsigned long n_churn = 2000 / s, n_leak = 25 / s + 1;
        for (unsigned long i = 0; i < n_churn; i++) free(site_big_churn());
        for (unsigned long i = 0; i < n_leak; i++) sink = site_big_leak();
        report("site_big_churn", l_big_churn, n_churn, 1 << 20, n_churn);
        report("site_big_leak", l_big_leak, n_leak, 4 << 20, 0);
        return 0;
    }
    unsigned long n_small = 200000 / s, n_medium = 10000 / s, n_large = 100 / s + 10,
                  n_churn = 500000 / s, n_half = 50000 / s, n_few = 5000 / s + 10;
    for (unsigned long i = 0; i < n_small; i++) sink = site_small();
    for (unsigned long i = 0; i < n_medium; i++) sink = site_medium();
    for (unsigned long i = 0; i < n_large; i++) sink = site_large();
    for (unsigned long i = 0; i < n_churn; i++) free(site_churn());
    for (unsigned long i = 0; i < n_half; i++) {
        void *p = site_half();
        if (i & 1)
            free(p);
        else
            sink = p;
    }
    for (unsigned long i = 0; i < n_few; i++) sink = site_calloc();
    for (unsigned long i = 0; i < n_few; i++) sink = site_realloc_b(site_realloc_a());
    for (unsigned long i = 0; i < n_few; i++) sink = site_posix();
    for (unsigned long i = 0; i < n_few; i++) sink = site_aligned();
    for (unsigned long i = 0; i < n_few; i++) sink = site_memalign();
    for (unsigned long i = 0; i < n_few; i++) sink = site_valloc();

    report("site_small", l_small, n_small, 64, 0);
    report("site_medium", l_medium, n_medium, 3000, 0);
    report("site_large", l_large, n_large, 262144, 0);
    report("site_churn", l_churn, n_churn, 100, n_churn);
    report("site_half", l_half, n_half, 1000, n_half / 2);
    report("site_calloc", l_calloc, n_few, 2000, 0);
    report("site_realloc_a", l_realloc_a, n_few, 1024, n_few);
    report("site_realloc_b", l_realloc_b, n_few, 2048, 0);
    report("site_posix", l_posix, n_few, 2000, 0);
    report("site_aligned", l_aligned, n_few, 2048, 0);
    report("site_memalign", l_memalign, n_few, 2000, 0);
    report("site_valloc", l_valloc, n_few, 2000, 0);
    fflush(stdout);
    if (argc > 2 && !strcmp(argv[2], "_exit")) _exit(0);
    return 0;
}
