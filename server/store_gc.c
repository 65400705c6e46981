/* store_gc: removes whole runs from the database (hs_store_gc, hs_store.h)
 * and gives the space back.
 *
 * A run is removed with every row that names it: events, snapshots,
 * heap_series, trace_stats, run_labels, run_maps (its pcs and stacks), mappings,
 * process_samples, size_hist, run_exact, heap_exact and its runs row. The
 * stack tree (traces, frames) and symbol_cache are shared by every run of
 * the database and stay: a node no remaining run reaches costs a few dozen
 * bytes, and finding those would mean walking every remaining run's stacks.
 * An open run (state 'open': being written, or in its grace period waiting
 * for its collector) is never selected.
 *
 * Runs go in transactions of GC_CHUNK runs so that a server's ingest waits
 * for no more than one chunk at a time; then VACUUM rewrites the file
 * without the freed pages (the database has no auto_vacuum: free pages
 * would otherwise only be reused by later runs, never returned to the file
 * system), and a TRUNCATE checkpoint empties the WAL VACUUM wrote through.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "hs_error.h"
#include "store_int.h"

#define GC_CHUNK 50

static const char *const gc_tables[] = {
    "events",      "events_tail", "snapshot_blocks", "snapshot_series", "heap_series",
    "trace_stats", "run_labels",  "run_maps",        "mappings",        "process_samples",
    "size_hist",   "run_exact",   "heap_exact",
};

/* The selection's SQL: every criterion given must hold. */
static int gc_sql(sqlite3_str *q, const hs_gc_spec *g)
{
    sqlite3_str_appendf(q, "SELECT r.id, r.program, r.start_unix_ns, hex(r.uuid) FROM runs r "
                           "WHERE r.state <> 'open'");
    if (g->older_than_ns) sqlite3_str_appendf(q, " AND r.start_unix_ns < ?1");
    for (int i = 0; i < g->nfilters; i++) {
        const char *k = g->filters[i].key;
        if (!strcmp(k, "program"))
            sqlite3_str_appendf(q, " AND (r.program = ?%d OR r.program LIKE '%%/' || ?%d)", 10 + i,
                                10 + i);
        else if (!strcmp(k, "host"))
            sqlite3_str_appendf(q, " AND r.host = ?%d", 10 + i);
        else if (!strcmp(k, "id"))
            sqlite3_str_appendf(q, " AND r.id = CAST(?%d AS INTEGER)", 10 + i);
        else
            sqlite3_str_appendf(q,
                                " AND EXISTS (SELECT 1 FROM run_labels l WHERE l.run = r.id AND "
                                "l.key = %Q AND l.value = ?%d)",
                                k, 10 + i);
    }
    if (g->keep >= 0) {
        /* the newest keep runs of each program (or of each value of a
         * label; runs without it are one group) stay */
        const char *part = g->per && strcmp(g->per, "program")
                               ? "(SELECT value FROM run_labels WHERE run = x.id AND key = ?2)"
                               : "x.program";
        sqlite3_str_appendf(q,
                            " AND r.id IN (SELECT id FROM (SELECT x.id, ROW_NUMBER() OVER "
                            "(PARTITION BY %s ORDER BY x.start_unix_ns DESC, x.id DESC) AS rn "
                            "FROM runs x WHERE x.state <> 'open') WHERE rn > ?3)",
                            part);
    }
    sqlite3_str_appendf(q, " ORDER BY r.start_unix_ns, r.id");
    return sqlite3_str_errcode(q) ? HS_ENOMEM : 0;
}

static int64_t db_bytes(hs_store *s)
{
    sqlite3_stmt *st;
    int64_t v = 0;
    if (sqlite3_prepare_v2(s->db,
                           "SELECT page_count * page_size FROM pragma_page_count, pragma_page_size",
                           -1, &st, NULL) != SQLITE_OK)
        return 0;
    if (sqlite3_step(st) == SQLITE_ROW) v = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    return v;
}

