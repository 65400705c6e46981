/* test_rel_store: what the store and its writer promise about the database,
 * against the real heapstore-server on loopback and real SQLite files (no
 * collector, so this runs in the sanitizer tree as well):
 *  - closing a run as lost at the end of its grace period is retried while
 *    the disk is full (RLIMIT_FSIZE on the server, as test_rel_faults does),
 *    and the run is `lost` once space returns;
 *  - resuming a run takes its resume key: a forged resumed HELLO with the
 *    right uuid and a wrong key or none is refused with a log line and
 *    appends nothing, to a live run or a lost one; the key never shows in
 *    /api/sql;
 *  - a read-only database (a read-only tmpfs mount, else a directory without
 *    write permission) is reported as such by the log and /api/health,
 *    collectors are refused with the reason, and the CLI reads it;
 *  - a clean stop right after an HTTP query leaves the whole database in the
 *    .db file: a copy of the file alone is read by `heapstore runs`;
 *  - someone else's SQLite database is refused, and so is a second server on
 *    a database a live server holds (CLI readers still read it);
 *  - values no collector sends (times near 2^64, frees of bytes never
 *    allocated) close the connection with a log line and store nothing;
 *  - runs.total_alloc_count is the size histogram's exact count. */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <assert.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "hs_testkit.h"

static void make_db(char *db, size_t len, const char *name)
{
    char dir[600];
    tk_tmpdir(dir, sizeof dir, name);
    snprintf(db, len, "%s/hs.db", dir);
}

/* A run's first frames: HELLO, 8 pcs, `stacks` stacks of depth 2 and one
 * allocation of 1000 bytes on each, at t = 1 ms. Frame numbers from 1. */
static uint64_t run_frames(tk_buf *b, const uint8_t id[16], int stacks)
{
    assert(stacks > 0);
    tk_header(b);
    tk_hello(b, id, 1, 0, NULL);
    tk_symbols(b, 0, 8, 0);
    for (int i = 0; i < stacks; i++) {
        uint64_t pcs[2] = {1 + (uint64_t)i % 8, 1 + (uint64_t)(i / 8) % 8};
        tk_stack(b, (uint64_t)i + 1, pcs, 2);
    }
    tk_event *ev = calloc((size_t)stacks, sizeof *ev);
    assert_non_null(ev);
    for (int i = 0; i < stacks; i++)
        ev[i] = (tk_event){.t = 1000000, .stack = (uint64_t)i + 1, .size = 1000, .weight = 1000};
    tk_events(b, ev, (size_t)stacks);
    free(ev);
    return 1 + 1 + (uint64_t)stacks + 1; /* next seq: symbols, stacks, events */
}

/* Connects and sends b; waits for the ACK of every frame before next. */
static int send_acked(int port, const tk_buf *b, uint64_t next)
{
    int fd = tk_connect(port);
    assert_true(fd >= 0);
    assert_int_equal(tk_send(fd, b->p, b->len), 0);
    uint64_t got = 0;
    assert_int_equal(tk_wait_ack(fd, next, &got, NULL, 0, 30000), 0);
    return fd;
}

static void id_of(uint8_t id[16], uint8_t tag)
{
    for (int i = 0; i < 16; i++) id[i] = (uint8_t)(tag + i * 7);
}

/* ---- item 7: closing a lost run is retried while the disk is full ---------- */

static void test_lose_retried_when_disk_full(void **state)
{
    (void)state;
    char db[700];
    make_db(db, sizeof db, "store-lose-full");
    tk_server srv;
    const char *grace[] = {"--grace", "1s", NULL};
    signal(SIGXFSZ, SIG_IGN); /* inherited: writes past the limit fail with EFBIG */
    assert_int_equal(tk_server_start(&srv, db, 0, grace), 0);
    signal(SIGXFSZ, SIG_DFL);
    uint8_t id[16];
    id_of(id, 0x31);
    tk_buf b = {0};
    uint64_t next = run_frames(&b, id, 64);
    int fd = send_acked(srv.port, &b, next);
    /* The disk fills up before the grace period ends: no file the server
     * writes may grow past its log's size plus 8 KiB (the WAL already holds
     * more than that, so every commit fails; the log can still be written). */
    uint64_t room = tk_file_size(srv.log) + 8192;
    assert_int_equal(tk_prlimit(srv.pid, RLIMIT_FSIZE, room, UINT64_MAX), 0);
    close(fd); /* no BYE: the run waits for its grace period */
    sleep(4);  /* the grace period ends; closing the run fails, and is retried */
    assert_int_equal(tk_q(db, "SELECT count(*) FROM runs WHERE state = 'open'"), 1);
    /* space returns: the run is closed as lost */
    assert_int_equal(tk_prlimit(srv.pid, RLIMIT_FSIZE, UINT64_MAX, UINT64_MAX), 0);
    assert_int_equal(tk_poll(db, 1, 20000, "SELECT count(*) FROM runs WHERE state = 'lost'"), 1);
    assert_true(tk_log_contains(&srv, "cannot close it as lost"));
    assert_true(tk_log_contains(&srv, "closed as lost after"));
    assert_int_equal(tk_q(db, "SELECT live_bytes FROM runs"), 64 * 1000);
    assert_int_equal(tk_server_stop(&srv, SIGTERM), 0);
    tk_buf_free(&b);
}

