/* store_sqlite: the SQLite store of the query core (hs_qstore.h) over a
 * read-only connection to the server's database file (schema/).
 *
 * A run's state at a moment is the nearest keyframe before it plus the
 * per-bucket delta rows since (or the peak's snapshot), plus, for an exact
 * moment, the stored events after the last bucket's end; a trace's summary
 * is its trace_stats row plus the delta rows written after it. Statements
 * are prepared once (SQLITE_PREPARE_PERSISTENT) and kept; the query plans
 * are those the statements' comments and the tests of queries/ name.
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hs_error.h"
#include "hs_evcodec.h"
#include "hs_maps.h"
#include "hs_proto.h"
#include "hs_schema.h"
#include "hs_snap.h"
#include "q_internal.h"
#include "store_sqlite.h"

static const hs_qstore_ops sqlite_ops;

/* ---- statements ----------------------------------------------------------- */

#define RUN_COLS                                                                                   \
    "id, hex(uuid), program, argv, host, pid, ppid, parent_id, start_unix_ns, end_ns, state, "     \
    "clean_exit, peak_bytes, peak_count, peak_t_ns, live_bytes, live_count, total_alloc_bytes, "   \
    "alloc_events, free_events, granularity_ns, sample_bytes, dropped_alloc_events, "              \
    "dropped_free_events, dropped_alloc_bytes, dropped_free_bytes, stacks_truncated, "             \
    "unwind_failed, live_set_full, keyframe_every, total_alloc_count, max_depth, "                 \
    "(SELECT MAX(bucket) FROM heap_series WHERE run = runs.id), collector_version, "               \
    "bye_alloc_events, bye_free_events"

const char *const hs__sqlite_stmt_sql[ST__COUNT] = {
    [ST_RUN] = "SELECT " RUN_COLS " FROM runs WHERE id = ?1",
    [ST_LABELS] = "SELECT key, value FROM run_labels WHERE run = ?1 ORDER BY key",
    [ST_KEYFRAME] =
        "SELECT MAX(bucket) FROM snapshots WHERE run = ?1 AND kind = " HS_SNAP_KEYFRAME_SQL
        " AND bucket <= ?2",
    [ST_KF_ROWS] =
        "SELECT trace, bytes, count FROM snapshots WHERE run = ?1 AND kind = " HS_SNAP_KEYFRAME_SQL
        " AND bucket = ?2",
    [ST_DELTA_ROWS] =
        "SELECT trace, bytes, count FROM snapshots WHERE run = ?1 AND kind = " HS_SNAP_DELTA_SQL
        " AND bucket > ?2 AND bucket <= ?3",
    [ST_PEAK_BUCKET] =
        "SELECT MAX(bucket) FROM snapshots WHERE run = ?1 AND kind = " HS_SNAP_PEAK_SQL,
    [ST_PEAK_ROWS] =
        "SELECT trace, bytes, count FROM snapshots WHERE run = ?1 AND kind = " HS_SNAP_PEAK_SQL
        " AND bucket = ?2",
    [ST_FRAME] = "SELECT function, file, line, module, module_offset FROM frames WHERE id = ?1",
    [ST_SERIES] = "SELECT bucket, live_bytes, max_bytes, live_count FROM heap_series WHERE run = "
                  "?1 ORDER BY bucket",
    [ST_RSS] = "SELECT t_ns, rss_bytes, vsize_bytes FROM process_samples WHERE run = ?1 ORDER BY "
               "t_ns",
    [ST_DELTAS_AFTER] =
        "SELECT bucket, trace, bytes FROM snapshots WHERE run = ?1 AND kind = " HS_SNAP_DELTA_SQL
        " AND bucket > ?2 ORDER BY bucket",
    /* one trace's delta rows, by the buckets that have rows at all: a key
     * lookup per bucket rather than a pass over every trace's rows */
    [ST_TRACE_DELTAS] =
        "SELECT h.bucket, s.bytes FROM heap_series h CROSS JOIN snapshots s ON "
        "s.run = h.run AND s.kind = " HS_SNAP_DELTA_SQL " AND s.bucket = h.bucket AND s.trace = ?4 "
        "WHERE h.run = ?1 AND h.bucket >= ?2 AND h.bucket <= ?3 ORDER BY h.bucket",
    [ST_TSTATS_MARK] = "SELECT stats_bucket FROM runs WHERE id = ?1",
    [ST_TSTATS_ROWS] = "SELECT trace, " HS_TSTATS_COLS " FROM trace_stats WHERE run = ?1",
    [ST_SIZES] = "SELECT bucket, allocs, bytes FROM size_hist WHERE run = ?1 ORDER BY bucket",
    [ST_LAST_BUCKET] = "SELECT MAX(bucket) FROM heap_series WHERE run = ?1",
    [ST_RUN_MAP] = HS_MAPS_CHUNKS_SQL,
    [ST_MAPPINGS] = "SELECT start, end, file_offset, build_id, path FROM mappings WHERE run = ?1 "
                    "AND t_ns = (SELECT MAX(t_ns) FROM mappings WHERE run = ?1) ORDER BY start",
    [ST_RSS_AT] = "SELECT rss_bytes FROM process_samples WHERE run = ?1 AND t_ns <= ?2 "
                  "ORDER BY t_ns DESC LIMIT 1",
    [ST_EXACT_RUN] = "SELECT flags, allocs, frees, alloc_bytes, free_bytes, error_bytes, "
                     "est_peak_bytes, est_peak_t_ns FROM run_exact WHERE run = ?1",
    [ST_EXACT_SERIES] = "SELECT bucket, live_bytes, max_bytes, max(allocs - frees, 0) FROM "
                        "heap_exact WHERE run = ?1 ORDER BY bucket",
};

sqlite3_stmt *hs__sqlite_stmt(hs__sqlite *q, int id, hs_qerr *err)
{
    if (!q->st[id] &&
        sqlite3_prepare_v3(q->db, hs__sqlite_stmt_sql[id], -1, SQLITE_PREPARE_PERSISTENT,
                           &q->st[id], NULL) != SQLITE_OK) {
        hs__sqlite_err(q, err);
        return NULL;
    }
    sqlite3_reset(q->st[id]);
    sqlite3_clear_bindings(q->st[id]);
    return q->st[id];
}

