/* ch_ship: the shipper of hs_chship.h: SQLite rows of the writer's file to
 * ClickHouse, local ids turned into content ids, one RowBinary INSERT per
 * table per pass, watermarks advanced only after the whole pass landed
 * (and kept in the marks file, ch_marks.c); a run another front end
 * carried on is left alone, and ended runs leave the buffer once shipped. */
#include "hs_chship.h"

#include <assert.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <openssl/sha.h>
#include <sqlite3.h>

#include "ch_ship_int.h"
#include "hs_chttp.h"
#include "hs_clock.h"
#include "hs_error.h"
#include "hs_log.h"
#include "hs_map.h"
#include "hs_snap.h"
#include "hs_schema.h"

extern const char hs_ch_schema_sql[]; /* schema/clickhouse/001_init.sql, embedded */

static const char *const insert_sql[T__COUNT] = {
    [T_FRAMES] = "INSERT INTO frames (id, key, function, file, line, module, module_offset, ver)",
    [T_TRACES] = "INSERT INTO traces (id, parent, frame, depth)",
    [T_EVENTS] = "INSERT INTO events (run, day, seq, t_first_ns, t_last_ns, n_events, codec, data)",
    [T_SNAP] = "INSERT INTO snapshots (run, day, kind, bucket, trace, bytes, count, ver)",
    [T_SERIES] = "INSERT INTO heap_series (run, day, bucket, live_bytes, live_count, max_bytes, "
                 "alloc_bytes, free_bytes, ver)",
    [T_PS] = "INSERT INTO process_samples (run, day, t_ns, rss_bytes, vsize_bytes)",
    [T_SIZES] = "INSERT INTO size_hist (run, day, bucket, allocs, bytes, ver)",
    [T_RX] = "INSERT INTO run_exact (run, day, flags, allocs, frees, alloc_bytes, free_bytes, "
             "live_bytes, peak_bytes, peak_t_ns, error_bytes, est_peak_bytes, est_peak_t_ns, ver)",
    [T_HX] = "INSERT INTO heap_exact (run, day, bucket, live_bytes, max_bytes, max_t_ns, allocs, "
             "frees, ver)",
    [T_LABELS] = "INSERT INTO run_labels (run, day, key, value, ver)",
    [T_MAPS] = "INSERT INTO mappings (run, day, t_ns, start, end, file_offset, build_id, path)",
    [T_PCS] = "INSERT INTO run_pcs (run, day, pc, frame)",
    [T_STACKS] = "INSERT INTO run_stacks (run, day, stack_id, trace)",
    [T_TSTATS] = "INSERT INTO trace_stats (run, day, trace, mark, rows, first_bucket, last_bucket, "
                 "bytes, max_bytes, ups, first_up, last_up, up_bytes, down_bytes, sy, sxy, syy)",
    [T_RUNS] =
        "INSERT INTO runs (id, uuid, parent_uuid, parent_id, has_parent, program, argv, "
        "host, pid, ppid, start_unix_ns, sample_bytes, max_depth, rss_interval_ms, "
        "granularity_ns, keyframe_every, collector_version, state, clean_exit, end_ns, "
        "next_seq, alloc_events, free_events, bye_alloc_events, has_bye_alloc, "
        "bye_free_events, has_bye_free, dropped_alloc_events, dropped_free_events, "
        "dropped_alloc_bytes, dropped_free_bytes, stacks_truncated, unwind_failed, "
        "live_set_full, peak_bytes, peak_count, peak_t_ns, live_bytes, live_count, "
        "total_alloc_bytes, total_alloc_count, python_fallback, main_end_ns, "
        "python_small_unseen, stats_bucket, day, ver, key_sha, front, has_rss, rss_peak_bytes, "
        "has_leak, leak_bytes_per_s)",
};

/* A per-run table: its SELECT (?1 the local run, ?2 the watermark), the
 * RowBinary of each row (fmt, below) and which column is the watermark
 * (-1: none; the table is shipped whole when the run changed). fmt: R the
 * run's id, D its day, V the pass's version (no column read); i Int64,
 * u UInt64, d Float64, b Int8, c Int32 the codec (the file's schema
 * version), s String (text or blob, NULL as ''), F a frame's and T a
 * trace's content id (one column each). */
typedef struct per_run {
    int table;
    const char *sql, *fmt;
    int wm_col;
} per_run;