/* ---- item 9: resuming takes the run's key ------------------------------------ */

static hs_str str(const char *s)
{
    return (hs_str){s, strlen(s)};
}

/* A HELLO (stream header first) with the given flags and key (NULL: none,
 * as a collector before resume keys sends), and with events, one EVENTS
 * frame after it. */
static void forged_hello(tk_buf *b, const uint8_t id[16], uint64_t first_seq, uint64_t flags,
                         const char *key, int events)
{
    hs_hello *h = calloc(1, sizeof *h);
    memcpy(h->run_id, id, 16);
    h->first_seq = first_seq;
    h->flags = flags;
    h->pid = 66;
    h->start_unix_ns = 1;
    h->sample_bytes = 1;
    h->max_depth = 8;
    h->program = str("/forged");
    h->hostname = str("forger");
    h->token = str("");
    h->collector_version = str("forged");
    if (key) h->resume_key = str(key);
    tk_header(b);
    hs_wr wr = tk_buf_wr(b, 8192);
    size_t pos = hs_frame_begin(&wr, HS_FRAME_HELLO);
    hs_hello_encode(&wr, h);
    hs_frame_end(&wr, pos);
    tk_buf_commit(b, &wr);
    free(h);
    tk_event ev = {.t = 2000000, .stack = 1, .size = 1ull << 40, .weight = 1ull << 40};
    if (events) tk_events(b, &ev, 1);
}

/* Sends a forged resumption; it must be refused with reason `why`. */
static void expect_refused(int port, const uint8_t id[16], uint64_t seq, const char *key,
                           const char *why)
{
    tk_buf f = {0};
    forged_hello(&f, id, seq, HS_HELLO_RESUMED, key, 1);
    int fd = tk_connect(port);
    assert_true(fd >= 0);
    assert_int_equal(tk_send(fd, f.p, f.len), 0);
    char reason[256] = "";
    assert_int_equal(tk_wait_ack(fd, 0, NULL, reason, sizeof reason, 30000), 1);
    if (!strstr(reason, why)) fprintf(stderr, "refused with: %s\n", reason);
    assert_non_null(strstr(reason, why));
    close(fd);
    tk_buf_free(&f);
}

