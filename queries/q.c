/* q: the connection of queries/, its statements and caches, and the pieces
 * every view stands on: resolving a run and a moment, the live state at that
 * moment (keyframe + deltas, or the peak snapshot), and stacks as frames. */
#include <assert.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hs_error.h"
#include "hs_evcodec.h"
#include "hs_proto.h"
#include "hs_schema.h"
#include "hs_snap.h"
#include "q_internal.h"

/* ---- string map ----------------------------------------------------------- */

static uint64_t fnv1a(const char *s, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h;
}

size_t hs__smap_intern(hs__smap *m, const char *key, size_t len, size_t next, int *added)
{
    *added = 0;
    if ((m->n + 1) * 4 > m->cap * 3) {
        size_t ncap = m->cap ? m->cap * 2 : 256;
        char **nk = calloc(ncap, sizeof *nk);
        uint64_t *nh = malloc(ncap * sizeof *nh);
        size_t *nv = malloc(ncap * sizeof *nv);
        if (!nk || !nh || !nv) {
            free(nk);
            free(nh);
            free(nv);
            return (size_t)-1;
        }
        for (size_t i = 0; i < m->cap; i++) {
            if (!m->keys[i]) continue;
            size_t j = m->hashes[i] & (ncap - 1);
            while (nk[j]) j = (j + 1) & (ncap - 1);
            nk[j] = m->keys[i];
            nh[j] = m->hashes[i];
            nv[j] = m->vals[i];
        }
        free(m->keys);
        free(m->hashes);
        free(m->vals);
        m->keys = nk;
        m->hashes = nh;
        m->vals = nv;
        m->cap = ncap;
    }
    uint64_t h = fnv1a(key, len);
    size_t i = h & (m->cap - 1);
    while (m->keys[i]) {
        if (m->hashes[i] == h && !strncmp(m->keys[i], key, len) && m->keys[i][len] == '\0')
            return m->vals[i];
        i = (i + 1) & (m->cap - 1);
    }
    char *k = malloc(len + 1);
    if (!k) return (size_t)-1;
    memcpy(k, key, len);
    k[len] = '\0';
    m->keys[i] = k;
    m->hashes[i] = h;
    m->vals[i] = next;
    m->n++;
    *added = 1;
    return next;
}

void hs__smap_free(hs__smap *m)
{
    for (size_t i = 0; i < m->cap; i++) free(m->keys[i]);
    free(m->keys);
    free(m->hashes);
    free(m->vals);
    memset(m, 0, sizeof *m);
}

/* ---- buffers -------------------------------------------------------------- */

void hs__buf_put(hs__buf *b, const void *data, size_t n)
{
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t ncap = b->cap ? b->cap : 4096;
        while (ncap < b->n + n + 1) ncap *= 2;
        char *np = realloc(b->p, ncap);
        if (!np) {
            b->oom = 1;
            return;
        }
        b->p = np;
        b->cap = ncap;
    }
    memcpy(b->p + b->n, data, n);
    b->n += n;
    b->p[b->n] = '\0';
}

void hs__buf_printf(hs__buf *b, const char *fmt, ...)
{
    char tmp[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if ((size_t)n < sizeof tmp) {
        hs__buf_put(b, tmp, (size_t)n);
        return;
    }
    char *big = malloc((size_t)n + 1);
    if (!big) {
        b->oom = 1;
        return;
    }
    va_start(ap, fmt);
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    va_end(ap);
    hs__buf_put(b, big, (size_t)n);
    free(big);
}

/* ---- errors --------------------------------------------------------------- */

int hs__err(hs_qerr *err, int code, const char *fmt, ...)
{
    assert(code < 0);
    err->code = code;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
    return code;
}

int hs__dberr(hs_q *q, hs_qerr *err)
{
    return hs__err(err, HS_EDB, "database error: %s", q ? sqlite3_errmsg(q->db) : "no connection");
}

/* ---- statements ----------------------------------------------------------- */

#define RUN_COLS                                                                                   \
    "id, hex(uuid), program, argv, host, pid, ppid, parent_id, start_unix_ns, end_ns, state, "     \
    "clean_exit, peak_bytes, peak_count, peak_t_ns, live_bytes, live_count, total_alloc_bytes, "   \
    "alloc_events, free_events, granularity_ns, sample_bytes, dropped_alloc_events, "              \
    "dropped_free_events, dropped_alloc_bytes, dropped_free_bytes, stacks_truncated, "             \
    "unwind_failed, live_set_full, keyframe_every, total_alloc_count, max_depth, "                 \
    "(SELECT MAX(bucket) FROM heap_series WHERE run = runs.id), collector_version, "               \
    "bye_alloc_events, bye_free_events"

const char *const hs__stmt_sql[ST__COUNT] = {
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
    [ST_NODE] = "SELECT parent, frame, depth FROM traces WHERE id = ?1",
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
    [ST_EVENTS] = "SELECT data FROM events WHERE run = ?1 AND t_first_ns <= ?2 ORDER BY seq",
    [ST_RUN_STACKS] = "SELECT stack_id, trace FROM run_stacks WHERE run = ?1",
    [ST_MAPPINGS] = "SELECT start, end, file_offset, build_id, path FROM mappings WHERE run = ?1 "
                    "AND t_ns = (SELECT MAX(t_ns) FROM mappings WHERE run = ?1) ORDER BY start",
    [ST_PCS] = "SELECT pc, frame FROM run_pcs WHERE run = ?1",
};

sqlite3_stmt *hs__stmt(hs_q *q, int id, hs_qerr *err)
{
    if (!q->st[id] && sqlite3_prepare_v3(q->db, hs__stmt_sql[id], -1, SQLITE_PREPARE_PERSISTENT,
                                         &q->st[id], NULL) != SQLITE_OK) {
        hs__dberr(q, err);
        return NULL;
    }
    sqlite3_reset(q->st[id]);
    sqlite3_clear_bindings(q->st[id]);
    return q->st[id];
}

/* ---- open/close ----------------------------------------------------------- */

static int cmp_i64_desc(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x < y) - (x > y);
}

