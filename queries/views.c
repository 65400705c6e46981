/* views: history and flame, as the JSON of
 * docs/api.md. Each view reads the state of a run at a moment (q.c) and
 * aggregates it in memory: the cost grows with the number of live stacks,
 * not with the number of events. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hs_error.h"
#include "q_internal.h"

int hs__at_param(hs_q *q, const hs__run *run, const hs__params *p, const char *def, hs__at *at,
                 hs_qerr *err)
{
    const char *v = hs__param(p, "at");
    hs_t_sel t;
    int rc = hs_sel_parse_t(&t, v ? v : def, err);
    if (rc) return rc;
    return hs__at_resolve(q, run, &t, at, err);
}

const char *hs__at_name(const hs__at *at, char *buf, size_t len)
{
    if (at->kind == HS_TSEL_PEAK) return "peak";
    if (at->kind == HS_TSEL_END) return "end";
    if (at->kind == HS_TSEL_EXIT) return "exit";
    snprintf(buf, len, "%.9g", at->at_ns / 1e9);
    return buf;
}

/* ---- history -------------------------------------------------------------- */

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

/* History's bounds: at most HISTORY_POINTS points a line. A longer run's
 * buckets are merged k at a time (k = buckets / HISTORY_POINTS, rounded
 * up): a merged point is at the end of its k buckets, with the heap as it
 * was there and the highest heap_max_bytes of the k; the answer's
 * granularity_ns is then k buckets, and "truncated" says k. RSS samples keep
 * the highest of each such span; the stacks' series keep their last value of
 * each span, and stop at HISTORY_SERIES_POINTS points in all. */
#define HISTORY_POINTS        10000
#define HISTORY_SERIES_POINTS 500000

typedef struct series_out {
    int64_t k;   /* buckets a point stands for */
    size_t left; /* points the series may still take */
    int cut;     /* the series stopped at HISTORY_SERIES_POINTS */
} series_out;

/* Appends (bucket, bytes) to pts, or moves its last point when bucket is
 * in the same span of k buckets. */
static void series_point(const hs__run *run, series_out *so, json_t *pts, int64_t bucket,
                         int64_t bytes)
{
    int64_t span = bucket / so->k, end = span * so->k + so->k - 1;
    json_t *last = json_array_get(pts, json_array_size(pts) - 1);
    json_int_t t = (json_int_t)bucket_end_ns(run, end);
    if (last && json_integer_value(json_object_get(last, "t_ns")) == t) {
        json_object_set_new(last, "bytes", json_integer(bytes));
        return;
    }
    if (!so->left) {
        so->cut = 1;
        return;
    }
    so->left--;
    json_array_append_new(pts, json_pack("{s:I,s:I}", "t_ns", t, "bytes", (json_int_t)bytes));
}

/* A series' points come from its delta rows, either looked up trace by
 * trace (a key lookup per bucket in the trace's range) or from one pass
 * over all of the run's delta rows; a lookup costs several rows of a pass,
 * so the pass wins when the series span more than this share of the rows. */
#define SERIES_LOOKUP_COST 8

static int series_points_lookup(hs_q *q, const hs__run *run, const trace_series *ts, size_t n,
                                json_t **pts, series_out *so, hs_qerr *err)
{
    for (size_t i = 0; i < n; i++) {
        if (ts[i].first > ts[i].last) continue; /* no delta rows */
        sqlite3_stmt *st = hs__stmt(q, ST_TRACE_DELTAS, err);
        if (!st) return HS_EDB;
        sqlite3_bind_int64(st, 1, run->id);
        sqlite3_bind_int64(st, 2, ts[i].first);
        sqlite3_bind_int64(st, 3, ts[i].last);
        sqlite3_bind_int64(st, 4, ts[i].trace);
        int64_t cur = 0;
        int s;
        while ((s = sqlite3_step(st)) == SQLITE_ROW) {
            cur += sqlite3_column_int64(st, 1);
            series_point(run, so, pts[i], sqlite3_column_int64(st, 0), cur);
        }
        sqlite3_reset(st);
        if (s != SQLITE_DONE) return hs__dberr(q, err);
    }
    return 0;
}

