/* test_store_nodes: the trace ids of the writer's tree (hs_store.tree,
 * store_tree.c) are the ids of the prefix tree in the database. Runs with
 * overlapping stacks are stored with blocks of the usual size, with blocks
 * so small that they fill up all the time, and with a restart of the store
 * (the index read again from the blocks) between runs: traces and
 * run_stacks must come out the same each time, and every run's trace must
 * spell its stack. A rolled back transaction gives its node ids to other
 * nodes: a writer that kept them would name the wrong trace. Ids past 2^32
 * do not fit the index's key and must be right as well. */
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
#include "hs_proto.h"
#include "hs_testkit.h"
#include "store_int.h"

#define NPCS      48  /* pcs 1..NPCS, each its own frame */
#define PER_RUN   240 /* stacks a run defines */
#define MAX_DEPTH 40
#define BIG_ID    ((1ll << 32) + 7)

/* Stack content k, leaf first: three fixed outermost frames (every stack
 * shares them), then frames picked by k; contents close in k share more. */
static uint32_t content(uint32_t k, uint64_t *pcs)
{
    uint32_t x = k / 4 * 2654435761u + 1, depth = 3 + (k * 7 + k / 3) % (MAX_DEPTH - 3);
    for (uint32_t d = 0; d < depth; d++) {
        if (d >= 3) x = x * 1103515245u + 12345u + (d > depth / 2 ? k : 0);
        pcs[depth - 1 - d] = d < 3 ? d + 1 : 4 + (x >> 16) % (NPCS - 3);
    }
    return depth;
}

static hs_str str(const char *s)
{
    return (hs_str){s, strlen(s)};
}

static hs_run *open_run(hs_store *s, uint8_t tag)
{
    hs_hello h;
    memset(&h, 0, sizeof h);
    memset(h.run_id, tag, 16);
    h.pid = 42;
    h.ppid = 1;
    h.start_unix_ns = 1700000000000000000ull;
    h.sample_bytes = 1;
    h.max_depth = 64;
    h.rss_interval_ms = 100;
    h.program = str("/bin/prog");
    h.hostname = str("host");
    h.collector_version = str("test");
    hs_run *r;
    char err[256];
    assert_int_equal(hs_store_run_open(s, &r, &h, err, sizeof err), 0);
    return r;
}

static void apply(hs_store *s, hs_run *r, uint64_t seq, int type, tk_buf *b, hs_wr *wr)
{
    tk_buf_commit(b, wr);
    char err[256] = "";
    int rc = hs_store_run_frame(s, r, seq, type, b->p, b->len, err, sizeof err);
    if (rc) fail_msg("frame %d: %s: %s", type, hs_strerror(rc), err);
    b->len = 0;
}

/* SYMBOLS (seq 0) for pcs 1..NPCS, then STACKS of contents first..first+n-1
 * as stack ids 1..n, in frames of 50 (seq 1…). */
static void define(hs_store *s, hs_run *r, uint32_t first, uint32_t n)
{
    tk_buf b = {0};
    hs_wr wr = tk_buf_wr(&b, NPCS * 64);
    for (uint64_t pc = 1; pc <= NPCS; pc++) {
        char fn[32];
        snprintf(fn, sizeof fn, "fn%llu", (unsigned long long)pc);
        hs_symbol sym = {.pc = pc, .function = str(fn), .file = str("f.c"), .line = pc};
        hs_symbol_put(&wr, &sym);
    }
    apply(s, r, 0, HS_FRAME_SYMBOLS, &b, &wr);
    uint64_t seq = 1, pcs[MAX_DEPTH];
    for (uint32_t i = 0; i < n; i += 50) {
        wr = tk_buf_wr(&b, 50 * (MAX_DEPTH + 4) * 10);
        for (uint32_t j = i; j < n && j < i + 50; j++)
            hs_stack_put(&wr, j + 1, pcs, content(first + j, pcs));
        apply(s, r, seq++, HS_FRAME_STACKS, &b, &wr);
    }
    tk_buf_free(&b);
}

