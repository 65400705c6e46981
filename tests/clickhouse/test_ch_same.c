/* Same answers from both stores: runs written into SQLite by the server's
 * own storage code (the query fixtures, and a recorded stream of hs-example
 * under the real collector loaded as `heapstore import` loads it) are
 * shipped to a real local ClickHouse (hs_chship_pass), then every API
 * question is asked of the SQLite store and of the ClickHouse store and the
 * two JSON answers are compared field by field. Ids differ by design (local
 * row ids there, content ids here): a SQLite id is translated through the
 * shipper's map before it is compared; everything else must be equal
 * (doubles to 1e-9 relative), rows in the same order: rows that tie are
 * ordered by content in both stores.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>
#include <sqlite3.h>
#include <zlib.h>

#include "chcompare.h"
#include "chkit.h"
#include "hs_testkit.h"
#include "queries/fixture.h"
#include "queries/ties.h"
#include "hs_chship.h"
#include "hs_queries.h"
#include "hs_store.h"
#include "store_clickhouse.h"

static ck_server ch;
static char tmpdir[600];
static int same_answers_in(const char *db_path, const char *chdb)
{
    char url[600];
    ck_url(&ch, chdb, 0, url, sizeof url);
    return ck_same_answers(db_path, url, NULL);
}

/* ---- the runs ------------------------------------------------------------------- */

static void db_path(char *out, size_t len, const char *name)
{
    snprintf(out, len, "%s/%s.db", tmpdir, name);
}

static void test_fixture_app(void **state)
{
    (void)state;
    char p[700];
    db_path(p, sizeof p, "app");
    assert_int_equal(fx_build(p), 0);
    assert_int_equal(same_answers_in(p, "fx_app"), 0);
}

static void test_fixture_rank(void **state)
{
    (void)state;
    char p[700];
    db_path(p, sizeof p, "rank");
    assert_int_equal(fx_build_rank(p, NULL, NULL), 0);
    assert_int_equal(same_answers_in(p, "fx_rank"), 0);
    /* the writer's summaries (rewritten after buckets 33 and 50, and at
     * the end) were shipped and are what the answers above stood on */
    long long mark = ck_int(&ch, "SELECT stats_bucket FROM fx_rank.runs FINAL");
    assert_true(mark >= 50);
    char sql[200];
    snprintf(sql, sizeof sql, "SELECT count() FROM fx_rank.trace_stats WHERE mark = %lld", mark);
    assert_true(ck_int(&ch, sql) > 0);
}

static void test_fixture_trend_quiet_empty(void **state)
{
    (void)state;
    char p[700];
    db_path(p, sizeof p, "trend");
    assert_int_equal(fx_build_trend(p), 0);
    int n = same_answers_in(p, "fx_trend");
    db_path(p, sizeof p, "quiet");
    assert_int_equal(fx_build_quiet(p), 0);
    n += same_answers_in(p, "fx_quiet");
    db_path(p, sizeof p, "empty");
    assert_int_equal(fx_build_empty(p), 0);
    n += same_answers_in(p, "fx_empty");
    assert_int_equal(n, 0);
}

/* Sites of exactly equal bytes whose ids (SQLite's row numbers, and
 * ClickHouse's content hashes) order them otherwise than their names: both
 * stores list them in content order (queries/ties.h), and the same. */
static void test_ties_in_content_order(void **state)
{
    (void)state;
    char p[700], url[600];
    db_path(p, sizeof p, "ties");
    assert_int_equal(fx_build_quiet(p), 0);
    assert_int_equal(same_answers_in(p, "fx_ties"), 0);
    hs_q *q;
    hs_qerr qe;
    assert_int_equal(hs_q_open(&q, p, &qe), 0);
    assert_int_equal(fx_ties_check(q), 0);
    hs_q_free(q);
    ck_url(&ch, "fx_ties", 0, url, sizeof url);
    assert_int_equal(hs_q_open(&q, url, &qe), 0);
    assert_int_equal(fx_ties_check(q), 0);
    hs_q_free(q);
}

