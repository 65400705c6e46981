/* hs_tstats: the per-trace summary of a run's delta rows (the trace_stats
 * table of schema/002_trace_stats.sql), shared by the writer, which keeps
 * one per trace as it writes delta rows, the migration that fills the table
 * for runs written before it, and the queries, which add the delta rows
 * written after the stored summaries.
 *
 * A summary is what one pass over a trace's delta rows in bucket order
 * yields: its live bytes, their highest value at a bucket's end (history's
 * top N rank by it) and what the leak fit needs (least-squares sums of live
 * bytes over bucket index, increases and decreases). Everyone folds rows in
 * with hs_tstats_add(), in bucket order, so that a stored summary plus the
 * rows after it gives the very doubles that one pass over all rows gives.
 */
#ifndef HS_TSTATS_H
#define HS_TSTATS_H

#include <stddef.h>
#include <stdint.h>

/* Declared, not included: the readers of queries/ use the summaries
 * without SQLite's header (their store implements the reading). */
struct sqlite3;
struct sqlite3_stmt;

typedef struct hs_tstats {
    int64_t rows;        /* delta rows added */
    int64_t first, last; /* buckets of the first and of the last row */
    int64_t bytes;       /* live bytes after the last row */
    int64_t max;         /* highest live bytes at a bucket's end, >= 0 */
    int64_t ups;         /* rows with an increase */
    int64_t first_up;    /* buckets of the first and the last increase */
    int64_t last_up;     /*   (0 while ups is 0) */
    double up, down;     /* sums of the increases and of the decreases */
    double sy, sxy, syy; /* least squares over buckets 0 .. last - 1 */
} hs_tstats;

/* Folds in the delta row of bucket (after any row already added) that
 * changed the trace's live bytes by delta. A zeroed hs_tstats is empty. */
void hs_tstats_add(hs_tstats *t, int64_t bucket, int64_t delta);

/* Extends the least-squares sums over the buckets from t->last up to and
 * excluding upto, where the live bytes stayed t->bytes. */
void hs_tstats_close(hs_tstats *t, int64_t upto);

/* The columns of trace_stats after run and trace, in the order that
 * hs_tstats_bind() binds and hs_tstats_read() reads them. */
#define HS_TSTATS_COLS                                                                             \
    "rows, first_bucket, last_bucket, bytes, max_bytes, ups, first_up, last_up, up_bytes, "        \
    "down_bytes, sy, sxy, syy"
#define HS_TSTATS_NCOLS 13

/* Binds the 13 values to parameters first .. first + 12. */
void hs_tstats_bind(struct sqlite3_stmt *st, int first, const hs_tstats *t);
/* Reads the 13 values from columns first .. first + 12. */
void hs_tstats_read(struct sqlite3_stmt *st, int first, hs_tstats *t);

/* Fills trace_stats and runs.stats_bucket for every run from its delta
 * rows (migration 2; inside the migration's transaction). 0 or HS_EDB with
 * a message in errmsg. */
int hs_tstats_backfill(struct sqlite3 *db, char *errmsg, size_t errlen);

#endif
