/* cli_decode: typed results from the API's JSON (see cli_decode.h). */
#include "cli_decode.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_query.h"
#include "hs_error.h"

/* The sampling object s (the API's "sampling") into out. */
static void sampling_decode(hs_run_sampling *out, const json_t *s)
{
    const json_t *d = json_object_get(s, "dropped");
    out->sample_bytes = hs_json_int(s, "sample_bytes");
    out->max_depth = hs_json_int(s, "max_depth");
    for (int k = 0; k < HS_RUNDROP__COUNT; k++)
        out->dropped[k] = hs_json_int(d, hs_run_drop_name(k));
}

/* The exact object ex (NULL: none) into out. */
static void exact_decode(hs_run_exact *out, const json_t *ex)
{
    *out = (hs_run_exact){.has = json_is_object(ex),
                          .in_figures = json_is_true(json_object_get(ex, "in_figures")),
                          .sizes = hs_json_str(ex, "sizes"),
                          .allocs = hs_json_int(ex, "allocs"),
                          .frees = hs_json_int(ex, "frees"),
                          .alloc_bytes = hs_json_int(ex, "alloc_bytes"),
                          .free_bytes = hs_json_int(ex, "free_bytes"),
                          .error_bytes = hs_json_int(ex, "error_bytes"),
                          .est_peak_bytes = hs_json_int(ex, "estimated_peak_bytes"),
                          .est_peak_t_ns = hs_json_int(ex, "estimated_peak_t_ns")};
}

/* A run's record from the API's "run" object and its sampling object s
 * (strings lent from the JSON; labels and argv left empty). */
static void record_decode(hs_run_record *out, const json_t *run, const json_t *s)
{
    const json_t *clean = json_object_get(run, "clean_exit");
    *out =
        (hs_run_record){.id = hs_json_int(run, "id"),
                        .uuid = hs_json_str(run, "uuid"),
                        .program = hs_json_str(run, "program"),
                        .host = hs_json_str(run, "host"),
                        .collector_version = hs_json_str(run, "collector_version"),
                        .state = hs_json_str(run, "state"),
                        .argv_json = "",
                        .pid = hs_json_int(run, "pid"),
                        .ppid = hs_json_int(run, "ppid"),
                        .has_parent = json_is_integer(json_object_get(run, "parent_id")),
                        .parent_id = hs_json_int(run, "parent_id"),
                        .start_unix_ms = hs_json_int(run, "start_unix_ms"),
                        .duration_ns = hs_json_int(run, "duration_ns"),
                        .clean_exit = json_is_boolean(clean) ? json_is_true(clean) : -1,
                        .peak_bytes = hs_json_int(run, "peak_bytes"),
                        .peak_count = hs_json_int(run, "peak_count"),
                        .peak_t_ns = hs_json_int(run, "peak_t_ns"),
                        .end_bytes = hs_json_int(run, "end_bytes"),
                        .end_count = hs_json_int(run, "end_count"),
                        .total_alloc_bytes = hs_json_int(run, "total_alloc_bytes"),
                        .total_alloc_count = hs_json_int(run, "total_alloc_count"),
                        .alloc_events = hs_json_int(run, "alloc_events"),
                        .free_events = hs_json_int(run, "free_events"),
                        .granularity_ns = hs_json_int(run, "granularity_ns"),
                        .keyframe_every = hs_json_int(run, "keyframe_every"),
                        .has_bye_alloc = json_is_integer(json_object_get(run, "bye_alloc_events")),
                        .has_bye_free = json_is_integer(json_object_get(run, "bye_free_events")),
                        .bye_alloc_events = hs_json_int(run, "bye_alloc_events"),
                        .bye_free_events = hs_json_int(run, "bye_free_events"),
                        .main_end_ns = hs_json_int(run, "main_end_ns")};
    exact_decode(&out->exact, json_object_get(run, "exact"));
    sampling_decode(&out->sampling, s);
}

void hs_cli_record_decode(hs_run_record *out, const json_t *run)
{
    record_decode(out, run, json_object_get(run, "sampling"));
}

/* The brief of an answer's run: its "run" and its "sampling". */
static void run_decode(hs_run_brief *out, const json_t *j)
{
    hs_run_record r;
    record_decode(&r, json_object_get(j, "run"), json_object_get(j, "sampling"));
    hs_run_brief_of(out, &r);
}

