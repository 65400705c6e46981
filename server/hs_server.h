/* hs_server: the network side of heapstore-server, on one libuv loop.
 *
 * Accepts every client on the one listening port and reads its first byte:
 * 0x89 starts a collector stream (docs/protocol.md), anything else is handed
 * to hs_http. For a stream the loop only reads, splits frames, checks HELLO
 * and the frame types, and batches the frames into jobs for the writer
 * thread (hs_writer); it sends ACK when the writer reports a commit, and
 * closes a connection, with a log line saying why, on any protocol error the
 * writer or the loop finds. Memory per connection is bounded: the input
 * buffer holds at most one frame plus one read, and reading stops while more
 * than HS_CONN_INFLIGHT_MAX bytes wait for the writer.
 *
 * SIGINT/SIGTERM stop accepting and reading, wait until the writer has
 * committed what was read, send the last ACKs and close everything.
 */
#ifndef HS_SERVER_H
#define HS_SERVER_H

#include <stdint.h>

#define HS_DEFAULT_PORT      7459
#define HS_CONN_INFLIGHT_MAX (32u << 20)

typedef struct hs_server_config {
    const char *db_path;
    const char *host;
    int port;             /* 0: an ephemeral port */
    const char *token;    /* NULL: none required */
    const char *web_root; /* NULL: none */
    uint64_t granularity_ns;
    uint64_t grace_ns;
    uint64_t retain_events_ns; /* 0: forever */
} hs_server_config;

/* Runs the server until a signal stops it. Logs "listening on HOST:PORT"
 * once bound. Returns 0 after a clean stop, else an HS_E* code (with a log
 * line saying what failed). */
int hs_server_run(const hs_server_config *cfg);

#endif
