/* A collector failing over between front ends by itself (docs/clickhouse.md,
 * "Many front ends, one cluster"): two heapstore-servers A and B on one
 * ClickHouse database, and hs-example (a program whose heap is known)
 * under the real collector, every allocation sampled, with
 * HEAPSTORE_URL listing A then B (HEAPSTORE_SEED picks A first).
 *   - A is killed (SIGKILL) mid-run, once ClickHouse holds a part of the
 *     run: the collector moves to B, which fetches the run back from
 *     ClickHouse and carries it to its end. One run, ended, every event
 *     the collector counted stored once; the known answers hold (512 KiB
 *     leaked per round by leaky_cache_add at the end, in the leaks too;
 *     build_index's 64 MiB at the peak and none at the end; the peak
 *     itself within 64 KiB above the program's own blocks: the C
 *     library's); and every answer of the API about it equals, field by
 *     field (chcompare), that of B's own SQLite copy of the whole run.
 *   - The first address dead from the start (nothing listens there): the
 *     run lands on B, whole, and the same answers hold.
 */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "chcompare.h"
#include "chkit.h"
#include "hs_testkit.h"

#define KIB    1024ll
#define MIB    (1024 * KIB)
#define ROUNDS 30
#define ABOVE  (64 * KIB) /* the C library's blocks beside the program's at the peak */

static ck_server ch;
static char tmpdir[600];

/* The bytes (field) of the rows named fn in array key of the answer at
 * path, summed. */
static long long row_bytes(int port, const char *path, const char *key, const char *fn,
                           const char *field)
{
    json_t *j = tk_api_json(port, path);
    long long v = tk_rows_sum(j, key, fn, field);
    json_decref(j);
    return v;
}

/* Waits (up to 60 s) until ClickHouse holds the ended run of db with
 * every event its BYE counts; its id. */
static long long wait_whole(const char *db)
{
    char sql[600];
    snprintf(sql, sizeof sql,
             "SELECT count() FROM (SELECT id, alloc_events + free_events AS e FROM %s.runs FINAL "
             "WHERE state = 'ended' AND alloc_events = bye_alloc_events AND free_events = "
             "bye_free_events) r ANY INNER JOIN (SELECT run AS id, sum(n_events) AS e FROM "
             "%s.events FINAL GROUP BY run) v USING (id, e)",
             db, db);
    for (int i = 0; i < 600 && ck_int(&ch, sql) < 1; i++) usleep(100000);
    assert_int_equal(ck_int(&ch, sql), 1);
    snprintf(sql, sizeof sql, "SELECT count() FROM %s.runs FINAL", db);
    assert_int_equal(ck_int(&ch, sql), 1);
    snprintf(sql, sizeof sql, "SELECT id FROM %s.runs FINAL", db);
    return ck_int(&ch, sql);
}

/* The known answers of hs-example's ROUNDS rounds, through front end port. */
static void check_known(int port, long long run)
{
    char path[300];
    snprintf(path, sizeof path, "/api/runs/%lld/top?at=end&by=function&limit=500", run);
    assert_int_equal(row_bytes(port, path, "rows", "leaky_cache_add", "self_bytes"),
                     ROUNDS * 512 * KIB);
    assert_int_equal(row_bytes(port, path, "rows", "build_index", "self_bytes"), 0);
    snprintf(path, sizeof path, "/api/runs/%lld/top?at=peak&by=function&limit=500", run);
    assert_int_equal(row_bytes(port, path, "rows", "build_index", "self_bytes"), 64 * MIB);
    snprintf(path, sizeof path, "/api/runs/%lld/leaks?limit=500", run);
    assert_int_equal(row_bytes(port, path, "live_at_end", "leaky_cache_add", "bytes"),
                     ROUNDS * 512 * KIB);
    snprintf(path, sizeof path, "/api/runs/%lld", run);
    json_t *j = tk_api_json(port, path);
    long long peak = json_integer_value(json_object_get(json_object_get(j, "run"), "peak_bytes"));
    long long own = 1 * MIB + (ROUNDS / 2 + 1) * 512 * KIB + 64 * MIB;
    if (peak < own || peak > own + ABOVE) fprintf(stderr, "peak %lld, own %lld\n", peak, own);
    assert_true(peak >= own && peak <= own + ABOVE);
    json_decref(j);
}

/* Front ends on database db of url (a NULL: B only); an ended run stays
 * in their buffers for the comparison (buffer_keep). */
static void front_ends(tk_server *a, tk_server *b, const char *db, char *url, size_t len)
{
    strncat(url, "&buffer_keep=600", len - strlen(url) - 1);
    char da[700], dbb[700];
    snprintf(da, sizeof da, "%s/%s-a.db", tmpdir, db);
    snprintf(dbb, sizeof dbb, "%s/%s-b.db", tmpdir, db);
    const char *extra[] = {"--store", url, NULL};
    if (a) assert_int_equal(tk_server_start(a, da, 0, extra), 0);
    assert_int_equal(tk_server_start(b, dbb, 0, extra), 0);
}

