/* api: the routes of docs/api.md over the views, shared by the server's HTTP
 * layer and the CLI's direct mode. A request is (method, target, body); the
 * answer is JSON or a file with a status, and every failure is an error body
 * with a 4xx/5xx status, never a partial answer. */
#include <assert.h>
#include <inttypes.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api_internal.h"
#include "hs_error.h"
#include "hs_text.h"
#include "q_internal.h"
#include "store_clickhouse.h"

/* trace nodes read from the database past which a request counts as big */
#define BIG_REQUEST_NODES 65536

void hs_api_reply_clear(hs_api_reply *r)
{
    json_decref(r->json);
    free(r->body);
    memset(r, 0, sizeof *r);
}

/* HS_E code -> HTTP status and the API's error code (docs/api.md). A query
 * stopped at its time limit is the asker's to shorten: 400. */
static const struct {
    int code, status;
    const char *name;
} http_errors[] = {
    {HS_EINVAL, 400, "bad_request"},  {HS_ETIMEOUT, 400, "timeout"},
    {HS_EAUTH, 401, "unauthorized"},  {HS_ENOENT, 404, "not_found"},
    {HS_ENOTSUP, 405, "bad_request"}, {HS_ETOOBIG, 413, "too_large"},
};

void hs_api_error(hs_api_reply *out, const hs_qerr *err)
{
    hs_api_reply_clear(out);
    out->status = 500;
    const char *name = "internal";
    for (size_t i = 0; i < HS_COUNTOF(http_errors); i++)
        if (http_errors[i].code == err->code) {
            out->status = http_errors[i].status;
            name = http_errors[i].name;
        }
    out->content_type = "application/json";
    out->json = json_pack("{s:{s:s,s:s}}", "error", "code", name, "message", err->msg);
}

static void reply_json(hs_api_reply *out, json_t *j)
{
    out->status = 200;
    out->content_type = "application/json";
    out->json = j;
}

/* Parses a run selector given in a path segment (percent-encoded). */
static int run_sel_segment(const char *seg, size_t n, hs_run_sel *sel, hs_qerr *err)
{
    char dec[2100];
    if (hs_pct_decode(dec, sizeof dec, seg, n, HS_PCT_PLUS) < 0)
        return hs__err(err, HS_EINVAL, "malformed run selector in the path");
    return hs_sel_parse_run(sel, dec, err);
}

/* Resolves a run selector given in a path segment (percent-encoded). */
static int run_from_segment(hs_q *q, const char *seg, size_t n, hs__run *run, hs_qerr *err)
{
    hs_run_sel sel;
    int rc = run_sel_segment(seg, n, &sel, err);
    return rc ? rc : hs__run_resolve(q, &sel, run, err);
}

/* ---- typed results as JSON ------------------------------------------------ */

/* The API's "sampling" object of a run. */
static json_t *sampling_json(const hs_run_sampling *s)
{
    json_t *dropped = json_object();
    for (int d = 0; dropped && d < HS_RUNDROP__COUNT; d++)
        if (json_object_set_new(dropped, hs_run_drop_name(d), json_integer(s->dropped[d]))) {
            json_decref(dropped);
            return NULL;
        }
    return json_pack("{s:I,s:I,s:o}", "sample_bytes", (json_int_t)s->sample_bytes, "max_depth",
                     (json_int_t)s->max_depth, "dropped", dropped);
}

/* The run's exact totals as its "exact" object, NULL when there are none. */
static json_t *exact_json(const hs_run_exact *e)
{
    if (!e->has) return NULL;
    return json_pack("{s:b,s:s,s:I,s:I,s:I,s:I,s:I,s:I,s:I}", "in_figures", e->in_figures, "sizes",
                     e->sizes, "allocs", (json_int_t)e->allocs, "frees", (json_int_t)e->frees,
                     "alloc_bytes", (json_int_t)e->alloc_bytes, "free_bytes",
                     (json_int_t)e->free_bytes, "error_bytes", (json_int_t)e->error_bytes,
                     "estimated_peak_bytes", (json_int_t)e->est_peak_bytes, "estimated_peak_t_ns",
                     (json_int_t)e->est_peak_t_ns);
}

/* The record's fields after collector_version: those it may lack, then
 * exact and sampling. 0, or -1 when out of memory. */
static int run_json_tail(json_t *o, const hs_run_record *r)
{
    int rc = 0;
    if (r->has_bye_alloc)
        rc |= json_object_set_new(o, "bye_alloc_events", json_integer(r->bye_alloc_events));
    if (r->has_bye_free)
        rc |= json_object_set_new(o, "bye_free_events", json_integer(r->bye_free_events));
    if (r->main_end_ns)
        rc |= json_object_set_new(o, "main_end_ns", json_integer((json_int_t)r->main_end_ns));
    if (r->exact.has) rc |= json_object_set_new(o, "exact", exact_json(&r->exact));
    return rc | json_object_set_new(o, "sampling", sampling_json(&r->sampling));
}

