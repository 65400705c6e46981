/* Unit tests of the SYMDATA pieces: hs_lz (round trips of text, binary,
 * repetitive and incompressible data; every malformed input rejected
 * without writing past the size given) and the SYMREQ / SYMDATA decoders'
 * bounds. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "hs_error.h"
#include "hs_lz.h"
#include "hs_proto.h"

static uint32_t table[HS_LZ_TABLE];

static void round_trip(const uint8_t *in, size_t n, size_t *zlen_out)
{
    size_t cap = HS_LZ_BOUND(n);
    uint8_t *z = malloc(cap), *back = malloc(n + 1);
    size_t zlen = hs_lz_compress(z, cap, in, n, table);
    assert_true(zlen > 0 && zlen <= cap);
    assert_int_equal(hs_lz_decompress(back, n, z, zlen), 0);
    assert_memory_equal(back, in, n);
    /* told one byte less or more than it holds: refused */
    if (n) assert_int_equal(hs_lz_decompress(back, n - 1, z, zlen), HS_EPROTO);
    assert_int_equal(hs_lz_decompress(back, n + 1, z, zlen), HS_EPROTO);
    /* cut short anywhere: refused or short, never past n */
    for (size_t k = 0; n && k < zlen; k += 1 + zlen / 64)
        assert_int_not_equal(hs_lz_decompress(back, n, z, k), 0);
    if (zlen_out) *zlen_out = zlen;
    free(z);
    free(back);
}

static void test_lz_round_trips(void **state)
{
    (void)state;
    size_t n = 300000, zlen;
    uint8_t *buf = malloc(n);
    round_trip((const uint8_t *)"", 0, NULL);
    round_trip((const uint8_t *)"a", 1, NULL);
    round_trip((const uint8_t *)"abcabcabcabcabcabc", 18, NULL);
    memset(buf, 'z', n); /* one long match, overlapping */
    round_trip(buf, n, &zlen);
    assert_true(zlen < 64);
    for (size_t i = 0; i < n; i++) buf[i] = (uint8_t) "symbol_table_entry_"[i % 19] ^ (i % 7 == 0);
    round_trip(buf, n, &zlen);
    assert_true(zlen < n / 4);
    uint64_t x = 88172645463325252ull; /* xorshift: incompressible */
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        buf[i] = (uint8_t)x;
    }
    round_trip(buf, n, &zlen);
    assert_true(zlen <= HS_LZ_BOUND(n));
    assert_int_equal(hs_lz_compress(buf + 1, 100, buf, n, table), 0); /* does not fit */
    free(buf);
}

static void test_lz_malformed(void **state)
{
    (void)state;
    static const struct {
        const char *in;
        size_t len, size;
        int rc;
    } cases[] = {
        {"\x30"
         "abc",
         4, 3, 0}, /* literals only */
        {"\x30"
         "ab",
         3, 3, HS_EPROTO}, /* literals cut short */
        {"\x31"
         "abc\x03\x00",
         6, 8, 0}, /* abc + 5 from 3 back */
        {"\x31"
         "abc\x04\x00",
         6, 8, HS_EPROTO}, /* offset before the start */
        {"\x31"
         "abc\x00\x00",
         6, 8, HS_EPROTO}, /* offset 0 */
        {"\x31"
         "abc\x03",
         5, 8, HS_EPROTO}, /* offset cut short */
        {"\x31"
         "abc\x03\x00",
         6, 7, HS_EPROTO},                             /* more than size */
        {"\xf0\xff\xff\xff\xff\x7f", 6, 8, HS_EPROTO}, /* a huge literal count */
        {"\x3f"
         "abc\x01\x00\xff\xff\xff\x0f",
         10, 64, HS_EPROTO},       /* a huge match */
        {"\xf0", 1, 8, HS_EPROTO}, /* count's varint missing */
    };
    uint8_t out[64];
    for (size_t i = 0; i < HS_COUNTOF(cases); i++) {
        memset(out, 0xaa, sizeof out);
        int rc = hs_lz_decompress(out, cases[i].size, (const uint8_t *)cases[i].in, cases[i].len);
        if (rc != cases[i].rc) fprintf(stderr, "case %zu: %d\n", i, rc);
        assert_int_equal(rc, cases[i].rc);
        for (size_t k = cases[i].size; k < sizeof out; k++) assert_int_equal(out[k], 0xaa);
    }
    uint8_t ok[8];
    assert_int_equal(hs_lz_decompress(ok, 8,
                                      (const uint8_t *)"\x31"
                                                       "abc\x03\x00",
                                      6),
                     0);
    assert_memory_equal(ok, "abcabcab", 8);
}

