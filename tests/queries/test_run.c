/* test_run: real programs under the real collector, through `heapstore run`
 * and the server it starts, against what hs-example is known to do
 * (tests/workloads/hs_example.c) with every allocation sampled:
 * the leaking site ranks first in leaks, the peak's time and bytes match,
 * diff between the leaking and the fixed version names the leaking site,
 * collapsed stacks add up, the pprof export reads back in go tool pprof,
 * and the program's exit code comes back. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "fixture.h"
#include "hs_testkit.h"

#define ROUNDS   20
#define ROUND_MS "50"
#define MIB      (1024 * 1024)
/* hs_example.c: config 1 MiB + (ROUNDS/2 + 1) leaks of 512 KiB + 64 MiB index */
#define PEAK_BYTES     (1 * MIB + (ROUNDS / 2 + 1) * 512 * 1024 + 64 * MIB)
#define END_LEAK_BYTES (ROUNDS * 512 * 1024)

static char db[512], cli[512], example[512];
static const char *const noenv[] = {"HEAPSTORE_URL=", "HEAPSTORE_SAMPLE_BYTES=", NULL};

static int setup(void **state)
{
    (void)state;
    fx_tmp_path(db, sizeof db, "run.db");
    snprintf(cli, sizeof cli, "%s", tk_build_path("bin/heapstore"));
    snprintf(example, sizeof example, "%s", tk_build_path("bin/hs-example"));
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'*", db);
    return system(cmd) == 0 ? 0 : -1;
}

static json_t *cli_json(const char *const *args)
{
    const char *a[24];
    int n = 0;
    for (int i = 0; args[i]; i++) a[n++] = args[i];
    a[n++] = "--db";
    a[n++] = db;
    a[n++] = "--json";
    a[n] = NULL;
    return tk_cli_json(a, noenv);
}

static void profile(const char *label, const char *extra, tk_out *o)
{
    const char *argv[] = {cli,  "run",   "--sample", "1",  "--db",       db,       "--label", label,
                          "--", example, "--rounds", "20", "--round-ms", ROUND_MS, extra,     NULL};
    assert_int_equal(tk_run(o, argv, noenv, TK_PRELOAD_NONE, 0), 0);
    if (o->code) fprintf(stderr, "heapstore run: %s\n%s\n", o->out, o->err);
}

/* total_bytes of the row named name in a top answer (-1 when absent) */
static int64_t row_bytes(const json_t *top, const char *name)
{
    size_t i;
    json_t *row;
    json_array_foreach(json_object_get(top, "rows"), i, row)
    {
        if (!strcmp(json_string_value(json_object_get(row, "name")), name))
            return json_integer_value(json_object_get(row, "total_bytes"));
    }
    return -1;
}