static void test_killed_mid_run(void **state)
{
    (void)state;
    char url[700], scratch[700], list[200], out[700];
    ck_url(&ch, "failover", 0, url, sizeof url);
    ck_url(&ch, "scratch", 0, scratch, sizeof scratch);
    tk_server a, b;
    front_ends(&a, &b, "failover", url, sizeof url);
    snprintf(list, sizeof list, "tcp://127.0.0.1:%d,tcp://127.0.0.1:%d", a.port, b.port);
    snprintf(out, sizeof out, "%s/killed.out", tmpdir);
    const char *argv[] = {
        tk_build_path("bin/hs-example"), "--rounds", "30", "--round-ms", "60", NULL};
    const char *env[] = {tk_env("HEAPSTORE_URL=%s", list),
                         "HEAPSTORE_SAMPLE_BYTES=1",
                         "HEAPSTORE_EXIT_FLUSH_MS=60000",
                         "HEAPSTORE_SEED=2", /* A first */
                         "ASAN_OPTIONS=verify_asan_link_order=0:detect_leaks=0",
                         NULL};
    tk_proc p;
    assert_int_equal(tk_spawn(&p, argv, env, TK_PRELOAD_COLLECTOR, out, NULL), 0);
    /* ClickHouse holds a part of the run (its row and events), shipped by
     * A: kill A */
    const char *part = "SELECT (SELECT count() FROM failover.runs) > 0 AND (SELECT count() FROM "
                       "failover.events) > 0";
    for (int i = 0; i < 500 && ck_int(&ch, part) != 1; i++) usleep(20000);
    assert_int_equal(ck_int(&ch, part), 1);
    assert_int_equal(tk_server_stop(&a, SIGKILL), 128 + SIGKILL);
    long long before = ck_int(&ch, "SELECT sum(n_events) FROM failover.events FINAL");
    assert_int_equal(tk_wait(&p, 120000), 0);
    char *said = tk_read_file(out);
    if (strstr(said, "heapstore:")) fprintf(stderr, "%s", said);
    assert_null(strstr(said, "heapstore:")); /* delivered, nothing dropped */
    free(said);

    long long run = wait_whole("failover");
    assert_true(tk_log_contains(&b, "resumed here: fetched from ClickHouse"));
    assert_true(before < ck_int(&ch, "SELECT sum(n_events) FROM failover.events FINAL"));
    check_known(b.port, run);
    /* B's buffer holds the whole run (fetched back, then carried on) */
    assert_int_equal(tk_q(b.db, "SELECT count(*) FROM runs WHERE state = 'ended'"), 1);
    assert_int_equal(ck_same_answers(b.db, scratch, url), 0);
    assert_int_equal(tk_server_stop(&b, SIGTERM), 0);
}

static void test_first_dead(void **state)
{
    (void)state;
    char url[700], scratch[700], list[200];
    ck_url(&ch, "deadfirst", 0, url, sizeof url);
    ck_url(&ch, "scratch2", 0, scratch, sizeof scratch);
    tk_server b;
    front_ends(NULL, &b, "deadfirst", url, sizeof url);
    snprintf(list, sizeof list, "127.0.0.1:%d,127.0.0.1:%d", tk_free_port(), b.port);
    char r[16];
    snprintf(r, sizeof r, "%d", ROUNDS);
    const char *argv[] = {tk_build_path("bin/hs-example"), "--rounds", r, "--round-ms", "20", NULL};
    const char *env[] = {tk_env("HEAPSTORE_URL=%s", list),
                         "HEAPSTORE_SAMPLE_BYTES=1",
                         "HEAPSTORE_EXIT_FLUSH_MS=60000",
                         "HEAPSTORE_SEED=4", /* the dead one first */
                         "ASAN_OPTIONS=verify_asan_link_order=0:detect_leaks=0",
                         NULL};
    tk_out o;
    assert_int_equal(tk_run(&o, argv, env, TK_PRELOAD_COLLECTOR, 120), 0);
    tk_expect_ok(&o);
    if (strstr(o.err, "heapstore:")) fprintf(stderr, "%s", o.err);
    assert_null(strstr(o.err, "heapstore:"));
    tk_out_free(&o);
    long long run = wait_whole("deadfirst");
    check_known(b.port, run);
    assert_int_equal(ck_same_answers(b.db, scratch, url), 0);
    assert_int_equal(tk_server_stop(&b, SIGTERM), 0);
}

int main(void)
{
    ck_require();
    const char *bdir = getenv("HS_BUILD_DIR");
    snprintf(tmpdir, sizeof tmpdir, "%s/tests/tmp/ch_failover.%d", bdir ? bdir : "/tmp",
             (int)getpid());
    char chdir_[700], cmd[1400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s'", tmpdir, tmpdir);
    if (system(cmd)) return 1;
    snprintf(chdir_, sizeof chdir_, "%s/clickhouse", tmpdir);
    if (ck_start(&ch, chdir_, 0, NULL)) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_killed_mid_run),
        cmocka_unit_test(test_first_dead),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    ck_stop(&ch);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (!rc && system(cmd)) rc = 1;
    return rc;
}