/* The API's "run" object of a record; NULL when out of memory. */
static json_t *run_json(const hs_run_record *r)
{
    json_t *argv = json_loads(r->argv_json, JSON_DECODE_ANY, NULL), *labels = json_object();
    if (!json_is_array(argv)) {
        json_decref(argv);
        argv = json_array();
    }
    for (size_t i = 0; labels && i < r->nlabels; i++) /* a value not UTF-8 is left out */
        json_object_set_new(labels, r->labels[i].key, json_string(r->labels[i].value));
    json_t *o = json_pack(
        "{s:I,s:s,s:s,s:o,s:s,s:I,s:I,s:o,s:o,s:I,s:I,s:s,s:o,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,"
        "s:I,s:I,s:s}",
        "id", (json_int_t)r->id, "uuid", r->uuid, "program", r->program, "argv", argv, "host",
        r->host, "pid", (json_int_t)r->pid, "ppid", (json_int_t)r->ppid, "parent_id",
        r->has_parent ? json_integer(r->parent_id) : json_null(), "labels", labels, "start_unix_ms",
        (json_int_t)r->start_unix_ms, "duration_ns", (json_int_t)r->duration_ns, "state", r->state,
        "clean_exit", r->clean_exit < 0 ? json_null() : json_boolean(r->clean_exit), "peak_bytes",
        (json_int_t)r->peak_bytes, "peak_count", (json_int_t)r->peak_count, "peak_t_ns",
        (json_int_t)r->peak_t_ns, "end_bytes", (json_int_t)r->end_bytes, "end_count",
        (json_int_t)r->end_count, "total_alloc_bytes", (json_int_t)r->total_alloc_bytes,
        "total_alloc_count", (json_int_t)r->total_alloc_count, "alloc_events",
        (json_int_t)r->alloc_events, "free_events", (json_int_t)r->free_events, "granularity_ns",
        (json_int_t)r->granularity_ns, "keyframe_every", (json_int_t)r->keyframe_every,
        "collector_version", r->collector_version);
    if (o && run_json_tail(o, r)) {
        json_decref(o);
        return NULL;
    }
    return o;
}

json_t *hs_api_runs_json(const hs_runs_result *r)
{
    json_t *runs = json_array();
    for (size_t i = 0; runs && i < r->nruns; i++)
        if (json_array_append_new(runs, run_json(&r->runs[i].brief.record))) {
            json_decref(runs);
            return NULL;
        }
    return json_pack("{s:o,s:o}", "runs", runs, "next",
                     r->next ? json_integer(r->next) : json_null());
}

json_t *hs_api_run_json(const hs_runs_result *r)
{
    assert(r->nruns == 1);
    return json_pack("{s:o}", "run", run_json(&r->runs[0].brief.record));
}

/* GET /api/runs: limit, then the filters, in the order the API has always
 * checked them (program, host, pid, state, then every label=k=v). */
static int api_runs(hs_q *q, const hs__params *params, json_t **out, hs_qerr *err)
{
    static const char *const keys[] = {"limit", "program", "host", "pid", "state", "before"};
    hs_runs_params p;
    hs_runs_result r;
    hs_runs_params_init(&p);
    int rc = 0;
    for (size_t i = 0; !rc && i < HS_COUNTOF(keys); i++) {
        const char *v = hs__param(params, keys[i]);
        if (v) rc = hs_runs_param(&p, keys[i], v, err);
    }
    for (int i = 0; !rc && i < hs__param_count(params); i++) {
        const char *k, *v;
        hs__param_at(params, i, &k, &v);
        if (!strcmp(k, "label")) rc = hs_runs_param(&p, k, v, err);
    }
    if (rc || (rc = hs_core_runs(q, &p, &r, err))) return rc;
    *out = hs_api_runs_json(&r);
    hs_runs_result_clear(&r);
    return *out ? 0 : hs__err(err, HS_ENOMEM, "out of memory");
}

/* GET /api/runs/RUN: the run's record. */
static int api_run(hs_q *q, const char *seg, size_t n, json_t **out, hs_qerr *err)
{
    hs_run_sel sel;
    hs_runs_result r;
    int rc = run_sel_segment(seg, n, &sel, err);
    if (rc || (rc = hs_core_run(q, &sel, &r, err))) return rc;
    *out = hs_api_run_json(&r);
    hs_runs_result_clear(&r);
    return *out ? 0 : hs__err(err, HS_ENOMEM, "out of memory");
}

static json_t *qstack_json(const hs_qstack *st)
{
    json_t *a = json_array();
    for (int i = 0; a && i < st->n; i++) {
        const hs_qframe *f = &st->frames[i];
        json_array_append_new(a,
                              json_pack("{s:s,s:s,s:I,s:s}", "function", f->name, "file", f->file,
                                        "line", (json_int_t)f->line, "module", f->module));
    }
    return a;
}

/* row's "stack", "site_index" and, for a stack cut short, "stack_depth". */
static void row_stack_json(json_t *row, const hs_qstack *st)
{
    json_object_set_new(row, "stack", qstack_json(st));
    json_object_set_new(row, "site_index", json_integer(st->site));
    if (st->depth > st->n) json_object_set_new(row, "stack_depth", json_integer(st->depth));
}

static json_t *top_row_json(const hs_top_result *r, const hs_top_row *w)
{
    json_t *row = json_pack("{s:s,s:s,s:I,s:s,s:I,s:I,s:I,s:I,s:I,s:f}", "name", w->frame.name,
                            "file", w->frame.file, "line", (json_int_t)w->frame.line, "module",
                            w->frame.module, "trace", (json_int_t)w->trace, "self_bytes",
                            (json_int_t)w->self_bytes, "self_count", (json_int_t)w->self_count,
                            "total_bytes", (json_int_t)w->total_bytes, "total_count",
                            (json_int_t)w->total_count, "share", w->share);
    if (row && r->by != HS_GROUP_FUNCTION) row_stack_json(row, &w->stack);
    return row;
}

json_t *hs_api_top_json(const hs_top_result *r)
{
    json_t *rows = json_array();
    for (size_t i = 0; rows && i < r->nrows; i++)
        if (json_array_append_new(rows, top_row_json(r, &r->rows[i]))) {
            json_decref(rows);
            return NULL;
        }
    json_t *cut = json_null();
    if (r->frames_cut || r->stacks_omitted || r->bytes_cut)
        cut = json_pack("{s:o,s:I,s:I,s:I,s:b}", "max_frames",
                        r->frames_cut ? json_integer(r->max_frames) : json_null(), "stacks",
                        (json_int_t)r->stacks_omitted, "stacks_bytes", (json_int_t)r->stacks_bytes,
                        "rows", (json_int_t)r->rows_cut, "answer_bytes", r->bytes_cut);
    return json_pack("{s:o,s:s,s:I,s:s,s:I,s:I,s:I,s:o,s:o,s:o}", "run", run_json(&r->run.record),
                     "at", r->at, "at_ns", (json_int_t)r->at_ns, "by", hs_group_name(r->by),
                     "total_bytes", (json_int_t)r->total_bytes, "total_count",
                     (json_int_t)r->total_count, "rows_total", (json_int_t)r->rows_total, "rows",
                     rows, "truncated", cut, "sampling", sampling_json(&r->run.record.sampling));
}

