/* hs_snaps: the snapshot rows stored in blocks (see hs_snaps.h). */
#include "hs_snaps.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hs_cols.h"
#include "hs_error.h"
#include "hs_schema.h"
#include "hs_series.h"
#include "hs_snap.h"
#include "hs_wire.h"

enum { COL_TRACE, COL_BYTES, COL_COUNT, COL__N };

/* zstd level 3, as the tree's: groups are written once and read often */
#define SNAPS_LEVEL 3

/* ---- codec -------------------------------------------------------------- */

int hs_snaps_encode(const hs_snap_row *rows, size_t n, hs_buf *out, hs_cols_ctx *ctx)
{
    assert(n >= 1 && n <= HS_SNAPS_BLOCK_ROWS);
    hs_cols cols;
    if (hs_cols_init(&cols, COL__N, n)) return HS_ENOMEM;
    for (size_t i = 0; i < n; i++) {
        if (i) {
            assert(rows[i].trace > rows[i - 1].trace);
            hs_cols_put(&cols, COL_TRACE, (uint64_t)rows[i].trace - (uint64_t)rows[i - 1].trace);
        }
        hs_cols_put(&cols, COL_BYTES, hs_zigzag(rows[i].bytes));
        hs_cols_put(&cols, COL_COUNT, hs_zigzag(rows[i].count));
    }
    uint8_t hdr[1 + 2 * HS_VARINT_MAX];
    hs_wr wr;
    hs_wr_init(&wr, hdr, sizeof hdr);
    hs_wr_u8(&wr, HS_SNAPS_CODEC);
    hs_wr_varint(&wr, n);
    hs_wr_varint(&wr, hs_zigzag(rows[0].trace));
    assert(!wr.err);
    hs_buf_put(out, hdr, hs_wr_len(&wr));
    int rc = hs_cols_write(&cols, SNAPS_LEVEL, out, ctx);
    hs_cols_free(&cols);
    return rc;
}

/* The header: *first and the row count (0 when malformed). */
static size_t read_head(hs_rd *rd, int64_t *first)
{
    if (hs_rd_u8(rd) != HS_SNAPS_CODEC) return 0;
    uint64_t n = hs_rd_varint_max(rd, HS_SNAPS_BLOCK_ROWS);
    *first = hs_unzigzag(hs_rd_varint(rd));
    return rd->err ? 0 : (size_t)n;
}

size_t hs_snaps_count(const void *blob, size_t len)
{
    hs_rd rd;
    int64_t first;
    hs_rd_init(&rd, blob, len);
    return read_head(&rd, &first);
}

/* Opens a block's columns: its row count (0 on error, *rc set) and first
 * trace. */
static size_t open_block(const void *blob, size_t len, hs_cols_ctx *ctx, hs_cols_rd *cols,
                         int64_t *first, int *rc)
{
    hs_rd rd;
    hs_rd_init(&rd, blob, len);
    size_t count = read_head(&rd, first);
    *rc = count ? hs_cols_open(&rd, COL__N, count * HS_VARINT_MAX, cols, ctx) : HS_ECORRUPT;
    return *rc ? 0 : count;
}

/* The next trace of the TRACE column after t (i > 0), or t itself. */
static int next_trace(hs_rd *c, size_t i, int64_t *t)
{
    if (!i) return 0;
    /* traces increase and stay within int64; in unsigned arithmetic, so
     * that the room above a negative trace is counted right */
    uint64_t step = hs_cols_get(c), room = (uint64_t)INT64_MAX - (uint64_t)*t;
    if (step == 0 || step > room) return HS_ECORRUPT;
    *t = (int64_t)((uint64_t)*t + step);
    return 0;
}

int hs_snaps_decode(const void *blob, size_t len, hs_snap_row *rows, size_t *n, hs_cols_ctx *ctx)
{
    hs_cols_rd cols;
    int64_t t;
    int rc;
    *n = 0;
    size_t count = open_block(blob, len, ctx, &cols, &t, &rc);
    hs_rd *c = cols.col;
    for (size_t i = 0; i < count && !rc; i++) {
        rc = next_trace(&c[COL_TRACE], i, &t);
        rows[i].trace = t;
        rows[i].bytes = hs_unzigzag(hs_cols_get(&c[COL_BYTES]));
        rows[i].count = hs_unzigzag(hs_cols_get(&c[COL_COUNT]));
    }
    if (count && !rc) rc = hs_cols_done(&cols);
    if (count) hs_cols_rd_free(&cols);
    if (!rc) *n = count;
    return rc;
}

/* The row of trace in a blob into *row, reading no further than it: 1, 0
 * when the block has none, or HS_ECORRUPT / HS_ENOMEM. */
static int snaps_find(const void *blob, size_t len, int64_t trace, hs_snap_row *row,
                      hs_cols_ctx *ctx)
{
    hs_cols_rd cols;
    int64_t t;
    int rc;
    size_t count = open_block(blob, len, ctx, &cols, &t, &rc), i;
    if (!count) return rc;
    hs_rd *c = cols.col;
    for (i = 0; i < count && !rc; i++)
        if ((rc = next_trace(&c[COL_TRACE], i, &t)) || t >= trace) break;
    int found = !rc && i < count && t == trace;
    for (size_t j = 0; found && j <= i; j++) {
        row->bytes = hs_unzigzag(hs_cols_get(&c[COL_BYTES]));
        row->count = hs_unzigzag(hs_cols_get(&c[COL_COUNT]));
    }
    row->trace = trace;
    if (!rc && (c[COL_TRACE].err || c[COL_BYTES].err || c[COL_COUNT].err)) rc = HS_ECORRUPT;
    hs_cols_rd_free(&cols);
    return rc ? rc : found;
}

/* The index of trace's row among rows[0..n) (by trace), or n. */
static size_t row_of(const hs_snap_row *rows, size_t n, int64_t trace)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (rows[mid].trace < trace)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < n && rows[lo].trace == trace ? lo : n;
}

/* ---- reading --------------------------------------------------------------- */

/* Blocks decoded are kept (RD_CACHE of them, the least recently used
 * going) while the database is unchanged (SQLite's data version), so that
 * the questions that read the same blocks again (a trace's rows after
 * another's, a warm server asked twice) decode them once. */
#define RD_CACHE 64
#define RD_HASH  128 /* slots of the index of the kept blocks by key */

