/* heapstore leaks: what was live at the end, and what grew steadily.
 * Direct mode asks the typed core (hs_core_leaks); HTTP mode decodes the
 * server's JSON into the same result; one renderer prints both. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "cli_decode.h"
#include "cli_query.h"
#include "hs_cli.h"
#include "hs_queries.h"

static const char usage[] = "leaks RUN [--limit N] [--site user|alloc|leaf] [--wrappers LIST] "
                            "[--json] [--db PATH]\n" HS_CLI_SITE_HELP;

static void site(char *buf, size_t len, const hs_leak_row *row)
{
    hs_frame_label(buf, len, row->site.name, row->site.file, row->site.line);
    /* the site's caller helps tell sites apart */
    int caller = row->stack.site + 1;
    if (row->stack.n > caller) {
        size_t n = strlen(buf);
        snprintf(buf + n, len - n, " ← %s", row->stack.frames[caller].name);
    }
}

static void print_growing(const hs_leaks_result *r)
{
    printf("\ngrowing steadily through the run (likely leaks), most likely first:\n");
    if (!r->ngrowing) {
        printf("  none\n");
        return;
    }
    static const char *const hdr[] = {"AT END", "GROWTH", "FIT R²", "TRACE", "SITE"};
    static const int right[] = {1, 1, 1, 1, 0};
    hs_table t;
    hs_table_init(&t, 5, hdr, right);
    for (size_t i = 0; i < r->ngrowing; i++) {
        const hs_leak_row *row = &r->growing[i];
        char rate[48], r2[16], tr[24], name[700], b1[32], b2[32];
        snprintf(rate, sizeof rate, "%s/s", hs_cli_bytes((int64_t)row->slope, b2));
        snprintf(r2, sizeof r2, "%.2f", row->r2);
        snprintf(tr, sizeof tr, "%" PRId64, row->trace);
        site(name, sizeof name, row);
        hs_table_row(&t, hs_cli_bytes(row->end_bytes, b1), rate, r2, tr, name);
    }
    hs_table_print(&t);
    hs_table_free(&t);
}

static void print_leaks(const hs_leaks_result *r)
{
    char b1[32], b2[32];
    printf("run %" PRId64 " (%s): %s live at the end (%s), %s\n", r->run.id, r->run.program,
           hs_cli_bytes(r->total_bytes, b1), hs_cli_secs(r->at_ns, b2),
           r->run.open         ? "still running"
           : r->run.clean_exit ? "ended through exit()"
                               : "did not end through exit()");
    print_growing(r);
    printf("\nlive at the end:\n");
    static const char *const hdr[] = {"BYTES", "SHARE", "BLOCKS", "TRACE", "SITE"};
    static const int right[] = {1, 1, 1, 1, 0};
    hs_table t;
    hs_table_init(&t, 5, hdr, right);
    for (size_t i = 0; i < r->nlive; i++) {
        const hs_leak_row *row = &r->live[i];
        char share[16], blocks[24], tr[24], name[700];
        snprintf(share, sizeof share, "%.1f%%", 100.0 * row->share);
        snprintf(blocks, sizeof blocks, "%" PRId64, row->count);
        snprintf(tr, sizeof tr, "%" PRId64, row->trace);
        site(name, sizeof name, row);
        hs_table_row(&t, hs_cli_bytes(row->bytes, b1), share, blocks, tr, name);
    }
    hs_table_print(&t);
    hs_table_free(&t);
    hs_cli_sampling(&r->run.record.sampling);
}

/* Direct: the core's answer; its strings live in q's caches, so it is
 * printed before q is closed. */
static int leaks_direct(const hs_cli_args *a)
{
    const char *const opts[][2] = {
        {"site", a->site}, {"wrappers", a->wrappers}, {"limit", a->limit}};
    hs_q *q;
    hs_leaks_params p;
    hs_leaks_result r;
    hs_qerr err;
    int rc = hs_cli_open(a, &q);
    if (rc) return rc;
    hs_leaks_params_init(&p);
    p.limit = HS_CLI_LEAKS_LIMIT;
    if (!(rc = hs_sel_parse_run(&p.run, a->pos[0], &err))) {
        for (size_t i = 0; !rc && i < sizeof opts / sizeof opts[0]; i++)
            if (opts[i][1]) rc = hs_leaks_param(&p, opts[i][0], opts[i][1], &err);
        if (rc) rc = hs_run_check(q, &p.run, &err, rc);
    }
    if (!rc && !(rc = hs_core_leaks(q, &p, &r, &err))) {
        if (a->json)
            rc = hs_cli_print_own_json(a, hs_api_leaks_json(&r));
        else
            print_leaks(&r);
        hs_leaks_result_clear(&r);
        hs_q_free(q);
        return rc;
    }
    hs_q_free(q);
    return hs_cli_fail(a, &err);
}

static int leaks_http(const hs_cli_args *a, char *target, size_t len)
{
    char def_limit[24];
    snprintf(def_limit, sizeof def_limit, "%d", HS_CLI_LEAKS_LIMIT);
    strncat(target, "/leaks?limit=", len - strlen(target) - 1);
    hs_cli_pct(target, len, a->limit ? a->limit : def_limit);
    hs_cli_site_params(a, target, len);
    json_t *j;
    hs_leaks_result r;
    int rc = hs_cli_get_json(a, target, &j);
    if (rc || !j) return rc;
    if (hs_cli_leaks_decode(&r, j)) return hs_cli_oom(a); /* takes j over */
    print_leaks(&r);
    hs_leaks_result_clear(&r);
    return 0;
}

int hs_cmd_leaks(int argc, char **argv)
{
    hs_cli_args a;
    int rc = hs_cli_parse(&a, argc, argv, "limit,site,wrappers", usage);
    if (rc) return rc < 0 ? 0 : rc;
    char target[4096];
    if ((rc = hs_cli_run_target(&a, usage, target, sizeof target))) return rc;
    return hs_cli_direct(&a) ? leaks_direct(&a) : leaks_http(&a, target, sizeof target);
}