/* hs-example under the real collector, every allocation sampled, recorded
 * to a stream file and imported as `heapstore import` does. */
static void test_recorded_stream(void **state)
{
    (void)state;
    char hsp[700], p[700];
    snprintf(hsp, sizeof hsp, "%s/example.hsp", tmpdir);
    const char *argv[] = {
        tk_build_path("bin/hs-example"), "--rounds", "6", "--round-ms", "120", NULL};
    const char *env[] = {tk_env("HEAPSTORE_URL=file://%s", hsp), "HEAPSTORE_SAMPLE_BYTES=1",
                         "ASAN_OPTIONS=verify_asan_link_order=0:detect_leaks=0", NULL};
    tk_out o;
    assert_int_equal(tk_run(&o, argv, env, TK_PRELOAD_COLLECTOR, 0), 0);
    assert_true(o.exited && o.status == 0);
    tk_out_free(&o);
    db_path(p, sizeof p, "example");
    hs_store *s;
    char err[512];
    hs_store_config cfg = {.granularity_ns = 100000000};
    assert_int_equal(hs_store_open(&s, p, &cfg, err, sizeof err), 0);
    hs_import_stats is;
    int rc = hs_store_import_file(s, hsp, &is, err, sizeof err);
    if (rc) fprintf(stderr, "import: %s\n", err);
    assert_int_equal(rc, 0);
    assert_true(is.bye && is.events > 0);
    hs_store_free(s);
    assert_int_equal(same_answers_in(p, "rec_example"), 0);
}

/* Retention by partition: the fixture's runs (they started in 2023) and
 * the recorded one (today) in one database; dropping what started more
 * than 12 months ago leaves today's run whole and nothing of the others. */
static void test_retention(void **state)
{
    (void)state;
    char url[600], err[512], app[700], ex[700];
    ck_url(&ch, "retain", 0, url, sizeof url);
    db_path(app, sizeof app, "app");
    db_path(ex, sizeof ex, "example");
    hs_chship *a, *b;
    assert_int_equal(hs_chship_new(&a, app, url, err, sizeof err), 0);
    assert_int_equal(hs_chship_pass(a, err, sizeof err), 0);
    assert_int_equal(hs_chship_new(&b, ex, url, err, sizeof err), 0);
    assert_int_equal(hs_chship_pass(b, err, sizeof err), 0);
    assert_int_equal(ck_int(&ch, "SELECT uniqExact(id) FROM retain.runs"), 3);
    long long events = ck_int(&ch, "SELECT sum(n_events) FROM retain.events FINAL WHERE run = "
                                   "(SELECT max(id) FROM retain.runs WHERE start_unix_ns > "
                                   "toInt64(toUInt32(now()) - 86400) * 1000000000)");
    assert_true(events > 0);
    int dropped = 0;
    int rc = hs_chship_retain(a, 12, &dropped, err, sizeof err);
    if (rc) fprintf(stderr, "%s\n", err);
    assert_int_equal(rc, 0);
    assert_true(dropped >= 8); /* 2023-11's partition of every table with rows */
    assert_int_equal(ck_int(&ch, "SELECT uniqExact(id) FROM retain.runs"), 1);
    assert_int_equal(ck_int(&ch, "SELECT count() FROM retain.snapshots WHERE run NOT IN (SELECT id "
                                 "FROM retain.runs)"),
                     0);
    assert_int_equal(ck_int(&ch, "SELECT sum(n_events) FROM retain.events FINAL"), events);
    hs_chship_free(a);
    hs_chship_free(b);
}

/* Frames stored unnamed and named later by the symbolizer (in place, in
 * SQLite) reach ClickHouse named, under the id they were first shipped
 * with; a frame still unnamed stays as it was. */
