/* test_maps: the stored form of the runs' id maps (schema/hs_maps.c).
 * Chunks of dense and sparse keys, negative keys and values that fit no
 * small varint come back as they went in; every truncation of a chunk and
 * a changed byte in its header are refused, not misread; a later entry for
 * a key replaces an earlier one; the run_pcs and run_stacks tables SQL
 * sees read a run's chunks, by run, by run and key, whole and in a join,
 * and take inserts with the old tables' conflict rules; migration 13's
 * move of the tables of schema 1 keeps every entry. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <sqlite3.h>

#include "hs_error.h"
#include "kit_db.h"
#include "hs_schema.h"
#include "hs_maps.h"

/* n entries from key first: steps of 1 with a jump every 100, values
 * mostly rising, a few far away. */
static hs_maps_entry *make_entries(size_t n, int64_t first)
{
    hs_maps_entry *e = malloc(n * sizeof *e);
    assert_non_null(e);
    for (size_t i = 0; i < n; i++) {
        e[i].key = i ? e[i - 1].key + 1 + (i % 100 == 0 ? 4093 : 0) : first;
        e[i].value = (int64_t)(i * 3 + (i * 2654435761u) % 7) + (i % 97 == 0 ? (1ll << 45) : 0);
    }
    return e;
}

static void roundtrip(const hs_maps_entry *x, size_t n)
{
    hs_buf b = {0};
    assert_int_equal(hs_maps_encode(x, n, &b), 0);
    hs_maps_entry *y;
    size_t m;
    assert_int_equal(hs_maps_decode(b.p, b.n, &y, &m), 0);
    assert_int_equal(m, n);
    assert_memory_equal(x, y, n * sizeof *x);
    free(y);
    for (size_t cut = 0; cut < b.n; cut += 1 + cut / 8)
        assert_int_equal(hs_maps_decode(b.p, cut, &y, &m), HS_ECORRUPT);
    b.p[0] ^= 1; /* another version */
    assert_int_equal(hs_maps_decode(b.p, b.n, &y, &m), HS_ECORRUPT);
    b.p[0] ^= 1;
    b.p[1] ^= 2; /* another count */
    assert_int_equal(hs_maps_decode(b.p, b.n, &y, &m), HS_ECORRUPT);
    hs_buf_free(&b);
}

static void test_codec_roundtrip(void **state)
{
    (void)state;
    hs_maps_entry odd[] = {{INT64_MIN, INT64_MAX}, {-5, -1}, {0, INT64_MIN}, {INT64_MAX, 0}};
    roundtrip(odd, 4);
    hs_maps_entry *x = make_entries(HS_MAPS_CHUNK, 1);
    roundtrip(x, 1);
    roundtrip(x, 100);
    roundtrip(x, HS_MAPS_CHUNK);
    /* stacks as a collector gives them: a byte an entry at most */
    for (size_t i = 0; i < HS_MAPS_CHUNK; i++)
        x[i] = (hs_maps_entry){(int64_t)i + 1, 1000 + (int64_t)i * 2 + (int64_t)(i % 3)};
    hs_buf b = {0};
    assert_int_equal(hs_maps_encode(x, HS_MAPS_CHUNK, &b), 0);
    assert_true(b.n < HS_MAPS_CHUNK);
    hs_buf_free(&b);
    free(x);
    /* a step that takes a key past INT64_MAX */
    static const uint8_t past[] = {HS_MAPS_CODEC, 2,    0,    11,   2,    0xfc, 0xff, 0xff, 0xff,
                                   0xff,          0xff, 0xff, 0xff, 0xff, 0x01, 0x01, 0,    0};
    hs_maps_entry *y;
    size_t m;
    assert_int_equal(hs_maps_decode(past, sizeof past, &y, &m), 0);
    assert_int_equal(y[0].key, INT64_MAX - 1);
    assert_int_equal(y[1].key, INT64_MAX);
    free(y);
    uint8_t over[sizeof past];
    memcpy(over, past, sizeof past);
    over[sizeof over - 3] = 2;
    assert_int_equal(hs_maps_decode(over, sizeof over, &y, &m), HS_ECORRUPT);
}

