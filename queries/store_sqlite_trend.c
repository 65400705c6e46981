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
 * subtrees, found in one pass over the stack tree (schema/hs_tree.h: a
 * node's parent comes before it), looked up in each run's peak (or last
 * keyframe) snapshot. The statement gets them as a JSON array. When the
 * subtree is small the lookups are key seeks, one per run and trace (sel x
 * sub); when it is big (a function every stack passes through) each run's
 * snapshot is read once and its traces checked against the subtree. Either
 * way one statement, whatever the number of runs.
 */
#include <assert.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "hs_error.h"
#include "hs_map.h"
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
    hs_buf_printf(b, ", sub(id) AS (SELECT value FROM json_each(?))");
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

/* Binds ask's values in the order summary_sql wrote their places; sub is
 * the code's traces as a JSON array. */
static void summary_bind(sqlite3_stmt *st, const hs_qstore_summary_ask *ask, const hs_buf *sub)
{
    int bi = 1;
    for (int i = 0; i < ask->n; i++)
        bi = hs__sqlite_bind_kv(st, bi, ask->f[i].key, ask->f[i].value);
    if (ask->by) sqlite3_bind_text(st, bi++, ask->by, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(st, bi++, ask->limit);
    if (ask->function || ask->file) sqlite3_bind_text(st, bi++, sub->p, (int)sub->n, SQLITE_STATIC);
    if (ask->by) sqlite3_bind_text(st, bi++, ask->by, -1, SQLITE_TRANSIENT);
}

/* The subtree of the code's frames, found in one pass over the tree. */
typedef struct sub_walk {
    hs_map frames; /* the code's frames */
    size_t n;      /* nodes in the subtree */
    hs_buf json;   /* their ids, "[1,2,…]" */
} sub_walk;

/* Walks the tree kept in memory (read up to date first): a node is in the
 * subtree when its frame is the code's or its parent is in it. */
static int sub_walk_tree(hs__sqlite *q, sub_walk *w)
{
    int rc = hs_tree_mem_update(q->db, &q->mem);
    const hs_tree_mem *m = &q->mem;
    uint8_t *in = rc ? NULL : calloc(m->n ? m->n : 1, 1);
    if (!rc && !in) rc = HS_ENOMEM;
    for (size_t i = 0; !rc && i < m->n; i++) {
        uint64_t v;
        assert(m->up[i] == HS_TREE_NONE || m->up[i] < i);
        in[i] = (m->up[i] != HS_TREE_NONE && in[m->up[i]]) ||
                hs_map_get(&w->frames, (uint64_t)m->nodes[i].frame, &v);
        if (in[i]) hs_buf_printf(&w->json, "%s%" PRId64, w->n++ ? "," : "", m->nodes[i].id);
    }
    free(in);
    return rc;
}

/* The traces through the code of ask into w (w->n of them). */
static int summary_sub(hs__sqlite *q, const hs_qstore_summary_ask *ask, sub_walk *w, hs_qerr *err)
{
    sqlite3_stmt *st = NULL;
    const char *sql = ask->function ? "SELECT id FROM frames WHERE function = ?1"
                                    : "SELECT id FROM frames WHERE line = ?2 AND (file = ?1 OR "
                                      "file LIKE '%/' || ?1)";
    if (sqlite3_prepare_v2(q->db, sql, -1, &st, NULL) != SQLITE_OK) return hs__sqlite_err(q, err);
    sqlite3_bind_text(st, 1, ask->function ? ask->function : ask->file, -1, SQLITE_TRANSIENT);
    if (!ask->function) sqlite3_bind_int64(st, 2, ask->line);
    int rc = 0, step;
    while (!rc && (step = sqlite3_step(st)) == SQLITE_ROW)
        rc = hs_map_put(&w->frames, (uint64_t)sqlite3_column_int64(st, 0), 1);
    if (!rc && step != SQLITE_DONE) rc = HS_EDB;
    sqlite3_finalize(st);
    hs_buf_put(&w->json, "[", 1);
    if (!rc && w->frames.count) rc = sub_walk_tree(q, w);
    hs_buf_put(&w->json, "]", 1);
    if (!rc && w->json.oom) rc = HS_ENOMEM;
    if (rc == HS_EDB) return hs__sqlite_err(q, err);
    return rc ? hs__err(err, rc, "the code's stacks: %s", hs_strerror(rc)) : 0;
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
    sub_walk w = {0};
    hs_buf b = {0};
    sqlite3_stmt *st = NULL;
    int rc = 0;
    if ((ask->function || ask->file) && (rc = summary_sub(q, ask, &w, err))) goto out;
    summary_sql(&b, q, ask, w.n <= SUMMARY_SEEK_TRACES);
    if (b.oom) {
        rc = hs__err(err, HS_ENOMEM, "out of memory");
        goto out;
    }
    if (sqlite3_prepare_v2(q->db, b.p, -1, &st, NULL) != SQLITE_OK) {
        rc = hs__sqlite_err(q, err);
        goto out;
    }
    summary_bind(st, ask, &w.json);
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
    hs_map_free(&w.frames);
    hs_buf_free(&w.json);
    return rc;
}