static int series_points_scan(hs_q *q, const hs__run *run, const trace_series *ts, size_t n,
                              json_t **pts, series_out *so, hs_qerr *err)
{
    hs__map idx = {0};
    int64_t *cur = calloc(n ? n : 1, sizeof *cur);
    int rc = HS_EDB, s;
    sqlite3_stmt *st = NULL;
    if (!cur) goto oom;
    for (size_t i = 0; i < n; i++)
        if (hs__map_put(&idx, (uint64_t)ts[i].trace, i)) goto oom;
    if (!(st = hs__stmt(q, ST_DELTAS_AFTER, err))) goto out;
    sqlite3_bind_int64(st, 1, run->id);
    sqlite3_bind_int64(st, 2, -1);
    while ((s = sqlite3_step(st)) == SQLITE_ROW) {
        uint64_t i;
        if (!hs__map_get(&idx, (uint64_t)sqlite3_column_int64(st, 1), &i)) continue;
        cur[i] += sqlite3_column_int64(st, 2);
        series_point(run, so, pts[i], sqlite3_column_int64(st, 0), cur[i]);
    }
    sqlite3_reset(st);
    rc = s == SQLITE_DONE ? 0 : hs__dberr(q, err);
    goto out;
oom:
    rc = hs__err(err, HS_ENOMEM, "out of memory");
out:
    hs__map_free(&idx);
    free(cur);
    return rc;
}

/* The N traces with the highest live bytes at any bucket end, as series.
 * The ranking reads one summary per trace (hs__tsums_load), the points only
 * the chosen traces' delta rows. */
static int history_series(hs_q *q, hs__run *run, int64_t topn, const int64_t *extra, size_t nextra,
                          json_t *series, series_out *so, hs_qerr *err)
{
    hs__tsums sums;
    trace_series *ts = NULL;
    json_t **pts = NULL;
    size_t n = 0, cap = 0;
    int rc = hs__tsums_load(q, run, INT64_MAX, &sums, err);
    if (rc) return rc;
    rc = HS_EDB;
    cap = sums.n + nextra;
    if (!(ts = malloc((cap ? cap : 1) * sizeof *ts))) goto oom;
    for (size_t i = 0; i < sums.n; i++)
        ts[n++] = (trace_series){sums.rows[i].trace, sums.rows[i].s.max, sums.rows[i].s.first,
                                 sums.rows[i].s.last};
    qsort(ts, n, sizeof *ts, cmp_series_max);
    /* the top N, then the traces asked for by id (each once) */
    size_t all = n;
    if ((int64_t)n > topn) n = (size_t)topn;
    for (size_t e = 0; e < nextra; e++) {
        size_t k;
        for (k = 0; k < all && ts[k].trace != extra[e]; k++) {
        }
        if (k < n) continue; /* already among the top N */
        trace_series pick = k < all ? ts[k] : (trace_series){extra[e], 0, 0, -1};
        if (k == all) all++; /* cap holds sums.n + nextra */
        memmove(&ts[n + 1], &ts[n], (k - n) * sizeof *ts);
        ts[n++] = pick;
    }
    if (!(pts = calloc(n ? n : 1, sizeof *pts))) goto oom;
    int64_t span = 0;
    for (size_t i = 0; i < n; i++) {
        if (!(pts[i] = json_array())) goto oom;
        if (ts[i].first <= ts[i].last) span += ts[i].last - ts[i].first + 1;
    }
    int lookup = q->series_path ? q->series_path == 1 : span * SERIES_LOOKUP_COST < sums.delta_rows;
    rc = lookup ? series_points_lookup(q, run, ts, n, pts, so, err)
                : series_points_scan(q, run, ts, n, pts, so, err);
    for (size_t i = 0; i < n; i++) {
        int64_t frames[HS_MAX_DEPTH];
        int d = rc ? 0 : hs__stack(q, ts[i].trace, frames, HS_MAX_DEPTH, err);
        json_t *stack =
            d >= 0 && !rc
                ? hs__stack_json(q, frames, d < HS_STACK_FRAMES ? d : HS_STACK_FRAMES, err)
                : NULL;
        if (d < 0 || !stack) rc = rc ? rc : HS_EDB;
        int site = !rc && d > 0 ? hs__site_index(q, ts[i].trace, frames, d, err) : 0;
        if (site < 0) rc = site;
        const hs__frame *sf = !rc && d > 0 ? hs__frame_get(q, frames[site], err) : NULL;
        if (!rc && d > 0 && !sf) rc = HS_EDB;
        if (!rc) {
            json_array_append_new(series,
                                  json_pack("{s:I,s:s,s:o,s:I,s:o,s:I}", "trace",
                                            (json_int_t)ts[i].trace, "name", sf ? sf->label : "?",
                                            "stack", stack, "site_index", (json_int_t)site,
                                            "points", pts[i], "max_bytes", (json_int_t)ts[i].max));
        } else {
            json_decref(stack);
            json_decref(pts[i]);
        }
        pts[i] = NULL;
    }
    goto out;
oom:
    rc = hs__err(err, HS_ENOMEM, "out of memory");
    for (size_t i = 0; pts && i < n; i++) json_decref(pts[i]);
out:
    free(pts);
    free(ts);
    hs__tsums_clear(&sums);
    return rc;
}

