/* hs_series: the delta rows of a run's windows, by trace (see hs_series.h). */
#include "hs_series.h"

#include <assert.h>
#include <stdlib.h>

#include "hs_error.h"
#include "hs_schema.h"
#include "hs_wire.h"

enum { COL_TRACE, COL_ROWS, COL_BUCKET, COL_BYTES, COL__N };

/* zstd level 3, as the snapshot blocks': it saves some 40% of these
 * blocks (a reader of one trace then decompresses the block, about 35K
 * instructions for 1.4 KB, a few percent of a history) */
#define SERIES_LEVEL 3

/* ---- codec -------------------------------------------------------------- */

int hs_series_encode(const hs_series_row *rows, size_t n, int64_t window, hs_buf *out,
                     hs_cols_ctx *ctx)
{
    assert(n >= 1);
    hs_cols cols;
    if (hs_cols_init(&cols, COL__N, n)) return HS_ENOMEM;
    size_t traces = 0;
    for (size_t i = 0, j; i < n; i = j) {
        /* one trace's rows: i .. j-1 */
        for (j = i + 1; j < n && rows[j].trace == rows[i].trace; j++)
            assert(rows[j].bucket > rows[j - 1].bucket);
        assert(!i || rows[i].trace > rows[i - 1].trace);
        assert(rows[i].bucket >= window && rows[j - 1].bucket < window + HS_SERIES_WINDOW);
        if (i) hs_cols_put(&cols, COL_TRACE, (uint64_t)rows[i].trace - (uint64_t)rows[i - 1].trace);
        hs_cols_put(&cols, COL_ROWS, j - i);
        for (size_t k = i; k < j; k++) {
            hs_cols_put(&cols, COL_BUCKET,
                        (uint64_t)(rows[k].bucket - (k == i ? window : rows[k - 1].bucket)));
            hs_cols_put(&cols, COL_BYTES, hs_zigzag(rows[k].bytes));
        }
        traces++;
    }
    assert(traces <= HS_SERIES_BLOCK_TRACES);
    uint8_t hdr[1 + 2 * HS_VARINT_MAX];
    hs_wr wr;
    hs_wr_init(&wr, hdr, sizeof hdr);
    hs_wr_u8(&wr, HS_SERIES_CODEC);
    hs_wr_varint(&wr, traces);
    hs_wr_varint(&wr, hs_zigzag(rows[0].trace));
    assert(!wr.err);
    hs_buf_put(out, hdr, hs_wr_len(&wr));
    int rc = hs_cols_write(&cols, SERIES_LEVEL, out, ctx);
    hs_cols_free(&cols);
    return rc;
}

/* A blob opened for reading: its traces and the first, and its columns. */
typedef struct series_blk {
    size_t traces;
    int64_t trace; /* the current trace */
    hs_cols_rd cols;
} series_blk;

/* Opens a blob: 0, or HS_ECORRUPT / HS_ENOMEM (nothing to free). */
static int blk_open(series_blk *b, const void *blob, size_t len, hs_cols_ctx *ctx)
{
    hs_rd rd;
    hs_rd_init(&rd, blob, len);
    int version = hs_rd_u8(&rd);
    b->traces = (size_t)hs_rd_varint_max(&rd, HS_SERIES_BLOCK_TRACES);
    b->trace = hs_unzigzag(hs_rd_varint(&rd));
    if (rd.err || version != HS_SERIES_CODEC || !b->traces) return HS_ECORRUPT;
    return hs_cols_open(&rd, COL__N, (uint64_t)b->traces * HS_SERIES_WINDOW * HS_VARINT_MAX,
                        &b->cols, ctx);
}

/* Moves to trace i's (i > 0: the next one's) trace and row count: 1 ..
 * HS_SERIES_WINDOW, or 0 when malformed. */
static size_t blk_trace(series_blk *b, size_t i)
{
    hs_rd *c = b->cols.col;
    if (i) {
        /* traces increase and stay within int64, counted unsigned so that
         * the room above a negative trace is right */
        uint64_t step = hs_cols_get(&c[COL_TRACE]), room = (uint64_t)INT64_MAX - (uint64_t)b->trace;
        if (step == 0 || step > room) return 0;
        b->trace = (int64_t)((uint64_t)b->trace + step);
    }
    uint64_t n = hs_cols_get(&c[COL_ROWS]);
    return c[COL_ROWS].err || n < 1 || n > HS_SERIES_WINDOW ? 0 : (size_t)n;
}

