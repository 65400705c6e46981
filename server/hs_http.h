/* hs_http: the HTTP side of heapstore-server (the JSON API of docs/api.md
 * and the dashboard's static files).
 *
 * The server's network layer accepts every TCP client on the one port and
 * reads its first bytes: 0x89 starts a collector stream (docs/protocol.md),
 * anything else is handed here with hs_http_adopt(). From that call on this
 * module owns the client handle: it reads, answers, closes it and frees it
 * (with free()) in its own close callback. The loop thread only parses and
 * writes; queries run on libuv's thread pool with their own read-only SQLite
 * connections, so they never block ingest or each other.
 */
#ifndef HS_HTTP_H
#define HS_HTTP_H

#include <stddef.h>

#include <uv.h>

typedef struct hs_http hs_http;

typedef struct hs_http_config {
    const char *db_path;  /* the database the server writes (opened read-only here) */
    const char *token;    /* NULL: no authentication; else required as a bearer token */
    const char *web_root; /* folder of the dashboard's files; NULL: none served */
} hs_http_config;

int hs_http_new(hs_http **out, uv_loop_t *loop, const hs_http_config *cfg);

/* Takes over `client`, an accepted uv_tcp_t allocated with malloc() whose
 * reading has been stopped; `first` holds the n bytes already read from it
 * (copied; the caller keeps its buffer). The handle's data field is this
 * module's from now on. With busy set the client is only answered 503
 * (code "busy": the server holds as many connections as it can) and closed. */
void hs_http_adopt(hs_http *h, uv_tcp_t *client, const char *first, size_t n, int busy);

/* How many adopted clients are open (their handles not yet closed). */
size_t hs_http_clients(const hs_http *h);

/* Closes every client it owns; frees h once they are closed (call before the
 * final uv_run that drains close callbacks). Accepts NULL. */
void hs_http_free(hs_http *h);

#endif