static json_t *leak_row_json(const hs_leak_row *w, int growing)
{
    json_t *row = json_pack("{s:s,s:s,s:I,s:I}", "name", w->site.name, "file", w->site.file, "line",
                            (json_int_t)w->site.line, "trace", (json_int_t)w->trace);
    if (!row) return NULL;
    row_stack_json(row, &w->stack);
    if (!growing) {
        json_object_set_new(row, "bytes", json_integer(w->bytes));
        json_object_set_new(row, "count", json_integer(w->count));
        json_object_set_new(row, "share", json_real(w->share));
        return row;
    }
    json_object_set_new(row, "slope_bytes_per_s", json_real(w->slope));
    json_object_set_new(row, "r2", json_real(w->r2));
    json_object_set_new(row, "steadiness", json_real(w->steady));
    json_object_set_new(row, "span", json_real(w->span));
    json_object_set_new(row, "end_bytes", json_integer(w->end_bytes));
    json_object_set_new(row, "score", json_real(w->score));
    return row;
}

static json_t *leak_rows_json(const hs_leak_row *rows, size_t n, int growing)
{
    json_t *a = json_array();
    for (size_t i = 0; a && i < n; i++)
        if (json_array_append_new(a, leak_row_json(&rows[i], growing))) {
            json_decref(a);
            return NULL;
        }
    return a;
}

json_t *hs_api_leaks_json(const hs_leaks_result *r)
{
    json_t *cut = json_null();
    if (r->frames_cut || r->bytes_cut)
        cut = json_pack("{s:o,s:b}", "max_frames",
                        r->frames_cut ? json_integer(r->max_frames) : json_null(), "answer_bytes",
                        r->bytes_cut);
    return json_pack("{s:o,s:I,s:I,s:I,s:o,s:o,s:o,s:o}", "run", run_json(&r->run.record), "at_ns",
                     (json_int_t)r->at_ns, "total_bytes", (json_int_t)r->total_bytes, "total_count",
                     (json_int_t)r->total_count, "live_at_end",
                     leak_rows_json(r->live, r->nlive, 0), "growing",
                     leak_rows_json(r->growing, r->ngrowing, 1), "truncated", cut, "sampling",
                     sampling_json(&r->run.record.sampling));
}

static int api_leaks(hs_q *q, const char *seg, size_t n, const hs__params *params, json_t **out,
                     hs_qerr *err)
{
    static const char *const keys[] = {"site", "wrappers", "limit", "max_frames"};
    hs_leaks_params p;
    hs_leaks_params_init(&p);
    int rc = run_sel_segment(seg, n, &p.run, err);
    if (rc) return rc;
    for (size_t i = 0; !rc && i < HS_COUNTOF(keys); i++) {
        const char *v = hs__param(params, keys[i]);
        if (v) rc = hs_leaks_param(&p, keys[i], v, err);
    }
    if (rc) return hs_run_check(q, &p.run, err, rc);
    hs_leaks_result r;
    if ((rc = hs_core_leaks(q, &p, &r, err))) return rc;
    *out = hs_api_leaks_json(&r);
    hs_leaks_result_clear(&r);
    return *out ? 0 : hs__err(err, HS_ENOMEM, "out of memory");
}

json_t *hs_api_sizes_json(const hs_sizes_result *r)
{
    json_t *buckets = json_array();
    for (size_t i = 0; buckets && i < r->nbuckets; i++) {
        const hs_qsize_bucket *b = &r->buckets[i];
        if (json_array_append_new(
                buckets, json_pack("{s:I,s:I,s:I,s:I,s:I}", "bucket", (json_int_t)b->bucket, "lo",
                                   (json_int_t)b->lo, "hi", (json_int_t)b->hi, "allocs",
                                   (json_int_t)b->allocs, "bytes", (json_int_t)b->bytes))) {
            json_decref(buckets);
            return NULL;
        }
    }
    return json_pack("{s:o,s:o,s:I,s:I,s:I,s:s,s:o}", "run", run_json(&r->run.record), "buckets",
                     buckets, "total_allocs", (json_int_t)r->total_allocs, "total_bytes",
                     (json_int_t)r->total_bytes, "suggested_sample_bytes",
                     (json_int_t)r->suggested_sample_bytes, "reason", r->reason, "sampling",
                     sampling_json(&r->run.record.sampling));
}

static int api_sizes(hs_q *q, const char *seg, size_t n, json_t **out, hs_qerr *err)
{
    hs_run_sel sel;
    hs_sizes_result r;
    int rc = run_sel_segment(seg, n, &sel, err);
    if (rc || (rc = hs_core_sizes(q, &sel, &r, err))) return rc;
    *out = hs_api_sizes_json(&r);
    hs_sizes_result_clear(&r);
    return *out ? 0 : hs__err(err, HS_ENOMEM, "out of memory");
}

/* GET /api/runs/RUN/top: the query's parameters, typed, in the order the
 * API has always checked them; the core's answer as JSON. */
