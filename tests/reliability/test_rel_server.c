/* test_rel_server: the server's own limits under pressure, against the real
 * heapstore-server on loopback with a real database (no collector, so this
 * runs in the sanitizer tree as well):
 *  - every accepted socket counts against the descriptor cap, HTTP clients
 *    too: at the cap (held by established streams, which nothing displaces)
 *    an HTTP client gets 503 with a JSON error, a stream is closed, both
 *    with a log line, and the server serves again once the crowd is gone;
 *  - a fault that repeats on every reconnect (a full disk) is logged once,
 *    then counted ("[repeated N times …]"), and the counts add up;
 *  - a connection whose frames the writer cannot commit yet (the database
 *    locked by another process) is no longer read past its 32 MiB in-flight
 *    cap: the server's memory stays bounded however fast the sender is,
 *    and once the lock goes everything is stored;
 *  - retention at work does not stall another connection;
 *  - the WAL stays bounded under sustained ingest while readers come and
 *    go (the writer runs its own checkpoints). */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
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
#include <sqlite3.h>

#include "hs_testkit.h"

static void start_server(tk_server *srv, const char *name, const char *const *extra)
{
    char dir[600], db[700];
    tk_tmpdir(dir, sizeof dir, name);
    snprintf(db, sizeof db, "%s/hs.db", dir);
    assert_int_equal(tk_server_start(srv, db, 0, extra), 0);
}

/* Removes the folder of a passed test's database (the big ones only: what
 * a failed test leaves is kept for a look). */
static void remove_dir_of(const char *db)
{
    char dir[700], cmd[800];
    snprintf(dir, sizeof dir, "%s", db);
    char *slash = strrchr(dir, '/');
    if (!slash) return;
    *slash = 0;
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd)) { /* best effort */
    }
}

static int health_status(int port)
{
    char *body = NULL;
    int st = tk_http(port, "GET", "/api/health", NULL, NULL, &body);
    free(body);
    return st;
}

/* A run on a connection of its own: HELLO, symbols and one stack, then
 * EVENTS frames of n allocations each, acknowledged one at a time. */
typedef struct run {
    int fd;
    uint8_t id[16];
    uint64_t frames, t;
} run;

static int run_start(run *r, int port, uint8_t tag)
{
    memset(r, 0, sizeof *r);
    memset(r->id, tag, 16);
    r->fd = tk_connect(port);
    if (r->fd < 0) return -1;
    tk_buf b = {0};
    tk_header(&b);
    tk_hello(&b, r->id, 0, 0, NULL);
    tk_symbols(&b, 0, 2, 0);
    uint64_t pcs[] = {1, 2};
    tk_stack(&b, 1, pcs, 2);
    int rc = tk_send(r->fd, b.p, b.len);
    tk_buf_free(&b);
    r->frames = 2;
    uint64_t got;
    if (!rc) rc = tk_wait_ack(r->fd, r->frames, &got, NULL, 0, 60000);
    return rc;
}

/* An EVENTS frame of n allocations of stack 1 into b. */
static void events_frame(tk_buf *b, uint64_t *t, size_t n)
{
    tk_event *ev = calloc(n, sizeof *ev);
    for (size_t i = 0; i < n; i++) {
        *t += 1000;
        ev[i] = (tk_event){*t, 1, 0, 64, 64};
    }
    tk_events(b, ev, n);
    free(ev);
}

static int run_step(run *r, size_t n)
{
    tk_buf b = {0};
    events_frame(&b, &r->t, n);
    int rc = tk_send(r->fd, b.p, b.len);
    tk_buf_free(&b);
    r->frames++;
    uint64_t got;
    if (!rc) rc = tk_wait_ack(r->fd, r->frames, &got, NULL, 0, 60000);
    return rc;
}

static int run_end(run *r)
{
    tk_buf b = {0};
    tk_bye(&b, r->t + 1, 0, 0);
    int rc = tk_send(r->fd, b.p, b.len);
    tk_buf_free(&b);
    r->frames++;
    uint64_t got;
    if (!rc) rc = tk_wait_ack(r->fd, r->frames, &got, NULL, 0, 60000);
    close(r->fd);
    return rc;
}