int hs__view_history(hs_q *q, hs__run *run, const hs__params *p, json_t **out, hs_qerr *err)
{
    int64_t topn, extra[64];
    size_t nextra = 0;
    int rc = hs__param_int(p, "top", 0, 0, 1000, &topn, err);
    if (rc) return rc;
    const char *tl = hs__param(p, "trace");
    for (const char *c = tl; c && *c;) {
        char *end;
        long long v = strtoll(c, &end, 10);
        if (end == c || v <= 0 || (*end && *end != ',') || nextra == HS_COUNTOF(extra))
            return hs__err(err, HS_EINVAL, "trace must be up to 64 trace ids separated by commas");
        extra[nextra++] = v;
        c = *end ? end + 1 : end;
    }
    json_t *points = json_array(), *rss = json_array(), *series = json_array();
    int64_t nb = run->last_bucket + 1,
            k = nb > HISTORY_POINTS ? (nb + HISTORY_POINTS - 1) / HISTORY_POINTS : 1;
    series_out so = {.k = k, .left = HISTORY_SERIES_POINTS};
    sqlite3_stmt *st = hs__stmt(q, ST_SERIES, err);
    if (!st) goto fail;
    sqlite3_bind_int64(st, 1, run->id);
    int s;
    int64_t span = -1, hmax = 0;
    json_t *last = NULL;
    while ((s = sqlite3_step(st)) == SQLITE_ROW) {
        int64_t b = sqlite3_column_int64(st, 0), m = sqlite3_column_int64(st, 2);
        if (b / k != span || !last) {
            span = b / k;
            hmax = m;
            last = json_pack("{s:I,s:I,s:I,s:I}", "t_ns",
                             (json_int_t)bucket_end_ns(run, k > 1 ? span * k + k - 1 : b),
                             "heap_bytes", (json_int_t)0, "heap_max_bytes", (json_int_t)0,
                             "heap_count", (json_int_t)0);
            json_array_append_new(points, last);
        }
        if (m > hmax) hmax = m;
        json_object_set_new(last, "heap_bytes", json_integer(sqlite3_column_int64(st, 1)));
        json_object_set_new(last, "heap_max_bytes", json_integer(hmax));
        json_object_set_new(last, "heap_count", json_integer(sqlite3_column_int64(st, 3)));
    }
    if (s != SQLITE_DONE) goto dbfail;
    sqlite3_reset(st);
    if (!(st = hs__stmt(q, ST_RSS, err))) goto fail;
    sqlite3_bind_int64(st, 1, run->id);
    /* one sample, the highest, per span of k buckets (and per 1/HISTORY_POINTS of the run) */
    int64_t w = k * run->g, w2 = run->end_ns / HISTORY_POINTS + 1;
    if (w < w2) w = w2;
    span = -1;
    last = NULL;
    size_t nrss = 0;
    while ((s = sqlite3_step(st)) == SQLITE_ROW) {
        int64_t t = sqlite3_column_int64(st, 0), r = sqlite3_column_int64(st, 1);
        nrss++;
        if (last && t / w == span) {
            if (r <= json_integer_value(json_object_get(last, "rss_bytes"))) continue;
            json_array_remove(rss, json_array_size(rss) - 1);
        }
        span = t / w;
        last = json_pack("{s:I,s:I,s:I}", "t_ns", (json_int_t)t, "rss_bytes", (json_int_t)r,
                         "vsize_bytes", (json_int_t)sqlite3_column_int64(st, 2));
        json_array_append_new(rss, last);
    }
    if (s != SQLITE_DONE) goto dbfail;
    sqlite3_reset(st);
    if ((topn > 0 || nextra) &&
        (rc = history_series(q, run, topn, extra, nextra, series, &so, err)))
        goto fail;
    json_t *cut = json_null();
    if (k > 1 || so.cut || nrss > json_array_size(rss))
        cut = json_pack("{s:I,s:I,s:b}", "buckets_per_point", (json_int_t)k, "rss_samples",
                        (json_int_t)nrss, "series_points", so.cut);
    *out = json_pack("{s:O,s:I,s:o,s:o,s:o,s:o,s:O}", "run", run->info, "granularity_ns",
                     (json_int_t)(run->g * k), "points", points, "rss", rss, "series", series,
                     "truncated", cut, "sampling", run->sampling);
    return *out ? 0 : hs__err(err, HS_ENOMEM, "out of memory");
dbfail:
    hs__dberr(q, err);
fail:
    json_decref(points);
    json_decref(rss);
    json_decref(series);
    return rc ? rc : HS_EDB;
}

