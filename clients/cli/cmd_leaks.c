/* heapstore leaks: what was live at the end, and what grew steadily. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "cli_query.h"
#include "hs_cli.h"

static const char usage[] = "leaks RUN [--limit N] [--site user|alloc|leaf] [--wrappers LIST] "
                            "[--json] [--db PATH]\n" HS_CLI_SITE_HELP;

static void site(char *buf, size_t len, const json_t *row)
{
    hs_cli_site(buf, len, row, "name");
    /* the site's caller helps tell sites apart */
    const json_t *stack = json_object_get(row, "stack");
    size_t caller = (size_t)hs_json_int(row, "site_index") + 1;
    if (json_array_size(stack) > caller) {
        size_t n = strlen(buf);
        snprintf(buf + n, len - n, " ← %s", hs_json_str(json_array_get(stack, caller), "function"));
    }
}

int hs_cmd_leaks(int argc, char **argv)
{
    hs_cli_args a;
    int rc = hs_cli_parse(&a, argc, argv, "limit,site,wrappers", usage);
    if (rc) return rc < 0 ? 0 : rc;
    char def_limit[24];
    snprintf(def_limit, sizeof def_limit, "%d", HS_CLI_LEAKS_LIMIT);
    char target[4096];
    if ((rc = hs_cli_run_target(&a, usage, target, sizeof target))) return rc;
    strcat(target, "/leaks?limit=");
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
    char b1[32], b2[32];
    printf("run %" PRId64 " (%s): %s live at the end (%s), %s\n", hs_json_int(run, "id"),
           hs_json_str(run, "program"), hs_cli_bytes(hs_json_int(j, "total_bytes"), b1),
           hs_cli_secs(hs_json_int(j, "at_ns"), b2),
           !strcmp(hs_json_str(run, "state"), "open")         ? "still running"
           : json_is_true(json_object_get(run, "clean_exit")) ? "ended through exit()"
                                                              : "did not end through exit()");
    size_t i;
    json_t *row;
    json_t *growing = json_object_get(j, "growing");
    printf("\ngrowing steadily through the run (likely leaks), most likely first:\n");
    if (!json_array_size(growing)) {
        printf("  none\n");
    } else {
        static const char *const hdr[] = {"AT END", "GROWTH", "FIT R²", "TRACE", "SITE"};
        static const int right[] = {1, 1, 1, 1, 0};
        hs_table t;
        hs_table_init(&t, 5, hdr, right);
        json_array_foreach(growing, i, row)
        {
            char rate[48], r2[16], tr[24], name[700];
            snprintf(rate, sizeof rate, "%s/s",
                     hs_cli_bytes(
                         (int64_t)json_real_value(json_object_get(row, "slope_bytes_per_s")), b2));
            snprintf(r2, sizeof r2, "%.2f", json_real_value(json_object_get(row, "r2")));
            snprintf(tr, sizeof tr, "%" PRId64, hs_json_int(row, "trace"));
            site(name, sizeof name, row);
            hs_table_row(&t, hs_cli_bytes(hs_json_int(row, "end_bytes"), b1), rate, r2, tr, name);
        }
        hs_table_print(&t);
        hs_table_free(&t);
    }
    printf("\nlive at the end:\n");
    static const char *const hdr[] = {"BYTES", "SHARE", "BLOCKS", "TRACE", "SITE"};
    static const int right[] = {1, 1, 1, 1, 0};
    hs_table t;
    hs_table_init(&t, 5, hdr, right);
    json_array_foreach(json_object_get(j, "live_at_end"), i, row)
    {
        char share[16], blocks[24], tr[24], name[700];
        snprintf(share, sizeof share, "%.1f%%",
                 100.0 * json_real_value(json_object_get(row, "share")));
        snprintf(blocks, sizeof blocks, "%" PRId64, hs_json_int(row, "count"));
        snprintf(tr, sizeof tr, "%" PRId64, hs_json_int(row, "trace"));
        site(name, sizeof name, row);
        hs_table_row(&t, hs_cli_bytes(hs_json_int(row, "bytes"), b1), share, blocks, tr, name);
    }
    hs_table_print(&t);
    hs_table_free(&t);
    hs_cli_sampling(json_object_get(j, "sampling"));
    hs_api_reply_clear(&r);
    return 0;
}