static char *read_log(const tk_server *srv)
{
    FILE *f = fopen(srv->log, "r");
    assert_non_null(f);
    size_t cap = 1 << 16, len = 0;
    char *s = malloc(cap);
    size_t n;
    while ((n = fread(s + len, 1, cap - len - 1, f)) > 0) {
        len += n;
        if (cap - len < 1024) s = realloc(s, cap *= 2);
    }
    s[len] = 0;
    fclose(f);
    return s;
}

/* Lines of the log with text: *full counts those written in full, the
 * return value adds the counts of the "[repeated N times" lines. */
static long log_count(const tk_server *srv, const char *text, long *full)
{
    char *s = read_log(srv);
    long total = 0;
    *full = 0;
    for (char *line = strtok(s, "\n"); line; line = strtok(NULL, "\n")) {
        if (!strstr(line, text)) continue;
        const char *rep = strstr(line, "[repeated ");
        if (rep) {
            total += strtol(rep + 10, NULL, 10);
        } else {
            (*full)++;
            total++;
        }
    }
    free(s);
    return total;
}

/* The number in "NAME:   N kB" of /proc/PID/status, in bytes. */
static uint64_t proc_status_kb(pid_t pid, const char *name)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    uint64_t v = 0;
    size_t nl = strlen(name);
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, name, nl) && line[nl] == ':') v = strtoull(line + nl + 1, NULL, 10);
    fclose(f);
    return v * 1024;
}

/* ---- the descriptor cap covers HTTP clients --------------------------------- */

static void test_http_counts_against_cap(void **state)
{
    (void)state;
    tk_server srv;
    start_server(&srv, "rel-cap", NULL);
    assert_int_equal(health_status(srv.port), 200);
    /* 96 descriptors: 64 for clients, the rest the server's own */
    assert_int_equal(tk_prlimit(srv.pid, RLIMIT_NOFILE, 96, UINT64_MAX), 0);
    /* 64 collector streams past HELLO: a slow HTTP client or one that has
     * not sent its HELLO would be displaced by a newcomer at the cap, these
     * never are */
    static run idle_runs[64];
    int idle[64];
    for (int i = 0; i < 64; i++) {
        assert_int_equal(run_start(&idle_runs[i], srv.port, (uint8_t)(0x80 + i)), 0);
        idle[i] = idle_runs[i].fd;
    }
    /* the next HTTP client is told why, in JSON, instead of waiting on a
     * server that cannot take its descriptor */
    char *body = NULL;
    int st = tk_http(srv.port, "GET", "/api/health", NULL, NULL, &body);
    if (st != 503) fprintf(stderr, "status %d: %s\n", st, body);
    assert_int_equal(st, 503);
    assert_non_null(strstr(body, "\"code\":\"busy\""));
    free(body);
    /* a collector stream is closed without a word (it retries later) */
    int fd = tk_connect(srv.port);
    assert_true(fd >= 0);
    tk_buf b = {0};
    uint8_t id[16];
    memset(id, 0x71, 16);
    tk_header(&b);
    tk_hello(&b, id, 0, 0, NULL);
    tk_send(fd, b.p, b.len);
    tk_buf_free(&b);
    assert_int_equal(tk_wait_ack(fd, 0, NULL, NULL, 0, 30000), -1);
    close(fd);
    assert_true(tk_wait_text(srv.log, "connection limit reached", 30000));
    /* a flood past the cap: every one is answered or closed, none hangs */
    int flood[40];
    for (int i = 0; i < 40; i++) {
        flood[i] = tk_connect(srv.port);
        if (flood[i] >= 0) {
            static const char req[] = "GET /api/health HTTP/1.1\r\nHost: x\r\n\r\n";
            tk_send(flood[i], req, sizeof req - 1);
        }
    }
    for (int i = 0; i < 40; i++)
        if (flood[i] >= 0) {
            assert_int_equal(tk_wait_closed(flood[i], 30000), 1);
            close(flood[i]);
        }
    /* the crowd goes: the server serves again */
    for (int i = 0; i < 64; i++) close(idle[i]);
    uint64_t deadline = tk_now_ms() + 30000;
    while (health_status(srv.port) != 200 && tk_now_ms() < deadline) usleep(50000);
    assert_int_equal(health_status(srv.port), 200);
    run r;
    assert_int_equal(run_start(&r, srv.port, 0x72), 0);
    assert_int_equal(run_step(&r, 10), 0);
    assert_int_equal(run_end(&r), 0);
    assert_int_equal(tk_server_stop(&srv, SIGTERM), 0);
}

