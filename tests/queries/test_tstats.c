/* test_tstats: history's top N and leak detection read per-trace summaries
 * (trace_stats, schema 2) instead of every delta row. Against the rank run
 * of fixture.h, whose traces rank differently by every measure but the
 * right one, and whose answers are known: the top N and its series, the
 * leaks and their fit (recomputed here bucket by bucket), while the run is
 * open (summaries plus the delta rows after them), after a restart rebuilt
 * its rollups, and on a database written with schema 1 (read as it is, and
 * after the migration filled trace_stats). Every answer must also be the
 * very bytes that a pass over all delta rows gives (the reader with
 * trace_stats ignored). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "fixture.h"
#include "hs_error.h"
#include "hs_evcodec.h"
#include "hs_queries.h"
#include "hs_schema.h"
#include "q_internal.h"
#include "store_sqlite.h"

/* The SQLite store's connection under q. */
#define QSTORE(q) ((hs__sqlite *)(q)->store)
#define QDB(q)    (QSTORE(q)->db)

static void rm_db(const char *path)
{
    char p[600];
    unlink(path);
    snprintf(p, sizeof p, "%s-wal", path);
    unlink(p);
    snprintf(p, sizeof p, "%s-shm", path);
    unlink(p);
}

static json_t *ask(hs_q *q, const char *target)
{
    hs_api_reply r;
    hs_api_handle(q, "GET", target, NULL, 0, &r);
    if (r.status != 200) {
        char *e = r.json ? json_dumps(r.json, 0) : NULL;
        fprintf(stderr, "GET %s: %d %s\n", target, r.status, e ? e : "");
        free(e);
    }
    assert_int_equal(r.status, 200);
    json_t *j = json_incref(r.json);
    hs_api_reply_clear(&r);
    return j;
}

static char *ask_text(hs_q *q, const char *target)
{
    json_t *j = ask(q, target);
    char *s = json_dumps(j, JSON_SORT_KEYS | JSON_COMPACT);
    json_decref(j);
    assert_non_null(s);
    return s;
}

/* The answer to target must not depend on where the sums come from: the
 * summaries (as given), one pass over every delta row (schema forced to 1),
 * and each way of reading a series' points. */
static void same_every_way(hs_q *q, const char *target)
{
    int schema = QSTORE(q)->schema;
    char *want = ask_text(q, target);
    for (int path = 0; path <= 2; path++) {
        q->series_path = path;
        for (int sc = 1; sc <= schema; sc++) {
            QSTORE(q)->schema = sc;
            char *got = ask_text(q, target);
            if (strcmp(got, want))
                fprintf(stderr, "%s differs (schema %d, series path %d):\n%s\n%s\n", target, sc,
                        path, want, got);
            assert_string_equal(got, want);
            free(got);
        }
    }
    QSTORE(q)->schema = schema;
    q->series_path = 0;
    free(want);
}

static int64_t ji(const json_t *o, const char *k)
{
    return (int64_t)json_integer_value(json_object_get(o, k));
}

static double jr(const json_t *o, const char *k)
{
    return json_real_value(json_object_get(o, k));
}

static const char *js(const json_t *o, const char *k)
{
    const char *s = json_string_value(json_object_get(o, k));
    return s ? s : "";
}

static const char *leaf(const json_t *row)
{
    return js(json_array_get(json_object_get(row, "stack"), 0), "function");
}

/* The series of history?top=N: names and max_bytes in order, in content
 * order among equal maxima (their sites' names rising here: never their
 * trace ids, which each store numbers its own way). */
static void check_top(hs_q *q, int64_t run, const char *const *names, const int64_t *max, size_t n)
{
    char target[128];
    snprintf(target, sizeof target, "/api/runs/%lld/history?top=%zu", (long long)run, n);
    json_t *j = ask(q, target);
    json_t *series = json_object_get(j, "series");
    assert_int_equal(json_array_size(series), n);
    for (size_t i = 0; i < n; i++) {
        json_t *s = json_array_get(series, i);
        if (strcmp(leaf(s), names[i]) || ji(s, "max_bytes") != max[i])
            fprintf(stderr, "top %zu: %s %lld, wanted %s %lld\n", i, leaf(s),
                    (long long)ji(s, "max_bytes"), names[i], (long long)max[i]);
        assert_string_equal(leaf(s), names[i]);
        assert_int_equal(ji(s, "max_bytes"), max[i]);
        if (i && max[i] == max[i - 1])
            assert_true(strcmp(leaf(s), leaf(json_array_get(series, i - 1))) > 0);
    }
    json_decref(j);
}

