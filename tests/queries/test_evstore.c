/* test_evstore: events rows in the storage codec (common/hs_evcodec.h), end
 * to end on real database files written by the server's hs_store:
 *  - a database from before the codec (schema 5, EVENTS payloads) answers
 *    event_rows and the pprof export's alloc_* exactly as the new one does,
 *    read-only as it is, and again after migration 6 has rewritten its rows;
 *  - a corrupt or unknown-version row gives an error naming the run and the
 *    row, from event_rows and from the export, not a crash and not a
 *    silently smaller answer;
 *  - the server replaying a corrupt row of an open run refuses the run with
 *    a message, leaving the file as it was. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <sqlite3.h>

#include "fixture.h"
#include "hs_testkit.h"
#include "hs_error.h"
#include "hs_evcodec.h"
#include "hs_queries.h"
#include "hs_schema.h"
#include "hs_store.h"

static void rm_db(const char *path)
{
    char p[600];
    unlink(path);
    snprintf(p, sizeof p, "%s-wal", path);
    unlink(p);
    snprintf(p, sizeof p, "%s-shm", path);
    unlink(p);
    snprintf(p, sizeof p, "%s-lock", path);
    unlink(p);
}

static int64_t sql_int(const char *path, const char *sql)
{
    sqlite3 *db;
    sqlite3_stmt *st;
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    assert_int_equal(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    int64_t v = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    sqlite3_close(db);
    return v;
}

static void sql_exec(const char *path, const char *sql)
{
    sqlite3 *db;
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    assert_int_equal(sqlite3_exec(db, sql, NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(db);
}

/* The answer to method target (body) as text: status, then the JSON or the
 * file's bytes. */
static char *ask(const char *path, const char *method, const char *target, const char *body,
                 int *status)
{
    hs_q *q;
    hs_qerr err;
    assert_int_equal(hs_q_open(&q, path, &err), 0);
    hs_api_reply r;
    hs_api_handle(q, method, target, body, body ? strlen(body) : 0, &r);
    *status = r.status;
    char *out;
    if (r.json) {
        out = json_dumps(r.json, JSON_SORT_KEYS);
    } else {
        out = malloc(r.len * 2 + 1);
        for (size_t i = 0; i < r.len; i++) sprintf(out + 2 * i, "%02x", (unsigned char)r.body[i]);
        out[r.len * 2] = 0;
    }
    hs_api_reply_clear(&r);
    hs_q_free(q);
    assert_non_null(out);
    return out;
}

static const struct {
    const char *method, *target, *body;
} questions[] = {
    {"POST", "/api/sql",
     "{\"sql\": \"SELECT seq, t_ns, trace, stack_id, is_free, size, bytes FROM event_rows(1)\", "
     "\"limit\": 100000}"},
    {"POST", "/api/sql",
     "{\"sql\": \"SELECT count(*), sum(t_ns), sum(bytes), sum(size), sum(stack_id) FROM "
     "event_rows(2)\"}"},
    {"GET", "/api/runs/1/export?at=peak&format=pprof", NULL},
    {"GET", "/api/runs/2/export?at=end&format=pprof", NULL},
};

static char *answers[HS_COUNTOF(questions)];

static void check_answers(const char *path)
{
    for (size_t i = 0; i < HS_COUNTOF(questions); i++) {
        int status;
        char *a = ask(path, questions[i].method, questions[i].target, questions[i].body, &status);
        assert_int_equal(status, 200);
        assert_string_equal(a, answers[i]);
        free(a);
    }
}