static hs_store *open_store(const char *db, uint32_t block_max)
{
    hs_store *s;
    char err[256];
    assert_int_equal(hs_store_open(&s, db, NULL, err, sizeof err), 0);
    if (block_max) s->tree.block_max = block_max;
    return s;
}

/* Three runs, contents [0, 240), [120, 360), [60, 300), one transaction
 * each; with restart, the store is closed and opened between them. */
static void store_runs(const char *db, uint32_t block_max, int restart, int64_t first_id)
{
    static const uint32_t firsts[] = {0, 120, 60};
    hs_store *s = open_store(db, block_max);
    if (first_id) { /* a node no stack has, whose parent and frame fit no key */
        hs_tree_node odd = {first_id - 1, -1, -1, 1};
        assert_int_equal(hs_tree_put_block(s->db, &odd, 1), 0);
    }
    for (uint32_t i = 0; i < HS_COUNTOF(firsts); i++) {
        if (restart && i) {
            hs_store_free(s);
            s = open_store(db, block_max);
        }
        assert_int_equal(hs_store_begin(s), 0);
        define(s, open_run(s, (uint8_t)(0x10 + i)), firsts[i], PER_RUN);
        assert_int_equal(hs_store_commit(s), 0);
        assert_true(s->tree.nopen <= s->tree.block_max);
    }
    hs_store_free(s);
}

/* Every stack of run `tag`, contents first…, walked from its trace to the
 * root through traces, is its content; the depths count from the root. */
static void check_run(sqlite3 *db, uint8_t tag, uint32_t first, uint32_t n)
{
    sqlite3_stmt *tr, *node, *frame;
    assert_int_equal(sqlite3_prepare_v2(db,
                                        "SELECT trace FROM run_stacks JOIN runs ON runs.id = run"
                                        " WHERE uuid = ?1 AND stack_id = ?2",
                                        -1, &tr, NULL),
                     SQLITE_OK);
    assert_int_equal(sqlite3_prepare_v2(db, "SELECT parent, frame, depth FROM traces WHERE id = ?1",
                                        -1, &node, NULL),
                     SQLITE_OK);
    assert_int_equal(
        sqlite3_prepare_v2(db, "SELECT id FROM frames WHERE function = ?1", -1, &frame, NULL),
        SQLITE_OK);
    uint8_t uuid[16];
    memset(uuid, tag, 16);
    for (uint32_t j = 0; j < n; j++) {
        uint64_t pcs[MAX_DEPTH];
        uint32_t depth = content(first + j, pcs);
        sqlite3_bind_blob(tr, 1, uuid, 16, SQLITE_STATIC);
        sqlite3_bind_int64(tr, 2, j + 1);
        assert_int_equal(sqlite3_step(tr), SQLITE_ROW);
        int64_t id = sqlite3_column_int64(tr, 0);
        sqlite3_reset(tr);
        for (uint32_t i = 0; i < depth; i++) {
            char fn[32];
            snprintf(fn, sizeof fn, "fn%llu", (unsigned long long)pcs[i]);
            sqlite3_bind_text(frame, 1, fn, -1, SQLITE_TRANSIENT);
            assert_int_equal(sqlite3_step(frame), SQLITE_ROW);
            int64_t want = sqlite3_column_int64(frame, 0);
            sqlite3_reset(frame);
            sqlite3_bind_int64(node, 1, id);
            assert_int_equal(sqlite3_step(node), SQLITE_ROW);
            if (sqlite3_column_int64(node, 1) != want ||
                sqlite3_column_int64(node, 2) != (int64_t)(depth - i))
                fail_msg("run %02x stack %u: frame %u of trace %lld is wrong", tag, j + 1, i,
                         (long long)id);
            id = sqlite3_column_int64(node, 0);
            sqlite3_reset(node);
        }
        assert_int_equal(id, 0);
    }
    sqlite3_finalize(tr);
    sqlite3_finalize(node);
    sqlite3_finalize(frame);
}