int hs__history_csv(hs_q *q, hs__run *run, hs_api_reply *out, hs_qerr *err)
{
    hs__buf b = {0};
    hs__buf_printf(&b, "t_ns,heap_bytes,heap_max_bytes,rss_bytes\n");
    sqlite3_stmt *st = hs__stmt(q, ST_SERIES, err);
    if (!st) return HS_EDB;
    sqlite3_bind_int64(st, 1, run->id);
    /* rss: the latest sample at or before each point */
    sqlite3_stmt *rs = NULL;
    if (sqlite3_prepare_v2(q->db,
                           "SELECT rss_bytes FROM process_samples WHERE run = ?1 AND t_ns <= ?2 "
                           "ORDER BY t_ns DESC LIMIT 1",
                           -1, &rs, NULL) != SQLITE_OK)
        return hs__dberr(q, err);
    int s;
    while ((s = sqlite3_step(st)) == SQLITE_ROW) {
        int64_t t = bucket_end_ns(run, sqlite3_column_int64(st, 0));
        sqlite3_bind_int64(rs, 1, run->id);
        sqlite3_bind_int64(rs, 2, t);
        int64_t rss = sqlite3_step(rs) == SQLITE_ROW ? sqlite3_column_int64(rs, 0) : 0;
        sqlite3_reset(rs);
        hs__buf_printf(&b, "%" PRId64 ",%" PRId64 ",%" PRId64 ",%" PRId64 "\n", t,
                       (int64_t)sqlite3_column_int64(st, 1), (int64_t)sqlite3_column_int64(st, 2),
                       rss);
    }
    sqlite3_finalize(rs);
    sqlite3_reset(st);
    if (s != SQLITE_DONE) {
        free(b.p);
        return hs__dberr(q, err);
    }
    if (b.oom) {
        free(b.p);
        return hs__err(err, HS_ENOMEM, "out of memory");
    }
    out->status = 200;
    out->content_type = "text/csv";
    out->body = b.p;
    out->len = b.n;
    out->filename = "history.csv";
    return 0;
}