static void test_resume_needs_key(void **state)
{
    (void)state;
    char db[700];
    make_db(db, sizeof db, "store-resume-key");
    tk_server srv;
    const char *grace[] = {"--grace", "1s", NULL};
    assert_int_equal(tk_server_start(&srv, db, 0, grace), 0);
    uint8_t id[16];
    id_of(id, 0x51);
    tk_buf b = {0};
    uint64_t next = run_frames(&b, id, 4);
    int fd = send_acked(srv.port, &b, next);
    int64_t rows = tk_q(db, "SELECT count(*) FROM events");
    /* the live run: a wrong key, and no key, are refused */
    expect_refused(srv.port, id, next, "not-the-key-0000", "wrong resume key");
    expect_refused(srv.port, id, next, NULL, "no resume key");
    assert_true(tk_log_contains(&srv, "wrong resume key"));
    /* nothing was appended, and the collector's connection goes on */
    assert_int_equal(tk_q(db, "SELECT count(*) FROM events"), rows);
    assert_int_equal(tk_q(db, "SELECT live_bytes FROM runs"), 4 * 1000);
    tk_buf more = {0};
    tk_event ev = {.t = 3000000, .stack = 1, .is_free = 1, .size = 1000, .weight = 1000};
    tk_events(&more, &ev, 1);
    assert_int_equal(tk_send(fd, more.p, more.len), 0);
    assert_int_equal(tk_wait_ack(fd, next + 1, NULL, NULL, 0, 30000), 0);
    assert_int_equal(tk_q(db, "SELECT live_bytes FROM runs"), 3 * 1000);
    close(fd);
    /* lost: it cannot be reopened without its key either */
    assert_int_equal(tk_poll(db, 1, 20000, "SELECT count(*) FROM runs WHERE state = 'lost'"), 1);
    expect_refused(srv.port, id, next + 1, "not-the-key-0000", "wrong resume key");
    assert_int_equal(tk_q(db, "SELECT count(*) FROM runs WHERE state = 'lost'"), 1);
    assert_int_equal(tk_q(db, "SELECT count(*) FROM events"), rows + 1);
    /* with its key (tk_hello's) the collector resumes it */
    tk_buf again = {0};
    tk_header(&again);
    tk_hello(&again, id, next + 1, HS_HELLO_RESUMED, NULL);
    tk_bye(&again, 4000000, 4, 1);
    fd = send_acked(srv.port, &again, next + 2);
    close(fd);
    assert_int_equal(tk_poll(db, 1, 20000, "SELECT count(*) FROM runs WHERE state = 'ended'"), 1);
    /* a collector without keys starts runs, but cannot resume them */
    uint8_t old[16];
    id_of(old, 0x71);
    tk_buf o = {0};
    forged_hello(&o, old, 1, 0, NULL, 0);
    fd = tk_connect(srv.port);
    assert_int_equal(tk_send(fd, o.p, o.len), 0);
    assert_int_equal(tk_wait_ack(fd, 1, NULL, NULL, 0, 30000), 0);
    close(fd);
    tk_buf_free(&o);
    assert_int_equal(tk_q(db, "SELECT count(*) FROM runs WHERE program = '/forged'"), 1);
    assert_int_equal(tk_q(db, "SELECT resume_key IS NULL FROM runs WHERE program = '/forged'"), 1);
    expect_refused(srv.port, old, 1, NULL, "without a resume key");
    /* the key never shows in a query */
    assert_int_equal(tk_q(db, "SELECT count(*) FROM runs WHERE resume_key IS NOT NULL"), 1);
    char *body = NULL;
    int st =
        tk_http(srv.port, "POST", "/api/sql", "Content-Type: application/json\r\n",
                "{\"sql\":\"SELECT count(*) AS n FROM runs WHERE resume_key IS NOT NULL\"}", &body);
    assert_int_equal(st, 200);
    if (!strstr(body, "[0]")) fprintf(stderr, "sql: %s\n", body);
    assert_non_null(strstr(body, "[0]"));
    free(body);
    assert_int_equal(tk_server_stop(&srv, SIGTERM), 0);
    tk_buf_free(&b);
    tk_buf_free(&more);
    tk_buf_free(&again);
}

/* ---- item 8: a read-only database --------------------------------------------- */

static int ro_mounted; /* the read-only location is a tmpfs mount (else a chmod) */

/* Makes dir read-only: a tmpfs mount remounted read-only when this process
 * may mount (root: in a mount namespace of its own, so nothing leaks), else
 * the directory without write permission (which only a non-root user
 * feels). 0, or -1 when neither works here. */
static int make_readonly(const char *dir)
{
    if (ro_mounted) return mount(NULL, dir, NULL, MS_REMOUNT | MS_RDONLY, NULL);
    return geteuid() != 0 ? chmod(dir, 0555) : -1;
}

/* In dir: a database with one run, stopped cleanly (no -wal left), and one
 * whose server died: its last run only in the -wal (with its -shm), which a
 * read-only open must still read; both copied into rodir as hs.db and
 * died.db. */
static void readonly_databases(const char *dir, const char *rodir)
{
    char db[800], db2[800], cmd[4000];
    snprintf(db, sizeof db, "%s/hs.db", dir);
    tk_server srv;
    assert_int_equal(tk_server_start(&srv, db, 0, NULL), 0);
    uint8_t id[16];
    id_of(id, 0x11);
    tk_buf b = {0};
    uint64_t next = run_frames(&b, id, 2);
    tk_bye(&b, 5000000, 2, 0);
    int fd = send_acked(srv.port, &b, next + 1);
    close(fd);
    assert_int_equal(tk_server_stop(&srv, SIGTERM), 0);
    snprintf(cmd, sizeof cmd, "cp '%s' '%s/hs.db'", db, rodir);
    assert_int_equal(system(cmd), 0);
    snprintf(db2, sizeof db2, "%s/died.db", dir);
    assert_int_equal(tk_server_start(&srv, db2, 0, NULL), 0);
    fd = send_acked(srv.port, &b, next + 1);
    close(fd);
    assert_int_equal(tk_server_stop(&srv, SIGKILL), 128 + SIGKILL);
    snprintf(cmd, sizeof cmd, "cp '%s' '%s-wal' '%s-shm' '%s/'", db2, db2, db2, rodir);
    assert_int_equal(system(cmd), 0);
    tk_buf_free(&b);
}