static const char *col_text(sqlite3_stmt *st, int i)
{
    const unsigned char *s = sqlite3_column_text(st, i);
    return s ? (const char *)s : "";
}

/* ---- open/close ----------------------------------------------------------- */

int hs_qstore_sqlite_open(hs_qstore **out, const char *path, hs_qerr *err)
{
    *out = NULL;
    hs__sqlite *q = calloc(1, sizeof *q);
    if (!q || !(q->path = strdup(path))) {
        free(q);
        return hs__err(err, HS_ENOMEM, "out of memory");
    }
    q->base.ops = &sqlite_ops;
    char msg[400];
    int rc = hs_schema_open(&q->db, path, HS_SCHEMA_READONLY, msg, sizeof msg);
    if (rc) {
        free(q->path);
        free(q);
        hs__err(err, HS_EDB, "%s", msg);
        return rc;
    }
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(q->db, "PRAGMA user_version", -1, &st, NULL) == SQLITE_OK) {
        if (sqlite3_step(st) == SQLITE_ROW) q->schema = sqlite3_column_int(st, 0);
        sqlite3_finalize(st);
    }
    hs__sql_register(q);
    *out = &q->base;
    return 0;
}

int hs_qstore_sqlite_schema(void)
{
    return hs_schema_version();
}

static void sqlite_free(hs_qstore *s)
{
    hs__sqlite *q = (hs__sqlite *)s;
    for (int i = 0; i < ST__COUNT; i++) sqlite3_finalize(q->st[i]);
    hs_tree_rd_free(q->tree);
    hs_snaps_rd_free(q->snaps_rd);
    hs_series_rd_free(q->series_rd);
    hs_tree_mem_free(&q->mem);
    hs__sql_free(q);
    sqlite3_close_v2(q->db);
    free(q->path);
    free(q);
}

static void sqlite_idle(hs_qstore *s)
{
    hs__sqlite *q = (hs__sqlite *)s;
    for (int i = 0; i < ST__COUNT; i++)
        if (q->st[i]) sqlite3_reset(q->st[i]);
}

static int sqlite_read_only(hs_qstore *s, char *why, size_t len)
{
    return hs_schema_readonly_why(((hs__sqlite *)s)->path, why, len);
}

static int sqlite_sql(hs_qstore *s, const char *body, size_t len, json_t **out, hs_qerr *err)
{
    return hs__view_sql((hs__sqlite *)s, body, len, out, err);
}

/* ---- runs ----------------------------------------------------------------- */

/* A runs column that schema `since` added; 0 in older databases (read as
 * they are) and when NULL. */
static int64_t run_column(hs__sqlite *q, int64_t id, int since, const char *col)
{
    if (q->schema < since) return 0;
    sqlite3_stmt *st;
    int64_t v = 0;
    char sql[128];
    snprintf(sql, sizeof sql, "SELECT %s FROM runs WHERE id = ?1", col);
    if (sqlite3_prepare_v2(q->db, sql, -1, &st, NULL) != SQLITE_OK) return 0;
    sqlite3_bind_int64(st, 1, id);
    if (sqlite3_step(st) == SQLITE_ROW) v = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    return v;
}

static int64_t col_i64(sqlite3_stmt *st, int i)
{
    return sqlite3_column_int64(st, i);
}

/* The row of ST_RUN into out; strings stay valid while the statement is
 * on its row (until it is next fetched, or the store goes idle). */
static void run_row(hs__sqlite *q, sqlite3_stmt *st, int64_t id, hs_qstore_run *out)
{
    memset(out, 0, sizeof *out);
    out->id = id;
    out->uuid = col_text(st, 1);
    out->program = col_text(st, 2);
    out->argv_json = col_text(st, 3);
    out->host = col_text(st, 4);
    out->pid = col_i64(st, 5);
    out->ppid = col_i64(st, 6);
    out->has_parent = sqlite3_column_type(st, 7) != SQLITE_NULL;
    out->parent_id = col_i64(st, 7);
    out->start_unix_ns = col_i64(st, 8);
    out->end_ns = sqlite3_column_type(st, 9) == SQLITE_NULL ? 0 : col_i64(st, 9);
    out->state = col_text(st, 10);
    out->clean_exit = sqlite3_column_type(st, 11) == SQLITE_NULL ? -1 : col_i64(st, 11) != 0;
    out->peak_bytes = col_i64(st, 12);
    out->peak_count = col_i64(st, 13);
    out->peak_t_ns = col_i64(st, 14);
    out->live_bytes = col_i64(st, 15);
    out->live_count = col_i64(st, 16);
    out->total_alloc_bytes = col_i64(st, 17);
    out->alloc_events = col_i64(st, 18);
    out->free_events = col_i64(st, 19);
    out->granularity_ns = col_i64(st, 20);
    out->sample_bytes = col_i64(st, 21);
    out->dropped_alloc_events = col_i64(st, 22);
    out->dropped_free_events = col_i64(st, 23);
    out->dropped_alloc_bytes = col_i64(st, 24);
    out->dropped_free_bytes = col_i64(st, 25);
    out->stacks_truncated = col_i64(st, 26);
    out->unwind_failed = col_i64(st, 27);
    out->live_set_full = col_i64(st, 28);
    out->keyframe_every = col_i64(st, 29);
    out->total_alloc_count = col_i64(st, 30);
    out->max_depth = col_i64(st, 31);
    out->last_bucket = sqlite3_column_type(st, 32) == SQLITE_NULL ? -1 : col_i64(st, 32);
    out->collector_version = col_text(st, 33);
    out->has_bye_alloc = sqlite3_column_type(st, 34) != SQLITE_NULL;
    out->bye_alloc_events = col_i64(st, 34);
    out->has_bye_free = sqlite3_column_type(st, 35) != SQLITE_NULL;
    out->bye_free_events = col_i64(st, 35);
    out->main_end_ns = run_column(q, id, 5, "main_end_ns");
    out->python_fallback = run_column(q, id, 4, "python_fallback");
    out->python_small_unseen = run_column(q, id, 5, "python_small_unseen");
}

/* The run's exact totals (schema 8: run_exact) into out->exact, when its
 * collector sent them. */