int64_t hs__kth_largest(int64_t *w, size_t n, size_t k)
{
    assert(k >= 1 && k <= n);
    hs__sort(w, n, sizeof *w, cmp_i64_desc);
    return w[k - 1];
}

int hs_q_open(hs_q **out, const char *db_path, hs_qerr *err)
{
    *out = NULL;
    hs_q *q = calloc(1, sizeof *q);
    if (!q || !(q->path = strdup(db_path))) {
        free(q);
        return hs__err(err, HS_ENOMEM, "out of memory");
    }
    char msg[400];
    int rc = hs_schema_open(&q->db, db_path, HS_SCHEMA_READONLY, msg, sizeof msg);
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
    q->read_only = hs_schema_readonly_why(db_path, q->read_only_why, sizeof q->read_only_why);
    hs__sql_register(q);
    *out = q;
    return 0;
}

static void frames_clear(hs_q *q)
{
    for (size_t i = 0; i < q->nframes; i++) {
        hs__frame *f = q->frames[i];
        free(f->function);
        free(f->file);
        free(f->module);
        free(f->name);
        free(f->label);
        free(f);
    }
    free(q->frames);
    q->frames = NULL;
    q->nframes = q->capframes = 0;
    hs__map_free(&q->frame_idx);
}

void hs_q_free(hs_q *q)
{
    if (!q) return;
    for (int i = 0; i < ST__COUNT; i++) sqlite3_finalize(q->st[i]);
    hs__sql_free(q);
    sqlite3_close_v2(q->db);
    frames_clear(q);
    free(q->nodes);
    hs__map_free(&q->node_idx);
    hs__map_free(&q->site_cache);
    hs__map_free(&q->site_class);
    free(q->path);
    free(q);
}

/* ---- runs ----------------------------------------------------------------- */

static json_t *col_json_int_or_null(sqlite3_stmt *st, int i)
{
    return sqlite3_column_type(st, i) == SQLITE_NULL ? json_null()
                                                     : json_integer(sqlite3_column_int64(st, i));
}

static const char *col_text(sqlite3_stmt *st, int i)
{
    const unsigned char *s = sqlite3_column_text(st, i);
    return s ? (const char *)s : "";
}

/* A runs column that schema `since` added; 0 in older databases (read as
 * they are) and when NULL. */
static int64_t run_column(hs_q *q, int64_t id, int since, const char *col)
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

/* The run's exact totals (schema 008) as its "exact" object, NULL when its
 * collector sent none. "in_figures": peak_bytes, peak_t_ns, end_bytes,
 * end_count and the totals are these exact figures (else the sampled ones,
 * at every-allocation sampling or when samples see what the totals do
 * not); "estimated_peak_*" is the sampled series' peak. */
static json_t *exact_json(hs_q *q, int64_t id)
{
    sqlite3_stmt *st;
    json_t *j = NULL;
    if (q->schema < 8 ||
        sqlite3_prepare_v2(q->db,
                           "SELECT flags, allocs, frees, alloc_bytes, free_bytes, error_bytes, "
                           "est_peak_bytes, est_peak_t_ns FROM run_exact WHERE run = ?1",
                           -1, &st, NULL) != SQLITE_OK)
        return NULL;
    sqlite3_bind_int64(st, 1, id);
    if (sqlite3_step(st) == SQLITE_ROW) {
        int64_t f = sqlite3_column_int64(st, 0);
        j = json_pack("{s:b,s:s,s:I,s:I,s:I,s:I,s:I,s:I,s:I}", "in_figures", (f & 256) != 0,
                      "sizes", (f & 1) ? "malloc_usable_size" : "glibc chunk sizes", "allocs",
                      (json_int_t)sqlite3_column_int64(st, 1), "frees",
                      (json_int_t)sqlite3_column_int64(st, 2), "alloc_bytes",
                      (json_int_t)sqlite3_column_int64(st, 3), "free_bytes",
                      (json_int_t)sqlite3_column_int64(st, 4), "error_bytes",
                      (json_int_t)sqlite3_column_int64(st, 5), "estimated_peak_bytes",
                      (json_int_t)sqlite3_column_int64(st, 6), "estimated_peak_t_ns",
                      (json_int_t)sqlite3_column_int64(st, 7));
    }
    sqlite3_finalize(st);
    return j;
}