/* With a trace asked for, the keys of the blocks of one (run, kind) are
 * kept too (at most RD_DIR_MAX), so that a trace's rows are found without
 * reading the keys again. */
#define RD_DIR_MAX 4096

typedef struct rd_key {
    int64_t bucket, first, last;
} rd_key;

typedef struct rd_block {
    int64_t run, bucket, first;
    int kind;
    size_t n; /* 0: an empty slot */
    uint64_t used;
    hs_snap_row rows[HS_SNAPS_BLOCK_ROWS];
} rd_block;

struct hs_snaps_rd {
    sqlite3 *db;
    sqlite3_stmt *scan, *scan_one, *last, *keys, *blob, *series;
    rd_key *dir; /* the keys of (dir_run, dir_kind)'s blocks, by bucket and first */
    size_t ndir, dircap, dir_max;
    int64_t dir_run;
    int dir_kind, dir_ok; /* dir_ok 1: dir holds them; 2: they are too many; 0: not read */
    hs_cols_ctx ctx;
    rd_block *cache;
    uint8_t index[RD_HASH]; /* by key hash: 1 + the block's slot in cache, 0 none */
    unsigned nindex;        /* entries in index, some of slots since reused */
    uint64_t clock;
    unsigned version; /* the database's data version the cache is of */
};

int hs_snaps_rd_open(sqlite3 *db, hs_snaps_rd **out)
{
    hs_snaps_rd *r = calloc(1, sizeof *r);
    if (!r || !(r->cache = calloc(RD_CACHE, sizeof *r->cache))) {
        free(r);
        return HS_ENOMEM;
    }
    r->db = db;
    r->dir_max = RD_DIR_MAX;
    if (sqlite3_prepare_v3(db,
                           "SELECT bucket, first, data FROM snapshot_blocks WHERE run = ?1 AND "
                           "kind = ?2 AND bucket >= ?3 AND bucket <= ?4 ORDER BY bucket, first",
                           -1, SQLITE_PREPARE_PERSISTENT, &r->scan, NULL) != SQLITE_OK ||
        sqlite3_prepare_v3(db,
                           "SELECT bucket, first, data FROM snapshot_blocks WHERE run = ?1 AND "
                           "kind = ?2 AND bucket >= ?3 AND bucket <= ?4 AND first <= ?5 AND "
                           "last >= ?5 ORDER BY bucket, first",
                           -1, SQLITE_PREPARE_PERSISTENT, &r->scan_one, NULL) != SQLITE_OK ||
        sqlite3_prepare_v3(db,
                           "SELECT max(bucket) FROM snapshot_blocks WHERE run = ?1 AND kind = ?2 "
                           "AND bucket <= ?3",
                           -1, SQLITE_PREPARE_PERSISTENT, &r->last, NULL) != SQLITE_OK ||
        sqlite3_prepare_v3(db,
                           "SELECT bucket, first, last FROM snapshot_blocks WHERE run = ?1 AND "
                           "kind = ?2 ORDER BY bucket, first",
                           -1, SQLITE_PREPARE_PERSISTENT, &r->keys, NULL) != SQLITE_OK ||
        sqlite3_prepare_v3(db,
                           "SELECT data FROM snapshot_blocks WHERE run = ?1 AND kind = ?2 AND "
                           "bucket = ?3 AND first = ?4",
                           -1, SQLITE_PREPARE_PERSISTENT, &r->blob, NULL) != SQLITE_OK ||
        /* a delta group exists only for a bucket heap_series has (the
         * writer writes both, store_rollup.c): one seek a bucket */
        sqlite3_prepare_v3(db,
                           "SELECT h.bucket, (SELECT data FROM snapshot_blocks WHERE run = ?1 AND "
                           "kind = ?2 AND bucket = h.bucket AND first <= ?5 ORDER BY first DESC "
                           "LIMIT 1) FROM heap_series h WHERE h.run = ?1 AND h.bucket >= ?3 AND "
                           "h.bucket <= ?4 ORDER BY h.bucket",
                           -1, SQLITE_PREPARE_PERSISTENT, &r->series, NULL) != SQLITE_OK) {
        hs_snaps_rd_free(r);
        return HS_EDB;
    }
    *out = r;
    return 0;
}

void hs_snaps_rd_free(hs_snaps_rd *r)
{
    if (!r) return;
    sqlite3_finalize(r->scan);
    sqlite3_finalize(r->scan_one);
    sqlite3_finalize(r->last);
    sqlite3_finalize(r->keys);
    sqlite3_finalize(r->blob);
    sqlite3_finalize(r->series);
    free(r->dir);
    hs_cols_ctx_free(&r->ctx);
    free(r->cache);
    free(r);
}

int hs_snaps_rd_last(hs_snaps_rd *r, int64_t run, int kind, int64_t hi, int64_t *bucket)
{
    sqlite3_stmt *st = r->last;
    sqlite3_bind_int64(st, 1, run);
    sqlite3_bind_int(st, 2, kind);
    sqlite3_bind_int64(st, 3, hi);
    int step = sqlite3_step(st), rc = HS_EDB;
    if (step == SQLITE_ROW) {
        rc = sqlite3_column_type(st, 0) != SQLITE_NULL;
        if (rc) *bucket = sqlite3_column_int64(st, 0);
    }
    sqlite3_reset(st);
    return rc;
}

/* Forgets every block kept when the database changed since they were
 * read (called inside the read transaction that reads them). */
static void rd_check(hs_snaps_rd *r)
{
    unsigned v = 0;
    if (sqlite3_file_control(r->db, "main", SQLITE_FCNTL_DATA_VERSION, &v) == SQLITE_OK &&
        v == r->version)
        return;
    for (int i = 0; i < RD_CACHE; i++) r->cache[i].n = 0;
    memset(r->index, 0, sizeof r->index);
    r->nindex = 0;
    r->dir_ok = 0;
    r->version = v;
}

static unsigned rd_hash(int64_t run, int kind, int64_t bucket, int64_t first)
{
    uint64_t h = (uint64_t)run * 0x9e3779b97f4a7c15u ^ (uint64_t)bucket * 0xc2b2ae3d27d4eb4fu ^
                 (uint64_t)first * 0x165667b19e3779f9u ^ (uint64_t)kind;
    h *= 0xff51afd7ed558ccdu;
    return (unsigned)(h >> 57); /* 0 .. RD_HASH - 1 */
}

