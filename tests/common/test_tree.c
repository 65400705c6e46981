/* test_tree: the stored stack tree (schema/hs_tree.c). Blocks of chains,
 * branches, gaps in the ids and values that fit no small varint come back
 * as they went in; every truncation of a block and a changed byte in its
 * header are refused, not misread; the `traces` table SQL sees reads the
 * blocks by id, by range and whole, and adds nodes only above the last;
 * migration 11's move of a table of schema 1 keeps every node. */
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
#include "hs_tree.h"

/* n nodes: chains of 5 hanging off earlier nodes, ids from first with a
 * gap every 1000, frames up to 2^40. */
static hs_tree_node *make_nodes(size_t n, int64_t first)
{
    hs_tree_node *x = malloc(n * sizeof *x);
    assert_non_null(x);
    for (size_t i = 0; i < n; i++) {
        x[i].id = (i ? x[i - 1].id + 1 + (i % 1000 == 0 ? 17 : 0) : first);
        int chained = i % 5 != 0;
        size_t p = chained ? i - 1 : (i * 7919) % (i ? i : 1);
        x[i].parent = i == 0 || (!chained && i % 3 == 0) ? 0 : x[p].id;
        x[i].depth = x[i].parent ? x[chained ? i - 1 : p].depth + 1 : 1;
        x[i].frame = (int64_t)((i * 2654435761u) % 5000) + 1 + (i % 97 == 0 ? (1ll << 40) : 0);
    }
    return x;
}

static void roundtrip(const hs_tree_node *x, size_t n)
{
    hs_buf b = {0};
    assert_int_equal(hs_tree_encode(x, n, &b), 0);
    hs_tree_node *y;
    size_t m;
    assert_int_equal(hs_tree_decode(b.p, b.n, &y, &m), 0);
    assert_int_equal(m, n);
    assert_memory_equal(x, y, n * sizeof *x);
    free(y);
    /* every truncation is refused */
    for (size_t cut = 0; cut < b.n; cut += 1 + cut / 8)
        assert_int_equal(hs_tree_decode(b.p, cut, &y, &m), HS_ECORRUPT);
    /* a header that promises another count or version */
    b.p[0] ^= 1;
    assert_int_equal(hs_tree_decode(b.p, b.n, &y, &m), HS_ECORRUPT);
    b.p[0] ^= 1;
    b.p[1] ^= 2;
    assert_int_equal(hs_tree_decode(b.p, b.n, &y, &m), HS_ECORRUPT);
    hs_buf_free(&b);
}

static void test_codec_roundtrip(void **state)
{
    (void)state;
    hs_tree_node odd[] = {{5, -1, -1, 1}, {6, 5, 1ll << 50, 2}, {1ll << 33, 0, 3, 1}};
    roundtrip(odd, 3);
    hs_tree_node *x = make_nodes(HS_TREE_BLOCK_NODES, 1);
    roundtrip(x, 1);
    roundtrip(x, 100);
    roundtrip(x, HS_TREE_BLOCK_NODES);
    /* a chain costs about its frames: well under 2 bytes a node here */
    hs_buf b = {0};
    for (size_t i = 0; i < HS_TREE_BLOCK_NODES; i++)
        x[i] = (hs_tree_node){(int64_t)i + 1, (int64_t)i, (int64_t)(i % 300) + 1, (int64_t)i + 1};
    assert_int_equal(hs_tree_encode(x, HS_TREE_BLOCK_NODES, &b), 0);
    assert_true(b.n < 2 * HS_TREE_BLOCK_NODES);
    hs_buf_free(&b);
    free(x);
}

static sqlite3 *open_db(void)
{
    sqlite3 *db;
    assert_int_equal(sqlite3_open(":memory:", &db), SQLITE_OK);
    assert_int_equal(sqlite3_exec(db,
                                  "CREATE TABLE trace_blocks (first INTEGER PRIMARY KEY, last "
                                  "INTEGER NOT NULL, data BLOB NOT NULL)",
                                  NULL, NULL, NULL),
                     SQLITE_OK);
    return db;
}

