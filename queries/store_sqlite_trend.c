/* store_sqlite_trend: runs_summary of the SQLite store (hs_qstore.h), the
 * summaries of many runs in one statement.
 *
 * The runs row holds every figure but two: rss_peak_bytes and
 * leak_bytes_per_s (schema 9) are written when a run ends; for an open run,
 * or a database older than schema 9, the statement computes them from the
 * run's rows (HS_SCHEMA_*_SQL, the migration's text).
 *
 * A code's bytes (a function, or a site file:line) are those of the stacks
 * through one of its frames: the trace nodes of those frames and their
 * subtrees (traces_frame, then traces' UNIQUE(parent, frame)), looked up in
 * each run's peak (or last keyframe) snapshot. When the subtree is small the
 * lookups are key seeks, one per run and trace (sel x sub); when it is big (a
 * function every stack passes through) each run's snapshot is read once and
 * its traces checked against the subtree. Either way one statement, whatever
 * the number of runs, after one statement that sizes the subtree.
 */
#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "hs_error.h"
#include "hs_schema.h"
#include "hs_snap.h"
#include "q_internal.h"
#include "store_sqlite.h"

/* Subtrees of at most this many traces are looked up trace by trace. */
#define SUMMARY_SEEK_TRACES 2048

/* The CTEs "sel" (the runs), "sub" (the code's traces) and "code" (its
 * bytes per run) of ask, after "WITH RECURSIVE". */
static void summary_ctes(hs_buf *b, const hs_qstore_summary_ask *ask, int seek)
{
    hs_buf_printf(b, "sel(id) AS (SELECT r.id FROM runs r WHERE 1");
    for (int i = 0; i < ask->n; i++) hs__sqlite_where_kv(b, ask->f[i].key, ask->f[i].value);
    if (ask->by)
        hs_buf_printf(b, " AND EXISTS (SELECT 1 FROM run_labels l WHERE l.run = r.id AND "
                         "l.key = ?)");
    hs_buf_printf(b, " ORDER BY r.start_unix_ns DESC, r.id DESC LIMIT ?)");
    if (!ask->function && !ask->file) return;
    if (ask->function)
        hs_buf_printf(b, ", sub(id) AS (SELECT t.id FROM frames f JOIN traces t ON t.frame = "
                         "f.id WHERE f.function = ?");
    else
        hs_buf_printf(b, ", sub(id) AS (SELECT t.id FROM frames f JOIN traces t ON t.frame = "
                         "f.id WHERE f.line = ? AND (f.file = ? OR f.file LIKE '%%/' || ?)");
    hs_buf_printf(b, " UNION SELECT c.id FROM sub JOIN traces c ON c.parent = sub.id)");
    const char *kind = ask->code_at_end ? HS_SNAP_KEYFRAME_SQL : HS_SNAP_PEAK_SQL;
    hs_buf_printf(b,
                  ", pk(run, bucket) AS MATERIALIZED (SELECT sel.id, (SELECT MAX(bucket) FROM "
                  "snapshots WHERE run = sel.id AND kind = %s) FROM sel)",
                  kind);
    if (seek)
        hs_buf_printf(b,
                      ", code(run, bytes) AS (SELECT pk.run, SUM(s.bytes) FROM pk CROSS JOIN "
                      "sub CROSS JOIN snapshots s ON s.run = pk.run AND s.kind = %s AND "
                      "s.bucket = pk.bucket AND s.trace = sub.id GROUP BY pk.run)",
                      kind);
    else
        hs_buf_printf(b,
                      ", code(run, bytes) AS (SELECT pk.run, SUM(s.bytes) FROM pk CROSS JOIN "
                      "snapshots s ON s.run = pk.run AND s.kind = %s AND s.bucket = pk.bucket "
                      "WHERE s.trace IN (SELECT id FROM sub) GROUP BY pk.run)",
                      kind);
}

static void summary_sql(hs_buf *b, const hs__sqlite *q, const hs_qstore_summary_ask *ask, int seek)
{
    hs_buf_printf(b, "WITH RECURSIVE ");
    summary_ctes(b, ask, seek);
    int code = ask->function || ask->file;
    const char *rss = HS_SCHEMA_RSS_PEAK_SQL("r.id");
    const char *leak = HS_SCHEMA_LEAK_SQL("r.id", "r.granularity_ns");
    hs_buf_printf(b,
                  " SELECT r.id, r.start_unix_ns, COALESCE(r.end_ns, 0), r.program, r.state, %s, "
                  "r.peak_bytes, r.live_bytes, r.total_alloc_bytes, r.dropped_alloc_events + "
                  "r.dropped_free_events, ",
                  ask->by ? "lb.value" : "NULL");
    if (q->schema >= 9)
        hs_buf_printf(b, "COALESCE(r.rss_peak_bytes, %s), COALESCE(r.leak_bytes_per_s, %s), ", rss,
                      leak);
    else
        hs_buf_printf(b, "%s, %s, ", rss, leak);
    /* the selected runs first (not every run in runs_start's order) */
    hs_buf_printf(b, "%s FROM sel CROSS JOIN runs r ON r.id = sel.id",
                  code ? "COALESCE(code.bytes, 0)" : "NULL");
    if (ask->by) hs_buf_printf(b, " JOIN run_labels lb ON lb.run = r.id AND lb.key = ?");
    if (code) hs_buf_printf(b, " LEFT JOIN code ON code.run = r.id");
    hs_buf_printf(b, " ORDER BY r.start_unix_ns, r.id");
}

