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
#include <math.h>

#include "hs_snap.h"
#include "store_int.h"

#define HS_TSTATS_ROWS_PER_SUMMARY 16

static int snap_row(hs_store *s, hs_run *r, int kind, int64_t bucket, int64_t trace, int64_t bytes,
                    int64_t count)
{
    sqlite3_stmt *st = s->st[ST_SNAP];
    sqlite3_bind_int64(st, 1, r->id);
    sqlite3_bind_int(st, 2, kind);
    sqlite3_bind_int64(st, 3, bucket);
    sqlite3_bind_int64(st, 4, trace);
    sqlite3_bind_int64(st, 5, bytes);
    sqlite3_bind_int64(st, 6, count);
    return hs__store_step_done(s, st);
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
    for (uint32_t i = 0; i < r->nslots; i++) {
        const hs_slot *sl = &r->slots[i];
        int64_t c = llround(sl->count);
        if (!sl->bytes && !c) continue;
        int rc = snap_row(s, r, HS_SNAP_KEYFRAME, bucket, sl->trace, sl->bytes, c);
        if (rc) return rc;
    }
    return 0;
}

static int write_peak(hs_store *s, hs_run *r)
{
    sqlite3_stmt *st = s->st[ST_SNAP_DEL_PEAK];
    sqlite3_bind_int64(st, 1, r->id);
    int rc = hs__store_step_done(s, st);
    for (uint32_t i = 0; i < r->nslots && !rc; i++) {
        const hs_slot *sl = &r->slots[i];
        int saved = sl->pk_ver == r->peak_ver;
        int64_t b = saved ? sl->pk_bytes : sl->bytes;
        int64_t c = llround(saved ? sl->pk_count : sl->count);
        if (b || c) rc = snap_row(s, r, HS_SNAP_PEAK, r->peak_bucket, sl->trace, b, c);
    }
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
    for (uint32_t i = 0; i < r->ndirty && !rc; i++) {
        hs_slot *sl = &r->slots[r->dirty[i]];
        int64_t c = llround(sl->count);
        int64_t db = sl->bytes - sl->b0_bytes, dc = c - sl->b0_count;
        if (db || dc) {
            rc = snap_row(s, r, HS_SNAP_DELTA, r->bucket, sl->trace, db, dc);
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
    if (!rc) rc = write_keyframe(s, r, r->bucket);
    if (!rc && r->ts_ndirty) rc = write_tstats(s, r, r->bucket);
    return rc;
}
