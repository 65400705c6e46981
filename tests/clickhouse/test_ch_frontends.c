/* Stateless front ends (docs/clickhouse.md, "Many front ends, one
 * cluster"): two heapstore-servers, each with a buffer of its own, ship to
 * one ClickHouse database. A run starts on front end A, A dies (SIGKILL)
 * once ClickHouse holds what it acknowledged, and the collector resumes on
 * front end B, which has never seen the run: B fetches it back from
 * ClickHouse and goes on. Every answer of the API about the run must equal,
 * field by field (chcompare), those of a SQLite server that took the same
 * stream without a break. Then A comes back with its old copy of the run:
 * it must leave the run alone (B carried it further) and drop its copy.
 * Also: a front end's restart sends nothing again (its marks file), an
 * ended run leaves the buffer once ClickHouse holds it, and downsampling
 * leaves a history at the coarse resolution as it was.
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
#include <jansson.h>

#include "chcompare.h"
#include "chstream.h"
#include "chkit.h"
#include "hs_chship.h"
#include "hs_queries.h"
#include "hs_proto.h"
#include "hs_testkit.h"

static ck_server ch;
static char tmpdir[600];

/* A resumed HELLO of the run with a wrong resume key, to the front end at
 * port, which lacks the run: refused before anything is fetched. */
static void wrong_key_refused(int port)
{
    tk_buf b = {0};
    tk_header(&b);
    size_t at = b.len;
    tk_hello(&b, ck_stream_run, 3, HS_HELLO_RESUMED, NULL);
    uint8_t *p = (uint8_t *)b.p + at, *end = (uint8_t *)b.p + b.len, *last = NULL;
    int seen = 0;
    for (; (p = memmem(p, (size_t)(end - p), ck_stream_run, 16)); p++, seen++) last = p;
    assert_int_equal(seen, 2); /* the run id, then the resume key (the same bytes) */
    last[15] ^= 0xff;
    int fd = tk_connect(port);
    assert_true(fd >= 0);
    assert_int_equal(tk_send(fd, b.p, b.len), 0);
    uint64_t got = 0;
    char reason[256] = "";
    assert_int_equal(tk_wait_ack(fd, 0, &got, reason, sizeof reason, 30000), 1);
    assert_non_null(strstr(reason, "wrong resume key"));
    close(fd);
    tk_buf_free(&b);
}

/* A resumed HELLO of the run (first_seq from) to a front end that lacks it
 * while ClickHouse is away: the connection is closed, not refused. */
static void away_closed(int port, size_t from)
{
    tk_buf b = {0};
    tk_header(&b);
    tk_hello(&b, ck_stream_run, from, HS_HELLO_RESUMED, NULL);
    int fd = tk_connect(port);
    assert_true(fd >= 0);
    assert_int_equal(tk_send(fd, b.p, b.len), 0);
    uint64_t got = 0;
    char reason[256] = "";
    int rc = tk_wait_ack(fd, 0, &got, reason, sizeof reason, 90000);
    if (rc != -1) fprintf(stderr, "away: %d (%s)\n", rc, reason);
    assert_int_equal(rc, -1); /* closed (come back later), not REFUSE (give up) */
    close(fd);
    tk_buf_free(&b);
}

static void db_at(char *out, size_t len, const char *name)
{
    snprintf(out, len, "%s/%s.db", tmpdir, name);
}

