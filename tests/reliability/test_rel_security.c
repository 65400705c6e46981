/* test_rel_security: who gets in and what a hostile peer can do, against the
 * real heapstore-server on loopback with a real database:
 *  - POST /api/sql is read-only by construction and bounded: writes, ATTACH,
 *    PRAGMA changes, load_extension, VACUUM, transactions, two statements are
 *    refused; a runaway recursive query is stopped with code "timeout"; giant
 *    values and results are refused or truncated; the database is unchanged;
 *  - --token (and HEAPSTORE_TOKEN) guards the API (Bearer) and the CLI;
 *  - a run's data cannot be written through another run's connection;
 *  - peer limits (string length, stack depth, frame size, open connections)
 *    each crossed, with a clear log line, while a good run on its own
 *    connection goes on unharmed.
 * No collector is preloaded, so this runs in the sanitizer tree as well. */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cmocka.h>

#include "hs_testkit.h"

/* ---- a good run, fed frame by frame on its own connection ---------------- */

typedef struct good_run {
    int fd;
    uint8_t id[16];
    uint64_t frames, t, events;
} good_run;

static void good_send(good_run *g, tk_buf *b, uint64_t nframes)
{
    assert_int_equal(tk_send(g->fd, b->p, b->len), 0);
    g->frames += nframes;
    uint64_t got;
    assert_int_equal(tk_wait_ack(g->fd, g->frames, &got, NULL, 0, 30000), 0);
    tk_buf_free(b);
}

static void good_start(good_run *g, int port, uint8_t tag, const char *token)
{
    memset(g, 0, sizeof *g);
    memset(g->id, tag, 16);
    g->fd = tk_connect(port);
    assert_true(g->fd >= 0);
    tk_buf b = {0};
    tk_header(&b);
    tk_hello(&b, g->id, 0, 0, token);
    assert_int_equal(tk_send(g->fd, b.p, b.len), 0);
    assert_int_equal(tk_wait_ack(g->fd, 0, NULL, NULL, 0, 30000), 0);
    tk_buf_free(&b);
    tk_symbols(&b, 0, 3, 0);
    uint64_t pcs[] = {1, 2, 3};
    tk_stack(&b, 1, pcs, 3);
    tk_stack(&b, 2, pcs + 1, 2);
    good_send(g, &b, 2);
}

/* One EVENTS frame of 10 allocations (stack 1) and 5 frees, acknowledged. */
static void good_step(good_run *g)
{
    tk_event ev[15];
    for (int i = 0; i < 15; i++) {
        g->t += 1000000;
        ev[i] = (tk_event){g->t, 1, i >= 10, 100, 100};
    }
    tk_buf b = {0};
    tk_events(&b, ev, 15);
    good_send(g, &b, 1);
    g->events += 15;
}

static void good_end(good_run *g, const char *db)
{
    tk_buf b = {0};
    uint64_t allocs = g->events / 15 * 10, frees = g->events / 15 * 5;
    tk_bye(&b, g->t + 1, allocs, frees);
    good_send(g, &b, 1);
    close(g->fd);
    char hex[33];
    for (int i = 0; i < 16; i++) snprintf(hex + 2 * i, 3, "%02x", g->id[i]);
    assert_int_equal(tk_poll(db, 1, 30000,
                             "SELECT state = 'ended' FROM runs WHERE hex(uuid) = upper('%s')", hex),
                     1);
    assert_int_equal(tk_q(db, "SELECT alloc_events FROM runs WHERE hex(uuid) = upper('%s')", hex),
                     allocs);
    assert_int_equal(tk_q(db, "SELECT free_events FROM runs WHERE hex(uuid) = upper('%s')", hex),
                     frees);
}

static void start_server(tk_server *srv, const char *name, const char *const *extra)
{
    char dir[600], db[700];
    tk_tmpdir(dir, sizeof dir, name);
    snprintf(db, sizeof db, "%s/hs.db", dir);
    assert_int_equal(tk_server_start(srv, db, 0, extra), 0);
}

static int health_ok(int port, const char *headers)
{
    char *body = NULL;
    int st = tk_http(port, "GET", "/api/health", headers, NULL, &body);
    int ok = st == 200 && strstr(body, "\"ok\":true") != NULL;
    free(body);
    return ok;
}

/* ---- POST /api/sql ---------------------------------------------------------- */