char *hs__sqlite_summary_sql(hs_qstore *s, const hs_qstore_summary_ask *ask, int seek)
{
    hs_buf b = {0};
    summary_sql(&b, (hs__sqlite *)s, ask, seek);
    hs_buf_put(&b, "", 1);
    if (b.oom) {
        free(b.p);
        return NULL;
    }
    return b.p;
}

/* Binds ask's values in the order summary_sql wrote their places. */
static void summary_bind(sqlite3_stmt *st, const hs_qstore_summary_ask *ask, int with_main)
{
    int bi = 1;
    for (int i = 0; i < ask->n; i++)
        bi = hs__sqlite_bind_kv(st, bi, ask->f[i].key, ask->f[i].value);
    if (ask->by) sqlite3_bind_text(st, bi++, ask->by, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(st, bi++, ask->limit);
    if (ask->function) {
        sqlite3_bind_text(st, bi++, ask->function, -1, SQLITE_TRANSIENT);
    } else if (ask->file) {
        sqlite3_bind_int64(st, bi++, ask->line);
        sqlite3_bind_text(st, bi++, ask->file, -1, SQLITE_TRANSIENT);
        sqlite3_bind_text(st, bi++, ask->file, -1, SQLITE_TRANSIENT);
    }
    if (with_main && ask->by) sqlite3_bind_text(st, bi++, ask->by, -1, SQLITE_TRANSIENT);
}

/* How many traces pass through the code: the plan of the main statement. */
static int summary_sub_count(hs__sqlite *q, const hs_qstore_summary_ask *ask, int64_t *out,
                             hs_qerr *err)
{
    hs_buf b = {0};
    hs_buf_printf(&b, "WITH RECURSIVE ");
    summary_ctes(&b, ask, 1);
    hs_buf_printf(&b, " SELECT COUNT(*) FROM (SELECT id FROM sub LIMIT %d)",
                  SUMMARY_SEEK_TRACES + 1);
    if (b.oom) return hs__err(err, HS_ENOMEM, "out of memory");
    sqlite3_stmt *st = NULL;
    int rc = 0;
    if (sqlite3_prepare_v2(q->db, b.p, -1, &st, NULL) != SQLITE_OK) {
        rc = hs__sqlite_err(q, err);
    } else {
        summary_bind(st, ask, 0);
        if (sqlite3_step(st) == SQLITE_ROW)
            *out = sqlite3_column_int64(st, 0);
        else
            rc = hs__sqlite_err(q, err);
    }
    sqlite3_finalize(st);
    free(b.p);
    return rc;
}

static void summary_row(sqlite3_stmt *st, hs_qstore_summary *r)
{
    memset(r, 0, sizeof *r);
    r->id = sqlite3_column_int64(st, 0);
    r->start_unix_ns = sqlite3_column_int64(st, 1);
    r->duration_ns = sqlite3_column_int64(st, 2);
    r->program = (const char *)sqlite3_column_text(st, 3);
    r->state = (const char *)sqlite3_column_text(st, 4);
    r->label = (const char *)sqlite3_column_text(st, 5);
    r->peak_bytes = sqlite3_column_int64(st, 6);
    r->end_bytes = sqlite3_column_int64(st, 7);
    r->total_alloc_bytes = sqlite3_column_int64(st, 8);
    r->dropped_events = sqlite3_column_int64(st, 9);
    r->has_rss = sqlite3_column_type(st, 10) != SQLITE_NULL;
    r->rss_peak_bytes = sqlite3_column_int64(st, 10);
    r->has_leak = sqlite3_column_type(st, 11) != SQLITE_NULL;
    r->leak_bytes_per_s = sqlite3_column_double(st, 11);
    r->has_code = sqlite3_column_type(st, 12) != SQLITE_NULL;
    r->code_bytes = sqlite3_column_int64(st, 12);
    if (!r->program) r->program = "";
    if (!r->state) r->state = "";
}

int hs__sqlite_runs_summary(hs_qstore *s, const hs_qstore_summary_ask *ask,
                            int (*cb)(const hs_qstore_summary *r, void *data), void *data,
                            hs_qerr *err)
{
    hs__sqlite *q = (hs__sqlite *)s;
    assert(ask->limit > 0 && (!ask->file || !ask->function));
    int64_t nsub = 0;
    int rc = 0;
    if ((ask->function || ask->file) && (rc = summary_sub_count(q, ask, &nsub, err))) return rc;
    hs_buf b = {0};
    summary_sql(&b, q, ask, nsub <= SUMMARY_SEEK_TRACES);
    if (b.oom) return hs__err(err, HS_ENOMEM, "out of memory");
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(q->db, b.p, -1, &st, NULL) != SQLITE_OK) {
        rc = hs__sqlite_err(q, err);
        goto out;
    }
    summary_bind(st, ask, 1);
    int sr;
    hs_qstore_summary row;
    while ((sr = sqlite3_step(st)) == SQLITE_ROW) {
        summary_row(st, &row);
        if ((rc = cb(&row, data))) goto out;
    }
    if (sr != SQLITE_DONE) rc = hs__sqlite_err(q, err);
out:
    sqlite3_finalize(st);
    free(b.p);
    return rc;
}
