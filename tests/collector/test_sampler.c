/* Unit tests of the sampler (collector/hs_thread.c): the byte intervals
 * between samples are exponential with the configured mean, and the weight
 * size / (1 - exp(-size / mean)) makes the sampled bytes an unbiased estimate
 * of the allocated ones, whatever the sizes.
 *
 * The checks are statistical, over many draws from fixed seeds (so a run is
 * reproducible), each within a stated tolerance of five standard deviations
 * of the quantity checked, computed from the case itself: a correct sampler
 * fails a check with probability below 1e-6, and the bugs a sampler has (a
 * wrong mean, a weight that ignores the chance of sampling, a count off by
 * one size) move the result by tens of deviations. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "hs_testkit.h"

#include "hs_error.h"
#include "hs_thread.h"

#define SIGMAS 5.0

/* Intervals: a draw is floor(E) + 1 bytes for an exponential E of the
 * configured mean m, a geometric law: P(draw <= k) = 1 - exp(-k / m) and its
 * mean is 1 / (1 - exp(-1 / m)), about m + 1/2. Checked: the mean, and the
 * share of draws up to fractions of m. */
static void test_sampler_intervals(void **state)
{
    (void)state;
    static const uint64_t means[] = {64, 4096, 524288, 1u << 30};
    static const double at[] = {0.1, 0.5, 1.0, 2.0, 4.0};
    enum { N = 1000000 };
    for (size_t c = 0; c < HS_COUNTOF(means); c++) {
        double m = (double)means[c];
        hs__sampler_init(means[c], 42 + c);
        hs_tls t = {0};
        double sum = 0;
        uint64_t below[HS_COUNTOF(at)] = {0}, k[HS_COUNTOF(at)];
        for (size_t j = 0; j < HS_COUNTOF(at); j++) k[j] = (uint64_t)ceil(at[j] * m);
        for (int i = 0; i < N; i++) {
            uint64_t v = hs__sampler_next(&t);
            assert_true(v >= 1);
            sum += (double)v;
            for (size_t j = 0; j < HS_COUNTOF(at); j++) below[j] += v <= k[j];
        }
        char what[64];
        snprintf(what, sizeof what, "mean interval at %llu", (unsigned long long)means[c]);
        tk_near(what, sum / N, 1 / -expm1(-1 / m), SIGMAS * m / sqrt(N));
        for (size_t j = 0; j < HS_COUNTOF(at); j++) {
            double p = -expm1(-(double)k[j] / m);
            snprintf(what, sizeof what, "P(interval <= %.1f mean) at %llu", at[j],
                     (unsigned long long)means[c]);
            tk_near(what, (double)below[j] / N, p, SIGMAS * sqrt(p * (1 - p) / N));
        }
    }
}

/* A size stream, as a case draws it. */
enum shape { FIXED, LOG_UNIFORM, BIMODAL };

static uint64_t rng = 1;

static uint64_t rnd(void)
{
    rng ^= rng >> 12;
    rng ^= rng << 25;
    rng ^= rng >> 27;
    return rng * 0x2545F4914F6CDD1Dull;
}

static uint64_t draw_size(enum shape sh, uint64_t a, uint64_t b)
{
    switch (sh) {
    case FIXED:
        return a;
    case LOG_UNIFORM: /* a .. b, uniform in log */
        return (uint64_t)exp(log((double)a) +
                             (log((double)b) - log((double)a)) * (double)(rnd() >> 11) * 0x1.0p-53);
    case BIMODAL: /* mostly a, one in 64 b */
        return rnd() % 64 ? a : b;
    }
    return a;
}

/* The hooks' rule (hs_hooks.c, alloc_slow): a countdown of bytes drawn by
 * hs__sampler_next; an allocation of n bytes is sampled when n reaches the
 * countdown, which is then drawn again, else n comes off it. For each case:
 * the number of samples against its expectation sum(p), p = 1 - exp(-n/m),
 * and the sum of the sampled weights against the bytes allocated, with the
 * estimator's variance sum(n^2 (1 - p) / p). */
