/* heapstore runs: the stored runs, newest first. Direct mode asks the typed
 * core (hs_core_runs); HTTP mode decodes the server's JSON into the same
 * result; one renderer prints both. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli_decode.h"
#include "cli_query.h"
#include "hs_cli.h"
#include "hs_queries.h"

static const char usage[] =
    "runs [--label k=v]… [--program P] [--host H] [--limit N] [--before ID] [--all] [--json]\n"
    "    [--db PATH]\n"
    "  Newest first, N at a time (default 100): --before ID lists the runs after run ID,\n"
    "  the page the last line names.\n"
    "  A process tree (a program and the processes it started, heapstore run's\n"
    "  children) is one row, its first run's, with how many more it holds and the\n"
    "  largest of them; --all lists every run. --json always lists every run.";

static int cmp_id(const void *a, const void *b)
{
    int64_t x = ((const int64_t *)a)[0], y = ((const int64_t *)b)[0];
    return (x > y) - (x < y);
}

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

/* Process trees, folded. t has 3 n entries: t[i] is the index of run i's
 * tree's first run within the listing (a run whose parent is not listed is
 * a root of its own); for a root k, t[n + k] counts the tree's other runs
 * and t[2 n + k] is the index of its largest peak among them. Returns 0 or
 * -1 (out of memory). O(n log n). */
static int tree_fold(const hs_runs_result *r, size_t *t)
{
    size_t n = r->nruns, *more = t + n, *big = t + 2 * n;
    int64_t(*byid)[2] = malloc((n ? n : 1) * sizeof *byid);
    if (!byid) return -1;
    for (size_t i = 0; i < n; i++) byid[i][0] = r->runs[i].brief.id, byid[i][1] = (int64_t)i;
    qsort(byid, n, sizeof *byid, cmp_id);
    for (size_t i = 0; i < n; i++) {
        size_t at = i;
        /* up the parents while listed; a listing is a set, so at most n steps */
        for (size_t steps = 0; steps < n && r->runs[at].parent_id; steps++) {
            int64_t key[2] = {r->runs[at].parent_id, 0};
            int64_t(*p)[2] = bsearch(key, byid, n, sizeof *byid, cmp_id);
            if (!p) break;
            at = (size_t)(*p)[1];
        }
        t[i] = at;
        more[i] = 0;
        big[i] = i;
    }
    for (size_t i = 0; i < n; i++) {
        size_t k = t[i];
        if (k == i) continue;
        if (!more[k]++ || r->runs[i].peak_bytes > r->runs[big[k]].peak_bytes) big[k] = i;
    }
    free(byid);
    return 0;
}

/* " +N, largest PROGRAM PEAK" of the tree rooted at k ("" alone). */
static void tree_note(const hs_runs_result *r, const size_t *t, size_t k, char *out, size_t len)
{
    size_t n = r->nruns, more = t[n + k], big = t[2 * n + k];
    out[0] = '\0';
    if (!more) return;
    char b[32];
    const char *p = r->runs[big].brief.program, *base = strrchr(p, '/');
    snprintf(out, len, " +%zu, largest %s %s", more, base ? base + 1 : p,
             hs_cli_bytes(r->runs[big].peak_bytes, b));
}

/* --before ID: this command's own option (taken out before the shared
 * parser sees argv); NULL when absent. */
static const char *before_opt;

static void print_runs(const hs_runs_result *r, int all)
{
    if (!r->nruns) {
        printf("no runs stored yet (profile a program with: heapstore run -- PROGRAM ARGS…)\n");
        return;
    }
    static const char *const hdr[] = {"ID",       "STARTED",  "PROGRAM", "HOST",
                                      "DURATION", "PEAK",     "AT END",  "EVENTS",
                                      "DROPPED",  "SAMPLING", "STATE",   "LABELS"};
    static const int right[] = {1, 0, 0, 0, 1, 1, 1, 1, 1, 1, 0, 0};
    size_t *root = all ? NULL : malloc(3 * r->nruns * sizeof *root);
    if (root && tree_fold(r, root)) {
        free(root);
        root = NULL; /* out of memory: every run, unfolded */
    }
    hs_table t;
    hs_table_init(&t, 12, hdr, right);
    size_t folded = 0;
    for (size_t i = 0; i < r->nruns; i++) {
        if (root && root[i] != i) {
            folded++;
            continue;
        }
        const hs_run_info *run = &r->runs[i];
        run_cells c;
        run_cells_fill(&c, run);
        char prog[1024], note[160] = "";
        const char *base = strrchr(run->brief.program, '/');
        if (root) tree_note(r, root, i, note, sizeof note);
        snprintf(prog, sizeof prog, "%s%s", base ? base + 1 : run->brief.program, note);
        hs_table_row(&t, c.id, c.started, prog, run->host, c.dur, c.peak, c.end, c.events,
                     c.dropped, c.sampling, c.state, c.labels);
    }
    hs_table_print(&t);
    hs_table_free(&t);
    if (folded)
        printf("%zu more run%s folded into their process tree's first (+N); --all lists every "
               "run\n",
               folded, folded == 1 ? "" : "s");
    if (r->next) printf("older runs: heapstore runs --before %" PRId64 "\n", r->next);
    free(root);
}

/* The command's options as the core's parameters; 0 or HS_EINVAL. */
static int runs_params(const hs_cli_args *a, hs_runs_params *p, hs_qerr *err)
{
    hs_runs_params_init(p);
    int rc = 0;
    if (a->limit) rc = hs_runs_param(p, "limit", a->limit, err);
    if (!rc && a->program) rc = hs_runs_param(p, "program", a->program, err);
    if (!rc && a->host) rc = hs_runs_param(p, "host", a->host, err);
    if (!rc && before_opt) rc = hs_runs_param(p, "before", before_opt, err);
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
        print_runs(&r, a->all);
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
    if (before_opt) {
        strcat(target, "&before=");
        hs_cli_pct(target, sizeof target, before_opt);
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
    print_runs(&r, a->all);
    hs_runs_result_clear(&r);
    return 0;
}

int hs_cmd_runs(int argc, char **argv)
{
    hs_cli_args a;
    int n = 1;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--before")) {
            argv[n++] = argv[i];
        } else if (i + 1 < argc) {
            before_opt = argv[++i];
        } else {
            fprintf(stderr, "heapstore runs: --before needs a run id\nusage: heapstore %s\n",
                    usage);
            return 2;
        }
    }
    argc = n;
    int rc = hs_cli_parse(&a, argc, argv, "label,program,host,limit,all", usage);
    if (rc) return rc < 0 ? 0 : rc;
    if (a.npos) {
        fprintf(stderr, "heapstore runs: unexpected argument '%s'\nusage: heapstore %s\n", a.pos[0],
                usage);
        return 2;
    }
    return hs_cli_direct(&a) ? runs_direct(&a) : runs_http(&a);
}
