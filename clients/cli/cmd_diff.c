/* heapstore diff: what grew and shrank between two moments or two runs,
 * or between two groups of runs. Direct mode asks the typed core
 * (hs_core_diff); HTTP mode decodes the server's JSON into the same result;
 * one renderer prints both, groups of runs (hs_core_gdiff) included. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_decode.h"
#include "cli_query.h"
#include "hs_cli.h"
#include "hs_queries.h"

static const char usage[] =
    "diff RUN[@T] RUN[@T] [--by stack|site|function] [--at T] [--limit N]\n"
    "    [--format collapsed] [--site user|alloc|leaf] [--wrappers LIST] [--json] [--db PATH]\n"
    "  T: seconds from the start, 'peak', 'end' (default; a Python program: when its main\n"
    "     code finished, before teardown) or 'exit' (the process's last moment); --at T is\n"
    "     the T of a side given without one\n"
    "  RUN: a run id, uuid prefix, 'latest' or key=value[,key=value…][,latest]; without\n"
    "     ',latest' key=value (and id=A..B) names every matching run, and when a side names\n"
    "     several the groups are compared: each row's mean, spread and error on each side,\n"
    "     and 'grew' or 'shrank' only past 3 standard errors (else 'noise')\n" HS_CLI_SITE_HELP
    "  e.g. heapstore diff 7@1.5 7@end, or heapstore diff 'version=1.3' 'version=1.4' "
    "--by function --at peak";

/* Side i as given, or with "@T" of --at when it has no '@'. */
static const char *side_at(const hs_cli_args *a, int i, char *buf, size_t len)
{
    if (!a->at || strchr(a->pos[i], '@')) return a->pos[i];
    snprintf(buf, len, "%s@%s", a->pos[i], a->at);
    return buf;
}

/* The options as the API's parameters, in the order it checks them. 0, or
 * the error in err (a mistake in b named after a's own trouble). */
static int diff_params(const hs_cli_args *a, hs_q *q, int collapsed, const char *limit,
                       hs_diff_params *p, hs_qerr *err)
{
    static char sides[2][2200]; /* RUN@T: the sides with --at applied (lent to p) */
    const char *const opts[][2] = {{"site", a->site},
                                   {"wrappers", a->wrappers},
                                   {"by", a->by}, /* else the core's default */
                                   {"limit", limit},
                                   {"format", collapsed ? "collapsed" : NULL},
                                   {"a", side_at(a, 0, sides[0], sizeof sides[0])},
                                   {"b", side_at(a, 1, sides[1], sizeof sides[1])}};
    int rc = 0;
    size_t i;
    hs_diff_params_init(p);
    for (i = 0; !rc && i < sizeof opts / sizeof opts[0]; i++)
        if (opts[i][1]) rc = hs_diff_param(p, opts[i][0], opts[i][1], err);
    return rc && i == sizeof opts / sizeof opts[0] ? hs_diff_b_check(q, p, err, rc) : rc;
}

static void print_diff(const hs_diff_result *r)
{
    char b1[32], b2[32], b3[32];
    for (int s = 0; s < 2; s++) {
        const hs_diff_side *side = s ? &r->b : &r->a;
        printf("%s: run %" PRId64 " (%s) at %s (%s): %s live\n", s ? "b" : "a", side->run.id,
               side->run.program, side->at, hs_cli_secs(side->at_ns, b1),
               hs_cli_bytes(side->total_bytes, b2));
    }
    static const char *const hdr[] = {"DELTA", "A", "B", "", "STACK"};
    static const int right[] = {1, 1, 1, 0, 0};
    hs_table t;
    hs_table_init(&t, 5, hdr, right);
    if (r->by != HS_GROUP_STACK) t.hdr[4] = r->by == HS_GROUP_SITE ? "SITE" : "FUNCTION";
    for (size_t i = 0; i < r->nrows; i++) {
        const hs_diff_row *w = &r->rows[i];
        int64_t d = w->b_bytes - w->a_bytes;
        char name[1024];
        snprintf(name, sizeof name, "%s", w->name);
        for (int k = 1; k < w->stack.n && k < 4; k++) {
            size_t n = strlen(name);
            snprintf(name + n, sizeof name - n, " ← %s", w->stack.frames[k].name);
        }
        if (w->stack.n > 4) strncat(name, " ← …", sizeof name - strlen(name) - 1);
        char dd[40];
        snprintf(dd, sizeof dd, "%s%s", d > 0 ? "+" : "", hs_cli_bytes(d, b1));
        hs_table_row(&t, dd, hs_cli_bytes(w->a_bytes, b2), hs_cli_bytes(w->b_bytes, b3),
                     d > 0   ? "grew"
                     : d < 0 ? "shrank"
                             : "",
                     name);
    }
    hs_table_print(&t);
    hs_table_free(&t);
    if (!r->nrows) printf("no difference\n");
    printf("a: ");
    hs_cli_sampling(&r->a.run.record.sampling);
    printf("b: ");
    hs_cli_sampling(&r->b.run.record.sampling);
}

