/* test_trend: questions across many runs on real runs of wl_trend
 * (tests/queries/trend/wl_trend.c) under the real collector, every
 * allocation sampled, through `heapstore run` and the CLI, in direct mode and
 * against a real server:
 *   - three versions, two runs each, recorded out of their natural order
 *     (1.9, 1.10, 1.2); 1.10 carries a regression planted in one function
 *     (regressed_cache): trend --by version lists 1.2, 1.9, 1.10, shows the
 *     step at 1.10 in the peak, the end and the leak rate, and --function
 *     names that function's bytes at the peak and at the end;
 *   - trend by run: one row per run, oldest first; the same JSON from the
 *     database file and from the server;
 *   - /api/runs pages with before= and next: every run exactly once;
 *   - gc through the server (write token; the read token is refused): a dry
 *     run removes nothing; --keep 1 --per version removes exactly the oldest
 *     run of each version, every row of theirs, the database shrinks, and
 *     the remaining runs' answers do not change; gc on the file by selector;
 *   - a database of schema 8 is answered the same, and migrates to 9;
 *   - a run being recorded is spared by gc, and ends whole.
 * Sizes are exact (every allocation sampled): tolerances are stated where
 * a figure depends on the machine's pace (the leak rate). */
#include <fcntl.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include <sqlite3.h>

#include "fixture.h"
#include "hs_qstore.h"
#include "hs_schema.h"
#include "hs_testkit.h"
#include "store_sqlite.h"

#define KIB       1024LL
#define MIB       (1024 * KIB)
#define BASE_KIB  "4096"
#define EXTRA_KIB 8192
#define RUN_MS    "800"
/* wl_trend.c: peak = base + extra * 21 / 40 + 8 MiB; end = base + extra */
#define PEAK_OK    (4 * MIB + 8 * MIB)
#define STEP_BYTES (EXTRA_KIB * KIB / 40) /* regressed_cache's block */
#define PEAK_BAD   (PEAK_OK + STEP_BYTES * 21)

static char db[512], cli[512], wl[512];
static const char *const noenv[] = {"HEAPSTORE_URL=", "HEAPSTORE_TOKEN=", NULL};
static tk_server srv;

static void profile(const char *version, const char *extra)
{
    char label[64];
    snprintf(label, sizeof label, "version=%s", version);
    const char *argv[] = {cli,   "run", "--sample", "1",      "--db", db,     "--label",
                          label, "--",  wl,         BASE_KIB, extra,  RUN_MS, NULL};
    tk_out o;
    assert_int_equal(tk_run(&o, argv, noenv, TK_PRELOAD_NONE, 0), 0);
    if (o.code) fprintf(stderr, "heapstore run: %s\n%s\n", o.out, o.err);
    assert_int_equal(o.code, 0);
    tk_out_free(&o);
}

static int setup(void **state)
{
    (void)state;
    fx_tmp_path(db, sizeof db, "trend.db");
    snprintf(cli, sizeof cli, "%s", tk_build_path("bin/heapstore"));
    const char *b = getenv("HS_BUILD_DIR");
    snprintf(wl, sizeof wl, "%s/tests/wl_trend", b ? b : ".");
    char extra[16];
    snprintf(extra, sizeof extra, "%d", EXTRA_KIB);
    static const char *const order[] = {"1.9", "1.9", "1.10", "1.10", "1.2", "1.2"};
    for (int i = 0; i < 6; i++) profile(order[i], !strcmp(order[i], "1.10") ? extra : "0");
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    tk_server_stop(&srv, SIGTERM);
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'*", db);
    return system(cmd) == 0 ? 0 : -1;
}

/* The CLI's answer; url NULL: direct mode on db. env: HEAPSTORE_TOKEN=… */
static json_t *cli_json_at(const char *url, const char *token, const char *const *args)
{
    const char *a[24];
    int n = 0;
    for (int i = 0; args[i]; i++) a[n++] = args[i];
    if (!url) a[n++] = "--db", a[n++] = db;
    a[n++] = "--json";
    a[n] = NULL;
    char u[128], t[128];
    snprintf(u, sizeof u, "HEAPSTORE_URL=%s", url ? url : "");
    snprintf(t, sizeof t, "HEAPSTORE_TOKEN=%s", token ? token : "");
    const char *env[] = {u, t, NULL};
    return tk_cli_json(a, env);
}

static json_t *cli_json(const char *const *args)
{
    return cli_json_at(NULL, NULL, args);
}