static int api_top(hs_q *q, const char *seg, size_t n, const hs__params *params, json_t **out,
                   hs_qerr *err)
{
    static const char *const keys[] = {"site", "wrappers", "by", "limit", "max_frames", "at"};
    hs_top_params p;
    hs_top_params_init(&p);
    int rc = run_sel_segment(seg, n, &p.run, err);
    if (rc) return rc;
    for (size_t i = 0; !rc && i < HS_COUNTOF(keys); i++) {
        const char *v = hs__param(params, keys[i]);
        if (v) rc = hs_top_param(&p, keys[i], v, err);
    }
    if (rc) return hs_run_check(q, &p.run, err, rc);
    hs_top_result r;
    if (rc || (rc = hs_core_top(q, &p, &r, err))) return rc;
    *out = hs_api_top_json(&r);
    hs_top_result_clear(&r);
    return *out ? 0 : hs__err(err, HS_ENOMEM, "out of memory");
}

static json_t *series_json(const hs_history_series *s)
{
    json_t *pts = json_array();
    for (size_t i = 0; pts && i < s->npoints; i++)
        if (json_array_append_new(pts, json_pack("{s:I,s:I}", "t_ns", (json_int_t)s->points[i].t_ns,
                                                 "bytes", (json_int_t)s->points[i].bytes))) {
            json_decref(pts);
            return NULL;
        }
    return json_pack("{s:I,s:s,s:o,s:I,s:o,s:I}", "trace", (json_int_t)s->trace, "name", s->name,
                     "stack", qstack_json(&s->stack), "site_index", (json_int_t)s->stack.site,
                     "points", pts, "max_bytes", (json_int_t)s->max_bytes);
}

/* The heap's points, RSS samples and series of a history answer. */
static int history_lines_json(const hs_history_result *r, json_t *points, json_t *rss,
                              json_t *series)
{
    for (size_t i = 0; i < r->npoints; i++) {
        const hs_history_point *p = &r->points[i];
        if (json_array_append_new(points,
                                  json_pack("{s:I,s:I,s:I,s:I}", "t_ns", (json_int_t)p->t_ns,
                                            "heap_bytes", (json_int_t)p->heap_bytes,
                                            "heap_max_bytes", (json_int_t)p->heap_max_bytes,
                                            "heap_count", (json_int_t)p->heap_count)))
            return -1;
    }
    for (size_t i = 0; i < r->nrss; i++) {
        const hs_rss_point *p = &r->rss[i];
        if (json_array_append_new(rss, json_pack("{s:I,s:I,s:I}", "t_ns", (json_int_t)p->t_ns,
                                                 "rss_bytes", (json_int_t)p->rss_bytes,
                                                 "vsize_bytes", (json_int_t)p->vsize_bytes)))
            return -1;
    }
    for (size_t i = 0; i < r->nseries; i++)
        if (json_array_append_new(series, series_json(&r->series[i]))) return -1;
    return 0;
}

json_t *hs_api_history_json(const hs_history_result *r)
{
    json_t *points = json_array(), *rss = json_array(), *series = json_array();
    if (!points || !rss || !series || history_lines_json(r, points, rss, series)) {
        json_decref(points);
        json_decref(rss);
        json_decref(series);
        return NULL;
    }
    json_t *cut = json_null();
    if (r->cut)
        cut = json_pack("{s:I,s:I,s:b}", "buckets_per_point", (json_int_t)r->buckets_per_point,
                        "rss_samples", (json_int_t)r->rss_samples, "series_points", r->series_cut);
    return json_pack("{s:o,s:I,s:o,s:o,s:o,s:o,s:o}", "run", run_json(&r->run.record),
                     "granularity_ns", (json_int_t)r->granularity_ns, "points", points, "rss", rss,
                     "series", series, "truncated", cut, "sampling",
                     sampling_json(&r->run.record.sampling));
}

/* GET /api/runs/RUN/history (as JSON). */
static int api_history(hs_q *q, const char *seg, size_t n, const hs__params *params, json_t **out,
                       hs_qerr *err)
{
    static const char *const keys[] = {"site", "wrappers", "top", "trace"};
    hs_history_params p;
    hs_history_params_init(&p);
    int rc = run_sel_segment(seg, n, &p.run, err);
    if (rc) return rc;
    for (size_t i = 0; !rc && i < HS_COUNTOF(keys); i++) {
        const char *v = hs__param(params, keys[i]);
        if (v) rc = hs_history_param(&p, keys[i], v, err);
    }
    if (rc) return hs_run_check(q, &p.run, err, rc);
    hs_history_result r;
    if ((rc = hs_core_history(q, &p, &r, err))) return rc;
    *out = hs_api_history_json(&r);
    hs_history_result_clear(&r);
    return *out ? 0 : hs__err(err, HS_ENOMEM, "out of memory");
}

/* One node of a flame answer and its subtree; *ix moves past them. */
static json_t *flame_node_json(const hs_flame_result *r, size_t *ix)
{
    const hs_flame_node *n = &r->nodes[(*ix)++];
    json_t *o, *kids = json_array();
    if (n == r->nodes)
        o = json_pack("{s:s,s:I,s:I,s:I}", "name", "all", "bytes", (json_int_t)n->bytes, "count",
                      (json_int_t)n->count, "self_bytes", (json_int_t)0);
    else
        o = json_pack("{s:s,s:s,s:s,s:I,s:s,s:I,s:I,s:I}", "name", n->label, "function",
                      n->frame.name, "file", n->frame.file, "line", (json_int_t)n->frame.line,
                      "module", n->frame.module, "bytes", (json_int_t)n->bytes, "count",
                      (json_int_t)n->count, "self_bytes", (json_int_t)n->self_bytes);
    for (size_t k = 0; o && kids && k < n->nchildren; k++) {
        json_t *c = flame_node_json(r, ix);
        if (!c || json_array_append_new(kids, c)) {
            json_decref(o);
            o = NULL;
        }
    }
    if (!o || !kids) {
        json_decref(o);
        json_decref(kids);
        return NULL;
    }
    json_object_set_new(o, "children", kids);
    return o;
}