static const per_run per_runs[] = {
    {T_EVENTS,
     "SELECT seq, t_first_ns, t_last_ns, n_events, data FROM events WHERE run = ?1 AND seq > ?2 "
     "ORDER BY seq LIMIT 4096",
     "RDiiiics", 0}, /* at most 4096 rows a pass: a backlog goes in steps */
    /* an open run's last segment, shipped again whenever it grew: frames are
     * acknowledged once shipped, events_tail's included. It keeps its seq
     * when it closes into events, so ClickHouse keeps one row (the last
     * inserted: the closed segment always comes after its open states). */
    {T_EVENTS,
     "SELECT seq, t_first_ns, t_last_ns, n_events, data FROM events_tail WHERE run = ?1 AND ?2 = "
     "?2",
     "RDiiiics", -1},
    {T_SNAP,
     "SELECT kind, bucket, trace, bytes, count FROM snapshots WHERE run = ?1 AND kind IN "
     "(" HS_SNAP_DELTA_SQL ", " HS_SNAP_KEYFRAME_SQL ") AND bucket > ?2",
     "RDbiTiiV", 1},
    {T_SNAP,
     "SELECT kind, bucket, trace, bytes, count FROM snapshots WHERE run = ?1 AND kind = "
     "" HS_SNAP_PEAK_SQL " AND ?2 = ?2",
     "RDbiTiiV", -1},
    {T_SERIES,
     "SELECT bucket, live_bytes, live_count, max_bytes, alloc_bytes, free_bytes FROM heap_series "
     "WHERE run = ?1 AND bucket > ?2",
     "RDiiiiiiV", 0},
    {T_PS, "SELECT t_ns, rss_bytes, vsize_bytes FROM process_samples WHERE run = ?1 AND t_ns > ?2",
     "RDiii", 0},
    {T_SIZES, "SELECT bucket, allocs, bytes FROM size_hist WHERE run = ?1 AND ?2 = ?2", "RDiiiV",
     -1},
    {T_RX,
     "SELECT flags, allocs, frees, alloc_bytes, free_bytes, live_bytes, peak_bytes, peak_t_ns, "
     "error_bytes, est_peak_bytes, est_peak_t_ns FROM run_exact WHERE run = ?1 AND ?2 = ?2",
     "RDiiiiiiiiiiiV", -1},
    {T_HX,
     "SELECT bucket, live_bytes, max_bytes, max_t_ns, allocs, frees FROM heap_exact WHERE run = "
     "?1 AND bucket >= ?2",
     "RDiiiiiiV", 0},
    {T_LABELS, "SELECT key, value FROM run_labels WHERE run = ?1 AND ?2 = ?2", "RDssV", -1},
    {T_MAPS,
     "SELECT t_ns, start, end, file_offset, build_id, path FROM mappings WHERE run = ?1 AND t_ns "
     "> ?2",
     "RDiuuuss", 0},
    {T_PCS, "SELECT pc, frame FROM run_pcs WHERE run = ?1 AND ?2 = ?2", "RDuF", -1},
    {T_STACKS, "SELECT stack_id, trace FROM run_stacks WHERE run = ?1 AND ?2 = ?2", "RDuT", -1},
    /* the summaries written since mark ?2, labelled with the run's mark now */
    {T_TSTATS,
     "SELECT trace, (SELECT coalesce(stats_bucket, -1) FROM runs WHERE id = ?1), rows, "
     "first_bucket, last_bucket, bytes, max_bytes, ups, first_up, last_up, up_bytes, "
     "down_bytes, sy, sxy, syy FROM trace_stats WHERE run = ?1 AND last_bucket > ?2",
     "RDTiiiiiiiiiddddd", -1},
};
/* ---- ids -------------------------------------------------------------------- */

static int64_t mapped(const hs_map *m, int64_t local)
{
    uint64_t v = 0;
    if (local && !hs_map_get(m, (uint64_t)local, &v)) return 0;
    return (int64_t)v;
}

#define run_content_id hs__chship_run_id

/* A local id given its content id by this pass (for the marks file). */
static int newid(hs_chship *s, char kind, int64_t local, uint64_t content)
{
    if (s->nnewids == s->capnewids) {
        size_t cap = s->capnewids ? s->capnewids * 2 : 256;
        ship_newid *np = realloc(s->newids, cap * sizeof *np);
        if (!np) return HS_ENOMEM;
        s->newids = np;
        s->capnewids = cap;
    }
    s->newids[s->nnewids++] = (ship_newid){kind, local, (int64_t)content};
    return 0;
}

/* ---- one per-run table ---------------------------------------------------------- */

/* Appends the row st is on, from column col, to b as fmt says. */
static void put_row(hs_chship *s, sqlite3_stmt *st, int col, const char *fmt, const ship_run *r,
                    hs_buf *b)
{
    for (const char *f = fmt; *f; f++) {
        switch (*f) {
        case 'R':
            hs_rb_i64(b, r->id);
            break;
        case 'D':
            hs_buf_put(b, &r->day, 2);
            break;
        case 'V':
            hs_rb_u64(b, s->ver);
            break;
        case 'i':
            hs_rb_i64(b, sqlite3_column_int64(st, col++));
            break;
        case 'u':
            hs_rb_u64(b, (uint64_t)sqlite3_column_int64(st, col++));
            break;
        case 'd':
            hs_rb_f64(b, sqlite3_column_double(st, col++));
            break;
        case 'b':
            hs_rb_u8(b, (uint8_t)sqlite3_column_int(st, col++));
            break;
        case 'c': {
            int32_t v = s->codec;
            hs_buf_put(b, &v, 4);
            break;
        }
        case 's': {
            const void *p = sqlite3_column_blob(st, col);
            hs_rb_str(b, p ? p : "", (size_t)sqlite3_column_bytes(st, col));
            col++;
            break;
        }
        case 'F':
            hs_rb_i64(b, mapped(&s->frame_id, sqlite3_column_int64(st, col++)));
            break;
        case 'T':
            hs_rb_i64(b, mapped(&s->node_id, sqlite3_column_int64(st, col++)));
            break;
        default:
            assert(0 && "unknown format letter");
        }
    }
}

/* Ships the rows of per-run table k of run r past *wm; *wm becomes the
 * highest watermark read. */
static int ship_table(hs_chship *s, int k, const ship_run *r, int64_t *wm)
{
    const per_run *p = &per_runs[k];
    sqlite3_stmt *st = s->per[k];
    sqlite3_reset(st);
    sqlite3_bind_int64(st, 1, r->local);
    sqlite3_bind_int64(st, 2, wm ? *wm : 0);
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        put_row(s, st, 0, p->fmt, r, &s->out[p->table]);
        s->nrows[p->table]++;
        if (p->wm_col >= 0 && wm) {
            int64_t v = sqlite3_column_int64(st, p->wm_col);
            if (v > *wm) *wm = v;
        }
    }
    sqlite3_reset(st);
    return rc == SQLITE_DONE ? 0 : HS_EDB;
}

static int64_t count_rows(sqlite3_stmt *st, int64_t run)
{
    sqlite3_reset(st);
    sqlite3_bind_int64(st, 1, run);
    int64_t n = sqlite3_step(st) == SQLITE_ROW ? sqlite3_column_int64(st, 0) : -1;
    sqlite3_reset(st);
    return n;
}

/* ---- frames and trace nodes ------------------------------------------------------ */

static int unnamed_add(hs_chship *s, int64_t local);