/* The current trace's m rows into out (buckets of window): 0 or
 * HS_ECORRUPT. */
static int blk_rows(series_blk *b, size_t m, int64_t window, hs_series_row *out)
{
    hs_rd *c = b->cols.col;
    uint64_t off = 0;
    for (size_t k = 0; k < m; k++) {
        uint64_t step = hs_cols_get(&c[COL_BUCKET]);
        if ((k && step == 0) || step >= HS_SERIES_WINDOW - off) return HS_ECORRUPT;
        off += step;
        out[k] = (hs_series_row){b->trace, window + (int64_t)off,
                                 hs_unzigzag(hs_cols_get(&c[COL_BYTES]))};
    }
    return c[COL_BUCKET].err || c[COL_BYTES].err ? HS_ECORRUPT : 0;
}

int hs_series_decode(const void *blob, size_t len, int64_t window, hs_series_row *rows, size_t *n,
                     hs_cols_ctx *ctx)
{
    series_blk b;
    *n = 0;
    int rc = blk_open(&b, blob, len, ctx);
    if (rc) return rc;
    size_t got = 0;
    for (size_t i = 0; i < b.traces && !rc; i++) {
        size_t m = blk_trace(&b, i);
        rc = m ? blk_rows(&b, m, window, rows + got) : HS_ECORRUPT;
        got += m;
    }
    if (!rc) rc = hs_cols_done(&b.cols);
    hs_cols_rd_free(&b.cols);
    if (!rc) *n = got;
    return rc;
}

/* trace's rows of a blob into out (room for HS_SERIES_WINDOW), reading no
 * further than them: how many (0 when it has none), or HS_ECORRUPT /
 * HS_ENOMEM. */
static int blk_find(const void *blob, size_t len, int64_t window, int64_t trace, hs_series_row *out,
                    hs_cols_ctx *ctx)
{
    series_blk b;
    int rc = blk_open(&b, blob, len, ctx), found = 0;
    if (rc) return rc;
    for (size_t i = 0; i < b.traces && !rc; i++) {
        size_t m = blk_trace(&b, i);
        if (!m || b.trace > trace) {
            rc = m ? 0 : HS_ECORRUPT;
            break;
        }
        rc = blk_rows(&b, m, window, out); /* a trace before: read past */
        if (!rc && b.trace == trace) {
            found = (int)m;
            break;
        }
    }
    hs_cols_rd_free(&b.cols);
    return rc ? rc : found;
}

/* ---- writing ------------------------------------------------------------- */

struct hs_series_wr {
    sqlite3_stmt *del, *ins;
    hs_buf blob;
    hs_cols_ctx ctx;
    size_t *starts; /* the first row of each trace of a put, and one past the last */
    size_t *raw;    /* the bytes of the columns of the traces before each, uncompressed */
    size_t starts_cap, raw_cap;
    double ratio; /* what the last block's columns came to, compressed: 0 none yet */
};

int hs_series_wr_open(sqlite3 *db, hs_series_wr **out)
{
    hs_series_wr *w = calloc(1, sizeof *w);
    if (!w) return HS_ENOMEM;
    if (sqlite3_prepare_v3(db, "DELETE FROM snapshot_series WHERE run = ?1 AND bucket = ?2", -1,
                           SQLITE_PREPARE_PERSISTENT, &w->del, NULL) != SQLITE_OK ||
        sqlite3_prepare_v3(db,
                           "INSERT INTO snapshot_series (run, bucket, first, last, data) "
                           "VALUES (?1, ?2, ?3, ?4, ?5)",
                           -1, SQLITE_PREPARE_PERSISTENT, &w->ins, NULL) != SQLITE_OK) {
        hs_series_wr_free(w);
        return HS_EDB;
    }
    *out = w;
    return 0;
}

void hs_series_wr_free(hs_series_wr *w)
{
    if (!w) return;
    sqlite3_finalize(w->del);
    sqlite3_finalize(w->ins);
    hs_buf_free(&w->blob);
    hs_cols_ctx_free(&w->ctx);
    free(w->starts);
    free(w->raw);
    free(w);
}

