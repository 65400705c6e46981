/* test_exact_store: a run's exact heap totals in hs_store, on a real SQLite
 * file, from frames whose answers are known: the run's peak and its moment
 * come from the observations (DROPS kinds 32-43), and the peak snapshot
 * (snapshots kind 2) is the traces' state at that moment: events applied
 * before the observation but after its peak are taken back out, events
 * that arrive later but happened before it are added, and a server that
 * restarts mid-run rebuilds the same rows from the stored events. A run
 * without observations keeps its sampled peak. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <sqlite3.h>

#include "hs_error.h"
#include "hs_proto.h"
#include "hs_store.h"
#include "hs_testkit.h"

#define MS  1000000ull
#define MIB (1ll << 20)

static char db[700];

static hs_str str(const char *s)
{
    return (hs_str){s, strlen(s)};
}

static void hello(hs_hello *h, uint64_t flags)
{
    memset(h, 0, sizeof *h);
    memset(h->run_id, 0x77, 16);
    h->flags = flags;
    h->pid = 42;
    h->ppid = 1;
    h->start_unix_ns = 1700000000000000000ull;
    h->sample_bytes = 524288;
    h->max_depth = 64;
    h->rss_interval_ms = 100;
    h->program = str("/bin/prog");
    h->hostname = str("host");
    h->collector_version = str("test");
    h->resume_key = str("exact-store-key-1");
}

typedef struct ev {
    uint64_t t_ms, stack;
    int is_free;
    int64_t bytes;
} ev;

static void apply(hs_store *s, hs_run *r, uint64_t seq, int type, const uint8_t *p, size_t n)
{
    char err[256] = "";
    int rc = hs_store_run_frame(s, r, seq, type, p, n, err, sizeof err);
    if (rc) fprintf(stderr, "frame %llu: %s\n", (unsigned long long)seq, err);
    assert_int_equal(rc, 0);
}

static void events(hs_store *s, hs_run *r, uint64_t seq, const ev *e, size_t n)
{
    uint8_t buf[512];
    hs_wr wr;
    hs_wr_init(&wr, buf, sizeof buf);
    hs_wr_varint(&wr, e[0].t_ms * MS);
    uint64_t prev = e[0].t_ms * MS;
    for (size_t i = 0; i < n; i++) {
        uint64_t t = e[i].t_ms * MS;
        hs_event_put(&wr, t - prev, e[i].stack, e[i].is_free, (uint64_t)e[i].bytes,
                     (uint64_t)e[i].bytes);
        prev = t;
    }
    apply(s, r, seq, HS_FRAME_EVENTS, buf, hs_wr_len(&wr));
}

static void observe(hs_store *s, hs_run *r, uint64_t seq, uint64_t t_ms, int64_t live, int64_t peak,
                    uint64_t peak_ms)
{
    hs_exact x = {.t_ns = t_ms * MS,
                  .live_bytes = (uint64_t)live,
                  .max_bytes = (uint64_t)peak,
                  .max_t_ns = peak_ms * MS,
                  .peak_bytes = (uint64_t)peak,
                  .peak_t_ns = peak_ms * MS,
                  .allocs = 10 * t_ms,
                  .frees = 5 * t_ms,
                  .alloc_bytes = 100 * MIB,
                  .free_bytes = 100 * MIB - (uint64_t)live,
                  .error_bytes = 16384};
    uint8_t buf[256];
    hs_wr wr;
    hs_wr_init(&wr, buf, sizeof buf);
    hs_exact_put(&wr, &x);
    apply(s, r, seq, HS_FRAME_DROPS, buf, hs_wr_len(&wr));
}

/* Two stacks, 1 and 2, each one frame. */
static void define_stacks(hs_store *s, hs_run *r)
{
    uint8_t buf[512];
    hs_wr wr;
    hs_wr_init(&wr, buf, sizeof buf);
    hs_symbol a = {.pc = 0x1000, .function = str("grow_a"), .file = str("a.c"), .line = 1};
    hs_symbol b = {.pc = 0x2000, .function = str("grow_b"), .file = str("b.c"), .line = 2};
    hs_symbol_put(&wr, &a);
    hs_symbol_put(&wr, &b);
    apply(s, r, 0, HS_FRAME_SYMBOLS, buf, hs_wr_len(&wr));
    hs_wr_init(&wr, buf, sizeof buf);
    uint64_t pa = 0x1000, pb = 0x2000;
    hs_stack_put(&wr, 1, &pa, 1);
    hs_stack_put(&wr, 2, &pb, 1);
    apply(s, r, 1, HS_FRAME_STACKS, buf, hs_wr_len(&wr));
}

