/* history: a run's heap over time (one point per bucket, or per span of
 * buckets in a long run), its RSS samples and, when asked, the series of
 * its largest traces, as a typed result (hs_core.h); and the same points
 * as CSV. */
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hs_error.h"
#include "q_internal.h"

/* History's bounds: at most HISTORY_POINTS points a line. A longer run's
 * buckets are merged k at a time (k = buckets / HISTORY_POINTS, rounded
 * up): a merged point is at the end of its k buckets, with the heap as it
 * was there and the highest heap_max_bytes of the k; the answer's
 * granularity_ns is then k buckets, and "truncated" says k. RSS samples keep
 * the highest of each such span; the stacks' series keep their last value of
 * each span, and stop at HISTORY_SERIES_POINTS points in all. */
#define HISTORY_POINTS        10000
#define HISTORY_SERIES_POINTS 500000

/* A series' points come from its delta rows, either looked up trace by
 * trace (a key lookup per bucket in the trace's range) or from one pass
 * over all of the run's delta rows; a lookup costs several rows of a pass,
 * so the pass wins when the series span more than this share of the rows. */
#define SERIES_LOOKUP_COST 8

void hs_history_params_init(hs_history_params *p)
{
    memset(p, 0, sizeof *p);
}

static int trace_list(hs_history_params *p, const char *list, hs_qerr *err)
{
    p->ntraces = 0;
    for (const char *c = list; *c;) {
        char *end;
        long long v = strtoll(c, &end, 10);
        if (end == c || v <= 0 || (*end && *end != ',') || p->ntraces == HS_HISTORY_TRACES)
            return hs__err(err, HS_EINVAL, "trace must be up to 64 trace ids separated by commas");
        p->traces[p->ntraces++] = v;
        c = *end ? end + 1 : end;
    }
    return 0;
}

int hs_history_param(hs_history_params *p, const char *key, const char *value, hs_qerr *err)
{
    if (!strcmp(key, "top")) return hs__int_text("top", value, 0, HS_HISTORY_TOP_MAX, &p->top, err);
    if (!strcmp(key, "trace")) return trace_list(p, value, err);
    if (!strcmp(key, "site")) return hs_site_rules_parse(&p->site, value, p->site.wrappers, err);
    if (!strcmp(key, "wrappers")) p->site.wrappers = value;
    return 0;
}

typedef struct trace_series {
    int64_t trace, max;
    int64_t first, last; /* buckets of its first and last delta rows */
} trace_series;

static int cmp_series_max(const void *a, const void *b)
{
    const trace_series *x = a, *y = b;
    return x->max < y->max   ? 1
           : x->max > y->max ? -1
                             : (x->trace > y->trace) - (x->trace < y->trace);
}

static int64_t bucket_end_ns(const hs__run *run, int64_t bucket)
{
    int64_t t = (bucket + 1) * run->g;
    return t > run->end_ns && run->end_ns > bucket * run->g ? run->end_ns : t;
}

/* What a history answer is being built from. */
typedef struct history_acc {
    hs_q *q;
    const hs__run *run;
    hs_history_result *r;
    int64_t k;   /* buckets a point stands for */
    size_t left; /* series points the answer may still take */
} history_acc;

/* Appends (bucket, bytes) to s, or moves its last point when bucket is in
 * the same span of k buckets. 0 or HS_ENOMEM. */
static int series_point(history_acc *h, hs_history_series *s, int64_t bucket, int64_t bytes,
                        hs_qerr *err)
{
    int64_t span = bucket / h->k, end = span * h->k + h->k - 1;
    int64_t t = bucket_end_ns(h->run, end);
    if (s->npoints && s->points[s->npoints - 1].t_ns == t) {
        s->points[s->npoints - 1].bytes = bytes;
        return 0;
    }
    if (!h->left) {
        h->r->series_cut = 1;
        return 0;
    }
    /* capacity doubles at powers of two */
    if (!(s->npoints & (s->npoints - 1))) {
        hs_series_point *np = realloc(s->points, (s->npoints ? 2 * s->npoints : 1) * sizeof *np);
        if (!np) return hs__err(err, HS_ENOMEM, "out of memory");
        s->points = np;
    }
    h->left--;
    s->points[s->npoints++] = (hs_series_point){.t_ns = t, .bytes = bytes};
    return 0;
}

