/* test_series_store: the windows of delta rows by trace (snapshot_series,
 * schema/hs_series.h) as hs_store writes them, on a real SQLite file, for a
 * run whose answer is known: every allocation recorded (sample_bytes 1),
 * so each trace's net bytes in each bucket are the sums of its events. The
 * run spans several windows, leaves one window without an event, is lost
 * in the middle of a bucket and goes on in that bucket (the run is loaded
 * again, its rollups rebuilt: the rows of the bucket from before the loss
 * stay), and is replayed by a server that restarts. For every trace, the rows read by window (and
 * the buckets handed back for windows without blocks) are the rows of snapshot_blocks bucket by
 * bucket, and their bytes are the known ones. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <sqlite3.h>

#include <jansson.h>

#include "hs_core.h"
#include "hs_error.h"
#include "hs_proto.h"
#include "hs_queries.h"
#include "q_internal.h"
#include "hs_schema.h"
#include "hs_series.h"
#include "hs_snap.h"
#include "hs_snaps.h"
#include "hs_store.h"
#include "hs_testkit.h"

#define MS      1000000ull
#define NSTACKS 24
#define NBUCKET 240 /* 10 ms buckets: 2.4 s, 7.5 windows */
#define GAP_LO  900 /* ms: no event in [GAP_LO, GAP_HI), a window without rows */
#define GAP_HI  1300

static char db[700];
static uint64_t seq;
static int64_t want[NSTACKS + 1][NBUCKET]; /* net bytes of each stack and bucket */

static hs_str str(const char *s)
{
    return (hs_str){s, strlen(s)};
}

static void apply(hs_store *s, hs_run *r, int type, const uint8_t *p, size_t n)
{
    char err[256] = "";
    int rc = hs_store_run_frame(s, r, seq++, type, p, n, err, sizeof err);
    if (rc) fprintf(stderr, "frame %llu: %s\n", (unsigned long long)seq - 1, err);
    assert_int_equal(rc, 0);
}

static hs_store *open_store(void)
{
    char err[256];
    hs_store *s;
    hs_store_config cfg = {.granularity_ns = 10 * MS};
    assert_int_equal(hs_store_open(&s, db, &cfg, err, sizeof err), 0);
    return s;
}

static hs_run *open_run(hs_store *s, uint64_t flags)
{
    char err[256];
    hs_hello h = {.flags = flags,
                  .pid = 42,
                  .ppid = 1,
                  .start_unix_ns = 1700000000000000000ull,
                  .sample_bytes = 1,
                  .max_depth = 64,
                  .rss_interval_ms = 100,
                  .program = str("/bin/prog"),
                  .hostname = str("host"),
                  .collector_version = str("test"),
                  .resume_key = str("series-store-key-1")};
    memset(h.run_id, 0x5e, 16);
    hs_run *r;
    int rc = hs_store_run_open(s, &r, &h, err, sizeof err);
    if (rc) fprintf(stderr, "run: %s\n", err);
    assert_int_equal(rc, 0);
    return r;
}

/* Stacks 1..NSTACKS, a frame each. */
static void define_stacks(hs_store *s, hs_run *r)
{
    uint8_t buf[4096];
    hs_wr wr;
    hs_wr_init(&wr, buf, sizeof buf);
    char names[NSTACKS][24];
    for (int k = 0; k < NSTACKS; k++) {
        snprintf(names[k], sizeof names[k], "grow_%d", k + 1);
        hs_symbol y = {.pc = 0x1000u * (uint64_t)(k + 1),
                       .function = str(names[k]),
                       .file = str("g.c"),
                       .line = (uint32_t)k + 1};
        hs_symbol_put(&wr, &y);
    }
    apply(s, r, HS_FRAME_SYMBOLS, buf, hs_wr_len(&wr));
    hs_wr_init(&wr, buf, sizeof buf);
    for (int k = 0; k < NSTACKS; k++) {
        uint64_t pc = 0x1000u * (uint64_t)(k + 1);
        hs_stack_put(&wr, (uint64_t)k + 1, &pc, 1);
    }
    apply(s, r, HS_FRAME_STACKS, buf, hs_wr_len(&wr));
}

static uint64_t rnd_state = 0x9e3779b97f4a7c15u;
static uint64_t rnd(void)
{
    rnd_state ^= rnd_state << 13;
    rnd_state ^= rnd_state >> 7;
    rnd_state ^= rnd_state << 17;
    return rnd_state;
}

/* What each stack holds live, to free some of it. */
static int64_t live[NSTACKS + 1];

/* One EVENTS frame of n events from t_ms on, a ms apart: allocations and
 * frees of what a stack holds, their net bytes added to want. */