/* ---- flame ---------------------------------------------------------------- */

/* The flame tree of one run is a subtree of the traces prefix tree: its nodes
 * are trace nodes, so nothing needs merging by name. Index 0 is the root.
 *
 * Bounds (docs/api.md, "truncated"): the tree is built from the largest
 * stacks down while it has fewer than FLAME_BUILD_NODES nodes (about 64 B a
 * node, plus its map slot), frames deeper than max_depth are not built, and
 * the answer holds at most max_nodes nodes, the widest, and about
 * FLAME_ANSWER_BYTES of JSON. A crafted run of 1,000 stacks of 1,024
 * distinct frames once answered 158 MB and took the server to 3 GB. */
#define NONE               ((size_t)-1)
#define FLAME_BUILD_NODES  (512u << 10)
#define FLAME_MAX_DEPTH    256
#define FLAME_MAX_NODES    5000
#define FLAME_NODES_LIMIT  100000
#define FLAME_ANSWER_BYTES (8u << 20)

int hs__cmp_live_bytes(const void *a, const void *b)
{
    const hs__live *x = a, *y = b;
    if (x->bytes != y->bytes) return x->bytes < y->bytes ? 1 : -1;
    return (x->trace > y->trace) - (x->trace < y->trace);
}

int hs__flame_build(hs_q *q, hs__state *s, int max_depth, size_t max_nodes, hs__flame *f,
                    hs_qerr *err)
{
    memset(f, 0, sizeof *f);
    f->cap = 1024;
    if (!(f->n = malloc(f->cap * sizeof *f->n))) return hs__err(err, HS_ENOMEM, "out of memory");
    f->n[0] = (hs__fnode){.first_child = NONE, .next_sibling = NONE};
    f->n[0].bytes = s->total_bytes;
    f->n[0].count = s->total_count;
    f->len = 1;
    qsort(s->rows, s->n, sizeof *s->rows, hs__cmp_live_bytes);
    for (size_t i = 0; i < s->n; i++) {
        const hs__live *lv = &s->rows[i];
        if (f->len >= max_nodes) { /* the rest are smaller: counted, not drawn */
            f->stacks_omitted++;
            f->omitted_bytes += lv->bytes;
            f->omitted_count += lv->count;
            continue;
        }
        int64_t node = lv->trace;
        size_t prev = NONE;
        int prev_new = 0, first = 1;
        while (node) {
            uint64_t ix;
            int known = hs__map_get(&f->idx, (uint64_t)node, &ix);
            if (!known) {
                int64_t parent, frame;
                int depth;
                if (hs__node(q, node, &parent, &frame, &depth, err)) return HS_EDB;
                if (depth > max_depth) { /* below the deepest row drawn */
                    f->depth_cut = 1;
                    first = 0;
                    if (parent == node) break; /* defensive */
                    node = parent;
                    continue;
                }
                if (f->len == f->cap) {
                    f->cap *= 2;
                    hs__fnode *np = realloc(f->n, f->cap * sizeof *np);
                    if (!np) return hs__err(err, HS_ENOMEM, "out of memory");
                    f->n = np;
                }
                ix = f->len++;
                f->n[ix] = (hs__fnode){.frame = frame,
                                       .parent_node = parent,
                                       .first_child = NONE,
                                       .next_sibling = NONE};
                if (hs__map_put(&f->idx, (uint64_t)node, ix))
                    return hs__err(err, HS_ENOMEM, "out of memory");
            }
            hs__fnode *fn = &f->n[ix];
            fn->bytes += lv->bytes;
            fn->count += lv->count;
            if (first) {
                fn->self_bytes += lv->bytes;
                fn->self_count += lv->count;
                first = 0;
            }
            if (prev_new) {
                f->n[prev].next_sibling = fn->first_child;
                fn->first_child = prev;
            }
            prev = ix;
            prev_new = !known;
            if (fn->parent_node == node) break; /* defensive */
            node = fn->parent_node;
        }
        if (prev_new) {
            f->n[prev].next_sibling = f->n[0].first_child;
            f->n[0].first_child = prev;
        }
    }
    return 0;
}

