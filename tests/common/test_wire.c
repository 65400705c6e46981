/* Unit tests of common/: varints, the bounded reader and writer, frame
 * splitting and every frame's decoder against its encoder, and the schema
 * migrations on a real SQLite file. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "hs_error.h"
#include "hs_proto.h"
#include "hs_schema.h"
#include "hs_wire.h"

static void test_varint_table(void **state)
{
    (void)state;
    static const struct {
        const char *in;
        size_t len;
        int rc; /* bytes consumed, 0 = need more, -1 = invalid */
        uint64_t v;
    } cases[] = {
        {"\x00", 1, 1, 0},
        {"\x05", 1, 1, 5},
        {"\x7f", 1, 1, 127},
        {"\x80\x01", 2, 2, 128},
        {"\xff\x7f", 2, 2, 16383},
        {"\x80\x80\x80\x00", 4, 4, 0}, /* padded, accepted */
        {"\xff\xff", 2, 0, 0},         /* ends inside the varint */
        {"\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", 10, 10, UINT64_MAX},
        {"\xff\xff\xff\xff\xff\xff\xff\xff\xff\x02", 10, -1, 0}, /* overflows */
        {"\x80\x80\x80\x80\x80\x80\x80\x80\x80\x80\x00", 11, -1, 0}, /* too long */
    };
    for (size_t i = 0; i < HS_COUNTOF(cases); i++) {
        uint64_t v = 0;
        const uint8_t *p = (const uint8_t *)cases[i].in;
        int rc = hs_varint_decode(p, p + cases[i].len, &v);
        assert_int_equal(rc, cases[i].rc);
        if (rc > 0) assert_true(v == cases[i].v);
    }
}

static void test_varint_roundtrip(void **state)
{
    (void)state;
    uint8_t buf[HS_VARINT_MAX];
    uint64_t samples[] = {0, 1, 127, 128, 300, 1u << 20, UINT32_MAX, (uint64_t)1 << 63, UINT64_MAX};
    for (size_t i = 0; i < HS_COUNTOF(samples); i++) {
        size_t n = hs_varint_encode(buf, samples[i]);
        assert_int_equal(n, hs_varint_size(samples[i]));
        uint64_t v;
        assert_int_equal(hs_varint_decode(buf, buf + n, &v), (int)n);
        assert_true(v == samples[i]);
        int64_t s = (int64_t)samples[i];
        assert_true(hs_unzigzag(hs_zigzag(s)) == s);
    }
    assert_true(hs_zigzag(-1) == 1 && hs_zigzag(1) == 2);
}

static void test_reader_sticky_error(void **state)
{
    (void)state;
    const uint8_t buf[] = {0x03, 'a', 'b'}; /* a string claiming 3 bytes, 2 present */
    hs_rd rd;
    hs_rd_init(&rd, buf, sizeof buf);
    hs_str s = hs_rd_str(&rd, 100);
    assert_int_equal(rd.err, HS_ETRUNC);
    assert_int_equal(s.len, 0);
    assert_int_equal(hs_rd_varint(&rd), 0); /* later reads return zero */
    assert_int_equal(rd.err, HS_ETRUNC);

    hs_rd_init(&rd, buf, sizeof buf);
    hs_rd_str(&rd, 2); /* over the caller's limit */
    assert_int_equal(rd.err, HS_ETOOBIG);
}

static void test_writer_overflow(void **state)
{
    (void)state;
    uint8_t buf[4];
    hs_wr wr;
    hs_wr_init(&wr, buf, sizeof buf);
    hs_wr_cstr(&wr, "abc");
    assert_int_equal(wr.err, 0);
    assert_int_equal(hs_wr_len(&wr), 4);
    hs_wr_u8(&wr, 1);
    assert_int_equal(wr.err, HS_ETOOBIG);
    assert_int_equal(hs_wr_len(&wr), 4);
}

static void test_header(void **state)
{
    (void)state;
    uint8_t buf[16];
    hs_wr wr;
    hs_wr_init(&wr, buf, sizeof buf);
    hs_header_encode(&wr);
    uint32_t version = 0;
    size_t n = hs_wr_len(&wr);
    assert_int_equal(hs_header_parse(buf, n, &version), (int)n);
    assert_int_equal(version, HS_PROTO_VERSION);
    assert_int_equal(hs_header_parse(buf, 3, &version), 0); /* more needed */
    assert_int_equal(hs_header_parse((const uint8_t *)"GET / HTTP/1.1", 14, &version),
                     HS_EPROTO);
    buf[HS_MAGIC_LEN] = 9;
    assert_int_equal(hs_header_parse(buf, n, &version), HS_EVERSION);
}

