/* test_http_parse: the server's HTTP request parser (server/http_parse.c)
 * case by case: complete, partial and pipelined requests, every limit just
 * under and just over, the refusals with their status, bearer tokens and
 * static paths (traversal in every spelling). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "hs_http_parse.h"

#define COUNTOF(a) (sizeof(a) / sizeof((a)[0]))

static int parse(const char *text, hs_http_req *r, hs_http_perr *e)
{
    return hs_http_parse_request(r, text, strlen(text), e);
}

static void test_requests(void **state)
{
    (void)state;
    static const struct {
        const char *in;
        int rc, status; /* status: the refusal's, for HS_HTTP_ERROR */
        const char *method, *target;
        int keep_alive, is_api;
        size_t body_len;
    } cases[] = {
        {"GET /api/health HTTP/1.1\r\n\r\n", HS_HTTP_COMPLETE, 0, "GET", "/api/health", 1, 1, 0},
        {"GET /api HTTP/1.0\r\n\r\n", HS_HTTP_COMPLETE, 0, "GET", "/api", 0, 1, 0},
        {"GET /apix HTTP/1.1\r\n\r\n", HS_HTTP_COMPLETE, 0, "GET", "/apix", 1, 0, 0},
        {"GET /api?x HTTP/1.0\r\nConnection: keep-alive\r\n\r\n", HS_HTTP_COMPLETE, 0, "GET",
         "/api?x", 1, 1, 0},
        {"GET / HTTP/1.1\r\nconnection:  CLOSE \r\n\r\n", HS_HTTP_COMPLETE, 0, "GET", "/", 0, 0, 0},
        {"POST /api/sql HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc", HS_HTTP_COMPLETE, 0, "POST",
         "/api/sql", 1, 1, 3},
        {"POST /api/sql HTTP/1.1\r\nContent-Length: 4\r\n\r\nabc", HS_HTTP_HEAD, 0, "POST",
         "/api/sql", 1, 1, 4},
        {"POST /api/sql HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\nabc",
         HS_HTTP_COMPLETE, 0, "POST", "/api/sql", 1, 1, 3},
        {"POST /api/sql HTTP/1.1\r\nContent-Length: 1048576\r\n\r\n", HS_HTTP_HEAD, 0, "POST",
         "/api/sql", 1, 1, 1048576},
        {"GET /api/health HTTP/1.1\r\n", HS_HTTP_INCOMPLETE, 0, NULL, NULL, 0, 0, 0},
        {"", HS_HTTP_INCOMPLETE, 0, NULL, NULL, 0, 0, 0},
        /* refusals */
        {"GARBAGE\r\n\r\n", HS_HTTP_ERROR, 400, NULL, NULL, 0, 0, 0},
        {"\r\n\r\n", HS_HTTP_ERROR, 400, NULL, NULL, 0, 0, 0},
        {" / HTTP/1.1\r\n\r\n", HS_HTTP_ERROR, 400, NULL, NULL, 0, 0, 0},
        {"G(T / HTTP/1.1\r\n\r\n", HS_HTTP_ERROR, 400, NULL, NULL, 0, 0, 0},
        {"GET / HTTP/2.0\r\n\r\n", HS_HTTP_ERROR, 400, NULL, NULL, 0, 0, 0},
        {"GET / HTTP/1.9\r\n\r\n", HS_HTTP_ERROR, 400, NULL, NULL, 0, 0, 0},
        {"GET  HTTP/1.1\r\n\r\n", HS_HTTP_ERROR, 400, NULL, NULL, 0, 0, 0},
        {"GET api/health HTTP/1.1\r\n\r\n", HS_HTTP_ERROR, 400, NULL, NULL, 0, 0, 0},
        {"GET / HTTP/1.1 \r\n\r\n", HS_HTTP_ERROR, 400, NULL, NULL, 0, 0, 0},
        {"VERYLONGMETHODNAME / HTTP/1.1\r\n\r\n", HS_HTTP_ERROR, 400, NULL, NULL, 0, 0, 0},
        {"GET / HTTP/1.1\r\nX: a\nb\r\n\r\n", HS_HTTP_ERROR, 400, NULL, NULL, 0, 0, 0},
        {"POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n", HS_HTTP_ERROR, 400, NULL, NULL, 0, 0, 0},
        {"POST / HTTP/1.1\r\nContent-Length: \r\n\r\n", HS_HTTP_ERROR, 400, NULL, NULL, 0, 0, 0},
        {"POST / HTTP/1.1\r\nContent-Length: 1x\r\n\r\n", HS_HTTP_ERROR, 400, NULL, NULL, 0, 0, 0},
        {"POST / HTTP/1.1\r\nContent-Length: 1234567890123\r\n\r\n", HS_HTTP_ERROR, 400, NULL, NULL,
         0, 0, 0},
        {"POST / HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 30\r\n\r\nabc", HS_HTTP_ERROR,
         400, NULL, NULL, 0, 0, 0},
        {"POST / HTTP/1.1\r\nContent-Length: 1048577\r\n\r\n", HS_HTTP_ERROR, 413, NULL, NULL, 0, 0,
         0},
        {"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", HS_HTTP_ERROR, 411, NULL,
         NULL, 0, 0, 0},
    };
    for (size_t i = 0; i < COUNTOF(cases); i++) {
        hs_http_req r;
        hs_http_perr e = {0};
        int rc = parse(cases[i].in, &r, &e);
        if (rc != cases[i].rc) fprintf(stderr, "case %zu: rc %d\n", i, rc);
        assert_int_equal(rc, cases[i].rc);
        if (rc == HS_HTTP_ERROR) {
            assert_int_equal(e.status, cases[i].status);
            assert_non_null(e.code);
            assert_non_null(e.message);
        }
        if (rc != HS_HTTP_HEAD && rc != HS_HTTP_COMPLETE) continue;
        assert_string_equal(r.method, cases[i].method);
        assert_string_equal(r.target, cases[i].target);
        assert_int_equal(r.keep_alive, cases[i].keep_alive);
        assert_int_equal(r.is_api, cases[i].is_api);
        assert_int_equal(r.body_len, cases[i].body_len);
        assert_int_equal(r.head_len, strstr(cases[i].in, "\r\n\r\n") - cases[i].in + 4);
    }
}