static const json_t *row_named(const json_t *rows, const char *name)
{
    for (size_t i = 0; i < json_array_size(rows); i++)
        if (!strcmp(leaf(json_array_get(rows, i)), name)) return json_array_get(rows, i);
    return NULL;
}

/* A trace's live bytes at the end of each bucket 0..L, from its points in
 * history (the delta rows, read one by one). */
static void live_by_bucket(const json_t *series, int64_t g, double *y, int64_t L)
{
    const json_t *pts = json_object_get(series, "points");
    size_t k = 0;
    double cur = 0;
    for (int64_t b = 0; b <= L; b++) {
        const json_t *p = json_array_get(pts, k);
        if (p && ji(p, "t_ns") == (b + 1) * g) {
            cur = (double)ji(p, "bytes");
            k++;
        }
        y[b] = cur;
    }
    assert_int_equal(k, json_array_size(pts));
}

/* The leak fit of docs/api.md, computed bucket by bucket, against the
 * answer's row: the line's slope and r², and the floor's (the least live
 * bytes from a bucket to the end) spread over the eighths of its window
 * (from 5% to 95% of its rise) and the window's share of the run. */
static void check_fit(const json_t *row, const double *y, int64_t L, int64_t g)
{
    double n = (double)(L + 1), sx = 0, sy = 0, sxx = 0, sxy = 0, syy = 0;
    for (int64_t b = 0; b <= L; b++) {
        sx += (double)b;
        sy += y[b];
        sxx += (double)b * (double)b;
        sxy += (double)b * y[b];
        syy += y[b] * y[b];
    }
    double cov = n * sxy - sx * sy, vx = n * sxx - sx * sx, vy = n * syy - sy * sy;
    double slope = cov / vx * 1e9 / (double)g, r2 = cov * cov / (vx * vy);
    double *fl = calloc((size_t)L + 1, sizeof *fl), part[8] = {0};
    for (int64_t b = L; b >= 0; b--) fl[b] = b == L || y[b] < fl[b + 1] ? y[b] : fl[b + 1];
    double f0 = fl[0] < 0 ? fl[0] : 0, rise = fl[L] - f0;
    int64_t b0 = 0, b1;
    while (fl[b0] - f0 < 0.05 * rise) b0++;
    for (b1 = b0; fl[b1] - f0 < 0.95 * rise; b1++) {
    }
    int64_t w = b1 - b0 + 1, parts = w < 8 ? w : 8, held = 0, steps = 0;
    for (int64_t b = b0; b <= b1; b++) {
        double inc = fl[b] - (b ? fl[b - 1] : f0);
        part[(b - b0) * parts / w] += inc;
        steps += inc > 0;
    }
    for (int64_t j = 0; j < parts; j++) held += part[j] >= rise / (4.0 * (double)parts);
    int64_t room = steps < parts ? steps : parts;
    free(fl);
    assert_true(fabs(jr(row, "slope_bytes_per_s") - slope) <= 1e-9 * fabs(slope));
    assert_true(fabs(jr(row, "r2") - r2) <= 1e-9);
    assert_true(fabs(jr(row, "steadiness") - (double)held / (double)room) <= 1e-12);
    assert_true(fabs(jr(row, "span") - (double)w / n) <= 1e-12);
    assert_int_equal(ji(row, "end_bytes"), (int64_t)y[L]);
}

