/* test_rel_faults: faults survived, with the real server and real programs
 * (tests/reliability/wl_rel) under the real collector, every allocation
 * sampled (HEAPSTORE_SAMPLE_BYTES=1) so that counts can be checked exactly:
 *  - the server SIGKILLed and restarted mid-run: the collector reconnects,
 *    no acknowledged event is lost, nothing is doubled;
 *  - the server down for longer than the collector's buffer holds: the
 *    program is unharmed, drops are counted, stored + dropped = sent, and
 *    the API shows the drops;
 *  - the disk full (RLIMIT_FSIZE on the server): ingest stops with a log
 *    line saying why, nothing stored is damaged, and it resumes, complete;
 *  - the program killed mid-run (and a stream cut mid-frame): what was
 *    acknowledged stays, the run is closed as lost, others are unharmed;
 *  - a program forking 100 times: 101 linked, complete runs;
 *  - a program exiting from a signal handler (exit and _exit);
 *  - HEAPSTORE_TOKEN for the collector against a server with --token.
 * Labelled nosan: an ASan-built collector cannot be preloaded into an
 * uninstrumented program. */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "hs_testkit.h"

/* Startup allocations of the C library the program makes besides its own
 * (stdio buffers): the tolerance of the exact counts below. */
#define SLACK 50

typedef struct fixture {
    char dir[600], db[700], url[128], out[700];
    tk_server srv;
} fixture;

static void fx_start(fixture *f, const char *name, const char *const *extra)
{
    tk_tmpdir(f->dir, sizeof f->dir, name);
    snprintf(f->db, sizeof f->db, "%s/hs.db", f->dir);
    snprintf(f->out, sizeof f->out, "%s/program.out", f->dir);
    assert_int_equal(tk_server_start(&f->srv, f->db, 0, extra), 0);
    snprintf(f->url, sizeof f->url, "HEAPSTORE_URL=tcp://127.0.0.1:%d", f->srv.port);
}

static void fx_stop(fixture *f)
{
    assert_int_equal(tk_server_stop(&f->srv, SIGTERM), 0);
}

/* Restarts the server on the same port and database. */
static void fx_restart(fixture *f, const char *const *extra)
{
    assert_int_equal(tk_server_start(&f->srv, f->db, f->srv.port, extra), 0);
}

static void spawn(fixture *f, tk_proc *p, const char *const *args, const char *const *more_env)
{
    const char *env[12] = {f->url, "HEAPSTORE_SAMPLE_BYTES=1", "HEAPSTORE_EXIT_FLUSH_MS=30000"};
    int n = 3;
    for (int i = 0; more_env && more_env[i] && n < 11; i++) env[n++] = more_env[i];
    env[n] = NULL;
    const char *argv[16] = {tk_build_path("tests/wl_rel")};
    for (int i = 0; args[i] && i < 14; i++) argv[i + 1] = args[i];
    assert_int_equal(tk_spawn(p, argv, env, TK_PRELOAD_COLLECTOR, f->out, NULL), 0);
}

/* "allocs N frees M" from the program's output. */
static void program_counts(const tk_proc *p, long *allocs, long *frees)
{
    char *s = tk_read_file(p->out);
    const char *line = strstr(s, "allocs ");
    if (!line) fprintf(stderr, "program said: %s\n", s);
    assert_non_null(line);
    assert_int_equal(sscanf(line, "allocs %ld frees %ld", allocs, frees), 2);
    free(s);
}

/* The one run of wl_rel in the database, once it has ended. */
static int64_t the_run(const char *db)
{
    assert_int_equal(tk_poll(db, 1, 60000,
                             "SELECT count(*) FROM runs WHERE program LIKE '%%wl_rel' AND "
                             "state = 'ended'"),
                     1);
    assert_int_equal(tk_q(db, "SELECT count(*) FROM runs"), 1);
    return tk_q(db, "SELECT id FROM runs");
}

/* Everything the collector sent is stored, and what it sent or counted as
 * dropped is what the program did, within the startup slack. Drops are
 * allowed only within the slack: a collector whose sender thread a loaded
 * machine starves for seconds drops (and counts) rather than stall the
 * program, and a free after the exit handler can only be counted. */
