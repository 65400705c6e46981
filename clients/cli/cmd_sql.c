/* heapstore sql: read-only SQL over the tables, time- and row-limited.
 * Direct mode hands the request to the store (hs_api_sql), HTTP mode to
 * the server's POST /api/sql; the answer is the store's rows either way. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_query.h"
#include "hs_cli.h"
#include "hs_queries.h"

static const char usage[] =
    "sql \"SELECT …\" [--limit ROWS] [--timeout-ms MS] [--json] [--db PATH]\n"
    "  tables: runs run_labels mappings frames traces run_pcs run_stacks events snapshots\n"
    "          heap_series process_samples size_hist; event_rows(RUN) expands a run's events";

/* The request's JSON body, or NULL with *status the exit status. */
static char *sql_body(const hs_cli_args *a, int *status)
{
    json_t *req = json_pack("{s:s}", "sql", a->pos[0]);
    const struct {
        const char *name, *value, *key, *what;
    } opts[] = {{"--limit", a->limit, "limit", "a number of rows"},
                {"--timeout-ms", a->timeout_ms, "timeout_ms", "milliseconds"}};
    for (size_t i = 0; i < sizeof opts / sizeof opts[0]; i++) {
        if (!opts[i].value) continue;
        char *end;
        long long v = strtoll(opts[i].value, &end, 10);
        if (*end || !*opts[i].value) {
            fprintf(stderr, "heapstore sql: %s takes %s\n", opts[i].name, opts[i].what);
            json_decref(req);
            *status = 2;
            return NULL;
        }
        json_object_set_new(req, opts[i].key, json_integer(v));
    }
    char *body = json_dumps(req, JSON_COMPACT);
    json_decref(req);
    if (!body) *status = 1;
    return body;
}

/* Too wide for a table: one "column = value" a line, a blank line a row. */
static void print_lines(const json_t *cols, const json_t *rows)
{
    size_t i, ncol = json_array_size(cols);
    json_t *row;
    json_array_foreach(rows, i, row)
    {
        for (size_t c = 0; c < ncol; c++) {
            char *v = json_dumps(json_array_get(row, c), JSON_ENCODE_ANY);
            printf("%s = %s\n", json_string_value(json_array_get(cols, c)), v);
            free(v);
        }
        printf("\n");
    }
}

/* At most 12 columns as a table, numbers right-aligned. */
static void print_table(const json_t *cols, const json_t *rows)
{
    int ncol = (int)json_array_size(cols);
    if (!ncol) return;
    const char *hdr[12];
    int right[12] = {0};
    for (int c = 0; c < ncol; c++) hdr[c] = json_string_value(json_array_get(cols, (size_t)c));
    hs_table t;
    hs_table_init(&t, ncol, hdr, right);
    char *cells[12];
    size_t i;
    json_t *row;
    json_array_foreach(rows, i, row)
    {
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
        hs_table_rowv(&t, (const char *const *)cells);
        for (int c = 0; c < ncol; c++) free(cells[c]);
    }
    for (int c = 0; c < ncol; c++) t.right[c] = right[c];
    hs_table_print(&t);
    hs_table_free(&t);
}

/* Direct: the store's answer on the database file, without the API's
 * route, into out->json as hs_cli_call would put it. 0, or the exit code
 * after saying why. */
static int sql_direct(const hs_cli_args *a, const char *body, hs_api_reply *out)
{
    hs_q *q;
    hs_qerr err = {0};
    memset(out, 0, sizeof *out);
    int rc = hs_cli_open(a, &q);
    if (rc) return rc;
    rc = hs_api_sql(q, body, strlen(body), &out->json, &err);
    hs_q_free(q);
    return rc ? hs_cli_fail(a, &err) : 0;
}

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
    char *body = sql_body(&a, &rc);
    if (!body) return rc;
    hs_api_reply r;
    rc = hs_cli_direct(&a) ? sql_direct(&a, body, &r)
                           : hs_cli_call(&a, "POST", "/api/sql", body, strlen(body), 0, &r);
    free(body);
    if (rc) return rc;
    if (a.json) {
        hs_cli_print_json(r.json);
        hs_api_reply_clear(&r);
        return 0;
    }
    const json_t *cols = json_object_get(r.json, "columns"),
                 *rows = json_object_get(r.json, "rows");
    if (json_array_size(cols) > 12)
        print_lines(cols, rows);
    else
        print_table(cols, rows);
    printf("(%" PRId64 " row%s%s)\n", hs_json_int(r.json, "row_count"),
           hs_json_int(r.json, "row_count") == 1 ? "" : "s",
           json_is_true(json_object_get(r.json, "truncated")) ? "; more were cut off, --limit N"
                                                              : "");
    hs_api_reply_clear(&r);
    return 0;
}
