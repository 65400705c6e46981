/* test_ties: rows that tie (sites of exactly equal bytes) come in content
 * order, not in the order of the store's ids, which here rise opposite to
 * the names' order (ties.h); the ClickHouse store is checked the same way
 * in tests/clickhouse/test_ch_same.c. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <unistd.h>

#include <cmocka.h>

#include "fixture.h"
#include "hs_queries.h"
#include "ties.h"

static void test_quiet_ties(void **state)
{
    (void)state;
    char p[512];
    fx_tmp_path(p, sizeof p, "ties.db");
    assert_int_equal(fx_build_quiet(p), 0);
    hs_q *q;
    hs_qerr e;
    assert_int_equal(hs_q_open(&q, p, &e), 0);
    assert_int_equal(fx_ties_check(q), 0);
    hs_q_free(q);
    unlink(p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_quiet_ties)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
