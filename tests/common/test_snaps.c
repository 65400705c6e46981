/* test_snaps: the stored snapshot rows (schema/hs_snaps.c). Blocks with
 * gaps in the traces, negative and extreme values come back as they went
 * in; every truncation of a block and a changed byte in its header are
 * refused, not misread; the `snapshots` table SQL sees answers every shape
 * of question the readers ask (a group, a range of buckets, the last
 * bucket, one trace, lookups of many traces, the order backwards, two
 * cursors at once) exactly as a table of the same rows does; a group
 * written again replaces the old; INSERT adds or replaces one row and
 * nothing else changes rows; migration 15's move keeps every row; the
 * reader in C gives what a table of the same rows does, and sees what
 * another connection writes. */
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

#include "hs_error.h"
#include "hs_schema.h"
#include "hs_snaps.h"
#include "hs_testkit.h"

static void roundtrip(const hs_snap_row *x, size_t n)
{
    hs_buf b = {0};
    assert_int_equal(hs_snaps_encode(x, n, &b, NULL), 0);
    hs_snap_row y[HS_SNAPS_BLOCK_ROWS];
    size_t m;
    assert_int_equal(hs_snaps_decode(b.p, b.n, y, &m, NULL), 0);
    assert_int_equal(m, n);
    assert_int_equal(hs_snaps_count(b.p, b.n), n);
    assert_memory_equal(x, y, n * sizeof *x);
    for (size_t cut = 0; cut < b.n; cut += 1 + cut / 8)
        assert_int_equal(hs_snaps_decode(b.p, cut, y, &m, NULL), HS_ECORRUPT);
    b.p[0] ^= 1; /* another version */
    assert_int_equal(hs_snaps_decode(b.p, b.n, y, &m, NULL), HS_ECORRUPT);
    b.p[0] ^= 1;
    b.p[1] ^= 2; /* another count */
    assert_int_equal(hs_snaps_decode(b.p, b.n, y, &m, NULL), HS_ECORRUPT);
    hs_buf_free(&b);
}

/* n rows of traces from first with gaps, values of every sign and size. */
static void make_rows(hs_snap_row *x, size_t n, int64_t first)
{
    for (size_t i = 0; i < n; i++) {
        x[i].trace = i ? x[i - 1].trace + 1 + (int64_t)(i * 7 % 13) : first;
        x[i].bytes = (int64_t)((i * 2654435761u) % 100000) - (i % 3 ? 0 : 50000);
        x[i].count = (int64_t)(i % 17) - 8;
    }
}

static void test_codec(void **state)
{
    (void)state;
    hs_snap_row odd[] = {{1, INT64_MIN, INT64_MAX}, {2, INT64_MAX, INT64_MIN}, {INT64_MAX, 0, 0}};
    roundtrip(odd, 3);
    hs_snap_row wide[] = {{INT64_MIN, 1, 1}, {-5, 2, 2}, {INT64_MAX, 3, 3}};
    roundtrip(wide, 3);
    hs_snap_row x[HS_SNAPS_BLOCK_ROWS];
    make_rows(x, HS_SNAPS_BLOCK_ROWS, 1000);
    roundtrip(x, 1);
    roundtrip(x, 17);
    roundtrip(x, HS_SNAPS_BLOCK_ROWS);
    /* close traces and small values: a few bytes a row */
    for (size_t i = 0; i < HS_SNAPS_BLOCK_ROWS; i++)
        x[i] = (hs_snap_row){(int64_t)i * 3 + 1, 64 * (int64_t)(i % 5), (int64_t)(i % 5)};
    hs_buf b = {0};
    assert_int_equal(hs_snaps_encode(x, HS_SNAPS_BLOCK_ROWS, &b, NULL), 0);
    assert_true(b.n < 3 * HS_SNAPS_BLOCK_ROWS);
    hs_buf_free(&b);
}

static const char table_sql[] =
    "(run INTEGER NOT NULL, kind INTEGER NOT NULL, bucket INTEGER NOT NULL, trace INTEGER NOT "
    "NULL, bytes INTEGER NOT NULL, count INTEGER NOT NULL, PRIMARY KEY (run, kind, bucket, "
    "trace)) WITHOUT ROWID";