int hs__run_load(hs_q *q, int64_t id, hs__run *out, hs_qerr *err)
{
    memset(out, 0, sizeof *out);
    sqlite3_stmt *st = hs__stmt(q, ST_RUN, err);
    if (!st) return HS_EDB;
    sqlite3_bind_int64(st, 1, id);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_DONE) return hs__err(err, HS_ENOENT, "no run with id %" PRId64, id);
    if (rc != SQLITE_ROW) return hs__dberr(q, err);

    out->id = id;
    out->g = sqlite3_column_int64(st, 20);
    if (out->g <= 0) out->g = 1000000000;
    out->keyframe_every = sqlite3_column_int64(st, 29);
    out->last_bucket =
        sqlite3_column_type(st, 32) == SQLITE_NULL ? -1 : sqlite3_column_int64(st, 32);
    int64_t end_ns = sqlite3_column_int64(st, 9);
    if (sqlite3_column_type(st, 9) == SQLITE_NULL) end_ns = 0;
    /* An open run's end_ns may lag its data; the data's extent is a floor. */
    int64_t data_end = hs_bucket_end(out->last_bucket, out->g);
    int64_t peak_t = sqlite3_column_int64(st, 14);
    if (end_ns <= 0) end_ns = data_end;
    if (end_ns < peak_t) end_ns = peak_t;
    out->end_ns = end_ns;
    /* The end of a Python program's main code (schema 5): only a moment
     * inside the run counts. */
    int64_t main_end = run_column(q, id, 5, "main_end_ns");
    out->main_end_ns = main_end > 0 && main_end <= end_ns ? main_end : 0;
    out->peak_t_ns = peak_t;
    out->peak_bytes = sqlite3_column_int64(st, 12);
    out->end_bytes = sqlite3_column_int64(st, 15);
    out->sample_bytes = sqlite3_column_int64(st, 21);

    json_t *argv = json_loads(col_text(st, 3), JSON_DECODE_ANY, NULL);
    if (!json_is_array(argv)) {
        json_decref(argv);
        argv = json_array();
    }
    json_t *dropped =
        json_pack("{s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I}", "alloc_events",
                  (json_int_t)sqlite3_column_int64(st, 22), "free_events",
                  (json_int_t)sqlite3_column_int64(st, 23), "alloc_bytes",
                  (json_int_t)sqlite3_column_int64(st, 24), "free_bytes",
                  (json_int_t)sqlite3_column_int64(st, 25), "stacks_truncated",
                  (json_int_t)sqlite3_column_int64(st, 26), "unwind_failed",
                  (json_int_t)sqlite3_column_int64(st, 27), "live_set_full",
                  (json_int_t)sqlite3_column_int64(st, 28), "python_fallback",
                  (json_int_t)run_column(q, id, 4, "python_fallback"), "python_small_unseen",
                  (json_int_t)run_column(q, id, 5, "python_small_unseen"));
    json_t *sampling =
        json_pack("{s:I,s:I,s:o}", "sample_bytes", (json_int_t)out->sample_bytes, "max_depth",
                  (json_int_t)sqlite3_column_int64(st, 31), "dropped", dropped);
    json_t *clean = sqlite3_column_type(st, 11) == SQLITE_NULL
                        ? json_null()
                        : json_boolean(sqlite3_column_int(st, 11) != 0);
    const char *uuid = col_text(st, 1);
    char uuid_lc[40];
    snprintf(uuid_lc, sizeof uuid_lc, "%s", uuid);
    for (char *c = uuid_lc; *c; c++)
        if (*c >= 'A' && *c <= 'F') *c = (char)(*c - 'A' + 'a');
    json_t *info = json_pack(
        "{s:I,s:s,s:s,s:o,s:s,s:I,s:I,s:o,s:o,s:I,s:I,s:s,s:o,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,"
        "s:I,s:I,s:s}",
        "id", (json_int_t)id, "uuid", uuid_lc, "program", col_text(st, 2), "argv", argv, "host",
        col_text(st, 4), "pid", (json_int_t)sqlite3_column_int64(st, 5), "ppid",
        (json_int_t)sqlite3_column_int64(st, 6), "parent_id", col_json_int_or_null(st, 7), "labels",
        json_object(), "start_unix_ms", (json_int_t)(sqlite3_column_int64(st, 8) / 1000000),
        "duration_ns", (json_int_t)end_ns, "state", col_text(st, 10), "clean_exit", clean,
        "peak_bytes", (json_int_t)out->peak_bytes, "peak_count",
        (json_int_t)sqlite3_column_int64(st, 13), "peak_t_ns", (json_int_t)peak_t, "end_bytes",
        (json_int_t)out->end_bytes, "end_count", (json_int_t)sqlite3_column_int64(st, 16),
        "total_alloc_bytes", (json_int_t)sqlite3_column_int64(st, 17), "total_alloc_count",
        (json_int_t)sqlite3_column_int64(st, 30), "alloc_events",
        (json_int_t)sqlite3_column_int64(st, 18), "free_events",
        (json_int_t)sqlite3_column_int64(st, 19), "granularity_ns", (json_int_t)out->g,
        "keyframe_every", (json_int_t)out->keyframe_every, "collector_version", col_text(st, 33));
    if (!info || !sampling) {
        json_decref(info);
        json_decref(sampling);
        return hs__err(err, HS_ENOMEM, "out of memory");
    }
    if (sqlite3_column_type(st, 34) != SQLITE_NULL)
        json_object_set_new(info, "bye_alloc_events", json_integer(sqlite3_column_int64(st, 34)));
    if (sqlite3_column_type(st, 35) != SQLITE_NULL)
        json_object_set_new(info, "bye_free_events", json_integer(sqlite3_column_int64(st, 35)));
    if (out->main_end_ns)
        json_object_set_new(info, "main_end_ns", json_integer((json_int_t)out->main_end_ns));
    json_t *exact = exact_json(q, id);
    if (exact) json_object_set_new(info, "exact", exact);
    json_object_set_new(info, "sampling", sampling);
    out->info = info;
    out->sampling = sampling;

    st = hs__stmt(q, ST_LABELS, err);
    if (!st) goto fail;
    sqlite3_bind_int64(st, 1, id);
    json_t *labels = json_object_get(info, "labels");
    while ((rc = sqlite3_step(st)) == SQLITE_ROW)
        json_object_set_new(labels, col_text(st, 0), json_string(col_text(st, 1)));
    if (rc != SQLITE_DONE) {
        hs__dberr(q, err);
        goto fail;
    }
    sqlite3_reset(st);
    return 0;
fail:
    hs__run_clear(out);
    return HS_EDB;
}

void hs__run_clear(hs__run *r)
{
    json_decref(r->info);
    r->info = NULL;
    r->sampling = NULL;
}

