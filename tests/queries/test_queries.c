/* test_queries: every question of queries/ against runs with a known heap
 * (fixture.h), through hs_api_handle() as the server and the CLI call it:
 * the answers, the error statuses and bodies, and the query plans. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#include <cmocka.h>

#include "fixture.h"
#include "hs_error.h"
#include "hs_queries.h"
#include "q_internal.h"
#include "store_sqlite.h"

/* The SQLite store's connection under q. */
#define QDB(q) (((hs__sqlite *)(q)->store)->db)

static char db_path[512];
static hs_q *q;

static int setup(void **state)
{
    (void)state;
    fx_tmp_path(db_path, sizeof db_path, "queries.db");
    if (fx_build(db_path)) return -1;
    hs_qerr err;
    if (hs_q_open(&q, db_path, &err)) {
        fprintf(stderr, "open: %s\n", err.msg);
        return -1;
    }
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    hs_q_free(q);
    char p[600];
    unlink(db_path);
    snprintf(p, sizeof p, "%s-wal", db_path);
    unlink(p);
    snprintf(p, sizeof p, "%s-shm", db_path);
    unlink(p);
    return 0;
}

/* GET target; asserts the status; returns the JSON (caller decrefs). */
static json_t *get(const char *target, int status)
{
    hs_api_reply r;
    hs_api_handle(q, "GET", target, NULL, 0, &r);
    if (r.status != status) {
        char *s = r.json ? json_dumps(r.json, 0) : NULL;
        fprintf(stderr, "GET %s: status %d, wanted %d: %s\n", target, r.status, status,
                s ? s : "(file)");
        free(s);
    }
    assert_int_equal(r.status, status);
    if (status != 200) { /* every error is {"error": {"code", "message"}} */
        json_t *e = json_object_get(r.json, "error");
        assert_non_null(json_string_value(json_object_get(e, "code")));
        assert_true(strlen(json_string_value(json_object_get(e, "message"))) > 5);
    }
    json_t *j = json_incref(r.json);
    hs_api_reply_clear(&r);
    return j;
}

static int64_t ji(const json_t *o, const char *k)
{
    return (int64_t)json_integer_value(json_object_get(o, k));
}

static const char *js(const json_t *o, const char *k)
{
    const char *s = json_string_value(json_object_get(o, k));
    return s ? s : "";
}

/* ---- selectors (pure) ----------------------------------------------------- */

static void test_selectors(void **state)
{
    (void)state;
    static const struct {
        const char *in;
        int rc, kind, nkv;
    } runs[] = {
        {"3", 0, HS_RUNSEL_ID, 0},
        {"latest", 0, HS_RUNSEL_LATEST, 0},
        {"a1b2", 0, HS_RUNSEL_UUID, 0},
        {"A1B2C3D4E5F60718293a4b5c6d7e8f90", 0, HS_RUNSEL_UUID, 0},
        {"program=app,latest", 0, HS_RUNSEL_MATCH, 1},
        {"program=/usr/bin/x,version=2", 0, HS_RUNSEL_MATCH, 2},
        {"host=h,id=4,latest", 0, HS_RUNSEL_MATCH, 2},
        {"", HS_EINVAL, 0, 0},
        {"xyz", HS_EINVAL, 0, 0},
        {"program=", HS_EINVAL, 0, 0},
        {"=app", HS_EINVAL, 0, 0},
        {"program=app,,latest", HS_EINVAL, 0, 0},
        {"latest,program=app", HS_EINVAL, 0, 0},
        {"program=a=b", HS_EINVAL, 0, 0},
        {"id=x1", HS_EINVAL, 0, 0},
        {"a b=c", HS_EINVAL, 0, 0},
        {"0123456789abcdef0123456789abcdef0", HS_EINVAL, 0, 0},
    };
    for (size_t i = 0; i < HS_COUNTOF(runs); i++) {
        hs_run_sel sel;
        hs_qerr err = {0};
        int rc = hs_sel_parse_run(&sel, runs[i].in, &err);
        if (rc != runs[i].rc) fprintf(stderr, "run selector '%s': rc %d\n", runs[i].in, rc);
        assert_int_equal(rc, runs[i].rc);
        if (rc) {
            assert_true(strlen(err.msg) > 10);
            assert_int_equal(err.code, HS_EINVAL);
            continue;
        }
        assert_int_equal(sel.kind, runs[i].kind);
        assert_int_equal(sel.nkv, runs[i].nkv);
    }
    static const struct {
        const char *in;
        int rc, kind;
        int64_t ns;
    } ts[] = {
        {"1.5", 0, HS_TSEL_SECONDS, 1500000000},
        {"0", 0, HS_TSEL_SECONDS, 0},
        {"2s", 0, HS_TSEL_SECONDS, 2000000000},
        {".25", 0, HS_TSEL_SECONDS, 250000000},
        {"0.000000001", 0, HS_TSEL_SECONDS, 1},
        {"1.1234567891", 0, HS_TSEL_SECONDS, 1123456789},
        {"peak", 0, HS_TSEL_PEAK, 0},
        {"end", 0, HS_TSEL_END, 0},
        {"", HS_EINVAL, 0, 0},
        {"-1", HS_EINVAL, 0, 0},
        {"1e3", HS_EINVAL, 0, 0},
        {"1.2.3", HS_EINVAL, 0, 0},
        {".", HS_EINVAL, 0, 0},
        {"Peak", HS_EINVAL, 0, 0},
        {"99999999999", HS_EINVAL, 0, 0},
    };
    for (size_t i = 0; i < HS_COUNTOF(ts); i++) {
        hs_t_sel t;
        hs_qerr err;
        int rc = hs_sel_parse_t(&t, ts[i].in, &err);
        if (rc != ts[i].rc) fprintf(stderr, "T '%s': rc %d\n", ts[i].in, rc);
        assert_int_equal(rc, ts[i].rc);
        if (rc) continue;
        assert_int_equal(t.kind, ts[i].kind);
        assert_int_equal(t.ns, ts[i].ns);
    }
    hs_run_sel r;
    hs_t_sel t;
    hs_qerr err;
    assert_int_equal(hs_sel_parse_at(&r, &t, "program=app,latest@1.5", "end", &err), 0);
    assert_int_equal(r.kind, HS_RUNSEL_MATCH);
    assert_int_equal(t.ns, 1500000000);
    assert_int_equal(hs_sel_parse_at(&r, &t, "7", "end", &err), 0);
    assert_int_equal(t.kind, HS_TSEL_END);
    assert_int_equal(hs_sel_parse_at(&r, &t, "7@", "end", &err), HS_EINVAL);
}