/* The run moves from A to B; answers equal an uninterrupted run's. */
static void test_resume_elsewhere(void **state)
{
    (void)state;
    char url[700], scratch[700], da[700], db[700], dc[700];
    ck_url(&ch, "fleet", 0, url, sizeof url);
    ck_url(&ch, "scratch", 0, scratch, sizeof scratch);
    strncat(url, "&buffer_keep=0", sizeof url - strlen(url) - 1);
    db_at(da, sizeof da, "a");
    db_at(db, sizeof db, "b");
    db_at(dc, sizeof dc, "c");
    tk_buf body = {0};
    ck_stream_body(&body);
    size_t *off = NULL, nf = tk_frame_offsets(&body, 0, &off);
    assert_true(nf > CK_STREAM_FRAMES);
    size_t cut = nf - 15; /* events frames before and after the peak on each side */

    /* the uninterrupted run, on SQLite */
    tk_server c, a, b;
    assert_int_equal(tk_server_start(&c, dc, 0, NULL), 0);
    int fd = ck_send_part(c.port, &body, off, nf, 0, nf, 0);
    close(fd);
    assert_int_equal(tk_server_stop(&c, SIGTERM), 0);

    /* A takes the first part, acknowledges it (ClickHouse holds it), dies */
    const char *extra[] = {"--store", url, "--grace", "1s", NULL};
    assert_int_equal(tk_server_start(&a, da, 0, extra), 0);
    fd = ck_send_part(a.port, &body, off, nf, 0, cut, 0);
    tk_server_stop(&a, SIGKILL);
    close(fd);

    /* the collector resumes on B, which never saw the run (another
     * collector, with a wrong key, is refused first) */
    assert_int_equal(tk_server_start(&b, db, 0, extra), 0);
    wrong_key_refused(b.port);
    assert_int_equal(tk_q(db, "SELECT count(*) FROM runs"), 0);
    /* ClickHouse away: B cannot know the run, so it closes the connection
     * (the collector keeps its frames and comes back) rather than start it
     * over or refuse it (REFUSE would make the collector give up) */
    ck_pause(&ch);
    away_closed(b.port, cut);
    assert_int_equal(ck_restart(&ch), 0);
    assert_int_equal(tk_q(db, "SELECT count(*) FROM runs"), 0);
    fd = ck_send_part(b.port, &body, off, nf, cut, nf, HS_HELLO_RESUMED);
    close(fd);
    assert_true(tk_log_contains(&b, "resumed here: fetched from ClickHouse"));
    for (int i = 0; i < 100 && ck_int(&ch, "SELECT count() FROM fleet.runs FINAL WHERE state = "
                                           "'ended'") != 1;
         i++)
        usleep(100000);
    assert_int_equal(ck_same_answers(dc, scratch, url), 0);

    /* A comes back with its older copy: it closes it as lost after its
     * grace period, ships nothing of it, and drops it from its buffer */
    assert_int_equal(tk_server_start(&a, da, 0, extra), 0);
    /* up to 30 s: under ASan, beside other tests on two cores, 10 s once
     * ran out before A had closed and dropped it */
    for (int i = 0; i < 300 && tk_q(da, "SELECT count(*) FROM runs") != 0; i++) usleep(100000);
    assert_int_equal(tk_q(da, "SELECT count(*) FROM runs"), 0);
    assert_true(tk_log_contains(&a, "is carried on by another front end"));
    assert_int_equal(ck_same_answers(dc, scratch, url), 0);
    assert_int_equal(ck_int(&ch, "SELECT state = 'ended' FROM fleet.runs FINAL"), 1);

    /* B's ended run leaves its buffer too (buffer_keep=0); the API still
     * answers from ClickHouse */
    for (int i = 0; i < 100 && tk_q(db, "SELECT count(*) FROM runs") != 0; i++) usleep(100000);
    assert_int_equal(tk_q(db, "SELECT count(*) FROM events"), 0);
    assert_int_equal(ck_same_answers(dc, scratch, url), 0);
    assert_int_equal(tk_server_stop(&a, SIGTERM), 0);
    assert_int_equal(tk_server_stop(&b, SIGTERM), 0);
    free(off);
    tk_buf_free(&body);
}

/* A restart of a front end goes on from its marks file: nothing is sent
 * again (ClickHouse's row count stays), and the run still resumes there. */
static void test_restart_sends_nothing(void **state)
{
    (void)state;
    char url[700], dr[700];
    ck_url(&ch, "marks", 0, url, sizeof url);
    db_at(dr, sizeof dr, "r");
    tk_buf body = {0};
    ck_stream_body(&body);
    size_t *off = NULL, nf = tk_frame_offsets(&body, 0, &off);
    size_t cut = nf / 2;
    tk_server r;
    const char *extra[] = {"--store", url, NULL};
    assert_int_equal(tk_server_start(&r, dr, 0, extra), 0);
    int fd = ck_send_part(r.port, &body, off, nf, 0, cut, 0);
    close(fd);
    assert_int_equal(tk_server_stop(&r, SIGTERM), 0);
    const char *count = "SELECT (SELECT count() FROM marks.events) + (SELECT count() FROM "
                        "marks.snapshots) + (SELECT count() FROM marks.frames) + (SELECT "
                        "count() FROM marks.traces) + (SELECT count() FROM marks.run_stacks)";
    long long rows = ck_int(&ch, count);
    assert_true(rows > 0);
    assert_int_equal(tk_server_start(&r, dr, 0, extra), 0);
    usleep(1500000); /* several passes */
    assert_int_equal(ck_int(&ch, count), rows);
    fd = ck_send_part(r.port, &body, off, nf, cut, nf, HS_HELLO_RESUMED);
    close(fd);
    assert_int_equal(tk_server_stop(&r, SIGTERM), 0);
    /* every event once: an open segment shipped as it grew leaves one row
     * (its closed state) once merged */
    assert_int_equal(ck_int(&ch, "SELECT sum(n_events) FROM marks.events FINAL"),
                     tk_q(dr, "SELECT sum(n_events) FROM events_all"));
    assert_int_equal(ck_int(&ch, "SELECT state = 'ended' FROM marks.runs FINAL"), 1);
    free(off);
    tk_buf_free(&body);
}

