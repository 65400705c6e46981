/* chstream: a collector's stream for the ClickHouse front-end tests
 * (test_ch_frontends, test_ch_cluster): one run (ck_stream_run, its resume
 * key the same bytes) of mappings, symbols, six stacks and
 * CK_STREAM_FRAMES frames of events a second apart (a heap that grows to a
 * peak near frame 25, then falls), then BYE; and a way to send part of it.
 */
#ifndef HS_CHSTREAM_H
#define HS_CHSTREAM_H

#include <stddef.h>
#include <stdint.h>

#include "hs_testkit.h"

#define CK_STREAM_FRAMES 40

extern const uint8_t ck_stream_run[16];

/* The frames after HELLO, into b. */
void ck_stream_body(tk_buf *b);

/* Connects to port, sends the header, a HELLO (first_seq from, flags) and
 * frames [from, to) of body (off: tk_frame_offsets, nf frames), waits for
 * the ACK of them all (a failed cmocka assertion otherwise); returns the
 * open connection. */
int ck_send_part(int port, const tk_buf *body, const size_t *off, size_t nf, size_t from, size_t to,
                 uint64_t flags);

#endif
