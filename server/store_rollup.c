/* store_rollup: the snapshot and heap_series rows of a run, written as its
 * events leave each time bucket (schema/001_init.sql, snapshots), and the
 * trace_stats summaries of its delta rows (schema/002_trace_stats.sql).
 *
 * Counts are estimated (sums of weight/size, doubles); a row holds the
 * rounded running total's change, so that summing deltas from a keyframe
 * gives exactly the rounded total the next keyframe holds.
 *
 * Each slot folds its delta rows into its summary as they are written. The
 * summaries of the slots that changed since they were last written are
 * written again, and runs.stats_bucket then says which buckets they cover,
 * once the delta rows written in between reach HS_TSTATS_ROWS_PER_SUMMARY
 * times their number, and at the run's end. Rewriting a summary costs about
 * what a few delta rows cost, so this bounds the summaries' share of the
 * writer's work; a reader adds the delta rows after stats_bucket, fewer
 * than that many per trace plus one bucket's. */
#include <assert.h>
#include <math.h>
#include <stdlib.h>

#include "hs_error.h"
#include "hs_snap.h"
#include "store_int.h"

#define HS_TSTATS_ROWS_PER_SUMMARY 16

/* ---- windows of buckets by trace (schema/hs_series.h) ----------------------
 *
 * A run's delta rows are gathered (slot, place in the window, bytes) while
 * its buckets are in one window of HS_SERIES_WINDOW, and written by trace
 * when it moves past the window, and at its end. Each bucket is written
 * once: a run that goes on after it was lost is loaded again and its
 * rollups rebuilt (store.c), all windows with them. */

/* The most rows a window gathers (16 MiB); a window of more is left to
 * be read from snapshot_blocks. */
#define HS_WIN_ROWS_MAX (1u << 20)

static void win_row(hs_run *r, uint32_t slot, int64_t b, int64_t bytes)
{
    if (r->win_over) return;
    if (r->nwin == r->win_cap) {
        uint32_t cap = r->win_cap ? 2 * r->win_cap : 256;
        hs_winrow *g = cap <= HS_WIN_ROWS_MAX ? realloc(r->win, cap * sizeof *g) : NULL;
        if (!g) { /* the window is read from snapshot_blocks */
            r->win_over = 1;
            return;
        }
        r->win = g;
        r->win_cap = cap;
    }
    uint32_t off = (uint32_t)(b - hs_series_window(b));
    assert(!r->nwin || r->win[r->nwin - 1].off <= off); /* by bucket */
    r->win[r->nwin++] = (hs_winrow){slot, off, bytes};
}

static int by_wintrace(const void *a, const void *b)
{
    const hs_wintrace *x = a, *y = b;
    return (x->trace > y->trace) - (x->trace < y->trace);
}

/* Writes the window of r->bucket's rows by trace: a counting sort by slot,
 * the slots by trace. Out of memory, the window is left without. */
static int win_write(hs_store *s, hs_run *r)
{
    int64_t w = hs_series_window(r->bucket);
    uint32_t n = r->win_over ? 0 : r->nwin, nt = 0;
    if (hs_array_room((void **)&s->wintraces, &s->wintraces_cap, r->nslots, sizeof *s->wintraces) ||
        hs_array_room((void **)&s->winrows, &s->winrows_cap, n, sizeof *s->winrows))
        n = 0;
    for (uint32_t i = 0; i < n; i++) {
        hs_slot *sl = &r->slots[r->win[i].slot];
        if (!sl->win_n++) s->wintraces[nt++] = (hs_wintrace){sl->trace, r->win[i].slot};
    }
    if (nt > 1) qsort(s->wintraces, nt, sizeof *s->wintraces, by_wintrace);
    for (uint32_t j = 0, at = 0; j < nt; j++) { /* each slot's count becomes its place */
        hs_slot *sl = &r->slots[s->wintraces[j].slot];
        uint32_t c = sl->win_n;
        sl->win_n = at;
        at += c;
    }
    for (uint32_t i = 0; i < n; i++) {
        const hs_winrow *x = &r->win[i];
        hs_slot *sl = &r->slots[x->slot];
        s->winrows[sl->win_n++] = (hs_series_row){sl->trace, w + x->off, x->bytes};
    }
    for (uint32_t j = 0; j < nt; j++) r->slots[s->wintraces[j].slot].win_n = 0;
    int rc = hs_series_put(s->series, r->id, w, s->winrows, n);
    if (rc == HS_EDB) s->db_failed = 1;
    return rc;
}