/* ---- repeated errors are said once, then counted ------------------------------ */

static void test_disk_full_logged_once(void **state)
{
    (void)state;
    tk_server srv;
    /* With SIGXFSZ ignored (inherited by the server) a write past
     * RLIMIT_FSIZE fails with EFBIG, as a full disk fails with ENOSPC. */
    signal(SIGXFSZ, SIG_IGN);
    start_server(&srv, "rel-logrepeat", NULL);
    signal(SIGXFSZ, SIG_DFL);
    run r;
    assert_int_equal(run_start(&r, srv.port, 0x11), 0);
    assert_int_equal(run_end(&r), 0);
    /* Files may not grow past 16 KiB: a WAL frame (a 16 KiB page and its
     * header) never fits, so every commit fails, while the server's log
     * (a file too, and far shorter) can still be written. */
    assert_true(tk_file_size(srv.log) < 8192);
    assert_int_equal(tk_prlimit(srv.pid, RLIMIT_FSIZE, 16384, UINT64_MAX), 0);
    /* a collector reconnecting again and again, each HELLO failing: the
     * server closes the connection (a collector retries) rather than
     * REFUSE it (a collector would give the run up) */
    enum { ATTEMPTS = 25 };
    for (int i = 0; i < ATTEMPTS; i++) {
        uint8_t id[16];
        memset(id, 0x20, 16);
        id[0] = (uint8_t)i;
        int fd = tk_connect(srv.port);
        assert_true(fd >= 0);
        tk_buf b = {0};
        tk_header(&b);
        tk_hello(&b, id, 0, 0, NULL);
        assert_int_equal(tk_send(fd, b.p, b.len), 0);
        tk_buf_free(&b);
        char why[128] = "";
        int rc = tk_wait_ack(fd, 0, NULL, why, sizeof why, 60000);
        if (rc != -1) fprintf(stderr, "attempt %d: %d (%s)\n", i, rc, why);
        assert_int_equal(rc, -1);
        close(fd);
    }
    assert_int_equal(tk_prlimit(srv.pid, RLIMIT_FSIZE, UINT64_MAX, UINT64_MAX), 0);
    /* ingest resumes */
    assert_int_equal(run_start(&r, srv.port, 0x12), 0);
    assert_int_equal(run_step(&r, 10), 0);
    assert_int_equal(run_end(&r), 0);
    assert_int_equal(tk_server_stop(&srv, SIGTERM), 0); /* writes the last counts */
    assert_true(tk_file_size(srv.log) < 16384);
    /* each attempt was one failed transaction and one closed connection:
     * the first written in full, the rest counted, nothing lost */
    long full;
    long total = log_count(&srv, "transaction failed", &full);
    fprintf(stderr, "transaction failed: %ld lines in full, %ld in all\n", full, total);
    assert_int_equal(total, ATTEMPTS);
    assert_true(full >= 1 && full <= 4); /* one per 10 s period at most */
    total = log_count(&srv, "database error: the frames were not stored", &full);
    assert_int_equal(total, ATTEMPTS);
    assert_true(full >= 1 && full <= 4);
    assert_int_equal(tk_q(srv.db, "SELECT count(*) FROM runs"), 2);
    assert_int_equal(
        tk_q(srv.db, "SELECT count(*) FROM pragma_integrity_check WHERE integrity_check != 'ok'"),
        0);
}

/* ---- the in-flight cap bounds memory; a stalled writer does not stall others --- */

/* EVENTS frames of `per` allocations of stack 1, each time a fresh base time
 * (the deltas are encoded once). Sizes and weights of 1 MiB so that each
 * event takes ~10 bytes and a frame carries more bytes than work. */
typedef struct flood {
    int port, fd;
    uint8_t *body;
    size_t body_len, per;
    uint64_t t;
    volatile int stop;
    volatile uint64_t sent; /* bytes written to the socket */
    volatile uint64_t frames;
    int failed;
} flood;

static void flood_init(flood *f, int port, size_t per)
{
    memset(f, 0, sizeof *f);
    f->port = port;
    f->per = per;
    f->body = malloc(per * 24);
    hs_wr wr;
    hs_wr_init(&wr, f->body, per * 24);
    for (size_t i = 0; i < per; i++) hs_event_put(&wr, i ? 1000 : 0, 1, 0, 1u << 20, 1u << 20);
    f->body_len = hs_wr_len(&wr);
}

