/* test_leak_shapes: the leak detector (queries/leaks.c) on real programs
 * whose answers are known, a Python script on Debian's python3 and a C
 * program (tests/queries/leaks/), each run by `heapstore run` against a
 * real server (100 ms buckets) and asked with `heapstore leaks --json`:
 *
 * - leak_a keeps a block every round: found, its bytes at the end within
 *   1 % (C) or 5 % (Python, whose list of the blocks adds a little) of the
 *   truth with every allocation sampled;
 * - leak_b keeps a block every round through five callers, each for a
 *   fifth of the run: one row, the site's, holding all five stacks' bytes;
 * - keep_once allocates 8 MiB a third of the way through and 8 MiB three
 *   rounds later, and keeps them: live at the end, and not growing (a big
 *   step in two);
 * - sawtooth grows and shrinks to nothing every fourth round: not growing;
 * - after the loop the program pauses as long as the loop took: the leaks
 *   grew through half the run only, and are found all the same.
 *
 * At the default rate (one sample per 512 KiB, the blocks 100 times
 * larger) the same verdicts, and leak_a's and leak_b's bytes within 5
 * standard deviations of the estimator (about sqrt(bytes * 512 KiB)). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "fixture.h"
#include "hs_testkit.h"

#define ROUNDS   "60"
#define ROUND_MS "40"
#define ONCE     (16 << 20)
#define DEFAULT  524288.0

static char db[512], cli[512], url[64], wl_c[512], wl_py[512];
static tk_server srv;

static int setup(void **state)
{
    (void)state;
    fx_tmp_path(db, sizeof db, "leak-shapes.db");
    snprintf(cli, sizeof cli, "%s", tk_build_path("bin/heapstore"));
    const char *b = getenv("HS_BUILD_DIR"), *s = getenv("HS_SOURCE_DIR");
    snprintf(wl_c, sizeof wl_c, "%s/tests/wl_leaks", b ? b : ".");
    snprintf(wl_py, sizeof wl_py, "%s/tests/queries/leaks/wl_leaks.py", s ? s : ".");
    if (tk_server_start(&srv, db, 0, (const char *const[]){"--granularity", "100ms", NULL}))
        return -1;
    snprintf(url, sizeof url, "HEAPSTORE_URL=tcp://127.0.0.1:%d", srv.port);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    tk_server_stop(&srv, SIGTERM);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -f '%s'*", db);
    return system(cmd) == 0 ? 0 : -1;
}

static const char *const env[] = {url,
                                  "HEAPSTORE_SAMPLE_BYTES=", "HEAPSTORE_ALLOC_WRAPPERS=", NULL};

typedef struct truth {
    long long a, b; /* bytes leak_a and leak_b hold at the end, as the program says */
} truth;

/* `heapstore run [--sample S] --label prog=LABEL -- PROGRAM ROUNDS ROUND_MS
 * SCALE` (the interpreter first for a script); the truth it printed. */
static truth run_prog(const char *label, const char *sample, const char *interp, const char *prog,
                      const char *scale)
{
    char lab[64];
    snprintf(lab, sizeof lab, "prog=%s", label);
    const char *argv[16] = {cli, "run"};
    int n = 2;
    if (sample) argv[n++] = "--sample", argv[n++] = sample;
    argv[n++] = "--label", argv[n++] = lab, argv[n++] = "--";
    if (interp) argv[n++] = interp;
    argv[n++] = prog, argv[n++] = ROUNDS, argv[n++] = ROUND_MS, argv[n++] = scale;
    argv[n] = NULL;
    tk_out o;
    assert_int_equal(tk_run(&o, argv, env, TK_PRELOAD_NONE, 0), 0);
    if (o.code) fprintf(stderr, "heapstore run: %s\n%s\n", o.out, o.err);
    assert_int_equal(o.code, 0);
    truth t = {0};
    const char *p = strstr(o.out, "truth ");
    assert_non_null(p);
    assert_int_equal(sscanf(p, "truth %lld %lld", &t.a, &t.b), 2);
    tk_out_free(&o);
    return t;
}

static json_t *leaks_of(const char *label)
{
    char sel[64];
    snprintf(sel, sizeof sel, "prog=%s", label);
    return tk_cli_json((const char *const[]){"leaks", sel, "--limit", "100", "--json", NULL}, env);
}

/* The rows of arr named name: how many, and the first (NULL when none). */
static const json_t *named(const json_t *arr, const char *name, int *count)
{
    const json_t *first = NULL;
    size_t i;
    json_t *row;
    *count = 0;
    json_array_foreach(arr, i, row)
    {
        if (strcmp(json_string_value(json_object_get(row, "name")), name)) continue;
        if (!first) first = row;
        ++*count;
    }
    return first;
}

static int64_t ji(const json_t *o, const char *k)
{
    return json_integer_value(json_object_get(o, k));
}

static void show(const char *label, const json_t *growing)
{
    size_t i;
    json_t *row;
    json_array_foreach(growing, i, row)
    {
        fprintf(stderr, "%s: growing %s end %lld steadiness %.2f span %.2f r2 %.2f\n", label,
                json_string_value(json_object_get(row, "name")), (long long)ji(row, "end_bytes"),
                json_real_value(json_object_get(row, "steadiness")),
                json_real_value(json_object_get(row, "span")),
                json_real_value(json_object_get(row, "r2")));
    }
}

/* got is want within tol (a share of want) when tol < 1, else within tol
 * bytes. */
static void near(const char *what, int64_t got, long long want, double tol)
{
    tk_near(what, (double)got, (double)want, tol < 1 ? tol * (double)want : tol);
}

/* The verdicts of the file's opening comment on the run labelled label.
 * tol: of leak_a and leak_b's bytes (see near); 0 for the default rate's
 * statistical bound. */
static void check(const char *label, truth t, double tol)
{
    json_t *j = leaks_of(label);
    const json_t *g = json_object_get(j, "growing");
    show(label, g);
    int na, nb, n;
    const json_t *a = named(g, "leak_a", &na), *b = named(g, "leak_b", &nb);
    assert_int_equal(na, 1);
    assert_int_equal(nb, 1); /* five stacks, one site */
    near("leak_a", ji(a, "end_bytes"), t.a, tol ? tol : 5 * sqrt((double)t.a * DEFAULT));
    near("leak_b", ji(b, "end_bytes"), t.b, tol ? tol : 5 * sqrt((double)t.b * DEFAULT));
    assert_null(named(g, "keep_once", &n));
    assert_null(named(g, "sawtooth", &n));
    /* kept to the end all the same: its absence above is the detector's */
    const json_t *once = named(json_object_get(j, "live_at_end"), "keep_once", &n);
    assert_non_null(once);
    near("keep_once", ji(once, "bytes"), ONCE, 0.01);
    json_decref(j);
}

static void test_c(void **state)
{
    (void)state;
    check("c1", run_prog("c1", "1", NULL, wl_c, "1"), 0.01);
    check("c512k", run_prog("c512k", NULL, NULL, wl_c, "100"), 0);
}

static void test_python(void **state)
{
    (void)state;
    if (access("/usr/bin/python3", X_OK)) {
        fprintf(stderr, "no /usr/bin/python3: skipped\n");
        skip();
    }
    check("py1", run_prog("py1", "1", "/usr/bin/python3", wl_py, "1"), 0.05);
    check("py512k", run_prog("py512k", NULL, "/usr/bin/python3", wl_py, "100"), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_c),
        cmocka_unit_test(test_python),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
