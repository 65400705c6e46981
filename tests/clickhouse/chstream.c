/* chstream: the collector stream the front-end tests replay (chstream.h). */
#include "chstream.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

/* The frames after HELLO of run id: mappings and the rest, symbols, six
 * stacks, CK_STREAM_FRAMES frames of events (allocations and frees of every stack,
 * a heap that grows to a peak near frame 25 and falls), BYE. */
void ck_stream_body(tk_buf *b)
{
    tk_extras(b);
    tk_symbols(b, 0, 12, 0);
    for (uint64_t s = 1; s <= 6; s++) {
        uint64_t pcs[3] = {s, 6 + (s % 3) + 1, 12};
        tk_stack(b, s, pcs, 3);
    }
    uint64_t allocs = 0, frees = 0;
    for (int f = 0; f < CK_STREAM_FRAMES; f++) {
        tk_event ev[24];
        size_t n = 0;
        for (int i = 0; i < 12; i++) {
            uint64_t t = (uint64_t)f * 1000000000ull + (uint64_t)i * 70000000ull + 1;
            uint64_t st = (uint64_t)(i % 6) + 1, size = 64u << (i % 6);
            ev[n++] = (tk_event){t, st, 0, size, size};
            allocs++;
            if (f > 25 || (i + f) % 3 == 0) { /* frees: the heap grows, then falls */
                ev[n++] = (tk_event){t + 1000, st, 1, size, size};
                frees++;
            }
        }
        tk_events(b, ev, n);
    }
    tk_bye(b, (uint64_t)CK_STREAM_FRAMES * 1000000000ull, allocs, frees);
}

const uint8_t ck_stream_run[16] = {0xfe, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07,
                                   0x08, 0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f};

/* Sends header, HELLO (first_seq, flags) and frames [from, to) of body;
 * waits for the ACK of frame to - 1. The fd stays open (returned). */
int ck_send_part(int port, const tk_buf *body, const size_t *off, size_t nf, size_t from, size_t to,
                 uint64_t flags)
{
    tk_buf b = {0};
    tk_header(&b);
    tk_hello(&b, ck_stream_run, from, flags, NULL);
    size_t end = to < nf ? off[to] : body->len;
    tk_buf_append(&b, body->p + off[from], end - off[from]);
    int fd = tk_connect(port);
    assert_true(fd >= 0);
    assert_int_equal(tk_send(fd, b.p, b.len), 0);
    uint64_t got = 0;
    char reason[256] = "";
    int rc = tk_wait_ack(fd, to, &got, reason, sizeof reason, 60000);
    if (rc)
        fprintf(stderr, "ack of %zu: %d (%s), got %llu\n", to, rc, reason, (unsigned long long)got);
    assert_int_equal(rc, 0);
    tk_buf_free(&b);
    return fd;
}
