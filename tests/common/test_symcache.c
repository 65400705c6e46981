/* test_symcache: the stored symbol cache (schema/hs_symcache.c). Blocks of
 * inlined chains, shared and empty strings, offsets near 0 and 2^64 and
 * lines past 2^32 come back as they went in; every truncation of a block and
 * a changed byte in its header are refused, not misread, and leave the
 * block decoded into as it was; the reader loads a build's blocks when
 * first asked, keeps its own answers, and stays within its bound through
 * index lookups; migration 14 moves the rows of schema 7 into blocks (after
 * a build's blocks already there) and drops the table. */
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
#include "hs_symcache.h"

static hs_str S(const char *s)
{
    return (hs_str){s, strlen(s)};
}

/* Entry i of a made-up build: 1 to 4 frames from a few files and names,
 * sometimes no function at all; offsets step by varying amounts. */
static uint64_t offset_of(size_t i)
{
    return 0x1000 + i * 24 + (i % 7) * 3;
}

static int frames_of(size_t i, hs_symcache_frame *fr, char names[4][64])
{
    static const char *const files[] = {"/tmp/build-x/Modules/_bisectmodule.c",
                                        "/tmp/build-x/Objects/listobject.c",
                                        "/tmp/build-x/Include/internal/pycore_list.h", ""};
    int n = 1 + (int)(i % 4);
    for (int k = 0; k < n; k++) {
        snprintf(names[k], 64, "fn_%zu", (i * 7 + (size_t)k) % 300);
        fr[k].function = i % 11 == 0 && k == n - 1 ? S("") : S(names[k]);
        fr[k].file = S(files[(i + (size_t)k) % 4]);
        fr[k].line = (i % 13 == 0) ? (1ull << 40) + i : 10 + i % 2000;
    }
    return n;
}

static void fill(hs_symcache_block *b, size_t n, size_t from)
{
    for (size_t i = from; i < from + n; i++) {
        hs_symcache_frame fr[4];
        char names[4][64];
        int k = frames_of(i, fr, names);
        assert_int_equal(hs_symcache_add(b, offset_of(i), fr, k), 1);
        assert_int_equal(hs_symcache_add(b, offset_of(i), fr, k), 0); /* once an offset */
    }
}

static void check_entry(const hs_symcache_block *b, size_t i)
{
    hs_symcache_frame want[4], got[HS_SYMCACHE_FRAMES_MAX];
    char names[4][64];
    int n = frames_of(i, want, names);
    assert_int_equal(hs_symcache_get(b, offset_of(i), got, HS_SYMCACHE_FRAMES_MAX), n);
    for (int k = 0; k < n; k++) {
        assert_int_equal(got[k].function.len, want[k].function.len);
        assert_memory_equal(got[k].function.ptr, want[k].function.ptr, want[k].function.len);
        assert_int_equal(got[k].file.len, want[k].file.len);
        assert_memory_equal(got[k].file.ptr, want[k].file.ptr, want[k].file.len);
        assert_int_equal(got[k].line, want[k].line);
    }
}

static void test_codec_roundtrip(void **state)
{
    (void)state;
    hs_symcache_block a = {0}, b = {0};
    fill(&a, HS_SYMCACHE_BLOCK_ENTRIES, 0);
    hs_buf blob = {0};
    assert_int_equal(hs_symcache_encode(&a, &blob), 0);
    /* strings once a block, zstd over it: a few bytes an entry */
    assert_true(blob.n < HS_SYMCACHE_BLOCK_ENTRIES * 4);
    assert_int_equal(hs_symcache_decode(&b, blob.p, blob.n), 0);
    assert_int_equal(b.n, a.n);
    for (size_t i = 0; i < HS_SYMCACHE_BLOCK_ENTRIES; i++) check_entry(&b, i);
    hs_symcache_frame fr[1];
    assert_int_equal(hs_symcache_get(&b, offset_of(0) + 1, fr, 1), 0);
    assert_int_equal(hs_symcache_get(&b, offset_of(3), fr, 1), 1); /* at most max */

    /* every truncation is refused and leaves what was decoded into alone */
    hs_symcache_block c = {0};
    fill(&c, 5, 1000000);
    for (size_t cut = 0; cut < blob.n; cut += 1 + cut / 8) {
        assert_int_equal(hs_symcache_decode(&c, blob.p, cut), HS_ECORRUPT);
        assert_int_equal(c.n, 5);
    }
    /* a header that promises another version or counts */
    for (size_t at = 0; at < 4; at++) {
        blob.p[at] ^= 1;
        assert_int_equal(hs_symcache_decode(&c, blob.p, blob.n), HS_ECORRUPT);
        blob.p[at] ^= 1;
    }
    assert_int_equal(c.n, 5);
    for (size_t i = 1000000; i < 1000005; i++) check_entry(&c, i);
    /* decoded into a block with entries: those are kept, the rest added */
    assert_int_equal(hs_symcache_decode(&c, blob.p, blob.n), 0);
    assert_int_equal(c.n, 5 + HS_SYMCACHE_BLOCK_ENTRIES);
    check_entry(&c, 17);
    check_entry(&c, 1000004);
    hs_buf_free(&blob);
    hs_symcache_free(&a);
    hs_symcache_free(&b);
    hs_symcache_free(&c);
}

