/* The real thing end to end: hs-example (a program whose heap is known) runs
 * under the real collector (build/lib/libheapstore.so, every allocation
 * sampled), streaming to the real server over TCP, and once more into a
 * .hsp file loaded with `heapstore import`. Both runs must be complete
 * (events stored = events the collector counted in BYE) and say what the
 * program did: 512 KiB leaked per round by leaky_cache_add, the 64 MiB index
 * of build_index live at the peak and gone at the end.
 * HS_TEST_COLLECTOR=PATH runs another build of libheapstore.so.
 *
 * In a sanitized tree the server runs under ASan too; the program and the
 * collector are instrumented alike, the collector preloaded first. */
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
#include <sqlite3.h>

#include "hs_testkit.h"

#define ROUNDS 22
#define KIB    1024ll
#define MIB    (1024ll * 1024ll)

/* Starts hs-example (rounds rounds of round_ms) with the collector sending
 * to url, its output into log. */
static void spawn_example(tk_proc *p, const char *url, const char *log, int rounds_n, int round_ms)
{
    char rounds[16], ms[16];
    snprintf(rounds, sizeof rounds, "%d", rounds_n);
    snprintf(ms, sizeof ms, "%d", round_ms);
    const char *argv[] = {
        tk_build_path("bin/hs-example"), "--rounds", rounds, "--round-ms", ms, NULL};
    const char *env[] = {tk_env("HEAPSTORE_URL=%s", url), "HEAPSTORE_SAMPLE_BYTES=1",
                         /* Long enough for a restarted server to take the last frames. */
                         "HEAPSTORE_EXIT_FLUSH_MS=60000",
                         /* In a sanitized tree the program and the collector are both
                          * built with ASan: the collector must come first to see the
                          * allocations, and the program leaks on purpose. */
                         "ASAN_OPTIONS=verify_asan_link_order=0:detect_leaks=0", NULL};
    assert_int_equal(tk_spawn(p, argv, env, TK_PRELOAD_COLLECTOR, log, NULL), 0);
}

/* Waits for an example started with spawn_example; returns its status (its
 * output shown if it is not 0). */
static int wait_example(tk_proc *p, const char *url)
{
    int rc = tk_wait(p, 0);
    if (rc) {
        char *out = tk_read_file(p->out);
        fprintf(stderr, "hs-example (%s) exited with %d; its output:\n%s", url, rc, out);
        free(out);
    }
    return rc;
}

static int run_example(const char *url, const char *log)
{
    tk_proc p;
    spawn_example(&p, url, log, ROUNDS, 10);
    return wait_example(&p, url);
}

/* Live bytes of the allocation sites in function fn (kind 1: at the last
 * keyframe, i.e. the end; kind 2: at the peak). */
static int64_t site_bytes(sqlite3 *db, int64_t run, int kind, const char *fn)
{
    return tk_qh(db,
                 "SELECT coalesce(sum(s.bytes), 0) FROM snapshots s JOIN traces t ON t.id = "
                 "s.trace JOIN frames f ON f.id = t.frame WHERE s.run = %lld AND s.kind = %d "
                 "AND s.bucket = (SELECT max(bucket) FROM snapshots WHERE run = %lld AND kind = "
                 "%d) AND f.function = '%q'",
                 (long long)run, kind, (long long)run, kind, fn);
}

