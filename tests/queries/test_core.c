/* test_core: the typed query core (hs_core.h) called directly on real
 * SQLite files written by the server's own store (fixture.h), with known
 * answers; and what the core's adapters share: one grouping, one frame
 * label, one error type mapped to HTTP in one place, collapsed names
 * escaped alike in every answer. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <sqlite3.h>

#include "fixture.h"
#include "hs_core.h"
#include "hs_error.h"
#include "hs_queries.h"

static char db_path[512];
static hs_q *q;

static void unlink_db(const char *path)
{
    char p[600];
    unlink(path);
    snprintf(p, sizeof p, "%s-wal", path);
    unlink(p);
    snprintf(p, sizeof p, "%s-shm", path);
    unlink(p);
}

static int setup(void **state)
{
    (void)state;
    fx_tmp_path(db_path, sizeof db_path, "core.db");
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
    unlink_db(db_path);
    return 0;
}

static void test_groups(void **state)
{
    (void)state;
    static const struct {
        const char *in;
        int rc;
        hs_group g;
    } cases[] = {
        {"site", 0, HS_GROUP_SITE},
        {"function", 0, HS_GROUP_FUNCTION},
        {"stack", 0, HS_GROUP_STACK},
        {"Site", -1, 0},
        {"", -1, 0},
        {"stacks", -1, 0},
    };
    for (size_t i = 0; i < HS_COUNTOF(cases); i++) {
        hs_group g = HS_GROUP_SITE;
        assert_int_equal(hs_group_parse(cases[i].in, &g), cases[i].rc);
        if (cases[i].rc) continue;
        assert_int_equal(g, cases[i].g);
        assert_string_equal(hs_group_name(g), cases[i].in);
    }
    hs_group g;
    assert_int_equal(hs_group_parse(NULL, &g), -1);
}

static void test_frame_label(void **state)
{
    (void)state;
    static const struct {
        const char *name, *file;
        int64_t line;
        const char *want;
    } cases[] = {
        {"leak_site", "/src/app/leak.c", 12, "leak_site (leak.c:12)"},
        {"f", "g.c", 3, "f (g.c:3)"},
        {"libc.so.6+0x1f", "", 0, "libc.so.6+0x1f"},
        {"f", NULL, 9, "f"},
    };
    for (size_t i = 0; i < HS_COUNTOF(cases); i++) {
        char buf[64];
        int n = hs_frame_label(buf, sizeof buf, cases[i].name, cases[i].file, cases[i].line);
        assert_string_equal(buf, cases[i].want);
        assert_int_equal(n, (int)strlen(cases[i].want));
    }
    char small[8];
    assert_int_equal(hs_frame_label(small, sizeof small, "leak_site", "a.c", 1), 17);
    assert_string_equal(small, "leak_si");
}

/* One error type: the core says what went wrong with an HS_E code; only the
 * API adapter turns it into an HTTP status and an error code. */
static void test_error_mapping(void **state)
{
    (void)state;
    static const struct {
        int code, status;
        const char *name;
    } cases[] = {
        {HS_EINVAL, 400, "bad_request"},  {HS_ETIMEOUT, 400, "timeout"},
        {HS_ENOENT, 404, "not_found"},    {HS_ETOOBIG, 413, "too_large"},
        {HS_ENOTSUP, 405, "bad_request"}, {HS_EAUTH, 401, "unauthorized"},
        {HS_ENOMEM, 500, "internal"},     {HS_EDB, 500, "internal"},
        {HS_ECORRUPT, 500, "internal"},
    };
    for (size_t i = 0; i < HS_COUNTOF(cases); i++) {
        hs_qerr err = {.code = cases[i].code};
        snprintf(err.msg, sizeof err.msg, "case %zu", i);
        hs_api_reply r = {0};
        hs_api_error(&r, &err);
        assert_int_equal(r.status, cases[i].status);
        json_t *e = json_object_get(r.json, "error");
        assert_string_equal(json_string_value(json_object_get(e, "code")), cases[i].name);
        assert_string_equal(json_string_value(json_object_get(e, "message")), err.msg);
        hs_api_reply_clear(&r);
    }
    /* the selectors speak the same type */
    hs_run_sel rs;
    hs_qerr err = {0};
    assert_int_equal(hs_sel_parse_run(&rs, "a=b=c", &err), HS_EINVAL);
    assert_int_equal(err.code, HS_EINVAL);
    assert_non_null(strstr(err.msg, "two '='"));
}