void hs__flame_free(hs__flame *f)
{
    free(f->n);
    hs__map_free(&f->idx);
    memset(f, 0, sizeof *f);
}

typedef struct flame_out {
    hs_q *q;
    const hs__flame *f;
    int64_t min_bytes;  /* nodes narrower are left out */
    size_t left, shown; /* nodes the answer may still hold; nodes it holds */
    size_t bytes;       /* the answer's JSON so far, about */
    int bytes_cut;      /* stopped at FLAME_ANSWER_BYTES */
    hs_qerr *err;
} flame_out;

static int flame_visible(const flame_out *o, size_t c)
{
    return o->f->n[c].bytes >= o->min_bytes && o->f->n[c].bytes > 0;
}

static json_t *flame_json(flame_out *o, size_t ix)
{
    const hs__flame *f = o->f;
    const hs__fnode *n = &f->n[ix];
    json_t *o_ = NULL, *kids = NULL;
    size_t *order = NULL;
    if (ix == 0) {
        o_ = json_pack("{s:s,s:I,s:I,s:I}", "name", "all", "bytes", (json_int_t)n->bytes, "count",
                       (json_int_t)n->count, "self_bytes", (json_int_t)0);
    } else {
        const hs__frame *fr = hs__frame_get(o->q, n->frame, o->err);
        if (!fr) return NULL;
        o_ = json_pack("{s:s,s:s,s:s,s:I,s:s,s:I,s:I,s:I}", "name", fr->label, "function", fr->name,
                       "file", fr->file, "line", (json_int_t)fr->line, "module", fr->module,
                       "bytes", (json_int_t)n->bytes, "count", (json_int_t)n->count, "self_bytes",
                       (json_int_t)n->self_bytes);
        o->bytes +=
            120 + strlen(fr->label) + strlen(fr->name) + strlen(fr->file) + strlen(fr->module);
    }
    o->shown++;
    kids = json_array();
    if (!o_ || !kids) goto oom;
    /* children by bytes, descending */
    size_t nk = 0;
    for (size_t c = n->first_child; c != NONE; c = f->n[c].next_sibling) nk += flame_visible(o, c);
    if (!(order = malloc((nk ? nk : 1) * sizeof *order))) goto oom;
    nk = 0;
    for (size_t c = n->first_child; c != NONE; c = f->n[c].next_sibling)
        if (flame_visible(o, c)) order[nk++] = c;
    for (size_t a = 1; a < nk; a++) { /* insertion sort: most nodes have few children */
        size_t v = order[a], b = a;
        while (b > 0 && f->n[order[b - 1]].bytes < f->n[v].bytes) {
            order[b] = order[b - 1];
            b--;
        }
        order[b] = v;
    }
    for (size_t k = 0; k < nk && o->left > 0; k++) {
        if (o->bytes >= FLAME_ANSWER_BYTES) {
            o->bytes_cut = 1;
            break;
        }
        o->left--;
        json_t *c = flame_json(o, order[k]);
        if (!c) {
            free(order);
            json_decref(o_);
            json_decref(kids);
            return NULL;
        }
        json_array_append_new(kids, c);
    }
    free(order);
    json_object_set_new(o_, "children", kids);
    return o_;
oom:
    json_decref(o_);
    json_decref(kids);
    hs__err(o->err, HS_ENOMEM, "out of memory");
    return NULL;
}