json_t *hs_api_flame_json(const hs_flame_result *r)
{
    size_t ix = 0;
    json_t *root = r->nnodes ? flame_node_json(r, &ix) : NULL;
    if (!root) return NULL;
    json_t *cut = json_null();
    if (r->cut)
        cut = json_pack("{s:I,s:I,s:I,s:o,s:I,s:I,s:b}", "nodes", (json_int_t)r->nodes_cut,
                        "nodes_shown", (json_int_t)r->nodes_shown, "min_bytes",
                        (json_int_t)r->min_bytes, "depth",
                        r->depth_cut ? json_integer(r->depth_cut) : json_null(), "stacks",
                        (json_int_t)r->stacks_omitted, "stacks_bytes", (json_int_t)r->stacks_bytes,
                        "answer_bytes", r->bytes_cut);
    return json_pack("{s:o,s:s,s:I,s:I,s:I,s:o,s:o,s:o}", "run", run_json(&r->run.record), "at",
                     r->at, "at_ns", (json_int_t)r->at_ns, "total_bytes",
                     (json_int_t)r->total_bytes, "total_count", (json_int_t)r->total_count, "root",
                     root, "truncated", cut, "sampling", sampling_json(&r->run.record.sampling));
}

/* GET /api/runs/RUN/flame (as JSON). */
static int api_flame(hs_q *q, const char *seg, size_t n, const hs__params *params, json_t **out,
                     hs_qerr *err)
{
    static const char *const keys[] = {"at", "min_share", "max_nodes", "max_depth"};
    hs_flame_params p;
    hs_flame_params_init(&p);
    int rc = run_sel_segment(seg, n, &p.run, err);
    if (rc) return rc;
    for (size_t i = 0; !rc && i < HS_COUNTOF(keys); i++) {
        const char *v = hs__param(params, keys[i]);
        if (v) rc = hs_flame_param(&p, keys[i], v, err);
    }
    if (rc) return hs_run_check(q, &p.run, err, rc);
    hs_flame_result r;
    if ((rc = hs_core_flame(q, &p, &r, err))) return rc;
    *out = hs_api_flame_json(&r);
    hs_flame_result_clear(&r);
    return *out ? 0 : hs__err(err, HS_ENOMEM, "out of memory");
}

/* Node *ix of a differential flame and its subtree; *ix moves past them. */
static json_t *dflame_node_json(const hs_diff_result *r, size_t *ix)
{
    const hs_dflame_node *n = &r->flame[(*ix)++];
    json_t *o = json_pack("{s:s,s:I,s:I,s:I}", "name", n->name, "a_bytes", (json_int_t)n->a_bytes,
                          "b_bytes", (json_int_t)n->b_bytes, "delta_bytes",
                          (json_int_t)(n->b_bytes - n->a_bytes));
    json_t *kids = json_array();
    for (size_t k = 0; k < n->nchildren; k++) json_array_append_new(kids, dflame_node_json(r, ix));
    json_object_set_new(o, "children", kids);
    return o;
}

static json_t *diff_row_json(const hs_diff_result *r, const hs_diff_row *w)
{
    json_t *row = json_pack("{s:s,s:I,s:I,s:I,s:I,s:I,s:I}", "name", w->name, "a_bytes",
                            (json_int_t)w->a_bytes, "b_bytes", (json_int_t)w->b_bytes,
                            "delta_bytes", (json_int_t)(w->b_bytes - w->a_bytes), "a_count",
                            (json_int_t)w->a_count, "b_count", (json_int_t)w->b_count,
                            "delta_count", (json_int_t)(w->b_count - w->a_count));
    if (row && r->by != HS_GROUP_FUNCTION) row_stack_json(row, &w->stack);
    return row;
}

json_t *hs_api_diff_json(const hs_diff_result *r)
{
    json_t *rows = json_array();
    for (size_t i = 0; rows && i < r->nrows; i++)
        if (json_array_append_new(rows, diff_row_json(r, &r->rows[i]))) {
            json_decref(rows);
            return NULL;
        }
    size_t ix = 0;
    json_t *flame = r->nflame ? dflame_node_json(r, &ix) : json_null();
    json_t *cut = json_null();
    if (r->flame_cut || r->frames_cut || r->stacks_omitted)
        cut = json_pack("{s:b,s:o,s:I,s:I}", "flame", r->flame_cut, "max_frames",
                        r->frames_cut ? json_integer(r->max_frames) : json_null(), "stacks",
                        (json_int_t)r->stacks_omitted, "stacks_bytes", (json_int_t)r->stacks_bytes);
    return json_pack(
        "{s:{s:o,s:s,s:I,s:I},s:{s:o,s:s,s:I,s:I},s:s,s:o,s:o,s:o,s:{s:o,s:o}}", "a", "run",
        run_json(&r->a.run.record), "at", r->a.at, "at_ns", (json_int_t)r->a.at_ns, "total_bytes",
        (json_int_t)r->a.total_bytes, "b", "run", run_json(&r->b.run.record), "at", r->b.at,
        "at_ns", (json_int_t)r->b.at_ns, "total_bytes", (json_int_t)r->b.total_bytes, "by",
        hs_group_name(r->by), "rows", rows, "flame", flame, "truncated", cut, "sampling", "a",
        sampling_json(&r->a.run.record.sampling), "b", sampling_json(&r->b.run.record.sampling));
}

static int api_gdiff(hs_q *q, const hs_diff_params *p, hs_api_reply *out, int *rc, hs_qerr *err);
static int api_check(hs_q *q, const hs__params *params, hs_api_reply *out, hs_qerr *err);

/* GET /api/diff: the parameters in the order the API has always checked
 * them (a missing run of a named before a mistake in b). */
