/* Unit tests of common/hs_text: every spelling of a duration the server and
 * `heapstore import` accept, and percent-decoding with and without '+'
 * (bad, truncated and NUL escapes, output that does not fit). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "hs_error.h"
#include "hs_text.h"

static void test_duration_table(void **state)
{
    (void)state;
    static const struct {
        const char *in;
        int rc;
        uint64_t ns;
    } cases[] = {
        {"30", 0, 30000000000ull}, /* bare number: seconds */
        {"1s", 0, 1000000000ull},
        {"1.5s", 0, 1500000000ull},
        {"100ms", 0, 100000000ull},
        {"500us", 0, 500000ull},
        {"10ns", 0, 10},
        {"2m", 0, 120000000000ull},
        {"1h", 0, 3600000000000ull},
        {"0", 0, 0}, /* 0 turns a timeout off */
        {"0s", 0, 0},
        {".5s", 0, 500000000ull},
        {"1e3ms", 0, 1000000000ull},
        {"2.5ns", 0, 3},                            /* rounded half away */
        {"1000000000s", 0, 1000000000000000000ull}, /* 1e18 ns, the limit */
        {"1000000001s", HS_ERANGE, 0},
        {"1e300h", HS_ERANGE, 0},
        {"", HS_EINVAL, 0},
        {"s", HS_EINVAL, 0},
        {"-1s", HS_EINVAL, 0},
        {"-0.5", HS_EINVAL, 0},
        {"nan", HS_EINVAL, 0},
        {"inf", HS_EINVAL, 0},
        {"1e999", HS_EINVAL, 0}, /* strtod overflows: ERANGE errno */
        {"1 s", HS_EINVAL, 0},
        {"1S", HS_EINVAL, 0},
        {"1sec", HS_EINVAL, 0},
        {"1d", HS_EINVAL, 0},
        {"1ms ", HS_EINVAL, 0},
        {"1mss", HS_EINVAL, 0},
    };
    for (size_t i = 0; i < HS_COUNTOF(cases); i++) {
        uint64_t ns = 12345;
        int rc = hs_parse_duration(cases[i].in, &ns);
        if (rc != cases[i].rc) fail_msg("'%s': rc %d, want %d", cases[i].in, rc, cases[i].rc);
        if (rc == 0 && ns != cases[i].ns)
            fail_msg("'%s': %llu ns, want %llu", cases[i].in, (unsigned long long)ns,
                     (unsigned long long)cases[i].ns);
        if (rc) assert_true(ns == 12345); /* untouched on error */
    }
}

static void test_pct_table(void **state)
{
    (void)state;
    static const struct {
        const char *in;
        int flags;
        long rc; /* length, or -1 */
        const char *out;
    } cases[] = {
        {"", 0, 0, ""},
        {"abc", 0, 3, "abc"},
        {"a%20b", 0, 3, "a b"},
        {"%41%62%7e%7E", 0, 4, "Ab~~"},
        {"a+b", 0, 3, "a+b"},           /* a path keeps '+' */
        {"a+b", HS_PCT_PLUS, 3, "a b"}, /* a query string reads a space */
        {"%2B", HS_PCT_PLUS, 1, "+"},   /* an encoded '+' stays '+' */
        {"%25", 0, 1, "%"},
        {"%2525", 0, 3, "%25"}, /* decoded once only */
        {"%ff%80", 0, 2, "\xff\x80"},
        {"%00", 0, -1, ""}, /* NUL */
        {"a%00b", HS_PCT_PLUS, -1, ""},
        {"%", 0, -1, ""}, /* truncated */
        {"%4", 0, -1, ""},
        {"ab%", HS_PCT_PLUS, -1, ""},
        {"ab%f", HS_PCT_PLUS, -1, ""},
        {"%zz", 0, -1, ""}, /* not hex */
        {"%4g", 0, -1, ""},
        {"%g4", 0, -1, ""},
        {"% 4", 0, -1, ""},
        {"%+4", HS_PCT_PLUS, -1, ""},
        {"%-1", 0, -1, ""},
    };
    for (size_t i = 0; i < HS_COUNTOF(cases); i++) {
        char out[32];
        long rc = hs_pct_decode(out, sizeof out, cases[i].in, strlen(cases[i].in), cases[i].flags);
        if (rc != cases[i].rc) fail_msg("'%s': rc %ld, want %ld", cases[i].in, rc, cases[i].rc);
        if (rc >= 0) {
            assert_memory_equal(out, cases[i].out, (size_t)rc + 1);
            assert_int_equal(strlen(out), (size_t)rc);
        }
    }
}

static void test_pct_bounds(void **state)
{
    (void)state;
    char out[4];
    /* the result and its NUL must fit */
    assert_int_equal(hs_pct_decode(out, sizeof out, "abc", 3, 0), 3);
    assert_string_equal(out, "abc");
    assert_int_equal(hs_pct_decode(out, sizeof out, "abcd", 4, 0), -1);
    assert_int_equal(hs_pct_decode(out, sizeof out, "%41%42%43", 9, 0), 3);
    assert_int_equal(hs_pct_decode(out, sizeof out, "%41%42%43%44", 12, 0), -1);
    assert_int_equal(hs_pct_decode(out, 1, "", 0, 0), 0);
    assert_int_equal(hs_pct_decode(out, 1, "a", 1, 0), -1);
    assert_int_equal(hs_pct_decode(out, 0, "", 0, 0), -1);
    /* n bounds the input: an escape cut by n is truncated, not read past */
    assert_int_equal(hs_pct_decode(out, sizeof out, "a%41", 3, 0), -1);
    assert_int_equal(hs_pct_decode(out, sizeof out, "a%41", 1, 0), 1);
}

static void test_hex_table(void **state)
{
    (void)state;
    static const struct {
        const char *in;
        size_t n;
        const char *out;
    } cases[] = {
        {"", 0, ""},
        {"\x00", 1, "00"},
        {"\xab\x01\xff", 3, "ab01ff"},
        {"\x0f\xf0", 2, "0ff0"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char out[16];
        memset(out, 'x', sizeof out);
        hs_hex(out, (const uint8_t *)cases[i].in, cases[i].n);
        assert_string_equal(out, cases[i].out);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_duration_table),
        cmocka_unit_test(test_pct_table),
        cmocka_unit_test(test_pct_bounds),
        cmocka_unit_test(test_hex_table),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