static int run_exact(hs__sqlite *q, hs_qstore_run *out, hs_qerr *err)
{
    if (q->schema < 8) return 0;
    sqlite3_stmt *st = hs__sqlite_stmt(q, ST_EXACT_RUN, err);
    if (!st) return HS_EDB;
    sqlite3_bind_int64(st, 1, out->id);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        int64_t f = col_i64(st, 0);
        out->exact = (hs_qstore_exact){.has = 1,
                                       .in_figures = (f & 256) != 0,
                                       .usable_call = (f & 1) != 0,
                                       .allocs = col_i64(st, 1),
                                       .frees = col_i64(st, 2),
                                       .alloc_bytes = col_i64(st, 3),
                                       .free_bytes = col_i64(st, 4),
                                       .error_bytes = col_i64(st, 5),
                                       .est_peak_bytes = col_i64(st, 6),
                                       .est_peak_t_ns = col_i64(st, 7)};
    }
    sqlite3_reset(st);
    return rc == SQLITE_ROW || rc == SQLITE_DONE ? 0 : hs__sqlite_err(q, err);
}

static int sqlite_run(hs_qstore *s, int64_t id, hs_qstore_run *out, hs_qerr *err)
{
    hs__sqlite *q = (hs__sqlite *)s;
    sqlite3_stmt *st = hs__sqlite_stmt(q, ST_RUN, err);
    if (!st) return HS_EDB;
    sqlite3_bind_int64(st, 1, id);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_DONE) return hs__err(err, HS_ENOENT, "no run with id %" PRId64, id);
    if (rc != SQLITE_ROW) return hs__sqlite_err(q, err);
    run_row(q, st, id, out);
    snprintf(q->uuid, sizeof q->uuid, "%s", out->uuid);
    for (char *c = q->uuid; *c; c++)
        if (*c >= 'A' && *c <= 'F') *c = (char)(*c - 'A' + 'a');
    out->uuid = q->uuid;
    return run_exact(q, out, err);
}

static int sqlite_run_labels(hs_qstore *s, int64_t id,
                             int (*cb)(const char *key, const char *value, void *data), void *data,
                             hs_qerr *err)
{
    hs__sqlite *q = (hs__sqlite *)s;
    sqlite3_stmt *st = hs__sqlite_stmt(q, ST_LABELS, err);
    if (!st) return HS_EDB;
    sqlite3_bind_int64(st, 1, id);
    int rc, crc = 0;
    while (!crc && (rc = sqlite3_step(st)) == SQLITE_ROW)
        crc = cb(col_text(st, 0), col_text(st, 1), data);
    if (crc) {
        sqlite3_reset(st);
        return crc;
    }
    if (rc != SQLITE_DONE) return hs__sqlite_err(q, err);
    sqlite3_reset(st);
    return 0;
}

/* The ids of runs matching every key=value, newest first. */
static int sqlite_runs_find(hs_qstore *s, const hs_qstore_filter *f, int n, int64_t limit,
                            int64_t **ids, size_t *nids, hs_qerr *err)
{
    hs__sqlite *q = (hs__sqlite *)s;
    hs_buf b = {0};
    hs_buf_printf(&b, "SELECT r.id FROM runs r WHERE 1");
    for (int i = 0; i < n; i++) hs__sqlite_where_kv(&b, f[i].key, f[i].value);
    hs_buf_printf(&b, " ORDER BY r.start_unix_ns DESC, r.id DESC LIMIT ?");
    *ids = NULL;
    *nids = 0;
    if (b.oom) return hs__err(err, HS_ENOMEM, "out of memory");
    sqlite3_stmt *st = NULL;
    int rc = HS_EDB;
    if (sqlite3_prepare_v2(q->db, b.p, -1, &st, NULL) != SQLITE_OK) {
        hs__sqlite_err(q, err);
        goto out;
    }
    int bi = 1;
    for (int i = 0; i < n; i++) bi = hs__sqlite_bind_kv(st, bi, f[i].key, f[i].value);
    sqlite3_bind_int64(st, bi, limit);
    size_t cap = 0;
    int sr;
    while ((sr = sqlite3_step(st)) == SQLITE_ROW) {
        if (*nids == cap) {
            cap = cap ? cap * 2 : 16;
            int64_t *np = realloc(*ids, cap * sizeof *np);
            if (!np) {
                rc = hs__err(err, HS_ENOMEM, "out of memory");
                goto out;
            }
            *ids = np;
        }
        (*ids)[(*nids)++] = sqlite3_column_int64(st, 0);
    }
    if (sr != SQLITE_DONE) {
        hs__sqlite_err(q, err);
        goto out;
    }
    rc = 0;
out:
    if (rc) {
        free(*ids);
        *ids = NULL;
        *nids = 0;
    }
    sqlite3_finalize(st);
    free(b.p);
    return rc;
}

static int sqlite_runs_by_uuid(hs_qstore *s, const char *hex, int64_t *id, int *matches,
                               hs_qerr *err)
{
    hs__sqlite *q = (hs__sqlite *)s;
    sqlite3_stmt *st = NULL;
    char up[40];
    size_t n = strlen(hex);
    for (size_t i = 0; i <= n; i++)
        up[i] = (char)(hex[i] >= 'a' && hex[i] <= 'f' ? hex[i] - 32 : hex[i]);
    if (sqlite3_prepare_v2(q->db,
                           "SELECT id FROM runs WHERE substr(hex(uuid), 1, length(?1)) = ?1 "
                           "LIMIT 2",
                           -1, &st, NULL) != SQLITE_OK)
        return hs__sqlite_err(q, err);
    sqlite3_bind_text(st, 1, up, -1, SQLITE_TRANSIENT);
    int found = 0, rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        *id = sqlite3_column_int64(st, 0);
        found++;
    }
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE) return hs__sqlite_err(q, err);
    *matches = found;
    return 0;
}

/* ---- a moment's state ------------------------------------------------------ */

static int acc_rows(hs__sqlite *q, sqlite3_stmt *st, hs__state_acc *a, hs_qerr *err)
{
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW)
        if (hs__acc_add(a, sqlite3_column_int64(st, 0), sqlite3_column_int64(st, 1),
                        sqlite3_column_int64(st, 2)))
            return hs__err(err, HS_ENOMEM, "out of memory");
    if (rc != SQLITE_DONE) return hs__sqlite_err(q, err);
    sqlite3_reset(st);
    return 0;
}