/* One trace's delta row into its series (lookup), or any trace's (scan). */
typedef struct series_walk {
    history_acc *h;
    hs_history_series *s; /* lookup: the series */
    int64_t cur;          /* lookup: its live bytes so far */
    hs__map idx;          /* scan: trace -> series index */
    int64_t *curs;        /* scan: each series' live bytes so far */
    hs_qerr *err;
} series_walk;

static int lookup_row(int64_t bucket, int64_t bytes, void *data)
{
    series_walk *w = data;
    w->cur += bytes;
    return series_point(w->h, w->s, bucket, w->cur, w->err);
}

static int series_points_lookup(history_acc *h, const trace_series *ts, size_t n, hs_qerr *err)
{
    for (size_t i = 0; i < n; i++) {
        if (ts[i].first > ts[i].last) continue; /* no delta rows */
        series_walk w = {.h = h, .s = &h->r->series[i], .err = err};
        int rc = h->q->store->ops->trace_deltas(h->q->store, h->run->id, ts[i].trace, ts[i].first,
                                                ts[i].last, lookup_row, &w, err);
        if (rc) return rc;
    }
    return 0;
}

static int scan_row(int64_t bucket, int64_t trace, int64_t bytes, void *data)
{
    series_walk *w = data;
    uint64_t i;
    if (!hs__map_get(&w->idx, (uint64_t)trace, &i)) return 0;
    w->curs[i] += bytes;
    return series_point(w->h, &w->h->r->series[i], bucket, w->curs[i], w->err);
}

static int series_points_scan(history_acc *h, const trace_series *ts, size_t n, hs_qerr *err)
{
    series_walk w = {.h = h, .err = err};
    int rc = 0;
    if (!(w.curs = calloc(n ? n : 1, sizeof *w.curs))) goto oom;
    for (size_t i = 0; i < n; i++)
        if (hs__map_put(&w.idx, (uint64_t)ts[i].trace, i)) goto oom;
    rc = h->q->store->ops->deltas(h->q->store, h->run->id, -1, scan_row, &w, err);
    goto out;
oom:
    rc = hs__err(err, HS_ENOMEM, "out of memory");
out:
    hs__map_free(&w.idx);
    free(w.curs);
    return rc;
}

/* s's stack (HS_STACK_FRAMES frames at most), its site and its name. */
static int series_stack(hs_q *q, hs_history_series *s, hs_qerr *err)
{
    int64_t frames[HS_MAX_DEPTH];
    int d = hs__stack(q, s->trace, frames, HS_MAX_DEPTH, err);
    if (d < 0) return HS_EDB;
    int n = d < HS_STACK_FRAMES ? d : HS_STACK_FRAMES;
    if (!(s->stack.frames = malloc((size_t)(n ? n : 1) * sizeof *s->stack.frames)))
        return hs__err(err, HS_ENOMEM, "out of memory");
    for (int k = 0; k < n; k++, s->stack.n++) {
        const hs__frame *f = hs__frame_get(q, frames[k], err);
        if (!f) return HS_EDB;
        s->stack.frames[k] =
            (hs_qframe){.name = f->name, .file = f->file, .module = f->module, .line = f->line};
    }
    s->stack.depth = d;
    s->name = "?";
    if (d == 0) return 0;
    int site = hs__site_index(q, s->trace, frames, d, err);
    if (site < 0) return site;
    s->stack.site = site;
    const hs__frame *sf = hs__frame_get(q, frames[site], err);
    if (!sf) return HS_EDB;
    s->name = sf->label;
    return 0;
}

/* The traces of the series, ranked: the top N by their highest live bytes
 * at any bucket end (ties in their stacks' content order), then those asked
 * for by id (each once). ts holds sums->n + p->ntraces; how many in *out. */
static int series_pick(hs_q *q, trace_series *ts, const hs__tsums *sums, const hs_history_params *p,
                       size_t *out, hs_qerr *err)
{
    size_t n = 0;
    for (size_t i = 0; i < sums->n; i++)
        ts[n++] = (trace_series){sums->rows[i].trace, sums->rows[i].s.max, sums->rows[i].s.first,
                                 sums->rows[i].s.last};
    hs__sort(ts, n, sizeof *ts, cmp_series_max);
    int rc = hs__ties_by_content(q, ts, n, sizeof *ts, offsetof(trace_series, max),
                                 offsetof(trace_series, trace), (size_t)p->top, err);
    if (rc) return rc;
    size_t all = n;
    if ((int64_t)n > p->top) n = (size_t)p->top;
    for (size_t e = 0; e < p->ntraces; e++) {
        size_t k;
        for (k = 0; k < all && ts[k].trace != p->traces[e]; k++) {
        }
        if (k < n) continue; /* already among the top N */
        trace_series pick = k < all ? ts[k] : (trace_series){p->traces[e], 0, 0, -1};
        if (k == all) all++;
        memmove(&ts[n + 1], &ts[n], (k - n) * sizeof *ts);
        ts[n++] = pick;
    }
    *out = n;
    return 0;
}

