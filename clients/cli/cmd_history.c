/* heapstore history: the estimated live heap (and RSS) over a run. Direct
 * mode asks the typed core (hs_core_history); HTTP mode decodes the
 * server's JSON into the same result; one renderer prints both. --format
 * csv is the core's CSV (hs_core_history_csv), or the server's. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "cli_decode.h"
#include "cli_query.h"
#include "hs_cli.h"
#include "hs_queries.h"

static const char usage[] =
    "history RUN [--top N] [--trace ID[,ID…]] [--format csv]\n"
    "    [--site user|alloc|leaf] [--wrappers LIST] [--json] [--db PATH]\n" HS_CLI_SITE_HELP;

/* At most ROWS rows: a long run's points are grouped, each row showing the
 * heap at the end of its group and the highest heap within it. */
enum { ROWS = 60 };

/* The RSS sample at or before t (samples are sorted by time). */
static int64_t rss_at(const hs_history_result *r, int64_t t, size_t *cursor)
{
    while (*cursor < r->nrss && r->rss[*cursor].t_ns <= t) (*cursor)++;
    return *cursor ? r->rss[*cursor - 1].rss_bytes : 0;
}

static void print_points(const hs_history_result *r)
{
    char b1[32], b2[32], b3[32], b4[32];
    int64_t max = 1;
    for (size_t i = 0; i < r->npoints; i++)
        if (r->points[i].heap_max_bytes > max) max = r->points[i].heap_max_bytes;
    static const char *const hdr[] = {"T", "HEAP", "MAX SINCE LAST ROW", "RSS", ""};
    static const int right[] = {1, 1, 1, 1, 0};
    hs_table t;
    hs_table_init(&t, 5, hdr, right);
    size_t np = r->npoints, per = (np + ROWS - 1) / ROWS, cur = 0;
    if (per == 0) per = 1;
    if (per > 1)
        printf("(%zu points, shown in groups of %zu; --json or --format csv for all)\n", np, per);
    for (size_t g = 0; g < np; g += per) {
        int64_t gmax = 0;
        size_t last = g + per < np ? g + per - 1 : np - 1;
        for (size_t k = g; k <= last; k++)
            if (r->points[k].heap_max_bytes > gmax) gmax = r->points[k].heap_max_bytes;
        const hs_history_point *p = &r->points[last];
        char bar[64];
        int n = (int)(40.0 * (double)p->heap_bytes / (double)max);
        memset(bar, '#', (size_t)n);
        bar[n] = '\0';
        int64_t rv = rss_at(r, p->t_ns, &cur);
        hs_table_row(&t, hs_cli_secs(p->t_ns, b1), hs_cli_bytes(p->heap_bytes, b2),
                     hs_cli_bytes(gmax, b3), rv ? hs_cli_bytes(rv, b4) : "-", bar);
    }
    hs_table_print(&t);
    hs_table_free(&t);
}

static void print_series(const hs_history_result *r)
{
    if (!r->nseries) return;
    printf("\nstacks (highest live bytes at any moment first):\n");
    static const char *const hdr[] = {"TRACE", "MAX", "AT END", "SITE"};
    static const int right[] = {1, 1, 1, 0};
    hs_table t;
    hs_table_init(&t, 4, hdr, right);
    for (size_t i = 0; i < r->nseries; i++) {
        const hs_history_series *s = &r->series[i];
        char id[24], b1[32], b2[32];
        snprintf(id, sizeof id, "%" PRId64, s->trace);
        int64_t end = s->npoints ? s->points[s->npoints - 1].bytes : 0;
        hs_table_row(&t, id, hs_cli_bytes(s->max_bytes, b1), hs_cli_bytes(end, b2), s->name);
    }
    hs_table_print(&t);
    hs_table_free(&t);
}

static void print_history(const hs_history_result *r)
{
    char b1[32], b2[32], b3[32], b4[32];
    printf("run %" PRId64 " (%s): peak %s at %s, %s at the end; one row per %s bucket\n", r->run.id,
           r->run.program, hs_cli_bytes(r->peak_bytes, b1), hs_cli_secs(r->peak_t_ns, b2),
           hs_cli_bytes(r->end_bytes, b3), hs_cli_secs(r->granularity_ns, b4));
    print_points(r);
    print_series(r);
    hs_cli_sampling(&r->run.record.sampling);
    /* The samples' "(estimates)" holds for the stacks; the heap's own
     * figures may be the collector's exact totals. */
    if (r->run.sample_bytes != 1 && r->run.record.exact.in_figures)
        printf("the heap's peak, end and HEAP column are exact (counted at each allocation "
               "and free); the stacks are estimates\n");
}