/* Offsets at the ends of the range, one frame, strings at their bounds. */
static void test_codec_edges(void **state)
{
    (void)state;
    static char fn[HS_FUNC_MAX], file[HS_STR_MAX];
    memset(fn, 'f', sizeof fn);
    memset(file, '/', sizeof file);
    hs_symcache_frame big = {{fn, sizeof fn}, {file, sizeof file}, UINT64_MAX};
    hs_symcache_frame none = {S(""), S(""), 0};
    hs_symcache_block a = {0}, b = {0};
    assert_int_equal(hs_symcache_add(&a, UINT64_MAX, &big, 1), 1);
    assert_int_equal(hs_symcache_add(&a, 0, &none, 1), 1);
    hs_symcache_frame chain[HS_SYMCACHE_FRAMES_MAX];
    for (int k = 0; k < HS_SYMCACHE_FRAMES_MAX; k++) chain[k] = big;
    assert_int_equal(hs_symcache_add(&a, 1, chain, HS_SYMCACHE_FRAMES_MAX), 1);
    assert_int_equal(hs_symcache_entry_bytes(chain, HS_SYMCACHE_FRAMES_MAX),
                     HS_SYMCACHE_FRAMES_MAX * (sizeof fn + sizeof file));
    assert_int_equal(hs_symcache_str_bytes(&a), sizeof fn + sizeof file); /* kept once */
    hs_buf blob = {0};
    assert_int_equal(hs_symcache_encode(&a, &blob), 0);
    assert_int_equal(hs_symcache_decode(&b, blob.p, blob.n), 0);
    hs_symcache_frame got[HS_SYMCACHE_FRAMES_MAX];
    assert_int_equal(hs_symcache_get(&b, UINT64_MAX, got, 4), 1);
    assert_int_equal(got[0].function.len, sizeof fn);
    assert_int_equal(got[0].file.len, sizeof file);
    assert_true(got[0].line == UINT64_MAX);
    assert_int_equal(hs_symcache_get(&b, 0, got, 4), 1);
    assert_int_equal(got[0].function.len + got[0].file.len + got[0].line, 0);
    assert_int_equal(hs_symcache_get(&b, 1, got, HS_SYMCACHE_FRAMES_MAX), HS_SYMCACHE_FRAMES_MAX);
    /* offsets are given back in the order added; stored by offset */
    assert_true(hs_symcache_offset_at(&b, 0) == 0 && hs_symcache_offset_at(&b, 2) == UINT64_MAX);
    hs_buf_free(&blob);
    /* stored as they are when zstd does not pay: one entry of short strings */
    hs_symcache_clear(&a);
    hs_symcache_clear(&b);
    hs_symcache_frame one = {S("f"), S("a.c"), 3};
    assert_int_equal(hs_symcache_add(&a, 9, &one, 1), 1);
    assert_int_equal(hs_symcache_encode(&a, &blob), 0);
    assert_int_equal(hs_symcache_decode(&b, blob.p, blob.n), 0);
    assert_int_equal(hs_symcache_get(&b, 9, got, 1), 1);
    assert_int_equal(got[0].line, 3);
    hs_buf_free(&blob);
    /* not a block */
    assert_int_equal(hs_symcache_decode(&b, "", 0), HS_ECORRUPT);
    assert_int_equal(hs_symcache_decode(&b, "\x02\x01\x01\x01\x00", 5), HS_ECORRUPT);
    hs_symcache_free(&a);
    hs_symcache_free(&b);
}

/* ---- the database ----------------------------------------------------------- */

static sqlite3 *new_db(void)
{
    sqlite3 *db;
    char err[256];
    assert_int_equal(sqlite3_open(":memory:", &db), SQLITE_OK);
    assert_int_equal(hs_schema_migrate(db, err, sizeof err), 0);
    return db;
}