/* the buckets a run has rows in (the reader finds a trace's deltas by them) */
static const char heap_series_sql[] =
    "CREATE TABLE heap_series (run INTEGER NOT NULL, bucket INTEGER NOT NULL, PRIMARY KEY (run, "
    "bucket)) WITHOUT ROWID";

static sqlite3 *open_db(void)
{
    sqlite3 *db;
    char sql[512];
    assert_int_equal(sqlite3_open(":memory:", &db), SQLITE_OK);
    assert_int_equal(sqlite3_exec(db, TK_SNAPSHOT_BLOCKS_SQL, NULL, NULL, NULL), SQLITE_OK);
    snprintf(sql, sizeof sql, "CREATE TABLE ref %s", table_sql);
    assert_int_equal(sqlite3_exec(db, sql, NULL, NULL, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_exec(db, heap_series_sql, NULL, NULL, NULL), SQLITE_OK);
    return db;
}

/* The first column of the first row of sql as text ("" when NULL). */
static char *text1(sqlite3 *db, const char *sql)
{
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK)
        fail_msg("%s: %s", sql, sqlite3_errmsg(db));
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    const char *t = (const char *)sqlite3_column_text(st, 0);
    char *out = strdup(t ? t : "");
    sqlite3_finalize(st);
    return out;
}

/* fmt with every {T} replaced by table (sqlite3_free). */
static char *with_table(const char *fmt, const char *table)
{
    sqlite3_str *q = sqlite3_str_new(NULL);
    for (const char *p = fmt; *p;) {
        const char *t = strstr(p, "{T}");
        size_t n = t ? (size_t)(t - p) : strlen(p);
        sqlite3_str_append(q, p, (int)n);
        p += n;
        if (t) {
            sqlite3_str_appendall(q, table);
            p += 3;
        }
    }
    return sqlite3_str_finish(q);
}

/* sql (with {T} for the table) gives the same on both. */
static void same(sqlite3 *db, const char *fmt)
{
    char *a = with_table(fmt, "snapshots"), *b = with_table(fmt, "ref");
    char *x = text1(db, a), *y = text1(db, b);
    if (strcmp(x, y)) fail_msg("%s: %.200s against %.200s", a, x, y);
    free(x);
    free(y);
    sqlite3_free(a);
    sqlite3_free(b);
}

/* Writes a group both ways: blocks by hs_snaps_put, rows into ref. */
static void put(sqlite3 *db, hs_snaps_wr *w, int64_t run, int kind, int64_t bucket, hs_snap_row *x,
                size_t n)
{
    char sql[200];
    snprintf(sql, sizeof sql, "DELETE FROM ref WHERE run = %lld AND kind = %d AND bucket = %lld",
             (long long)run, kind, (long long)bucket);
    assert_int_equal(sqlite3_exec(db, sql, NULL, NULL, NULL), SQLITE_OK);
    snprintf(sql, sizeof sql, "INSERT OR IGNORE INTO heap_series VALUES (%lld, %lld)",
             (long long)run, (long long)bucket);
    assert_int_equal(sqlite3_exec(db, sql, NULL, NULL, NULL), SQLITE_OK);
    for (size_t i = 0; i < n; i++) {
        snprintf(sql, sizeof sql, "INSERT INTO ref VALUES (%lld, %d, %lld, %lld, %lld, %lld)",
                 (long long)run, kind, (long long)bucket, (long long)x[i].trace,
                 (long long)x[i].bytes, (long long)x[i].count);
        assert_int_equal(sqlite3_exec(db, sql, NULL, NULL, NULL), SQLITE_OK);
    }
    /* in another order than the traces' */
    for (size_t i = 0; i + 1 < n; i += 2) {
        hs_snap_row t = x[i];
        x[i] = x[i + 1];
        x[i + 1] = t;
    }
    assert_int_equal(hs_snaps_put(w, run, kind, bucket, x, n), 0);
}