/* The rows of traces and run_stacks, as text. */
static char *dump(const char *path)
{
    sqlite3 *db;
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    assert_int_equal(hs_tree_sql_register(db), SQLITE_OK);
    char *out = sqlite3_mprintf("");
    sqlite3_stmt *st;
    assert_int_equal(sqlite3_prepare_v2(db,
                                        "SELECT id, parent, frame, depth FROM traces UNION ALL"
                                        " SELECT run, stack_id, trace, -1 FROM run_stacks",
                                        -1, &st, NULL),
                     SQLITE_OK);
    while (sqlite3_step(st) == SQLITE_ROW) {
        char *more = sqlite3_mprintf("%s%lld %lld %lld %d\n", out, sqlite3_column_int64(st, 0),
                                     sqlite3_column_int64(st, 1), sqlite3_column_int64(st, 2),
                                     sqlite3_column_int(st, 3));
        sqlite3_free(out);
        out = more;
    }
    sqlite3_finalize(st);
    sqlite3_close(db);
    return out;
}

static void check_runs(const char *path)
{
    sqlite3 *db;
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    assert_int_equal(hs_tree_sql_register(db), SQLITE_OK);
    check_run(db, 0x10, 0, PER_RUN);
    check_run(db, 0x11, 120, PER_RUN);
    check_run(db, 0x12, 60, PER_RUN);
    sqlite3_close(db);
}

static void test_same_ids_at_any_bound(void **state)
{
    (void)state;
    static const struct {
        uint32_t block_max;
        int restart;
    } cases[] = {
        {0, 0}, /* HS_TREE_BLOCK_NODES */
        {0, 1}, {7, 0}, {7, 1}, {1, 0}, {1000, 1},
    };
    char dir[600], db[700];
    tk_tmpdir(dir, sizeof dir, "store-nodes");
    char *want = NULL;
    for (size_t i = 0; i < HS_COUNTOF(cases); i++) {
        snprintf(db, sizeof db, "%s/case%zu.db", dir, i);
        store_runs(db, cases[i].block_max, cases[i].restart, 0);
        check_runs(db);
        char *got = dump(db);
        if (!want)
            want = got;
        else if (strcmp(want, got))
            fail_msg("case %zu (block %u, restart %d): other rows", i, cases[i].block_max,
                     cases[i].restart);
        if (got != want) sqlite3_free(got);
    }
    sqlite3_free(want);
}

static void test_ids_past_2_32(void **state)
{
    (void)state;
    char dir[600], db[700];
    tk_tmpdir(dir, sizeof dir, "store-nodes-big");
    snprintf(db, sizeof db, "%s/hs.db", dir);
    store_runs(db, 0, 1, BIG_ID);
    check_runs(db);
}

/* Run A's stacks are rolled back, run B stores others (taking A's ids),
 * then A's again: they must get new nodes, not the ids the cache saw. */
static void test_rollback_forgets(void **state)
{
    (void)state;
    char dir[600], db[700];
    tk_tmpdir(dir, sizeof dir, "store-nodes-rb");
    snprintf(db, sizeof db, "%s/hs.db", dir);
    hs_store *s = open_store(db, 0);
    assert_int_equal(hs_store_begin(s), 0);
    define(s, open_run(s, 0x20), 0, 60);
    assert_int_equal(hs_store_commit(s), 0);

    assert_int_equal(hs_store_begin(s), 0);
    define(s, open_run(s, 0x21), 1000, 60);
    assert_true(s->tree.index.count > 0);
    hs_store_rollback(s);
    assert_int_equal(s->tree.index.count, 0);

    assert_int_equal(hs_store_begin(s), 0);
    define(s, open_run(s, 0x22), 2000, 60);
    define(s, open_run(s, 0x23), 1000, 60);
    assert_int_equal(hs_store_commit(s), 0);
    hs_store_free(s);

    sqlite3 *h;
    assert_int_equal(sqlite3_open(db, &h), SQLITE_OK);
    assert_int_equal(hs_tree_sql_register(h), SQLITE_OK);
    check_run(h, 0x20, 0, 60);
    check_run(h, 0x22, 2000, 60);
    check_run(h, 0x23, 1000, 60);
    sqlite3_close(h);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_same_ids_at_any_bound),
        cmocka_unit_test(test_ids_past_2_32),
        cmocka_unit_test(test_rollback_forgets),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
