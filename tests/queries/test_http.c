/* test_http: the JSON API and the dashboard's files through a real
 * heapstore-server (server/http.c) on an ephemeral loopback port: answers,
 * keep-alive and pipelining, the hard limits, bad requests, static files
 * with their types and caching, the bearer token, and concurrent clients. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "fixture.h"
#include "hs_testkit.h"

static char db[512], web[512];
static tk_server srv, tsrv;

static void write_file(const char *dir, const char *name, const char *text)
{
    char p[1024];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "w");
    fputs(text, f);
    fclose(f);
}

static int setup(void **state)
{
    (void)state;
    fx_tmp_path(db, sizeof db, "http.db");
    fx_tmp_path(web, sizeof web, "web");
    if (fx_build(db)) return -1;
    mkdir(web, 0700);
    write_file(web, "index.html", "<!doctype html><title>heapstore</title>\n");
    write_file(web, "app.js", "console.log('hi');\n");
    const char *const a1[] = {"--web-root", web, NULL};
    const char *const a2[] = {"--web-root", web, "--token", "s3cret", NULL};
    char db2[600];
    snprintf(db2, sizeof db2, "%s.token.db", db);
    if (fx_build(db2)) return -1;
    if (tk_server_start(&srv, db, 0, a1)) return -1;
    if (tk_server_start(&tsrv, db2, 0, a2)) return -1;
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    tk_server_stop(&srv, SIGTERM);
    tk_server_stop(&tsrv, SIGTERM);
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' '%s'* ", web, db);
    return system(cmd) == 0 ? 0 : -1;
}

static char *req(tk_server *s, const char *text)
{
    char *a = tk_exchange(s->port, text, strlen(text), 10000);
    assert_non_null(a);
    return a;
}

static json_t *body_json(const char *a)
{
    json_error_t e;
    json_t *j = json_loads(tk_http_body(a), 0, &e);
    assert_non_null(j);
    return j;
}

static void check_error(const char *a, int status, const char *code)
{
    char ct[128];
    assert_int_equal(tk_http_status(a), status);
    assert_true(tk_http_header(a, "Content-Type", ct, sizeof ct));
    assert_string_equal(ct, "application/json");
    json_t *j = body_json(a);
    json_t *e = json_object_get(j, "error");
    assert_string_equal(json_string_value(json_object_get(e, "code")), code);
    assert_true(strlen(json_string_value(json_object_get(e, "message"))) > 5);
    json_decref(j);
}

static void test_api_answers(void **state)
{
    (void)state;
    char *a = req(&srv, "GET /api/health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    char h[256];
    assert_int_equal(tk_http_status(a), 200);
    assert_true(tk_http_header(a, "Cache-Control", h, sizeof h));
    assert_string_equal(h, "no-store");
    json_t *j = body_json(a);
    assert_true(json_is_true(json_object_get(j, "ok")));
    json_decref(j);
    free(a);

    a = req(&srv, "GET /api/runs/program=app,version=1/top?at=peak HTTP/1.1\r\nConnection: "
                  "close\r\n\r\n");
    assert_int_equal(tk_http_status(a), 200);
    j = body_json(a);
    assert_int_equal(json_integer_value(json_object_get(j, "total_bytes")), FX_PEAK_BYTES);
    json_decref(j);
    free(a);

    a = req(&srv, "GET /api/runs/1/export?format=collapsed HTTP/1.1\r\nConnection: close\r\n\r\n");
    assert_int_equal(tk_http_status(a), 200);
    assert_true(tk_http_header(a, "Content-Disposition", h, sizeof h));
    assert_non_null(strstr(tk_http_body(a), "main;big_alloc 100000\n"));
    free(a);

    const char sql[] = "{\"sql\": \"SELECT count(*) FROM runs\"}";
    char r[512];
    snprintf(r, sizeof r,
             "POST /api/sql HTTP/1.1\r\nContent-Type: application/json\r\nContent-Length: "
             "%zu\r\nConnection: close\r\n\r\n%s",
             strlen(sql), sql);
    a = req(&srv, r);
    assert_int_equal(tk_http_status(a), 200);
    assert_non_null(strstr(tk_http_body(a), "\"rows\":[[2]]"));
    free(a);
    a = req(&srv, "HEAD /api/health HTTP/1.1\r\nConnection: close\r\n\r\n");
    assert_int_equal(tk_http_status(a), 200);
    assert_string_equal(tk_http_body(a), ""); /* headers only */
    free(a);
}