/* Appends the WHERE conditions of a key=value list (runs aliased r) and
 * binds nothing: the values are bound in order by bind_kv(). */
static void where_kv(hs__buf *b, const char *key)
{
    if (!strcmp(key, "program"))
        hs__buf_printf(b, " AND (r.program = ? OR substr(r.program, -length(?) - 1) = '/' || ?)");
    else if (!strcmp(key, "host"))
        hs__buf_printf(b, " AND r.host = ?");
    else if (!strcmp(key, "id"))
        hs__buf_printf(b, " AND r.id = ?");
    else if (!strcmp(key, "pid"))
        hs__buf_printf(b, " AND r.pid = ?");
    else if (!strcmp(key, "state"))
        hs__buf_printf(b, " AND r.state = ?");
    else
        hs__buf_printf(b, " AND EXISTS (SELECT 1 FROM run_labels l WHERE l.run = r.id AND "
                          "l.key = ? AND l.value = ?)");
}

static int bind_kv(sqlite3_stmt *st, int i, const char *key, const char *value)
{
    if (!strcmp(key, "program")) {
        for (int k = 0; k < 3; k++) sqlite3_bind_text(st, i++, value, -1, SQLITE_TRANSIENT);
    } else if (!strcmp(key, "host") || !strcmp(key, "state")) {
        sqlite3_bind_text(st, i++, value, -1, SQLITE_TRANSIENT);
    } else if (!strcmp(key, "id") || !strcmp(key, "pid")) {
        sqlite3_bind_int64(st, i++, strtoll(value, NULL, 10));
    } else {
        sqlite3_bind_text(st, i++, key, -1, SQLITE_TRANSIENT);
        sqlite3_bind_text(st, i++, value, -1, SQLITE_TRANSIENT);
    }
    return i;
}

int hs__runs_select(hs_q *q, const char *const *keys, const char *const *values, int n,
                    int64_t limit, int64_t **ids, size_t *nids, hs_qerr *err);

