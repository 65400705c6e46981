/* Downsampling on the two-shard cluster recipe (server/ch_downsample.c):
 * two local ClickHouse servers as the shards of heapstore_two_shards,
 * schema/clickhouse/cluster/cluster.sql on both, the query fixtures' four
 * runs shipped through shard 1 (they land on both shards). Downsampling
 * through shard 1 with the shards' HTTP addresses in shards= merges and
 * deletes on each shard's own tables: every shard then holds fewer
 * heap_series rows, only merged ones, and each run's history (asked
 * through shard 2) is its fine history merged span by span, the peak kept.
 * Without shards= the second shard cannot be reached (both loopback
 * servers are 127.0.0.1, on other ports): refused, and nothing changed.
 * Retention drops old partitions on every shard the same way.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "chkit.h"
#include "hs_chship.h"
#include "hs_chttp.h"
#include "hs_queries.h"
#include "hs_testkit.h"
#include "queries/fixture.h"

#define BY 4 /* buckets a merged row spans */

static ck_server shard[2];
static char tmpdir[600];

/* Writes the fixtures' runs (app 1 and 2, trend, rank) and ships them
 * through url; the first fixture's file into first_db. */
static void ship_fixtures(const char *url, char *first_db, size_t len)
{
    int (*const build[3])(const char *) = {fx_build, fx_build_trend, NULL};
    char err[512];
    for (int i = 0; i < 3; i++) {
        char p[700];
        snprintf(p, sizeof p, "%s/fx%d.db", tmpdir, i);
        assert_int_equal(build[i] ? build[i](p) : fx_build_rank(p, NULL, NULL), 0);
        if (!i) snprintf(first_db, len, "%s", p);
        hs_chship *sh;
        assert_int_equal(hs_chship_new(&sh, p, url, err, sizeof err), 0);
        int rc = hs_chship_pass(sh, err, sizeof err);
        if (rc) fprintf(stderr, "ship: %s\n", err);
        assert_int_equal(rc, 0);
        hs_chship_free(sh);
    }
}

static long long rows(int i, const char *where)
{
    char sql[300];
    snprintf(sql, sizeof sql, "SELECT count() FROM ds.heap_series_local FINAL WHERE %s", where);
    return ck_int(&shard[i], sql);
}

/* Downsampling through url; its error (if any) into err. */
static int downsample(const char *db, const char *url, int *runs, char *err, size_t len)
{
    hs_chship *sh;
    assert_int_equal(hs_chship_new(&sh, db, url, err, len), 0);
    int rc = hs_chship_downsample(sh, 0, BY, runs, err, len);
    hs_chship_free(sh);
    return rc;
}

/* Run k (by id) of the cluster: its id, its fine history as spans should
 * merge it (*want) and its peak; the number of merged points. */
static size_t expect(const char *ask, int k, long long *id, json_t **want, int64_t *peak)
{
    char sql[300], path[200];
    snprintf(sql, sizeof sql, "SELECT DISTINCT id FROM ds.runs ORDER BY id LIMIT 1 OFFSET %d", k);
    *id = ck_int(&shard[0], sql);
    snprintf(sql, sizeof sql, "SELECT any(granularity_ns) FROM ds.runs WHERE id = %lld", *id);
    int64_t g = ck_int(&shard[0], sql);
    snprintf(path, sizeof path, "/api/runs/%lld/history", *id);
    json_t *fine = ck_ask(ask, path), *fp = json_object_get(fine, "points");
    snprintf(sql, sizeof sql, "SELECT count() FROM ds.heap_series FINAL WHERE run = %lld", *id);
    assert_int_equal(json_array_size(fp), ck_int(&shard[0], sql)); /* a point a bucket */
    *peak = json_integer_value(json_object_get(json_object_get(fine, "run"), "peak_bytes"));
    assert_true(*peak > 0);
    assert_int_equal(ck_highest(fp), *peak);
    *want = ck_spans(fp, g, BY);
    assert_true(json_array_size(*want) < json_array_size(fp));
    json_decref(fine);
    return json_array_size(*want);
}