static void win_clear(hs_run *r)
{
    r->nwin = 0;
    r->win_over = 0;
}

/* Rows of one (run, kind, bucket) are gathered, then written at once by
 * snap_put (schema/hs_snaps.h stores them as a group). */
static int snap_row(hs_store *s, int64_t trace, int64_t bytes, int64_t count)
{
    if (hs_array_room((void **)&s->snaprows, &s->snaprows_cap, s->nsnaprows + 1,
                      sizeof *s->snaprows))
        return HS_ENOMEM;
    s->snaprows[s->nsnaprows++] = (hs_snap_row){trace, bytes, count};
    return 0;
}

/* Writes the rows gathered as those of (r, kind, bucket); none: nothing. */
static int snap_put(hs_store *s, hs_run *r, int kind, int64_t bucket)
{
    size_t n = s->nsnaprows;
    s->nsnaprows = 0;
    if (!n) return 0;
    int rc = hs_snaps_put(s->snaps, r->id, kind, bucket, s->snaprows, n);
    if (rc == HS_EDB) s->db_failed = 1;
    return rc;
}

/* A keyframe is due at a boundary once the delta rows written since the
 * last one reach a quarter of the traces it would list: a reader of a
 * bucket after a skipped boundary reads the older keyframe and fewer delta
 * rows than a new keyframe would have cost, so the state at any moment
 * still costs O(live traces) rows, while a run whose many live traces
 * rarely change (an interpreter's heap) no longer writes every one of them
 * every keyframe_every buckets. */
static int keyframe_due(const hs_run *r)
{
    uint64_t live = 0;
    for (uint32_t i = 0; i < r->nslots; i++)
        live += r->slots[i].bytes || llround(r->slots[i].count);
    return (uint64_t)r->kf_deltas * 4 >= live;
}

static int write_keyframe(hs_store *s, hs_run *r, int64_t bucket)
{
    r->kf_deltas = 0;
    s->nsnaprows = 0;
    for (uint32_t i = 0; i < r->nslots; i++) {
        const hs_slot *sl = &r->slots[i];
        int64_t c = llround(sl->count);
        if (!sl->bytes && !c) continue;
        int rc = snap_row(s, sl->trace, sl->bytes, c);
        if (rc) return rc;
    }
    return snap_put(s, r, HS_SNAP_KEYFRAME, bucket);
}

static int write_peak(hs_store *s, hs_run *r)
{
    sqlite3_stmt *st = s->st[ST_SNAP_DEL_PEAK];
    sqlite3_bind_int64(st, 1, r->id);
    int rc = hs__store_step_done(s, st);
    int64_t n = 0;
    s->nsnaprows = 0;
    for (uint32_t i = 0; i < r->nslots && !rc; i++) {
        const hs_slot *sl = &r->slots[i];
        int saved = sl->pk_ver == r->peak_ver;
        int64_t b = saved ? sl->pk_bytes : sl->bytes;
        int64_t c = llround(saved ? sl->pk_count : sl->count);
        if (b || c) rc = snap_row(s, sl->trace, b, c);
        n += c;
    }
    if (!rc) rc = snap_put(s, r, HS_SNAP_PEAK, r->peak_bucket);
    if (r->ex_on) r->peak_count = n; /* late events may have changed the copies */
    if (!rc) r->peak_dirty = 0;
    return rc;
}

/* The summaries of the slots with delta rows since the last call; they
 * cover the buckets up to and including mark. */
static int write_tstats(hs_store *s, hs_run *r, int64_t mark)
{
    int rc = 0;
    sqlite3_stmt *st = s->st[ST_TSTATS];
    for (uint32_t i = 0; i < r->nslots && !rc; i++) {
        hs_slot *sl = &r->slots[i];
        if (!sl->ts_dirty) continue;
        sqlite3_bind_int64(st, 1, r->id);
        sqlite3_bind_int64(st, 2, sl->trace);
        hs_tstats_bind(st, 3, &sl->ts);
        if (!(rc = hs__store_step_done(s, st))) sl->ts_dirty = 0;
    }
    if (rc) return rc;
    r->ts_rows = 0;
    r->ts_ndirty = 0;
    st = s->st[ST_TSTATS_MARK];
    sqlite3_bind_int64(st, 1, r->id);
    sqlite3_bind_int64(st, 2, mark);
    return hs__store_step_done(s, st);
}