static void check_complete(const char *db, int64_t run, long allocs, long frees)
{
    long long r = (long long)run;
    int64_t a = tk_q(db, "SELECT alloc_events FROM runs WHERE id = %lld", r);
    int64_t fr = tk_q(db, "SELECT free_events FROM runs WHERE id = %lld", r);
    int64_t da = tk_q(db, "SELECT dropped_alloc_events FROM runs WHERE id = %lld", r);
    int64_t df = tk_q(db, "SELECT dropped_free_events FROM runs WHERE id = %lld", r);
    assert_int_equal(a, tk_q(db, "SELECT bye_alloc_events FROM runs WHERE id = %lld", r));
    assert_int_equal(fr, tk_q(db, "SELECT bye_free_events FROM runs WHERE id = %lld", r));
    assert_int_equal(tk_q(db, "SELECT coalesce(sum(n_events), 0) FROM events WHERE run = %lld", r),
                     a + fr);
    if (a + da < allocs || a + da > allocs + SLACK || fr + df + da < frees ||
        fr + df > frees + SLACK || da + df > SLACK)
        fprintf(stderr, "stored %lld/%lld events, dropped %lld/%lld, the program made %ld/%ld\n",
                (long long)a, (long long)fr, (long long)da, (long long)df, allocs, frees);
    assert_true(a + da >= allocs && a + da <= allocs + SLACK);
    /* a free of a block whose allocation was dropped is not recognised */
    assert_true(fr + df + da >= frees && fr + df <= frees + SLACK);
    assert_true(da + df <= SLACK);
    assert_int_equal(tk_q(db, "SELECT clean_exit FROM runs WHERE id = %lld", r), 1);
}

/* ---- the server killed and restarted ------------------------------------------ */

static void test_server_killed_mid_run(void **state)
{
    (void)state;
    fixture f;
    const char *grace[] = {"--grace", "60s", NULL};
    fx_start(&f, "rel-kill", grace);
    tk_proc p;
    const char *args[] = {"churn", "3", "20000", NULL};
    spawn(&f, &p, args, NULL);
    /* some of the run is stored (acknowledged) before the kill */
    assert_true(tk_poll(f.db, 1000, 60000, "SELECT coalesce(sum(n_events), 0) FROM events") >=
                1000);
    assert_int_equal(tk_server_stop(&f.srv, SIGKILL), 128 + SIGKILL);
    usleep(300000);
    fx_restart(&f, grace);
    assert_int_equal(tk_wait(&p, 120000), 0);
    long allocs, frees;
    program_counts(&p, &allocs, &frees);
    int64_t run = the_run(f.db);
    check_complete(f.db, run, allocs, frees);
    fx_stop(&f);
}

/* ---- the server away for longer than the buffer holds ------------------------- */

static void test_server_down_past_the_buffer(void **state)
{
    (void)state;
    fixture f;
    const char *grace[] = {"--grace", "60s", NULL};
    fx_start(&f, "rel-down", grace);
    tk_proc p;
    /* ~200k events a second into a 1 MiB buffer: full within a second */
    const char *args[] = {"churn", "4", "200000", NULL};
    const char *env[] = {"HEAPSTORE_BUFFER_MB=1", NULL};
    spawn(&f, &p, args, env);
    assert_true(tk_poll(f.db, 1, 60000, "SELECT coalesce(sum(n_events), 0) FROM events") >= 1);
    assert_int_equal(tk_server_stop(&f.srv, SIGKILL), 128 + SIGKILL);
    sleep(3);
    fx_restart(&f, grace);
    /* the program is unharmed: it ends normally with its own answer */
    assert_int_equal(tk_wait(&p, 120000), 0);
    long allocs, frees;
    program_counts(&p, &allocs, &frees);
    int64_t run = the_run(f.db);
    long long r = (long long)run;
    int64_t a = tk_q(f.db, "SELECT alloc_events FROM runs WHERE id = %lld", r);
    int64_t fr = tk_q(f.db, "SELECT free_events FROM runs WHERE id = %lld", r);
    int64_t da = tk_q(f.db, "SELECT dropped_alloc_events FROM runs WHERE id = %lld", r);
    int64_t df = tk_q(f.db, "SELECT dropped_free_events FROM runs WHERE id = %lld", r);
    /* drops happened and were counted; stored + dropped = sent */
    assert_true(da > 0 && df > 0);
    assert_int_equal(a, tk_q(f.db, "SELECT bye_alloc_events FROM runs WHERE id = %lld", r));
    assert_int_equal(fr, tk_q(f.db, "SELECT bye_free_events FROM runs WHERE id = %lld", r));
    if (a + da < allocs || a + da > allocs + SLACK)
        fprintf(stderr, "stored %lld + dropped %lld allocs, the program made %ld\n", (long long)a,
                (long long)da, allocs);
    assert_true(a + da >= allocs && a + da <= allocs + SLACK);
    assert_true(fr + df + da >= frees && fr + df <= frees + SLACK);
    /* shown: by the API next to the numbers, and by the collector */
    char target[64], *body = NULL;
    snprintf(target, sizeof target, "/api/runs/%lld", r);
    assert_int_equal(tk_http(f.srv.port, "GET", target, NULL, NULL, &body), 200);
    char want[64];
    snprintf(want, sizeof want, "\"alloc_events\":%lld", (long long)da);
    assert_non_null(strstr(body, want));
    free(body);
    char *out = tk_read_file(p.out);
    assert_non_null(strstr(out, "dropped"));
    free(out);
    fx_stop(&f);
}

