/* heapstore sql: read-only SQL over the tables, time- and row-limited. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_query.h"
#include "hs_cli.h"

static const char usage[] =
    "sql \"SELECT …\" [--limit ROWS] [--timeout-ms MS] [--json] [--db PATH]\n"
    "  tables: runs run_labels mappings frames traces run_pcs run_stacks events snapshots\n"
    "          heap_series process_samples size_hist; event_rows(RUN) expands a run's events";

int hs_cmd_sql(int argc, char **argv)
{
    hs_cli_args a;
    int rc = hs_cli_parse(&a, argc, argv, "limit,timeout-ms", usage);
    if (rc) return rc < 0 ? 0 : rc;
    if (a.npos != 1) {
        fprintf(stderr, "heapstore sql: give one SQL statement (quoted)\nusage: heapstore %s\n",
                usage);
        return 2;
    }
    json_t *req = json_pack("{s:s}", "sql", a.pos[0]);
    char *end;
    if (a.limit) {
        long long v = strtoll(a.limit, &end, 10);
        if (*end || !*a.limit) {
            fprintf(stderr, "heapstore sql: --limit takes a number of rows\n");
            json_decref(req);
            return 2;
        }
        json_object_set_new(req, "limit", json_integer(v));
    }
    if (a.timeout_ms) {
        long long v = strtoll(a.timeout_ms, &end, 10);
        if (*end || !*a.timeout_ms) {
            fprintf(stderr, "heapstore sql: --timeout-ms takes milliseconds\n");
            json_decref(req);
            return 2;
        }
        json_object_set_new(req, "timeout_ms", json_integer(v));
    }
    char *body = json_dumps(req, JSON_COMPACT);
    json_decref(req);
    hs_api_reply r;
    rc = hs_cli_call(&a, "POST", "/api/sql", body, strlen(body), 0, &r);
    free(body);
    if (rc) return rc;
    if (a.json) {
        hs_cli_print_json(r.json);
        hs_api_reply_clear(&r);
        return 0;
    }
    json_t *cols = json_object_get(r.json, "columns"), *rows = json_object_get(r.json, "rows");
    int ncol = (int)json_array_size(cols);
    size_t i;
    json_t *row;
    if (ncol > 12) { /* too wide for a table: one value per line */
        json_array_foreach(rows, i, row)
        {
            for (int c = 0; c < ncol; c++) {
                char *v = json_dumps(json_array_get(row, (size_t)c), JSON_ENCODE_ANY);
                printf("%s = %s\n", json_string_value(json_array_get(cols, (size_t)c)), v);
                free(v);
            }
            printf("\n");
        }
    } else {
        const char *hdr[12];
        int right[12];
        for (int c = 0; c < ncol; c++) {
            hdr[c] = json_string_value(json_array_get(cols, (size_t)c));
            right[c] = 0;
        }
        hs_table t;
        hs_table_init(&t, ncol, hdr, right);
        char *cells[12];
        json_array_foreach(rows, i, row)
        {
            if (!ncol) break;
            for (int c = 0; c < ncol; c++) {
                json_t *v = json_array_get(row, (size_t)c);
                if (json_is_string(v))
                    cells[c] = strdup(json_string_value(v));
                else if (json_is_null(v))
                    cells[c] = strdup("NULL");
                else
                    cells[c] = json_dumps(v, JSON_ENCODE_ANY);
                if (json_is_number(v)) right[c] = 1;
            }
            /* hs_table_row takes exactly ncol strings: pass through a fixed arity */
            hs_table_row(
                &t, cells[0], ncol > 1 ? cells[1] : "", ncol > 2 ? cells[2] : "",
                ncol > 3 ? cells[3] : "", ncol > 4 ? cells[4] : "", ncol > 5 ? cells[5] : "",
                ncol > 6 ? cells[6] : "", ncol > 7 ? cells[7] : "", ncol > 8 ? cells[8] : "",
                ncol > 9 ? cells[9] : "", ncol > 10 ? cells[10] : "", ncol > 11 ? cells[11] : "");
            for (int c = 0; c < ncol; c++) free(cells[c]);
        }
        for (int c = 0; c < ncol; c++) t.right[c] = right[c];
        if (ncol) hs_table_print(&t);
        hs_table_free(&t);
    }
    printf("(%" PRId64 " row%s%s)\n", hs_json_int(r.json, "row_count"),
           hs_json_int(r.json, "row_count") == 1 ? "" : "s",
           json_is_true(json_object_get(r.json, "truncated")) ? "; more were cut off, --limit N"
                                                              : "");
    hs_api_reply_clear(&r);
    return 0;
}