static void test_old_rows_and_migration(void **state)
{
    (void)state;
    char path[512], old[512];
    fx_tmp_path(path, sizeof path, "evstore.db");
    fx_tmp_path(old, sizeof old, "evstore-v5.db");
    assert_int_equal(fx_build(path), 0);
    assert_int_equal(sql_int(path, "PRAGMA user_version"), hs_schema_version());
    assert_true(sql_int(path, "SELECT count(*) FROM events") >= 2);
    /* every row is a segment (codec version 2), none is left open */
    assert_int_equal(sql_int(path, "SELECT count(*) FROM events WHERE substr(data, 1, 1) != x'02'"),
                     0);
    assert_int_equal(sql_int(path, "SELECT count(*) FROM events_tail"), 0);
    for (size_t i = 0; i < HS_COUNTOF(questions); i++) {
        int status;
        answers[i] =
            ask(path, questions[i].method, questions[i].target, questions[i].body, &status);
        assert_int_equal(status, 200);
    }
    assert_non_null(strstr(answers[1], "[[82, ")); /* run 2: the fixture's 82 events */

    /* the same file as schema 5 held it */
    rm_db(old);
    char sql[1200];
    snprintf(sql, sizeof sql, "VACUUM INTO '%s'", old);
    sql_exec(path, sql);
    assert_int_equal(fx_events_to_wire(old), 0);
    sql_exec(old, TK_TREE_AS_ROWS_SQL TK_SNAPS_AS_ROWS_SQL TK_MAPS_AS_ROWS_SQL
             "PRAGMA user_version = 5");
    check_answers(old); /* read-only, as it is */
    assert_int_equal(sql_int(old, "PRAGMA user_version"), 5);

    /* migrated as a server or an import opening it does */
    sqlite3 *db;
    char msg[256];
    assert_int_equal(hs_schema_open(&db, old, 0, msg, sizeof msg), 0);
    sqlite3_close_v2(db);
    assert_int_equal(sql_int(old, "PRAGMA user_version"), hs_schema_version());
    assert_int_equal(sql_int(old, "SELECT count(*) FROM events WHERE substr(data, 1, 1) != x'02'"),
                     0);
    /* the same segments as the writer makes (their bytes differ: the writer
     * compresses as transactions commit; their events are compared below) */
    snprintf(sql, sizeof sql,
             "SELECT (SELECT count(*) FROM events) - (SELECT count(*) FROM other.events) + "
             "(SELECT count(*) FROM events a LEFT JOIN other.events b USING (run, seq) WHERE "
             "b.n_events IS NOT a.n_events OR a.t_first_ns != b.t_first_ns OR a.t_last_ns != "
             "b.t_last_ns)");
    assert_int_equal(sqlite3_open(old, &db), SQLITE_OK);
    char attach[700];
    snprintf(attach, sizeof attach, "ATTACH '%s' AS other", path);
    assert_int_equal(sqlite3_exec(db, attach, NULL, NULL, NULL), SQLITE_OK);
    sqlite3_stmt *st;
    assert_int_equal(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    assert_int_equal(sqlite3_column_int64(st, 0), 0);
    sqlite3_finalize(st);
    sqlite3_close(db);
    check_answers(old);

    /* a schema 5 row that is no EVENTS payload fails the migration, which
     * then changes nothing */
    rm_db(old);
    snprintf(sql, sizeof sql, "VACUUM INTO '%s'", old);
    sql_exec(path, sql);
    assert_int_equal(fx_events_to_wire(old), 0);
    sql_exec(old, "PRAGMA user_version = 5; UPDATE events SET data = x'80' WHERE rowid = "
                  "(SELECT max(rowid) FROM events)");
    assert_int_equal(hs_schema_open(&db, old, 0, msg, sizeof msg), HS_EDB);
    assert_non_null(strstr(msg, "is not a valid EVENTS payload"));
    assert_non_null(strstr(msg, "006_event_codec.sql"));
    assert_int_equal(sql_int(old, "PRAGMA user_version"), 5);
    assert_int_equal(sql_int(old, "SELECT count(*) FROM events WHERE substr(data, 1, 1) = x'01'"),
                     0);

    for (size_t i = 0; i < HS_COUNTOF(questions); i++) free(answers[i]);
    rm_db(old);
    rm_db(path);
}

/* A corrupt row: every reader says which, none crashes or answers less. */
static void test_corrupt_row(void **state)
{
    (void)state;
    char path[512];
    fx_tmp_path(path, sizeof path, "evstore-bad.db");
    assert_int_equal(fx_build(path), 0);
    static const struct {
        const char *data; /* the new value of run 1's first events row, as SQL */
        const char *why;
    } cases[] = {
        {"x'01ff'", "stored data is corrupt"},
        {"substr(data, 1, length(data) - 1)", "stored data is corrupt"},
        {"x'09' || substr(data, 2)", "unsupported protocol or schema version"},
    };
    int64_t seq = sql_int(path, "SELECT min(seq) FROM events WHERE run = 1");
    for (size_t i = 0; i < HS_COUNTOF(cases); i++) {
        char sql[512];
        snprintf(sql, sizeof sql,
                 "CREATE TABLE IF NOT EXISTS keep AS SELECT data FROM events WHERE run = 1 AND "
                 "seq = %lld; UPDATE events SET data = (SELECT %s FROM keep) WHERE run = 1 AND "
                 "seq = %lld",
                 (long long)seq, cases[i].data, (long long)seq);
        sql_exec(path, sql);
        int status;
        char *a = ask(path, "POST", "/api/sql", "{\"sql\": \"SELECT count(*) FROM event_rows(1)\"}",
                      &status);
        assert_int_not_equal(status, 200);
        char want[128];
        snprintf(want, sizeof want, "events row seq %lld of run 1: %s", (long long)seq,
                 cases[i].why);
        if (!strstr(a, want)) fprintf(stderr, "event_rows: %s\n", a);
        assert_non_null(strstr(a, want));
        free(a);
        a = ask(path, "GET", "/api/runs/1/export?at=peak&format=pprof", NULL, &status);
        assert_int_equal(status, 500);
        snprintf(want, sizeof want, "the stored events of run 1 cannot be read: %s", cases[i].why);
        if (!strstr(a, want)) fprintf(stderr, "export: %s\n", a);
        assert_non_null(strstr(a, want));
        free(a);
        /* run 2 is untouched */
        a = ask(path, "GET", "/api/runs/2/export?at=end&format=pprof", NULL, &status);
        assert_int_equal(status, 200);
        free(a);
    }

    /* the server's replay of an open run's rows (closing it as lost after
     * a restart rebuilds its rollups from them): refused, nothing written */
    sql_exec(path, "UPDATE runs SET state = 'open' WHERE id = 1");
    uint8_t uuid[16];
    sqlite3 *db;
    sqlite3_stmt *st;
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    assert_int_equal(sqlite3_prepare_v2(db, "SELECT uuid FROM runs WHERE id = 1", -1, &st, NULL),
                     SQLITE_OK);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    assert_int_equal(sqlite3_column_bytes(st, 0), 16);
    memcpy(uuid, sqlite3_column_blob(st, 0), 16);
    sqlite3_finalize(st);
    sqlite3_close(db);
    int64_t snaps = sql_int(path, "SELECT count(*) FROM snapshots WHERE run = 1");
    hs_store *s;
    char err[512] = "";
    hs_store_config cfg = {.granularity_ns = 100000000, .keyframe_every = 4};
    assert_int_equal(hs_store_open(&s, path, &cfg, err, sizeof err), 0);
    assert_int_equal(hs_store_begin(s), 0);
    assert_int_equal(hs_store_lose_uuid(s, uuid), HS_EVERSION); /* the last case's row */
    hs_store_rollback(s);
    hs_store_free(s);
    assert_int_equal(sql_int(path, "SELECT state = 'open' FROM runs WHERE id = 1"), 1);
    assert_int_equal(sql_int(path, "SELECT count(*) FROM snapshots WHERE run = 1"), snaps);
    rm_db(path);
}

/* Keyframes of a run whose many live traces rarely change: fewer than one
 * every keyframe_every buckets, and the state at the end of every bucket,
 * as readers rebuild it (the keyframe at or before it plus the deltas
 * since), still the run's live heap then. */
static void test_sparse_keyframes(void **state)
{
    (void)state;
    char path[512];
    fx_tmp_path(path, sizeof path, "evstore-quiet.db");
    assert_int_equal(fx_build_quiet(path), 0);
    int64_t kfs = sql_int(path, "SELECT count(DISTINCT bucket) FROM snapshots WHERE kind = 1");
    /* a boundary every 4 buckets would give 25; a keyframe is due once the
     * delta rows since the last reach a quarter of the 65 live traces */
    assert_true(kfs >= 2);
    assert_true(kfs <= 10);
    for (int b = 0; b < FX_QUIET_BUCKETS; b++) {
        char sql[1024];
        snprintf(sql, sizeof sql,
                 "WITH kb AS (SELECT coalesce(max(bucket), -1) AS k FROM snapshots WHERE kind = 1 "
                 "AND bucket <= %d) SELECT (SELECT coalesce(sum(bytes), 0) FROM snapshots, kb "
                 "WHERE kind = 1 AND bucket = kb.k) + (SELECT coalesce(sum(bytes), 0) FROM "
                 "snapshots, kb WHERE kind = 0 AND bucket > kb.k AND bucket <= %d) - (SELECT "
                 "live_bytes FROM heap_series WHERE bucket = %d)",
                 b, b, b);
        assert_int_equal(sql_int(path, sql), 0);
        snprintf(sql, sizeof sql, "SELECT live_bytes FROM heap_series WHERE bucket = %d", b);
        assert_int_equal(sql_int(path, sql), FX_QUIET_STACKS * 100 + 1000);
    }
    /* the query layer agrees: the state half-way through */
    int status;
    char *a = ask(path, "GET", "/api/runs/1/top?at=5.05&limit=1", NULL, &status);
    assert_int_equal(status, 200);
    assert_non_null(strstr(a, "\"self_bytes\": 1000"));
    assert_non_null(strstr(a, "\"rows_total\": 65"));
    free(a);
    rm_db(path);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_old_rows_and_migration),
        cmocka_unit_test(test_corrupt_row),
        cmocka_unit_test(test_sparse_keyframes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