/* The options as the API's parameters, in the order the API checks them
 * (p's run already parsed). */
static int history_params(const hs_cli_args *a, hs_history_params *p, hs_qerr *err)
{
    const char *const opts[][2] = {
        {"site", a->site}, {"wrappers", a->wrappers}, {"top", a->top}, {"trace", a->trace}};
    int rc = 0;
    for (size_t i = 0; !rc && i < sizeof opts / sizeof opts[0]; i++)
        if (opts[i][1]) rc = hs_history_param(p, opts[i][0], opts[i][1], err);
    return rc;
}

static int history_direct(const hs_cli_args *a)
{
    hs_q *q;
    hs_history_params p;
    hs_history_result r;
    hs_qerr err;
    int rc = hs_cli_open(a, &q);
    if (rc) return rc;
    hs_history_params_init(&p);
    if ((rc = hs_sel_parse_run(&p.run, a->pos[0], &err)) ||
        ((rc = history_params(a, &p, &err)) && (rc = hs_run_check(q, &p.run, &err, rc))) ||
        (rc = hs_core_history(q, &p, &r, &err))) {
        hs_q_free(q);
        return hs_cli_fail(a, &err);
    }
    if (a->json)
        rc = hs_cli_print_own_json(a, hs_api_history_json(&r));
    else
        print_history(&r);
    hs_history_result_clear(&r);
    hs_q_free(q);
    return rc;
}

static int history_http(const hs_cli_args *a, char *target, size_t len)
{
    strncat(target, "/history?top=", len - strlen(target) - 1);
    hs_cli_pct(target, len, a->top ? a->top : "0");
    if (a->trace) {
        strncat(target, "&trace=", len - strlen(target) - 1);
        hs_cli_pct(target, len, a->trace);
    }
    hs_cli_site_params(a, target, len);
    json_t *j;
    hs_history_result r;
    int rc = hs_cli_get_json(a, target, &j);
    if (rc || !j) return rc;
    if (hs_cli_history_decode(&r, j)) return hs_cli_oom(a); /* takes j over */
    print_history(&r);
    hs_history_result_clear(&r);
    return 0;
}

/* --format csv, direct: the core's CSV, after the checks the API makes
 * first (site rules, then the run). */
static int history_csv_direct(const hs_cli_args *a)
{
    hs_q *q;
    hs_qerr err = {0};
    hs_site_rules site;
    hs_run_sel sel;
    hs_export_result r;
    int rc = hs_cli_open(a, &q);
    if (rc) return rc;
    if ((a->site || a->wrappers) && (rc = hs_site_rules_parse(&site, a->site, a->wrappers, &err)))
        goto fail;
    if ((rc = hs_sel_parse_run(&sel, a->pos[0], &err)) ||
        (rc = hs_core_history_csv(q, &sel, &r, &err)))
        goto fail;
    fwrite(r.body, 1, r.len, stdout);
    hs_export_result_clear(&r);
    hs_q_free(q);
    return 0;
fail:
    hs_q_free(q);
    return hs_cli_fail(a, &err);
}

/* --format csv: the server's CSV answer, printed as it comes. */
static int history_csv(const hs_cli_args *a, char *target, size_t len)
{
    if (hs_cli_direct(a)) return history_csv_direct(a);
    strncat(target, "/history?format=csv", len - strlen(target) - 1);
    hs_cli_site_params(a, target, len);
    hs_api_reply r;
    int rc = hs_cli_call(a, "GET", target, NULL, 0, 1, &r);
    if (rc) return rc;
    fwrite(r.body, 1, r.len, stdout);
    hs_api_reply_clear(&r);
    return 0;
}

int hs_cmd_history(int argc, char **argv)
{
    hs_cli_args a;
    int rc = hs_cli_parse(&a, argc, argv, "top,trace,format,site,wrappers", usage);
    if (rc) return rc < 0 ? 0 : rc;
    char target[4096];
    if ((rc = hs_cli_run_target(&a, usage, target, sizeof target))) return rc;
    int csv = a.format && !strcmp(a.format, "csv");
    if (a.format && !csv && strcmp(a.format, "json")) {
        fprintf(stderr, "heapstore history: --format is csv or json\n");
        return 2;
    }
    if (a.format && !csv) a.json = 1;
    if (csv) return history_csv(&a, target, sizeof target);
    return hs_cli_direct(&a) ? history_direct(&a) : history_http(&a, target, sizeof target);
}