static void test_sampler_unbiased(void **state)
{
    (void)state;
    static const struct {
        const char *name;
        uint64_t mean;
        enum shape shape;
        uint64_t a, b;
        int n;
    } cases[] = {
        {"small blocks", 4096, FIXED, 16, 0, 4000000},
        {"blocks of the mean", 4096, FIXED, 4096, 0, 400000},
        {"large blocks", 4096, FIXED, 40000, 0, 100000},
        {"log-uniform 1 B .. 64 means", 65536, LOG_UNIFORM, 1, 65536 * 64, 400000},
        {"bimodal 32 B and 8 means", 524288, BIMODAL, 32, 524288 * 8, 2000000},
        {"zero-byte blocks among others", 256, BIMODAL, 0, 300, 400000},
    };
    for (size_t c = 0; c < HS_COUNTOF(cases); c++) {
        double m = (double)cases[c].mean;
        hs__sampler_init(cases[c].mean, 7 + c);
        rng = 0x9e3779b97f4a7c15ull ^ c;
        hs_tls t = {0};
        uint64_t countdown = hs__sampler_next(&t);
        double bytes = 0, est = 0, var = 0, samples = 0, want_samples = 0, var_samples = 0;
        for (int i = 0; i < cases[c].n; i++) {
            uint64_t n = draw_size(cases[c].shape, cases[c].a, cases[c].b);
            double p = -expm1(-(double)n / m);
            bytes += (double)n;
            want_samples += p;
            var_samples += p * (1 - p);
            if (p > 0) var += (double)n * (double)n * (1 - p) / p;
            if (n < countdown) {
                countdown -= n;
                continue;
            }
            countdown = hs__sampler_next(&t);
            uint64_t w = hs__sampler_weight(n);
            assert_true(w >= n);
            samples++;
            est += (double)w;
        }
        char what[96];
        snprintf(what, sizeof what, "%s: samples", cases[c].name);
        tk_near(what, samples, want_samples, SIGMAS * (sqrt(var_samples) + 1));
        snprintf(what, sizeof what, "%s: estimated bytes", cases[c].name);
        tk_near(what, est, bytes, SIGMAS * (sqrt(var) + 1));
    }
}

/* Weights against the formula, computed apart in long double; rate 1 and
 * size 0 weigh what they are. */
static void test_sampler_weight_table(void **state)
{
    (void)state;
    static const struct {
        uint64_t mean, size;
    } cases[] = {
        {4096, 1},
        {4096, 16},
        {4096, 2048},
        {4096, 4096},
        {4096, 40960},
        {524288, 8},
        {524288, 524288},
        {524288, 1u << 30},
        {1, 12345},
        {1000, 0},
        {4096, (uint64_t)1 << 62},
        {4096, UINT64_MAX},
    };
    for (size_t c = 0; c < HS_COUNTOF(cases); c++) {
        hs__sampler_init(cases[c].mean, 1);
        uint64_t w = hs__sampler_weight(cases[c].size);
        long double s = (long double)cases[c].size, m = (long double)cases[c].mean;
        long double want = cases[c].mean == 1 || !cases[c].size ? s : s / -expm1l(-s / m);
        if (want >= 0x1p64L) {
            assert_true(w == UINT64_MAX);
            continue;
        }
        if (fabsl((long double)w - want) > 0.5L + want * 1e-12L)
            fail_msg("weight(%llu) at mean %llu: %llu, expected %.3Lf",
                     (unsigned long long)cases[c].size, (unsigned long long)cases[c].mean,
                     (unsigned long long)w, want);
        assert_true(w >= cases[c].size);
    }
}

/* At mean 1 every call samples (a countdown of 0); threads of one run draw
 * different streams. */
static void test_sampler_seeds(void **state)
{
    (void)state;
    hs__sampler_init(1, 5);
    hs_tls t = {0};
    for (int i = 0; i < 100; i++) assert_true(hs__sampler_next(&t) == 0);

    uint64_t a[64], b[64], c[64];
    hs__sampler_init(4096, 99);
    hs_tls t1 = {0}, t2 = {0};
    for (int i = 0; i < 64; i++) a[i] = hs__sampler_next(&t1);
    for (int i = 0; i < 64; i++) b[i] = hs__sampler_next(&t2);
    assert_memory_not_equal(a, b, sizeof a);
    /* A thread's stream depends on the seed and on how many threads drew
     * before it, so a third thread's is neither of the first two. */
    hs_tls t3 = {0};
    for (int i = 0; i < 64; i++) c[i] = hs__sampler_next(&t3);
    assert_memory_not_equal(c, a, sizeof a);
    assert_memory_not_equal(c, b, sizeof b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sampler_intervals),
        cmocka_unit_test(test_sampler_unbiased),
        cmocka_unit_test(test_sampler_weight_table),
        cmocka_unit_test(test_sampler_seeds),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