/* A run's record into out, its labels into the array at *labels (moved
 * past them). */
static void run_info_decode(hs_run_info *out, const json_t *run, hs_qlabel **labels)
{
    hs_run_record r;
    record_decode(&r, run, json_object_get(run, "sampling"));
    r.labels = *labels;
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)json_object_get(run, "labels"), k, v)
    {
        const char *sv = json_string_value(v);
        *(*labels)++ = (hs_qlabel){.key = k, .value = sv ? sv : ""};
    }
    r.nlabels = (size_t)(*labels - r.labels);
    *out = (hs_run_info){.host = r.host,
                         .state = r.state,
                         .start_unix_ms = r.start_unix_ms,
                         .duration_ns = r.duration_ns,
                         .peak_bytes = r.peak_bytes,
                         .end_bytes = r.end_bytes,
                         .events = r.alloc_events + r.free_events,
                         .dropped_events = r.sampling.dropped[HS_RUNDROP_ALLOC_EVENTS] +
                                           r.sampling.dropped[HS_RUNDROP_FREE_EVENTS],
                         .has_clean_exit = r.clean_exit >= 0,
                         .parent_id = r.parent_id,
                         .labels = r.labels,
                         .nlabels = r.nlabels};
    hs_run_brief_of(&out->brief, &r);
}

int hs_cli_runs_decode(hs_runs_result *out, json_t *j)
{
    memset(out, 0, sizeof *out);
    out->held = hs_cli_held(j);
    const json_t *runs = json_object_get(j, "runs");
    size_t n = json_array_size(runs), nl = 0;
    for (size_t i = 0; i < n; i++)
        nl += json_object_size(json_object_get(json_array_get(runs, i), "labels"));
    out->runs = calloc(n ? n : 1, sizeof *out->runs);
    out->labels = calloc(nl ? nl : 1, sizeof *out->labels);
    if (!out->runs || !out->labels) {
        hs_runs_result_clear(out);
        return HS_ENOMEM;
    }
    hs_qlabel *l = out->labels;
    for (size_t i = 0; i < n; i++) run_info_decode(&out->runs[i], json_array_get(runs, i), &l);
    out->nruns = n;
    out->next = hs_json_int(j, "next"); /* null: 0 */
    return 0;
}

static hs_qframe frame_decode(const json_t *f, const char *name_key)
{
    return (hs_qframe){.name = hs_json_str(f, name_key),
                       .file = hs_json_str(f, "file"),
                       .module = hs_json_str(f, "module"),
                       .line = hs_json_int(f, "line")};
}

/* row's "stack", "site_index" and "stack_depth" into out. */
static int stack_decode(hs_qstack *out, const json_t *row)
{
    const json_t *st = json_object_get(row, "stack");
    size_t n = json_array_size(st);
    memset(out, 0, sizeof *out);
    if (!(out->frames = calloc(n ? n : 1, sizeof *out->frames))) return HS_ENOMEM;
    for (size_t i = 0; i < n; i++) out->frames[i] = frame_decode(json_array_get(st, i), "function");
    out->n = (int)n;
    out->site = (int)hs_json_int(row, "site_index");
    out->depth =
        json_object_get(row, "stack_depth") ? (int)hs_json_int(row, "stack_depth") : out->n;
    return 0;
}

static void top_truncated_decode(hs_top_result *out, const json_t *cut)
{
    if (!json_is_object(cut)) return;
    const json_t *mf = json_object_get(cut, "max_frames");
    out->frames_cut = json_is_integer(mf);
    out->max_frames = (int)json_integer_value(mf);
    out->stacks_omitted = hs_json_int(cut, "stacks");
    out->stacks_bytes = hs_json_int(cut, "stacks_bytes");
    out->rows_cut = hs_json_int(cut, "rows");
    out->bytes_cut = json_is_true(json_object_get(cut, "answer_bytes"));
}