static int ship_frames(hs_chship *s, int64_t *wm)
{
    sqlite3_stmt *st = s->frames;
    sqlite3_reset(st);
    sqlite3_bind_int64(st, 1, *wm);
    int rc;
    hs_buf *b = &s->out[T_FRAMES];
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        int64_t local = sqlite3_column_int64(st, 0);
        const void *key = sqlite3_column_blob(st, 1);
        uint64_t id = hs_ch_hash(key ? key : "", (size_t)sqlite3_column_bytes(st, 1), 0x66);
        if (hs_map_put(&s->frame_id, (uint64_t)local, id) || newid(s, 'f', local, id))
            return HS_ENOMEM;
        hs_rb_i64(b, (int64_t)id);
        ship_run none = {0};
        put_row(s, st, 1, "sssisiV", &none, b);
        s->nrows[T_FRAMES]++;
        *wm = local;
        if (!sqlite3_column_bytes(st, 2) && unnamed_add(s, local)) return HS_ENOMEM;
        if (!sqlite3_column_bytes(st, 2)) s->unnamed_dirty = 1;
    }
    sqlite3_reset(st);
    return rc == SQLITE_DONE ? 0 : HS_EDB;
}

static int unnamed_add(hs_chship *s, int64_t local)
{
    for (size_t i = 0; i < s->nunnamed; i++)
        if (s->unnamed[i] == local) return 0; /* a pass sent again */
    if (s->nunnamed == s->capunnamed) {
        size_t cap = s->capunnamed ? s->capunnamed * 2 : 64;
        int64_t *np = realloc(s->unnamed, cap * sizeof *np);
        if (!np) return HS_ENOMEM;
        s->unnamed = np;
        s->capunnamed = cap;
    }
    s->unnamed[s->nunnamed++] = local;
    return 0;
}

/* Frames the symbolizer named after they were shipped unnamed (server/
 * hs_refill.h names rows in place): sent again under the content id they
 * were first shipped with, with this pass's version, so that the named row
 * replaces the unnamed one. The cheap count tells when to look. */
static int ship_renamed(hs_chship *s)
{
    if (!s->nunnamed) return 0;
    sqlite3_reset(s->nunnamed_st);
    sqlite3_bind_int64(s->nunnamed_st, 1, s->wm_frame);
    int64_t still =
        sqlite3_step(s->nunnamed_st) == SQLITE_ROW ? sqlite3_column_int64(s->nunnamed_st, 0) : -1;
    sqlite3_reset(s->nunnamed_st);
    if (still < 0) return HS_EDB;
    if ((size_t)still >= s->nunnamed) return 0;
    hs_buf *b = &s->out[T_FRAMES];
    for (size_t i = 0; i < s->nunnamed;) {
        sqlite3_stmt *st = s->frame;
        sqlite3_reset(st);
        sqlite3_bind_int64(st, 1, s->unnamed[i]);
        int named = sqlite3_step(st) == SQLITE_ROW && sqlite3_column_bytes(st, 2) > 0;
        if (named) {
            ship_run none = {0};
            hs_rb_i64(b, mapped(&s->frame_id, s->unnamed[i]));
            put_row(s, st, 1, "sssisiV", &none, b);
            s->nrows[T_FRAMES]++;
            s->unnamed[i] = s->unnamed[--s->nunnamed];
            s->unnamed_dirty = 1;
        } else {
            i++;
        }
        sqlite3_reset(st);
    }
    return 0;
}

static int ship_traces(hs_chship *s, int64_t *wm)
{
    sqlite3_stmt *st = s->traces;
    sqlite3_reset(st);
    sqlite3_bind_int64(st, 1, *wm);
    int rc;
    hs_buf *b = &s->out[T_TRACES];
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        int64_t local = sqlite3_column_int64(st, 0);
        int64_t parent = mapped(&s->node_id, sqlite3_column_int64(st, 1));
        int64_t frame = mapped(&s->frame_id, sqlite3_column_int64(st, 2));
        /* a node's parent and frame are older rows: shipped, hence mapped */
        assert(frame && (parent || !sqlite3_column_int64(st, 1)));
        int64_t pf[2] = {parent, frame};
        uint64_t id = hs_ch_hash(pf, sizeof pf, 0x74);
        if (hs_map_put(&s->node_id, (uint64_t)local, id) || newid(s, 't', local, id))
            return HS_ENOMEM;
        hs_rb_i64(b, (int64_t)id);
        hs_rb_i64(b, parent);
        hs_rb_i64(b, frame);
        int32_t depth = sqlite3_column_int(st, 3);
        hs_buf_put(b, &depth, 4);
        s->nrows[T_TRACES]++;
        *wm = local;
    }
    sqlite3_reset(st);
    return rc == SQLITE_DONE ? 0 : HS_EDB;
}

/* ---- runs --------------------------------------------------------------------------- */

#define RUN_SELECT                                                                                 \
    "SELECT id, uuid, parent_uuid, parent_id IS NOT NULL, program, argv, host, pid, ppid, "        \
    "start_unix_ns, sample_bytes, max_depth, rss_interval_ms, granularity_ns, keyframe_every, "    \
    "collector_version, state, coalesce(clean_exit, -1), coalesce(end_ns, 0), next_seq, "          \
    "alloc_events, free_events, coalesce(bye_alloc_events, 0), bye_alloc_events IS NOT NULL, "     \
    "coalesce(bye_free_events, 0), bye_free_events IS NOT NULL, dropped_alloc_events, "            \
    "dropped_free_events, dropped_alloc_bytes, dropped_free_bytes, stacks_truncated, "             \
    "unwind_failed, live_set_full, peak_bytes, peak_count, peak_t_ns, live_bytes, live_count, "    \
    "total_alloc_bytes, total_alloc_count, python_fallback, coalesce(main_end_ns, 0), "            \
    "python_small_unseen, coalesce(stats_bucket, -1), resume_key, rss_peak_bytes IS NOT NULL, "    \
    "coalesce(rss_peak_bytes, 0), leak_bytes_per_s IS NOT NULL, coalesce(leak_bytes_per_s, 0) "    \
    "FROM runs"
#define RUN_NCOLS    49
#define RUN_COL_MARK 43 /* stats_bucket */
#define RUN_COL_KEY  44 /* resume_key: shipped as its SHA-256 */
#define RUN_FMT      "sssiiiiiiiissbiiiiibibiiiiiiiiiiiiiiiiiiDV"

