/* Allocations made before the collector's constructor runs.
 *
 * A preloaded collector's constructor runs after those of the program's own
 * libraries (libstdc++ allocates its 72 KiB emergency pool there, and many
 * libraries set themselves up the same way). wl_early links libwl_early.so,
 * whose constructor first calls setenv (the process's first allocation,
 * made under the environment's lock, which the collector must not take
 * there) and then allocates blocks of known sizes (wl_early.h): one kept,
 * one calloc'd 8 MiB block kept, one freed at once, one grown by realloc
 * and freed later by main. Every one of them must be in the run, with its
 * free when it has one, at every allocation and (the 8 MiB block, which the
 * sampler cannot miss) at the default rate. (Under a sanitizer runtime the
 * collector cannot run before its constructor, see hs_hooks.c: there the
 * test only checks that the program and the rest of its run are intact.)
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <cmocka.h>

#include "hs_testkit.h"
#include "hsp_model.h"
#include "wl_early.h"

static const char *run_early(const char *name, const char *rate)
{
    static char out[512];
    snprintf(out, sizeof out, "%s/%s", tk_scratch_dir(), name);
    remove(out);
    const char *argv[] = {tk_build_path("tests/wl_early"), NULL};
    const char *env[] = {tk_env("HEAPSTORE_SAMPLE_BYTES=%s", rate),
                         tk_env("HEAPSTORE_URL=file://%s", out), NULL};
    tk_out r;
    tk_run(&r, argv, env, TK_PRELOAD_COLLECTOR, 60);
    tk_expect_ok(&r);
    tk_out_free(&r);
    return out;
}

#ifndef HS_TEST_ASAN_RUNTIME

/* The events of exactly `size` bytes in the stream at path. */
static void events_of(const char *path, uint64_t size, uint64_t *allocs, uint64_t *frees,
                      uint64_t *weight)
{
    hsp_model m;
    assert_int_equal(hsp_load(&m, path, size), 0);
    if (m.error[0]) fprintf(stderr, "%s: %s\n", path, m.error);
    assert_string_equal(m.error, "");
    assert_true(m.has_bye);
    *allocs = m.watch_allocs;
    *frees = m.watch_frees;
    *weight = m.watch_alloc_weight;
    hsp_free(&m);
}

static void test_early_every_allocation(void **state)
{
    (void)state;
    const char *out = run_early("early1.hsp", "1");
    static const struct {
        uint64_t size, allocs, frees;
    } cases[] = {
        {WL_EARLY_KEPT, 1, 0},  {WL_EARLY_BIG, 1, 0},      {WL_EARLY_FREED, 1, 1},
        {WL_EARLY_MOVED, 1, 1}, {WL_EARLY_MOVED_TO, 1, 1}, /* freed by main */
        {22222, 1, 1},                                     /* main's own */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint64_t a, f, w;
        events_of(out, cases[i].size, &a, &f, &w);
        if (a != cases[i].allocs || f != cases[i].frees)
            fprintf(stderr, "size %lu: %lu allocs, %lu frees\n", (unsigned long)cases[i].size,
                    (unsigned long)a, (unsigned long)f);
        assert_int_equal(a, cases[i].allocs);
        assert_int_equal(f, cases[i].frees);
        assert_int_equal(w, cases[i].size * cases[i].allocs);
    }
    /* They came with their stacks: the constructor's block is in a stack of
     * its own, a few frames deep. */
    hsp_model m;
    assert_int_equal(hsp_load(&m, out, 0), 0);
    int found = 0;
    for (size_t i = 0; i < m.nstacks; i++)
        if (m.stacks[i].allocs == 1 && m.stacks[i].alloc_bytes == WL_EARLY_KEPT) {
            assert_true(m.stacks[i].depth >= 2);
            found++;
        }
    assert_int_equal(found, 1);
    assert_int_equal(m.drops[HS_DROP_ALLOC_EVENTS], 0);
    hsp_free(&m);
}

static void test_early_default_rate(void **state)
{
    (void)state;
    const char *out = run_early("early_default.hsp", "524288");
    uint64_t a, f, w;
    events_of(out, WL_EARLY_BIG, &a, &f, &w);
    assert_int_equal(a, 1);
    assert_int_equal(f, 0);
    assert_true(w >= WL_EARLY_BIG && w < WL_EARLY_BIG + WL_EARLY_BIG / 1000);
}

#else

/* Sanitized tree: the collector cannot run before its constructor (see
 * early_start in hs_hooks.c) and leaves those allocations alone; the
 * program still runs, frees them, and main's own block is recorded. */
static void test_early_sanitized(void **state)
{
    (void)state;
    const char *out = run_early("early_asan.hsp", "1");
    hsp_model m;
    assert_int_equal(hsp_load(&m, out, 22222), 0);
    assert_string_equal(m.error, "");
    assert_int_equal(m.watch_allocs, 1);
    assert_int_equal(m.watch_frees, 1);
    hsp_free(&m);
}

#endif

int main(void)
{
    const struct CMUnitTest tests[] = {
#ifndef HS_TEST_ASAN_RUNTIME
        cmocka_unit_test(test_early_every_allocation),
        cmocka_unit_test(test_early_default_rate),
#else
        cmocka_unit_test(test_early_sanitized),
#endif
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
