/* ch_downsample: long runs' old rollups merged into coarser buckets in
 * ClickHouse (hs_chship_downsample, hs_chship.h), so that a month of a
 * service's history is read from a few ten thousand rows, not millions.
 *
 * What is merged is what a history reads for its line: heap_series (per
 * span of `factor` buckets, aligned on the run's bucket 0: one row at the
 * span's last bucket holding the heap there, the highest heap of the span,
 * and the bytes allocated and freed in it) and process_samples (the highest
 * RSS sample of each span, kept as it is). A merged row carries `span` =
 * factor, the fine rows span = 1. A span is merged when the whole of it is
 * older than `age`, once (a span that holds a merged row is left alone),
 * in two steps: an INSERT … SELECT of the merged rows (the row at the
 * span's last bucket replaces the fine one of the same key, being newer),
 * then an ALTER TABLE … DELETE of the fine rows (a mutation, done by
 * ClickHouse in the background). In between, readers see both: the same
 * history, since the merged row is the last of its span and the fine rows'
 * highest is the merged one's. A history whose point covers a whole number
 * of spans is then the same as before, with the peak (runs.peak_*, the
 * highest heap_max_bytes) kept; a finer one gets a point per span.
 * Snapshots, keyframes and summaries keep their buckets: the state at any
 * moment is still exact.
 *
 * On a cluster (the recipe: Distributed tables over NAME_local ones,
 * sharded by run, so a run and its rows live on one shard) the whole of it
 * runs on each shard's own NAME_local tables, shard by shard: a mutation
 * cannot go through a Distributed table, and ON CLUSTER needs a
 * coordinator the recipe does without. Each shard is reached over HTTP at
 * the address the store URL's shards=HOST:PORT,… gives it, else at its
 * first replica's host (system.clusters) on the URL's port; each address
 * says which shards it is (system.clusters' is_local), and nothing is done
 * unless every shard of the cluster is reached.
 */
#include <assert.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ch_ship_int.h"
#include "hs_clock.h"
#include "hs_error.h"
#include "hs_log.h"

#define DS_BATCH 200 /* runs per statement */

typedef struct ds_run {
    int64_t id, upto; /* fine buckets below upto are merged */
    int64_t g;
} ds_run;

/* The runs of ch's tables (sfx: "" or "_local") with whole spans older
 * than age_s: *out, *n. */
static int old_runs(hs_ch *ch, const char *sfx, int64_t age_s, int factor, ds_run **out, size_t *n,
                    char *err, size_t errlen)
{
    hs_buf ans = {0};
    char sql[400];
    int64_t cut = (int64_t)hs_clock_ns(CLOCK_REALTIME) - age_s * 1000000000ll;
    snprintf(sql, sizeof sql,
             "SELECT id, granularity_ns, intDiv(%" PRId64 " - start_unix_ns, granularity_ns) FROM "
             "runs%s FINAL WHERE start_unix_ns < %" PRId64 " AND granularity_ns > 0",
             cut, sfx, cut);
    int rc = hs_ch_query(ch, sql, NULL, 0, &ans, err, errlen);
    hs_tsv t;
    size_t cap = 0;
    if (!rc) hs_tsv_init(&t, &ans);
    while (!rc && hs_tsv_row(&t)) {
        ds_run r = {.id = hs_tsv_i64(&t, NULL), .g = hs_tsv_i64(&t, NULL)};
        int64_t older = hs_tsv_i64(&t, NULL); /* buckets wholly before the cut */
        r.upto = older / factor * factor;
        if (r.upto <= 0) continue;
        if (*n == cap) {
            cap = cap ? cap * 2 : 64;
            ds_run *np = realloc(*out, cap * sizeof *np);
            if (!np) {
                rc = HS_ENOMEM;
                break;
            }
            *out = np;
        }
        (*out)[(*n)++] = r;
    }
    hs_buf_free(&ans);
    return rc;
}

/* (run = A AND COL < LIMIT_A) OR … for runs rs[0..n); by bucket, or by
 * t_ns (the limit in ns). */
static void cond(hs_buf *b, const ds_run *rs, size_t n, int by_time)
{
    hs_buf_printf(b, "(");
    for (size_t i = 0; i < n; i++)
        hs_buf_printf(b, "%s(run = %" PRId64 " AND %s < %" PRId64 ")", i ? " OR " : "", rs[i].id,
                      by_time ? "t_ns" : "bucket", by_time ? rs[i].upto * rs[i].g : rs[i].upto);
    hs_buf_printf(b, ")");
}