int hs_series_put(hs_series_wr *w, int64_t run, int64_t window, const hs_series_row *rows, size_t n)
{
    assert(window == hs_series_window(window));
    sqlite3_bind_int64(w->del, 1, run);
    sqlite3_bind_int64(w->del, 2, window);
    int rc = hs_schema_step_done(w->del);
    if (rc || !n) return rc;
    /* at most a trace a row, and one past the last */
    if (hs_array_room((void **)&w->starts, &w->starts_cap, n + 1, sizeof *w->starts) ||
        hs_array_room((void **)&w->raw, &w->raw_cap, n + 1, sizeof *w->raw))
        return HS_ENOMEM;
    size_t nt = 0, raw = 0;
    for (size_t i = 0; i < n; i++) {
        int first = !i || rows[i].trace != rows[i - 1].trace;
        if (first) {
            w->raw[nt] = raw;
            w->starts[nt++] = i;
            raw +=
                (i ? hs_varint_size((uint64_t)rows[i].trace - (uint64_t)rows[i - 1].trace) : 0) + 1;
        }
        raw += hs_varint_size((uint64_t)(rows[i].bucket - (first ? window : rows[i - 1].bucket))) +
               hs_varint_size(hs_zigzag(rows[i].bytes));
    }
    w->starts[nt] = n;
    w->raw[nt] = raw;
    for (size_t t = 0, m; !rc && t < nt; t += m) {
        /* up to HS_SERIES_BLOCK_TRACES traces, fewer when they take more
         * than HS_SERIES_BLOCK_BYTES: as many as the last block's
         * compression says fit, so that a block is mostly compressed once */
        size_t most = nt - t < HS_SERIES_BLOCK_TRACES ? nt - t : HS_SERIES_BLOCK_TRACES;
        m = hs_cols_fit(w->raw + t, most, w->ratio, HS_SERIES_BLOCK_BYTES);
        for (;;) {
            w->blob.n = 0;
            size_t a = w->starts[t], b = w->starts[t + m];
            if ((rc = hs_series_encode(rows + a, b - a, window, &w->blob, &w->ctx))) break;
            w->ratio = (double)w->blob.n / (double)(w->raw[t + m] - w->raw[t] + 8);
            if (w->blob.n <= HS_SERIES_BLOCK_BYTES || m == 1) break;
            size_t fit = m * HS_SERIES_BLOCK_BYTES * 7 / (w->blob.n * 8);
            m = fit < 1 ? 1 : fit < m ? fit : m - 1;
        }
        if (rc) break;
        sqlite3_stmt *st = w->ins;
        sqlite3_bind_int64(st, 1, run);
        sqlite3_bind_int64(st, 2, window);
        sqlite3_bind_int64(st, 3, rows[w->starts[t]].trace);
        sqlite3_bind_int64(st, 4, rows[w->starts[t + m] - 1].trace);
        sqlite3_bind_blob(st, 5, w->blob.p, (int)w->blob.n, SQLITE_STATIC);
        rc = hs_schema_step_done(st);
    }
    return rc;
}

int hs_series_drop(sqlite3 *db, int64_t run, int64_t bucket)
{
    int has = hs_series_in_db(db);
    if (has <= 0) return has;
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(db, "DELETE FROM snapshot_series WHERE run = ?1 AND bucket = ?2", -1,
                           &st, NULL) != SQLITE_OK)
        return HS_EDB;
    sqlite3_bind_int64(st, 1, run);
    sqlite3_bind_int64(st, 2, hs_series_window(bucket));
    int rc = hs_schema_step_done(st);
    sqlite3_finalize(st);
    return rc;
}

/* ---- reading ------------------------------------------------------------- */

int hs_series_in_db(sqlite3 *db)
{
    return hs_schema_has_table(db, "snapshot_series");
}

struct hs_series_rd {
    sqlite3 *db;
    sqlite3_stmt *last, *floor, *any;
    hs_cols_ctx ctx;
    /* the last window with blocks of run_at, as of data version ver: only
     * a bound on the windows to look for (a stale one costs time, never
     * rows: a window without blocks is found so and handed back) */
    int64_t run_at, stored;
    unsigned ver;
    int known;
};

int hs_series_rd_open(sqlite3 *db, hs_series_rd **out)
{
    hs_series_rd *r = calloc(1, sizeof *r);
    if (!r) return HS_ENOMEM;
    r->db = db;
    if (sqlite3_prepare_v3(db, "SELECT max(bucket) FROM snapshot_series WHERE run = ?1", -1,
                           SQLITE_PREPARE_PERSISTENT, &r->last, NULL) != SQLITE_OK ||
        sqlite3_prepare_v3(db,
                           "SELECT last, data FROM snapshot_series WHERE run = ?1 AND bucket = ?2 "
                           "AND first <= ?3 ORDER BY first DESC LIMIT 1",
                           -1, SQLITE_PREPARE_PERSISTENT, &r->floor, NULL) != SQLITE_OK ||
        sqlite3_prepare_v3(db,
                           "SELECT 1 FROM snapshot_series WHERE run = ?1 AND bucket = ?2 LIMIT 1",
                           -1, SQLITE_PREPARE_PERSISTENT, &r->any, NULL) != SQLITE_OK) {
        hs_series_rd_free(r);
        return HS_EDB;
    }
    *out = r;
    return 0;
}

