/* hs_http: the HTTP side of heapstore-server (the JSON API of docs/api.md
 * and the dashboard's static files).
 *
 * The server's network layer accepts every TCP client on the one port and
 * reads its first bytes: 0x89 starts a collector stream (docs/protocol.md),
 * anything else is handed here with hs_http_adopt(). From that call on this
 * module owns the client handle: it reads, answers, closes it and frees it
 * (with free()) in its own close callback. The loop thread only parses and
 * writes; queries run on libuv's thread pool with their own read-only SQLite
 * connections, so they never block ingest. User SQL (POST /api/sql) has a lane
 * of its own: one thread and a queue of HS_HTTP_SQL_QUEUE requests (more are
 * answered 503, code "busy"), so that heavy SQL cannot take the pool from the
 * dashboard's queries. GET /api/health is answered on the loop itself.
 *
 * Timeouts: a request's head must arrive within header_timeout_ns of its
 * first byte, and its body must not stall that long (else 408 and close); a
 * keep-alive connection idle for idle_timeout_ns is closed. 0 disables one.
 */
#ifndef HS_HTTP_H
#define HS_HTTP_H

#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#define HS_HTTP_SQL_QUEUE 8 /* SQL requests waiting for the SQL lane's thread */

typedef struct hs_http hs_http;

typedef struct hs_http_config {
    const char *db_path;    /* the database the server writes (opened read-only here) */
    const char *token;      /* NULL: no authentication; else required as a bearer token */
    const char *read_token; /* NULL: none; else admitted too (only with token set) */
    const char *web_root;   /* folder of the dashboard's files; NULL: none served */
    uint64_t header_timeout_ns;
    uint64_t idle_timeout_ns;
    /* POST /api/gc (docs/api.md): applies the JSON body on the writer and
     * waits for it; on a thread of the pool, never the loop. Returns the
     * HTTP status and sets *answer (JSON text, malloc'd). NULL: no route. */
    int (*gc)(void *data, const char *body, size_t len, char **answer);
    void *gc_data;
} hs_http_config;

int hs_http_new(hs_http **out, uv_loop_t *loop, const hs_http_config *cfg);

/* Takes over `client`, an accepted uv_tcp_t allocated with malloc() whose
 * reading has been stopped; `first` holds the n bytes already read from it
 * (copied; the caller keeps its buffer). The handle's data field is this
 * module's from now on. With busy set the client is only answered 503
 * (code "busy": the server holds as many connections as it can) and closed. */
void hs_http_adopt(hs_http *h, uv_tcp_t *client, const char *first, size_t n, int busy);

/* How many adopted clients hold a socket (not yet being closed). */
size_t hs_http_clients(const hs_http *h);

/* When (uv_hrtime) the client that has waited longest without sending a
 * complete request head (idle keep-alive ones included) began to wait;
 * UINT64_MAX when none waits. hs_http_evict_oldest() closes that client to
 * make room for a new one (returns 0, or -1 when none waits). */
uint64_t hs_http_oldest_waiting(const hs_http *h);
int hs_http_evict_oldest(hs_http *h);

/* How often a sweep for timeouts a_ns and b_ns (0: off) runs: a few times
 * per the shorter one, from 20 ms to one second. Shared by the HTTP side
 * and the stream side (server/net.c). */
uint64_t hs_http_tick_ms(uint64_t a_ns, uint64_t b_ns);

/* Closes every client it owns; frees h once they are closed (call before the
 * final uv_run that drains close callbacks). Accepts NULL. */
void hs_http_free(hs_http *h);

#endif
