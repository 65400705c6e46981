/* test_exact: the exact heap totals (docs/protocol.md, "Exact heap
 * totals"), end to end. wl_exact, whose true peak, its moment and its call
 * counts are known, runs under the real collector at the default sampling
 * rate (one sample per 512 KiB), sending to a real heapstore-server with
 * 100 ms buckets; what the server stored is read from its SQLite file and
 * through the heapstore CLI.
 *
 * At that rate a 24 MiB heap is about 48 samples: the sampled series' peak
 * is off by about sqrt(24 MiB x 512 KiB) = 3.5 MiB (15%) and may fall at
 * another moment. The exact figures must instead match within these bounds:
 * - peak bytes: at most threads x 16 KiB below the program's own blocks
 *   (each thread may hold back up to HS_EXACT_STEP of net change) and at
 *   most 16 KiB above them (blocks of the C library, the loader and the
 *   thread library the program does not count itself: measured 0.7 KiB
 *   with one thread, about 1.5 KiB with four);
 * - peak moment: within one 100 ms bucket of the true one (measured: from
 *   10 us to 21 ms before the program's barrier, at the last publish of a
 *   thread's step: a thread's last allocations, under 16 KiB, and its
 *   sleeps to keep its schedule come after it);
 * - counts: at least the program's own calls, and at most 64 more (the
 *   same libraries' blocks: measured 7 allocations and 2 frees);
 * - top --at peak: the sites' state at the peak's bucket, holding what the
 *   samples of the whole growth hold (nothing is freed before the peak).
 * Each shape runs three times (the sampler draws differ every run). At
 * every allocation (HEAPSTORE_SAMPLE_BYTES=1) the run keeps its sampled,
 * requested-bytes figures, with the exact counts stored beside them.
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
#include <sqlite3.h>

#include "hs_testkit.h"

#define KIB     1024ll
#define MIB     (1024 * KIB)
#define BUCKET  100000000ll /* --granularity 100ms */
#define STEP    (16 * KIB)  /* HS_EXACT_STEP */
#define ABOVE   (16 * KIB)
#define EXTRA_N 64

static tk_server srv;
static char dir[600], db[700];

typedef struct facts {
    long long peak_bytes, peak_unix_ns, allocs, frees;
    int pid;
} facts;

/* Runs wl_exact; returns the id of its ended run and its facts. */
static int64_t run_wl(facts *f, const char *mib, const char *threads, const char *sample)
{
    const char *argv[] = {tk_build_path("tests/wl_exact"), mib, threads, "500", "2", NULL};
    const char *env[] = {tk_env("HEAPSTORE_URL=tcp://127.0.0.1:%d", srv.port),
                         "HEAPSTORE_EXIT_FLUSH_MS=30000", sample, NULL};
    tk_out r;
    tk_run(&r, argv, env, TK_PRELOAD_COLLECTOR, 120);
    tk_expect_ok(&r);
    memset(f, 0, sizeof *f);
    assert_int_equal(sscanf(r.out,
                            "peak_bytes=%lld peak_unix_ns=%lld allocs=%lld frees=%lld pid=%d",
                            &f->peak_bytes, &f->peak_unix_ns, &f->allocs, &f->frees, &f->pid),
                     5);
    tk_out_free(&r);
    int64_t run = 0;
    uint64_t deadline = tk_now_ms() + 60000;
    while (tk_now_ms() < deadline) {
        run = tk_q(db, "SELECT coalesce(max(id), 0) FROM runs WHERE pid = %d AND state = 'ended'",
                   f->pid);
        if (run > 0) break;
        usleep(50000);
    }
    assert_true(run > 0);
    return run;
}

/* `heapstore top RUN --at peak --json`'s total bytes. */
static int64_t top_at_peak(int64_t run)
{
    char id[32];
    snprintf(id, sizeof id, "%lld", (long long)run);
    const char *argv[] = {
        tk_build_path("bin/heapstore"), "top", id, "--at", "peak", "--db", db, "--json", NULL};
    const char *env[] = {"HEAPSTORE_URL=", NULL};
    tk_out r;
    tk_run(&r, argv, env, TK_PRELOAD_NONE, 60);
    tk_expect_ok(&r);
    const char *k = strstr(r.out, "\"total_bytes\":");
    assert_non_null(k);
    int64_t v = strtoll(k + strlen("\"total_bytes\":"), NULL, 10);
    tk_out_free(&r);
    return v;
}