static int api_diff(hs_q *q, const hs__params *params, hs_api_reply *out, hs_qerr *err)
{
    static const char *const keys[] = {"site",       "wrappers", "by", "limit",
                                       "max_frames", "format",   "a",  "b"};
    hs_diff_params p;
    hs_diff_params_init(&p);
    int rc = 0;
    size_t i;
    for (i = 0; !rc && i < HS_COUNTOF(keys); i++) {
        const char *v = hs__param(params, keys[i]);
        if (v) rc = hs_diff_param(&p, keys[i], v, err);
    }
    if (rc) return i == HS_COUNTOF(keys) ? hs_diff_b_check(q, &p, err, rc) : rc;
    if (api_gdiff(q, &p, out, &rc, err)) return rc;
    hs_diff_result r;
    if ((rc = hs_core_diff(q, &p, &r, err))) return rc;
    out->status = 200;
    if (p.collapsed) {
        out->content_type = "text/plain; charset=utf-8";
        out->body = r.collapsed;
        out->len = r.collapsed_len;
        out->filename = "diff.folded";
        r.collapsed = NULL;
    } else {
        out->content_type = "application/json";
        out->json = hs_api_diff_json(&r);
    }
    hs_diff_result_clear(&r);
    if (!p.collapsed && !out->json) return hs__err(err, HS_ENOMEM, "out of memory");
    return 0;
}

static const char *const run_views[] = {"history", "top", "flame", "leaks", "sizes", "export"};

static json_t *api_health(const hs_q *q)
{
    char why[256] = "", msg[4400];
    int ro = q && q->store->ops->read_only(q->store, why, sizeof why);
    if (ro) snprintf(msg, sizeof msg, "database %s %s", q->path, why);
    int ch = q && !strncmp(q->path, "clickhouse://", 13); /* the store, and its SQL dialect */
    return json_pack("{s:b,s:s,s:i,s:b,s:b,s:s?,s:s,s:i}", "ok", 1, "version", HEAPSTORE_VERSION,
                     "schema", hs_qstore_sqlite_schema(), "database", q != NULL, "read_only", ro,
                     "read_only_reason", ro ? msg : NULL, "store", ch ? "clickhouse" : "sqlite",
                     "store_schema", ch ? HS_CH_LAYOUT_VERSION : hs_qstore_sqlite_schema());
}

/* GET /api/runs/RUN/export (and top or flame with a format): a file. */
static int api_export(hs_q *q, const char *seg, size_t n, const char *format,
                      const hs__params *params, hs_api_reply *out, hs_qerr *err)
{
    hs_export_params p;
    hs_export_params_init(&p);
    int rc = run_sel_segment(seg, n, &p.run, err);
    if (rc) return rc;
    if (!(rc = hs_export_param(&p, "format", format, err))) {
        const char *v = hs__param(params, "min_share");
        if (v) rc = hs_export_param(&p, "min_share", v, err);
        if (!rc && (v = hs__param(params, "at"))) rc = hs_export_param(&p, "at", v, err);
    }
    if (rc) return hs_run_check(q, &p.run, err, rc);
    hs_export_result r;
    if ((rc = hs_core_export(q, &p, &r, err))) return rc;
    out->status = 200;
    out->content_type = r.content_type;
    out->body = r.body;
    out->len = r.len;
    out->filename = r.filename;
    return 0;
}

/* GET /api/runs/RUN/history?format=csv: a file. */
static int api_history_csv(hs_q *q, const char *seg, size_t n, hs_api_reply *out, hs_qerr *err)
{
    hs_run_sel sel;
    hs_export_result r;
    int rc = run_sel_segment(seg, n, &sel, err);
    if (rc || (rc = hs_core_history_csv(q, &sel, &r, err))) return rc;
    out->status = 200;
    out->content_type = r.content_type;
    out->body = r.body;
    out->len = r.len;
    out->filename = r.filename;
    return 0;
}

/* A format a view does not have (after its run: a missing run is named
 * first). */
static int api_format_err(const char *view, const char *format, hs_qerr *err)
{
    if (!strcmp(view, "history"))
        return hs__err(err, HS_EINVAL, "history formats: json, csv (not '%s')", format);
    return hs__err(err, HS_EINVAL, "%s has no format '%s'", view, format);
}

/* GET /api/runs/RUN[/VIEW]: path is what follows "/api/runs/" in full. */
static int api_run_route(hs_q *q, const char *method, const char *full, const hs__params *params,
                         hs_api_reply *out, hs_qerr *err)
{
    const char *path = full + 10;
    const char *slash = strchr(path, '/');
    size_t seglen = slash ? (size_t)(slash - path) : strlen(path);
    const char *view = slash ? slash + 1 : NULL;
    size_t i = 0;
    while (view && i < HS_COUNTOF(run_views) && strcmp(view, run_views[i])) i++;
    if (i == HS_COUNTOF(run_views))
        return hs__err(err, HS_ENOENT, "no such endpoint: %s %s (see docs/api.md)", method, full);
    const char *format = hs__param(params, "format");
    if (format && !strcmp(format, "json")) format = NULL;
    json_t *j = NULL;
    int rc;
    if (!view) {
        if (!(rc = api_run(q, path, seglen, &j, err))) reply_json(out, j);
        return rc;
    }
    if (!format && (!strcmp(view, "top") || !strcmp(view, "sizes") || !strcmp(view, "leaks") ||
                    !strcmp(view, "history") || !strcmp(view, "flame"))) {
        rc = !strcmp(view, "top")       ? api_top(q, path, seglen, params, &j, err)
             : !strcmp(view, "flame")   ? api_flame(q, path, seglen, params, &j, err)
             : !strcmp(view, "history") ? api_history(q, path, seglen, params, &j, err)
             : !strcmp(view, "leaks")   ? api_leaks(q, path, seglen, params, &j, err)
                                        : api_sizes(q, path, seglen, &j, err);
        if (!rc) reply_json(out, j);
        return rc;
    }
    if (!strcmp(view, "export"))
        return api_export(q, path, seglen, format ? format : "pprof", params, out, err);
    if (format && (!strcmp(view, "top") || !strcmp(view, "flame")))
        return api_export(q, path, seglen, format, params, out, err);
    if (format && !strcmp(view, "history") && !strcmp(format, "csv"))
        return api_history_csv(q, path, seglen, out, err);
    assert(format); /* every view without one is answered above */
    hs__run run = {0};
    if (!(rc = run_from_segment(q, path, seglen, &run, err)))
        rc = api_format_err(view, format, err);
    hs__run_clear(&run);
    return rc;
}