/* ---- disk full ----------------------------------------------------------------- */

static void test_disk_full(void **state)
{
    (void)state;
    fixture f;
    const char *grace[] = {"--grace", "60s", NULL};
    /* With SIGXFSZ ignored (inherited by the server) a write past
     * RLIMIT_FSIZE fails with EFBIG, as a full disk fails with ENOSPC. */
    signal(SIGXFSZ, SIG_IGN);
    fx_start(&f, "rel-diskfull", grace);
    signal(SIGXFSZ, SIG_DFL);
    /* a run stored before the fault */
    tk_proc p;
    const char *first[] = {"churn", "0.3", "20000", NULL};
    spawn(&f, &p, first, NULL);
    assert_int_equal(tk_wait(&p, 120000), 0);
    int64_t before = tk_poll(f.db, 1, 60000, "SELECT count(*) FROM runs WHERE state = 'ended'");
    assert_int_equal(before, 1);
    int64_t stored = tk_q(f.db, "SELECT alloc_events + free_events FROM runs");
    int64_t stored_rows = tk_q(f.db, "SELECT count(*) || sum(length(data)) FROM events");

    /* room for about 256 KB more in any file the server writes */
    char wal[800];
    snprintf(wal, sizeof wal, "%s-wal", f.db);
    uint64_t room = tk_file_size(f.db) + tk_file_size(wal) + 256 * 1024;
    assert_int_equal(tk_prlimit(f.srv.pid, RLIMIT_FSIZE, room, UINT64_MAX), 0);
    const char *second[] = {"churn", "5", "100000", NULL};
    snprintf(f.out, sizeof f.out, "%.600s/second.out", f.dir);
    spawn(&f, &p, second, NULL);
    /* ingest stops with a clear line in the log */
    assert_true(tk_wait_text(f.srv.log, "transaction failed", 60000));
    assert_false(tk_wait_text(f.srv.log, "cannot rollback", 1));
    /* the earlier run is intact, and so is the database */
    assert_int_equal(tk_q(f.db, "SELECT alloc_events + free_events FROM runs WHERE id = 1"),
                     stored);
    /* space returns: ingest resumes and the second run is complete */
    assert_int_equal(tk_prlimit(f.srv.pid, RLIMIT_FSIZE, UINT64_MAX, UINT64_MAX), 0);
    assert_int_equal(tk_wait(&p, 120000), 0);
    long allocs, frees;
    program_counts(&p, &allocs, &frees);
    assert_int_equal(tk_poll(f.db, 2, 60000, "SELECT count(*) FROM runs WHERE state = 'ended'"), 2);
    check_complete(f.db, 2, allocs, frees);
    assert_int_equal(tk_q(f.db, "SELECT alloc_events + free_events FROM runs WHERE id = 1"),
                     stored);
    assert_int_equal(tk_q(f.db, "SELECT count(*) || sum(length(data)) FROM events WHERE run = 1"),
                     stored_rows);
    fx_stop(&f);
    assert_int_equal(tk_q(f.db, "SELECT count(*) FROM pragma_integrity_check WHERE "
                                "integrity_check != 'ok'"),
                     0);
}

/* ---- the program killed mid-run; a stream cut mid-frame ------------------------ */