/* The index made again from the kept blocks (once it fills up with the
 * entries of slots since reused). */
static void rd_reindex(hs_snaps_rd *r)
{
    memset(r->index, 0, sizeof r->index);
    r->nindex = 0;
    for (int s = 0; s < RD_CACHE; s++) {
        const rd_block *x = &r->cache[s];
        if (!x->n) continue;
        unsigned i = rd_hash(x->run, x->kind, x->bucket, x->first);
        while (r->index[i]) i = (i + 1) % RD_HASH;
        r->index[i] = (uint8_t)(s + 1);
        r->nindex++;
    }
}

/* The kept block (run, kind, bucket, first), or NULL. */
static rd_block *rd_find(hs_snaps_rd *r, int64_t run, int kind, int64_t bucket, int64_t first)
{
    for (unsigned i = rd_hash(run, kind, bucket, first); r->index[i]; i = (i + 1) % RD_HASH) {
        rd_block *x = &r->cache[r->index[i] - 1];
        if (x->run == run && x->kind == kind && x->bucket == bucket && x->first == first) {
            x->used = ++r->clock;
            return x;
        }
    }
    return NULL;
}

/* Decodes blob as the block (run, kind, bucket, first) into the slot of
 * the least recently used one. */
static int rd_load(hs_snaps_rd *r, int64_t run, int kind, int64_t bucket, int64_t first,
                   const void *blob, size_t len, const rd_block **out)
{
    rd_block *victim = &r->cache[0];
    for (int i = 0; i < RD_CACHE; i++) {
        rd_block *x = &r->cache[i];
        if (!x->n || (victim->n && x->used < victim->used)) victim = x;
    }
    /* the slot's old key matches nothing until it is decoded: its entry in
     * the index, left there, is passed over */
    victim->n = 0;
    victim->run = INT64_MIN;
    int rc = hs_snaps_decode(blob, len, victim->rows, &victim->n, &r->ctx);
    if (rc) return rc;
    if (victim->rows[0].trace != first) {
        victim->n = 0; /* a block whose key is not its first row's trace */
        return HS_ECORRUPT;
    }
    victim->run = run, victim->kind = kind, victim->bucket = bucket, victim->first = first;
    victim->used = ++r->clock;
    if (++r->nindex > RD_HASH * 3 / 4) {
        rd_reindex(r);
    } else {
        unsigned i = rd_hash(run, kind, bucket, first);
        while (r->index[i]) i = (i + 1) % RD_HASH;
        r->index[i] = (uint8_t)(victim - r->cache + 1);
    }
    *out = victim;
    return 0;
}

/* The row of trace in block x to cb, if it has one. */
static int rd_one(const rd_block *x, int64_t trace,
                  int (*cb)(int64_t bucket, const hs_snap_row *row, void *data), void *data)
{
    size_t i = row_of(x->rows, x->n, trace);
    return i < x->n ? cb(x->bucket, &x->rows[i], data) : 0;
}

/* The keys of (run, kind)'s blocks into the directory (none when there
 * are more than dir_max): 0 or an HS_E code. */
static int rd_dir_read(hs_snaps_rd *r, int64_t run, int kind)
{
    sqlite3_stmt *st = r->keys;
    sqlite3_bind_int64(st, 1, run);
    sqlite3_bind_int(st, 2, kind);
    int rc = 0, step;
    r->ndir = 0;
    r->dir_ok = 0;
    while (!rc && (step = sqlite3_step(st)) == SQLITE_ROW) {
        if (r->ndir == r->dir_max) break;
        if (hs_array_room((void **)&r->dir, &r->dircap, r->ndir + 1, sizeof *r->dir))
            rc = HS_ENOMEM;
        else
            r->dir[r->ndir++] = (rd_key){sqlite3_column_int64(st, 0), sqlite3_column_int64(st, 1),
                                         sqlite3_column_int64(st, 2)};
    }
    if (!rc && (step == SQLITE_DONE || step == SQLITE_ROW)) {
        r->dir_ok = step == SQLITE_DONE ? 1 : 2; /* 2: too many blocks, none kept */
        r->dir_run = run;
        r->dir_kind = kind;
    } else if (!rc) {
        rc = HS_EDB;
    }
    sqlite3_reset(st);
    return rc;
}

/* One trace's rows by the directory: blocks kept are not read again, nor
 * are the keys of those that cannot hold it. 1 when the directory cannot
 * serve (too many blocks), else 0 or an HS_E code or cb's return. */
static int rd_scan_keys(hs_snaps_rd *r, int64_t run, int kind, int64_t lo, int64_t hi,
                        int64_t trace,
                        int (*cb)(int64_t bucket, const hs_snap_row *row, void *data), void *data)
{
    sqlite3_stmt *st;
    int step, rc = 0;
    if ((!r->dir_ok || r->dir_run != run || r->dir_kind != kind) &&
        (rc = rd_dir_read(r, run, kind)))
        return rc;
    if (r->dir_ok != 1) return 1;
    size_t a = 0, b = r->ndir;
    while (a < b) {
        size_t mid = a + (b - a) / 2;
        if (r->dir[mid].bucket < lo)
            a = mid + 1;
        else
            b = mid;
    }
    /* blocks that fit in what is kept are kept (another trace, or the next
     * question, may read them); else each is read as far as the trace */
    size_t cand = 0;
    for (size_t i = a; i < r->ndir && r->dir[i].bucket <= hi && cand <= RD_CACHE; i++)
        cand += trace >= r->dir[i].first && trace <= r->dir[i].last;
    for (; !rc && a < r->ndir && r->dir[a].bucket <= hi; a++) {
        const rd_key *k = &r->dir[a];
        if (trace < k->first || trace > k->last) continue;
        const rd_block *x = rd_find(r, run, kind, k->bucket, k->first);
        if (!x) {
            st = r->blob;
            sqlite3_bind_int64(st, 1, run);
            sqlite3_bind_int(st, 2, kind);
            sqlite3_bind_int64(st, 3, k->bucket);
            sqlite3_bind_int64(st, 4, k->first);
            step = sqlite3_step(st);
            if (step != SQLITE_ROW) {
                rc = HS_EDB;
            } else if (cand <= RD_CACHE) {
                rc = rd_load(r, run, kind, k->bucket, k->first, sqlite3_column_blob(st, 0),
                             (size_t)sqlite3_column_bytes(st, 0), &x);
            } else {
                hs_snap_row row;
                int found = snaps_find(sqlite3_column_blob(st, 0),
                                       (size_t)sqlite3_column_bytes(st, 0), trace, &row, &r->ctx);
                rc = found < 0 ? found : found ? cb(k->bucket, &row, data) : 0;
            }
            sqlite3_reset(st);
            if (rc || !x) continue;
        }
        rc = rd_one(x, trace, cb, data);
    }
    return rc;
}

