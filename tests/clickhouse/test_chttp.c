/* The ClickHouse client's pure parts, without a server: store URLs (good
 * and refused), RowBinary encodings, the TabSeparated reader's unescaping
 * and NULLs, and content ids (stable, never 0, within 53 bits). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "hs_chttp.h"
#include "hs_error.h"

static void test_urls(void **state)
{
    (void)state;
    static const struct {
        const char *url;
        int rc;
        const char *display;
    } cases[] = {
        {"clickhouse://h/db", 0, "clickhouse://h:8123/db"},
        {"clickhouse://h:9123/db?user=u&password=p%26q", 0, "clickhouse://h:9123/db"},
        {"clickhouse://h/db?secure=1", 0, "clickhouse://h:8443/db"},
        {"clickhouse://[::1]:8123/db", 0, "clickhouse://[::1]:8123/db"},
        {"clickhouse://h/db?timeout=5&insecure=1", 0, "clickhouse://h:8123/db"},
        {"clickhouse://h/", HS_EINVAL, NULL},
        {"clickhouse://h", HS_EINVAL, NULL},
        {"clickhouse:///db", HS_EINVAL, NULL},
        {"clickhouse://h/db-x", HS_EINVAL, NULL},
        {"clickhouse://h/db;drop", HS_EINVAL, NULL},
        {"clickhouse://h/db?Colour=red", HS_EINVAL, NULL},
        {"clickhouse://h/db?insert_distributed_sync=1", 0, "clickhouse://h:8123/db"},
        {"http://h/db", HS_EINVAL, NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        hs_ch *c = NULL;
        char err[300] = "";
        int rc = hs_ch_open(&c, cases[i].url, err, sizeof err);
        if (rc != cases[i].rc) fprintf(stderr, "%s: %d (%s)\n", cases[i].url, rc, err);
        assert_int_equal(rc, cases[i].rc);
        if (!rc)
            assert_string_equal(hs_ch_display(c), cases[i].display);
        else
            assert_true(err[0] != 0);
        hs_ch_free(c);
    }
}

static void test_rowbinary(void **state)
{
    (void)state;
    hs_buf b = {0};
    hs_rb_u64(&b, 0x0102030405060708ull);
    hs_rb_i64(&b, -2);
    hs_rb_u8(&b, 7);
    char big[300];
    memset(big, 'x', sizeof big);
    hs_rb_str(&b, big, sizeof big); /* 300 = 0xac 0x02 */
    hs_rb_str(&b, "", 0);
    assert_false(b.oom);
    assert_int_equal(b.n, 8 + 8 + 1 + 2 + 300 + 1);
    const unsigned char *p = (const unsigned char *)b.p;
    assert_int_equal(p[0], 0x08);
    assert_int_equal(p[7], 0x01);
    assert_int_equal(p[8], 0xfe);
    assert_int_equal(p[15], 0xff);
    assert_int_equal(p[16], 7);
    assert_int_equal(p[17], 0xac);
    assert_int_equal(p[18], 0x02);
    assert_int_equal(p[b.n - 1], 0);
    b.n = 0;
    hs_ch_quote(&b, "it's a \\ test", 13);
    assert_string_equal(b.p, "'it\\'s a \\\\ test'");
    hs_buf_free(&b);
}

static void test_tsv(void **state)
{
    (void)state;
    hs_buf b = {0};
    const char text[] = "1\ta\\tb\\nc\t\\N\n-5\t\\\\x\\0y\t7\n\n";
    hs_buf_put(&b, text, sizeof text - 1);
    hs_tsv t;
    hs_tsv_init(&t, &b);
    int null;
    size_t len;
    assert_true(hs_tsv_row(&t));
    assert_int_equal(hs_tsv_i64(&t, &null), 1);
    assert_false(null);
    assert_string_equal(hs_tsv_field(&t, &len), "a\tb\nc");
    assert_int_equal(hs_tsv_i64(&t, &null), 0);
    assert_true(null);
    assert_null(hs_tsv_field(&t, NULL));
    assert_true(hs_tsv_row(&t));
    assert_int_equal(hs_tsv_i64(&t, NULL), -5);
    const char *f = hs_tsv_field(&t, &len);
    assert_int_equal(len, 4);
    assert_memory_equal(f, "\\x\0y", 4);
    assert_int_equal(hs_tsv_i64(&t, NULL), 7);
    assert_true(hs_tsv_row(&t)); /* the empty line is a row without fields */
    assert_false(hs_tsv_row(&t));
    hs_buf_free(&b);
}

static void test_ids(void **state)
{
    (void)state;
    uint64_t a = hs_ch_hash("main\x1f"
                            "a.c\x1f"
                            "3",
                            10, 0x66);
    assert_int_equal(a, hs_ch_hash("main\x1f"
                                   "a.c\x1f"
                                   "3",
                                   10, 0x66));
    assert_true(a != hs_ch_hash("main\x1f"
                                "a.c\x1f"
                                "4",
                                10, 0x66));
    assert_true(a != hs_ch_hash("main\x1f"
                                "a.c\x1f"
                                "3",
                                10, 0x67));
    for (int i = 0; i < 100000; i++) {
        uint64_t h = hs_ch_hash(&i, sizeof i, 0);
        assert_true(h != 0 && h <= HS_CH_ID_MASK);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_urls),
        cmocka_unit_test(test_rowbinary),
        cmocka_unit_test(test_tsv),
        cmocka_unit_test(test_ids),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