/* After a request: no read transaction left open, and what a big request
 * used given back. */
static void api_request_end(hs_q *q)
{
    /* An idle pooled connection must not hold a read transaction open (it
     * would pin an old snapshot and keep the WAL from being checkpointed). */
    q->store->ops->idle(q->store);
    /* Give back what a big request used: the caches past what an idle
     * connection keeps, and malloc's free pages (glibc keeps them, and
     * raises its mmap threshold after a big free, so that two big requests
     * in a row would otherwise each leave hundreds of MB held). */
    if (hs__cache_trim(q) || q->node_misses > BIG_REQUEST_NODES) {
        malloc_trim(0);
        q->big = 1;
    }
}

int hs_api_sql(hs_q *q, const char *body, size_t len, json_t **out, hs_qerr *err)
{
    *out = NULL;
    if (!q->store->ops->sql)
        return hs__err(err, HS_EINVAL, "this store (%s) answers no SQL", q->store->ops->name);
    return q->store->ops->sql(q->store, body, len, out, err);
}

static int site_rules(hs_q *q, const hs__params *p, hs_qerr *err)
{
    hs_site_rules r;
    int rc = hs_site_rules_parse(&r, p ? hs__param(p, "site") : NULL,
                                 p ? hs__param(p, "wrappers") : NULL, err);
    return rc ? rc : hs__site_apply(q, &r, err);
}

/* The routes of docs/api.md for a parsed request. */
static int api_route(hs_q *q, const char *method, const char *path, const hs__params *params,
                     const char *body, size_t body_len, hs_api_reply *out, hs_qerr *err)
{
    int is_get = !strcmp(method, "GET") || !strcmp(method, "HEAD"), rc;
    json_t *j = NULL;
    if (!strcmp(path, "/api/health")) {
        if (!is_get) goto bad_method;
        reply_json(out, api_health(q));
        return 0;
    }
    if (!q) return hs__err(err, HS_EDB, "the database cannot be opened");
    /* the last big answer was freed after its request returned */
    if (hs__cache_trim(q) || q->big) malloc_trim(0);
    q->big = 0;
    q->node_misses = 0;
    if (!strcmp(path, "/api/sql")) {
        if (strcmp(method, "POST")) goto bad_method;
        if (!(rc = hs_api_sql(q, body, body_len, &j, err))) reply_json(out, j);
        return rc;
    }
    if (!is_get) goto bad_method;
    if ((rc = site_rules(q, params, err))) return rc;
    if (!strcmp(path, "/api/runs")) {
        if (!(rc = api_runs(q, params, &j, err))) reply_json(out, j);
        return rc;
    }
    if (!strcmp(path, "/api/diff")) return api_diff(q, params, out, err);
    if (!strcmp(path, "/api/check")) return api_check(q, params, out, err);
    if (!strcmp(path, "/api/trend")) return hs__api_trend(q, params, out, err);
    if (!strncmp(path, "/api/runs/", 10)) return api_run_route(q, method, path, params, out, err);
    return hs__err(err, HS_ENOENT, "no such endpoint: %s %s (see docs/api.md)", method, path);
bad_method:
    return hs__err(err, HS_ENOTSUP, "method %s is not allowed on %s", method, path);
}

void hs_api_handle(hs_q *q, const char *method, const char *target, const char *body,
                   size_t body_len, hs_api_reply *out)
{
    hs_qerr err = {0};
    hs__params *params = NULL;
    char path[2048];
    int rc;
    memset(out, 0, sizeof *out);
    const char *qm = strchr(target, '?');
    size_t plen = qm ? (size_t)(qm - target) : strlen(target);
    if (plen >= sizeof path) {
        rc = hs__err(&err, HS_ETOOBIG, "request path longer than %zu bytes", sizeof path);
    } else if (!(params = malloc(sizeof *params))) {
        rc = hs__err(&err, HS_ENOMEM, "out of memory");
    } else {
        memcpy(path, target, plen);
        path[plen] = '\0';
        while (plen > 1 && path[plen - 1] == '/') path[--plen] = '\0';
        rc = hs__params_parse(params, qm ? qm + 1 : NULL, &err);
        if (!rc) rc = api_route(q, method, path, params, body, body_len, out, &err);
    }
    if (rc) hs_api_error(out, &err);
    if (out->status == 200 && out->json == NULL && out->body == NULL) {
        hs__err(&err, HS_ENOMEM, "out of memory");
        hs_api_error(out, &err);
    }
    free(params);
    if (q) api_request_end(q);
}

/* ---- group diff and check (docs/api.md: "Groups of runs", "check") ---------- */

static json_t *gstat_json(const hs_gstat *g)
{
    return json_pack("{s:f,s:f,s:f,s:f}", "mean_bytes", g->mean, "sd_bytes", g->sd,
                     "sampling_se_bytes", g->sampling_se, "se_bytes", g->se);
}

static json_t *gside_json(const hs_gdiff_side *s)
{
    json_t *runs = json_array();
    for (size_t i = 0; runs && i < s->nruns; i++)
        json_array_append_new(runs, json_integer((json_int_t)s->runs[i]));
    return json_pack("{s:s,s:s,s:o,s:b,s:I,s:o}", "selector", s->selector, "at", s->at, "runs",
                     runs, "runs_more", s->more, "sample_bytes", (json_int_t)s->sample_bytes,
                     "total", gstat_json(&s->total));
}