/* Whether q's database stores its data as has (one of schema/'s tests)
 * says, asked once: *known 1 yes, -1 no, 0 not asked yet. 1, 0, or HS_EDB
 * told in err. */
static int stored_so(hs__sqlite *q, int *known, int (*has)(sqlite3 *db), hs_qerr *err)
{
    if (!*known) {
        int h = has(q->db);
        if (h < 0) return hs__sqlite_err(q, err);
        *known = h ? 1 : -1;
    }
    return *known > 0;
}

/* An error of a reader of stored blocks, told in err: corrupt says "run
 * RUN's <corrupt>". */
static int blocks_err(hs__sqlite *q, int rc, int64_t run, const char *corrupt, hs_qerr *err)
{
    if (rc == HS_EDB) return hs__sqlite_err(q, err);
    if (rc == HS_ECORRUPT) return hs__err(err, rc, "run %" PRId64 "'s %s", run, corrupt);
    return hs__err(err, rc, "out of memory");
}

/* q's reader of snapshot blocks into *rd; NULL when its database has the
 * snapshots table (an older schema, read through the statements). */
static int snaps_rd(hs__sqlite *q, hs_snaps_rd **rd, hs_qerr *err)
{
    *rd = NULL;
    int blocks = stored_so(q, &q->snaps, hs_snaps_in_blocks, err);
    if (blocks <= 0) return blocks;
    if (!q->snaps_rd && hs_snaps_rd_open(q->db, &q->snaps_rd)) return hs__sqlite_err(q, err);
    *rd = q->snaps_rd;
    return 0;
}

/* A scan of snapshot rows (hs_snaps_rd_scan) for a callback of the store's
 * interface: its return is passed on as it is, the reader's errors are
 * told in err. */
typedef struct snaps_scan {
    int (*cb)(int64_t bucket, const hs_snap_row *row, void *data);
    void *data;
    int cb_rc;
} snaps_scan;

static int snaps_scan_cb(int64_t bucket, const hs_snap_row *row, void *data)
{
    snaps_scan *x = data;
    return x->cb_rc = x->cb(bucket, row, x->data);
}

static int snaps_scan_run(hs__sqlite *q, hs_snaps_rd *rd, int64_t run, int kind, int64_t lo,
                          int64_t hi, int64_t trace,
                          int (*cb)(int64_t bucket, const hs_snap_row *row, void *data), void *data,
                          hs_qerr *err)
{
    snaps_scan x = {cb, data, 0};
    int rc = hs_snaps_rd_scan(rd, run, kind, lo, hi, trace, snaps_scan_cb, &x);
    return !rc || rc == x.cb_rc ? rc : blocks_err(q, rc, run, "snapshot rows are corrupt", err);
}

static int acc_snap(int64_t bucket, const hs_snap_row *row, void *data)
{
    (void)bucket;
    return hs__acc_add(data, row->trace, row->bytes, row->count) ? HS_ENOMEM : 0;
}

/* The rows of (run, kind) in buckets lo..hi into a. */
static int acc_blocks(hs__sqlite *q, hs_snaps_rd *rd, int64_t run, int kind, int64_t lo, int64_t hi,
                      hs__state_acc *a, hs_qerr *err)
{
    int rc = snaps_scan_run(q, rd, run, kind, lo, hi, -1, acc_snap, a, err);
    return rc == HS_ENOMEM ? hs__err(err, rc, "out of memory") : rc;
}

/* The run's map of kind (schema/hs_maps.h), by key, into *e (malloc'd). */
static int run_map(hs__sqlite *q, int64_t run, int kind, hs_maps_entry **e, size_t *n, hs_qerr *err)
{
    int rc = stored_so(q, &q->maps, hs_maps_in_chunks, err);
    if (rc < 0) return rc;
    if (!rc) { /* before schema 13: the table, read once a question */
        rc = hs_maps_read(q->db, run, kind, e, n);
    } else {
        sqlite3_stmt *st = hs__sqlite_stmt(q, ST_RUN_MAP, err);
        if (!st) return HS_EDB;
        sqlite3_bind_int64(st, 1, run);
        sqlite3_bind_int(st, 2, kind);
        rc = hs_maps_read_chunks(st, e, n);
        sqlite3_reset(st);
    }
    return rc ? blocks_err(q, rc, run, "id map is corrupt", err) : 0;
}

/* The run's stack ids -> traces. */
static int run_stacks(hs__sqlite *q, int64_t run, hs__map *stacks, hs_qerr *err)
{
    hs_maps_entry *e;
    size_t n;
    int rc = run_map(q, run, HS_MAPS_STACKS, &e, &n, err);
    for (size_t i = 0; !rc && i < n; i++)
        if (hs__map_put(stacks, (uint64_t)e[i].key, (uint64_t)e[i].value))
            rc = hs__err(err, HS_ENOMEM, "out of memory");
    free(e);
    return rc;
}

/* The events of [from, upto] read from st's blobs, with the stacks of the
 * run as traces. */
static int events_walk(hs__sqlite *q, sqlite3_stmt *st, int64_t run, int64_t from, int64_t upto,
                       int (*cb)(const hs_qstore_event *e, void *data), void *data, hs_qerr *err)
{
    hs__map stacks = {0};
    hs_evdec dec = {0};
    int rc = run_stacks(q, run, &stacks, err), s = SQLITE_DONE, more = 0;
    if (rc) goto out;
    int schema = hs_schema_db_version(q->db);
    while (!rc && (s = sqlite3_step(st)) == SQLITE_ROW) {
        hs_event e;
        const uint8_t *blob = sqlite3_column_blob(st, 0);
        if ((more = hs_evdec_open_row(&dec, schema, blob, (size_t)sqlite3_column_bytes(st, 0))))
            goto corrupt;
        while (!rc && (more = hs_evdec_next(&dec, &e)) == 1) {
            if ((int64_t)e.t_ns < from || (int64_t)e.t_ns > upto) continue;
            uint64_t trace;
            if (!hs__map_get(&stacks, e.stack_id, &trace)) continue;
            hs_qstore_event ev = {.t_ns = (int64_t)e.t_ns,
                                  .trace = (int64_t)trace,
                                  .size = e.size,
                                  .weight = e.weight,
                                  .is_free = e.is_free};
            rc = cb(&ev, data);
        }
        if (!rc && more) goto corrupt;
    }
    if (!rc && s != SQLITE_DONE) rc = hs__sqlite_err(q, err);
    goto out;
corrupt:
    rc = hs__err(err, HS_EDB, "the stored events of run %" PRId64 " cannot be read: %s", run,
                 hs_strerror(more));
out:
    hs_evdec_free(&dec);
    hs__map_free(&stacks);
    return rc;
}