static void check_run(int64_t run, const facts *f, int threads)
{
    long long peak = tk_q(db, "SELECT peak_bytes FROM runs WHERE id = %lld", (long long)run);
    long long t = tk_q(db, "SELECT peak_t_ns FROM runs WHERE id = %lld", (long long)run);
    long long start = tk_q(db, "SELECT start_unix_ns FROM runs WHERE id = %lld", (long long)run);
    long long allocs = tk_q(db, "SELECT allocs FROM run_exact WHERE run = %lld", (long long)run);
    long long frees = tk_q(db, "SELECT frees FROM run_exact WHERE run = %lld", (long long)run);
    long long est =
        tk_q(db, "SELECT est_peak_bytes FROM run_exact WHERE run = %lld", (long long)run);
    long long true_t = f->peak_unix_ns - start;
    fprintf(stderr,
            "run %lld (%d threads): peak %lld B at %.6f s, true %lld B at %.6f s (sampled: %lld "
            "B); allocs %lld (program %lld), frees %lld (program %lld)\n",
            (long long)run, threads, peak, t / 1e9, f->peak_bytes, true_t / 1e9, est, allocs,
            f->allocs, frees, f->frees);
    assert_int_equal(tk_q(db, "SELECT flags & 256 FROM run_exact WHERE run = %lld", (long long)run),
                     256);
    assert_true(peak >= f->peak_bytes - threads * STEP);
    assert_true(peak <= f->peak_bytes + ABOVE);
    assert_true(llabs(t - true_t) <= BUCKET);
    assert_true(allocs >= f->allocs && allocs <= f->allocs + EXTRA_N);
    assert_true(frees >= f->frees && frees <= f->frees + EXTRA_N);
    /* the program frees everything it grew before it exits */
    long long end = tk_q(db, "SELECT live_bytes FROM runs WHERE id = %lld", (long long)run);
    assert_true(end <= threads * STEP + ABOVE);
    /* The series: its highest point is the peak, in the peak's bucket. */
    assert_int_equal(
        tk_q(db, "SELECT max(max_bytes) FROM heap_exact WHERE run = %lld", (long long)run), peak);
    assert_int_equal(tk_q(db,
                          "SELECT bucket FROM heap_exact WHERE run = %lld ORDER BY max_bytes DESC "
                          "LIMIT 1",
                          (long long)run),
                     t / BUCKET);
    /* The peak snapshot is taken at the exact peak's moment: its bucket,
     * and every sample of the growth in it (the sampled heap only grows
     * until then, so it is the sampled series' highest too). */
    assert_int_equal(
        tk_q(db, "SELECT max(bucket) FROM snapshots WHERE run = %lld AND kind = 2", (long long)run),
        t / BUCKET);
    int64_t at_peak = top_at_peak(run);
    long long before = tk_q(db,
                            "SELECT coalesce(max(live_bytes), 0) FROM heap_series WHERE run = "
                            "%lld AND bucket < %lld",
                            (long long)run, t / BUCKET);
    fprintf(stderr, "  top --at peak: %lld B estimated; sampled series before it: %lld B\n",
            (long long)at_peak, before);
    assert_true(at_peak >= before);
    assert_true(at_peak > 0);
}

static void test_one_thread(void **state)
{
    (void)state;
    for (int i = 0; i < 3; i++) {
        facts f;
        int64_t run = run_wl(&f, "24", "1", "HEAPSTORE_SAMPLE_BYTES=");
        check_run(run, &f, 1);
    }
}

static void test_four_threads(void **state)
{
    (void)state;
    for (int i = 0; i < 3; i++) {
        facts f;
        int64_t run = run_wl(&f, "24", "4", "HEAPSTORE_SAMPLE_BYTES=");
        check_run(run, &f, 4);
    }
}

/* At every allocation the samples are exact already, in requested bytes:
 * the run keeps them; the counts are stored beside them. */
static void test_every_allocation(void **state)
{
    (void)state;
    facts f;
    int64_t run = run_wl(&f, "4", "1", "HEAPSTORE_SAMPLE_BYTES=1");
    long long id = (long long)run;
    assert_int_equal(tk_q(db, "SELECT flags & 256 FROM run_exact WHERE run = %lld", id), 0);
    assert_int_equal(tk_q(db,
                          "SELECT r.peak_bytes = e.est_peak_bytes FROM runs r JOIN run_exact e ON "
                          "e.run = r.id WHERE r.id = %lld",
                          id),
                     1);
    long long allocs = tk_q(db, "SELECT allocs FROM run_exact WHERE run = %lld", id);
    assert_true(allocs >= f.allocs && allocs <= f.allocs + EXTRA_N);
    /* requested bytes at the peak: at most the usable sizes (equal under
     * ASan, whose usable size is the request) and the libraries' blocks */
    long long peak = tk_q(db, "SELECT peak_bytes FROM runs WHERE id = %lld", id);
    assert_true(peak >= 4 * MIB && peak <= f.peak_bytes + ABOVE);
}

static int setup(void **state)
{
    (void)state;
    tk_tmpdir(dir, sizeof dir, "exact");
    snprintf(db, sizeof db, "%s/hs.db", dir);
    const char *const extra[] = {"--granularity", "100ms", NULL};
    return tk_server_start(&srv, db, 0, extra);
}

static int teardown(void **state)
{
    (void)state;
    return tk_server_stop(&srv, SIGTERM) == 0 ? 0 : -1;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_one_thread),
        cmocka_unit_test(test_four_threads),
        cmocka_unit_test(test_every_allocation),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