/* The peak snapshot's bytes of stack k's trace, in bucket b. */
static int64_t peak_row(int64_t run, int k, int64_t b)
{
    return tk_q(db,
                "SELECT coalesce(sum(s.bytes), 0) FROM snapshots s JOIN run_stacks x ON x.run = "
                "s.run AND x.trace = s.trace WHERE s.run = %lld AND s.kind = 2 AND s.bucket = "
                "%lld AND x.stack_id = %d",
                (long long)run, (long long)b, k);
}

static hs_store *open_store(void)
{
    char err[256];
    hs_store *s;
    hs_store_config cfg = {.granularity_ns = 100 * MS};
    assert_int_equal(hs_store_open(&s, db, &cfg, err, sizeof err), 0);
    return s;
}

static hs_run *open_run(hs_store *s, uint64_t flags)
{
    char err[256];
    hs_hello h;
    hello(&h, flags);
    hs_run *r;
    assert_int_equal(hs_store_run_open(s, &r, &h, err, sizeof err), 0);
    return r;
}

static void run_case(int restart)
{
    char dir[600];
    tk_tmpdir(dir, sizeof dir, restart ? "exact-store-restart" : "exact-store");
    snprintf(db, sizeof db, "%s/hs.db", dir);
    hs_store *s = open_store();
    assert_int_equal(hs_store_begin(s), 0);
    hs_run *r = open_run(s, 0);
    int64_t run = hs_run_id(r);
    define_stacks(s, r);
    const ev e1[] = {{10, 1, 0, 1 * MIB}, {50, 2, 0, 2 * MIB}, {150, 1, 1, 1 * MIB}};
    events(s, r, 2, e1, 3);
    /* the exact peak at 60 ms: the free at 150 ms, already applied, is not in it */
    observe(s, r, 3, 160, 2 * MIB, 3 * MIB, 60);
    /* another thread's batch: 55 ms is before the peak, 170 ms after */
    const ev e2[] = {{55, 1, 0, MIB / 2}, {170, 2, 0, 1 * MIB}};
    events(s, r, 4, e2, 2);
    observe(s, r, 5, 260, 3 * MIB, 3 * MIB, 60);
    const ev e3[] = {{300, 2, 0, 4 * MIB}};
    events(s, r, 6, e3, 1); /* moves past bucket 1: the peak's rows are written */
    assert_int_equal(hs_store_commit(s), 0);
    assert_int_equal(tk_q(db, "SELECT peak_bytes FROM runs WHERE id = %lld", (long long)run),
                     3 * MIB);
    assert_int_equal(tk_q(db, "SELECT peak_t_ns FROM runs WHERE id = %lld", (long long)run),
                     60 * MS);
    assert_int_equal(peak_row(run, 1, 0), MIB + MIB / 2);
    assert_int_equal(peak_row(run, 2, 0), 2 * MIB);

    assert_int_equal(hs_store_begin(s), 0);
    observe(s, r, 7, 360, 8 * MIB, 8 * MIB, 310);
    assert_int_equal(hs_store_commit(s), 0);
    if (restart) { /* the server stops; the collector resumes on the next one */
        hs_store_free(s);
        s = open_store();
        assert_int_equal(hs_store_begin(s), 0);
        r = open_run(s, HS_HELLO_RESUMED);
        assert_int_equal(hs_run_id(r), run);
    } else {
        assert_int_equal(hs_store_begin(s), 0);
    }
    const ev e4[] = {{305, 1, 0, MIB}, {380, 2, 1, 4 * MIB}};
    events(s, r, 8, e4, 2);
    uint8_t bye[64];
    hs_wr wr;
    hs_wr_init(&wr, bye, sizeof bye);
    hs_bye b = {.t_end_ns = 400 * MS, .flags = HS_BYE_CLEAN};
    hs_bye_encode(&wr, &b);
    apply(s, r, 9, HS_FRAME_BYE, bye, hs_wr_len(&wr));
    assert_int_equal(hs_store_commit(s), 0);
    hs_store_free(s);

    /* at 310 ms: a 1 + 0.5 - 1 + 1 = 1.5 MiB, b 2 + 1 + 4 = 7 MiB */
    assert_int_equal(tk_q(db, "SELECT peak_bytes FROM runs WHERE id = %lld", (long long)run),
                     8 * MIB);
    assert_int_equal(tk_q(db, "SELECT peak_t_ns FROM runs WHERE id = %lld", (long long)run),
                     310 * MS);
    assert_int_equal(
        tk_q(db, "SELECT max(bucket) FROM snapshots WHERE run = %lld AND kind = 2", (long long)run),
        3);
    assert_int_equal(peak_row(run, 1, 3), MIB + MIB / 2);
    assert_int_equal(peak_row(run, 2, 3), 7 * MIB);
    /* the end and the totals are the last observation's */
    assert_int_equal(tk_q(db, "SELECT live_bytes FROM runs WHERE id = %lld", (long long)run),
                     8 * MIB);
    assert_int_equal(tk_q(db, "SELECT total_alloc_count FROM runs WHERE id = %lld", (long long)run),
                     3600);
    assert_int_equal(tk_q(db, "SELECT flags FROM run_exact WHERE run = %lld", (long long)run), 256);
    /* the sampled series' own peak is kept beside it: 1 + 2 - 1 + 0.5 + 1 + 4 + 1, the
     * events in the order they were applied */
    assert_int_equal(
        tk_q(db, "SELECT est_peak_bytes FROM run_exact WHERE run = %lld", (long long)run),
        8 * MIB + MIB / 2);
    assert_int_equal(tk_q(db, "SELECT max_bytes FROM heap_exact WHERE run = %lld AND bucket = 3",
                          (long long)run),
                     8 * MIB);
    assert_int_equal(
        tk_q(db, "SELECT max_t_ns FROM heap_exact WHERE run = %lld AND bucket = 3", (long long)run),
        310 * MS);
}