static void test_sql_table(void **state)
{
    (void)state;
    sqlite3 *db = open_db();
    size_t n = 3 * HS_TREE_BLOCK_NODES + 10;
    hs_tree_node *x = make_nodes(n, 1);
    for (size_t i = 0; i < n; i += HS_TREE_BLOCK_NODES)
        assert_int_equal(
            hs_tree_put_block(db, x + i, n - i < HS_TREE_BLOCK_NODES ? n - i : HS_TREE_BLOCK_NODES),
            0);
    assert_int_equal(tk_qh(db, "SELECT count(*) FROM traces"), (int64_t)n);
    int64_t sum = 0;
    for (size_t i = 0; i < n; i++) sum += x[i].parent * 3 + x[i].frame * 5 + x[i].depth;
    assert_int_equal(tk_qh(db, "SELECT sum(parent * 3 + frame * 5 + depth) FROM traces"), sum);
    char sql[200];
    size_t k = HS_TREE_BLOCK_NODES + 5; /* by id, in the second block */
    snprintf(sql, sizeof sql, "SELECT frame FROM traces WHERE id = %lld", (long long)x[k].id);
    assert_int_equal(tk_qh(db, "%s", sql), x[k].frame);
    snprintf(sql, sizeof sql, "SELECT count(*) FROM traces WHERE id > %lld AND id <= %lld",
             (long long)x[10].id, (long long)x[2 * HS_TREE_BLOCK_NODES + 10].id);
    assert_int_equal(tk_qh(db, "%s", sql), 2 * HS_TREE_BLOCK_NODES);
    assert_int_equal(tk_qh(db, "SELECT count(*) FROM traces WHERE id = 0"), 0);
    /* a walk to the root, as queries do it */
    snprintf(sql, sizeof sql,
             "WITH RECURSIVE up(id) AS (SELECT %lld UNION ALL SELECT t.parent FROM up JOIN "
             "traces t ON t.id = up.id WHERE t.parent <> 0) SELECT count(*) FROM up",
             (long long)x[n - 1].id);
    assert_int_equal(tk_qh(db, "%s", sql), x[n - 1].depth);
    /* added only above the last id; never changed */
    assert_int_not_equal(
        sqlite3_exec(db, "INSERT INTO traces VALUES (3, 0, 1, 1)", NULL, NULL, NULL), SQLITE_OK);
    assert_int_not_equal(sqlite3_exec(db, "DELETE FROM traces", NULL, NULL, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_exec(db, "INSERT INTO traces (parent, frame, depth) VALUES (0, 9, 1)",
                                  NULL, NULL, NULL),
                     SQLITE_OK);
    snprintf(sql, sizeof sql, "SELECT frame FROM traces WHERE id = %lld",
             (long long)x[n - 1].id + 1);
    assert_int_equal(tk_qh(db, "%s", sql), 9);
    sqlite3_close(db);
    free(x);
}

static void test_migrate(void **state)
{
    (void)state;
    sqlite3 *db = open_db();
    assert_int_equal(sqlite3_exec(db,
                                  "CREATE TABLE traces (id INTEGER PRIMARY KEY, parent INTEGER "
                                  "NOT NULL, frame INTEGER NOT NULL, depth INTEGER NOT NULL, "
                                  "UNIQUE (parent, frame))",
                                  NULL, NULL, NULL),
                     SQLITE_OK);
    size_t n = HS_TREE_BLOCK_NODES + 123;
    hs_tree_node *x = make_nodes(n, 1);
    sqlite3_stmt *ins;
    assert_int_equal(
        sqlite3_prepare_v2(db, "INSERT INTO traces VALUES (?1, ?2, ?3, ?4)", -1, &ins, NULL),
        SQLITE_OK);
    for (size_t i = 0; i < n; i++) {
        sqlite3_bind_int64(ins, 1, x[i].id);
        sqlite3_bind_int64(ins, 2, x[i].parent);
        sqlite3_bind_int64(ins, 3, x[i].frame);
        sqlite3_bind_int64(ins, 4, x[i].depth);
        assert_int_equal(sqlite3_step(ins), SQLITE_DONE);
        sqlite3_reset(ins);
    }
    sqlite3_finalize(ins);
    assert_int_equal(hs_tree_in_blocks(db), 1);
    assert_int_equal(hs_tree_migrate(db), 0);
    assert_int_equal(tk_qh(db, "SELECT count(*) FROM trace_blocks"), 2);
    hs_tree_rd *rd;
    assert_int_equal(hs_tree_rd_open(db, &rd), 0);
    for (size_t i = 0; i < n; i++) {
        hs_tree_node y;
        assert_int_equal(hs_tree_rd_node(rd, x[i].id, &y), 1);
        assert_memory_equal(&y, &x[i], sizeof y);
    }
    hs_tree_node y;
    assert_int_equal(hs_tree_rd_node(rd, x[n - 1].id + 1, &y), 0);
    hs_tree_rd_free(rd);
    sqlite3_close(db);
    free(x);
}

int main(void)
{
    hs_schema_sql_auto();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_codec_roundtrip),
        cmocka_unit_test(test_sql_table),
        cmocka_unit_test(test_migrate),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
