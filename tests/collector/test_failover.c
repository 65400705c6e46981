/* A list of addresses in HEAPSTORE_URL (collector/hs_sender.h), end to end
 * on SQLite servers: hs-example (whose heap is known: 512 KiB leaked per
 * round by leaky_cache_add, a 64 MiB index built and freed by build_index)
 * under the real collector, every allocation sampled, its URL listing
 * real heapstore-servers on loopback and addresses where nothing listens.
 *   - the first address dead (nothing listening): the run is stored whole
 *     on the second, nothing said on stderr;
 *   - the first address stalled (a listener whose queue is full: SYNs go
 *     unanswered, as for a host that is gone): the same, once the
 *     collector's connect bound (3 s) has passed;
 *   - the first front end refuses the run (a token it does not accept):
 *     the second stores it; every front end refuses: given up after one
 *     refusal each;
 *   - the seed picks the first address (seed mod n): four runs with seeds
 *     1..4 over two servers land two on each;
 *   - the first server killed mid-run: the collector resumes on the
 *     second, which stores the run to its end, whole (with SQLite servers
 *     a run moved this way is two runs of one uuid, one per database; with
 *     front ends of one ClickHouse store it is one run:
 *     tests/clickhouse/test_ch_failover.c);
 *   - the CLI: `heapstore run` and a query with the list, the first
 *     address dead; a malformed list refused.
 */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "hs_testkit.h"

#define KIB 1024ll
#define MIB (1024 * KIB)

static char dir[600];

static void db_at(char *out, size_t len, const char *name)
{
    snprintf(out, len, "%s/%s.db", dir, name);
}

/* hs-example for rounds rounds of round_ms, its URL url and more env
 * entries (NULL-terminated, at most 4); its stderr (owned). */
static char *run_example(const char *url, int rounds, int round_ms, const char *const *more)
{
    char r[16], ms[16];
    snprintf(r, sizeof r, "%d", rounds);
    snprintf(ms, sizeof ms, "%d", round_ms);
    const char *argv[] = {tk_build_path("bin/hs-example"), "--rounds", r, "--round-ms", ms, NULL};
    const char *env[10] = {tk_env("HEAPSTORE_URL=%s", url), "HEAPSTORE_SAMPLE_BYTES=1",
                           "HEAPSTORE_EXIT_FLUSH_MS=30000"};
    for (int i = 0; more && more[i] && i < 4; i++) env[3 + i] = more[i];
    tk_out o;
    assert_int_equal(tk_run(&o, argv, env, TK_PRELOAD_COLLECTOR, 120), 0);
    tk_expect_ok(&o);
    char *err = strdup(o.err);
    tk_out_free(&o);
    return err;
}

/* The self bytes of function fn at moment at of run (by=function). */
static long long fn_bytes(int port, long long run, const char *at, const char *fn)
{
    char path[300];
    snprintf(path, sizeof path, "/api/runs/%lld/top?at=%s&by=function&limit=500", run, at);
    json_t *j = tk_api_json(port, path);
    long long v = tk_rows_sum(j, "rows", fn, "self_bytes");
    json_decref(j);
    return v;
}

/* The one run of the server holds the whole of hs-example's rounds. */
static void check_whole(const tk_server *s, int rounds)
{
    assert_int_equal(tk_poll(s->db, 1, 30000, "SELECT count(*) FROM runs WHERE state = 'ended'"),
                     1);
    assert_int_equal(tk_q(s->db, "SELECT count(*) FROM runs"), 1);
    assert_int_equal(tk_q(s->db, "SELECT alloc_events = bye_alloc_events AND free_events = "
                                 "bye_free_events AND alloc_events > 0 FROM runs"),
                     1);
    long long run = tk_q(s->db, "SELECT id FROM runs");
    assert_int_equal(fn_bytes(s->port, run, "end", "leaky_cache_add"), rounds * 512 * KIB);
    assert_int_equal(fn_bytes(s->port, run, "peak", "build_index"), 64 * MIB);
    assert_int_equal(fn_bytes(s->port, run, "end", "build_index"), 0);
}