/* "12.0 MiB ± 0.4 MiB": a side's mean and its spread across runs. */
static const char *mean_sd(const hs_gstat *g, char *buf, size_t len)
{
    char b1[32], b2[32];
    snprintf(buf, len, "%s ± %s", hs_cli_bytes((int64_t)g->mean, b1),
             hs_cli_bytes((int64_t)g->sd, b2));
    return buf;
}

static void print_gside(const char *name, const hs_gdiff_side *s)
{
    char b1[64], b2[32];
    printf("%s: %s at %s: %zu run(s)%s, %s live (mean ± sd), error of the mean %s\n", name,
           s->selector, s->at, s->nruns, s->more ? " (the newest; more matched)" : "",
           mean_sd(&s->total, b1, sizeof b1), hs_cli_bytes((int64_t)s->total.se, b2));
}

/* The group diff's table (the core's result, or the server's decoded). */
static void print_gdiff(const hs_gdiff_result *r)
{
    char b1[64], b2[64], b3[32], b4[32], b5[32], sh[16];
    print_gside("a", &r->a);
    print_gside("b", &r->b);
    printf("total: %s%s ± %s (3 standard errors): %s\n", r->delta > 0 ? "+" : "",
           hs_cli_bytes((int64_t)r->delta, b3), hs_cli_bytes((int64_t)(3 * r->se), b4),
           hs_gdiff_verdict_name(r->verdict));
    static const char *const hdr[] = {"DELTA", "±3SE", "A MEAN ± SD", "B MEAN ± SD", "SHARE",
                                      "SELF",  "",     "STACK"};
    static const int right[] = {1, 1, 1, 1, 1, 1, 0, 0};
    hs_table t;
    int fn = r->by == HS_GROUP_FUNCTION;
    hs_table_init(&t, 8, hdr, right);
    if (r->by != HS_GROUP_STACK) t.hdr[7] = r->by == HS_GROUP_SITE ? "SITE" : "FUNCTION";
    for (size_t i = 0; i < r->nrows; i++) {
        const hs_gdiff_row *w = &r->rows[i];
        char ds[40], name[600];
        snprintf(ds, sizeof ds, "%s%s", w->delta > 0 ? "+" : "",
                 hs_cli_bytes((int64_t)w->delta, b3));
        snprintf(sh, sizeof sh, "%.0f%%", 100 * w->share);
        hs_frame_label(name, sizeof name, w->name, w->file, w->line);
        char self[40] = "";
        if (fn)
            snprintf(self, sizeof self, "%s%s", w->self.delta > 0 ? "+" : "",
                     hs_cli_bytes((int64_t)w->self.delta, b5));
        hs_table_row(&t, ds, hs_cli_bytes((int64_t)(3 * w->se), b4), mean_sd(&w->a, b1, sizeof b1),
                     mean_sd(&w->b, b2, sizeof b2), sh, self, hs_gdiff_verdict_name(w->verdict),
                     name);
    }
    hs_table_print(&t);
    hs_table_free(&t);
    printf("a row grew or shrank only past 3 standard errors of its change (spread across "
           "runs and sampling error); else noise%s\n",
           fn ? "; SELF: the change of what the function allocated itself" : "");
}

/* Direct, two groups: the core's answer, rendered (its strings live in
 * q's caches, so before q is closed) or, with --json, as the API's JSON.
 * Closes q. */
static int gdiff_direct(const hs_cli_args *a, hs_q *q, const hs_diff_params *p)
{
    hs_gdiff_result r;
    hs_qerr err = {0};
    if (hs_core_gdiff(q, p, &r, &err)) {
        hs_q_free(q);
        return hs_cli_fail(a, &err);
    }
    json_t *j = NULL;
    int json = a->json || a->format;
    if (json)
        j = hs_api_gdiff_json(&r);
    else
        print_gdiff(&r);
    hs_gdiff_result_clear(&r);
    hs_q_free(q);
    return json ? hs_cli_print_own_json(a, j) : 0;
}