static void fill(sqlite3 *db)
{
    hs_snaps_wr *w;
    assert_int_equal(hs_snaps_wr_open(db, &w), 0);
    static hs_snap_row x[3000];
    for (int64_t run = 1; run <= 3; run++) {
        for (int64_t b = 0; b < 12; b++) { /* deltas: a few rows, some buckets none */
            size_t n = (size_t)((b * 37 + run * 11) % 9);
            make_rows(x, n, 1 + b * 5);
            if (n) put(db, w, run, 0, b, x, n);
        }
        make_rows(x, 1000, 3); /* a keyframe of several blocks */
        put(db, w, run, 1, 7, x, 1000);
        make_rows(x, 300, 2);
        put(db, w, run, 1, 11, x, 300);
        make_rows(x, 2 * HS_SNAPS_BLOCK_ROWS, 5); /* the peak, written twice */
        put(db, w, run, 2, 4, x, 2 * HS_SNAPS_BLOCK_ROWS);
        make_rows(x, 40, 9);
        put(db, w, run, 2, 4, x, 40);
    }
    hs_snaps_wr_free(w);
}

static const char *const questions[] = {
    "SELECT count(*) || ' ' || sum(bytes) || ' ' || sum(count) FROM {T}",
    "SELECT group_concat(trace || ':' || bytes || ':' || count) FROM (SELECT * FROM {T} WHERE "
    "run = 2 AND kind = 1 AND bucket = 7 ORDER BY trace)",
    "SELECT group_concat(bucket || ':' || trace || ':' || bytes) FROM (SELECT * FROM {T} WHERE "
    "run = 2 AND kind = 0 AND bucket > 2 AND bucket <= 9 ORDER BY bucket, trace)",
    "SELECT MAX(bucket) FROM {T} WHERE run = 3 AND kind = 0 AND bucket <= 8",
    "SELECT MAX(bucket) FROM {T} WHERE run = 3 AND kind = 1",
    "SELECT MAX(bucket) FROM {T} WHERE run = 9 AND kind = 1",
    "SELECT count(*) FROM {T} WHERE run = 1 AND kind = 2",
    "SELECT group_concat(run || kind || bucket || ':' || trace) FROM (SELECT * FROM {T} ORDER BY "
    "run DESC, kind DESC, bucket DESC, trace DESC LIMIT 300)",
    "SELECT group_concat(bucket) FROM (SELECT bucket FROM {T} WHERE run = 1 AND kind = 0 ORDER "
    "BY bucket DESC)",
    /* one trace at a time, in order and not, present and absent */
    "WITH RECURSIVE t(v) AS (SELECT 0 UNION ALL SELECT v + 3 FROM t WHERE v < 2100) SELECT "
    "sum(s.bytes) || ' ' || count(*) FROM t CROSS JOIN {T} s ON s.run = 3 AND s.kind = 1 AND "
    "s.bucket = 7 AND "
    "s.trace = t.v",
    "WITH RECURSIVE i(k) AS (SELECT 0 UNION ALL SELECT k + 1 FROM i WHERE k < 700), t(v) AS "
    "(SELECT (k * 7919) % 3000 FROM i) SELECT sum(s.bytes) || ' ' || count(*) FROM t CROSS JOIN "
    "{T} s ON s.run = 3 AND s.kind = 1 AND "
    "s.bucket = 7 AND s.trace = t.v",
    "SELECT bytes FROM {T} WHERE run = 2 AND kind = 1 AND bucket = 7 AND trace = 3",
    /* two cursors of one plan at once */
    "SELECT count(*) || ' ' || sum(a.bytes - b.bytes) FROM {T} a JOIN {T} b ON b.run = a.run "
    "AND b.kind = a.kind AND b.bucket = a.bucket AND b.trace = a.trace WHERE a.run = 1",
    "SELECT count(*) FROM {T} a, {T} b WHERE a.run = 1 AND a.kind = 2 AND b.run = 2 AND "
    "b.kind = 2",
    "SELECT group_concat(trace) FROM {T} WHERE run = 1 AND kind = 0 AND trace IN (6, 7, 11, 12)",
};

static void ask_all(sqlite3 *db)
{
    for (size_t i = 0; i < sizeof questions / sizeof questions[0]; i++) same(db, questions[i]);
}

