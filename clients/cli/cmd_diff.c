/* heapstore diff: what grew and shrank between two moments or two runs. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "cli_query.h"
#include "hs_cli.h"

static const char usage[] =
    "diff RUN[@T] RUN[@T] [--by stack|site|function] [--limit N] [--format collapsed]\n"
    "    [--site user|alloc|leaf] [--wrappers LIST] [--json] [--db PATH]\n"
    "  T: seconds from the start, 'peak', 'end' (default; a Python program: when its main\n"
    "     code finished, before teardown) or 'exit' (the process's last moment)\n" HS_CLI_SITE_HELP
    "  e.g. heapstore diff 7@1.5 7@end, or heapstore diff program=app,version=1 "
    "program=app,version=2";

int hs_cmd_diff(int argc, char **argv)
{
    hs_cli_args a;
    int rc = hs_cli_parse(&a, argc, argv, "by,limit,format,site,wrappers", usage);
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
    char target[8192] = "/api/diff?a=";
    hs_cli_pct(target, sizeof target, a.pos[0]);
    strcat(target, "&b=");
    hs_cli_pct(target, sizeof target, a.pos[1]);
    strcat(target, "&by=");
    hs_cli_pct(target, sizeof target, a.by ? a.by : "stack");
    strcat(target, "&limit=");
    hs_cli_pct(target, sizeof target, a.limit ? a.limit : def_limit);
    if (collapsed) strcat(target, "&format=collapsed");
    hs_cli_site_params(&a, target, sizeof target);
    hs_api_reply r;
    if ((rc = hs_cli_call(&a, "GET", target, NULL, 0, collapsed, &r))) return rc;
    if (collapsed) {
        fwrite(r.body, 1, r.len, stdout);
        hs_api_reply_clear(&r);
        return 0;
    }
    if (a.json || a.format) {
        hs_cli_print_json(r.json);
        hs_api_reply_clear(&r);
        return 0;
    }
    const json_t *j = r.json;
    char b1[32], b2[32], b3[32];
    for (int s = 0; s < 2; s++) {
        const json_t *side = json_object_get(j, s ? "b" : "a");
        const json_t *run = json_object_get(side, "run");
        printf("%s: run %" PRId64 " (%s) at %s (%s): %s live\n", s ? "b" : "a",
               hs_json_int(run, "id"), hs_json_str(run, "program"), hs_json_str(side, "at"),
               hs_cli_secs(hs_json_int(side, "at_ns"), b1),
               hs_cli_bytes(hs_json_int(side, "total_bytes"), b2));
    }
    static const char *const hdr[] = {"DELTA", "A", "B", "", "STACK"};
    static const int right[] = {1, 1, 1, 0, 0};
    hs_table t;
    hs_table_init(&t, 5, hdr, right);
    size_t i;
    json_t *row;
    const char *by = hs_json_str(j, "by");
    if (strcmp(by, "stack")) t.hdr[4] = !strcmp(by, "site") ? "SITE" : "FUNCTION";
    json_array_foreach(json_object_get(j, "rows"), i, row)
    {
        int64_t d = hs_json_int(row, "delta_bytes");
        char name[1024];
        snprintf(name, sizeof name, "%s", hs_json_str(row, "name"));
        const json_t *stack = json_object_get(row, "stack");
        for (size_t k = 1; k < json_array_size(stack) && k < 4; k++) {
            size_t n = strlen(name);
            snprintf(name + n, sizeof name - n, " ← %s",
                     hs_json_str(json_array_get(stack, k), "function"));
        }
        if (json_array_size(stack) > 4) strncat(name, " ← …", sizeof name - strlen(name) - 1);
        char dd[40];
        snprintf(dd, sizeof dd, "%s%s", d > 0 ? "+" : "", hs_cli_bytes(d, b1));
        hs_table_row(&t, dd, hs_cli_bytes(hs_json_int(row, "a_bytes"), b2),
                     hs_cli_bytes(hs_json_int(row, "b_bytes"), b3),
                     d > 0   ? "grew"
                     : d < 0 ? "shrank"
                             : "",
                     name);
    }
    hs_table_print(&t);
    hs_table_free(&t);
    if (!json_array_size(json_object_get(j, "rows"))) printf("no difference\n");
    const json_t *sa = json_object_get(json_object_get(j, "sampling"), "a");
    const json_t *sb = json_object_get(json_object_get(j, "sampling"), "b");
    printf("a: ");
    hs_cli_sampling(sa);
    printf("b: ");
    hs_cli_sampling(sb);
    hs_api_reply_clear(&r);
    return 0;
}