/* ---- runs ------------------------------------------------------------------- */

static void test_runs(void **state)
{
    (void)state;
    json_t *j = get("/api/runs", 200);
    json_t *runs = json_object_get(j, "runs");
    assert_int_equal(json_array_size(runs), 2);
    json_t *b = json_array_get(runs, 0), *a = json_array_get(runs, 1); /* newest first */
    assert_int_equal(ji(a, "id"), 1);
    assert_int_equal(ji(b, "id"), 2);
    assert_string_equal(js(a, "program"), "/opt/app/bin/app");
    assert_string_equal(js(a, "host"), "testhost");
    assert_string_equal(js(json_object_get(a, "labels"), "version"), "1");
    assert_string_equal(js(a, "state"), "ended");
    assert_true(json_is_true(json_object_get(a, "clean_exit")));
    assert_int_equal(ji(a, "peak_bytes"), FX_PEAK_BYTES);
    assert_int_equal(ji(a, "peak_t_ns"), FX_PEAK_NS);
    assert_int_equal(ji(a, "end_bytes"), FX_END_BYTES);
    assert_int_equal(ji(a, "end_count"), FX_END_COUNT);
    assert_int_equal(ji(a, "duration_ns"), 2000000000);
    assert_int_equal(ji(a, "granularity_ns"), 100000000);
    assert_int_equal(ji(a, "start_unix_ms"), 1700000010000LL);
    assert_int_equal(ji(json_object_get(a, "sampling"), "sample_bytes"), 1);
    assert_non_null(json_object_get(json_object_get(a, "sampling"), "dropped"));
    assert_int_equal(strlen(js(a, "uuid")), 32);
    assert_int_equal(ji(b, "end_bytes"), FX_V2_END_BYTES);
    json_decref(j);

    j = get("/api/runs?label=version=1", 200);
    assert_int_equal(json_array_size(json_object_get(j, "runs")), 1);
    json_decref(j);
    j = get("/api/runs?program=app&host=testhost&limit=1", 200);
    assert_int_equal(json_array_size(json_object_get(j, "runs")), 1);
    json_decref(j);
    j = get("/api/runs?program=nothere", 200);
    assert_int_equal(json_array_size(json_object_get(j, "runs")), 0);
    json_decref(j);
    json_decref(get("/api/runs?limit=0", 400));
    json_decref(get("/api/runs?label=novalue", 400));

    /* run selectors */
    static const struct {
        const char *path;
        int status;
        int64_t id;
    } sel[] = {
        {"/api/runs/1", 200, 1},
        {"/api/runs/latest", 200, 2},
        {"/api/runs/program=app,version=1,latest", 200, 1},
        {"/api/runs/program=%2Fopt%2Fapp%2Fbin%2Fapp,latest", 200, 2},
        {"/api/runs/version=2", 200, 2},
        {"/api/runs/a1", 200, 1}, /* uuid prefix (uuid a1000…42) */
        {"/api/runs/a", 400, 0},  /* two uuids start with 'a': ambiguous */
        {"/api/runs/99", 404, 0},
        {"/api/runs/program=other", 404, 0},
        {"/api/runs/not-a-run", 400, 0},
        {"/api/runs/1/nothing", 404, 0},
    };
    for (size_t i = 0; i < HS_COUNTOF(sel); i++) {
        j = get(sel[i].path, sel[i].status);
        if (sel[i].status == 200) assert_int_equal(ji(json_object_get(j, "run"), "id"), sel[i].id);
        json_decref(j);
    }
}

static void test_api_errors(void **state)
{
    (void)state;
    json_decref(get("/api/nothing", 404));
    json_decref(get("/api/runs/1/top?at=3", 400));    /* outside the 2 s run */
    json_decref(get("/api/runs/1/top?at=soon", 400)); /* malformed */
    json_decref(get("/api/runs/1/top?by=file", 400)); /* unknown grouping */
    json_decref(get("/api/runs/1/top?limit=x", 400)); /* not a number */
    json_decref(get("/api/runs/1/flame?min_share=2", 400));
    json_decref(get("/api/runs/1/export?format=svg", 400));
    json_decref(get("/api/runs/1/history?format=xml", 400));
    json_decref(get("/api/runs/1/history?trace=1,x", 400));
    json_decref(get("/api/diff?a=1", 400));
    json_decref(get("/api/diff?a=1&b=77", 404));
    json_decref(get("/api/diff?a=1@9&b=2", 400));
    json_decref(get("/api/runs/1/top?at=%zz", 400));
    hs_api_reply r;
    hs_api_handle(q, "DELETE", "/api/runs/1", NULL, 0, &r);
    assert_int_equal(r.status, 405);
    hs_api_reply_clear(&r);
    hs_api_handle(NULL, "GET", "/api/health", NULL, 0, &r); /* no database: health answers */
    assert_int_equal(r.status, 200);
    assert_true(json_is_false(json_object_get(r.json, "database")));
    hs_api_reply_clear(&r);
}

/* ---- history, top, flame ------------------------------------------------------ */

