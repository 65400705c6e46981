/* heapstore flame: flame graph data, as collapsed stacks (default) or the
 * JSON tree; with two RUN@T, the differential form. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "cli_query.h"
#include "hs_cli.h"

static const char usage[] =
    "flame RUN [--at T] [--min-share F] [--json] [--db PATH]\n"
    "       flame RUN@T RUN@T [--json]   (differential: 'stack A_BYTES B_BYTES' lines)\n"
    "  collapsed lines 'outer;…;leaf BYTES' feed flamegraph.pl, inferno and speedscope";

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
        hs_cli_pct(target, sizeof target, a.at ? a.at : "peak");
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