static int sql(int port, const char *json, char **body)
{
    return tk_http(port, "POST", "/api/sql", "Content-Type: application/json\r\n", json, body);
}

/* Statements that would write, attach or load anything: 400 bad_request,
 * and no file made. */
static void sql_writes_refused(int port)
{
    static const char *const refused[] = {
        "{\"sql\": \"INSERT INTO runs(id, uuid) VALUES (99, x'00')\"}",
        "{\"sql\": \"UPDATE runs SET program = 'x'\"}",
        "{\"sql\": \"DELETE FROM events\"}",
        "{\"sql\": \"DROP TABLE runs\"}",
        "{\"sql\": \"CREATE TABLE t(x)\"}",
        "{\"sql\": \"CREATE TEMP TABLE t(x)\"}",
        "{\"sql\": \"ATTACH DATABASE '/tmp/hs-rel-attach.db' AS a\"}",
        "{\"sql\": \"PRAGMA user_version = 7\"}",
        "{\"sql\": \"PRAGMA journal_mode = DELETE\"}",
        "{\"sql\": \"PRAGMA writable_schema = 1\"}",
        "{\"sql\": \"PRAGMA query_only = 0\"}",
        "{\"sql\": \"SELECT load_extension('/tmp/nope.so')\"}",
        "{\"sql\": \"VACUUM INTO '/tmp/hs-rel-vacuum.db'\"}",
        "{\"sql\": \"BEGIN IMMEDIATE\"}",
        "{\"sql\": \"SELECT 1; DELETE FROM runs\"}",
        "{\"sql\": \"WITH x AS (SELECT 1) DELETE FROM runs\"}",
        "{\"sql\": \"REPLACE INTO runs(id) SELECT id FROM runs\"}",
    };
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        char *body = NULL;
        int st = sql(port, refused[i], &body);
        if (st != 400 || !strstr(body, "\"bad_request\""))
            fprintf(stderr, "not refused: %s -> %d %s\n", refused[i], st, body);
        assert_int_equal(st, 400);
        assert_non_null(strstr(body, "\"bad_request\""));
        free(body);
    }
    assert_int_equal(access("/tmp/hs-rel-attach.db", F_OK), -1);
    assert_int_equal(access("/tmp/hs-rel-vacuum.db", F_OK), -1);
}

/* Time, rows and size are bounded. */
static void sql_bounded(int port)
{
    /* A runaway query ends with code "timeout" (the time limit, not the
     * client, stops it). */
    char *body = NULL;
    int st = sql(port,
                 "{\"sql\": \"WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c)"
                 " SELECT count(*) FROM c\", \"timeout_ms\": 300}",
                 &body);
    assert_int_equal(st, 400);
    assert_non_null(strstr(body, "\"timeout\""));
    free(body);
    /* An endless result is cut at the row limit and says so. */
    st = sql(port,
             "{\"sql\": \"WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c)"
             " SELECT x FROM c\", \"limit\": 5000, \"timeout_ms\": 30000}",
             &body);
    assert_int_equal(st, 200);
    assert_non_null(strstr(body, "\"truncated\":true"));
    assert_non_null(strstr(body, "\"row_count\":5000"));
    assert_non_null(strstr(body, "[5000]]"));
    free(body);
    /* A giant value is refused before it is built... */
    st = sql(port, "{\"sql\": \"SELECT zeroblob(900000000)\"}", &body);
    assert_int_equal(st, 400);
    assert_non_null(strstr(body, "too big"));
    free(body);
    /* ...and a row of several large ones is cut, not sent whole (32 MiB). */
    st = sql(port,
             "{\"sql\": \"SELECT zeroblob(16000000), zeroblob(16000000), zeroblob(16000000)\", "
             "\"timeout_ms\": 30000}",
             &body);
    assert_int_equal(st, 200);
    assert_true(strlen(body) < 1000);
    assert_non_null(strstr(body, "\"truncated\":true"));
    free(body);
}