static void test_history(void **state)
{
    (void)state;
    json_t *j = get("/api/runs/1/history?top=2", 200);
    int64_t second = ji(json_array_get(json_object_get(j, "series"), 1), "trace");
    json_decref(j);
    char t[128];
    snprintf(t, sizeof t, "/api/runs/1/history?top=1&trace=%lld", (long long)second);
    j = get(t, 200);
    json_t *pts = json_object_get(j, "points");
    assert_int_equal(json_array_size(pts), 20); /* one per 100 ms bucket */
    int64_t maxb = 0;
    size_t i;
    json_t *p;
    json_array_foreach(pts, i, p) if (ji(p, "heap_max_bytes") > maxb) maxb =
        ji(p, "heap_max_bytes");
    assert_int_equal(maxb, FX_PEAK_BYTES);
    json_t *last = json_array_get(pts, 19);
    assert_int_equal(ji(last, "t_ns"), 2000000000);
    assert_int_equal(ji(last, "heap_bytes"), FX_END_BYTES);
    assert_int_equal(json_array_size(json_object_get(j, "rss")), 20);
    json_t *series = json_object_get(j, "series");
    /* top 2 by highest live bytes: big_alloc (100000), then leak_site (20000); trace=1 is one of
     * them */
    assert_int_equal(json_array_size(series), 2);
    assert_string_equal(
        js(json_array_get(json_object_get(json_array_get(series, 0), "stack"), 0), "function"),
        "big_alloc");
    assert_int_equal(ji(json_array_get(series, 0), "max_bytes"), 100000);
    assert_int_equal(ji(json_array_get(series, 1), "max_bytes"), 20000);
    json_decref(j);

    hs_api_reply r;
    hs_api_handle(q, "GET", "/api/runs/1/history?format=csv", NULL, 0, &r);
    assert_int_equal(r.status, 200);
    assert_non_null(strstr(r.body, "t_ns,heap_bytes,heap_max_bytes,rss_bytes\n"));
    assert_non_null(strstr(r.body, "2000000000,25000,25300,4019000\n"));
    hs_api_reply_clear(&r);
}

static const json_t *row_named(const json_t *rows, const char *name)
{
    size_t i;
    json_t *r;
    json_array_foreach(rows, i, r) if (!strcmp(js(r, "name"), name)) return r;
    return NULL;
}

static void test_top(void **state)
{
    (void)state;
    json_t *j = get("/api/runs/1/top?at=peak&by=site", 200);
    assert_int_equal(ji(j, "at_ns"), FX_PEAK_NS);
    assert_int_equal(ji(j, "total_bytes"), FX_PEAK_BYTES);
    json_t *rows = json_object_get(j, "rows");
    assert_int_equal(json_array_size(rows), 4);
    assert_string_equal(js(json_array_get(rows, 0), "name"), "big_alloc");
    assert_int_equal(ji(json_array_get(rows, 0), "total_bytes"), 100000);
    assert_string_equal(js(json_array_get(rows, 1), "name"), "leak_site");
    assert_int_equal(ji(json_array_get(rows, 1), "total_bytes"), 12000);
    assert_int_equal(ji(json_array_get(rows, 1), "total_count"), 12);
    assert_string_equal(js(json_array_get(rows, 1), "file"), "/src/app.c");
    assert_int_equal(ji(json_array_get(rows, 1), "line"), 20);
    json_t *stack = json_object_get(json_array_get(rows, 1), "stack");
    assert_int_equal(json_array_size(stack), 2);
    assert_string_equal(js(json_array_get(stack, 1), "function"), "main");
    assert_non_null(json_object_get(j, "sampling"));
    json_decref(j);

    j = get("/api/runs/1/top?at=peak&by=function", 200);
    rows = json_object_get(j, "rows");
    const json_t *m = row_named(rows, "main");
    assert_non_null(m);
    assert_int_equal(ji(m, "total_bytes"), FX_PEAK_BYTES);
    assert_int_equal(ji(m, "self_bytes"), 0);
    const json_t *w = row_named(rows, "work");
    assert_int_equal(ji(w, "total_bytes"), 300);
    assert_string_equal(js(json_array_get(rows, 0), "name"), "big_alloc"); /* by self first */
    json_decref(j);

    j = get("/api/runs/1/top?at=end&by=stack&limit=1", 200);
    assert_int_equal(ji(j, "total_bytes"), FX_END_BYTES);
    assert_int_equal(json_array_size(json_object_get(j, "rows")), 1);
    assert_int_equal(ji(j, "rows_total"), 2);
    json_decref(j);

    /* 1.0 s is the end of bucket 9: config + 10 leaks; the round's tmp was freed */
    j = get("/api/runs/1/top?at=1.0", 200);
    assert_int_equal(ji(j, "total_bytes"), 15000);
    assert_int_equal(ji(j, "at_ns"), 1000000000);
    json_decref(j);
    /* 0.33 resolves to the end of its bucket, 0.4 s: config + 4 leaks */
    j = get("/api/runs/1/top?at=0.33", 200);
    assert_int_equal(ji(j, "at_ns"), 400000000);
    assert_int_equal(ji(j, "total_bytes"), 9000);
    json_decref(j);
    /* every bucket's end agrees with heap_series (keyframes + deltas are right) */
    json_t *h = get("/api/runs/1/history", 200);
    size_t i;
    json_t *p;
    json_array_foreach(json_object_get(h, "points"), i, p)
    {
        char t[128];
        snprintf(t, sizeof t, "/api/runs/1/top?at=%.1f", (double)ji(p, "t_ns") / 1e9);
        j = get(t, 200);
        assert_int_equal(ji(j, "total_bytes"), ji(p, "heap_bytes"));
        assert_int_equal(ji(j, "total_count"), ji(p, "heap_count"));
        json_decref(j);
    }
    json_decref(h);
}

static int64_t sum_children(const json_t *n)
{
    int64_t s = ji(n, "self_bytes");
    size_t i;
    json_t *c;
    json_array_foreach(json_object_get(n, "children"), i, c) s += ji(c, "bytes");
    return s;
}

static void check_tree(const json_t *n)
{
    if (json_array_size(json_object_get(n, "children")))
        assert_int_equal(sum_children(n), ji(n, "bytes"));
    size_t i;
    json_t *c;
    json_array_foreach(json_object_get(n, "children"), i, c) check_tree(c);
}

static void test_flame(void **state)
{
    (void)state;
    json_t *j = get("/api/runs/1/flame?at=peak", 200);
    json_t *root = json_object_get(j, "root");
    assert_int_equal(ji(root, "bytes"), FX_PEAK_BYTES);
    assert_int_equal(json_array_size(json_object_get(root, "children")), 1);
    json_t *main_ = json_array_get(json_object_get(root, "children"), 0);
    assert_string_equal(js(main_, "function"), "main");
    assert_string_equal(js(main_, "name"), "main (app.c:10)");
    assert_int_equal(ji(main_, "bytes"), FX_PEAK_BYTES);
    assert_string_equal(js(json_array_get(json_object_get(main_, "children"), 0), "function"),
                        "big_alloc");
    check_tree(root);
    json_decref(j);
    j = get("/api/runs/1/flame?at=peak&min_share=0.01", 200); /* tmp_alloc (0.26%) pruned */
    main_ = json_array_get(json_object_get(json_object_get(j, "root"), "children"), 0);
    assert_int_equal(json_array_size(json_object_get(main_, "children")), 3);
    json_decref(j);
}