int hs_cli_top_decode(hs_top_result *out, json_t *j)
{
    memset(out, 0, sizeof *out);
    out->held = hs_cli_held(j);
    run_decode(&out->run, j);
    snprintf(out->at, sizeof out->at, "%s", hs_json_str(j, "at"));
    out->at_ns = hs_json_int(j, "at_ns");
    if (hs_group_parse(hs_json_str(j, "by"), &out->by)) out->by = HS_GROUP_SITE;
    out->total_bytes = hs_json_int(j, "total_bytes");
    out->total_count = hs_json_int(j, "total_count");
    out->rows_total = hs_json_int(j, "rows_total");
    top_truncated_decode(out, json_object_get(j, "truncated"));
    const json_t *rows = json_object_get(j, "rows");
    size_t n = json_array_size(rows);
    if (!(out->rows = calloc(n ? n : 1, sizeof *out->rows))) goto oom;
    for (size_t i = 0; i < n; i++, out->nrows++) {
        const json_t *row = json_array_get(rows, i);
        hs_top_row *r = &out->rows[i];
        r->frame = frame_decode(row, "name");
        r->trace = hs_json_int(row, "trace");
        r->self_bytes = hs_json_int(row, "self_bytes");
        r->self_count = hs_json_int(row, "self_count");
        r->total_bytes = hs_json_int(row, "total_bytes");
        r->total_count = hs_json_int(row, "total_count");
        r->share = json_real_value(json_object_get(row, "share"));
        if (json_object_get(row, "stack") && stack_decode(&r->stack, row)) goto oom;
    }
    return 0;
oom:
    hs_top_result_clear(out);
    return HS_ENOMEM;
}

int hs_cli_sizes_decode(hs_sizes_result *out, json_t *j)
{
    memset(out, 0, sizeof *out);
    out->held = hs_cli_held(j);
    run_decode(&out->run, j);
    out->total_allocs = hs_json_int(j, "total_allocs");
    out->total_bytes = hs_json_int(j, "total_bytes");
    out->suggested_sample_bytes = hs_json_int(j, "suggested_sample_bytes");
    snprintf(out->reason, sizeof out->reason, "%s", hs_json_str(j, "reason"));
    const json_t *bs = json_object_get(j, "buckets");
    size_t n = json_array_size(bs);
    if (!(out->buckets = calloc(n ? n : 1, sizeof *out->buckets))) {
        hs_sizes_result_clear(out);
        return HS_ENOMEM;
    }
    for (size_t i = 0; i < n; i++) {
        const json_t *b = json_array_get(bs, i);
        out->buckets[i] = (hs_qsize_bucket){.bucket = (int)hs_json_int(b, "bucket"),
                                            .lo = hs_json_int(b, "lo"),
                                            .hi = hs_json_int(b, "hi"),
                                            .allocs = hs_json_int(b, "allocs"),
                                            .bytes = hs_json_int(b, "bytes")};
    }
    out->nbuckets = n;
    return 0;
}

static double real(const json_t *o, const char *key)
{
    return json_number_value(json_object_get(o, key));
}

/* One list of leaks' rows (live or growing) into *out. */
static int leak_rows_decode(hs_leak_row **out, size_t *n, const json_t *rows)
{
    size_t len = json_array_size(rows);
    if (!(*out = calloc(len ? len : 1, sizeof **out))) return HS_ENOMEM;
    for (size_t i = 0; i < len; i++, (*n)++) {
        const json_t *row = json_array_get(rows, i);
        hs_leak_row *r = &(*out)[i];
        r->site = frame_decode(row, "name");
        r->trace = hs_json_int(row, "trace");
        r->bytes = hs_json_int(row, "bytes");
        r->count = hs_json_int(row, "count");
        r->share = real(row, "share");
        r->slope = real(row, "slope_bytes_per_s");
        r->r2 = real(row, "r2");
        r->steady = real(row, "steadiness");
        r->span = real(row, "span");
        r->score = real(row, "score");
        r->end_bytes = hs_json_int(row, "end_bytes");
        if (stack_decode(&r->stack, row)) return HS_ENOMEM;
    }
    return 0;
}