static int sqlite_events(hs_qstore *s, int64_t run, int64_t from_ns, int64_t upto_ns,
                         int (*cb)(const hs_qstore_event *e, void *data), void *data, hs_qerr *err)
{
    hs__sqlite *q = (hs__sqlite *)s;
    sqlite3_stmt *st = NULL;
    int rc;
    /* the rows that reach into the span (a run has few: segments), so that
     * the cost is that of the span's events; with an open run's segment in
     * events_tail from schema 10 on */
    char sql[160];
    snprintf(sql, sizeof sql,
             "SELECT data FROM %s WHERE run = ?1 AND t_last_ns >= ?2 AND t_first_ns <= ?3 "
             "ORDER BY seq",
             hs_evcodec_events_table(hs_schema_db_version(q->db)));
    if (sqlite3_prepare_v2(q->db, sql, -1, &st, NULL) != SQLITE_OK) return hs__sqlite_err(q, err);
    sqlite3_bind_int64(st, 1, run);
    sqlite3_bind_int64(st, 2, from_ns);
    sqlite3_bind_int64(st, 3, upto_ns);
    rc = events_walk(q, st, run, from_ns, upto_ns, cb, data, err);
    sqlite3_finalize(st);
    return rc;
}

static int step_int64(hs__sqlite *q, sqlite3_stmt *st, int64_t *out, int *null, hs_qerr *err)
{
    int rc = sqlite3_step(st);
    if (rc != SQLITE_ROW) return hs__sqlite_err(q, err);
    *null = sqlite3_column_type(st, 0) == SQLITE_NULL;
    *out = sqlite3_column_int64(st, 0);
    sqlite3_reset(st);
    return 0;
}

/* The peak's snapshot into a; *found 0 when the run has none. */
static int state_peak(hs__sqlite *q, int64_t run, hs__state_acc *a, int *found, hs_qerr *err)
{
    sqlite3_stmt *st;
    int rc, null = 1;
    int64_t v = 0;
    *found = 0;
    hs_snaps_rd *rd;
    if ((rc = snaps_rd(q, &rd, err))) return rc;
    if (rd) {
        if ((rc = hs_snaps_rd_last(rd, run, HS_SNAP_PEAK, INT64_MAX, &v)) <= 0)
            return rc ? hs__sqlite_err(q, err) : 0;
        *found = 1;
        return acc_blocks(q, rd, run, HS_SNAP_PEAK, v, v, a, err);
    }
    if (!(st = hs__sqlite_stmt(q, ST_PEAK_BUCKET, err))) return HS_EDB;
    sqlite3_bind_int64(st, 1, run);
    if ((rc = step_int64(q, st, &v, &null, err)) || null) return rc;
    if (!(st = hs__sqlite_stmt(q, ST_PEAK_ROWS, err))) return HS_EDB;
    sqlite3_bind_int64(st, 1, run);
    sqlite3_bind_int64(st, 2, v);
    *found = 1;
    return acc_rows(q, st, a, err);
}

/* The nearest keyframe at or before m->bucket plus the delta rows since. */
static int state_bucket(hs__sqlite *q, const hs_qstore_moment *m, hs__state_acc *a, hs_qerr *err)
{
    sqlite3_stmt *st;
    int rc, null = 1;
    int64_t v = 0;
    hs_snaps_rd *rd;
    if ((rc = snaps_rd(q, &rd, err))) return rc;
    if (rd) {
        int64_t kb = -1;
        if ((rc = hs_snaps_rd_last(rd, m->run, HS_SNAP_KEYFRAME, m->bucket, &kb)) < 0)
            return hs__sqlite_err(q, err);
        if (!rc) kb = -1;
        if (kb >= 0 && (rc = acc_blocks(q, rd, m->run, HS_SNAP_KEYFRAME, kb, kb, a, err)))
            return rc;
        return acc_blocks(q, rd, m->run, HS_SNAP_DELTA, kb + 1, m->bucket, a, err);
    }
    if (!(st = hs__sqlite_stmt(q, ST_KEYFRAME, err))) return HS_EDB;
    sqlite3_bind_int64(st, 1, m->run);
    sqlite3_bind_int64(st, 2, m->bucket);
    if ((rc = step_int64(q, st, &v, &null, err))) return rc;
    int64_t kb = null ? -1 : v;
    if (kb >= 0) {
        if (!(st = hs__sqlite_stmt(q, ST_KF_ROWS, err))) return HS_EDB;
        sqlite3_bind_int64(st, 1, m->run);
        sqlite3_bind_int64(st, 2, kb);
        if ((rc = acc_rows(q, st, a, err))) return rc;
    }
    if (!(st = hs__sqlite_stmt(q, ST_DELTA_ROWS, err))) return HS_EDB;
    sqlite3_bind_int64(st, 1, m->run);
    sqlite3_bind_int64(st, 2, kb);
    sqlite3_bind_int64(st, 3, m->bucket);
    return acc_rows(q, st, a, err);
}

static int sqlite_state(hs_qstore *s, const hs_qstore_moment *m, hs_qstore_live **rows, size_t *n,
                        hs_qerr *err)
{
    hs__sqlite *q = (hs__sqlite *)s;
    hs__state_acc a = {0};
    int rc = 0, found = 0;
    if (m->peak && (rc = state_peak(q, m->run, &a, &found, err))) goto out;
    /* no peak snapshot (an empty run): the state at the peak's bucket */
    if (!found && (rc = state_bucket(q, m, &a, err))) goto out;
    if (!found && m->exact)
        rc = hs__acc_events(&q->base, m->run, (m->bucket + 1) * m->granularity_ns, m->at_ns, &a,
                            err);
out:
    return hs__acc_finish(&a, rc, rows, n);
}