static void put_hex(hs_buf *b, const uint8_t *p, int n)
{
    char hex[2 * 32 + 1];
    int k = 0;
    for (int i = 0; i < n && i < 32; i++) k += snprintf(hex + k, 3, "%02x", p[i]);
    hs_rb_str(b, hex, (size_t)k);
}

static void put_run(hs_chship *s, sqlite3_stmt *st, const ship_run *r)
{
    hs_buf *b = &s->out[T_RUNS];
    const uint8_t *pu = sqlite3_column_blob(st, 2);
    int npu = sqlite3_column_bytes(st, 2);
    hs_rb_i64(b, r->id);
    put_hex(b, sqlite3_column_blob(st, 1), sqlite3_column_bytes(st, 1));
    put_hex(b, pu, pu ? npu : 0);
    int has_parent = sqlite3_column_int(st, 3) && pu;
    hs_rb_i64(b, has_parent ? run_content_id(pu, npu) : 0);
    hs_rb_u8(b, (uint8_t)has_parent);
    put_row(s, st, 4, RUN_FMT, r, b);
    const void *key = sqlite3_column_blob(st, RUN_COL_KEY);
    int nkey = sqlite3_column_bytes(st, RUN_COL_KEY);
    uint8_t sha[SHA256_DIGEST_LENGTH];
    if (key && nkey) SHA256(key, (size_t)nkey, sha);
    put_hex(b, sha, key && nkey ? (int)sizeof sha : 0);
    hs_rb_u64(b, s->front);
    put_row(s, st, RUN_COL_KEY + 1, "bibd", r, b); /* the summary figures of an ended run */
    s->nrows[T_RUNS]++;
}

/* The run of the row st is on (added at first sight; started over when
 * its local id now names another run: a pruned run's id taken again). */
static ship_run *run_get(hs_chship *s, sqlite3_stmt *st)
{
    int64_t local = sqlite3_column_int64(st, 0);
    int64_t id = run_content_id(sqlite3_column_blob(st, 1), sqlite3_column_bytes(st, 1));
    uint64_t i;
    ship_run *r = NULL;
    if (hs_map_get(&s->run_idx, (uint64_t)local, &i)) {
        r = &s->rs[i];
        if (r->id == id) return r;
    } else {
        if (s->nrs == s->caprs) {
            size_t cap = s->caprs ? s->caprs * 2 : 64;
            ship_run *np = realloc(s->rs, cap * sizeof *np);
            if (!np) return NULL;
            s->rs = np;
            s->caprs = cap;
        }
        if (hs_map_put(&s->run_idx, (uint64_t)local, s->nrs)) return NULL;
        r = &s->rs[s->nrs++];
    }
    int64_t start = sqlite3_column_int64(st, 9);
    *r = (ship_run){.local = local,
                    .id = id,
                    .day = (uint16_t)(start > 0 ? start / 86400000000000ll : 0),
                    .seq = -1,
                    .snap = -1,
                    .series = -1,
                    .ps = INT64_MIN,
                    .hx = -1,
                    .mapt = INT64_MIN,
                    .npcs = -1,
                    .nstacks = -1,
                    .stats = -1};
    return r;
}

static uint64_t row_sig(sqlite3_stmt *st)
{
    uint64_t h = 0;
    for (int i = 0; i < RUN_NCOLS; i++) {
        const void *p = sqlite3_column_blob(st, i);
        h = hs_ch_hash(p ? p : "", (size_t)sqlite3_column_bytes(st, i), h);
    }
    return h;
}

/* A hash of the row (first ncols columns) that st, bound to the run, reads;
 * 0 when it reads none. */
static uint64_t row_hash(sqlite3_stmt *st, int64_t run, int ncols)
{
    sqlite3_reset(st);
    sqlite3_bind_int64(st, 1, run);
    uint64_t h = 0;
    if (sqlite3_step(st) == SQLITE_ROW)
        for (int i = 0; i < ncols; i++) {
            const void *p = sqlite3_column_blob(st, i);
            h = hs_ch_hash(p ? p : "", (size_t)sqlite3_column_bytes(st, i), h);
        }
    sqlite3_reset(st);
    return h;
}

/* The peak snapshot changes as a whole (rewritten when the peak moves):
 * its rows are shipped again, all with one new version, when this changes. */
static uint64_t peak_sig(hs_chship *s, int64_t run)
{
    return row_hash(s->peaksig, run, 3);
}

/* The open segment changes as it grows: shipped again when this changes. */
static uint64_t tail_sig(hs_chship *s, int64_t run)
{
    return row_hash(s->tailsig, run, 3);
}

/* The rows of run r that changed, into the buffers; nr gets r's new
 * watermarks (applied once the pass has landed). *more when a table had
 * more rows than one pass takes. */