int hs_cli_leaks_decode(hs_leaks_result *out, json_t *j)
{
    memset(out, 0, sizeof *out);
    out->held = hs_cli_held(j);
    run_decode(&out->run, j);
    out->at_ns = hs_json_int(j, "at_ns");
    out->total_bytes = hs_json_int(j, "total_bytes");
    out->total_count = hs_json_int(j, "total_count");
    const json_t *cut = json_object_get(j, "truncated");
    if (json_is_object(cut)) {
        const json_t *mf = json_object_get(cut, "max_frames");
        out->frames_cut = json_is_integer(mf);
        out->max_frames = (int)json_integer_value(mf);
        out->bytes_cut = json_is_true(json_object_get(cut, "answer_bytes"));
    }
    if (leak_rows_decode(&out->live, &out->nlive, json_object_get(j, "live_at_end")) ||
        leak_rows_decode(&out->growing, &out->ngrowing, json_object_get(j, "growing"))) {
        hs_leaks_result_clear(out);
        return HS_ENOMEM;
    }
    return 0;
}

static int series_decode(hs_history_series *out, const json_t *s)
{
    const json_t *pts = json_object_get(s, "points");
    size_t n = json_array_size(pts);
    out->trace = hs_json_int(s, "trace");
    out->name = hs_json_str(s, "name");
    out->max_bytes = hs_json_int(s, "max_bytes");
    if (stack_decode(&out->stack, s)) return HS_ENOMEM;
    if (!(out->points = calloc(n ? n : 1, sizeof *out->points))) return HS_ENOMEM;
    for (size_t i = 0; i < n; i++, out->npoints++) {
        const json_t *p = json_array_get(pts, i);
        out->points[i] =
            (hs_series_point){.t_ns = hs_json_int(p, "t_ns"), .bytes = hs_json_int(p, "bytes")};
    }
    return 0;
}

/* The heap's points and RSS samples of a history answer. */
static int history_lines_decode(hs_history_result *out, const json_t *j)
{
    const json_t *pts = json_object_get(j, "points"), *rss = json_object_get(j, "rss");
    size_t np = json_array_size(pts), nr = json_array_size(rss);
    out->points = calloc(np ? np : 1, sizeof *out->points);
    out->rss = calloc(nr ? nr : 1, sizeof *out->rss);
    if (!out->points || !out->rss) return HS_ENOMEM;
    for (size_t i = 0; i < np; i++) {
        const json_t *p = json_array_get(pts, i);
        out->points[i] = (hs_history_point){.t_ns = hs_json_int(p, "t_ns"),
                                            .heap_bytes = hs_json_int(p, "heap_bytes"),
                                            .heap_max_bytes = hs_json_int(p, "heap_max_bytes"),
                                            .heap_count = hs_json_int(p, "heap_count")};
    }
    out->npoints = np;
    for (size_t i = 0; i < nr; i++) {
        const json_t *p = json_array_get(rss, i);
        out->rss[i] = (hs_rss_point){.t_ns = hs_json_int(p, "t_ns"),
                                     .rss_bytes = hs_json_int(p, "rss_bytes"),
                                     .vsize_bytes = hs_json_int(p, "vsize_bytes")};
    }
    out->nrss = nr;
    return 0;
}

int hs_cli_history_decode(hs_history_result *out, json_t *j)
{
    memset(out, 0, sizeof *out);
    out->held = hs_cli_held(j);
    run_decode(&out->run, j);
    const json_t *run = json_object_get(j, "run"), *cut = json_object_get(j, "truncated");
    out->peak_bytes = hs_json_int(run, "peak_bytes");
    out->peak_t_ns = hs_json_int(run, "peak_t_ns");
    out->end_bytes = hs_json_int(run, "end_bytes");
    out->granularity_ns = hs_json_int(j, "granularity_ns");
    out->cut = json_is_object(cut);
    out->buckets_per_point = out->cut ? hs_json_int(cut, "buckets_per_point") : 1;
    out->rss_samples = hs_json_int(cut, "rss_samples");
    out->series_cut = json_is_true(json_object_get(cut, "series_points"));
    const json_t *series = json_object_get(j, "series");
    size_t n = json_array_size(series);
    if (history_lines_decode(out, j)) goto oom;
    if (!(out->series = calloc(n ? n : 1, sizeof *out->series))) goto oom;
    for (size_t i = 0; i < n; i++) {
        out->nseries++; /* cleared also when half decoded */
        if (series_decode(&out->series[i], json_array_get(series, i))) goto oom;
    }
    return 0;
oom:
    hs_history_result_clear(out);
    return HS_ENOMEM;
}