static void test_first_dead(void **state)
{
    (void)state;
    char db[700], url[200];
    db_at(db, sizeof db, "dead");
    tk_server b;
    assert_int_equal(tk_server_start(&b, db, 0, NULL), 0);
    snprintf(url, sizeof url, "tcp://127.0.0.1:%d,tcp://127.0.0.1:%d", tk_free_port(), b.port);
    const char *seed[] = {"HEAPSTORE_SEED=2", NULL}; /* 2 mod 2: the dead one first */
    char *err = run_example(url, 4, 20, seed);
    if (strstr(err, "heapstore:")) fprintf(stderr, "%s", err);
    assert_null(strstr(err, "heapstore:"));
    free(err);
    check_whole(&b, 4);
    assert_int_equal(tk_server_stop(&b, SIGTERM), 0);
}

/* A listener that answers no SYN: its accept queue (backlog 0: one
 * connection) is full and never drained. Its port; fds to close. */
static int stalled_listener(int fds[3])
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t l = sizeof a;
    fds[0] = socket(AF_INET, SOCK_STREAM, 0);
    assert_int_equal(bind(fds[0], (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(listen(fds[0], 0), 0);
    assert_int_equal(getsockname(fds[0], (struct sockaddr *)&a, &l), 0);
    for (int i = 1; i < 3; i++) {
        fds[i] = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
        connect(fds[i], (struct sockaddr *)&a, sizeof a); /* fills the queue */
    }
    usleep(100000);
    return ntohs(a.sin_port);
}

static void test_first_stalled(void **state)
{
    (void)state;
    char db[700], url[200];
    db_at(db, sizeof db, "stalled");
    tk_server b;
    assert_int_equal(tk_server_start(&b, db, 0, NULL), 0);
    int fds[3];
    int port = stalled_listener(fds);
    snprintf(url, sizeof url, "127.0.0.1:%d, 127.0.0.1:%d", port, b.port);
    const char *seed[] = {"HEAPSTORE_SEED=4", NULL};
    char *err = run_example(url, 4, 20, seed);
    if (strstr(err, "heapstore:")) fprintf(stderr, "%s", err);
    assert_null(strstr(err, "heapstore:"));
    free(err);
    check_whole(&b, 4);
    /* seed 4 met the stalled address first (test_seed_spreads: seed mod n) */
    for (int i = 0; i < 3; i++) close(fds[i]);
    assert_int_equal(tk_server_stop(&b, SIGTERM), 0);
}

static void test_first_refuses(void **state)
{
    (void)state;
    char da[700], db[700], url[200];
    db_at(da, sizeof da, "refusing");
    db_at(db, sizeof db, "taking");
    tk_server a, b;
    const char *tok[] = {"--token", "not-the-collectors", NULL};
    assert_int_equal(tk_server_start(&a, da, 0, tok), 0);
    assert_int_equal(tk_server_start(&b, db, 0, NULL), 0);
    snprintf(url, sizeof url, "127.0.0.1:%d,127.0.0.1:%d", a.port, b.port);
    const char *more[] = {"HEAPSTORE_SEED=2", "HEAPSTORE_TOKEN=mine", NULL};
    char *err = run_example(url, 4, 20, more);
    assert_non_null(strstr(err, "refused the run: bad token (trying the next address)"));
    free(err);
    check_whole(&b, 4);
    assert_int_equal(tk_q(da, "SELECT count(*) FROM runs"), 0);
    assert_true(tk_log_contains(&a, "refused: bad token"));
    assert_int_equal(tk_server_stop(&a, SIGTERM), 0);
    assert_int_equal(tk_server_stop(&b, SIGTERM), 0);
}

/* Every front end refuses: the run is given up after one refusal each, as
 * one refusing server's is (the program ends as usual; nothing stored). */
static void test_all_refuse(void **state)
{
    (void)state;
    char da[700], db[700], url[200];
    db_at(da, sizeof da, "refusing-1");
    db_at(db, sizeof db, "refusing-2");
    tk_server a, b;
    const char *tok_a[] = {"--token", "for-a", NULL}, *tok_b[] = {"--token", "for-b", NULL};
    assert_int_equal(tk_server_start(&a, da, 0, tok_a), 0);
    assert_int_equal(tk_server_start(&b, db, 0, tok_b), 0);
    snprintf(url, sizeof url, "127.0.0.1:%d,127.0.0.1:%d", a.port, b.port);
    const char *more[] = {"HEAPSTORE_SEED=1", "HEAPSTORE_TOKEN=mine", NULL};
    char *err = run_example(url, 4, 20, more);
    const char *next = "refused the run: bad token (trying the next address)";
    const char *last = "refused the run: bad token\n";
    const char *n1 = strstr(err, next), *l1 = strstr(err, last);
    if (!n1 || strstr(n1 + 1, next) || !l1 || strstr(l1 + 1, last)) fprintf(stderr, "%s", err);
    assert_true(n1 && !strstr(n1 + 1, next)); /* once each */
    assert_true(l1 && !strstr(l1 + 1, last));
    free(err);
    assert_true(tk_log_contains(&a, "refused: bad token"));
    assert_true(tk_log_contains(&b, "refused: bad token"));
    assert_int_equal(tk_q(da, "SELECT count(*) FROM runs"), 0);
    assert_int_equal(tk_q(db, "SELECT count(*) FROM runs"), 0);
    assert_int_equal(tk_server_stop(&a, SIGTERM), 0);
    assert_int_equal(tk_server_stop(&b, SIGTERM), 0);
}

static void test_seed_spreads(void **state)
{
    (void)state;
    char da[700], db[700], url[200];
    db_at(da, sizeof da, "spread-a");
    db_at(db, sizeof db, "spread-b");
    tk_server a, b;
    assert_int_equal(tk_server_start(&a, da, 0, NULL), 0);
    assert_int_equal(tk_server_start(&b, db, 0, NULL), 0);
    snprintf(url, sizeof url, "127.0.0.1:%d,127.0.0.1:%d", a.port, b.port);
    for (int seed = 1; seed <= 4; seed++) {
        const char *more[] = {tk_env("HEAPSTORE_SEED=%d", seed), NULL};
        free(run_example(url, 2, 10, more));
        /* seed mod 2 picks the address */
        const tk_server *to = seed % 2 ? &b : &a;
        assert_int_equal(tk_poll(to->db, (seed + 1) / 2, 30000,
                                 "SELECT count(*) FROM runs WHERE state = 'ended'"),
                         (seed + 1) / 2);
    }
    assert_int_equal(tk_q(da, "SELECT count(*) FROM runs"), 2);
    assert_int_equal(tk_q(db, "SELECT count(*) FROM runs"), 2);
    assert_int_equal(tk_server_stop(&a, SIGTERM), 0);
    assert_int_equal(tk_server_stop(&b, SIGTERM), 0);
}

static void test_killed_mid_run(void **state)
{
    (void)state;
    char da[700], db[700], url[200], out[700];
    db_at(da, sizeof da, "killed");
    db_at(db, sizeof db, "survivor");
    snprintf(out, sizeof out, "%s/killed.out", dir);
    tk_server a, b;
    assert_int_equal(tk_server_start(&a, da, 0, NULL), 0);
    assert_int_equal(tk_server_start(&b, db, 0, NULL), 0);
    snprintf(url, sizeof url, "127.0.0.1:%d,127.0.0.1:%d", a.port, b.port);
    const char *argv[] = {
        tk_build_path("bin/hs-example"), "--rounds", "30", "--round-ms", "60", NULL};
    const char *env[] = {tk_env("HEAPSTORE_URL=%s", url), "HEAPSTORE_SAMPLE_BYTES=1",
                         "HEAPSTORE_EXIT_FLUSH_MS=30000", "HEAPSTORE_SEED=2", NULL};
    tk_proc p;
    assert_int_equal(tk_spawn(&p, argv, env, TK_PRELOAD_COLLECTOR, out, NULL), 0);
    /* A has acknowledged a part of the run: kill it */
    assert_true(tk_poll(da, 10, 30000, "SELECT coalesce(max(next_seq), 0) FROM runs") >= 10);
    assert_int_equal(tk_server_stop(&a, SIGKILL), 128 + SIGKILL);
    assert_int_equal(tk_wait(&p, 120000), 0);
    assert_int_equal(tk_poll(db, 1, 30000, "SELECT count(*) FROM runs WHERE state = 'ended'"), 1);
    /* the same process's run, resumed on B after what A acknowledged */
    assert_int_equal(tk_q(db, "SELECT pid FROM runs"), tk_q(da, "SELECT pid FROM runs"));
    /* Nothing lost: the collector resends from the first frame of its
     * oldest chunk not wholly acknowledged (1 MiB chunks), so B, which
     * lacks the run, takes a run this small whole, the frames A had
     * acknowledged included. */
    long long sent = tk_q(db, "SELECT bye_alloc_events + bye_free_events FROM runs");
    long long on_a = tk_q(da, "SELECT alloc_events + free_events FROM runs");
    assert_true(on_a > 0 && on_a < sent);
    check_whole(&b, 30);
    char *said = tk_read_file(out);
    assert_null(strstr(said, "not delivered"));
    free(said);
    assert_int_equal(tk_server_stop(&b, SIGTERM), 0);
}

/* The CLI takes the same list: `heapstore run` hands it to the collector
 * and asks the first address that answers for the run; a query command
 * asks the first that answers; a malformed list is said, nothing asked. */
static void test_cli_list(void **state)
{
    (void)state;
    char db[700], url[200];
    db_at(db, sizeof db, "cli");
    tk_server b;
    assert_int_equal(tk_server_start(&b, db, 0, NULL), 0);
    snprintf(url, sizeof url, "tcp://127.0.0.1:%d, tcp://127.0.0.1:%d", tk_free_port(), b.port);
    const char *env[] = {tk_env("HEAPSTORE_URL=%s", url), "HEAPSTORE_SEED=2", NULL};
    const char *argv[] = {tk_build_path("bin/heapstore"),
                          "run",
                          "--sample",
                          "1",
                          "--",
                          tk_build_path("bin/hs-example"),
                          "--rounds",
                          "4",
                          "--round-ms",
                          "20",
                          NULL};
    tk_out o;
    assert_int_equal(tk_run(&o, argv, env, TK_PRELOAD_NONE, 120), 0);
    if (o.code) fprintf(stderr, "heapstore run: %s\n%s\n", o.out, o.err);
    assert_int_equal(o.code, 0);
    assert_non_null(strstr(o.err, "leaky_cache_add"));
    tk_out_free(&o);
    check_whole(&b, 4);
    json_t *runs = tk_cli_json((const char *const[]){"runs", "--json", NULL}, env);
    assert_int_equal(json_array_size(json_object_get(runs, "runs")), 1);
    json_decref(runs);
    const char *bad[] = {tk_env("HEAPSTORE_URL=127.0.0.1:%d,,", b.port), NULL};
    assert_int_equal(tk_cli(&o, (const char *const[]){"runs", NULL}, bad), 0);
    assert_true(o.code != 0);
    assert_non_null(strstr(o.err, "or a list of them separated by commas"));
    tk_out_free(&o);
    assert_int_equal(tk_server_stop(&b, SIGTERM), 0);
}

int main(void)
{
    tk_tmpdir(dir, sizeof dir, "failover");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_first_dead),    cmocka_unit_test(test_first_stalled),
        cmocka_unit_test(test_first_refuses), cmocka_unit_test(test_all_refuse),
        cmocka_unit_test(test_seed_spreads),  cmocka_unit_test(test_killed_mid_run),
        cmocka_unit_test(test_cli_list),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    if (!rc) {
        char cmd[700];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
        if (system(cmd)) rc = 1;
    }
    return rc;
}