/* Collapsed lines name frames the same way in every answer: a ';' inside a
 * name would split it into two frames, a ' ' would end the stack. diff's
 * collapsed output once wrote names raw. */
static void test_collapsed_escaping(void **state)
{
    (void)state;
    char path[512];
    fx_tmp_path(path, sizeof path, "core-escape.db");
    assert_int_equal(fx_build(path), 0);
    sqlite3 *db;
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    assert_int_equal(sqlite3_exec(db,
                                  "UPDATE frames SET function = 'leak;site x' "
                                  "WHERE function = 'leak_site'",
                                  NULL, NULL, NULL),
                     SQLITE_OK);
    sqlite3_close(db);
    hs_q *eq;
    hs_qerr err;
    assert_int_equal(hs_q_open(&eq, path, &err), 0);
    hs_api_reply r;
    hs_api_handle(eq, "GET", "/api/diff?a=1@end&b=2@end&format=collapsed", NULL, 0, &r);
    assert_int_equal(r.status, 200);
    assert_non_null(strstr(r.body, "main;leak:site_x 20000 1000\n"));
    assert_null(strstr(r.body, "leak;site"));
    hs_api_reply_clear(&r);
    hs_api_handle(eq, "GET", "/api/runs/1/export?format=collapsed&at=end", NULL, 0, &r);
    assert_int_equal(r.status, 200);
    assert_non_null(strstr(r.body, "main;leak:site_x 20000\n"));
    hs_api_reply_clear(&r);
    hs_q_free(eq);
    unlink_db(path);
}

/* hs_core_top on run 1 (fixture.h): the typed answer, without JSON. */
static void test_top_typed(void **state)
{
    (void)state;
    hs_top_params p;
    hs_top_result r;
    hs_qerr err = {0};
    hs_top_params_init(&p);
    assert_int_equal(p.limit, HS_TOP_LIMIT);
    assert_int_equal(hs_sel_parse_run(&p.run, "1", &err), 0);
    assert_int_equal(hs_core_top(q, &p, &r, &err), 0);
    assert_string_equal(r.at, "peak");
    assert_int_equal(r.at_ns, FX_PEAK_NS);
    assert_int_equal(r.total_bytes, FX_PEAK_BYTES);
    assert_int_equal(r.run.id, 1);
    assert_int_equal(r.run.sample_bytes, 1);
    assert_int_equal(r.by, HS_GROUP_SITE);
    assert_int_equal(r.nrows, 4);
    assert_int_equal(r.rows_total, 4);
    static const struct {
        const char *name;
        int64_t bytes, count;
    } want[] = {{"big_alloc", 100000, 1},
                {"leak_site", 12000, 12},
                {"config_load", 5000, 1},
                {"tmp_alloc", 300, 1}};
    for (size_t i = 0; i < HS_COUNTOF(want); i++) {
        assert_string_equal(r.rows[i].frame.name, want[i].name);
        assert_int_equal(r.rows[i].total_bytes, want[i].bytes);
        assert_int_equal(r.rows[i].total_count, want[i].count);
        assert_true(r.rows[i].share > 0 && r.rows[i].share < 1);
    }
    const hs_top_row *leak = &r.rows[1];
    assert_string_equal(leak->frame.file, "/src/app.c");
    assert_int_equal(leak->frame.line, 20);
    assert_int_equal(leak->stack.n, 2);
    assert_int_equal(leak->stack.depth, 2);
    assert_int_equal(leak->stack.site, 0);
    assert_string_equal(leak->stack.frames[1].name, "main");
    assert_false(r.frames_cut || r.bytes_cut || r.stacks_omitted);
    hs_top_result_clear(&r);

    /* by function, one frame a stack, at the end: main holds everything */
    assert_int_equal(hs_top_param(&p, "by", "function", &err), 0);
    assert_int_equal(hs_top_param(&p, "at", "end", &err), 0);
    assert_int_equal(hs_top_param(&p, "max_frames", "1", &err), 0);
    assert_int_equal(hs_core_top(q, &p, &r, &err), 0);
    assert_int_equal(r.total_bytes, FX_END_BYTES);
    assert_string_equal(r.rows[0].frame.name, "leak_site"); /* by self first */
    assert_int_equal(r.rows[0].self_bytes, 20000);
    assert_string_equal(r.rows[0].frame.file, "");
    assert_int_equal(r.rows[0].stack.n, 0);
    int saw_main = 0;
    for (size_t i = 0; i < r.nrows; i++)
        if (!strcmp(r.rows[i].frame.name, "main")) {
            saw_main = 1;
            assert_int_equal(r.rows[i].total_bytes, FX_END_BYTES);
            assert_int_equal(r.rows[i].self_bytes, 0);
        }
    assert_true(saw_main);
    hs_top_result_clear(&r);

    /* by stack with one frame a stack: the cut is reported */
    assert_int_equal(hs_top_param(&p, "by", "stack", &err), 0);
    assert_int_equal(hs_top_param(&p, "limit", "1", &err), 0);
    assert_int_equal(hs_core_top(q, &p, &r, &err), 0);
    assert_int_equal(r.nrows, 1);
    assert_int_equal(r.rows_total, 2);
    assert_int_equal(r.rows[0].stack.n, 1);
    assert_int_equal(r.rows[0].stack.depth, 2);
    assert_true(r.frames_cut);
    assert_int_equal(r.max_frames, 1);
    hs_top_result_clear(&r);
}