/* One side of a diff answer: its run from the side, its sampling from the
 * answer's "sampling" object. */
static void diff_side_decode(hs_diff_side *out, const json_t *j, const char *key)
{
    const json_t *side = json_object_get(j, key), *run = json_object_get(side, "run");
    const json_t *s = json_object_get(json_object_get(j, "sampling"), key);
    hs_run_record r;
    record_decode(&r, run, s);
    *out = (hs_diff_side){.at_ns = hs_json_int(side, "at_ns"),
                          .total_bytes = hs_json_int(side, "total_bytes")};
    hs_run_brief_of(&out->run, &r);
    snprintf(out->at, sizeof out->at, "%s", hs_json_str(side, "at"));
}

int hs_cli_diff_decode(hs_diff_result *out, json_t *j)
{
    memset(out, 0, sizeof *out);
    out->held = hs_cli_held(j);
    diff_side_decode(&out->a, j, "a");
    diff_side_decode(&out->b, j, "b");
    if (hs_group_parse(hs_json_str(j, "by"), &out->by)) out->by = HS_GROUP_STACK;
    const json_t *rows = json_object_get(j, "rows");
    size_t n = json_array_size(rows);
    if (!(out->rows = calloc(n ? n : 1, sizeof *out->rows))) goto oom;
    for (size_t i = 0; i < n; i++, out->nrows++) {
        const json_t *row = json_array_get(rows, i);
        hs_diff_row *w = &out->rows[i];
        *w = (hs_diff_row){.name = hs_json_str(row, "name"),
                           .a_bytes = hs_json_int(row, "a_bytes"),
                           .a_count = hs_json_int(row, "a_count"),
                           .b_bytes = hs_json_int(row, "b_bytes"),
                           .b_count = hs_json_int(row, "b_count")};
        if (stack_decode(&w->stack, row)) goto oom;
    }
    return 0;
oom:
    hs_diff_result_clear(out);
    return HS_ENOMEM;
}

/* ---- groups of runs and check ------------------------------------------------ */

static double jnum(const json_t *o, const char *key)
{
    return json_number_value(json_object_get(o, key));
}

static hs_gstat gstat_decode(const json_t *g)
{
    return (hs_gstat){.mean = jnum(g, "mean_bytes"),
                      .sd = jnum(g, "sd_bytes"),
                      .sampling_se = jnum(g, "sampling_se_bytes"),
                      .se = jnum(g, "se_bytes")};
}

/* The hs_gdiff_verdict named s (HS_GDIFF_SAME when none is). */
static int verdict_decode(const char *s)
{
    for (int v = HS_GDIFF_SAME; v <= HS_GDIFF_SHRANK; v++)
        if (!strcmp(s, hs_gdiff_verdict_name(v))) return v;
    return HS_GDIFF_SAME;
}

static int gside_decode(hs_gdiff_side *out, const json_t *s)
{
    const json_t *runs = json_object_get(s, "runs");
    size_t n = json_array_size(runs);
    snprintf(out->selector, sizeof out->selector, "%s", hs_json_str(s, "selector"));
    snprintf(out->at, sizeof out->at, "%s", hs_json_str(s, "at"));
    if (!(out->runs = calloc(n ? n : 1, sizeof *out->runs))) return HS_ENOMEM;
    for (size_t i = 0; i < n; i++) out->runs[i] = json_integer_value(json_array_get(runs, i));
    out->nruns = n;
    out->more = json_is_true(json_object_get(s, "runs_more"));
    out->sample_bytes = hs_json_int(s, "sample_bytes");
    out->total = gstat_decode(json_object_get(s, "total"));
    return 0;
}

