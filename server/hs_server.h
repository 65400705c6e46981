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
 * than HS_CONN_INFLIGHT_MAX bytes wait for the writer. Before HELLO has
 * passed the token check a connection may buffer at most HS_PREAUTH_MAX
 * bytes (its HELLO frame may be no larger), and all such connections
 * together at most HS_PREAUTH_TOTAL_MAX: an unauthenticated peer cannot make
 * the server hold more than that, however many connections it opens.
 *
 * Timeouts (hs_server_config, 0 disables one): a connection that has not
 * sent a complete HELLO within hello_timeout_ns of its accept is closed, as
 * is a stream whose partly received frame has seen no new byte for
 * frame_timeout_ns. An established stream that is merely quiet between
 * frames is never timed out: a profiled program may allocate nothing for
 * hours. HTTP has its own (header and idle timeouts, hs_http.h).
 *
 * The server ignores SIGPIPE (a peer that closes while an answer is being
 * written is an error on that connection only). When all client sockets are
 * taken, a new client displaces the one that has waited longest without
 * finishing its HELLO or its HTTP request head: slow peers cannot hold the
 * connection cap against those that talk.
 *
 * SIGINT/SIGTERM stop accepting and reading, wait until the writer has
 * committed what was read, send the last ACKs and close everything.
 */
#ifndef HS_SERVER_H
#define HS_SERVER_H

#include <stdint.h>

#define HS_DEFAULT_PORT      7459
#define HS_CONN_INFLIGHT_MAX (32u << 20)
/* The collector's HELLO never passes 16 KiB (collector/hs_sender.c encodes it
 * into HS_STR_MAX * 4 bytes, dropping argv when it would not fit); the
 * decoder's ceiling (256 argv strings and 64 label pairs of 4 KiB each, about
 * 1.6 MiB) is far above what any real HELLO needs. 64 KiB leaves 4x the
 * collector's room while keeping an unauthenticated peer's cost small. */
#define HS_PREAUTH_MAX       (64u << 10)
#define HS_PREAUTH_TOTAL_MAX (8u << 20) /* 128 connections at their cap */

typedef struct hs_server_config {
    const char *db_path;
    const char *host;
    int port;               /* 0: an ephemeral port */
    const char *token;      /* NULL: none required; collectors' token, admits HTTP too */
    const char *read_token; /* NULL: none; else HTTP also admits it (never HELLO) */
    const char *web_root;   /* NULL: none */
    int ready_fd;           /* says "PORT\n" there once listening (hs_spawn.h); -1: none */
    uint64_t granularity_ns;
    uint64_t event_time_ns; /* stored event times to multiples of it; 0: exact */
    uint64_t grace_ns;
    uint64_t retain_events_ns;  /* 0: forever */
    uint64_t hello_timeout_ns;  /* accept to a complete HELLO; 0: none */
    uint64_t frame_timeout_ns;  /* a partly received frame without progress; 0: none */
    uint64_t header_timeout_ns; /* HTTP: start of a request to its complete head */
    uint64_t idle_timeout_ns;   /* HTTP: an idle keep-alive connection */
    /* where builds' files are looked for (hs_symbols.h), besides the paths
     * collectors name unless no_local_symbols */
    const char *const *symbol_paths;
    int nsymbol_paths;
    int no_local_symbols;
    int no_symbol_uploads; /* never ask collectors for builds (docs/protocol.md, SYMREQ) */
    /* clickhouse://…: db_path is then the write-ahead buffer, shipped there
     * (hs_chship.h), and the API reads the store at this URL; NULL: none */
    const char *store_url;
    int store_retain_months; /* drop the store's partitions older than this; 0: never */
} hs_server_config;

/* 0 when url names a store this build can use (clickhouse://…), else a
 * negative code and why in err. */
int hs_server_store_check(const char *url, char *err, size_t errlen);

/* Runs the server until a signal stops it. Logs "listening on HOST:PORT"
 * once bound. Returns 0 after a clean stop, else an HS_E* code (with a log
 * line saying what failed). */
int hs_server_run(const hs_server_config *cfg);

#endif