static void put_block(sqlite3 *db, const char *bid, int64_t seq, const hs_symcache_block *b)
{
    hs_buf blob = {0};
    assert_int_equal(hs_symcache_encode(b, &blob), 0);
    sqlite3_stmt *st;
    assert_int_equal(sqlite3_prepare_v2(db,
                                        "INSERT INTO symbol_blocks (build_id, seq, data) VALUES "
                                        "(?1, ?2, ?3)",
                                        -1, &st, NULL),
                     SQLITE_OK);
    sqlite3_bind_blob(st, 1, bid, (int)strlen(bid), SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, seq);
    sqlite3_bind_blob(st, 3, blob.p, (int)blob.n, SQLITE_STATIC);
    assert_int_equal(sqlite3_step(st), SQLITE_DONE);
    sqlite3_finalize(st);
    hs_buf_free(&blob);
}

static int rd_get(hs_symcache_rd *r, const char *bid, uint64_t off)
{
    hs_symcache_frame fr[HS_SYMCACHE_FRAMES_MAX];
    return hs_symcache_rd_get(r, (const uint8_t *)bid, strlen(bid), off, fr,
                              HS_SYMCACHE_FRAMES_MAX);
}

static void test_reader(void **state)
{
    (void)state;
    sqlite3 *db = new_db();
    hs_symcache_block b = {0};
    fill(&b, 100, 0);
    put_block(db, "build-a", 0, &b);
    hs_symcache_clear(&b);
    fill(&b, 100, 100);
    put_block(db, "build-a", 1, &b);
    hs_symcache_clear(&b);
    fill(&b, 10, 0);
    put_block(db, "build-b", 0, &b);
    sqlite3_exec(db, "INSERT INTO symbol_blocks VALUES (CAST('build-b' AS BLOB), 1, x'01ff')", NULL,
                 NULL, NULL);
    hs_symcache_free(&b);

    hs_symcache_rd *r;
    assert_int_equal(hs_symcache_rd_open(db, HS_SYMCACHE_RD_BYTES, &r), 0);
    assert_int_equal(rd_get(r, "build-a", offset_of(150)), 1 + 150 % 4); /* its second block */
    assert_int_equal(rd_get(r, "build-a", 7), 0);
    assert_int_equal(rd_get(r, "build-b", offset_of(9)), 1 + 9 % 4); /* its bad block skipped */
    assert_int_equal(rd_get(r, "build-c", offset_of(9)), 0);
    size_t bytes;
    assert_int_equal(hs_symcache_rd_builds(r, &bytes), 3);
    /* a block stored now is not read again: the server's own answers come
     * through rd_add */
    hs_symcache_frame fr = {S("late"), S("late.c"), 5}, got[1];
    hs_symcache_block late = {0};
    assert_int_equal(hs_symcache_add(&late, 7, &fr, 1), 1);
    put_block(db, "build-c", 0, &late);
    hs_symcache_free(&late);
    assert_int_equal(rd_get(r, "build-c", 7), 0);
    hs_symcache_rd_add(r, (const uint8_t *)"build-c", 7, 7, &fr, 1);
    assert_int_equal(hs_symcache_rd_get(r, (const uint8_t *)"build-c", 7, 7, got, 1), 1);
    assert_memory_equal(got[0].function.ptr, "late", 4);
    /* an answer for a build not held is left to the database */
    hs_symcache_rd_add(r, (const uint8_t *)"build-d", 7, 7, &fr, 1);
    assert_int_equal(hs_symcache_rd_builds(r, NULL), 3);
    hs_symcache_rd_free(r);

    /* a bound of one byte: the build asked about is the one kept */
    assert_int_equal(hs_symcache_rd_open(db, 1, &r), 0);
    assert_int_equal(rd_get(r, "build-a", offset_of(3)), 1 + 3 % 4);
    assert_int_equal(rd_get(r, "build-b", offset_of(3)), 1 + 3 % 4);
    assert_int_equal(hs_symcache_rd_builds(r, NULL), 1);
    assert_int_equal(rd_get(r, "build-a", offset_of(199)), 1 + 199 % 4); /* read again */
    assert_int_equal(hs_symcache_rd_builds(r, &bytes), 1);
    assert_true(bytes > 0);
    hs_symcache_rd_free(r);

    /* a build's blocks are found through the primary key, not a scan */
    sqlite3_stmt *st;
    assert_int_equal(sqlite3_prepare_v2(db,
                                        "EXPLAIN QUERY PLAN SELECT data FROM symbol_blocks "
                                        "WHERE build_id = ?1 ORDER BY seq",
                                        -1, &st, NULL),
                     SQLITE_OK);
    while (sqlite3_step(st) == SQLITE_ROW) {
        const char *detail = (const char *)sqlite3_column_text(st, 3);
        assert_null(strstr(detail, "SCAN"));
        assert_null(strstr(detail, "TEMP B-TREE"));
    }
    sqlite3_finalize(st);
    sqlite3_close(db);
}

