/* heapstore-server --store clickhouse://… end to end: hs-example (a program
 * whose heap is known) runs under the real collector, every allocation
 * sampled, streaming to the real server, which ships to a real local
 * ClickHouse; the API (which then reads ClickHouse) must say what the
 * program did: 512 KiB leaked per round by leaky_cache_add, the 64 MiB
 * index of build_index live at the peak and gone at the end. Then:
 *   - a restart of the server goes on from its marks file: no row is
 *     sent again, and no figure changes; with the marks file gone, it
 *     sends every row again: ClickHouse then holds the rows twice until it
 *     merges, and still no figure changes (nothing counted twice);
 *   - ClickHouse stopped while a program runs: the server goes on taking
 *     its frames into its buffer, and once ClickHouse is back the run
 *     arrives complete;
 *   - frames are acknowledged only once ClickHouse holds their rows.
 */
#include <setjmp.h>
#include <signal.h>
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

#include "chkit.h"
#include "hs_chttp.h"
#include "hs_testkit.h"

#define KIB 1024ll
#define MIB (1024ll * 1024ll)

static ck_server ch;
static char tmpdir[600], url[700];

/* ---- the API over HTTP ------------------------------------------------------ */

/* The bytes of function fn at moment at (by=function), 0 when absent. */
static long long fn_bytes(int port, long long run, const char *at, const char *fn)
{
    char path[300];
    snprintf(path, sizeof path, "/api/runs/%lld/top?at=%s&by=function&limit=500", run, at);
    json_t *j = tk_api_json(port, path);
    long long v = tk_rows_sum(j, "rows", fn, "self_bytes");
    json_decref(j);
    return v;
}

/* ---- the program ---------------------------------------------------------------- */

static int run_example(int port, int rounds)
{
    char r[16];
    snprintf(r, sizeof r, "%d", rounds);
    const char *argv[] = {tk_build_path("bin/hs-example"), "--rounds", r, "--round-ms", "20", NULL};
    const char *env[] = {tk_env("HEAPSTORE_URL=tcp://127.0.0.1:%d", port),
                         "HEAPSTORE_SAMPLE_BYTES=1",
                         "ASAN_OPTIONS=verify_asan_link_order=0:detect_leaks=0", NULL};
    tk_out o;
    if (tk_run(&o, argv, env, TK_PRELOAD_COLLECTOR, 0)) return -1;
    int rc = o.code;
    if (rc) fprintf(stderr, "hs-example exited with %d:\n%s%s", rc, o.out, o.err);
    tk_out_free(&o);
    return rc;
}

/* Waits (up to 60 s) until ClickHouse holds n ended runs whose events are
 * all there; returns the id of the newest. */
static long long wait_shipped(int n)
{
    char sql[400];
    snprintf(sql, sizeof sql,
             "SELECT count() FROM (SELECT id, alloc_events + free_events AS e FROM ingest.runs "
             "FINAL WHERE state = 'ended') r ANY INNER JOIN (SELECT run AS id, sum(n_events) AS e "
             "FROM ingest.events FINAL GROUP BY run) v USING (id, e)");
    for (int i = 0; i < 600; i++) {
        if (ck_int(&ch, sql) >= n) break;
        usleep(100000);
    }
    assert_int_equal(ck_int(&ch, sql), n);
    return ck_int(&ch, "SELECT id FROM ingest.runs FINAL ORDER BY start_unix_ns DESC LIMIT 1");
}

static void check_example(int port, long long run, int rounds)
{
    char sql[300];
    snprintf(sql, sizeof sql,
             "SELECT alloc_events = bye_alloc_events AND free_events = bye_free_events AND "
             "has_bye_alloc AND alloc_events > 0 FROM ingest.runs FINAL WHERE id = %lld",
             run);
    assert_int_equal(ck_int(&ch, sql), 1);
    assert_int_equal(fn_bytes(port, run, "end", "leaky_cache_add"), rounds * 512 * KIB);
    assert_int_equal(fn_bytes(port, run, "end", "build_index"), 0);
    assert_int_equal(fn_bytes(port, run, "peak", "build_index"), 64 * MIB);
}

