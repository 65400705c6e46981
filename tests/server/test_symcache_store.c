/* test_symcache_store: the writer's side of the symbol cache
 * (hs_store_symcache_put into symbol_blocks, schema/hs_symcache.h) on a
 * real SQLite file. Answers that come in many puts, for more builds than
 * one put keeps open, fill each build's last block and then the next; an
 * offset put twice is stored once; a put rolled back leaves nothing; a
 * malformed list stores what came before it; and a store opened again
 * goes on in the last block. Every answer reads back as it was put. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <sqlite3.h>

#include "hs_buf.h"
#include "hs_error.h"
#include "hs_store.h"
#include "hs_symcache.h"
#include "hs_testkit.h"

#define BUILDS 12 /* more than a put keeps open */

static char db[700];

static void put_varint(hs_buf *b, uint64_t v)
{
    uint8_t x[HS_VARINT_MAX];
    hs_buf_put(b, x, hs_varint_encode(x, v));
}

static void put_str(hs_buf *b, const char *s, size_t n)
{
    put_varint(b, n);
    hs_buf_put(b, s, n);
}

static void bid_of(int build, char out[8])
{
    snprintf(out, 8, "bid-%03d", build);
}

/* The answer at offset off: 1 to 3 frames. */
static void entry(hs_buf *b, int build, uint64_t off)
{
    char bid[8], fn[64];
    bid_of(build, bid);
    put_str(b, bid, 7);
    put_varint(b, off);
    int n = 1 + (int)(off % 3);
    put_varint(b, (uint64_t)n);
    for (int k = 0; k < n; k++) {
        int len = snprintf(fn, sizeof fn, "f%d_%llu", k, (unsigned long long)(off / 7));
        put_str(b, fn, (size_t)len);
        put_str(b, "/src/module/file.c", 18);
        put_varint(b, off % 1000 + (uint64_t)k);
    }
}

static void check(hs_symcache_rd *r, int build, uint64_t off)
{
    char bid[8], fn[64];
    bid_of(build, bid);
    hs_symcache_frame got[HS_SYMCACHE_FRAMES_MAX];
    int n = hs_symcache_rd_get(r, (const uint8_t *)bid, 7, off, got, HS_SYMCACHE_FRAMES_MAX);
    assert_int_equal(n, 1 + (int)(off % 3));
    for (int k = 0; k < n; k++) {
        int len = snprintf(fn, sizeof fn, "f%d_%llu", k, (unsigned long long)(off / 7));
        assert_int_equal(got[k].function.len, len);
        assert_memory_equal(got[k].function.ptr, fn, (size_t)len);
        assert_int_equal(got[k].file.len, 18);
        assert_int_equal(got[k].line, off % 1000 + (uint64_t)k);
    }
}

static hs_store *open_store(void)
{
    hs_store *s;
    char err[256];
    assert_int_equal(hs_store_open(&s, db, NULL, err, sizeof err), 0);
    return s;
}