static void test_headers(void **state)
{
    (void)state;
    hs_http_req r;
    hs_http_perr e;
    const char *t = "HEAD /app.js HTTP/1.1\r\nIf-None-Match: \"5f-13\"\r\n"
                    "authorization:\tBearer s3cret  \r\nExpect: 100-continue\r\n"
                    "Content-Length: 2\r\n\r\n";
    assert_int_equal(parse(t, &r, &e), HS_HTTP_HEAD);
    assert_true(r.head_only);
    assert_true(r.expect_continue);
    assert_string_equal(r.if_none_match, "\"5f-13\"");
    assert_int_equal(r.auth_len, 13);
    assert_memory_equal(r.auth, "Bearer s3cret", 13);
    assert_true(hs_http_bearer_ok(r.auth, r.auth_len, "s3cret"));
    /* an If-None-Match too long to be ours is ignored, not truncated */
    char big[600];
    snprintf(big, sizeof big, "GET / HTTP/1.1\r\nIf-None-Match: %0300d\r\n\r\n", 7);
    assert_int_equal(parse(big, &r, &e), HS_HTTP_COMPLETE);
    assert_string_equal(r.if_none_match, "");
    assert_null(r.auth);
}

static void test_pipelined(void **state)
{
    (void)state;
    const char *t = "POST /api/sql HTTP/1.1\r\nContent-Length: 4\r\n\r\nabcd"
                    "GET /api/health HTTP/1.1\r\n\r\nGET /x HTTP/1.1\r\n\r\n";
    size_t len = strlen(t), off = 0;
    const char *want[] = {"/api/sql", "/api/health", "/x"};
    for (size_t i = 0; i < COUNTOF(want); i++) {
        hs_http_req r;
        hs_http_perr e;
        assert_int_equal(hs_http_parse_request(&r, t + off, len - off, &e), HS_HTTP_COMPLETE);
        assert_string_equal(r.target, want[i]);
        off += r.head_len + r.body_len;
    }
    assert_int_equal(off, len);
}

/* The head limit: a head of exactly HS_HTTP_HEAD_MAX bytes is taken, one
 * more is a 431, as soon as more than that has arrived without an end; a target of 4095 bytes
 * is taken, 4096 is a 414. */
static void test_limits(void **state)
{
    (void)state;
    hs_http_req r;
    hs_http_perr e;
    char *buf = malloc(HS_HTTP_HEAD_MAX + 64);
    const char *start = "GET / HTTP/1.1\r\nX-Pad: ";
    size_t sl = strlen(start);
    for (int extra = 0; extra <= 1; extra++) {
        size_t pad = HS_HTTP_HEAD_MAX - sl - 4 + (size_t)extra;
        memcpy(buf, start, sl);
        memset(buf + sl, 'a', pad);
        memcpy(buf + sl + pad, "\r\n\r\n", 4);
        size_t len = sl + pad + 4;
        int rc = hs_http_parse_request(&r, buf, len, &e);
        assert_int_equal(rc, extra ? HS_HTTP_ERROR : HS_HTTP_COMPLETE);
        if (extra) assert_int_equal(e.status, 431);
        /* before its end has arrived: waiting while it may still fit */
        assert_int_equal(hs_http_parse_request(&r, buf, len - 4, &e), HS_HTTP_INCOMPLETE);
    }
    memset(buf, 'a', HS_HTTP_HEAD_MAX + 1);
    assert_int_equal(hs_http_parse_request(&r, buf, HS_HTTP_HEAD_MAX, &e), HS_HTTP_INCOMPLETE);
    assert_int_equal(hs_http_parse_request(&r, buf, HS_HTTP_HEAD_MAX + 1, &e), HS_HTTP_ERROR);
    assert_int_equal(e.status, 431);
    for (int extra = 0; extra <= 1; extra++) {
        size_t tl = HS_HTTP_TARGET_MAX - 1 + (size_t)extra;
        memcpy(buf, "GET /", 5);
        memset(buf + 5, 'x', tl - 1);
        size_t len = 4 + tl;
        memcpy(buf + len, " HTTP/1.1\r\n\r\n", 13);
        len += 13;
        int rc = hs_http_parse_request(&r, buf, len, &e);
        assert_int_equal(rc, extra ? HS_HTTP_ERROR : HS_HTTP_COMPLETE);
        if (extra) assert_int_equal(e.status, 414);
        if (!extra) assert_int_equal(strlen(r.target), tl);
    }
    free(buf);
}