static int ship_run_rows(hs_chship *s, sqlite3_stmt *row, const ship_run *r, ship_run *nr,
                         int *more)
{
    *nr = *r;
    int rc = 0;
    int64_t none = 0;
    uint64_t nevents = s->nrows[T_EVENTS];
    rc = ship_table(s, PR_EVENTS, r, &nr->seq);
    if (!rc && s->nrows[T_EVENTS] - nevents >= 4096) *more = 1;
    uint64_t ts = tail_sig(s, r->local);
    if (!rc && !*more && ts != r->tail_sig) {
        if (ts) rc = ship_table(s, PR_TAIL, r, &none);
        nr->tail_sig = ts;
    }
    if (!rc) rc = ship_table(s, PR_SNAP, r, &nr->snap);
    uint64_t ps = peak_sig(s, r->local);
    if (!rc && ps != r->peak_sig) {
        rc = ship_table(s, PR_PEAK, r, &none);
        nr->peak_sig = ps;
    }
    if (!rc) rc = ship_table(s, PR_SERIES, r, &nr->series);
    if (!rc) rc = ship_table(s, PR_PS, r, &nr->ps);
    if (!rc) rc = ship_table(s, PR_SIZES, r, &none);
    if (!rc) rc = ship_table(s, PR_RX, r, &none);
    if (!rc) rc = ship_table(s, PR_HX, r, &nr->hx);
    if (!rc) rc = ship_table(s, PR_LABELS, r, &none);
    if (!rc) rc = ship_table(s, PR_MAPS, r, &nr->mapt);
    int64_t n = count_rows(s->npcs, r->local);
    if (!rc && n != r->npcs) {
        rc = ship_table(s, PR_PCS, r, &none);
        nr->npcs = n;
    }
    n = count_rows(s->nstacks, r->local);
    if (!rc && n != r->nstacks) {
        rc = ship_table(s, PR_STACKS, r, &none);
        nr->nstacks = n;
    }
    /* summaries: those rewritten since the last mark shipped (all of them
     * when the mark went back: the run's rollups were rebuilt) */
    int64_t mark = sqlite3_column_int64(row, RUN_COL_MARK);
    if (!rc && mark != r->stats) {
        int64_t since = mark < r->stats ? -1 : r->stats;
        rc = ship_table(s, PR_TSTATS, r, &since);
        nr->stats = mark;
    }
    if (!rc && !*more) {
        put_run(s, row, r);
        nr->sig = row_sig(row);
        nr->next_seq = sqlite3_column_int64(row, 19);
        const char *state = (const char *)sqlite3_column_text(row, 16);
        nr->ended = state && strcmp(state, "open") != 0;
        nr->quiet_ns = hs_clock_ns(CLOCK_REALTIME);
        nr->pruning = 0; /* a change: its removal is judged afresh */
    }
    return rc;
}

typedef struct pending {
    size_t idx;
    ship_run nr;
} pending;

/* Runs another front end carries on (a collector that resumed there):
 * ClickHouse's row of run cand[i] names another front end and has come at
 * least as far (next_seq) as this buffer. Those are marked moved and not
 * shipped while that holds: the other front end's rows are as new as
 * anything this buffer holds of them (a run fetched back at a resumption,
 * hs_chship_resume, is shipped from here again once it has gone further). */
static int check_moved(hs_chship *s, const size_t *cand, const int64_t *next, size_t n)
{
    if (!n) return 0;
    for (size_t i = 0; i < n; i++) s->rs[cand[i]].moved = 0;
    hs_buf q = {0}, ans = {0};
    hs_buf_printf(&q, "SELECT id, argMax(front, ver), max(next_seq) FROM runs WHERE id IN (");
    for (size_t i = 0; i < n; i++) hs_buf_printf(&q, "%s%" PRId64, i ? "," : "", s->rs[cand[i]].id);
    hs_buf_printf(&q, ") GROUP BY id");
    char err[256];
    int rc = q.oom ? HS_ENOMEM : hs_ch_query(s->ch, q.p, NULL, 0, &ans, err, sizeof err);
    hs_tsv t;
    if (!rc) hs_tsv_init(&t, &ans);
    while (!rc && hs_tsv_row(&t)) {
        int64_t id = hs_tsv_i64(&t, NULL);
        uint64_t front = (uint64_t)hs_tsv_i64(&t, NULL);
        int64_t seq = hs_tsv_i64(&t, NULL);
        for (size_t i = 0; i < n; i++) {
            ship_run *r = &s->rs[cand[i]];
            if (r->id != id || front == s->front || seq < next[i]) continue;
            r->ours = -1;
            if (!r->moved)
                hs_log("run %" PRId64 " is carried on by another front end: not shipped from "
                       "here while it holds more of it",
                       id);
            r->moved = 1;
        }
    }
    for (size_t i = 0; !rc && i < n; i++) { /* the others are this front end's */
        ship_run *r = &s->rs[cand[i]];
        r->ours = r->ours < 0 ? 0 : 1;
    }
    hs_buf_free(&q);
    hs_buf_free(&ans);
    return rc;
}

/* Step one of a pass: the runs whose row changed (into *cand), checked
 * against ClickHouse (check_moved) unless this front end found them its own
 * before and they are still open: an open run's row changes here only with
 * frames its collector sends here, and a run moves only when its collector
 * has left (then its row changes no more, until it is closed as lost). */
static int changed_runs(hs_chship *s, size_t **cand, size_t *n)
{
    sqlite3_stmt *st = s->runs;
    sqlite3_reset(st);
    int64_t *next = NULL;
    size_t cap = 0, *chk = NULL, nchk = 0;
    int rc = 0, sr;
    while ((sr = sqlite3_step(st)) == SQLITE_ROW) {
        ship_run *r = run_get(s, st);
        if (!r) {
            rc = HS_ENOMEM;
            break;
        }
        if (r->sig == row_sig(st)) continue;
        if (*n == cap) {
            cap = cap ? cap * 2 : 16;
            size_t *nc = realloc(*cand, cap * sizeof *nc);
            size_t *nk = nc ? realloc(chk, cap * sizeof *nk) : NULL;
            int64_t *nn = nk ? realloc(next, cap * sizeof *nn) : NULL;
            if (nc) *cand = nc;
            if (nk) chk = nk;
            if (!nn) {
                rc = HS_ENOMEM;
                break;
            }
            next = nn;
        }
        (*cand)[(*n)++] = (size_t)(r - s->rs);
        const char *state = (const char *)sqlite3_column_text(st, 16);
        if (r->ours > 0 && state && !strcmp(state, "open")) continue;
        next[nchk] = sqlite3_column_int64(st, 19);
        chk[nchk++] = (size_t)(r - s->rs);
    }
    if (!rc && sr != SQLITE_DONE) rc = HS_EDB;
    sqlite3_reset(st);
    if (!rc) rc = check_moved(s, chk, next, nchk);
    free(next);
    free(chk);
    return rc;
}

