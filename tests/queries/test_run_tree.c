/* test_run_tree: `heapstore run` on a process tree speaks of the whole tree.
 *
 * wl_tree (tests/queries/tree/wl_tree.c) forks and execs two children whose
 * peaks and leaks are known to the byte; with every allocation sampled the
 * summary must give each program's line with those figures, the largest
 * first, fold the processes without samples into one line, and then detail
 * the largest. A shell that runs two short programs and execs into a third
 * keeps the single-process summary with one line for the rest. */
#include <inttypes.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "fixture.h"
#include "hs_core.h"
#include "hs_error.h"
#include "hs_testkit.h"

#define KIB 1024
#define MIB (1024 * KIB)

static char db[512], cli[512], tree[512];
static const char *const noenv[] = {"HEAPSTORE_URL=", "HEAPSTORE_SAMPLE_BYTES=", NULL};

static int setup(void **state)
{
    (void)state;
    fx_tmp_path(db, sizeof db, "tree.db");
    snprintf(cli, sizeof cli, "%s", tk_build_path("bin/heapstore"));
    snprintf(tree, sizeof tree, "%s/tests/wl_tree", getenv("HS_BUILD_DIR"));
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'*", db);
    return system(cmd) == 0 ? 0 : -1;
}

/* Every run stored, as `heapstore runs --json` gives them. */
static json_t *all_runs(void)
{
    const char *argv[] = {cli, "runs", "--limit", "1000", "--db", db, "--json", NULL};
    tk_out o;
    assert_int_equal(tk_run(&o, argv, noenv, TK_PRELOAD_NONE, 0), 0);
    assert_int_equal(o.code, 0);
    json_t *j = json_loads(o.out, 0, NULL);
    assert_non_null(j);
    tk_out_free(&o);
    return j;
}

/* The run of wl_tree MODE (its argv[1]) of the largest peak: the fork
 * children of root share its argv until they exec, and allocate little or
 * nothing. NULL when there is none. */
static json_t *run_of(json_t *runs, const char *mode)
{
    size_t i;
    json_t *r, *best = NULL;
    json_array_foreach(json_object_get(runs, "runs"), i, r)
    {
        const char *a1 = json_string_value(json_array_get(json_object_get(r, "argv"), 1));
        if (!a1 || strcmp(a1, mode) ||
            !strstr(json_string_value(json_object_get(r, "program")), "wl_tree"))
            continue;
        if (!best || json_integer_value(json_object_get(r, "peak_bytes")) >
                         json_integer_value(json_object_get(best, "peak_bytes")))
            best = r;
    }
    return best;
}

/* How many runs sampled nothing. */
static size_t without_samples(json_t *runs)
{
    size_t i, n = 0;
    json_t *r;
    json_array_foreach(json_object_get(runs, "runs"), i, r)
    {
        n += !json_integer_value(json_object_get(r, "alloc_events")) &&
             !json_integer_value(json_object_get(r, "peak_bytes"));
    }
    return n;
}

static int64_t num(const json_t *o, const char *key)
{
    return (int64_t)json_integer_value(json_object_get(o, key));
}

/* The summary's line for `wl_tree mode` (a copy), or NULL. */
static char *line_of(const char *err, const char *mode)
{
    char needle[64];
    snprintf(needle, sizeof needle, "  wl_tree %s\n", mode);
    const char *at = strstr(err, needle);
    if (!at) return NULL;
    const char *start = at;
    while (start > err && start[-1] != '\n') start--;
    return strndup(start, (size_t)(at - start) + strlen(needle) - 1);
}

static const struct {
    const char *mode, *peak, *end;
    int64_t peak_bytes, end_bytes;
} programs[] = {
    /* largest peak first: the order the summary must give */
    {"big", "3.00 MiB", "1.00 MiB in 1 block", 3 * MIB, 1 * MIB},
    {"small", "2.00 MiB", "512 KiB in 1 block", 2 * MIB, 512 * KIB},
    {"root", "256 KiB", "256 KiB in 1 block", 256 * KIB, 256 * KIB},
};

/* The index in runs of the first run of i's tree (its parents up while
 * stored). */
static size_t tree_root_of(json_t *runs, size_t i)
{
    json_t *arr = json_object_get(runs, "runs");
    size_t n = json_array_size(arr);
    for (size_t steps = 0; steps < n; steps++) {
        int64_t parent = num(json_array_get(arr, i), "parent_id");
        size_t k = 0;
        while (k < n && (!parent || num(json_array_get(arr, k), "id") != parent)) k++;
        if (k == n) break;
        i = k;
    }
    return i;
}

