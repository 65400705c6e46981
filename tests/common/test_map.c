/* Unit tests of common/hs_map: a table of operations replayed against a
 * plain array model (key 0 and UINT64_MAX included), growth past many
 * doublings, deletes that shift probe chains back, and the walk. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "hs_error.h"
#include "hs_map.h"

enum { PUT, GET, DEL, CLEAR };

static void test_map_table(void **state)
{
    (void)state;
    static const struct {
        int op;
        uint64_t key, val;
        int rc; /* GET/DEL: found; PUT/CLEAR: 0 */
        size_t count;
    } ops[] = {
        {GET, 0, 0, 0, 0},
        {DEL, 0, 0, 0, 0},
        {GET, 7, 0, 0, 0},
        {DEL, 7, 0, 0, 0}, /* an empty map has no table */
        {PUT, 0, 5, 0, 1},
        {GET, 0, 5, 1, 1}, /* key 0 is a key */
        {PUT, 7, 0, 0, 2},
        {GET, 7, 0, 1, 2}, /* value 0 is a value */
        {PUT, UINT64_MAX, UINT64_MAX, 0, 3},
        {GET, UINT64_MAX, UINT64_MAX, 1, 3},
        {PUT, 7, 9, 0, 3},
        {GET, 7, 9, 1, 3}, /* replace */
        {PUT, 0, 0, 0, 3},
        {GET, 0, 0, 1, 3},
        {GET, 8, 0, 0, 3},
        {DEL, 0, 0, 1, 2},
        {GET, 0, 0, 0, 2},
        {DEL, 0, 0, 0, 2},
        {GET, 7, 9, 1, 2},
        {DEL, 7, 0, 1, 1},
        {GET, 7, 0, 0, 1},
        {GET, UINT64_MAX, UINT64_MAX, 1, 1},
        {PUT, 0, 1, 0, 2},
        {CLEAR, 0, 0, 0, 0},
        {GET, 0, 0, 0, 0},
        {GET, UINT64_MAX, 0, 0, 0},
        {PUT, 3, 4, 0, 1},
        {GET, 3, 4, 1, 1},
    };
    hs_map m = {0};
    for (size_t i = 0; i < HS_COUNTOF(ops); i++) {
        uint64_t v = 0xdead;
        int rc = 0;
        switch (ops[i].op) {
        case PUT:
            rc = hs_map_put(&m, ops[i].key, ops[i].val);
            break;
        case GET:
            rc = hs_map_get(&m, ops[i].key, &v);
            if (rc)
                assert_true(v == ops[i].val);
            else
                assert_true(v == 0xdead);
            break;
        case DEL:
            rc = hs_map_del(&m, ops[i].key);
            break;
        case CLEAR:
            hs_map_clear(&m);
            break;
        }
        if (rc != ops[i].rc) fail_msg("op %zu: rc %d, want %d", i, rc, ops[i].rc);
        if (m.count != ops[i].count)
            fail_msg("op %zu: count %zu, want %zu", i, m.count, ops[i].count);
    }
    hs_map_free(&m);
    assert_null(m.slots);
    assert_int_equal(m.count, 0);
    uint64_t v;
    assert_int_equal(hs_map_get(&m, 0, &v), 0);
}

/* Keys that share their home slot's neighbourhood: multiples of a large
 * power of two hash apart, so also consecutive and 0. */
static uint64_t key_of(size_t i)
{
    return i % 3 == 0 ? (uint64_t)i : i % 3 == 1 ? (uint64_t)i << 40 : ~(uint64_t)i;
}

static void test_map_grow_and_delete(void **state)
{
    (void)state;
    enum { N = 50000 };
    hs_map m = {0};
    for (size_t i = 0; i < N; i++) assert_int_equal(hs_map_put(&m, key_of(i), i * 3), 0);
    assert_int_equal(m.count, N);
    assert_true((m.count - (size_t)m.has_zero) * 2 <= m.mask + 1); /* at most half full */
    for (size_t i = 0; i < N; i++) {
        uint64_t v;
        assert_int_equal(hs_map_get(&m, key_of(i), &v), 1);
        assert_true(v == i * 3);
    }
    /* delete every other key: the ones left stay reachable */
    size_t cap = m.mask + 1;
    for (size_t i = 0; i < N; i += 2) assert_int_equal(hs_map_del(&m, key_of(i)), 1);
    assert_int_equal(m.count, N / 2);
    assert_int_equal(m.mask + 1, cap); /* deletes keep the capacity */
    for (size_t i = 0; i < N; i++) {
        uint64_t v = 0;
        int found = hs_map_get(&m, key_of(i), &v);
        assert_int_equal(found, i % 2);
        if (found) assert_true(v == i * 3);
    }
    /* the walk sees each remaining entry once */
    unsigned char *seen = calloc(N, 1);
    assert_non_null(seen);
    size_t walked = 0;
    uint64_t k, v;
    for (size_t pos = 0; hs_map_next(&m, &pos, &k, &v); walked++) {
        size_t i = (size_t)(v / 3);
        assert_true(i < N && key_of(i) == k && i % 2 == 1 && !seen[i]);
        seen[i] = 1;
    }
    assert_int_equal(walked, N / 2);
    /* put back the deleted ones: no tombstones in the way */
    for (size_t i = 0; i < N; i += 2) assert_int_equal(hs_map_put(&m, key_of(i), i), 0);
    assert_int_equal(m.count, N);
    for (size_t i = 0; i < N; i++) {
        uint64_t v2;
        assert_int_equal(hs_map_get(&m, key_of(i), &v2), 1);
        assert_true(v2 == (i % 2 ? i * 3 : i));
    }
    free(seen);
    hs_map_free(&m);
}

static void test_map_walk_key0(void **state)
{
    (void)state;
    hs_map m = {0};
    uint64_t k, v;
    size_t pos = 0;
    assert_int_equal(hs_map_next(&m, &pos, &k, &v), 0); /* empty, no table */
    assert_int_equal(hs_map_put(&m, 0, 11), 0);
    pos = 0;
    assert_int_equal(hs_map_next(&m, &pos, &k, &v), 1); /* key 0 without a table */
    assert_true(k == 0 && v == 11);
    assert_int_equal(hs_map_next(&m, &pos, &k, &v), 0);
    assert_int_equal(hs_map_put(&m, 5, 55), 0);
    int saw0 = 0, saw5 = 0, n = 0;
    for (pos = 0; hs_map_next(&m, &pos, &k, &v); n++) {
        saw0 += k == 0 && v == 11;
        saw5 += k == 5 && v == 55;
    }
    assert_true(n == 2 && saw0 == 1 && saw5 == 1);
    hs_map_free(&m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_map_table),
        cmocka_unit_test(test_map_grow_and_delete),
        cmocka_unit_test(test_map_walk_key0),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