/* Direct: the core's answer on the database file. A table is printed
 * before q is closed (its strings live in q's caches); JSON and lines
 * after, as an API reply was, so that they are freed after the connection. */
static int diff_direct(const hs_cli_args *a, int collapsed, const char *limit)
{
    hs_q *q;
    hs_diff_params p;
    hs_diff_result r;
    hs_qerr err = {0};
    json_t *j = NULL;
    char *lines = NULL;
    size_t len = 0;
    int rc = hs_cli_open(a, &q);
    if (rc) return rc;
    int group = 0;
    if (!(rc = diff_params(a, q, collapsed, limit, &p, &err)) &&
        !(rc = hs_diff_is_group(q, &p, &group, &err)) && group)
        return gdiff_direct(a, q, &p);
    if (rc || (rc = hs_core_diff(q, &p, &r, &err))) {
        hs_q_free(q);
        return hs_cli_fail(a, &err);
    }
    if (collapsed) {
        lines = r.collapsed; /* taken over */
        len = r.collapsed_len;
        r.collapsed = NULL;
    } else if (a->json || a->format) {
        j = hs_api_diff_json(&r);
    } else {
        print_diff(&r);
    }
    int json = !collapsed && (a->json || a->format);
    hs_diff_result_clear(&r);
    hs_q_free(q);
    if (lines) fwrite(lines, 1, len, stdout);
    free(lines);
    return json ? hs_cli_print_own_json(a, j) : 0;
}

/* HTTP: the server's answer, printed as it is or decoded and rendered. */
static int diff_http(const hs_cli_args *a, int collapsed, const char *limit)
{
    char target[8192] = "/api/diff?a=";
    char sides[2][2200];
    hs_cli_pct(target, sizeof target, side_at(a, 0, sides[0], sizeof sides[0]));
    strcat(target, "&b=");
    hs_cli_pct(target, sizeof target, side_at(a, 1, sides[1], sizeof sides[1]));
    if (a->by) { /* else the server's default */
        strcat(target, "&by=");
        hs_cli_pct(target, sizeof target, a->by);
    }
    strcat(target, "&limit=");
    hs_cli_pct(target, sizeof target, limit);
    if (collapsed) strcat(target, "&format=collapsed");
    hs_cli_site_params(a, target, sizeof target);
    hs_api_reply r;
    int rc = hs_cli_call(a, "GET", target, NULL, 0, collapsed, &r);
    if (rc) return rc;
    if (collapsed) {
        fwrite(r.body, 1, r.len, stdout);
    } else if (a->json || a->format) {
        hs_cli_print_json(r.json);
    } else if (json_is_true(json_object_get(r.json, "group"))) {
        hs_gdiff_result g;
        json_t *j = r.json;
        r.json = NULL;
        if (hs_cli_gdiff_decode(&g, j)) rc = hs_cli_oom(a); /* takes j over */
        if (!rc) print_gdiff(&g);
        if (!rc) hs_gdiff_result_clear(&g);
    } else {
        hs_diff_result d;
        json_t *j = r.json;
        r.json = NULL;
        if (hs_cli_diff_decode(&d, j)) rc = hs_cli_oom(a); /* takes j over */
        if (!rc) print_diff(&d);
        if (!rc) hs_diff_result_clear(&d);
    }
    hs_api_reply_clear(&r);
    return rc;
}

int hs_cmd_diff(int argc, char **argv)
{
    hs_cli_args a;
    int rc = hs_cli_parse(&a, argc, argv, "by,at,limit,format,site,wrappers", usage);
    if (rc) return rc < 0 ? 0 : rc;
    char def_limit[24];
    snprintf(def_limit, sizeof def_limit, "%d", HS_CLI_DIFF_LIMIT);
    if (a.npos != 2) {
        fprintf(stderr, "heapstore diff: give two RUN@T\nusage: heapstore %s\n", usage);
        return 2;
    }
    int collapsed = a.format && !strcmp(a.format, "collapsed");
    if (a.format && !collapsed && strcmp(a.format, "json")) {
        fprintf(stderr, "heapstore diff: --format is collapsed or json\n");
        return 2;
    }
    const char *limit = a.limit ? a.limit : def_limit;
    return hs_cli_direct(&a) ? diff_direct(&a, collapsed, limit) : diff_http(&a, collapsed, limit);
}