static void test_ingest(void **state)
{
    (void)state;
    tk_server srv;
    char db[700];
    snprintf(db, sizeof db, "%s/buffer.db", tmpdir);
    const char *extra[] = {"--store", url, NULL};
    assert_int_equal(tk_server_start(&srv, db, 0, extra), 0);
    assert_int_equal(run_example(srv.port, 4), 0);
    long long run = wait_shipped(1);
    json_t *runs = tk_api_json(srv.port, "/api/runs");
    assert_non_null(runs);
    assert_int_equal(json_array_size(json_object_get(runs, "runs")), 1);
    assert_int_equal(
        json_integer_value(json_object_get(json_array_get(json_object_get(runs, "runs"), 0), "id")),
        run);
    json_decref(runs);
    check_example(srv.port, run, 4);
    /* an open run's last segment was shipped as it grew, one row a state:
     * merged away, one row a segment is left */
    char out[64];
    assert_int_equal(ck_sql(&ch, "OPTIMIZE TABLE ingest.events FINAL", out, sizeof out), 0);
    long long rows = ck_int(&ch, "SELECT count() FROM ingest.events");
    assert_int_equal(rows, ck_int(&ch, "SELECT count() FROM ingest.events FINAL"));
    long long sum = ck_int(&ch, "SELECT sum(n_events) FROM ingest.events FINAL");
    assert_int_equal(tk_server_stop(&srv, SIGTERM), 0);

    /* A restart goes on from the marks file: nothing sent again. */
    assert_int_equal(tk_server_start(&srv, db, 0, extra), 0);
    usleep(1500000); /* several passes */
    assert_int_equal(ck_int(&ch, "SELECT count() FROM ingest.events"), rows);
    check_example(srv.port, run, 4);
    assert_int_equal(tk_server_stop(&srv, SIGTERM), 0);

    /* Without it, a restart ships everything again: twice the rows, the
     * same figures. */
    char marks[800];
    snprintf(marks, sizeof marks, "%s-chship", db);
    assert_int_equal(unlink(marks), 0);
    assert_int_equal(tk_server_start(&srv, db, 0, extra), 0);
    for (int i = 0; i < 300 && ck_int(&ch, "SELECT count() FROM ingest.events") < 2 * rows; i++)
        usleep(100000);
    assert_int_equal(ck_int(&ch, "SELECT count() FROM ingest.events"), 2 * rows);
    assert_int_equal(ck_int(&ch, "SELECT sum(n_events) FROM ingest.events FINAL"), sum);
    assert_int_equal(ck_int(&ch, "SELECT count() FROM ingest.runs FINAL"), 1);
    check_example(srv.port, run, 4);

    /* ClickHouse away: the program runs to its end all the same. */
    ck_pause(&ch);
    assert_int_equal(run_example(srv.port, 3), 0);
    assert_int_equal(ck_restart(&ch), 0);
    long long run2 = wait_shipped(2);
    assert_true(run2 != run);
    check_example(srv.port, run2, 3);
    assert_true(tk_log_contains(&srv, "shipping to ClickHouse failed (will retry)"));
    assert_true(tk_log_contains(&srv, "shipping to ClickHouse works again"));
    assert_int_equal(tk_server_stop(&srv, SIGTERM), 0);
}

/* Frames are acknowledged once ClickHouse holds their rows: with
 * ClickHouse stopped, frames are committed to the buffer but not
 * acknowledged; once it is back, the ACK comes and the rows are there. */
static void test_ack_waits(void **state)
{
    (void)state;
    tk_server srv;
    char db[700], reason[200];
    snprintf(db, sizeof db, "%s/acks.db", tmpdir);
    const char *extra[] = {"--store", url, NULL};
    assert_int_equal(tk_server_start(&srv, db, 0, extra), 0);
    uint8_t id[16] = {0xac, 0x4b};
    tk_buf b = {0};
    tk_header(&b);
    tk_hello(&b, id, 0, 0, NULL);
    tk_symbols(&b, 0, 3, 5); /* seq 0 */
    uint64_t pcs[2] = {1, 2};
    tk_stack(&b, 1, pcs, 2); /* seq 1 */
    tk_event ev[4] = {{10, 1, 0, 100, 100},
                      {20, 1, 0, 100, 100},
                      {30, 1, 1, 100, 100},
                      {2500000000ull, 1, 0, 300, 300}};
    tk_events(&b, ev, 2); /* seq 2 */
    int fd = tk_connect(srv.port);
    assert_true(fd >= 0);
    assert_int_equal(tk_send(fd, b.p, b.len), 0);
    uint64_t got = 0;
    assert_int_equal(tk_wait_ack(fd, 3, &got, reason, sizeof reason, 30000), 0);
    assert_int_equal(ck_int(&ch, "SELECT sum(n_events) FROM ingest.events FINAL WHERE run IN "
                                 "(SELECT id FROM ingest.runs WHERE uuid LIKE 'ac4b%')"),
                     2);
    /* ClickHouse away: frames 3 and 4 are stored, not acknowledged */
    ck_pause(&ch);
    b.len = 0;
    tk_events(&b, ev + 2, 2);        /* seq 3 */
    tk_bye(&b, 3000000000ull, 3, 1); /* seq 4 */
    assert_int_equal(tk_send(fd, b.p, b.len), 0);
    assert_int_equal(tk_wait_ack(fd, 5, &got, reason, sizeof reason, 2000), -2);
    assert_true(got < 5);
    /* the collector reconnects (ClickHouse still away): the HELLO's ACK
     * says what ClickHouse holds, not what the buffer holds */
    close(fd);
    uint64_t acked = got;
    b.len = 0;
    tk_header(&b);
    tk_hello(&b, id, acked, HS_HELLO_RESUMED, NULL);
    fd = tk_connect(srv.port);
    assert_true(fd >= 0);
    assert_int_equal(tk_send(fd, b.p, b.len), 0);
    assert_int_equal(tk_wait_ack(fd, 0, &got, reason, sizeof reason, 10000), 0);
    assert_int_equal(got, acked);
    assert_int_equal(ck_restart(&ch), 0);
    assert_int_equal(tk_wait_ack(fd, 5, &got, reason, sizeof reason, 30000), 0);
    assert_int_equal(got, 5);
    assert_int_equal(ck_int(&ch, "SELECT sum(n_events) FROM ingest.events FINAL WHERE run IN "
                                 "(SELECT id FROM ingest.runs WHERE uuid LIKE 'ac4b%')"),
                     4);
    assert_int_equal(
        ck_int(&ch, "SELECT state = 'ended' FROM ingest.runs FINAL WHERE uuid LIKE 'ac4b%'"), 1);
    close(fd);
    tk_buf_free(&b);
    assert_int_equal(tk_server_stop(&srv, SIGTERM), 0);
}