static size_t symdata(uint8_t *buf, size_t cap, const hs_symdata *d, const void *data, size_t len)
{
    hs_wr wr;
    hs_wr_init(&wr, buf, cap);
    hs_symdata_head(&wr, d);
    hs_wr_str(&wr, data, len);
    assert_int_equal(wr.err, 0);
    return hs_wr_len(&wr);
}

static void test_symdata_decode(void **state)
{
    (void)state;
    static const uint8_t bid[20] = {1, 2, 3};
    static uint8_t buf[(2u << 20) + 256], data[(1u << 20) + 1];
    static const struct {
        uint32_t blen, method;
        uint64_t offset, total;
        uint32_t size, len;
        int rc;
    } cases[] = {
        {20, 0, 0, 100, 100, 100, 0},
        {20, 0, 0, 0, 0, 0, 0},                             /* declined */
        {20, 0, 0, 0, 4, 4, HS_ERANGE},                     /* declined, with data */
        {0, 0, 0, 100, 100, 100, HS_ERANGE},                /* no build id */
        {20, 2, 0, 100, 100, 100, HS_ERANGE},               /* unknown method */
        {20, 0, 90, 100, 20, 20, HS_ERANGE},                /* past the end */
        {20, 0, 0, 100, 0, 0, HS_ERANGE},                   /* an empty piece */
        {20, 0, 0, 100, 50, 40, HS_ERANGE},                 /* stored, sizes differ */
        {20, 1, 0, 100, 50, 40, 0},                         /* compressed: may differ */
        {20, 0, 0, 2u << 20, 1u << 20, 1u << 20, 0},        /* a piece at the cap */
        {20, 0, 0, 2u << 20, (1u << 20) + 1, 1, HS_ERANGE}, /* over it */
    };
    for (size_t i = 0; i < HS_COUNTOF(cases); i++) {
        hs_symdata d = {.bid = bid,
                        .blen = cases[i].blen,
                        .method = cases[i].method,
                        .offset = cases[i].offset,
                        .total = cases[i].total,
                        .size = cases[i].size};
        size_t n = symdata(buf, sizeof buf, &d, data, cases[i].len), back;
        hs_symdata got;
        int rc = hs_symdata_decode(&got, buf, n);
        if (rc != cases[i].rc) fprintf(stderr, "case %zu: %d\n", i, rc);
        assert_int_equal(rc, cases[i].rc);
        if (rc == 0) {
            assert_int_equal(got.total, cases[i].total);
            assert_int_equal(got.data.len, cases[i].len);
        }
        back = n;
        buf[back] = 0; /* a trailing byte */
        assert_int_not_equal(hs_symdata_decode(&got, buf, back + 1), 0);
    }
    /* SYMREQ: a build id of 1 to 64 bytes, nothing after it */
    const uint8_t *p;
    uint32_t len;
    assert_int_equal(hs_symreq_decode(&p, &len, (const uint8_t *)"\x02\xab\xcd", 3), 0);
    assert_int_equal(len, 2);
    assert_int_equal(hs_symreq_decode(&p, &len, (const uint8_t *)"\x00", 1), HS_ERANGE);
    assert_int_not_equal(hs_symreq_decode(&p, &len, (const uint8_t *)"\x02\xab\xcd\x00", 4), 0);
    assert_int_not_equal(hs_symreq_decode(&p, &len, (const uint8_t *)"\x41", 1), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lz_round_trips),
        cmocka_unit_test(test_lz_malformed),
        cmocka_unit_test(test_symdata_decode),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