/* The ids of runs matching every key=value, newest first. */
int hs__runs_select(hs_q *q, const char *const *keys, const char *const *values, int n,
                    int64_t limit, int64_t **ids, size_t *nids, hs_qerr *err)
{
    hs__buf b = {0};
    hs__buf_printf(&b, "SELECT r.id FROM runs r WHERE 1");
    for (int i = 0; i < n; i++) where_kv(&b, keys[i]);
    hs__buf_printf(&b, " ORDER BY r.start_unix_ns DESC, r.id DESC LIMIT ?");
    *ids = NULL;
    *nids = 0;
    if (b.oom) return hs__err(err, HS_ENOMEM, "out of memory");
    sqlite3_stmt *st = NULL;
    int rc = HS_EDB;
    if (sqlite3_prepare_v2(q->db, b.p, -1, &st, NULL) != SQLITE_OK) {
        hs__dberr(q, err);
        goto out;
    }
    int bi = 1;
    for (int i = 0; i < n; i++) bi = bind_kv(st, bi, keys[i], values[i]);
    sqlite3_bind_int64(st, bi, limit);
    size_t cap = 0;
    int s;
    while ((s = sqlite3_step(st)) == SQLITE_ROW) {
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
    if (s != SQLITE_DONE) {
        hs__dberr(q, err);
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

static int resolve_uuid(hs_q *q, const char *hex, int64_t *id, hs_qerr *err)
{
    sqlite3_stmt *st = NULL;
    char up[40];
    size_t n = strlen(hex);
    for (size_t i = 0; i <= n; i++)
        up[i] = (char)(hex[i] >= 'a' && hex[i] <= 'f' ? hex[i] - 32 : hex[i]);
    if (sqlite3_prepare_v2(q->db,
                           "SELECT id FROM runs WHERE substr(hex(uuid), 1, length(?1)) = ?1 "
                           "LIMIT 2",
                           -1, &st, NULL) != SQLITE_OK)
        return hs__dberr(q, err);
    sqlite3_bind_text(st, 1, up, -1, SQLITE_TRANSIENT);
    int found = 0, rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        *id = sqlite3_column_int64(st, 0);
        found++;
    }
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE) return hs__dberr(q, err);
    if (found == 0) return hs__err(err, HS_ENOENT, "no run with id or uuid prefix '%s'", hex);
    if (found > 1)
        return hs__err(err, HS_EINVAL, "run uuid prefix '%s' is ambiguous; give more digits", hex);
    return 0;
}

int hs__run_resolve(hs_q *q, const hs_run_sel *sel, hs__run *out, hs_qerr *err)
{
    int64_t id = 0;
    int rc;
    memset(out, 0, sizeof *out);
    switch (sel->kind) {
    case HS_RUNSEL_ID:
        rc = hs__run_load(q, sel->id, out, err);
        if (rc != HS_ENOENT) return rc;
        if (strlen(sel->hex) < 4) return rc; /* too short to be a meaningful uuid prefix */
        /* digits may also be the start of a uuid */
        __attribute__((fallthrough));
    case HS_RUNSEL_UUID:
        if ((rc = resolve_uuid(q, sel->hex, &id, err))) return rc;
        return hs__run_load(q, id, out, err);
    default: {
        const char *keys[HS_SEL_MAX_KV], *values[HS_SEL_MAX_KV];
        for (int i = 0; i < sel->nkv; i++) {
            keys[i] = sel->kv[i].key;
            values[i] = sel->kv[i].value;
        }
        int64_t *ids;
        size_t n;
        if ((rc = hs__runs_select(q, keys, values, sel->kind == HS_RUNSEL_MATCH ? sel->nkv : 0, 1,
                                  &ids, &n, err)))
            return rc;
        id = n ? ids[0] : 0;
        free(ids);
        if (!n)
            return hs__err(err, HS_ENOENT,
                           sel->kind == HS_RUNSEL_LATEST ? "no runs stored yet"
                                                         : "no run matches the selector");
        return hs__run_load(q, id, out, err);
    }
    }
}

/* ---- moments and state ------------------------------------------------------ */

static int step_int64(hs_q *q, sqlite3_stmt *st, int64_t *out, int *null, hs_qerr *err)
{
    int rc = sqlite3_step(st);
    if (rc != SQLITE_ROW) return hs__dberr(q, err);
    *null = sqlite3_column_type(st, 0) == SQLITE_NULL;
    *out = sqlite3_column_int64(st, 0);
    sqlite3_reset(st);
    return 0;
}

int hs__at_resolve(hs_q *q, const hs__run *run, const hs_t_sel *t, hs__at *out, hs_qerr *err)
{
    (void)q;
    out->kind = t->kind;
    out->exact = 0;
    int64_t last = run->last_bucket;
    if (last < hs_bucket_at(run->end_ns, run->g)) last = hs_bucket_at(run->end_ns, run->g);
    switch (t->kind) {
    case HS_TSEL_PEAK:
        out->bucket = hs_bucket_of((uint64_t)run->peak_t_ns, (uint64_t)run->g);
        out->at_ns = run->peak_t_ns;
        return 0;
    case HS_TSEL_END:
        if (run->main_end_ns > 0) {
            /* What the program held when its main code finished: the
             * teardown that follows (a Python interpreter's frees its
             * modules' globals) may share that moment's bucket. */
            out->bucket = run->main_end_ns / run->g - 1;
            out->at_ns = run->main_end_ns;
            out->exact = 1;
            return 0;
        }
        /* fall through */
    case HS_TSEL_EXIT:
        out->bucket = last;
        out->at_ns = run->end_ns;
        return 0;
    default:
        if (t->ns < 0 || t->ns > run->end_ns)
            return hs__err(err, HS_EINVAL,
                           "time %.3fs is outside run %" PRId64 " (it lasted %.3fs; use 0 to "
                           "%.3f, 'peak' or 'end')",
                           t->ns / 1e9, run->id, run->end_ns / 1e9, run->end_ns / 1e9);
        /* the bucket (b*g, (b+1)*g] holding T, so that T = a bucket's end is
         * that bucket, as history's points show it */
        out->bucket = hs_bucket_at(t->ns, run->g);
        if (out->bucket > last) out->bucket = last;
        out->at_ns = hs_bucket_end(out->bucket, run->g);
        if (out->at_ns > run->end_ns) out->at_ns = run->end_ns;
        return 0;
    }
}

typedef struct state_acc {
    hs__map idx;
    hs__state *s;
    size_t cap;
} state_acc;

static int acc_add(state_acc *a, int64_t trace, int64_t bytes, int64_t count)
{
    uint64_t i;
    if (hs__map_get(&a->idx, (uint64_t)trace, &i)) {
        a->s->rows[i].bytes += bytes;
        a->s->rows[i].count += count;
        return 0;
    }
    if (a->s->n == a->cap) {
        size_t ncap = a->cap ? a->cap * 2 : 256;
        hs__live *np = realloc(a->s->rows, ncap * sizeof *np);
        if (!np) return HS_ENOMEM;
        a->s->rows = np;
        a->cap = ncap;
    }
    a->s->rows[a->s->n] = (hs__live){trace, bytes, count};
    if (hs__map_put(&a->idx, (uint64_t)trace, a->s->n)) return HS_ENOMEM;
    a->s->n++;
    return 0;
}

static int acc_rows(hs_q *q, sqlite3_stmt *st, state_acc *a, hs_qerr *err)
{
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW)
        if (acc_add(a, sqlite3_column_int64(st, 0), sqlite3_column_int64(st, 1),
                    sqlite3_column_int64(st, 2)))
            return hs__err(err, HS_ENOMEM, "out of memory");
    if (rc != SQLITE_DONE) return hs__dberr(q, err);
    sqlite3_reset(st);
    return 0;
}

/* Adds the stored events with from <= t <= upto, per trace. They are read
 * from the batches that reach into that span (the events_time index), so the
 * cost is that of the events of one bucket or so. Counts are rounded per
 * trace, as the rollups' are. */