static void test_api_errors(void **state)
{
    (void)state;
    static const struct {
        const char *req;
        int status;
        const char *code;
    } cases[] = {
        {"GET /api/runs/42 HTTP/1.1\r\nConnection: close\r\n\r\n", 404, "not_found"},
        {"GET /api/runs/1/top?at=99 HTTP/1.1\r\nConnection: close\r\n\r\n", 400, "bad_request"},
        {"GET /api/runs/1/top?at=yesterday HTTP/1.1\r\nConnection: close\r\n\r\n", 400,
         "bad_request"},
        {"GET /api/runs/pro%gram HTTP/1.1\r\nConnection: close\r\n\r\n", 400, "bad_request"},
        {"GET /api/nope HTTP/1.1\r\nConnection: close\r\n\r\n", 404, "not_found"},
        {"PUT /api/runs HTTP/1.1\r\nContent-Length: 0\r\nConnection: close\r\n\r\n", 405,
         "bad_request"},
        {"POST /api/sql HTTP/1.1\r\nContent-Length: 27\r\nConnection: close\r\n\r\n"
         "{\"sql\": \"DELETE FROM runs\"}",
         400, "bad_request"},
        {"GARBAGE\r\n\r\n", 400, "bad_request"},
        {"GET /api/health HTTP/2.0\r\n\r\n", 400, "bad_request"},
        {"GET api/health HTTP/1.1\r\n\r\n", 400, "bad_request"},
        {"POST /api/sql HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 411,
         "bad_request"},
        {"POST /api/sql HTTP/1.1\r\nContent-Length: 99999999\r\n\r\n", 413, "too_large"},
        {"POST /api/sql HTTP/1.1\r\nContent-Length: -1\r\n\r\n", 400, "bad_request"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *a = req(&srv, cases[i].req);
        if (tk_http_status(a) != cases[i].status) fprintf(stderr, "case %zu: %s\n", i, a);
        check_error(a, cases[i].status, cases[i].code);
        free(a);
    }
    /* a head over 16 KiB, and a body over 1 MiB actually sent */
    size_t n = 20000;
    char *big = malloc(n + 64);
    strcpy(big, "GET /api/health HTTP/1.1\r\nX-Pad: ");
    memset(big + strlen(big), 'a', n);
    big[n] = '\0';
    char *a = tk_exchange(srv.port, big, strlen(big), 10000);
    check_error(a, 431, "too_large");
    free(a);
    free(big);
    size_t bn = (2u << 20);
    big = malloc(bn + 200);
    int hl = snprintf(big, 200, "POST /api/sql HTTP/1.1\r\nContent-Length: %zu\r\n\r\n", bn);
    memset(big + hl, ' ', bn);
    a = tk_exchange(srv.port, big, (size_t)hl + bn, 10000);
    check_error(a, 413, "too_large");
    free(a);
    free(big);
}

static void test_keepalive_pipelining(void **state)
{
    (void)state;
    /* three requests in one write; the last one closes */
    const char *three = "GET /api/health HTTP/1.1\r\n\r\n"
                        "GET /api/runs?limit=1 HTTP/1.1\r\n\r\n"
                        "GET /api/runs/1 HTTP/1.1\r\nConnection: close\r\n\r\n";
    char *a = req(&srv, three);
    int n = 0;
    for (const char *p = a; (p = strstr(p, "HTTP/1.1 200 OK")); p++) n++;
    assert_int_equal(n, 3);
    assert_non_null(strstr(a, "Connection: keep-alive"));
    assert_non_null(strstr(a, "Connection: close"));
    free(a);
    /* HTTP/1.0 closes by default */
    a = req(&srv, "GET /api/health HTTP/1.0\r\n\r\n");
    assert_int_equal(tk_http_status(a), 200);
    assert_non_null(strstr(a, "Connection: close"));
    free(a);
}

static void test_static_files(void **state)
{
    (void)state;
    char h[256];
    char *a = req(&srv, "GET / HTTP/1.1\r\nConnection: close\r\n\r\n");
    assert_int_equal(tk_http_status(a), 200);
    assert_true(tk_http_header(a, "Content-Type", h, sizeof h));
    assert_string_equal(h, "text/html; charset=utf-8");
    assert_true(tk_http_header(a, "Cache-Control", h, sizeof h));
    assert_string_equal(h, "no-cache");
    assert_non_null(strstr(tk_http_body(a), "<title>heapstore</title>"));
    char etag[128];
    assert_true(tk_http_header(a, "ETag", etag, sizeof etag));
    free(a);
    char r[512];
    snprintf(r, sizeof r,
             "GET /index.html HTTP/1.1\r\nIf-None-Match: %s\r\nConnection: close\r\n\r\n", etag);
    a = req(&srv, r);
    assert_int_equal(tk_http_status(a), 304);
    free(a);
    a = req(&srv, "GET /app.js HTTP/1.1\r\nConnection: close\r\n\r\n");
    assert_int_equal(tk_http_status(a), 200);
    assert_true(tk_http_header(a, "Content-Type", h, sizeof h));
    assert_string_equal(h, "text/javascript; charset=utf-8");
    assert_true(tk_http_header(a, "Cache-Control", h, sizeof h));
    assert_non_null(strstr(h, "max-age="));
    free(a);
    a = req(&srv, "GET /runs/3 HTTP/1.1\r\nConnection: close\r\n\r\n"); /* a page route */
    assert_int_equal(tk_http_status(a), 200);
    assert_non_null(strstr(tk_http_body(a), "<title>heapstore</title>"));
    free(a);
    a = req(&srv, "GET /missing.css HTTP/1.1\r\nConnection: close\r\n\r\n");
    check_error(a, 404, "not_found");
    free(a);
    static const char *const escapes[] = {"/../../etc/passwd", "/%2e%2e/%2e%2e/etc/passwd", "/a/..",
                                          "/%00x"};
    for (size_t i = 0; i < 4; i++) {
        snprintf(r, sizeof r, "GET %s HTTP/1.1\r\nConnection: close\r\n\r\n", escapes[i]);
        a = req(&srv, r);
        assert_true(tk_http_status(a) == 400 || tk_http_status(a) == 404);
        assert_null(strstr(a, "root:"));
        free(a);
    }
}

static void test_token(void **state)
{
    (void)state;
    char *a = req(&tsrv, "GET /api/health HTTP/1.1\r\nConnection: close\r\n\r\n");
    check_error(a, 401, "unauthorized");
    free(a);
    a = req(&tsrv, "GET /api/runs HTTP/1.1\r\nAuthorization: Bearer s3crex\r\nConnection: "
                   "close\r\n\r\n");
    check_error(a, 401, "unauthorized");
    free(a);
    a = req(&tsrv, "GET /api/runs HTTP/1.1\r\nAuthorization: Bearer s3cret\r\nConnection: "
                   "close\r\n\r\n");
    assert_int_equal(tk_http_status(a), 200);
    free(a);
    a = req(&tsrv, "GET / HTTP/1.1\r\nConnection: close\r\n\r\n"); /* the page loads without */
    assert_int_equal(tk_http_status(a), 200);
    free(a);
}

static void *client_thread(void *arg)
{
    long ok = 0;
    (void)arg;
    for (int i = 0; i < 25; i++) {
        const char *r = i % 2
                            ? "GET /api/runs/1/flame?at=peak HTTP/1.1\r\nConnection: close\r\n\r\n"
                            : "GET /api/runs/2/leaks HTTP/1.1\r\nConnection: close\r\n\r\n";
        char *a = tk_exchange(srv.port, r, strlen(r), 20000);
        if (a && tk_http_status(a) == 200) ok++;
        free(a);
    }
    return (void *)ok;
}

static void test_concurrent(void **state)
{
    (void)state;
    pthread_t t[12];
    for (int i = 0; i < 12; i++) pthread_create(&t[i], NULL, client_thread, NULL);
    long total = 0;
    for (int i = 0; i < 12; i++) {
        void *r;
        pthread_join(t[i], &r);
        total += (long)r;
    }
    assert_int_equal(total, 12 * 25);
    /* a client that goes away mid-request does not hurt the server */
    int fd = tk_connect(srv.port);
    const char *half = "GET /api/runs/1/top HTTP/1.1\r\nHost";
    assert_true(write(fd, half, strlen(half)) > 0);
    close(fd);
    char *a = req(&srv, "GET /api/health HTTP/1.1\r\nConnection: close\r\n\r\n");
    assert_int_equal(tk_http_status(a), 200);
    free(a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_api_answers),
        cmocka_unit_test(test_api_errors),
        cmocka_unit_test(test_keepalive_pipelining),
        cmocka_unit_test(test_static_files),
        cmocka_unit_test(test_token),
        cmocka_unit_test(test_concurrent),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