/* The narrowest node the answer can hold: min_bytes, or the width of the
 * max_nodes-th widest node when more are at least min_bytes wide. A node is
 * never wider than its parent, so the nodes at least that wide form a tree. */
static int64_t flame_threshold(const hs__flame *f, int64_t min_bytes, size_t max_nodes)
{
    size_t n = 0;
    for (size_t i = 1; i < f->len; i++) n += f->n[i].bytes >= min_bytes && f->n[i].bytes > 0;
    if (n <= max_nodes) return min_bytes;
    int64_t *w = malloc(n * sizeof *w);
    if (!w) return INT64_MAX; /* only the root, rather than fail */
    n = 0;
    for (size_t i = 1; i < f->len; i++)
        if (f->n[i].bytes >= min_bytes && f->n[i].bytes > 0) w[n++] = f->n[i].bytes;
    int64_t t = hs__kth_largest(w, n, max_nodes);
    /* ties at t may still pass max_nodes: the walk stops there */
    free(w);
    return t > min_bytes ? t : min_bytes;
}

int hs__view_flame(hs_q *q, hs__run *run, const hs__params *p, json_t **out, hs_qerr *err)
{
    hs__at at;
    int64_t max_nodes, max_depth;
    int rc = hs__at_param(q, run, p, HS_FLAME_AT, &at, err);
    if (rc) return rc;
    double min_share;
    if ((rc = hs__min_share_param(p, &min_share, err))) return rc;
    if ((rc =
             hs__param_int(p, "max_nodes", FLAME_MAX_NODES, 1, FLAME_NODES_LIMIT, &max_nodes, err)))
        return rc;
    if ((rc = hs__param_int(p, "max_depth", FLAME_MAX_DEPTH, 1, HS_MAX_DEPTH, &max_depth, err)))
        return rc;
    hs__state state;
    if ((rc = hs__state_at(q, run, &at, &state, err))) return rc;
    hs__flame f;
    if ((rc = hs__flame_build(q, &state, (int)max_depth, FLAME_BUILD_NODES, &f, err))) goto out;
    int64_t min_bytes = (int64_t)(min_share * (double)state.total_bytes);
    flame_out o = {.q = q,
                   .f = &f,
                   .min_bytes = flame_threshold(&f, min_bytes, (size_t)max_nodes),
                   .left = (size_t)max_nodes,
                   .err = err};
    json_t *root = flame_json(&o, 0);
    if (!root) {
        rc = HS_EDB;
        goto out;
    }
    size_t built = f.len - 1, shown = o.shown - 1;
    json_t *cut = json_null();
    if (shown < built || f.depth_cut || f.stacks_omitted || o.bytes_cut)
        cut = json_pack("{s:I,s:I,s:I,s:o,s:I,s:I,s:b}", "nodes", (json_int_t)(built - shown),
                        "nodes_shown", (json_int_t)shown, "min_bytes", (json_int_t)o.min_bytes,
                        "depth", f.depth_cut ? json_integer(max_depth) : json_null(), "stacks",
                        (json_int_t)f.stacks_omitted, "stacks_bytes", (json_int_t)f.omitted_bytes,
                        "answer_bytes", o.bytes_cut);
    char tb[32];
    *out = json_pack("{s:O,s:s,s:I,s:I,s:I,s:o,s:o,s:O}", "run", run->info, "at",
                     hs__at_name(&at, tb, sizeof tb), "at_ns", (json_int_t)at.at_ns, "total_bytes",
                     (json_int_t)state.total_bytes, "total_count", (json_int_t)state.total_count,
                     "root", root, "truncated", cut, "sampling", run->sampling);
    rc = *out ? 0 : hs__err(err, HS_ENOMEM, "out of memory");
out:
    hs__flame_free(&f);
    hs__state_clear(&state);
    return rc;
}