static void test_killed_mid_run(void **state)
{
    (void)state;
    fixture f;
    const char *grace[] = {"--grace", "1s", NULL};
    fx_start(&f, "rel-killed", grace);
    /* a healthy run alongside, on its own connection */
    uint8_t gid[16];
    memset(gid, 0x42, 16);
    tk_buf g = {0};
    tk_header(&g);
    tk_hello(&g, gid, 0, 0, NULL);
    int gfd = tk_connect(f.srv.port);
    assert_int_equal(tk_send(gfd, g.p, g.len), 0);
    assert_int_equal(tk_wait_ack(gfd, 0, NULL, NULL, 0, 30000), 0);
    tk_buf_free(&g);

    /* killed once 1,000 events are in closed segments (events, not
     * events_tail): a segment closes at 4 MiB of raw events, some 800,000
     * of this churn's, which 100,000 allocations a second fill in ~4 s
     * (20,000 took ~21 s) */
    tk_proc p;
    const char *args[] = {"churn", "30", "100000", NULL};
    spawn(&f, &p, args, NULL);
    assert_true(tk_poll(f.db, 1000, 60000, "SELECT coalesce(sum(n_events), 0) FROM events") >=
                1000);
    kill(p.pid, SIGKILL);
    assert_int_equal(tk_wait(&p, 60000), 128 + SIGKILL);
    assert_int_equal(tk_poll(f.db, 1, 60000,
                             "SELECT count(*) FROM runs WHERE program LIKE '%%wl_rel' AND "
                             "state = 'lost'"),
                     1);
    /* what was stored is consistent: counters and event rows agree */
    assert_int_equal(tk_q(f.db, "SELECT alloc_events + free_events FROM runs WHERE program LIKE "
                                "'%%wl_rel'"),
                     tk_q(f.db, "SELECT sum(n_events) FROM events WHERE run = (SELECT id FROM "
                                "runs WHERE program LIKE '%%wl_rel')"));

    /* a stream cut inside a frame: the frames before it stay */
    uint8_t cid[16];
    memset(cid, 0x43, 16);
    tk_buf c = {0};
    tk_header(&c);
    tk_hello(&c, cid, 0, 0, NULL);
    tk_symbols(&c, 0, 1, 0);
    uint64_t pc = 1;
    tk_stack(&c, 1, &pc, 1);
    tk_event ev[3] = {{10, 1, 0, 64, 64}, {20, 1, 0, 64, 64}, {30, 1, 1, 64, 64}};
    tk_events(&c, ev, 3);
    size_t whole = c.len;
    tk_events(&c, ev, 3);
    int cfd = tk_connect(f.srv.port);
    assert_int_equal(tk_send(cfd, c.p, whole), 0);
    uint64_t got;
    assert_int_equal(tk_wait_ack(cfd, 3, &got, NULL, 0, 30000), 0);
    assert_int_equal(tk_send(cfd, c.p + whole, (c.len - whole) / 2), 0);
    shutdown(cfd, SHUT_WR);
    assert_int_equal(tk_wait_closed(cfd, 30000), 1);
    close(cfd);
    tk_buf_free(&c);
    assert_true(tk_wait_text(f.srv.log, "ended inside a frame", 30000));
    assert_int_equal(
        tk_poll(f.db, 1, 60000, "SELECT count(*) FROM runs WHERE pid = 4242 AND state = 'lost'"),
        1);
    assert_int_equal(
        tk_q(f.db, "SELECT alloc_events FROM runs WHERE state = 'lost' AND pid = 4242"), 2);

    /* the healthy run was not touched by any of it */
    tk_symbols(&g, 0, 1, 0);
    tk_stack(&g, 1, &pc, 1);
    tk_events(&g, ev, 3);
    tk_bye(&g, 40, 2, 1);
    assert_int_equal(tk_send(gfd, g.p, g.len), 0);
    assert_int_equal(tk_wait_ack(gfd, 4, &got, NULL, 0, 30000), 0);
    close(gfd);
    tk_buf_free(&g);
    assert_int_equal(tk_poll(f.db, 1, 60000,
                             "SELECT count(*) FROM runs WHERE state = 'ended' AND alloc_events = 2 "
                             "AND free_events = 1"),
                     1);
    fx_stop(&f);
}

/* ---- fork ------------------------------------------------------------------------ */