/* Growing traces: exactly names, in order, each fit as recomputed. */
static void check_leaks(hs_q *q, int64_t run, const char *const *names, size_t n)
{
    char target[128];
    snprintf(target, sizeof target, "/api/runs/%lld/leaks", (long long)run);
    json_t *j = ask(q, target);
    json_t *grow = json_object_get(j, "growing");
    json_t *info = json_object_get(j, "run");
    int64_t g = ji(info, "granularity_ns"), L = (ji(info, "duration_ns") - 1) / g;
    if (json_array_size(grow) != n) {
        char *s = json_dumps(grow, 0);
        fprintf(stderr, "growing: %s\n", s);
        free(s);
    }
    assert_int_equal(json_array_size(grow), n);
    snprintf(target, sizeof target, "/api/runs/%lld/history?top=1000", (long long)run);
    json_t *h = ask(q, target);
    double *y = calloc((size_t)L + 1, sizeof *y);
    for (size_t i = 0; i < n; i++) {
        const json_t *row = json_array_get(grow, i);
        assert_string_equal(leaf(row), names[i]);
        const json_t *s = row_named(json_object_get(h, "series"), names[i]);
        assert_non_null(s);
        assert_int_equal(ji(s, "trace"), ji(row, "trace"));
        live_by_bucket(s, g, y, L);
        check_fit(row, y, L, g);
    }
    free(y);
    json_decref(h);
    json_decref(j);
}

/* trace_stats holds exactly the delta rows of buckets <= runs.stats_bucket,
 * summed per trace. */