static int acc_events(hs_q *q, const hs__run *run, int64_t from, int64_t upto, state_acc *a,
                      hs_qerr *err)
{
    hs__map stacks = {0}, cidx = {0};
    hs_evdec dec = {0};
    double *cnt = NULL;
    size_t ncnt = 0, capcnt = 0;
    int rc = HS_EDB, s;
    sqlite3_stmt *st = hs__stmt(q, ST_RUN_STACKS, err), *ev = NULL;
    if (!st) goto out;
    sqlite3_bind_int64(st, 1, run->id);
    while ((s = sqlite3_step(st)) == SQLITE_ROW)
        if (hs__map_put(&stacks, (uint64_t)sqlite3_column_int64(st, 0),
                        (uint64_t)sqlite3_column_int64(st, 1)))
            goto oom;
    sqlite3_reset(st);
    if (s != SQLITE_DONE) goto dbfail;
    if (sqlite3_prepare_v2(q->db,
                           "SELECT data FROM events WHERE run = ?1 AND t_last_ns >= ?2 AND "
                           "t_first_ns <= ?3 ORDER BY seq",
                           -1, &ev, NULL) != SQLITE_OK)
        goto dbfail;
    sqlite3_bind_int64(ev, 1, run->id);
    sqlite3_bind_int64(ev, 2, from);
    sqlite3_bind_int64(ev, 3, upto);
    int schema = hs_schema_db_version(q->db), more = 0;
    while ((s = sqlite3_step(ev)) == SQLITE_ROW) {
        hs_event e;
        const uint8_t *data = sqlite3_column_blob(ev, 0);
        if ((more = hs_evdec_open_row(&dec, schema, data, (size_t)sqlite3_column_bytes(ev, 0))))
            goto corrupt;
        while ((more = hs_evdec_next(&dec, &e)) == 1) {
            if ((int64_t)e.t_ns < from || (int64_t)e.t_ns > upto) continue;
            uint64_t trace, i;
            if (!hs__map_get(&stacks, e.stack_id, &trace)) continue;
            int64_t w = (int64_t)e.weight;
            double c = e.size ? (double)e.weight / (double)e.size : 1.0;
            if (acc_add(a, (int64_t)trace, e.is_free ? -w : w, 0)) goto oom;
            if (!hs__map_get(&cidx, trace, &i)) {
                if (ncnt == capcnt) {
                    size_t ncap = capcnt ? capcnt * 2 : 256;
                    double *np = realloc(cnt, ncap * sizeof *np);
                    if (!np) goto oom;
                    cnt = np;
                    capcnt = ncap;
                }
                i = ncnt;
                cnt[ncnt++] = 0;
                if (hs__map_put(&cidx, trace, i)) goto oom;
            }
            cnt[i] += e.is_free ? -c : c;
        }
        if (more) goto corrupt;
    }
    if (s != SQLITE_DONE) goto dbfail;
    for (size_t k = 0; k < a->s->n; k++) {
        uint64_t i;
        if (hs__map_get(&cidx, (uint64_t)a->s->rows[k].trace, &i))
            a->s->rows[k].count += (int64_t)llround(cnt[i]);
    }
    rc = 0;
    goto out;
corrupt:
    rc = hs__err(err, HS_EDB, "the stored events of run %" PRId64 " cannot be read: %s", run->id,
                 hs_strerror(more));
    goto out;
dbfail:
    rc = hs__dberr(q, err);
    goto out;
oom:
    rc = hs__err(err, HS_ENOMEM, "out of memory");
out:
    if (st) sqlite3_reset(st);
    sqlite3_finalize(ev);
    hs_evdec_free(&dec);
    free(cnt);
    hs__map_free(&stacks);
    hs__map_free(&cidx);
    return rc;
}

int hs__state_at(hs_q *q, const hs__run *run, const hs__at *at, hs__state *out, hs_qerr *err)
{
    memset(out, 0, sizeof *out);
    state_acc a = {.s = out};
    sqlite3_stmt *st;
    int rc = HS_EDB, null = 1;
    int64_t v = 0;
    if (at->kind == HS_TSEL_PEAK) {
        if (!(st = hs__stmt(q, ST_PEAK_BUCKET, err))) goto out;
        sqlite3_bind_int64(st, 1, run->id);
        if ((rc = step_int64(q, st, &v, &null, err))) goto out;
        if (!null) {
            if (!(st = hs__stmt(q, ST_PEAK_ROWS, err))) goto out;
            sqlite3_bind_int64(st, 1, run->id);
            sqlite3_bind_int64(st, 2, v);
            if ((rc = acc_rows(q, st, &a, err))) goto out;
            goto done;
        }
        /* no peak snapshot (an empty run): the state at the peak's bucket */
    }
    if (!(st = hs__stmt(q, ST_KEYFRAME, err))) goto out;
    sqlite3_bind_int64(st, 1, run->id);
    sqlite3_bind_int64(st, 2, at->bucket);
    if ((rc = step_int64(q, st, &v, &null, err))) goto out;
    int64_t kb = null ? -1 : v;
    if (kb >= 0) {
        if (!(st = hs__stmt(q, ST_KF_ROWS, err))) goto out;
        sqlite3_bind_int64(st, 1, run->id);
        sqlite3_bind_int64(st, 2, kb);
        if ((rc = acc_rows(q, st, &a, err))) goto out;
    }
    if (!(st = hs__stmt(q, ST_DELTA_ROWS, err))) goto out;
    sqlite3_bind_int64(st, 1, run->id);
    sqlite3_bind_int64(st, 2, kb);
    sqlite3_bind_int64(st, 3, at->bucket);
    if ((rc = acc_rows(q, st, &a, err))) goto out;
    if (at->exact && (rc = acc_events(q, run, (at->bucket + 1) * run->g, at->at_ns, &a, err)))
        goto out;
done : {
    size_t w = 0;
    for (size_t i = 0; i < out->n; i++) {
        hs__live r = out->rows[i];
        if (r.bytes <= 0 && r.count <= 0) continue;
        out->rows[w++] = r;
        out->total_bytes += r.bytes;
        out->total_count += r.count;
    }
    out->n = w;
    rc = 0;
}
out:
    hs__map_free(&a.idx);
    if (rc) hs__state_clear(out);
    return rc;
}

void hs__state_clear(hs__state *s)
{
    free(s->rows);
    memset(s, 0, sizeof *s);
}

static hs__tsum *tsum_get(hs__tsums *t, hs__map *idx, int64_t trace)
{
    uint64_t i;
    if (hs__map_get(idx, (uint64_t)trace, &i)) return &t->rows[i];
    if (t->n == t->cap) {
        size_t ncap = t->cap ? t->cap * 2 : 256;
        hs__tsum *np = realloc(t->rows, ncap * sizeof *np);
        if (!np) return NULL;
        t->rows = np;
        t->cap = ncap;
    }
    if (hs__map_put(idx, (uint64_t)trace, t->n)) return NULL;
    hs__tsum *r = &t->rows[t->n++];
    memset(r, 0, sizeof *r);
    r->trace = trace;
    return r;
}

