/* test_cli: the heapstore CLI's query commands on a database with a known
 * heap, directly (--db) and through a real server (HEAPSTORE_URL), with the
 * same answers; clear errors and exit code 1 for bad input; the pprof
 * export read back by `go tool pprof -top` when Go is installed. */
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

static char db[512], cli[512], url[64];
static tk_server srv;

static int setup(void **state)
{
    (void)state;
    fx_tmp_path(db, sizeof db, "cli.db");
    if (fx_build(db)) return -1;
    snprintf(cli, sizeof cli, "%s", tk_build_path("bin/heapstore"));
    if (tk_server_start(&srv, db, 0, NULL)) return -1;
    snprintf(url, sizeof url, "HEAPSTORE_URL=tcp://127.0.0.1:%d", srv.port);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    tk_server_stop(&srv, SIGTERM);
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "rm -f '%s'*", db);
    return system(cmd) == 0 ? 0 : -1;
}

/* Runs `heapstore ARGS… --db DB` (direct) or with HEAPSTORE_URL (via the server). */
static void run(tk_out *o, int via_server, const char *const *args)
{
    const char *argv[32] = {cli};
    int n = 1;
    for (int i = 0; args[i]; i++) argv[n++] = args[i];
    if (!via_server) {
        argv[n++] = "--db";
        argv[n++] = db;
    }
    argv[n] = NULL;
    const char *env[] = {via_server ? url : "HEAPSTORE_URL=", NULL};
    assert_int_equal(tk_run(o, argv, env, TK_PRELOAD_NONE, 0), 0);
}

static void test_tables(void **state)
{
    (void)state;
    for (int via = 0; via < 2; via++) {
        tk_out o;
        run(&o, via, (const char *const[]){"runs", NULL});
        assert_int_equal(o.code, 0);
        assert_non_null(strstr(o.out, "app"));
        assert_non_null(strstr(o.out, "version=1"));
        tk_out_free(&o);
        run(&o, via, (const char *const[]){"top", "program=app,version=1", "--at", "peak", NULL});
        assert_int_equal(o.code, 0);
        assert_non_null(strstr(o.out, "big_alloc (app.c:50)"));
        assert_non_null(strstr(o.out, "sampling: every allocation"));
        tk_out_free(&o);
        run(&o, via, (const char *const[]){"leaks", "1", NULL});
        assert_int_equal(o.code, 0);
        char *grow = strstr(o.out, "growing");
        assert_non_null(grow);
        assert_non_null(strstr(grow, "leak_site"));
        tk_out_free(&o);
        run(&o, via, (const char *const[]){"diff", "1@end", "2@end", "--by", "site", NULL});
        assert_int_equal(o.code, 0);
        assert_non_null(strstr(o.out, "leak_site"));
        assert_non_null(strstr(o.out, "shrank"));
        tk_out_free(&o);
        static const char *const others[][4] = {{"history", "1", "--top", "3"},
                                                {"sizes", "latest", NULL, NULL},
                                                {"flame", "1", NULL, NULL},
                                                {"sql", "SELECT id FROM runs", NULL, NULL}};
        for (size_t i = 0; i < 4; i++) {
            const char *args[6] = {others[i][0], others[i][1], others[i][2], others[i][3], NULL};
            run(&o, via, args);
            if (o.code) fprintf(stderr, "%s: %s\n", others[i][0], o.err);
            assert_int_equal(o.code, 0);
            assert_true(strlen(o.out) > 10);
            tk_out_free(&o);
        }
    }
}

/* --json gives the API's JSON, and both modes give the same answer. */
static void test_json_same_both_ways(void **state)
{
    (void)state;
    const char *const args[] = {"top", "1", "--at", "1.5", "--by", "function", "--json", NULL};
    tk_out d, s;
    run(&d, 0, args);
    run(&s, 1, args);
    assert_int_equal(d.code, 0);
    assert_int_equal(s.code, 0);
    json_error_t e;
    json_t *jd = json_loads(d.out, 0, &e), *js = json_loads(s.out, 0, &e);
    assert_non_null(jd);
    assert_non_null(js);
    assert_true(json_equal(jd, js));
    assert_int_equal(json_integer_value(json_object_get(jd, "total_bytes")), 5000 + 15000);
    json_decref(jd);
    json_decref(js);
    tk_out_free(&d);
    tk_out_free(&s);
}

