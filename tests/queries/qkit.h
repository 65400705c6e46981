/* qkit: what the HTTP, CLI and end-to-end tests of queries/ share: a real
 * heapstore-server started on an ephemeral loopback port, raw HTTP
 * exchanges, and running the heapstore CLI with its output captured. */
#ifndef HS_QKIT_H
#define HS_QKIT_H

#include <stddef.h>
#include <sys/types.h>

typedef struct qk_server {
    pid_t pid;
    int port;
    char log[512];
} qk_server;

/* Starts $HS_BUILD_DIR/bin/heapstore-server --db db --listen 127.0.0.1:0
 * plus extra args (NULL-terminated). 0 or -1. */
int qk_server_start(qk_server *s, const char *db, const char *const *extra);
void qk_server_stop(qk_server *s);

/* Sends raw bytes to 127.0.0.1:port and reads until the peer closes or
 * timeout_ms passes. Returns a malloc'd NUL-terminated answer (or NULL). */
char *qk_exchange(int port, const char *req, size_t len, int timeout_ms);
int qk_connect(int port);

/* Parses the first response in text: status, a header's value (copied), the
 * body (pointer into text). Returns the status or -1. */
int qk_status(const char *text);
int qk_header(const char *text, const char *name, char *out, size_t len);
const char *qk_body(const char *text);

typedef struct qk_out {
    int code; /* exit code, or 128 + signal */
    char *out, *err;
} qk_out;

/* Runs argv (argv[0] a path) with extra "K=V" environment entries (NULL-
 * terminated, may be NULL; "K=" unsets K) and captures stdout and stderr. */
int qk_run(qk_out *o, const char *const *argv, const char *const *env);
void qk_out_free(qk_out *o);

/* $HS_BUILD_DIR/bin/NAME into out. */
void qk_bin(char *out, size_t len, const char *name);

#endif