static void test_renamed_frames(void **state)
{
    (void)state;
    char p[700], url[600], err[512], sql[300];
    db_path(p, sizeof p, "renamed");
    hs_store *s;
    assert_int_equal(hs_store_open(&s, p, NULL, err, sizeof err), 0);
    hs_store_free(s);
    sqlite3 *h;
    assert_int_equal(sqlite3_open(p, &h), SQLITE_OK);
    assert_int_equal(sqlite3_exec(h,
                                  "INSERT INTO frames (id, function, file, line, module, "
                                  "module_offset) VALUES (1, '', '', 0, '/bin/a', 16),"
                                  " (2, '', '', 0, '/bin/a', 32)",
                                  NULL, NULL, NULL),
                     SQLITE_OK);
    sqlite3_close(h);
    ck_url(&ch, "renamed", 0, url, sizeof url);
    hs_chship *sh;
    assert_int_equal(hs_chship_new(&sh, p, url, err, sizeof err), 0);
    assert_int_equal(hs_chship_pass(sh, err, sizeof err), 0);
    long long id1 = hs_chship_content_id(sh, 'f', 1), id2 = hs_chship_content_id(sh, 'f', 2);
    assert_true(id1 > 0 && id2 > 0 && id1 != id2);
    snprintf(sql, sizeof sql, "SELECT countIf(function = '') FROM renamed.frames FINAL");
    assert_int_equal(ck_int(&ch, sql), 2);
    /* a reader that saw the frame unnamed sees its name once it comes */
    hs_qstore *qs;
    hs_qerr qe;
    hs_qstore_frame fr;
    assert_int_equal(hs_qstore_clickhouse_open(&qs, url, &qe), 0);
    assert_int_equal(qs->ops->frame(qs, id1, &fr, &qe), 0);
    assert_string_equal(fr.function, "");
    assert_int_equal(fr.module_offset, 16);
    /* the symbolizer names frame 1: "f" in a.c, line 3 */
    /* head: no build id, no path, runs seen 0 (no run of another build) */
    static const uint8_t entry[] = {0, 0, 0, 1, 1, 'f', 3, 'a', '.', 'c', 3};
    uint64_t named = 0, renamed = 0;
    assert_int_equal(hs_store_open(&s, p, NULL, err, sizeof err), 0);
    assert_int_equal(hs_store_begin(s), 0);
    assert_int_equal(hs_store_frames_name(s, entry, sizeof entry, &named, &renamed), 0);
    assert_int_equal(hs_store_commit(s), 0);
    hs_store_free(s);
    assert_int_equal(named, 1);
    assert_int_equal(hs_chship_pass(sh, err, sizeof err), 0);
    assert_int_equal(hs_chship_content_id(sh, 'f', 1), id1);
    snprintf(sql, sizeof sql,
             "SELECT function = 'f' AND file = 'a.c' AND line = 3 FROM renamed.frames FINAL "
             "WHERE id = %lld",
             id1);
    assert_int_equal(ck_int(&ch, sql), 1);
    assert_int_equal(qs->ops->frame(qs, id1, &fr, &qe), 0);
    assert_string_equal(fr.function, "f");
    assert_string_equal(fr.file, "a.c");
    assert_int_equal(fr.line, 3);
    hs_qstore_free(qs);
    snprintf(sql, sizeof sql, "SELECT function FROM renamed.frames FINAL WHERE id = %lld", id2);
    char out[64];
    assert_int_equal(ck_sql(&ch, sql, out, sizeof out), 0);
    assert_string_equal(out, "");
    hs_chship_free(sh);
}

/* /api/sql on a ClickHouse store: ClickHouse's dialect, the answer's JSON
 * shape, the row limit, read-only, the time limit, bad requests. */