static int64_t q(sqlite3 *d, const char *sql)
{
    sqlite3_stmt *st;
    assert_int_equal(sqlite3_prepare_v2(d, sql, -1, &st, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    int64_t v = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    return v;
}

static void check_stored(uint64_t n0);

/* Build 0 gets offsets [0, n0); the others 40 each; puts of 500 entries,
 * every build in each, every tenth entry put twice. */
static void test_puts(void **state)
{
    (void)state;
    char dir[600];
    tk_tmpdir(dir, sizeof dir, "symcache-store");
    snprintf(db, sizeof db, "%s/h.db", dir);
    const uint64_t n0 = HS_SYMCACHE_BLOCK_ENTRIES + 1500;
    hs_store *s = open_store();
    hs_buf b = {0};
    uint64_t next0 = 0;
    for (int put = 0; next0 < n0; put++) {
        hs_buf_reset(&b);
        for (int i = 0; i < 500 && next0 < n0; i++) {
            entry(&b, 0, next0 * 16);
            if (i % 10 == 0) entry(&b, 0, next0 * 16);
            next0++;
            if (put < 4 && i % 50 == 0) entry(&b, 1 + (put * 10 + i / 50) % (BUILDS - 1), 0);
            if (put < 4 && i % 50 == 0)
                entry(&b, 1 + (put * 10 + i / 50) % (BUILDS - 1), 16 * (uint64_t)(put + 1));
        }
        assert_false(b.oom);
        assert_int_equal(hs_store_begin(s), 0);
        assert_int_equal(hs_store_symcache_put(s, (const uint8_t *)b.p, b.n), 0);
        assert_int_equal(hs_store_commit(s), 0);
    }
    /* rolled back: not stored */
    hs_buf_reset(&b);
    entry(&b, 0, 1);
    assert_int_equal(hs_store_begin(s), 0);
    assert_int_equal(hs_store_symcache_put(s, (const uint8_t *)b.p, b.n), 0);
    hs_store_rollback(s);
    hs_store_free(s);

    /* again, after the store was opened again: into the same last block;
     * a malformed entry after the good ones */
    s = open_store();
    hs_buf_reset(&b);
    entry(&b, 0, n0 * 16);
    entry(&b, 2, 1000);
    hs_buf_put(&b,
               "\x07"
               "bid-000\x05\x02\x01",
               11); /* cut short */
    assert_int_equal(hs_store_begin(s), 0);
    assert_int_equal(hs_store_symcache_put(s, (const uint8_t *)b.p, b.n), HS_EPROTO);
    assert_int_equal(hs_store_commit(s), 0);
    hs_store_free(s);
    hs_buf_free(&b);
    check_stored(n0);
}

/* What test_puts stored, n0 offsets of build 0 and one more, read back. */
static void check_stored(uint64_t n0)
{
    sqlite3 *d;
    assert_int_equal(sqlite3_open_v2(db, &d, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    /* build 0: a full block and the one after it */
    assert_int_equal(q(d, "SELECT count(*) FROM symbol_blocks WHERE build_id = "
                          "CAST('bid-000' AS BLOB)"),
                     2);
    assert_int_equal(q(d, "SELECT count(DISTINCT build_id) FROM symbol_blocks"), BUILDS);
    assert_int_equal(q(d, "SELECT count(*) FROM symbol_blocks"), BUILDS + 1);
    hs_symcache_rd *r;
    assert_int_equal(hs_symcache_rd_open(d, HS_SYMCACHE_RD_BYTES, &r), 0);
    for (uint64_t i = 0; i <= n0; i++) check(r, 0, i * 16);
    hs_symcache_frame fr[1];
    assert_int_equal(hs_symcache_rd_get(r, (const uint8_t *)"bid-000", 7, 1, fr, 1), 0);
    for (int k = 1; k < BUILDS; k++) check(r, k, 0);
    check(r, 2, 1000);
    /* the offsets once each, in two blocks */
    hs_symcache_block x = {0};
    sqlite3_stmt *st;
    assert_int_equal(sqlite3_prepare_v2(d,
                                        "SELECT data FROM symbol_blocks WHERE build_id = "
                                        "CAST('bid-000' AS BLOB) ORDER BY seq",
                                        -1, &st, NULL),
                     SQLITE_OK);
    size_t total = 0;
    while (sqlite3_step(st) == SQLITE_ROW) {
        hs_symcache_clear(&x);
        assert_int_equal(
            hs_symcache_decode(&x, sqlite3_column_blob(st, 0), (size_t)sqlite3_column_bytes(st, 0)),
            0);
        total += x.n;
    }
    sqlite3_finalize(st);
    assert_int_equal(total, n0 + 1);
    hs_symcache_free(&x);
    hs_symcache_rd_free(r);
    sqlite3_close(d);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_puts),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
