/* Fuzzes the server's HTTP request parsing (server/http_parse.c) the way
 * server/http.c uses it: the input is what a client sent on one connection;
 * requests are parsed off its front one after another (pipelining), each
 * with its bearer token checked and, for a file, its static path resolved.
 * Beyond "no sanitizer report", every answer must keep the parser's promises:
 * a complete request lies inside the input, its target is a path within the
 * limits, a static path has no "." or ".." segment, a refusal carries a 4xx,
 * and a prefix of the input never parses differently from the whole. */
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "fuzz.h"
#include "hs_http_parse.h"

#define CHECK(x)                                                                                   \
    do {                                                                                           \
        if (!(x)) abort();                                                                         \
    } while (0)

static void check_static_path(const char *target)
{
    char rel[HS_HTTP_TARGET_MAX + 16];
    long n = hs_http_static_path(rel, sizeof rel, target);
    if (n < 0) return;
    CHECK((size_t)n == strlen(rel) && n >= 1 && rel[0] == '/');
    CHECK(!strstr(rel, "/../") && !strstr(rel, "/./") && !strstr(rel, "//"));
    CHECK(strcmp(rel + n - (n >= 3 ? 3 : n), "/..") && strcmp(rel + n - (n >= 2 ? 2 : n), "/."));
    CHECK(rel[n - 1] != '/' && !strchr(rel, '\\'));
    /* a buffer too small is refused, never overrun */
    char small[8];
    long k = hs_http_static_path(small, sizeof small, target);
    CHECK(k < 0 || (k < (long)sizeof small && !strcmp(small, rel)));
}

static void check_request(const hs_http_req *r, const char *buf, size_t len, int rc)
{
    CHECK(r->head_len >= 16 && r->head_len <= len && r->head_len <= HS_HTTP_HEAD_MAX);
    CHECK(!memcmp(buf + r->head_len - 4, "\r\n\r\n", 4));
    CHECK(r->body_len <= HS_HTTP_BODY_MAX);
    CHECK(rc == HS_HTTP_COMPLETE ? r->head_len + r->body_len <= len
                                 : r->head_len + r->body_len > len);
    size_t ml = strlen(r->method), tl = strlen(r->target);
    CHECK(ml >= 1 && ml < sizeof r->method && tl >= 1 && tl < sizeof r->target);
    CHECK(r->target[0] == '/' && !memcmp(buf + ml + 1, r->target, tl));
    CHECK(strlen(r->if_none_match) < sizeof r->if_none_match);
    CHECK(!r->auth || (r->auth >= buf && r->auth + r->auth_len <= buf + r->head_len));
    if (r->auth) {
        int ok = hs_http_bearer_ok(r->auth, r->auth_len, "s3cret");
        CHECK(ok == (r->auth_len == 13 && !strncasecmp(r->auth, "bearer s3cret", 7) &&
                     !memcmp(r->auth + 7, "s3cret", 6)));
    }
    if (!r->is_api) check_static_path(r->target);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 64 * 1024) return 0;
    /* the connection's buffer, as read from the socket */
    char *buf = malloc(size ? size : 1);
    if (!buf) return 0;
    memcpy(buf, data, size);
    size_t off = 0;
    for (int requests = 0; requests < 64; requests++) {
        static hs_http_req r, half;
        hs_http_perr err = {0}, herr = {0};
        int rc = hs_http_parse_request(&r, buf + off, size - off, &err);
        if (rc == HS_HTTP_ERROR) {
            CHECK(err.status >= 400 && err.status < 500 && err.code && err.message);
        } else if (rc != HS_HTTP_INCOMPLETE) {
            CHECK(rc == HS_HTTP_HEAD || rc == HS_HTTP_COMPLETE);
            check_request(&r, buf + off, size - off, rc);
        }
        /* the same bytes arriving in two reads: the first half alone must
         * not be complete sooner, nor refused for another reason */
        size_t cut = (size - off) / 2;
        int hrc = hs_http_parse_request(&half, buf + off, cut, &herr);
        if (rc == HS_HTTP_COMPLETE && r.head_len + r.body_len <= cut)
            CHECK(hrc == HS_HTTP_COMPLETE && half.head_len == r.head_len &&
                  half.body_len == r.body_len && !strcmp(half.target, r.target));
        if (hrc == HS_HTTP_ERROR) CHECK(rc == HS_HTTP_ERROR && err.status == herr.status);
        if (rc != HS_HTTP_COMPLETE) break;
        off += r.head_len + r.body_len;
    }
    /* a target that did not come from a request line */
    if (size && data[0] == '/') {
        char t[HS_HTTP_TARGET_MAX];
        size_t n = size < sizeof t - 1 ? size : sizeof t - 1;
        memcpy(t, data, n);
        t[n] = '\0';
        check_static_path(t);
    }
    free(buf);
    return 0;
}
