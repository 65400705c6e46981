/* hs_store_frames_name: frames rows stored unnamed get their names in place
 * (the writer's REFILL jobs, server/hs_refill.h), on a real SQLite file.
 * A row keeps its id; its key becomes the content key, or the content key
 * followed by its old key when another row holds it; a row named since, or
 * gone, is left alone; a malformed list keeps what came before it; a row
 * that a run of another build of the path came to use after the refill
 * looked (an open run, or one stored since) stays unnamed. */
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
#include "hs_store.h"
#include "hs_testkit.h"

typedef struct buf {
    uint8_t p[4096];
    size_t n;
} buf;

static void put_varint(buf *b, uint64_t v)
{
    b->n += hs_varint_encode(b->p + b->n, v);
}

static void put_entry(buf *b, uint64_t id, const char *fn, const char *file, uint64_t line)
{
    put_varint(b, id);
    put_varint(b, strlen(fn));
    memcpy(b->p + b->n, fn, strlen(fn));
    b->n += strlen(fn);
    put_varint(b, strlen(file));
    memcpy(b->p + b->n, file, strlen(file));
    b->n += strlen(file);
    put_varint(b, line);
}

static void exec(const char *db, const char *sql)
{
    sqlite3 *h;
    assert_int_equal(sqlite3_open(db, &h), SQLITE_OK);
    char *msg = NULL;
    int rc = sqlite3_exec(h, sql, NULL, NULL, &msg);
    if (rc) fprintf(stderr, "%s: %s\n", sql, msg);
    sqlite3_free(msg);
    sqlite3_close(h);
    assert_int_equal(rc, SQLITE_OK);
}

/* The key of frame id with \x1f shown as '|', into out. */
static void key_of(const char *db, int64_t id, char *out, size_t len)
{
    sqlite3 *h;
    sqlite3_stmt *st;
    out[0] = 0;
    assert_int_equal(sqlite3_open(db, &h), SQLITE_OK);
    assert_int_equal(sqlite3_prepare_v2(h,
                                        "SELECT replace(key, char(31), '|') || ' ' || function"
                                        " FROM frames WHERE id = ?1",
                                        -1, &st, NULL),
                     SQLITE_OK);
    sqlite3_bind_int64(st, 1, id);
    if (sqlite3_step(st) == SQLITE_ROW)
        snprintf(out, len, "%s", (const char *)sqlite3_column_text(st, 0));
    sqlite3_finalize(st);
    sqlite3_close(h);
}

static const struct {
    int64_t id;
    const char *key; /* after, '|' for \x1f, then the function */
} expect[] = {
    {1, "f|a.c|3 f"},           /* named under its content key */
    {2, "g|a.c|4|/bin/a|32 g"}, /* row 3 holds "g|a.c|4": a key of its own */
    {3, "g|a.c|4 g"},           /* named when stored: untouched */
    {4, "h|b.c|1 h"},           /* named since: left as it is */
    {5, "k|c.c|9 k"},           /* two rows of one content: the first plain */
    {6, "k|c.c|9|/bin/a|96 k"}, /* the second under a key of its own */
    {7, "|/bin/a|112 "},        /* after the malformed entry: not reached */
    {8, "|/bin/a|128 "},        /* an open run of another build uses it */
    {9, "|/bin/a|144 "},        /* a run stored since, of no build id, uses it */
    {10, "m|d.c|5 m"},          /* only ended runs seen before use it */
};

/* Run id of build bid (NULL: none) of /bin/a, state st, using frame. */
static void add_run(const char *db, int id, const char *bid, const char *st, int frame)
{
    char sql[1024];
    snprintf(sql, sizeof sql,
             "INSERT INTO runs (id, uuid, program, argv, host, pid, ppid, start_unix_ns,"
             " sample_bytes, max_depth, rss_interval_ms, granularity_ns, keyframe_every, state)"
             " VALUES (%d, randomblob(16), '/bin/a', '[]', 'h', 1, 0, 0, 1, 64, 0, 1000000000,"
             " 32, '%s');"
             "INSERT INTO mappings VALUES (%d, 0, 4096, 8192, 0, %s, '/bin/a');"
             "INSERT INTO run_pcs VALUES (%d, 4200, %d)",
             id, st, id, bid ? bid : "NULL", id, frame);
    exec(db, sql);
}

