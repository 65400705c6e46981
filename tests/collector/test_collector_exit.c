/* The ends of a process that run no exit handlers, and what the collector
 * says about its settings.
 *
 * Children that leave through _exit or _Exit (shells, Python's os._exit,
 * multiprocessing's workers) must end their runs as exit does: everything
 * they buffered delivered, then BYE. The C workload (wl_exit.c) sends to the
 * real server and each child's run is read back from its database; the
 * python3 workload (wl_exit.py) writes file:// streams, read back with the
 * shared decoder. Bad HEAPSTORE_* values are named on stderr once per
 * process, and the collector leaves the program's signal dispositions alone.
 */
#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>
#include <sqlite3.h>

#include "hs_testkit.h"
#include "hsp_model.h"

#define CHILD_SIZE 777 /* wl_exit.c */

/* How wl_exit's parent thread allocates (see wl_exit.c): during the forks,
 * except under the ASan runtime of GCC 12, which has no fork handlers for
 * its allocator's locks (a child inheriting one held waits forever). */
#ifdef HS_TEST_ASAN_RUNTIME
#define WL_EXIT_THREAD "calm"
#else
#define WL_EXIT_THREAD "busy"
#endif

/* Live blocks (kind 1, the last keyframe: the end) of the sites in function
 * fn; bytes too when bytes is not NULL. */
static int64_t site_live(sqlite3 *db, int64_t run, const char *fn, int64_t *bytes)
{
    const char *from = "FROM snapshots s JOIN traces t ON t.id = s.trace JOIN frames f ON "
                       "f.id = t.frame WHERE s.run = %lld AND s.kind = 1 AND s.bucket = (SELECT "
                       "max(bucket) FROM snapshots WHERE run = %lld AND kind = 1) AND "
                       "f.function = '%q'";
    char sql[600];
    if (bytes) {
        snprintf(sql, sizeof sql, "SELECT coalesce(sum(s.bytes), 0) %s", from);
        *bytes = tk_qh(db, sql, (long long)run, (long long)run, fn);
    }
    snprintf(sql, sizeof sql, "SELECT coalesce(sum(s.count), 0) %s", from);
    return tk_qh(db, sql, (long long)run, (long long)run, fn);
}

/* The run is over and complete: ended by BYE with CLEAN, every event the
 * collector counted stored, none dropped. */
static int run_complete(sqlite3 *db, int64_t run)
{
    return tk_qh(db,
                 "SELECT state = 'ended' AND clean_exit = 1 AND alloc_events = bye_alloc_events "
                 "AND free_events = bye_free_events AND dropped_alloc_events = 0 AND "
                 "dropped_free_events = 0 AND (SELECT coalesce(sum(n_events), 0) FROM events "
                 "WHERE run = %lld) = alloc_events + free_events FROM runs WHERE id = %lld",
                 (long long)run, (long long)run) == 1;
}

/* Over the runs of parent's children: the blocks of uexit_child_block
 * stored, the runs complete, and those holding all k blocks exactly. */
static void children_counts(sqlite3 *sdb, int64_t parent, int64_t k, int64_t *stored,
                            int64_t *complete, int64_t *exact)
{
    sqlite3_stmt *st;
    assert_int_equal(
        sqlite3_prepare_v2(sdb, "SELECT id FROM runs WHERE parent_id = ?", -1, &st, NULL),
        SQLITE_OK);
    sqlite3_bind_int64(st, 1, parent);
    while (sqlite3_step(st) == SQLITE_ROW) {
        int64_t run = sqlite3_column_int64(st, 0), bytes = 0;
        int64_t blocks = site_live(sdb, run, "uexit_child_block", &bytes);
        *stored += blocks;
        *complete += run_complete(sdb, run);
        if (blocks == k && bytes == k * CHILD_SIZE) (*exact)++;
    }
    sqlite3_finalize(st);
}

/* ---- C children through _exit and _Exit, against the real server ---- */

