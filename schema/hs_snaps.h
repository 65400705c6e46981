/* hs_snaps: the stored form of the rollups' snapshot rows (schema 15).
 *
 * A snapshot row is (run, kind, bucket, trace, bytes, count): the kinds and
 * buckets are common/hs_snap.h's, what each holds 001_init.sql's. The
 * writer writes all the rows of one (run, kind, bucket) at once (a bucket's
 * deltas as the run moves past it, a keyframe, the peak), and readers read
 * them the same way, so since schema 15 they are stored by that group:
 * snapshot_blocks (run, kind, bucket, first, last, data) holds the group's
 * rows by trace, up to HS_SNAPS_BLOCK_ROWS (and HS_SNAPS_BLOCK_BYTES) a
 * row, first and last the
 * lowest and highest trace of the block. A group is only ever written
 * whole: its blocks are replaced, never grown.
 *
 * Blob layout, version 1 (varints LEB128, signed ones zigzag):
 *
 *   u8      version (1)
 *   varint  n, rows (1 .. HS_SNAPS_BLOCK_ROWS)
 *   varint  first, the trace of the first row
 *   ...     three columns, packed as schema/hs_cols.h says:
 *             TRACE  n - 1 steps trace[i] - trace[i-1] (>= 1)
 *             BYTES  n signed bytes[i]
 *             COUNT  n signed count[i]
 *
 * Blocks are small (a few hundred rows take under a kilobyte) so that a
 * block stays within its b-tree page and a reader of one trace decodes
 * little. A trace's deltas across many buckets are read by window from
 * schema/hs_series.h's copy of them, by trace.
 *
 * For SQL, the read-only virtual table `snapshots` (run, kind, bucket,
 * trace, bytes, count) stands where the table was, eponymous on every
 * connection that hs_schema_sql_register() was given (a database older
 * than schema 15 has the real table, which SQLite finds first). INSERT
 * adds or replaces one row (for fixtures and repair by hand).
 */
#ifndef HS_SNAPS_H
#define HS_SNAPS_H

#include <stddef.h>
#include <stdint.h>

#include <sqlite3.h>

#include "hs_buf.h"
#include "hs_cols.h"

#define HS_SNAPS_CODEC      1
#define HS_SNAPS_BLOCK_ROWS 256
/* A block's bytes at most, unless one row takes more: the most SQLite
 * keeps of a row within a b-tree page of 4 KiB is about 1000 bytes, and a
 * row past it spills into an overflow page of its own. */
#define HS_SNAPS_BLOCK_BYTES 960

typedef struct hs_snap_row {
    int64_t trace, bytes, count;
} hs_snap_row;

/* ---- codec -------------------------------------------------------------- */

/* Encodes rows[0..n) (1 <= n <= HS_SNAPS_BLOCK_ROWS, traces increasing)
 * into out (appended), with ctx (may be NULL) for a writer of many
 * blocks. 0 or HS_ENOMEM. */
int hs_snaps_encode(const hs_snap_row *rows, size_t n, hs_buf *out, hs_cols_ctx *ctx);

/* Decodes a blob into rows (room for HS_SNAPS_BLOCK_ROWS) and *n, with
 * ctx (may be NULL) for a reader of many blocks. 0, or HS_ECORRUPT for a
 * blob that is malformed or of another version, or HS_ENOMEM. */
int hs_snaps_decode(const void *blob, size_t len, hs_snap_row *rows, size_t *n, hs_cols_ctx *ctx);

/* The number of rows of a blob, read from its header: 1.., or 0 when the
 * header is malformed. */
size_t hs_snaps_count(const void *blob, size_t len);

/* ---- reading in C --------------------------------------------------------- */

/* The readers of a connection's snapshot_blocks (schema 15 and later; a
 * database with the snapshots table is read through SQL). One per
 * connection, not thread-safe; it keeps the blocks it decoded last while
 * the database does not change. */
typedef struct hs_snaps_rd hs_snaps_rd;
/* 0, HS_ENOMEM or HS_EDB (no snapshot_blocks: an older database). */
int hs_snaps_rd_open(sqlite3 *db, hs_snaps_rd **out);
void hs_snaps_rd_free(hs_snaps_rd *r);

/* The highest bucket at or below hi with rows of (run, kind): 1 and
 * *bucket, 0 when there is none, or HS_EDB. */
int hs_snaps_rd_last(hs_snaps_rd *r, int64_t run, int kind, int64_t hi, int64_t *bucket);

/* Calls cb with each row of (run, kind) in buckets lo..hi, by bucket and
 * trace; with trace >= 0, that trace's rows only (each found in the one
 * block that can hold it). Stops at cb's first non-zero return, which it
 * returns. 0, or HS_EDB / HS_ECORRUPT / HS_ENOMEM. */
int hs_snaps_rd_scan(hs_snaps_rd *r, int64_t run, int kind, int64_t lo, int64_t hi, int64_t trace,
                     int (*cb)(int64_t bucket, const hs_snap_row *row, void *data), void *data);

/* Test knob: the most blocks of one (run, kind) whose keys the reader
 * keeps (the rest are found by SQL). */
void hs_snaps_rd_dir_max(hs_snaps_rd *r, size_t n);

/* ---- writing ------------------------------------------------------------- */

typedef struct hs_snaps_wr hs_snaps_wr;

/* A writer on db's snapshot_blocks. 0, HS_ENOMEM or HS_EDB. */
int hs_snaps_wr_open(sqlite3 *db, hs_snaps_wr **out);
void hs_snaps_wr_free(hs_snaps_wr *w);

/* Makes rows[0..n) (any order, one per trace; sorted here) the rows of
 * (run, kind, bucket), replacing any it had; n 0 removes them. 0, HS_EDB
 * or HS_ENOMEM. */
int hs_snaps_put(hs_snaps_wr *w, int64_t run, int kind, int64_t bucket, hs_snap_row *rows,
                 size_t n);

/* 1 when db stores its snapshots in blocks (schema 15 and later: it has
 * no snapshots table), 0 when it has the table, HS_EDB when that cannot be
 * told. */
int hs_snaps_in_blocks(sqlite3 *db);

/* Migration 15: moves the rows of the snapshots table into blocks and
 * drops the table (none: nothing to do), in the caller's transaction. 0, or HS_EDB
 * (sqlite3_errmsg says why), HS_ENOMEM. */
int hs_snaps_migrate(sqlite3 *db);

/* ---- SQL ------------------------------------------------------------------ */

/* Adds the virtual table `snapshots` to db. SQLITE_OK or an SQLite code. */
int hs_snaps_sql_register(sqlite3 *db);

#endif