static void check_summaries(const char *path)
{
    sqlite3 *db;
    assert_int_equal(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    sqlite3_stmt *st;
    assert_int_equal(
        sqlite3_prepare_v2(db,
                           "SELECT count(*) FROM (SELECT s.run, s.trace, count(*) AS n, "
                           "sum(s.bytes) AS b FROM snapshots s JOIN runs r ON r.id = s.run WHERE "
                           "s.kind = 0 AND s.bucket <= r.stats_bucket GROUP BY s.run, s.trace) d "
                           "FULL JOIN trace_stats t ON t.run = d.run AND t.trace = d.trace "
                           "WHERE d.n IS NOT t.rows OR d.b IS NOT t.bytes",
                           -1, &st, NULL),
        SQLITE_OK);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    assert_int_equal(sqlite3_column_int(st, 0), 0);
    sqlite3_finalize(st);
    sqlite3_close_v2(db);
}

/* The two databases' trace_stats hold the same rows, to the bit. */
static void same_summaries(const char *a, const char *b)
{
    sqlite3 *db;
    char sql[1400];
    assert_int_equal(sqlite3_open_v2(a, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    sqlite3_stmt *st;
    snprintf(sql, sizeof sql, "ATTACH '%s' AS o", b);
    assert_int_equal(sqlite3_exec(db, sql, NULL, NULL, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_prepare_v2(db,
                                        "SELECT (SELECT count(*) FROM trace_stats), (SELECT "
                                        "count(*) FROM (SELECT * FROM trace_stats EXCEPT SELECT * "
                                        "FROM o.trace_stats)), (SELECT count(*) FROM (SELECT * "
                                        "FROM o.trace_stats EXCEPT SELECT * FROM trace_stats))",
                                        -1, &st, NULL),
                     SQLITE_OK);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    assert_true(sqlite3_column_int(st, 0) > 0);
    assert_int_equal(sqlite3_column_int(st, 1), 0);
    assert_int_equal(sqlite3_column_int(st, 2), 0);
    sqlite3_finalize(st);
    sqlite3_close_v2(db);
}

static int64_t sql_int(const char *path, const char *sql)
{
    sqlite3 *db;
    sqlite3_stmt *st;
    assert_int_equal(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    int64_t v = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    sqlite3_close_v2(db);
    return v;
}

/* A database as version 1 wrote it: schema/001_init.sql and the rows of
 * every one of its tables copied from src (written by this version, whose
 * writer differs only by trace_stats and runs.stats_bucket). */
static void make_v1(const char *src, const char *dst)
{
    rm_db(dst);
    assert_true(hs_migration_count >= 2);
    assert_int_equal(hs_migrations[0].version, 1);
    sqlite3 *db;
    assert_int_equal(sqlite3_open(dst, &db), SQLITE_OK);
    assert_int_equal(sqlite3_exec(db, hs_migrations[0].sql, NULL, NULL, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_exec(db, "PRAGMA user_version = 1", NULL, NULL, NULL), SQLITE_OK);
    char sql[4096];
    snprintf(sql, sizeof sql, "ATTACH '%s' AS src", src);
    assert_int_equal(sqlite3_exec(db, sql, NULL, NULL, NULL), SQLITE_OK);
    sqlite3_stmt *tables;
    assert_int_equal(sqlite3_prepare_v2(db,
                                        "SELECT name FROM main.sqlite_master WHERE type = 'table' "
                                        "AND name NOT LIKE 'sqlite_%'",
                                        -1, &tables, NULL),
                     SQLITE_OK);
    int copied = 0;
    while (sqlite3_step(tables) == SQLITE_ROW) {
        const char *t = (const char *)sqlite3_column_text(tables, 0);
        char cols[2048] = "";
        sqlite3_stmt *ci;
        snprintf(sql, sizeof sql, "SELECT name FROM pragma_table_info('%s', 'main')", t);
        assert_int_equal(sqlite3_prepare_v2(db, sql, -1, &ci, NULL), SQLITE_OK);
        while (sqlite3_step(ci) == SQLITE_ROW) {
            if (cols[0]) strcat(cols, ", ");
            strcat(cols, (const char *)sqlite3_column_text(ci, 0));
        }
        sqlite3_finalize(ci);
        char *ins =
            sqlite3_mprintf("INSERT INTO main.%s (%s) SELECT %s FROM src.%s", t, cols, cols, t);
        assert_non_null(ins);
        assert_int_equal(sqlite3_exec(db, ins, NULL, NULL, NULL), SQLITE_OK);
        sqlite3_free(ins);
        copied++;
    }
    sqlite3_finalize(tables);
    assert_true(copied >= 10);
    assert_int_equal(sqlite3_exec(db, "DETACH src", NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close_v2(db);
    /* events rows as schema 1 held them */
    assert_int_equal(fx_events_to_wire(dst), 0);
}

/* ---- the rank run -------------------------------------------------------- */

static const char *const end_top[] = {"late",       "spike", "leak",      "churn",
                                      "decline",    "paced", "tie_a",     "tie_b",
                                      "freed_late", "cache", "filler_20", "filler_19"};
static const int64_t end_max[] = {9500, 9000, 8400, 7000, 6000, 6000,
                                  6000, 6000, 5900, 5000, 1000, 950};
/* paced rose in two bursts of three buckets while the program ran on: not
 * steady growth */
static const char *const end_leaks[] = {"leak", "twin_a", "twin_b"};

static const char *const cp_top[] = {"late",  "spike", "churn", "decline",    "tie_a",
                                     "tie_b", "leak",  "cache", "freed_late", "paced"};
static const int64_t cp_max[] = {9500, 9000, 7000, 6000, 6000, 6000, 5180, 5000, 3700, 3000};
static const char *const cp_leaks[] = {"leak", "freed_late", "twin_a", "twin_b"};

static const char *const targets[] = {
    "/api/runs/1/history?top=1000",        "/api/runs/1/history?top=3",
    "/api/runs/1/history?top=2&trace=4,3", "/api/runs/1/leaks",
    "/api/runs/1/leaks?limit=1",
};

/* While the run is open: the newest delta rows (buckets 34 to 36) are after
 * the summaries (bucket 33); the top one, late, is in those rows only. */
static void at_checkpoint(const char *path, void *data)
{
    int *called = data;
    (*called)++;
    assert_int_equal(sql_int(path, "SELECT stats_bucket FROM runs WHERE id = 1"), 33);
    assert_int_equal(sql_int(path, "SELECT max(bucket) FROM snapshots WHERE kind = 0"), 36);
    assert_int_equal(sql_int(path, "SELECT max(max_bytes) FROM trace_stats"), 9000);
    check_summaries(path);
    hs_q *q;
    hs_qerr err;
    assert_int_equal(hs_q_open(&q, path, &err), 0);
    assert_int_equal(QSTORE(q)->schema, hs_schema_version());
    check_top(q, 1, cp_top, cp_max, HS_COUNTOF(cp_top));
    check_leaks(q, 1, cp_leaks, HS_COUNTOF(cp_leaks));
    for (size_t i = 0; i < HS_COUNTOF(targets); i++) same_every_way(q, targets[i]);
    hs_q_free(q);
}

static void check_rank_end(const char *path)
{
    hs_q *q;
    hs_qerr err;
    assert_int_equal(hs_q_open(&q, path, &err), 0);
    check_top(q, 1, end_top, end_max, HS_COUNTOF(end_top));
    check_leaks(q, 1, end_leaks, HS_COUNTOF(end_leaks));
    for (size_t i = 0; i < HS_COUNTOF(targets); i++) same_every_way(q, targets[i]);

    json_t *j = ask(q, "/api/runs/1/history?top=1000");
    json_t *series = json_object_get(j, "series");
    /* every trace with a delta row, and only those: flash came and went
     * within one bucket */
    assert_int_equal(json_array_size(series), 49);
    assert_null(row_named(series, "flash"));
    /* the points are the buckets where the trace changed, at their ends */
    const json_t *late = row_named(series, "late");
    json_t *pts = json_object_get(late, "points");
    assert_int_equal(json_array_size(pts), 2);
    assert_int_equal(ji(json_array_get(pts, 0), "t_ns"), 3700000000LL);
    assert_int_equal(ji(json_array_get(pts, 0), "bytes"), 9500);
    assert_int_equal(ji(json_array_get(pts, 1), "t_ns"), 3900000000LL);
    assert_int_equal(ji(json_array_get(pts, 1), "bytes"), 0);
    assert_int_equal(json_array_size(json_object_get(row_named(series, "leak"), "points")), 60);
    /* a change of blocks but not of bytes is a point too */
    pts = json_object_get(row_named(series, "reshape"), "points");
    assert_int_equal(json_array_size(pts), 2);
    assert_int_equal(ji(json_array_get(pts, 1), "t_ns"), 3100000000LL);
    assert_int_equal(ji(json_array_get(pts, 1), "bytes"), 200);
    /* a series asked for by id comes after the top N, with the same points */
    char target[128];
    const json_t *leak = row_named(series, "leak");
    snprintf(target, sizeof target, "/api/runs/1/history?top=1&trace=%lld",
             (long long)ji(leak, "trace"));
    json_t *k = ask(q, target);
    json_t *ks = json_object_get(k, "series");
    assert_int_equal(json_array_size(ks), 2);
    assert_string_equal(leaf(json_array_get(ks, 0)), "late");
    assert_true(json_equal(json_array_get(ks, 1), (json_t *)leak));
    json_decref(k);
    json_decref(j);
    hs_q_free(q);
}

static void test_rank(void **state)
{
    (void)state;
    char path[512], plain[512];
    fx_tmp_path(path, sizeof path, "rank.db");
    fx_tmp_path(plain, sizeof plain, "rank-plain.db");
    int called = 0;
    assert_int_equal(fx_build_rank(path, at_checkpoint, &called), 0);
    assert_int_equal(called, 1);
    assert_int_equal(sql_int(path, "SELECT stats_bucket FROM runs WHERE id = 1"), 59);
    check_summaries(path);
    check_rank_end(path);
    /* the restart rebuilt them as one uninterrupted run writes them */
    assert_int_equal(fx_build_rank(plain, NULL, NULL), 0);
    same_summaries(path, plain);
    rm_db(plain);
    rm_db(path);
}

/* Stored events lost while the run was away (as retention deletes a lost
 * run's old events): the rebuilt rollups have no spike, and neither may the
 * summaries that the first life of the run wrote. The run's events live in
 * segments of many frames, so the events of 0.3 s to 0.6 s are cut out of
 * them and each segment written back without them. */
static void cut_events(sqlite3 *db, const char *table, int64_t seq, const void *blob, int len)
{
    hs_evdec dec = {0};
    hs_evseg seg = {0};
    hs_evseg_begin(&seg, 1);
    assert_int_equal(hs_evdec_open_row(&dec, hs_schema_version(), blob, (size_t)len), 0);
    hs_event e;
    int64_t kept = 0, cut = 0;
    uint64_t lo = UINT64_MAX, hi = 0;
    while (hs_evdec_next(&dec, &e) == 1) {
        if (e.t_ns >= 300000000 && e.t_ns < 600000000) {
            cut++;
            continue;
        }
        hs_evseg_add(&seg, &e);
        kept++;
        lo = e.t_ns < lo ? e.t_ns : lo;
        hi = e.t_ns > hi ? e.t_ns : hi;
    }
    const uint8_t *out;
    size_t n;
    assert_true(cut > 10 && kept > 0);
    assert_int_equal(hs_evseg_blob(&seg, 1, &out, &n), 0);
    char *sql = sqlite3_mprintf("UPDATE %s SET data = ?1, n_events = %lld, t_first_ns = %llu, "
                                "t_last_ns = %llu WHERE run = 1 AND seq = %lld",
                                table, (long long)kept, (unsigned long long)lo,
                                (unsigned long long)hi, (long long)seq);
    sqlite3_stmt *st;
    assert_int_equal(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK);
    sqlite3_bind_blob(st, 1, out, (int)n, SQLITE_TRANSIENT);
    assert_int_equal(sqlite3_step(st), SQLITE_DONE);
    assert_int_equal(sqlite3_changes(db), 1);
    sqlite3_finalize(st);
    sqlite3_free(sql);
    hs_evseg_free(&seg);
    hs_evdec_free(&dec);
}

static void drop_early_events(const char *path, void *data)
{
    (void)data;
    sqlite3 *db;
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    sqlite3_busy_timeout(db, 10000);
    int segments = 0;
    static const char *const tables[] = {"events", "events_tail"};
    for (size_t i = 0; i < HS_COUNTOF(tables); i++) {
        char *sql = sqlite3_mprintf("SELECT seq, data FROM %s WHERE run = 1 AND t_first_ns < "
                                    "600000000 AND t_last_ns >= 300000000",
                                    tables[i]);
        sqlite3_stmt *st;
        assert_int_equal(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK);
        while (sqlite3_step(st) == SQLITE_ROW) {
            cut_events(db, tables[i], sqlite3_column_int64(st, 0), sqlite3_column_blob(st, 1),
                       sqlite3_column_bytes(st, 1));
            segments++;
        }
        sqlite3_finalize(st);
        sqlite3_free(sql);
    }
    assert_true(segments > 0);
    sqlite3_close_v2(db);
}

static void test_rebuilt(void **state)
{
    (void)state;
    char path[512];
    fx_tmp_path(path, sizeof path, "rank-rebuilt.db");
    assert_int_equal(fx_build_rank(path, drop_early_events, NULL), 0);
    check_summaries(path);
    hs_q *q;
    hs_qerr err;
    assert_int_equal(hs_q_open(&q, path, &err), 0);
    json_t *j = ask(q, "/api/runs/1/history?top=1000");
    json_t *series = json_object_get(j, "series");
    assert_null(row_named(series, "spike"));
    assert_non_null(row_named(series, "late"));
    json_decref(j);
    for (size_t i = 0; i < HS_COUNTOF(targets); i++) same_every_way(q, targets[i]);
    hs_q_free(q);
    rm_db(path);
}

/* A reader must take a live run's summaries and stats_bucket from one
 * commit: here the writer commits new ones (and moves stats_bucket past
 * late's bucket) just before the reader's statement on trace_stats begins,
 * after it read stats_bucket. The sums are still the checkpoint's. (An API
 * request reads as of one snapshot anyway while its run's statement is
 * pending; the summaries must not depend on that.) */
typedef struct race {
    const char *path;
    int fired, step_rc;
    int64_t mark_after;
} race;

static int before_summaries(unsigned ev, void *ctx, void *p, void *x)
{
    race *ra = ctx;
    (void)p;
    if (ev != SQLITE_TRACE_STMT || ra->fired || !strstr((const char *)x, "FROM trace_stats"))
        return 0;
    ra->fired = 1;
    const char *mark = "SELECT stats_bucket FROM runs WHERE id = 1";
    for (int i = 0; i < 30 && !ra->step_rc && sql_int(ra->path, mark) == 33; i++)
        ra->step_rc = fx_rank_step();
    ra->mark_after = sql_int(ra->path, mark);
    return 0;
}

static const hs_tstats *sum_of(const hs__tsums *sums, int64_t trace)
{
    for (size_t i = 0; i < sums->n; i++)
        if (sums->rows[i].trace == trace) return &sums->rows[i].s;
    return NULL;
}

static void race_checkpoint(const char *path, void *data)
{
    race *ra = data;
    ra->path = path;
    hs_q *q;
    hs_qerr err;
    assert_int_equal(hs_q_open(&q, path, &err), 0);
    json_t *j = ask(q, "/api/runs/1/history?top=1000");
    json_t *series = json_object_get(j, "series");
    int64_t leak = ji(row_named(series, "leak"), "trace"),
            late = ji(row_named(series, "late"), "trace");
    json_decref(j);
    hs__run run;
    assert_int_equal(hs__run_load(q, 1, &run, &err), 0);
    q->store->ops->idle(q->store); /* no statement holds a snapshot */
    assert_int_equal(sqlite3_trace_v2(QDB(q), SQLITE_TRACE_STMT, before_summaries, ra), SQLITE_OK);
    hs__tsums sums;
    assert_int_equal(hs__tsums_load(q, &run, INT64_MAX, &sums, &err), 0);
    assert_int_equal(ra->fired, 1);
    assert_int_equal(ra->step_rc, 0);
    assert_true(ra->mark_after > 38);
    assert_true(sqlite3_get_autocommit(QDB(q)));
    /* as of the checkpoint: delta rows up to bucket 36 */
    const hs_tstats *lk = sum_of(&sums, leak), *lt = sum_of(&sums, late);
    assert_non_null(lk);
    assert_non_null(lt);
    assert_int_equal(lk->rows, 37);
    assert_int_equal(lk->bytes, 5180);
    assert_int_equal(lt->bytes, 9500);
    assert_int_equal(lt->max, 9500);
    hs__tsums_clear(&sums);
    hs__run_clear(&run);
    hs_q_free(q);
}

static void test_live_commit(void **state)
{
    (void)state;
    char path[512];
    fx_tmp_path(path, sizeof path, "rank-live.db");
    race ra = {0};
    assert_int_equal(fx_build_rank(path, race_checkpoint, &ra), 0);
    assert_int_equal(ra.fired, 1);
    check_summaries(path);
    check_rank_end(path);
    rm_db(path);
}

/* A database written with schema 1: answered as it is (read-only, no
 * trace_stats), then migrated (trace_stats filled from the delta rows) and
 * answered the same. */
static void test_schema1(void **state)
{
    (void)state;
    char path[512], v1[512];
    fx_tmp_path(path, sizeof path, "rank2.db");
    fx_tmp_path(v1, sizeof v1, "rank-v1.db");
    assert_int_equal(fx_build_rank(path, NULL, NULL), 0);
    make_v1(path, v1);
    assert_int_equal(sql_int(v1, "PRAGMA user_version"), 1);
    assert_int_equal(sql_int(v1, "SELECT count(*) FROM sqlite_master WHERE name = 'trace_stats'"),
                     0);

    hs_q *q2, *q1;
    hs_qerr err;
    assert_int_equal(hs_q_open(&q2, path, &err), 0);
    assert_int_equal(hs_q_open(&q1, v1, &err), 0);
    assert_int_equal(QSTORE(q1)->schema, 1);
    check_top(q1, 1, end_top, end_max, HS_COUNTOF(end_top));
    check_leaks(q1, 1, end_leaks, HS_COUNTOF(end_leaks));
    for (size_t i = 0; i < HS_COUNTOF(targets); i++) {
        char *a = ask_text(q2, targets[i]), *b = ask_text(q1, targets[i]);
        assert_string_equal(a, b);
        free(a);
        free(b);
    }
    hs_q_free(q1);

    /* the migration, as a server or an import opening the file does it */
    sqlite3 *db;
    char msg[256];
    int mrc = hs_schema_open(&db, v1, 0, msg, sizeof msg);
    if (mrc) fprintf(stderr, "migration: %s\n", msg);
    assert_int_equal(mrc, 0);
    sqlite3_close_v2(db);
    assert_int_equal(sql_int(v1, "PRAGMA user_version"), hs_schema_version());
    assert_int_equal(sql_int(v1, "SELECT stats_bucket FROM runs WHERE id = 1"), 59);
    check_summaries(v1);
    same_summaries(path, v1);
    assert_int_equal(hs_q_open(&q1, v1, &err), 0);
    assert_int_equal(QSTORE(q1)->schema, hs_schema_version());
    check_rank_end(v1);
    for (size_t i = 0; i < HS_COUNTOF(targets); i++) {
        char *a = ask_text(q2, targets[i]), *b = ask_text(q1, targets[i]);
        assert_string_equal(a, b);
        free(a);
        free(b);
    }
    hs_q_free(q1);
    hs_q_free(q2);
    rm_db(v1);
    rm_db(path);
}

/* The other known runs (fixture.h) answer the same every way too. */
static void test_fixtures(void **state)
{
    (void)state;
    char path[512];
    fx_tmp_path(path, sizeof path, "tstats-fx.db");
    assert_int_equal(fx_build(path), 0);
    check_summaries(path);
    hs_q *q;
    hs_qerr err;
    assert_int_equal(hs_q_open(&q, path, &err), 0);
    static const char *const fx_targets[] = {
        "/api/runs/1/history?top=10",
        "/api/runs/2/history?top=10&trace=1,2,3",
        "/api/runs/1/leaks",
        "/api/runs/2/leaks",
    };
    for (size_t i = 0; i < HS_COUNTOF(fx_targets); i++) same_every_way(q, fx_targets[i]);
    /* tmp_alloc never outlives a bucket: no delta rows, no series */
    static const char *const v1_top[] = {"big_alloc", "leak_site", "config_load"};
    static const int64_t v1_max[] = {100000, 20000, 5000};
    check_top(q, 1, v1_top, v1_max, HS_COUNTOF(v1_top));
    static const char *const v1_leaks[] = {"leak_site"};
    check_leaks(q, 1, v1_leaks, 1);
    check_leaks(q, 2, NULL, 0);
    hs_q_free(q);
    rm_db(path);

    assert_int_equal(fx_build_trend(path), 0);
    check_summaries(path);
    assert_int_equal(hs_q_open(&q, path, &err), 0);
    same_every_way(q, "/api/runs/1/leaks");
    same_every_way(q, "/api/runs/1/history?top=3");
    hs_q_free(q);
    rm_db(path);
}

/* A series' points by key lookups: heap_series' buckets in the trace's
 * range, each looked up in snapshots by its whole primary key. */
static void test_plan(void **state)
{
    (void)state;
    char path[512];
    fx_tmp_path(path, sizeof path, "tstats-plan.db");
    assert_int_equal(fx_build_rank(path, NULL, NULL), 0);
    hs_q *q;
    hs_qerr err;
    assert_int_equal(hs_q_open(&q, path, &err), 0);
    char sql[1024], plan[2048] = "";
    snprintf(sql, sizeof sql, "EXPLAIN QUERY PLAN %s", hs__sqlite_stmt_sql[ST_TRACE_DELTAS]);
    sqlite3_stmt *st;
    assert_int_equal(sqlite3_prepare_v2(QDB(q), sql, -1, &st, NULL), SQLITE_OK);
    while (sqlite3_step(st) == SQLITE_ROW) {
        strncat(plan, (const char *)sqlite3_column_text(st, 3), sizeof plan - strlen(plan) - 3);
        strcat(plan, "; ");
    }
    sqlite3_finalize(st);
    /* the snapshots' block holding the trace, by its key (schema/hs_snaps.h) */
    static const char want[] = "SEARCH h USING PRIMARY KEY (run=? AND bucket>? AND bucket<?); "
                               "SCAN s VIRTUAL TABLE INDEX 167:run=? AND kind=? AND bucket=? AND "
                               "trace=?";
    if (!strstr(plan, want)) fprintf(stderr, "plan: %s\n", plan);
    assert_non_null(strstr(plan, want));
    hs_q_free(q);
    rm_db(path);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rank),    cmocka_unit_test(test_rebuilt),
        cmocka_unit_test(test_schema1), cmocka_unit_test(test_fixtures),
        cmocka_unit_test(test_plan),    cmocka_unit_test(test_live_commit),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