/* Reads every change into the buffers (one read transaction). */
static int collect(hs_chship *s, pending **pend, size_t *npend, int64_t *wf, int64_t *wt)
{
    if (sqlite3_exec(s->db, "BEGIN", NULL, NULL, NULL) != SQLITE_OK) return HS_EDB;
    size_t *cand = NULL, ncand = 0;
    int rc = changed_runs(s, &cand, &ncand);
    if (!rc) rc = ship_frames(s, wf);
    if (!rc) rc = ship_renamed(s);
    if (!rc) rc = ship_traces(s, wt);
    sqlite3_stmt *st = s->runs;
    sqlite3_reset(st);
    int sr = SQLITE_DONE;
    size_t k = 0; /* cand is in the order of the rows */
    if (ncand && !(*pend = malloc(ncand * sizeof **pend))) rc = HS_ENOMEM;
    while (!rc && k < ncand && (sr = sqlite3_step(st)) == SQLITE_ROW) {
        ship_run *r = &s->rs[cand[k]];
        if (sqlite3_column_int64(st, 0) != r->local) continue;
        k++;
        if (r->moved || r->sig == row_sig(st)) continue;
        pending *p = &(*pend)[(*npend)++];
        p->idx = (size_t)(r - s->rs);
        int more = 0;
        rc = ship_run_rows(s, st, r, &p->nr, &more);
    }
    if (!rc && sr != SQLITE_DONE && sr != SQLITE_ROW) rc = HS_EDB;
    sqlite3_reset(st);
    sqlite3_exec(s->db, "COMMIT", NULL, NULL, NULL);
    free(cand);
    return rc;
}

static int ensure_schema(hs_chship *s, char *err, size_t errlen)
{
    if (s->schema_ok) return 0;
    int rc = hs_ch_create_database(s->ch, err, errlen);
    /* statements are separated by lines holding only ';' */
    const char *p = hs_ch_schema_sql;
    while (!rc && *p) {
        const char *end = strstr(p, "\n;\n");
        size_t n = end ? (size_t)(end - p) : strlen(p);
        char *stmt = strndup(p, n);
        if (!stmt) return HS_ENOMEM;
        if (strstr(stmt, "CREATE")) rc = hs_ch_query(s->ch, stmt, NULL, 0, NULL, err, errlen);
        free(stmt);
        p = end ? end + 3 : p + n;
    }
    if (!rc) s->schema_ok = 1;
    return rc;
}

/* Ended runs whose every row ClickHouse holds (or that another front end
 * carried on) leave the buffer keep_ns after their last change: the
 * writer removes them (hs_store_gc, between its batches; it never removes
 * an open run, so a run resumed meanwhile stays). A run resumed later is
 * fetched back from ClickHouse (hs_chship_resume). */
static void prune_shipped(hs_chship *s)
{
    if (s->keep_ns < 0) return;
    uint64_t now = hs_clock_ns(CLOCK_REALTIME);
    for (size_t i = 0; i < s->nrs; i++) {
        ship_run *r = &s->rs[i];
        int shipped = r->ended && r->next_seq > 0 && now - r->quiet_ns >= (uint64_t)s->keep_ns;
        if (r->pruning > now || !(shipped || r->moved)) continue;
        pthread_mutex_lock(&s->mu);
        int (*fn)(void *, int64_t) = s->prune;
        void *data = s->prune_data;
        s->in_prune = fn != NULL;
        pthread_mutex_unlock(&s->mu);
        if (!fn) return;
        int rc = fn(data, r->local);
        pthread_mutex_lock(&s->mu);
        s->in_prune = 0;
        pthread_cond_broadcast(&s->cv);
        pthread_mutex_unlock(&s->mu);
        if (rc == 0) {
            r->pruning = UINT64_MAX; /* gone */
            hs__chmarks_forget(s, r->local);
            s->stats.pruned++;
        } else {
            r->pruning = now + 10000000000ull; /* still open here: later */
        }
    }
}

int hs_chship_pass(hs_chship *s, char *err, size_t errlen)
{
    int rc = ensure_schema(s, err, errlen);
    if (rc) {
        s->stats.passes++;
        s->stats.failed++;
        return rc;
    }
    uint64_t now = hs_clock_ns(CLOCK_REALTIME);
    s->ver = now > s->ver ? now : s->ver + 1;
    pending *pend = NULL;
    size_t npend = 0;
    int64_t wf = s->wm_frame, wt = s->wm_trace;
    for (int t = 0; t < T__COUNT; t++) s->out[t].n = s->nrows[t] = 0;
    s->nnewids = 0;
    rc = collect(s, &pend, &npend, &wf, &wt);
    if (rc) snprintf(err, errlen, "reading the buffer: %s", sqlite3_errmsg(s->db));
    uint64_t rows = 0, bytes = 0;
    for (int t = 0; !rc && t < T__COUNT; t++) {
        if (s->out[t].oom) rc = HS_ENOMEM;
        if (rc || !s->nrows[t]) continue;
        char sql[1024];
        snprintf(sql, sizeof sql, "%s FORMAT RowBinary", insert_sql[t]);
        rc = hs_ch_query(s->ch, sql, s->out[t].p, s->out[t].n, NULL, err, errlen);
        rows += s->nrows[t];
        bytes += s->out[t].n;
    }
    if (!rc) {
        s->wm_frame = wf;
        s->wm_trace = wt;
        pthread_mutex_lock(&s->mu);
        for (size_t i = 0; i < npend; i++) {
            s->rs[pend[i].idx] = pend[i].nr;
            const ship_run *r = &pend[i].nr;
            if (r->next_seq > 0 && hs_map_put(&s->shipped, (uint64_t)r->id, (uint64_t)r->next_seq))
                rc = HS_ENOMEM; /* the next pass sends it again */
        }
        if (npend && s->notify) s->notify(s->notify_data);
        pthread_mutex_unlock(&s->mu);
        s->stats.rows += rows;
        s->stats.bytes += bytes;
        size_t *idx = npend ? malloc(npend * sizeof *idx) : NULL;
        for (size_t i = 0; idx && i < npend; i++) idx[i] = pend[i].idx;
        if (idx || !npend) hs__chmarks_save(s, idx, npend);
        free(idx);
        prune_shipped(s);
    } else {
        s->stats.failed++;
    }
    s->stats.passes++;
    free(pend);
    for (int t = 0; t < T__COUNT; t++)
        if (s->out[t].cap > (16u << 20)) hs_buf_free(&s->out[t]); /* a backlog's buffers */
    return rc;
}

