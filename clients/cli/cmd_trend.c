/* heapstore trend: the figures of many runs (or of a label's groups) in a
 * table and a sparkline. Direct mode asks the typed core (hs_core_trend);
 * HTTP mode decodes /api/trend's JSON into the same result; one renderer
 * prints both. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli_query.h"
#include "hs_cli.h"
#include "hs_queries.h"

static const char usage[] =
    "trend SELECTOR [--by LABEL] [--function NAME | --site FILE:LINE|NAME] [--at peak|end]\n"
    "    [--metric peak|end|total|leak_rate|rss_peak|duration|dropped|code] [--limit N]\n"
    "    [--json] [--db PATH]\n"
    "  SELECTOR: key=value[,key=value…] (program, host, or a label), a run id, or 'all'.\n"
    "  One row per run, oldest first (the newest N runs, default 10000), or with --by\n"
    "  one row per value of the label in its natural order (1.9 before 1.10): the mean\n"
    "  of its runs, and the least and greatest of the metric. Leak rate: how fast the\n"
    "  heap's floor rose, from the run's second quarter to its last, bytes a second\n"
    "  (a buffer built and freed does not count; memory never freed does). --function or\n"
    "  --site adds that code's bytes at the peak (or --at end) in every run. The line\n"
    "  under the table draws the metric (default peak; code with --function/--site).";

/* Options of this command the shared parser does not know. */
typedef struct trend_opts {
    const char *function, *metric;
} trend_opts;

/* Takes --function and --metric out of argv (into o); the rest stays in
 * order for hs_cli_parse. 0, or 2 for a missing value. */
static int take_opts(int *argc, char **argv, trend_opts *o)
{
    int n = 1;
    for (int i = 1; i < *argc; i++) {
        const char **dst = !strcmp(argv[i], "--function") ? &o->function
                           : !strcmp(argv[i], "--metric") ? &o->metric
                                                          : NULL;
        if (!dst) {
            argv[n++] = argv[i];
            continue;
        }
        if (i + 1 >= *argc) {
            fprintf(stderr, "heapstore trend: %s needs a value\nusage: heapstore %s\n", argv[i],
                    usage);
            return 2;
        }
        *dst = argv[++i];
    }
    *argc = n;
    return 0;
}

/* The parameters as name/value pairs, in the API's names. */
typedef struct trend_kv {
    const char *k[8], *v[8];
    int n;
} trend_kv;

static void trend_kv_fill(trend_kv *kv, const hs_cli_args *a, const trend_opts *o)
{
    kv->n = 0;
#define KV(name, val)                                                                              \
    if (val) kv->k[kv->n] = name, kv->v[kv->n++] = val
    KV("runs", a->pos[0]);
    KV("by", a->by);
    KV("function", o->function);
    KV("site", a->site);
    KV("at", a->at);
    KV("metric", o->metric);
    KV("limit", a->limit);
#undef KV
}

/* ---- JSON (HTTP mode) into the typed result ---------------------------- */

static void figures_decode(const json_t *o, double *v, int *has)
{
    for (int m = 0; m < HS_TM__COUNT; m++) {
        const json_t *x = json_object_get(o, hs_trend_metric_name(m));
        if (has) has[m] = json_is_number(x);
        v[m] = json_number_value(x);
    }
}