void hs_series_rd_free(hs_series_rd *r)
{
    if (!r) return;
    sqlite3_finalize(r->last);
    sqlite3_finalize(r->floor);
    sqlite3_finalize(r->any);
    hs_cols_ctx_free(&r->ctx);
    free(r);
}

#define NOT_STORED (-1) /* a window without blocks (HS_E codes are far below) */

/* trace's rows of the window into out: how many, or NOT_STORED, or an
 * HS_E code. */
static int window_rows(hs_series_rd *r, int64_t run, int64_t window, int64_t trace,
                       hs_series_row *out)
{
    sqlite3_stmt *st = r->floor;
    sqlite3_bind_int64(st, 1, run);
    sqlite3_bind_int64(st, 2, window);
    sqlite3_bind_int64(st, 3, trace);
    int step = sqlite3_step(st), rc;
    if (step == SQLITE_ROW) {
        rc = sqlite3_column_int64(st, 0) < trace
                 ? 0
                 : blk_find(sqlite3_column_blob(st, 1), (size_t)sqlite3_column_bytes(st, 1), window,
                            trace, out, &r->ctx);
        sqlite3_reset(st);
        return rc;
    }
    sqlite3_reset(st);
    if (step != SQLITE_DONE) return HS_EDB;
    /* no block starts at or below the trace: has the window any? */
    st = r->any;
    sqlite3_bind_int64(st, 1, run);
    sqlite3_bind_int64(st, 2, window);
    step = sqlite3_step(st);
    sqlite3_reset(st);
    return step == SQLITE_ROW ? 0 : step == SQLITE_DONE ? NOT_STORED : HS_EDB;
}

/* r->stored for run: 0 or HS_EDB. */
static int last_stored(hs_series_rd *r, int64_t run)
{
    unsigned v = 0;
    if (sqlite3_file_control(r->db, "main", SQLITE_FCNTL_DATA_VERSION, &v) == SQLITE_OK &&
        r->known && v == r->ver && run == r->run_at)
        return 0;
    sqlite3_stmt *st = r->last;
    sqlite3_bind_int64(st, 1, run);
    int step = sqlite3_step(st);
    r->stored = step == SQLITE_ROW && sqlite3_column_type(st, 0) != SQLITE_NULL
                    ? sqlite3_column_int64(st, 0)
                    : -1;
    sqlite3_reset(st);
    r->known = step == SQLITE_ROW;
    r->run_at = run;
    r->ver = v;
    return r->known ? 0 : HS_EDB;
}

int hs_series_rd_trace(hs_series_rd *r, int64_t run, int64_t trace, int64_t lo, int64_t hi,
                       int (*row)(int64_t bucket, int64_t bytes, void *data),
                       int (*rest)(int64_t lo, int64_t hi, void *data), void *data)
{
    if (lo < 0) lo = 0;
    if (lo > hi) return 0;
    int rc = last_stored(r, run);
    if (rc) return rc;
    int64_t stored = r->stored;
    int64_t gap = -1; /* the first bucket of the range not stored, -1: none */
    hs_series_row x[HS_SERIES_WINDOW];
    for (int64_t w = hs_series_window(lo), end = hs_series_window(hi);; w += HS_SERIES_WINDOW) {
        int64_t a = w > lo ? w : lo;
        int m = w <= stored ? window_rows(r, run, w, trace, x) : NOT_STORED;
        if (m == NOT_STORED) {
            if (gap < 0) gap = a;
        } else if (m < 0) {
            return m;
        } else {
            if (gap >= 0 && (rc = rest(gap, a - 1, data))) return rc;
            gap = -1;
            for (int k = 0; k < m && !rc; k++)
                if (x[k].bucket >= lo && x[k].bucket <= hi) rc = row(x[k].bucket, x[k].bytes, data);
        }
        if (rc || w == end) break;
    }
    if (!rc && gap >= 0) rc = rest(gap, hi, data);
    return rc;
}