int hs_cli_gdiff_decode(hs_gdiff_result *out, json_t *j)
{
    memset(out, 0, sizeof *out);
    out->held = hs_cli_held(j);
    const json_t *tot = json_object_get(j, "total"), *rows = json_object_get(j, "rows");
    if (hs_group_parse(hs_json_str(j, "by"), &out->by)) out->by = HS_GROUP_STACK;
    out->delta = jnum(tot, "delta_bytes");
    out->se = jnum(tot, "se_bytes");
    out->verdict = verdict_decode(hs_json_str(tot, "verdict"));
    out->rows_total = hs_json_int(j, "rows_total");
    size_t n = json_array_size(rows);
    if (gside_decode(&out->a, json_object_get(j, "a")) ||
        gside_decode(&out->b, json_object_get(j, "b")) ||
        !(out->rows = calloc(n ? n : 1, sizeof *out->rows))) {
        hs_gdiff_result_clear(out);
        return HS_ENOMEM;
    }
    for (size_t i = 0; i < n; i++, out->nrows++) {
        const json_t *w = json_array_get(rows, i), *self = json_object_get(w, "self");
        out->rows[i] =
            (hs_gdiff_row){.name = hs_json_str(w, "name"),
                           .file = hs_json_str(w, "file"),
                           .line = hs_json_int(w, "line"),
                           .a = gstat_decode(json_object_get(w, "a")),
                           .b = gstat_decode(json_object_get(w, "b")),
                           .delta = jnum(w, "delta_bytes"),
                           .se = jnum(w, "se_bytes"),
                           .share = jnum(w, "share"),
                           .verdict = verdict_decode(hs_json_str(w, "verdict")),
                           .self = {.a = gstat_decode(json_object_get(self, "a")),
                                    .b = gstat_decode(json_object_get(self, "b")),
                                    .delta = jnum(self, "delta_bytes"),
                                    .se = jnum(self, "se_bytes"),
                                    .verdict = verdict_decode(hs_json_str(self, "verdict"))}};
    }
    return 0;
}

/* The hs_check_status named s (pass when none is). */
static int status_decode(const char *s)
{
    for (int v = HS_CHECK_PASS; v <= HS_CHECK_FAIL; v++)
        if (!strcmp(s, hs_check_status_name(v))) return v;
    return HS_CHECK_PASS;
}

static int check_item_decode(hs_check_item *out, const json_t *it)
{
    const json_t *where = json_object_get(it, "where");
    size_t n = json_array_size(where);
    *out = (hs_check_item){.status = status_decode(hs_json_str(it, "status")),
                           .value = jnum(it, "value"),
                           .se = jnum(it, "se"),
                           .limit = jnum(it, "limit"),
                           .run = hs_json_int(it, "run"),
                           .exact = json_is_true(json_object_get(it, "exact"))};
    snprintf(out->name, sizeof out->name, "%s", hs_json_str(it, "name"));
    snprintf(out->message, sizeof out->message, "%s", hs_json_str(it, "message"));
    if (!(out->where = calloc(n ? n : 1, sizeof *out->where))) return HS_ENOMEM;
    for (size_t k = 0; k < n; k++, out->nwhere++) {
        const json_t *w = json_array_get(where, k);
        hs_check_where *o = &out->where[k];
        *o = (hs_check_where){.name = hs_json_str(w, "name"),
                              .file = hs_json_str(w, "file"),
                              .line = hs_json_int(w, "line"),
                              .bytes = jnum(w, "bytes"),
                              .share = jnum(w, "share")};
        snprintf(o->via, sizeof o->via, "%s", hs_json_str(w, "via"));
    }
    return 0;
}

int hs_cli_check_decode(hs_check_result *out, const json_t *j)
{
    const json_t *runs = json_object_get(j, "runs"), *items = json_object_get(j, "checks");
    size_t nr = json_array_size(runs), ni = json_array_size(items);
    memset(out, 0, sizeof *out);
    out->selector = hs_json_str(j, "selector");
    out->baseline = json_string_value(json_object_get(j, "baseline"));
    out->status = status_decode(hs_json_str(j, "status"));
    out->runs = calloc(nr ? nr : 1, sizeof *out->runs);
    out->items = calloc(ni ? ni : 1, sizeof *out->items);
    int rc = out->runs && out->items ? 0 : HS_ENOMEM;
    for (size_t i = 0; !rc && i < nr; i++, out->nruns++)
        out->runs[i] = json_integer_value(json_array_get(runs, i));
    for (size_t i = 0; !rc && i < ni; i++, out->nitems++)
        rc = check_item_decode(&out->items[i], json_array_get(items, i));
    if (rc) hs_check_result_clear(out);
    return rc;
}