static int64_t jint(const json_t *o, const char *k)
{
    return (int64_t)json_integer_value(json_object_get(o, k));
}

static void test_trend_by_version(void **state)
{
    (void)state;
    json_t *j = cli_json((const char *const[]){"trend", "program=wl_trend", "--by", "version",
                                               "--function", "regressed_cache", NULL});
    json_t *rows = json_object_get(j, "rows");
    assert_int_equal(json_array_size(rows), 3);
    static const char *const want[] = {"1.2", "1.9", "1.10"}; /* natural order */
    for (size_t i = 0; i < 3; i++) {
        json_t *r = json_array_get(rows, i);
        assert_string_equal(json_string_value(json_object_get(r, "value")), want[i]);
        assert_int_equal(jint(r, "runs"), 2);
        int bad = i == 2;
        /* every allocation sampled: the sizes are exact (the peak within a
         * request buffer of the collector's own, 64 KiB) */
        tk_near("peak", (double)jint(r, "peak_bytes"), (double)(bad ? PEAK_BAD : PEAK_OK),
                64 * KIB);
        tk_near("end", (double)jint(r, "end_bytes"),
                (double)(4 * MIB + (bad ? EXTRA_KIB * KIB : 0)), 64 * KIB);
        assert_int_equal(jint(r, "code_bytes"), bad ? STEP_BYTES * 21 : 0);
        /* the leak rate: the regression's 8 MiB over the steps of the run,
         * which take RUN_MS at least and the whole run at most (start-up
         * and exit add to the run, not to the steps); the rest flat */
        double rate = json_number_value(json_object_get(r, "leak_bytes_per_s"));
        double secs = (double)jint(r, "duration_ns") / 1e9, steps = atof(RUN_MS) / 1e3;
        double lo = 0.7 * EXTRA_KIB * KIB / secs, hi = 1.3 * EXTRA_KIB * KIB / steps;
        if (bad && !(rate >= lo && rate <= hi))
            fprintf(stderr, "leak rate %.0f B/s, expected %.0f to %.0f\n", rate, lo, hi);
        if (bad) assert_true(rate >= lo && rate <= hi);
        if (!bad) tk_near("leak rate of an unchanged version", rate, 0, 64 * KIB);
        assert_true(jint(r, "rss_peak_bytes") >= jint(r, "peak_bytes") / 2);
    }
    assert_string_equal(json_string_value(json_object_get(j, "metric")), "code_bytes");
    json_decref(j);

    j = cli_json((const char *const[]){"trend", "program=wl_trend", "--by", "version", "--function",
                                       "regressed_cache", "--at", "end", NULL});
    rows = json_object_get(j, "rows");
    assert_int_equal(jint(json_array_get(rows, 0), "code_bytes"), 0);
    assert_int_equal(jint(json_array_get(rows, 2), "code_bytes"), STEP_BYTES * 40);
    json_decref(j);

    /* a site: the function's line, as FILE:LINE, as the label the tables
     * print, or by its function */
    static const char *const sites[] = {"wl_trend.c:62", "regressed_cache (wl_trend.c:62)",
                                        "regressed_cache"};
    for (size_t i = 0; i < 3; i++) {
        j = cli_json((const char *const[]){"trend", "version=1.10", "--site", sites[i], NULL});
        rows = json_object_get(j, "rows");
        assert_int_equal(json_array_size(rows), 2);
        assert_int_equal(jint(json_array_get(rows, 1), "code_bytes"), STEP_BYTES * 21);
        assert_non_null(json_object_get(json_object_get(j, "code"), "site"));
        json_decref(j);
    }
}

