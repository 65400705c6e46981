/* Stress: 8 threads of churn with forks, dlopen/dlclose and a 1 kHz signal
 * for 10+ seconds at sample rate 1, under the real collector. No crash, no
 * deadlock (the run has a timeout), no sanitizer report, and the decoded
 * event counts of the parent and of every child equal what each process
 * says it did. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "hs_proto.h"
#include "hs_testkit.h"
#include "hsp_model.h"

static int is_wl_site(const char *fn)
{
    return !strcmp(fn, "wl_malloc") || !strcmp(fn, "wl_calloc") || !strcmp(fn, "wl_realloc") ||
           !strcmp(fn, "wl_memalign");
}

static void check_proc(const char *path, unsigned long allocs, unsigned long frees,
                       const uint8_t *parent_run, uint8_t *run_out)
{
    hsp_model m;
    assert_int_equal(hsp_load(&m, path, 0), 0);
    if (m.error[0]) fprintf(stderr, "%s: %s\n", path, m.error);
    assert_string_equal(m.error, "");
    assert_true(m.has_bye);
    uint64_t a = 0, f = 0;
    for (size_t i = 0; i < m.nstacks; i++) {
        if (!is_wl_site(hsp_frame_fn(&m, &m.stacks[i], 0))) continue;
        a += m.stacks[i].allocs;
        f += m.stacks[i].frees;
    }
    if (a != allocs || f != frees)
        fprintf(stderr, "%s: stream %lu/%lu, program %lu/%lu, drops %lu/%lu\n", path,
                (unsigned long)a, (unsigned long)f, allocs, frees,
                (unsigned long)m.drops[HS_DROP_ALLOC_EVENTS],
                (unsigned long)m.drops[HS_DROP_FREE_EVENTS]);
    assert_int_equal(a, allocs);
    assert_int_equal(f, frees);
    if (parent_run) assert_memory_equal(m.hello.parent_run_id, parent_run, 16);
    if (run_out) memcpy(run_out, m.hello.run_id, 16);
    hsp_free(&m);
}

static void test_stress(void **state)
{
    (void)state;
    char out[512];
    snprintf(out, sizeof out, "%s/stress.hsp", tk_scratch_dir());
    char url[600];
    snprintf(url, sizeof url, "HEAPSTORE_URL=file://%s", out);
    const char *argv[] = {tk_build_path("tests/wl_stress"), "10",
                          tk_build_path("tests/libwl_dl.so"), NULL};
    const char *env[] = {"HEAPSTORE_SAMPLE_BYTES=1", url, "HEAPSTORE_EXIT_FLUSH_MS=20000", NULL};
    tk_out r;
#ifdef HS_TEST_ASAN_RUNTIME
    /* GCC 12's ASan allocator is not fork-safe (a child forked while another
     * thread holds one of its locks hangs, profiled or not): forward to the
     * test allocator instead; the collector itself stays instrumented. */
    int preload = TK_PRELOAD_TEST_ALLOCATOR;
#else
    int preload = TK_PRELOAD_COLLECTOR;
#endif
    tk_run(&r, argv, env, preload, 240);
    fprintf(stderr, "stress: %.1fs, exit %d/%d\n%.2000s\n%.2000s", r.seconds, r.exited, r.status,
            r.out, r.err);
    assert_false(r.timed_out);
    assert_true(r.exited);
    assert_int_equal(r.status, 0);
    assert_true(tk_clean(&r));

    /* The parent's line is the last "proc" line. */
    int parent = 0, children = 0;
    unsigned long pa = 0, pf = 0;
    for (const char *p = r.out; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
        int pid;
        unsigned long a, f;
        if (sscanf(p, "proc %d %lu %lu", &pid, &a, &f) == 3) {
            parent = pid;
            pa = a;
            pf = f;
        }
    }
    assert_true(parent > 0);
    uint8_t run[16];
    check_proc(out, pa, pf, NULL, run);
    for (const char *p = r.out; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
        int pid;
        unsigned long a, f;
        if (sscanf(p, "proc %d %lu %lu", &pid, &a, &f) != 3 || pid == parent) continue;
        char path[600];
        snprintf(path, sizeof path, "%s.%d", out, pid);
        check_proc(path, a, f, run, NULL);
        children++;
    }
    int nchildren = -1, bad = -1;
    const char *c = strstr(r.out, "children ");
    assert_non_null(c);
    sscanf(c, "children %d bad %d", &nchildren, &bad);
    assert_int_equal(bad, 0);
    assert_int_equal(children, nchildren);
    assert_true(children >= 10);
    tk_out_free(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_stress)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