/* A run that allocated nothing has no live stacks at any moment: an empty
 * answer from every question, typed and over the API. Each used to hand
 * qsort a null array, which UBSan stops a sanitized server for. */
static void test_empty_run(void **state)
{
    (void)state;
    static const char *const groups[] = {"site", "function", "stack"};
    static const char *const targets[] = {
        "/api/runs/1/flame",
        "/api/runs/1/leaks",
        "/api/runs/1/history?top=5",
        "/api/runs/1/sizes",
        "/api/diff?a=1@end&b=1@0",
        "/api/diff?a=1@end&b=1@0&by=stack&format=collapsed",
        "/api/runs/1/top?format=collapsed",
        "/api/runs/1/export?format=pprof",
        "/api/runs/1/export?format=speedscope",
        "/api/runs/1/export?format=dot",
    };
    char path[512];
    hs_q *eq;
    hs_top_params p;
    hs_top_result r;
    hs_qerr err = {0};
    fx_tmp_path(path, sizeof path, "core_empty.db");
    assert_int_equal(fx_build_empty(path), 0);
    assert_int_equal(hs_q_open(&eq, path, &err), 0);
    hs_top_params_init(&p);
    assert_int_equal(hs_sel_parse_run(&p.run, "1", &err), 0);
    for (size_t i = 0; i < HS_COUNTOF(groups); i++) {
        assert_int_equal(hs_top_param(&p, "by", groups[i], &err), 0);
        assert_int_equal(hs_core_top(eq, &p, &r, &err), 0);
        assert_string_equal(r.run.program, "/opt/app/bin/empty");
        assert_int_equal(r.total_bytes, 0);
        assert_int_equal(r.total_count, 0);
        assert_int_equal(r.nrows, 0);
        assert_int_equal(r.rows_total, 0);
        hs_top_result_clear(&r);
    }
    for (size_t i = 0; i < HS_COUNTOF(targets); i++) {
        hs_api_reply a;
        hs_api_handle(eq, "GET", targets[i], NULL, 0, &a);
        if (a.status != 200) fprintf(stderr, "%s: %d\n", targets[i], a.status);
        assert_int_equal(a.status, 200);
        hs_api_reply_clear(&a);
    }
    hs_q_free(eq);
    unlink_db(path);
}

/* Refused parameters: one sentence each, the same the API answers; a
 * missing run is named first. */
static void test_top_params(void **state)
{
    (void)state;
    static const struct {
        const char *key, *value, *msg;
    } bad[] = {
        {"by", "files", "by must be site, function or stack (not 'files')"},
        {"limit", "0", "limit must be an integer from 1 to 1000000 (not '0')"},
        {"max_frames", "1025", "max_frames must be an integer from 1 to 1024 (not '1025')"},
        {"at", "soon", "malformed time"},
        {"site", "root", "site must be user, alloc or leaf (not 'root')"},
    };
    for (size_t i = 0; i < HS_COUNTOF(bad); i++) {
        hs_top_params p;
        hs_qerr err = {0};
        hs_top_params_init(&p);
        assert_int_equal(hs_top_param(&p, bad[i].key, bad[i].value, &err), HS_EINVAL);
        assert_int_equal(err.code, HS_EINVAL);
        assert_non_null(strstr(err.msg, bad[i].msg));
        assert_int_equal(hs_sel_parse_run(&p.run, "42", &err), 0);
        assert_int_equal(hs_run_check(q, &p.run, &err, HS_EINVAL), HS_ENOENT);
        assert_string_equal(err.msg, "no run with id 42");
    }
    hs_top_params p;
    hs_top_result r;
    hs_qerr err;
    hs_top_params_init(&p);
    assert_int_equal(hs_sel_parse_run(&p.run, "1", &err), 0);
    assert_int_equal(hs_top_param(&p, "at", "9", &err), 0);
    assert_int_equal(hs_core_top(q, &p, &r, &err), HS_EINVAL);
    assert_non_null(strstr(err.msg, "outside run 1"));
    assert_null(r.rows);
}

