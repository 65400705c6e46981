/* heapstore runs: the stored runs, newest first. Direct mode asks the typed
 * core (hs_core_runs); HTTP mode decodes the server's JSON into the same
 * result; one renderer prints both. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "cli_decode.h"
#include "cli_query.h"
#include "hs_cli.h"
#include "hs_queries.h"

static const char usage[] =
    "runs [--label k=v]… [--program P] [--host H] [--limit N] [--json] [--db PATH]";

/* The table's cells of one run, in hdr's order. */
typedef struct run_cells {
    char id[24], started[32], dur[32], peak[32], end[32], events[32], dropped[32], sampling[48],
        state[32], labels[512];
} run_cells;

static void run_cells_fill(run_cells *c, const hs_run_info *r)
{
    snprintf(c->id, sizeof c->id, "%" PRId64, r->brief.id);
    time_t st = (time_t)(r->start_unix_ms / 1000);
    struct tm tm;
    localtime_r(&st, &tm);
    strftime(c->started, sizeof c->started, "%Y-%m-%d %H:%M:%S", &tm);
    hs_cli_secs(r->duration_ns, c->dur);
    hs_cli_bytes(r->peak_bytes, c->peak);
    hs_cli_bytes(r->end_bytes, c->end);
    snprintf(c->events, sizeof c->events, "%" PRId64, r->events);
    snprintf(c->dropped, sizeof c->dropped, "%" PRId64, r->dropped_events);
    char per[32];
    if (r->brief.sample_bytes == 1)
        snprintf(c->sampling, sizeof c->sampling, "every alloc");
    else
        snprintf(c->sampling, sizeof c->sampling, "1 per %s",
                 hs_cli_bytes(r->brief.sample_bytes, per));
    int no_exit = !strcmp(r->state, "ended") && r->has_clean_exit && !r->brief.clean_exit;
    snprintf(c->state, sizeof c->state, "%s%s", r->state, no_exit ? " (no exit)" : "");
    c->labels[0] = '\0';
    for (size_t i = 0; i < r->nlabels; i++) {
        size_t n = strlen(c->labels);
        snprintf(c->labels + n, sizeof c->labels - n, "%s%s=%s", n ? "," : "", r->labels[i].key,
                 r->labels[i].value);
    }
}

static void print_runs(const hs_runs_result *r)
{
    if (!r->nruns) {
        printf("no runs stored yet (profile a program with: heapstore run -- PROGRAM ARGS…)\n");
        return;
    }
    static const char *const hdr[] = {"ID",       "STARTED",  "PROGRAM", "HOST",
                                      "DURATION", "PEAK",     "AT END",  "EVENTS",
                                      "DROPPED",  "SAMPLING", "STATE",   "LABELS"};
    static const int right[] = {1, 0, 0, 0, 1, 1, 1, 1, 1, 1, 0, 0};
    hs_table t;
    hs_table_init(&t, 12, hdr, right);
    for (size_t i = 0; i < r->nruns; i++) {
        const hs_run_info *run = &r->runs[i];
        run_cells c;
        run_cells_fill(&c, run);
        const char *base = strrchr(run->brief.program, '/');
        hs_table_row(&t, c.id, c.started, base ? base + 1 : run->brief.program, run->host, c.dur,
                     c.peak, c.end, c.events, c.dropped, c.sampling, c.state, c.labels);
    }
    hs_table_print(&t);
    hs_table_free(&t);
}

/* The command's options as the core's parameters; 0 or HS_EINVAL. */
static int runs_params(const hs_cli_args *a, hs_runs_params *p, hs_qerr *err)
{
    hs_runs_params_init(p);
    int rc = 0;
    if (a->limit) rc = hs_runs_param(p, "limit", a->limit, err);
    if (!rc && a->program) rc = hs_runs_param(p, "program", a->program, err);
    if (!rc && a->host) rc = hs_runs_param(p, "host", a->host, err);
    for (int i = 0; !rc && i < a->nlabels; i++) rc = hs_runs_param(p, "label", a->labels[i], err);
    return rc;
}

static int runs_direct(const hs_cli_args *a)
{
    hs_q *q;
    hs_runs_params p;
    hs_runs_result r;
    hs_qerr err;
    int rc = hs_cli_open(a, &q);
    if (rc) return rc;
    if ((rc = runs_params(a, &p, &err)) || (rc = hs_core_runs(q, &p, &r, &err))) {
        hs_q_free(q);
        return hs_cli_fail(a, &err);
    }
    if (a->json)
        rc = hs_cli_print_own_json(a, hs_api_runs_json(&r));
    else
        print_runs(&r);
    hs_runs_result_clear(&r);
    hs_q_free(q);
    return rc;
}

static int runs_http(const hs_cli_args *a)
{
    char def_limit[24];
    snprintf(def_limit, sizeof def_limit, "%d", HS_RUNS_LIMIT);
    char target[4096] = "/api/runs?limit=";
    hs_cli_pct(target, sizeof target, a->limit ? a->limit : def_limit);
    if (a->program) {
        strcat(target, "&program=");
        hs_cli_pct(target, sizeof target, a->program);
    }
    if (a->host) {
        strcat(target, "&host=");
        hs_cli_pct(target, sizeof target, a->host);
    }
    for (int i = 0; i < a->nlabels; i++) {
        strncat(target, "&label=", sizeof target - strlen(target) - 1);
        hs_cli_pct(target, sizeof target, a->labels[i]);
    }
    json_t *j;
    hs_runs_result r;
    int rc = hs_cli_get_json(a, target, &j);
    if (rc || !j) return rc;
    if (hs_cli_runs_decode(&r, j)) return hs_cli_oom(a); /* takes j over */
    print_runs(&r);
    hs_runs_result_clear(&r);
    return 0;
}

int hs_cmd_runs(int argc, char **argv)
{
    hs_cli_args a;
    int rc = hs_cli_parse(&a, argc, argv, "label,program,host,limit", usage);
    if (rc) return rc < 0 ? 0 : rc;
    if (a.npos) {
        fprintf(stderr, "heapstore runs: unexpected argument '%s'\nusage: heapstore %s\n", a.pos[0],
                usage);
        return 2;
    }
    return hs_cli_direct(&a) ? runs_direct(&a) : runs_http(&a);
}