int hs__rollup_reset(hs_store *s, hs_run *r)
{
    win_clear(r);
    sqlite3_stmt *st = s->st[ST_TSTATS_CLEAR];
    sqlite3_bind_int64(st, 1, r->id);
    int rc = hs__store_step_done(s, st);
    if (rc) return rc;
    st = s->st[ST_TSTATS_MARK];
    sqlite3_bind_int64(st, 1, r->id);
    sqlite3_bind_null(st, 2);
    return hs__store_step_done(s, st);
}

/* The deltas and totals of the current bucket. */
static int flush_bucket(hs_store *s, hs_run *r)
{
    int rc = 0;
    s->nsnaprows = 0;
    for (uint32_t i = 0; i < r->ndirty && !rc; i++) {
        hs_slot *sl = &r->slots[r->dirty[i]];
        int64_t c = llround(sl->count);
        int64_t db = sl->bytes - sl->b0_bytes, dc = c - sl->b0_count;
        if (db || dc) {
            rc = snap_row(s, sl->trace, db, dc);
            win_row(r, r->dirty[i], r->bucket, db);
            r->kf_deltas++;
            hs_tstats_add(&sl->ts, r->bucket, db);
            r->ts_rows++;
            if (!sl->ts_dirty) r->ts_ndirty++;
            sl->ts_dirty = 1;
        }
        sl->b0_bytes = sl->bytes;
        sl->b0_count = c;
        sl->dirty = 0;
    }
    if (!rc) rc = snap_put(s, r, HS_SNAP_DELTA, r->bucket);
    if (rc) return rc;
    r->ndirty = 0;
    sqlite3_stmt *st = s->st[ST_SERIES];
    sqlite3_bind_int64(st, 1, r->id);
    sqlite3_bind_int64(st, 2, r->bucket);
    sqlite3_bind_int64(st, 3, r->live_bytes);
    sqlite3_bind_int64(st, 4, llround(r->live_count));
    sqlite3_bind_int64(st, 5, r->bucket_max);
    sqlite3_bind_int64(st, 6, r->bucket_alloc);
    sqlite3_bind_int64(st, 7, r->bucket_free);
    if ((rc = hs__store_step_done(s, st))) return rc;
    if (r->peak_dirty) rc = write_peak(s, r);
    if (!rc && r->ts_ndirty && r->ts_rows >= (int64_t)r->ts_ndirty * HS_TSTATS_ROWS_PER_SUMMARY)
        rc = write_tstats(s, r, r->bucket);
    return rc;
}

int hs__rollup_advance(hs_store *s, hs_run *r, int64_t nb)
{
    if (r->bucket >= 0) {
        int rc = flush_bucket(s, r);
        if (rc) return rc;
        if (hs_series_window(nb) != hs_series_window(r->bucket)) {
            if ((rc = win_write(s, r))) return rc;
            win_clear(r);
        }
        /* A keyframe closes every k-th bucket; with buckets skipped (no
         * events), the last boundary crossed gets it: the state has not
         * changed since the current bucket ended. */
        int64_t kb = hs_keyframe_before(nb, r->k);
        if (kb >= r->bucket && keyframe_due(r) && (rc = write_keyframe(s, r, kb))) return rc;
    }
    r->bucket = nb;
    r->bucket_max = r->live_bytes;
    r->bucket_alloc = r->bucket_free = 0;
    return 0;
}

int hs__rollup_finish(hs_store *s, hs_run *r)
{
    if (r->bucket < 0) return 0;
    int rc = flush_bucket(s, r);
    if (!rc) rc = win_write(s, r);
    if (!rc) rc = write_keyframe(s, r, r->bucket);
    if (!rc && r->ts_ndirty) rc = write_tstats(s, r, r->bucket);
    return rc;
}