static size_t count_lines(const char *s)
{
    size_t n = 0;
    for (; *s; s++) n += *s == '\n';
    return n;
}

/* The ids of the runs the core answers for one filter (parent or root). */
static size_t filtered(const char *key, int64_t id, int64_t *out, size_t cap)
{
    hs_q *q;
    hs_qerr err;
    assert_int_equal(hs_q_open(&q, db, &err), 0);
    hs_runs_params p;
    hs_runs_params_init(&p);
    p.limit = 1000;
    char v[32];
    snprintf(v, sizeof v, "%" PRId64, id);
    assert_int_equal(hs_runs_param(&p, key, v, &err), 0);
    hs_runs_result r;
    assert_int_equal(hs_core_runs(q, &p, &r, &err), 0);
    size_t n = r.nruns;
    for (size_t i = 0; i < n && i < cap; i++) out[i] = r.runs[i].brief.id;
    hs_runs_result_clear(&r);
    hs_q_free(q);
    return n;
}

/* root=ID answers exactly the runs whose tree root is ID's; parent=ID
 * exactly those whose parent_id is ID; a bad id is refused. */
static void tree_filters(json_t *runs, json_t *root, size_t members)
{
    json_t *arr = json_object_get(runs, "runs");
    int64_t rid = json_integer_value(json_object_get(root, "id")), got[64];
    size_t n = filtered("root", rid, got, 64);
    assert_int_equal(n, members);
    for (size_t k = 0; k < n; k++) {
        size_t i = 0;
        while (i < json_array_size(arr) &&
               json_integer_value(json_object_get(json_array_get(arr, i), "id")) != got[k])
            i++;
        assert_true(i < json_array_size(arr));
        assert_ptr_equal(json_array_get(arr, tree_root_of(runs, i)), root);
    }
    size_t children = 0;
    for (size_t i = 0; i < json_array_size(arr); i++)
        children += json_integer_value(json_object_get(json_array_get(arr, i), "parent_id")) == rid;
    assert_true(children > 0);
    assert_int_equal(filtered("parent", rid, got, 64), children);
    hs_runs_params p;
    hs_qerr err;
    hs_runs_params_init(&p);
    assert_int_equal(hs_runs_param(&p, "root", "x1", &err), HS_EINVAL);
    assert_int_equal(hs_runs_param(&p, "parent", "-2", &err), HS_EINVAL);
}

/* heapstore runs folds each process tree into its first run's row, which
 * says how many more it holds and the largest; --all lists every run. Runs
 * after test_tree_summary, on its database (and test_one_allocating_process's
 * runs when they come first). */
static void test_runs_folds_trees(void **state)
{
    (void)state;
    json_t *runs = all_runs(), *arr = json_object_get(runs, "runs");
    size_t n = json_array_size(arr), roots = 0;
    json_t *root = run_of(runs, "root");
    assert_non_null(root);
    size_t members = 0;
    for (size_t i = 0; i < n; i++) {
        size_t r = tree_root_of(runs, i);
        roots += r == i;
        members += json_array_get(arr, r) == root;
    }
    assert_true(members == 5 && roots < n);
    const char *argv[] = {cli, "runs", "--limit", "1000", "--db", db, NULL};
    tk_out o;
    assert_int_equal(tk_run(&o, argv, noenv, TK_PRELOAD_NONE, 0), 0);
    fprintf(stderr, "%s", o.out);
    assert_int_equal(o.code, 0);
    char row[96], foot[96];
    snprintf(row, sizeof row, "wl_tree +%zu, largest wl_tree 3.00 MiB", members - 1);
    assert_non_null(strstr(o.out, row));
    snprintf(foot, sizeof foot, "%zu more runs folded into their process tree's first", n - roots);
    assert_non_null(strstr(o.out, foot));
    assert_int_equal(count_lines(o.out), 1 + roots + 1); /* header, roots, the note */
    tk_out_free(&o);
    tree_filters(runs, root, members);
    const char *all[] = {cli, "runs", "--limit", "1000", "--db", db, "--all", NULL};
    assert_int_equal(tk_run(&o, all, noenv, TK_PRELOAD_NONE, 0), 0);
    assert_int_equal(o.code, 0);
    assert_null(strstr(o.out, "folded"));
    assert_int_equal(count_lines(o.out), 1 + n);
    tk_out_free(&o);
    json_decref(runs);
}