static int cmp_tsum_first(const void *a, const void *b)
{
    const hs__tsum *x = a, *y = b;
    if (x->s.first != y->s.first) return x->s.first < y->s.first ? -1 : 1;
    return (x->trace > y->trace) - (x->trace < y->trace);
}

int hs__tsums_load(hs_q *q, const hs__run *run, int64_t upto, hs__tsums *out, hs_qerr *err)
{
    memset(out, 0, sizeof *out);
    hs__map idx = {0};
    int rc = HS_EDB, s, null = 1;
    int64_t mark = -1;
    sqlite3_stmt *st = NULL;
    /* One read transaction: the writer rewrites summaries and the mark of a
     * live run together, and they must be read as of one commit (the
     * summaries of one with the mark of another would count some delta
     * rows twice or never). */
    int own_tx = sqlite3_get_autocommit(q->db);
    if (own_tx && sqlite3_exec(q->db, "BEGIN", NULL, NULL, NULL) != SQLITE_OK)
        return hs__dberr(q, err);
    if (q->schema >= 2) {
        if (!(st = hs__stmt(q, ST_TSTATS_MARK, err))) goto out;
        sqlite3_bind_int64(st, 1, run->id);
        if ((s = sqlite3_step(st)) != SQLITE_ROW && s != SQLITE_DONE) goto dbfail;
        null = s != SQLITE_ROW || sqlite3_column_type(st, 0) == SQLITE_NULL;
        if (!null) mark = sqlite3_column_int64(st, 0);
        sqlite3_reset(st);
    }
    /* Summaries that reach past upto cannot be cut back: sum the rows. */
    if (null || mark > upto) mark = -1;
    if (mark >= 0) {
        if (!(st = hs__stmt(q, ST_TSTATS_ROWS, err))) goto out;
        sqlite3_bind_int64(st, 1, run->id);
        while ((s = sqlite3_step(st)) == SQLITE_ROW) {
            hs__tsum *r = tsum_get(out, &idx, sqlite3_column_int64(st, 0));
            if (!r) goto oom;
            hs_tstats_read(st, 1, &r->s);
            out->delta_rows += r->s.rows;
        }
        sqlite3_reset(st);
        if (s != SQLITE_DONE) goto dbfail;
    }
    if (!(st = hs__stmt(q, ST_DELTAS_AFTER, err))) goto out;
    sqlite3_bind_int64(st, 1, run->id);
    sqlite3_bind_int64(st, 2, mark);
    while ((s = sqlite3_step(st)) == SQLITE_ROW) {
        int64_t b = sqlite3_column_int64(st, 0);
        if (b > upto) break;
        hs__tsum *r = tsum_get(out, &idx, sqlite3_column_int64(st, 1));
        if (!r) goto oom;
        hs_tstats_add(&r->s, b, sqlite3_column_int64(st, 2));
        out->delta_rows++;
    }
    sqlite3_reset(st);
    if (s != SQLITE_DONE && s != SQLITE_ROW) goto dbfail;
    hs__sort(out->rows, out->n, sizeof *out->rows, cmp_tsum_first);
    rc = 0;
    goto out;
dbfail:
    if (st) sqlite3_reset(st);
    rc = hs__dberr(q, err);
    goto out;
oom:
    if (st) sqlite3_reset(st);
    rc = hs__err(err, HS_ENOMEM, "out of memory");
out:
    hs__map_free(&idx);
    if (own_tx) sqlite3_exec(q->db, "COMMIT", NULL, NULL, NULL);
    if (rc) hs__tsums_clear(out);
    return rc;
}

void hs__tsums_clear(hs__tsums *t)
{
    free(t->rows);
    memset(t, 0, sizeof *t);
}

/* ---- stacks and frames ---------------------------------------------------- */

/* The caches of trace nodes and frames. A request may grow them up to the
 * caps (nodes past NODE_CACHE_MAX are looked up but not kept; a view stops
 * taking new stacks once FRAME_CACHE_MAX frames are cached, see
 * hs__frames_full); between requests they are dropped when past the KEEP
 * sizes, so that an idle pooled connection holds a few MB, not a big
 * request's working set. About 56 B a cached node, 270 B a cached frame. */
#define NODE_CACHE_MAX   (512u << 10)
#define NODE_CACHE_KEEP  (256u << 10)
#define FRAME_CACHE_MAX  (200u << 10)
#define FRAME_CACHE_KEEP (64u << 10)

static int node_get(hs_q *q, int64_t id, struct hs__node *out, hs_qerr *err)
{
    uint64_t i;
    if (hs__map_get(&q->node_idx, (uint64_t)id, &i)) {
        *out = q->nodes[i];
        return 0;
    }
    sqlite3_stmt *st = hs__stmt(q, ST_NODE, err);
    if (!st) return HS_EDB;
    q->node_misses++;
    sqlite3_bind_int64(st, 1, id);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_DONE) return hs__err(err, HS_EDB, "trace node %" PRId64 " is missing", id);
    if (rc != SQLITE_ROW) return hs__dberr(q, err);
    *out = (struct hs__node){sqlite3_column_int64(st, 0), sqlite3_column_int64(st, 1),
                             sqlite3_column_int(st, 2)};
    sqlite3_reset(st);
    if (q->nnodes >= NODE_CACHE_MAX) return 0; /* answered, not kept */
    if (q->nnodes == q->capnodes) {
        size_t ncap = q->capnodes ? q->capnodes * 2 : 1024;
        struct hs__node *np = realloc(q->nodes, ncap * sizeof *np);
        if (!np) return 0; /* not cached; still answered */
        q->nodes = np;
        q->capnodes = ncap;
    }
    if (hs__map_put(&q->node_idx, (uint64_t)id, q->nnodes) == 0) q->nodes[q->nnodes++] = *out;
    return 0;
}