static void test_exit_children(void **state)
{
    (void)state;
    enum { N = 200, K = 1000 };
    char dir[600], db[700];
    tk_tmpdir(dir, sizeof dir, "uexit");
    snprintf(db, sizeof db, "%s/hs.db", dir);
    tk_server srv;
    const char *args[] = {"--granularity", "100ms", NULL};
    assert_int_equal(tk_server_start(&srv, db, 0, args), 0);
    const char *argv[] = {tk_build_path("tests/wl_exit"),
                          tk_env("%d", N),
                          tk_env("%d", K),
                          "25",
                          WL_EXIT_THREAD,
                          NULL};
    /* A generous flush bound: the machine running the tests may be slow;
     * what is checked is that the children deliver, not how fast. */
    const char *env[] = {"HEAPSTORE_SAMPLE_BYTES=1", "HEAPSTORE_EXIT_FLUSH_MS=30000",
                         tk_env("HEAPSTORE_URL=tcp://127.0.0.1:%d", srv.port), NULL};
    tk_out r;
    tk_run(&r, argv, env, TK_PRELOAD_COLLECTOR, 300);
    tk_expect_ok(&r);
    int pid = 0, n = 0, failed = -1;
    unsigned long k = 0;
    assert_int_equal(sscanf(r.out, "parent %d\nchildren %d %lu %d", &pid, &n, &k, &failed), 4);
    assert_int_equal(failed, 0);

    /* Each collector waited for the ACK of its BYE; allow the server a
     * moment to settle all the same. */
    tk_poll(db, N + 1, 30000, "SELECT count(*) FROM runs WHERE state != 'open'");
    sqlite3 *sdb;
    assert_int_equal(sqlite3_open_v2(db, &sdb, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    sqlite3_busy_timeout(sdb, 10000);
    int64_t parent = tk_qh(sdb, "SELECT id FROM runs WHERE pid = %d", pid);
    assert_true(parent > 0);
    int64_t runs =
        tk_qh(sdb, "SELECT count(*) FROM runs WHERE parent_id = %lld", (long long)parent);
    int64_t ended = tk_qh(sdb,
                          "SELECT count(*) FROM runs WHERE parent_id = %lld AND state = 'ended' "
                          "AND clean_exit = 1",
                          (long long)parent);
    int64_t events =
        tk_qh(sdb, "SELECT sum(alloc_events + free_events) FROM runs WHERE parent_id = %lld",
              (long long)parent);
    int64_t stored = 0, complete = 0, exact = 0;
    children_counts(sdb, parent, K, &stored, &complete, &exact);
    fprintf(stderr,
            "_exit children: %lld of %d have a run, %lld ended clean, %lld complete, %lld with "
            "every block; events stored %lld, child blocks stored %lld of %lld (%.2f s)\n",
            (long long)runs, N, (long long)ended, (long long)complete, (long long)exact,
            (long long)events, (long long)stored, (long long)N * K, r.seconds);
    assert_int_equal(runs, N);
    assert_int_equal(ended, N);
    assert_int_equal(complete, N);
    assert_int_equal(exact, N);
    /* The parent: its vfork children's _exit left its run alone, and what
     * it did after them is there. */
    assert_true(run_complete(sdb, parent));
    int64_t bytes = 0;
    assert_int_equal(site_live(sdb, parent, "uexit_parent_block", &bytes), 100);
    assert_int_equal(bytes, 100 * 555);
    assert_int_equal(site_live(sdb, parent, "uexit_parent_thread", &bytes), 2000);
    assert_int_equal(bytes, 2000 * 48);
    sqlite3_close(sdb);
    /* Everything delivered: nothing reported on stderr. */
    if (strstr(r.err, "heapstore:")) fprintf(stderr, "%s", r.err);
    assert_null(strstr(r.err, "heapstore:"));
    tk_out_free(&r);
    assert_int_equal(tk_server_stop(&srv, SIGTERM), 0);
}

/* ---- python3: os._exit and multiprocessing's workers, file:// ---- */

static void test_exit_python(void **state)
{
    (void)state;
    const char *py = access("/usr/bin/python3", X_OK) == 0 ? "/usr/bin/python3" : NULL;
    if (!py) {
        fprintf(stderr, "no /usr/bin/python3: skipped\n");
        skip();
    }
    enum { N = 100, K = 50 };
    char dir[600], out[700];
    tk_tmpdir(dir, sizeof dir, "uexit_py");
    snprintf(out, sizeof out, "%s/py.hsp", dir);
    const char *argv[] = {py, tk_source_path("tests/collector/wl_exit.py"), tk_env("%d", N),
                          tk_env("%d", K), NULL};
    /* What is checked is delivery from 200 children leaving through
     * _exit, with their bytearrays: an explicit PYTHONMALLOC keeps Python's
     * small objects (test_pymem's subject) out of every child's stream. */
    const char *env[] = {"HEAPSTORE_SAMPLE_BYTES=1", "HEAPSTORE_EXIT_FLUSH_MS=30000",
                         "PYTHONMALLOC=pymalloc", tk_env("HEAPSTORE_URL=file://%s", out), NULL};
    tk_out r;
    tk_run(&r, argv, env, TK_PRELOAD_COLLECTOR, 300);
    tk_expect_ok(&r);
    int n = 0, k = 0, failed = -1;
    unsigned long size = 0;
    assert_int_equal(sscanf(r.out, "pyexit %d %d %lu %d", &n, &k, &size, &failed), 4);
    assert_int_equal(failed, 0);

    hsp_model parent;
    assert_int_equal(hsp_load(&parent, out, 0), 0);
    assert_true(parent.has_bye);
    /* Every child: PATH.<pid>, a well-formed stream ending in BYE with
     * CLEAN, every bytearray it made. */
    DIR *d = opendir(dir);
    assert_non_null(d);
    struct dirent *e;
    int files = 0, children = 0, clean = 0, exact = 0;
    uint64_t stored = 0;
    while ((e = readdir(d))) {
        if (strncmp(e->d_name, "py.hsp.", 7)) continue;
        files++;
        hsp_model m;
        char path[1000];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        assert_int_equal(hsp_load(&m, path, size + 1), 0);
        if (m.has_hello && !memcmp(m.hello.parent_run_id, parent.hello.run_id, 16)) {
            children++;
            stored += m.watch_allocs;
            if (m.error[0]) fprintf(stderr, "%s: %s\n", path, m.error);
            clean += !m.error[0] && m.has_bye && (m.bye.flags & 1);
            exact += m.watch_allocs == (uint64_t)k && m.watch_alloc_weight == k * (size + 1);
        }
        hsp_free(&m);
    }
    closedir(d);
    hsp_free(&parent);
    fprintf(stderr,
            "python children: %d of %d have a run (%d files), %d ended clean, %d with every "
            "bytearray; bytearrays stored %llu of %d (%.2f s)\n",
            children, 2 * n, files, clean, exact, (unsigned long long)stored, 2 * n * k, r.seconds);
    assert_int_equal(children, 2 * n);
    assert_int_equal(clean, 2 * n);
    assert_int_equal(exact, 2 * n);
    tk_out_free(&r);
}

/* ---- bad settings ---- */

/* Lines of s that contain needle. */
static int count_lines(const char *s, const char *needle)
{
    int n = 0;
    for (const char *p = s; p && *p;) {
        const char *eol = strchr(p, '\n');
        size_t len = eol ? (size_t)(eol - p) + 1 : strlen(p);
        char line[2048];
        snprintf(line, sizeof line, "%.*s", (int)len, p);
        n += strstr(line, needle) != NULL;
        p += len;
    }
    return n;
}

/* Each bad value: exactly one line on stderr naming the variable and the
 * value, although the program forks children that inherit it; the
 * program's own work goes on. */
static void test_bad_settings(void **state)
{
    (void)state;
    char dir[600];
    tk_tmpdir(dir, sizeof dir, "badenv");
    static const struct {
        const char *setting, *name, *value, *says;
    } cases[] = {
        {"HEAPSTORE_SAMPLE_BYTES=abc", "HEAPSTORE_SAMPLE_BYTES", "'abc'", "using 524288"},
        {"HEAPSTORE_SAMPLE_BYTES=0", "HEAPSTORE_SAMPLE_BYTES", "'0'", "using 524288"},
        {"HEAPSTORE_DEPTH=-3", "HEAPSTORE_DEPTH", "'-3'", "using 64"},
        {"HEAPSTORE_DEPTH=5000", "HEAPSTORE_DEPTH", "'5000'", "using 1024"},
        {"HEAPSTORE_RSS_MS=10ms", "HEAPSTORE_RSS_MS", "'10ms'", "using 100"},
        {"HEAPSTORE_BUFFER_MB=99999999999999999999", "HEAPSTORE_BUFFER_MB",
         "'99999999999999999999'", "using 64"},
        {"HEAPSTORE_EXIT_FLUSH_MS=2s", "HEAPSTORE_EXIT_FLUSH_MS", "'2s'", "using 2000"},
        {"HEAPSTORE_LIVE_MAX=x", "HEAPSTORE_LIVE_MAX", "'x'", "using 16777216"},
        {"HEAPSTORE_SEED=-1", "HEAPSTORE_SEED", "'-1'", "using 0"},
        {"HEAPSTORE_LINES=some", "HEAPSTORE_LINES", "'some'", "using auto"},
        {"HEAPSTORE_UNWIND=slow", "HEAPSTORE_UNWIND", "'slow'", "using fast"},
        {"HEAPSTORE_URL=tcp://:x", "HEAPSTORE_URL", "'tcp://:x'", "recording is off"},
        {"HEAPSTORE_URL=ftp://a", "HEAPSTORE_URL", "'ftp://a'", "recording is off"},
        {"HEAPSTORE_URL=file://relative", "HEAPSTORE_URL", "'file://relative'", "recording is off"},
        {"HEAPSTORE_URL=localhost:99999", "HEAPSTORE_URL", "'localhost:99999'", "recording is off"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *argv[] = {tk_build_path("tests/wl_exit"), "4", "10", "4", "calm", NULL};
        /* The case's own HEAPSTORE_URL, when it has one, comes last and wins. */
        const char *env[] = {"HEAPSTORE_SAMPLE_BYTES=1",
                             tk_env("HEAPSTORE_URL=file://%s/run%zu.hsp", dir, i), cases[i].setting,
                             NULL};
        tk_out r;
        tk_run(&r, argv, env, TK_PRELOAD_COLLECTOR, 120);
        tk_expect_ok(&r);
        int lines = count_lines(r.err, cases[i].name);
        char want[200];
        snprintf(want, sizeof want, "heapstore: %s=%s", cases[i].name, cases[i].value);
        if (lines != 1 || !strstr(r.err, want) || !strstr(r.err, cases[i].says) ||
            count_lines(r.err, "heapstore:") != 1)
            fprintf(stderr, "%s: stderr:\n%s\n", cases[i].setting, r.err);
        assert_int_equal(lines, 1);
        assert_non_null(strstr(r.err, want));
        assert_non_null(strstr(r.err, cases[i].says));
        /* Nothing else is said: no "connection refused" for a URL that
         * never named a server. */
        assert_int_equal(count_lines(r.err, "heapstore:"), 1);
        assert_non_null(strstr(r.out, "children 4 10 0"));
        tk_out_free(&r);
    }
    /* Good values say nothing. */
    const char *argv[] = {tk_build_path("tests/wl_exit"), "4", "10", "4", "calm", NULL};
    const char *env[] = {"HEAPSTORE_SAMPLE_BYTES=1", "HEAPSTORE_DEPTH=1024", "HEAPSTORE_LINES=all",
                         tk_env("HEAPSTORE_URL=file://%s/good.hsp", dir), NULL};
    tk_out r;
    tk_run(&r, argv, env, TK_PRELOAD_COLLECTOR, 120);
    tk_expect_ok(&r);
    assert_null(strstr(r.err, "heapstore:"));
    tk_out_free(&r);
}

/* ---- signal dispositions ---- */

/* Reads a little of the FIFO, then closes it: the collector's later writes
 * to it find no reader (EPIPE, and SIGPIPE for the writing thread). */
static void *fifo_reader(void *arg)
{
    int fd = open(arg, O_RDONLY);
    char buf[100];
    if (fd >= 0) {
        ssize_t n = read(fd, buf, sizeof buf);
        (void)n;
        close(fd);
    }
    return NULL;
}

/* The program's view of its signals (wl_exit sigs) is the same with the
 * collector as without it: while the collector sends to the real server, and
 * while it writes to a FIFO whose reader has gone (the program must not die
 * of SIGPIPE). */
static void test_signal_dispositions(void **state)
{
    (void)state;
    const char *argv[] = {tk_build_path("tests/wl_exit"), "sigs", NULL};
    tk_out plain, under;
    tk_run(&plain, argv, NULL, TK_PRELOAD_NONE, 60);
    tk_expect_ok(&plain);
    assert_non_null(strstr(plain.out, "sigs "));
    char dir[600], db[700], fifo[700];
    tk_tmpdir(dir, sizeof dir, "sigs");
    snprintf(db, sizeof db, "%s/hs.db", dir);
    tk_server srv;
    assert_int_equal(tk_server_start(&srv, db, 0, NULL), 0);
    const char *env[] = {"HEAPSTORE_SAMPLE_BYTES=1",
                         tk_env("HEAPSTORE_URL=tcp://127.0.0.1:%d", srv.port), NULL};
    tk_run(&under, argv, env, TK_PRELOAD_COLLECTOR, 60);
    tk_expect_ok(&under);
    assert_string_equal(plain.out, under.out);
    tk_out_free(&under);
    assert_int_equal(tk_server_stop(&srv, SIGTERM), 0);

    snprintf(fifo, sizeof fifo, "%s/fifo", dir);
    assert_int_equal(mkfifo(fifo, 0600), 0);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, fifo_reader, fifo), 0);
    const char *env2[] = {"HEAPSTORE_SAMPLE_BYTES=1", tk_env("HEAPSTORE_URL=file://%s", fifo),
                          NULL};
    tk_run(&under, argv, env2, TK_PRELOAD_COLLECTOR, 60);
    pthread_join(th, NULL);
    tk_expect_ok(&under);
    assert_string_equal(plain.out, under.out);
    assert_non_null(strstr(under.err, "not delivered")); /* the writes did fail */
    tk_out_free(&plain);
    tk_out_free(&under);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_exit_children),
        cmocka_unit_test(test_exit_python),
        cmocka_unit_test(test_bad_settings),
        cmocka_unit_test(test_signal_dispositions),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