static void test_sql_read_only_and_bounded(void **state)
{
    (void)state;
    tk_server srv;
    start_server(&srv, "rel-sql", NULL);
    good_run g;
    good_start(&g, srv.port, 0x51, NULL);
    for (int i = 0; i < 4; i++) good_step(&g);
    good_end(&g, srv.db);
    int64_t runs = tk_q(srv.db, "SELECT count(*) FROM runs");
    int64_t events = tk_q(srv.db, "SELECT count(*) FROM events");
    int64_t version = tk_q(srv.db, "PRAGMA user_version");

    sql_writes_refused(srv.port);

    sql_bounded(srv.port);

    /* Nothing was changed, and the server still answers. */
    assert_int_equal(tk_q(srv.db, "SELECT count(*) FROM runs"), runs);
    assert_int_equal(tk_q(srv.db, "SELECT count(*) FROM events"), events);
    assert_int_equal(tk_q(srv.db, "PRAGMA user_version"), version);
    assert_int_equal(tk_q(srv.db, "SELECT count(*) FROM pragma_table_list WHERE name = 't'"), 0);
    assert_true(health_ok(srv.port, NULL));
    assert_int_equal(tk_server_stop(&srv, SIGTERM), 0);
}

/* ---- tokens ------------------------------------------------------------------ */

static void check_token_server(tk_server *srv)
{
    /* collectors: HELLO without or with a wrong token is refused, clearly */
    static const char *const bad[] = {NULL, "wrong", "s3cre", "s3cret "};
    uint8_t id[16];
    memset(id, 0x7a, 16);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        tk_buf b = {0};
        tk_header(&b);
        tk_hello(&b, id, 0, 0, bad[i]);
        int fd = tk_connect(srv->port);
        assert_int_equal(tk_send(fd, b.p, b.len), 0);
        char reason[256] = "";
        assert_int_equal(tk_wait_ack(fd, 0, NULL, reason, sizeof reason, 30000), 1);
        assert_string_equal(reason, "bad token");
        close(fd);
        tk_buf_free(&b);
    }
    assert_int_equal(tk_q(srv->db, "SELECT count(*) FROM runs"), 0);
    good_run g;
    good_start(&g, srv->port, 0x7b, "s3cret");
    good_step(&g);
    good_end(&g, srv->db);

    /* the API: 401 without the bearer token or with a wrong one */
    static const struct {
        const char *headers;
        int status;
        const char *text;
    } cases[] = {
        {NULL, 401, "Authorization: Bearer"},
        {"Authorization: Bearer wrong\r\n", 401, "wrong token"},
        {"Authorization: Basic czNjcmV0\r\n", 401, "wrong token"},
        {"Authorization: Bearer s3cret\r\n", 200, "\"runs\""},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *body = NULL;
        int st = tk_http(srv->port, "GET", "/api/runs", cases[i].headers, NULL, &body);
        if (st != cases[i].status) fprintf(stderr, "case %zu: %d %s\n", i, st, body);
        assert_int_equal(st, cases[i].status);
        assert_non_null(strstr(body, cases[i].text));
        if (st == 401) assert_non_null(strstr(body, "\"unauthorized\""));
        free(body);
    }
    /* the CLI: HEAPSTORE_TOKEN is its bearer token */
    char bin[600], url[64];
    snprintf(bin, sizeof bin, "%s", tk_build_path("bin/heapstore"));
    snprintf(url, sizeof url, "HEAPSTORE_URL=http://127.0.0.1:%d", srv->port);
    const char *argv[] = {bin, "runs", "--json", NULL};
    const char *with[] = {url, "HEAPSTORE_TOKEN=s3cret", NULL};
    const char *without[] = {url, "HEAPSTORE_TOKEN=", NULL};
    tk_out o;
    assert_int_equal(tk_run(&o, argv, with, TK_PRELOAD_NONE, 0), 0);
    assert_int_equal(o.code, 0);
    assert_non_null(strstr(o.out, "testprog"));
    tk_out_free(&o);
    assert_int_equal(tk_run(&o, argv, without, TK_PRELOAD_NONE, 0), 0);
    assert_true(o.code != 0);
    assert_non_null(strstr(o.err, "Authorization: Bearer"));
    tk_out_free(&o);
}

static void test_tokens(void **state)
{
    (void)state;
    tk_server srv;
    const char *args[] = {"--token", "s3cret", NULL};
    start_server(&srv, "rel-token", args);
    check_token_server(&srv);
    assert_int_equal(tk_server_stop(&srv, SIGTERM), 0);
    /* the same with the token given in the server's environment */
    setenv("HEAPSTORE_TOKEN", "s3cret", 1);
    start_server(&srv, "rel-token-env", NULL);
    unsetenv("HEAPSTORE_TOKEN");
    check_token_server(&srv);
    assert_int_equal(tk_server_stop(&srv, SIGTERM), 0);
}