/* ---- per-trace summaries ---------------------------------------------------- */

static hs_qstore_tsum *tsum_get(hs_qstore_tsums *t, hs__map *idx, int64_t trace)
{
    uint64_t i;
    if (hs__map_get(idx, (uint64_t)trace, &i)) return &t->rows[i];
    if (t->n == t->cap) {
        size_t ncap = t->cap ? t->cap * 2 : 256;
        hs_qstore_tsum *np = realloc(t->rows, ncap * sizeof *np);
        if (!np) return NULL;
        t->rows = np;
        t->cap = ncap;
    }
    if (hs__map_put(idx, (uint64_t)trace, t->n)) return NULL;
    hs_qstore_tsum *r = &t->rows[t->n++];
    memset(r, 0, sizeof *r);
    r->trace = trace;
    return r;
}

static int cmp_tsum_first(const void *a, const void *b)
{
    const hs_qstore_tsum *x = a, *y = b;
    if (x->s.first != y->s.first) return x->s.first < y->s.first ? -1 : 1;
    return (x->trace > y->trace) - (x->trace < y->trace);
}

/* The bucket the stored summaries of run reach (-1: none, or past upto). */
static int tsums_mark(hs__sqlite *q, int64_t run, int64_t upto, int64_t *mark, hs_qerr *err)
{
    *mark = -1;
    if (q->schema < 2) return 0;
    sqlite3_stmt *st = hs__sqlite_stmt(q, ST_TSTATS_MARK, err);
    if (!st) return HS_EDB;
    sqlite3_bind_int64(st, 1, run);
    int s = sqlite3_step(st);
    if (s != SQLITE_ROW && s != SQLITE_DONE) {
        sqlite3_reset(st);
        return hs__sqlite_err(q, err);
    }
    int null = s != SQLITE_ROW || sqlite3_column_type(st, 0) == SQLITE_NULL;
    if (!null) *mark = sqlite3_column_int64(st, 0);
    sqlite3_reset(st);
    /* Summaries that reach past upto cannot be cut back: sum the rows. */
    if (null || *mark > upto) *mark = -1;
    return 0;
}

/* A delta row into the summaries (the rows after the summaries' mark). */
typedef struct tsum_add {
    hs_qstore_tsums *out;
    hs__map *idx;
} tsum_add;

static int tsum_row(int64_t bucket, const hs_snap_row *row, void *data)
{
    tsum_add *x = data;
    hs_qstore_tsum *r = tsum_get(x->out, x->idx, row->trace);
    if (!r) return HS_ENOMEM;
    hs_tstats_add(&r->s, bucket, row->bytes);
    x->out->delta_rows++;
    return 0;
}

static int tsums_read(hs__sqlite *q, int64_t run, int64_t mark, int64_t upto, hs_qstore_tsums *out,
                      hs__map *idx, hs_qerr *err)
{
    sqlite3_stmt *st;
    int s;
    if (mark >= 0) {
        if (!(st = hs__sqlite_stmt(q, ST_TSTATS_ROWS, err))) return HS_EDB;
        sqlite3_bind_int64(st, 1, run);
        while ((s = sqlite3_step(st)) == SQLITE_ROW) {
            hs_qstore_tsum *r = tsum_get(out, idx, sqlite3_column_int64(st, 0));
            if (!r) goto oom;
            hs_tstats_read(st, 1, &r->s);
            out->delta_rows += r->s.rows;
        }
        sqlite3_reset(st);
        if (s != SQLITE_DONE) return hs__sqlite_err(q, err);
    }
    hs_snaps_rd *rd;
    if ((s = snaps_rd(q, &rd, err))) return s;
    if (rd) {
        tsum_add x = {out, idx};
        s = snaps_scan_run(q, rd, run, HS_SNAP_DELTA, mark + 1, upto, -1, tsum_row, &x, err);
        return s == HS_ENOMEM ? hs__err(err, s, "out of memory") : s;
    }
    if (!(st = hs__sqlite_stmt(q, ST_DELTAS_AFTER, err))) return HS_EDB;
    sqlite3_bind_int64(st, 1, run);
    sqlite3_bind_int64(st, 2, mark);
    while ((s = sqlite3_step(st)) == SQLITE_ROW) {
        int64_t b = sqlite3_column_int64(st, 0);
        if (b > upto) break;
        hs_qstore_tsum *r = tsum_get(out, idx, sqlite3_column_int64(st, 1));
        if (!r) goto oom;
        hs_tstats_add(&r->s, b, sqlite3_column_int64(st, 2));
        out->delta_rows++;
    }
    sqlite3_reset(st);
    if (s != SQLITE_DONE && s != SQLITE_ROW) return hs__sqlite_err(q, err);
    return 0;
oom:
    sqlite3_reset(st);
    return hs__err(err, HS_ENOMEM, "out of memory");
}

static int sqlite_trace_sums(hs_qstore *s, int64_t run, int64_t upto, hs_qstore_tsums *out,
                             hs_qerr *err)
{
    hs__sqlite *q = (hs__sqlite *)s;
    memset(out, 0, sizeof *out);
    hs__map idx = {0};
    int64_t mark;
    int rc;
    /* One read transaction: the writer rewrites summaries and the mark of a
     * live run together, and they must be read as of one commit (the
     * summaries of one with the mark of another would count some delta
     * rows twice or never). */
    int own_tx = sqlite3_get_autocommit(q->db);
    if (own_tx && sqlite3_exec(q->db, "BEGIN", NULL, NULL, NULL) != SQLITE_OK)
        return hs__sqlite_err(q, err);
    if (!(rc = tsums_mark(q, run, upto, &mark, err)) &&
        !(rc = tsums_read(q, run, mark, upto, out, &idx, err)))
        hs__sort(out->rows, out->n, sizeof *out->rows, cmp_tsum_first);
    hs__map_free(&idx);
    if (own_tx) sqlite3_exec(q->db, "COMMIT", NULL, NULL, NULL);
    if (rc) {
        free(out->rows);
        memset(out, 0, sizeof *out);
    }
    return rc;
}