/* A server on the read-only database at link: it says so, answers queries
 * and refuses a collector, saying why. */
static void readonly_server(const char *link)
{
    tk_server srv;
    assert_int_equal(tk_server_start(&srv, link, 0, NULL), 0);
    assert_true(tk_log_contains(&srv, "is read-only"));
    assert_true(tk_log_contains(&srv, link));
    char *body = NULL;
    assert_int_equal(tk_http(srv.port, "GET", "/api/health", NULL, NULL, &body), 200);
    if (!strstr(body, "\"read_only\":true")) fprintf(stderr, "health: %s\n", body);
    assert_non_null(strstr(body, "\"read_only\":true"));
    assert_non_null(strstr(body, "\"database\":true"));
    assert_non_null(strstr(body, link)); /* which database */
    free(body);
    /* queries are answered */
    assert_int_equal(tk_http(srv.port, "GET", "/api/runs", NULL, NULL, &body), 200);
    assert_non_null(strstr(body, "testprog"));
    free(body);
    /* a collector is refused, saying why */
    uint8_t id2[16];
    id_of(id2, 0x22);
    tk_buf c = {0};
    tk_header(&c);
    tk_hello(&c, id2, 1, 0, NULL);
    int fd = tk_connect(srv.port);
    assert_int_equal(tk_send(fd, c.p, c.len), 0);
    char reason[256] = "";
    assert_int_equal(tk_wait_ack(fd, 0, NULL, reason, sizeof reason, 30000), 1);
    if (!strstr(reason, "read-only")) fprintf(stderr, "refused with: %s\n", reason);
    assert_non_null(strstr(reason, "read-only"));
    assert_null(strstr(reason, "not an error"));
    close(fd);
    assert_int_equal(tk_server_stop(&srv, SIGTERM), 0);
    assert_false(tk_log_contains(&srv, "not an error"));
    tk_buf_free(&c);
}

/* `heapstore runs --db db` reads it directly and prints want. */
static void cli_runs(const char *db, const char *want)
{
    tk_out o;
    assert_int_equal(tk_cli(&o, (const char *const[]){"runs", "--db", db, NULL},
                            (const char *const[]){"HEAPSTORE_URL=", NULL}),
                     0);
    if (o.code) fprintf(stderr, "heapstore runs: %s\n", o.err);
    assert_int_equal(o.code, 0);
    assert_non_null(strstr(o.out, want));
    tk_out_free(&o);
}

static void test_readonly_database(void **state)
{
    (void)state;
    char dir[600], rodir[700], link[800], target[800], died[800];
    tk_tmpdir(dir, sizeof dir, "store-readonly");
    snprintf(rodir, sizeof rodir, "%s/ro", dir);
    assert_int_equal(mkdir(rodir, 0755), 0);
    ro_mounted = unshare(CLONE_NEWNS) == 0 &&
                 mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) == 0 &&
                 mount("tmpfs", rodir, "tmpfs", 0, "size=64m") == 0;
    if (!ro_mounted && geteuid() == 0) {
        fprintf(stderr, "cannot mount a tmpfs here, and root ignores file modes: skipped\n");
        skip();
    }
    readonly_databases(dir, rodir);
    assert_int_equal(make_readonly(rodir), 0);
    /* The server runs on it through a link in a writable folder (its log
     * goes next to the path it is given). */
    snprintf(link, sizeof link, "%s/ro.db", dir);
    snprintf(target, sizeof target, "%s/hs.db", rodir);
    assert_int_equal(symlink(target, link), 0);
    readonly_server(link);
    /* the CLI reads both directly */
    cli_runs(link, "testprog");
    snprintf(died, sizeof died, "%s/died.db", rodir);
    cli_runs(died, "ended");
    if (ro_mounted)
        umount2(rodir, MNT_DETACH);
    else
        chmod(rodir, 0755);
}

/* ---- item 11: a clean stop leaves everything in the .db file ---------------- */