/* ---- no writing through another run's connection ----------------------------- */

static void test_no_forgery(void **state)
{
    (void)state;
    tk_server srv;
    start_server(&srv, "rel-forgery", NULL);
    good_run a;
    good_start(&a, srv.port, 0xa1, NULL); /* defines stacks 1 and 2 in its run */
    good_step(&a);
    /* Run B uses stack 1 without defining it: the ids are A's, not B's. */
    uint8_t bid[16];
    memset(bid, 0xb2, 16);
    tk_buf b = {0};
    tk_header(&b);
    tk_hello(&b, bid, 0, 0, NULL);
    tk_event ev = {1000, 1, 0, 4096, 4096};
    tk_events(&b, &ev, 1);
    int fd = tk_connect(srv.port);
    assert_int_equal(tk_send(fd, b.p, b.len), 0);
    assert_int_equal(tk_wait_closed(fd, 30000), 1);
    close(fd);
    tk_buf_free(&b);
    assert_true(tk_wait_text(srv.log, "stack id 1 never defined", 30000));
    /* Run A's id on a new connection without the resumed flag: refused. */
    tk_header(&b);
    tk_hello(&b, a.id, 0, 0, NULL);
    tk_events(&b, &ev, 1);
    fd = tk_connect(srv.port);
    assert_int_equal(tk_send(fd, b.p, b.len), 0);
    char reason[256] = "";
    assert_int_equal(tk_wait_ack(fd, 0, NULL, reason, sizeof reason, 30000), 1);
    assert_non_null(strstr(reason, "already in use"));
    close(fd);
    tk_buf_free(&b);
    /* A goes on and holds exactly its own events; B holds none. */
    good_step(&a);
    good_end(&a, srv.db);
    assert_int_equal(tk_q(srv.db,
                          "SELECT coalesce(sum(alloc_events + free_events), 0) FROM runs "
                          "WHERE hex(uuid) = '%s'",
                          "B2B2B2B2B2B2B2B2B2B2B2B2B2B2B2B2"),
                     0);
    assert_int_equal(tk_server_stop(&srv, SIGTERM), 0);
}

/* ---- peer limits ---------------------------------------------------------------- */

/* A HELLO whose program string is n bytes long. */
static void hello_with_program(tk_buf *b, size_t n)
{
    uint8_t *payload = malloc(n + 256);
    hs_wr wr;
    hs_wr_init(&wr, payload, n + 256);
    uint8_t id[16];
    memset(id, 0xc3, 16);
    hs_wr_bytes(&wr, id, 16);
    hs_wr_varint(&wr, 0); /* first_seq */
    hs_wr_varint(&wr, 0); /* flags */
    hs_wr_varint(&wr, 1); /* pid */
    hs_wr_varint(&wr, 1); /* ppid */
    uint8_t zero[16] = {0};
    hs_wr_bytes(&wr, zero, 16);
    hs_wr_varint(&wr, 1700000000ull * 1000000000ull);
    hs_wr_varint(&wr, 1);   /* sample_bytes */
    hs_wr_varint(&wr, 64);  /* max_depth */
    hs_wr_varint(&wr, 100); /* rss_interval_ms */
    char *prog = malloc(n);
    memset(prog, 'p', n);
    prog[0] = '/';
    hs_wr_str(&wr, prog, n);
    hs_wr_varint(&wr, 0); /* argc */
    hs_wr_cstr(&wr, "host");
    hs_wr_varint(&wr, 0); /* labels */
    hs_wr_cstr(&wr, "");  /* token */
    hs_wr_cstr(&wr, "test");
    tk_header(b);
    tk_raw_frame(b, HS_FRAME_HELLO, payload, hs_wr_len(&wr));
    free(prog);
    free(payload);
}

/* Sends b on a new connection; the server must close it and log text. */
static void expect_closed(tk_server *srv, tk_buf *b, const char *text)
{
    int fd = tk_connect(srv->port);
    assert_true(fd >= 0);
    tk_send(fd, b->p, b->len); /* may fail half-way: the server closes early */
    assert_int_equal(tk_wait_closed(fd, 60000), 1);
    close(fd);
    tk_buf_free(b);
    if (!tk_wait_text(srv->log, text, 30000)) fprintf(stderr, "no log line with '%s'\n", text);
    assert_true(tk_wait_text(srv->log, text, 1));
}