static void events(hs_store *s, hs_run *r, uint64_t t_ms, int n)
{
    uint8_t buf[4096];
    hs_wr wr;
    hs_wr_init(&wr, buf, sizeof buf);
    hs_wr_varint(&wr, t_ms * MS);
    for (int i = 0; i < n; i++) {
        uint64_t t = t_ms + (uint64_t)i;
        int k = 1 + (int)(rnd() % NSTACKS);
        int is_free = live[k] > 0 && rnd() % 3 == 0;
        int64_t size =
            is_free ? 1 + (int64_t)(rnd() % (uint64_t)live[k]) : 1 + (int64_t)(rnd() % 5000);
        if (is_free && size > live[k]) size = live[k];
        hs_event_put(&wr, i ? MS : 0, (uint64_t)k, is_free, (uint64_t)size, (uint64_t)size);
        live[k] += is_free ? -size : size;
        want[k][t / 10] += is_free ? -size : size;
    }
    apply(s, r, HS_FRAME_EVENTS, buf, hs_wr_len(&wr));
}

/* Events in [from, to) ms, a frame of 7 at a time, committed each 50 ms. */
static void phase(hs_store *s, hs_run *r, uint64_t from, uint64_t to)
{
    for (uint64_t t = from; t < to; t += 7) {
        if (t >= GAP_LO && t < GAP_HI) continue;
        events(s, r, t, t + 7 <= to ? 7 : (int)(to - t));
        if (t % 50 < 7) {
            assert_int_equal(hs_store_commit(s), 0);
            assert_int_equal(hs_store_begin(s), 0);
        }
    }
}

/* A trace's rows as read: bucket and bytes, and the ranges handed back. */
typedef struct got {
    int64_t bucket[NBUCKET], bytes[NBUCKET];
    int n;
    int64_t rest_lo[NBUCKET], rest_hi[NBUCKET];
    int nrest;
    hs_snaps_rd *blocks;
    int64_t run, trace;
} got;

static int got_row(int64_t bucket, int64_t bytes, void *data)
{
    got *g = data;
    assert_true(g->n < NBUCKET);
    assert_true(!g->n || bucket > g->bucket[g->n - 1]); /* by bucket */
    g->bucket[g->n] = bucket;
    g->bytes[g->n++] = bytes;
    return 0;
}

static int got_snap(int64_t bucket, const hs_snap_row *row, void *data)
{
    return got_row(bucket, row->bytes, data);
}

static int got_rest(int64_t lo, int64_t hi, void *data)
{
    got *g = data;
    g->rest_lo[g->nrest] = lo;
    g->rest_hi[g->nrest++] = hi;
    return hs_snaps_rd_scan(g->blocks, g->run, HS_SNAP_DELTA, lo, hi, g->trace, got_snap, g);
}