/* Collapsed stacks load back, line by line, to the state's totals. */
static void test_collapsed(void **state)
{
    (void)state;
    hs_api_reply r;
    hs_api_handle(q, "GET", "/api/runs/1/flame?at=peak&format=collapsed", NULL, 0, &r);
    assert_int_equal(r.status, 200);
    int64_t total = 0;
    int lines = 0, saw_big = 0;
    for (char *l = r.body; *l;) {
        char *nl = strchr(l, '\n');
        assert_non_null(nl);
        *nl = '\0';
        char *sp = strrchr(l, ' ');
        assert_non_null(sp);
        total += strtoll(sp + 1, NULL, 10);
        if (!strcmp(l, "main;big_alloc 100000")) saw_big = 1;
        lines++;
        l = nl + 1;
    }
    assert_int_equal(total, FX_PEAK_BYTES);
    assert_int_equal(lines, 4);
    assert_true(saw_big);
    hs_api_reply_clear(&r);

    /* min_share prunes the collapsed lines as it prunes the flame's nodes:
     * only big_alloc holds half of the peak */
    hs_api_handle(q, "GET", "/api/runs/1/flame?at=peak&format=collapsed&min_share=0.5", NULL, 0,
                  &r);
    assert_int_equal(r.status, 200);
    assert_string_equal(r.body, "main;big_alloc 100000\n");
    hs_api_reply_clear(&r);
    static const char *const bad[] = {
        "/api/runs/1/flame?format=collapsed&min_share=2",
        "/api/runs/1/flame?format=collapsed&min_share=x",
        "/api/runs/1/export?format=pprof&min_share=0.1",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) json_decref(get(bad[i], 400));
}

/* ---- leaks, diff, sizes ------------------------------------------------------------ */

static void test_leaks(void **state)
{
    (void)state;
    json_t *j = get("/api/runs/1/leaks", 200);
    json_t *grow = json_object_get(j, "growing"), *live = json_object_get(j, "live_at_end");
    assert_true(json_array_size(grow) >= 1);
    assert_string_equal(js(json_array_get(grow, 0), "name"), "leak_site");
    assert_int_equal(ji(json_array_get(grow, 0), "end_bytes"), 20000);
    double slope = json_real_value(json_object_get(json_array_get(grow, 0), "slope_bytes_per_s"));
    assert_true(slope > 9000 && slope < 11000); /* 1000 B per 100 ms */
    assert_true(json_real_value(json_object_get(json_array_get(grow, 0), "r2")) > 0.99);
    assert_null(row_named(grow, "config_load")); /* live at the end, but flat */
    assert_null(row_named(grow, "big_alloc"));
    assert_string_equal(js(json_array_get(live, 0), "name"), "leak_site");
    assert_int_equal(ji(json_array_get(live, 0), "bytes"), 20000);
    assert_int_equal(ji(json_array_get(live, 0), "count"), 20);
    assert_string_equal(js(json_array_get(live, 1), "name"), "config_load");
    json_decref(j);
    j = get("/api/runs/2/leaks", 200); /* the fixed version grows nowhere */
    assert_int_equal(json_array_size(json_object_get(j, "growing")), 0);
    json_decref(j);
}

/* Growth judged by what a site keeps, not by a line's fit: a site that grew
 * in two bursts of three buckets while the program ran on and a cache that
 * filled early are not steady growth; churn that keeps 1000 B of every
 * 3000 B it allocates is, its floor rising every other bucket. */
static void test_leak_trends(void **state)
{
    (void)state;
    char path[512];
    fx_tmp_path(path, sizeof path, "trend.db");
    assert_int_equal(fx_build_trend(path), 0);
    hs_q *tq;
    hs_qerr err;
    assert_int_equal(hs_q_open(&tq, path, &err), 0);
    hs_api_reply r;
    hs_api_handle(tq, "GET", "/api/runs/1/leaks", NULL, 0, &r);
    assert_int_equal(r.status, 200);
    json_t *grow = json_object_get(r.json, "growing");
    assert_null(row_named(grow, "paced_leak"));
    assert_null(row_named(grow, "cache_fill"));
    const json_t *churn = row_named(grow, "churn");
    assert_non_null(churn);
    assert_int_equal(ji(churn, "end_bytes"), 25000);
    assert_true(json_real_value(json_object_get(churn, "steadiness")) > 0.99);
    hs_api_reply_clear(&r);
    hs_q_free(tq);
    char p[600];
    unlink(path);
    snprintf(p, sizeof p, "%s-wal", path);
    unlink(p);
    snprintf(p, sizeof p, "%s-shm", path);
    unlink(p);
}

static void test_diff(void **state)
{
    (void)state;
    /* two versions: matched by function names although leak_site's line moved */
    json_t *j = get("/api/diff?a=version=1@end&b=version=2@end&by=stack", 200);
    json_t *rows = json_object_get(j, "rows");
    assert_int_equal(json_array_size(rows), 1);
    json_t *r0 = json_array_get(rows, 0);
    assert_string_equal(js(r0, "name"), "leak_site");
    assert_int_equal(ji(r0, "a_bytes"), 20000);
    assert_int_equal(ji(r0, "b_bytes"), 1000);
    assert_int_equal(ji(r0, "delta_bytes"), -19000);
    assert_int_equal(ji(json_object_get(j, "a"), "total_bytes"), FX_END_BYTES);
    assert_int_equal(ji(json_object_get(j, "b"), "total_bytes"), FX_V2_END_BYTES);
    json_t *fl = json_object_get(j, "flame");
    assert_int_equal(ji(fl, "a_bytes"), FX_END_BYTES);
    assert_int_equal(ji(fl, "delta_bytes"), FX_V2_END_BYTES - FX_END_BYTES);
    assert_non_null(json_object_get(json_object_get(j, "sampling"), "a"));
    json_decref(j);

    /* two moments of one run: the peak against the end */
    j = get("/api/diff?a=1@peak&b=1@end&by=site", 200);
    rows = json_object_get(j, "rows");
    assert_string_equal(js(json_array_get(rows, 0), "name"), "big_alloc");
    assert_int_equal(ji(json_array_get(rows, 0), "delta_bytes"), -100000);
    assert_int_equal(ji(row_named(rows, "leak_site"), "delta_bytes"), 8000);
    json_decref(j);

    hs_api_reply r;
    hs_api_handle(q, "GET", "/api/diff?a=1@end&b=2@end&format=collapsed", NULL, 0, &r);
    assert_int_equal(r.status, 200);
    assert_non_null(strstr(r.body, "main;leak_site 20000 1000\n"));
    assert_non_null(strstr(r.body, "main;config_load 5000 5000\n"));
    hs_api_reply_clear(&r);
}

