/* hs_series: the delta rows of a run's windows of buckets, by trace
 * (schema 16), beside snapshot_blocks (schema/hs_snaps.h).
 *
 * snapshot_blocks keeps the delta rows of one bucket together, since the
 * state at a moment reads whole buckets after a keyframe. A question that
 * follows a few traces through a run (history's top series, the growth of
 * a leak's site) would read one block per bucket and trace: a thousand
 * seeks for a thousand buckets. snapshot_series (run, bucket, first, last,
 * data) holds the same rows, less the counts, for each window of
 * HS_SERIES_WINDOW buckets starting at bucket (a multiple of it), by trace
 * and then bucket, each block a run of whole traces, first and last the
 * lowest and highest: one seek a window and trace.
 *
 * The writer (server/store_rollup.c) writes a window's blocks once its run
 * has moved past the window, and at the run's end. A window with no
 * blocks (the one in progress, one whose rows were too many to gather, any
 * window of a run written before schema 16) is read from snapshot_blocks:
 * hs_series_rd_trace hands those buckets back to its caller.
 *
 * Blob layout, version 1 (varints LEB128, signed ones zigzag):
 *
 *   u8      version (1)
 *   varint  n, traces (1 .. HS_SERIES_BLOCK_TRACES)
 *   varint  first, the first trace
 *   ...     four columns, packed as schema/hs_cols.h says:
 *             TRACE   n - 1 steps trace[i] - trace[i-1] (>= 1)
 *             ROWS    n counts of each trace's rows (1 .. HS_SERIES_WINDOW)
 *             BUCKET  per row: a trace's first row its bucket's offset in
 *                     the window, each next one the step from the one
 *                     before (>= 1); all within the window
 *             BYTES   per row, signed
 */
#ifndef HS_SERIES_H
#define HS_SERIES_H

#include <stddef.h>
#include <stdint.h>

#include <sqlite3.h>

#include "hs_buf.h"
#include "hs_cols.h"

#define HS_SERIES_CODEC 1
/* Buckets a window spans: a trace's history over B buckets reads about
 * B / HS_SERIES_WINDOW blocks. */
#define HS_SERIES_WINDOW       32
#define HS_SERIES_BLOCK_TRACES 256
/* A block's bytes at most, unless one trace's rows take more (as
 * HS_SNAPS_BLOCK_BYTES: within its b-tree page). */
#define HS_SERIES_BLOCK_BYTES 960
/* The most rows a block decodes to. */
#define HS_SERIES_BLOCK_ROWS (HS_SERIES_BLOCK_TRACES * HS_SERIES_WINDOW)

typedef struct hs_series_row {
    int64_t trace, bucket, bytes;
} hs_series_row;

/* The window that holds bucket (>= 0). */
static inline int64_t hs_series_window(int64_t bucket)
{
    return bucket / HS_SERIES_WINDOW * HS_SERIES_WINDOW;
}

/* ---- codec -------------------------------------------------------------- */

/* Encodes rows[0..n) (n >= 1; by trace, then bucket, one row per trace and
 * bucket, every bucket within window, at most HS_SERIES_BLOCK_TRACES
 * traces) into out (appended), with ctx (may be NULL) for a writer of many
 * blocks. 0 or HS_ENOMEM. */
int hs_series_encode(const hs_series_row *rows, size_t n, int64_t window, hs_buf *out,
                     hs_cols_ctx *ctx);

/* Decodes a blob of window into rows (room for HS_SERIES_BLOCK_ROWS) and
 * *n. 0, or HS_ECORRUPT for a blob that is malformed or of another version,
 * or HS_ENOMEM. */
int hs_series_decode(const void *blob, size_t len, int64_t window, hs_series_row *rows, size_t *n,
                     hs_cols_ctx *ctx);

/* ---- writing ------------------------------------------------------------- */

typedef struct hs_series_wr hs_series_wr;

/* A writer on db's snapshot_series. 0, HS_ENOMEM or HS_EDB. */
int hs_series_wr_open(sqlite3 *db, hs_series_wr **out);
void hs_series_wr_free(hs_series_wr *w);

/* Makes rows[0..n) (as hs_series_encode takes them, any number of traces)
 * the rows of run's window, replacing any it had. 0, HS_EDB or HS_ENOMEM. */
int hs_series_put(hs_series_wr *w, int64_t run, int64_t window, const hs_series_row *rows,
                  size_t n);

/* Forgets run's window that holds bucket, whose delta rows changed in
 * snapshot_blocks: its readers go back to those (nothing when db has no
 * snapshot_series). 0 or HS_EDB. */
int hs_series_drop(sqlite3 *db, int64_t run, int64_t bucket);

/* ---- reading ------------------------------------------------------------- */

/* 1 when db has snapshot_series (schema 16 and later), 0 not, HS_EDB when
 * that cannot be told. */
int hs_series_in_db(sqlite3 *db);

typedef struct hs_series_rd hs_series_rd;

/* 0, HS_ENOMEM, or HS_EDB (no snapshot_series: an older database). */
int hs_series_rd_open(sqlite3 *db, hs_series_rd **out);
void hs_series_rd_free(hs_series_rd *r);

/* trace's delta rows of run in buckets lo..hi, by bucket: those of the
 * windows stored to row, each range of buckets in windows not stored to
 * rest (consecutive ones as one range), in bucket order between them.
 * Stops at the first non-zero return of either, which it returns; else 0,
 * or HS_EDB / HS_ECORRUPT / HS_ENOMEM. */
int hs_series_rd_trace(hs_series_rd *r, int64_t run, int64_t trace, int64_t lo, int64_t hi,
                       int (*row)(int64_t bucket, int64_t bytes, void *data),
                       int (*rest)(int64_t lo, int64_t hi, void *data), void *data);

#endif