/* Takes j over (r->held); strings are lent from it. 0 or -1. */
static int trend_decode(hs_trend_result *r, json_t *j)
{
    memset(r, 0, sizeof *r);
    r->held = hs_cli_held(j);
    const json_t *rows = json_object_get(j, "rows"), *code = json_object_get(j, "code");
    if (hs_trend_metric_parse(hs_json_str(j, "metric"), &r->metric)) r->metric = HS_TM_PEAK;
    r->by = json_string_value(json_object_get(j, "by"));
    r->function = json_string_value(json_object_get(code, "function"));
    r->site = json_string_value(json_object_get(code, "site"));
    r->at_end = !strcmp(hs_json_str(code, "at"), "end");
    r->runs_read = hs_json_int(j, "runs_read");
    r->cut = json_is_true(json_object_get(j, "truncated"));
    r->nrows = json_array_size(rows);
    r->rows = calloc(r->nrows ? r->nrows : 1, sizeof *r->rows);
    if (!r->rows) return -1;
    for (size_t i = 0; i < r->nrows; i++) {
        const json_t *o = json_array_get(rows, i);
        hs_trend_row *w = &r->rows[i];
        w->run = hs_json_int(o, "run");
        w->program = hs_json_str(o, "program");
        w->state = hs_json_str(o, "state");
        w->value = json_string_value(json_object_get(o, "value"));
        w->start_unix_ms = hs_json_int(o, "start_unix_ms");
        w->runs = r->by ? hs_json_int(o, "runs") : 1;
        w->first_run = r->by ? hs_json_int(o, "first_run") : w->run;
        w->last_run = r->by ? hs_json_int(o, "last_run") : w->run;
        figures_decode(o, w->v, w->has);
        figures_decode(r->by ? json_object_get(o, "min") : o, w->lo, NULL);
        figures_decode(r->by ? json_object_get(o, "max") : o, w->hi, NULL);
    }
    return 0;
}

/* ---- rendering ------------------------------------------------------------ */

/* A figure as the table shows it ("-" when unknown). */
static const char *figure(char *buf, int m, double v, int has)
{
    if (!has) return strcpy(buf, "-");
    if (m == HS_TM_DURATION) return hs_cli_secs((int64_t)llround(v), buf);
    if (m == HS_TM_DROPPED) {
        snprintf(buf, 32, "%.0f", v);
        return buf;
    }
    hs_cli_bytes((int64_t)llround(v), buf);
    if (m == HS_TM_LEAK_RATE) strcat(buf, "/s");
    return buf;
}

/* The metric of every row as one line of block characters (rows grouped
 * by their highest when there are more than fit). */
static void sparkline(const hs_trend_result *r)
{
    static const char *const bars[] = {"▁", "▂", "▃", "▄", "▅", "▆", "▇", "█"};
    enum { WIDTH = 72 };
    int m = r->metric;
    double lo = INFINITY, hi = -INFINITY;
    for (size_t i = 0; i < r->nrows; i++)
        if (r->rows[i].has[m]) lo = fmin(lo, r->rows[i].v[m]), hi = fmax(hi, r->rows[i].v[m]);
    if (lo > hi) return;
    size_t per = (r->nrows + WIDTH - 1) / WIDTH;
    printf("%s: ", hs_trend_metric_name(m));
    for (size_t g = 0; g < r->nrows; g += per) {
        double v = -INFINITY;
        for (size_t k = g; k < g + per && k < r->nrows; k++)
            if (r->rows[k].has[m]) v = fmax(v, r->rows[k].v[m]);
        int b = v == -INFINITY ? -1 : hi > lo ? (int)((v - lo) / (hi - lo) * 7.0 + 0.5) : 3;
        fputs(b < 0 ? " " : bars[b], stdout);
    }
    char b1[40], b2[40];
    printf("  %s .. %s%s\n", figure(b1, m, lo, 1), figure(b2, m, hi, 1),
           per > 1 ? " (each mark: the highest of its runs)" : "");
}

