/* hs_http_parse: the HTTP/1.x request parsing of heapstore-server, as pure
 * functions over (bytes, len) so that they can be tested and fuzzed without
 * a socket. hs_http_parse_request() reads one request head from the start of
 * a buffer and says where the body is and whether all of it has arrived;
 * the caller owns the buffer, and the request's pointers (auth) point into
 * it. Every part a peer controls is bounded: the head (HS_HTTP_HEAD_MAX, 431),
 * the target (HS_HTTP_TARGET_MAX, 414), the body (HS_HTTP_BODY_MAX, 413,
 * Content-Length only, 411 for chunked). hs_http_static_path() turns a
 * request target into a safe path below the dashboard's folder.
 */
#ifndef HS_HTTP_PARSE_H
#define HS_HTTP_PARSE_H

#include <stddef.h>
#include <stdint.h>

#define HS_HTTP_HEAD_MAX   (16 * 1024)
#define HS_HTTP_BODY_MAX   (1024 * 1024)
#define HS_HTTP_TARGET_MAX 4096
#define HS_HTTP_ETAG_MAX   128

typedef struct hs_http_req {
    char method[16];                      /* NUL-terminated, at most 15 bytes */
    char target[HS_HTTP_TARGET_MAX];      /* NUL-terminated, starts with '/', no NUL inside */
    int http10;                           /* HTTP/1.0 (else 1.1) */
    int keep_alive;                       /* the version's default, or what Connection: says */
    int head_only;                        /* method HEAD */
    int is_api;                           /* target is /api, /api/… or /api?… */
    int expect_continue;                  /* Expect: 100-continue */
    char if_none_match[HS_HTTP_ETAG_MAX]; /* empty when absent or too long */
    const char *auth;                     /* Authorization value (trimmed), NULL if absent */
    size_t auth_len;
    size_t head_len; /* bytes of the head, its blank line included */
    size_t body_len; /* Content-Length (0 without one) */
} hs_http_req;

/* Why a request is refused: an HTTP status, the API's error code
 * (docs/api.md) and a sentence for the client. Static strings. */
typedef struct hs_http_perr {
    int status;
    const char *code;
    const char *message;
} hs_http_perr;

enum {
    HS_HTTP_INCOMPLETE = 0, /* the head has not all arrived (and is within its limit) */
    HS_HTTP_HEAD = 1,       /* the head is parsed; the body has not all arrived */
    HS_HTTP_COMPLETE = 2,   /* head and body are there: head_len + body_len <= len */
    HS_HTTP_ERROR = -1,     /* refuse with *err, then close */
};

/* Parses the request at the start of buf[0..len). Returns one of the values
 * above; *out is filled for HS_HTTP_HEAD and HS_HTTP_COMPLETE. */
int hs_http_parse_request(hs_http_req *out, const char *buf, size_t len, hs_http_perr *err);

/* 1 if an Authorization value (v, n) is "Bearer TOKEN" for exactly token;
 * the time taken does not depend on how much of the token matched. */
int hs_http_bearer_ok(const char *v, size_t n, const char *token);

/* 1 if (v, n) is exactly token (NUL-terminated), compared in a time that
 * does not depend on how much of it matched: the one token comparison of the
 * server, for HTTP bearers and collectors' HELLO alike. */
int hs_token_eq(const char *v, size_t n, const char *token);

/* The file path a static request asks for, relative to the web root:
 * the target's path part percent-decoded ('+' stays '+'), starting with '/',
 * "index.html" appended to a path ending in '/'. Refuses (-1) NULs, '\',
 * "." and ".." segments, empty segments and anything that does not fit in
 * cap; returns the length otherwise. */
long hs_http_static_path(char *out, size_t cap, const char *target);

#endif