static void *flood_main(void *arg)
{
    flood *f = arg;
    uint8_t *payload = malloc(f->body_len + 16);
    tk_buf b = {0};
    while (!f->stop) {
        hs_wr wr;
        hs_wr_init(&wr, payload, 16);
        hs_wr_varint(&wr, f->t);
        size_t hl = hs_wr_len(&wr);
        memcpy(payload + hl, f->body, f->body_len);
        f->t += 1000 * f->per;
        b.len = 0;
        tk_raw_frame(&b, HS_FRAME_EVENTS, payload, hl + f->body_len);
        /* poll with a short timeout so that stop is seen while blocked */
        size_t off = 0;
        while (off < b.len && !f->stop) {
            ssize_t n = send(f->fd, b.p + off, b.len - off, MSG_DONTWAIT | MSG_NOSIGNAL);
            if (n > 0) {
                off += (size_t)n;
                f->sent += (uint64_t)n;
            } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
                struct pollfd p = {f->fd, POLLOUT, 0};
                poll(&p, 1, 50);
            } else {
                f->failed = 1;
                f->stop = 1;
            }
        }
        if (off == b.len) f->frames++;
    }
    tk_buf_free(&b);
    free(payload);
    return NULL;
}

static void test_inflight_cap(void **state)
{
    (void)state;
    tk_server srv;
    start_server(&srv, "rel-inflight", NULL);
    /* the fast sender's run, and a small one on its own connection */
    run big, small;
    assert_int_equal(run_start(&big, srv.port, 0x31), 0);
    assert_int_equal(run_start(&small, srv.port, 0x32), 0);
    assert_int_equal(run_step(&small, 10), 0);
    uint64_t rss0 = proc_status_kb(srv.pid, "VmRSS");
    assert_true(rss0 > 0);

    /* Another process takes the database's write lock: the writer waits
     * (up to its 5 s busy timeout; the lock is held 3 s at most). */
    sqlite3 *lock;
    assert_int_equal(sqlite3_open_v2(srv.db, &lock, SQLITE_OPEN_READWRITE, NULL), SQLITE_OK);
    sqlite3_busy_timeout(lock, 30000);
    assert_int_equal(sqlite3_exec(lock, "BEGIN IMMEDIATE", NULL, NULL, NULL), SQLITE_OK);
    uint64_t locked_at = tk_now_ms();

    flood f;
    flood_init(&f, srv.port, 20000); /* ~260 KB a frame */
    f.fd = big.fd;
    f.t = 1000000;
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, flood_main, &f), 0);
    /* until the server stops reading (no progress for 500 ms), 256 MiB
     * went, or the lock's time is up */
    uint64_t last = 0, last_ms = tk_now_ms(), rss_max = 0;
    while (tk_now_ms() - locked_at < 3000 && f.sent < (256u << 20)) {
        usleep(20000);
        uint64_t rss = proc_status_kb(srv.pid, "VmRSS");
        if (rss > rss_max) rss_max = rss;
        if (f.sent != last) {
            last = f.sent;
            last_ms = tk_now_ms();
        } else if (tk_now_ms() - last_ms >= 500) {
            break;
        }
    }
    uint64_t sent_locked = f.sent;
    uint64_t rss = proc_status_kb(srv.pid, "VmRSS");
    if (rss > rss_max) rss_max = rss;
    assert_int_equal(sqlite3_exec(lock, "COMMIT", NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(lock);
    fprintf(
        stderr,
        "while the writer waited: %.1f MiB sent; server RSS %.1f MiB before, %.1f MiB at most\n",
        sent_locked / 1048576.0, rss0 / 1048576.0, rss_max / 1048576.0);
    /* What the server took in while nothing could be committed: at most
     * its 32 MiB cap plus one read and the sockets' buffers (generously
     * 32 MiB), and its memory grew by no more than three times the cap. */
    assert_true(sent_locked <= (64u << 20));
    assert_true(rss_max <= rss0 + (96u << 20));

    /* The writer works again: the small run is acknowledged, twice and at
     * its end, while the sender keeps the big one at its cap. (Each of these
     * waits behind the big run's 32 MiB in flight, ~13 s of the sanitized
     * server's work: five steps made this test 85 s there.) */
    for (int i = 0; i < 2; i++) assert_int_equal(run_step(&small, 10), 0);
    assert_int_equal(run_end(&small), 0);
    /* the big run is acknowledged too: ACKs past what was sent while the
     * lock was held */
    uint64_t got = 0;
    uint64_t want = big.frames + (f.frames > 2 ? f.frames - 2 : 0);
    f.stop = 1;
    pthread_join(th, NULL);
    assert_false(f.failed);
    assert_int_equal(tk_wait_ack(big.fd, want, &got, NULL, 0, 120000), 0);
    uint64_t rss_end = proc_status_kb(srv.pid, "VmRSS");
    fprintf(stderr, "flood: %llu frames, %.1f MiB; server RSS at the end %.1f MiB\n",
            (unsigned long long)f.frames, f.sent / 1048576.0, rss_end / 1048576.0);
    /* (No bound on it: a sanitizer's quarantine keeps what was freed.) */
    close(big.fd);
    free(f.body);
    assert_int_equal(tk_server_stop(&srv, SIGTERM), 0);
    assert_int_equal(tk_q(srv.db, "SELECT state = 'ended' FROM runs WHERE id = 2"), 1);
    assert_true(tk_q(srv.db, "SELECT sum(n_events) FROM events_all WHERE run = 1") >=
                (int64_t)(f.frames > 2 ? f.frames - 2 : 0) * (int64_t)f.per);
    remove_dir_of(srv.db);
}

/* ---- the WAL stays bounded with readers coming and going ---------------------- */

typedef struct reader {
    const char *db;
    int hold_ms;
    volatile int stop;
    uint64_t reads;
} reader;

/* Read transactions of hold_ms each, back to back, a new connection every
 * few (a dashboard's queries): with two of these there is always one. */
static void *reader_main(void *arg)
{
    reader *r = arg;
    sqlite3 *db = NULL;
    while (!r->stop) {
        if (!db && sqlite3_open_v2(r->db, &db, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK) break;
        sqlite3_busy_timeout(db, 5000);
        sqlite3_exec(db, "BEGIN", NULL, NULL, NULL);
        sqlite3_exec(db, "SELECT count(*) FROM events", NULL, NULL, NULL);
        usleep((useconds_t)r->hold_ms * 1000);
        sqlite3_exec(db, "COMMIT", NULL, NULL, NULL);
        if (++r->reads % 4 == 0) {
            sqlite3_close(db);
            db = NULL;
        }
    }
    sqlite3_close(db);
    return NULL;
}

static void test_wal_bounded(void **state)
{
    (void)state;
    tk_server srv;
    const char *args[] = {"--granularity", "1ms", NULL};
    start_server(&srv, "rel-wal", args);
    char wal[800];
    snprintf(wal, sizeof wal, "%s-wal", srv.db);
    run r;
    assert_int_equal(run_start(&r, srv.port, 0x41), 0);
    reader rd[2] = {{srv.db, 80, 0, 0}, {srv.db, 80, 0, 0}};
    pthread_t th[2];
    assert_int_equal(pthread_create(&th[0], NULL, reader_main, &rd[0]), 0);
    usleep(40000);
    assert_int_equal(pthread_create(&th[1], NULL, reader_main, &rd[1]), 0);
    /* Sustained ingest, one commit per frame, each frame crossing rollup
     * buckets (several pages written per commit): without checkpoints
     * that can finish, the WAL would take ~100 KB per commit. */
    enum { FRAMES = 3000 };
    uint64_t wal_max = 0, t0 = tk_now_ms();
    int frames = 0;
    for (; frames < FRAMES && tk_now_ms() - t0 < 240000; frames++) {
        tk_buf b = {0};
        tk_event ev[50];
        for (int i = 0; i < 50; i++) {
            r.t += 40000;
            ev[i] = (tk_event){r.t, 1, 0, 64, 64};
        }
        tk_events(&b, ev, 50);
        assert_int_equal(tk_send(r.fd, b.p, b.len), 0);
        tk_buf_free(&b);
        r.frames++;
        uint64_t got;
        assert_int_equal(tk_wait_ack(r.fd, r.frames, &got, NULL, 0, 60000), 0);
        uint64_t w = tk_file_size(wal);
        if (w > wal_max) wal_max = w;
    }
    rd[0].stop = rd[1].stop = 1;
    pthread_join(th[0], NULL);
    pthread_join(th[1], NULL);
    fprintf(stderr, "%d commits in %.1f s, %llu + %llu reads; WAL at most %.1f MiB\n", frames,
            (tk_now_ms() - t0) / 1000.0, (unsigned long long)rd[0].reads,
            (unsigned long long)rd[1].reads, wal_max / 1048576.0);
    assert_true(frames >= 1000);
    assert_true(rd[0].reads + rd[1].reads >= 10);
    /* the writer's bound (32 MiB) plus one transaction's pages, generously */
    assert_true(wal_max <= (48u << 20));
    /* idle, with no reader: the writer empties the WAL */
    uint64_t deadline = tk_now_ms() + 30000;
    while (tk_file_size(wal) > 0 && tk_now_ms() < deadline) usleep(50000);
    assert_int_equal(tk_file_size(wal), 0);
    assert_int_equal(run_end(&r), 0);
    assert_int_equal(tk_server_stop(&srv, SIGTERM), 0);
    assert_int_equal(tk_q(srv.db, "SELECT sum(n_events) FROM events_all"), frames * 50);
    remove_dir_of(srv.db);
}

/* ---- retention at work does not stall another connection ---------------------- */

static void test_retention_beside_ingest(void **state)
{
    (void)state;
    tk_server srv;
    start_server(&srv, "rel-retain", NULL);
    /* an ended run of 100000 EVENTS frames, stored as a few segments (its
     * start is in 2023: with --retain-events 1 every row of it is old enough
     * to go) */
    run a;
    assert_int_equal(run_start(&a, srv.port, 0x51), 0);
    enum { ROWS = 100000 };
    tk_buf b = {0};
    for (int i = 0; i < ROWS; i++) {
        a.t += 1000;
        tk_event ev = {a.t, 1, 0, 64, 64};
        tk_events(&b, &ev, 1);
    }
    assert_int_equal(tk_send(a.fd, b.p, b.len), 0);
    tk_buf_free(&b);
    a.frames += ROWS;
    assert_int_equal(run_end(&a), 0);
    assert_int_equal(tk_server_stop(&srv, SIGTERM), 0);
    assert_int_equal(tk_q(srv.db, "SELECT sum(n_events) FROM events"), ROWS);

    /* restarted with retention: it deletes in small transactions from the
     * start, while another run streams and is acknowledged frame by frame */
    const char *retain[] = {"--retain-events", "1", NULL};
    char db[sizeof srv.db];
    snprintf(db, sizeof db, "%s", srv.db);
    assert_int_equal(tk_server_start(&srv, db, 0, retain), 0);
    run r;
    assert_int_equal(run_start(&r, srv.port, 0x52), 0);
    int64_t left_at_first_ack = -1;
    for (int i = 0; i < 50; i++) {
        assert_int_equal(run_step(&r, 20), 0);
        if (i == 0) left_at_first_ack = tk_q(srv.db, "SELECT count(*) FROM events WHERE run = 1");
    }
    assert_int_equal(run_end(&r), 0);
    fprintf(stderr, "old rows left when the other run's first frame was acknowledged: %lld\n",
            (long long)left_at_first_ack);
    /* retention finishes, and the new run is whole */
    uint64_t deadline = tk_now_ms() + 120000;
    while (tk_q(srv.db, "SELECT count(*) FROM events WHERE run = 1") > 0 && tk_now_ms() < deadline)
        usleep(50000);
    assert_int_equal(tk_q(srv.db, "SELECT count(*) FROM events WHERE run = 1"), 0);
    assert_int_equal(tk_q(srv.db, "SELECT sum(n_events) FROM events WHERE run = 2"), 1000);
    assert_int_equal(tk_q(srv.db, "SELECT alloc_events FROM runs WHERE id = 2"), 1000);
    assert_true(tk_wait_text(srv.log, "retention: deleted", 30000));
    assert_int_equal(tk_server_stop(&srv, SIGTERM), 0);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_http_counts_against_cap),
        cmocka_unit_test(test_disk_full_logged_once),
        cmocka_unit_test(test_inflight_cap),
        cmocka_unit_test(test_retention_beside_ingest),
        cmocka_unit_test(test_wal_bounded),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