static void test_stop_checkpoints(void **state)
{
    (void)state;
    char db[700], copy[800], cmd[2000];
    make_db(db, sizeof db, "store-stop-wal");
    tk_server srv;
    assert_int_equal(tk_server_start(&srv, db, 0, NULL), 0);
    uint8_t id[16];
    id_of(id, 0x41);
    tk_buf b = {0};
    uint64_t next = run_frames(&b, id, 200);
    tk_bye(&b, 5000000, 200, 0);
    int fd = send_acked(srv.port, &b, next + 1);
    close(fd);
    /* an HTTP query within the writer's idle second, then SIGTERM */
    char *body = NULL;
    assert_int_equal(tk_http(srv.port, "GET", "/api/runs", NULL, NULL, &body), 200);
    free(body);
    assert_int_equal(tk_server_stop(&srv, SIGTERM), 0);
    char wal[800];
    snprintf(wal, sizeof wal, "%s-wal", db);
    assert_int_equal(tk_file_size(wal), 0);
    /* the .db alone, as people copy it */
    snprintf(copy, sizeof copy, "%s.copy.db", db);
    snprintf(cmd, sizeof cmd, "cp '%s' '%s'", db, copy);
    assert_int_equal(system(cmd), 0);
    char cli[600];
    snprintf(cli, sizeof cli, "%s", tk_build_path("bin/heapstore"));
    const char *argv[] = {cli, "runs", "--db", copy, NULL};
    tk_out o;
    assert_int_equal(
        tk_run(&o, argv, (const char *const[]){"HEAPSTORE_URL=", NULL}, TK_PRELOAD_NONE, 0), 0);
    if (o.code) fprintf(stderr, "heapstore runs: %s\n", o.err);
    assert_int_equal(o.code, 0);
    assert_non_null(strstr(o.out, "testprog"));
    tk_out_free(&o);
    assert_int_equal(tk_q(copy, "SELECT alloc_events FROM runs"), 200);
    tk_buf_free(&b);
}

/* ---- smaller ones ------------------------------------------------------------ */

static void test_foreign_database_refused(void **state)
{
    (void)state;
    char db[700], cmd[2000];
    make_db(db, sizeof db, "store-foreign");
    snprintf(cmd, sizeof cmd,
             "python3 -c \"import sqlite3; c = sqlite3.connect('%s'); "
             "c.execute('CREATE TABLE notes (x)'); c.commit()\"",
             db);
    assert_int_equal(system(cmd), 0);
    tk_server srv;
    assert_int_equal(tk_server_start(&srv, db, 0, NULL), -1);
    assert_true(tk_log_contains(&srv, "is not a heapstore database"));
    /* untouched: no table of heapstore's was added */
    assert_int_equal(tk_q(db, "SELECT count(*) FROM sqlite_schema WHERE name = 'runs'"), 0);
}

static void test_second_server_refused(void **state)
{
    (void)state;
    char db[700];
    make_db(db, sizeof db, "store-two-servers");
    tk_server a, b;
    const char *grace[] = {"--grace", "1s", NULL};
    assert_int_equal(tk_server_start(&a, db, 0, grace), 0);
    uint8_t id[16];
    id_of(id, 0x61);
    tk_buf s = {0};
    uint64_t next = run_frames(&s, id, 2);
    int fd = send_acked(a.port, &s, next);
    /* the second one refuses to start, and leaves the live run alone */
    assert_int_equal(tk_server_start(&b, db, 0, grace), -1);
    assert_true(tk_log_contains(&b, "in use by another heapstore server"));
    sleep(2); /* past the grace a second server would have given the run */
    assert_int_equal(tk_q(db, "SELECT count(*) FROM runs WHERE state = 'open'"), 1);
    /* readers still read */
    char cli[600];
    snprintf(cli, sizeof cli, "%s", tk_build_path("bin/heapstore"));
    const char *argv[] = {cli, "runs", "--db", db, NULL};
    tk_out o;
    assert_int_equal(
        tk_run(&o, argv, (const char *const[]){"HEAPSTORE_URL=", NULL}, TK_PRELOAD_NONE, 0), 0);
    assert_int_equal(o.code, 0);
    tk_out_free(&o);
    tk_buf bye = {0};
    tk_bye(&bye, 5000000, 2, 0);
    assert_int_equal(tk_send(fd, bye.p, bye.len), 0);
    assert_int_equal(tk_wait_ack(fd, next + 1, NULL, NULL, 0, 30000), 0);
    close(fd);
    assert_int_equal(tk_server_stop(&a, SIGTERM), 0);
    /* once the first has stopped, a server starts on it (and answers: its
     * loop runs, so SIGTERM stops it cleanly) */
    assert_int_equal(tk_server_start(&b, db, 0, grace), 0);
    char *body = NULL;
    assert_int_equal(tk_http(b.port, "GET", "/api/health", NULL, NULL, &body), 200);
    free(body);
    assert_int_equal(tk_server_stop(&b, SIGTERM), 0);
    tk_buf_free(&s);
    tk_buf_free(&bye);
}

