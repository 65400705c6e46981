/* test_rel_store_run: `heapstore run`, which starts a server of its own for
 * its database and stops it once the run is stored (right after its last
 * HTTP query), leaves the whole database in the .db file: a copy of that
 * file alone is read by `heapstore runs`. Labelled nosan: the program runs
 * under the real collector, which an ASan build cannot preload into an
 * uninstrumented program. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "hs_testkit.h"

static void test_run_leaves_no_wal(void **state)
{
    (void)state;
    char dir[600], db[700], wal[800], copy[800], cmd[2000], cli[600], wl[600];
    tk_tmpdir(dir, sizeof dir, "store-run-wal");
    snprintf(db, sizeof db, "%s/hs.db", dir);
    snprintf(cli, sizeof cli, "%s", tk_build_path("bin/heapstore"));
    const char *bdir = getenv("HS_BUILD_DIR");
    snprintf(wl, sizeof wl, "%s/tests/wl_rel", bdir ? bdir : "build");
    const char *run[] = {cli, "run", "--db", db, "--", wl, "churn", "0.3", "20000", NULL};
    tk_out o;
    assert_int_equal(
        tk_run(&o, run, (const char *const[]){"HEAPSTORE_URL=", NULL}, TK_PRELOAD_NONE, 0), 0);
    if (o.code) fprintf(stderr, "heapstore run: %s\n", o.err);
    assert_int_equal(o.code, 0);
    tk_out_free(&o);
    snprintf(wal, sizeof wal, "%s-wal", db);
    assert_int_equal(tk_file_size(wal), 0);
    snprintf(copy, sizeof copy, "%s/copy.db", dir);
    snprintf(cmd, sizeof cmd, "cp '%s' '%s'", db, copy);
    assert_int_equal(system(cmd), 0);
    const char *runs[] = {cli, "runs", "--db", copy, NULL};
    assert_int_equal(
        tk_run(&o, runs, (const char *const[]){"HEAPSTORE_URL=", NULL}, TK_PRELOAD_NONE, 0), 0);
    if (o.code) fprintf(stderr, "heapstore runs: %s\n", o.err);
    assert_int_equal(o.code, 0);
    assert_non_null(strstr(o.out, "wl_rel"));
    assert_non_null(strstr(o.out, "ended"));
    tk_out_free(&o);
    assert_int_equal(tk_q(copy, "SELECT count(*) FROM runs WHERE state = 'ended'"), 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_run_leaves_no_wal),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
