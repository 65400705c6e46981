/* test_gdiff_core: the parts of groups of runs (queries/gdiff.c, check.c)
 * that need no program: selectors that name groups (id=A..B), the
 * sampling variance against a simulation of the collector's byte sampler,
 * and the group diff and check on the fixture's two exact runs (fixture.h),
 * whose answers are known to the byte. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "fixture.h"
#include "hs_error.h"
#include "q_internal.h"

static char db_path[512];
static hs_q *q;

static int setup(void **state)
{
    (void)state;
    fx_tmp_path(db_path, sizeof db_path, "gdiff-core.db");
    hs_qerr err;
    if (fx_build(db_path) || hs_q_open(&q, db_path, &err)) return -1;
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    hs_q_free(q);
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -f '%s'*", db_path);
    return system(cmd) == 0 ? 0 : -1;
}

static void test_selectors(void **state)
{
    (void)state;
    static const struct {
        const char *in;
        int rc, group;
    } cases[] = {
        {"id=120..140", 0, 1},
        {"id=7..7", 0, 1},
        {"program=app,id=1..999999999999999999", 0, 1},
        {"id=120..140,latest", 0, 0},
        {"version=1.3", 0, 1},
        {"version=1.3,latest", 0, 0},
        {"id=5", 0, 1},
        {"7", 0, 0},
        {"latest", 0, 0},
        {"abc123", 0, 0},
        {"id=140..120", HS_EINVAL, 0},
        {"id=1..", HS_EINVAL, 0},
        {"id=..5", HS_EINVAL, 0},
        {"id=1...5", HS_EINVAL, 0},
        {"id=1..5x", HS_EINVAL, 0},
        {"id=1234567890123456789..2", HS_EINVAL, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        hs_run_sel sel;
        hs_qerr err = {0};
        int rc = hs_sel_parse_run(&sel, cases[i].in, &err);
        if (rc != cases[i].rc) fail_msg("%s: %d (%s)", cases[i].in, rc, err.msg);
        if (!rc) assert_int_equal(hs_sel_is_group(&sel), cases[i].group);
        if (rc) assert_non_null(strstr(err.msg, "id must be"));
    }
    int64_t lo, hi;
    assert_true(hs_sel_id_range("3..9", &lo, &hi));
    assert_int_equal(lo, 3);
    assert_int_equal(hi, 9);
    assert_false(hs_sel_id_range("9", &lo, &hi));
}

/* xorshift64*, uniform in (0, 1]. */
static double uniform(uint64_t *s)
{
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return (double)(((*s * 0x2545F4914F6CDD1Dull) >> 11) + 1) * 0x1.0p-53;
}

/* The collector samples a block of size s with p = 1 - exp(-s/S) and
 * weighs it s/p. Over TRIALS runs of n blocks, the estimate's variance
 * must be what hs__sampling_var says from the bytes and count (within 3
 * of the variance estimate's own standard errors, sqrt(2/TRIALS)). */
#define TRIALS 4000
static void test_sampling_var(void **state)
{
    (void)state;
    const double S = 524288;
    static const struct {
        double size;
        int n;
    } cases[] = {{64, 200000}, {4096, 4000}, {131072, 300}, {524288, 100}, {1048576, 64}};
    uint64_t seed = 0x9e3779b97f4a7c15ull;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        double s = cases[c].size, p = -expm1(-s / S), w = s / p, sum = 0, sumsq = 0;
        int n = cases[c].n;
        for (int t = 0; t < TRIALS; t++) {
            int k = 0;
            for (int i = 0; i < n; i++) k += uniform(&seed) <= p;
            sum += k * w;
            sumsq += (k * w) * (k * w);
        }
        double var = (sumsq - sum * sum / TRIALS) / (TRIALS - 1);
        int64_t bytes = (int64_t)(n * s), count = n;
        double want = hs__sampling_var(bytes, count, (int64_t)S);
        fprintf(stderr, "size %.0f: empirical variance %.4g, estimator's %.4g\n", s, var, want);
        assert_true(fabs(var / want - 1) < 3 * sqrt(2.0 / TRIALS));
        assert_true(want <= (double)bytes * S);
    }
    assert_true(hs__sampling_var(1 << 20, 256, 1) == 0);      /* every allocation */
    assert_true(hs__sampling_var(0, 0, 524288) == 0);         /* nothing */
    assert_true(hs__sampling_var(1ll << 40, 1, 524288) == 0); /* one huge block: always */
}

static void gdiff_params(hs_diff_params *p, const char *a, const char *b, const char *by)
{
    hs_qerr err;
    hs_diff_params_init(p);
    assert_int_equal(hs_diff_param(p, "a", a, &err), 0);
    assert_int_equal(hs_diff_param(p, "b", b, &err), 0);
    assert_int_equal(hs_diff_param(p, "by", by, &err), 0);
}