int hs__node(hs_q *q, int64_t id, int64_t *parent, int64_t *frame, int *depth, hs_qerr *err)
{
    struct hs__node nd;
    int rc = node_get(q, id, &nd, err);
    if (rc) return rc;
    *parent = nd.parent;
    *frame = nd.frame;
    *depth = nd.depth;
    return 0;
}

int hs__frames_full(const hs_q *q)
{
    return q->nframes >= FRAME_CACHE_MAX;
}

int hs__stack(hs_q *q, int64_t trace, int64_t *out, int max, hs_qerr *err)
{
    int n = 0;
    int64_t node = trace;
    while (node != 0 && n < max) {
        struct hs__node nd;
        int rc = node_get(q, node, &nd, err);
        if (rc) return rc;
        out[n++] = nd.frame;
        if (nd.parent == node) break; /* defensive: a self-loop would never end */
        node = nd.parent;
    }
    return n;
}

static char *xstrdup(const char *s)
{
    return strdup(s ? s : "");
}

const hs__frame *hs__frame_get(hs_q *q, int64_t frame, hs_qerr *err)
{
    uint64_t i;
    if (hs__map_get(&q->frame_idx, (uint64_t)frame, &i)) return q->frames[i];
    if (q->nframes == q->capframes) {
        size_t ncap = q->capframes ? q->capframes * 2 : 1024;
        hs__frame **np = realloc(q->frames, ncap * sizeof *np);
        if (!np) {
            hs__err(err, HS_ENOMEM, "out of memory");
            return NULL;
        }
        q->frames = np;
        q->capframes = ncap;
    }
    sqlite3_stmt *st = hs__stmt(q, ST_FRAME, err);
    if (!st) return NULL;
    sqlite3_bind_int64(st, 1, frame);
    int rc = sqlite3_step(st);
    hs__frame f = {0};
    if (rc == SQLITE_ROW) {
        f.function = xstrdup(col_text(st, 0));
        f.file = xstrdup(col_text(st, 1));
        f.line = sqlite3_column_int64(st, 2);
        f.module = xstrdup(col_text(st, 3));
        f.module_offset = sqlite3_column_int64(st, 4);
    } else if (rc == SQLITE_DONE) {
        f.function = xstrdup("");
        f.file = xstrdup("");
        f.module = xstrdup("");
    } else {
        hs__dberr(q, err);
        return NULL;
    }
    sqlite3_reset(st);
    char tmp[512];
    if (f.function && f.function[0]) {
        f.name = hs__fn_name(f.function, f.module && !f.module[0]);
    } else {
        const char *base = f.module ? strrchr(f.module, '/') : NULL;
        base = base ? base + 1 : (f.module && f.module[0] ? f.module : "?");
        snprintf(tmp, sizeof tmp, "%s+0x%" PRIx64, base, (uint64_t)f.module_offset);
        f.name = xstrdup(tmp);
    }
    if (f.name && f.file) { /* one formatting in the common case: labels are short */
        char lb[256];
        size_t need = (size_t)hs_frame_label(lb, sizeof lb, f.name, f.file, f.line) + 1;
        if ((f.label = malloc(need))) {
            if (need <= sizeof lb)
                memcpy(f.label, lb, need);
            else
                hs_frame_label(f.label, need, f.name, f.file, f.line);
        }
    }
    hs__frame *fp = malloc(sizeof *fp);
    if (!fp || !f.function || !f.file || !f.module || !f.name || !f.label ||
        hs__map_put(&q->frame_idx, (uint64_t)frame, q->nframes)) {
        free(fp);
        free(f.function);
        free(f.file);
        free(f.module);
        free(f.name);
        free(f.label);
        hs__err(err, HS_ENOMEM, "out of memory");
        return NULL;
    }
    hs__frame_classify(&f);
    *fp = f;
    q->frames[q->nframes++] = fp;
    return fp;
}

int hs__cache_trim(hs_q *q)
{
    int freed = hs__site_trim(q);
    if (q->nframes > FRAME_CACHE_KEEP) {
        frames_clear(q);
        freed = 1;
    }
    if (q->nnodes > NODE_CACHE_KEEP) {
        free(q->nodes);
        q->nodes = NULL;
        q->nnodes = q->capnodes = 0;
        hs__map_free(&q->node_idx);
        freed = 1;
    }
    return freed;
}

json_t *hs__frame_json(const hs__frame *f)
{
    return json_pack("{s:s,s:s,s:I,s:s}", "function", f->name, "file", f->file, "line",
                     (json_int_t)f->line, "module", f->module);
}

json_t *hs__stack_json(hs_q *q, const int64_t *frames, int depth, hs_qerr *err)
{
    json_t *a = json_array();
    for (int i = 0; a && i < depth; i++) {
        const hs__frame *f = hs__frame_get(q, frames[i], err);
        if (!f) {
            json_decref(a);
            return NULL;
        }
        json_array_append_new(a, hs__frame_json(f));
    }
    return a;
}

int hs__row_stack(hs_q *q, json_t *row, int64_t trace, int max_frames, int *cut, hs_qerr *err)
{
    int64_t frames[HS_MAX_DEPTH];
    int d = hs__stack(q, trace, frames, HS_MAX_DEPTH, err);
    if (d < 0) return d;
    json_t *stack = hs__stack_json(q, frames, d < max_frames ? d : max_frames, err);
    if (!stack) return HS_EDB;
    json_object_set_new(row, "stack", stack);
    int site = hs__site_index(q, trace, frames, d, err);
    if (site < 0) return site;
    json_object_set_new(row, "site_index", json_integer(site));
    if (d > max_frames) {
        json_object_set_new(row, "stack_depth", json_integer(d));
        *cut = 1;
    }
    return 0;
}