/* Migration 14 on a file of schema 13 that has rows in symbol_cache. */
static void test_migrate(void **state)
{
    (void)state;
    sqlite3 *db = new_db();
    const char *v7 = NULL;
    for (int i = 0; i < hs_migration_count; i++)
        if (hs_migrations[i].version == 7) v7 = hs_migrations[i].sql;
    assert_non_null(v7);
    assert_int_equal(sqlite3_exec(db, v7, NULL, NULL, NULL), SQLITE_OK);
    /* build-a: more offsets than a block holds, and a block already stored */
    hs_symcache_block b = {0};
    fill(&b, 3, 1000000);
    put_block(db, "build-a", 0, &b);
    hs_symcache_free(&b);
    sqlite3_stmt *st;
    assert_int_equal(sqlite3_prepare_v2(db,
                                        "INSERT INTO symbol_cache VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                                        -1, &st, NULL),
                     SQLITE_OK);
    const size_t na = HS_SYMCACHE_BLOCK_ENTRIES + 10;
    for (size_t i = 0; i < na + 20; i++) {
        hs_symcache_frame fr[4];
        char names[4][64];
        int n = frames_of(i, fr, names);
        for (int k = 0; k < n; k++) {
            sqlite3_bind_blob(st, 1, i < na ? "build-a" : "build-b", 7, SQLITE_STATIC);
            sqlite3_bind_int64(st, 2, (int64_t)offset_of(i));
            sqlite3_bind_int(st, 3, k);
            sqlite3_bind_text(st, 4, fr[k].function.ptr, (int)fr[k].function.len, SQLITE_STATIC);
            sqlite3_bind_text(st, 5, fr[k].file.ptr, (int)fr[k].file.len, SQLITE_STATIC);
            sqlite3_bind_int64(st, 6, (int64_t)fr[k].line);
            assert_int_equal(sqlite3_step(st), SQLITE_DONE);
            sqlite3_reset(st);
        }
    }
    sqlite3_finalize(st);
    /* rows no server wrote: no build id */
    sqlite3_exec(db, "INSERT INTO symbol_cache VALUES (x'', 5, 0, 'f', 'a.c', 1)", NULL, NULL,
                 NULL);
    char err[256];
    assert_int_equal(sqlite3_exec(db, "PRAGMA user_version = 13", NULL, NULL, NULL), SQLITE_OK);
    assert_int_equal(hs_schema_migrate(db, err, sizeof err), 0);
    assert_int_equal(tk_qh(db, "PRAGMA user_version"), hs_schema_version());
    assert_int_equal(tk_qh(db, "SELECT count(*) FROM sqlite_schema WHERE name = 'symbol_cache'"),
                     0);
    /* build-a: its block 0, then the moved rows in two */
    assert_int_equal(
        tk_qh(db, "SELECT count(*) FROM symbol_blocks WHERE build_id = CAST('build-a' AS BLOB)"),
        3);
    assert_int_equal(
        tk_qh(db, "SELECT max(seq) FROM symbol_blocks WHERE build_id = CAST('build-a' AS BLOB)"),
        2);
    assert_int_equal(
        tk_qh(db, "SELECT count(*) FROM symbol_blocks WHERE build_id = CAST('build-b' AS BLOB)"),
        1);
    hs_symcache_rd *r;
    assert_int_equal(hs_symcache_rd_open(db, HS_SYMCACHE_RD_BYTES, &r), 0);
    for (size_t i = 0; i < na + 20; i++) {
        hs_symcache_frame got[HS_SYMCACHE_FRAMES_MAX], want[4];
        char names[4][64];
        int n = frames_of(i, want, names);
        assert_int_equal(hs_symcache_rd_get(r, (const uint8_t *)(i < na ? "build-a" : "build-b"), 7,
                                            offset_of(i), got, HS_SYMCACHE_FRAMES_MAX),
                         n);
        assert_int_equal(got[n - 1].line, want[n - 1].line);
        assert_int_equal(got[0].file.len, want[0].file.len);
    }
    assert_int_equal(rd_get(r, "build-a", offset_of(1000002)), 1 + 1000002 % 4);
    hs_symcache_rd_free(r);
    sqlite3_close(db);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_codec_roundtrip),
        cmocka_unit_test(test_codec_edges),
        cmocka_unit_test(test_reader),
        cmocka_unit_test(test_migrate),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