/* The fixture's runs are exact (sample 1): no error, every change real. */
static void test_gdiff_fixture(void **state)
{
    (void)state;
    hs_diff_params p;
    hs_qerr err;
    int group;
    gdiff_params(&p, "1", "2", "site");
    assert_int_equal(hs_diff_is_group(q, &p, &group, &err), 0);
    assert_false(group);
    gdiff_params(&p, "version=1", "version=2", "site");
    assert_int_equal(hs_diff_is_group(q, &p, &group, &err), 0);
    assert_false(group); /* one run each: the two-run diff */
    gdiff_params(&p, "program=app", "id=2..2", "site");
    assert_int_equal(hs_diff_is_group(q, &p, &group, &err), 0);
    assert_true(group);
    gdiff_params(&p, "id=1..1", "id=2..2", "site");
    hs_gdiff_result r;
    assert_int_equal(hs_core_gdiff(q, &p, &r, &err), 0);
    assert_int_equal(r.a.nruns, 1);
    assert_int_equal(r.b.runs[0], 2);
    assert_string_equal(r.a.at, "end");
    assert_true(r.a.total.mean == FX_END_BYTES && r.b.total.mean == FX_V2_END_BYTES);
    assert_true(r.se == 0);
    assert_int_equal(r.verdict, HS_GDIFF_SHRANK);
    assert_true(r.nrows >= 1);
    assert_string_equal(r.rows[0].name, "leak_site"); /* 20000 B -> 1000 B */
    assert_true(r.rows[0].delta == -19000 && r.rows[0].verdict == HS_GDIFF_SHRANK);
    assert_true(fabs(r.rows[0].share - 19000.0 / 19000.0) < 1e-9);
    hs_gdiff_result_clear(&r);
    gdiff_params(&p, "id=9..12", "id=2..2", "site");
    assert_int_equal(hs_core_gdiff(q, &p, &r, &err), HS_ENOENT);
}

static int check(hs_check_params *p, const char *const *kv, hs_check_result *r, hs_qerr *err)
{
    hs_check_params_init(p);
    for (int i = 0; kv[i]; i += 2) {
        int rc = hs_check_param(p, kv[i], kv[i + 1], err);
        if (rc) return rc;
    }
    return hs_core_check(q, p, r, err);
}

/* The bytes of run id's state at its peak, as top answers them: what the
 * group diff's totals are for runs without exact totals. */
static int64_t peak_state(int64_t id)
{
    hs_top_params tp;
    hs_top_result tr;
    hs_qerr err;
    hs_top_params_init(&tp);
    char sel[24];
    snprintf(sel, sizeof sel, "%lld", (long long)id);
    assert_int_equal(hs_sel_parse_run(&tp.run, sel, &err), 0);
    assert_int_equal(hs_core_top(q, &tp, &tr, &err), 0);
    int64_t b = tr.total_bytes;
    hs_top_result_clear(&tr);
    return b;
}

static void test_check_fixture(void **state)
{
    (void)state;
    hs_check_params p;
    hs_check_result r;
    hs_qerr err;
    assert_int_equal(
        check(&p, (const char *const[]){"run", "1", "max_end", "20000", NULL}, &r, &err), 0);
    assert_int_equal(r.status, HS_CHECK_FAIL); /* end 25000 B, exact */
    assert_true(r.items[0].exact && r.items[0].se == 0 && r.items[0].value == FX_END_BYTES);
    hs_check_result_clear(&r);
    assert_int_equal(
        check(&p, (const char *const[]){"run", "1", "max_end", "24.5KiB", NULL}, &r, &err), 0);
    assert_int_equal(r.status, HS_CHECK_PASS); /* 25088 B */
    hs_check_result_clear(&r);
    /* version 1 against version 2 at the peak: +11000 B, past 5 % */
    assert_int_equal(check(&p,
                           (const char *const[]){"run", "version=1", "baseline", "version=2",
                                                 "tolerance", "5%", NULL},
                           &r, &err),
                     0);
    assert_int_equal(r.status, HS_CHECK_FAIL);
    assert_true(r.items[0].value == peak_state(1) - peak_state(2));
    assert_true(r.items[0].nwhere >= 1);
    assert_string_equal(r.items[0].where[0].name, "leak_site");
    hs_check_result_clear(&r);
    assert_int_equal(check(&p,
                           (const char *const[]){"run", "version=1", "baseline", "version=2",
                                                 "tolerance", "0.2", NULL},
                           &r, &err),
                     0);
    assert_int_equal(r.status, HS_CHECK_PASS); /* 10.3 % is within 20 % */
    hs_check_result_clear(&r);
    static const char *const bad[][2] = {
        {"max_peak", "lots"}, {"max_peak", "-1"},  {"max_leak_rate", "1MiB/h"},
        {"tolerance", "5"},   {"tolerance", "x%"}, {"by", "line"},
    };
    hs_check_params_init(&p);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        if (hs_check_param(&p, bad[i][0], bad[i][1], &err) != HS_EINVAL)
            fail_msg("%s=%s accepted", bad[i][0], bad[i][1]);
    assert_int_equal(check(&p, (const char *const[]){"run", "1", NULL}, &r, &err), HS_EINVAL);
    assert_int_equal(check(&p, (const char *const[]){"run", "7", "max_end", "1", NULL}, &r, &err),
                     HS_ENOENT);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_selectors),
        cmocka_unit_test(test_sampling_var),
        cmocka_unit_test(test_gdiff_fixture),
        cmocka_unit_test(test_check_fixture),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