/* The series: the ranking reads one summary per trace (hs__tsums_load),
 * the points only the chosen traces' delta rows. */
static int history_series(history_acc *h, const hs_history_params *p, hs_qerr *err)
{
    hs__tsums sums;
    trace_series *ts = NULL;
    int rc = hs__tsums_load(h->q, h->run, INT64_MAX, &sums, err);
    if (rc) return rc;
    size_t cap = sums.n + p->ntraces, n;
    if (!(ts = malloc((cap ? cap : 1) * sizeof *ts))) goto oom;
    if ((rc = series_pick(h->q, ts, &sums, p, &n, err))) goto out;
    if (!(h->r->series = calloc(n ? n : 1, sizeof *h->r->series))) goto oom;
    h->r->nseries = n;
    int64_t span = 0;
    for (size_t i = 0; i < n; i++) {
        h->r->series[i].trace = ts[i].trace;
        h->r->series[i].max_bytes = ts[i].max;
        if (ts[i].first <= ts[i].last) span += ts[i].last - ts[i].first + 1;
    }
    int lookup =
        h->q->series_path ? h->q->series_path == 1 : span * SERIES_LOOKUP_COST < sums.delta_rows;
    rc = lookup ? series_points_lookup(h, ts, n, err) : series_points_scan(h, ts, n, err);
    for (size_t i = 0; !rc && i < n; i++) rc = series_stack(h->q, &h->r->series[i], err);
    goto out;
oom:
    rc = hs__err(err, HS_ENOMEM, "out of memory");
out:
    free(ts);
    hs__tsums_clear(&sums);
    return rc;
}

/* Appends one element of size sz to *a (n of them), doubling at powers of
 * two; NULL when out of memory. */
static void *grow(void *a, size_t n, size_t sz, void **out)
{
    if (n & (n - 1)) {
        *out = (char *)a + n * sz;
        return a;
    }
    void *na = realloc(a, (n ? 2 * n : 1) * sz);
    if (!na) return NULL;
    *out = (char *)na + n * sz;
    return na;
}

/* The heap's points, one per span of k buckets. */
typedef struct points_walk {
    history_acc *h;
    int64_t span, hmax;
    hs_history_point *last;
    hs_qerr *err;
} points_walk;

static int point_row(const hs_qstore_heap *row, void *data)
{
    points_walk *w = data;
    hs_history_result *r = w->h->r;
    int64_t b = row->bucket, m = row->max_bytes, k = w->h->k;
    if (b / k != w->span || !w->last) {
        void *np = grow(r->points, r->npoints, sizeof *r->points, (void **)&w->last);
        if (!np) return hs__err(w->err, HS_ENOMEM, "out of memory");
        r->points = np;
        r->npoints++;
        w->span = b / k;
        w->hmax = m;
        *w->last =
            (hs_history_point){.t_ns = bucket_end_ns(w->h->run, k > 1 ? w->span * k + k - 1 : b)};
    }
    if (m > w->hmax) w->hmax = m;
    w->last->heap_bytes = row->live_bytes;
    w->last->heap_max_bytes = w->hmax;
    w->last->heap_count = row->live_count;
    return 0;
}

static int history_points(history_acc *h, hs_qerr *err)
{
    points_walk w = {.h = h, .span = -1, .err = err};
    return h->q->store->ops->heap_series(h->q->store, h->run->id, point_row, &w, err);
}

/* RSS: one sample, the highest, per span of k buckets (and per
 * 1/HISTORY_POINTS of the run). */
typedef struct rss_walk {
    hs_history_result *r;
    int64_t w, span;
    hs_qerr *err;
} rss_walk;

