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

static int64_t q_int(sqlite3 *db, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *sql = sqlite3_vmprintf(fmt, ap);
    va_end(ap);
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK) {
        fprintf(stderr, "SQL error: %s in %s\n", sqlite3_errmsg(db), sql);
        fail();
    }
    int64_t v = sqlite3_step(st) == SQLITE_ROW ? sqlite3_column_int64(st, 0) : INT64_MIN;
    sqlite3_finalize(st);
    sqlite3_free(sql);
    return v;
}

/* Runs hs-example with the collector sending to url, its output into
 * log (shown if it fails); returns its status. */
static int run_example(const char *url, const char *log)
{
    const char *bdir = getenv("HS_BUILD_DIR");
    char prog[600], lib[600], rounds[16];
    snprintf(prog, sizeof prog, "%s/bin/hs-example", bdir ? bdir : "build");
    snprintf(lib, sizeof lib, "%s/lib/libheapstore.so", bdir ? bdir : "build");
    if (getenv("HS_TEST_COLLECTOR")) snprintf(lib, sizeof lib, "%s", getenv("HS_TEST_COLLECTOR"));
    snprintf(rounds, sizeof rounds, "%d", ROUNDS);
    pid_t pid = fork();
    if (pid == 0) {
        setenv("LD_PRELOAD", lib, 1);
        setenv("HEAPSTORE_URL", url, 1);
        setenv("HEAPSTORE_SAMPLE_BYTES", "1", 1);
        setenv("HEAPSTORE_EXIT_FLUSH_MS", "10000", 1);
        /* In a sanitized tree the program and the collector are both built
         * with ASan: the collector must come first to see the allocations,
         * and the program leaks on purpose. */
        setenv("ASAN_OPTIONS", "verify_asan_link_order=0:detect_leaks=0", 1);
        if (!freopen(log, "w", stdout) || dup2(fileno(stdout), 2) < 0) _exit(126);
        execl(prog, prog, "--rounds", rounds, "--round-ms", "10", (char *)NULL);
        _exit(127);
    }
    int st;
    if (pid < 0 || waitpid(pid, &st, 0) != pid) return -1;
    int rc = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    if (rc) {
        fprintf(stderr, "hs-example (%s) exited with %d; its output:\n", url, rc);
        FILE *f = fopen(log, "r");
        char line[512];
        while (f && fgets(line, sizeof line, f)) fputs(line, stderr);
        if (f) fclose(f);
    }
    return rc;
}

/* Live bytes of the allocation sites in function fn (kind 1: at the last
 * keyframe, i.e. the end; kind 2: at the peak). */
static int64_t site_bytes(sqlite3 *db, int64_t run, int kind, const char *fn)
{
    return q_int(db,
                 "SELECT coalesce(sum(s.bytes), 0) FROM snapshots s JOIN traces t ON t.id = "
                 "s.trace JOIN frames f ON f.id = t.frame WHERE s.run = %lld AND s.kind = %d "
                 "AND s.bucket = (SELECT max(bucket) FROM snapshots WHERE run = %lld AND kind = "
                 "%d) AND f.function = '%q'",
                 (long long)run, kind, (long long)run, kind, fn);
}

static void check_example_run(sqlite3 *db, int64_t run)
{
    assert_true(run > 0);
    assert_int_equal(q_int(db, "SELECT state = 'ended' FROM runs WHERE id = %lld", (long long)run),
                     1);
    assert_int_equal(q_int(db, "SELECT clean_exit FROM runs WHERE id = %lld", (long long)run), 1);
    /* Complete: what the collector counted is what is stored. */
    assert_int_equal(q_int(db, "SELECT alloc_events - bye_alloc_events FROM runs WHERE id = %lld",
                           (long long)run),
                     0);
    assert_int_equal(
        q_int(db, "SELECT free_events - bye_free_events FROM runs WHERE id = %lld", (long long)run),
        0);
    assert_int_equal(
        q_int(db, "SELECT dropped_alloc_events FROM runs WHERE id = %lld", (long long)run), 0);
    assert_int_equal(
        q_int(db, "SELECT sum(n_events) FROM events WHERE run = %lld", (long long)run),
        q_int(db, "SELECT alloc_events + free_events FROM runs WHERE id = %lld", (long long)run));
    /* What the program did. */
    assert_int_equal(site_bytes(db, run, 1, "leaky_cache_add"), ROUNDS * 512 * KIB);
    assert_int_equal(site_bytes(db, run, 1, "build_index"), 0);
    assert_int_equal(site_bytes(db, run, 2, "build_index"), 64 * MIB);
    /* At the peak: the index, the configuration and the leaks so far. */
    int64_t peak = q_int(db, "SELECT peak_bytes FROM runs WHERE id = %lld", (long long)run);
    int64_t leaked = site_bytes(db, run, 2, "leaky_cache_add");
    assert_true(leaked >= 512 * KIB && leaked <= ROUNDS * 512 * KIB && leaked % (512 * KIB) == 0);
    assert_true(peak >= 64 * MIB + leaked);
    assert_true(peak < 64 * MIB + leaked + 2 * MIB);
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
    uint64_t deadline = tk_now_ms() + 10000;
    while (q_int(sdb, "SELECT count(*) FROM runs WHERE state = 'ended'") < 1 &&
           tk_now_ms() < deadline)
        usleep(50000);
    int64_t run = q_int(sdb, "SELECT max(id) FROM runs");
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
    assert_int_equal(q_int(sdb, "SELECT count(*) FROM runs"), 2);
    run = q_int(sdb, "SELECT max(id) FROM runs");
    check_example_run(sdb, run);
    /* Two runs of one program: the same stacks are the same traces. */
    assert_true(q_int(sdb, "SELECT count(*) FROM (SELECT trace FROM run_stacks GROUP BY trace "
                           "HAVING count(DISTINCT run) = 2)") > 0);
    sqlite3_close(sdb);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_real_collector)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