static void check_example_run_n(sqlite3 *db, int64_t run, int64_t rounds)
{
    assert_true(run > 0);
    assert_int_equal(tk_qh(db, "SELECT state = 'ended' FROM runs WHERE id = %lld", (long long)run),
                     1);
    assert_int_equal(tk_qh(db, "SELECT clean_exit FROM runs WHERE id = %lld", (long long)run), 1);
    /* Complete: what the collector counted is what is stored. */
    assert_int_equal(tk_qh(db, "SELECT alloc_events - bye_alloc_events FROM runs WHERE id = %lld",
                           (long long)run),
                     0);
    assert_int_equal(
        tk_qh(db, "SELECT free_events - bye_free_events FROM runs WHERE id = %lld", (long long)run),
        0);
    assert_int_equal(
        tk_qh(db, "SELECT dropped_alloc_events FROM runs WHERE id = %lld", (long long)run), 0);
    assert_int_equal(
        tk_qh(db, "SELECT sum(n_events) FROM events WHERE run = %lld", (long long)run),
        tk_qh(db, "SELECT alloc_events + free_events FROM runs WHERE id = %lld", (long long)run));
    /* What the program did. */
    assert_int_equal(site_bytes(db, run, 1, "leaky_cache_add"), rounds * 512 * KIB);
    assert_int_equal(site_bytes(db, run, 1, "build_index"), 0);
    assert_int_equal(site_bytes(db, run, 2, "build_index"), 64 * MIB);
    /* At the peak: the index, the configuration and the leaks so far. */
    int64_t peak = tk_qh(db, "SELECT peak_bytes FROM runs WHERE id = %lld", (long long)run);
    int64_t leaked = site_bytes(db, run, 2, "leaky_cache_add");
    assert_true(leaked >= 512 * KIB && leaked <= rounds * 512 * KIB && leaked % (512 * KIB) == 0);
    assert_true(peak >= 64 * MIB + leaked);
    assert_true(peak < 64 * MIB + leaked + 2 * MIB);
}

static void check_example_run(sqlite3 *db, int64_t run)
{
    check_example_run_n(db, run, ROUNDS);
}