static void test_sql_table(void **state)
{
    (void)state;
    sqlite3 *db = open_db();
    fill(db);
    ask_all(db);
    /* every block within its page's share (no row here is that large) */
    char *big = text1(db, "SELECT max(length(data)) FROM snapshot_blocks");
    assert_true(atoi(big) > 0 && atoi(big) <= HS_SNAPS_BLOCK_BYTES);
    free(big);
    /* the peak written again: only the second's rows */
    char *n = text1(db, "SELECT count(*) FROM snapshots WHERE run = 2 AND kind = 2");
    assert_string_equal(n, "40");
    free(n);
    /* INSERT adds a row, or replaces the one of its trace */
    static const char *const ins[] = {
        "INSERT INTO {T} VALUES (2, 1, 7, 3, 111, 1)",  /* replaces */
        "INSERT INTO {T} VALUES (2, 1, 7, 4, 222, 2)",  /* between two */
        "INSERT INTO {T} VALUES (5, 0, 1, 10, 333, 3)", /* a new group */
    };
    for (size_t i = 0; i < sizeof ins / sizeof ins[0]; i++) {
        char *a = with_table(ins[i], "snapshots");
        char *b = i ? with_table(ins[i], "ref")
                    : sqlite3_mprintf("INSERT OR REPLACE INTO ref VALUES (2, 1, 7, 3, 111, 1)");
        assert_int_equal(sqlite3_exec(db, a, NULL, NULL, NULL), SQLITE_OK);
        assert_int_equal(sqlite3_exec(db, b, NULL, NULL, NULL), SQLITE_OK);
        sqlite3_free(a);
        sqlite3_free(b);
    }
    ask_all(db);
    assert_int_not_equal(sqlite3_exec(db, "DELETE FROM snapshots", NULL, NULL, NULL), SQLITE_OK);
    assert_int_not_equal(sqlite3_exec(db, "UPDATE snapshots SET bytes = 0", NULL, NULL, NULL),
                         SQLITE_OK);
    ask_all(db);
    sqlite3_close(db);
}

static void test_migrate(void **state)
{
    (void)state;
    sqlite3 *db = open_db();
    fill(db);
    char sql[600];
    snprintf(sql, sizeof sql,
             "CREATE TABLE snapshots %s; INSERT INTO snapshots SELECT * FROM ref; DELETE FROM "
             "snapshot_blocks",
             table_sql);
    assert_int_equal(sqlite3_exec(db, sql, NULL, NULL, NULL), SQLITE_OK);
    assert_int_equal(hs_snaps_in_blocks(db), 0);
    assert_int_equal(hs_snaps_migrate(db), 0);
    assert_int_equal(hs_snaps_in_blocks(db), 1);
    ask_all(db);
    /* nothing left to move: nothing done */
    assert_int_equal(hs_snaps_migrate(db), 0);
    ask_all(db);
    sqlite3_close(db);
}

/* What hs_snaps_rd_scan gives, as text like the ref query below. */
static int collect(int64_t bucket, const hs_snap_row *row, void *data)
{
    sqlite3_str *q = data;
    sqlite3_str_appendf(q, "%s%lld:%lld:%lld:%lld", sqlite3_str_length(q) ? "," : "",
                        (long long)bucket, (long long)row->trace, (long long)row->bytes,
                        (long long)row->count);
    return 0;
}

static void same_scan(hs_snaps_rd *rd, sqlite3 *ref, int64_t run, int kind, int64_t lo, int64_t hi,
                      int64_t trace)
{
    sqlite3_str *q = sqlite3_str_new(NULL);
    assert_int_equal(hs_snaps_rd_scan(rd, run, kind, lo, hi, trace, collect, q), 0);
    char *got = sqlite3_str_finish(q);
    char *sql = sqlite3_mprintf(
        "SELECT group_concat(bucket || ':' || trace || ':' || bytes || ':' || count) FROM "
        "(SELECT * FROM ref WHERE run = %lld AND kind = %d AND bucket >= %lld AND bucket <= %lld "
        "AND (%lld < 0 OR trace = %lld) ORDER BY bucket, trace)",
        (long long)run, kind, (long long)lo, (long long)hi, (long long)trace, (long long)trace);
    char *want = text1(ref, sql);
    if (strcmp(got ? got : "", want))
        fail_msg("scan %lld %d %lld..%lld trace %lld: %.200s against %.200s", (long long)run, kind,
                 (long long)lo, (long long)hi, (long long)trace, got, want);
    sqlite3_free(sql);
    sqlite3_free(got);
    free(want);
}