static void test_sizes(void **state)
{
    (void)state;
    json_t *j = get("/api/runs/1/sizes", 200);
    assert_int_equal(ji(j, "total_allocs"), 63);
    assert_int_equal(ji(j, "total_bytes"), 138000);
    json_t *b = json_array_get(json_object_get(j, "buckets"), 0);
    assert_int_equal(ji(b, "bucket"), 8);
    assert_int_equal(ji(b, "lo"), 256);
    assert_int_equal(ji(b, "hi"), 511);
    assert_int_equal(ji(j, "suggested_sample_bytes"), 1); /* so few: sample them all */
    assert_true(strlen(js(j, "reason")) > 20);
    json_decref(j);
}

/* ---- SQL ----------------------------------------------------------------------------- */

static json_t *sql(const char *body, int status, const char *code)
{
    hs_api_reply r;
    hs_api_handle(q, "POST", "/api/sql", body, strlen(body), &r);
    if (r.status != status) {
        char *s = json_dumps(r.json, 0);
        fprintf(stderr, "sql %s: %d %s\n", body, r.status, s);
        free(s);
    }
    assert_int_equal(r.status, status);
    if (code) assert_string_equal(js(json_object_get(r.json, "error"), "code"), code);
    json_t *j = json_incref(r.json);
    hs_api_reply_clear(&r);
    return j;
}

static void test_sql(void **state)
{
    (void)state;
    json_t *j = sql("{\"sql\": \"SELECT id, program FROM runs ORDER BY id\"}", 200, NULL);
    assert_int_equal(json_array_size(json_object_get(j, "rows")), 2);
    assert_string_equal(json_string_value(json_array_get(json_object_get(j, "columns"), 1)),
                        "program");
    assert_true(json_is_false(json_object_get(j, "truncated")));
    json_decref(j);
    j = sql("{\"sql\": \"SELECT * FROM snapshots\", \"limit\": 3}", 200, NULL);
    assert_int_equal(json_array_size(json_object_get(j, "rows")), 3);
    assert_true(json_is_true(json_object_get(j, "truncated")));
    json_decref(j);
    /* event_rows expands the events blobs: version 1 has 1 + 20*3 + 2 events */
    j = sql("{\"sql\": \"SELECT count(*), sum(bytes) FILTER (WHERE is_free = 0), min(trace) > 0 "
            "FROM event_rows(1)\"}",
            200, NULL);
    json_t *row = json_array_get(json_object_get(j, "rows"), 0);
    assert_int_equal(json_integer_value(json_array_get(row, 0)), 63);
    assert_int_equal(json_integer_value(json_array_get(row, 1)), 5000 + 20 * 1300 + 100000);
    assert_int_equal(json_integer_value(json_array_get(row, 2)), 1);
    json_decref(j);

    static const char *const refused[] = {
        "{\"sql\": \"DELETE FROM runs\"}",
        "{\"sql\": \"INSERT INTO runs(id) VALUES (9)\"}",
        "{\"sql\": \"UPDATE runs SET program = 'x'\"}",
        "{\"sql\": \"DROP TABLE runs\"}",
        "{\"sql\": \"ATTACH DATABASE '/tmp/x.db' AS x\"}",
        "{\"sql\": \"PRAGMA journal_mode = DELETE\"}",
        "{\"sql\": \"PRAGMA writable_schema = 1\"}",
        "{\"sql\": \"PRAGMA user_version = 7\"}",
        "{\"sql\": \"PRAGMA query_only = 0\"}",
        "{\"sql\": \"SELECT load_extension('/tmp/x.so')\"}",
        "{\"sql\": \"CREATE TEMP TABLE t(x)\"}",
        "{\"sql\": \"BEGIN\"}",
        "{\"sql\": \"SELECT 1; DELETE FROM runs\"}",
        "{\"sql\": \"SELEC 1\"}",
        "{\"sql\": \"\"}",
        "{\"sql\": 3}",
        "not json",
        "{\"sql\": \"SELECT 1\", \"limit\": 0}",
        "{\"sql\": \"SELECT * FROM event_rows\"}",
    };
    for (size_t i = 0; i < HS_COUNTOF(refused); i++)
        json_decref(sql(refused[i], 400, "bad_request"));
    j = sql("{\"sql\": \"SELECT count(*) FROM runs\"}", 200, NULL); /* still intact */
    assert_int_equal(
        json_integer_value(json_array_get(json_array_get(json_object_get(j, "rows"), 0), 0)), 2);
    json_decref(j);
    /* a query that never ends is stopped at its time limit */
    json_decref(sql("{\"sql\": \"WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) "
                    "SELECT count(*) FROM c\", \"timeout_ms\": 100}",
                    400, "timeout"));
    json_decref(sql("{\"sql\": \"PRAGMA table_info(runs)\"}", 200, NULL));
}

/* One call of a built-in function is one VM instruction, which the progress
 * handler cannot interrupt: each of these once ran for seconds or forever
 * whatever the time limit (printf('%.*c', 2147483647, 'x'): 9 s; instr,
 * replace, LIKE, GLOB and trim in O(n * m)). Each now ends well within 2 s,
 * with an error or the right answer. */