#define DS_BY 8

/* Downsampling: the history at DS_BY buckets a point equals the fine one
 * merged so, the peak kept, before and after ClickHouse has deleted the
 * fine rows (then the history has one point per span); and only span rows
 * are left. */
static void test_downsample(void **state)
{
    (void)state;
    char url[700], dd[700], err[512], path[200];
    ck_url(&ch, "ds", 0, url, sizeof url);
    db_at(dd, sizeof dd, "ds");
    tk_buf body = {0};
    ck_stream_body(&body);
    size_t *off = NULL, nf = tk_frame_offsets(&body, 0, &off);
    tk_server d;
    const char *extra[] = {"--store", url, NULL};
    assert_int_equal(tk_server_start(&d, dd, 0, extra), 0);
    int fd = ck_send_part(d.port, &body, off, nf, 0, nf, 0);
    close(fd);
    assert_int_equal(tk_server_stop(&d, SIGTERM), 0);
    long long run = ck_int(&ch, "SELECT id FROM ds.runs FINAL");
    long long g = ck_int(&ch, "SELECT granularity_ns FROM ds.runs FINAL");
    snprintf(path, sizeof path, "/api/runs/%lld/history", run);
    json_t *fine = ck_ask(url, path);
    json_t *fp = json_object_get(fine, "points");
    assert_true(json_array_size(fp) >= 40);
    int64_t peak = json_integer_value(json_object_get(json_object_get(fine, "run"), "peak_bytes"));
    assert_int_equal(ck_highest(fp), peak);
    json_t *want = ck_spans(fp, g, DS_BY);

    hs_chship *sh;
    int runs = 0;
    assert_int_equal(hs_chship_new(&sh, dd, url, err, sizeof err), 0);
    int rc = hs_chship_downsample(sh, 0, DS_BY, &runs, err, sizeof err);
    if (rc) fprintf(stderr, "downsample: %s\n", err);
    assert_int_equal(rc, 0);
    assert_int_equal(runs, 1);
    for (int pass = 0; pass < 2; pass++) {
        if (pass) /* ClickHouse has deleted the fine rows (a mutation) */
            for (int i = 0; i < 300 && ck_int(&ch, "SELECT count() FROM ds.heap_series WHERE "
                                                   "span = 1") != 0;
                 i++)
                usleep(100000);
        json_t *got = ck_ask(url, path);
        json_t *gp = json_object_get(got, "points");
        /* before the delete the fine rows are still there, bar the last of
         * each span: at the coarse resolution, the same; after it, only
         * the coarse points */
        json_t *gc = ck_spans(gp, g, DS_BY), *cmp = pass ? gp : gc;
        if (!json_equal(cmp, want)) {
            char *a = json_dumps(want, JSON_COMPACT), *b = json_dumps(cmp, JSON_COMPACT);
            fprintf(stderr, "pass %d: want %.600s\ngot  %.600s\n", pass, a, b);
            free(a);
            free(b);
        }
        assert_true(json_equal(cmp, want));
        assert_true(json_equal(gc, want));
        json_decref(gc);
        assert_int_equal(ck_highest(gp), peak);
        assert_int_equal(
            json_integer_value(json_object_get(json_object_get(got, "run"), "peak_bytes")), peak);
        json_decref(got);
    }
    assert_int_equal(ck_int(&ch, "SELECT count() FROM ds.heap_series WHERE span = 1"), 0);
    assert_int_equal(ck_int(&ch, "SELECT count() FROM ds.heap_series FINAL"),
                     (long long)json_array_size(want));
    /* again: nothing more to merge, the same answer */
    assert_int_equal(hs_chship_downsample(sh, 0, DS_BY, &runs, err, sizeof err), 0);
    assert_int_equal(ck_int(&ch, "SELECT count() FROM ds.heap_series FINAL"),
                     (long long)json_array_size(want));
    hs_chship_free(sh);
    json_decref(want);
    json_decref(fine);
    free(off);
    tk_buf_free(&body);
}

int main(void)
{
    ck_require();
    const char *bdir = getenv("HS_BUILD_DIR");
    snprintf(tmpdir, sizeof tmpdir, "%s/tests/tmp/ch_frontends.%d", bdir ? bdir : "/tmp",
             (int)getpid());
    char chdir_[700], cmd[1400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s'", tmpdir, tmpdir);
    if (system(cmd)) return 1;
    snprintf(chdir_, sizeof chdir_, "%s/clickhouse", tmpdir);
    if (ck_start(&ch, chdir_, 0, NULL)) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_resume_elsewhere),
        cmocka_unit_test(test_restart_sends_nothing),
        cmocka_unit_test(test_downsample),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    ck_stop(&ch);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (!rc && system(cmd)) rc = 1;
    return rc;
}