static int rd_scan_dir(hs_snaps_rd *r, int64_t run, int kind, int64_t lo, int64_t hi, int64_t trace,
                       int (*cb)(int64_t bucket, const hs_snap_row *row, void *data), void *data)
{
    /* A read of the file, for its data version as of now, left open until
     * the end: the reads below are of the same transaction, and each does
     * not begin and end one of its own. */
    sqlite3_stmt *st = r->last;
    sqlite3_bind_int64(st, 1, run);
    sqlite3_bind_int(st, 2, kind);
    sqlite3_bind_int64(st, 3, hi);
    int rc = sqlite3_step(st) == SQLITE_ROW ? 0 : HS_EDB;
    if (!rc) {
        rd_check(r);
        rc = rd_scan_keys(r, run, kind, lo, hi, trace, cb, data);
    }
    sqlite3_reset(st);
    return rc;
}

/* One trace's deltas of a run of more blocks than the directory keeps:
 * by the buckets heap_series has, the one block of each that may hold it. */
static int rd_scan_series(hs_snaps_rd *r, int64_t run, int64_t lo, int64_t hi, int64_t trace,
                          int (*cb)(int64_t bucket, const hs_snap_row *row, void *data), void *data)
{
    sqlite3_stmt *st = r->series;
    sqlite3_bind_int64(st, 1, run);
    sqlite3_bind_int(st, 2, HS_SNAP_DELTA);
    sqlite3_bind_int64(st, 3, lo);
    sqlite3_bind_int64(st, 4, hi);
    sqlite3_bind_int64(st, 5, trace);
    int rc = 0, step, checked = 0;
    while (!rc && (step = sqlite3_step(st)) == SQLITE_ROW) {
        if (!checked++) rd_check(r);
        const void *blob = sqlite3_column_blob(st, 1);
        size_t len = (size_t)sqlite3_column_bytes(st, 1);
        if (!blob) continue; /* no deltas in that bucket */
        hs_rd rd;
        int64_t b = sqlite3_column_int64(st, 0), first;
        hs_rd_init(&rd, blob, len);
        if (!read_head(&rd, &first)) {
            rc = HS_ECORRUPT;
            break;
        }
        /* a block kept is read from memory; others as far as the trace (a
         * run this large has more than could be kept) */
        const rd_block *x = rd_find(r, run, HS_SNAP_DELTA, b, first);
        if (x) {
            rc = rd_one(x, trace, cb, data);
            continue;
        }
        hs_snap_row row;
        int found = snaps_find(blob, len, trace, &row, &r->ctx);
        rc = found < 0 ? found : found ? cb(b, &row, data) : 0;
    }
    if (!rc && step != SQLITE_DONE) rc = HS_EDB;
    sqlite3_reset(st);
    return rc;
}

void hs_snaps_rd_dir_max(hs_snaps_rd *r, size_t n)
{
    r->dir_max = n;
    r->dir_ok = 0;
}

int hs_snaps_rd_scan(hs_snaps_rd *r, int64_t run, int kind, int64_t lo, int64_t hi, int64_t trace,
                     int (*cb)(int64_t bucket, const hs_snap_row *row, void *data), void *data)
{
    if (trace >= 0) {
        int rc = rd_scan_dir(r, run, kind, lo, hi, trace, cb, data);
        if (rc != 1) return rc;
        if (kind == HS_SNAP_DELTA) return rd_scan_series(r, run, lo, hi, trace, cb, data);
    }
    sqlite3_stmt *st = trace >= 0 ? r->scan_one : r->scan;
    sqlite3_bind_int64(st, 1, run);
    sqlite3_bind_int(st, 2, kind);
    sqlite3_bind_int64(st, 3, lo);
    sqlite3_bind_int64(st, 4, hi);
    if (trace >= 0) sqlite3_bind_int64(st, 5, trace);
    int rc = 0, step, checked = 0;
    while (!rc && (step = sqlite3_step(st)) == SQLITE_ROW) {
        if (!checked++) rd_check(r);
        int64_t b = sqlite3_column_int64(st, 0), first = sqlite3_column_int64(st, 1);
        const rd_block *x = rd_find(r, run, kind, b, first);
        if (!x && (rc = rd_load(r, run, kind, b, first, sqlite3_column_blob(st, 2),
                                (size_t)sqlite3_column_bytes(st, 2), &x)))
            break;
        if (trace >= 0) {
            rc = rd_one(x, trace, cb, data);
            continue;
        }
        for (size_t i = 0; i < x->n && !rc; i++) rc = cb(b, &x->rows[i], data);
    }
    if (!rc && step != SQLITE_DONE) rc = HS_EDB;
    sqlite3_reset(st);
    return rc;
}

/* ---- writing ------------------------------------------------------------- */

struct hs_snaps_wr {
    sqlite3 *db;
    sqlite3_stmt *del, *ins;
    hs_buf blob;
    hs_cols_ctx ctx;
    size_t *raw; /* the columns' bytes of the rows of a put before each */
    size_t raw_cap;
    double ratio; /* what the last block came to against its columns */
};