uint64_t hs_chship_shipped(hs_chship *s, const uint8_t uuid[16])
{
    uint64_t v = 0;
    pthread_mutex_lock(&s->mu);
    if (!hs_map_get(&s->shipped, (uint64_t)run_content_id(uuid, 16), &v)) v = 0;
    pthread_mutex_unlock(&s->mu);
    return v;
}

void hs_chship_set_notify(hs_chship *s, void (*fn)(void *data), void *data)
{
    pthread_mutex_lock(&s->mu);
    s->notify = fn;
    s->notify_data = data;
    pthread_mutex_unlock(&s->mu);
}

int64_t hs_chship_content_id(hs_chship *s, char kind, int64_t local)
{
    uint64_t i;
    if (kind == 'r') return hs_map_get(&s->run_idx, (uint64_t)local, &i) ? s->rs[i].id : 0;
    return mapped(kind == 't' ? &s->node_id : &s->frame_id, local);
}

void hs_chship_set_pruner(hs_chship *s, int (*fn)(void *data, int64_t local_run), void *data)
{
    pthread_mutex_lock(&s->mu);
    s->prune = fn;
    s->prune_data = data;
    while (s->in_prune) pthread_cond_wait(&s->cv, &s->mu); /* a call under way ends first */
    pthread_mutex_unlock(&s->mu);
}

void hs_chship_get_stats(hs_chship *s, hs_chship_stats *out)
{
    *out = s->stats;
}

/* ---- retention ------------------------------------------------------------------------------ */

static const char *const per_run_tables[] = {
    "runs",      "run_labels", "mappings",    "run_pcs",         "run_stacks",
    "events",    "snapshots",  "heap_series", "process_samples", "size_hist",
    "run_exact", "heap_exact", "trace_stats"};

typedef struct retain_arg {
    int cutoff; /* YYYYMM: older partitions go */
    int *dropped;
} retain_arg;

/* Retention on one server's tables (sfx "") or one shard's ("_local"). */
static int retain_on(hs_ch *ch, const char *sfx, void *arg, char *err, size_t errlen)
{
    retain_arg *a = arg;
    int rc = 0;
    for (size_t i = 0; !rc && i < sizeof per_run_tables / sizeof *per_run_tables; i++) {
        char sql[400];
        hs_buf ans = {0};
        snprintf(sql, sizeof sql,
                 "SELECT DISTINCT partition FROM system.parts WHERE database = currentDatabase() "
                 "AND table = '%s%s' AND active AND toUInt32OrZero(partition) < %d",
                 per_run_tables[i], sfx, a->cutoff);
        rc = hs_ch_query(ch, sql, NULL, 0, &ans, err, errlen);
        for (char *p = ans.p, *nl; !rc && p && *p; p = nl + 1) {
            if (!(nl = strchr(p, '\n'))) break;
            *nl = 0;
            snprintf(sql, sizeof sql, "ALTER TABLE %s%s DROP PARTITION %ld", per_run_tables[i], sfx,
                     strtol(p, NULL, 10));
            if (!(rc = hs_ch_query(ch, sql, NULL, 0, NULL, err, errlen))) (*a->dropped)++;
        }
        hs_buf_free(&ans);
    }
    return rc;
}

int hs_chship_retain(hs_chship *s, int months, int *dropped, char *err, size_t errlen)
{
    assert(months > 0);
    *dropped = 0;
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    int ym = (tm.tm_year + 1900) * 12 + tm.tm_mon - months; /* months since year 0 */
    retain_arg a = {(ym / 12) * 100 + ym % 12 + 1, dropped};
    int rc = ensure_schema(s, err, errlen);
    /* a partition is dropped on the server that holds it: on a cluster,
     * every shard's own tables */
    if (!rc) rc = hs__chship_each_shard(s->ch, "retention", retain_on, &a, err, errlen);
    return rc;
}

void hs_chship_set_retention(hs_chship *s, int months)
{
    s->retain_months = months;
}

/* ---- open / close ------------------------------------------------------------------------ */

static int prepare(hs_chship *s, sqlite3_stmt **st, const char *sql)
{
    return sqlite3_prepare_v3(s->db, sql, -1, SQLITE_PREPARE_PERSISTENT, st, NULL) == SQLITE_OK
               ? 0
               : HS_EDB;
}

static int prepare_all(hs_chship *s)
{
    int rc = 0;
    for (int k = 0; !rc && k < PR__COUNT; k++) rc = prepare(s, &s->per[k], per_runs[k].sql);
    if (!rc)
        rc = prepare(s, &s->frames,
                     "SELECT id, key, function, file, line, module, module_offset FROM frames "
                     "WHERE id > ?1 ORDER BY id");
    if (!rc)
        rc = prepare(s, &s->frame,
                     "SELECT id, key, function, file, line, module, module_offset FROM frames "
                     "WHERE id = ?1");
    if (!rc)
        rc = prepare(s, &s->nunnamed_st,
                     "SELECT count(*) FROM frames WHERE function = '' AND id <= ?1");
    if (!rc)
        rc = prepare(s, &s->traces,
                     "SELECT id, parent, frame, depth FROM traces WHERE id > ?1 ORDER BY id");
    if (!rc) rc = prepare(s, &s->runs, RUN_SELECT " ORDER BY id");
    if (!rc) rc = prepare(s, &s->npcs, "SELECT count(*) FROM run_pcs WHERE run = ?1");
    if (!rc) rc = prepare(s, &s->nstacks, "SELECT count(*) FROM run_stacks WHERE run = ?1");
    if (!rc)
        rc = prepare(s, &s->peaksig,
                     "SELECT count(*), total(bytes), max(bucket) FROM snapshots WHERE run = ?1 "
                     "AND kind = " HS_SNAP_PEAK_SQL);
    if (!rc)
        rc = prepare(s, &s->tailsig,
                     "SELECT seq, n_events, length(data) FROM events_tail WHERE run = ?1");
    return rc;
}