static int run_sql(hs_ch *ch, hs_buf *q, char *err, size_t errlen)
{
    int rc = q->oom ? HS_ENOMEM : hs_ch_query(ch, q->p, NULL, 0, NULL, err, errlen);
    q->n = 0;
    if (q->p) q->p[0] = 0;
    return rc;
}

static int merge_batch(hs_ch *ch, const char *sfx, const ds_run *rs, size_t n, int factor,
                       char *err, size_t errlen)
{
    hs_buf q = {0};
    uint64_t ver = hs_clock_ns(CLOCK_REALTIME);
    hs_buf_printf(&q,
                  "INSERT INTO heap_series%s (run, day, bucket, live_bytes, live_count, max_bytes, "
                  "alloc_bytes, free_bytes, ver, span) SELECT run, any(day), max(bucket), "
                  "argMax(live_bytes, bucket), argMax(live_count, bucket), max(max_bytes), "
                  "sum(alloc_bytes), sum(free_bytes), toUInt64(%" PRIu64 "), %d FROM "
                  "heap_series%s FINAL WHERE ",
                  sfx, ver, factor, sfx);
    cond(&q, rs, n, 0);
    hs_buf_printf(&q, " GROUP BY run, intDiv(bucket, %d) HAVING max(span) = 1", factor);
    int rc = run_sql(ch, &q, err, errlen);
    /* RSS: the highest sample of each span (the first of equal ones) */
    if (!rc) {
        hs_buf_printf(&q,
                      "INSERT INTO process_samples%s (run, day, t_ns, rss_bytes, vsize_bytes, "
                      "span) SELECT run, any(day), argMin(t_ns, (-rss_bytes, t_ns)), "
                      "max(rss_bytes), argMin(vsize_bytes, (-rss_bytes, t_ns)), %d FROM "
                      "process_samples%s FINAL ANY INNER JOIN (SELECT id AS run, granularity_ns "
                      "AS g FROM runs%s FINAL) USING run WHERE ",
                      sfx, factor, sfx, sfx);
        cond(&q, rs, n, 1);
        hs_buf_printf(&q, " GROUP BY run, g, intDiv(t_ns, g * %d) HAVING max(span) = 1", factor);
        rc = run_sql(ch, &q, err, errlen);
    }
    for (int k = 0; !rc && k < 2; k++) {
        hs_buf_printf(&q, "ALTER TABLE %s%s DELETE WHERE span = 1 AND ",
                      k ? "process_samples" : "heap_series", sfx);
        cond(&q, rs, n, k);
        rc = run_sql(ch, &q, err, errlen);
    }
    hs_buf_free(&q);
    return rc;
}

/* Downsampling on the tables of one server (sfx "") or of one shard
 * ("_local"); *runs counts the runs merged. */
static int downsample_on(hs_ch *ch, const char *sfx, int64_t age_s, int factor, int *runs,
                         char *err, size_t errlen)
{
    ds_run *rs = NULL;
    size_t n = 0;
    int rc = old_runs(ch, sfx, age_s, factor, &rs, &n, err, errlen);
    for (size_t i = 0; !rc && i < n; i += DS_BATCH) {
        size_t k = n - i < DS_BATCH ? n - i : DS_BATCH;
        rc = merge_batch(ch, sfx, rs + i, k, factor, err, errlen);
        if (!rc) *runs += (int)k;
    }
    free(rs);
    return rc;
}

typedef struct ds_arg {
    int64_t age_s;
    int factor, *runs;
} ds_arg;

static int downsample_shard(hs_ch *ch, const char *sfx, void *arg, char *err, size_t errlen)
{
    ds_arg *a = arg;
    return downsample_on(ch, sfx, a->age_s, a->factor, a->runs, err, errlen);
}

int hs_chship_downsample(hs_chship *s, int64_t age_s, int factor, int *runs, char *err,
                         size_t errlen)
{
    assert(age_s >= 0 && factor > 1);
    *runs = 0;
    ds_arg a = {age_s, factor, runs};
    return hs__chship_each_shard(s->ch, "downsampling", downsample_shard, &a, err, errlen);
}