/* An exact observation travels as DROPS entries: it reads back whole,
 * among ordinary kinds, and a reader that knows only those (an old server)
 * finds nothing but kinds it skips. */
static void test_exact_roundtrip(void **state)
{
    (void)state;
    const hs_exact x = {.t_ns = 5,
                        .live_bytes = 1 << 20,
                        .max_bytes = 3 << 20,
                        .max_t_ns = 4,
                        .peak_bytes = 7 << 20,
                        .peak_t_ns = 2,
                        .allocs = 100,
                        .frees = 90,
                        .alloc_bytes = 9 << 20,
                        .free_bytes = 8 << 20,
                        .error_bytes = 65536,
                        .flags = HS_EXACT_F_CALLED};
    uint8_t buf[256];
    hs_wr wr;
    hs_wr_init(&wr, buf, sizeof buf);
    hs_wr_varint(&wr, HS_DROP_ALLOC_EVENTS);
    hs_wr_varint(&wr, 3);
    hs_exact_put(&wr, &x);
    assert_int_equal(wr.err, 0);
    hs_batch_it it;
    hs_drop d;
    hs_exact y = {0};
    int n = 0, other = 0;
    assert_int_equal(hs_drops_begin(&it, buf, hs_wr_len(&wr)), 0);
    while (hs_drops_next(&it, &d) == 1) {
        if (hs_exact_take(&y, &d)) {
            n++;
            assert_true(d.kind > HS_DROP_KIND_MAX);
            assert_non_null(hs_drop_name((int)d.kind));
        } else {
            other++;
        }
    }
    assert_int_equal(n, HS_EXACT_KIND_LAST - HS_EXACT_KIND_FIRST + 1);
    assert_int_equal(other, 1);
    assert_memory_equal(&x, &y, sizeof x);
    assert_string_equal(hs_drop_name(HS_EXACT_PEAK_T_NS), "exact_peak_t_ns");
}

static void test_frame_split(void **state)
{
    (void)state;
    uint8_t buf[64];
    hs_wr wr;
    hs_wr_init(&wr, buf, sizeof buf);
    size_t pos = hs_frame_begin(&wr, HS_FRAME_DROPS);
    hs_wr_varint(&wr, HS_DROP_ALLOC_EVENTS);
    hs_wr_varint(&wr, 1000);
    hs_frame_end(&wr, pos);
    size_t n = hs_wr_len(&wr);
    hs_frame f;
    for (size_t cut = 0; cut < n; cut++) assert_int_equal(hs_frame_split(buf, cut, &f), 0);
    assert_int_equal(hs_frame_split(buf, n, &f), (long)n);
    assert_int_equal(f.type, HS_FRAME_DROPS);
    hs_batch_it it;
    hs_drop d;
    hs_drops_begin(&it, f.payload, f.len);
    assert_int_equal(hs_drops_next(&it, &d), 1);
    assert_int_equal(d.kind, HS_DROP_ALLOC_EVENTS);
    assert_int_equal(d.value, 1000);
    assert_int_equal(hs_drops_next(&it, &d), 0);

    /* A length above the hard cap is refused before any payload arrives. */
    uint8_t big[6] = {HS_FRAME_EVENTS};
    size_t k = hs_varint_encode(big + 1, HS_FRAME_MAX + 1);
    assert_int_equal(hs_frame_split(big, 1 + k, &f), HS_ETOOBIG);
    /* A length varint longer than 4 bytes is a protocol error. */
    const uint8_t bad[] = {HS_FRAME_EVENTS, 0x80, 0x80, 0x80, 0x80, 0x00};
    assert_int_equal(hs_frame_split(bad, sizeof bad, &f), HS_EPROTO);
}

