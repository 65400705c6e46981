/* test_writer_plans: every statement the writer runs per run or per frame
 * (hs_store's prepared statements: server/store.c, store_frames.c,
 * store_rollup.c) reads the tables that grow with runs and events through
 * an index, never a scan: the query plan of each, on a real database of the
 * current schema, must not SCAN such a table (a full index scan is a scan
 * too). Issue 12 item 6: UPDATE runs … WHERE parent_uuid = ? scanned runs on
 * every HELLO (3.45 ms each at 68k runs).
 *
 * Two statements run neither per run nor per frame and are allowed their
 * scan of runs: the list of open runs, read once when the server starts,
 * and retention, run at most once a minute in small transactions. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "hs_error.h"
#include "hs_testkit.h"
#include "store_int.h"

/* The tables that grow with runs, frames and events. */
static const char *const growing[] = {
    "runs",      "run_labels",  "mappings",        "frames",          "traces",
    "run_maps",  "events",      "snapshot_blocks", "snapshot_series", "heap_series",
    "size_hist", "trace_stats", "process_samples", "symbol_blocks",
};

/* Statements allowed a scan, and why. */
static const struct {
    int st;
    const char *why;
} allowed[] = {
    {ST_OPEN_RUNS, "once, when the server starts"},
    {ST_RETAIN, "retention: at most once a minute, 2000 rows a transaction"},
};

/* The table a plan line scans ("SCAN runs", "SCAN r USING COVERING INDEX
 * …" for an alias: the alias is resolved against the statement's text by
 * the caller), or NULL when it scans nothing. */
static const char *scanned(const char *detail, char *buf, size_t len)
{
    if (strncmp(detail, "SCAN ", 5) || strstr(detail, "CONSTANT ROW")) return NULL;
    const char *p = detail + 5;
    size_t n = strcspn(p, " ");
    snprintf(buf, len, "%.*s", (int)n, p);
    return buf;
}

/* Whether name (a table or an alias in sql) is a growing table. */
static int grows(const char *sql, const char *name)
{
    for (size_t i = 0; i < HS_COUNTOF(growing); i++) {
        if (!strcmp(name, growing[i])) return 1;
        /* "FROM runs r", "JOIN events e" */
        char alias[160];
        snprintf(alias, sizeof alias, "%s %s ", growing[i], name);
        if (strstr(sql, alias)) return 1;
    }
    return 0;
}

static void test_writer_statements_use_indexes(void **state)
{
    (void)state;
    char dir[600], db[700], err[512];
    tk_tmpdir(dir, sizeof dir, "writer-plans");
    snprintf(db, sizeof db, "%s/hs.db", dir);
    hs_store *s;
    assert_int_equal(hs_store_open(&s, db, NULL, err, sizeof err), 0);
    int failures = 0;
    for (int i = 0; i < ST_COUNT; i++) {
        const char *sql = sqlite3_sql(s->st[i]);
        assert_non_null(sql);
        int exempt = 0;
        for (size_t k = 0; k < HS_COUNTOF(allowed); k++) exempt |= allowed[k].st == i;
        char eqp[4096], plan[4096] = "", name[64];
        snprintf(eqp, sizeof eqp, "EXPLAIN QUERY PLAN %s", sql);
        sqlite3_stmt *st;
        assert_int_equal(sqlite3_prepare_v2(s->db, eqp, -1, &st, NULL), SQLITE_OK);
        int scans = 0;
        while (sqlite3_step(st) == SQLITE_ROW) {
            const char *d = (const char *)sqlite3_column_text(st, 3);
            strncat(plan, d, sizeof plan - strlen(plan) - 3);
            strcat(plan, "; ");
            const char *t = scanned(d, name, sizeof name);
            if (t && grows(sql, t)) scans = 1;
        }
        sqlite3_finalize(st);
        if (scans && !exempt) {
            fprintf(stderr, "statement %d scans a table that grows:\n  %s\n  plan: %s\n", i, sql,
                    plan);
            failures++;
        }
    }
    assert_int_equal(failures, 0);
    /* the one that motivated this test uses the index made for it */
    sqlite3_stmt *st;
    char eqp[1024];
    snprintf(eqp, sizeof eqp, "EXPLAIN QUERY PLAN %s", sqlite3_sql(s->st[ST_RUN_CHILDREN]));
    assert_int_equal(sqlite3_prepare_v2(s->db, eqp, -1, &st, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    assert_non_null(strstr((const char *)sqlite3_column_text(st, 3), "runs_parent_uuid"));
    sqlite3_finalize(st);
    hs_store_free(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_writer_statements_use_indexes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