/* ---- the peak: sampled, or exact ------------------------------------------
 *
 * Without exact figures the run's peak is the highest estimated live heap
 * of the sampled series, and the slots' peak copies are taken lazily at it
 * (store_int.h). With them (r->ex_on) the peak is the collector's exact one,
 * at moment peak_t, and a slot's peak copy is its state after every event
 * at or before peak_t: an event that arrives later but happened before
 * (another thread's batch) is added to the copy too. When an observation
 * moves the peak to a later moment, the events applied since the previous
 * observation that happened after the new moment are taken back out of the
 * copies (r->exlog); older ones cannot be after it, because the collector's
 * window of each observation starts when the previous one was read, after
 * the rings it drained had been snapshotted.
 *
 * Event times are rounded down to the run's quantum q (store_frames.c), so
 * an event stored at t happened in [t, t + q), while peak_t is exact. The
 * copies hold only the events surely at or before peak_t: those of the
 * peak's own quantum may have come after it (a program that frees what it
 * grew right after its peak would otherwise show the heap after the free),
 * so with q > 1 the copies are the state at the start of the peak's
 * quantum, short of at most one quantum's growth. */
static inline int before_peak(const hs_run *r, uint64_t t, uint64_t peak_t)
{
    uint64_t q = r->q ? r->q : 1;
    return t + (q - 1) <= peak_t;
}

void hs__rollup_peak_event(hs_run *r, uint32_t idx, const hs_event *e, int64_t bytes, double count)
{
    if (r->live_bytes > r->est_peak_bytes) {
        r->est_peak_bytes = r->live_bytes;
        r->est_peak_t = e->t_ns;
        if (!r->ex_on) {
            r->peak_bytes = r->live_bytes;
            r->peak_count = llround(r->live_count);
            r->peak_t = e->t_ns;
            r->peak_bucket = r->bucket;
            r->peak_ver++;
            r->peak_dirty = 1;
        }
    }
    if (r->sample_bytes == 1 || (r->ex_seen && !r->ex_on)) return;
    hs_slot *sl = &r->slots[idx];
    if (r->ex_on && before_peak(r, e->t_ns, r->peak_t)) {
        assert(sl->pk_ver == r->peak_ver); /* apply_event saved it */
        sl->pk_bytes += bytes;
        sl->pk_count += count;
        r->peak_dirty = 1;
        return;
    }
    if (r->exlog_full) return;
    if (r->nexlog == r->exlog_cap) {
        uint32_t cap = r->exlog_cap ? 2 * r->exlog_cap : 256;
        hs_exlog *n = cap <= HS_EXLOG_MAX ? realloc(r->exlog, cap * sizeof *n) : NULL;
        if (!n) {
            /* Until an observation clears it; a run that has sent none
             * (an older collector) keeps no memory for it. */
            r->exlog_full = 1;
            if (!r->ex_seen) {
                free(r->exlog);
                r->exlog = NULL;
                r->nexlog = r->exlog_cap = 0;
            }
            return;
        }
        r->exlog = n;
        r->exlog_cap = cap;
    }
    r->exlog[r->nexlog++] = (hs_exlog){idx, e->t_ns, bytes, count};
}

/* The slots' peak copies become their state at moment t. */
static void exact_peak_copies(hs_run *r, uint64_t t)
{
    r->peak_ver++;
    if (!r->exlog_full) {
        for (uint32_t i = 0; i < r->nexlog; i++) {
            const hs_exlog *x = &r->exlog[i];
            if (before_peak(r, x->t_ns, t)) continue;
            hs_slot *sl = &r->slots[x->slot];
            if (sl->pk_ver != r->peak_ver) {
                sl->pk_bytes = sl->bytes;
                sl->pk_count = sl->count;
                sl->pk_ver = r->peak_ver;
            }
            sl->pk_bytes -= x->bytes;
            sl->pk_count -= x->count;
        }
    }
    double c = 0;
    for (uint32_t i = 0; i < r->nslots; i++) {
        const hs_slot *sl = &r->slots[i];
        c += sl->pk_ver == r->peak_ver ? sl->pk_count : sl->count;
    }
    r->peak_count = llround(c);
    r->peak_dirty = 1;
}