int hs_chship_new(hs_chship **out, const char *db_path, const char *url, char *err, size_t errlen)
{
    *out = NULL;
    hs_chship *s = calloc(1, sizeof *s);
    if (!s) return HS_ENOMEM;
    int rc = hs_ch_open(&s->ch, url, err, errlen);
    if (rc) goto fail;
    hs_schema_sql_auto(); /* the traces, snapshots and id maps it ships */
    if (sqlite3_open_v2(db_path, &s->db, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK) {
        snprintf(err, errlen, "cannot open %s: %s", db_path, sqlite3_errmsg(s->db));
        rc = HS_EDB;
        goto fail;
    }
    sqlite3_busy_timeout(s->db, 5000);
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(s->db, "PRAGMA user_version", -1, &st, NULL) == SQLITE_OK) {
        if (sqlite3_step(st) == SQLITE_ROW) s->codec = sqlite3_column_int(st, 0);
        sqlite3_finalize(st);
    }
    if ((rc = prepare_all(s))) {
        snprintf(err, errlen, "cannot read %s: %s", db_path, sqlite3_errmsg(s->db));
        goto fail;
    }
    s->ds_after = hs_ch_front_option(s->ch, "downsample_after");
    s->ds_by = (int)hs_ch_front_option(s->ch, "downsample_by");
    if (s->ds_by < 2) s->ds_by = 60;
    long keep = hs_ch_front_option(s->ch, "buffer_keep");
    s->keep_ns = keep < 0 ? 60 * 1000000000ll : keep * 1000000000ll;
    if (!(s->url = strdup(url)) || (rc = hs__chmarks_open(s, db_path))) {
        rc = HS_ENOMEM;
        snprintf(err, errlen, "out of memory");
        goto fail;
    }
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    *out = s;
    return 0;
fail:
    hs_ch_free(s->ch);
    if (s->db) sqlite3_close_v2(s->db);
    hs__chmarks_close(s);
    free(s->marks_path);
    free(s->url);
    free(s);
    return rc;
}

void hs_chship_free(hs_chship *s)
{
    if (!s) return;
    assert(!s->running);
    for (int k = 0; k < PR__COUNT; k++) sqlite3_finalize(s->per[k]);
    sqlite3_finalize(s->frames);
    sqlite3_finalize(s->traces);
    sqlite3_finalize(s->runs);
    sqlite3_finalize(s->npcs);
    sqlite3_finalize(s->nstacks);
    sqlite3_finalize(s->peaksig);
    sqlite3_finalize(s->tailsig);
    sqlite3_finalize(s->frame);
    sqlite3_finalize(s->nunnamed_st);
    free(s->unnamed);
    free(s->newids);
    sqlite3_close_v2(s->db);
    hs__chmarks_close(s);
    free(s->marks_path);
    free(s->url);
    hs_ch_free(s->rch);
    hs_ch_free(s->ch);
    for (int t = 0; t < T__COUNT; t++) hs_buf_free(&s->out[t]);
    hs_map_free(&s->frame_id);
    hs_map_free(&s->node_id);
    hs_map_free(&s->run_idx);
    hs_map_free(&s->shipped);
    free(s->rs);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    free(s);
}

/* ---- the thread ------------------------------------------------------------------------------ */

static void *ship_main(void *arg)
{
    hs_chship *s = arg;
    char err[512];
    int failing = 0;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        int stop = s->stopping;
        pthread_mutex_unlock(&s->mu);
        int rc = hs_chship_pass(s, err, sizeof err);
        if (rc && !failing) hs_log("shipping to ClickHouse failed (will retry): %s", err);
        if (!rc && s->retain_months &&
            hs_clock_ns(CLOCK_REALTIME) - s->retained_at > 3600ull * 1000000000ull) {
            int dropped = 0;
            s->retained_at = hs_clock_ns(CLOCK_REALTIME);
            if (hs_chship_retain(s, s->retain_months, &dropped, err, sizeof err))
                hs_log("ClickHouse retention failed: %s", err);
            else if (dropped)
                hs_log("ClickHouse retention: %d partitions older than %d months dropped", dropped,
                       s->retain_months);
        }
        if (!rc && s->ds_after >= 0 &&
            hs_clock_ns(CLOCK_REALTIME) - s->ds_at > 3600ull * 1000000000ull) {
            int runs = 0;
            s->ds_at = hs_clock_ns(CLOCK_REALTIME);
            if (hs_chship_downsample(s, s->ds_after, s->ds_by, &runs, err, sizeof err))
                hs_log("ClickHouse downsampling failed: %s", err);
        }
        if (!rc && failing) hs_log("shipping to ClickHouse works again");
        failing = rc != 0;
        pthread_mutex_lock(&s->mu);
        if (stop) break;
        struct timespec ts = hs_deadline_ms(failing ? 1000 : (uint64_t)s->interval_ms);
        if (!s->stopping) pthread_cond_timedwait(&s->cv, &s->mu, &ts);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

int hs_chship_start(hs_chship *s, int interval_ms)
{
    s->interval_ms = interval_ms > 0 ? interval_ms : 200;
    if (pthread_create(&s->thread, NULL, ship_main, s)) return HS_ENOMEM;
    s->running = 1;
    return 0;
}

void hs_chship_stop(hs_chship *s)
{
    if (!s) return;
    if (s->running) {
        pthread_mutex_lock(&s->mu);
        s->stopping = 1;
        pthread_cond_broadcast(&s->cv);
        pthread_mutex_unlock(&s->mu);
        pthread_join(s->thread, NULL);
        s->running = 0;
    }
    hs_log("ClickHouse: %" PRIu64 " rows shipped in %" PRIu64 " passes (%" PRIu64
           " failed), %" PRIu64 " runs left the buffer",
           s->stats.rows, s->stats.passes, s->stats.failed, s->stats.pruned);
    hs_chship_free(s);
}