/* ---- series ------------------------------------------------------------------ */

/* Steps st to its end, calling row for each; stops at row's non-zero
 * return. The statement is reset. */
#define WALK_ROWS(q, st, err, row_expr)                                                            \
    do {                                                                                           \
        int s_, crc_ = 0;                                                                          \
        while (!crc_ && (s_ = sqlite3_step(st)) == SQLITE_ROW) crc_ = (row_expr);                  \
        sqlite3_reset(st);                                                                         \
        if (crc_) return crc_;                                                                     \
        return s_ == SQLITE_DONE ? 0 : hs__sqlite_err(q, err);                                     \
    } while (0)

static int sqlite_heap_series(hs_qstore *s, int64_t run,
                              int (*cb)(const hs_qstore_heap *h, void *data), void *data,
                              hs_qerr *err)
{
    hs__sqlite *q = (hs__sqlite *)s;
    /* a run whose exact totals are its figures: the exact series */
    hs_qstore_run r = {.id = run};
    int rc = run_exact(q, &r, err);
    if (rc) return rc;
    sqlite3_stmt *st = hs__sqlite_stmt(q, r.exact.in_figures ? ST_EXACT_SERIES : ST_SERIES, err);
    if (!st) return HS_EDB;
    sqlite3_bind_int64(st, 1, run);
    WALK_ROWS(q, st, err,
              cb(&(hs_qstore_heap){col_i64(st, 0), col_i64(st, 1), col_i64(st, 2), col_i64(st, 3)},
                 data));
}

/* A delta row to a callback of the store's interface: every trace's, or
 * one trace's. */
typedef struct delta_cb {
    int (*all)(int64_t bucket, int64_t trace, int64_t bytes, void *data);
    int (*one)(int64_t bucket, int64_t bytes, void *data);
    void *data;
} delta_cb;

static int delta_row(int64_t bucket, const hs_snap_row *row, void *data)
{
    delta_cb *x = data;
    return x->all ? x->all(bucket, row->trace, row->bytes, x->data)
                  : x->one(bucket, row->bytes, x->data);
}

static int sqlite_deltas(hs_qstore *s, int64_t run, int64_t after_bucket,
                         int (*cb)(int64_t bucket, int64_t trace, int64_t bytes, void *data),
                         void *data, hs_qerr *err)
{
    hs__sqlite *q = (hs__sqlite *)s;
    hs_snaps_rd *rd;
    int rc = snaps_rd(q, &rd, err);
    if (rc) return rc;
    if (rd) {
        delta_cb x = {.all = cb, .data = data};
        return snaps_scan_run(q, rd, run, HS_SNAP_DELTA, after_bucket + 1, INT64_MAX, -1, delta_row,
                              &x, err);
    }
    sqlite3_stmt *st = hs__sqlite_stmt(q, ST_DELTAS_AFTER, err);
    if (!st) return HS_EDB;
    sqlite3_bind_int64(st, 1, run);
    sqlite3_bind_int64(st, 2, after_bucket);
    WALK_ROWS(q, st, err, cb(col_i64(st, 0), col_i64(st, 1), col_i64(st, 2), data));
}

/* One trace's deltas in windows that snapshot_series lacks: from the
 * blocks of each bucket. */
typedef struct trace_rest {
    hs__sqlite *q;
    hs_snaps_rd *rd;
    int64_t run, trace;
    delta_cb x;
    hs_qerr *err;
    int rc; /* the callback's or the error's own return */
} trace_rest;

static int trace_rest_scan(int64_t lo, int64_t hi, void *data)
{
    trace_rest *t = data;
    return t->rc = snaps_scan_run(t->q, t->rd, t->run, HS_SNAP_DELTA, lo, hi, t->trace, delta_row,
                                  &t->x, t->err);
}

static int trace_rest_row(int64_t bucket, int64_t bytes, void *data)
{
    trace_rest *t = data;
    return t->rc = t->x.one(bucket, bytes, t->x.data);
}

/* A trace's rows over at most this many buckets are read bucket by bucket. */
#define SERIES_MIN_SPAN (HS_SERIES_WINDOW / 8)

/* q's reader of snapshot_series into *rd; NULL when the database has
 * none (older than schema 16). */
static int series_rd(hs__sqlite *q, hs_series_rd **rd, hs_qerr *err)
{
    *rd = NULL;
    int has = stored_so(q, &q->series, hs_series_in_db, err);
    if (has <= 0) return has;
    if (!q->series_rd && hs_series_rd_open(q->db, &q->series_rd)) return hs__sqlite_err(q, err);
    *rd = q->series_rd;
    return 0;
}

static int sqlite_trace_deltas(hs_qstore *s, int64_t run, int64_t trace, int64_t first,
                               int64_t last, int (*cb)(int64_t bucket, int64_t bytes, void *data),
                               void *data, hs_qerr *err)
{
    hs__sqlite *q = (hs__sqlite *)s;
    hs_snaps_rd *rd;
    hs_series_rd *sr = NULL;
    int rc = snaps_rd(q, &rd, err);
    /* over a few buckets, a block a bucket costs no more than a window's
     * block (and is often kept from the question before) */
    if (!rc && rd && last - first + 1 > SERIES_MIN_SPAN) rc = series_rd(q, &sr, err);
    if (rc) return rc;
    if (sr) { /* by window where stored, else by bucket */
        trace_rest t = {q, rd, run, trace, {.one = cb, .data = data}, err, 0};
        rc = hs_series_rd_trace(sr, run, trace, first, last, trace_rest_row, trace_rest_scan, &t);
        return !rc || rc == t.rc ? rc
                                 : blocks_err(q, rc, run, "delta rows by trace are corrupt", err);
    }
    if (rd) {
        delta_cb x = {.one = cb, .data = data};
        return snaps_scan_run(q, rd, run, HS_SNAP_DELTA, first, last, trace, delta_row, &x, err);
    }
    sqlite3_stmt *st = hs__sqlite_stmt(q, ST_TRACE_DELTAS, err);
    if (!st) return HS_EDB;
    sqlite3_bind_int64(st, 1, run);
    sqlite3_bind_int64(st, 2, first);
    sqlite3_bind_int64(st, 3, last);
    sqlite3_bind_int64(st, 4, trace);
    WALK_ROWS(q, st, err, cb(col_i64(st, 0), col_i64(st, 1), data));
}

