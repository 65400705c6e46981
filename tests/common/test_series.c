/* test_series: the windows' delta rows by trace (schema/hs_series.c).
 * Blocks of traces at the ends of int64, buckets at both ends of the window
 * and values of every size come back as they went in; every truncation and
 * a changed version, trace count or bucket is refused, not misread. A
 * window written in several blocks is read back trace by trace, for any
 * range of buckets: traces before the first block, between blocks and
 * after the last have no rows; windows without blocks are handed back as
 * ranges, consecutive ones merged, in bucket order with the rows around
 * them. INSERT of a delta row into `snapshots` drops its window. */
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
#include "hs_schema.h"
#include "hs_series.h"
#include "hs_testkit.h"

static void roundtrip(const hs_series_row *x, size_t n, int64_t window)
{
    hs_buf b = {0};
    assert_int_equal(hs_series_encode(x, n, window, &b, NULL), 0);
    static hs_series_row y[HS_SERIES_BLOCK_ROWS];
    size_t m;
    assert_int_equal(hs_series_decode(b.p, b.n, window, y, &m, NULL), 0);
    assert_int_equal(m, n);
    assert_memory_equal(x, y, n * sizeof *x);
    for (size_t cut = 0; cut < b.n; cut += 1 + cut / 8)
        assert_int_equal(hs_series_decode(b.p, cut, window, y, &m, NULL), HS_ECORRUPT);
    b.p[0] ^= 1; /* another version */
    assert_int_equal(hs_series_decode(b.p, b.n, window, y, &m, NULL), HS_ECORRUPT);
    b.p[0] ^= 1;
    b.p[1] ^= 2; /* another number of traces */
    assert_int_equal(hs_series_decode(b.p, b.n, window, y, &m, NULL), HS_ECORRUPT);
    hs_buf_free(&b);
}

/* Rows of t traces from first, trace i with 1 + (i * 7) % 32 rows spread
 * over the window, values of every sign and size. */
static size_t make_rows(hs_series_row *x, size_t t, int64_t first, int64_t window)
{
    size_t n = 0;
    for (size_t i = 0; i < t; i++) {
        int64_t trace = first + (int64_t)(i * 3);
        size_t rows = 1 + (i * 7) % HS_SERIES_WINDOW;
        for (size_t k = 0; k < rows; k++) {
            int64_t off = (int64_t)(k * HS_SERIES_WINDOW / rows + (i % 2) * (k + 1 == rows));
            if (off >= HS_SERIES_WINDOW) off = HS_SERIES_WINDOW - 1;
            if (n && x[n - 1].trace == trace && x[n - 1].bucket >= window + off) continue;
            x[n++] = (hs_series_row){trace, window + off,
                                     (int64_t)((i * 2654435761u + k) % 100000) - 50000 * (k % 2)};
        }
    }
    return n;
}

static void test_codec(void **state)
{
    (void)state;
    hs_series_row odd[] = {{INT64_MIN, 0, INT64_MIN},
                           {INT64_MIN, HS_SERIES_WINDOW - 1, INT64_MAX},
                           {-1, 5, 0},
                           {INT64_MAX, 0, 1}};
    roundtrip(odd, 4, 0);
    static hs_series_row x[HS_SERIES_BLOCK_ROWS];
    size_t n = make_rows(x, HS_SERIES_BLOCK_TRACES, 1000, 3200);
    roundtrip(x, n, 3200);
    roundtrip(x, 1, 3200);
    /* a bucket outside the window is refused: the same blob read as the
     * next window's is fine, but its offsets are checked */
    hs_series_row far[] = {{7, 31, 1}};
    hs_buf b = {0};
    assert_int_equal(hs_series_encode(far, 1, 0, &b, NULL), 0);
    hs_series_row y[HS_SERIES_WINDOW];
    size_t m;
    assert_int_equal(hs_series_decode(b.p, b.n, 0, y, &m, NULL), 0);
    b.p[b.n - 2] = 40; /* the bucket's offset: past the window */
    assert_int_equal(hs_series_decode(b.p, b.n, 0, y, &m, NULL), HS_ECORRUPT);
    hs_buf_free(&b);
}

static sqlite3 *open_db(void)
{
    sqlite3 *db;
    assert_int_equal(sqlite3_open(":memory:", &db), SQLITE_OK);
    assert_int_equal(sqlite3_exec(db,
                                  "CREATE TABLE snapshot_series (run INTEGER NOT NULL, bucket "
                                  "INTEGER NOT NULL, first INTEGER NOT NULL, last INTEGER NOT "
                                  "NULL, data BLOB NOT NULL, PRIMARY KEY (run, bucket, first)) "
                                  "WITHOUT ROWID",
                                  NULL, NULL, NULL),
                     SQLITE_OK);
    return db;
}