static json_t *gdiff_row_json(const hs_gdiff_result *r, const hs_gdiff_row *w)
{
    json_t *row = json_pack("{s:s,s:s,s:I,s:o,s:o,s:f,s:f,s:f,s:s}", "name", w->name, "file",
                            w->file, "line", (json_int_t)w->line, "a", gstat_json(&w->a), "b",
                            gstat_json(&w->b), "delta_bytes", w->delta, "se_bytes", w->se, "share",
                            w->share, "verdict", hs_gdiff_verdict_name(w->verdict));
    if (row && r->by != HS_GROUP_FUNCTION) row_stack_json(row, &w->stack);
    if (row && r->by == HS_GROUP_FUNCTION)
        json_object_set_new(row, "self",
                            json_pack("{s:o,s:o,s:f,s:f,s:s}", "a", gstat_json(&w->self.a), "b",
                                      gstat_json(&w->self.b), "delta_bytes", w->self.delta,
                                      "se_bytes", w->self.se, "verdict",
                                      hs_gdiff_verdict_name(w->self.verdict)));
    return row;
}

json_t *hs_api_gdiff_json(const hs_gdiff_result *r)
{
    json_t *rows = json_array();
    for (size_t i = 0; rows && i < r->nrows; i++)
        if (json_array_append_new(rows, gdiff_row_json(r, &r->rows[i]))) {
            json_decref(rows);
            return NULL;
        }
    json_t *cut = json_null();
    if (r->frames_cut || r->stacks_omitted)
        cut = json_pack("{s:o,s:I,s:I}", "max_frames",
                        r->frames_cut ? json_integer(r->max_frames) : json_null(), "stacks",
                        (json_int_t)r->stacks_omitted, "stacks_bytes", (json_int_t)r->stacks_bytes);
    return json_pack("{s:b,s:o,s:o,s:s,s:f,s:{s:f,s:f,s:s},s:o,s:I,s:o}", "group", 1, "a",
                     gside_json(&r->a), "b", gside_json(&r->b), "by", hs_group_name(r->by), "k",
                     HS_GDIFF_K, "total", "delta_bytes", r->delta, "se_bytes", r->se, "verdict",
                     hs_gdiff_verdict_name(r->verdict), "rows", rows, "rows_total",
                     (json_int_t)r->rows_total, "truncated", cut);
}

/* /api/diff when a side names several runs: the group's answer. 1 when it
 * answered (or failed: rc), 0 when the sides are two runs. */
static int api_gdiff(hs_q *q, const hs_diff_params *p, hs_api_reply *out, int *rc, hs_qerr *err)
{
    int group;
    if ((*rc = hs_diff_is_group(q, p, &group, err))) return 1;
    if (!group) return 0;
    hs_gdiff_result r;
    if ((*rc = hs_core_gdiff(q, p, &r, err))) return 1;
    reply_json(out, hs_api_gdiff_json(&r));
    hs_gdiff_result_clear(&r);
    if (!out->json) *rc = hs__err(err, HS_ENOMEM, "out of memory");
    return 1;
}

json_t *hs_api_check_json(const hs_check_result *r)
{
    json_t *runs = json_array(), *items = json_array();
    for (size_t i = 0; i < r->nruns; i++)
        json_array_append_new(runs, json_integer((json_int_t)r->runs[i]));
    for (size_t i = 0; i < r->nitems; i++) {
        const hs_check_item *it = &r->items[i];
        json_t *where = json_array();
        for (size_t k = 0; k < it->nwhere; k++) {
            const hs_check_where *w = &it->where[k];
            json_array_append_new(where,
                                  json_pack("{s:s,s:s,s:I,s:s,s:f,s:f}", "name", w->name, "file",
                                            w->file, "line", (json_int_t)w->line, "via", w->via,
                                            "bytes", w->bytes, "share", w->share));
        }
        json_array_append_new(
            items, json_pack("{s:s,s:s,s:f,s:f,s:f,s:b,s:o,s:s,s:o}", "name", it->name, "status",
                             hs_check_status_name(it->status), "value", it->value, "se", it->se,
                             "limit", it->limit, "exact", it->exact, "run",
                             it->run ? json_integer((json_int_t)it->run) : json_null(), "message",
                             it->message, "where", where));
    }
    return json_pack("{s:s,s:o,s:o,s:s,s:b,s:f,s:o}", "selector", r->selector, "baseline",
                     r->baseline ? json_string(r->baseline) : json_null(), "runs", runs, "status",
                     hs_check_status_name(r->status), "pass", r->status != HS_CHECK_FAIL, "k",
                     HS_GDIFF_K, "checks", items);
}

/* GET /api/check?run=SEL&max_peak=…&max_end=…&max_leak_rate=…&baseline=SEL
 * &tolerance=…&at=…&by=…&limit=… */
static int api_check(hs_q *q, const hs__params *params, hs_api_reply *out, hs_qerr *err)
{
    static const char *const keys[] = {"run",      "max_peak",  "max_end", "max_leak_rate",
                                       "baseline", "tolerance", "at",      "by",
                                       "limit"};
    hs_check_params p;
    hs_check_params_init(&p);
    int rc = 0;
    for (size_t i = 0; !rc && i < HS_COUNTOF(keys); i++) {
        const char *v = hs__param(params, keys[i]);
        if (v) rc = hs_check_param(&p, keys[i], v, err);
    }
    hs_check_result r;
    if (rc || (rc = hs_core_check(q, &p, &r, err))) return rc;
    reply_json(out, hs_api_check_json(&r));
    hs_check_result_clear(&r);
    return out->json ? 0 : hs__err(err, HS_ENOMEM, "out of memory");
}