/* The selected runs' ids (malloc'd), each reported to cb. */
static int gc_select(hs_store *s, const hs_gc_spec *g, int64_t **ids, size_t *n,
                     void (*cb)(const hs_gc_run *r, void *data), void *data)
{
    sqlite3_str *q = sqlite3_str_new(s->db);
    int rc = gc_sql(q, g);
    char *sql = sqlite3_str_finish(q);
    if (rc || !sql) {
        sqlite3_free(sql);
        return HS_ENOMEM;
    }
    sqlite3_stmt *st;
    rc = sqlite3_prepare_v2(s->db, sql, -1, &st, NULL) == SQLITE_OK ? 0 : HS_EDB;
    sqlite3_free(sql);
    if (rc) return rc;
    sqlite3_bind_int64(st, 1, g->older_than_cutoff_ns);
    if (g->per) sqlite3_bind_text(st, 2, g->per, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(st, 3, g->keep);
    for (int i = 0; i < g->nfilters; i++)
        sqlite3_bind_text(st, 10 + i, g->filters[i].value, -1, SQLITE_TRANSIENT);
    size_t cap = 0;
    int step;
    while ((step = sqlite3_step(st)) == SQLITE_ROW) {
        if (*n == cap) {
            cap = cap ? 2 * cap : 64;
            int64_t *np = realloc(*ids, cap * sizeof *np);
            if (!np) {
                sqlite3_finalize(st);
                return HS_ENOMEM;
            }
            *ids = np;
        }
        hs_gc_run r = {.id = sqlite3_column_int64(st, 0),
                       .program = (const char *)sqlite3_column_text(st, 1),
                       .start_unix_ns = sqlite3_column_int64(st, 2)};
        (*ids)[(*n)++] = r.id;
        if (cb) cb(&r, data);
    }
    sqlite3_finalize(st);
    return step == SQLITE_DONE ? 0 : HS_EDB;
}

/* Deletes the rows of runs ids[0..n) in one transaction. */
static int gc_delete(hs_store *s, const int64_t *ids, size_t n, int64_t *rows)
{
    int rc = hs_store_begin(s);
    for (size_t t = 0; !rc && t <= HS_COUNTOF(gc_tables); t++) {
        char sql[128];
        if (t < HS_COUNTOF(gc_tables))
            snprintf(sql, sizeof sql, "DELETE FROM %s WHERE run = ?1", gc_tables[t]);
        else
            snprintf(sql, sizeof sql, "DELETE FROM runs WHERE id = ?1 AND state <> 'open'");
        sqlite3_stmt *st;
        if (sqlite3_prepare_v2(s->db, sql, -1, &st, NULL) != SQLITE_OK) {
            rc = HS_EDB;
            break;
        }
        for (size_t i = 0; !rc && i < n; i++) {
            sqlite3_bind_int64(st, 1, ids[i]);
            rc = sqlite3_step(st) == SQLITE_DONE ? 0 : HS_EDB;
            *rows += sqlite3_changes(s->db);
            sqlite3_reset(st);
        }
        sqlite3_finalize(st);
    }
    if (!rc) return hs_store_commit(s);
    hs_store_rollback(s);
    return rc;
}

int hs_store_gc(hs_store *s, const hs_gc_spec *g, hs_gc_result *out,
                void (*cb)(const hs_gc_run *r, void *data), void *data)
{
    memset(out, 0, sizeof *out);
    if (s->readonly) return HS_ENOTSUP;
    int64_t *ids = NULL;
    size_t n = 0;
    out->bytes_before = db_bytes(s);
    int rc = gc_select(s, g, &ids, &n, cb, data);
    for (size_t i = 0; !rc && !g->dry_run && i < n; i += GC_CHUNK) {
        size_t k = n - i < GC_CHUNK ? n - i : GC_CHUNK;
        rc = gc_delete(s, ids + i, k, &out->rows);
    }
    free(ids);
    out->runs = (int64_t)n;
    /* The runs are gone whatever VACUUM does: a VACUUM that fails (a
     * statement of the store still reading) leaves the pages free, and the
     * answer says so ("kept free"). */
    if (!rc && !g->dry_run && n && g->vacuum) {
        out->vacuumed = sqlite3_exec(s->db, "VACUUM", NULL, NULL, NULL) == SQLITE_OK;
        if (out->vacuumed) hs_store_wal_truncate(s, 2000); /* readers may hold it: then later */
    }
    out->bytes_after = g->dry_run ? out->bytes_before : db_bytes(s);
    return rc;
}

/* ---- the JSON of POST /api/gc (docs/api.md), for the server and the CLI -- */

int hs_gc_spec_json(hs_gc_spec *g, const json_t *j, int64_t now_unix_ns, char *err, size_t len)
{
    memset(g, 0, sizeof *g);
    g->keep = -1;
    g->vacuum = 1;
    const json_t *v;
    if (!json_is_object(j)) return snprintf(err, len, "the body must be a JSON object"), HS_EINVAL;
    if ((v = json_object_get(j, "older_than_ns"))) {
        if (!json_is_integer(v) || json_integer_value(v) <= 0)
            return snprintf(err, len, "older_than_ns must be a positive integer"), HS_EINVAL;
        g->older_than_ns = (uint64_t)json_integer_value(v);
        g->older_than_cutoff_ns = now_unix_ns - (int64_t)g->older_than_ns;
    }
    if ((v = json_object_get(j, "keep"))) {
        if (!json_is_integer(v) || json_integer_value(v) < 0)
            return snprintf(err, len, "keep must be an integer >= 0"), HS_EINVAL;
        g->keep = json_integer_value(v);
    }
    if ((v = json_object_get(j, "per")) && !(g->per = json_string_value(v)))
        return snprintf(err, len, "per must be \"program\" or a label's key"), HS_EINVAL;
    if (g->per && g->keep < 0) return snprintf(err, len, "per needs keep"), HS_EINVAL;
    const char *k;
    json_t *x;
    json_object_foreach((json_t *)json_object_get(j, "filters"), k, x)
    {
        if (!json_is_string(x) || g->nfilters == 16)
            return snprintf(err, len, "filters must be at most 16 \"key\": \"value\""), HS_EINVAL;
        g->filters[g->nfilters].key = k;
        g->filters[g->nfilters++].value = json_string_value(x);
    }
    int all = json_is_true(json_object_get(j, "all"));
    if (!g->older_than_ns && g->keep < 0 && !g->nfilters && !all)
        return snprintf(err, len, "say which runs: older_than_ns, keep, filters, or all: true"),
               HS_EINVAL;
    g->dry_run = json_is_true(json_object_get(j, "dry_run"));
    if ((v = json_object_get(j, "vacuum"))) g->vacuum = json_is_true(v);
    return 0;
}

json_t *hs_gc_result_json(const hs_gc_spec *g, const hs_gc_result *r, json_t *runs)
{
    return json_pack("{s:b,s:I,s:I,s:I,s:I,s:s,s:o}", "dry_run", g->dry_run, "runs_removed",
                     (json_int_t)(g->dry_run ? 0 : r->runs), "rows_deleted", (json_int_t)r->rows,
                     "db_bytes_before", (json_int_t)r->bytes_before, "db_bytes_after",
                     (json_int_t)r->bytes_after, "space", r->vacuumed ? "vacuum" : "kept free",
                     "runs", runs);
}

void hs_gc_run_json(const hs_gc_run *r, void *data)
{
    json_array_append_new(data, json_pack("{s:I,s:s,s:I}", "id", (json_int_t)r->id, "program",
                                          r->program ? r->program : "", "start_unix_ms",
                                          (json_int_t)(r->start_unix_ns / 1000000)));
}