typedef struct got {
    int64_t bucket[512], bytes[512];
    int n;
    int64_t lo[8], hi[8];
    int nrest;
    int order[520]; /* 0 a row, 1 a range, as they came */
    int norder;
} got;

static int got_row(int64_t bucket, int64_t bytes, void *data)
{
    got *g = data;
    g->bucket[g->n] = bucket;
    g->bytes[g->n++] = bytes;
    g->order[g->norder++] = 0;
    return 0;
}

static int got_rest(int64_t lo, int64_t hi, void *data)
{
    got *g = data;
    g->lo[g->nrest] = lo;
    g->hi[g->nrest++] = hi;
    g->order[g->norder++] = 1;
    return 0;
}

static int stop_row(int64_t bucket, int64_t bytes, void *data)
{
    (void)bucket, (void)bytes, (void)data;
    return 7;
}

static int stop_rest(int64_t lo, int64_t hi, void *data)
{
    (void)lo, (void)hi, (void)data;
    return 7;
}

/* The rows of trace in x[0..n), buckets lo..hi, as got. */
static void expect(const hs_series_row *x, size_t n, int64_t trace, int64_t lo, int64_t hi, got *g)
{
    memset(g, 0, sizeof *g);
    for (size_t i = 0; i < n; i++)
        if (x[i].trace == trace && x[i].bucket >= lo && x[i].bucket <= hi)
            got_row(x[i].bucket, x[i].bytes, g);
}

/* trace's rows of run 1, buckets lo..hi, read by window: window 0 holds
 * a[0..na), 64 c[0..nc), 32 and 96.. have no blocks. */
static void check_trace(hs_series_rd *r, int64_t trace, int64_t lo, int64_t hi,
                        const hs_series_row *a, size_t na, const hs_series_row *c, size_t nc)
{
    static got g, e, e2;
    memset(&g, 0, sizeof g);
    assert_int_equal(hs_series_rd_trace(r, 1, trace, lo, hi, got_row, got_rest, &g), 0);
    /* the rows: window 0's, then 64's */
    expect(a, na, trace, lo, hi < 31 ? hi : 31, &e);
    int first = e.n;
    expect(c, nc, trace, lo > 64 ? lo : 64, hi < 95 ? hi : 95, &e2);
    for (int i = 0; i < e2.n; i++) got_row(e2.bucket[i], e2.bytes[i], &e);
    assert_int_equal(g.n, e.n);
    assert_memory_equal(g.bucket, e.bucket, (size_t)g.n * sizeof g.bucket[0]);
    assert_memory_equal(g.bytes, e.bytes, (size_t)g.n * sizeof g.bytes[0]);
    /* the windows without blocks: 32..63 and 96.., each once, in order
     * between the rows */
    int gap = lo <= 63 && hi >= 32, ri = 0;
    assert_int_equal(g.nrest, gap + (hi >= 96));
    if (gap) {
        assert_int_equal(g.lo[ri], lo > 32 ? lo : 32);
        assert_int_equal(g.hi[ri], hi < 63 ? hi : 63);
        int at = 0; /* after window 0's rows, before 64's */
        while (g.order[at] == 0) at++;
        assert_int_equal(at, first);
        ri++;
    }
    if (hi >= 96) {
        assert_int_equal(g.lo[ri], 96 > lo ? 96 : lo);
        assert_int_equal(g.hi[ri], hi);
        assert_int_equal(g.order[g.norder - 1], 1);
    }
}