/* hs_core_sizes on run 1: 63 allocations, 138000 bytes, few enough to
 * sample them all. */
static void test_sizes_typed(void **state)
{
    (void)state;
    hs_run_sel sel;
    hs_sizes_result r;
    hs_qerr err;
    assert_int_equal(hs_sel_parse_run(&sel, "1", &err), 0);
    assert_int_equal(hs_core_sizes(q, &sel, &r, &err), 0);
    assert_int_equal(r.run.id, 1);
    assert_int_equal(r.total_allocs, 63);
    assert_int_equal(r.total_bytes, 138000);
    assert_true(r.nbuckets > 0);
    assert_int_equal(r.buckets[0].bucket, 8);
    assert_int_equal(r.buckets[0].lo, 256);
    assert_int_equal(r.buckets[0].hi, 511);
    int64_t a = 0, b = 0;
    for (size_t i = 0; i < r.nbuckets; i++) {
        a += r.buckets[i].allocs;
        b += r.buckets[i].bytes;
        if (i) assert_true(r.buckets[i].bucket > r.buckets[i - 1].bucket);
    }
    assert_int_equal(a, r.total_allocs);
    assert_int_equal(b, r.total_bytes);
    assert_int_equal(r.suggested_sample_bytes, 1);
    assert_non_null(strstr(r.reason, "63 allocations"));
    hs_sizes_result_clear(&r);
    assert_int_equal(hs_sel_parse_run(&sel, "42", &err), 0);
    assert_int_equal(hs_core_sizes(q, &sel, &r, &err), HS_ENOENT);
    assert_string_equal(err.msg, "no run with id 42");
}

/* hs_core_leaks on runs 1 (leaks 1000 B every 100 ms) and 2 (fixed). */
static void test_leaks_typed(void **state)
{
    (void)state;
    hs_leaks_params p;
    hs_leaks_result r;
    hs_qerr err;
    hs_leaks_params_init(&p);
    assert_int_equal(p.limit, HS_LEAKS_LIMIT);
    assert_int_equal(hs_sel_parse_run(&p.run, "1", &err), 0);
    assert_int_equal(hs_core_leaks(q, &p, &r, &err), 0);
    assert_int_equal(r.total_bytes, FX_END_BYTES);
    assert_int_equal(r.total_count, FX_END_COUNT);
    assert_int_equal(r.ngrowing, 1);
    const hs_leak_row *g = &r.growing[0];
    assert_string_equal(g->site.name, "leak_site");
    assert_int_equal(g->end_bytes, 20000);
    assert_true(g->slope > 9000 && g->slope < 11000); /* 1000 B per 100 ms */
    assert_true(g->r2 > 0.99);
    assert_true(g->score > 0);
    assert_int_equal(g->stack.n, 2);
    assert_string_equal(g->stack.frames[g->stack.site + 1].name, "main");
    assert_int_equal(r.nlive, 2);
    assert_string_equal(r.live[0].site.name, "leak_site");
    assert_int_equal(r.live[0].bytes, 20000);
    assert_int_equal(r.live[0].count, 20);
    assert_true(r.live[0].share > 0.79 && r.live[0].share < 0.81);
    assert_string_equal(r.live[1].site.name, "config_load");
    hs_leaks_result_clear(&r);

    assert_int_equal(hs_leaks_param(&p, "limit", "1", &err), 0);
    assert_int_equal(hs_leaks_param(&p, "max_frames", "1", &err), 0);
    assert_int_equal(hs_core_leaks(q, &p, &r, &err), 0);
    assert_int_equal(r.nlive, 1);
    assert_int_equal(r.live[0].stack.n, 1);
    assert_int_equal(r.live[0].stack.depth, 2);
    assert_true(r.frames_cut);
    hs_leaks_result_clear(&r);

    hs_leaks_params_init(&p);
    assert_int_equal(hs_sel_parse_run(&p.run, "2", &err), 0); /* the fixed version */
    assert_int_equal(hs_core_leaks(q, &p, &r, &err), 0);
    assert_int_equal(r.ngrowing, 0);
    assert_int_equal(r.total_bytes, FX_V2_END_BYTES);
    hs_leaks_result_clear(&r);
    assert_int_equal(hs_leaks_param(&p, "limit", "0", &err), HS_EINVAL);
    assert_string_equal(err.msg, "limit must be an integer from 1 to 100000 (not '0')");
}

