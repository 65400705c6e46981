/* heapstore top: what is live at a moment, by site, function or stack.
 * Direct mode asks the typed core (hs_core_top); HTTP mode decodes the
 * server's JSON into the same result; one renderer prints both. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "cli_decode.h"
#include "cli_query.h"
#include "hs_cli.h"
#include "hs_queries.h"

static const char usage[] =
    "top RUN [--at T] [--by site|function|stack] [--limit N] [--site user|alloc|leaf]\n"
    "    [--wrappers LIST] [--json] [--db PATH]\n"
    "  T: seconds from the start, 'peak' (default), 'end' (a Python program: when its main\n"
    "     code finished, before teardown) or 'exit' (the process's last moment)\n" HS_CLI_SITE_HELP;

/* The options as the API's parameters, in the order the API checks them
 * (p's run already parsed). */
static int top_params(const hs_cli_args *a, hs_top_params *p, hs_qerr *err)
{
    const char *const opts[][2] = {{"site", a->site},
                                   {"wrappers", a->wrappers},
                                   {"by", a->by},
                                   {"limit", a->limit},
                                   {"at", a->at}};
    int rc = 0;
    for (size_t i = 0; !rc && i < sizeof opts / sizeof opts[0]; i++)
        if (opts[i][1]) rc = hs_top_param(p, opts[i][0], opts[i][1], err);
    return rc;
}

static void stack_line(hs_table *t, const char *arrow, const hs_qframe *f)
{
    char fr[620], nm[600];
    hs_frame_label(nm, sizeof nm, f->name, f->file, f->line);
    snprintf(fr, sizeof fr, "  %s %s", arrow, nm);
    hs_table_row(t, "", "", "", "", fr);
}

static void print_by_function(const hs_top_result *r)
{
    static const char *const hdr[] = {"SELF", "SELF%", "TOTAL", "TOTAL%", "FUNCTION"};
    static const int right[] = {1, 1, 1, 1, 0};
    hs_table t;
    hs_table_init(&t, 5, hdr, right);
    double tot = (double)r->total_bytes;
    for (size_t i = 0; i < r->nrows; i++) {
        const hs_top_row *w = &r->rows[i];
        char sp[16], tp[16], b1[32], b2[32];
        snprintf(sp, sizeof sp, "%.1f%%", tot ? 100.0 * (double)w->self_bytes / tot : 0);
        snprintf(tp, sizeof tp, "%.1f%%", tot ? 100.0 * (double)w->total_bytes / tot : 0);
        hs_table_row(&t, hs_cli_bytes(w->self_bytes, b1), sp, hs_cli_bytes(w->total_bytes, b2), tp,
                     w->frame.name);
    }
    hs_table_print(&t);
    hs_table_free(&t);
}

static void print_by_site(const hs_top_result *r)
{
    static const char *const hdr[] = {"BYTES", "SHARE", "BLOCKS", "TRACE", "SITE"};
    static const int right[] = {1, 1, 1, 1, 0};
    hs_table t;
    hs_table_init(&t, 5, hdr, right);
    for (size_t i = 0; i < r->nrows; i++) {
        const hs_top_row *w = &r->rows[i];
        char share[16], blocks[24], trace[24], name[600], b[32];
        snprintf(share, sizeof share, "%.1f%%", 100.0 * w->share);
        snprintf(blocks, sizeof blocks, "%" PRId64, w->total_count);
        snprintf(trace, sizeof trace, "%" PRId64, w->trace);
        hs_frame_label(name, sizeof name, w->frame.name, w->frame.file, w->frame.line);
        hs_table_row(&t, hs_cli_bytes(w->total_bytes, b), share, blocks, trace, name);
        if (r->by != HS_GROUP_STACK) continue;
        /* the full stack around the row's site: what the site called down
         * to the allocator (→), then its callers (←) */
        const hs_qstack *st = &w->stack;
        for (int k = st->site - 1; k >= 0; k--)
            if (k < st->n) stack_line(&t, "→", &st->frames[k]);
        for (int k = st->site + 1; k < st->n; k++) stack_line(&t, "←", &st->frames[k]);
    }
    hs_table_print(&t);
    hs_table_free(&t);
}

static void print_top(const hs_top_result *r)
{
    char b1[32], b2[32];
    printf("run %" PRId64 " (%s) at %s (%s): %s live in %" PRId64 " blocks, by %s\n", r->run.id,
           r->run.program, r->at, hs_cli_secs(r->at_ns, b1), hs_cli_bytes(r->total_bytes, b2),
           r->total_count, hs_group_name(r->by));
    if (r->by == HS_GROUP_FUNCTION)
        print_by_function(r);
    else
        print_by_site(r);
    if ((int64_t)r->nrows < r->rows_total)
        printf("(%zu of %" PRId64 " rows; --limit N for more)\n", r->nrows, r->rows_total);
    hs_cli_sampling(&r->run.record.sampling);
}

/* Direct: the core's answer on the database file. The result's strings
 * live in q's caches, so it is printed before q is closed. */
static int top_direct(const hs_cli_args *a)
{
    hs_q *q;
    hs_top_params p;
    hs_top_result r;
    hs_qerr err = {0};
    int rc = hs_cli_open(a, &q);
    if (rc) return rc;
    hs_top_params_init(&p);
    p.limit = HS_CLI_TOP_LIMIT;
    if (!(rc = hs_sel_parse_run(&p.run, a->pos[0], &err)) && (rc = top_params(a, &p, &err)))
        rc = hs_run_check(q, &p.run, &err, rc);
    if (!rc && !(rc = hs_core_top(q, &p, &r, &err))) {
        if (a->json)
            rc = hs_cli_print_own_json(a, hs_api_top_json(&r));
        else
            print_top(&r);
        hs_top_result_clear(&r);
        hs_q_free(q);
        return rc;
    }
    hs_q_free(q);
    return hs_cli_fail(a, &err);
}

/* HTTP: the server's JSON, printed as it is or decoded and rendered. */
static int top_http(const hs_cli_args *a, char *target, size_t len)
{
    strncat(target, "/top?at=", len - strlen(target) - 1);
    hs_cli_pct(target, len, a->at ? a->at : HS_TOP_AT);
    strncat(target, "&by=", len - strlen(target) - 1);
    hs_cli_pct(target, len, a->by ? a->by : hs_group_name(HS_GROUP_SITE));
    strncat(target, "&limit=", len - strlen(target) - 1);
    char lim[24];
    snprintf(lim, sizeof lim, "%d", HS_CLI_TOP_LIMIT);
    hs_cli_pct(target, len, a->limit ? a->limit : lim);
    hs_cli_site_params(a, target, len);
    json_t *j;
    hs_top_result r;
    int rc = hs_cli_get_json(a, target, &j);
    if (rc || !j) return rc;
    if (hs_cli_top_decode(&r, j)) return hs_cli_oom(a); /* takes j over */
    print_top(&r);
    hs_top_result_clear(&r);
    return 0;
}

int hs_cmd_top(int argc, char **argv)
{
    hs_cli_args a;
    int rc = hs_cli_parse(&a, argc, argv, "at,by,limit,site,wrappers", usage);
    if (rc) return rc < 0 ? 0 : rc;
    char target[4096];
    if ((rc = hs_cli_run_target(&a, usage, target, sizeof target))) return rc;
    return hs_cli_direct(&a) ? top_direct(&a) : top_http(&a, target, sizeof target);
}