static void test_tree_summary(void **state)
{
    (void)state;
    const char *argv[] = {cli,       "run",    "--sample", "1",  "--db", db,
                          "--label", "t=tree", "--",       tree, "root", NULL};
    tk_out o;
    assert_int_equal(tk_run(&o, argv, noenv, TK_PRELOAD_NONE, 0), 0);
    fprintf(stderr, "%s", o.err);
    assert_int_equal(o.code, 3); /* the root's exit code */

    json_t *runs = all_runs();
    size_t nruns = json_array_size(json_object_get(runs, "runs"));
    json_t *root = run_of(runs, "root");
    assert_non_null(root);
    assert_true(json_is_null(json_object_get(root, "parent_id")));
    char head[160];
    snprintf(head, sizeof head,
             "heapstore: process tree of run %lld (wl_tree), %zu processes: "
             "exit code 3,",
             (long long)num(root, "id"), nruns);
    assert_non_null(strstr(o.err, head));

    const char *prev = o.err;
    for (size_t i = 0; i < sizeof programs / sizeof programs[0]; i++) {
        json_t *r = run_of(runs, programs[i].mode);
        assert_non_null(r);
        /* the known answer, exact at every allocation; in a sanitized tree
         * ASan's runtime allocates in our sender thread as it starts
         * (pthread_getattr_np: 216 B), which may be live at the peak */
        int64_t peak = num(r, "peak_bytes");
#ifdef HS_TEST_SANITIZED
        if (peak > programs[i].peak_bytes && peak <= programs[i].peak_bytes + 1024)
            peak = programs[i].peak_bytes;
#endif
        assert_int_equal(peak, programs[i].peak_bytes);
        assert_int_equal(num(r, "end_bytes"), programs[i].end_bytes);
        char *line = line_of(o.err, programs[i].mode);
        assert_non_null(line);
        char cols[160];
        snprintf(cols, sizeof cols, "%10s  %-26s  %6lld  %7lld  wl_tree %s", programs[i].peak,
                 programs[i].end, (long long)num(r, "id"), (long long)num(r, "pid"),
                 programs[i].mode);
        if (!strstr(line, cols)) fprintf(stderr, "line: '%s'\nwanted: '%s'\n", line, cols);
        assert_non_null(strstr(line, cols));
        const char *at = strstr(o.err, line);
        assert_true(at > prev); /* after the larger ones */
        prev = at;
        free(line);
    }
    /* the two fork children before their exec sample nothing (a sanitizer's
     * runtime may allocate there): those without samples make one line */
    assert_true(nruns == 5);
    size_t empty = without_samples(runs);
    char fold[96];
    snprintf(fold, sizeof fold, "    %zu more process%s without samples: wl_tree×%zu\n", empty,
             empty == 1 ? "" : "es", empty);
    assert_true(empty ? strstr(o.err, fold) != NULL : strstr(o.err, "without samples") == NULL);

    /* then the largest in detail */
    json_t *big = run_of(runs, "big");
    char detail[700];
    snprintf(detail, sizeof detail,
             "heapstore: run %lld of %s, the largest:", (long long)num(big, "id"), tree);
    const char *d = strstr(o.err, detail);
    assert_true(d && d > prev);
    assert_non_null(strstr(d, "peak heap    3.00 MiB"));
    char dig[64];
    snprintf(dig, sizeof dig, "heapstore leaks %lld ", (long long)num(big, "id"));
    assert_non_null(strstr(d, dig));
    json_decref(runs);
    tk_out_free(&o);
}

/* Only the last image allocated (at a rate that samples nothing of the
 * shell and true): its own summary, and one line for the three others. */
static void test_one_allocating_process(void **state)
{
    (void)state;
    const char *argv[] = {
        cli,  "run", "--sample", "1000000000", "--db",
        db,   "--",  "/bin/sh",  "-c",         "/bin/true; /bin/true; exec \"$0\" big",
        tree, NULL};
    tk_out o;
    assert_int_equal(tk_run(&o, argv, noenv, TK_PRELOAD_NONE, 0), 0);
    fprintf(stderr, "%s", o.err);
    assert_int_equal(o.code, 0);
    /* the single-process header, of the program the shell became */
    assert_null(strstr(o.err, "process tree"));
    char head[600];
    snprintf(head, sizeof head, " of %s: exit code 0,", tree);
    const char *h = strstr(o.err, head);
    assert_true(h && h - o.err > 16 &&
                !strncmp(strstr(o.err, "heapstore: run "), "heapstore: run ", 15));
    const char *also = strstr(o.err, "  also         3 processes without samples: true×2, ");
    assert_non_null(also);
    tk_out_free(&o);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tree_summary),
        cmocka_unit_test(test_one_allocating_process),
        cmocka_unit_test(test_runs_folds_trees),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