static void test_trend_runs_and_sparkline(void **state)
{
    (void)state;
    json_t *j = cli_json((const char *const[]){"trend", "all", NULL});
    json_t *rows = json_object_get(j, "rows");
    assert_int_equal(json_array_size(rows), 6);
    for (size_t i = 0; i < 6; i++) /* oldest first: ids in the order recorded */
        assert_int_equal(jint(json_array_get(rows, i), "run"), (int64_t)i + 1);
    assert_true(jint(json_array_get(rows, 2), "peak_bytes") >
                jint(json_array_get(rows, 0), "peak_bytes"));
    assert_int_equal(jint(j, "runs_read"), 6);
    json_decref(j);
    j = cli_json((const char *const[]){"trend", "all", "--limit", "2", NULL});
    assert_int_equal(json_array_size(json_object_get(j, "rows")), 2);
    assert_int_equal(jint(json_array_get(json_object_get(j, "rows"), 0), "run"), 5);
    assert_true(json_is_true(json_object_get(j, "truncated")));
    json_decref(j);

    /* the table's line: the two 1.10 runs highest, the others lowest */
    const char *argv[] = {cli, "trend", "all", "--db", db, NULL};
    tk_out o;
    assert_int_equal(tk_run(&o, argv, noenv, TK_PRELOAD_NONE, 0), 0);
    assert_int_equal(o.code, 0);
    assert_non_null(strstr(o.out, "peak_bytes: ▁▁██▁▁"));
    tk_out_free(&o);
    const char *bad[] = {cli, "trend", "all", "--metric", "bogus", "--db", db, NULL};
    assert_int_equal(tk_run(&o, bad, noenv, TK_PRELOAD_NONE, 0), 0);
    assert_int_equal(o.code, 1);
    assert_non_null(strstr(o.err, "metric must be"));
    tk_out_free(&o);
}

/* The server on db, with a write and a read token. */
static void server_up(char *url, size_t len)
{
    if (!srv.pid) {
        const char *extra[] = {"--token", "wtok", "--read-token", "rtok", NULL};
        assert_int_equal(tk_server_start(&srv, db, 0, extra), 0);
    }
    snprintf(url, len, "http://127.0.0.1:%d", srv.port);
}

