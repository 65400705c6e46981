/* heapstore history: the estimated live heap (and RSS) over a run. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "cli_query.h"
#include "hs_cli.h"

static const char usage[] =
    "history RUN [--top N] [--trace ID[,ID…]] [--format csv]\n"
    "    [--site user|alloc|leaf] [--wrappers LIST] [--json] [--db PATH]\n" HS_CLI_SITE_HELP;

/* The RSS sample at or before t (samples are sorted by time). */
static int64_t rss_at(const json_t *rss, int64_t t, size_t *cursor)
{
    int64_t v = 0;
    while (*cursor < json_array_size(rss) && hs_json_int(json_array_get(rss, *cursor), "t_ns") <= t)
        (*cursor)++;
    if (*cursor) v = hs_json_int(json_array_get(rss, *cursor - 1), "rss_bytes");
    return v;
}

int hs_cmd_history(int argc, char **argv)
{
    hs_cli_args a;
    int rc = hs_cli_parse(&a, argc, argv, "top,trace,format,site,wrappers", usage);
    if (rc) return rc < 0 ? 0 : rc;
    char target[4096];
    if ((rc = hs_cli_run_target(&a, usage, target, sizeof target))) return rc;
    strcat(target, "/history?top=");
    hs_cli_pct(target, sizeof target, a.top ? a.top : "0");
    if (a.trace) {
        strcat(target, "&trace=");
        hs_cli_pct(target, sizeof target, a.trace);
    }
    int csv = a.format && !strcmp(a.format, "csv");
    if (a.format && !csv && strcmp(a.format, "json")) {
        fprintf(stderr, "heapstore history: --format is csv or json\n");
        return 2;
    }
    if (csv) strcat(target, "&format=csv");
    hs_cli_site_params(&a, target, sizeof target);
    hs_api_reply r;
    if ((rc = hs_cli_call(&a, "GET", target, NULL, 0, csv, &r))) return rc;
    if (csv) {
        fwrite(r.body, 1, r.len, stdout);
        hs_api_reply_clear(&r);
        return 0;
    }
    if (a.json || (a.format && !strcmp(a.format, "json"))) {
        hs_cli_print_json(r.json);
        hs_api_reply_clear(&r);
        return 0;
    }
    const json_t *j = r.json, *run = json_object_get(j, "run");
    json_t *points = json_object_get(j, "points"), *rss = json_object_get(j, "rss");
    char b1[32], b2[32], b3[32], b4[32];
    printf("run %" PRId64 " (%s): peak %s at %s, %s at the end; one row per %s bucket\n",
           hs_json_int(run, "id"), hs_json_str(run, "program"),
           hs_cli_bytes(hs_json_int(run, "peak_bytes"), b1),
           hs_cli_secs(hs_json_int(run, "peak_t_ns"), b2),
           hs_cli_bytes(hs_json_int(run, "end_bytes"), b3),
           hs_cli_secs(hs_json_int(j, "granularity_ns"), b4));
    int64_t max = 1;
    size_t i;
    json_t *p;
    json_array_foreach(points, i, p) if (hs_json_int(p, "heap_max_bytes") > max) max =
        hs_json_int(p, "heap_max_bytes");
    static const char *const hdr[] = {"T", "HEAP", "MAX SINCE LAST ROW", "RSS", ""};
    static const int right[] = {1, 1, 1, 1, 0};
    hs_table t;
    hs_table_init(&t, 5, hdr, right);
    /* At most ROWS rows: a long run's points are grouped, each row showing
     * the heap at the end of its group and the highest heap within it. */
    enum { ROWS = 60 };
    size_t np = json_array_size(points), per = (np + ROWS - 1) / ROWS, cur = 0;
    if (per == 0) per = 1;
    if (per > 1)
        printf("(%zu points, shown in groups of %zu; --json or --format csv for all)\n", np, per);
    for (size_t g = 0; g < np; g += per) {
        int64_t gmax = 0;
        size_t last = g + per < np ? g + per - 1 : np - 1;
        for (size_t k = g; k <= last; k++) {
            int64_t m = hs_json_int(json_array_get(points, k), "heap_max_bytes");
            if (m > gmax) gmax = m;
        }
        p = json_array_get(points, last);
        char bar[64];
        int64_t hb = hs_json_int(p, "heap_bytes");
        int n = (int)(40.0 * (double)hb / (double)max);
        memset(bar, '#', (size_t)n);
        bar[n] = '\0';
        int64_t rv = rss_at(rss, hs_json_int(p, "t_ns"), &cur);
        hs_table_row(&t, hs_cli_secs(hs_json_int(p, "t_ns"), b1), hs_cli_bytes(hb, b2),
                     hs_cli_bytes(gmax, b3), rv ? hs_cli_bytes(rv, b4) : "-", bar);
    }
    hs_table_print(&t);
    hs_table_free(&t);
    json_t *series = json_object_get(j, "series");
    if (json_array_size(series)) {
        printf("\nstacks (highest live bytes at any moment first):\n");
        static const char *const sh[] = {"TRACE", "MAX", "AT END", "SITE"};
        static const int sr[] = {1, 1, 1, 0};
        hs_table_init(&t, 4, sh, sr);
        json_t *s;
        json_array_foreach(series, i, s)
        {
            char id[24];
            json_t *pts = json_object_get(s, "points");
            size_t npts = json_array_size(pts);
            snprintf(id, sizeof id, "%" PRId64, hs_json_int(s, "trace"));
            hs_table_row(
                &t, id, hs_cli_bytes(hs_json_int(s, "max_bytes"), b1),
                hs_cli_bytes(npts ? hs_json_int(json_array_get(pts, npts - 1), "bytes") : 0, b2),
                hs_json_str(s, "name"));
        }
        hs_table_print(&t);
        hs_table_free(&t);
    }
    hs_cli_sampling(json_object_get(j, "sampling"));
    hs_api_reply_clear(&r);
    return 0;
}