static int exact_rows(hs_store *s, hs_run *r, const hs_exact *x)
{
    sqlite3_stmt *st = s->st[ST_EXACT_MAX];
    sqlite3_bind_int64(st, 1, r->id);
    sqlite3_bind_int64(st, 2, hs_bucket_of(x->max_t_ns, r->g));
    sqlite3_bind_int64(st, 3, (int64_t)x->max_bytes);
    sqlite3_bind_int64(st, 4, (int64_t)x->max_t_ns);
    sqlite3_bind_int64(st, 5, (int64_t)x->allocs);
    sqlite3_bind_int64(st, 6, (int64_t)x->frees);
    int rc = hs__store_step_done(s, st);
    if (rc) return rc;
    st = s->st[ST_EXACT_OBS];
    sqlite3_bind_int64(st, 1, r->id);
    sqlite3_bind_int64(st, 2, hs_bucket_of(x->t_ns, r->g));
    sqlite3_bind_int64(st, 3, (int64_t)x->live_bytes);
    sqlite3_bind_int64(st, 4, (int64_t)x->t_ns);
    sqlite3_bind_int64(st, 5, (int64_t)x->allocs);
    sqlite3_bind_int64(st, 6, (int64_t)x->frees);
    return hs__store_step_done(s, st);
}

int hs__store_exact(hs_store *s, hs_run *r, const hs_exact *x)
{
    /* Values no collector sends are not stored (the frame stays valid). */
    const uint64_t lim = (uint64_t)INT64_MAX / 4;
    if (x->t_ns > HS_T_MAX || x->max_t_ns > HS_T_MAX || x->peak_t_ns > HS_T_MAX ||
        x->live_bytes > lim || x->max_bytes > lim || x->peak_bytes > lim || x->allocs > lim ||
        x->frees > lim || x->alloc_bytes > lim || x->free_bytes > lim || x->error_bytes > lim)
        return 0;
    if (!r->ex_seen) {
        r->ex_seen = 1;
        r->ex_on = r->sample_bytes != 1 && !(x->flags & HS_EXACT_F_NO_SMALL);
        if (r->ex_on) r->peak_bytes = -1; /* the exact one replaces the sampled one */
        if (!r->ex_on) {                  /* no events are logged from now on */
            free(r->exlog);
            r->exlog = NULL;
            r->exlog_cap = 0;
        }
    }
    if (r->ex_on && (int64_t)x->peak_bytes > r->peak_bytes) {
        r->peak_bytes = (int64_t)x->peak_bytes;
        r->peak_t = x->peak_t_ns;
        r->peak_bucket = hs_bucket_of(x->peak_t_ns, r->g);
        exact_peak_copies(r, x->peak_t_ns);
    }
    r->nexlog = 0;
    r->exlog_full = 0;
    r->ex = *x;
    if (x->t_ns > r->end_ns) r->end_ns = x->t_ns;
    hs__store_touch(s, r);
    return exact_rows(s, r, x);
}

int hs__store_exact_load(hs_store *s, hs_run *r)
{
    sqlite3_stmt *st = s->st[ST_RUN_EXACT_LOAD];
    sqlite3_bind_int64(st, 1, r->id);
    int step = sqlite3_step(st);
    if (step == SQLITE_ROW && sqlite3_column_type(st, 0) != SQLITE_NULL) {
        hs_exact *x = &r->ex;
        int64_t flags = sqlite3_column_int64(st, 0);
        int64_t *f[] = {NULL,
                        (int64_t *)&x->allocs,
                        (int64_t *)&x->frees,
                        (int64_t *)&x->alloc_bytes,
                        (int64_t *)&x->free_bytes,
                        (int64_t *)&x->live_bytes,
                        (int64_t *)&x->peak_bytes,
                        (int64_t *)&x->peak_t_ns,
                        (int64_t *)&x->error_bytes};
        for (int i = 1; i < 9; i++) *f[i] = sqlite3_column_int64(st, i);
        x->flags = (uint64_t)flags & 0xff;
        x->t_ns = 1;
        r->ex_seen = 1;
        r->ex_on = (flags & 256) != 0;
        if (r->ex_on) {
            /* the replay fills the peak copies from the events at or
             * before the peak (hs__rollup_peak_event) */
            r->peak_bytes = (int64_t)x->peak_bytes;
            r->peak_t = x->peak_t_ns;
            r->peak_bucket = hs_bucket_of(x->peak_t_ns, r->g);
            r->peak_ver++;
            r->peak_dirty = 1;
        }
    }
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    return step == SQLITE_ROW || step == SQLITE_DONE ? 0 : HS_EDB;
}