int hs_snaps_wr_open(sqlite3 *db, hs_snaps_wr **out)
{
    hs_snaps_wr *w = calloc(1, sizeof *w);
    if (!w) return HS_ENOMEM;
    w->db = db;
    if (sqlite3_prepare_v3(db,
                           "DELETE FROM snapshot_blocks WHERE run = ?1 AND kind = ?2 AND "
                           "bucket = ?3",
                           -1, SQLITE_PREPARE_PERSISTENT, &w->del, NULL) != SQLITE_OK ||
        sqlite3_prepare_v3(db,
                           "INSERT INTO snapshot_blocks (run, kind, bucket, first, last, data) "
                           "VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                           -1, SQLITE_PREPARE_PERSISTENT, &w->ins, NULL) != SQLITE_OK) {
        hs_snaps_wr_free(w);
        return HS_EDB;
    }
    *out = w;
    return 0;
}

void hs_snaps_wr_free(hs_snaps_wr *w)
{
    if (!w) return;
    sqlite3_finalize(w->del);
    sqlite3_finalize(w->ins);
    hs_buf_free(&w->blob);
    hs_cols_ctx_free(&w->ctx);
    free(w->raw);
    free(w);
}

static int by_trace(const void *a, const void *b)
{
    const hs_snap_row *x = a, *y = b;
    return (x->trace > y->trace) - (x->trace < y->trace);
}

int hs_snaps_put(hs_snaps_wr *w, int64_t run, int kind, int64_t bucket, hs_snap_row *rows, size_t n)
{
    sqlite3_bind_int64(w->del, 1, run);
    sqlite3_bind_int(w->del, 2, kind);
    sqlite3_bind_int64(w->del, 3, bucket);
    int rc = hs_schema_step_done(w->del);
    if (rc || !n) return rc;
    if (n > 1) qsort(rows, n, sizeof *rows, by_trace);
    if (hs_array_room((void **)&w->raw, &w->raw_cap, n + 1, sizeof *w->raw)) return HS_ENOMEM;
    w->raw[0] = 0;
    for (size_t i = 0; i < n; i++)
        w->raw[i + 1] =
            w->raw[i] + hs_varint_size(hs_zigzag(rows[i].bytes)) +
            hs_varint_size(hs_zigzag(rows[i].count)) +
            (i ? hs_varint_size((uint64_t)rows[i].trace - (uint64_t)rows[i - 1].trace) : 0);
    for (size_t i = 0, m; !rc && i < n; i += m) {
        /* up to HS_SNAPS_BLOCK_ROWS rows, fewer when they take more than
         * HS_SNAPS_BLOCK_BYTES: a block stays within its b-tree page */
        size_t most = n - i < HS_SNAPS_BLOCK_ROWS ? n - i : HS_SNAPS_BLOCK_ROWS;
        m = hs_cols_fit(w->raw + i, most, w->ratio, HS_SNAPS_BLOCK_BYTES);
        for (;;) {
            w->blob.n = 0;
            if ((rc = hs_snaps_encode(rows + i, m, &w->blob, &w->ctx))) break;
            w->ratio = (double)w->blob.n / (double)(w->raw[i + m] - w->raw[i] + 8);
            if (w->blob.n <= HS_SNAPS_BLOCK_BYTES || m == 1) break;
            size_t fit = m * HS_SNAPS_BLOCK_BYTES * 7 / (w->blob.n * 8);
            m = fit < 1 ? 1 : fit < m ? fit : m - 1;
        }
        if (rc) break;
        sqlite3_stmt *st = w->ins;
        sqlite3_bind_int64(st, 1, run);
        sqlite3_bind_int(st, 2, kind);
        sqlite3_bind_int64(st, 3, bucket);
        sqlite3_bind_int64(st, 4, rows[i].trace);
        sqlite3_bind_int64(st, 5, rows[i + m - 1].trace);
        sqlite3_bind_blob(st, 6, w->blob.p, (int)w->blob.n, SQLITE_STATIC);
        rc = hs_schema_step_done(st);
    }
    return rc;
}

int hs_snaps_in_blocks(sqlite3 *db)
{
    int old = hs_schema_has_table(db, "snapshots");
    return old < 0 ? old : !old;
}

/* ---- migration 15 ------------------------------------------------------------- */

int hs_snaps_migrate(sqlite3 *db)
{
    /* a file taken back to an older version by hand may have blocks already */
    int blocks = hs_snaps_in_blocks(db);
    if (blocks) return blocks < 0 ? blocks : 0;
    hs_snaps_wr *w = NULL;
    sqlite3_stmt *st = NULL;
    hs_snap_row *rows = NULL;
    size_t n = 0, cap = 0;
    int64_t run = 0, bucket = 0;
    int kind = 0;
    int rc = hs_snaps_wr_open(db, &w);
    if (!rc && sqlite3_prepare_v2(db,
                                  "SELECT run, kind, bucket, trace, bytes, count FROM "
                                  "main.snapshots ORDER BY run, kind, bucket, trace",
                                  -1, &st, NULL) != SQLITE_OK)
        rc = HS_EDB;
    int step = SQLITE_DONE;
    while (!rc && (step = sqlite3_step(st)) == SQLITE_ROW) {
        int64_t r = sqlite3_column_int64(st, 0), b = sqlite3_column_int64(st, 2);
        int k = sqlite3_column_int(st, 1);
        if (n && (r != run || k != kind || b != bucket)) {
            rc = hs_snaps_put(w, run, kind, bucket, rows, n);
            n = 0;
        }
        run = r, kind = k, bucket = b;
        if (!rc && hs_array_room((void **)&rows, &cap, n + 1, sizeof *rows)) rc = HS_ENOMEM;
        if (!rc)
            rows[n++] = (hs_snap_row){sqlite3_column_int64(st, 3), sqlite3_column_int64(st, 4),
                                      sqlite3_column_int64(st, 5)};
    }
    if (!rc && step != SQLITE_DONE) rc = HS_EDB;
    if (!rc && n) rc = hs_snaps_put(w, run, kind, bucket, rows, n);
    sqlite3_finalize(st);
    hs_snaps_wr_free(w);
    free(rows);
    if (!rc && sqlite3_exec(db, "DROP TABLE main.snapshots", NULL, NULL, NULL) != SQLITE_OK)
        rc = HS_EDB;
    return rc;
}

/* ---- SQL: the snapshots virtual table ------------------------------------------- */

/* What a plan constrains (idxNum's low bits), and its order (PLAN_DESC). */
enum {
    PLAN_RUN = 1,
    PLAN_KIND = 2,
    PLAN_BUCKET = 4, /* bucket = */
    PLAN_LO = 8,     /* bucket >= (SQLite checks > itself) */
    PLAN_HI = 16,    /* bucket <= (and <) */
    PLAN_TRACE = 32, /* trace = */
    PLAN_DESC = 64,  /* the rows from the last */
    PLAN_ROWS = 128, /* trace, bytes or count are read: blocks are decoded */
    PLAN__N = 256
};

typedef struct snaps_cur snaps_cur;

typedef struct snaps_vtab {
    sqlite3_vtab base;
    sqlite3 *db;
    /* the blocks' statement of each plan (less PLAN_ROWS), and the cursor
     * using it; a second cursor of the same plan prepares its own */
    sqlite3_stmt *st[PLAN_ROWS];
    snaps_cur *holder[PLAN_ROWS];
    hs_snaps_wr *wr; /* for INSERT, made when first needed */
} snaps_vtab;

struct snaps_cur {
    sqlite3_vtab_cursor base;
    sqlite3_stmt *st; /* the blocks */
    int own;          /* st is the cursor's own, not the table's */
    int plan;
    int64_t run, kind, bucket, trace;
    /* the block rows holds when decoded whole (blk_ok): a lookup of a
     * trace in it (the same run, kind and bucket, first <= trace <= last)
     * reads nothing */
    int64_t blk_first, blk_last;
    int blk_ok, single; /* single: the row a lookup found in it is the only one */
    hs_snap_row rows[HS_SNAPS_BLOCK_ROWS];
    hs_cols_ctx ctx;
    size_t n;  /* rows of the block */
    int64_t i; /* the current one: 0 .. n-1, counting down for PLAN_DESC */
    int eof;
    int64_t rowid;
};

static int sv_connect(sqlite3 *db, void *aux, int argc, const char *const *argv, sqlite3_vtab **out,
                      char **err)
{
    (void)aux, (void)argc, (void)argv, (void)err;
    int rc = sqlite3_declare_vtab(db, "CREATE TABLE x(run INTEGER, kind INTEGER, bucket INTEGER, "
                                      "trace INTEGER, bytes INTEGER, count INTEGER)");
    if (rc != SQLITE_OK) return rc;
    snaps_vtab *v = sqlite3_malloc(sizeof *v);
    if (!v) return SQLITE_NOMEM;
    memset(v, 0, sizeof *v);
    v->db = db;
    sqlite3_vtab_config(db, SQLITE_VTAB_INNOCUOUS);
    *out = &v->base;
    return SQLITE_OK;
}

static int sv_disconnect(sqlite3_vtab *vt)
{
    snaps_vtab *v = (snaps_vtab *)vt;
    for (size_t i = 0; i < sizeof v->st / sizeof v->st[0]; i++) sqlite3_finalize(v->st[i]);
    hs_snaps_wr_free(v->wr);
    sqlite3_free(v);
    return SQLITE_OK;
}

/* Equalities on run, kind, bucket and trace, a range of buckets; an ORDER
 * BY of those columns in that order, one direction, is the blocks' own. */
static int sv_best_index(sqlite3_vtab *vt, sqlite3_index_info *ix)
{
    (void)vt;
    int plan = 0, argv = 0, use[6] = {-1, -1, -1, -1, -1, -1};
    enum { U_RUN, U_KIND, U_BUCKET, U_LO, U_HI, U_TRACE };
    for (int i = 0; i < ix->nConstraint; i++) {
        const struct sqlite3_index_constraint *c = &ix->aConstraint[i];
        if (!c->usable) continue;
        int op = c->op, eq = op == SQLITE_INDEX_CONSTRAINT_EQ;
        if (c->iColumn == 0 && eq) use[U_RUN] = i;
        if (c->iColumn == 1 && eq) use[U_KIND] = i;
        if (c->iColumn == 3 && eq) use[U_TRACE] = i;
        if (c->iColumn != 2) continue;
        if (eq) use[U_BUCKET] = i;
        if (op == SQLITE_INDEX_CONSTRAINT_GT || op == SQLITE_INDEX_CONSTRAINT_GE) use[U_LO] = i;
        if (op == SQLITE_INDEX_CONSTRAINT_LT || op == SQLITE_INDEX_CONSTRAINT_LE) use[U_HI] = i;
    }
    if (use[U_BUCKET] >= 0) use[U_LO] = use[U_HI] = -1;
    static const int bit[] = {PLAN_RUN, PLAN_KIND, PLAN_BUCKET, PLAN_LO, PLAN_HI, PLAN_TRACE};
    double cost = 1e7;
    for (int u = 0; u < 6; u++) {
        if (use[u] < 0) continue;
        plan |= bit[u];
        ix->aConstraintUsage[use[u]].argvIndex = ++argv;
        /* equalities are exact; a bound is checked again (> against >=) */
        ix->aConstraintUsage[use[u]].omit = u != U_LO && u != U_HI;
    }
    if (plan & PLAN_RUN) cost /= 1e3;
    if (plan & PLAN_KIND) cost /= 3;
    if (plan & PLAN_BUCKET) cost /= 100;
    if (plan & (PLAN_LO | PLAN_HI)) cost /= 4;
    if (plan & PLAN_TRACE) cost /= 100;
    ix->estimatedCost = cost;
    ix->estimatedRows = (sqlite3_int64)(cost > 1 ? cost : 1);
    /* the order: columns 0..3 in order, those fixed by an equality left out */
    int next = 0, desc = -1, ok = ix->nOrderBy > 0;
    for (int i = 0; i < ix->nOrderBy && ok; i++) {
        int col = ix->aOrderBy[i].iColumn;
        while (next < 4 && next != col &&
               ((next == 0 && (plan & PLAN_RUN)) || (next == 1 && (plan & PLAN_KIND)) ||
                (next == 2 && (plan & PLAN_BUCKET)) || (next == 3 && (plan & PLAN_TRACE))))
            next++;
        if (col != next || (desc >= 0 && desc != ix->aOrderBy[i].desc)) ok = 0;
        desc = ix->aOrderBy[i].desc;
        next++;
    }
    if (ok) {
        ix->orderByConsumed = 1;
        if (desc == 1) plan |= PLAN_DESC;
    }
    /* columns 3.. read, or trace asked for: rows decoded */
    if ((ix->colUsed & ~(sqlite3_uint64)7) || (plan & PLAN_TRACE)) plan |= PLAN_ROWS;
    ix->idxNum = plan;
    /* what EXPLAIN QUERY PLAN shows: the key the blocks are sought by */
    static const char *const what[] = {"run=?",     "kind=?",    "bucket=?",
                                       "bucket>=?", "bucket<=?", "trace=?"};
    char shown[96] = "";
    for (int u = 0; u < 6; u++)
        if (plan & bit[u])
            snprintf(shown + strlen(shown), sizeof shown - strlen(shown), "%s%s",
                     shown[0] ? " AND " : "", what[u]);
    if (shown[0]) {
        ix->idxStr = sqlite3_mprintf("%s", shown);
        ix->needToFreeIdxStr = 1;
    }
    return SQLITE_OK;
}

static int sv_open(sqlite3_vtab *vt, sqlite3_vtab_cursor **out)
{
    (void)vt;
    snaps_cur *c = sqlite3_malloc(sizeof *c);
    if (!c) return SQLITE_NOMEM;
    memset(c, 0, sizeof *c);
    *out = &c->base;
    return SQLITE_OK;
}

/* Lets go of the cursor's statement. */
static void release(snaps_cur *c)
{
    snaps_vtab *v = (snaps_vtab *)c->base.pVtab;
    if (!c->st) return;
    if (c->own) {
        sqlite3_finalize(c->st);
    } else {
        sqlite3_reset(c->st);
        v->holder[c->plan & (PLAN_ROWS - 1)] = NULL;
    }
    c->st = NULL;
    c->own = 0;
}

static int sv_close(sqlite3_vtab_cursor *cur)
{
    release((snaps_cur *)cur);
    hs_cols_ctx_free(&((snaps_cur *)cur)->ctx);
    sqlite3_free(cur);
    return SQLITE_OK;
}

/* The blocks of plan for cursor c: the table's statement, or c's own when
 * another cursor holds that. */
static int plan_stmt(snaps_vtab *v, snaps_cur *c, int plan)
{
    int key = plan & (PLAN_ROWS - 1);
    int mine = v->holder[key] == NULL;
    if (mine && v->st[key]) {
        c->st = v->st[key];
        v->holder[key] = c;
        return SQLITE_OK;
    }
    char sql[512];
    const char *d = plan & PLAN_DESC ? " DESC" : "";
    snprintf(sql, sizeof sql,
             "SELECT run, kind, bucket, data, first, last FROM snapshot_blocks WHERE 1%s%s%s%s%s%s "
             "ORDER BY run%s, kind%s, bucket%s, first%s",
             plan & PLAN_RUN ? " AND run = ?1" : "", plan & PLAN_KIND ? " AND kind = ?2" : "",
             plan & PLAN_BUCKET ? " AND bucket = ?3" : "",
             plan & PLAN_LO ? " AND bucket >= ?4" : "", plan & PLAN_HI ? " AND bucket <= ?5" : "",
             plan & PLAN_TRACE ? " AND first <= ?6 AND last >= ?6" : "", d, d, d, d);
    sqlite3_stmt *st;
    if (sqlite3_prepare_v3(v->db, sql, -1, mine ? SQLITE_PREPARE_PERSISTENT : 0, &st, NULL) !=
        SQLITE_OK) {
        sqlite3_free(v->base.zErrMsg);
        v->base.zErrMsg = sqlite3_mprintf("snapshots: %s", sqlite3_errmsg(v->db));
        return SQLITE_ERROR;
    }
    c->st = st;
    c->own = !mine;
    if (mine) {
        v->st[key] = st;
        v->holder[key] = c;
    }
    return SQLITE_OK;
}

static int row_ok(const snaps_cur *c)
{
    return c->i >= 0 && c->i < (int64_t)c->n;
}

static void row_move(snaps_cur *c)
{
    c->i += c->plan & PLAN_DESC ? -1 : 1;
}

/* Moves to the next row (from the current one; with first, from before
 * the first), reading blocks as needed. */
static int sv_advance(snaps_cur *c, int first)
{
    if (c->single) {
        c->eof = 1;
        return SQLITE_OK;
    }
    if (!first) row_move(c);
    for (;;) {
        if (row_ok(c)) {
            if (!(c->plan & PLAN_TRACE) || c->rows[c->i].trace == c->trace) break;
            row_move(c);
            continue;
        }
        int step = sqlite3_step(c->st);
        if (step == SQLITE_DONE) {
            c->eof = 1;
            return SQLITE_OK;
        }
        if (step != SQLITE_ROW) return SQLITE_ERROR;
        c->run = sqlite3_column_int64(c->st, 0);
        c->kind = sqlite3_column_int64(c->st, 1);
        c->bucket = sqlite3_column_int64(c->st, 2);
        const void *blob = sqlite3_column_blob(c->st, 3);
        size_t len = (size_t)sqlite3_column_bytes(c->st, 3);
        c->blk_ok = 0;
        if (c->plan & PLAN_ROWS) {
            int rc = hs_snaps_decode(blob, len, c->rows, &c->n, &c->ctx);
            if (rc) return rc == HS_ENOMEM ? SQLITE_NOMEM : SQLITE_CORRUPT;
            c->blk_first = sqlite3_column_int64(c->st, 4);
            c->blk_last = sqlite3_column_int64(c->st, 5);
            c->blk_ok = 1;
        } else if (!(c->n = hs_snaps_count(blob, len))) {
            return SQLITE_CORRUPT;
        }
        c->i = c->plan & PLAN_DESC ? (int64_t)c->n - 1 : 0;
    }
    c->rowid++;
    return SQLITE_OK;
}

enum { PLAN_KEY = PLAN_RUN | PLAN_KIND | PLAN_BUCKET | PLAN_TRACE };

/* A lookup of one row by its whole key in the block the cursor holds: 1
 * (found or surely absent: c set up), 0 when that block cannot tell. */
static int sv_cached(snaps_cur *c, int plan, sqlite3_value **argv)
{
    if ((plan & PLAN_KEY) != PLAN_KEY || !c->blk_ok) return 0;
    int64_t t = sqlite3_value_int64(argv[3]);
    if (sqlite3_value_int64(argv[0]) != c->run || sqlite3_value_int64(argv[1]) != c->kind ||
        sqlite3_value_int64(argv[2]) != c->bucket || t < c->blk_first || t > c->blk_last)
        return 0;
    size_t i = row_of(c->rows, c->n, t);
    c->single = 1;
    c->eof = i == c->n;
    c->i = (int64_t)i;
    c->rowid++;
    return 1;
}

static int sv_filter(sqlite3_vtab_cursor *cur, int plan, const char *s, int argc,
                     sqlite3_value **argv)
{
    (void)s, (void)argc;
    snaps_cur *c = (snaps_cur *)cur;
    snaps_vtab *v = (snaps_vtab *)cur->pVtab;
    if (sv_cached(c, plan, argv)) return SQLITE_OK;
    c->single = 0;
    if (c->st && c->plan != plan) release(c);
    if (c->st)
        sqlite3_reset(c->st);
    else if (plan_stmt(v, c, plan) != SQLITE_OK)
        return SQLITE_ERROR;
    c->plan = plan;
    c->eof = 0;
    c->n = 0;
    c->i = 0;
    c->blk_ok = 0;
    c->rowid = 0;
    int a = 0;
    static const int bits[] = {PLAN_RUN, PLAN_KIND, PLAN_BUCKET, PLAN_LO, PLAN_HI, PLAN_TRACE};
    for (int i = 0; i < 6; i++) {
        if (!(plan & bits[i])) continue;
        sqlite3_bind_value(c->st, i + 1, argv[a]);
        if (bits[i] == PLAN_TRACE) c->trace = sqlite3_value_int64(argv[a]);
        a++;
    }
    return sv_advance(c, 1);
}

static int sv_next(sqlite3_vtab_cursor *cur)
{
    return sv_advance((snaps_cur *)cur, 0);
}

static int sv_eof(sqlite3_vtab_cursor *cur)
{
    return ((snaps_cur *)cur)->eof;
}

static int sv_column(sqlite3_vtab_cursor *cur, sqlite3_context *ctx, int col)
{
    snaps_cur *c = (snaps_cur *)cur;
    const hs_snap_row *r = &c->rows[c->i];
    assert(col < 3 || (c->plan & PLAN_ROWS));
    int64_t v = col == 0   ? c->run
                : col == 1 ? c->kind
                : col == 2 ? c->bucket
                : col == 3 ? r->trace
                : col == 4 ? r->bytes
                           : r->count;
    sqlite3_result_int64(ctx, v);
    return SQLITE_OK;
}

static int sv_rowid(sqlite3_vtab_cursor *cur, sqlite_int64 *rowid)
{
    *rowid = ((snaps_cur *)cur)->rowid;
    return SQLITE_OK;
}

/* The rows of (run, kind, bucket) into *rows (malloc'd), *n of them. */
static int group_rows(sqlite3 *db, int64_t run, int kind, int64_t bucket, hs_snap_row **rows,
                      size_t *n)
{
    sqlite3_stmt *st;
    *rows = NULL;
    *n = 0;
    if (sqlite3_prepare_v2(db,
                           "SELECT data FROM snapshot_blocks WHERE run = ?1 AND kind = ?2 AND "
                           "bucket = ?3 ORDER BY first",
                           -1, &st, NULL) != SQLITE_OK)
        return HS_EDB;
    sqlite3_bind_int64(st, 1, run);
    sqlite3_bind_int(st, 2, kind);
    sqlite3_bind_int64(st, 3, bucket);
    int rc = 0, step;
    while (!rc && (step = sqlite3_step(st)) == SQLITE_ROW) {
        hs_snap_row *g = realloc(*rows, (*n + HS_SNAPS_BLOCK_ROWS + 1) * sizeof *g);
        if (!g) {
            rc = HS_ENOMEM;
            break;
        }
        *rows = g;
        size_t m;
        rc = hs_snaps_decode(sqlite3_column_blob(st, 0), (size_t)sqlite3_column_bytes(st, 0),
                             *rows + *n, &m, NULL);
        *n += m;
    }
    if (!rc && step != SQLITE_DONE) rc = HS_EDB;
    sqlite3_finalize(st);
    if (!rc && !*rows && !(*rows = malloc(sizeof **rows))) rc = HS_ENOMEM;
    return rc;
}

/* INSERT only (for fixtures and repairs by hand, with no writer running):
 * the row replaces the one of the same (run, kind, bucket, trace); a delta
 * row's window is dropped from snapshot_series (schema/hs_series.h). */
static int sv_update(sqlite3_vtab *vt, int argc, sqlite3_value **argv, sqlite_int64 *rowid)
{
    snaps_vtab *v = (snaps_vtab *)vt;
    if (argc < 8 || sqlite3_value_type(argv[0]) != SQLITE_NULL) {
        sqlite3_free(vt->zErrMsg);
        vt->zErrMsg = sqlite3_mprintf("snapshots: rows are only ever added (by INSERT)");
        return SQLITE_CONSTRAINT;
    }
    int64_t run = sqlite3_value_int64(argv[2]), bucket = sqlite3_value_int64(argv[4]);
    int kind = sqlite3_value_int(argv[3]);
    hs_snap_row x = {sqlite3_value_int64(argv[5]), sqlite3_value_int64(argv[6]),
                     sqlite3_value_int64(argv[7])};
    hs_snap_row *rows;
    size_t n, i;
    int rc = v->wr ? 0 : hs_snaps_wr_open(v->db, &v->wr);
    if (!rc) rc = group_rows(v->db, run, kind, bucket, &rows, &n);
    if (rc) return rc == HS_ENOMEM ? SQLITE_NOMEM : SQLITE_ERROR;
    for (i = 0; i < n && rows[i].trace != x.trace; i++) {
    }
    rows[i] = x; /* group_rows left room for one more */
    rc = hs_snaps_put(v->wr, run, kind, bucket, rows, n + (i == n));
    free(rows);
    /* the window's rows by trace no longer say what its deltas do */
    if (!rc && kind == HS_SNAP_DELTA) rc = hs_series_drop(v->db, run, bucket);
    *rowid = 0;
    return rc == 0 ? SQLITE_OK : rc == HS_ENOMEM ? SQLITE_NOMEM : SQLITE_ERROR;
}

static const sqlite3_module snaps_module = {
    .xConnect = sv_connect,
    .xBestIndex = sv_best_index,
    .xDisconnect = sv_disconnect,
    .xOpen = sv_open,
    .xClose = sv_close,
    .xFilter = sv_filter,
    .xNext = sv_next,
    .xEof = sv_eof,
    .xColumn = sv_column,
    .xRowid = sv_rowid,
    .xUpdate = sv_update,
};

int hs_snaps_sql_register(sqlite3 *db)
{
    return sqlite3_create_module(db, "snapshots", &snaps_module, NULL);
}
