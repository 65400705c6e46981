/* kit_check: comparisons with a tolerance (kit_check.h). */
#include "hs_testkit.h"

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>

#include <cmocka.h>

void tk_near(const char *what, double got, double want, double tol)
{
    double off = fabs(got - want);
    if (!(off <= tol))
        fprintf(stderr, "%s: %.6g, expected %.6g within %.3g (%.3g off)\n", what, got, want, tol,
                off);
    assert_true(off <= tol);
}

void tk_near_rel(const char *what, double got, double want, double rel)
{
    double r = want != 0 ? (got - want) / want : got;
    if (!(r >= -rel && r <= rel))
        fprintf(stderr, "%s: %.6g, expected %.6g within %.3g%%\n", what, got, want, rel * 100);
    assert_true(r >= -rel && r <= rel);
}