static sqlite3 *db_ro(const char *path)
{
    sqlite3 *db;
    assert_int_equal(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    sqlite3_busy_timeout(db, 10000);
    return db;
}

static void test_real_collector(void **state)
{
    (void)state;
    char dir[600], db[700], url[800], file[700], cmd[2400], log[700];
    tk_tmpdir(dir, sizeof dir, "collector");
    snprintf(db, sizeof db, "%s/hs.db", dir);
    snprintf(log, sizeof log, "%s/example.log", dir);
    tk_server srv;
    const char *args[] = {"--granularity", "100ms", NULL};
    assert_int_equal(tk_server_start(&srv, db, 0, args), 0);
    snprintf(url, sizeof url, "tcp://127.0.0.1:%d", srv.port);
    assert_int_equal(run_example(url, log), 0);
    sqlite3 *sdb;
    assert_int_equal(sqlite3_open_v2(db, &sdb, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    sqlite3_busy_timeout(sdb, 5000);
    /* The collector waits for the ACK of BYE before the program exits;
     * allow a moment all the same. */
    tk_poll(db, 1, 10000, "SELECT count(*) FROM runs WHERE state = 'ended'");
    int64_t run = tk_qh(sdb, "SELECT max(id) FROM runs");
    check_example_run(sdb, run);
    sqlite3_close(sdb);
    assert_int_equal(tk_server_stop(&srv, SIGTERM), 0);

    /* The same program into a file, imported. */
    snprintf(file, sizeof file, "%s/run.hsp", dir);
    snprintf(url, sizeof url, "file://%s", file);
    assert_int_equal(run_example(url, log), 0);
    const char *bdir = getenv("HS_BUILD_DIR");
    snprintf(cmd, sizeof cmd, "%s/bin/heapstore import --granularity 100ms --db '%s' '%s'",
             bdir ? bdir : "build", db, file);
    assert_int_equal(system(cmd), 0);
    assert_int_equal(sqlite3_open_v2(db, &sdb, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    assert_int_equal(tk_qh(sdb, "SELECT count(*) FROM runs"), 2);
    run = tk_qh(sdb, "SELECT max(id) FROM runs");
    check_example_run(sdb, run);
    /* Two runs of one program: the same stacks are the same traces. */
    assert_true(tk_qh(sdb, "SELECT count(*) FROM (SELECT trace FROM run_stacks GROUP BY trace "
                           "HAVING count(DISTINCT run) = 2)") > 0);
    sqlite3_close(sdb);
}

/* Several programs at once, each its own run, all complete. */
static void test_concurrent_programs(void **state)
{
    (void)state;
    enum { N = 4 };
    char dir[600], db[700], url[800], log[N][700];
    tk_tmpdir(dir, sizeof dir, "collector_conc");
    snprintf(db, sizeof db, "%s/hs.db", dir);
    tk_server srv;
    const char *args[] = {"--granularity", "100ms", NULL};
    assert_int_equal(tk_server_start(&srv, db, 0, args), 0);
    snprintf(url, sizeof url, "tcp://127.0.0.1:%d", srv.port);
    tk_proc procs[N];
    for (int i = 0; i < N; i++) {
        snprintf(log[i], sizeof log[i], "%s/example%d.log", dir, i);
        spawn_example(&procs[i], url, log[i], ROUNDS, 10);
    }
    for (int i = 0; i < N; i++) assert_int_equal(wait_example(&procs[i], url), 0);
    assert_true(tk_poll(db, N, 30000, "SELECT count(*) FROM runs WHERE state = 'ended'") >= N);
    sqlite3 *sdb = db_ro(db);
    assert_int_equal(tk_qh(sdb, "SELECT count(*) FROM runs"), N);
    for (int64_t run = 1; run <= N; run++) check_example_run(sdb, run);
    /* Every event the collectors counted is stored, none twice. */
    assert_int_equal(tk_qh(sdb, "SELECT sum(n_events) FROM events"),
                     tk_qh(sdb, "SELECT sum(bye_alloc_events + bye_free_events) FROM runs"));
    sqlite3_close(sdb);
    assert_int_equal(tk_server_stop(&srv, SIGTERM), 0);
}

/* The server goes down mid-run (sig) and comes back on the same port: the
 * collector reconnects, resends what was not acknowledged, and the run is
 * complete. After SIGKILL the database must be intact before the restart. */
static void restart_real(int sig, const char *name)
{
    enum { RUN_ROUNDS = 100 };
    char dir[600], db[700], url[800], log[700];
    tk_tmpdir(dir, sizeof dir, name);
    snprintf(db, sizeof db, "%s/hs.db", dir);
    snprintf(log, sizeof log, "%s/example.log", dir);
    tk_server srv;
    const char *args[] = {"--granularity", "100ms", "--grace", "60s", NULL};
    assert_int_equal(tk_server_start(&srv, db, 0, args), 0);
    int port = srv.port;
    snprintf(url, sizeof url, "tcp://127.0.0.1:%d", port);
    tk_proc p;
    spawn_example(&p, url, log, RUN_ROUNDS, 25);
    /* Mid-run: some events are stored, the run has not ended. */
    tk_poll(db, 2, 60000, "SELECT coalesce(sum(n_events), 0) FROM events_all");
    int rc = tk_server_stop(&srv, sig);
    assert_int_equal(rc, sig == SIGKILL ? 128 + SIGKILL : 0);
    sqlite3 *sdb = db_ro(db);
    char *ic = NULL;
    sqlite3_stmt *st;
    assert_int_equal(sqlite3_prepare_v2(sdb, "PRAGMA integrity_check", -1, &st, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    ic = strdup((const char *)sqlite3_column_text(st, 0));
    sqlite3_finalize(st);
    assert_string_equal(ic, "ok");
    free(ic);
    assert_true(tk_qh(sdb, "SELECT sum(n_events) FROM events_all") >= 2);
    assert_int_equal(tk_qh(sdb, "SELECT count(*) FROM runs WHERE state = 'open'"), 1);
    sqlite3_close(sdb);
    /* Back on the same port. */
    assert_int_equal(tk_server_start(&srv, db, port, args), 0);
    assert_int_equal(wait_example(&p, url), 0);
    assert_true(tk_poll(db, 1, 30000, "SELECT count(*) FROM runs WHERE state = 'ended'") >= 1);
    sdb = db_ro(db);
    assert_int_equal(tk_qh(sdb, "SELECT count(*) FROM runs"), 1);
    check_example_run_n(sdb, 1, RUN_ROUNDS);
    sqlite3_close(sdb);
    assert_int_equal(tk_server_stop(&srv, SIGTERM), 0);
}

static void test_restart_sigterm_real(void **state)
{
    (void)state;
    restart_real(SIGTERM, "collector_term");
}

static void test_restart_sigkill_real(void **state)
{
    (void)state;
    restart_real(SIGKILL, "collector_kill");
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_real_collector),
        cmocka_unit_test(test_concurrent_programs),
        cmocka_unit_test(test_restart_sigterm_real),
        cmocka_unit_test(test_restart_sigkill_real),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