enum { SQL_OK, SQL_TIMEOUT, SQL_REFUSED };
typedef struct sql_case {
    const char *sql;
    int timeout_ms, expect;
    const char *want; /* SQL_OK: the first cell as text; SQL_REFUSED: a part of the message */
} sql_case;
static const sql_case sql_cases[] = {
    {"SELECT printf('%.*c', 2147483647, 'x')", 1, SQL_REFUSED, "precision"},
    {"SELECT printf('%.*c', 2147483647, 'x'), printf('%.*c', 2147483647, 'x'), "
     "printf('%.*c', 2147483647, 'x'), printf('%.*c', 2147483647, 'x')",
     30000, SQL_REFUSED, "precision"},
    {"SELECT format('%.*c', 2147483647, 'x')", 1, SQL_REFUSED, "precision"},
    {"SELECT printf('%2147483647d', 1)", 1, SQL_REFUSED, "width"},
    {"SELECT printf('%.*c', 3, 'é')", 1000, SQL_OK, "ééé"},
    {"SELECT printf('%5.2f|%-4d|%s|%%|%c', 3.14159, 7, 'ab', 'z')", 1000, SQL_OK,
     " 3.14|7   |ab|%|z"},
    /* 20 calls in one row, none of them past the length limit: stopped
     * at the first call after the deadline */
    {"SELECT length(printf('%.*c', 16000000, 'x')) + length(printf('%.*c', 16000000, 'x')) + "
     "length(printf('%.*c', 16000000, 'x')) + length(printf('%.*c', 16000000, 'x')) + "
     "length(printf('%.*c', 16000000, 'x')) + length(printf('%.*c', 16000000, 'x')) + "
     "length(printf('%.*c', 16000000, 'x')) + length(printf('%.*c', 16000000, 'x')) + "
     "length(printf('%.*c', 16000000, 'x')) + length(printf('%.*c', 16000000, 'x')) + "
     "length(printf('%.*c', 16000000, 'x')) + length(printf('%.*c', 16000000, 'x')) + "
     "length(printf('%.*c', 16000000, 'x')) + length(printf('%.*c', 16000000, 'x')) + "
     "length(printf('%.*c', 16000000, 'x')) + length(printf('%.*c', 16000000, 'x')) + "
     "length(printf('%.*c', 16000000, 'x')) + length(printf('%.*c', 16000000, 'x')) + "
     "length(printf('%.*c', 16000000, 'x')) + length(printf('%.*c', 16000000, 'x'))",
     1, SQL_TIMEOUT, NULL},
    /* quadratic built-ins: linear now, or refused */
    {"SELECT instr(printf('%.*c', 4000000, 'a'), printf('%.*c', 2000000, 'a') || 'b')", 30000,
     SQL_OK, "0"},
    {"SELECT instr(printf('%.*c', 4000000, 'a') || 'b', printf('%.*c', 2000000, 'a') || 'b')",
     30000, SQL_OK, "2000001"},
    {"SELECT instr('héllo wörld', 'wö') || ',' || instr(x'0102030405', x'0304') || ',' || "
     "instr('abc', '') || ',' || ifnull(instr(NULL, 'a'), 'null') || ',' || instr(12345, 34)",
     1000, SQL_OK, "7,3,1,null,3"},
    {"SELECT length(replace(printf('%.*c', 4000000, 'a'), printf('%.*c', 2000000, 'a') || 'b', "
     "'c'))",
     30000, SQL_OK, "4000000"},
    {"SELECT replace('aaa', 'a', 'bb') || ',' || replace('hello', 'l', '') || ',' || "
     "replace('abc', '', 'x') || ',' || typeof(replace(12, '', 'x'))",
     1000, SQL_OK, "bbbbbb,heo,abc,integer"},
    {"SELECT length(replace(printf('%.*c', 5000000, 'a'), 'a', 'bbbb'))", 30000, SQL_REFUSED,
     "too big"},
    {"SELECT printf('%.*c', 4000000, 'a') LIKE '%' || printf('%.*c', 40000, 'a') || 'b'", 30000,
     SQL_REFUSED, "LIKE"},
    {"SELECT printf('%.*c', 4000000, 'a') GLOB '*' || printf('%.*c', 40000, 'a') || 'b'", 30000,
     SQL_REFUSED, "GLOB"},
    {"SELECT ('abcdef' LIKE 'ABC%') || ('abc' GLOB 'a*') || ('a_c' LIKE 'a!_c' ESCAPE '!') || "
     "('abc' LIKE 'b%')",
     1000, SQL_OK, "1110"},
    {"SELECT trim(printf('%.*c', 1000000, 'a'), printf('%.*c', 1000000, 'b') || 'a')", 30000,
     SQL_REFUSED, "trim"},
    {"SELECT trim('  x  ') || ltrim('xxay', 'x') || upper('abc') || lower('DEF') || "
     "quote('it''s') || char(72, 105)",
     1000, SQL_OK, "xayABCdef'it''s'Hi"},
    /* the others, at the length limit: one bounded call each */
    {"SELECT zeroblob(2000000000)", 1, SQL_REFUSED, "too big"},
    {"SELECT randomblob(2000000000)", 1, SQL_REFUSED, "too big"},
    {"SELECT length(zeroblob(16000000)) + length(randomblob(1000000))", 30000, SQL_OK, "17000000"},
    {"SELECT length(substr(printf('%.*c', 8000000, 'x'), 2))", 30000, SQL_OK, "7999999"},
    {"SELECT length(json_array(printf('%.*c', 4000000, '\"')))", 30000, SQL_OK, "8000004"},
    {"WITH s(x) AS MATERIALIZED (SELECT printf('%.*c', 1000000, 'x')), c(n) AS (SELECT 1 UNION "
     "ALL SELECT n + 1 FROM c LIMIT 100) SELECT length(group_concat(x)) FROM c, s",
     30000, SQL_REFUSED, "too big"},
    {"WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT "
     "length(group_concat(x)) FROM c",
     100, SQL_TIMEOUT, NULL},
};