static void test_leaky_run(void **state)
{
    (void)state;
    tk_out o;
    profile("version=leaky", NULL, &o);
    assert_int_equal(o.code, 0);
    assert_non_null(strstr(o.out, "hs-example: 20 rounds")); /* the program's own stdout */
    assert_non_null(strstr(o.err, "peak heap"));
    assert_non_null(strstr(o.err, "likely leaks"));
    assert_non_null(strstr(o.err, "leaky_cache_add"));
    tk_out_free(&o);

    json_t *runs = cli_json((const char *const[]){"runs", NULL});
    json_t *run = json_array_get(json_object_get(runs, "runs"), 0);
    assert_string_equal(json_string_value(json_object_get(run, "state")), "ended");
    assert_true(json_is_true(json_object_get(run, "clean_exit")));
    tk_near_rel("peak bytes", json_integer_value(json_object_get(run, "peak_bytes")), PEAK_BYTES,
                0.05);
    int64_t id = json_integer_value(json_object_get(run, "id"));
    int64_t pt = json_integer_value(json_object_get(run, "peak_t_ns"));
    /* build_index starts after 10 rounds of at least 50 ms of sleep each */
    assert_true(pt >= 10 * 50 * 1000000LL);
    json_decref(runs);

    json_t *leaks = cli_json((const char *const[]){"leaks", "version=leaky", NULL});
    json_t *g0 = json_array_get(json_object_get(leaks, "growing"), 0);
    assert_string_equal(json_string_value(json_object_get(g0, "name")), "leaky_cache_add");
    tk_near_rel("leaked bytes", json_integer_value(json_object_get(g0, "end_bytes")),
                END_LEAK_BYTES, 0.05);
    json_t *l0 = json_array_get(json_object_get(leaks, "live_at_end"), 0);
    assert_string_equal(json_string_value(json_object_get(l0, "name")), "leaky_cache_add");
    json_decref(leaks);

    json_t *top = cli_json((const char *const[]){"top", "version=leaky", "--at", "peak", NULL});
    json_t *t0 = json_array_get(json_object_get(top, "rows"), 0);
    assert_string_equal(json_string_value(json_object_get(t0, "name")), "build_index");
    tk_near_rel("build_index at peak", json_integer_value(json_object_get(t0, "total_bytes")),
                64 * MIB, 0.05);
    tk_near_rel("total at peak", json_integer_value(json_object_get(top, "total_bytes")),
                PEAK_BYTES, 0.05);
    /* every allocation sampled: the known sites are exact */
    assert_int_equal(row_bytes(top, "build_index"), 64 * MIB);
    assert_int_equal(row_bytes(top, "leaky_cache_add"), (ROUNDS / 2 + 1) * 512 * 1024);
    assert_int_equal(row_bytes(top, "load_config"), 1 * MIB);
    int64_t trace = json_integer_value(json_object_get(t0, "trace"));
    json_decref(top);

    /* The peak is the moment build_index's last block arrived: after its
     * first allocation and before its first free, by the stored events'
     * own clock (whatever the machine's load did to the program's pace). */
    char sql[400];
    snprintf(sql, sizeof sql,
             "SELECT min(CASE WHEN is_free = 0 THEN t_ns END), max(CASE WHEN is_free = 0 "
             "THEN t_ns END), min(CASE WHEN is_free THEN t_ns END), count(*) "
             "FROM event_rows(%lld) WHERE trace = %lld",
             (long long)id, (long long)trace);
    json_t *q = cli_json((const char *const[]){"sql", sql, NULL});
    json_t *r0 = json_array_get(json_object_get(q, "rows"), 0);
    int64_t first_alloc = json_integer_value(json_array_get(r0, 0));
    int64_t last_alloc = json_integer_value(json_array_get(r0, 1));
    int64_t first_free = json_integer_value(json_array_get(r0, 2));
    assert_int_equal(json_integer_value(json_array_get(r0, 3)), 2 * 64); /* 64 blocks, freed */
    if (!(first_alloc <= pt && last_alloc <= pt && pt < first_free))
        fprintf(stderr, "peak at %lld ns; build_index allocated %lld..%lld, first free %lld\n",
                (long long)pt, (long long)first_alloc, (long long)last_alloc,
                (long long)first_free);
    assert_true(first_alloc <= pt && last_alloc <= pt && pt < first_free);
    json_decref(q);
}

static void test_fixed_run_and_diff(void **state)
{
    (void)state;
    tk_out o;
    profile("version=fixed", "--no-leak", &o);
    assert_int_equal(o.code, 0);
    tk_out_free(&o);
    json_t *d = cli_json((const char *const[]){"diff", "version=leaky@end", "version=fixed@end",
                                               "--by", "site", NULL});
    json_t *r0 = json_array_get(json_object_get(d, "rows"), 0);
    assert_string_equal(json_string_value(json_object_get(r0, "name")), "leaky_cache_add");
    tk_near_rel("leak difference", -json_integer_value(json_object_get(r0, "delta_bytes")),
                (ROUNDS - 1) * 512 * 1024, 0.05);
    json_decref(d);
    json_t *leaks = cli_json((const char *const[]){"leaks", "version=fixed", NULL});
    assert_int_equal(json_array_size(json_object_get(leaks, "growing")), 0);
    json_decref(leaks);
}

static void test_collapsed_and_pprof(void **state)
{
    (void)state;
    const char *argv[] = {cli, "flame", "version=leaky", "--at", "end", "--db", db, NULL};
    tk_out o;
    assert_int_equal(tk_run(&o, argv, noenv, TK_PRELOAD_NONE, 0), 0);
    assert_int_equal(o.code, 0);
    long long total = 0;
    for (char *l = o.out; *l;) {
        char *nl = strchr(l, '\n');
        *nl = '\0';
        total += atoll(strrchr(l, ' ') + 1);
        l = nl + 1;
    }
    tk_out_free(&o);
    json_t *top = cli_json((const char *const[]){"top", "version=leaky", "--at", "end", NULL});
    assert_int_equal(total, json_integer_value(json_object_get(top, "total_bytes")));
    json_decref(top);

    char file[600];
    snprintf(file, sizeof file, "%s.pb.gz", db);
    const char *ex[] = {cli,  "export", "version=leaky", "--at", "end", "--format", "pprof",
                        "-o", file,     "--db",          db,     NULL};
    assert_int_equal(tk_run(&o, ex, noenv, TK_PRELOAD_NONE, 0), 0);
    assert_int_equal(o.code, 0);
    tk_out_free(&o);
    if (system("command -v go >/dev/null 2>&1") != 0) {
        fprintf(stderr, "go is not installed (Debian: golang-go): pprof check skipped\n");
        return;
    }
    char home[600];
    snprintf(home, sizeof home, "HOME=%s.home", db);
    const char *gp[] = {"/bin/sh", "-c", "exec go tool pprof -top \"$0\"", file, NULL};
    assert_int_equal(tk_run(&o, gp, (const char *const[]){home, NULL}, TK_PRELOAD_NONE, 0), 0);
    assert_int_equal(o.code, 0);
    char *first = strstr(o.out, "flat%");
    assert_non_null(first);
    /* the first entry is the leak, as in `heapstore top --at end` */
    char *leak = strstr(first, "leaky_cache_add"), *config = strstr(first, "load_config");
    assert_non_null(leak);
    assert_true(!config || leak < config);
    tk_out_free(&o);
}