/* Buckets 0..hi of the run, with windows of blocks among them. */
static void check(int64_t run, int64_t hi, int64_t windows)
{
    sqlite3 *h;
    assert_int_equal(sqlite3_open_v2(db, &h, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    assert_int_equal(hs_schema_sql_register(h), SQLITE_OK);
    hs_snaps_rd *blocks;
    hs_series_rd *series;
    assert_int_equal(hs_snaps_rd_open(h, &blocks), 0);
    assert_int_equal(hs_series_rd_open(h, &series), 0);
    /* every closed window with an event has blocks, the one without none */
    assert_int_equal(tk_qh(h,
                           "SELECT count(DISTINCT bucket) FROM snapshot_series WHERE run = %lld "
                           "AND bucket <= %lld",
                           (long long)run, (long long)hi),
                     windows);
    for (int k = 1; k <= NSTACKS; k++) {
        int64_t trace = tk_qh(h, "SELECT trace FROM run_stacks WHERE run = %lld AND stack_id = %d",
                              (long long)run, k);
        static got a, b;
        memset(&a, 0, sizeof a);
        memset(&b, 0, sizeof b);
        a.blocks = b.blocks = blocks;
        a.run = b.run = run;
        a.trace = b.trace = trace;
        assert_int_equal(hs_series_rd_trace(series, run, trace, 0, hi, got_row, got_rest, &a), 0);
        /* only the window without events is handed back */
        assert_int_equal(a.nrest, 1);
        assert_int_equal(a.rest_lo[0], 96);
        assert_int_equal(a.rest_hi[0], 127);
        assert_int_equal(hs_snaps_rd_scan(blocks, run, HS_SNAP_DELTA, 0, hi, trace, got_snap, &b),
                         0);
        assert_int_equal(a.n, b.n);
        assert_memory_equal(a.bucket, b.bucket, (size_t)a.n * sizeof a.bucket[0]);
        assert_memory_equal(a.bytes, b.bytes, (size_t)a.n * sizeof a.bytes[0]);
        /* and the bytes are the events' */
        int i = 0;
        for (int64_t bk = 0; bk <= hi; bk++) {
            while (i < a.n && a.bucket[i] < bk) i++;
            int64_t have = i < a.n && a.bucket[i] == bk ? a.bytes[i] : 0;
            if (have != want[k][bk])
                fail_msg("stack %d bucket %lld: %lld bytes, want %lld", k, (long long)bk,
                         (long long)have, (long long)want[k][bk]);
        }
        /* a part of the run: the rows within it */
        memset(&a, 0, sizeof a);
        a.blocks = blocks, a.run = run, a.trace = trace;
        assert_int_equal(hs_series_rd_trace(series, run, trace, 37, hi - 20, got_row, got_rest, &a),
                         0);
        for (int j = 0; j < a.n; j++) assert_true(a.bucket[j] >= 37 && a.bucket[j] <= hi - 20);
        assert_int_equal(a.nrest, 1);
        int inside = 0;
        for (int j = 0; j < b.n; j++) inside += b.bucket[j] >= 37 && b.bucket[j] <= hi - 20;
        assert_int_equal(a.n, inside);
    }
    hs_series_rd_free(series);
    hs_snaps_rd_free(blocks);
    sqlite3_close(h);
}

/* The answers to the questions that read a trace's rows, as JSON
 * (history made to, leaks when its cost model says so). */
static char *answers(int64_t run)
{
    hs_q *q;
    hs_qerr err;
    assert_int_equal(hs_q_open(&q, db, &err), 0);
    q->series_path = 1; /* history by each trace's rows, not a pass over all */
    hs_buf all = {0};
    char target[128];
    const char *paths[] = {"history?top=10", "history?top=3", "leaks"};
    for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++) {
        snprintf(target, sizeof target, "/api/runs/%lld/%s", (long long)run, paths[i]);
        hs_api_reply r;
        hs_api_handle(q, "GET", target, NULL, 0, &r);
        assert_int_equal(r.status, 200);
        char *js = json_dumps(r.json, JSON_SORT_KEYS | JSON_COMPACT);
        assert_non_null(js);
        hs_buf_put(&all, js, strlen(js));
        free(js);
        hs_api_reply_clear(&r);
    }
    hs_q_free(q);
    assert_false(all.oom);
    return all.p;
}

static void test_known_run(void **state)
{
    (void)state;
    char dir[600];
    tk_tmpdir(dir, sizeof dir, "series-store");
    snprintf(db, sizeof db, "%s/hs.db", dir);
    hs_store *s = open_store();
    assert_int_equal(hs_store_begin(s), 0);
    hs_run *r = open_run(s, 0);
    int64_t run = hs_run_id(r);
    define_stacks(s, r);
    phase(s, r, 0, 705);
    /* lost in bucket 70 (window 64..95), and going on in bucket 70: its
     * rows from before the loss and after it are all there */
    assert_int_equal(hs_store_run_lose(s, r), 0);
    assert_int_equal(hs_store_commit(s), 0);
    assert_int_equal(hs_store_begin(s), 0);
    r = open_run(s, HS_HELLO_RESUMED);
    assert_int_equal(hs_run_id(r), run);
    phase(s, r, 706, 1800);
    assert_int_equal(hs_store_commit(s), 0);
    check(run, 159, 4); /* windows 0, 32, 64 and 128; 160 is open */
    /* the server stops; the run is replayed from its events on the next */
    hs_store_free(s);
    s = open_store();
    assert_int_equal(hs_store_begin(s), 0);
    r = open_run(s, HS_HELLO_RESUMED);
    assert_int_equal(hs_run_id(r), run);
    phase(s, r, 1800, NBUCKET * 10);
    uint8_t bye[64];
    hs_wr wr;
    hs_wr_init(&wr, bye, sizeof bye);
    hs_bye b = {.t_end_ns = NBUCKET * 10 * MS, .flags = HS_BYE_CLEAN};
    hs_bye_encode(&wr, &b);
    apply(s, r, HS_FRAME_BYE, bye, hs_wr_len(&wr));
    assert_int_equal(hs_store_commit(s), 0);
    hs_store_free(s);
    check(run, NBUCKET - 1, 7);
    /* the answers are those of the blocks of each bucket */
    char *by_window = answers(run);
    assert_true(strstr(by_window, "grow_") != NULL);
    sqlite3 *h;
    assert_int_equal(sqlite3_open(db, &h), SQLITE_OK);
    assert_int_equal(sqlite3_exec(h, "DELETE FROM snapshot_series", NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(h);
    char *by_bucket = answers(run);
    assert_string_equal(by_window, by_bucket);
    free(by_window);
    free(by_bucket);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_known_run),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