/* hs_core_runs and hs_core_run on the fixture's two runs of app. */
static void test_runs_typed(void **state)
{
    (void)state;
    hs_runs_params p;
    hs_runs_result r;
    hs_qerr err;
    hs_runs_params_init(&p);
    assert_int_equal(p.limit, HS_RUNS_LIMIT);
    assert_int_equal(hs_core_runs(q, &p, &r, &err), 0);
    assert_int_equal(r.nruns, 2);
    static const struct {
        int64_t id, peak, end;
        const char *version;
    } want[] = {{2, FX_V2_PEAK_BYTES, FX_V2_END_BYTES, "2"}, {1, FX_PEAK_BYTES, FX_END_BYTES, "1"}};
    for (size_t i = 0; i < HS_COUNTOF(want); i++) { /* newest first */
        const hs_run_info *ri = &r.runs[i];
        assert_int_equal(ri->brief.id, want[i].id);
        assert_string_equal(ri->brief.program, "/opt/app/bin/app");
        assert_int_equal(ri->brief.sample_bytes, 1);
        assert_string_equal(ri->host, "testhost");
        assert_string_equal(ri->state, "ended");
        assert_int_equal(ri->duration_ns, 2000000000);
        assert_int_equal(ri->peak_bytes, want[i].peak);
        assert_int_equal(ri->end_bytes, want[i].end);
        assert_int_equal(ri->dropped_events, 0);
        assert_true(ri->has_clean_exit && ri->brief.clean_exit);
        assert_int_equal(ri->nlabels, 1);
        assert_string_equal(ri->labels[0].key, "version");
        assert_string_equal(ri->labels[0].value, want[i].version);
    }
    assert_int_equal(r.runs[1].events, 63); /* 20 leaks, 20 + 20 tmp, big, config */
    hs_runs_result_clear(&r);

    /* filters, all of which must hold */
    static const struct {
        const char *key, *value;
        size_t n;
        int64_t first;
    } filters[] = {
        {"label", "version=1", 1, 1}, {"program", "app", 1, 1}, {"host", "otherhost", 0, 0}};
    for (size_t i = 0; i < HS_COUNTOF(filters); i++) {
        assert_int_equal(hs_runs_param(&p, filters[i].key, filters[i].value, &err), 0);
        assert_int_equal(hs_core_runs(q, &p, &r, &err), 0);
        assert_int_equal(r.nruns, filters[i].n);
        if (r.nruns) assert_int_equal(r.runs[0].brief.id, filters[i].first);
        hs_runs_result_clear(&r);
    }
    hs_runs_params_init(&p);
    assert_int_equal(hs_runs_param(&p, "limit", "1", &err), 0);
    assert_int_equal(hs_core_runs(q, &p, &r, &err), 0);
    assert_int_equal(r.nruns, 1);
    assert_int_equal(r.runs[0].brief.id, 2);
    hs_runs_result_clear(&r);

    static const struct {
        const char *key, *value, *msg;
    } bad[] = {{"limit", "0", "limit must be an integer from 1 to 100000 (not '0')"},
               {"pid", "12a", "pid must be an integer"},
               {"label", "version", "label filter must be key=value (not 'version')"},
               {"label", "=1", "label filter must be key=value (not '=1')"}};
    for (size_t i = 0; i < HS_COUNTOF(bad); i++) {
        assert_int_equal(hs_runs_param(&p, bad[i].key, bad[i].value, &err), HS_EINVAL);
        assert_string_equal(err.msg, bad[i].msg);
    }

    hs_run_sel sel;
    assert_int_equal(hs_sel_parse_run(&sel, "program=app,version=1", &err), 0);
    assert_int_equal(hs_core_run(q, &sel, &r, &err), 0);
    assert_int_equal(r.nruns, 1);
    assert_int_equal(r.runs[0].brief.id, 1);
    assert_int_equal(r.runs[0].peak_bytes, FX_PEAK_BYTES);
    hs_runs_result_clear(&r);
    assert_int_equal(hs_sel_parse_run(&sel, "42", &err), 0);
    assert_int_equal(hs_core_run(q, &sel, &r, &err), HS_ENOENT);
    assert_string_equal(err.msg, "no run with id 42");
}

