/* heapstore flame: flame graph data, as collapsed stacks (default) or the
 * JSON tree; with two RUN@T, the differential form. Direct mode asks the
 * typed core (hs_core_flame, hs_core_export's collapsed stacks). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_query.h"
#include "hs_cli.h"
#include "hs_queries.h"

static const char usage[] =
    "flame RUN [--at T] [--min-share F] [--json] [--db PATH]\n"
    "       flame RUN@T RUN@T [--json]   (differential: 'stack A_BYTES B_BYTES' lines)\n"
    "  collapsed lines 'outer;…;leaf BYTES' feed flamegraph.pl, inferno and speedscope";

/* Direct mode's answer, printed once the database is closed (as an API
 * reply was, so that the JSON is freed after the connection): JSON (show,
 * a member of it or all of it) or a file's bytes. */
typedef struct flame_answer {
    json_t *json;
    const json_t *show;
    char *body;
    size_t len;
} flame_answer;

/* Direct, one run, --json: the core's tree; the options in the order the
 * API checks them. */
static int flame_json_direct(const hs_cli_args *a, hs_q *q, flame_answer *out, hs_qerr *err)
{
    hs_flame_params p;
    hs_flame_result r;
    hs_flame_params_init(&p);
    int rc = hs_sel_parse_run(&p.run, a->pos[0], err);
    if (rc) return rc;
    rc = hs_flame_param(&p, "at", a->at ? a->at : HS_FLAME_AT, err);
    if (!rc && a->min_share) rc = hs_flame_param(&p, "min_share", a->min_share, err);
    if (rc) return hs_run_check(q, &p.run, err, rc);
    if ((rc = hs_core_flame(q, &p, &r, err))) return rc;
    out->show = out->json = hs_api_flame_json(&r);
    hs_flame_result_clear(&r);
    return out->json ? 0 : hs_cli_oom(a);
}

/* Direct, one run: the collapsed stacks (the core's export). */
static int flame_collapsed_direct(const hs_cli_args *a, hs_q *q, flame_answer *out, hs_qerr *err)
{
    hs_export_params p;
    hs_export_result r;
    hs_export_params_init(&p);
    int rc = hs_sel_parse_run(&p.run, a->pos[0], err);
    if (rc) return rc;
    rc = hs_export_param(&p, "format", "collapsed", err);
    if (!rc && a->min_share) rc = hs_export_param(&p, "min_share", a->min_share, err);
    if (!rc) rc = hs_export_param(&p, "at", a->at ? a->at : HS_FLAME_AT, err);
    if (rc) return hs_run_check(q, &p.run, err, rc);
    if ((rc = hs_core_export(q, &p, &r, err))) return rc;
    out->body = r.body; /* taken over */
    out->len = r.len;
    return 0;
}

/* Direct, two RUN@T: the core's diff, its differential flame (--json) or
 * its "stack A_BYTES B_BYTES" lines. */
static int flame_diff_direct(const hs_cli_args *a, int json, hs_q *q, flame_answer *out,
                             hs_qerr *err)
{
    hs_diff_params p;
    hs_diff_result r;
    hs_diff_params_init(&p);
    int rc = hs_diff_param(&p, json ? "limit" : "format", json ? "1" : "collapsed", err);
    if (!rc) rc = hs_diff_param(&p, "a", a->pos[0], err);
    if (!rc && (rc = hs_diff_param(&p, "b", a->pos[1], err))) rc = hs_diff_b_check(q, &p, err, rc);
    if (rc || (rc = hs_core_diff(q, &p, &r, err))) return rc;
    if (json) {
        out->json = hs_api_diff_json(&r);
        out->show = json_object_get(out->json, "flame");
        rc = out->json ? 0 : hs_cli_oom(a);
    } else {
        out->body = r.collapsed; /* taken over */
        out->len = r.collapsed_len;
        r.collapsed = NULL;
    }
    hs_diff_result_clear(&r);
    return rc;
}

static int flame_direct(const hs_cli_args *a, int json)
{
    hs_q *q;
    hs_qerr err = {0};
    flame_answer ans = {0};
    int rc = hs_cli_open(a, &q);
    if (rc) return rc;
    rc = a->npos == 2 ? flame_diff_direct(a, json, q, &ans, &err)
         : json       ? flame_json_direct(a, q, &ans, &err)
                      : flame_collapsed_direct(a, q, &ans, &err);
    hs_q_free(q);
    if (!rc && ans.show) hs_cli_print_json(ans.show);
    if (!rc && ans.body) fwrite(ans.body, 1, ans.len, stdout);
    json_decref(ans.json);
    free(ans.body);
    if (rc > 0) return rc; /* printed already */
    return rc ? hs_cli_fail(a, &err) : 0;
}

int hs_cmd_flame(int argc, char **argv)
{
    hs_cli_args a;
    int rc = hs_cli_parse(&a, argc, argv, "at,min-share,format", usage);
    if (rc) return rc < 0 ? 0 : rc;
    if (a.npos != 1 && a.npos != 2) {
        fprintf(stderr, "heapstore flame: give RUN, or two RUN@T for a diff\nusage: heapstore %s\n",
                usage);
        return 2;
    }
    int json = a.json || (a.format && !strcmp(a.format, "json"));
    if (a.format && strcmp(a.format, "json") && strcmp(a.format, "collapsed")) {
        fprintf(stderr, "heapstore flame: --format is collapsed or json\n");
        return 2;
    }
    if (hs_cli_direct(&a)) return flame_direct(&a, json);
    char target[8192];
    if (a.npos == 2) {
        strcpy(target, "/api/diff?a=");
        hs_cli_pct(target, sizeof target, a.pos[0]);
        strcat(target, "&b=");
        hs_cli_pct(target, sizeof target, a.pos[1]);
        strcat(target, json ? "&limit=1" : "&format=collapsed");
    } else {
        strcpy(target, "/api/runs/");
        hs_cli_pct(target, sizeof target, a.pos[0]);
        strcat(target, "/flame?at=");
        hs_cli_pct(target, sizeof target, a.at ? a.at : HS_FLAME_AT);
        if (a.min_share) {
            strcat(target, "&min_share=");
            hs_cli_pct(target, sizeof target, a.min_share);
        }
        if (!json) strcat(target, "&format=collapsed");
    }
    hs_api_reply r;
    if ((rc = hs_cli_call(&a, "GET", target, NULL, 0, !json, &r))) return rc;
    if (json)
        hs_cli_print_json(a.npos == 2 ? json_object_get(r.json, "flame") : r.json);
    else
        fwrite(r.body, 1, r.len, stdout);
    hs_api_reply_clear(&r);
    return 0;
}