static int sqlite_rss(hs_qstore *s, int64_t run,
                      int (*cb)(int64_t t_ns, int64_t rss_bytes, int64_t vsize_bytes, void *data),
                      void *data, hs_qerr *err)
{
    hs__sqlite *q = (hs__sqlite *)s;
    sqlite3_stmt *st = hs__sqlite_stmt(q, ST_RSS, err);
    if (!st) return HS_EDB;
    sqlite3_bind_int64(st, 1, run);
    WALK_ROWS(q, st, err, cb(col_i64(st, 0), col_i64(st, 1), col_i64(st, 2), data));
}

static int sqlite_rss_at(hs_qstore *s, int64_t run, int64_t t_ns, int64_t *rss, hs_qerr *err)
{
    hs__sqlite *q = (hs__sqlite *)s;
    sqlite3_stmt *rs = hs__sqlite_stmt(q, ST_RSS_AT, err);
    if (!rs) return HS_EDB;
    sqlite3_bind_int64(rs, 1, run);
    sqlite3_bind_int64(rs, 2, t_ns);
    *rss = sqlite3_step(rs) == SQLITE_ROW ? sqlite3_column_int64(rs, 0) : 0;
    sqlite3_reset(rs);
    return 0;
}

static int sqlite_sizes(hs_qstore *s, int64_t run,
                        int (*cb)(int64_t bucket, int64_t allocs, int64_t bytes, void *data),
                        void *data, hs_qerr *err)
{
    hs__sqlite *q = (hs__sqlite *)s;
    sqlite3_stmt *st = hs__sqlite_stmt(q, ST_SIZES, err);
    if (!st) return HS_EDB;
    sqlite3_bind_int64(st, 1, run);
    WALK_ROWS(q, st, err, cb(col_i64(st, 0), col_i64(st, 1), col_i64(st, 2), data));
}

/* ---- stacks ------------------------------------------------------------------- */

static int sqlite_node(hs_qstore *s, int64_t id, hs_qstore_node *out, hs_qerr *err)
{
    hs__sqlite *q = (hs__sqlite *)s;
    hs_tree_node x;
    int rc = q->tree ? 0 : hs_tree_rd_open(q->db, &q->tree);
    if (!rc) rc = hs_tree_rd_node(q->tree, id, &x);
    if (rc == 0) return hs__err(err, HS_EDB, "trace node %" PRId64 " is missing", id);
    if (rc == HS_EDB) return hs__sqlite_err(q, err);
    if (rc < 0) return hs__err(err, rc, "trace node %" PRId64 ": %s", id, hs_strerror(rc));
    *out = (hs_qstore_node){x.parent, x.frame, (int)x.depth};
    return 0;
}

/* The strings are the row's own: the statement stays on its row until the
 * next frame is asked for (or the store goes idle), which costs nothing
 * more, since the request's run record holds its read transaction anyway. */
static int sqlite_frame(hs_qstore *s, int64_t id, hs_qstore_frame *out, hs_qerr *err)
{
    hs__sqlite *q = (hs__sqlite *)s;
    *out = (hs_qstore_frame){.function = "", .file = "", .module = ""};
    sqlite3_stmt *st = hs__sqlite_stmt(q, ST_FRAME, err);
    if (!st) return HS_EDB;
    sqlite3_bind_int64(st, 1, id);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_DONE) return 0;
    if (rc != SQLITE_ROW) return hs__sqlite_err(q, err);
    out->function = col_text(st, 0);
    out->file = col_text(st, 1);
    out->line = sqlite3_column_int64(st, 2);
    out->module = col_text(st, 3);
    out->module_offset = sqlite3_column_int64(st, 4);
    return 0;
}

/* ---- mappings and addresses (pprof) ---------------------------------------- */

static int sqlite_mappings(hs_qstore *s, int64_t run,
                           int (*cb)(const hs_qstore_mapping *m, void *data), void *data,
                           hs_qerr *err)
{
    hs__sqlite *q = (hs__sqlite *)s;
    sqlite3_stmt *st = hs__sqlite_stmt(q, ST_MAPPINGS, err);
    if (!st) return HS_EDB;
    sqlite3_bind_int64(st, 1, run);
    WALK_ROWS(q, st, err,
              cb(&(hs_qstore_mapping){(uint64_t)col_i64(st, 0), (uint64_t)col_i64(st, 1),
                                      (uint64_t)col_i64(st, 2), sqlite3_column_blob(st, 3),
                                      (size_t)sqlite3_column_bytes(st, 3), col_text(st, 4)},
                 data));
}

static int sqlite_pcs(hs_qstore *s, int64_t run, int (*cb)(uint64_t pc, int64_t frame, void *data),
                      void *data, hs_qerr *err)
{
    hs__sqlite *q = (hs__sqlite *)s;
    hs_maps_entry *e;
    size_t n;
    int rc = run_map(q, run, HS_MAPS_PCS, &e, &n, err);
    for (size_t i = 0; !rc && i < n; i++) rc = cb((uint64_t)e[i].key, e[i].value, data);
    free(e);
    return rc;
}

static const hs_qstore_ops sqlite_ops = {
    .name = "sqlite",
    .free = sqlite_free,
    .idle = sqlite_idle,
    .read_only = sqlite_read_only,
    .runs_find = sqlite_runs_find,
    .runs_by_uuid = sqlite_runs_by_uuid,
    .run = sqlite_run,
    .run_labels = sqlite_run_labels,
    .state = sqlite_state,
    .trace_sums = sqlite_trace_sums,
    .heap_series = sqlite_heap_series,
    .deltas = sqlite_deltas,
    .trace_deltas = sqlite_trace_deltas,
    .rss = sqlite_rss,
    .rss_at = sqlite_rss_at,
    .sizes = sqlite_sizes,
    .node = sqlite_node,
    .frame = sqlite_frame,
    .events = sqlite_events,
    .mappings = sqlite_mappings,
    .pcs = sqlite_pcs,
    .sql = sqlite_sql,
    .runs_summary = hs__sqlite_runs_summary,
};