static void test_peak_at_exact_moment(void **state)
{
    (void)state;
    run_case(0);
}

static void test_peak_after_restart(void **state)
{
    (void)state;
    run_case(1);
}

/* No observation (an older collector): the sampled peak, as before. */
static void test_without_observations(void **state)
{
    (void)state;
    char dir[600];
    tk_tmpdir(dir, sizeof dir, "exact-store-none");
    snprintf(db, sizeof db, "%s/hs.db", dir);
    hs_store *s = open_store();
    assert_int_equal(hs_store_begin(s), 0);
    hs_run *r = open_run(s, 0);
    int64_t run = hs_run_id(r);
    define_stacks(s, r);
    const ev e1[] = {{10, 1, 0, 1 * MIB}, {50, 2, 0, 2 * MIB}, {150, 1, 1, 1 * MIB}};
    events(s, r, 2, e1, 3);
    uint8_t bye[64];
    hs_wr wr;
    hs_wr_init(&wr, bye, sizeof bye);
    hs_bye b = {.t_end_ns = 200 * MS, .flags = HS_BYE_CLEAN};
    hs_bye_encode(&wr, &b);
    apply(s, r, 3, HS_FRAME_BYE, bye, hs_wr_len(&wr));
    assert_int_equal(hs_store_commit(s), 0);
    hs_store_free(s);
    assert_int_equal(tk_q(db, "SELECT peak_bytes FROM runs WHERE id = %lld", (long long)run),
                     3 * MIB);
    assert_int_equal(tk_q(db, "SELECT peak_t_ns FROM runs WHERE id = %lld", (long long)run),
                     50 * MS);
    assert_int_equal(tk_q(db, "SELECT count(*) FROM run_exact WHERE run = %lld", (long long)run),
                     0);
    assert_int_equal(peak_row(run, 1, 0), MIB);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_peak_at_exact_moment),
        cmocka_unit_test(test_peak_after_restart),
        cmocka_unit_test(test_without_observations),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