/* The runs' whole records, typed (hs_run_record), and the API's run
 * object as their encoding: run 1 given a distinct count of each kind of
 * drop, so that a count under the wrong name shows. */
static void test_run_record_typed(void **state)
{
    (void)state;
    static const char *const drops[HS_RUNDROP__COUNT] = {
        "alloc_events",  "free_events",      "alloc_bytes",
        "free_bytes",    "stacks_truncated", "unwind_failed",
        "live_set_full", "python_fallback",  "python_small_unseen"}; /* docs/api.md's order */
    char path[512], sql[1024];
    fx_tmp_path(path, sizeof path, "core-record.db");
    assert_int_equal(fx_build(path), 0);
    int n = snprintf(sql, sizeof sql, "UPDATE runs SET ");
    for (int d = 0; d < HS_RUNDROP__COUNT; d++)
        n += snprintf(sql + n, sizeof sql - (size_t)n, "%s%s%s = %d", d ? ", " : "",
                      d < 4 ? "dropped_" : "", drops[d], d + 1);
    snprintf(sql + n, sizeof sql - (size_t)n, " WHERE id = 1");
    sqlite3 *db;
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    assert_int_equal(sqlite3_exec(db, sql, NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(db);
    hs_q *rq;
    hs_qerr err;
    hs_runs_params p;
    hs_runs_result r;
    assert_int_equal(hs_q_open(&rq, path, &err), 0);
    hs_runs_params_init(&p);
    assert_int_equal(hs_core_runs(rq, &p, &r, &err), 0);
    assert_int_equal(r.nruns, 2);
    for (size_t i = 0; i < 2; i++) { /* newest first: runs 2 and 1 */
        const hs_run_record *rec = &r.runs[i].brief.record;
        assert_int_equal(rec->id, 2 - (int64_t)i);
        assert_string_equal(rec->host, "testhost");
        assert_int_equal(strlen(rec->uuid), 32);
        assert_int_equal(rec->duration_ns, 2000000000);
        assert_int_equal(rec->clean_exit, 1);
        assert_int_equal(rec->sampling.sample_bytes, 1);
        for (int d = 0; d < HS_RUNDROP__COUNT; d++)
            assert_int_equal(rec->sampling.dropped[d], i ? d + 1 : 0);
        assert_int_equal(rec->nlabels, 1);
        assert_string_equal(rec->labels[0].value, i ? "1" : "2");
    }
    assert_int_equal(r.runs[1].dropped_events, 1 + 2);
    json_t *j = hs_api_runs_json(&r), *run1 = json_array_get(json_object_get(j, "runs"), 1);
    const hs_run_record *rec1 = &r.runs[1].brief.record;
    assert_int_equal(json_integer_value(json_object_get(run1, "peak_bytes")), rec1->peak_bytes);
    assert_string_equal(json_string_value(json_object_get(run1, "uuid")), rec1->uuid);
    assert_string_equal(
        json_string_value(json_object_get(json_object_get(run1, "labels"), "version")), "1");
    json_t *dropped = json_object_get(json_object_get(run1, "sampling"), "dropped");
    assert_int_equal(json_object_size(dropped), HS_RUNDROP__COUNT);
    void *it = json_object_iter(dropped);
    for (int d = 0; d < HS_RUNDROP__COUNT; d++, it = json_object_iter_next(dropped, it)) {
        assert_string_equal(json_object_iter_key(it), drops[d]);
        assert_int_equal(json_integer_value(json_object_iter_value(it)), d + 1);
    }
    json_decref(j);
    hs_runs_result_clear(&r);
    hs_q_free(rq);
    unlink_db(path);
}

/* hs_core_history on run 1: 20 buckets of 100 ms, the two largest traces
 * as series, and one asked for by id; then its refusals. */
static void test_history_typed(void **state)
{
    (void)state;
    hs_history_params p;
    hs_history_result r;
    hs_qerr err;
    hs_history_params_init(&p);
    assert_int_equal(hs_sel_parse_run(&p.run, "1", &err), 0);
    assert_int_equal(hs_history_param(&p, "top", "2", &err), 0);
    assert_int_equal(hs_core_history(q, &p, &r, &err), 0);
    assert_int_equal(r.run.id, 1);
    assert_int_equal(r.peak_bytes, FX_PEAK_BYTES);
    assert_int_equal(r.peak_t_ns, FX_PEAK_NS);
    assert_int_equal(r.end_bytes, FX_END_BYTES);
    assert_int_equal(r.granularity_ns, 100000000);
    assert_false(r.cut);
    assert_int_equal(r.npoints, 20);
    int64_t max = 0;
    for (size_t i = 0; i < r.npoints; i++) {
        assert_int_equal(r.points[i].t_ns, (int64_t)(i + 1) * 100000000);
        if (r.points[i].heap_max_bytes > max) max = r.points[i].heap_max_bytes;
    }
    assert_int_equal(max, FX_PEAK_BYTES);
    /* the first bucket: config (5000) and the first leak (1000) kept, tmp
     * (300) freed within it */
    assert_int_equal(r.points[0].heap_bytes, 6000);
    assert_int_equal(r.points[0].heap_max_bytes, 6300);
    assert_int_equal(r.points[19].heap_bytes, FX_END_BYTES);
    assert_int_equal(r.points[19].heap_count, FX_END_COUNT);
    assert_int_equal(r.nrss, 20);
    assert_int_equal(r.nseries, 2);
    const hs_history_series *big = &r.series[0], *leak = &r.series[1];
    assert_string_equal(big->name, "big_alloc (app.c:50)");
    assert_int_equal(big->max_bytes, 100000);
    assert_int_equal(big->npoints, 2); /* up at 1.1 s, gone at 1.3 s */
    assert_int_equal(big->points[0].t_ns, 1100000000);
    assert_int_equal(big->points[1].bytes, 0);
    assert_string_equal(leak->name, "leak_site (app.c:20)");
    assert_int_equal(leak->max_bytes, 20000);
    assert_int_equal(leak->npoints, 20);
    assert_int_equal(leak->points[19].bytes, 20000);
    assert_int_equal(leak->stack.n, 2);
    assert_int_equal(leak->stack.site, 0);
    assert_string_equal(leak->stack.frames[1].name, "main");
    hs_history_result_clear(&r);

    /* a trace asked for by id comes after the top ones, once */
    assert_int_equal(hs_history_param(&p, "top", "1", &err), 0);
    assert_int_equal(hs_history_param(&p, "trace", "2,5", &err), 0);
    assert_int_equal(hs_core_history(q, &p, &r, &err), 0);
    assert_int_equal(r.nseries, 2);
    assert_int_equal(r.series[0].trace, 5);
    assert_int_equal(r.series[1].trace, 2);
    hs_history_result_clear(&r);

    static const struct {
        const char *key, *value, *msg;
    } bad[] = {
        {"top", "1001", "top must be an integer from 0 to 1000 (not '1001')"},
        {"trace", "1,x", "trace must be up to 64 trace ids separated by commas"},
        {"trace", "0", "trace must be up to 64 trace ids separated by commas"},
    };
    for (size_t i = 0; i < HS_COUNTOF(bad); i++) {
        assert_int_equal(hs_history_param(&p, bad[i].key, bad[i].value, &err), HS_EINVAL);
        assert_string_equal(err.msg, bad[i].msg);
    }
    assert_int_equal(hs_sel_parse_run(&p.run, "42", &err), 0);
    assert_int_equal(hs_core_history(q, &p, &r, &err), HS_ENOENT);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_groups),           cmocka_unit_test(test_frame_label),
        cmocka_unit_test(test_error_mapping),    cmocka_unit_test(test_collapsed_escaping),
        cmocka_unit_test(test_top_typed),        cmocka_unit_test(test_empty_run),
        cmocka_unit_test(test_top_params),       cmocka_unit_test(test_sizes_typed),
        cmocka_unit_test(test_leaks_typed),      cmocka_unit_test(test_runs_typed),
        cmocka_unit_test(test_run_record_typed), cmocka_unit_test(test_history_typed),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