/* Case i of sql_cases through the API. */
static void sql_single_call(size_t i)
{
    const sql_case *c = &sql_cases[i];
    json_t *req = json_pack("{s:s,s:i}", "sql", c->sql, "timeout_ms", c->timeout_ms);
    char *body = json_dumps(req, 0);
    json_decref(req);
    /* The call runs on this thread: its CPU time is what it cost, not
     * what a loaded machine made it wait. An unbounded call costs far
     * more than this generous bound. */
    struct timespec t0, t1;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t0);
    hs_api_reply r;
    hs_api_handle(q, "POST", "/api/sql", body, strlen(body), &r);
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t1);
    double ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
    char *text = json_dumps(r.json, 0);
    fprintf(stderr, "sql case %zu: %.0f ms of CPU, %d %.200s\n", i, ms, r.status, text);
    assert_true(ms < 3000);
    json_t *e = json_object_get(r.json, "error");
    if (c->expect == SQL_OK) {
        assert_int_equal(r.status, 200);
        json_t *cell = json_array_get(json_array_get(json_object_get(r.json, "rows"), 0), 0);
        char got[64];
        if (json_is_integer(cell))
            snprintf(got, sizeof got, "%" JSON_INTEGER_FORMAT, json_integer_value(cell));
        else
            snprintf(got, sizeof got, "%s", json_string_value(cell));
        assert_string_equal(got, c->want);
    } else {
        assert_int_equal(r.status, 400);
        assert_string_equal(js(e, "code"), c->expect == SQL_TIMEOUT ? "timeout" : "bad_request");
        if (c->want) assert_non_null(strstr(js(e, "message"), c->want));
    }
    free(text);
    free(body);
    hs_api_reply_clear(&r);
}

static void test_sql_single_calls(void **state)
{
    (void)state;
    for (size_t i = 0; i < HS_COUNTOF(sql_cases); i++) sql_single_call(i);
}

/* ---- exports ---------------------------------------------------------------------------- */

static void test_exports(void **state)
{
    (void)state;
    hs_api_reply r;
    hs_api_handle(q, "GET", "/api/runs/1/export?at=peak&format=pprof", NULL, 0, &r);
    assert_int_equal(r.status, 200);
    assert_true(r.len > 20);
    assert_int_equal((unsigned char)r.body[0], 0x1f); /* gzip */
    assert_int_equal((unsigned char)r.body[1], 0x8b);
    unsigned char out[1 << 16];
    z_stream z;
    memset(&z, 0, sizeof z);
    assert_int_equal(inflateInit2(&z, 15 + 16), Z_OK);
    z.next_in = (unsigned char *)r.body;
    z.avail_in = (unsigned)r.len;
    z.next_out = out;
    z.avail_out = sizeof out;
    assert_int_equal(inflate(&z, Z_FINISH), Z_STREAM_END);
    size_t n = sizeof out - z.avail_out;
    inflateEnd(&z);
    assert_non_null(memmem(out, n, "inuse_space", 11));
    assert_non_null(memmem(out, n, "alloc_objects", 13));
    assert_non_null(memmem(out, n, "big_alloc", 9));
    /* inuse_space is the last sample type: its name comes last of the four in the table */
    assert_true((char *)memmem(out, n, "inuse_space", 11) >
                (char *)memmem(out, n, "inuse_objects", 13));
    /* the comments say what the numbers rest on */
    assert_non_null(memmem(out, n, "sample_bytes 1, dropped 0 alloc and 0 free events", 49));
    hs_api_reply_clear(&r);

    hs_api_handle(q, "GET", "/api/runs/1/export?at=end&format=speedscope", NULL, 0, &r);
    assert_int_equal(r.status, 200);
    json_error_t je;
    json_t *ss = json_loadb(r.body, r.len, 0, &je);
    assert_non_null(ss);
    json_t *prof = json_array_get(json_object_get(ss, "profiles"), 0);
    assert_string_equal(js(prof, "unit"), "bytes");
    assert_non_null(strstr(js(prof, "name"), "sample_bytes 1, dropped 0 alloc"));
    assert_int_equal(ji(prof, "endValue"), FX_END_BYTES);
    json_t *frames = json_object_get(json_object_get(ss, "shared"), "frames");
    json_t *s0 = json_array_get(json_object_get(prof, "samples"), 0);
    /* root first */
    assert_string_equal(
        js(json_array_get(frames, (size_t)json_integer_value(json_array_get(s0, 0))), "name"),
        "main");
    json_decref(ss);
    hs_api_reply_clear(&r);

    hs_api_handle(q, "GET", "/api/runs/1/export?at=peak&format=dot", NULL, 0, &r);
    assert_int_equal(r.status, 200);
    assert_non_null(strstr(r.body, "digraph"));
    assert_non_null(strstr(r.body, "big_alloc"));
    assert_non_null(strstr(r.body, "->"));
    assert_non_null(strstr(r.body, "sample_bytes 1, dropped 0 alloc"));
    /* what Graphviz needs: one graph, every edge between declared nodes */
    assert_int_equal(strncmp(r.body, "digraph heap {\n", 15), 0);
    assert_int_equal(strcmp(r.body + r.len - 2, "}\n"), 0);
    int edges = 0;
    for (const char *e = strstr(r.body, " -> "); e; e = strstr(e + 4, " -> ")) {
        const char *ls = e;
        while (ls > r.body && ls[-1] != '\n') ls--;
        unsigned a, b;
        assert_int_equal(sscanf(ls, " n%u -> n%u [", &a, &b), 2);
        char decl[32];
        snprintf(decl, sizeof decl, "\n  n%u [label=", a);
        assert_non_null(strstr(r.body, decl));
        snprintf(decl, sizeof decl, "\n  n%u [label=", b);
        assert_non_null(strstr(r.body, decl));
        edges++;
    }
    assert_true(edges >= 3); /* main -> big_alloc, leak_site, config_load, work -> tmp_alloc */
    hs_api_reply_clear(&r);
}

/* ---- plans: every statement uses the key or index meant for it ------------------------- */