static void test_trend_server_same(void **state)
{
    (void)state;
    char url[64];
    server_up(url, sizeof url);
    const char *const cases[][8] = {
        {"trend", "all", NULL},
        {"trend", "program=wl_trend", "--by", "version", "--function", "regressed_cache", NULL},
        {"trend", "version=1.9", "--metric", "leak_rate", NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        json_t *a = cli_json(cases[i]), *b = cli_json_at(url, "rtok", cases[i]);
        assert_true(json_equal(a, b));
        json_decref(a);
        json_decref(b);
    }
    /* a bad parameter: 400 with the API's error */
    char req[256];
    snprintf(req, sizeof req,
             "GET /api/trend?runs=all&at=sometime HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
             "rtok\r\nConnection: close\r\n\r\n");
    char *ans = tk_exchange(srv.port, req, strlen(req), 5000);
    assert_non_null(ans);
    assert_int_equal(tk_http_status(ans), 400);
    assert_non_null(strstr(tk_http_body(ans), "bad_request"));
    free(ans);
}

/* GET target from the server with the read token; the JSON answer. */
static json_t *api_get(const char *target)
{
    char req[512];
    snprintf(req, sizeof req,
             "GET %s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer rtok\r\nConnection: "
             "close\r\n\r\n",
             target);
    char *ans = tk_exchange(srv.port, req, strlen(req), 5000);
    assert_non_null(ans);
    assert_int_equal(tk_http_status(ans), 200);
    json_t *j = json_loads(tk_http_body(ans), 0, NULL);
    free(ans);
    assert_non_null(j);
    return j;
}

static void test_runs_paging(void **state)
{
    (void)state;
    char url[64], target[128] = "/api/runs?limit=4";
    server_up(url, sizeof url);
    int seen[7] = {0}, pages = 0;
    for (;;) {
        json_t *j = api_get(target);
        size_t i;
        json_t *r;
        int64_t prev = INT64_MAX;
        json_array_foreach(json_object_get(j, "runs"), i, r)
        {
            int64_t id = jint(r, "id");
            assert_true(id >= 1 && id <= 6 && id < prev); /* newest first */
            seen[id]++;
            prev = id;
        }
        pages++;
        json_t *next = json_object_get(j, "next");
        if (json_is_null(next)) {
            json_decref(j);
            break;
        }
        snprintf(target, sizeof target, "/api/runs?limit=4&before=%lld",
                 (long long)json_integer_value(next));
        json_decref(j);
        assert_true(pages < 5);
    }
    assert_int_equal(pages, 2);
    for (int id = 1; id <= 6; id++) assert_int_equal(seen[id], 1);
    /* the CLI's --before, on the file */
    json_t *p1 = cli_json((const char *const[]){"runs", "--limit", "4", NULL});
    assert_int_equal(jint(p1, "next"), 3);
    json_decref(p1);
    json_t *p2 = cli_json((const char *const[]){"runs", "--limit", "4", "--before", "3", NULL});
    assert_int_equal(json_array_size(json_object_get(p2, "runs")), 2);
    assert_int_equal(jint(json_array_get(json_object_get(p2, "runs"), 0), "id"), 2);
    assert_true(json_is_null(json_object_get(p2, "next")));
    json_decref(p2);
}

/* The rows of the runs table's other tables that name run. */
static int64_t rows_of(const char *table, int64_t run)
{
    char sql[200];
    snprintf(sql, sizeof sql, "SELECT COUNT(*) FROM %s WHERE run = %lld", table, (long long)run);
    json_t *j = cli_json((const char *const[]){"sql", sql, NULL});
    int64_t n =
        json_integer_value(json_array_get(json_array_get(json_object_get(j, "rows"), 0), 0));
    json_decref(j);
    return n;
}

static void test_gc(void **state)
{
    (void)state;
    char url[64];
    server_up(url, sizeof url);
    json_t *before = cli_json((const char *const[]){"trend", "all", NULL});
    /* the read token may not remove runs */
    const char *argv[] = {cli, "gc", "--keep", "1", NULL};
    char u[128];
    snprintf(u, sizeof u, "HEAPSTORE_URL=%s", url);
    tk_out o;
    assert_int_equal(tk_run(&o, argv, (const char *const[]){u, "HEAPSTORE_TOKEN=rtok", NULL},
                            TK_PRELOAD_NONE, 0),
                     0);
    assert_int_equal(o.code, 1);
    assert_non_null(strstr(o.err, "write token"));
    tk_out_free(&o);

    json_t *dry = cli_json_at(
        url, "wtok",
        (const char *const[]){"gc", "--keep", "1", "--per", "version", "--dry-run", NULL});
    assert_int_equal(json_array_size(json_object_get(dry, "runs")), 3);
    assert_int_equal(jint(dry, "runs_removed"), 0);
    json_decref(dry);
    json_t *all = cli_json((const char *const[]){"trend", "all", NULL});
    assert_int_equal(json_array_size(json_object_get(all, "rows")), 6); /* nothing went */
    json_decref(all);

    json_t *gc = cli_json_at(url, "wtok",
                             (const char *const[]){"gc", "--keep", "1", "--per", "version", NULL});
    /* the oldest of each version: runs 1 (1.9), 3 (1.10), 5 (1.2) */
    json_t *gone = json_object_get(gc, "runs");
    assert_int_equal(json_array_size(gone), 3);
    for (size_t i = 0; i < 3; i++) assert_int_equal(jint(json_array_get(gone, i), "id"), 2 * i + 1);
    assert_int_equal(jint(gc, "runs_removed"), 3);
    assert_true(jint(gc, "db_bytes_after") < jint(gc, "db_bytes_before") * 3 / 4);
    json_decref(gc);
    tk_server_stop(&srv, SIGTERM);
    memset(&srv, 0, sizeof srv);

    static const char *const tables[] = {"events",     "snapshots", "heap_series",    "trace_stats",
                                         "run_labels", "run_pcs",   "run_stacks",     "run_maps",
                                         "mappings",   "size_hist", "process_samples"};
    for (int64_t run = 1; run <= 6; run++)
        for (size_t t = 0; t < sizeof tables / sizeof tables[0]; t++) {
            int64_t n = rows_of(tables[t], run);
            if (run % 2) assert_int_equal(n, 0);
            if (!(run % 2) && strcmp(tables[t], "mappings") && strcmp(tables[t], "trace_stats"))
                assert_true(n > 0);
        }
    /* the remaining runs' answers are unchanged */
    json_t *after = cli_json((const char *const[]){"trend", "all", NULL});
    json_t *ra = json_object_get(after, "rows"), *rb = json_object_get(before, "rows");
    assert_int_equal(json_array_size(ra), 3);
    for (size_t i = 0; i < 3; i++)
        assert_true(json_equal(json_array_get(ra, i), json_array_get(rb, 2 * i + 1)));
    json_decref(after);
    json_decref(before);

    /* on the file (no server): by selector */
    json_t *sel = cli_json((const char *const[]){"gc", "version=1.10", NULL});
    assert_int_equal(jint(sel, "runs_removed"), 1);
    assert_int_equal(jint(json_array_get(json_object_get(sel, "runs"), 0), "id"), 4);
    json_decref(sel);
    after = cli_json((const char *const[]){"trend", "all", NULL});
    assert_int_equal(json_array_size(json_object_get(after, "rows")), 2);
    json_decref(after);
}

/* runs_summary's statement: one pass over the runs by runs_start, the
 * code's subtree (found beforehand) as a list, and each run's bytes by key
 * seeks into its snapshot; no table read whole. */
static void test_summary_plan(void **state)
{
    (void)state;
    hs_qstore *s;
    hs_qerr err;
    assert_int_equal(hs_qstore_sqlite_open(&s, db, &err), 0);
    hs_qstore_filter f[] = {{"program", "wl_trend"}};
    hs_qstore_summary_ask ask = {
        .f = f, .n = 1, .limit = 10, .by = "version", .function = "regressed_cache"};
    for (int seek = 0; seek < 2; seek++) {
        char *sql = hs__sqlite_summary_sql(s, &ask, seek), *eqp = NULL;
        assert_non_null(sql);
        assert_true(asprintf(&eqp, "EXPLAIN QUERY PLAN %s", sql) > 0);
        sqlite3_stmt *st;
        assert_int_equal(sqlite3_prepare_v2(((hs__sqlite *)s)->db, eqp, -1, &st, NULL), SQLITE_OK);
        char plan[8192] = "";
        int full = 0;
        while (sqlite3_step(st) == SQLITE_ROW) {
            const char *d = (const char *)sqlite3_column_text(st, 3);
            strncat(plan, d, sizeof plan - strlen(plan) - 3);
            strcat(plan, "; ");
            /* a SCAN of a table (not of one of the statement's CTEs) */
            static const char *const ctes[] = {"SCAN sel",        "SCAN sub", "SCAN pk",
                                               "SCAN code",       "SCAN m",   "SCAN json_each",
                                               "SEARCH json_each"};
            int cte = 0;
            for (size_t i = 0; i < sizeof ctes / sizeof ctes[0]; i++)
                cte |= !strncmp(d, ctes[i], strlen(ctes[i]));
            /* (the snapshots' virtual table reads one run's blocks by key) */
            if (!strncmp(d, "SCAN ", 5) && !strstr(d, "USING") && !cte &&
                !(strstr(d, "VIRTUAL TABLE INDEX") && strstr(d, ":run=?")))
                full = 1;
        }
        sqlite3_finalize(st);
        if (full) fprintf(stderr, "runs_summary reads a table whole: %s\n", plan);
        assert_false(full);
        assert_non_null(strstr(plan, "json_each"));
        assert_null(strstr(plan, "traces"));
        /* a run's bytes: its snapshot at one bucket, by key (the trace too
         * when the subtree is a list SQLite can walk) */
        assert_non_null(strstr(plan, "SCAN s VIRTUAL TABLE INDEX"));
        assert_non_null(strstr(plan, ":run=? AND kind=? AND bucket=?"));
        if (seek) assert_non_null(strstr(plan, ":run=? AND kind=? AND bucket=? AND trace=?"));
        /* the runs row of each selected run, not every run */
        assert_non_null(strstr(plan, "SEARCH r USING INTEGER PRIMARY KEY (rowid=?)"));
        free(eqp);
        free(sql);
    }
    hs_qstore_free(s);
}

/* A database of schema 8 (before the runs' summaries): read as it is, the
 * summaries are computed by the query; opened by a writer, it migrates and
 * the stored figures are the same. */
static void test_schema8_migrates(void **state)
{
    (void)state;
    char old[600], cmd[2000];
    snprintf(old, sizeof old, "%s.v8", db);
    snprintf(cmd, sizeof cmd, "rm -f '%s'* && cp '%s' '%s'", old, db, old);
    assert_int_equal(system(cmd), 0);
    sqlite3 *h;
    assert_int_equal(sqlite3_open(old, &h), SQLITE_OK);
    /* the stack tree back in its table (the rest of schema 10 left as it
     * is: readers of 8 do not look at it) */
    assert_int_equal(sqlite3_exec(h,
                                  TK_TREE_AS_ROWS_SQL TK_SNAPS_AS_ROWS_SQL TK_MAPS_AS_ROWS_SQL
                                  "DROP INDEX traces_frame; ALTER TABLE runs "
                                  "DROP COLUMN rss_peak_bytes; ALTER TABLE "
                                  "runs DROP COLUMN leak_bytes_per_s; PRAGMA "
                                  "user_version = 8;",
                                  NULL, NULL, NULL),
                     SQLITE_OK);
    sqlite3_close(h);
    const char *const args[] = {"trend", "all", "--function", "regressed_cache", NULL};
    json_t *want = cli_json(args);
    const char *argv[] = {cli,    "trend", "all",    "--function", "regressed_cache",
                          "--db", old,     "--json", NULL};
    tk_out o;
    for (int pass = 0; pass < 2; pass++) {
        assert_int_equal(tk_run(&o, argv, noenv, TK_PRELOAD_NONE, 0), 0);
        assert_int_equal(o.code, 0);
        json_t *got = json_loads(o.out, 0, NULL);
        assert_true(json_equal(got, want));
        json_decref(got);
        tk_out_free(&o);
        if (pass) break;
        /* a writer opens it: schema 9, the summaries stored */
        const char *gc[] = {cli, "gc", "--keep", "100", "--dry-run", "--db", old, NULL};
        assert_int_equal(tk_run(&o, gc, noenv, TK_PRELOAD_NONE, 0), 0);
        assert_int_equal(o.code, 0);
        tk_out_free(&o);
        assert_int_equal(sqlite3_open(old, &h), SQLITE_OK);
        sqlite3_stmt *st;
        assert_int_equal(
            sqlite3_prepare_v2(h,
                               "SELECT (SELECT user_version FROM pragma_user_version), "
                               "COUNT(*) FROM runs WHERE leak_bytes_per_s IS NOT NULL "
                               "AND rss_peak_bytes IS NOT NULL",
                               -1, &st, NULL),
            SQLITE_OK);
        assert_int_equal(sqlite3_step(st), SQLITE_ROW);
        assert_int_equal(sqlite3_column_int(st, 0), hs_schema_version());
        assert_int_equal(sqlite3_column_int(st, 1), 6);
        sqlite3_finalize(st);
        sqlite3_close(h);
    }
    json_decref(want);
    snprintf(cmd, sizeof cmd, "rm -f '%s'*", old);
    assert_int_equal(system(cmd), 0);
}

/* A run being recorded is never removed: gc by a selector that names it
 * removes nothing while it is open, and the run ends whole. */
static void test_gc_spares_open_run(void **state)
{
    (void)state;
    char url[64], tcp[96], tok[] = "HEAPSTORE_TOKEN=wtok";
    server_up(url, sizeof url);
    snprintf(tcp, sizeof tcp, "HEAPSTORE_URL=tcp://127.0.0.1:%d", srv.port);
    pid_t bg = fork();
    assert_true(bg >= 0);
    if (bg == 0) {
        putenv(tcp);
        putenv(tok);
        int null = open("/dev/null", O_WRONLY);
        dup2(null, 1);
        dup2(null, 2);
        execl(cli, cli, "run", "--sample", "1", "--label", "version=open", "--", wl, BASE_KIB, "0",
              "4000", (char *)NULL);
        _exit(127);
    }
    int open_runs = 0;
    for (int i = 0; i < 300 && !open_runs; i++) {
        json_t *j = api_get("/api/runs?state=open&label=version%3Dopen");
        open_runs = (int)json_array_size(json_object_get(j, "runs"));
        json_decref(j);
        if (!open_runs) usleep(100000);
    }
    assert_int_equal(open_runs, 1);
    json_t *gc = cli_json_at(url, "wtok", (const char *const[]){"gc", "version=open", NULL});
    assert_int_equal(jint(gc, "runs_removed"), 0);
    json_decref(gc);
    int status;
    assert_int_equal(waitpid(bg, &status, 0), bg);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    json_t *t = cli_json_at(url, "rtok", (const char *const[]){"trend", "version=open", NULL});
    json_t *row = json_array_get(json_object_get(t, "rows"), 0);
    assert_string_equal(json_string_value(json_object_get(row, "state")), "ended");
    tk_near("the spared run's peak", (double)jint(row, "peak_bytes"), (double)PEAK_OK, 64 * KIB);
    json_decref(t);
    /* out of the way of the next test's counts */
    gc = cli_json_at(url, "wtok", (const char *const[]){"gc", "version=open", NULL});
    assert_int_equal(jint(gc, "runs_removed"), 1);
    json_decref(gc);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_trend_by_version),   cmocka_unit_test(test_trend_runs_and_sparkline),
        cmocka_unit_test(test_trend_server_same),  cmocka_unit_test(test_runs_paging),
        cmocka_unit_test(test_summary_plan),       cmocka_unit_test(test_schema8_migrates),
        cmocka_unit_test(test_gc_spares_open_run), cmocka_unit_test(test_gc),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
