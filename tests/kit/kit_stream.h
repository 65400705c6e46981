/* kit_stream: the collector's side of the wire for the tests and the load
 * generator: a growable byte buffer that streams are encoded into with the
 * common encoders (header, HELLO, SYMBOLS, STACKS, EVENTS, BYE, the extras,
 * raw frames), and a blocking TCP client that sends them to a real server
 * and reads its ACK and REFUSE frames.
 */
#ifndef HS_KIT_STREAM_H
#define HS_KIT_STREAM_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "hs_proto.h"

/* ---- encoding ---------------------------------------------------------- */

typedef struct tk_buf {
    uint8_t *p;
    size_t len, cap;
} tk_buf;

void tk_buf_free(tk_buf *b);
/* An hs_wr over at least n free bytes at the end of b; tk_buf_commit()
 * then takes what was written. */
hs_wr tk_buf_wr(tk_buf *b, size_t n);
void tk_buf_commit(tk_buf *b, const hs_wr *wr);
void tk_buf_append(tk_buf *b, const void *p, size_t n);

void tk_header(tk_buf *b);
/* A HELLO with the given run id, first_seq and flags; other fields fixed
 * (its resume key is the run id itself, so that resuming works). */
void tk_hello(tk_buf *b, const uint8_t run_id[16], uint64_t first_seq, uint64_t flags,
              const char *token);
/* The same HELLO (first_seq 0, no flags, no token) of a run sampled at
 * sample_bytes. */
void tk_hello_sampled(tk_buf *b, const uint8_t run_id[16], uint64_t sample_bytes);
/* SYMBOLS defining pcs base+1 .. base+n in "file.c"; pc p is function
 * "fn<k>" at line k with k = (p - 1) % modulo + 1 (k = p when modulo is 0),
 * so pcs `modulo` apart are the same symbolized frame. */
void tk_symbols(tk_buf *b, uint64_t base, uint32_t n, uint32_t modulo);
/* One STACKS entry per stack: id, depth, pcs (given). */
void tk_stack(tk_buf *b, uint64_t id, const uint64_t *pcs, uint32_t depth);
typedef struct tk_event {
    uint64_t t; /* absolute, ns since the run's start */
    uint64_t stack;
    int is_free;
    uint64_t size, weight;
} tk_event;
/* One EVENTS frame holding events (times must not decrease). */
void tk_events(tk_buf *b, const tk_event *ev, size_t n);
void tk_bye(tk_buf *b, uint64_t t_end, uint64_t allocs, uint64_t frees);
/* The "extras" of a run, fixed contents: MAPPINGS (2 objects at t=5), PROCESS
 * (rss = 1000 * (i + 1) at t = i * 1000, i < 3), SIZES (bucket 4: 10 allocs of
 * 160 bytes) and DROPS (kind 1 = 7, kind 5 = 3, kind 99 = 1). */
void tk_extras(tk_buf *b);
/* A raw frame with an arbitrary payload. */
void tk_raw_frame(tk_buf *b, uint8_t type, const void *payload, size_t len);

/* Splits an encoded frame list into offsets of each frame (for resending
 * from a sequence number). Returns the count; *out is malloc'ed. */
size_t tk_frame_offsets(const tk_buf *b, size_t start, size_t **out);

/* ---- a client ---------------------------------------------------------- */

/* Connects to 127.0.0.1:port; returns the fd or -1. */
int tk_connect(int port);
/* Writes all of n bytes; 0 or -1. */
int tk_send(int fd, const void *p, size_t n);
/* Reads server frames until an ACK with next_seq >= want arrives (returns
 * 0 and the last next_seq in *got), a REFUSE (returns 1, reason copied to
 * reason), EOF (-1) or the timeout in ms passes (-2). */
int tk_wait_ack(int fd, uint64_t want, uint64_t *got, char *reason, size_t rlen, int timeout_ms);
/* The next server frame of the given type within timeout_ms: 0 with its
 * payload copied to out (at most cap bytes, its length in *n); frames of
 * other types (or longer) are skipped; -1 at EOF, -2 at the timeout. It
 * reads from the same per-thread buffer as tk_wait_ack. */
int tk_read_frame(int fd, int type, uint8_t *out, size_t cap, size_t *n, int timeout_ms);
/* 1 if the peer closed the connection within timeout_ms (after any frames
 * it sent), 0 if not. */
int tk_wait_closed(int fd, int timeout_ms);

#endif