static void test_every_shard(void **state)
{
    (void)state;
    char ship[700], ask[700], with[900], fx[700], err[512], path[200];
    assert_int_equal(ck_cluster_recipe(&shard[0], "ds"), 0);
    assert_int_equal(ck_cluster_recipe(&shard[1], "ds"), 0);
    ck_url(&shard[0], "ds", 0, ship, sizeof ship);
    strncat(ship, "&insert_distributed_sync=1", sizeof ship - strlen(ship) - 1);
    ck_url(&shard[1], "ds", 0, ask, sizeof ask);
    ship_fixtures(ship, fx, sizeof fx);
    long long before[2];
    for (int i = 0; i < 2; i++) {
        before[i] = rows(i, "1");
        fprintf(stderr, "shard %d: %lld runs, %lld heap_series rows\n", i + 1,
                ck_int(&shard[i], "SELECT count() FROM ds.runs_local FINAL"), before[i]);
        assert_true(ck_int(&shard[i], "SELECT count() FROM ds.runs_local FINAL") > 0);
    }
    /* each run's fine history, and what it should become */
    long long id[4];
    json_t *want[4];
    int64_t peak[4];
    size_t merged = 0;
    for (int k = 0; k < 4; k++) merged += expect(ask, k, &id[k], &want[k], &peak[k]);
    /* without shards=: shard 2 is not reached, nothing is done */
    int runs = 0;
    assert_int_not_equal(downsample(fx, ship, &runs, err, sizeof err), 0);
    fprintf(stderr, "without shards=: %s\n", err);
    assert_non_null(strstr(err, "shard 2 of cluster heapstore_two_shards is not reached"));
    for (int i = 0; i < 2; i++) assert_int_equal(rows(i, "span > 1"), 0);
    /* with every shard's address */
    snprintf(with, sizeof with, "%s&shards=127.0.0.1:%d,127.0.0.1:%d", ship, shard[0].http_port,
             shard[1].http_port);
    int rc = downsample(fx, with, &runs, err, sizeof err);
    if (rc) fprintf(stderr, "downsample: %s\n", err);
    assert_int_equal(rc, 0);
    assert_int_equal(runs, 4);
    for (int i = 0; i < 2; i++) { /* the deletes are mutations, done in the background */
        for (int w = 0; w < 300 && rows(i, "span = 1") != 0; w++) usleep(100000);
        long long after = rows(i, "1");
        fprintf(stderr, "shard %d: %lld heap_series rows after\n", i + 1, after);
        assert_int_equal(rows(i, "span = 1"), 0);
        assert_true(after > 0 && after < before[i]);
    }
    assert_int_equal(rows(0, "1") + rows(1, "1"), (long long)merged);
    for (int k = 0; k < 4; k++) {
        snprintf(path, sizeof path, "/api/runs/%lld/history", id[k]);
        json_t *got = ck_ask(ask, path), *gp = json_object_get(got, "points");
        if (!json_equal(gp, want[k])) {
            char *a = json_dumps(want[k], JSON_COMPACT), *b = json_dumps(gp, JSON_COMPACT);
            fprintf(stderr, "run %lld: want %.800s\ngot  %.800s\n", id[k], a, b);
            free(a);
            free(b);
        }
        assert_true(json_equal(gp, want[k]));
        assert_int_equal(ck_highest(gp), peak[k]);
        assert_int_equal(
            json_integer_value(json_object_get(json_object_get(got, "run"), "peak_bytes")),
            peak[k]);
        json_decref(got);
    }
    /* again: nothing left to merge, the same rows */
    assert_int_equal(downsample(fx, with, &runs, err, sizeof err), 0);
    assert_int_equal(rows(0, "1") + rows(1, "1"), (long long)merged);
    for (int k = 0; k < 4; k++) json_decref(want[k]);
}

/* Retention on the cluster (hs_chship_retain): a run of 2020 on each
 * shard goes from each shard's own tables, a run of today stays; without shards=
 * the second shard is not reached, refused, and nothing is dropped. */
static void test_retain_every_shard(void **state)
{
    (void)state;
    char url[700], with[900], fx[700], err[512], out[200], sql[300];
    assert_int_equal(ck_cluster_recipe(&shard[0], "rt"), 0);
    assert_int_equal(ck_cluster_recipe(&shard[1], "rt"), 0);
    ck_url(&shard[0], "rt", 0, url, sizeof url);
    snprintf(fx, sizeof fx, "%s/rt.db", tmpdir); /* the shipper's buffer, not shipped */
    assert_int_equal(fx_build(fx), 0);
    long long today[2] = {1, 1};
    for (int i = 0; i < 2; i++) { /* a run of today and one of 2020 on each shard */
        snprintf(sql, sizeof sql,
                 "INSERT INTO rt.runs_local (id, uuid, state, day, ver) VALUES (%d, 'new%d', "
                 "'ended', today(), 1), (%d, 'old%d', 'ended', toDate('2020-01-15'), 1)",
                 60 + i, i, 70 + i, i);
        assert_int_equal(ck_sql(&shard[i], sql, out, sizeof out), 0);
    }
    hs_chship *sh;
    int dropped = 0;
    assert_int_equal(hs_chship_new(&sh, fx, url, err, sizeof err), 0);
    assert_int_not_equal(hs_chship_retain(sh, 12, &dropped, err, sizeof err), 0);
    hs_chship_free(sh);
    fprintf(stderr, "retention without shards=: %s\n", err);
    assert_non_null(strstr(err, "retention: shard 2 of cluster heapstore_two_shards"));
    assert_int_equal(dropped, 0);
    for (int i = 0; i < 2; i++)
        assert_int_equal(ck_int(&shard[i], "SELECT count() FROM rt.runs_local FINAL"),
                         today[i] + 1);
    snprintf(with, sizeof with, "%s&shards=127.0.0.1:%d,127.0.0.1:%d", url, shard[0].http_port,
             shard[1].http_port);
    assert_int_equal(hs_chship_new(&sh, fx, with, err, sizeof err), 0);
    int rc = hs_chship_retain(sh, 12, &dropped, err, sizeof err);
    if (rc) fprintf(stderr, "retain: %s\n", err);
    hs_chship_free(sh);
    assert_int_equal(rc, 0);
    assert_int_equal(dropped, 2); /* one partition of runs on each shard */
    for (int i = 0; i < 2; i++) {
        assert_int_equal(ck_int(&shard[i], "SELECT count() FROM rt.runs_local FINAL WHERE "
                                           "day < toDate('2021-01-01')"),
                         0);
        assert_int_equal(ck_int(&shard[i], "SELECT count() FROM rt.runs_local FINAL"), today[i]);
    }
}

int main(void)
{
    ck_require();
    tk_tmpdir(tmpdir, sizeof tmpdir, "ch_downsample");
    char dir[700], cmd[1400];
    int tcp[2] = {tk_free_port(), tk_free_port()};
    for (int i = 0; i < 2; i++) {
        snprintf(dir, sizeof dir, "%s/shard%d", tmpdir, i + 1);
        if (ck_start(&shard[i], dir, i + 1, tcp)) return 1;
    }
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_every_shard),
                                       cmocka_unit_test(test_retain_every_shard)};
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    ck_stop(&shard[0]);
    ck_stop(&shard[1]);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (!rc && system(cmd)) rc = 1;
    return rc;
}