static void test_exit_codes(void **state)
{
    (void)state;
    /* hs-example answers a bad option with exit code 2 (a program of this
     * build, so that an ASan build's collector loads into it too) */
    const char *argv[] = {cli, "run", "--db", db, "--", example, "--bogus", NULL};
    tk_out o;
    assert_int_equal(tk_run(&o, argv, noenv, TK_PRELOAD_NONE, 0), 0);
    assert_int_equal(o.code, 2);
    assert_non_null(strstr(o.err, "usage: hs-example"));
    tk_out_free(&o);
    const char *missing[] = {cli, "run", "--db", db, "--", "/nonexistent/program", NULL};
    assert_int_equal(tk_run(&o, missing, noenv, TK_PRELOAD_NONE, 0), 0);
    assert_int_equal(o.code, 127);
    assert_non_null(strstr(o.err, "cannot run /nonexistent/program"));
    tk_out_free(&o);
    const char *usage[] = {cli, "run", "--db", db, NULL};
    assert_int_equal(tk_run(&o, usage, noenv, TK_PRELOAD_NONE, 0), 0);
    assert_int_equal(o.code, 2);
    tk_out_free(&o);
}

/* `heapstore run` gives the program its run id and follows exec: here a
 * shell starts a short hs-example in the background (another process, its
 * own run), then replaces itself with the full workload. The summary must be
 * that last image's run: the child of the shell's own run, same pid. */
static void test_run_follows_exec(void **state)
{
    (void)state;
    const char *argv[] = {
        cli,
        "run",
        "--sample",
        "1",
        "--db",
        db,
        "--label",
        "version=exec",
        "--",
        "/bin/sh",
        "-c",
        "\"$0\" --rounds 2 --round-ms 1 >/dev/null & wait; exec \"$0\" --rounds 20 "
        "--round-ms " ROUND_MS,
        example,
        NULL};
    tk_out o;
    assert_int_equal(tk_run(&o, argv, noenv, TK_PRELOAD_NONE, 0), 0);
    if (o.code) fprintf(stderr, "heapstore run: %s\n%s\n", o.out, o.err);
    assert_int_equal(o.code, 0);
    const char *h = strstr(o.err, "heapstore: run ");
    assert_non_null(h);
    long shown = strtol(h + 15, NULL, 10);
    assert_true(shown > 0);
    tk_out_free(&o);

    json_t *runs = cli_json((const char *const[]){"runs", "--label", "version=exec", NULL});
    json_t *r, *mine = NULL, *parent = NULL;
    size_t i;
    json_array_foreach(json_object_get(runs, "runs"), i, r)
    {
        if (json_integer_value(json_object_get(r, "id")) == shown) mine = r;
    }
    assert_non_null(mine);
    json_array_foreach(json_object_get(runs, "runs"), i, r)
    {
        if (json_equal(json_object_get(r, "id"), json_object_get(mine, "parent_id"))) parent = r;
    }
    assert_non_null(parent);
    assert_true(json_equal(json_object_get(parent, "pid"), json_object_get(mine, "pid")));
    assert_non_null(strstr(json_string_value(json_object_get(mine, "program")), "hs-example"));
    tk_near_rel("exec'd peak", json_integer_value(json_object_get(mine, "peak_bytes")), PEAK_BYTES,
                0.05);
    json_decref(runs);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_leaky_run),           cmocka_unit_test(test_fixed_run_and_diff),
        cmocka_unit_test(test_collapsed_and_pprof), cmocka_unit_test(test_exit_codes),
        cmocka_unit_test(test_run_follows_exec),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
