/* hs_snap: the rollup arithmetic that the writer (server/store_rollup.c) and
 * the readers (queries/, schema/hs_tstats.c) must agree on, named once: the
 * kinds of snapshots rows and the time buckets (schema/001_init.sql,
 * snapshots, says what each holds).
 *
 * Bucket b of a run of granularity g covers event times [b*g, (b+1)*g); the
 * state "at the end of b" is the state at moment (b+1)*g. A moment T a
 * person names is answered by the bucket whose end is the first at or
 * after T, so that a bucket's own end names that bucket. Every k-th bucket
 * (k = runs.keyframe_every) ends with a keyframe: buckets k-1, 2k-1, ...
 */
#ifndef HS_SNAP_H
#define HS_SNAP_H

#include <stdint.h>

/* snapshots.kind; the *_SQL names are the same numbers as SQL text, for
 * statements ("... AND kind = " HS_SNAP_KEYFRAME_SQL). */
#define HS_SNAP_DELTA        0 /* a trace's net change during the bucket */
#define HS_SNAP_KEYFRAME     1 /* a trace's live state at the end of the bucket */
#define HS_SNAP_PEAK         2 /* a trace's live state at the instant of the run's peak */
#define HS__SNAP_STR(k)      #k
#define HS__SNAP_SQL(k)      HS__SNAP_STR(k)
#define HS_SNAP_DELTA_SQL    HS__SNAP_SQL(HS_SNAP_DELTA)
#define HS_SNAP_KEYFRAME_SQL HS__SNAP_SQL(HS_SNAP_KEYFRAME)
#define HS_SNAP_PEAK_SQL     HS__SNAP_SQL(HS_SNAP_PEAK)

/* The bucket of an event at t_ns (g > 0). */
static inline int64_t hs_bucket_of(uint64_t t_ns, uint64_t g)
{
    return (int64_t)(t_ns / g);
}

/* The moment, ns, whose state the end of bucket b holds. */
static inline int64_t hs_bucket_end(int64_t b, int64_t g)
{
    return (b + 1) * g;
}

/* The bucket that answers moment t_ns: (b*g, (b+1)*g] holds t; 0 for t <= 0. */
static inline int64_t hs_bucket_at(int64_t t_ns, int64_t g)
{
    return t_ns > 0 ? (t_ns - 1) / g : 0;
}

/* The last keyframe bucket before bucket b (-1 when b < k). */
static inline int64_t hs_keyframe_before(int64_t b, int64_t k)
{
    return b / k * k - 1;
}

#endif