static void test_plans(void **state)
{
    (void)state;
    for (int i = 0; i < ST__COUNT; i++) {
        char sql_[2048];
        snprintf(sql_, sizeof sql_, "EXPLAIN QUERY PLAN %s", hs__sqlite_stmt_sql[i]);
        sqlite3_stmt *st;
        assert_int_equal(sqlite3_prepare_v2(QDB(q), sql_, -1, &st, NULL), SQLITE_OK);
        int full_scan = 0;
        char plan[4096] = "";
        while (sqlite3_step(st) == SQLITE_ROW) {
            const char *d = (const char *)sqlite3_column_text(st, 3);
            strncat(plan, d, sizeof plan - strlen(plan) - 2);
            strcat(plan, "; ");
            /* a SCAN of a table (not of a subquery, an index range or a
             * virtual table's blocks of one run) reads everything */
            if (!strncmp(d, "SCAN ", 5) && !strstr(d, "USING") && !strstr(d, "CONSTANT") &&
                !(strstr(d, "VIRTUAL TABLE INDEX") && strstr(d, ":run=?")))
                full_scan = 1;
        }
        sqlite3_finalize(st);
        if (full_scan) fprintf(stderr, "statement %d scans a table: %s\n", i, plan);
        assert_false(full_scan);
        assert_true(strstr(plan, "SEARCH") != NULL || strstr(plan, ":run=?") != NULL);
    }
    /* the state at a moment reads the snapshots' blocks by their key */
    sqlite3_stmt *st;
    char sql_[1024];
    snprintf(sql_, sizeof sql_, "EXPLAIN QUERY PLAN %s", hs__sqlite_stmt_sql[ST_DELTA_ROWS]);
    sqlite3_prepare_v2(QDB(q), sql_, -1, &st, NULL);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    const char *d = (const char *)sqlite3_column_text(st, 3);
    assert_non_null(strstr(d, "snapshots VIRTUAL TABLE INDEX"));
    assert_non_null(strstr(d, ":run=? AND kind=? AND bucket>=? AND bucket<=?"));
    sqlite3_finalize(st);
}

/* site.c's names: clone suffixes dropped, machinery recognized by the
 * qualified name (a return type of std:: does not make a user's function
 * the standard library's). */
static void test_site_names(void **state)
{
    (void)state;
    static const struct {
        const char *in;
        int python;
        const char *out;
    } names[] = {
        {"keep_block.cold", 0, "keep_block"},
        {"fill.constprop.0", 0, "fill"},
        {"fill.part.0.isra.0", 0, "fill"},
        {"fill.lto_priv.0", 0, "fill"},
        {"f(int) [clone .constprop.0] [clone .cold]", 0, "f(int)"},
        {"main", 0, "main"},
        {"Foo.cold", 1, "Foo.cold"}, /* a Python method called cold */
        {"a.b.c", 0, "a.b.c"},
    };
    for (size_t i = 0; i < HS_COUNTOF(names); i++) {
        char *n = hs__fn_name(names[i].in, names[i].python);
        assert_non_null(n);
        assert_string_equal(n, names[i].out);
        free(n);
    }
    static const struct {
        const char *fn, *module;
        int mach;
    } kinds[] = {
        {"operator new(unsigned long)", "libstdc++.so.6", HS_MACH_ALLOC},
        {"operator delete[](void*)", "libstdc++.so.6", HS_MACH_ALLOC},
        {"malloc", "libc.so.6", HS_MACH_ALLOC},
        {"__GI___strdup", "libc.so.6", HS_MACH_ALLOC},
        {"__gnu_cxx::new_allocator<char>::allocate(unsigned long, void const*)", "a",
         HS_MACH_ALLOC},
        {"std::allocator_traits<std::allocator<int> >::allocate(std::allocator<int>&, unsigned "
         "long)",
         "a", HS_MACH_ALLOC},
        {"void std::vector<int, std::allocator<int> >::_M_realloc_insert<int const&>(__gnu_cxx::"
         "__normal_iterator<int*, std::vector<int, std::allocator<int> > >, int const&)",
         "a", HS_MACH_STDLIB},
        {"std::__cxx11::basic_string<char, std::char_traits<char>, std::allocator<char> "
         ">::_M_mutate(unsigned long, unsigned long, char const*, unsigned long)",
         "libstdc++.so.6", HS_MACH_STDLIB},
        {"std::__cxx11::basic_string<char, std::char_traits<char>, std::allocator<char> > "
         "make_name(int)",
         "a", HS_MACH_NONE},
        {"main::{lambda()#1}::operator()() const", "a", HS_MACH_NONE},
        {"(anonymous namespace)::grow(std::map<int, int, std::less<int>, "
         "std::allocator<std::pair<int const, int> > >&)",
         "a", HS_MACH_NONE},
        {"bool std::operator< <char>(std::string const&, std::string const&)", "a", HS_MACH_STDLIB},
        {"std::__cxx11::basic_string<char, std::char_traits<char>, std::allocator<char> > "
         "std::operator+<char, std::char_traits<char>, std::allocator<char> "
         ">(std::__cxx11::basic_string<char, std::char_traits<char>, std::allocator<char> >&&, "
         "char const*)",
         "a", HS_MACH_STDLIB},
        {"Vec operator+<int>(Vec const&, Vec const&)", "a", HS_MACH_NONE},
        {"std::ostream& operator<< <char>(std::ostream&, Point const&)", "a", HS_MACH_NONE},
        {"leak_a", "", HS_MACH_NONE}, /* Python */
        {"malloc", "", HS_MACH_NONE}, /* a Python function named malloc */
    };
    for (size_t i = 0; i < HS_COUNTOF(kinds); i++) {
        hs__frame f = {
            .function = (char *)kinds[i].fn, .file = "", .module = (char *)kinds[i].module};
        f.name = hs__fn_name(f.function, !f.module[0]);
        hs__frame_classify(&f);
        if (f.machinery != kinds[i].mach) fprintf(stderr, "%s: %d\n", kinds[i].fn, f.machinery);
        assert_int_equal(f.machinery, kinds[i].mach);
        assert_int_equal(f.python, !kinds[i].module[0]);
        free(f.name);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_selectors), cmocka_unit_test(test_site_names),
        cmocka_unit_test(test_runs),      cmocka_unit_test(test_api_errors),
        cmocka_unit_test(test_history),   cmocka_unit_test(test_top),
        cmocka_unit_test(test_flame),     cmocka_unit_test(test_collapsed),
        cmocka_unit_test(test_leaks),     cmocka_unit_test(test_leak_trends),
        cmocka_unit_test(test_diff),      cmocka_unit_test(test_sizes),
        cmocka_unit_test(test_sql),       cmocka_unit_test(test_sql_single_calls),
        cmocka_unit_test(test_exports),   cmocka_unit_test(test_plans),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
