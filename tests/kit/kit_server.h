/* kit_server: a real heapstore-server for a test, started as a child process
 * on an ephemeral loopback port and known ready through the readiness
 * handshake of common/hs_spawn.h (the port it writes on --ready-fd), its log,
 * and raw HTTP exchanges with it.
 */
#ifndef HS_KIT_SERVER_H
#define HS_KIT_SERVER_H

#include <stddef.h>
#include <sys/types.h>

typedef struct tk_server {
    pid_t pid;
    int port;
    char db[512];
    char log[512];
} tk_server;

/* Starts build/bin/heapstore-server with --db db --listen 127.0.0.1:port
 * (0: ephemeral) and extra arguments (NULL-terminated), stderr to a log file
 * next to db (appended to: a restarted server's lines follow), and waits
 * for its readiness. Servers still running when the test binary exits are
 * killed. Returns 0 or -1. */
int tk_server_start(tk_server *s, const char *db, int port, const char *const *extra);
/* Sends sig and waits for the exit; returns the exit status (or 128+signal). */
int tk_server_stop(tk_server *s, int sig);
/* 1 if the server's log contains text. */
int tk_log_contains(const tk_server *s, const char *text);

/* A free TCP port on 127.0.0.1 (bound once and released), for servers
 * that cannot report the port they bound. */
int tk_free_port(void);

/* ---- HTTP -------------------------------------------------------------- */

/* Sends raw bytes to 127.0.0.1:port and reads until the peer closes or
 * timeout_ms passes. Returns a malloc'd NUL-terminated answer (or NULL). */
char *tk_exchange(int port, const char *req, size_t len, int timeout_ms);
/* Parses the first response in text: status, a header's value (copied), the
 * body (pointer into text). Returns the status or -1. */
int tk_http_status(const char *text);
int tk_http_header(const char *text, const char *name, char *out, size_t len);
const char *tk_http_body(const char *text);

/* An HTTP request to the server on port (Connection: close; headers are
 * whole "Name: value\r\n" lines or NULL, body may be NULL): the status
 * (-1 when there was no answer) and the body (malloc'ed) in *out_body. */
int tk_http(int port, const char *method, const char *target, const char *headers, const char *body,
            char **out_body);

/* GET path from the server on port as JSON (fails the test unless it
 * answers 200 with JSON). */
typedef struct json_t json_t;
json_t *tk_api_json(int port, const char *path);
/* The sum of field over the rows of array key of j whose "name" is name
 * (0 when none). */
long long tk_rows_sum(const json_t *j, const char *key, const char *name, const char *field);

#endif