static void test_settle(void **state)
{
    (void)state;
    static const struct {
        hs_maps_entry in[6];
        size_t n;
        hs_maps_entry out[6];
        size_t m;
    } cases[] = {
        {{{1, 10}, {2, 20}, {3, 30}}, 3, {{1, 10}, {2, 20}, {3, 30}}, 3},
        {{{3, 30}, {1, 10}, {2, 20}}, 3, {{1, 10}, {2, 20}, {3, 30}}, 3},
        {{{2, 1}, {1, 1}, {2, 2}, {2, 3}}, 4, {{1, 1}, {2, 3}}, 2},
        {{{5, 1}, {5, 2}, {4, 9}, {5, 3}, {-1, 0}, {4, 8}}, 6, {{-1, 0}, {4, 8}, {5, 3}}, 3},
        {{{7, 7}}, 1, {{7, 7}}, 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        hs_maps_entry e[6];
        size_t n = cases[i].n;
        memcpy(e, cases[i].in, sizeof e);
        assert_int_equal(hs_maps_settle(e, &n), 0);
        assert_int_equal(n, cases[i].m);
        assert_memory_equal(e, cases[i].out, n * sizeof *e);
    }
}

static sqlite3 *open_db(void)
{
    sqlite3 *db;
    assert_int_equal(sqlite3_open(":memory:", &db), SQLITE_OK);
    assert_int_equal(sqlite3_exec(db,
                                  "CREATE TABLE run_maps (run INTEGER NOT NULL, kind INTEGER NOT "
                                  "NULL, seq INTEGER NOT NULL, data BLOB NOT NULL, PRIMARY KEY "
                                  "(run, kind, seq)); CREATE TABLE runs (id "
                                  "INTEGER PRIMARY KEY); INSERT INTO runs VALUES (1), (2), (3);",
                                  NULL, NULL, NULL),
                     SQLITE_OK);
    return db;
}

static void test_sql_tables(void **state)
{
    (void)state;
    sqlite3 *db = open_db();
    size_t n = 2 * HS_MAPS_CHUNK + 10;
    hs_maps_entry *x = make_entries(n, 1);
    /* run 1: three chunks; run 3: one, whose last entry a later chunk replaces */
    assert_int_equal(hs_maps_append(db, 1, HS_MAPS_STACKS, x, n), 0);
    assert_int_equal(tk_qh(db, "SELECT count(*) FROM run_maps WHERE run = 1"), 3);
    hs_maps_entry small[] = {{9, 90}, {4, 40}, {6, 60}};
    assert_int_equal(hs_maps_append(db, 3, HS_MAPS_STACKS, small, 3), 0);
    hs_maps_entry later = {9, 91};
    assert_int_equal(hs_maps_append(db, 3, HS_MAPS_STACKS, &later, 1), 0);
    assert_int_equal(hs_maps_append(db, 3, HS_MAPS_PCS, small, 3), 0);

    assert_int_equal(tk_qh(db, "SELECT count(*) FROM run_stacks WHERE run = 1"), (int64_t)n);
    assert_int_equal(tk_qh(db, "SELECT count(*) FROM run_stacks"), (int64_t)n + 3);
    assert_int_equal(tk_qh(db, "SELECT count(*) FROM run_pcs"), 3);
    int64_t sum = 0;
    for (size_t i = 0; i < n; i++) sum += x[i].key * 3 + (x[i].value & 0xffff);
    assert_int_equal(
        tk_qh(db, "SELECT sum(stack_id * 3 + (trace & 65535)) FROM run_stacks WHERE run = 1"), sum);
    char sql[200];
    size_t k = HS_MAPS_CHUNK + 7; /* by run and key, in the second chunk */
    snprintf(sql, sizeof sql, "SELECT trace FROM run_stacks WHERE run = 1 AND stack_id = %lld",
             (long long)x[k].key);
    assert_int_equal(tk_qh(db, "%s", sql), x[k].value);
    assert_int_equal(tk_qh(db, "SELECT count(*) FROM run_stacks WHERE run = 1 AND stack_id = 0"),
                     0);
    assert_int_equal(tk_qh(db, "SELECT trace FROM run_stacks WHERE run = 3 AND stack_id = 9"), 91);
    assert_int_equal(tk_qh(db, "SELECT count(*) FROM run_stacks WHERE stack_id = 4"), 2);
    assert_int_equal(tk_qh(db, "SELECT group_concat(stack_id, '') FROM run_stacks WHERE run = 3"),
                     469);
    assert_int_equal(tk_qh(db, "SELECT count(*) FROM run_stacks WHERE run = 2"), 0);
    /* a join on run, each run asked for once per row of runs */
    assert_int_equal(tk_qh(db, "SELECT count(*) FROM runs r JOIN run_stacks s ON s.run = r.id"),
                     (int64_t)n + 3);
    assert_int_equal(tk_qh(db, "SELECT sum(s.trace) FROM runs r JOIN run_stacks s ON s.run = r.id "
                               "WHERE r.id = 3"),
                     40 + 60 + 91);
    /* the plan of a lookup by run is the virtual table's, not a scan */
    sqlite3_stmt *st;
    assert_int_equal(sqlite3_prepare_v2(db,
                                        "EXPLAIN QUERY PLAN SELECT * FROM runs r JOIN run_pcs p "
                                        "ON p.run = r.id",
                                        -1, &st, NULL),
                     SQLITE_OK);
    int by_run = 0;
    while (sqlite3_step(st) == SQLITE_ROW)
        if (strstr((const char *)sqlite3_column_text(st, 3), "VIRTUAL TABLE INDEX 1:")) by_run = 1;
    sqlite3_finalize(st);
    assert_true(by_run);

    /* inserts: a new key; a repeated one refused, ignored or replaced */
    assert_int_equal(sqlite3_exec(db, "INSERT INTO run_pcs VALUES (3, 5, 50)", NULL, NULL, NULL),
                     SQLITE_OK);
    assert_int_equal(sqlite3_exec(db, "INSERT INTO run_pcs VALUES (3, 5, 51)", NULL, NULL, NULL),
                     SQLITE_CONSTRAINT);
    assert_int_equal(
        sqlite3_exec(db, "INSERT OR IGNORE INTO run_pcs VALUES (3, 5, 52)", NULL, NULL, NULL),
        SQLITE_OK);
    assert_int_equal(tk_qh(db, "SELECT frame FROM run_pcs WHERE run = 3 AND pc = 5"), 50);
    assert_int_equal(
        sqlite3_exec(db, "INSERT OR REPLACE INTO run_pcs VALUES (3, 5, 53)", NULL, NULL, NULL),
        SQLITE_OK);
    assert_int_equal(tk_qh(db, "SELECT frame FROM run_pcs WHERE run = 3 AND pc = 5"), 53);
    assert_int_equal(tk_qh(db, "SELECT count(*) FROM run_pcs WHERE run = 3"), 4);
    assert_int_equal(tk_qh(db, "SELECT count(*) FROM run_maps WHERE run = 3 AND kind = 0"), 1);
    assert_int_not_equal(sqlite3_exec(db, "DELETE FROM run_pcs", NULL, NULL, NULL), SQLITE_OK);
    assert_int_not_equal(
        sqlite3_exec(db, "INSERT INTO run_pcs VALUES (3, NULL, 1)", NULL, NULL, NULL), SQLITE_OK);
    /* C readers see the same */
    hs_maps_entry *e;
    size_t m;
    assert_int_equal(hs_maps_read(db, 1, HS_MAPS_STACKS, &e, &m), 0);
    assert_int_equal(m, n);
    assert_memory_equal(e, x, n * sizeof *x);
    free(e);
    sqlite3_close(db);
    free(x);
}

static void test_migrate(void **state)
{
    (void)state;
    sqlite3 *db = open_db();
    assert_int_equal(sqlite3_exec(db,
                                  "DROP TABLE run_maps; CREATE TABLE run_pcs (run INTEGER NOT "
                                  "NULL, pc INTEGER NOT NULL, frame INTEGER NOT NULL, PRIMARY KEY "
                                  "(run, pc)) WITHOUT ROWID; CREATE TABLE run_stacks (run INTEGER "
                                  "NOT NULL, stack_id INTEGER NOT NULL, trace INTEGER NOT NULL, "
                                  "PRIMARY KEY (run, stack_id)) WITHOUT ROWID;",
                                  NULL, NULL, NULL),
                     SQLITE_OK);
    size_t n = HS_MAPS_CHUNK + 123;
    hs_maps_entry *x = make_entries(n, -50);
    sqlite3_stmt *ins[2];
    assert_int_equal(
        sqlite3_prepare_v2(db, "INSERT INTO run_pcs VALUES (?1, ?2, ?3)", -1, &ins[0], NULL),
        SQLITE_OK);
    assert_int_equal(
        sqlite3_prepare_v2(db, "INSERT INTO run_stacks VALUES (?1, ?2, ?3)", -1, &ins[1], NULL),
        SQLITE_OK);
    for (int run = 1; run <= 3; run++)
        for (size_t i = 0; i < (run == 2 ? 5 : n); i++) {
            sqlite3_stmt *st = ins[i % 2 && run == 3];
            sqlite3_bind_int(st, 1, run);
            sqlite3_bind_int64(st, 2, x[i].key);
            sqlite3_bind_int64(st, 3, x[i].value);
            assert_int_equal(sqlite3_step(st), SQLITE_DONE);
            sqlite3_reset(st);
        }
    sqlite3_finalize(ins[0]);
    sqlite3_finalize(ins[1]);
    assert_int_equal(hs_maps_in_chunks(db), 0);
    hs_maps_entry *e;
    size_t m;
    assert_int_equal(hs_maps_read(db, 2, HS_MAPS_PCS, &e, &m), 0); /* from the table */
    assert_int_equal(m, 5);
    assert_memory_equal(e, x, m * sizeof *e);
    free(e);
    assert_int_equal(sqlite3_exec(db,
                                  "CREATE TABLE run_maps (run INTEGER NOT NULL, kind INTEGER NOT "
                                  "NULL, seq INTEGER NOT NULL, data BLOB NOT NULL, PRIMARY KEY "
                                  "(run, kind, seq))",
                                  NULL, NULL, NULL),
                     SQLITE_OK);
    assert_int_equal(hs_maps_migrate(db), 0);
    assert_int_equal(hs_maps_in_chunks(db), 1);
    /* run 1's pcs in two chunks; run 2's, run 3's and run 3's stacks in one */
    assert_int_equal(tk_qh(db, "SELECT count(*) FROM run_maps"), 2 + 1 + 1 + 1);
    assert_int_equal(tk_qh(db, "SELECT count(*) FROM sqlite_schema WHERE name IN ('run_pcs', "
                               "'run_stacks')"),
                     0);
    assert_int_equal(hs_maps_read(db, 1, HS_MAPS_PCS, &e, &m), 0);
    assert_int_equal(m, n);
    assert_memory_equal(e, x, n * sizeof *e);
    free(e);
    assert_int_equal(tk_qh(db, "SELECT count(*) FROM run_pcs"),
                     (int64_t)n + 5 + (int64_t)(n + 1) / 2);
    assert_int_equal(tk_qh(db, "SELECT count(*) FROM run_stacks WHERE run = 3"), (int64_t)n / 2);
    sqlite3_close(db);
    free(x);
}

int main(void)
{
    hs_schema_sql_auto();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_codec_roundtrip),
        cmocka_unit_test(test_settle),
        cmocka_unit_test(test_sql_tables),
        cmocka_unit_test(test_migrate),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