/* One renderer for both modes: direct mode prints the core's typed result,
 * HTTP mode the same result decoded from the server's JSON; each command
 * prints the same bytes (tables, errors, exit code; --json too) either way
 * on the same database. */
static void test_same_output_both_ways(void **state)
{
    (void)state;
    static const char *const cases[][10] = {
        {"top", "1"},
        {"top", "1", "--at", "end", "--by", "stack"},
        {"top", "1", "--at", "1.15", "--by", "function", "--limit", "2"},
        {"top", "program=app,version=2", "--by", "site", "--limit", "1"},
        {"top", "1", "--site", "leaf", "--by", "stack"},
        {"top", "1", "--by", "stack", "--json"},
        {"top", "1", "--by", "nope"},
        {"top", "42", "--by", "nope"},
        {"top", "1", "--at", "9"},
        {"runs"},
        {"runs", "--json"},
        {"runs", "--label", "version=2", "--limit", "1"},
        {"runs", "--limit", "0"},
        {"runs", "--label", "=x"},
        {"runs", "--program", "nothing"},
        {"leaks", "1"},
        {"leaks", "2", "--limit", "1", "--site", "leaf"},
        {"leaks", "1", "--json"},
        {"leaks", "42", "--limit", "0"},
        {"diff", "1@end", "2@end", "--by", "site"},
        {"sizes", "1"},
        {"sizes", "latest", "--json"},
        {"sizes", "42"},
        {"history", "1", "--top", "2"},
        {"history", "1", "--top", "3", "--trace", "3", "--json"},
        {"history", "1", "--trace", "2,9", "--site", "leaf"},
        {"history", "2", "--format", "json"},
        {"history", "1", "--format", "csv"},
        {"history", "1", "--top", "1001"},
        {"history", "42", "--trace", "x"},
        {"flame", "1"},
        {"flame", "1", "--json", "--at", "end", "--min-share", "0.1"},
        {"flame", "1@peak", "2@end"},
        {"flame", "1@peak", "2@end", "--json"},
        {"flame", "42", "--min-share", "2"},
        {"diff", "1", "2"},
        {"diff", "1@peak", "1@end", "--by", "function", "--json"},
        {"diff", "1", "2", "--format", "collapsed"},
        {"diff", "42", "x@y"},
        {"diff", "1", "2", "--limit", "0"},
        {"export", "1", "--format", "collapsed", "-o", "-"},
        {"export", "1", "--format", "dot", "--at", "end", "-o", "-"},
        {"export", "1", "--format", "nope", "-o", "-"},
        {"export", "42", "--at", "x", "-o", "-"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        tk_out d, s;
        run(&d, 0, cases[i]);
        run(&s, 1, cases[i]);
        if (strcmp(d.out, s.out) || strcmp(d.err, s.err) || d.code != s.code)
            fprintf(stderr, "%s %s: direct %d:\n%s%s\nhttp %d:\n%s%s\n", cases[i][0],
                    cases[i][1] ? cases[i][1] : "", d.code, d.out, d.err, s.code, s.out, s.err);
        assert_int_equal(d.code, s.code);
        assert_string_equal(d.out, s.out);
        assert_string_equal(d.err, s.err);
        tk_out_free(&d);
        tk_out_free(&s);
    }
}

static void test_bad_input(void **state)
{
    (void)state;
    static const struct {
        const char *args[8];
        int code;
        const char *msg;
    } cases[] = {
        {{"top", "42"}, 1, "no run with id 42"},
        {{"top", "program=nothing"}, 1, "no run matches"},
        {{"top", "1", "--at", "9"}, 1, "outside run 1"},
        {{"top", "1", "--at", "later"}, 1, "malformed time"},
        {{"top", "not a run"}, 1, "malformed run selector"},
        {{"diff", "1@end", "2@soon"}, 1, "malformed time"},
        {{"history", "latest,program=x"}, 1, "'latest' must come last"},
        {{"sql", "DELETE FROM runs"}, 1, "read-only"},
        {{"sql", "ATTACH DATABASE 'x' AS y"}, 1, "read-only"},
        {{"sql",
          "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c) SELECT count(*) FROM c",
          "--timeout-ms", "100"},
         1,
         "time limit"},
        {{"top"}, 2, "give one RUN"},
        {{"top", "1", "--frobnicate", "x"}, 2, "unknown option"},
        {{"export", "1", "--format", "svg", "-o", "-"}, 1, "format must be"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        for (int via = 0; via < 2; via++) {
            tk_out o;
            run(&o, via, cases[i].args);
            if (o.code != cases[i].code || !strstr(o.err, cases[i].msg))
                fprintf(stderr, "case %zu (%s): code %d, stderr: %s\n", i,
                        via ? "server" : "direct", o.code, o.err);
            assert_int_equal(o.code, cases[i].code);
            assert_non_null(strstr(o.err, cases[i].msg));
            assert_non_null(strstr(o.err, "heapstore "));
            tk_out_free(&o);
        }
    }
    /* a database that is not there */
    const char *argv[] = {cli, "runs", "--db", "/nonexistent/x.db", NULL};
    tk_out o;
    assert_int_equal(
        tk_run(&o, argv, (const char *const[]){"HEAPSTORE_URL=", NULL}, TK_PRELOAD_NONE, 0), 0);
    assert_int_equal(o.code, 1);
    assert_non_null(strstr(o.err, "cannot open"));
    tk_out_free(&o);
    /* a server that is not there */
    const char *argv2[] = {cli, "runs", NULL};
    assert_int_equal(tk_run(&o, argv2, (const char *const[]){"HEAPSTORE_URL=127.0.0.1:1", NULL},
                            TK_PRELOAD_NONE, 0),
                     0);
    assert_int_equal(o.code, 1);
    assert_non_null(strstr(o.err, "cannot connect"));
    tk_out_free(&o);
}

/* flame's collapsed lines add up to the state's total, line by line. */
static void test_flame_collapsed(void **state)
{
    (void)state;
    tk_out o;
    run(&o, 1, (const char *const[]){"flame", "1", "--at", "peak", NULL});
    assert_int_equal(o.code, 0);
    long long total = 0;
    for (char *l = o.out; *l;) {
        char *nl = strchr(l, '\n');
        *nl = '\0';
        total += atoll(strrchr(l, ' ') + 1);
        l = nl + 1;
    }
    assert_int_equal(total, FX_PEAK_BYTES);
    tk_out_free(&o);
}

static void test_pprof_with_go(void **state)
{
    (void)state;
    char file[600];
    snprintf(file, sizeof file, "%s.pb.gz", db);
    tk_out o;
    run(&o, 0,
        (const char *const[]){"export", "1", "--at", "peak", "--format", "pprof", "-o", file,
                              NULL});
    assert_int_equal(o.code, 0);
    tk_out_free(&o);
    if (system("command -v go >/dev/null 2>&1") != 0) {
        fprintf(stderr, "test_pprof_with_go: 'go' is not installed (Debian: golang-go); skipped\n");
        skip();
    }
    char home[600];
    snprintf(home, sizeof home, "HOME=%s.home", db);
    const char *argv[] = {"/bin/sh", "-c",
                          "exec go tool pprof -top -sample_index=inuse_space \"$0\"", file, NULL};
    assert_int_equal(tk_run(&o, argv, (const char *const[]){home, "PPROF_TMPDIR=/tmp", NULL},
                            TK_PRELOAD_NONE, 0),
                     0);
    if (o.code) fprintf(stderr, "go tool pprof: %s\n%s\n", o.out, o.err);
    assert_int_equal(o.code, 0);
    /* the same top entries as `heapstore top` by function: big_alloc first */
    char *big = strstr(o.out, "big_alloc"), *leak = strstr(o.out, "leak_site");
    assert_non_null(big);
    assert_non_null(leak);
    assert_true(big < leak);
    assert_non_null(strstr(o.out, "inuse_space"));
    assert_non_null(strstr(o.out, "Total samples = 114.55kB")); /* 117300 B */
    tk_out_free(&o);
    /* alloc_space: every allocation up to the peak, from the raw events */
    const char *argv2[] = {"/bin/sh", "-c",
                           "exec go tool pprof -top -sample_index=alloc_space \"$0\"", file, NULL};
    assert_int_equal(tk_run(&o, argv2, (const char *const[]){home, NULL}, TK_PRELOAD_NONE, 0), 0);
    assert_int_equal(o.code, 0);
    assert_non_null(strstr(o.out, "tmp_alloc"));
    tk_out_free(&o);
    unlink(file);
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s.home'", db);
    if (system(cmd)) {
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tables),
        cmocka_unit_test(test_json_same_both_ways),
        cmocka_unit_test(test_same_output_both_ways),
        cmocka_unit_test(test_bad_input),
        cmocka_unit_test(test_flame_collapsed),
        cmocka_unit_test(test_pprof_with_go),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
