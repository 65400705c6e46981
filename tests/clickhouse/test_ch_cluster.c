/* The cluster recipe for real: two local ClickHouse servers as the two
 * shards of cluster heapstore_two_shards (tests/clickhouse/server.xml.in),
 * schema/clickhouse/cluster/cluster.sql applied on both (local tables and
 * Distributed tables over them, sharded by run). Runs written by the
 * server's storage code are shipped through shard 1 (insert_distributed_sync
 * in the store URL), land on both shards, and the ClickHouse store asked
 * through shard 2 gives the SQLite store's answers (chcompare.h).
 */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "chcompare.h"
#include "chkit.h"
#include "chstream.h"
#include "hs_proto.h"
#include "hs_testkit.h"
#include "hs_chttp.h"
#include "queries/fixture.h"

static ck_server shard[2];
static char tmpdir[600];

/* One fixture (one database of the cluster): shipped through shard 1,
 * asked through shard 2. */
static int one(const char *name, int (*build)(const char *path))
{
    char ship[700], ask[700], p[700], db[64];
    snprintf(db, sizeof db, "cl_%s", name);
    assert_int_equal(ck_cluster_recipe(&shard[0], db), 0);
    assert_int_equal(ck_cluster_recipe(&shard[1], db), 0);
    ck_url(&shard[0], db, 0, ship, sizeof ship);
    strncat(ship, "&insert_distributed_sync=1", sizeof ship - strlen(ship) - 1);
    ck_url(&shard[1], db, 0, ask, sizeof ask);
    snprintf(p, sizeof p, "%s/%s.db", tmpdir, name);
    assert_int_equal(build(p), 0);
    return ck_same_answers(p, ship, ask);
}

static int build_rank(const char *path)
{
    return fx_build_rank(path, NULL, NULL);
}

static void test_two_shards(void **state)
{
    (void)state;
    int n = one("app", fx_build) + one("rank", build_rank) + one("trend", fx_build_trend);
    assert_int_equal(n, 0);
    /* both shards hold runs, every run on one shard only, with its events */
    const char *sum = "SELECT (SELECT uniqExact(id) FROM cl_app.runs_local) + (SELECT "
                      "uniqExact(id) FROM cl_rank.runs_local) + (SELECT uniqExact(id) FROM "
                      "cl_trend.runs_local)";
    long long a = ck_int(&shard[0], sum), b = ck_int(&shard[1], sum);
    fprintf(stderr, "runs on shard 1: %lld, on shard 2: %lld\n", a, b);
    assert_true(a > 0 && b > 0);
    assert_int_equal(a + b, 4);
    for (int i = 0; i < 2; i++)
        assert_int_equal(ck_int(&shard[i], "SELECT count() FROM cl_app.events_local WHERE run NOT "
                                           "IN (SELECT id FROM cl_app.runs_local)"),
                         0);
}

/* A run moves between front ends over the cluster: front end A ships
 * through shard 1, dies; the collector resumes on front end B, which
 * ships through shard 2 and fetches the run back over the Distributed
 * tables; the answers (asked through shard 2) equal an uninterrupted
 * SQLite run's. */
static void test_moved_run(void **state)
{
    (void)state;
    char ua[700], ub[700], scratch[700], da[700], db[700], dc[700];
    assert_int_equal(ck_cluster_recipe(&shard[0], "cl_fleet"), 0);
    assert_int_equal(ck_cluster_recipe(&shard[1], "cl_fleet"), 0);
    ck_url(&shard[0], "cl_fleet", 0, ua, sizeof ua);
    ck_url(&shard[1], "cl_fleet", 0, ub, sizeof ub);
    strncat(ua, "&insert_distributed_sync=1", sizeof ua - strlen(ua) - 1);
    strncat(ub, "&insert_distributed_sync=1", sizeof ub - strlen(ub) - 1);
    ck_url(&shard[0], "cl_scratch", 0, scratch, sizeof scratch);
    snprintf(da, sizeof da, "%s/fa.db", tmpdir);
    snprintf(db, sizeof db, "%s/fb.db", tmpdir);
    snprintf(dc, sizeof dc, "%s/fc.db", tmpdir);
    tk_buf body = {0};
    ck_stream_body(&body);
    size_t *off = NULL, nf = tk_frame_offsets(&body, 0, &off), cut = nf - 15;
    tk_server a, b, c;
    assert_int_equal(tk_server_start(&c, dc, 0, NULL), 0);
    close(ck_send_part(c.port, &body, off, nf, 0, nf, 0));
    assert_int_equal(tk_server_stop(&c, SIGTERM), 0);
    const char *xa[] = {"--store", ua, NULL}, *xb[] = {"--store", ub, NULL};
    assert_int_equal(tk_server_start(&a, da, 0, xa), 0);
    int fd = ck_send_part(a.port, &body, off, nf, 0, cut, 0);
    tk_server_stop(&a, SIGKILL);
    close(fd);
    assert_int_equal(tk_server_start(&b, db, 0, xb), 0);
    close(ck_send_part(b.port, &body, off, nf, cut, nf, HS_HELLO_RESUMED));
    assert_int_equal(tk_server_stop(&b, SIGTERM), 0);
    assert_true(tk_log_contains(&b, "resumed here: fetched from ClickHouse"));
    assert_int_equal(ck_same_answers(dc, scratch, ub), 0);
    free(off);
    tk_buf_free(&body);
}

int main(void)
{
    ck_require();
    tk_tmpdir(tmpdir, sizeof tmpdir, "ch_cluster");
    char dir[700], cmd[1400];
    int tcp[2] = {tk_free_port(), tk_free_port()};
    for (int i = 0; i < 2; i++) {
        snprintf(dir, sizeof dir, "%s/shard%d", tmpdir, i + 1);
        if (ck_start(&shard[i], dir, i + 1, tcp)) return 1;
    }
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_two_shards),
                                       cmocka_unit_test(test_moved_run)};
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    ck_stop(&shard[0]);
    ck_stop(&shard[1]);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (!rc && system(cmd)) rc = 1;
    return rc;
}