static void test_fork_100(void **state)
{
    (void)state;
    fixture f;
    fx_start(&f, "rel-fork", NULL);
    tk_proc p;
    const char *args[] = {"fork", "100", NULL};
    spawn(&f, &p, args, NULL);
    assert_int_equal(tk_wait(&p, 180000), 0);
    char *out = tk_read_file(p.out);
    assert_non_null(strstr(out, "children 100 ok"));
    free(out);
    assert_int_equal(tk_poll(f.db, 101, 60000, "SELECT count(*) FROM runs WHERE state = 'ended'"),
                     101);
    int64_t parent = tk_q(f.db, "SELECT id FROM runs WHERE parent_id IS NULL");
    assert_int_equal(
        tk_q(f.db, "SELECT count(*) FROM runs WHERE parent_id = %lld", (long long)parent), 100);
    /* every child complete: what it counted is stored, and its own 100
     * allocations and 50 frees are among them */
    assert_int_equal(tk_q(f.db,
                          "SELECT count(*) FROM runs WHERE parent_id IS NOT NULL AND "
                          "alloc_events = bye_alloc_events AND free_events = "
                          "bye_free_events AND alloc_events >= 100 AND free_events >= 50 "
                          "AND alloc_events <= 100 + %d AND clean_exit = 1",
                          SLACK),
                     100);
    assert_int_equal(tk_q(f.db, "SELECT count(DISTINCT pid) FROM runs"), 101);
    fx_stop(&f);
}

/* ---- exit from a signal handler ------------------------------------------------- */

static void test_exit_from_signal_handler(void **state)
{
    (void)state;
    fixture f;
    const char *grace[] = {"--grace", "1s", NULL};
    fx_start(&f, "rel-sigexit", grace);
    /* exit() from the handler, often while inside malloc: the collector
     * must neither deadlock nor crash, and the run ends cleanly */
    for (int i = 0; i < 3; i++) {
        tk_proc p;
        const char *args[] = {"sigexit", "exit", "150", NULL};
        spawn(&f, &p, args, NULL);
        assert_int_equal(tk_wait(&p, 120000), 3);
    }
    assert_int_equal(tk_poll(f.db, 3, 60000,
                             "SELECT count(*) FROM runs WHERE state = 'ended' AND clean_exit = 1 "
                             "AND alloc_events = bye_alloc_events AND alloc_events > 0"),
                     3);
    /* _exit() skips every exit handler, but the collector interposes it
     * and ends the run as exit does: complete, then BYE */
    tk_proc p;
    const char *args[] = {"sigexit", "_exit", "1000", NULL};
    spawn(&f, &p, args, NULL);
    assert_int_equal(tk_wait(&p, 120000), 3);
    assert_int_equal(tk_poll(f.db, 4, 60000,
                             "SELECT count(*) FROM runs WHERE state = 'ended' AND clean_exit = 1 "
                             "AND alloc_events = bye_alloc_events AND alloc_events > 0"),
                     4);
    assert_int_equal(tk_q(f.db, "SELECT count(*) FROM runs"), 4);
    fx_stop(&f);
}

/* ---- the collector's token ------------------------------------------------------ */

static void test_collector_token(void **state)
{
    (void)state;
    fixture f;
    const char *args[] = {"--token", "s3cret", NULL};
    fx_start(&f, "rel-ctoken", args);
    const char *prog[] = {"churn", "0.2", "10000", NULL};
    tk_proc p;
    /* without the token (and with a wrong one): refused, the program unharmed */
    const char *none[] = {"HEAPSTORE_TOKEN=", NULL};
    const char *wrong[] = {"HEAPSTORE_TOKEN=nope", NULL};
    const char *const *bad[] = {none, wrong};
    for (int i = 0; i < 2; i++) {
        spawn(&f, &p, prog, bad[i]);
        assert_int_equal(tk_wait(&p, 120000), 0);
        char *out = tk_read_file(p.out);
        assert_non_null(strstr(out, "allocs "));
        if (!strstr(out, "refused the run: bad token")) fprintf(stderr, "program said: %s\n", out);
        assert_non_null(strstr(out, "refused the run: bad token"));
        free(out);
    }
    assert_true(tk_log_contains(&f.srv, "refused: bad token"));
    assert_int_equal(tk_q(f.db, "SELECT count(*) FROM runs"), 0);
    const char *good[] = {"HEAPSTORE_TOKEN=s3cret", NULL};
    spawn(&f, &p, prog, good);
    assert_int_equal(tk_wait(&p, 120000), 0);
    long allocs, frees;
    program_counts(&p, &allocs, &frees);
    check_complete(f.db, the_run(f.db), allocs, frees);
    fx_stop(&f);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_server_killed_mid_run),
        cmocka_unit_test(test_server_down_past_the_buffer),
        cmocka_unit_test(test_disk_full),
        cmocka_unit_test(test_killed_mid_run),
        cmocka_unit_test(test_fork_100),
        cmocka_unit_test(test_exit_from_signal_handler),
        cmocka_unit_test(test_collector_token),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