static void test_sql(void **state)
{
    (void)state;
    static const struct {
        const char *body;
        int status;
        const char *want; /* a piece of the answer */
    } cases[] = {
        {"{\"sql\": \"SELECT count() AS n FROM runs\"}", 200,
         "{\"columns\": [\"n\"], \"rows\": [[2]], \"truncated\": false, \"row_count\": 1}"},
        {"{\"sql\": \"SELECT number FROM system.numbers LIMIT 5\", \"limit\": 2}", 200,
         "\"rows\": [[0], [1]], \"truncated\": true, \"row_count\": 2"},
        {"{\"sql\": \"SELECT toString(number) AS s FROM system.numbers LIMIT 1;\"}", 200,
         "\"rows\": [[\"0\"]]"},
        {"{\"sql\": \"INSERT INTO runs (id) VALUES (1)\"}", 400, "readonly"},
        {"{\"sql\": \"DROP TABLE runs\"}", 400, "readonly"},
        {"{\"sql\": \"SELECT count() FROM system.numbers_mt WHERE sleepEachRow(0) = 0\", "
         "\"timeout_ms\": 1000}",
         400, "\"timeout\""},
        {"{\"sql\": \"SELEKT 1\"}", 400, "bad_request"},
        {"{\"sql\": 7}", 400, "bad_request"},
        {"{\"sql\": \"SELECT 1\", \"limit\": 0}", 400, "limit"},
        {"not json", 400, "bad_request"},
    };
    /* as the store's user with readonly=1 per query, then as the URL's
     * sql_user (tests/clickhouse/users.xml: reader, a read-only profile) */
    for (int as = 0; as < 2; as++) {
        char url[700];
        ck_url(&ch, "fx_app", 0, url, sizeof url);
        if (as) strncat(url, "&sql_user=reader&sql_password=reader", sizeof url - strlen(url) - 1);
        hs_q *q;
        hs_qerr qe;
        assert_int_equal(hs_q_open(&q, url, &qe), 0);
        for (size_t i = 0; i <= sizeof cases / sizeof *cases; i++) {
            const char *body = i < sizeof cases / sizeof *cases
                                   ? cases[i].body
                                   : "{\"sql\": \"SELECT user FROM system.processes WHERE "
                                     "query LIKE '%hs_whoami%'\"}";
            const char *want = i < sizeof cases / sizeof *cases ? cases[i].want
                               : as                             ? "[[\"reader\"]]"
                                                                : "[[\"heapstore\"]]";
            hs_api_reply r = {0};
            hs_api_handle(q, "POST", "/api/sql", body, strlen(body), &r);
            char *j = r.json ? json_dumps(r.json, 0) : NULL;
            int status = i < sizeof cases / sizeof *cases ? cases[i].status : 200;
            int ok = r.status == status && j && strstr(j, want);
            if (!ok) fprintf(stderr, "%s: %d %s\n", body, r.status, j ? j : "-");
            free(j);
            hs_api_reply_clear(&r);
            assert_true(ok);
        }
        /* /api/health names the store and its layout */
        hs_api_reply r = {0};
        hs_api_handle(q, "GET", "/api/health", NULL, 0, &r);
        assert_string_equal(json_string_value(json_object_get(r.json, "store")), "clickhouse");
        assert_int_equal(json_integer_value(json_object_get(r.json, "store_schema")), 2);
        hs_api_reply_clear(&r);
        hs_q_free(q);
    }
}

int main(void)
{
    ck_require();
    tk_tmpdir(tmpdir, sizeof tmpdir, "ch_same");
    char chdir_[700], cmd[1400];
    snprintf(chdir_, sizeof chdir_, "%s/clickhouse", tmpdir);
    if (ck_start(&ch, chdir_, 0, NULL)) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fixture_app),
        cmocka_unit_test(test_fixture_rank),
        cmocka_unit_test(test_fixture_trend_quiet_empty),
        cmocka_unit_test(test_ties_in_content_order),
        cmocka_unit_test(test_recorded_stream),
        cmocka_unit_test(test_retention),
        cmocka_unit_test(test_renamed_frames),
        cmocka_unit_test(test_sql),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    ck_stop(&ch);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (!rc && system(cmd)) rc = 1;
    return rc;
}