static void scans(hs_snaps_rd *rd, sqlite3 *ref)
{
    for (int64_t run = 1; run <= 3; run++) {
        same_scan(rd, ref, run, 0, 0, 100, -1);
        same_scan(rd, ref, run, 0, 3, 8, -1);
        same_scan(rd, ref, run, 1, 7, 7, -1);
        same_scan(rd, ref, run, 2, 0, INT64_MAX, -1);
        for (int64_t t = 0; t < 3000; t += 97) /* by the blocks' keys kept, or SQL */
            same_scan(rd, ref, run, 1, 0, 11, t);
        for (int64_t t = 0; t < 110; t++) /* every trace the deltas have */
            same_scan(rd, ref, run, 0, 2, 9, t);
    }
    int64_t b = -1;
    assert_int_equal(hs_snaps_rd_last(rd, 2, 1, 10, &b), 1);
    assert_int_equal(b, 7);
    assert_int_equal(hs_snaps_rd_last(rd, 2, 1, 6, &b), 0);
}

/* The reader in C (hs_snaps_rd) on one connection while another writes:
 * the blocks and keys it keeps are dropped when the file changes. */
static void test_reader(void **state)
{
    (void)state;
    char path[] = "/tmp/hs-test-snaps-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    sqlite3 *w, *r;
    assert_int_equal(sqlite3_open(path, &w), SQLITE_OK);
    assert_int_equal(sqlite3_exec(w, "PRAGMA journal_mode = WAL", NULL, NULL, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_exec(w, TK_SNAPSHOT_BLOCKS_SQL, NULL, NULL, NULL), SQLITE_OK);
    char sql[512];
    snprintf(sql, sizeof sql, "CREATE TABLE ref %s", table_sql);
    assert_int_equal(sqlite3_exec(w, sql, NULL, NULL, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_exec(w, heap_series_sql, NULL, NULL, NULL), SQLITE_OK);
    fill(w);
    assert_int_equal(sqlite3_open(path, &r), SQLITE_OK);
    hs_snaps_rd *rd;
    assert_int_equal(hs_snaps_rd_open(r, &rd), 0);
    scans(rd, w);
    scans(rd, w);               /* from what it kept */
    hs_snaps_rd_dir_max(rd, 2); /* keys of more blocks than it keeps: by SQL */
    scans(rd, w);
    hs_snaps_rd_dir_max(rd, 4096);
    /* rows rewritten by the other: a keyframe and a bucket's deltas with the
     * same blocks' keys and other values, and the blocks of the keys kept
     * last (run 3's keyframes) under other keys */
    hs_snaps_wr *wr;
    assert_int_equal(hs_snaps_wr_open(w, &wr), 0);
    static hs_snap_row x[1000];
    make_rows(x, 1000, 3);
    for (size_t i = 0; i < 1000; i++) x[i].bytes += 7;
    put(w, wr, 2, 1, 7, x, 1000);
    make_rows(x, 8, 26);
    for (size_t i = 0; i < 8; i++) x[i].count += 5;
    put(w, wr, 1, 0, 5, x, 8);
    make_rows(x, 700, 40);
    put(w, wr, 3, 1, 7, x, 700);
    hs_snaps_wr_free(wr);
    scans(rd, w);
    hs_snaps_rd_free(rd);
    sqlite3_close(r);
    sqlite3_close(w);
    unlink(path);
    snprintf(sql, sizeof sql, "%s-wal", path);
    unlink(sql);
    snprintf(sql, sizeof sql, "%s-shm", path);
    unlink(sql);
}

int main(void)
{
    hs_schema_sql_auto();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_codec),
        cmocka_unit_test(test_sql_table),
        cmocka_unit_test(test_migrate),
        cmocka_unit_test(test_reader),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