static void test_read(void **state)
{
    (void)state;
    sqlite3 *db = open_db();
    hs_series_wr *w;
    assert_int_equal(hs_series_wr_open(db, &w), 0);
    /* windows 0 and 64 of run 1, many traces of wide values: several blocks
     * each; window 32 has none */
    static hs_series_row a[HS_SERIES_BLOCK_ROWS * 2], c[HS_SERIES_BLOCK_ROWS * 2];
    size_t na = make_rows(a, 400, 100, 0), nc = make_rows(c, 400, 101, 64);
    assert_int_equal(hs_series_put(w, 1, 0, a, na), 0);
    assert_int_equal(hs_series_put(w, 1, 64, c, nc), 0);
    assert_int_equal(hs_series_put(w, 2, 0, a, 10), 0); /* another run */
    assert_true(tk_qh(db, "SELECT count(*) FROM snapshot_series WHERE run = 1 AND bucket = 0") > 2);
    assert_true(tk_qh(db, "SELECT max(length(data)) FROM snapshot_series") <=
                HS_SERIES_BLOCK_BYTES);
    /* the blocks' keys are their traces */
    assert_int_equal(tk_qh(db, "SELECT min(first) FROM snapshot_series WHERE run = 1 AND "
                               "bucket = 0"),
                     100);
    hs_series_rd *r;
    assert_int_equal(hs_series_rd_open(db, &r), 0);
    static got g;
    int64_t ranges[][2] = {{0, 200}, {0, 63}, {5, 70}, {40, 90}, {64, 95}, {10, 20}};
    int64_t traces[] = {1, 99, 100, 103, 301, 1000, 1001, 1197, 1199, 5000, 101, 1198};
    for (size_t k = 0; k < sizeof ranges / sizeof ranges[0]; k++)
        for (size_t t = 0; t < sizeof traces / sizeof traces[0]; t++)
            check_trace(r, traces[t], ranges[k][0], ranges[k][1], a, na, c, nc);
    /* a run with no blocks: all of it handed back at once */
    memset(&g, 0, sizeof g);
    assert_int_equal(hs_series_rd_trace(r, 3, 100, 0, 500, got_row, got_rest, &g), 0);
    assert_int_equal(g.nrest, 1);
    assert_int_equal(g.lo[0], 0);
    assert_int_equal(g.hi[0], 500);
    /* a stop is passed back, from either */
    assert_int_equal(hs_series_rd_trace(r, 3, 100, 0, 500, got_row, stop_rest, &g), 7);
    assert_int_equal(hs_series_rd_trace(r, 1, 100, 0, 500, stop_row, got_rest, &g), 7);
    /* a window dropped is handed back from then on */
    assert_int_equal(hs_series_drop(db, 1, 70), 0);
    memset(&g, 0, sizeof g);
    assert_int_equal(hs_series_rd_trace(r, 1, 101, 0, 95, got_row, got_rest, &g), 0);
    assert_int_equal(g.nrest, 1);
    assert_int_equal(g.lo[0], 32);
    assert_int_equal(g.hi[0], 95);
    /* written again, with nothing: no blocks */
    assert_int_equal(hs_series_put(w, 1, 0, NULL, 0), 0);
    assert_int_equal(tk_qh(db, "SELECT count(*) FROM snapshot_series WHERE run = 1"), 0);
    hs_series_rd_free(r);
    hs_series_wr_free(w);
    sqlite3_close(db);
}

/* INSERT into snapshots of a delta row drops its window; other kinds
 * leave it. */
static void test_insert_drops(void **state)
{
    (void)state;
    sqlite3 *db = open_db();
    assert_int_equal(hs_schema_sql_register(db), SQLITE_OK);
    assert_int_equal(sqlite3_exec(db, TK_SNAPSHOT_BLOCKS_SQL, NULL, NULL, NULL), SQLITE_OK);
    hs_series_wr *w;
    assert_int_equal(hs_series_wr_open(db, &w), 0);
    hs_series_row x[] = {{5, 33, 10}, {6, 40, 20}};
    assert_int_equal(hs_series_put(w, 1, 32, x, 2), 0);
    hs_series_row z[] = {{5, 70, 1}};
    assert_int_equal(hs_series_put(w, 1, 64, z, 1), 0);
    assert_int_equal(
        sqlite3_exec(db, "INSERT INTO snapshots VALUES (1, 1, 40, 5, 1, 1)", NULL, NULL, NULL),
        SQLITE_OK);
    assert_int_equal(tk_qh(db, "SELECT count(*) FROM snapshot_series"), 2);
    assert_int_equal(
        sqlite3_exec(db, "INSERT INTO snapshots VALUES (1, 0, 40, 5, 1, 1)", NULL, NULL, NULL),
        SQLITE_OK);
    assert_int_equal(tk_qh(db, "SELECT count(*) FROM snapshot_series WHERE bucket = 32"), 0);
    assert_int_equal(tk_qh(db, "SELECT count(*) FROM snapshot_series WHERE bucket = 64"), 1);
    hs_series_wr_free(w);
    sqlite3_close(db);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_codec),
        cmocka_unit_test(test_read),
        cmocka_unit_test(test_insert_drops),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