static void test_frames_name(void **state)
{
    (void)state;
    char dir[512], db[600], err[256];
    tk_tmpdir(dir, sizeof dir, "frames-name");
    snprintf(db, sizeof db, "%s/h.db", dir);
    hs_store *s;
    assert_int_equal(hs_store_open(&s, db, NULL, err, sizeof err), 0);
    hs_store_free(s);
    exec(db, "INSERT INTO frames (id, function, file, line, module, module_offset) VALUES"
             " (1, '', '', 0, '/bin/a', 16),"
             " (2, '', '', 0, '/bin/a', 32),"
             " (3, 'g', 'a.c', 4, '/bin/b', 8),"
             " (4, 'h', 'b.c', 1, '/bin/a', 64),"
             " (5, '', '', 0, '/bin/a', 80),"
             " (6, '', '', 0, '/bin/a', 96),"
             " (7, '', '', 0, '/bin/a', 112),"
             " (8, '', '', 0, '/bin/a', 128),"
             " (9, '', '', 0, '/bin/a', 144),"
             " (10, '', '', 0, '/bin/a', 160)");
    add_run(db, 1, "x'0102'", "ended", 10); /* seen by the refill: its own list */
    add_run(db, 2, "x'0102'", "open", 8);
    add_run(db, 3, NULL, "ended", 9);
    add_run(db, 4, "x'abcd'", "open", 1); /* the build being named */
    buf b = {.n = 0};
    put_varint(&b, 2); /* head: build id abcd, path, runs_seen 2 */
    memcpy(b.p + b.n, "\xab\xcd", 2);
    b.n += 2;
    put_varint(&b, 6);
    memcpy(b.p + b.n, "/bin/a", 6);
    b.n += 6;
    put_varint(&b, 2);
    put_entry(&b, 8, "i", "d.c", 3);
    put_entry(&b, 9, "j", "d.c", 4);
    put_entry(&b, 10, "m", "d.c", 5);
    put_entry(&b, 1, "f", "a.c", 3);
    put_entry(&b, 2, "g", "a.c", 4);
    put_entry(&b, 4, "other", "x.c", 2);
    put_entry(&b, 99, "gone", "x.c", 2);
    put_entry(&b, 5, "k", "c.c", 9);
    put_entry(&b, 6, "k", "c.c", 9);
    put_varint(&b, 7);
    put_varint(&b, 200); /* a function name longer than what is left */
    assert_int_equal(hs_store_open(&s, db, NULL, err, sizeof err), 0);
    uint64_t named = 0, renamed = 0;
    assert_int_equal(hs_store_begin(s), 0);
    assert_int_equal(hs_store_frames_name(s, b.p, b.n, &named, &renamed), HS_EPROTO);
    assert_int_equal(hs_store_commit(s), 0);
    hs_store_free(s);
    assert_int_equal(named, 5);
    assert_int_equal(renamed, 2);
    for (size_t i = 0; i < sizeof expect / sizeof expect[0]; i++) {
        char k[256];
        key_of(db, expect[i].id, k, sizeof k);
        assert_string_equal(k, expect[i].key);
    }
}

/* The text of one SQL value of db, into out. */
static void text_of(const char *db, const char *sql, char *out, size_t len)
{
    sqlite3 *h;
    sqlite3_stmt *st;
    out[0] = 0;
    assert_int_equal(sqlite3_open(db, &h), SQLITE_OK);
    assert_int_equal(sqlite3_prepare_v2(h, sql, -1, &st, NULL), SQLITE_OK);
    if (sqlite3_step(st) == SQLITE_ROW && sqlite3_column_text(st, 0))
        snprintf(out, len, "%s", (const char *)sqlite3_column_text(st, 0));
    sqlite3_finalize(st);
    sqlite3_close(h);
}

/* Migration 12 (012_frame_keys.sql): frames stored with their key in a
 * column keep the same key, computed, with only what follows the content
 * stored (alias); the writer finds them again by it. */
static void test_frames_migrate(void **state)
{
    (void)state;
    char dir[512], db[600], err[256], k[256];
    tk_tmpdir(dir, sizeof dir, "frames-migrate");
    snprintf(db, sizeof db, "%s/h.db", dir);
    hs_store *s;
    assert_int_equal(hs_store_open(&s, db, NULL, err, sizeof err), 0);
    hs_store_free(s);
    /* frames as schema 11 had them */
    exec(db, "DROP TABLE frames;"
             "CREATE TABLE frames (id INTEGER PRIMARY KEY, key TEXT NOT NULL UNIQUE,"
             " function TEXT NOT NULL, file TEXT NOT NULL, line INTEGER NOT NULL,"
             " module TEXT NOT NULL, module_offset INTEGER NOT NULL);"
             "CREATE INDEX frames_function ON frames(function);"
             "INSERT INTO frames VALUES"
             " (1, char(31) || '/bin/a' || char(31) || '16', '', '', 0, '/bin/a', 16),"
             " (2, 'f' || char(31) || 'a.c' || char(31) || '3', 'f', 'a.c', 3, '/bin/a', 32),"
             " (3, 'f' || char(31) || 'a.c' || char(31) || '3' || char(31) || '/bin/a' ||"
             "  char(31) || '48', 'f', 'a.c', 3, '/bin/a', 48),"
             " (4, 'odd', 'g', 'b.c', 7, '/bin/a', 64);"
             "PRAGMA user_version = 11");
    assert_int_equal(hs_store_open(&s, db, NULL, err, sizeof err), 0);
    hs_store_free(s);
    static const char *const keys[] = {"|/bin/a|16 ", "f|a.c|3 f", "f|a.c|3|/bin/a|48 f",
                                       "g|b.c|7\x1e"
                                       "odd g"};
    for (int i = 0; i < 4; i++) {
        key_of(db, i + 1, k, sizeof k);
        assert_string_equal(k, keys[i]);
    }
    text_of(db,
            "SELECT count(alias) || ' ' || replace(group_concat(alias), char(31), '|')"
            " FROM frames",
            k, sizeof k);
    assert_string_equal(k, "2 |/bin/a|48,\x1e"
                           "odd");
    text_of(db, "SELECT group_concat(name) FROM pragma_index_xinfo('frames_function') WHERE key", k,
            sizeof k);
    assert_string_equal(k, "function");
    text_of(db, "SELECT count(*) FROM pragma_index_xinfo('frames_function') WHERE key", k,
            sizeof k);
    assert_string_equal(k, "2");
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_frames_name),
                                       cmocka_unit_test(test_frames_migrate)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