static void test_bearer(void **state)
{
    (void)state;
    static const struct {
        const char *v;
        int ok;
    } cases[] = {
        {"Bearer s3cret", 1}, {"bearer s3cret", 1},  {"Bearer s3cre", 0},   {"Bearer s3crett", 0},
        {"Bearer S3cret", 0}, {"Basic s3cret", 0},   {"Bearer", 0},         {"", 0},
        {"Bearers3cret", 0},  {"Bearer  s3cret", 0}, {"Bearer s3cre\0", 0},
    };
    for (size_t i = 0; i < COUNTOF(cases); i++) {
        size_t n = strlen(cases[i].v) + (i == COUNTOF(cases) - 1);
        assert_int_equal(hs_http_bearer_ok(cases[i].v, n, "s3cret"), cases[i].ok);
    }
    assert_int_equal(hs_http_bearer_ok(NULL, 0, "s3cret"), 0);
    assert_int_equal(hs_http_bearer_ok("Bearer x", 8, NULL), 0);
}

/* The one token comparison, as HELLO uses it: exact bytes, any length. */
static void test_token_eq(void **state)
{
    (void)state;
    static const struct {
        const char *v;
        size_t n;
        int ok;
    } cases[] = {
        {"s3cret", 6, 1}, {"s3cre", 5, 0},    {"s3crett", 7, 0}, {"S3cret", 6, 0},
        {"", 0, 0},       {"s3cret\0", 7, 0}, {"s3creT", 6, 0},  {"x3cret", 6, 0},
    };
    for (size_t i = 0; i < COUNTOF(cases); i++)
        assert_int_equal(hs_token_eq(cases[i].v, cases[i].n, "s3cret"), cases[i].ok);
    assert_int_equal(hs_token_eq("", 0, ""), 1);
    assert_int_equal(hs_token_eq(NULL, 0, "s3cret"), 0);
    assert_int_equal(hs_token_eq("s3cret", 6, NULL), 0);
}

static void test_static_paths(void **state)
{
    (void)state;
    static const struct {
        const char *target, *want; /* want NULL: refused */
    } cases[] = {
        {"/", "/index.html"},
        {"/app.js?v=3", "/app.js"},
        {"/runs/3/", "/runs/3/index.html"},
        {"/a+b%20c.html#x", "/a+b c.html"},
        {"/.well-known", "/.well-known"},
        {"/..", NULL},
        {"/../etc/passwd", NULL},
        {"/a/../../etc/passwd", NULL},
        {"/%2e%2e/etc/passwd", NULL},
        {"/%2E%2e%2fetc%2fpasswd", NULL},
        {"/a/%2e", NULL},
        {"/a/./b", NULL},
        {"//etc/passwd", NULL},
        {"/a%00b", NULL},
        {"/a%5c..%5cb", NULL},
        {"/a%", NULL},
        {"/a%2", NULL},
        {"/a%zz", NULL},
        {"/%2f", NULL},
        {"x", NULL},
        {"", NULL},
    };
    for (size_t i = 0; i < COUNTOF(cases); i++) {
        char out[64];
        long n = hs_http_static_path(out, sizeof out, cases[i].target);
        if (!cases[i].want) {
            if (n >= 0) fprintf(stderr, "case %zu: took %s\n", i, out);
            assert_true(n < 0);
            continue;
        }
        assert_int_equal(n, strlen(cases[i].want));
        assert_string_equal(out, cases[i].want);
    }
    /* no room for the index name: refused, not cut */
    char small[8];
    assert_true(hs_http_static_path(small, sizeof small, "/abc/") < 0);
    assert_int_equal(hs_http_static_path(small, sizeof small, "/abcdef"), 7);
    assert_true(hs_http_static_path(small, sizeof small, "/abcdefg") < 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_requests),     cmocka_unit_test(test_headers),
        cmocka_unit_test(test_pipelined),    cmocka_unit_test(test_limits),
        cmocka_unit_test(test_bearer),       cmocka_unit_test(test_token_eq),
        cmocka_unit_test(test_static_paths),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