/* Sends frames after a fresh run's; the connection must be closed with
 * `why` in the log, and the run keep what it had. */
static void expect_closed(tk_server *srv, uint8_t tag, const tk_buf *bad, const char *why)
{
    uint8_t id[16];
    id_of(id, tag);
    tk_buf b = {0};
    uint64_t next = run_frames(&b, id, 2);
    int fd = send_acked(srv->port, &b, next);
    assert_int_equal(tk_send(fd, bad->p, bad->len), 0);
    assert_int_equal(tk_wait_closed(fd, 30000), 1);
    close(fd);
    assert_true(tk_wait_text(srv->log, why, 10000));
    tk_buf_free(&b);
}

static void test_impossible_values_refused(void **state)
{
    (void)state;
    char db[700];
    make_db(db, sizeof db, "store-impossible");
    tk_server srv;
    assert_int_equal(tk_server_start(&srv, db, 0, NULL), 0);
    /* frees of 2^50 bytes never allocated, on a run that allocated 2000 */
    tk_buf bad = {0};
    tk_event fr[64];
    for (int i = 0; i < 64; i++)
        fr[i] = (tk_event){
            .t = 2000000, .stack = 1, .is_free = 1, .size = 1ull << 50, .weight = 1ull << 50};
    tk_events(&bad, fr, 64);
    expect_closed(&srv, 0x81, &bad, "more than the run ever allocated");
    tk_buf_free(&bad);
    /* a time near 2^64 */
    tk_event late = {.t = UINT64_MAX - 5, .stack = 1, .size = 8, .weight = 8};
    tk_events(&bad, &late, 1);
    expect_closed(&srv, 0x91, &bad, "past any run's length");
    tk_buf_free(&bad);
    tk_bye(&bad, UINT64_MAX - 1, 2, 0);
    expect_closed(&srv, 0xa1, &bad, "BYE time");
    tk_buf_free(&bad);
    /* nothing of them was stored */
    assert_int_equal(tk_q(db, "SELECT count(*) FROM runs WHERE live_bytes != 2000"), 0);
    assert_int_equal(tk_q(db, "SELECT count(*) FROM runs WHERE end_ns < 0 OR end_ns > 1000000"), 0);
    assert_int_equal(tk_q(db, "SELECT count(*) FROM events_all"), 3); /* a segment a run */
    assert_int_equal(tk_server_stop(&srv, SIGTERM), 0);
}

static void test_total_alloc_count_exact(void **state)
{
    (void)state;
    char db[700];
    make_db(db, sizeof db, "store-alloc-count");
    tk_server srv;
    assert_int_equal(tk_server_start(&srv, db, 0, NULL), 0);
    uint8_t id[16];
    id_of(id, 0xb1);
    tk_buf b = {0};
    uint64_t next = run_frames(&b, id, 2); /* two sampled allocations */
    tk_extras(&b);                         /* SIZES: 10 allocations in all */
    tk_bye(&b, 5000000, 2, 0);
    int fd = send_acked(srv.port, &b, next + 5);
    close(fd);
    assert_int_equal(tk_poll(db, 1, 20000, "SELECT count(*) FROM runs WHERE state = 'ended'"), 1);
    assert_int_equal(tk_q(db, "SELECT alloc_events FROM runs"), 2);
    assert_int_equal(tk_q(db, "SELECT total_alloc_count FROM runs"), 10);
    assert_int_equal(tk_server_stop(&srv, SIGTERM), 0);
    tk_buf_free(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lose_retried_when_disk_full),
        cmocka_unit_test(test_resume_needs_key),
        cmocka_unit_test(test_stop_checkpoints),
        cmocka_unit_test(test_foreign_database_refused),
        cmocka_unit_test(test_second_server_refused),
        cmocka_unit_test(test_impossible_values_refused),
        cmocka_unit_test(test_total_alloc_count_exact),
        /* last: it may move this process into a mount namespace of its own */
        cmocka_unit_test(test_readonly_database),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