/* --retain-months: the server drops old partitions by itself (at its
 * start, then hourly); a run of 2020 goes, today's runs stay. */
static void test_retain_flag(void **state)
{
    (void)state;
    char u[800], db[700], out[200];
    ck_url(&ch, "retained", 0, u, sizeof u);
    assert_int_equal(ck_sql(&ch, "CREATE DATABASE IF NOT EXISTS retained", out, sizeof out), 0);
    tk_server srv;
    snprintf(db, sizeof db, "%s/retained.db", tmpdir);
    const char *plain[] = {"--store", u, NULL};
    assert_int_equal(tk_server_start(&srv, db, 0, plain), 0); /* creates the tables */
    assert_int_equal(run_example(srv.port, 1), 0);
    assert_int_equal(tk_server_stop(&srv, SIGTERM), 0);
    assert_int_equal(ck_sql(&ch,
                            "INSERT INTO retained.runs (id, uuid, state, day, ver) VALUES (7, "
                            "'0700', 'ended', toDate('2020-01-15'), 1)",
                            out, sizeof out),
                     0);
    assert_int_equal(ck_int(&ch, "SELECT count() FROM retained.runs FINAL"), 2);
    const char *extra[] = {"--store", u, "--retain-months", "12", NULL};
    assert_int_equal(tk_server_start(&srv, db, 0, extra), 0);
    for (int i = 0; i < 300 && ck_int(&ch, "SELECT count() FROM retained.runs FINAL") != 1; i++)
        usleep(100000);
    assert_int_equal(ck_int(&ch, "SELECT count() FROM retained.runs FINAL WHERE id = 7"), 0);
    assert_int_equal(ck_int(&ch, "SELECT count() FROM retained.runs FINAL"), 1);
    assert_int_equal(tk_server_stop(&srv, SIGTERM), 0);
    assert_true(tk_log_contains(&srv, "partitions older than 12 months dropped"));
}

/* A --store the server cannot use stops it at once, saying why. */
static void test_bad_store(void **state)
{
    (void)state;
    tk_server srv;
    char db[700];
    snprintf(db, sizeof db, "%s/bad.db", tmpdir);
    const char *extra[] = {"--store", "clickhouse://127.0.0.1:1/bad-name", NULL};
    assert_int_not_equal(tk_server_start(&srv, db, 0, extra), 0);
}

int main(void)
{
    ck_require();
    tk_tmpdir(tmpdir, sizeof tmpdir, "ch_ingest");
    char chdir_[700], cmd[1400];
    snprintf(chdir_, sizeof chdir_, "%s/clickhouse", tmpdir);
    if (ck_start(&ch, chdir_, 0, NULL)) return 1;
    ck_url(&ch, "ingest", 0, url, sizeof url);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ingest),
        cmocka_unit_test(test_ack_waits),
        cmocka_unit_test(test_retain_flag),
        cmocka_unit_test(test_bad_store),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    ck_stop(&ch);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (!rc && system(cmd)) rc = 1;
    return rc;
}