/* A head over 16 KiB (431) and a body over 2 MiB (413). */
static void http_limits(int port)
{
    char *head = malloc(20000);
    memset(head, 'a', 19990);
    memcpy(head, "X-Pad: ", 7);
    memcpy(head + 19990, "\r\n", 3);
    char *body = NULL;
    assert_int_equal(tk_http(port, "GET", "/api/health", head, NULL, &body), 431);
    assert_non_null(strstr(body, "too_large"));
    free(body);
    free(head);
    char *big_body = malloc((2u << 20) + 1);
    memset(big_body, ' ', 2u << 20);
    big_body[2u << 20] = '\0';
    assert_int_equal(tk_http(port, "POST", "/api/sql", NULL, big_body, &body), 413);
    assert_non_null(strstr(body, "too_large"));
    free(body);
    free(big_body);
}

/* Open connections: with its descriptors limited to 64 the server
 * turns away what it cannot hold (closed, with a log line), keeps
 * serving the connections it holds, and accepts again once the flood
 * is gone. */
static void connection_flood(tk_server *srv, good_run *g)
{
    assert_int_equal(tk_prlimit(srv->pid, RLIMIT_NOFILE, 64, UINT64_MAX), 0);
    int flood[200], nflood = 0;
    for (int i = 0; i < 200; i++) {
        flood[nflood] = tk_connect(srv->port);
        if (flood[nflood] >= 0) nflood++;
    }
    assert_true(nflood > 64);
    assert_int_equal(tk_wait_closed(flood[nflood - 1], 30000), 1);
    assert_true(tk_wait_text(srv->log, "connection limit reached", 30000));
    good_step(g);
    for (int i = 0; i < nflood; i++) close(flood[i]);
    assert_int_equal(tk_prlimit(srv->pid, RLIMIT_NOFILE, UINT64_MAX, UINT64_MAX), 0);
    uint64_t deadline = tk_now_ms() + 30000;
    while (!health_ok(srv->port, NULL) && tk_now_ms() < deadline) usleep(50000);
    assert_true(health_ok(srv->port, NULL));
}

static void test_peer_limits(void **state)
{
    (void)state;
    tk_server srv;
    start_server(&srv, "rel-limits", NULL);
    good_run g;
    good_start(&g, srv.port, 0x99, NULL);
    good_step(&g);

    /* string length: 4096 bytes is the limit, 4097 is refused */
    tk_buf b = {0};
    hello_with_program(&b, 4096);
    int fd = tk_connect(srv.port);
    assert_int_equal(tk_send(fd, b.p, b.len), 0);
    assert_int_equal(tk_wait_ack(fd, 0, NULL, NULL, 0, 30000), 0);
    close(fd);
    tk_buf_free(&b);
    hello_with_program(&b, 4097);
    expect_closed(&srv, &b, "malformed HELLO");
    good_step(&g);

    /* stack depth: 1024 frames is the limit */
    uint8_t id[16];
    memset(id, 0xd4, 16);
    static uint64_t pcs[1025];
    for (int i = 0; i < 1025; i++) pcs[i] = 1;
    tk_header(&b);
    tk_hello(&b, id, 0, 0, NULL);
    tk_symbols(&b, 0, 1, 0);
    tk_stack(&b, 1, pcs, 1025);
    expect_closed(&srv, &b, "malformed STACKS");
    good_step(&g);

    /* frame size: a length over 16 MiB ends the connection at once */
    memset(id, 0xd5, 16);
    tk_header(&b);
    tk_hello(&b, id, 0, 0, NULL);
    uint8_t big[] = {HS_FRAME_EVENTS, 0x81, 0x80, 0x80, 0x08}; /* 16 MiB + 1 */
    tk_buf_append(&b, big, sizeof big);
    expect_closed(&srv, &b, "absurd frame length");
    good_step(&g);

    /* HTTP head and body limits, with the good run in between */
    http_limits(srv.port);
    good_step(&g);

    connection_flood(&srv, &g);

    good_step(&g);
    good_end(&g, srv.db);
    assert_int_equal(tk_server_stop(&srv, SIGTERM), 0);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sql_read_only_and_bounded),
        cmocka_unit_test(test_tokens),
        cmocka_unit_test(test_no_forgery),
        cmocka_unit_test(test_peer_limits),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