static void print_trend(const hs_trend_result *r)
{
    if (!r->nrows) {
        printf("no runs match\n");
        return;
    }
    int code = r->function || r->site;
    static const char *const run_hdr[] = {"RUN",       "STARTED",  "PEAK",     "AT END",  "TOTAL",
                                          "LEAK RATE", "RSS PEAK", "DURATION", "DROPPED", "CODE"};
    static const char *const grp_hdr[] = {"VALUE",   "RUNS",      "PEAK",     "AT END",
                                          "TOTAL",   "LEAK RATE", "RSS PEAK", "DURATION",
                                          "DROPPED", "CODE",      "RANGE"};
    static const int right[] = {0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
    const char *hdr[11];
    int ncol = 0;
    for (int i = 0; i < 11; i++) {
        const char *h = r->by ? grp_hdr[i] : i < 10 ? run_hdr[i] : NULL;
        if (h && (code || strcmp(h, "CODE"))) hdr[ncol++] = h;
    }
    hs_table t;
    hs_table_init(&t, ncol, hdr, right);
    for (size_t i = 0; i < r->nrows; i++) {
        const hs_trend_row *w = &r->rows[i];
        char c[11][48], lo[40], hi[40];
        int k = 0;
        if (r->by) {
            snprintf(c[k++], 48, "%s", w->value ? w->value : "");
            snprintf(c[k++], 48, "%" PRId64, w->runs);
        } else {
            snprintf(c[k++], 48, "%" PRId64, w->run);
            time_t st = (time_t)(w->start_unix_ms / 1000);
            struct tm tm;
            localtime_r(&st, &tm);
            strftime(c[k++], 48, "%Y-%m-%d %H:%M:%S", &tm);
        }
        for (int m = 0; m < HS_TM__COUNT; m++)
            if (m != HS_TM_CODE || code) figure(c[k++], m, w->v[m], w->has[m]);
        if (r->by)
            snprintf(c[k++], 48, "%s .. %s", figure(lo, r->metric, w->lo[r->metric], 1),
                     figure(hi, r->metric, w->hi[r->metric], 1));
        hs_table_row(&t, c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7], c[8], c[9], c[10]);
    }
    hs_table_print(&t);
    hs_table_free(&t);
    if (code)
        printf("CODE: the bytes of stacks through %s %s at the %s\n",
               r->function ? "function" : "site", r->function ? r->function : r->site,
               r->at_end ? "end" : "peak");
    sparkline(r);
    if (r->cut)
        printf("(the newest %" PRId64 " matching runs; --limit N reads more)\n", r->runs_read);
}

static int trend_direct(const hs_cli_args *a, const trend_kv *kv)
{
    hs_trend_params p;
    hs_trend_result r;
    hs_qerr err;
    hs_trend_params_init(&p);
    for (int i = 0; i < kv->n; i++)
        if (hs_trend_param(&p, kv->k[i], kv->v[i], &err)) return hs_cli_fail(a, &err);
    hs_q *q;
    int rc = hs_cli_open(a, &q);
    if (rc) return rc;
    if (hs_core_trend(q, &p, &r, &err)) {
        hs_q_free(q);
        return hs_cli_fail(a, &err);
    }
    if (a->json)
        rc = hs_cli_print_own_json(a, hs_api_trend_json(&r));
    else
        print_trend(&r);
    hs_trend_result_clear(&r);
    hs_q_free(q);
    return rc;
}

static int trend_http(const hs_cli_args *a, const trend_kv *kv)
{
    char target[4096] = "/api/trend";
    for (int i = 0; i < kv->n; i++) {
        strncat(target, i ? "&" : "?", sizeof target - strlen(target) - 1);
        strncat(target, kv->k[i], sizeof target - strlen(target) - 1);
        strncat(target, "=", sizeof target - strlen(target) - 1);
        hs_cli_pct(target, sizeof target, kv->v[i]);
    }
    json_t *j;
    hs_trend_result r;
    int rc = hs_cli_get_json(a, target, &j);
    if (rc || !j) return rc;
    if (trend_decode(&r, j)) {
        hs_trend_result_clear(&r);
        return hs_cli_oom(a);
    }
    print_trend(&r);
    hs_trend_result_clear(&r);
    return 0;
}

int hs_cmd_trend(int argc, char **argv)
{
    hs_cli_args a;
    trend_opts o = {0};
    int rc = take_opts(&argc, argv, &o);
    if (rc) return rc;
    if ((rc = hs_cli_parse(&a, argc, argv, "by,site,at,limit", usage))) return rc < 0 ? 0 : rc;
    if (a.npos != 1) {
        fprintf(stderr, "heapstore trend: give one SELECTOR (or 'all')\nusage: heapstore %s\n",
                usage);
        return 2;
    }
    if (o.function && a.site) {
        fprintf(stderr, "heapstore trend: give --function or --site, not both\n");
        return 2;
    }
    trend_kv kv;
    trend_kv_fill(&kv, &a, &o);
    return hs_cli_direct(&a) ? trend_direct(&a, &kv) : trend_http(&a, &kv);
}