static void test_hello_roundtrip(void **state)
{
    (void)state;
    static hs_hello h, back;
    memset(&h, 0, sizeof h);
    for (int i = 0; i < 16; i++) h.run_id[i] = (uint8_t)(i + 1);
    h.first_seq = 7;
    h.pid = 1234;
    h.ppid = 1;
    h.start_unix_ns = 1700000000000000000ull;
    h.sample_bytes = 524288;
    h.max_depth = 64;
    h.rss_interval_ms = 100;
    h.program = (hs_str){"/usr/bin/prog", 13};
    h.argc = 2;
    h.argv[0] = (hs_str){"prog", 4};
    h.argv[1] = (hs_str){"--x", 3};
    h.hostname = (hs_str){"box", 3};
    h.nlabels = 1;
    h.labels[0] = (hs_label){{"version", 7}, {"2", 1}};
    uint8_t buf[512];
    hs_wr wr;
    hs_wr_init(&wr, buf, sizeof buf);
    hs_hello_encode(&wr, &h);
    assert_int_equal(wr.err, 0);
    assert_int_equal(hs_hello_decode(&back, buf, hs_wr_len(&wr)), 0);
    assert_memory_equal(back.run_id, h.run_id, 16);
    assert_int_equal(back.first_seq, 7);
    assert_int_equal(back.sample_bytes, 524288);
    assert_int_equal(back.argc, 2);
    assert_memory_equal(back.argv[1].ptr, "--x", 3);
    assert_memory_equal(back.labels[0].key.ptr, "version", 7);
    /* Every proper prefix is rejected, never read past. */
    for (size_t cut = 0; cut < hs_wr_len(&wr); cut++)
        assert_true(hs_hello_decode(&back, buf, cut) < 0);
    /* sample_bytes = 0 is invalid. */
    h.sample_bytes = 0;
    hs_wr_init(&wr, buf, sizeof buf);
    hs_hello_encode(&wr, &h);
    assert_int_equal(hs_hello_decode(&back, buf, hs_wr_len(&wr)), HS_ERANGE);
}

static void test_events_roundtrip(void **state)
{
    (void)state;
    uint8_t buf[256];
    hs_wr wr;
    hs_wr_init(&wr, buf, sizeof buf);
    hs_wr_varint(&wr, 1000); /* t0 */
    hs_event_put(&wr, 0, 1, 0, 64, 524288);
    hs_event_put(&wr, 5, 2, 0, 1 << 20, 1 << 20);
    hs_event_put(&wr, 7, 1, 1, 64, 524288);
    hs_batch_it it;
    hs_event e;
    assert_int_equal(hs_events_begin(&it, buf, hs_wr_len(&wr)), 0);
    assert_int_equal(hs_events_next(&it, &e), 1);
    assert_true(e.t_ns == 1000 && e.stack_id == 1 && !e.is_free && e.size == 64 &&
                e.weight == 524288);
    assert_int_equal(hs_events_next(&it, &e), 1);
    assert_true(e.t_ns == 1005 && e.stack_id == 2 && e.weight == (1 << 20));
    assert_int_equal(hs_events_next(&it, &e), 1);
    assert_true(e.t_ns == 1012 && e.is_free && e.stack_id == 1);
    assert_int_equal(hs_events_next(&it, &e), 0);

    /* Stack id 0 is invalid; a truncated entry is an error, not an end. */
    hs_wr_init(&wr, buf, sizeof buf);
    hs_wr_varint(&wr, 0);
    hs_event_put(&wr, 0, 0, 0, 1, 1);
    hs_events_begin(&it, buf, hs_wr_len(&wr));
    assert_int_equal(hs_events_next(&it, &e), HS_ERANGE);
    hs_wr_init(&wr, buf, sizeof buf);
    hs_wr_varint(&wr, 0);
    hs_event_put(&wr, 0, 3, 0, 1000, 1000);
    hs_events_begin(&it, buf, hs_wr_len(&wr) - 1);
    assert_int_equal(hs_events_next(&it, &e), HS_ETRUNC);
}

