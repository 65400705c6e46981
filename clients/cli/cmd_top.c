/* heapstore top: what is live at a moment, by site, function or stack. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "cli_query.h"
#include "hs_cli.h"

static const char usage[] =
    "top RUN [--at T] [--by site|function|stack] [--limit N] [--site user|alloc|leaf]\n"
    "    [--wrappers LIST] [--json] [--db PATH]\n"
    "  T: seconds from the start, 'peak' (default), 'end' (a Python program: when its main\n"
    "     code finished, before teardown) or 'exit' (the process's last moment)\n" HS_CLI_SITE_HELP;

static void stack_line(hs_table *t, const char *arrow, const json_t *frame)
{
    char fr[620], nm[600];
    hs_cli_site(nm, sizeof nm, frame, "function");
    snprintf(fr, sizeof fr, "  %s %s", arrow, nm);
    hs_table_row(t, "", "", "", "", fr);
}

int hs_cmd_top(int argc, char **argv)
{
    hs_cli_args a;
    int rc = hs_cli_parse(&a, argc, argv, "at,by,limit,site,wrappers", usage);
    if (rc) return rc < 0 ? 0 : rc;
    char def_limit[24];
    snprintf(def_limit, sizeof def_limit, "%d", HS_CLI_TOP_LIMIT);
    char target[4096];
    if ((rc = hs_cli_run_target(&a, usage, target, sizeof target))) return rc;
    strcat(target, "/top?at=");
    hs_cli_pct(target, sizeof target, a.at ? a.at : "peak");
    strcat(target, "&by=");
    hs_cli_pct(target, sizeof target, a.by ? a.by : "site");
    strcat(target, "&limit=");
    hs_cli_pct(target, sizeof target, a.limit ? a.limit : def_limit);
    hs_cli_site_params(&a, target, sizeof target);
    hs_api_reply r;
    if ((rc = hs_cli_call(&a, "GET", target, NULL, 0, 0, &r))) return rc;
    if (a.json) {
        hs_cli_print_json(r.json);
        hs_api_reply_clear(&r);
        return 0;
    }
    const json_t *j = r.json, *run = json_object_get(j, "run");
    const char *by = hs_json_str(j, "by");
    char b1[32], b2[32], b3[32];
    printf("run %" PRId64 " (%s) at %s (%s): %s live in %" PRId64 " blocks, by %s\n",
           hs_json_int(run, "id"), hs_json_str(run, "program"), hs_json_str(j, "at"),
           hs_cli_secs(hs_json_int(j, "at_ns"), b1),
           hs_cli_bytes(hs_json_int(j, "total_bytes"), b2), hs_json_int(j, "total_count"), by);
    json_t *rows = json_object_get(j, "rows");
    size_t i;
    json_t *row;
    if (!strcmp(by, "function")) {
        static const char *const hdr[] = {"SELF", "SELF%", "TOTAL", "TOTAL%", "FUNCTION"};
        static const int right[] = {1, 1, 1, 1, 0};
        hs_table t;
        hs_table_init(&t, 5, hdr, right);
        int64_t tot = hs_json_int(j, "total_bytes");
        json_array_foreach(rows, i, row)
        {
            char sp[16], tp[16];
            snprintf(sp, sizeof sp, "%.1f%%",
                     tot ? 100.0 * (double)hs_json_int(row, "self_bytes") / (double)tot : 0);
            snprintf(tp, sizeof tp, "%.1f%%",
                     tot ? 100.0 * (double)hs_json_int(row, "total_bytes") / (double)tot : 0);
            hs_table_row(&t, hs_cli_bytes(hs_json_int(row, "self_bytes"), b1), sp,
                         hs_cli_bytes(hs_json_int(row, "total_bytes"), b2), tp,
                         hs_json_str(row, "name"));
        }
        hs_table_print(&t);
        hs_table_free(&t);
    } else {
        static const char *const hdr[] = {"BYTES", "SHARE", "BLOCKS", "TRACE", "SITE"};
        static const int right[] = {1, 1, 1, 1, 0};
        hs_table t;
        hs_table_init(&t, 5, hdr, right);
        int stacks = !strcmp(by, "stack");
        json_array_foreach(rows, i, row)
        {
            char share[16], blocks[24], trace[24], name[600];
            snprintf(share, sizeof share, "%.1f%%",
                     100.0 * json_real_value(json_object_get(row, "share")));
            snprintf(blocks, sizeof blocks, "%" PRId64, hs_json_int(row, "total_count"));
            snprintf(trace, sizeof trace, "%" PRId64, hs_json_int(row, "trace"));
            hs_cli_site(name, sizeof name, row, "name");
            hs_table_row(&t, hs_cli_bytes(hs_json_int(row, "total_bytes"), b3), share, blocks,
                         trace, name);
            if (stacks) {
                /* the full stack around the row's site: what the site
                 * called down to the allocator (→), then its callers (←) */
                const json_t *st = json_object_get(row, "stack");
                int64_t site = hs_json_int(row, "site_index"), d = (int64_t)json_array_size(st);
                for (int64_t k = site - 1; k >= 0; k--)
                    stack_line(&t, "→", json_array_get(st, (size_t)k));
                for (int64_t k = site + 1; k < d; k++)
                    stack_line(&t, "←", json_array_get(st, (size_t)k));
            }
        }
        hs_table_print(&t);
        hs_table_free(&t);
    }
    if ((int64_t)json_array_size(rows) < hs_json_int(j, "rows_total"))
        printf("(%zu of %" PRId64 " rows; --limit N for more)\n", json_array_size(rows),
               hs_json_int(j, "rows_total"));
    hs_cli_sampling(json_object_get(j, "sampling"));
    hs_api_reply_clear(&r);
    return 0;
}