static int rss_row(int64_t t, int64_t v, int64_t vsize, void *data)
{
    rss_walk *x = data;
    hs_history_result *r = x->r;
    r->rss_samples++;
    hs_rss_point *p;
    if (r->nrss && t / x->w == x->span) {
        if (v <= r->rss[r->nrss - 1].rss_bytes) return 0;
        p = &r->rss[r->nrss - 1];
    } else {
        void *np = grow(r->rss, r->nrss, sizeof *r->rss, (void **)&p);
        if (!np) return hs__err(x->err, HS_ENOMEM, "out of memory");
        r->rss = np;
        r->nrss++;
    }
    x->span = t / x->w;
    *p = (hs_rss_point){.t_ns = t, .rss_bytes = v, .vsize_bytes = vsize};
    return 0;
}

static int history_rss(history_acc *h, hs_qerr *err)
{
    rss_walk x = {.r = h->r, .w = h->k * h->run->g, .span = -1, .err = err};
    int64_t w2 = h->run->end_ns / HISTORY_POINTS + 1;
    if (x.w < w2) x.w = w2;
    return h->q->store->ops->rss(h->q->store, h->run->id, rss_row, &x, err);
}

int hs_core_history(hs_q *q, const hs_history_params *p, hs_history_result *out, hs_qerr *err)
{
    memset(out, 0, sizeof *out);
    hs__run *run = calloc(1, sizeof *run);
    if (!run) return hs__err(err, HS_ENOMEM, "out of memory");
    out->own = run;
    int rc = hs__site_apply(q, &p->site, err);
    if (!rc) rc = hs__run_resolve(q, &p->run, run, err);
    if (rc) goto fail;
    int64_t nb = run->last_bucket + 1;
    history_acc h = {.q = q,
                     .run = run,
                     .r = out,
                     .k = nb > HISTORY_POINTS ? (nb + HISTORY_POINTS - 1) / HISTORY_POINTS : 1,
                     .left = HISTORY_SERIES_POINTS};
    if ((rc = history_points(&h, err)) || (rc = history_rss(&h, err))) goto fail;
    if ((p->top > 0 || p->ntraces) && (rc = history_series(&h, p, err))) goto fail;
    hs__run_brief(&out->run, run);
    out->peak_bytes = run->peak_bytes;
    out->peak_t_ns = run->peak_t_ns;
    out->end_bytes = run->end_bytes;
    out->granularity_ns = run->g * h.k;
    out->buckets_per_point = h.k;
    out->cut = h.k > 1 || out->series_cut || out->rss_samples > (int64_t)out->nrss;
    return 0;
fail:
    hs_history_result_clear(out);
    return rc;
}

void hs_history_result_clear(hs_history_result *r)
{
    for (size_t i = 0; i < r->nseries; i++) {
        free(r->series[i].points);
        free(r->series[i].stack.frames);
    }
    free(r->series);
    free(r->points);
    free(r->rss);
    if (r->own) hs__run_clear(r->own);
    free(r->own);
    hs__held_release(&r->held);
    memset(r, 0, sizeof *r);
}

/* ---- the points as CSV ---------------------------------------------------- */

typedef struct csv_walk {
    hs_q *q;
    const hs__run *run;
    hs_buf *b;
    hs_qerr *err;
} csv_walk;

static int csv_row(const hs_qstore_heap *row, void *data)
{
    csv_walk *w = data;
    int64_t t = bucket_end_ns(w->run, row->bucket), rss;
    /* rss: the latest sample at or before each point */
    int rc = w->q->store->ops->rss_at(w->q->store, w->run->id, t, &rss, w->err);
    if (rc) return rc;
    hs_buf_printf(w->b, "%" PRId64 ",%" PRId64 ",%" PRId64 ",%" PRId64 "\n", t, row->live_bytes,
                  row->max_bytes, rss);
    return 0;
}

int hs_core_history_csv(hs_q *q, const hs_run_sel *sel, hs_export_result *out, hs_qerr *err)
{
    memset(out, 0, sizeof *out);
    hs__run run;
    int rc = hs__run_resolve(q, sel, &run, err);
    if (rc) return rc;
    hs_buf b = {0};
    hs_buf_printf(&b, "t_ns,heap_bytes,heap_max_bytes,rss_bytes\n");
    csv_walk w = {.q = q, .run = &run, .b = &b, .err = err};
    rc = q->store->ops->heap_series(q->store, run.id, csv_row, &w, err);
    hs__run_clear(&run);
    if (!rc && b.oom) rc = hs__err(err, HS_ENOMEM, "out of memory");
    if (rc) {
        free(b.p);
        return rc;
    }
    out->body = b.p;
    out->len = b.n;
    out->content_type = "text/csv";
    out->filename = "history.csv";
    return 0;
}