static void test_stacks_symbols_mappings(void **state)
{
    (void)state;
    static uint8_t buf[4096];
    hs_wr wr;
    hs_wr_init(&wr, buf, sizeof buf);
    uint64_t pcs[3] = {0x401000, 0x401100, 0x7f0000001000};
    hs_stack_put(&wr, 9, pcs, 3);
    static hs_stack st;
    hs_batch_it it;
    hs_stacks_begin(&it, buf, hs_wr_len(&wr));
    assert_int_equal(hs_stacks_next(&it, &st), 1);
    assert_true(st.id == 9 && st.depth == 3 && st.pcs[2] == 0x7f0000001000);
    assert_int_equal(hs_stacks_next(&it, &st), 0);

    hs_wr_init(&wr, buf, sizeof buf);
    hs_symbol s = {0x401000, {"main", 4}, {"a.c", 3}, 12, {"/bin/a", 6}, 0x1000};
    hs_symbol_put(&wr, &s);
    hs_symbol back;
    hs_symbols_begin(&it, buf, hs_wr_len(&wr));
    assert_int_equal(hs_symbols_next(&it, &back), 1);
    assert_true(back.line == 12 && back.module_offset == 0x1000);
    assert_memory_equal(back.function.ptr, "main", 4);

    hs_wr_init(&wr, buf, sizeof buf);
    hs_wr_varint(&wr, 5);
    hs_mapping m = {0x400000, 0x401000, 0, (const uint8_t *)"\xab\xcd", 2, {"/bin/a", 6}};
    hs_mapping_put(&wr, &m);
    m.end = m.start; /* empty range: invalid */
    hs_mapping_put(&wr, &m);
    hs_mapping mb;
    hs_mappings_begin(&it, buf, hs_wr_len(&wr));
    assert_int_equal(it.t, 5);
    assert_int_equal(hs_mappings_next(&it, &mb), 1);
    assert_int_equal(mb.build_id_len, 2);
    assert_int_equal(hs_mappings_next(&it, &mb), HS_ERANGE);
}

static void test_bye_ack(void **state)
{
    (void)state;
    uint8_t buf[64];
    hs_wr wr;
    hs_wr_init(&wr, buf, sizeof buf);
    hs_bye b = {123, HS_BYE_CLEAN, 10, 9, 4096}, back;
    hs_bye_encode(&wr, &b);
    assert_int_equal(hs_bye_decode(&back, buf, hs_wr_len(&wr)), 0);
    assert_memory_equal(&b, &back, sizeof b);
    hs_wr_u8(&wr, 0); /* trailing byte */
    assert_int_equal(hs_bye_decode(&back, buf, hs_wr_len(&wr)), HS_EPROTO);
    uint64_t next;
    assert_int_equal(hs_ack_decode(&next, (const uint8_t *)"\x2a", 1), 0);
    assert_int_equal(next, 42);
}

static void test_errors(void **state)
{
    (void)state;
    assert_string_equal(hs_strerror(0), "success");
    assert_string_equal(hs_strerror(HS_EPROTO), "protocol error");
    assert_string_equal(hs_errname(HS_ENOSPC), "HS_ENOSPC");
    assert_string_equal(hs_strerror(12345), "unknown error");
}

static void test_schema_migrates_real_file(void **state)
{
    (void)state;
    char path[] = "/tmp/hs-schema-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    unlink(path);
    sqlite3 *db;
    char err[256];
    assert_int_equal(hs_schema_open(&db, path, 0, err, sizeof err), 0);
    sqlite3_stmt *st;
    assert_int_equal(sqlite3_prepare_v2(db, "PRAGMA user_version", -1, &st, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    assert_int_equal(sqlite3_column_int(st, 0), hs_schema_version());
    sqlite3_finalize(st);
    sqlite3_close_v2(db);
    /* Reopening applies nothing and succeeds; read-only opens too. */
    assert_int_equal(hs_schema_open(&db, path, 0, err, sizeof err), 0);
    sqlite3_exec(db, "PRAGMA user_version = 999", NULL, NULL, NULL);
    sqlite3_close_v2(db);
    assert_int_equal(hs_schema_open(&db, path, 0, err, sizeof err), HS_EVERSION);
    assert_non_null(strstr(err, "newer"));
    assert_int_equal(hs_schema_open(&db, "/nonexistent/dir/x.db", 0, err, sizeof err), HS_EIO);
    char wal[300];
    snprintf(wal, sizeof wal, "%s-wal", path);
    unlink(wal);
    snprintf(wal, sizeof wal, "%s-shm", path);
    unlink(wal);
    unlink(path);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_varint_table),
        cmocka_unit_test(test_varint_roundtrip),
        cmocka_unit_test(test_reader_sticky_error),
        cmocka_unit_test(test_writer_overflow),
        cmocka_unit_test(test_header),
        cmocka_unit_test(test_frame_split),
        cmocka_unit_test(test_exact_roundtrip),
        cmocka_unit_test(test_hello_roundtrip),
        cmocka_unit_test(test_events_roundtrip),
        cmocka_unit_test(test_stacks_symbols_mappings),
        cmocka_unit_test(test_bye_ack),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_schema_migrates_real_file),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
